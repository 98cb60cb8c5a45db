"""SQuAD v1.1 and v2.0 data: JSON -> examples -> model features, and model logits -> answer texts.

The windowing and answer selection follow Google's BERT run_squad.py (Devlin et al. 2019, section 4.2):
- a context longer than the window is cut into overlapping spans, each new span starting `doc_stride`
  tokens after the previous one; a feature is `[CLS] question [SEP] context span [SEP]`;
- a training feature whose span does not contain the whole answer points both labels at [CLS] (index 0);
- a token seen in several spans is scored only in the span where it has the most context on both sides,
  score = min(tokens to its left, tokens to its right) + 0.01 * span length;
- candidate answers are the n_best highest start and end logits of each feature, kept when both ends lie
  in the context, end >= start, the answer is at most max_answer_length tokens and the start token has
  its maximum context here; they are ranked by start_logit + end_logit.

SQuAD v2.0 (version_2_with_negative) adds unanswerable questions ("is_impossible"), handled as in Google's
run_squad.py for v2.0:
- every training feature of an unanswerable question points both labels at [CLS];
- the null answer "" scores score_null = start_logit[0] + end_logit[0] of the question's feature where that
  sum is lowest, and joins the candidates;
- the prediction is "" when score_null - (start_logit + end_logit of the best non-null answer) exceeds
  null_score_diff_threshold, else that best non-null answer; this difference is the question's null odds.

Unlike the reference we do not split the context on whitespace and re-align detokenised word pieces:
the tokenizer reports each token's character span in the context, so an answer's characters map to
tokens directly, and a predicted token span maps back to a slice of the original context text.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping, Sequence

import numpy as np

from finetuning.feature_batching import pad_token_rows
from squad_evaluate import load_dataset, load_squad_json, require_field
from tokenizer import BertTokenizer
from utils.progress import progress_bar

NO_CHARACTER = -1  # char offset stored for tokens outside the context ([CLS], question, [SEP], padding)
NULL_ANSWER = ""  # SQuAD v2.0's answer to an unanswerable question


@dataclasses.dataclass
class SquadExample:
    """One question about one context. answer_* is the first gold answer (the training target)."""

    qas_id: str
    question_text: str
    context_text: str
    context_index: int  # which paragraph of the file; questions of one paragraph share its tokenization
    answer_text: str | None = None
    answer_start: int | None = None  # character index into context_text
    is_impossible: bool = False  # SQuAD v2.0: the context holds no answer (and answer_* stay None)


@dataclasses.dataclass
class SquadFeature:
    """One window of one example, as the model sees it (unpadded)."""

    unique_id: int
    example_index: int
    input_ids: list[int]
    token_type_ids: list[int]
    char_starts: np.ndarray  # int64 [len(input_ids)]: context character span of each token, NO_CHARACTER outside
    char_ends: np.ndarray
    token_is_max_context: np.ndarray  # bool [len(input_ids)]
    start_position: int = 0
    end_position: int = 0


def read_squad_examples(path: str, is_training: bool, version_2_with_negative: bool = False) -> list[SquadExample]:
    """Every question of a SQuAD v1.1 file (or v2.0 file, with version_2_with_negative), in file order.

    Training needs an answer whose `answer_start` points at its text in the context, except for a v2.0
    question marked "is_impossible"; anything else is a ValueError naming the file and the question.
    """
    data = load_squad_json(path)["data"] if version_2_with_negative else load_dataset(path)
    examples, first_seen, repeated = [], {}, []
    context_index = 0
    for article_index, article in enumerate(data):
        paragraphs = require_field(article, "paragraphs", path, f"article {article_index}")
        for paragraph_index, paragraph in enumerate(paragraphs):
            where = f"article {article_index} paragraph {paragraph_index}"
            context = require_field(paragraph, "context", path, where)
            if not isinstance(context, str):
                raise ValueError(f"{path}: {where} has a context that is not a string")
            if not context.strip():
                raise ValueError(f"{path}: {where} has an empty context: no question on it can be answered")
            for qa in require_field(paragraph, "qas", path, where):
                qas_id = require_field(qa, "id", path, where)
                question_where = f"question {qas_id}"
                question = require_field(qa, "question", path, question_where)
                if not isinstance(question, str) or not question.strip():
                    raise ValueError(f"{path}: {question_where} ({where}) has an empty question")
                if str(qas_id) in first_seen:
                    if not is_training:  # predictions.json maps ids to answers: one would replace the other
                        raise ValueError(f"{path}: question {qas_id} ({where}) has the id of the question in "
                                         f"{first_seen[str(qas_id)]}; predictions are keyed by id, so one answer "
                                         "would replace the other")
                    repeated.append(str(qas_id))
                first_seen.setdefault(str(qas_id), where)
                example = SquadExample(str(qas_id), question, context, context_index)
                if version_2_with_negative:
                    example.is_impossible = qa.get("is_impossible", False)
                    if not isinstance(example.is_impossible, bool):
                        raise ValueError(f"{path}: {question_where} has an is_impossible that is not true or false")
                    if example.is_impossible and qa.get("answers"):
                        raise ValueError(f"{path}: {question_where} is marked is_impossible but has answers; one of "
                                         "the two is wrong (SQuAD v2.0 keeps those of an unanswerable question in "
                                         "plausible_answers)")
                if is_training and not example.is_impossible:
                    example.answer_text, example.answer_start = _first_answer(qa, context, path, question_where)
                examples.append(example)
            context_index += 1
    if repeated:  # training keys nothing by id, so the questions still train
        print(f"{path}: warning: question id {repeated[0]} ({first_seen[repeated[0]]}) is used again "
              f"({len(repeated)} repeated id(s) in the file; every question is kept)", file=sys.stderr)
    return examples


def _first_answer(qa: dict, context: str, path: str, where: str) -> tuple[str, int]:
    answers = require_field(qa, "answers", path, where)
    if not answers:
        unanswerable = qa.get("is_impossible") is True
        hint = " (it is an unanswerable SQuAD v2.0 question: read with version_2_with_negative)" if unanswerable else ""
        raise ValueError(f"{path}: {where} has no answer to train on{hint}")
    text = require_field(answers[0], "text", path, where)
    start = require_field(answers[0], "answer_start", path, where)
    if not isinstance(text, str) or not isinstance(start, int) or context[start:start + len(text)] != text:
        raise ValueError(f"{path}: {where} answer_start {start!r} does not point at its text {text!r} in the context")
    return text, start


def answer_token_span(char_starts: np.ndarray, char_ends: np.ndarray, start: int, end: int) -> tuple[int, int] | None:
    """The tokens that overlap characters [start, end) of the context: (first, last), or None if none do."""
    overlapping = np.nonzero((char_ends > start) & (char_starts < end))[0]
    if overlapping.size == 0:
        return None
    return int(overlapping[0]), int(overlapping[-1])


@dataclasses.dataclass
class _TokenizedContext:
    input_ids: list[int]
    char_starts: np.ndarray
    char_ends: np.ndarray


def _tokenize_context(tokenizer: BertTokenizer, context: str) -> _TokenizedContext:
    tokens, offsets = tokenizer.tokenize_with_offsets(context)
    offsets = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    return _TokenizedContext(tokenizer.convert_tokens_to_ids(tokens), offsets[:, 0], offsets[:, 1])


def tokenized_contexts(examples: Sequence[SquadExample], tokenizer: BertTokenizer) -> dict[int, _TokenizedContext]:
    contexts = {}
    for example in examples:
        if example.context_index not in contexts:
            contexts[example.context_index] = _tokenize_context(tokenizer, example.context_text)
    return contexts


def doc_spans(num_doc_tokens: int, max_tokens_for_doc: int, doc_stride: int) -> list[tuple[int, int]]:
    """(start, length) windows over the context tokens; the last one reaches its end."""
    spans = []
    start = 0
    while True:
        length = min(num_doc_tokens - start, max_tokens_for_doc)
        spans.append((start, length))
        if start + length >= num_doc_tokens:
            return spans
        start += min(length, doc_stride)


def max_context_spans(spans: Sequence[tuple[int, int]], num_doc_tokens: int) -> np.ndarray:
    """For every context token, the index of the span in which it has the most context around it.

    score = min(tokens to its left, tokens to its right in the span) + 0.01 * span length; ties go to the
    earlier span.
    """
    positions = np.arange(num_doc_tokens)
    scores = np.full((len(spans), num_doc_tokens), -np.inf)
    for index, (start, length) in enumerate(spans):
        inside = slice(start, start + length)
        left, right = positions[inside] - start, start + length - 1 - positions[inside]
        scores[index, inside] = np.minimum(left, right) + 0.01 * length
    return np.argmax(scores, axis=0)


def convert_examples_to_features(
    examples: Sequence[SquadExample],
    tokenizer: BertTokenizer,
    max_seq_length: int = 384,
    doc_stride: int = 128,
    max_query_length: int = 64,
    is_training: bool = False,
) -> list[SquadFeature]:
    """Tokenize, window and label the examples. unique_id counts features from 1_000_000_000 as in BERT."""
    if max_seq_length < max_query_length + 4:
        raise ValueError(f"max_seq_length {max_seq_length} leaves no room for context after a "
                         f"{max_query_length}-token question")
    if doc_stride < 1:
        raise ValueError(f"doc_stride must be at least 1, got {doc_stride}")
    contexts = tokenized_contexts(examples, tokenizer)
    question_ids = tokenizer.batch_encode_ids([example.question_text for example in examples])
    features = []
    unique_id = 1_000_000_000
    for example_index, example in enumerate(progress_bar(examples, desc="SQuAD features", unit="example")):
        context = contexts[example.context_index]
        query_ids = question_ids[example_index][:max_query_length]
        prefix = [tokenizer.cls_token_id, *query_ids, tokenizer.sep_token_id]
        spans = doc_spans(len(context.input_ids), max_seq_length - len(prefix) - 1, doc_stride)
        best_spans = max_context_spans(spans, len(context.input_ids))
        answer_span = None  # no answer in any window: every label points at [CLS]
        if is_training and not example.is_impossible:
            answer_span = answer_token_span(
                context.char_starts, context.char_ends,
                example.answer_start, example.answer_start + len(example.answer_text),
            )
        for span_index, (doc_start, doc_length) in enumerate(spans):
            doc_end = doc_start + doc_length  # exclusive
            num_tokens = len(prefix) + doc_length + 1
            input_ids = [*prefix, *context.input_ids[doc_start:doc_end], tokenizer.sep_token_id]
            token_type_ids = [0] * len(prefix) + [1] * (doc_length + 1)
            char_starts = np.full(num_tokens, NO_CHARACTER, dtype=np.int64)
            char_ends = np.full(num_tokens, NO_CHARACTER, dtype=np.int64)
            char_starts[len(prefix):-1] = context.char_starts[doc_start:doc_end]
            char_ends[len(prefix):-1] = context.char_ends[doc_start:doc_end]
            is_max_context = np.zeros(num_tokens, dtype=bool)
            is_max_context[len(prefix):-1] = best_spans[doc_start:doc_end] == span_index
            feature = SquadFeature(
                unique_id, example_index, input_ids, token_type_ids, char_starts, char_ends, is_max_context
            )
            if answer_span is not None and doc_start <= answer_span[0] and answer_span[1] < doc_end:
                feature.start_position = answer_span[0] - doc_start + len(prefix)
                feature.end_position = answer_span[1] - doc_start + len(prefix)
            features.append(feature)
            unique_id += 1
    return features


def span_text(example: SquadExample, feature: SquadFeature, start: int, end: int) -> str:
    """The original context text covered by feature tokens start..end (inclusive)."""
    return example.context_text[feature.char_starts[start]:feature.char_ends[end]]


def collate_features(features: Sequence[SquadFeature], pad_token_id: int, is_training: bool, multiple: int = 1,
                     max_length: int | None = None) -> dict[str, np.ndarray]:
    """A batch padded by pad_token_rows, with each feature's unique_id and, for training, its answer span."""
    batch = pad_token_rows(features, pad_token_id, multiple, max_length)
    batch["unique_ids"] = np.array([feature.unique_id for feature in features], dtype=np.int64)
    if is_training:
        batch["start_positions"] = np.array([feature.start_position for feature in features], dtype=np.int64)
        batch["end_positions"] = np.array([feature.end_position for feature in features], dtype=np.int64)
    return batch


def _softmax(scores: Sequence[float]) -> list[float]:
    exponentials = np.exp(np.asarray(scores, dtype=np.float64) - max(scores))
    return (exponentials / exponentials.sum()).tolist()


def postprocess_predictions(
    examples: Sequence[SquadExample],
    features: Sequence[SquadFeature],
    logits: Mapping[int, tuple[np.ndarray, np.ndarray]],
    n_best_size: int = 20,
    max_answer_length: int = 30,
    version_2_with_negative: bool = False,
    null_score_diff_threshold: float = 0.0,
) -> tuple[dict[str, str], dict[str, list[dict]]]:
    """(predictions: qas_id -> answer text, nbest: qas_id -> ranked candidates) from per-feature logits.

    logits maps a feature's unique_id to its (start_logits, end_logits) over at least its own tokens.
    A candidate carries text, probability (softmax of start_logit + end_logit over the n-best), and both logits.
    With version_2_with_negative the n-best also holds the null answer "" (ranked among the others, or
    appended after the n_best_size best), a prediction is "" when the null odds exceed
    null_score_diff_threshold, and `null_odds(nbest)` gives every question's null odds.
    """
    features_by_example: dict[int, list[SquadFeature]] = {}
    for feature in features:
        features_by_example.setdefault(feature.example_index, []).append(feature)
    predictions, nbest = {}, {}
    for example_index, example in enumerate(examples):
        candidates = []
        null = None  # (start, end) logits at [CLS] of the feature where their sum is lowest
        for feature in features_by_example.get(example_index, []):
            if feature.unique_id not in logits:
                raise ValueError(f"no logits for feature {feature.unique_id} of question {example.qas_id}")
            length = len(feature.input_ids)
            start_logits, end_logits = (np.asarray(values[:length], np.float64) for values in logits[feature.unique_id])
            if version_2_with_negative and (null is None or start_logits[0] + end_logits[0] < sum(null)):
                null = (start_logits[0], end_logits[0])
            best_starts = np.argsort(-start_logits, kind="stable")[:n_best_size]
            best_ends = np.argsort(-end_logits, kind="stable")[:n_best_size]
            for start in best_starts:
                if feature.char_starts[start] == NO_CHARACTER or not feature.token_is_max_context[start]:
                    continue
                for end in best_ends:
                    if feature.char_starts[end] == NO_CHARACTER or end < start or end - start + 1 > max_answer_length:
                        continue
                    candidates.append((start_logits[start], end_logits[end], feature, int(start), int(end)))
        if null is not None:
            candidates.append((*null, None, 0, 0))  # after the spans, so that a tie ranks a span first
        candidates.sort(key=lambda candidate: candidate[0] + candidate[1], reverse=True)
        entries, seen_texts = [], set()
        for start_logit, end_logit, feature, start, end in candidates:
            text = NULL_ANSWER if feature is None else span_text(example, feature, start, end)
            if text in seen_texts:
                continue
            seen_texts.add(text)
            entries.append({"text": text, "start_logit": float(start_logit), "end_logit": float(end_logit)})
            if len(entries) == n_best_size:
                break
        if null is not None and NULL_ANSWER not in seen_texts:
            entries.append({"text": NULL_ANSWER, "start_logit": float(null[0]), "end_logit": float(null[1])})
        if all(entry["text"] == NULL_ANSWER for entry in entries):
            # As in BERT: a question with no valid span still gets an (always wrong) answer.
            entries.append({"text": "empty", "start_logit": 0.0, "end_logit": 0.0})
        probabilities = _softmax([entry["start_logit"] + entry["end_logit"] for entry in entries])
        for entry, probability in zip(entries, probabilities, strict=True):
            entry["probability"] = probability
        if version_2_with_negative and _null_score_diff(entries, example.qas_id) > null_score_diff_threshold:
            predictions[example.qas_id] = NULL_ANSWER
        else:
            predictions[example.qas_id] = next(entry["text"] for entry in entries if entry["text"] != NULL_ANSWER)
        nbest[example.qas_id] = entries
    return predictions, nbest


def _null_score_diff(entries: Sequence[dict], qas_id: str) -> float:
    """score_null - score of the best non-null answer, from a question's ranked n-best."""
    scores = [(entry["text"] == NULL_ANSWER, entry["start_logit"] + entry["end_logit"]) for entry in entries]
    null_scores = [score for is_null, score in scores if is_null]
    if not null_scores:
        raise ValueError(f"question {qas_id}: the n-best holds no null answer (not predicted for SQuAD v2.0)")
    return null_scores[0] - next(score for is_null, score in scores if not is_null)


def null_odds(nbest: Mapping[str, Sequence[dict]]) -> dict[str, float]:
    """qas_id -> null odds (score_null - best non-null score) of a v2.0 n-best, as Google's null_odds.json holds:
    the no-answer "probabilities" for squad_evaluate's best thresholds."""
    return {qas_id: _null_score_diff(entries, qas_id) for qas_id, entries in nbest.items()}

