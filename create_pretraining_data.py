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
(preprocess_pipeline.py): deterministic for a seed, shards differ in size by at most one row.
Format: docs/data-format.md#nvidia-hdf5-shards.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import h5py
import numpy as np

import cli
from atomic_io import atomic_write
from preprocess_pipeline import (
    PipelineSettings,
    add_pipeline_arguments,
    execute,
    print_summary,
    read_part_rows,
    settings_from_arguments,
)

HDF5_DTYPES = {
    "input_ids": "i4",
    "input_mask": "i1",
    "segment_ids": "i1",
    "masked_lm_positions": "i4",
    "masked_lm_ids": "i4",
    "next_sentence_labels": "i1",
}


def shard_name(shard_index: int, bin_index: int) -> str:
    return f"shard-{shard_index}.hdf5"


def write_hdf5_shard(path: Path, bin_index: int, slices: Sequence[tuple[str, int, int]],
                     settings: PipelineSettings) -> None:
    """One HDF5 shard from the part-file rows in `slices`, written atomically (atomic_io)."""
    rows = read_part_rows(slices, bin_index)
    num_rows, length = len(rows.num_tokens), settings.max_seq_length
    columns = np.arange(length)
    inside = columns[None, :] < rows.num_tokens[:, None]
    input_ids = np.zeros((num_rows, length), dtype=np.int32)
    input_ids[inside] = rows.tokens
    segment_ids = (inside & (columns[None, :] > (rows.a_lengths + 1)[:, None])).astype(np.int8)

    counts = np.diff(rows.masked_starts)
    slots = np.arange(settings.max_predictions_per_seq)
    filled = slots[None, :] < counts[:, None]
    masked_lm_positions = np.zeros((num_rows, settings.max_predictions_per_seq), dtype=np.int32)
    masked_lm_ids = np.zeros((num_rows, settings.max_predictions_per_seq), dtype=np.int32)
    masked_lm_positions[filled] = rows.masked_positions
    masked_lm_ids[filled] = rows.masked_ids

    datasets = {
        "input_ids": input_ids,
        "input_mask": inside.astype(np.int8),
        "segment_ids": segment_ids,
        "masked_lm_positions": masked_lm_positions,
        "masked_lm_ids": masked_lm_ids,
        "next_sentence_labels": rows.is_random_next.astype(np.int8),
    }
    def write(temp: str) -> None:
        with h5py.File(temp, "w") as output:
            for name, values in datasets.items():
                output.create_dataset(name, data=values, dtype=HDF5_DTYPES[name], compression="gzip")

    atomic_write(path, write)


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
