"""--inference-backend openvino end to end on a tiny BERT (openvino_backend.py): fp32 logits against the Paddle
predictor's, bf16 within its rounding, the compile properties that reach OpenVINO, int8 quantized once by NNCF
and kept beside the export, the folder made again when the ONNX model changes, one-line errors for a broken or
mismatched ONNX model or IR, and --inference-backend auto's choice per CPU with its fallbacks."""

from __future__ import annotations

import json
import os

import numpy as np
import openvino
import paddle
import pytest

import run_glue
from bert_config import BertConfig
from conftest import ROOT
from exported_runs import (
    batch,
    glue,
    glue_cli_error,
    make_exported_workspace,
    paddle_logits,
    save_with_mask_renamed,
    squad,
)
from fine_tuning_runs import common_argv
from inference import inference, onnx_backend, openvino_backend
from modeling import BertForQuestionAnswering

# int8 against fp32 on the tiny random-weight model, as tests/test_inference_onnx.py's INT8_TOLERANCE: a few
# percent of the logits' largest magnitude (weights and activations each round to 1/255 of their range).
INT8_TOLERANCE = 0.05


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    return make_exported_workspace(tmp_path_factory.mktemp("openvino"))


def openvino_logits(folder, precision, prefix="bert_paddle", threads=1):
    return inference.openvino_predictor(str(folder), prefix, precision, threads)(*batch())


def copy_export(source, target, *names):
    target.mkdir(parents=True, exist_ok=True)
    for name in names:
        (target / name).write_bytes((source / name).read_bytes())


def export_qa(folder, seed, prefix="qa"):
    """A tiny random-weight SQuAD model of `seed`, exported to folder with its ONNX model (no record needed)."""
    paddle.seed(seed)
    model = BertForQuestionAnswering(BertConfig.from_json_file(str(ROOT / "bert_configs" / "bert-tiny-uncased.json")))
    inference.export_onnx_model(model, inference.export_inference_model(model, str(folder), prefix))


# ---------------------------------------------------------------------------------------------
# Logits per precision against the Paddle predictor
# ---------------------------------------------------------------------------------------------


def test_fp32_matches_the_paddle_predictor_within_1e4(workspace, tmp_path):
    (expected,), (logits,) = paddle_logits(workspace / "export"), openvino_logits(workspace / "export", "fp32")
    np.testing.assert_allclose(logits, expected, rtol=0, atol=1e-4)
    export_qa(tmp_path, seed=4)  # the span head: two outputs, in the exported order
    expected, outputs = paddle_logits(tmp_path, "qa"), openvino_logits(tmp_path, "fp32", "qa")
    assert len(outputs) == 2
    for output, reference in zip(outputs, expected, strict=True):
        np.testing.assert_allclose(output, reference, rtol=0, atol=1e-4)


def test_bf16_is_within_bf16_rounding_of_fp32_or_fp32_without_bf16_instructions(workspace):
    precision, _ = inference.resolve_precision("openvino", "cpu", "bf16")
    (fp32,), (bf16,) = openvino_logits(workspace / "export", "fp32"), openvino_logits(workspace / "export", precision)
    if not inference.cpu_has_bf16():  # the fallback: the same fp32 predictor
        np.testing.assert_array_equal(bf16, fp32)
        return
    difference = np.abs(bf16 - fp32).max()
    assert 0 < difference <= 0.03 * np.abs(fp32).max(), (difference, np.abs(fp32).max())


def test_the_compile_properties_reach_openvino(workspace, monkeypatch):
    """--threads, the LATENCY hint, the precision hint and the cache folder are what OpenVINO's compiled model
    reports back (read from the compiled model, not from our dict). bf16 is hinted on a CPU with bf16 instructions;
    on another (AVX2 alone) inference.resolve_precision runs fp32, and so does the hint."""
    compiled = recorded_compiles(monkeypatch)
    bf16_hint = openvino.Type.bf16 if inference.cpu_has_bf16() else openvino.Type.f32
    for precision, hint in (("fp32", openvino.Type.f32), ("bf16", bf16_hint), ("int8", openvino.Type.f32)):
        openvino_logits(workspace / "export", precision, threads=2)
        assert compiled[-1].get_property("INFERENCE_NUM_THREADS") == 2
        assert compiled[-1].get_property("PERFORMANCE_HINT") == "LATENCY"
        assert compiled[-1].get_property("INFERENCE_PRECISION_HINT") == hint
    assert os.listdir(workspace / "export" / "bert_paddle.openvino" / "cache")  # the compiled blobs


# ---------------------------------------------------------------------------------------------
# int8
# ---------------------------------------------------------------------------------------------


def predict_glue(workspace, name, *flags, model_dir=None):
    output_dir, _ = glue(workspace, name, "--do-predict", "--predict-file", workspace / "dev.tsv",
                         "--inference-model-dir", model_dir or workspace / "export", *flags)
    rows = [row.split("\t") for row in (output_dir / "predictions.tsv").read_text().splitlines()[1:]]
    return [row[1] for row in rows], np.array([float(row[2]) for row in rows])


def test_int8_is_within_quantization_error_and_quantized_once(workspace, capsys):
    """On MRPC's dev rows (real text, as the calibration inputs are: on random ids the activations leave the
    calibrated ranges), int8's probabilities within INT8_TOLERANCE of Paddle's fp32 ones; the IR is written by the
    first run and read by the next."""
    export = workspace / "int8_export"  # not quantized by another test yet
    copy_export(workspace / "export", export, *(f"bert_paddle{suffix}" for suffix in (
        ".json", ".pdiparams", ".onnx", ".calibration.npz", ".export.json")))
    labels, expected = predict_glue(workspace, "int8_paddle", "--inference-backend", "paddle", model_dir=export)
    capsys.readouterr()
    int8_labels, int8 = predict_glue(workspace, "int8_first", "--inference-backend", "openvino",
                                     "--inference-precision", "int8", model_dir=export)
    assert "int8 model written" in capsys.readouterr().out
    assert 0 < np.abs(int8 - expected).max() < INT8_TOLERANCE
    clear = np.abs(expected - 0.5) > INT8_TOLERANCE  # the label is decided by more than the int8 error
    assert [a for a, c in zip(int8_labels, clear, strict=True) if c] == [a for a, c in zip(labels, clear,
                                                                                           strict=True) if c]
    ir = export / "bert_paddle.openvino" / "int8.xml"
    assert ir.is_file() and (export / "bert_paddle.openvino" / "int8.bin").is_file()
    stamp = ir.stat().st_mtime_ns, ir.stat().st_ino
    _, again = predict_glue(workspace, "int8_second", "--inference-backend", "openvino", "--inference-precision",
                            "int8", model_dir=export)
    assert "int8 model written" not in capsys.readouterr().out
    assert (ir.stat().st_mtime_ns, ir.stat().st_ino) == stamp
    np.testing.assert_array_equal(again, int8)
    # the head's GEMM stays fp32: no FakeQuantize feeds the MatMul nearest the output
    model = openvino.Core().read_model(str(ir))
    heads = set(openvino_backend.head_gemms(model))
    assert heads
    for node in model.get_ops():
        if node.get_friendly_name() in heads:
            assert all(value.get_node().get_type_name() != "FakeQuantize" for value in node.input_values())


def test_int8_is_quantized_again_when_the_calibration_inputs_change(workspace, tmp_path, capsys):
    copy_export(workspace / "export", tmp_path, "bert_paddle.onnx", "bert_paddle.calibration.npz")
    first = openvino_logits(tmp_path, "int8")
    calibration = onnx_backend.load_calibration(str(tmp_path / "bert_paddle.calibration.npz"))
    onnx_backend.save_calibration(str(tmp_path / "bert_paddle.calibration.npz"),
                                  {name: array[:8] for name, array in calibration.items()})
    capsys.readouterr()
    second = openvino_logits(tmp_path, "int8")
    assert "int8 model written" in capsys.readouterr().out
    assert not np.array_equal(first[0], second[0])  # other activation ranges


def test_int8_is_quantized_again_when_the_quantization_settings_change(workspace, tmp_path, monkeypatch, capsys):
    """The record keeps how the int8 IR was made (INT8_SETTINGS and NNCF's version): an IR made with another
    SmoothQuant alpha, as by a release before 0.8, is made again, with one line saying so, not run as it is."""
    copy_export(workspace / "export", tmp_path, "bert_paddle.onnx", "bert_paddle.calibration.npz")
    monkeypatch.setitem(openvino_backend.INT8_SETTINGS, "smooth_quant_matmul_alpha", 0.95)
    first = openvino_logits(tmp_path, "int8")
    record = json.loads((tmp_path / "bert_paddle.openvino" / openvino_backend.RECORD).read_text(encoding="utf-8"))
    assert record["int8_settings"]["smooth_quant_matmul_alpha"] == 0.95
    monkeypatch.setitem(openvino_backend.INT8_SETTINGS, "smooth_quant_matmul_alpha", 0.8)
    capsys.readouterr()
    second = openvino_logits(tmp_path, "int8")
    out = capsys.readouterr().out
    assert "made with other quantization settings" in out and "int8 model written" in out
    assert not np.array_equal(first[0], second[0])  # another split of the ranges between weights and activations
    record = json.loads((tmp_path / "bert_paddle.openvino" / openvino_backend.RECORD).read_text(encoding="utf-8"))
    assert record["int8_settings"]["smooth_quant_matmul_alpha"] == 0.8


def test_squad_int8_predicts_every_question(workspace):
    squad_file = workspace / "squad.json"
    squad(workspace, "squad_trained", "--do-train", "--train-file", squad_file, "--from-pretrained-params",
          workspace / "pretrain" / "1000", "--max-steps", 2, "--export-dir", workspace / "squad_export",
          "--export-onnx")
    answers = {}
    for name, flags in (("paddle", ["--inference-backend", "paddle"]),
                        ("int8", ["--inference-backend", "openvino", "--inference-precision", "int8"])):
        output_dir, _ = squad(workspace, f"squad_{name}", "--do-predict", "--predict-file", squad_file,
                              "--inference-model-dir", workspace / "squad_export", *flags)
        answers[name] = json.loads((output_dir / "predictions.json").read_text())
    questions = {qa["id"] for qa in json.loads(squad_file.read_text())["data"][0]["paragraphs"][0]["qas"]}
    assert answers["int8"].keys() == answers["paddle"].keys() == questions


def test_glue_predicts_through_openvino_as_through_paddle(workspace):
    labels, probabilities = predict_glue(workspace, "glue_paddle", "--inference-backend", "paddle")
    openvino_labels, openvino_probabilities = predict_glue(workspace, "glue_openvino", "--inference-backend",
                                                           "openvino")
    assert openvino_labels == labels
    np.testing.assert_allclose(openvino_probabilities, probabilities, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# The folder beside the export
# ---------------------------------------------------------------------------------------------


def recorded_compiles(monkeypatch) -> list:
    """The compiled models of every openvino.Core.compile_model call from now on."""
    compiled = []
    real = openvino.Core.compile_model

    def recording(core, *args, **kwargs):
        compiled.append(real(core, *args, **kwargs))
        return compiled[-1]

    monkeypatch.setattr(openvino.Core, "compile_model", recording)
    return compiled


def test_the_cache_and_the_int8_model_are_made_again_when_the_onnx_model_changes(tmp_path, monkeypatch, capsys):
    """The second run imports the compiled model from the cache; after the ONNX model changed at the same path, the
    cache is not used, the int8 model is quantized again, and the new model runs in both precisions."""
    compiled = recorded_compiles(monkeypatch)
    first, second = tmp_path / "first", tmp_path / "second"
    export_qa(first, seed=4, prefix="bert_paddle")
    export_qa(second, seed=5, prefix="bert_paddle")
    served = tmp_path / "served"
    copy_export(first, served, "bert_paddle.onnx")
    # calibration rows drawn as batch()'s are, so that its activations stay in the calibrated ranges
    onnx_backend.save_calibration(str(served / "bert_paddle.calibration.npz"),
                                  dict(zip(inference.INPUT_NAMES, batch(), strict=True)))
    expected = {name: paddle_logits(folder)[0] for name, folder in (("first", first), ("second", second))}
    assert np.abs(expected["second"] - expected["first"]).max() > 1e-2  # the two models differ
    np.testing.assert_allclose(openvino_logits(served, "fp32")[0], expected["first"], atol=1e-4)
    np.testing.assert_allclose(openvino_logits(served, "fp32")[0], expected["first"], atol=1e-4)
    assert [model.get_property("LOADED_FROM_CACHE") for model in compiled] == [False, True]
    assert os.listdir(served / "bert_paddle.openvino" / "cache")
    openvino_logits(served, "int8")
    old_ir = (served / "bert_paddle.openvino" / "int8.bin").read_bytes()
    capsys.readouterr()
    copy_export(second, served, "bert_paddle.onnx")  # the same path, another model
    start, _ = openvino_logits(served, "fp32")
    assert "changed since" in capsys.readouterr().out
    assert compiled[-1].get_property("LOADED_FROM_CACHE") is False
    np.testing.assert_allclose(start, expected["second"], atol=1e-4)
    int8_start, _ = openvino_logits(served, "int8")
    assert "int8 model written" in capsys.readouterr().out
    assert (served / "bert_paddle.openvino" / "int8.bin").read_bytes() != old_ir
    assert np.abs(int8_start - expected["second"]).max() < np.abs(int8_start - expected["first"]).max()
    assert json.loads((served / "bert_paddle.openvino" / "record.json").read_text())["onnx"] == \
        inference.sha256_of_file(str(served / "bert_paddle.onnx"))


def test_a_folder_that_cannot_be_written_gets_no_cache(workspace, tmp_path, monkeypatch, capsys):
    copy_export(workspace / "export", tmp_path, "bert_paddle.onnx")
    monkeypatch.setattr(openvino_backend.os, "access", lambda path, mode: False)
    (logits,) = openvino_logits(tmp_path, "fp32")
    assert "not writable, so OpenVINO's compiled model is not cached there" in capsys.readouterr().out
    assert not (tmp_path / "bert_paddle.openvino").exists()
    np.testing.assert_allclose(logits, paddle_logits(workspace / "export")[0], atol=1e-4)


# ---------------------------------------------------------------------------------------------
# One-line errors
# ---------------------------------------------------------------------------------------------


def _cli_error(workspace, model_dir, *flags):
    return glue_cli_error(workspace, model_dir, "openvino", *flags, timeout=300)


def test_a_missing_broken_or_mismatched_model_is_a_one_line_error(workspace, tmp_path):
    missing = tmp_path / "missing"
    missing.mkdir()
    assert _cli_error(workspace, missing) == (f"run_glue.py: {missing / 'bert_paddle.onnx'}: no ONNX model (export it "
                                              "with --export-dir and --export-onnx)")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "bert_paddle.onnx").write_bytes(b"this is not a protobuf")
    assert _cli_error(workspace, broken).startswith(f"run_glue.py: {broken / 'bert_paddle.onnx'}: not a valid ONNX "
                                                    "model (")
    no_calibration = tmp_path / "no_calibration"
    copy_export(workspace / "export", no_calibration, "bert_paddle.onnx")
    assert _cli_error(workspace, no_calibration, "--inference-precision", "int8").startswith(
        f"run_glue.py: {no_calibration / 'bert_paddle.calibration.npz'}: no calibration inputs for "
        "--inference-backend openvino --inference-precision int8")


def test_a_changed_or_corrupt_int8_ir_is_a_one_line_error(workspace, tmp_path):
    folder = tmp_path / "export"
    copy_export(workspace / "export", folder, "bert_paddle.onnx", "bert_paddle.calibration.npz")
    openvino_logits(folder, "int8")
    weights = folder / "bert_paddle.openvino" / "int8.bin"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF
    weights.write_bytes(bytes(data))
    line = _cli_error(workspace, folder, "--inference-precision", "int8")
    assert line.startswith(f"run_glue.py: {weights}: not the int8 model that "
                           f"{folder / 'bert_paddle.openvino' / 'record.json'} describes"), line
    # an IR that its record vouches for but OpenVINO cannot read (written so by hand): named too
    xml = folder / "bert_paddle.openvino" / "int8.xml"
    xml.write_text("<net>")
    record = json.loads((folder / "bert_paddle.openvino" / "record.json").read_text())
    record["int8"] = {name: inference.sha256_of_file(str(folder / "bert_paddle.openvino" / name))
                      for name in openvino_backend.INT8_FILES}
    (folder / "bert_paddle.openvino" / "record.json").write_text(json.dumps(record))
    line = _cli_error(workspace, folder, "--inference-precision", "int8")
    assert line.startswith(f"run_glue.py: {xml}: not a model OpenVINO can compile ("), line


def test_an_onnx_model_with_other_inputs_is_refused(workspace, tmp_path):

    save_with_mask_renamed(workspace / "export" / "bert_paddle.onnx", tmp_path / "bert_paddle.onnx")
    with pytest.raises(ValueError, match=r"bert_paddle.onnx: the model's inputs .* are not "):
        openvino_logits(tmp_path, "fp32")


# ---------------------------------------------------------------------------------------------
# --inference-backend auto
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("flags, kind", [("fpu avx2 avx512f avx512_bf16 amx_tile amx_bf16 amx_int8", "amx"),
                                         ("fpu avx2 avx512f avx512_vnni avx512_bf16", "avx512_bf16"),
                                         ("fpu avx2 fma", "avx2"), ("fpu sse2", "avx2")])
def test_cpu_kind_reads_the_cpus_flags(tmp_path, flags, kind):
    (tmp_path / "cpuinfo").write_text(f"processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: {flags}\n\n")
    assert inference.cpu_kind(str(tmp_path / "cpuinfo")) == kind


def test_every_cpu_kind_has_a_backend_for_every_precision():
    for kind, row in inference.FASTEST_BACKENDS.items():
        assert set(row) == {"fp32", "bf16", "int8"}, kind
        for precision, backends in row.items():
            assert backends and set(backends) <= set(inference.INFERENCE_BACKENDS) - {"auto"}
            assert precision != "int8" or "paddle" not in backends  # Paddle has no CPU int8
    assert inference.auto_backends("cpu", "fp16", "avx2") == inference.FASTEST_BACKENDS["avx2"]["fp32"]
    assert inference.auto_backends("gpu:0", "bf16", "amx") == ("paddle",)


def _auto_args(workspace, model_dir, precision="fp32"):
    return run_glue.parse_args(["--task-name", "mrpc", *map(str, common_argv(workspace, workspace / "x")),
                                "--do-predict", "--predict-file", str(workspace / "dev.tsv"), "--inference-model-dir",
                                str(model_dir), "--inference-precision", precision])


def test_auto_runs_the_first_backend_of_the_cpus_row(workspace, monkeypatch, capsys):
    monkeypatch.setattr(inference, "FASTEST_BACKENDS", {"avx2": {"fp32": ("openvino", "paddle")}})
    monkeypatch.setattr(inference, "cpu_kind", lambda: "avx2")
    args = _auto_args(workspace, workspace / "export")
    assert args.inference_backend == "auto"  # the default
    (logits,) = inference.predictor_for(args, 1)(*batch())
    assert "--inference-backend auto: openvino, the fastest measured for fp32 on a CPU of kind avx2" in \
        capsys.readouterr().out
    np.testing.assert_allclose(logits, paddle_logits(workspace / "export")[0], atol=1e-4)


def test_auto_falls_back_when_openvino_fails_or_the_onnx_model_is_missing(workspace, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(inference, "FASTEST_BACKENDS", {"avx2": {"fp32": ("openvino", "paddle")}})
    monkeypatch.setattr(inference, "cpu_kind", lambda: "avx2")

    def crash(*args, **kwargs):  # what a plugin's failure to compile raises
        raise RuntimeError("Exception from src/inference/src/cpp/core.cpp:\nCPU plugin failed")

    monkeypatch.setattr(openvino_backend, "compiled_predictor", crash)
    (logits,) = inference.predictor_for(_auto_args(workspace, workspace / "export"), 1)(*batch())
    lines = [line for line in capsys.readouterr().out.splitlines() if "--inference-backend auto" in line]
    assert lines[-1].startswith("--inference-backend auto: openvino failed (") and lines[-1].endswith(
        "so paddle runs")
    np.testing.assert_allclose(logits, paddle_logits(workspace / "export")[0], rtol=0, atol=1e-6)
    copy_export(workspace / "export", tmp_path, "bert_paddle.json", "bert_paddle.pdiparams")  # no ONNX model
    inference.predictor_for(_auto_args(workspace, tmp_path), 1)
    assert f"{tmp_path / 'bert_paddle.onnx'} is missing" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------
# The export record
# ---------------------------------------------------------------------------------------------


def test_the_export_record_is_written_once_with_every_file_hashed_once(tmp_path, monkeypatch):
    paddle.seed(4)
    model = BertForQuestionAnswering(BertConfig.from_json_file(str(ROOT / "bert_configs" / "bert-tiny-uncased.json")))
    hashed, records = [], []
    real_hash, real_record = inference.sha256_of_file, inference.write_export_record
    monkeypatch.setattr(inference, "sha256_of_file", lambda path: hashed.append(os.path.basename(path))
                        or real_hash(path))
    monkeypatch.setattr(inference, "write_export_record", lambda *args: records.append(args) or real_record(*args))
    calibration = {name: np.ones((2, 8), np.int64) for name in inference.INPUT_NAMES}
    prefix = inference.export_folder(model, str(tmp_path / "export"), "qa", True, calibration)
    assert len(records) == 1
    assert sorted(hashed) == ["qa.calibration.npz", "qa.json", "qa.onnx", "qa.pdiparams"]
    assert inference.read_export_record(prefix) == (inference.SPAN_HEAD, model.config.max_position_embeddings)
