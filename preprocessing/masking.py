"""BERT masked-LM masking: the one rule shared by static masking (preprocessing) and dynamic masking (loader).

The rule is Google BERT's create_pretraining_data.py (Devlin et al. 2018, section 3.1, "Task #1: Masked LM"):
- num_to_predict = min(max_predictions_per_seq, max(1, round(num_tokens * masked_lm_prob))), where num_tokens is
  the length of the whole sequence `[CLS] A [SEP] B [SEP]` (the special tokens count, padding does not) and
  round is Python's round, i.e. round half to even on the float64 product, as Google's `int(round(...))`;
  it is further capped by the number of candidate positions (Google's loop stops when candidates run out);
- those positions are drawn uniformly without replacement among the candidates (never [CLS], [SEP] or padding);
- each drawn position becomes [MASK] with probability 0.8, keeps its token with probability 0.1, and gets an id
  drawn uniformly from the whole vocabulary (special and [unused] tokens included) with probability 0.1.

Drawing without replacement is done for a whole batch at once: every candidate gets an independent uniform key
and the k smallest keys of a row win, which picks each k-subset of the candidates with equal probability.

Whole-word masking (Google's release of whole-word-masked BERT, 2019; `--do_whole_word_mask` of its
create_pretraining_data.py) draws words instead of pieces. A word is a head piece with the `##` continuation
pieces that follow it; here a word never crosses [CLS] or [SEP] (a `##` piece right after one, left by truncation,
starts its own word; Google's code would join it to the word before the [SEP]). The words of a row are visited in
uniformly random order (each gets a uniform key, smallest first) and a word is taken whole, all its pieces, when
they fit in what is left of the count; a word that would overflow the count is skipped and later, shorter words
may still fill it (Google's `continue`). So a row gets at most the count of the rule above, usually exactly it.
Each piece of a taken word is then replaced on its own by the 0.8 / 0.1 / 0.1 rule, as Google's release does.
With every word one piece long this picks exactly the positions the per-piece rule picks from the same generator.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

MASKED_LM_RATIO = 0.15  # BERT's share of a sequence's tokens drawn for prediction
MASK_PROBABILITY = 0.8  # of a drawn position becoming [MASK]
KEEP_PROBABILITY = 0.1  # of a drawn position keeping its token; the remaining 0.1 gets a random id
CONTINUATION_PREFIX = "##"  # WordPiece's mark of a piece that continues the word before it


def check_masked_lm_ratio(ratio: float, name: str) -> None:
    """ValueError naming `name` (the flag or parameter that gave it) unless 0 < ratio < 1: the share of a sequence's
    tokens drawn for prediction, by the preprocessors' static masking and the loader's dynamic masking alike (a
    share of 1 would leave no token unmasked to predict from)."""
    if not 0.0 < ratio < 1.0:
        raise ValueError(f"{name} {ratio}: must be between 0 and 1 (both excluded)")


def num_to_predict(num_tokens: np.ndarray | int, masked_lm_prob: float = MASKED_LM_RATIO,
                   max_predictions_per_seq: int | None = None) -> np.ndarray:
    """min(max_predictions_per_seq, max(1, round(num_tokens * masked_lm_prob))) for each sequence length.

    np.rint rounds half to even on the exact float64 value, the same result as Python's round().
    """
    counts = np.maximum(1, np.rint(np.asarray(num_tokens, dtype=np.float64) * masked_lm_prob)).astype(np.int64)
    if max_predictions_per_seq is not None:
        counts = np.minimum(counts, max_predictions_per_seq)
    return counts


def continuation_pieces(vocab: Mapping[str, int]) -> np.ndarray:
    """bool [vocab_size]: True at the id of every WordPiece continuation piece (a token starting with "##")."""
    table = np.zeros(max(vocab.values()) + 1, dtype=bool)
    table[[index for token, index in vocab.items() if token.startswith(CONTINUATION_PREFIX)]] = True
    return table


def word_starts(input_ids: np.ndarray, candidate_mask: np.ndarray, is_continuation: np.ndarray) -> np.ndarray:
    """bool [batch, length]: True at the candidates that begin a word (see the module docstring).

    A candidate begins a word unless it is a continuation piece right after another candidate.
    """
    input_ids = np.asarray(input_ids)
    candidate_mask = np.asarray(candidate_mask, dtype=bool)
    after_candidate = np.zeros_like(candidate_mask)
    after_candidate[:, 1:] = candidate_mask[:, :-1]
    return candidate_mask & ~(is_continuation[input_ids] & after_candidate)


def mask_batch(input_ids: np.ndarray, candidate_mask: np.ndarray, num_tokens: np.ndarray,
               rng: np.random.Generator, vocab_size: int, mask_token_id: int, masked_lm_prob: float = 0.15,
               max_predictions_per_seq: int | None = None, starts: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
    """Mask every row of a padded batch by the rule in the module docstring.

    Args:
      input_ids: int [batch, length] token ids (rows may be right-padded).
      candidate_mask: bool [batch, length], True where a token may be masked (not [CLS]/[SEP]/padding).
      num_tokens: int [batch], the unpadded length of each row, special tokens included.
      rng: the source of all randomness; the result is a pure function of its state and the inputs.
      starts: bool [batch, length] from word_starts() for whole-word masking; None masks single pieces.
    Returns:
      masked_input_ids: [batch, length], same dtype as input_ids.
      masked_lm_labels: int64 [batch, length], the original id at masked positions and -1 elsewhere.
    """
    input_ids = np.asarray(input_ids)
    candidate_mask = np.asarray(candidate_mask, dtype=bool)
    if input_ids.ndim != 2 or candidate_mask.shape != input_ids.shape:
        raise ValueError(f"input_ids {input_ids.shape} and candidate_mask {candidate_mask.shape} must be equal 2-D")
    counts = np.minimum(num_to_predict(num_tokens, masked_lm_prob, max_predictions_per_seq),
                        candidate_mask.sum(axis=1))
    # Each candidate gets a uniform key (non-candidates +inf); a word's key is the key of its first piece.
    keys = np.where(candidate_mask, rng.random(input_ids.shape), np.inf)
    if starts is None:
        chosen = _smallest_keys(keys, counts)
    else:
        chosen = _whole_words(keys, candidate_mask, np.asarray(starts, dtype=bool), counts)
    return _replace(input_ids, chosen, rng, vocab_size, mask_token_id)


def _smallest_keys(keys: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """bool [batch, length]: each row's `count` smallest keys.

    Only the largest count of the batch is partitioned off and sorted, which is cheaper than sorting whole rows.
    """
    chosen = np.zeros(keys.shape, dtype=bool)
    most = int(counts.max(initial=0))
    if most:
        smallest = np.argpartition(keys, most - 1, axis=1)[:, :most]
        smallest = np.take_along_axis(smallest, np.argsort(np.take_along_axis(keys, smallest, axis=1), axis=1), 1)
        wanted = np.arange(most)[None, :] < counts[:, None]
        chosen[np.nonzero(wanted)[0], smallest[wanted]] = True
    return chosen


def _whole_words(keys: np.ndarray, candidate_mask: np.ndarray, starts: np.ndarray, counts: np.ndarray
                 ) -> np.ndarray:
    """bool [batch, length]: the pieces of the words Google's whole-word rule takes, words visited by key."""
    batch_size, length = keys.shape
    rows = np.arange(batch_size)[:, None]
    word_of = np.cumsum(starts, axis=1) - 1  # [batch, length] word index of each candidate (from its start)
    word_keys = np.full((batch_size, length), np.inf)
    start_rows, start_cols = np.nonzero(starts)
    word_keys[start_rows, word_of[start_rows, start_cols]] = keys[start_rows, start_cols]
    piece_rows, piece_cols = np.nonzero(candidate_mask)
    word_lengths = np.zeros((batch_size, length), dtype=np.int64)
    np.add.at(word_lengths, (piece_rows, word_of[piece_rows, piece_cols]), 1)

    order = np.argsort(word_keys, axis=1)  # [batch, words] visiting order; absent words (length 0) come last
    lengths = np.take_along_axis(word_lengths, order, axis=1)
    # Up to the first word that overflows, every word fits: take that prefix at once, then go on word by word.
    taken = (np.cumsum(lengths, axis=1) <= counts[:, None]) & (lengths > 0)
    filled = (lengths * taken).sum(axis=1)
    for visit in range(int(taken.sum(axis=1).min()), length):
        open_rows = filled < counts
        if not open_rows.any():
            break
        fits = open_rows & ~taken[:, visit] & (lengths[:, visit] > 0) & (filled + lengths[:, visit] <= counts)
        taken[:, visit] |= fits
        filled += np.where(fits, lengths[:, visit], 0)
    word_taken = np.zeros((batch_size, length), dtype=bool)
    word_taken[rows, order] = taken
    return candidate_mask & word_taken[rows, np.maximum(word_of, 0)]


def _replace(input_ids: np.ndarray, chosen: np.ndarray, rng: np.random.Generator, vocab_size: int,
             mask_token_id: int) -> tuple[np.ndarray, np.ndarray]:
    """The 0.8 / 0.1 / 0.1 replacement of every chosen position, drawn in row-major order."""
    rows, cols = np.nonzero(chosen)
    action = rng.random(rows.size)
    to_mask = action < MASK_PROBABILITY
    to_random = action >= MASK_PROBABILITY + KEEP_PROBABILITY

    masked_lm_labels = np.full(input_ids.shape, -1, dtype=np.int64)
    masked_lm_labels[rows, cols] = input_ids[rows, cols]
    masked_input_ids = input_ids.copy()
    masked_input_ids[rows[to_mask], cols[to_mask]] = mask_token_id
    masked_input_ids[rows[to_random], cols[to_random]] = rng.integers(0, vocab_size, size=int(to_random.sum()))
    return masked_input_ids, masked_lm_labels


def mask_tokens(input_ids: np.ndarray, candidate_mask: np.ndarray, rng: np.random.Generator, vocab_size: int,
                mask_token_id: int, masked_lm_prob: float = 0.15, max_predictions_per_seq: int | None = None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mask one unpadded sequence `[CLS] A [SEP] B [SEP]` (its length is the num_tokens of the count rule).

    Args:
      input_ids: int [length] token ids of the whole sequence, no padding.
      candidate_mask: bool [length], True where a token may be masked (False at [CLS] and the [SEP]s).
    Returns:
      masked_input_ids [length] (same dtype as input_ids), masked_lm_positions int64 [k] sorted ascending,
      masked_lm_ids [k], the original ids at those positions.
    """
    input_ids = np.asarray(input_ids)
    if input_ids.ndim != 1:
        raise ValueError(f"mask_tokens takes one sequence, got input_ids of shape {input_ids.shape}")
    masked, labels = mask_batch(input_ids[None, :], np.asarray(candidate_mask)[None, :], np.array([input_ids.size]),
                                rng, vocab_size, mask_token_id, masked_lm_prob, max_predictions_per_seq)
    masked_lm_positions = np.flatnonzero(labels[0] >= 0)
    return masked[0], masked_lm_positions, input_ids[masked_lm_positions]
