"""Small GLUE files for tests, in exactly the layouts GLUE ships (download_glue_data.py's train, dev and test files
of every task, and the diagnostic set): ../shared holds only CoLA, SST-2, MRPC and RTE. Some sentences hold
unbalanced quote characters, as real MNLI and QQP sentences do, which a quoting reader would join across lines.

write_glue_files(folder) writes them and returns, per task and split, the file and the rows it holds as data
(GlueRow), so that a test checks a reader against what was written, not against the reader itself."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

WORDS = ("the cat sat on a mat while dogs ran in green fields near old towns where people sang songs about long "
         "rivers and cold winters").split()
MNLI_FRONT = ("index", "promptID", "pairID", "genre", "sentence1_binary_parse", "sentence2_binary_parse",
              "sentence1_parse", "sentence2_parse", "sentence1", "sentence2")
MNLI_LABELS = ("contradiction", "entailment", "neutral")
STSB_FRONT = ("index", "genre", "filename", "year", "old_index", "source1", "source2", "sentence1", "sentence2")
PAIR_HEADER = ("index", "sentence1", "sentence2")
# GLUE's test sizes are in the thousands; these files are small enough for a tiny model to predict in a moment.
ROWS = 24


@dataclasses.dataclass(frozen=True)
class GlueRow:
    """One data row as written: its id (the index column, or MRPC's "#1 ID-#2 ID"), texts and label (None in a
    test file; STS-B's score as written)."""

    guid: str
    text_a: str
    text_b: str | None
    label: str | None


@dataclasses.dataclass(frozen=True)
class GlueFile:
    """A file written and the data rows it holds, in order."""

    path: Path
    rows: list[GlueRow]


def sentence(rng: random.Random, index: int) -> str:
    """A few words; every third sentence opens with a double quote that is never closed (a quoting reader would
    read on through tabs and newlines to the next quote), every fifth has an apostrophe."""
    words = rng.sample(WORDS, rng.randint(3, 8))
    if index % 3 == 0:
        words.insert(0, '"')
    if index % 5 == 0:
        words[-1] += "'s"
    return " ".join(words) + " ."


def _write(path: Path, header: tuple[str, ...] | None, lines: list[list[str]]) -> None:
    text = "".join("\t".join(fields) + "\n" for fields in ([list(header)] if header else []) + lines)
    path.write_text(text, encoding="utf-8")


def write_glue_files(folder: Path, rows: int = ROWS, seed: int = 0) -> dict[str, dict[str, GlueFile]]:
    """Every GLUE task's files in folder/<TASK>/ as GLUE names them: {task: {split: GlueFile}}, the splits train,
    dev and test (MNLI: train, dev_matched, dev_mismatched, test_matched, test_mismatched; ax: test, GLUE's
    diagnostic.tsv). Labels are drawn at random; STS-B's scores from 0 to 5 with three decimals."""
    rng = random.Random(seed)
    files: dict[str, dict[str, GlueFile]] = {}

    def pairs(count: int) -> list[tuple[str, str]]:
        return [(sentence(rng, index), sentence(rng, index + 1)) for index in range(count)]

    def add(task: str, split: str, name: str, header: tuple[str, ...] | None, lines: list[list[str]],
            data: list[GlueRow]) -> None:
        path = folder / task.upper() / name
        path.parent.mkdir(parents=True, exist_ok=True)
        _write(path, header, lines)
        files.setdefault(task, {})[split] = GlueFile(path, data)

    # MNLI: 12 columns in train, 16 in dev, 10 in test; the matched and mismatched sets differ in their genres.
    for split, extra, genres in (("train", ("label1", "gold_label"), ("fiction", "government", "slate")),
                                 ("dev_matched", ("label1", "label2", "label3", "label4", "label5", "gold_label"),
                                  ("telephone", "travel")),
                                 ("dev_mismatched", ("label1", "label2", "label3", "label4", "label5", "gold_label"),
                                  ("letters", "verbatim")),
                                 ("test_matched", (), ("fiction", "travel")),
                                 ("test_mismatched", (), ("oup", "nineeleven"))):
        lines, data = [], []
        for index, (a, b) in enumerate(pairs(rows)):
            label = rng.choice(MNLI_LABELS)
            parse_a, parse_b = f"( {a} )", f"( {b} )"
            fields = [str(index), str(5000 + index), f"{5000 + index}{label[0]}", genres[index % len(genres)],
                      parse_a, parse_b, f"(ROOT {parse_a})", f"(ROOT {parse_b})", a, b]
            if extra:
                fields += [label] * len(extra)
            lines.append(fields)
            data.append(GlueRow(str(index), a, b, label if extra else None))
        add("mnli", split, f"{split}.tsv", MNLI_FRONT + extra, lines, data)

    for split in ("train", "dev", "test"):
        labelled = split != "test"
        # STS-B: 10 columns, the last the score; the test file has 9
        lines, data = [], []
        for index, (a, b) in enumerate(pairs(rows)):
            score = f"{rng.uniform(0, 5):.3f}"
            fields = [str(index), "main-captions", "MSRvid", "2012test", f"{index + 1:04d}", "none", "none", a, b]
            lines.append(fields + [score] * labelled)
            data.append(GlueRow(str(index), a, b, score if labelled else None))
        add("sts-b", split, f"{split}.tsv", STSB_FRONT + ("score",) * labelled, lines, data)
        # QNLI, WNLI, RTE: index, two texts, label; the test files without the label
        for task, header, labels in (("qnli", ("index", "question", "sentence"), ("entailment", "not_entailment")),
                                     ("wnli", PAIR_HEADER, ("0", "1")),
                                     ("rte", PAIR_HEADER, ("entailment", "not_entailment"))):
            lines, data = [], []
            for index, (a, b) in enumerate(pairs(rows)):
                label = rng.choice(labels)
                lines.append([str(index), a, b] + [label] * labelled)
                data.append(GlueRow(str(index), a, b, label if labelled else None))
            add(task, split, f"{split}.tsv", header + ("label",) * labelled, lines, data)

    # The test files of the tasks whose train and dev files ../shared has (QQP's too): other columns than those.
    single = [sentence(rng, index) for index in range(rows)]
    add("cola", "test", "test.tsv", ("index", "sentence"), [[str(i), text] for i, text in enumerate(single)],
        [GlueRow(str(i), text, None, None) for i, text in enumerate(single)])
    add("sst-2", "test", "test.tsv", ("index", "sentence"), [[str(i), text] for i, text in enumerate(single)],
        [GlueRow(str(i), text, None, None) for i, text in enumerate(single)])
    test_pairs = pairs(rows)
    add("mrpc", "test", "test.tsv", ("index", "#1 ID", "#2 ID", "#1 String", "#2 String"),
        [[str(i), str(1000 + i), str(2000 + i), a, b] for i, (a, b) in enumerate(test_pairs)],
        [GlueRow(str(i), a, b, None) for i, (a, b) in enumerate(test_pairs)])
    add("qqp", "test", "test.tsv", ("id", "question1", "question2"),
        [[str(i), a, b] for i, (a, b) in enumerate(test_pairs)],
        [GlueRow(str(i), a, b, None) for i, (a, b) in enumerate(test_pairs)])
    add("ax", "test", "diagnostic.tsv", PAIR_HEADER, [[str(i), a, b] for i, (a, b) in enumerate(test_pairs)],
        [GlueRow(str(i), a, b, None) for i, (a, b) in enumerate(test_pairs)])
    return files
