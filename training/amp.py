"""Mixed precision for every entry script: the AMP flags, the policy they give, autocast, O2 decoration and
the float16 loss scaler.

The same flags serve run_pretraining.py, run_squad.py and run_glue.py:

    parser = argparse.ArgumentParser(); add_amp_arguments(parser)
    args = parser.parse_args(); check_amp_arguments(parser, args)
    policy = amp_policy(args)                      # disabled, with one printed line, on a CPU
    model, optimizer = amp_decorate(model, optimizer, policy)   # O2: low-precision weights + fp32 masters
    scaler = create_loss_scaler(policy)            # None unless float16
    with amp_autocast(policy):
        loss = ...
    (scaler.scale(loss) if scaler else loss).backward()
    found_inf = scaler.unscale_and_check(parameters) if scaler else False
    if not found_inf: optimizer.step()
    if scaler: scaler.update(found_inf)

Level O1 runs white-listed ops (matmuls) in float16/bfloat16 and keeps weights in fp32; level O2
(--use-pure-fp16) keeps the weights themselves in low precision and lets the optimizer update fp32
master copies (Micikevicius et al. 2018, "Mixed Precision Training", arXiv:1710.03740).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
from collections.abc import Iterable

import paddle

from utils import paddle_private
from utils.cli import finite_float

AMP_DTYPES = ("float16", "bfloat16")
FLOAT32_PRECISIONS = ("fp32", "tf32")
# As in NVIDIA's Paddle BERT recipe: these also run in low precision under O1, and embedding lookups stay in
# fp32 under pure fp16.
_AMP_WHITE_LIST = ["softmax", "layer_norm", "gelu"]
_PURE_FP16_BLACK_LIST = ["lookup_table", "lookup_table_v2"]


# The initial float16 loss scale: 2^20, what NVIDIA's recipes pass (`--amp --use-dynamic-loss-scaling
# --scale-loss=1048576`), so that `--amp` alone trains as they do. Dynamic scaling halves a scale that is too
# large within the first few steps (each overflowing step is skipped: 5 steps from 2^20 down to 2^15), while a
# scale that is too small would lose small gradients to float16 underflow without any sign.
DEFAULT_LOSS_SCALE = 2.0**20


def add_amp_arguments(parser: argparse.ArgumentParser) -> None:
    """Add --amp, --amp-dtype, --use-pure-fp16, --scale-loss, --use-dynamic-loss-scaling and --min-loss-scale.

    Names of --amp, --scale-loss, --use-dynamic-loss-scaling and --use-pure-fp16 are those of NVIDIA's Paddle
    BERT (utils/config.py). float16 AMP is safe by default: dynamic scaling from 2^20, as NVIDIA's recipes
    run it (--no-use-dynamic-loss-scaling keeps the scale fixed at --scale-loss).
    """
    group = parser.add_argument_group("Mixed precision (GPU only; a CPU run continues in fp32)")
    group.add_argument("--amp", action="store_true", help="Enable automatic mixed precision training (AMP).")
    group.add_argument(
        "--amp-dtype", choices=AMP_DTYPES, default="float16",
        help="Low-precision type for AMP. bfloat16 (A100/H100/H200) needs no loss scaling.",
    )
    group.add_argument(
        "--use-pure-fp16", action="store_true",
        help="AMP level O2: weights in --amp-dtype with fp32 master weights in the optimizer (default: O1).",
    )
    group.add_argument(
        "--scale-loss", type=finite_float, default=DEFAULT_LOSS_SCALE,
        help="Initial loss scale for float16 AMP (2^20, as NVIDIA's recipes use).",
    )
    group.add_argument(
        "--use-dynamic-loss-scaling", action=argparse.BooleanOptionalAction, default=True,
        help="float16 AMP: double the loss scale after 2000 overflow-free steps and halve it on every overflow; "
        "with --no-use-dynamic-loss-scaling the scale stays at --scale-loss. Overflowing steps are skipped "
        "either way.",
    )
    group.add_argument(
        "--float32-precision", choices=FLOAT32_PRECISIONS, default=None,
        help="GPU float32 matmuls and convolutions: fp32 (full precision) or tf32 (TF32 tensor cores on Ampere "
        "and later), set in Paddle's cuBLAS/cuDNN switches. Default: Paddle's own (tf32). NVIDIA_TF32_OVERRIDE=0 "
        "in the environment makes cuBLAS and cuDNN refuse TF32 whatever Paddle asks, so tf32 with it is an error.",
    )
    group.add_argument(
        "--min-loss-scale", type=finite_float, default=1.0,
        help="float16 AMP with dynamic scaling: stop the run with an error when overflows halve the loss scale "
        "below this (the gradients are then inf or NaN at any scale).",
    )


def check_amp_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Exit through parser.error (one line naming the flag) for an invalid combination of AMP flags."""
    if args.scale_loss <= 0:
        parser.error(f"--scale-loss must be positive, got {args.scale_loss}")
    if not 0 < args.min_loss_scale <= args.scale_loss:
        parser.error(f"--min-loss-scale must be positive and at most --scale-loss ({args.scale_loss:g}), "
                     f"got {args.min_loss_scale}")
    if args.use_pure_fp16 and not args.amp:
        parser.error("--use-pure-fp16 needs --amp")
    # Flags that only mean something for float16 AMP would otherwise be ignored without a word.
    for flag in ("amp_dtype", "scale_loss", "min_loss_scale", "use_dynamic_loss_scaling"):
        if getattr(args, flag) == parser.get_default(flag):
            continue
        option = f"--{flag.replace('_', '-')}"
        if not args.amp:
            parser.error(f"{option} needs --amp")
        if flag != "amp_dtype" and args.amp_dtype == "bfloat16":
            parser.error(f"{option} applies to float16 AMP; bfloat16 needs no loss scaling")


@dataclasses.dataclass(frozen=True)
class AmpPolicy:
    """What mixed precision a run uses. `enabled=False` means plain fp32."""

    enabled: bool = False
    dtype: str = "float16"
    level: str = "O1"
    init_loss_scale: float = DEFAULT_LOSS_SCALE
    dynamic_loss_scaling: bool = True
    min_loss_scale: float = 1.0

    @property
    def uses_loss_scaling(self) -> bool:
        # bfloat16 has fp32's exponent range, so its gradients do not underflow and need no scaling.
        return self.enabled and self.dtype == "float16"

    @property
    def master_weights(self) -> bool:
        return self.enabled and self.level == "O2"


def amp_policy(args: argparse.Namespace, device: str | None = None) -> AmpPolicy:
    """The AMP policy for these arguments on `device` (default: Paddle's current device).

    AMP needs a GPU: on any other device this prints one line saying so and returns the fp32 policy. The
    run's float32 precision (--float32-precision) is set here too, the one place that decides precision.
    """
    device = device or paddle.get_device()
    if args.float32_precision is not None:
        if device.startswith("gpu"):
            if args.float32_precision == "tf32" and os.environ.get("NVIDIA_TF32_OVERRIDE") == "0":
                raise SystemExit("--float32-precision tf32: NVIDIA_TF32_OVERRIDE=0 in the environment makes cuBLAS "
                                 "and cuDNN refuse TF32; unset it, or use --float32-precision fp32")
            set_float32_matmul_precision(args.float32_precision)
        elif args.float32_precision == "tf32":  # fp32 is what other devices do anyway: nothing to say
            print(f"--float32-precision {args.float32_precision} is for GPUs; the device is {device}, whose "
                  "float32 matmuls are full float32.", flush=True)
    if not args.amp:
        return AmpPolicy()
    if not device.startswith("gpu"):
        print(f"AMP needs a GPU; the device is {device}, so --amp is ignored and this run continues in fp32.",
              flush=True)
        return AmpPolicy()
    if args.amp_dtype == "bfloat16" and not paddle.amp.is_bfloat16_supported(device):
        raise SystemExit(f"--amp-dtype bfloat16: {device} does not support bfloat16 (it needs an A100 or newer)")
    return AmpPolicy(
        enabled=True,
        dtype=args.amp_dtype,
        level="O2" if args.use_pure_fp16 else "O1",
        init_loss_scale=args.scale_loss,
        dynamic_loss_scaling=args.use_dynamic_loss_scaling,
        min_loss_scale=args.min_loss_scale,
    )


def amp_autocast(policy: AmpPolicy) -> contextlib.AbstractContextManager:
    """The context to run a forward pass (and the loss) in: paddle.amp.auto_cast, or nothing for fp32."""
    if not policy.enabled:
        return contextlib.nullcontext()
    return paddle.amp.auto_cast(
        enable=True,
        custom_white_list=_AMP_WHITE_LIST,
        custom_black_list=_PURE_FP16_BLACK_LIST if policy.level == "O2" else None,
        level=policy.level,
        dtype=policy.dtype,
    )


def amp_decorate(model: paddle.nn.Layer, optimizer: paddle.optimizer.Optimizer, policy: AmpPolicy):
    """For level O2: cast the model's weights to the AMP dtype and give the optimizer fp32 master weights.

    Gradients become fp32 at the end of every backward pass (master_grad): gradient clipping would otherwise
    sum squares in float16, where a global norm above 256 overflows to inf and the clip factor
    clip_norm / inf zeroes the gradients, so the step would run with nothing but momentum and decay instead
    of being skipped. Saved state dicts stay fp32 (save_dtype), so checkpoints load into fp32 and AMP runs
    alike. Returns (model, optimizer), unchanged for O1 and fp32.
    """
    if not policy.master_weights:
        return model, optimizer
    return paddle.amp.decorate(
        models=model, optimizers=optimizer, level="O2", dtype=policy.dtype, master_weight=True,
        save_dtype="float32", master_grad=True,
    )


def set_float32_matmul_precision(precision: str) -> None:
    """"fp32": float32 matmuls and convolutions in full float32; "tf32": on TF32 tensor cores (Ampere and
    later GPUs; 10 mantissa bits in the products, fp32 accumulation), which is Paddle's default on a GPU.

    Set in Paddle's cuBLAS and cuDNN switches. They are not the last word: NVIDIA_TF32_OVERRIDE=0 makes the
    libraries themselves refuse TF32, whatever the switches say (amp_policy refuses tf32 then), while "fp32"
    holds in any environment. On a CPU nothing reads them.
    """
    if precision not in FLOAT32_PRECISIONS:
        raise ValueError(f"float32 precision must be one of {FLOAT32_PRECISIONS}, got {precision!r}")
    paddle_private.set_tf32_switches(precision == "tf32")


class LossScaler:
    """Loss scaling for float16 training (Micikevicius et al. 2018, arXiv:1710.03740, section 3.2).

    The loss is multiplied by `scale` before backward so that small gradients survive in float16; the
    gradients are divided by it again before the optimizer step. A step whose gradients contain inf or NaN
    is skipped. With dynamic scaling the scale is halved after every such overflow and doubled after
    `growth_interval` consecutive good steps (2000, as in NVIDIA's recipes); otherwise it stays fixed. A
    dynamic scale that would fall below `min_scale` raises ValueError: the gradients overflow at any scale,
    and halving on would only skip every step until the scale underflows to 0.

    Unlike paddle.amp.GradScaler this works on every device (so its rules are tested on CPU) and reports
    each overflow to the caller, which skips and logs the step.
    """

    def __init__(self, init_scale: float, dynamic: bool, min_scale: float = 1.0, growth_interval: int = 2000,
                 growth_factor: float = 2.0, backoff_factor: float = 0.5):
        if init_scale <= 0:
            raise ValueError(f"loss scale must be positive, got {init_scale}")
        self.scale_value = float(init_scale)
        self.dynamic = dynamic
        self.min_scale = float(min_scale)
        self.growth_interval = growth_interval
        self.growth_factor = growth_factor
        self.backoff_factor = backoff_factor
        self.good_steps = 0

    def scale(self, loss: paddle.Tensor) -> paddle.Tensor:
        return loss * self.scale_value

    def unscale_and_check(self, parameters: Iterable[paddle.Tensor]) -> bool:
        """Divide every gradient by the scale in place; True if any gradient holds inf or NaN."""
        grads_by_dtype: dict[paddle.dtype, list[paddle.Tensor]] = {}
        for parameter in parameters:
            if parameter.grad is not None:
                grads_by_dtype.setdefault(parameter.grad.dtype, []).append(parameter.grad)
        scale = paddle.to_tensor([self.scale_value], dtype="float32")
        found_inf = False
        # One fused kernel per gradient dtype (the op paddle.amp.GradScaler uses), not a Python loop.
        for grads in grads_by_dtype.values():
            found_inf = bool(paddle_private.unscale_and_check_finite_(grads, scale).item()) or found_inf
        return found_inf

    def update(self, found_inf: bool) -> None:
        """Adjust the scale after a step: back off on overflow, grow after enough good steps."""
        if not self.dynamic:
            return
        if found_inf:
            if self.scale_value * self.backoff_factor < self.min_scale:
                raise ValueError(f"the float16 loss scale would fall below --min-loss-scale {self.min_scale:g} "
                                 f"(from {self.scale_value:g}): the gradients overflow at every scale")
            self.scale_value *= self.backoff_factor
            self.good_steps = 0
            return
        self.good_steps += 1
        if self.good_steps == self.growth_interval:
            self.scale_value *= self.growth_factor
            self.good_steps = 0

    def state_dict(self) -> dict:
        return {"scale": self.scale_value, "good_steps": self.good_steps}

    def load_state_dict(self, state: dict) -> None:
        """Restore the scale and the good-step count; whether scaling is dynamic stays this run's choice."""
        self.scale_value = float(state["scale"])
        self.good_steps = int(state["good_steps"])


def create_loss_scaler(policy: AmpPolicy) -> LossScaler | None:
    """A LossScaler for float16 AMP (initial scale --scale-loss, dynamic unless --no-use-dynamic-loss-scaling,
    at least --min-loss-scale)."""
    if not policy.uses_loss_scaling:
        return None
    return LossScaler(policy.init_loss_scale, dynamic=policy.dynamic_loss_scaling, min_scale=policy.min_loss_scale)


def amp_prepare(model: paddle.nn.Layer, optimizer: paddle.optimizer.Optimizer,
                policy: AmpPolicy) -> tuple[paddle.nn.Layer, paddle.optimizer.Optimizer, LossScaler | None]:
    """What every trainer does with its model and optimizer once both exist: O2's decoration (amp_decorate) and
    the float16 loss scaler (create_loss_scaler, None without one)."""
    model, optimizer = amp_decorate(model, optimizer, policy)
    return model, optimizer, create_loss_scaler(policy)
