"""run_glue.py on the GLUE tasks beyond CoLA, SST-2, MRPC, RTE and QQP: MNLI (matched and mismatched), QNLI, STS-B,
WNLI and the diagnostic set, on small files in GLUE's own layouts (glue_files.py). The readers against the rows
written, the task names of NVIDIA and Hugging Face, STS-B's regression loss against NumPy and its metrics against
SciPy, each task trained, scored and predicted from the command line, one exported STS-B model on every backend
and precision, and run_glue.sh and the presets for the new tasks."""

from __future__ import annotations

import csv
import os
import subprocess

import numpy as np
import paddle
import pytest
import scipy.stats

import run_glue
from conftest import ROOT
from fine_tuning_runs import common_argv, logged, parameter, params, run_in_process, run_script, tiny_config
from finetuning.glue_data import (
    ClassificationExample,
    convert_examples_to_features,
    glue_task_name,
    read_glue_examples,
)
from finetuning.glue_metrics import compute_regression_metrics, pearson, spearman
from glue_files import MNLI_LABELS, write_glue_files
from inference import inference
from messages import assert_one_line
from modeling import BertConfig, BertForSequenceClassification
from test_faults import one_line_error, run_entry
from tokenizer import BertTokenizer

# Every file glue_files.py writes: (task the reader is given, task folder of glue_files, split).
LAYOUTS = [("mnli", "mnli", split) for split in ("train", "dev_matched", "test_matched")] + [
    ("mnli-mm", "mnli", split) for split in ("dev_mismatched", "test_mismatched")] + [
    (task, task, split) for task in ("sts-b", "qnli", "wnli", "rte") for split in ("train", "dev", "test")] + [
    (task, task, "test") for task in ("cola", "sst-2", "mrpc", "qqp", "ax")]


@pytest.fixture(scope="module")
def glue(tmp_path_factory):
    return write_glue_files(tmp_path_factory.mktemp("glue_files"))


def as_rows(examples):
    return [(example.guid, example.text_a, example.text_b, example.label) for example in examples]


# ---------------------------------------------------------------------------------------------
# The layouts
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("task", "folder", "split"), LAYOUTS)
def test_each_layout_reads_every_row_as_written(glue, task, folder, split):
    written = glue[folder][split]
    examples = read_glue_examples(task, written.path, require_labels=False)
    assert as_rows(examples) == [(row.guid, row.text_a, row.text_b, row.label) for row in written.rows]
    if "test" in split:  # a test file has no labels: training or scoring it is refused, naming it
        with pytest.raises(ValueError) as error:
            read_glue_examples(task, written.path)
        if task == "ax":  # its only layout
            assert_one_line(str(error.value), f"{written.path}: ", "ax files have no labels")
        else:
            assert_one_line(str(error.value), f"{written.path}:1: ", "test file", "no labels")
    else:
        assert read_glue_examples(task, written.path) == examples


def test_the_files_hold_quotes_that_a_quoting_reader_would_join(glue):
    # What the readers above get right: read with CSV quoting, the unclosed quotes swallow rows.
    path = glue["mnli"]["dev_matched"].path
    with open(path, encoding="utf-8", newline="") as handle:
        quoted = list(csv.reader(handle, delimiter="\t"))
    assert len(quoted) < 1 + len(glue["mnli"]["dev_matched"].rows)
    assert any(row.text_a.startswith('"') for row in glue["mnli"]["dev_matched"].rows)


def _replace_line(path, number, change, target):
    lines = path.read_text(encoding="utf-8").split("\n")
    lines[number - 1] = change(lines[number - 1])
    target.write_text("\n".join(lines), encoding="utf-8")
    return target


def last_field(value: str | None):
    """A change of a line: its last field replaced by value, or dropped (None)."""
    return lambda line: line.rsplit("\t", 1)[0] + ("" if value is None else "\t" + value)


@pytest.mark.parametrize(("task", "folder", "split", "line", "change", "message"), [
    ("mnli", "mnli", "dev_matched", 3, last_field(None), "expected 16 tab-separated fields, found 15"),
    ("mnli", "mnli", "train", 2, last_field("-"), "label '-' is not one of ['contradiction', 'entailment', 'neutral']"),
    ("mnli", "mnli", "test_matched", 4, lambda line: line + "\tneutral", "expected 10 tab-separated fields, found 11"),
    ("sts-b", "sts-b", "train", 2, last_field("5.5"), "score '5.5' is not a number in [0, 5]"),
    ("sts-b", "sts-b", "dev", 5, last_field("nan"), "score 'nan' is not a number in [0, 5]"),
    ("sts-b", "sts-b", "dev", 6, last_field("similar"), "score 'similar' is not a number"),
    ("qnli", "qnli", "train", 7, last_field("yes"), "label 'yes' is not one of"),
    ("wnli", "wnli", "dev", 2, lambda line: line.replace("\t", " ", 1), "expected 4 tab-separated fields, found 3"),
    ("ax", "ax", "test", 1, lambda line: "index\tpremise\thypothesis",
     "header ['index', 'premise', 'hypothesis'] is not the ax header ['index', 'sentence1', 'sentence2']"),
    ("mnli", "mnli", "train", 1, lambda line: line.replace("gold_label", "label"), "is not the mnli header"),
])
def test_a_malformed_row_is_one_line_naming_the_file_and_line(glue, tmp_path, task, folder, split, line, change,
                                                               message):
    broken = _replace_line(glue[folder][split].path, line, change, tmp_path / "broken.tsv")
    with pytest.raises(ValueError) as error:
        read_glue_examples(task, broken, require_labels=False)
    assert_one_line(str(error.value), f"{broken}:{line}: ", message)


def test_an_unknown_mnli_header_names_every_mnli_layout(glue, tmp_path):
    broken = _replace_line(glue["mnli"]["train"].path, 1, lambda line: "index\tsentence1\tsentence2",
                           tmp_path / "x.tsv")
    with pytest.raises(ValueError) as error:
        read_glue_examples("mnli", broken, require_labels=False)
    assert_one_line(str(error.value), f"{broken}:1: ", "'label1', 'gold_label']", "'label5', 'gold_label']",
                    "nor that of its test file", "'sentence2']")


# ---------------------------------------------------------------------------------------------
# Task names and options
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("typed", "task"), [
    ("mnli", "mnli"), ("MNLI-MM", "mnli-mm"), ("mnli_matched", "mnli"), ("mnli_mismatched", "mnli-mm"),
    ("qnli", "qnli"), ("sts-b", "sts-b"), ("stsb", "sts-b"), ("STS-B", "sts-b"), ("wnli", "wnli"), ("sst2", "sst-2"),
    ("SST-2", "sst-2"), ("ax", "ax"), ("CoLA", "cola"), ("custom", "custom")])
def test_nvidias_and_hugging_faces_task_names(glue, typed, task):
    assert glue_task_name(typed) == task
    args = run_glue.parse_args(["--task-name", typed, "--vocab-file", str(glue["qnli"]["train"].path), "--output-dir",
                                "x", "--do-predict", "--predict-file", str(glue["qnli"]["test"].path),
                                "--allow-random-weights", *(["--labels", "a,b", "--text-a-column", "question",
                                                             "--label-column", "label"] if task == "custom" else [])])
    assert args.task_name == task


@pytest.mark.parametrize(("argv", "message"), [
    (["--task-name", "squad", "--do-predict"], "invalid choice: 'squad'"),
    (["--task-name", "ax", "--do-train", "--train-file", "{mnli_train}"], "--task-name ax: GLUE's diagnostic set"),
    (["--task-name", "ax", "--do-eval", "--predict-file", "{ax}"], "--task-name ax: GLUE's diagnostic set"),
    (["--task-name", "qnli", "--do-eval", "--predict-file", "{mnli_train}", "--mismatched-predict-file", "{ax}"],
     "--mismatched-predict-file is MNLI's mismatched set: it needs --task-name mnli"),
    (["--task-name", "mnli-mm", "--do-eval", "--predict-file", "{mnli_train}", "--mismatched-predict-file", "{ax}"],
     "it needs --task-name mnli"),
    (["--task-name", "mnli", "--do-train", "--train-file", "{mnli_train}", "--mismatched-predict-file", "{ax}"],
     "--mismatched-predict-file needs --do-predict or --do-eval"),
    (["--task-name", "mnli", "--do-eval", "--predict-file", "{mnli_train}", "--mismatched-predict-file", "none.tsv"],
     "--mismatched-predict-file none.tsv: file not found"),
])
def test_bad_task_options_are_refused(glue, capsys, argv, message):
    files = {"mnli_train": glue["mnli"]["train"].path, "ax": glue["ax"]["test"].path}
    with pytest.raises(SystemExit):
        run_glue.parse_args(["--vocab-file", str(files["ax"]), "--output-dir", "x", "--allow-random-weights",
                             *(arg.format(**files) for arg in argv)])
    assert message in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# STS-B's regression: loss and metrics
# ---------------------------------------------------------------------------------------------


def test_pearson_and_spearman_equal_scipys():
    rng = np.random.default_rng(3)
    for size in (2, 7, 50, 400):
        scores = np.round(rng.uniform(0, 5, size), 1)  # rounded: ties, which Spearman ranks by their mean
        predictions = np.round(scores + rng.normal(0, 1.5, size), 1)
        expected_pearson = scipy.stats.pearsonr(scores, predictions)[0]
        expected_spearman = scipy.stats.spearmanr(scores, predictions)[0]
        assert pearson(scores, predictions) == pytest.approx(expected_pearson, abs=1e-12)
        assert spearman(scores, predictions) == pytest.approx(expected_spearman, abs=1e-12)
        metrics = compute_regression_metrics(("pearson", "spearman", "pearson_spearman_mean"), scores, predictions)
        assert metrics == pytest.approx({"pearson": expected_pearson, "spearman": expected_spearman,
                                         "pearson_spearman_mean": (expected_pearson + expected_spearman) / 2})
    # Spearman sees only the order: a monotonic transform keeps it, and changes Pearson's
    assert spearman(scores, np.exp(predictions)) == pytest.approx(expected_spearman, abs=1e-12)
    assert pearson(scores, np.exp(predictions)) != pytest.approx(expected_pearson, abs=1e-3)


def test_a_constant_prediction_correlates_0_where_scipy_has_no_value():
    scores = np.array([0.5, 2.0, 4.0, 3.0])
    with pytest.warns(scipy.stats.ConstantInputWarning):
        assert np.isnan(scipy.stats.pearsonr(scores, np.full(4, 2.5))[0])
    assert pearson(scores, np.full(4, 2.5)) == spearman(scores, np.full(4, 2.5)) == 0.0
    with pytest.raises(ValueError, match="unknown metric 'accuracy'"):
        compute_regression_metrics(("pearson", "accuracy"), scores, scores)


@pytest.fixture(scope="module")
def tokenizer():
    from conftest import require_shared

    return BertTokenizer(str(require_shared("vocab", "bert-uncased-vocab.txt")))


def test_regression_loss_is_the_mean_squared_error_of_the_scores(glue, tokenizer):
    examples = read_glue_examples("sts-b", glue["sts-b"]["train"].path)[:6]
    features = convert_examples_to_features(examples, tokenizer, 32, [])
    batch = run_glue.collate(features, tokenizer.pad_token_id, 32, regression=True)
    scores = np.array([float(example.label) for example in examples])
    np.testing.assert_allclose(batch["labels"], scores, rtol=1e-6)
    assert batch["labels"].dtype == np.float32
    paddle.seed(5)
    model = BertForSequenceClassification(BertConfig.from_dict(tiny_config()), 1)
    model.classifier.bias.set_value(paddle.to_tensor([2.0]))  # outputs near the scores, errors of both signs
    model.eval()
    outputs = model(*[paddle.to_tensor(batch[name]) for name in ("input_ids", "token_type_ids",
                                                                 "attention_mask")]).numpy()
    assert outputs.shape == (6, 1)
    loss = run_glue.regression_loss(model, batch)
    assert loss.shape == [] and float(loss) == pytest.approx(np.mean((outputs[:, 0] - scores) ** 2), rel=1e-5)
    unlabelled = convert_examples_to_features([ClassificationExample("0", "a b", None, None)], tokenizer, 8, [])
    assert unlabelled[0].score is None
    assert np.isnan(run_glue.collate(unlabelled, 0, 8, regression=True)["labels"]).all()


# ---------------------------------------------------------------------------------------------
# Each task from the command line
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def workspace(glue, tmp_path_factory):
    from fine_tuning_runs import write_tiny_model

    folder = tmp_path_factory.mktemp("glue_tasks")
    write_tiny_model(folder)
    return folder


def run(workspace, task, name, *args):
    return run_in_process(run_glue.main, ["--task-name", task, *common_argv(workspace, workspace / name), *args],
                          workspace / name)


def table(path):
    with open(path, encoding="utf-8", newline="") as handle:
        return list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))


def summary(records):
    """The report's summary metrics (step [] records) merged."""
    merged = {}
    for record in records:
        if record.get("step") == [] and record["type"] == "LOG":
            merged.update(record["data"])
    return merged


def train_args(workspace, train_file, steps=30, rate=2e-3):
    return ["--do-train", "--train-file", train_file, "--from-pretrained-params", workspace / "pretrain" / "1000",
            "--max-steps", steps, "--epochs", 30, "--learning-rate", rate, "--log-freq", 1]


@pytest.fixture(scope="module")
def stsb_run(workspace, glue):
    """STS-B: 30 updates on its train file, then evaluation and predictions of the same file, and an export of
    the model with --export-onnx (the calibration inputs from the train file)."""
    return run(workspace, "stsb", "stsb", *train_args(workspace, glue["sts-b"]["train"].path), "--do-eval",
               "--do-predict", "--predict-file", glue["sts-b"]["train"].path, "--export-dir", workspace / "stsb_export",
               "--export-onnx")


def test_stsb_trains_a_regression_head_on_the_mean_squared_error(stsb_run, glue):
    output_dir, records = stsb_run
    losses = logged(records, "loss")
    assert len(losses) == 30 and np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5])
    assert params(output_dir)["classifier.weight"].shape == (128, 1)
    rows = table(output_dir / "predictions.tsv")
    assert rows[0] == ["id", "score"]
    assert [row[0] for row in rows[1:]] == [row.guid for row in glue["sts-b"]["train"].rows]
    predicted = np.array([float(row[1]) for row in rows[1:]])
    gold = np.array([float(row.label) for row in glue["sts-b"]["train"].rows])
    expected_pearson = scipy.stats.pearsonr(gold, predicted)[0]
    expected_spearman = scipy.stats.spearmanr(gold, predicted)[0]
    metrics = summary(records)
    assert {name: metrics[name] for name in ("pearson", "spearman", "pearson_spearman_mean")} == pytest.approx(
        {"pearson": expected_pearson, "spearman": expected_spearman,
         "pearson_spearman_mean": (expected_pearson + expected_spearman) / 2}, abs=1e-4)
    assert expected_pearson > 0.5  # it learnt the training scores, beyond their mean
    assert "accuracy" not in metrics
    assert not (output_dir / "STS-B.tsv").exists()  # a labelled file: no leaderboard file


def test_mnli_scores_its_matched_and_mismatched_sets_in_one_run_from_the_command_line(workspace, glue):
    output_dir = workspace / "mnli"
    result = run_script("run_glue.py", ["--task-name", "mnli", *common_argv(workspace, output_dir),
                                        *train_args(workspace, glue["mnli"]["train"].path, steps=4),
                                        "--do-eval", "--do-predict", "--predict-file", glue["mnli"]["dev_matched"].path,
                                        "--mismatched-predict-file", glue["mnli"]["dev_mismatched"].path], timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    from utils.dllog import read_report

    records = read_report(output_dir / "report.json")
    metrics = summary(records)
    assert {"accuracy", "accuracy_mm"} <= set(metrics) and "auc" not in metrics
    assert parameter(records, "eval_samples") == parameter(records, "eval_samples_mm") == [24]
    for split, predictions, name in (("dev_matched", "predictions.tsv", "accuracy"),
                                     ("dev_mismatched", "predictions_mm.tsv", "accuracy_mm")):
        rows = table(output_dir / predictions)
        gold = glue["mnli"][split].rows
        assert rows[0] == ["id", "label", "probability"] and [row[0] for row in rows[1:]] == [r.guid for r in gold]
        assert {row[1] for row in rows[1:]} <= set(MNLI_LABELS)
        assert metrics[name] == pytest.approx(np.mean([row[1] == r.label for row, r in zip(rows[1:], gold,
                                                                                          strict=True)]))
    assert params(output_dir)["classifier.weight"].shape == (128, 3)
    # The mismatched set alone, as task mnli-mm with the saved model, is scored and written the same.
    alone_dir, alone = run(workspace, "mnli-mm", "mnli-mm", "--from-pretrained-params", output_dir, "--do-eval",
                           "--do-predict", "--predict-file", glue["mnli"]["dev_mismatched"].path)
    assert (alone_dir / "predictions_mm.tsv").read_text() == (output_dir / "predictions_mm.tsv").read_text()
    assert summary(alone)["accuracy_mm"] == pytest.approx(metrics["accuracy_mm"])
    assert "accuracy" not in summary(alone)


@pytest.mark.parametrize(("task", "labels"), [("qnli", ("entailment", "not_entailment")), ("wnli", ("0", "1"))])
def test_qnli_and_wnli_train_evaluate_and_predict(workspace, glue, task, labels):
    output_dir, records = run(workspace, task, task, *train_args(workspace, glue[task]["train"].path, steps=3),
                              "--do-eval", "--do-predict", "--predict-file", glue[task]["dev"].path)
    metrics = summary(records)
    assert {"accuracy", "auc"} <= set(metrics)
    rows, gold = table(output_dir / "predictions.tsv")[1:], glue[task]["dev"].rows
    assert [row[0] for row in rows] == [row.guid for row in gold] and {row[1] for row in rows} <= set(labels)
    assert metrics["accuracy"] == pytest.approx(np.mean([row[1] == r.label for row, r in zip(rows, gold,
                                                                                             strict=True)]))
    assert params(output_dir)["classifier.weight"].shape == (128, 2)


def test_scoring_a_test_file_is_one_line_naming_it(workspace, glue, capsys):
    test_file = glue["qnli"]["test"].path
    status, output = run_entry(["--task-name", "qnli", *map(str, common_argv(workspace, workspace / "scored_test")),
                                "--do-eval", "--predict-file", str(test_file), "--allow-random-weights"], capsys,
                               run_glue.main, "run_glue.py")
    assert status == 1
    one_line_error(output, "run_glue.py: ", f"{test_file}:1:", "test file", "no labels")


# ---------------------------------------------------------------------------------------------
# The exported STS-B model on every backend
# ---------------------------------------------------------------------------------------------

# Largest difference in a predicted score (STS-B's scale is 0 to 5) from the dygraph model's: fp32 is the same
# program (predictions.tsv rounds to 1e-6); bf16 rounds the activations to 8 bits of mantissa (measured 0.002 on
# this tiny model); int8 rounds weights and activations to 1/255 of their ranges (measured 0.004 dynamic, 0.018
# static, 0.010 OpenVINO).
FP32_TOLERANCE, BF16_TOLERANCE, INT8_TOLERANCE = 1e-5, 0.02, 0.05


def stsb_scores(output_dir):
    return np.array([float(row[1]) for row in table(output_dir / "predictions.tsv")[1:]])


@pytest.mark.parametrize(("backend", "precision", "quantization"), [
    ("paddle", "fp32", None), ("paddle", "bf16", None), ("onnxruntime", "fp32", None),
    ("onnxruntime", "int8", None), ("onnxruntime", "int8", "static"), ("openvino", "fp32", None),
    ("openvino", "bf16", None), ("openvino", "int8", None)])
def test_the_exported_stsb_model_predicts_the_same_scores_on_every_backend(workspace, glue, stsb_run, backend,
                                                                           precision, quantization):
    output_dir, _ = stsb_run
    export = workspace / "stsb_export"
    assert inference.read_export_record(str(export / "bert_paddle"))[0] == inference.classifier_head(1)
    reference = stsb_scores(output_dir)
    name = f"stsb_{backend}_{precision}_{quantization}"
    exported_dir, _ = run(workspace, "sts-b", name, "--do-predict", "--predict-file", glue["sts-b"]["train"].path,
                          "--inference-model-dir", export, "--inference-backend", backend, "--inference-precision",
                          precision, *(["--int8-quantization", quantization] if quantization else []))
    scores = stsb_scores(exported_dir)
    difference = np.abs(scores - reference).max()
    if precision == "fp32" or (precision == "bf16" and not inference.cpu_has_bf16()):
        assert difference <= FP32_TOLERANCE
    else:  # a reduced precision that ran: close, and not the fp32 program
        assert 0 < difference < (BF16_TOLERANCE if precision == "bf16" else INT8_TOLERANCE)


def test_a_regression_export_given_to_a_classification_task_is_one_line(workspace, glue, stsb_run, capsys):
    export = workspace / "stsb_export"
    status, output = run_entry(["--task-name", "qnli", *map(str, common_argv(workspace, workspace / "qnli_stsb")),
                                "--do-predict", "--predict-file", str(glue["qnli"]["dev"].path),
                                "--inference-model-dir", str(export)], capsys, run_glue.main, "run_glue.py")
    assert status == 1
    one_line_error(output, "run_glue.py: ", str(export), "a regression model (one output)",
                   "a classifier of 2 labels")


# ---------------------------------------------------------------------------------------------
# scripts/run_glue.sh and the presets
# ---------------------------------------------------------------------------------------------

SCRIPT = ROOT / "scripts" / "run_glue.sh"


def run_glue_sh(tmp_path, *args, **environment):
    """scripts/run_glue.sh with a `python` that records its arguments; (status, the arguments, stderr)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "python").write_text('#!/usr/bin/env bash\nprintf "%s\\n" "$@" > "$RECORDED_ARGS"\n')
    (bin_dir / "python").chmod(0o755)
    record = tmp_path / "args.txt"
    record.unlink(missing_ok=True)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "RECORDED_ARGS": str(record), **environment}
    result = subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60)
    return result.returncode, record.read_text().splitlines() if record.exists() else None, result.stderr


def flag_values(argv, flag):
    return [argv[index + 1] for index, arg in enumerate(argv) if arg == flag]


@pytest.mark.parametrize(("task", "mode", "split", "predict_files", "mismatched_files"), [
    ("mnli", "train eval", None, ["glue/dev_matched.tsv"], ["glue/dev_mismatched.tsv"]),
    ("mnli-mm", "eval", None, ["glue/dev_mismatched.tsv"], []),
    ("sts-b", "train eval prediction", None, ["glue/dev.tsv"], []),
    ("qnli", "eval", "dev", ["glue/dev.tsv"], []),
    ("wnli", "train", None, [], []),
    ("ax", "prediction", None, ["glue/diagnostic.tsv"], []),
    ("mnli", "prediction", "test", ["glue/test_matched.tsv"], ["glue/test_mismatched.tsv"]),
    ("mnli-mm", "prediction", "test", ["glue/test_mismatched.tsv"], []),
    ("qnli", "prediction", "test", ["glue/test.tsv"], []),
])
def test_run_glue_sh_reads_each_tasks_files(tmp_path, task, mode, split, predict_files, mismatched_files):
    status, argv, stderr = run_glue_sh(tmp_path, "ckpt", "glue/", "v.txt", "None", str(tmp_path / "out"), task, "1",
                                       "8", "1", "1e-4", "0.1", "1", "-1", "fp32", "1", mode,
                                       **({"PREDICT_SPLIT": split} if split else {}))
    assert status == 0, stderr
    assert flag_values(argv, "--task-name") == [task]
    assert flag_values(argv, "--predict-file") == predict_files
    assert flag_values(argv, "--mismatched-predict-file") == mismatched_files
    assert flag_values(argv, "--train-file") == (["glue/train.tsv"] if "train" in mode else [])


@pytest.mark.parametrize(("task", "mode", "split", "named"), [
    ("ax", "train", None, ("task_name ax", "mode must be prediction", "'train'")),
    ("ax", "eval,prediction", None, ("task_name ax", "'eval,prediction'")),
    ("qnli", "prediction eval", "test", ("PREDICT_SPLIT=test", "no labels", "'prediction eval'")),
    ("qnli", "prediction", "val", ("PREDICT_SPLIT", "dev test", "'val'")),
    ("squad", "eval", None, ("task_name", "mnli mnli-mm qnli sts-b wnli ax", "'squad'")),
])
def test_run_glue_sh_refuses_what_a_task_cannot_do(tmp_path, task, mode, split, named):
    status, argv, stderr = run_glue_sh(tmp_path, "ckpt", "glue", "v.txt", "None", str(tmp_path / "out"), task, "1",
                                       "", "", "", "", "", "", "fp32", "", mode,
                                       **({"PREDICT_SPLIT": split} if split else {}))
    assert status == 1 and argv is None
    assert_one_line(stderr, "run_glue.sh: ", *named)


@pytest.mark.parametrize("task", ["mnli", "qnli", "sts-b", "wnli"])
def test_the_presets_of_the_new_tasks_carry_berts_recipe(task):
    for system, gpus, batch in (("dgxa100-80g", 8, "4"), ("dgx1-32g", 1, "32")):
        for precision in ("fp16", "fp32" if system == "dgx1-32g" else "tf32"):
            result = subprocess.run(["bash", "-c", f"source scripts/configs/glue_config.sh && "
                                                   f"{task}_{system}_{gpus}gpu_{precision}"],
                                    cwd=ROOT, env={**os.environ, "BERT_PREP_WORKING_DIR": "/prep"},
                                    capture_output=True, text=True, timeout=60)
            assert result.returncode == 0, result.stderr
            args = result.stdout.split()
            assert args[1] == f"/prep/download/glue/{task.upper()}"
            assert args[5:] == [task, str(gpus), batch, "1", "2e-5", "0.1", "3", "-1.0", precision, "2", "train,eval"]

