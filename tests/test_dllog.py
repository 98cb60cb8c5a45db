"""dllog.py writes NVIDIA dllogger's JSONStreamBackend format, appends on resume, and reads reports back."""

from __future__ import annotations

import json
import os
from datetime import datetime

import numpy as np
import pytest

from utils.dllog import DLLogger, format_step, read_report


def raw_records(path) -> list[dict]:
    """Parse the file independently of read_report: every line must be 'DLLL ' + a JSON object."""
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines, "report is empty"
    records = []
    for line in lines:
        assert line.startswith("DLLL "), line
        records.append(json.loads(line[len("DLLL ") :]))
    return records


def test_record_format_matches_dllogger(tmp_path, capsys):
    path = tmp_path / "report.json"
    logger = DLLogger(path)
    logger.log("PARAMETER", {"batch_size": 8, "seed": 42})
    logger.metadata("throughput", {"unit": "sequences/s", "format": ":.2f"})
    logger.log((0, 10), {"loss": 7.25, "throughput": np.float32(12.5)})
    logger.log((), {"e2e_train_time": 3.0})
    logger.close()

    records = raw_records(path)
    assert [r["type"] for r in records] == ["LOG", "METADATA", "LOG", "LOG"]
    for record in records:
        for key in ("timestamp", "datetime", "elapsedtime", "type"):
            assert key in record
        # dllogger stores times as strings; they must still be numbers / ISO datetimes.
        assert isinstance(record["timestamp"], str) and isinstance(record["elapsedtime"], str)
        timestamp = float(record["timestamp"])
        assert abs(datetime.fromisoformat(record["datetime"]).timestamp() - timestamp) < 1e-3
        assert float(record["elapsedtime"]) >= 0
    parameter, meta, step, summary = records
    assert parameter["step"] == "PARAMETER" and parameter["data"] == {"batch_size": 8, "seed": 42}
    assert meta["metric"] == "throughput" and meta["metadata"] == {"unit": "sequences/s", "format": ":.2f"}
    assert step["step"] == [0, 10] and step["data"] == {"loss": 7.25, "throughput": 12.5}
    assert summary["step"] == [] and summary["data"] == {"e2e_train_time": 3.0}

    # stdout uses the metric's unit and format.
    out = capsys.readouterr().out.splitlines()
    assert "Epoch: 0 Step: 10" in out[1] and "throughput : 12.50 sequences/s" in out[1]
    assert "Summary:" in out[2]


def test_file_is_appended_to_on_reopen(tmp_path):
    path = tmp_path / "report.json"
    with DLLogger(path, stdout=False) as logger:
        logger.log(1, {"loss": 2.0})
    with DLLogger(path, stdout=False) as logger:
        logger.log(2, {"loss": 1.5})
    assert [(r["step"], r["data"]["loss"]) for r in raw_records(path)] == [(1, 2.0), (2, 1.5)]


def test_partial_line_from_killed_writer_is_cut_on_reopen(tmp_path):
    path = tmp_path / "report.json"
    with DLLogger(path, stdout=False) as logger:
        logger.log(1, {"loss": 2.0})
    with open(path, "a", encoding="utf-8") as report:
        report.write('DLLL {"timestamp": "17000')  # what SIGKILL mid-write leaves
    with DLLogger(path, stdout=False) as logger:
        logger.log(2, {"loss": 1.5})
    assert [r["step"] for r in raw_records(path)] == [1, 2]

    only_partial = tmp_path / "killed_at_first_record.json"
    only_partial.write_text('DLLL {"timestamp": "17000', encoding="utf-8")
    with DLLogger(only_partial, stdout=False) as logger:
        logger.log(1, {"loss": 2.0})
    assert [r["step"] for r in raw_records(only_partial)] == [1]


def test_records_are_on_disk_before_close(tmp_path):
    path = tmp_path / "report.json"
    logger = DLLogger(path, stdout=False)
    logger.log(3, {"loss": 1.0})
    assert raw_records(path)[0]["step"] == 3
    logger.close()


def test_disabled_logger_writes_nothing(tmp_path, capsys):
    path = tmp_path / "rank1" / "report.json"
    logger = DLLogger(path, enabled=False)
    logger.metadata("loss", {"format": ":.4f"})
    logger.log(1, {"loss": 2.0})
    logger.close()
    assert not path.exists() and not path.parent.exists()
    assert capsys.readouterr().out == ""


def test_stdout_can_be_turned_off(tmp_path, capsys):
    path = tmp_path / "report.json"
    with DLLogger(path, stdout=False) as logger:
        logger.log(1, {"loss": 2.0})
    assert capsys.readouterr().out == ""
    assert len(raw_records(path)) == 1


def test_read_report_returns_what_was_logged(tmp_path):
    path = tmp_path / "report.json"
    path.write_text("launcher noise that is not a record\n", encoding="utf-8")
    with DLLogger(path, stdout=False) as logger:
        logger.metadata("loss", {"format": ":.4f"})
        logger.log(5, {"loss": 0.5})
    records = read_report(path)
    assert [r["type"] for r in records] == ["METADATA", "LOG"]
    assert records[1]["data"] == {"loss": 0.5}


@pytest.mark.parametrize(
    "bad_line, message",
    [
        ("DLLL {not json", "not valid JSON"),
        ('DLLL {"type": "LOG", "timestamp": "1", "datetime": "x", "elapsedtime": "0", "step": 1}', "lacks data"),
        ('DLLL {"type": "OTHER"}', "type must be LOG or METADATA"),
    ],
)
def test_read_report_names_file_and_line_of_a_bad_record(tmp_path, bad_line, message):
    path = tmp_path / "report.json"
    with DLLogger(path, stdout=False) as logger:
        logger.log(1, {"loss": 2.0})
    with open(path, "a", encoding="utf-8") as report:
        report.write(bad_line + "\n")
    with pytest.raises(ValueError, match=rf"report\.json:2: .*{message}"):
        read_report(path)


def test_read_report_names_file_and_line_of_text_that_is_not_utf8(tmp_path):
    path = tmp_path / "report.json"
    with DLLogger(path, stdout=False) as logger:
        logger.log(1, {"loss": 2.0})
    with open(path, "ab") as report:
        report.write(b"written by some other tool: \xff\n")
    with pytest.raises(ValueError, match=r"report\.json:2: not UTF-8 text \(byte 0xff at column 29\)"):
        read_report(path)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux's /dev/full (every write: ENOSPC)")
def test_a_full_disk_names_the_report_file():
    with pytest.raises(OSError, match=r"/dev/full: cannot write the report \(No space left on device\)"):
        DLLogger("/dev/full", stdout=False).log(1, {"loss": 2.0})


def test_read_report_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="absent.json"):
        read_report(tmp_path / "absent.json")


def test_format_step():
    assert format_step("PARAMETER") == "PARAMETER"
    assert format_step(7) == "Step: 7"
    assert format_step((1, 7)) == "Epoch: 1 Step: 7"
    assert format_step(()) == "Summary:"
