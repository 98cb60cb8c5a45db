"""Text corpus -> BERT pretraining parquet shards in NVIDIA LDDL's format (preprocess_bert_pretrain + balancing).

    python lddl_preprocess.py --input CORPUS --vocab-file VOCAB --output-dir OUT --num-shards 4 \\
        [--masking | --no-masking] [--masked-lm-ratio 0.15] [--max-predictions-per-seq 20] [--whole-word-masking] \\
        [--bin-size 64] [--max-seq-length 128] [--sample-ratio 0.9] [--no-nsp] \\
        [--holdout-fraction 0.01 [--holdout-dir DIR]] [--dask | --scheduler-address ADDR]

The files are what lddl 0.1.0 writes (see ../shared/data/lddl-sample/README.md, section 3), so LDDL's loader and
ours read either: columns A, B (WordPiece tokens joined by spaces, already masked), is_random_next (bool),
num_tokens (uint16, len(A) + len(B) + 3; with --no-nsp B is empty, is_random_next False and num_tokens len(A) + 2,
for the single-segment sample `[CLS] A [SEP]`), with static masking also masked_lm_positions (the bytes of a .npy
uint16 array of positions in `[CLS] A [SEP] B [SEP]`) and masked_lm_labels (the original tokens, space-joined),
and when binned bin_id (int64); pandas metadata as pandas/dask wrote it; one row group, Snappy. The output files
are `shard-<i>.parquet` (binned: `shard-<i>.parquet_<bin>`), equal in rows within a bin up to one, and
`.num_samples.json` maps each file name to its row count. With --holdout-fraction the held-out documents' samples
are written the same way to --holdout-dir (default `<output-dir>_holdout`). Pairs, masking and parallelism:
preprocess_pipeline.py. Format: docs/data-format.md#lddl-parquet-shards, #single-segment-samples,
#shard-file-names-and-sample-counts and #held-out-documents.
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import cli
from atomic_io import atomic_write, atomic_write_text
from preprocess_pipeline import (
    PipelineSettings,
    add_pipeline_arguments,
    execute,
    load_tokenizer,
    print_summary,
    read_part_rows,
    settings_from_arguments,
)

NUM_SAMPLES_FILE = ".num_samples.json"


def shard_name(shard_index: int, bin_index: int, binned: bool) -> str:
    """LDDL's balanced file name: shard-<i>.parquet, or shard-<i>.parquet_<bin> for a binned set."""
    return f"shard-{shard_index}.parquet" + (f"_{bin_index}" if binned else "")


def lddl_schema(masking: bool, binned: bool) -> pa.Schema:
    """The arrow schema of LDDL's files, with the pandas metadata that dask's to_parquet stored in them.

    LDDL declared num_tokens as a Python int in its dask meta, so the metadata says numpy_type int64 although
    the column is uint16; we keep that, to be indistinguishable.
    """
    columns = [("A", pa.string(), "unicode", "object"), ("B", pa.string(), "unicode", "object"),
               ("is_random_next", pa.bool_(), "bool", "bool"), ("num_tokens", pa.uint16(), "uint16", "int64")]
    if masking:
        columns += [("masked_lm_positions", pa.binary(), "bytes", "object"),
                    ("masked_lm_labels", pa.string(), "unicode", "object")]
    if binned:
        columns.append(("bin_id", pa.int64(), "int64", "int64"))
    pandas_metadata = {
        "index_columns": [],
        "column_indexes": [],
        "columns": [{"name": name, "field_name": name, "pandas_type": pandas_type, "numpy_type": numpy_type,
                     "metadata": None} for name, _, pandas_type, numpy_type in columns],
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": None,  # written without pandas
    }
    return pa.schema([pa.field(name, arrow_type) for name, arrow_type, _, _ in columns],
                     metadata={b"pandas": json.dumps(pandas_metadata).encode()})


_NPY_HEADERS: dict[int, bytes] = {}


def serialize_positions(positions: np.ndarray) -> bytes:
    """What numpy.save writes for a 1-D uint16 array (LDDL's masked_lm_positions cell)."""
    count = len(positions)
    header = _NPY_HEADERS.get(count)
    if header is None:
        buffer = io.BytesIO()
        np.save(buffer, np.zeros(count, dtype="<u2"))
        header = _NPY_HEADERS[count] = buffer.getvalue()[:len(buffer.getvalue()) - 2 * count]
    return header + np.asarray(positions, dtype="<u2").tobytes()


def write_parquet_shard(path: Path, bin_index: int, slices: Sequence[tuple[str, int, int]],
                        settings: PipelineSettings) -> None:
    """One LDDL shard from the part-file rows in `slices`, written atomically (atomic_io)."""
    rows = read_part_rows(slices, bin_index)
    words = vocab_words(settings.vocab_file, settings.lower_case)
    starts = rows.token_starts[:-1]
    b_lengths = np.maximum(rows.num_tokens - rows.a_lengths - 3, 0)  # a single-segment sample has no B
    columns = [join_tokens(words, rows.tokens, starts + 1, rows.a_lengths),
               join_tokens(words, rows.tokens, starts + rows.a_lengths + 2, b_lengths),
               pa.array(rows.is_random_next, pa.bool_()), pa.array(rows.num_tokens.astype(np.uint16), pa.uint16())]
    if settings.masking:
        masked_starts = rows.masked_starts.tolist()
        positions = [serialize_positions(rows.masked_positions[lo:hi])
                     for lo, hi in zip(masked_starts[:-1], masked_starts[1:], strict=True)]
        columns += [pa.array(positions, pa.binary()),
                    join_tokens(words, rows.masked_ids, rows.masked_starts[:-1], np.diff(rows.masked_starts))]
    binned = settings.bin_size is not None
    if binned:
        columns.append(pa.array(np.full(len(rows.num_tokens), bin_index, dtype=np.int64), pa.int64()))
    table = pa.Table.from_arrays(columns, schema=lddl_schema(settings.masking, binned))
    atomic_write(path, lambda temp: pq.write_table(table, temp, compression="snappy",
                                                   row_group_size=max(1, len(table))))


@functools.lru_cache(maxsize=4)
def vocab_words(vocab_file: str, lower_case: bool) -> pa.Array:
    """Token strings by id, as an arrow array (ids the vocab does not use read as [UNK])."""
    ids_to_tokens = load_tokenizer(vocab_file, lower_case).ids_to_tokens
    return pa.array([ids_to_tokens.get(index, "[UNK]") for index in range(max(ids_to_tokens) + 1)], pa.string())


def join_tokens(words: pa.Array, token_ids: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """Row i: the words of token_ids[starts[i] : starts[i] + lengths[i]] joined by single spaces (arrow kernels)."""
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    index = np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1])
    values = words.take(pa.array(token_ids[index].astype(np.int64)))
    return pc.binary_join(pa.LargeListArray.from_arrays(pa.array(offsets, pa.int64()), values), " ")


def write_num_samples(output_dir: Path, rows_per_shard: dict[str, int]) -> None:
    """LDDL's .num_samples.json (file name -> rows), written atomically."""
    atomic_write_text(output_dir / NUM_SAMPLES_FILE, json.dumps(dict(sorted(rows_per_shard.items()))))


class _ShardNamer:
    """Picklable shard_name(shard, bin) for the pipeline (a lambda cannot travel to worker processes)."""

    def __init__(self, binned: bool):
        self.binned = binned

    def __call__(self, shard_index: int, bin_index: int) -> str:
        return shard_name(shard_index, bin_index, self.binned)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_pipeline_arguments(parser)
    parser.add_argument("--masking", action=argparse.BooleanOptionalAction, default=True,
                        help="static masking in the files (--no-masking leaves masking to the loader); default: on")
    parser.add_argument("--max-predictions-per-seq", type=int, default=None,
                        help="static masks per sequence at most, Google's cap (set it to the training run's, e.g. "
                             "20 at length 128 and 80 at 512); default: no cap, as LDDL")
    parser.add_argument("--nsp", action=argparse.BooleanOptionalAction, default=True,
                        help="next-sentence pairs [CLS] A [SEP] B [SEP] (Google's BERT); --no-nsp writes single "
                             "segments [CLS] A [SEP] of contiguous full sentences of one document, as RoBERTa's "
                             "DOC-SENTENCES, for MLM-only training; default: on")
    parser.add_argument("--bin-size", type=int, default=None,
                        help="bin pairs by length: bin k holds k*size+1..(k+1)*size tokens (must divide "
                             "--max-seq-length); default: no binning")
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.bin_size is not None and (args.bin_size < 1 or args.max_seq_length % args.bin_size):
        parser.error(f"--bin-size {args.bin_size} must be a positive divisor of --max-seq-length {args.max_seq_length}")
    static_masking_flags = [flag for flag, given in (("--masked-lm-ratio", args.masked_lm_ratio is not None),
                                                     ("--whole-word-masking", args.whole_word_masking),
                                                     ("--max-predictions-per-seq",
                                                      args.max_predictions_per_seq is not None)) if given]
    if not args.masking and static_masking_flags:
        parser.error(f"{' and '.join(static_masking_flags)} set static masking, which --no-masking turns off "
                     "(the training loader then masks: its masked_lm_ratio and whole_word_masking)")
    if args.max_predictions_per_seq is not None and args.max_predictions_per_seq < 1:
        parser.error(f"--max-predictions-per-seq {args.max_predictions_per_seq} must be at least 1")
    if not args.nsp and args.short_seq_prob is not None:
        parser.error("--short-seq-prob shortens NSP pairs; --no-nsp samples are packed full (RoBERTa)")
    settings = settings_from_arguments(parser, args, masking=args.masking, bin_size=args.bin_size,
                                       next_sentence_prediction=args.nsp,
                                       max_predictions_per_seq=args.max_predictions_per_seq)
    result = execute(args, settings, write_parquet_shard, _ShardNamer(args.bin_size is not None),
                     "lddl_preprocess.py")
    output_dir = Path(args.output_dir)
    write_num_samples(output_dir, result.rows_per_shard)
    if result.holdout is not None:
        write_num_samples(result.holdout.output_dir, result.holdout.rows_per_shard)
    print_summary(output_dir, result)


if __name__ == "__main__":
    # Run as the module lddl_preprocess, not as __main__: workers of a dask cluster in other processes
    # (--scheduler-address) unpickle the shard writer by its module's name.
    import lddl_preprocess

    sys.exit(cli.run_main(lddl_preprocess.main, "lddl_preprocess.py"))
