"""The four vocab files shipped in vocab/ under the names NVIDIA's commands use: content pinned by SHA-256, the
special-token ids of Google's releases, the casing they claim, and equality with the copies in ../shared."""

from __future__ import annotations

import hashlib
import subprocess

import pytest

from conftest import ROOT, require_shared
from tokenizer import load_vocab, vocab_looks_cased

# Recorded once from ../shared/vocab (Google's uncased and cased releases); base and large share one file.
UNCASED_SHA256 = "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"
CASED_SHA256 = "eeaa9875b23b04b4c54ef759d03db9d1ba1554838f8fb26c5d96fa551df93d02"

SHIPPED = {
    "bert-large-uncased-vocab.txt": ("bert-uncased-vocab.txt", UNCASED_SHA256, 30522),
    "bert-base-uncased-vocab.txt": ("bert-uncased-vocab.txt", UNCASED_SHA256, 30522),
    "bert-large-cased-vocab.txt": ("bert-cased-vocab.txt", CASED_SHA256, 28996),
    "bert-base-cased-vocab.txt": ("bert-cased-vocab.txt", CASED_SHA256, 28996),
}


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_vocab_is_googles_file(name):
    _, sha256, size = SHIPPED[name]
    path = ROOT / "vocab" / name
    assert hashlib.sha256(path.read_bytes()).hexdigest() == sha256
    vocab = load_vocab(path)
    assert len(vocab) == size
    # Google's layout: [PAD] first, then the [unusedN] slots, then the other four special tokens
    assert [vocab[token] for token in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")] == [0, 100, 101, 102, 103]
    assert vocab_looks_cased(vocab) == ("-cased-" in name)


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_vocab_equals_the_shared_copy(name):
    shared_name = SHIPPED[name][0]
    assert (ROOT / "vocab" / name).read_bytes() == require_shared("vocab", shared_name).read_bytes()


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="not a git checkout")
def test_git_tracks_the_shipped_files_and_ignores_downloads():
    listed = subprocess.run(["git", "ls-files", "vocab"], cwd=ROOT, capture_output=True, text=True, check=True)
    assert set(SHIPPED) <= {line.removeprefix("vocab/") for line in listed.stdout.splitlines()}
    for name in SHIPPED:
        assert subprocess.run(["git", "check-ignore", "-q", f"vocab/{name}"], cwd=ROOT).returncode == 1
    # download_vocab.py's output names stay ignored
    for downloaded in ("bert-uncased-vocab.txt", "bert-multilingual-cased-vocab.txt"):
        assert subprocess.run(["git", "check-ignore", "-q", f"vocab/{downloaded}"], cwd=ROOT).returncode == 0
