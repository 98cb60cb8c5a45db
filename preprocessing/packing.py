"""Sequence packing for BERT pre-training and fine-tuning: several samples side by side in each row of a micro-batch.

Krell et al. 2021, "Efficient Sequence Packing without Cross-contamination" (arXiv:2107.02027): a padded batch of
Wikipedia samples at length 512 is about half padding. Packing puts several samples into one row and keeps them
apart, so that the model computes for each sample exactly what it would alone in a row of its own:
- position ids restart at 0 at each sample's [CLS];
- attention is block-diagonal: a token sees only the tokens of its own sample (the model builds the mask from
  `sample_ids`, modeling.block_diagonal_bias, or runs variable-length flash attention on a GPU);
- the pooler and the NSP head read every sample's own [CLS] (`cls_positions`), so NSP still has one logit pair
  per sample; the MLM labels move with their tokens.

Rows are filled by first-fit-decreasing (Johnson 1973): samples longest first, each into the first row with room
for it. It packs one micro-batch at a time, so the loader and the samples of every step stay as they are
(--batch-size still counts samples). The paper's SPFHP and NNLSHP instead pack the length histogram of a whole
data set, which would change which samples share a step.

pack_batch takes a padded batch of numpy arrays: attention_mask [B, L] with 1 = token, other per-token arrays of
the same shape (input_ids, token_type_ids, and in pre-training masked_lm_labels, as pretraining_dataset collates
them), and per-sample ones (next_sentence_labels, or a fine-tuning task's labels [B]). It returns, with R rows of
length S:
    every per-token array  [R, S]  the samples' tokens, then padding (IGNORE_INDEX for masked_lm_labels, else 0)
    position_ids   [R, S]  each token's position in its own sample
    sample_ids     [R, S]  the batch index (0..B-1) of each token's sample, -1 for padding
    cls_positions  [B]     flat index into the R*S tokens of sample b's [CLS], in batch order
    every per-sample array, unchanged (its order is the batch's, as cls_positions' is)
S is the longest row rounded up as the loader rounds its rows (shard_formats.padded_row_length).

check_packable refuses, at start, data on which packing could pack nothing: no bin holds two samples that fit in
one row together.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from loss import IGNORE_INDEX
from preprocessing.shard_formats import padded_row_length

# The keys of a packed batch that BertForPretraining.forward takes after masked_lm_positions, in its order (the
# packed attention_mask only counts padding: sample_ids say who attends to whom).
PACKED_MODEL_INPUTS = ("position_ids", "sample_ids", "cls_positions")
# What a per-token array other than these is padded with in a packed row: an ignored label where a loss reads it.
TOKEN_PADDING = {"masked_lm_labels": IGNORE_INDEX}


def sample_lengths(attention_mask: np.ndarray) -> np.ndarray:
    """Tokens per row of a [B, L] mask whose rows are tokens first, then padding."""
    lengths = np.count_nonzero(attention_mask, axis=1)
    if not np.array_equal(attention_mask != 0, np.arange(attention_mask.shape[1])[None] < lengths[:, None]):
        raise ValueError("attention_mask: packing needs every row's tokens first and its padding after them")
    return lengths


def first_fit_decreasing(lengths: Sequence[int], capacity: int) -> list[list[int]]:
    """The samples (indices into `lengths`) of each row, longest first into the first row with room for them.

    Samples of equal length keep their batch order, so the packing is a pure function of the lengths.
    """
    rows: list[list[int]] = []
    room: list[int] = []
    for sample in sorted(range(len(lengths)), key=lambda index: -lengths[index]):
        length = lengths[sample]
        if length > capacity:
            raise ValueError(f"sample {sample} has {length} tokens, more than max_seq_length {capacity}")
        row = next((index for index, free in enumerate(room) if length <= free), len(rows))
        if row == len(rows):
            rows.append([])
            room.append(capacity)
        rows[row].append(sample)
        room[row] -= length
    return rows


def check_packable(lengths_per_bin: Mapping[str, Iterable[np.ndarray]], max_seq_length: int, batch_size: int,
                   source: str, batch_size_flag: str = "--batch-size") -> None:
    """ValueError naming source, a bin and the numbers if in no bin two samples fit in one row of max_seq_length
    tokens, or naming batch_size_flag (the script's option for samples per micro-batch) if a micro-batch holds one
    sample: packing then changes nothing (every row keeps one sample), and --pack-sequences would be silently inert.

    lengths_per_bin: per bin ("bin <id>", or "" for an unbinned set) the sample lengths of each of its files, read
    one file at a time; the check stops at the first bin whose shortest two fit. Bins are checked apart because
    packing fills one micro-batch, and a micro-batch's samples all come from one bin (pretraining_dataset.py).
    """
    if batch_size < 2:
        raise ValueError(f"{batch_size_flag} {batch_size}: --pack-sequences packs the samples of one micro-batch, and "
                         f"this one holds a single sample; raise {batch_size_flag} or drop --pack-sequences")
    closest: tuple[str, int, int] | None = None  # (bin, shortest, second) of the bin nearest to packing
    inert = []
    for name, files in lengths_per_bin.items():
        shortest = np.zeros(0, np.int64)
        for lengths in files:
            candidates = np.concatenate([shortest, np.asarray(lengths, np.int64)])
            shortest = np.partition(candidates, 1)[:2] if len(candidates) > 2 else np.sort(candidates)
            if len(shortest) == 2 and shortest.sum() <= max_seq_length:
                return
        inert.append(name)
        if len(shortest) == 2 and (closest is None or shortest.sum() < closest[1] + closest[2]):
            closest = (name, int(shortest.min()), int(shortest.max()))
    if closest is None:
        raise ValueError(f"{source}: --pack-sequences cannot pack these samples: no bin holds two samples; drop "
                         "--pack-sequences")
    name, shortest_length, second_length = closest
    others = [other.removeprefix("bin ") for other in inert if other != name]
    of_bin = f" of {name}" if name else ""
    also = f", and no other bin ({', '.join(others)}) has two that fit" if others else ""
    raise ValueError(f"{source}: --pack-sequences cannot pack these samples: the shortest two{of_bin} have "
                     f"{shortest_length} and {second_length} tokens, together more than --max-seq-length "
                     f"{max_seq_length}{also}, so no two samples share a row; drop --pack-sequences")


def pack_batch(batch: dict[str, np.ndarray], max_seq_length: int) -> dict[str, np.ndarray]:
    """The same samples packed into as few rows of at most max_seq_length tokens as first-fit-decreasing finds."""
    lengths = sample_lengths(batch["attention_mask"])
    rows = first_fit_decreasing(lengths.tolist(), max_seq_length)
    row_of = np.empty(len(lengths), np.int64)  # [B] the row each sample goes to
    start_of = np.empty(len(lengths), np.int64)  # [B] the column of its [CLS] there
    for row, samples in enumerate(rows):
        row_of[samples] = row
        start_of[samples] = np.cumsum(lengths[samples]) - lengths[samples]
    longest_row = max(int(lengths[samples].sum()) for samples in rows)
    row_length = padded_row_length(longest_row, max_seq_length)

    sample, column = np.nonzero(batch["attention_mask"])  # every token: its sample and its column there
    target = (row_of[sample], start_of[sample] + column)

    def place(values: np.ndarray, padding: int) -> np.ndarray:
        packed = np.full((len(rows), row_length), padding, np.int64)
        packed[target] = values
        return packed

    packed = {"attention_mask": place(1, 0), "position_ids": place(column, 0), "sample_ids": place(sample, -1),
              "cls_positions": row_of * row_length + start_of}
    for name, values in batch.items():
        if name == "attention_mask":
            continue
        per_token = values.shape == batch["attention_mask"].shape
        packed[name] = place(values[sample, column], TOKEN_PADDING.get(name, 0)) if per_token else values
    return packed


def padding_fraction(batch: dict[str, np.ndarray]) -> float:
    """The share of a batch's [B, L] token slots that are padding (packed or not)."""
    mask = batch["attention_mask"]
    return 1.0 - np.count_nonzero(mask) / mask.size
