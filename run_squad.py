"""Fine-tune BERT on SQuAD v1.1, predict answers, score them, and export the model for Paddle Inference.

    python run_squad.py --do-train --train-file train-v1.1.json --do-predict --do-eval \
        --predict-file dev-v1.1.json --vocab-file vocab.txt --bert-model bert-large-uncased \
        --from-pretrained-params PRETRAINED --output-dir results/squad

Data parallel: start the same command under `python -m paddle.distributed.launch --nproc_per_node N`.
Each process trains on its share of every global batch (train_batch_size per process); rank 0 predicts.

The options keep the names and defaults of NVIDIA's PaddlePaddle BERT run_squad.py where they exist, with
these differences: --warmup-proportion takes effect (linear warmup, then linear decay to 0); the evaluation
runs in process (no --eval-script); --max-steps, when set, alone decides the training length; and
--max-seq-length defaults to 384, the value the reference's run_squad.sh passes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np
import paddle

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
from loss import squad_span_loss
from lr_scheduler import create_lr_scheduler
from modeling import BertForQuestionAnswering
from optimizer import create_optimizer
from runtime import apply_cpu_tweaks, configure_cpu_threads, init_data_parallel
from squad_evaluate import evaluate, load_dataset
from squad_utils import (
    SquadFeature,
    batch_indices,
    collate_features,
    convert_examples_to_features,
    postprocess_predictions,
    read_squad_examples,
    span_text,
)
from tokenizer import BertTokenizer, load_vocab, vocab_looks_cased
from weights import load_pretrained

ROOT = Path(__file__).resolve().parent
MAX_GRAD_NORM = 1.0  # gradient clipping of Google's and NVIDIA's fine-tuning recipes
PARAMS_SUFFIX = ".pdparams"
INPUT_NAMES = ("input_ids", "token_type_ids", "attention_mask")

LogitsByFeature = dict[int, tuple[np.ndarray, np.ndarray]]
# Runs the model on a collated batch: (input_ids, token_type_ids, attention_mask) -> (start_logits, end_logits)
BatchPredictor = Callable[[np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    data = parser.add_argument_group("Data and outputs")
    data.add_argument("--train-file", help="SQuAD json for training, e.g. train-v1.1.json")
    data.add_argument("--predict-file", help="SQuAD json to predict (and evaluate), e.g. dev-v1.1.json")
    data.add_argument("--vocab-file", required=True, help="WordPiece vocabulary the model was pretrained with")
    data.add_argument("--do-lower-case", action=argparse.BooleanOptionalAction, default=None,
                      help="lowercase and strip accents (uncased models); default: from the vocabulary's case")
    data.add_argument("--output-dir", required=True,
                      help="where the fine-tuned model, predictions and report are written")
    data.add_argument("--report-file", help="DLLogger JSON report; default <output-dir>/report.json")
    data.add_argument("--model-prefix", default="bert_paddle", help="file name prefix of saved models")
    data.add_argument("--max-seq-length", type=int, default=384, help="tokens per feature, question included")
    data.add_argument("--doc-stride", type=int, default=128, help="tokens between the starts of context windows")
    data.add_argument("--max-query-length", type=int, default=64, help="questions are cut to this many tokens")
    data.add_argument("--verbose-logging", action="store_true",
                      help="print every training answer that tokens cannot reproduce exactly")

    model = parser.add_argument_group("Model")
    model.add_argument("--bert-model", default="bert-large-uncased", choices=BERT_MODELS,
                       help="architecture; its bert_configs/<name>.json unless --config-file is given")
    model.add_argument("--config-file", help="BERT config JSON (needed for --bert-model custom)")
    model.add_argument("--from-pretrained-params", "--init-checkpoint", dest="from_pretrained_params",
                       help="initial weights: a .pdparams file (pretraining or converted Hugging Face) or a "
                            "folder holding <model-prefix>.pdparams")
    model.add_argument("--fuse-mha", action="store_true", help="one fused QKV projection per attention layer")

    training = parser.add_argument_group("Training")
    training.add_argument("--do-train", action="store_true", help="fine-tune on --train-file")
    training.add_argument("--epochs", type=int, default=3, help="passes over the training features")
    training.add_argument("--max-steps", type=int, default=None,
                          help="optimizer updates to run instead of --epochs (<= 0 means not set)")
    training.add_argument("--train-batch-size", type=int, default=32, help="features per process per micro-batch")
    training.add_argument("--gradient-merge-steps", type=int, default=1,
                          help="micro-batches whose gradients are accumulated into one update")
    training.add_argument("--learning-rate", type=float, default=1e-4, help="peak learning rate")
    training.add_argument("--warmup-start-lr", type=float, default=0.0, help="learning rate at the first step")
    training.add_argument("--warmup-proportion", type=float, default=0.01,
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
                            help="write predictions.json and nbest_predictions.json for --predict-file")
    prediction.add_argument("--do-eval", action="store_true",
                            help="score the predictions against --predict-file (exact match, F1)")
    prediction.add_argument("--predict-batch-size", type=int, default=8, help="features per prediction batch")
    prediction.add_argument("--n-best-size", type=int, default=20, help="candidates kept per question")
    prediction.add_argument("--max-answer-length", type=int, default=30, help="longest answer, in tokens")
    prediction.add_argument("--export-dir",
                            help="save the model with paddle.jit.save to <export-dir>/<model-prefix> for Paddle "
                                 "Inference")
    prediction.add_argument("--inference-model-dir",
                            help="predict with the Paddle Inference predictor of a model exported by --export-dir")

    benchmark = parser.add_argument_group("Benchmark")
    benchmark.add_argument("--benchmark", action="store_true",
                           help="time training and/or prediction steps instead of producing outputs; prediction "
                                "batches are padded to --max-seq-length")
    benchmark.add_argument("--benchmark-steps", type=int, default=20, help="timed steps")
    benchmark.add_argument("--benchmark-warmup-steps", type=int, default=20, help="untimed steps before them")

    advanced = parser.add_argument_group("Advanced")
    advanced.add_argument("--show-config", type=str_to_bool, default=True, help="log the arguments")
    add_amp_arguments(parser)
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_amp_arguments(parser, args)
    if not (args.do_train or args.do_predict or args.do_eval or args.export_dir):
        parser.error("nothing to do: give --do-train, --do-predict, --do-eval and/or --export-dir")
    if args.do_train and not args.train_file:
        parser.error("--do-train needs --train-file")
    if (args.do_predict or args.do_eval) and not args.predict_file:
        parser.error("--do-predict and --do-eval need --predict-file")
    if args.do_eval:
        args.do_predict = True  # scoring needs predictions; the reference's eval mode passes both flags
    if args.inference_model_dir and (args.do_train or args.export_dir or args.from_pretrained_params):
        parser.error("--inference-model-dir predicts with an exported model; it cannot train, export or load "
                     "--from-pretrained-params")
    if args.inference_model_dir and not args.do_predict:
        parser.error("--inference-model-dir is only used with --do-predict")
    try:
        args.config_file = config_file_for(args.bert_model, args.config_file)
    except ValueError as error:
        parser.error(str(error))
    if args.max_steps is not None and args.max_steps <= 0:
        args.max_steps = None
    for name in ("epochs", "train_batch_size", "predict_batch_size", "gradient_merge_steps", "log_freq",
                 "n_best_size", "max_answer_length", "doc_stride", "max_query_length", "benchmark_steps"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.benchmark_warmup_steps < 0:
        parser.error("--benchmark-warmup-steps must be non-negative")
    if not 0.0 <= args.warmup_proportion <= 1.0:
        parser.error("--warmup-proportion must be in [0, 1]")
    if args.max_seq_length < args.max_query_length + 4:
        parser.error("--max-seq-length must leave room for the question (--max-query-length) and some context")
    for name in ("train_file", "predict_file", "vocab_file", "config_file"):
        path = getattr(args, name)
        if path and not os.path.isfile(path):
            parser.error(f"--{name.replace('_', '-')} {path}: file not found")
    if args.report_file is None:
        args.report_file = os.path.join(args.output_dir, "report.json")
    return args


# ---------------------------------------------------------------------------------------------
# Model and weights
# ---------------------------------------------------------------------------------------------


def build_model(args: argparse.Namespace, logger: DLLogger) -> BertForQuestionAnswering:
    config = build_config(args.bert_model, args.config_file, fuse_mha=args.fuse_mha,
                          max_seq_length=args.max_seq_length)
    model = BertForQuestionAnswering(config)
    if args.from_pretrained_params:
        # SQuAD reads every token's output and never the pooler, so a checkpoint without one still fine-tunes.
        report = load_pretrained(model, args.from_pretrained_params, required=("embeddings", "encoder"),
                                 flag="--from-pretrained-params", model_prefix=args.model_prefix)
        print(report.describe(), flush=True)
        logger.log("PARAMETER", {"init_params": report.path, "newly_initialized": report.missing,
                                 "unused_params": report.unused})
    return model


def save_fine_tuned(model: BertForQuestionAnswering, output_dir: str, model_prefix: str) -> str:
    """<output_dir>/<model_prefix>.pdparams and the architecture as <model_prefix>_config.json."""
    params_path = os.path.join(output_dir, model_prefix + PARAMS_SUFFIX)
    atomic_write(params_path, lambda path: paddle.save(model.state_dict(), path))
    config_text = model.config.to_json_string()
    atomic_write(os.path.join(output_dir, model_prefix + "_config.json"),
                  lambda path: Path(path).write_text(config_text, encoding="utf-8"))
    return params_path


def export_inference_model(model: BertForQuestionAnswering, export_dir: str, model_prefix: str) -> str:
    """paddle.jit.save the model with dynamic [batch, sequence] int64 inputs; returns the path prefix."""
    model.eval()
    input_spec = [paddle.static.InputSpec([None, None], "int64", name) for name in INPUT_NAMES]
    prefix = os.path.join(export_dir, model_prefix)
    os.makedirs(export_dir, exist_ok=True)
    paddle.jit.save(model, prefix, input_spec=input_spec)
    return prefix


def _exported_program_file(prefix: str) -> str:
    # Paddle 3 with PIR writes the program as <prefix>.json; older formats used <prefix>.pdmodel.
    for suffix in (".json", ".pdmodel"):
        if os.path.isfile(prefix + suffix):
            return prefix + suffix
    raise FileNotFoundError(f"{prefix}.json: no exported model (run with --export-dir first)")


def inference_predictor(model_dir: str, model_prefix: str, num_threads: int) -> BatchPredictor:
    """A Paddle Inference predictor for <model_dir>/<model_prefix>, called like the dygraph model."""
    prefix = os.path.join(model_dir, model_prefix)
    config = paddle.inference.Config(_exported_program_file(prefix), prefix + ".pdiparams")
    config.disable_gpu()
    # oneDNN kernels: 2.4x the default CPU kernels for BERT-base on this machine (benchmarks/bench_squad_inference.py)
    config.enable_mkldnn()
    config.disable_glog_info()
    config.set_cpu_math_library_num_threads(num_threads)
    predictor = paddle.inference.create_predictor(config)
    if tuple(predictor.get_input_names()) != INPUT_NAMES:
        raise ValueError(f"{prefix}: exported inputs {predictor.get_input_names()} are not {list(INPUT_NAMES)}")
    outputs = [predictor.get_output_handle(name) for name in predictor.get_output_names()]

    def run(input_ids: np.ndarray, token_type_ids: np.ndarray, attention_mask: np.ndarray):
        for name, array in zip(INPUT_NAMES, (input_ids, token_type_ids, attention_mask), strict=True):
            predictor.get_input_handle(name).copy_from_cpu(array)
        predictor.run()
        start_logits, end_logits = (output.copy_to_cpu() for output in outputs)
        return start_logits, end_logits

    return run


def dygraph_predictor(model: paddle.nn.Layer, policy: AmpPolicy) -> BatchPredictor:
    model.eval()

    def run(input_ids: np.ndarray, token_type_ids: np.ndarray, attention_mask: np.ndarray):
        with paddle.no_grad(), amp_autocast(policy):
            start_logits, end_logits = model(
                paddle.to_tensor(input_ids), paddle.to_tensor(token_type_ids), paddle.to_tensor(attention_mask)
            )
        return start_logits.astype("float32").numpy(), end_logits.astype("float32").numpy()

    return run


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


def _training_batches(features: list[SquadFeature], args: argparse.Namespace, rank: int, world_size: int,
                      pad_token_id: int) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
    """(epoch, batch) forever: a fresh shuffle every epoch."""
    epoch = 0
    while True:
        for indices in batch_indices(len(features), args.train_batch_size, shuffle=True, seed=args.seed,
                                     epoch=epoch, rank=rank, world_size=world_size):
            yield epoch, collate_features([features[i] for i in indices], pad_token_id, is_training=True)
        epoch += 1


def total_training_steps(num_features: int, args: argparse.Namespace, world_size: int) -> int:
    if args.max_steps is not None:
        return args.max_steps
    batches_per_epoch = math.ceil(math.ceil(num_features / world_size) / args.train_batch_size)
    return max(1, args.epochs * batches_per_epoch // args.gradient_merge_steps)


def train(model: BertForQuestionAnswering, features: list[SquadFeature], args: argparse.Namespace, policy: AmpPolicy,
          logger: DLLogger, rank: int, world_size: int, pad_token_id: int) -> BertForQuestionAnswering:
    """Fine-tune with AdamW and linear warmup + linear decay; returns the trained model."""
    total_steps = total_training_steps(len(features), args, world_size)
    if args.benchmark:
        total_steps = args.benchmark_warmup_steps + args.benchmark_steps
    scheduler = create_lr_scheduler("poly", args.learning_rate, total_steps, args.warmup_proportion,
                                    warmup_start_lr=args.warmup_start_lr, power=1.0)
    optimizer = create_optimizer("AdamW", model, scheduler, args.weight_decay, args.beta1, args.beta2,
                                 args.epsilon, MAX_GRAD_NORM)
    model, optimizer = amp_decorate(model, optimizer, policy)
    scaler = create_loss_scaler(policy)
    network = paddle.DataParallel(model) if world_size > 1 else model
    network.train()
    logger.log("PARAMETER", {"training_features": len(features), "train_batch_size": args.train_batch_size,
                             "world_size": world_size, "steps": total_steps})
    batches = _training_batches(features, args, rank, world_size, pad_token_id)
    global_batch = args.train_batch_size * args.gradient_merge_steps * world_size
    skipped_steps = 0
    timed_start = train_start = time.perf_counter()
    for step in range(1, total_steps + 1):
        if args.benchmark and step == args.benchmark_warmup_steps + 1:
            timed_start = time.perf_counter()
        learning_rate = optimizer.get_lr()
        step_loss = 0.0
        for _ in range(args.gradient_merge_steps):
            epoch, batch = next(batches)
            with amp_autocast(policy):
                start_logits, end_logits = network(*(paddle.to_tensor(batch[name]) for name in INPUT_NAMES))
                loss = squad_span_loss(start_logits, end_logits, paddle.to_tensor(batch["start_positions"]),
                                       paddle.to_tensor(batch["end_positions"]))
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
    elapsed = time.perf_counter() - timed_start
    if args.benchmark:
        logger.log((), {"training_sequences_per_second": global_batch * args.benchmark_steps / elapsed})
    else:
        logger.log((), {"e2e_train_time": time.perf_counter() - train_start,
                        "training_sequences_per_second": global_batch * total_steps / elapsed})
    return model


# ---------------------------------------------------------------------------------------------
# Prediction
# ---------------------------------------------------------------------------------------------


def _prediction_batches(features: list[SquadFeature], batch_size: int, pad_token_id: int,
                        pad_to: int | None) -> Iterable[dict[str, np.ndarray]]:
    for indices in batch_indices(len(features), batch_size, shuffle=False):
        batch = collate_features([features[i] for i in indices], pad_token_id, is_training=False)
        if pad_to is not None and batch["input_ids"].shape[1] < pad_to:
            extra = ((0, 0), (0, pad_to - batch["input_ids"].shape[1]))
            batch = {**{name: np.pad(batch[name], extra, constant_values=pad_token_id if name == "input_ids" else 0)
                        for name in INPUT_NAMES}, "unique_ids": batch["unique_ids"]}
        yield batch


def predict_logits(run: BatchPredictor, features: list[SquadFeature], batch_size: int,
                   pad_token_id: int) -> LogitsByFeature:
    logits: LogitsByFeature = {}
    for batch in _prediction_batches(features, batch_size, pad_token_id, pad_to=None):
        start_logits, end_logits = run(*(batch[name] for name in INPUT_NAMES))
        for row, unique_id in enumerate(batch["unique_ids"].tolist()):
            logits[unique_id] = (start_logits[row], end_logits[row])
    return logits


def benchmark_inference(run: BatchPredictor, features: list[SquadFeature], args: argparse.Namespace,
                        pad_token_id: int) -> float:
    """Sequences/s over --benchmark-steps batches of --predict-batch-size features padded to --max-seq-length."""
    batches = list(_prediction_batches(features, args.predict_batch_size, pad_token_id, args.max_seq_length))
    timed_start = time.perf_counter()
    for step in range(args.benchmark_warmup_steps + args.benchmark_steps):
        if step == args.benchmark_warmup_steps:
            timed_start = time.perf_counter()
        batch = batches[step % len(batches)]
        run(*(batch[name] for name in INPUT_NAMES))
    return args.predict_batch_size * args.benchmark_steps / (time.perf_counter() - timed_start)


def write_json(path: str, content: object) -> None:
    text = json.dumps(content, indent=4, ensure_ascii=False) + "\n"
    atomic_write(path, lambda temporary: Path(temporary).write_text(text, encoding="utf-8"))


def predict(run: BatchPredictor, tokenizer: BertTokenizer, args: argparse.Namespace, logger: DLLogger) -> None:
    examples = read_squad_examples(args.predict_file, is_training=False)
    features = convert_examples_to_features(examples, tokenizer, args.max_seq_length, args.doc_stride,
                                            args.max_query_length, is_training=False)
    logger.log("PARAMETER", {"eval_samples": len(examples), "eval_features": len(features),
                             "predict_batch_size": args.predict_batch_size})
    if args.benchmark:
        throughput = benchmark_inference(run, features, args, tokenizer.pad_token_id)
        logger.log((), {"inference_sequences_per_second": throughput, "seq_length": args.max_seq_length})
        return
    start = time.perf_counter()
    logits = predict_logits(run, features, args.predict_batch_size, tokenizer.pad_token_id)
    elapsed = time.perf_counter() - start
    logger.log((), {"e2e_inference_time": elapsed, "inference_sequences_per_second": len(features) / elapsed})
    predictions, nbest = postprocess_predictions(examples, features, logits, args.n_best_size,
                                                 args.max_answer_length)
    write_json(os.path.join(args.output_dir, "predictions.json"), predictions)
    write_json(os.path.join(args.output_dir, "nbest_predictions.json"), nbest)
    if args.do_eval:
        scores = evaluate(load_dataset(args.predict_file), predictions, source=args.predict_file)
        logger.log((), {"exact_match": scores["exact_match"], "F1": scores["f1"]})


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    num_threads = configure_cpu_threads()
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
    model = None if args.inference_model_dir else build_model(args, logger)
    paddle.seed(args.seed + rank)  # different dropout masks on every rank
    if args.do_train:
        examples = read_squad_examples(args.train_file, is_training=True)
        features = convert_examples_to_features(examples, tokenizer, args.max_seq_length, args.doc_stride,
                                                args.max_query_length, is_training=True)
        unrecoverable = count_unrecoverable_answers(examples, features, args.verbose_logging and rank == 0)
        logger.log("PARAMETER", {"training_samples": len(examples), "unrecoverable_answers": unrecoverable})
        model = train(model, features, args, policy, logger, rank, world_size, tokenizer.pad_token_id)
        if rank == 0 and not args.benchmark:
            logger.log("PARAMETER", {"saved_model": save_fine_tuned(model, args.output_dir, args.model_prefix)})
    if rank != 0:
        return
    if args.export_dir:
        logger.log("PARAMETER", {"exported_model": export_inference_model(model, args.export_dir,
                                                                         args.model_prefix)})
    if args.do_predict:
        if args.inference_model_dir:
            run = inference_predictor(args.inference_model_dir, args.model_prefix, num_threads)
        else:
            run = dygraph_predictor(model, policy)
        predict(run, tokenizer, args, logger)
    logger.close()


if __name__ == "__main__":
    try:
        main()
    except (FileNotFoundError, ValueError) as error:
        sys.exit(f"run_squad.py: {error}")
