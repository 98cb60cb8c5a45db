"""Sentence(-pair) classification and regression data: GLUE TSV or CSV/TSV files -> examples -> features -> batches.

GLUE layouts (Wang et al. 2019, "GLUE: A Multi-Task Benchmark and Analysis Platform for NLU", ICLR; the files that
download_glue_data.py writes). A file's layout is found by its first line; columns are named by the header:

    task     train.tsv, dev.tsv: text a, text b -> label            id            test.tsv: header (text a, b)
    CoLA     no header, 4 columns: column 3 -> column 1 (0/1)      row number    index sentence
    SST-2    sentence -> label (0/1)                               row number    index sentence
    MRPC     #1 String, #2 String -> Quality (0/1)                 #1 ID-#2 ID   index #1 ID #2 ID #1 String #2 String
    STS-B    index genre filename year old_index source1 source2   index         the same without score
             sentence1 sentence2 score: sentence1, sentence2 -> score (a float in [0, 5])
    QQP      id qid1 qid2 question1 question2 is_duplicate:        id            id question1 question2
             question1, question2 -> is_duplicate (0/1)
    MNLI     index promptID pairID genre sentence1_binary_parse    index         the first 10 columns
             sentence2_binary_parse sentence1_parse sentence2_parse sentence1 sentence2, then label1 gold_label
             (train.tsv) or label1 ... label5 gold_label (dev_matched.tsv, dev_mismatched.tsv): sentence1, sentence2
             -> gold_label (contradiction / entailment / neutral)
    QNLI     index question sentence label: question, sentence     index         index question sentence
             -> label (entailment / not_entailment)
    RTE      index sentence1 sentence2 label -> label              index         index sentence1 sentence2
             (entailment / not_entailment)
    WNLI     index sentence1 sentence2 label -> label (0/1)        index         index sentence1 sentence2
    AX       (the diagnostic set, test pairs only, predicted by an MNLI model)     index sentence1 sentence2

Label order is GLUE's (the index a model predicts); "row number" counts data rows from 0; a test file's examples
have no label and its index as their id. MNLI's matched and mismatched sets are the tasks mnli and mnli-mm: the same
layouts and model, scored apart. Fields are split on tabs with quoting off: GLUE text holds unbalanced `"`
characters, which a quoting reader joins across lines (MRPC train would read as 3570 rows instead of 3668). Files
are read as UTF-8 with an optional byte-order mark, which the standard MRPC files have.

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
import itertools
import math
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
class GlueLayout:
    """One file layout of a GLUE task, found by its first line: where its fields are (column indices)."""

    header: tuple[str, ...] | None  # the expected first line; None when the file has no header
    num_fields: int
    text_a: int
    text_b: int | None
    label: int | None  # None: a test file, which has no labels
    id_columns: tuple[int, ...]  # joined with "-" into the example id; () = the data row number


def _layout(header: tuple[str, ...], text_a: str, text_b: str | None = None, label: str | None = None,
            ids: tuple[str, ...] = ("index",)) -> GlueLayout:
    """The layout of a file whose first line is `header`, its fields named by their header column."""
    return GlueLayout(header, len(header), header.index(text_a), header.index(text_b) if text_b else None,
                      header.index(label) if label else None, tuple(header.index(name) for name in ids))


@dataclasses.dataclass(frozen=True)
class GlueTask:
    """A GLUE task: its file layouts (the labelled ones first), its labels in GLUE's order (none for STS-B, whose
    label is a score), its metrics, the file GLUE's server takes its test predictions in, and the suffix of its
    metric names (MNLI's mismatched set is scored apart from the matched one)."""

    name: str
    labels: tuple[str, ...]
    layouts: tuple[GlueLayout, ...]
    metrics: tuple[str, ...]
    submission_file: str
    metric_suffix: str = ""

    @property
    def regression(self) -> bool:
        """Whether the label is a score to predict (STS-B) rather than a class."""
        return not self.labels

    @property
    def header(self) -> tuple[str, ...] | None:
        """The first line of the task's train.tsv; None when it has none (CoLA)."""
        return self.layouts[0].header


_INDEX_PAIR = ("index", "sentence1", "sentence2")
_MNLI_FRONT = ("index", "promptID", "pairID", "genre", "sentence1_binary_parse", "sentence2_binary_parse",
               "sentence1_parse", "sentence2_parse", "sentence1", "sentence2")
_MNLI_LAYOUTS = (
    _layout((*_MNLI_FRONT, "label1", "gold_label"), "sentence1", "sentence2", "gold_label"),  # train.tsv
    _layout((*_MNLI_FRONT, "label1", "label2", "label3", "label4", "label5", "gold_label"), "sentence1", "sentence2",
            "gold_label"),  # dev_matched.tsv, dev_mismatched.tsv
    _layout(_MNLI_FRONT, "sentence1", "sentence2"),  # test_matched.tsv, test_mismatched.tsv
)
_MNLI_LABELS = ("contradiction", "entailment", "neutral")
_STSB_FRONT = ("index", "genre", "filename", "year", "old_index", "source1", "source2", "sentence1", "sentence2")
# STS-B's scores: the mean of annotators' ratings from 0 (unrelated) to 5 (equivalent meaning).
STSB_SCORE_RANGE = (0.0, 5.0)
_BINARY = ("accuracy", "auc")

GLUE_TASKS = {
    task.name: task
    for task in (
        GlueTask("cola", ("0", "1"), (GlueLayout(None, 4, text_a=3, text_b=None, label=1, id_columns=()),
                                      _layout(("index", "sentence"), "sentence")),
                 ("accuracy", "mcc", "auc"), "CoLA.tsv"),
        GlueTask("sst-2", ("0", "1"), (_layout(("sentence", "label"), "sentence", label="label", ids=()),
                                       _layout(("index", "sentence"), "sentence")),
                 _BINARY, "SST-2.tsv"),
        GlueTask("mrpc", ("0", "1"), (
            _layout(("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"), "#1 String", "#2 String", "Quality",
                    ids=("#1 ID", "#2 ID")),
            _layout(("index", "#1 ID", "#2 ID", "#1 String", "#2 String"), "#1 String", "#2 String")),
                 ("accuracy", "f1", "auc"), "MRPC.tsv"),
        GlueTask("sts-b", (), (_layout((*_STSB_FRONT, "score"), "sentence1", "sentence2", "score"),
                               _layout(_STSB_FRONT, "sentence1", "sentence2")),
                 ("pearson", "spearman", "pearson_spearman_mean"), "STS-B.tsv"),
        GlueTask("qqp", ("0", "1"), (
            _layout(("id", "qid1", "qid2", "question1", "question2", "is_duplicate"), "question1", "question2",
                    "is_duplicate", ids=("id",)),
            _layout(("id", "question1", "question2"), "question1", "question2", ids=("id",))),
                 ("accuracy", "f1", "auc"), "QQP.tsv"),
        GlueTask("mnli", _MNLI_LABELS, _MNLI_LAYOUTS, ("accuracy",), "MNLI-m.tsv"),
        GlueTask("mnli-mm", _MNLI_LABELS, _MNLI_LAYOUTS, ("accuracy",), "MNLI-mm.tsv", metric_suffix="_mm"),
        GlueTask("qnli", ("entailment", "not_entailment"), (
            _layout(("index", "question", "sentence", "label"), "question", "sentence", "label"),
            _layout(("index", "question", "sentence"), "question", "sentence")),
                 _BINARY, "QNLI.tsv"),
        GlueTask("rte", ("entailment", "not_entailment"), (_layout((*_INDEX_PAIR, "label"), "sentence1", "sentence2",
                                                                   "label"),
                                                           _layout(_INDEX_PAIR, "sentence1", "sentence2")),
                 _BINARY, "RTE.tsv"),
        GlueTask("wnli", ("0", "1"), (_layout((*_INDEX_PAIR, "label"), "sentence1", "sentence2", "label"),
                                      _layout(_INDEX_PAIR, "sentence1", "sentence2")),
                 _BINARY, "WNLI.tsv"),
        # The diagnostic set: test pairs only, predicted by a model fine-tuned on MNLI, with MNLI's labels.
        GlueTask("ax", _MNLI_LABELS, (_layout(_INDEX_PAIR, "sentence1", "sentence2"),), (), "AX.tsv"),
    )
}
# Other names of the tasks: Hugging Face's (its datasets' GLUE configurations) where they differ from NVIDIA's.
GLUE_TASK_ALIASES = {"sst2": "sst-2", "stsb": "sts-b", "mnli_matched": "mnli", "mnli_mismatched": "mnli-mm"}


def glue_task_name(name: str) -> str:
    """The GLUE_TASKS key of a task name as typed, in any case: NVIDIA's (sst-2, sts-b) or Hugging Face's (sst2,
    stsb, mnli_mismatched); any other name comes back lowercased."""
    name = name.lower()
    return GLUE_TASK_ALIASES.get(name, name)


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


def _check_score(path: str | Path, line: int, score: str) -> str:
    low, high = STSB_SCORE_RANGE
    try:
        value = float(score)
    except ValueError:
        value = math.nan
    if not low <= value <= high:  # also refuses nan
        raise ValueError(f"{path}:{line}: score {score!r} is not a number in [{low:g}, {high:g}]")
    return score


def _find_layout(task: GlueTask, path: str | Path, line: int, first: list[str],
                 require_labels: bool) -> GlueLayout:
    """The layout of the file whose first record is `first`: the one whose header it is, else the layout without a
    header (CoLA's train and dev files); ValueError naming the file when there is none, or when it is a test file
    and labels are required."""
    labelled = [layout for layout in task.layouts if layout.label is not None]
    if require_labels and not labelled:
        raise ValueError(f"{path}: {task.name} files have no labels, so they can only be predicted")
    found = next((layout for layout in task.layouts if layout.header == tuple(first)), None)
    found = found or next((layout for layout in task.layouts if layout.header is None), None)
    if found is not None and (found.label is not None or not require_labels):
        return found
    expected = " or ".join(str(list(layout.header)) for layout in labelled if layout.header is not None)
    if found is not None:  # a test file where labels are required
        labelled_headers = f"is not the {task.name} header {expected} of a labelled file: it " if expected else ""
        raise ValueError(f"{path}:{line}: header {first} {labelled_headers}is the header of {task.name}'s test file, "
                         "which has no labels")
    test_header = next(list(layout.header) for layout in task.layouts if layout.label is None)
    others = f" nor that of its test file {test_header}" if expected else ""
    raise ValueError(f"{path}:{line}: header {first} is not the {task.name} header {expected or test_header}{others}")


def read_glue_examples(task_name: str, path: str | Path, require_labels: bool = True) -> list[ClassificationExample]:
    """The examples of a GLUE file in any of its task's layouts, found by the first line: train.tsv, dev.tsv (for
    MNLI dev_matched.tsv and dev_mismatched.tsv), or, unless require_labels, a test file, whose examples have no
    label and the file's index as their id. ValueError naming the file and line for a malformed row."""
    task = GLUE_TASKS[task_name]
    records = _records(path)
    line, first = next(records, (1, []))
    layout = _find_layout(task, path, line, first, require_labels)
    if layout.header is None:
        records = itertools.chain([(line, first)], records)
    examples, empty_lines = [], []
    for row, (line, fields) in enumerate(records):
        _check_width(path, line, fields, layout.num_fields)
        guid = "-".join(fields[column] for column in layout.id_columns) if layout.id_columns else str(row)
        text_b = fields[layout.text_b] if layout.text_b is not None else None
        label = None
        if layout.label is not None:
            label = fields[layout.label]
            label = _check_score(path, line, label) if task.regression else _check_label(path, line, label,
                                                                                          task.labels)
        if not fields[layout.text_a].strip() or (text_b is not None and not text_b.strip()):
            empty_lines.append(line)
        examples.append(ClassificationExample(guid, fields[layout.text_a], text_b, label))
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
    label_id: int  # index into the label list; NO_LABEL for an unlabeled example or a score
    score: float | None = None  # the regression target (STS-B); None for a class or an unlabeled example


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
    """Tokenize every example into `[CLS] a [SEP] (b [SEP])` of at most max_seq_length tokens. Without labels (a
    regression task, STS-B) an example's label is its score."""
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
        label_id = label_ids[example.label] if example.label is not None and labels else NO_LABEL
        score = float(example.label) if example.label is not None and not labels else None
        features.append(ClassificationFeature(input_ids, token_type_ids, label_id, score))
    return features


def collate_classification(features: Sequence[ClassificationFeature], pad_token_id: int, multiple: int = 1,
                           max_length: int | None = None, regression: bool = False) -> dict[str, np.ndarray]:
    """A batch padded by feature_batching.pad_token_rows (input_ids, token_type_ids, attention_mask [B, S]) with the
    labels [B]: the int64 class indices, or with `regression` the float32 scores (nan where there is none)."""
    batch = pad_token_rows(features, pad_token_id, multiple, max_length)
    if regression:
        batch["labels"] = np.array([math.nan if feature.score is None else feature.score for feature in features],
                                   dtype=np.float32)
    else:
        batch["labels"] = np.array([feature.label_id for feature in features], dtype=np.int64)
    return batch
