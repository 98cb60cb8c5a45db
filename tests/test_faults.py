"""The fault suite: real tiny pre-training jobs (tests/pretraining_runs.py's 1-layer BERT) with one fault injected each.

Every case asserts the exit status, that the message is one line naming the thing at fault, and that every file
that existed before is still there byte for byte (moved aside at most). Most jobs run in this process exactly as
`python run_pretraining.py` runs them (`cli.run_main` around `main`); the kills, the launched ranks and one
traceback check run real processes. docs/resume.md states the rules the resume cases check.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import plot_report
import run_pretraining
import squad_evaluate
from bert_config import BertConfig
from checkpoints import checkpoint
from conftest import ROOT, require_shared
from interrupts import MARKS_VARIABLE, ChildOutput, signal_while_running, wait_for
from messages import assert_one_line
from pretraining_runs import (
    UNBINNED,
    checkpoint_params,
    pretraining_argv,
    run_training,
    start_training,
    step_folder,
    step_folders,
    train,
    without_omp_threads,
)
from utils import cli, folder_lock
from utils.atomic_io import TEMP_PREFIX

SCRIPT = str(ROOT / "run_pretraining.py")
# The tiny job: 4 steps, checkpoints at 2 and 4, and the resume flag NVIDIA's recipes always pass.
JOB = ("--max-steps", "4", "--num-steps-per-checkpoint", "2", "--keep-checkpoint-max", "10",
       "--last-step-of-checkpoint", "auto")


# ---------------------------------------------------------------------------------------------------------------
# Running a job and checking what it left


def run_entry(argv: list[str], capsys, main=run_pretraining.main,
              script: str = "run_pretraining.py") -> tuple[int, str]:
    """(exit status, stdout + stderr) of `python <script> argv`, run in this process the way the script's
    __main__ runs it."""
    capsys.readouterr()
    try:
        status = cli.run_main(lambda: main(argv), script)
    except SystemExit as exit_request:  # argparse (status 2), or a message (printed to stderr, status 1)
        status = exit_request.code
        if isinstance(status, str):
            print(status, file=sys.stderr)
            status = 1
    captured = capsys.readouterr()
    return status, captured.out + captured.err


def one_line_error(output: str, prefix: str, *names: str) -> str:
    """The only error line of output: it starts with prefix and names each of names; no traceback anywhere."""
    assert "Traceback" not in output, output[-3000:]
    errors = [line for line in output.splitlines() if line.startswith(prefix)]
    assert len(errors) == 1, output[-3000:]
    for name in names:
        assert name in errors[0], errors[0]
    return errors[0]


def snapshot(*roots: Path) -> dict[str, str]:
    """sha256 of every file under roots (a root may be a file), by path; not the lock file of an output folder,
    which each run rewrites with its own PID (folder_lock.py)."""
    files = {}
    for root in roots:
        for path in [root] if root.is_file() else sorted(root.rglob("*")):
            if path.is_file() and path.name != folder_lock.LOCK_NAME:
                files[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return files


def assert_kept(before: dict[str, str], moved: dict[Path, Path] | None = None) -> None:
    """Every file of the snapshot is still there with the same bytes, at its new place if its folder was moved."""
    moved = {str(old): str(new) for old, new in (moved or {}).items()}
    for path, digest in before.items():
        for old, new in moved.items():
            if path.startswith(old + os.sep):
                path = new + path[len(old):]
        assert Path(path).is_file(), f"{path} is gone"
        assert hashlib.sha256(Path(path).read_bytes()).hexdigest() == digest, f"{path} changed"


def assert_bitwise_equal(actual: dict, expected: dict) -> None:
    assert actual.keys() == expected.keys()
    assert not [name for name in expected if not np.array_equal(actual[name], expected[name])]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A finished tiny job: tmp/out with the checkpoints of steps 2 and 4."""
    folder = tmp_path_factory.mktemp("trained")
    assert train(pretraining_argv(folder, *JOB)) == 0
    return folder


@pytest.fixture
def job(trained, tmp_path) -> Path:
    """A copy of the finished job's output folder in tmp_path/out, for one fault to damage."""
    shutil.copytree(trained / "out", tmp_path / "out")
    return tmp_path


def phase1(folder: Path) -> Path:
    return folder / "out" / "custom" / "phase1"


def truncate(path: Path, keep: int = 1000) -> None:
    path.write_bytes(path.read_bytes()[:keep])


# ---------------------------------------------------------------------------------------------------------------
# Data loss and silent fresh starts


def test_every_progress_file_unreadable_stops_in_one_line_and_starts_nothing_fresh(job, capsys):
    for step in (2, 4):
        (step_folder(job / "out", step) / "bert_paddle_progress.json").write_text("{garbage", encoding="utf-8")
    before = snapshot(phase1(job))
    status, output = run_entry(pretraining_argv(job, *JOB), capsys)
    assert status == 1
    one_line_error(output, "run_pretraining.py: ", f"{phase1(job)}: no intact checkpoint to resume from",
                   "2.unreadable-bad-progress-file, 4.unreadable-bad-progress-file")
    assert_kept(before, {phase1(job) / s: phase1(job) / f"{s}.unreadable-bad-progress-file" for s in ("2", "4")})
    assert step_folders(job / "out") == []  # nothing trained, nothing saved over them
    # The same command again still refuses, rather than starting fresh beside the set-aside folders.
    assert run_entry(pretraining_argv(job, *JOB), capsys)[0] == 1


@pytest.mark.parametrize("damage, reason, named", [
    ("bert_paddle_progress.json", "bad-progress-file", "4/bert_paddle_progress.json: unreadable progress file"),
    ("bert_paddle.pdparams", "bad-params", "4/bert_paddle.pdparams: not a readable Paddle pickle"),
])
def test_an_unreadable_newest_checkpoint_is_set_aside_and_the_run_resumes_from_the_one_before(
        trained, job, capsys, damage, reason, named):
    truncate(step_folder(job / "out", 4) / damage, keep=40)
    before = snapshot(phase1(job))
    status, output = run_entry(pretraining_argv(job, *JOB), capsys)
    assert status == 0, output[-3000:]
    assert "Traceback" not in output
    set_aside = phase1(job) / f"4.unreadable-{reason}"
    (line,) = [line for line in output.splitlines() if line.startswith("Set aside")]
    assert line.startswith(f"Set aside {step_folder(job / 'out', 4)} as {set_aside.name}: ") and named in line
    assert f"Resuming from {step_folder(job / 'out', 2)} at step 2" in output
    assert_kept(before, {step_folder(job / "out", 4): set_aside})
    # Steps 3 and 4 again, exactly as the first time: the new step 4 equals the one the damage destroyed.
    assert_bitwise_equal(checkpoint_params(job / "out", 4), checkpoint_params(trained / "out", 4))


def test_a_truncated_newest_params_file_is_no_traceback_through_the_real_script(job):
    truncate(step_folder(job / "out", 4) / "bert_paddle.pdparams")
    before = snapshot(phase1(job))
    argv = pretraining_argv(job, *JOB, "--steps-this-run", "1")  # resume from step 2, train and save step 3
    env = without_omp_threads()  # Paddle's own import warning is not the project's line
    result = subprocess.run([sys.executable, "-W", "ignore", SCRIPT, *argv], capture_output=True, text=True,
                            cwd=ROOT, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr == ""
    assert f"as 4.unreadable-bad-params: {step_folder(job / 'out', 4)}/bert_paddle.pdparams" in result.stdout
    assert_kept(before, {step_folder(job / "out", 4): phase1(job) / "4.unreadable-bad-params"})
    assert step_folders(job / "out") == [2, 3]


@pytest.mark.parametrize("from_checkpoint, last_step", [
    ("2", "2"),  # NVIDIA's README: --from-checkpoint .../phase1/600 --last-step-of-checkpoint 600
    ("2", None),  # the same with the step omitted (the progress file records it)
    ("2", "auto"),  # one checkpoint folder with auto (run_pretraining.sh's init_checkpoint)
    ("", "auto"),  # a phase folder with auto, the form of NVIDIA's recipes: the newest of it is step 4
    ("", "2"),  # a phase folder and a step: the project's addition
])
def test_nvidia_resume_forms_continue_exactly(trained, tmp_path, capsys, from_checkpoint, last_step):
    source = phase1(trained) / from_checkpoint if from_checkpoint else phase1(trained)
    before = snapshot(phase1(trained))
    argv = pretraining_argv(tmp_path, *JOB[:-2], "--from-checkpoint", str(source))
    if last_step is not None:
        argv += ["--last-step-of-checkpoint", last_step]
    status, output = run_entry(argv, capsys)
    assert status == 0, output[-3000:]
    resumed_at = 4 if (from_checkpoint, last_step) == ("", "auto") else 2
    assert f"Resuming from {phase1(trained) / str(resumed_at)} at step {resumed_at}" in output
    if resumed_at == 2:
        assert step_folders(tmp_path / "out") == [4]
        assert_bitwise_equal(checkpoint_params(tmp_path / "out", 4), checkpoint_params(trained / "out", 4))
    assert_kept(before)  # another job's checkpoints are only read


def test_a_step_that_is_not_the_folders_is_one_line(trained, tmp_path, capsys):
    argv = pretraining_argv(tmp_path, *JOB[:-2], "--from-checkpoint", str(phase1(trained) / "2"),
                            "--last-step-of-checkpoint", "600")
    status, output = run_entry(argv, capsys)
    assert status == 1
    one_line_error(output, "run_pretraining.py: ", f"{phase1(trained) / '2'} holds the checkpoint of step 2",
                   "--last-step-of-checkpoint 600")


@pytest.mark.parametrize("extra, named", [
    ((), "(steps 2, 4) that this run would write over"),  # a fresh start over an earlier run's checkpoints
    (("--last-step-of-checkpoint", "2"), "after step 2 (step 4) that this run would write over"),
])
def test_a_run_never_writes_over_checkpoints_of_an_earlier_run(job, capsys, extra, named):
    before = snapshot(phase1(job))
    status, output = run_entry(pretraining_argv(job, "--max-steps", "4", "--num-steps-per-checkpoint", "2", *extra),
                               capsys)
    assert status == 1
    one_line_error(output, "run_pretraining.py: ", str(phase1(job)), named, "--last-step-of-checkpoint auto")
    assert_kept(before)
    assert snapshot(phase1(job)) == before


def test_a_changed_max_steps_on_resume_names_the_flag_and_what_to_do(job, capsys):
    before = snapshot(phase1(job))
    status, output = run_entry(pretraining_argv(job, *JOB, "--max-steps", "6"), capsys)
    assert status == 1
    one_line_error(output, "run_pretraining.py: ", "saved by a run with --max-steps 4, this one has --max-steps 6",
                   "resume with --max-steps 4", "--from-pretrained-params")
    assert snapshot(phase1(job)) == before


# ---------------------------------------------------------------------------------------------------------------
# Bad input: one line naming the file, record or flag; the inputs are never touched


@pytest.fixture
def shards(tmp_path) -> Path:
    """A writable copy of the LDDL sample shards."""
    copy = tmp_path / "shards"
    shutil.copytree(require_shared(*UNBINNED), copy)
    for path in copy.iterdir():
        path.chmod(0o644)
    return copy


def vocab_lines() -> list[str]:
    return require_shared("vocab", "bert-uncased-vocab.txt").read_text(encoding="utf-8").splitlines()


def test_a_truncated_shard_is_one_line_naming_it(tmp_path, shards, capsys):
    truncate(shards / "shard-1.parquet", keep=300000)
    before = snapshot(shards)
    status, output = run_entry(pretraining_argv(tmp_path, shards=shards), capsys)
    assert status == 1
    one_line_error(output, "run_pretraining.py: ", f"{shards / 'shard-1.parquet'}: not a readable parquet file")
    assert snapshot(shards) == before


def test_a_corrupt_shard_read_by_a_worker_is_one_line_naming_it(tmp_path, shards, capsys):
    data = bytearray((shards / "shard-2.parquet").read_bytes())
    data[100000:100400] = bytes(byte ^ 0x5A for byte in data[100000:100400])  # inside a compressed data page
    (shards / "shard-2.parquet").write_bytes(bytes(data))
    before = snapshot(shards)
    status, output = run_entry(pretraining_argv(tmp_path, "--num-workers", "2", shards=shards), capsys)
    assert status == 1
    one_line_error(output, "run_pretraining.py: ", f"{shards / 'shard-2.parquet'}: cannot read the parquet data")
    assert snapshot(shards) == before


def test_an_empty_input_folder_is_one_line_naming_it(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    status, output = run_entry(pretraining_argv(tmp_path, shards=tmp_path / "empty"), capsys)
    assert status == 1
    one_line_error(output, "run_pretraining.py: ", f"{tmp_path / 'empty'}: no shard files")


@pytest.mark.parametrize("keep, named", [
    (lambda token, index: token != "[MASK]", "vocab lacks the special token(s) [MASK]"),
    (lambda token, index: index < 5000, "token 'ranges' is not in the vocab"),  # the shards' tokens
])
def test_a_vocab_that_misses_tokens_is_one_line_naming_it(tmp_path, capsys, keep, named):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("".join(f"{t}\n" for i, t in enumerate(vocab_lines()) if keep(t, i)), encoding="utf-8")
    before = snapshot(vocab)
    status, output = run_entry(pretraining_argv(tmp_path, "--vocab-file", str(vocab)), capsys)
    assert status == 1
    one_line_error(output, "run_pretraining.py: ", str(vocab), named)
    assert snapshot(vocab) == before


def test_a_batch_larger_than_the_data_is_one_line_before_any_batch_is_built(tmp_path, capsys):
    """Issue 46: --batch-size 1000000000 grew to gigabytes assembling one batch of every sample."""
    status, output = run_entry(pretraining_argv(tmp_path, "--batch-size", "1000000000"), capsys)
    assert status == 1
    line = one_line_error(output, "run_pretraining.py: ", "--batch-size 1000000000 is more than the ",
                          f"samples of --input-dir {require_shared(*UNBINNED)} that rank 0 of 1 reads in an epoch")
    samples = int(line.split("more than the ")[1].split()[0])
    assert samples == sum(pq.ParquetFile(path).metadata.num_rows
                          for path in Path(require_shared(*UNBINNED)).glob("*.parquet*"))
    assert not any(phase1(tmp_path).iterdir())


def test_a_batch_whose_activations_exceed_the_free_memory_is_one_line_before_any_batch_is_built(tmp_path, capsys,
                                                                                                 monkeypatch):
    """Issue 46 §3: the memory check. 1 GiB available; the test model (1 layer, hidden 32, 2 heads, 30528 padded
    rows) at batch 256: by Korthikanti et al.'s s*b*h*(34 + 5*a*s/h) bytes per layer at 16 bits, doubled for fp32,
    plus three fp32 copies of the [256 * 20, 30528] scores: 1.89 GiB."""
    monkeypatch.setattr(run_pretraining, "available_memory_bytes", lambda: 2**30)
    expected = 2 * (128 * 256 * 32 * (34 + 5 * 2 * 128 / 32)) + 3 * 4 * 256 * 20 * 30528
    assert f"{expected / 2**30:.2f}" == "1.89"
    status, output = run_entry(pretraining_argv(tmp_path, "--batch-size", "256"), capsys)
    assert status == 1
    one_line_error(output, "run_pretraining.py: ", "--batch-size 256: its activations alone need about 1.9 GiB",
                   "1.0 GiB of memory is available", "--gradient-merge-steps")
    assert not any(phase1(tmp_path).iterdir())


def test_activation_bytes_by_hand_and_available_memory_from_meminfo(tmp_path):
    # s=2, b=1, h=4, a=2, one layer: 2*1*4*(34 + 5*2*2/4) = 312 bytes at 16 bits, 624 in fp32; the head's scores
    # [1 * 1, 8 rows] in three fp32 copies: 96 bytes.
    config = BertConfig(vocab_size=8, hidden_size=4, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8)
    assert run_pretraining.activation_bytes(config, batch_size=1, seq_length=2, masked_per_seq=1) == 720
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24576000 kB\nMemFree:  100 kB\nMemAvailable:   20000000 kB\n")
    assert run_pretraining.available_memory_bytes(str(meminfo)) == 20000000 * 1024
    assert run_pretraining.available_memory_bytes(str(tmp_path / "absent")) is None


def test_a_config_vocab_size_below_the_vocab_file_is_one_line_naming_both(tmp_path, capsys):
    config = tmp_path / "small.json"
    config.write_text(json.dumps({"vocab_size": 1000, "hidden_size": 32, "num_hidden_layers": 1,
                                  "num_attention_heads": 2, "intermediate_size": 64,
                                  "max_position_embeddings": 128}))
    status, output = run_entry(pretraining_argv(tmp_path, "--config-file", str(config)), capsys)
    assert status == 1
    one_line_error(output, "run_pretraining.py: ", f"--config-file {config}: vocab_size 1000 is smaller than the "
                   "30522 tokens of --vocab-file", "bert-uncased-vocab.txt")
    assert not any(phase1(tmp_path).iterdir())  # nothing trained, nothing saved


def test_a_negative_seed_is_a_parser_error(tmp_path, capsys):
    status, output = run_entry(pretraining_argv(tmp_path, "--seed", "-1"), capsys)
    assert status == 2
    # argparse's usage summary, then its one error line.
    assert "Traceback" not in output
    (error,) = [line for line in output.splitlines() if " error: " in line]
    assert error.endswith("error: argument --seed: expected a whole number in [0, 4294967295], got '-1'")


@pytest.fixture
def tmpfs(tmp_path):
    """mount(options) mounts a tmpfs with these mount options ("size=20m", "size=1m,ro") at tmp_path/disk and
    returns it; unmounted at the end. Where mounting is refused the test skips, and fails in CI."""
    mounted = []

    def mount(options: str) -> Path:
        mount_point = tmp_path / "disk"
        mount_point.mkdir(parents=True, exist_ok=True)
        result = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount_point)],
                                capture_output=True, text=True)
        if result.returncode != 0:
            message = f"cannot mount a tmpfs ({result.stderr.strip() or 'mount refused'})"
            if os.environ.get("CI", "").lower() == "true":
                pytest.fail(message)
            pytest.skip(message)
        mounted.append(mount_point)
        return mount_point

    yield mount
    for mount_point in mounted:
        subprocess.run(["umount", str(mount_point)], check=True)


def test_a_full_disk_is_one_line_naming_the_checkpoint_and_keeps_the_earlier_one(tmp_path, tmpfs, capsys):
    small_disk = tmpfs("size=20m")  # room for one checkpoint of the tiny job (12.3 MB), not two
    argv = pretraining_argv(tmp_path, *JOB, "--output-dir", str(small_disk))
    status, output = run_entry(argv, capsys)
    assert status == 1
    one_line_error(output, "run_pretraining.py: ", f"{small_disk}/custom/phase1/4: checkpoint not saved",
                   "No space left on device")
    phase_folder = small_disk / "custom" / "phase1"
    assert sorted(p.name for p in phase_folder.iterdir()) == ["2"]  # the failed save's temp folder is gone
    checkpoint.load_checkpoint(phase_folder / "2")


def test_reports_and_squad_files_that_are_not_utf8_name_the_file(trained, tmp_path, capsys):
    report = tmp_path / "report.json"
    report.write_bytes((trained / "report.json").read_bytes() + b"\xff\n")
    lines = len(report.read_bytes().splitlines())
    status, output = run_entry([str(report), "--output", str(tmp_path / "plot.png")], capsys, plot_report.main,
                               "plot_report.py")
    assert status == 1
    one_line_error(output, str(report), f"{report}:{lines}: not UTF-8 text (byte 0xff at column 1)")
    status, output = run_entry([str(trained / "report.json"), "--output", str(tmp_path)], capsys, plot_report.main,
                               "plot_report.py")
    assert status == 1
    one_line_error(output, "--output", f"--output {tmp_path}: is a folder")
    dataset = tmp_path / "dev.json"
    dataset.write_bytes(b'{"version": "1.1", "data": [{"title": "caf\xe9", "paragraphs": []}]}')
    (tmp_path / "predictions.json").write_text("{}")
    status, output = run_entry([str(dataset), str(tmp_path / "predictions.json")], capsys, squad_evaluate.main,
                               "squad_evaluate.py")
    assert status == 1
    one_line_error(output, "squad_evaluate.py: ", f"{dataset}: not UTF-8 text (byte 0xe9 at offset 42)")


# ---------------------------------------------------------------------------------------------------------------
# Kills


# run_pretraining.main() that SIGKILLs itself KILL_AFTER_SECONDS after its first save began.
KILL_DURING_SAVE = """
import os, signal, sys, threading
sys.path.insert(0, os.getcwd())
import run_pretraining; from checkpoints import checkpoint
real_save = checkpoint.save_checkpoint
def save_and_die(*args, **kwargs):
    # The line first: a timer of a few microseconds (a fast machine's saves) could kill before it was written.
    print("saving", args[1], flush=True)
    threading.Timer(float(os.environ["KILL_AFTER_SECONDS"]), os.kill, (os.getpid(), signal.SIGKILL)).start()
    return real_save(*args, **kwargs)
checkpoint.save_checkpoint = save_and_die
sys.exit(run_pretraining.main(sys.argv[1:]))
"""
KILL_JOB = ("--max-steps", "12", "--num-steps-per-checkpoint", "1", "--keep-checkpoint-max", "100",
            "--last-step-of-checkpoint", "auto")


def without_temp_folders(files: dict[str, str]) -> dict[str, str]:
    """A killed save's .tmp-* folder is no checkpoint; the next save removes it, by design."""
    return {path: digest for path, digest in files.items() if f"{os.sep}{TEMP_PREFIX}" not in path}


# run_pretraining.main() that prints how long each checkpoint save took, to aim the kills.
TIMED_SAVES = """
import os, sys, time
sys.path.insert(0, os.getcwd())
import run_pretraining; from checkpoints import checkpoint
real_save = checkpoint.save_checkpoint
def timed_save(*args, **kwargs):
    start = time.perf_counter()
    result = real_save(*args, **kwargs)
    print("save took", time.perf_counter() - start, flush=True)
    return result
checkpoint.save_checkpoint = timed_save
sys.exit(run_pretraining.main(sys.argv[1:]))
"""


def test_sigkill_at_random_points_of_saves_then_the_same_command_finishes_exactly(tmp_path):
    # The uninterrupted job, timing its saves. It, the killed runs and the run that finishes the job are all
    # processes of the real command, so that their weights can be compared bit for bit
    # (pretraining_runs.training_environment).
    (tmp_path / "whole").mkdir()
    output = run_training(pretraining_argv(tmp_path / "whole", *KILL_JOB), code=TIMED_SAVES)
    save_seconds = float(np.median([float(line.split()[2]) for line in output.splitlines()
                                    if line.startswith("save took ")]))

    killed = tmp_path / "killed"
    killed.mkdir()
    argv = pretraining_argv(killed, *KILL_JOB)
    generator = random.Random(18)
    mid_save = []  # the trials whose kill landed before their save's final rename
    for trial in range(10):  # one kill in each tenth of a save, at a random point of it
        before = without_temp_folders(snapshot(killed / "out")) if (killed / "out").exists() else {}
        delay = save_seconds * (trial + generator.random()) / 10
        process = start_training(argv, code=KILL_DURING_SAVE, KILL_AFTER_SECONDS=str(delay))
        output, _ = process.communicate(timeout=300)
        assert process.returncode == -signal.SIGKILL, output[-3000:]
        assert "saving" in output
        left = list(phase1(killed).iterdir()) if phase1(killed).exists() else []  # a kill may precede its mkdir
        mid_save.append(any(p.name.startswith(TEMP_PREFIX) for p in left))
        assert_kept(before)
        # Whatever the moment, every step folder is a whole checkpoint: none is torn, none needs setting aside.
        for folder in left:
            if folder.name.isdigit():
                checkpoint.load_checkpoint(folder)
    assert any(mid_save), "no kill landed inside a save"
    run_training(argv)
    assert not [p for p in phase1(killed).iterdir() if ".unreadable-" in p.name]
    assert_bitwise_equal(checkpoint_params(killed / "out", 12), checkpoint_params(tmp_path / "whole" / "out", 12))


def process_tree(root: int) -> list[int]:
    """The pids of every descendant of root (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def running(pid: int) -> bool:
    """Alive and not a zombie (a zombie has ended; only its exit status is left to collect)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_until_gone(pids: list[int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while any(running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [pid for pid in pids if running(pid)]


def end_leftovers(process: subprocess.Popen, pids: list[int]) -> None:
    """After a failed check: end the test's process and whatever of its tree is still running."""
    process.kill()
    for pid in pids:
        if running(pid):
            os.kill(pid, signal.SIGKILL)


def two_rank_launch(argv: list[str], log_dir: Path, env: dict | None = None) -> tuple[list[str], dict]:
    """(command, environment) of a 2-rank CPU launch of run_pretraining.py (see tests/test_run_pretraining_dp.py)."""
    command = [sys.executable, "-W", "ignore", "-m", "paddle.distributed.launch", "--log_dir", str(log_dir),
               "--nproc_per_node", "2", SCRIPT, *argv]
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PADDLE")}
    return command, {**clean, **(env or {})}


LONG_JOB = ("--max-steps", "100000", "--num-steps-per-checkpoint", "100000", "--num-workers", "2")


def start_long_job(tmp_path: Path, *extra: str, code: str | None = None) -> subprocess.Popen:
    """A real run_pretraining.py process (or `python -c code` with its argv) of LONG_JOB, with stdout and stderr
    apart, once it has trained three steps."""
    command = [sys.executable, "-W", "ignore", *(["-c", code] if code else [SCRIPT])]
    job = subprocess.Popen([*command, *pretraining_argv(tmp_path, *LONG_JOB, *extra)], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, cwd=ROOT, env=without_omp_threads())
    for line in job.stdout:
        if line.startswith("step 3/"):
            return job
    job.kill()
    raise AssertionError(job.stderr.read()[-3000:])


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process tree from /proc")
def test_sigkill_of_the_trainer_leaves_no_loader_worker(tmp_path):
    trainer = start_long_job(tmp_path)
    workers = []
    try:
        workers = process_tree(trainer.pid)
        assert len(workers) == 2
        trainer.send_signal(signal.SIGKILL)
        trainer.wait(timeout=30)
        assert wait_until_gone(workers, seconds=5) == []
    finally:
        end_leftovers(trainer, workers)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process tree from /proc")
def test_a_rank_killed_in_a_two_rank_launch_ends_the_whole_run(tmp_path):
    command, env = two_rank_launch(pretraining_argv(tmp_path, *LONG_JOB), tmp_path / "log")
    launcher = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run = []
    try:
        rank0_log = tmp_path / "log" / "workerlog.0"
        wait_for(lambda: rank0_log.exists() and "step 3/" in rank0_log.read_text(), 240, "the ranks to train")
        run = process_tree(launcher.pid)
        ranks = [pid for pid in run if parent_of(pid) == launcher.pid]
        assert len(ranks) == 2 and len(run) == 2 + 2 * 2  # two trainers with two loader workers each
        rank1 = next(pid for pid in ranks
                     if b"PADDLE_TRAINER_ID=1\0" in Path(f"/proc/{pid}/environ").read_bytes())
        os.kill(rank1, signal.SIGKILL)
        assert launcher.wait(timeout=60) != 0
        assert wait_until_gone(run, seconds=5) == []
    finally:
        end_leftovers(launcher, run)


def test_two_ranks_set_aside_resume_and_stop_together(tmp_path):
    # A 2-rank job that saved steps 2 and 4, then lost step 4's parameters.
    argv = pretraining_argv(tmp_path, "--max-steps", "6", "--num-steps-per-checkpoint", "2",
                            "--last-step-of-checkpoint", "auto")
    command, env = two_rank_launch([*argv, "--steps-this-run", "4"], tmp_path / "log1")
    first = subprocess.run(command, env=env, capture_output=True, timeout=300)
    assert first.returncode == 0, (tmp_path / "log1" / "workerlog.0").read_text()[-3000:]
    truncate(step_folder(tmp_path / "out", 4) / "bert_paddle.pdparams")
    before = snapshot(phase1(tmp_path))
    # The same command with the stop file present: rank 0 sets step 4 aside, both ranks resume from step 2 and
    # both stop after step 3, which is saved.
    stop_file = tmp_path / "stop"
    stop_file.touch()
    command, env = two_rank_launch(argv, tmp_path / "log2", {"PADDLEBERT_STOP_FILE": str(stop_file)})
    second = subprocess.run(command, env=env, capture_output=True, timeout=300)
    rank0_log = (tmp_path / "log2" / "workerlog.0").read_text()
    assert second.returncode == 0, rank0_log[-3000:]
    assert f"Set aside {step_folder(tmp_path / 'out', 4)} as 4.unreadable-bad-params" in rank0_log
    assert f"stop file {stop_file}: stopped after step 3" in rank0_log
    assert_kept(before, {step_folder(tmp_path / "out", 4): phase1(tmp_path) / "4.unreadable-bad-params"})
    assert step_folders(tmp_path / "out") == [2, 3]
    # Rank 1 continued from step 2's data position too (it was told which folder rank 0 chose).
    progress = checkpoint.read_progress(step_folder(tmp_path / "out", 3))
    assert [position["step"] for position in progress["data_positions"]] == [3, 3]


# ---------------------------------------------------------------------------------------------------------------
# One run per folder, and an unusable output folder found before any work


def hostname() -> str:
    import socket

    return socket.gethostname()


# A process that holds the lock of the folder argv[1], says so, and waits to be killed.
HOLD_LOCK = """
import os, sys, time
sys.path.insert(0, os.getcwd())
from utils import folder_lock
folder_lock.hold(sys.argv[1], "--output-dir")
print("held", flush=True)
time.sleep(600)
"""


def test_a_second_pretraining_run_into_a_live_runs_folder_stops_naming_its_pid_and_host(tmp_path, capsys):
    first = start_long_job(tmp_path)
    workers = []
    try:
        workers = process_tree(first.pid)
        before = snapshot(tmp_path / "out")
        # Another seed and report, the same --output-dir: a real second process, refused before any work.
        second = subprocess.run([sys.executable, "-W", "ignore", SCRIPT,
                                 *pretraining_argv(tmp_path, *JOB, "--seed", "7", "--report-file",
                                                   str(tmp_path / "second.json"))],
                                capture_output=True, text=True, cwd=ROOT, timeout=300, env=without_omp_threads())
        assert second.returncode == 1, second.stdout[-2000:] + second.stderr[-2000:]
        assert "step 1/" not in second.stdout
        one_line_error(second.stderr, "run_pretraining.py: ", f"--output-dir {tmp_path / 'out'}: in use by another "
                       f"run (PID {first.pid} on host {hostname()} since ", "one run per folder")
        assert_kept(before)
        assert not (tmp_path / "second.json").exists()
        # The kernel releases the lock when its holder dies, however: after a SIGKILL the folder is free again.
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        assert wait_until_gone(workers, seconds=5) == []
        status, output = run_entry(pretraining_argv(tmp_path, *JOB), capsys)
        assert status == 0, output[-3000:]
        assert step_folders(tmp_path / "out") == [2, 4]
    finally:
        end_leftovers(first, workers)


@pytest.fixture
def glue_job(tmp_path) -> list[str]:
    """run_glue.py's arguments for 2 updates of the tiny BERT on 16 MRPC pairs into tmp_path/out."""
    from fine_tuning_runs import common_argv, fine_tuning_workspace

    fine_tuning_workspace(tmp_path, mrpc={"train.tsv": ("train", 16)})
    return ["--task-name", "mrpc", *common_argv(tmp_path, tmp_path / "out"), "--do-train", "--train-file",
            str(tmp_path / "train.tsv"), "--from-pretrained-params", str(tmp_path / "pretrain" / "1000"),
            "--max-steps", "2", "--show-config", "false", "--enable-cpu-affinity", "false"]


def test_a_fine_tuning_run_into_a_folder_in_use_stops_naming_the_holder(tmp_path, glue_job, capsys):
    import run_glue

    out = tmp_path / "out"
    out.mkdir()
    (out / "report.json").write_text("earlier records\n")
    (out / "bert_paddle.pdparams").write_bytes(b"an earlier model")
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(out)], stdout=subprocess.PIPE, text=True,
                              cwd=ROOT)
    try:
        assert holder.stdout.readline() == "held\n"
        before = snapshot(out)
        # --overwrite: the earlier model may be replaced, but not while another run holds the folder.
        status, output = run_entry([*glue_job, "--overwrite"], capsys, run_glue.main, "run_glue.py")
        assert status == 1
        one_line_error(output, "run_glue.py: ", f"--output-dir {out}: in use by another run (PID {holder.pid} on "
                       f"host {hostname()}")
        assert snapshot(out) == before  # not even the report was appended to
    finally:
        holder.kill()
        holder.wait()
    assert run_entry([*glue_job, "--overwrite"], capsys, run_glue.main, "run_glue.py")[0] == 0  # free once gone


def test_a_file_system_that_cannot_lock_is_one_warning_and_the_run_goes_on(tmp_path, monkeypatch, capsys):
    import errno
    import fcntl

    def no_locks(descriptor, operation):
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    status, output = run_entry(pretraining_argv(tmp_path, "--max-steps", "1"), capsys)
    assert status == 0, output[-3000:]
    (warning,) = [line for line in output.splitlines() if line.startswith("Warning: --output-dir")]
    assert f"{tmp_path / 'out'}: its file system cannot lock files" in warning and "-o flock" in warning


@pytest.mark.parametrize("kind", ["regular file", "dangling symlink", "read-only", "phase folder dangling symlink",
                                  "phase folder read-only"])
def test_an_unusable_output_dir_is_one_line_before_any_training(tmp_path, capsys, request, kind):
    out = tmp_path / "out"
    phase_folder = out / "custom" / "phase1"
    if kind == "regular file":
        out.write_text("not a folder")
        expected = f"--output-dir {out}: not a folder"
    elif kind == "dangling symlink":
        out.symlink_to(tmp_path / "gone")
        expected = f"--output-dir {out}: a symlink to {tmp_path / 'gone'}, which does not exist"
    elif kind == "read-only":
        out = request.getfixturevalue("tmpfs")("size=1m,ro")
        expected = f"--output-dir {out}: not writable (Read-only file system)"
    elif kind == "phase folder dangling symlink":
        phase_folder.parent.mkdir(parents=True)
        phase_folder.symlink_to(tmp_path / "scratch" / "phase1")
        expected = f"--output-dir's phase folder {phase_folder}: a symlink to {tmp_path / 'scratch' / 'phase1'}, "
    else:
        read_only = request.getfixturevalue("tmpfs")("size=1m,ro")
        phase_folder.parent.mkdir(parents=True)
        phase_folder.symlink_to(read_only)
        expected = f"--output-dir's phase folder {phase_folder}: not writable (Read-only file system)"
    before = snapshot(tmp_path)
    status, output = run_entry(pretraining_argv(tmp_path, "--output-dir", str(out)), capsys)
    assert status == 1
    assert "Training phase" not in output
    one_line_error(output, "run_pretraining.py: ", expected)
    assert_kept(before)


# ---------------------------------------------------------------------------------------------------------------
# Signals: every stop signal saves at the next step boundary; a second Ctrl-C stops at once


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGTERM],
                         ids=lambda signum: signum.name)
def test_every_stop_signal_saves_at_the_next_step_and_exits_0(tmp_path, signum):
    job = start_long_job(tmp_path)
    workers = process_tree(job.pid)
    try:
        job.send_signal(signum)
        out, err = job.communicate(timeout=120)
        assert job.returncode == 0, err[-3000:]
        assert err == ""  # no traceback, no worker's complaint
        name = signal.Signals(signum).name
        assert f"{name}: saving a checkpoint after this step, then stopping" in out
        (stopped,) = [line for line in out.splitlines() if line.startswith(f"{name}: stopped after step ")]
        step = int(stopped.split()[4])
        assert stopped == f"{name}: stopped after step {step} (checkpoint in {step_folder(tmp_path / 'out', step)})"
        assert step_folders(tmp_path / "out") == [step]
        assert checkpoint.read_progress(step_folder(tmp_path / "out", step))["global_step"] == step
        assert wait_until_gone(workers, seconds=5) == []
    finally:
        end_leftovers(job, workers)


# run_pretraining.main() whose first step after the checkpoint of step 4 says PAUSED_IN_STEP and stays in that step
# until a signal handler raises (interrupts.pause_forever): the second Ctrl-C surely comes before the step boundary
# that the first one waits for.
PAUSED_IN_STEP = "paused in the step after the checkpoint"
PAUSE_AFTER_CHECKPOINT = f"""
import os, sys
sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "tests")]
import interrupts, run_pretraining; from checkpoints import checkpoint
real_step = run_pretraining.Trainer.step
def paused_step(self, *args, **kwargs):
    if checkpoint.list_checkpoints(checkpoint.phase_dir(self.args.output_dir, "custom", 1)):
        interrupts.say("{PAUSED_IN_STEP}")
        interrupts.pause_forever()
    return real_step(self, *args, **kwargs)
run_pretraining.Trainer.step = paused_step
sys.exit(run_pretraining.cli.run_main(lambda: run_pretraining.main(sys.argv[1:]), "run_pretraining.py"))
"""


def test_a_second_ctrl_c_stops_at_once_in_one_line_and_keeps_the_checkpoints(tmp_path):
    job = start_long_job(tmp_path, "--num-steps-per-checkpoint", "4", code=PAUSE_AFTER_CHECKPOINT)
    workers = process_tree(job.pid)
    output = ChildOutput(job)
    try:
        output.wait_for_line(PAUSED_IN_STEP, 120, "step 5, after the checkpoint of step 4")
        assert step_folders(tmp_path / "out") == [4]
        before = snapshot(tmp_path / "out")
        signal_while_running(job, signal.SIGINT, "paused in step 5")
        # A second signal before the handler has run for the first would merge with it: wait for its notice.
        output.wait_for_line("SIGINT: saving a checkpoint after this step, then stopping (Ctrl-C again to stop at "
                             "once)", 60, "the notice of the first Ctrl-C")
        signal_while_running(job, signal.SIGINT, "paused in step 5 after the first Ctrl-C")
        out, err = output.finish(60)
        assert job.returncode == cli.INTERRUPTED_STATUS, out[-3000:] + err[-3000:]
        assert_one_line(err, "run_pretraining.py: ", "interrupted again", "stopped at once", "without saving")
        assert_kept(before)
        assert step_folders(tmp_path / "out") == [4]
        assert not [p for p in phase1(tmp_path).iterdir() if p.name.startswith(TEMP_PREFIX)]
        assert wait_until_gone(workers, seconds=5) == []
    finally:
        end_leftovers(job, workers)


# ---------------------------------------------------------------------------------------------------------------
# Killing preprocessing: no worker outlives it, and its rerun clears what it left


def preprocess_command(tmp_path: Path, code: str | None = None) -> list[str]:
    """lddl_preprocess.py (or `python -c code` with its argv) with two pool workers on wikitext-2's test split, which
    it cuts into two read ranges: one for each worker."""
    return [sys.executable, "-W", "ignore", *(["-c", code] if code else [str(ROOT / "lddl_preprocess.py")]),
            "--input", str(require_shared("data", "wikitext-2", "wiki.test.raw")),
            "--vocab-file", str(require_shared("vocab", "bert-uncased-vocab.txt")), "--output-dir",
            str(tmp_path / "out"), "--num-workers", "2", "--num-shards", "2", "--quiet"]


def work_folders(tmp_path: Path) -> list[Path]:
    return sorted(tmp_path.glob(".preprocess-out-*"))


# lddl_preprocess.py whose pool workers each tokenize their read range, spill it into the work folder, leave a mark
# and stay in that task (interrupts.tokenize_range_then_pause): the run cannot leave stage 1 until it is signalled.
PAUSED_PREPROCESSING = """
import os, sys
sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "tests")]
import interrupts, lddl_preprocess; from utils import cli; from preprocessing import preprocess_pipeline
interrupts.answer_ctrl_c()
preprocess_pipeline.tokenize_range = interrupts.tokenize_range_then_pause
sys.exit(cli.run_main(lddl_preprocess.main, "lddl_preprocess.py"))
"""


def start_paused_preprocessing(tmp_path: Path) -> tuple[subprocess.Popen, ChildOutput, list[int]]:
    """The preprocessor in its own process group (as a terminal's job), once both pool workers have spilled their
    range into its work folder and are held inside stage 1's tasks; (process, its output, its process tree)."""
    marks = tmp_path / "marks"
    marks.mkdir()
    job = subprocess.Popen(preprocess_command(tmp_path, PAUSED_PREPROCESSING), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, cwd=ROOT, start_new_session=True,
                           env={**os.environ, MARKS_VARIABLE: str(marks)})
    output = ChildOutput(job)

    def both_paused() -> bool:
        assert job.poll() is None, f"the job ended (status {job.returncode}) before pausing:\n{output.tail()}"
        return len(list(marks.iterdir())) == 2

    try:
        wait_for(both_paused, 120, "both pool workers to tokenize their range")
        pool_workers = [int(mark.name.removeprefix("tokenized-")) for mark in marks.iterdir()]
        assert [parent_of(pid) for pid in pool_workers] == [job.pid, job.pid]
        (work_folder,) = work_folders(tmp_path)
        assert len(list(work_folder.glob("block-*-tokens.npy"))) == 2
    except BaseException:
        end_leftovers(job, process_tree(job.pid))
        raise
    return job, output, process_tree(job.pid)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process tree from /proc")
def test_sigkill_of_preprocessing_leaves_no_worker_and_the_rerun_removes_its_work_folder(tmp_path):
    job, output, tree = start_paused_preprocessing(tmp_path)
    try:
        signal_while_running(job, signal.SIGKILL, "paused in stage 1")
        output.finish(30)
        assert job.returncode == -signal.SIGKILL
        assert wait_until_gone(tree, seconds=5) == []
    finally:
        end_leftovers(job, tree)
    (leftover,) = work_folders(tmp_path)
    # The output folder holds nothing, so the recipes' emptiness check runs preprocessing again.
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    rerun = subprocess.run(preprocess_command(tmp_path), capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    (removed,) = [line for line in rerun.stderr.splitlines() if line.startswith("Removed ")]
    assert removed.startswith(f"Removed {leftover} (")
    assert removed.endswith("MB), the work folder of an interrupted run")
    assert work_folders(tmp_path) == []
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [".num_samples.json", "shard-0.parquet",
                                                                     "shard-1.parquet"]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process tree from /proc")
def test_ctrl_c_in_preprocessing_is_one_line_and_leaves_nothing(tmp_path):
    job, output, tree = start_paused_preprocessing(tmp_path)
    try:
        # As a terminal's Ctrl-C: to the whole process group, the pool workers too (which leave it to the parent).
        signal_while_running(job, signal.SIGINT, "paused in stage 1", group=True)
        _, err = output.finish(60)
        assert job.returncode == cli.INTERRUPTED_STATUS, err[-3000:]
        assert_one_line(err, "lddl_preprocess.py: ", "interrupted", "Ctrl-C")
        assert wait_until_gone(tree, seconds=5) == []
    finally:
        end_leftovers(job, tree)
    assert work_folders(tmp_path) == []


def test_ctrl_c_in_any_entry_script_is_one_line_and_status_130(capsys):
    def interrupted():
        raise KeyboardInterrupt

    assert cli.run_main(interrupted, "run_squad.py") == cli.INTERRUPTED_STATUS
    captured = capsys.readouterr()
    assert captured.out == ""
    assert_one_line(captured.err, "run_squad.py: ", "interrupted", "Ctrl-C")


# ---------------------------------------------------------------------------------------------------------------
# Files that belong together are written as one unit


def test_a_rerun_without_save_safetensors_leaves_no_stale_twin_beside_the_new_model(glue_job, tmp_path, capsys):
    import run_glue

    assert run_entry([*glue_job, "--save-safetensors"], capsys, run_glue.main, "run_glue.py")[0] == 0
    assert (tmp_path / "out" / "bert_paddle.safetensors").is_file()
    assert run_entry([*glue_job, "--seed", "3", "--overwrite"], capsys, run_glue.main, "run_glue.py")[0] == 0
    assert not (tmp_path / "out" / "bert_paddle.safetensors").exists()
    assert (tmp_path / "out" / "bert_paddle.pdparams").is_file()


def test_save_safetensors_on_a_full_disk_is_one_line_naming_the_file(tmp_path, tmpfs, capsys):
    disk = tmpfs("size=14m")  # the tiny job's checkpoint (12.3 MB) fits, its weights again as safetensors do not
    status, output = run_entry(pretraining_argv(tmp_path, "--max-steps", "2", "--num-steps-per-checkpoint", "2",
                                                "--output-dir", str(disk), "--save-safetensors"), capsys)
    assert status == 1
    # The twin is part of the final checkpoint's atomic save: neither is written, and the message says so.
    one_line_error(output, "run_pretraining.py: ", f"{disk}/custom/phase1/2: checkpoint not saved",
                   "No space left on device")
    assert not (disk / "custom" / "phase1" / "2").exists()
    assert not [p for p in (disk / "custom" / "phase1").iterdir() if p.name.startswith(TEMP_PREFIX)]


def test_squad_predictions_on_a_full_disk_keep_the_old_set_whole_and_name_the_file(tmp_path, tmpfs):
    from utils.atomic_io import atomic_write_set, text_writer

    disk = tmpfs("size=1m")
    names = ("predictions.json", "nbest_predictions.json", "null_odds.json")
    atomic_write_set({disk / name: text_writer(f"old {name}\n") for name in names})
    before = snapshot(disk)
    (disk / "filler").write_bytes(b"x" * (1024 * 1024 - 64 * 1024))  # leave less room than the new nbest needs
    new = {disk / "predictions.json": text_writer("{}\n"), disk / "nbest_predictions.json": text_writer("n" * 200000),
           disk / "null_odds.json": None}
    with pytest.raises(OSError) as error:
        atomic_write_set(new)
    assert str(error.value).startswith(f"[Errno 28] {disk / 'nbest_predictions.json'}: not written, so none of ")
    (disk / "filler").unlink()
    assert_kept(before)
    assert sorted(p.name for p in disk.iterdir()) == sorted(names)  # no temp file left
    # With room, the new set replaces the old one whole, and the file the new set lacks is gone.
    atomic_write_set(new)
    assert sorted(p.name for p in disk.iterdir()) == ["nbest_predictions.json", "predictions.json"]


def test_plot_report_refuses_to_write_the_plot_over_its_report(trained, tmp_path, capsys):
    report = tmp_path / "report.json"
    shutil.copy(trained / "report.json", report)
    before = snapshot(report)
    status, output = run_entry([str(report), "--output", str(tmp_path / "." / "report.json")], capsys,
                               plot_report.main, "plot_report.py")
    assert status == 1
    one_line_error(output, "--output", f"--output {tmp_path / '.' / 'report.json'}: is the report itself")
    assert snapshot(report) == before


@pytest.mark.parametrize("prefix", ["../../evil", "sub/x", "..", ""])
@pytest.mark.parametrize("script", ["run_pretraining.py", "run_glue.py"])
def test_a_model_prefix_that_is_a_path_is_a_parser_error(tmp_path, capsys, glue_job, script, prefix):
    import run_glue

    argv, main = (pretraining_argv(tmp_path), run_pretraining.main) if script == "run_pretraining.py" else \
        (glue_job, run_glue.main)
    status, output = run_entry([*argv, "--model-prefix", prefix], capsys, main, script)
    assert status == 2
    assert "Traceback" not in output
    (error,) = [line for line in output.splitlines() if " error: " in line]
    assert error.endswith(f"error: argument --model-prefix: expected a file name without a folder part, got "
                          f"{prefix!r}")
    assert not (tmp_path / "out").exists() and not (tmp_path / "evil").exists()


@pytest.fixture(scope="module")
def eval_shards(tmp_path_factory) -> dict[str, Path]:
    """Held-out shards that do not fit the tiny NSP job of seq 128: of seq 256, and single segments (--no-nsp)."""
    import lddl_preprocess

    folder = tmp_path_factory.mktemp("eval_shards")
    common = ["--input", str(require_shared("data", "wikitext-2", "wiki.test.raw")), "--vocab-file",
              str(require_shared("vocab", "bert-uncased-vocab.txt")), "--duplicate-factor", "1", "--num-shards", "1",
              "--sample-ratio", "0.2", "--num-workers", "1", "--quiet"]
    lddl_preprocess.main([*common, "--max-seq-length", "256", "--output-dir", str(folder / "seq256")])
    lddl_preprocess.main([*common, "--max-seq-length", "128", "--no-nsp", "--output-dir", str(folder / "no_nsp")])
    return {"seq256": folder / "seq256", "no_nsp": folder / "no_nsp"}


@pytest.mark.parametrize("kind, named", [
    ("seq256", "tokens, more than max_seq_length=128"),
    ("no_nsp", "segment B is empty, a single-segment sample (lddl_preprocess.py --no-nsp)"),
])
def test_eval_shards_that_do_not_fit_the_run_stop_it_before_the_first_step(tmp_path, capsys, eval_shards, kind,
                                                                           named):
    before = snapshot(eval_shards[kind])
    status, output = run_entry(pretraining_argv(tmp_path, "--eval-dir", str(eval_shards[kind]), "--eval-freq", "2"),
                               capsys)
    assert status == 1
    assert "step 1/" not in output
    one_line_error(output, "run_pretraining.py: ", f"{eval_shards[kind] / 'shard-0.parquet'}: row ", named)
    assert step_folders(tmp_path / "out") == []
    assert snapshot(eval_shards[kind]) == before


def test_a_thread_count_far_beyond_the_cpus_is_one_line_not_an_abort(tmp_path):
    # A real process: before the check, the OpenMP runtime aborted it (SIGABRT) trying to start the threads.
    result = subprocess.run([sys.executable, "-W", "ignore", SCRIPT, *pretraining_argv(tmp_path)], capture_output=True,
                            text=True, cwd=ROOT, timeout=300,
                            env={**without_omp_threads(), "PADDLEBERT_NUM_THREADS": "100000"})
    assert result.returncode == 1, result.stderr[-2000:]
    one_line_error(result.stderr, "run_pretraining.py: ", "PADDLEBERT_NUM_THREADS='100000' is more than 8 threads "
                   "per CPU")
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------------------------
# Flags that could not take effect are refused, not silently accepted


@pytest.mark.parametrize("extra, message", [
    (("--masked-lm-ratio", "0.3"), "--masked-lm-ratio 0.3: the shards of --input-dir "),
    (("--save-safetensors", "--benchmark"), "--save-safetensors writes the final weights beside the last "
     "checkpoint, and --benchmark saves no checkpoint"),
])
def test_pretraining_flags_that_cannot_take_effect_are_parser_errors(tmp_path, capsys, extra, message):
    status, output = run_entry(pretraining_argv(tmp_path, *extra), capsys)  # statically masked shards
    assert status == 2
    assert "Traceback" not in output
    (error,) = [line for line in output.splitlines() if " error: " in line]
    assert message in error
    assert not (tmp_path / "out").exists()


def test_masked_lm_ratio_on_dynamic_shards_still_trains(tmp_path, capsys):
    from pretraining_runs import DYNAMIC

    # 0.3 of 128 tokens is 38 masks: the cap must allow them (a lower one is refused: test_faults_pretraining_flags)
    status, output = run_entry(pretraining_argv(tmp_path, "--max-steps", "1", "--masked-lm-ratio", "0.3",
                                                "--max-predictions-per-seq", "38", shards=DYNAMIC), capsys)
    assert status == 0, output[-3000:]


def test_save_safetensors_without_training_is_a_parser_error(glue_job, tmp_path, capsys):
    import run_glue

    argv = [*(arg for arg in glue_job if arg != "--do-train"), "--save-safetensors", "--do-predict", "--predict-file",
            str(tmp_path / "train.tsv")]
    status, output = run_entry(argv, capsys, run_glue.main, "run_glue.py")
    assert status == 2
    (error,) = [line for line in output.splitlines() if " error: " in line]
    assert error.endswith("--save-safetensors writes the fine-tuned model, which only --do-train without --benchmark "
                          "saves")
    assert not (tmp_path / "out").exists()


def test_a_squad_v2_question_marked_impossible_with_answers_is_one_line(tmp_path):
    from squad_utils import read_squad_examples

    dataset = tmp_path / "train-v2.0.json"
    dataset.write_text(json.dumps({"version": "v2.0", "data": [{"title": "t", "paragraphs": [{
        "context": "Paris is in France.", "qas": [{"id": "q1", "question": "Where is Paris?", "is_impossible": True,
                                                   "answers": [{"text": "France", "answer_start": 12}]}]}]}]}))
    with pytest.raises(ValueError, match=rf"^{dataset}: question q1 is marked is_impossible but has answers"):
        read_squad_examples(str(dataset), is_training=True, version_2_with_negative=True)


def test_a_nan_in_the_no_answer_file_is_one_line_naming_it(tmp_path, capsys):
    dataset = tmp_path / "dev-v2.0.json"
    dataset.write_text(json.dumps({"version": "v2.0", "data": [{"title": "t", "paragraphs": [{
        "context": "Paris is in France.", "qas": [{"id": "q1", "question": "Where is Paris?", "is_impossible": False,
                                                   "answers": [{"text": "France", "answer_start": 12}]}]}]}]}))
    (tmp_path / "predictions.json").write_text('{"q1": "France"}')
    (tmp_path / "null_odds.json").write_text('{"q1": NaN}')
    status, output = run_entry([str(dataset), str(tmp_path / "predictions.json"), "--na-prob-file",
                                str(tmp_path / "null_odds.json")], capsys, squad_evaluate.main, "squad_evaluate.py")
    assert status == 1
    one_line_error(output, "squad_evaluate.py: ", f"{tmp_path / 'null_odds.json'}: probability for question q1 is "
                   "nan, not a finite number")


@pytest.fixture(scope="module")
def exported_model(tmp_path_factory) -> Path:
    """A tiny BERT for SQuAD exported for Paddle Inference: <folder>/bert_paddle.json and .pdiparams."""
    from fine_tuning_runs import tiny_config
    from inference import inference
    from modeling import BertConfig, BertForQuestionAnswering

    folder = tmp_path_factory.mktemp("exported")
    inference.export_inference_model(BertForQuestionAnswering(BertConfig.from_dict(tiny_config())), str(folder),
                                     "bert_paddle")
    return folder


@pytest.mark.parametrize("name", ["bert_paddle.json", "bert_paddle.pdiparams"])
def test_a_truncated_exported_model_is_one_line_naming_it(exported_model, tmp_path, capsys, name):
    from inference import inference

    folder = tmp_path / "export"
    shutil.copytree(exported_model, folder)
    truncate(folder / name, keep=(folder / name).stat().st_size // 2)
    before = snapshot(folder)
    status, output = run_entry([], capsys, lambda argv: inference.inference_predictor(str(folder), "bert_paddle", 1),
                               "run_squad.py")
    assert status == 1
    one_line_error(output, "run_squad.py: ", f"{folder / 'bert_paddle'}: not a readable exported model (")
    assert snapshot(folder) == before


# Holds the lock of argv[1], forks a child that outlives it, says "held <child pid>", and waits to be killed.
HOLD_LOCK_AND_FORK = """
import os, sys, time
sys.path.insert(0, os.getcwd())
from utils import folder_lock
folder_lock.hold(sys.argv[1], "--output-dir")
child = os.fork()
if child == 0:  # fork() returns here only after the after-fork hooks, folder_lock's among them, have run
    os.write(1, f"child {os.getpid()}\\n".encode())  # one write each, so the two lines cannot interleave
    time.sleep(600)
    os._exit(0)
os.write(1, f"held {child}\\n".encode())
time.sleep(600)
"""


def test_the_lock_ends_with_its_holder_even_if_a_forked_child_lives_on(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK_AND_FORK, str(tmp_path)], stdout=subprocess.PIPE,
                              text=True, cwd=ROOT)
    child = None
    try:
        # Both lines, in either order: the child's says its copy of the lock descriptor is already closed.
        said = [holder.stdout.readline() for _ in range(2)]
        lines = dict(line.split() for line in said if len(line.split()) == 2)
        assert lines.keys() == {"child", "held"}, said
        child = int(lines["child"])
        assert int(lines["held"]) == child
        with pytest.raises(folder_lock.FolderInUse, match=f"PID {holder.pid} on host "):
            folder_lock.hold(tmp_path, "--output-dir")
        holder.kill()
        holder.wait(timeout=30)
        assert running(child)
        folder_lock.hold(tmp_path, "--output-dir")  # free, though the child forked while it was held is alive
        folder_lock.release(tmp_path)
    finally:
        holder.kill()
        if child is not None and running(child):
            os.kill(child, signal.SIGKILL)


# ---------------------------------------------------------------------------------------------------------------
# Round 2's leftovers: a mistyped resume path, weights that are not numbers, shapes and values a run cannot use


@pytest.mark.parametrize("make", ["missing", "empty"])
def test_a_mistyped_resume_folder_is_one_line_not_a_run_from_step_1(job, capsys, make):
    typo = job / "out" / "custom" / "phse1"
    if make == "empty":
        typo.mkdir()
    before = snapshot(job / "out")
    status, output = run_entry(pretraining_argv(job, *JOB, "--from-checkpoint", str(typo)), capsys)
    assert status == 1
    state = "does not exist" if make == "missing" else "holds no checkpoint"
    one_line_error(output, "run_pretraining.py: ", f"{typo}: --from-checkpoint {state}")
    assert "starting at step 1" not in output
    assert_kept(before)
    assert step_folders(job / "out") == [2, 4]


def test_the_runs_own_phase_folder_named_by_from_checkpoint_may_not_exist_yet(tmp_path, capsys):
    status, output = run_entry(pretraining_argv(tmp_path, *JOB, "--max-steps", "2", "--from-checkpoint",
                                                str(phase1(tmp_path))), capsys)
    assert status == 0, output[-3000:]
    assert "No checkpoint to resume from; starting at step 1" in output


@pytest.mark.parametrize("damage, named", [
    ("int32", "is int32, not floating point"),
    ("all NaN", "holds NaN or infinity"),
    ("one inf", "holds NaN or infinity"),
])
def test_weights_that_are_not_trained_numbers_in_a_safetensors_file_are_one_line(trained, tmp_path, capsys, damage,
                                                                               named):
    from checkpoints.weights import write_safetensors_weights

    state = checkpoint_params(trained / "out", 4)
    name = "bert.encoder.0.attention.query.weight"
    if damage == "int32":
        state[name] = state[name].astype(np.int32)
    elif damage == "all NaN":
        state[name] = np.full_like(state[name], np.nan)
    else:
        state[name] = state[name].copy()
        state[name].flat[7] = np.inf
    start = write_safetensors_weights(tmp_path / "start" / "bert_paddle.safetensors", state)
    before = snapshot(start)
    status, output = run_entry(pretraining_argv(tmp_path, "--max-steps", "1", "--from-pretrained-params",
                                                str(start)), capsys)
    assert status == 1
    one_line_error(output, "run_pretraining.py: ", str(start), f"tensor {name} {named}")
    assert_kept(before)
    assert not (tmp_path / "out" / "custom" / "phase1").exists() or step_folders(tmp_path / "out") == []


@pytest.mark.parametrize("script", ["run_pretraining.py", "run_glue.py"])
def test_a_config_with_one_token_type_is_one_line_naming_it(tmp_path, capsys, glue_job, script):
    import run_glue

    config = tmp_path / "one_type.json"
    config.write_text(json.dumps({**json.loads(Path(glue_job[glue_job.index("--config-file") + 1]).read_text()),
                                  "type_vocab_size": 1}), encoding="utf-8")
    before = snapshot(config)
    if script == "run_glue.py":
        status, output = run_entry([*glue_job, "--config-file", str(config)], capsys, run_glue.main, script)
    else:
        status, output = run_entry(pretraining_argv(tmp_path, "--max-steps", "1", "--config-file", str(config)),
                                   capsys)
    assert status == 1
    one_line_error(output, f"{script}: ", f"{config}: type_vocab_size 1 is too small")
    assert_kept(before)


# run_pretraining.main() killed (SIGKILL, as by the OOM killer or `scancel --signal=KILL`) the moment it starts
# writing the .safetensors twin of the final weights.
KILLED_WRITING_THE_TWIN = """
import os, signal, sys
sys.path.insert(0, os.getcwd())
from checkpoints import paddle_files
paddle_files.write_safetensors_state = lambda *args, **kwargs: os.kill(os.getpid(), signal.SIGKILL)
import run_pretraining
sys.exit(run_pretraining.cli.run_main(lambda: run_pretraining.main(sys.argv[1:]), "run_pretraining.py"))
"""


def test_a_kill_while_writing_the_safetensors_twin_leaves_no_final_checkpoint_without_it(tmp_path, capsys):
    argv = pretraining_argv(tmp_path, *JOB, "--save-safetensors")
    killed = subprocess.run([sys.executable, "-W", "ignore", "-c", KILLED_WRITING_THE_TWIN, *argv], cwd=ROOT,
                            capture_output=True, text=True, env=without_omp_threads(), timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    # Step 4's save was under way: it is not there at all, rather than there without its twin.
    assert step_folders(tmp_path / "out") == [2]
    before = snapshot(step_folder(tmp_path / "out", 2))  # the killed save's temporary folder is for the rerun to clear
    status, output = run_entry(argv, capsys)  # the same command again resumes at step 2 and finishes the set
    assert status == 0, output[-3000:]
    assert f"Resuming from {step_folder(tmp_path / 'out', 2)} at step 2" in output
    assert_kept(before)
    assert not [p for p in phase1(tmp_path).iterdir() if p.name.startswith(TEMP_PREFIX)]
    final = step_folder(tmp_path / "out", 4)
    twin = final / "bert_paddle.safetensors"
    assert f"Final weights also in {twin}" in output
    from checkpoints.paddle_files import read_safetensors_state

    saved = checkpoint_params(tmp_path / "out", 4)
    assert_bitwise_equal(read_safetensors_state(twin), saved)


def test_pack_sequences_on_a_bin_too_wide_to_pack_is_one_line_with_the_numbers(tmp_path, capsys):
    from pretraining_runs import BINNED

    # Bin 1 of the bin-64 set: every sample has 65 to 128 tokens, so no two share a row of 128.
    wide = tmp_path / "bin1"
    wide.mkdir()
    for shard in sorted(require_shared(*BINNED).glob("*.parquet_1")):
        shutil.copy(shard, wide / shard.name)
    before = snapshot(wide)
    status, output = run_entry(pretraining_argv(tmp_path, "--max-steps", "1", "--pack-sequences", shards=wide),
                               capsys)
    assert status == 1
    line = one_line_error(output, "run_pretraining.py: ", f"{wide}: --pack-sequences cannot pack these samples",
                          "together more than --max-seq-length 128")
    shortest, second = (int(word) for word in line.split("have ")[1].split(" tokens")[0].split(" and "))
    assert 64 < shortest <= second <= 128
    assert_kept(before)
    assert not (tmp_path / "out" / "custom" / "phase1").exists() or step_folders(tmp_path / "out") == []


def test_pack_sequences_on_a_binned_set_with_its_short_bin_still_trains(tmp_path, capsys):
    from pretraining_runs import BINNED

    status, output = run_entry(pretraining_argv(tmp_path, "--max-steps", "1", "--pack-sequences",
                                                shards=require_shared(*BINNED)), capsys)
    assert status == 0, output[-3000:]
