"""mlm_baselines.py against a hand-counted case and a plain-Python count."""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np
import pytest
from mlm_baselines import context_free_accuracy, most_frequent_after

MASK = 9


def batch(input_ids: list[list[int]], labels: list[list[int]]) -> dict:
    return {"input_ids": np.array(input_ids), "masked_lm_labels": np.array(labels)}


def test_a_hand_counted_case():
    # Training masks: after 5 comes 7 twice, after [MASK] comes 8 once; 7 is the most frequent label.
    train = [batch([[1, 5, MASK, MASK, 2], [1, 5, MASK, 6, 2]], [[-1, -1, 7, 8, -1], [-1, -1, 7, -1, -1]])]
    # Evaluation (left, input, label): (5, [MASK], 7), ([MASK], kept 4, 4), (4, [MASK], 3), ([MASK], [MASK], 8).
    evaluation = [batch([[1, 5, MASK, 4, MASK, MASK, 2]], [[-1, -1, 7, 4, 3, 8, -1]])]
    accuracy = context_free_accuracy(train, evaluation, MASK)
    # unigram (7): right at the first only; copy: the first (7 again) and the kept 4; the bigram adds the last
    # (8 after [MASK]) and misses the third (4 was never a left neighbour: 7, wrong).
    assert accuracy == {"unigram": 0.25, "copy": 0.5, "left bigram and copy": 0.75, "masked tokens": 4}


def test_ties_go_to_the_smallest_id():
    assert most_frequent_after(np.array([5, 5, 3, 3, 3]), np.array([7, 6, 2, 4, 4])) == {5: 6, 3: 4}


def test_it_agrees_with_a_plain_count_on_random_batches():
    rng = np.random.default_rng(0)

    def random_batch() -> dict:
        ids = rng.integers(10, 40, size=(8, 16))
        ids[:, 0] = 1
        labels = np.where(rng.random((8, 16)) < 0.3, ids, -1)
        labels[:, 0] = -1
        ids = np.where((labels >= 0) & (rng.random((8, 16)) < 0.8), MASK, ids)
        return {"input_ids": ids, "masked_lm_labels": labels}

    train, evaluation = [random_batch() for _ in range(20)], [random_batch() for _ in range(5)]
    unigram, after = Counter(), defaultdict(Counter)
    for b in train:
        for row, column in zip(*np.nonzero(b["masked_lm_labels"] >= 0), strict=True):
            label = int(b["masked_lm_labels"][row, column])
            unigram[label] += 1
            after[int(b["input_ids"][row, column - 1])][label] += 1

    def best(counter: Counter) -> int:
        return min(counter, key=lambda token: (-counter[token], token))

    top, hits, total = best(unigram), Counter(), 0
    for b in evaluation:
        for row, column in zip(*np.nonzero(b["masked_lm_labels"] >= 0), strict=True):
            truth, seen = int(b["masked_lm_labels"][row, column]), int(b["input_ids"][row, column])
            left = int(b["input_ids"][row, column - 1])
            guess = best(after[left]) if after[left] else top
            hits["unigram"] += truth == top
            hits["copy"] += truth == (seen if seen != MASK else top)
            hits["left bigram and copy"] += truth == (seen if seen != MASK else guess)
            total += 1
    accuracy = context_free_accuracy(train, evaluation, MASK)
    assert accuracy["masked tokens"] == total
    for name in ("unigram", "copy", "left bigram and copy"):
        assert accuracy[name] == pytest.approx(hits[name] / total)
    assert accuracy["left bigram and copy"] > accuracy["copy"] > accuracy["unigram"]


def test_a_mask_on_the_first_position_is_refused():
    with pytest.raises(ValueError, match="position 0"):
        context_free_accuracy([batch([[MASK, 5]], [[3, -1]])], [batch([[1, MASK]], [[-1, 3]])], MASK)
