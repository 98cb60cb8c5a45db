"""Tests for tokenizer.py: equality with Google's BERT rules, offsets, special tokens, errors, the vocab trainer.

The expectation throughout is tests/bert_reference.py, a plain step-by-step transcription of Google's
tokenization.py that shares no code with tokenizer.py, plus hand-computed cases.
"""

from __future__ import annotations

import functools
import json
import os
import pickle
import re
import subprocess
import sys
import unicodedata
import warnings
from pathlib import Path

import pytest
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

import bert_reference as reference
from conftest import ROOT, require_shared
from tokenizer import SURROGATE_STAND_IN, BasicNormalizer, BertTokenizer, main

# Hand-picked unusual text: each line exercises one rule at its edge.
UNUSUAL_TEXTS = [
    "",
    "   \t\n  ",
    "Hello, World! It's 3.14 -- isn't it? (yes) [CLS] ##ing $5^2 a_b `x` {y} ~z|w",
    "cafe\u0301 Ame\u0301lie naïve CAFÉ Å \u212b ﬁnance Straße ẞ ǅemal \u212a \u2126",  # accents, compat, titlecase
    "a\u0301\u0323 q\u0307\u0323 x\U0001d16d\U0001d165y \u0344 \u1fef\u1fedz \u037e\u0387",  # NFD reorder, Sk -> `
    "İstanbul IĞDIR ıi",  # U+0130 lowercases to two characters
    "ΟΔΥΣΣΕΥΣ Σ ΣΑ ΑΣ. ΑΣ'Α ΑΣ\u200bΑ ΑΣ\u0301 σς Ὀδυσσεύς",  # final sigma contexts
    "中文字符 BERT模型 𠀀 \U0002b820\U0002ceaf \uf900 \U0002f800 ぁカタカナ 한국어 ＡＢＣ！？",  # CJK, kana, Hangul
    "a\x00b c\x07d \x1b[31mred\x1b[0m e\x7ff g\x85h i\u200bj k\u200dl \u2060m \ufeffn o\u00adp \u202eq r\ufffds",
    "a\u00a0b c\u2003d e\u3000f g\u2028h i\u2029j k\u1680l m\x0bn o\x0cp q\x1cr s\x1ft u\u180ev",  # whitespace
    "😀 👍🏽 👨\u200d👩\u200d👧 🇫🇷 1\ufe0f\u20e3 ♥\ufe0e",  # emoji, modifiers, ZWJ, variation selectors
    "a" * 100 + " " + "b" * 101 + " " + "é" * 101 + " " + "e\u0301" * 60 + " " + "中" * 150,  # word length limit
    "Привет, мир! Ёлка. ΑΒΓ δέλτα. مَرْحَبًا، بالعالم؟ שָׁלוֹם हिन्दी ภาษาไทย",  # scripts
    "，。！？（）：；「」〜・…—–‘’“”«»¿¡§¶†",  # full-width and typographic punctuation
    "\ue000a\ue000 b\U000f0000c \U00100000",  # private use
    "a\u0890b \u2e5d\u2e55x \U00010eadz a\u1734b a\u166db a\U000111c9b \U00011938 \ua7cb",  # newer Unicode
    "x\ud800y \udfff z",  # lone surrogates
]

# tokenizer.py hands a lone surrogate to the engine as U+FFFD (its word is [UNK] either way, see SURROGATE_STAND_IN).
SURROGATES_TO_STAND_IN = {code: SURROGATE_STAND_IN for code in range(0xD800, 0xE000)}

CORPUS_FILES = (
    ("data", "wikitext-2", "wiki.test.raw"),
    ("data", "wikitext-2", "wiki.valid.tokens"),
    ("data", "wikitext-2", "wiki.test.tokens"),
)


def corpus_texts() -> list[str]:
    """Every line of the WikiText-2 files and every SQuAD v1.1 dev context and question."""
    texts = []
    for parts in CORPUS_FILES:
        texts += require_shared(*parts).read_text(encoding="utf-8").split("\n")
    squad = json.loads(require_shared("data", "squad", "v1.1", "dev-v1.1.json").read_text(encoding="utf-8"))
    for article in squad["data"]:
        for paragraph in article["paragraphs"]:
            texts.append(paragraph["context"])
            texts += [qa["question"] for qa in paragraph["qas"]]
    return texts


@pytest.fixture(scope="module")
def uncased() -> BertTokenizer:
    return BertTokenizer(str(require_shared("vocab", "bert-uncased-vocab.txt")), do_lower_case=True)


@pytest.fixture(scope="module")
def cased(tmp_path_factory: pytest.TempPathFactory) -> BertTokenizer:
    """A cased vocab trained here on WikiText-2 (valid and test) by the train-vocab command."""
    output = tmp_path_factory.mktemp("vocab") / "cased-vocab.txt"
    inputs = [str(require_shared(*parts)) for parts in CORPUS_FILES[:2]]
    main(["train-vocab", "--input", *inputs, "--vocab-size", "8000", "--output", str(output), "--cased"])
    return BertTokenizer(str(output), do_lower_case=False)


@pytest.fixture(params=["uncased", "cased"])
def tokenizer(request: pytest.FixtureRequest) -> BertTokenizer:
    return request.getfixturevalue(request.param)


@functools.cache
def vocab_set(tokenizer: BertTokenizer) -> frozenset[str]:
    return frozenset(tokenizer.vocab)


def expected_tokens(tokenizer: BertTokenizer, text: str) -> list[tuple[str, int, int]]:
    return reference.tokenize(text, vocab_set(tokenizer), tokenizer.do_lower_case, tokenizer.max_input_chars_per_word)


def check_against_reference(tokenizer: BertTokenizer, texts: list[str], single_text_paths: bool) -> list[str]:
    """Descriptions of the texts where any tokenizer path differs from the reference (tokens, ids or offsets).

    The single-text methods (tokenize, tokenize_with_offsets) share all but the engine call with the batch ones;
    single_text_paths=False leaves them out to save time.
    """
    batch_tokens = tokenizer.batch_tokenize(texts)
    batch_ids = tokenizer.batch_encode_ids(texts)
    batch_offsets = tokenizer.batch_tokenize_with_offsets(texts)
    mismatches = []
    for index, text in enumerate(texts):
        expected = expected_tokens(tokenizer, text)
        expected_pieces = [piece for piece, _, _ in expected]
        pieces, offsets = batch_offsets[index]
        got = {
            "batch_tokenize": batch_tokens[index],
            "batch_encode_ids": tokenizer.convert_ids_to_tokens(batch_ids[index]),
            "batch_tokenize_with_offsets": [(piece, *span) for piece, span in zip(pieces, offsets, strict=True)],
        }
        if single_text_paths:
            pieces, offsets = tokenizer.tokenize_with_offsets(text)
            got["tokenize"] = tokenizer.tokenize(text)
            got["tokenize_with_offsets"] = [(piece, *span) for piece, span in zip(pieces, offsets, strict=True)]
        for path, value in got.items():
            if value != (expected if "offsets" in path else expected_pieces):
                mismatches.append(f"{path} on {text[:80]!r}: got {value[:12]}, expected {expected[:12]}")
                break
    return mismatches


@pytest.mark.slow  # in the slow tier (tests/conftest.py)
def test_equal_to_google_rules_on_wikitext_and_squad(tokenizer: BertTokenizer) -> None:
    mismatches = check_against_reference(tokenizer, corpus_texts(), single_text_paths=False)
    assert not mismatches, f"{len(mismatches)} texts differ, first: " + "\n".join(mismatches[:5])


def test_equal_to_google_rules_on_unusual_unicode(tokenizer: BertTokenizer) -> None:
    mismatches = check_against_reference(tokenizer, UNUSUAL_TEXTS, single_text_paths=True)
    assert not mismatches, "\n".join(mismatches)


def code_points_to_check() -> list[int]:
    """All of the BMP, every assigned supplementary code point, and every 97th of the rest of the code space.

    The rest is unassigned (Cn) or private use (Co) in Python's Unicode tables, so within each category Google's
    rules treat every code point alike and a sample stands for all of them.
    """
    return [
        code
        for code in range(0x110000)
        if code < 0x10000 or code % 97 == 0 or unicodedata.category(chr(code)) not in ("Cn", "Co")
    ]


def normalization_disagreement(basic: BasicNormalizer, text: str) -> str | None:
    """How basic.normalize(text) and its source indices differ from the reference's words, or None if they agree."""
    normalized, sources = basic.normalize_tracked(text)
    words = reference.basic_tokenize(text, basic.do_lower_case)
    expected = [word.translate(SURROGATES_TO_STAND_IN) for word, _ in words]
    if normalized != basic.normalize(text):
        return f"normalize gives {basic.normalize(text)!r}, normalize_tracked {normalized!r}"
    if normalized.split() != expected:
        return f"words {normalized.split()!r}, Google's rules give {expected!r}"
    kept = [index for index, char in enumerate(normalized) if char != " "]
    expected_sources = [source for _, word_sources in words for source in word_sources]
    if sources[kept].tolist() != expected_sources:
        return f"sources {sources[kept].tolist()}, expected {expected_sources}"
    return None


@pytest.mark.slow  # in the slow tier (tests/conftest.py)
@pytest.mark.parametrize("do_lower_case", [True, False])
def test_code_points_are_normalized_as_google_does(do_lower_case: bool) -> None:
    """Each code point inside a word ("a" + it + "b"): the same words and the same source indices as the reference."""
    basic = BasicNormalizer(do_lower_case)
    codes = code_points_to_check()
    block = 1 << 14
    for first in range(0, len(codes), block):
        if normalization_disagreement(basic, "".join(f"a{chr(code)}b " for code in codes[first : first + block])):
            for code in codes[first : first + block]:  # find the culprit
                problem = normalization_disagreement(basic, f"a{chr(code)}b ")
                assert problem is None, f"U+{code:04X}: {problem}"
            pytest.fail(f"block from U+{codes[first]:04X} disagrees, though each of its code points alone agrees")


def plain_hf_bert_pipeline(vocab: dict[str, int]) -> Tokenizer:
    """HF's own BERT pipeline (what BertWordPieceTokenizer builds), which tokenizer.py does not use."""
    engine = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    engine.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, lowercase=True)
    engine.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return engine


# Each differs under HF's BertNormalizer/BertPreTokenizer (found with tokenizers 0.23.3 and Python 3.11, Unicode 14):
PLAIN_HF_DIVERGENCES = {
    "private use kept by Google, dropped by HF": "a\ue000b",
    "final capital sigma lowercases to ς": "ΟΔΟΣ",
    "punctuation newer than HF's tables (U+2E5D)": "a\u2e5db",
    "format character newer than HF's tables (U+0890)": "a\u0890b",
    "CJK Extension E start (U+2B820) in Google's CJK ranges": "a\U0002b820b",
    "U+166D is So now, no longer punctuation": "a\u166db",
    "nonspacing mark newer than HF's tables (U+07FD)": "a\u07fdb",
}


@pytest.mark.parametrize("text", PLAIN_HF_DIVERGENCES.values(), ids=PLAIN_HF_DIVERGENCES.keys())
def test_plain_hf_bert_pipeline_disagrees_with_google(uncased: BertTokenizer, text: str) -> None:
    """Why tokenizer.py normalizes in Python: HF's BERT pipeline gets these wrong, ours gets them right."""
    if any(unicodedata.category(char) == "Cn" for char in text):
        pytest.skip(f"{text!r} holds a character this Python's Unicode {unicodedata.unidata_version} lacks")
    expected = [piece for piece, _, _ in expected_tokens(uncased, text)]
    assert plain_hf_bert_pipeline(uncased.vocab).encode(text, add_special_tokens=False).tokens != expected
    assert uncased.tokenize(text) == expected


def test_tokenizer_pickles(uncased: BertTokenizer) -> None:
    """Worker processes (dask, DataLoader) receive tokenizers by pickle."""
    text = UNUSUAL_TEXTS[6]
    assert pickle.loads(pickle.dumps(uncased)).tokenize_with_offsets(text) == uncased.tokenize_with_offsets(text)


def test_hand_computed_tokens_and_offsets(uncased: BertTokenizer) -> None:
    text = "Héllo, unaffable ΟΔΟΣ 你"
    tokens, offsets = uncased.tokenize_with_offsets(text)
    assert tokens == ["hello", ",", "una", "##ffa", "##ble", "ο", "##δ", "##ος", "[UNK]"]
    assert offsets == [(0, 5), (5, 6), (7, 10), (10, 13), (13, 16), (17, 18), (18, 19), (19, 21), (22, 23)]
    # A literal "[CLS]" in text is ordinary text to Google's rules, not the special token.
    assert uncased.tokenize("[CLS] x [SEP]") == ["[", "cl", "##s", "]", "x", "[", "sep", "]"]
    # Combining accent after the base letter: stripped, and outside the piece's span.
    assert uncased.tokenize_with_offsets("cafe\u0301 x") == (["cafe", "x"], [(0, 4), (6, 7)])


def test_offsets_map_every_token_back_to_its_source_span(uncased: BertTokenizer) -> None:
    """Normalizing text[start:end] by Google's rules gives back the piece (without ##) for every non-[UNK] piece."""
    squad = json.loads(require_shared("data", "squad", "v1.1", "dev-v1.1.json").read_text(encoding="utf-8"))
    texts = [paragraph["context"] for article in squad["data"] for paragraph in article["paragraphs"]]
    checked = 0
    for text in texts + UNUSUAL_TEXTS:
        tokens, offsets = uncased.tokenize_with_offsets(text)
        previous = (0, 0)
        for piece, (start, end) in zip(tokens, offsets, strict=True):
            # Spans follow the text; two pieces share a character only when it normalizes to several (Hangul).
            assert 0 <= start < end <= len(text) and start >= previous[0] and end >= previous[1], (piece, start, end)
            assert start >= previous[1] or end - start == 1 or previous[1] - previous[0] == 1, (piece, start, end)
            previous = (start, end)
            if piece == "[UNK]":
                continue
            source = text[start:end]
            # Cut out of its word, a final sigma loses its context: compare σ and ς as equal.
            words = [word.replace("ς", "σ") for word, _ in reference.basic_tokenize(source, True)]
            expected = piece.removeprefix("##").replace("ς", "σ")
            # A piece may end inside one source character that normalizes to several (Hangul jamo, U+0130).
            assert words == [expected] or expected in "".join(words), (text[:60], piece, source)
            checked += 1
    assert checked > 300_000


def test_encode_pair(uncased: BertTokenizer) -> None:
    question, context = "Who wrote Faust?", "Goethe wrote it."
    pair = uncased.encode_pair(question, context)
    question_tokens, question_offsets = uncased.tokenize_with_offsets(question)
    context_tokens, context_offsets = uncased.tokenize_with_offsets(context)
    assert pair.tokens == ["[CLS]", *question_tokens, "[SEP]", *context_tokens, "[SEP]"]
    assert pair.tokens == ["[CLS]", "who", "wrote", "faust", "?", "[SEP]", "goethe", "wrote", "it", ".", "[SEP]"]
    assert pair.input_ids == uncased.convert_tokens_to_ids(pair.tokens)
    assert pair.input_ids[0] == 101 and pair.input_ids[5] == 102 and pair.input_ids[-1] == 102
    assert pair.token_type_ids == [0] * 6 + [1] * 5
    assert pair.sequence_ids == [None, 0, 0, 0, 0, None, 1, 1, 1, 1, None]
    assert pair.offsets == [(0, 0), *question_offsets, (0, 0), *context_offsets, (0, 0)]
    assert [context[start:end] for start, end in pair.offsets[6:10]] == ["Goethe", "wrote", "it", "."]
    single = uncased.encode_pair(question)
    assert single.tokens == ["[CLS]", "who", "wrote", "faust", "?", "[SEP]"]
    assert single.token_type_ids == [0] * 6 and single.sequence_ids == [None, 0, 0, 0, 0, None]


def test_special_tokens_and_id_conversion(uncased: BertTokenizer) -> None:
    # Ids from the shared vocab's README.
    assert (uncased.pad_token_id, uncased.unk_token_id, uncased.cls_token_id) == (0, 100, 101)
    assert (uncased.sep_token_id, uncased.mask_token_id, uncased.vocab_size) == (102, 103, 30522)
    assert list(uncased.vocab)[:1] == ["[PAD]"] and uncased.vocab["[MASK]"] == 103
    assert uncased.convert_tokens_to_ids(["hello", "no-such-token"]) == [7592, 100]
    assert uncased.convert_ids_to_tokens([7592, 101]) == ["hello", "[CLS]"]
    with pytest.raises(ValueError, match="bert-uncased-vocab.txt: token id 30522 is not in the vocab"):
        uncased.convert_ids_to_tokens([30522])


def test_max_input_chars_per_word_takes_effect() -> None:
    vocab = str(require_shared("vocab", "bert-uncased-vocab.txt"))
    assert BertTokenizer(vocab).tokenize("a" * 100 + " " + "a" * 101)[-1] == "[UNK]"
    assert BertTokenizer(vocab).tokenize("a" * 100)[0] == "aaa"
    short = BertTokenizer(vocab, max_input_chars_per_word=5)
    assert short.tokenize("hello helloo") == ["hello", "[UNK]"]


def write_vocab(path: Path, tokens: list[str]) -> str:
    path.write_text("".join(f"{token}\n" for token in tokens), encoding="utf-8")
    return str(path)


def test_missing_vocab_file_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=f"{tmp_path / 'absent.txt'}: vocab file not found"):
        BertTokenizer(str(tmp_path / "absent.txt"))


def test_non_utf8_vocab_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "latin1.txt"
    path.write_bytes("[PAD]\n[UNK]\ncaf\u00e9\n".encode("latin-1"))
    with pytest.raises(ValueError, match=f"{path}: not a UTF-8 vocab file \\(byte 0xe9"):
        BertTokenizer(str(path))


def test_empty_vocab_file_names_the_file(tmp_path: Path) -> None:
    path = write_vocab(tmp_path / "empty.txt", [])
    with pytest.raises(ValueError, match=f"{path}: vocab file is empty"):
        BertTokenizer(path)


@pytest.mark.parametrize("missing", ["[CLS]", "[SEP]", "[MASK]", "[UNK]", "[PAD]"])
def test_vocab_without_a_special_token_names_file_and_token(tmp_path: Path, missing: str) -> None:
    tokens = [token for token in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "##b"] if token != missing]
    path = write_vocab(tmp_path / "vocab.txt", tokens)
    with pytest.raises(ValueError, match=re.escape(f"{path}: vocab lacks the special token(s) {missing}")):
        BertTokenizer(path)


def test_vocab_case_mismatch_warns_with_file_name(tmp_path: Path) -> None:
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    cased_path = write_vocab(tmp_path / "cased.txt", [*specials, "The", "the", "Paris", "a", "##s"])
    uncased_path = write_vocab(tmp_path / "uncased.txt", [*specials, "the", "paris", "a", "##s"])
    with pytest.warns(UserWarning, match=f"{cased_path}: vocab looks cased but do_lower_case=True"):
        BertTokenizer(cased_path, do_lower_case=True)
    with pytest.warns(UserWarning, match=f"{uncased_path}: vocab looks uncased but do_lower_case=False"):
        BertTokenizer(uncased_path, do_lower_case=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        BertTokenizer(cased_path, do_lower_case=False)
        BertTokenizer(uncased_path, do_lower_case=True)


def test_train_vocab_command(tmp_path: Path) -> None:
    first = tmp_path / "first.txt"
    second = tmp_path / "second.txt"
    first.write_text("The Quick brown fox. The quick brown fox jumps!\n" * 50, encoding="utf-8")
    second.write_text("Zebras graze in Kenya; zebras run.\n" * 50, encoding="utf-8")
    inputs = ["--input", str(first), str(second)]

    def train(name: str, size: int, *flags: str) -> list[str]:
        output = tmp_path / name
        result = subprocess.run(
            [
                sys.executable,
                str(ROOT / "tokenizer.py"),
                "train-vocab",
                *inputs,
                "--vocab-size",
                str(size),
                "--output",
                str(output),
                *flags,
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        assert f"{output}:" in result.stdout
        return output.read_text(encoding="utf-8").split("\n")[:-1]

    uncased_vocab = train("uncased.txt", 60)
    assert len(uncased_vocab) == 60 and uncased_vocab[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert not any(token != token.lower() for token in uncased_vocab[5:])  # lowercased before training
    assert "z" in uncased_vocab and "##y" in uncased_vocab  # only the second --input file has z and y
    assert len(train("bigger.txt", 80)) == 80  # --vocab-size takes effect
    cased_vocab = train("cased.txt", 60, "--cased")
    assert "T" in cased_vocab and "Z" in cased_vocab  # --cased keeps case
    tokenizer = BertTokenizer(str(tmp_path / "uncased.txt"))
    assert "[UNK]" not in tokenizer.tokenize(first.read_text(encoding="utf-8") + second.read_text(encoding="utf-8"))


def test_train_vocab_reads_a_compressed_wikiextractor_folder_as_the_preprocessors_do(tmp_path: Path) -> None:
    """The vocabulary is trained on the text the shards are made of: WikiExtractor's documents, read through xz,
    without their <doc> lines and titles."""
    import lzma

    article = ('<doc id="7" url="https://en.wikipedia.org/wiki?curid=7" title="Quokkatitle">\nQuokkatitle\n\n'
               "Marsupials hop across Rottnest Island. Marsupials graze at dusk.\n</doc>\n")
    (tmp_path / "corpus" / "AA").mkdir(parents=True)
    (tmp_path / "corpus" / "AA" / "wiki_00").write_bytes(lzma.compress((article * 40).encode()))
    output = tmp_path / "vocab.txt"
    main(["train-vocab", "--input", str(tmp_path / "corpus"), "--vocab-size", "200", "--output", str(output)])
    vocab = output.read_text(encoding="utf-8").split("\n")[:-1]
    assert "marsupials" in vocab and "rottnest" in vocab  # whole frequent words of the text
    assert not any(token in vocab for token in ("doc", "curid", "quokkatitle"))  # markup and titles are not text
    umask = os.umask(0)
    os.umask(umask)
    assert output.stat().st_mode & 0o777 == 0o666 & ~umask  # readable as any output is, not a temp file's 0600


def test_train_vocab_keeps_the_most_frequent_characters_only(tmp_path: Path) -> None:
    """Beyond the alphabet's size, rare characters stay out of the vocabulary (their words become [UNK]), leaving
    the room to whole words."""
    rare = "".join(chr(0x4E00 + index) for index in range(300))  # 300 CJK ideographs, each a word of its own
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat on the mat .\n" * 200 + rare + "\n", encoding="utf-8")
    output = tmp_path / "vocab.txt"
    main(["train-vocab", "--input", str(corpus), "--vocab-size", "400", "--output", str(output)])
    vocab = output.read_text(encoding="utf-8").split("\n")[:-1]
    characters = {token.removeprefix("##") for token in vocab[5:] if len(token.removeprefix("##")) == 1}
    assert len(characters) <= 128  # MIN_ALPHABET, since 400 // 16 is less
    assert {"t", "h", "e", "c", "a"} <= characters  # the frequent ones stay
    left_out = next(character for character in rare if character not in characters)
    assert BertTokenizer(str(output)).tokenize("the " + left_out) == ["the", "[UNK]"]


def test_train_vocab_command_rejects_bad_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("some text\n", encoding="utf-8")
    bad_runs = {
        f"--input {tmp_path / 'absent.txt'}: not found": [str(tmp_path / "absent.txt"), "--vocab-size", "50"],
        "--vocab-size 5: must exceed the 5 special tokens": [str(corpus), "--vocab-size", "5"],
    }
    for message, arguments in bad_runs.items():
        with pytest.raises(SystemExit):
            main(["train-vocab", "--input", *arguments[:1], *arguments[1:], "--output", str(tmp_path / "v.txt")])
        assert message in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["train-vocab", "--input", str(corpus), "--vocab-size", "50", "--output", str(tmp_path / "no" / "v.txt")])
    assert "directory does not exist" in capsys.readouterr().err


def load_download_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("download_vocab", ROOT / "vocab" / "download_vocab.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["download_vocab"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_download_vocab_verifies_and_writes_atomically(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Offline: the 'download' reads the shared uncased vocab through a file:// URL."""
    script = load_download_script()
    shared_vocab = require_shared("vocab", "bert-uncased-vocab.txt")
    good = script.VOCABS["uncased"]
    monkeypatch.setitem(script.VOCABS, "uncased", script.VocabSource(shared_vocab.as_uri(), good.lines, good.sha256))
    script.main(["uncased", "--output-dir", str(tmp_path)])
    assert (tmp_path / "bert-uncased-vocab.txt").read_bytes() == shared_vocab.read_bytes()

    truncated = tmp_path / "truncated.txt"
    truncated.write_bytes(shared_vocab.read_bytes()[:1000])
    monkeypatch.setitem(script.VOCABS, "cased", script.VocabSource(truncated.as_uri(), 28996, None))
    with pytest.raises(SystemExit, match="truncated.txt: .* lines, expected 28996"):
        script.main(["cased", "--output-dir", str(tmp_path)])
    assert sorted(path.name for path in tmp_path.iterdir()) == ["bert-uncased-vocab.txt", "truncated.txt"]
    with pytest.raises(SystemExit):
        script.main(["no-such-vocab", "--output-dir", str(tmp_path)])


def test_download_vocab_rejects_wrong_checksum(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = load_download_script()
    shared_vocab = require_shared("vocab", "bert-uncased-vocab.txt")
    monkeypatch.setitem(script.VOCABS, "uncased", script.VocabSource(shared_vocab.as_uri(), 30522, "0" * 64))
    with pytest.raises(SystemExit, match="SHA-256 07eced37"):
        script.main(["uncased", "--output-dir", str(tmp_path)])
    assert not list(tmp_path.iterdir())
