"""The fault suite of the time-to-quality yardstick (benchmarks/time_to_quality.py, issue 66): where its reports go
by default, damaged stage files, --report-only before anything has finished, conflicting modes, unknown presets and
folders that are files.

Nothing here trains: each case fabricates the stage files of a finished miniature (--quick) in a work folder, with
the settings the yardstick computes for them, and runs main() in this process under --report-only (or stops before
any stage would run). The module's ROOT is pointed at a stand-in clone whose docs/ holds a published report, so that
a run that writes where it must not changes that copy and never the project's own docs/.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT
from test_faults import assert_kept, one_line_error, run_entry, snapshot

sys.path.insert(0, str(ROOT / "benchmarks"))
import time_to_quality  # noqa: E402

SCRIPT = "time_to_quality.py"
PUBLISHED = ("time-to-quality.json", "time-to-quality.md", "time-to-quality.png")
# Every score the reports read, by task, written out here rather than taken from the module under test.
SCORES = {"sst-2": ("accuracy",), "mrpc": ("accuracy", "f1"), "rte": ("accuracy",), "cola": ("mcc",),
          "squad": ("exact_match", "F1")}


def downstream_result(median: float) -> dict:
    """What downstream.py's downstream.json holds of a run, as far as the reports read it: every score's seeds,
    median, spread and majority, and each task's plan and hyperparameters."""
    return {"tasks": {task: {"scores": {name: {"seeds": {"1": median}, "median": median, "spread": 0.0,
                                               "majority": 50.0} for name in names},
                             "plan": {"seeds": [1], "epochs": 1, "train_subset": 64, "dev_subset": 64},
                             "hyperparameters": {"learning_rate": 1e-4}}
                      for task, names in SCORES.items()}}


def stage_files(work: Path, *argv: str) -> dict[str, Path]:
    """The stage files of a miniature whose data, random init, ours-quick (pretrained and scored) and context-free
    floor are done and whose optimizer run (lans-quick) is not, under the settings the yardstick computes; the
    files by stage name."""
    yardstick = time_to_quality.Yardstick(time_to_quality.parse_args(["--quick", "--work-dir", str(work), *argv]))
    began = time.perf_counter()
    runs = {run.name: run for run in time_to_quality.QUICK_RUNS}
    random, ours = runs["random"], runs["ours-quick"]
    checkpoint = str(work / "runs" / "ours-quick" / "custom" / "phase1" / "40")
    pretrained = {
        "random": {"checkpoint": None, "validation": [], "steps": 0, "sequences": 0, "minutes": 0.0},
        "ours-quick": {"engine": "ours (PaddleBERT run_pretraining.py)", "checkpoint": checkpoint,
                       "report": str(work / "runs" / "ours-quick" / "dllogger_p1.json"),
                       "validation": [{"step": 40, "minutes": 0.3, "mlm_loss": 7.0, "mlm_accuracy": 0.06}],
                       "steps": 40, "sequences": 320, "minutes": 0.3}}
    yardstick.stages.save("data", {"preset": yardstick.preset,
                                   "corpus": yardstick.portable(yardstick.preset_args["wikipedia_source"])},
                          {"pipeline": "the data folder was there already: nothing was built"}, began)
    for run in (random, ours):
        saved = yardstick.stages.save(f"pretrain/{run.name}", yardstick.settings(run), pretrained[run.name], began)
        yardstick.stages.save(f"downstream/{run.name}", yardstick.downstream_settings(run, saved),
                              {"downstream": downstream_result(60.0 if run is ours else 55.0)}, began)
    yardstick.stages.save("context-free", {"run": "ours-quick",
                                           "train_batches": time_to_quality.QUICK_CONTEXT_FREE_TRAIN_BATCHES},
                          {"accuracy": {"unigram": 0.05, "copy": 0.14, "left bigram and copy": 0.2,
                                        "masked tokens": 120}}, began)
    return {path.stem.replace("--", "/"): path for path in sorted((work / "stages").iterdir())}


@pytest.fixture
def clone(tmp_path: Path, monkeypatch) -> Path:
    """A stand-in for the project's folder as the module sees it (ROOT), whose docs/ holds a published report."""
    root = tmp_path / "clone"
    (root / "docs").mkdir(parents=True)
    for name in PUBLISHED:
        (root / "docs" / name).write_text(f"the published {name}\n", encoding="utf-8")
    monkeypatch.setattr(time_to_quality, "ROOT", root)
    return root


def report_only(work: Path, *argv: str) -> list[str]:
    return ["--quick", "--report-only", "--work-dir", str(work), *argv]


# ---------------------------------------------------------------------------------------------------------------
# Where the reports go (item 2)


def test_a_run_without_report_dir_writes_its_report_in_the_work_folder_and_not_into_the_docs(clone, tmp_path,
                                                                                                capsys):
    work = tmp_path / "work"
    stage_files(work)
    published = snapshot(clone / "docs")
    status, output = run_entry(report_only(work), capsys, time_to_quality.main, SCRIPT)
    assert status == 0, output
    assert_kept(published)
    assert sorted(path.name for path in (clone / "docs").iterdir()) == sorted(PUBLISHED)
    report = json.loads((work / "report" / "time-to-quality.json").read_text(encoding="utf-8"))
    assert list(report["runs"]) == ["random", "ours-quick"] and report["missing"] == ["lans-quick"]
    assert f"Report: {work / 'report' / 'time-to-quality.md'}" in output
    assert (work / "report" / "time-to-quality.png").read_bytes()[:4] == b"\x89PNG"


def test_the_docs_get_the_report_only_when_report_dir_names_them(clone, tmp_path, capsys):
    work = tmp_path / "work"
    stage_files(work)
    status, output = run_entry(report_only(work, "--report-dir", str(clone / "docs")), capsys,
                               time_to_quality.main, SCRIPT)
    assert status == 0, output
    report = json.loads((clone / "docs" / "time-to-quality.json").read_text(encoding="utf-8"))
    assert report["missing"] == ["lans-quick"]
    assert not (work / "report").exists()


# ---------------------------------------------------------------------------------------------------------------
# Stage files that cannot be read back (items 3 and 5)


DAMAGE = {"torn": "{\"settings\": {\"pre", "a list": "[1, 2]", "no settings": "{}"}


@pytest.mark.parametrize("damage", DAMAGE)
@pytest.mark.parametrize("stage", ["data", "pretrain/random", "downstream/random", "pretrain/ours-quick",
                                   "downstream/ours-quick", "context-free"])
def test_a_damaged_stage_file_is_named_in_one_line_and_nothing_is_written(clone, tmp_path, capsys, stage, damage):
    work = tmp_path / "work"
    files = stage_files(work)
    files[stage].write_text(DAMAGE[damage], encoding="utf-8")
    before = snapshot(work, clone)
    status, output = run_entry(report_only(work), capsys, time_to_quality.main, SCRIPT)
    assert status == 1
    one_line_error(output, f"{SCRIPT}: {files[stage]}: ", "stage file")
    assert_kept(before)
    assert snapshot(work, clone) == before  # and nothing new: no report anywhere


def without(record: dict, *keys: str) -> dict:
    """record with the value at the path keys removed (the path's last key)."""
    copy = json.loads(json.dumps(record))
    parent = copy
    for key in keys[:-1]:
        parent = parent[key]
    del parent[keys[-1]]
    return copy


@pytest.mark.parametrize(("stage", "keys", "named"), [
    ("downstream/ours-quick", ("downstream", "tasks", "sst-2", "scores", "accuracy"),
     ["downstream.tasks.sst-2.scores", "'accuracy'"]),
    ("downstream/random", ("downstream", "tasks", "squad", "scores", "exact_match", "median"),
     ["downstream.tasks.squad.scores.exact_match", "'median'"]),
    ("downstream/random", ("downstream", "tasks", "cola"), ["downstream.tasks", "'cola'"]),
    ("pretrain/ours-quick", ("validation",), ["'validation'"]),
    ("pretrain/ours-quick", ("report",), ["'report'"]),
    ("pretrain/random", ("checkpoint",), ["'checkpoint'"]),
    ("context-free", ("accuracy", "copy"), ["accuracy", "'copy'"]),
    ("data", ("pipeline",), ["'pipeline'"]),
])
def test_a_stage_file_without_what_the_report_reads_is_named_in_one_line(clone, tmp_path, capsys, stage, keys,
                                                                        named):
    work = tmp_path / "work"
    files = stage_files(work)
    record = json.loads(files[stage].read_text(encoding="utf-8"))
    files[stage].write_text(json.dumps(without(record, *keys)), encoding="utf-8")
    before = snapshot(work, clone)
    status, output = run_entry(report_only(work), capsys, time_to_quality.main, SCRIPT)
    assert status == 1
    one_line_error(output, f"{SCRIPT}: {files[stage]}: ", *named)
    assert snapshot(work, clone) == before


def test_a_score_of_the_wrong_kind_is_named(clone, tmp_path, capsys):
    work = tmp_path / "work"
    files = stage_files(work)
    record = json.loads(files["downstream/ours-quick"].read_text(encoding="utf-8"))
    record["downstream"]["tasks"]["rte"]["scores"]["accuracy"]["median"] = "61.0"
    files["downstream/ours-quick"].write_text(json.dumps(record), encoding="utf-8")
    status, output = run_entry(report_only(work), capsys, time_to_quality.main, SCRIPT)
    assert status == 1
    one_line_error(output, f"{SCRIPT}: {files['downstream/ours-quick']}: ",
                   "downstream.tasks.rte.scores.accuracy.median", "a string")


# ---------------------------------------------------------------------------------------------------------------
# --report-only before any trial has finished, and modes given together (item 3)


def data_stage_alone(work: Path) -> None:
    """The stage files of a miniature whose data stage alone is done: no run or trial has finished."""
    for stage, path in stage_files(work).items():
        if stage != "data":
            path.unlink()


@pytest.mark.parametrize("mode", [["--search"], ["--compare-sizes"], ["--recipe-trials", "cpu_budget_tiny_alibi"]])
def test_report_only_before_any_trial_has_finished_says_so_in_one_line(clone, tmp_path, capsys, mode):
    work = tmp_path / "work"
    data_stage_alone(work)
    before = snapshot(work, clone)
    status, output = run_entry(report_only(work, *mode), capsys, time_to_quality.main, SCRIPT)
    assert status == 1
    one_line_error(output, f"{SCRIPT}: ", mode[0], "nothing has finished yet")
    assert snapshot(work, clone) == before
    assert not (work / "report").exists()


@pytest.mark.parametrize("modes", [("--search", "--compare-sizes"), ("--compare-sizes", "--recipe-trials"),
                                   ("--recipe-trials", "--search")])
def test_two_modes_together_are_refused_in_one_line_naming_both(clone, tmp_path, capsys, modes):
    """Refused by argparse (status 2, its usage, then one error line). Under --report-only with nothing finished, so
    that a yardstick that took one mode and ignored the other trains nothing."""
    work = tmp_path / "work"
    data_stage_alone(work)
    before = snapshot(work, clone)
    argv = report_only(work)
    for mode in modes:
        argv += [mode, "cpu_budget_tiny_alibi"] if mode == "--recipe-trials" else [mode]
    status, output = run_entry(argv, capsys, time_to_quality.main, SCRIPT)
    assert status == 2
    one_line_error(output, f"{SCRIPT}: error: ", *modes)
    assert snapshot(work, clone) == before


# ---------------------------------------------------------------------------------------------------------------
# An unknown preset (item 5)


@pytest.mark.parametrize("mode", ["--report-only", "--data-only"])
def test_an_unknown_recipe_trial_is_refused_up_front_naming_it_and_the_known_presets(clone, tmp_path, capsys, mode):
    work = tmp_path / "work"
    stage_files(work)
    before = snapshot(work, clone)
    # The unknown name first: a yardstick without the check stops on it before building or training anything.
    argv = ["--quick", mode, "--work-dir", str(work), "--recipe-trials", "cpu_budget_tiny_alibbi",
            "cpu_budget_tiny_alibi"]
    status, output = run_entry(argv, capsys, time_to_quality.main, SCRIPT)
    assert status == 1
    line = one_line_error(output, f"{SCRIPT}: --recipe-trials cpu_budget_tiny_alibbi: ", "no such preset",
                          "cpu_budget_tiny_alibi,", "cpu_budget_tiny_alibi_nobias", "cpu_budget_small")
    assert "command not found" not in output and "--preset" not in line
    assert snapshot(work, clone) == before


def test_an_unknown_preset_is_refused_up_front_naming_it(tmp_path, capsys):
    status, output = run_entry(report_only(tmp_path / "work", "--preset", "cpu_budget_tiniest"), capsys,
                               time_to_quality.main, SCRIPT)
    assert status == 1
    one_line_error(output, f"{SCRIPT}: --preset cpu_budget_tiniest: ", "no such preset", "cpu_budget_tiny")
    assert not (tmp_path / "work").exists()


# ---------------------------------------------------------------------------------------------------------------
# Folders that are files (item 5)


@pytest.mark.parametrize("flag", ["--report-dir", "--work-dir"])
@pytest.mark.parametrize("below", [False, True])
def test_a_folder_flag_that_names_a_file_is_refused_up_front(clone, tmp_path, capsys, flag, below):
    """The flag names a file, or a folder below one: one line naming the flag and the file, before anything is
    written (with --report-dir: not even WORK/time_to_quality.json)."""
    work = tmp_path / "work"
    stage_files(work)
    file = tmp_path / "a-file"
    file.write_text("mine\n", encoding="utf-8")
    folder = file / "report" if below else file
    argv = report_only(work, flag, str(folder)) if flag == "--report-dir" else report_only(folder)
    before = snapshot(work, clone, file)
    status, output = run_entry(argv, capsys, time_to_quality.main, SCRIPT)
    assert status == 1
    one_line_error(output, f"{SCRIPT}: {flag} {folder}: ", f"{file} is a file" if below else "is a file")
    assert "File exists" not in output and "Not a directory" not in output
    assert snapshot(work, clone, file) == before
