"""Training-data loader for BERT pre-training: LDDL parquet or NVIDIA/Google HDF5 shards -> padded numpy batches.

Input. `input_dir` is a folder whose files are the shards, or a glob pattern matching shard files (quote it in a
shell). Only the folder's own files count: sub-folders are not searched, and a parent of several shard folders is
an error that names them. The format follows from the file names, and one folder holds one format: LDDL parquet
(`*.parquet`, or `*.parquet_<bin>` for a set binned by length) or NVIDIA/Google HDF5 (`*.hdf5`, `*.h5`).
shard_formats.py has each format's columns and reads the files; this module turns their rows into batches. A
parquet row with an empty B is a single-segment (MLM-only) sample `[CLS] A [SEP]` of len(A) + 2 tokens,
token_type_ids all 0. `.num_samples.json` (file name -> rows), when present, is checked against the files.
Format: docs/data-format.md#lddl-parquet-shards, #nvidia-hdf5-shards, #shard-file-names-and-sample-counts, #binning.

Epoch order, a pure function of (seed, epoch), so every rank and every worker computes the same one. Each bin (an
unbinned set is one bin) permutes its files, groups them in that order into shuffle windows of at least
`shuffle_window_samples` rows, and permutes the rows inside each window. The windows in order form the bin's
sample stream for the epoch. A window is the unit a process reads and holds in memory.

Ranks. Rank r of W takes the contiguous slice [r*n, (r+1)*n) of each bin's stream, n = rows_in_bin // W, so a
rank reads only the files that overlap its slice. The last rows_in_bin % W samples of each bin's stream (fewer
than W, different ones every epoch) are skipped in that epoch: this keeps all ranks at the same number of
batches, which data-parallel training needs. Nothing else is dropped; a bin's last batch may be smaller than
batch_size. Within an epoch no sample is served twice or to two ranks.

Bins. Each bin's slice is cut into batches, and the order in which the bins' batches are served is a permutation
seeded by (seed, epoch), identical on every rank: at each step all ranks draw from the same bin.

Batches (numpy, int64): input_ids, token_type_ids, attention_mask (1 = token, 0 = padding) and masked_lm_labels
(-1 = not masked, else the original id) [B, L]; next_sentence_labels [B] (1 = B is random). L is the longest
sequence of the batch rounded up to a multiple of 8, capped at max_seq_length. A sequence longer than
max_seq_length, or a statically masked one with more than max_predictions_per_seq masks, is an error naming its
file and row: truncating either would silently change the training objective. So is, for a loader made with
nsp=True (training next-sentence prediction), a parquet row whose B is empty: single-segment shards
(lddl_preprocess.py --no-nsp) label every sample "not random", and NSP would learn that constant; LDDL's pairs
always have a B, as do ours (pretraining_pairs.py drops empty sentences and documents, and with max_seq_length >= 5
truncation never empties a segment).

Masking. Static masks are taken from the shards. Shards without masks are masked here by masking.mask_batch
(Google's rule, masked_lm_ratio of each sequence's tokens with max_predictions_per_seq as the cap; by single pieces,
or with whole_word_masking by whole words), with a generator seeded by (seed, epoch, bin, the batch's first stream
position): the masks do not depend on num_workers or on resuming. whole_word_masking on a statically masked set is
an error (it could not take effect); masked_lm_ratio is only used by dynamic masking.

Position. Batch `step` of `epoch` is computed from those two numbers alone, so the position is
{epoch, step = batches handed out in that epoch}; a loader restored from state_dict() yields exactly the batches
an uninterrupted one would. The counter moves when a batch is handed to the trainer, not when a worker makes it.

Workers. With num_workers > 0, forked worker processes build batches ahead (2 per worker) and the main process
hands them out in step order; the output is identical to num_workers = 0. A worker ends when the process that
forked it dies, however it died.
"""

from __future__ import annotations

import argparse
import glob
import json
import multiprocessing
import os
import queue
import signal
from abc import ABC, abstractmethod
from collections import OrderedDict, deque
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import count, islice, repeat

import numpy as np

from preprocessing.masking import check_masked_lm_ratio, continuation_pieces, mask_batch, word_starts
from preprocessing.shard_formats import SHARD_FORMATS, check_num_samples, padded_row_length, parse_positions, shard_kind
from tokenizer import load_vocab
from utils.child_processes import end_with_parent

SHUFFLE_WINDOW_SAMPLES = 16384
BATCHES_AHEAD_PER_WORKER = 2
_PARENT_POLL_SECONDS = 1.0
STATE_VERSION = 1
# What each derived random stream is for, so that no two uses share one.
_FILE_ORDER, _WINDOW_ORDER, _BIN_ORDER, _MASKING = range(4)


def derived_rng(seed: int, *key: int) -> np.random.Generator:
    """An independent generator for (seed, key...): the same numbers in every process."""
    return np.random.default_rng(np.random.SeedSequence([seed, *key]))


# ---------------------------------------------------------------------------------------------------------------
# Finding and checking the shards


@dataclass(frozen=True)
class Shard:
    path: str
    num_rows: int


@dataclass(frozen=True)
class ShardSet:
    """The shards of one data set. bins[b] lists bin b's shards sorted by path; an unbinned set has one bin."""

    file_format: str  # "parquet" or "hdf5"
    bins: tuple[tuple[Shard, ...], ...]
    statically_masked: bool

    @property
    def rows_per_bin(self) -> list[int]:
        return [sum(shard.num_rows for shard in shards) for shards in self.bins]

    def sample_lengths(self) -> dict[str, Iterator[np.ndarray]]:
        """Per bin ("bin <id>" of a binned set, "" for an unbinned one), the tokens of each sample of each of its
        files, read when the iterator gets to the file."""
        lengths = SHARD_FORMATS[self.file_format].sample_lengths
        named = {}
        for shards in self.bins:
            kind, bin_id = shard_kind(os.path.basename(shards[0].path))
            named["bin " + str(bin_id) if kind == "binned parquet" else ""] = (lengths(shard.path) for shard in shards)
        return named


def _list_files(input_dir: str) -> list[str]:
    if any(character in input_dir for character in "*?["):
        paths = sorted(path for path in glob.glob(input_dir) if os.path.isfile(path))
        if not paths:
            raise FileNotFoundError(f"{input_dir}: the pattern matches no file")
        return paths
    if not os.path.isdir(input_dir):
        raise FileNotFoundError(f"{input_dir}: no such folder")
    return sorted(os.path.join(input_dir, name) for name in os.listdir(input_dir)
                  if not name.startswith(".") and os.path.isfile(os.path.join(input_dir, name)))


def _check_num_samples_files(shards: list[Shard]) -> None:
    """LDDL's .num_samples.json, where a shard folder has one, must agree with the files' own row counts."""
    for folder in sorted({os.path.dirname(shard.path) for shard in shards}):
        check_num_samples(folder, {os.path.basename(shard.path): shard.num_rows for shard in shards
                                   if os.path.dirname(shard.path) == folder})


def find_shards(input_dir: str) -> ShardSet:
    """The shards named by `input_dir` (a folder or a glob pattern), checked and grouped by bin."""
    paths = _list_files(input_dir)
    kinds = {path: shard_kind(os.path.basename(path)) for path in paths}
    shard_paths = [path for path in paths if kinds[path]]
    if not shard_paths:
        if os.path.isdir(input_dir):
            holders = sorted(name for name in os.listdir(input_dir) if os.path.isdir(os.path.join(input_dir, name))
                             and any(shard_kind(inner) for inner in os.listdir(os.path.join(input_dir, name))))
            if holders:
                raise ValueError(f"{input_dir}: holds no shard files but the shard folders {', '.join(holders)}; "
                                 "pass one of them")
        raise FileNotFoundError(f"{input_dir}: no shard files (*.parquet, *.parquet_<bin>, *.hdf5, *.h5)")
    found_kinds = sorted({kinds[path][0] for path in shard_paths})
    if len(found_kinds) > 1:
        raise ValueError(f"{input_dir}: mixes {' and '.join(found_kinds)} shards; use one kind per data set")

    file_format = "hdf5" if found_kinds[0] == "hdf5" else "parquet"
    by_bin: dict[int, list[Shard]] = {}
    masked_first: tuple[str, bool] | None = None
    for path in shard_paths:
        num_rows, statically_masked = SHARD_FORMATS[file_format].inspect(path)
        if masked_first is None:
            masked_first = (path, statically_masked)
        elif statically_masked != masked_first[1]:
            has, lacks = (path, masked_first[0]) if statically_masked else (masked_first[0], path)
            raise ValueError(f"{has}: has masked_lm_positions/masked_lm_labels but {lacks} has not; "
                             "a data set is masked statically in every shard or in none")
        by_bin.setdefault(kinds[path][1], []).append(Shard(path, num_rows))
    _check_num_samples_files([shard for shards in by_bin.values() for shard in shards])
    return ShardSet(file_format=file_format, bins=tuple(tuple(by_bin[bin_id]) for bin_id in sorted(by_bin)),
                    statically_masked=masked_first[1])


# ---------------------------------------------------------------------------------------------------------------
# What decides the batches besides the shards


@dataclass(frozen=True)
class LoaderSettings:
    """The loader's settings that fix which samples each batch holds and how they are masked, validated once;
    nsp: the batches train next-sentence prediction, so every sample needs a segment B."""

    batch_size: int
    max_seq_length: int
    max_predictions_per_seq: int
    masked_lm_ratio: float
    whole_word_masking: bool
    seed: int
    rank: int
    world_size: int
    shuffle_window_samples: int
    nsp: bool = False

    def __post_init__(self):
        for name, lowest in [("batch_size", 1), ("max_seq_length", 3), ("max_predictions_per_seq", 1), ("seed", 0),
                             ("world_size", 1), ("shuffle_window_samples", 1)]:
            value = getattr(self, name)
            if not isinstance(value, int) or value < lowest:
                raise ValueError(f"{name}={value!r}: must be a whole number of at least {lowest}")
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank={self.rank!r}: must be in [0, world_size={self.world_size})")
        check_masked_lm_ratio(self.masked_lm_ratio, "masked_lm_ratio")
        for name in ("whole_word_masking", "nsp"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}={getattr(self, name)!r}: must be True or False")


class Vocab:
    """The WordPiece vocab as the collators need it: token -> id, the special ids, the "##" pieces (for whole-word
    masking) and where it came from."""

    def __init__(self, vocab_file: str):
        self.file = vocab_file
        self.ids = load_vocab(vocab_file)
        self.size = max(self.ids.values()) + 1
        self.is_continuation = continuation_pieces(self.ids)
        self.cls_id, self.sep_id, self.mask_id = self.ids["[CLS]"], self.ids["[SEP]"], self.ids["[MASK]"]


# ---------------------------------------------------------------------------------------------------------------
# The epoch plan: which samples each step of each rank gets


@dataclass(frozen=True)
class BinStream:
    """One bin's sample stream in one epoch, and this rank's slice of it."""

    window_shards: tuple[np.ndarray, ...]  # indices into the bin's shards, per window, in stream order
    window_starts: np.ndarray  # stream position of each window's first row; the last entry = rows in the bin
    slice_start: int
    slice_size: int
    num_batches: int


@dataclass(frozen=True)
class EpochPlan:
    bins: tuple[BinStream, ...]
    schedule: np.ndarray  # int64 [steps, 2]: (bin, batch index within the bin) served at each step


def plan_epoch(shards: ShardSet, settings: LoaderSettings, epoch: int) -> EpochPlan:
    """The order of the module docstring for one epoch and settings.rank."""
    seed, world_size, batch_size = settings.seed, settings.world_size, settings.batch_size
    streams = []
    for bin_index, bin_shards in enumerate(shards.bins):
        file_order = derived_rng(seed, _FILE_ORDER, epoch, bin_index).permutation(len(bin_shards))
        windows, starts, current, rows = [], [0], [], 0
        for shard_index in file_order:
            current.append(shard_index)
            rows += bin_shards[shard_index].num_rows
            if rows - starts[-1] >= settings.shuffle_window_samples:
                windows.append(np.array(current))
                starts.append(rows)
                current = []
        if current:
            windows.append(np.array(current))
            starts.append(rows)
        slice_size = rows // world_size
        streams.append(BinStream(tuple(windows), np.array(starts), settings.rank * slice_size, slice_size,
                                 -(-slice_size // batch_size)))
    bin_of_batch = np.repeat(np.arange(len(streams)), [stream.num_batches for stream in streams])
    bin_of_step = derived_rng(seed, _BIN_ORDER, epoch).permutation(bin_of_batch)
    batch_of_step = np.empty_like(bin_of_step)
    for bin_index in range(len(streams)):
        steps = np.flatnonzero(bin_of_step == bin_index)
        batch_of_step[steps] = np.arange(steps.size)
    return EpochPlan(tuple(streams), np.stack([bin_of_step, batch_of_step], axis=1))


# ---------------------------------------------------------------------------------------------------------------
# Turning a shard format's columns into batch rows


@dataclass(frozen=True)
class Window:
    """The rows of one shuffle window, held in memory, and the permutation that orders them in the stream."""

    paths: tuple[str, ...]
    file_starts: np.ndarray  # window row of each file's first row
    order: np.ndarray
    columns: dict

    def source(self, row: int) -> str:
        file_index = int(np.searchsorted(self.file_starts, row, side="right")) - 1
        return f"{self.paths[file_index]}: row {row - int(self.file_starts[file_index])}"


# The rows of one batch: (window, rows of that window), in batch order.
BatchParts = list[tuple[Window, np.ndarray]]


class RowSources:
    """'file: row' of each row of a batch, worked out only when an error message needs one."""

    def __init__(self, parts: BatchParts):
        self.parts = parts

    def __getitem__(self, index: int) -> str:
        for window, rows in self.parts:
            if index < len(rows):
                return window.source(int(rows[index]))
            index -= len(rows)
        raise IndexError(index)


def _ragged_layout(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row, index within the row) of every element of rows of the given lengths laid end to end."""
    rows = np.repeat(np.arange(lengths.size), lengths)
    starts = np.cumsum(lengths) - lengths
    return rows, np.arange(rows.size) - starts[rows]


class Collator(ABC):
    """Batch rows from one shard format's columns (shard_formats.py reads them): `collate(parts, masking_key)`
    returns the batch of the module docstring; masking_key = (epoch, bin, first stream position) seeds the dynamic
    masking of a set without static masks.
    """

    def __init__(self, vocab: Vocab, settings: LoaderSettings, statically_masked: bool):
        self.vocab = vocab
        self.settings = settings
        self.statically_masked = statically_masked

    @abstractmethod
    def collate(self, parts: BatchParts, masking_key: tuple[int, int, int]) -> dict[str, np.ndarray]:
        """The batch made of `parts`."""

    def _check_lengths(self, lengths: np.ndarray, sources: RowSources) -> None:
        limit = self.settings.max_seq_length
        too_long = np.flatnonzero(lengths > limit)
        if too_long.size:
            row = too_long[0]
            raise ValueError(f"{sources[row]}: {lengths[row]} tokens, more than max_seq_length={limit}")

    def _check_mask_count(self, counts: np.ndarray, sources: RowSources) -> None:
        limit = self.settings.max_predictions_per_seq
        too_many = np.flatnonzero(counts > limit)
        if too_many.size:
            row = too_many[0]
            raise ValueError(f"{sources[row]}: {counts[row]} masked positions, more than "
                             f"max_predictions_per_seq={limit}")

    def _padded_length(self, lengths: np.ndarray) -> int:
        return padded_row_length(int(lengths.max()), self.settings.max_seq_length)


class ParquetCollator(Collator):
    """LDDL parquet rows: space-joined WordPiece tokens, masked statically or here.

    Format: docs/data-format.md#lddl-parquet-shards
    """

    def collate(self, parts: BatchParts, masking_key: tuple[int, int, int]) -> dict[str, np.ndarray]:
        """[CLS] A [SEP] B [SEP] per row ([CLS] A [SEP] for an empty B), padded; masks from the shards or drawn
        from `masking_key`."""
        sources = RowSources(parts)
        texts_a = [window.columns["A"][row] for window, rows in parts for row in rows]
        texts_b = [window.columns["B"][row] for window, rows in parts for row in rows]
        ids_a, lengths_a = self._token_ids(texts_a, sources)
        ids_b, lengths_b = self._token_ids(texts_b, sources)
        for row in np.flatnonzero(lengths_a == 0)[:1]:
            raise ValueError(f"{sources[row]}: segment A is empty")
        if self.settings.nsp:
            for row in np.flatnonzero(lengths_b == 0)[:1]:
                raise ValueError(f"{sources[row]}: segment B is empty, a single-segment sample (lddl_preprocess.py "
                                 "--no-nsp), and next-sentence prediction would learn its constant label; train "
                                 "with --no-nsp, or use shards of NSP pairs")
        lengths = lengths_a + 2 + np.where(lengths_b > 0, lengths_b + 1, 0)
        num_tokens = np.concatenate([window.columns["num_tokens"][rows] for window, rows in parts])
        wrong = np.flatnonzero(num_tokens != lengths)
        if wrong.size:
            row = wrong[0]
            layout = "[CLS] A [SEP] B [SEP]" if lengths_b[row] else "[CLS] A [SEP] (B is empty)"
            raise ValueError(f"{sources[row]}: num_tokens is {num_tokens[row]} but {layout} has {lengths[row]} "
                             "tokens")
        self._check_lengths(lengths, sources)

        batch_size, length = lengths.size, self._padded_length(lengths)
        input_ids = np.zeros((batch_size, length), dtype=np.int64)
        every_row = np.arange(batch_size)
        input_ids[:, 0] = self.vocab.cls_id
        rows, within = _ragged_layout(lengths_a)
        input_ids[rows, 1 + within] = ids_a
        input_ids[every_row, lengths_a + 1] = self.vocab.sep_id
        rows, within = _ragged_layout(lengths_b)
        input_ids[rows, lengths_a[rows] + 2 + within] = ids_b
        input_ids[every_row, lengths - 1] = self.vocab.sep_id
        columns = np.arange(length)[None, :]
        attention_mask = columns < lengths[:, None]
        token_type_ids = (columns >= (lengths_a + 2)[:, None]) & attention_mask

        if self.statically_masked:
            masked_lm_labels = self._static_labels(parts, sources, lengths_a, lengths, length)
        else:
            candidates = attention_mask & (columns > 0) & (columns != (lengths_a + 1)[:, None]) \
                & (columns != (lengths - 1)[:, None])
            starts = word_starts(input_ids, candidates, self.vocab.is_continuation) \
                if self.settings.whole_word_masking else None
            rng = derived_rng(self.settings.seed, _MASKING, *masking_key)
            input_ids, masked_lm_labels = mask_batch(input_ids, candidates, lengths, rng, self.vocab.size,
                                                     self.vocab.mask_id, self.settings.masked_lm_ratio,
                                                     self.settings.max_predictions_per_seq, starts)
        next_sentence_labels = np.concatenate([window.columns["is_random_next"][rows] for window, rows in parts])
        return {"input_ids": input_ids, "token_type_ids": token_type_ids.astype(np.int64),
                "attention_mask": attention_mask.astype(np.int64), "masked_lm_labels": masked_lm_labels,
                "next_sentence_labels": next_sentence_labels}

    def _token_ids(self, texts: list[str], sources: RowSources) -> tuple[np.ndarray, np.ndarray]:
        """(ids of all tokens of all texts laid end to end, tokens per text) for space-joined token strings.

        An empty text has no tokens (the B of a single-segment sample)."""
        nonempty = np.fromiter(map(bool, texts), dtype=bool, count=len(texts))
        lengths = (np.fromiter(map(str.count, texts, repeat(" ")), dtype=np.int64, count=len(texts)) + 1) * nonempty
        tokens = " ".join(filter(None, texts)).split(" ") if nonempty.any() else []
        try:
            ids = np.fromiter(map(self.vocab.ids.__getitem__, tokens), dtype=np.int64, count=len(tokens))
        except KeyError as error:
            row = next(i for i, text in enumerate(texts) if error.args[0] in text.split(" "))
            raise ValueError(f"{sources[row]}: token {error.args[0]!r} is not in the vocab {self.vocab.file} "
                             "(were the shards made with another vocab?)") from None
        return ids, lengths

    def _static_labels(self, parts: BatchParts, sources: RowSources, lengths_a: np.ndarray, lengths: np.ndarray,
                       length: int) -> np.ndarray:
        positions = [parse_positions(window.columns["masked_lm_positions"][row]) for window, rows in parts
                     for row in rows]
        counts = np.array([p.size for p in positions])
        label_ids, label_counts = self._token_ids(
            [window.columns["masked_lm_labels"][row] for window, rows in parts for row in rows], sources)
        for row in np.flatnonzero(counts != label_counts)[:1]:
            raise ValueError(f"{sources[row]}: {counts[row]} masked_lm_positions but {label_counts[row]} "
                             "masked_lm_labels")
        self._check_mask_count(counts, sources)
        rows = np.repeat(np.arange(counts.size), counts)
        flat_positions = np.concatenate(positions).astype(np.int64)
        special = (flat_positions <= 0) | (flat_positions >= lengths[rows] - 1) \
            | (flat_positions == lengths_a[rows] + 1)
        for index in np.flatnonzero(special)[:1]:
            raise ValueError(f"{sources[rows[index]]}: masked position {flat_positions[index]} is not an A or B "
                             "token")
        masked_lm_labels = np.full((counts.size, length), -1, dtype=np.int64)
        masked_lm_labels[rows, flat_positions] = label_ids
        return masked_lm_labels


class Hdf5Collator(Collator):
    """NVIDIA/Google HDF5 rows: padded id arrays, always masked statically.

    Format: docs/data-format.md#nvidia-hdf5-shards
    """

    def collate(self, parts: BatchParts, masking_key: tuple[int, int, int]) -> dict[str, np.ndarray]:
        """Rows re-padded to the batch length; labels scattered from positions (masking_key: unused, static)."""
        sources = RowSources(parts)
        width = max(window.columns["input_ids"].shape[1] for window, _ in parts)
        slots = max(window.columns["masked_lm_positions"].shape[1] for window, _ in parts)

        def gather(name: str, columns_wanted: int) -> np.ndarray:
            pieces = [window.columns[name][rows] for window, rows in parts]
            return np.concatenate([np.pad(piece, ((0, 0), (0, columns_wanted - piece.shape[1]))) for piece in pieces])

        input_mask = gather("input_mask", width)
        lengths = input_mask.sum(axis=1)
        self._check_lengths(lengths, sources)
        length = self._padded_length(lengths)
        input_ids = gather("input_ids", width)
        bad_ids = np.flatnonzero(((input_ids < 0) | (input_ids >= self.vocab.size)).any(axis=1))
        for row in bad_ids[:1]:
            raise ValueError(f"{sources[row]}: token id {input_ids[row].max()} is outside the vocab "
                             f"{self.vocab.file} ({self.vocab.size} ids)")
        positions, masked_ids = gather("masked_lm_positions", slots), gather("masked_lm_ids", slots)
        used = positions != 0  # position 0 is [CLS], never masked: 0 marks an unused slot
        self._check_mask_count(used.sum(axis=1), sources)
        rows, slot = np.nonzero(used)
        outside = np.flatnonzero(positions[rows, slot] >= lengths[rows])
        for index in outside[:1]:
            raise ValueError(f"{sources[rows[index]]}: masked position {positions[rows[index], slot[index]]} is "
                             f"beyond the sequence's {lengths[rows[index]]} tokens")
        masked_lm_labels = np.full((lengths.size, length), -1, dtype=np.int64)
        masked_lm_labels[rows, positions[rows, slot]] = masked_ids[rows, slot]
        keep = min(width, length)

        def crop(values: np.ndarray) -> np.ndarray:
            out = np.zeros((lengths.size, length), dtype=np.int64)
            out[:, :keep] = values[:, :keep]
            return out

        next_sentence_labels = np.concatenate([window.columns["next_sentence_labels"][rows]
                                               for window, rows in parts]).astype(np.int64)
        return {"input_ids": crop(input_ids), "token_type_ids": crop(gather("segment_ids", width)),
                "attention_mask": crop(input_mask), "masked_lm_labels": masked_lm_labels,
                "next_sentence_labels": next_sentence_labels}


COLLATORS: dict[str, type[Collator]] = {"parquet": ParquetCollator, "hdf5": Hdf5Collator}


# ---------------------------------------------------------------------------------------------------------------
# Building batches


class BatchBuilder:
    """Builds batch `step` of `epoch` for one rank; a pure function of those numbers, whichever process runs it."""

    def __init__(self, shards: ShardSet, vocab: Vocab, settings: LoaderSettings):
        self.shards = shards
        self.settings = settings
        self.file_format = SHARD_FORMATS[shards.file_format]
        self.collator = COLLATORS[shards.file_format](vocab, settings, shards.statically_masked)
        self._plans: OrderedDict[int, EpochPlan] = OrderedDict()
        self._windows: OrderedDict[tuple[int, int, int], Window] = OrderedDict()
        # the current window of each bin, plus one for a batch that straddles two windows
        self._window_capacity = len(shards.bins) + 1

    def plan(self, epoch: int) -> EpochPlan:
        if epoch not in self._plans:
            self._plans[epoch] = plan_epoch(self.shards, self.settings, epoch)
            if len(self._plans) > 2:
                self._plans.popitem(last=False)
        return self._plans[epoch]

    def batch(self, epoch: int, step: int) -> dict[str, np.ndarray]:
        plan = self.plan(epoch)
        bin_index, batch_index = (int(value) for value in plan.schedule[step])
        stream = plan.bins[bin_index]
        first = stream.slice_start + batch_index * self.settings.batch_size
        last = min(first + self.settings.batch_size, stream.slice_start + stream.slice_size)
        positions = np.arange(first, last)
        window_of = np.searchsorted(stream.window_starts, positions, side="right") - 1
        parts = []
        for window_index in np.unique(window_of):
            window = self._window(epoch, bin_index, int(window_index), stream)
            rows = window.order[positions[window_of == window_index] - stream.window_starts[window_index]]
            parts.append((window, rows))
        return self.collator.collate(parts, (epoch, bin_index, first))

    def _window(self, epoch: int, bin_index: int, window_index: int, stream: BinStream) -> Window:
        key = (epoch, bin_index, window_index)
        if key not in self._windows:
            shards = [self.shards.bins[bin_index][i] for i in stream.window_shards[window_index]]
            columns = [self.file_format.read(shard.path, shard.num_rows, self.shards.statically_masked)
                       for shard in shards]
            merged = {name: _concatenate([part[name] for part in columns]) for name in columns[0]}
            file_starts = np.cumsum([0] + [shard.num_rows for shard in shards])
            order = derived_rng(self.settings.seed, _WINDOW_ORDER, epoch, bin_index,
                                window_index).permutation(file_starts[-1])
            self._windows[key] = Window(tuple(shard.path for shard in shards), file_starts, order, merged)
            if len(self._windows) > self._window_capacity:
                self._windows.popitem(last=False)
        self._windows.move_to_end(key)  # least recently used goes first
        return self._windows[key]


def _concatenate(parts: list) -> list | np.ndarray:
    """One column of a window from the same column of its files (lists, 1-D arrays, or 2-D arrays of any width)."""
    if isinstance(parts[0], list):
        return [value for part in parts for value in part]
    if parts[0].ndim == 1:
        return np.concatenate(parts)
    width = max(part.shape[1] for part in parts)  # HDF5 files of one set may differ in S or P
    return np.concatenate([np.pad(part, ((0, 0), (0, width - part.shape[1]))) for part in parts])


# ---------------------------------------------------------------------------------------------------------------
# Worker processes


def _worker_loop(builder: BatchBuilder, tasks: multiprocessing.Queue, results: multiprocessing.Queue,
                 parent_pid: int) -> None:
    end_with_parent(parent_pid)  # and the loop below polls the parent id, for other systems
    # Ctrl-C, a closed terminal and Slurm's USR1 warning reach the whole process group: the trainer's to handle (it
    # checkpoints, then stops the workers), not a reason for a worker to die first.
    for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
        signal.signal(signum, signal.SIG_IGN)
    # Being terminated at exit is normal for a worker; the handler inherited from the trainer (Paddle's prints a
    # fatal-error report) must not run for it.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    results.cancel_join_thread()  # at shutdown, exit without waiting for unread batches to be collected
    while True:
        try:
            task = tasks.get(timeout=_PARENT_POLL_SECONDS)
        except queue.Empty:
            if os.getppid() != parent_pid:  # orphaned: the trainer is gone, nobody will read the batches
                return
            continue
        if task is None:
            return
        try:
            results.put((task, builder.batch(*task), None))
        except Exception as error:  # handed to the main process, which raises it
            results.put((task, None, error))


def _batches_from_workers(builder: BatchBuilder, positions: Iterator[tuple[int, int]], num_workers: int
                          ) -> Iterator[tuple[tuple[int, int], dict[str, np.ndarray]]]:
    """Batches in the order of `positions`, built ahead by forked worker processes."""
    context = multiprocessing.get_context("fork")
    tasks, results = context.Queue(), context.Queue()
    workers = [context.Process(target=_worker_loop, args=(builder, tasks, results, os.getpid()), daemon=True)
               for _ in range(num_workers)]
    for worker in workers:
        worker.start()
    submitted: deque[tuple[int, int]] = deque()
    ready: dict[tuple[int, int], dict] = {}
    try:
        for position in islice(positions, BATCHES_AHEAD_PER_WORKER * num_workers):
            tasks.put(position)
            submitted.append(position)
        while True:
            wanted = submitted.popleft()
            while wanted not in ready:
                try:
                    position, batch, error = results.get(timeout=1.0)
                except queue.Empty:
                    dead = [worker.exitcode for worker in workers if not worker.is_alive()]
                    if dead:
                        raise RuntimeError(f"a data loader worker died (exit code {dead[0]})") from None
                    continue
                if error is not None:
                    raise error
                ready[position] = batch
            following = next(positions)
            tasks.put(following)
            submitted.append(following)
            yield wanted, ready.pop(wanted)
    finally:
        for _ in workers:
            tasks.put(None)
        for worker in workers:
            worker.join(timeout=5)
            if worker.is_alive():
                worker.terminate()
        tasks.cancel_join_thread()
        results.cancel_join_thread()


# ---------------------------------------------------------------------------------------------------------------
# The loader


class PretrainingDataLoader:
    """Endless, exactly resumable stream of pre-training batches for one rank (see the module docstring).

    num_samples: samples per epoch for this rank; steps_per_epoch: batches per epoch (the same on every rank);
    epoch: the epoch of the last batch handed out (or of the restored position, before iteration).
    """

    def __init__(self, input_dir: str, vocab_file: str, batch_size: int, max_seq_length: int,
                 max_predictions_per_seq: int, seed: int, rank: int = 0, world_size: int = 1,
                 num_workers: int = 0, masked_lm_ratio: float = 0.15, whole_word_masking: bool = False,
                 shuffle_window_samples: int = SHUFFLE_WINDOW_SAMPLES, nsp: bool = False):
        if not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError(f"num_workers={num_workers!r}: must be a whole number of at least 0")
        self.settings = LoaderSettings(batch_size, max_seq_length, max_predictions_per_seq, masked_lm_ratio,
                                       whole_word_masking, seed, rank, world_size, shuffle_window_samples, nsp)
        self.num_workers = num_workers
        self.shards = find_shards(input_dir)
        if whole_word_masking and self.shards.statically_masked:
            raise ValueError(f"{input_dir}: the shards are masked statically, so whole_word_masking cannot take "
                             "effect: their masks were drawn when the shards were made (by whole words if they were "
                             "made with --whole-word-masking) and are used as they are; drop whole_word_masking "
                             "(--whole-word-masking), or, for the loader to mask by whole words, use shards made "
                             "without masks (lddl_preprocess.py --no-masking)")
        vocab = Vocab(vocab_file)
        self.ids_to_tokens = {index: token for token, index in vocab.ids.items()}
        self._builder = BatchBuilder(self.shards, vocab, self.settings)
        first_plan = self._builder.plan(0)
        self.steps_per_epoch = len(first_plan.schedule)
        self.num_samples = sum(stream.slice_size for stream in first_plan.bins)
        if self.steps_per_epoch == 0:
            raise ValueError(f"{input_dir}: {sum(self.shards.rows_per_bin)} samples are too few for "
                             f"world_size={world_size}")
        self.epoch = 0
        self._step = 0  # batches of self.epoch handed out

    def _identity(self) -> dict:
        """What fixes the order of batches; a saved position is only valid for a loader that agrees on all of it."""
        settings = self.settings
        return {"seed": settings.seed, "world_size": settings.world_size, "batch_size": settings.batch_size,
                "shuffle_window_samples": settings.shuffle_window_samples,
                "shards_per_bin": [len(shards) for shards in self.shards.bins],
                "rows_per_bin": self.shards.rows_per_bin}

    def state_dict(self) -> dict:
        """JSON-serialisable position after the last batch handed out."""
        return {"version": STATE_VERSION, "epoch": self.epoch, "step": self._step, **self._identity()}

    def load_state_dict(self, state: dict) -> None:
        """Continue from a state_dict() of a loader over the same data and settings; call before iterating."""
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"loader state version {state.get('version')!r}, expected {STATE_VERSION}")
        differences = [f"{name}={state.get(name)!r} (this loader: {value!r})"
                       for name, value in self._identity().items() if state.get(name) != value]
        if differences:
            raise ValueError("loader state comes from a different data order: " + ", ".join(differences))
        epoch, step = state.get("epoch"), state.get("step")
        if not (isinstance(epoch, int) and epoch >= 0 and isinstance(step, int)
                and 0 <= step <= self.steps_per_epoch):
            raise ValueError(f"loader state position epoch={epoch!r} step={step!r} is outside the "
                             f"{self.steps_per_epoch} steps of an epoch")
        self.epoch, self._step = epoch, step

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        epoch, step = self.epoch, self._step
        if step == self.steps_per_epoch:
            epoch, step = epoch + 1, 0
        positions = ((e, s) for e in count(epoch) for s in range(step if e == epoch else 0, self.steps_per_epoch))
        if self.num_workers == 0:
            batches = ((position, self._builder.batch(*position)) for position in positions)
        else:
            batches = _batches_from_workers(self._builder, positions, self.num_workers)
        for (batch_epoch, batch_step), batch in batches:
            self.epoch, self._step = batch_epoch, batch_step + 1
            yield batch


# ---------------------------------------------------------------------------------------------------------------
# Inspection command


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Print the first samples the training loader yields (rank 0 of 1),"
                                                 " one JSON object per line.")
    parser.add_argument("--input-dir", required=True, help="shard folder or glob pattern (quote it)")
    parser.add_argument("--vocab-file", required=True)
    parser.add_argument("--dump", type=int, required=True, metavar="N", help="number of samples to print")
    parser.add_argument("--seed", type=int, default=12345, help="seed of the shuffling and dynamic masking")
    parser.add_argument("--max-seq-length", type=int, default=512)
    parser.add_argument("--max-predictions-per-seq", type=int, default=80)
    args = parser.parse_args(argv)
    if args.dump < 1:
        parser.error(f"--dump {args.dump}: must be at least 1")
    try:
        loader = PretrainingDataLoader(args.input_dir, args.vocab_file, batch_size=1,
                                       max_seq_length=args.max_seq_length,
                                       max_predictions_per_seq=args.max_predictions_per_seq, seed=args.seed)
        for batch in islice(loader, args.dump):
            sample = {name: values[0].tolist() for name, values in batch.items()}
            sample["tokens"] = [loader.ids_to_tokens.get(index, "") for index in sample["input_ids"]]
            print(json.dumps(sample))
    except (ValueError, FileNotFoundError) as error:
        raise SystemExit(str(error)) from None


if __name__ == "__main__":
    main()
