"""glue_data.py: GLUE readers on the real files, a hand-written QQP file, named-column CSV/TSV tables, malformed
rows, and features against the tokenizer's own pair encoding."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from conftest import require_shared
from finetuning.glue_data import (
    NO_LABEL,
    ClassificationExample,
    ClassificationFeature,
    collate_classification,
    convert_examples_to_features,
    read_glue_examples,
    read_table_examples,
    truncated_lengths,
)
from tokenizer import BertTokenizer

# Data rows and label counts of the standard files, from ../shared/data/glue/README.md (and GLUE's own counts).
REAL_FILES = [
    ("mrpc", "MRPC", "train", 3668, {"1": 2474, "0": 1194}),
    ("mrpc", "MRPC", "dev", 408, {"1": 279, "0": 129}),
    ("rte", "RTE", "train", 2490, {"entailment": 1249, "not_entailment": 1241}),
    ("rte", "RTE", "dev", 277, {"entailment": 146, "not_entailment": 131}),
    ("sst-2", "SST-2", "train", 67349, {"1": 37569, "0": 29780}),
    ("sst-2", "SST-2", "dev", 872, {"1": 444, "0": 428}),
    ("cola", "CoLA", "train", 8551, {"1": 6023, "0": 2528}),
    ("cola", "CoLA", "dev", 1043, {"1": 721, "0": 322}),
]


@pytest.mark.parametrize(("task", "folder", "split", "rows", "label_counts"), REAL_FILES)
def test_real_glue_files_read_every_row_with_its_label(task, folder, split, rows, label_counts):
    examples = read_glue_examples(task, require_shared("data", "glue", folder, f"{split}.tsv"))
    assert len(examples) == rows
    assert collections.Counter(example.label for example in examples) == label_counts
    assert len({example.guid for example in examples}) == rows
    assert all(example.text_a for example in examples)
    assert all((example.text_b is not None) == (task in ("mrpc", "rte")) for example in examples)


def test_mrpc_bom_header_and_quotes_kept_inside_fields():
    first = read_glue_examples("mrpc", require_shared("data", "glue", "MRPC", "train.tsv"))[0]
    assert first == ClassificationExample(
        guid="702876-702977",
        text_a='Amrozi accused his brother , whom he called " the witness " , of deliberately distorting his '
               "evidence .",
        text_b='Referring to him as only " the witness " , Amrozi accused his brother of deliberately distorting '
               "his evidence .",
        label="1",
    )


def test_cola_has_no_header_and_its_last_row_has_no_newline():
    examples = read_glue_examples("cola", require_shared("data", "glue", "CoLA", "dev.tsv"))
    assert examples[0] == ClassificationExample("0", "The sailors rode the breeze clear of the rocks.", None, "1")
    assert examples[-1] == ClassificationExample("1042", "John talked to Bill about himself.", None, "1")


def test_rte_ids_are_its_index_column():
    examples = read_glue_examples("rte", require_shared("data", "glue", "RTE", "dev.tsv"))
    assert examples[0].guid == "0" and examples[-1].guid == "276"
    assert examples[0].text_b == "Christopher Reeve had an accident."
    assert examples[0].label == "not_entailment"


QQP_HEADER = "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"


def test_qqp_reader_on_a_file_in_its_format(tmp_path):
    path = tmp_path / "dev.tsv"
    path.write_text(
        QQP_HEADER
        + '201359\t303345\t303346\tWhy are African-Americans so beautiful?\tWhy are hispanics so beautiful?\t0\n'
        + '263843\t69383\t380476\tI want to pursue PhD in "Computer Science"?\tHow do I get into a CS PhD?\t1\n',
        encoding="utf-8",
    )
    assert read_glue_examples("qqp", path) == [
        ClassificationExample("201359", "Why are African-Americans so beautiful?", "Why are hispanics so beautiful?",
                              "0"),
        ClassificationExample("263843", 'I want to pursue PhD in "Computer Science"?', "How do I get into a CS PhD?",
                              "1"),
    ]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (QQP_HEADER + "1\t2\t3\tq1\tq2\t0\n4\t5\t6\tq3\t1\n", ":3: expected 6 tab-separated fields, found 5"),
        (QQP_HEADER + "1\t2\t3\tq1\tq2\tyes\n", ":2: label 'yes' is not one of ['0', '1']"),
        (QQP_HEADER + "1\t2\t3\tq1\tq2\t0\n\n", ":3: expected 6 tab-separated fields, found 0"),
        ("id\tquestion1\tquestion2\n1\tq1\tq2\n", ":1: header ['id', 'question1', 'question2'] is not the qqp header"),
    ],
)
def test_malformed_rows_name_the_file_and_line(tmp_path, content, message):
    path = tmp_path / "train.tsv"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError) as error:
        read_glue_examples("qqp", path)
    assert str(error.value).startswith(f"{path}{message}")
    assert "\n" not in str(error.value)


def test_an_empty_sentence_is_kept_with_one_warning_naming_the_file_and_line(tmp_path, capsys):
    path = tmp_path / "train.tsv"
    path.write_text(QQP_HEADER + "1\t2\t3\tq1\tq2\t0\n4\t5\t6\t \tq4\t1\n7\t8\t9\tq5\t\t1\n", encoding="utf-8")
    examples = read_glue_examples("qqp", path)
    assert [example.guid for example in examples] == ["1", "4", "7"]
    assert capsys.readouterr().err == (f"{path}:3: warning: an empty sentence (2 row(s) of the file have one; "
                                       "they are kept)\n")
    path.write_text(QQP_HEADER + "1\t2\t3\tq1\tq2\t0\n", encoding="utf-8")
    read_glue_examples("qqp", path)
    assert capsys.readouterr().err == ""


def test_missing_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.tsv: file not found"):
        read_glue_examples("sst-2", tmp_path / "missing.tsv")


def test_csv_table_with_named_columns_and_quoting(tmp_path):
    path = tmp_path / "reviews.csv"
    path.write_text('key,review,label,summary\nr1,"Good, really ""good""",pos,fine\n'
                    'r2,"two\nlines",neg,bad\n', encoding="utf-8")
    examples = read_table_examples(path, "review", ["neg", "pos"], text_b_column="summary", label_column="label",
                                   id_column="key")
    assert examples == [ClassificationExample("r1", 'Good, really "good"', "fine", "pos"),
                        ClassificationExample("r2", "two\nlines", "bad", "neg")]


def test_tsv_table_has_quoting_off_and_row_number_ids(tmp_path):
    path = tmp_path / "data.tsv"
    path.write_text('text\ty\n"half quoted\t1\nplain\t0\n', encoding="utf-8")
    examples = read_table_examples(path, "text", ["0", "1"], label_column="y")
    assert examples == [ClassificationExample("0", '"half quoted', None, "1"),
                        ClassificationExample("1", "plain", None, "0")]


def test_table_labels_are_optional_only_when_not_required(tmp_path):
    path = tmp_path / "test.tsv"
    path.write_text("index\tsentence\n0\tan unlabelled sentence\n", encoding="utf-8")
    [example] = read_table_examples(path, "sentence", ["0", "1"], label_column="label", id_column="index",
                                    require_labels=False)
    assert example == ClassificationExample("0", "an unlabelled sentence", None, None)
    with pytest.raises(ValueError, match=r"test.tsv:1: no column 'label' in the header \['index', 'sentence'\]"):
        read_table_examples(path, "sentence", ["0", "1"], label_column="label")
    with pytest.raises(ValueError, match=r"test.tsv:2: expected 2 tab-separated fields, found 1"):
        path.write_text("index\tsentence\n0\n", encoding="utf-8")
        read_table_examples(path, "sentence", ["0", "1"], require_labels=False)


@pytest.mark.parametrize(
    ("length_a", "length_b", "max_tokens", "expected"),
    [(10, 3, 8, (5, 3)), (4, 4, 6, (3, 3)), (5, 2, 4, (2, 2)), (3, 9, 4, (2, 2)), (2, 3, 9, (2, 3)), (1, 1, 0, (0, 0))],
)
def test_truncation_shortens_the_longer_text_first(length_a, length_b, max_tokens, expected):
    assert truncated_lengths(length_a, length_b, max_tokens) == expected


@pytest.fixture(scope="module")
def tokenizer():
    return BertTokenizer(str(require_shared("vocab", "bert-uncased-vocab.txt")))


def test_features_equal_the_tokenizers_pair_encoding_when_they_fit(tokenizer):
    examples = [ClassificationExample("0", "The cat sat.", "A cat was sitting!", "1"),
                ClassificationExample("1", "Unaffable réalité", None, "0"),
                ClassificationExample("2", "No label here", "at all", None)]
    features = convert_examples_to_features(examples, tokenizer, 64, ["0", "1"])
    for example, feature in zip(examples, features, strict=True):
        expected = tokenizer.encode_pair(example.text_a, example.text_b)
        assert feature.input_ids == expected.input_ids
        assert feature.token_type_ids == expected.token_type_ids
    assert [feature.label_id for feature in features] == [1, 0, NO_LABEL]


def test_long_features_are_cut_to_max_seq_length(tokenizer):
    text_a = "one two three four five six seven eight nine ten"
    examples = [ClassificationExample("0", text_a, "red green", "0"), ClassificationExample("1", text_a, None, "1")]
    pair, single = convert_examples_to_features(examples, tokenizer, 9, ["0", "1"])
    ids_a = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(text_a))
    ids_b = tokenizer.convert_tokens_to_ids(tokenizer.tokenize("red green"))
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    assert pair.input_ids == [cls, *ids_a[:4], sep, *ids_b, sep]  # 9 - 3 = 6 text tokens: a keeps 4, b its 2
    assert pair.token_type_ids == [0] * 6 + [1] * 3
    assert single.input_ids == [cls, *ids_a[:7], sep]
    assert single.token_type_ids == [0] * 9


def test_collate_pads_to_the_longest_feature():
    batch = collate_classification([ClassificationFeature([101, 7, 102], [0, 0, 0], 1),
                                    ClassificationFeature([101, 8, 102, 9, 102], [0, 0, 0, 1, 1], 0)], pad_token_id=0)
    np.testing.assert_array_equal(batch["input_ids"], [[101, 7, 102, 0, 0], [101, 8, 102, 9, 102]])
    np.testing.assert_array_equal(batch["token_type_ids"], [[0, 0, 0, 0, 0], [0, 0, 0, 1, 1]])
    np.testing.assert_array_equal(batch["attention_mask"], [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    np.testing.assert_array_equal(batch["labels"], [1, 0])
    assert all(array.dtype == np.int64 for array in batch.values())


def test_broken_csv_quoting_and_bad_encoding_name_the_file(tmp_path):
    unterminated = tmp_path / "open_quote.csv"
    unterminated.write_text('text,label\n"never closed,1\n', encoding="utf-8")
    with pytest.raises(ValueError, match=rf"^{unterminated}:\d+: unexpected end of data$"):
        read_table_examples(unterminated, "text", ["0", "1"], label_column="label")
    latin1 = tmp_path / "latin1.tsv"
    latin1.write_bytes("sentence\tlabel\ncaf\xe9\t1\n".encode("latin-1"))
    with pytest.raises(ValueError, match=rf"^{latin1}: not UTF-8 text \(invalid continuation byte\)$"):
        read_glue_examples("sst-2", latin1)
