"""The project's modules in layers: each imports only modules of its own layer or below, and no import cycle exists.

A new module must be placed in a layer here; a module that needs one above it is in the wrong layer, or the
thing it needs belongs lower down."""

from __future__ import annotations

import ast

from conftest import ROOT

# From the bottom: leaves that know no project module but their own layer's, then data, the training and model
# core, the task cores, the entry scripts a user runs, and the suites that run several of them.
LAYERS = {
    "leaves": {"atomic_io", "bert_config", "cached_wordpiece", "cli", "corpus", "cpu_ops", "dllog", "downstream_plan",
               "feature_batching", "folder_lock", "glue_metrics", "hf_names", "loss", "lr_scheduler", "masking",
               "mlm_baselines", "ngc_weights", "onnx_backend", "openvino_backend", "paddle_files", "paddle_private",
               "pretraining_pairs", "progress", "squad_evaluate", "time_budget", "tokenizer", "visualdl_log"},
    "data": {"glue_data", "packing", "preprocess_pipeline", "pretraining_dataset", "shard_formats",
             "squad_utils"},
    "core": {"amp", "checkpoint", "cpu_kernels", "gradient_merge", "hf_weights", "modeling", "optimizer",
             "pretraining_eval", "pretraining_report", "runtime", "weights"},
    "tasks": {"finetune", "inference"},
    "entry": {"convert_checkpoint", "create_pretraining_data", "lddl_preprocess", "plot_report", "run_glue",
              "run_pretraining", "run_squad"},
    "suites": {"downstream"},
}
LEVEL = {module: level for level, modules in enumerate(LAYERS.values()) for module in modules}


def project_imports() -> dict[str, set[str]]:
    """Each top-level module of the project and the project modules it imports (anywhere in the file)."""
    modules = {path.stem for path in ROOT.glob("*.py")}
    graph = {}
    for path in ROOT.glob("*.py"):
        imported = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
        graph[path.stem] = {name for name in imported if name in modules and name != path.stem}
    return graph


def test_every_module_has_one_layer():
    assert set(project_imports()) == set(LEVEL)
    assert sum(len(modules) for modules in LAYERS.values()) == len(LEVEL)


def test_no_module_imports_one_above_its_layer():
    upward = [f"{module} ({layer}) imports {name} ({list(LAYERS)[LEVEL[name]]})"
              for module, imported in project_imports().items() for name in imported
              for layer in [list(LAYERS)[LEVEL[module]]] if LEVEL[name] > LEVEL[module]]
    assert not upward


def test_no_import_cycle():
    graph, done, path = project_imports(), set(), []

    def visit(module: str) -> None:
        if module in path:
            raise AssertionError("import cycle: " + " -> ".join([*path[path.index(module):], module]))
        if module not in done:
            path.append(module)
            for name in sorted(graph[module]):
                visit(name)
            path.pop()
            done.add(module)

    for module in sorted(graph):
        visit(module)
