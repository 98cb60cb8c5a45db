"""Training losses: BERT pretraining (masked LM + next sentence) and the SQuAD span loss.

Paddle's F.cross_entropy with a negative ignore_index and reduction='mean' divides by every
position, valid or not, so the masked-LM mean here is taken explicitly over the valid labels.
"""

from __future__ import annotations

import paddle
import paddle.nn as nn
import paddle.nn.functional as F

IGNORE_INDEX = -1


def masked_lm_loss(prediction_scores: paddle.Tensor, masked_lm_labels: paddle.Tensor) -> paddle.Tensor:
    """Mean cross-entropy over the positions whose label is not IGNORE_INDEX.

    prediction_scores: [M, V] logits; masked_lm_labels: int64 [M], IGNORE_INDEX where unused.
    Returns 0 (not NaN) when no position is valid.
    """
    labels = masked_lm_labels.reshape([-1])
    valid = labels != IGNORE_INDEX
    per_token = F.cross_entropy(
        prediction_scores.astype("float32"), paddle.where(valid, labels, paddle.zeros_like(labels)),
        reduction="none",
    ).reshape([-1])
    weights = valid.astype("float32")
    return (per_token * weights).sum() / paddle.clip(weights.sum(), min=1.0)


class BertPretrainingCriterion(nn.Layer):
    """loss = mean masked-LM cross-entropy + mean next-sentence cross-entropy.

    Returns (loss, mlm_loss, nsp_loss) so that each part can be logged.
    """

    def forward(
        self,
        prediction_scores: paddle.Tensor,
        seq_relationship_score: paddle.Tensor,
        masked_lm_labels: paddle.Tensor,
        next_sentence_labels: paddle.Tensor,
    ) -> tuple[paddle.Tensor, paddle.Tensor, paddle.Tensor]:
        mlm_loss = masked_lm_loss(prediction_scores, masked_lm_labels)
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
