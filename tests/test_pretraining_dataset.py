"""pretraining_dataset.py: LDDL-sample compatibility, HDF5, order, sharding, bins, resume, workers, errors, CLI.

Expectations come from the shard rows read independently with pyarrow/h5py and the format rules of
shared/data/lddl-sample/README.md, never from the loader itself.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from functools import cache
from pathlib import Path

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import create_pretraining_data
import lddl_preprocess
from conftest import ROOT, require_shared
from data_fixtures import partly_masked_words, words_of
from messages import assert_one_line
from pretraining_dataset import BatchBuilder, PretrainingDataLoader, main

KEYS = ("input_ids", "token_type_ids", "attention_mask", "masked_lm_labels", "next_sentence_labels")
LDDL_SETS = ("wikitext2-test-seq128-unbinned", "wikitext2-test-seq128-bin64", "wikitext2-test-seq128-unbinned-dynamic")


# ---------------------------------------------------------------------------------------------------------------
# Helpers: an independent reading of the shards, and small synthetic sets


def vocab_ids(vocab_file: Path) -> dict[str, int]:
    return {line.rstrip("\n"): index for index, line in enumerate(vocab_file.read_text(encoding="utf-8").split("\n"))}


@cache
def expected_rows(folder: Path, vocab_file: Path) -> list[dict]:
    """Each row of the parquet shards as the README says the loader must present it (unpadded)."""
    vocab = vocab_ids(vocab_file)
    rows = []
    for path in sorted(p for p in folder.iterdir() if ".parquet" in p.name):
        for row in pq.read_table(path).to_pylist():
            tokens_a, tokens_b = row["A"].split(" "), row["B"].split(" ")
            tokens = ["[CLS]", *tokens_a, "[SEP]", *tokens_b, "[SEP]"]
            assert len(tokens) == row["num_tokens"]
            labels = [-1] * len(tokens)
            if "masked_lm_positions" in row:
                positions = np.load(io.BytesIO(row["masked_lm_positions"]))
                for position, token in zip(positions, row["masked_lm_labels"].split(" "), strict=True):
                    labels[position] = vocab[token]
            rows.append({"input_ids": [vocab[t] for t in tokens],
                         "token_type_ids": [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1),
                         "masked_lm_labels": labels, "next_sentence_labels": int(row["is_random_next"])})
    return rows


def samples(batch: dict[str, np.ndarray]) -> list[dict]:
    """The rows of a batch cut to their attention length, after checking the padding layout."""
    out = []
    for row in range(len(batch["input_ids"])):
        length = int(batch["attention_mask"][row].sum())
        assert batch["attention_mask"][row, :length].all()
        for key in ("input_ids", "token_type_ids", "masked_lm_labels"):
            assert not batch[key][row, length:].any() if key != "masked_lm_labels" else \
                (batch[key][row, length:] == -1).all()
        out.append({key: batch[key][row, :length].tolist() for key in KEYS[:4] if key != "attention_mask"}
                   | {"next_sentence_labels": int(batch["next_sentence_labels"][row])})
    return out


def key_of(sample: dict) -> str:
    return json.dumps(sample, sort_keys=True)


def unmasked(sample: dict) -> dict:
    """A dynamically masked sample with its original ids put back and the labels dropped."""
    ids = [label if label >= 0 else token for token, label in zip(sample["input_ids"], sample["masked_lm_labels"],
                                                                     strict=True)]
    return {"input_ids": ids, "token_type_ids": sample["token_type_ids"],
            "next_sentence_labels": sample["next_sentence_labels"]}


def one_epoch(loader: PretrainingDataLoader) -> list[dict]:
    batches = []
    iterator = iter(loader)
    for _ in range(loader.steps_per_epoch):
        batches.append(next(iterator))
    return batches


def check_batch_shapes(batch: dict[str, np.ndarray], max_seq_length: int) -> None:
    lengths = batch["attention_mask"].sum(axis=1)
    expected_length = min(-(-int(lengths.max()) // 8) * 8, max_seq_length)
    for key in KEYS[:4]:
        assert batch[key].dtype == np.int64 and batch[key].shape == (len(lengths), expected_length), key
    assert batch["next_sentence_labels"].dtype == np.int64 and batch["next_sentence_labels"].shape == (len(lengths),)


TINY_WORDS = [f"w{i}" for i in range(60)]


@pytest.fixture
def tiny_vocab(tmp_path: Path) -> Path:
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *TINY_WORDS, *map(str, range(2000))])
                    + "\n", encoding="utf-8")
    return path


def write_parquet_set(folder: Path, rows_per_file: list[int], seed: int = 0, binned_by: int | None = None,
                      num_samples_file: bool = True) -> list[dict]:
    """Unmasked LDDL-layout shards whose A starts with a unique number token; returns the rows written."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    rows, counts, serial = [], {}, 0
    for file_index, num_rows in enumerate(rows_per_file):
        file_rows = []
        for _ in range(num_rows):
            length_a, length_b = int(rng.integers(1, 20)), int(rng.integers(1, 20))
            a = [str(serial), *(TINY_WORDS[i] for i in rng.integers(0, 60, length_a - 1))]
            b = [TINY_WORDS[i] for i in rng.integers(0, 60, length_b)]
            file_rows.append({"A": " ".join(a), "B": " ".join(b), "is_random_next": bool(rng.integers(0, 2)),
                              "num_tokens": length_a + length_b + 3})
            serial += 1
        if binned_by is None:
            groups = {f"shard-{file_index}.parquet": file_rows}
        else:
            groups = {f"shard-{file_index}.parquet_{b}": [r for r in file_rows
                                                          if min((r["num_tokens"] - 1) // binned_by, 1) == b]
                      for b in (0, 1)}
        for name, group in groups.items():
            table = pa.Table.from_pylist(group, schema=pa.schema([("A", pa.string()), ("B", pa.string()),
                                                                  ("is_random_next", pa.bool_()),
                                                                  ("num_tokens", pa.uint16())]))
            pq.write_table(table, folder / name)
            counts[name] = len(group)
        rows += file_rows
    if num_samples_file:
        (folder / ".num_samples.json").write_text(json.dumps(counts))
    return rows


def first_numbers(batch: dict[str, np.ndarray], vocab: dict[str, int]) -> list[int]:
    """The unique serial number each synthetic sample carries as its first A token (position 1)."""
    id_to_token = {index: token for token, index in vocab.items()}
    column = np.where(batch["masked_lm_labels"][:, 1] >= 0, batch["masked_lm_labels"][:, 1], batch["input_ids"][:, 1])
    return [int(id_to_token[int(index)]) for index in column]


# ---------------------------------------------------------------------------------------------------------------
# LDDL sample compatibility


@pytest.mark.parametrize("name, rows_in_epoch", [("wikitext2-test-seq128-unbinned", 5792),
                                                 ("wikitext2-test-seq128-bin64", 6382)])
def test_lddl_static_sets_equal_their_rows(name, rows_in_epoch, uncased_vocab):
    folder = require_shared("data", "lddl-sample", name)
    expected = Counter(key_of(row) for row in expected_rows(folder, uncased_vocab))
    assert sum(expected.values()) == rows_in_epoch == sum(json.loads((folder / ".num_samples.json").read_text())
                                                          .values())
    loader = PretrainingDataLoader(str(folder), str(uncased_vocab), batch_size=64, max_seq_length=128,
                                   max_predictions_per_seq=20, seed=7)
    assert loader.num_samples == rows_in_epoch
    seen = Counter()
    for batch in one_epoch(loader):
        check_batch_shapes(batch, 128)
        seen.update(key_of(sample) for sample in samples(batch))
    assert seen == expected


def test_lddl_dynamic_set_is_masked_by_googles_rule(uncased_vocab):
    folder = require_shared("data", "lddl-sample", "wikitext2-test-seq128-unbinned-dynamic")
    vocab = vocab_ids(uncased_vocab)
    expected = Counter(key_of(unmasked(row)) for row in expected_rows(folder, uncased_vocab))
    loader = PretrainingDataLoader(str(folder), str(uncased_vocab), batch_size=64, max_seq_length=128,
                                   max_predictions_per_seq=20, seed=7)
    seen, picked, replaced_by_mask = Counter(), 0, 0
    for batch in one_epoch(loader):
        check_batch_shapes(batch, 128)
        for sample in samples(batch):
            seen[key_of(unmasked(sample))] += 1
            labels = np.array(sample["masked_lm_labels"])
            length = len(labels)
            first_sep = sample["token_type_ids"].index(1) - 1
            assert (labels >= 0).sum() == min(20, max(1, int(round(length * 0.15))))
            assert labels[[0, first_sep, length - 1]].max() == -1  # never [CLS] or a [SEP]
            picked += (labels >= 0).sum()
            replaced_by_mask += (np.array(sample["input_ids"])[labels >= 0] == vocab["[MASK]"]).sum()
    assert seen == expected and sum(seen.values()) == 5406
    assert abs(replaced_by_mask / picked - 0.8) < 0.02


@pytest.fixture(scope="module")
def wikitext_unmasked(tmp_path_factory) -> Path:
    """WikiText-2's test split as shards without static masks (our preprocessor, the uncased vocab)."""
    output = tmp_path_factory.mktemp("wikitext") / "unmasked"
    with contextlib.redirect_stdout(io.StringIO()):
        lddl_preprocess.main(["--input", str(require_shared("data", "wikitext-2", "wiki.test.raw")),
                              "--vocab-file", str(require_shared("vocab", "bert-uncased-vocab.txt")),
                              "--output-dir", str(output), "--num-shards", "2", "--duplicate-factor", "1",
                              "--num-workers", "1", "--no-masking"])
    return output


def dynamic_masks(loader: PretrainingDataLoader, vocab_file: Path) -> list[tuple[list[str], set[int]]]:
    """(original tokens, masked positions) of every sample of one epoch."""
    tokens_of = {index: token for token, index in vocab_ids(vocab_file).items()}
    masks = []
    for batch in one_epoch(loader):
        for sample in samples(batch):
            original = unmasked(sample)["input_ids"]
            masks.append(([tokens_of[index] for index in original],
                          {position for position, label in enumerate(sample["masked_lm_labels"]) if label >= 0}))
    return masks


@pytest.mark.parametrize("ratio", [0.15, 0.3])
def test_whole_word_masking_masks_whole_words_at_the_ratio(wikitext_unmasked, uncased_vocab, ratio):
    def masks(whole_word_masking: bool) -> list[tuple[list[str], set[int]]]:
        loader = PretrainingDataLoader(str(wikitext_unmasked), str(uncased_vocab), batch_size=64, max_seq_length=128,
                                       max_predictions_per_seq=80, seed=5, masked_lm_ratio=ratio,
                                       whole_word_masking=whole_word_masking)
        return dynamic_masks(loader, uncased_vocab)

    whole, pieces = masks(True), masks(False)
    assert [tokens for tokens, _ in whole] == [tokens for tokens, _ in pieces]  # same samples, other masks
    assert sum(len(partly_masked_words(tokens, masked)) for tokens, masked in pieces) > 100
    assert all(partly_masked_words(tokens, masked) == [] for tokens, masked in whole)
    assert sum(1 for tokens, masked in whole for word in words_of(tokens)
               if len(word) > 1 and masked.issuperset(word)) > 100
    rate = sum(len(masked) for _, masked in whole) / sum(len(tokens) for tokens, _ in whole)
    assert abs(rate - ratio) < 0.005


def test_whole_word_masking_of_a_statically_masked_set_is_refused(uncased_vocab, tmp_path):
    folder = require_shared("data", "lddl-sample", "wikitext2-test-seq128-unbinned")
    with pytest.raises(ValueError, match="the shards are masked statically, so whole_word_masking cannot take effect"):
        PretrainingDataLoader(str(folder), str(uncased_vocab), 8, 128, 20, seed=0, whole_word_masking=True)
    # Shards whose static masks are whole words already: the message must not tell their maker to make them so.
    whole_words = tmp_path / "wwm"
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(require_shared("data", "wikitext-2", "wiki.test.raw").read_bytes()[:100_000])
    with contextlib.redirect_stdout(io.StringIO()):
        lddl_preprocess.main(["--input", str(corpus), "--vocab-file", str(uncased_vocab), "--output-dir",
                              str(whole_words), "--num-shards", "1", "--duplicate-factor", "1", "--num-workers", "1",
                              "--whole-word-masking", "--quiet"])
    with pytest.raises(ValueError) as refusal:
        PretrainingDataLoader(str(whole_words), str(uncased_vocab), 8, 128, 20, seed=0, whole_word_masking=True)
    message = str(refusal.value)
    assert message.startswith(f"{whole_words}: the shards are masked statically") and "\n" not in message
    assert "make them with --whole-word-masking" not in message
    # What they are (masks drawn when they were made, whole words if made so) and what to do (drop the flag, or
    # shards without masks, which the loader masks).
    for part in ("drawn when the shards were made", "by whole words if they were made with --whole-word-masking",
                 "drop whole_word_masking", "lddl_preprocess.py --no-masking"):
        assert part in message, message
    with pytest.raises(ValueError, match=r"masked_lm_ratio 1.5: must be between 0 and 1 \(both excluded\)"):
        PretrainingDataLoader(str(folder), str(uncased_vocab), 8, 128, 20, seed=0, masked_lm_ratio=1.5)


def test_parent_folder_is_refused_with_the_shard_folders_named(uncased_vocab):
    parent = require_shared("data", "lddl-sample")
    with pytest.raises(ValueError, match="wikitext2-test-seq128-bin64, wikitext2-test-seq128-unbinned"):
        PretrainingDataLoader(str(parent), str(uncased_vocab), 8, 128, 20, seed=0)


def test_glob_selects_shard_files(uncased_vocab):
    folder = require_shared("data", "lddl-sample", "wikitext2-test-seq128-unbinned")
    loader = PretrainingDataLoader(str(folder / "shard-[02].parquet"), str(uncased_vocab), 64, 128, 20, seed=0)
    assert [Path(s.path).name for s in loader.shards.bins[0]] == ["shard-0.parquet", "shard-2.parquet"]
    assert loader.num_samples == 2 * 1448


# ---------------------------------------------------------------------------------------------------------------
# Bins and ranks


@pytest.mark.parametrize("world_size", [2, 3])
def test_binned_ranks_draw_the_same_bin_and_cover_the_epoch(world_size, uncased_vocab):
    folder = require_shared("data", "lddl-sample", "wikitext2-test-seq128-bin64")
    all_rows = Counter(key_of(row) for row in expected_rows(folder, uncased_vocab))
    bins_per_rank, seen = [], Counter()
    for rank in range(world_size):
        loader = PretrainingDataLoader(str(folder), str(uncased_vocab), 32, 128, 20, seed=3, rank=rank,
                                       world_size=world_size)
        bins = []
        for batch in one_epoch(loader):
            lengths = batch["attention_mask"].sum(axis=1)
            bin_ids = set(np.minimum((lengths - 1) // 64, 1).tolist())  # the README's binning rule
            assert len(bin_ids) == 1
            bins.append(bin_ids.pop())
            seen.update(key_of(sample) for sample in samples(batch))
        bins_per_rank.append(bins)
    assert all(bins == bins_per_rank[0] for bins in bins_per_rank)
    skipped = 1118 % world_size + 5264 % world_size  # the remainder rule, per bin
    assert not seen - all_rows and sum(seen.values()) == sum(all_rows.values()) - skipped


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_rank_slices_are_disjoint_and_lose_only_the_remainder(world_size, tiny_vocab, tmp_path):
    rows = write_parquet_set(tmp_path / "set", [37, 41, 29, 50])  # 157 rows
    vocab = vocab_ids(tiny_vocab)
    for epoch in range(2):
        numbers, steps = [], set()
        for rank in range(world_size):
            loader = PretrainingDataLoader(str(tmp_path / "set"), str(tiny_vocab), 10, 64, 10, seed=1, rank=rank,
                                           world_size=world_size, shuffle_window_samples=60)
            loader.load_state_dict(loader.state_dict() | {"epoch": epoch})
            steps.add(loader.steps_per_epoch)
            numbers += [n for batch in one_epoch(loader) for n in first_numbers(batch, vocab)]
            assert loader.num_samples == len(rows) // world_size
        assert len(steps) == 1
        assert len(numbers) == len(set(numbers)) == len(rows) - len(rows) % world_size


# ---------------------------------------------------------------------------------------------------------------
# Order, determinism, shuffle windows


def test_order_is_fixed_by_seed_and_epoch(tiny_vocab, tmp_path):
    write_parquet_set(tmp_path / "set", [40, 40, 40])
    vocab = vocab_ids(tiny_vocab)

    def epoch_numbers(seed: int, epochs: int = 2) -> list[list[int]]:
        loader = PretrainingDataLoader(str(tmp_path / "set"), str(tiny_vocab), 16, 64, 10, seed=seed)
        iterator = iter(loader)
        return [[n for _ in range(loader.steps_per_epoch) for n in first_numbers(next(iterator), vocab)]
                for _ in range(epochs)]

    first, again, other_seed = epoch_numbers(5), epoch_numbers(5), epoch_numbers(6)
    assert first == again
    assert first[0] != first[1] and sorted(first[0]) == sorted(first[1]) == list(range(120))
    assert first[0] != other_seed[0]


def test_shuffle_window_bounds_the_mixing(tiny_vocab, tmp_path):
    write_parquet_set(tmp_path / "set", [30, 30, 30, 30])
    vocab = vocab_ids(tiny_vocab)

    def files_per_batch(window: int) -> list[int]:
        loader = PretrainingDataLoader(str(tmp_path / "set"), str(tiny_vocab), 30, 64, 10, seed=2,
                                       shuffle_window_samples=window)
        return [len({n // 30 for n in first_numbers(batch, vocab)}) for batch in one_epoch(loader)]

    assert files_per_batch(1) == [1, 1, 1, 1]  # one file per window: a batch of 30 is one file, shuffled
    assert max(files_per_batch(1000)) > 1


def test_same_seed_gives_identical_batches_and_masks(tiny_vocab, tmp_path):
    write_parquet_set(tmp_path / "set", [25, 25])
    runs = []
    for seed in (4, 4, 9):
        loader = PretrainingDataLoader(str(tmp_path / "set"), str(tiny_vocab), 8, 64, 10, seed=seed)
        runs.append(one_epoch(loader))
    for left, right in zip(runs[0], runs[1], strict=True):
        for key in KEYS:
            np.testing.assert_array_equal(left[key], right[key])
    assert any(not np.array_equal(a["masked_lm_labels"], b["masked_lm_labels"])
               for a, b in zip(runs[0], runs[2], strict=False))


# ---------------------------------------------------------------------------------------------------------------
# Resume and workers


def take(loader: PretrainingDataLoader, count: int) -> list[dict]:
    iterator = iter(loader)
    return [next(iterator) for _ in range(count)]


def assert_same_batches(left: list[dict], right: list[dict]) -> None:
    assert len(left) == len(right)
    for a, b in zip(left, right, strict=True):
        for key in KEYS:
            np.testing.assert_array_equal(a[key], b[key])


@pytest.mark.parametrize("num_workers", [0, 2])
def test_resume_continues_exactly_across_an_epoch_boundary(num_workers, tiny_vocab, tmp_path):
    write_parquet_set(tmp_path / "set", [23, 31, 17], binned_by=12)
    settings = dict(input_dir=str(tmp_path / "set"), vocab_file=str(tiny_vocab), batch_size=6, max_seq_length=48,
                    max_predictions_per_seq=6, seed=11, rank=1, world_size=2, shuffle_window_samples=20)
    reference_loader = PretrainingDataLoader(**settings)
    steps = reference_loader.steps_per_epoch
    reference = take(reference_loader, 2 * steps + 3)
    for consumed in (3, steps, steps + 2):
        first = PretrainingDataLoader(**settings, num_workers=num_workers)
        assert_same_batches(take(first, consumed), reference[:consumed])
        state = json.loads(json.dumps(first.state_dict()))
        assert (state["epoch"], state["step"]) == ((consumed - 1) // steps, (consumed - 1) % steps + 1)
        resumed = PretrainingDataLoader(**settings, num_workers=num_workers)
        resumed.load_state_dict(state)
        assert_same_batches(take(resumed, len(reference) - consumed), reference[consumed:])
        assert resumed.epoch == 2


def test_workers_give_the_serial_output(tiny_vocab, tmp_path):
    write_parquet_set(tmp_path / "set", [40, 33])
    settings = dict(input_dir=str(tmp_path / "set"), vocab_file=str(tiny_vocab), batch_size=7, max_seq_length=48,
                    max_predictions_per_seq=6, seed=3, shuffle_window_samples=30)
    serial = PretrainingDataLoader(**settings)
    count = 2 * serial.steps_per_epoch + 1
    assert_same_batches(take(PretrainingDataLoader(**settings, num_workers=3), count), take(serial, count))


def test_a_dead_worker_is_reported(tiny_vocab, tmp_path, monkeypatch):
    write_parquet_set(tmp_path / "set", [20])
    monkeypatch.setattr(BatchBuilder, "batch", lambda self, epoch, step: os._exit(3))  # runs in the forked worker
    loader = PretrainingDataLoader(str(tmp_path / "set"), str(tiny_vocab), 4, 64, 10, seed=0, num_workers=1)
    with pytest.raises(RuntimeError, match=r"a data loader worker died \(exit code 3\)"):
        take(loader, 1)


def test_state_from_another_order_is_refused(tiny_vocab, tmp_path):
    write_parquet_set(tmp_path / "set", [20, 20])
    saved = PretrainingDataLoader(str(tmp_path / "set"), str(tiny_vocab), 4, 64, 10, seed=1).state_dict()
    other = PretrainingDataLoader(str(tmp_path / "set"), str(tiny_vocab), 4, 64, 10, seed=1, world_size=2)
    with pytest.raises(ValueError, match="world_size=1"):
        other.load_state_dict(saved)


# ---------------------------------------------------------------------------------------------------------------
# HDF5


def write_hdf5(path: Path, input_ids: np.ndarray, segment_ids: np.ndarray, input_mask: np.ndarray,
               masked_lm_positions: np.ndarray, masked_lm_ids: np.ndarray, next_sentence_labels: np.ndarray,
               leave_out: str = "") -> None:
    arrays = dict(input_ids=input_ids, input_mask=input_mask, segment_ids=segment_ids,
                  masked_lm_positions=masked_lm_positions, masked_lm_ids=masked_lm_ids,
                  next_sentence_labels=next_sentence_labels)
    with h5py.File(path, "w") as shard:
        for name, values in arrays.items():
            if name != leave_out:
                shard.create_dataset(name, data=values.astype(np.int32))


def hdf5_rows(count: int, width: int, slots: int, seed: int, first_id: int) -> tuple[list[dict], tuple]:
    """Rows in the Google layout with known contents: [CLS] a [SEP] b [SEP], masks at chosen positions."""
    rng = np.random.default_rng(seed)
    arrays = [np.zeros((count, width), np.int64) for _ in range(3)] + [np.zeros((count, slots), np.int64)
                                                                       for _ in range(2)]
    input_ids, segment_ids, input_mask, positions, masked_ids = arrays
    labels = rng.integers(0, 2, count)
    expected = []
    for row in range(count):
        length_a, length_b = int(rng.integers(1, 8)), int(rng.integers(1, 8))
        length = length_a + length_b + 3
        tokens = [2, first_id + row, *rng.integers(5, 60, length_a - 1).tolist(), 3,
                  *rng.integers(5, 60, length_b).tolist(), 3]
        input_ids[row, :length] = tokens
        segment_ids[row, length_a + 2:length] = 1
        input_mask[row, :length] = 1
        chosen = np.sort(rng.choice(np.arange(2, length_a + 1), size=min(slots, length_a - 1), replace=False))
        positions[row, :chosen.size] = chosen
        masked_ids[row, :chosen.size] = rng.integers(5, 60, chosen.size)
        row_labels = np.full(length, -1)
        row_labels[chosen] = masked_ids[row, :chosen.size]
        expected.append({"input_ids": tokens, "token_type_ids": segment_ids[row, :length].tolist(),
                         "masked_lm_labels": row_labels.tolist(), "next_sentence_labels": int(labels[row])})
    return expected, (input_ids, segment_ids, input_mask, positions, masked_ids, labels)


def test_hdf5_shards_load_with_their_rows(tiny_vocab, tmp_path):
    first, first_arrays = hdf5_rows(13, 24, 3, seed=0, first_id=100)
    second, second_arrays = hdf5_rows(9, 20, 4, seed=1, first_id=200)  # files may differ in S and P
    (tmp_path / "set").mkdir()
    write_hdf5(tmp_path / "set" / "part-0.hdf5", *first_arrays)
    write_hdf5(tmp_path / "set" / "part-1.h5", *second_arrays)
    loader = PretrainingDataLoader(str(tmp_path / "set"), str(tiny_vocab), 5, 24, 4, seed=0)
    assert loader.num_samples == 22 and loader.shards.file_format == "hdf5"
    seen = Counter()
    for batch in one_epoch(loader):
        check_batch_shapes(batch, 24)
        seen.update(key_of(sample) for sample in samples(batch))
    assert seen == Counter(key_of(row) for row in first + second)


def test_hdf5_errors_name_the_file(tiny_vocab, tmp_path):
    _, arrays = hdf5_rows(6, 24, 3, seed=0, first_id=100)
    folder = tmp_path / "set"
    folder.mkdir()
    write_hdf5(folder / "part-0.hdf5", *arrays, leave_out="segment_ids")
    with pytest.raises(ValueError, match=r"part-0.hdf5: missing dataset\(s\) segment_ids"):
        PretrainingDataLoader(str(folder), str(tiny_vocab), 4, 24, 4, seed=0)
    write_hdf5(folder / "part-0.hdf5", *arrays)
    data = (folder / "part-0.hdf5").read_bytes()
    (folder / "part-0.hdf5").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="part-0.hdf5: not a readable HDF5 file"):
        PretrainingDataLoader(str(folder), str(tiny_vocab), 4, 24, 4, seed=0)
    write_hdf5(folder / "part-0.hdf5", *arrays)
    loader = PretrainingDataLoader(str(folder), str(tiny_vocab), 4, 24, 2, seed=0)  # rows carry up to 3 masks
    with pytest.raises(ValueError, match=r"part-0.hdf5: row \d+: 3 masked positions, more than "
                                         "max_predictions_per_seq=2"):
        take(loader, 2)
    small_vocab = tmp_path / "small_vocab.txt"
    small_vocab.write_text("\n".join(tiny_vocab.read_text().split("\n")[:50]))
    with pytest.raises(ValueError, match=r"part-0.hdf5: row \d+: token id \d+ is outside the vocab"):
        take(PretrainingDataLoader(str(folder), str(small_vocab), 4, 24, 4, seed=0), 2)


# ---------------------------------------------------------------------------------------------------------------
# Limits and bad input


def test_limits_are_errors_for_static_sets_and_caps_for_dynamic_ones(uncased_vocab, tiny_vocab, tmp_path):
    folder = require_shared("data", "lddl-sample", "wikitext2-test-seq128-unbinned")
    too_short = PretrainingDataLoader(str(folder), str(uncased_vocab), 8, 100, 20, seed=0)
    with pytest.raises(ValueError, match=r"shard-\d.parquet: row \d+: \d+ tokens, more than max_seq_length=100"):
        take(too_short, 1)
    too_few = PretrainingDataLoader(str(folder), str(uncased_vocab), 8, 128, 10, seed=0)
    with pytest.raises(ValueError, match=r"shard-\d.parquet: row \d+: \d+ masked positions, more than "
                                         "max_predictions_per_seq=10"):
        take(too_few, 1)
    write_parquet_set(tmp_path / "set", [30])
    dynamic = PretrainingDataLoader(str(tmp_path / "set"), str(tiny_vocab), 30, 48, 2, seed=0)
    labels = take(dynamic, 1)[0]["masked_lm_labels"]
    assert ((labels >= 0).sum(axis=1) <= 2).all() and ((labels >= 0).sum(axis=1) == 2).any()


def test_bad_parquet_shards_are_named(tiny_vocab, tmp_path):
    folder = tmp_path / "set"
    write_parquet_set(folder, [10, 10])
    shard = folder / "shard-1.parquet"
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="shard-1.parquet: not a readable parquet file"):
        PretrainingDataLoader(str(folder), str(tiny_vocab), 4, 64, 10, seed=0)
    shard.write_bytes(b"not parquet at all")
    with pytest.raises(ValueError, match="shard-1.parquet: not a readable parquet file"):
        PretrainingDataLoader(str(folder), str(tiny_vocab), 4, 64, 10, seed=0)
    pq.write_table(pq.read_table(folder / "shard-0.parquet").drop_columns(["num_tokens"]), shard)
    with pytest.raises(ValueError, match=r"shard-1.parquet: missing column\(s\) num_tokens"):
        PretrainingDataLoader(str(folder), str(tiny_vocab), 4, 64, 10, seed=0)


def write_rows(path: Path, rows: list[dict]) -> None:
    schema = pa.schema([("A", pa.string()), ("B", pa.string()), ("is_random_next", pa.bool_()),
                        ("num_tokens", pa.uint16())])
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)


def test_single_segment_rows_are_cls_a_sep(tiny_vocab, tmp_path):
    """A row with an empty B (lddl_preprocess --no-nsp) is [CLS] A [SEP] with token types 0; pairs beside it keep
    their layout."""
    vocab = vocab_ids(tiny_vocab)
    single = {"A": "w1 w2 w3", "B": "", "is_random_next": False, "num_tokens": 5}
    pair = {"A": "w4", "B": "w5 w6", "is_random_next": True, "num_tokens": 6}
    write_rows(tmp_path / "set" / "shard-0.parquet", [single, pair])
    loader = PretrainingDataLoader(str(tmp_path / "set"), str(tiny_vocab), 2, 16, 2, seed=0)
    got = sorted((unmasked(sample) for sample in samples(take(loader, 1)[0])), key=lambda row: len(row["input_ids"]))
    ids = [vocab[token] for token in ("[CLS]", "w1", "w2", "w3", "[SEP]")]
    assert got[0] == {"input_ids": ids, "token_type_ids": [0] * 5, "next_sentence_labels": 0}
    ids = [vocab[token] for token in ("[CLS]", "w4", "[SEP]", "w5", "w6", "[SEP]")]
    assert got[1] == {"input_ids": ids, "token_type_ids": [0, 0, 0, 1, 1, 1], "next_sentence_labels": 1}

    write_rows(tmp_path / "long" / "shard-0.parquet", [single | {"num_tokens": 6}, pair])
    loader = PretrainingDataLoader(str(tmp_path / "long"), str(tiny_vocab), 2, 16, 2, seed=0)
    with pytest.raises(ValueError, match=r"shard-0.parquet: row 0: num_tokens is 6 but \[CLS\] A \[SEP\] "
                                         r"\(B is empty\) has 5 tokens"):
        take(loader, 1)
    write_rows(tmp_path / "empty" / "shard-0.parquet", [single | {"A": "", "num_tokens": 2}, pair])
    loader = PretrainingDataLoader(str(tmp_path / "empty"), str(tiny_vocab), 2, 16, 2, seed=0)
    with pytest.raises(ValueError, match="shard-0.parquet: row 0: segment A is empty"):
        take(loader, 1)


def test_a_loader_for_nsp_refuses_a_row_without_segment_b(tiny_vocab, tmp_path):
    """nsp=True (training next-sentence prediction): the first row whose B is empty is an error naming its row."""
    pair = {"A": "w4", "B": "w5 w6", "is_random_next": True, "num_tokens": 6}
    single = {"A": "w1 w2 w3", "B": "", "is_random_next": False, "num_tokens": 5}
    write_rows(tmp_path / "set" / "shard-0.parquet", [pair, pair, single, pair])
    loader = PretrainingDataLoader(str(tmp_path / "set"), str(tiny_vocab), 4, 16, 2, seed=0, nsp=True)
    with pytest.raises(ValueError, match=r"shard-0.parquet: row 2: segment B is empty, a single-segment sample"):
        take(loader, 1)
    assert len(take(PretrainingDataLoader(str(tmp_path / "set"), str(tiny_vocab), 4, 16, 2, seed=0), 1)) == 1
    write_rows(tmp_path / "pairs" / "shard-0.parquet", [pair] * 4)
    pairs = PretrainingDataLoader(str(tmp_path / "pairs"), str(tiny_vocab), 4, 16, 2, seed=0, nsp=True)
    assert take(pairs, 1)[0]["next_sentence_labels"].tolist() == [1, 1, 1, 1]
    with pytest.raises(ValueError, match="nsp=1: must be True or False"):
        PretrainingDataLoader(str(tmp_path / "pairs"), str(tiny_vocab), 4, 16, 2, seed=0, nsp=1)


def test_inconsistent_sets_are_named(uncased_vocab, tiny_vocab, tmp_path):
    folder = tmp_path / "set"
    write_parquet_set(folder, [10, 10])
    (folder / ".num_samples.json").write_text(json.dumps({"shard-0.parquet": 10, "shard-1.parquet": 11}))
    with pytest.raises(ValueError, match=r"\.num_samples\.json: says shard-1.parquet has 11 rows, the file has 10"):
        PretrainingDataLoader(str(folder), str(tiny_vocab), 4, 64, 10, seed=0)
    os.remove(folder / ".num_samples.json")
    static = require_shared("data", "lddl-sample", "wikitext2-test-seq128-unbinned", "shard-0.parquet")
    shutil.copy(static, folder / "shard-2.parquet")
    with pytest.raises(ValueError, match="shard-2.parquet: has masked_lm_positions/masked_lm_labels but .*"
                                         "shard-0.parquet has not"):
        PretrainingDataLoader(str(folder), str(tiny_vocab), 4, 64, 10, seed=0)
    (folder / "shard-2.parquet").unlink()
    with h5py.File(folder / "extra.hdf5", "w"):
        pass
    with pytest.raises(ValueError, match="mixes hdf5 and parquet shards"):
        PretrainingDataLoader(str(folder), str(tiny_vocab), 4, 64, 10, seed=0)


@pytest.mark.parametrize("num_workers", [0, 1])
def test_vocab_that_does_not_match_the_shards_is_named(num_workers, uncased_vocab, tmp_path):
    folder = require_shared("data", "lddl-sample", "wikitext2-test-seq128-unbinned")
    wrong_vocab = tmp_path / "wrong_vocab.txt"
    wrong_vocab.write_text("\n".join(uncased_vocab.read_text(encoding="utf-8").split("\n")[:2000]), encoding="utf-8")
    loader = PretrainingDataLoader(str(folder), str(wrong_vocab), 8, 128, 20, seed=0, num_workers=num_workers)
    with pytest.raises(ValueError, match=r"shard-\d.parquet: row \d+: token '.+' is not in the vocab .*wrong_vocab"):
        take(loader, 1)


def test_missing_inputs_are_named(tiny_vocab, tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere: no such folder"):
        PretrainingDataLoader(str(tmp_path / "nowhere"), str(tiny_vocab), 4, 64, 10, seed=0)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="empty: no shard files"):
        PretrainingDataLoader(str(tmp_path / "empty"), str(tiny_vocab), 4, 64, 10, seed=0)
    write_parquet_set(tmp_path / "set", [3])
    (tmp_path / "no_specials.txt").write_text("[PAD]\n[UNK]\nw0\n")
    with pytest.raises(ValueError, match=r"no_specials.txt: vocab lacks the special token\(s\) \[CLS\] \[SEP\] "
                                         r"\[MASK\]"):
        PretrainingDataLoader(str(tmp_path / "set"), str(tmp_path / "no_specials.txt"), 4, 64, 10, seed=0)
    with pytest.raises(ValueError, match="too few for world_size=4"):
        PretrainingDataLoader(str(tmp_path / "set"), str(tiny_vocab), 4, 64, 10, seed=0, rank=0, world_size=4)


# ---------------------------------------------------------------------------------------------------------------
# The inspection command


def dump(capsys, *arguments: str) -> list[dict]:
    main(list(arguments))
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_dump_prints_samples_as_json_lines(capsys, uncased_vocab):
    folder = require_shared("data", "lddl-sample", "wikitext2-test-seq128-unbinned")
    vocab = vocab_ids(uncased_vocab)
    rows = Counter(key_of(row) for row in expected_rows(folder, uncased_vocab))
    id_to_token = {index: token for token, index in vocab.items()}
    common = ["--input-dir", str(folder), "--vocab-file", str(uncased_vocab)]
    printed = dump(capsys, *common, "--dump", "3")
    assert len(printed) == 3
    for sample in printed:
        assert set(sample) == set(KEYS) | {"tokens"}
        length = sum(sample["attention_mask"])
        assert len(sample["input_ids"]) == -(-length // 8) * 8
        assert sample["tokens"] == [id_to_token[index] for index in sample["input_ids"]]
        assert sample["tokens"][0] == "[CLS]" and sample["tokens"][length - 1] == "[SEP]"
        trimmed = {key: sample[key][:length] for key in ("input_ids", "token_type_ids", "masked_lm_labels")}
        assert rows[key_of(trimmed | {"next_sentence_labels": sample["next_sentence_labels"]})] == 1
    assert dump(capsys, *common, "--dump", "3", "--seed", "12345") == printed  # 12345 is the default
    assert dump(capsys, *common, "--dump", "3", "--seed", "1") != printed
    with pytest.raises(SystemExit, match=r"shard-\d.parquet: row \d+: \d+ tokens, more than max_seq_length=64"):
        main([*common, "--dump", "1", "--max-seq-length", "64"])
    with pytest.raises(SystemExit, match="more than max_predictions_per_seq=5"):
        main([*common, "--dump", "1", "--max-predictions-per-seq", "5"])
    with pytest.raises(SystemExit):
        main([*common, "--dump", "0"])
    assert "--dump 0: must be at least 1" in capsys.readouterr().err


def test_dump_command_line_names_a_bad_folder(tmp_path, tiny_vocab):
    result = subprocess.run([sys.executable, str(ROOT / "pretraining_dataset.py"), "--input-dir",
                             str(tmp_path / "missing"), "--vocab-file", str(tiny_vocab), "--dump", "1"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert_one_line(result.stderr, f"{tmp_path / 'missing'}: ", "no such folder")


# ---------------------------------------------------------------------------------------------------------------
# Round trip with our own preprocessors


def test_our_preprocessors_output_loads_identically_from_parquet_and_hdf5(uncased_vocab, tmp_path):
    """lddl_preprocess.py and create_pretraining_data.py make the same pairs for a seed; both must load as the rows."""
    source = require_shared("data", "lddl-sample", "wikitext2-test-source", "en", "0.txt")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(source.read_text(encoding="utf-8").split("\n")[:6]), encoding="utf-8")
    common = ["--input", str(corpus), "--input-format", "lddl", "--vocab-file", str(uncased_vocab),
              "--num-shards", "3", "--num-workers", "1", "--duplicate-factor", "1", "--seed", "3"]
    with contextlib.redirect_stdout(io.StringIO()):
        lddl_preprocess.main([*common, "--output-dir", str(tmp_path / "pq")])
        create_pretraining_data.main([*common, "--output-dir", str(tmp_path / "h5")])
    loaded = {}
    for name in ("pq", "h5"):
        loader = PretrainingDataLoader(str(tmp_path / name), str(uncased_vocab), 16, 128, 20, seed=0)
        loaded[name] = Counter(key_of(sample) for batch in one_epoch(loader) for sample in samples(batch))
    rows = Counter(key_of(row) for row in expected_rows(tmp_path / "pq", uncased_vocab))
    assert loaded["pq"] == loaded["h5"] == rows and sum(rows.values()) > 100
