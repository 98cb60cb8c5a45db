"""Pretraining runs for tests: a 1-layer, hidden-32 BERT (the uncased vocab, so the LDDL sample shards fit) trained
for a few steps, in this process or as processes whose results compare bit for bit, and readers of their reports
and checkpoints."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import paddle

import run_pretraining
from conftest import ROOT, require_shared
from kernels import cpu_ops
from utils.dllog import read_report, training_step

# The LDDL sample shards under ../shared the runs read.
UNBINNED = ("data", "lddl-sample", "wikitext2-test-seq128-unbinned")
BINNED = ("data", "lddl-sample", "wikitext2-test-seq128-bin64")
DYNAMIC = ("data", "lddl-sample", "wikitext2-test-seq128-unbinned-dynamic")


def write_config(folder: Path, dropout: float = 0.1, name: str = "bert-test.json", positions: int = 128) -> Path:
    """A 1-layer, hidden-32 BERT config with the uncased vocabulary."""
    config = {
        "vocab_size": 30522, "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
        "intermediate_size": 64, "max_position_embeddings": positions, "hidden_dropout_prob": dropout,
        "attention_probs_dropout_prob": dropout,
    }
    path = folder / name
    path.write_text(json.dumps(config))
    return path


def pretraining_argv(tmp_path: Path, *extra: str, dropout: float = 0.1, shards: tuple | Path = UNBINNED,
                     positions: int = 128) -> list[str]:
    """Arguments for a short phase-1 run writing to tmp_path/out and tmp_path/report.json; `extra` overrides.

    shards: a folder under ../shared (as a tuple of parts) or any folder (a Path)."""
    argv = [
        "--input-dir", str(shards if isinstance(shards, Path) else require_shared(*shards)),
        "--vocab-file", str(require_shared("vocab", "bert-uncased-vocab.txt")),
        "--output-dir", str(tmp_path / "out"), "--report-file", str(tmp_path / "report.json"),
        "--bert-model", "custom", "--config-file", str(write_config(tmp_path, dropout, positions=positions)),
        "--max-steps", "4", "--batch-size", "4", "--max-seq-length", "128", "--max-predictions-per-seq", "20",
        "--learning-rate", "5e-3", "--warmup-proportion", "0.25", "--log-freq", "1", "--num-workers", "0",
        "--show-config", "false", "--enable-cpu-affinity", "false",
    ]
    if "--phase2" not in extra:
        argv.append("--phase1")
    return argv + list(extra)


def train(argv: list[str]) -> int:
    """run_pretraining.main in this process: for runs whose numbers no test compares with another process's."""
    return run_pretraining.main(argv)


def without_omp_threads() -> dict[str, str]:
    """This process's environment without OMP_NUM_THREADS, which earlier in-process runs set
    (configure_cpu_threads) and which makes Paddle warn on stderr at import: that line is Paddle's."""
    import os

    return {name: value for name, value in os.environ.items() if name != "OMP_NUM_THREADS"}


def training_environment(**extra: str) -> dict[str, str]:
    """The environment of training processes whose results a test compares bit for bit.

    Two runs compared bit for bit must start the same way, both as processes of the real command: MKL picks its
    GEMM kernels once, at its first call, and a run inside pytest inherits the choice pytest's earlier tests made
    (on AMD, before runtime.apply_cpu_tweaks could set MKL_DEBUG_CPU_TYPE). These processes take MKL's AVX2
    kernels (MKL_DEBUG_CPU_TYPE=5, on a CPU that has AVX2 and FMA), which differ from this pytest process's own on
    Intel and AMD alike, so that a comparison with an in-process run fails on every machine, not only on AMD.
    """
    env = without_omp_threads()
    if {"avx2", "fma"} <= cpu_ops.cpu_vendor_and_flags()[1]:
        env["MKL_DEBUG_CPU_TYPE"] = "5"
    return {**env, **extra}


def start_training(argv: list[str], code: str | None = None, **env: str):
    """`python run_pretraining.py argv` (or `python -c code argv`) as a new process in training_environment(), its
    output on a pipe; returns the Popen."""
    import subprocess
    import sys

    command = [sys.executable, "-W", "ignore", *(["-c", code] if code else [str(ROOT / "run_pretraining.py")])]
    return subprocess.Popen([*command, *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                            env=training_environment(**env))


def run_training(argv: list[str], code: str | None = None, timeout: float = 600, **env: str) -> str:
    """start_training to its end; returns its output, and fails the test if it exited with an error."""
    import pytest

    process = start_training(argv, code, **env)
    output, _ = process.communicate(timeout=timeout)
    if process.returncode != 0:
        pytest.fail(f"run_pretraining exited {process.returncode}:\n{output[-3000:]}")
    return output


def step_records(report: Path) -> list[dict]:
    """The per-step LOG records of a report (run_pretraining.py's [epoch, step]), in order."""
    return [r for r in read_report(report) if r["type"] == "LOG" and training_step(r["step"]) is not None]


def step_numbers(records: list[dict]) -> list[int]:
    """The training step of each record ([epoch, step] -> step)."""
    return [training_step(r["step"]) for r in records]


def summaries(report: Path) -> list[dict]:
    return [r["data"] for r in read_report(report) if r["type"] == "LOG" and r["step"] == []]


def step_folder(out: Path, step: int, phase: int = 1) -> Path:
    """The checkpoint folder of `step` in a run of the test's custom model."""
    return out / "custom" / f"phase{phase}" / str(step)


def checkpoint_params(out: Path, step: int, phase: int = 1, prefix: str = "bert_paddle") -> dict[str, np.ndarray]:
    state = paddle.load(str(step_folder(out, step, phase) / f"{prefix}.pdparams"))
    return {name: value.numpy() for name, value in state.items()}


def step_folders(out: Path, phase: int = 1) -> list[int]:
    return sorted(int(p.name) for p in (out / "custom" / f"phase{phase}").iterdir() if p.name.isdigit())
