"""What a pretraining run reports as it trains: each optimizer step's result (StepResult), the DLLogger metrics
and their formats (REPORT_METRICS), and ProgressReporter, which turns the steps into --log-freq interval records,
printed progress lines with an ETA, skipped-update records and the run's summary.

run_pretraining.py makes the steps; this module only counts, averages and writes them (docs/reports.md has
every key, whose it is and what it holds).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable

from utils.dllog import DLLogger
from utils.visualdl_log import VisualDLLog


@dataclasses.dataclass
class StepResult:
    """What one optimizer step did, in global (all-rank) terms."""

    loss: float
    mlm_loss: float
    nsp_loss: float
    sequences: int
    rank_sequences: int  # this rank's part of sequences
    learning_rate: float
    loss_scale: float
    skipped: bool
    padding_fraction: float  # this rank's micro-batches as the model got them (packed or not), their mean


def format_duration(seconds: float) -> str:
    """H:MM:SS, as the progress line's ETA."""
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


REPORT_METRICS = {
    "loss": {"format": ":.4f"}, "mlm_loss": {"format": ":.4f"}, "nsp_loss": {"format": ":.4f"},
    "learning_rate": {"format": ":.6e"}, "loss_scale": {"format": ":.1f"},
    "sequences_per_second": {"unit": "sequences/s", "format": ":.2f"},
    # NVIDIA's keys; seqs_per_sec's unit is not plot_report's "sequences/s", so the plot shows the global figure.
    "step_cost": {"unit": "s", "format": ":.3f"}, "step_samples": {"unit": "sequences", "format": ":d"},
    "seqs_per_sec": {"unit": "sequences/s per rank", "format": ":.2f"},
    "e2e_train_time": {"unit": "s", "format": ":.2f"}, "raw_train_time": {"unit": "s", "format": ":.2f"},
    "training_sequences_per_second": {"unit": "sequences/s", "format": ":.2f"},
    "final_loss": {"format": ":.4f"}, "padding_fraction": {"format": ":.4f"},
    "elapsed_training_minutes": {"unit": "min", "format": ":.2f"},
    "trained_sequences": {"unit": "sequences", "format": ":d"},
}


class ProgressReporter:
    """The loss and throughput of each --log-freq interval (DLLogger records, the VisualDL log if there is one,
    and a printed line with the ETA), the skipped updates, and the run's summary over its timed steps (all of
    them, or a benchmark's).

    Each record of a training step (an interval's, a skipped update's, an evaluation's) has NVIDIA's step
    [epoch, step]: the step is the optimizer step just done (1-based, counted across resumes) and the epoch is
    `epoch_of()`, the training loader's 0-based epoch of the last batch it handed out, i.e. how many full passes
    over the shards came before this step's last micro-batch (a resumed run continues the loader's count).

    An interval's record holds our keys (loss, mlm_loss and nsp_loss averaged over the interval's updates,
    learning_rate and loss_scale of its last step, sequences_per_second of all ranks) and NVIDIA's (program.py
    of its PaddlePaddle BERT recipe), measured as NVIDIA does: step_cost, the wall seconds of the whole interval
    (not of one step); step_samples, the sequences this rank trained on in it (skipped updates included); and
    seqs_per_sec = step_samples / step_cost, per rank. NVIDIA's own loss is the last step's; ours keeps the mean.

    A run without NSP (--no-nsp) reports no nsp_loss: its loss is mlm_loss. Steps recorded with their elapsed
    training time (time_budget.py) add elapsed_training_minutes, the time at the interval's last step. Every
    interval's record also holds trained_sequences, the sequences of all ranks trained on since the phase began
    (counted across resumes from `trained_sequences`, the count at start_step; None for a checkpoint written
    before the count was kept, whose runs then leave it out): with a batch that ramps up
    (--gradient-merge-ramp), steps times batch would not give it.

    last_step is None when a training-time budget (budget_seconds) ends the run instead; the printed line then
    shows the minutes of the budget used, and its ETA is the budget's rest (the earlier end when both are set)."""

    def __init__(self, logger: DLLogger, say, start_step: int, last_step: int | None, log_freq: int,
                 epoch_of: Callable[[], int], nsp: bool = True, visualdl: VisualDLLog | None = None,
                 budget_seconds: float | None = None, trained_sequences: int | None = 0):
        self.logger, self.say, self.visualdl, self.epoch_of = logger, say, visualdl, epoch_of
        self.trained_sequences = trained_sequences
        self.start_step, self.last_step, self.log_freq = start_step, last_step, log_freq
        self.budget_seconds = budget_seconds
        self.loss_keys = ("loss", "mlm_loss", "nsp_loss") if nsp else ("loss", "mlm_loss")
        for name, meta in REPORT_METRICS.items():
            logger.metadata(name, meta)
        self.loop_start = time.perf_counter()
        self.final_loss = float("nan")
        self._start_interval(self.loop_start)
        self.start_timing(self.loop_start)

    def _start_interval(self, now: float) -> None:
        self.interval = {"loss": 0.0, "mlm_loss": 0.0, "nsp_loss": 0.0, "steps": 0, "sequences": 0,
                         "rank_sequences": 0}
        self.interval_start = now

    def start_timing(self, now: float | None = None) -> None:
        """The summary's throughput counts the steps from here (a benchmark calls this after its warmup)."""
        self.timed_start = time.perf_counter() if now is None else now
        self.timed_sequences = self.timed_steps = 0
        self.timed_padding = 0.0

    def record(self, step: int, result: StepResult, stopping: bool, elapsed: float | None = None) -> None:
        """Count a step; `stopping`: it is the run's last (report its interval now); `elapsed`: the elapsed
        training time after it, in seconds."""
        self.timed_sequences += result.sequences
        self.timed_steps += 1
        self.timed_padding += result.padding_fraction
        self.interval["sequences"] += result.sequences
        self.interval["rank_sequences"] += result.rank_sequences
        if self.trained_sequences is not None:
            self.trained_sequences += result.sequences
        if result.skipped:
            self.say(f"Step {step}: non-finite loss or float16 overflow; update skipped "
                     f"(loss scale {result.loss_scale:g})", flush=True)
            self.logger.log((self.epoch_of(), step),
                            {"skipped_update": 1, "loss": result.loss, "loss_scale": result.loss_scale})
        else:
            for key in self.loss_keys:
                self.interval[key] += getattr(result, key)
            self.interval["steps"] += 1
        if step % self.log_freq == 0 or step == self.last_step or stopping:
            self._report_interval(step, result, elapsed)

    def _position(self, step: int, now: float, training_time: float | None) -> tuple[str, float]:
        """Where the run is, for the printed line: the step of --max-steps or the minutes of the budget; and the
        ETA in seconds (the step count's from the wall time per step so far, the budget's from the training time
        left; the sooner of the two)."""
        etas = []
        if self.last_step is not None:
            etas.append((now - self.loop_start) / (step - self.start_step) * (self.last_step - step))
        if self.budget_seconds is None or training_time is None:
            where = f"step {step}/{self.last_step} ({100 * step / self.last_step:.1f}%)"
        else:
            etas.append(max(0.0, self.budget_seconds - training_time))
            where = (f"step {step}  {training_time / 60:.2f}/{self.budget_seconds / 60:g} min "
                     f"({100 * training_time / self.budget_seconds:.1f}%)")
        return where, min(etas)

    def _report_interval(self, step: int, result: StepResult, training_time: float | None) -> None:
        now = time.perf_counter()
        interval = self.interval
        if interval["steps"]:
            self.final_loss = interval["loss"] / interval["steps"]
            elapsed = now - self.interval_start
            sequences_per_second = interval["sequences"] / elapsed
            metrics = {
                **{key: interval[key] / interval["steps"] for key in self.loss_keys},
                "learning_rate": result.learning_rate,
                "loss_scale": result.loss_scale,
                "sequences_per_second": sequences_per_second,
                "step_cost": elapsed,
                "step_samples": interval["rank_sequences"],
                "seqs_per_sec": interval["rank_sequences"] / elapsed,
            }
            if training_time is not None:
                metrics["elapsed_training_minutes"] = training_time / 60.0
            if self.trained_sequences is not None:
                metrics["trained_sequences"] = self.trained_sequences
            self.log(step, metrics)
            position, eta = self._position(step, now, training_time)
            self.say(f"{position}  loss {self.final_loss:.4f}  lr {result.learning_rate:.3e}  "
                     f"{sequences_per_second:.1f} seq/s  ETA {format_duration(eta)}", flush=True)
        self._start_interval(now)

    def log(self, step: int, metrics: dict) -> None:
        """A step's metrics to the report (at [epoch, step]) and the VisualDL log (at step); validation metrics
        are named eval_*."""
        self.logger.log((self.epoch_of(), step), metrics)
        if self.visualdl is not None:
            self.visualdl.scalars(step, metrics)

    def summarise(self, process_start: float, world_size: int) -> dict:
        train_time = time.perf_counter() - self.timed_start
        summary = {
            "e2e_train_time": time.time() - process_start,
            "training_sequences_per_second": self.timed_sequences / train_time if train_time > 0 else 0.0,
            "final_loss": self.final_loss,
            "raw_train_time": train_time,
            "timed_steps": self.timed_steps,
            "padding_fraction": self.timed_padding / self.timed_steps if self.timed_steps else 0.0,
            "world_size": world_size,
        }
        self.logger.log((), summary)
        self.say("Summary: " + json.dumps(summary), flush=True)
        if self.visualdl is not None:
            self.visualdl.close()
        return summary
