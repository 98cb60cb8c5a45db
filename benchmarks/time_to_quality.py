"""Time to quality: what minutes of pretraining on real Wikipedia buy downstream, on this machine.

    python benchmarks/time_to_quality.py                 # the whole yardstick, reported in WORK/report
    python benchmarks/time_to_quality.py --report-dir docs   # ... published: docs/time-to-quality.md
    python benchmarks/time_to_quality.py --quick         # the miniature CI runs: a slice, a tiny model, seconds
    python benchmarks/time_to_quality.py --recipe-trials cpu_budget_tiny_prenorm   # a budget-recipe preset at 20 min
    python benchmarks/time_to_quality.py --recipe-trials cpu_budget_tiny_8k_vocab --recipe-budget 60  # ... at 60

WORK is --work-dir (default results/time_to_quality). --compare-sizes, --search and --recipe-trials are modes: one
at a time.

Stages, in the order they run; each writes WORK/stages/<stage>.json atomically when it ends, and a rerun skips
every stage whose file is there (a stage's settings are in its file: a rerun with other settings stops with one
line naming the file, so nothing measured under other settings is mixed in; so does a file that is torn or lacks
what the report reads):
1. data: the preset's shards of the corpus (scripts/run_pretraining.sh builds them from its wikipedia_source,
   here ../shared/data/wikipedia/en-2015, when its data folder is empty), with whole articles held out for
   validation, listed by title beside the held-out shards.
2. pretrain/<run>: each run of RUNS in turn (the hour first, so that the result that matters most lands first),
   followed by its fine-tuning (3) where it is scored downstream. Each run trains the preset
   (scripts/configs/pretrain_config.sh, --preset) to its time budget through scripts/run_pretraining.sh,
   validating masked-LM loss and accuracy on the held-out articles every eval_interval_minutes of training time.
   The transformers run is benchmarks/hf_pretraining_peer.py on torch with the same batches, objective,
   optimizer, schedule and budget, imported into ours with convert_checkpoint.py hf2paddle. A run's settings name
   the CPU: minutes on another CPU are not the same budget, so a rerun on another machine stops with one line
   instead of mixing the two.
3. downstream/<run>: downstream.py (what scripts/run_downstream.sh runs) fine-tunes the run's final checkpoint (the
   random run: the preset's config from random weights) on SST-2, MRPC, RTE, CoLA and SQuAD v1.1 with fixed
   hyperparameters, in WORK/downstream/<run>/<hash of the stage's settings>/.
4. report: WORK/time_to_quality.json; in --report-dir time-to-quality.json, .png and .md, with every stage's wall
   time and their sum (what the whole yardstick took). --report-dir defaults to WORK/report: a run writes into the
   project's published pages only when told to, with --report-dir docs.

Ctrl-C stops it in one line (status 130); the finished stages are kept, and the interrupted pretraining run
continues from its last checkpoint when the command is run again.

Elapsed training time is run_pretraining.py's (time_budget.py): the training loop alone, without start-up,
validation and checkpoint writing, for ours and the peer alike. Nothing else may run on the machine meanwhile: the
budget is wall-clock time.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from itertools import islice
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import machine  # noqa: E402  (benchmarks/ is on the path as this script's folder)
import peers  # noqa: E402
from mlm_baselines import PREDICTORS  # noqa: E402

from finetuning import downstream_plan  # noqa: E402
from preprocessing.masking import MASKED_LM_RATIO  # noqa: E402
from utils.atomic_io import atomic_write, atomic_write_text  # noqa: E402
from utils.cli import positive_float, run_main  # noqa: E402
from utils.dllog import LOG, read_report, training_step  # noqa: E402

SCRIPT = "time_to_quality.py"
PRESET_FILE = ROOT / "scripts" / "configs" / "pretrain_config.sh"
# bert-tiny: its fine-tuning takes 2 to 3 minutes a checkpoint where mini's takes 13, which would put the yardstick
# past 150 minutes; and in 5 minutes at the searched learning rate (LAMB 1e-2, batch 64) it reached 13.1% validation
# masked-LM accuracy where mini and small stayed at 5.5%, one answer for every mask, after 183 and 67 steps
# (--compare-sizes, docs/time-to-quality-sizes.md).
DEFAULT_PRESET = "cpu_budget_tiny"
# run_pretraining.py's budget-recipe flags, which the transformers peer cannot follow.
RECIPE_FLAGS = ("pre_layer_norm", "no_linear_bias", "gated_feed_forward", "no_dropout", "alibi")


def peer_mismatch(options: dict) -> str | None:
    """Why the transformers peer cannot train as ours did with these run_pretraining.py options (its report's
    PARAMETER record), or None when it can."""
    if options["gradient_merge_steps"] != 1:  # the peer updates after every batch
        return f"the peer has no gradient merge, and ours merged {options['gradient_merge_steps']} batches a step"
    recipe = [name for name in RECIPE_FLAGS if options.get(name)]  # reports from before the flags have none
    if recipe:  # the peer builds transformers' BertForPreTraining: Devlin et al.'s architecture, with dropout
        return f"the peer trains BERT as transformers builds it, and ours trained with --{recipe[0].replace('_', '-')}"
    return None


@dataclass(frozen=True)
class Run:
    """One pretraining run of the yardstick: its name, engine, budget (minutes; 0 = random init), optimizer with
    its peak learning rate (None: the preset's), the preset it trains (None: --preset), whether it is scored
    downstream (the optimizer comparison is judged on validation masked-LM accuracy alone, to fit the time), and
    its batch and micro-batches per step (None: the preset's)."""

    name: str
    engine: str  # "ours", "transformers" or "random"
    budget: float
    optimizer: str = "Lamb"
    learning_rate: str | None = None
    preset: str | None = None
    downstream: bool = True
    accumulation: int | None = None  # micro-batches per optimizer step
    batch: int | None = None  # sequences per micro-batch


# The whole yardstick. Random init fine-tunes the untrained model; ours at 60 and 20 minutes; the transformers
# peer at 20; then LAMB, LANS and AdamW for 5 minutes each at a 4x larger batch through gradient merge (the large
# batch of LANS's claim, Zheng et al. 2020), compared on validation masked-LM accuracy: LAMB and LANS at the
# preset's learning rate (LANS's paper uses LAMB's), AdamW at the best of --search's.
RUNS = (
    Run("random", "random", 0.0),
    Run("ours-60", "ours", 60.0),
    Run("ours-20", "ours", 20.0),
    Run("transformers-20", "transformers", 20.0),
    Run("lamb-5", "ours", 5.0, downstream=False, accumulation=4),
    Run("lans-5", "ours", 5.0, "Lans", downstream=False, accumulation=4),
    Run("adamw-5", "ours", 5.0, "AdamW", "1e-3", downstream=False, accumulation=4),
)
# --quick: the same chain on a corpus slice with the tiny preset, each budget a few seconds; no peer (CI has
# no torch).
QUICK_RUNS = (
    Run("random", "random", 0.0),
    Run("ours-quick", "ours", 0.3),
    Run("lans-quick", "ours", 0.1, "Lans", "1e-3", downstream=False, accumulation=2),
)
# The context-free predictors (mlm_baselines.py) are fitted on this many training batches of the first ours run
# (--quick: a few), seconds of counting. On the en-2015 shards in batches of 64 the left-bigram figure was 20.5%
# from 500 batches, 21.1% from 1,500 and 21.6% from 5,000; unigram and copy do not move.
CONTEXT_FREE_TRAIN_BATCHES = 5000
QUICK_CONTEXT_FREE_TRAIN_BATCHES = 20
# --compare-sizes: the model size comparison that chose --preset's default, validation masked-LM accuracy after
# TRIAL_BUDGET minutes of each size (all three budget presets read the same shards); pretraining only.
TRIAL_BUDGET = 5.0
SIZES = ("tiny", "mini", "small")
# --recipe-trials: the budget of each trial of a budget-recipe preset (issue 43), scored downstream against the
# yardstick's ours-20 run (--preset at the same budget): a recipe option stays out of the presets unless it gains.
RECIPE_TRIAL_BUDGET = 20.0
# --search: the optimizers, peak learning rates and batches (None: the preset's, 64) tried for the budget presets,
# TRIAL_BUDGET minutes each on bert-tiny (the fastest size, so the most trials per minute), at the preset's warmup.
# The smaller batches take more optimizer steps in the same time; LAMB's rate scales with the square root of the
# batch there (You et al. 2019), from the best rate at 64.
SEARCH = (
    ("Lamb", "2e-3", None),
    ("Lamb", "1e-2", None),
    ("AdamW", "1e-3", None),
    ("Lamb", "3e-2", None),
    ("Lamb", "7e-3", 32),
    ("Lamb", "5e-3", 16),
    ("AdamW", "1e-3", 16),
    ("Lamb", "1e-2", 16),
    ("Lamb", "3.5e-3", 8),
)


def preset_argument_names() -> list[str]:
    """The names of run_pretraining.sh's positional arguments, in the order presets print them: the variables
    of _print_pretrain_args in scripts/configs/pretrain_config.sh."""
    text = PRESET_FILE.read_text(encoding="utf-8")
    body = re.search(r"_print_pretrain_args\(\) \{\n(.*?)\n\}", text, re.S)
    if body is None:
        raise SystemExit(f"{SCRIPT}: {PRESET_FILE}: no _print_pretrain_args function")
    return re.findall(r'"\$(\w+)"', body.group(1))


def preset_arguments(preset: str, environment: dict[str, str]) -> dict[str, str]:
    """The preset's arguments by name, as `bash scripts/run_pretraining.sh $(source ... && PRESET)` gets them."""
    printed = subprocess.run(["bash", "-c", f"source {shlex.quote(str(PRESET_FILE))} && {shlex.quote(preset)}"],
                             capture_output=True, text=True, env=environment, cwd=ROOT)
    if printed.returncode != 0:
        raise SystemExit(f"{SCRIPT}: --preset {preset}: {printed.stderr.strip() or 'no such preset'}")
    values, names = printed.stdout.split(), preset_argument_names()
    if len(values) != len(names):
        raise SystemExit(f"{SCRIPT}: --preset {preset} printed {len(values)} arguments, expected {len(names)}")
    return dict(zip(names, values, strict=True))


def preset_names(environment: dict[str, str]) -> list[str]:
    """The presets, sorted: the shell functions that sourcing PRESET_FILE defines (as preset_arguments calls them),
    but for its helpers, whose names start with "_"."""
    listed = subprocess.run(["bash", "-c", f"source {shlex.quote(str(PRESET_FILE))} && compgen -A function"],
                            capture_output=True, text=True, env=environment, cwd=ROOT)
    if listed.returncode != 0:
        raise SystemExit(f"{SCRIPT}: {PRESET_FILE}: {listed.stderr.strip() or 'cannot be sourced'}")
    return sorted(name for name in listed.stdout.split() if not name.startswith("_"))


def check_presets(args: argparse.Namespace) -> None:
    """SystemExit naming the presets of --preset or --recipe-trials that PRESET_FILE does not define, and the ones it
    does, before any stage runs: a trial's preset is otherwise first called after the stages before it, and its
    failure reads as bash's "command not found"."""
    known = preset_names(dict(os.environ))
    for flag, names in (("--preset", [args.preset] if args.preset else []),
                        ("--recipe-trials", args.recipe_trials or [])):
        unknown = [name for name in names if name not in known]
        if unknown:
            raise SystemExit(f"{SCRIPT}: {flag} {' '.join(unknown)}: no such preset in {PRESET_FILE} (its presets: "
                             f"{', '.join(known)})")


def check_folder(flag: str, folder: Path) -> None:
    """SystemExit naming the flag where its folder, or the nearest of the folder's parents that exists, is not a
    folder: before any stage runs, not when the first file is written."""
    existing = next(path for path in (folder, *folder.parents) if path.exists())
    if not existing.is_dir():
        raise SystemExit(f"{SCRIPT}: {flag} {folder}: " + ("is a file" if existing == folder
                                                           else f"{existing} is a file"))


# What to do about a file the yardstick cannot read back: a report in --report-dir, a stage file in WORK/stages.
REPORT_REMEDY = "move it or use --report-dir"
STAGE_REMEDY = "remove it to run the stage again, or use another --work-dir"


def read_json(path: Path, kind: str, remedy: str) -> object:
    """The JSON in path; SystemExit naming it as not `kind`, and what to do (remedy), where it cannot be read or
    parsed."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise SystemExit(f"{SCRIPT}: {path}: not {kind} ({error}); {remedy}") from None


@dataclass(frozen=True)
class Each:
    """A shape (shape_error): an object whose every value has `shape`, and which has at least the keys `required`."""

    shape: object
    required: tuple[str, ...] = ()


NUMBER = (int, float)
# How shape_error names the kind of a value, and of what a shape expects.
KIND_NAMES = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
              float: "a number", type(None): "null"}


def shape_kind(shape: object) -> type:
    """The JSON type of a value that has the shape (no tuple: one alternative)."""
    if isinstance(shape, dict | Each):
        return dict
    return list if isinstance(shape, list) else shape


def shape_error(value: object, shape: object, where: str = "") -> str | None:
    """Where value, read back from JSON, departs from shape, in words ("downstream.tasks.sst-2.scores has no
    'accuracy'"); None where it has it. A shape is a type; a tuple of shapes, one of which the value has; a dict, the
    keys an object must have and each one's shape (others may be there too); Each; or [shape], a list of items of
    that shape. `where` is the value's path in the file ("": the whole file)."""
    alternatives = shape if isinstance(shape, tuple) else (shape,)
    matching = [alternative for alternative in alternatives if isinstance(value, shape_kind(alternative))]
    if not matching:
        expected = " or ".join(dict.fromkeys(KIND_NAMES[shape_kind(alternative)] for alternative in alternatives))
        return f"{where or 'the file'} is {KIND_NAMES.get(type(value), type(value).__name__)}, not {expected}"
    shape = matching[0]
    if isinstance(shape, list):
        inner = [(f"{where}[{index}]", item, shape[0]) for index, item in enumerate(value)]
    elif isinstance(shape, dict | Each):
        missing = [key for key in (shape.required if isinstance(shape, Each) else shape) if key not in value]
        if missing:
            return f"{where or 'the file'} has no {missing[0]!r}"
        shapes = dict.fromkeys(value, shape.shape) if isinstance(shape, Each) else shape
        inner = [(f"{where}.{key}" if where else key, value[key], inner_shape) for key, inner_shape in shapes.items()]
    else:
        return None
    return next((error for path, item, inner_shape in inner if (error := shape_error(item, inner_shape, path))), None)


class Stages:
    """The stage files under WORK/stages: a stage runs once, and its file is its result."""

    def __init__(self, work_dir: Path):
        self.folder = work_dir / "stages"

    def path(self, stage: str) -> Path:
        return self.folder / (stage.replace("/", "--") + ".json")

    def done(self, stage: str, settings: dict) -> dict | None:
        """The stage's result when it has run with these settings; None when it has not run."""
        path = self.path(stage)
        if not path.exists():
            return None
        result = self.check(stage, read_json(path, "a stage file", STAGE_REMEDY), {"settings": dict})
        if result["settings"] != settings:
            raise SystemExit(f"{SCRIPT}: {path} was measured with other settings ({result.get('settings')}, now "
                             f"{settings}); use another --work-dir or remove the file")
        print(f"{stage}: done ({path})", flush=True)
        return result

    def check(self, stage: str, result: object, shape: object) -> dict:
        """The stage's result (as done or save returned it) where it has `shape`, what its reader reads of it
        (shape_error); SystemExit naming the stage's file where it does not."""
        error = shape_error(result, shape)
        if error:
            raise SystemExit(f"{SCRIPT}: {self.path(stage)}: not a {stage} stage file ({error}); {STAGE_REMEDY}")
        return result

    def save(self, stage: str, settings: dict, result: dict, began: float) -> dict:
        """Write the stage's file: its settings, its result, and its wall seconds since `began` (perf_counter)."""
        record = {"settings": settings, **result, "wall_seconds": round(time.perf_counter() - began, 1)}
        self.folder.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.path(stage), json.dumps(record, indent=1) + "\n")
        return record


def run_logged(command: list[str], log_file: Path, environment: dict[str, str]) -> str:
    """Run a command with its output in log_file (and returned); a failure exits with one line naming the log."""
    print("+ " + shlex.join(command), flush=True)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "w", encoding="utf-8") as log:
        status = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=environment, cwd=ROOT).returncode
    output = log_file.read_text(encoding="utf-8", errors="replace")
    if status != 0:
        last = [line for line in output.splitlines() if line.strip()][-1:] or ["(no output)"]
        raise SystemExit(f"{SCRIPT}: {command[0]} {command[1] if len(command) > 1 else ''} failed with status "
                         f"{status}: {last[0]} (log: {log_file})")
    return output


def validation_curve(report_file: Path) -> list[dict]:
    """[{step, minutes, mlm_loss, mlm_accuracy}] of a run_pretraining.py report's validation records."""
    curve = {}
    for record in read_report(report_file):
        data = record.get("data", {})
        if record["type"] == LOG and "eval_mlm_accuracy" in data and "elapsed_training_minutes" in data:
            step = training_step(record["step"])
            curve[step] = {"step": step, "minutes": data["elapsed_training_minutes"],
                           "mlm_loss": data["eval_mlm_loss"], "mlm_accuracy": data["eval_mlm_accuracy"]}
    return [curve[step] for step in sorted(curve)]


def training_totals(report_file: Path) -> dict:
    """Steps and minutes of training of a run_pretraining.py report (its last --log-freq record), and its
    sequences where the report counts them (trained_sequences; not in reports from before the count was kept)."""
    last = {}
    for record in read_report(report_file):
        data = record.get("data", {})
        if record["type"] == LOG and training_step(record["step"]) is not None and "elapsed_training_minutes" in data:
            last.update(steps=training_step(record["step"]), minutes=data["elapsed_training_minutes"])
            if "trained_sequences" in data:  # the intervals' records have it, the validation records not
                last["sequences"] = data["trained_sequences"]
    return last


def step_sequences(parameters: dict) -> int:
    """The sequences of a full step of a run_pretraining.py run (its report's PARAMETER record)."""
    return int(parameters["batch_size"]) * int(parameters["gradient_merge_steps"])


def trains_phase2(arguments: dict) -> bool:
    """Whether a preset's run_pretraining.sh arguments give phase 2 a share of the time budget (argument 53); the
    arguments of a report from before argument 53 have none, its default: 0."""
    return float(arguments.get("phase2_budget_share", 0)) > 0


def phase_totals(report_file: Path) -> dict:
    """One phase's steps, minutes, sequences and validation curve from its run_pretraining.py report."""
    totals = training_totals(report_file)
    return {"validation": validation_curve(report_file),
            "sequences": totals.get("steps", 0) * step_sequences(run_parameters(report_file)),
            **totals}  # the report's own count of sequences where it has one


def padded_tokens_per_sequence(pipeline: dict | str) -> float | None:
    """The positions a training sequence of these shards fills, padding included, from the data pipeline's
    summary; None when the data stage found the shards built and did not count them."""
    if not isinstance(pipeline, dict):
        return None
    return (pipeline["sample_tokens"] + pipeline["padding_tokens"]) / pipeline["samples"]


def check_budget_spent(run: Run, totals: dict) -> None:
    """A run that stopped before its budget is not a result: a signal stops run_pretraining.py at a checkpoint
    with status 0, and the same command continues it."""
    minutes = totals.get("minutes", 0.0)
    if minutes < run.budget:
        raise SystemExit(f"{SCRIPT}: {run.name} stopped after {minutes:.2f} of its {run.budget:g} minutes "
                         "(interrupted?); run the same command again to continue it")


def final_checkpoint(output: str) -> str:
    """The path run_pretraining.sh names in its last line, "Final checkpoint: PATH"."""
    lines = [line for line in output.splitlines() if line.startswith("Final checkpoint: ")]
    if not lines:
        raise SystemExit(f"{SCRIPT}: run_pretraining.sh did not name its final checkpoint")
    return lines[-1].removeprefix("Final checkpoint: ").strip()


def run_parameters(report_file: Path) -> dict:
    """The PARAMETER record of a run_pretraining.py report: every option the run was given."""
    for record in read_report(report_file):
        if record["type"] == LOG and record["step"] == "PARAMETER":
            return record["data"]
    raise SystemExit(f"{SCRIPT}: {report_file}: no PARAMETER record")


class Yardstick:
    """The stages of one yardstick in one work folder (the module docstring)."""

    def __init__(self, args: argparse.Namespace):
        self.quick = args.quick
        self.report_only = args.report_only
        self.work_dir = Path(args.work_dir).resolve()
        self.preset = args.preset or ("cpu_budget_tiny" if self.quick else DEFAULT_PRESET)
        self.stages = Stages(self.work_dir)
        model, _ = machine.cpu_model_and_cores()
        self.cpu = f"{model}; flags: {' '.join(machine.kernel_flags())}"
        self.environment = {**os.environ, "BERT_PREP_WORKING_DIR": str(self.work_dir / "data"),
                            "PADDLEBERT_SHARED_DIR": str(shared_dir())}
        self.preset_args = self.arguments_of(self.preset)
        self.torch_python = args.torch_python if not self.quick else None
        self.args = args

    def arguments_of(self, preset: str) -> dict[str, str]:
        """A preset's arguments; under --quick those of the miniature: a slice of the corpus and a model that
        trains in seconds, validated every few seconds on a few batches."""
        arguments = preset_arguments(preset, self.environment)
        if self.quick:
            arguments.update(wikipedia_source=str(self.corpus_slice()), train_batch_size="8",
                             eval_interval_minutes="0.1", num_eval_batches="2", save_checkpoint_steps="20",
                             holdout_fraction="0.05")
        return arguments

    @property
    def trial_budget(self) -> float:
        """The minutes of each --compare-sizes and --search trial (a few seconds under --quick)."""
        return 0.1 if self.quick else TRIAL_BUDGET

    def size_runs(self) -> tuple[Run, ...]:
        budget = self.trial_budget
        return tuple(Run(f"{size}-{budget:g}", "ours", budget, preset=f"cpu_budget_{size}") for size in SIZES)

    def search_runs(self) -> tuple[Run, ...]:
        budget = self.trial_budget
        return tuple(Run(f"tiny-{budget:g}-{optimizer.lower()}-{rate}" + (f"-b{batch}" if batch else ""), "ours",
                         budget, optimizer, rate, preset="cpu_budget_tiny", batch=batch)
                     for optimizer, rate, batch in SEARCH)

    def recipe_runs(self, presets: list[str]) -> tuple[Run, ...]:
        """--recipe-trials: the yardstick's own ours run at --recipe-budget (under --quick: the miniature's), the
        baseline, then each preset's run at its budget."""
        budget = self.args.recipe_budget
        if self.quick and budget != RECIPE_TRIAL_BUDGET:
            raise SystemExit(f"{SCRIPT}: --recipe-budget: --quick has one budget, the miniature's")
        baselines = [run for run in (QUICK_RUNS if self.quick else RUNS) if run.engine == "ours" and run.downstream
                     and (self.quick or run.budget == budget)]
        if not baselines:
            budgets = ", ".join(f"{run.budget:g}" for run in RUNS if run.engine == "ours" and run.downstream)
            raise SystemExit(f"{SCRIPT}: --recipe-budget {budget:g}: the yardstick has no plain run at that budget "
                             f"to compare with (it has {budgets})")
        baseline = baselines[0]
        return (baseline, *(Run(f"{preset}-{baseline.budget:g}", "ours", baseline.budget, preset=preset)
                            for preset in presets))

    def done(self, stage: str, settings: dict, shape: object) -> dict | None:
        """The stage's result when it has run with these settings, checked for `shape`, what the caller reads of it
        (shape_error); None when it has not run."""
        result = self.stages.done(stage, settings)
        return result and self.stages.check(stage, result, shape)

    def preset_of(self, run: Run) -> str:
        """The preset a run trains: its own, else --preset."""
        return run.preset or self.preset

    def settings(self, run: Run) -> dict:
        """What a pretraining stage's result depends on: the run, its preset and the preset's arguments (an edited
        preset is another run), and the CPU whose minutes it spent."""
        preset = self.preset_of(run)
        arguments = {name: self.portable(value) for name, value in self.arguments_of(preset).items()}
        return {**asdict(run), "preset": preset, "arguments": arguments, "cpu": self.cpu}

    def portable(self, value: str) -> str:
        """A setting as it reads in any clone and work folder: their paths replaced by <code> and <work>."""
        return value.replace(str(ROOT), "<code>").replace(str(self.work_dir), "<work>")

    def corpus_slice(self) -> Path:
        """--quick's corpus: the first QUICK_CORPUS_FILES files of the shared Wikipedia folder, linked."""
        source = Path(shared_dir(), "data", "wikipedia", "en-2015")
        folder = self.work_dir / "corpus-slice"
        for file in sorted(source.rglob("wiki_*"))[:QUICK_CORPUS_FILES]:
            link = folder / file.relative_to(source)
            if not link.exists():
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to(file)
        return folder

    def pretraining_command(self, run: Run) -> tuple[list[str], dict[str, str]]:
        """run_pretraining.sh with the preset's arguments, the run's budget, optimizer, learning rate and results
        folder in place of the preset's, and its environment."""
        arguments = dict(self.arguments_of(run.preset) if run.preset else self.preset_args, optimizer=run.optimizer,
                         results_dir=str(self.work_dir / "runs" / run.name))
        if run.learning_rate is not None:
            arguments["learning_rate"] = run.learning_rate
        if run.accumulation is not None:
            arguments["gradient_accumulation_steps"] = str(run.accumulation)
        if run.batch is not None:
            arguments["train_batch_size"] = str(run.batch)
        if run.budget > 0:
            arguments["time_budget"] = f"{run.budget:g}"
        return ["bash", str(ROOT / "scripts" / "run_pretraining.sh"), *arguments.values()], self.environment

    def data(self, preset: str | None = None) -> dict:
        """The shards (and a vocabulary trained for them) of --preset or of a recipe trial's own preset, built by
        run_pretraining.sh with PREPROCESS_ONLY=true; a trial that reads --preset's shards finds them built."""
        preset = preset or self.preset
        stage = "data" if preset == self.preset else f"data/{preset}"
        arguments = self.arguments_of(preset)
        phase2 = trains_phase2(arguments)  # phase 2's shards then follow phase 1's
        settings = {"preset": preset, "corpus": self.portable(arguments["wikipedia_source"])}
        done = self.done(stage, settings, data_shape(phase2))
        if done:
            return done
        if self.report_only:
            raise SystemExit(f"{SCRIPT}: --report-only: {self.stages.path(stage)}: the data stage has not run")
        command, environment = self.pretraining_command(Run(stage, "ours", 0.0, preset=preset))
        began = time.perf_counter()
        output = run_logged(command, self.work_dir / "logs" / f"{stage.replace('/', '-')}.log",
                            {**environment, "PREPROCESS_ONLY": "true"})
        summaries = [json.loads(line) for line in output.splitlines() if line.startswith('{"output_dir"')]
        nothing = "the data folder was there already: nothing was built"
        return self.stages.save(stage, settings, {
            "pipeline": summaries[0] if len(summaries) > phase2 else nothing,
            **({"pipeline_phase2": summaries[-1] if summaries else nothing} if phase2 else {})}, began)

    def pretrained(self, run: Run) -> dict | None:
        """pretrain's result, checked for what the fine-tuning and the reports read of it."""
        result = self.pretrain(run)
        return result and self.stages.check(f"pretrain/{run.name}", result, pretraining_shape(run.engine))

    def pretrain(self, run: Run) -> dict | None:
        """The run's pretraining stage, run now unless it is done; None under --report-only when it is not."""
        settings = self.settings(run)
        done = self.stages.done(f"pretrain/{run.name}", settings)
        if done or self.report_only:
            return done
        began = time.perf_counter()
        if run.engine == "random":
            result = {"checkpoint": None, "validation": [], "steps": 0, "sequences": 0, "minutes": 0.0}
        elif run.engine == "ours":
            result = self.pretrain_ours(run)
        else:
            result = self.pretrain_peer(run)
        return self.stages.save(f"pretrain/{run.name}", settings, result, began)

    def pretrain_ours(self, run: Run) -> dict:
        """run_pretraining.sh's run: phase 1, and phase 2 where the preset gives it a share of the budget
        (phase2_budget_share), whose steps, sequences, minutes and validation points follow phase 1's."""
        command, environment = self.pretraining_command(run)
        output = run_logged(command, self.work_dir / "logs" / f"pretrain-{run.name}.log", environment)
        results_dir = Path(command[2 + preset_argument_names().index("results_dir")])
        report = results_dir / "dllogger_p1.json"
        result = {"engine": "ours (PaddleBERT run_pretraining.py)", "checkpoint": final_checkpoint(output),
                  "report": str(report), **phase_totals(report)}
        preset = self.preset_of(run)
        if trains_phase2(self.arguments_of(preset)):
            phase2 = phase_totals(results_dir / "dllogger_p2.json")
            tokens_per_sequence = padded_tokens_per_sequence(self.data(preset)["pipeline_phase2"])
            tokens = phase2["sequences"] * tokens_per_sequence if tokens_per_sequence else None
            result.update(phase2={**phase2, "tokens": tokens},
                          validation=result["validation"] + [
                              {**point, "step": point["step"] + result["steps"],
                               "minutes": point["minutes"] + result["minutes"]} for point in phase2["validation"]],
                          **{key: result[key] + phase2[key] for key in ("steps", "sequences", "minutes")})
        check_budget_spent(run, result)
        return result

    def pretrain_peer(self, run: Run) -> dict:
        """The transformers peer with the options of ours at the same budget, read from that run's report."""
        from training.pretraining_eval import EVAL_SEED

        ours_run = Run(f"ours-{run.budget:g}", "ours", run.budget)
        ours = self.done(f"pretrain/{ours_run.name}", self.settings(ours_run), pretraining_shape(ours_run.engine))
        if ours is None:
            raise SystemExit(f"{SCRIPT}: {run.name} copies the options of {ours_run.name}, which has not run")
        options = run_parameters(Path(ours["report"]))
        mismatch = peer_mismatch(options)
        if mismatch:
            raise SystemExit(f"{SCRIPT}: {run.name} cannot copy ours-{run.budget:g}: {mismatch}")
        output_dir = self.work_dir / "runs" / run.name
        command = [peers.peer_python(self.args, "transformers", SCRIPT), str(ROOT / "benchmarks" /
                                                                               "hf_pretraining_peer.py")]
        for name in ("input_dir", "eval_dir", "vocab_file", "config_file", "batch_size", "max_seq_length",
                     "max_predictions_per_seq", "masked_lm_ratio", "learning_rate", "warmup_proportion",
                     "eval_interval_minutes", "num_eval_batches", "seed"):
            command += ["--" + name.replace("_", "-"), str(options[name])]
        command += ["--time-budget", f"{run.budget:g}", "--eval-seed", str(EVAL_SEED), "--output-dir", str(output_dir)]
        run_logged(command, self.work_dir / "logs" / f"pretrain-{run.name}.log", self.environment)
        log = json.loads((output_dir / "peer_log.json").read_text(encoding="utf-8"))
        return {"engine": log["engine"], "checkpoint": str(output_dir), "steps": log["steps"],
                "sequences": log["sequences"], "minutes": log["training_minutes"],
                "validation": [{"step": record["step"], "minutes": record["elapsed_minutes"],
                                "mlm_loss": record["eval_mlm_loss"], "mlm_accuracy": record["eval_mlm_accuracy"]}
                               for record in log["validation"]]}

    def context_free(self, run: Run, pretrained: dict) -> dict | None:
        """The context-free floor of validation masked-LM accuracy (mlm_baselines.py): its predictors fitted on
        the first training batches of `run` (an ours run) and scored on the validation batches its evaluations read;
        None under --report-only when it has not been counted."""
        from mlm_baselines import context_free_accuracy

        from pretraining_dataset import PretrainingDataLoader
        from tokenizer import load_vocab
        from training.pretraining_eval import EVAL_SEED

        train_batches = QUICK_CONTEXT_FREE_TRAIN_BATCHES if self.quick else CONTEXT_FREE_TRAIN_BATCHES
        settings = {"run": run.name, "train_batches": train_batches}
        done = self.done("context-free", settings, CONTEXT_FREE_SHAPE)
        if done or self.report_only:
            return done
        began = time.perf_counter()
        options = run_parameters(Path(pretrained["report"]))

        def loader(folder: str, seed: int, masked_lm_ratio: float) -> PretrainingDataLoader:
            return PretrainingDataLoader(folder, options["vocab_file"], int(options["batch_size"]),
                                         int(options["max_seq_length"]), int(options["max_predictions_per_seq"]),
                                         seed, masked_lm_ratio=masked_lm_ratio, nsp=not options["no_nsp"])

        training = loader(options["input_dir"], int(options["seed"]), float(options["masked_lm_ratio"]))
        validation = loader(options["eval_dir"], EVAL_SEED, MASKED_LM_RATIO)  # as pretraining_eval.py masks
        accuracy = context_free_accuracy(islice(training, train_batches),
                                         islice(validation, int(options["num_eval_batches"])),
                                         load_vocab(options["vocab_file"])["[MASK]"])
        return self.stages.save("context-free", settings, {"accuracy": accuracy}, began)

    def finished(self, run: Run) -> dict | None:
        """The run's pretraining result with its downstream scores when both stages are done; never runs them."""
        pretrained = self.done(f"pretrain/{run.name}", self.settings(run), pretraining_shape(run.engine))
        stage = pretrained and self.done(f"downstream/{run.name}", self.downstream_settings(run, pretrained),
                                         DOWNSTREAM_SHAPE)
        return {**pretrained, "downstream": stage["downstream"]} if stage else None

    def downstream_settings(self, run: Run, pretrained: dict) -> dict:
        """What a downstream stage's result depends on: the run, its checkpoint, and the fine-tuning plan and
        hyperparameters (a result of another fine-tuning recipe is not this one's)."""
        mode = "quick" if self.quick else "standard"
        # the tasks the yardstick scores, downstream.py's default ones: plans of other tasks change no result here
        plan = {task: asdict(downstream_plan.PLAN[mode][task]) for task in downstream_plan.TASKS}
        return {**asdict(run), "preset": self.preset_of(run), "checkpoint": pretrained["checkpoint"],
                "quick": self.quick, **json.loads(json.dumps(  # as the stage file holds them: lists, not tuples
                    {"plan": plan, "hyperparameters": downstream_plan.HYPERPARAMETERS}))}

    def downstream_dir(self, run: Run, settings: dict) -> Path:
        """downstream.py's --output-dir for the run under these settings. downstream.py resumes the units of its own
        setup and refuses another's, so a new plan or checkpoint gets a folder of its own (named by a hash of the
        settings) instead of stopping on the units of the old one."""
        key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]
        return self.work_dir / "downstream" / run.name / key

    def downstream(self, run: Run, pretrained: dict) -> dict:
        settings = self.downstream_settings(run, pretrained)
        done = self.done(f"downstream/{run.name}", settings, DOWNSTREAM_SHAPE)
        if done or self.report_only:
            return done
        began = time.perf_counter()
        output_dir = self.downstream_dir(run, settings)
        command = [sys.executable, str(ROOT / "downstream.py"), "--output-dir", str(output_dir)]
        if run.engine == "random":
            command += ["--random-init", "--config-file", self.preset_args["BERT_CONFIG"]]
        else:
            command.append(pretrained["checkpoint"])
        if self.quick:
            command.append("--quick")
        run_logged(command, self.work_dir / "logs" / f"downstream-{run.name}.log", self.environment)
        result = json.loads((output_dir / "downstream.json").read_text(encoding="utf-8"))
        return self.stages.save(f"downstream/{run.name}", settings, {"downstream": result}, began)


def shared_dir() -> Path:
    """../shared beside the project, or $PADDLEBERT_SHARED_DIR."""
    return Path(os.environ.get("PADDLEBERT_SHARED_DIR", ROOT.parent / "shared")).resolve()


QUICK_CORPUS_FILES = 2
# The score of each task that enters the averages: GLUE's convention (MRPC: the mean of accuracy and F1), SQuAD's F1.
MAIN_SCORES = {"sst-2": ("accuracy",), "mrpc": ("accuracy", "f1"), "rte": ("accuracy",), "cola": ("mcc",),
               "squad": ("F1",)}
GLUE_TASKS = ("sst-2", "mrpc", "rte", "cola")

# What the yardstick reads of each stage's file (shape_error), checked as it reads the file back, so that a torn or
# hand-edited file stops it in one line naming the file. The data stage's pipeline: the preprocessor's summary, or
# a sentence where the shards were there already.
PIPELINE_SHAPE = (str, {"documents": int, "tokens": int, "samples": int, "padding_fraction": NUMBER,
                        "sample_tokens": int, "padding_tokens": int, "holdout": {"documents": int}})
# Each task's scores that the tables show (SQuAD's exact match too), with their seeds, median, spread and majority.
SCORE_SHAPE = {"seeds": Each(NUMBER), "median": NUMBER, "spread": NUMBER, "majority": NUMBER}
PLAN_SHAPE = {"seeds": list, "epochs": int, "train_subset": (int, type(None))}
DOWNSTREAM_SHAPE = {"downstream": {"tasks": {
    task: {"scores": Each(SCORE_SHAPE, names), "plan": PLAN_SHAPE, "hyperparameters": {"learning_rate": NUMBER}}
    for task, names in {**MAIN_SCORES, "squad": ("exact_match", "F1")}.items()}}, "wall_seconds": NUMBER}
CONTEXT_FREE_SHAPE = {"accuracy": dict.fromkeys(PREDICTORS, NUMBER)}


def data_shape(phase2: bool) -> dict:
    """What the yardstick reads of a data stage: its pipeline, and phase 2's where the preset trains phase 2."""
    shape = {"pipeline": PIPELINE_SHAPE, "wall_seconds": NUMBER}
    return {**shape, "pipeline_phase2": PIPELINE_SHAPE} if phase2 else shape


def pretraining_shape(engine: str) -> dict:
    """What the yardstick reads of a pretraining stage of a run of `engine` (Run.engine): its checkpoint (None for
    random init), validation curve, steps, sequences and minutes; ours' run_pretraining.py report too."""
    point = {"step": int, "minutes": NUMBER, "mlm_loss": NUMBER, "mlm_accuracy": NUMBER}
    shape = {"checkpoint": (str, type(None)), "validation": [point], "steps": int, "sequences": int,
             "minutes": NUMBER, "wall_seconds": NUMBER}
    return {**shape, "report": str} if engine == "ours" else shape


def task_score(downstream: dict, task: str) -> float:
    """A task's median score (MRPC: the mean of its accuracy and F1 medians)."""
    scores = downstream["tasks"][task]["scores"]
    return statistics.fmean(scores[name]["median"] for name in MAIN_SCORES[task])


def averages(downstream: dict) -> dict:
    """The GLUE average (four tasks) and the downstream average (those and SQuAD F1) of a run's medians."""
    return {"glue_average": statistics.fmean(task_score(downstream, task) for task in GLUE_TASKS),
            "downstream_average": statistics.fmean(task_score(downstream, task) for task in MAIN_SCORES)}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=SCRIPT, description=__doc__.split("\n\n")[0])
    parser.add_argument("--work-dir", default=str(ROOT / "results" / "time_to_quality"),
                        help="where data, checkpoints and stage results go; a rerun continues there")
    parser.add_argument("--preset", default=None,
                        help=f"pretraining preset of scripts/configs/pretrain_config.sh (default {DEFAULT_PRESET}; "
                             "with --quick cpu_budget_tiny)")
    parser.add_argument("--report-dir", default=None,
                        help="folder for the reports, time-to-quality.{json,png,md} or a mode's "
                             "time-to-quality-<mode>.{json,md} (default WORK/report, in --work-dir; the project's "
                             "published pages: --report-dir docs)")
    # The switches; of them the modes --compare-sizes and --search, with --recipe-trials, each write a report of their
    # own in place of the yardstick's: one mode at a time.
    modes = parser.add_mutually_exclusive_group()
    for group, flag, text in (
            (parser, "--quick", "the miniature: a slice of the corpus, a tiny model, budgets of seconds, --quick "
                                "fine-tuning, no transformers peer"),
            (parser, "--report-only", "run nothing: write the report of the runs whose stages are done, naming the "
                                      "others"),
            (parser, "--data-only", "build the data stages and stop: --preset's shards and, with --recipe-trials, "
                                    "each trial preset's (its vocabulary too), e.g. before the timed runs on an idle "
                                    "machine"),
            (modes, "--compare-sizes", f"instead: pretrain each of the {', '.join(SIZES)} budget presets for "
                                       f"{TRIAL_BUDGET:g} minutes and write time-to-quality-sizes.{{json,md}} "
                                       "(validation MLM accuracy by size)"),
            (modes, "--search", f"instead: pretrain bert-tiny for {TRIAL_BUDGET:g} minutes with each optimizer and "
                                "learning rate of SEARCH and write time-to-quality-search.{json,md}")):
        group.add_argument(flag, action="store_true", help=text)
    modes.add_argument("--recipe-trials", nargs="+", metavar="PRESET", default=None,
                       help=f"instead: pretrain --preset and each PRESET (a budget-recipe variant) for "
                            f"{RECIPE_TRIAL_BUDGET:g} minutes, score each downstream, and write "
                            "time-to-quality-recipes.{json,md}")
    parser.add_argument("--recipe-budget", type=positive_float, default=RECIPE_TRIAL_BUDGET, metavar="MINUTES",
                        help=f"with --recipe-trials: the trials' budget, that of one of the yardstick's own runs of "
                             f"--preset, their baseline (default {RECIPE_TRIAL_BUDGET:g}); another than "
                             f"{RECIPE_TRIAL_BUDGET:g} writes time-to-quality-recipes-MINUTES.{{json,md}}")
    flag, venv, holds = peers.PEER_ENVIRONMENTS["transformers"]
    peers_dir = os.environ.get(peers.PEERS_DIR_VARIABLE)
    parser.add_argument(flag, default=os.path.join(peers_dir, venv, "bin", "python") if peers_dir else None,
                        help=f"a Python with {holds} for the peer "
                             f"(default ${peers.PEERS_DIR_VARIABLE}/{venv}/bin/python)")
    args = parser.parse_args(argv)
    if args.report_dir is None:  # never the project's docs/ unless asked in so many words (issue 66)
        args.report_dir = str(Path(args.work_dir) / "report")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    check_folder("--work-dir", Path(args.work_dir))
    check_folder("--report-dir", Path(args.report_dir))
    check_presets(args)
    machine.print_header()
    yardstick = Yardstick(args)
    data = yardstick.data()
    if args.data_only:
        for preset in args.recipe_trials or []:
            yardstick.data(preset)
        return
    if args.compare_sizes or args.search:
        kind, runs = ("sizes", yardstick.size_runs()) if args.compare_sizes else ("search", yardstick.search_runs())
        trials = {run.name: yardstick.pretrained(run) for run in runs}
        unfinished = [name for name, trial in trials.items() if trial is None]  # --report-only
        if unfinished:
            print(f"not finished, so not in the report: {', '.join(unfinished)}")
        write_trials_report(args, kind, {name: trial for name, trial in trials.items() if trial is not None})
        return
    if args.recipe_trials:
        trials = {}
        baseline, *_ = runs = yardstick.recipe_runs(args.recipe_trials)
        for run in runs:
            if run.preset and not args.report_only:  # a trial's own shards; the baseline's are --preset's
                yardstick.data(run.preset)
            pretrained = yardstick.pretrained(run)
            stage = yardstick.downstream(run, pretrained) if pretrained else None
            if stage:  # None only under --report-only, for a trial not finished yet
                trials[run.name] = {**pretrained, "downstream": stage["downstream"]}
        checks = None
        if args.recipe_budget != RECIPE_TRIAL_BUDGET and baseline.name in trials:
            # The half-time target reads the 20-minute trials only where 20 minutes is at most half the budget.
            half_time = {}
            if RECIPE_TRIAL_BUDGET <= args.recipe_budget / 2:
                shorter = (Run(f"{preset}-{RECIPE_TRIAL_BUDGET:g}", "ours", RECIPE_TRIAL_BUDGET, preset=preset)
                           for preset in args.recipe_trials)
                half_time = {run.name: scored for run in shorter if (scored := yardstick.finished(run))}
            checks = recipe_targets(trials, baseline.name, half_time)
        write_trials_report(args, recipes_report_kind(args.recipe_budget), trials, checks)
        return
    results, missing = {}, []
    runs = QUICK_RUNS if args.quick else RUNS
    for run in runs:
        pretrained = yardstick.pretrained(run)
        stage = yardstick.downstream(run, pretrained) if run.downstream and pretrained else None
        if pretrained is None or (run.downstream and stage is None):  # --report-only: not finished yet
            missing.append(run.name)
            continue
        results[run.name] = {"run": asdict(run), "pretraining": pretrained}
        if stage:
            results[run.name].update(downstream=stage["downstream"], downstream_wall_seconds=stage["wall_seconds"])
    floor_run = next(run for run in runs if run.engine == "ours")
    floor = yardstick.context_free(floor_run, results[floor_run.name]["pretraining"]) \
        if floor_run.name in results else None
    write_report(args, data, results, missing, floor and floor["accuracy"])


# ---------------------------------------------------------------------------------------------------------------
# The report


def targets(results: dict) -> list[dict]:
    """The issue's must-hold targets and aims, each with its figures and whether it holds; a target whose runs are
    missing (--quick has no 60-minute run and no peer) is left out."""
    checks = []
    random, ours60, ours20, peer20 = (results.get(name) for name in ("random", "ours-60", "ours-20",
                                                                         "transformers-20"))
    if random and ours60:
        for task in MAIN_SCORES:
            for name in MAIN_SCORES[task]:
                ours_score = ours60["downstream"]["tasks"][task]["scores"][name]
                random_score = random["downstream"]["tasks"][task]["scores"][name]
                margin = ours_score["median"] - random_score["median"]
                spread = max(ours_score["spread"], random_score["spread"])
                need = max(2 * spread, 10.0) if task == "squad" else 2 * spread
                checks.append({"target": f"60 min beats random init on {task} {name} by more than "
                                         + ("10 points and " if task == "squad" else "") + "twice the spread",
                               "kind": "must", "value": margin, "needed": need, "holds": margin > need})
    if ours60:
        curve = ours60["pretraining"]["validation"]
        if curve:
            rise = (curve[-1]["mlm_accuracy"] - curve[0]["mlm_accuracy"]) * 100  # points, as the scores
            checks.append({"target": "validation MLM accuracy rises over the 60-minute run", "kind": "must",
                           "value": rise, "needed": 0.0, "holds": rise > 0})
        aims = (("sst-2", "accuracy", 83.0), ("mrpc", "accuracy", 72.0), ("cola", "mcc", 10.0), ("squad", "F1", 40.0))
        for task, name, aim in aims:
            value = ours60["downstream"]["tasks"][task]["scores"][name]["median"]
            checks.append({"target": f"aim: {task} {name} at 60 min", "kind": "aim", "value": value, "needed": aim,
                           "holds": value >= aim})
    if ours20 and peer20:
        ours_accuracy = ours20["pretraining"]["validation"][-1]["mlm_accuracy"]
        peer_accuracy = peer20["pretraining"]["validation"][-1]["mlm_accuracy"]
        checks.append({"target": "20 min: ours at or above transformers on validation MLM accuracy", "kind": "must",
                       "value": (ours_accuracy - peer_accuracy) * 100, "needed": 0.0,
                       "holds": ours_accuracy >= peer_accuracy})
        difference = (averages(ours20["downstream"])["downstream_average"]
                      - averages(peer20["downstream"])["downstream_average"])
        checks.append({"target": "20 min: ours at or above transformers on the downstream average", "kind": "must",
                       "value": difference, "needed": 0.0, "holds": difference >= 0})
    return checks


def recipe_targets(trials: dict, baseline: str, half_time: dict) -> list[dict]:
    """Issue 43's targets for the budget-recipe presets run at the yardstick's 60 minutes: each at least 2 points
    above the plain recipe (`baseline`, the same budget) on the GLUE average; and each preset's RECIPE_TRIAL_BUDGET
    run (`half_time`: name -> scored trial), at most half the time, at or above the plain recipe's 60-minute
    downstream average."""
    plain = averages(trials[baseline]["downstream"])
    checks = []
    for name, trial in trials.items():
        if name != baseline:
            gain = averages(trial["downstream"])["glue_average"] - plain["glue_average"]
            checks.append({"target": f"{name}: GLUE average at least 2 points above {baseline}", "kind": "must",
                           "value": gain, "needed": 2.0, "holds": gain >= 2.0})
    for name, trial in half_time.items():
        difference = averages(trial["downstream"])["downstream_average"] - plain["downstream_average"]
        checks.append({"target": f"{name}: at or above {baseline}'s downstream average in at most half the time",
                       "kind": "must", "value": difference, "needed": 0.0, "holds": difference >= 0})
    return checks


def target_table(checks: list[dict]) -> list[str]:
    """The markdown rows of targets' or recipe_targets' checks."""
    return ["| target | kind | value | needed | holds |", "|---|---|---|---|---|"] + [
        f"| {check['target']} | {check['kind']} | {check['value']:.2f} | {check['needed']:.2f} | "
        f"{'yes' if check['holds'] else '**no**'} |" for check in checks]


# The summary table's rows (docs/time-to-quality-summary.md): run name -> label.
SUMMARY_LABELS = {"random": "random init", "ours-60": "ours, 60 min", "ours-20": "ours, 20 min",
                  "transformers-20": "HF transformers, 20 min",
                  "cpu_budget_tiny_prenorm-20": "ours, pre-LN and no dropout, 20 min",
                  "cpu_budget_tiny_8k_vocab-20": "ours, 8k vocabulary, 20 min",
                  "cpu_budget_tiny_batch16-20": "ours, batch 16, 20 min",
                  "cpu_budget_tiny_mask30-20": "ours, 30% masking, 20 min",
                  "cpu_budget_tiny_gated-20": "ours, gated GELU, 20 min",
                  "cpu_budget_tiny_wsd-20": "ours, warmup-stable-decay, 20 min",
                  "cpu_budget_tiny_ramp-20": "ours, batch ramp 16 to 64, 20 min",
                  "cpu_budget_tiny_nobias-20": "ours, no linear biases, 20 min",
                  "cpu_budget_tiny_nobias-60": "ours, no linear biases, 60 min",
                  "cpu_budget_tiny_onecycle-20": "ours, one-cycle schedule, 20 min",
                  "cpu_budget_tiny_8k_vocab-60": "ours, 8k vocabulary, 60 min",
                  "cpu_budget_tiny_alibi-20": "ours, ALiBi, 20 min",
                  "cpu_budget_tiny_alibi-60": "ours, ALiBi, 60 min",
                  "cpu_budget_tiny_alibi_8k_vocab-20": "ours, ALiBi and 8k vocabulary, 20 min",
                  "cpu_budget_tiny_alibi_nobias-20": "ours, ALiBi and no linear biases, 20 min",
                  "cpu_budget_tiny_alibi_nobias-60": "ours, ALiBi and no linear biases, 60 min",
                  "cpu_budget_tiny_seq512-20": "ours, last tenth at length 512, 20 min"}


def score_cell(entry: dict) -> str:
    """A score as the tables show it: the median, and ± the spread where there are several seeds."""
    return f"{entry['median']:.1f} ± {entry['spread']:.1f}" if len(entry["seeds"]) > 1 else f"{entry['median']:.1f}"


def summary_table(results: dict) -> str:
    """The short table of the scored runs that docs/time-to-quality-summary.md shows: validation MLM accuracy and
    each main score."""
    lines = ["| run | val MLM acc | SST-2 acc | MRPC acc / F1 | RTE acc | CoLA MCC | SQuAD EM / F1 |",
             "|---|---|---|---|---|---|---|"]
    for name, result in results.items():
        downstream = result.get("downstream")
        if downstream is None:
            continue
        curve = result["pretraining"]["validation"]
        scores = {(task, score): score_cell(downstream["tasks"][task]["scores"][score])
                  for task, score in (("sst-2", "accuracy"), ("mrpc", "accuracy"), ("mrpc", "f1"),
                                      ("rte", "accuracy"), ("cola", "mcc"), ("squad", "exact_match"),
                                      ("squad", "F1"))}
        accuracy = f"{curve[-1]['mlm_accuracy'] * 100:.1f}%" if curve else "-"
        lines.append(f"| {SUMMARY_LABELS.get(name, name)} | {accuracy} | "
                     f"{scores['sst-2', 'accuracy']} | {scores['mrpc', 'accuracy']} / {scores['mrpc', 'f1']} | "
                     f"{scores['rte', 'accuracy']} | {scores['cola', 'mcc']} | "
                     f"{scores['squad', 'exact_match']} / {scores['squad', 'F1']} |")
    return "\n".join(lines)


def markdown(header: str, data: dict, results: dict, checks: list[dict], command: str, missing: list[str],
             floor: dict | None, trials: list[dict]) -> str:
    """docs/time-to-quality.md's tables: one row per run, the majority row, the context-free floor of validation
    MLM accuracy (floor: mlm_baselines.context_free_accuracy's figures, None before it is counted), and the
    targets; what has not run yet, and the CPUs the pretraining ran on; then the budget-recipe trials (`trials`:
    ablation's rows, none when no trials report is there)."""
    scored = {name: result for name, result in results.items() if "downstream" in result}
    any_run = next(iter(scored.values()))["downstream"]
    score_names = [(task, name) for task in MAIN_SCORES for name in any_run["tasks"][task]["scores"]]
    head = ["run", "pretraining min", "steps", "sequences", "val MLM acc"]
    head += [f"{task} {name}" for task, name in score_names] + ["GLUE avg", "avg"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, result in results.items():
        pretraining, downstream = result["pretraining"], result.get("downstream")
        accuracy = f"{pretraining['validation'][-1]['mlm_accuracy'] * 100:.1f}" if pretraining["validation"] else "-"
        cells = [name, f"{pretraining.get('minutes', 0.0):.1f}", str(pretraining.get("steps", 0)),
                 str(pretraining.get("sequences", 0)), accuracy]
        if downstream is None:  # the optimizer comparison: pretraining alone
            lines.append("| " + " | ".join(cells + ["-"] * (len(head) - len(cells))) + " |")
            continue
        cells += [score_cell(downstream["tasks"][task]["scores"][score]) for task, score in score_names]
        mean = averages(downstream)
        cells += [f"{mean['glue_average']:.1f}", f"{mean['downstream_average']:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    majority = ["majority / empty answer", "-", "-", "-", "-"]
    majority += [f"{any_run['tasks'][task]['scores'][score]['majority']:.1f}" for task, score in score_names]
    lines.append("| " + " | ".join(majority + ["-", "-"]) + " |")
    for name in PREDICTORS if floor else ():
        cells = [f"context-free: {name}", "-", "-", "-", f"{floor[name] * 100:.1f}"]
        lines.append("| " + " | ".join(cells + ["-"] * (len(head) - len(cells))) + " |")
    target_lines = target_table(checks)
    pipeline = data["pipeline"]
    data_line = (f"{pipeline['documents']} training articles, {pipeline['tokens']} tokens, {pipeline['samples']} "
                 f"samples ({pipeline['padding_fraction'] * 100:.1f}% padding); "
                 f"{pipeline['holdout']['documents']} articles held out; {data['wall_seconds']:.0f} s"
                 if isinstance(pipeline, dict) else pipeline)
    stage_minutes = {"data": data["wall_seconds"] / 60,
                     "pretraining": sum(result["pretraining"].get("wall_seconds", 0.0) for result in results.values())
                     / 60,
                     "fine-tuning": sum(result.get("downstream_wall_seconds", 0.0) for result in results.values()) / 60}
    wall_line = ("Wall time of the stages: " + ", ".join(f"{name} {minutes:.1f} min" for name, minutes in
                                                         stage_minutes.items())
                 + f"; the whole yardstick {sum(stage_minutes.values()):.1f} min.")
    if missing:
        wall_line = wall_line.replace("the whole yardstick", "the finished stages") + (
            f" **Not run yet: {', '.join(missing)}**; this report covers the finished runs (--report-only).")
    cpus = sorted({result["pretraining"]["settings"]["cpu"] for result in results.values()})
    plans = "; ".join(f"{task} {plan['epochs']} epoch{'s' * (plan['epochs'] > 1)} x {len(plan['seeds'])} seed"
                      f"{'s' * (len(plan['seeds']) > 1)}" + (f" on {plan['train_subset']} training examples"
                                                            if plan["train_subset"] else "")
                      for task, plan in ((task, any_run["tasks"][task]["plan"]) for task in MAIN_SCORES))
    return "\n".join([
        "# Time to quality", "", f"`{header}`", "", f"Command: `{command}`", "",
        f"Pretraining ran on: {'; and '.join(cpus)}.", "", f"Data: {data_line}.", "", wall_line, "",
        f"Fine-tuning (downstream.py, the same for every run): {plans}; peak learning rate GLUE / SQuAD "
        f"{finetuning_rates(any_run)}.", "",
        "Scores are medians over the seeds ± their spread (max - min) on the official dev sets; SQuAD v1.1 F1 "
        "and EM, CoLA Matthews correlation x 100, the rest accuracy or F1 in percent. GLUE avg: SST-2, MRPC "
        "(mean of accuracy and F1), RTE, CoLA; avg: those and SQuAD F1. The context-free rows are the floor of "
        "val MLM acc (mlm_baselines.py): predictors fitted by counting the training batches' masks, scored on the "
        "same validation batches; a run at or below \"copy\" has learnt the token frequencies and to copy its "
        "input, nothing of the context.", "", *lines, "", "## Targets", "",
        *target_lines, "", "## Summary (the table of docs/time-to-quality-summary.md)", "", summary_table(results), "",
        *(["## Budget-recipe options at equal time", "",
           "Each trial (`--recipe-trials`) beside the plain recipe's run that was interleaved with it at the same "
           "budget; in brackets the trial's difference to that run. Tokens count padding too. Each report's own "
           "page has its command and the scores by task; each trials run renders this section again from every "
           "report in the folder.", "", *ablation_table(trials), "",
           "![gains of each trial](time-to-quality-recipes.png)", ""] if trials else [])])


def plot(results: dict, path: Path) -> None:
    """A PNG: validation MLM accuracy against pretraining minutes, and each downstream score against the
    pretraining minutes of its checkpoint (ours, transformers, random init at 0)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = [(task, name) for task in MAIN_SCORES for name in MAIN_SCORES[task]]
    scored = {name: result for name, result in results.items() if "downstream" in result}
    figure, axes = plt.subplots(1, len(tasks) + 1, figsize=(3.2 * (len(tasks) + 1), 3.2))
    for name, result in results.items():
        curve = result["pretraining"]["validation"]
        if curve:
            axes[0].plot([point["minutes"] for point in curve], [point["mlm_accuracy"] * 100 for point in curve],
                         marker=".", label=name)
    axes[0].set(title="validation MLM accuracy", xlabel="pretraining minutes", ylabel="%")
    axes[0].legend(fontsize=7)
    for axis, (task, score) in zip(axes[1:], tasks, strict=True):
        for name, result in scored.items():
            entry = result["downstream"]["tasks"][task]["scores"][score]
            marker = "o" if result["run"]["engine"] != "transformers" else "s"
            axis.errorbar([result["run"]["budget"]], [entry["median"]], yerr=[[entry["median"] - min(
                entry["seeds"].values())], [max(entry["seeds"].values()) - entry["median"]]], fmt=marker, label=name)
        majority = next(iter(scored.values()))["downstream"]["tasks"][task]["scores"][score]["majority"]
        axis.axhline(majority, color="gray", linestyle=":", linewidth=1)
        axis.set(title=f"{task} {score}", xlabel="pretraining minutes")
    figure.tight_layout()
    atomic_write(path, lambda temporary: figure.savefig(temporary, format="png", dpi=80))
    plt.close(figure)


def recipe_summary_table(trials: dict) -> str:
    """summary_table of the recipe trials (time-to-quality-recipes.json): the plain recipe's row beside each
    budget-recipe preset's, at the same budget."""
    return summary_table({name: {"pretraining": trial, "downstream": trial["downstream"]}
                          for name, trial in trials.items()})


# Preset arguments that say where a run writes and how it is checked, not how it trains: the results folder, the
# shards (a trial's vocabulary brings its own), the checkpoint interval and the number of validation batches.
BOOKKEEPING_ARGUMENTS = ("results_dir", "DATA_DIR_PHASE1", "DATA_DIR_PHASE2", "save_checkpoint_steps",
                         "num_eval_batches")


def recipe_changes(arguments: dict, plain: dict) -> str:
    """The preset arguments (scripts/run_pretraining.sh's names) in which a trial differs from the plain recipe's
    `plain`, as name=value ("-" for none); bookkeeping is left out. Phase 2's arguments count only for a trial
    that trains phase 2 (a run without it never reads them), and the step caps only without a time budget (with
    one, the budget ends each phase long before its cap)."""
    ignored = set(BOOKKEEPING_ARGUMENTS)
    if not trains_phase2(arguments):
        ignored |= {name for name in arguments if name.endswith("_phase2")}
    if arguments.get("time_budget", "none") != "none":
        ignored |= {"train_steps", "train_steps_phase2"}
    changes = [f"{name}={Path(value).name if name == 'BERT_CONFIG' else value}" for name, value in arguments.items()
               if value != plain.get(name) and name not in ignored]
    return ", ".join(changes) or "-"


def finetuning_rates(downstream: dict) -> str:
    """How a run was fine-tuned, where the plans of committed reports differ: the peak learning rates of GLUE and
    SQuAD, and ", rescaled" when the embedding tables were brought to the initial scale first (--rescale-embeddings;
    reports from before that option did not)."""
    glue, squad = (downstream["tasks"][task]["hyperparameters"] for task in ("sst-2", "squad"))
    return f"{glue['learning_rate']:g} / {squad['learning_rate']:g}" + (
        ", rescaled" if glue.get("rescale_embeddings") else "")


def run_tokens(run: dict, tokens_per_sequence: float | None) -> float | None:
    """The positions a run trained on, padding included: its phase-1 sequences at the shards' tokens_per_sequence,
    and its phase 2's own count where it has one; None when a count is missing."""
    phase2 = run.get("phase2", {"sequences": 0, "tokens": 0})
    if not tokens_per_sequence or phase2["tokens"] is None:
        return None
    return (run["sequences"] - phase2["sequences"]) * tokens_per_sequence + phase2["tokens"]


def ablation(report_dir: Path, tokens_per_sequence: float | None) -> list[dict]:
    """Every budget-recipe trial of the committed time-to-quality-recipes*.json in report_dir beside the plain
    recipe's run of its own report (the run interleaved with it, at the same budget), shortest budget first: what it
    changes, its speed, what it saw and how it scored, and its differences to that plain run. tokens_per_sequence
    is the shards' (padding included; None when the data stage found them built and did not count)."""
    rows = []
    for path in sorted(report_dir.glob("time-to-quality-recipes*.json")):
        (plain_name, plain), *trials = json.loads(path.read_text(encoding="utf-8")).items()
        plain_mean = averages(plain["downstream"])
        for name, run in ((plain_name, plain), *trials):
            mean = averages(run["downstream"])
            accuracy = run["validation"][-1]["mlm_accuracy"] * 100
            rows.append({
                "report": path.stem, "run": name, "plain": name == plain_name, "budget": run["settings"]["budget"],
                "changes": recipe_changes(run["settings"]["arguments"], plain["settings"]["arguments"]),
                "finetuning": finetuning_rates(run["downstream"]),
                "steps": run["steps"], "steps_per_second": run["steps"] / (60 * run["minutes"]),
                "sequences": run["sequences"],
                "tokens": run_tokens(run, tokens_per_sequence),
                "mlm_accuracy": accuracy,
                "mlm_accuracy_gain": accuracy - plain["validation"][-1]["mlm_accuracy"] * 100,
                "glue_average": mean["glue_average"],
                "glue_gain": mean["glue_average"] - plain_mean["glue_average"],
                "downstream_average": mean["downstream_average"],
                "downstream_gain": mean["downstream_average"] - plain_mean["downstream_average"]})
    return sorted(rows, key=lambda row: row["budget"])  # stable: each report's rows stay together, plain first


def ablation_table(rows: list[dict]) -> list[str]:
    """The markdown of ablation's rows: each plain run's row, then its trials' with their gains over it."""
    lines = ["| report | run | changes from the plain recipe | minutes | steps | steps/s | sequences | tokens (M) | "
             "val MLM acc | fine-tuning lr GLUE / SQuAD | GLUE avg | avg |", "|---" * 12 + "|"]
    for row in rows:
        tokens = f"{row['tokens'] / 1e6:.1f}" if row["tokens"] else "-"
        gains = ("", "", "") if row["plain"] else (f" ({row['mlm_accuracy_gain']:+.1f})",
                                                   f" ({row['glue_gain']:+.1f})", f" ({row['downstream_gain']:+.1f})")
        lines.append(f"| [{row['report']}]({row['report']}.md) | {row['run']} | "
                     f"{'plain recipe' if row['plain'] else row['changes']} | {row['budget']:g} | {row['steps']} | "
                     f"{row['steps_per_second']:.2f} | {row['sequences']} | {tokens} | "
                     f"{row['mlm_accuracy']:.1f}%{gains[0]} | {row['finetuning']} | "
                     f"{row['glue_average']:.1f}{gains[1]} | "
                     f"{row['downstream_average']:.1f}{gains[2]} |")
    return lines


def plot_ablation(rows: list[dict], path: Path) -> None:
    """A PNG of ablation's trials: each one's gain over its plain run in GLUE average, downstream average and
    validation MLM accuracy (points; 0 is the plain recipe)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    trials = [row for row in rows if not row["plain"]]
    labels = [row["run"] for row in trials]
    figure, axes = plt.subplots(1, 3, figsize=(13, 0.4 * len(trials) + 1.4), sharey=True)
    for axis, (key, title) in zip(axes, (("glue_gain", "GLUE average"), ("downstream_gain", "average with SQuAD"),
                                         ("mlm_accuracy_gain", "validation MLM accuracy")), strict=True):
        axis.barh(range(len(trials)), [row[key] for row in trials],
                  color=["tab:green" if row[key] > 0 else "tab:red" for row in trials])
        axis.axvline(0, color="black", linewidth=1)
        axis.set(title=title, xlabel="points over the plain recipe's run")
    axes[0].set_yticks(range(len(trials)), labels, fontsize=8)
    axes[0].invert_yaxis()
    figure.tight_layout()
    atomic_write(path, lambda temporary: figure.savefig(temporary, format="png", dpi=80))
    plt.close(figure)


def options_column(parameters: dict, plain_warmup: float) -> str:
    """The run_pretraining.py options by which a run's report differs from the plain recipe, as the trials table
    shows them ("-" for none); plain_warmup is the table's first run's warmup proportion (the plain recipe's)."""
    options = [f"--{flag.replace('_', '-')}" for flag in RECIPE_FLAGS if parameters.get(flag)]
    if parameters["warmup_proportion"] != plain_warmup:  # one-cycle: the warmup takes half the budget
        options.append(f"--warmup-proportion {parameters['warmup_proportion']:g}")
    if parameters.get("masked_lm_ratio", MASKED_LM_RATIO) != MASKED_LM_RATIO:
        options.append(f"--masked-lm-ratio {parameters['masked_lm_ratio']:g}")
    if parameters.get("gradient_merge_ramp"):  # the batch column is then the batch the ramp ends at
        options.append(f"--gradient-merge-ramp {parameters['gradient_merge_ramp']:g}")
    if parameters.get("constant_proportion"):  # warmup-stable-decay: the peak held for this share of the run
        options.append(f"--constant-proportion {parameters['constant_proportion']:g}")
    return " ".join(options) or "-"


def recipes_report_kind(budget: float) -> str:
    """The recipe trials' report name: "recipes" at RECIPE_TRIAL_BUDGET, "recipes-<minutes>" at another budget, so
    that the trials at each budget keep their own report."""
    return "recipes" if budget == RECIPE_TRIAL_BUDGET else f"recipes-{budget:g}"


def check_no_trial_dropped(report_file: Path, runs: dict) -> None:
    """SystemExit naming report_file when it holds trials that `runs` lacks: a run of other trials would replace
    a report whose stage files may be gone. Another --report-dir keeps both."""
    if not report_file.exists():
        return
    earlier = read_json(report_file, "a trials report", REPORT_REMEDY)
    dropped = [name for name in earlier if name not in runs]
    if dropped:
        raise SystemExit(f"{SCRIPT}: {report_file} holds trials this run does not ({', '.join(dropped)}), so "
                         "writing it would lose them: use another --report-dir")


def main_page_report(report_dir: Path) -> dict | None:
    """The yardstick's time-to-quality.json in report_dir, None where there is none; SystemExit naming it where it
    does not parse, before anything is written."""
    path = report_dir / "time-to-quality.json"
    if not path.exists():
        return None
    report = read_json(path, "a time-to-quality report", REPORT_REMEDY)
    missing = [key for key in ("machine", "data", "runs", "targets", "command", "missing", "context_free")
               if not isinstance(report, dict) or key not in report]
    if missing:
        raise SystemExit(f"{SCRIPT}: {path}: not a time-to-quality report (no {', '.join(missing)}); "
                         f"{REPORT_REMEDY}")
    return report


def write_trials_report(args: argparse.Namespace, kind: str, runs: dict, checks: list[dict] | None = None) -> None:
    """time-to-quality-<kind>.{json,md} (kind "sizes", "search" or recipes_report_kind's): each trial's model,
    options, optimizer and validation MLM accuracy against its training minutes; for the recipes its downstream
    averages, and recipe_targets' checks where there are any."""
    scored = kind.startswith("recipes")
    main_report = main_page_report(Path(args.report_dir)) if scored else None
    if scored:
        title = f"Budget-recipe options at equal time ({args.recipe_budget:g} minutes)"
        flag = "--recipe-trials " + " ".join(args.recipe_trials or []) + (
            f" --recipe-budget {args.recipe_budget:g}" if args.recipe_budget != RECIPE_TRIAL_BUDGET else "")
    else:
        title = {"sizes": "Model size at equal time", "search": "Optimizer and learning rate at equal time"}[kind]
        flag = {"sizes": "--compare-sizes", "search": "--search"}[kind]
    if not runs:
        raise SystemExit(f"{SCRIPT}: {flag}: nothing has finished yet (--report-only), so there is nothing to report")
    lines = [f"# {title}", "", f"`{machine.header_line()}`", "",
             f"Command: `python benchmarks/time_to_quality.py {flag}`" + (" (--quick)" if args.quick else ""), "",
             "| run | config | options | optimizer | learning rate | batch | minutes | steps | sequences | "
             "validation MLM accuracy (%) at each evaluation |" + (" GLUE avg | avg |" if scored else ""),
             "|---|---|---|---|---|---|---|---|---|---|" + ("---|---|" if scored else "")]
    plain_warmup = run_parameters(Path(next(iter(runs.values()))["report"]))["warmup_proportion"]
    for name, result in runs.items():
        curve = ", ".join(f"{point['mlm_accuracy'] * 100:.1f}" for point in result["validation"])
        parameters = run_parameters(Path(result["report"]))
        batch = step_sequences(parameters)
        options = options_column(parameters, plain_warmup)
        if "phase2" in result:  # the options above are phase 1's
            share = result["settings"]["arguments"]["phase2_budget_share"]
            options = ("" if options == "-" else options + "; ") + f"phase 2 at seq 512 for {share} of the budget"
        line = (f"| {name} | {Path(parameters['config_file']).name} | {options} | "
                f"{parameters['optimizer']} | "
                f"{parameters['learning_rate']:g} | {batch} | {result['minutes']:.1f} | {result['steps']} | "
                f"{result['sequences']} | {curve} |")
        if scored:
            mean = averages(result["downstream"])
            line += f" {mean['glue_average']:.1f} | {mean['downstream_average']:.1f} |"
        lines.append(line)
    if checks:
        lines += ["", "## Targets", "", *target_table(checks)]
        for check in checks:
            print(f"{'holds' if check['holds'] else 'MISSED'}: {check['target']}: {check['value']:.2f} "
                  f"(needed {check['needed']:.2f})")
    if scored:
        lines += ["", "## Summary (the table of docs/time-to-quality-summary.md)", "", recipe_summary_table(runs)]
    report_dir = Path(args.report_dir)
    check_no_trial_dropped(report_dir / f"time-to-quality-{kind}.json", runs)
    report_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(report_dir / f"time-to-quality-{kind}.json", json.dumps(runs, indent=1) + "\n")
    atomic_write_text(report_dir / f"time-to-quality-{kind}.md", "\n".join(lines) + "\n")
    print(f"Report: {report_dir / f'time-to-quality-{kind}.md'}")
    if main_report is not None:  # the main page's ablation gains this report's rows
        write_main_page(report_dir, main_report)
        print(f"Ablation re-rendered: {report_dir / 'time-to-quality.md'}")


def write_main_page(report_dir: Path, report: dict) -> None:
    """time-to-quality.md from `report`, what time-to-quality.json holds (its machine line too, which may be another
    CPU's than this one's), with the ablation of every trials report in report_dir and the ablation's PNG.
    write_report calls it after the yardstick, write_trials_report after each trials report: so the page's ablation
    holds every committed report, whichever was written last."""
    trials = ablation(report_dir, padded_tokens_per_sequence(report["data"]["pipeline"]))
    if trials:
        plot_ablation(trials, report_dir / "time-to-quality-recipes.png")
    atomic_write_text(report_dir / "time-to-quality.md", markdown(
        report["machine"], report["data"], report["runs"], report["targets"], report["command"], report["missing"],
        report["context_free"], trials))


def write_report(args: argparse.Namespace, data: dict, results: dict, missing: list[str], floor: dict | None
                 ) -> None:
    """WORK/time_to_quality.json, and the JSON, PNG and markdown in --report-dir; `missing` names the runs not
    finished yet (--report-only); floor is the context-free stage's accuracies (Yardstick.context_free), None
    before it is counted."""
    if not any("downstream" in result for result in results.values()):
        raise SystemExit(f"{SCRIPT}: no run has been scored downstream yet: nothing to report")
    header = machine.header_line()
    checks = targets(results)
    command = "python benchmarks/time_to_quality.py" + (" --quick" if args.quick else "")
    report = {"machine": header, "command": command, "data": data, "runs": results, "missing": missing,
              "targets": checks, "context_free": floor}
    text = json.dumps(report, indent=1) + "\n"
    atomic_write_text(Path(args.work_dir) / "time_to_quality.json", text)
    report_dir = Path(args.report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(report_dir / "time-to-quality.json", text)
    plot(results, report_dir / "time-to-quality.png")
    write_main_page(report_dir, report)
    for check in checks:
        print(f"{'holds' if check['holds'] else 'MISSED'}: {check['target']}: {check['value']:.2f} "
              f"(needed {check['needed']:.2f})")
    print(f"Report: {report_dir / 'time-to-quality.md'}")


if __name__ == "__main__":
    sys.exit(run_main(main, SCRIPT))
