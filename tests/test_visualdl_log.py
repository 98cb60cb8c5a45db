"""VisualDL logs (visualdl_log.py), read back with VisualDL's own LogReader: tags and values, the configuration
text, appending on resume without a repeated step, rank 0 only, a run without VisualDL installed, and
--visualdl-log-dir of run_pretraining.py, run_glue.py and run_squad.py."""

from __future__ import annotations

import builtins
import json
import shutil

import pytest
from visualdl import LogReader

import run_glue
import run_squad
from conftest import require_shared
from fine_tuning_runs import common_argv, logged, run_in_process, write_tiny_model
from pretraining_runs import DYNAMIC, pretraining_argv, step_folder, step_numbers, step_records, train
from utils import visualdl_log
from utils.dllog import training_step
from utils.visualdl_log import VisualDLLog, newest_log_file, open_run_log, tag_of


def read_log(logdir) -> dict[str, dict[str, list]]:
    """component -> tag -> [(step, value or text)] of the folder's newest file, as VisualDL reads it."""
    reader = LogReader(file_path=str(newest_log_file(logdir)))
    content = {}
    for component, tags in reader.get_tags().items():
        if component == "meta_data":
            continue
        for tag in tags:
            records = reader.get_data(component, tag)
            content.setdefault(component, {})[tag] = [
                (record.id, record.value if component == "scalar" else record.text.encoded_text_string)
                for record in records]
    return content


def test_tags_of_report_keys():
    assert [tag_of(key) for key in ("loss", "learning_rate", "eval_mlm_accuracy")] == [
        "train/loss", "train/learning_rate", "eval/mlm_accuracy"]


def test_scalars_and_text_read_back_with_visualdls_reader(tmp_path):
    log = VisualDLLog.open(tmp_path, resume=False)
    log.text("config", '{"seed": 42}', 0)
    log.scalars(10, {"loss": 2.5, "learning_rate": 1e-4, "loss_scale": 32768, "eval_mlm_loss": 3.25,
                     "note": "text is not a scalar", "done": True})
    log.scalars(20, {"loss": 2.0, "learning_rate": 5e-5, "loss_scale": 32768})
    log.close()
    content = read_log(tmp_path)
    assert content["scalar"] == {
        "train/loss": [(10, 2.5), (20, 2.0)],
        "train/learning_rate": [(10, pytest.approx(1e-4)), (20, pytest.approx(5e-5))],
        "train/loss_scale": [(10, 32768.0), (20, 32768.0)],
        "eval/mlm_loss": [(10, 3.25)],
    }
    assert content["text"] == {"config": [(0, '{"seed": 42}')]}


def test_resume_appends_without_a_repeated_step(tmp_path):
    first = VisualDLLog.open(tmp_path, resume=False)
    first.text("config", "first run", 0)
    for step in range(1, 6):
        first.scalars(step, {"loss": float(step)})
    first.close()
    # The second run resumes from a checkpoint at step 2: steps 3-5 come again (with other values here).
    second = VisualDLLog.open(tmp_path, resume=True)
    second.text("config", "first run again", 0)  # not written: step 0 has its text
    second.text("config", "resumed at 2", 2)
    for step in range(3, 9):
        second.scalars(step, {"loss": 100.0 + step, "eval_loss": 0.5})
    second.close()
    assert len(list(tmp_path.iterdir())) == 1  # one file, the one VisualDL shows
    content = read_log(tmp_path)
    assert content["scalar"]["train/loss"] == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0), (5, 5.0), (6, 106.0),
                                               (7, 107.0), (8, 108.0)]
    assert [step for step, _ in content["scalar"]["eval/loss"]] == [3, 4, 5, 6, 7, 8]  # a tag of its own
    assert content["text"]["config"] == [(0, "first run"), (2, "resumed at 2")]


def test_a_run_that_does_not_resume_starts_the_newest_file(tmp_path):
    old = VisualDLLog.open(tmp_path, resume=False)
    old.scalars(1, {"loss": 1.0})
    old.close()
    new = VisualDLLog.open(tmp_path, resume=False)  # within the same second: still a file of its own
    new.scalars(1, {"loss": 9.0})
    new.close()
    assert old.path != new.path and newest_log_file(tmp_path) == new.path
    assert read_log(tmp_path)["scalar"]["train/loss"] == [(1, 9.0)]


def test_only_rank_0_writes_and_the_configuration_is_text(tmp_path):
    config = {"learning_rate": 1e-3, "input_dir": tmp_path}
    assert open_run_log(str(tmp_path / "rank1"), rank=1, resume=False, start_step=0, config=config) is None
    assert not (tmp_path / "rank1").exists()
    assert open_run_log(None, rank=0, resume=False, start_step=0, config=config) is None
    log = open_run_log(str(tmp_path / "rank0"), rank=0, resume=False, start_step=7, config=config)
    log.close()
    [(step, text)] = read_log(tmp_path / "rank0")["text"]["config"]
    assert step == 7 and json.loads(text) == {"learning_rate": 1e-3, "input_dir": str(tmp_path)}


def test_without_visualdl_one_line_says_so_and_nothing_is_written(tmp_path, monkeypatch, capsys):
    real_import = builtins.__import__

    def import_without_visualdl(name, *args, **kwargs):
        if name.split(".")[0] == "visualdl":
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", import_without_visualdl)
    assert open_run_log(str(tmp_path / "logs"), rank=0, resume=False, start_step=0, config={}) is None
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "VisualDL is not installed" in err
    assert not (tmp_path / "logs").exists()
    assert visualdl_log.VisualDLLog.open(tmp_path / "logs", resume=True) is None


# ---------------------------------------------------------------------------------------------- the training scripts


def test_pretraining_logs_the_report_and_appends_on_resume(tmp_path):
    logdir = tmp_path / "visualdl"
    argv = pretraining_argv(tmp_path, "--max-steps", "6", "--num-steps-per-checkpoint", "2",
                            "--last-step-of-checkpoint", "auto", "--visualdl-log-dir", str(logdir))
    assert train(argv + ["--steps-this-run", "3"]) == 0
    # Resume from step 2, an older checkpoint than the last logged step: steps 3.. run again.
    shutil.rmtree(step_folder(tmp_path / "out", 3))
    assert train(argv) == 0
    content = read_log(logdir)
    records = step_records(tmp_path / "report.json")  # every step of both runs, 3 twice
    assert step_numbers(records) == [1, 2, 3, 3, 4, 5, 6]
    for key in ("loss", "mlm_loss", "nsp_loss", "learning_rate", "loss_scale", "sequences_per_second"):
        first_of_each_step = {}
        for record in records:
            first_of_each_step.setdefault(training_step(record["step"]), record["data"][key])
        assert content["scalar"]["train/" + key] == [(step, pytest.approx(value, rel=1e-6))
                                                      for step, value in first_of_each_step.items()], key
    assert [step for step, _ in content["text"]["config"]] == [0, 2]
    [(_, first), (_, resumed)] = content["text"]["config"]
    assert json.loads(first)["max_steps"] == 6 and json.loads(first)["steps_this_run"] == 3
    assert json.loads(resumed)["steps_this_run"] is None


@pytest.mark.parametrize("script", [run_glue, run_squad])
def test_fine_tuning_logs_the_training_scalars(script, tmp_path):
    write_tiny_model(tmp_path)
    if script is run_glue:
        lines = require_shared("data", "glue", "MRPC", "train.tsv").read_bytes().split(b"\n")
        (tmp_path / "train.tsv").write_bytes(b"\n".join(lines[:9]) + b"\n")
        task_argv = ["--task-name", "mrpc", "--train-file", tmp_path / "train.tsv"]
    else:
        article = json.loads(require_shared("data", "squad", "v1.1", "dev-v1.1.json").read_text())["data"][0]
        paragraph = dict(article["paragraphs"][0], qas=article["paragraphs"][0]["qas"][:4])
        (tmp_path / "train.json").write_text(json.dumps({"version": "1.1", "data": [{"title": "t",
                                                                                      "paragraphs": [paragraph]}]}))
        task_argv = ["--max-seq-length", "128", "--doc-stride", "64", "--max-query-length", "32",
                     "--train-file", tmp_path / "train.json"]
    output_dir, records = run_in_process(script.main, [
        *common_argv(tmp_path, tmp_path / "out"), *task_argv, "--do-train", "--max-steps", 3, "--log-freq", 1,
        "--visualdl-log-dir", tmp_path / "visualdl"], tmp_path / "out")
    content = read_log(tmp_path / "visualdl")
    assert content["scalar"]["train/loss"] == [(step, pytest.approx(loss, rel=1e-6))
                                               for step, loss in zip((1, 2, 3), logged(records, "loss"), strict=True)]
    assert [step for step, _ in content["scalar"]["train/learning_rate"]] == [1, 2, 3]
    assert content["scalar"]["train/training_sequences_per_second"] == [
        (3, pytest.approx(logged(records, "training_sequences_per_second")[0], rel=1e-6))]
    assert json.loads(content["text"]["config"][0][1])["max_steps"] == 3


def test_pretraining_validation_metrics_reach_the_visualdl_log(tmp_path):
    logdir = tmp_path / "vdl"
    argv = pretraining_argv(tmp_path, "--max-steps", "2", "--eval-dir", str(require_shared(*DYNAMIC)),
                            "--eval-freq", "1", "--num-eval-batches", "1", "--visualdl-log-dir", str(logdir))
    assert train(argv) == 0
    scalars = read_log(logdir)["scalar"]
    assert [step for step, _ in scalars["eval/mlm_accuracy"]] == [1, 2]
    report = [r["data"] for r in step_records(tmp_path / "report.json") if "eval_mlm_loss" in r["data"]]
    assert [value for _, value in scalars["eval/mlm_loss"]] == pytest.approx([r["eval_mlm_loss"] for r in report])
