"""The cpu_ops extension: its kernels against the Paddle-op paths they replace, its cache and its fallback."""

import os
import subprocess
import sys

import numpy as np
import paddle
import pytest

from conftest import ROOT, require_cpu_ops
from kernels import cpu_ops
from optimizer import ClipGradByGlobalNormInPlace, Lamb

# Above csrc/cpu_ops.cc's kMinParallel, so that two threads split the loops and their reductions.
BIG = [300, 200]


def lamb_run(ops, grad_scale_steps, steps=6):
    """Six LAMB steps on a decayed matrix, a zero-norm decayed vector and an excluded vector, under a clip that
    is (ops given: the fused kernel, which the clip defers its factor to) or is not active in a given step
    (gradient scale per step)."""
    rng = np.random.default_rng(0)
    shapes = {"w": BIG, "zero": [40000], "bias": [700]}
    params = {}
    for name, shape in shapes.items():
        value = np.zeros(shape, np.float32) if name == "zero" else rng.normal(size=shape).astype(np.float32)
        initializer = paddle.nn.initializer.Assign(value)
        params[name] = paddle.create_parameter(shape, "float32", default_initializer=initializer)
    clip = ClipGradByGlobalNormInPlace(clip_norm=1.0, defer_scaling=ops is not None)
    names = {p.name: key for key, p in params.items()}
    optimizer = Lamb(learning_rate=0.01, lamb_weight_decay=0.01, parameters=list(params.values()), grad_clip=clip,
                     exclude_from_weight_decay_fn=lambda p: names[p.name] == "bias", cpu_ops=ops)
    for step in range(steps):
        loss = sum((p * paddle.to_tensor(grad_scale_steps[step] * rng.normal(size=p.shape).astype(np.float32))).sum()
                   for p in params.values())
        loss.backward()
        optimizer.step()
        optimizer.clear_grad()
    state = {key: value.numpy() for key, value in optimizer.state_dict().items() if key != "LR_Scheduler"}
    return {key: p.numpy() for key, p in params.items()}, state


@pytest.mark.parametrize("threads", [1, 2])
def test_fused_lamb_matches_the_paddle_op_path(threads):
    """Weights and optimizer state (same names) after six steps, with the clip active in some steps (large
    gradients) and not in others, against optimizer.Lamb's Paddle-op path and the in-place clip."""
    ops = require_cpu_ops()
    scales = [30.0, 0.001, 30.0, 0.001, 5.0, 0.0001]
    paddle.base.core.set_num_threads(threads)
    try:
        with paddle.utils.unique_name.guard():  # the same parameter and state names in both runs
            expected, expected_state = lamb_run(None, scales)
        with paddle.utils.unique_name.guard():
            actual, actual_state = lamb_run(ops, scales)
    finally:
        paddle.base.core.set_num_threads(1)
    for name, value in expected.items():
        np.testing.assert_allclose(actual[name], value, rtol=1e-6, atol=1e-7, err_msg=name)
    assert actual_state.keys() == expected_state.keys()
    for name, value in expected_state.items():
        np.testing.assert_allclose(actual_state[name], value, rtol=1e-5, atol=1e-9, err_msg=name)


def test_deferring_clip_leaves_gradients_and_records_its_factor():
    param = paddle.create_parameter([3], "float32")
    grad = paddle.to_tensor([3.0, 4.0, 0.0])
    clip = ClipGradByGlobalNormInPlace(clip_norm=1.0, defer_scaling=True)
    clip([(param, grad)])
    np.testing.assert_array_equal(grad.numpy(), [3.0, 4.0, 0.0])
    assert clip.deferred_factor(param) == pytest.approx(0.2)
    clip([(param, paddle.to_tensor([0.1, 0.0, 0.0]))])  # within the limit: nothing left to apply
    assert clip.deferred_factor(param) == 1.0


def test_a_cached_library_is_loaded_without_a_build(monkeypatch):
    require_cpu_ops()
    monkeypatch.setattr(cpu_ops, "_build", lambda *args: pytest.fail("rebuilt a cached library"))
    cpu_ops.load.cache_clear()
    try:
        assert cpu_ops.load() is not None
    finally:
        cpu_ops.load.cache_clear()


def test_a_cpu_without_avx2_keeps_paddles_ops(monkeypatch):
    monkeypatch.setattr(cpu_ops, "cpu_vendor_and_flags", lambda: ("GenuineIntel", {"sse2", "avx"}))
    monkeypatch.setattr(cpu_ops, "_build", lambda *args: pytest.fail("built for a CPU that cannot run it"))
    cpu_ops.load.cache_clear()
    try:
        with pytest.warns(UserWarning, match=r"cpu_ops: this CPU lacks \['avx2', 'fma'\]; using Paddle's CPU ops"):
            assert cpu_ops.load() is None
    finally:
        cpu_ops.load.cache_clear()


def test_a_failed_build_falls_back_with_one_warning(tmp_path, monkeypatch):
    broken = tmp_path / "cpu_ops.cc"
    broken.write_text("#error no compiler today\n")
    monkeypatch.setattr(cpu_ops, "SOURCE", broken)
    monkeypatch.setenv("PADDLEBERT_CACHE", str(tmp_path / "cache"))
    cpu_ops.load.cache_clear()
    try:
        with pytest.warns(UserWarning, match="cpu_ops: cannot build cpu_ops.cc .*using Paddle's CPU ops"):
            assert cpu_ops.load() is None
    finally:
        cpu_ops.load.cache_clear()
    # No half-built library left for the next process; only the record of the failure (test_cpu_ops_build_memory)
    # and the build lock's file.
    directory = cpu_ops.cache_directory()
    assert sorted(p.name for p in (tmp_path / "cache" / "cpu_ops").iterdir()) == [
        cpu_ops.failure_record(directory).name, directory.name + ".lock"]


def test_processes_that_start_at_once_build_once_and_all_load(tmp_path):
    """Two processes loading the extension into an empty cache at the same moment (as pytest's workers do): one
    builds, the other waits for its library, and both run a kernel. Without the build lock both built, and the
    second to register aborted in Paddle's operator registry."""
    require_cpu_ops()
    program = ("import numpy as np, paddle; from kernels import cpu_ops\n"
               "ops = cpu_ops.load()\n"
               "x = paddle.to_tensor(np.arange(8, dtype='float32').reshape(2, 4))\n"
               "print(ops.layer_norm(x, paddle.ones([4]), paddle.zeros([4]), 1e-12).numpy()[0, 0])\n")
    env = {**os.environ, "PADDLEBERT_CACHE": str(tmp_path / "cache")}
    processes = [subprocess.Popen([sys.executable, "-W", "ignore", "-c", program], cwd=ROOT, env=env, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for _ in range(2)]
    outputs = [process.communicate(timeout=600)[0] for process in processes]
    assert [process.returncode for process in processes] == [0, 0], outputs
    for output in outputs:  # (0 - 1.5) / sqrt(1.25)
        assert float(output.split()[-1]) == pytest.approx(-1.3416407)
    assert len(list((tmp_path / "cache" / "cpu_ops").glob("*/paddlebert_cpu_ops/paddlebert_cpu_ops.so"))) == 1
