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
are written the same way to --holdout-dir (default `<output-dir>_holdout`), with `held_out_documents.tsv` listing
those documents (file, offset, title). The writer and the counts file:
shard_formats.py; pairs, masking and parallelism: preprocess_pipeline.py.
Format: docs/data-format.md#lddl-parquet-shards, #single-segment-samples, #shard-file-names-and-sample-counts and
#held-out-documents.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Sequence
from pathlib import Path

from preprocessing.preprocess_pipeline import (
    PipelineSettings,
    add_pipeline_arguments,
    execute,
    print_summary,
    settings_from_arguments,
)
from preprocessing.shard_formats import ParquetShards, ShardRows, write_num_samples
from utils import cli


def write_parquet_shard(path: Path, bin_index: int, rows: ShardRows, settings: PipelineSettings) -> None:
    """One LDDL shard of `rows`: with static mask columns unless --no-masking, with bin_id when binned."""
    ParquetShards.write(path, rows, settings.vocab_file, settings.masking,
                        bin_index if settings.bin_size is not None else None)


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
    result = execute(args, settings, write_parquet_shard,
                     functools.partial(ParquetShards.file_name, binned=args.bin_size is not None),
                     "lddl_preprocess.py")
    output_dir = Path(args.output_dir)
    write_num_samples(output_dir, result.training.rows_per_shard)
    if result.holdout is not None:
        write_num_samples(result.holdout.output_dir, result.holdout.rows_per_shard)
    print_summary(output_dir, result)


if __name__ == "__main__":
    # Run as the module lddl_preprocess, not as __main__: workers of a dask cluster in other processes
    # (--scheduler-address) unpickle the shard writer by its module's name.
    import lddl_preprocess

    sys.exit(cli.run_main(lddl_preprocess.main, "lddl_preprocess.py"))
