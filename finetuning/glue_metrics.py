"""GLUE's metrics in NumPy: accuracy, binary F1, Matthews correlation and ROC AUC of classes, and Pearson and
Spearman correlation of scores.

GLUE (Wang et al. 2019) scores CoLA by Matthews correlation, MRPC and QQP by accuracy and F1 of the positive
class, STS-B by Pearson and Spearman correlation (its one figure is their mean), and the other tasks by
accuracy; ROC AUC over the positive-class probability is what the original multi-GPU BERT recipe reported for
QQP. Degenerate cases follow scikit-learn's conventions, so the numbers compare with published ones: F1 is 0
when there are no true and no predicted positives, and MCC is 0 when a marginal of the confusion matrix is
constant; likewise a correlation is 0 when either side is constant (SciPy's would be nan: undefined).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

METRIC_NAMES = ("accuracy", "f1", "mcc", "auc")
REGRESSION_METRIC_NAMES = ("pearson", "spearman", "pearson_spearman_mean")


def _labels_and_predictions(labels: np.ndarray, predictions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    if labels.shape != predictions.shape or labels.ndim != 1 or labels.size == 0:
        raise ValueError(f"need two equally long, non-empty 1-D arrays, got shapes {labels.shape} "
                         f"and {predictions.shape}")
    return labels, predictions


def accuracy(labels: np.ndarray, predictions: np.ndarray) -> float:
    labels, predictions = _labels_and_predictions(labels, predictions)
    return float(np.mean(labels == predictions))


def binary_f1(labels: np.ndarray, predictions: np.ndarray, positive: int = 1) -> float:
    """F1 = 2 TP / (2 TP + FP + FN) of the class `positive`; 0 when that class is neither present nor predicted."""
    labels, predictions = _labels_and_predictions(labels, predictions)
    true_positives = np.sum((labels == positive) & (predictions == positive))
    false_positives = np.sum((labels != positive) & (predictions == positive))
    false_negatives = np.sum((labels == positive) & (predictions != positive))
    denominator = 2 * true_positives + false_positives + false_negatives
    return float(2 * true_positives / denominator) if denominator else 0.0


def matthews_corrcoef(labels: np.ndarray, predictions: np.ndarray) -> float:
    """Matthews correlation coefficient, for two or more classes (Gorodkin 2004, "Comparing two K-category
    assignments by a K-category correlation coefficient", eq. 2 in covariance form):

        MCC = (c s - sum_k p_k t_k) / sqrt((s^2 - sum_k p_k^2) (s^2 - sum_k t_k^2))

    with s samples, c of them correct, t_k true and p_k predicted members of class k. For two classes this is
    (TP TN - FP FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)). 0 when either factor under the root is 0.
    """
    labels, predictions = _labels_and_predictions(labels, predictions)
    classes, indices = np.unique(np.concatenate([labels, predictions]), return_inverse=True)
    true_index, predicted_index = indices[:labels.size], indices[labels.size:]
    true_counts = np.bincount(true_index, minlength=classes.size).astype(np.float64)
    predicted_counts = np.bincount(predicted_index, minlength=classes.size).astype(np.float64)
    samples = float(labels.size)
    correct = float(np.sum(true_index == predicted_index))
    numerator = correct * samples - predicted_counts @ true_counts
    denominator = (samples**2 - predicted_counts @ predicted_counts) * (samples**2 - true_counts @ true_counts)
    return float(numerator / np.sqrt(denominator)) if denominator > 0 else 0.0


def roc_auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve of `scores` for labels 1 (positive) against 0, by the Mann-Whitney statistic:

        AUC = (R_pos - n_pos (n_pos + 1) / 2) / (n_pos n_neg)

    where R_pos sums the ranks (1 = lowest score) of the positives and tied scores share their mean rank, so a
    positive tied with a negative counts one half (Hanley & McNeil 1982). ValueError unless both classes occur.
    """
    labels, scores = _labels_and_predictions(labels, scores)
    if not np.all((labels == 0) | (labels == 1)):
        raise ValueError(f"ROC AUC needs labels 0 and 1, got {np.unique(labels).tolist()}")
    positives = int(np.sum(labels == 1))
    negatives = labels.size - positives
    if positives == 0 or negatives == 0:
        raise ValueError("ROC AUC needs both a positive and a negative example")
    positive_rank_sum = float(np.sum(mean_ranks(scores)[labels == 1]))
    return (positive_rank_sum - positives * (positives + 1) / 2.0) / (positives * negatives)


def mean_ranks(values: np.ndarray) -> np.ndarray:
    """The rank of each value (1 = lowest), tied values sharing the mean of their ranks (float64)."""
    _, tie_group, group_sizes = np.unique(values, return_inverse=True, return_counts=True)
    # Ranks of a tie group of size g starting after r lower values are r+1..r+g; their mean is r + (g + 1) / 2.
    lower_values = np.cumsum(group_sizes) - group_sizes
    return (lower_values + (group_sizes + 1) / 2.0)[tie_group.reshape(-1)]


def pearson(scores: np.ndarray, predictions: np.ndarray) -> float:
    """Pearson's correlation coefficient of two equally long series: cov(x, y) / (std(x) std(y)); 0 when either
    is constant."""
    scores, predictions = _labels_and_predictions(scores, predictions)
    x = scores.astype(np.float64) - np.mean(scores, dtype=np.float64)
    y = predictions.astype(np.float64) - np.mean(predictions, dtype=np.float64)
    denominator = np.sqrt(np.dot(x, x) * np.dot(y, y))
    return float(np.clip(np.dot(x, y) / denominator, -1.0, 1.0)) if denominator > 0 else 0.0


def spearman(scores: np.ndarray, predictions: np.ndarray) -> float:
    """Spearman's rank correlation: Pearson's of the two series' mean_ranks (ties share their mean rank, as in
    SciPy's spearmanr); 0 when either is constant."""
    scores, predictions = _labels_and_predictions(scores, predictions)
    return pearson(mean_ranks(scores), mean_ranks(predictions))


def compute_metrics(names: Sequence[str], label_ids: np.ndarray, probabilities: np.ndarray) -> dict[str, float]:
    """The named metrics of predictions with class probabilities [N, C] against label_ids [N].

    The prediction is the most probable class; F1 and AUC take class 1 as the positive class (AUC scores it by
    its probability) and need two classes. AUC is left out when label_ids hold only one class.
    """
    probabilities = np.asarray(probabilities)
    predictions = np.argmax(probabilities, axis=1)
    metrics = {}
    for name in names:
        if name == "accuracy":
            metrics[name] = accuracy(label_ids, predictions)
        elif name == "f1":
            metrics[name] = binary_f1(label_ids, predictions)
        elif name == "mcc":
            metrics[name] = matthews_corrcoef(label_ids, predictions)
        elif name == "auc":
            if np.unique(label_ids).size == 2:
                metrics[name] = roc_auc(label_ids, probabilities[:, 1])
        else:
            raise ValueError(f"unknown metric {name!r}; expected one of {METRIC_NAMES}")
    return metrics



def compute_regression_metrics(names: Sequence[str], scores: np.ndarray, predictions: np.ndarray) -> dict[str, float]:
    """The named metrics of predicted scores [N] against the true ones [N]: pearson, spearman, and their mean,
    pearson_spearman_mean (GLUE's one figure for STS-B)."""
    correlations = {"pearson": pearson(scores, predictions), "spearman": spearman(scores, predictions)}
    correlations["pearson_spearman_mean"] = (correlations["pearson"] + correlations["spearman"]) / 2
    unknown = [name for name in names if name not in correlations]
    if unknown:
        raise ValueError(f"unknown metric {unknown[0]!r}; expected one of {REGRESSION_METRIC_NAMES}")
    return {name: correlations[name] for name in names}
