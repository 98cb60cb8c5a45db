"""Sentence and sentence-pair classification data: GLUE TSV or CSV/TSV files -> examples -> features -> batches.

GLUE layouts (Wang et al. 2019, "GLUE: A Multi-Task Benchmark and Analysis Platform for NLU", ICLR; the
train.tsv/dev.tsv files that download_glue_data.py writes):

    task   header (first line)                                     text a     text b     label           id
    CoLA   none                                                    column 3   -          column 1: 0/1   row number
    SST-2  sentence  label                                         sentence   -          label: 0/1      row number
    MRPC   Quality  #1 ID  #2 ID  #1 String  #2 String             #1 String  #2 String  Quality: 0/1    #1 ID-#2 ID
    RTE    index  sentence1  sentence2  label                      sentence1  sentence2  entailment /    index
                                                                                         not_entailment
    QQP    id  qid1  qid2  question1  question2  is_duplicate      question1  question2  is_duplicate    id

Label order is GLUE's (the index a model predicts); "row number" counts data rows from 0. Fields are split on
tabs with quoting off: GLUE text holds unbalanced `"` characters, which a quoting reader joins across lines
(MRPC train would read as 3570 rows instead of 3668). Files are read as UTF-8 with an optional byte-order mark,
which the standard MRPC files have.

Any other data is a table with a header row whose text, label and id columns are named by the caller: a
`.csv` file is comma-separated with standard CSV quoting (RFC 4180), anything else is tab-separated with
quoting off, as GLUE is.

Features follow Google's BERT run_classifier.py: `[CLS] a [SEP]` or `[CLS] a [SEP] b [SEP]`, segment ids 0
for [CLS], a and its [SEP] and 1 for b and its [SEP]; a pair longer than max_seq_length loses one token at a
time from the end of whichever text is longer (from b when they are equally long).
"""

from __future__ import annotations

import csv
import dataclasses
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from finetuning.feature_batching import pad_token_rows
from tokenizer import BertTokenizer
from utils.progress import progress_bar

NO_LABEL = -1  # label_id of an example read without a label


@dataclasses.dataclass(frozen=True)
class ClassificationExample:
    """One sentence or sentence pair; label is None when the file has no labels."""

    guid: str
    text_a: str
    text_b: str | None
    label: str | None


@dataclasses.dataclass(frozen=True)
class GlueTask:
    """Where a GLUE task's TSV keeps its fields (column indices), its labels in GLUE's order and its metrics."""

    name: str
    labels: tuple[str, ...]
    header: tuple[str, ...] | None  # the expected first line; None when the file has no header
    num_fields: int
    text_a: int
    text_b: int | None
    label: int
    id_columns: tuple[int, ...]  # joined with "-" into the example id; () = the data row number
    metrics: tuple[str, ...]


GLUE_TASKS = {
    task.name: task
    for task in (
        GlueTask("cola", ("0", "1"), None, 4, text_a=3, text_b=None, label=1, id_columns=(),
                 metrics=("accuracy", "mcc", "auc")),
        GlueTask("sst-2", ("0", "1"), ("sentence", "label"), 2, text_a=0, text_b=None, label=1, id_columns=(),
                 metrics=("accuracy", "auc")),
        GlueTask("mrpc", ("0", "1"), ("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"), 5,
                 text_a=3, text_b=4, label=0, id_columns=(1, 2), metrics=("accuracy", "f1", "auc")),
        GlueTask("rte", ("entailment", "not_entailment"), ("index", "sentence1", "sentence2", "label"), 4,
                 text_a=1, text_b=2, label=3, id_columns=(0,), metrics=("accuracy", "auc")),
        GlueTask("qqp", ("0", "1"), ("id", "qid1", "qid2", "question1", "question2", "is_duplicate"), 6,
                 text_a=3, text_b=4, label=5, id_columns=(0,), metrics=("accuracy", "f1", "auc")),
    )
}


def _records(path: str | Path) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) of every record: comma-separated with CSV quoting for .csv, else tabs, no quoting."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: file not found")
    if path.suffix.lower() == ".csv":
        dialect = {"delimiter": ",", "quoting": csv.QUOTE_MINIMAL}
    else:
        dialect = {"delimiter": "\t", "quoting": csv.QUOTE_NONE}
    with open(path, encoding="utf-8-sig", newline="") as handle:
        reader = csv.reader(handle, strict=True, **dialect)
        try:
            for fields in reader:
                yield reader.line_num, fields
        except csv.Error as error:
            raise ValueError(f"{path}:{reader.line_num}: {error}") from None
        except UnicodeDecodeError as error:
            raise ValueError(f"{path}: not UTF-8 text ({error.reason})") from None


def _check_width(path: str | Path, line: int, fields: list[str], expected: int) -> None:
    if len(fields) != expected:
        separator = "comma" if Path(path).suffix.lower() == ".csv" else "tab"
        raise ValueError(f"{path}:{line}: expected {expected} {separator}-separated fields, found {len(fields)}")


def _check_label(path: str | Path, line: int, label: str, labels: Sequence[str]) -> str:
    if label not in labels:
        raise ValueError(f"{path}:{line}: label {label!r} is not one of {list(labels)}")
    return label


def read_glue_examples(task_name: str, path: str | Path) -> list[ClassificationExample]:
    """The examples of a GLUE train.tsv or dev.tsv; ValueError naming the file and line for a malformed row."""
    task = GLUE_TASKS[task_name]
    records = _records(path)
    if task.header is not None:
        line, header = next(records, (1, []))
        if tuple(header) != task.header:
            raise ValueError(f"{path}:{line}: header {header} is not the {task.name} header {list(task.header)} "
                             "(test files have other columns; read them with named columns)")
    examples, empty_lines = [], []
    for row, (line, fields) in enumerate(records):
        _check_width(path, line, fields, task.num_fields)
        guid = "-".join(fields[column] for column in task.id_columns) if task.id_columns else str(row)
        text_b = fields[task.text_b] if task.text_b is not None else None
        label = _check_label(path, line, fields[task.label], task.labels)
        if not fields[task.text_a].strip() or (text_b is not None and not text_b.strip()):
            empty_lines.append(line)
        examples.append(ClassificationExample(guid, fields[task.text_a], text_b, label))
    if empty_lines:
        # Odd but not wrong: the row still has its label, and the model sees [CLS] [SEP] where the sentence was.
        print(f"{path}:{empty_lines[0]}: warning: an empty sentence ({len(empty_lines)} row(s) of the file have one; "
              "they are kept)", file=sys.stderr)
    return examples


def read_table_examples(
    path: str | Path,
    text_a_column: str,
    labels: Sequence[str],
    text_b_column: str | None = None,
    label_column: str | None = None,
    id_column: str | None = None,
    require_labels: bool = True,
) -> list[ClassificationExample]:
    """The examples of a CSV/TSV file with a header row, taking the named columns.

    Without id_column an example's id is its data row number (from 0). A file whose header lacks label_column
    has unlabeled examples, which is an error when require_labels is set.
    """
    records = _records(path)
    line, header = next(records, (1, []))

    def column(name: str) -> int:
        if name not in header:
            raise ValueError(f"{path}:{line}: no column {name!r} in the header {header}")
        return header.index(name)

    text_a = column(text_a_column)
    text_b = column(text_b_column) if text_b_column is not None else None
    identifier = column(id_column) if id_column is not None else None
    label = None
    if label_column is not None and (require_labels or label_column in header):
        label = column(label_column)
    elif require_labels:
        raise ValueError(f"{path}: reading labels needs a label column")
    examples = []
    for row, (line, fields) in enumerate(records):
        _check_width(path, line, fields, len(header))
        examples.append(ClassificationExample(
            guid=fields[identifier] if identifier is not None else str(row),
            text_a=fields[text_a],
            text_b=fields[text_b] if text_b is not None else None,
            label=_check_label(path, line, fields[label], labels) if label is not None else None,
        ))
    return examples


@dataclasses.dataclass(frozen=True)
class ClassificationFeature:
    """One example as the model sees it (unpadded)."""

    input_ids: list[int]
    token_type_ids: list[int]
    label_id: int  # index into the label list; NO_LABEL for an unlabeled example


def truncated_lengths(length_a: int, length_b: int, max_tokens: int) -> tuple[int, int]:
    """How many tokens of a and b to keep: shorten the longer one (b on a tie) one token at a time."""
    while length_a + length_b > max_tokens:
        if length_a > length_b:
            length_a -= 1
        else:
            length_b -= 1
    return length_a, length_b


def convert_examples_to_features(
    examples: Sequence[ClassificationExample], tokenizer: BertTokenizer, max_seq_length: int, labels: Sequence[str]
) -> list[ClassificationFeature]:
    """Tokenize every example into `[CLS] a [SEP] (b [SEP])` of at most max_seq_length tokens."""
    label_ids = {label: index for index, label in enumerate(labels)}
    ids_a = tokenizer.batch_encode_ids([example.text_a for example in examples])
    pair_rows = [row for row, example in enumerate(examples) if example.text_b is not None]
    ids_b: list[list[int] | None] = [None] * len(examples)
    for row, ids in zip(pair_rows, tokenizer.batch_encode_ids([examples[row].text_b for row in pair_rows]),
                        strict=True):
        ids_b[row] = ids
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    features = []
    rows = zip(examples, ids_a, ids_b, strict=True)
    for example, tokens_a, tokens_b in progress_bar(rows, desc="GLUE features", total=len(examples), unit="example"):
        if tokens_b is None:
            input_ids = [cls, *tokens_a[:max_seq_length - 2], sep]
            token_type_ids = [0] * len(input_ids)
        else:
            keep_a, keep_b = truncated_lengths(len(tokens_a), len(tokens_b), max_seq_length - 3)
            input_ids = [cls, *tokens_a[:keep_a], sep, *tokens_b[:keep_b], sep]
            token_type_ids = [0] * (keep_a + 2) + [1] * (keep_b + 1)
        label_id = label_ids[example.label] if example.label is not None else NO_LABEL
        features.append(ClassificationFeature(input_ids, token_type_ids, label_id))
    return features


def collate_classification(features: Sequence[ClassificationFeature], pad_token_id: int, multiple: int = 1,
                           max_length: int | None = None) -> dict[str, np.ndarray]:
    """A batch padded by feature_batching.pad_token_rows (input_ids, token_type_ids, attention_mask [B, S]) with the
    int64 labels [B]."""
    batch = pad_token_rows(features, pad_token_id, multiple, max_length)
    batch["labels"] = np.array([feature.label_id for feature in features], dtype=np.int64)
    return batch
