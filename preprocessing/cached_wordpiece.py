"""Many sentences -> WordPiece ids, fast: each space-separated word of the raw text is tokenized once per process and
looked up afterwards. The preprocessing pipeline's stage 1 tokenizes a whole corpus this way.

Why a word's ids can be cached: tokenizer.BertTokenizer normalizes text character by character (Google's cleaning,
lowercasing, NFD and accent stripping, spaces around punctuation and CJK ideographs) and then runs WordPiece on
each whitespace-separated word of the result on its own. A space stays a space through every step, and none of
the steps looks across one: str.lower()'s final-sigma rule stops at a space (not case-ignorable), canonical
reordering stops at one (a starter), and every other step maps one character at a time. So the ids of a text are
the ids of its space-separated pieces one after the other, and a piece (with its punctuation, case and any other
whitespace in it) always gets the same ids. An ASCII punctuation character is always a word of its own after
normalization (in the cased and uncased rules, ASCII or not), so the text is also cut around each one before the
lookup, and "Paris," and "Paris." share "Paris". That cut is exact but for one character: the capital sigma Σ,
the only one whose lowercase depends on its neighbours (σ, or ς at the end of a word), and some ASCII punctuation
(' . : ^ `) is transparent to that rule ("ΣΑΣ'Σ" lowercases to "σασ'ς"), so a sentence holding a Σ is tokenized
whole by BertTokenizer.batch_encode_ids instead. Words repeat heavily (Zipf), so most are found in the cache. A new
word is normalized on its own (BertTokenizer.basic) and the words that makes are looked up in a second cache, of
normalized words, whose own new entries go through BertTokenizer.batch_encode_ids, which stays the one definition
of the ids (it normalizes again, which changes nothing: normalization is idempotent). tests/test_cached_wordpiece.py
compares the two on real text.

Arrow splits a batch's text into words and finds the distinct ones, so Python sees each distinct word of a batch
once; the word cache holds each word's ids in flat arrays, so the ids of a batch are gathered with numpy, not
concatenated in Python.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain, repeat

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tokenizer import BertTokenizer

MAX_CACHED_WORDS = 2**20  # the caches are emptied when the word cache grows past this, to bound a worker's memory
_SENTENCE_BREAK = "\n"  # never inside a sentence (sentences come from lines), so a word of its own marks the end
# Google's punctuation in ASCII (tokenizer.is_punctuation): every non-alphanumeric printable character.
_ASCII_PUNCTUATION = r"([!-/:-@\[-`{-~])"
_CAPITAL_SIGMA = "\u03a3"


class CachedWordPiece:
    """WordPiece ids of sentences through a per-word cache (module docstring); the same ids as
    tokenizer.batch_encode_ids."""

    def __init__(self, tokenizer: BertTokenizer):
        self.tokenizer = tokenizer
        self._clear()

    def _clear(self) -> None:
        self.word_index: dict[str, int] = {_SENTENCE_BREAK: 0}  # raw word -> its row in the arrays below
        self.normalized_ids: dict[str, tuple[int, ...]] = {}  # normalized word -> its ids
        self.flat_ids = np.zeros(0, dtype=np.int32)  # the ids of every cached word, one word after the other
        self.starts = np.zeros(1, dtype=np.int64)  # [row] where the word's ids start in flat_ids
        self.lengths = np.zeros(1, dtype=np.int64)  # [row] how many ids the word has (the break: none)

    def _add(self, words: list[str]) -> None:
        """Cache words that are not cached yet."""
        pieces = [self.tokenizer.basic.normalize(word).split() for word in words]
        new = list(dict.fromkeys(piece for word_pieces in pieces for piece in word_pieces
                                 if piece not in self.normalized_ids))
        self.normalized_ids.update(zip(new, map(tuple, self.tokenizer.batch_encode_ids(new)), strict=True))
        ids = [list(chain.from_iterable(map(self.normalized_ids.__getitem__, word_pieces))) for word_pieces in pieces]
        lengths = np.array([len(word_ids) for word_ids in ids], dtype=np.int64)
        first_row = len(self.lengths)
        self.word_index.update(zip(words, range(first_row, first_row + len(words)), strict=True))
        self.starts = np.concatenate([self.starts, len(self.flat_ids) + np.cumsum(lengths) - lengths])
        self.lengths = np.concatenate([self.lengths, lengths])
        self.flat_ids = np.concatenate([self.flat_ids, np.fromiter(chain.from_iterable(ids), dtype=np.int32,
                                                                   count=int(lengths.sum()))])

    def encode(self, sentences: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(ids of all the sentences one after the other as int32, the number of ids of each sentence)."""
        with_sigma = [index for index, sentence in enumerate(sentences) if _CAPITAL_SIGMA in sentence]
        if not with_sigma:
            return self._encode_cached(sentences)
        # Sentences with a capital sigma are tokenized whole (module docstring); the rest through the cache.
        is_cached = np.ones(len(sentences), dtype=bool)
        is_cached[with_sigma] = False
        cached_ids, cached_lengths = self._encode_cached([sentences[index] for index in np.flatnonzero(is_cached)])
        whole = self.tokenizer.batch_encode_ids([sentences[index] for index in with_sigma])
        lengths = np.zeros(len(sentences), dtype=np.int64)
        lengths[is_cached] = cached_lengths
        lengths[with_sigma] = [len(ids) for ids in whole]
        ids = np.zeros(int(lengths.sum()), dtype=np.int32)
        token_is_cached = np.repeat(is_cached, lengths)
        ids[token_is_cached] = cached_ids
        ids[~token_is_cached] = np.fromiter(chain.from_iterable(whole), dtype=np.int32,
                                            count=int((~token_is_cached).sum()))
        return ids, lengths

    def _encode_cached(self, sentences: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """encode() of sentences without a capital sigma, through the word cache."""
        if not sentences:
            return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int64)
        # Arrow cuts the text around ASCII punctuation and at spaces, and finds the distinct words, in C++; only
        # those reach Python.
        # (Built from and read back through buffers: pa.array and to_numpy would import pandas, a second per worker.)
        data = f" {_SENTENCE_BREAK} ".join(sentences).encode("utf-8")
        text = pa.LargeStringArray.from_buffers(1, pa.py_buffer(np.array([0, len(data)], dtype=np.int64)),
                                                pa.py_buffer(data))
        spaced = pc.replace_substring_regex(text, pattern=_ASCII_PUNCTUATION, replacement=r" \1 ")
        encoded = pc.split_pattern(spaced, " ").flatten().dictionary_encode()
        distinct = encoded.dictionary.to_pylist()
        indices = encoded.indices
        distinct_of_word = np.frombuffer(indices.buffers()[1], dtype=np.int32)[
            indices.offset:indices.offset + len(indices)]
        distinct_rows = np.fromiter(map(self.word_index.get, distinct, repeat(-1)), dtype=np.int64,
                                    count=len(distinct))
        missing = np.flatnonzero(distinct_rows < 0)
        if len(missing):
            if len(self.word_index) + len(missing) > MAX_CACHED_WORDS:
                self._clear()
                missing = np.arange(len(distinct))
            self._add([distinct[index] for index in missing.tolist() if distinct[index] not in self.word_index])
            distinct_rows[missing] = [self.word_index[distinct[index]] for index in missing.tolist()]
        rows = distinct_rows[distinct_of_word]
        word_lengths = self.lengths[rows]
        # Sentence i holds the words after the i-th break; its ids are its words' ids.
        sentence_of_word = np.cumsum(rows == 0)
        sentence_lengths = np.bincount(sentence_of_word, weights=word_lengths, minlength=len(sentences))
        word_output_starts = np.cumsum(word_lengths) - word_lengths
        gather = np.repeat(self.starts[rows] - word_output_starts, word_lengths) + np.arange(int(word_lengths.sum()))
        return self.flat_ids[gather], sentence_lengths.astype(np.int64)
