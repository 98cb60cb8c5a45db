"""downstream.py's tasks outside its default --tasks (STS-B, QNLI, MNLI), on small files in GLUE's layouts
(glue_files.py): STS-B's baseline is the training set's mean score, QNLI's and MNLI's the dev sets' majority class
(both of MNLI's dev sets), all checked against counts made here from the rows written; --tasks sts-b,qnli,mnli runs
end to end with the subsets it drew in its summary; a named task without its GLUE folder is refused in one line,
before anything is written."""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections import Counter
from pathlib import Path

import pytest

import downstream
from conftest import require_shared
from glue_files import MNLI_LABELS, write_glue_files
from messages import assert_one_line
from test_downstream import one_line_error, write_step_folder

NEW_TASKS = ("sts-b", "qnli", "mnli")


@pytest.fixture(scope="module")
def glue(tmp_path_factory) -> tuple[Path, dict]:
    """(data dir holding glue/<TASK>/, the files written there with their rows)."""
    data_dir = tmp_path_factory.mktemp("data")
    return data_dir, write_glue_files(data_dir / "glue")


def majority_percent(labels: list[str], order: tuple[str, ...]) -> float:
    """Accuracy (percent) of always answering the most common label, counted here."""
    counts = Counter(labels)
    most = max(counts[label] for label in order)
    return 100 * most / len(labels)


def test_stsb_baseline_is_the_training_mean_whose_correlations_are_reported_as_zero(glue):
    _, files = glue
    train, dev = files["sts-b"]["train"], files["sts-b"]["dev"]
    data = downstream.TaskData(str(train.path), str(dev.path), len(train.rows), len(dev.rows))
    baseline = downstream.baseline_of("sts-b", data)
    # a constant prediction has no correlation with the scores: reported as 0, not left undefined
    assert baseline.scores == {"pearson": 0.0, "spearman": 0.0}
    assert baseline.kind == "mean"
    assert baseline.details["train_mean_score"] == pytest.approx(statistics.fmean(float(row.label)
                                                                                  for row in train.rows))


def test_qnli_and_mnli_baselines_are_the_dev_sets_majority_classes(glue):
    _, files = glue
    qnli = files["qnli"]
    data = downstream.TaskData(str(qnli["train"].path), str(qnli["dev"].path), 24, 24)
    expected = majority_percent([row.label for row in qnli["dev"].rows], ("entailment", "not_entailment"))
    assert downstream.baseline_of("qnli", data).scores == pytest.approx({"accuracy": expected})
    mnli = files["mnli"]
    matched = [row.label for row in mnli["dev_matched"].rows]
    mismatched = [row.label for row in mnli["dev_mismatched"].rows]
    # each dev set has its own majority figure; the files are drawn so that they differ
    assert majority_percent(matched, MNLI_LABELS) != majority_percent(mismatched, MNLI_LABELS)
    data = downstream.TaskData(str(mnli["train"].path), str(mnli["dev_matched"].path), 24, 24,
                               str(mnli["dev_mismatched"].path), 24)
    baseline = downstream.baseline_of("mnli", data)
    assert baseline.kind == "majority"
    assert baseline.scores == pytest.approx({"accuracy": majority_percent(matched, MNLI_LABELS),
                                             "accuracy_mm": majority_percent(mismatched, MNLI_LABELS)})


def test_new_tasks_run_end_to_end_and_their_summary_says_their_subsets(glue, tmp_path, monkeypatch):
    data_dir, files = glue
    quick = downstream.PLAN["quick"]
    # QNLI on a subset of its training file, MNLI on subsets of both dev files: the summary must say so
    plan = {**downstream.PLAN, "quick": {**quick, "qnli": dataclasses.replace(quick["qnli"], train_subset=10),
                                         "mnli": dataclasses.replace(quick["mnli"], dev_subset=12)}}
    monkeypatch.setattr(downstream, "PLAN", plan)
    checkpoint = write_step_folder(tmp_path / "phase1" / "10")
    output_dir = tmp_path / "out"
    downstream.main([str(checkpoint), "--quick", "--output-dir", str(output_dir), "--data-dir", str(data_dir),
                     "--vocab-file", str(require_shared("vocab", "bert-uncased-vocab.txt")), "--jobs", "1",
                     "--tasks", "mnli,qnli,sts-b"])
    summary = json.loads((output_dir / "downstream.json").read_text())
    assert list(summary["tasks"]) == list(NEW_TASKS)
    stsb, qnli, mnli = (summary["tasks"][task] for task in NEW_TASKS)
    assert set(stsb["scores"]) == {"pearson", "spearman"} and set(mnli["scores"]) == {"accuracy", "accuracy_mm"}
    assert set(qnli["scores"]) == {"accuracy"}
    for task in NEW_TASKS:
        for score in summary["tasks"][task]["scores"].values():
            assert set(score) == {"seeds", "median", "spread", "mean" if task == "sts-b" else "majority"}
            assert list(score["seeds"]) == ["1"] and score["median"] == score["seeds"]["1"]
            assert (-100 if task == "sts-b" else 0) <= score["median"] <= 100
    assert stsb["baseline"]["train_mean_score"] == pytest.approx(
        statistics.fmean(float(row.label) for row in files["sts-b"]["train"].rows))
    # the subsets drawn: their sizes in the summary, and that many rows in the files the runs read
    assert (qnli["data"]["train_size"], qnli["data"]["dev_size"], qnli["plan"]["train_subset"]) == (10, 24, 10)
    assert len(Path(qnli["data"]["train_file"]).read_text().splitlines()) == 1 + 10
    assert (mnli["data"]["train_size"], mnli["data"]["dev_size"], mnli["data"]["dev_mismatched_size"]) == (24, 12, 12)
    assert mnli["plan"]["dev_subset"] == 12
    mismatched = Path(mnli["data"]["dev_mismatched_file"]).read_text().splitlines()
    original = files["mnli"]["dev_mismatched"].path.read_text().splitlines()
    assert len(mismatched) == 1 + 12 and mismatched[0] == original[0] and set(mismatched[1:]) <= set(original[1:])
    assert mnli["scores"]["accuracy_mm"]["majority"] == pytest.approx(
        majority_percent([line.split("\t")[-1] for line in mismatched[1:]], MNLI_LABELS))
    # the MNLI run scored the mismatched subset it was given
    assert (output_dir / "units" / "mnli-seed1" / "predictions_mm.tsv").is_file()
    header, _, row = (output_dir / "downstream.md").read_text().splitlines()
    assert "STS-B Pearson (mean 0.0)" in header and "STS-B Spearman (mean 0.0)" in header
    assert "MNLI acc (majority" in header and "MNLI acc mm (majority" in header and "QNLI acc (majority" in header
    assert len(row.strip("|").split(" | ")) == 2 + 5


@pytest.mark.parametrize("task, folder", [("sts-b", "STS-B"), ("qnli", "QNLI"), ("mnli", "MNLI")])
def test_a_named_task_without_its_folder_is_refused_in_one_line(glue, tmp_path, capsys, task, folder):
    data_dir, _ = glue
    bare = tmp_path / "data"
    for other in ("STS-B", "QNLI", "MNLI"):  # every folder but the task's
        if other != folder:
            (bare / "glue" / other).mkdir(parents=True)
            for name in (data_dir / "glue" / other).iterdir():
                (bare / "glue" / other / name.name).write_bytes(name.read_bytes())
    output_dir = tmp_path / "out"
    checkpoint = write_step_folder(tmp_path / "phase1" / "10")
    message = one_line_error(capsys, [str(checkpoint), "--quick", "--output-dir", str(output_dir), "--data-dir",
                                      str(bare), "--tasks", "sts-b,qnli,mnli", "--jobs", "1"])
    assert_one_line(message, "downstream.py: ", "--tasks", task, bare / "glue" / folder)
    assert not output_dir.exists()  # refused before anything was written
