"""Optimizers for BERT: LAMB as NVIDIA uses it, LANS, and AdamW for fine-tuning.

- LAMB (You et al. 2020, arXiv:1904.00962) as in NVIDIA's recipe (apex FusedLAMB with use_nvlamb=False, which
  paddle.optimizer.Lamb with always_adapt=False matches): Adam moments with bias correction, epsilon outside
  the square root, decoupled weight decay, and the trust ratio ||w|| / ||update|| applied only to tensors that
  are weight-decayed; a zero norm gives a ratio of 1. Gradients are first clipped to a global norm
  (ClipGradByGlobalNorm, 1.0 in NVIDIA's recipe). On a GPU create_optimizer uses paddle's fused kernel
  (under AMP O2 `Lamb` below instead: paddle's kernel refuses fp32 gradients for fp16 weights) and paddle's
  clip; on a CPU it uses `Lamb` below, the same update built from paddle's fused Adam kernel and in-place ops,
  about 2.5 times as fast there (benchmarks/bench_optimizer.py), or, where the cpu_ops extension builds, one
  fused multi-threaded C++ kernel per tensor; and `ClipGradByGlobalNormInPlace`, the same clip with dot
  products for the norms and in-place scaling (or its factor folded into that kernel).
- LANS (Zheng et al. 2020, arXiv:2006.13484) is `Lans` below.
- AdamW (Loshchilov & Hutter 2019) is paddle.optimizer.AdamW.

All three skip weight decay for the same parameters, chosen by the role a parameter plays in the model
(`no_weight_decay_parameters`), not by patterns in parameter names.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

import paddle
import paddle.nn as nn
from paddle.nn.clip import ClipGradBase
from paddle.optimizer.lr import LRScheduler

from kernels import cpu_ops
from utils import paddle_private
from utils.cli import decay_rate, non_negative_float, positive_float

OPTIMIZER_NAMES = ("Lamb", "Lans", "AdamW")


def add_optimizer_arguments(group: argparse._ArgumentGroup, *, default: str, optimizer_help: str) -> None:
    """--optimizer (its default and help are the script's), --beta1, --beta2, --epsilon and --weight-decay, added
    to a group of the script's; out-of-range values are argparse errors naming the flag."""
    group.add_argument("--optimizer", default=default, choices=OPTIMIZER_NAMES, help=optimizer_help)
    group.add_argument("--beta1", type=decay_rate, default=0.9, help="first-moment decay rate")
    group.add_argument("--beta2", type=decay_rate, default=0.999, help="second-moment decay rate")
    group.add_argument("--epsilon", type=positive_float, default=1e-6, help="optimizer epsilon")
    group.add_argument("--weight-decay", type=non_negative_float, default=0.01,
                       help="decoupled weight decay (not on biases and LayerNorm)")


def no_weight_decay_parameters(model: nn.Layer) -> set[str]:
    """Names (param.name) of the parameters that get no weight decay.

    By role: every additive bias (a parameter a layer registers as `bias` or `<something>_bias`: each Linear's,
    the masked-LM decoder's) and the gain and bias of every LayerNorm. Embedding tables and Linear weights are
    decayed, as in Google's and NVIDIA's BERT. The rule needs no model class, so the optimizer knows none.
    """
    names = set()
    for layer in model.sublayers(include_self=True):
        for attribute, parameter in layer.named_parameters(include_sublayers=False):
            if isinstance(layer, nn.LayerNorm) or attribute == "bias" or attribute.endswith("_bias"):
                names.add(parameter.name)
    return names


class ClipGradByGlobalNormInPlace(nn.ClipGradByGlobalNorm):
    """ClipGradByGlobalNorm's function, g <- g * clip_norm / max(global norm, clip_norm), for dense fp32/fp64
    gradients, which it scales in place; other gradients (selected rows, half precision) go to paddle's.

    On a CPU paddle's clip takes each norm with its squared_l2_norm kernel and multiplies every gradient by a
    broadcast [1] tensor into a new tensor; BLAS dot products and an in-place scale by a number do the same
    with less memory traffic. BERT-base, one thread, CPU time, in-process A/B alternating the two clips,
    measured under load (load average 5.5 on 2 cores) on an Intel Xeon: clip + LAMB 1.14x (1141 -> 965 ms);
    Step: 1.015x (124 ms of an 8.5 s step). A factor of 1 (global norm within clip_norm) leaves the gradients
    as they are.

    defer_scaling=True leaves the gradients unscaled and records the factor (deferred_factor) for the
    optimizer to apply as it reads each gradient, which saves a pass over all gradients where the optimizer
    is the fused CPU Lamb (create_optimizer sets it there alone). This module's Lamb and Lans apply a
    deferred factor; paddle's optimizers would ignore it, so never give them such a clip.
    """

    def __init__(self, clip_norm: float, defer_scaling: bool = False):
        super().__init__(clip_norm=clip_norm)
        self.defer_scaling = defer_scaling
        self._deferred_factors: dict[str, float] = {}

    def deferred_factor(self, param: paddle.Tensor) -> float:
        """The factor the last clip left for param's gradient (1 where it scaled in place or had nothing to do)."""
        return self._deferred_factors.get(param.name, 1.0)

    @paddle.no_grad()
    def _dygraph_clip(self, params_grads):
        self._deferred_factors = {}
        clipped = [(p, g) for p, g in params_grads if g is not None and getattr(p, "need_clip", True)]
        if any(g.is_selected_rows() or g.dtype not in (paddle.float32, paddle.float64) for _, g in clipped):
            return super()._dygraph_clip(params_grads)
        # The squared norms are summed in float64 on the host: 200-odd numbers, no device sync on a CPU.
        global_norm = math.sqrt(sum(float(_dot(g.reshape([-1]))) for _, g in clipped))
        factor = self.clip_norm / max(global_norm, self.clip_norm)
        if factor != 1.0:
            if self.defer_scaling:
                self._deferred_factors = {p.name: factor for p, _ in clipped}
            else:
                for _, g in clipped:
                    g.scale_(factor)
        return params_grads


class _LayerwiseAdaptiveOptimizer(paddle.optimizer.Optimizer):
    """What LAMB and LANS share: per-tensor Adam moments and beta^t accumulators, fp32 master weights for
    fp16/bf16 parameters under multi_precision, and scratch buffers that keep the update allocation-free.

    The constructor takes paddle.optimizer.Lamb's arguments; parameter groups (dicts) are not supported.
    Subclasses implement _update. Dygraph only. A step that paddle.amp.GradScaler finds non-finite is skipped
    by paddle.optimizer.Optimizer before _update runs.
    """

    _moment1_acc_str = "moment1"
    _moment2_acc_str = "moment2"
    _beta1_pow_acc_str = "beta1_pow_acc"
    _beta2_pow_acc_str = "beta2_pow_acc"
    _scratch_count: int  # full-size work tensors per parameter shape that _update needs

    def __init__(
        self,
        learning_rate: float | LRScheduler = 0.001,
        lamb_weight_decay: float = 0.01,
        beta1: float = 0.9,
        beta2: float = 0.999,
        epsilon: float = 1e-6,
        parameters=None,
        grad_clip: ClipGradBase | None = None,
        exclude_from_weight_decay_fn: Callable[[paddle.Tensor], bool] | None = None,
        multi_precision: bool = False,
        name: str | None = None,
    ):
        kind = type(self).__name__
        for arg, value in (("beta1", beta1), ("beta2", beta2)):
            if not 0.0 <= value < 1.0:
                raise ValueError(f"{kind}: {arg} must be in [0, 1), got {value}")
        if epsilon < 0:
            raise ValueError(f"{kind}: epsilon must be non-negative, got {epsilon}")
        if lamb_weight_decay < 0:
            raise ValueError(f"{kind}: lamb_weight_decay must be non-negative, got {lamb_weight_decay}")
        if parameters is not None:
            parameters = list(parameters)
            if any(isinstance(p, dict) for p in parameters):
                raise ValueError(f"{kind}: parameter groups are not supported; pass a list of parameters")
        super().__init__(
            learning_rate=learning_rate, parameters=parameters, weight_decay=None, grad_clip=grad_clip, name=name
        )
        self.type = kind.lower()
        self._beta1 = float(beta1)
        self._beta2 = float(beta2)
        self._epsilon = float(epsilon)
        self._lamb_weight_decay = float(lamb_weight_decay)
        self._exclude_from_weight_decay_fn = exclude_from_weight_decay_fn
        self._multi_precision = multi_precision
        self._master_weights = {}
        self._scratch_buffers = {}
        self._rounded_betas = {}
        self._constants = {}

    def _scratch(self, shape: list[int], dtype: paddle.dtype) -> list[paddle.Tensor]:
        """Work tensors of this shape, shared by all parameters of the shape (updates run one by one)."""
        key = (tuple(shape), dtype)
        if key not in self._scratch_buffers:
            self._scratch_buffers[key] = [paddle.empty(shape, dtype=dtype) for _ in range(self._scratch_count)]
        return self._scratch_buffers[key]

    def _betas_in(self, dtype: paddle.dtype) -> tuple[float, float]:
        """beta1 and beta2 rounded to dtype, so that 1 - beta and the beta^t accumulators (kept in dtype) agree."""
        if dtype not in self._rounded_betas:
            betas = (self._beta1, self._beta2)
            self._rounded_betas[dtype] = tuple(float(paddle.to_tensor(beta, dtype=dtype)) for beta in betas)
        return self._rounded_betas[dtype]

    def _create_accumulators(self, block, parameters):
        for param in parameters:
            if param.name in self._already_create_accumulator:
                continue
            # Under multi_precision the state belongs to the fp32 master copy (where _get_accumulator_master
            # looks for it); the bookkeeping stays under the parameter's name, which the next step asks for.
            owner = param
            if self._multi_precision and self._is_dtype_fp16_or_bf16(param.dtype):
                owner = paddle_private.create_master_weight(self, param)
            dtype = _compute_dtype(owner.dtype)
            self._add_accumulator(self._moment1_acc_str, owner, dtype=dtype)
            self._add_accumulator(self._moment2_acc_str, owner, dtype=dtype)
            # beta^t of the coming step, as paddle's Lamb keeps it: starts at beta (t = 1).
            self._add_accumulator(self._beta1_pow_acc_str, owner, dtype=dtype, fill_value=self._beta1, shape=[1])
            self._add_accumulator(self._beta2_pow_acc_str, owner, dtype=dtype, fill_value=self._beta2, shape=[1])
            self._already_create_accumulator.add(param.name)

    def _append_optimize_op(self, block, param_and_grad):
        if not paddle.in_dynamic_mode():
            raise RuntimeError(f"{type(self).__name__} runs in dygraph mode only")
        param, grad = param_and_grad
        use_master = self._multi_precision and self._is_dtype_fp16_or_bf16(param.dtype)
        target = self._master_weights[param.name] if use_master else param
        state = [
            self._get_accumulator_master(name, param)
            for name in (self._moment1_acc_str, self._moment2_acc_str, self._beta1_pow_acc_str, self._beta2_pow_acc_str)
        ]
        excluded = self._exclude_from_weight_decay_fn is not None and self._exclude_from_weight_decay_fn(param)
        weight_decay = 0.0 if excluded else self._lamb_weight_decay
        lr = self._create_param_lr(param_and_grad)
        deferring_clip = isinstance(self._grad_clip, ClipGradByGlobalNormInPlace) and self._grad_clip.defer_scaling
        grad_scale = self._grad_clip.deferred_factor(param) if deferring_clip else 1.0

        with paddle.no_grad():
            dtype = _compute_dtype(target.dtype)
            weight = target if target.dtype == dtype else target.astype(dtype)
            if grad.dtype != dtype:
                grad = grad.astype(dtype)
            betas = self._betas_in(dtype)
            self._update(weight, grad, *state, lr, weight_decay, betas, grad_scale)
            if weight is not target:
                paddle.assign(weight.astype(target.dtype), output=target)
            if use_master:
                paddle.assign(target.astype(param.dtype), output=param)
            state[2].scale_(betas[0])
            state[3].scale_(betas[1])
        return None

    def _update(
        self, weight, grad, moment1, moment2, beta1_pow, beta2_pow, lr, weight_decay, betas, grad_scale
    ) -> None:
        """Update weight and the moments in place with the gradient grad_scale * grad (grad_scale: the clip's
        deferred factor). beta1_pow = beta1^t of this step; lr is a tensor."""
        raise NotImplementedError

    def _adam_direction(self, out, grad, moment1, moment2, beta1_pow, beta2_pow, betas):
        """Advance m and v with grad, then out = (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps).

        One fused pass: paddle's Adam kernel stepping a zeroed `out` with learning rate -1; the beta^t
        accumulators are left to the caller (use_global_beta_pow). On a CPU this is about 2.5 times as fast as
        the same arithmetic in separate in-place ops.
        """
        out.zero_()
        paddle_private.fused_adam_step_(
            out, grad, self._constant(-1.0, out), moment1, moment2, beta1_pow, beta2_pow,
            beta1=betas[0], beta2=betas[1], epsilon=self._epsilon, advance_beta_pows=False,
        )
        return out

    def _constant(self, value: float, like: paddle.Tensor) -> paddle.Tensor:
        """A cached one-element tensor of like's dtype and place."""
        key = (value, like.dtype, str(like.place))
        if key not in self._constants:
            self._constants[key] = paddle.full([1], value, dtype=like.dtype)
        return self._constants[key]


class Lamb(_LayerwiseAdaptiveOptimizer):
    r"""LAMB as NVIDIA uses it (You et al. 2020, arXiv:1904.00962, Algorithm 2; apex FusedLAMB with
    use_nvlamb=False): for each tensor w with gradient g at step t,

        m = beta1 m + (1 - beta1) g,   v = beta2 v + (1 - beta2) g^2
        u = (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps) + lambda w
        w = w - lr (||w|| / ||u||) u       if lambda > 0 (a zero norm gives a ratio of 1)
        w = w - lr u                       if the tensor is excluded from weight decay

    The same update as paddle.optimizer.Lamb (always_adapt=False), built from paddle's fused Adam kernel and
    in-place tensor ops; on a CPU it runs about 2.5 times as fast as paddle's lamb kernel. Given cpu_ops (the
    extension cpu_ops.load() builds), fp32/fp64 CPU tensors are updated instead by its fused multi-threaded
    kernel, which applies the clip's deferred factor as it reads the gradient: clip + LAMB over BERT-base's
    parameters 2.52x at one thread (733 -> 280 ms), 2.44x at two (in-process A/B, load average 2).
    """

    _scratch_count = 1

    def __init__(self, *args, cpu_ops: cpu_ops.CpuOps | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self._cpu_ops = cpu_ops

    def _update(self, weight, grad, moment1, moment2, beta1_pow, beta2_pow, lr, weight_decay, betas, grad_scale):
        if self._cpu_ops is not None and weight.place.is_cpu_place():
            self._cpu_ops.lamb_(weight, grad, moment1, moment2, beta1_pow, beta2_pow, lr, beta1=betas[0],
                                beta2=betas[1], epsilon=self._epsilon, weight_decay=weight_decay,
                                grad_scale=grad_scale)
            return
        if grad_scale != 1.0:
            grad = grad.scale(grad_scale)
        (adam_term,) = self._scratch(weight.shape, weight.dtype)
        self._adam_direction(adam_term, grad, moment1, moment2, beta1_pow, beta2_pow, betas)
        if not weight_decay:
            weight.subtract_(adam_term.scale_(lr))
            return
        # u = adam_term + lambda w; its norm follows from dot products, so u itself is never formed.
        flat_weight = weight.reshape([-1])
        weight_sq = _dot(flat_weight)
        update_sq = _decayed_norm_sq(adam_term.reshape([-1]), flat_weight, weight_sq, weight_decay)
        step = lr * _trust_ratio(weight_sq, update_sq)
        weight.scale_(1.0 - weight_decay * step)
        weight.subtract_(adam_term.scale_(step))


class Lans(_LayerwiseAdaptiveOptimizer):
    r"""LANS: LAMB with per-tensor normalised gradients and a Nesterov-style second term.

    Zheng et al. 2020, "Accelerated Large Batch Optimization of BERT Pretraining in 54 minutes"
    (arXiv:2006.13484), the LANS algorithm. For each parameter tensor x with gradient g, at step t:

        g~ = g / (||g|| + eps)                          normalised gradient (left at 0 when ||g|| = 0)
        m  = beta1 m + (1 - beta1) g~                    Adam moments of the normalised gradient
        v  = beta2 v + (1 - beta2) g~^2
        d  = sqrt(v / (1 - beta2^t)) + eps               bias-corrected denominator, eps outside the root
        r  = (m / (1 - beta1^t)) / d + lambda x          momentum term, with decoupled weight decay
        c  = g~ / d + lambda x                           gradient (Nesterov) term, same decay
        x  = x - lr beta1 (||x|| / ||r||) r - lr (1 - beta1) (||x|| / ||c||) c

    A trust ratio whose numerator or denominator is 0 is replaced by 1. Both trust ratios use the weights
    before the step and apply to every tensor, also those excluded from weight decay (lambda = 0 for them).

    Where the paper leaves details open this follows its authors' fused kernels (szhengac/apex
    multi_tensor_lans.cu, which the paper links, and MXNet's multi_lans): eps in the gradient normalisation
    as in the apex kernel (MXNet's kernel divides by ||g|| alone and would give NaN for a zero gradient), and
    the zero-norm rule of both kernels.

    Note: a gradient-norm clip (grad_clip=ClipGradByGlobalNorm) scales every tensor's gradient by one common
    factor, which the per-tensor normalisation removes again, so clipping barely changes a LANS step.
    """

    _scratch_count = 3

    def _update(self, weight, grad, moment1, moment2, beta1_pow, beta2_pow, lr, weight_decay, betas, grad_scale):
        if grad_scale != 1.0:
            grad = grad.scale(grad_scale)
        beta1 = betas[0]
        normalised, momentum_term, gradient_term = self._scratch(weight.shape, weight.dtype)
        grad_norm = _dot(grad.reshape([-1])).sqrt()
        paddle.assign(grad, output=normalised)
        normalised.scale_(paddle.where(grad_norm > 0, 1.0 / (grad_norm + self._epsilon), paddle.zeros_like(grad_norm)))

        # r - lambda x = (m / (1 - beta1^t)) / d, with m and v advanced by g~.
        self._adam_direction(momentum_term, normalised, moment1, moment2, beta1_pow, beta2_pow, betas)
        # c - lambda x = g~ / d: the same kernel with beta1 = 0 (its first moment is g~ itself, in place),
        # beta2 = 1 (v stays as it is) and beta1^t = 0 (no first-moment bias correction).
        self._adam_direction(
            gradient_term, normalised, normalised, moment2, self._constant(0.0, beta1_pow), beta2_pow, (0.0, 1.0)
        )

        # The trust ratios' norms ||a + lambda x|| follow from dot products, so r and c are never formed.
        flat_weight = weight.reshape([-1])
        weight_sq = _dot(flat_weight)
        momentum_sq = _decayed_norm_sq(momentum_term.reshape([-1]), flat_weight, weight_sq, weight_decay)
        gradient_sq = _decayed_norm_sq(gradient_term.reshape([-1]), flat_weight, weight_sq, weight_decay)

        # x <- x (1 - lambda (s_r + s_c)) - s_r (r - lambda x) - s_c (c - lambda x), with the step sizes
        # s_r = lr beta1 phi_r and s_c = lr (1 - beta1) phi_c.
        momentum_step = lr * (beta1 * _trust_ratio(weight_sq, momentum_sq))
        gradient_step = lr * ((1.0 - beta1) * _trust_ratio(weight_sq, gradient_sq))
        momentum_term.scale_(momentum_step).add_(gradient_term.scale_(gradient_step))
        if weight_decay:
            weight.scale_(1.0 - weight_decay * (momentum_step + gradient_step))
        weight.subtract_(momentum_term)


def _decayed_norm_sq(term, weight, weight_sq, weight_decay):
    """||term + weight_decay * weight||^2 of flat tensors from dot products, without forming the sum:
    ||term||^2 + 2 weight_decay <term, weight> + weight_decay^2 ||weight||^2."""
    norm_sq = _dot(term)
    if weight_decay:
        norm_sq = norm_sq + 2.0 * weight_decay * _dot(term, weight) + weight_decay**2 * weight_sq
    return norm_sq


def _dot(x: paddle.Tensor, y: paddle.Tensor | None = None) -> paddle.Tensor:
    """<x, y> (default <x, x>) of 1-D tensors. matmul of two vectors is a BLAS dot: on CPU about 5x faster
    than paddle.dot and 20x faster than paddle.linalg.norm."""
    return paddle.matmul(x, x if y is None else y)


def _trust_ratio(weight_sq: paddle.Tensor, term_sq: paddle.Tensor) -> paddle.Tensor:
    """||w|| / ||term|| from squared norms, or 1 when either norm is 0 (both authors' kernels do this)."""
    usable = (weight_sq > 0) & (term_sq > 0)
    ratio = (weight_sq / paddle.where(usable, term_sq, weight_sq)).sqrt()
    return paddle.where(usable, ratio, paddle.ones_like(ratio))


def _compute_dtype(dtype: paddle.dtype) -> paddle.dtype:
    """Half-precision tensors are updated in fp32; fp32 and fp64 in their own precision."""
    return paddle.float32 if dtype in (paddle.float16, paddle.bfloat16) else dtype


def create_optimizer(
    name: str,
    model: nn.Layer,
    learning_rate: float | LRScheduler,
    weight_decay: float,
    beta1: float,
    beta2: float,
    epsilon: float,
    max_grad_norm: float | None,
    multi_precision: bool = False,
    use_paddle_lamb: bool | None = None,
) -> paddle.optimizer.Optimizer:
    """Build "Lamb", "Lans" or "AdamW" over model.parameters().

    Weight decay skips no_weight_decay_parameters(model). max_grad_norm clips the gradients to that global
    norm before the update (ClipGradByGlobalNorm on a GPU, ClipGradByGlobalNormInPlace on a CPU); None turns
    clipping off. multi_precision keeps fp32 master weights for fp16/bf16 parameters.

    "Lamb" is paddle.optimizer.Lamb (a fused kernel) when use_paddle_lamb is True, and this module's Lamb
    (the same update in in-place ops, faster on a CPU) when it is False; None picks paddle's on a GPU unless
    multi_precision is set (AMP O2, whose fp32 master gradients paddle's kernel cannot take). Both
    keep their state under the same names, so an optimizer checkpoint of one loads into the other. On a CPU
    our Lamb runs the cpu_ops extension's fused kernel, with the clip's factor folded into it, wherever the
    extension builds.
    """
    if max_grad_norm is not None and max_grad_norm <= 0:
        raise ValueError(f"max_grad_norm must be positive or None, got {max_grad_norm}")
    if weight_decay < 0:
        raise ValueError(f"weight_decay must be non-negative, got {weight_decay}")
    excluded = no_weight_decay_parameters(model)
    on_gpu = paddle.get_device().startswith("gpu")
    if use_paddle_lamb is None:
        # Paddle's lamb kernel reads the gradient in the parameter's dtype (grad.data<T>() in
        # lamb_kernel_impl.h), so it refuses the fp32 gradients that O2's master_grad gives float16/bfloat16
        # parameters; ours updates the fp32 master weight from them.
        use_paddle_lamb = on_gpu and not multi_precision
    fused_lamb = cpu_ops.load() if name == "Lamb" and not use_paddle_lamb and not on_gpu else None
    grad_clip = None
    if max_grad_norm is not None and on_gpu:
        grad_clip = nn.ClipGradByGlobalNorm(clip_norm=max_grad_norm)
    elif max_grad_norm is not None:
        grad_clip = ClipGradByGlobalNormInPlace(clip_norm=max_grad_norm, defer_scaling=fused_lamb is not None)
    parameters = model.parameters()
    if name == "Lamb":
        lamb_options = {} if use_paddle_lamb else {"cpu_ops": fused_lamb}
        lamb = paddle.optimizer.Lamb if use_paddle_lamb else Lamb
        return lamb(
            learning_rate=learning_rate, lamb_weight_decay=weight_decay, beta1=beta1, beta2=beta2, epsilon=epsilon,
            parameters=parameters, grad_clip=grad_clip, exclude_from_weight_decay_fn=lambda p: p.name in excluded,
            multi_precision=multi_precision, **lamb_options,
        )
    if name == "Lans":
        return Lans(
            learning_rate=learning_rate, lamb_weight_decay=weight_decay, beta1=beta1, beta2=beta2, epsilon=epsilon,
            parameters=parameters, grad_clip=grad_clip, exclude_from_weight_decay_fn=lambda p: p.name in excluded,
            multi_precision=multi_precision,
        )
    if name == "AdamW":
        return paddle.optimizer.AdamW(
            learning_rate=learning_rate, beta1=beta1, beta2=beta2, epsilon=epsilon, parameters=parameters,
            weight_decay=weight_decay, apply_decay_param_fun=lambda n: n not in excluded, grad_clip=grad_clip,
            multi_precision=multi_precision,
        )
    raise ValueError(f"unknown optimizer {name!r}; expected one of {OPTIMIZER_NAMES}")
