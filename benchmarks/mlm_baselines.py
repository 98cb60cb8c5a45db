"""Masked-LM accuracy without context: the floor that a pretrained model must rise above to have learnt anything
from the words around a mask.

    accuracy = context_free_accuracy(train_batches, eval_batches, mask_id)
    # {"unigram": 0.057, "copy": 0.147, "left bigram and copy": 0.212, "masked tokens": 21707}

Three predictors, fitted by counting the masked tokens of training batches and scored on evaluation batches
(the loader's dicts: input_ids and masked_lm_labels, -1 where nothing is predicted):
- unigram: always the most frequent masked token.
- copy: the input token where the input is not [MASK], else the unigram answer. BERT keeps 10% of the chosen
  tokens as they are and replaces 10% by a random token (Devlin et al. 2019, section 3.1), so a model that has
  learnt only to copy its input and the token frequencies scores this.
- left bigram and copy: copy, but at a [MASK] the most frequent masked token after the token on its left (the
  unigram answer after a left token never seen in training). One neighbour of context is all it uses.

A pretrained model at or below "copy" on the same evaluation batches has learnt nothing of the context yet.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

PREDICTORS = ("unigram", "copy", "left bigram and copy")


def masked_triples(batches: Iterable[dict]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(left token, input token, label) at every masked position of the batches, each int64 [masked tokens].
    Position 0 ([CLS]) is never masked, so every masked token has a left neighbour."""
    lefts, inputs, labels = [], [], []
    for batch in batches:
        input_ids, masked_lm_labels = batch["input_ids"], batch["masked_lm_labels"]  # [B, S] each
        rows, columns = np.nonzero(masked_lm_labels >= 0)
        if (columns == 0).any():
            raise ValueError("a masked token at position 0: there is no left neighbour to count")
        lefts.append(input_ids[rows, columns - 1])
        inputs.append(input_ids[rows, columns])
        labels.append(masked_lm_labels[rows, columns])
    if not labels:
        raise ValueError("no batches to count")
    return tuple(np.concatenate(part).astype(np.int64) for part in (lefts, inputs, labels))


def most_frequent_after(lefts: np.ndarray, labels: np.ndarray) -> dict[int, int]:
    """For each left token, its most frequent label (ties: the smallest id)."""
    pairs, counts = np.unique(np.stack([lefts, labels], axis=1), axis=0, return_counts=True)  # [P, 2], [P]
    # Sort by left token, then count descending, then label: the first row of each left token is its answer.
    order = np.lexsort((pairs[:, 1], -counts, pairs[:, 0]))
    pairs = pairs[order]
    first = np.ones(len(pairs), dtype=bool)
    first[1:] = pairs[1:, 0] != pairs[:-1, 0]
    return dict(zip(pairs[first, 0].tolist(), pairs[first, 1].tolist(), strict=True))


def context_free_accuracy(train_batches: Iterable[dict], eval_batches: Iterable[dict], mask_id: int
                          ) -> dict[str, float | int]:
    """Accuracy of each of PREDICTORS on eval_batches' masked tokens, fitted on train_batches; and their count."""
    train_lefts, _, train_labels = masked_triples(train_batches)
    labels, label_counts = np.unique(train_labels, return_counts=True)
    unigram = int(labels[np.argmax(label_counts)])  # np.unique sorts: ties go to the smallest id
    after = most_frequent_after(train_lefts, train_labels)
    lefts, inputs, truth = masked_triples(eval_batches)
    visible = inputs != mask_id
    copy = np.where(visible, inputs, unigram)
    bigram = np.fromiter((after.get(left, unigram) for left in lefts.tolist()), dtype=np.int64, count=len(lefts))
    bigram = np.where(visible, inputs, bigram)
    return {"unigram": float(np.mean(truth == unigram)), "copy": float(np.mean(truth == copy)),
            "left bigram and copy": float(np.mean(truth == bigram)), "masked tokens": int(truth.size)}
