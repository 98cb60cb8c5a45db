"""The fine-tuning core that run_squad.py and run_glue.py share: their common options and checks, the run's
set-up, the model with its pretrained weights, data-parallel batches, the training loop and the saved model.

A task script adds only its data, its loss, its predictions and its metrics:

    parser = argparse.ArgumentParser(...)
    data = parser.add_argument_group("Data and outputs"); ...task's data options...
    add_shared_data_arguments(data, max_seq_length=384, max_seq_length_help="...")
    add_model_arguments(parser); add_training_arguments(parser, unit="features", learning_rate=1e-4, ...)
    ...task's prediction options...; add_advanced_arguments(parser)
    args = parser.parse_args(); check_shared_arguments(parser, args, actions=("do_train", "do_predict", ...))

    session = start_session(args)                 # threads, data parallel, report, tokenizer, AMP policy
    model = build_model(args, BertForQuestionAnswering, session)
    model = train(model, features, collate, loss, args, session, unit="features")
    save_fine_tuned(model, args, session)

Training: AdamW with decoupled weight decay (or --optimizer Lamb/Lans), gradients clipped to a global norm of
1.0, linear warmup from --warmup-start-lr to --learning-rate over --warmup-proportion of the updates and then
linear decay to 0 (Devlin et al. 2019, appendix A.3). Each update merges --gradient-merge-steps micro-batches of
--train-batch-size sequences per rank with gradient_merge.merged_backward, so that k micro-batches on W ranks
give exactly the update of one batch of all their sequences; gradient_merge.optimizer_step, pretraining's
update too, skips (and reports) a step whose loss is not finite or whose float16 gradients overflow. The run
lasts --epochs or --max-steps updates, whichever is fewer, as NVIDIA's run_squad.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

import numpy as np
import paddle

from bert_config import BERT_MODELS, BertConfig, build_config
from checkpoints.checkpoint import CONFIG_SUFFIX, PARAMS_SUFFIX, open_resume_checkpoint
from checkpoints.paddle_files import write_safetensors_state
from checkpoints.weights import (
    check_vocabulary_matches,
    encoder_fingerprint,
    load_pretrained,
    model_config_file,
    part_of,
    safetensors_beside,
)
from finetuning.feature_batching import batch_indices
from lr_scheduler import create_lr_scheduler
from modeling import INPUT_NAMES
from optimizer import add_optimizer_arguments, create_optimizer
from preprocessing.packing import PACKED_MODEL_INPUTS
from tokenizer import BertTokenizer, load_vocab, vocab_looks_cased
from training.amp import AmpPolicy, add_amp_arguments, amp_autocast, amp_policy, amp_prepare, check_amp_arguments
from training.gradient_merge import all_reduce_sum, merged_backward, optimizer_step
from training.runtime import apply_cpu_tweaks, configure_cpu_threads, init_data_parallel, set_cpu_affinity
from utils import folder_lock
from utils.atomic_io import atomic_write_set, text_writer
from utils.cli import (
    checkpoint_step,
    default_report_file,
    file_name,
    finite_float,
    positive_int,
    random_seed,
    str_to_bool,
    unit_interval,
)
from utils.dllog import DLLogger, open_report
from utils.visualdl_log import open_run_log

MAX_GRAD_NORM = 1.0  # gradient clipping of Google's and NVIDIA's fine-tuning recipes
# Batches are padded to a multiple of 8 tokens, the granularity of tensor-core matrix tiles; the padding is masked.
SEQUENCE_MULTIPLE = 8
# Both tasks need the embeddings and the encoder. SQuAD never reads the pooler; GLUE's classifier does, and a
# checkpoint without one (a masked-LM-only model) starts it from random initialisation, which the load reports.
REQUIRED_PARTS = ("embeddings", "encoder")

Feature = TypeVar("Feature")
Batch = dict[str, np.ndarray]


# ---------------------------------------------------------------------------------------------
# Options
# ---------------------------------------------------------------------------------------------


def add_shared_data_arguments(group: argparse._ArgumentGroup, *, max_seq_length: int, max_seq_length_help: str) -> None:
    """--vocab-file, --do-lower-case, --output-dir, --report-file, --model-prefix and --max-seq-length."""
    group.add_argument("--vocab-file", required=True, help="WordPiece vocabulary the model was pretrained with")
    group.add_argument("--do-lower-case", action=argparse.BooleanOptionalAction, default=None,
                       help="lowercase and strip accents (uncased models); default: from the vocabulary's case")
    group.add_argument("--output-dir", required=True,
                       help="where the fine-tuned model, predictions and report are written")
    group.add_argument("--report-file", help="DLLogger JSON report; default <output-dir>/report.json")
    group.add_argument("--model-prefix", type=file_name, default="bert_paddle",
                       help="file name prefix of saved models (a name, not a path)")
    group.add_argument("--overwrite", action="store_true",
                       help="replace the fine-tuned model that --do-train would save over in --output-dir, and the "
                            "export in --export-dir; otherwise either is refused before anything runs")
    group.add_argument("--max-seq-length", type=positive_int, default=max_seq_length, help=max_seq_length_help)


class _RecordWeightsFlag(argparse.Action):
    """Store the initial weights and which of the flag's two names was typed (args.weights_flag), so that every
    message about them names the flag as the user wrote it."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        namespace.weights_flag = option_string


def weights_flag(args: argparse.Namespace) -> str:
    """The flag the initial weights came from, as typed: --from-pretrained-params, --init-checkpoint or
    --from-checkpoint."""
    if args.from_pretrained_params:
        return getattr(args, "weights_flag", None) or "--from-pretrained-params"
    return "--from-checkpoint"


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """The Model group: --bert-model, --config-file, the initial weights (--from-pretrained-params or
    --init-checkpoint, --from-checkpoint with --last-step-of-checkpoint, or --allow-random-weights), --fuse-mha."""
    model = parser.add_argument_group("Model")
    model.add_argument("--bert-model", default="bert-large-uncased", choices=BERT_MODELS,
                       help="architecture; its bert_configs/<name>.json unless --config-file is given")
    model.add_argument("--config-file",
                       help="BERT config JSON (needed for --bert-model custom); default: the config that comes "
                            f"with the initial weights, <name>{CONFIG_SUFFIX} beside <name>.pdparams|.safetensors (a "
                            "step folder's, or convert_checkpoint.py hf2paddle's), if there is one; a --config-file "
                            "that builds another network than that one is refused")
    model.add_argument("--from-pretrained-params", "--init-checkpoint", dest="from_pretrained_params",
                       action=_RecordWeightsFlag,
                       help="initial weights: a .pdparams or .safetensors file (pretraining, converted Hugging Face "
                            "or fine-tuned), a folder holding <model-prefix>.pdparams or <model-prefix>.safetensors, "
                            "a Hugging Face BERT folder (config.json with model.safetensors or pytorch_model.bin) "
                            "or an NGC file, the last two converted in memory")
    model.add_argument("--from-checkpoint", help="initial weights from run_pretraining.py's checkpoints: one step "
                       "folder, or with --last-step-of-checkpoint the phase folder holding the <step>/ folders (their "
                       "optimizer state and progress are not used)")
    model.add_argument("--last-step-of-checkpoint", type=checkpoint_step, default=None,
                       help="--from-checkpoint is a phase folder: take its step folder N, or with auto the newest "
                            "complete one; None: --from-checkpoint is the step folder itself")
    model.add_argument("--allow-random-weights", action="store_true",
                       help="predict or evaluate without training and without initial weights (random weights, "
                            "scored as they are); otherwise refused")
    model.add_argument("--fuse-mha", action="store_true", help="one fused QKV projection per attention layer")
    model.add_argument("--save-safetensors", action="store_true",
                       help="also write the fine-tuned weights as <output-dir>/<model-prefix>.safetensors, the "
                            "format to share (reading it runs no code)")


def add_training_arguments(parser: argparse.ArgumentParser, *, unit: str, learning_rate: float,
                           warmup_proportion: float) -> argparse._ArgumentGroup:
    """The Training group, returned for a task's own training options; `unit` names what the task trains on
    ("features", "examples") in the help."""
    training = parser.add_argument_group("Training")
    training.add_argument("--do-train", action="store_true", help="fine-tune on --train-file")
    training.add_argument("--epochs", type=positive_int, default=3, help=f"passes over the training {unit}")
    training.add_argument("--max-steps", type=int, default=None,
                          help="at most this many optimizer updates: the run stops at --max-steps or after "
                               "--epochs, whichever comes first, as NVIDIA's (<= 0 means not set)")
    training.add_argument("--train-batch-size", type=positive_int, default=32,
                          help=f"{unit} per process per micro-batch")
    training.add_argument("--gradient-merge-steps", type=positive_int, default=1,
                          help="micro-batches whose gradients are accumulated into one update")
    training.add_argument("--learning-rate", type=finite_float, default=learning_rate, help="peak learning rate")
    training.add_argument("--warmup-start-lr", type=finite_float, default=0.0, help="learning rate at the first step")
    training.add_argument("--warmup-proportion", type=unit_interval, default=warmup_proportion,
                          help="fraction of the updates spent in linear warmup; then linear decay to 0")
    add_optimizer_arguments(training, default="AdamW",
                            optimizer_help="AdamW, as NVIDIA's fine-tuning always uses; or LAMB or LANS (optimizer.py)")
    training.add_argument("--rescale-embeddings", type=str_to_bool, default=False,
                          help="true: before training, scale the loaded embedding tables by one factor so that the "
                               "word table's root mean square is the config's initializer_range, as at random "
                               "initialisation; the network computes the same function, and AdamW moves the tables "
                               "as far relative to their size as it moves fresh ones (LAMB pretraining grows them "
                               "about 12x: docs/time-to-quality-finetuning-rate.md)")
    training.add_argument("--seed", type=random_seed, default=42, help="seed of weights, dropout and data order")
    training.add_argument("--log-freq", type=positive_int, default=10, help="log the loss every this many updates")
    training.add_argument("--visualdl-log-dir",
                          help="also write the training scalars and the configuration to a VisualDL log in this "
                               "folder (rank 0; needs `pip install visualdl`)")
    return training


def add_advanced_arguments(parser: argparse.ArgumentParser) -> None:
    """The Advanced group (--show-config) and the mixed-precision flags of amp.py."""
    advanced = parser.add_argument_group("Advanced")
    advanced.add_argument("--show-config", type=str_to_bool, default=True, help="log the arguments")
    advanced.add_argument("--enable-cpu-affinity", type=str_to_bool, default=True,
                          help="pin each local rank to its own block of CPUs (on a GPU, the CPUs next to its GPU)")
    add_amp_arguments(parser)


def check_shared_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace,
                           actions: Sequence[str]) -> None:
    """Exit through parser.error for invalid shared options; resolve --from-checkpoint and --config-file, unset
    --max-steps <= 0 and default --report-file. `actions` are the destinations of the flags that give the run
    something to do."""
    check_amp_arguments(parser, args)
    if not any(getattr(args, action) for action in actions):
        flags = [f"--{action.replace('_', '-')}" for action in actions]
        parser.error(f"nothing to do: give {', '.join(flags[:-1])} and/or {flags[-1]}")
    if args.do_train and not args.train_file:
        parser.error("--do-train needs --train-file")
    saved_model = os.path.join(args.output_dir, args.model_prefix + PARAMS_SUFFIX)
    if args.do_train and not getattr(args, "benchmark", False) and os.path.isfile(saved_model) and not args.overwrite:
        parser.error(f"--output-dir {args.output_dir} holds a fine-tuned model ({saved_model}) that --do-train would "
                     "replace; give another --output-dir, or --overwrite to replace it")
    if args.save_safetensors and (not args.do_train or getattr(args, "benchmark", False)):
        parser.error("--save-safetensors writes the fine-tuned model, which only --do-train without --benchmark saves")
    if (args.do_predict or args.do_eval) and not args.predict_file:
        parser.error("--do-predict and --do-eval need --predict-file")
    _resolve_from_checkpoint(parser, args)
    if args.max_steps is not None and args.max_steps <= 0:
        args.max_steps = None
    for name in ("train_file", "predict_file", "vocab_file", "config_file"):
        path = getattr(args, name)
        if path and not os.path.isfile(path):
            parser.error(f"--{name.replace('_', '-')} {path}: file not found")
    try:
        args.config_file = model_config_file(
            args.bert_model, args.config_file, args.from_pretrained_params or args.from_checkpoint,
            flag=weights_flag(args), model_prefix=args.model_prefix)
    except (FileNotFoundError, ValueError) as error:
        parser.error(str(error))
    default_report_file(args)


def parse_arguments(parser: argparse.ArgumentParser, argv: Sequence[str] | None, actions: Sequence[str],
                    check_task: Callable[[argparse.ArgumentParser, argparse.Namespace], None],
                    exported_model: Callable[[argparse.Namespace], bool] = lambda args: False) -> argparse.Namespace:
    """A task script's parse_args: the shared checks, then the task's own (check_task), then, after every check of
    the input, check_initial_weights. exported_model tells whether the predictions come from an exported model."""
    args = parser.parse_args(argv)
    check_shared_arguments(parser, args, actions)
    check_task(parser, args)
    check_initial_weights(parser, args, exported_model=exported_model(args))
    return args


def check_initial_weights(parser: argparse.ArgumentParser, args: argparse.Namespace,
                          exported_model: bool = False) -> None:
    """Refuse to predict or evaluate a model that is neither trained nor loaded, unless --allow-random-weights
    says so; exported_model: the predictions come from a model exported earlier. A task script calls this last,
    after every check of its input."""
    untrained = not (args.do_train or args.from_pretrained_params or args.from_checkpoint or exported_model)
    if (args.do_predict or args.do_eval) and untrained and not args.allow_random_weights:
        parser.error("--do-predict and --do-eval without --do-train, --from-pretrained-params or --from-checkpoint "
                     "would score random weights; add --allow-random-weights if that is meant")


def _resolve_from_checkpoint(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Point --from-checkpoint at the step folder it means and --last-step-of-checkpoint at that step, as NVIDIA's
    utils/config.py does (the folder's config is the default config: weights.model_config_file). The forms are
    checkpoint.open_resume_checkpoint's, read-only: a fine-tuning run reads another run's checkpoints and renames
    none of them. Unlike NVIDIA's, a folder that holds no complete checkpoint is an error, not a silent start
    from random weights."""
    if args.from_checkpoint is None:
        if args.last_step_of_checkpoint is not None:
            parser.error("--last-step-of-checkpoint needs --from-checkpoint")
        return
    if args.from_pretrained_params:
        parser.error("--from-checkpoint and --from-pretrained-params cannot both be set")
    try:
        resume = open_resume_checkpoint(args.from_checkpoint, args.last_step_of_checkpoint, None, args.model_prefix,
                                        read_only=True)
    except (FileNotFoundError, ValueError) as error:  # each names the folder or file, and the flag where it helps
        parser.error(str(error))
    args.from_checkpoint = str(resume.folder)
    args.last_step_of_checkpoint = resume.progress["global_step"]


# ---------------------------------------------------------------------------------------------
# The run, the model and its weights
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Session:
    """What a fine-tuning process sets up before it reads data: its place in the data-parallel job, its CPU
    threads, the report (written by rank 0), the tokenizer and the AMP policy."""

    rank: int
    world_size: int
    num_threads: int
    logger: DLLogger
    tokenizer: BertTokenizer
    policy: AmpPolicy


def claim_output_dir(output_dir: str, rank: int, world_size: int) -> None:
    """Before the report opens: rank 0 locks --output-dir for the run's life (one run per folder, folder_lock.py);
    every rank stops with rank 0's one-line error."""
    failure = None
    if rank == 0:
        try:
            folder_lock.hold(output_dir, "--output-dir")
        except ValueError as error:
            failure = str(error)
    if world_size > 1:
        gathered: list = []
        paddle.distributed.all_gather_object(gathered, failure)
        failure = gathered[0]
    if failure is not None:
        raise ValueError(failure)


def start_session(args: argparse.Namespace) -> Session:
    cpu_affinity = set_cpu_affinity() if args.enable_cpu_affinity else None  # before the threads, which count CPUs
    num_threads = configure_cpu_threads()
    apply_cpu_tweaks()
    rank, world_size = init_data_parallel()
    claim_output_dir(args.output_dir, rank, world_size)
    logger = open_report(args, enabled=rank == 0)
    if args.show_config:
        logger.log("PARAMETER", vars(args))
    logger.log("PARAMETER", {"cpu_affinity": cpu_affinity, "cpu_threads": num_threads})
    do_lower_case = args.do_lower_case
    if do_lower_case is None:
        do_lower_case = not vocab_looks_cased(load_vocab(args.vocab_file))
    tokenizer = BertTokenizer(args.vocab_file, do_lower_case=do_lower_case)
    return Session(rank, world_size, num_threads, logger, tokenizer, amp_policy(args))


def build_model(args: argparse.Namespace, make: Callable[[BertConfig], paddle.nn.Layer],
                session: Session) -> paddle.nn.Layer:
    """make(config) with the weights of --from-pretrained-params, if given; the load is printed and reported, and
    so are the initial embeddings and encoder: their tensors, how many came from the file, and their fingerprint
    (weights.encoder_fingerprint).

    The weights come from --seed on every rank; afterwards Paddle's generator continues from --seed + rank,
    so that every rank draws its own dropout masks.
    """
    config = build_config(args.bert_model, args.config_file, fuse_mha=args.fuse_mha,
                          max_seq_length=args.max_seq_length)
    paddle.seed(args.seed)
    model = make(config)
    source = args.from_pretrained_params or args.from_checkpoint  # at most one is set (check_shared_arguments)
    encoder_names = [name for name, _ in model.named_parameters() if part_of(name) in REQUIRED_PARTS]
    loaded = []
    if source:
        report = load_pretrained(model, source, required=REQUIRED_PARTS, flag=weights_flag(args),
                                 model_prefix=args.model_prefix)
        check_vocabulary_matches(report.path, args.vocab_file, weights_flag(args))
        print(report.describe(), flush=True)
        session.logger.log("PARAMETER", {"init_params": report.path, "newly_initialized": report.missing,
                                         "unused_params": report.unused})
        loaded = [name for name in encoder_names if name not in report.missing]
    # Which weights the run starts from, as downstream.py checks them against the file it names.
    _, fingerprint = encoder_fingerprint(model.state_dict(), config.vocab_size)
    session.logger.log("PARAMETER", {"init_encoder_tensors": len(encoder_names),
                                     "init_encoder_tensors_loaded": len(loaded),
                                     "init_encoder_fingerprint": fingerprint})
    if args.rescale_embeddings:
        factor = model.bert.embeddings.rescale(config.initializer_range, config.vocab_size)
        print(f"Embedding tables scaled by {factor:.4g} (--rescale-embeddings)", flush=True)
        session.logger.log("PARAMETER", {"embedding_rescale_factor": factor})
    paddle.seed(args.seed + session.rank)
    return model


def save_fine_tuned(model: paddle.nn.Layer, args: argparse.Namespace, session: Session) -> None:
    """Rank 0 writes <output-dir>/<model-prefix>.pdparams (and with --save-safetensors the same weights as
    <model-prefix>.safetensors) and the architecture beside it as <model-prefix>_config.json, and reports the
    weights' path."""
    if session.rank != 0:
        return
    params_path = os.path.join(args.output_dir, args.model_prefix + PARAMS_SUFFIX)
    state = model.state_dict()
    # One set: a rerun without --save-safetensors removes the twin of the model it replaces, which would no longer
    # match it; a full disk replaces none of the files.
    atomic_write_set({
        params_path: lambda path: paddle.save(state, path),
        safetensors_beside(params_path): (lambda path: write_safetensors_state(path, state))
        if args.save_safetensors else None,
        os.path.join(args.output_dir, args.model_prefix + CONFIG_SUFFIX): text_writer(model.config.to_json_string()),
    })
    session.logger.log("PARAMETER", {"saved_model": params_path})


def require_examples(examples: Sequence, path: str) -> None:
    """ValueError naming the file when it holds no examples (a training run would have nothing to learn from)."""
    if not examples:
        raise ValueError(f"{path}: no examples in the file")


# ---------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------


def model_inputs(batch: Batch) -> list[paddle.Tensor | None]:
    """input_ids, token_type_ids and attention_mask [B, S] of a collated batch, as tensors; for a batch that
    packing.pack_batch packed, input_ids and token_type_ids [R, S], no attention_mask (the sample ids say who
    attends to whom) and position_ids, sample_ids and cls_positions, in the order the task models take them."""
    if "sample_ids" in batch:
        return [paddle.to_tensor(batch["input_ids"]), paddle.to_tensor(batch["token_type_ids"]), None,
                *(paddle.to_tensor(batch[name]) for name in PACKED_MODEL_INPUTS)]
    return [paddle.to_tensor(batch[name]) for name in INPUT_NAMES]


def training_batches(features: Sequence[Feature], collate: Callable[[list[Feature]], Batch], batch_size: int,
                     seed: int, rank: int, world_size: int) -> Iterator[tuple[int, Batch]]:
    """(epoch, batch) of this rank, without end: every epoch a fresh shuffle, sharded by batch_indices."""
    if not features:
        raise ValueError("no training features")  # every epoch would be empty and the loop would never end
    for epoch in itertools.count():
        for indices in batch_indices(len(features), batch_size, shuffle=True, seed=seed, epoch=epoch, rank=rank,
                                     world_size=world_size):
            yield epoch, collate([features[i] for i in indices])


def total_training_steps(num_features: int, args: argparse.Namespace, world_size: int) -> int:
    """The updates that --epochs passes over the features take (at least one), or --max-steps if fewer: NVIDIA's
    run_squad.py trains min(epochs * batches per epoch, max_steps) steps."""
    batches_per_epoch = math.ceil(math.ceil(num_features / world_size) / args.train_batch_size)
    epoch_steps = max(1, args.epochs * batches_per_epoch // args.gradient_merge_steps)
    return epoch_steps if args.max_steps is None else min(epoch_steps, args.max_steps)


def _sequences(batch: Batch) -> tuple[int]:
    """The batch's sequences: its rows, or the samples that a packed batch holds (one [CLS] each)."""
    return (len(batch["cls_positions"]) if "cls_positions" in batch else len(batch["input_ids"]),)


def train(model: paddle.nn.Layer, features: Sequence[Feature], collate: Callable[[list[Feature]], Batch],
          loss_fn: Callable[[paddle.nn.Layer, Batch], paddle.Tensor], args: argparse.Namespace, session: Session,
          unit: str, benchmark: tuple[int, int] | None = None) -> paddle.nn.Layer:
    """Fine-tune on loss_fn (the mean loss over a batch's sequences, given the network and the batch) and return
    the trained model (decorated for AMP level O2).

    Reported: the training set (training_<unit>), every --log-freq updates the loss (the mean over the global
    batch), learning rate and skipped updates so far, each skipped update as it happens (skipped_update), and
    at the end the throughput and the share of this rank's token slots that were padding (padding_fraction).
    benchmark = (warmup steps, timed steps) runs that many updates and times the last ones.
    """
    policy, logger, world_size = session.policy, session.logger, session.world_size
    total_steps = sum(benchmark) if benchmark else total_training_steps(len(features), args, world_size)
    scheduler = create_lr_scheduler("poly", args.learning_rate, total_steps, args.warmup_proportion,
                                    warmup_start_lr=args.warmup_start_lr, power=1.0)
    optimizer = create_optimizer(args.optimizer, model, scheduler, args.weight_decay, args.beta1, args.beta2,
                                 args.epsilon, MAX_GRAD_NORM, multi_precision=policy.master_weights)
    model, optimizer, scaler = amp_prepare(model, optimizer, policy)
    network = paddle.DataParallel(model) if world_size > 1 else model
    network.train()
    logger.log("PARAMETER", {f"training_{unit}": len(features), "train_batch_size": args.train_batch_size,
                             "world_size": world_size, "steps": total_steps})
    batches = training_batches(features, collate, args.train_batch_size, args.seed, session.rank, world_size)
    visualdl = open_run_log(args.visualdl_log_dir, rank=session.rank, resume=False, start_step=0, config=vars(args))

    def loss_terms(network: paddle.nn.Layer, batch: Batch) -> list[tuple[paddle.Tensor, int]]:
        with amp_autocast(policy):
            return [(loss_fn(network, batch), 0)]

    skipped_steps = 0
    token_slots = real_tokens = 0
    timed_start = train_start = time.perf_counter()
    for step in range(1, total_steps + 1):
        if benchmark and step == benchmark[0] + 1:
            timed_start = time.perf_counter()
        drawn = [next(batches) for _ in range(args.gradient_merge_steps)]
        epoch = drawn[-1][0]
        for _, batch in drawn:
            token_slots += batch["attention_mask"].size
            real_tokens += int(np.count_nonzero(batch["attention_mask"]))
        [step_loss] = merged_backward(network, [batch for _, batch in drawn], _sequences, loss_terms, world_size,
                                      scaler, master_gradients=policy.master_weights)
        if world_size > 1:  # the global loss, so that every rank skips a non-finite step alike
            step_loss = all_reduce_sum(paddle.to_tensor([step_loss], dtype="float64")).item()
        outcome = optimizer_step(model, optimizer, scheduler, scaler, step_loss)
        if outcome.skipped:  # the update is dropped, the schedule moves on
            skipped_steps += 1
            logger.log((epoch, step), {"skipped_update": 1, "loss": step_loss})
        if step % args.log_freq == 0 or step == total_steps:
            metrics = {"loss": step_loss, "learning_rate": outcome.learning_rate, "skipped_steps": skipped_steps}
            if scaler:
                metrics.update(loss_scale=scaler.scale_value)
            logger.log((epoch, step), metrics)
            if visualdl is not None:
                visualdl.scalars(step, metrics)
    throughput = _log_throughput(logger, args.train_batch_size * args.gradient_merge_steps * world_size, total_steps,
                                 benchmark, time.perf_counter() - timed_start, time.perf_counter() - train_start,
                                 1.0 - real_tokens / token_slots)
    if visualdl is not None:
        visualdl.scalars(total_steps, throughput)
        visualdl.close()
    return model


def _log_throughput(logger: DLLogger, global_batch: int, total_steps: int, benchmark: tuple[int, int] | None,
                    timed_seconds: float, total_seconds: float, padding_fraction: float) -> dict[str, float]:
    if benchmark:
        throughput = {"training_sequences_per_second": global_batch * benchmark[1] / timed_seconds}
    else:
        throughput = {"e2e_train_time": total_seconds,
                      "training_sequences_per_second": global_batch * total_steps / timed_seconds}
    throughput["padding_fraction"] = padding_fraction
    logger.log((), throughput)
    return throughput
