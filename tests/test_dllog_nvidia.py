"""--dllogger-format nvidia: NVIDIA's stdout lines and its separate start-up PARAMETER records.

The expected lines are written out by hand from NVIDIA's source: the StdOutBackend of github.com/NVIDIA/dllogger
(dllogger/logger.py: default_prefix_format "DLL {} - " of the datetime, the line "{}{} {}" of prefix, step and
the metrics joined by " ", default_metric_format "{} : {} {}" with an empty unit when no metadata is declared)
and the step format of DeepLearningExamples' PaddlePaddle/LanguageModeling/BERT/utils/logger.py (format_step:
"Epoch: e " "Step: s " "Validation Iteration: v ", "Summary:" for ()). The start-up records are those of its
run_pretraining.py (SEED, train_start, batch_size_per_gpu, learning_rate) and run_squad.py (SEED).
"""

from __future__ import annotations

import re
from datetime import datetime

import pytest

import run_glue
import run_pretraining
import run_squad
from pretraining_runs import pretraining_argv, run_training
from utils.dllog import DLLogger, nvidia_stdout_line, open_report, read_report

WHEN = datetime(2023, 11, 14, 22, 13, 20, 123456)


@pytest.mark.parametrize("step, data, expected", [
    ((0, 10), {"loss": 7.1, "learning_rate": 0.0006},
     "DLL 2023-11-14 22:13:20.123456 - Epoch: 0 Step: 10  loss : 7.1  learning_rate : 0.0006 "),
    ("PARAMETER", {"SEED": 42}, "DLL 2023-11-14 22:13:20.123456 - PARAMETER SEED : 42 "),
    ("PARAMETER", {"train_start": True}, "DLL 2023-11-14 22:13:20.123456 - PARAMETER train_start : True "),
    ((), {"e2e_train_time": 12.5, "final_loss": None},
     "DLL 2023-11-14 22:13:20.123456 - Summary: e2e_train_time : 12.5  final_loss : None "),
    ((1, 5, 3), {"eval_loss": 2.0},
     "DLL 2023-11-14 22:13:20.123456 - Epoch: 1 Step: 5 Validation Iteration: 3  eval_loss : 2.0 "),
])
def test_lines_are_nvidias(step, data, expected):
    assert nvidia_stdout_line(WHEN, step, data) == expected


def test_a_whole_second_prints_as_str_of_the_datetime_does():
    # str(datetime) leaves out a zero microsecond, and so does dllogger's prefix.
    assert nvidia_stdout_line(datetime(2024, 1, 2, 3, 4, 5), (0, 1), {"loss": 1.0}) == (
        "DLL 2024-01-02 03:04:05 - Epoch: 0 Step: 1  loss : 1.0 ")


def test_the_logger_prints_nvidias_line_with_the_records_time_and_no_units(tmp_path, capsys):
    """Our metadata (units, formats) changes nothing on NVIDIA's lines: NVIDIA's recipe declares none."""
    logger = DLLogger(tmp_path / "report.json", stdout=False, nvidia_stdout=True)
    logger.metadata("step_cost", {"unit": "s", "format": ":.3f"})
    logger.log((0, 2), {"loss": 6.25, "step_cost": 0.123456})
    logger.close()
    (record,) = [record for record in read_report(tmp_path / "report.json") if record["type"] == "LOG"]
    assert capsys.readouterr().out == nvidia_stdout_line(datetime.fromisoformat(record["datetime"]), (0, 2),
                                                         {"loss": 6.25, "step_cost": 0.123456}) + "\n"
    assert "step_cost : 0.123456 \n" in nvidia_stdout_line(WHEN, (0, 2), {"step_cost": 0.123456}) + "\n"


def test_a_disabled_rank_prints_nothing(tmp_path, capsys):
    DLLogger(tmp_path / "report.json", enabled=False, nvidia_stdout=True).log((0, 1), {"loss": 1.0})
    assert capsys.readouterr().out == ""


def parameter_records(path) -> list[dict]:
    return [record["data"] for record in read_report(path) if record.get("step") == "PARAMETER"]


FINETUNING_ARGS = ["--vocab-file", "vocab.txt", "--output-dir", "out"]


@pytest.mark.parametrize("module, argv, expected", [
    (run_pretraining, ["--input-dir", "in", "--vocab-file", "v", "--output-dir", "o", "--max-steps", "3",
                       "--phase1", "--batch-size", "64", "--learning-rate", "6e-3", "--seed", "7"],
     [{"SEED": 7}, {"train_start": True}, {"batch_size_per_gpu": 64}, {"learning_rate": 6e-3}]),
    (run_squad, [*FINETUNING_ARGS, "--seed", "3"], [{"SEED": 3}]),
    (run_glue, [*FINETUNING_ARGS, "--task-name", "mrpc", "--seed", "5"], [{"SEED": 5}]),
])
def test_each_scripts_parser_takes_the_flag_and_open_report_writes_nvidias_start_records(module, argv, expected,
                                                                                       tmp_path, capsys):
    args = module.build_parser().parse_args([*argv, "--report-file", str(tmp_path / "nvidia.json"),
                                             "--dllogger-format", "nvidia"])
    open_report(args, enabled=True).close()
    assert parameter_records(tmp_path / "nvidia.json") == expected
    lines = capsys.readouterr().out.splitlines()
    assert [re.sub(r"^DLL [0-9-]+ [0-9:.]+ - ", "", line) for line in lines] == [
        "PARAMETER " + "".join(f"{name} : {value} " for name, value in record.items()) for record in expected]

    default = module.build_parser().parse_args([*argv, "--report-file", str(tmp_path / "ours.json")])
    assert default.dllogger_format == "paddlebert"
    open_report(default, enabled=True).close()
    assert not (tmp_path / "ours.json").exists() or parameter_records(tmp_path / "ours.json") == []
    assert capsys.readouterr().out == ""


@pytest.mark.slow
def test_a_pretraining_run_prints_nvidias_lines_and_records(tmp_path):
    output = run_training(pretraining_argv(tmp_path, "--max-steps", "2", "--dllogger-format", "nvidia"))
    lines = [line for line in output.splitlines() if line.startswith("DLL ")]
    assert re.fullmatch(r"DLL \d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d{6})? - PARAMETER SEED : 42 ", lines[0])
    steps = [line for line in lines if " - Epoch: " in line]
    assert len(steps) == 2 and all(re.search(r" - Epoch: 0 Step: \d  loss : [0-9.]+  ", line) for line in steps)
    assert any(line.endswith(" ") and " - Summary: e2e_train_time : " in line for line in lines)
    assert parameter_records(tmp_path / "report.json")[:4] == [
        {"SEED": 42}, {"train_start": True}, {"batch_size_per_gpu": 4}, {"learning_rate": 5e-3}]
