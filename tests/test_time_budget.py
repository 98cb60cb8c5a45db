"""Pretraining to a training-time budget (run_pretraining.py --time-budget, --eval-interval-minutes; time_budget.py).

Every run here reads a fake clock (time_budget.clock replaced): a training step takes a fixed number of seconds,
and validation, checkpoint writing and process start-up each take 1000 s, which must not count. The runs are the
1-layer, hidden-32 BERT of tests/pretraining_runs.py, in this process (the last test launches two ranks).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import run_pretraining
from checkpoints import checkpoint
from conftest import require_shared
from fine_tuning_runs import run_script
from messages import assert_one_line
from pretraining_runs import (
    DYNAMIC,
    checkpoint_params,
    pretraining_argv,
    step_folder,
    step_folders,
    step_numbers,
    step_records,
    train,
)
from training import pretraining_eval
from utils import cli, time_budget

PEAK = 5e-3  # pretraining_argv's --learning-rate; its --warmup-proportion is 0.25
# Not training time: what each of these takes on the fake clock must leave the elapsed training time unchanged.
UNTIMED_SECONDS = 1000.0


class FakeClock:
    """time_budget.clock's stand-in: the time moves only when a step, a validation, a save or the start-up does."""

    def __init__(self, now: float = 7.0):
        self.now = now
        self.step_seconds = 60.0

    def __call__(self) -> float:
        return self.now

    def taking(self, seconds: Callable[[], float], function: Callable) -> Callable:
        """`function`, taking seconds() on this clock before it runs."""
        def timed(*args, **kwargs):
            self.now += seconds()
            return function(*args, **kwargs)
        return timed


def install_fake_time(set_attribute: Callable[[object, str, object], None], clock: FakeClock) -> None:
    """Make the training read `clock`: each Trainer.step takes clock.step_seconds; a validation, a checkpoint save
    and building the training loader (start-up) UNTIMED_SECONDS each."""
    set_attribute(time_budget, "clock", clock)
    step = run_pretraining.Trainer.step
    set_attribute(run_pretraining.Trainer, "step", clock.taking(lambda: clock.step_seconds, step))
    for owner, name in ((run_pretraining.RunCheckpoints, "save"), (pretraining_eval.PretrainingEvaluator, "run"),
                        (run_pretraining, "build_loader")):
        set_attribute(owner, name, clock.taking(lambda: UNTIMED_SECONDS, getattr(owner, name)))


@pytest.fixture
def fake_time(monkeypatch) -> FakeClock:
    clock = FakeClock()
    install_fake_time(monkeypatch.setattr, clock)
    return clock


def budget_argv(folder: Path, *extra: str) -> list[str]:
    """pretraining_argv without its --max-steps, then `extra`."""
    argv = pretraining_argv(folder, *extra)
    index = argv.index("--max-steps")
    return argv[:index] + argv[index + 2:]


def interval_records(report: Path) -> list[dict]:
    return [r for r in step_records(report) if "learning_rate" in r["data"]]


def eval_records(report: Path) -> list[dict]:
    return [r for r in step_records(report) if "eval_mlm_accuracy" in r["data"]]


def column(records: list[dict], key: str) -> list:
    return [r["data"][key] for r in records]


def decay(fraction: float) -> float:
    """The learning rate at `fraction` of the budget after pretraining_argv's 25% warmup: linear to 0 at 1."""
    return PEAK * (1 - (fraction - 0.25) / 0.75)


# ---------------------------------------------------------------------------------------------------------------
# The stopwatch
# ---------------------------------------------------------------------------------------------------------------


def test_the_stopwatch_adds_its_running_time_to_the_resumed_time_and_leaves_out_pauses(monkeypatch):
    clock = FakeClock(now=100.0)
    monkeypatch.setattr(time_budget, "clock", clock)
    stopwatch = time_budget.TrainingStopwatch(elapsed=30.0)  # 30 s from the checkpoint
    clock.now = 500.0  # start-up: not counted
    assert stopwatch.elapsed() == 30.0
    stopwatch.start()
    clock.now = 510.0
    assert stopwatch.elapsed() == 40.0
    with stopwatch.paused():
        clock.now = 900.0
        assert stopwatch.elapsed() == 40.0
    clock.now = 905.0
    assert stopwatch.elapsed() == 45.0


@pytest.mark.parametrize("before, after, crossed", [
    (0.0, 59.0, False), (59.0, 60.0, True), (60.0, 61.0, False), (50.0, 190.0, True), (125.0, 170.0, False),
])
def test_crossed_multiple(before, after, crossed):
    assert time_budget.crossed_multiple(before, after, 60.0) is crossed


# ---------------------------------------------------------------------------------------------------------------
# The schedule and the end of the run
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("step_seconds, minutes, rates, etas", [
    # 60-second steps: update k runs at p = (k - 1) / 5 of the 5-minute budget; step 5 reaches it.
    (60.0, [1.0, 2.0, 3.0, 4.0, 5.0], [0.0, PEAK * 0.2 / 0.25, decay(0.4), decay(0.6), decay(0.8)],
     ["0:04:00", "0:03:00", "0:02:00", "0:01:00", "0:00:00"]),
    # 90-second steps: step 3 ends at 4.5 minutes, step 4 at 6, the first boundary past the budget.
    (90.0, [1.5, 3.0, 4.5, 6.0], [0.0, decay(0.3), decay(0.6), decay(0.9)],
     ["0:03:30", "0:02:00", "0:00:30", "0:00:00"]),
])
def test_the_learning_rate_follows_the_budget_and_the_run_stops_at_the_first_step_past_it(
        tmp_path, fake_time, capsys, step_seconds, minutes, rates, etas):
    fake_time.step_seconds = step_seconds
    assert train(budget_argv(tmp_path, "--time-budget", "5", "--num-steps-per-checkpoint", "2")) == 0
    records = interval_records(tmp_path / "report.json")
    last = len(minutes)
    assert step_numbers(records) == list(range(1, last + 1))
    assert column(records, "elapsed_training_minutes") == pytest.approx(minutes, rel=1e-12)
    assert column(records, "learning_rate") == pytest.approx(rates, rel=1e-9, abs=1e-15)
    # The last checkpoint is the step that spent the budget, with the elapsed time in its progress record.
    assert step_folders(tmp_path / "out")[-1] == last
    progress = checkpoint.read_progress(step_folder(tmp_path / "out", last))
    assert (progress["global_step"], progress["time_budget_minutes"]) == (last, 5.0)
    assert progress["elapsed_training_seconds"] == pytest.approx(60 * minutes[-1], rel=1e-12)
    output = capsys.readouterr().out
    assert f"after step {last} (final checkpoint in {step_folder(tmp_path / 'out', last)})" in output
    # The progress lines count the budget's minutes, and their ETA is the training time left.
    progress = [line.split("  ") for line in output.splitlines() if line.startswith("step ")]
    assert [(parts[1], parts[-1]) for parts in progress] == [
        (f"{used:.2f}/5 min ({used * 20:.1f}%)", f"ETA {eta}") for used, eta in zip(minutes, etas, strict=True)]


def test_max_steps_caps_a_budgeted_run_whose_schedule_still_follows_time(tmp_path, fake_time):
    assert train(budget_argv(tmp_path, "--time-budget", "5", "--max-steps", "3")) == 0
    records = interval_records(tmp_path / "report.json")
    assert step_numbers(records) == [1, 2, 3] and step_folders(tmp_path / "out") == [3]
    # Step 3 at p = 0.4 of the budget; a 3-step schedule would have put it at 1/4 of its warmup-less decay.
    assert records[-1]["data"]["learning_rate"] == pytest.approx(decay(0.4), rel=1e-9)
    assert checkpoint.read_progress(step_folder(tmp_path / "out", 3))["elapsed_training_seconds"] == 180.0


def test_without_a_budget_the_clock_changes_nothing_but_the_reported_minutes(tmp_path, fake_time):
    """A step-count run (NVIDIA's recipe) trains the same weights however long its steps take."""
    weights, minutes = [], []
    for step_seconds in (60.0, 7.0):
        fake_time.step_seconds = step_seconds
        folder = tmp_path / str(step_seconds)
        folder.mkdir()
        assert train(pretraining_argv(folder, "--max-steps", "3")) == 0
        records = interval_records(folder / "report.json")
        # The step schedule: 3 steps, no whole warmup step (floor(0.25 * 3) = 0), linear decay to 0 at step 4.
        assert column(records, "learning_rate") == pytest.approx([PEAK * 3 / 4, PEAK * 2 / 4, PEAK / 4], rel=1e-9)
        weights.append(checkpoint_params(folder / "out", 3))
        minutes.append(column(records, "elapsed_training_minutes"))
    assert [name for name in weights[0] if not np.array_equal(weights[0][name], weights[1][name])] == []
    assert minutes == [pytest.approx([1.0, 2.0, 3.0]), pytest.approx([7 / 60, 14 / 60, 21 / 60])]


# ---------------------------------------------------------------------------------------------------------------
# Validation by elapsed time
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("step_seconds, schedule, interval, evaluated", [
    # Budget of 5 minutes, 90-second steps: 3.0 crosses 2, 4.5 crosses 4, and step 4 (6.0) ends the run.
    (90.0, ("--time-budget", "5"), "2", [(2, 3.0), (3, 4.5), (4, 6.0)]),
    # Four steps without a budget, 60 seconds each: 2.0 crosses 1.5, 3.0 crosses 3.0, and the last step.
    (60.0, ("--max-steps", "4"), "1.5", [(2, 2.0), (3, 3.0), (4, 4.0)]),
])
def test_validation_at_each_crossing_of_the_interval_and_at_the_end(tmp_path, fake_time, step_seconds, schedule,
                                                                    interval, evaluated):
    fake_time.step_seconds = step_seconds
    argv = budget_argv(tmp_path, *schedule, "--eval-dir", str(require_shared(*DYNAMIC)), "--eval-interval-minutes",
                       interval, "--num-eval-batches", "1")
    assert train(argv) == 0
    records = eval_records(tmp_path / "report.json")
    assert list(zip(step_numbers(records), column(records, "elapsed_training_minutes"), strict=True)) == [
        (step, pytest.approx(minutes, rel=1e-12)) for step, minutes in evaluated]
    assert all(0.0 <= accuracy <= 1.0 for accuracy in column(records, "eval_mlm_accuracy"))


# ---------------------------------------------------------------------------------------------------------------
# Resume
# ---------------------------------------------------------------------------------------------------------------


def test_a_resumed_run_continues_the_elapsed_time_the_schedule_and_the_budget(tmp_path, fake_time, capsys):
    common = ("--time-budget", "5", "--last-step-of-checkpoint", "auto", "--eval-dir", str(require_shared(*DYNAMIC)),
              "--eval-interval-minutes", "2", "--num-eval-batches", "1")
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    whole.mkdir(), parts.mkdir()
    assert train(budget_argv(whole, *common)) == 0
    assert train(budget_argv(parts, *common, "--steps-this-run", "2")) == 0
    assert checkpoint.read_progress(step_folder(parts / "out", 2))["elapsed_training_seconds"] == 120.0
    fake_time.now = 5e6  # another process: its clock has another origin
    assert train(budget_argv(parts, *common)) == 0
    # Five minutes of training in all, the same learning rates, evaluations and final weights.
    for key in ("learning_rate", "elapsed_training_minutes"):
        assert column(interval_records(parts / "report.json"), key) == column(interval_records(whole / "report.json"),
                                                                              key)
    assert column(interval_records(parts / "report.json"), "elapsed_training_minutes")[-1] == 5.0
    assert step_numbers(eval_records(parts / "report.json")) == step_numbers(eval_records(whole / "report.json")) == [
        2, 4, 5]
    expected, resumed = checkpoint_params(whole / "out", 5), checkpoint_params(parts / "out", 5)
    assert [name for name in expected if not np.array_equal(expected[name], resumed[name])] == []
    # The same command once more: the budget is spent, nothing to train.
    capsys.readouterr()
    assert train(budget_argv(parts, *common)) == 0
    assert (f"Phase 1 is complete: {step_folder(parts / 'out', 5)} is step 5, after 5.00 minutes of training of "
            "--time-budget 5; nothing to train") in capsys.readouterr().out


def run_error(argv: list[str], capsys) -> str:
    """The one line a run that fails prints, as `python run_pretraining.py argv` prints it."""
    capsys.readouterr()
    assert cli.run_main(lambda: run_pretraining.main(argv), "run_pretraining.py") == 1
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    return captured.err


@pytest.mark.parametrize("other, saved, now", [
    (("--time-budget", "6"), "--time-budget 5", "--time-budget 6"),
    (("--max-steps", "5"), "--time-budget 5", "no --time-budget"),
])
def test_a_resume_needs_the_same_budget(tmp_path, fake_time, capsys, other, saved, now):
    resume = ("--last-step-of-checkpoint", "auto")
    assert train(budget_argv(tmp_path, "--time-budget", "5", "--steps-this-run", "1", *resume)) == 0
    error = run_error(budget_argv(tmp_path, *other, *resume), capsys)
    assert_one_line(error, "run_pretraining.py: ", str(step_folder(tmp_path / "out", 1)),
                    f"saved by a run with {saved}", f"this one has {now}", f"resume with {saved}",
                    "--from-pretrained-params")


def test_a_step_count_checkpoint_does_not_resume_under_a_budget(tmp_path, fake_time, capsys):
    resume = ("--last-step-of-checkpoint", "auto")
    assert train(pretraining_argv(tmp_path, "--steps-this-run", "1", *resume)) == 0
    error = run_error(budget_argv(tmp_path, "--time-budget", "5", *resume), capsys)
    assert_one_line(error, "run_pretraining.py: ", "saved by a run with no --time-budget",
                    "this one has --time-budget 5")


# ---------------------------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("extra, named", [
    (("--time-budget", "0"), "argument --time-budget: expected a positive number, got '0'"),
    (("--time-budget", "-5"), "argument --time-budget: expected a positive number, got '-5'"),
    (("--time-budget", "nan"), "argument --time-budget: expected a finite number, got 'nan'"),
    (("--time-budget", "inf"), "argument --time-budget: expected a finite number, got 'inf'"),
    (("--time-budget", "an hour"), "argument --time-budget: expected a number, got 'an hour'"),
    ((), "--max-steps is required (or --time-budget"),
    (("--time-budget", "5", "--benchmark"), "--time-budget cannot be used with --benchmark"),
    (("--time-budget", "5", "--eval-interval-minutes", "2"), "--eval-interval-minutes needs --eval-dir"),
    (("--time-budget", "5", "--eval-dir", "DYNAMIC", "--eval-interval-minutes", "0"),
     "argument --eval-interval-minutes: expected a positive number, got '0'"),
    (("--time-budget", "5", "--eval-dir", "DYNAMIC", "--eval-interval-minutes", "nan"),
     "argument --eval-interval-minutes: expected a finite number, got 'nan'"),
    (("--time-budget", "5", "--eval-dir", "DYNAMIC", "--eval-interval-minutes", "2", "--eval-freq", "3"),
     "--eval-freq and --eval-interval-minutes cannot both be set"),
])
def test_bad_values_exit_with_one_line_naming_the_flag(tmp_path, capsys, extra, named):
    extra = [str(require_shared(*DYNAMIC)) if part == "DYNAMIC" else part for part in extra]
    with pytest.raises(SystemExit) as exit_info:
        run_pretraining.parse_args(budget_argv(tmp_path, *extra))
    assert exit_info.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(errors) == 1 and named in errors[0], errors


# ---------------------------------------------------------------------------------------------------------------
# Several ranks
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_ranks_whose_clocks_differ_agree_on_the_schedule_and_the_last_step(tmp_path):
    """Rank 0's steps take 60 s, rank 1's 90 s: both use the larger, so they stop together at the step that
    reaches 6 minutes (rank 0 alone would go on to step 5 and wait for rank 1 forever)."""
    argv = budget_argv(tmp_path, "--time-budget", "5", "--num-steps-per-checkpoint", "10")
    completed = run_script("tests/test_time_budget.py", argv, timeout=300, launch_ranks=2, log_dir=tmp_path / "log")
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    records = interval_records(tmp_path / "report.json")
    assert column(records, "elapsed_training_minutes") == [1.5, 3.0, 4.5, 6.0]
    assert column(records, "learning_rate") == pytest.approx([0.0, decay(0.3), decay(0.6), decay(0.9)], rel=1e-9)
    assert step_folders(tmp_path / "out") == [4]


if __name__ == "__main__":
    # One rank of the test above: its steps take 60 s on rank 0 and 90 s on rank 1.
    rank_clock = FakeClock()
    rank_clock.step_seconds = 60.0 * (1 + int(os.environ["PADDLE_TRAINER_ID"]) / 2)
    install_fake_time(setattr, rank_clock)
    sys.exit(run_pretraining.main(sys.argv[1:]))
