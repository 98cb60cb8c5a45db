"""glue_metrics.py against hand-computed cases and against independent brute-force definitions."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from finetuning.glue_metrics import accuracy, binary_f1, compute_metrics, matthews_corrcoef, roc_auc

# TP at 0 and 4, FN at 1, FP at 2, TN at 3
LABELS = np.array([1, 1, 0, 0, 1])
PREDICTIONS = np.array([1, 0, 1, 0, 1])


def test_accuracy():
    assert accuracy(LABELS, PREDICTIONS) == pytest.approx(3 / 5)
    assert accuracy(np.array([2, 0]), np.array([2, 0])) == 1.0


def test_f1_by_hand():
    # precision 2/3, recall 2/3
    assert binary_f1(LABELS, PREDICTIONS) == pytest.approx(2 / 3)
    # class 0: TP 1 (index 3), FP 1 (index 1), FN 1 (index 2)
    assert binary_f1(LABELS, PREDICTIONS, positive=0) == pytest.approx(0.5)
    assert binary_f1(np.array([1, 0, 1]), np.array([1, 1, 1])) == pytest.approx(2 * 2 / (2 * 2 + 1))


@pytest.mark.parametrize(
    ("labels", "predictions"),
    [([0, 0, 0], [0, 0, 0]), ([0, 0, 1], [0, 0, 0]), ([0, 0, 0], [1, 0, 0])],
    ids=["no positives at all", "positives never predicted", "no true positives"],
)
def test_f1_without_true_positives_is_zero(labels, predictions):
    assert binary_f1(np.array(labels), np.array(predictions)) == 0.0


def test_mcc_by_hand():
    # (TP TN - FP FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)) = (2 - 1) / sqrt(3 * 3 * 2 * 2)
    assert matthews_corrcoef(LABELS, PREDICTIONS) == pytest.approx(1 / 6)


@pytest.mark.parametrize(
    ("labels", "predictions", "expected"),
    [
        ([0, 1, 1, 0], [0, 1, 1, 0], 1.0),
        ([0, 1, 1, 0], [1, 0, 0, 1], -1.0),
        ([0, 1, 1, 0], [1, 1, 1, 1], 0.0),  # one predicted class: a zero factor under the root
        ([1, 1, 1, 1], [1, 1, 0, 1], 0.0),  # one true class
        ([1, 1, 1], [1, 1, 1], 0.0),  # both constant, even though every prediction is right
        ([0, 1, 1, 0], [0, 1, 0, 1], 0.0),  # exactly chance
    ],
)
def test_mcc_edge_cases(labels, predictions, expected):
    assert matthews_corrcoef(np.array(labels), np.array(predictions)) == pytest.approx(expected)


def test_mcc_equals_the_correlation_of_one_hot_codes():
    # Gorodkin's R_K is the Pearson correlation of the one-hot label and prediction matrices, with covariances
    # summed over classes; for two classes it is the plain Pearson (phi) coefficient of the 0/1 vectors.
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, 200)
    predictions = np.where(rng.random(200) < 0.6, labels, rng.integers(0, 3, 200))
    one_hot_labels, one_hot_predictions = np.eye(3)[labels], np.eye(3)[predictions]

    def covariance(x, y):
        return np.sum((x - x.mean(axis=0)) * (y - y.mean(axis=0)))

    expected = covariance(one_hot_labels, one_hot_predictions) / np.sqrt(
        covariance(one_hot_labels, one_hot_labels) * covariance(one_hot_predictions, one_hot_predictions))
    assert matthews_corrcoef(labels, predictions) == pytest.approx(expected)
    # a 3-class case by hand: s = 6, c = 4, t = (2, 2, 2), p = (2, 3, 1): (24 - 12) / sqrt((36 - 14)(36 - 12))
    assert matthews_corrcoef(np.array([0, 0, 1, 1, 2, 2]), np.array([0, 1, 1, 1, 2, 0])) == pytest.approx(
        12 / np.sqrt(22 * 24))
    binary = labels % 2, predictions % 2
    assert matthews_corrcoef(*binary) == pytest.approx(np.corrcoef(*binary)[0, 1])


def test_auc_by_hand():
    # positives 0.35 and 0.8 against negatives 0.1 and 0.4: 3 of 4 pairs ordered correctly
    assert roc_auc(np.array([0, 0, 1, 1]), np.array([0.1, 0.4, 0.35, 0.8])) == pytest.approx(0.75)
    assert roc_auc(np.array([0, 1]), np.array([0.2, 0.9])) == 1.0
    assert roc_auc(np.array([1, 0]), np.array([0.2, 0.9])) == 0.0


def test_auc_counts_a_tie_between_a_positive_and_a_negative_as_one_half():
    # pairs (positive, negative): (0.5, 0.5) tie = 1/2, (0.5, 0.2) = 1, (0.9, 0.5) = 1, (0.9, 0.2) = 1
    assert roc_auc(np.array([0, 1, 0, 1]), np.array([0.5, 0.5, 0.2, 0.9])) == pytest.approx(3.5 / 4)
    assert roc_auc(np.array([0, 1, 1, 0, 1]), np.full(5, 0.3)) == pytest.approx(0.5)
    # ties among positives only do not matter
    assert roc_auc(np.array([1, 1, 0]), np.array([0.7, 0.7, 0.1])) == 1.0


def test_auc_equals_pairwise_counting_with_many_ties():
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 2, 300)
    scores = np.round(rng.random(300) + 0.3 * labels, 1)  # 14 distinct values: many ties
    positives, negatives = scores[labels == 1], scores[labels == 0]
    pair_score = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p, n in itertools.product(positives, negatives))
    assert roc_auc(labels, scores) == pytest.approx(pair_score / (len(positives) * len(negatives)))


@pytest.mark.parametrize(("labels", "message"), [([1, 1], "both a positive and a negative"),
                                                 ([0, 2], "labels 0 and 1")])
def test_auc_needs_two_classes(labels, message):
    with pytest.raises(ValueError, match=message):
        roc_auc(np.array(labels), np.array([0.1, 0.2]))


def test_inputs_must_be_equally_long():
    with pytest.raises(ValueError, match="equally long"):
        accuracy(np.array([1, 0]), np.array([1]))


def test_compute_metrics_predicts_the_most_probable_class():
    probabilities = np.array([[0.2, 0.8], [0.6, 0.4], [0.3, 0.7], [0.9, 0.1], [0.45, 0.55]])
    # predictions 1, 0, 1, 0, 1 = PREDICTIONS
    metrics = compute_metrics(["accuracy", "f1", "mcc", "auc"], LABELS, probabilities)
    assert metrics == pytest.approx({"accuracy": 3 / 5, "f1": 2 / 3, "mcc": 1 / 6,
                                     # positives score 0.8, 0.4, 0.55; negatives 0.7, 0.1: 4 of 6 pairs
                                     "auc": 4 / 6})
    assert list(compute_metrics(["accuracy", "auc"], np.array([1, 1]), probabilities[:2])) == ["accuracy"]
    with pytest.raises(ValueError, match="unknown metric 'recall'"):
        compute_metrics(["recall"], LABELS, probabilities)
