"""Tests for pretraining_pairs.py: corpus formats, the offline sentence splitter and Google's NSP pair rule."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from conftest import require_shared
from pretraining_pairs import (
    bin_id,
    convert_to_lddl_source,
    convert_wikitext_to_lddl,
    create_pairs_from_document,
    detect_format,
    document_sentences,
    find_corpus_files,
    read_documents,
    split_sentences,
    truncate_seq_pair,
)


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


def test_non_utf8_file_names_the_file(tmp_path):
    file = tmp_path / "bad.txt"
    file.write_bytes(b"good line\n\xff\xfe bad line\n")
    with pytest.raises(ValueError, match=r"bad\.txt: byte 10: not UTF-8"):
        list(read_documents(file, 0, "lines"))


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


def one_token_documents(num_documents: int, rng: random.Random) -> list[list[list[int]]]:
    """Documents whose sentences are single tokens; document d owns ids d*1000 .. so every id names its source."""
    return [[[d * 1000 + s] for s in range(rng.randint(1, 60))] for d in range(num_documents)]


def test_pairs_rebuild_the_document_and_take_random_next_from_other_documents():
    """With one-token sentences nothing is ever truncated, so Google's rule is checkable exactly:
    A (+ B when it really follows) over the pairs of a document, in order, is the document; a random B is a run
    of consecutive sentences of another document; A and B are never empty and fit in max_seq_length - 3."""
    for seed in range(30):
        rng = random.Random(seed)
        documents = one_token_documents(6, rng)
        for index, document in enumerate(documents):
            pairs = create_pairs_from_document(documents, index, 32, 0.3, rng)
            rebuilt = []
            for pair in pairs:
                assert pair.tokens_a and pair.tokens_b
                assert len(pair.tokens_a) + len(pair.tokens_b) <= 29
                assert {token // 1000 for token in pair.tokens_a} == {index}
                rebuilt += pair.tokens_a
                sources = {token // 1000 for token in pair.tokens_b}
                assert len(sources) == 1
                if pair.is_random_next:
                    assert sources != {index}
                    first = pair.tokens_b[0]
                    assert pair.tokens_b == list(range(first, first + len(pair.tokens_b)))
                else:
                    rebuilt += pair.tokens_b
            assert rebuilt == [sentence[0] for sentence in document]


def test_random_next_rate_and_the_single_document_case():
    rng = random.Random(0)
    documents = [[[d * 1000 + s] * 10 for s in range(40)] for d in range(20)]
    pairs = [pair for index in range(20) for pair in create_pairs_from_document(documents, index, 128, 0.0, rng)]
    # Chunks of several sentences take a random B half the time (Google); with 10-token sentences and a 125-token
    # target every chunk has 13 sentences, so the rate is 0.5 up to sampling noise.
    rate = sum(pair.is_random_next for pair in pairs) / len(pairs)
    assert 0.42 < rate < 0.58, rate
    # A lone document cannot lend a random B: the pair is labeled as a true next (LDDL's fix).
    lone = create_pairs_from_document(documents[:1], 0, 128, 0.0, rng)
    assert lone and not any(pair.is_random_next for pair in lone)


def test_short_seq_prob_draws_short_targets():
    documents = [[[d * 1000 + s] for s in range(2000)] for d in range(2)]
    full = create_pairs_from_document(documents, 0, 128, 0.0, random.Random(1))
    # Without short targets a chunk that really continues fills max_seq_length - 3 exactly (a random B may end
    # early when its document runs out).
    assert all(len(p.tokens_a) + len(p.tokens_b) == 125 for p in full[:-1] if not p.is_random_next)
    lengths = []
    for seed in range(200):
        pairs = create_pairs_from_document(documents, 0, 128, 1.0, random.Random(seed))
        lengths.append(len(pairs[0].tokens_a) + len(pairs[0].tokens_b))
    # With probability 1 the target is uniform in [2, 125] per document: mean 63.5, never above 125.
    assert max(lengths) <= 125 and min(lengths) >= 2
    assert 55 < sum(lengths) / len(lengths) < 72


def google_truncate(tokens_a: list[int], tokens_b: list[int], max_num_tokens: int, rng: random.Random):
    """Google's truncate_seq_pair, transcribed: one token at a time from the longer list, front or back."""
    tokens_a, tokens_b = list(tokens_a), list(tokens_b)
    while len(tokens_a) + len(tokens_b) > max_num_tokens:
        trunc = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        if rng.random() < 0.5:
            del trunc[0]
        else:
            trunc.pop()
    return tokens_a, tokens_b


@pytest.mark.parametrize("length_a, length_b, max_num_tokens", [(80, 90, 125), (200, 3, 125), (5, 5, 125),
                                                                 (64, 64, 61), (1, 300, 10)])
def test_truncation_matches_googles_loop_in_distribution(length_a, length_b, max_num_tokens):
    tokens_a, tokens_b = list(range(length_a)), list(range(1000, 1000 + length_b))
    ours_front, google_front = [], []
    for seed in range(400):
        kept_a, kept_b = truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, random.Random(seed))
        ref_a, ref_b = google_truncate(tokens_a, tokens_b, max_num_tokens, random.Random(seed))
        assert (len(kept_a), len(kept_b)) == (len(ref_a), len(ref_b))
        for kept, original in ((kept_a, tokens_a), (kept_b, tokens_b)):
            start = original.index(kept[0])
            assert kept == original[start:start + len(kept)]
        ours_front.append(tokens_a.index(kept_a[0]) + tokens_b.index(kept_b[0]))
        google_front.append(ref_a[0] + ref_b[0] - 1000)
    cuts = length_a + length_b - len(kept_a) - len(kept_b)
    if cuts:
        # Front cuts ~ Binomial(cuts, 1/2) for both: the means agree within 5 standard errors.
        standard_error = (cuts / 4 / 400) ** 0.5
        assert abs(sum(ours_front) / 400 - sum(google_front) / 400) < 5 * standard_error * 2 ** 0.5 + 1e-9
        assert abs(sum(ours_front) / 400 - cuts / 2) < 5 * standard_error + 1e-9


def test_bin_id_is_lddls_rule():
    # LDDL: bin_id = min((num_tokens - 1) // bin_size, nbins - 1): 1..64 -> 0, 65..128 -> 1.
    assert [bin_id(n, 64, 2) for n in (1, 64, 65, 128)] == [0, 0, 1, 1]
    assert [bin_id(n, 32, 4) for n in (32, 33, 96, 97, 128)] == [0, 1, 2, 3, 3]
