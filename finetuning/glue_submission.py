"""GLUE's leaderboard files: the one file per task that GLUE's server (gluebenchmark.com) takes, and the zip of all.

A task's file holds its predictions for the task's test file: the header line `index<TAB>prediction`, then one
`index<TAB>prediction` row per test example, in the test file's order, under GLUE's file name (SUBMISSION_FILES:
CoLA.tsv, ..., MNLI-m.tsv and MNLI-mm.tsv for MNLI's matched and mismatched sets, AX.tsv for the diagnostic set).
A prediction is written as GLUE writes its labels: entailment / neutral / contradiction (MNLI, AX), entailment /
not_entailment (QNLI, RTE), 0 / 1 (CoLA, SST-2, MRPC, QQP, WNLI), and STS-B's score clipped to [0, 5], the range
of the scores it is compared with, to three decimals.

gather_submission checks every file of a folder (all there; the header; two fields a row; the indices 0, 1, 2, ...
in order, as GLUE's test files number their rows; a prediction of the task's) and zips them, the zip written
atomically and never over an existing file.
"""

from __future__ import annotations

import math
import os
import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from finetuning.glue_data import GLUE_TASKS, STSB_SCORE_RANGE, GlueTask
from utils.atomic_io import fsync_dir, temp_beside, write_synced

SUBMISSION_HEADER = ("index", "prediction")
HEADER_LINE = "\t".join(SUBMISSION_HEADER)
SUBMISSION_FILES = tuple(task.submission_file for task in GLUE_TASKS.values())
_TASK_OF_FILE = {task.submission_file: task for task in GLUE_TASKS.values()}


def submission_text(task: GlueTask, ids: Sequence[str], predicted: Sequence[str] | np.ndarray) -> str:
    """The leaderboard file of `task`: the header, then each test example's index (ids, the test file's index
    column) and its prediction: a label of the task's, or for a regression the score, clipped to STS-B's range."""
    if task.regression:
        values = [f"{value:.3f}" for value in np.clip(np.asarray(predicted, dtype=np.float64), *STSB_SCORE_RANGE)]
    else:
        values = [str(label) for label in predicted]
    rows = [HEADER_LINE, *(f"{index}\t{value}" for index, value in zip(ids, values, strict=True))]
    return "\n".join(rows) + "\n"


def _check_prediction(task: GlueTask, prediction: str) -> bool:
    if not task.regression:
        return prediction in task.labels
    try:
        value = float(prediction)
    except ValueError:
        return False
    low, high = STSB_SCORE_RANGE
    return math.isfinite(value) and low <= value <= high


def check_submission_file(path: str | Path, content: bytes, task: GlueTask) -> int:
    """The number of predictions in the leaderboard file `content` of `task` (read from path); ValueError in one
    line naming the file and line where it is not what GLUE's server takes."""
    try:
        lines = content.decode("utf-8").split("\n")
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not UTF-8 text ({error.reason})") from None
    if lines[-1] == "":
        lines.pop()
    if not lines or tuple(lines[0].split("\t")) != SUBMISSION_HEADER:
        first = lines[0] if lines else ""
        raise ValueError(f"{path}:1: the header is {first!r}, not {HEADER_LINE!r}")
    if len(lines) == 1:
        raise ValueError(f"{path}: no predictions under the header")
    expected = "a score in [{:g}, {:g}]".format(*STSB_SCORE_RANGE) if task.regression else f"one of {list(task.labels)}"
    for row, line in enumerate(lines[1:]):
        fields = line.split("\t")
        if len(fields) != len(SUBMISSION_HEADER):
            raise ValueError(f"{path}:{row + 2}: expected {len(SUBMISSION_HEADER)} tab-separated fields, found "
                             f"{len(fields)}")
        index, prediction = fields
        if index != str(row):
            raise ValueError(f"{path}:{row + 2}: index {index!r} where {row} belongs (the rows of GLUE's test files, "
                             "numbered 0, 1, 2, ..., in their order)")
        if not _check_prediction(task, prediction):
            raise ValueError(f"{path}:{row + 2}: prediction {prediction!r} is not {expected}")
    return len(lines) - 1


def gather_submission(folder: str | Path, zip_path: str | Path) -> list[str]:
    """Zip the leaderboard files of `folder`, every one of SUBMISSION_FILES, each checked by check_submission_file,
    into zip_path (the files at its root), which must not exist yet; returns the file names. ValueError in one
    line, and no zip, when the folder lacks a file or one is malformed."""
    folder, zip_path = Path(folder), Path(zip_path)
    if not folder.is_dir():
        raise ValueError(f"{folder}: not a folder")
    missing = [name for name in SUBMISSION_FILES if not (folder / name).is_file()]
    if missing:
        raise ValueError(f"{folder}: no {', '.join(missing)} (GLUE's server takes all {len(SUBMISSION_FILES)} "
                         f"files: {', '.join(SUBMISSION_FILES)})")
    contents = {name: (folder / name).read_bytes() for name in SUBMISSION_FILES}
    for name, content in contents.items():
        check_submission_file(folder / name, content, _TASK_OF_FILE[name])

    def write(path: str) -> None:
        with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            for name, content in contents.items():
                archive.writestr(name, content)

    zip_path.parent.mkdir(parents=True, exist_ok=True)
    temp = temp_beside(zip_path)
    try:
        write_synced(temp, write)
        # A hard link puts the finished zip in place in one step, and fails where a file exists, whoever made it.
        os.link(temp, zip_path)
    except FileExistsError:
        raise ValueError(f"{zip_path}: exists already, and a submission is never written over; give another "
                         "name") from None
    finally:
        temp.unlink(missing_ok=True)
    fsync_dir(zip_path.parent)
    return list(contents)
