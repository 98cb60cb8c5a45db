"""loss.py against cross-entropy computed by hand in NumPy, with Paddle's cross-entropy op and with the cpu_ops
extension's (the criterion of a model built with the CPU kernels)."""

from __future__ import annotations

import numpy as np
import paddle
import paddle.nn.functional as F
import pytest

from conftest import require_cpu_ops
from loss import IGNORE_INDEX, BertPretrainingCriterion, masked_lm_loss, squad_span_loss


@pytest.fixture(params=["paddle", "cpu_ops"])
def ops(request):
    """The masked-LM cross-entropy's kernel: Paddle's op (None) or the extension's."""
    return require_cpu_ops() if request.param == "cpu_ops" else None


def numpy_cross_entropy(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    return -log_probs[np.arange(len(labels)), labels]


def test_masked_lm_loss_averages_over_valid_positions_only(ops):
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(6, 11)).astype(np.float32)
    labels = np.array([3, IGNORE_INDEX, 7, IGNORE_INDEX, IGNORE_INDEX, 0])
    valid = labels != IGNORE_INDEX
    expected = numpy_cross_entropy(logits[valid], labels[valid]).mean()
    got = float(masked_lm_loss(paddle.to_tensor(logits), paddle.to_tensor(labels), ops))
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    # The trap this guards against: Paddle's own mean divides by all six positions.
    trap = float(F.cross_entropy(paddle.to_tensor(logits), paddle.to_tensor(labels).reshape([-1, 1]),
                                 ignore_index=IGNORE_INDEX))
    assert abs(trap - expected) > 0.1


def test_masked_lm_loss_is_zero_without_valid_labels(ops):
    logits = paddle.randn([4, 5])
    assert float(masked_lm_loss(logits, paddle.full([4], IGNORE_INDEX, dtype="int64"), ops)) == 0.0


@pytest.mark.parametrize("use_cpu_kernels", [False, True])
def test_pretraining_criterion_is_mlm_plus_nsp(use_cpu_kernels):
    rng = np.random.default_rng(1)
    scores = rng.normal(size=(5, 13)).astype(np.float32)
    labels = np.array([1, 2, IGNORE_INDEX, 4, 12])
    nsp_scores = rng.normal(size=(3, 2)).astype(np.float32)
    nsp_labels = np.array([0, 1, 1])
    criterion = BertPretrainingCriterion(use_cpu_kernels)
    assert (criterion.ops is not None) == (use_cpu_kernels and require_cpu_ops() is not None)
    loss, mlm, nsp = criterion(
        paddle.to_tensor(scores), paddle.to_tensor(nsp_scores), paddle.to_tensor(labels), paddle.to_tensor(nsp_labels)
    )
    expected_mlm = numpy_cross_entropy(scores[labels >= 0], labels[labels >= 0]).mean()
    expected_nsp = numpy_cross_entropy(nsp_scores, nsp_labels).mean()
    np.testing.assert_allclose([float(mlm), float(nsp), float(loss)],
                               [expected_mlm, expected_nsp, expected_mlm + expected_nsp], rtol=1e-6)


def test_squad_span_loss_is_mean_of_start_and_end():
    rng = np.random.default_rng(2)
    start, end = rng.normal(size=(2, 4, 9)).astype(np.float32)
    start_positions, end_positions = np.array([0, 3, 8, 2]), np.array([1, 3, 8, 5])
    expected = (numpy_cross_entropy(start, start_positions).mean() + numpy_cross_entropy(end, end_positions).mean()) / 2
    got = squad_span_loss(*(paddle.to_tensor(a) for a in (start, end, start_positions, end_positions)))
    np.testing.assert_allclose(float(got), expected, rtol=1e-6)


def test_the_span_heads_bias_gets_only_rounding_as_its_gradient():
    """Softmax cross-entropy's gradient (p - onehot) sums to 0 over each example's positions, so a bias added to
    every position's start (or end) logit has an exact gradient of 0; in float32 what is left is rounding, within
    2 S U of it for S positions. The head's weight gets a real gradient. (test_squad_run compares the bias across
    runs for this reason only as residue.)"""
    rng = np.random.default_rng(5)
    batch, seq, hidden = 8, 128, 16
    sequence_output = paddle.to_tensor(rng.normal(size=(batch, seq, hidden)).astype(np.float32))
    head = paddle.nn.Linear(hidden, 2)
    start, end = head(sequence_output).unbind(axis=-1)
    positions = [paddle.to_tensor(rng.integers(0, seq, batch)) for _ in range(2)]
    squad_span_loss(start, end, *positions).backward()
    assert np.abs(head.bias.grad.numpy()).max() <= 2 * seq * 2.0**-24
    assert np.abs(head.weight.grad.numpy()).max() > 1e-2
