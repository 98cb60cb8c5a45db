"""The rows of scripts/gpu_check.sh, the acceptance check that the first person with a GPU runs.

Each row runs the project's own entry scripts (run_pretraining.py, run_squad.py, run_glue.py, and
paddle.distributed.launch) as separate processes on tiny inputs that it builds in the work folder, compares what
they wrote, and becomes one line of the table printed at the end: row, status (pass, FAIL or skipped), figure
(sequences/s, or the largest difference found), tolerance, and the seconds it took against its budget on paper
(pretraining_budget, FIXED_BUDGETS). The process exits 1 when any row FAILs.

    python scripts/gpu_check.py --gpus N --work-dir DIR      (gpu_check.sh detects N and chooses DIR)

With --gpus 0 (a CPU, or a build without CUDA) only the fp32 and CPU rows run, with bert-tiny and tiny shapes,
so that CI runs the script; every GPU row prints as "skipped (no GPU)", the rows that need two GPUs say so, and
on a GPU older than Ampere the tf32, bfloat16 and flash-attention rows print "skipped (needs SM 8.0)".

What each pretraining run is checked for, from its own report (log frequency 1):
- step 1, before any update: every precision starts from the same seeded weights (dropout 0) on the same batch,
  so its step-1 loss differs from fp32's by its rounding alone. The difference must be at most the precision's
  tolerance (a NaN, a loss scale left in the loss, a wrong mask at low precision fail) and, for every precision
  but fp32, more than FP32_ROUNDING (AMP or TF32 silently not applied leaves the loss fp32's to 1e-7).
- learning: at the shapes' learning rate the mean loss of the last two steps must be at least LOSS_FALL below the
  step-1 loss (an update that changes nothing, or every step skipped, fails), and float16 may skip at most
  MAX_SKIPPED_FP16 steps for overflow (the loss-scale search from 2^20), every other precision none.
A wrong attention mask at random initialisation barely moves the loss, so the sequence_output rows compare the
encoder's output on each GPU attention path with the CPU path on the same weights and inputs.
The tolerances and budgets are reasoned, not measured: no GPU run of this project has happened yet.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from utils.dllog import read_report, training_step  # noqa: E402  (the project root is only on the path from here on)

VOCAB = ROOT / "vocab" / "bert-base-uncased-vocab.txt"
# A run that hangs (a deadlocked NCCL group, a stuck loader) fails its row instead of stopping the check.
RUN_TIMEOUT_SECONDS = 300
SEQUENCE_LENGTHS = (128, 512)
MAX_PREDICTIONS = {128: 20, 512: 80}  # 15% of the tokens, rounded up as NVIDIA's phases do
# The rows that compare two runs' weights (data parallel, resume) train at 1e-4: a few updates move the weights
# by about 1e-4 of their size, so rounding noise stays below their tolerances.
LEARNING_RATE = "1e-4"
# The pretraining rows learn: at their shapes' learning rate the mean loss of the last two of 12 steps must be at
# least LOSS_FALL below step 1's. Measured on this project's CPU (fp32, batch 8, seq 128, 3 warmup steps, poly
# decay): BERT-base at 2e-2 fell 21% (11.17 -> 8.86), bert-tiny at 5e-2 fell 11% (11.08 -> 9.82), at 2e-2 5%.
LOSS_FALL = 0.05
# Dynamic loss scaling halves from 2^20 on every overflow; BERT's gradients overflow float16 down to about 2^15:
# 5 skipped steps, one more for a late overflow.
MAX_SKIPPED_FP16 = 6
# fp32 against itself on the same GPU with TF32 off repeats the same kernels; any rounding of the inputs to 10 or
# fewer mantissa bits (TF32, float16, bfloat16) moves the step-1 loss of a 12-layer model by far more than this.
FP32_ROUNDING = 1e-6


class RowFailure(Exception):
    """A row's check failed; the message is one line saying why (and where the log is)."""


@dataclass(frozen=True)
class Shapes:
    """Model and sizes of one kind of device: BERT-base on a GPU, bert-tiny on a CPU."""

    config: Path
    batch_size: dict[int, int]  # per sequence length, per process
    learning_rate: str  # of the pretraining rows (see LOSS_FALL)
    warmup_steps: int  # untimed steps of a pretraining row (also its learning-rate warmup)
    timed_steps: int
    squad_articles: int
    squad_paragraphs: int  # per article
    squad_seq_length: int
    squad_steps: int
    glue_examples: int
    glue_steps: int


GPU_SHAPES = Shapes(ROOT / "bert_configs" / "bert-base-uncased.json", {128: 32, 512: 8}, "2e-2", warmup_steps=3,
                    timed_steps=9, squad_articles=2, squad_paragraphs=20, squad_seq_length=384, squad_steps=30,
                    glue_examples=256, glue_steps=10)
CPU_SHAPES = Shapes(ROOT / "bert_configs" / "bert-tiny-uncased.json", {128: 8, 512: 4}, "5e-2", warmup_steps=3,
                    timed_steps=9, squad_articles=1, squad_paragraphs=2, squad_seq_length=128, squad_steps=3,
                    glue_examples=32, glue_steps=3)


@dataclass(frozen=True)
class Precision:
    """A training precision: its run_*.py flags and how far its per-step loss may be from fp32's (relative)."""

    name: str
    flags: tuple[str, ...]
    loss_rtol: float


# Why each tolerance: fp32's own rounding is ~1e-7 relative. TF32 rounds the inputs of every matmul to a 10-bit
# mantissa (unit roundoff 2^-11 = 4.9e-4); 12 layers of that stay near 1e-3 in the loss, and 1e-2 leaves room.
# float16 O1 has the same mantissa and also stores activations in float16 between ops: 2e-2. O2 keeps the
# weights themselves in float16 (fp32 copies only in the optimizer): 3e-2. bfloat16 has a 7-bit mantissa (unit
# roundoff 2^-8 = 3.9e-3, 8x float16's): 5e-2.
FP32 = Precision("fp32", ("--float32-precision", "fp32"), 0.0)
PRECISIONS = (
    FP32,
    Precision("tf32", ("--float32-precision", "tf32"), 1e-2),
    Precision("fp16-O1", ("--amp",), 2e-2),
    Precision("fp16-O2", ("--amp", "--use-pure-fp16"), 3e-2),
    Precision("bf16-O1", ("--amp", "--amp-dtype", "bfloat16"), 5e-2),
    Precision("bf16-O2", ("--amp", "--amp-dtype", "bfloat16", "--use-pure-fp16"), 6e-2),
)
BY_NAME = {precision.name: precision for precision in PRECISIONS}
# TF32 and bfloat16 need an Ampere (SM 8.0) or later GPU; so do flash and variable-length attention.
NEEDS_SM80 = {"tf32", "bf16-O1", "bf16-O2"}
# The pretraining runs: (suffix, extra flags, sequence length, precisions). Every precision at 128; at 512 (the
# phase-2 mask and attention sizes) one of each kind; the fused QKV layout under O2; packed rows in fp32 (the
# block-diagonal mask) and under AMP (variable-length flash attention).
PRETRAINING_RUNS = (
    ("seq128", (), 128, tuple(PRECISIONS)),
    ("seq512", (), 512, (FP32, BY_NAME["fp16-O1"], BY_NAME["bf16-O1"])),
    ("seq128 fuse-mha", ("--fuse-mha",), 128, (FP32, BY_NAME["fp16-O2"])),
    ("seq128 pack-sequences", ("--pack-sequences",), 128, (FP32, BY_NAME["fp16-O1"])),
)
# A resumed fp32 run repeats the straight run's arithmetic; on a GPU only the order of atomic adds (embedding
# gradients, reductions) may differ, ~1e-6 relative after a few steps. O2 adds float16 rounding of the weights
# that are restored (2^-11 relative), so its losses may differ by more. A CPU run must be bitwise equal.
RESUME_LOSS_RTOL = {"fp32": 1e-4, "fp16-O2": 1e-2}
# Two ranks all-reduce gradients in another summation order than one process over the combined batch (~1e-7
# relative); LAMB turns that noise in near-zero gradients into steps of up to about the learning rate (1e-4)
# in rare elements, far below, and a real difference (half of the data) moves weights by more than 1e-4.
DATA_PARALLEL_ATOL = 1e-5
# Exported fp32 predictor against dygraph fp32: the same arithmetic, so every answer must be the same. An fp16
# predictor changes start/end logits by ~1e-3 relative; a model trained for a few steps from random weights has
# many near-ties between its best spans, so some answers flip: at least 90% must agree.
FP16_ANSWER_AGREEMENT = 0.9


# sequence_output of BertModel on each attention path against the CPU path (fp32, cpu_kernels) on the same weights
# and inputs: case -> (packed rows, autocast dtype or None, tolerance, SDPA backend forced or None, needs SM 8.0).
# The model is built with initializer_range 0.3 (as tests/test_modeling.py does), which makes attention sharp
# enough that attending to padding, or to another packed sample, moves the outputs by far more than these.
# fp32 paths reorder sums only: 1e-4 after LayerNorm leaves 100x room. float16 rounds q, k, v and the matmul inputs
# to 11 bits (5e-4 relative) in 12 layers: 5e-2.
PARITY_CASES = {
    "sequence_output flash, padded, fp16 vs CPU": (False, "float16", 5e-2, "FLASH_ATTENTION", True),
    "sequence_output memory-efficient, padded, fp32 vs CPU": (False, None, 1e-4, "EFFICIENT_ATTENTION", False),
    "sequence_output varlen flash, packed, fp16 vs CPU": (True, "float16", 5e-2, None, True),
    "sequence_output memory-efficient, packed, fp32 vs CPU": (True, None, 1e-4, "EFFICIENT_ATTENTION", False),
}
# On every machine (and so in CI): Paddle's own math attention on the CPU against the cpu_kernels path.
CPU_PARITY_CASES = {
    "sequence_output math, padded, fp32 vs CPU kernels": (False, None, 1e-4, "MATH", False),
    "sequence_output math, packed, fp32 vs CPU kernels": (True, None, 1e-4, "MATH", False),
}
PARITY_LENGTHS = (128, 100, 77, 30)  # the real tokens of the 4 rows of 128


@dataclass
class Row:
    name: str
    status: str
    figure: str
    tolerance: str
    detail: str = ""
    seconds: str = "-"  # time taken, and on a GPU "/ budget"


# --- Budgets on paper (GPU only). The CPU figure is measured (docs/benchmarks.md, benchmarks/bench_pretraining.py):
# BERT-base pretraining, seq 128, fp32, 2 threads, 2.18 sequences/s. The GPU speed-ups over it are assumptions
# (an A100 runs fp32 at about 10 TFLOP/s in practice, and TF32/float16/bfloat16 tensor cores several times more);
# the startup (importing Paddle, building BERT-base, the first CUDA kernels) is assumed too.
CPU_SECONDS_PER_SEQUENCE = {128: 1 / 2.18, 512: 4.5 / 2.18}  # seq 512: 4x the tokens, and attention grows faster
GPU_SPEEDUP = {"fp32": 50, "low precision": 250}
STARTUP_SECONDS = 30
# Rows that are not pretraining runs: processes x STARTUP_SECONDS plus their work, in seconds.
FIXED_BUDGETS = {"data": 90, "squad train, predict, export": 90, "squad predictor": 45, "glue": 45,
                 "kill and resume": 3 * STARTUP_SECONDS + 30, "resume across AMP levels": STARTUP_SECONDS,
                 "cpu affinity": STARTUP_SECONDS + 10, "sequence_output": 60, "data parallel": 2 * STARTUP_SECONDS + 60}


def pretraining_budget(length: int, precision: Precision, steps: int, batch_size: int) -> float:
    """Seconds a pretraining row may take on one GPU: startup, then its steps at the assumed speed-up."""
    speedup = GPU_SPEEDUP["fp32" if precision is FP32 else "low precision"]
    return STARTUP_SECONDS + steps * batch_size * CPU_SECONDS_PER_SEQUENCE[length] / speedup


@dataclass(frozen=True)
class RunReport:
    """What a run_pretraining.py report (log frequency 1) says per step: its loss, and which updates it skipped."""

    losses: dict[int, float]
    skipped: frozenset[int]


def read_run(report: Path) -> RunReport:
    losses, skipped = {}, set()
    for record in read_report(report):
        step = training_step(record["step"]) if record["type"] == "LOG" else None
        if step is None:
            continue
        if "loss" in record["data"]:
            losses[step] = record["data"]["loss"]
        if record["data"].get("skipped_update"):
            skipped.add(step)
    if not losses:
        raise RowFailure(f"{report}: no step losses")
    return RunReport(losses, frozenset(skipped))


def step1_comparison(run: RunReport, reference: RunReport, precision: Precision) -> tuple[str, bool]:
    """The step-1 loss against fp32's: within the precision's rounding tolerance, and (for every precision but
    fp32) further from it than fp32's own rounding, which shows that the precision was applied."""
    [difference] = relative_differences({1: run.losses.get(1, math.nan)}, {1: reference.losses.get(1, math.nan)})
    floor = 0.0 if precision is FP32 else FP32_ROUNDING
    return f"rel diff {difference:.2e}", floor < difference <= precision.loss_rtol


def learning_check(run: RunReport, precision: Precision) -> tuple[str, bool]:
    """The loss falls by LOSS_FALL (mean of the last two steps against step 1), with at most MAX_SKIPPED_FP16
    skipped updates in float16 and none otherwise."""
    steps = sorted(run.losses)
    if len(steps) < 3 or steps[0] != 1:
        raise RowFailure(f"only steps {steps} reported; the learning check needs step 1 and two more")
    last = [run.losses[step] for step in steps[-2:]]
    fall = 1.0 - (sum(last) / 2) / run.losses[1] if all(map(math.isfinite, [*last, run.losses[1]])) else -math.inf
    allowed = MAX_SKIPPED_FP16 if precision.name.startswith("fp16") else 0
    figure = f"fell {fall:.1%} over {len(steps)} steps, {len(run.skipped)} skipped"
    return figure, fall >= LOSS_FALL and len(run.skipped) <= allowed


def relative_differences(losses: dict[int, float], reference: dict[int, float]) -> list[float]:
    """|loss - reference| / |reference| at every step of the reference; inf where a step is missing or not
    finite."""
    differences = []
    for step, expected in reference.items():
        actual = losses.get(step, math.nan)
        finite = math.isfinite(actual) and math.isfinite(expected)
        differences.append(abs(actual - expected) / abs(expected) if finite else math.inf)
    return differences


def step_losses(report: Path) -> dict[int, float]:
    """The loss of every step in a run_pretraining.py report (log frequency 1), skipped updates included."""
    return read_run(report).losses


def summary_value(report: Path, name: str) -> float:
    values = [record["data"][name] for record in read_report(report)
              if record["type"] == "LOG" and record["step"] == [] and name in record["data"]]
    if not values:
        raise RowFailure(f"{report}: no {name} in the run's summary")
    return values[-1]


def answer_agreement(predictions: Path, reference: Path) -> tuple[int, int]:
    """(questions with the same answer text, questions) between two predictions.json files."""
    actual, expected = (json.loads(path.read_text()) for path in (predictions, reference))
    if actual.keys() != expected.keys():
        raise RowFailure(f"{predictions}: answers {len(actual)} questions, {reference} {len(expected)}")
    return sum(actual[qid] == answer for qid, answer in expected.items()), len(expected)


# ---------------------------------------------------------------------------------------------------------------
# Tiny inputs
# ---------------------------------------------------------------------------------------------------------------


def squad_subset(source: Path, articles: int, paragraphs: int) -> dict:
    """The first `articles` articles of a SQuAD v1.1 file, each cut to its first `paragraphs` paragraphs."""
    try:
        dataset = json.loads(source.read_text())
        data = [dict(article, paragraphs=article["paragraphs"][:paragraphs]) for article in dataset["data"][:articles]]
        questions = sum(len(paragraph["qas"]) for article in data for paragraph in article["paragraphs"])
    except (ValueError, KeyError, TypeError) as error:
        raise RowFailure(f"{source}: not a SQuAD v1.1 file ({type(error).__name__}: {error})") from None
    if questions == 0:
        raise RowFailure(f"{source}: no questions in its first {articles} article(s)")
    return {"version": dataset.get("version", "1.1"), "data": data}


def synthetic_squad() -> dict:
    """One paragraph of made-up facts and a question per fact, for machines without the SQuAD dev set."""
    facts = [("Alice", "Paris"), ("Bob", "Lima"), ("Chen", "Oslo"), ("Dana", "Cairo"), ("Emil", "Quito"),
             ("Fatima", "Hanoi"), ("Goran", "Dublin"), ("Hana", "Nairobi")]
    context = " ".join(f"{name} lives in {city}." for name, city in facts)
    qas = [{"id": f"synthetic-{index}", "question": f"Where does {name} live?",
            "answers": [{"text": city, "answer_start": context.index(f"{name} lives in ") + len(name) + 10}]}
           for index, (name, city) in enumerate(facts)]
    return {"version": "1.1", "data": [{"title": "synthetic", "paragraphs": [{"context": context, "qas": qas}]}]}


MRPC_HEADER = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"


def synthetic_mrpc(examples: int) -> str:
    """An MRPC-format TSV: label 1 pairs say the same thing in other words, label 0 pairs do not."""
    lines = [MRPC_HEADER]
    for index in range(examples):
        first = f"The shop on street {index} opens at {index % 12 + 1} o'clock ."
        second = (f"At {index % 12 + 1} o'clock the shop on street {index} opens ." if index % 2
                  else f"The museum on street {index + 7} is closed on Mondays .")
        lines.append(f"{index % 2}\t{2 * index}\t{2 * index + 1}\t{first}\t{second}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------------------------
# The check
# ---------------------------------------------------------------------------------------------------------------


class GpuCheck:
    """Runs the rows in order into <work>/ (inputs, outputs, and one log per row in logs/) and keeps their
    results."""

    def __init__(self, work: Path, gpus: int, shared: Path):
        self.work, self.gpus, self.shared = work, gpus, shared
        self.shapes = GPU_SHAPES if gpus else CPU_SHAPES
        self.logs = work / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.rows: list[Row] = []
        self.shards: dict[int, Path] = {}
        self.model_config = work / "model.json"  # the model without dropout, for the comparisons
        self.squad_file = work / "squad" / "tiny-v1.1.json"
        self.glue_dir = work / "glue"
        self.sm80 = gpus > 0 and gpu_major_capability() >= 8
        self.parity: dict[str, float] | None = None  # the sequence_output cases, run once for all their rows
        self.budget_spent = 0.0  # the budgets of the rows that ran
        self.started = time.perf_counter()

    # --- running ---------------------------------------------------------------------------------------------

    def row(self, name: str, tolerance: str, check: Callable[[], tuple[str, bool]], gpus_needed: int = 0,
            needs: Sequence[str] = (), budget: float | None = None, needs_sm80: bool = False) -> None:
        """Run one row: check() returns (figure, passed) or raises RowFailure. A row is skipped when the machine
        has too few GPUs (or one older than Ampere, for needs_sm80), and when a row it needs did not pass.
        budget: the seconds the row may take on a GPU (on paper); the table shows the time taken beside it."""
        if self.gpus < gpus_needed:
            status = "skipped (no GPU)" if self.gpus == 0 else f"skipped (needs {gpus_needed} GPUs)"
            self.rows.append(Row(name, status, "-", tolerance))
            return
        if needs_sm80 and not self.sm80:
            self.rows.append(Row(name, "skipped (needs SM 8.0)", "-", tolerance))
            return
        failed = [other.name for other in self.rows if other.name in needs and other.status != "pass"]
        if failed:
            self.rows.append(Row(name, f"skipped (needs {failed[0]})", "-", tolerance))
            return
        print(f"== {name}", flush=True)
        start = time.perf_counter()
        try:
            figure, passed = check()
            row = Row(name, "pass" if passed else "FAIL", figure, tolerance,
                      "" if passed else f"{figure} is outside {tolerance}")
        except RowFailure as failure:
            row = Row(name, "FAIL", "-", tolerance, str(failure))
        seconds = time.perf_counter() - start
        row.seconds = f"{seconds:.0f}" + (f" / {budget:.0f}" if self.gpus and budget is not None else "")
        if self.gpus and budget is not None:
            self.budget_spent += budget
        print(f"   {row.status}  {row.figure}  {row.detail}  ({row.seconds} s)", flush=True)
        self.rows.append(row)

    def log_file(self, label: str) -> Path:
        return self.logs / (label.replace(" ", "_").replace("/", "-") + ".log")

    def environment(self, precision: Precision) -> dict[str, str]:
        # As scripts/common.sh's fp32: TF32 off in every CUDA library, not only in Paddle's own switches.
        return {**os.environ, "NVIDIA_TF32_OVERRIDE": "0"} if precision is FP32 else dict(os.environ)

    def run(self, label: str, argv: Sequence[str], precision: Precision = FP32) -> None:
        """Run a command from the project root; its output goes to logs/<label>.log. Raises RowFailure naming
        the log when it fails or times out."""
        log = self.log_file(label)
        with open(log, "w") as output:
            try:
                result = subprocess.run([sys.executable, *map(str, argv)], cwd=ROOT, stdout=output,
                                        stderr=subprocess.STDOUT, env=self.environment(precision),
                                        timeout=RUN_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                raise RowFailure(f"{label}: no result after {RUN_TIMEOUT_SECONDS} s (log {log})") from None
        if result.returncode != 0:
            lines = log.read_text().strip().splitlines() or ["(no output)"]
            raise RowFailure(f"{label}: exit status {result.returncode}: {lines[-1][:200]} (log {log})")

    # --- inputs ----------------------------------------------------------------------------------------------

    def prepare_pretraining_data(self) -> tuple[str, bool]:
        """LDDL shards at both lengths from WikiText-2's test set in the shared data, or else from the offline
        sample corpus (data/make_sample_corpus.py)."""
        wikitext = self.shared / "data" / "wikitext-2" / "wiki.test.raw"
        if wikitext.is_file():
            corpus, corpus_flags, origin = wikitext, ["--input-format", "wikitext"], "WikiText-2 test"
        else:
            corpus, corpus_flags, origin = self.work / "corpus", [], "sample corpus"
            self.run("make sample corpus", [ROOT / "data" / "make_sample_corpus.py", "--output-dir", corpus])
        samples = []
        for length in SEQUENCE_LENGTHS:
            shards = self.work / f"shards-{length}"
            # Two shards, so that each of two data-parallel ranks reads its own.
            self.run(f"lddl_preprocess {length}", [
                ROOT / "lddl_preprocess.py", "--input", corpus, *corpus_flags, "--vocab-file", VOCAB, "--output-dir",
                shards, "--max-seq-length", length, "--num-shards", 2, "--num-workers", 1, "--duplicate-factor", 1])
            counts = json.loads((shards / ".num_samples.json").read_text())
            samples.append(f"{sum(counts.values())} at seq {length}")
            self.shards[length] = shards
        config = json.loads(self.shapes.config.read_text())
        self.model_config.write_text(json.dumps(config | {"hidden_dropout_prob": 0.0,
                                                          "attention_probs_dropout_prob": 0.0}))
        return f"{', '.join(samples)} samples ({origin})", True

    def prepare_squad(self) -> tuple[str, bool]:
        source = self.shared / "data" / "squad" / "v1.1" / "dev-v1.1.json"
        if source.is_file():
            dataset, origin = squad_subset(source, self.shapes.squad_articles, self.shapes.squad_paragraphs), "dev-v1.1"
        else:
            dataset, origin = synthetic_squad(), "synthetic"
        self.squad_file.parent.mkdir(parents=True, exist_ok=True)
        self.squad_file.write_text(json.dumps(dataset))
        questions = sum(len(p["qas"]) for article in dataset["data"] for p in article["paragraphs"])
        return f"{questions} questions ({origin})", True

    def prepare_glue(self) -> tuple[str, bool]:
        self.glue_dir.mkdir(parents=True, exist_ok=True)
        source = self.shared / "data" / "glue" / "MRPC"
        count = self.shapes.glue_examples
        for split in ("train", "dev"):
            path = source / f"{split}.tsv"
            if path.is_file():
                text = "".join(path.read_text(encoding="utf-8").splitlines(keepends=True)[:count + 1])
            else:
                text = synthetic_mrpc(count)
            (self.glue_dir / f"{split}.tsv").write_text(text, encoding="utf-8")
        return f"{count} pairs per split ({'MRPC' if source.is_dir() else 'synthetic'})", True

    # --- pretraining -----------------------------------------------------------------------------------------

    def pretraining_argv(self, length: int, output: Path, config: Path, *extra: object) -> list[object]:
        return [ROOT / "run_pretraining.py", "--input-dir", self.shards[length], "--vocab-file", VOCAB,
                "--output-dir", output, "--report-file", output / "report.json", "--bert-model", "custom",
                "--config-file", config, "--phase1" if length == 128 else "--phase2", "--max-seq-length", length,
                "--max-predictions-per-seq", MAX_PREDICTIONS[length], "--batch-size", self.shapes.batch_size[length],
                "--learning-rate", LEARNING_RATE, "--warmup-proportion", "0.5", "--log-freq", 1, "--seed", 42,
                "--show-config", "false", "--enable-cpu-affinity", "false", *extra]

    def pretraining_steps(self) -> int:
        return self.shapes.warmup_steps + self.shapes.timed_steps

    def run_folder(self, precision: Precision, suffix: str) -> Path:
        return self.work / "pretrain" / f"{precision.name}-{suffix.replace(' ', '-')}"

    def pretrain_benchmark(self, precision: Precision, length: int, flags: Sequence[str], suffix: str,
                           label: str) -> tuple[str, bool]:
        """Warmup, then timed steps; the report keeps every step's loss for the step-1 and learning rows."""
        output = self.run_folder(precision, suffix)
        shapes, steps = self.shapes, self.pretraining_steps()
        self.run(label, self.pretraining_argv(
            length, output, self.model_config, "--max-steps", steps, "--learning-rate", shapes.learning_rate,
            "--warmup-proportion", f"{shapes.warmup_steps / steps:.4f}", "--benchmark", "--benchmark-warmup-steps",
            shapes.warmup_steps, "--benchmark-steps", shapes.timed_steps, "--num-workers", 2 if self.gpus else 0,
            *precision.flags, *flags), precision)
        return f"{summary_value(output / 'report.json', 'training_sequences_per_second'):.1f} seq/s", True

    def step1_row(self, precision: Precision, suffix: str) -> tuple[str, bool]:
        return step1_comparison(read_run(self.run_folder(precision, suffix) / "report.json"),
                                read_run(self.run_folder(FP32, suffix) / "report.json"), precision)

    def learning_row(self, precision: Precision, suffix: str) -> tuple[str, bool]:
        return learning_check(read_run(self.run_folder(precision, suffix) / "report.json"), precision)

    # --- resume ----------------------------------------------------------------------------------------------

    def resume_argv(self, folder: Path, precision: Precision, report: str) -> list[object]:
        # The shipped config, dropout on: the resumed run must continue the dropout stream too. Two loader workers:
        # it must continue their data positions.
        argv = self.pretraining_argv(128, folder, self.shapes.config, "--max-steps", 8, "--num-steps-per-checkpoint",
                                     2, "--keep-checkpoint-max", 4, "--num-workers", 2, "--last-step-of-checkpoint",
                                     "auto", *precision.flags)
        argv[argv.index("--report-file") + 1] = folder / report
        return argv

    def kill_at_step(self, label: str, argv: Sequence[object], precision: Precision, step: int) -> None:
        """Start a run and SIGKILL it (and its loader workers) as soon as it reports `step`."""
        log = self.log_file(label)
        process = subprocess.Popen([sys.executable, *map(str, argv)], cwd=ROOT, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, env=self.environment(precision),
                                   start_new_session=True)
        watchdog = threading.Timer(RUN_TIMEOUT_SECONDS, os.killpg, (process.pid, signal.SIGKILL))
        watchdog.start()
        killed = False
        with open(log, "w") as output:
            for line in process.stdout:
                output.write(line)
                if line.startswith(f"step {step}/") and not killed:
                    os.killpg(process.pid, signal.SIGKILL)
                    killed = True
            process.wait()
        watchdog.cancel()
        if not killed:
            raise RowFailure(f"{label}: ended with status {process.returncode} before step {step} (log {log})")

    def kill_and_resume(self, precision: Precision) -> tuple[str, bool]:
        """A straight run, and the same run killed with SIGKILL after step 3 and rerun with the same command."""
        folder = self.work / "resume" / precision.name
        name = f"resume {precision.name}"
        self.run(f"{name} straight", self.resume_argv(folder / "straight", precision, "report.json"), precision)
        resumed = folder / "resumed"
        self.kill_at_step(f"{name} killed", self.resume_argv(resumed, precision, "killed.json"), precision, 3)
        self.run(f"{name} rerun", self.resume_argv(resumed, precision, "report.json"), precision)
        if self.gpus == 0:
            worst = max_weight_difference(final_weights(folder / "straight"), final_weights(resumed))
            return f"max |weight diff| {worst:.3g}", worst == 0.0
        losses, reference = (step_losses(path / "report.json") for path in (resumed, folder / "straight"))
        resumed_steps = {step: reference[step] for step in losses}
        if not resumed_steps:
            raise RowFailure(f"{resumed / 'report.json'}: the rerun reported no step")
        worst = max(relative_differences(losses, resumed_steps))
        return (f"max rel loss diff {worst:.2e} over steps {min(losses)}-{max(losses)}",
                worst <= RESUME_LOSS_RTOL[precision.name])

    def resume_across_amp_levels(self) -> tuple[str, bool]:
        """The fp16-O2 run's checkpoint resumed at O1: the run must stop at once with one line naming
        --use-pure-fp16 (the optimizer state holds O2's fp32 master weights, which O1 has not)."""
        folder = self.work / "resume" / "fp16-O2" / "straight"
        label = "resume O2 checkpoint at O1"
        try:
            self.run(label, self.resume_argv(folder, BY_NAME["fp16-O1"], "amp-level.json"), BY_NAME["fp16-O1"])
        except RowFailure as failure:
            last = self.log_file(label).read_text().strip().splitlines()[-1]
            return last[:100], "exit status 1" in str(failure) and "--use-pure-fp16" in last
        return "the resume ran", False

    def cpu_affinity(self) -> tuple[str, bool]:
        """One step with --enable-cpu-affinity true: the run must report the CPUs it was pinned to (next to its
        GPU, from NVML, on a GPU node)."""
        output = self.work / "affinity"
        label = "cpu affinity"
        argv = self.pretraining_argv(128, output, self.model_config, "--max-steps", 1, "--num-workers", 0,
                                     *FP32.flags)
        argv[argv.index("--enable-cpu-affinity") + 1] = "true"
        self.run(label, argv)
        lines = self.log_file(label).read_text().splitlines()
        pinned = [line for line in lines if line.startswith("Rank 0 of 1: CPUs")]
        if not pinned:
            raise RowFailure(f"{label}: no 'Rank 0 of 1: CPUs' line (log {self.log_file(label)})")
        return pinned[0][len("Rank 0 of 1: "):][:60], "not pinned" not in pinned[0]

    # --- attention paths against the CPU -----------------------------------------------------------------------

    def sequence_output_parity(self) -> dict[str, float]:
        """Run the parity cases in their own process (Paddle on the GPU there); returns case -> max |diff|."""
        result = self.work / "parity.json"
        self.run("sequence_output parity", [Path(__file__), "--attention-parity", result, "--model-config",
                                            self.model_config, "--gpus", self.gpus, "--work-dir", self.work])
        return json.loads(result.read_text())

    def parity_row(self, case: str) -> tuple[str, bool]:
        if self.parity is None:
            self.parity = self.sequence_output_parity()
        if case not in self.parity:
            raise RowFailure(f"the parity run has no case {case!r}")
        difference = self.parity[case]
        return f"max |diff| {difference:.2e}", difference <= {**PARITY_CASES, **CPU_PARITY_CASES}[case][2]

    # --- fine-tuning -----------------------------------------------------------------------------------------

    def finetune_argv(self, script: str, output: Path) -> list[object]:
        return [ROOT / script, "--vocab-file", VOCAB, "--bert-model", "custom", "--config-file", self.model_config,
                "--output-dir", output, "--seed", 42, "--show-config", "false", *FP32.flags]

    def squad_train_predict_export(self) -> tuple[str, bool]:
        output = self.work / "squad" / "dygraph"
        self.run("squad train predict export", [
            *self.finetune_argv("run_squad.py", output), "--do-train", "--train-file", self.squad_file,
            "--do-predict", "--predict-file", self.squad_file, "--export-dir", self.work / "squad" / "export",
            "--max-steps", self.shapes.squad_steps, "--train-batch-size", 8, "--learning-rate", "1e-4",
            "--max-seq-length", self.shapes.squad_seq_length, "--doc-stride", self.shapes.squad_seq_length // 2])
        return f"{summary_value(output / 'report.json', 'training_sequences_per_second'):.1f} seq/s", True

    def squad_predictor(self, precision: str) -> tuple[str, bool]:
        output = self.work / "squad" / f"predictor-{precision}"
        self.run(f"squad predictor {precision}", [
            ROOT / "run_squad.py", "--vocab-file", VOCAB, "--output-dir", output, "--show-config", "false",
            "--do-predict", "--predict-file", self.squad_file, "--inference-model-dir", self.work / "squad" / "export",
            "--inference-precision", precision, "--max-seq-length", self.shapes.squad_seq_length,
            "--doc-stride", self.shapes.squad_seq_length // 2])
        same, questions = answer_agreement(output / "predictions.json",
                                           self.work / "squad" / "dygraph" / "predictions.json")
        needed = questions if precision == "fp32" else FP16_ANSWER_AGREEMENT * questions
        return f"{same}/{questions} answers equal dygraph's", same >= needed

    def glue(self) -> tuple[str, bool]:
        output = self.work / "glue" / "mrpc"
        self.run("glue mrpc", [
            *self.finetune_argv("run_glue.py", output), "--task-name", "mrpc", "--do-train", "--train-file",
            self.glue_dir / "train.tsv", "--do-eval", "--predict-file", self.glue_dir / "dev.tsv",
            "--max-steps", self.shapes.glue_steps, "--train-batch-size", 8])
        return f"{summary_value(output / 'report.json', 'training_sequences_per_second'):.1f} seq/s", True

    # --- data parallel ---------------------------------------------------------------------------------------

    def data_parallel_argv(self, output: Path) -> list[object]:
        # Step 1 of a 2-step schedule without warmup runs at half the learning rate; the last step of any schedule
        # (and the first of a warmup) runs at 0 and would compare untouched weights.
        return self.pretraining_argv(128, output, self.model_config, "--max-steps", 2, "--steps-this-run", 1,
                                     "--warmup-proportion", 0, "--num-workers", 0, *FP32.flags)

    def data_parallel(self, ranks: int = 2) -> tuple[str, bool]:
        """One step of `ranks` launched ranks against one process on their combined batch."""
        output = self.work / "data-parallel"
        argv = self.data_parallel_argv(output)
        devices = ["--devices", ",".join(map(str, range(ranks)))] if self.gpus else []
        self.run("data parallel launch", ["-m", "paddle.distributed.launch", "--nproc_per_node", ranks, *devices,
                                          "--log_dir", self.logs / "data-parallel", *argv])
        expected = one_process_combined_step([str(arg) for arg in argv[1:]], ranks)
        worst = max_weight_difference(final_weights(output), expected)
        return f"max |weight diff| {worst:.3g}", worst <= DATA_PARALLEL_ATOL

    def data_parallel_gradient_merge(self, precision: Precision, ranks: int = 2) -> tuple[str, bool]:
        """Two ranks with --gradient-merge-steps 2: under O2 every micro-batch but the reducer's own path runs
        under no_sync and the fp32 master gradients are averaged afterwards (gradient_merge.merged_backward).
        The run must finish with finite losses and at least one update that was not skipped."""
        output = self.work / f"data-parallel-merge-{precision.name}"
        argv = self.pretraining_argv(128, output, self.model_config, "--max-steps", 4, "--gradient-merge-steps", 2,
                                     "--num-workers", 0, *precision.flags)
        self.run(f"data parallel merge {precision.name}", [
            "-m", "paddle.distributed.launch", "--nproc_per_node", ranks, "--devices", ",".join(map(str, range(ranks))),
            "--log_dir", self.logs / f"data-parallel-merge-{precision.name}", *argv], precision)
        run = read_run(output / "report.json")
        finite = all(math.isfinite(loss) for loss in run.losses.values())
        return (f"{len(run.losses)} steps, {len(run.skipped)} skipped, losses {'finite' if finite else 'NOT finite'}",
                finite and len(run.skipped) < len(run.losses))

    # --- all rows --------------------------------------------------------------------------------------------

    def run_all(self) -> None:
        data = "data: LDDL shards"
        self.row(data, "-", self.prepare_pretraining_data, budget=FIXED_BUDGETS["data"])
        steps = self.pretraining_steps()
        for suffix, flags, length, precisions in PRETRAINING_RUNS:
            batch = self.shapes.batch_size[length]
            for precision in precisions:
                label = f"pretrain {precision.name} {suffix}"
                gpu_only = dict(gpus_needed=0 if precision is FP32 else 1, needs_sm80=precision.name in NEEDS_SM80)
                self.row(label, "-", lambda p=precision, label=label, length=length, flags=flags, suffix=suffix:
                         self.pretrain_benchmark(p, length, flags, suffix, label), needs=(data,),
                         budget=pretraining_budget(length, precision, steps, batch), **gpu_only)
                if precision is not FP32:
                    self.row(f"step-1 loss {precision.name} vs fp32 {suffix}",
                             f"{FP32_ROUNDING:g} < rel diff <= {precision.loss_rtol:g}",
                             lambda p=precision, suffix=suffix: self.step1_row(p, suffix),
                             needs=(label, f"pretrain fp32 {suffix}"), **gpu_only)
                skips = MAX_SKIPPED_FP16 if precision.name.startswith("fp16") else 0
                self.row(f"learns {precision.name} {suffix}", f"falls >= {LOSS_FALL:.0%}, <= {skips} skipped",
                         lambda p=precision, suffix=suffix: self.learning_row(p, suffix), needs=(label,), **gpu_only)
        for case, (_, _, tolerance, _, sm80) in PARITY_CASES.items():
            self.row(case, f"<= {tolerance:g} absolute", lambda case=case: self.parity_row(case), gpus_needed=1,
                     needs_sm80=sm80, budget=FIXED_BUDGETS["sequence_output"] if self.parity is None else 0)
        for case, (_, _, tolerance, _, _) in CPU_PARITY_CASES.items():
            self.row(case, f"<= {tolerance:g} absolute", lambda case=case: self.parity_row(case))
        self.row("cpu affinity", "pinned", self.cpu_affinity, needs=(data,), budget=FIXED_BUDGETS["cpu affinity"])
        resume_tolerance = f"<= {RESUME_LOSS_RTOL['fp32']:g} relative" if self.gpus else "0 (bitwise)"
        resume_budget = FIXED_BUDGETS["kill and resume"]
        self.row("kill and resume fp32", resume_tolerance, lambda: self.kill_and_resume(FP32), needs=(data,),
                 budget=resume_budget)
        self.row("kill and resume fp16-O2", f"<= {RESUME_LOSS_RTOL['fp16-O2']:g} relative",
                 lambda: self.kill_and_resume(BY_NAME["fp16-O2"]), gpus_needed=1, needs=(data,), budget=resume_budget)
        self.row("resume O2 checkpoint at O1", "exit 1 naming --use-pure-fp16", self.resume_across_amp_levels,
                 gpus_needed=1, needs=("kill and resume fp16-O2",), budget=FIXED_BUDGETS["resume across AMP levels"])
        squad, squad_run = "data: SQuAD", "squad train, predict, export"
        self.row(squad, "-", self.prepare_squad, needs=(data,))
        self.row(squad_run, "-", self.squad_train_predict_export, needs=(squad,), budget=FIXED_BUDGETS[squad_run])
        self.row("squad predictor fp32", "all equal", lambda: self.squad_predictor("fp32"), needs=(squad_run,),
                 budget=FIXED_BUDGETS["squad predictor"])
        self.row("squad predictor fp16", f">= {FP16_ANSWER_AGREEMENT:.0%} equal", lambda: self.squad_predictor("fp16"),
                 gpus_needed=1, needs=(squad_run,), budget=FIXED_BUDGETS["squad predictor"])
        glue_data = "data: GLUE MRPC"
        self.row(glue_data, "-", self.prepare_glue, needs=(data,))
        self.row("glue mrpc", "-", self.glue, needs=(glue_data,), budget=FIXED_BUDGETS["glue"])
        self.row("data parallel 2 GPUs vs 1", f"<= {DATA_PARALLEL_ATOL:g} absolute", self.data_parallel,
                 gpus_needed=2, needs=(data,), budget=FIXED_BUDGETS["data parallel"])
        for name in ("fp16-O1", "fp16-O2"):
            self.row(f"data parallel 2 GPUs gradient merge 2 {name}", "finite, not all skipped",
                     lambda name=name: self.data_parallel_gradient_merge(BY_NAME[name]), gpus_needed=2,
                     needs=(data,), budget=FIXED_BUDGETS["data parallel"])
        elapsed = time.perf_counter() - self.started
        self.row("total time", f"< {self.budget_spent:.0f} s (the rows' budgets)",
                 lambda: (f"{elapsed:.0f} s", elapsed < self.budget_spent), gpus_needed=1)

    def table(self) -> str:
        header = Row("row", "status", "figure", "tolerance", seconds="seconds")
        keys = ("name", "status", "figure", "tolerance", "seconds")
        widths = [max(len(getattr(row, key)) for row in [header, *self.rows]) for key in keys]
        lines = []
        for row in [header, *self.rows]:
            cells = tuple(getattr(row, key) for key in keys)
            lines.append("  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)).rstrip())
        lines.insert(1, "  ".join("-" * width for width in widths))
        failures = [f"FAIL {row.name}: {row.detail}" for row in self.rows if row.status == "FAIL"]
        return "\n".join(lines + ([""] if failures else []) + failures)


# ---------------------------------------------------------------------------------------------------------------
# Weights (Paddle is imported here only: the rows above run it in their own processes)
# ---------------------------------------------------------------------------------------------------------------


def final_weights(output: Path) -> dict:
    """The weights of the newest checkpoint of a run of the custom model, as float32 NumPy arrays."""
    import paddle

    from checkpoints.checkpoint import list_checkpoints
    from checkpoints.weights import as_numpy, read_weights

    paddle.set_device("cpu")
    saved = list_checkpoints(output / "custom" / "phase1")
    if not saved:
        raise RowFailure(f"{output}: no checkpoint")
    state = read_weights(saved[-1][1] / "bert_paddle.pdparams")
    return {name: as_numpy(value) for name, value in state.items()}


def max_weight_difference(actual: dict, expected: dict) -> float:
    import numpy as np

    if actual.keys() != expected.keys():
        raise RowFailure(f"the weights differ in names: {sorted(actual.keys() ^ expected.keys())[:3]}")
    return max(float(np.abs(actual[name] - expected[name]).max()) for name in expected)


def one_process_combined_step(argv: list[str], ranks: int) -> dict:
    """What one process computes in one step on the batches that `ranks` ranks draw at their first step, placed
    side by side (each padded to the longest with the loader's fill values)."""
    import numpy as np
    import paddle

    import run_pretraining
    from checkpoints.weights import as_numpy
    from loss import IGNORE_INDEX
    from pretraining_dataset import PretrainingDataLoader

    args = run_pretraining.parse_args(argv)
    batches = [next(iter(PretrainingDataLoader(
        args.input_dir, args.vocab_file, batch_size=args.batch_size, max_seq_length=args.max_seq_length,
        max_predictions_per_seq=args.max_predictions_per_seq, seed=args.seed, rank=rank, world_size=ranks)))
        for rank in range(ranks)]
    length = max(batch["input_ids"].shape[1] for batch in batches)

    def padded(key: str, value: np.ndarray) -> np.ndarray:
        if value.ndim != 2 or value.shape[1] == length:
            return value
        fill = IGNORE_INDEX if key == "masked_lm_labels" else 0
        return np.pad(value, ((0, 0), (0, length - value.shape[1])), constant_values=fill)

    combined = {key: np.concatenate([padded(key, batch[key]) for batch in batches]) for key in batches[0]}
    with paddle.utils.unique_name.guard():
        trainer = run_pretraining.Trainer(args, rank=0, world_size=1)
        trainer.step([combined])
        return {name: as_numpy(value) for name, value in trainer.model.state_dict().items()}


def gpu_major_capability() -> int:
    """The compute capability's major number of GPU 0, asked of Paddle in a process of its own."""
    code = "import paddle; print(paddle.device.cuda.get_device_capability()[0])"
    probe = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=RUN_TIMEOUT_SECONDS)
    try:
        return int(probe.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise SystemExit(f"gpu_check: no compute capability from Paddle: {probe.stderr.strip()[-200:]}") from None


def parity_batch(vocab_size: int) -> dict:
    """4 rows of 128 tokens with PARITY_LENGTHS real tokens each (seeded), as the data loader gives them."""
    import numpy as np

    rng = np.random.default_rng(7)
    rows, length = len(PARITY_LENGTHS), max(PARITY_LENGTHS)
    attention_mask = (np.arange(length)[None] < np.array(PARITY_LENGTHS)[:, None]).astype(np.int64)
    input_ids = rng.integers(1000, vocab_size, (rows, length)) * attention_mask
    token_type_ids = ((np.arange(length)[None] >= np.array(PARITY_LENGTHS)[:, None] // 2) * attention_mask)
    return {"input_ids": input_ids, "token_type_ids": token_type_ids.astype(np.int64),
            "attention_mask": attention_mask, "next_sentence_labels": np.zeros((rows, 1), np.int64),
            "masked_lm_labels": np.full((rows, length), -1, np.int64)}


def attention_parity(model_config: Path, gpus: int, cases: dict | None = None) -> dict[str, float]:
    """case -> max |sequence_output - CPU path's| over the real tokens, for PARITY_CASES (with gpus) and
    CPU_PARITY_CASES; a case whose GPU lacks SM 8.0 is left out."""
    import dataclasses as dc

    import numpy as np
    import paddle
    from paddle.nn.attention import SDPBackend, sdpa_kernel

    import modeling
    from bert_config import BertConfig
    from preprocessing.packing import PACKED_MODEL_INPUTS, pack_batch
    from training import amp

    config = dc.replace(BertConfig.from_json_file(str(model_config)), initializer_range=0.3)
    batch = parity_batch(config.vocab_size)
    packed = pack_batch(batch, max(PARITY_LENGTHS))
    layouts = {False: (batch["attention_mask"] != 0, lambda model: model(
                   *(paddle.to_tensor(batch[name]) for name in ("input_ids", "token_type_ids", "attention_mask")))),
               True: (packed["sample_ids"] >= 0, lambda model: model(
                   paddle.to_tensor(packed["input_ids"]), paddle.to_tensor(packed["token_type_ids"]),
                   **{name: paddle.to_tensor(packed[name]) for name in PACKED_MODEL_INPUTS}))}
    paddle.set_device("cpu")
    paddle.seed(0)
    reference_model = modeling.BertModel(config, use_cpu_kernels=True)
    reference_model.eval()
    state = reference_model.state_dict()
    references = {rows: forward(reference_model)[0].numpy() for rows, (_, forward) in layouts.items()}
    chosen = cases if cases is not None else {**(PARITY_CASES if gpus else {}), **CPU_PARITY_CASES}
    sm80 = gpus > 0 and paddle.device.cuda.get_device_capability()[0] >= 8
    results = {}
    for case, (packed_rows, amp_dtype, _, backend, needs_sm80) in chosen.items():
        on_gpu = case in PARITY_CASES
        if needs_sm80 and not sm80:
            continue
        paddle.set_device("gpu" if on_gpu else "cpu")
        if on_gpu:
            amp.set_float32_matmul_precision("fp32")
        model = modeling.BertModel(config, use_cpu_kernels=False)
        model.set_state_dict(state)
        model.eval()
        valid, forward = layouts[packed_rows]
        forced = sdpa_kernel(getattr(SDPBackend, backend)) if backend else contextlib.nullcontext()
        with forced, paddle.amp.auto_cast(enable=amp_dtype is not None, dtype=amp_dtype or "float16", level="O1"):
            output = forward(model)[0].astype("float32").numpy()
        results[case] = float(np.abs(output - references[packed_rows])[valid].max())
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gpus", type=int, required=True, help="GPUs on this machine (0: run the CPU rows)")
    parser.add_argument("--work-dir", type=Path, required=True, help="folder for the inputs, outputs and logs")
    parser.add_argument("--attention-parity", type=Path, default=None,
                        help="(run by the sequence_output rows) write their figures to this JSON file and exit")
    parser.add_argument("--model-config", type=Path, default=None, help="with --attention-parity: the model")
    args = parser.parse_args(argv)
    if args.gpus < 0:
        parser.error(f"--gpus must be >= 0, got {args.gpus}")
    if args.attention_parity is not None:
        if args.model_config is None:
            parser.error("--attention-parity needs --model-config")
        args.attention_parity.write_text(json.dumps(attention_parity(args.model_config, args.gpus)))
        return 0
    shared = Path(os.environ.get("PADDLEBERT_SHARED_DIR", ROOT.parent / "shared"))
    check = GpuCheck(args.work_dir, args.gpus, shared)
    check.run_all()
    print(check.table(), flush=True)
    return 1 if any(row.status == "FAIL" for row in check.rows) else 0


if __name__ == "__main__":
    sys.exit(main())
