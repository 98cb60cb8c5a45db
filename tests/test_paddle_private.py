"""paddle_private.py on the pinned Paddle version: each wrapper against an independent expectation."""

from __future__ import annotations

import re

import numpy as np
import paddle
import pytest

from conftest import ROOT
from utils import paddle_private


def pinned_paddle_version() -> str:
    text = (ROOT / "requirements.txt").read_text(encoding="utf-8")
    return re.search(r"^paddlepaddle==(\S+)", text, re.MULTILINE).group(1)


def test_the_installed_paddle_is_the_pinned_one():
    # The wrappers call private Paddle APIs: a different version needs these tests read again, not trusted.
    assert paddle.__version__ == pinned_paddle_version()


@pytest.mark.parametrize("advance_beta_pows", [True, False])
def test_fused_adam_step_is_one_step_of_kingma_and_ba(advance_beta_pows):
    rng = np.random.default_rng(0)
    beta1, beta2, epsilon, lr, t = 0.9, 0.999, 1e-6, 0.01, 3
    weight, grad, m, v = rng.normal(size=(4, 5)), rng.normal(size=(4, 5)), rng.normal(size=(4, 5)), rng.random((4, 5))
    tensors = [paddle.to_tensor(a) for a in (weight, grad, m, v)]
    beta1_pow, beta2_pow = (paddle.to_tensor(np.array([beta**t])) for beta in (beta1, beta2))  # float64
    paddle_private.fused_adam_step_(
        tensors[0], tensors[1], paddle.to_tensor(np.array([lr])), tensors[2], tensors[3], beta1_pow, beta2_pow,
        beta1=beta1, beta2=beta2, epsilon=epsilon, advance_beta_pows=advance_beta_pows,
    )
    # Kingma & Ba 2015, Algorithm 1, step t (epsilon added to the bias-corrected root).
    m = beta1 * m + (1 - beta1) * grad
    v = beta2 * v + (1 - beta2) * grad**2
    expected = weight - lr * (m / (1 - beta1**t)) / (np.sqrt(v / (1 - beta2**t)) + epsilon)
    for tensor, value in zip(tensors, (expected, grad, m, v), strict=True):
        np.testing.assert_allclose(tensor.numpy(), value, rtol=1e-12, atol=1e-12)
    powers = (beta1 ** (t + 1), beta2 ** (t + 1)) if advance_beta_pows else (beta1**t, beta2**t)
    np.testing.assert_allclose([beta1_pow.item(), beta2_pow.item()], powers, rtol=1e-12)


def test_unscale_and_check_finite_divides_in_place_and_flags_inf_and_nan():
    grads = [paddle.to_tensor([2.0, -8.0]), paddle.to_tensor([[1.0], [0.5]])]
    found_inf = paddle_private.unscale_and_check_finite_(grads, paddle.to_tensor([4.0]))
    assert found_inf.dtype == paddle.bool and found_inf.numpy().tolist() == [False]
    np.testing.assert_array_equal(grads[0].numpy(), [0.5, -2.0])
    np.testing.assert_array_equal(grads[1].numpy(), [[0.25], [0.125]])
    for bad in (np.inf, -np.inf, np.nan):
        flagged = [paddle.to_tensor([1.0, 2.0]), paddle.to_tensor([bad, 1.0])]
        assert paddle_private.unscale_and_check_finite_(flagged, paddle.to_tensor([2.0])).numpy().tolist() == [True]


def test_generator_state_fields_round_trip_and_replay_the_draws():
    paddle.seed(1234)
    (state,) = paddle.get_rng_state(device="cpu")
    fields = paddle_private.generator_state_fields(state)
    assert (fields.device, fields.seed, fields.offset) == (-1, 1234, 0)
    # The C++ text form of std::mt19937_64 ([rand.eng.mers]): its 312 state words and the index, in decimal.
    words = fields.engine.decode("ascii").split()
    assert len(words) == 313 and all(0 <= int(word) < 2**64 for word in words)
    first = paddle.rand([5]).numpy()
    paddle.set_rng_state([paddle_private.generator_state_from_fields(fields)], device="cpu")
    np.testing.assert_array_equal(paddle.rand([5]).numpy(), first)
    assert paddle_private.generator_state_fields(paddle_private.generator_state_from_fields(fields)) == fields


def test_create_master_weight_keeps_one_fp32_copy_per_parameter():
    values = np.array([[1.0, 1e-4], [3.14159, -65504.0]], np.float16)
    param = paddle.create_parameter([2, 2], "float16", default_initializer=paddle.nn.initializer.Assign(values))
    optimizer = paddle.optimizer.Adam(parameters=[param], multi_precision=True)
    master = paddle_private.create_master_weight(optimizer, param)
    assert master.dtype == paddle.float32 and master.name.startswith(param.name + "_fp32_master")
    np.testing.assert_array_equal(master.numpy(), values.astype(np.float32))  # fp16 -> fp32 is exact
    assert optimizer._master_weights[param.name] is master
    assert paddle_private.create_master_weight(optimizer, param) is master
