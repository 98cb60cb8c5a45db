"""SQuAD v1.1 scoring: exact match and token F1, by the rules of the official evaluate-v1.1.py.

The rules (Rajpurkar et al. 2016, arXiv:1606.05250, section 5, and the official evaluation script):
- normalise an answer by lowercasing, deleting every ASCII punctuation character (string.punctuation),
  replacing the words a/an/the by a space, and collapsing runs of whitespace to single spaces;
- exact match is 1 when the normalised prediction equals a normalised gold answer;
- F1 compares the bags of whitespace tokens of the normalised strings (precision and recall of their
  multiset intersection); 0 when the intersection is empty;
- each question scores the maximum over its gold answers; a question without a prediction scores 0;
- both metrics are averaged over every question of the dataset and reported as percentages.

Usable in process (`evaluate(dataset, predictions)`) and as the official script's command line:
`python squad_evaluate.py DATASET.json PREDICTIONS.json` prints {"exact_match": X, "f1": Y}.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import string
import sys
from collections.abc import Mapping

EXPECTED_VERSION = "1.1"
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


def gold_answers(dataset: list, source: str = "dataset") -> dict[str, list[str]]:
    """Question id -> its gold answer texts, from the "data" list of a SQuAD v1.1 file."""
    answers: dict[str, list[str]] = {}
    for article_index, article in enumerate(dataset):
        paragraphs = require_field(article, "paragraphs", source, f"article {article_index}")
        for paragraph_index, paragraph in enumerate(paragraphs):
            where = f"article {article_index} paragraph {paragraph_index}"
            for qa in require_field(paragraph, "qas", source, where):
                question_id = require_field(qa, "id", source, where)
                where = f"question {question_id}"
                answer_records = require_field(qa, "answers", source, where)
                texts = [require_field(answer, "text", source, where) for answer in answer_records]
                if not texts:
                    raise ValueError(f"{source}: {where} has no gold answers")
                answers[question_id] = texts
    return answers


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


def load_json(path: str) -> object:
    """Parse a JSON file; a missing file or bad JSON raises an error naming the path."""
    try:
        with open(path, encoding="utf-8") as reader:
            return json.load(reader)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: file not found") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not valid JSON ({error})") from None


def load_dataset(path: str) -> list:
    """The "data" list of a SQuAD v1.1 file; warns (as the official script does) on another version."""
    content = load_json(path)
    if not isinstance(content, dict) or "data" not in content:
        raise ValueError(f"{path}: not a SQuAD file (no top-level \"data\" field)")
    if content.get("version") != EXPECTED_VERSION:
        print(f"Evaluation expects v-{EXPECTED_VERSION}, but got dataset with v-{content.get('version')}",
              file=sys.stderr)
    return content["data"]


def load_predictions(path: str) -> dict[str, str]:
    predictions = load_json(path)
    if not isinstance(predictions, dict):
        raise ValueError(f"{path}: predictions must be a JSON object mapping question id to answer text")
    for question_id, text in predictions.items():
        if not isinstance(text, str):
            raise ValueError(f"{path}: prediction for question {question_id} is not a string")
    return predictions


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=f"Evaluation for SQuAD {EXPECTED_VERSION}")
    parser.add_argument("dataset_file", help="Dataset file")
    parser.add_argument("prediction_file", help="Prediction File")
    args = parser.parse_args(argv)
    try:
        dataset = load_dataset(args.dataset_file)
        predictions = load_predictions(args.prediction_file)
        scores = evaluate(dataset, predictions, source=args.dataset_file)
    except (FileNotFoundError, ValueError) as error:
        raise SystemExit(str(error)) from None
    print(json.dumps(scores))


if __name__ == "__main__":
    main()
