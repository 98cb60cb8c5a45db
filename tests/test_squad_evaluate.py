"""squad_evaluate.py against hand-computed cases of the official SQuAD v1.1 rules, and on the real dev set."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT, require_shared
from squad_evaluate import evaluate, exact_match_score, f1_score, load_dataset, normalize_answer


@pytest.mark.parametrize(
    ("text", "normalized"),
    [
        ("The  Quick, brown fox!", "quick brown fox"),
        ("an apple a day", "apple day"),
        ("theater Anthem", "theater anthem"),  # articles only as whole words
        ("U.S.A.", "usa"),
        ("a-n", ""),  # punctuation goes first, which leaves the article "an"
        ("“quoted” — text", "“quoted” — text"),  # only ASCII punctuation is dropped
        ("\tTHE\nend ", "end"),
    ],
)
def test_normalize_answer(text, normalized):
    assert normalize_answer(text) == normalized


def test_exact_match_ignores_case_punctuation_articles():
    assert exact_match_score("the Denver Broncos.", "Denver Broncos") == 1.0
    assert exact_match_score("Denver", "Denver Broncos") == 0.0


@pytest.mark.parametrize(
    ("prediction", "truth", "expected"),
    [
        ("the cat sat", "a cat sat on the mat", 2 / 3),  # precision 2/2, recall 2/4
        ("cat cat cat", "cat cat dog", 2 / 3),  # the common bag counts "cat" twice, not three times
        ("dog", "cat", 0.0),
        ("the", "a", 0.0),  # both normalise to nothing: EM would be 1 but no tokens are shared
        ("Denver Broncos", "the denver broncos!", 1.0),
    ],
)
def test_f1_score(prediction, truth, expected):
    assert f1_score(prediction, truth) == pytest.approx(expected)


def _dataset(*questions):
    qas = [{"id": qid, "question": "?", "answers": [{"text": t, "answer_start": 0} for t in answers]}
           for qid, answers in questions]
    return [{"title": "t", "paragraphs": [{"context": "c", "qas": qas}]}]


def test_evaluate_takes_max_over_golds_and_scores_unanswered_zero(capsys):
    dataset = _dataset(("q1", ["cat sat", "the cat"]), ("q2", ["dog"]), ("q3", ["mouse trap"]))
    scores = evaluate(dataset, {"q1": "cat", "q3": "a mouse"})
    # q1: EM 1 against "the cat"; q2 unanswered: 0; q3: EM 0, F1 = 2*(1*0.5)/(1.5) = 2/3
    assert scores["exact_match"] == pytest.approx(100 / 3)
    assert scores["f1"] == pytest.approx(100 * (1 + 0 + 2 / 3) / 3)
    assert "Unanswered question q2 will receive score 0." in capsys.readouterr().err


def test_missing_field_names_file_and_question():
    dataset = _dataset(("q1", ["a"]))
    del dataset[0]["paragraphs"][0]["qas"][0]["answers"]
    with pytest.raises(ValueError, match=r"dev\.json: question q1 lacks the field \"answers\""):
        evaluate(dataset, {}, source="dev.json")


def _run_cli(*args):
    return subprocess.run([sys.executable, str(ROOT / "squad_evaluate.py"), *map(str, args)],
                          capture_output=True, text=True, timeout=60)


def test_gold_answers_score_100_on_dev_through_cli(tmp_path):
    dev_path = require_shared("data", "squad", "v1.1", "dev-v1.1.json")
    questions = [qa for article in load_dataset(str(dev_path)) for paragraph in article["paragraphs"]
                 for qa in paragraph["qas"]]
    assert len(questions) == 10570
    first = tmp_path / "first.json"
    first.write_text(json.dumps({qa["id"]: qa["answers"][0]["text"] for qa in questions}))
    result = _run_cli(dev_path, first)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"exact_match": 100.0, "f1": 100.0}

    # The last gold answer of question 57340d124776f419006617bf is ".", which normalises to no tokens:
    # under the official rules it is an exact match but has F1 0, so one question in 10570 loses its F1.
    last = tmp_path / "last.json"
    last.write_text(json.dumps({qa["id"]: qa["answers"][-1]["text"] for qa in questions}))
    scores = json.loads(_run_cli(dev_path, last).stdout)
    assert scores["exact_match"] == 100.0
    assert scores["f1"] == pytest.approx(100 * 10569 / 10570)


def test_cli_reports_malformed_json_in_one_line(tmp_path):
    dataset = tmp_path / "dev.json"
    dataset.write_text(json.dumps({"version": "1.1", "data": _dataset(("q1", ["a"]))}))
    broken = tmp_path / "predictions.json"
    broken.write_text('{"q1": "a"')
    result = _run_cli(dataset, broken)
    assert result.returncode == 1
    assert result.stderr.strip().count("\n") == 0
    assert result.stderr.startswith(f"{broken}: not valid JSON")
