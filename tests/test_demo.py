"""The README's demo (the cpu_demo preset of scripts/configs/pretrain_config.sh) learns: a shortened run of its
recipe lowers the held-out masked-LM loss by more than MARGIN, and the same run with a broken optimizer does not.

The shortened run keeps the preset's model (bert_configs/bert-tiny-4k-vocab.json), learning rate, warmup
proportion, held-out fraction and corpus (the offline sample corpus, data/make_sample_corpus.py), and takes
SHORT_STEPS steps of SHORT_BATCH sequences, evaluating every SHORT_STEPS // 4 steps on every held-out sequence.

MARGIN, from measurements of this run (seed 42, twice): the recipe's validation MLM loss fell from 7.378 at the
first evaluation (step 10) to 5.999 at step 40, by 1.38; with an optimizer step that does nothing, or a
learning rate of 0, it stayed at 8.3575 at every evaluation (a fall of 0.000). A fall of at least 0.7 is half
the recipe's, and no run whose weights do not move can reach it.

Not caught at this length: a model that sees no context (each token attending to itself alone) learns the
corpus's token frequencies as fast as the real one; in an 80-step run of the full recipe both reached 5.73, so
only a longer run tells them apart.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

import run_pretraining
from conftest import ROOT
from recipe_fakes import preset
from utils.dllog import read_report, training_step

SHORT_STEPS = 40
SHORT_BATCH = 16
MARGIN = 0.7
# cpu_demo's positional arguments (scripts/run_pretraining.sh numbers them from 1).
LEARNING_RATE, WARMUP, BERT_CONFIG, HOLDOUT_FRACTION = 1, 4, 27, 35


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> dict:
    """The preset's arguments and its data: the sample corpus, a vocab trained on it, shards and held-out shards."""
    tmp = tmp_path_factory.mktemp("demo")
    args = preset("pretrain_config.sh", "cpu_demo", {"PATH": "/usr/bin:/bin", "BERT_PREP_WORKING_DIR": str(tmp)})
    source, vocab, shards = tmp / "source", tmp / "vocab.txt", tmp / "shards"
    for command in (
        [str(ROOT / "data" / "make_sample_corpus.py"), "--output-dir", str(source)],
        # The vocab size run_pretraining.sh trains for the "sample" corpus.
        [str(ROOT / "tokenizer.py"), "train-vocab", "--input", str(source / "en" / "pydoc_topics.txt"),
         "--vocab-size", "4096", "--output", str(vocab)],
        [str(ROOT / "lddl_preprocess.py"), "--input", str(source), "--vocab-file", str(vocab), "--output-dir",
         str(shards), "--max-seq-length", "128", "--num-shards", "1", "--num-workers", "1", "--seed", "42",
         "--masking", "--holdout-fraction", args[HOLDOUT_FRACTION], "--holdout-dir", str(tmp / "holdout")],
    ):
        subprocess.run([sys.executable, *command], check=True, capture_output=True, timeout=300)
    return {"tmp": tmp, "args": args, "vocab": vocab, "shards": shards, "holdout": tmp / "holdout"}


def validation_losses(demo: dict, name: str) -> list[float]:
    """Run the shortened demo in this process; its eval_mlm_loss at each evaluation, in step order."""
    args, report = demo["args"], demo["tmp"] / f"{name}.json"
    run_pretraining.main([
        "--input-dir", str(demo["shards"]), "--vocab-file", str(demo["vocab"]),
        "--output-dir", str(demo["tmp"] / name), "--bert-model", "custom", "--config-file", args[BERT_CONFIG],
        "--phase1", "--batch-size", str(SHORT_BATCH), "--max-seq-length", "128", "--max-predictions-per-seq", "20",
        "--max-steps", str(SHORT_STEPS), "--learning-rate", args[LEARNING_RATE], "--warmup-proportion", args[WARMUP],
        "--eval-dir", str(demo["holdout"]), "--eval-freq", str(SHORT_STEPS // 4), "--num-eval-batches", "1000",
        "--num-workers", "0", "--num-steps-per-checkpoint", str(SHORT_STEPS), "--report-file", str(report),
        "--log-freq", str(SHORT_STEPS), "--seed", "42", "--show-config", "false",
    ])
    evaluations = [(training_step(record["step"]), record["data"]["eval_mlm_loss"]) for record in read_report(report)
                   if "eval_mlm_loss" in record.get("data", {})]
    assert [step for step, _ in evaluations] == [10, 20, 30, 40]
    return [loss for _, loss in evaluations]


def learns(losses: list[float]) -> bool:
    return losses[-1] < losses[0] - MARGIN


def test_the_demo_recipe_lowers_the_validation_loss_by_the_margin(demo):
    losses = validation_losses(demo, "recipe")
    assert learns(losses), losses
    assert losses == sorted(losses, reverse=True)  # and it falls at every evaluation


def _optimizer_without_steps(*args, **kwargs):
    optimizer = _create_optimizer(*args, **kwargs)
    optimizer.step = lambda: None
    return optimizer


def _schedule_at_zero(kind, learning_rate, *args, **kwargs):
    return _create_lr_scheduler(kind, 0.0, *args, **kwargs)


_create_optimizer = run_pretraining.create_optimizer
_create_lr_scheduler = run_pretraining.create_lr_scheduler


@pytest.mark.parametrize("target, broken", [
    ("create_optimizer", _optimizer_without_steps),  # an optimizer step that does nothing
    ("create_lr_scheduler", _schedule_at_zero),  # a learning rate of 0 at every step
])
def test_the_margin_catches_a_broken_optimizer(demo, monkeypatch, target, broken):
    monkeypatch.setattr(run_pretraining, target, broken)
    losses = validation_losses(demo, target)
    assert not learns(losses), losses
