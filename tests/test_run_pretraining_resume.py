"""run_pretraining.py checkpoints: exact resume after SIGKILL (at a step and in the middle of a save), SIGTERM,
rotation across runs, the appended report, explicit steps, and phase 1 -> phase 2.

Every run passes --last-step-of-checkpoint auto, as NVIDIA's recipes do, so that "the same command" both starts
a job and resumes it. Every run whose weights a test compares bit for bit with another's is a process of the real
command (pretraining_runs.training_environment says why); runs that only have to fail are called in this process.
"""

from __future__ import annotations

import contextlib
import io
import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest

import lddl_preprocess
from bert_config import BertConfig
from checkpoints import checkpoint
from checkpoints.weights import load_state
from conftest import require_shared
from interrupts import signal_while_running
from modeling import BertForPretraining
from pretraining_runs import (
    checkpoint_params,
    pretraining_argv,
    run_training,
    start_training,
    step_folder,
    step_folders,
    step_numbers,
    step_records,
    summaries,
    train,
)
from utils.dllog import read_report

# Dropout on and two merged micro-batches per step: the resumed run must continue every random stream exactly.
RESUMABLE = ("--max-steps", "6", "--num-steps-per-checkpoint", "2", "--keep-checkpoint-max", "2",
             "--gradient-merge-steps", "2", "--last-step-of-checkpoint", "auto")


def resumable_argv(folder: Path, *extra: str) -> list[str]:
    return pretraining_argv(folder, *RESUMABLE, *extra)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("uninterrupted")
    run_training(resumable_argv(folder))
    return folder


def wait_for_line(process: subprocess.Popen, prefix: str) -> list[str]:
    lines = []
    for line in process.stdout:
        lines.append(line)
        if line.startswith(prefix):
            return lines
    process.wait()
    pytest.fail(f"the run ended (status {process.returncode}) before printing {prefix!r}:\n{''.join(lines)[-3000:]}")


def assert_bitwise_equal(actual: dict, expected: dict) -> None:
    assert actual.keys() == expected.keys()
    different = [name for name in expected if not np.array_equal(actual[name], expected[name])]
    assert not different, f"parameters differ: {different}"


# run_pretraining.main() that says PAUSED_IN_STEP_4 as step 4 begins and stays in that step until it is killed
# (interrupts.pause_forever): a kill on the line "step 3/6" could find a fast machine's job finished.
PAUSED_IN_STEP_4 = "paused in step 4"
PAUSE_IN_STEP_4 = f"""
import os, sys
sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "tests")]
import interrupts, run_pretraining
real_step = run_pretraining.Trainer.step
steps = []
def paused_step(self, *args, **kwargs):
    steps.append(len(steps) + 1)
    if steps[-1] == 4:
        interrupts.say("{PAUSED_IN_STEP_4}")
        interrupts.pause_forever()
    return real_step(self, *args, **kwargs)
run_pretraining.Trainer.step = paused_step
sys.exit(run_pretraining.main(sys.argv[1:]))
"""


def test_sigkill_at_a_step_then_the_same_command_resumes_exactly(uninterrupted, tmp_path):
    argv = resumable_argv(tmp_path)
    process = start_training(argv, code=PAUSE_IN_STEP_4)
    wait_for_line(process, PAUSED_IN_STEP_4)
    signal_while_running(process, signal.SIGKILL, "paused in step 4")
    assert process.wait() == -signal.SIGKILL
    assert step_folders(tmp_path / "out") == [2]

    run_training(argv)
    assert_bitwise_equal(checkpoint_params(tmp_path / "out", 6), checkpoint_params(uninterrupted / "out", 6))
    # --keep-checkpoint-max 2 counts the killed run's checkpoints too.
    assert step_folders(tmp_path / "out") == step_folders(uninterrupted / "out") == [4, 6]
    # The report continues: the killed run's records, then the resumed run's from the step after its last
    # checkpoint (steps after that checkpoint are trained and reported again), all valid DLLogger records.
    assert step_numbers(step_records(tmp_path / "report.json")) == [1, 2, 3, 3, 4, 5, 6]
    assert len(summaries(tmp_path / "report.json")) == 1  # the killed run never got to its summary


def test_every_step_folder_holds_its_config_and_loads_without_the_config_file(uninterrupted):
    # The run's config: pretraining_argv's 1-layer, hidden-32 BERT, with the vocabulary padded to a multiple of 8.
    expected = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                          intermediate_size=64, max_position_embeddings=128, pad_vocab_size_multiple=8)
    for step in step_folders(uninterrupted / "out"):
        folder = step_folder(uninterrupted / "out", step)
        config = checkpoint.read_config(folder)
        assert config == expected
        model = BertForPretraining(config)
        saved = checkpoint.load_checkpoint(folder)[0]
        assert load_state(model, saved, str(folder)) == ([], [])
        loaded = {name: value.numpy() for name, value in model.state_dict().items()}
        assert_bitwise_equal(loaded, checkpoint_params(uninterrupted / "out", step))


def test_a_folder_without_a_config_file_still_resumes_exactly(uninterrupted, tmp_path):
    # Checkpoints written before the config file was part of the format.
    argv = resumable_argv(tmp_path)
    run_training([*argv, "--steps-this-run", "2"])
    (step_folder(tmp_path / "out", 2) / "bert_paddle_config.json").unlink()
    run_training(argv)
    assert_bitwise_equal(checkpoint_params(tmp_path / "out", 6), checkpoint_params(uninterrupted / "out", 6))
    assert checkpoint.read_config(step_folder(tmp_path / "out", 6)) is not None


# Runs run_pretraining.main() with paddle.save wrapped so that the process kills itself right after writing the
# params of its second checkpoint (step 4): the optimizer state and progress file of that save never land.
KILL_DURING_SECOND_SAVE = """
import os, signal, sys
import paddle
sys.path.insert(0, os.getcwd())
import run_pretraining
saves = []
original_save = paddle.save
def save_then_maybe_die(obj, path, *args, **kwargs):
    original_save(obj, path, *args, **kwargs)
    saves.append(path)
    if len(saves) == 3:
        print("killed while saving", path, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
paddle.save = save_then_maybe_die
sys.exit(run_pretraining.main(sys.argv[1:]))
"""


def test_sigkill_in_the_middle_of_a_save_then_resume_exactly(uninterrupted, tmp_path):
    argv = resumable_argv(tmp_path)
    process = start_training(argv, code=KILL_DURING_SECOND_SAVE)
    lines = wait_for_line(process, "killed while saving")
    process.wait()
    assert process.returncode == -signal.SIGKILL, "".join(lines)
    assert lines[-1].rstrip().endswith(".pdparams")
    # The half-written step-4 checkpoint is invisible; step 2 is what the next run finds.
    assert step_folders(tmp_path / "out") == [2]
    run_training(argv)
    assert_bitwise_equal(checkpoint_params(tmp_path / "out", 6), checkpoint_params(uninterrupted / "out", 6))


def test_sigterm_saves_a_loadable_checkpoint_and_exits_0(tmp_path):
    # Steps for hours, so that the signal surely finds the job training, however fast the machine.
    argv = pretraining_argv(tmp_path, "--max-steps", "100000", "--num-steps-per-checkpoint", "100000")
    process = start_training(argv)
    wait_for_line(process, "step 2/100000")
    signal_while_running(process, signal.SIGTERM, "training")
    output, _ = process.communicate(timeout=120)
    assert process.returncode == 0, output
    (line,) = [line for line in output.splitlines() if line.startswith("SIGTERM: stopped after step")]
    stopped_at = int(line.split()[4])
    assert 2 < stopped_at < 100000
    model_state, optimizer_state, progress = checkpoint.load_checkpoint(
        tmp_path / "out" / "custom" / "phase1" / str(stopped_at))
    assert progress["global_step"] == stopped_at and progress["phase"] == 1
    assert optimizer_state["LR_Scheduler"]["last_epoch"] == stopped_at
    assert "bert.embeddings.word_embeddings.weight" in model_state
    assert step_numbers(step_records(tmp_path / "report.json"))[-1] == stopped_at


def test_explicit_step_and_single_folder_resume(uninterrupted, tmp_path):
    phase_folder = uninterrupted / "out" / "custom" / "phase1"
    # From another job's phase folder at an explicit step: global_step comes from that checkpoint.
    explicit = pretraining_argv(tmp_path, *RESUMABLE[:-2], "--output-dir", str(tmp_path / "explicit"),
                                "--from-checkpoint", str(phase_folder), "--last-step-of-checkpoint", "4")
    run_training(explicit)
    assert_bitwise_equal(checkpoint_params(tmp_path / "explicit", 6), checkpoint_params(uninterrupted / "out", 6))
    assert step_numbers(step_records(tmp_path / "report.json")) == [5, 6]
    # Without --last-step-of-checkpoint, --from-checkpoint names one checkpoint folder.
    single = pretraining_argv(tmp_path, *RESUMABLE[:-2], "--output-dir", str(tmp_path / "single"),
                              "--from-checkpoint", str(phase_folder / "4"))
    run_training(single)
    assert_bitwise_equal(checkpoint_params(tmp_path / "single", 6), checkpoint_params(uninterrupted / "out", 6))
    missing = pretraining_argv(tmp_path, "--from-checkpoint", str(phase_folder), "--last-step-of-checkpoint", "3")
    with pytest.raises(FileNotFoundError, match="no checkpoint folder for step 3"):
        train(missing)
    # Phase 2 must not continue phase 1's optimizer and finished schedule.
    with pytest.raises(ValueError, match="phase1/4: a phase-1 checkpoint cannot resume phase 2"):
        train(pretraining_argv(tmp_path, "--phase2", "--from-checkpoint", str(phase_folder / "4")))


def test_phase1_then_phase2_from_its_final_params_with_a_fresh_schedule(tmp_path, capsys):
    # Phase 1 on LDDL's own seq-128 shards of WikiText-2 (test split); phase 2 on seq-512 shards binned by 128
    # that the project's LDDL-format preprocessor makes from the same text (static masking, 80 predictions max).
    phase2_shards = tmp_path / "phase2-shards"
    with contextlib.redirect_stdout(io.StringIO()):
        lddl_preprocess.main([
            "--input", str(require_shared("data", "wikitext-2", "wiki.test.raw")), "--input-format", "wikitext",
            "--output-dir", str(phase2_shards), "--vocab-file", str(require_shared("vocab", "bert-uncased-vocab.txt")),
            "--max-seq-length", "512", "--duplicate-factor", "1", "--num-shards", "1", "--num-workers", "1",
            "--masking", "--bin-size", "128",
        ])
    phase1 = pretraining_argv(tmp_path, "--max-steps", "15", "--batch-size", "8", "--learning-rate", "5e-2",
                              "--warmup-proportion", "0.1", "--log-freq", "5", "--report-file",
                              str(tmp_path / "phase1.json"), positions=512)
    assert train(phase1) == 0
    losses = [r["data"]["loss"] for r in step_records(tmp_path / "phase1.json")]
    assert losses[-1] < losses[0] - 0.3, losses

    phase1_final = str(tmp_path / "out" / "custom" / "phase1" / "15")
    phase2 = pretraining_argv(tmp_path, "--phase2", "--from-phase1-final-params", phase1_final, "--max-steps", "4",
                              "--max-seq-length", "512", "--max-predictions-per-seq", "80", "--batch-size", "2",
                              "--learning-rate", "4e-3", "--warmup-proportion", "0.5", "--num-steps-per-checkpoint",
                              "2", "--last-step-of-checkpoint", "auto", "--report-file",
                              str(tmp_path / "phase2.json"), shards=phase2_shards, positions=512)
    assert train(phase2 + ["--steps-this-run", "2"]) == 0
    records = step_records(tmp_path / "phase2.json")
    # Phase 2's own schedule from its start: lr(1) = 4e-3 * 1/2 (warmup W = 2), not phase 1's final 0.
    assert records[0]["data"]["learning_rate"] == pytest.approx(2e-3, rel=1e-12)
    # It starts from phase 1's weights: its first loss is near phase 1's last, far below a fresh model's 11.
    assert records[0]["data"]["loss"] < losses[0] - 0.3
    # Rerunning the command resumes phase 2 from its own checkpoint; phase 1's params are not loaded again, so
    # the result is that of an uninterrupted phase 2.
    capsys.readouterr()
    assert train(phase2) == 0
    assert "Resuming from" in capsys.readouterr().out
    uninterrupted_phase2 = [*phase2, "--output-dir", str(tmp_path / "whole")]
    assert train(uninterrupted_phase2) == 0
    assert_bitwise_equal(checkpoint_params(tmp_path / "out", 4, phase=2),
                         checkpoint_params(tmp_path / "whole", 4, phase=2))
    assert all(r["type"] in ("LOG", "METADATA") for r in read_report(tmp_path / "phase2.json"))
