"""Tests for data/create_datasets_from_start.sh in local-corpus mode (download mode needs a network)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

from conftest import ROOT, require_shared
from helpers import documents_kept

SCRIPT = ROOT / "data" / "create_datasets_from_start.sh"
# NVIDIA's layout under BERT_PREP_WORKING_DIR, as scripts/run_pretraining.sh and run.sub read it.
PHASE1 = Path("pretrain", "phase1", "unbinned", "parquet")
PHASE2 = Path("pretrain", "phase2", "bin_size_64", "parquet")
SOURCE = Path("wikipedia", "source", "en", "0.txt")


def run_script(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "PYTHON": sys.executable,
                               **env})


def summaries(result: subprocess.CompletedProcess) -> list[dict]:
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def folder_bytes(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def test_builds_nvidias_layout_from_wikitext(tmp_path):
    wikitext = require_shared("data", "wikitext-2")
    vocab = require_shared("vocab", "bert-uncased-vocab.txt")
    lddl_source = require_shared("data", "lddl-sample", "wikitext2-test-source", "en", "0.txt")
    working = tmp_path / "prep"
    flags = ["--corpus", str(wikitext), "--vocab-file", str(vocab), "--num-shards", "2", "--num-workers", "1"]
    result = run_script("--working-dir", str(working), *flags)
    assert result.returncode == 0, result.stderr
    # A WikiText folder is read through its .raw file only (the .tokens files repeat the text with <unk>), and
    # becomes LDDL's source layout exactly as the LDDL sample's input was made.
    assert f"corpus: {wikitext / 'wiki.test.raw'}\n" in result.stdout
    assert f"vocab: {vocab}\n" in result.stdout
    assert (working / SOURCE).read_bytes() == lddl_source.read_bytes()
    assert sorted(p.name for p in (working / "wikipedia" / "source" / "en").iterdir()) == ["0.txt"]

    # Both sets keep the articles that the recipes' defaults keep: --sample-ratio 0.9 drawn from --seed 12439.
    runs = summaries(result)
    assert [s["engine"] for s in runs] == ["in-process", "in-process"]  # --num-workers 1
    assert [s["documents"] for s in runs] == [len(documents_kept(lddl_source, 12439, 0.9))] * 2
    assert runs[0]["documents"] < 62  # the source's article count: the sample ratio really drops some
    phase1, phase2 = working / PHASE1, working / PHASE2
    assert sorted(p.name for p in phase1.iterdir()) == [".num_samples.json", "shard-0.parquet", "shard-1.parquet"]
    lengths = pq.read_table(phase1 / "shard-0.parquet", columns=["num_tokens"])["num_tokens"].to_pylist()
    assert max(lengths) == 128
    counts = json.loads((phase2 / ".num_samples.json").read_text())
    assert sorted(counts) == sorted(f"shard-{i}.parquet_{b}" for i in range(2) for b in range(8))
    longest = pq.read_table(phase2 / "shard-0.parquet_7", columns=["num_tokens", "masked_lm_positions"])
    assert max(longest["num_tokens"].to_pylist()) == 512 and min(longest["num_tokens"].to_pylist()) > 448
    assert sorted(p.name for p in working.iterdir()) == ["pretrain", "wikipedia"]  # no .part folders left

    # A rerun finds every step done and changes nothing.
    before = folder_bytes(working)
    rerun = run_script("--working-dir", str(working), *flags)
    assert rerun.returncode == 0, rerun.stderr
    assert f"have {working / 'wikipedia' / 'source'}\n" in rerun.stdout and summaries(rerun) == []
    assert f"have {phase1}\n" in rerun.stdout and f"have {phase2}\n" in rerun.stdout
    assert folder_bytes(working) == before


def test_seed_sample_ratio_and_the_working_dir_variable(tmp_path):
    wikitext = require_shared("data", "wikitext-2")
    vocab = require_shared("vocab", "bert-uncased-vocab.txt")
    working = tmp_path / "prep"
    # Only phase 1 is made: phase 2's folder already holds something.
    (working / PHASE2).mkdir(parents=True)
    (working / PHASE2 / "kept.txt").write_text("mine")
    result = run_script("--corpus", str(wikitext / "wiki.test.raw"), "--vocab-file", str(vocab), "--num-shards", "2",
                        "--num-workers", "1", "--seed", "3", "--sample-ratio", "0.5",
                        BERT_PREP_WORKING_DIR=str(working))
    assert result.returncode == 0, result.stderr
    kept = documents_kept(working / SOURCE, 3, 0.5)
    assert len(kept) != len(documents_kept(working / SOURCE, 12439, 0.9))
    assert [s["documents"] for s in summaries(result)] == [len(kept)]
    assert sorted(p.name for p in (working / PHASE1).iterdir())[1:] == ["shard-0.parquet", "shard-1.parquet"]
    assert [p.name for p in (working / PHASE2).iterdir()] == ["kept.txt"]


def test_bad_options_give_one_line_errors(tmp_path):
    working = str(tmp_path / "o")
    result = run_script("--corpus", str(tmp_path / "missing"), "--working-dir", working)
    assert result.returncode == 1 and result.stderr.strip().endswith(f"--corpus {tmp_path / 'missing'}: not found")
    result = run_script("--frobnicate", BERT_PREP_WORKING_DIR=working)
    assert result.returncode == 1 and "unknown option --frobnicate" in result.stderr
    result = run_script("--corpus", str(tmp_path), "--vocab-file", str(tmp_path / "none.txt"),
                        BERT_PREP_WORKING_DIR=working)
    assert result.returncode == 1 and f"--vocab-file {tmp_path / 'none.txt'}: file not found" in result.stderr
    for flag, value, message in [("--sample-ratio", "1.5", "--sample-ratio must be a number in (0, 1], got '1.5'"),
                                 ("--num-shards", "0", "--num-shards must be an integer >= 1, got '0'"),
                                 ("--seed", "x", "--seed must be an integer >= 0, got 'x'")]:
        result = run_script("--corpus", str(tmp_path), flag, value, BERT_PREP_WORKING_DIR=working)
        assert result.returncode == 1 and result.stderr.strip() == f"create_datasets_from_start.sh: {message}"
    assert not os.listdir(tmp_path)
