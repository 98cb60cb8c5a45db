"""run_pretraining.py --gradient-merge-ramp: the batch that ramps up (Cramming's growing batch, Geiping & Goldstein
2022), and the count of trained sequences that a ramped run's reports keep, across a resume too.

The expected micro-batches per step are worked by hand from gradient_merge.ramped_merge_steps's rule,
min(k, 1 + floor(k * p / ramp)) with p the fraction of the run trained before the step.
"""

from __future__ import annotations

import pytest

import run_pretraining
from messages import assert_one_line
from pretraining_runs import pretraining_argv, step_records, train
from training.gradient_merge import ramped_merge_steps


@pytest.mark.parametrize("merge_steps, ramp, progress, expected", [
    (4, 0.0, 0.0, 4),      # no ramp: the full batch from the first step
    (4, 0.5, 0.0, 1),      # the first eighth of the run: one micro-batch
    (4, 0.5, 0.124, 1),
    (4, 0.5, 0.125, 2),    # 4 * 0.125 / 0.5 = 1
    (4, 0.5, 0.3, 3),      # floor(2.4) = 2
    (4, 0.5, 0.375, 4),    # from 3/4 of the ramp on: all four
    (4, 0.5, 0.9, 4),
    (2, 1.0, 0.75, 2),
])
def test_the_ramp_gives_the_micro_batches_of_its_rule(merge_steps, ramp, progress, expected):
    assert ramped_merge_steps(merge_steps, ramp, progress) == expected


def test_a_ramped_run_takes_one_micro_batch_then_two_and_counts_its_sequences_across_a_resume(tmp_path):
    """4 steps of batch 4 with 2 micro-batches at most, ramped over the whole run: steps 1 and 2 start at
    p = 0 and 1/4, so 1 + floor(2p) = 1 micro-batch; steps 3 and 4 at p = 1/2 and 3/4 take 2. Their sequences:
    4, 4, 8, 8, in all 4, 8, 16, 24. The run stops after step 2 and resumes; the count goes on from its
    checkpoint. The first step, one micro-batch, is the unramped single-micro-batch run's first step."""
    ramped = ("--gradient-merge-steps", "2", "--gradient-merge-ramp", "1", "--num-steps-per-checkpoint", "2")
    assert train(pretraining_argv(tmp_path, *ramped, "--steps-this-run", "2", "--seed", "3")) == 0
    assert train(pretraining_argv(tmp_path, *ramped, "--last-step-of-checkpoint", "auto", "--seed", "3")) == 0
    records = step_records(tmp_path / "report.json")
    assert [(record["step"][1], record["data"]["step_samples"], record["data"]["trained_sequences"])
            for record in records] == [(1, 4, 4), (2, 4, 8), (3, 8, 16), (4, 8, 24)]
    single = tmp_path / "single"
    single.mkdir()
    assert train(pretraining_argv(single, "--max-steps", "1", "--seed", "3")) == 0
    assert step_records(single / "report.json")[0]["data"]["loss"] == records[0]["data"]["loss"]


def test_a_ramp_without_micro_batches_to_grow_is_refused_in_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        run_pretraining.parse_args(pretraining_argv(tmp_path, "--gradient-merge-ramp", "0.5"))
    assert stop.value.code == 2
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]  # argparse's usage first
    assert_one_line(line.split("error: ", 1)[1], "--gradient-merge-ramp", "--gradient-merge-steps 2 or more")
