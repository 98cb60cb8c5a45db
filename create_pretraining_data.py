"""Text corpus -> BERT pretraining HDF5 shards in the original NVIDIA/Google format (static masking).

    python create_pretraining_data.py --input CORPUS --vocab-file VOCAB --output-dir OUT --num-shards 8 \\
        --max-seq-length 128 --max-predictions-per-seq 20 [--masked-lm-ratio 0.15] [--whole-word-masking] \\
        [--sample-ratio 0.9] [--dask | --scheduler-address ADDR]

Each `shard-<i>.hdf5` holds, for its N pairs, the datasets of NVIDIA DeepLearningExamples' BERT
create_pretraining_data.py (names, dtypes and gzip compression as its files have them):
  input_ids            int32 [N, max_seq_length]  [CLS] A [SEP] B [SEP] after masking, zero-padded
  input_mask           int8  [N, max_seq_length]  1 on real tokens, 0 on padding
  segment_ids          int8  [N, max_seq_length]  0 for [CLS] A [SEP], 1 for B [SEP], 0 on padding
  masked_lm_positions  int32 [N, max_predictions_per_seq]  sorted positions, zero-padded
  masked_lm_ids        int32 [N, max_predictions_per_seq]  original ids at those positions, zero-padded
  next_sentence_labels int8  [N]  1 when B is a random next, 0 when it really follows A
Pairs, masking (Google's rule, at most max_predictions_per_seq per sequence, by pieces or whole words; Google's
--masked-lm-prob is another name of --masked-lm-ratio) and parallelism are the shared pipeline's
(preprocess_pipeline.py): deterministic for a seed, shards differ in size by at most one row. The writer:
shard_formats.py.
Format: docs/data-format.md#nvidia-hdf5-shards.
"""

from __future__ import annotations

import argparse
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
from preprocessing.shard_formats import Hdf5Shards, ShardRows
from utils import cli


def write_hdf5_shard(path: Path, bin_index: int, rows: ShardRows, settings: PipelineSettings) -> None:
    """One HDF5 shard of `rows` (the only bin, 0), [N, --max-seq-length] and [N, --max-predictions-per-seq]."""
    Hdf5Shards.write(path, rows, settings.max_seq_length, settings.max_predictions_per_seq)


def shard_name(shard_index: int, bin_index: int) -> str:
    """The pipeline's name for shard `shard_index` (create_pretraining_data.py does not bin)."""
    return Hdf5Shards.file_name(shard_index)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_pipeline_arguments(parser, masked_lm_aliases=["--masked-lm-prob"])
    parser.add_argument("--max-predictions-per-seq", type=int, default=20,
                        help="masked positions per sequence at most (NVIDIA: 20 at seq 128, 80 at 512); default: 20")
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.max_predictions_per_seq < 1:
        parser.error(f"--max-predictions-per-seq {args.max_predictions_per_seq} must be at least 1")
    settings = settings_from_arguments(parser, args, masking=True,
                                       max_predictions_per_seq=args.max_predictions_per_seq)
    result = execute(args, settings, write_hdf5_shard, shard_name, "create_pretraining_data.py")
    print_summary(args.output_dir, result)


if __name__ == "__main__":
    sys.exit(cli.run_main(main, "create_pretraining_data.py"))
