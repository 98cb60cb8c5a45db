"""shard_formats.py: each format's writer and reader round-trip three hand-made samples (a masked pair, a
single-segment sample, an unmasked pair), file names decode to what they encode, and the counts file lists the rows
written. The byte layout against real LDDL and NVIDIA files is tests/test_preprocessing.py's."""

from __future__ import annotations

import io
import json

import h5py
import numpy as np
import pyarrow.parquet as pq
import pytest

from conftest import require_shared
from preprocessing.shard_formats import (
    HDF5_DATASETS,
    HDF5_DTYPES,
    NUM_SAMPLES_FILE,
    PARQUET_COLUMNS,
    PARQUET_MASK_COLUMNS,
    Hdf5Shards,
    ParquetShards,
    ShardRows,
    check_num_samples,
    parse_positions,
    serialize_positions,
    shard_kind,
    write_num_samples,
)

CLS, SEP, MASK = 101, 102, 103
THE, CAT, SAT, DOWN, HELLO, WORLD, PLURAL, DOG, RAN = 1996, 4937, 2938, 2091, 7592, 2088, 2015, 3899, 2743


def vocab_file() -> str:
    return str(require_shared("vocab", "bert-uncased-vocab.txt"))


def hand_made_rows() -> ShardRows:
    """Row 0: [CLS] the [MASK] [SEP] sat down [SEP], 'cat' masked at position 2 and 'down' kept as itself at 5;
    row 1: [CLS] hello world ##s [SEP] (no B), 'world' masked at 2; row 2: [CLS] dog [SEP] ran [SEP], no mask, its
    B a random next."""
    rows = [[CLS, THE, MASK, SEP, SAT, DOWN, SEP], [CLS, HELLO, MASK, PLURAL, SEP], [CLS, DOG, SEP, RAN, SEP]]
    return ShardRows(tokens=np.array([token for row in rows for token in row], np.int32),
                     token_starts=np.array([0, 7, 12, 17]), num_tokens=np.array([7, 5, 5], np.int32),
                     a_lengths=np.array([2, 3, 1], np.int32), is_random_next=np.array([False, False, True]),
                     masked_positions=np.array([2, 5, 2], np.int32), masked_ids=np.array([CAT, DOWN, WORLD], np.int32),
                     masked_starts=np.array([0, 2, 3, 3]))


def test_parquet_round_trip_with_static_masks_and_a_bin(tmp_path):
    path = tmp_path / ParquetShards.file_name(0, 2, binned=True)
    ParquetShards.write(path, hand_made_rows(), vocab_file(), masking=True, bin_index=2)
    assert ParquetShards.inspect(str(path)) == (3, True)
    columns = ParquetShards.read(str(path), 3, statically_masked=True)
    assert columns["A"] == ["the [MASK]", "hello [MASK] ##s", "dog"]
    assert columns["B"] == ["sat down", "", "ran"]
    assert columns["is_random_next"].tolist() == [0, 0, 1]
    assert columns["num_tokens"].tolist() == [7, 5, 5]
    assert [parse_positions(cell).tolist() for cell in columns["masked_lm_positions"]] == [[2, 5], [2], []]
    assert columns["masked_lm_labels"] == ["cat down", "world", ""]
    assert ParquetShards.sample_lengths(str(path)).tolist() == [7, 5, 5]
    table = pq.read_table(path)
    assert table.column_names == [*PARQUET_COLUMNS, *PARQUET_MASK_COLUMNS, "bin_id"]
    assert table.column("bin_id").to_pylist() == [2, 2, 2]


def test_parquet_round_trip_without_masks_or_bins(tmp_path):
    path = tmp_path / ParquetShards.file_name(1, 0, binned=False)
    ParquetShards.write(path, hand_made_rows(), vocab_file(), masking=False, bin_index=None)
    assert ParquetShards.inspect(str(path)) == (3, False)
    columns = ParquetShards.read(str(path), 3, statically_masked=False)
    assert set(columns) == set(PARQUET_COLUMNS)
    assert columns["A"] == ["the [MASK]", "hello [MASK] ##s", "dog"]  # the tokens as the rows hold them
    assert pq.read_table(path).column_names == list(PARQUET_COLUMNS)
    with pytest.raises(ValueError, match=r"shard-1\.parquet: has 3 rows, 4 when the loader started"):
        ParquetShards.read(str(path), 4, statically_masked=False)


def test_hdf5_round_trip(tmp_path):
    path = tmp_path / Hdf5Shards.file_name(0)
    Hdf5Shards.write(path, hand_made_rows(), max_seq_length=8, max_predictions_per_seq=3)
    assert Hdf5Shards.inspect(str(path)) == (3, True)
    columns = Hdf5Shards.read(str(path), 3)
    np.testing.assert_array_equal(columns["input_ids"], [[CLS, THE, MASK, SEP, SAT, DOWN, SEP, 0],
                                                         [CLS, HELLO, MASK, PLURAL, SEP, 0, 0, 0],
                                                         [CLS, DOG, SEP, RAN, SEP, 0, 0, 0]])
    np.testing.assert_array_equal(columns["input_mask"], [[1] * 7 + [0], [1] * 5 + [0] * 3, [1] * 5 + [0] * 3])
    np.testing.assert_array_equal(columns["segment_ids"], [[0, 0, 0, 0, 1, 1, 1, 0], [0] * 8,
                                                           [0, 0, 0, 1, 1, 0, 0, 0]])
    np.testing.assert_array_equal(columns["masked_lm_positions"], [[2, 5, 0], [2, 0, 0], [0, 0, 0]])
    np.testing.assert_array_equal(columns["masked_lm_ids"], [[CAT, DOWN, 0], [WORLD, 0, 0], [0, 0, 0]])
    np.testing.assert_array_equal(columns["next_sentence_labels"], [0, 0, 1])
    assert Hdf5Shards.sample_lengths(str(path)).tolist() == [7, 5, 5]
    with h5py.File(path, "r") as written:
        assert list(written) == sorted(HDF5_DATASETS)  # h5py lists names sorted; all six are there
        assert {name: written[name].dtype.str[1:] for name in HDF5_DATASETS} == HDF5_DTYPES


def test_file_names_decode_to_their_kind_and_bin():
    assert shard_kind(ParquetShards.file_name(3, 0, binned=False)) == ("parquet", 0)
    assert shard_kind(ParquetShards.file_name(3, 5, binned=True)) == ("binned parquet", 5)
    assert shard_kind(Hdf5Shards.file_name(3)) == ("hdf5", 0)
    assert shard_kind("shard-0.h5") == ("hdf5", 0)
    assert shard_kind(NUM_SAMPLES_FILE) is None and shard_kind("README.md") is None


def test_positions_cells_are_numpy_save_bytes_and_parse_back():
    for positions in ([], [1], [3, 7, 65535]):
        buffer = io.BytesIO()
        np.save(buffer, np.array(positions, dtype="<u2"))
        assert serialize_positions(np.array(positions)) == buffer.getvalue()
        assert parse_positions(buffer.getvalue()).tolist() == positions
    buffer = io.BytesIO()
    np.save(buffer, np.array([4, 9], dtype=np.int64))  # another writer's dtype goes through np.load
    assert parse_positions(buffer.getvalue()).tolist() == [4, 9]


def test_the_counts_file_lists_the_rows_written(tmp_path):
    rows = hand_made_rows()
    for index in range(2):
        ParquetShards.write(tmp_path / ParquetShards.file_name(index, 0, binned=False), rows, vocab_file(),
                            masking=True, bin_index=None)
    counts = {path.name: ParquetShards.inspect(str(path))[0] for path in tmp_path.glob("*.parquet")}
    write_num_samples(tmp_path, {"shard-1.parquet": counts["shard-1.parquet"],
                                 "shard-0.parquet": counts["shard-0.parquet"]})
    assert (tmp_path / NUM_SAMPLES_FILE).read_text() == '{"shard-0.parquet": 3, "shard-1.parquet": 3}'
    check_num_samples(str(tmp_path), counts)
    check_num_samples(str(tmp_path), {"shard-2.parquet": 9})  # a file it does not list is not its business
    with pytest.raises(ValueError, match=r"\.num_samples\.json: says shard-0\.parquet has 3 rows, the file has 4"):
        check_num_samples(str(tmp_path), {**counts, "shard-0.parquet": 4})
    (tmp_path / NUM_SAMPLES_FILE).write_text(json.dumps([3, 3]))
    with pytest.raises(ValueError, match="not a file name -> rows JSON object"):
        check_num_samples(str(tmp_path), counts)
