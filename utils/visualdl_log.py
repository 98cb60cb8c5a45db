"""VisualDL logs of a training run (--visualdl-log-dir): the scalars of the DLLogger report and the run's
configuration, for VisualDL, Paddle's TensorBoard (`visualdl --logdir DIR`).

Tags: a report key eval_<name> (a validation metric) is shown as eval/<name>, every other key as train/<key>; the
configuration is the text "config", written at the step the run starts from.

Resume: VisualDL shows one log file per folder, the newest (its LogReader takes the last vdlrecords file name in
sorted order), so a resumed run appends to that file rather than starting a new one. It first reads the file with
VisualDL's own LogReader, finds the last step written under each tag, and skips every step up to it: a run that
restarts from a checkpoint older than its last logged step repeats those steps, and the log keeps each step once.
A run that does not resume starts a new file, which hides the folder's older ones in VisualDL.

VisualDL is optional: where `import visualdl` fails, one line on stderr says so and the run goes on without a log.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path

TEXT_TAG = "config"
EVAL_KEY_PREFIX = "eval_"  # validation metrics in the report; every other number is a training one
# VisualDL's own file names (RecordFileWriter): sorted by name, the last is the newest, the one it shows.
FILE_NAME_PART = "vdlrecords"


def tag_of(key: str) -> str:
    """The VisualDL tag of a report key: eval_<name> -> eval/<name>, anything else -> train/<key>."""
    if key.startswith(EVAL_KEY_PREFIX):
        return "eval/" + key[len(EVAL_KEY_PREFIX):]
    return "train/" + key


def newest_log_file(logdir: str | os.PathLike) -> Path | None:
    """The log file VisualDL shows for this folder (None if it has none)."""
    folder = Path(logdir)
    names = sorted(path.name for path in folder.iterdir() if FILE_NAME_PART in path.name) if folder.is_dir() else []
    return folder / names[-1] if names else None


def last_steps(path: Path) -> dict[str, int]:
    """The last step written under each scalar and text tag of a log file, read with VisualDL's LogReader."""
    from visualdl import LogReader

    reader = LogReader(file_path=str(path))
    steps = {}
    for component in ("scalar", "text"):
        for tag in reader.get_tags().get(component, []):
            steps[tag] = max(record.id for record in reader.get_data(component, tag))
    return steps


def _new_file_name(logdir: Path) -> str:
    """VisualDL's name for a new file, one second later than any file of that name already there, so that it
    sorts last (two runs started within a second would otherwise share a file)."""
    second = int(time.time())
    while (logdir / f"{FILE_NAME_PART}.{second:010d}.log").exists():
        second += 1
    return f"{FILE_NAME_PART}.{second:010d}.log"


class VisualDLLog:
    """A VisualDL log file that takes each (tag, step) once: steps up to the last one already written under a tag
    are skipped."""

    def __init__(self, writer, written: dict[str, int]):
        self.writer = writer  # visualdl.LogWriter
        self.written = written  # tag -> last step in the file
        self.path = Path(writer.file_name)

    @classmethod
    def open(cls, logdir: str | os.PathLike, resume: bool) -> VisualDLLog | None:
        """The log in logdir: appended to (its newest file) when resume, else a new file. None, with one line on
        stderr, when VisualDL is not installed."""
        try:
            from visualdl import LogWriter
        except ImportError as error:
            print(f"VisualDL is not installed ({error}); no VisualDL log is written (pip install visualdl)",
                  file=sys.stderr, flush=True)
            return None
        logdir = Path(logdir)
        logdir.mkdir(parents=True, exist_ok=True)
        existing = newest_log_file(logdir) if resume else None
        written = last_steps(existing) if existing else {}
        file_name = existing.name if existing else _new_file_name(logdir)
        # LogWriter prints "... is exists, VisualDL will add logs to it" on stdout; the run's own line replaces it.
        with contextlib.redirect_stdout(io.StringIO()):
            writer = LogWriter(logdir=str(logdir), file_name=file_name)
        if existing:
            print(f"VisualDL: appending to {existing} after step {max(written.values(), default=0)}", flush=True)
        return cls(writer, written)

    def _new(self, tag: str, step: int) -> bool:
        return step > self.written.get(tag, -1)

    def scalars(self, step: int, values: Mapping[str, object]) -> None:
        """Every number of a report record (booleans and text are not scalars), each under tag_of(key)."""
        for key, value in values.items():
            tag = tag_of(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and self._new(tag, step):
                self.writer.add_scalar(tag=tag, value=float(value), step=step)
                self.written[tag] = step
        self.writer.flush()  # a killed run keeps what it logged

    def text(self, tag: str, text: str, step: int) -> None:
        if self._new(tag, step):
            self.writer.add_text(tag=tag, text_string=text, step=step)
            self.written[tag] = step
            self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def open_run_log(logdir: str | None, *, rank: int, resume: bool, start_step: int,
                 config: Mapping[str, object]) -> VisualDLLog | None:
    """The VisualDL log of a training run, from rank 0 only (None without --visualdl-log-dir, on other ranks, or
    without VisualDL), with the run's configuration as text at the step it starts from."""
    if logdir is None or rank != 0:
        return None
    log = VisualDLLog.open(logdir, resume)
    if log is not None:
        log.text(TEXT_TAG, json.dumps(config, indent=2, sort_keys=True, default=str), start_step)
    return log
