"""masking.py against Google BERT's create_pretraining_data rule and against real LDDL static masks."""

from __future__ import annotations

import io

import numpy as np
import pyarrow.parquet as pq
import pytest

from conftest import require_shared
from masking import mask_batch, mask_tokens, num_to_predict


def google_num_to_predict(num_tokens: int, masked_lm_prob: float, max_predictions_per_seq: int) -> int:
    """The count line of google-research/bert create_pretraining_data.py, in plain Python."""
    return min(max_predictions_per_seq, max(1, int(round(num_tokens * masked_lm_prob))))


def sequence(length: int) -> tuple[np.ndarray, np.ndarray]:
    """[CLS] tokens... [SEP] with ids 1000.. and the candidate mask that excludes [CLS] and [SEP]."""
    input_ids = np.arange(1000, 1000 + length, dtype=np.int64)
    input_ids[0], input_ids[-1] = 101, 102
    candidate_mask = np.ones(length, dtype=bool)
    candidate_mask[[0, -1]] = False
    return input_ids, candidate_mask


@pytest.mark.parametrize("masked_lm_prob", [0.15, 0.1, 0.2, 0.5])
def test_count_rule_equals_python_round(masked_lm_prob):
    lengths = np.arange(1, 1025)
    expected = [google_num_to_predict(int(n), masked_lm_prob, 10**9) for n in lengths]
    assert num_to_predict(lengths, masked_lm_prob).tolist() == expected
    # half-way products round to even, as Python 3's round does: 0.5 * 3 = 1.5 -> 2, 0.5 * 5 = 2.5 -> 2
    assert num_to_predict(np.array([3, 5, 7]), 0.5).tolist() == [2, 2, 4]


def test_mask_tokens_draws_exactly_the_rule_count():
    rng = np.random.default_rng(0)
    for length in list(range(3, 140)) + [255, 512]:
        input_ids, candidate_mask = sequence(length)
        expected = min(google_num_to_predict(length, 0.15, 80), length - 2)
        masked, positions, originals = mask_tokens(input_ids, candidate_mask, rng, 30522, 103,
                                                   masked_lm_prob=0.15, max_predictions_per_seq=80)
        assert len(positions) == expected, length
        assert np.all(np.diff(positions) > 0) and candidate_mask[positions].all()
        np.testing.assert_array_equal(originals, input_ids[positions])
        untouched = np.ones(length, dtype=bool)
        untouched[positions] = False
        np.testing.assert_array_equal(masked[untouched], input_ids[untouched])


def test_count_is_capped_by_candidates_and_max_predictions():
    rng = np.random.default_rng(1)
    input_ids, candidate_mask = sequence(100)  # the rule asks for 15
    candidate_mask[10:] = False  # only positions 1..9 may be masked
    _, positions, _ = mask_tokens(input_ids, candidate_mask, rng, 30522, 103)
    assert positions.tolist() == list(range(1, 10))
    _, positions, _ = mask_tokens(*sequence(100), rng, 30522, 103, max_predictions_per_seq=4)
    assert len(positions) == 4


def chi_square(observed: np.ndarray, expected: np.ndarray) -> float:
    return float(((observed - expected) ** 2 / expected).sum())


def chi_square_bound(degrees_of_freedom: int) -> float:
    """Mean + 6 standard deviations of a chi-square variable: a correct sampler stays below it."""
    return degrees_of_freedom + 6 * np.sqrt(2 * degrees_of_freedom)


def test_replacement_split_is_80_10_10_over_the_whole_vocab():
    # Every token is id 7 and [MASK] is 3 in a 50-token vocab, so each output id has a known probability:
    # 3: 0.8 + 0.1/50, 7: 0.1 + 0.1/50, any other id: 0.1/50 (random ids may be special ids too).
    vocab_size, mask_id, token_id, batch, length = 50, 3, 7, 4000, 42
    input_ids = np.full((batch, length), token_id)
    candidate_mask = np.ones((batch, length), dtype=bool)
    masked, labels = mask_batch(input_ids, candidate_mask, np.full(batch, length), np.random.default_rng(2),
                                vocab_size, mask_id)
    picked = masked[labels >= 0]
    assert picked.size == batch * 6  # round(0.15 * 42) = 6 per row
    observed = np.bincount(picked, minlength=vocab_size).astype(float)
    probabilities = np.full(vocab_size, 0.1 / vocab_size)
    probabilities[mask_id] += 0.8
    probabilities[token_id] += 0.1
    assert chi_square(observed, probabilities * picked.size) < chi_square_bound(vocab_size - 1)
    assert abs(observed[mask_id] / picked.size - 0.802) < 0.01


def test_positions_are_uniform_over_candidates():
    batch, length = 5000, 30
    input_ids = np.tile(np.arange(length), (batch, 1))
    candidate_mask = np.ones((batch, length), dtype=bool)
    candidate_mask[:, [0, 12, 29]] = False
    _, labels = mask_batch(input_ids, candidate_mask, np.full(batch, length), np.random.default_rng(3), 100, 99)
    hits = (labels >= 0).sum(axis=0)
    assert hits[[0, 12, 29]].sum() == 0
    observed = hits[candidate_mask[0]].astype(float)
    expected = np.full(observed.size, batch * 4 / observed.size)  # round(0.15 * 30) = 4 (4.5 -> 4)
    assert observed.sum() == batch * 4
    assert chi_square(observed, expected) < chi_square_bound(observed.size - 1)


def test_same_generator_state_gives_the_same_masks():
    input_ids, candidate_mask = sequence(128)
    first = mask_tokens(input_ids, candidate_mask, np.random.default_rng(5), 30522, 103)
    second = mask_tokens(input_ids, candidate_mask, np.random.default_rng(5), 30522, 103)
    other = mask_tokens(input_ids, candidate_mask, np.random.default_rng(6), 30522, 103)
    for left, right in zip(first, second, strict=True):
        np.testing.assert_array_equal(left, right)
    assert not np.array_equal(first[1], other[1])


def test_rule_matches_real_lddl_static_masks():
    """LDDL 0.1.0 masked these shards with Google's rule; every row must have exactly our count."""
    folder = require_shared("data", "lddl-sample", "wikitext2-test-seq128-unbinned")
    table = pq.read_table(folder / "shard-0.parquet", columns=["A", "num_tokens", "masked_lm_positions"])
    num_tokens = np.array(table["num_tokens"].to_pylist())
    lengths_a = np.array([len(a.split(" ")) for a in table["A"].to_pylist()])
    positions = [np.load(io.BytesIO(value)) for value in table["masked_lm_positions"].to_pylist()]
    assert [len(p) for p in positions] == num_to_predict(num_tokens, 0.15).tolist()
    for p, length_a, length in zip(positions, lengths_a, num_tokens, strict=True):
        assert p.min() > 0 and length_a + 1 not in p and p.max() < length - 1
