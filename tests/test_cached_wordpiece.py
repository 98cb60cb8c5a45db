"""cached_wordpiece.CachedWordPiece gives the ids of tokenizer.BertTokenizer.batch_encode_ids, sentence by sentence:
on real text (WikiText-2, a file of the real Wikipedia), on characters whose normalization could in principle look
across a word boundary, cased and uncased, and when its cache is emptied between batches."""

from __future__ import annotations

import lzma

import pytest

from conftest import require_shared
from corpus import split_sentences
from preprocessing import cached_wordpiece
from preprocessing.cached_wordpiece import CachedWordPiece
from tokenizer import BertTokenizer

# Each stresses one step of Google's normalization next to a space or to ASCII punctuation (where the text is cut
# before the cache lookup): final sigma, İ's lowercase with a combining dot, combining marks after a space and
# after a comma, control and format characters that vanish (joining their neighbours), other whitespace, NBSP,
# a ligature, CJK ideographs, a word too long for WordPiece, accents, dotted acronyms, brackets and quotes.
HARD_SENTENCES = [
    "ΟΔΟΣ ΟΔΟΣ. ΣΑΣ'Σ ΣΑΣ,Σ (Σ) ς.",
    "İstanbul İİ Iİ and İ.",
    "a \u0301b x,\u0301y z\u0301,w ,\u0301 \u0301",
    "foo\x1fbar a\x00b c\u200bd e\ufeff f\ufffdg h\x85i",
    "tab\there nbsp\xa0here em\u2003space line\u2028sep para\u2029sep",
    "ﬁne ﬂow ẞtraße Straße",
    "中文字 日本語のテキスト 한국어",
    "w" * 150 + " " + "ab" * 60 + ".",
    "naïve café résumé Ångström Øresund",
    "U.S.A. e.g. Ph.D. (Paris), 'quoted' \"double\" [note] {brace} `tick` ~tilde",
    "numbers 3.14159 1,000,000 12:30 50% $5 #1 @home a/b c\\d",
    "emoji 😀👍🏽 and 🇫🇷",
    "",
    "   leading and trailing   ",
]


@pytest.fixture(scope="module", params=["uncased", "cased"])
def tokenizer(request) -> BertTokenizer:
    if request.param == "uncased":
        return BertTokenizer(str(require_shared("vocab", "bert-uncased-vocab.txt")))
    return BertTokenizer(str(require_shared("vocab", "bert-cased-vocab.txt")), do_lower_case=False)


def reference(tokenizer: BertTokenizer, sentences: list[str]) -> tuple[list[int], list[int]]:
    encoded = tokenizer.batch_encode_ids(sentences)
    return [token for ids in encoded for token in ids], [len(ids) for ids in encoded]


def cached(encoder: CachedWordPiece, sentences: list[str]) -> tuple[list[int], list[int]]:
    ids, lengths = encoder.encode(sentences)
    return ids.tolist(), lengths.tolist()


def test_hard_characters(tokenizer):
    encoder = CachedWordPiece(tokenizer)
    assert cached(encoder, HARD_SENTENCES) == reference(tokenizer, HARD_SENTENCES)
    # A second pass, every word now cached, gives the same.
    assert cached(encoder, HARD_SENTENCES[::-1]) == reference(tokenizer, HARD_SENTENCES[::-1])
    assert cached(encoder, []) == ([], [])


def test_real_text_in_batches(tokenizer, monkeypatch):
    """WikiText-2's test split and the first file of ../shared's Wikipedia, in batches of 1000 sentences; then again
    with a cache emptied every few batches (a cache of 5000 words)."""
    wikitext = require_shared("data", "wikitext-2", "wiki.test.raw").read_text(encoding="utf-8")
    wikipedia = lzma.decompress(require_shared("data", "wikipedia", "en-2015", "AA", "wiki_00.xz").read_bytes())
    sentences = [sentence for text in (wikitext, wikipedia.decode("utf-8")) for line in text.splitlines()
                 for sentence in split_sentences(line)]
    batches = [sentences[start:start + 1000] for start in range(0, len(sentences), 1000)]
    assert len(batches) > 10
    expected = [reference(tokenizer, batch) for batch in batches]
    encoder = CachedWordPiece(tokenizer)
    assert [cached(encoder, batch) for batch in batches] == expected
    monkeypatch.setattr(cached_wordpiece, "MAX_CACHED_WORDS", 5000)
    small = CachedWordPiece(tokenizer)
    cleared = []
    for batch in batches:
        before = len(small.word_index)
        assert cached(small, batch) == reference(tokenizer, batch)
        cleared.append(len(small.word_index) < before)
    assert sum(cleared) >= 3 and len(small.word_index) <= 5000
