"""Validation during pre-training: masked-LM and next-sentence loss and accuracy on held-out shards.

    run_pretraining.py ... --eval-dir SHARDS_holdout --eval-freq 1000 --num-eval-batches 100
    run_pretraining.py ... --eval-dir SHARDS_holdout --eval-interval-minutes 5 --time-budget 60

When: every --eval-freq steps, or with --eval-interval-minutes M instead at the first step boundary after the
elapsed training time (time_budget.py) crosses each multiple of M minutes; and at the run's last step (its
--max-steps, the end of --steps-this-run, or the step that spends --time-budget), but not after a stop request.

Every evaluation reads the same batches: the first --num-eval-batches of a loader over --eval-dir with its own
seed (EVAL_SEED, not --seed), rewound each time. Shards without static masks are masked by the loader from that
seed, with BERT's masks (15% of the tokens, single pieces) whatever --masked-lm-ratio and --whole-word-masking
train with, so the masks are fixed too, and the numbers are comparable across steps and across runs, recipes
with other masking included. Each rank
evaluates its own slice of the held-out shards (the loader's rank sharding); the sums are all-reduced, so every
rank gets the numbers of the whole evaluation set.

Reported at the step, in the DLLogger report and in one printed line:
- eval_mlm_loss: mean cross-entropy over all masked positions of the evaluation batches (token-weighted, as the
  training loss over a global batch); eval_mlm_accuracy: the fraction of them whose arg-max prediction is the
  original token; eval_masked_tokens: their number;
- eval_nsp_loss and eval_nsp_accuracy, over eval_sequences sequences (not under --no-nsp, which has no NSP head);
- elapsed_training_minutes: the elapsed training time at that step boundary, so that a script can plot the
  validation numbers against pretraining minutes. A validation record is the LOG record at [epoch, step] whose
  data has eval_mlm_loss; its step is the optimizer step, data's elapsed_training_minutes the time.

An evaluation changes nothing the training depends on: it runs in eval mode (no dropout, so Paddle's generator
draws nothing) under paddle.no_grad(), on its own loader (the training loader's position does not move), and
the model goes back to training mode afterwards.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from itertools import islice
from pathlib import Path

import numpy as np
import paddle
import paddle.nn.functional as F

from loss import IGNORE_INDEX
from preprocessing.masking import MASKED_LM_RATIO
from pretraining_dataset import PretrainingDataLoader
from training.amp import AmpPolicy, amp_autocast
from utils import cli
from utils.dllog import DLLogger
from utils.time_budget import crossed_multiple

# The evaluation loader's seed (file order and dynamic masks): one constant, so that runs with different --seed
# evaluate on the same masked batches.
EVAL_SEED = 20190411
DEFAULT_EVAL_FREQ = 1000
DEFAULT_NUM_EVAL_BATCHES = 100
# Sums over the evaluation batches, in this order, all-reduced as one vector.
_SUMS = ("mlm_loss", "mlm_correct", "masked_tokens", "nsp_loss", "nsp_correct", "sequences")


def add_eval_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("Validation")
    group.add_argument("--eval-dir", default=None,
                       help="Held-out shards (e.g. lddl_preprocess.py --holdout-fraction's <output-dir>_holdout) "
                       "to evaluate on every --eval-freq steps (or --eval-interval-minutes of training) and at "
                       "the last step: masked-LM and NSP loss and accuracy, with the same masks every time.")
    group.add_argument("--eval-freq", type=int, default=None,
                       help=f"Evaluate every this many steps (with --eval-dir; default {DEFAULT_EVAL_FREQ}, none with "
                       "--eval-interval-minutes).")
    group.add_argument("--eval-interval-minutes", type=cli.positive_float, default=None,
                       help="Evaluate instead each time the elapsed training time (see --time-budget) crosses a "
                       "multiple of this many minutes, at the first step boundary after it (with --eval-dir; not "
                       "with --eval-freq). Each record holds elapsed_training_minutes.")
    group.add_argument("--num-eval-batches", type=int, default=None,
                       help="Batches of --eval-batch-size sequences per rank in each evaluation, at most one pass "
                       f"over --eval-dir (with --eval-dir; default {DEFAULT_NUM_EVAL_BATCHES}).")
    group.add_argument("--eval-batch-size", type=int, default=None,
                       help="Sequences per evaluation batch (with --eval-dir; default --batch-size). The batches "
                       "and their masks follow from --eval-dir, this and --num-eval-batches, so a phase that trains "
                       "at another batch size validates on another phase's sequences and masks by giving its batch "
                       "size.")


def check_eval_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse what could not take effect; fill in the defaults of --num-eval-batches and, unless validation goes by
    --eval-interval-minutes, of --eval-freq."""
    if args.eval_dir is None:
        for flag in ("eval_freq", "num_eval_batches", "eval_interval_minutes", "eval_batch_size"):
            if getattr(args, flag) is not None:
                parser.error(f"--{flag.replace('_', '-')} needs --eval-dir")
        return
    if not Path(args.eval_dir).is_dir():
        parser.error(f"--eval-dir {args.eval_dir}: no such folder")
    if args.benchmark:
        parser.error("--eval-dir cannot be used with --benchmark (evaluations would count in the timed steps)")
    if args.eval_interval_minutes is not None and args.eval_freq is not None:
        parser.error("--eval-freq and --eval-interval-minutes cannot both be set: evaluate by steps or by time")
    defaults = {"num_eval_batches": DEFAULT_NUM_EVAL_BATCHES, "eval_batch_size": args.batch_size}
    if args.eval_interval_minutes is None:
        defaults["eval_freq"] = DEFAULT_EVAL_FREQ
    for flag, default in defaults.items():
        value = getattr(args, flag)
        if value is None:
            setattr(args, flag, default)
        elif value < 1:
            parser.error(f"--{flag.replace('_', '-')} must be at least 1, got {value}")


def batch_sums(model: paddle.nn.Layer, batch: dict, policy: AmpPolicy) -> dict[str, float]:
    """_SUMS of one batch: summed (not averaged) losses, correct predictions and counts."""
    labels = batch["masked_lm_labels"].reshape(-1)  # [B*L]
    positions = np.flatnonzero(labels != IGNORE_INDEX)  # [M]
    with amp_autocast(policy):
        prediction_scores, seq_relationship_score = model(
            paddle.to_tensor(batch["input_ids"]), paddle.to_tensor(batch["token_type_ids"]),
            paddle.to_tensor(batch["attention_mask"]), paddle.to_tensor(positions.astype(np.int64)),
        )
    sums = dict.fromkeys(_SUMS, 0.0)
    if len(positions):
        mlm_labels = paddle.to_tensor(labels[positions].astype(np.int64))  # [M]
        scores = prediction_scores.astype("float32")  # [M, V]
        sums["mlm_loss"] = float(F.cross_entropy(scores, mlm_labels, reduction="sum"))
        sums["mlm_correct"] = float((scores.argmax(axis=-1) == mlm_labels).sum())
        sums["masked_tokens"] = float(len(positions))
    if seq_relationship_score is not None:
        next_sentence_labels = paddle.to_tensor(batch["next_sentence_labels"].reshape(-1).astype(np.int64))  # [B]
        scores = seq_relationship_score.astype("float32")  # [B, 2]
        sums["nsp_loss"] = float(F.cross_entropy(scores, next_sentence_labels, reduction="sum"))
        sums["nsp_correct"] = float((scores.argmax(axis=-1) == next_sentence_labels).sum())
        sums["sequences"] = float(len(next_sentence_labels))
    return sums


def metrics_from_sums(sums: dict[str, float], nsp: bool) -> dict[str, float]:
    """The report's eval_* values from the sums of the whole evaluation set."""
    masked, sequences = sums["masked_tokens"], sums["sequences"]
    metrics = {
        "eval_mlm_loss": sums["mlm_loss"] / max(masked, 1.0),
        "eval_mlm_accuracy": sums["mlm_correct"] / max(masked, 1.0),
        "eval_masked_tokens": int(masked),
    }
    if nsp:
        metrics.update(eval_nsp_loss=sums["nsp_loss"] / sequences, eval_nsp_accuracy=sums["nsp_correct"] / sequences,
                       eval_sequences=int(sequences))
    return metrics


class PretrainingEvaluator:
    """The fixed evaluation batches of --eval-dir for this rank, and the evaluation of a model on them."""

    def __init__(self, args: argparse.Namespace, rank: int, world_size: int, logger: DLLogger, say):
        self.world_size, self.logger, self.say = world_size, logger, say
        self.eval_freq, self.nsp = args.eval_freq, not args.no_nsp
        self.interval_seconds = None if args.eval_interval_minutes is None else 60.0 * args.eval_interval_minutes
        # Batches are built in this process (no workers): an evaluation is short, and forking per evaluation
        # would cost more than it saves.
        self.loader = PretrainingDataLoader(
            args.eval_dir, args.vocab_file, batch_size=args.eval_batch_size, max_seq_length=args.max_seq_length,
            max_predictions_per_seq=args.max_predictions_per_seq, seed=EVAL_SEED, rank=rank, world_size=world_size,
            num_workers=0, masked_lm_ratio=MASKED_LM_RATIO, nsp=self.nsp,
        )
        self.start = self.loader.state_dict()
        self.num_batches = min(args.num_eval_batches, self.loader.steps_per_epoch)
        if self.num_batches < args.num_eval_batches:
            say(f"--eval-dir {args.eval_dir} holds {self.num_batches} batches per rank; each evaluation reads "
                f"those, not --num-eval-batches {args.num_eval_batches}", flush=True)
        for name in metrics_from_sums(dict.fromkeys(_SUMS, 1.0), self.nsp):
            logger.metadata(name, {"format": ":d" if name.endswith(("tokens", "sequences")) else ":.4f"})

    def due(self, step: int, elapsed_before: float, elapsed: float, last: bool, stopping: bool) -> bool:
        """Whether to evaluate after `step`, which took the elapsed training time from elapsed_before to elapsed
        (seconds): at the run's last step (`last`), every --eval-freq steps or each time the elapsed time crosses
        a multiple of --eval-interval-minutes; never when a stop request (SIGTERM, ...) ends the run early."""
        if stopping:
            return False
        if last:
            return True
        if self.interval_seconds is not None:
            return crossed_multiple(elapsed_before, elapsed, self.interval_seconds)
        return step % self.eval_freq == 0

    def evaluate(self, model: paddle.nn.Layer, policy: AmpPolicy) -> dict[str, float]:
        """The eval_* metrics of `model` (the layer itself, not its DataParallel wrapper) over the evaluation set."""
        self.loader.load_state_dict(self.start)
        totals = np.zeros(len(_SUMS))
        was_training = model.training
        model.eval()
        try:
            with paddle.no_grad():
                for batch in islice(self.loader, self.num_batches):
                    sums = batch_sums(model, batch, policy)
                    totals += [sums[name] for name in _SUMS]
        finally:
            model.train(was_training)
        if self.world_size > 1:
            reduced = paddle.to_tensor(totals, "float64")
            paddle.distributed.all_reduce(reduced)
            totals = reduced.numpy()
        return metrics_from_sums(dict(zip(_SUMS, totals.tolist(), strict=True)), self.nsp)

    def run(self, step: int, elapsed: float, model: paddle.nn.Layer, policy: AmpPolicy,
            log: Callable[[int, dict], None]) -> dict[str, float]:
        """Evaluate, then report the metrics at `step`, with the elapsed training time (`elapsed` seconds) as
        elapsed_training_minutes, through `log` (the run's report and VisualDL log) and print them in one line."""
        metrics = {**self.evaluate(model, policy), "elapsed_training_minutes": elapsed / 60.0}
        log(step, metrics)
        text = f"eval at step {step} ({metrics['elapsed_training_minutes']:.2f} training minutes): mlm loss " \
               f"{metrics['eval_mlm_loss']:.4f}  mlm accuracy " \
               f"{metrics['eval_mlm_accuracy']:.4f} ({metrics['eval_masked_tokens']} masked tokens)"
        if self.nsp:
            text += f"  nsp loss {metrics['eval_nsp_loss']:.4f}  nsp accuracy {metrics['eval_nsp_accuracy']:.4f} " \
                    f"({metrics['eval_sequences']} sequences)"
        self.say(text, flush=True)
        return metrics


def build_evaluator(args: argparse.Namespace, rank: int, world_size: int, logger: DLLogger,
                    say) -> PretrainingEvaluator | None:
    """The evaluator of --eval-dir, or None without it."""
    return None if args.eval_dir is None else PretrainingEvaluator(args, rank, world_size, logger, say)
