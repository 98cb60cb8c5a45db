"""Data that tests build or expect: the documents the preprocessing's documented sampling rules keep or hold out,
the words of a WordPiece sequence, SQuAD windows and a v2.0 file made from v1.1, and ragged pretraining batches."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np

from squad_utils import SquadExample, convert_examples_to_features
from tokenizer import BertTokenizer

UINT64 = 2**64 - 1


def splitmix64(value: int) -> int:
    """SplitMix64's output function (Steele, Lea & Flood 2014, as in Vigna's splitmix64.c), in Python integers."""
    value = (value + 0x9E3779B97F4A7C15) & UINT64
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & UINT64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & UINT64
    return value ^ (value >> 31)


def document_draws(seed: int, file_index: int, offset: int) -> tuple[float, float]:
    """(sample draw, holdout draw) of the document at byte `offset` of corpus file `file_index`, by the rule in
    preprocess_pipeline's docstring: its key is SplitMix64(SplitMix64(SplitMix64(seed) ^ file_index) ^ offset); the
    sample draw is the top 53 bits of SplitMix64(key) over 2**53, the holdout draw those of
    SplitMix64(SplitMix64(key))."""
    key = splitmix64(splitmix64(splitmix64(seed) ^ file_index) ^ offset)
    return (splitmix64(key) >> 11) / 2**53, (splitmix64(splitmix64(key)) >> 11) / 2**53


def documents_kept(corpus_file: Path, seed: int, sample_ratio: float) -> set[int]:
    """The documents (line numbers of a one-document-per-line file, the only file of its corpus) that --sample-ratio
    keeps: those whose sample draw (document_draws) is below the ratio."""
    kept, offset = set(), 0
    for line_number, line in enumerate(corpus_file.read_bytes().splitlines(keepends=True)):
        if document_draws(seed, 0, offset)[0] < sample_ratio:
            kept.add(line_number)
        offset += len(line)
    return kept


def documents_held_out(corpus_file: Path, seed: int, holdout_fraction: float) -> set[int]:
    """The documents (line numbers, as documents_kept) that --holdout-fraction sets aside: those whose holdout draw
    (document_draws) is below it."""
    held, offset = set(), 0
    for line_number, line in enumerate(corpus_file.read_bytes().splitlines(keepends=True)):
        if document_draws(seed, 0, offset)[1] < holdout_fraction:
            held.add(line_number)
        offset += len(line)
    return held


def tag_offsets(text: bytes, tag: bytes) -> list[int]:
    """Byte offsets of the lines of `text` that start with `tag` (WikiExtractor's `<doc`: where its documents start)."""
    return [index for index in range(len(text)) if text.startswith(tag, index) and (index == 0 or
                                                                                   text[index - 1] == ord("\n"))]


def words_of(tokens: list[str]) -> list[list[int]]:
    """The positions of each word of a WordPiece sequence: a piece and the "##" pieces right after it; [CLS],
    [SEP] and [PAD] belong to no word and end the one before them."""
    words: list[list[int]] = []
    in_word = False
    for position, token in enumerate(tokens):
        if token in ("[CLS]", "[SEP]", "[PAD]"):
            in_word = False
        elif in_word and token.startswith("##"):
            words[-1].append(position)
        else:
            words.append([position])
            in_word = True
    return words


def partly_masked_words(tokens: list[str], masked_positions: set[int]) -> list[list[int]]:
    """The words of `tokens` (the original, unmasked pieces) of which some positions are masked and some not."""
    return [word for word in words_of(tokens) if 0 < len(masked_positions.intersection(word)) < len(word)]


def numbered_windows(tokenizer: BertTokenizer) -> tuple[SquadExample, list]:
    """Question "q" over the context "1 2 ... 40" (one word piece each), in more than two windows."""
    example = SquadExample("q", "which?", " ".join(str(number) for number in range(1, 41)), 0)
    features = convert_examples_to_features([example], tokenizer, max_seq_length=32, doc_stride=8,
                                            max_query_length=8)
    assert len(features) > 2
    return example, features


def make_v2_dataset(v1_data: list) -> dict:
    """A SQuAD v2.0 file's content from a v1.1 "data" list, deterministically.

    Question k of the file (counting from 0) with k % 3 == 2 moves from paragraph p of article a to paragraph
    p (mod its count) of article a + 1 (the last article's go to the first), where it is appended with
    "is_impossible": true and no answers. Every other question stays, with "is_impossible": false.
    """
    data = copy.deepcopy(v1_data)
    moved = []  # (target article, target paragraph, question)
    question_index = 0
    for article_index, article in enumerate(data):
        target = data[(article_index + 1) % len(data)]["paragraphs"]
        for paragraph_index, paragraph in enumerate(article["paragraphs"]):
            kept = []
            for qa in paragraph["qas"]:
                if question_index % 3 == 2:
                    impossible = {"id": qa["id"], "question": qa["question"], "answers": [], "is_impossible": True}
                    moved.append((target[paragraph_index % len(target)], impossible))
                else:
                    kept.append({**qa, "is_impossible": False})
                question_index += 1
            paragraph["qas"] = kept
    for paragraph, qa in moved:
        paragraph["qas"].append(qa)
    return {"version": "v2.0", "data": data}


def ragged_batch(lengths: list[int], seq_length: int, vocab_size: int, seed: int = 0) -> dict[str, np.ndarray]:
    """A collated pretraining batch (the loader's keys and layout) of samples with these token counts, padded to
    seq_length: random ids after [CLS] = 1, segment B in each sample's second half, a few masked positions (never
    the [CLS]) and random NSP labels."""
    rng = np.random.default_rng(seed)
    batch = len(lengths)
    columns = np.arange(seq_length)[None]
    attention_mask = (columns < np.array(lengths)[:, None]).astype(np.int64)
    input_ids = rng.integers(2, vocab_size, (batch, seq_length)) * attention_mask
    input_ids[:, 0] = 1
    token_type_ids = (columns >= (np.array(lengths) // 2)[:, None]).astype(np.int64) * attention_mask
    masked_lm_labels = np.full((batch, seq_length), -1, np.int64)
    for row, length in enumerate(lengths):
        positions = rng.choice(np.arange(1, length), max(1, length // 4), replace=False)
        masked_lm_labels[row, positions] = rng.integers(2, vocab_size, len(positions))
    return {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": attention_mask,
            "masked_lm_labels": masked_lm_labels, "next_sentence_labels": rng.integers(0, 2, batch)}
