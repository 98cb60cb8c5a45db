"""data/create_datasets_from_start.sh --corpus runs offline with nothing beside the repository: no network, no
../shared (the test runs a copy of the repository in a folder without one, and PADDLEBERT_SHARED_DIR points
nowhere) and no --vocab-file. It tokenizes with the shipped vocab/bert-large-uncased-vocab.txt instead of
fetching one.

CREATE_DATASETS_SCRIPT=PATH runs another version of the script in the copy (to show that the test fails on one
that looks for ../shared/vocab/bert-uncased-vocab.txt and downloads it when it is not there)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import ROOT

SCRIPT = Path(os.environ.get("CREATE_DATASETS_SCRIPT", ROOT / "data" / "create_datasets_from_start.sh"))
# What a run writes into the repository, and git's folder: not copied.
NOT_COPIED = shutil.ignore_patterns(".git", "results", "sample", "log", "__pycache__", ".pytest_cache", ".ruff_cache")
# Every proxy variable curl and Python's urllib read, pointed at a port nothing listens on: any download fails at
# once instead of reaching the network.
NO_NETWORK = {name: "http://127.0.0.1:9" for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY",
                                                         "ALL_PROXY", "all_proxy")}


@pytest.mark.slow
def test_builds_both_phases_with_the_shipped_vocab_offline(tmp_path):
    repository = tmp_path / "alone" / "PaddleBERT"  # no shared/ beside it
    shutil.copytree(ROOT, repository, ignore=NOT_COPIED)
    shutil.copy(SCRIPT, repository / "data" / "create_datasets_from_start.sh")
    shipped_vocab = repository / "vocab" / "bert-large-uncased-vocab.txt"
    # The offline sample corpus cpu_demo uses (CPython's pydoc topics, 79 documents): long enough for every
    # phase-2 length bin.
    subprocess.run([sys.executable, str(ROOT / "data" / "make_sample_corpus.py"), "--output-dir",
                    str(tmp_path / "source")], check=True, capture_output=True)
    text = tmp_path / "source" / "en" / "pydoc_topics.txt"
    working = tmp_path / "prep"
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "PYTHON": sys.executable, "HOME": str(tmp_path),
           "PADDLEBERT_SHARED_DIR": str(tmp_path / "nowhere"), "HF_HUB_OFFLINE": "1", **NO_NETWORK}
    result = subprocess.run(["bash", str(repository / "data" / "create_datasets_from_start.sh"), "--corpus", str(text),
                             "--working-dir", str(working), "--num-shards", "1", "--num-workers", "1"],
                            capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert f"vocab: {shipped_vocab}\n" in result.stdout
    vocab = set(shipped_vocab.read_text(encoding="utf-8").splitlines())
    for phase in ("pretrain/phase1/unbinned/parquet", "pretrain/phase2/bin_size_64/parquet"):
        shards = sorted((working / phase).glob("shard-*"))
        assert shards, phase
        tokens = [token for shard in shards for column in ("A", "B") for row in pq.read_table(shard)[column].to_pylist()
                  for token in row.split()]
        assert tokens and set(tokens) <= vocab  # every piece is one of the shipped vocab's
    assert not (repository / "vocab" / "bert-uncased-vocab.txt").exists()  # nothing was fetched into vocab/
