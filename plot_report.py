"""Plot loss and throughput against step from a DLLogger report: `python plot_report.py REPORT.json --output plot.png`.

The top panel shows the training `loss`, and `mlm_loss` / `nsp_loss` when the report has them, beside the
validation losses `eval_mlm_loss` / `eval_nsp_loss` (pretraining_eval.py) as dots; a validation report also
gets an accuracy panel (`eval_mlm_accuracy`, `eval_nsp_accuracy`); the bottom panel shows every per-step
metric that the report's METADATA records declare in sequences/s (for the pre-training engine, the global
throughput; a metric declared in other units, such as NVIDIA's per-rank seqs_per_sec, is not drawn). A record's
training step is dllog.training_step's: run_pretraining.py logs [epoch, step], older reports an int. A resumed run
logs again the steps after the checkpoint it resumed from; the later record of a step wins, since it
belongs to the run that continued.

After writing the PNG it prints one summary line of the run: steps, sequences, time, and the first and last
validation MLM loss and accuracy when the report has them.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen before pyplot is imported)
from matplotlib.figure import Figure  # noqa: E402

from utils.atomic_io import atomic_write
from utils.dllog import LOG, METADATA, read_report, training_step  # noqa: E402

LOSS_METRICS = ("loss", "mlm_loss", "nsp_loss")
EVAL_LOSS_METRICS = ("eval_mlm_loss", "eval_nsp_loss")
EVAL_ACCURACY_METRICS = ("eval_mlm_accuracy", "eval_nsp_accuracy")
THROUGHPUT_UNIT = "sequences/s"


def metric_series(records: list[dict], metric: str) -> tuple[list[int], list[float]]:
    """(steps, values) of a per-step metric, ascending by step, one finite value per step (the last logged)."""
    by_step: dict[int, float] = {}
    for record in records:
        if record["type"] != LOG or metric not in record["data"]:
            continue
        step = training_step(record["step"])
        value = record["data"][metric]
        if step is None or isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            continue
        by_step[step] = value
    steps = sorted(by_step)
    return steps, [by_step[step] for step in steps]


def throughput_metrics(records: list[dict]) -> list[str]:
    """Metrics declared with unit sequences/s, in the order they were declared."""
    names = [r["metric"] for r in records if r["type"] == METADATA and r["metadata"].get("unit") == THROUGHPUT_UNIT]
    return list(dict.fromkeys(names))


def present_series(records: list[dict], metrics: list[str] | tuple[str, ...]) -> dict[str, tuple[list, list]]:
    """metric_series of each metric that has at least one value in the report."""
    series = {name: metric_series(records, name) for name in metrics}
    return {name: values for name, values in series.items() if values[0]}


def _draw_panel(axis, training: dict, validation: dict, ylabel: str) -> None:
    """Training series as lines, validation series (a few evaluations) as dots joined by dashes."""
    for name, (steps, values) in training.items():
        axis.plot(steps, values, label=name)
    for name, (steps, values) in validation.items():
        axis.plot(steps, values, "o--", label=name)
    axis.set_ylabel(ylabel)
    axis.legend()
    axis.grid(alpha=0.3)


def build_figure(records: list[dict], title: str) -> Figure:
    """The loss panel (training and validation), an accuracy panel if the report has validation accuracy, and
    a throughput panel if it has per-step throughput."""
    losses = present_series(records, LOSS_METRICS)
    if not losses:
        raise ValueError(f"{title}: no per-step {', '.join(LOSS_METRICS)} records to plot")
    panels = [(losses, present_series(records, EVAL_LOSS_METRICS), "loss")]
    accuracies = present_series(records, EVAL_ACCURACY_METRICS)
    if accuracies:
        panels.append(({}, accuracies, "accuracy"))
    throughputs = present_series(records, throughput_metrics(records))
    if throughputs:
        panels.append((throughputs, {}, THROUGHPUT_UNIT))

    figure, axes = plt.subplots(len(panels), 1, sharex=True, figsize=(8, 3.2 * len(panels)), squeeze=False)
    for axis, (training, validation, ylabel) in zip(axes[:, 0], panels, strict=True):
        _draw_panel(axis, training, validation, ylabel)
    axes[0][0].set_title(title)
    axes[-1][0].set_xlabel("step")
    figure.tight_layout()
    return figure


def summary_line(records: list[dict]) -> str:
    """Steps, sequences and time of the run, and its first and last validation MLM loss and accuracy.

    Sequences are steps x the global batch of the last configuration record (batch_size x gradient_merge_steps
    x world_size, as run_pretraining.py reports them); the time adds up the e2e_train_time of every run that
    wrote to the report (a resumed run appends its own)."""
    steps, _ = metric_series(records, "loss")
    last_step = steps[-1] if steps else 0
    parts = [f"{last_step} steps"]
    configs = [r["data"] for r in records if r["type"] == LOG and r["step"] == "PARAMETER"
               and {"batch_size", "gradient_merge_steps", "world_size"} <= r["data"].keys()]
    if configs:
        config = configs[-1]
        parts.append(f"{last_step * config['batch_size'] * config['gradient_merge_steps'] * config['world_size']}"
                     " sequences")
    times = [r["data"]["e2e_train_time"] for r in records
             if r["type"] == LOG and training_step(r["step"]) is None and "e2e_train_time" in r["data"]]
    if times:
        parts.append(f"{sum(times):.0f} s")
    line = ", ".join(parts)
    eval_steps, eval_losses = metric_series(records, "eval_mlm_loss")
    accuracy_steps, accuracies = metric_series(records, "eval_mlm_accuracy")
    if eval_steps and accuracy_steps:
        line += (f"; validation MLM loss {eval_losses[0]:.3f} -> {eval_losses[-1]:.3f}, MLM accuracy "
                 f"{accuracies[0]:.3f} -> {accuracies[-1]:.3f} (steps {eval_steps[0]} -> {eval_steps[-1]})")
    return line


def save_figure(figure: Figure, output: Path) -> None:
    """Write the PNG atomically (atomic_io, whose OSError names output)."""
    atomic_write(output, lambda temp: figure.savefig(temp, format="png", dpi=100))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, help="DLLogger JSON-lines report written by a training run")
    parser.add_argument("--output", type=Path, required=True, help="PNG file to write")
    args = parser.parse_args(argv)
    if args.output.is_dir():
        raise SystemExit(f"--output {args.output}: is a folder; give the PNG file to write, e.g. "
                         f"{args.output / 'plot.png'}")
    if args.output.exists() and args.output.resolve() == args.report.resolve():
        raise SystemExit(f"--output {args.output}: is the report itself; the plot would replace it")
    try:
        records = read_report(args.report)
        figure = build_figure(records, str(args.report))
        save_figure(figure, args.output)
    except (OSError, ValueError) as error:
        raise SystemExit(str(error)) from None
    plt.close(figure)
    print(f"Plot: {args.output}")
    print(f"Summary: {summary_line(records)}")


if __name__ == "__main__":
    main()
