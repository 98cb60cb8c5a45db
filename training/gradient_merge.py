"""Gradient merge (accumulation) over k micro-batches on W data-parallel ranks, exact for any batch sizes.

One optimizer step sees k micro-batches on each of W ranks. A loss is a sum of terms, each the mean over
the items of one kind in a micro-batch (fine-tuning: the sequences; pretraining: the masked tokens for the
masked-LM term and the sequences for the next-sentence term). Let n_i be micro-batch i's items of a term's
kind and N the items of that kind in all k micro-batches of all W ranks. Each micro-batch backpropagates

    W * sum over terms of  mean_i * n_i / N

Only the last micro-batch's backward all-reduces the gradients (the inner ones run under
`network.no_sync()`), and paddle.DataParallel averages them over the W ranks, so the factor W cancels: the
gradient is that of each term's mean over the whole global batch, exactly what one process computes on all
the sequences at once, whatever the micro-batches' sizes. When all micro-batches have equal counts this is the
usual division of each micro-batch's mean loss by k.

    def counts(batch):                       # one count per kind of item
        return (int((batch["labels"] != -1).sum()), len(batch["labels"]))

    def loss_terms(network, batch):          # (mean over the micro-batch, index of its kind in counts)
        mlm_mean, nsp_mean = criterion(*network(...), ...)
        return [(mlm_mean, 0), (nsp_mean, 1)]

    mlm_loss, nsp_loss = merged_backward(network, micro_batches, counts, loss_terms, world_size, scaler)

The returned values are this rank's shares of each term's global-batch mean: summed over the ranks
(all_reduce_sum) they are the means over the global batch.

Then `optimizer_step` makes the update, the same one for pretraining and fine-tuning:

    outcome = optimizer_step(model, optimizer, scheduler, scaler, global_loss)
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import TypeVar

import paddle

from training.amp import LossScaler

Batch = TypeVar("Batch")
# (mean over one micro-batch's items of one kind, index of that kind in the counts)
LossTerm = tuple[paddle.Tensor, int]


def ramped_merge_steps(merge_steps: int, ramp: float, progress: float) -> int:
    """The micro-batches of the next optimizer step under a batch-size ramp (run_pretraining.py
    --gradient-merge-ramp; Cramming's growing batch, Geiping & Goldstein 2022): with k = merge_steps and
    p = progress, the fraction of the run already trained (of its steps, or of its time budget),

        min(k, 1 + floor(k * p / ramp))        (k itself when ramp is 0: no ramp)

    so the first ramp / k of the run takes steps of one micro-batch, the next ramp / k two, and from
    (k - 1) / k * ramp on all k: small, frequent updates while the loss falls fast, the full batch after."""
    if ramp == 0:
        return merge_steps
    return min(merge_steps, 1 + math.floor(merge_steps * progress / ramp))


def all_reduce_sum(values: paddle.Tensor) -> paddle.Tensor:
    """The element-wise sum of `values` over all ranks of the default group (in place)."""
    paddle.distributed.all_reduce(values)
    return values


def merged_backward(
    network: paddle.nn.Layer,
    micro_batches: Sequence[Batch],
    counts_fn: Callable[[Batch], Sequence[int]],
    loss_terms_fn: Callable[[paddle.nn.Layer, Batch], Sequence[LossTerm]],
    world_size: int,
    scaler: LossScaler | None = None,
    all_reduce: Callable[[paddle.Tensor], paddle.Tensor] = all_reduce_sum,
    master_gradients: bool = False,
) -> list[float]:
    """Forward and backward of this rank's micro-batches, weighted as in the module docstring.

    counts_fn gives a micro-batch's item counts, one per kind; loss_terms_fn runs the forward pass (under
    autocast, if any) and returns the loss terms. The global counts are agreed by one all_reduce (skipped
    for a single rank); a kind with no items anywhere gives its terms weight 0. With a scaler each
    micro-batch's loss is scaled before backward. Returns, per term in loss_terms_fn's order, this rank's
    share of its global-batch mean (summed over ranks: the global mean). Gradients are left accumulated in
    the parameters for the optimizer step.

    master_gradients: the gradients turn fp32 at the end of every backward (AMP O2, amp.amp_decorate's
    master_grad). DataParallel's reducer (EagerReducer, paddle/fluid/distributed/collective/reducer.cc) types
    its buckets by the parameters' dtype when it is built and concatenates each bucket's gradients as that
    type, so a synced backward onto gradients that an earlier micro-batch left in fp32 stops there (Paddle
    3.3.1's reducer, shown over gloo in tests/test_gradient_merge_o2.py). With
    more than one micro-batch on several ranks every micro-batch then runs under no_sync, and the fp32
    gradients are averaged over the ranks afterwards (all_reduce, one tensor at a time, without overlap).
    """
    reduce_afterwards = master_gradients and world_size > 1 and len(micro_batches) > 1
    counts = [[float(count) for count in counts_fn(batch)] for batch in micro_batches]
    totals = [sum(column) for column in zip(*counts, strict=True)]
    if world_size > 1:
        totals = all_reduce(paddle.to_tensor(totals, dtype="float64")).numpy().tolist()
    shares: list[paddle.Tensor] = []
    for index, (batch, batch_counts) in enumerate(zip(micro_batches, counts, strict=True)):
        inner = index < len(micro_batches) - 1 or reduce_afterwards
        sync_context = network.no_sync() if inner and world_size > 1 else contextlib.nullcontext()
        with sync_context:
            terms = loss_terms_fn(network, batch)
            weighted = [mean * (batch_counts[kind] / max(totals[kind], 1.0)) for mean, kind in terms]
            loss = sum(weighted) * world_size
            (scaler.scale(loss) if scaler else loss).backward()
        detached = [term.detach() for term in weighted]
        shares = detached if not shares else [total + term for total, term in zip(shares, detached, strict=True)]
    if reduce_afterwards:
        with paddle.no_grad():
            for parameter in network.parameters():
                if parameter.grad is not None:
                    all_reduce(parameter.grad).scale_(1.0 / world_size)  # DataParallel's mean over the ranks
    return [float(share) for share in shares]


@dataclasses.dataclass(frozen=True)
class StepOutcome:
    """What optimizer_step did."""

    skipped: bool  # the update was dropped: a non-finite loss, or float16 gradients that overflowed
    learning_rate: float  # the rate of this step (the one it would have run at, if skipped)
    loss_scale: float  # the float16 loss scale this step's gradients carried (1.0 without loss scaling)


def optimizer_step(
    model: paddle.nn.Layer,
    optimizer: paddle.optimizer.Optimizer,
    scheduler: paddle.optimizer.lr.LRScheduler,
    scaler: LossScaler | None,
    loss: float,
) -> StepOutcome:
    """The update after merged_backward: unscale the gradients and check them for inf/NaN (float16 AMP),
    update unless they overflowed or `loss` is not finite, clear the gradients, let the scaler adapt and
    advance the schedule, which moves on whether or not the update ran.

    `loss` is the step's global loss, the same on every rank, so that all ranks skip together. The loss check
    is what protects fp32 and bfloat16, which have no scaler: one NaN batch would otherwise make every weight
    NaN. Without a scaler the gradients themselves are not read (that would be one more pass over all of
    them every step), so a finite loss with non-finite fp32 gradients is not caught here.
    """
    learning_rate = optimizer.get_lr()
    overflow = scaler.unscale_and_check(model.parameters()) if scaler else False
    skipped = overflow or not math.isfinite(loss)
    if not skipped:
        optimizer.step()
    optimizer.clear_grad()
    loss_scale = scaler.scale_value if scaler else 1.0
    if scaler:
        scaler.update(skipped)
    scheduler.step()
    return StepOutcome(skipped, learning_rate, loss_scale)
