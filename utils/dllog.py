"""DLLogger-format training reports: readable lines on stdout and `DLLL {...}` JSON lines in a file.

NVIDIA's dllogger (github.com/NVIDIA/dllogger) is not on PyPI, so this module writes the same record
format as its JSONStreamBackend, which NVIDIA's tools and our plot_report.py read:

    DLLL {"timestamp": "1700000000.123", "datetime": "2023-11-14 22:13:20.123000", "elapsedtime": "4.2",
          "type": "LOG", "step": [0, 10], "data": {"loss": 7.1}}
    DLLL {"timestamp": ..., "datetime": ..., "elapsedtime": ..., "type": "METADATA",
          "metric": "throughput", "metadata": {"unit": "sequences/s", "format": ":.2f"}}

As in dllogger, timestamp and elapsedtime are strings (seconds since the epoch, and since the logger
was created), and `step` is free-form: an int, a tuple such as (epoch, step), "PARAMETER" for the
run's arguments, or () for the summary of the whole run.

`--dllogger-format nvidia` (add_format_argument, open_report) prints every record on stdout as NVIDIA's
dllogger StdOutBackend does with the step format of NVIDIA's PaddlePaddle BERT recipe (its utils/logger.py),
for log scrapers written against NVIDIA's output, e.g.

    DLL 2023-11-14 22:13:20.123456 - Epoch: 0 Step: 10  loss : 7.1  learning_rate : 0.0006

(str() of the datetime and of each value, no units or formats, a space after each step part and after each metric,
so the line ends in one),
and writes NVIDIA's separate start-up PARAMETER records: run_pretraining.py's SEED, train_start,
batch_size_per_gpu and learning_rate, run_squad.py's (and here run_glue.py's) SEED, one record each.

Differences from dllogger, all for resumable runs: the file is always appended to (a resumed run
continues the report of the run it resumes), every record is flushed as it is written (so SIGKILL
loses nothing already logged), and a partial last line left by a killed writer is cut off when the
file is reopened. Only one process should write: construct with `enabled=(rank == 0)`; a disabled
logger prints and writes nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

RECORD_PREFIX = "DLLL "
LOG = "LOG"
METADATA = "METADATA"
_COMMON_KEYS = ("timestamp", "datetime", "elapsedtime", "type")
_KEYS_BY_TYPE = {LOG: ("step", "data"), METADATA: ("metric", "metadata")}

Step = int | tuple | list | str
PADDLEBERT_FORMAT = "paddlebert"
NVIDIA_FORMAT = "nvidia"


def training_step(step: object) -> int | None:
    """The training step a LOG record's step names: an int, or the second element of [epoch, step] (NVIDIA's
    form, which run_pretraining.py writes); None for "PARAMETER", the summary () and other forms."""
    if isinstance(step, list | tuple):
        step = step[1] if len(step) == 2 else None
    if isinstance(step, bool) or not isinstance(step, int):
        return None
    return step


def _json_value(value: Any) -> Any:
    """JSON fallback for numpy scalars and one-element tensors, which training code often logs."""
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"cannot write {type(value).__name__} to a DLLogger report")


def _cut_partial_last_line(path: Path) -> None:
    """Drop an unterminated last line (a record a killed process was writing) so appends stay parseable."""
    with open(path, "rb+") as report:
        size = report.seek(0, os.SEEK_END)
        if size == 0:
            return
        report.seek(size - 1)
        if report.read(1) == b"\n":
            return
        # Scan backwards in blocks for the last newline; records are short, so this reads little.
        position = size
        while position > 0:
            block_start = max(0, position - 65536)
            report.seek(block_start)
            block = report.read(position - block_start)
            newline = block.rfind(b"\n")
            if newline >= 0:
                report.truncate(block_start + newline + 1)
                return
            position = block_start
        report.truncate(0)


def format_step(step: Step) -> str:
    """Human-readable step, following NVIDIA's BERT convention: (epoch, step, validation iteration)."""
    if isinstance(step, str):
        return step
    if isinstance(step, int):
        return f"Step: {step}"
    if len(step) == 0:
        return "Summary:"
    names = ("Epoch", "Step", "Validation Iteration")
    return " ".join(f"{name}: {value}" for name, value in zip(names, step, strict=False))


def format_nvidia_step(step: Step) -> str:
    """A step as NVIDIA's BERT recipe prints it (utils/logger.py format_step): "PARAMETER", "Summary:" for (), else
    "Epoch: e Step: s Validation Iteration: v " for as many parts as the step has, each followed by a space. An
    int step, which NVIDIA's recipe never logs, prints as dllogger's default str(step)."""
    if isinstance(step, str):
        return step
    if isinstance(step, int):
        return str(step)
    if len(step) == 0:
        return "Summary:"
    names = ("Epoch", "Step", "Validation Iteration")
    return "".join(f"{name}: {value} " for name, value in zip(names, step, strict=False))


def nvidia_stdout_line(timestamp: datetime, step: Step, data: Mapping[str, Any]) -> str:
    """The line NVIDIA's dllogger StdOutBackend prints (github.com/NVIDIA/dllogger, dllogger/logger.py: prefix
    "DLL {timestamp} - ", then "{step} {metrics}", each metric "{name} : {value} {unit}" joined by a space) for a
    recipe that declares no metric metadata, as NVIDIA's BERT recipe does: no unit, the value's str()."""
    metrics = " ".join(f"{name} : {value} " for name, value in data.items())
    return f"DLL {timestamp} - {format_nvidia_step(step)} {metrics}"


class DLLogger:
    """Writes LOG and METADATA records to stdout and (appending) to a DLLogger JSON-lines file.

    stdout: print our readable line per LOG record; nvidia_stdout: print NVIDIA's line instead (whatever stdout
    says)."""

    def __init__(self, json_path: str | os.PathLike | None, enabled: bool = True, stdout: bool = True,
                 nvidia_stdout: bool = False):
        self.enabled = enabled
        self.stdout = stdout and enabled
        self.nvidia_stdout = nvidia_stdout and enabled
        self.start_time = datetime.now()
        self._metadata: dict[str, dict] = {}
        self._file = None
        self.path = Path(json_path) if json_path is not None else None
        if enabled and self.path is not None:
            with self._naming_the_file():
                self.path.parent.mkdir(parents=True, exist_ok=True)
                if self.path.exists():
                    _cut_partial_last_line(self.path)
                self._file = open(self.path, "a", encoding="utf-8")

    @contextlib.contextmanager
    def _naming_the_file(self):
        """An OSError (a full disk, a read-only folder) names the report file, which the bare error does not."""
        try:
            yield
        except OSError as error:
            raise OSError(error.errno, f"{self.path}: cannot write the report ({error.strerror or error})") from error

    def _write(self, record_type: str, fields: dict) -> datetime:
        now = datetime.now()
        if self._file is not None:
            record = {
                "timestamp": str(now.timestamp()),
                "datetime": str(now),
                "elapsedtime": str((now - self.start_time).total_seconds()),
                "type": record_type,
                **fields,
            }
            # One write() per record, then flush: a killed process leaves at most one partial line.
            with self._naming_the_file():
                self._file.write(RECORD_PREFIX + json.dumps(record, default=_json_value) + "\n")
                self._file.flush()
        return now

    def metadata(self, name: str, meta: Mapping[str, Any]) -> None:
        """Declare a metric's unit and print format, e.g. {"unit": "sequences/s", "format": ":.2f"}."""
        if not self.enabled:
            return
        self._metadata.setdefault(name, {}).update(meta)
        self._write(METADATA, {"metric": name, "metadata": dict(meta)})

    def _format_metric(self, name: str, value: Any) -> str:
        meta = self._metadata.get(name, {})
        if hasattr(value, "item"):
            value = value.item()
        number_format = meta.get("format")
        if number_format and isinstance(value, int | float) and not isinstance(value, bool):
            text = ("{" + number_format + "}").format(value)
        else:
            text = str(value)
        unit = meta.get("unit")
        return f"{name} : {text} {unit}" if unit else f"{name} : {text}"

    def log(self, step: Step, data: Mapping[str, Any]) -> None:
        """Record `data` (metric name -> value) at `step`."""
        if not self.enabled:
            return
        now = self._write(LOG, {"step": step, "data": dict(data)})
        if self.nvidia_stdout:
            print(nvidia_stdout_line(now, step, data), flush=True)
        elif self.stdout:
            metrics = "  ".join(self._format_metric(name, value) for name, value in data.items())
            print(f"DLL {now:%Y-%m-%d %H:%M:%S} - {format_step(step)} {metrics}", flush=True)

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> DLLogger:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def add_format_argument(parser: argparse.ArgumentParser) -> None:
    """--dllogger-format, which open_report reads, in its own group of the help."""
    group = parser.add_argument_group("Report format")
    group.add_argument("--dllogger-format", choices=(PADDLEBERT_FORMAT, NVIDIA_FORMAT), default=PADDLEBERT_FORMAT,
                       help="nvidia: print every report record on stdout in NVIDIA's dllogger format (`DLL <time> - "
                       "Epoch: e Step: s  loss : ...`) and write NVIDIA's separate start-up PARAMETER records "
                       "(SEED; pre-training also train_start, batch_size_per_gpu, learning_rate), for log "
                       "scrapers of NVIDIA's recipe; the report file gets those records too, the others unchanged")


def nvidia_start_parameters(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The PARAMETER records NVIDIA's scripts write one by one as they start: run_pretraining.py's four (its
    run_pretraining.py main), run_squad.py's SEED (its run_squad.py main; fine-tuning of GLUE follows it). A
    pre-training run is told by its --phase1/--phase2 flags."""
    if hasattr(args, "phase1"):
        return [{"SEED": args.seed}, {"train_start": True}, {"batch_size_per_gpu": args.batch_size},
                {"learning_rate": args.learning_rate}]
    return [{"SEED": args.seed}]


def open_report(args: argparse.Namespace, enabled: bool, stdout: bool = True) -> DLLogger:
    """The run's DLLogger: --report-file, and with --dllogger-format nvidia NVIDIA's stdout lines and its
    separate start-up PARAMETER records, written at once."""
    nvidia = args.dllogger_format == NVIDIA_FORMAT
    logger = DLLogger(args.report_file, enabled=enabled, stdout=stdout, nvidia_stdout=nvidia)
    if nvidia:
        for record in nvidia_start_parameters(args):
            logger.log("PARAMETER", record)
    return logger


def _check_record(record: Any) -> str | None:
    """What is wrong with a parsed record, or None if it is a well-formed DLLogger record."""
    if not isinstance(record, dict):
        return "record is not a JSON object"
    record_type = record.get("type")
    if record_type not in _KEYS_BY_TYPE:
        return f"type must be LOG or METADATA, got {record_type!r}"
    missing = [key for key in _COMMON_KEYS + _KEYS_BY_TYPE[record_type] if key not in record]
    if missing:
        return f"{record_type} record lacks {', '.join(missing)}"
    body = record["data"] if record_type == LOG else record["metadata"]
    if not isinstance(body, dict):
        return f"{record_type} record's {'data' if record_type == LOG else 'metadata'} is not an object"
    return None


def read_report(path: str | os.PathLike) -> list[dict]:
    """All records of a DLLogger JSON-lines file, in order.

    Lines without the `DLLL ` prefix (other output that was redirected into the file) are skipped, as
    dllogger readers do; a prefixed line that is not a valid record raises ValueError naming the file
    and line number.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: DLLogger report not found")
    records = []
    with open(path, "rb") as report:
        for line_number, raw_line in enumerate(report, start=1):
            try:
                line = raw_line.decode("utf-8")
            except UnicodeDecodeError as error:
                raise ValueError(f"{path}:{line_number}: not UTF-8 text (byte {raw_line[error.start]:#04x} at "
                                 f"column {error.start + 1})") from None
            if not line.startswith(RECORD_PREFIX):
                continue
            try:
                record = json.loads(line[len(RECORD_PREFIX) :])
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}:{line_number}: not valid JSON after 'DLLL ' ({error.msg})") from None
            problem = _check_record(record)
            if problem:
                raise ValueError(f"{path}:{line_number}: {problem}")
            records.append(record)
    return records
