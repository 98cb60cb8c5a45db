"""Optimizer step time on BERT-base's parameters: our LAMB and LANS against paddle's LAMB kernel (and AdamW).

All optimizers update the same BertForPretraining (bert-base-uncased config, 110M parameters) with the same
fixed gradients and clip norm 1.0, interleaved round by round in one process so they share the machine's
state. Prints the median milliseconds per step and each optimizer's ratio to paddle's Lamb.

    python benchmarks/bench_optimizer.py [--threads 2] [--rounds 5]
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import machine

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = machine.in_process_parser(__doc__, rounds=5, threads_help="CPU threads for Paddle",
                                       rounds_help="timed steps per optimizer (after one warm-up step)")
    parser.add_argument("--config", default=str(ROOT / "bert_configs" / "bert-base-uncased.json"))
    args = parser.parse_args()
    machine.print_header()

    import paddle

    from modeling import BertConfig, BertForPretraining
    from optimizer import create_optimizer

    paddle.base.core.set_num_threads(args.threads)
    paddle.seed(0)
    model = BertForPretraining(BertConfig.from_json_file(args.config))
    parameters = model.parameters()
    # loss = sum <param, G>: every parameter gets the fixed random gradient G, kept across steps.
    loss = sum((p * paddle.randn(p.shape, dtype=p.dtype) * 1e-3).sum() for p in parameters)
    loss.backward()
    count = sum(p.size for p in parameters)
    print(f"{len(parameters)} parameter tensors, {count / 1e6:.1f}M values, {args.threads} threads")

    def build(name: str, use_paddle_lamb: bool = False):
        return create_optimizer(name, model, 1e-4, 0.01, 0.9, 0.999, 1e-6, 1.0, use_paddle_lamb=use_paddle_lamb)

    optimizers = {"paddle Lamb": build("Lamb", use_paddle_lamb=True), "our Lamb": build("Lamb"),
                  "our Lans": build("Lans"), "paddle AdamW": build("AdamW")}
    times = {name: [] for name in optimizers}
    for round_index in range(args.rounds + 1):
        for name, optimizer in optimizers.items():
            start = time.perf_counter()
            optimizer.step()
            elapsed = time.perf_counter() - start
            if round_index > 0:  # the first step also creates the moments
                times[name].append(elapsed)

    lamb = statistics.median(times["paddle Lamb"])
    for name, samples in times.items():
        median = statistics.median(samples)
        print(f"{name:12s} {median * 1e3:8.1f} ms/step   x{median / lamb:.2f} of paddle Lamb's time")


if __name__ == "__main__":
    main()
