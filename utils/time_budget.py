"""Elapsed training time: what it counts, the stopwatch that measures it, and the clock it reads.

run_pretraining.py measures it in every run; --time-budget spans the learning-rate schedule over it and stops the
run when it reaches the budget (budget recipes: Izsak et al. 2021, "How to Train BERT with an Academic Budget";
Geiping & Goldstein 2022, "Cramming"), and --eval-interval-minutes validates each time it crosses a multiple of
the interval.

Elapsed training time is the wall time of the training loop: drawing each step's batches, forward, backward,
the optimizer step and the progress report, summed over the run and every run it resumes (each checkpoint's
progress record holds it). Not counted: process start-up (imports, building the model, opening the data, loading
a checkpoint), validation and checkpoint writing, so that validating or checkpointing more often does not take
time from training. It is read from `clock` (time.perf_counter), the one function tests replace.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator


def clock() -> float:
    """Seconds from an arbitrary origin: the stopwatch's only source of time."""
    return time.perf_counter()


class TrainingStopwatch:
    """Elapsed training time in seconds: `elapsed` (a resumed run's, from its checkpoint) plus the time it has
    run since start(), less the time spent inside paused()."""

    def __init__(self, elapsed: float = 0.0):
        self._banked = float(elapsed)
        self._since: float | None = None  # clock() when it last started running; None while stopped

    def start(self) -> None:
        self._since = clock()

    def elapsed(self) -> float:
        """The elapsed training time now, in seconds."""
        return self._banked + (clock() - self._since if self._since is not None else 0.0)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Time spent inside does not count (validation, checkpoint writing)."""
        self._banked = self.elapsed()
        self._since = None
        try:
            yield
        finally:
            self._since = clock()


def crossed_multiple(before: float, after: float, interval: float) -> bool:
    """Whether a multiple of `interval` lies in (before, after]: the time from `before` to `after` crossed it."""
    return math.floor(after / interval) > math.floor(before / interval)
