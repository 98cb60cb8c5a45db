"""Fault cases for the corpus readers (issue 66, items 3 and 4): damaged compressed corpus files, WikiExtractor and
WikiText files that start with a UTF-8 byte-order mark, and symlinks in a corpus folder.

Every command that reads a corpus (lddl_preprocess.py, create_pretraining_data.py, tokenizer.py train-vocab and
data/create_datasets_from_start.sh --corpus) runs as a real process, with its reading in worker processes where
the command has them (a process pool, and dask's LocalCluster): the exit status, one line on stderr naming the
file and no traceback, and the corpus (and any earlier output) unchanged byte for byte.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import json
import lzma
import os
import random
import subprocess
import sys
import zlib
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import tokenizer
from conftest import ROOT
from corpus import detect_format, find_corpus_files, read_documents
from messages import assert_one_line

VOCAB = ROOT / "vocab" / "bert-large-uncased-vocab.txt"
CREATE_DATASETS = ROOT / "data" / "create_datasets_from_start.sh"
PATH = f"{Path(sys.executable).parent}:/usr/bin:/bin"
BOM = "\ufeff"
SYLLABLES = ["ba", "ke", "li", "mo", "nu", "pa", "re", "si", "to", "vu", "ga", "fe"]


def varied_text(seed: int, documents: int, words_per_document: int) -> str:
    """One document a line, each a few sentences of words drawn from a few thousand made-up ones: text that
    compresses about 2:1, so that bytes overwritten in the middle of its compressed form hit compressed data."""
    rng = random.Random(seed)
    words = ["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 4))) for _ in range(3000)]
    lines = []
    for _ in range(documents):
        sentences = [" ".join(rng.choice(words) for _ in range(15)).capitalize() + "."
                     for _ in range(words_per_document // 15)]
        lines.append(" ".join(sentences))
    return "\n".join(lines) + "\n"


def overwrite_middle(data: bytes, fill: bytes) -> bytes:
    middle = len(data) // 2
    return data[:middle] + fill + data[middle + len(fill):]


def gzip_with_a_bad_block(text: bytes) -> bytes:
    """gzip of text with bytes overwritten half way, where zlib must reject them: at a full flush after the first
    half (deflate data there starts a new block on a byte boundary), so the overwritten byte is a block header of
    type 3, which does not exist ("invalid block type"). Overwritten at random, deflate data mostly decodes to
    other text and only the CRC at the end tells."""
    compressor = zlib.compressobj(wbits=16 + zlib.MAX_WBITS)  # a gzip container
    first_half = compressor.compress(text[:len(text) // 2]) + compressor.flush(zlib.Z_FULL_FLUSH)
    second_half = compressor.compress(text[len(text) // 2:]) + compressor.flush()
    return first_half + b"\xff" * 16 + second_half[16:]


def snapshot(root: Path) -> dict[str, str]:
    """sha256 of every file under root, by path."""
    return {str(path): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(root.rglob("*")) if path.is_file()}


def run(argv: list[str]) -> subprocess.CompletedProcess:
    """argv as a real process in the repository, with no PADDLEBERT_DEBUG (which brings tracebacks back)."""
    env = {name: value for name, value in os.environ.items() if name != "PADDLEBERT_DEBUG"}
    env.update(PATH=PATH, PYTHON=sys.executable)
    return subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)


def no_traceback_one_line(result: subprocess.CompletedProcess, prefix: str, *parts: object) -> str:
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-3000:]
    assert "Traceback" not in result.stderr + result.stdout, result.stderr[-3000:]
    return assert_one_line(result.stderr, prefix, *parts)


# ---------------------------------------------------------------------------------------------------------------
# Item 3: a damaged compressed corpus file is one line, whichever decompressor finds the damage


TEXT = varied_text(seed=66, documents=400, words_per_document=150)  # about 450 KB, 200 KB as gzip

# (name, compressed file, what the decompressor itself raises on it): each way a decompressor reports damage.
DAMAGES: list[tuple[str, Callable[[bytes], bytes], type[BaseException]]] = [
    ("gzip-invalid-block.gz", gzip_with_a_bad_block, zlib.error),
    ("gzip-bad-crc.gz", lambda text: overwrite_middle(gzip.compress(text, mtime=0), b"\x00" * 64),
     gzip.BadGzipFile),
    ("gzip-cut.gz", lambda text: gzip.compress(text, mtime=0)[:-5000], EOFError),
    ("xz-damaged.xz", lambda text: overwrite_middle(lzma.compress(text), b"\xff" * 64), lzma.LZMAError),
    ("xz-cut.xz", lambda text: lzma.compress(text)[:-5000], EOFError),
    ("bzip2-damaged.bz2", lambda text: overwrite_middle(bz2.compress(text), b"\xff" * 64), OSError),
    ("bzip2-cut.bz2", lambda text: bz2.compress(text)[:-5000], EOFError),
]
OPENERS = {".gz": gzip.open, ".xz": lzma.open, ".bz2": bz2.open}


@pytest.mark.parametrize(("name", "make", "raised"), DAMAGES, ids=[name for name, _, _ in DAMAGES])
def test_every_decompressor_error_is_one_line_naming_the_file(tmp_path, name, make, raised):
    damaged = make(TEXT.encode())
    file = tmp_path / name
    file.write_bytes(damaged)
    with pytest.raises(raised), OPENERS[file.suffix](file) as stream:  # the case is the one it claims to be
        stream.read()
    with pytest.raises(ValueError) as error:
        list(read_documents(file, 0, "lines"))
    assert_one_line(str(error.value), str(file), "damaged")


@pytest.fixture(scope="module")
def damaged_corpus(tmp_path_factory) -> Path:
    """A corpus folder: a good plain file and a .gz file whose compressed data is overwritten in the middle, where
    zlib finds an invalid block after the first half of the documents has been read."""
    folder = tmp_path_factory.mktemp("damaged") / "corpus"
    folder.mkdir()
    (folder / "good.txt").write_text(varied_text(seed=1, documents=20, words_per_document=60))
    damaged = gzip_with_a_bad_block(TEXT.encode())
    with pytest.raises(zlib.error):
        gzip.decompress(damaged)
    (folder / "wiki_00.gz").write_bytes(damaged)
    return folder


PREPROCESSORS = {
    "lddl_preprocess.py, process pool": ("lddl_preprocess.py", "--num-workers", "2"),
    "lddl_preprocess.py, dask": ("lddl_preprocess.py", "--num-workers", "2", "--dask"),
    "create_pretraining_data.py, process pool": ("create_pretraining_data.py", "--num-workers", "2"),
    "create_pretraining_data.py, in-process": ("create_pretraining_data.py", "--num-workers", "1"),
}


@pytest.mark.parametrize("command", PREPROCESSORS.values(), ids=PREPROCESSORS.keys())
def test_a_damaged_gzip_file_stops_a_preprocessor_with_one_line(damaged_corpus, tmp_path, command):
    script, *flags = command
    before = snapshot(damaged_corpus)
    output = tmp_path / "out"
    result = run([sys.executable, str(ROOT / script), "--input", str(damaged_corpus), "--vocab-file", str(VOCAB),
                  "--output-dir", str(output), "--num-shards", "1", *flags])
    no_traceback_one_line(result, f"{script}: ", damaged_corpus / "wiki_00.gz", "damaged gzip data")
    assert snapshot(damaged_corpus) == before
    assert not output.exists() or not any(output.iterdir())  # no shard of a partly read corpus


def test_a_damaged_gzip_file_stops_a_dask_run_busy_elsewhere_with_one_line(damaged_corpus, tmp_path):
    """The same with more work than the error leaves time for: the cluster closes under tasks still running and
    queued, and its workers' logs of that (tracebacks included) stay off the shared stderr."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "big.txt").write_text(varied_text(seed=2, documents=5000, words_per_document=150))
    (corpus / "wiki_00.gz").write_bytes((damaged_corpus / "wiki_00.gz").read_bytes())
    before = snapshot(corpus)
    result = run([sys.executable, str(ROOT / "lddl_preprocess.py"), "--input", str(corpus), "--vocab-file",
                  str(VOCAB), "--output-dir", str(tmp_path / "out"), "--num-shards", "1", "--num-workers", "2",
                  "--dask"])
    no_traceback_one_line(result, "lddl_preprocess.py: ", corpus / "wiki_00.gz", "damaged gzip data")
    assert snapshot(corpus) == before


def test_a_damaged_gzip_file_stops_train_vocab_with_one_line_and_keeps_the_old_vocab(damaged_corpus, tmp_path):
    before = snapshot(damaged_corpus)
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nearlier\n")
    kept = snapshot(tmp_path)
    result = run([sys.executable, str(ROOT / "tokenizer.py"), "train-vocab", "--input", str(damaged_corpus),
                  "--vocab-size", "300", "--output", str(vocab)])
    no_traceback_one_line(result, "tokenizer.py: ", damaged_corpus / "wiki_00.gz", "damaged gzip data")
    assert snapshot(damaged_corpus) == before
    assert snapshot(tmp_path) == kept


def test_a_damaged_gzip_file_stops_create_datasets_with_one_line(damaged_corpus, tmp_path):
    before = snapshot(damaged_corpus)
    working = tmp_path / "prep"
    result = run(["bash", str(CREATE_DATASETS), "--corpus", str(damaged_corpus), "--working-dir", str(working),
                  "--num-shards", "1", "--num-workers", "2"])
    no_traceback_one_line(result, "lddl_preprocess.py: ", damaged_corpus.resolve() / "wiki_00.gz",
                          "damaged gzip data")
    assert "done:" not in result.stdout
    assert snapshot(damaged_corpus) == before
    assert not list((working / "pretrain").rglob("shard-*"))


# ---------------------------------------------------------------------------------------------------------------
# Item 4: a byte-order mark at the start of a file does not change its format


def wikiextractor_text(articles: int) -> str:
    return "".join(f'<doc id="{a}" url="https://en.wikipedia.org/wiki?curid={a}" title="Article {a}">\nArticle {a}\n\n'
                   f"The river {a} flows past the town. It is long.\nA second paragraph of article {a}.\n</doc>\n"
                   for a in range(articles))


WIKITEXT = (" \n = Valkyria Chronicles = \n \n The game began development in 2010 . It sold well . \n \n"
            " = = Gameplay = = \n \n Battles are fought on maps . \n \n"
            " = Tower Bridge = \n \n It crosses the river . \n")


def document_texts(file: Path, input_format: str) -> list[tuple[str, list[str]]]:
    return [(document.title, document.paragraphs) for document in read_documents(file, 0, input_format)]


@pytest.mark.parametrize(("text", "expected_format"), [(wikiextractor_text(3), "wikiextractor"),
                                                       (WIKITEXT, "wikitext")], ids=["wikiextractor", "wikitext"])
@pytest.mark.parametrize("compress", [None, gzip.compress], ids=["plain", "gzip"])
def test_a_byte_order_mark_does_not_change_the_format_or_the_documents(tmp_path, text, expected_format, compress):
    plain, marked = tmp_path / "plain", tmp_path / "marked"
    for file, content in ((plain, text), (marked, BOM + text)):
        data = content.encode("utf-8")
        file.write_bytes(compress(data) if compress else data)
    assert detect_format(marked) == detect_format(plain) == expected_format
    assert find_corpus_files(marked, "auto") == [(marked, expected_format)]
    expected = document_texts(plain, expected_format)
    assert len(expected) == (3 if expected_format == "wikiextractor" else 2)
    assert document_texts(marked, expected_format) == expected


def test_a_bom_wikiextractor_file_makes_shards_without_its_markup(tmp_path):
    """End to end: the shards of a WikiExtractor file with a BOM hold the articles' documents and no `<doc ...>` or
    `</doc>` tokens; the vocabulary trained on it has no `<`."""
    corpus = tmp_path / "corpus" / "AA"
    corpus.mkdir(parents=True)
    (corpus / "wiki_00").write_bytes((BOM + wikiextractor_text(12)).encode("utf-8"))
    output = tmp_path / "out"
    result = run([sys.executable, str(ROOT / "lddl_preprocess.py"), "--input", str(corpus.parent), "--vocab-file",
                  str(VOCAB), "--output-dir", str(output), "--num-shards", "1", "--num-workers", "1",
                  "--sample-ratio", "1"])
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["documents"] == 12
    tokens = {token for shard in output.glob("shard-*") for column in ("A", "B")
              for row in pq.read_table(shard)[column].to_pylist() for token in row.split()}
    assert "river" in tokens
    assert not tokens & {"<", ">", "/", "=", "doc"}
    vocab = tokenizer.train_vocab([str(corpus.parent)], 120, str(tmp_path / "vocab.txt"))
    assert "<" not in vocab and "/" not in vocab


# ---------------------------------------------------------------------------------------------------------------
# Item 4: symlinks in a corpus folder are followed, and every file skipped is named


def lines_file(path: Path, name: str, documents: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"Document {d} of {name} says hello. It has two sentences.\n" for d in range(documents)))


@pytest.fixture
def linked_corpus(tmp_path) -> tuple[Path, list[Path], list[tuple[Path, str]]]:
    """(corpus folder, the files read in order, (skipped path, reason) pairs): a real subfolder, a symlinked one
    (whose files are elsewhere), a second link to that folder, a link to a file already read, a dangling link, a
    link back to an ancestor, a self-referential link and a named pipe."""
    corpus = tmp_path / "corpus"
    elsewhere = tmp_path / "elsewhere"
    lines_file(corpus / "AA" / "wiki_00", "AA 0", 3)
    for index in range(3):
        lines_file(elsewhere / f"wiki_{index:02d}", f"BB {index}", 2)
    (corpus / "BB").symlink_to(elsewhere, target_is_directory=True)
    (corpus / "CC").symlink_to(elsewhere, target_is_directory=True)
    (corpus / "AA" / "wiki_00-again").symlink_to(corpus / "AA" / "wiki_00")
    (corpus / "AA" / "up").symlink_to(corpus, target_is_directory=True)
    (corpus / "dangling").symlink_to(tmp_path / "nowhere")
    (corpus / "self").symlink_to(corpus / "self")
    os.mkfifo(corpus / "pipe")
    read = [corpus / "AA" / "wiki_00", *(corpus / "BB" / f"wiki_{index:02d}" for index in range(3))]
    skipped = [(corpus / "AA" / "up", "symlink loop"),
               (corpus / "AA" / "wiki_00-again", f"the same file as {corpus / 'AA' / 'wiki_00'}"),
               (corpus / "CC", f"the same folder as {corpus / 'BB'}"),
               (corpus / "dangling", "dangling symlink"),
               (corpus / "pipe", "not a regular file"),
               (corpus / "self", "symlink loop")]
    return corpus, read, skipped


def test_symlinked_folders_are_followed_and_each_skipped_file_is_named(linked_corpus, capsys):
    corpus, read, skipped = linked_corpus
    assert find_corpus_files(corpus, "auto") == [(path, "lines") for path in read]
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == len(skipped), lines
    for line, (path, reason) in zip(lines, skipped, strict=True):
        assert_one_line(line, f"corpus: skipped {path}: ", reason)


def test_a_preprocessor_reads_a_symlinked_folder_and_names_what_it_skips(linked_corpus, tmp_path):
    corpus, _, skipped = linked_corpus
    output = tmp_path / "out"
    result = run([sys.executable, str(ROOT / "lddl_preprocess.py"), "--input", str(corpus), "--vocab-file",
                  str(VOCAB), "--output-dir", str(output), "--num-shards", "1", "--num-workers", "2",
                  "--sample-ratio", "1"])
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["documents"] == 3 + 3 * 2  # AA's file and the three behind BB, each once
    lines = [line for line in result.stderr.splitlines() if line.startswith("corpus: skipped ")]
    assert [line.split(": ")[1].removeprefix("skipped ") for line in lines] == [str(path) for path, _ in skipped]
