"""Plot loss and throughput against step from a DLLogger report: `python plot_report.py REPORT.json --output plot.png`.

The top panel shows `loss`, and `mlm_loss` / `nsp_loss` when the report has them; the bottom panel
shows every per-step metric that the report's METADATA records declare in sequences/s (for the
pre-training engine, the global throughput). A step is the int step of a record, or the second
element of an (epoch, step) tuple. A resumed run logs again the steps after the checkpoint it
resumed from; the later record of a step wins, since it belongs to the run that continued.
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen before pyplot is imported)
from matplotlib.figure import Figure  # noqa: E402

from dllog import LOG, METADATA, read_report  # noqa: E402

LOSS_METRICS = ("loss", "mlm_loss", "nsp_loss")
THROUGHPUT_UNIT = "sequences/s"


def record_step(step: object) -> int | None:
    """The training step a LOG record belongs to, or None for parameter, summary and validation records."""
    if isinstance(step, list):
        step = step[1] if len(step) == 2 else None
    if isinstance(step, bool) or not isinstance(step, int):
        return None
    return step


def metric_series(records: list[dict], metric: str) -> tuple[list[int], list[float]]:
    """(steps, values) of a per-step metric, ascending by step, one finite value per step (the last logged)."""
    by_step: dict[int, float] = {}
    for record in records:
        if record["type"] != LOG or metric not in record["data"]:
            continue
        step = record_step(record["step"])
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


def build_figure(records: list[dict], title: str) -> Figure:
    """The loss panel, and below it a throughput panel if the report has per-step throughput."""
    losses = {name: metric_series(records, name) for name in LOSS_METRICS}
    losses = {name: series for name, series in losses.items() if series[0]}
    if not losses:
        raise ValueError(f"{title}: no per-step {', '.join(LOSS_METRICS)} records to plot")
    throughputs = {name: metric_series(records, name) for name in throughput_metrics(records)}
    throughputs = {name: series for name, series in throughputs.items() if series[0]}

    panels = 2 if throughputs else 1
    figure, axes = plt.subplots(panels, 1, sharex=True, figsize=(8, 3.2 * panels), squeeze=False)
    loss_axis = axes[0][0]
    for name, (steps, values) in losses.items():
        loss_axis.plot(steps, values, label=name)
    loss_axis.set_ylabel("loss")
    loss_axis.set_title(title)
    loss_axis.legend()
    loss_axis.grid(alpha=0.3)
    if throughputs:
        throughput_axis = axes[1][0]
        for name, (steps, values) in throughputs.items():
            throughput_axis.plot(steps, values, label=name)
        throughput_axis.set_ylabel(THROUGHPUT_UNIT)
        throughput_axis.legend()
        throughput_axis.grid(alpha=0.3)
    axes[-1][0].set_xlabel("step")
    figure.tight_layout()
    return figure


def save_figure(figure: Figure, output: Path) -> None:
    """Write the PNG atomically: a temp file in the output's folder, then os.replace; an OSError names output.

    Not checkpoint.atomic_write: that module imports Paddle, whose import is slow and prints warnings."""
    output.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temp_name = tempfile.mkstemp(prefix=f".{output.name}.", dir=output.parent)
    try:
        with os.fdopen(descriptor, "wb") as temp_file:
            figure.savefig(temp_file, format="png", dpi=100)
        # mkstemp creates the file private (0600); give the PNG the permissions a plain open() would.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temp_name, 0o666 & ~umask)
        os.replace(temp_name, output)
    except OSError as error:
        os.unlink(temp_name)
        raise OSError(error.errno, f"{output}: cannot write the plot ({error.strerror or error})") from error
    except BaseException:
        os.unlink(temp_name)
        raise


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, help="DLLogger JSON-lines report written by a training run")
    parser.add_argument("--output", type=Path, required=True, help="PNG file to write")
    args = parser.parse_args(argv)
    if args.output.is_dir():
        raise SystemExit(f"--output {args.output}: is a folder; give the PNG file to write, e.g. "
                         f"{args.output / 'plot.png'}")
    try:
        figure = build_figure(read_report(args.report), str(args.report))
        save_figure(figure, args.output)
    except (OSError, ValueError) as error:
        raise SystemExit(str(error)) from None
    plt.close(figure)


if __name__ == "__main__":
    main()
