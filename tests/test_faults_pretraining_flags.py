"""Fault cases of run_pretraining.py's flags that used to be accepted without a word (issue 66, item 4), in the fault
suite's style (tests/test_faults.py): phase 2 started from a phase 1 that stopped before its --max-steps, a resume
that changes a training-only option, and a --masked-lm-ratio that --max-predictions-per-seq cannot honour. Each
refusal is checked for its exit status, its one line naming the flag or folder, and the files written before kept
byte for byte."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import run_pretraining
from checkpoints import checkpoint
from pretraining_runs import DYNAMIC, pretraining_argv, step_folder, step_folders, train
from test_faults import assert_kept, phase1, run_entry, snapshot

pytestmark = pytest.mark.slow  # training runs

# A phase 1 of 4 steps that stops after 2 (--steps-this-run, as a cluster time limit would), checkpointing there.
STOPPED_PHASE1 = ("--max-steps", "4", "--steps-this-run", "2", "--last-step-of-checkpoint", "auto")
CHANGED = "changed: "  # the mark of a notice line for an option a resume changed


@pytest.fixture(scope="module")
def stopped(tmp_path_factory) -> Path:
    """tmp/out holding phase 1's checkpoint of step 2 of --max-steps 4, and nothing later."""
    folder = tmp_path_factory.mktemp("stopped")
    assert train(pretraining_argv(folder, *STOPPED_PHASE1)) == 0
    assert step_folders(folder / "out") == [2]
    return folder


@pytest.fixture
def job(stopped, tmp_path) -> Path:
    """A copy of the stopped job's output folder in tmp_path/out."""
    shutil.copytree(stopped / "out", tmp_path / "out")
    return tmp_path


def parser_error(output: str, *names: str) -> str:
    """The one argparse error line of output ("<prog>: error: ..."), naming each of names; no traceback."""
    assert "Traceback" not in output, output[-3000:]
    (line,) = [line for line in output.splitlines() if ": error: " in line]
    for name in names:
        assert name in line, line
    return line


def phase2_argv(folder: Path, *extra: str) -> list[str]:
    return pretraining_argv(folder, "--phase2", "--max-steps", "1", "--last-step-of-checkpoint", "auto", *extra)


# ---------------------------------------------------------------------------------------------------------------
# Phase 2 from a phase 1 that did not finish


def test_phase2_refuses_a_step_based_phase1_that_stopped_before_its_max_steps(job, capsys):
    final = step_folder(job / "out", 2)
    before = snapshot(phase1(job))
    status, output = run_entry(phase2_argv(job, "--from-phase1-final-params", str(final)), capsys)
    assert status == 2
    parser_error(output, f"--from-phase1-final-params {final}", "step 2", "--max-steps 4", "--from-pretrained-params")
    assert_kept(before)
    assert not (job / "out" / "custom" / "phase2").exists()


def test_phase2_starts_from_a_phase1_that_reached_its_max_steps(job, capsys):
    status, output = run_entry(pretraining_argv(job, *STOPPED_PHASE1), capsys)  # steps 3 and 4: phase 1 ends
    assert status == 0, output[-3000:]
    final = step_folder(job / "out", 4)
    status, output = run_entry(phase2_argv(job, "--from-phase1-final-params", str(final)), capsys)
    assert status == 0, output[-3000:]
    assert f"--from-phase1-final-params {final / 'bert_paddle.pdparams'}: loaded embeddings, encoder" in output
    assert step_folders(job / "out", phase=2) == [1]


def test_the_unfinished_phase1_weights_start_phase2_when_asked_for_by_from_pretrained_params(job, capsys):
    """The refusal's way out: --from-pretrained-params takes the weights as they are, in so many words."""
    status, output = run_entry(phase2_argv(job, "--from-pretrained-params", str(step_folder(job / "out", 2))),
                               capsys)
    assert status == 0, output[-3000:]
    assert step_folders(job / "out", phase=2) == [1]


def _progress_folder(folder: Path, **progress) -> str:
    folder.mkdir(parents=True)
    (folder / f"{checkpoint.DEFAULT_PREFIX}{checkpoint.PROGRESS_SUFFIX}").write_text(json.dumps(progress))
    return str(folder)


def test_phase1_is_finished_at_its_max_steps_or_its_spent_budget(tmp_path):
    """A budgeted phase 1 that --max-steps capped before the budget was spent ended there (phase_done says so on a
    rerun); a checkpoint from before max_steps was recorded is taken as it is."""
    capped = _progress_folder(tmp_path / "capped" / "10", global_step=10, max_steps=10, time_budget_minutes=18.0,
                              elapsed_training_seconds=60.0)
    unrecorded = _progress_folder(tmp_path / "old" / "5", global_step=5)
    for folder in (capped, unrecorded):
        run_pretraining.check_phase1_finished(folder, checkpoint.DEFAULT_PREFIX)
    short = _progress_folder(tmp_path / "short" / "9", global_step=9, max_steps=10, time_budget_minutes=None)
    with pytest.raises(ValueError, match=r"short/9: phase 1 stopped at step 9 of its --max-steps 10"):
        run_pretraining.check_phase1_finished(short, checkpoint.DEFAULT_PREFIX)


# ---------------------------------------------------------------------------------------------------------------
# Resuming with a changed training-only option


def notices(output: str) -> list[str]:
    return [line for line in output.splitlines() if CHANGED in line]


def test_a_resume_that_changes_training_only_options_says_so_once_each(job, capsys):
    """(The schedule's options are no such option: lr_scheduler refuses to resume another schedule.)"""
    status, output = run_entry(pretraining_argv(job, *STOPPED_PHASE1, "--no-dropout", "--weight-decay", "0.02"),
                               capsys)
    assert status == 0, output[-3000:]
    assert sorted(notices(output)) == ["Resuming with --no-dropout changed: False -> True",
                                       "Resuming with --weight-decay changed: 0.01 -> 0.02"]
    assert step_folders(job / "out") == [2, 4]


def test_a_resume_with_the_same_options_has_no_notice(job, capsys):
    status, output = run_entry(pretraining_argv(job, *STOPPED_PHASE1), capsys)
    assert status == 0, output[-3000:]
    assert f"Resuming from {step_folder(job / 'out', 2)} at step 2" in output
    assert notices(output) == []


def test_a_checkpoint_without_the_record_of_its_options_resumes_silently(job, capsys):
    """Checkpoints written before the options were recorded resume as they always did."""
    progress_file = step_folder(job / "out", 2) / f"{checkpoint.DEFAULT_PREFIX}{checkpoint.PROGRESS_SUFFIX}"
    progress = json.loads(progress_file.read_text())
    assert progress.pop("training_options")["no_dropout"] is False
    progress_file.write_text(json.dumps(progress))
    status, output = run_entry(pretraining_argv(job, *STOPPED_PHASE1, "--no-dropout"), capsys)
    assert status == 0, output[-3000:]
    assert notices(output) == []
    assert step_folders(job / "out") == [2, 4]


# ---------------------------------------------------------------------------------------------------------------
# A masked-LM ratio the cap cannot honour


@pytest.mark.parametrize("ratio, wanted", [("0.5", 64), ("0.99", 127), ("0.1640625", 21)])
def test_a_masked_lm_ratio_beyond_the_cap_is_refused_naming_both_flags(tmp_path, capsys, ratio, wanted):
    """round(0.99 x 128) = 127 and 0.1640625 x 128 = 21 exactly: more than the 20 of --max-predictions-per-seq."""
    status, output = run_entry(pretraining_argv(tmp_path, "--masked-lm-ratio", ratio, shards=DYNAMIC), capsys)
    assert status == 2
    parser_error(output, f"--masked-lm-ratio {ratio}", f"{wanted} of the 128", "--max-seq-length",
                 "--max-predictions-per-seq 20")
    assert not (tmp_path / "out").exists()


def test_a_masked_lm_ratio_the_cap_honours_after_rounding_is_taken(tmp_path):
    """20.5 tokens round half to even to 20, as masking.num_to_predict rounds: 0.16015625 x 128 fits a cap of 20."""
    args = run_pretraining.parse_args(pretraining_argv(tmp_path, "--masked-lm-ratio", "0.16015625", shards=DYNAMIC))
    assert (args.masked_lm_ratio, args.max_predictions_per_seq) == (0.16015625, 20)


def test_a_masked_lm_ratio_on_statically_masked_shards_says_the_shards_carry_their_masks(tmp_path, capsys):
    """The shards' own masks were capped when they were made; what stops the ratio there is that it cannot take
    effect at all, whatever the cap."""
    status, output = run_entry(pretraining_argv(tmp_path, "--masked-lm-ratio", "0.5"), capsys)
    assert status == 2
    line = parser_error(output, "--masked-lm-ratio 0.5: the shards of --input-dir", "masked statically")
    assert "--max-predictions-per-seq" not in line
