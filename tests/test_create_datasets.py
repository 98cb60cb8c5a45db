"""Tests for data/create_datasets_from_start.sh in local-corpus mode (download mode needs a network)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

from conftest import ROOT, require_shared

SCRIPT = ROOT / "data" / "create_datasets_from_start.sh"


def run_script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT,
                          env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "PYTHON": sys.executable},
                          timeout=300)


def test_builds_phase1_and_phase2_from_wikitext(tmp_path):
    wikitext = require_shared("data", "wikitext-2")
    vocab = require_shared("vocab", "bert-uncased-vocab.txt")
    result = run_script("--corpus", str(wikitext), "--output-dir", str(tmp_path / "sets"), "--vocab-file", str(vocab),
                        "--num-shards", "2", "--num-workers", "1")
    assert result.returncode == 0, result.stderr
    # A WikiText folder is read through its .raw file only (the .tokens files repeat the text with <unk>).
    assert f"corpus: {wikitext / 'wiki.test.raw'}\n" in result.stdout
    assert f"vocab: {vocab}\n" in result.stdout
    summaries = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert [s["engine"] for s in summaries] == ["in-process", "in-process"]  # --num-workers 1
    phase1, phase2 = tmp_path / "sets" / "phase1", tmp_path / "sets" / "phase2"
    assert sorted(p.name for p in phase1.iterdir()) == [".num_samples.json", "shard-0.parquet", "shard-1.parquet"]
    lengths = pq.read_table(phase1 / "shard-0.parquet", columns=["num_tokens"])["num_tokens"].to_pylist()
    assert max(lengths) == 128
    counts = json.loads((phase2 / ".num_samples.json").read_text())
    assert sorted(counts) == sorted(f"shard-{i}.parquet_{b}" for i in range(2) for b in range(8))
    longest = pq.read_table(phase2 / "shard-0.parquet_7", columns=["num_tokens", "masked_lm_positions"])
    assert max(longest["num_tokens"].to_pylist()) == 512 and min(longest["num_tokens"].to_pylist()) > 448


def test_bad_options_give_one_line_errors(tmp_path):
    result = run_script("--corpus", str(tmp_path / "missing"), "--output-dir", str(tmp_path / "o"))
    assert result.returncode == 1 and result.stderr.strip().endswith(f"--corpus {tmp_path / 'missing'}: not found")
    result = run_script("--frobnicate")
    assert result.returncode == 1 and "unknown option --frobnicate" in result.stderr
    result = run_script("--corpus", str(tmp_path), "--vocab-file", str(tmp_path / "none.txt"))
    assert result.returncode == 1 and f"--vocab-file {tmp_path / 'none.txt'}: file not found" in result.stderr
