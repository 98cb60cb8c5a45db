"""masking.py against Google BERT's create_pretraining_data rule and against real LDDL static masks."""

from __future__ import annotations

import contextlib
import io
from collections import Counter

import numpy as np
import pyarrow.parquet as pq
import pytest

import lddl_preprocess
from conftest import require_shared
from preprocessing.masking import (
    _whole_words,
    continuation_pieces,
    mask_batch,
    mask_tokens,
    num_to_predict,
    word_starts,
)


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


@pytest.mark.parametrize("whole_word_masking", [False, True])
def test_static_masks_at_ratio_0_3_are_capped_so_phase_1_reads_them(tmp_path, whole_word_masking):
    """MosaicBERT's --masked-lm-ratio 0.3 at length 128 asks for up to 38 masks; phase 1 reads at most 20
    (max_predictions_per_seq). lddl_preprocess.py --max-predictions-per-seq 20 caps each row's count as Google's
    create_pretraining_data does, so every row of real WikiText-2 shards has min(20, max(1, round(n * 0.3)))
    masks (at most that with whole words) and phase 1's loader reads them all."""
    from pretraining_dataset import PretrainingDataLoader

    vocab = require_shared("vocab", "bert-uncased-vocab.txt")
    shards = tmp_path / "shards"
    flags = ["--whole-word-masking"] if whole_word_masking else []
    with contextlib.redirect_stdout(io.StringIO()):
        lddl_preprocess.main(["--input", str(require_shared("data", "wikitext-2", "wiki.test.raw")),
                              "--vocab-file", str(vocab), "--output-dir", str(shards), "--num-shards", "1",
                              "--duplicate-factor", "1", "--num-workers", "1", "--max-seq-length", "128",
                              "--masked-lm-ratio", "0.3", "--max-predictions-per-seq", "20", *flags])
    table = pq.read_table(shards / "shard-0.parquet", columns=["num_tokens", "masked_lm_positions"])
    counts = [len(np.load(io.BytesIO(value))) for value in table["masked_lm_positions"].to_pylist()]
    expected = [google_num_to_predict(n, 0.3, 20) for n in table["num_tokens"].to_pylist()]
    assert sum(round(n * 0.3) > 20 for n in table["num_tokens"].to_pylist()) > 100  # the cap binds
    if whole_word_masking:
        assert all(count <= most for count, most in zip(counts, expected, strict=True))
        assert max(counts) == 20
    else:
        assert counts == expected
    loader = PretrainingDataLoader(str(shards), str(vocab), batch_size=256, max_seq_length=128,
                                   max_predictions_per_seq=20, seed=1)
    iterator = iter(loader)
    masked = sum(int((next(iterator)["masked_lm_labels"] >= 0).sum()) for _ in range(loader.steps_per_epoch))
    assert masked == sum(counts)


def test_uncapped_static_masks_at_ratio_0_3_are_refused_by_phase_1(tmp_path):
    """Without --max-predictions-per-seq (LDDL's way, no cap) the shards of the test above hold rows of up to 38
    masks, which phase 1's loader refuses naming the row: why run_pretraining.sh passes each phase's cap."""
    from pretraining_dataset import PretrainingDataLoader

    vocab = require_shared("vocab", "bert-uncased-vocab.txt")
    shards = tmp_path / "shards"
    with contextlib.redirect_stdout(io.StringIO()):
        lddl_preprocess.main(["--input", str(require_shared("data", "wikitext-2", "wiki.test.raw")),
                              "--vocab-file", str(vocab), "--output-dir", str(shards), "--num-shards", "1",
                              "--duplicate-factor", "1", "--num-workers", "1", "--max-seq-length", "128",
                              "--masked-lm-ratio", "0.3"])
    loader = PretrainingDataLoader(str(shards), str(vocab), batch_size=256, max_seq_length=128,
                                   max_predictions_per_seq=20, seed=1)
    with pytest.raises(ValueError, match=r"row \d+: 3[0-9] masked positions, more than max_predictions_per_seq=20"):
        iterator = iter(loader)
        for _ in range(loader.steps_per_epoch):
            next(iterator)


def test_max_predictions_per_seq_needs_static_masking_and_a_positive_count(tmp_path, capsys):
    base = ["--input", str(tmp_path), "--vocab-file", str(tmp_path / "v.txt"), "--output-dir", str(tmp_path / "o"),
            "--num-shards", "1"]
    for flags, message in ((["--no-masking", "--max-predictions-per-seq", "20"],
                            "--max-predictions-per-seq set static masking, which --no-masking turns off"),
                           (["--max-predictions-per-seq", "0"], "--max-predictions-per-seq 0 must be at least 1")):
        with pytest.raises(SystemExit):
            lddl_preprocess.main(base + flags)
        assert message in capsys.readouterr().err


# ------------------------------------------------------------------------------------------ whole-word masking


def google_whole_word_choice(words: list[list[int]], num_to_predict: int) -> set[int]:
    """The selection loop of Google's create_masked_lm_predictions with do_whole_word_mask, in plain Python, over
    words already in their shuffled order: a word that would overflow the count is skipped, later ones may fit."""
    covered: list[int] = []
    for word in words:
        if len(covered) >= num_to_predict:
            break
        if len(covered) + len(word) > num_to_predict:
            continue
        covered.extend(word)
    return set(covered)


def random_words(rng: np.random.Generator, batch: int, length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows [CLS] A [SEP] B [SEP] of random lengths, ids 1000.. of which the odd ones are "##" pieces."""
    input_ids = rng.integers(1000, 1010, size=(batch, length))
    num_tokens = rng.integers(5, length + 1, size=batch)
    a_ends = rng.integers(1, num_tokens - 3) + 1  # the first [SEP]
    columns = np.arange(length)[None, :]
    candidate_mask = (columns > 0) & (columns < (num_tokens - 1)[:, None]) & (columns != a_ends[:, None])
    input_ids[~candidate_mask] = 101
    return input_ids, candidate_mask, num_tokens


IS_CONTINUATION = np.zeros(1010, dtype=bool)
IS_CONTINUATION[1001::2] = True


def test_continuation_pieces_and_word_starts():
    vocab = {"[CLS]": 0, "[SEP]": 1, "un": 2, "##break": 3, "##able": 4, "word": 5}
    assert continuation_pieces(vocab).tolist() == [False, False, False, True, True, False]
    #                        [CLS] un ##break ##able word [SEP] ##able ##able [SEP]
    input_ids = np.array([[0, 2, 3, 4, 5, 1, 4, 4, 1]])
    candidate_mask = input_ids > 1
    # A "##" piece right after [SEP] (left by truncation) starts its own word.
    assert word_starts(input_ids, candidate_mask, continuation_pieces(vocab)).astype(int).tolist() == [
        [0, 1, 0, 0, 1, 0, 1, 0, 0]]


def test_whole_words_follow_googles_loop_in_key_order():
    """Given the keys (the shuffle), the words taken are exactly those of Google's loop visiting words by key."""
    rng = np.random.default_rng(11)
    input_ids, candidate_mask, num_tokens = random_words(rng, 400, 40)
    starts = word_starts(input_ids, candidate_mask, IS_CONTINUATION)
    for masked_lm_prob in (0.15, 0.3, 0.6):
        counts = np.minimum(num_to_predict(num_tokens, masked_lm_prob, 9), candidate_mask.sum(axis=1))
        keys = np.where(candidate_mask, rng.random(input_ids.shape), np.inf)
        chosen = _whole_words(keys, candidate_mask, starts, counts)
        for row in range(len(input_ids)):
            words: list[list[int]] = []
            for position in np.flatnonzero(candidate_mask[row]):
                if starts[row, position]:
                    words.append([position])
                else:
                    words[-1].append(position)
            words.sort(key=lambda word: keys[row, word[0]])
            assert set(np.flatnonzero(chosen[row])) == google_whole_word_choice(words, int(counts[row])), row


def test_whole_word_masking_masks_every_piece_of_a_word_or_none():
    rng = np.random.default_rng(12)
    input_ids, candidate_mask, num_tokens = random_words(rng, 2000, 64)
    starts = word_starts(input_ids, candidate_mask, IS_CONTINUATION)
    masked, labels = mask_batch(input_ids, candidate_mask, num_tokens, rng, 1010, 103, 0.15, 20, starts=starts)
    picked = labels >= 0
    assert not (picked & ~candidate_mask).any()
    word_of = np.cumsum(starts, axis=1)
    budget = num_to_predict(num_tokens, 0.15, 20)
    counts = picked.sum(axis=1)
    for row in range(len(input_ids)):
        words = word_of[row][candidate_mask[row]]
        hits = picked[row][candidate_mask[row]]
        for word in np.unique(words):
            assert hits[words == word].all() or not hits[words == word].any(), row
        # Google's rule leaves a row unmasked only when every word is longer than the count.
        assert counts[row] >= 1 or np.unique(words, return_counts=True)[1].min() > budget[row], row
    assert (counts <= budget).all() and np.mean(counts == budget) > 0.9
    np.testing.assert_array_equal(labels[picked], input_ids[picked])
    # Each piece is replaced on its own: 80% [MASK], 10% kept, 10% random.
    replaced = masked[picked]
    assert abs(np.mean(replaced == 103) - 0.8) < 0.02
    assert abs(np.mean(replaced == input_ids[picked]) - (0.1 + 0.1 / 1010)) < 0.02


def test_whole_words_of_one_piece_are_the_per_piece_rule():
    """Without "##" pieces every word is one piece: the same generator state picks the same positions and ids."""
    rng = np.random.default_rng(13)
    input_ids, candidate_mask, num_tokens = random_words(rng, 300, 50)
    starts = word_starts(input_ids, candidate_mask, np.zeros(1010, dtype=bool))
    per_piece = mask_batch(input_ids, candidate_mask, num_tokens, np.random.default_rng(4), 1010, 103, 0.3, 12)
    whole_word = mask_batch(input_ids, candidate_mask, num_tokens, np.random.default_rng(4), 1010, 103, 0.3, 12,
                            starts=starts)
    for left, right in zip(per_piece, whole_word, strict=True):
        np.testing.assert_array_equal(left, right)


def test_whole_word_choice_is_uniform_over_words():
    """[CLS] w0 w1 w2(2 pieces) w3 [SEP], count round(0.4 * 7) = 3. Over the 24 equally likely visiting orders
    Google's rule takes w2 with the single word before or after it when w2 comes first or second (each single
    word 1/6), and {w0, w1, w3} when w2 comes third (it overflows and is skipped) or last: probability 1/2."""
    input_ids = np.tile(np.array([101, 1000, 1002, 1004, 1001, 1006, 102]), (20000, 1))
    candidate_mask = input_ids != 101
    candidate_mask[:, -1] = False
    starts = word_starts(input_ids, candidate_mask, IS_CONTINUATION)
    _, labels = mask_batch(input_ids, candidate_mask, np.full(20000, 7), np.random.default_rng(14), 1010, 103, 0.4,
                           starts=starts)
    outcomes = Counter(tuple(np.flatnonzero(row >= 0)) for row in labels)
    assert set(outcomes) == {(1, 2, 5), (1, 3, 4), (2, 3, 4), (3, 4, 5)}
    observed = np.array([outcomes[key] for key in sorted(outcomes)], dtype=float)
    assert chi_square(observed, 20000 * np.array([1 / 2, 1 / 6, 1 / 6, 1 / 6])) < chi_square_bound(3)
