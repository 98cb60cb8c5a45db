"""Loading a checkpoint never runs code, at every entry point; safetensors in and out of every weights path.

- The source tree has no unrestricted load (paddle.load, paddle.static.load_program_state, pickle.load(s),
  pickle.Unpickler, np.load with pickles) outside paddle_files.py.
- A payload whose unpickling would create a marker file, planted where a real file can hold one (an entry of
  the top-level dict, a nested optimizer state, the scheduler state), is refused by each entry point run as a
  process: non-zero exit, one line naming the file and the global, and no marker.
- Every kind of checkpoint the project writes reads through paddle_files as paddle.load reads it.
- --from-pretrained-params takes .safetensors, and --save-safetensors writes the .pdparams weights bit for bit.
"""

from __future__ import annotations

import ast
import os
import pickle
import shutil
from pathlib import Path

import numpy as np
import paddle
import pytest
import safetensors.numpy

import convert_checkpoint
import run_glue
import run_squad
from checkpoints.paddle_files import read_paddle_file
from conftest import ROOT
from fine_tuning_runs import common_argv, fine_tuning_workspace, params, run_in_process, run_script
from pretraining_runs import pretraining_argv, step_folder, train

# ---------------------------------------------------------------------------------------------
# The source tree
# ---------------------------------------------------------------------------------------------

# Calls that unpickle without restriction (paddle.load, load_program_state and np.load with pickles all do).
UNRESTRICTED_LOADS = {
    "paddle.load", "paddle.framework.load", "paddle.framework.io.load", "paddle.static.load",
    "paddle.static.load_program_state", "paddle.static.io.load_program_state", "pickle.load", "pickle.loads",
    "pickle.Unpickler", "pickle._Unpickler", "_pickle.load", "_pickle.loads", "_pickle.Unpickler",
}
# The restricted readers: Paddle's pickles, and torch .bin files whose Unpickler admits only torch.save's globals.
RESTRICTED_READERS = {"checkpoints/paddle_files.py": {"pickle.Unpickler"}}


def unrestricted_loads(source: str) -> list[tuple[int, str]]:
    """(line, dotted name) of every reference to an UNRESTRICTED_LOADS name, through `import x as y` and
    `from x import y` aliases, and of every np.load not given allow_pickle=False explicitly or by default."""
    tree = ast.parse(source)
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases.update((alias.asname or alias.name.split(".")[0],
                            alias.name if alias.asname else alias.name.split(".")[0]) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            aliases.update((alias.asname or alias.name, f"{node.module}.{alias.name}") for alias in node.names)

    def dotted(node: ast.AST) -> str | None:
        if isinstance(node, ast.Name):
            return aliases.get(node.id)
        if isinstance(node, ast.Attribute):
            base = dotted(node.value)
            return f"{base}.{node.attr}" if base else None
        return None

    found = []
    for node in ast.walk(tree):
        name = dotted(node) if isinstance(node, ast.Name | ast.Attribute) else None
        if name in UNRESTRICTED_LOADS:
            found.append((node.lineno, name))
        if isinstance(node, ast.Call) and dotted(node.func) == "numpy.load":
            allow = [keyword.value for keyword in node.keywords if keyword.arg == "allow_pickle"]
            if allow and not (isinstance(allow[0], ast.Constant) and allow[0].value is False):
                found.append((node.lineno, "numpy.load(allow_pickle=...)"))
    return found


def project_sources() -> list[Path]:
    return sorted(path for path in ROOT.rglob("*.py")
                  if path.relative_to(ROOT).parts[0] not in ("tests", "benchmarks") and ".git" not in path.parts)


def test_no_unrestricted_load_outside_the_restricted_readers():
    sources = project_sources()
    assert {"paddle_files.py", "weights.py", "checkpoint.py", "convert_checkpoint.py"} <= {p.name for p in sources}
    offenders = []
    for path in sources:
        allowed = RESTRICTED_READERS.get(str(path.relative_to(ROOT)), set())
        offenders += [f"{path.relative_to(ROOT)}:{line} {name}"
                      for line, name in unrestricted_loads(path.read_text()) if name not in allowed]
    assert offenders == []


@pytest.mark.parametrize("source, name", [
    ("import paddle\nstate = paddle.load(path)", "paddle.load"),
    ("import paddle as p\nload = p.static.load_program_state", "paddle.static.load_program_state"),
    ("from paddle import load\nstate = load(path)", "paddle.load"),
    ("from paddle.static import load_program_state as lps\nlps(prefix)", "paddle.static.load_program_state"),
    ("import pickle\npickle.loads(data)", "pickle.loads"),
    ("from pickle import Unpickler\nclass Reader(Unpickler): pass", "pickle.Unpickler"),
    ("import numpy as np\nnp.load(path, allow_pickle=True)", "numpy.load(allow_pickle=...)"),
])
def test_the_source_scan_finds_each_spelling(source, name):
    assert [found for _, found in unrestricted_loads(source)] == [name]


def test_the_source_scan_passes_safe_code():
    assert unrestricted_loads("import numpy as np\nimport paddle\nnp.load(p)\nnp.load(p, allow_pickle=False)\n"
                              "paddle.save(state, path)\nmodel.load(path)") == []


# ---------------------------------------------------------------------------------------------
# Real files: a pretraining run, a fine-tuning model, and a planted payload
# ---------------------------------------------------------------------------------------------


class Payload:
    """Unpickles as os.system("touch <marker>"), what the issue's crafted .pdparams did."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


REFUSED_GLOBAL = f"{os.system.__module__}.system"  # posix.system on Linux


def _in_top_level_dict(state: dict, payload: Payload) -> None:
    state[next(key for key in state if isinstance(state[key], np.ndarray))] = payload


def _in_nested_optimizer_state(state: dict, payload: Payload) -> None:
    # An optimizer with multi_precision saves its float32 copies of the parameters as a nested dict.
    state["master_weights"] = {"linear_0.w_0": payload}


def _in_scheduler_state(state: dict, payload: Payload) -> None:
    state.setdefault("LR_Scheduler", {"last_lr": 0.1})["last_epoch"] = payload


POSITIONS = {"top-level dict": _in_top_level_dict, "nested optimizer state": _in_nested_optimizer_state,
             "scheduler state": _in_scheduler_state}


def plant(source: Path, target: Path, position: str, marker: Path) -> Path:
    """A copy of the real file `source` at `target` with the payload planted at `position`."""
    with open(source, "rb") as trusted:  # our own file, read unrestricted to plant the payload in it
        state = pickle.load(trusted, encoding="latin1")
    POSITIONS[position](state, Payload(marker))
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(pickle.dumps(state, protocol=4))
    pickle.loads(target.read_bytes())  # the payload is live: unrestricted unpickling runs it
    assert marker.exists()
    marker.unlink()
    return target


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    """A 2-step pretraining run with --save-safetensors (checkpoints at steps 1 and 2), a tiny model with its
    pretraining checkpoint (fine_tuning_runs.write_tiny_model), 6 SQuAD questions and 16 MRPC pairs."""
    folder = tmp_path_factory.mktemp("safe")
    pretraining = folder / "pretraining"
    pretraining.mkdir()
    assert train(pretraining_argv(pretraining, "--max-steps", "2", "--num-steps-per-checkpoint", "1",
                                  "--save-safetensors")) == 0
    return fine_tuning_workspace(folder, squad={"squad.json": (1, 6)}, mrpc={"mrpc.tsv": ("train", 16)})


def pretraining_step(workspace: Path, step: int) -> Path:
    return step_folder(workspace / "pretraining" / "out", step)


def tiny_pdparams(workspace: Path) -> Path:
    return workspace / "pretrain" / "1000" / "bert_paddle.pdparams"


# ---------------------------------------------------------------------------------------------
# Payloads at every entry point
# ---------------------------------------------------------------------------------------------


def pretraining_from_weights(workspace: Path, tmp_path: Path, position: str, marker: Path):
    crafted = plant(pretraining_step(workspace, 2) / "bert_paddle.pdparams",
                    tmp_path / "weights" / "bert_paddle.pdparams", position, marker)
    return "run_pretraining.py", pretraining_argv(tmp_path, "--from-pretrained-params", crafted.parent), crafted


def pretraining_resume(workspace: Path, tmp_path: Path, position: str, marker: Path):
    phase_folder = tmp_path / "resume" / "custom" / "phase1"
    shutil.copytree(pretraining_step(workspace, 2), phase_folder / "2")
    crafted = plant(pretraining_step(workspace, 2) / "bert_paddle.pdopt", phase_folder / "2" / "bert_paddle.pdopt",
                    position, marker)
    argv = pretraining_argv(tmp_path, "--from-checkpoint", phase_folder, "--last-step-of-checkpoint", "2")
    return "run_pretraining.py", argv, crafted


def squad_from_weights(workspace: Path, tmp_path: Path, position: str, marker: Path):
    crafted = plant(tiny_pdparams(workspace), tmp_path / "model.pdparams", position, marker)
    argv = [*common_argv(workspace, tmp_path / "out"), "--do-train", "--train-file", workspace / "squad.json",
            "--max-seq-length", "128", "--from-pretrained-params", crafted]
    return "run_squad.py", argv, crafted


def glue_from_weights(workspace: Path, tmp_path: Path, position: str, marker: Path):
    crafted = plant(tiny_pdparams(workspace), tmp_path / "model.pdparams", position, marker)
    argv = ["--task-name", "mrpc", *common_argv(workspace, tmp_path / "out"), "--do-train", "--train-file",
            workspace / "mrpc.tsv", "--from-pretrained-params", crafted]
    return "run_glue.py", argv, crafted


def paddle2hf(workspace: Path, tmp_path: Path, position: str, marker: Path):
    crafted = plant(tiny_pdparams(workspace), tmp_path / "model.pdparams", position, marker)
    return "convert_checkpoint.py", ["paddle2hf", crafted, workspace / "config.json", tmp_path / "out"], crafted


ENTRY_POINTS = {
    "run_pretraining.py --from-pretrained-params": pretraining_from_weights,
    "run_pretraining.py resume (.pdopt)": pretraining_resume,
    "run_squad.py --from-pretrained-params": squad_from_weights,
    "run_glue.py --from-pretrained-params": glue_from_weights,
    "convert_checkpoint.py paddle2hf": paddle2hf,
}


@pytest.mark.slow  # in the slow tier (tests/conftest.py)
@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("entry_point", ENTRY_POINTS)
def test_payload_is_refused_by_every_entry_point(workspace, tmp_path, entry_point, position):
    marker = tmp_path / "marker"
    script, argv, crafted = ENTRY_POINTS[entry_point](workspace, tmp_path, position, marker)
    result = run_script(script, argv, timeout=300)
    assert result.returncode != 0, result.stdout
    last_line = result.stderr.strip().splitlines()[-1]
    prefix = "convert_checkpoint.py paddle2hf" if script == "convert_checkpoint.py" else script
    assert last_line.startswith(f"{prefix}: {crafted}: refuses to load global {REFUSED_GLOBAL} ("), result.stderr
    assert not marker.exists()
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*.pdparams"))


# ---------------------------------------------------------------------------------------------
# Round trip: what the project writes reads back as paddle.load reads it
# ---------------------------------------------------------------------------------------------


def assert_reads_as_paddle_load(path: Path) -> None:
    read, loaded = read_paddle_file(path), paddle.load(str(path))
    assert list(read) == list(loaded), path
    for key, expected in loaded.items():
        if isinstance(expected, paddle.Tensor):
            assert (read[key].dtype, read[key].shape) == (expected.dtype, expected.shape), (path, key)
            # An unnamed tensor (a converted file holds arrays) gets a fresh generated_tensor_<n> at each creation.
            if not expected.name.startswith("generated_tensor_"):
                assert read[key].name == expected.name, (path, key)
            assert read[key].numpy().tobytes() == expected.numpy().tobytes(), (path, key)
        else:
            assert read[key] == expected, (path, key)


def test_every_checkpoint_kind_reads_through_the_restricted_reader(workspace, tmp_path, capsys):
    converted = tmp_path / "converted.pdparams"
    convert_checkpoint.main(["hf2paddle", str(ROOT / "tests" / "fixtures" / "tiny_bert_torch"), str(converted)])
    output_dir, _ = fine_tune(run_squad, workspace, tmp_path / "squad", "--from-pretrained-params",
                              tiny_pdparams(workspace))
    files = [pretraining_step(workspace, step) / f"bert_paddle{suffix}" for step in (1, 2)
             for suffix in (".pdparams", ".pdopt")]
    files += [tiny_pdparams(workspace), converted, output_dir / "bert_paddle.pdparams"]
    for path in files:
        assert_reads_as_paddle_load(path)


# ---------------------------------------------------------------------------------------------
# safetensors in and out
# ---------------------------------------------------------------------------------------------


def assert_safetensors_equal_pdparams(safetensors_path: Path, params_path: Path) -> None:
    """The .safetensors (read by safetensors' own NumPy reader) holds the .pdparams' tensors bit for bit."""
    shared = safetensors.numpy.load_file(safetensors_path)
    expected = {name: value.numpy() for name, value in paddle.load(str(params_path)).items()}
    assert sorted(shared) == sorted(expected)
    for name, value in expected.items():
        assert value.dtype == np.float32, name
        assert (shared[name].dtype, shared[name].shape, shared[name].tobytes()) == (value.dtype, value.shape,
                                                                                   value.tobytes()), name
    umask = os.umask(0)
    os.umask(umask)
    assert safetensors_path.stat().st_mode & 0o777 == 0o666 & ~umask


def save_as_safetensors(params_path: Path, target: Path) -> Path:
    """The .pdparams' weights as a .safetensors, written by safetensors' own NumPy writer."""
    target.parent.mkdir(parents=True, exist_ok=True)
    safetensors.numpy.save_file({name: value.numpy() for name, value in paddle.load(str(params_path)).items()},
                                str(target))
    return target


def test_pretraining_saves_its_final_weights_as_safetensors_too(workspace):
    assert not (pretraining_step(workspace, 1) / "bert_paddle.safetensors").exists()  # only the final weights
    final = pretraining_step(workspace, 2)
    assert_safetensors_equal_pdparams(final / "bert_paddle.safetensors", final / "bert_paddle.pdparams")


def test_pretraining_starts_from_safetensors_as_from_the_pdparams(workspace, tmp_path):
    step1 = pretraining_step(workspace, 1) / "bert_paddle.pdparams"
    only_safetensors = save_as_safetensors(step1, tmp_path / "only" / "bert_paddle.safetensors")
    starts = {"pdparams folder": step1.parent, "safetensors file": only_safetensors,
              "safetensors folder": only_safetensors.parent}
    trained = {}
    for name, start in starts.items():
        run_folder = tmp_path / name.replace(" ", "_")
        run_folder.mkdir()
        assert train(pretraining_argv(run_folder, "--max-steps", "3", "--warmup-proportion", "0",
                                     "--from-pretrained-params", str(start))) == 0
        trained[name] = paddle.load(str(step_folder(run_folder / "out", 3) / "bert_paddle.pdparams"))
    reference = trained.pop("pdparams folder")
    for name, state in trained.items():
        for key, value in reference.items():
            assert state[key].numpy().tobytes() == value.numpy().tobytes(), (name, key)
    # and the start was the file's weights, not a fresh initialisation: three steps moved them only a little
    start_weights = paddle.load(str(step1))["bert.embeddings.word_embeddings.weight"].numpy()
    moved = reference["bert.embeddings.word_embeddings.weight"].numpy() - start_weights
    assert 0 < np.abs(moved).max() < 0.1


def fine_tune(script, workspace: Path, output_dir: Path, *extra) -> tuple[Path, list[dict]]:
    """Three updates of the tiny model on the task's slice (SQuAD or MRPC), in process."""
    if script is run_squad:
        task = ["--train-file", workspace / "squad.json", "--max-seq-length", "128"]
    else:
        task = ["--task-name", "mrpc", "--train-file", workspace / "mrpc.tsv"]
    argv = [*common_argv(workspace, output_dir), "--do-train", *task, "--max-steps", "3", *extra]
    return run_in_process(script.main, argv, output_dir)


@pytest.mark.parametrize("script", [run_squad, run_glue], ids=["run_squad", "run_glue"])
def test_fine_tuning_reads_and_writes_safetensors(workspace, tmp_path, script):
    from_safetensors = save_as_safetensors(tiny_pdparams(workspace), tmp_path / "start" / "bert_paddle.safetensors")
    reference, _ = fine_tune(script, workspace, tmp_path / "from_pdparams", "--from-pretrained-params",
                             tiny_pdparams(workspace))
    assert not (reference / "bert_paddle.safetensors").exists()
    for start in (from_safetensors, from_safetensors.parent):
        output_dir, _ = fine_tune(script, workspace, tmp_path / f"from_{start.name}", "--from-pretrained-params",
                                  start, "--save-safetensors")
        fine_tuned = params(output_dir)
        for name, value in params(reference).items():
            assert fine_tuned[name].tobytes() == value.tobytes(), name
        assert_safetensors_equal_pdparams(output_dir / "bert_paddle.safetensors", output_dir / "bert_paddle.pdparams")
