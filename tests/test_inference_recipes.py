"""scripts/run_squad.sh and run_glue.sh reach --export-onnx and both inference backends through EXPORT_ONNX,
INFERENCE_BACKEND, INFERENCE_PRECISION and INT8_QUANTIZATION (their positional arguments stay NVIDIA's): the exact
flags each passes, and the one-line refusals, through a recording `python` (recipe_fakes); and that the choices
they check (in scripts/common.sh, set_inference_flags) are the Python scripts' own."""

from __future__ import annotations

import shlex
import subprocess

import pytest

from conftest import ROOT
from inference import inference, onnx_backend
from recipe_fakes import make_fakes, script_args, value

RUN_SQUAD = ROOT / "scripts" / "run_squad.sh"
RUN_GLUE = ROOT / "scripts" / "run_glue.sh"
COMMON_SH = ROOT / "scripts" / "common.sh"


@pytest.fixture
def run(tmp_path):
    """run(script, args, **env) -> (CompletedProcess, the recorded argument lists of the Python script)."""
    fakes = make_fakes(tmp_path / "fakes")

    def run_script(script, args, **env):
        fakes.python_log.unlink(missing_ok=True)
        environment = fakes.env(BERT_PREP_WORKING_DIR=str(tmp_path / "data"), RESULTS_DIR=str(tmp_path / "results"),
                                **env)
        result = subprocess.run(["bash", str(script), *args], capture_output=True, text=True, cwd=tmp_path,
                                env=environment, timeout=60)
        name = "run_squad.py" if script == RUN_SQUAD else "run_glue.py"
        return result, script_args(fakes.python_calls(), name)

    return run_script


def squad_args(mode):
    return ["ckpt", *[""] * 10, mode]


def glue_args(tmp_path, mode):
    return ["ckpt", "", "", "", str(tmp_path / "out"), "", "1", "", "", "", "", "", "", "fp32", "", mode]


def test_squad_export_onnx_exports_the_fine_tuned_model(run, tmp_path):
    result, (flags,) = run(RUN_SQUAD, squad_args("train_eval"), EXPORT_ONNX="true")
    assert result.returncode == 0, result.stderr
    squad_out_dir = f"{tmp_path}/results/bert-large-uncased/squad"
    assert value(flags, "--export-dir") == f"{squad_out_dir}/export" and "--export-onnx" in flags
    _, (plain,) = run(RUN_SQUAD, squad_args("train_eval"))
    assert "--export-dir" not in plain and "--export-onnx" not in plain


@pytest.mark.parametrize("backend, precision", [("onnxruntime", "int8"), ("paddle", "bf16"), ("onnxruntime", None),
                                              ("openvino", "int8"), ("auto", "bf16")])
def test_squad_inference_backend_predicts_with_the_exported_model(run, backend, precision):
    env = {"INFERENCE_BACKEND": backend, **({"INFERENCE_PRECISION": precision} if precision else {})}
    result, (flags,) = run(RUN_SQUAD, squad_args("eval"), **env)
    assert result.returncode == 0, result.stderr
    assert value(flags, "--inference-model-dir") == "ckpt" and "--from-pretrained-params" not in flags
    assert value(flags, "--inference-backend") == backend
    assert value(flags, "--inference-precision") == (precision or "fp32")
    _, (plain,) = run(RUN_SQUAD, squad_args("eval"))
    assert value(plain, "--from-pretrained-params") == "ckpt" and "--inference-backend" not in plain


def test_glue_export_onnx_and_inference_backend(run, tmp_path):
    result, (flags,) = run(RUN_GLUE, glue_args(tmp_path, "train eval"), EXPORT_ONNX="true")
    assert result.returncode == 0, result.stderr
    assert value(flags, "--export-dir") == f"{tmp_path}/out/export" and "--export-onnx" in flags
    assert value(flags, "--from-pretrained-params") == "ckpt"
    result, (flags,) = run(RUN_GLUE, glue_args(tmp_path, "eval"), INFERENCE_BACKEND="onnxruntime",
                           INFERENCE_PRECISION="int8")
    assert result.returncode == 0, result.stderr
    assert value(flags, "--inference-model-dir") == "ckpt" and "--from-pretrained-params" not in flags
    assert (value(flags, "--inference-backend"), value(flags, "--inference-precision")) == ("onnxruntime", "int8")
    _, (plain,) = run(RUN_GLUE, glue_args(tmp_path, "eval"))
    assert not {"--inference-backend", "--inference-model-dir", "--export-onnx"} & set(plain)


def script_args_for(script, tmp_path, mode):
    return squad_args(mode) if script == RUN_SQUAD else glue_args(tmp_path, mode)


def inference_flags(flags, count):
    """The count arguments from --inference-model-dir on, which each script passes together."""
    start = flags.index("--inference-model-dir")
    return flags[start:start + count]


# dynamic is both tasks' default: named, it is passed all the same.
@pytest.mark.parametrize("script", [RUN_SQUAD, RUN_GLUE])
@pytest.mark.parametrize("quantization", ["static-per-channel", "dynamic"])
def test_int8_quantization_is_passed_for_an_onnxruntime_int8_prediction(run, tmp_path, script, quantization):
    env = {"INFERENCE_BACKEND": "onnxruntime", "INFERENCE_PRECISION": "int8"}
    result, (flags,) = run(script, script_args_for(script, tmp_path, "eval"), INT8_QUANTIZATION=quantization, **env)
    assert result.returncode == 0, result.stderr
    assert inference_flags(flags, 8) == ["--inference-model-dir", "ckpt", "--inference-backend", "onnxruntime",
                                         "--inference-precision", "int8", "--int8-quantization", quantization]
    assert flags.count("--int8-quantization") == 1
    # Unset, the flag is left out and the task's own default applies.
    result, (plain,) = run(script, script_args_for(script, tmp_path, "eval"), **env)
    assert result.returncode == 0, result.stderr
    assert inference_flags(plain, 6) == ["--inference-model-dir", "ckpt", "--inference-backend", "onnxruntime",
                                         "--inference-precision", "int8"]
    assert "--int8-quantization" not in plain


ONLY_INT8 = "INT8_QUANTIZATION is only used with INFERENCE_BACKEND=onnxruntime and INFERENCE_PRECISION=int8"


@pytest.mark.parametrize("script", [RUN_SQUAD, RUN_GLUE])
@pytest.mark.parametrize("mode, env, message", [
    ("eval", {"EXPORT_ONNX": "yes"}, "EXPORT_ONNX must be one of: true false; got 'yes'"),
    ("eval", {"EXPORT_ONNX": "true"},
     "EXPORT_ONNX exports the model that a mode with train fine-tunes; mode is 'eval'"),
    ("eval", {"INFERENCE_BACKEND": "tensorrt"},
     "INFERENCE_BACKEND must be one of: auto paddle onnxruntime openvino; got 'tensorrt'"),
    ("eval", {"INFERENCE_BACKEND": "paddle", "INFERENCE_PRECISION": "int4"},
     "INFERENCE_PRECISION must be one of: fp32 bf16 fp16 int8; got 'int4'"),
    ("eval", {"INFERENCE_PRECISION": "int8"}, "INFERENCE_PRECISION is only used with INFERENCE_BACKEND"),
    ("train", {"INFERENCE_BACKEND": "onnxruntime"}, "INFERENCE_BACKEND predicts with an exported model: mode must"),
    ("eval", {"INFERENCE_BACKEND": "onnxruntime", "INFERENCE_PRECISION": "int8", "INT8_QUANTIZATION": "per-channel"},
     "INT8_QUANTIZATION must be one of: dynamic static dynamic-per-channel static-per-channel "
     "dynamic-per-channel-outliers; got 'per-channel'"),
    ("eval", {"INFERENCE_BACKEND": "onnxruntime", "INT8_QUANTIZATION": "static"}, ONLY_INT8),  # fp32 by default
    ("eval", {"INFERENCE_BACKEND": "onnxruntime", "INFERENCE_PRECISION": "fp16", "INT8_QUANTIZATION": "dynamic"},
     ONLY_INT8),
    ("eval", {"INFERENCE_BACKEND": "paddle", "INFERENCE_PRECISION": "int8", "INT8_QUANTIZATION": "static"}, ONLY_INT8),
    ("eval", {"INT8_QUANTIZATION": "static"}, ONLY_INT8),
])
def test_inference_settings_are_checked_in_one_line(run, tmp_path, script, mode, env, message):
    result, calls = run(script, script_args_for(script, tmp_path, mode), **env)
    assert result.returncode == 1 and calls == []
    assert result.stderr.strip().startswith(f"{script.name}: {message}")
    assert len(result.stderr.strip().splitlines()) == 1


# The one check each script keeps for itself: which of its modes only predict. A training mode is named before an
# INT8_QUANTIZATION that does not fit.
@pytest.mark.parametrize("script, mode, allowed", [(RUN_SQUAD, "train_eval", "be eval or prediction"),
                                                   (RUN_GLUE, "eval,train", "not train")])
@pytest.mark.parametrize("env", [{}, {"INT8_QUANTIZATION": "static"}])
def test_inference_backend_refuses_a_mode_that_trains(run, tmp_path, script, mode, allowed, env):
    result, calls = run(script, script_args_for(script, tmp_path, mode), INFERENCE_BACKEND="paddle", **env)
    assert result.returncode == 1 and calls == []
    assert result.stderr.strip() == (f"{script.name}: INFERENCE_BACKEND predicts with an exported model: "
                                     f"mode must {allowed}, got '{mode}'")


def require_choice_lists(script, name):
    """The choices of every `require_choice <name> value choice...` command of script (continued lines joined)."""
    lines = [line.strip() for line in script.read_text().replace("\\\n", " ").splitlines()]
    calls = [shlex.split(line) for line in lines if line.startswith(f"require_choice {name} ")]
    return [tuple(call[3:]) for call in calls]


# The scripts spell out the choices that run_squad.py and run_glue.py take, so that a bad value is refused before
# anything starts: common.sh's set_inference_flags, which both call, holds each list once, and it must stay Python's.
@pytest.mark.parametrize("name, choices", [("INFERENCE_BACKEND", inference.INFERENCE_BACKENDS),
                                           ("INFERENCE_PRECISION", inference.INFERENCE_PRECISIONS),
                                           ("INT8_QUANTIZATION", onnx_backend.QUANTIZATIONS)])
def test_the_scripts_inference_choices_are_pythons(name, choices):
    assert require_choice_lists(COMMON_SH, name) == [choices]
    assert [require_choice_lists(script, name) for script in (RUN_SQUAD, RUN_GLUE)] == [[], []]
