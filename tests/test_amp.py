"""amp.py and the GPU-only AMP conditions, reproduced on the CPU.

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

import paddle_private
from amp import (
    LossScaler,
    add_amp_arguments,
    amp_decorate,
    amp_policy,
    check_amp_arguments,
    create_loss_scaler,
    set_float32_matmul_precision,
)
from modeling import BertConfig, BertForQuestionAnswering
from weights import load_state

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


def gpu_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_amp_arguments(parser)
    args = parser.parse_args(list(argv))
    check_amp_arguments(parser, args)
    return args


def gpu_loss_scaler(*argv: str) -> LossScaler:
    return create_loss_scaler(amp_policy(gpu_args(*argv), device="gpu:0"))


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
    amp_decorate(paddle.nn.Linear(2, 2), None, amp_policy(gpu_args("--amp", "--use-pure-fp16"), device="gpu:0"))
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
        set_float32_matmul_precision(precision)
        assert paddle_private.tf32_switches() == switches, precision
    with pytest.raises(ValueError, match="float32 precision must be one of"):
        set_float32_matmul_precision("fp16")
