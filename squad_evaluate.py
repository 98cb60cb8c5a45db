"""SQuAD scoring: exact match and token F1, by the rules of the official evaluate-v1.1.py and evaluate-v2.0.py.

The v1.1 rules (Rajpurkar et al. 2016, arXiv:1606.05250, section 5, and the official evaluation script):
- normalise an answer by lowercasing, deleting every ASCII punctuation character (string.punctuation),
  replacing the words a/an/the by a space, and collapsing runs of whitespace to single spaces;
- exact match is 1 when the normalised prediction equals a normalised gold answer;
- F1 compares the bags of whitespace tokens of the normalised strings (precision and recall of their
  multiset intersection); 0 when the intersection is empty;
- each question scores the maximum over its gold answers; a question without a prediction scores 0;
- both metrics are averaged over every question of the dataset and reported as percentages.

The v2.0 rules (Rajpurkar et al. 2018, arXiv:1806.03822, and the official evaluate-v2.0.py), where a question
without gold answers is unanswerable and its only correct answer is the empty string:
- the same normalisation and exact match; gold answers that normalise to nothing are dropped, and a question
  left with none has the single gold answer "";
- F1 as above, except that when the prediction or the gold answer has no tokens, F1 is 1 if both have none
  and 0 otherwise;
- with no-answer probabilities (for BERT, the null-score differences), a question whose probability exceeds
  na_prob_thresh counts as answered "" (1 on an unanswerable question, 0 on an answerable one);
- exact/f1 are averaged over all questions, HasAns_*/NoAns_* over the answerable/unanswerable ones, with the
  question counts in *_total;
- best_exact/best_f1 are the scores of the best threshold t on the probabilities, predicting "" exactly where the
  probability exceeds t; the sweep starts from "" everywhere (reported as t = 0.0) and, in increasing order of
  probability (ties in the order of the probability file), switches one question at a time to its prediction.
A question without a prediction scores 0 under both rules (warned on stderr); the official v2.0 script instead
leaves it out of the averages or stops.

Usable in process (`evaluate(dataset, predictions)`, `evaluate_v2(dataset, predictions, na_probs)`) and as the
official scripts' command line: `python squad_evaluate.py DATASET.json PREDICTIONS.json` prints
{"exact_match": X, "f1": Y} for a v1.1 file. A file where some question has the field "is_impossible" (or any
file, with --version-2-with-negative) is scored by the v2.0 rules, printed as the v2.0 script's JSON;
--na-prob-file and --na-prob-thresh are the v2.0 script's options.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import re
import string
import sys
from collections.abc import Iterator, Mapping

from utils.cli import finite_float, run_main

EXPECTED_VERSION = "1.1"
DEFAULT_NA_PROB_THRESH = 1.0  # the official v2.0 script's default (no probability exceeds it; a score diff may)
_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """Lowercase, drop ASCII punctuation, drop a/an/the, collapse whitespace (in the official order)."""
    text = text.lower()
    text = "".join(character for character in text if character not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match_score(prediction: str, ground_truth: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(ground_truth))


def f1_score(prediction: str, ground_truth: str) -> float:
    """Harmonic mean of token precision and recall over the normalised strings' bags of words."""
    prediction_tokens = normalize_answer(prediction).split()
    ground_truth_tokens = normalize_answer(ground_truth).split()
    num_same = sum((collections.Counter(prediction_tokens) & collections.Counter(ground_truth_tokens)).values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(prediction_tokens)
    recall = num_same / len(ground_truth_tokens)
    return 2 * precision * recall / (precision + recall)


def f1_score_v2(prediction: str, ground_truth: str) -> float:
    """F1 by the v2.0 rule: when either side normalises to no tokens, 1 if both do, else 0."""
    if not normalize_answer(prediction) or not normalize_answer(ground_truth):
        return float(normalize_answer(prediction) == normalize_answer(ground_truth))
    return f1_score(prediction, ground_truth)


def _questions(dataset: list, source: str) -> Iterator[tuple[str, dict]]:
    """(where, question record) for every "qas" entry of a SQuAD "data" list, in file order."""
    for article_index, article in enumerate(dataset):
        paragraphs = require_field(article, "paragraphs", source, f"article {article_index}")
        for paragraph_index, paragraph in enumerate(paragraphs):
            where = f"article {article_index} paragraph {paragraph_index}"
            for qa in require_field(paragraph, "qas", source, where):
                yield where, qa


def _answer_texts(dataset: list, source: str) -> dict[str, list[str]]:
    """Question id -> its gold answer texts (empty for an unanswerable v2.0 question)."""
    answers: dict[str, list[str]] = {}
    for paragraph_where, qa in _questions(dataset, source):
        question_id = require_field(qa, "id", source, paragraph_where)
        where = f"question {question_id}"
        answers[question_id] = [require_field(answer, "text", source, where)
                                for answer in require_field(qa, "answers", source, where)]
    return answers


def gold_answers(dataset: list, source: str = "dataset") -> dict[str, list[str]]:
    """Question id -> its gold answer texts, from the "data" list of a SQuAD v1.1 file."""
    answers = _answer_texts(dataset, source)
    for question_id, texts in answers.items():
        if not texts:
            raise ValueError(f"{source}: question {question_id} has no gold answers")
    return answers


def is_version_2(dataset: list, source: str = "dataset") -> bool:
    """Whether the data is in the v2.0 format: some question carries the field "is_impossible"."""
    return any(isinstance(qa, dict) and "is_impossible" in qa for _, qa in _questions(dataset, source))


def require_field(record: object, name: str, source: str, where: str):
    """record[name], or a ValueError naming the file and the record when it is missing."""
    if not isinstance(record, dict) or name not in record:
        raise ValueError(f"{source}: {where} lacks the field \"{name}\"")
    return record[name]


def evaluate(dataset: list, predictions: Mapping[str, str], source: str = "dataset") -> dict[str, float]:
    """{"exact_match": %, "f1": %} of `predictions` (question id -> answer text) over every question."""
    answers = gold_answers(dataset, source)
    if not answers:
        raise ValueError(f"{source}: the dataset holds no questions")
    exact_match = f1 = 0.0
    for question_id, ground_truths in answers.items():
        if question_id not in predictions:
            print(f"Unanswered question {question_id} will receive score 0.", file=sys.stderr)
            continue
        prediction = predictions[question_id]
        exact_match += max(exact_match_score(prediction, truth) for truth in ground_truths)
        f1 += max(f1_score(prediction, truth) for truth in ground_truths)
    return {"exact_match": 100.0 * exact_match / len(answers), "f1": 100.0 * f1 / len(answers)}


def evaluate_v2(
    dataset: list,
    predictions: Mapping[str, str],
    na_probs: Mapping[str, float] | None = None,
    na_prob_thresh: float = DEFAULT_NA_PROB_THRESH,
    source: str = "dataset",
    na_prob_source: str = "na_probs",
) -> dict[str, float]:
    """The v2.0 script's scores of `predictions` (question id -> answer text, "" for no answer).

    Keys: exact, f1, total, then HasAns_*/NoAns_* where such questions exist, then, only when `na_probs`
    (question id -> no-answer probability or null-score difference) is given, best_exact(_thresh) and
    best_f1(_thresh). Scores are percentages.
    """
    answers = _answer_texts(dataset, source)
    if not answers:
        raise ValueError(f"{source}: the dataset holds no questions")
    has_answer = {question_id: bool(texts) for question_id, texts in answers.items()}
    exact_raw, f1_raw = {}, {}
    for question_id, texts in answers.items():
        if question_id not in predictions:
            print(f"Missing prediction for {question_id}; it scores 0.", file=sys.stderr)
            continue
        golds = [text for text in texts if normalize_answer(text)] or [""]
        exact_raw[question_id] = max(exact_match_score(predictions[question_id], gold) for gold in golds)
        f1_raw[question_id] = max(f1_score_v2(predictions[question_id], gold) for gold in golds)
    if na_probs is not None:
        for question_id in exact_raw:
            if question_id not in na_probs:
                raise ValueError(f"{na_prob_source}: no probability for question {question_id}")
    probabilities = na_probs if na_probs is not None else dict.fromkeys(exact_raw, 0.0)
    exact = _apply_no_answer_threshold(exact_raw, probabilities, has_answer, na_prob_thresh)
    f1 = _apply_no_answer_threshold(f1_raw, probabilities, has_answer, na_prob_thresh)
    scores = _averages(exact, f1, list(answers))
    for prefix, answerable in (("HasAns", True), ("NoAns", False)):
        subset = [question_id for question_id in answers if has_answer[question_id] == answerable]
        if subset:
            scores.update({f"{prefix}_{key}": value for key, value in _averages(exact, f1, subset).items()})
    if na_probs is not None:
        for name, raw in (("exact", exact_raw), ("f1", f1_raw)):
            best, threshold = _best_threshold(raw, predictions, na_probs, has_answer, len(answers))
            scores[f"best_{name}"], scores[f"best_{name}_thresh"] = best, threshold
    return scores


def _apply_no_answer_threshold(
    scores: Mapping[str, float], na_probs: Mapping[str, float], has_answer: Mapping[str, bool], threshold: float
) -> dict[str, float]:
    """Scores with every question whose probability exceeds `threshold` counted as answered ""."""
    return {question_id: float(not has_answer[question_id]) if na_probs[question_id] > threshold else score
            for question_id, score in scores.items()}


def _averages(exact: Mapping[str, float], f1: Mapping[str, float], question_ids: list[str]) -> dict[str, float]:
    total = len(question_ids)
    return {"exact": 100.0 * sum(exact.get(question_id, 0.0) for question_id in question_ids) / total,
            "f1": 100.0 * sum(f1.get(question_id, 0.0) for question_id in question_ids) / total,
            "total": total}


def _best_threshold(
    scores: Mapping[str, float],
    predictions: Mapping[str, str],
    na_probs: Mapping[str, float],
    has_answer: Mapping[str, bool],
    num_questions: int,
) -> tuple[float, float]:
    """(best score %, its threshold) over thresholds on na_probs, swept as the official v2.0 script does."""
    # Below every probability, every question is predicted "": the unanswerable ones score 1 each.
    current = sum(1.0 for question_id in scores if not has_answer[question_id])
    best, best_threshold = current, 0.0
    for question_id in sorted(na_probs, key=na_probs.__getitem__):
        if question_id not in scores:
            continue
        if has_answer[question_id]:
            current += scores[question_id]
        elif predictions[question_id]:
            current -= 1.0  # an unanswerable question loses its point once a non-empty answer is let through
        if current > best:
            best, best_threshold = current, na_probs[question_id]
    return 100.0 * best / num_questions, best_threshold


def load_json(path: str) -> object:
    """Parse a JSON file; a missing file, text that is not UTF-8 or bad JSON raises an error naming the path."""
    try:
        with open(path, "rb") as reader:
            return json.loads(reader.read().decode("utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: file not found") from None
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not UTF-8 text (byte {error.object[error.start]:#04x} at offset "
                         f"{error.start})") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not valid JSON ({error})") from None


def load_squad_json(path: str) -> dict:
    """A SQuAD file's top-level object, checked to hold a "data" field."""
    content = load_json(path)
    if not isinstance(content, dict) or "data" not in content:
        raise ValueError(f"{path}: not a SQuAD file (no top-level \"data\" field)")
    return content


def load_dataset(path: str) -> list:
    """The "data" list of a SQuAD v1.1 file; warns (as the official script does) on another version."""
    content = load_squad_json(path)
    _warn_unless_v1(content)
    return content["data"]


def _warn_unless_v1(content: dict) -> None:
    if content.get("version") != EXPECTED_VERSION:
        print(f"Evaluation expects v-{EXPECTED_VERSION}, but got dataset with v-{content.get('version')}",
              file=sys.stderr)


def load_predictions(path: str) -> dict[str, str]:
    predictions = load_json(path)
    if not isinstance(predictions, dict):
        raise ValueError(f"{path}: predictions must be a JSON object mapping question id to answer text")
    for question_id, text in predictions.items():
        if not isinstance(text, str):
            raise ValueError(f"{path}: prediction for question {question_id} is not a string")
    return predictions


def load_na_probs(path: str) -> dict[str, float]:
    na_probs = load_json(path)
    if not isinstance(na_probs, dict):
        raise ValueError(f"{path}: no-answer probabilities must be a JSON object mapping question id to a number")
    for question_id, value in na_probs.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{path}: probability for question {question_id} is not a number")
        if not math.isfinite(value):  # JSON's NaN and Infinity: every comparison with the threshold would be False
            raise ValueError(f"{path}: probability for question {question_id} is {value}, not a finite number")
    return na_probs


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Evaluation for SQuAD 1.1 and 2.0")
    parser.add_argument("dataset_file", help="Dataset file")
    parser.add_argument("prediction_file", help="Prediction File")
    parser.add_argument("--version-2-with-negative", action="store_true",
                        help="score by the v2.0 rules (default: when some question has the field is_impossible)")
    parser.add_argument("--na-prob-file", "-n", help="v2.0: JSON question id -> no-answer probability or score diff")
    parser.add_argument("--na-prob-thresh", "-t", type=finite_float,
                        help=f"v2.0: count as \"\" above this probability (default {DEFAULT_NA_PROB_THRESH})")
    args = parser.parse_args(argv)
    try:
        content = load_squad_json(args.dataset_file)
        version_2 = args.version_2_with_negative or is_version_2(content["data"], args.dataset_file)
        if not version_2:
            for flag, value in (("--na-prob-file", args.na_prob_file), ("--na-prob-thresh", args.na_prob_thresh)):
                if value is not None:
                    parser.error(f"{flag} applies to SQuAD v2.0 scoring, but {args.dataset_file} has no "
                                 "is_impossible question (pass --version-2-with-negative)")
            _warn_unless_v1(content)
        predictions = load_predictions(args.prediction_file)
        if not version_2:
            print(json.dumps(evaluate(content["data"], predictions, source=args.dataset_file)))
            return
        na_probs = load_na_probs(args.na_prob_file) if args.na_prob_file else None
        threshold = DEFAULT_NA_PROB_THRESH if args.na_prob_thresh is None else args.na_prob_thresh
        scores = evaluate_v2(content["data"], predictions, na_probs, threshold, args.dataset_file, args.na_prob_file)
    except (FileNotFoundError, ValueError) as error:
        raise SystemExit(f"squad_evaluate.py: {error}") from None
    print(json.dumps(scores, indent=2))


if __name__ == "__main__":
    sys.exit(run_main(main, "squad_evaluate.py"))
