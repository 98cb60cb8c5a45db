"""CPU kernel time: the cpu_ops extension's LayerNorm, GELU and masked-LM cross-entropy (forward + backward) against
Paddle's own ops.

Each pair runs the same float32 tensors, interleaved round by round in one process, at training shapes: BERT-base
at batch 8 x 128 tokens ([1024, 768] for LayerNorm, [1024, 3072] for GELU), and the masked-LM loss of a phase-1
batch of 64 (its 1,280 masked tokens' logits over BERT's 30,522-entry vocabulary, as loss.masked_lm_loss computes
the mean). Prints the median milliseconds of forward + backward and Paddle's time divided by ours.

    python benchmarks/bench_cpu_kernels.py [--threads 2] [--rounds 40]
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import machine

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    args = machine.in_process_parser(__doc__, rounds=40, rounds_help="timed forward + backward passes per kernel",
                                     threads_help="CPU threads for Paddle and the extension").parse_args()
    machine.print_header()

    import numpy as np
    import paddle
    import paddle.nn.functional as F

    from kernels import cpu_kernels, cpu_ops
    from loss import masked_lm_loss

    ops = cpu_ops.load()
    if ops is None:
        sys.exit("bench_cpu_kernels.py: the cpu_ops extension does not build here; nothing to compare")
    paddle.base.core.set_num_threads(args.threads)
    rng = np.random.default_rng(0)

    def leaf(shape: tuple[int, ...]) -> paddle.Tensor:
        tensor = paddle.to_tensor(rng.standard_normal(shape).astype("float32"))
        tensor.stop_gradient = False
        return tensor

    x_ln, weight, bias, x_gelu = leaf((1024, 768)), leaf((768,)), leaf((768,)), leaf((1024, 3072))
    grad_ln, grad_gelu = paddle.ones([1024, 768]), paddle.ones([1024, 3072])
    logits, labels = leaf((1280, 30522)), paddle.to_tensor(rng.integers(0, 30522, 1280))
    gelu = cpu_kernels.exact_gelu()
    pairs = {
        "LayerNorm [1024, 768]": (lambda: ops.layer_norm(x_ln, weight, bias, 1e-12),
                                  lambda: F.layer_norm(x_ln, 768, weight, bias, 1e-12), grad_ln),
        "GELU [1024, 3072]": (lambda: gelu(x_gelu), lambda: F.gelu(x_gelu), grad_gelu),
        "masked-LM cross-entropy [1280, 30522]": (lambda: masked_lm_loss(logits, labels, ops),
                                                  lambda: masked_lm_loss(logits, labels), None),
    }

    def timed(forward, grad) -> float:
        start = time.perf_counter()
        forward().backward(grad)
        elapsed = time.perf_counter() - start
        for tensor in (x_ln, weight, bias, x_gelu, logits):
            tensor.clear_gradient()
        return elapsed

    print(f"{args.threads} threads, {args.rounds} rounds, median ms of forward + backward")
    for name, (ours, theirs, grad) in pairs.items():
        times = {"ours": [], "paddle": []}
        timed(ours, grad), timed(theirs, grad)  # warm-up: allocations, first-call set-up
        for _ in range(args.rounds):
            times["ours"].append(timed(ours, grad))
            times["paddle"].append(timed(theirs, grad))
        ours_ms, paddle_ms = (1e3 * statistics.median(times[key]) for key in ("ours", "paddle"))
        print(f"{name}: ours {ours_ms:.2f} ms, Paddle's op {paddle_ms:.2f} ms, {paddle_ms / ours_ms:.2f}x")


if __name__ == "__main__":
    main()
