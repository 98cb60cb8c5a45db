"""Optimizers for BERT: LAMB as NVIDIA uses it, LANS, and AdamW for fine-tuning.

- LAMB (You et al. 2020, arXiv:1904.00962) is paddle.optimizer.Lamb, which matches NVIDIA's recipe (apex
  FusedLAMB with use_nvlamb=False): Adam moments with bias correction, epsilon outside the square root,
  decoupled weight decay, and the trust ratio ||w|| / ||update|| applied only to tensors that are weight-decayed
  (always_adapt=False); a zero norm gives a ratio of 1. Gradients are first clipped to a global norm
  (ClipGradByGlobalNorm, 1.0 in NVIDIA's recipe).
- LANS (Zheng et al. 2020, arXiv:2006.13484) is `Lans` below.
- AdamW (Loshchilov & Hutter 2019) is paddle.optimizer.AdamW.

All three skip weight decay for the same parameters, chosen by the role a parameter plays in the model
(`no_weight_decay_parameters`), not by patterns in parameter names.
"""

from __future__ import annotations

from collections.abc import Callable

import paddle
import paddle.nn as nn
from paddle.nn.clip import ClipGradBase
from paddle.optimizer.lr import LRScheduler

from modeling import BertPretrainingHeads

OPTIMIZER_NAMES = ("Lamb", "Lans", "AdamW")


def no_weight_decay_parameters(model: nn.Layer) -> set[str]:
    """Names (param.name) of the parameters that get no weight decay.

    By role: the bias of every Linear layer, the gain and bias of every LayerNorm, and the masked-LM decoder
    bias. Embedding tables and Linear weights are decayed, as in Google's and NVIDIA's BERT.
    """
    names = set()
    for layer in model.sublayers(include_self=True):
        if isinstance(layer, nn.Linear) and layer.bias is not None:
            names.add(layer.bias.name)
        if isinstance(layer, nn.LayerNorm):
            names.update(p.name for p in layer.parameters(include_sublayers=False))
        if isinstance(layer, BertPretrainingHeads):
            names.add(layer.decoder_bias.name)
    return names


class Lans(paddle.optimizer.Optimizer):
    r"""LANS: LAMB with per-tensor normalised gradients and a Nesterov-style second term.

    Zheng et al. 2020, "Accelerated Large Batch Optimization of BERT Pretraining in 54 minutes"
    (arXiv:2006.13484), Algorithm 2. For each parameter tensor x with gradient g, at step t:

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

    The constructor takes paddle.optimizer.Lamb's arguments; parameter groups (dicts) are not supported.
    With multi_precision, fp16/bf16 parameters are updated through fp32 master weights and the moments are
    fp32, as in paddle's optimizers.

    Note: a gradient-norm clip (grad_clip=ClipGradByGlobalNorm) scales every tensor's gradient by one common
    factor, which the per-tensor normalisation removes again, so clipping barely changes a LANS step.
    """

    _moment1_acc_str = "moment1"
    _moment2_acc_str = "moment2"
    _beta1_pow_acc_str = "beta1_pow_acc"
    _beta2_pow_acc_str = "beta2_pow_acc"

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
        for arg, value in (("beta1", beta1), ("beta2", beta2)):
            if not 0.0 <= value < 1.0:
                raise ValueError(f"Lans: {arg} must be in [0, 1), got {value}")
        if epsilon < 0:
            raise ValueError(f"Lans: epsilon must be non-negative, got {epsilon}")
        if lamb_weight_decay < 0:
            raise ValueError(f"Lans: lamb_weight_decay must be non-negative, got {lamb_weight_decay}")
        if parameters is not None:
            parameters = list(parameters)
            if any(isinstance(p, dict) for p in parameters):
                raise ValueError("Lans: parameter groups are not supported; pass a list of parameters")
        super().__init__(
            learning_rate=learning_rate, parameters=parameters, weight_decay=None, grad_clip=grad_clip, name=name
        )
        self.type = "lans"
        self._beta1 = float(beta1)
        self._beta2 = float(beta2)
        self._epsilon = float(epsilon)
        self._lamb_weight_decay = float(lamb_weight_decay)
        self._exclude_from_weight_decay_fn = exclude_from_weight_decay_fn
        self._multi_precision = multi_precision
        self._master_weights = {}

    def _create_accumulators(self, block, parameters):
        for param in parameters:
            if param.name in self._already_create_accumulator:
                continue
            if self._multi_precision and self._is_dtype_fp16_or_bf16(param.dtype):
                param = self._create_master_weight(param)
            dtype = _compute_dtype(param.dtype)
            self._add_accumulator(self._moment1_acc_str, param, dtype=dtype)
            self._add_accumulator(self._moment2_acc_str, param, dtype=dtype)
            # beta^t of the coming step, as paddle's Lamb keeps it: starts at beta (t = 1).
            self._add_accumulator(self._beta1_pow_acc_str, param, dtype=dtype, fill_value=self._beta1, shape=[1])
            self._add_accumulator(self._beta2_pow_acc_str, param, dtype=dtype, fill_value=self._beta2, shape=[1])
            self._already_create_accumulator.add(param.name)

    def _append_optimize_op(self, block, param_and_grad):
        if not paddle.in_dynamic_mode():
            raise RuntimeError("Lans runs in dygraph mode only")
        param, grad = param_and_grad
        use_master = self._multi_precision and self._is_dtype_fp16_or_bf16(param.dtype)
        target = self._master_weights[param.name] if use_master else param
        moment1 = self._get_accumulator_master(self._moment1_acc_str, param)
        moment2 = self._get_accumulator_master(self._moment2_acc_str, param)
        beta1_pow = self._get_accumulator_master(self._beta1_pow_acc_str, param)
        beta2_pow = self._get_accumulator_master(self._beta2_pow_acc_str, param)
        excluded = self._exclude_from_weight_decay_fn is not None and self._exclude_from_weight_decay_fn(param)
        weight_decay = 0.0 if excluded else self._lamb_weight_decay
        lr = self._create_param_lr(param_and_grad)
        beta1, beta2, eps = self._beta1, self._beta2, self._epsilon

        with paddle.no_grad():
            dtype = _compute_dtype(target.dtype)
            weight = target if target.dtype == dtype else target.astype(dtype)
            grad = grad if grad.dtype == dtype else grad.astype(dtype)
            one = paddle.ones([], dtype=dtype)

            grad_norm = paddle.linalg.norm(grad)
            normalised = grad / paddle.where(grad_norm > 0, grad_norm + eps, one)

            moment1.scale_(beta1).add_(normalised * (1.0 - beta1))
            moment2.scale_(beta2).add_(normalised.square() * (1.0 - beta2))
            denominator = (moment2 / (1.0 - beta2_pow)).sqrt() + eps
            momentum_term = moment1 / ((1.0 - beta1_pow) * denominator)
            gradient_term = normalised / denominator
            if weight_decay:
                momentum_term = momentum_term + weight_decay * weight
                gradient_term = gradient_term + weight_decay * weight

            weight_norm = paddle.linalg.norm(weight)
            update = None
            for term, share in ((momentum_term, beta1), (gradient_term, 1.0 - beta1)):
                term_norm = paddle.linalg.norm(term)
                trust_ratio = paddle.where((weight_norm > 0) & (term_norm > 0), weight_norm / term_norm, one)
                scaled = term * (lr * (share * trust_ratio))
                update = scaled if update is None else update.add_(scaled)

            if weight is target:
                target.subtract_(update)
            else:
                paddle.assign((weight - update).astype(target.dtype), output=target)
            if use_master:
                paddle.assign(target.astype(param.dtype), output=param)
            beta1_pow.scale_(beta1)
            beta2_pow.scale_(beta2)
        return None


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
) -> paddle.optimizer.Optimizer:
    """Build "Lamb", "Lans" or "AdamW" over model.parameters().

    Weight decay skips no_weight_decay_parameters(model). max_grad_norm clips the gradients to that global
    norm before the update (ClipGradByGlobalNorm); None turns clipping off. multi_precision keeps fp32
    master weights for fp16/bf16 parameters.
    """
    if max_grad_norm is not None and max_grad_norm <= 0:
        raise ValueError(f"max_grad_norm must be positive or None, got {max_grad_norm}")
    if weight_decay < 0:
        raise ValueError(f"weight_decay must be non-negative, got {weight_decay}")
    excluded = no_weight_decay_parameters(model)
    grad_clip = nn.ClipGradByGlobalNorm(clip_norm=max_grad_norm) if max_grad_norm is not None else None
    parameters = model.parameters()
    if name == "Lamb":
        return paddle.optimizer.Lamb(
            learning_rate=learning_rate, lamb_weight_decay=weight_decay, beta1=beta1, beta2=beta2, epsilon=epsilon,
            parameters=parameters, grad_clip=grad_clip, exclude_from_weight_decay_fn=lambda p: p.name in excluded,
            multi_precision=multi_precision,
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
