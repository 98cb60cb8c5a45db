"""Training losses: BERT pretraining (masked LM + next sentence) and the SQuAD span loss.

Paddle's F.cross_entropy with a negative ignore_index and reduction='mean' divides by every
position, valid or not, so the masked-LM mean here is taken explicitly over the valid labels.
A model built with the CPU kernels (modeling.choose_cpu_kernels) takes the masked-LM cross-entropy from the cpu_ops
extension where it builds: the same values, without the [masked x vocab] softmax Paddle's kernel keeps for the
backward pass, on every core.
"""

from __future__ import annotations

import paddle
import paddle.nn as nn
import paddle.nn.functional as F

from kernels import cpu_ops

IGNORE_INDEX = -1  # csrc/cpu_ops.cc's kIgnoreLabel


def masked_lm_loss(prediction_scores: paddle.Tensor, masked_lm_labels: paddle.Tensor,
                   ops: cpu_ops.CpuOps | None = None) -> paddle.Tensor:
    """Mean cross-entropy over the positions whose label is not IGNORE_INDEX; with `ops`, the extension's
    kernel computes each position's for float32 CPU logits.

    prediction_scores: [M, V] logits; masked_lm_labels: int64 [M], IGNORE_INDEX where unused.
    Returns 0 (not NaN) when no position is valid.
    """
    labels = masked_lm_labels.reshape([-1])
    valid = labels != IGNORE_INDEX
    if ops is not None and prediction_scores.dtype == paddle.float32 and prediction_scores.place.is_cpu_place():
        per_token = ops.masked_lm_xent(prediction_scores, labels)  # [M], 0 where ignored
    else:
        per_token = F.cross_entropy(
            prediction_scores.astype("float32"), paddle.where(valid, labels, paddle.zeros_like(labels)),
            reduction="none",
        ).reshape([-1])
    weights = valid.astype("float32")
    return (per_token * weights).sum() / paddle.clip(weights.sum(), min=1.0)


class BertPretrainingCriterion(nn.Layer):
    """loss = mean masked-LM cross-entropy + mean next-sentence cross-entropy.

    Returns (loss, mlm_loss, nsp_loss) so that each part can be logged. use_cpu_kernels: the model's choice
    (modeling.choose_cpu_kernels), which takes the masked-LM cross-entropy from the cpu_ops extension.
    """

    def __init__(self, use_cpu_kernels: bool = False):
        super().__init__()
        self.ops = cpu_ops.load() if use_cpu_kernels else None

    def masked_lm(self, prediction_scores: paddle.Tensor, masked_lm_labels: paddle.Tensor) -> paddle.Tensor:
        """The masked-LM mean alone (--no-nsp)."""
        return masked_lm_loss(prediction_scores, masked_lm_labels, self.ops)

    def forward(
        self,
        prediction_scores: paddle.Tensor,
        seq_relationship_score: paddle.Tensor,
        masked_lm_labels: paddle.Tensor,
        next_sentence_labels: paddle.Tensor,
    ) -> tuple[paddle.Tensor, paddle.Tensor, paddle.Tensor]:
        mlm_loss = self.masked_lm(prediction_scores, masked_lm_labels)
        nsp_loss = F.cross_entropy(
            seq_relationship_score.astype("float32"), next_sentence_labels.reshape([-1, 1])
        ).mean()
        return mlm_loss + nsp_loss, mlm_loss, nsp_loss


def squad_span_loss(
    start_logits: paddle.Tensor,
    end_logits: paddle.Tensor,
    start_positions: paddle.Tensor,
    end_positions: paddle.Tensor,
) -> paddle.Tensor:
    """(CE(start) + CE(end)) / 2, as in BERT's run_squad.py; logits [B, S], positions int64 [B]."""
    start_loss = F.cross_entropy(start_logits.astype("float32"), start_positions.reshape([-1, 1])).mean()
    end_loss = F.cross_entropy(end_logits.astype("float32"), end_positions.reshape([-1, 1])).mean()
    return (start_loss + end_loss) / 2
