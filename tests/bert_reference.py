"""Reference BERT tokenization for tests: Google's rules transcribed step by step in plain Python, with offsets.

This follows the algorithm of google-research/bert tokenization.py (BasicTokenizer then WordpieceTokenizer) one step
at a time, on lists of (character, source index) pairs, so that every output piece also carries the span of text it
came from. It shares no code with tokenizer.py, which reaches the same result by whole-string transforms and the
HF engine; the tests compare the two. Per-character classifications are memoised: they are pure functions of the
character, so this changes speed, not results.
"""

from __future__ import annotations

import functools
import unicodedata

CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)


@functools.cache
def dropped(char: str) -> bool:
    """Removed by _clean_text: NUL, U+FFFD, and control characters (Cc, Cf) other than tab, newline, CR."""
    if char in ("\x00", "\ufffd"):
        return True
    return char not in ("\t", "\n", "\r") and unicodedata.category(char) in ("Cc", "Cf")


@functools.cache
def spacelike(char: str) -> bool:
    """Turned into a space by _clean_text."""
    return char in (" ", "\t", "\n", "\r") or unicodedata.category(char) == "Zs"


@functools.cache
def cjk(char: str) -> bool:
    return any(low <= ord(char) <= high for low, high in CJK_RANGES)


@functools.cache
def punctuation(char: str) -> bool:
    code = ord(char)
    ascii_symbol = 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126
    return ascii_symbol or unicodedata.category(char)[0] == "P"


@functools.cache
def nonspacing_mark(char: str) -> bool:
    return unicodedata.category(char) == "Mn"


def lowercase(word: str, sources: list[int]) -> tuple[str, list[int]]:
    """str.lower() on the whole word (its final-sigma rule needs the neighbours); sources via per-character lengths."""
    lowered = word.lower()
    if len(lowered) != len(word):
        sources = [source for char, source in zip(word, sources, strict=True) for _ in char.lower()]
    return lowered, sources


def strip_accents(word: str, sources: list[int]) -> tuple[str, list[int]]:
    """NFD of the word, then drop Mn characters.

    Sources come from decomposing each character alone; when NFD also reorders combining marks the characters are
    still NFD's, and a reordered mark keeps the source of its position before reordering.
    """
    decomposed = unicodedata.normalize("NFD", word)
    if decomposed != word:
        sources = [
            source for char, source in zip(word, sources, strict=True) for _ in unicodedata.normalize("NFD", char)
        ]
    if decomposed.isascii():  # no marks to strip
        return decomposed, sources
    kept = [position for position, char in enumerate(decomposed) if not nonspacing_mark(char)]
    return "".join(decomposed[position] for position in kept), [sources[position] for position in kept]


def split_punctuation(word: str, sources: list[int]) -> list[tuple[str, list[int]]]:
    """_run_split_on_punc: every punctuation character becomes a word of its own."""
    pieces: list[tuple[str, list[int]]] = []
    start = 0
    for position, char in enumerate(word):
        if punctuation(char):
            if position > start:
                pieces.append((word[start:position], sources[start:position]))
            pieces.append((char, sources[position : position + 1]))
            start = position + 1
    if start < len(word):
        pieces.append((word[start:], sources[start:]))
    return pieces


def whitespace_tokenize(text: str, sources: list) -> list[tuple[str, list]]:
    """whitespace_tokenize (str.split()), each word with the sources of its characters."""
    words, position = [], 0
    for word in text.split():
        position = text.index(word, position)
        words.append((word, sources[position : position + len(word)]))
        position += len(word)
    return words


@functools.cache
def clean_char(char: str) -> str:
    """_clean_text then _tokenize_chinese_chars on one character."""
    if dropped(char):
        return ""
    if spacelike(char):
        return " "
    return f" {char} " if cjk(char) else char


def basic_tokenize(text: str, do_lower_case: bool) -> list[tuple[str, list[int]]]:
    """BasicTokenizer.tokenize: the words of `text`, each with the source index of every character."""
    cleaned = [clean_char(char) for char in text]
    sources = [index for index, replacement in enumerate(cleaned) for _ in replacement]
    words = []
    for word, word_sources in whitespace_tokenize("".join(cleaned), sources):
        if do_lower_case:
            word, word_sources = strip_accents(*lowercase(word, word_sources))
        words += split_punctuation(word, word_sources)
    # Google ends with whitespace_tokenize(" ".join(words)), which drops the words left empty by accent stripping.
    joined_sources = [source for _, word_sources in words for source in [-1, *word_sources]]
    return whitespace_tokenize(" ".join(word for word, _ in words), joined_sources[1:])


@functools.lru_cache(maxsize=1 << 20)
def wordpiece(word: str, vocab: frozenset[str], max_chars: int) -> tuple[str, ...] | None:
    """WordpieceTokenizer on one word: greedy longest match first; None when the word becomes [UNK]."""
    if len(word) > max_chars:
        return None
    pieces, start = [], 0
    while start < len(word):
        end = len(word)
        while end > start:
            candidate = word[start:end] if start == 0 else "##" + word[start:end]
            if candidate in vocab:
                break
            end -= 1
        if end == start:
            return None
        pieces.append(candidate)
        start = end
    return tuple(pieces)


def tokenize(text: str, vocab: frozenset[str], do_lower_case: bool, max_chars: int = 100) -> list[tuple[str, int, int]]:
    """(piece, start, end) for every WordPiece token of `text`; [UNK] spans its whole word."""
    output = []
    for word, sources in basic_tokenize(text, do_lower_case):
        pieces = wordpiece(word, vocab, max_chars)
        if pieces is None:
            output.append(("[UNK]", sources[0], sources[-1] + 1))
            continue
        position = 0
        for piece in pieces:
            length = len(piece) - (2 if position else 0)
            output.append((piece, sources[position], sources[position + length - 1] + 1))
            position += length
    return output
