"""Runs of an exported tiny BERT for the inference tests (tests/test_inference_onnx.py, test_inference_openvino.py):
a workspace with MRPC and SQuAD slices and a GLUE model exported with --export-onnx, the fine-tuning scripts run in
this process on it, and the fixed batch every backend's logits are compared on."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx

import run_glue
import run_squad
from conftest import ROOT, require_shared
from fine_tuning_runs import common_argv, run_in_process, write_tiny_model
from inference import inference

TRAIN_ROWS, DEV_ROWS = 32, 24


# CPU flags of an int8 dot-product instruction that sums u8 x s8 products into 32 bits. Without one (AVX2 alone,
# e.g. AMD Zen 3), ONNX Runtime's u8 x s8 GEMMs run vpmaddubsw, which adds each adjacent pair of products along K
# in 16 bits with signed saturation (Intel's instruction reference): a pair can reach 2 x 255 x 127, so where the
# int8 ranges are full the sums clamp at 32767 (docs/inference.md, the Zen 3 machine).
INT8_DOT_PRODUCT_FLAGS = {"avx512_vnni", "avx_vnni", "amx_int8"}


def int8_pairs_saturate() -> bool:
    """Whether this CPU's int8 GEMMs in ONNX Runtime sum product pairs in 16 bits (no INT8_DOT_PRODUCT_FLAGS)."""
    from kernels import cpu_ops

    return not INT8_DOT_PRODUCT_FLAGS & cpu_ops.cpu_vendor_and_flags("/proc/cpuinfo")[1]


def make_exported_workspace(folder: Path) -> Path:
    """folder with MRPC slices, a one-paragraph SQuAD slice, the tiny model, and a GLUE model trained 3 steps and
    exported with --export-dir --export-onnx (with the calibration inputs)."""
    for split, rows in (("train", TRAIN_ROWS), ("dev", DEV_ROWS)):
        lines = require_shared("data", "glue", "MRPC", f"{split}.tsv").read_bytes().split(b"\n")
        (folder / f"{split}.tsv").write_bytes(b"\n".join(lines[:rows + 1]) + b"\n")
    article = json.loads(require_shared("data", "squad", "v1.1", "dev-v1.1.json").read_text())["data"][0]
    squad_slice = {"version": "1.1", "data": [{"title": article["title"], "paragraphs": article["paragraphs"][:1]}]}
    (folder / "squad.json").write_text(json.dumps(squad_slice))
    write_tiny_model(folder)
    glue(folder, "trained", "--do-train", "--train-file", folder / "train.tsv", "--from-pretrained-params",
         folder / "pretrain" / "1000", "--max-steps", 3, "--export-dir", folder / "export", "--export-onnx")
    return folder


def glue(workspace, name, *args):
    return run_in_process(run_glue.main, ["--task-name", "mrpc", *common_argv(workspace, workspace / name), *args],
                          workspace / name)


def squad(workspace, name, *args):
    return run_in_process(run_squad.main, [*common_argv(workspace, workspace / name), "--max-seq-length", "128",
                                           "--doc-stride", "64", *args], workspace / name)


def batch(vocab_size: int = 30522):
    """[4, 48] ids, segments and mask, two rows padded."""
    rng = np.random.default_rng(0)
    input_ids = rng.integers(5, vocab_size, (4, 48), dtype=np.int64)
    token_type_ids = np.zeros_like(input_ids)
    token_type_ids[:, 24:] = 1
    attention_mask = np.ones_like(input_ids)
    attention_mask[0, 40:] = 0  # a padded row
    attention_mask[1, 30:] = 0
    return input_ids, token_type_ids, attention_mask


def paddle_logits(folder, prefix="bert_paddle"):
    return inference.inference_predictor(str(folder), prefix, 1, inference.predictor_settings("cpu", "fp32"))(*batch())


def glue_cli_error(workspace, model_dir, backend, *flags, timeout: float) -> str:
    """run_glue.py predicting with --inference-model-dir model_dir on `backend`, as a command that must fail in one
    line: that line (no traceback)."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "run_glue.py"), "--task-name", "mrpc", *map(str, common_argv(
            workspace, workspace / "cli")), "--do-predict", "--predict-file", str(workspace / "dev.tsv"),
         "--inference-model-dir", str(model_dir), "--inference-backend", backend, *flags],
        capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 1, result.stdout[-2000:]
    assert "Traceback" not in result.stderr
    return result.stderr.strip().splitlines()[-1]


def save_with_mask_renamed(source: Path, target: Path) -> None:
    """The ONNX model `source` with its attention_mask input named "mask": a model of other inputs, at target."""
    model = onnx.load_model(str(source))
    model.graph.input[2].name = "mask"
    for node in model.graph.node:
        node.input[:] = ["mask" if name == "attention_mask" else name for name in node.input]
    onnx.save_model(model, str(target))
