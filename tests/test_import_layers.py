"""The project's layout and its layers: the recipe at the root, the rest in a few packages, and imports that run
one way, between files and between folders taken as units.

A unit is a root module or a whole package (utils/, kernels/, ...). Each unit sits in one layer here and imports
only units of its own layer or below; no import cycle exists between modules, nor between units. A new module
goes into a package of its concern; one that needs a unit above its own is in the wrong place, or the thing it
needs belongs lower down.
"""

from __future__ import annotations

import ast

import pytest

from conftest import PACKAGES, ROOT, project_modules

# The root holds the recipe a reader follows and the commands people type, and no more than this many modules.
MAX_ROOT_MODULES = 18

# From the bottom: the leaves, then text and kernels, the model, data and weights on disk, training, the task
# cores, the entry scripts a user runs, and the suite that runs several of them.
LAYERS = {
    "leaves": {"utils", "bert_config", "lr_scheduler"},
    "text and kernels": {"kernels", "corpus", "tokenizer"},
    "model": {"loss", "modeling", "optimizer"},
    "data and weights": {"preprocessing", "pretraining_dataset", "checkpoints"},
    "training": {"training"},
    "tasks": {"finetuning", "inference", "squad_evaluate", "squad_utils"},
    "entry": {"convert_checkpoint", "create_pretraining_data", "lddl_preprocess", "plot_report", "run_glue",
              "run_pretraining", "run_squad"},
    "suites": {"downstream"},
}
LEVEL = {unit: level for level, units in enumerate(LAYERS.values()) for unit in units}


def module_name(path) -> str:
    """`modeling` for a root module, `utils.atomic_io` for one in a package."""
    return path.stem if path.parent == ROOT else f"{path.parent.name}.{path.stem}"


def project_imports() -> dict[str, set[str]]:
    """Each project module (dotted name) and the project modules it imports, anywhere in the file."""
    paths = project_modules()
    modules = {module_name(path) for path in paths}
    graph = {}
    for path in paths:
        imported = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imported |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{path}: a relative import; the project imports from the root"
                imported |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
        name = module_name(path)
        graph[name] = {module for module in imported if module in modules and module != name}
    return graph


def unit_of(module: str) -> str:
    return module.split(".")[0]


def unit_imports() -> dict[str, set[str]]:
    """Each unit and the other units its modules import."""
    graph: dict[str, set[str]] = {}
    for module, imported in project_imports().items():
        graph.setdefault(unit_of(module), set()).update(unit_of(name) for name in imported)
    return {unit: imported - {unit} for unit, imported in graph.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    done, path = set(), []

    def visit(node: str) -> list[str] | None:
        if node in path:
            return [*path[path.index(node):], node]
        if node in done:
            return None
        path.append(node)
        for name in sorted(graph[node]):
            if cycle := visit(name):
                return cycle
        path.pop()
        done.add(node)
        return None

    for node in sorted(graph):
        if cycle := visit(node):
            return cycle
    return None


def test_the_root_holds_at_most_18_modules():
    assert len(list(ROOT.glob("*.py"))) <= MAX_ROOT_MODULES


@pytest.mark.parametrize("package", PACKAGES)
def test_each_package_says_what_it_holds_and_who_may_import_it(package):
    init = ROOT / package / "__init__.py"
    docstring = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
    assert docstring and "import" in docstring.lower(), f"{init}: no docstring saying what imports what"
    assert 0 < len(list((ROOT / package).glob("*.py"))) - 1 <= 10, f"{package}/ holds more than one concern"


def test_every_unit_has_one_layer():
    assert set(unit_imports()) == set(LEVEL)
    assert sum(len(units) for units in LAYERS.values()) == len(LEVEL)


def test_no_unit_imports_one_above_its_layer():
    names = list(LAYERS)
    upward = [f"{unit} ({names[LEVEL[unit]]}) imports {name} ({names[LEVEL[name]]})"
              for unit, imported in unit_imports().items() for name in imported if LEVEL[name] > LEVEL[unit]]
    assert not upward


def test_no_import_cycle_between_modules():
    assert find_cycle(project_imports()) is None


def test_no_import_cycle_between_folders_taken_as_units():
    assert find_cycle(unit_imports()) is None


def test_the_checks_see_a_cycle_and_an_upward_import():
    # The checks themselves can fail: a two-unit cycle is found, and the layers rank utils/ below training/.
    assert find_cycle({"utils": {"training"}, "training": {"utils"}}) == ["training", "utils", "training"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    assert LEVEL["utils"] < LEVEL["training"] < LEVEL["finetuning"] < LEVEL["downstream"]
    assert "utils.atomic_io" in project_imports()["checkpoints.checkpoint"]
