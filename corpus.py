"""Corpus text -> documents -> sentences: the corpus formats, the document reader and the sentence splitter.

Both preprocessors (lddl_preprocess.py, create_pretraining_data.py) read their input through this module;
pretraining_pairs.py then turns the tokenized sentences into NSP pairs.
Format (the LDDL source layout convert_to_lddl_source writes): docs/data-format.md#lddl-source-text.

Corpus formats (`INPUT_FORMATS`); a corpus is one file or a folder searched recursively (files in sorted path order):
- "lines": one document per line; blank lines are skipped.
- "lddl": LDDL's source layout: one document per line written as `<doc_id> <text>`; the first whitespace-separated
  word is the id and is dropped. A folder holding an `en/` subfolder (LDDL's `--wikipedia` layout) reads `en/` only.
- "wikiextractor": WikiExtractor output: `<doc id=... title=...>`, the title line, the paragraphs, `</doc>`.
  The title is dropped (as LDDL's Wikipedia downloader does); each paragraph line is split into sentences. A
  `<doc>` whose `</doc>` never comes (the next `<doc` or the end of the file first) is an error naming its line.
- "wikitext": the WikiText format: an article starts at a title line matching `^ = [^=].* = $`; the title and the
  section heading lines (` = = ... = = `, any depth) are dropped; every other non-blank line is a paragraph.
- "auto": per file: a name ending in .raw or .tokens, or a first non-blank line that is a WikiText title, means
  "wikitext"; a first non-blank line starting with `<doc` means "wikiextractor"; a folder holding `en/` means
  "lddl"; anything else is "lines".
WikiText ships each split in two forms, `<split>.raw` (the text) and `<split>.tokens` (the same text with rare
words replaced by `<unk>`): a folder yields the .raw form, and a .tokens file only where no .raw one sits beside it.
In a folder, checksum lists are not corpus text and are skipped: names like `SHA256SUMS` or `MD5SUMS` (capitals and
digits ending in SUMS) and names ending in .md5, .sha1, .sha256 or .sha512. Files whose names start with `.` are
skipped too, and so are empty files and, in the "lddl" format, files whose names do not end in .txt. A file named
on its own is read whatever its name. Symlinks in a folder are followed, to folders too; each real folder and file
is read once, by its first path in sorted order. Whatever else is skipped is named on stderr, one line each
(`corpus: skipped <path>: <why>`): a dangling symlink, a symlink loop, a second path to a folder or file already
read, a folder that cannot be listed, and anything that is neither a file nor a folder (a pipe, a device).

Compression: a file whose first bytes are the magic number of xz, bzip2 or gzip is read through Python's lzma, bz2
or gzip module, whatever its name (WikiExtractor's `--compress` writes `wiki_00.bz2`), streaming: nothing is
decompressed to disk. Everything above applies to the decompressed text (the format is detected inside the
stream; `wiki.test.raw.xz` is WikiText) and byte offsets count decompressed bytes, so a document's identity, and
with it every output of the preprocessors, is the same whether its file is compressed or not.
Paragraph boundaries are always sentence boundaries. A UTF-8 byte-order mark at the start of a file is dropped
before anything else, format detection included. Every file must be UTF-8 text: a byte that is not (or a NUL
byte, the mark of a binary file) is an error naming the file, the line and the byte.

Each document has a title (`RawDocument.title`), which names it in the held-out set's list: WikiExtractor's
`title=` attribute, a WikiText article's title line without its ` = ` marks, an LDDL document's id, and for the
"lines" format (and text before a file's first title) the first TITLE_CHARACTERS characters of its first line.

Sentence splitting (`split_sentences`) is rule based and works offline. A sentence ends after a run of `.`, `?` or
`!`, optionally followed by closing quotes or brackets, when whitespace follows, except when
- the next sentence would start with a lowercase letter (e.g. "approx. three", "e.g. the") or with one of
  `. ? ! , ; :` (WikiText's spaced ellipsis ". . ."), or
- the period ends a known abbreviation (`ABBREVIATIONS`: titles like "Dr.", "Mr.", "St.", "Gen.", "Jan.", "No.",
  "vs.", "etc.") or a single-letter initial ("J. R. R. Tolkien", "H. americanus"), or a dotted acronym
  ("U.S.", "e.g.", "i.e."), or
- the punctuation run is `...` or longer directly after a word (an ellipsis inside a sentence).
A straight double quote standing alone after the end (WikiText's spaced `. " `) closes the sentence when an odd
number of `"` precede it in the paragraph. WikiText's other spaced punctuation (" . ") needs no special case.
NLTK's Punkt (used by LDDL) learns abbreviations from data instead; LDDL run offline has no trained model and
splits after every `.`, `?` or `!` followed by whitespace.
"""

from __future__ import annotations

import bz2
import contextlib
import errno
import gzip
import lzma
import os
import re
import stat
import sys
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from utils.atomic_io import atomic_write

INPUT_FORMATS = ("auto", "lines", "lddl", "wikiextractor", "wikitext")
TITLE_CHARACTERS = 80  # the title of a document that has none: this much of its first line
_CHECKSUM_LIST = re.compile(r"[A-Z0-9]+SUMS")
_CHECKSUM_SUFFIXES = (".md5", ".sha1", ".sha256", ".sha512")
_WIKIEXTRACTOR_TITLE = re.compile(r'\btitle="(.*)">\s*$')

# The compressed formats by their first bytes: xz's stream header; bzip2's "BZh", the block size 1-9 and the magic of
# its first block (or of the end of an empty stream); gzip's two bytes.
_XZ_MAGIC = b"\xfd7zXZ\x00"
_BZIP2_MAGIC = re.compile(rb"BZh[1-9](1AY&SY|\x17rE8P\x90)")
_GZIP_MAGIC = b"\x1f\x8b"
_OPENERS: dict[str, Callable[..., BinaryIO]] = {"xz": lzma.open, "bzip2": bz2.open, "gzip": gzip.open}
# What the three modules raise on damaged data: LZMAError; OSError from bz2, and from gzip on a bad CRC or header
# (BadGzipFile); zlib.error (no OSError) from gzip on bad deflate data; EOFError on a cut stream.
_DECOMPRESSION_ERRORS = (lzma.LZMAError, OSError, zlib.error, EOFError)
_BYTE_ORDER_MARK = "\ufeff"

WIKITEXT_TITLE = re.compile(r"^ = [^=].* = $")
WIKITEXT_HEADING = re.compile(r"^ (= )+[^=].*( =)+ $")

ABBREVIATIONS = frozenset(
    """
    mr mrs ms dr prof st sr jr mt ft fr rev gen col lt sgt capt cmdr adm maj gov pres sen rep hon messrs mme mlle
    jan feb mar apr jun jul aug sep sept oct nov dec no nos vol vols fig figs pp ch sec art ed eds op cf vs etc
    approx ca est inc ltd co corp bros dept univ assn
    """.split()
)
_SENTENCE_END = re.compile(r"[.?!]+[\"'”’)\]]*(?=\s)")
_CLOSERS = "\"'”’)]"
_CONTINUATIONS = ".?!,;:"  # a sentence never starts with these: ". . ." or "?!" keeps going


def split_sentences(paragraph: str) -> list[str]:
    """Sentences of one paragraph by the rules in the module docstring, each stripped, none empty."""
    sentences = []
    start = 0
    counted_to, quotes_before = 0, 0
    for match in _SENTENCE_END.finditer(paragraph):
        end = match.end()
        next_start = _skip_spaces(paragraph, end)
        quotes_before += paragraph.count('"', counted_to, end)
        counted_to = end
        if quotes_before % 2 == 1 and paragraph.startswith('"', next_start) and (
                next_start + 1 == len(paragraph) or paragraph[next_start + 1].isspace()):
            # A spaced closing quote (WikiText writes `. " `): an odd count of quotes so far means it closes.
            end = next_start + 1
            next_start = _skip_spaces(paragraph, end)
        if next_start >= len(paragraph):
            break
        following = paragraph[next_start]
        if following.islower() or following in _CONTINUATIONS or _is_sentence_internal(
                paragraph, match.start(), match.group()):
            continue
        sentence = paragraph[start:end].strip()
        if sentence:
            sentences.append(sentence)
        start = next_start
    last = paragraph[start:].strip()
    if last:
        sentences.append(last)
    return sentences


def _skip_spaces(text: str, index: int) -> int:
    while index < len(text) and text[index].isspace():
        index += 1
    return index


def _is_sentence_internal(text: str, punct_start: int, punct: str) -> bool:
    """True when the punctuation at text[punct_start:] belongs to an abbreviation, initial or ellipsis."""
    word_start = punct_start
    while word_start > 0 and not text[word_start - 1].isspace():
        word_start -= 1
    word = text[word_start:punct_start].lstrip("\"'“‘([")
    terminal = punct.rstrip(_CLOSERS)
    if not word:
        return False
    if terminal.startswith("..."):
        return True
    if terminal != ".":
        return False
    if word.lower() in ABBREVIATIONS:
        return True
    if len(word) == 1 and word.isalpha() and word.isupper():
        return True
    # Dotted acronyms: "U.S", "e.g", "Ph.D" -- letters separated by periods.
    return "." in word and all(len(part) <= 2 and part.isalpha() for part in word.split("."))


@dataclass(frozen=True)
class RawDocument:
    """One document as read from the corpus: where it starts, its title and its paragraphs (untokenized)."""

    file_index: int
    offset: int  # byte offset of the document's first line in its (decompressed) file: its identity
    paragraphs: list[str]
    title: str = ""


def compression_of(file: Path) -> str | None:
    """"xz", "bzip2" or "gzip" when the file starts with that format's magic number, else None (plain text)."""
    with open(file, "rb") as reader:
        head = reader.read(10)
    if head.startswith(_XZ_MAGIC):
        return "xz"
    if _BZIP2_MAGIC.match(head):
        return "bzip2"
    if head.startswith(_GZIP_MAGIC):
        return "gzip"
    return None


@contextlib.contextmanager
def open_corpus_file(file: Path) -> Iterator[BinaryIO]:
    """The file's text as a binary stream, decompressed on the fly when it is compressed; damaged compressed data
    becomes a ValueError naming the file."""
    compression = compression_of(file)
    if compression is None:
        with open(file, "rb") as reader:
            yield reader
        return
    try:
        with _OPENERS[compression](file, "rb") as reader:
            yield reader
    except _DECOMPRESSION_ERRORS as error:
        raise ValueError(f"{file}: damaged {compression} data ({error})") from None


def is_compressed(file: Path) -> bool:
    """True when the file is read through a decompressor, and so only whole (it cannot be cut into byte ranges)."""
    return compression_of(file) is not None


def find_corpus_files(path: str | Path, input_format: str) -> list[tuple[Path, str]]:
    """(file, format) for every file of the corpus, in sorted path order; raises on a missing or empty corpus."""
    if input_format not in INPUT_FORMATS:
        raise ValueError(f"input format {input_format!r} is not one of {', '.join(INPUT_FORMATS)}")
    root = Path(path)
    if not root.exists():
        raise FileNotFoundError(f"{root}: corpus not found")
    if root.is_dir() and (root / "en").is_dir() and input_format in ("auto", "lddl"):
        root, input_format = root / "en", "lddl"
    if root.is_dir():
        files = [p for p in _folder_files(root) if not _is_checksum_list(p)]
        if input_format == "lddl":
            files = [p for p in files if p.suffix == ".txt"]
        files = [p for p in files if not _has_raw_form(p)]
    else:
        files = [root]
    files = [p for p in files if p.stat().st_size > 0]
    if not files:
        raise ValueError(f"{Path(path)}: corpus has no non-empty files")
    return [(file, detect_format(file) if input_format == "auto" else input_format) for file in files]


def _folder_files(folder: Path) -> list[Path]:
    """The regular files under folder whose names do not start with `.`, in sorted path order, following symlinks
    (to folders too). Each real folder and file is read once, by the first path that reaches it; every other entry
    is named on stderr with why it is skipped: a dangling symlink, a symlink loop, a second path to a folder or file
    already read, a folder that cannot be listed, or something else than a file or a folder (a pipe, a device)."""
    files: list[Path] = []
    status = folder.stat()
    # (device, inode) of each folder and file read -> the path it was read by: a symlink or a hard link to it
    # leads to the same pair.
    read_by: dict[tuple[int, int], Path] = {(status.st_dev, status.st_ino): folder}

    def walk(current: Path, ancestors: frozenset[tuple[int, int]]) -> None:
        try:
            names = sorted(os.listdir(current))
        except OSError as error:
            _report_skipped(current, f"the folder cannot be listed ({error.strerror})")
            return
        for name in names:
            path = current / name
            try:
                status = path.stat()
            except OSError as error:
                if not name.startswith("."):
                    _report_skipped(path, _unreadable_entry(path, error))
                continue
            identity = (status.st_dev, status.st_ino)
            if stat.S_ISDIR(status.st_mode):
                if identity in ancestors:
                    _report_skipped(path, f"symlink loop (back to {read_by[identity]})")
                elif identity in read_by:
                    _report_skipped(path, f"the same folder as {read_by[identity]}, read once")
                else:
                    read_by[identity] = path
                    walk(path, ancestors | {identity})
            elif name.startswith("."):
                continue  # hidden files are not corpus text (the module docstring)
            elif not stat.S_ISREG(status.st_mode):
                _report_skipped(path, "not a regular file")
            elif identity in read_by:
                _report_skipped(path, f"the same file as {read_by[identity]}, read once")
            else:
                read_by[identity] = path
                files.append(path)

    walk(folder, frozenset(read_by))
    return files


def _unreadable_entry(path: Path, error: OSError) -> str:
    """Why the entry at path, whose stat failed with error, is skipped."""
    if error.errno == errno.ELOOP:
        return "symlink loop"
    if error.errno == errno.ENOENT and path.is_symlink():
        return f"dangling symlink (to {os.readlink(path)})"
    return f"cannot be read ({error.strerror})"


def _report_skipped(path: Path, reason: str) -> None:
    print(f"corpus: skipped {path}: {reason}", file=sys.stderr)


def _is_checksum_list(file: Path) -> bool:
    """True for a checksum list shipped beside a corpus (SHA256SUMS, MD5SUMS, x.md5, ...): not corpus text."""
    return _CHECKSUM_LIST.fullmatch(file.name) is not None or file.suffix.lower() in _CHECKSUM_SUFFIXES


def _text_name(file: Path) -> Path:
    """The file's name without a compression suffix: `wiki.test.raw.xz` -> `wiki.test.raw`."""
    return file.with_suffix("") if file.suffix in (".xz", ".bz2", ".gz") else file


def _has_raw_form(file: Path) -> bool:
    """True for a WikiText `<split>.tokens` file with its `<split>.raw` beside it: the same text, read once."""
    name = _text_name(file)
    return name.suffix == ".tokens" and any(
        name.with_suffix(".raw" + compressed).is_file() for compressed in ("", ".xz", ".bz2", ".gz"))


def detect_format(file: Path) -> str:
    """The format of one file by the "auto" rules in the module docstring (inside the stream when compressed)."""
    if _text_name(file).suffix in (".raw", ".tokens"):
        return "wikitext"
    with open_corpus_file(file) as reader:
        for index, raw_line in enumerate(reader):
            line = _without_byte_order_mark(raw_line.decode("utf-8", errors="replace").rstrip("\r\n"), index == 0)
            if not line.strip():
                continue
            if WIKITEXT_TITLE.match(line):
                return "wikitext"
            if line.startswith("<doc"):
                return "wikiextractor"
            return "lines"
    return "lines"


def _without_byte_order_mark(line: str, at_file_start: bool) -> str:
    """The line without the UTF-8 byte-order mark some editors put at the start of a file: it is no text, and left
    in it would hide the `<doc` or the WikiText title that tells the file's format."""
    return line.removeprefix(_BYTE_ORDER_MARK) if at_file_start else line


def _starts_document(line: str, input_format: str) -> bool:
    if input_format == "wikitext":
        return WIKITEXT_TITLE.match(line) is not None
    if input_format == "wikiextractor":
        return line.startswith("<doc")
    return True  # "lines" and "lddl": every line is a document


def read_documents(file: Path, file_index: int, input_format: str, start: int = 0,
                   end: int | None = None) -> Iterator[RawDocument]:
    """The documents whose first line starts at a byte offset in [start, end) of `file` (end None: to its end).

    A document may run past `end`; lines before the first document start inside the range belong to the
    previous range. So consecutive ranges read every document exactly once, whatever the range boundaries.
    A compressed file is read whole (start 0, end None), its offsets counted in the decompressed text. Reaching
    the end of the file, the generator returns the file's length in (decompressed) bytes.
    """
    if start > 0 and is_compressed(file):
        raise ValueError(f"{file}: a compressed file is read whole, not from byte {start}")
    with open_corpus_file(file) as reader:
        if start > 0:
            reader.seek(start - 1)
            reader.readline()  # finish the line that began before `start`
        offset = reader.tell()
        current: list[str] | None = None
        current_offset = 0
        unclosed = False  # the current document is a WikiExtractor <doc> whose </doc> has not come yet
        in_first_lines = True  # lines at the very start of a file belong to no title: they form a document
        for raw_line in reader:
            try:
                line = _without_byte_order_mark(raw_line.decode("utf-8").rstrip("\r\n"), offset == 0)
            except UnicodeDecodeError as error:
                bad = offset + error.start
                raise ValueError(f"{file}: line {_line_number(file, bad)}, byte {bad}: not UTF-8 text "
                                 f"(0x{raw_line[error.start]:02x}); the corpus must be UTF-8") from None
            if "\0" in line:
                bad = offset + raw_line.index(b"\0")
                raise ValueError(f"{file}: line {_line_number(file, bad)}, byte {bad}: a NUL byte, so a binary "
                                 "file, not text")
            if _starts_document(line, input_format):
                if current is not None:
                    yield from _finished_document(file, current, input_format, file_index, current_offset, unclosed)
                if end is not None and offset >= end:
                    return None
                current, current_offset = [line], offset
                unclosed = input_format == "wikiextractor"
                in_first_lines = False
            elif current is not None:
                current.append(line)
                if unclosed and line.startswith("</doc>"):
                    unclosed = False
            elif in_first_lines and start == 0 and (end is None or offset < end):
                current, current_offset, in_first_lines = [line], offset, False
            offset += len(raw_line)
        if current is not None:
            yield from _finished_document(file, current, input_format, file_index, current_offset, unclosed)
    return offset


def _finished_document(file: Path, lines: list[str], input_format: str, file_index: int, offset: int,
                       unclosed: bool) -> Iterator[RawDocument]:
    """The document of lines once its last line is read, unless it has no text; an error when it is a
    WikiExtractor <doc> whose </doc> never came (unclosed)."""
    if unclosed:
        raise ValueError(f"{file}: line {_line_number(file, offset)}: <doc> without </doc> (the next <doc> or the "
                         "end of the file comes first); a cut or damaged WikiExtractor file")
    document = _parse_document(lines, input_format, file_index, offset)
    if document is not None:
        yield document


def _line_number(file: Path, position: int) -> int:
    """The number (from 1) of the line holding byte `position` of the file's text; for error messages only, as it
    reads the file again."""
    newlines = 0
    with open_corpus_file(file) as reader:
        remaining = position
        while remaining > 0:
            chunk = reader.read(min(remaining, 2**20))
            if not chunk:
                break
            newlines += chunk.count(b"\n")
            remaining -= len(chunk)
    return newlines + 1


def _parse_document(lines: list[str], input_format: str, file_index: int, offset: int) -> RawDocument | None:
    title = ""
    if input_format == "lines":
        paragraphs = [lines[0].strip()]
    elif input_format == "lddl":
        parts = lines[0].strip().split(maxsplit=1)
        paragraphs = parts[1:]
        title = parts[0] if parts else ""
    elif input_format == "wikitext":
        body = lines
        if WIKITEXT_TITLE.match(lines[0]):
            body, title = lines[1:], lines[0].strip().removeprefix("= ").removesuffix(" =")
        paragraphs = [line.strip() for line in body if not WIKITEXT_HEADING.match(line)]
    elif input_format == "wikiextractor":
        body = [line for line in lines[1:] if line.strip()]
        if lines[0].startswith("<doc"):
            body = body[1:]  # the title, which WikiExtractor repeats as the first line
            attribute = _WIKIEXTRACTOR_TITLE.search(lines[0])
            title = attribute.group(1) if attribute else ""
        paragraphs = []
        for line in body:
            if line.startswith("</doc>"):
                break
            paragraphs.append(line.strip())
    else:
        raise ValueError(f"input format {input_format!r} is not one of {', '.join(INPUT_FORMATS)}")
    paragraphs = [paragraph for paragraph in paragraphs if paragraph]
    if not paragraphs:
        return None
    return RawDocument(file_index, offset, paragraphs, title or paragraphs[0][:TITLE_CHARACTERS])


def document_sentences(document: RawDocument) -> list[str]:
    """All sentences of a document, paragraph after paragraph."""
    return [sentence for paragraph in document.paragraphs for sentence in split_sentences(paragraph)]


def convert_to_lddl_source(corpora: Sequence[str | Path], lddl_source_dir: str | Path,
                           input_format: str = "auto") -> list[Path]:
    """Write corpora as LDDL's `--wikipedia` input (what LDDL's Wikipedia downloader makes): `<dir>/en/<i>.txt` for
    the i-th corpus file (find_corpus_files order), one `wiki-<n> <text>` line per document, n = 0, 1, ... over all
    files.

    The text of a document is its paragraphs, stripped and joined by single spaces (for WikiText: without the title
    and the headings; for WikiExtractor output: without the title); lines are joined by "\\n" with no trailing
    newline, as ../shared/data/lddl-sample/README.md (section 1) describes. Each file is written to a temporary
    name and renamed. Returns the written files.
    """
    files = [entry for corpus in corpora for entry in find_corpus_files(corpus, input_format)]
    output_dir = Path(lddl_source_dir) / "en"
    output_dir.mkdir(parents=True, exist_ok=True)
    written, document_id = [], 0
    for file_index, (path, file_format) in enumerate(files):
        output = output_dir / f"{file_index}.txt"
        def write(temp: str, path: Path = path, file_index: int = file_index, file_format: str = file_format) -> None:
            nonlocal document_id
            with open(temp, "w", encoding="utf-8", newline="\n") as writer:
                separator = ""
                for document in read_documents(path, file_index, file_format):
                    writer.write(f"{separator}wiki-{document_id} {' '.join(document.paragraphs)}")
                    separator = "\n"
                    document_id += 1

        atomic_write(output, write)
        written.append(output)
    return written


def convert_wikitext_to_lddl(wikitext_file: str | Path, lddl_source_dir: str | Path) -> Path:
    """Write one WikiText file as LDDL's `--wikipedia` input, `<dir>/en/0.txt` (convert_to_lddl_source)."""
    wikitext_file = Path(wikitext_file)
    if not wikitext_file.is_file():
        raise FileNotFoundError(f"{wikitext_file}: WikiText file not found")
    return convert_to_lddl_source([wikitext_file], lddl_source_dir, "wikitext")[0]
