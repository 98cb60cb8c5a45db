"""Tests for pretraining_pairs.py: Google's NSP pair rule, its truncation, RoBERTa's DOC-SENTENCES samples and
LDDL's length bins."""

from __future__ import annotations

import random

import pytest

from preprocessing.pretraining_pairs import (
    SentencePair,
    bin_id,
    create_pairs_from_document,
    create_segments_from_document,
    truncate_seq_pair,
)


def one_token_documents(num_documents: int, rng: random.Random) -> list[list[list[int]]]:
    """Documents whose sentences are single tokens; document d owns ids d*1000 .. so every id names its source."""
    return [[[d * 1000 + s] for s in range(rng.randint(1, 60))] for d in range(num_documents)]


def test_pairs_rebuild_the_document_and_take_random_next_from_other_documents():
    """With one-token sentences nothing is ever truncated, so Google's rule is checkable exactly:
    A (+ B when it really follows) over the pairs of a document, in order, is the document; a random B is a run
    of consecutive sentences of another document; A and B are never empty and fit in max_seq_length - 3."""
    for seed in range(30):
        rng = random.Random(seed)
        documents = one_token_documents(6, rng)
        for index, document in enumerate(documents):
            pairs = create_pairs_from_document(documents, index, 32, 0.3, rng)
            rebuilt = []
            for pair in pairs:
                assert pair.tokens_a and pair.tokens_b
                assert len(pair.tokens_a) + len(pair.tokens_b) <= 29
                assert {token // 1000 for token in pair.tokens_a} == {index}
                rebuilt += pair.tokens_a
                sources = {token // 1000 for token in pair.tokens_b}
                assert len(sources) == 1
                if pair.is_random_next:
                    assert sources != {index}
                    first = pair.tokens_b[0]
                    assert pair.tokens_b == list(range(first, first + len(pair.tokens_b)))
                else:
                    rebuilt += pair.tokens_b
            assert rebuilt == [sentence[0] for sentence in document]


def test_random_next_rate_and_the_single_document_case():
    rng = random.Random(0)
    documents = [[[d * 1000 + s] * 10 for s in range(40)] for d in range(20)]
    pairs = [pair for index in range(20) for pair in create_pairs_from_document(documents, index, 128, 0.0, rng)]
    # Chunks of several sentences take a random B half the time (Google); with 10-token sentences and a 125-token
    # target every chunk has 13 sentences, so the rate is 0.5 up to sampling noise.
    rate = sum(pair.is_random_next for pair in pairs) / len(pairs)
    assert 0.42 < rate < 0.58, rate
    # A lone document cannot lend a random B: the pair is labeled as a true next (LDDL's fix).
    lone = create_pairs_from_document(documents[:1], 0, 128, 0.0, rng)
    assert lone and not any(pair.is_random_next for pair in lone)


def test_short_seq_prob_draws_short_targets():
    documents = [[[d * 1000 + s] for s in range(2000)] for d in range(2)]
    full = create_pairs_from_document(documents, 0, 128, 0.0, random.Random(1))
    # Without short targets a chunk that really continues fills max_seq_length - 3 exactly (a random B may end
    # early when its document runs out).
    assert all(len(p.tokens_a) + len(p.tokens_b) == 125 for p in full[:-1] if not p.is_random_next)
    lengths = []
    for seed in range(200):
        pairs = create_pairs_from_document(documents, 0, 128, 1.0, random.Random(seed))
        lengths.append(len(pairs[0].tokens_a) + len(pairs[0].tokens_b))
    # With probability 1 the target is uniform in [2, 125] per document: mean 63.5, never above 125.
    assert max(lengths) <= 125 and min(lengths) >= 2
    assert 55 < sum(lengths) / len(lengths) < 72


def google_truncate(tokens_a: list[int], tokens_b: list[int], max_num_tokens: int, rng: random.Random):
    """Google's truncate_seq_pair, transcribed: one token at a time from the longer list, front or back."""
    tokens_a, tokens_b = list(tokens_a), list(tokens_b)
    while len(tokens_a) + len(tokens_b) > max_num_tokens:
        trunc = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        if rng.random() < 0.5:
            del trunc[0]
        else:
            trunc.pop()
    return tokens_a, tokens_b


@pytest.mark.parametrize("length_a, length_b, max_num_tokens", [(80, 90, 125), (200, 3, 125), (5, 5, 125),
                                                                 (64, 64, 61), (1, 300, 10)])
def test_truncation_matches_googles_loop_in_distribution(length_a, length_b, max_num_tokens):
    tokens_a, tokens_b = list(range(length_a)), list(range(1000, 1000 + length_b))
    ours_front, google_front = [], []
    for seed in range(400):
        kept_a, kept_b = truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, random.Random(seed))
        ref_a, ref_b = google_truncate(tokens_a, tokens_b, max_num_tokens, random.Random(seed))
        assert (len(kept_a), len(kept_b)) == (len(ref_a), len(ref_b))
        for kept, original in ((kept_a, tokens_a), (kept_b, tokens_b)):
            start = original.index(kept[0])
            assert kept == original[start:start + len(kept)]
        ours_front.append(tokens_a.index(kept_a[0]) + tokens_b.index(kept_b[0]))
        google_front.append(ref_a[0] + ref_b[0] - 1000)
    cuts = length_a + length_b - len(kept_a) - len(kept_b)
    if cuts:
        # Front cuts ~ Binomial(cuts, 1/2) for both: the means agree within 5 standard errors.
        standard_error = (cuts / 4 / 400) ** 0.5
        assert abs(sum(ours_front) / 400 - sum(google_front) / 400) < 5 * standard_error * 2 ** 0.5 + 1e-9
        assert abs(sum(ours_front) / 400 - cuts / 2) < 5 * standard_error + 1e-9


def test_bin_id_is_lddls_rule():
    # LDDL: bin_id = min((num_tokens - 1) // bin_size, nbins - 1): 1..64 -> 0, 65..128 -> 1.
    assert [bin_id(n, 64, 2) for n in (1, 64, 65, 128)] == [0, 0, 1, 1]
    assert [bin_id(n, 32, 4) for n in (32, 33, 96, 97, 128)] == [0, 1, 2, 3, 3]


def test_doc_sentences_pack_whole_sentences_of_the_document():
    """max_seq_length 10 leaves 8 tokens: sentences of 3, 4, 2, 5, 1 tokens pack as [3 + 4], [2 + 5 + 1]."""
    document = [[1, 2, 3], [4, 5, 6, 7], [8, 9], [10, 11, 12, 13, 14], [15]]
    assert create_segments_from_document(document, 10) == [
        SentencePair([1, 2, 3, 4, 5, 6, 7], [], False), SentencePair([8, 9, 10, 11, 12, 13, 14, 15], [], False)]
    # A sentence that fills a sample exactly, and one longer than a sample, which is cut in order (no text lost).
    assert create_segments_from_document([[1, 2], list(range(10, 18)), list(range(20, 31)), [40]], 10) == [
        SentencePair([1, 2], [], False), SentencePair(list(range(10, 18)), [], False),
        SentencePair(list(range(20, 28)), [], False), SentencePair([28, 29, 30, 40], [], False)]
    assert create_segments_from_document([[7]], 10) == [SentencePair([7], [], False)]
