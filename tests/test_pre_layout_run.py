"""What users wrote before the modules moved into packages still loads: a pretraining checkpoint resumes to its
own run's end, a fine-tuned classifier and its export predict alike, and the reports read and plot.

tests/fixtures/pre_layout_run/ was written by the project at commit 21339b2, the last one with every module at the
root (tests/fixtures/make_pre_layout_run.sh says how).
"""

from __future__ import annotations

import csv
import shutil
import subprocess
import sys

import numpy as np
import paddle
import pytest

import run_glue
import run_pretraining
from conftest import ROOT
from utils.dllog import read_report

FIXTURE = ROOT / "tests" / "fixtures" / "pre_layout_run"
STEP_FOLDER = FIXTURE / "pretraining" / "custom" / "phase1" / "2"


def test_the_checkpoint_resumes_to_the_old_runs_own_end(tmp_path):
    shards = tmp_path / "shards"
    subprocess.run([sys.executable, str(ROOT / "lddl_preprocess.py"), "--input", str(FIXTURE / "corpus.txt"),
                    "--vocab-file", str(FIXTURE / "vocab.txt"), "--output-dir", str(shards), "--num-shards", "1",
                    "--max-seq-length", "64", "--quiet"], check=True, capture_output=True, timeout=300)
    output = tmp_path / "pretraining"
    shutil.copytree(FIXTURE / "pretraining", output)
    status = run_pretraining.main([
        "--input-dir", str(shards), "--vocab-file", str(FIXTURE / "vocab.txt"), "--output-dir", str(output),
        "--report-file", str(output / "report.json"), "--bert-model", "custom",
        "--config-file", str(STEP_FOLDER / "bert_paddle_config.json"), "--phase1", "--max-steps", "4",
        "--num-steps-per-checkpoint", "2", "--batch-size", "4", "--max-seq-length", "64",
        "--max-predictions-per-seq", "10", "--learning-rate", "1e-3",
        "--log-freq", "1", "--num-workers", "0", "--show-config", "false", "--enable-cpu-affinity", "false",
        "--seed", "1", "--last-step-of-checkpoint", "auto"])
    assert status in (0, None)
    resumed = paddle.load(str(output / "custom" / "phase1" / "4" / "bert_paddle.pdparams"))
    uninterrupted = paddle.load(str(FIXTURE / "uninterrupted_step4.pdparams"))
    assert set(resumed) == set(uninterrupted)
    # The old run's own step 4, up to float rounding (bit for bit on the CPU that wrote it; other CPUs' kernels sum
    # in another order): 2e-6, where the two updates since step 2 moved the weights by up to 6e-4.
    for name, value in uninterrupted.items():
        np.testing.assert_allclose(resumed[name].numpy(), value.numpy(), rtol=0, atol=2e-6, err_msg=name)
    saved = paddle.load(str(STEP_FOLDER / "bert_paddle.pdparams"))
    assert max(np.abs(resumed[name].numpy() - saved[name].numpy()).max() for name in saved) > 1e-4


def probabilities(folder) -> np.ndarray:
    with open(folder / "predictions.tsv", encoding="utf-8", newline="") as file:
        rows = list(csv.DictReader(file, delimiter="\t"))
    return np.array([float(row["probability"]) for row in rows])


@pytest.fixture(scope="module")
def predictions(tmp_path_factory):
    """The fine-tuned weights through today's model, and the export through today's predictor, on train.tsv."""
    folder = tmp_path_factory.mktemp("pre_layout")
    common = ["--task-name", "mrpc", "--do-predict", "--predict-file", str(FIXTURE / "train.tsv"),
              "--vocab-file", str(FIXTURE / "vocab.txt"), "--max-seq-length", "64"]
    run_glue.main([*common, "--bert-model", "custom",
                   "--config-file", str(FIXTURE / "mrpc" / "bert_paddle_config.json"),
                   "--from-pretrained-params", str(FIXTURE / "mrpc" / "bert_paddle.pdparams"),
                   "--output-dir", str(folder / "weights")])
    run_glue.main([*common, "--inference-model-dir", str(FIXTURE / "mrpc" / "export"),
                   "--inference-backend", "paddle", "--inference-precision", "fp32",
                   "--output-dir", str(folder / "export")])
    return probabilities(folder / "weights"), probabilities(folder / "export")


def test_the_fine_tuned_weights_and_their_export_predict_alike(predictions):
    from_weights, from_export = predictions
    assert len(from_weights) == 32
    np.testing.assert_allclose(from_export, from_weights, atol=1e-5)
    assert from_weights.std() > 0  # a trained head, not a constant


def test_the_reports_read_and_plot(tmp_path):
    for report in (FIXTURE / "pretraining" / "report.json", FIXTURE / "mrpc" / "report.json"):
        assert read_report(report)
    plotted = subprocess.run([sys.executable, str(ROOT / "plot_report.py"),
                              str(FIXTURE / "pretraining" / "report.json"), "--output", str(tmp_path / "plot.png")],
                             capture_output=True, text=True, timeout=300)
    assert plotted.returncode == 0, plotted.stderr
    assert (tmp_path / "plot.png").stat().st_size > 0
