"""Fault cases of downstream.py and of the recipe scripts' logs (issue 66): a narrower rerun keeps the folder's other
tasks in its summary, a damaged result names its file, a fine-tuned checkpoint starts each task without its trained
head, the workers die with the run, a second script run into a folder that a live run holds leaves that run's log as
it was, Ctrl-C of run_downstream.sh says what it kept, and a launcher that cannot import Paddle says so.

Each case checks the exit status, that the message is one line naming the file or folder at fault, and that the
files written before are intact by checksum. A signal is sent once the child has said it reached the phase to test
(a mark file, a line), never after a fixed sleep.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import paddle
import pytest

import downstream
import run_glue
import run_squad
from bert_config import BertConfig
from conftest import ROOT, require_shared
from fine_tuning_runs import tiny_config
from finetuning import finetune
from finetuning.downstream_plan import TASKS
from interrupts import wait_for
from messages import assert_one_line
from modeling import BertForSequenceClassification
from recipe_fakes import make_fakes, preset, script_args
from test_downstream import finished_quick_run, quick_argv, write_step_folder
from utils import folder_lock
from utils.cli import run_main

SCRIPTS = ROOT / "scripts"


def checksums(folder: Path) -> dict[str, str]:
    """sha256 of every file under folder, by path, but the lock files, which each run rewrites with its PID."""
    return {str(path): hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(folder.rglob("*"))
            if path.is_file() and not path.name.startswith(folder_lock.LOCK_NAME.removesuffix(".lock"))}


def assert_intact(before: dict[str, str]) -> None:
    """Every file of the snapshot is still there with the same bytes."""
    for path, digest in before.items():
        assert Path(path).is_file(), f"{path} is gone"
        assert hashlib.sha256(Path(path).read_bytes()).hexdigest() == digest, f"{path} changed"


def run_downstream(argv: list[str], capsys) -> tuple[int, str]:
    """(exit status, stderr) of `python downstream.py argv`, run in this process as its __main__ runs it."""
    capsys.readouterr()
    status = run_main(lambda: downstream.main(argv), "downstream.py")
    return status, capsys.readouterr().err


def refuse_to_fine_tune(monkeypatch) -> None:
    """Any unit that runs fails the test: a case whose runs are all done must not start one."""
    monkeypatch.setattr(run_glue, "main", lambda argv: pytest.fail(f"a unit ran: {argv}"))
    monkeypatch.setattr(run_squad, "main", lambda argv: pytest.fail(f"a unit ran: {argv}"))


@pytest.fixture(scope="module")
def five_tasks(tmp_path_factory) -> tuple[Path, Path]:
    """(checkpoint, output folder) of a finished --quick run of all five tasks; a case works on a copy."""
    return finished_quick_run(tmp_path_factory.mktemp("five-tasks"))


def copy_of(finished: Path, target: Path) -> Path:
    shutil.copytree(finished, target)
    return target


# ---------------------------------------------------------------------------------------------------------------
# A narrower rerun (issue 66, item 2)


def test_a_narrower_rerun_summarises_every_task_of_the_folder(five_tasks, tmp_path, monkeypatch):
    checkpoint, finished = five_tasks
    output_dir = copy_of(finished, tmp_path / "out")
    # The copy's own data subsets: the summary names them by path.
    before = json.loads((output_dir / "downstream.json").read_text().replace(str(finished), str(output_dir)))
    table = (output_dir / "downstream.md").read_bytes()
    refuse_to_fine_tune(monkeypatch)
    downstream.main(quick_argv(checkpoint, output_dir, "--tasks", "mrpc"))
    after = json.loads((output_dir / "downstream.json").read_text())
    assert list(after["tasks"]) == list(TASKS)
    for summary in (before, after):
        summary.pop("wall_seconds_of_this_invocation")
    assert after == before
    assert (output_dir / "downstream.md").read_bytes() == table


def test_a_narrower_rerun_beside_unfinished_runs_of_another_task_is_refused(five_tasks, tmp_path, monkeypatch,
                                                                            capsys):
    checkpoint, finished = five_tasks
    output_dir = copy_of(finished, tmp_path / "out")
    (output_dir / "units" / "rte-seed1" / "result.json").unlink()  # as a run killed during RTE leaves it
    before = checksums(output_dir)
    refuse_to_fine_tune(monkeypatch)
    status, stderr = run_downstream(quick_argv(checkpoint, output_dir, "--tasks", "mrpc"), capsys)
    assert status == 1
    assert_one_line(stderr, "downstream.py: ", "--tasks", "rte", output_dir / "units" / "rte-seed1")
    assert_intact(before)


# ---------------------------------------------------------------------------------------------------------------
# A result file read back (issue 66, items 3 and 5)


def damaged(text: str, damage: str) -> str:
    """A unit's result.json text with one kind of damage."""
    if damage == "torn":
        return text[:len(text) // 2]
    result = json.loads(text)
    if damage == "a list":
        return json.dumps([result])
    if damage == "a missing score":
        del result["scores"]["f1"]
    elif damage == "a score that is no number":
        result["scores"]["accuracy"] = "high"
    elif damage == "no seconds":
        del result["seconds"]
    return json.dumps(result)


@pytest.mark.parametrize("damage", ["torn", "a list", "a missing score", "a score that is no number", "no seconds"])
def test_a_damaged_result_is_one_line_naming_its_file(five_tasks, tmp_path, monkeypatch, capsys, damage):
    checkpoint, finished = five_tasks
    output_dir = copy_of(finished, tmp_path / "out")
    result_file = output_dir / "units" / "mrpc-seed1" / "result.json"
    result_file.write_text(damaged(result_file.read_text(), damage))
    before = checksums(output_dir)
    refuse_to_fine_tune(monkeypatch)
    status, stderr = run_downstream(quick_argv(checkpoint, output_dir, "--tasks", "mrpc"), capsys)
    assert status == 1
    assert_one_line(stderr, f"downstream.py: {result_file}: ", "delete")
    assert_intact(before)


# ---------------------------------------------------------------------------------------------------------------
# A fine-tuned checkpoint (issue 66, item 4)

HEAD_VALUE = 0.5  # no initialiser draws a whole tensor of one value


def write_fine_tuned(folder: Path) -> dict[str, np.ndarray]:
    """A fine-tuned output as run_glue.py writes one (bert_paddle.pdparams and its config), with SQuAD's head too;
    both heads hold HEAD_VALUE everywhere. Returns its state."""
    folder.mkdir(parents=True)
    config = BertConfig.from_dict(tiny_config())
    paddle.seed(4321)
    state = {name: value.numpy() for name, value in BertForSequenceClassification(config, 2).state_dict().items()}
    for name in ("classifier.weight", "classifier.bias"):
        state[name] = np.full_like(state[name], HEAD_VALUE)
    state["qa_outputs.weight"] = np.full((config.hidden_size, 2), HEAD_VALUE, dtype="float32")
    state["qa_outputs.bias"] = np.full((2,), HEAD_VALUE, dtype="float32")
    paddle.save({name: paddle.to_tensor(value) for name, value in state.items()}, str(folder / "bert_paddle.pdparams"))
    (folder / "bert_paddle_config.json").write_text(config.to_json_string())
    return state


def test_a_fine_tuned_checkpoint_starts_each_task_from_its_encoder_only(tmp_path, monkeypatch):
    saved = write_fine_tuned(tmp_path / "glue-output")
    built = {}
    build_model = finetune.build_model

    def recording_build_model(args, make, session):
        model = build_model(args, make, session)
        built[getattr(args, "task_name", None) or "squad"] = {
            name: value.numpy() for name, value in model.state_dict().items()}
        return model

    monkeypatch.setattr(finetune, "build_model", recording_build_model)
    output_dir = tmp_path / "out"
    downstream.main(quick_argv(tmp_path / "glue-output", output_dir, "--tasks", "mrpc,squad"))
    for task, head in (("mrpc", "classifier"), ("squad", "qa_outputs")):
        for name in (f"{head}.weight", f"{head}.bias"):
            assert not np.isclose(built[task][name], HEAD_VALUE).any(), f"{task} started from the saved {name}"
        encoder = [name for name in saved if name.startswith("bert.encoder.")]
        assert encoder and all(np.array_equal(built[task][name], saved[name]) for name in encoder)
    summary = json.loads((output_dir / "downstream.json").read_text())
    weights_file = tmp_path / "glue-output" / "bert_paddle.pdparams"
    assert summary["weights"]["weights_sha256"] == hashlib.sha256(weights_file.read_bytes()).hexdigest()
    assert summary["weights"]["task_heads_not_loaded"] == [
        "classifier.bias", "classifier.weight", "qa_outputs.bias", "qa_outputs.weight"]
    assert not list(output_dir.rglob("*.pdparams"))  # the encoder-only copy the units loaded is gone


# ---------------------------------------------------------------------------------------------------------------
# kill -9 of downstream.py (issue 66, item 2)

# downstream.py's entry with each unit held in run_glue.main: a mark file unit-<pid> is written, and the unit waits
# there. A spawned worker runs this file first (multiprocessing's __mp_main__), so the patch holds there too.
HELD_UNITS = f"""
import os, sys
sys.path[:0] = [{str(ROOT)!r}, {str(ROOT / "tests")!r}]
from pathlib import Path

import run_glue
from interrupts import pause_forever


def held_unit(argv):
    Path(os.environ["MARKS"], f"unit-{{os.getpid()}}").touch()
    pause_forever()


run_glue.main = held_unit

if __name__ == "__main__":
    import downstream
    from utils.cli import run_main
    sys.exit(run_main(lambda: downstream.main(sys.argv[1:]), "downstream.py"))
"""


def ended(pid: int) -> bool:
    """Whether the process has ended (gone, or a zombie that no parent reaps: an orphan's new parent may not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def test_the_workers_die_with_a_killed_run(tmp_path):
    checkpoint = write_step_folder(tmp_path / "phase1" / "1000")
    (tmp_path / "held_units.py").write_text(HELD_UNITS)
    marks = tmp_path / "marks"
    marks.mkdir()
    output_dir = tmp_path / "out"
    process = subprocess.Popen(
        [sys.executable, str(tmp_path / "held_units.py"),
         *quick_argv(checkpoint, output_dir, "--tasks", "mrpc,rte", "--jobs", "2")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT, env={**os.environ, "MARKS": str(marks)},
        start_new_session=True)
    workers: list[int] = []
    try:
        wait_for(lambda: len(list(marks.iterdir())) == 2 or process.poll() is not None, 180, "both units to start")
        assert process.poll() is None, f"downstream.py ended with status {process.returncode}"
        workers = [int(mark.name.removeprefix("unit-")) for mark in marks.iterdir()]
        process.kill()
        process.wait(timeout=30)
        wait_for(lambda: all(ended(pid) for pid in workers), 30, "the workers to end with downstream.py")
    finally:  # nothing outlives the test, whatever failed
        for pid in [process.pid, *workers]:
            if not ended(pid):
                os.kill(pid, signal.SIGKILL)
    assert not list((output_dir / "units").rglob("result.json"))
    # The folder is free at once: nothing of the killed run holds it or writes into it.
    folder_lock.hold(output_dir, "--output-dir")
    folder_lock.release(output_dir)


# ---------------------------------------------------------------------------------------------------------------
# A second script run into a folder that a live run holds (issue 66, item 2)

# A live run: a Python process that holds the folder's lock (folder_lock.py) until its stdin closes.
HOLDER = ("import sys; from utils import folder_lock; folder_lock.hold(sys.argv[1], '--output-dir'); "
          "print('held', flush=True); sys.stdin.read()")


@contextlib.contextmanager
def live_run(folder: Path) -> Iterator[subprocess.Popen]:
    """A live Python run holding folder's lock meanwhile."""
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert holder.stdout.readline() == "held\n"
        yield holder
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)


def script_case(script: str, tmp_path: Path) -> tuple[list[str], Path, Path, dict[str, str]]:
    """(arguments, the folder the script's Python run locks, the file a live run writes its output to, extra
    environment) of a run of script into tmp_path's folders."""
    out = tmp_path / "out"
    if script == "run_downstream.sh":
        return [str(tmp_path / "checkpoint"), str(out), "None", "quick"], out, out / "logfile", {}
    if script == "run_glue.sh":
        return (["None", str(tmp_path / "glue"), "", "", str(out), "mrpc", "1", "", "", "", "", "", "", "fp32", "",
                 "train"], out, out / "logfile", {})
    if script == "run_squad.sh":
        return (["ckpt", "1", "2", "1e-5", "0.1", "fp32", "1", "1", str(tmp_path / "squad"), "", str(out),
                 "prediction"], out / "bert-large-uncased" / "squad", out / "logfile.txt", {})
    # run_pretraining.sh, with the recording python of the recipe tests: its log has a new name each run, and
    # Paddle's launcher truncates the ranks' logs in <results>/log/phase<n>/ when it starts.
    fakes = make_fakes(tmp_path / "fakes")
    env = fakes.env(BERT_PREP_WORKING_DIR=str(tmp_path / "data"), RESULTS_DIR=str(tmp_path / "results"))
    args = preset("pretrain_config.sh", "cpu_tiny", env)
    results = Path(args[42])
    return args, results, results / "log" / "phase1" / "workerlog.0", env


@pytest.mark.parametrize("script", ["run_downstream.sh", "run_glue.sh", "run_squad.sh", "run_pretraining.sh"])
def test_a_second_script_run_leaves_the_live_runs_log_as_it_was(script, tmp_path):
    args, locked, log, env = script_case(script, tmp_path)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("the live run's output\n")
    with live_run(locked) as holder:
        before = checksums(log.parent)
        result = subprocess.run(["bash", str(SCRIPTS / script), *args], capture_output=True, text=True, cwd=tmp_path,
                                env=env or None, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert_one_line(result.stderr, f"{script}: ", locked, "in use", f"PID {holder.pid}")
    assert_intact(before)


def test_a_squad_run_may_share_the_results_folder_of_a_live_pretraining_run(tmp_path):
    """run_squad.sh's OUT_DIR defaults to RESULTS_DIR, pretraining's output folder, where its own files are named
    apart (logfile.txt, dllogger_*.json, <bert-model>/squad/): it runs beside a live pretraining run there."""
    fakes = make_fakes(tmp_path / "fakes")  # a python that records its command line instead of fine-tuning
    results = tmp_path / "results"
    results.mkdir()
    (results / "bert_lamb_pretraining.log").write_text("the live run's output\n")
    with live_run(results):
        before = checksums(results)
        result = subprocess.run(["bash", str(SCRIPTS / "run_squad.sh"), "ckpt"], capture_output=True, text=True,
                                cwd=tmp_path, env=fakes.env(RESULTS_DIR=str(results)), timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(script_args(fakes.python_calls(), "run_squad.py")) == 1
    assert (results / "logfile.txt").is_file()
    assert_intact(before)


# A recipe's python that is still starting: it says so, then waits for $RUNNING to go (at most 60 s).
STARTING_PYTHON = """#!/usr/bin/env bash
echo "python $* is starting"
: > "$STARTED"
for ((waited = 0; waited < 1200; waited++)); do [[ -e "$RUNNING" ]] || exit 0; sleep 0.05; done
exit 3
"""


def test_a_second_script_run_is_refused_before_the_first_ones_python_locks_the_folder(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").write_text(STARTING_PYTHON)
    (bin_dir / "python").chmod(0o755)
    (tmp_path / "running").write_text("")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "STARTED": str(tmp_path / "started"),
           "RUNNING": str(tmp_path / "running")}
    out = tmp_path / "out"
    command = ["bash", str(SCRIPTS / "run_downstream.sh"), str(tmp_path / "checkpoint"), str(out), "None", "quick"]
    first = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=tmp_path)
    try:
        wait_for(lambda: (tmp_path / "started").exists() or first.poll() is not None, 60, "the first run's python")
        assert first.poll() is None
        before = checksums(out)
        assert "is starting" in (out / "logfile").read_text()
        second = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    finally:
        (tmp_path / "running").unlink()
        first.wait(timeout=60)
    assert second.returncode == 1
    assert_one_line(second.stderr, "run_downstream.sh: ", out, "in use", f"PID {first.pid}")
    assert_intact(before)
    assert first.returncode == 0


# ---------------------------------------------------------------------------------------------------------------
# Ctrl-C of run_downstream.sh (issue 66, item 5)

# The `python` that run_downstream.sh starts: downstream.py on MRPC and RTE one after the other in one process,
# RTE's run held in run_glue.main (mark file rte-started) until the Ctrl-C.
CTRL_C_ENTRY = f"""
import os, sys
sys.path[:0] = [{str(ROOT)!r}, {str(ROOT / "tests")!r}]
from pathlib import Path

import downstream
import run_glue
from interrupts import pause_forever
from utils.cli import run_main

fine_tune = run_glue.main


def held_rte(argv):
    if "rte" not in argv:
        return fine_tune(argv)
    Path(os.environ["MARKS"], "rte-started").touch()
    pause_forever()


run_glue.main = held_rte
script, *args = sys.argv[1:]
assert Path(script).name == "downstream.py", script
sys.exit(run_main(lambda: downstream.main([*args, "--tasks", "mrpc,rte", "--jobs", "1"]), "downstream.py"))
"""


def test_ctrl_c_of_the_script_says_what_it_kept_on_stderr_and_in_its_log(tmp_path):
    checkpoint = write_step_folder(tmp_path / "phase1" / "1000")
    bin_dir, marks = tmp_path / "bin", tmp_path / "marks"
    bin_dir.mkdir()
    marks.mkdir()
    (tmp_path / "entry.py").write_text(CTRL_C_ENTRY)
    (bin_dir / "python").write_text(f'#!/usr/bin/env bash\nexec {sys.executable} {tmp_path / "entry.py"} "$@"\n')
    (bin_dir / "python").chmod(0o755)
    out = tmp_path / "out"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "MARKS": str(marks),
           "VOCAB_FILE": str(require_shared("vocab", "bert-uncased-vocab.txt")),
           "DATA_DIR": str(require_shared("data"))}
    # A terminal's Ctrl-C: SIGINT to the whole process group, once RTE's run has begun.
    process = subprocess.Popen(["bash", str(SCRIPTS / "run_downstream.sh"), str(checkpoint), str(out), "None",
                                "quick"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                               cwd=tmp_path, start_new_session=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        wait_for(lambda: (marks / "rte-started").exists() or process.poll() is not None, 180, "RTE's run")
        assert process.poll() is None
        os.killpg(process.pid, signal.SIGINT)
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 130
    log = (out / "logfile").read_text()
    assert "Traceback" not in stderr + log
    said = [line for line in stderr.splitlines() if "interrupted" in line]
    assert len(said) == 1, stderr
    assert_one_line(said[0], "downstream.py: ", "interrupted", "1 of 2", out / "units", "again")
    assert said[0] in log.splitlines()
    assert (out / "units" / "mrpc-seed1" / "result.json").is_file()


# ---------------------------------------------------------------------------------------------------------------
# A launcher that cannot import Paddle (issue 66, item 5)


def test_a_launcher_that_cannot_import_paddle_says_so_in_one_line(tmp_path):
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "paddle.py").write_text('raise ImportError("libpaddle.so: cannot open shared object")\n')
    (tmp_path / "worker.py").write_text("print('never run')\n")
    log, launcher_log = tmp_path / "logfile", tmp_path / "log" / "launcherlog"
    command = (f'set -euo pipefail; source "{SCRIPTS / "common.sh"}"; run_launcher "{log}" "{tmp_path / "log"}" '
               f'--nproc_per_node 1 "{tmp_path / "worker.py"}"')  # as the recipes run it
    result = subprocess.run(["bash", "-c", command], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(tmp_path / "broken")})
    assert result.returncode == 1
    line = assert_one_line(result.stderr, "bash: ", "ImportError: libpaddle.so", launcher_log)
    assert line in log.read_text().splitlines()
    assert "Traceback" not in result.stdout + result.stderr
