"""BERT WordPiece tokenizer: Google's original BERT tokenization, exact, with character offsets; and a vocab trainer.

Google's rules (google-research/bert tokenization.py, Devlin et al. 2018): drop NUL, U+FFFD and control characters
(Cc/Cf except tab/newline/CR), map whitespace to a space, put spaces around CJK ideographs, split on whitespace,
for uncased vocabs lowercase and strip accents (NFD, then drop Mn), split off every punctuation character (Unicode
P* and all non-alphanumeric ASCII), then greedy longest-match-first WordPiece with "##" continuations; a word longer
than `max_input_chars_per_word` characters becomes [UNK] (100 by default, as in HF's BertTokenizer;
Google's WordpieceTokenizer defaults to 200).

How it runs: the text normalization is done here with C-speed `str` methods (`translate` through lazily filled
per-character tables built from `unicodedata`, whole-text `lower()` and NFD), so the character classes are exactly
those of the running Python, as in Google's code. The HF `tokenizers` engine then only splits on spaces and runs
WordPiece. HF's own BertNormalizer/BertPreTokenizer are not used because they disagree with Google's rules (see
tests/test_tokenizer.py::test_plain_hf_bert_pipeline_disagrees_with_google): they drop private-use characters, use
older Unicode tables for punctuation, marks and format characters, lowercase a final capital sigma to σ instead of ς,
and start CJK Extension E at U+2B920 instead of U+2B820. tests/test_tokenizer.py proves this module equal to a
pure-Python transcription of Google's rules on WikiText-2, SQuAD dev, the code points and hand-picked Unicode.

Command line: `python tokenizer.py train-vocab --input CORPORA... --vocab-size N --output vocab.txt [--cased]`.
"""

from __future__ import annotations

import argparse
import os
import sys
import unicodedata
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Encoding, Tokenizer, models, pre_tokenizers, trainers

from corpus import document_sentences, find_corpus_files, read_documents
from utils.atomic_io import atomic_write_text
from utils.cli import run_main

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
# A trained vocabulary's alphabet: its vocab_size // ALPHABET_SHARE most frequent characters, at least MIN_ALPHABET
# (ASCII's size); words holding another character become [UNK]. Without a limit every character of the corpus enters
# with its ## form: 4,909 of the 8,192 entries trained on the 2015 Wikipedia corpus were single characters, most of
# them seen a few times.
ALPHABET_SHARE, MIN_ALPHABET = 16, 128

# Stand-in for a lone surrogate (which the Rust engine cannot take). Google's rules keep a surrogate and no vocab
# entry can match it, so its word becomes [UNK]; U+FFFD is always removed from the text, so vocab entries holding it
# are unreachable and are left out of the engine, and the stand-in then also makes its word [UNK].
SURROGATE_STAND_IN = "\ufffd"


def is_control(char: str) -> bool:
    """Google's _is_control: categories Cc and Cf, except tab, newline and CR (counted as whitespace)."""
    return char not in "\t\n\r" and unicodedata.category(char) in ("Cc", "Cf")


def is_whitespace(char: str) -> bool:
    """Google's _is_whitespace: space, tab, newline, CR and category Zs."""
    return char in " \t\n\r" or unicodedata.category(char) == "Zs"


def is_punctuation(char: str) -> bool:
    """Google's _is_punctuation: every non-alphanumeric printable ASCII character and Unicode category P*."""
    code = ord(char)
    if 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def is_cjk_ideograph(char: str) -> bool:
    """Google's _is_chinese_char: the CJK Unified Ideographs blocks and extensions, and the compatibility blocks."""
    code = ord(char)
    return (
        0x4E00 <= code <= 0x9FFF
        or 0x3400 <= code <= 0x4DBF
        or 0x20000 <= code <= 0x2A6DF
        or 0x2A700 <= code <= 0x2B73F
        or 0x2B740 <= code <= 0x2B81F
        or 0x2B820 <= code <= 0x2CEAF
        or 0xF900 <= code <= 0xFAFF
        or 0x2F800 <= code <= 0x2FA1F
    )


class _CharTable(dict):
    """A `str.translate` table (code point -> replacement string) filled on first sight of each character.

    `lengths(codes)` gives the replacement lengths of a code-point array, from a flat array over all code points
    (1 MB) filled alongside, so that tracking where characters move costs numpy indexing, not a Python loop.
    """

    UNKNOWN = 255

    def __init__(self, rule: Callable[[str], str]):
        super().__init__()
        self.rule = rule
        self._lengths = np.full(0x110000, self.UNKNOWN, dtype=np.uint8)

    def __missing__(self, code: int) -> str:
        replacement = self[code] = self.rule(chr(code))
        self._lengths[code] = len(replacement)
        return replacement

    def lengths(self, codes: np.ndarray) -> np.ndarray:
        lengths = self._lengths[codes]
        unknown = codes[lengths == self.UNKNOWN]
        if unknown.size:
            for code in np.unique(unknown).tolist():
                self._lengths[code] = len(self[code])
            lengths = self._lengths[codes]
        return lengths


def _clean_rule(split_punctuation: bool) -> Callable[[str], str]:
    """Google's _clean_text and _tokenize_chinese_chars for one character (and the punctuation split if asked)."""

    def rule(char: str) -> str:
        if char in "\x00\ufffd" or is_control(char):
            return ""
        # isspace() adds U+2028/U+2029, which Google's whitespace_tokenize (str.split) also splits on.
        if is_whitespace(char) or char.isspace():
            return " "
        if "\ud800" <= char <= "\udfff":
            return SURROGATE_STAND_IN
        if is_cjk_ideograph(char) or (split_punctuation and is_punctuation(char)):
            return f" {char} "
        return char

    return rule


def _strip_accents_rule(char: str) -> str:
    """Google's _run_strip_accents (after NFD) and _run_split_on_punc for one character."""
    if unicodedata.category(char) == "Mn":
        return ""
    return f" {char} " if is_punctuation(char) else char


def _translate_tracked(text: str, table: _CharTable, sources: np.ndarray) -> tuple[str, np.ndarray]:
    """text.translate(table), and for every output character the source index of the input character it came from."""
    if text.isascii():
        codes = np.frombuffer(text.encode("ascii"), dtype=np.uint8)
    else:  # surrogatepass: lone surrogates are characters here too
        codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    return text.translate(table), np.repeat(sources, table.lengths(codes))


def _nfd_tracked(text: str, sources: np.ndarray) -> tuple[str, np.ndarray]:
    """NFD of text with source indices: decompose each character, then canonically reorder combining marks.

    That is the definition of NFD (Unicode 15, section 3.11), so the result equals unicodedata.normalize("NFD", text).
    """
    pieces = [unicodedata.normalize("NFD", char) for char in text]
    decomposed = "".join(pieces)
    sources = np.repeat(sources, list(map(len, pieces)))
    normalized = unicodedata.normalize("NFD", text)
    if decomposed == normalized:
        return normalized, sources
    chars, order = list(decomposed), list(range(len(decomposed)))
    start = 0
    while start < len(chars):
        end = start
        while end < len(chars) and unicodedata.combining(chars[end]):
            end += 1
        if end - start > 1:
            order[start:end] = sorted(order[start:end], key=lambda index: unicodedata.combining(chars[index]))
        start = end + 1
    if "".join(chars[index] for index in order) != normalized:
        raise AssertionError(f"canonical reordering did not reproduce NFD of {text!r}")
    return normalized, sources[order]


class BasicNormalizer:
    """Google's BasicTokenizer as a string transform: normalize(text) is its words joined by single spaces."""

    def __init__(self, do_lower_case: bool = True):
        self.do_lower_case = do_lower_case
        # Uncased: punctuation is split after lowercasing and NFD (which can turn U+1FEF into "`"), as Google does.
        self._clean_table = _CharTable(_clean_rule(split_punctuation=not do_lower_case))
        self._strip_accents_table = _CharTable(_strip_accents_rule)
        # For ASCII text lower() and NFD cannot add punctuation or marks, so one table does every step.
        self._ascii_table = _CharTable(_clean_rule(split_punctuation=True))

    def __reduce__(self) -> tuple:
        # The tables hold closures, which do not pickle; they refill quickly, so rebuild instead (worker processes).
        return BasicNormalizer, (self.do_lower_case,)

    def normalize(self, text: str) -> str:
        if text.isascii():
            text = text.translate(self._ascii_table)
            return text.lower() if self.do_lower_case else text
        text = text.translate(self._clean_table)
        if self.do_lower_case:
            # Lowercasing the whole text equals Google's per-word lower(): the spaces between words break the
            # final-sigma context, the only context str.lower() looks at.
            text = unicodedata.normalize("NFD", text.lower()).translate(self._strip_accents_table)
        return text

    def normalize_tracked(self, text: str) -> tuple[str, np.ndarray]:
        """normalize(text), and for every character of it the index in `text` of the character it came from."""
        sources = np.arange(len(text))
        if text.isascii():
            text, sources = _translate_tracked(text, self._ascii_table, sources)
            return (text.lower() if self.do_lower_case else text), sources
        text, sources = _translate_tracked(text, self._clean_table, sources)
        if self.do_lower_case:
            lowered = text.lower()
            if len(lowered) != len(text):  # U+0130 lowercases to two characters
                sources = np.repeat(sources, [len(char.lower()) for char in text])
            text = lowered
            if not unicodedata.is_normalized("NFD", text):
                text, sources = _nfd_tracked(text, sources)
            text, sources = _translate_tracked(text, self._strip_accents_table, sources)
        return text, sources


@dataclass(frozen=True)
class PairEncoding:
    """`[CLS] a [SEP] b [SEP]` (or `[CLS] a [SEP]`), one entry per token in every list.

    offsets[i] is the (start, end) character span of token i in the text it came from, (0, 0) for specials;
    sequence_ids[i] is 0 for text_a, 1 for text_b and None for [CLS]/[SEP].
    """

    tokens: list[str]
    input_ids: list[int]
    token_type_ids: list[int]
    offsets: list[tuple[int, int]]
    sequence_ids: list[int | None]


def load_vocab(vocab_file: str | Path) -> dict[str, int]:
    """token -> line index, read as Google's load_vocab does (lines stripped; a repeated token keeps its last id)."""
    path = Path(vocab_file)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: vocab file not found")
    try:
        with open(path, encoding="utf-8") as reader:
            vocab = {line.strip(): index for index, line in enumerate(reader)}
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not a UTF-8 vocab file (byte {error.object[error.start]:#04x}: {error.reason})"
                         ) from None
    if not vocab:
        raise ValueError(f"{path}: vocab file is empty")
    missing = [token for token in SPECIAL_TOKENS if token not in vocab]
    if missing:
        raise ValueError(f"{path}: vocab lacks the special token(s) {' '.join(missing)}")
    return vocab


def vocab_looks_cased(vocab: dict[str, int]) -> bool:
    """True when more than 1% of the non-special tokens hold an uppercase letter (an uncased vocab has none)."""
    ordinary = [token for token in vocab if not (token.startswith("[") and token.endswith("]"))]
    with_upper = sum(1 for token in ordinary if token != token.lower())
    return with_upper > 0.01 * max(len(ordinary), 1)


class BertTokenizer:
    """Google-BERT tokenization of text into WordPiece tokens and ids, with character offsets."""

    def __init__(self, vocab_file: str, do_lower_case: bool = True, max_input_chars_per_word: int = 100):
        self.vocab_file = str(vocab_file)
        self.do_lower_case = do_lower_case
        self.max_input_chars_per_word = max_input_chars_per_word
        self.vocab = load_vocab(vocab_file)
        self.ids_to_tokens = {index: token for token, index in self.vocab.items()}
        looks_cased = vocab_looks_cased(self.vocab)
        if looks_cased and do_lower_case:
            warnings.warn(
                f"{vocab_file}: vocab looks cased but do_lower_case=True; its uppercase tokens are unreachable",
                stacklevel=2,
            )
        if not looks_cased and not do_lower_case:
            warnings.warn(
                f"{vocab_file}: vocab looks uncased but do_lower_case=False; uppercase words will split badly",
                stacklevel=2,
            )
        self.pad_token_id = self.vocab["[PAD]"]
        self.unk_token_id = self.vocab["[UNK]"]
        self.cls_token_id = self.vocab["[CLS]"]
        self.sep_token_id = self.vocab["[SEP]"]
        self.mask_token_id = self.vocab["[MASK]"]
        self.basic = BasicNormalizer(do_lower_case)
        self._engine = Tokenizer(
            models.WordPiece(
                {token: index for token, index in self.vocab.items() if SURROGATE_STAND_IN not in token},
                unk_token="[UNK]",
                max_input_chars_per_word=max_input_chars_per_word,
            )
        )
        # After normalize() the only whitespace left is U+0020, so the engine's whitespace split is Google's.
        self._engine.pre_tokenizer = pre_tokenizers.WhitespaceSplit()

    @property
    def vocab_size(self) -> int:
        """Largest id + 1, the embedding rows needed (the line count; more than len(vocab) if a token repeats)."""
        return max(self.vocab.values()) + 1

    def tokenize(self, text: str) -> list[str]:
        return self._engine.encode(self.basic.normalize(text), add_special_tokens=False).tokens

    def batch_tokenize(self, texts: list[str]) -> list[list[str]]:
        encodings = self._engine.encode_batch([self.basic.normalize(text) for text in texts], add_special_tokens=False)
        return [encoding.tokens for encoding in encodings]

    def batch_encode_ids(self, texts: list[str]) -> list[list[int]]:
        """WordPiece ids of many texts at once, without [CLS]/[SEP]."""
        encodings = self._engine.encode_batch_fast(
            [self.basic.normalize(text) for text in texts], add_special_tokens=False
        )
        return [encoding.ids for encoding in encodings]

    def convert_tokens_to_ids(self, tokens: list[str]) -> list[int]:
        return [self.vocab.get(token, self.unk_token_id) for token in tokens]

    def convert_ids_to_tokens(self, ids: list[int]) -> list[str]:
        try:
            return [self.ids_to_tokens[index] for index in ids]
        except KeyError as error:
            raise ValueError(f"{self.vocab_file}: token id {error.args[0]} is not in the vocab") from None

    def _offsets(self, encoding: Encoding, sources: np.ndarray) -> list[tuple[int, int]]:
        """Spans in the original text of the engine's tokens, from their spans in the normalized text."""
        if not encoding.offsets:
            return []
        spans = np.asarray(encoding.offsets)
        starts, ends = sources[spans[:, 0]].tolist(), (sources[spans[:, 1] - 1] + 1).tolist()
        return list(zip(starts, ends, strict=True))

    def _encode_tracked(self, text: str) -> tuple[list[str], list[int], list[tuple[int, int]]]:
        normalized, sources = self.basic.normalize_tracked(text)
        encoding = self._engine.encode(normalized, add_special_tokens=False)
        return encoding.tokens, encoding.ids, self._offsets(encoding, sources)

    def tokenize_with_offsets(self, text: str) -> tuple[list[str], list[tuple[int, int]]]:
        """Tokens and their (start, end) spans in `text`: from the first to the last source character of the piece.

        A character removed by normalization (a control character, a stripped accent) belongs to no piece, so a
        trailing combining accent falls outside the span of the piece before it.
        """
        tokens, _, offsets = self._encode_tracked(text)
        return tokens, offsets

    def batch_tokenize_with_offsets(self, texts: list[str]) -> list[tuple[list[str], list[tuple[int, int]]]]:
        """tokenize_with_offsets of many texts at once."""
        normalized, sources = zip(*map(self.basic.normalize_tracked, texts), strict=True) if texts else ((), ())
        encodings = self._engine.encode_batch(list(normalized), add_special_tokens=False)
        return [
            (encoding.tokens, self._offsets(encoding, text_sources))
            for encoding, text_sources in zip(encodings, sources, strict=True)
        ]

    def encode_pair(self, text_a: str, text_b: str | None = None) -> PairEncoding:
        tokens, ids, offsets = ["[CLS]"], [self.cls_token_id], [(0, 0)]
        token_type_ids: list[int] = [0]
        sequence_ids: list[int | None] = [None]
        for sequence_id, text in enumerate([text_a] if text_b is None else [text_a, text_b]):
            text_tokens, text_ids, text_offsets = self._encode_tracked(text)
            tokens += [*text_tokens, "[SEP]"]
            ids += [*text_ids, self.sep_token_id]
            offsets += [*text_offsets, (0, 0)]
            token_type_ids += [sequence_id] * (len(text_tokens) + 1)
            sequence_ids += [sequence_id] * len(text_tokens) + [None]
        return PairEncoding(tokens, ids, token_type_ids, offsets, sequence_ids)


def _sentences(corpora: list[str]) -> Iterator[str]:
    """Every sentence of the corpora, read as the preprocessors read them (corpus.py: any format, compressed or not)."""
    for corpus in corpora:
        for file_index, (file, input_format) in enumerate(find_corpus_files(corpus, "auto")):
            for document in read_documents(file, file_index, input_format):
                yield from document_sentences(document)


def train_vocab(corpora: list[str], vocab_size: int, output: str, do_lower_case: bool = True) -> list[str]:
    """Train a WordPiece vocabulary on corpora normalized by Google's rules; write it atomically, one token a line.

    A corpus is a file or a folder in any format corpus.py reads, e.g. WikiExtractor's output compressed with xz, so
    the vocabulary sees the text the shards are made of. HF's WordPieceTrainer learns the pieces (byte-pair-style
    merges of frequent adjacent pieces, as in Sennrich et al. 2016; Google's own WordPiece trainer is unpublished).
    The five BERT special tokens come first.
    """
    basic = BasicNormalizer(do_lower_case)
    engine = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    engine.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), show_progress=False,
                                        limit_alphabet=max(MIN_ALPHABET, vocab_size // ALPHABET_SHARE))
    engine.train_from_iterator((basic.normalize(sentence) for sentence in _sentences(corpora)), trainer)
    tokens = [token for token, _ in sorted(engine.get_vocab().items(), key=lambda item: item[1])]
    atomic_write_text(output, "".join(f"{token}\n" for token in tokens))  # the usual permissions, not 0600
    return tokens


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser("train-vocab", help="train a WordPiece vocabulary on corpora")
    train.add_argument("--input", nargs="+", required=True,
                       help="corpora, one or more: files or folders in any format the preprocessors read (corpus.py), "
                            "compressed or not")
    train.add_argument("--vocab-size", type=int, required=True, help="size of the vocabulary, specials included")
    train.add_argument("--output", required=True, help="vocab file to write, one token a line")
    train.add_argument("--cased", action="store_true", help="keep case and accents (default: uncased, as BERT-base)")
    args = parser.parse_args(argv)
    for path in args.input:
        if not os.path.exists(path):
            parser.error(f"--input {path}: not found")
    if args.vocab_size <= len(SPECIAL_TOKENS):
        parser.error(f"--vocab-size {args.vocab_size}: must exceed the {len(SPECIAL_TOKENS)} special tokens")
    if not os.path.isdir(os.path.dirname(os.path.abspath(args.output))):
        parser.error(f"--output {args.output}: directory does not exist")
    tokens = train_vocab(args.input, args.vocab_size, args.output, do_lower_case=not args.cased)
    print(f"{args.output}: {len(tokens)} tokens")


if __name__ == "__main__":
    sys.exit(run_main(main, "tokenizer.py"))
