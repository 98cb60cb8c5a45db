"""run_squad.py and run_glue.py runs for tests: a dropout-free tiny model with a pretraining checkpoint, a workspace
of SQuAD and MRPC slices, the scripts' shared options, runs in this process or as a new one, the values of their
reports and weights, and recorders of what finetune.train passes on."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import paddle

from conftest import ROOT, gpu_with_bf16, require_shared
from modeling import BertConfig, BertForPretraining

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


def fine_tuning_workspace(folder: Path, squad: dict[str, tuple[int, int | None]] | None = None,
                          mrpc: dict[str, tuple[str, int]] | None = None) -> Path:
    """folder with write_tiny_model's model and slices of the shared data, for run_squad.py and run_glue.py runs.

    squad maps a file name to (paragraphs, questions): the first paragraphs of SQuAD v1.1 dev's first article,
    the first of them cut to its first `questions` questions (None: all). mrpc maps a file name to (split, rows):
    the header and first rows of MRPC's <split>.tsv, byte for byte (BOM, quotes)."""
    if squad:
        article = json.loads(require_shared("data", "squad", "v1.1", "dev-v1.1.json").read_text())["data"][0]
        for name, (paragraphs, questions) in squad.items():
            chosen = [dict(article["paragraphs"][0], qas=article["paragraphs"][0]["qas"][:questions]),
                      *article["paragraphs"][1:paragraphs]]
            (folder / name).write_text(json.dumps({"version": "1.1", "data": [{"title": article["title"],
                                                                                 "paragraphs": chosen}]}))
    for name, (split, rows) in (mrpc or {}).items():
        lines = require_shared("data", "glue", "MRPC", f"{split}.tsv").read_bytes().split(b"\n")
        (folder / name).write_bytes(b"\n".join(lines[:rows + 1]) + b"\n")
    write_tiny_model(folder)
    return folder


def stage_args(stage: str, data: Path, *extra) -> list:
    """A fine-tuning script's options for one stage ("train" or "predict") on one data file, then `extra`."""
    return [f"--do-{stage}", f"--{stage}-file", data, *extra]


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
    from finetuning import finetune
    from training import amp

    monkeypatch.setattr(finetune, "amp_policy", lambda args: amp.amp_policy(args, device="gpu:0"))


def record_optimizer_options(monkeypatch) -> dict:
    """The options finetune.train gives create_optimizer, filled in when it is called."""
    from finetuning import finetune

    received = {}
    original = finetune.create_optimizer

    def recording(name, model, learning_rate, weight_decay, beta1, beta2, epsilon, max_grad_norm, **options):
        received.update(name=name, weight_decay=weight_decay, beta1=beta1, beta2=beta2, epsilon=epsilon,
                        max_grad_norm=max_grad_norm)
        return original(name, model, learning_rate, weight_decay, beta1, beta2, epsilon, max_grad_norm, **options)
    monkeypatch.setattr(finetune, "create_optimizer", recording)
    return received


def record_amp_policies(monkeypatch) -> list:
    """The AMP policies finetune.train decorates the model with; autocast (of training and of the dygraph
    predictor) becomes a no-op (bfloat16 on CPU)."""
    import contextlib

    from finetuning import finetune
    from inference import inference
    from training import amp

    policies = []
    monkeypatch.setattr(amp, "amp_decorate", lambda model, optimizer, policy: (  # amp_prepare calls it
        policies.append(policy), (model, optimizer))[1])
    gpu_with_bf16(monkeypatch, supported=True)
    for module in (finetune, inference):
        monkeypatch.setattr(module, "amp_autocast", lambda policy: contextlib.nullcontext())
    return policies


def common_argv(workspace: Path, output_dir: Path) -> list[str]:
    """The options every test run of run_squad.py and run_glue.py has: the tiny model of write_tiny_model, the
    uncased vocabulary, batches of 8 (training) and 16 (prediction), and the output folder."""
    from conftest import require_shared

    return ["--vocab-file", str(require_shared("vocab", "bert-uncased-vocab.txt")), "--bert-model", "custom",
            "--config-file", str(workspace / "config.json"), "--train-batch-size", "8", "--predict-batch-size", "16",
            "--output-dir", str(output_dir)]


def run_in_process(main, argv: list, output_dir: Path) -> tuple[Path, list[dict]]:
    """main(argv) of an entry script; returns the output folder and the records of its report."""
    from utils.dllog import read_report

    main([str(arg) for arg in argv])
    return output_dir, read_report(output_dir / "report.json")


def run_script(script: str, argv: list, timeout: float = 120, launch_ranks: int = 0, log_dir: Path | None = None):
    """Run an entry script of the project in a new process (under paddle.distributed.launch with launch_ranks
    ranks, if given) with one CPU thread per process; returns the CompletedProcess."""
    import os
    import subprocess
    import sys

    launcher = ["-m", "paddle.distributed.launch", "--nproc_per_node", str(launch_ranks), "--log_dir",
                str(log_dir)] if launch_ranks else []
    # The project root on the path, so that a test module run as a launched worker imports the project too.
    env = {**os.environ, "PADDLEBERT_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, *launcher, str(ROOT / script), *map(str, argv)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)
