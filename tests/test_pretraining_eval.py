"""Validation during pre-training (pretraining_eval.py, run_pretraining.py --eval-dir): the metrics against NumPy
from the logits, fixed evaluation batches, an evaluation that leaves the training untouched (a run with evaluations
resumes bitwise-equal to one without), when evaluations run, and the flags.

The held-out shards of these tests are the dynamically masked LDDL sample, so the fixed-seed masking is exercised.
"""

from __future__ import annotations

import argparse
from itertools import islice

import numpy as np
import paddle
import pytest

import run_pretraining
from checkpoints import checkpoint
from checkpoints.weights import load_state
from conftest import require_shared
from fine_tuning_runs import run_script
from modeling import BertForPretraining
from pretraining_runs import (
    DYNAMIC,
    checkpoint_params,
    pretraining_argv,
    step_folder,
    step_numbers,
    step_records,
    train,
)
from training import pretraining_eval
from training.amp import amp_policy
from utils.dllog import DLLogger

EVAL_KEYS = {"eval_mlm_loss", "eval_mlm_accuracy", "eval_masked_tokens", "eval_nsp_loss", "eval_nsp_accuracy",
             "eval_sequences"}
# A validation record also holds the elapsed training time of its step (time_budget.py).
RECORD_KEYS = EVAL_KEYS | {"elapsed_training_minutes"}


def eval_argv(tmp_path, *extra: str, dropout: float = 0.1) -> list[str]:
    return pretraining_argv(tmp_path, "--eval-dir", str(require_shared(*DYNAMIC)), *extra, dropout=dropout)


def evaluator_for(args, say=lambda *a, **k: None) -> pretraining_eval.PretrainingEvaluator:
    return pretraining_eval.build_evaluator(args, 0, 1, DLLogger(None, enabled=False, stdout=False), say)


def eval_records(report) -> list[dict]:
    return [r for r in step_records(report) if "eval_mlm_loss" in r["data"]]


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def test_losses_and_accuracies_of_a_batch_equal_numpy_from_the_logits(tmp_path):
    args = run_pretraining.parse_args(eval_argv(tmp_path, dropout=0.0))
    trainer = run_pretraining.Trainer(args, rank=0, world_size=1)
    model = trainer.model
    # A model that predicts some masked tokens right: the decoder bias favours the labels of half the positions.
    batch = next(iter(evaluator_for(args).loader))
    labels = batch["masked_lm_labels"].reshape(-1)
    masked = np.flatnonzero(labels != -1)
    bias = np.zeros(trainer.config.padded_vocab_size, np.float32)
    bias[labels[masked[::2]]] = 20.0
    model.cls.decoder_bias.set_value(paddle.to_tensor(bias))
    model.eval()
    with paddle.no_grad():
        # Scores of every token, [B*L, V], and NSP scores [B, 2], from the model without gathering.
        all_scores, nsp_scores = (t.numpy() for t in model(*(paddle.to_tensor(batch[name]) for name in (
            "input_ids", "token_type_ids", "attention_mask"))))
        sums = pretraining_eval.batch_sums(model, batch, trainer.policy)
    scores, targets = all_scores[masked].astype(np.float64), labels[masked]
    nsp_targets = batch["next_sentence_labels"]
    expected = {
        "mlm_loss": -log_softmax(scores)[np.arange(len(targets)), targets].sum(),
        "mlm_correct": (scores.argmax(axis=1) == targets).sum(),
        "masked_tokens": len(masked),
        "nsp_loss": -log_softmax(nsp_scores.astype(np.float64))[np.arange(len(nsp_targets)), nsp_targets].sum(),
        "nsp_correct": (nsp_scores.argmax(axis=1) == nsp_targets).sum(),
        "sequences": len(nsp_targets),
    }
    assert 0 < expected["mlm_correct"] < len(masked)
    assert sums == pytest.approx(expected, rel=1e-5)
    metrics = pretraining_eval.metrics_from_sums(sums, nsp=True)
    assert metrics["eval_mlm_accuracy"] == expected["mlm_correct"] / len(masked)
    assert metrics["eval_nsp_accuracy"] == expected["nsp_correct"] / len(nsp_targets)


def test_an_evaluation_changes_no_weight_random_stream_or_data_position(tmp_path):
    args = run_pretraining.parse_args(eval_argv(tmp_path, "--num-eval-batches", "3"))
    trainer = run_pretraining.Trainer(args, rank=0, world_size=1)
    loader = run_pretraining.build_loader(args, 0, 1)
    batches = iter(loader)
    trainer.step([next(batches)])
    evaluator = evaluator_for(args)
    before = (checkpoint.capture_rng_state(), loader.state_dict(),
              {name: value.numpy() for name, value in trainer.model.state_dict().items()})
    first, second = (evaluator.evaluate(trainer.model, trainer.policy) for _ in range(2))
    after = (checkpoint.capture_rng_state(), loader.state_dict(),
             {name: value.numpy() for name, value in trainer.model.state_dict().items()})
    assert before[:2] == after[:2]
    assert all(np.array_equal(before[2][name], after[2][name]) for name in before[2])
    assert trainer.model.training
    # The same batches and masks every time, so the same model gets the same numbers.
    assert first == second and set(first) == EVAL_KEYS


def test_the_evaluation_batches_do_not_depend_on_the_run_seed(tmp_path):
    first, second = (next(iter(evaluator_for(run_pretraining.parse_args(eval_argv(tmp_path, "--seed", seed))).loader))
                     for seed in ("1", "2"))
    for name in first:
        np.testing.assert_array_equal(first[name], second[name])


def test_num_eval_batches_sets_the_evaluated_sequences_up_to_one_pass(tmp_path, capsys):
    args = run_pretraining.parse_args(eval_argv(tmp_path, "--num-eval-batches", "3"))
    trainer = run_pretraining.Trainer(args, rank=0, world_size=1)
    assert evaluator_for(args).evaluate(trainer.model, trainer.policy)["eval_sequences"] == 3 * args.batch_size
    args = run_pretraining.parse_args(eval_argv(tmp_path, "--num-eval-batches", "100000"))
    evaluator = evaluator_for(args, say=print)
    assert "holds" in capsys.readouterr().out
    total = sum(len(batch["next_sentence_labels"]) for _, batch in zip(range(evaluator.loader.steps_per_epoch),
                                                                       evaluator.loader, strict=False))
    assert evaluator.evaluate(trainer.model, trainer.policy)["eval_sequences"] == total


def test_evaluations_run_every_eval_freq_steps_and_at_the_last_step(tmp_path, capsys):
    assert train(eval_argv(tmp_path, "--max-steps", "5", "--eval-freq", "2", "--num-eval-batches", "2")) == 0
    records = eval_records(tmp_path / "report.json")
    assert step_numbers(records) == [2, 4, 5]
    assert all(set(r["data"]) == RECORD_KEYS and r["data"]["eval_sequences"] == 8 for r in records)
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("eval at step ")]
    assert len(printed) == 3 and "mlm accuracy" in printed[0] and "nsp accuracy" in printed[0]


def test_under_no_nsp_the_evaluation_has_no_nsp_numbers(tmp_path):
    assert train(eval_argv(tmp_path, "--max-steps", "1", "--num-eval-batches", "1", "--no-nsp")) == 0
    [record] = eval_records(tmp_path / "report.json")
    assert set(record["data"]) == {"eval_mlm_loss", "eval_mlm_accuracy", "eval_masked_tokens",
                                   "elapsed_training_minutes"}


def test_a_run_with_evaluations_resumes_bitwise_equal_to_one_without(tmp_path):
    # Dropout on, two micro-batches per step: an evaluation that drew from a random stream, moved the training
    # data or touched a weight would change the final weights.
    resumable = ("--max-steps", "6", "--num-steps-per-checkpoint", "2", "--gradient-merge-steps", "2",
                 "--last-step-of-checkpoint", "auto")
    plain, evaluated = tmp_path / "plain", tmp_path / "evaluated"
    plain.mkdir(), evaluated.mkdir()
    assert train(pretraining_argv(plain, *resumable)) == 0
    with_eval = eval_argv(evaluated, *resumable, "--eval-freq", "1", "--num-eval-batches", "2")
    assert train([*with_eval, "--steps-this-run", "3"]) == 0
    assert train(with_eval) == 0
    expected, actual = checkpoint_params(plain / "out", 6), checkpoint_params(evaluated / "out", 6)
    assert actual.keys() == expected.keys()
    assert [name for name in expected if not np.array_equal(actual[name], expected[name])] == []
    losses = [(r["step"], r["data"]["loss"]) for r in step_records(evaluated / "report.json") if "loss" in r["data"]]
    assert losses == [(r["step"], r["data"]["loss"]) for r in step_records(plain / "report.json")]
    assert step_numbers(eval_records(evaluated / "report.json")) == [1, 2, 3, 4, 5, 6]


def parse_error(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        run_pretraining.parse_args(argv)
    assert exit_info.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize("extra, message", [
    (["--eval-freq", "5"], "--eval-freq needs --eval-dir"),
    (["--num-eval-batches", "5"], "--num-eval-batches needs --eval-dir"),
    (["--eval-batch-size", "5"], "--eval-batch-size needs --eval-dir"),
    (["--eval-dir", "DYNAMIC", "--eval-batch-size", "0"], "--eval-batch-size must be at least 1, got 0"),
    (["--eval-dir", "/nonexistent/holdout"], "--eval-dir /nonexistent/holdout: no such folder"),
    (["--eval-dir", "DYNAMIC", "--eval-freq", "0"], "--eval-freq must be at least 1, got 0"),
    (["--eval-dir", "DYNAMIC", "--num-eval-batches", "0"], "--num-eval-batches must be at least 1, got 0"),
    (["--eval-dir", "DYNAMIC", "--benchmark", "--benchmark-steps", "1", "--benchmark-warmup-steps", "1"],
     "--eval-dir cannot be used with --benchmark"),
])
def test_invalid_validation_options_exit_with_one_line_naming_the_flag(tmp_path, capsys, extra, message):
    extra = [str(require_shared(*DYNAMIC)) if value == "DYNAMIC" else value for value in extra]
    assert message in parse_error(pretraining_argv(tmp_path, *extra), capsys)


def test_a_phase_at_another_batch_size_and_length_validates_on_the_same_batches_with_eval_batch_size(tmp_path):
    """run_pretraining.sh's phase 2 inside a time budget trains batches of another size at length 512 and validates
    on phase 1's held-out shards with --eval-batch-size of phase 1's batch: the same sequences and masks, so the
    same model scores the same. Without the flag its own batch size regroups them, and the masks (drawn per batch)
    differ."""
    phase1 = run_pretraining.parse_args(eval_argv(tmp_path, "--num-eval-batches", "2"))
    phase2_shape = ("--phase2", "--max-seq-length", "512", "--max-predictions-per-seq", "80", "--batch-size", "2",
                    "--num-eval-batches", "4")
    phase2 = run_pretraining.parse_args(eval_argv(tmp_path, *phase2_shape, "--eval-batch-size",
                                                  str(phase1.batch_size), "--num-eval-batches", "2"))
    own_batches = run_pretraining.parse_args(eval_argv(tmp_path, *phase2_shape))
    assert (phase1.batch_size, phase2.eval_batch_size, own_batches.eval_batch_size) == (4, 4, 2)
    trainer = run_pretraining.Trainer(phase1, rank=0, world_size=1)
    scores = [evaluator_for(args).evaluate(trainer.model, trainer.policy) for args in (phase1, phase2, own_batches)]
    assert scores[0]["eval_sequences"] == 8 and scores[1] == scores[0]
    assert scores[2]["eval_sequences"] == 8 and scores[2] != scores[0]


def test_validation_masks_as_bert_does_whatever_the_training_masks(tmp_path):
    """A run that trains with 30% of whole words masked validates on the batches of one that trains with BERT's 15%
    of single pieces: the same masks, so their validation numbers compare."""
    args = run_pretraining.parse_args(eval_argv(tmp_path))
    plain = evaluator_for(args)
    # (The training shards of eval_argv are masked statically, which refuses the two flags: set them as parsed.)
    other = evaluator_for(argparse.Namespace(**{**vars(args), "masked_lm_ratio": 0.3, "whole_word_masking": True,
                                                "max_predictions_per_seq": 154}))
    batches = [next(iter(evaluator.loader)) for evaluator in (plain, other)]
    assert batches[0].keys() == batches[1].keys()
    for name in batches[0]:
        np.testing.assert_array_equal(batches[0][name], batches[1][name], err_msg=name)
    lengths = batches[0]["attention_mask"].sum(1)
    masked = (batches[0]["masked_lm_labels"] != -1).sum(1)
    np.testing.assert_array_equal(masked, np.maximum(1, np.rint(lengths * 0.15)))


def test_two_ranks_evaluate_their_slices_and_report_the_sums_of_both(tmp_path):
    # Each rank evaluates its own slice of --eval-dir; the report's numbers are those of both slices together,
    # recomputed here from the final checkpoint (the evaluation at the last step sees the final weights).
    argv = eval_argv(tmp_path, "--max-steps", "2", "--num-eval-batches", "2", "--eval-freq", "2")
    completed = run_script("run_pretraining.py", argv, timeout=300, launch_ranks=2, log_dir=tmp_path / "log")
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    [record] = eval_records(tmp_path / "report.json")
    args = run_pretraining.parse_args(argv)
    model = BertForPretraining(checkpoint.read_config(step_folder(tmp_path / "out", 2)))
    load_state(model, checkpoint_params(tmp_path / "out", 2), "final checkpoint")
    model.eval()
    totals: dict[str, float] = {}
    with paddle.no_grad():
        for rank in range(2):
            evaluator = pretraining_eval.PretrainingEvaluator(args, rank, 2, DLLogger(None, enabled=False),
                                                              lambda *a, **k: None)
            for batch in islice(evaluator.loader, 2):
                for name, value in pretraining_eval.batch_sums(model, batch, amp_policy(args)).items():
                    totals[name] = totals.get(name, 0.0) + value
    expected = pretraining_eval.metrics_from_sums(totals, nsp=True)
    assert record["data"]["eval_sequences"] == expected["eval_sequences"] == 2 * 2 * args.batch_size
    minutes = record["data"].pop("elapsed_training_minutes")
    assert record["data"] == pytest.approx(expected, rel=1e-5) and minutes > 0
