"""amp.py: the AMP flags and policy, the float16 loss scaler, and the GPU-only AMP conditions reproduced on the CPU.

On a CPU paddle.amp.decorate returns before it changes anything, so these tests run the same steps it runs
on a GPU (paddle/amp/auto_cast.py, Paddle 3.3): amp_initialize casts the parameters to float16 (LayerNorm
stays fp32), and save_dtype registers a StateDictHook on every sublayer.
"""

from __future__ import annotations

import argparse

import numpy as np
import paddle
import pytest
from paddle.amp.auto_cast import StateDictHook, amp_initialize
from paddle.base import core

import run_pretraining
from checkpoints.weights import load_state
from conftest import gpu_with_bf16
from messages import assert_one_line
from modeling import BertConfig, BertForQuestionAnswering
from pretraining_runs import pretraining_argv, train
from training import amp
from utils import paddle_private

CONFIG = BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64)


def pure_fp16(model: paddle.nn.Layer) -> paddle.nn.Layer:
    """What paddle.amp.decorate(model, level="O2", dtype="float16", save_dtype="float32") does to a model on a GPU."""
    amp_initialize(models=[model], dtype="float16", excluded_layers=None)
    for layer in model.sublayers(include_self=True):
        layer.register_state_dict_hook(StateDictHook("float32"))
    return model


def test_pure_fp16_weights_load_in_the_parameters_own_dtype():
    paddle.seed(0)
    source = {name: value.numpy() for name, value in BertForQuestionAnswering(CONFIG).state_dict().items()}
    model = pure_fp16(BertForQuestionAnswering(CONFIG, use_cpu_kernels=False))
    parameters = dict(model.named_parameters())
    word_embeddings = "bert.embeddings.word_embeddings.weight"
    # The GPU condition: the state dict says float32 while the parameter is float16.
    assert model.state_dict()[word_embeddings].dtype == paddle.float32
    assert parameters[word_embeddings].dtype == paddle.float16
    assert parameters["bert.embeddings.layer_norm.weight"].dtype == paddle.float32

    assert load_state(model, source, "source") == ([], [])
    for name, parameter in parameters.items():
        expected = source[name].astype(np.float16) if parameter.dtype == paddle.float16 else source[name]
        np.testing.assert_array_equal(parameter.numpy(), expected, err_msg=name)

    # The old way, dtypes from model.state_dict(): float32 values into float16 parameters.
    reported = model.state_dict()
    with pytest.raises(AssertionError, match="dtype not match"):
        for name, parameter in parameters.items():
            parameter.set_value(paddle.to_tensor(source[name]).astype(reported[name].dtype))


def amp_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    amp.add_amp_arguments(parser)
    args = parser.parse_args(list(argv))
    amp.check_amp_arguments(parser, args)
    return args


def gpu_loss_scaler(*argv: str) -> amp.LossScaler:
    return amp.create_loss_scaler(amp.amp_policy(amp_args(*argv), device="gpu:0"))


@pytest.mark.parametrize("argv, message", [
    (["--use-pure-fp16"], "--use-pure-fp16 needs --amp"),
    (["--amp", "--scale-loss", "0"], "--scale-loss must be positive"),
    (["--amp", "--min-loss-scale", "0"], "--min-loss-scale must be positive and at most --scale-loss"),
    (["--amp", "--scale-loss", "8", "--min-loss-scale", "16"], "--min-loss-scale must be positive and at most"),
])
def test_invalid_amp_flags_name_the_flag(argv, message, capsys):
    with pytest.raises(SystemExit):
        amp_args(*argv)
    assert message in capsys.readouterr().err


def test_amp_on_cpu_prints_one_line_and_runs_fp32(capsys):
    policy = amp.amp_policy(amp_args("--amp", "--use-pure-fp16", "--scale-loss", "1048576"), device="cpu")
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1 and "AMP needs a GPU" in lines[0]
    assert policy == amp.AmpPolicy() and not policy.enabled
    assert amp.create_loss_scaler(policy) is None
    with amp.amp_autocast(policy):
        assert paddle.ones([2]).dtype == paddle.float32


def test_amp_policy_on_gpu_maps_flags_to_level_dtype_and_scaling(capsys, monkeypatch):
    asked = gpu_with_bf16(monkeypatch, supported=True)
    o1 = amp.amp_policy(amp_args("--amp", "--scale-loss", "1048576", "--use-dynamic-loss-scaling"), device="gpu:0")
    assert (o1.enabled, o1.level, o1.dtype, o1.master_weights) == (True, "O1", "float16", False)
    scaler = amp.create_loss_scaler(o1)
    assert scaler.scale_value == 2.0**20 and scaler.dynamic
    o2 = amp.amp_policy(amp_args("--amp", "--use-pure-fp16"), device="gpu:0")
    assert (o2.level, o2.master_weights) == ("O2", True)
    static = gpu_loss_scaler("--amp", "--no-use-dynamic-loss-scaling", "--scale-loss", "128")
    assert (static.scale_value, static.dynamic) == (128.0, False)
    bf16 = amp.amp_policy(amp_args("--amp", "--amp-dtype", "bfloat16", "--use-dynamic-loss-scaling"), device="gpu:0")
    assert bf16.dtype == "bfloat16" and amp.create_loss_scaler(bf16) is None  # bf16 needs no loss scaling
    assert asked == ["gpu:0"]
    assert capsys.readouterr().out == ""


def test_bf16_amp_on_a_gpu_without_bf16_is_refused_in_one_line(monkeypatch):
    asked = gpu_with_bf16(monkeypatch, supported=False)
    with pytest.raises(SystemExit) as refused:
        amp.amp_policy(amp_args("--amp", "--amp-dtype", "bfloat16"), device="gpu:1")
    assert_one_line(str(refused.value), "--amp-dtype bfloat16: ", "gpu:1", "A100")
    assert asked == ["gpu:1"]


def _scaled_backward(scaler: amp.LossScaler, values: np.ndarray) -> paddle.Tensor:
    weight = paddle.create_parameter([values.size], "float32")
    weight.set_value(np.ones(values.size, np.float32))
    scaler.scale((weight * paddle.to_tensor(values)).sum()).backward()
    return weight


def test_loss_scaler_unscales_exactly_and_detects_overflow():
    scaler = amp.LossScaler(2.0**20, dynamic=True)
    values = np.array([1e-6, -3.0, 0.25], np.float32)  # d(sum(w * values))/dw = values
    weight = _scaled_backward(scaler, values)
    np.testing.assert_allclose(weight.grad.numpy(), values * 2.0**20, rtol=1e-7)
    assert scaler.unscale_and_check([weight]) is False
    np.testing.assert_allclose(weight.grad.numpy(), values, rtol=1e-7)
    overflowing = _scaled_backward(scaler, np.array([1.0, np.inf, 0.0], np.float32))
    assert scaler.unscale_and_check([overflowing]) is True


def test_dynamic_loss_scale_grows_after_2000_good_steps_and_halves_on_overflow():
    scaler = amp.LossScaler(2.0**20, dynamic=True)
    expected, good = 2.0**20, 0
    rng = np.random.default_rng(0)
    overflow_steps = set(rng.choice(6000, size=5, replace=False).tolist())
    for step in range(6000):
        found_inf = step in overflow_steps
        scaler.update(found_inf)
        # The rule of Micikevicius et al. 2018 with NVIDIA's constants: x0.5 on overflow, x2 per 2000 good steps.
        if found_inf:
            expected, good = expected * 0.5, 0
        else:
            good += 1
            if good == 2000:
                expected, good = expected * 2, 0
        assert scaler.scale_value == expected
    static = amp.LossScaler(128.0, dynamic=False)
    for found_inf in (True, False, True):
        static.update(found_inf)
    assert static.scale_value == 128.0


def test_loss_scaler_state_round_trip():
    scaler = amp.LossScaler(2.0**20, dynamic=True)
    for _ in range(1999):
        scaler.update(False)
    restored = amp.LossScaler(1.0, dynamic=True)
    restored.load_state_dict(scaler.state_dict())
    scaler.update(False)
    restored.update(False)
    assert restored.scale_value == scaler.scale_value == 2.0**21


def test_amp_alone_scales_float16_losses_dynamically_from_2_to_the_20():
    # The values NVIDIA's recipes pass: --amp --use-dynamic-loss-scaling --scale-loss=1048576.
    for argv in (["--amp"], ["--amp", "--use-dynamic-loss-scaling", "--scale-loss", "1048576"]):
        scaler = gpu_loss_scaler(*argv)
        assert (scaler.scale_value, scaler.dynamic, scaler.min_scale) == (2.0**20, True, 1.0)
    fixed = gpu_loss_scaler("--amp", "--no-use-dynamic-loss-scaling")
    assert (fixed.scale_value, fixed.dynamic) == (2.0**20, False)
    fixed.update(found_inf=True)
    assert fixed.scale_value == 2.0**20


def test_a_collapsing_loss_scale_stops_at_min_loss_scale():
    scaler = gpu_loss_scaler("--amp", "--scale-loss", "64", "--min-loss-scale", "4")
    for expected in (32.0, 16.0, 8.0, 4.0):  # overflow after overflow: halved down to the floor, not past it
        scaler.update(found_inf=True)
        assert scaler.scale_value == expected
    with pytest.raises(ValueError, match=r"below --min-loss-scale 4 \(from 4\)"):
        scaler.update(found_inf=True)
    assert scaler.scale_value == 4.0


def test_pure_fp16_keeps_fp32_master_gradients(monkeypatch):
    calls = []
    monkeypatch.setattr(paddle.amp, "decorate", lambda **kwargs: calls.append(kwargs) or (kwargs["models"], None))
    amp.amp_decorate(paddle.nn.Linear(2, 2), None, amp.amp_policy(amp_args("--amp", "--use-pure-fp16"), device="gpu:0"))
    assert calls[0]["level"] == "O2" and calls[0]["master_weight"] and calls[0]["master_grad"]


def test_master_gradients_clip_by_the_fp32_norm_where_float16_overflows():
    values = np.full(300, 300.0, np.float16)  # ||g||^2 = 2.7e7, beyond float16's 65504
    with np.errstate(over="ignore"):
        assert np.isinf(np.sum(np.square(values), dtype=np.float16))  # the clip's norm from float16 gradients
    param = paddle.create_parameter([300], "float16")
    (param.astype("float32") * paddle.to_tensor(values.astype(np.float32))).sum().backward()
    assert param.grad.dtype == paddle.float16
    # What decorate(master_grad=True) runs at the end of every backward pass (auto_cast.py, master_grad_hook).
    core.eager.set_master_grads([param])
    assert param.grad.dtype == paddle.float32
    [(_, clipped)] = paddle.nn.ClipGradByGlobalNorm(clip_norm=1.0)([(param, param.grad)])
    expected = values.astype(np.float64) / np.linalg.norm(values.astype(np.float64))
    np.testing.assert_allclose(clipped.numpy(), expected, rtol=1e-6)


@pytest.fixture
def restore_tf32_switches():
    before = paddle_private.tf32_switches()
    yield
    core.set_cublas_switch(before[0])
    core.set_cudnn_switch(before[1])


@pytest.mark.usefixtures("restore_tf32_switches")
def test_fp32_turns_tf32_off_and_tf32_on():
    for precision, switches in (("tf32", (True, True)), ("fp32", (False, False)), ("tf32", (True, True))):
        amp.set_float32_matmul_precision(precision)
        assert paddle_private.tf32_switches() == switches, precision
    with pytest.raises(ValueError, match="float32 precision must be one of"):
        amp.set_float32_matmul_precision("fp16")


@pytest.mark.parametrize("argv", [["--scale-loss", "8"], ["--amp-dtype", "bfloat16"], ["--min-loss-scale", "2"],
                                  ["--no-use-dynamic-loss-scaling"]])
def test_float16_flags_without_amp_are_refused_not_ignored(argv, capsys):
    with pytest.raises(SystemExit):
        amp_args(*argv)
    assert f"{argv[0].replace('--no-', '--')} needs --amp" in capsys.readouterr().err


def test_loss_scaling_flags_with_bfloat16_are_refused(capsys):
    with pytest.raises(SystemExit):
        amp_args("--amp", "--amp-dtype", "bfloat16", "--scale-loss", "8")
    assert "--scale-loss applies to float16 AMP; bfloat16 needs no loss scaling" in capsys.readouterr().err


def test_float32_precision_sets_the_tf32_switches_on_a_gpu_only(monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(amp, "set_float32_matmul_precision", calls.append)
    amp.amp_policy(amp_args("--float32-precision", "fp32"), device="gpu:0")
    amp.amp_policy(amp_args("--float32-precision", "tf32"), device="gpu:1")
    amp.amp_policy(amp_args(), device="gpu:0")
    assert calls == ["fp32", "tf32"]
    capsys.readouterr()
    amp.amp_policy(amp_args("--float32-precision", "fp32"), device="cpu")
    assert capsys.readouterr().out == ""  # a CPU's float32 matmuls are fp32 already
    amp.amp_policy(amp_args("--float32-precision", "tf32"), device="cpu")
    assert calls == ["fp32", "tf32"]
    assert "--float32-precision tf32 is for GPUs; the device is cpu" in capsys.readouterr().out


@pytest.mark.parametrize("saved_with, resumed_with", [(["--use-pure-fp16"], []), ([], ["--use-pure-fp16"]),
                                                      (["--use-pure-fp16"], ["--use-pure-fp16"])])
def test_a_checkpoint_resumes_only_at_its_own_amp_level(tmp_path, monkeypatch, saved_with, resumed_with):
    """O2's optimizer state holds fp32 master weights and their moments, O1's neither: across the change
    Paddle's set_state_dict would stop in _add_accumulator's assert; the run names the mismatch instead."""
    monkeypatch.setattr(run_pretraining, "amp_policy", lambda args: amp.amp_policy(args, device="gpu:0"))
    assert train(pretraining_argv(tmp_path, "--max-steps", "2", "--steps-this-run", "1", "--amp", *saved_with)) == 0
    resume = pretraining_argv(tmp_path, "--max-steps", "2", "--last-step-of-checkpoint", "auto", "--amp", *resumed_with)
    if saved_with == resumed_with:
        assert train(resume) == 0
        return
    word = "with" if saved_with else "without"
    with pytest.raises(ValueError, match=f"phase1/1: saved {word} --use-pure-fp16 .*resume with the same AMP level"):
        train(resume)


def test_tf32_is_refused_where_nvidia_tf32_override_turns_it_off(monkeypatch, capsys):
    # NVIDIA_TF32_OVERRIDE=0 disables TF32 inside cuBLAS and cuDNN, below Paddle's switches: tf32 could not hold.
    calls = []
    monkeypatch.setattr(amp, "set_float32_matmul_precision", calls.append)
    monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", "0")
    with pytest.raises(SystemExit, match="--float32-precision tf32: NVIDIA_TF32_OVERRIDE=0 in the environment"):
        amp.amp_policy(amp_args("--float32-precision", "tf32"), device="gpu:0")
    amp.amp_policy(amp_args("--float32-precision", "fp32"), device="gpu:0")  # fp32 holds in any environment
    monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", "1")
    amp.amp_policy(amp_args("--float32-precision", "tf32"), device="gpu:0")
    assert calls == ["fp32", "tf32"]
