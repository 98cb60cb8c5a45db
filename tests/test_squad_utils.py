"""squad_utils.py: windowing and max-context against hand-worked cases, answer spans that round-trip to the
original text on the whole dev set, postprocessing, and one-line errors for bad files."""

from __future__ import annotations

import json
import unicodedata

import numpy as np
import pytest

from conftest import require_shared
from data_fixtures import numbered_windows
from finetuning.feature_batching import batch_indices
from squad_evaluate import load_dataset
from squad_utils import (
    SquadExample,
    answer_token_span,
    collate_features,
    convert_examples_to_features,
    doc_spans,
    max_context_spans,
    postprocess_predictions,
    read_squad_examples,
    span_text,
    tokenized_contexts,
)
from tokenizer import BertTokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return BertTokenizer(str(require_shared("vocab", "bert-uncased-vocab.txt")), do_lower_case=True)


@pytest.fixture(scope="module")
def dev_path():
    return str(require_shared("data", "squad", "v1.1", "dev-v1.1.json"))


def test_doc_spans_stride_and_last_span_reaches_the_end():
    assert doc_spans(10, 4, 3) == [(0, 4), (3, 4), (6, 4)]
    assert doc_spans(11, 4, 3) == [(0, 4), (3, 4), (6, 4), (9, 2)]
    assert doc_spans(3, 4, 3) == [(0, 3)]


def test_max_context_matches_berts_worked_example():
    # Google's run_squad.py comment: "the man went to the store and bought a gallon of milk" in spans
    # A = [the man went to the], B = [to the store and bought], C = [and bought a gallon of].
    # "bought" (position 7) has 4 left / 0 right in B and 1 left / 3 right in C, so C is its max context.
    spans = [(0, 5), (3, 5), (6, 5)]
    best = max_context_spans(spans, 12)
    assert best[7] == 2
    assert best[3] == 0  # "to": A gives min(3, 1) = 1, B gives min(0, 4) = 0
    assert best[5] == 1  # "store": only in B


def _is_punctuation(character: str) -> bool:
    """Google BERT's _is_punctuation: the ASCII symbol ranges and every Unicode P* category."""
    code = ord(character)
    if 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126:
        return True
    return unicodedata.category(character).startswith("P")


def _on_word_boundary(text: str, index: int) -> bool:
    """Whether a BERT word (split on whitespace and punctuation) can begin or end at character `index`."""
    if index in (0, len(text)):
        return True
    return any(c.isspace() or _is_punctuation(c) for c in (text[index - 1], text[index]))


def test_answers_map_back_to_their_exact_text_on_dev(tokenizer, dev_path):
    """Every dev gold answer whose ends fall on word boundaries round-trips: char span -> tokens -> text.

    The rest are annotations that cut a word ("gold" of "golden", "8" of "18", "20,980" of "£20,980",
    "March 200" of "March 2003"). A token span can only widen them to whole tokens, unless the cut happens to
    fall between two word pieces.
    """
    counts = {"round_trip": 0, "cut_word_round_trip": 0, "cut_word_widened": 0}
    for article in load_dataset(dev_path):
        for paragraph in article["paragraphs"]:
            context = paragraph["context"]
            tokens = tokenized_contexts([SquadExample("", "", context, 0)], tokenizer)[0]
            for qa in paragraph["qas"]:
                for answer in qa["answers"]:
                    start, end = answer["answer_start"], answer["answer_start"] + len(answer["text"])
                    first, last = answer_token_span(tokens.char_starts, tokens.char_ends, start, end)
                    recovered = context[tokens.char_starts[first]:tokens.char_ends[last]]
                    if _on_word_boundary(context, start) and _on_word_boundary(context, end):
                        assert recovered == answer["text"], qa["id"]
                        counts["round_trip"] += 1
                    elif recovered == answer["text"]:
                        counts["cut_word_round_trip"] += 1
                    else:
                        # widened to whole tokens, never shifted or shortened
                        assert tokens.char_starts[first] <= start and end <= tokens.char_ends[last], qa["id"]
                        counts["cut_word_widened"] += 1
    assert counts == {"round_trip": 34635, "cut_word_round_trip": 14, "cut_word_widened": 77}


@pytest.fixture(scope="module")
def dev_training_data(tokenizer, dev_path):
    examples = read_squad_examples(dev_path, is_training=True)
    return examples, convert_examples_to_features(examples, tokenizer, is_training=True)


def test_dev_windows_cover_every_token_once_as_max_context(dev_training_data, tokenizer):
    examples, features = dev_training_data
    assert len(examples) == 10570
    by_example = {}
    for feature in features:
        assert len(feature.input_ids) <= 384
        assert feature.input_ids[0] == tokenizer.cls_token_id and feature.input_ids[-1] == tokenizer.sep_token_id
        question_length = feature.token_type_ids.index(1) - 2
        assert question_length <= 64
        by_example.setdefault(feature.example_index, []).append(feature)
    contexts = tokenized_contexts(examples, tokenizer)
    long_examples = 0
    for example_index, example_features in by_example.items():
        context = contexts[examples[example_index].context_index]
        max_context_counts = {}
        for feature in example_features:
            starts = feature.char_starts[feature.token_is_max_context]
            for char_start in starts.tolist():
                max_context_counts[char_start] = max_context_counts.get(char_start, 0) + 1
        assert sorted(max_context_counts) == sorted(context.char_starts.tolist())
        assert set(max_context_counts.values()) == {1}
        long_examples += len(example_features) > 1
    assert long_examples > 0  # the test exercised windowing


def test_training_labels_point_at_the_answer_text(dev_training_data):
    examples, features = dev_training_data
    labelled = set()
    for feature in features:
        if feature.start_position == 0:
            assert feature.end_position == 0
            continue
        example = examples[feature.example_index]
        text = span_text(example, feature, feature.start_position, feature.end_position)
        assert example.answer_text in text  # equal unless the annotation cuts a word
        labelled.add(feature.example_index)
    assert len(labelled) == len(examples)  # every dev answer fits in some window


def test_oracle_logits_predict_the_gold_text(dev_training_data, tokenizer):
    """Logits peaked at the training labels must come back, through postprocessing, as the gold text."""
    examples, features = dev_training_data
    logits = {}
    for feature in features:
        start_logits = np.zeros(len(feature.input_ids), np.float32)
        end_logits = np.zeros(len(feature.input_ids), np.float32)
        if feature.start_position:
            start_logits[feature.start_position] = end_logits[feature.end_position] = 10.0
        logits[feature.unique_id] = (start_logits, end_logits)
    predictions, _ = postprocess_predictions(examples, features, logits, max_answer_length=384)
    missed = {example.qas_id for example in examples if predictions[example.qas_id] != example.answer_text}
    # the first answers of dev that cut a word and widen to whole tokens (see the round-trip test)
    assert len(missed) == 32
    predictions, nbest = postprocess_predictions(examples, features, logits, max_answer_length=30)
    too_long = {example.qas_id for example in examples if len(tokenizer.tokenize(example.answer_text)) > 30}
    assert len(too_long) == 9
    assert {example.qas_id for example in examples if predictions[example.qas_id] != example.answer_text} == (
        missed | too_long
    )
    assert len(nbest[examples[0].qas_id]) == 20
    assert sum(entry["probability"] for entry in nbest[examples[0].qas_id]) == pytest.approx(1.0)


def test_postprocess_recovers_original_text_and_applies_limits(tokenizer):
    context = "Café Müller's team, the Denver Broncos, won in 2016."
    example = SquadExample("q", "Who won?", context, 0)
    [feature] = convert_examples_to_features([example], tokenizer, max_seq_length=64, max_query_length=8)
    tokens = [tokenizer.convert_ids_to_tokens([i])[0] for i in feature.input_ids]
    cafe, denver, broncos, year = (tokens.index(t) for t in ("cafe", "denver", "broncos", "2016"))
    start_logits = np.zeros(len(tokens))
    end_logits = np.zeros(len(tokens))
    start_logits[[0, cafe, denver]] = [9.0, 3.0, 5.0]  # [CLS] scores highest but is not in the context
    end_logits[[cafe + 1, broncos, year]] = [2.0, 4.0, 8.0]
    logits = {feature.unique_id: (start_logits, end_logits)}
    predictions, nbest = postprocess_predictions([example], [feature], logits, n_best_size=3, max_answer_length=30)
    # denver..2016 (13) beats denver..broncos (9) and cafe..2016 (11); text keeps the original case and accents
    assert predictions["q"] == "Denver Broncos, won in 2016"
    assert [entry["text"] for entry in nbest["q"]] == [
        "Denver Broncos, won in 2016", "Café Müller's team, the Denver Broncos, won in 2016", "Denver Broncos"
    ]
    scores = np.array([13.0, 11.0, 9.0])
    expected = np.exp(scores - scores.max()) / np.exp(scores - scores.max()).sum()
    assert [entry["probability"] for entry in nbest["q"]] == pytest.approx(expected.tolist())
    # answers longer than max_answer_length tokens are dropped: denver..broncos is 2 tokens
    predictions, _ = postprocess_predictions([example], [feature], logits, n_best_size=3, max_answer_length=2)
    assert predictions["q"] == "Denver Broncos"


def test_postprocess_scores_a_token_only_in_its_max_context_window(tokenizer):
    example, features = numbered_windows(tokenizer)
    logits = {}
    for window, feature in enumerate(features):
        start_logits = np.zeros(len(feature.input_ids))
        end_logits = np.zeros(len(feature.input_ids))
        first_context_token = np.nonzero(feature.char_starts >= 0)[0][0]
        # later windows score their first context token higher; those tokens have more context (8 tokens
        # to the left) in the window before, so only the first window's "1" may be chosen
        start_logits[first_context_token] = end_logits[first_context_token] = 5.0 + window
        logits[feature.unique_id] = (start_logits, end_logits)
    predictions, _ = postprocess_predictions([example], features, logits, n_best_size=2, max_answer_length=30)
    assert predictions["q"] == "1"


def test_collate_pads_to_the_longest_feature(tokenizer):
    examples = [SquadExample("a", "short?", "one two", 0), SquadExample("b", "a longer question here?", "x", 1)]
    features = convert_examples_to_features(examples, tokenizer, max_seq_length=32, max_query_length=8)
    batch = collate_features(features, tokenizer.pad_token_id, is_training=False)
    lengths = [len(f.input_ids) for f in features]
    assert batch["input_ids"].shape == (2, max(lengths))
    assert batch["attention_mask"].sum(axis=1).tolist() == lengths
    short = int(np.argmin(lengths))
    assert (batch["input_ids"][short, lengths[short]:] == tokenizer.pad_token_id).all()
    assert set(batch) == {"input_ids", "token_type_ids", "attention_mask", "unique_ids"}


def test_data_parallel_batches_partition_the_single_process_batches():
    single = list(batch_indices(10, batch_size=4, shuffle=True, seed=3, epoch=1))
    rank0 = list(batch_indices(10, batch_size=2, shuffle=True, seed=3, epoch=1, rank=0, world_size=2))
    rank1 = list(batch_indices(10, batch_size=2, shuffle=True, seed=3, epoch=1, rank=1, world_size=2))
    assert len(rank0) == len(rank1) == len(single) == 3
    for whole, part0, part1 in zip(single, rank0, rank1, strict=True):
        assert sorted(whole) == sorted(part0 + part1)
    assert sorted(i for batch in single for i in batch) == list(range(10))
    assert single != list(batch_indices(10, batch_size=4, shuffle=True, seed=3, epoch=2))  # reshuffled per epoch
    odd = [list(batch_indices(5, 2, False, rank=r, world_size=2)) for r in (0, 1)]
    assert odd == [[[0, 2], [4]], [[1, 3], [0]]]  # padded by wrapping so that every rank takes as many steps


def _write_squad(path, qa_changes=None, drop=None, raw=None):
    qa = {"id": "q-7", "question": "Who?", "answers": [{"text": "Ann", "answer_start": 0}]}
    qa.update(qa_changes or {})
    qa.pop(drop, None)
    content = {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": "Ann met Bob.", "qas": [qa]}]}]}
    path.write_text(raw if raw is not None else json.dumps(content))
    return str(path)


def _write_paragraphs(path, paragraphs):
    path.write_text(json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": paragraphs}]}))
    return str(path)


def test_a_repeated_question_id_is_refused_for_prediction_and_warned_about_in_training(tmp_path, capsys):
    """predictions.json maps an id to one answer: with two questions under one id, one answer would be lost."""
    answer = [{"text": "Ann", "answer_start": 0}]
    path = _write_paragraphs(tmp_path / "twice.json", [
        {"context": "Ann met Bob.", "qas": [{"id": "q-1", "question": "Who met Bob?", "answers": answer}]},
        {"context": "Ann saw Eve.", "qas": [{"id": "q-2", "question": "Who saw?", "answers": answer},
                                            {"id": "q-1", "question": "Who saw Eve?", "answers": answer}]}])
    with pytest.raises(ValueError) as error:
        read_squad_examples(path, is_training=False)
    assert str(error.value) == (f"{path}: question q-1 (article 0 paragraph 1) has the id of the question in article 0 "
                                "paragraph 0; predictions are keyed by id, so one answer would replace the other")
    assert [example.question_text for example in read_squad_examples(path, is_training=True)] == [
        "Who met Bob?", "Who saw?", "Who saw Eve?"]
    assert capsys.readouterr().err == (f"{path}: warning: question id q-1 (article 0 paragraph 0) is used again (1 "
                                       "repeated id(s) in the file; every question is kept)\n")


@pytest.mark.parametrize("is_training", [True, False])
def test_an_empty_question_or_context_is_refused(tmp_path, is_training):
    question = _write_squad(tmp_path / "question.json", {"question": "  "})
    with pytest.raises(ValueError, match=rf"^{question}: question q-7 \(article 0 paragraph 0\) has an empty question"):
        read_squad_examples(question, is_training=is_training)
    context = _write_paragraphs(tmp_path / "context.json", [{"context": "", "qas": [{"id": "q-9", "question": "?"}]}])
    with pytest.raises(ValueError, match=rf"^{context}: article 0 paragraph 0 has an empty context"):
        read_squad_examples(context, is_training=is_training)


def test_bad_files_give_one_line_errors_naming_file_and_record(tmp_path):
    malformed = _write_squad(tmp_path / "malformed.json", raw='{"data": [')
    with pytest.raises(ValueError, match=rf"^{malformed}: not valid JSON"):
        read_squad_examples(malformed, is_training=False)
    missing = _write_squad(tmp_path / "missing.json", drop="question")
    with pytest.raises(ValueError, match=rf"^{missing}: question q-7 lacks the field \"question\"$"):
        read_squad_examples(missing, is_training=False)
    wrong_start = _write_squad(tmp_path / "wrong_start.json", {"answers": [{"text": "Ann", "answer_start": 4}]})
    with pytest.raises(ValueError, match=rf"^{wrong_start}: question q-7 answer_start 4 does not point at"):
        read_squad_examples(wrong_start, is_training=True)
    assert read_squad_examples(wrong_start, is_training=False)[0].answer_text is None  # prediction ignores answers
    with pytest.raises(FileNotFoundError, match=r"nowhere\.json: file not found"):
        read_squad_examples(str(tmp_path / "nowhere.json"), is_training=False)
