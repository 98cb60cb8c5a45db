"""Pretraining throughput on this machine: ours against PaddleNLP (and HF transformers) in one session.

Every model trains BERT-base at seq 128, micro-batch 8, 20 masked positions per sequence, fp32,
with LAMB, on the same random batch. Each runs in its own subprocess with the same thread count,
one after the other, so the figures share the machine's state. Model-FLOPs utilisation (MFU) is
model FLOPs per second divided by Paddle's fp32 matmul rate at BERT-base GEMM shapes, measured in
the same session.

    python benchmarks/bench_pretraining.py [--threads 2] [--steps 10] [--paddlenlp-python VENV/bin/python]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BATCH, SEQ, MASKED_PER_SEQ = 8, 128, 20


def bert_base_train_flops(batch: int, seq: int, masked: int) -> float:
    """FLOPs of one training step (forward + backward = 3x forward) of BERT-base with the gathered MLM head."""
    hidden, layers, inter, vocab = 768, 12, 3072, 30522
    tokens = batch * seq
    per_layer = 2 * tokens * (4 * hidden * hidden + 2 * hidden * inter) + 2 * 2 * batch * seq * seq * hidden
    head = 2 * masked * (hidden * hidden + hidden * vocab) + 2 * batch * hidden * hidden
    return 3.0 * (layers * per_layer + head)


def run_worker(kind: str, python: str, threads: int, steps: int, warmup: int) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), PADDLEBERT_NUM_THREADS=str(threads),
               MKL_NUM_THREADS=str(threads))
    command = [python, __file__, "--worker", kind, "--threads", str(threads), "--steps", str(steps),
               "--warmup", str(warmup)]
    result = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    for line in result.stdout.splitlines()[::-1]:
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"{kind} worker failed:\n{result.stderr[-3000:]}")


def random_batch(np, vocab: int = 30522):
    rng = np.random.default_rng(0)
    input_ids = rng.integers(1000, vocab, (BATCH, SEQ)).astype("int64")
    token_type_ids = np.zeros((BATCH, SEQ), "int64")
    token_type_ids[:, SEQ // 2:] = 1
    positions = np.stack([np.sort(rng.choice(np.arange(1, SEQ), MASKED_PER_SEQ, replace=False)) for _ in range(BATCH)])
    flat_positions = (positions + np.arange(BATCH)[:, None] * SEQ).reshape(-1).astype("int64")
    labels = rng.integers(1000, vocab, flat_positions.shape).astype("int64")
    nsp = rng.integers(0, 2, BATCH).astype("int64")
    return input_ids, token_type_ids, flat_positions, labels, nsp


def time_steps(step, steps: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return times


def worker_ours(steps: int, warmup: int) -> list[float]:
    import numpy as np
    import paddle

    sys.path.insert(0, str(ROOT))
    import runtime
    from loss import BertPretrainingCriterion
    from modeling import BertConfig, BertForPretraining

    runtime.configure_cpu_threads()
    paddle.seed(0)
    config = BertConfig.from_json_file(str(ROOT / "bert_configs" / "bert-base-uncased.json"))
    model = BertForPretraining(config)
    criterion = BertPretrainingCriterion()
    optimizer = paddle.optimizer.Lamb(learning_rate=1e-4, parameters=model.parameters())
    input_ids, token_type_ids, positions, labels, nsp = (paddle.to_tensor(a) for a in random_batch(np))
    attention_mask = paddle.ones_like(input_ids)

    def step():
        scores, nsp_scores = model(input_ids, token_type_ids, attention_mask, positions)
        loss, _, _ = criterion(scores, nsp_scores, labels, nsp)
        loss.backward()
        optimizer.step()
        optimizer.clear_grad()
        float(loss)

    return time_steps(step, steps, warmup)


def worker_paddlenlp(steps: int, warmup: int) -> list[float]:
    import numpy as np
    import paddle
    from paddlenlp.transformers import BertConfig, BertForPretraining, BertPretrainingCriterion

    paddle.seed(0)
    config = BertConfig(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                        intermediate_size=3072)
    model = BertForPretraining(config)
    criterion = BertPretrainingCriterion(30522)
    optimizer = paddle.optimizer.Lamb(learning_rate=1e-4, parameters=model.parameters())
    input_ids, token_type_ids, positions, labels, nsp = (paddle.to_tensor(a) for a in random_batch(np))
    attention_mask = paddle.ones([BATCH, 1, 1, SEQ])

    def step():
        scores, nsp_scores = model(input_ids, token_type_ids, attention_mask=attention_mask,
                                   masked_positions=positions)
        loss = criterion(scores, nsp_scores, labels.reshape([-1, 1]), nsp.reshape([-1, 1]), float(BATCH * MASKED_PER_SEQ))
        loss.backward()
        optimizer.step()
        optimizer.clear_grad()
        float(loss)

    return time_steps(step, steps, warmup)


def worker_transformers(steps: int, warmup: int) -> list[float]:
    import numpy as np
    import torch
    from transformers import BertConfig, BertForPreTraining

    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(attn_implementation="sdpa"))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    input_ids, token_type_ids, positions, labels, nsp = (torch.from_numpy(a) for a in random_batch(np))

    def step():
        sequence_output, pooled = model.bert(input_ids, token_type_ids=token_type_ids, return_dict=False)[:2]
        gathered = sequence_output.reshape(-1, 768)[positions]
        scores = model.cls.predictions(gathered)
        nsp_scores = model.cls.seq_relationship(pooled)
        loss = torch.nn.functional.cross_entropy(scores, labels) + torch.nn.functional.cross_entropy(nsp_scores, nsp)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        float(loss)

    return time_steps(step, steps, warmup)


def worker_matmul(steps: int, warmup: int) -> list[float]:
    import paddle

    sys.path.insert(0, str(ROOT))
    import runtime

    runtime.configure_cpu_threads()
    a, b = paddle.randn([1024, 768]), paddle.randn([768, 3072])

    def step():
        for _ in range(10):
            c = a @ b
        float(c[0, 0])

    return time_steps(step, steps, warmup)


WORKERS = {"ours": worker_ours, "paddlenlp": worker_paddlenlp, "transformers": worker_transformers,
           "matmul": worker_matmul}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--paddlenlp-python", default="/work/pnlp-venv/bin/python",
                        help="a Python with paddlenlp 2.8.1 installed (skipped if absent)")
    parser.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        times = WORKERS[args.worker](args.steps, args.warmup)
        print(json.dumps({"median_s": statistics.median(times), "times": times}))
        return

    matmul = run_worker("matmul", sys.executable, args.threads, args.steps, args.warmup)
    gemm_flops = 10 * 2 * 1024 * 768 * 3072 / matmul["median_s"]
    step_flops = bert_base_train_flops(BATCH, SEQ, BATCH * MASKED_PER_SEQ)
    print(f"paddle fp32 matmul 1024x768 @ 768x3072, {args.threads} threads: {gemm_flops / 1e9:.1f} GFLOP/s")
    results = {"ours": run_worker("ours", sys.executable, args.threads, args.steps, args.warmup)}
    if Path(args.paddlenlp_python).exists():
        results["paddlenlp"] = run_worker("paddlenlp", args.paddlenlp_python, args.threads, args.steps, args.warmup)
    try:
        import transformers  # noqa: F401

        results["transformers"] = run_worker("transformers", sys.executable, args.threads, args.steps, args.warmup)
    except ImportError:
        print("transformers not installed: skipping the torch figure")
    for name, result in results.items():
        seq_per_s = BATCH / result["median_s"]
        mfu = step_flops / result["median_s"] / gemm_flops
        ratio = " ".join(f"{seq_per_s / (BATCH / other['median_s']):.2f}x {other_name}"
                         for other_name, other in results.items() if other_name != name)
        print(f"{name:>12}: {seq_per_s:.2f} seq/s  MFU {mfu:.0%}  ({ratio})")


if __name__ == "__main__":
    main()
