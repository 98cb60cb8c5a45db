"""BERT pre-training (masked LM + next-sentence prediction) on LDDL parquet or NVIDIA HDF5 shards, in one process
or many.

    python run_pretraining.py --input-dir SHARDS --vocab-file VOCAB --output-dir OUT --max-steps N --phase1
    python run_pretraining.py --input-dir SHARDS --vocab-file VOCAB --output-dir OUT --time-budget 60 --phase1
    python -m paddle.distributed.launch --nproc_per_node 8 run_pretraining.py ...      (one node)
    python -m paddle.distributed.launch --nnodes 2 --master HOST:PORT --nproc_per_node 8 run_pretraining.py ...

The command line is NVIDIA's Paddle BERT run_pretraining.py (same names and defaults, but float16 AMP's loss
scaling: dynamic from 2^20), plus --keep-checkpoint-max, --amp-dtype, --lr-decay-power, --constant-proportion,
--max-grad-norm, --max-nonfinite-steps, --masked-lm-ratio and --whole-word-masking (dynamic masking), --no-nsp
(masked LM alone), --eval-dir, --eval-freq, --num-eval-batches and --eval-interval-minutes (validation on held-out
shards, pretraining_eval.py), and --time-budget. `build_parser()` is the single definition of the options.

Training to a time budget (--time-budget MINUTES): the learning-rate schedule (warmup, hold, decay;
lr_scheduler.TimeBudgetDecay) is a function of p = elapsed / budget, the fraction of the budget used, instead of
the fraction of --max-steps, and the run stops at the first step boundary where the elapsed training time reaches
the budget, writing its final checkpoint there. Elapsed training time (time_budget.py) is the wall time of the
training loop (drawing the batches, forward, backward, the optimizer step, the progress report), summed over the
run and the runs it resumes; process start-up, validation and checkpoint writing do not count. Each update runs
at the learning rate of the elapsed time at the step boundary before it. With several ranks, every rank uses the
largest of their elapsed times, so they agree on the learning rate and on the step that ends the run. --max-steps
is optional then: given, it caps the steps. Every run measures its elapsed training time and reports it
(elapsed_training_minutes in the --log-freq records and the validation records); the checkpoints carry it.

One optimizer step, with k = --gradient-merge-steps micro-batches per rank and W ranks (with
--gradient-merge-ramp, k grows from 1 to that over the ramp's part of the run):
  1. each rank draws k micro-batches of --batch-size sequences;
  2. the ranks agree (one all-reduce) on N, the masked tokens, and S, the sequences, of the whole global batch;
  3. for each micro-batch (gradient_merge.py, the convention fine-tuning shares): forward, then backward of
     W * (mlm_mean * n / N + nsp_mean * b / S)  with n, b the
     micro-batch's own counts (with --no-nsp there is no NSP head and the second term is absent). Only the last
     micro-batch's backward all-reduces the gradients (no_sync on the others) and DataParallel averages them over
     the W ranks, so the update follows the gradient of the masked-LM mean over all N tokens plus the NSP mean over
     all S sequences: exactly what one process would compute on the whole global batch. When every micro-batch has
     the same counts this is the usual 1/k scaling of each micro-batch's mean loss;
  4. float16 AMP: the gradients are unscaled, and the update is skipped on overflow; otherwise they are clipped
     (--max-grad-norm) and the optimizer steps. The learning-rate schedule advances either way.

Checkpoints go to <output-dir>/<bert-model>/phase1|phase2/<step>/ every --num-steps-per-checkpoint steps, at the
end of the run, and at the step boundary after a SIGTERM, SIGUSR1, SIGHUP or SIGINT (Ctrl-C; a second one stops
at once) or once the file named in $PADDLEBERT_STOP_FILE exists (the run then exits with status 0). They hold the
model and its config, the optimizer with its schedule, and a progress file with every rank's data position and
random-generator states, so a run resumed with --last-step-of-checkpoint auto continues exactly as if it had never
stopped (bitwise on CPU); a resume that changes one of the training options the progress file records
(RESUMABLE_TRAINING_OPTIONS, e.g. --no-dropout) says so in a line each. A run never writes over a checkpoint it did
not write itself; docs/resume.md has the resume forms and rules. --from-phase1-final-params takes only a phase 1
that finished: at its --max-steps, or having spent its --time-budget.

What the run reports (DLLogger records per --log-freq interval, progress lines, the summary) is
pretraining_report.py's.
"""

from __future__ import annotations

from training import runtime  # noqa: F401  # isort: skip  (first: it imports Paddle without its import-time warnings)
import argparse
import dataclasses
import os
import signal
import sys
import time
from collections.abc import Sequence
from itertools import islice
from pathlib import Path

import numpy as np
import paddle

from bert_config import BERT_MODELS, BertConfig, build_config, config_file_for
from checkpoints import checkpoint
from checkpoints.weights import (
    SAFETENSORS_SUFFIX,
    check_same_network,
    load_pretrained,
    load_state,
    resolve_weights_file,
)
from loss import IGNORE_INDEX, BertPretrainingCriterion
from lr_scheduler import TimeBudgetDecay, create_lr_scheduler
from modeling import BertForPretraining
from optimizer import add_optimizer_arguments, create_optimizer
from preprocessing.masking import MASKED_LM_RATIO, check_masked_lm_ratio, num_to_predict
from preprocessing.packing import PACKED_MODEL_INPUTS, check_packable, pack_batch, padding_fraction
from pretraining_dataset import PretrainingDataLoader, find_shards
from training.amp import add_amp_arguments, amp_autocast, amp_policy, amp_prepare, check_amp_arguments
from training.gradient_merge import merged_backward, optimizer_step, ramped_merge_steps
from training.pretraining_eval import PretrainingEvaluator, add_eval_arguments, build_evaluator, check_eval_arguments
from training.pretraining_report import ProgressReporter, StepResult
from training.runtime import apply_cpu_tweaks, configure_cpu_threads, init_data_parallel, set_cpu_affinity
from utils import cli, folder_lock
from utils.cli import (
    finite_float,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
    random_seed,
    str_to_bool,
    unit_interval,
)
from utils.dllog import DLLogger, add_format_argument, open_report
from utils.time_budget import TrainingStopwatch
from utils.visualdl_log import open_run_log

# The reference pads the vocabulary to a multiple of 8 for tensor cores; weights.load_pretrained and load_state
# fit a table of either size (weights.fit_vocab_rows).
VOCAB_PAD_MULTIPLE = 8
# NVIDIA's default model, and the fields in which --bert-model's network and --config-file's may not differ.
DEFAULT_BERT_MODEL = "bert-large-uncased"
SHAPE_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")


# ---------------------------------------------------------------------------------------------
# Options
# ---------------------------------------------------------------------------------------------


def _add_data_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("Data and outputs")
    group.add_argument("--input-dir", required=True,
                       help="Folder of LDDL parquet shards (binned or not, static or dynamic masking) or NVIDIA "
                       "HDF5 shards, e.g. pretrain/phase1/unbinned/parquet.")
    group.add_argument("--vocab-file", required=True, help="WordPiece vocabulary the shards were made with.")
    group.add_argument("--max-seq-length", type=positive_int, default=512,
                       help="Longest sequence allowed in the shards (phase 1: 128, phase 2: 512).")
    group.add_argument("--max-predictions-per-seq", type=positive_int, default=80,
                       help="Most masked tokens per sequence (phase 1: 20, phase 2: 80).")
    group.add_argument("--masked-lm-ratio", type=finite_float, default=None,
                       help=f"Fraction of each sequence's tokens masked, up to --max-predictions-per-seq (default "
                       f"{MASKED_LM_RATIO}; shards without static masks, which the loader masks anew every "
                       "epoch; e.g. 0.3 as MosaicBERT; statically masked shards are refused).")
    group.add_argument("--whole-word-masking", action="store_true",
                       help="Mask whole words (a piece and its ## continuations) rather than single pieces (shards "
                       "without static masks; statically masked shards are refused).")
    group.add_argument("--num-workers", type=non_negative_int, default=1,
                       help="Data-loader worker processes per rank (0: load in the training process).")
    group.add_argument("--pack-sequences", action="store_true",
                       help="Pack each micro-batch's samples into as few rows of --max-seq-length as "
                       "first-fit-decreasing finds, each sample attending only to itself (Krell et al. 2021), so "
                       "less padding is computed; --batch-size still counts samples.")
    group.add_argument("--output-dir", required=True,
                       help="Checkpoints go to <output-dir>/<bert-model>/phase1|phase2/<step>/.")
    group.add_argument("--report-file", default=None,
                       help="DLLogger JSON-lines report, appended to; default <output-dir>/report.json.")
    group.add_argument("--log-freq", type=positive_int, default=10, help="Report the loss every this many steps.")
    group.add_argument("--visualdl-log-dir", default=None,
                       help="Also write the report's scalars and the configuration to a VisualDL log in this folder "
                       "(rank 0; appended to on resume; needs `pip install visualdl`). Give each phase its own.")


def _add_model_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("Model")
    group.add_argument("--bert-model", default=DEFAULT_BERT_MODEL, choices=BERT_MODELS,
                       help="Model size; its config is bert_configs/<bert-model>.json unless --config-file is "
                       "given (required for custom), and it names the checkpoint folder. Not given with "
                       "--config-file, it is that file's name where that is one of the choices, else custom; "
                       "given, it must have the shape of --config-file.")
    group.add_argument("--config-file", default=None, help="BERT config JSON (overrides --bert-model's).")
    group.add_argument("--fuse-mha", action="store_true",
                       help="One [H, 3H] projection for Q, K and V (weights load into either layout).")
    group.add_argument("--no-nsp", action="store_true",
                       help="Masked LM alone (RoBERTa): no next-sentence head, loss or pooler, so fine-tuning starts "
                       "the pooler from random initialisation; the report then has no nsp_loss. For shards made with "
                       "lddl_preprocess.py --no-nsp, or any others (their NSP labels are ignored).")
    # The budget-recipe options (issue 43; Cramming, Geiping & Goldstein 2022, arXiv:2212.14034). Each is off in
    # NVIDIA's presets; the architecture ones are saved in the checkpoint's config, so fine-tuning, export and
    # resuming build the same network, and converters to transformers' or NGC's layout refuse them.
    group.add_argument("--pre-layer-norm", action="store_true",
                       help="Pre-LayerNorm blocks, x + f(LN(x)), and a LayerNorm after the last layer (BertConfig "
                       "pre_layer_norm).")
    group.add_argument("--no-linear-bias", action="store_true",
                       help="No biases in the encoder's linear layers (BertConfig linear_bias false).")
    group.add_argument("--gated-feed-forward", action="store_true",
                       help="Gated-GELU feed-forward, act(x W_gate) * (x W_up) (BertConfig gated_feed_forward).")
    group.add_argument("--alibi", action="store_true",
                       help="ALiBi: add -m_h |i - j| to head h's attention score of query i on key j (Press et al. "
                       "2022), beside the learned positions (BertConfig alibi).")
    group.add_argument("--no-dropout", action="store_true",
                       help="Train with dropout 0. The checkpoint's config keeps the config file's dropout, which "
                       "fine-tuning then uses.")


def _add_schedule_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("Schedule and length")
    group.add_argument("--phase1", action="store_true", help="Phase 1 of pre-training (not with --phase2).")
    group.add_argument("--phase2", action="store_true",
                       help="Phase 2 of pre-training (not with --phase1; also the default without either).")
    group.add_argument("--max-steps", type=positive_int, default=None,
                       help="Optimizer steps of this phase; the learning-rate schedule spans them. Required "
                       "without --time-budget; with it, the most steps to train (the schedule then follows time).")
    group.add_argument("--time-budget", type=positive_float, default=None, metavar="MINUTES",
                       help="Train for this many minutes of elapsed training time: the learning-rate schedule "
                       "(warmup, hold, decay to 0) spans the budget instead of --max-steps, and the run stops at the "
                       "first step boundary where the elapsed training time reaches it, with its final checkpoint "
                       "there. Elapsed training time is the wall time of the training loop (drawing batches, forward, "
                       "backward, optimizer step, progress report) summed over the run and the runs it resumes; "
                       "process start-up, validation and checkpoint writing do not count.")
    group.add_argument("--steps-this-run", type=positive_int, default=None,
                       help="Stop after this many steps (checkpointing), e.g. to fit a cluster time limit.")
    group.add_argument("--batch-size", type=positive_int, default=32, help="Sequences per micro-batch per rank.")
    group.add_argument("--gradient-merge-steps", type=positive_int, default=1,
                       help="Micro-batches per optimizer step (gradient accumulation).")
    group.add_argument("--gradient-merge-ramp", type=unit_interval, default=0.0, metavar="FRACTION",
                       help="Grow the micro-batches per optimizer step from 1 to --gradient-merge-steps over this "
                       "fraction of the run (of --max-steps, or of --time-budget with it), in equal parts: a batch "
                       "that ramps up (gradient_merge.ramped_merge_steps). 0: every step takes them all.")
    group.add_argument("--learning-rate", type=positive_float, default=1e-4, help="Peak learning rate.")
    group.add_argument("--warmup-start-lr", type=non_negative_float, default=0.0,
                       help="Learning rate at the start of warmup.")
    group.add_argument("--warmup-proportion", type=unit_interval, default=0.01,
                       help="Fraction of --max-steps (of --time-budget with it) spent in linear warmup.")
    group.add_argument("--constant-proportion", type=unit_interval, default=0.0,
                       help="Fraction of --max-steps (of --time-budget with it) held at the peak after warmup (LANS "
                       "schedule).")
    group.add_argument("--lr-decay-power", type=positive_float, default=1.0,
                       help="Exponent of the polynomial decay to 0 (1.0 = linear).")


def _add_optimizer_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("Optimizer")
    add_optimizer_arguments(group, default="Lamb", optimizer_help="Optimizer.")
    group.add_argument("--max-grad-norm", type=positive_float, default=1.0, help="Clip gradients to this global norm.")
    group.add_argument("--max-nonfinite-steps", type=non_negative_int, default=100,
                       help="Stop when the loss is non-finite in more than this many steps in a row.")


def _add_process_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("Process")
    group.add_argument("--seed", type=random_seed, default=42, help="Random seed (rank r uses seed + r for dropout).")
    group.add_argument("--show-config", type=str_to_bool, default=True,
                       help="Report the arguments as a PARAMETER record and print one line naming the report.")
    group.add_argument("--enable-cpu-affinity", type=str_to_bool, default=True,
                       help="Pin each local rank to its own block of CPUs.")


def _add_checkpoint_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("Checkpoints and resume")
    group.add_argument("--num-steps-per-checkpoint", type=positive_int, default=100,
                       help="Save a checkpoint every N steps.")
    group.add_argument("--keep-checkpoint-max", type=positive_int, default=3,
                       help="Keep only the newest N checkpoints of the phase, counting those of earlier runs.")
    group.add_argument("--model-prefix", type=cli.file_name, default="bert_paddle",
                       help="File-name prefix of checkpoint files (a name, not a path).")
    group.add_argument("--from-checkpoint", default=None,
                       help="Resume from a checkpoint: one checkpoint folder (with or without "
                       "--last-step-of-checkpoint), or a phase folder of <step>/ folders with "
                       "--last-step-of-checkpoint auto|N. With auto and no --from-checkpoint the run's own phase "
                       "folder is searched. See docs/resume.md.")
    group.add_argument("--last-step-of-checkpoint", type=cli.checkpoint_step, default=None,
                       help="None, auto (the newest intact checkpoint, setting unreadable ones aside; start fresh "
                       "if there is none) or a step.")
    group.add_argument("--from-pretrained-params", default=None,
                       help="A .pdparams or .safetensors file, or a folder holding <model-prefix>.pdparams or "
                       "<model-prefix>.safetensors: start from these weights (nothing else).")
    group.add_argument("--from-phase1-final-params", default=None,
                       help="Phase 2 (the default phase): folder of phase 1's final <model-prefix>.pdparams, loaded "
                       "only when phase 2 starts (not when it resumes from its own checkpoint).")
    group.add_argument("--save-safetensors", action="store_true",
                       help="Also write the final weights as <model-prefix>.safetensors beside the last checkpoint's "
                       ".pdparams, the format to share (reading it runs no code). Not with --benchmark, which saves "
                       "no checkpoint.")


def _add_benchmark_options(parser: argparse.ArgumentParser) -> None:
    cli.add_benchmark_arguments(parser, "Run --benchmark-warmup-steps, then time --benchmark-steps, whatever "
                                "--max-steps says (as NVIDIA's does); no checkpoints are written.")


def build_parser() -> argparse.ArgumentParser:
    """All options of run_pretraining.py: NVIDIA's names and defaults, with the additions."""
    parser = argparse.ArgumentParser(
        description="PaddleBERT pre-training (masked LM + next sentence prediction) on LDDL parquet or NVIDIA HDF5 "
        "shards",
        formatter_class=cli.DefaultsHelpFormatter,
    )
    for add_options in (_add_data_options, _add_model_options, _add_schedule_options, _add_optimizer_options,
                        _add_checkpoint_options, _add_process_options, add_amp_arguments, add_eval_arguments,
                        _add_benchmark_options):
        add_options(parser)
    add_format_argument(parser)
    return parser


def _check_schedule_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.phase1 and args.phase2:
        parser.error("--phase1 and --phase2 cannot both be set")
    if args.warmup_proportion + args.constant_proportion > 1.0:
        parser.error("--warmup-proportion plus --constant-proportion must not exceed 1")
    if args.gradient_merge_ramp > 0 and args.gradient_merge_steps == 1:
        parser.error("--gradient-merge-ramp grows the micro-batches of a step up to --gradient-merge-steps; give "
                     "--gradient-merge-steps 2 or more")
    if args.max_steps is None and args.time_budget is None:
        parser.error("--max-steps is required (or --time-budget, to train for a time instead)")
    if args.time_budget is not None and args.benchmark:
        parser.error("--time-budget cannot be used with --benchmark, which times a fixed number of steps")


def _check_starting_weights(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """At most one source of the starting weights, and each weights file given exists."""
    if args.from_checkpoint is not None and args.from_pretrained_params is not None:
        parser.error("--from-checkpoint and --from-pretrained-params cannot both be set")
    if args.from_phase1_final_params is not None and args.phase1:
        parser.error("--from-phase1-final-params is for phase 2, not with --phase1")
    if args.from_phase1_final_params is not None and args.from_pretrained_params is not None:
        parser.error("--from-phase1-final-params and --from-pretrained-params cannot both be set")
    if args.save_safetensors and args.benchmark:
        parser.error("--save-safetensors writes the final weights beside the last checkpoint, and --benchmark saves "
                     "no checkpoint")
    for flag in ("from_pretrained_params", "from_phase1_final_params"):
        path = getattr(args, flag)
        if path is not None:
            try:
                resolve_weights_file(path, args.model_prefix, flag)
            except FileNotFoundError:
                parser.error(f"--{flag.replace('_', '-')} {path}: no {args.model_prefix}{checkpoint.PARAMS_SUFFIX} or "
                             f"{args.model_prefix}{SAFETENSORS_SUFFIX} there, and no such weights file")
    if args.from_phase1_final_params is not None:
        try:
            check_phase1_finished(args.from_phase1_final_params, args.model_prefix)
        except ValueError as error:
            parser.error(str(error))


def _check_data_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The shards, the masking they allow and the vocabulary; --report-file's default."""
    if args.masked_lm_ratio is not None:
        try:
            check_masked_lm_ratio(args.masked_lm_ratio, "--masked-lm-ratio")
        except ValueError as error:
            parser.error(str(error))
    if not Path(args.input_dir).is_dir():
        parser.error(f"--input-dir {args.input_dir}: no such folder")
    if args.masked_lm_ratio is None:
        args.masked_lm_ratio = MASKED_LM_RATIO
    elif find_shards(args.input_dir).statically_masked:
        parser.error(f"--masked-lm-ratio {args.masked_lm_ratio}: the shards of --input-dir {args.input_dir} are "
                     "masked statically, so it cannot take effect; make them with lddl_preprocess.py "
                     "--masked-lm-ratio, or with --no-masking to mask in the loader")
    else:
        # The loader masks round(ratio x tokens) of a sequence, at most --max-predictions-per-seq: a ratio that the
        # cap cuts short on the longest sequences would train, unsaid, at a smaller one.
        wanted = int(num_to_predict(args.max_seq_length, args.masked_lm_ratio))
        if wanted > args.max_predictions_per_seq:
            parser.error(f"--masked-lm-ratio {args.masked_lm_ratio} masks {wanted} of the {args.max_seq_length} "
                         f"tokens of a --max-seq-length sequence, more than --max-predictions-per-seq "
                         f"{args.max_predictions_per_seq} allows; give --max-predictions-per-seq {wanted} or a "
                         "smaller ratio")
    if not Path(args.vocab_file).is_file():
        parser.error(f"--vocab-file {args.vocab_file}: no such file")
    cli.default_report_file(args)


def _check_model_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--config-file: --bert-model's unless given, and it exists. --bert-model names the checkpoint folder, so it
    must not name another network than the one trained: unless typed (None here) it follows --config-file (the
    file's name where that is a model of BERT_MODELS, as run_pretraining.sh's set_bert_model decides, else custom);
    typed beside --config-file, the two must agree on shape."""
    typed = args.bert_model is not None
    if not typed:
        stem = Path(args.config_file).stem if args.config_file is not None else DEFAULT_BERT_MODEL
        args.bert_model = stem if stem in BERT_MODELS else "custom"
    config_given = args.config_file is not None
    try:
        args.config_file = config_file_for(args.bert_model, args.config_file)
    except ValueError as error:
        parser.error(str(error))
    if not Path(args.config_file).is_file():
        parser.error(f"--config-file {args.config_file}: no such file")
    if typed and config_given and args.bert_model != "custom":
        try:
            named = BertConfig.from_json_file(config_file_for(args.bert_model, None))
            given = BertConfig.from_json_file(args.config_file)
        except ValueError as error:
            parser.error(str(error))
        differences = [f"{field} {getattr(named, field)} and {getattr(given, field)}" for field in SHAPE_FIELDS
                       if getattr(named, field) != getattr(given, field)]
        if differences:
            parser.error(f"--bert-model {args.bert_model} and --config-file {args.config_file} disagree on "
                         f"{', '.join(differences)}; the checkpoints would be filed under {args.bert_model}/: drop "
                         "--bert-model (the file's network names the folder) or pass --bert-model custom")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse and check the command line; invalid input exits with a one-line error naming the flag (the ranges of
    single options are checked by their argparse types, cli.py)."""
    parser = build_parser()
    # bert_model None: --bert-model was not typed (argparse fills in defaults only for names the namespace lacks).
    args = parser.parse_args(argv, namespace=argparse.Namespace(bert_model=None))
    for check in (_check_schedule_options, _check_starting_weights, check_amp_arguments, check_eval_arguments,
                  _check_data_options, _check_model_options):
        check(parser, args)
    return args


# ---------------------------------------------------------------------------------------------
# Model, optimizer, schedule
# ---------------------------------------------------------------------------------------------


def load_bert_config(args: argparse.Namespace) -> BertConfig:
    """The config the checkpoints record: --config-file (or --bert-model's) with the architecture flags."""
    recipe = {name: True for name in ("pre_layer_norm", "gated_feed_forward", "alibi") if getattr(args, name)}
    if args.no_linear_bias:
        recipe["linear_bias"] = False
    return build_config(args.bert_model, args.config_file, fuse_mha=args.fuse_mha,
                        pad_vocab_size_multiple=VOCAB_PAD_MULTIPLE, max_seq_length=args.max_seq_length,
                        recipe=recipe)


@dataclasses.dataclass
class MicroBatch:
    """One micro-batch as tensors: BertForPretraining's positional inputs, the loss targets, and its counts."""

    inputs: list[paddle.Tensor | None]
    masked_lm_labels: paddle.Tensor
    next_sentence_labels: paddle.Tensor
    masked: int
    sequences: int
    padding_fraction: float

    def counts(self) -> tuple[int, int]:
        """The items the loss terms average over: masked tokens (MLM) and sequences (NSP)."""
        return self.masked, self.sequences


class Trainer:
    """Model, optimizer, schedule and loss scaler, and the optimizer step over a list of micro-batches."""

    def __init__(self, args: argparse.Namespace, rank: int, world_size: int):
        self.args = args
        self.world_size = world_size
        self.policy = amp_policy(args)
        self.config = load_bert_config(args)
        paddle.seed(args.seed)
        np.random.seed(args.seed)
        trained = (dataclasses.replace(self.config, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
                   if args.no_dropout else self.config)
        self.model = BertForPretraining(trained, nsp=not args.no_nsp)
        self.criterion = BertPretrainingCriterion(self.model.use_cpu_kernels)
        if args.time_budget is not None:
            self.scheduler = TimeBudgetDecay(
                args.learning_rate, budget_seconds=60.0 * args.time_budget, warmup_proportion=args.warmup_proportion,
                constant_proportion=args.constant_proportion, warmup_start_lr=args.warmup_start_lr,
                power=args.lr_decay_power,
            )
        else:
            self.scheduler = create_lr_scheduler(
                "constant_poly" if args.constant_proportion > 0 else "poly",
                learning_rate=args.learning_rate, total_steps=args.max_steps,
                warmup_proportion=args.warmup_proportion, warmup_start_lr=args.warmup_start_lr,
                power=args.lr_decay_power, constant_proportion=args.constant_proportion,
            )
        self.optimizer = create_optimizer(
            args.optimizer, self.model, self.scheduler, weight_decay=args.weight_decay, beta1=args.beta1,
            beta2=args.beta2, epsilon=args.epsilon, max_grad_norm=args.max_grad_norm,
            multi_precision=self.policy.master_weights,
        )
        self.model, self.optimizer, self.scaler = amp_prepare(self.model, self.optimizer, self.policy)
        # Every rank builds the weights from --seed (DataParallel then broadcasts rank 0's anyway); dropout masks
        # must differ between ranks, so the generator continues from a per-rank seed.
        paddle.seed(args.seed + rank)
        # The layer that runs forward/backward: DataParallel (see wrap_data_parallel) or the model itself.
        self.network = self.model

    def wrap_data_parallel(self) -> None:
        """Wrap the model once its weights are final: DataParallel broadcasts rank 0's parameters."""
        if self.world_size > 1:
            self.network = paddle.DataParallel(self.model)

    def set_elapsed_training_time(self, seconds: float) -> None:
        """Under --time-budget, the schedule's position for the next update: the elapsed training time now. A
        step schedule follows its update count alone."""
        if isinstance(self.scheduler, TimeBudgetDecay):
            self.scheduler.set_elapsed(seconds)

    def _micro_batch_tensors(self, batch: dict) -> MicroBatch:
        if self.args.pack_sequences:
            batch = pack_batch(batch, self.args.max_seq_length)
        labels = batch["masked_lm_labels"].reshape(-1)
        positions = np.flatnonzero(labels != IGNORE_INDEX)
        masked = len(positions)
        if masked == 0:
            # A micro-batch with nothing masked still needs an [M, V] head output: point at token 0 with an
            # ignored label, which contributes nothing.
            positions = np.zeros(1, np.int64)
        masked_lm_positions = paddle.to_tensor(positions.astype(np.int64))
        # Packed rows have no attention_mask argument: their sample ids say who attends to whom.
        layout = ([None, masked_lm_positions, *(paddle.to_tensor(batch[name]) for name in PACKED_MODEL_INPUTS)]
                  if self.args.pack_sequences else [paddle.to_tensor(batch["attention_mask"]), masked_lm_positions])
        return MicroBatch(
            [paddle.to_tensor(batch["input_ids"]), paddle.to_tensor(batch["token_type_ids"]), *layout],
            paddle.to_tensor(labels[positions].astype(np.int64)),
            paddle.to_tensor(batch["next_sentence_labels"].reshape(-1).astype(np.int64)),
            masked, len(batch["next_sentence_labels"]), padding_fraction(batch),
        )

    def _all_reduce(self, values: paddle.Tensor) -> paddle.Tensor:
        if self.world_size > 1:
            paddle.distributed.all_reduce(values)
        return values

    def _loss_terms(self, network: paddle.nn.Layer, micro_batch: MicroBatch) -> list[tuple[paddle.Tensor, int]]:
        """The micro-batch's masked-LM mean (over its masked tokens, count 0) and NSP mean (over its sequences,
        count 1), for gradient_merge.merged_backward."""
        with amp_autocast(self.policy):
            prediction_scores, seq_relationship_score = network(*micro_batch.inputs)
            if self.args.no_nsp:
                return [(self.criterion.masked_lm(prediction_scores, micro_batch.masked_lm_labels), 0)]
            _, mlm_mean, nsp_mean = self.criterion(prediction_scores, seq_relationship_score,
                                                   micro_batch.masked_lm_labels, micro_batch.next_sentence_labels)
        return [(mlm_mean, 0), (nsp_mean, 1)]

    def step(self, micro_batches: Sequence[dict], stop_requested: bool = False) -> tuple[StepResult, bool]:
        """One optimizer step over this rank's micro-batches; returns the result and whether any rank asked to
        stop (a stop signal or the stop file), which every rank learns at the same step."""
        prepared = [self._micro_batch_tensors(batch) for batch in micro_batches]
        shares = merged_backward(self.network, prepared, MicroBatch.counts, self._loss_terms, self.world_size,
                                 self.scaler, all_reduce=self._all_reduce, master_gradients=self.policy.master_weights)
        mlm_share, nsp_share = shares if len(shares) == 2 else (shares[0], 0.0)
        sequences = sum(micro_batch.sequences for micro_batch in prepared)
        stats = self._all_reduce(paddle.to_tensor([mlm_share, nsp_share, float(stop_requested), float(sequences)],
                                                  "float32"))
        mlm_loss, nsp_loss, stop_votes, total_sequences = stats.numpy().tolist()
        loss = mlm_loss + nsp_loss
        outcome = optimizer_step(self.model, self.optimizer, self.scheduler, self.scaler, loss)
        padding = sum(p.padding_fraction for p in prepared) / len(prepared)
        result = StepResult(loss, mlm_loss, nsp_loss, int(total_sequences), sequences, outcome.learning_rate,
                            outcome.loss_scale, outcome.skipped, padding)
        return result, stop_votes > 0


# ---------------------------------------------------------------------------------------------
# Checkpoints: what this run saves, and the resume from one
# ---------------------------------------------------------------------------------------------


def gather_from_ranks(value, world_size: int) -> list:
    """Every rank's `value` (any picklable object), in rank order."""
    if world_size == 1:
        return [value]
    gathered: list = []
    paddle.distributed.all_gather_object(gathered, value)
    return gathered


def check_phase1_finished(folder: str, prefix: str) -> None:
    """Phase 2 starts from the end of phase 1: a checkpoint whose progress record says that its run stopped before
    that (a SIGTERM or --steps-this-run checkpoint, after which run_pretraining.py exits 0) is a ValueError naming
    the folder, which parse_args reports. The end is --max-steps, and under a time budget the step that spent it
    (or --max-steps, as a cap), as phase_done decides on a rerun. Weights without a progress record, and
    checkpoints from before max_steps was recorded, are taken as they are."""
    if not checkpoint.is_complete(folder, prefix):
        return
    progress = checkpoint.read_progress(folder, prefix)
    step, max_steps = progress["global_step"], progress.get("max_steps")
    budget, elapsed = progress.get("time_budget_minutes"), progress.get("elapsed_training_seconds", 0.0)
    if max_steps is not None and step >= max_steps:
        return
    if budget is not None and elapsed < 60.0 * budget:
        raise ValueError(f"--from-phase1-final-params {folder}: phase 1 stopped after {elapsed / 60:.2f} of its "
                         f"{budget:g} minutes (interrupted?); rerun phase 1 to finish it first")
    if budget is None and max_steps is not None:
        raise ValueError(f"--from-phase1-final-params {folder}: phase 1 stopped at step {step} of its --max-steps "
                         f"{max_steps} (interrupted, or --steps-this-run?); rerun phase 1 to finish it first, or "
                         f"start phase 2 from these weights as they are with --from-pretrained-params {folder}")


def load_weights_only(model: paddle.nn.Layer, config: BertConfig, folder: str, prefix: str, flag: str) -> None:
    """Start from the weights in <folder>/<prefix>.pdparams. Pre-training heads the file lacks (an encoder-only
    model) start from their initialisation; a missing embedding or encoder weight is an error, and so is a config
    beside the weights that builds another network than the run's `config`."""
    check_same_network(config, resolve_weights_file(folder, prefix, flag), flag)
    report = load_pretrained(model, folder, required=("embeddings", "encoder"), flag=flag, model_prefix=prefix)
    print(f"{flag} {report.describe()}", flush=True)


# The options a resume may change, each of which changes how the run trains from there on: every checkpoint records
# them, and a resume names each one it changes. The others that shape training cannot change on resume: the network
# (check_same_network, and _check_compatible's switches), the learning-rate schedule (lr_scheduler refuses another
# one's state), --max-steps and --time-budget (_check_compatible), --seed and --batch-size (the loader refuses a data
# position of another order; with another number of ranks, whose order restarts anyway, continue_streams says so).
RESUMABLE_TRAINING_OPTIONS = (
    "no_dropout", "masked_lm_ratio", "whole_word_masking", "pack_sequences", "max_seq_length",
    "max_predictions_per_seq", "gradient_merge_steps", "gradient_merge_ramp", "optimizer", "beta1", "beta2", "epsilon",
    "weight_decay", "max_grad_norm", "amp", "amp_dtype", "scale_loss", "use_dynamic_loss_scaling", "min_loss_scale",
    "float32_precision",
)


class RunCheckpoints:
    """This run's checkpoints: the progress record it saves with every rank's data position and random
    streams, and the resume that reads the same record back."""

    def __init__(self, args: argparse.Namespace, phase: int, rank: int, world_size: int):
        self.args, self.phase, self.rank, self.world_size = args, phase, rank, world_size
        self.folder = checkpoint.phase_dir(args.output_dir, args.bert_model, phase)
        self.resumed_from: Path | None = None

    def _resolve(self, say) -> checkpoint.Resume | None:
        """The checkpoint to resume from, loaded (None: start fresh). Rank 0 resolves it, setting unreadable ones
        aside, and checks that the run writes over nothing of an earlier run; every rank learns the outcome."""
        args = self.args
        resume, failure, outcome = None, None, {}
        if self.rank == 0:
            try:
                resume = checkpoint.open_resume_checkpoint(args.from_checkpoint, args.last_step_of_checkpoint,
                                                           self.folder, args.model_prefix)
                if not args.benchmark:  # a benchmark writes no checkpoints
                    checkpoint.check_no_later_checkpoints(self.folder, resume.progress["global_step"] if resume
                                                          else 0)
                outcome = {"folder": str(resume.folder) if resume else None}
            except (OSError, ValueError) as error:
                failure, outcome = error, {"error": str(error)}
            for moved in resume.set_aside if resume else ():
                say(f"Set aside {moved.original} as {moved.moved_to.name}: {moved.reason}", flush=True)
        outcome = gather_from_ranks(outcome, self.world_size)[0]
        if failure is not None:
            raise failure
        if "error" in outcome:
            raise ValueError(outcome["error"])  # rank 0's error, so that every rank stops with it
        if self.rank == 0 or outcome["folder"] is None:
            return resume
        return checkpoint.open_checkpoint(Path(outcome["folder"]), args.model_prefix)

    def _check_compatible(self, resume: checkpoint.Resume, master_weights: bool) -> None:
        """The settings a checkpoint can only be resumed with; each error says what to do instead."""
        args, progress, folder = self.args, resume.progress, resume.folder
        if progress.get("phase", self.phase) != self.phase:
            # Resuming phase 2 from phase 1's optimizer state would also take over its finished schedule (LR 0).
            raise ValueError(f"{folder}: a phase-{progress['phase']} checkpoint cannot resume phase "
                             f"{self.phase}; start phase 2 from its weights with --from-phase1-final-params")
        # Switches that change the model's parameters: a resume under the other setting would silently start
        # (or drop) layers that the optimizer state and the schedule say are trained.
        for name in ("fuse_mha", "no_nsp"):
            if progress.get(name, getattr(args, name)) != getattr(args, name):
                flag = "--" + name.replace("_", "-")
                raise ValueError(f"{folder}: saved {'with' if progress[name] else 'without'} {flag}; resume with the "
                                 "same setting, or start from its weights with --from-pretrained-params")
        # AMP level O2 keeps fp32 master weights, and the moments under their names, in the optimizer state; the
        # other levels keep neither, so Paddle's set_state_dict would fail on a missing accumulator.
        if progress.get("use_pure_fp16", master_weights) != master_weights:
            raise ValueError(f"{folder}: saved {'with' if progress['use_pure_fp16'] else 'without'} --use-pure-fp16 "
                             "(AMP O2: fp32 master weights in the optimizer state), this run is the other way; "
                             "resume with the same AMP level, or start from its weights with --from-pretrained-params")
        # Checkpoints from before --time-budget existed have no time_budget_minutes: their runs had no budget.
        if progress.get("time_budget_minutes") != args.time_budget:
            saved, now = (f"--time-budget {budget:g}" if budget is not None else "no --time-budget"
                          for budget in (progress.get("time_budget_minutes"), args.time_budget))
            raise ValueError(f"{folder}: saved by a run with {saved}, this one has {now}; the learning-rate "
                             f"schedule spans the budget (or --max-steps without one), so resume with {saved} (for a "
                             f"new schedule, start from its weights: --from-pretrained-params {folder} with another "
                             "--output-dir)")
        # Under a budget --max-steps only caps the steps, and may change between runs.
        if args.time_budget is None and progress.get("max_steps", args.max_steps) != args.max_steps:
            raise ValueError(f"{folder}: saved by a run with --max-steps {progress['max_steps']}, this one has "
                             f"--max-steps {args.max_steps}; the learning-rate schedule spans --max-steps, so resume "
                             f"with --max-steps {progress['max_steps']} (for a new schedule, start from its weights: "
                             f"--from-pretrained-params {folder} with another --output-dir)")

    def _announce_changed_options(self, progress: dict, say) -> None:
        """One line for each of RESUMABLE_TRAINING_OPTIONS that this run sets otherwise than the checkpoint's
        (none for a checkpoint from before they were recorded)."""
        saved = progress.get("training_options", {})
        for name in RESUMABLE_TRAINING_OPTIONS:
            now = getattr(self.args, name)
            if name in saved and saved[name] != now:
                say(f"Resuming with --{name.replace('_', '-')} changed: {saved[name]} -> {now}", flush=True)

    def restore(self, trainer: Trainer, say) -> dict:
        """Load the checkpoint to resume from (weights, optimizer, schedule, loss scale), or else the starting
        weights of --from-phase1-final-params / --from-pretrained-params. Returns its progress ({} if fresh)."""
        args = self.args
        resume = self._resolve(say)
        if resume is None:
            if args.last_step_of_checkpoint == "auto":
                say("No checkpoint to resume from; starting at step 1", flush=True)
            if args.from_phase1_final_params is not None:
                load_weights_only(trainer.model, trainer.config, args.from_phase1_final_params, args.model_prefix,
                                  "--from-phase1-final-params")
            elif args.from_pretrained_params is not None:
                load_weights_only(trainer.model, trainer.config, args.from_pretrained_params, args.model_prefix,
                                  "--from-pretrained-params")
            return {}
        self._check_compatible(resume, trainer.policy.master_weights)
        check_same_network(trainer.config, resume.folder / f"{args.model_prefix}.pdparams", "resuming from")
        load_state(trainer.model, resume.model_state, str(resume.folder))
        checkpoint.load_optimizer_state(trainer.model, trainer.optimizer, resume.optimizer_state, str(resume.folder))
        if trainer.scaler and resume.progress.get("loss_scaler"):
            trainer.scaler.load_state_dict(resume.progress["loss_scaler"])
        self._announce_changed_options(resume.progress, say)
        say(f"Resuming from {resume.folder} at step {resume.progress['global_step']}", flush=True)
        self.resumed_from = resume.folder
        return resume.progress

    def continue_streams(self, loader: PretrainingDataLoader, progress: dict, say) -> None:
        """Put this rank's data position and random generators back where the checkpoint left them."""
        if not progress:
            return
        if progress.get("world_size") == self.world_size:
            loader.load_state_dict(progress["data_positions"][self.rank])
            checkpoint.restore_rng_state(progress["rng_states"][self.rank])
        else:
            say(f"Warning: {self.resumed_from} was written by {progress.get('world_size')} ranks, this run has "
                f"{self.world_size}; the data order and random streams restart instead of continuing exactly",
                flush=True)

    def save(self, step: int, trainer: Trainer, loader: PretrainingDataLoader, nonfinite_streak: int,
             elapsed: float, trained_sequences: int | None, with_safetensors: bool = False) -> None:
        """Every rank gathers its streams to rank 0, which writes <phase folder>/<step>/ with `elapsed`, the
        elapsed training time in seconds, and `trained_sequences`, the phase's sequences so far (None: not known,
        the run resumed a checkpoint from before the count was kept); with_safetensors: with the weights'
        .safetensors twin in it, written in the same atomic save."""
        rng_states = gather_from_ranks(checkpoint.capture_rng_state(), self.world_size)
        positions = gather_from_ranks(loader.state_dict(), self.world_size)
        record = {
            "phase": self.phase, "world_size": self.world_size, "fuse_mha": self.args.fuse_mha,
            "no_nsp": self.args.no_nsp, "use_pure_fp16": trainer.policy.master_weights,
            "max_steps": self.args.max_steps, "time_budget_minutes": self.args.time_budget,
            "elapsed_training_seconds": elapsed, "trained_sequences": trained_sequences,
            "epoch": loader.epoch, "data_positions": positions, "rng_states": rng_states,
            "nonfinite_streak": nonfinite_streak,
            "loss_scaler": trainer.scaler.state_dict() if trainer.scaler else None,
            "training_options": {name: getattr(self.args, name) for name in RESUMABLE_TRAINING_OPTIONS},
        }
        checkpoint.save_checkpoint(
            self.folder, step, trainer.model.state_dict(),
            checkpoint.optimizer_state_for_saving(trainer.model, trainer.optimizer), record,
            config=trainer.config, rank=self.rank, prefix=self.args.model_prefix,
            keep_max=self.args.keep_checkpoint_max, with_safetensors=with_safetensors, vocab_file=self.args.vocab_file,
        )


# ---------------------------------------------------------------------------------------------
# Stop requests: a signal or the stop file ends the run at the next step boundary
# ---------------------------------------------------------------------------------------------


# run.sub creates this file when Slurm's --signal warning arrives (Paddle's launcher would not wait for its ranks
# to checkpoint on a SIGTERM of its own).
STOP_FILE_VARIABLE = "PADDLEBERT_STOP_FILE"
# The signals that ask for a checkpoint at the next step boundary and an exit 0: SIGTERM (what Slurm sends before a
# time limit), SIGUSR1 (what `sbatch --signal=USR1@N` without B: sends to the steps), SIGHUP (a closed terminal or
# ssh session) and SIGINT (Ctrl-C; a second one stops at once).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGHUP, signal.SIGINT)


class StopRequest:
    """Whether this rank has been asked to stop at the next step boundary: by one of STOP_SIGNALS, or by the file
    named in $PADDLEBERT_STOP_FILE existing. The run saves and exits 0. A second SIGINT raises KeyboardInterrupt
    at once (cli.run_main prints it as one line); a save it interrupts leaves the earlier checkpoints whole."""

    def __init__(self, stop_file: str | None):
        self.stop_file = stop_file or None
        self.signalled: str | None = None  # the name of the signal received
        self._previous: dict[int, object] = {}

    def _handle(self, signum, frame) -> None:
        if signum == signal.SIGINT and self.signalled == "SIGINT":
            raise KeyboardInterrupt("interrupted again: stopped at once, without saving the steps since the last "
                                    "checkpoint")
        if self.signalled is None:
            self.signalled = signal.Signals(signum).name
            # os.write, not print: a handler that prints while the interrupted code prints fails as reentrant.
            again = " (Ctrl-C again to stop at once)" if signum == signal.SIGINT else ""
            os.write(1, f"{self.signalled}: saving a checkpoint after this step, then stopping"
                     f"{again}\n".encode())

    def reason(self) -> str | None:
        """What asked this rank to stop, or None."""
        if self.signalled is not None:
            return self.signalled
        if self.stop_file is not None and os.path.exists(self.stop_file):
            return f"stop file {self.stop_file}"
        return None

    def __enter__(self) -> StopRequest:
        self._previous = {signum: signal.signal(signum, self._handle) for signum in STOP_SIGNALS}
        return self

    def __exit__(self, *exc_info) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)


# ---------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------


def count_nonfinite(streak: int, step: int, result: StepResult, limit: int) -> int:
    """The number of non-finite steps in a row after this one; stops the run once it exceeds --max-nonfinite-steps."""
    if not result.skipped:
        return 0
    streak += 1
    if streak > limit:
        raise SystemExit(f"step {step}: the loss has been non-finite for {streak} steps in a row, more than "
                         f"--max-nonfinite-steps {limit}; stopping")
    return streak


def last_step_of_run(args: argparse.Namespace, start_step: int) -> int | None:
    """The step this run ends at, at the latest: --max-steps, or --steps-this-run's end if sooner; None when only
    --time-budget ends it."""
    if args.benchmark:
        return start_step + args.benchmark_warmup_steps + args.benchmark_steps
    ends = [args.max_steps, None if args.steps_this_run is None else start_step + args.steps_this_run]
    return min((end for end in ends if end is not None), default=None)


def phase_done(args: argparse.Namespace, start_step: int, last_step: int | None, elapsed: float) -> str | None:
    """How far a resumed phase that has nothing left to train went (a rerun of a finished job, as NVIDIA's
    recipes rerun the same command), or None: it reached --max-steps, or spent --time-budget."""
    if args.benchmark:
        return None
    if last_step is not None and start_step >= last_step:
        return f"step {start_step} of --max-steps {args.max_steps}"
    if args.time_budget is not None and elapsed >= 60.0 * args.time_budget:
        return f"step {start_step}, after {elapsed / 60:.2f} minutes of training of --time-budget {args.time_budget:g}"
    return None


def agreed_elapsed(stopwatch: TrainingStopwatch, world_size: int) -> float:
    """The elapsed training time in seconds, the same on every rank: the largest of the ranks' own readings, so
    that the ranks set the same learning rate under --time-budget and end the run at the same step."""
    elapsed = stopwatch.elapsed()
    if world_size == 1:
        return elapsed
    value = paddle.to_tensor([elapsed], "float64")
    paddle.distributed.all_reduce(value, op=paddle.distributed.ReduceOp.MAX)
    return float(value.numpy()[0])


def build_loader(args: argparse.Namespace, rank: int, world_size: int) -> PretrainingDataLoader:
    """The rank's loader; a --batch-size beyond the samples the rank reads in an epoch is refused before any batch
    is assembled (the loader would cut it to one batch of everything, which may not fit in memory)."""
    loader = PretrainingDataLoader(
        args.input_dir, args.vocab_file, batch_size=args.batch_size, max_seq_length=args.max_seq_length,
        max_predictions_per_seq=args.max_predictions_per_seq, seed=args.seed, rank=rank, world_size=world_size,
        num_workers=args.num_workers, masked_lm_ratio=args.masked_lm_ratio,
        whole_word_masking=args.whole_word_masking, nsp=not args.no_nsp,
    )
    if args.batch_size > loader.num_samples:
        raise ValueError(f"--batch-size {args.batch_size} is more than the {loader.num_samples} samples of "
                         f"--input-dir {args.input_dir} that rank {rank} of {world_size} reads in an epoch")
    return loader


def activation_bytes(config: BertConfig, batch_size: int, seq_length: int, masked_per_seq: int) -> int:
    """The memory one micro-batch's forward pass keeps for the backward pass, in fp32: per encoder layer
    s*b*h*(34 + 5*a*s/h) bytes at 16 bits (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
    Transformer Models", arXiv:2205.05198, section 4.1), twice that in fp32, and the masked-LM head's [M, V] scores
    with their softmax and gradient (three fp32 copies)."""
    s, b, h, a = seq_length, batch_size, config.hidden_size, config.num_attention_heads
    per_layer = s * b * h * (34 + 5 * a * s / h)
    head = 3 * 4 * b * masked_per_seq * config.padded_vocab_size
    return int(2 * config.num_hidden_layers * per_layer + head)


def available_memory_bytes(meminfo: str = "/proc/meminfo") -> int | None:
    """MemAvailable of the kernel (what can be allocated without swapping), or None where there is no such file."""
    try:
        with open(meminfo, encoding="ascii") as reader:
            for line in reader:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def check_batch_fits_in_memory(args: argparse.Namespace, config: BertConfig, available: int | None) -> None:
    """On a CPU, a --batch-size whose activations alone exceed the memory available now is refused before any batch
    is assembled: the run would otherwise swap or be killed after minutes of building it (a GPU's memory is its own,
    and Paddle says so at the first step)."""
    if paddle.get_device() != "cpu" or available is None:
        return
    needed = activation_bytes(config, args.batch_size, args.max_seq_length, args.max_predictions_per_seq)
    if needed > available:
        raise ValueError(f"--batch-size {args.batch_size}: its activations alone need about {needed / 2**30:.1f} GiB "
                         f"at --max-seq-length {args.max_seq_length}, and {available / 2**30:.1f} GiB of memory is "
                         "available; give a smaller --batch-size (with --gradient-merge-steps for the same batch)")


def check_vocab_fits(args: argparse.Namespace, config: BertConfig, loader: PretrainingDataLoader) -> None:
    """Every id of --vocab-file must have an embedding row (else the embedding kernel fails on the first batch)."""
    vocab_size = max(loader.ids_to_tokens) + 1
    if config.vocab_size < vocab_size:
        raise ValueError(f"--config-file {args.config_file}: vocab_size {config.vocab_size} is smaller than the "
                         f"{vocab_size} tokens of --vocab-file {args.vocab_file}")


def announce(args: argparse.Namespace, logger: DLLogger, say, rank: int, world_size: int,
             process_info: dict) -> None:
    """Print this rank's CPUs; with --show-config, report the arguments and say where (once, from rank 0)."""
    print(f"Rank {rank} of {world_size}: CPUs {process_info['cpu_affinity'] or 'not pinned'}, "
          f"{process_info['cpu_threads']} threads", flush=True)
    if args.show_config:
        config_record = vars(args) | process_info | {"world_size": world_size}
        logger.log("PARAMETER", config_record)
        say(f"Configuration: the PARAMETER record of {args.report_file}", flush=True)  # 2 KB, not for the screen


def check_eval_batches(evaluator: PretrainingEvaluator) -> None:
    """Build every evaluation batch once before training: --eval-dir shards that do not fit this run (longer
    sequences than --max-seq-length, single segments in an NSP run) stop it now, in the loader's one line, rather
    than at the first evaluation, --eval-freq steps later. Each evaluation rewinds its loader, so this changes
    nothing it will read."""
    for _ in islice(evaluator.loader, evaluator.num_batches):
        pass
    evaluator.loader.load_state_dict(evaluator.start)


def claim_output_dir(args: argparse.Namespace, phase: int, rank: int, world_size: int) -> None:
    """Before any work: rank 0 locks --output-dir for the run's life (one run per folder, folder_lock.py) and
    checks that the phase folder can take checkpoints; every rank stops with rank 0's one-line error."""
    failure = None
    if rank == 0:
        try:
            folder_lock.hold(args.output_dir, "--output-dir")
            if not args.benchmark:  # a benchmark saves no checkpoint
                phase_folder = checkpoint.phase_dir(args.output_dir, args.bert_model, phase)
                flag = "--output-dir's phase folder"
                folder_lock.check_writable(folder_lock.prepare_output_folder(phase_folder, flag), flag)
        except ValueError as error:
            failure = str(error)
    failure = gather_from_ranks(failure, world_size)[0]
    if failure is not None:
        raise ValueError(failure)


def train_phase(args: argparse.Namespace, phase: int, rank: int, world_size: int, process_start: float,
                process_info: dict) -> int:
    # The report file gets every record; stdout gets the shorter progress lines of ProgressReporter instead.
    logger = open_report(args, enabled=rank == 0, stdout=False)
    say = print if rank == 0 else (lambda *a, **k: None)
    announce(args, logger, say, rank, world_size, process_info)
    trainer = Trainer(args, rank, world_size)
    loader = build_loader(args, rank, world_size)
    check_batch_fits_in_memory(args, trainer.config, available_memory_bytes())
    check_vocab_fits(args, trainer.config, loader)
    if args.pack_sequences:
        check_packable(loader.shards.sample_lengths(), args.max_seq_length, args.batch_size, args.input_dir)
    checkpoints = RunCheckpoints(args, phase, rank, world_size)
    progress = checkpoints.restore(trainer, say)
    trainer.wrap_data_parallel()
    checkpoints.continue_streams(loader, progress, say)
    step = start_step = progress.get("global_step", 0)
    nonfinite_streak = progress.get("nonfinite_streak", 0)
    # Checkpoints saved before the elapsed training time was recorded count it from 0.
    elapsed = progress.get("elapsed_training_seconds", 0.0)
    last_step = last_step_of_run(args, start_step)
    budget = None if args.time_budget is None else 60.0 * args.time_budget
    done = phase_done(args, start_step, last_step, elapsed)
    if done is not None:
        say(f"Phase {phase} is complete: {checkpoints.folder / str(start_step)} is {done}; nothing to train",
            flush=True)
        logger.close()
        return 0
    evaluator = build_evaluator(args, rank, world_size, logger, say)
    if evaluator is not None:
        check_eval_batches(evaluator)
    end = str(last_step) if budget is None else f"{args.time_budget:g} minutes of training" + (
        "" if last_step is None else f" or step {last_step}")
    say(f"Training phase {phase} from step {start_step + 1} to {end} on {world_size} rank(s)", flush=True)
    visualdl = open_run_log(args.visualdl_log_dir, rank=rank, resume=start_step > 0, start_step=start_step,
                            config=vars(args))
    reporter = ProgressReporter(logger, say, start_step, last_step, args.log_freq, lambda: loader.epoch,
                                nsp=not args.no_nsp, visualdl=visualdl, budget_seconds=budget,
                                trained_sequences=progress.get("trained_sequences", None if progress else 0))
    stopwatch = TrainingStopwatch(elapsed)
    batches = iter(loader)
    last = False
    with StopRequest(os.environ.get(STOP_FILE_VARIABLE)) as stop_request:
        stopwatch.start()
        while not last:
            if args.benchmark and step == start_step + args.benchmark_warmup_steps:
                reporter.start_timing()
            reason = stop_request.reason()
            trained = elapsed / budget if budget is not None else step / args.max_steps  # fraction of the run
            micro_batches = ramped_merge_steps(args.gradient_merge_steps, args.gradient_merge_ramp, trained)
            result, stop = trainer.step([next(batches) for _ in range(micro_batches)], reason is not None)
            step += 1
            elapsed_before, elapsed = elapsed, agreed_elapsed(stopwatch, world_size)
            trainer.set_elapsed_training_time(elapsed)
            last = step == last_step or (budget is not None and elapsed >= budget)
            reporter.record(step, result, stopping=stop or last, elapsed=elapsed)
            nonfinite_streak = count_nonfinite(nonfinite_streak, step, result, args.max_nonfinite_steps)
            with stopwatch.paused():  # validation and checkpoint writing are not training time
                if evaluator is not None and evaluator.due(step, elapsed_before, elapsed, last, stop):
                    evaluator.run(step, elapsed, trainer.model, trainer.policy, reporter.log)
                checkpoint_due = step % args.num_steps_per_checkpoint == 0 or last or stop
                if checkpoint_due and not args.benchmark:
                    # The final weights' twin goes into the checkpoint's own atomic save: no kill can part them.
                    checkpoints.save(step, trainer, loader, nonfinite_streak, elapsed, reporter.trained_sequences,
                                     with_safetensors=args.save_safetensors and last)
            if stop:
                where = checkpoints.folder / str(step)
                saved = "no checkpoint in benchmark mode" if args.benchmark else f"checkpoint in {where}"
                say(f"{reason or 'Another rank was asked to stop'}: stopped after step {step} ({saved})", flush=True)
                break
    if budget is not None and elapsed >= budget:
        say(f"Time budget spent: {elapsed / 60:.2f} of --time-budget {args.time_budget:g} minutes of training after "
            f"step {step} (final checkpoint in {checkpoints.folder / str(step)})", flush=True)
    if args.save_safetensors and rank == 0 and last and not args.benchmark:
        say(f"Final weights also in {checkpoints.folder / str(step) / (args.model_prefix + SAFETENSORS_SUFFIX)}",
            flush=True)
    summary = reporter.summarise(process_start, world_size)
    if args.benchmark:
        say(f"Benchmark: {summary['training_sequences_per_second']:.2f} sequences/s over {summary['timed_steps']} "
            f"steps after {args.benchmark_warmup_steps} warmup steps", flush=True)
    logger.close()
    return 0


def run(args: argparse.Namespace, process_start: float, process_info: dict) -> int:
    rank, world_size = init_data_parallel()
    phase = 1 if args.phase1 else 2
    claim_output_dir(args, phase, rank, world_size)
    try:
        return train_phase(args, phase, rank, world_size, process_start, process_info)
    finally:
        folder_lock.release(args.output_dir)


def main(argv: Sequence[str] | None = None) -> int:
    process_start = time.time()
    args = parse_args(argv)
    process_info = {"cpu_affinity": set_cpu_affinity() if args.enable_cpu_affinity else None}
    process_info["cpu_threads"] = configure_cpu_threads()
    process_info.update(apply_cpu_tweaks())
    # Fresh parameter-name counters, so that a run called from Python names everything as a new process would.
    with paddle.utils.unique_name.guard():
        return run(args, process_start, process_info)


if __name__ == "__main__":
    sys.exit(cli.run_main(main, "run_pretraining.py"))
