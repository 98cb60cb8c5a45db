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
"""

from __future__ import annotations

import numpy as np

MASK_PROBABILITY = 0.8  # of a drawn position becoming [MASK]
KEEP_PROBABILITY = 0.1  # of a drawn position keeping its token; the remaining 0.1 gets a random id


def num_to_predict(num_tokens: np.ndarray | int, masked_lm_prob: float = 0.15,
                   max_predictions_per_seq: int | None = None) -> np.ndarray:
    """min(max_predictions_per_seq, max(1, round(num_tokens * masked_lm_prob))) for each sequence length.

    np.rint rounds half to even on the exact float64 value, the same result as Python's round().
    """
    counts = np.maximum(1, np.rint(np.asarray(num_tokens, dtype=np.float64) * masked_lm_prob)).astype(np.int64)
    if max_predictions_per_seq is not None:
        counts = np.minimum(counts, max_predictions_per_seq)
    return counts


def mask_batch(input_ids: np.ndarray, candidate_mask: np.ndarray, num_tokens: np.ndarray,
               rng: np.random.Generator, vocab_size: int, mask_token_id: int, masked_lm_prob: float = 0.15,
               max_predictions_per_seq: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Mask every row of a padded batch by the rule in the module docstring.

    Args:
      input_ids: int [batch, length] token ids (rows may be right-padded).
      candidate_mask: bool [batch, length], True where a token may be masked (not [CLS]/[SEP]/padding).
      num_tokens: int [batch], the unpadded length of each row, special tokens included.
      rng: the source of all randomness; the result is a pure function of its state and the inputs.
    Returns:
      masked_input_ids: [batch, length], same dtype as input_ids.
      masked_lm_labels: int64 [batch, length], the original id at masked positions and -1 elsewhere.
    """
    input_ids = np.asarray(input_ids)
    candidate_mask = np.asarray(candidate_mask, dtype=bool)
    if input_ids.ndim != 2 or candidate_mask.shape != input_ids.shape:
        raise ValueError(f"input_ids {input_ids.shape} and candidate_mask {candidate_mask.shape} must be equal 2-D")
    batch_size, length = input_ids.shape
    counts = np.minimum(num_to_predict(num_tokens, masked_lm_prob, max_predictions_per_seq),
                        candidate_mask.sum(axis=1))

    # Each candidate gets a uniform key (non-candidates +inf); a row's `count` smallest keys are its picks. Only the
    # largest count of the batch is partitioned off and sorted, which is cheaper than sorting whole rows.
    keys = np.where(candidate_mask, rng.random((batch_size, length)), np.inf)
    chosen = np.zeros((batch_size, length), dtype=bool)
    most = int(counts.max(initial=0))
    if most:
        smallest = np.argpartition(keys, most - 1, axis=1)[:, :most]
        smallest = np.take_along_axis(smallest, np.argsort(np.take_along_axis(keys, smallest, axis=1), axis=1), 1)
        wanted = np.arange(most)[None, :] < counts[:, None]
        chosen[np.nonzero(wanted)[0], smallest[wanted]] = True

    rows, cols = np.nonzero(chosen)
    action = rng.random(rows.size)
    to_mask = action < MASK_PROBABILITY
    to_random = action >= MASK_PROBABILITY + KEEP_PROBABILITY

    masked_lm_labels = np.full((batch_size, length), -1, dtype=np.int64)
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
