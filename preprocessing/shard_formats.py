"""The pre-training shard formats on disk: for each, its columns, file names, reader, writer and counts file.

- LDDL parquet (`ParquetShards`), the files of NVIDIA LDDL 0.1.0 (../shared/data/lddl-sample/README.md, section 3):
  columns A and B (WordPiece tokens joined by single spaces; B empty for a single-segment sample), is_random_next,
  num_tokens (uint16, the length of `[CLS] A [SEP] B [SEP]`, or `[CLS] A [SEP]` for an empty B); a statically
  masked set also masked_lm_positions (the bytes of a 1-D uint16 .npy array) and masked_lm_labels (the original
  tokens, space-joined); a binned set also bin_id. `shard-<i>.parquet`, or `shard-<i>.parquet_<bin>` when binned,
  and `.num_samples.json` (file name -> rows) beside them.
- NVIDIA/Google HDF5 (`Hdf5Shards`), the files of NVIDIA DeepLearningExamples' create_pretraining_data.py:
  input_ids, input_mask, segment_ids [N, S]; masked_lm_positions, masked_lm_ids [N, P], 0-padded;
  next_sentence_labels [N]. `shard-<i>.hdf5` (`*.h5` is read too). Always masked statically.

A writer takes `ShardRows`, the samples as token ids (what the preprocessing pipeline makes), and writes one file
atomically (atomic_io). A reader checks a file (`inspect`: rows, statically masked) and reads its columns as the
file holds them (`read`); pretraining_dataset.py turns those into batches. Both preprocessors and the loader use
this module alone for these facts, so what is written is what is read.
Format: docs/data-format.md#lddl-parquet-shards, #nvidia-hdf5-shards, #shard-file-names-and-sample-counts.
"""

from __future__ import annotations

import functools
import io
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tokenizer import load_vocab
from utils.atomic_io import atomic_write, atomic_write_text

# A batch row of samples (one sample, or several packed) is padded to a multiple of this many tokens, the
# granularity of tensor-core matrix tiles, and to at most max_seq_length.
SEQUENCE_ALIGNMENT = 8


def padded_row_length(longest: int, max_seq_length: int) -> int:
    """The length of a batch's rows whose longest holds `longest` tokens (see SEQUENCE_ALIGNMENT)."""
    return min(-(-longest // SEQUENCE_ALIGNMENT) * SEQUENCE_ALIGNMENT, max_seq_length)


@dataclass
class ShardRows:
    """The samples of one shard as token ids, flat arrays plus row offsets into them (what a writer writes):
    row i is tokens[token_starts[i]:token_starts[i+1]] = [CLS] A [SEP] B [SEP] (or [CLS] A [SEP]) after masking,
    num_tokens[i] long, a_lengths[i] tokens of A; its masked positions (ascending, in that row) and their original
    ids are masked_positions/masked_ids[masked_starts[i]:masked_starts[i+1]]."""

    tokens: np.ndarray
    token_starts: np.ndarray
    num_tokens: np.ndarray
    a_lengths: np.ndarray
    is_random_next: np.ndarray
    masked_positions: np.ndarray
    masked_ids: np.ndarray
    masked_starts: np.ndarray


# ---------------------------------------------------------------------------------------------------------------
# File names and the counts file


NUM_SAMPLES_FILE = ".num_samples.json"
_BINNED_PARQUET = re.compile(r"\.parquet_(\d+)$")


def shard_kind(name: str) -> tuple[str, int] | None:
    """(kind, bin) of a shard file name ("parquet", "binned parquet" or "hdf5"), None for other files."""
    if name.endswith(".parquet"):
        return "parquet", 0
    binned = _BINNED_PARQUET.search(name)
    if binned:
        return "binned parquet", int(binned.group(1))
    if name.endswith((".hdf5", ".h5")):
        return "hdf5", 0
    return None


def write_num_samples(folder: str | os.PathLike, rows_per_shard: Mapping[str, int]) -> None:
    """LDDL's .num_samples.json (file name -> rows, sorted by name), written atomically."""
    atomic_write_text(os.path.join(folder, NUM_SAMPLES_FILE), json.dumps(dict(sorted(rows_per_shard.items()))))


def check_num_samples(folder: str, rows_per_shard: Mapping[str, int]) -> None:
    """The folder's .num_samples.json, where it has one, must agree with the files' own row counts (file name ->
    rows); ValueError naming the listing and the file otherwise. Files it does not list are not checked."""
    listing = os.path.join(folder, NUM_SAMPLES_FILE)
    if not os.path.isfile(listing):
        return
    try:
        with open(listing, encoding="utf-8") as reader:
            counts = json.load(reader)
        if not isinstance(counts, dict):
            raise ValueError("not a JSON object")
    except ValueError as error:
        raise ValueError(f"{listing}: not a file name -> rows JSON object ({error})") from None
    for name, num_rows in rows_per_shard.items():
        if name in counts and counts[name] != num_rows:
            raise ValueError(f"{listing}: says {name} has {counts[name]} rows, the file has {num_rows}")


# ---------------------------------------------------------------------------------------------------------------
# LDDL parquet

# (column, arrow type, pandas type, numpy type) as LDDL's files declare them. LDDL declared num_tokens as a Python
# int in its dask meta, so the pandas metadata says numpy_type int64 although the column is uint16; we keep that,
# to be indistinguishable.
_PARQUET_FIELDS = (("A", pa.string(), "unicode", "object"), ("B", pa.string(), "unicode", "object"),
                   ("is_random_next", pa.bool_(), "bool", "bool"), ("num_tokens", pa.uint16(), "uint16", "int64"))
_PARQUET_MASK_FIELDS = (("masked_lm_positions", pa.binary(), "bytes", "object"),
                        ("masked_lm_labels", pa.string(), "unicode", "object"))
_PARQUET_BIN_FIELD = ("bin_id", pa.int64(), "int64", "int64")
PARQUET_COLUMNS = tuple(name for name, *_ in _PARQUET_FIELDS)
PARQUET_MASK_COLUMNS = tuple(name for name, *_ in _PARQUET_MASK_FIELDS)

_NPY_MAGIC = b"\x93NUMPY"
# The .npy header numpy.save writes for a 1-D little-endian uint16 array, the masked_lm_positions LDDL stores.
_NPY_UINT16_VECTOR_HEADER = re.compile(rb"\{'descr': '<u2', 'fortran_order': False, 'shape': \(\d+,\), \} *\n")
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


def parse_positions(value: bytes) -> np.ndarray:
    """masked_lm_positions of one row: the bytes of a .npy file (NEP 1 format)."""
    if value[:6] == _NPY_MAGIC:
        header_size_bytes = 2 if value[6] == 1 else 4
        header_size = int.from_bytes(value[8:8 + header_size_bytes], "little")
        data_start = 8 + header_size_bytes + header_size
        # LDDL's arrays are read directly (np.load costs more than the rest of a row); others go through np.load.
        if _NPY_UINT16_VECTOR_HEADER.fullmatch(value, data_start - header_size, data_start):
            return np.frombuffer(value, dtype="<u2", offset=data_start)
    return np.load(io.BytesIO(value), allow_pickle=False).reshape(-1)


def parquet_schema(masking: bool, binned: bool) -> pa.Schema:
    """The arrow schema of LDDL's files, with the pandas metadata that dask's to_parquet stored in them."""
    fields = _PARQUET_FIELDS + (_PARQUET_MASK_FIELDS if masking else ()) + ((_PARQUET_BIN_FIELD,) if binned else ())
    pandas_metadata = {
        "index_columns": [],
        "column_indexes": [],
        "columns": [{"name": name, "field_name": name, "pandas_type": pandas_type, "numpy_type": numpy_type,
                     "metadata": None} for name, _, pandas_type, numpy_type in fields],
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": None,  # written without pandas
    }
    return pa.schema([pa.field(name, arrow_type) for name, arrow_type, _, _ in fields],
                     metadata={b"pandas": json.dumps(pandas_metadata).encode()})


@functools.lru_cache(maxsize=4)
def vocab_words(vocab_file: str) -> pa.Array:
    """Token strings by id, as an arrow array (ids the vocab does not use read as [UNK])."""
    ids_to_tokens = {index: token for token, index in load_vocab(vocab_file).items()}
    return pa.array([ids_to_tokens.get(index, "[UNK]") for index in range(max(ids_to_tokens) + 1)], pa.string())


def join_tokens(words: pa.Array, token_ids: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """Row i: the words of token_ids[starts[i] : starts[i] + lengths[i]] joined by single spaces (arrow kernels)."""
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    index = np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1])
    values = words.take(pa.array(token_ids[index].astype(np.int64)))
    return pc.binary_join(pa.LargeListArray.from_arrays(pa.array(offsets, pa.int64()), values), " ")


class ParquetShards:
    """LDDL parquet shards. Format: docs/data-format.md#lddl-parquet-shards"""

    @staticmethod
    def file_name(shard_index: int, bin_index: int, binned: bool) -> str:
        """LDDL's balanced file name: shard-<i>.parquet, or shard-<i>.parquet_<bin> for a binned set."""
        return f"shard-{shard_index}.parquet" + (f"_{bin_index}" if binned else "")

    @staticmethod
    def write(path: str | os.PathLike, rows: ShardRows, vocab_file: str, masking: bool,
              bin_index: int | None) -> None:
        """One shard of `rows`, their ids written as the tokens of vocab_file; with masking the static mask
        columns; bin_index: the bin of a binned set (stored as bin_id), None for an unbinned one."""
        words = vocab_words(vocab_file)
        starts = rows.token_starts[:-1]
        b_lengths = np.maximum(rows.num_tokens - rows.a_lengths - 3, 0)  # a single-segment sample has no B
        columns = [join_tokens(words, rows.tokens, starts + 1, rows.a_lengths),
                   join_tokens(words, rows.tokens, starts + rows.a_lengths + 2, b_lengths),
                   pa.array(rows.is_random_next, pa.bool_()),
                   pa.array(rows.num_tokens.astype(np.uint16), pa.uint16())]
        if masking:
            masked_starts = rows.masked_starts.tolist()
            positions = [serialize_positions(rows.masked_positions[lo:hi])
                         for lo, hi in zip(masked_starts[:-1], masked_starts[1:], strict=True)]
            columns += [pa.array(positions, pa.binary()),
                        join_tokens(words, rows.masked_ids, rows.masked_starts[:-1], np.diff(rows.masked_starts))]
        if bin_index is not None:
            columns.append(pa.array(np.full(len(rows.num_tokens), bin_index, dtype=np.int64), pa.int64()))
        table = pa.Table.from_arrays(columns, schema=parquet_schema(masking, bin_index is not None))
        atomic_write(path, lambda temp: pq.write_table(table, temp, compression="snappy",
                                                       row_group_size=max(1, len(table))))

    @staticmethod
    def inspect(path: str) -> tuple[int, bool]:
        """(rows, statically masked) of one file, after checking that it has the columns to read."""
        try:
            metadata = pq.read_metadata(path)
        except (OSError, pa.ArrowException) as error:
            raise ValueError(f"{path}: not a readable parquet file ({error})") from None
        names = set(metadata.schema.names)
        missing = [column for column in PARQUET_COLUMNS if column not in names]
        if missing:
            raise ValueError(f"{path}: missing column(s) {', '.join(missing)}")
        masking = [column in names for column in PARQUET_MASK_COLUMNS]
        if any(masking) and not all(masking):
            present, absent = (PARQUET_MASK_COLUMNS if masking[0] else PARQUET_MASK_COLUMNS[::-1])
            raise ValueError(f"{path}: has column {present} but not {absent}")
        return metadata.num_rows, all(masking)

    @staticmethod
    def read(path: str, num_rows: int, statically_masked: bool) -> dict:
        """The columns the loader uses: A, B (and with static masks masked_lm_positions, masked_lm_labels) as lists,
        is_random_next and num_tokens as int64 arrays; checked to have num_rows rows and no empty values."""
        names = PARQUET_COLUMNS + (PARQUET_MASK_COLUMNS if statically_masked else ())
        try:
            table = pq.read_table(path, columns=list(names), use_threads=False)
        except (OSError, pa.ArrowException) as error:
            raise ValueError(f"{path}: cannot read the parquet data ({error})") from None
        if table.num_rows != num_rows:
            raise ValueError(f"{path}: has {table.num_rows} rows, {num_rows} when the loader started")
        for name in names:
            if table.column(name).null_count:
                raise ValueError(f"{path}: column {name} has {table.column(name).null_count} empty values")
        columns = {name: table.column(name).to_pylist() for name in ("A", "B") + names[4:]}
        columns["is_random_next"] = table.column("is_random_next").to_numpy().astype(np.int64)
        columns["num_tokens"] = table.column("num_tokens").to_numpy().astype(np.int64)
        return columns

    @staticmethod
    def sample_lengths(path: str) -> np.ndarray:
        """Tokens of each sample of one file (its num_tokens column), without reading the text."""
        try:
            return pq.read_table(path, columns=["num_tokens"], use_threads=False).column(0).to_numpy()
        except (OSError, pa.ArrowException) as error:
            raise ValueError(f"{path}: cannot read the parquet data ({error})") from None


# ---------------------------------------------------------------------------------------------------------------
# NVIDIA/Google HDF5

# The datasets in file order, with the dtypes NVIDIA's files have.
HDF5_DTYPES = {
    "input_ids": "i4",
    "input_mask": "i1",
    "segment_ids": "i1",
    "masked_lm_positions": "i4",
    "masked_lm_ids": "i4",
    "next_sentence_labels": "i1",
}
HDF5_DATASETS = tuple(HDF5_DTYPES)


class Hdf5Shards:
    """NVIDIA/Google HDF5 shards. Format: docs/data-format.md#nvidia-hdf5-shards"""

    @staticmethod
    def file_name(shard_index: int) -> str:
        return f"shard-{shard_index}.hdf5"

    @staticmethod
    def write(path: str | os.PathLike, rows: ShardRows, max_seq_length: int, max_predictions_per_seq: int) -> None:
        """One shard of `rows`, padded to [N, max_seq_length] and [N, max_predictions_per_seq], gzip-compressed."""
        num_rows = len(rows.num_tokens)
        columns = np.arange(max_seq_length)
        inside = columns[None, :] < rows.num_tokens[:, None]
        input_ids = np.zeros((num_rows, max_seq_length), dtype=np.int32)
        input_ids[inside] = rows.tokens
        segment_ids = (inside & (columns[None, :] > (rows.a_lengths + 1)[:, None])).astype(np.int8)

        counts = np.diff(rows.masked_starts)
        filled = np.arange(max_predictions_per_seq)[None, :] < counts[:, None]
        masked_lm_positions = np.zeros((num_rows, max_predictions_per_seq), dtype=np.int32)
        masked_lm_ids = np.zeros((num_rows, max_predictions_per_seq), dtype=np.int32)
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

        def write_file(temp: str) -> None:
            with h5py.File(temp, "w") as output:
                for name in HDF5_DATASETS:
                    output.create_dataset(name, data=datasets[name], dtype=HDF5_DTYPES[name], compression="gzip")

        atomic_write(path, write_file)

    @staticmethod
    def inspect(path: str) -> tuple[int, bool]:
        """(rows, True: always statically masked) of one file, after checking its datasets and their shapes."""
        try:
            with h5py.File(path, "r") as shard:
                missing = [name for name in HDF5_DATASETS if name not in shard]
                if missing:
                    raise ValueError(f"{path}: missing dataset(s) {', '.join(missing)}")
                shapes = {name: shard[name].shape for name in HDF5_DATASETS}
        except OSError as error:
            raise ValueError(f"{path}: not a readable HDF5 file ({error})") from None
        sequence_shape, slots_shape = shapes["input_ids"], shapes["masked_lm_positions"]
        num_rows = sequence_shape[0] if sequence_shape else 0
        fits = (len(sequence_shape) == 2 and len(slots_shape) == 2 and slots_shape[0] == num_rows
                and shapes["input_mask"] == sequence_shape and shapes["segment_ids"] == sequence_shape
                and shapes["masked_lm_ids"] == slots_shape and shapes["next_sentence_labels"] == (num_rows,))
        if not fits:
            listed = ", ".join(f"{name} {shape}" for name, shape in shapes.items())
            raise ValueError(f"{path}: dataset shapes do not fit [N, S] / [N, P] / [N]: {listed}")
        return num_rows, True

    @staticmethod
    def read(path: str, num_rows: int, statically_masked: bool = True) -> dict:
        """Every dataset as the file stores it (cast per batch: files can be big), checked to have num_rows rows;
        statically_masked is always so for HDF5 (the argument keeps the readers' calls alike)."""
        try:
            with h5py.File(path, "r") as source:
                columns = {name: source[name][()] for name in HDF5_DATASETS}
        except OSError as error:
            raise ValueError(f"{path}: cannot read the HDF5 data ({error})") from None
        if len(columns["next_sentence_labels"]) != num_rows:
            raise ValueError(f"{path}: has {len(columns['next_sentence_labels'])} rows, "
                             f"{num_rows} when the loader started")
        return columns

    @staticmethod
    def sample_lengths(path: str) -> np.ndarray:
        """Tokens of each sample of one file (its input_mask's ones)."""
        try:
            with h5py.File(path, "r") as source:
                return np.count_nonzero(source["input_mask"][()], axis=1)
        except OSError as error:
            raise ValueError(f"{path}: cannot read the HDF5 data ({error})") from None


SHARD_FORMATS: dict[str, type[ParquetShards] | type[Hdf5Shards]] = {"parquet": ParquetShards, "hdf5": Hdf5Shards}
