"""Fine-tune BERT on SQuAD v1.1 or v2.0, predict answers, score them, and export the model for Paddle Inference.

    python run_squad.py --do-train --train-file train-v1.1.json --do-predict --do-eval \
        --predict-file dev-v1.1.json --vocab-file vocab.txt --bert-model bert-large-uncased \
        --from-pretrained-params PRETRAINED --output-dir results/squad

Data parallel: start the same command under `python -m paddle.distributed.launch --nproc_per_node N`.
Each process trains on its share of every global batch (train_batch_size per process); rank 0 predicts.

SQuAD v2.0 (--version-2-with-negative): unanswerable questions train on the [CLS] span, a question is answered ""
when its null-score difference exceeds --null-score-diff-threshold, null_odds.json (question id -> that
difference) is written beside predictions.json, and --do-eval reports the official v2.0 metrics.

The options keep the names and defaults of NVIDIA's PaddlePaddle BERT run_squad.py where they exist; where they
deliberately differ, DIFFERENCES_FROM_NVIDIA (below, and in --help) says how. The training core is finetune.py's.
With --inference-model-dir the exported model predicts through Paddle Inference or, exported with --export-onnx,
ONNX Runtime (--inference-backend) in --inference-precision (inference.py: fp32, bf16, fp16 on a GPU, int8).
"""

from __future__ import annotations

from training import runtime  # noqa: F401  # isort: skip  (first: it imports Paddle without its import-time warnings)
import argparse
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable

import numpy as np
import paddle

from finetuning import finetune
from finetuning.feature_batching import batch_indices
from finetuning.finetune import SEQUENCE_MULTIPLE, Session, model_inputs
from inference import inference
from loss import squad_span_loss
from modeling import INPUT_NAMES, BertForQuestionAnswering
from squad_evaluate import evaluate, evaluate_v2, load_dataset, load_squad_json
from squad_utils import (
    SquadExample,
    SquadFeature,
    collate_features,
    convert_examples_to_features,
    null_odds,
    postprocess_predictions,
    read_squad_examples,
    span_text,
)
from tokenizer import BertTokenizer
from utils.atomic_io import atomic_write_set, text_writer
from utils.cli import DefaultsHelpFormatter, add_benchmark_arguments, finite_float, positive_int, run_main
from utils.dllog import DLLogger, add_format_argument
from utils.progress import progress_bar

# What --help says after the first line of the module docstring: where the options act unlike NVIDIA's.
DIFFERENCES_FROM_NVIDIA = """The options keep the names and defaults of NVIDIA's PaddlePaddle BERT run_squad.py
where they exist, and --max-steps combines with --epochs as there (the run stops at whichever comes first).
These differ on purpose: --warmup-proportion takes effect (linear warmup, then linear decay to 0; NVIDIA's
schedule has no warmup); --max-seq-length defaults to 384, the value the reference's run_squad.sh passes
(NVIDIA's parser says 512); --do-eval scores in process, and --eval-script (default: none; NVIDIA's is
evaluate.py) adds the official script's scores; --optimizer (default AdamW) takes effect (NVIDIA's fine-tuning
is always AdamW); --from-checkpoint takes only the weights, and a folder without a checkpoint is an error
(NVIDIA's starts from random weights); predicting or evaluating random weights needs --allow-random-weights."""
# NVIDIA's parser has this option and its run_squad.py never reads it; accepted so its command lines run.
NUM_STEPS_PER_CHECKPOINT_NOTE = ("NVIDIA's run_squad.py does not read it either: the fine-tuned model is saved once, "
                                 "after training")
LogitsByFeature = dict[int, tuple[np.ndarray, np.ndarray]]
# --int8-quantization's default for SQuAD (benchmarks/inference_accuracy.py; docs/inference.md): on the 20-article
# model, per-channel weight scales alone lost 2.1 EM and 2.6 F1 against fp32 (one scale per matrix lost 6.1 EM);
# with the outlier channels apart too, EM and F1 stayed within 0.5 of fp32.
INT8_QUANTIZATION = "dynamic-per-channel-outliers"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=f"{__doc__.splitlines()[0]} {DIFFERENCES_FROM_NVIDIA}",
                                     formatter_class=DefaultsHelpFormatter)
    data = parser.add_argument_group("Data and outputs")
    data.add_argument("--train-file", help="SQuAD json for training, e.g. train-v1.1.json")
    data.add_argument("--predict-file", help="SQuAD json to predict (and evaluate), e.g. dev-v1.1.json")
    finetune.add_shared_data_arguments(data, max_seq_length=384,
                                       max_seq_length_help="tokens per feature, question included")
    data.add_argument("--doc-stride", type=positive_int, default=128,
                      help="tokens between the starts of context windows")
    data.add_argument("--max-query-length", type=positive_int, default=64, help="questions are cut to this many tokens")
    data.add_argument("--verbose-logging", action="store_true",
                      help="print every training answer that tokens cannot reproduce exactly")
    data.add_argument("--version-2-with-negative", action="store_true",
                      help="SQuAD v2.0 files: some questions have no answer (\"is_impossible\")")
    finetune.add_model_arguments(parser)
    finetune.add_training_arguments(parser, unit="features", learning_rate=1e-4, warmup_proportion=0.01)

    prediction = parser.add_argument_group("Prediction and evaluation")
    prediction.add_argument("--do-predict", action="store_true",
                            help="write predictions.json and nbest_predictions.json for --predict-file")
    prediction.add_argument("--do-eval", action="store_true",
                            help="score the predictions against --predict-file (exact match, F1)")
    prediction.add_argument("--predict-batch-size", type=positive_int, default=8,
                            help="features per prediction batch")
    prediction.add_argument("--n-best-size", type=positive_int, default=20, help="candidates kept per question")
    prediction.add_argument("--max-answer-length", type=positive_int, default=30, help="longest answer, in tokens")
    prediction.add_argument("--null-score-diff-threshold", type=finite_float, default=0.0,
                            help="--version-2-with-negative: answer \"\" when the null answer's score minus the "
                                 "best answer's exceeds this")
    prediction.add_argument("--eval-script",
                            help="--do-eval: also run this official evaluation script as `python SCRIPT "
                                 "PREDICT_FILE predictions.json` and report its exact match and F1")
    inference.add_inference_arguments(prediction, int8_quantization=INT8_QUANTIZATION)

    add_benchmark_arguments(parser, "time training and/or prediction steps instead of producing outputs; prediction "
                                    "batches are padded to --max-seq-length")
    finetune.add_advanced_arguments(parser)
    add_format_argument(parser)
    compatibility = parser.add_argument_group("Accepted for NVIDIA's command lines")
    compatibility.add_argument("--num-steps-per-checkpoint", type=int, default=None,
                               help=f"no effect ({NUM_STEPS_PER_CHECKPOINT_NOTE})")
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return finetune.parse_arguments(build_parser(), argv, ("do_train", "do_predict", "do_eval", "export_dir"),
                                    check_squad_arguments, exported_model=lambda args: bool(args.inference_model_dir))


def check_squad_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The checks of the SQuAD options: prediction, export and inference, v2.0, windows and benchmark."""
    if args.num_steps_per_checkpoint is not None:
        print(f"run_squad.py: --num-steps-per-checkpoint has no effect here; {NUM_STEPS_PER_CHECKPOINT_NOTE}",
              flush=True)
    if args.do_eval:
        args.do_predict = True  # scoring needs predictions; the reference's eval mode passes both flags
    inference.check_inference_arguments(parser, args, INT8_QUANTIZATION)
    if args.null_score_diff_threshold != 0.0 and not args.version_2_with_negative:
        parser.error("--null-score-diff-threshold is only used with --version-2-with-negative")
    if args.eval_script and not args.do_eval:
        parser.error("--eval-script is only used with --do-eval")
    if args.eval_script and not os.path.isfile(args.eval_script):
        parser.error(f"--eval-script {args.eval_script}: file not found")
    if args.max_seq_length < args.max_query_length + 4:
        parser.error("--max-seq-length must leave room for the question (--max-query-length) and some context")


# ---------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------


def count_unrecoverable_answers(examples, features: list[SquadFeature], verbose: bool) -> int:
    """Training answers whose labelled token span covers more text than the answer (it cuts a word)."""
    unrecoverable = set()
    for feature in features:
        if feature.start_position == 0:
            continue
        example = examples[feature.example_index]
        text = span_text(example, feature, feature.start_position, feature.end_position)
        if text != example.answer_text and feature.example_index not in unrecoverable:
            unrecoverable.add(feature.example_index)
            if verbose:
                print(f"answer of question {example.qas_id} is {example.answer_text!r}; its tokens cover {text!r}")
    return len(unrecoverable)


def span_loss(network: paddle.nn.Layer, batch: dict[str, np.ndarray]) -> paddle.Tensor:
    start_logits, end_logits = network(*model_inputs(batch))
    return squad_span_loss(start_logits, end_logits, paddle.to_tensor(batch["start_positions"]),
                           paddle.to_tensor(batch["end_positions"]))


def train(model: BertForQuestionAnswering, args: argparse.Namespace, session: Session) -> BertForQuestionAnswering:
    """Fine-tune on the span loss over the features of --train-file; saves the model unless benchmarking."""
    examples = read_squad_examples(args.train_file, is_training=True,
                                   version_2_with_negative=args.version_2_with_negative)
    finetune.require_examples(examples, args.train_file)
    features = convert_examples_to_features(examples, session.tokenizer, args.max_seq_length, args.doc_stride,
                                            args.max_query_length, is_training=True)
    unrecoverable = count_unrecoverable_answers(examples, features, args.verbose_logging and session.rank == 0)
    session.logger.log("PARAMETER", {"training_samples": len(examples), "unrecoverable_answers": unrecoverable})

    def collate(batch_features: list[SquadFeature]) -> dict[str, np.ndarray]:
        return collate_features(batch_features, session.tokenizer.pad_token_id, is_training=True,
                                multiple=SEQUENCE_MULTIPLE, max_length=args.max_seq_length)

    benchmark = (args.benchmark_warmup_steps, args.benchmark_steps) if args.benchmark else None
    model = finetune.train(model, features, collate, span_loss, args, session, unit="features", benchmark=benchmark)
    if not args.benchmark:
        finetune.save_fine_tuned(model, args, session)
    return model


# ---------------------------------------------------------------------------------------------
# Prediction
# ---------------------------------------------------------------------------------------------


def _prediction_batches(features: list[SquadFeature], batch_size: int, pad_token_id: int,
                        max_seq_length: int, pad_to_max: bool) -> Iterable[dict[str, np.ndarray]]:
    # A multiple of max_seq_length capped at max_seq_length pads every batch to exactly max_seq_length.
    multiple = max_seq_length if pad_to_max else SEQUENCE_MULTIPLE
    for indices in batch_indices(len(features), batch_size, shuffle=False):
        yield collate_features([features[i] for i in indices], pad_token_id, is_training=False, multiple=multiple,
                               max_length=max_seq_length)


def predict_logits(run: inference.BatchPredictor, features: list[SquadFeature], batch_size: int, pad_token_id: int,
                   max_seq_length: int) -> LogitsByFeature:
    logits: LogitsByFeature = {}
    batches = _prediction_batches(features, batch_size, pad_token_id, max_seq_length, pad_to_max=False)
    for batch in progress_bar(batches, desc="SQuAD prediction", total=math.ceil(len(features) / batch_size),
                              unit="batch"):
        start_logits, end_logits = run(*(batch[name] for name in INPUT_NAMES))
        for row, unique_id in enumerate(batch["unique_ids"].tolist()):
            logits[unique_id] = (start_logits[row], end_logits[row])
    return logits


def benchmark_inference(run: inference.BatchPredictor, features: list[SquadFeature], args: argparse.Namespace,
                        pad_token_id: int) -> float:
    """Sequences/s over --benchmark-steps batches of --predict-batch-size features padded to --max-seq-length."""
    batches = list(_prediction_batches(features, args.predict_batch_size, pad_token_id, args.max_seq_length,
                                       pad_to_max=True))
    timed_start = time.perf_counter()
    for step in range(args.benchmark_warmup_steps + args.benchmark_steps):
        if step == args.benchmark_warmup_steps:
            timed_start = time.perf_counter()
        batch = batches[step % len(batches)]
        run(*(batch[name] for name in INPUT_NAMES))
    return args.predict_batch_size * args.benchmark_steps / (time.perf_counter() - timed_start)


def json_writer(content: object) -> Callable[[str], None]:
    """An atomic_io writer of content as indented UTF-8 JSON."""
    return text_writer(json.dumps(content, indent=4, ensure_ascii=False) + "\n")


def read_prediction_examples(args: argparse.Namespace) -> list[SquadExample]:
    """The questions of --predict-file, read before any training so that a malformed file stops the run at once."""
    examples = read_squad_examples(args.predict_file, is_training=False,
                                   version_2_with_negative=args.version_2_with_negative)
    finetune.require_examples(examples, args.predict_file)
    return examples


def predict(run: inference.BatchPredictor, examples: list[SquadExample], tokenizer: BertTokenizer,
            args: argparse.Namespace, logger: DLLogger) -> None:
    """Write predictions.json and nbest_predictions.json (and null_odds.json for v2.0); score them with --do-eval."""
    features = convert_examples_to_features(examples, tokenizer, args.max_seq_length, args.doc_stride,
                                            args.max_query_length, is_training=False)
    logger.log("PARAMETER", {"eval_samples": len(examples), "eval_features": len(features),
                             "predict_batch_size": args.predict_batch_size})
    if args.benchmark:
        throughput = benchmark_inference(run, features, args, tokenizer.pad_token_id)
        logger.log((), {"inference_sequences_per_second": throughput, "seq_length": args.max_seq_length})
        return
    start = time.perf_counter()
    logits = predict_logits(run, features, args.predict_batch_size, tokenizer.pad_token_id, args.max_seq_length)
    elapsed = time.perf_counter() - start
    logger.log((), {"e2e_inference_time": elapsed, "inference_sequences_per_second": len(features) / elapsed})
    predictions, nbest = postprocess_predictions(examples, features, logits, args.n_best_size,
                                                 args.max_answer_length, args.version_2_with_negative,
                                                 args.null_score_diff_threshold)
    predictions_path = os.path.join(args.output_dir, "predictions.json")
    odds = null_odds(nbest) if args.version_2_with_negative else None
    # One set: a full disk replaces none of them, and a v1.1 run leaves no null_odds.json of an earlier v2.0 run.
    atomic_write_set({predictions_path: json_writer(predictions),
                      os.path.join(args.output_dir, "nbest_predictions.json"): json_writer(nbest),
                      os.path.join(args.output_dir, "null_odds.json"): None if odds is None else json_writer(odds)})
    if args.do_eval:
        scores = score_predictions(args, predictions, odds)
        if args.eval_script:
            scores.update(run_eval_script(args.eval_script, args.predict_file, predictions_path))
        logger.log((), scores)


def score_predictions(args: argparse.Namespace, predictions: dict[str, str],
                      odds: dict[str, float] | None) -> dict[str, float]:
    """exact_match and F1 (NVIDIA's report keys) of the predictions on --predict-file, and for v2.0 the other
    scores of the official v2.0 script: HasAns_*, NoAns_*, *_total and best_exact/best_f1 with their thresholds
    (the null odds as its no-answer probabilities, --null-score-diff-threshold as its threshold, so that the
    scored answers are the written ones)."""
    if not args.version_2_with_negative:
        scores = evaluate(load_dataset(args.predict_file), predictions, source=args.predict_file)
        return {"exact_match": scores["exact_match"], "F1": scores["f1"]}
    scores = evaluate_v2(load_squad_json(args.predict_file)["data"], predictions, odds,
                         na_prob_thresh=args.null_score_diff_threshold, source=args.predict_file)
    return {"exact_match": scores.pop("exact"), "F1": scores.pop("f1"), **scores}


def run_eval_script(script: str, dataset_path: str, predictions_path: str) -> dict[str, float]:
    """eval_script_exact_match and eval_script_F1 from `python SCRIPT DATASET PREDICTIONS`, as NVIDIA runs
    --eval-script: the JSON it prints holds exact_match and f1 (evaluate-v1.1.py) or exact and f1 (v2.0)."""
    result = subprocess.run([sys.executable, script, dataset_path, predictions_path], capture_output=True, text=True)
    if result.returncode != 0:
        message = (result.stderr.strip().splitlines() or ["no message"])[-1]
        raise ValueError(f"--eval-script {script}: exited with status {result.returncode}: {message}")
    try:
        scores = json.loads(result.stdout)
        exact_match = float(scores["exact_match"] if "exact_match" in scores else scores["exact"])
        f1 = float(scores["f1"])
    except (json.JSONDecodeError, TypeError, KeyError, ValueError):
        raise ValueError(f"--eval-script {script}: its output is not a JSON object with exact_match (or exact) "
                         f"and f1: {result.stdout.strip()[:200]!r}") from None
    return {"eval_script_exact_match": exact_match, "eval_script_F1": f1}


def calibration_inputs(args: argparse.Namespace, tokenizer: BertTokenizer) -> dict[str, np.ndarray]:
    """The first inference.CALIBRATION_FEATURES prediction features of --train-file's questions ([N, S] per input
    name): what --export-onnx saves for static int8's calibration."""
    examples = read_squad_examples(args.train_file, is_training=False,
                                   version_2_with_negative=args.version_2_with_negative)
    # every question gives at least one feature
    features = convert_examples_to_features(examples[:inference.CALIBRATION_FEATURES], tokenizer,
                                            args.max_seq_length, args.doc_stride, args.max_query_length,
                                            is_training=False)[:inference.CALIBRATION_FEATURES]
    batch = collate_features(features, tokenizer.pad_token_id, is_training=False, multiple=SEQUENCE_MULTIPLE,
                             max_length=args.max_seq_length)
    return {name: batch[name] for name in INPUT_NAMES}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    session = finetune.start_session(args)
    prediction_examples = read_prediction_examples(args) if args.do_predict else None
    # SQuAD reads every token's output and never the pooler, so a checkpoint without one fine-tunes all the same.
    model = None if args.inference_model_dir else finetune.build_model(args, BertForQuestionAnswering, session)
    if args.do_train:
        model = train(model, args, session)
    if session.rank != 0:
        return
    inference.export_and_predict(model, args, session, args.do_predict,
                                 lambda run: predict(run, prediction_examples, session.tokenizer, args, session.logger),
                                 lambda: calibration_inputs(args, session.tokenizer), head=inference.SPAN_HEAD)
    session.logger.close()


if __name__ == "__main__":
    sys.exit(run_main(main, "run_squad.py"))
