"""Tokenized documents -> BERT samples: Google's next-sentence pairs and their truncation, RoBERTa's single-segment
DOC-SENTENCES samples, and LDDL's length bins.

The logic shared by both preprocessors (lddl_preprocess.py writes LDDL parquet shards, create_pretraining_data.py
writes NVIDIA/Google HDF5 shards); corpus.py reads the text and splits it into sentences before, and
preprocess_pipeline.py runs both in parallel.
Format (length bins): docs/data-format.md#binning.

Pairs follow Google's create_pretraining_data.py (Devlin et al. 2018, section 3.1 "Task #2: NSP", and the
`create_instances_from_document` function of google-research/bert), as LDDL runs it:
the target length is max_seq_length - 3, or with probability short_seq_prob a uniform integer in [2, that];
sentences are gathered into a chunk until the target is reached or the document ends; A takes the first a_end
sentences (a_end uniform in [1, len(chunk) - 1]); B is the rest, or with probability 0.5 (always for a one-sentence
chunk) sentences from a random start in a random other document, and the unused sentences of the chunk are
put back; then the longer of A and B loses one token at a time, from the front or the back with probability 1/2
each, until the pair fits. If ten draws only find the document itself, B comes from it and is_random_next is
False (LDDL's fix of Google's code, which kept the label True).

Without next-sentence prediction (`--no-nsp`) a sample is one segment, `[CLS] A [SEP]`, packed as RoBERTa's
DOC-SENTENCES inputs (Liu et al. 2019, section 4.2): full sentences taken contiguously from one document, as many as
fit in max_seq_length - 2 tokens; the next sentence starts the next sample and the document's end ends the last one,
so a sample never crosses a document boundary (and is shorter only at a document's end). No short samples are drawn
(RoBERTa trains on full-length inputs). A sentence longer than a whole sample is cut into pieces of that length, in
order, so no text is lost.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain

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


def create_segments_from_document(document: Document, max_seq_length: int) -> list[SentencePair]:
    """The single-segment DOC-SENTENCES samples of one document (module docstring): B empty, is_random_next False."""
    max_num_tokens = max_seq_length - 2  # [CLS] A [SEP]
    pieces = [sentence[start:start + max_num_tokens] for sentence in document
              for start in range(0, len(sentence), max_num_tokens)]
    samples, current = [], []
    for piece in pieces:
        if current and len(current) + len(piece) > max_num_tokens:
            samples.append(SentencePair(current, [], False))
            current = []
        current.extend(piece)
    if current:
        samples.append(SentencePair(current, [], False))
    return samples


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
