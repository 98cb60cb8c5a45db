"""Text -> documents -> BERT next-sentence pairs: the corpus formats, the sentence splitter and the pair rule.

This module is the logic shared by both preprocessors (lddl_preprocess.py writes LDDL parquet shards,
create_pretraining_data.py writes NVIDIA/Google HDF5 shards); preprocess_pipeline.py runs it in parallel.

Corpus formats (`INPUT_FORMATS`); a corpus is one file or a folder searched recursively (files in sorted path order):
- "lines": one document per line; blank lines are skipped.
- "lddl": LDDL's source layout: one document per line written as `<doc_id> <text>`; the first whitespace-separated
  word is the id and is dropped. A folder holding an `en/` subfolder (LDDL's `--wikipedia` layout) reads `en/` only.
- "wikiextractor": WikiExtractor output: `<doc id=... title=...>`, the title line, the paragraphs, `</doc>`.
  The title is dropped (as LDDL's Wikipedia downloader does); each paragraph line is split into sentences.
- "wikitext": the WikiText format: an article starts at a title line matching `^ = [^=].* = $`; the title and the
  section heading lines (` = = ... = = `, any depth) are dropped; every other non-blank line is a paragraph.
- "auto": per file: a name ending in .raw or .tokens, or a first non-blank line that is a WikiText title, means
  "wikitext"; a first non-blank line starting with `<doc` means "wikiextractor"; a folder holding `en/` means
  "lddl"; anything else is "lines".
Paragraph boundaries are always sentence boundaries. Every file must be UTF-8.

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

Pairs follow Google's create_pretraining_data.py (Devlin et al. 2018, section 3.1 "Task #2: NSP", and the
`create_instances_from_document` function of google-research/bert), as LDDL runs it:
the target length is max_seq_length - 3, or with probability short_seq_prob a uniform integer in [2, that];
sentences are gathered into a chunk until the target is reached or the document ends; A takes the first a_end
sentences (a_end uniform in [1, len(chunk) - 1]); B is the rest, or with probability 0.5 (always for a one-sentence
chunk) sentences from a random start in a random other document, and the unused sentences of the chunk are
put back; then the longer of A and B loses one token at a time, from the front or the back with probability 1/2
each, until the pair fits. If ten draws only find the document itself, B comes from it and is_random_next is
False (LDDL's fix of Google's code, which kept the label True).
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import chain
from pathlib import Path

INPUT_FORMATS = ("auto", "lines", "lddl", "wikiextractor", "wikitext")

# LDDL tokenizes every sentence with truncation at 512 tokens; a longer "sentence" is almost always a table or a
# list, and anything past 512 tokens could never fit in a pair anyway.
MAX_SENTENCE_TOKENS = 512

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
    """One document as read from the corpus: where it starts and its paragraphs (untokenized)."""

    file_index: int
    offset: int  # byte offset of the document's first line in its file: its identity, independent of chunking
    paragraphs: list[str]


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
        files = sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith("."))
        if input_format == "lddl":
            files = [p for p in files if p.suffix == ".txt"]
    else:
        files = [root]
    files = [p for p in files if p.stat().st_size > 0]
    if not files:
        raise ValueError(f"{Path(path)}: corpus has no non-empty files")
    return [(file, detect_format(file) if input_format == "auto" else input_format) for file in files]


def detect_format(file: Path) -> str:
    """The format of one file by the "auto" rules in the module docstring."""
    if file.suffix in (".raw", ".tokens"):
        return "wikitext"
    with open(file, "rb") as reader:
        for raw_line in reader:
            line = raw_line.decode("utf-8", errors="replace").rstrip("\r\n")
            if not line.strip():
                continue
            if WIKITEXT_TITLE.match(line):
                return "wikitext"
            if line.startswith("<doc"):
                return "wikiextractor"
            return "lines"
    return "lines"


def _starts_document(line: str, input_format: str) -> bool:
    if input_format == "wikitext":
        return WIKITEXT_TITLE.match(line) is not None
    if input_format == "wikiextractor":
        return line.startswith("<doc")
    return True  # "lines" and "lddl": every line is a document


def read_documents(file: Path, file_index: int, input_format: str, start: int = 0,
                   end: int | None = None) -> Iterator[RawDocument]:
    """The documents whose first line starts at a byte offset in [start, end) of `file`.

    A document may run past `end`; lines before the first document start inside the range belong to the
    previous range. So consecutive ranges read every document exactly once, whatever the range boundaries.
    """
    end = file.stat().st_size if end is None else end
    with open(file, "rb") as reader:
        if start > 0:
            reader.seek(start - 1)
            reader.readline()  # finish the line that began before `start`
        offset = reader.tell()
        current: list[str] | None = None
        current_offset = 0
        in_first_lines = True  # lines at the very start of a file belong to no title: they form a document
        for raw_line in reader:
            try:
                line = raw_line.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError:
                raise ValueError(f"{file}: byte {offset}: not UTF-8 text") from None
            if _starts_document(line, input_format):
                if current is not None:
                    document = _parse_document(current, input_format, file_index, current_offset)
                    if document is not None:
                        yield document
                if offset >= end:
                    return
                current, current_offset = [line], offset
                in_first_lines = False
            elif current is not None:
                current.append(line)
            elif in_first_lines and start == 0 and offset < end:
                current, current_offset, in_first_lines = [line], offset, False
            offset += len(raw_line)
        if current is not None:
            document = _parse_document(current, input_format, file_index, current_offset)
            if document is not None:
                yield document


def _parse_document(lines: list[str], input_format: str, file_index: int, offset: int) -> RawDocument | None:
    if input_format == "lines":
        paragraphs = [lines[0].strip()]
    elif input_format == "lddl":
        parts = lines[0].strip().split(maxsplit=1)
        paragraphs = parts[1:]
    elif input_format == "wikitext":
        body = lines[1:] if WIKITEXT_TITLE.match(lines[0]) else lines
        paragraphs = [line.strip() for line in body if not WIKITEXT_HEADING.match(line)]
    elif input_format == "wikiextractor":
        body = [line for line in lines[1:] if line.strip()]
        if lines[0].startswith("<doc"):
            body = body[1:]  # the title, which WikiExtractor repeats as the first line
        paragraphs = []
        for line in body:
            if line.startswith("</doc>"):
                break
            paragraphs.append(line.strip())
    else:
        raise ValueError(f"input format {input_format!r} is not one of {', '.join(INPUT_FORMATS)}")
    paragraphs = [paragraph for paragraph in paragraphs if paragraph]
    return RawDocument(file_index, offset, paragraphs) if paragraphs else None


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
        temporary = output.with_name(output.name + ".tmp")
        with open(temporary, "w", encoding="utf-8", newline="\n") as writer:
            separator = ""
            for document in read_documents(path, file_index, file_format):
                writer.write(f"{separator}wiki-{document_id} {' '.join(document.paragraphs)}")
                separator = "\n"
                document_id += 1
        os.replace(temporary, output)
        written.append(output)
    return written


def convert_wikitext_to_lddl(wikitext_file: str | Path, lddl_source_dir: str | Path) -> Path:
    """Write one WikiText file as LDDL's `--wikipedia` input, `<dir>/en/0.txt` (convert_to_lddl_source)."""
    wikitext_file = Path(wikitext_file)
    if not wikitext_file.is_file():
        raise FileNotFoundError(f"{wikitext_file}: WikiText file not found")
    return convert_to_lddl_source([wikitext_file], lddl_source_dir, "wikitext")[0]


# A document for pair building: its sentences, each a list of token ids.
Document = Sequence[Sequence[int]]


@dataclass(frozen=True)
class SentencePair:
    """Segments A and B of one NSP example (token ids, no [CLS]/[SEP]) and whether B is a random next."""

    tokens_a: list[int]
    tokens_b: list[int]
    is_random_next: bool


def create_pairs_from_document(documents: Sequence[Document], document_index: int, max_seq_length: int,
                               short_seq_prob: float, rng: random.Random) -> list[SentencePair]:
    """The NSP pairs of documents[document_index] by the rule in the module docstring.

    Random next segments are drawn from `documents` (the document's partition), so all pairs of a partition
    are a function of the partition's documents and the state of `rng` only.
    """
    document = documents[document_index]
    max_num_tokens = max_seq_length - 3  # [CLS] A [SEP] B [SEP]
    target_seq_length = max_num_tokens
    if rng.random() < short_seq_prob:
        target_seq_length = _uniform_int(rng, 2, max_num_tokens)

    pairs = []
    chunk: list[Sequence[int]] = []
    chunk_length = 0
    i = 0
    while i < len(document):
        chunk.append(document[i])
        chunk_length += len(document[i])
        if i == len(document) - 1 or chunk_length >= target_seq_length:
            a_end = _uniform_int(rng, 1, len(chunk) - 1) if len(chunk) >= 2 else 1
            tokens_a = list(chain.from_iterable(chunk[:a_end]))
            tokens_b: list[int] = []
            if len(chunk) == 1 or rng.random() < 0.5:
                target_b_length = target_seq_length - len(tokens_a)
                for _ in range(10):
                    random_index = _uniform_int(rng, 0, len(documents) - 1)
                    if random_index != document_index:
                        break
                is_random_next = random_index != document_index
                random_document = documents[random_index]
                for sentence in random_document[_uniform_int(rng, 0, len(random_document) - 1):]:
                    tokens_b.extend(sentence)
                    if len(tokens_b) >= target_b_length:
                        break
                i -= len(chunk) - a_end  # put the unused sentences back
            else:
                is_random_next = False
                tokens_b = list(chain.from_iterable(chunk[a_end:]))
            tokens_a, tokens_b = truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
            pairs.append(SentencePair(tokens_a, tokens_b, is_random_next))
            chunk, chunk_length = [], 0
        i += 1
    return pairs


def _uniform_int(rng: random.Random, low: int, high: int) -> int:
    """A uniform integer in [low, high], like rng.randint but several times faster (its bias is below 2**-40)."""
    return low + int(rng.random() * (high - low + 1))


def truncate_seq_pair(tokens_a: list[int], tokens_b: list[int], max_num_tokens: int,
                      rng: random.Random) -> tuple[list[int], list[int]]:
    """Google's truncate_seq_pair: cut the longer segment one token at a time, front or back at random.

    Which segment loses a token depends only on the two lengths, so the number of cuts per segment is known in
    advance; the front/back choices are independent fair coins, drawn here as the bits of one random integer
    (the number of front cuts is their popcount), which has the same distribution as Google's token-by-token loop.
    """
    length_a, length_b = len(tokens_a), len(tokens_b)
    while length_a + length_b > max_num_tokens:
        if length_a > length_b:
            length_a -= 1
        else:
            length_b -= 1
    return _cut(tokens_a, len(tokens_a) - length_a, rng), _cut(tokens_b, len(tokens_b) - length_b, rng)


def _cut(tokens: list[int], num_cuts: int, rng: random.Random) -> list[int]:
    if num_cuts == 0:
        return tokens
    front = rng.getrandbits(num_cuts).bit_count()
    return tokens[front:len(tokens) - (num_cuts - front)]


def bin_id(num_tokens: int, bin_size: int, num_bins: int) -> int:
    """LDDL's bin rule: bin k holds sequences of k*bin_size+1 .. (k+1)*bin_size tokens; the last bin takes the rest."""
    return min((num_tokens - 1) // bin_size, num_bins - 1)
