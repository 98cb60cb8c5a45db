"""Progress of long work (preprocessing, conversion, feature building, prediction) on stderr, through tqdm.

On a terminal it is tqdm's bar, redrawn in place. Anywhere else (a Slurm output file, a pipe, a CI log) a redrawn
bar would pile up carriage returns, so it is plain lines without the bar: the first once the work has taken
DELAY_SECONDS, then one every PLAIN_LINE_SECONDS, and one at the end:

    tokenize: 45% 12.0M/26.7M [00:10<00:12, 1.20MB/s, 5123 documents (512/s)]

Work that ends within DELAY_SECONDS prints nothing (tqdm's delay=), and quiet work prints nothing at all. Progress
never goes to stdout, which belongs to a script's results.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Mapping
from typing import TextIO

from tqdm import tqdm

# Seconds before anything is shown: shorter work stays silent.
DELAY_SECONDS = 5.0
# Seconds between two plain lines when stderr is not a terminal (Slurm files are read, not watched).
PLAIN_LINE_SECONDS = 30.0


class _PlainLines:
    """The text stream tqdm writes to off a terminal: an in-place redraw ("\\r" + status + padding) becomes a
    line of its own when it is the first, or PLAIN_LINE_SECONDS after the last line written; the latest status
    held back is written when tqdm closes the bar (its "\\n"). tqdm redraws every DELAY_SECONDS here, so the
    first line comes as soon as the work outlasts its delay, not after PLAIN_LINE_SECONDS (work of 5-30 s would
    otherwise show nothing: tqdm never draws a bar it has not drawn before its end)."""

    def __init__(self, stream: TextIO):
        self.stream = stream
        self.last_line_time: float | None = None
        self.held_back = ""

    def write(self, text: str) -> None:
        line = text.replace("\r", "").rstrip()
        if line:
            now = time.monotonic()
            if self.last_line_time is None or now - self.last_line_time >= PLAIN_LINE_SECONDS:
                self._write_line(line, now)
            else:
                self.held_back = line
        elif "\n" in text and self.held_back:  # tqdm closes the bar: its final status
            self._write_line(self.held_back, time.monotonic())

    def _write_line(self, line: str, now: float) -> None:
        self.stream.write(line + "\n")
        self.last_line_time, self.held_back = now, ""

    def flush(self) -> None:
        self.stream.flush()


def progress_bar(iterable: Iterable | None = None, *, desc: str, total: float | None = None, unit: str = "it",
                 quiet: bool = False, unit_scale: bool = False) -> tqdm:
    """A tqdm over `iterable` (or updated by hand up to `total`) on the current stderr: a bar on a terminal,
    plain lines elsewhere; nothing with quiet, and nothing for work shorter than DELAY_SECONDS."""
    stream = sys.stderr
    shared = dict(desc=desc, total=total, unit=unit, unit_scale=unit_scale, disable=quiet, delay=DELAY_SECONDS,
                  leave=True)
    if stream.isatty():
        return tqdm(iterable, file=stream, dynamic_ncols=True, **shared)
    # ncols=0: tqdm's statistics without the bar
    return tqdm(iterable, file=_PlainLines(stream), ncols=0, mininterval=DELAY_SECONDS,
                maxinterval=PLAIN_LINE_SECONDS, **shared)


def show_counts(bar: tqdm, counts: Mapping[str, int]) -> None:
    """Show running totals of what the work produced (documents, pairs) and their rates beside the bar; they
    appear with its next line."""
    if bar.disable:
        return
    elapsed = bar.format_dict["elapsed"]
    bar.set_postfix_str(", ".join(f"{count} {name} ({count / elapsed:.0f}/s)" if elapsed > 0 else f"{count} {name}"
                                  for name, count in counts.items()), refresh=False)
