"""Fine-tune BERT for sentence(-pair) classification (GLUE CoLA, SST-2, MRPC, RTE, QQP or a CSV/TSV), predict, score.

    python run_glue.py --task-name mrpc --do-train --train-file glue/MRPC/train.tsv \
        --do-eval --do-predict --predict-file glue/MRPC/dev.tsv --vocab-file vocab.txt \
        --bert-model bert-large-uncased --from-pretrained-params PRETRAINED --output-dir results/mrpc

Any other table: `--task-name custom --text-a-column C [--text-b-column C] --label-column C --labels L1,L2,...
[--id-column C]` (see glue_data.py for the file formats). A prediction file needs the label column only with
--do-eval.

Data parallel: start the same command under `python -m paddle.distributed.launch --nproc_per_node N`.
Each process trains on its share of every global batch (train_batch_size per process); rank 0 predicts.

Outputs in --output-dir: <model-prefix>.pdparams and <model-prefix>_config.json (the fine-tuned model, which
--from-pretrained-params loads again), predictions.tsv (id, predicted label, its probability) with
--do-predict, and the DLLogger report with the loss, learning rate and, with --do-eval, the metrics: accuracy,
F1 of label 1 (MRPC, QQP), Matthews correlation (CoLA) and ROC AUC (binary tasks).

The options are those of run_squad.py (Adam with decoupled weight decay, linear warmup then linear decay
to 0, --max-steps overriding --epochs, gradient merge, AMP flags); the defaults of --learning-rate (5e-5),
--warmup-proportion (0.1) and --max-seq-length (128) are those of NVIDIA's run_glue.py.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import paddle
import paddle.nn.functional as F

from amp import (
    AmpPolicy,
    add_amp_arguments,
    amp_autocast,
    amp_decorate,
    amp_policy,
    check_amp_arguments,
    create_loss_scaler,
)
from bert_config import BERT_MODELS, build_config, config_file_for
from checkpoint import atomic_write
from cli import str_to_bool
from dllog import DLLogger
from glue_data import (
    GLUE_TASKS,
    ClassificationExample,
    ClassificationFeature,
    collate_classification,
    convert_examples_to_features,
    read_glue_examples,
    read_table_examples,
)
from glue_metrics import compute_metrics
from lr_scheduler import create_lr_scheduler
from modeling import BertForSequenceClassification
from optimizer import create_optimizer
from run_squad import MAX_GRAD_NORM, save_fine_tuned, total_training_steps
from runtime import apply_cpu_tweaks, configure_cpu_threads, init_data_parallel
from squad_utils import batch_indices
from tokenizer import BertTokenizer, load_vocab, vocab_looks_cased
from weights import load_pretrained

ROOT = Path(__file__).resolve().parent
CUSTOM_TASK = "custom"
TASK_NAMES = (*GLUE_TASKS, CUSTOM_TASK)
INPUT_NAMES = ("input_ids", "token_type_ids", "attention_mask")
PREDICTIONS_FILE = "predictions.tsv"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    data = parser.add_argument_group("Data and outputs")
    data.add_argument("--task-name", required=True, type=str.lower, choices=TASK_NAMES,
                      help="GLUE task whose TSV layout and labels the files have, or custom for named columns")
    data.add_argument("--train-file", help="labelled data to fine-tune on, e.g. MRPC/train.tsv")
    data.add_argument("--predict-file", help="data to predict (and evaluate), e.g. MRPC/dev.tsv")
    data.add_argument("--text-a-column", help="custom: header name of the (first) text column")
    data.add_argument("--text-b-column", help="custom: header name of the second text column of sentence pairs")
    data.add_argument("--label-column", help="custom: header name of the label column")
    data.add_argument("--labels", help="custom: the label values, comma-separated, in the order of the classifier's "
                                       "outputs; F1 and AUC take the second as the positive class")
    data.add_argument("--id-column", help="custom: header name of the column written as the id of a prediction "
                                          "(default: the data row number, from 0)")
    data.add_argument("--vocab-file", required=True, help="WordPiece vocabulary the model was pretrained with")
    data.add_argument("--do-lower-case", action=argparse.BooleanOptionalAction, default=None,
                      help="lowercase and strip accents (uncased models); default: from the vocabulary's case")
    data.add_argument("--output-dir", required=True,
                      help="where the fine-tuned model, predictions and report are written")
    data.add_argument("--report-file", help="DLLogger JSON report; default <output-dir>/report.json")
    data.add_argument("--model-prefix", default="bert_paddle", help="file name prefix of saved models")
    data.add_argument("--max-seq-length", type=int, default=128,
                      help="tokens per example with [CLS] and [SEP]; longer texts are cut")

    model = parser.add_argument_group("Model")
    model.add_argument("--bert-model", default="bert-large-uncased", choices=BERT_MODELS,
                       help="architecture; its bert_configs/<name>.json unless --config-file is given")
    model.add_argument("--config-file", help="BERT config JSON (needed for --bert-model custom)")
    model.add_argument("--from-pretrained-params", "--init-checkpoint", dest="from_pretrained_params",
                       help="initial weights: a .pdparams file (pretraining, converted Hugging Face or fine-tuned) "
                            "or a folder holding <model-prefix>.pdparams")
    model.add_argument("--fuse-mha", action="store_true", help="one fused QKV projection per attention layer")

    training = parser.add_argument_group("Training")
    training.add_argument("--do-train", action="store_true", help="fine-tune on --train-file")
    training.add_argument("--epochs", type=int, default=3, help="passes over the training examples")
    training.add_argument("--max-steps", type=int, default=None,
                          help="optimizer updates to run instead of --epochs (<= 0 means not set)")
    training.add_argument("--train-batch-size", type=int, default=32, help="examples per process per micro-batch")
    training.add_argument("--gradient-merge-steps", type=int, default=1,
                          help="micro-batches whose gradients are accumulated into one update")
    training.add_argument("--learning-rate", type=float, default=5e-5, help="peak learning rate")
    training.add_argument("--warmup-start-lr", type=float, default=0.0, help="learning rate at the first step")
    training.add_argument("--warmup-proportion", type=float, default=0.1,
                          help="fraction of the updates spent in linear warmup; then linear decay to 0")
    training.add_argument("--beta1", type=float, default=0.9, help="AdamW first-moment decay")
    training.add_argument("--beta2", type=float, default=0.999, help="AdamW second-moment decay")
    training.add_argument("--epsilon", type=float, default=1e-6, help="AdamW epsilon")
    training.add_argument("--weight-decay", type=float, default=0.01,
                          help="decoupled weight decay (not on biases and LayerNorm)")
    training.add_argument("--seed", type=int, default=42, help="seed of weights, dropout and data order")
    training.add_argument("--log-freq", type=int, default=10, help="log the loss every this many updates")

    prediction = parser.add_argument_group("Prediction and evaluation")
    prediction.add_argument("--do-predict", action="store_true",
                            help=f"write <output-dir>/{PREDICTIONS_FILE} for --predict-file")
    prediction.add_argument("--do-eval", action="store_true", help="score the predictions of --predict-file")
    prediction.add_argument("--predict-batch-size", type=int, default=8, help="examples per prediction batch")

    advanced = parser.add_argument_group("Advanced")
    advanced.add_argument("--show-config", type=str_to_bool, default=True, help="log the arguments")
    add_amp_arguments(parser)
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_amp_arguments(parser, args)
    if not (args.do_train or args.do_predict or args.do_eval):
        parser.error("nothing to do: give --do-train, --do-predict and/or --do-eval")
    if args.do_train and not args.train_file:
        parser.error("--do-train needs --train-file")
    if (args.do_predict or args.do_eval) and not args.predict_file:
        parser.error("--do-predict and --do-eval need --predict-file")
    custom_flags = ("text_a_column", "text_b_column", "label_column", "labels", "id_column")
    if args.task_name == CUSTOM_TASK:
        for name in ("text_a_column", "label_column", "labels"):
            if not getattr(args, name):
                parser.error(f"--task-name custom needs --{name.replace('_', '-')}")
        args.labels = args.labels.split(",")
        if len(set(args.labels)) != len(args.labels) or len(args.labels) < 2:
            parser.error(f"--labels {','.join(args.labels)}: give two or more different labels")
    else:
        for name in custom_flags:
            if getattr(args, name) is not None:
                parser.error(f"--{name.replace('_', '-')} is only used with --task-name custom")
    try:
        args.config_file = config_file_for(args.bert_model, args.config_file)
    except ValueError as error:
        parser.error(str(error))
    if args.max_steps is not None and args.max_steps <= 0:
        args.max_steps = None
    for name in ("epochs", "train_batch_size", "predict_batch_size", "gradient_merge_steps", "log_freq"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.max_seq_length < 3:
        parser.error("--max-seq-length must be at least 3 ([CLS] and two [SEP])")
    if not 0.0 <= args.warmup_proportion <= 1.0:
        parser.error("--warmup-proportion must be in [0, 1]")
    for name in ("train_file", "predict_file", "vocab_file", "config_file"):
        path = getattr(args, name)
        if path and not os.path.isfile(path):
            parser.error(f"--{name.replace('_', '-')} {path}: file not found")
    if args.report_file is None:
        args.report_file = os.path.join(args.output_dir, "report.json")
    return args


def task_labels(args: argparse.Namespace) -> list[str]:
    return list(args.labels) if args.task_name == CUSTOM_TASK else list(GLUE_TASKS[args.task_name].labels)


def task_metrics(args: argparse.Namespace) -> tuple[str, ...]:
    if args.task_name != CUSTOM_TASK:
        return GLUE_TASKS[args.task_name].metrics
    return ("accuracy", "f1", "mcc", "auc") if len(args.labels) == 2 else ("accuracy", "mcc")


def read_examples(args: argparse.Namespace, path: str, require_labels: bool) -> list[ClassificationExample]:
    if args.task_name != CUSTOM_TASK:
        return read_glue_examples(args.task_name, path)
    return read_table_examples(path, args.text_a_column, args.labels, text_b_column=args.text_b_column,
                               label_column=args.label_column, id_column=args.id_column,
                               require_labels=require_labels)


# ---------------------------------------------------------------------------------------------
# Model
# ---------------------------------------------------------------------------------------------


def build_model(args: argparse.Namespace, num_labels: int, logger: DLLogger) -> BertForSequenceClassification:
    config = build_config(args.bert_model, args.config_file, fuse_mha=args.fuse_mha,
                          max_seq_length=args.max_seq_length)
    model = BertForSequenceClassification(config, num_labels)
    if args.from_pretrained_params:
        # The classifier reads the pooler; a checkpoint without one (an MLM-only model) starts it at random.
        report = load_pretrained(model, args.from_pretrained_params, required=("embeddings", "encoder"),
                                 flag="--from-pretrained-params", model_prefix=args.model_prefix)
        print(report.describe(), flush=True)
        logger.log("PARAMETER", {"init_params": report.path, "newly_initialized": report.missing,
                                 "unused_params": report.unused})
    return model


# ---------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------


def _training_batches(features: list[ClassificationFeature], args: argparse.Namespace, rank: int, world_size: int,
                      pad_token_id: int) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
    """(epoch, batch) forever: a fresh shuffle every epoch."""
    epoch = 0
    while True:
        for indices in batch_indices(len(features), args.train_batch_size, shuffle=True, seed=args.seed,
                                     epoch=epoch, rank=rank, world_size=world_size):
            yield epoch, collate_classification([features[i] for i in indices], pad_token_id)
        epoch += 1


def train(model: BertForSequenceClassification, features: list[ClassificationFeature], args: argparse.Namespace,
          policy: AmpPolicy, logger: DLLogger, rank: int, world_size: int,
          pad_token_id: int) -> BertForSequenceClassification:
    """Fine-tune on the mean cross-entropy with AdamW and linear warmup + linear decay; returns the model."""
    total_steps = total_training_steps(len(features), args, world_size)
    scheduler = create_lr_scheduler("poly", args.learning_rate, total_steps, args.warmup_proportion,
                                    warmup_start_lr=args.warmup_start_lr, power=1.0)
    optimizer = create_optimizer("AdamW", model, scheduler, args.weight_decay, args.beta1, args.beta2,
                                 args.epsilon, MAX_GRAD_NORM)
    model, optimizer = amp_decorate(model, optimizer, policy)
    scaler = create_loss_scaler(policy)
    network = paddle.DataParallel(model) if world_size > 1 else model
    network.train()
    logger.log("PARAMETER", {"training_examples": len(features), "train_batch_size": args.train_batch_size,
                             "world_size": world_size, "steps": total_steps})
    batches = _training_batches(features, args, rank, world_size, pad_token_id)
    global_batch = args.train_batch_size * args.gradient_merge_steps * world_size
    skipped_steps = 0
    train_start = time.perf_counter()
    for step in range(1, total_steps + 1):
        learning_rate = optimizer.get_lr()
        step_loss = 0.0
        for _ in range(args.gradient_merge_steps):
            epoch, batch = next(batches)
            with amp_autocast(policy):
                logits = network(*(paddle.to_tensor(batch[name]) for name in INPUT_NAMES))
                loss = F.cross_entropy(logits.astype("float32"), paddle.to_tensor(batch["labels"]))
            merged_loss = loss / args.gradient_merge_steps
            (scaler.scale(merged_loss) if scaler else merged_loss).backward()
            step_loss += float(merged_loss)
        found_inf = scaler.unscale_and_check(model.parameters()) if scaler else False
        if found_inf:
            skipped_steps += 1  # an overflow in float16: this update is dropped, the schedule moves on
        else:
            optimizer.step()
        optimizer.clear_grad()
        scheduler.step()
        if scaler:
            scaler.update(found_inf)
        if step % args.log_freq == 0 or step == total_steps:
            metrics = {"loss": step_loss, "learning_rate": learning_rate}
            if scaler:
                metrics.update(loss_scale=scaler.scale_value, skipped_steps=skipped_steps)
            logger.log((epoch, step), metrics)
    elapsed = time.perf_counter() - train_start
    logger.log((), {"e2e_train_time": elapsed, "training_sequences_per_second": global_batch * total_steps / elapsed})
    return model


# ---------------------------------------------------------------------------------------------
# Prediction and evaluation
# ---------------------------------------------------------------------------------------------


def predict_probabilities(model: BertForSequenceClassification, features: list[ClassificationFeature],
                          batch_size: int, pad_token_id: int, policy: AmpPolicy) -> np.ndarray:
    """Class probabilities [N, num_labels] (float64) of every feature, in order."""
    model.eval()
    probabilities = []
    for indices in batch_indices(len(features), batch_size, shuffle=False):
        batch = collate_classification([features[i] for i in indices], pad_token_id)
        with paddle.no_grad(), amp_autocast(policy):
            logits = model(*(paddle.to_tensor(batch[name]) for name in INPUT_NAMES))
        logits = logits.astype("float32").numpy().astype(np.float64)
        exponentials = np.exp(logits - logits.max(axis=1, keepdims=True))
        probabilities.append(exponentials / exponentials.sum(axis=1, keepdims=True))
    return np.concatenate(probabilities)


def write_predictions(path: str, examples: list[ClassificationExample], probabilities: np.ndarray,
                      labels: list[str]) -> None:
    """A TSV with a header: id, predicted label, probability of that label."""
    predicted = np.argmax(probabilities, axis=1)
    text = io.StringIO()
    writer = csv.writer(text, delimiter="\t", lineterminator="\n")
    writer.writerow(["id", "label", "probability"])
    for example, index, row in zip(examples, predicted, probabilities, strict=True):
        writer.writerow([example.guid, labels[index], f"{row[index]:.6f}"])
    content = text.getvalue()
    atomic_write(path, lambda temporary: Path(temporary).write_text(content, encoding="utf-8"))


def predict(model: BertForSequenceClassification, tokenizer: BertTokenizer, args: argparse.Namespace,
            policy: AmpPolicy, logger: DLLogger) -> None:
    labels = task_labels(args)
    examples = read_examples(args, args.predict_file, require_labels=args.do_eval)
    features = convert_examples_to_features(examples, tokenizer, args.max_seq_length, labels)
    logger.log("PARAMETER", {"eval_samples": len(examples), "predict_batch_size": args.predict_batch_size})
    start = time.perf_counter()
    probabilities = predict_probabilities(model, features, args.predict_batch_size, tokenizer.pad_token_id, policy)
    elapsed = time.perf_counter() - start
    logger.log((), {"e2e_inference_time": elapsed, "inference_sequences_per_second": len(features) / elapsed})
    if args.do_predict:
        write_predictions(os.path.join(args.output_dir, PREDICTIONS_FILE), examples, probabilities, labels)
    if args.do_eval:
        label_ids = np.array([feature.label_id for feature in features])
        metrics = compute_metrics(task_metrics(args), label_ids, probabilities)
        for name in metrics:
            logger.metadata(name, {"format": ":.4f"})
        logger.log((), metrics)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    configure_cpu_threads()
    apply_cpu_tweaks()
    rank, world_size = init_data_parallel()
    logger = DLLogger(args.report_file, enabled=rank == 0)
    if args.show_config:
        logger.log("PARAMETER", vars(args))
    paddle.seed(args.seed)  # the same initial weights on every rank

    do_lower_case = args.do_lower_case
    if do_lower_case is None:
        do_lower_case = not vocab_looks_cased(load_vocab(args.vocab_file))
    tokenizer = BertTokenizer(args.vocab_file, do_lower_case=do_lower_case)

    policy = amp_policy(args)
    labels = task_labels(args)
    model = build_model(args, len(labels), logger)
    paddle.seed(args.seed + rank)  # different dropout masks on every rank
    if args.do_train:
        examples = read_examples(args, args.train_file, require_labels=True)
        features = convert_examples_to_features(examples, tokenizer, args.max_seq_length, labels)
        model = train(model, features, args, policy, logger, rank, world_size, tokenizer.pad_token_id)
        if rank == 0:
            logger.log("PARAMETER", {"saved_model": save_fine_tuned(model, args.output_dir, args.model_prefix)})
    if rank == 0 and (args.do_predict or args.do_eval):
        predict(model, tokenizer, args, policy, logger)
    logger.close()


if __name__ == "__main__":
    try:
        main()
    except (FileNotFoundError, ValueError) as error:
        sys.exit(f"run_glue.py: {error}")
