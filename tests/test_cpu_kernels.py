"""cpu_kernels: MKL code-path selection, malloc settings, and the CPU ops against Paddle's own ops."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import paddle
import paddle.nn.functional as F
import pytest

from conftest import require_cpu_ops
from kernels import cpu_kernels, cpu_ops
from modeling import (
    BertConfig,
    BertForPretraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    standard_copy,
)

ROOT = Path(__file__).resolve().parent.parent
AVX512 = "fpu sse2 avx avx2 fma avx512f avx512cd avx512bw avx512dq avx512vl"
AVX2 = "fpu sse2 avx avx2 fma"


def write_cpuinfo(folder: Path, vendor: str, flags: str) -> str:
    processor = f"processor\t: {{index}}\nvendor_id\t: {vendor}\nmodel name\t: test cpu\nflags\t\t: {flags}\n\n"
    path = folder / "cpuinfo"
    path.write_text(processor.format(index=0) + processor.format(index=1), encoding="utf-8")
    return str(path)


def tensor(array: np.ndarray, requires_grad: bool = True) -> paddle.Tensor:
    result = paddle.to_tensor(array)
    result.stop_gradient = not requires_grad
    return result


def values_and_grads(function, inputs: list[paddle.Tensor], grad_output: np.ndarray):
    """function(*inputs) and the gradients of <function(*inputs), grad_output> w.r.t. the inputs needing them."""
    output = function(*inputs)
    output.backward(paddle.to_tensor(grad_output))
    grads = [None if x.stop_gradient else x.grad.numpy() for x in inputs]
    for x in inputs:
        x.clear_gradient()
    return output.numpy(), grads


# ---------------------------------------------------------------------------------------------
# MKL code path and memory
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("vendor", "flags", "expected"),
    [
        ("AuthenticAMD", AVX512, "7"),
        ("AuthenticAMD", AVX2, "5"),
        ("AuthenticAMD", "fpu sse2 avx avx2", None),  # AVX2 without FMA: MKL's AVX2 kernels need both
        ("AuthenticAMD", "fpu sse2 avx512f avx2 fma", "5"),  # AVX-512 foundation alone is not Skylake-SP
        ("GenuineIntel", AVX512, None),
        ("", "", None),
    ],
)
def test_mkl_cpu_type(vendor, flags, expected):
    assert cpu_kernels.mkl_cpu_type(vendor, set(flags.split())) == expected


def test_cpuinfo_is_parsed(tmp_path):
    path = write_cpuinfo(tmp_path, "AuthenticAMD", AVX2)
    assert cpu_ops.cpu_vendor_and_flags(path) == ("AuthenticAMD", set(AVX2.split()))
    assert cpu_ops.cpu_vendor_and_flags(str(tmp_path / "missing")) == ("", set())


def test_sets_the_code_path_for_amd(tmp_path, monkeypatch):
    # setenv first, so that monkeypatch restores the variable (delenv of an unset one records nothing to undo)
    monkeypatch.setenv("MKL_DEBUG_CPU_TYPE", "unset below")
    monkeypatch.delenv("MKL_DEBUG_CPU_TYPE")
    assert cpu_kernels.use_fast_mkl_kernels(write_cpuinfo(tmp_path, "AuthenticAMD", AVX512)) == "7"
    assert os.environ["MKL_DEBUG_CPU_TYPE"] == "7"


def test_leaves_intel_alone(tmp_path, monkeypatch):
    monkeypatch.delenv("MKL_DEBUG_CPU_TYPE", raising=False)
    assert cpu_kernels.use_fast_mkl_kernels(write_cpuinfo(tmp_path, "GenuineIntel", AVX512)) is None
    assert "MKL_DEBUG_CPU_TYPE" not in os.environ


def test_a_user_setting_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("MKL_DEBUG_CPU_TYPE", "4")
    assert cpu_kernels.use_fast_mkl_kernels(write_cpuinfo(tmp_path, "AuthenticAMD", AVX512)) == "4"
    assert os.environ["MKL_DEBUG_CPU_TYPE"] == "4"


# Reports the bytes glibc holds in mmap-ed blocks (mallinfo2().hblkhd) while a 64 MiB block is alive, before and
# after running the code in sys.argv[1]; a block served from the heap adds nothing there. Then the environment
# variables that code added or changed.
_MMAP_PROBE = """
import ctypes, os, sys
class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
def mmapped_while_allocated():
    block = libc.malloc(64 << 20)
    held = libc.mallinfo2().hblkhd
    libc.free(block)
    return held
import paddle  # sets OMP_NUM_THREADS itself: not ours to report
environment = dict(os.environ)
before = mmapped_while_allocated()
exec(sys.argv[1])
changed = sorted(k for k, v in os.environ.items() if environment.get(k) != v)
print(before >= 64 << 20, mmapped_while_allocated() >= 64 << 20, changed)
"""
_PROJECT_MODULES = ("modeling", "optimizer", "kernels.cpu_kernels", "training.runtime", "training.amp",
                    "checkpoints.weights", "bert_config", "checkpoints.checkpoint", "run_pretraining", "run_squad",
                    "run_glue", "convert_checkpoint")


def _probe(code: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("MKL_DEBUG_CPU_TYPE", "MALLOC_MMAP_THRESHOLD_",
                                                            "MALLOC_TRIM_THRESHOLD_")}
    result = subprocess.run([sys.executable, "-c", _MMAP_PROBE, code], cwd=ROOT, env=env, capture_output=True,
                            text=True, check=True)
    return result.stdout.strip().splitlines()[-1]


@pytest.mark.skipif(sys.platform != "linux", reason="glibc malloc statistics")
def test_importing_the_project_changes_no_process_setting():
    assert _probe("import " + ", ".join(_PROJECT_MODULES)) == "True True []"


@pytest.mark.skipif(sys.platform != "linux", reason="glibc malloc statistics")
def test_cpu_tweaks_select_mkl_kernels_and_keep_big_blocks_in_the_heap_on_cpu_only():
    expected = cpu_kernels.mkl_cpu_type(*cpu_ops.cpu_vendor_and_flags())
    changed = "['MKL_DEBUG_CPU_TYPE']" if expected else "[]"
    assert _probe("from training import runtime; runtime.apply_cpu_tweaks('cpu')") == f"True False {changed}"
    assert _probe("from training import runtime; runtime.apply_cpu_tweaks('gpu:0')") == "True True []"


def test_keep_freed_memory_respects_the_users_malloc_settings(monkeypatch):
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "131072")
    assert cpu_kernels.keep_freed_memory() is False


# ---------------------------------------------------------------------------------------------
# Float64 references
#
# Each kernel against the exact function evaluated in float64 from the same float32 inputs, with a bound derived
# from the magnitudes of the terms it adds: a float32 kernel that rounds each term once (U, float32's unit
# roundoff) and sums K of them is within about K U (sum of |term|) of the exact value (Higham, "Accuracy and
# Stability of Numerical Algorithms", 2002, section 3.1). A kernel that loses digits to cancellation, as a
# float32 LayerNorm does on a row with a small spread, exceeds its bound; agreeing with Paddle's op on one CPU
# is not accuracy, and on another CPU it was not even agreement.
# ---------------------------------------------------------------------------------------------

U = 2.0**-24


def assert_within(actual: np.ndarray, exact: np.ndarray, bound: np.ndarray, name: str) -> float:
    """|actual - exact| <= bound everywhere; returns the largest error."""
    error = np.abs(actual.astype(np.float64) - exact)
    worst = np.unravel_index(np.argmax(error - bound), error.shape)
    assert error[worst] <= bound[worst], (
        f"{name}: error {error[worst]:.3g} over its bound {bound[worst]:.3g} at {worst} (value {exact[worst]:.4g})")
    return float(error.max())


def layer_norm_float64(x, weight, bias, grad_y, epsilon):
    """LayerNorm over the last axis and its gradients in float64, with the magnitudes of the terms each output
    sums: y = n w + b; dx = rstd (g - mean(g) - n mean(g n)) with g = dy w; dw, db column sums of dy n, dy."""
    x, weight, bias, grad_y = (a.astype(np.float64) for a in (x, weight, bias, grad_y))
    mean = x.mean(-1, keepdims=True)
    rstd = 1.0 / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + epsilon)
    n, g = (x - mean) * rstd, grad_y * weight
    mean_g, mean_gn = g.mean(-1, keepdims=True), (g * n).mean(-1, keepdims=True)
    grad_x = rstd * (g - mean_g - n * mean_gn)
    rows = (-1, x.shape[-1])
    exact = [n * weight + bias, grad_x, (grad_y * n).reshape(rows).sum(0), grad_y.reshape(rows).sum(0)]
    magnitude = [np.abs(n * weight) + np.abs(bias),
                 np.abs(grad_x) + rstd * (np.abs(g) + np.abs(g).mean(-1, keepdims=True)
                                          + np.abs(n) * np.abs(g * n).mean(-1, keepdims=True)),
                 np.abs(grad_y * n).reshape(rows).sum(0), np.abs(grad_y).reshape(rows).sum(0)]
    return exact, magnitude


@pytest.mark.parametrize("threads", [1, 2])
def test_layer_norm_kernel_is_within_rounding_of_float64(threads):
    """The extension's LayerNorm (forward and the three gradients) at BERT's H = 768 and epsilon 1e-12, on rows
    with offset means and different spreads, rows with a spread of 1e-3 around 1.0 (rstd ~ 1e3, where a float
    mean's rounding shifts every normalized value) and a row around 300: within 2 U of the terms' magnitudes,
    and at least as accurate as Paddle's own op on every output."""
    ops = require_cpu_ops()
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((2, 48, 768)) * rng.uniform(0.5, 3.0, (2, 48, 1)) + 2.0).astype("float32")
    x[0, :4] = 1.0 + 1e-3 * rng.standard_normal((4, 768))
    x[1, 0] = 300.0 + rng.standard_normal(768)
    weight, bias = rng.standard_normal(768).astype("float32"), rng.standard_normal(768).astype("float32")
    grad = rng.standard_normal(x.shape).astype("float32")
    exact, magnitude = layer_norm_float64(x, weight, bias, grad, 1e-12)

    def run(function):
        inputs = [tensor(x), tensor(weight), tensor(bias)]
        value, grads = values_and_grads(function, inputs, grad)
        return [value, *grads]

    paddle.base.core.set_num_threads(threads)
    try:
        ours = run(lambda x, w, b: ops.layer_norm(x, w, b, 1e-12))
    finally:
        paddle.base.core.set_num_threads(1)
    paddles = run(lambda x, w, b: F.layer_norm(x, 768, w, b, 1e-12))
    for name, mine, theirs, want, size in zip(("y", "grad_x", "grad_weight", "grad_bias"), ours, paddles, exact,
                                              magnitude, strict=True):
        our_error = assert_within(mine, want, 2 * U * size, name)
        assert our_error <= np.abs(theirs.astype(np.float64) - want).max(), name


def test_layer_norm_layer_without_the_extension_is_paddles_op(monkeypatch):
    monkeypatch.setattr(cpu_kernels.cpu_ops, "load", lambda: None)
    layer = cpu_kernels.LayerNorm(16, epsilon=1e-6)
    x = paddle.to_tensor(np.random.default_rng(1).standard_normal((3, 16)).astype("float32"))
    np.testing.assert_array_equal(layer(x).numpy(), F.layer_norm(x, 16, layer.weight, layer.bias, 1e-6).numpy())


def test_gelu_kernel_is_within_rounding_of_float64():
    """The extension's GELU and its gradient against 0.5 x (1 + erf(x / sqrt 2)) in float64, over the range where
    erf saturates. Bound: 4 U (glibc's erff and expf are within a few ulp) of each term's magnitude, with the
    rounding of erf's and exp's arguments (x / sqrt 2, -x^2 / 2) carried through their derivatives."""
    require_cpu_ops()
    x = np.concatenate([np.linspace(-12, 12, 4001), np.random.default_rng(8).normal(scale=2, size=60000)])
    x = x.astype("float32")
    grad = np.random.default_rng(9).normal(size=x.shape).astype("float32")
    ours, (our_grad,) = values_and_grads(cpu_kernels.exact_gelu(), [tensor(x)], grad)
    z = x.astype(np.float64)
    erf = np.array([math.erf(v) for v in z / math.sqrt(2.0)])
    cdf, pdf = 0.5 * (1.0 + erf), np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
    assert_within(ours, z * cdf, 4 * U * (np.abs(z) * (cdf + 0.5 * np.abs(erf)) + np.abs(z) * z * z * pdf), "gelu")
    exact_grad = grad * (cdf + z * pdf)
    size = np.abs(grad) * (cdf + 0.5 * np.abs(erf) + np.abs(z) * pdf * (1.0 + z * z))
    assert_within(our_grad, exact_grad, 4 * U * (size + np.abs(exact_grad)), "gelu gradient")


@pytest.mark.parametrize("threads", [1, 2])
def test_masked_lm_cross_entropy_kernel_is_within_rounding_of_float64(threads):
    """The extension's softmax cross-entropy and its gradient against float64 (loss = logsumexp(x) - x[label],
    gradient dloss (softmax(x) - onehot(label))), on rows of BERT's vocabulary width with logits of different
    spreads, a row far from 0 (where an unshifted exp overflows), a flat row, and rows whose label is -1 (loss 0,
    no gradient). Bound: the float sum of V exponentials loses at most (V + 8) U of the log-sum, and each
    exponent's argument a few ulp of its terms."""
    ops = require_cpu_ops()
    rng = np.random.default_rng(12)
    rows, width = 40, 30522
    x = (rng.standard_normal((rows, width)) * rng.uniform(0.1, 8.0, (rows, 1))).astype("float32")
    x[3] += 150.0
    x[4] = 0.25
    labels = rng.integers(0, width, rows)
    labels[[5, 17, 39]] = -1
    grad = rng.uniform(0.1, 2.0, rows).astype("float32")
    paddle.base.core.set_num_threads(threads)
    try:
        loss, (grad_x, _) = values_and_grads(ops.masked_lm_xent, [tensor(x), tensor(labels, requires_grad=False)],
                                             grad)
    finally:
        paddle.base.core.set_num_threads(1)
    z = x.astype(np.float64)
    top = z.max(1, keepdims=True)
    lse = top + np.log(np.exp(z - top).sum(1, keepdims=True))
    kept = labels != -1
    target = np.where(kept, z[np.arange(rows), np.maximum(labels, 0)], 0.0)
    exact_loss = np.where(kept, lse[:, 0] - target, 0.0)
    lse_error = (width + 8) * U + 4 * U * np.abs(lse[:, 0])
    assert_within(loss, exact_loss, lse_error + 4 * U * np.abs(target), "loss")
    assert np.all(loss[~kept] == 0.0)
    softmax = np.exp(z - lse)
    onehot = np.zeros_like(z)
    onehot[np.arange(rows)[kept], labels[kept]] = 1.0
    scale = np.where(kept, grad, 0.0)[:, None]
    exact_grad = scale * (softmax - onehot)
    size = scale * (softmax * (lse_error[:, None] + 4 * U * (np.abs(z) + np.abs(lse)) + 4 * U) + U * onehot)
    assert_within(grad_x, exact_grad, size, "gradient")
    assert np.all(grad_x[~kept] == 0.0)


def test_masked_lm_cross_entropy_kernel_refuses_a_label_outside_the_vocabulary():
    ops = require_cpu_ops()
    logits = tensor(np.zeros((2, 8), np.float32))
    with pytest.raises(Exception, match="label 8 is outside"):
        ops.masked_lm_xent(logits, tensor(np.array([1, 8]), requires_grad=False))


def test_linear_is_within_rounding_of_float64():
    """cpu_kernels.linear (one addmm, the bias gradient a GEMV) and its gradients against float64 products, each
    within (K + 2) U of the sum of its terms' magnitudes (K the length of the dot product)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 32, 96)).astype("float32")
    weight, bias = rng.standard_normal((96, 64)).astype("float32"), rng.standard_normal(64).astype("float32")
    grad = rng.standard_normal((4, 32, 64)).astype("float32")
    ours, grads = values_and_grads(cpu_kernels.linear, [tensor(x), tensor(weight), tensor(bias)], grad)
    x64, w64, dy = x.reshape(-1, 96).astype(np.float64), weight.astype(np.float64), grad.reshape(-1, 64)
    dy = dy.astype(np.float64)
    checks = [("y", ours.reshape(-1, 64), x64 @ w64 + bias, np.abs(x64) @ np.abs(w64) + np.abs(bias), 96),
              ("grad_x", grads[0].reshape(-1, 96), dy @ w64.T, np.abs(dy) @ np.abs(w64.T), 64),
              ("grad_weight", grads[1], x64.T @ dy, np.abs(x64.T) @ np.abs(dy), 128),
              ("grad_bias", grads[2], dy.sum(0), np.abs(dy).sum(0), 128)]
    for name, actual, exact, size, terms in checks:
        assert_within(actual, exact, (terms + 2) * U * size, name)


def test_attention_is_within_rounding_of_float64():
    """cpu_kernels.attention and its gradients against softmax(q k^T / sqrt(D) + mask) v in float64, with one
    masked-out tail. Each bound propagates the magnitudes through the same steps (|q| |k|^T for the scores, then
    the probabilities' relative error, then |P| |V|, and likewise backwards), times (S + D + 4) U."""
    batch, heads, seq, head_dim = 2, 3, 24, 16
    rng = np.random.default_rng(2)
    query, key, value = (rng.standard_normal((batch, heads, seq, head_dim)).astype("float32") for _ in range(3))
    grad = rng.standard_normal(query.shape).astype("float32")
    mask = np.zeros((batch, heads, seq, seq), "float32")
    mask[1, ..., 17:] = -np.inf
    ours, our_grads = values_and_grads(
        lambda q, k, v: cpu_kernels.attention(q, k, v, paddle.to_tensor(mask), 0.0, True),
        [tensor(a) for a in (query, key, value)], grad)
    q, k, v, dy = (a.astype(np.float64) for a in (query, key, value, grad))
    scale = 1.0 / math.sqrt(head_dim)
    scores = q @ k.swapaxes(-1, -2) * scale + mask
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    grad_probs = dy @ v.swapaxes(-1, -2)
    grad_scores = probs * (grad_probs - (probs * grad_probs).sum(-1, keepdims=True))
    exact = [probs @ v, grad_scores @ k * scale, grad_scores.swapaxes(-1, -2) @ q * scale,
             probs.swapaxes(-1, -2) @ dy]
    # Magnitudes: a score's error is within D U |q| |k|^T scale; softmax turns an absolute error e in the scores
    # into a relative error of at most 2 max(e) in each probability. Paddle's CPU softmax gives a -inf score a
    # weight of about 3e-29, not 0 (its exp clamps the argument): an absolute error of up to 2^-90 per
    # probability, carried through like the others (divided here by the factor that multiplies every size).
    terms = seq + head_dim + 4
    score_size = np.abs(q) @ np.abs(k).swapaxes(-1, -2) * scale
    prob_size = probs * (1.0 + 2.0 * score_size.max(-1, keepdims=True)) + 2.0**-90 / (terms * U)
    grad_probs_size = np.abs(dy) @ np.abs(v).swapaxes(-1, -2)
    grad_scores_size = prob_size * (grad_probs_size + (prob_size * grad_probs_size).sum(-1, keepdims=True)
                                    + np.abs(grad_probs))
    size = [prob_size @ np.abs(v), grad_scores_size @ np.abs(k) * scale,
            grad_scores_size.swapaxes(-1, -2) @ np.abs(q) * scale, prob_size.swapaxes(-1, -2) @ np.abs(dy)]
    for name, actual, want, magnitude in zip(("context", "grad_query", "grad_key", "grad_value"),
                                             [ours, *our_grads], exact, size, strict=True):
        assert_within(actual, want, terms * U * magnitude, name)


# ---------------------------------------------------------------------------------------------
# Ops
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("x_requires_grad", [True, False])
def test_linear_matches_f_linear(x_requires_grad):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 5, 6)).astype("float32")
    weight, bias = rng.standard_normal((6, 4)).astype("float32"), rng.standard_normal(4).astype("float32")
    grad = rng.standard_normal((2, 5, 4)).astype("float32")
    inputs = [tensor(x, x_requires_grad), tensor(weight), tensor(bias)]
    ours, our_grads = values_and_grads(cpu_kernels.linear, inputs, grad)
    reference, reference_grads = values_and_grads(F.linear, inputs, grad)
    np.testing.assert_allclose(ours, reference, rtol=1e-5, atol=1e-5)
    # By hand: dW = sum over rows of x^T grad, db = column sums of grad.
    np.testing.assert_allclose(our_grads[1], x.reshape(-1, 6).T @ grad.reshape(-1, 4), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(our_grads[2], grad.sum(axis=(0, 1)), rtol=1e-5, atol=1e-5)
    for mine, theirs in zip(our_grads, reference_grads, strict=True):
        if theirs is None:
            assert mine is None
        else:
            np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("threads", [1, 2])
def test_gelu_matches_f_gelu(threads):
    """Values and gradients against F.gelu (erf form) over the range where erf saturates, in a tensor large
    enough for the kernels to split it between threads; float64 goes to F.gelu itself."""
    ops = require_cpu_ops()
    gelu = cpu_kernels.exact_gelu()
    assert ops in [cell.cell_contents for cell in gelu.__closure__ or ()]  # the extension's path, not Paddle's
    x = np.concatenate([np.linspace(-12, 12, 4001), np.random.default_rng(8).normal(scale=2, size=60000)])
    grad = np.random.default_rng(9).normal(size=x.shape).astype("float32")
    paddle.base.core.set_num_threads(threads)
    try:
        ours, (our_grad,) = values_and_grads(gelu, [tensor(x.astype("float32"))], grad)
    finally:
        paddle.base.core.set_num_threads(1)
    reference, (reference_grad,) = values_and_grads(lambda t: F.gelu(t), [tensor(x.astype("float32"))], grad)
    np.testing.assert_allclose(ours, reference, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(our_grad, reference_grad, rtol=1e-6, atol=1e-6)
    double = tensor(x[:10])
    np.testing.assert_array_equal(gelu(double).numpy(), F.gelu(double).numpy())


@pytest.mark.parametrize("threads", [1, 2])
def test_layer_norm_layer_matches_f_layer_norm(threads):
    """cpu_kernels.LayerNorm through the extension's kernels: values and the three gradients against
    F.layer_norm, on rows with offset means and different spreads, enough of them for two threads to split."""
    require_cpu_ops()
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((3, 200, 64)) * rng.uniform(0.5, 3.0, (3, 200, 1)) + 2.0).astype("float32")
    weight, bias = rng.standard_normal(64).astype("float32"), rng.standard_normal(64).astype("float32")
    grad = rng.standard_normal(x.shape).astype("float32")
    layer = cpu_kernels.LayerNorm(64, epsilon=1e-6)
    assert layer._ops is not None
    layer.weight.set_value(weight)
    layer.bias.set_value(bias)
    paddle.base.core.set_num_threads(threads)
    try:
        ours, (our_grad,) = values_and_grads(layer, [tensor(x)], grad)
        our_param_grads = [layer.weight.grad.numpy(), layer.bias.grad.numpy()]
    finally:
        paddle.base.core.set_num_threads(1)
    inputs = [tensor(x), tensor(weight), tensor(bias)]
    reference, reference_grads = values_and_grads(lambda x, w, b: F.layer_norm(x, 64, w, b, 1e-6), inputs, grad)
    np.testing.assert_allclose(ours, reference, rtol=1e-5, atol=1e-5)
    for mine, theirs in zip([our_grad, *our_param_grads], reference_grads, strict=True):
        np.testing.assert_allclose(mine, theirs, rtol=2e-4, atol=2e-4)


def test_dropout_statistics_scale_and_gradient():
    paddle.seed(3)
    p = 0.3
    x = tensor(np.full((400, 500), 2.0, "float32"))
    y = cpu_kernels.dropout(x, p)
    y.backward(paddle.full(y.shape, 5.0))
    values, grads = y.numpy(), x.grad.numpy()
    kept = values != 0
    # 200k Bernoulli(0.7) draws: the kept fraction is 0.7 +- 0.001 (one standard deviation).
    assert abs(kept.mean() - (1 - p)) < 0.005
    np.testing.assert_allclose(values[kept], 2.0 / (1 - p), rtol=1e-6)
    np.testing.assert_allclose(grads, np.where(kept, 5.0 / (1 - p), 0.0), rtol=1e-6)


def test_dropout_follows_paddle_seed_and_identity_cases():
    x = paddle.ones([64, 64])
    paddle.seed(7)
    first = cpu_kernels.dropout(x, 0.1).numpy()
    paddle.seed(7)
    np.testing.assert_array_equal(cpu_kernels.dropout(x, 0.1).numpy(), first)
    assert cpu_kernels.dropout(x, 0.1, training=False) is x
    assert cpu_kernels.dropout(x, 0.0) is x
    assert not cpu_kernels.dropout(x, 1.0).numpy().any()


@pytest.mark.parametrize("parts", [1, 3])
def test_split_and_merge_heads(parts):
    batch, seq, heads, head_dim = 2, 5, 3, 4
    rng = np.random.default_rng(1)
    x = rng.standard_normal((batch, seq, parts * heads * head_dim)).astype("float32")
    expected = x.reshape(batch, seq, parts, heads, head_dim).transpose(2, 0, 3, 1, 4)
    grad = rng.standard_normal(expected.shape).astype("float32")
    split, (split_grad,) = values_and_grads(lambda t: cpu_kernels.split_heads(t, parts, heads), [tensor(x)], grad)
    np.testing.assert_array_equal(split, expected)
    np.testing.assert_array_equal(split_grad, grad.transpose(1, 3, 0, 2, 4).reshape(x.shape))
    merge_grad = rng.standard_normal((batch, seq, heads * head_dim)).astype("float32")
    merged, (merged_grad,) = values_and_grads(cpu_kernels.merge_heads, [tensor(expected[0])], merge_grad)
    np.testing.assert_array_equal(merged, x.reshape(batch, seq, parts, -1)[:, :, 0])
    np.testing.assert_array_equal(merged_grad, merge_grad.reshape(batch, seq, heads, head_dim).transpose(0, 2, 1, 3))


def test_attention_matches_scaled_dot_product_attention():
    batch, heads, seq, head_dim = 2, 3, 6, 4
    rng = np.random.default_rng(2)
    query, key, value = (rng.standard_normal((batch, heads, seq, head_dim)).astype("float32") for _ in range(3))
    mask = np.ones((batch, 1, 1, seq), bool)
    mask[1, ..., 4:] = False
    grad = rng.standard_normal((batch, heads, seq, head_dim)).astype("float32")
    inputs = [tensor(a) for a in (query, key, value)]
    bias = np.broadcast_to(np.where(mask, 0.0, -np.inf), (batch, heads, seq, seq)).astype("float32")
    ours, our_grads = values_and_grads(
        lambda q, k, v: cpu_kernels.attention(q, k, v, paddle.to_tensor(bias), 0.0, True), inputs, grad)

    def sdpa(q, k, v):  # its layout is [B, S, N, D]
        return F.scaled_dot_product_attention(
            q.transpose([0, 2, 1, 3]), k.transpose([0, 2, 1, 3]), v.transpose([0, 2, 1, 3]),
            attn_mask=paddle.to_tensor(mask)).transpose([0, 2, 1, 3])

    reference, reference_grads = values_and_grads(sdpa, inputs, grad)
    np.testing.assert_allclose(ours, reference, rtol=1e-5, atol=1e-6)
    for mine, theirs in zip(our_grads, reference_grads, strict=True):
        np.testing.assert_allclose(mine, theirs, rtol=1e-4, atol=1e-6)
    # By hand, for one head: softmax over the 4 unmasked keys.
    scores = query[1, 0] @ key[1, 0, :4].T / math.sqrt(head_dim)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    np.testing.assert_allclose(ours[1, 0], probs @ value[1, 0, :4], rtol=1e-5, atol=1e-6)


def test_attention_dropout_drops_probabilities():
    paddle.seed(0)
    ones = paddle.ones([1, 1, 200, 4])
    # Uniform probabilities 1/200 over 200 keys and all-ones values: each context entry is kept/200 / (1 - p).
    context = cpu_kernels.attention(paddle.zeros([1, 1, 200, 4]), ones, ones, None, 0.5, True).numpy()
    kept_counts = context[..., 0] * 200 * 0.5
    np.testing.assert_allclose(kept_counts, np.round(kept_counts), atol=1e-3)
    assert abs(kept_counts.mean() / 200 - 0.5) < 0.02


def test_head_permutations_stay_cached_within_a_bounded_size():
    cpu_kernels._head_permutation.cache_clear()
    first = cpu_kernels._head_permutation(2, 5, 3, 4)
    assert cpu_kernels._head_permutation(2, 5, 3, 4) is first  # the same shape again: no new tensors
    for seq in range(1, 200):  # fine-tuning batches padded to ever new lengths
        index, inverse = cpu_kernels._head_permutation(2, seq, 1, 4)
        assert cpu_kernels._head_permutation.cache_info().currsize <= cpu_kernels.HEAD_PERMUTATION_CACHE_SIZE
    np.testing.assert_array_equal(index.numpy()[inverse.numpy()], np.arange(2 * 199 * 4))


def tiny_config(**overrides) -> BertConfig:
    values = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
    return BertConfig(**{**values, **overrides})


def layer_types(model: paddle.nn.Layer) -> set[type]:
    return {type(layer) for layer in model.sublayers()}


CPU_LAYERS = {cpu_kernels.Linear, cpu_kernels.LayerNorm, cpu_kernels.Dropout}


def test_the_layers_are_chosen_once_when_the_model_is_built(monkeypatch):
    assert CPU_LAYERS <= layer_types(BertForPretraining(tiny_config(), use_cpu_kernels=True))
    assert not CPU_LAYERS & layer_types(BertForPretraining(tiny_config(), use_cpu_kernels=False))
    monkeypatch.setattr(paddle, "get_device", lambda: "gpu:0")
    on_gpu = BertForSequenceClassification(tiny_config(), 3)
    assert not on_gpu.bert.use_cpu_kernels and not CPU_LAYERS & layer_types(on_gpu)
    monkeypatch.setattr(paddle, "get_device", lambda: "cpu")
    assert CPU_LAYERS <= layer_types(BertForQuestionAnswering(tiny_config()))


def test_standard_copy_is_the_same_model_in_standard_layers_and_fp32():
    paddle.seed(2)
    model = BertForSequenceClassification(tiny_config(), 3, use_cpu_kernels=True)
    model.eval()
    weights = {name: value.numpy() for name, value in model.state_dict().items()}
    model.to(dtype="float16")  # as pure fp16 (O2) leaves the weights
    standard = standard_copy(model)
    assert type(standard) is BertForSequenceClassification and standard.num_labels == 3
    assert not standard.training and not CPU_LAYERS & layer_types(standard)
    for name, value in standard.state_dict().items():
        assert value.dtype == paddle.float32, name
        np.testing.assert_allclose(value.numpy(), weights[name], rtol=1e-3, atol=1e-4, err_msg=name)
    assert model.bert.embeddings.word_embeddings.weight.dtype == paddle.float16  # the original is left alone


@pytest.mark.parametrize("fuse_mha", [False, True])
def test_model_gradients_equal_with_cpu_kernels_and_standard_layers(fuse_mha):
    config = tiny_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, fuse_mha=fuse_mha)
    paddle.seed(1)
    model = BertForPretraining(config, use_cpu_kernels=True)
    standard = standard_copy(model)
    rng = np.random.default_rng(0)
    input_ids = paddle.to_tensor(rng.integers(0, 99, (3, 16)))
    attention_mask = np.ones((3, 16), "int64")
    attention_mask[1, 10:] = 0
    positions = paddle.to_tensor(np.array([1, 5, 17, 20, 40]))

    def run(model):
        scores, nsp_scores = model(input_ids, paddle.zeros_like(input_ids), paddle.to_tensor(attention_mask), positions)
        ((scores**2).mean() + (nsp_scores**2).mean()).backward()
        grads = {name: p.grad.numpy().copy() for name, p in model.named_parameters()}
        model.clear_gradients()
        return scores.numpy(), grads

    scores, grads = run(model)
    reference_scores, reference_grads = run(standard)
    np.testing.assert_allclose(scores, reference_scores, rtol=1e-5, atol=1e-6)
    for name, reference in reference_grads.items():
        # The key bias has no effect on softmax(q k^T): its true gradient is 0 and both are rounding noise.
        atol = 1e-6 if "key.bias" in name else 1e-7
        np.testing.assert_allclose(grads[name], reference, rtol=1e-4, atol=atol, err_msg=name)


def exported_op_names(prefix: Path) -> set[str]:
    """The op names of a program paddle.jit.save wrote, without their dialect prefix (PIR's JSON: every op and
    attribute is an object named by "#", e.g. "1.layer_norm")."""
    names = set()

    def visit(node):
        if isinstance(node, dict):
            if isinstance(node.get("#"), str):
                names.add(node["#"].partition(".")[2])
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(json.loads(prefix.with_suffix(".json").read_text()))
    return names


def test_exported_program_uses_standard_ops_and_dynamic_shapes(tmp_path):
    paddle.seed(1)
    model = BertForPretraining(tiny_config(num_hidden_layers=1), use_cpu_kernels=True)
    model.eval()
    spec = [paddle.static.InputSpec([None, None], "int64", name) for name in ("input_ids", "token_type_ids",
                                                                              "attention_mask")]
    spec.append(paddle.static.InputSpec([None], "int64", "masked_lm_positions"))
    paddle.jit.save(standard_copy(model), str(tmp_path / "bert"), input_spec=spec)
    ops = exported_op_names(tmp_path / "bert")
    # Paddle's own layer_norm and matmul + add, none of cpu_kernels' PyLayers or addmm (its Linear and LayerNorm).
    assert {"layer_norm", "matmul", "add", "softmax"} <= ops, ops
    assert not any("pylayer" in op or "addmm" in op for op in ops), ops
    exported = paddle.jit.load(str(tmp_path / "bert"))
    for batch, seq in ((2, 8), (3, 5)):  # two shapes through one program
        input_ids = paddle.to_tensor(np.random.default_rng(batch).integers(0, 99, (batch, seq)))
        attention_mask = np.ones((batch, seq), "int64")
        attention_mask[0, -2:] = 0
        inputs = (input_ids, paddle.zeros_like(input_ids), paddle.to_tensor(attention_mask),
                  paddle.to_tensor(np.array([1, seq + 2])))
        for ours, reference in zip(exported(*inputs), model(*inputs), strict=True):
            np.testing.assert_allclose(ours.numpy(), reference.numpy(), rtol=1e-5, atol=1e-6)
