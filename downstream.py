"""Score a checkpoint downstream: fine-tune SST-2, MRPC, RTE, CoLA and SQuAD v1.1 from it (and STS-B, QNLI and MNLI
when --tasks names them) with fixed hyperparameters and several seeds, and report each task's median and spread
beside its baseline on the official dev set: the majority class (SQuAD: the empty answer; STS-B: the training set's
mean score for every pair, whose correlations, undefined for a constant, are reported as 0).

    python downstream.py results/bert-mini/custom/phase1/1200 --output-dir results/downstream/mini-1200
    python downstream.py NGC_PREFIX --config-file bert_configs/bert-large-uncased.json --output-dir ...
    python downstream.py ../shared/models/all-MiniLM-L6-v2 --output-dir ...          # a Hugging Face folder
    python downstream.py --random-init --config-file bert_configs/bert-mini-uncased.json --output-dir ...
    python downstream.py CHECKPOINT --quick --output-dir ...          # smoke test: seconds on bert-tiny
    python downstream.py CHECKPOINT --tasks sts-b,qnli,mnli --data-dir DIR --output-dir ...  # DIR/glue/{STS-B,...}

The checkpoint is anything run_glue.py's --from-pretrained-params loads: a step folder of run_pretraining.py, a
.pdparams or .safetensors file, an NGC paddle.static.save prefix or a Hugging Face BERT folder (the last two
converted in memory). --random-init fine-tunes a random initialisation of --config-file instead, and every output
says so.

Each (task, seed) is one unit: run_glue.main or run_squad.main in <output-dir>/units/<task>-seed<s>/ (its log.txt,
report.json and predictions; the fine-tuned weights are deleted, nothing reads them), --jobs at a time in as many
processes that share the CPUs (with fewer threads each, which small models use better), or with --jobs 1 one after
another in this process. The worker processes die with this one, however it ends. A unit's result.json is written
last and checked when read back; a rerun skips every unit that has one, so a killed run resumes where it stopped.
The fixed plan (PLAN, HYPERPARAMETERS) is the same for every checkpoint; nothing is chosen on the dev sets.
--learning-rate replaces the plan's peak rate, to compare rates across checkpoints.

Every unit starts from the checkpoint's embeddings, encoder and pooler, and a fresh task head: the head of a
fine-tuned checkpoint (classifier, qa_outputs) is left out, as downstream.json says (task_heads_not_loaded); the units
then load a copy of the weights without it, <output-dir>/encoder_only.pdparams, deleted when they are done.

The default --tasks are those whose data ../shared holds; STS-B, QNLI and MNLI (GLUE's STS-B/, QNLI/ and MNLI/ under
<data-dir>/glue, as GLUE ships them) run when named, and a named task whose folder is missing is refused before
anything runs. MNLI is scored on its matched and its mismatched dev set, in one run.

The summary covers every task with runs in the output folder: a rerun with fewer --tasks keeps the others' results
in it, and is refused if one of their runs is unfinished (the summary would leave that task out).

Provenance: every run reports how many embedding and encoder tensors it loaded and the fingerprint of the weights it
starts from (finetune.build_model, weights.encoder_fingerprint). A unit is accepted only if it loaded all of them
and its fingerprint is the one computed here from the checkpoint's file (with --random-init: if it loaded none);
otherwise the run stops with one line, so a score can never come from weights other than the named ones.

Outputs, written atomically in --output-dir: downstream.json (the checkpoint with the sha256 of its weights file,
its fingerprint and the task-head tensors its units left out; per task every seed's scores and start, the median,
the spread (max - min over the seeds), the baseline's score (key "majority", for SQuAD the empty answer's; STS-B's
key "mean", with the training mean under "baseline"), the hyperparameters, the data files and subsets (their sizes:
what ran), and its runs' wall and CPU seconds added up; the wall seconds of this invocation) and downstream.md (a
table header, naming each baseline, and one row). Scores are percentages: accuracy (MNLI: matched and mismatched),
F1 of MRPC's positive class, Matthews correlation x 100 (CoLA), Pearson and Spearman correlation x 100 (STS-B), SQuAD
exact match and F1 by the official v1.1 rules.
"""

from __future__ import annotations

from training import runtime  # noqa: F401  # isort: skip  (first: it imports Paddle without its import-time warnings)
import argparse
import dataclasses
import json
import math
import multiprocessing
import os
import re
import shutil
import signal
import statistics
import sys
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection, wait
from pathlib import Path

import numpy as np
import paddle

import run_glue
import run_squad
from bert_config import BertConfig
from checkpoints.checkpoint import CONFIG_SUFFIX, DEFAULT_PREFIX, PARAMS_SUFFIX
from checkpoints.hf_names import HF_VOCAB_FILE
from checkpoints.weights import (
    HUGGING_FACE,
    config_beside,
    encoder_fingerprint,
    model_config_file,
    part_of,
    read_pretrained_state,
    resolve_weights_file,
    vocab_beside,
)
from finetuning.downstream_plan import ALL_TASKS, PLAN, TASKS, TaskPlan, hyperparameters
from finetuning.glue_data import GLUE_TASKS, read_glue_examples
from finetuning.glue_metrics import compute_metrics, compute_regression_metrics
from squad_evaluate import evaluate, load_dataset, load_squad_json
from tokenizer import load_vocab
from utils import folder_lock
from utils.atomic_io import atomic_write, atomic_write_text
from utils.checksums import sha256_of_file
from utils.child_processes import end_with_parent
from utils.cli import DefaultsHelpFormatter, output_to, positive_float, positive_int, run_main
from utils.dllog import read_report

ROOT = Path(__file__).resolve().parent
GLUE_FOLDERS = {"sst-2": "SST-2", "mrpc": "MRPC", "rte": "RTE", "cola": "CoLA", "sts-b": "STS-B", "qnli": "QNLI",
                "mnli": "MNLI"}
# The dev files of a GLUE task, as GLUE names them: MNLI's matched set, then its mismatched one.
DEV_FILES = {"mnli": ("dev_matched.tsv", "dev_mismatched.tsv")}
# The scores each task reports, named as in its run's report (MNLI's mismatched set's end in _mm).
SCORES = {"sst-2": ("accuracy",), "mrpc": ("accuracy", "f1"), "rte": ("accuracy",), "cola": ("mcc",),
          "sts-b": ("pearson", "spearman"), "qnli": ("accuracy",), "mnli": ("accuracy", "accuracy_mm"),
          "squad": ("exact_match", "F1")}
LABELS = {"accuracy": "acc", "accuracy_mm": "acc mm", "f1": "F1", "mcc": "MCC", "pearson": "Pearson",
          "spearman": "Spearman", "exact_match": "EM", "F1": "F1"}
# The baseline of a task, by its name in downstream.json's scores (a task not named here: the majority class).
BASELINE_KINDS = {"sts-b": "mean", "squad": "empty"}
SQUAD_FOLDER = Path("squad") / "v1.1"
SQUAD_DEV = "dev-v1.1.json"
# The official training file first; ../shared holds a rebuilt copy under the second name (its README says how).
SQUAD_TRAIN = ("train-v1.1.json", "train-v1.1-rebuilt.json")
# Subsets are drawn once with this seed, whatever the run's seeds: every checkpoint trains on the same examples.
SUBSET_SEED = 0
# The parts of a fine-tuned checkpoint that belong to its task (checkpoints.weights.PARTS): every unit starts them
# afresh, so that a score measures the encoder, as it does for a pretraining checkpoint.
TASK_HEADS = ("qa", "classifier")
# The checkpoint's weights without its task heads, which the units load when it has any.
ENCODER_ONLY_FILE = "encoder_only" + PARAMS_SUFFIX
UNIT_FOLDER = re.compile(r"(?P<task>.+)-seed\d+")


@dataclasses.dataclass(frozen=True)
class Start:
    """The weights every unit must start from: a checkpoint's embeddings and encoder (their fingerprint), or a
    random initialisation (fingerprint None)."""

    description: dict  # what downstream.json says about it
    identity: str  # the weights file's sha256, or the random init's config's: what the units' results belong to
    weights_flags: tuple[str, ...]  # run_glue.py's and run_squad.py's options that load it
    config_file: str
    vocab_file: str
    fingerprint: str | None


@dataclasses.dataclass(frozen=True)
class TaskData:
    """The files a task trains and is scored on, and how many examples (or questions) each holds."""

    train_file: str
    dev_file: str
    train_size: int
    dev_size: int
    dev_mismatched_file: str | None = None  # MNLI's second dev set
    dev_mismatched_size: int | None = None


@dataclasses.dataclass(frozen=True)
class Baseline:
    """A task's baseline: its kind ("majority": the majority class of each dev set; "empty": SQuAD's empty answer;
    "mean": the training set's mean score for every dev pair), its scores (percent) and what else defines it."""

    kind: str
    scores: dict[str, float]
    details: dict = dataclasses.field(default_factory=dict)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "),
                                     formatter_class=DefaultsHelpFormatter)
    parser.add_argument("checkpoint", nargs="?",
                        help="the weights: a step folder or .pdparams/.safetensors file of this project (with the "
                             "config beside it), an NGC prefix (with --config-file) or a Hugging Face BERT folder")
    parser.add_argument("--random-init", action="store_true",
                        help="no checkpoint: fine-tune a random initialisation of --config-file (the 0-minute row)")
    parser.add_argument("--config-file",
                        help="BERT config JSON: needed for --random-init and for weights without a config beside "
                             "them (NGC); otherwise it must build the network of the config beside them")
    parser.add_argument("--vocab-file",
                        help="the checkpoint's WordPiece vocabulary; default: the one it carries (a step "
                             "folder's <prefix>_vocab.txt, a Hugging Face folder's vocab.txt), else "
                             "vocab/bert-base-uncased-vocab.txt")
    parser.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"),
                        help="holds glue/<Task>/{train,dev}.tsv for SST-2, MRPC, RTE and CoLA (and STS-B and "
                             "QNLI; MNLI's dev_matched.tsv and dev_mismatched.tsv), and "
                             f"{SQUAD_FOLDER}/{SQUAD_DEV} with {' or '.join(SQUAD_TRAIN)}")
    parser.add_argument("--output-dir", required=True,
                        help="where the units, downstream.json and downstream.md go; a rerun skips finished units")
    parser.add_argument("--tasks", type=task_list, default=",".join(TASKS),
                        help=f"the tasks to run, comma-separated, of {', '.join(ALL_TASKS)}; the default's data is "
                             "in ../shared, the others' must be in --data-dir")
    parser.add_argument("--jobs", type=positive_int, default=2,
                        help="fine-tuning runs at a time, each in a process of its own with 1/jobs of the CPUs' "
                             "threads; 1: one after another in this process")
    parser.add_argument("--learning-rate", type=positive_float, default=None,
                        help="peak fine-tuning learning rate of every task instead of the plan's (downstream_plan."
                             "HYPERPARAMETERS), to compare rates; downstream.json records the one used")
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: 64 training and 64 dev examples (questions) per task, one seed")
    return parser


def task_list(text: str) -> tuple[str, ...]:
    """argparse type of --tasks: known task names, each once, in ALL_TASKS order."""
    names = [name.strip().lower() for name in text.split(",") if name.strip()]
    unknown = sorted(set(names) - set(ALL_TASKS))
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of {', '.join(ALL_TASKS)}, got {text!r}")
    return tuple(task for task in ALL_TASKS if task in names)


# ---------------------------------------------------------------------------------------------
# The weights the runs start from
# ---------------------------------------------------------------------------------------------


def random_start(config_file: str | None, vocab_file: str | None) -> Start:
    if config_file is None:
        raise ValueError("--random-init needs --config-file, the network to initialise")
    if not Path(config_file).is_file():
        raise FileNotFoundError(f"--config-file {config_file}: file not found")
    description = {"kind": "random init", "config_file": config_file, "config_sha256": sha256_of_file(config_file)}
    return Start(description, "random:" + description["config_sha256"], (), config_file,
                 vocab_file or str(ROOT / "vocab" / "bert-base-uncased-vocab.txt"), None)


def checkpoint_start(checkpoint: str, config_file: str | None, vocab_file: str | None) -> Start:
    """The checkpoint's weights file (a Hugging Face folder's or an NGC file is converted in memory, by this
    command and by the fine-tuning scripts alike), its config and the fingerprint of its embeddings and encoder."""
    weights_file = resolve_weights_file(checkpoint, DEFAULT_PREFIX, "checkpoint")
    if config_file is None and not config_beside(weights_file).is_file():
        raise ValueError(f"{weights_file}: no {config_beside(weights_file).name} beside it (an NGC file?); "
                         "give its --config-file")
    config_file = model_config_file("custom", config_file, str(weights_file), flag="checkpoint",
                                    model_prefix=DEFAULT_PREFIX)
    config = BertConfig.from_json_file(config_file)
    state, converted_from = read_pretrained_state(weights_file, "checkpoint")
    tensors, fingerprint = encoder_fingerprint(state, config.vocab_size)
    heads = sorted(name for name in state if part_of(name) in TASK_HEADS)
    kind = {None: "paddlebert", HUGGING_FACE: "hugging face"}.get(converted_from, "nvidia static graph")
    if vocab_file is None:  # the vocabulary the checkpoint carries; a Hugging Face folder must carry one
        beside = vocab_beside(weights_file)
        if beside is not None:
            vocab_file = str(beside)
        elif converted_from == HUGGING_FACE:
            vocab_file = str(weights_file.parent / HF_VOCAB_FILE)  # missing: check_vocabulary names it
    description = {"kind": kind, "checkpoint": checkpoint, "weights_file": str(weights_file),
                   "weights_sha256": sha256_of_file(weights_file), "config_file": config_file,
                   "encoder_tensors": tensors, "encoder_fingerprint": fingerprint, "task_heads_not_loaded": heads}
    return Start(description, description["weights_sha256"], ("--from-pretrained-params", str(weights_file)),
                 config_file, vocab_file or str(ROOT / "vocab" / "bert-base-uncased-vocab.txt"), fingerprint)


def encoder_only_start(start: Start, output_dir: Path) -> Start:
    """start, its units loading <output_dir>/ENCODER_ONLY_FILE: the checkpoint's weights without its task heads
    (the fine-tuning scripts load every part a file has). The weights it names, and their identity, stay the
    checkpoint's."""
    state, _ = read_pretrained_state(start.description["weights_file"], "checkpoint")
    kept = {name: value for name, value in state.items() if part_of(name) not in TASK_HEADS}
    copy = atomic_write(output_dir / ENCODER_ONLY_FILE, lambda temp: paddle.save(kept, temp))
    return dataclasses.replace(start, weights_flags=("--from-pretrained-params", str(copy)))


def check_vocabulary(start: Start) -> None:
    """A vocabulary larger than the config's would look tokens up past the end of the embedding table."""
    if not Path(start.vocab_file).is_file():
        raise FileNotFoundError(f"--vocab-file {start.vocab_file}: file not found")
    entries, rows = len(load_vocab(start.vocab_file)), BertConfig.from_json_file(start.config_file).vocab_size
    if entries > rows:
        raise ValueError(f"--vocab-file {start.vocab_file} has {entries} entries, but {start.config_file} has "
                         f"vocab_size {rows}: give the vocabulary the checkpoint was pretrained with")


def check_start(reported: dict, start: Start, unit: str) -> None:
    """ValueError naming the unit unless its run started from `start`'s weights (reported: its report's
    init_encoder_* values)."""
    loaded, tensors = reported["init_encoder_tensors_loaded"], reported["init_encoder_tensors"]
    if start.fingerprint is None:
        if loaded:
            raise ValueError(f"{unit}: {loaded} embedding and encoder tensors were loaded into a random-init run")
        return
    if loaded != tensors or reported["init_encoder_fingerprint"] != start.fingerprint:
        raise ValueError(f"{unit}: fine-tuning did not start from {start.description['weights_file']}: "
                         f"{loaded} of {tensors} embedding and encoder tensors loaded, fingerprint "
                         f"{reported['init_encoder_fingerprint'][:12]} instead of {start.fingerprint[:12]}")


# ---------------------------------------------------------------------------------------------
# Data: the files, their fixed subsets and their majority baselines
# ---------------------------------------------------------------------------------------------


def sample_indices(count: int, size: int) -> list[int]:
    """`size` of range(count), drawn without replacement with SUBSET_SEED, in order."""
    return sorted(np.random.default_rng(SUBSET_SEED).choice(count, size, replace=False).tolist())


def glue_subset(task: str, source: Path, target: Path, size: int | None) -> tuple[str, int]:
    """(file, rows): the GLUE file itself, or `size` of its data rows written to target byte for byte, the header
    line (and MRPC's byte-order mark) first."""
    lines = source.read_bytes().splitlines(keepends=True)
    header, rows = (lines[:1], lines[1:]) if GLUE_TASKS[task].header is not None else ([], lines)
    if size is None or size >= len(rows):
        return str(source), len(rows)
    chosen = [rows[index] for index in sample_indices(len(rows), size)]
    atomic_write_text(target, b"".join(header + chosen).decode("utf-8"))
    return str(target), size


def squad_subset(source: Path, target: Path, size: int | None) -> tuple[str, int]:
    """(file, questions): the SQuAD file itself, or `size` of its questions written to target, each in its
    article and paragraph."""
    content = load_squad_json(str(source))
    questions = [qa["id"] for article in content["data"] for paragraph in article["paragraphs"]
                 for qa in paragraph["qas"]]
    if size is None or size >= len(questions):
        return str(source), len(questions)
    chosen = {questions[index] for index in sample_indices(len(questions), size)}
    articles = []
    for article in content["data"]:
        paragraphs = [dict(paragraph, qas=[qa for qa in paragraph["qas"] if qa["id"] in chosen])
                      for paragraph in article["paragraphs"]]
        paragraphs = [paragraph for paragraph in paragraphs if paragraph["qas"]]
        if paragraphs:
            articles.append(dict(article, paragraphs=paragraphs))
    atomic_write_text(target, json.dumps({"version": content.get("version"), "data": articles}))
    return str(target), size


def subset_file(task: str, source: Path, target: Path, size: int | None) -> tuple[str, int]:
    """(file, examples or questions) of the task's subset of source (squad_subset or glue_subset)."""
    if task == "squad":
        return squad_subset(source, target, size)
    return glue_subset(task, source, target, size)


def task_data(task: str, plan: TaskPlan, data_dir: Path, output_dir: Path) -> TaskData:
    """The task's training and dev files (subsets written under <output_dir>/data); FileNotFoundError names a
    missing one."""
    mismatched = None
    if task == "squad":
        folder = data_dir / SQUAD_FOLDER
        train = next((folder / name for name in SQUAD_TRAIN if (folder / name).is_file()), folder / SQUAD_TRAIN[0])
        dev = folder / SQUAD_DEV
    else:
        folder = data_dir / "glue" / GLUE_FOLDERS[task]
        dev_names = DEV_FILES.get(task, ("dev.tsv",))
        train, dev = folder / "train.tsv", folder / dev_names[0]
        if len(dev_names) > 1:  # MNLI's mismatched set
            mismatched = folder / dev_names[1]
    for path in (train, dev, mismatched):
        if path is not None and not path.is_file():
            raise FileNotFoundError(f"--data-dir {data_dir}: {path} not found")
    subsets = output_dir / "data"
    train_file, train_size = subset_file(task, train, subsets / f"{task}-train{train.suffix}", plan.train_subset)
    dev_file, dev_size = subset_file(task, dev, subsets / f"{task}-dev{dev.suffix}", plan.dev_subset)
    if mismatched is None:
        return TaskData(train_file, dev_file, train_size, dev_size)
    return TaskData(train_file, dev_file, train_size, dev_size,
                    *subset_file(task, mismatched, subsets / f"{task}-dev_mismatched.tsv", plan.dev_subset))


def check_task_folders(tasks: Sequence[str], data_dir: Path) -> None:
    """FileNotFoundError naming the folder of the first GLUE task of `tasks` that --data-dir lacks: checked before
    anything runs, as the tasks outside the default --tasks have no data in ../shared."""
    for task in tasks:
        if task in GLUE_FOLDERS and not (data_dir / "glue" / GLUE_FOLDERS[task]).is_dir():
            raise FileNotFoundError(f"--tasks {task}: {data_dir / 'glue' / GLUE_FOLDERS[task]} not found (GLUE's "
                                    f"{GLUE_FOLDERS[task]} folder under --data-dir {data_dir}/glue)")


def majority_scores(task: str, dev_file: str) -> dict[str, float]:
    """The task's scores (percent) of always answering the dev set's most common label (ties: the first of the
    task's labels), or for SQuAD the empty answer."""
    if task == "squad":
        dataset = load_dataset(dev_file)
        scores = evaluate(dataset, {qa["id"]: "" for article in dataset for paragraph in article["paragraphs"]
                                    for qa in paragraph["qas"]})
        return {"exact_match": scores["exact_match"], "F1": scores["f1"]}
    labels = GLUE_TASKS[task].labels
    label_ids = np.array([labels.index(example.label) for example in read_glue_examples(task, dev_file)])
    majority = np.bincount(label_ids, minlength=len(labels)).argmax()
    always = np.eye(len(labels))[np.full(len(label_ids), majority)]
    names = [name for name in SCORES[task] if not name.endswith("_mm")]  # MNLI's mismatched set: its own file
    return {name: 100 * value for name, value in compute_metrics(names, label_ids, always).items()}


def baseline_of(task: str, data: TaskData) -> Baseline:
    """The task's baseline on its dev set(s): majority_scores (MNLI: the matched set's majority class, and the
    mismatched set's own), or for STS-B the training set's mean score predicted for every dev pair. A constant has
    no correlation with the scores (Pearson's and Spearman's are undefined for it): glue_metrics, as GLUE's
    evaluation would have to, reports it as 0."""
    if task != "sts-b":
        scores = majority_scores(task, data.dev_file)
        if data.dev_mismatched_file is not None:
            scores["accuracy_mm"] = majority_scores(task, data.dev_mismatched_file)["accuracy"]
        return Baseline(BASELINE_KINDS.get(task, "majority"), scores)
    train_mean = statistics.fmean(float(example.label) for example in read_glue_examples(task, data.train_file))
    dev_scores = np.array([float(example.label) for example in read_glue_examples(task, data.dev_file)])
    correlations = compute_regression_metrics(SCORES[task], dev_scores, np.full(len(dev_scores), train_mean))
    return Baseline("mean", {name: 100 * value for name, value in correlations.items()},
                    {"description": "the training set's mean score for every dev pair; its Pearson and Spearman "
                                    "correlations are undefined (a constant), reported as 0",
                     "train_mean_score": train_mean})


# ---------------------------------------------------------------------------------------------
# Units: one fine-tuning run each
# ---------------------------------------------------------------------------------------------


def unit_argv(task: str, seed: int, plan: TaskPlan, data: TaskData, start: Start, folder: Path,
              task_hyperparameters: dict) -> list[str]:
    """The run_glue.py or run_squad.py options of one unit."""
    argv = [] if task == "squad" else ["--task-name", task]
    argv += ["--do-train", "--train-file", data.train_file, "--do-predict", "--do-eval",
             "--predict-file", data.dev_file, "--vocab-file", start.vocab_file, "--bert-model", "custom",
             "--config-file", start.config_file, *start.weights_flags, "--output-dir", str(folder),
             "--seed", str(seed), "--epochs", str(plan.epochs), "--log-freq", "50"]
    if data.dev_mismatched_file is not None:
        argv += ["--mismatched-predict-file", data.dev_mismatched_file]
    for name, value in task_hyperparameters.items():
        argv += [f"--{name.replace('_', '-')}", str(value)]
    return argv


def reported_values(report: Path, names: Sequence[str], step: object) -> dict:
    """The last value of each name in the report's records of `step` ("PARAMETER", or [] for the summary);
    ValueError naming the report if one is missing."""
    values = {}
    for record in read_report(report):
        if record["type"] == "LOG" and record["step"] == step:
            values.update({name: record["data"][name] for name in names if name in record["data"]})
    missing = [name for name in names if name not in values]
    if missing:
        raise ValueError(f"{report}: no {', '.join(missing)} reported")
    return values


@dataclasses.dataclass(frozen=True)
class Unit:
    """One fine-tuning run: a task, a seed, and everything that decides its result (setup: the plan, the
    hyperparameters, the weights and the data files' sha256, as JSON gives them back)."""

    task: str
    seed: int
    plan: TaskPlan
    data: TaskData
    start: Start
    folder: Path
    setup: dict


def make_unit(task: str, seed: int, plan: TaskPlan, data: TaskData, start: Start, output_dir: Path,
              task_hyperparameters: dict) -> Unit:
    """The unit of (task, seed), fine-tuned with the task's hyperparameters."""
    setup = {"plan": dataclasses.asdict(plan), "hyperparameters": task_hyperparameters,
             "start": start.identity, "train_file_sha256": sha256_of_file(data.train_file),
             "dev_file_sha256": sha256_of_file(data.dev_file)}
    if data.dev_mismatched_file is not None:
        setup["dev_mismatched_file_sha256"] = sha256_of_file(data.dev_mismatched_file)
    return Unit(task, seed, plan, data, start, output_dir / "units" / f"{task}-seed{seed}",
                json.loads(json.dumps(setup)))


def result_problem(result: dict, unit: Unit) -> str | None:
    """What makes `result` (a result.json's object) no result of the unit as run_unit writes one, or None."""
    if (result.get("task"), result.get("seed")) != (unit.task, unit.seed):
        return f"the result of {result.get('task')} seed {result.get('seed')}, not of {unit.task} seed {unit.seed}"
    scores = result.get("scores")
    if not isinstance(scores, dict):
        return "no scores"
    numbers = {name: scores.get(name) for name in SCORES[unit.task]}
    numbers.update((name, result.get(name)) for name in ("seconds", "cpu_seconds"))
    for name, value in numbers.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            return f"{name} is {json.dumps(value)}, not a number" if value is not None else f"no {name}"
    if not isinstance(result.get("started_from"), dict):
        return "no started_from"
    return None


def finished_result(unit: Unit) -> dict | None:
    """The result an earlier run wrote for the unit, or None; ValueError naming the file if it belongs to another
    setup, or is damaged (not JSON, or not what run_unit writes)."""
    result_file = unit.folder / "result.json"
    if not result_file.is_file():
        return None
    try:
        result = json.loads(result_file.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ValueError(f"{result_file}: not a result (not UTF-8 text); delete it to run the unit again") from None
    except json.JSONDecodeError as error:  # a torn file
        raise ValueError(f"{result_file}: not a result (not valid JSON: {error.msg} at line {error.lineno}); delete "
                         "it to run the unit again") from None
    if not isinstance(result, dict):
        raise ValueError(f"{result_file}: not a result (a JSON {type(result).__name__}, not an object); delete it to "
                         "run the unit again")
    if result.get("setup") != unit.setup:
        raise ValueError(f"{result_file}: the result of other weights, data or hyperparameters; give another "
                         "--output-dir, or delete the folder to run it again")
    problem = result_problem(result, unit)
    if problem:
        raise ValueError(f"{result_file}: not a result ({problem}); delete it to run the unit again")
    return result


def tasks_in_folder(output_dir: Path) -> set[str]:
    """The tasks with a unit folder in <output_dir>/units, finished or not."""
    units = output_dir / "units"
    if not units.is_dir():
        return set()
    matches = (UNIT_FOLDER.fullmatch(entry.name) for entry in units.iterdir() if entry.is_dir())
    return {match["task"] for match in matches if match and match["task"] in ALL_TASKS}


def check_other_tasks_finished(requested: Sequence[str], units: Sequence[Unit], results: Sequence[dict | None]) -> None:
    """ValueError naming the unit if one of a task the summary covers without running it (its runs are in the
    folder, but --tasks leaves it out) has no result: the summary would leave it out, and lose its other runs'."""
    for unit, result in zip(units, results, strict=True):
        if result is None and unit.task not in requested:
            raise ValueError(f"--tasks {','.join(requested)}: {unit.folder} has no result, and downstream.json sums up "
                             f"every task with runs in the folder; add {unit.task} to --tasks to finish its runs, or "
                             "give another --output-dir")


def run_unit(unit: Unit) -> dict:
    """Fine-tune the unit in a fresh folder (its output in <folder>/log.txt), check that it started from the
    named weights, and write its result: the scores (percent), where it started, its seconds."""
    shutil.rmtree(unit.folder, ignore_errors=True)  # what a killed unit left
    unit.folder.mkdir(parents=True)
    began, cpu_began = time.perf_counter(), time.process_time()
    main = run_squad.main if unit.task == "squad" else run_glue.main
    with output_to(unit.folder / "log.txt", "ab"):
        main(unit_argv(unit.task, unit.seed, unit.plan, unit.data, unit.start, unit.folder,
                       unit.setup["hyperparameters"]))
    # CPU seconds beside wall seconds: on a shared machine the wall time says as much about the other jobs.
    seconds, cpu_seconds = time.perf_counter() - began, time.process_time() - cpu_began
    report = unit.folder / "report.json"
    started = reported_values(report, ("init_encoder_tensors", "init_encoder_tensors_loaded",
                                       "init_encoder_fingerprint"), "PARAMETER")
    check_start(started, unit.start, str(unit.folder))
    if unit.setup["hyperparameters"].get("rescale_embeddings"):
        started.update(reported_values(report, ("embedding_rescale_factor",), "PARAMETER"))
    scale = 1 if unit.task == "squad" else 100  # run_squad.py reports percentages, run_glue.py fractions
    scores = {name: scale * value for name, value in reported_values(report, SCORES[unit.task], []).items()}
    for name in (DEFAULT_PREFIX + PARAMS_SUFFIX, DEFAULT_PREFIX + CONFIG_SUFFIX, "nbest_predictions.json"):
        (unit.folder / name).unlink(missing_ok=True)  # the fine-tuned model and SQuAD's 20 answers per question
    result = {"task": unit.task, "seed": unit.seed, "scores": scores, "seconds": seconds,
              "cpu_seconds": cpu_seconds, "started_from": started, "setup": unit.setup}
    atomic_write_text(unit.folder / "result.json", json.dumps(result, indent=2) + "\n")
    return result


def _worker(connection: Connection, threads: int, parent_pid: int) -> None:
    """A worker process: runs each unit it receives and sends back (True, result) or (False, the error), until it
    receives None; it dies with its parent (parent_pid). Paddle's CPU threads per unit: `threads`
    (runtime.configure_cpu_threads). A SIGTERM (a scheduler's, to the whole process group) ends it without Paddle's
    handler, which would print a page of C++ error summary."""
    end_with_parent(parent_pid)  # else it would finish its unit without the folder's lock, beside a rerun
    os.environ["PADDLEBERT_NUM_THREADS"] = str(threads)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    while (unit := connection.recv()) is not None:
        try:
            connection.send((True, run_unit(unit)))
        except (OSError, ValueError) as error:  # the project's one-line errors (cli.run_main)
            connection.send((False, error))


def _start_workers(count: int, threads: int) -> list[tuple[multiprocessing.Process, Connection]]:
    """`count` worker processes, each with its own pipe: no lock is shared, so stopping one mid-unit blocks no
    other (a multiprocessing.Pool's terminate() can wait forever for the queue lock a worker holds)."""
    context = multiprocessing.get_context("spawn")  # a forked copy would share Paddle's thread pools and state
    # A worker stopped mid-unit leaves tqdm's lock registered with the resource tracker, the process the workers
    # share, which would warn about it at exit; it starts with this process's -W options.
    sys.warnoptions.append("ignore::UserWarning:multiprocessing.resource_tracker")
    # Ctrl-C is this process's to handle (it stops the workers): the workers ignore SIGINT from their start, as an
    # ignored signal stays ignored through exec, so that none prints a traceback of its own.
    handler = signal.signal(signal.SIGINT, signal.SIG_IGN)
    workers = []
    try:
        for _ in range(count):
            connection, worker_end = context.Pipe()
            process = context.Process(target=_worker, args=(worker_end, threads, os.getpid()), daemon=True)
            process.start()
            worker_end.close()
            workers.append((process, connection))
    finally:
        signal.signal(signal.SIGINT, handler)
    return workers


def run_units(units: Sequence[Unit], jobs: int) -> list[dict]:
    """The results of the units, in order: run one after another in this process, or `jobs` at a time in as many
    worker processes, which share the CPUs between them. Each result is printed in one line as it comes; the
    first error stops every unit still running (a rerun runs them again)."""
    results: list = [None] * len(units)

    def report(number: int, result: dict) -> None:
        scores = ", ".join(f"{name} {value:.1f}" for name, value in result["scores"].items())
        print(f"{result['task']} seed {result['seed']}: {scores} ({result['seconds']:.0f} s)", flush=True)
        results[number] = result

    if jobs == 1:
        for number, unit in enumerate(units):
            report(number, run_unit(unit))
        return results
    workers = _start_workers(min(jobs, len(units)), max(1, len(os.sched_getaffinity(0)) // jobs))
    waiting = list(enumerate(units))
    running: dict[Connection, int] = {}
    try:
        for _, connection in workers:
            if waiting:
                number, unit = waiting.pop(0)
                connection.send(unit)
                running[connection] = number
        while running:
            for connection in wait(list(running)):
                number = running.pop(connection)
                try:
                    succeeded, outcome = connection.recv()
                except EOFError:
                    raise ValueError(f"{units[number].folder}: the process running it died; its log.txt may "
                                     "say why") from None
                if not succeeded:
                    raise outcome
                report(number, outcome)
                if waiting:
                    number, unit = waiting.pop(0)
                    connection.send(unit)
                    running[connection] = number
        for process, connection in workers:
            connection.send(None)
            process.join()
    except BaseException:
        # SIGKILL: a worker may still be importing Paddle, whose SIGTERM handler, caught there, once hung the run
        # (the units are run again from the start anyway)
        for process, _ in workers:
            process.kill()
            process.join()
        raise
    return results


# ---------------------------------------------------------------------------------------------
# The summary
# ---------------------------------------------------------------------------------------------


def summarize(values: Sequence[float]) -> dict:
    """The median and the spread (max - min; 0 for one seed) of one score over the seeds."""
    return {"median": statistics.median(values), "spread": max(values) - min(values)}


def task_summary(task: str, plan: TaskPlan, data: TaskData, results: Sequence[dict],
                 task_hyperparameters: dict) -> dict:
    """The task's scores over the seeds beside its baseline's (under the key "majority", or "mean" for STS-B), and
    the hyperparameters its runs had."""
    scores = {}
    baseline = baseline_of(task, data)
    key = "mean" if baseline.kind == "mean" else "majority"  # SQuAD's empty answer keeps the key it always had
    for name in SCORES[task]:
        by_seed = {str(result["seed"]): result["scores"][name] for result in results}
        scores[name] = {"seeds": by_seed, **summarize(list(by_seed.values())), key: baseline.scores[name]}
    return {"scores": scores, **({"baseline": baseline.details} if baseline.details else {}),
            "plan": dataclasses.asdict(plan), "hyperparameters": task_hyperparameters,
            "data": {name: value for name, value in dataclasses.asdict(data).items() if value is not None},
            "seconds": sum(result["seconds"] for result in results),
            "cpu_seconds": sum(result["cpu_seconds"] for result in results),
            "runs": [{name: result[name] for name in ("seed", "scores", "seconds", "cpu_seconds", "started_from")}
                     for result in results]}


def markdown_table(start: Start, tasks: dict, mode: str) -> str:
    """A header naming each score and its majority figure, and the row of this checkpoint: median (min-max)."""
    header, row = ["weights", "start"], []
    if start.fingerprint is None:
        row += [f"random init of {start.config_file}", "random"]
    else:
        row += [start.description["checkpoint"], "sha256 " + start.description["weights_sha256"][:12]]
    if mode != "standard":
        row[0] += f" ({mode})"
    for task, summary in tasks.items():
        for name, score in summary["scores"].items():
            baseline = score["mean"] if task == "sts-b" else score["majority"]
            header.append(f"{GLUE_FOLDERS.get(task, 'SQuAD')} {LABELS[name]} "
                          f"({BASELINE_KINDS.get(task, 'majority')} {baseline:.1f})")
            values = score["seeds"].values()
            cell = f"{score['median']:.1f}"
            row.append(cell if len(values) == 1 else f"{cell} ({min(values):.1f}-{max(values):.1f})")
    lines = [header, ["---"] * len(header), row]
    return "".join("| " + " | ".join(line) + " |\n" for line in lines)


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.random_init == bool(args.checkpoint):
        parser.error("give a checkpoint or --random-init (with --config-file), not both")
    output_dir = Path(args.output_dir)
    check_task_folders(args.tasks, Path(args.data_dir))
    folder_lock.hold(output_dir, "--output-dir")
    start = (random_start(args.config_file, args.vocab_file) if args.random_init
             else checkpoint_start(args.checkpoint, args.config_file, args.vocab_file))
    check_vocabulary(start)
    mode = "quick" if args.quick else "standard"
    earlier = tasks_in_folder(output_dir) - set(args.tasks)  # summed up again, not run
    plans = {task: PLAN[mode][task] for task in ALL_TASKS if task in args.tasks or task in earlier}
    data = {task: task_data(task, plan, Path(args.data_dir), output_dir) for task, plan in plans.items()}
    task_hyperparameters = {task: hyperparameters(task, args.learning_rate) for task in plans}
    units = [make_unit(task, seed, plan, data[task], start, output_dir, task_hyperparameters[task])
             for task, plan in plans.items() for seed in plan.seeds]
    units.sort(key=lambda unit: unit.task in earlier)  # stable: a result of the tasks asked for is checked first
    results = [finished_result(unit) for unit in units]
    check_other_tasks_finished(args.tasks, units, results)
    # The longest first (SQuAD), so that the other processes fill the time it takes.
    pending = sorted((number for number, result in enumerate(results) if result is None),
                     key=lambda number: units[number].task != "squad")
    print(f"downstream.py: {len(units) - len(pending)} of {len(units)} fine-tuning runs done before; running "
          f"{len(pending)}, {args.jobs} at a time, each with its output in {output_dir / 'units'}/<task>-seed<s>/"
          "log.txt", flush=True)
    if earlier:
        print(f"downstream.py: the summary also covers {', '.join(task for task in plans if task in earlier)}, "
              f"whose runs are in {output_dir / 'units'}", flush=True)
    began = time.perf_counter()
    # What the units load: the checkpoint's file, or its copy without the task heads.
    loaded = encoder_only_start(start, output_dir) if pending and start.description.get("task_heads_not_loaded") \
        else start
    try:
        done = run_units([dataclasses.replace(units[number], start=loaded) for number in pending], args.jobs)
    except KeyboardInterrupt:
        kept = sum((unit.folder / "result.json").is_file() for unit in units)
        raise KeyboardInterrupt(f"interrupted (Ctrl-C): {kept} of {len(units)} fine-tuning runs finished, their "
                                f"results kept in {output_dir / 'units'}; run the same command again to go on from "
                                "there") from None
    finally:
        (output_dir / ENCODER_ONLY_FILE).unlink(missing_ok=True)
    for number, result in zip(pending, done, strict=True):
        results[number] = result
    tasks = {task: task_summary(task, plan, data[task], [result for unit, result in zip(units, results, strict=True)
                                                         if unit.task == task], task_hyperparameters[task])
             for task, plan in plans.items()}
    table = markdown_table(start, tasks, mode)
    summary = {"weights": start.description, "mode": mode, "vocab_file": start.vocab_file,
               "spread": "max - min over the seeds", "tasks": tasks, "markdown_row": table.splitlines()[-1],
               "seconds": sum(task["seconds"] for task in tasks.values()),
               "cpu_seconds": sum(task["cpu_seconds"] for task in tasks.values()),
               "jobs": args.jobs, "wall_seconds_of_this_invocation": time.perf_counter() - began}
    atomic_write_text(output_dir / "downstream.json", json.dumps(summary, indent=2) + "\n")
    atomic_write_text(output_dir / "downstream.md", table)
    print(table, end="")
    print(f"Downstream results: {output_dir / 'downstream.json'}, {output_dir / 'downstream.md'}")


if __name__ == "__main__":
    sys.exit(run_main(main, "downstream.py"))
