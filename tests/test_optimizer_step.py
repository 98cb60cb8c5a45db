"""gradient_merge.optimizer_step, the one update both trainers make: a batch whose loss is not finite is skipped
and reported, in fp32 (no loss scaler) as under float16 AMP, by run_pretraining.Trainer and finetune.train alike.

The non-finite batch is made by a forward hook on the embeddings that turns that batch's activations into NaN,
as an overflow inside the model would.
"""

from __future__ import annotations

import argparse
import math

import numpy as np
import paddle

import run_pretraining
from conftest import require_shared
from fine_tuning_runs import logged
from finetuning import finetune
from finetuning.glue_data import ClassificationFeature, collate_classification
from modeling import BertConfig, BertForSequenceClassification
from pretraining_dataset import PretrainingDataLoader
from pretraining_runs import UNBINNED, pretraining_argv
from training.amp import AmpPolicy, LossScaler
from training.gradient_merge import optimizer_step
from utils.dllog import DLLogger, read_report


def poison(layer: paddle.nn.Layer, poisoned_calls: set[int]) -> list[int]:
    """Make the output of layer's forward calls numbered in poisoned_calls (from 1) NaN; returns the call count."""
    calls = [0]

    def hook(_, inputs, output):
        calls[0] += 1
        return output * float("nan") if calls[0] in poisoned_calls else output

    layer.register_forward_post_hook(hook)
    return calls


def weights(model: paddle.nn.Layer) -> dict[str, np.ndarray]:
    return {name: p.numpy().copy() for name, p in model.named_parameters()}


def test_optimizer_step_skips_a_non_finite_loss_and_moves_the_schedule_on():
    model = paddle.nn.Linear(3, 2)
    scheduler = paddle.optimizer.lr.PiecewiseDecay([1], [0.1, 0.05])
    optimizer = paddle.optimizer.SGD(learning_rate=scheduler, parameters=model.parameters())
    before = weights(model)
    model(paddle.ones([1, 3])).sum().backward()
    outcome = optimizer_step(model, optimizer, scheduler, None, float("nan"))
    assert outcome.skipped and outcome.learning_rate == 0.1 and outcome.loss_scale == 1.0
    assert all(np.array_equal(before[name], value) for name, value in weights(model).items())
    assert all(p.grad is None or not p.grad.numpy().any() for p in model.parameters())  # cleared
    assert scheduler.last_epoch == 1
    model(paddle.ones([1, 3])).sum().backward()
    outcome = optimizer_step(model, optimizer, scheduler, None, 1.0)
    assert not outcome.skipped and outcome.learning_rate == 0.05
    np.testing.assert_allclose(model.weight.numpy(), before["weight"] - 0.05, rtol=1e-6)  # d sum / d W = 1


def test_optimizer_step_under_loss_scaling_backs_off_on_a_non_finite_loss():
    model = paddle.nn.Linear(3, 2)
    scheduler = paddle.optimizer.lr.PiecewiseDecay([1], [0.1, 0.05])
    optimizer = paddle.optimizer.SGD(learning_rate=scheduler, parameters=model.parameters())
    scaler = LossScaler(8.0, dynamic=True)
    scaler.scale(model(paddle.ones([1, 3])).sum()).backward()
    outcome = optimizer_step(model, optimizer, scheduler, scaler, float("inf"))
    assert outcome.skipped and outcome.loss_scale == 8.0 and scaler.scale_value == 4.0


def test_pretraining_skips_and_reports_a_nan_batch(tmp_path):
    trainer = run_pretraining.Trainer(run_pretraining.parse_args(pretraining_argv(tmp_path, dropout=0.0)), 0, 1)
    assert trainer.scaler is None  # fp32: the loss check alone protects the weights
    poison(trainer.model.bert.embeddings, {2})
    loader = iter(PretrainingDataLoader(str(require_shared(*UNBINNED)), str(require_shared(
        "vocab", "bert-uncased-vocab.txt")), 4, 128, 20, seed=42))
    first, _ = trainer.step([next(loader)])
    assert not first.skipped and math.isfinite(first.loss)
    before = weights(trainer.model)
    poisoned, _ = trainer.step([next(loader)])
    assert poisoned.skipped and math.isnan(poisoned.loss)
    assert all(np.array_equal(before[name], value) for name, value in weights(trainer.model).items())
    after, _ = trainer.step([next(loader)])
    assert not after.skipped and math.isfinite(after.loss)
    assert all(np.isfinite(value).all() for value in weights(trainer.model).values())


def finetune_args() -> argparse.Namespace:
    return argparse.Namespace(
        learning_rate=1e-3, warmup_proportion=0.0, warmup_start_lr=0.0, optimizer="AdamW", weight_decay=0.01,
        beta1=0.9, beta2=0.999, epsilon=1e-6, train_batch_size=2, seed=1, gradient_merge_steps=1, log_freq=1,
        visualdl_log_dir=None, epochs=1, max_steps=None,
    )


def test_fine_tuning_skips_and_reports_a_nan_batch(tmp_path):
    poisoned_step = 2
    paddle.seed(0)
    config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = BertForSequenceClassification(config, num_labels=2)
    poison(model.bert.embeddings, {poisoned_step})
    rng = np.random.default_rng(0)
    features = [ClassificationFeature(list(rng.integers(1, 50, 6)), [0] * 6, int(rng.integers(2)))
                for _ in range(6)]  # 3 steps of 2

    def loss_fn(network, batch):
        logits = network(*finetune.model_inputs(batch))
        return paddle.nn.functional.cross_entropy(logits, paddle.to_tensor(batch["labels"]))

    report = tmp_path / "report.json"
    session = finetune.Session(0, 1, 1, DLLogger(str(report)), None, AmpPolicy())
    trained = finetune.train(model, features, lambda rows: collate_classification(rows, 0), loss_fn,
                             finetune_args(), session, unit="examples")
    assert all(np.isfinite(value).all() for value in weights(trained).values())
    records = read_report(report)
    skipped = [r["step"][1] for r in records if r["type"] == "LOG" and "skipped_update" in r["data"]]
    assert skipped == [poisoned_step]
    assert logged(records, "skipped_steps") == [0, 1, 1]


def test_fine_tuning_under_pure_fp16_asks_for_master_weights(tmp_path, monkeypatch):
    """As pretraining does: multi_precision reaches create_optimizer, which then picks an optimizer that takes
    O2's fp32 master gradients (tests/test_optimizer.py)."""
    received = []
    original = finetune.create_optimizer
    monkeypatch.setattr(finetune, "create_optimizer", lambda *args, **options: (
        received.append(options.get("multi_precision")), original(*args, **options))[1])
    paddle.seed(0)
    config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32)
    features = [ClassificationFeature([3, 4, 5], [0] * 3, 1)] * 2

    def loss_fn(network, batch):
        return network(*finetune.model_inputs(batch)).mean()

    for policy in (AmpPolicy(), AmpPolicy(enabled=True, level="O2", dtype="bfloat16")):
        session = finetune.Session(0, 1, 1, DLLogger(str(tmp_path / "report.json")), None, policy)
        finetune.train(BertForSequenceClassification(config, num_labels=2), features,
                       lambda rows: collate_classification(rows, 0), loss_fn, finetune_args(), session, "examples")
    assert received == [False, True]
