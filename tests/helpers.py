"""Helpers shared by several test modules (tests never import each other's test modules)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import paddle

from conftest import ROOT
from modeling import BertConfig, BertForPretraining

# Fine-tuning
# ---------------------------------------------------------------------------------------------
# run_squad.py and run_glue.py runs: a dropout-free tiny model, a pretraining checkpoint, the report's records.

TINY_CONFIG = ROOT / "bert_configs" / "bert-tiny-uncased.json"


def tiny_config(dropout: float = 0.0) -> dict:
    """bert-tiny's config, by default without dropout so that training is deterministic."""
    config = json.loads(TINY_CONFIG.read_text())
    config.update(hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    return config


def write_tiny_model(folder: Path) -> None:
    """<folder>/config.json (tiny_config) and a pretraining checkpoint of it with random weights (seed 1),
    <folder>/pretrain/1000/bert_paddle.pdparams."""
    config = tiny_config()
    (folder / "config.json").write_text(json.dumps(config))
    paddle.seed(1)
    pretrained = BertForPretraining(BertConfig.from_dict(config))
    (folder / "pretrain" / "1000").mkdir(parents=True)
    paddle.save(pretrained.state_dict(), str(folder / "pretrain" / "1000" / "bert_paddle.pdparams"))


def logged(records: list[dict], name: str) -> list:
    """Values of a metric in the report's step and summary records (not the PARAMETER ones)."""
    return [record["data"][name] for record in records
            if record["type"] == "LOG" and record["step"] != "PARAMETER" and name in record["data"]]


def parameter(records: list[dict], name: str) -> list:
    """Values of `name` in the report's PARAMETER records."""
    return [record["data"][name] for record in records if record.get("step") == "PARAMETER" and name in record["data"]]


def params(output_dir: Path, prefix: str = "bert_paddle") -> dict[str, np.ndarray]:
    """The saved fine-tuned weights of a run."""
    return {name: np.asarray(value) for name, value in paddle.load(str(output_dir / f"{prefix}.pdparams")).items()}


def use_gpu_amp_policy(monkeypatch) -> None:
    """Build the AMP policy as on a GPU, so that the loss-scaling flags act (autocast itself is a no-op on CPU)."""
    import amp
    import finetune

    monkeypatch.setattr(finetune, "amp_policy", lambda args: amp.amp_policy(args, device="gpu:0"))


def record_optimizer_options(monkeypatch) -> dict:
    """The options finetune.train gives create_optimizer, filled in when it is called."""
    import finetune

    received = {}
    original = finetune.create_optimizer

    def recording(name, model, learning_rate, weight_decay, beta1, beta2, epsilon, max_grad_norm):
        received.update(name=name, weight_decay=weight_decay, beta1=beta1, beta2=beta2, epsilon=epsilon,
                        max_grad_norm=max_grad_norm)
        return original(name, model, learning_rate, weight_decay, beta1, beta2, epsilon, max_grad_norm)
    monkeypatch.setattr(finetune, "create_optimizer", recording)
    return received


def record_amp_policies(monkeypatch, script) -> list:
    """The AMP policies finetune.train decorates the model with; autocast becomes a no-op (bfloat16 on CPU)."""
    import contextlib

    import finetune

    policies = []
    monkeypatch.setattr(finetune, "amp_decorate", lambda model, optimizer, policy: (
        policies.append(policy), (model, optimizer))[1])
    monkeypatch.setattr(paddle.amp, "is_bfloat16_supported", lambda *args: True)
    for module in (finetune, script):
        monkeypatch.setattr(module, "amp_autocast", lambda policy: contextlib.nullcontext())
    return policies
