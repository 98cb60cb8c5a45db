"""squad_evaluate.py against hand-computed cases of the official SQuAD v1.1 and v2.0 rules, and on the real dev
set (v2.0 on the real data: tests/test_squad_v2.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT, require_shared
from messages import assert_one_line
from squad_evaluate import (
    evaluate,
    evaluate_v2,
    exact_match_score,
    f1_score,
    f1_score_v2,
    is_version_2,
    load_dataset,
    normalize_answer,
)


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
    assert result.stderr.startswith(f"squad_evaluate.py: {broken}: not valid JSON")


@pytest.mark.parametrize("which", ["dataset", "predictions"])
def test_cli_names_a_file_that_is_not_utf8(tmp_path, which):
    dataset = tmp_path / "dev.json"
    dataset.write_text(json.dumps({"version": "1.1", "data": _dataset(("q1", ["a"]))}))
    predictions = tmp_path / "predictions.json"
    predictions.write_text('{"q1": "a"}')
    latin1 = dataset if which == "dataset" else predictions
    latin1.write_bytes(latin1.read_bytes().replace(b'"a"', b'"caf\xe9"', 1))
    result = _run_cli(dataset, predictions)
    assert result.returncode == 1
    assert result.stderr.strip().count("\n") == 0
    assert result.stderr.startswith(f"squad_evaluate.py: {latin1}: not UTF-8 text (byte 0xe9 at offset ")


@pytest.mark.parametrize(
    ("prediction", "truth", "expected"),
    [
        ("", "", 1.0),  # no answer predicted for an unanswerable question
        ("the", "", 1.0),  # "the" normalises to no tokens, which is the empty answer
        ("cat", "", 0.0),
        ("", "cat", 0.0),
        ("the", "a", 1.0),  # v1.1 gives 0 here (test_f1_score): the v2.0 empty-token rule differs
        ("the cat sat", "a cat sat on the mat", 2 / 3),  # otherwise as v1.1
    ],
)
def test_f1_score_v2_empty_answer_rule(prediction, truth, expected):
    assert f1_score_v2(prediction, truth) == pytest.approx(expected)


def _dataset_v2(*questions):
    """questions: (id, gold answer texts); no texts makes the question unanswerable."""
    qas = [{"id": qid, "question": "?", "is_impossible": not answers,
            "answers": [{"text": t, "answer_start": 0} for t in answers]} for qid, answers in questions]
    return [{"title": "t", "paragraphs": [{"context": "c", "qas": qas}]}]


V2_CASE = _dataset_v2(("a1", ["Denver Broncos"]), ("a2", ["1990"]), ("n1", []), ("n2", []))
V2_PREDICTIONS = {"a1": "Broncos", "a2": "1990", "n1": "", "n2": "the Broncos"}
# Raw scores by hand:
#   a1 "Broncos" vs "Denver Broncos": EM 0; 1 shared token, P = 1/1, R = 1/2, F1 = 2/3
#   a2 exact: EM 1, F1 1
#   n1 "" on an unanswerable question: EM 1, F1 1
#   n2 "broncos" where only "" is right: EM 0, F1 0 (one side has no tokens, the other has)
# Score differences, as BERT writes them (may be negative): predict "" where the value exceeds a threshold.
V2_NA_PROBS = {"a1": 0.3, "a2": -2.0, "n1": 0.5, "n2": 1.5}


def test_evaluate_v2_hand_computed_without_probabilities():
    scores = evaluate_v2(V2_CASE, V2_PREDICTIONS)
    # exact (0 + 1 + 1 + 0) / 4; f1 (2/3 + 1 + 1 + 0) / 4 = 2/3; HasAns over a1, a2; NoAns over n1, n2
    assert scores == pytest.approx({
        "exact": 50.0, "f1": 100 * 2 / 3, "total": 4,
        "HasAns_exact": 50.0, "HasAns_f1": 100 * (2 / 3 + 1) / 2, "HasAns_total": 2,
        "NoAns_exact": 50.0, "NoAns_f1": 50.0, "NoAns_total": 2,
    })
    assert list(scores)[:3] == ["exact", "f1", "total"]


def test_evaluate_v2_hand_computed_with_probabilities_and_best_thresholds():
    scores = evaluate_v2(V2_CASE, V2_PREDICTIONS, V2_NA_PROBS)
    # na_prob_thresh 1.0: only n2 (1.5) counts as "", which is right for it: EM 0 -> 1, F1 0 -> 1.
    # exact (0 + 1 + 1 + 1) / 4 = 75; f1 (2/3 + 1 + 1 + 1) / 4 = 11/12
    # Best threshold sweep, starting from "" everywhere (n1 and n2 right: 2 points, threshold 0.0), then in
    # increasing difference a2 (-2.0), a1 (0.3), n1 (0.5), n2 (1.5) switched to their predictions:
    #   exact: a2 +1 -> 3 (best, t = -2.0); a1 +0 -> 3; n1 "" stays right -> 3; n2 wrong -> 2.  best 3/4 at -2.0
    #   f1:    a2 +1 -> 3 (t = -2.0); a1 +2/3 -> 11/3 (best, t = 0.3); n1 -> 11/3; n2 -> 8/3.  best 11/12 at 0.3
    assert scores == pytest.approx({
        "exact": 75.0, "f1": 100 * 11 / 12, "total": 4,
        "HasAns_exact": 50.0, "HasAns_f1": 100 * (2 / 3 + 1) / 2, "HasAns_total": 2,
        "NoAns_exact": 100.0, "NoAns_f1": 100.0, "NoAns_total": 2,
        "best_exact": 75.0, "best_exact_thresh": -2.0, "best_f1": 100 * 11 / 12, "best_f1_thresh": 0.3,
    })
    # na_prob_thresh 0.2 also sends a1 (0.3) to "": it loses its F1 of 2/3, so f1 = (0 + 1 + 1 + 1) / 4
    lowered = evaluate_v2(V2_CASE, V2_PREDICTIONS, V2_NA_PROBS, na_prob_thresh=0.2)
    assert lowered["f1"] == pytest.approx(75.0) and lowered["HasAns_f1"] == pytest.approx(50.0)


def test_evaluate_v2_best_threshold_can_be_no_answer_everywhere():
    # Both predictions are wrong answers; "" everywhere (the sweep's start, reported as 0.0) scores n1's point.
    dataset = _dataset_v2(("a1", ["cat"]), ("n1", []))
    scores = evaluate_v2(dataset, {"a1": "dog", "n1": "dog"}, {"a1": 5.0, "n1": 7.0})
    assert (scores["best_exact"], scores["best_exact_thresh"]) == (50.0, 0.0)
    assert (scores["best_f1"], scores["best_f1_thresh"]) == (50.0, 0.0)
    assert (scores["exact"], scores["NoAns_exact"]) == (50.0, 100.0)  # n1's 7.0 exceeds 1.0: counted as ""
    # a1 now right, but n1 (0.2) comes first in the sweep: letting its "dog" through costs its point (1 -> 0),
    # a1 (0.5) then brings back only 1, which does not beat the start.
    scores = evaluate_v2(dataset, {"a1": "cat", "n1": "dog"}, {"a1": 0.5, "n1": 0.2})
    assert (scores["best_exact"], scores["best_exact_thresh"]) == (50.0, 0.0)


def test_evaluate_v2_gold_that_normalises_to_nothing_and_missing_prediction(capsys):
    # q1's only gold "." normalises to nothing: it is dropped and "" becomes the one right answer, yet the
    # question stays answerable (it has answers). q2 has no prediction: 0 on both metrics, still counted.
    dataset = _dataset_v2(("q1", ["."]), ("q2", ["cat"]))
    scores = evaluate_v2(dataset, {"q1": "the"})
    assert scores == pytest.approx({"exact": 50.0, "f1": 50.0, "total": 2,
                                    "HasAns_exact": 50.0, "HasAns_f1": 50.0, "HasAns_total": 2})
    assert "Missing prediction for q2; it scores 0." in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"^odds\.json: no probability for question q1$"):
        evaluate_v2(dataset, {"q1": "the"}, {"q2": 0.0}, na_prob_source="odds.json")


def test_version_2_is_detected_by_is_impossible():
    assert is_version_2(V2_CASE)
    assert not is_version_2(_dataset(("q1", ["a"])))


def _write_v2_case(directory, na_probs):
    """The hand-computed v2.0 case as the CLI's three files: dataset, predictions, no-answer probabilities."""
    paths = [directory / name for name in ("dev-v2.json", "predictions.json", "null_odds.json")]
    for path, content in zip(paths, ({"version": "v2.0", "data": V2_CASE}, V2_PREDICTIONS, na_probs), strict=True):
        path.write_text(json.dumps(content))
    return paths


def test_cli_scores_v2_and_reads_na_prob_file(tmp_path):
    dataset, predictions, na_probs = _write_v2_case(tmp_path, V2_NA_PROBS)
    result = _run_cli(dataset, predictions, "--na-prob-file", na_probs)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # no version warning for a v2.0 file
    assert json.loads(result.stdout) == pytest.approx(evaluate_v2(V2_CASE, V2_PREDICTIONS, V2_NA_PROBS))
    thresholded = json.loads(_run_cli(dataset, predictions, "-n", na_probs, "-t", "0.2").stdout)
    assert thresholded["f1"] == pytest.approx(75.0)
    assert "best_f1" not in json.loads(_run_cli(dataset, predictions).stdout)


def test_cli_v2_flag_forces_v2_rules_on_a_v1_file(tmp_path):
    dataset = tmp_path / "dev.json"
    dataset.write_text(json.dumps({"version": "1.1", "data": _dataset(("q1", ["a cat"]), ("q2", ["dog"]))}))
    predictions = tmp_path / "predictions.json"
    predictions.write_text(json.dumps({"q1": "cat", "q2": "fish"}))
    assert json.loads(_run_cli(dataset, predictions).stdout) == {"exact_match": 50.0, "f1": 50.0}
    scores = json.loads(_run_cli(dataset, predictions, "--version-2-with-negative").stdout)
    assert scores == {"exact": 50.0, "f1": 50.0, "total": 2,
                      "HasAns_exact": 50.0, "HasAns_f1": 50.0, "HasAns_total": 2}
    refused = _run_cli(dataset, predictions, "--na-prob-file", predictions)
    assert refused.returncode == 2
    assert "--na-prob-file applies to SQuAD v2.0 scoring" in refused.stderr


def test_cli_reports_a_bad_na_prob_file_in_one_line(tmp_path):
    dataset, predictions, na_probs = _write_v2_case(tmp_path, {**V2_NA_PROBS, "a1": "high"})
    result = _run_cli(dataset, predictions, "--na-prob-file", na_probs)
    assert result.returncode == 1
    assert_one_line(result.stderr, f"squad_evaluate.py: {na_probs}: ", "question a1", "not a number")
    na_probs.write_text(json.dumps({"a1": 0.0}))
    result = _run_cli(dataset, predictions, "--na-prob-file", na_probs)
    assert_one_line(result.stderr, f"squad_evaluate.py: {na_probs}: ", "no probability", "question a2")
