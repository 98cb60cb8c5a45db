"""SQuAD v2.0 end to end on a v2-format file built from the v1.1 dev set: reading unanswerable questions, their
[CLS] training labels, prediction with the null-score threshold, and the v2.0 metrics on it.

data_fixtures.make_v2_dataset keeps every dev question and turns every third one (in file order) into an unanswerable
question by asking it about a paragraph of the next article instead of its own.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT, require_shared
from data_fixtures import make_v2_dataset, numbered_windows
from squad_evaluate import evaluate_v2, load_dataset, load_squad_json
from squad_utils import (
    SquadExample,
    convert_examples_to_features,
    null_odds,
    postprocess_predictions,
    read_squad_examples,
)
from tokenizer import BertTokenizer

NUM_QUESTIONS = 10570
NUM_UNANSWERABLE = 3523  # questions 2, 5, 8, ... of 10570


@pytest.fixture(scope="module")
def v1_path():
    return str(require_shared("data", "squad", "v1.1", "dev-v1.1.json"))


@pytest.fixture(scope="module")
def v2_path(v1_path, tmp_path_factory):
    path = tmp_path_factory.mktemp("squad2") / "dev-v2-from-v1.1.json"
    path.write_text(json.dumps(make_v2_dataset(load_dataset(v1_path))))
    return str(path)


@pytest.fixture(scope="module")
def tokenizer():
    return BertTokenizer(str(require_shared("vocab", "bert-uncased-vocab.txt")), do_lower_case=True)


def _questions(path):
    with open(path, encoding="utf-8") as reader:
        data = json.load(reader)["data"]
    return [(paragraph["context"], qa) for article in data for paragraph in article["paragraphs"]
            for qa in paragraph["qas"]]


def test_built_file_keeps_every_question_and_is_deterministic(v1_path, v2_path):
    v1 = {qa["id"]: (context, qa) for context, qa in _questions(v1_path)}
    v2 = _questions(v2_path)
    assert len(v2) == len(v1) == NUM_QUESTIONS
    assert {qa["id"] for _, qa in v2} == set(v1)
    unanswerable = [(context, qa) for context, qa in v2 if qa["is_impossible"]]
    assert len(unanswerable) == NUM_UNANSWERABLE
    for context, qa in unanswerable:
        assert qa["answers"] == [] and qa["question"] == v1[qa["id"]][1]["question"]
        assert context != v1[qa["id"]][0]  # asked about another article's paragraph
    for context, qa in v2:
        if not qa["is_impossible"]:
            assert (context, qa["answers"]) == (v1[qa["id"]][0], v1[qa["id"]][1]["answers"])
    assert make_v2_dataset(load_dataset(v1_path)) == make_v2_dataset(load_dataset(v1_path))


def _gold_predictions(path):
    return {qa["id"]: qa["answers"][0]["text"] if qa["answers"] else "" for _, qa in _questions(path)}


def test_gold_answers_score_100_on_every_metric(v2_path):
    predictions = _gold_predictions(v2_path)
    # null odds that separate the two kinds perfectly: best thresholds also reach 100
    na_probs = {qid: -1.0 if text else 1.0 for qid, text in predictions.items()}
    scores = evaluate_v2(load_squad_json(v2_path)["data"], predictions, na_probs, na_prob_thresh=0.0)
    assert scores == {
        "exact": 100.0, "f1": 100.0, "total": NUM_QUESTIONS,
        "HasAns_exact": 100.0, "HasAns_f1": 100.0, "HasAns_total": NUM_QUESTIONS - NUM_UNANSWERABLE,
        "NoAns_exact": 100.0, "NoAns_f1": 100.0, "NoAns_total": NUM_UNANSWERABLE,
        "best_exact": 100.0, "best_exact_thresh": -1.0, "best_f1": 100.0, "best_f1_thresh": -1.0,
    }


def test_no_answer_everywhere_scores_hasans_0_noans_100_through_cli(v2_path, tmp_path):
    predictions = tmp_path / "predictions.json"
    predictions.write_text(json.dumps(dict.fromkeys(_gold_predictions(v2_path), "")))
    result = subprocess.run([sys.executable, str(ROOT / "squad_evaluate.py"), v2_path, str(predictions)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    scores = json.loads(result.stdout)  # v2.0 found from is_impossible, no flag needed
    assert (scores["HasAns_exact"], scores["HasAns_f1"]) == (0.0, 0.0)
    assert (scores["NoAns_exact"], scores["NoAns_f1"]) == (100.0, 100.0)
    assert scores["exact"] == pytest.approx(100 * NUM_UNANSWERABLE / NUM_QUESTIONS)
    assert scores["f1"] == pytest.approx(100 * NUM_UNANSWERABLE / NUM_QUESTIONS)


@pytest.fixture(scope="module")
def v2_training_data(v2_path, tokenizer):
    examples = read_squad_examples(v2_path, is_training=True, version_2_with_negative=True)
    return examples, convert_examples_to_features(examples, tokenizer, is_training=True)


def test_unanswerable_questions_train_on_cls(v2_training_data):
    examples, features = v2_training_data
    assert sum(example.is_impossible for example in examples) == NUM_UNANSWERABLE
    unanswerable_features = [feature for feature in features if examples[feature.example_index].is_impossible]
    assert len(unanswerable_features) >= NUM_UNANSWERABLE
    for feature in unanswerable_features:
        assert (feature.start_position, feature.end_position) == (0, 0)
    for example in examples:
        assert (example.answer_text is None) == example.is_impossible


def test_answerable_questions_get_the_v1_features(v1_path, v2_training_data, tokenizer):
    """An answerable question of the v2 file gets exactly the windows and labels it gets from the v1.1 file."""
    examples, features = v2_training_data
    v1_examples = read_squad_examples(v1_path, is_training=True)
    v1_features = convert_examples_to_features(v1_examples, tokenizer, is_training=True)

    def by_question(examples, features):
        grouped = {}
        for feature in features:
            example = examples[feature.example_index]
            if not example.is_impossible:
                grouped.setdefault(example.qas_id, []).append(
                    (feature.input_ids, feature.start_position, feature.end_position,
                     feature.char_starts.tolist(), feature.token_is_max_context.tolist()))
        return grouped

    v2_grouped = by_question(examples, features)
    v1_grouped = by_question(v1_examples, v1_features)
    assert len(v2_grouped) == NUM_QUESTIONS - NUM_UNANSWERABLE
    assert v2_grouped == {qas_id: v1_grouped[qas_id] for qas_id in v2_grouped}


def test_v1_reading_of_a_v2_file_is_unchanged_and_training_names_the_flag(v2_path):
    examples = read_squad_examples(v2_path, is_training=False)
    assert not any(example.is_impossible for example in examples)
    with pytest.raises(ValueError, match=r"has no answer to train on \(it is an unanswerable SQuAD v2\.0 question"):
        read_squad_examples(v2_path, is_training=True)


def test_oracle_logits_predict_gold_and_null_answers(v1_path, v2_path, v2_training_data):
    """Logits peaked at the training labels ([CLS] for unanswerable questions) come back as the gold text or ""."""
    examples, features = v2_training_data
    logits = {}
    for feature in features:
        start_logits = np.zeros(len(feature.input_ids), np.float32)
        end_logits = np.zeros(len(feature.input_ids), np.float32)
        start_logits[feature.start_position] = end_logits[feature.end_position] = 10.0
        logits[feature.unique_id] = (start_logits, end_logits)
    predictions, nbest = postprocess_predictions(examples, features, logits, max_answer_length=384,
                                                 version_2_with_negative=True)
    odds = null_odds(nbest)
    # Unanswerable: score_null 20 in every window, best span 0. Answerable: the window holding the answer
    # has score_null 0 (the minimum over windows), the answer scores 20.
    for example in examples:
        assert odds[example.qas_id] == (20.0 if example.is_impossible else -20.0)
        assert [entry["text"] for entry in nbest[example.qas_id]].count("") == 1
    assert {qas_id for qas_id, text in predictions.items() if text == ""} == {
        example.qas_id for example in examples if example.is_impossible}
    # the answerable ones equal their gold text unless the annotation cuts a word (32 first answers of dev,
    # see test_squad_utils); about two thirds of those stay answerable here
    v1_gold = {example.qas_id: example.answer_text for example in read_squad_examples(v1_path, is_training=True)}
    missed = {example.qas_id for example in examples
              if not example.is_impossible and predictions[example.qas_id] != v1_gold[example.qas_id]}
    assert 0 < len(missed) < 32
    scores = evaluate_v2(load_squad_json(v2_path)["data"], predictions, odds)
    assert (scores["NoAns_exact"], scores["NoAns_f1"]) == (100.0, 100.0)
    # a widened answer may still match another gold answer exactly
    assert 100 * (1 - len(missed) / (NUM_QUESTIONS - NUM_UNANSWERABLE)) <= scores["HasAns_exact"] < 100
    # answering exactly the questions with odds -20 is what the predictions already do
    assert (scores["best_exact"], scores["best_exact_thresh"]) == (scores["exact"], -20.0)


def test_null_threshold_on_hand_made_logits(tokenizer):
    example, features = numbered_windows(tokenizer)
    logits = {}
    for window, feature in enumerate(features):
        start_logits = np.full(len(feature.input_ids), -5.0)
        end_logits = np.full(len(feature.input_ids), -5.0)
        start_logits[0], end_logits[0] = 2.0 + window, 1.0  # [CLS]: 3 in window 0, 4 in window 1, ...
        first_context_token = int(np.nonzero(feature.char_starts >= 0)[0][0])
        if window == 0:
            start_logits[first_context_token], end_logits[first_context_token] = 1.5, 1.0  # "1" scores 2.5
        logits[feature.unique_id] = (start_logits, end_logits)
    # score_null = min over windows = 3 (window 0: 2 + 1); best non-null "1" = 2.5; null odds 3 - 2.5 = 0.5
    run = {threshold: postprocess_predictions([example], features, logits, n_best_size=3,
                                              version_2_with_negative=True, null_score_diff_threshold=threshold)
           for threshold in (0.0, 0.5, 1.0)}
    assert {threshold: predictions["q"] for threshold, (predictions, _) in run.items()} == {
        0.0: "", 0.5: "1", 1.0: "1"}  # "" only when the odds exceed the threshold
    predictions, nbest = run[0.0]
    assert null_odds(nbest) == {"q": pytest.approx(0.5)}
    # the null answer ranks first (3 > 2.5) with window 0's [CLS] logits; then "1" and the next best span
    assert [entry["text"] for entry in nbest["q"]][:2] == ["", "1"]
    assert (nbest["q"][0]["start_logit"], nbest["q"][0]["end_logit"]) == (2.0, 1.0)
    # v1.1 postprocessing of the same logits has no null answer and no null odds
    predictions, nbest = postprocess_predictions([example], features, logits, n_best_size=3)
    assert predictions["q"] == "1" and "" not in [entry["text"] for entry in nbest["q"]]
    with pytest.raises(ValueError, match=r"^question q: the n-best holds no null answer"):
        null_odds(nbest)


def test_null_answer_outside_the_n_best_is_appended(tokenizer):
    example = SquadExample("q", "which?", "one two three", 0)
    [feature] = convert_examples_to_features([example], tokenizer, max_seq_length=32, max_query_length=8)
    tokens = tokenizer.convert_ids_to_tokens(feature.input_ids)
    one, two = tokens.index("one"), tokens.index("two")
    start_logits = np.zeros(len(tokens))
    end_logits = np.zeros(len(tokens))
    start_logits[[0, one, two]] = end_logits[[0, one, two]] = [-10.0, 3.0, 2.0]
    # spans: one..one 6, one..two 5, two..two 4; n_best_size 2 keeps the first two; score_null -20 comes after
    predictions, nbest = postprocess_predictions([example], [feature], {feature.unique_id: (start_logits, end_logits)},
                                                 n_best_size=2, version_2_with_negative=True)
    assert [entry["text"] for entry in nbest["q"]] == ["one", "one two", ""]
    assert predictions["q"] == "one" and null_odds(nbest) == {"q": -26.0}
    assert sum(entry["probability"] for entry in nbest["q"]) == pytest.approx(1.0)
