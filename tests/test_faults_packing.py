"""Fault cases of --pack-sequences (the fault suite's style, tests/test_faults.py): data on which packing can pack
nothing, because no two samples fit in one row, is refused at start with one line naming the folder (and the bin)
and the lengths, as are micro-batches of one sample; a set where packing does pack trains. Every file that existed
before is kept byte for byte."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

import lddl_preprocess
from conftest import require_shared
from preprocessing.shard_formats import Hdf5Shards, ShardRows
from pretraining_runs import BINNED, UNBINNED, pretraining_argv
from test_faults import assert_kept, one_line_error, phase1, run_entry, snapshot, step_folders

pytestmark = pytest.mark.slow  # training runs


def no_checkpoint(tmp_path: Path) -> bool:
    return not phase1(tmp_path).exists() or step_folders(tmp_path / "out") == []


def refused(tmp_path: Path, shards: Path, capsys, *extra: str) -> str:
    """The one error line of a --pack-sequences run on `shards`, after checking exit status 1, no checkpoint and
    every shard file intact."""
    before = snapshot(shards)
    status, output = run_entry(pretraining_argv(tmp_path, "--max-steps", "1", "--pack-sequences", *extra,
                                                shards=shards), capsys)
    assert status == 1, output[-3000:]
    line = one_line_error(output, "run_pretraining.py: ", f"{shards}: --pack-sequences cannot pack these samples",
                          "together more than --max-seq-length 128", "drop --pack-sequences")
    assert_kept(before)
    assert no_checkpoint(tmp_path)
    return line


def named_lengths(line: str) -> tuple[int, int]:
    """The two sample lengths an error line names ('... have 65 and 66 tokens ...')."""
    shortest, second = (int(word) for word in line.split(" have ")[1].split(" tokens")[0].split(" and "))
    return shortest, second


@pytest.fixture(scope="module")
def bins_of_32(tmp_path_factory) -> Path:
    """lddl_preprocess.py --bin-size 32 at length 128 on a tenth of WikiText-2's test split: bins 0..3, bin b with
    the samples of 32b+1 .. 32(b+1) tokens."""
    folder = tmp_path_factory.mktemp("bins") / "bin32"
    corpus = folder.parent / "corpus.txt"
    corpus.write_bytes(require_shared("data", "wikitext-2", "wiki.test.raw").read_bytes()[:300_000])
    vocab = require_shared("vocab", "bert-uncased-vocab.txt")
    lddl_preprocess.main(["--input", str(corpus), "--vocab-file", str(vocab),
                          "--output-dir", str(folder), "--num-shards", "1", "--bin-size", "32", "--short-seq-prob",
                          "0.7", "--duplicate-factor", "1", "--max-predictions-per-seq", "20", "--num-workers", "1",
                          "--quiet"])
    return folder


def copy_bins(source: Path, target: Path, bins: list[int]) -> Path:
    target.mkdir()
    for bin_index in bins:
        for shard in sorted(source.glob(f"*.parquet_{bin_index}")):
            shutil.copy(shard, target / shard.name)
    return target


def test_an_unbinned_set_too_wide_to_pack_is_refused(tmp_path, capsys):
    # Bin 1 of the real bin-64 set under unbinned names: every sample has 65 to 128 tokens.
    wide = tmp_path / "wide"
    wide.mkdir()
    for index, shard in enumerate(sorted(require_shared(*BINNED).glob("*.parquet_1"))):
        shutil.copy(shard, wide / f"shard-{index}.parquet")
    line = refused(tmp_path, wide, capsys)
    assert " bin " not in line
    shortest, second = named_lengths(line)
    assert 64 < shortest <= second <= 128 and shortest + second > 128


def test_several_bins_none_of_which_packs_are_refused_naming_the_closest_bin(tmp_path, capsys, bins_of_32):
    wide = copy_bins(bins_of_32, tmp_path / "bins23", [2, 3])  # 65..96 and 97..128 tokens
    line = refused(tmp_path, wide, capsys)
    assert "the shortest two of bin 2 have" in line and "no other bin (3) has two that fit" in line
    shortest, second = named_lengths(line)
    assert 64 < shortest <= second <= 96


def test_several_bins_of_which_one_packs_train(tmp_path, capsys, bins_of_32):
    mixed = copy_bins(bins_of_32, tmp_path / "bins123", [1, 2, 3])  # bin 1: 33..64 tokens, two fit in 128
    status, output = run_entry(pretraining_argv(tmp_path, "--max-steps", "1", "--pack-sequences", shards=mixed),
                               capsys)
    assert status == 0, output[-3000:]
    assert step_folders(tmp_path / "out") == [1]


def test_micro_batches_of_one_sample_are_refused(tmp_path, capsys):
    shards = require_shared(*UNBINNED)
    before = snapshot(shards)
    status, output = run_entry(pretraining_argv(tmp_path, "--max-steps", "1", "--pack-sequences", "--batch-size", "1",
                                                shards=shards), capsys)
    assert status == 1, output[-3000:]
    one_line_error(output, "run_pretraining.py: ", "--batch-size 1: --pack-sequences packs the samples of one "
                   "micro-batch", "drop --pack-sequences")
    assert_kept(before)
    assert no_checkpoint(tmp_path)


def wide_hdf5_rows(lengths: list[int], vocab_size: int = 30522) -> ShardRows:
    """Rows [CLS] A [SEP] B [SEP] of the given lengths (A: half of the tokens between the specials), each with its
    second token masked."""
    rng = np.random.default_rng(0)
    num_tokens = np.array(lengths)
    a_lengths = (num_tokens - 3) // 2
    rows = []
    for length, a_length in zip(num_tokens, a_lengths, strict=True):
        words = rng.integers(1000, vocab_size, length)
        words[[0, a_length + 1, length - 1]] = [101, 102, 102]  # [CLS], [SEP], [SEP] in the uncased vocab
        rows.append(words)
    return ShardRows(tokens=np.concatenate(rows), token_starts=np.concatenate([[0], np.cumsum(num_tokens)]),
                     num_tokens=num_tokens, a_lengths=a_lengths, is_random_next=np.zeros(len(lengths), bool),
                     masked_positions=np.ones(len(lengths), np.int32),
                     masked_ids=np.array([row[1] for row in rows], np.int32),
                     masked_starts=np.arange(len(lengths) + 1))


def test_an_hdf5_set_too_wide_to_pack_is_refused(tmp_path, capsys):
    wide = tmp_path / "h5"
    wide.mkdir()
    Hdf5Shards.write(wide / "shard-0.hdf5", wide_hdf5_rows([100, 80, 128, 90]), 128, 20)
    Hdf5Shards.write(wide / "shard-1.hdf5", wide_hdf5_rows([70, 127, 110, 75]), 128, 20)
    line = refused(tmp_path, wide, capsys)
    assert named_lengths(line) == (70, 75)  # the shortest two of the set, from two files
