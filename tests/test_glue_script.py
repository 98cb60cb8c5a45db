"""scripts/run_glue.sh: each positional argument reaches run_glue.py as the right flag (a stand-in `python` on PATH
records the command), bad arguments stop it with one line, and shellcheck finds nothing."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from conftest import ROOT

SCRIPT = ROOT / "scripts" / "run_glue.sh"


@pytest.fixture
def recorded(tmp_path):
    """Run the script with a `python` that writes its arguments, one per line, instead of running anything."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "python"
    fake.write_text('#!/usr/bin/env bash\nprintf "%s\\n" "$@" > "$RECORDED_ARGS"\n')
    fake.chmod(0o755)
    record = tmp_path / "args.txt"

    def run(*args: str) -> list[str]:
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "RECORDED_ARGS": str(record),
               "BERT_PREP_WORKING_DIR": "/prep"}
        result = subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        return record.read_text().splitlines()
    return run


def test_defaults_are_nvidias(recorded, tmp_path):
    out_dir = tmp_path / "out"
    assert recorded("", "", "", "", str(out_dir)) == [
        "-m", "paddle.distributed.launch", "--nproc_per_node", "8", "--log_dir", f"{out_dir}/log",
        str(ROOT / "run_glue.py"), "--task-name", "mrpc",
        "--vocab-file", str(ROOT / "vocab" / "bert-uncased-vocab.txt"),
        "--bert-model", "bert-large-uncased", "--output-dir", str(out_dir), "--max-seq-length", "128", "--seed", "2",
        "--amp", "--use-dynamic-loss-scaling", "--scale-loss", "128",
        "--from-pretrained-params", str(ROOT / "results" / "bert-large-uncased" / "phase2" / "1563"),
        "--do-train", "--train-file", "/prep/download/glue/MRPC/train.tsv", "--train-batch-size", "16",
        "--gradient-merge-steps", "1", "--learning-rate", "2.4e-5", "--warmup-proportion", "0.1", "--epochs", "3",
        "--do-eval", "--predict-file", "/prep/download/glue/MRPC/dev.tsv", "--predict-batch-size", "16",
    ]
    assert (out_dir / "logfile").is_file()


def test_every_argument_takes_effect(recorded, tmp_path):
    out_dir = tmp_path / "sst"
    config = ROOT / "bert_configs" / "bert-tiny-uncased.json"
    assert recorded("ckpt/model.pdparams", "glue/SST-2/", "my-vocab.txt", str(config), str(out_dir), "sst-2", "2",
                    "24", "3", "1e-4", "0.2", "5", "7", "bf16", "11", "train prediction") == [
        "-m", "paddle.distributed.launch", "--nproc_per_node", "2", "--log_dir", f"{out_dir}/log",
        str(ROOT / "run_glue.py"), "--task-name", "sst-2", "--vocab-file", "my-vocab.txt",
        "--bert-model", "custom", "--config-file", str(config), "--output-dir", str(out_dir),
        "--max-seq-length", "128", "--seed", "11", "--amp", "--amp-dtype", "bfloat16",
        "--from-pretrained-params", "ckpt/model.pdparams",
        "--do-train", "--train-file", "glue/SST-2/train.tsv", "--train-batch-size", "24", "--gradient-merge-steps", "3",
        "--learning-rate", "1e-4", "--warmup-proportion", "0.2", "--epochs", "5", "--max-steps", "7",
        "--do-predict", "--predict-file", "glue/SST-2/dev.tsv", "--predict-batch-size", "24",
    ]


def test_evaluation_alone_runs_one_process_without_initial_weights_flag(recorded, tmp_path):
    out_dir = tmp_path / "eval"
    assert recorded("None", "glue/RTE", "v.txt", "None", str(out_dir), "rte", "4", "8", "1", "1e-4", "0.1", "3",
                    "-1", "fp32", "1", "eval") == [
        str(ROOT / "run_glue.py"), "--task-name", "rte", "--vocab-file", "v.txt", "--bert-model", "bert-large-uncased",
        "--output-dir", str(out_dir), "--max-seq-length", "128", "--seed", "1",
        "--do-eval", "--predict-file", "glue/RTE/dev.tsv", "--predict-batch-size", "8",
    ]


@pytest.mark.parametrize(
    ("position", "value", "message"),
    [
        (6, "mnli", "task_name must be one of: cola sst-2 mrpc rte qqp; got 'mnli'"),
        (14, "fp64", "precision must be one of: fp32 tf32 amp fp16 bf16; got 'fp64'"),
        (16, "train evaluate", "mode must be one of: train eval prediction; got 'evaluate'"),
        (13, "1.5", "max_steps must be an integer >= 1, got '1.5'"),
        (8, "0", "batch_size must be an integer >= 1, got '0'"),
    ],
)
def test_bad_arguments_stop_with_one_line(tmp_path, position, value, message):
    args = [""] * 16
    args[4] = str(tmp_path / "out")
    args[position - 1] = value
    result = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert result.stderr == f"run_glue.sh: {message}\n"


def test_shellcheck_finds_nothing():
    if shutil.which("shellcheck") is None:
        pytest.fail("shellcheck is missing: pip install -r requirements-dev.txt")
    result = subprocess.run(["shellcheck", "-x", "scripts/run_glue.sh"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout
