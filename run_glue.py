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
--do-predict, with --export-dir the model exported for Paddle Inference (and with --export-onnx for ONNX
Runtime), which --inference-model-dir predicts with on --inference-backend in --inference-precision:
inference.py), and the DLLogger report with the loss, learning rate and, with
--do-eval, the metrics: accuracy, F1 of label 1 (MRPC, QQP), Matthews correlation (CoLA) and ROC AUC (binary
tasks).

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
import io
import math
import os
import sys
import time

import numpy as np
import paddle
import paddle.nn.functional as F

from finetuning import finetune
from finetuning.feature_batching import batch_indices
from finetuning.finetune import SEQUENCE_MULTIPLE, Session, model_inputs
from finetuning.glue_data import (
    GLUE_TASKS,
    ClassificationExample,
    ClassificationFeature,
    collate_classification,
    convert_examples_to_features,
    read_glue_examples,
    read_table_examples,
)
from finetuning.glue_metrics import compute_metrics
from inference import inference
from modeling import INPUT_NAMES, BertForSequenceClassification
from tokenizer import BertTokenizer
from utils.atomic_io import atomic_write_text
from utils.cli import DefaultsHelpFormatter, positive_int, run_main
from utils.dllog import DLLogger, add_format_argument
from utils.progress import progress_bar

CUSTOM_TASK = "custom"
TASK_NAMES = (*GLUE_TASKS, CUSTOM_TASK)
PREDICTIONS_FILE = "predictions.tsv"
# --int8-quantization's default for GLUE (benchmarks/inference_accuracy.py; docs/inference.md): per-channel weight
# scales scored within a point of fp32 on MRPC (-0.49) and SST-2 (+0.80) and need no calibration inputs; SQuAD's
# default, which takes the outlier channels apart too (MRPC +0.25, SST-2 0.00), ran 12-15% slower.
INT8_QUANTIZATION = "dynamic-per-channel"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=DefaultsHelpFormatter)
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
    finetune.add_shared_data_arguments(data, max_seq_length=128,
                                       max_seq_length_help="tokens per example with [CLS] and [SEP]; longer texts "
                                                           "are cut")
    finetune.add_model_arguments(parser)
    finetune.add_training_arguments(parser, unit="examples", learning_rate=5e-5, warmup_proportion=0.1)

    prediction = parser.add_argument_group("Prediction and evaluation")
    prediction.add_argument("--do-predict", action="store_true",
                            help=f"write <output-dir>/{PREDICTIONS_FILE} for --predict-file")
    prediction.add_argument("--do-eval", action="store_true", help="score the predictions of --predict-file")
    prediction.add_argument("--predict-batch-size", type=positive_int, default=8,
                            help="examples per prediction batch")
    inference.add_inference_arguments(prediction, int8_quantization=INT8_QUANTIZATION)
    finetune.add_advanced_arguments(parser)
    add_format_argument(parser)
    return parser


def check_glue_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The checks of the GLUE options: a custom table's columns and labels, the sequence length, inference."""
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
    if args.max_seq_length < 3:
        parser.error("--max-seq-length must be at least 3 ([CLS] and two [SEP])")
    inference.check_inference_arguments(parser, args, INT8_QUANTIZATION)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return finetune.parse_arguments(build_parser(), argv, ("do_train", "do_predict", "do_eval", "export_dir"),
                                    check_glue_arguments, exported_model=lambda args: bool(args.inference_model_dir))


def task_labels(args: argparse.Namespace) -> list[str]:
    return list(args.labels) if args.task_name == CUSTOM_TASK else list(GLUE_TASKS[args.task_name].labels)


def task_metrics(args: argparse.Namespace) -> tuple[str, ...]:
    if args.task_name != CUSTOM_TASK:
        return GLUE_TASKS[args.task_name].metrics
    return ("accuracy", "f1", "mcc", "auc") if len(args.labels) == 2 else ("accuracy", "mcc")


def read_examples(args: argparse.Namespace, path: str, require_labels: bool) -> list[ClassificationExample]:
    """The examples of a GLUE file or of a custom table; ValueError naming the file when it has none."""
    if args.task_name != CUSTOM_TASK:
        examples = read_glue_examples(args.task_name, path)
    else:
        examples = read_table_examples(path, args.text_a_column, args.labels, text_b_column=args.text_b_column,
                                       label_column=args.label_column, id_column=args.id_column,
                                       require_labels=require_labels)
    finetune.require_examples(examples, path)
    return examples


def collate(features: list[ClassificationFeature], pad_token_id: int, max_seq_length: int) -> dict[str, np.ndarray]:
    return collate_classification(features, pad_token_id, multiple=SEQUENCE_MULTIPLE, max_length=max_seq_length)


def classification_loss(network: paddle.nn.Layer, batch: dict[str, np.ndarray]) -> paddle.Tensor:
    """Mean cross-entropy of the batch's labels."""
    logits = network(*model_inputs(batch))
    return F.cross_entropy(logits.astype("float32"), paddle.to_tensor(batch["labels"]))


def train(model: BertForSequenceClassification, args: argparse.Namespace,
          session: Session) -> BertForSequenceClassification:
    """Fine-tune on the examples of --train-file and save the model."""
    examples = read_examples(args, args.train_file, require_labels=True)
    features = convert_examples_to_features(examples, session.tokenizer, args.max_seq_length, task_labels(args))
    pad_token_id = session.tokenizer.pad_token_id
    model = finetune.train(model, features, lambda batch: collate(batch, pad_token_id, args.max_seq_length),
                           classification_loss, args, session, unit="examples")
    finetune.save_fine_tuned(model, args, session)
    return model


# ---------------------------------------------------------------------------------------------
# Prediction and evaluation
# ---------------------------------------------------------------------------------------------


def predict_probabilities(run: inference.BatchPredictor, features: list[ClassificationFeature],
                          args: argparse.Namespace, pad_token_id: int) -> np.ndarray:
    """Class probabilities [N, num_labels] (float64) of every feature, in order."""
    probabilities = []
    batches = batch_indices(len(features), args.predict_batch_size, shuffle=False)
    total = math.ceil(len(features) / args.predict_batch_size)
    for indices in progress_bar(batches, desc="GLUE prediction", total=total, unit="batch"):
        batch = collate([features[i] for i in indices], pad_token_id, args.max_seq_length)
        (logits,) = run(*(batch[name] for name in INPUT_NAMES))
        logits = logits.astype(np.float64)  # [B, num_labels]
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
    atomic_write_text(path, text.getvalue())


def predict(run: inference.BatchPredictor, examples: list[ClassificationExample], tokenizer: BertTokenizer,
            args: argparse.Namespace, logger: DLLogger) -> None:
    labels = task_labels(args)
    features = convert_examples_to_features(examples, tokenizer, args.max_seq_length, labels)
    logger.log("PARAMETER", {"eval_samples": len(examples), "predict_batch_size": args.predict_batch_size})
    start = time.perf_counter()
    probabilities = predict_probabilities(run, features, args, tokenizer.pad_token_id)
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


def calibration_inputs(args: argparse.Namespace, tokenizer: BertTokenizer) -> dict[str, np.ndarray]:
    """The first inference.CALIBRATION_FEATURES examples of --train-file ([N, S] per input name): what
    --export-onnx saves for static int8's calibration."""
    examples = read_examples(args, args.train_file, require_labels=True)[:inference.CALIBRATION_FEATURES]
    batch = collate(convert_examples_to_features(examples, tokenizer, args.max_seq_length, task_labels(args)),
                    tokenizer.pad_token_id, args.max_seq_length)
    return {name: batch[name] for name in INPUT_NAMES}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    session = finetune.start_session(args)
    # read before any training, so that a malformed file stops the run at once
    prediction_examples = (read_examples(args, args.predict_file, require_labels=args.do_eval)
                           if args.do_predict or args.do_eval else None)
    model = None if args.inference_model_dir else finetune.build_model(
        args, lambda config: BertForSequenceClassification(config, len(task_labels(args))), session)
    if args.do_train:
        model = train(model, args, session)
    if session.rank != 0:
        return
    inference.export_and_predict(model, args, session, args.do_predict or args.do_eval,
                                 lambda run: predict(run, prediction_examples, session.tokenizer, args, session.logger),
                                 lambda: calibration_inputs(args, session.tokenizer),
                                 head=inference.classifier_head(len(task_labels(args))))
    session.logger.close()


if __name__ == "__main__":
    sys.exit(run_main(main, "run_glue.py"))
