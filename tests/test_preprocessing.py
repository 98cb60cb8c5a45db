"""Tests for the preprocessors (lddl_preprocess.py, create_pretraining_data.py) and their pipeline.

Most tests run on a generated corpus and vocab (in tmp_path): every document uses its own words, so a token tells
which document it came from. The LDDL-compatibility tests compare with the real LDDL shards in ../shared.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import create_pretraining_data
import lddl_preprocess
from conftest import ROOT, require_shared
from data_fixtures import documents_held_out, documents_kept, partly_masked_words, words_of
from preprocessing import preprocess_pipeline
from preprocessing.preprocess_pipeline import run_pipeline
from preprocessing.shard_formats import ParquetShards, serialize_positions, write_num_samples

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
SYLLABLES = ["ba", "ke", "li", "mo", "nu", "pa", "re", "si", "to", "vu"]
NUM_DOCUMENTS = 12
WORDS_PER_DOCUMENT = 25


def document_words(document: int) -> list[str]:
    """Document d's own words: three syllables, the first two spelling d (so no two documents share a word)."""
    first, second = divmod(document, len(SYLLABLES))
    return [SYLLABLES[first] + SYLLABLES[second] + SYLLABLES[w % 10] + SYLLABLES[w // 10]
            for w in range(WORDS_PER_DOCUMENT)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, Path]:
    """A vocab and a one-document-per-line corpus of NUM_DOCUMENTS documents of 10-60 sentences."""
    root = tmp_path_factory.mktemp("corpus")
    rng = random.Random(7)
    vocab = SPECIALS + [f"[unused{i}]" for i in range(5)] + [".", ","]
    lines = []
    for document in range(NUM_DOCUMENTS):
        words = document_words(document)
        vocab += words
        sentences = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 14))).capitalize() + "."
                     for _ in range(rng.randint(10, 60))]
        lines.append(" ".join(sentences))
    (root / "vocab.txt").write_text("\n".join(vocab) + "\n")
    (root / "docs.txt").write_text("\n".join(lines) + "\n")
    return {"vocab": root / "vocab.txt", "text": root / "docs.txt"}


def cli_argv(corpus: dict[str, Path], output: Path, *flags: str) -> list[str]:
    """The preprocessors' required flags for the test corpus (two shards), then `flags`, which override them."""
    return ["--input", str(corpus["text"]), "--vocab-file", str(corpus["vocab"]), "--output-dir", str(output),
            "--num-shards", "2", *flags]


def run_cli(module, corpus: dict[str, Path], output: Path, *flags: str, text: Path | None = None) -> dict:
    """module.main with the corpus and small defaults (override any of them with later flags); the summary JSON."""
    argv = ["--input", str(text or corpus["text"]), "--vocab-file", str(corpus["vocab"]), "--output-dir", str(output),
            "--num-shards", "2", "--num-blocks", "2", "--duplicate-factor", "2", "--max-seq-length", "32",
            "--num-workers", "1", *flags]
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        module.main(argv)
    return json.loads(stdout.getvalue().strip().splitlines()[-1])


def shard_paths(folder: Path) -> list[Path]:
    """Shard files in (bin, shard index) order."""
    def order(path: Path) -> tuple[int, int]:
        stem, _, bin_suffix = path.name.partition(".parquet_")
        return int(bin_suffix or 0), int(stem.split("-")[1].split(".")[0])
    return sorted((p for p in folder.iterdir() if p.name.startswith("shard-")), key=order)


def read_rows(folder: Path) -> list[dict]:
    return [row for path in shard_paths(folder) for row in pq.read_table(path).to_pylist()]


def folder_bytes(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


def positions_of(row: dict) -> list[int]:
    return np.load(io.BytesIO(row["masked_lm_positions"])).tolist()


def sequence_of(row: dict) -> list[str]:
    """[CLS] A [SEP] B [SEP], or [CLS] A [SEP] for a single-segment row (empty B)."""
    b_part = [*row["B"].split(), "[SEP]"] if row["B"] else []
    return ["[CLS]", *row["A"].split(), "[SEP]", *b_part]


def owner(token: str) -> int:
    """The document a corpus word belongs to (see document_words)."""
    return SYLLABLES.index(token[:2]) * len(SYLLABLES) + SYLLABLES.index(token[2:4])


def vocab_id(corpus: dict[str, Path], token: str) -> int:
    return corpus["vocab"].read_text().split("\n").index(token)


def documents_in(rows: list[dict]) -> set[int]:
    return {owner(token) for row in rows for token in (row["A"] + " " + row["B"]).split() if token not in ".,"}


# ---------------------------------------------------------------------------------------------- determinism


def run_parquet_pipeline(corpus: dict[str, Path], output: Path, flags: list[str], executor=None, num_workers: int = 1,
                         range_bytes: int | None = None) -> preprocess_pipeline.PipelineResult:
    """What lddl_preprocess.main does with run_cli's defaults and `flags`, on a given engine and read range size."""
    parser = lddl_preprocess.build_parser()
    args = parser.parse_args(["--input", str(corpus["text"]), "--vocab-file", str(corpus["vocab"]), "--output-dir",
                              str(output), "--num-shards", "2", "--num-blocks", "2", "--duplicate-factor", "2",
                              "--max-seq-length", "32", *flags])
    settings = preprocess_pipeline.settings_from_arguments(parser, args, masking=True)
    result = run_pipeline([corpus["text"]], "auto", output, settings, lddl_preprocess.write_parquet_shard,
                          functools.partial(ParquetShards.file_name, binned=False), executor, num_workers,
                          range_bytes=range_bytes,
                          holdout_dir=preprocess_pipeline.holdout_dir_of(args))
    write_num_samples(output, result.training.rows_per_shard)
    if result.holdout is not None:
        write_num_samples(result.holdout.output_dir, result.holdout.rows_per_shard)
    return result


def test_same_seed_same_bytes_whatever_the_workers_engine_or_read_ranges(corpus, tmp_path):
    first = run_cli(lddl_preprocess, corpus, tmp_path / "all")
    run_cli(lddl_preprocess, corpus, tmp_path / "again")
    reseeded = run_cli(lddl_preprocess, corpus, tmp_path / "seed", "--seed", "1")
    assert first["engine"] == "in-process"
    assert folder_bytes(tmp_path / "again") == folder_bytes(tmp_path / "all")
    assert read_rows(tmp_path / "seed") != read_rows(tmp_path / "all") and reseeded["samples"] > 0

    # A process pool, or cutting the corpus into many tiny read ranges, changes nothing, with sampling too.
    sampled_flags = ["--sample-ratio", "0.6", "--seed", "3"]
    sampled = run_cli(lddl_preprocess, corpus, tmp_path / "sampled", *sampled_flags)
    assert sampled["documents"] == len(documents_kept(corpus["text"], 3, 0.6)) < NUM_DOCUMENTS
    held_flags = ["--holdout-fraction", "0.3", "--seed", "3"]
    held = run_cli(lddl_preprocess, corpus, tmp_path / "held", *held_flags)
    assert held["holdout"]["documents"] == len(documents_held_out(corpus["text"], 3, 0.3)) > 0
    with preprocess_pipeline.open_executor(2) as pool:
        for name, flags in [("all", []), ("sampled", sampled_flags), ("held", held_flags)]:
            pooled = run_parquet_pipeline(corpus, tmp_path / f"{name}-pool", flags, pool, 2)
            assert pooled.engine == "ProcessPoolExecutor"
            assert folder_bytes(tmp_path / f"{name}-pool") == folder_bytes(tmp_path / name)
            run_parquet_pipeline(corpus, tmp_path / f"{name}-ranges", flags, range_bytes=97)
            assert folder_bytes(tmp_path / f"{name}-ranges") == folder_bytes(tmp_path / name)
    for copy in ("held-pool", "held-ranges"):
        assert folder_bytes(tmp_path / f"{copy}_holdout") == folder_bytes(tmp_path / "held_holdout")


@pytest.mark.slow  # in the slow tier (tests/conftest.py)
def test_dask_local_cluster_gives_the_process_pool_output(corpus, tmp_path):
    flags = ["--bin-size", "16", "--short-seq-prob", "0.5"]
    run_cli(lddl_preprocess, corpus, tmp_path / "local", *flags)
    summary = run_cli(lddl_preprocess, corpus, tmp_path / "dask", *flags, "--dask", "--num-workers", "2")
    assert summary["engine"] == "ClientExecutor"
    assert folder_bytes(tmp_path / "dask") == folder_bytes(tmp_path / "local")


@pytest.mark.slow  # in the slow tier (tests/conftest.py)
def test_scheduler_address_runs_on_an_existing_cluster(corpus, tmp_path):
    from distributed import LocalCluster

    run_cli(lddl_preprocess, corpus, tmp_path / "local")
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        address = cluster.scheduler_address
        summary = run_cli(lddl_preprocess, corpus, tmp_path / "remote", "--scheduler-address", address)
    assert summary["engine"] == "ClientExecutor"
    assert folder_bytes(tmp_path / "remote") == folder_bytes(tmp_path / "local")


def test_num_workers_sets_the_pool_size(corpus, tmp_path, monkeypatch):
    opened = []
    real_open = preprocess_pipeline.open_executor

    def spy(num_workers, use_dask=False, scheduler_address=None):
        opened.append(num_workers)
        return real_open(1, use_dask, scheduler_address)

    monkeypatch.setattr(preprocess_pipeline, "open_executor", spy)
    run_cli(lddl_preprocess, corpus, tmp_path / "out", "--num-workers", "3")
    assert opened == [3]
    with real_open(3) as pool:
        assert pool._max_workers == 3


# --------------------------------------------------------------------------------------------- sample ratio


def test_flag_sample_ratio_keeps_the_seeded_documents(corpus, tmp_path, capsys):
    expected = documents_kept(corpus["text"], 12345, 0.5)
    assert 0 < len(expected) < NUM_DOCUMENTS  # the seed makes a real choice (it drops 5 of 12)
    summary, rows = rows_of(lddl_preprocess, corpus, tmp_path, "half", "--sample-ratio", "0.5", "--no-masking")
    assert summary["documents"] == len(expected) and documents_in(rows) == expected
    reseeded = documents_kept(corpus["text"], 7, 0.5)
    assert reseeded != expected
    summary, rows = rows_of(lddl_preprocess, corpus, tmp_path, "seed7", "--sample-ratio", "0.5", "--seed", "7",
                            "--no-masking")
    assert summary["documents"] == len(reseeded) and documents_in(rows) == reseeded
    hdf5 = run_cli(create_pretraining_data, corpus, tmp_path / "h5", "--sample-ratio", "0.5")
    assert hdf5["documents"] == len(expected)

    run_cli(lddl_preprocess, corpus, tmp_path / "all")
    everything = run_cli(lddl_preprocess, corpus, tmp_path / "one", "--sample-ratio", "1")
    assert everything["documents"] == NUM_DOCUMENTS
    assert folder_bytes(tmp_path / "one") == folder_bytes(tmp_path / "all")

    message = expect_exit(capsys, lddl_preprocess,
                          cli_argv(corpus, tmp_path / "none", "--num-workers", "1", "--sample-ratio", "1e-9"))
    assert message.endswith("no documents with text found (--sample-ratio 1e-09 kept none)")

# ------------------------------------------------------------------------------------------ held-out documents


def test_flag_holdout_fraction_sets_the_seeded_documents_aside(corpus, tmp_path):
    expected = documents_held_out(corpus["text"], 12345, 0.3)
    assert 0 < len(expected) < NUM_DOCUMENTS  # the seed makes a real choice
    summary = run_cli(lddl_preprocess, corpus, tmp_path / "train", "--holdout-fraction", "0.3", "--no-masking")
    training, held = read_rows(tmp_path / "train"), read_rows(tmp_path / "train_holdout")
    # Every sample, random next segments included, comes from its own set's documents.
    assert documents_in(held) == expected and documents_in(training) == set(range(NUM_DOCUMENTS)) - expected
    assert summary["documents"] == NUM_DOCUMENTS - len(expected)
    reported = summary["holdout"]
    assert (reported["output_dir"], reported["files"], reported["documents"], reported["samples"]) == (
        str(tmp_path / "train_holdout"), 1, len(expected), len(held))
    assert reported["documents_list"] == str(tmp_path / "train_holdout" / "held_out_documents.tsv")
    # ceil(0.3 * 2 shards) = 1 held-out shard, listed in its own .num_samples.json
    assert json.loads((tmp_path / "train_holdout" / ".num_samples.json").read_text()) == {
        "shard-0.parquet": len(held)}

    # --holdout-dir names the folder; --seed changes the choice; sampling first, then holding out of the rest.
    run_cli(lddl_preprocess, corpus, tmp_path / "again", "--holdout-fraction", "0.3", "--no-masking",
            "--holdout-dir", str(tmp_path / "elsewhere"))
    assert folder_bytes(tmp_path / "elsewhere") == folder_bytes(tmp_path / "train_holdout")
    assert folder_bytes(tmp_path / "again") == folder_bytes(tmp_path / "train")
    reseeded = documents_held_out(corpus["text"], 7, 0.3)
    assert reseeded != expected
    run_cli(lddl_preprocess, corpus, tmp_path / "seed7", "--holdout-fraction", "0.3", "--seed", "7", "--no-masking")
    assert documents_in(read_rows(tmp_path / "seed7_holdout")) == reseeded
    kept = documents_kept(corpus["text"], 12345, 0.6)
    run_cli(lddl_preprocess, corpus, tmp_path / "sampled", "--holdout-fraction", "0.3", "--sample-ratio", "0.6",
            "--no-masking")
    assert documents_in(read_rows(tmp_path / "sampled_holdout")) == expected & kept
    assert documents_in(read_rows(tmp_path / "sampled")) == kept - expected

    hdf5 = run_cli(create_pretraining_data, corpus, tmp_path / "h5", "--holdout-fraction", "0.3")
    assert (hdf5["documents"], hdf5["holdout"]["documents"]) == (NUM_DOCUMENTS - len(expected), len(expected))
    assert sorted(p.name for p in (tmp_path / "h5_holdout").iterdir()) == ["held_out_documents.tsv", "shard-0.hdf5"]


def test_the_library_run_as_a_script_says_which_commands_to_run(tmp_path):
    """Issue 46: `python preprocess_pipeline.py --input ...` did nothing and exited 0."""
    result = subprocess.run([sys.executable, "-m", "preprocessing.preprocess_pipeline", "--input", str(tmp_path),
                             "--output-dir", str(tmp_path / "out")], capture_output=True, text=True, timeout=120,
                            cwd=ROOT)
    assert result.returncode == 1 and not (tmp_path / "out").exists()
    assert result.stderr == ("preprocess_pipeline.py is the library behind the preprocessing commands and takes no "
                             "arguments: run lddl_preprocess.py (LDDL's shards) or create_pretraining_data.py "
                             "(NVIDIA's HDF5 files) instead\n")


def test_bad_holdout_flags_name_the_flag(corpus, tmp_path, capsys):
    cases = [(["--holdout-fraction", "1"], "--holdout-fraction 1.0 must be in [0, 1)"),
             (["--holdout-fraction", "-0.1"], "--holdout-fraction -0.1 must be in [0, 1)"),
             (["--holdout-dir", str(tmp_path / "h")], "--holdout-dir needs --holdout-fraction above 0"),
             (["--holdout-fraction", "0.5", "--holdout-dir", str(tmp_path / "out")], "must not be --output-dir"),
             (["--holdout-fraction", "1e-9"], "--holdout-fraction 1e-09: the held-out set gets none of the 12 "
                                              "documents"),
             (["--holdout-fraction", "0.999999"], "--holdout-fraction 0.999999: the training set gets none")]
    for flags, message in cases:
        argv = cli_argv(corpus, tmp_path / "out", "--num-workers", "1", *flags)
        assert message in expect_exit(capsys, lddl_preprocess, argv), flags
    (tmp_path / "full_holdout").mkdir()
    (tmp_path / "full_holdout" / "x").write_text("x")
    argv = cli_argv(corpus, tmp_path / "full", "--num-workers", "1", "--holdout-fraction", "0.3")
    assert "full_holdout: output folder is not empty" in expect_exit(capsys, lddl_preprocess, argv)


# ------------------------------------------------------------------------------------------ LDDL compatibility

LDDL_SAMPLES = {
    "wikitext2-test-seq128-unbinned": [],
    "wikitext2-test-seq128-bin64": ["--bin-size", "64"],
    "wikitext2-test-seq128-unbinned-dynamic": ["--no-masking"],
}


@pytest.fixture(scope="module")
def wikitext_runs(tmp_path_factory) -> dict[str, Path]:
    """Our three LDDL-sample variants, made from the sample's own source with the real vocab."""
    source = require_shared("data", "lddl-sample", "wikitext2-test-source")
    vocab = require_shared("vocab", "bert-uncased-vocab.txt")
    root = tmp_path_factory.mktemp("wikitext")
    runs = {}
    for name, flags in LDDL_SAMPLES.items():
        out = root / name
        with contextlib.redirect_stdout(io.StringIO()):
            lddl_preprocess.main(["--input", str(source), "--vocab-file", str(vocab), "--output-dir", str(out),
                                  "--num-shards", "4", "--num-blocks", "4", "--duplicate-factor", "2",
                                  "--seed", "42", "--num-workers", "1", *flags])
        runs[name] = out
    return runs


@pytest.mark.parametrize("name", LDDL_SAMPLES)
def test_schema_and_layout_match_real_lddl_shards(wikitext_runs, name):
    reference_dir = require_shared("data", "lddl-sample", name)
    ours_dir = wikitext_runs[name]
    assert sorted(p.name for p in ours_dir.iterdir()) == sorted(p.name for p in reference_dir.iterdir())
    for reference_path, ours_path in zip(shard_paths(reference_dir), shard_paths(ours_dir), strict=True):
        reference, ours = pq.ParquetFile(reference_path), pq.ParquetFile(ours_path)
        assert ours.schema_arrow.equals(reference.schema_arrow, check_metadata=False)
        reference_pandas = json.loads(reference.schema_arrow.metadata[b"pandas"])
        ours_pandas = json.loads(ours.schema_arrow.metadata[b"pandas"])
        for key in ("index_columns", "column_indexes", "columns"):
            assert ours_pandas[key] == reference_pandas[key]
        assert ours.metadata.num_row_groups == reference.metadata.num_row_groups == 1
        assert ours.metadata.row_group(0).column(0).compression == "SNAPPY"
    counts = json.loads((ours_dir / ".num_samples.json").read_text())
    assert counts == {p.name: pq.read_metadata(p).num_rows for p in shard_paths(ours_dir)}


def test_statistics_match_real_lddl(wikitext_runs):
    """Same corpus and settings: NSP rate, length distribution and mask counts agree with LDDL's files."""
    for name in ("wikitext2-test-seq128-unbinned", "wikitext2-test-seq128-unbinned-dynamic"):
        reference = read_rows(require_shared("data", "lddl-sample", name))
        ours = read_rows(wikitext_runs[name])
        assert abs(len(ours) - len(reference)) / len(reference) < 0.1
        for rows in (reference, ours):
            assert 0.5 <= np.mean([row["is_random_next"] for row in rows]) <= 0.6
        lengths = {key: np.array([row["num_tokens"] for row in rows]) for key, rows in
                   (("reference", reference), ("ours", ours))}
        assert abs(lengths["ours"].mean() - lengths["reference"].mean()) < 5
        assert abs(np.mean(lengths["ours"] == 128) - np.mean(lengths["reference"] == 128)) < 0.1
        assert abs(np.mean(lengths["ours"] <= 64) - np.mean(lengths["reference"] <= 64)) < 0.05
    for rows in (read_rows(require_shared("data", "lddl-sample", "wikitext2-test-seq128-unbinned")),
                 read_rows(wikitext_runs["wikitext2-test-seq128-unbinned"])):
        for row in rows:
            assert len(positions_of(row)) == max(1, round(0.15 * row["num_tokens"]))


def test_masked_lm_positions_are_numpy_save_bytes(wikitext_runs):
    reference_row = read_rows(require_shared("data", "lddl-sample", "wikitext2-test-seq128-unbinned"))[0]
    positions = np.load(io.BytesIO(reference_row["masked_lm_positions"]))
    assert serialize_positions(positions) == reference_row["masked_lm_positions"]
    ours_row = read_rows(wikitext_runs["wikitext2-test-seq128-unbinned"])[0]
    buffer = io.BytesIO()
    np.save(buffer, np.load(io.BytesIO(ours_row["masked_lm_positions"])))
    assert buffer.getvalue() == ours_row["masked_lm_positions"]


# -------------------------------------------------------------------------------------- pair and mask rules


def test_static_masking_rule(corpus, tmp_path):
    """Masking and no masking share the pair RNG, so the unmasked run shows the original tokens."""
    run_cli(lddl_preprocess, corpus, tmp_path / "masked", "--max-seq-length", "64")
    run_cli(lddl_preprocess, corpus, tmp_path / "plain", "--max-seq-length", "64", "--no-masking")
    masked_rows, plain_rows = read_rows(tmp_path / "masked"), read_rows(tmp_path / "plain")
    assert len(masked_rows) == len(plain_rows) > 200
    vocab = corpus["vocab"].read_text().split("\n")
    actions = Counter()
    for masked, plain in zip(masked_rows, plain_rows, strict=True):
        assert (masked["is_random_next"], masked["num_tokens"]) == (plain["is_random_next"], plain["num_tokens"])
        positions = positions_of(masked)
        masked_tokens, plain_tokens = sequence_of(masked), sequence_of(plain)
        assert len(masked_tokens) == len(plain_tokens) == masked["num_tokens"]
        assert positions == sorted(set(positions))
        assert len(positions) == max(1, round(0.15 * masked["num_tokens"]))
        assert not {0, len(plain["A"].split()) + 1, masked["num_tokens"] - 1} & set(positions)
        assert masked["masked_lm_labels"].split() == [plain_tokens[p] for p in positions]
        for index, (m, p) in enumerate(zip(masked_tokens, plain_tokens, strict=True)):
            if index not in positions:
                assert m == p
            else:
                actions["mask" if m == "[MASK]" else "keep" if m == p else "random"] += 1
                assert m in vocab
    total = sum(actions.values())
    assert abs(actions["mask"] / total - 0.8) < 0.03
    assert abs(actions["keep"] / total - 0.1) < 0.03 and abs(actions["random"] / total - 0.1) < 0.03


def test_pairs_follow_nsp_rules_on_the_corpus(corpus, tmp_path):
    run_cli(lddl_preprocess, corpus, tmp_path / "out", "--no-masking", "--num-blocks", "1")
    rows = read_rows(tmp_path / "out")
    for row in rows:
        a_words = [t for t in row["A"].split() if t not in (".", ",")]
        b_words = [t for t in row["B"].split() if t not in (".", ",")]
        assert row["num_tokens"] == len(row["A"].split()) + len(row["B"].split()) + 3 <= 32
        if a_words and b_words:
            assert len({owner(t) for t in a_words}) == 1
            assert (owner(a_words[0]) != owner(b_words[0])) == row["is_random_next"]
    assert 0.45 < np.mean([row["is_random_next"] for row in rows]) < 0.65


def test_no_nsp_packs_whole_sentences_of_one_document(corpus, tmp_path):
    """RoBERTa's DOC-SENTENCES: each sample is B-less, at most 32 tokens, whole sentences of one document; a
    document's samples, in text order, tile it exactly, and each is cut only where the next sentence would not fit."""
    summary, rows = rows_of(lddl_preprocess, corpus, tmp_path, "single", "--no-nsp", "--no-masking",
                            "--duplicate-factor", "1")
    assert summary["random_next_fraction"] == 0 and len(rows) > 50
    documents = [" ".join(line.lower().replace(".", " .").split()).split(" ")
                 for line in corpus["text"].read_text().splitlines()]
    by_document: dict[int, list[list[str]]] = {}
    for row in rows:
        assert row["B"] == "" and row["is_random_next"] is False
        tokens = row["A"].split(" ")
        assert row["num_tokens"] == len(tokens) + 2 <= 32 and tokens[-1] == "."
        assert len({owner(token) for token in tokens if token not in ".,"}) == 1
        by_document.setdefault(owner(tokens[0]), []).append(tokens)
    assert sorted(by_document) == list(range(NUM_DOCUMENTS))
    for document, samples in by_document.items():
        text = documents[document]
        starts = {}
        for sample in samples:
            start = next(i for i in range(len(text)) if text[i:i + len(sample)] == sample
                         and (i == 0 or text[i - 1] == "."))
            starts[start] = sample
        ordered = [starts[start] for start in sorted(starts)]
        assert [token for sample in ordered for token in sample] == text
        for sample, following in zip(ordered, ordered[1:], strict=False):
            next_sentence = following[:following.index(".") + 1]
            assert len(sample) + len(next_sentence) > 30


def test_no_nsp_needs_no_short_seq_prob(corpus, tmp_path, capsys):
    message = expect_exit(capsys, lddl_preprocess, cli_argv(corpus, tmp_path / "out", "--no-nsp",
                                                            "--short-seq-prob", "0.2"))
    assert message.endswith("--short-seq-prob shortens NSP pairs; --no-nsp samples are packed full (RoBERTa)")


def test_binning_and_balancing(corpus, tmp_path):
    flags = ["--num-shards", "3", "--short-seq-prob", "0.5"]
    run_cli(lddl_preprocess, corpus, tmp_path / "binned", "--bin-size", "16", *flags)
    run_cli(lddl_preprocess, corpus, tmp_path / "unbinned", *flags)
    binned = tmp_path / "binned"
    counts = json.loads((binned / ".num_samples.json").read_text())
    assert set(counts) == {f"shard-{i}.parquet_{b}" for i in range(3) for b in range(2)}
    for bin_index in range(2):
        sizes = []
        for shard in range(3):
            table = pq.read_table(binned / f"shard-{shard}.parquet_{bin_index}")
            assert counts[f"shard-{shard}.parquet_{bin_index}"] == table.num_rows
            sizes.append(table.num_rows)
            for row in table.to_pylist():
                assert row["bin_id"] == bin_index == min((row["num_tokens"] - 1) // 16, 1)
        assert max(sizes) - min(sizes) <= 1
    unbinned_sizes = json.loads((tmp_path / "unbinned" / ".num_samples.json").read_text()).values()
    assert max(unbinned_sizes) - min(unbinned_sizes) <= 1
    # Binning only regroups: the same pairs, masks included.
    strip = [{k: v for k, v in row.items() if k != "bin_id"} for row in read_rows(binned)]
    assert Counter(repr(sorted(row.items())) for row in strip) == Counter(
        repr(sorted(row.items())) for row in read_rows(tmp_path / "unbinned"))


# --------------------------------------------------------------------------------------------------- HDF5


def decode_hdf5(path: Path) -> dict[str, np.ndarray]:
    with h5py.File(path) as file:
        return {name: file[name][...] for name in file}


def test_hdf5_layout_and_agreement_with_parquet(corpus, tmp_path):
    run_cli(create_pretraining_data, corpus, tmp_path / "h5", "--max-predictions-per-seq", "40")
    run_cli(lddl_preprocess, corpus, tmp_path / "pq")
    vocab = corpus["vocab"].read_text().split("\n")
    rows = read_rows(tmp_path / "pq")
    decoded = [decode_hdf5(tmp_path / "h5" / f"shard-{i}.hdf5") for i in range(2)]
    for data in decoded:
        assert {name: (str(array.dtype), array.shape[1:]) for name, array in data.items()} == {
            "input_ids": ("int32", (32,)), "input_mask": ("int8", (32,)), "segment_ids": ("int8", (32,)),
            "masked_lm_positions": ("int32", (40,)), "masked_lm_ids": ("int32", (40,)),
            "next_sentence_labels": ("int8", ())}
    with h5py.File(tmp_path / "h5" / "shard-0.hdf5") as file:
        assert all(file[name].compression == "gzip" for name in file)
    assert sum(len(data["input_ids"]) for data in decoded) == len(rows)
    row_iter = iter(rows)
    for data in decoded:
        for i in range(len(data["input_ids"])):
            row = next(row_iter)
            length = row["num_tokens"]
            tokens = [vocab[t] for t in data["input_ids"][i]]
            assert tokens[:length] == sequence_of(row) and not data["input_ids"][i][length:].any()
            assert data["input_mask"][i].tolist() == [1] * length + [0] * (32 - length)
            a_end = len(row["A"].split()) + 2
            assert data["segment_ids"][i].tolist() == [0] * a_end + [1] * (length - a_end) + [0] * (32 - length)
            k = len(positions_of(row))
            assert data["masked_lm_positions"][i].tolist() == positions_of(row) + [0] * (40 - k)
            assert [vocab[t] for t in data["masked_lm_ids"][i][:k]] == row["masked_lm_labels"].split()
            assert not data["masked_lm_ids"][i][k:].any()
            assert data["next_sentence_labels"][i] == int(row["is_random_next"])


def test_hdf5_files_are_identical_for_a_seed(corpus, tmp_path):
    run_cli(create_pretraining_data, corpus, tmp_path / "a")
    run_cli(create_pretraining_data, corpus, tmp_path / "b")
    run_cli(create_pretraining_data, corpus, tmp_path / "c", "--seed", "2")
    assert folder_bytes(tmp_path / "a") == folder_bytes(tmp_path / "b")
    assert decode_hdf5(tmp_path / "a" / "shard-0.hdf5")["input_ids"].tolist() != decode_hdf5(
        tmp_path / "c" / "shard-0.hdf5")["input_ids"].tolist()


def test_hdf5_contents_come_from_the_text(corpus, tmp_path):
    """Undo the masking and every A and every B is a run of consecutive tokens of one corpus document."""
    run_cli(create_pretraining_data, corpus, tmp_path / "h5")
    vocab = corpus["vocab"].read_text().split("\n")
    document_text = [" " + " ".join(line.lower().replace(".", " .").split()) + " "
                     for line in corpus["text"].read_text().splitlines()]
    for shard in range(2):
        data = decode_hdf5(tmp_path / "h5" / f"shard-{shard}.hdf5")
        for i in range(len(data["input_ids"])):
            ids = data["input_ids"][i].copy()
            count = int((data["masked_lm_positions"][i] > 0).sum())
            ids[data["masked_lm_positions"][i][:count]] = data["masked_lm_ids"][i][:count]
            tokens = [vocab[t] for t in ids[:int(data["input_mask"][i].sum())]]
            separator = tokens.index("[SEP]")
            for segment in (tokens[1:separator], tokens[separator + 1:-1]):
                assert any(" " + " ".join(segment) + " " in text for text in document_text)


def test_max_predictions_per_seq_caps_the_masks(corpus, tmp_path):
    run_cli(create_pretraining_data, corpus, tmp_path / "h5", "--max-predictions-per-seq", "3")
    for shard in range(2):
        data = decode_hdf5(tmp_path / "h5" / f"shard-{shard}.hdf5")
        assert data["masked_lm_positions"].shape[1] == 3
        lengths = data["input_mask"].sum(axis=1)
        counts = (data["masked_lm_positions"] > 0).sum(axis=1)
        assert (counts == np.minimum(3, np.maximum(1, np.rint(0.15 * lengths)))).all()


# --------------------------------------------------------------------------------------- every flag acts


def rows_of(module, corpus, tmp_path, name, *flags, text=None):
    summary = run_cli(module, corpus, tmp_path / name, *flags, text=text)
    return summary, read_rows(tmp_path / name) if module is lddl_preprocess else None


def test_flag_input_takes_several_corpora_and_input_format(corpus, tmp_path):
    wikitext = tmp_path / "extra.txt"
    wikitext.write_text(" = Title = \n Bakeli bakeli .\n = Other = \n Bakeli bakeli .\n")
    one, _ = rows_of(lddl_preprocess, corpus, tmp_path, "one")
    two = run_cli(lddl_preprocess, corpus, tmp_path / "two", "--input", str(corpus["text"]), str(wikitext))
    assert two["documents"] == one["documents"] + 2
    as_lines = run_cli(lddl_preprocess, corpus, tmp_path / "lines", "--input", str(wikitext),
                       "--input-format", "lines", "--num-shards", "1")
    as_wikitext = run_cli(lddl_preprocess, corpus, tmp_path / "wikitext", "--input", str(wikitext),
                          "--num-shards", "1")
    assert (as_lines["documents"], as_wikitext["documents"]) == (4, 2)


def test_flag_vocab_file_and_lower_case(corpus, tmp_path):
    _, rows = rows_of(lddl_preprocess, corpus, tmp_path, "lower", "--no-masking")
    assert "[UNK]" not in " ".join(row["A"] + row["B"] for row in rows)
    with pytest.warns(UserWarning, match="looks uncased"):
        _, cased = rows_of(lddl_preprocess, corpus, tmp_path, "cased", "--no-masking", "--no-lower-case")
    # Sentences start with a capital, which the lowercase vocab lacks.
    assert sum((row["A"] + " " + row["B"]).split().count("[UNK]") for row in cased) > len(cased) // 2
    smaller = tmp_path / "smaller-vocab.txt"
    smaller.write_text("\n".join(w for w in corpus["vocab"].read_text().split("\n") if not w.startswith("bab")))
    _, unknown = rows_of(lddl_preprocess, {**corpus, "vocab": smaller}, tmp_path, "smaller", "--no-masking")
    assert any("[UNK]" in row["A"] + row["B"] for row in unknown)


def test_flag_max_seq_length_short_seq_prob_and_duplicate_factor(corpus, tmp_path):
    _, base = rows_of(lddl_preprocess, corpus, tmp_path, "base", "--short-seq-prob", "0")
    _, longer = rows_of(lddl_preprocess, corpus, tmp_path, "long", "--short-seq-prob", "0", "--max-seq-length", "48")
    assert max(r["num_tokens"] for r in base) == 32 and max(r["num_tokens"] for r in longer) == 48
    _, short = rows_of(lddl_preprocess, corpus, tmp_path, "short", "--short-seq-prob", "1")
    assert np.mean([r["num_tokens"] for r in short]) < np.mean([r["num_tokens"] for r in base]) - 4
    _, tripled = rows_of(lddl_preprocess, corpus, tmp_path, "triple", "--short-seq-prob", "0",
                         "--duplicate-factor", "6")
    assert 2.6 < len(tripled) / len(base) < 3.4


def test_flag_masked_lm_ratio_and_prob(corpus, tmp_path):
    _, rows = rows_of(lddl_preprocess, corpus, tmp_path, "pq", "--masked-lm-ratio", "0.3")
    assert all(len(positions_of(r)) == max(1, round(0.3 * r["num_tokens"])) for r in rows)
    run_cli(create_pretraining_data, corpus, tmp_path / "h5", "--masked-lm-prob", "0.3")
    data = decode_hdf5(tmp_path / "h5" / "shard-0.hdf5")
    counts = (data["masked_lm_positions"] > 0).sum(axis=1)
    assert (counts == np.maximum(1, np.rint(0.3 * data["input_mask"].sum(axis=1)))).all()


def test_masked_lm_ratio_is_one_flag_with_googles_name_as_alias(corpus, tmp_path):
    run_cli(create_pretraining_data, corpus, tmp_path / "ratio", "--masked-lm-ratio", "0.3")
    run_cli(create_pretraining_data, corpus, tmp_path / "prob", "--masked-lm-prob", "0.3")
    run_cli(create_pretraining_data, corpus, tmp_path / "default")
    assert folder_bytes(tmp_path / "ratio") == folder_bytes(tmp_path / "prob") != folder_bytes(tmp_path / "default")


# ----------------------------------------------------------------------------------------- whole-word masking


def wikitext_shards(tmp_path: Path, module, name: str, *flags: str) -> Path:
    """Shards of WikiText-2's test split with the real uncased vocab (one duplicate, two shards)."""
    output = tmp_path / name
    with contextlib.redirect_stdout(io.StringIO()):
        module.main(["--input", str(require_shared("data", "wikitext-2", "wiki.test.raw")),
                     "--vocab-file", str(require_shared("vocab", "bert-uncased-vocab.txt")), "--output-dir",
                     str(output), "--num-shards", "2", "--num-blocks", "2", "--duplicate-factor", "1",
                     "--num-workers", "1", "--seed", "5", *flags])
    return output


def parquet_masks(folder: Path) -> list[tuple[list[str], set[int]]]:
    """(original tokens of [CLS] A [SEP] B [SEP], masked positions) of every row of a parquet set."""
    samples = []
    for row in read_rows(folder):
        tokens, positions = sequence_of(row), positions_of(row)
        for position, label in zip(positions, row["masked_lm_labels"].split(), strict=True):
            tokens[position] = label
        samples.append((tokens, set(positions)))
    return samples


def hdf5_masks(folder: Path) -> list[tuple[list[str], set[int]]]:
    """(original tokens, masked positions) of every row of an HDF5 set, read through the uncased vocab."""
    vocab = require_shared("vocab", "bert-uncased-vocab.txt").read_text(encoding="utf-8").split("\n")
    samples = []
    for path in sorted(folder.iterdir()):
        data = decode_hdf5(path)
        for i in range(len(data["input_ids"])):
            ids = data["input_ids"][i][:int(data["input_mask"][i].sum())].copy()
            count = int((data["masked_lm_positions"][i] > 0).sum())
            ids[data["masked_lm_positions"][i][:count]] = data["masked_lm_ids"][i][:count]
            samples.append(([vocab[t] for t in ids], set(data["masked_lm_positions"][i][:count].tolist())))
    return samples


@pytest.mark.parametrize("ratio", ["0.15", "0.3"])
@pytest.mark.parametrize("module, read_masks, flags", [
    (lddl_preprocess, parquet_masks, []),
    (create_pretraining_data, hdf5_masks, ["--max-predictions-per-seq", "80"]),
])
def test_whole_word_masking_masks_whole_words_at_the_ratio(tmp_path, module, read_masks, flags, ratio):
    whole = read_masks(wikitext_shards(tmp_path, module, "whole", "--masked-lm-ratio", ratio, "--whole-word-masking",
                                       *flags))
    pieces = read_masks(wikitext_shards(tmp_path, module, "pieces", "--masked-lm-ratio", ratio, *flags))
    assert [tokens for tokens, _ in whole] == [tokens for tokens, _ in pieces]  # the flag changes only the masks
    assert sum(len(partly_masked_words(tokens, masked)) for tokens, masked in pieces) > 100
    assert all(partly_masked_words(tokens, masked) == [] for tokens, masked in whole)
    masked_long_words = sum(1 for tokens, masked in whole for word in words_of(tokens)
                            if len(word) > 1 and masked.issuperset(word))
    assert masked_long_words > 100
    rate = sum(len(masked) for _, masked in whole) / sum(len(tokens) for tokens, _ in whole)
    assert abs(rate - float(ratio)) < 0.005


def test_whole_word_masking_needs_static_masking(corpus, tmp_path, capsys):
    for flags in (["--whole-word-masking"], ["--masked-lm-ratio", "0.3"]):
        message = expect_exit(capsys, lddl_preprocess, cli_argv(corpus, tmp_path / "out", "--no-masking", *flags))
        assert f"{flags[0]} set static masking, which --no-masking turns off" in message


def test_flag_num_blocks_keeps_random_next_inside_a_partition(corpus, tmp_path):
    # With far more partitions than documents every document is alone: no random next is possible.
    alone = run_cli(lddl_preprocess, corpus, tmp_path / "alone", "--num-blocks", "5000")
    together = run_cli(lddl_preprocess, corpus, tmp_path / "together", "--num-blocks", "1")
    assert alone["random_next_fraction"] < 0.1 < 0.4 < together["random_next_fraction"]


def test_flag_num_shards_and_output_dir(corpus, tmp_path):
    summary = run_cli(lddl_preprocess, corpus, tmp_path / "five", "--num-shards", "5")
    assert summary["files"] == 5
    assert sorted(p.name for p in (tmp_path / "five").iterdir()) == [".num_samples.json"] + [
        f"shard-{i}.parquet" for i in range(5)]
    run_cli(create_pretraining_data, corpus, tmp_path / "h5", "--num-shards", "3")
    assert sorted(p.name for p in (tmp_path / "h5").iterdir()) == [f"shard-{i}.hdf5" for i in range(3)]


# ---------------------------------------------------------------------------------------------- bad input


def expect_exit(capsys, module, argv) -> str:
    with pytest.raises(SystemExit) as raised:
        module.main(argv)
    message = str(raised.value.code) if raised.value.code not in (0, 2) else capsys.readouterr().err.strip()
    last = message.splitlines()[-1]
    return last


@pytest.mark.parametrize("module", [lddl_preprocess, create_pretraining_data])
@pytest.mark.parametrize("flag, value, message", [
    ("--max-seq-length", "4", "--max-seq-length 4"),
    ("--short-seq-prob", "1.5", "--short-seq-prob 1.5"),
    ("--duplicate-factor", "0", "--duplicate-factor 0"),
    ("--seed", "-1", "--seed -1"),
    ("--sample-ratio", "0", "--sample-ratio 0.0 must be in (0, 1]"),
    ("--sample-ratio", "1.5", "--sample-ratio 1.5 must be in (0, 1]"),
    ("--num-blocks", "0", "--num-blocks 0"),
    ("--num-shards", "0", "--num-shards 0"),
    ("--num-workers", "0", "--num-workers 0"),
    ("--input-format", "xml", "--input-format"),
    ("--vocab-file", "/no/such/vocab.txt", "/no/such/vocab.txt"),
    ("--input", "/no/such/corpus", "/no/such/corpus"),
    ("--scheduler-address", "tcp://127.0.0.1:1", "--scheduler-address"),
])
def test_bad_flag_values_name_the_flag(corpus, tmp_path, capsys, module, flag, value, message):
    extra = ["--dask"] if flag == "--scheduler-address" else []
    assert message in expect_exit(capsys, module, cli_argv(corpus, tmp_path / "out", flag, value, *extra))


@pytest.mark.parametrize("module, flag, value", [
    (lddl_preprocess, "--bin-size", "5"), (lddl_preprocess, "--bin-size", "0"),
    (lddl_preprocess, "--masked-lm-ratio", "0"), (create_pretraining_data, "--masked-lm-ratio", "1.5"),
    # 1 would mask every token; run_pretraining.py and the loader refuse it too (masking.check_masked_lm_ratio)
    (lddl_preprocess, "--masked-lm-ratio", "1"),
    (create_pretraining_data, "--max-predictions-per-seq", "0")])
def test_bad_writer_flags(corpus, tmp_path, capsys, module, flag, value):
    assert f"{flag} {value}" in expect_exit(capsys, module, cli_argv(corpus, tmp_path / "out", flag, value))
    if flag == "--masked-lm-ratio":  # Google's spelling is the same flag
        argv = cli_argv(corpus, tmp_path / "out", "--masked-lm-prob", value)
        assert f"--masked-lm-ratio {float(value)}" in expect_exit(capsys, create_pretraining_data, argv)


def test_bad_vocab_names_the_file(corpus, tmp_path, capsys):
    empty = tmp_path / "empty-vocab.txt"
    empty.write_text("")
    lacking = tmp_path / "no-mask-vocab.txt"
    lacking.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nword\n")
    for vocab, message in ((empty, "vocab file is empty"), (lacking, "vocab lacks the special token(s) [MASK]")):
        argv = ["--input", str(corpus["text"]), "--vocab-file", str(vocab), "--output-dir", str(tmp_path / "o"),
                "--num-shards", "1"]
        assert f"--vocab-file {vocab}: {message}" in expect_exit(capsys, lddl_preprocess, argv)


def test_bad_corpora_give_one_line_errors_naming_the_file(corpus, tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    blank = tmp_path / "blank.txt"
    blank.write_text("\n  \n")
    binary = tmp_path / "binary.txt"
    binary.write_bytes(b"fine\n\xc3\x28 broken\n")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    cases = [(empty, "empty.txt: corpus has no non-empty files"), (blank, "blank.txt: no documents with text"),
             (binary, "binary.txt: line 2, byte 5: not UTF-8")]
    for path, message in cases:
        argv = ["--input", str(path), "--vocab-file", str(corpus["vocab"]), "--output-dir", str(tmp_path / "o"),
                "--num-shards", "1", "--num-workers", "1"]
        last = expect_exit(capsys, lddl_preprocess, argv)
        assert message in last and "\n" not in last
    argv = ["--input", str(corpus["text"]), "--vocab-file", str(corpus["vocab"]), "--output-dir",
            str(tmp_path / "full"), "--num-shards", "1", "--num-workers", "1"]
    assert "full: output folder is not empty" in expect_exit(capsys, lddl_preprocess, argv)


def test_unreadable_shard_input_is_reported_through_the_pool(corpus, tmp_path, capsys):
    binary = tmp_path / "binary.txt"
    binary.write_bytes(b"\xff" * 10)
    argv = ["--input", str(corpus["text"]), str(binary), "--vocab-file", str(corpus["vocab"]), "--output-dir",
            str(tmp_path / "o"), "--num-shards", "1", "--num-workers", "2"]
    assert "binary.txt: line 1, byte 0: not UTF-8" in expect_exit(capsys, create_pretraining_data, argv)


def test_arrow_table_reads_back_with_lddl_types(corpus, tmp_path):
    run_cli(lddl_preprocess, corpus, tmp_path / "out", "--bin-size", "16", "--short-seq-prob", "0.5")
    table = pq.read_table(shard_paths(tmp_path / "out")[0])
    assert table.schema.names == ["A", "B", "is_random_next", "num_tokens", "masked_lm_positions",
                                  "masked_lm_labels", "bin_id"]
    assert [table.schema.field(n).type for n in table.schema.names] == [
        pa.string(), pa.string(), pa.bool_(), pa.uint16(), pa.binary(), pa.string(), pa.int64()]


# ------------------------------------------------------------------------------------------- training loader


@pytest.mark.parametrize("module, flags", [
    (lddl_preprocess, []),
    (lddl_preprocess, ["--no-masking", "--bin-size", "16", "--short-seq-prob", "0.5"]),
    (lddl_preprocess, ["--no-nsp", "--whole-word-masking"]),
    (lddl_preprocess, ["--no-nsp", "--no-masking", "--bin-size", "16"]),
    (create_pretraining_data, ["--max-predictions-per-seq", "8"]),
])
def test_our_shards_load_in_the_training_loader(corpus, tmp_path, module, flags):
    from pretraining_dataset import PretrainingDataLoader

    run_cli(module, corpus, tmp_path / "out", *flags)
    loader = PretrainingDataLoader(str(tmp_path / "out"), str(corpus["vocab"]), batch_size=16, max_seq_length=32,
                                   max_predictions_per_seq=8, seed=0)
    served = Counter()
    for _, batch in zip(range(loader.steps_per_epoch), loader, strict=False):
        if "--no-nsp" in flags:  # [CLS] A [SEP]: one segment, one [SEP] at the end, never masked
            lengths = batch["attention_mask"].sum(axis=1)
            assert not batch["token_type_ids"].any() and not batch["next_sentence_labels"].any()
            sep = batch["input_ids"] == vocab_id(corpus, "[SEP]")
            assert (sep.sum(axis=1) == 1).all() and sep[np.arange(len(lengths)), lengths - 1].all()
            assert (batch["masked_lm_labels"][np.arange(len(lengths)), lengths - 1] == -1).all()
        for ids, mask, labels, nsp in zip(batch["input_ids"], batch["attention_mask"], batch["masked_lm_labels"],
                                          batch["next_sentence_labels"], strict=True):
            length = int(mask.sum())
            original = np.where(labels[:length] >= 0, labels[:length], ids[:length])
            served[(tuple(original.tolist()), int(nsp))] += 1
    vocab = {token: index for index, token in enumerate(corpus["vocab"].read_text().split("\n"))}
    if module is create_pretraining_data:
        written = Counter()
        for path in sorted((tmp_path / "out").iterdir()):
            data = decode_hdf5(path)
            for i in range(len(data["input_ids"])):
                ids = data["input_ids"][i][:int(data["input_mask"][i].sum())].copy()
                count = int((data["masked_lm_positions"][i] > 0).sum())
                ids[data["masked_lm_positions"][i][:count]] = data["masked_lm_ids"][i][:count]
                written[(tuple(ids.tolist()), int(data["next_sentence_labels"][i]))] += 1
    else:
        written = Counter()
        for row in read_rows(tmp_path / "out"):
            tokens = sequence_of(row)
            if "masked_lm_positions" in row:
                for position, label in zip(positions_of(row), row["masked_lm_labels"].split(), strict=True):
                    tokens[position] = label
            written[(tuple(vocab[t] for t in tokens), int(row["is_random_next"]))] += 1
    assert served == written
