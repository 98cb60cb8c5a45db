"""The parallel text -> pairs -> shards pipeline behind lddl_preprocess.py and create_pretraining_data.py.

Three stages of independent tasks, run by one engine: in-process (one worker), a process pool (default), or dask
distributed (`--dask` starts a LocalCluster, `--scheduler-address` joins a running cluster, e.g. one started with
`dask scheduler` and `dask worker` on several machines; the output and work folders must then be on a file system
that every worker sees, and this repository must be importable on every worker).

1. Read + tokenize, one task per byte range of a plain input file, or per compressed file (read whole, streaming,
   see corpus.py): documents whose first line starts in the range (corpus.read_documents); each document gets a
   64-bit key, a hash of (seed, file index, byte offset of the document in its decompressed text). With
   --sample-ratio R < 1 a document is kept when its sample draw u (SplitMix64 of the key, scaled to [0, 1)) is
   below R: each document independently with probability R, as LDDL's `Bag.random_sample(R, random_state=seed)`,
   and the documents kept at a smaller R are among those kept at a larger one. With --holdout-fraction F > 0 a kept
   document is held out for validation when its holdout draw (SplitMix64 applied twice to the key, scaled the same
   way, so unrelated to the sample draw) is below F; held-out documents go to their own partitions and their own
   output folder, so no document is in both sets, and their titles are listed there (HOLDOUT_LIST). The kept
   documents are split into sentences and tokenized to ids (through cached_wordpiece's per-word cache, which gives
   the tokenizer's ids), a batch of about TOKENIZE_BATCH_CHARACTERS at a time;
   a sentence is cut to its first MAX_SENTENCE_TOKENS tokens (the summary counts those cut). The task spills the
   token ids to .npy files in the work folder.
   Then the number of partitions (--num-blocks; by default one per DEFAULT_BLOCK_BYTES of the corpus's text,
   decompressed) gives each document its partition: key % num_blocks (a held-out document's: num_blocks +
   key % num_blocks).
2. Pairs, one task per partition: its documents from every spill file, in key order; NSP pairs by
   pretraining_pairs.create_pairs_from_document `duplicate_factor` times over, with random next segments from the
   same partition (as LDDL's dask partitions), or without NSP single-segment samples by
   pretraining_pairs.create_segments_from_document; shuffled; masked statically with masking.mask_batch when asked
   (by single pieces, or with --whole-word-masking by whole words);
   grouped by length bin (stable). Written as a part file (one .npy per column, which stage 3 memory-maps).
3. Shards, one task per output file: the rows of a bin are numbered partition after partition and cut into
   num_shards consecutive runs whose sizes differ by at most one (LDDL's balance guarantee); each task writes one
   shard, in the writer's format (parquet or HDF5), to a temporary name that is renamed at the end. The held-out
   set is cut the same way into ceil(F * num_shards) shards, so its files are about as large as the training ones.
   A bin with fewer samples than shards gets one file per sample (none when it is empty), and the run says so.
   Format: docs/data-format.md#shard-file-names-and-sample-counts, #binning and #held-out-documents.

Determinism: every random draw comes from generators seeded by (seed, partition) and the partition of a document
depends only on the seed, the number of partitions and where the document is in the corpus, so the output is a
function of the corpus's text, the flags and the seed -- not of the number of workers, the engine, how files are
cut into read ranges, or whether they are compressed.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import logging
import math
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from itertools import chain
from multiprocessing import get_context
from pathlib import Path

import numpy as np
from tqdm import tqdm

from corpus import INPUT_FORMATS, RawDocument, document_sentences, find_corpus_files, is_compressed, read_documents
from preprocessing.cached_wordpiece import CachedWordPiece
from preprocessing.masking import MASKED_LM_RATIO, check_masked_lm_ratio, continuation_pieces, mask_batch, word_starts
from preprocessing.pretraining_pairs import create_pairs_from_document, create_segments_from_document
from preprocessing.shard_formats import ShardRows
from tokenizer import BertTokenizer, load_vocab
from utils import folder_lock
from utils.atomic_io import atomic_write_text
from utils.child_processes import end_with_parent
from utils.cli import finite_float
from utils.progress import progress_bar, show_counts

DEFAULT_BLOCK_BYTES = 16 * 2**20  # default partition size: --num-blocks = ceil(corpus text bytes / this)
MIN_RANGE_BYTES = 2**20  # read ranges are at least this long (they are cut finer only to feed idle workers)
MAX_RANGE_BYTES = 64 * 2**20
MASKING_CHUNK_ROWS = 4096  # rows masked per mask_batch call: bounds the padded [rows, max_seq_length] arrays
# Text tokenized per batch in stage 1: bounds the Python lists of token ids alive at once (a compressed file, read
# whole, may hold far more text than a read range).
TOKENIZE_BATCH_CHARACTERS = 4 * 2**20
# LDDL tokenizes every sentence with truncation at 512 tokens; a longer "sentence" is almost always a table or a
# list, and anything past 512 tokens could never fit in a pair anyway.
MAX_SENTENCE_TOKENS = 512

DOCUMENT_DTYPE = np.dtype([("key", "<u8"), ("file_index", "<i4"), ("offset", "<i8"), ("num_sentences", "<i4"),
                           ("sentence_start", "<i8"), ("token_start", "<i8")])
# The held-out set's list of its documents, in its output folder: docs/data-format.md#held-out-documents.
HOLDOUT_LIST = "held_out_documents.tsv"


@dataclass(frozen=True)
class PipelineSettings:
    """Everything that decides the pipeline's output (the engine and worker count do not)."""

    vocab_file: str
    lower_case: bool = True
    max_seq_length: int = 128
    short_seq_prob: float = 0.1
    next_sentence_prediction: bool = True  # False: single-segment samples [CLS] A [SEP] (RoBERTa's DOC-SENTENCES)
    duplicate_factor: int = 5
    masking: bool = True
    masked_lm_ratio: float = MASKED_LM_RATIO
    whole_word_masking: bool = False
    max_predictions_per_seq: int | None = None
    bin_size: int | None = None
    seed: int = 12345
    sample_ratio: float = 1.0
    num_blocks: int | None = None  # None: one per DEFAULT_BLOCK_BYTES of text, known once stage 1 has read it
    num_shards: int = 1
    holdout_fraction: float = 0.0

    @property
    def num_bins(self) -> int:
        return self.max_seq_length // self.bin_size if self.bin_size else 1

    @property
    def num_partitions(self) -> int:
        """Training partitions 0 .. num_blocks - 1, then as many for the held-out documents when there are any."""
        if self.num_blocks is None:
            raise ValueError("num_blocks is not known before the corpus is read (with_blocks)")
        return self.num_blocks * (2 if self.holdout_fraction > 0 else 1)

    def with_blocks(self, text_bytes: int) -> PipelineSettings:
        """These settings with num_blocks decided: as given, or one per DEFAULT_BLOCK_BYTES of the corpus's text."""
        if self.num_blocks is not None:
            return self
        return dataclasses.replace(self, num_blocks=max(1, math.ceil(text_bytes / DEFAULT_BLOCK_BYTES)))

    def bin_lengths(self) -> np.ndarray:
        """[bin] the length a sample of the bin is padded to: the bin's upper end, or max_seq_length unbinned."""
        if not self.bin_size:
            return np.array([self.max_seq_length])
        return np.minimum((np.arange(self.num_bins) + 1) * self.bin_size, self.max_seq_length)

    @property
    def num_holdout_shards(self) -> int:
        return math.ceil(self.holdout_fraction * self.num_shards)


@dataclass(frozen=True)
class ReadTask:
    """Stage 1's task: the documents starting in [start, end) of a file (end None: the whole compressed file)."""

    block_index: int
    file_index: int
    path: str
    input_format: str
    start: int
    end: int | None
    disk_bytes: int  # bytes of the file on disk this task reads (the progress bar's unit)


@dataclass(frozen=True)
class SetSummary:
    """One output set (training or held-out) as a run wrote it: its folder, shard files (bin -> paths) and rows per
    file, and what it holds."""

    output_dir: Path
    shard_files: dict[int, list[Path]]
    rows_per_shard: dict[str, int]
    num_documents: int
    num_sentences: int
    num_tokens: int  # WordPiece tokens of the documents' sentences
    num_samples: int
    num_random_next: int
    sample_tokens: int  # tokens of the samples, [CLS] and [SEP] included (each document duplicate_factor times)
    padding_tokens: int  # [PAD]s that fill every sample to its bin's upper length (max_seq_length unbinned)


@dataclass
class PipelineResult:
    """What a run produced: the training set, the held-out set (None without --holdout-fraction) and its list of
    documents, and how the run went."""

    training: SetSummary
    holdout: SetSummary | None
    holdout_list: Path | None
    text_bytes: int  # the corpus's text read (decompressed), which sets the default number of partitions
    num_blocks: int
    sentences_cut: int  # sentences longer than MAX_SENTENCE_TOKENS tokens, cut to that many
    tokens_cut: int  # tokens those cuts dropped
    notes: list[str]  # what the user should know about the output (a cut sentence, a bin with few samples)
    seconds: float
    engine: str  # what ran the tasks: "in-process", "ProcessPoolExecutor" or dask's "ClientExecutor"
    worker_pids: set[int]
    stage_seconds: dict[str, float] = field(default_factory=dict)


# A shard writer (a module-level function, so that it travels to worker processes): (output file, bin id, the
# shard's rows, settings) -> None, writing the file atomically.
ShardWriter = Callable[[Path, int, ShardRows, PipelineSettings], None]


@functools.lru_cache(maxsize=4)
def load_tokenizer(vocab_file: str, lower_case: bool) -> BertTokenizer:
    """One tokenizer per process (tasks of one worker reuse it)."""
    return BertTokenizer(vocab_file, do_lower_case=lower_case)


@functools.lru_cache(maxsize=4)
def load_encoder(vocab_file: str, lower_case: bool) -> CachedWordPiece:
    """One cached WordPiece encoder per process: its word cache serves every stage 1 task of a worker."""
    return CachedWordPiece(load_tokenizer(vocab_file, lower_case))


def _splitmix64(values: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer (Steele, Lea & Flood 2014), a bijective 64-bit mixer; uint64 arithmetic wraps."""
    values = values + np.uint64(0x9E3779B97F4A7C15)
    values = (values ^ (values >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    values = (values ^ (values >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return values ^ (values >> np.uint64(31))


def document_keys(seed: int, file_index: int, offsets: np.ndarray) -> np.ndarray:
    """The 64-bit key of each document: SplitMix64(SplitMix64(SplitMix64(seed) ^ file_index) ^ offset)."""
    base = _splitmix64(_splitmix64(np.array([seed], dtype=np.uint64)) ^ np.uint64(file_index))
    return _splitmix64(base ^ np.asarray(offsets, dtype=np.uint64))


def sample_draws(keys: np.ndarray) -> np.ndarray:
    """Each document's uniform draw in [0, 1) for --sample-ratio: the top 53 bits of SplitMix64(key), exact in float64.

    Mixing the key once more keeps the draw unrelated to key % num_blocks, the document's partition.
    """
    return (_splitmix64(np.asarray(keys, dtype=np.uint64)) >> np.uint64(11)).astype(np.float64) * 2.0**-53


def holdout_draws(keys: np.ndarray) -> np.ndarray:
    """Each document's uniform draw in [0, 1) for --holdout-fraction: the top 53 bits of SplitMix64(SplitMix64(key)).

    One more round of mixing than sample_draws, so whether a document is held out is unrelated to whether it is
    sampled and to its partition.
    """
    return (_splitmix64(_splitmix64(np.asarray(keys, dtype=np.uint64))) >> np.uint64(11)).astype(np.float64) * 2.0**-53


def partition_generators(seed: int, partition: int) -> tuple[random.Random, np.random.Generator]:
    """The pair-building RNG and the masking RNG of one partition, both derived from (seed, partition)."""
    sequence = np.random.SeedSequence([seed, partition])
    pair_seed = int.from_bytes(sequence.generate_state(4).tobytes(), "little")
    return random.Random(pair_seed), np.random.default_rng(sequence.spawn(1)[0])


def document_partitions(keys: np.ndarray, settings: PipelineSettings) -> np.ndarray:
    """The partition of each document (module docstring): key % num_blocks, plus num_blocks when held out."""
    if settings.num_blocks is None:
        raise ValueError("num_blocks is not known before the corpus is read (with_blocks)")
    partitions = (np.asarray(keys, dtype=np.uint64) % np.uint64(settings.num_blocks)).astype(np.int32)
    if settings.holdout_fraction > 0:
        partitions[holdout_draws(keys) < settings.holdout_fraction] += np.int32(settings.num_blocks)
    return partitions


def plan_read_tasks(files: Sequence[tuple[Path, str]], range_bytes: int) -> list[ReadTask]:
    """Cut every plain file into byte ranges of about range_bytes (a range's documents are those starting in it);
    a compressed file is one task, read whole."""
    tasks = []
    for file_index, (path, input_format) in enumerate(files):
        size = path.stat().st_size
        if is_compressed(path):
            tasks.append(ReadTask(len(tasks), file_index, str(path), input_format, 0, None, size))
            continue
        for start in range(0, size, range_bytes):
            stop = min(size, start + range_bytes)
            tasks.append(ReadTask(len(tasks), file_index, str(path), input_format, start, stop, stop - start))
    return tasks


@dataclass
class _TokenizedBatch:
    """Stage 1's output for some documents: one DOCUMENT_DTYPE row each (sentence_start and token_start not yet
    set), the token count of each of their sentences and the tokens, and what was cut."""

    table: np.ndarray
    sentence_lengths: np.ndarray
    tokens: np.ndarray
    held_out: list[tuple[int, int, str]]  # (file index, offset, title) of each held-out document
    sentences_cut: int
    tokens_cut: int
    first_cut: int | None  # offset of the first document with a cut sentence


def _tokenize_documents(documents: list[RawDocument], task: ReadTask, settings: PipelineSettings,
                        encoder: CachedWordPiece, token_dtype: type) -> _TokenizedBatch:
    """Sample, split and tokenize some documents of one read task; documents left without tokens are dropped."""
    offsets = np.fromiter((document.offset for document in documents), dtype=np.int64, count=len(documents))
    keys = document_keys(settings.seed, task.file_index, offsets)
    if settings.sample_ratio < 1.0:
        kept = np.flatnonzero(sample_draws(keys) < settings.sample_ratio)
        documents, offsets, keys = [documents[i] for i in kept.tolist()], offsets[kept], keys[kept]
    sentences_per_document = [document_sentences(document) for document in documents]
    ids, lengths = encoder.encode([sentence for sentences in sentences_per_document for sentence in sentences])
    document_of_sentence = np.repeat(np.arange(len(documents)), [len(sentences) for sentences in
                                                                  sentences_per_document])
    too_long = np.flatnonzero(lengths > MAX_SENTENCE_TOKENS)
    first_cut = int(offsets[document_of_sentence[too_long[0]]]) if len(too_long) else None
    tokens_cut = int((lengths[too_long] - MAX_SENTENCE_TOKENS).sum())
    if len(too_long):  # keep the first MAX_SENTENCE_TOKENS ids of each sentence
        sentence_starts = np.cumsum(lengths) - lengths
        position = np.arange(len(ids)) - np.repeat(sentence_starts, lengths)
        ids, lengths = ids[position < MAX_SENTENCE_TOKENS], np.minimum(lengths, MAX_SENTENCE_TOKENS)
    nonempty = lengths > 0  # a sentence of characters that tokenize to nothing (controls) is dropped
    num_sentences = np.bincount(document_of_sentence[nonempty], minlength=len(documents)).astype(np.int32)
    with_text = np.flatnonzero(num_sentences > 0)

    table = np.zeros(len(with_text), dtype=DOCUMENT_DTYPE)
    table["key"], table["offset"], table["num_sentences"] = keys[with_text], offsets[with_text], \
        num_sentences[with_text]
    table["file_index"] = task.file_index
    held_out = []
    if settings.holdout_fraction > 0:
        held_out = [(task.file_index, int(offsets[i]), documents[i].title)
                    for i in with_text[holdout_draws(keys[with_text]) < settings.holdout_fraction].tolist()]
    return _TokenizedBatch(table, lengths[nonempty].astype(np.int32), ids.astype(token_dtype), held_out,
                           len(too_long), tokens_cut, first_cut)


def tokenize_range(task: ReadTask, settings: PipelineSettings, work_dir: str) -> dict[str, object]:
    """Stage 1: read, split and tokenize the documents of one read task, a batch of about
    TOKENIZE_BATCH_CHARACTERS at a time; spill them to the work folder; return what the parent needs of them."""
    encoder = load_encoder(settings.vocab_file, settings.lower_case)
    token_dtype = np.uint16 if encoder.tokenizer.vocab_size <= 2**16 else np.int32
    batches: list[_TokenizedBatch] = []
    pending: list[RawDocument] = []
    pending_characters = 0
    reader = read_documents(Path(task.path), task.file_index, task.input_format, task.start, task.end)
    while True:
        try:
            document = next(reader)
        except StopIteration as finished:
            text_bytes = task.end - task.start if task.end is not None else finished.value
            break
        pending.append(document)
        pending_characters += sum(len(paragraph) for paragraph in document.paragraphs)
        if pending_characters >= TOKENIZE_BATCH_CHARACTERS:
            batches.append(_tokenize_documents(pending, task, settings, encoder, token_dtype))
            pending, pending_characters = [], 0
    if pending or not batches:
        batches.append(_tokenize_documents(pending, task, settings, encoder, token_dtype))

    table = np.concatenate([batch.table for batch in batches])
    sentence_lengths = np.concatenate([batch.sentence_lengths for batch in batches])
    table["sentence_start"] = np.concatenate([[0], np.cumsum(table["num_sentences"])[:-1]])
    sentence_token_starts = np.concatenate([[0], np.cumsum(sentence_lengths)]).astype(np.int64)
    table["token_start"] = sentence_token_starts[table["sentence_start"]]
    prefix = Path(work_dir) / f"block-{task.block_index:06d}"
    np.save(f"{prefix}-documents.npy", table)
    np.save(f"{prefix}-sentence-lengths.npy", sentence_lengths)
    np.save(f"{prefix}-tokens.npy", np.concatenate([batch.tokens for batch in batches]))
    cuts = [batch.first_cut for batch in batches if batch.first_cut is not None]
    return {
        "pid": os.getpid(),
        "block_index": task.block_index,
        "text_bytes": text_bytes,
        "keys": table["key"],
        "num_sentences": table["num_sentences"],
        "num_tokens": np.add.reduceat(sentence_lengths, table["sentence_start"]).astype(np.int64)
        if len(table) else np.zeros(0, np.int64),
        "held_out": [entry for batch in batches for entry in batch.held_out],
        "sentences_cut": sum(batch.sentences_cut for batch in batches),
        "tokens_cut": sum(batch.tokens_cut for batch in batches),
        "first_cut": (task.file_index, cuts[0]) if cuts else None,
    }


def _load_partition_documents(partition: int, block_indices: Sequence[int], settings: PipelineSettings,
                              work_dir: str) -> list[list[list[int]]]:
    """The documents of one partition from every spill file, ordered by (key, file index, offset)."""
    keyed = []
    for block_index in block_indices:
        prefix = Path(work_dir) / f"block-{block_index:06d}"
        table = np.load(f"{prefix}-documents.npy")
        rows = table[document_partitions(table["key"], settings) == partition]
        if not len(rows):
            continue
        lengths = np.load(f"{prefix}-sentence-lengths.npy", mmap_mode="r")
        tokens = np.load(f"{prefix}-tokens.npy", mmap_mode="r")
        for row in rows:
            first_sentence, count = int(row["sentence_start"]), int(row["num_sentences"])
            bounds = np.concatenate([[0], np.cumsum(lengths[first_sentence:first_sentence + count])]).tolist()
            first_token = int(row["token_start"])
            ids = tokens[first_token:first_token + bounds[-1]].tolist()
            keyed.append(((int(row["key"]), int(row["file_index"]), int(row["offset"])),
                          [ids[lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)]))
    keyed.sort(key=lambda item: item[0])
    return [document for _, document in keyed]


def build_partition(partition: int, block_indices: Sequence[int], settings: PipelineSettings,
                    work_dir: str) -> dict[str, object]:
    """Stage 2: the shuffled, optionally masked samples (NSP pairs or single segments) of one partition, grouped by
    bin, as a part file."""
    documents = _load_partition_documents(partition, block_indices, settings, work_dir)
    pair_rng, mask_rng = partition_generators(settings.seed, partition)
    pairs = []
    for _ in range(settings.duplicate_factor):
        for document_index in range(len(documents)):
            if settings.next_sentence_prediction:
                pairs.extend(create_pairs_from_document(documents, document_index, settings.max_seq_length,
                                                        settings.short_seq_prob, pair_rng))
            else:
                pairs.extend(create_segments_from_document(documents[document_index], settings.max_seq_length))
    pair_rng.shuffle(pairs)

    tokenizer = load_tokenizer(settings.vocab_file, settings.lower_case)
    cls_id, sep_id = tokenizer.cls_token_id, tokenizer.sep_token_id
    num_rows = len(pairs)
    a_lengths = np.fromiter((len(pair.tokens_a) for pair in pairs), dtype=np.int32, count=num_rows)
    b_lengths = np.fromiter((len(pair.tokens_b) for pair in pairs), dtype=np.int32, count=num_rows)
    num_tokens = a_lengths + 2 + np.where(b_lengths > 0, b_lengths + 1, 0)  # [CLS] A [SEP] (B [SEP])
    is_random_next = np.fromiter((pair.is_random_next for pair in pairs), dtype=bool, count=num_rows)
    row_starts = np.concatenate([[0], np.cumsum(num_tokens)]).astype(np.int64)
    # Each row is [CLS] A [SEP] (B [SEP]): the segments' tokens are gathered into place, not chained row by row.
    flat = np.empty(int(row_starts[-1]), dtype=np.int32)
    flat[row_starts[:-1]] = cls_id
    flat[row_starts[:-1] + 1 + a_lengths] = sep_id
    flat[row_starts[1:][b_lengths > 0] - 1] = sep_id
    for segment, lengths, offset in (("tokens_a", a_lengths, 1), ("tokens_b", b_lengths, 2 + a_lengths)):
        total = int(lengths.sum())
        values = np.fromiter(chain.from_iterable(getattr(pair, segment) for pair in pairs), dtype=np.int32,
                             count=total)
        segment_starts = np.cumsum(lengths) - lengths
        flat[np.repeat(row_starts[:-1] + offset - segment_starts, lengths) + np.arange(total)] = values

    if settings.masking:
        flat, masked_counts, masked_positions, masked_ids = _mask_rows(
            flat, row_starts, a_lengths, num_tokens, settings, tokenizer, mask_rng)
    else:
        masked_counts = np.zeros(num_rows, dtype=np.int32)
        masked_positions = masked_ids = np.zeros(0, dtype=np.int32)

    # pretraining_pairs.bin_id's rule, on the whole array
    bins = np.minimum((num_tokens - 1) // settings.bin_size, settings.num_bins - 1).astype(np.int32) \
        if settings.bin_size else np.zeros(num_rows, dtype=np.int32)
    order = np.argsort(bins, kind="stable")
    masked_starts = np.concatenate([[0], np.cumsum(masked_counts)]).astype(np.int64)
    part_file = str(Path(work_dir) / f"part-{partition:06d}")
    arrays = {
        "tokens": _gather_ragged(flat, row_starts, order),
        "num_tokens": num_tokens[order],
        "a_lengths": a_lengths[order],
        "is_random_next": is_random_next[order],
        "masked_counts": masked_counts[order],
        "masked_positions": _gather_ragged(masked_positions, masked_starts, order),
        "masked_ids": _gather_ragged(masked_ids, masked_starts, order),
        "bins": bins[order],
    }
    for name, values in arrays.items():  # one .npy each, so that a shard task maps and reads only its rows
        np.save(f"{part_file}-{name}.npy", values)
    return {
        "pid": os.getpid(),
        "partition": partition,
        "part_file": str(part_file),
        "bin_counts": np.bincount(bins, minlength=settings.num_bins),
        "num_pairs": num_rows,
        "num_random_next": int(is_random_next.sum()),
        "sample_tokens": int(num_tokens.sum()),
        "padding_tokens": int((settings.bin_lengths()[bins] - num_tokens).sum()),
    }


def _mask_rows(flat: np.ndarray, row_starts: np.ndarray, a_lengths: np.ndarray, num_tokens: np.ndarray,
               settings: PipelineSettings, tokenizer: BertTokenizer,
               rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Static masking of every row with masking.mask_batch; returns the masked flat tokens and ragged labels."""
    num_rows = len(num_tokens)
    masked_flat = flat.copy()
    counts = np.zeros(num_rows, dtype=np.int32)
    positions_chunks, ids_chunks = [], []
    columns = np.arange(settings.max_seq_length)
    is_continuation = continuation_pieces(tokenizer.vocab)
    for lo in range(0, num_rows, MASKING_CHUNK_ROWS):
        hi = min(num_rows, lo + MASKING_CHUNK_ROWS)
        lengths = num_tokens[lo:hi]
        inside = columns[None, :] < lengths[:, None]
        padded = np.zeros((hi - lo, settings.max_seq_length), dtype=np.int32)
        padded[inside] = flat[row_starts[lo]:row_starts[hi]]
        # [CLS] at 0, the first [SEP] after A, the last [SEP] at the end are never masked.
        candidates = inside & (columns[None, :] != 0) & (columns[None, :] != (a_lengths[lo:hi] + 1)[:, None]) \
            & (columns[None, :] != (lengths - 1)[:, None])
        starts = word_starts(padded, candidates, is_continuation) if settings.whole_word_masking else None
        masked, labels = mask_batch(padded, candidates, lengths, rng, tokenizer.vocab_size,
                                    tokenizer.mask_token_id, settings.masked_lm_ratio,
                                    settings.max_predictions_per_seq, starts)
        masked_flat[row_starts[lo]:row_starts[hi]] = masked[inside]
        rows, cols = np.nonzero(labels >= 0)  # row-major: positions ascend within a row
        counts[lo:hi] = np.bincount(rows, minlength=hi - lo)
        positions_chunks.append(cols.astype(np.int32))
        ids_chunks.append(labels[rows, cols].astype(np.int32))
    return masked_flat, counts, np.concatenate(positions_chunks or [np.zeros(0, np.int32)]), \
        np.concatenate(ids_chunks or [np.zeros(0, np.int32)])


def _gather_ragged(values: np.ndarray, starts: np.ndarray, order: np.ndarray) -> np.ndarray:
    """The rows of a ragged array (row i = values[starts[i]:starts[i+1]]) in the given row order, flattened."""
    if len(order) == 0:
        return values[:0]
    lengths = (starts[1:] - starts[:-1])[order]
    index = np.repeat(starts[:-1][order] - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths) \
        + np.arange(int(lengths.sum()))
    return values[index]


def read_part_rows(slices: Sequence[tuple[str, int, int]], bin_index: int) -> ShardRows:
    """Concatenate rows [first, stop) of bin `bin_index` from each part file, in order (each part's arrays are
    memory-mapped: only the rows asked for are read)."""
    token_runs, num_tokens, a_lengths, random_next, counts, position_runs, id_runs = [], [], [], [], [], [], []
    for part_file, first, stop in slices:
        def part(name: str, part_file: str = part_file) -> np.ndarray:
            return np.load(f"{part_file}-{name}.npy", mmap_mode="r")

        bin_lo = int(np.searchsorted(part("bins"), bin_index))
        lo, hi = bin_lo + first, bin_lo + stop
        part_num_tokens = np.asarray(part("num_tokens")[:hi])
        part_counts = np.asarray(part("masked_counts")[:hi])
        token_lo, token_hi = int(part_num_tokens[:lo].sum()), int(part_num_tokens.sum())
        masked_lo, masked_hi = int(part_counts[:lo].sum()), int(part_counts.sum())
        token_runs.append(np.asarray(part("tokens")[token_lo:token_hi]))
        position_runs.append(np.asarray(part("masked_positions")[masked_lo:masked_hi]))
        id_runs.append(np.asarray(part("masked_ids")[masked_lo:masked_hi]))
        num_tokens.append(part_num_tokens[lo:hi])
        a_lengths.append(np.asarray(part("a_lengths")[lo:hi]))
        random_next.append(np.asarray(part("is_random_next")[lo:hi]))
        counts.append(part_counts[lo:hi])
    num_tokens_all = np.concatenate(num_tokens) if num_tokens else np.zeros(0, np.int32)
    counts_all = np.concatenate(counts) if counts else np.zeros(0, np.int32)
    empty = np.zeros(0, np.int32)
    return ShardRows(
        tokens=np.concatenate(token_runs) if token_runs else empty,
        token_starts=np.concatenate([[0], np.cumsum(num_tokens_all)]).astype(np.int64),
        num_tokens=num_tokens_all,
        a_lengths=np.concatenate(a_lengths) if a_lengths else empty,
        is_random_next=np.concatenate(random_next) if random_next else np.zeros(0, bool),
        masked_positions=np.concatenate(position_runs) if position_runs else empty,
        masked_ids=np.concatenate(id_runs) if id_runs else empty,
        masked_starts=np.concatenate([[0], np.cumsum(counts_all)]).astype(np.int64),
    )


def balanced_slices(part_files: Sequence[str], bin_counts: Sequence[int],
                    num_shards: int) -> list[list[tuple[str, int, int]]]:
    """Cut the rows of one bin (part after part) into num_shards runs whose sizes differ by at most one."""
    total = int(sum(bin_counts))
    sizes = [total // num_shards + (1 if shard < total % num_shards else 0) for shard in range(num_shards)]
    part_starts = np.concatenate([[0], np.cumsum(bin_counts)]).astype(np.int64)
    shards, start = [], 0
    for size in sizes:
        stop = start + size
        slices = []
        for part_index, part_file in enumerate(part_files):
            lo = max(start, part_starts[part_index])
            hi = min(stop, part_starts[part_index + 1])
            if lo < hi:
                slices.append((part_file, int(lo - part_starts[part_index]), int(hi - part_starts[part_index])))
        shards.append(slices)
        start = stop
    return shards


@contextlib.contextmanager
def open_executor(num_workers: int, use_dask: bool = False,
                  scheduler_address: str | None = None) -> Iterator[Executor | None]:
    """The engine that runs the tasks: None (in this process) for one worker, a process pool, or dask."""
    if scheduler_address or use_dask:
        from distributed import Client, LocalCluster

        with contextlib.ExitStack() as stack:
            if scheduler_address:
                client = stack.enter_context(Client(scheduler_address))
            else:
                cluster = stack.enter_context(LocalCluster(n_workers=num_workers, threads_per_worker=1,
                                                           processes=True, dashboard_address=None))
                client = stack.enter_context(Client(cluster))
                client.wait_for_workers(num_workers)
                client.run(_quiet_task_failures)
            executor = client.get_executor(pure=False)
            try:
                yield executor
            except BaseException:
                # The caller reports the error (a corpus error in one line naming the file); the tasks still queued
                # or running are of no use. They are cancelled and the cluster closed with logging off, here and in
                # the local cluster's workers, which share this stderr: closing under running tasks, heartbeats and
                # callbacks waiting for results logs their failures, tracebacks included, burying that line.
                with _logging_off():
                    if not scheduler_address:
                        client.run(logging.disable, logging.CRITICAL, on_error="ignore")
                    executor.shutdown(wait=False)
                    stack.close()
                raise
    elif num_workers > 1:
        # spawn, not fork: the parent may hold threads (tokenizers' pool, Paddle) that fork would copy half-dead.
        pool = ProcessPoolExecutor(max_workers=num_workers, mp_context=get_context("spawn"),
                                   initializer=_start_pool_worker, initargs=(os.getpid(),))
        try:
            yield pool
        except BaseException:  # an error or a Ctrl-C: the workers' tasks are of no use any more
            for worker in list((pool._processes or {}).values()):
                worker.kill()
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
    else:
        yield None


@contextlib.contextmanager
def _logging_off() -> Iterator[None]:
    """No logging in this process meanwhile."""
    previous = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        yield
    finally:
        logging.disable(previous)


def _quiet_task_failures() -> None:
    """In a worker of the local dask cluster: no "Compute Failed" log, traceback included, on the stderr it shares
    with this process when a task raises. The error reaches this process as the task's result and is reported here
    (a corpus error in one line naming the file), as a process pool's errors are."""
    logging.getLogger("distributed.worker").addFilter(
        lambda record: not str(record.msg).startswith("Compute Failed"))


# Ctrl-C and a closed terminal: the parent's to handle.
_PARENT_SIGNALS = (signal.SIGINT, signal.SIGHUP)


def _start_pool_worker(parent_pid: int) -> None:
    """A pool worker ends with the process that started it, however that one dies (SIGKILL included): on Linux the
    kernel sends it SIGKILL (prctl PR_SET_PDEATHSIG, as the training loader's workers). Ctrl-C and a closed
    terminal reach the whole process group; they are the parent's to handle, which then ends the workers."""
    end_with_parent(parent_pid)
    for signum in _PARENT_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _PARENT_SIGNALS)  # held since the spawn (run_tasks); now ignored


def run_tasks(executor: Executor | None, function: Callable, argument_lists: Sequence[tuple], bar: tqdm,
              work: Sequence[float] | None = None, counted: Callable[[object], dict[str, int]] | None = None) -> list:
    """function(*arguments) for every entry, results in input order. Each finished task advances the progress bar
    by its work (default 1) and adds counted(result) to the totals shown beside it."""
    results: list = [None] * len(argument_lists)
    totals: dict[str, int] = {}

    def finished(index: int, result: object) -> None:
        results[index] = result
        if counted is not None:
            for name, count in counted(result).items():
                totals[name] = totals.get(name, 0) + count
            show_counts(bar, totals)
        bar.update(1 if work is None else work[index])

    with bar:
        if executor is None:
            for index, arguments in enumerate(argument_lists):
                finished(index, function(*arguments))
        else:
            # A pool spawns its workers in submit. They inherit this signal mask: a Ctrl-C while one is still
            # starting (before its initializer ignores it) waits rather than killing it with a traceback, and
            # reaches this process once the mask is lifted (CPython's resource tracker starts the same way).
            signal.pthread_sigmask(signal.SIG_BLOCK, _PARENT_SIGNALS)
            try:
                futures = {executor.submit(function, *arguments): index
                           for index, arguments in enumerate(argument_lists)}
            finally:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, _PARENT_SIGNALS)
            for future in as_completed(futures):
                finished(futures[future], future.result())
    return results


WORK_PREFIX = ".preprocess-"
_MKDTEMP_SUFFIX = r"[a-z0-9_]{8}"  # tempfile.mkdtemp's random part


def _work_place(output_dir: Path) -> tuple[Path, str]:
    """(folder, name prefix) of the run's work folder: beside output_dir, as `.preprocess-<name>-XXXXXXXX`, so that
    a killed run leaves the output folder empty for its rerun (and for the recipes' emptiness check); inside it
    when output_dir is a mount point, as the shards are renamed into it, which needs one file system."""
    if os.path.ismount(output_dir):
        return output_dir, WORK_PREFIX
    return output_dir.parent, f"{WORK_PREFIX}{output_dir.name}-"


def _remove_leftovers(parent: Path, prefix: str) -> None:
    """Remove the work folders `<prefix>XXXXXXXX` that killed runs left in parent, saying so; FolderInUse (one line
    with its PID and host) if a live run holds one."""
    if not parent.is_dir():
        return
    pattern = re.compile(re.escape(prefix) + _MKDTEMP_SUFFIX)
    for leftover in sorted(entry for entry in parent.iterdir() if pattern.fullmatch(entry.name) and entry.is_dir()):
        folder_lock.hold(leftover, "work folder")
        folder_lock.release(leftover)
        size = sum(path.stat().st_size for path in leftover.rglob("*") if path.is_file())
        shutil.rmtree(leftover)
        print(f"Removed {leftover} ({size / 1e6:.1f} MB), the work folder of an interrupted run", file=sys.stderr,
              flush=True)


@dataclass(frozen=True)
class RunPlan:
    """What a run will do, worked out before any work: its output folders (training, then held-out when there is
    one), the corpus files, the read tasks of stage 1 and their bytes on disk, and where the work folder goes."""

    outputs: list[Path]
    files: list[tuple[Path, str]]
    read_tasks: list[ReadTask]
    total_bytes: int
    work_parent: Path
    work_prefix: str


@dataclass(frozen=True)
class WrittenShards:
    """Stage 3's result per output set: shard files (bin -> paths) and rows per file; the writers' ids; and a note
    for each bin that got fewer files than asked."""

    shard_files: list[dict[int, list[Path]]]
    rows_per_shard: list[dict[str, int]]
    worker_pids: set[int]
    notes: list[str]


def plan_run(inputs: Sequence[str | Path], input_format: str, output_dir: Path, settings: PipelineSettings,
             num_workers: int, range_bytes: int | None, holdout_dir: str | Path | None) -> RunPlan:
    """Check the output folders (empty or absent; interrupted runs' work folders removed) and cut the corpus into
    read tasks of range_bytes (default: about four per worker, within MIN_RANGE_BYTES .. MAX_RANGE_BYTES)."""
    if settings.holdout_fraction > 0 and holdout_dir is None:
        raise ValueError(f"holdout_fraction {settings.holdout_fraction} needs a holdout_dir")
    outputs = [output_dir] + ([Path(holdout_dir)] if settings.holdout_fraction > 0 else [])
    work_parent, work_prefix = _work_place(output_dir)
    for parent, prefix in ((work_parent, work_prefix), (output_dir, WORK_PREFIX)):
        _remove_leftovers(parent, prefix)
    for folder in outputs:
        if folder.exists() and any(folder.iterdir()):
            raise ValueError(f"{folder}: output folder is not empty")
    files = [entry for path in inputs for entry in find_corpus_files(path, input_format)]
    total_bytes = sum(path.stat().st_size for path, _ in files)
    if range_bytes is None:
        range_bytes = min(MAX_RANGE_BYTES, max(MIN_RANGE_BYTES, math.ceil(total_bytes / (4 * num_workers))))
    return RunPlan(outputs, files, plan_read_tasks(files, range_bytes), total_bytes, work_parent, work_prefix)


class PipelineStages:
    """The three stages of a run on one engine and work folder, each run to completion with its progress bar.
    settings.num_blocks is decided once stage 1 has read the corpus (assign_partitions)."""

    def __init__(self, settings: PipelineSettings, executor: Executor | None, work_dir: str, quiet: bool):
        self.settings = settings
        self.executor = executor
        self.work_dir = work_dir
        self.quiet = quiet
        self.seconds: dict[str, float] = {}  # stage name -> its wall time

    @contextlib.contextmanager
    def _timed(self, stage: str) -> Iterator[None]:
        began = time.perf_counter()
        yield
        self.seconds[stage] = time.perf_counter() - began

    def partition_sets(self) -> np.ndarray:
        """[partition] the output set each partition feeds: 0 training, 1 held-out."""
        return np.arange(self.settings.num_partitions) // self.settings.num_blocks

    def tokenize(self, plan: RunPlan) -> list[dict]:
        """Stage 1: every read task's documents tokenized and spilled to the work folder; per task, its counts."""
        with self._timed("tokenize"):
            return run_tasks(self.executor, tokenize_range,
                             [(task, self.settings, self.work_dir) for task in plan.read_tasks],
                             progress_bar(desc="tokenize", total=plan.total_bytes, unit="B", unit_scale=True,
                                          quiet=self.quiet),
                             work=[task.disk_bytes for task in plan.read_tasks],
                             counted=lambda block: {"documents": len(block["keys"])})

    def assign_partitions(self, blocks: list[dict]) -> None:
        """Decide num_blocks from the text stage 1 read, then count each task's documents, sentences and tokens
        per partition (partition_counts, partition_sentences, partition_tokens)."""
        self.settings = self.settings.with_blocks(sum(block["text_bytes"] for block in blocks))
        for block in blocks:
            partitions = document_partitions(block["keys"], self.settings)
            size = self.settings.num_partitions
            block["partition_counts"] = np.bincount(partitions, minlength=size)
            block["partition_sentences"] = np.bincount(partitions, weights=block["num_sentences"],
                                                       minlength=size).astype(np.int64)
            block["partition_tokens"] = np.bincount(partitions, weights=block["num_tokens"],
                                                    minlength=size).astype(np.int64)

    def documents_per_set(self, blocks: list[dict], num_sets: int) -> list[int]:
        """Documents that stage 1 found for each output set (training, then held-out)."""
        partition_counts = np.stack([block["partition_counts"] for block in blocks])
        partition_sets = self.partition_sets()
        return [int(partition_counts[:, partition_sets == index].sum()) for index in range(num_sets)]

    def pair(self, blocks: list[dict], num_sets: int) -> list[list[dict]]:
        """Stage 2: one part file per partition that has documents; the parts of each output set."""
        with self._timed("pairs"):
            partition_counts = np.stack([block["partition_counts"] for block in blocks])
            partition_tasks = [
                (partition, [int(b) for b in np.flatnonzero(partition_counts[:, partition])], self.settings,
                 self.work_dir)
                for partition in range(self.settings.num_partitions) if partition_counts[:, partition].any()
            ]
            parts = run_tasks(self.executor, build_partition, partition_tasks,
                              progress_bar(desc="pairs", total=len(partition_tasks), unit="partition",
                                           quiet=self.quiet),
                              counted=lambda part: {"pairs": part["num_pairs"]})
            partition_sets = self.partition_sets()
            return [[part for part in parts if partition_sets[part["partition"]] == index]
                    for index in range(num_sets)]

    def write(self, outputs: list[Path], parts_per_set: list[list[dict]], shard_writer: ShardWriter,
              shard_name: Callable[[int, int], str]) -> WrittenShards:
        """Stage 3: each bin of each set cut into balanced shards, written in the work folder, then moved into
        the set's output folder. A bin with fewer samples than shards gets one file per sample, and a note."""
        settings = self.settings
        with self._timed("shards"):
            shard_tasks, destinations, shard_files, notes = [], [], [], []  # destinations: (set, final path)
            for index, (folder, set_parts) in enumerate(zip(outputs, parts_per_set, strict=True)):
                staging = Path(self.work_dir) / f"shards-{index}"
                staging.mkdir()
                num_shards = settings.num_shards if index == 0 else settings.num_holdout_shards
                shard_files.append({})
                for bin_index in range(settings.num_bins):
                    counts = [int(part["bin_counts"][bin_index]) for part in set_parts]
                    bin_shards = min(num_shards, sum(counts))
                    if bin_shards < num_shards:
                        flag = f"--num-shards {num_shards}" if index == 0 else \
                            f"the {num_shards} held-out shards of --holdout-fraction {settings.holdout_fraction}"
                        where = f"bin {bin_index} has" if settings.bin_size else "it has"
                        notes.append(f"{folder}: {where} {sum(counts)} samples, fewer than {flag}, so "
                                     f"{bin_shards} files")
                    if bin_shards == 0:
                        continue
                    slices = balanced_slices([part["part_file"] for part in set_parts], counts, bin_shards)
                    shard_files[-1][bin_index] = []
                    for shard_index, shard_slices in enumerate(slices):
                        name = shard_name(shard_index, bin_index)
                        shard_tasks.append((shard_writer, staging / name, bin_index, shard_slices, settings))
                        destinations.append((index, folder / name))
                        shard_files[-1][bin_index].append(folder / name)
            shard_pids = run_tasks(self.executor, _write_shard, shard_tasks,
                                   progress_bar(desc="shards", total=len(shard_tasks), unit="shard",
                                                quiet=self.quiet))
            rows_per_shard: list[dict[str, int]] = [{} for _ in outputs]
            for (_, path, _, shard_slices, _), (index, final) in zip(shard_tasks, destinations, strict=True):
                os.replace(path, final)
                rows_per_shard[index][final.name] = sum(stop - first for _, first, stop in shard_slices)
        return WrittenShards(shard_files, rows_per_shard, set(shard_pids), notes)


def write_holdout_list(folder: Path, files: Sequence[tuple[Path, str]], blocks: list[dict]) -> Path:
    """The held-out set's HOLDOUT_LIST (docs/data-format.md#held-out-documents), written atomically: a header,
    then `file<TAB>offset<TAB>title` per held-out document in corpus order."""
    entries = sorted(entry for block in blocks for entry in block["held_out"])
    lines = ["file\toffset\ttitle"] + [f"{files[file_index][0]}\t{offset}\t{_one_field(title)}"
                                       for file_index, offset, title in entries]
    return atomic_write_text(folder / HOLDOUT_LIST, "\n".join(lines) + "\n")


def _one_field(text: str) -> str:
    """text as one TSV field: tabs and line breaks become spaces."""
    return re.sub(r"[\t\r\n]", " ", text)


def summarise(plan: RunPlan, blocks: list[dict], parts_per_set: list[list[dict]], written: WrittenShards,
              stages: PipelineStages, seconds: float, holdout_list: Path | None) -> PipelineResult:
    """The run's result: each set's files and statistics, and how the run went."""
    outputs = plan.outputs
    partition_sets = stages.partition_sets()
    documents_per_set = stages.documents_per_set(blocks, len(outputs))
    sets = []
    for index, folder in enumerate(outputs):
        in_set = partition_sets == index
        parts = parts_per_set[index]
        sets.append(SetSummary(
            output_dir=folder,
            shard_files=written.shard_files[index],
            rows_per_shard=written.rows_per_shard[index],
            num_documents=documents_per_set[index],
            num_sentences=int(sum(block["partition_sentences"][in_set].sum() for block in blocks)),
            num_tokens=int(sum(block["partition_tokens"][in_set].sum() for block in blocks)),
            num_samples=sum(part["num_pairs"] for part in parts),
            num_random_next=sum(part["num_random_next"] for part in parts),
            sample_tokens=sum(part["sample_tokens"] for part in parts),
            padding_tokens=sum(part["padding_tokens"] for part in parts),
        ))
    sentences_cut = sum(block["sentences_cut"] for block in blocks)
    notes = list(written.notes)
    if sentences_cut:
        file_index, offset = min(block["first_cut"] for block in blocks if block["first_cut"] is not None)
        tokens_cut = sum(block["tokens_cut"] for block in blocks)
        notes.insert(0, f"{sentences_cut} sentences longer than {MAX_SENTENCE_TOKENS} tokens were cut to their first "
                        f"{MAX_SENTENCE_TOKENS} ({tokens_cut} tokens dropped; the first in the document at byte "
                        f"{offset} of {plan.files[file_index][0]})")
    return PipelineResult(
        training=sets[0],
        holdout=sets[1] if len(sets) == 2 else None,
        holdout_list=holdout_list,
        text_bytes=sum(block["text_bytes"] for block in blocks),
        num_blocks=stages.settings.num_blocks,
        sentences_cut=sentences_cut,
        tokens_cut=sum(block["tokens_cut"] for block in blocks),
        notes=notes,
        seconds=seconds,
        engine=type(stages.executor).__name__ if stages.executor is not None else "in-process",
        worker_pids={result["pid"] for result in blocks + [part for parts in parts_per_set for part in parts]}
        | written.worker_pids,
        stage_seconds=stages.seconds,
    )


def run_pipeline(inputs: Sequence[str | Path], input_format: str, output_dir: str | Path,
                 settings: PipelineSettings, shard_writer: ShardWriter, shard_name: Callable[[int, int], str],
                 executor: Executor | None, num_workers: int, range_bytes: int | None = None,
                 holdout_dir: str | Path | None = None, quiet: bool = False) -> PipelineResult:
    """Run the three stages and move the shards into output_dir, and the held-out set's into holdout_dir (both must
    be empty or absent; holdout_dir is used only with settings.holdout_fraction > 0) with its list of documents.
    Each stage shows its progress on stderr (progress.py) unless quiet: bytes read and documents, partitions and
    pairs, shards written."""
    began = time.perf_counter()
    plan = plan_run(inputs, input_format, Path(output_dir), settings, num_workers, range_bytes, holdout_dir)
    for folder in plan.outputs:
        folder.mkdir(parents=True, exist_ok=True)
    work_dir = tempfile.mkdtemp(prefix=plan.work_prefix, dir=plan.work_parent)
    stages = PipelineStages(settings, executor, work_dir, quiet)
    try:
        folder_lock.hold(work_dir, "work folder")  # a rerun knows it from a live run's by this lock
        blocks = stages.tokenize(plan)
        stages.assign_partitions(blocks)
        _check_documents(inputs, stages.settings, stages.documents_per_set(blocks, len(plan.outputs)))
        parts_per_set = stages.pair(blocks, len(plan.outputs))
        written = stages.write(plan.outputs, parts_per_set, shard_writer, shard_name)
    finally:
        folder_lock.release(work_dir)
        shutil.rmtree(work_dir, ignore_errors=True)
    holdout_list = write_holdout_list(plan.outputs[1], plan.files, blocks) if len(plan.outputs) == 2 else None
    return summarise(plan, blocks, parts_per_set, written, stages, time.perf_counter() - began, holdout_list)


def _check_documents(inputs: Sequence[str | Path], settings: PipelineSettings, documents_per_set: list[int]) -> None:
    """Both sets need documents: none at all names the corpus; none on one side names --holdout-fraction."""
    if sum(documents_per_set) == 0:
        sampled = f" (--sample-ratio {settings.sample_ratio} kept none)" if settings.sample_ratio < 1.0 else ""
        raise ValueError(f"{', '.join(str(path) for path in inputs)}: no documents with text found{sampled}")
    for count, side in zip(documents_per_set, ("training", "held-out"), strict=False):
        if count == 0:
            raise ValueError(f"--holdout-fraction {settings.holdout_fraction}: the {side} set gets none of the "
                             f"{sum(documents_per_set)} documents")


def _write_shard(shard_writer: ShardWriter, path: Path, bin_index: int, slices: list[tuple[str, int, int]],
                 settings: PipelineSettings) -> int:
    """Stage 3 task: one shard of the part-file rows in `slices`; returns the id of the process that wrote it."""
    shard_writer(path, bin_index, read_part_rows(slices, bin_index), settings)
    return os.getpid()


def add_pipeline_arguments(parser: argparse.ArgumentParser, masked_lm_aliases: Sequence[str] = ()) -> None:
    """The flags both preprocessors share (names follow LDDL's preprocess_bert_pretrain where it has one).

    masked_lm_aliases: other spellings of --masked-lm-ratio (create_pretraining_data keeps Google's --masked-lm-prob).
    """
    parser.add_argument("--input", required=True, nargs="+",
                        help="corpus file(s) or folder(s); folders are read recursively in sorted order, each "
                             "WikiText split once: its .raw file, not its .tokens one")
    parser.add_argument("--input-format", default="auto", choices=INPUT_FORMATS,
                        help="how documents are laid out in the corpus (see corpus.py); default: auto")
    parser.add_argument("--output-dir", required=True, help="folder for the shards; must be empty or absent")
    parser.add_argument("--vocab-file", required=True, help="WordPiece vocab, one token per line")
    parser.add_argument("--lower-case", action=argparse.BooleanOptionalAction, default=True,
                        help="lowercase and strip accents before WordPiece (uncased vocab); default: on")
    parser.add_argument("--max-seq-length", type=int, default=128,
                        help="length of [CLS] A [SEP] B [SEP] at most (LDDL: --target-seq-length); default: 128")
    parser.add_argument("--short-seq-prob", type=finite_float, default=None,
                        help="probability of a shorter random target length per document (NSP pairs only); "
                             f"default: {PipelineSettings.short_seq_prob}")
    parser.add_argument("--duplicate-factor", type=int, default=5,
                        help="times each document is turned into pairs (different random draws); default: 5")
    parser.add_argument("--masked-lm-ratio", *masked_lm_aliases, dest="masked_lm_ratio", type=finite_float,
                        default=None,
                        help="fraction of each sequence's tokens that static masking predicts (MosaicBERT: 0.3); "
                             f"default: {PipelineSettings.masked_lm_ratio}")
    parser.add_argument("--whole-word-masking", action="store_true",
                        help="static masking draws whole words (a piece and its ## continuations), as Google's "
                             "whole-word-masked BERT; default: single pieces")
    parser.add_argument("--seed", type=int, default=12345,
                        help="seed of every random draw: same seed and flags give the same files; default: 12345")
    parser.add_argument("--sample-ratio", type=finite_float, default=1.0,
                        help="keep this fraction of the documents: each one independently with this probability, "
                             "drawn from --seed and where it is in the corpus (as LDDL's); default: 1 (all)")
    parser.add_argument("--holdout-fraction", type=finite_float, default=0.0,
                        help="hold out this fraction of the documents for validation, each one independently, drawn "
                             "from --seed and where it is in the corpus; their samples go to --holdout-dir, never "
                             f"to --output-dir, with {HOLDOUT_LIST} listing them by title; default: 0 (none)")
    parser.add_argument("--holdout-dir", default=None,
                        help="folder for the held-out shards (empty or absent); default: <output-dir>_holdout")
    parser.add_argument("--num-blocks", type=int, default=None,
                        help="number of document partitions; random next segments come from the same partition "
                             f"(as LDDL's --num-blocks); default: one per {DEFAULT_BLOCK_BYTES // 2**20} MiB of the "
                             "corpus's text (decompressed)")
    parser.add_argument("--num-shards", type=int, required=True, help="number of output files (per bin)")
    parser.add_argument("--num-workers", type=int, default=os.cpu_count() or 1,
                        help="worker processes (1 = run in this process); default: all cores")
    parser.add_argument("--dask", action="store_true",
                        help="run the tasks on a dask distributed LocalCluster of --num-workers processes")
    parser.add_argument("--scheduler-address", default=None,
                        help="run the tasks on the dask distributed cluster at this address (tcp://host:port)")
    parser.add_argument("--quiet", action="store_true",
                        help="no progress lines on stderr (they never change the output files)")


def settings_from_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace,
                            **extra: object) -> PipelineSettings:
    """Validate the shared flags (parser.error names the bad one) and build the settings."""
    if args.max_seq_length < 5 or args.max_seq_length > 2**16 - 1:
        parser.error(f"--max-seq-length {args.max_seq_length} must be in [5, 65535]")
    short_seq_prob = PipelineSettings.short_seq_prob if args.short_seq_prob is None else args.short_seq_prob
    if not 0.0 <= short_seq_prob <= 1.0:
        parser.error(f"--short-seq-prob {short_seq_prob} must be in [0, 1]")
    if args.duplicate_factor < 1:
        parser.error(f"--duplicate-factor {args.duplicate_factor} must be at least 1")
    masked_lm_ratio = PipelineSettings.masked_lm_ratio if args.masked_lm_ratio is None else args.masked_lm_ratio
    try:
        check_masked_lm_ratio(masked_lm_ratio, "--masked-lm-ratio")
    except ValueError as error:
        parser.error(str(error))
    if args.seed < 0:
        parser.error(f"--seed {args.seed} must be non-negative")
    if not 0.0 < args.sample_ratio <= 1.0:
        parser.error(f"--sample-ratio {args.sample_ratio} must be in (0, 1]")
    if not 0.0 <= args.holdout_fraction < 1.0:
        parser.error(f"--holdout-fraction {args.holdout_fraction} must be in [0, 1)")
    if args.holdout_dir is not None and args.holdout_fraction == 0:
        parser.error("--holdout-dir needs --holdout-fraction above 0")
    if args.holdout_fraction > 0 and holdout_dir_of(args).resolve() == Path(args.output_dir).resolve():
        parser.error(f"--holdout-dir {args.holdout_dir} must not be --output-dir")
    if args.num_blocks is not None and args.num_blocks < 1:
        parser.error(f"--num-blocks {args.num_blocks} must be at least 1")
    if args.num_shards < 1:
        parser.error(f"--num-shards {args.num_shards} must be at least 1")
    if args.num_workers < 1:
        parser.error(f"--num-workers {args.num_workers} must be at least 1")
    if args.dask and args.scheduler_address:
        parser.error("--dask starts a local cluster; it cannot be combined with --scheduler-address")
    try:
        load_vocab(args.vocab_file)
    except (ValueError, OSError) as error:
        parser.error(f"--vocab-file {error}")
    for path in args.input:
        if not Path(path).exists():
            parser.error(f"--input {path}: not found")
    return PipelineSettings(
        vocab_file=str(Path(args.vocab_file).resolve()),
        lower_case=args.lower_case,
        max_seq_length=args.max_seq_length,
        short_seq_prob=short_seq_prob,
        duplicate_factor=args.duplicate_factor,
        masked_lm_ratio=masked_lm_ratio,
        whole_word_masking=args.whole_word_masking,
        seed=args.seed,
        sample_ratio=args.sample_ratio,
        num_blocks=args.num_blocks,
        num_shards=args.num_shards,
        holdout_fraction=args.holdout_fraction,
        **extra,
    )


def holdout_dir_of(args: argparse.Namespace) -> Path:
    """--holdout-dir, or by default the sibling of --output-dir named <output-dir>_holdout."""
    if args.holdout_dir is not None:
        return Path(args.holdout_dir)
    output_dir = Path(args.output_dir).resolve()
    return output_dir.with_name(output_dir.name + "_holdout")


def execute(args: argparse.Namespace, settings: PipelineSettings, shard_writer: ShardWriter,
            shard_name: Callable[[int, int], str], script: str) -> PipelineResult:
    """Open the engine the flags ask for and run the pipeline; data errors become one-line SystemExit messages
    `<script>: <message>`; the run's notes (PipelineResult.notes) are printed on stderr, one line each."""
    try:
        with open_executor(args.num_workers, args.dask, args.scheduler_address) as executor:
            result = run_pipeline(args.input, args.input_format, args.output_dir, settings, shard_writer,
                                  shard_name, executor, args.num_workers, holdout_dir=holdout_dir_of(args),
                                  quiet=args.quiet)
    except (ValueError, OSError) as error:
        raise SystemExit(f"{script}: {error}") from None
    for note in result.notes:
        print(f"{script}: note: {note}", file=sys.stderr)
    return result


def _set_report(summary: SetSummary) -> dict[str, object]:
    """What the summary line says of one output set."""
    padded = summary.sample_tokens + summary.padding_tokens
    return {
        "files": len(summary.rows_per_shard),
        "documents": summary.num_documents,
        "sentences": summary.num_sentences,
        "tokens": summary.num_tokens,
        "samples": summary.num_samples,
        "sample_tokens": summary.sample_tokens,
        "padding_tokens": summary.padding_tokens,
        "padding_fraction": round(summary.padding_tokens / max(1, padded), 4),
        "random_next_fraction": round(summary.num_random_next / max(1, summary.num_samples), 4),
    }


def print_summary(output_dir: str | Path, result: PipelineResult) -> None:
    """The one-line JSON report both preprocessors print at the end: what was written (per set: files, documents,
    sentences, tokens, samples, their tokens and the padding that fills them to their bins), how the corpus was
    read, and how fast."""
    training = result.training
    holdout = {} if result.holdout is None else {"holdout": {
        "output_dir": str(result.holdout.output_dir), **_set_report(result.holdout),
        "documents_list": str(result.holdout_list)}}
    print(json.dumps({
        "output_dir": str(Path(output_dir)),
        **_set_report(training),
        "text_bytes": result.text_bytes,
        "num_blocks": result.num_blocks,
        "sentences_cut": result.sentences_cut,
        "tokens_cut": result.tokens_cut,
        "seconds": round(result.seconds, 3),
        "stage_seconds": {stage: round(seconds, 3) for stage, seconds in result.stage_seconds.items()},
        "engine": result.engine,
        "worker_processes": len(result.worker_pids),
        "documents_per_second": round(training.num_documents / result.seconds, 2),
        "samples_per_second": round(training.num_samples / result.seconds, 2),
        **holdout,
    }))


if __name__ == "__main__":  # a library: run as a script, it would do nothing and say nothing
    sys.exit("preprocess_pipeline.py is the library behind the preprocessing commands and takes no arguments: run "
             "lddl_preprocess.py (LDDL's shards) or create_pretraining_data.py (NVIDIA's HDF5 files) instead")
