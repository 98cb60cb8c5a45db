"""inference.py's Paddle Inference side: the predictor's settings per device and precision, the Config they build
(a recording stand-in for paddle.inference.Config), the options of both task scripts, and real fp32/bf16
predictors of a tiny exported model against the dygraph model, and the record each export keeps of its head and
position table. (Moved from tests/test_squad_run.py with the code
they test.)"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import numpy as np
import paddle
import pytest

import run_glue
import run_squad
from bert_config import BertConfig
from conftest import ROOT, require_shared
from fine_tuning_runs import TINY_CONFIG
from inference import inference
from modeling import BertForQuestionAnswering, BertForSequenceClassification
from test_cpu_kernels import exported_op_names
from training.amp import AmpPolicy


def test_predictor_settings_follow_the_device_and_precision():
    half, full = paddle.inference.PrecisionType.Half, paddle.inference.PrecisionType.Float32
    assert inference.predictor_settings("cpu", "fp32") == {"disable_gpu": {}, "enable_onednn": {}}
    assert inference.predictor_settings("cpu", "bf16") == {
        "disable_gpu": {}, "enable_onednn": {}, "enable_onednn_bfloat16": {}}
    assert inference.predictor_settings("gpu:1", "fp32") == {
        "enable_use_gpu": {"memory_pool_init_size_mb": 1024, "device_id": 1, "precision_mode": full}}
    assert inference.predictor_settings("gpu:0", "fp16") == {
        "enable_use_gpu": {"memory_pool_init_size_mb": 1024, "device_id": 0, "precision_mode": half}}
    # every call names a method, and every argument a parameter, of this build's Config
    for settings in (inference.predictor_settings("gpu:0", "fp16"), inference.predictor_settings("cpu", "bf16")):
        for method, arguments in settings.items():
            signature = getattr(paddle.inference.Config, method).__doc__.split("\n")[0]
            assert all(f"{name}:" in signature for name in arguments), (method, signature)


@pytest.mark.parametrize(("backend", "device", "asked", "has_bf16", "runs", "notice"), [
    ("paddle", "cpu", "fp32", True, "fp32", None),
    ("paddle", "cpu", "bf16", True, "bf16", None),
    ("paddle", "cpu", "bf16", False, "fp32", "no bf16 instructions"),
    ("paddle", "cpu", "fp16", True, "fp32", "fp16 needs a GPU"),
    ("paddle", "gpu:0", "fp16", False, "fp16", None),
    ("paddle", "gpu:0", "bf16", True, "fp16", "on a GPU the predictor runs fp16"),
    ("onnxruntime", "cpu", "int8", False, "int8", None),
    ("onnxruntime", "cpu", "bf16", True, "fp32", "no bf16 kernels"),
    ("onnxruntime", "cpu", "fp16", True, "fp32", "fp16 needs a GPU"),
    ("onnxruntime", "gpu:0", "fp16", True, "fp16", None),
    ("onnxruntime", "gpu:0", "int8", True, "fp16", "on a GPU the predictor runs fp16"),
    # OpenVINO runs on the CPU (inference.openvino_device maps a GPU to it before this)
    ("openvino", "cpu", "fp32", True, "fp32", None),
    ("openvino", "cpu", "bf16", True, "bf16", None),
    ("openvino", "cpu", "bf16", False, "fp32", "no bf16 instructions"),
    ("openvino", "cpu", "int8", False, "int8", None),
    ("openvino", "cpu", "fp16", True, "fp32", "fp16 needs a GPU"),
])
def test_resolve_precision_says_what_runs_instead(monkeypatch, backend, device, asked, has_bf16, runs, notice):
    monkeypatch.setattr(inference, "cpu_has_bf16", lambda: has_bf16)
    precision, message = inference.resolve_precision(backend, device, asked)
    assert precision == runs
    assert (message is None) == (notice is None)
    if notice:
        assert notice in message and "\n" not in message


def test_cpu_bf16_check_is_the_cpus_native_bf16():
    with open("/proc/cpuinfo", encoding="utf-8") as reader:
        flags = set(next(line for line in reader if line.startswith("flags")).split(":")[1].split())
    assert inference.cpu_has_bf16() == bool(flags & {"avx512_bf16", "amx_bf16"})


class RecordingConfig:
    """Stands in for paddle.inference.Config: records the calls made on it."""

    calls: list = []

    def __init__(self, program, params):
        RecordingConfig.calls = [("Config", (os.path.basename(program), os.path.basename(params)), {})]

    def __getattr__(self, method):
        return lambda *args, **kwargs: RecordingConfig.calls.append((method, args, kwargs))


def _parse(script, model_dir, precision, *extra):
    task = ["--task-name", "sst-2"] if script is run_glue else []
    return script.parse_args([*task, "--vocab-file", str(TINY_CONFIG), "--output-dir", "x", "--do-predict",
                              "--predict-file", str(TINY_CONFIG), "--inference-model-dir", str(model_dir),
                              "--inference-precision", precision, *extra])


CPU = [("disable_gpu", (), {}), ("enable_onednn", (), {})]


@pytest.mark.parametrize("script", [run_squad, run_glue])
@pytest.mark.parametrize(("device", "precision", "has_bf16", "expected", "notices"), [
    ("cpu", "fp16", True, CPU, 1),
    ("cpu", "bf16", True, [*CPU, ("enable_onednn_bfloat16", (), {})], 0),
    ("cpu", "bf16", False, CPU, 1),
    ("gpu:0", "fp16", True, [("enable_use_gpu", (), {"memory_pool_init_size_mb": 1024, "device_id": 0,
                                                     "precision_mode": paddle.inference.PrecisionType.Half})], 0),
])
def test_the_config_receives_the_settings_of_the_command_line(tmp_path, monkeypatch, capsys, script, device,
                                                              precision, has_bf16, expected, notices):
    for suffix in (".json", ".pdiparams"):
        (tmp_path / f"qa{suffix}").write_text("")
    monkeypatch.setattr(paddle.inference, "Config", RecordingConfig)
    monkeypatch.setattr(inference, "cpu_has_bf16", lambda: has_bf16)
    args = _parse(script, tmp_path, precision)
    inference.inference_config(str(tmp_path), "qa", 3, inference.settings_for(args, device))
    assert RecordingConfig.calls == [("Config", ("qa.json", "qa.pdiparams"), {}), *expected,
                                     ("disable_glog_info", (), {}), ("set_cpu_math_library_num_threads", (3,), {})]
    lines = [line for line in capsys.readouterr().out.splitlines() if "--inference-precision" in line]
    assert len(lines) == notices


@pytest.mark.parametrize("script", [run_squad, run_glue])
def test_gpu_fp16_reaches_enable_use_gpu_and_there_is_no_tensorrt_flag(tmp_path, monkeypatch, capsys, script):
    """Issue 25, item 2: --use-tensorrt sent fp16 only to enable_tensorrt_engine, which PIR programs ignore, and
    enable_use_gpu ran fp32. Now fp16 is enable_use_gpu's own precision_mode and the flag is gone."""
    for suffix in (".json", ".pdiparams"):
        (tmp_path / f"qa{suffix}").write_text("")
    monkeypatch.setattr(paddle.inference, "Config", RecordingConfig)
    inference.inference_config(str(tmp_path), "qa", 1, inference.settings_for(_parse(script, tmp_path, "fp16"),
                                                                               "gpu:0"))
    methods = [call[0] for call in RecordingConfig.calls]
    assert "enable_tensorrt_engine" not in methods
    assert ("enable_use_gpu", (), {"memory_pool_init_size_mb": 1024, "device_id": 0,
                                   "precision_mode": paddle.inference.PrecisionType.Half}) in RecordingConfig.calls
    with pytest.raises(SystemExit):
        _parse(script, tmp_path, "fp16", "--use-tensorrt")
    assert "unrecognized arguments: --use-tensorrt" in capsys.readouterr().err


@pytest.mark.parametrize("script", [run_squad, run_glue])
@pytest.mark.parametrize(("argv", "message"), [
    (["--export-dir", "y", "--inference-backend", "onnxruntime"], "only used with --inference-model-dir"),
    (["--export-dir", "y", "--inference-precision", "bf16"], "only used with --inference-model-dir"),
    (["--export-onnx", "--do-predict", "--predict-file", str(TINY_CONFIG), "--allow-random-weights"],
     "--export-onnx converts the model that --export-dir exports"),
    (["--inference-model-dir", "m", "--do-predict", "--predict-file", str(TINY_CONFIG), "--inference-precision",
      "int8", "--inference-backend", "paddle"], "int8 needs --inference-backend onnxruntime, openvino or auto"),
    (["--inference-model-dir", "m", "--do-predict", "--predict-file", str(TINY_CONFIG), "--inference-precision",
      "int8", "--inference-backend", "openvino", "--int8-quantization", "static"],
     "--int8-quantization is only used with --inference-precision int8 on --inference-backend onnxruntime"),
    (["--inference-model-dir", "m", "--do-train", "--train-file", str(TINY_CONFIG)], "cannot train"),
    (["--inference-model-dir", "m", "--export-dir", "y"], "cannot train, export"),
    (["--inference-model-dir", "m"], "nothing to do"),
])
def test_inference_flags_are_checked(capsys, script, argv, message):
    task = ["--task-name", "sst-2"] if script is run_glue else []
    with pytest.raises(SystemExit):
        script.parse_args([*task, "--vocab-file", str(TINY_CONFIG), "--output-dir", "x", *argv])
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("script", [run_squad, run_glue])
def test_int8_quantization_defaults_to_the_tasks_choice_and_needs_int8(capsys, script):
    task = ["--task-name", "sst-2"] if script is run_glue else []
    base = [*task, "--vocab-file", str(TINY_CONFIG), "--output-dir", "x", "--do-predict", "--predict-file",
            str(TINY_CONFIG), "--inference-model-dir", "m", "--inference-backend", "onnxruntime"]
    assert script.parse_args([*base, "--inference-precision", "int8"]).int8_quantization == script.INT8_QUANTIZATION
    other = next(choice for choice in ("dynamic", "static") if choice != script.INT8_QUANTIZATION)
    assert script.parse_args([*base, "--inference-precision", "int8", "--int8-quantization",
                              other]).int8_quantization == other
    # without int8 it is refused, even when it names the task's own default (which would otherwise go unused)
    for given in (other, script.INT8_QUANTIZATION):
        with pytest.raises(SystemExit):
            script.parse_args([*base, "--int8-quantization", given])
        assert "--int8-quantization is only used with --inference-precision int8" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# Real predictors of a tiny exported model
# ---------------------------------------------------------------------------------------------


def _tiny_batch(batch: int, seq_length: int, vocab_size: int):
    rng = np.random.default_rng(0)
    input_ids = rng.integers(5, vocab_size, (batch, seq_length), dtype=np.int64)
    token_type_ids = np.zeros_like(input_ids)
    token_type_ids[:, seq_length // 2:] = 1
    attention_mask = np.ones_like(input_ids)
    attention_mask[0, seq_length - 5:] = 0  # one padded row
    return input_ids, token_type_ids, attention_mask


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A tiny random-weight classifier, exported, with its dygraph logits on a batch."""
    folder = tmp_path_factory.mktemp("exported")
    config = BertConfig.from_json_file(str(ROOT / "bert_configs" / "bert-tiny-uncased.json"))
    paddle.seed(3)
    model = BertForSequenceClassification(config, 3)
    batch = _tiny_batch(16, 64, config.vocab_size)
    (dygraph,) = inference.dygraph_predictor(model, AmpPolicy())(*batch)
    inference.export_inference_model(model, str(folder), "cls")
    return folder, batch, dygraph


def _predict(exported, precision):
    folder, batch, _ = exported
    precision, _ = inference.resolve_precision("paddle", "cpu", precision)
    settings = inference.predictor_settings("cpu", precision)
    (logits,) = inference.inference_predictor(str(folder), "cls", 1, settings)(*batch)
    return logits


def test_fp32_predictor_matches_the_dygraph_model(exported):
    np.testing.assert_allclose(_predict(exported, "fp32"), exported[2], rtol=1e-4, atol=1e-5)


def test_the_exported_program_has_no_dropout_ops(exported):
    """The model has dropout (a copy of the input in eval mode, which also splits the bf16 predictor's oneDNN ops
    apart); its exported program, which only ever runs in eval mode, has none (that it still predicts as the model
    is test_fp32_predictor_matches_the_dygraph_model's)."""
    config = BertConfig.from_json_file(str(ROOT / "bert_configs" / "bert-tiny-uncased.json"))
    assert config.hidden_dropout_prob > 0 and config.attention_probs_dropout_prob > 0
    ops = exported_op_names(exported[0] / "cls")
    assert {"matmul", "layer_norm", "softmax"} <= ops and "dropout" not in ops, ops


def test_bf16_predictor_is_within_bf16_rounding_of_fp32(exported):
    fp32, bf16 = _predict(exported, "fp32"), _predict(exported, "bf16")
    if not inference.cpu_has_bf16():  # the fallback: the same fp32 predictor
        np.testing.assert_array_equal(bf16, fp32)
        return
    difference = np.abs(bf16 - fp32).max()
    # bf16 keeps 8 significant bits (relative rounding 2^-8 = 0.4%); through two layers and the head the
    # logits may drift a few times that, but no more
    assert 0 < difference <= 0.03 * np.abs(fp32).max(), (difference, np.abs(fp32).max())
    # the class wins wherever fp32's margin between the best two classes is beyond that drift
    top_two = np.sort(fp32, axis=1)[:, -2:]
    clear = top_two[:, 1] - top_two[:, 0] > 2 * difference
    assert (bf16.argmax(axis=1)[clear] == fp32.argmax(axis=1)[clear]).all()


def test_squad_predictor_returns_start_and_end_logits(tmp_path):
    config = BertConfig.from_json_file(str(ROOT / "bert_configs" / "bert-tiny-uncased.json"))
    paddle.seed(4)
    model = BertForQuestionAnswering(config)
    batch = _tiny_batch(2, 32, config.vocab_size)
    expected = inference.dygraph_predictor(model, AmpPolicy())(*batch)
    inference.export_inference_model(model, str(tmp_path), "qa")
    outputs = inference.inference_predictor(str(tmp_path), "qa", 1)(*batch)
    assert len(outputs) == 2
    for output, reference in zip(outputs, expected, strict=True):
        np.testing.assert_allclose(output, reference, rtol=1e-4, atol=1e-5)


def test_the_export_records_its_head_and_position_table_and_replaces_an_earlier_record(tmp_path):
    values = {**BertConfig.from_json_file(str(TINY_CONFIG)).to_dict(), "max_position_embeddings": 96}
    config = BertConfig.from_dict(values)
    record = tmp_path / "model.export.json"
    inference.export_inference_model(BertForSequenceClassification(config, 5), str(tmp_path), "model")

    def checksums() -> dict[str, str]:  # of the program and its weights, which the record names
        return {name: hashlib.sha256((tmp_path / name).read_bytes()).hexdigest()
                for name in ("model.json", "model.pdiparams")}

    assert json.loads(record.read_text()) == {"head": "classifier", "max_position_embeddings": 96, "num_labels": 5,
                                              "files": checksums()}
    assert inference.read_export_record(str(tmp_path / "model")) == (inference.classifier_head(5), 96)
    inference.export_inference_model(BertForQuestionAnswering(config), str(tmp_path), "model")  # over it
    assert json.loads(record.read_text()) == {"head": "span", "max_position_embeddings": 96, "files": checksums()}
    assert inference.read_export_record(str(tmp_path / "model")) == (inference.SPAN_HEAD, 96)
    assert inference.check_exported_model(str(tmp_path), "model", inference.SPAN_HEAD, 96) is None
    assert sorted(path.name for path in tmp_path.iterdir()) == ["model.export.json", "model.json", "model.pdiparams"]


def test_a_failed_export_leaves_no_record_of_the_earlier_model(tmp_path, monkeypatch):
    config = BertConfig.from_json_file(str(TINY_CONFIG))
    inference.export_inference_model(BertForQuestionAnswering(config), str(tmp_path), "m")
    assert inference.read_export_record(str(tmp_path / "m")) == (inference.SPAN_HEAD, config.max_position_embeddings)

    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(paddle.jit, "save", fail)
    with pytest.raises(OSError):
        inference.export_inference_model(BertForSequenceClassification(config, 2), str(tmp_path), "m")
    assert inference.read_export_record(str(tmp_path / "m")) is None


# ---------------------------------------------------------------------------------------------
# benchmarks/inference_accuracy.py's own logic
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def accuracy_script(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import importlib

    return importlib.import_module("inference_accuracy")


def test_answers_unchanged_counts_identical_texts(accuracy_script):
    reference = {"a": "Denver Broncos", "b": "1966", "c": "", "d": "Santa Clara"}
    predicted = {"a": "Denver Broncos", "b": "in 1966", "c": "", "d": "santa clara"}
    assert accuracy_script.answers_unchanged(reference, predicted) == 0.5  # a and c; case counts as a change
    with pytest.raises(ValueError, match="other questions"):
        accuracy_script.answers_unchanged(reference, {"a": "Denver Broncos"})


def test_split_articles_keeps_training_and_prediction_apart(accuracy_script):
    dataset = {"version": "1.1", "data": [{"title": str(index)} for index in range(5)]}
    train, predict = accuracy_script.split_articles(dataset, 2, 2)
    assert [a["title"] for a in train["data"]] == ["0", "1"] and [a["title"] for a in predict["data"]] == ["3", "4"]
    assert train["version"] == predict["version"] == "1.1"
    with pytest.raises(ValueError, match="the file has 5"):
        accuracy_script.split_articles(dataset, 3, 3)


def test_a_fine_tuning_is_reused_only_with_the_same_command_data_and_checkpoint(accuracy_script, tmp_path):
    folder = tmp_path / "squad"
    folder.mkdir()
    train_file = tmp_path / "train.json"
    train_file.write_text('{"data": ["article 1"]}')
    runs = []

    def fine_tune(command):
        runs.append(command)
        (folder / "export").mkdir(exist_ok=True)
        (folder / "export" / "bert_paddle.onnx").write_bytes(b"onnx")

    command = ["--do-train", "--epochs", "2"]
    record = accuracy_script.fine_tuning_record(command, train_file, tmp_path / "model")
    accuracy_script.fine_tune_once(folder, record, fine_tune)
    accuracy_script.fine_tune_once(folder, record, fine_tune)
    assert runs == [command]  # the second call only scores the export
    other_epochs = accuracy_script.fine_tuning_record(["--do-train", "--epochs", "3"], train_file, tmp_path / "model")
    other_model = accuracy_script.fine_tuning_record(command, train_file, tmp_path / "another model")
    train_file.write_text('{"data": ["article 1", "article 2"]}')  # e.g. --squad-train-articles 2
    other_data = accuracy_script.fine_tuning_record(command, train_file, tmp_path / "model")
    for changed in (other_epochs, other_model, other_data):
        assert changed != record
        accuracy_script.fine_tune_once(folder, changed, fine_tune)
        assert json.loads((folder / "fine_tuning.json").read_text()) == changed
    assert len(runs) == 4

    def cut_short(command):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        accuracy_script.fine_tune_once(folder, record, cut_short)
    assert not (folder / "fine_tuning.json").exists()  # the export may be half-written: never reused
    accuracy_script.fine_tune_once(folder, other_data, fine_tune)
    assert len(runs) == 5


def test_predictor_names_become_the_inference_flags_and_columns(accuracy_script):
    assert accuracy_script.predictor_flags("onnxruntime:int8:static") == [
        "--inference-backend", "onnxruntime", "--inference-precision", "int8", "--int8-quantization", "static"]
    assert accuracy_script.predictor_flags("paddle:bf16") == ["--inference-backend", "paddle",
                                                              "--inference-precision", "bf16"]
    assert accuracy_script.columns("paddle:bf16") == ["paddle", "bf16", "-"]
    rows = accuracy_script.glue_rows("MRPC", {"paddle:fp32": 76.23, "onnxruntime:int8:dynamic": 75.74})
    assert rows == ["| MRPC | paddle | fp32 | - | 76.23 | +0.00 |",
                    "| MRPC | onnxruntime | int8 | dynamic | 75.74 | -0.49 |"]
    # every default predictor parses under the task scripts' options
    for predictor in accuracy_script.PREDICTORS:
        args = run_glue.parse_args(["--task-name", "mrpc", "--vocab-file", str(TINY_CONFIG), "--output-dir", "x",
                                    "--do-eval", "--predict-file", str(TINY_CONFIG), "--inference-model-dir", "m",
                                    *accuracy_script.predictor_flags(predictor)])
        assert f"{args.inference_backend}:{args.inference_precision}" in predictor


def test_a_corrupt_fine_tuning_record_is_one_line_naming_it(accuracy_script, tmp_path):
    folder = tmp_path / "mrpc"
    (folder / "export").mkdir(parents=True)
    (folder / "export" / "bert_paddle.onnx").write_bytes(b"onnx")
    (folder / "fine_tuning.json").write_text('{"command": ["--do-tr')  # cut short by hand, not by us
    train_file = tmp_path / "train.tsv"
    train_file.write_text("row\n")
    record = accuracy_script.fine_tuning_record(["--do-train"], train_file, tmp_path / "model")
    with pytest.raises(ValueError, match=r"fine_tuning\.json: not a fine-tuning record"):
        accuracy_script.fine_tune_once(folder, record, lambda command: pytest.fail("fine-tuned over the export"))
    assert (folder / "fine_tuning.json").read_text() == '{"command": ["--do-tr'  # left for the user to look at


def test_inference_accuracy_reports_its_errors_in_one_line(tmp_path):
    model_dir = require_shared("models", "all-MiniLM-L6-v2")
    folder = tmp_path / "work" / "mrpc"
    (folder / "export").mkdir(parents=True)
    (folder / "export" / "bert_paddle.onnx").write_bytes(b"onnx")
    (folder / "fine_tuning.json").write_text("{")
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "inference_accuracy.py"), "--work-dir",
                             str(tmp_path / "work"), "--model-dir", str(model_dir), "--tasks", "mrpc"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith(
        f"inference_accuracy.py: {folder / 'fine_tuning.json'}: not a fine-tuning record")
