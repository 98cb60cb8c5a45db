"""Batches of tokenized fine-tuning features, for every task: which feature indices each rank takes per epoch,
and the padded int64 token arrays of one batch.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

import numpy as np


class TokenRow(Protocol):
    """What pad_token_rows needs of a feature: its unpadded token ids and segment ids."""

    input_ids: list[int]
    token_type_ids: list[int]


def pad_token_rows(features: Sequence[TokenRow], pad_token_id: int, multiple: int = 1,
                   max_length: int | None = None) -> dict[str, np.ndarray]:
    """int64 input_ids, token_type_ids and attention_mask [B, S] of a batch; numpy only (Paddle tensors must not
    be built in loader workers).

    S is the longest feature rounded up to a multiple of `multiple`, but not past max_length (nor below the
    longest feature). Padding has input id pad_token_id, segment 0 and attention mask 0, so the model's
    outputs at the real tokens do not depend on it.
    """
    longest = max(len(feature.input_ids) for feature in features)
    seq_length = longest + -longest % multiple
    if max_length is not None:
        seq_length = max(longest, min(seq_length, max_length))
    input_ids = np.full((len(features), seq_length), pad_token_id, dtype=np.int64)
    token_type_ids = np.zeros((len(features), seq_length), dtype=np.int64)
    attention_mask = np.zeros((len(features), seq_length), dtype=np.int64)
    for row, feature in enumerate(features):
        length = len(feature.input_ids)
        input_ids[row, :length] = feature.input_ids
        token_type_ids[row, :length] = feature.token_type_ids
        attention_mask[row, :length] = 1
    return {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": attention_mask}


def batch_indices(
    num_features: int, batch_size: int, shuffle: bool, seed: int = 0, epoch: int = 0, rank: int = 0, world_size: int = 1
) -> Iterator[list[int]]:
    """This rank's batches of feature indices for one epoch.

    The order is a permutation drawn from (seed, epoch), the same on every rank; it is padded by wrapping
    around to a multiple of world_size, and rank r takes every world_size-th index from r. Global batch k
    of the data-parallel job is therefore exactly batch k of a single process with batch_size * world_size.
    """
    order = np.random.default_rng([seed, epoch]).permutation(num_features) if shuffle else np.arange(num_features)
    padding = -num_features % world_size
    order = np.concatenate([order, order[:padding]])
    global_batch = batch_size * world_size
    for begin in range(0, len(order), global_batch):
        yield order[begin:begin + global_batch][rank::world_size].tolist()
