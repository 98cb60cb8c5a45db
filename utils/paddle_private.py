"""The private Paddle calls the project makes, each behind a name that says what it does.

Paddle has no public API for these: a fused in-place Adam step, the fused unscale-and-check of loss scaling,
the fields of a random generator's state, and an optimizer's fp32 master copy of a low-precision parameter.
Private calls change between Paddle versions without notice, so every one lives here, with its positional
flags labelled, and tests/test_paddle_private.py checks each against an independent expectation on the
Paddle version requirements.txt pins. Signatures are those of Paddle 3.3 (paddle/phi/ops/yaml/ops.yaml and
the Python callers named below).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import paddle
from paddle import _C_ops


def fused_adam_step_(
    param: paddle.Tensor,
    grad: paddle.Tensor,
    learning_rate: paddle.Tensor,
    moment1: paddle.Tensor,
    moment2: paddle.Tensor,
    beta1_pow: paddle.Tensor,
    beta2_pow: paddle.Tensor,
    *,
    beta1: float,
    beta2: float,
    epsilon: float,
    advance_beta_pows: bool,
) -> None:
    """One Adam step (Kingma & Ba 2015, Algorithm 1) in place, in one fused kernel:

        m = beta1 m + (1 - beta1) g,  v = beta2 v + (1 - beta2) g^2,
        param = param - lr (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)

    with beta1_pow = beta1^t and beta2_pow = beta2^t of this step (one-element tensors). advance_beta_pows
    multiplies them by beta1 and beta2 afterwards; False leaves that to the caller (Paddle's
    use_global_beta_pow). No master weight, no AMSGrad, no lazy (sparse) mode.
    """
    # The argument order of ops.yaml's adam_, as paddle/optimizer/adam.py passes it.
    _C_ops.adam_(
        param, grad, learning_rate, moment1, moment2,
        None,  # moment2_max: AMSGrad only
        beta1_pow, beta2_pow,
        None,  # master_param
        None,  # skip_update: a found_inf tensor that turns the step into a no-op
        beta1, beta2, epsilon,
        False,  # lazy_mode: update only the rows a sparse gradient touches
        1000,  # min_row_size_to_use_multithread (sparse gradients only); Paddle's default
        False,  # multi_precision: update master_param instead of param
        not advance_beta_pows,  # use_global_beta_pow
        False,  # amsgrad
    )


def unscale_and_check_finite_(grads: Sequence[paddle.Tensor], scale: paddle.Tensor) -> paddle.Tensor:
    """Divide every tensor of `grads` (one dtype) by `scale` ([1], float32) in place, in one fused kernel.

    Returns a bool [1] tensor: True if any of them holds inf or NaN (their values are then unspecified).
    The call of paddle/static/amp/amp_nn.py check_finite_and_unscale in dynamic mode.
    """
    _, found_inf = _C_ops.check_finite_and_unscale_(list(grads), scale)
    return found_inf


class GeneratorStateFields(NamedTuple):
    """What a Paddle random generator's state (paddle.get_rng_state() / get_cuda_rng_state() items) holds."""

    device: int  # -1 for the CPU generator, else the GPU's index
    seed: int
    offset: int  # how far a GPU generator's Philox stream has advanced (0 on the CPU)
    engine: bytes  # the std::mt19937_64 engine in its C++ text form: 312 state words and an index


def generator_state_fields(state: paddle.base.core.GeneratorState) -> GeneratorStateFields:
    """The fields of a GeneratorState (what its pickle support, __getstate__, returns)."""
    device, seed, offset, engine = state.__getstate__()
    return GeneratorStateFields(device, seed, offset, bytes(engine))


def generator_state_from_fields(fields: GeneratorStateFields) -> paddle.base.core.GeneratorState:
    """The GeneratorState with these fields, for paddle.set_rng_state / set_cuda_rng_state."""
    state = paddle.base.core.GeneratorState.__new__(paddle.base.core.GeneratorState)
    state.__setstate__((fields.device, fields.seed, fields.offset, list(fields.engine)))
    return state


def create_master_weight(optimizer: paddle.optimizer.Optimizer, param: paddle.Tensor) -> paddle.Tensor:
    """The optimizer's fp32 master copy of a float16/bfloat16 parameter (multi_precision), made on first use.

    In dygraph mode Paddle's Optimizer._create_master_weight casts `param` to float32, names the copy
    <param.name>_fp32_master_<n> and keeps it in optimizer._master_weights[param.name], where its own
    accumulator lookups (_get_accumulator_master) find it.
    """
    return optimizer._create_master_weight(param)


def set_tf32_switches(allowed: bool) -> None:
    """Let cuBLAS matmuls and cuDNN kernels use TF32 tensor cores for float32 (Ampere and later), or not.

    Paddle 3.3 keeps the two switches in C++ (phi::SetAllowTF32Cublas / SetAllowTF32Cudnn) and binds them as
    core.set_cublas_switch / set_cudnn_switch (pybind.cc); there is no FLAGS_ entry for paddle.set_flags.
    A CPU build has the switches too, with nothing that reads them.
    """
    paddle.base.core.set_cublas_switch(allowed)
    paddle.base.core.set_cudnn_switch(allowed)


def tf32_switches() -> tuple[bool, bool]:
    """The (cuBLAS, cuDNN) TF32 switches as Paddle holds them."""
    return bool(paddle.base.core.get_cublas_switch()), bool(paddle.base.core.get_cudnn_switch())
