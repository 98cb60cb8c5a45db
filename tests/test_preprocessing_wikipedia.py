"""The preprocessors on Wikipedia as WikiExtractor writes it: compressed files give the shards of the plain ones, the
held-out articles are listed by title and none of their sentences is in a training shard, and the summary line
counts what the shards hold (documents, sentences, tokens, samples, padding) and what was cut.

The corpus is made here: WikiExtractor files of articles whose words are their own (a token tells which article it
came from), every word a token of the vocab, so an article's sentences and tokens can be counted from its text.
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import io
import json
import lzma
import math
import random
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import create_pretraining_data
import lddl_preprocess
from data_fixtures import document_draws, tag_offsets
from messages import assert_one_line
from preprocessing import preprocess_pipeline

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
SYLLABLES = ["ba", "ke", "li", "mo", "nu", "pa", "re", "si", "to", "vu"]
NUM_FILES = 3
ARTICLES_PER_FILE = 8
WORDS_PER_ARTICLE = 20


def article_words(article: int) -> list[str]:
    """Article a's own words: the first two syllables spell a, so no two articles share a word."""
    first, second = divmod(article, len(SYLLABLES))
    return [SYLLABLES[first] + SYLLABLES[second] + SYLLABLES[w % 10] + SYLLABLES[w // 10]
            for w in range(WORDS_PER_ARTICLE)]


def owner(token: str) -> int:
    return SYLLABLES.index(token[:2]) * len(SYLLABLES) + SYLLABLES.index(token[2:4])


@pytest.fixture(scope="module")
def wiki(tmp_path_factory) -> dict:
    """AA/wiki_00 .. wiki_02 in WikiExtractor's format, the vocab, and each article's sentences (as word lists)."""
    root = tmp_path_factory.mktemp("wiki")
    rng = random.Random(5)
    vocab = SPECIALS + [".", ","]
    sentences: dict[int, list[list[str]]] = {}
    for file_index in range(NUM_FILES):
        text = []
        for article in range(file_index * ARTICLES_PER_FILE, (file_index + 1) * ARTICLES_PER_FILE):
            words = article_words(article)
            vocab += words
            paragraphs = [[[rng.choice(words) for _ in range(rng.randint(3, 12))] for _ in range(rng.randint(2, 6))]
                          for _ in range(rng.randint(1, 3))]
            sentences[article] = [sentence for paragraph in paragraphs for sentence in paragraph]
            body = "".join(" ".join(" ".join(sentence).capitalize() + "." for sentence in paragraph) + "\n"
                           for paragraph in paragraphs)
            text.append(f'<doc id="{article + 1}" url="https://en.wikipedia.org/wiki?curid={article + 1}" '
                        f'title="Article {article}">\nArticle {article}\n\n{body}</doc>\n')
        path = root / "plain" / "AA" / f"wiki_{file_index:02d}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(text))
    (root / "vocab.txt").write_text("\n".join(vocab) + "\n")
    return {"plain": root / "plain", "vocab": root / "vocab.txt", "sentences": sentences}


def corpus_files(folder: Path) -> list[Path]:
    return sorted(path for path in folder.rglob("wiki_*"))


def articles_by_offset(folder: Path) -> dict[tuple[int, int], int]:
    """(file index, byte offset of its <doc line) -> article number, for the plain corpus."""
    found = {}
    for file_index, path in enumerate(corpus_files(folder)):
        for number, offset in enumerate(tag_offsets(path.read_bytes(), b"<doc")):
            found[(file_index, offset)] = file_index * ARTICLES_PER_FILE + number
    return found


def held_out_articles(folder: Path, seed: int, fraction: float) -> dict[tuple[int, int], int]:
    return {place: article for place, article in articles_by_offset(folder).items()
            if document_draws(seed, *place)[1] < fraction}


def run(module, wiki: dict, inputs: list[Path], output: Path, *flags: str) -> dict:
    argv = ["--input", *map(str, inputs), "--vocab-file", str(wiki["vocab"]), "--output-dir", str(output),
            "--num-shards", "2", "--duplicate-factor", "2", "--max-seq-length", "32", "--num-workers", "1", *flags]
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        module.main(argv)
    return json.loads(stdout.getvalue().strip().splitlines()[-1])


def shard_files(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir()) if path.name.startswith("shard-")}


def rows_of(folder: Path) -> list[dict]:
    return [row for path in sorted(folder.glob("shard-*")) for row in pq.read_table(path).to_pylist()]


def articles_in(rows: list[dict]) -> set[int]:
    return {owner(token) for row in rows for token in (row["A"] + " " + row["B"]).split() if token not in ".,"}


COMPRESSIONS = {".xz": lzma.compress, ".bz2": bz2.compress, ".gz": gzip.compress}


def test_compressed_files_give_the_shards_of_the_plain_ones(wiki, tmp_path, monkeypatch):
    """xz, bzip2 and gzip copies of the corpus (with a SHA256SUMS beside them, as ../shared's Wikipedia has) give
    byte-identical shards, held-out ones included, with the default number of partitions, which counts the text's
    decompressed bytes (made small here so that it is more than one, and would differ if it counted bytes on disk)."""
    monkeypatch.setattr(preprocess_pipeline, "DEFAULT_BLOCK_BYTES", 2000)
    plain_files = corpus_files(wiki["plain"])
    text_bytes = sum(path.stat().st_size for path in plain_files)
    flags = ["--holdout-fraction", "0.3", "--bin-size", "16"]
    plain = run(lddl_preprocess, wiki, [wiki["plain"]], tmp_path / "plain", *flags)
    assert (plain["text_bytes"], plain["num_blocks"]) == (text_bytes, math.ceil(text_bytes / 2000))
    assert plain["num_blocks"] > 1
    for suffix, compress in COMPRESSIONS.items():
        folder = tmp_path / f"corpus{suffix}"
        for path in plain_files:
            packed = folder / path.relative_to(wiki["plain"]).with_suffix(suffix)
            packed.parent.mkdir(parents=True, exist_ok=True)
            packed.write_bytes(compress(path.read_bytes()))
        (folder / "SHA256SUMS").write_text("".join(f"{'0' * 64}  AA/{path.name}{suffix}\n" for path in plain_files))
        assert sum(path.stat().st_size for path in corpus_files(folder)) < text_bytes
        summary = run(lddl_preprocess, wiki, [folder], tmp_path / suffix, *flags)
        assert summary == {**plain, "output_dir": str(tmp_path / suffix), "seconds": summary["seconds"],
                           "stage_seconds": summary["stage_seconds"], "documents_per_second":
                           summary["documents_per_second"], "samples_per_second": summary["samples_per_second"],
                           "holdout": {**plain["holdout"], "output_dir": str(tmp_path / f"{suffix}_holdout"),
                                       "documents_list": summary["holdout"]["documents_list"]}}
        assert shard_files(tmp_path / suffix) == shard_files(tmp_path / "plain")
        assert shard_files(tmp_path / f"{suffix}_holdout") == shard_files(tmp_path / "plain_holdout")
    # Two workers read the compressed files (one task each) to the same bytes.
    run(lddl_preprocess, wiki, [tmp_path / "corpus.xz"], tmp_path / "pool", *flags, "--num-workers", "2")
    assert shard_files(tmp_path / "pool") == shard_files(tmp_path / "plain")


def test_held_out_articles_are_listed_by_title_and_none_of_their_sentences_trains(wiki, tmp_path):
    held = held_out_articles(wiki["plain"], 12345, 0.3)
    assert 0 < len(held) < NUM_FILES * ARTICLES_PER_FILE  # the seed makes a real choice
    summary = run(lddl_preprocess, wiki, [wiki["plain"]], tmp_path / "train", "--holdout-fraction", "0.3",
                  "--no-masking")
    training, held_rows = rows_of(tmp_path / "train"), rows_of(tmp_path / "train_holdout")
    # No word of a held-out article, so none of its sentences, in a training sample (random next segments too).
    assert articles_in(training) == set(range(NUM_FILES * ARTICLES_PER_FILE)) - set(held.values())
    assert articles_in(held_rows) == set(held.values())
    listing = tmp_path / "train_holdout" / "held_out_documents.tsv"
    assert summary["holdout"]["documents_list"] == str(listing)
    files = corpus_files(wiki["plain"])
    assert listing.read_text().splitlines() == ["file\toffset\ttitle"] + [
        f"{files[file_index]}\t{offset}\tArticle {article}" for (file_index, offset), article in sorted(held.items())]
    # Another seed holds out other articles, and lists them.
    reseeded = held_out_articles(wiki["plain"], 8, 0.3)
    assert reseeded != held
    run(create_pretraining_data, wiki, [wiki["plain"]], tmp_path / "h5", "--holdout-fraction", "0.3", "--seed", "8")
    assert [line.split("\t")[2] for line in (tmp_path / "h5_holdout" / "held_out_documents.tsv").read_text()
            .splitlines()[1:]] == [f"Article {article}" for _, article in sorted(reseeded.items())]


@pytest.mark.parametrize("flags, padded_length", [
    (["--bin-size", "8"], lambda bins: (bins + 1) * 8),
    ([], lambda bins: np.full_like(bins, 32)),
])
def test_the_summary_counts_articles_sentences_tokens_samples_and_padding(wiki, tmp_path, flags, padded_length):
    held = set(held_out_articles(wiki["plain"], 12345, 0.3).values())
    summary = run(lddl_preprocess, wiki, [wiki["plain"]], tmp_path / "out", "--holdout-fraction", "0.3",
                  "--no-masking", *flags)
    for report, folder, articles in ((summary, tmp_path / "out", set(wiki["sentences"]) - held),
                                     (summary["holdout"], tmp_path / "out_holdout", held)):
        sentences = [sentence for article in sorted(articles) for sentence in wiki["sentences"][article]]
        # Every word is one token, and so is each sentence's period.
        assert (report["documents"], report["sentences"], report["tokens"]) == (
            len(articles), len(sentences), sum(len(sentence) + 1 for sentence in sentences))
        table = pq.read_table(sorted(folder.glob("shard-*"))).to_pydict()
        num_tokens = np.array(table["num_tokens"])
        bins = np.array(table["bin_id"]) if flags else np.zeros_like(num_tokens)
        padding = int((padded_length(bins) - num_tokens).sum())
        assert (report["samples"], report["sample_tokens"], report["padding_tokens"]) == (
            len(num_tokens), int(num_tokens.sum()), padding)
        assert report["padding_fraction"] == round(padding / (padding + num_tokens.sum()), 4)
    assert summary["seconds"] >= sum(summary["stage_seconds"].values()) > 0
    assert (summary["sentences_cut"], summary["tokens_cut"]) == (0, 0)


def test_a_sentence_longer_than_512_tokens_is_cut_and_the_run_says_so(wiki, tmp_path, capsys):
    """A 700-word line without a full stop is one sentence: its first 512 tokens are kept, and a note on stderr says
    how many sentences and tokens were cut and where the first was."""
    corpus = tmp_path / "lines.txt"
    words = article_words(0)
    normal = f"{words[0].capitalize()} {words[1]}. {words[2].capitalize()} {words[3]}.\n"  # 2 sentences, 6 tokens
    corpus.write_text(normal * 3 + " ".join(words[i % WORDS_PER_ARTICLE] for i in range(700)) + "\n" + normal)
    summary = run(lddl_preprocess, wiki, [corpus], tmp_path / "out", "--max-seq-length", "600", "--no-masking",
                  "--num-shards", "1")
    assert (summary["sentences_cut"], summary["tokens_cut"]) == (1, 700 - 512)
    assert summary["tokens"] == 4 * 6 + 512
    assert_one_line(capsys.readouterr().err, "lddl_preprocess.py: note: ", "1 sentences longer than 512 tokens",
                    "188 tokens dropped", f"byte {3 * len(normal)} of {corpus}")


def test_a_bin_with_fewer_samples_than_shards_gets_one_file_per_sample(wiki, tmp_path, capsys):
    """Instead of failing after all the work, a short bin is written in fewer files (none when empty), and the run
    names each such bin on stderr, one line each; a full bin keeps its --num-shards files."""
    summary = run(lddl_preprocess, wiki, [corpus_files(wiki["plain"])[0]], tmp_path / "out", "--bin-size", "8",
                  "--num-shards", "10", "--short-seq-prob", "0.1")
    table = pq.read_table(sorted((tmp_path / "out").glob("shard-*")), columns=["bin_id"]).to_pydict()
    samples = [table["bin_id"].count(bin_index) for bin_index in range(4)]
    assert samples[0] == 0 and 0 < samples[1] < samples[2] < 10 <= samples[3]  # empty, short and full bins
    assert sum(samples) == summary["samples"] and summary["files"] == samples[1] + samples[2] + 10
    counts = json.loads((tmp_path / "out" / ".num_samples.json").read_text())
    for bin_index, count in enumerate(samples):
        files = {name: rows for name, rows in counts.items() if name.endswith(f"_{bin_index}")}
        assert sorted(files) == sorted(f"shard-{i}.parquet_{bin_index}" for i in range(min(count, 10)))
        assert sum(files.values()) == count and max(files.values(), default=1) - min(files.values(), default=1) <= 1
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3
    for line, bin_index in zip(lines, range(3), strict=True):
        assert_one_line(line, "lddl_preprocess.py: note: ", f"bin {bin_index} has {samples[bin_index]} samples",
                        "fewer than --num-shards 10", f"so {samples[bin_index]} files")
