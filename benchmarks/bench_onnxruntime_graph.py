"""ONNX Runtime on a CPU: BERT's residual Adds and LayerNormalizations kept apart (what inference.py runs there)
against ORT's fused SkipLayerNormalization (its default, and what a GPU runs), interleaved in one process.

Both sessions run the same export of a random-weight span model (BERT-base by default), in fp32 and in int8 with
INT8_QUANTIZATION, with the same threads; only the SkipLayerNormalization fusion
differs (inference.CPU_DISABLED_ONNXRUNTIME_OPTIMIZERS). Prints the median seq/s of each and the split graph's
speed over the fused one's, the median of the per-round ratios; with --profile also each session's kernel time
per op type, from ONNX Runtime's profiler.

    python benchmarks/bench_onnxruntime_graph.py [--threads 2] [--rounds 5] [--profile]
"""

from __future__ import annotations

import collections
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import machine
from bench_squad_inference import random_batch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PRECISIONS = ("fp32", "int8")
# The int8 that needs no calibration inputs (random weights have no outlier channels to take apart).
INT8_QUANTIZATION = "dynamic-per-channel"
SPLIT, FUSED = "split (inference.py)", "fused (ORT's default)"


def op_shares(profile_file: str) -> list[tuple[str, float]]:
    """(op type, share of the kernel time) from an ONNX Runtime profile, largest first."""
    with open(profile_file, encoding="utf-8") as reader:
        events = json.load(reader)
    totals = collections.Counter()
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            totals[event["args"]["op_name"]] += event["dur"]
    whole = sum(totals.values()) or 1
    return [(op, duration / whole) for op, duration in totals.most_common()]


def main() -> None:
    parser = machine.in_process_parser(__doc__, rounds=5, rounds_help="timed forward passes of each session",
                                       threads_help="intra-op threads of every session")
    parser.add_argument("--config", default=str(ROOT / "bert_configs" / "bert-base-uncased.json"),
                        help="BERT config JSON of the span model")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-length", type=int, default=384)
    parser.add_argument("--profile", action="store_true",
                        help="also print each session's kernel time per op type (ONNX Runtime's profiler)")
    args = parser.parse_args()
    if min(args.threads, args.rounds, args.batch_size, args.seq_length) < 1:
        parser.error("--threads, --rounds, --batch-size and --seq-length must be at least 1")
    machine.print_header()

    import numpy as np

    from training import runtime

    paddle = runtime.import_paddle_quietly()
    from bert_config import BertConfig
    from inference import inference
    from modeling import BertForQuestionAnswering

    paddle.seed(0)
    model = BertForQuestionAnswering(BertConfig.from_json_file(args.config))
    batch = random_batch(args.batch_size, args.seq_length)
    print(f"config {args.config}, batch {args.batch_size}, seq {args.seq_length}, {args.threads} threads, "
          f"{args.rounds} rounds; int8 quantization {INT8_QUANTIZATION}", flush=True)
    with tempfile.TemporaryDirectory() as export_dir:
        inference.export_onnx_model(model, inference.export_inference_model(model, export_dir, "qa"))
        split = inference.onnxruntime_session_settings("cpu", args.threads)
        variants = {SPLIT: split, FUSED: {**split, "skip_layer_norm": True, "disabled_optimizers": []}}
        for precision in PRECISIONS:
            sessions = {}
            for name, settings in variants.items():
                if args.profile:
                    settings = {**settings, "options": {**settings["options"], "enable_profiling": True,
                                                        "profile_file_prefix": os.path.join(export_dir, "profile")}}
                sessions[name] = inference.onnxruntime_session(export_dir, "qa", precision,
                                                               INT8_QUANTIZATION, settings)
            predictors = {name: inference.session_predictor(session) for name, session in sessions.items()}
            first, second = (predictors[name](*batch)[0] for name in (SPLIT, FUSED))  # untimed: first-run set-up
            seq_per_s = {name: [] for name in predictors}
            for round_index in range(args.rounds):
                order = list(predictors) if round_index % 2 == 0 else list(reversed(predictors))
                for name in order:
                    start = time.perf_counter()
                    predictors[name](*batch)
                    seq_per_s[name].append(args.batch_size / (time.perf_counter() - start))
            ratio = statistics.median(a / b for a, b in zip(seq_per_s[SPLIT], seq_per_s[FUSED], strict=True))
            print(f"\n{precision}: start logits of the two differ by at most {np.abs(first - second).max():.1e}")
            for name, values in seq_per_s.items():
                print(f"  {name:24s} {statistics.median(values):6.2f} seq/s   (rounds: "
                      + ", ".join(f"{value:.2f}" for value in values) + ")")
            print(f"  split / fused: {ratio:.2f}x", flush=True)
            if args.profile:
                for name, session in sessions.items():
                    shares = op_shares(session.end_profiling())
                    print(f"  {name} kernel time: " + ", ".join(f"{op} {100 * share:.1f}%"
                                                                for op, share in shares if share >= 0.001))


if __name__ == "__main__":
    main()
