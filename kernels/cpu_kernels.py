"""CPU fast paths for BERT training in Paddle: which MKL kernels run, and cheaper forms of the hot ops.

modeling.py builds a model from these layers when it runs on the CPU (the choice is made once, when the model
is built); on a GPU, and in exported programs (modeling.standard_copy), it keeps Paddle's own ops (flash
attention through scaled_dot_product_attention, fused kernels, AMP). Every function here computes
the same mathematical function as the Paddle op it stands in for; tests/test_cpu_kernels.py checks values
and gradients against those ops.

Why each one exists (what each gave, measured, is in docs/cpu-training-profile.md, "The layers of
cpu_kernels.py" and "The C++ extension"):

- MKL code path. Paddle's CPU build does its matrix products in Intel MKL (mklml 2019), which picks its
  kernels by CPU vendor: on an AMD processor it ignores AVX2/AVX-512 and runs a generic, much slower path.
  MKL_DEBUG_CPU_TYPE, which this MKL reads when it first dispatches, selects the kernels explicitly;
  use_fast_mkl_kernels() sets it before Paddle's first matrix product to the best code path the CPU's own
  feature flags allow.
- Memory. Paddle's CPU allocator takes every tensor from malloc and frees it after use. glibc serves blocks
  above its mmap threshold (at most 32 MiB by default) with fresh mmap pages, and returns freed heap memory
  above its trim threshold to the system, so such tensors (the word-embedding gradient, the optimizer's work
  tensors for it) fault in new, zeroed pages every time. keep_freed_memory() raises both thresholds
  (mallopt), for somewhat more peak memory.
- Linear. nn.Linear adds its bias with a broadcasting add, whose CPU kernel (and the reduction in its
  gradient) is slow next to the matrix product itself. `linear` makes the bias the C operand of one addmm and
  computes its gradient as a matrix-vector product.
- LayerNorm. Paddle's forward kernel is fast, its gradient kernel many times slower. Where the cpu_ops
  extension builds, `LayerNorm` runs its C++ kernels instead (float32): forward and gradient one row per
  pass, multi-threaded, with each row's statistics in double (as accurate as the exact result to a few float
  ulps, where Paddle's op and a float-only kernel lose digits on rows with a small spread); elsewhere it runs
  Paddle's op.
- Dropout. Paddle's CPU dropout draws a float per element from mt19937_64 and its gradient re-reads a byte
  mask; `dropout` draws int32s, keeps a float mask that already holds the 1/(1-p) scale, and its gradient is
  one multiplication.
- Attention heads. [B, S, N, D] -> [B, N, S, D] in Paddle is a strided view, and the ops after it copy it
  element by element; adding a [B, 1, 1, S] attention mask to [B, N, S, S] scores by broadcasting is much
  slower than a same-shape add. `attention` moves whole D-float rows with one gather per tensor and adds a
  mask materialised as [B, N, S, S] (once per forward, by modeling.BertModel).
- GELU. Paddle's gelu and gelu_grad kernels run on one thread, scalar erf. `exact_gelu` runs the cpu_ops
  extension's C++ kernels (csrc/cpu_ops.cc): one OpenMP pass each way over glibc's 8-wide AVX2 erff/expf.
  (The extension's LAMB step is optimizer.Lamb's.)
"""

from __future__ import annotations

import ctypes
import functools
import math
import os
import sys
from collections.abc import Callable

import numpy as np
import paddle
import paddle.nn.functional as F
from paddle.autograd import PyLayer

from kernels import cpu_ops

# ---------------------------------------------------------------------------------------------
# GELU
# ---------------------------------------------------------------------------------------------


def exact_gelu() -> Callable[[paddle.Tensor], paddle.Tensor]:
    """F.gelu(x, approximate=False) for the CPU path, chosen when the layer is built: float32 tensors run the
    cpu_ops extension's fused kernels (forward and gradient one multi-threaded pass each) where it builds;
    other dtypes (AMP), and every tensor where it does not build, run Paddle's."""
    ops = cpu_ops.load()
    if ops is None:
        return functools.partial(F.gelu, approximate=False)

    def gelu(x: paddle.Tensor) -> paddle.Tensor:
        return ops.gelu(x) if x.dtype == paddle.float32 else F.gelu(x, approximate=False)

    return gelu


# ---------------------------------------------------------------------------------------------
# MKL code path
# ---------------------------------------------------------------------------------------------

# MKL_DEBUG_CPU_TYPE values of MKL 2019: 5 = AVX2 kernels, 7 = AVX-512 (Skylake-SP) kernels.
_MKL_AVX2, _MKL_AVX512 = "5", "7"
_AVX512_FLAGS = {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"}


def mkl_cpu_type(vendor: str, flags: set[str]) -> str | None:
    """The MKL_DEBUG_CPU_TYPE that gives an AMD CPU with these flags MKL's fastest kernels it can run.

    None for other vendors (MKL already chooses well on Intel) and for CPUs without AVX2 and FMA.
    """
    if vendor != "AuthenticAMD":
        return None
    if _AVX512_FLAGS <= flags:
        return _MKL_AVX512
    if {"avx2", "fma"} <= flags:
        return _MKL_AVX2
    return None


def use_fast_mkl_kernels(cpuinfo_path: str = "/proc/cpuinfo") -> str | None:
    """Set MKL_DEBUG_CPU_TYPE for this process (unless the user set it) and return the value in effect.

    It takes effect only if MKL has not dispatched a kernel yet in this process, so call it before the
    first matrix product (runtime.apply_cpu_tweaks does, in the entry scripts).
    """
    if "MKL_DEBUG_CPU_TYPE" not in os.environ:
        cpu_type = mkl_cpu_type(*cpu_ops.cpu_vendor_and_flags(cpuinfo_path))
        if cpu_type is not None:
            os.environ["MKL_DEBUG_CPU_TYPE"] = cpu_type
    return os.environ.get("MKL_DEBUG_CPU_TYPE")


# ---------------------------------------------------------------------------------------------
# Memory
# ---------------------------------------------------------------------------------------------

# mallopt parameters from glibc's <malloc.h>.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_HEAP_KEEP_BYTES = 1 << 30


def keep_freed_memory() -> bool:
    """Have glibc malloc serve blocks up to 1 GiB from its heap and keep freed memory there for reuse.

    Returns whether the setting took effect (False off Linux/glibc, or when the user set glibc's
    MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ themselves).
    """
    if sys.platform != "linux" or "MALLOC_MMAP_THRESHOLD_" in os.environ or "MALLOC_TRIM_THRESHOLD_" in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, _HEAP_KEEP_BYTES)) and bool(mallopt(_M_TRIM_THRESHOLD, _HEAP_KEEP_BYTES))


# ---------------------------------------------------------------------------------------------
# Linear
# ---------------------------------------------------------------------------------------------


class _AddmmLinear(PyLayer):
    """y = x W + b for 2-D x [T, I], W [I, O], b [O]."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        ctx.needs_grad = (not x.stop_gradient, not weight.stop_gradient, not bias.stop_gradient)
        return paddle.addmm(bias, x, weight)

    @staticmethod
    def backward(ctx, grad_y):
        x, weight = ctx.saved_tensor()
        x_needs, weight_needs, bias_needs = ctx.needs_grad
        grad_x = paddle.matmul(grad_y, weight, transpose_y=True) if x_needs else None
        grad_weight = paddle.matmul(x, grad_y, transpose_x=True) if weight_needs else None
        grad_bias = None
        if bias_needs:
            ones = paddle.ones([1, grad_y.shape[0]], dtype=grad_y.dtype)
            grad_bias = paddle.matmul(ones, grad_y).reshape([-1])  # column sums as a GEMV
        return grad_x, grad_weight, grad_bias


def linear(x: paddle.Tensor, weight: paddle.Tensor, bias: paddle.Tensor | None) -> paddle.Tensor:
    """F.linear(x, weight, bias) for x [..., I], weight [I, O]: one addmm, the bias gradient a GEMV."""
    if bias is None:
        return paddle.matmul(x, weight)
    rows = x.reshape([-1, x.shape[-1]])
    return _AddmmLinear.apply(rows, weight, bias).reshape([*x.shape[:-1], weight.shape[-1]])


class Linear(paddle.nn.Linear):
    """paddle.nn.Linear (same parameters, names and layout) that runs `linear`."""

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        return linear(x, self.weight, self.bias)


# ---------------------------------------------------------------------------------------------
# LayerNorm
# ---------------------------------------------------------------------------------------------


class LayerNorm(paddle.nn.LayerNorm):
    """paddle.nn.LayerNorm over the last axis, with a gain and a bias (same parameters), that runs the cpu_ops
    extension's fused kernels for float32 where the extension builds (chosen when the layer is built), and
    Paddle's op otherwise."""

    def __init__(self, normalized_shape: int, epsilon: float = 1e-5):
        super().__init__(normalized_shape, epsilon=epsilon)
        self._ops = cpu_ops.load()

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        if self._ops is not None and x.dtype == paddle.float32 and self.weight.dtype == paddle.float32:
            return self._ops.layer_norm(x, self.weight, self.bias, self._epsilon)
        return F.layer_norm(x, x.shape[-1], self.weight, self.bias, self._epsilon)


# ---------------------------------------------------------------------------------------------
# Dropout
# ---------------------------------------------------------------------------------------------

_INT32_LOW, _INT32_HIGH = -(2**31), 2**31 - 1  # paddle.randint draws from [low, high)


class _MaskDropout(PyLayer):
    """x * mask with a float mask of 0 and 1/(1-p); its gradient is grad * mask."""

    @staticmethod
    def forward(ctx, x, p):
        # r is uniform over the 2^32 - 1 integers of [low, high); dropping r < threshold drops with
        # probability round(p (2^32 - 1)) / (2^32 - 1), p to within 1.2e-10.
        threshold = _INT32_LOW + round(p * (_INT32_HIGH - _INT32_LOW))
        random = paddle.randint(_INT32_LOW, _INT32_HIGH, x.shape, dtype="int32")
        mask = (random >= threshold).astype(x.dtype).scale_(1.0 / (1.0 - p))
        ctx.save_for_backward(mask)
        return x * mask

    @staticmethod
    def backward(ctx, grad_y):
        (mask,) = ctx.saved_tensor()
        return grad_y * mask


def dropout(x: paddle.Tensor, p: float, training: bool = True) -> paddle.Tensor:
    """F.dropout(x, p, training) in its default upscale_in_train mode, drawing from Paddle's generator."""
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * 0.0
    return _MaskDropout.apply(x, float(p))


# ---------------------------------------------------------------------------------------------
# Attention
# ---------------------------------------------------------------------------------------------


class _PermuteRows(PyLayer):
    """x[index] for a permutation `index` of x's rows; the gradient is grad[inverse]."""

    @staticmethod
    def forward(ctx, x, index, inverse):
        ctx.save_for_backward(inverse)
        return paddle.gather(x, index)

    @staticmethod
    def backward(ctx, grad_y):
        (inverse,) = ctx.saved_tensor()
        return paddle.gather(grad_y, inverse), None, None


# A model asks for at most two keys per batch shape (split with P = 3 or 1, merge with P = 1), and each entry
# holds two int64 tensors of B*S*P*N elements (2 x 6 MiB for B = 32, S = 512, P = 3, N = 16). Fine-tuning pads
# each batch to its longest feature, so new shapes keep coming: 16 entries keep the shapes of the last few
# batches (training and evaluation) without growing with the number of lengths seen.
HEAD_PERMUTATION_CACHE_SIZE = 16


@functools.lru_cache(maxsize=HEAD_PERMUTATION_CACHE_SIZE)
def _head_permutation(batch: int, seq: int, parts: int, heads: int) -> tuple[paddle.Tensor, paddle.Tensor]:
    """Row orders taking [B, S, P, N] rows of D floats to [P, B, N, S], and back."""
    rows = np.arange(batch * seq * parts * heads).reshape(batch, seq, parts, heads)
    index = rows.transpose(2, 0, 3, 1).reshape(-1)
    inverse = np.empty_like(index)
    inverse[index] = np.arange(index.size)
    return paddle.to_tensor(index), paddle.to_tensor(inverse)


def split_heads(x: paddle.Tensor, parts: int, heads: int) -> paddle.Tensor:
    """[B, S, P*N*D] (P tensors side by side, each N heads of D) -> contiguous [P, B, N, S, D]."""
    batch, seq, width = x.shape
    head_dim = width // (parts * heads)
    index, inverse = _head_permutation(batch, seq, parts, heads)
    rows = _PermuteRows.apply(x.reshape([-1, head_dim]), index, inverse)
    return rows.reshape([parts, batch, heads, seq, head_dim])


def merge_heads(x: paddle.Tensor) -> paddle.Tensor:
    """[B, N, S, D] -> contiguous [B, S, N*D]."""
    batch, heads, seq, head_dim = x.shape
    index, inverse = _head_permutation(batch, seq, 1, heads)
    rows = _PermuteRows.apply(x.reshape([-1, head_dim]), inverse, index)
    return rows.reshape([batch, seq, heads * head_dim])


def attention(
    query: paddle.Tensor,
    key: paddle.Tensor,
    value: paddle.Tensor,
    attention_mask: paddle.Tensor | None,
    dropout_p: float,
    training: bool,
) -> paddle.Tensor:
    """softmax(q k^T / sqrt(D) + mask) v per head, with dropout on the probabilities.

    query, key, value: [B, N, S, D]; attention_mask: additive [B, N, S, S] (0 = may be attended to, -inf = not),
    or None. Returns the context [B, N, S, D]. The same function as F.scaled_dot_product_attention with those
    arguments, in its layout [B, N, S, D] instead of [B, S, N, D].
    """
    head_dim = query.shape[-1]
    scores = paddle.matmul(query * (1.0 / math.sqrt(head_dim)), key, transpose_y=True)  # [B, N, S, S]
    if attention_mask is not None:
        scores = scores + attention_mask  # a same-shape add
    probs = dropout(F.softmax(scores, axis=-1), dropout_p, training)
    return paddle.matmul(probs, value)


class Dropout(paddle.nn.Dropout):
    """paddle.nn.Dropout in its default upscale_in_train mode over all elements, that runs `dropout`."""

    def __init__(self, p: float = 0.5):
        super().__init__(p)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        return dropout(x, self.p, self.training)
