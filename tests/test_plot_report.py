"""plot_report.py: series extraction from DLLogger reports, the PNG it writes, and its one-line errors."""

from __future__ import annotations

import os
import re
import struct
import subprocess
import sys

import matplotlib.image
import pytest

from conftest import ROOT
from plot_report import build_figure, main, metric_series, summary_line
from utils.dllog import DLLogger, read_report


def write_report(path) -> None:
    """A pre-training-like report: a run killed after step 30 and resumed from its step-20 checkpoint."""
    with DLLogger(path, stdout=False) as logger:
        logger.log("PARAMETER", {"batch_size": 8})
        logger.metadata("loss", {"format": ":.4f"})
        logger.metadata("sequences_per_second", {"unit": "sequences/s", "format": ":.2f"})
        for step in (10, 20, 30):
            logger.log(
                (0, step),
                {
                    "loss": 8.0 - step / 10,
                    "mlm_loss": 7.0 - step / 10,
                    "nsp_loss": 1.0,
                    "sequences_per_second": 100.0 + step,
                },
            )
    with DLLogger(path, stdout=False) as logger:  # the resumed run appends
        logger.metadata("sequences_per_second", {"unit": "sequences/s", "format": ":.2f"})
        for step in (30, 40):
            logger.log(
                (0, step), {"loss": 4.0 - step / 100, "mlm_loss": 3.5, "nsp_loss": 0.5, "sequences_per_second": 200.0}
            )
        logger.log((), {"final_loss": 3.6, "training_sequences_per_second": 200.0})


def test_metric_series_keeps_last_record_of_each_step(tmp_path):
    path = tmp_path / "report.json"
    write_report(path)
    records = read_report(path)
    assert metric_series(records, "loss") == ([10, 20, 30, 40], [7.0, 6.0, 3.7, 3.6])
    assert metric_series(records, "sequences_per_second") == ([10, 20, 30, 40], [110.0, 120.0, 200.0, 200.0])
    assert metric_series(records, "final_loss") == ([], [])  # summaries have no step


def test_figure_plots_losses_and_throughput(tmp_path):
    path = tmp_path / "report.json"
    write_report(path)
    figure = build_figure(read_report(path), "run")
    loss_axis, throughput_axis = figure.axes
    lines = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in loss_axis.lines}
    assert sorted(lines) == ["loss", "mlm_loss", "nsp_loss"]
    assert lines["nsp_loss"] == ([10, 20, 30, 40], [1.0, 1.0, 0.5, 0.5])
    (throughput_line,) = throughput_axis.lines
    assert throughput_line.get_label() == "sequences_per_second"
    assert throughput_axis.get_ylabel() == "sequences/s"


def write_validated_report(path) -> None:
    """A pre-training report with evaluations at steps 10 and 20 (pretraining_eval.py's eval_* names)."""
    with DLLogger(path, stdout=False) as logger:
        logger.log("PARAMETER", {"batch_size": 8, "gradient_merge_steps": 2, "world_size": 3})
        logger.metadata("sequences_per_second", {"unit": "sequences/s", "format": ":.2f"})
        for step in (5, 10, 15, 20):
            logger.log(step, {"loss": 9.0 - step / 10, "mlm_loss": 8.5 - step / 10, "sequences_per_second": 50.0})
            if step % 10 == 0:
                logger.log(step, {"eval_mlm_loss": 8.0 - step / 20, "eval_mlm_accuracy": step / 100,
                                  "eval_nsp_loss": 0.7, "eval_nsp_accuracy": 0.5, "eval_masked_tokens": 300})
        logger.log((), {"e2e_train_time": 100.4, "final_loss": 7.0})
    with DLLogger(path, stdout=False) as logger:  # a resumed run adds its own time
        logger.log((), {"e2e_train_time": 20.0, "final_loss": 7.0})


def test_figure_shows_validation_beside_training(tmp_path):
    path = tmp_path / "report.json"
    write_validated_report(path)
    loss_axis, accuracy_axis, throughput_axis = build_figure(read_report(path), "run").axes
    losses = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in loss_axis.lines}
    assert losses == {"loss": ([5, 10, 15, 20], [8.5, 8.0, 7.5, 7.0]),
                      "mlm_loss": ([5, 10, 15, 20], [8.0, 7.5, 7.0, 6.5]),
                      "eval_mlm_loss": ([10, 20], [7.5, 7.0]), "eval_nsp_loss": ([10, 20], [0.7, 0.7])}
    accuracies = {line.get_label(): list(line.get_ydata()) for line in accuracy_axis.lines}
    assert accuracies == {"eval_mlm_accuracy": [0.1, 0.2], "eval_nsp_accuracy": [0.5, 0.5]}
    assert accuracy_axis.get_ylabel() == "accuracy" and throughput_axis.get_ylabel() == "sequences/s"
    assert {line.get_marker() for line in loss_axis.lines if line.get_label().startswith("eval_")} == {"o"}


def test_summary_line_has_steps_sequences_time_and_validation(tmp_path):
    path = tmp_path / "report.json"
    write_validated_report(path)
    # 20 steps x (8 x 2 x 3) sequences; 100.4 + 20.0 s over two runs; evaluations at steps 10 and 20.
    assert summary_line(read_report(path)) == (
        "20 steps, 960 sequences, 120 s; validation MLM loss 7.500 -> 7.000, MLM accuracy 0.100 -> 0.200 "
        "(steps 10 -> 20)")
    plain = tmp_path / "plain.json"
    with DLLogger(plain, stdout=False) as logger:
        logger.log(1, {"loss": 2.0})
    assert summary_line(read_report(plain)) == "1 steps"


def test_cli_prints_the_plot_and_the_summary(tmp_path, capsys):
    report = tmp_path / "report.json"
    write_validated_report(report)
    output = tmp_path / "plot.png"
    main([str(report), "--output", str(output)])
    assert png_size(output) == (800, 960)  # three panels of 3.2 inches at 100 dpi
    assert capsys.readouterr().out.splitlines() == [
        f"Plot: {output}", f"Summary: {summary_line(read_report(report))}"]


def test_report_without_throughput_gets_one_panel(tmp_path):
    path = tmp_path / "squad.json"
    with DLLogger(path, stdout=False) as logger:
        logger.log(1, {"loss": 2.0})
        logger.log(2, {"loss": 1.0})
    assert len(build_figure(read_report(path), "squad").axes) == 1


def png_size(path) -> tuple[int, int]:
    """Width and height from the PNG signature and IHDR chunk (PNG spec, section 5)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_cli_writes_png(tmp_path):
    report = tmp_path / "report.json"
    write_report(report)
    output = tmp_path / "plots" / "pretraining.png"
    main([str(report), "--output", str(output)])
    assert png_size(output) == (800, 640)  # figsize 8 x 6.4 inches at 100 dpi: two panels
    assert matplotlib.image.imread(output).shape[:2] == (640, 800)
    assert [p.name for p in output.parent.iterdir()] == ["pretraining.png"]  # no temp file left
    umask = os.umask(0)
    os.umask(umask)
    assert output.stat().st_mode & 0o777 == 0o666 & ~umask  # the permissions of a plain open(), not mkstemp's 0600


def test_cli_bad_record_is_one_line_naming_file_and_line(tmp_path):
    report = tmp_path / "report.json"
    write_report(report)
    with open(report, "a", encoding="utf-8") as file:
        file.write("DLLL {truncated\n")
    line_count = len(report.read_text(encoding="utf-8").splitlines())
    output = tmp_path / "plot.png"
    result = subprocess.run(
        [sys.executable, str(ROOT / "plot_report.py"), str(report), "--output", str(output)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    message = result.stderr.strip()
    assert "\n" not in message and message.startswith(f"{report}:{line_count}: not valid JSON after 'DLLL '")
    assert not output.exists()


def test_cli_errors_for_missing_file_and_report_without_loss(tmp_path):
    with pytest.raises(SystemExit, match="absent.json: DLLogger report not found"):
        main([str(tmp_path / "absent.json"), "--output", str(tmp_path / "plot.png")])
    report = tmp_path / "empty.json"
    with DLLogger(report, stdout=False) as logger:
        logger.log("PARAMETER", {"seed": 1})
    with pytest.raises(SystemExit, match="empty.json: no per-step loss"):
        main([str(report), "--output", str(tmp_path / "plot.png")])


def test_cli_requires_output(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main([str(tmp_path / "report.json")])
    assert "--output" in capsys.readouterr().err


def test_cli_output_that_is_a_folder_is_one_line(tmp_path):
    report = tmp_path / "report.json"
    write_report(report)
    with pytest.raises(SystemExit, match=r"--output .*: is a folder; give the PNG file to write, e\.g\. .*plot\.png"):
        main([str(report), "--output", str(tmp_path)])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]


def test_cli_report_that_is_not_utf8_names_the_file_and_line(tmp_path):
    report = tmp_path / "report.json"
    write_report(report)
    with open(report, "ab") as file:
        file.write(b"DLLL {\"type\": \"LOG\", \"data\": {\"caf\xe9\": 1}}\n")
    last_line = report.read_bytes().splitlines()[-1]
    where = f"{len(report.read_bytes().splitlines())}: not UTF-8 text (byte 0xe9 at column {last_line.index(0xe9) + 1})"
    with pytest.raises(SystemExit, match=re.escape(f"report.json:{where}")):
        main([str(report), "--output", str(tmp_path / "plot.png")])
