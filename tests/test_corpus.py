"""Tests for corpus.py: the corpus formats, the document reader and the offline sentence splitter."""

from __future__ import annotations

import bz2
import gzip
import lzma
import random
from pathlib import Path

import pytest

from conftest import require_shared
from corpus import (
    convert_to_lddl_source,
    convert_wikitext_to_lddl,
    detect_format,
    document_sentences,
    find_corpus_files,
    read_documents,
    split_sentences,
)
from messages import assert_one_line


@pytest.mark.parametrize("paragraph, expected", [
    ("One. Two? Three! Four", ["One.", "Two?", "Three!", "Four"]),
    ("Dr. Smith met Mr. Jones in St. Louis. They talked.", ["Dr. Smith met Mr. Jones in St. Louis.", "They talked."]),
    ("J. R. R. Tolkien wrote it. H. americanus is a lobster.",
     ["J. R. R. Tolkien wrote it.", "H. americanus is a lobster."]),
    ("The U.S. Army came, e.g. in May. Next.", ["The U.S. Army came, e.g. in May.", "Next."]),
    ("It costs approx. three euros. Fine.", ["It costs approx. three euros.", "Fine."]),
    ('He said "Stop." Then he left.', ['He said "Stop."', "Then he left."]),
    ("Wait... what happened? Nothing.", ["Wait... what happened?", "Nothing."]),
    # WikiText spacing: a lone period ends a sentence; a spaced ellipsis and a spaced closing quote stay inside.
    ("He won in 2000 . The end . . . Really .", ["He won in 2000 .", "The end . . .", "Really ."]),
    ('He said , " Stop . " Then he left .', ['He said , " Stop . "', "Then he left ."]),
    ("The census recorded 52 @.@ 9 million people . Ten years later .",
     ["The census recorded 52 @.@ 9 million people .", "Ten years later ."]),
    ("No terminal punctuation", ["No terminal punctuation"]),
    ("   ", []),
])
def test_split_sentences(paragraph, expected):
    assert split_sentences(paragraph) == expected


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


WIKITEXT = (" \n = First Title = \n \n Alpha one . Alpha two . \n \n = = Section = = \n \n Alpha three . \n"
            " = = = Deeper = = = \n Alpha four . \n \n = Second Title = \n \n Beta one . \n")
WIKIEXTRACTOR = ('<doc id="1" url="u" title="First">\nFirst\n\nAlpha one. Alpha two.\nAlpha three.\n</doc>\n'
                 '<doc id="2" url="u" title="Second">\nSecond\n\nBeta one.\n</doc>\n')


@pytest.mark.parametrize("input_format, text, expected", [
    ("lines", "Alpha one. Alpha two.\n\nBeta one.\n", [["Alpha one. Alpha two."], ["Beta one."]]),
    ("lddl", "wiki-0 Alpha one. Alpha two.\nwiki-1 Beta one.", [["Alpha one. Alpha two."], ["Beta one."]]),
    ("wikitext", WIKITEXT, [["Alpha one . Alpha two .", "Alpha three .", "Alpha four ."], ["Beta one ."]]),
    ("wikiextractor", WIKIEXTRACTOR, [["Alpha one. Alpha two.", "Alpha three."], ["Beta one."]]),
])
def test_read_documents_formats(tmp_path, input_format, text, expected):
    file = write(tmp_path / "corpus.txt", text)
    assert [document.paragraphs for document in read_documents(file, 0, input_format)] == expected


def test_document_sentences_treat_paragraphs_as_boundaries(tmp_path):
    file = write(tmp_path / "a.txt", WIKIEXTRACTOR)
    document = next(read_documents(file, 0, "wikiextractor"))
    assert document_sentences(document) == ["Alpha one.", "Alpha two.", "Alpha three."]


def test_auto_detection_and_lddl_layout(tmp_path):
    assert detect_format(write(tmp_path / "w.raw", "x\n")) == "wikitext"
    assert detect_format(write(tmp_path / "w.txt", WIKITEXT)) == "wikitext"
    assert detect_format(write(tmp_path / "e.txt", WIKIEXTRACTOR)) == "wikiextractor"
    assert detect_format(write(tmp_path / "l.txt", "\nplain text.\n")) == "lines"
    source = tmp_path / "source"
    write(source / "en" / "0.txt", "wiki-0 Alpha.\nwiki-1 Beta.")
    write(source / "README", "ignored: not under en/")
    files = find_corpus_files(source, "auto")
    assert files == [(source / "en" / "0.txt", "lddl")]


@pytest.mark.parametrize("input_format, text", [
    ("lines", "".join(f"document {i} has text.\n" + ("\n" if i % 3 == 0 else "") for i in range(40))),
    ("wikitext", WIKITEXT * 12),
    ("wikiextractor", WIKIEXTRACTOR * 12),
])
def test_read_ranges_cover_every_document_once(tmp_path, input_format, text):
    file = write(tmp_path / "corpus.txt", text)
    whole = [(d.offset, d.paragraphs) for d in read_documents(file, 0, input_format)]
    size = file.stat().st_size
    rng = random.Random(3)
    for _ in range(20):
        cuts = sorted({0, size, *(rng.randrange(1, size) for _ in range(rng.randint(1, 8)))})
        pieces = [(d.offset, d.paragraphs) for start, end in zip(cuts[:-1], cuts[1:], strict=True)
                  for d in read_documents(file, 0, input_format, start, end)]
        assert pieces == whole


COMPRESSORS = {"xz": lzma.compress, "bzip2": bz2.compress, "gzip": gzip.compress}


@pytest.mark.parametrize("compression", sorted(COMPRESSORS))
def test_a_compressed_file_reads_as_its_text(tmp_path, compression):
    """The same documents, offsets and titles from the compressed file as from the plain one, and the format is
    found inside the stream, whatever the file's name."""
    plain = write(tmp_path / "plain" / "wiki_00", WIKIEXTRACTOR * 3)
    packed = tmp_path / "packed" / "wiki_00"  # WikiExtractor's own names carry no suffix either
    packed.parent.mkdir()
    packed.write_bytes(COMPRESSORS[compression](plain.read_bytes()))
    assert packed.read_bytes() != plain.read_bytes()
    assert find_corpus_files(tmp_path / "packed", "auto") == [(packed, "wikiextractor")]
    whole = [(d.offset, d.title, d.paragraphs) for d in read_documents(plain, 0, "wikiextractor")]
    assert [(d.offset, d.title, d.paragraphs) for d in read_documents(packed, 0, "wikiextractor")] == whole
    text = plain.read_bytes()
    assert [offset for offset, _, _ in whole] == [i for i in range(len(text)) if text.startswith(b"<doc", i)]
    assert [title for _, title, _ in whole] == ["First", "Second"] * 3
    # A compressed WikiText split is WikiText by its name without the compression suffix.
    raw = tmp_path / "wiki.test.raw.xz"
    raw.write_bytes(lzma.compress(b"no title line, still WikiText by its name\n"))
    assert detect_format(raw) == "wikitext"


def test_checksum_lists_beside_a_corpus_are_not_read(tmp_path):
    write(tmp_path / "AA" / "wiki_00", WIKIEXTRACTOR)
    for name in ("SHA256SUMS", "MD5SUMS", "B2SUMS", "AA/wiki_00.md5", "AA/wiki_00.sha256"):
        write(tmp_path / name, "603d03107455198a5a4ef293ae4233c567db6ea198cb8da31553c66ae28b0601  AA/wiki_00\n")
    write(tmp_path / "notes.txt", "A corpus file after all.\n")
    assert find_corpus_files(tmp_path, "auto") == [(tmp_path / "AA" / "wiki_00", "wikiextractor"),
                                                   (tmp_path / "notes.txt", "lines")]
    # Named on its own, a file is read whatever its name.
    assert find_corpus_files(tmp_path / "SHA256SUMS", "auto") == [(tmp_path / "SHA256SUMS", "lines")]


def test_a_damaged_compressed_file_is_named(tmp_path):
    file = tmp_path / "wiki_00.xz"
    file.write_bytes(lzma.compress(WIKIEXTRACTOR.encode() * 50)[:-40])  # cut short
    with pytest.raises(ValueError, match=r"wiki_00\.xz: damaged xz data"):
        list(read_documents(file, 0, "wikiextractor"))


def test_a_byte_that_is_not_utf8_is_named_with_its_line(tmp_path):
    """Latin-1 "café" on line 2: the é is byte 11 + 3 = 14, in a plain file, in a read range that starts on line 2,
    and in the decompressed text of an xz file."""
    text = "first line\ncafé au lait\n".encode("latin-1")
    plain = tmp_path / "latin1.txt"
    plain.write_bytes(text)
    packed = tmp_path / "latin1.txt.xz"
    packed.write_bytes(lzma.compress(text))
    for file, start in ((plain, 0), (plain, 11), (packed, 0)):
        with pytest.raises(ValueError) as raised:
            list(read_documents(file, 0, "lines", start))
        assert_one_line(str(raised.value), f"{file}: ", "line 2", "byte 14", "not UTF-8", "0xe9")


def test_a_binary_file_with_nul_bytes_is_not_text(tmp_path):
    file = tmp_path / "image.bin"
    file.write_bytes(b"header\n\x00\x00\x00\x01")
    with pytest.raises(ValueError) as raised:
        list(read_documents(file, 0, "lines"))
    assert_one_line(str(raised.value), f"{file}: ", "line 2", "byte 7", "NUL byte", "binary")


@pytest.mark.parametrize("text, line", [
    # The first <doc> runs into the second one.
    ('<doc id="1" title="A">\nA\nText.\n<doc id="2" title="B">\nB\nMore.\n</doc>\n', 1),
    # The file ends inside the last <doc>.
    ('<doc id="1" title="A">\nA\nText.\n</doc>\n<doc id="2" title="B">\nB\nMore.\n', 5),
])
def test_a_doc_without_its_end_tag_is_named_by_line(tmp_path, text, line):
    file = write(tmp_path / "wiki_00", text)
    with pytest.raises(ValueError) as raised:
        list(read_documents(file, 0, "wikiextractor"))
    assert_one_line(str(raised.value), f"{file}: ", f"line {line}:", "<doc> without </doc>")


@pytest.mark.parametrize("input_format, text, titles", [
    ("wikiextractor", WIKIEXTRACTOR, ["First", "Second"]),
    ("wikitext", WIKITEXT, ["First Title", "Second Title"]),
    ("lddl", "wiki-0 Alpha one.\nwiki-1 Beta one.", ["wiki-0", "wiki-1"]),
    ("lines", "Alpha one. " + "x" * 100 + "\nBeta one.\n", ["Alpha one. " + "x" * 69, "Beta one."]),
])
def test_every_document_has_a_title(tmp_path, input_format, text, titles):
    file = write(tmp_path / "corpus.txt", text)
    assert [document.title for document in read_documents(file, 0, input_format)] == titles


def test_missing_and_empty_corpus(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        find_corpus_files(tmp_path / "nowhere", "auto")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "a.txt").write_text("")
    with pytest.raises(ValueError, match="empty: corpus has no non-empty files"):
        find_corpus_files(tmp_path / "empty", "auto")


def test_convert_wikitext_reproduces_the_lddl_sample_source(tmp_path):
    """The README's conversion, run on wiki.test.raw, gives byte for byte the input the LDDL sample was made from."""
    wikitext = require_shared("data", "wikitext-2", "wiki.test.raw")
    reference = require_shared("data", "lddl-sample", "wikitext2-test-source", "en", "0.txt")
    written = convert_wikitext_to_lddl(wikitext, tmp_path / "source")
    assert written.read_bytes() == reference.read_bytes()


def test_convert_to_lddl_source_writes_one_file_per_corpus_file(tmp_path):
    corpus = tmp_path / "corpus"
    (corpus / "AA").mkdir(parents=True)
    (corpus / "AA" / "wiki_00").write_text('<doc id="7" title="Lobster">\nLobster\n\nA crustacean.  \n'
                                           'It lives in the sea.\n</doc>\n<doc id="9" title="Crab">\nCrab\n'
                                           'Crabs walk sideways.\n</doc>\n')
    (corpus / "AA" / "wiki_01").write_text('<doc id="12" title="Empty">\nEmpty\n</doc>\n'
                                           '<doc id="13" title="Shrimp">\nShrimp\nSmall.\n</doc>\n')
    lines = tmp_path / "lines.txt"
    lines.write_text("first document\n\nsecond document\n")
    written = convert_to_lddl_source([corpus, lines], tmp_path / "source")
    assert written == [tmp_path / "source" / "en" / f"{i}.txt" for i in range(3)]
    assert [path.read_text() for path in written] == [
        "wiki-0 A crustacean. It lives in the sea.\nwiki-1 Crabs walk sideways.",
        "wiki-2 Small.",
        "wiki-3 first document\nwiki-4 second document",
    ]
    # LDDL's reader (the "lddl" format, chosen for a folder holding en/) gets the same documents back.
    assert [(path.name, fmt) for path, fmt in find_corpus_files(tmp_path / "source", "auto")] == [
        ("0.txt", "lddl"), ("1.txt", "lddl"), ("2.txt", "lddl")]
    assert [document.paragraphs for document in read_documents(written[0], 0, "lddl")] == [
        ["A crustacean. It lives in the sea."], ["Crabs walk sideways."]]


def test_a_wikitext_folder_yields_each_split_in_one_form(tmp_path):
    """WikiText ships each split twice, as .raw (the text) and .tokens (rare words replaced by <unk>): a folder
    yields the .raw file of a split and its .tokens file only where the split has no .raw."""
    for name in ("wiki.test.raw", "wiki.test.tokens", "wiki.valid.tokens", "wiki.train.raw"):
        (tmp_path / name).write_text(" = Title = \n\n A paragraph .\n")
    assert [(path.name, fmt) for path, fmt in find_corpus_files(tmp_path, "auto")] == [
        ("wiki.test.raw", "wikitext"), ("wiki.train.raw", "wikitext"), ("wiki.valid.tokens", "wikitext")]
    assert [path.name for path, _ in find_corpus_files(tmp_path, "wikitext")] == [
        "wiki.test.raw", "wiki.train.raw", "wiki.valid.tokens"]
    # A file named on its own is read whatever its form.
    assert [path.name for path, _ in find_corpus_files(tmp_path / "wiki.test.tokens", "auto")] == ["wiki.test.tokens"]


def test_the_shared_wikitext_folder_is_read_once():
    """../shared's WikiText-2 holds wiki.test.raw and wiki.test.tokens, the same articles: the folder yields the
    test split once (no <unk>, the .tokens form's mark), so its documents are those of wiki.test.raw alone."""
    folder = require_shared("data", "wikitext-2")
    files = find_corpus_files(folder, "auto")
    assert "wiki.test.tokens" not in [path.name for path, _ in files]
    test_raw = folder / "wiki.test.raw"
    raw_documents = list(read_documents(test_raw, 0, "wikitext"))
    read = [document for index, (path, fmt) in enumerate(files) if path.name.startswith("wiki.test.")
            for document in read_documents(path, index, fmt)]
    assert len(read) == len(raw_documents) > 0
    assert not any("<unk>" in paragraph for document in read for paragraph in document.paragraphs)
