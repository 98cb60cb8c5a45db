"""Fine-tuning parity with Hugging Face on real weights: run_glue.py against transformers' BertForSequenceClassification
on the same GLUE data with the same recipe, scores and wall times, several seeds each.

    python benchmarks/finetune_parity.py --work-dir /work/finetune-parity \
        --output benchmarks/results/finetune_parity-zen4-2026-12-07.txt

The model is all-MiniLM-L6-v2 (../shared/models, a Hugging Face BERT folder; --model-dir), fine-tuned on MRPC, RTE,
CoLA and SST-2 (../shared/data/glue; --glue-dir, --tasks) by each contender (--only):
- ours: run_glue.py as a user runs it (the preset mrpc_cpu_minilm's flags with the task's files) with
  --pack-sequences (OURS_OPTIONS): each batch's examples side by side in as few rows as fit them, which computes
  each example's function as it is on far less padding (the peer pads each batch to its longest example);
- transformers: benchmarks/glue_hf_peer.py in the peers' torch venv (benchmarks/setup_peers.sh; --torch-python):
  transformers' model and tokenizer in a plain PyTorch loop with run_glue.py's recipe, batches and metrics;
- transformers-bf16: the same under torch's bf16 autocast, on a CPU with bf16 instructions (avx512_bf16 or
  amx_bf16) only, where it is in the default --only: what a user who wants speed would pick.
The recipe of both: AdamW, weight decay 0.01 off biases and LayerNorm, gradients clipped to norm 1.0, linear warmup
over 0.1 of the updates then linear decay, batch 32, sequences of at most 128 tokens, --epochs passes at peak rate
--learning-rate (the preset's 2 and 1e-4), each --seeds seed (head initialisation, dropout and data order).

Training sets are fixed subsets (TASKS, --max-train-examples) so that the whole comparison fits about 90 minutes on
2 cores (70 on a Zen 4 once ours packed its rows): the same rows, drawn with SUBSET_SEED, for every contender and
seed; the dev sets are whole.

Stages, each a file WORK/stages/<stage>.json written atomically when it ends; a rerun skips every stage whose file is
there, so a killed run continues where it stopped (a stage's settings are in its file: a rerun with other settings
stops with one line naming the file, so nothing measured under other settings is mixed in):
- <task>--tokenizer: transformers' tokenizer against ours on the task's train and dev files (glue_hf_peer.py
  --check-tokenizer), when a transformers contender runs;
- <task>--<contender>--seed<k>: one fine-tuning and its evaluation, per task, per seed, the contenders in turn
  within a seed so that a drift of the machine touches each of them alike.
Each run's output folder is WORK/runs/<stage>/ and its log WORK/runs/<stage>.log; the subsets are in WORK/data/.

The report: per task and contender the GLUE score (MRPC: the mean of accuracy and F1) over the seeds as median and
spread (max - min), the training loop's seconds (run_glue.py's e2e_train_time, the peer's loop alike) and the
whole process's seconds as medians, and ours against each peer: the score difference next to the larger spread,
and the time ratios ours / peer (the target: training time at most SPEED_TARGET of transformers' fp32). It is printed
as it goes, from the machine line on, and written to WORK/report.txt and, with --output, to a new file that is never
replaced.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import io
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import glue_hf_peer  # noqa: E402  (benchmarks/ is on the path as this script's folder)
import machine  # noqa: E402
import peers  # noqa: E402

from finetuning.glue_data import GLUE_TASKS, read_glue_examples  # noqa: E402
from tokenizer import load_vocab, vocab_looks_cased  # noqa: E402
from utils.atomic_io import atomic_write_text, fsync_dir, temp_beside, text_writer, write_synced  # noqa: E402
from utils.cli import positive_float, positive_int, run_main  # noqa: E402
from utils.dllog import LOG, read_report  # noqa: E402

SCRIPT = "finetune_parity.py"
CONTENDERS = ("ours", "transformers", "transformers-bf16")
PEER_OF = {"transformers": "transformers", "transformers-bf16": "transformers"}  # contender -> its peer venv
BF16_FLAGS = ("avx512_bf16", "amx_bf16")
SHARED = ROOT.parent / "shared"


@dataclasses.dataclass(frozen=True)
class Task:
    """A GLUE task of the comparison: its folder under --glue-dir, the training examples it keeps (None: all) and
    the metrics whose mean is its GLUE score."""

    name: str
    folder: str
    train_examples: int | None
    score: tuple[str, ...]


# Subset sizes: a run's cost grows with its padded tokens (batches of 32 padded to their longest example), and MRPC's
# 3,668 examples, 84 padded tokens each, took 5.5 to 6 minutes for 2 epochs with either system. The whole comparison,
# 4 tasks x 3 seeds x 3 contenders, fits about 90 minutes with about 255,000 padded tokens a run: these sizes give
# MRPC 1,600 x 84 x 2, RTE 1,000 x 128 x 2 (most of its batches fill 128), CoLA 4,000 x 27 x 2, SST-2 3,000 x 44 x 2.
TASKS = {task.name: task for task in (
    Task("mrpc", "MRPC", 1600, ("accuracy", "f1")),
    Task("rte", "RTE", 1000, ("accuracy",)),
    Task("cola", "CoLA", 4000, ("mcc",)),
    Task("sst-2", "SST-2", 3000, ("accuracy",)),
)}
DEFAULT_SUBSETS = ", ".join(f"{task.name}={task.train_examples or 'all'}" for task in TASKS.values())
# Which training rows a subset keeps: fixed, so that every contender, seed and rerun trains on the same rows.
SUBSET_SEED = 20190411
# run_glue.py's defaults and the preset's, which the peer is given too.
RECIPE = {"train_batch_size": 32, "max_seq_length": 128, "warmup_proportion": 0.1, "weight_decay": 0.01}
# run_glue.py's options beyond the recipe, which the report names.
OURS_OPTIONS = ("--pack-sequences",)
SPEED_TARGET = 0.75  # the issue's: our fine-tuning takes at most 0.75x transformers' fp32 time
# What the report reads of a stage file: of a fine-tuning, and of a tokenizer check.
RUN_FIELDS = ("metrics", "train_seconds", "process_seconds")
TOKENIZER_FIELDS = ("examples", "tokenized_differently", "first_difference")


def cpu_has_bf16() -> bool:
    """Whether the CPU has bf16 instructions, where torch's bf16 autocast runs bf16 kernels."""
    return any(flag in machine.kernel_flags() for flag in BF16_FLAGS)


# ---------------------------------------------------------------------------------------------------------------
# The command line
# ---------------------------------------------------------------------------------------------------------------


def comma_list(kind: Callable[[str], object], what: str) -> Callable[[str], list]:
    """An argparse type: a comma-separated list of distinct values, each kind(text)."""

    def parse(text: str) -> list:
        items = [item.strip() for item in text.split(",") if item.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"expected one or more {what}, comma-separated, got {text!r}")
        values = [kind(item) for item in items]
        if len(set(values)) != len(values):
            raise argparse.ArgumentTypeError(f"{what} repeat in {text!r}")
        return values

    return parse


def task_name(text: str) -> str:
    name = text.lower()
    if name not in TASKS:
        raise argparse.ArgumentTypeError(f"unknown task {text!r}; expected some of {','.join(TASKS)}")
    return name


def seed_value(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected seeds as whole numbers >= 0, got {text!r}")
    return int(text)


def subset_size(text: str) -> tuple[str | None, int | None]:
    """argparse type of --max-train-examples: `N` (every task) or `TASK=N`, N a whole number >= 1 or `all`."""
    task, _, count = text.rpartition("=")
    if task and task.lower() not in TASKS:
        raise argparse.ArgumentTypeError(f"unknown task {task!r} in {text!r}; expected one of {','.join(TASKS)}")
    if count == "all":
        return task.lower() or None, None
    if not count.isdigit() or int(count) < 1:
        raise argparse.ArgumentTypeError(f"expected N, TASK=N or TASK=all with N >= 1, got {text!r}")
    return task.lower() or None, int(count)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=SCRIPT, description=__doc__.split("\n\n")[0].replace("\n", " "))
    parser.add_argument("--tasks", type=comma_list(task_name, "tasks"), default=list(TASKS),
                        help=f"GLUE tasks, comma-separated (default: {','.join(TASKS)})")
    parser.add_argument("--seeds", type=comma_list(seed_value, "seeds"), default=[1, 2, 3],
                        help="seeds of every contender's runs, comma-separated (default: 1,2,3)")
    parser.add_argument("--work-dir", default=str(ROOT / "results" / "finetune_parity"),
                        help="stage files, subsets, runs and report.txt (default: results/finetune_parity)")
    parser.add_argument("--output", help="also write the report to this new file (refused if it exists), "
                                         "e.g. benchmarks/results/finetune_parity-<cpu>-<date>.txt")
    parser.add_argument("--epochs", type=positive_int, default=2, help="passes over the training subset (default: 2)")
    parser.add_argument("--learning-rate", type=positive_float, default=1e-4, help="peak learning rate (default: 1e-4)")
    parser.add_argument("--max-train-examples", type=subset_size, action="append", default=[],
                        help="training examples of a task's fixed subset: TASK=N, TASK=all, or N (or all) for every "
                             "task; repeatable, a later one overriding (default: " + DEFAULT_SUBSETS + ")")
    parser.add_argument("--model-dir", default=str(SHARED / "models" / "all-MiniLM-L6-v2"),
                        help="the Hugging Face BERT folder both fine-tune (config.json, model.safetensors, vocab.txt)")
    parser.add_argument("--glue-dir", default=str(SHARED / "data" / "glue"),
                        help="GLUE's task folders (MRPC/train.tsv, MRPC/dev.tsv, ...)")
    peers.add_contender_flags(parser, CONTENDERS, "transformers")
    parser.set_defaults(only=",".join(CONTENDERS if cpu_has_bf16() else CONTENDERS[:-1]))
    return parser


@dataclasses.dataclass(frozen=True)
class Plan:
    """What one invocation runs: the parsed command line, checked."""

    tasks: list[str]
    seeds: list[int]
    contenders: list[str]
    train_examples: dict[str, int | None]  # task -> subset size (None: all)
    epochs: int
    learning_rate: float
    work_dir: Path
    output: Path | None
    model_dir: Path
    glue_dir: Path
    pythons: dict[str, str]  # peer contender -> its Python


def parse_plan(argv: list[str] | None = None) -> Plan:
    """The command line as a Plan; argparse's error naming the flag for a bad value."""
    parser = build_parser()
    args = parser.parse_args(argv)
    contenders = peers.chosen_contenders(parser, args, CONTENDERS)
    if "transformers-bf16" in contenders and not cpu_has_bf16():
        parser.error(f"--only transformers-bf16: this CPU has none of {' or '.join(BF16_FLAGS)}, so torch's bf16 "
                     "autocast would not run bf16 kernels")
    sizes = {name: TASKS[name].train_examples for name in args.tasks}
    for task, count in args.max_train_examples:
        if task is not None and task not in args.tasks:
            parser.error(f"--max-train-examples {task}=...: {task} is not one of --tasks {','.join(args.tasks)}")
        sizes.update({task: count} if task is not None else dict.fromkeys(sizes, count))
    output = Path(args.output).absolute() if args.output else None
    if output is not None and output.exists():
        parser.error(f"--output {output}: exists; a results file is never replaced, name a new one")
    return Plan(args.tasks, args.seeds, contenders, sizes, args.epochs, args.learning_rate,
                Path(args.work_dir).absolute(), output, Path(args.model_dir).absolute(),
                Path(args.glue_dir).absolute(), peers.peer_pythons(args, PEER_OF, contenders, SCRIPT))


# ---------------------------------------------------------------------------------------------------------------
# Data: the fixed subsets
# ---------------------------------------------------------------------------------------------------------------


def subset_rows(total: int, count: int | None) -> list[int]:
    """The data rows a subset of `count` of `total` keeps, in file order: drawn without replacement with SUBSET_SEED
    (all of them when count is None or not below total)."""
    if count is None or count >= total:
        return list(range(total))
    return sorted(np.random.default_rng(SUBSET_SEED).choice(total, size=count, replace=False).tolist())


def subset_text(task: str, source: Path, count: int | None) -> tuple[str, int, int]:
    """(the file's header and the subset's rows as text, rows kept, rows in the file). The file is read by
    glue_data first, so a malformed row stops the run with one line naming the file and line."""
    total = len(read_glue_examples(task, source))
    lines = source.read_text(encoding="utf-8-sig").split("\n")  # records end at \n: GLUE's fields hold no newline
    if lines and lines[-1] == "":
        lines.pop()
    header = lines[:1] if GLUE_TASKS[task].header is not None else []
    rows = lines[len(header):]
    kept = subset_rows(total, count)
    return "".join(line + "\n" for line in header + [rows[index] for index in kept]), len(kept), total


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclasses.dataclass(frozen=True)
class TaskData:
    """A task's files in the work folder and what the report says of them."""

    train_file: Path
    dev_file: Path
    train_examples: int
    train_total: int
    dev_examples: int
    train_sha256: str
    dev_sha256: str


def prepare_task(plan: Plan, task: str) -> TaskData:
    """WORK/data/<task>/train.tsv (the fixed subset) and dev.tsv (all of it), in GLUE's layout; rewritten only
    when their text changed."""
    folder = plan.glue_dir / TASKS[task].folder
    train_text, kept, total = subset_text(task, folder / "train.tsv", plan.train_examples[task])
    dev_text, dev_count, _ = subset_text(task, folder / "dev.tsv", None)
    target = plan.work_dir / "data" / TASKS[task].folder
    for name, text in (("train.tsv", train_text), ("dev.tsv", dev_text)):
        path = target / name
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            atomic_write_text(path, text)
    return TaskData(target / "train.tsv", target / "dev.tsv", kept, total, dev_count, sha256_text(train_text),
                    sha256_text(dev_text))


def model_lowercases(model_dir: Path) -> bool:
    """do_lower_case as the model's tokenizer_config.json says; without one, from the vocabulary's case."""
    config = model_dir / "tokenizer_config.json"
    if config.is_file():
        try:
            value = json.loads(config.read_text(encoding="utf-8")).get("do_lower_case")
        except (UnicodeDecodeError, json.JSONDecodeError, AttributeError) as error:
            raise ValueError(f"{config}: not a tokenizer configuration ({error})") from None
        if value is not None:
            return bool(value)
    return not vocab_looks_cased(load_vocab(model_dir / "vocab.txt"))


def check_model_dir(model_dir: Path) -> None:
    """ValueError naming the flag unless model_dir holds what both contenders read first."""
    for name in ("config.json", "vocab.txt"):
        if not (model_dir / name).is_file():
            raise ValueError(f"--model-dir {model_dir}: no {name}; expected a Hugging Face BERT folder")


# ---------------------------------------------------------------------------------------------------------------
# Stages
# ---------------------------------------------------------------------------------------------------------------


class Stages:
    """The stage files under WORK/stages: a stage runs once, and its file is its result."""

    def __init__(self, work_dir: Path):
        self.folder = work_dir / "stages"

    def path(self, stage: str) -> Path:
        return self.folder / f"{stage}.json"

    def done(self, stage: str, settings: dict, fields: tuple[str, ...]) -> dict | None:
        """The stage's record when it has run with these settings (it must hold `fields`); None when it has not
        run."""
        path = self.path(stage)
        if not path.exists():
            return None
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ValueError(f"{path}: not a stage file ({error}); remove it to run the stage again") from None
        saved = record.get("settings") if isinstance(record, dict) else None
        if not isinstance(saved, dict):
            raise ValueError(f"{path}: not a stage file (no settings); remove it to run the stage again")
        if saved != settings:
            changed = "; ".join(f"{key}: {saved.get(key)} there, {settings.get(key)} now"
                                for key in sorted(set(saved) | set(settings)) if saved.get(key) != settings.get(key))
            raise ValueError(f"{path} was measured with other settings ({changed}); use another --work-dir or remove "
                             "the file")
        missing = [field for field in fields if field not in record]
        if missing:
            raise ValueError(f"{path}: not a stage file (no {', '.join(missing)}); remove it to run the stage again")
        return record

    def save(self, stage: str, settings: dict, result: dict) -> dict:
        record = {"settings": settings, **result}
        atomic_write_text(self.path(stage), json.dumps(record, indent=1) + "\n")
        return record


def run_logged(command: list[str], log_file: Path) -> float:
    """Run a command with its output in log_file; its wall seconds. A failure is one line naming the log."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "w", encoding="utf-8") as log:
        log.write("+ " + shlex.join(command) + "\n")
        log.flush()
        began = time.perf_counter()
        status = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT).returncode
        seconds = time.perf_counter() - began
    if status != 0:
        lines = [line for line in log_file.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
        raise ValueError(f"{Path(command[1]).name} failed with status {status}: {lines[-1] if lines else ''} "
                         f"(log: {log_file})")
    return seconds


def ours_command(plan: Plan, task: str, data: TaskData, seed: int, run_dir: Path) -> list[str]:
    """run_glue.py with the preset mrpc_cpu_minilm's flags (scripts/run_glue.sh's translation of them) on the task."""
    lower = "--do-lower-case" if model_lowercases(plan.model_dir) else "--no-do-lower-case"
    return [sys.executable, str(ROOT / "run_glue.py"), "--task-name", task, "--train-file", str(data.train_file),
            "--predict-file", str(data.dev_file), "--do-train", "--do-eval", "--vocab-file",
            str(plan.model_dir / "vocab.txt"), lower, "--bert-model", "custom", "--config-file",
            str(plan.model_dir / "config.json"), "--from-pretrained-params", str(plan.model_dir), "--output-dir",
            str(run_dir), "--max-seq-length", str(RECIPE["max_seq_length"]), "--train-batch-size",
            str(RECIPE["train_batch_size"]), "--predict-batch-size", str(RECIPE["train_batch_size"]),
            "--optimizer", "AdamW", "--learning-rate", str(plan.learning_rate), "--warmup-proportion",
            str(RECIPE["warmup_proportion"]), "--weight-decay", str(RECIPE["weight_decay"]), "--epochs",
            str(plan.epochs), "--seed", str(seed), *OURS_OPTIONS]


def ours_result(report_file: Path, metric_names: tuple[str, ...]) -> dict:
    """The metrics, training seconds, updates and newly initialised tensors of a run_glue.py report."""
    result = {"metrics": {}}
    for record in read_report(report_file):
        data = record.get("data", {})
        if record["type"] != LOG:
            continue
        if record["step"] == "PARAMETER":
            if "steps" in data:
                result["steps"] = data["steps"]
            if "newly_initialized" in data:
                result["newly_initialized"] = sorted(data["newly_initialized"])
        result["metrics"].update({name: data[name] for name in metric_names if name in data})
        if "e2e_train_time" in data:
            result["train_seconds"] = data["e2e_train_time"]
    missing = [name for name in ("train_seconds", "steps") if name not in result]
    missing += [name for name in metric_names if name not in result["metrics"]]
    if missing:
        raise ValueError(f"{report_file}: no {', '.join(missing)} in the report")
    return result


def peer_command(plan: Plan, task: str, data: TaskData, seed: int | None, run_dir: Path, contender: str) -> list[str]:
    """glue_hf_peer.py with the recipe; seed None: --check-tokenizer."""
    lower = "--do-lower-case" if model_lowercases(plan.model_dir) else "--no-do-lower-case"
    command = [plan.pythons[contender], str(ROOT / "benchmarks" / "glue_hf_peer.py"), "--model-dir",
               str(plan.model_dir), "--task", task, "--train-file", str(data.train_file), "--dev-file",
               str(data.dev_file), "--output-dir", str(run_dir), lower, "--max-seq-length",
               str(RECIPE["max_seq_length"])]
    if seed is None:
        return [*command, "--check-tokenizer"]
    command += ["--epochs", str(plan.epochs), "--learning-rate", str(plan.learning_rate), "--warmup-proportion",
                str(RECIPE["warmup_proportion"]), "--weight-decay", str(RECIPE["weight_decay"]),
                "--train-batch-size", str(RECIPE["train_batch_size"]), "--predict-batch-size",
                str(RECIPE["train_batch_size"]), "--seed", str(seed)]
    return [*command, "--bf16"] if contender == "transformers-bf16" else command


def peer_result(run_dir: Path, fields: tuple[str, ...]) -> dict:
    """The result file the peer wrote in run_dir, which must hold `fields`."""
    path = run_dir / glue_hf_peer.RESULT_FILE
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ValueError(f"{path}: the peer's result is unreadable ({error})") from None
    missing = [field for field in fields if not isinstance(result, dict) or field not in result]
    if missing:
        raise ValueError(f"{path}: the peer's result has no {', '.join(missing)}")
    return result


def run_contender(plan: Plan, task: str, data: TaskData, contender: str, seed: int, run_dir: Path) -> dict:
    """One fine-tuning of a contender in a fresh run_dir: its result with the process's wall seconds."""
    shutil.rmtree(run_dir, ignore_errors=True)  # what a killed attempt left
    log_file = run_dir.with_name(run_dir.name + ".log")
    if contender == "ours":
        seconds = run_logged(ours_command(plan, task, data, seed, run_dir), log_file)
        result = ours_result(run_dir / "report.json", GLUE_TASKS[task].metrics)
    else:
        seconds = run_logged(peer_command(plan, task, data, seed, run_dir, contender), log_file)
        result = peer_result(run_dir, ("metrics", "train_seconds"))
    return {**result, "process_seconds": seconds}


def check_tokenizer(plan: Plan, task: str, data: TaskData, run_dir: Path) -> dict:
    """transformers' tokenizer against ours on the task's files (glue_hf_peer.py --check-tokenizer)."""
    shutil.rmtree(run_dir, ignore_errors=True)
    contender = next(name for name in plan.contenders if name in PEER_OF)
    run_logged(peer_command(plan, task, data, None, run_dir, contender), run_dir.with_name(run_dir.name + ".log"))
    return peer_result(run_dir, TOKENIZER_FIELDS)


# ---------------------------------------------------------------------------------------------------------------
# The summary
# ---------------------------------------------------------------------------------------------------------------


def glue_score(task: str, metrics: dict) -> float:
    """The task's GLUE score x 100: the mean of its score metrics (MRPC: accuracy and F1)."""
    return 100.0 * statistics.fmean(metrics[name] for name in TASKS[task].score)


def median_and_spread(values: list[float]) -> tuple[float, float]:
    """(median, max - min) of a contender's values over the seeds."""
    return statistics.median(values), max(values) - min(values)


@dataclasses.dataclass(frozen=True)
class Summary:
    """One task's figures of one contender over its seeds."""

    score: float  # median GLUE score
    spread: float  # max - min of the GLUE score
    metrics: dict[str, float]  # median of each metric, x 100
    train_seconds: float  # medians
    process_seconds: float


def summarize(task: str, records: list[dict]) -> Summary:
    """A contender's figures on a task from its stage records, one per seed."""
    score, spread = median_and_spread([glue_score(task, record["metrics"]) for record in records])
    metrics = {name: 100.0 * statistics.median(record["metrics"][name] for record in records)
               for name in GLUE_TASKS[task].metrics if all(name in record["metrics"] for record in records)}
    return Summary(score, spread, metrics, statistics.median(record["train_seconds"] for record in records),
                   statistics.median(record["process_seconds"] for record in records))


def comparison_line(ours: Summary, peer: Summary, name: str) -> str:
    """Ours against a peer: the score difference next to the larger spread, and the time ratios ours / peer."""
    difference = ours.score - peer.score
    allowed = max(ours.spread, peer.spread)
    verdict = "within" if abs(difference) <= allowed else f"outside by {abs(difference) - allowed:.2f}"
    ratio = ours.train_seconds / peer.train_seconds
    line = (f"ours vs {name}: score {difference:+.2f} ({verdict} the larger spread {allowed:.2f}); training time "
            f"ours/{name} {ratio:.2f}")
    if name == "transformers":
        line += f" (target <= {SPEED_TARGET}: {'met' if ratio <= SPEED_TARGET else 'missed'})"
    return line + f"; process time ours/{name} {ours.process_seconds / peer.process_seconds:.2f}"


def task_report(task: str, data: TaskData, summaries: dict[str, Summary], seeds: int) -> list[str]:
    """A task's lines of the report: its data, each contender's figures, ours against each peer."""
    lines = [f"{task}: train {data.train_examples} of {data.train_total} examples, dev all {data.dev_examples}; "
             f"{seeds} seed(s); GLUE score = mean of {' and '.join(TASKS[task].score)}, x 100; spread = max - min"]
    for name, summary in summaries.items():
        metrics = " ".join(f"{metric} {value:.2f}" for metric, value in summary.metrics.items())
        lines.append(f"  {name:<18} score {summary.score:6.2f} spread {summary.spread:5.2f} ({metrics}); training "
                     f"{summary.train_seconds:7.1f} s, process {summary.process_seconds:7.1f} s (medians)")
    for name in ("transformers", "transformers-bf16"):
        if "ours" in summaries and name in summaries:
            lines.append("  " + comparison_line(summaries["ours"], summaries[name], name))
    return lines


def totals_report(records: dict[str, list[dict]]) -> list[str]:
    """Every contender's training and process seconds summed over all its runs, and ours / each peer."""
    totals = {name: (sum(r["train_seconds"] for r in runs), sum(r["process_seconds"] for r in runs))
              for name, runs in records.items() if runs}
    lines = ["all tasks: " + "; ".join(f"{name} training {train:.0f} s, process {process:.0f} s"
                                       for name, (train, process) in totals.items())]
    for name in ("transformers", "transformers-bf16"):
        if "ours" in totals and name in totals:
            lines.append(f"all tasks: training time ours/{name} {totals['ours'][0] / totals[name][0]:.2f}, process "
                         f"time ours/{name} {totals['ours'][1] / totals[name][1]:.2f}")
    return lines


def recipe_report(records: dict[str, list[dict]], tokenizer_checks: dict[str, dict]) -> list[str]:
    """What differs between the contenders' starts: the newly initialised tensors, the decay mask's size, the
    tokenizations."""
    lines = []
    for name, runs in records.items():
        fresh = sorted({tensor for run in runs for tensor in run.get("newly_initialized", [])})
        line = f"{name}: newly initialised {', '.join(fresh) or 'none'}"
        decayed = {(run["decayed_tensors"], run["undecayed_tensors"]) for run in runs if "decayed_tensors" in run}
        if decayed:
            line += "; weight decay on " + ", ".join(f"{d} tensors, not on {u}" for d, u in sorted(decayed))
        engines = sorted({run["engine"] for run in runs if "engine" in run})
        if name == "ours":
            engines.append("run_glue.py " + " ".join(OURS_OPTIONS))
        lines.append(line + (f"; {', '.join(engines)}" if engines else ""))
    for task, check in tokenizer_checks.items():
        lines.append(f"{task}: transformers' tokenizer gives other ids than ours on {check['tokenized_differently']} "
                     f"of {check['examples']} train and dev examples"
                     + (f" (first: {check['first_difference']})" if check["first_difference"] else ""))
    return lines


# ---------------------------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------------------------


class Report(io.TextIOBase):
    """Standard output while the benchmark runs, kept as well: the report files hold what it printed, from the
    machine line on (the runs' own output goes to their logs)."""

    def __init__(self, terminal: io.TextIOBase):
        super().__init__()
        self.terminal = terminal
        self.kept = io.StringIO()

    def write(self, text: str) -> int:
        self.kept.write(text)
        return self.terminal.write(text)

    def flush(self) -> None:
        self.terminal.flush()

    def text(self) -> str:
        return self.kept.getvalue()


def write_new_file(path: Path, text: str) -> None:
    """text as a new file at path, atomically (a temporary file linked into place, so that no reader sees half of
    it); ValueError when path exists, which stays as it is."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = temp_beside(path)
    try:
        write_synced(temp, text_writer(text))
        os.link(temp, path)  # unlike a rename, refuses an existing target
    except FileExistsError:
        raise ValueError(f"--output {path}: appeared during the run; not replaced") from None
    finally:
        temp.unlink(missing_ok=True)
    fsync_dir(path.parent)


def stage_settings(plan: Plan, task: str, data: TaskData, contender: str | None, seed: int | None,
                   cpu: str) -> dict:
    """What a stage's result depends on; contender and seed None: the tokenizer check."""
    settings = {"task": task, "train_sha256": data.train_sha256, "dev_sha256": data.dev_sha256,
                "train_examples": data.train_examples, "model": str(plan.model_dir),
                "do_lower_case": model_lowercases(plan.model_dir), "max_seq_length": RECIPE["max_seq_length"]}
    if contender is None:
        return settings
    options = {"options": list(OURS_OPTIONS)} if contender == "ours" else {}
    return {**settings, "contender": contender, "seed": seed, "epochs": plan.epochs,
            "learning_rate": plan.learning_rate, **RECIPE, "cpu": cpu, **options}


def run(plan: Plan) -> None:
    """Every stage of the plan not yet done, in order, then the summary."""
    check_model_dir(plan.model_dir)
    stages = Stages(plan.work_dir)
    model, _ = machine.cpu_model_and_cores()
    cpu = f"{model}; flags: {' '.join(machine.kernel_flags())}"
    print(f"model {plan.model_dir}; {plan.epochs} epoch(s) at peak learning rate {plan.learning_rate:g}; batch "
          f"{RECIPE['train_batch_size']}, max length {RECIPE['max_seq_length']}, warmup {RECIPE['warmup_proportion']}, "
          f"weight decay {RECIPE['weight_decay']}; seeds {','.join(map(str, plan.seeds))}; contenders "
          f"{','.join(plan.contenders)}", flush=True)
    records = {name: [] for name in plan.contenders}
    tokenizer_checks = {}
    for task in plan.tasks:
        data = prepare_task(plan, task)
        if any(name in PEER_OF for name in plan.contenders):
            stage = f"{task}--tokenizer"
            settings = stage_settings(plan, task, data, None, None, cpu)
            tokenizer_checks[task] = stages.done(stage, settings, TOKENIZER_FIELDS) or stages.save(
                stage, settings, check_tokenizer(plan, task, data, plan.work_dir / "runs" / stage))
        task_records = {name: [] for name in plan.contenders}
        for seed in plan.seeds:
            for contender in plan.contenders:  # in turn within a seed: a drift of the machine touches each alike
                stage = f"{task}--{contender}--seed{seed}"
                settings = stage_settings(plan, task, data, contender, seed, cpu)
                record, how = stages.done(stage, settings, RUN_FIELDS), "done before"
                if record is None:
                    record, how = stages.save(stage, settings, run_contender(
                        plan, task, data, contender, seed, plan.work_dir / "runs" / stage)), "ran"
                task_records[contender].append(record)
                metrics = " ".join(f"{name} {value:.4f}" for name, value in record["metrics"].items())
                print(f"{stage}: {metrics}; training {record['train_seconds']:.1f} s, process "
                      f"{record['process_seconds']:.1f} s ({how}: {stages.path(stage)})", flush=True)
        summaries = {name: summarize(task, runs) for name, runs in task_records.items()}
        for name, runs in task_records.items():
            records[name].extend(runs)
        print("\n".join(task_report(task, data, summaries, len(plan.seeds))), flush=True)
    print("\n".join([*totals_report(records), *recipe_report(records, tokenizer_checks)]), flush=True)


def main(argv: list[str] | None = None) -> None:
    report = Report(sys.stdout)
    with contextlib.redirect_stdout(report):
        machine.print_header()
        plan = parse_plan(argv)
        run(plan)
    atomic_write_text(plan.work_dir / "report.txt", report.text())
    if plan.output is not None:
        write_new_file(plan.output, report.text())
        print(f"report: {plan.output}", flush=True)


if __name__ == "__main__":
    sys.exit(run_main(main, SCRIPT))
