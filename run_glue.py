"""Fine-tune BERT for sentence(-pair) classification or regression (all of GLUE, or a CSV/TSV), predict and score.

Predictions of GLUE's test files also go to the files of GLUE's leaderboard, which --gather-submission zips.

    python run_glue.py --task-name mrpc --do-train --train-file glue/MRPC/train.tsv \
        --do-eval --do-predict --predict-file glue/MRPC/dev.tsv --vocab-file vocab.txt \
        --bert-model bert-large-uncased --from-pretrained-params PRETRAINED --output-dir results/mrpc

GLUE's tasks (glue_data.py has their file layouts): cola, sst-2, mrpc, sts-b, qqp, mnli, qnli, rte, wnli under
NVIDIA's names or Hugging Face's (sst2, stsb, ...); mnli-mm is MNLI's mismatched set, and ax GLUE's diagnostic set,
which a model fine-tuned on MNLI predicts. With --task-name mnli, --mismatched-predict-file scores the mismatched
set beside the matched --predict-file in the same run. STS-B is a regression: one output, trained on the mean
squared error and scored by Pearson and Spearman correlation.

Any other table: `--task-name custom --text-a-column C [--text-b-column C] --label-column C --labels L1,L2,...
[--id-column C]` (see glue_data.py for the file formats). A prediction file needs the label column only with
--do-eval.

Data parallel: start the same command under `python -m paddle.distributed.launch --nproc_per_node N`.
Each process trains on its share of every global batch (train_batch_size per process); rank 0 predicts.

Outputs in --output-dir: <model-prefix>.pdparams and <model-prefix>_config.json (the fine-tuned model, which
--from-pretrained-params loads again), predictions.tsv (id, predicted label, its probability; STS-B: id, score;
MNLI's mismatched set: predictions_mm.tsv) with --do-predict, and for a GLUE test file (one without labels) also
the file GLUE's server takes for it (glue_submission.py: CoLA.tsv, ..., MNLI-m.tsv, MNLI-mm.tsv, AX.tsv), with
--export-dir the model exported for Paddle Inference (and with --export-onnx for ONNX Runtime), which
--inference-model-dir predicts with on --inference-backend in --inference-precision: inference.py), and the
DLLogger report with the loss, learning rate and, with --do-eval, the metrics: accuracy, F1 of label 1 (MRPC,
QQP), Matthews correlation (CoLA), ROC AUC (binary tasks), Pearson and Spearman correlation and their mean
(STS-B); those of MNLI's mismatched set end in _mm.

    python run_glue.py --gather-submission DIR OUT.zip

zips the leaderboard files in DIR, all eleven, each checked, into the file GLUE's server takes.

The model, training and AMP options are run_squad.py's, defined once in finetune.py (Adam with decoupled weight
decay or --optimizer Lamb/Lans, linear warmup then linear decay to 0, --epochs or --max-steps updates whichever
is fewer, gradient merge, AMP flags, the initial weights: --from-pretrained-params or --from-checkpoint, or
--allow-random-weights to predict without either); the defaults of --learning-rate (5e-5), --warmup-proportion
(0.1) and --max-seq-length (128) are those of NVIDIA's run_glue.py. A checkpoint without the pooler (a
masked-LM-only model) loads, and the pooler starts from random initialisation, which the run prints.
"""

from __future__ import annotations

from training import runtime  # noqa: F401  # isort: skip  (first: it imports Paddle without its import-time warnings)
import argparse
import csv
import dataclasses
import io
import math
import os
import sys
import time
from collections.abc import Callable

import numpy as np
import paddle
import paddle.nn.functional as F

from finetuning import finetune, glue_submission
from finetuning.feature_batching import batch_indices
from finetuning.finetune import SEQUENCE_MULTIPLE, Session, model_inputs
from finetuning.glue_data import (
    GLUE_TASKS,
    ClassificationExample,
    ClassificationFeature,
    GlueTask,
    collate_classification,
    convert_examples_to_features,
    glue_task_name,
    read_glue_examples,
    read_table_examples,
)
from finetuning.glue_metrics import compute_metrics, compute_regression_metrics
from inference import inference
from modeling import INPUT_NAMES, BertForSequenceClassification
from preprocessing.packing import check_packable, pack_batch
from tokenizer import BertTokenizer
from utils.atomic_io import atomic_write_set, text_writer
from utils.cli import DefaultsHelpFormatter, positive_int, run_main
from utils.dllog import DLLogger, add_format_argument
from utils.progress import progress_bar

CUSTOM_TASK = "custom"
TASK_NAMES = (*GLUE_TASKS, CUSTOM_TASK)
# MNLI's matched set, whose run may score the mismatched one (task MISMATCHED_TASK) beside it.
MATCHED_TASK, MISMATCHED_TASK = "mnli", "mnli-mm"
# GLUE's diagnostic set: predicted only, by a model fine-tuned on MNLI.
DIAGNOSTIC_TASK = "ax"
PREDICTIONS_FILE = "predictions.tsv"
# --int8-quantization's default for GLUE (benchmarks/inference_accuracy.py; docs/inference.md): per-channel weight
# scales scored within a point of fp32 on MRPC (-0.49) and SST-2 (+0.80) and need no calibration inputs; SQuAD's
# default, which takes the outlier channels apart too (MRPC +0.25, SST-2 0.00), ran 12-15% slower.
INT8_QUANTIZATION = "dynamic-per-channel"
GATHER_FLAG = "--gather-submission"


def add_gather_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument(GATHER_FLAG, nargs=2, metavar=("DIR", "ZIP"),
                        help="on its own, without other options: check the leaderboard files in DIR (all of "
                             f"{', '.join(glue_submission.SUBMISSION_FILES)}, which --do-predict writes for GLUE's "
                             "test files) and zip them into ZIP, the file GLUE's server takes; a missing or "
                             "malformed file, or an existing ZIP, is refused")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=DefaultsHelpFormatter)
    data = parser.add_argument_group("Data and outputs")
    data.add_argument("--task-name", required=True, type=glue_task_name, choices=TASK_NAMES,
                      help="GLUE task whose TSV layouts and labels the files have, by NVIDIA's name or Hugging Face's "
                           "(sst2, stsb, mnli_matched, mnli_mismatched); mnli-mm: MNLI's mismatched set; ax: GLUE's "
                           "diagnostic set, predicted by an MNLI model; or custom for named columns")
    data.add_argument("--train-file", help="labelled data to fine-tune on, e.g. MRPC/train.tsv")
    data.add_argument("--predict-file", help="data to predict (and evaluate), e.g. MRPC/dev.tsv, or a test file "
                                             "(no labels), whose predictions also go to GLUE's leaderboard file")
    data.add_argument("--mismatched-predict-file",
                      help="--task-name mnli: MNLI's mismatched set (dev_mismatched.tsv or test_mismatched.tsv), "
                           "predicted and scored as task mnli-mm beside --predict-file, the matched set, in the same "
                           "run: its metrics end in _mm, its predictions go to predictions_mm.tsv")
    data.add_argument("--text-a-column", help="custom: header name of the (first) text column")
    data.add_argument("--text-b-column", help="custom: header name of the second text column of sentence pairs")
    data.add_argument("--label-column", help="custom: header name of the label column")
    data.add_argument("--labels", help="custom: the label values, comma-separated, in the order of the classifier's "
                                       "outputs; F1 and AUC take the second as the positive class")
    data.add_argument("--id-column", help="custom: header name of the column written as the id of a prediction "
                                          "(default: the data row number, from 0)")
    finetune.add_shared_data_arguments(data, max_seq_length=128,
                                       max_seq_length_help="tokens per example with [CLS] and [SEP]; longer texts "
                                                           "are cut")
    finetune.add_model_arguments(parser)
    training = finetune.add_training_arguments(parser, unit="examples", learning_rate=5e-5, warmup_proportion=0.1)
    training.add_argument("--pack-sequences", action="store_true",
                          help="train on packed rows: the examples of each batch side by side in as few rows of "
                               "--max-seq-length tokens as fit them, each attending only to itself (preprocessing/"
                               "packing.py; the same function of each example, computed on far less padding)")

    prediction = parser.add_argument_group("Prediction and evaluation")
    prediction.add_argument("--do-predict", action="store_true",
                            help=f"write <output-dir>/{PREDICTIONS_FILE} for --predict-file, and for a GLUE test file "
                                 "also GLUE's leaderboard file of the task (<output-dir>/CoLA.tsv, ...)")
    prediction.add_argument("--do-eval", action="store_true", help="score the predictions of --predict-file")
    prediction.add_argument("--predict-batch-size", type=positive_int, default=8,
                            help="examples per prediction batch")
    inference.add_inference_arguments(prediction, int8_quantization=INT8_QUANTIZATION)
    add_gather_argument(parser.add_argument_group("GLUE leaderboard"))
    finetune.add_advanced_arguments(parser)
    add_format_argument(parser)
    return parser


def check_glue_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The checks of the GLUE options: a custom table's columns and labels, the tasks that only predict, MNLI's
    mismatched file, the sequence length, inference."""
    custom_flags = ("text_a_column", "text_b_column", "label_column", "labels", "id_column")
    if args.gather_submission:
        parser.error(f"{GATHER_FLAG} runs on its own: give it no other options")
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
    if args.task_name == DIAGNOSTIC_TASK and (args.do_train or args.do_eval):
        parser.error(f"--task-name {DIAGNOSTIC_TASK}: GLUE's diagnostic set has no labels to train on or score; "
                     f"fine-tune with --task-name {MATCHED_TASK}, then predict {DIAGNOSTIC_TASK} with that model")
    if args.mismatched_predict_file:
        if args.task_name != MATCHED_TASK:
            parser.error(f"--mismatched-predict-file is MNLI's mismatched set: it needs --task-name {MATCHED_TASK}")
        if not (args.do_predict or args.do_eval):
            parser.error("--mismatched-predict-file needs --do-predict or --do-eval")
        if not os.path.isfile(args.mismatched_predict_file):
            parser.error(f"--mismatched-predict-file {args.mismatched_predict_file}: file not found")
    if args.max_seq_length < 3:
        parser.error("--max-seq-length must be at least 3 ([CLS] and two [SEP])")
    if args.pack_sequences and not args.do_train:
        parser.error("--pack-sequences packs the training batches: it needs --do-train (prediction is not packed)")
    inference.check_inference_arguments(parser, args, INT8_QUANTIZATION)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return finetune.parse_arguments(build_parser(), argv, ("do_train", "do_predict", "do_eval", "export_dir"),
                                    check_glue_arguments, exported_model=lambda args: bool(args.inference_model_dir))


def glue_task(args: argparse.Namespace) -> GlueTask | None:
    """The GLUE task of --task-name; None for a custom table."""
    return GLUE_TASKS.get(args.task_name)


def task_labels(args: argparse.Namespace) -> list[str]:
    """The labels in the order of the classifier's outputs; none for a regression (STS-B)."""
    return list(args.labels) if args.task_name == CUSTOM_TASK else list(GLUE_TASKS[args.task_name].labels)


def is_regression(args: argparse.Namespace) -> bool:
    task = glue_task(args)
    return task is not None and task.regression


def num_outputs(args: argparse.Namespace) -> int:
    """The head's outputs: one per label, or one score for a regression."""
    return len(task_labels(args)) or 1


def task_metrics(args: argparse.Namespace) -> tuple[str, ...]:
    if args.task_name != CUSTOM_TASK:
        return GLUE_TASKS[args.task_name].metrics
    return ("accuracy", "f1", "mcc", "auc") if len(args.labels) == 2 else ("accuracy", "mcc")


def read_examples(args: argparse.Namespace, path: str, require_labels: bool,
                  task_name: str | None = None) -> list[ClassificationExample]:
    """The examples of a file of task_name (default --task-name): a GLUE file in any of its layouts, or a custom
    table; ValueError naming the file when it has none."""
    task_name = task_name or args.task_name
    if task_name != CUSTOM_TASK:
        examples = read_glue_examples(task_name, path, require_labels=require_labels)
    else:
        examples = read_table_examples(path, args.text_a_column, args.labels, text_b_column=args.text_b_column,
                                       label_column=args.label_column, id_column=args.id_column,
                                       require_labels=require_labels)
    finetune.require_examples(examples, path)
    return examples


def collate(features: list[ClassificationFeature], pad_token_id: int, max_seq_length: int,
            regression: bool = False) -> dict[str, np.ndarray]:
    return collate_classification(features, pad_token_id, multiple=SEQUENCE_MULTIPLE, max_length=max_seq_length,
                                  regression=regression)


def classification_loss(network: paddle.nn.Layer, batch: dict[str, np.ndarray]) -> paddle.Tensor:
    """Mean cross-entropy of the batch's labels."""
    logits = network(*model_inputs(batch))
    return F.cross_entropy(logits.astype("float32"), paddle.to_tensor(batch["labels"]))


def regression_loss(network: paddle.nn.Layer, batch: dict[str, np.ndarray]) -> paddle.Tensor:
    """Mean squared error of the batch's scores against the head's one output per example."""
    predicted = network(*model_inputs(batch)).astype("float32").squeeze(-1)
    return F.mse_loss(predicted, paddle.to_tensor(batch["labels"]))


def train(model: BertForSequenceClassification, args: argparse.Namespace,
          session: Session) -> BertForSequenceClassification:
    """Fine-tune on the examples of --train-file and save the model."""
    examples = read_examples(args, args.train_file, require_labels=True)
    features = convert_examples_to_features(examples, session.tokenizer, args.max_seq_length, task_labels(args))
    pad_token_id, regression = session.tokenizer.pad_token_id, is_regression(args)
    if args.pack_sequences:
        lengths = np.array([len(feature.input_ids) for feature in features])
        check_packable({"": [lengths]}, args.max_seq_length, args.train_batch_size, args.train_file,
                       batch_size_flag="--train-batch-size")

    def training_batch(features: list[ClassificationFeature]) -> dict[str, np.ndarray]:
        batch = collate(features, pad_token_id, args.max_seq_length, regression=regression)
        return pack_batch(batch, args.max_seq_length) if args.pack_sequences else batch

    model = finetune.train(model, features, training_batch, regression_loss if regression else classification_loss,
                           args, session, unit="examples")
    finetune.save_fine_tuned(model, args, session)
    return model


# ---------------------------------------------------------------------------------------------
# Prediction and evaluation
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PredictionSet:
    """The examples of a file to predict (and score): --predict-file, or MNLI's --mismatched-predict-file as task
    mnli-mm."""

    examples: list[ClassificationExample]
    task: GlueTask | None  # None for a custom table

    @property
    def suffix(self) -> str:
        """What the set's metrics, report entries and predictions file end in: "_mm" for MNLI's mismatched set."""
        return self.task.metric_suffix if self.task else ""

    @property
    def unlabelled(self) -> bool:
        """Whether the file is a test file (no labels), whose predictions go to GLUE's leaderboard file too."""
        return all(example.label is None for example in self.examples)


def read_prediction_sets(args: argparse.Namespace) -> list[PredictionSet]:
    """--predict-file and, with --task-name mnli, --mismatched-predict-file, each read in full (labels required
    with --do-eval), so that a malformed file stops the run before training."""
    sets = [PredictionSet(read_examples(args, args.predict_file, require_labels=args.do_eval), glue_task(args))]
    if args.mismatched_predict_file:
        examples = read_examples(args, args.mismatched_predict_file, require_labels=args.do_eval,
                                 task_name=MISMATCHED_TASK)
        sets.append(PredictionSet(examples, GLUE_TASKS[MISMATCHED_TASK]))
    return sets


def predict_outputs(run: inference.BatchPredictor, features: list[ClassificationFeature],
                    args: argparse.Namespace, pad_token_id: int) -> np.ndarray:
    """The head's outputs [N, outputs] (float64) for every feature, in order: logits, or a regression's scores."""
    outputs = []
    batches = batch_indices(len(features), args.predict_batch_size, shuffle=False)
    total = math.ceil(len(features) / args.predict_batch_size)
    for indices in progress_bar(batches, desc="GLUE prediction", total=total, unit="batch"):
        batch = collate([features[i] for i in indices], pad_token_id, args.max_seq_length)
        (output,) = run(*(batch[name] for name in INPUT_NAMES))
        outputs.append(output.astype(np.float64))
    return np.concatenate(outputs)


def predict_probabilities(run: inference.BatchPredictor, features: list[ClassificationFeature],
                          args: argparse.Namespace, pad_token_id: int) -> np.ndarray:
    """Class probabilities [N, num_labels] (float64) of every feature, in order."""
    return softmax(predict_outputs(run, features, args, pad_token_id))


def softmax(logits: np.ndarray) -> np.ndarray:
    """Probabilities [N, C] of logits [N, C]."""
    exponentials = np.exp(logits - logits.max(axis=1, keepdims=True))
    return exponentials / exponentials.sum(axis=1, keepdims=True)


def predictions_text(examples: list[ClassificationExample], probabilities: np.ndarray, labels: list[str]) -> str:
    """A TSV with a header: id, predicted label, probability of that label."""
    predicted = np.argmax(probabilities, axis=1)
    text = io.StringIO()
    writer = csv.writer(text, delimiter="\t", lineterminator="\n")
    writer.writerow(["id", "label", "probability"])
    for example, index, row in zip(examples, predicted, probabilities, strict=True):
        writer.writerow([example.guid, labels[index], f"{row[index]:.6f}"])
    return text.getvalue()


def scores_text(examples: list[ClassificationExample], scores: np.ndarray) -> str:
    """A TSV with a header: id, predicted score (as the head gave it, not clipped)."""
    text = io.StringIO()
    writer = csv.writer(text, delimiter="\t", lineterminator="\n")
    writer.writerow(["id", "score"])
    for example, score in zip(examples, scores, strict=True):
        writer.writerow([example.guid, f"{score:.6f}"])
    return text.getvalue()


def write_predictions(prediction_set: PredictionSet, outputs: np.ndarray, labels: list[str],
                      args: argparse.Namespace, logger: DLLogger) -> None:
    """predictions<suffix>.tsv, and for a GLUE test file GLUE's leaderboard file of the task beside it, written
    together."""
    examples, task = prediction_set.examples, prediction_set.task
    stem, extension = os.path.splitext(PREDICTIONS_FILE)
    path = os.path.join(args.output_dir, stem + prediction_set.suffix + extension)
    if labels:
        probabilities = softmax(outputs)
        writes: dict[str, Callable[[str], None]] = {path: text_writer(predictions_text(examples, probabilities,
                                                                                       labels))}
        predicted = [labels[index] for index in np.argmax(probabilities, axis=1)]
    else:
        predicted = outputs[:, 0]
        writes = {path: text_writer(scores_text(examples, predicted))}
    if task is not None and prediction_set.unlabelled:
        submission = os.path.join(args.output_dir, task.submission_file)
        writes[submission] = text_writer(glue_submission.submission_text(
            task, [example.guid for example in examples], predicted))
        logger.log("PARAMETER", {f"submission_file{prediction_set.suffix}": submission})
    atomic_write_set(writes)


def predict(run: inference.BatchPredictor, prediction_sets: list[PredictionSet], tokenizer: BertTokenizer,
            args: argparse.Namespace, logger: DLLogger) -> None:
    """Predict (and score) each set; the names of a set's report entries end in its suffix."""
    labels = task_labels(args)
    for prediction_set in prediction_sets:
        suffix = prediction_set.suffix
        features = convert_examples_to_features(prediction_set.examples, tokenizer, args.max_seq_length, labels)
        logger.log("PARAMETER", {f"eval_samples{suffix}": len(features),
                                 "predict_batch_size": args.predict_batch_size})
        start = time.perf_counter()
        outputs = predict_outputs(run, features, args, tokenizer.pad_token_id)
        elapsed = time.perf_counter() - start
        logger.log((), {f"e2e_inference_time{suffix}": elapsed,
                        f"inference_sequences_per_second{suffix}": len(features) / elapsed})
        if args.do_predict:
            write_predictions(prediction_set, outputs, labels, args, logger)
        if args.do_eval:
            if labels:
                metrics = compute_metrics(task_metrics(args), np.array([feature.label_id for feature in features]),
                                          softmax(outputs))
            else:
                metrics = compute_regression_metrics(task_metrics(args),
                                                     np.array([feature.score for feature in features]), outputs[:, 0])
            metrics = {name + suffix: value for name, value in metrics.items()}
            for name in metrics:
                logger.metadata(name, {"format": ":.4f"})
            logger.log((), metrics)


def calibration_inputs(args: argparse.Namespace, tokenizer: BertTokenizer) -> dict[str, np.ndarray]:
    """The first inference.CALIBRATION_FEATURES examples of --train-file ([N, S] per input name): what
    --export-onnx saves for static int8's calibration."""
    examples = read_examples(args, args.train_file, require_labels=True)[:inference.CALIBRATION_FEATURES]
    batch = collate(convert_examples_to_features(examples, tokenizer, args.max_seq_length, task_labels(args)),
                    tokenizer.pad_token_id, args.max_seq_length)
    return {name: batch[name] for name in INPUT_NAMES}


def gather_main(argv: list[str]) -> None:
    """run_glue.py --gather-submission DIR ZIP, and nothing else."""
    parser = argparse.ArgumentParser(prog="run_glue.py", description="Zip GLUE's leaderboard files for its server.")
    add_gather_argument(parser)
    folder, zip_path = parser.parse_args(argv).gather_submission
    names = glue_submission.gather_submission(folder, zip_path)
    print(f"{zip_path}: {len(names)} leaderboard files from {folder} ({', '.join(names)})", flush=True)


def gathering(argv: list[str]) -> bool:
    """Whether the command line asks for --gather-submission (as argparse reads it: abbreviations too)."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument(GATHER_FLAG, nargs="*")
    return parser.parse_known_args(argv)[0].gather_submission is not None


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if gathering(argv):
        gather_main(argv)
        return
    args = parse_args(argv)
    session = finetune.start_session(args)
    # read before any training, so that a malformed file stops the run at once
    prediction_sets = read_prediction_sets(args) if args.do_predict or args.do_eval else None
    model = None if args.inference_model_dir else finetune.build_model(
        args, lambda config: BertForSequenceClassification(config, num_outputs(args)), session)
    if args.do_train:
        model = train(model, args, session)
    if session.rank != 0:
        return
    inference.export_and_predict(model, args, session, args.do_predict or args.do_eval,
                                 lambda run: predict(run, prediction_sets, session.tokenizer, args, session.logger),
                                 lambda: calibration_inputs(args, session.tokenizer),
                                 head=inference.classifier_head(num_outputs(args)))
    session.logger.close()


if __name__ == "__main__":
    sys.exit(run_main(main, "run_glue.py"))
