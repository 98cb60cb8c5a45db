"""runtime.py, amp.py and cli.py: thread count, CPU affinity, the AMP flags, the float16 loss scaler, flag types."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import numpy as np
import paddle
import pytest

from amp import (
    AmpPolicy,
    LossScaler,
    add_amp_arguments,
    amp_autocast,
    amp_policy,
    check_amp_arguments,
    create_loss_scaler,
)
from cli import str_to_bool
from conftest import ROOT
from runtime import configure_cpu_threads


def amp_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_amp_arguments(parser)
    args = parser.parse_args(list(argv))
    check_amp_arguments(parser, args)
    return args


def test_configure_cpu_threads_from_environment(monkeypatch):
    monkeypatch.setenv("PADDLEBERT_NUM_THREADS", "1")
    assert configure_cpu_threads() == 1
    assert os.environ["OMP_NUM_THREADS"] == "1"
    monkeypatch.setenv("PADDLEBERT_NUM_THREADS", "two")
    with pytest.raises(ValueError, match="PADDLEBERT_NUM_THREADS"):
        configure_cpu_threads()
    monkeypatch.delenv("PADDLEBERT_NUM_THREADS")
    monkeypatch.setenv("PADDLE_LOCAL_SIZE", "1")
    assert configure_cpu_threads() == os.cpu_count()


def test_cpu_affinity_gives_each_local_rank_its_own_block():
    # In a child process: pinning the test process itself would slow down the rest of the suite. The child
    # plays local ranks 0 and 1 of 2 in turn, restoring its CPUs in between.
    code = (
        "import os, sys; sys.path.insert(0, sys.argv[1]); from runtime import set_cpu_affinity\n"
        "everything = os.sched_getaffinity(0)\n"
        "for rank in ('0', '1'):\n"
        "    os.environ.update(PADDLE_LOCAL_RANK=rank, PADDLE_LOCAL_SIZE='2')\n"
        "    print(sorted(set_cpu_affinity()), sorted(os.sched_getaffinity(0)))\n"
        "    os.sched_setaffinity(0, everything)\n"
    )
    available = sorted(os.sched_getaffinity(0))
    per_rank = max(1, len(available) // 2)
    lines = subprocess.run([sys.executable, "-c", code, str(ROOT)], capture_output=True, text=True,
                           check=True).stdout.strip().splitlines()[-2:]
    for local_rank, line in enumerate(lines):
        expected = available[(local_rank * per_rank) % len(available):][:per_rank]
        assert line == f"{expected} {expected}"


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
    policy = amp_policy(amp_args("--amp", "--use-pure-fp16", "--scale-loss", "1048576"), device="cpu")
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1 and "AMP needs a GPU" in lines[0]
    assert policy == AmpPolicy() and not policy.enabled
    assert create_loss_scaler(policy) is None
    with amp_autocast(policy):
        assert paddle.ones([2]).dtype == paddle.float32


def test_amp_policy_on_gpu_maps_flags_to_level_dtype_and_scaling(capsys):
    o1 = amp_policy(amp_args("--amp", "--scale-loss", "1048576", "--use-dynamic-loss-scaling"), device="gpu:0")
    assert (o1.enabled, o1.level, o1.dtype, o1.master_weights) == (True, "O1", "float16", False)
    scaler = create_loss_scaler(o1)
    assert scaler.scale_value == 2.0**20 and scaler.dynamic
    o2 = amp_policy(amp_args("--amp", "--use-pure-fp16"), device="gpu:0")
    assert (o2.level, o2.master_weights) == ("O2", True)
    static = create_loss_scaler(amp_policy(amp_args("--amp", "--no-use-dynamic-loss-scaling", "--scale-loss", "128"),
                                           device="gpu:0"))
    assert (static.scale_value, static.dynamic) == (128.0, False)
    bf16 = amp_policy(amp_args("--amp", "--amp-dtype", "bfloat16", "--use-dynamic-loss-scaling"), device="gpu:0")
    assert bf16.dtype == "bfloat16" and create_loss_scaler(bf16) is None  # bf16 needs no loss scaling
    assert capsys.readouterr().out == ""


def _scaled_backward(scaler: LossScaler, values: np.ndarray) -> paddle.Tensor:
    weight = paddle.create_parameter([values.size], "float32")
    weight.set_value(np.ones(values.size, np.float32))
    scaler.scale((weight * paddle.to_tensor(values)).sum()).backward()
    return weight


def test_loss_scaler_unscales_exactly_and_detects_overflow():
    scaler = LossScaler(2.0**20, dynamic=True)
    values = np.array([1e-6, -3.0, 0.25], np.float32)  # d(sum(w * values))/dw = values
    weight = _scaled_backward(scaler, values)
    np.testing.assert_allclose(weight.grad.numpy(), values * 2.0**20, rtol=1e-7)
    assert scaler.unscale_and_check([weight]) is False
    np.testing.assert_allclose(weight.grad.numpy(), values, rtol=1e-7)
    overflowing = _scaled_backward(scaler, np.array([1.0, np.inf, 0.0], np.float32))
    assert scaler.unscale_and_check([overflowing]) is True


def test_dynamic_loss_scale_grows_after_2000_good_steps_and_halves_on_overflow():
    scaler = LossScaler(2.0**20, dynamic=True)
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
    static = LossScaler(128.0, dynamic=False)
    for found_inf in (True, False, True):
        static.update(found_inf)
    assert static.scale_value == 128.0


def test_loss_scaler_state_round_trip():
    scaler = LossScaler(2.0**20, dynamic=True)
    for _ in range(1999):
        scaler.update(False)
    restored = LossScaler(1.0, dynamic=True)
    restored.load_state_dict(scaler.state_dict())
    scaler.update(False)
    restored.update(False)
    assert restored.scale_value == scaler.scale_value == 2.0**21


def test_str_to_bool_reads_reference_style_flags():
    assert [str_to_bool(text) for text in ("True", "false", "1", "0", "yes", "off")] == [
        True, False, True, False, True, False]
    with pytest.raises(argparse.ArgumentTypeError, match="expected true or false"):
        str_to_bool("maybe")
