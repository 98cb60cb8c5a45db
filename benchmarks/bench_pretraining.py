"""Pretraining throughput on this machine: ours against PaddleNLP and HF transformers, interleaved in one run.

Every contender trains BERT-base at seq 128, micro-batch 8, 20 masked positions per sequence, fp32, on the
same random batch, with gradients clipped to a global norm of 1.0:

- ours:         run_pretraining.Trainer.step, the engine's own optimizer step (LAMB from optimizer.py);
- paddlenlp:    paddlenlp 2.8.1 BertForPretraining + BertPretrainingCriterion, paddle.optimizer.Lamb;
- paddlenlp-tuned: the same in a process given our process-level CPU settings (cpu_kernels: MKL's AVX
                kernels on AMD, freed memory kept for reuse), so that ours / paddlenlp-tuned is what the
                model code itself gains;
- transformers: HF BertForPreTraining on torch, MLM head gathered to the masked positions, torch AdamW
                (torch has no LAMB);
- matmul:       Paddle's fp32 GEMM rate at the forward GEMM shapes of one BERT-base layer (1024x768 by
                768x2304 / 768x768 / 768x3072, 1024x3072 by 3072x768), the denominator of model-FLOPs
                utilisation (MFU).

Each contender lives in its own worker process with the same thread count, builds its model once, warms up, and
then waits. The contenders then take turns, a few steps each, round after round (the order rotates every round; a
turn starts once the last one's threads have settled, workers.take_turn), so that a change in machine load hits
all of them alike. Per round the script prints every contender's median step, the ratios of ours to the others and
MFU; at the end the medians over rounds. On a shared machine compare the ratios, not the absolute figures. Besides
wall time it reports seq per CPU-second of the process (all its threads), which the other processes on the machine
disturb less.

When other processes keep the cores busy, a contender whose elementwise ops run on several threads
(torch) waits at every thread barrier for a descheduled thread, so with --threads 2 on a loaded machine
the transformers figure falls furthest; --threads 1 compares without that effect. MFU divides by the GEMM
rate of the same round, which the load moves as much as the step times.

    benchmarks/setup_peers.sh /work/peers && export PADDLEBERT_PEERS_DIR=/work/peers
    python benchmarks/bench_pretraining.py [--rounds 3] [--steps 2] [--threads 2] [--only ours,paddlenlp]
    python benchmarks/bench_pretraining.py --layers 2 --threads 1 --only ours,transformers   # quick look

The peers run in the venvs setup_peers.sh builds: --paddlenlp-python and --torch-python, by default under
$PADDLEBERT_PEERS_DIR.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import machine
import peers
import workers

ROOT = Path(__file__).resolve().parent.parent
BATCH, SEQ, MASKED_PER_SEQ = 8, 128, 20
HIDDEN, INTERMEDIATE, VOCAB = 768, 3072, 30522
TOKENS = BATCH * SEQ
# (rows, inner, columns) of the forward GEMMs of one BERT-base layer: fused QKV, attention output, FFN in, FFN out.
LAYER_GEMMS = ((TOKENS, HIDDEN, 3 * HIDDEN), (TOKENS, HIDDEN, HIDDEN), (TOKENS, HIDDEN, INTERMEDIATE),
               (TOKENS, INTERMEDIATE, HIDDEN))
CONTENDERS = ("ours", "paddlenlp", "paddlenlp-tuned", "transformers")
# The contenders that run in a peer's venv (peers.py), and which peer's.
PEER_CONTENDERS = {"paddlenlp": "paddlenlp", "paddlenlp-tuned": "paddlenlp", "transformers": "transformers"}


def bert_base_train_flops(layers: int) -> float:
    """Model FLOPs of one training step (backward = 2x forward) of BERT-base with the MLM head gathered.

    Counts the matrix products only (2 FLOPs per multiply-add): per layer the four projections and the two
    attention products, then the MLM transform and [H, V] decoder on the masked tokens, the pooler and NSP.
    """
    masked = BATCH * MASKED_PER_SEQ
    projections = sum(2 * m * k * n for m, k, n in LAYER_GEMMS)
    attention = 2 * (2 * BATCH * SEQ * SEQ * HIDDEN)  # Q K^T and P V over all heads
    head = 2 * masked * (HIDDEN * HIDDEN + HIDDEN * VOCAB) + 2 * BATCH * (HIDDEN * HIDDEN + 2 * HIDDEN)
    return 3.0 * (layers * (projections + attention) + head)


def random_batch(np):
    """One LDDL-style micro-batch: [B, S] ids, segments, mask, MLM labels (-1 = not masked), NSP labels."""
    rng = np.random.default_rng(0)
    input_ids = rng.integers(1000, VOCAB, (BATCH, SEQ)).astype("int64")
    token_type_ids = np.zeros((BATCH, SEQ), "int64")
    token_type_ids[:, SEQ // 2:] = 1
    masked_lm_labels = np.full((BATCH, SEQ), -1, "int64")
    for row in range(BATCH):
        positions = rng.choice(np.arange(1, SEQ), MASKED_PER_SEQ, replace=False)
        masked_lm_labels[row, positions] = rng.integers(1000, VOCAB, MASKED_PER_SEQ)
    return {
        "input_ids": input_ids,
        "token_type_ids": token_type_ids,
        "attention_mask": np.ones((BATCH, SEQ), "int64"),
        "masked_lm_labels": masked_lm_labels,
        "next_sentence_labels": rng.integers(0, 2, BATCH).astype("int64"),
    }


def gathered_targets(np, batch: dict):
    """Flat masked positions into the [B*S] tokens and their labels, as the gathered MLM heads take them."""
    flat_labels = batch["masked_lm_labels"].reshape(-1)
    positions = np.flatnonzero(flat_labels != -1).astype("int64")
    return positions, flat_labels[positions]


# ---------------------------------------------------------------------------------------------
# Workers: each builds one contender and returns a function that runs one training step
# ---------------------------------------------------------------------------------------------


def build_ours(threads: int, layers: int):
    import numpy as np

    sys.path.insert(0, str(ROOT))
    import run_pretraining
    import runtime

    runtime.configure_cpu_threads()
    runtime.apply_cpu_tweaks()  # as run_pretraining.py does on a CPU
    folder = tempfile.mkdtemp(prefix="bench_pretraining_")
    vocab = Path(folder) / "vocab.txt"
    vocab.write_text("[PAD]\n", encoding="utf-8")
    config = json.loads((ROOT / "bert_configs" / "bert-base-uncased.json").read_text(encoding="utf-8"))
    config_file = Path(folder) / "bert_config.json"
    config_file.write_text(json.dumps(dict(config, num_hidden_layers=layers)), encoding="utf-8")
    args = run_pretraining.parse_args([
        "--input-dir", folder, "--vocab-file", str(vocab), "--output-dir", folder,
        "--bert-model", "custom", "--config-file", str(config_file), "--phase1", "--max-steps", "1000000",
        "--batch-size", str(BATCH), "--max-seq-length", str(SEQ), "--max-predictions-per-seq", str(MASKED_PER_SEQ),
        "--max-grad-norm", "1.0",
    ])
    trainer = run_pretraining.Trainer(args, rank=0, world_size=1)
    batch = random_batch(np)
    return lambda: trainer.step([batch])


def build_paddlenlp_tuned(threads: int, layers: int):
    sys.path.insert(0, str(ROOT))
    import cpu_kernels

    cpu_kernels.use_fast_mkl_kernels()
    cpu_kernels.keep_freed_memory()
    return build_paddlenlp(threads, layers)


def build_paddlenlp(threads: int, layers: int):
    import numpy as np
    import paddle
    from paddlenlp.transformers import BertConfig, BertForPretraining, BertPretrainingCriterion

    paddle.base.core.set_num_threads(threads)
    paddle.seed(0)
    config = BertConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=layers, num_attention_heads=12,
                        intermediate_size=INTERMEDIATE)
    model = BertForPretraining(config)
    criterion = BertPretrainingCriterion(VOCAB)
    no_decay = {p.name for n, p in model.named_parameters() if "bias" in n or "norm" in n}
    optimizer = paddle.optimizer.Lamb(
        learning_rate=1e-4, lamb_weight_decay=0.01, parameters=model.parameters(),
        grad_clip=paddle.nn.ClipGradByGlobalNorm(1.0), exclude_from_weight_decay_fn=lambda p: p.name in no_decay,
    )
    batch = random_batch(np)
    positions, labels = gathered_targets(np, batch)

    def step():
        # PaddleNLP takes an additive [B, 1, 1, S] attention mask (0 = attend).
        attention_mask = (1.0 - paddle.to_tensor(batch["attention_mask"], "float32"))[:, None, None, :] * -1e4
        scores, nsp_scores = model(paddle.to_tensor(batch["input_ids"]), paddle.to_tensor(batch["token_type_ids"]),
                                   attention_mask=attention_mask, masked_positions=paddle.to_tensor(positions))
        loss = criterion(scores, nsp_scores, paddle.to_tensor(labels).reshape([-1, 1]),
                         paddle.to_tensor(batch["next_sentence_labels"]).reshape([-1, 1]), float(len(positions)))
        loss.backward()
        optimizer.step()
        optimizer.clear_grad()
        float(loss)

    return step


def build_transformers(threads: int, layers: int):
    import numpy as np
    import torch
    from transformers import BertConfig, BertForPreTraining

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(num_hidden_layers=layers, attn_implementation="sdpa"))
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    batch = random_batch(np)
    positions, labels = (torch.from_numpy(a) for a in gathered_targets(np, batch))

    def step():
        input_ids, token_type_ids, attention_mask, nsp = (
            torch.from_numpy(batch[key]) for key in ("input_ids", "token_type_ids", "attention_mask",
                                                     "next_sentence_labels"))
        sequence_output, pooled = model.bert(input_ids, token_type_ids=token_type_ids, attention_mask=attention_mask,
                                             return_dict=False)[:2]
        scores = model.cls.predictions(sequence_output.reshape(-1, HIDDEN)[positions])
        nsp_scores = model.cls.seq_relationship(pooled)
        loss = torch.nn.functional.cross_entropy(scores, labels) + torch.nn.functional.cross_entropy(nsp_scores, nsp)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        float(loss)

    return step


def build_matmul(threads: int, layers: int):
    import paddle

    sys.path.insert(0, str(ROOT))
    import cpu_kernels

    # The best rate Paddle's GEMM reaches here, with the process settings modeling.py makes.
    cpu_kernels.use_fast_mkl_kernels()
    cpu_kernels.keep_freed_memory()
    paddle.base.core.set_num_threads(threads)
    operands = [(paddle.randn([m, k]), paddle.randn([k, n])) for m, k, n in LAYER_GEMMS]

    def step():
        for _ in range(4):
            for a, b in operands:
                c = a @ b
        float(c[0, 0])

    return step


MATMUL_STEP_FLOPS = 4 * sum(2 * m * k * n for m, k, n in LAYER_GEMMS)
BUILDERS = {"ours": build_ours, "paddlenlp": build_paddlenlp, "paddlenlp-tuned": build_paddlenlp_tuned,
            "transformers": build_transformers,
            "matmul": build_matmul}


def worker_answers(kind: str, threads: int, layers: int, warmup: int):
    """Build and warm up the contender; the worker then answers {"steps": N} with the wall and CPU seconds
    of N training steps."""
    step = BUILDERS[kind](threads, layers)
    for _ in range(warmup):
        step()

    def answer(request: dict) -> dict:
        wall, cpu = [], []
        for _ in range(request["steps"]):
            wall_start, cpu_start = time.perf_counter(), time.process_time()
            step()
            cpu.append(time.process_time() - cpu_start)
            wall.append(time.perf_counter() - wall_start)
        return {"wall": wall, "cpu": cpu}

    return answer


def start_worker(kind: str, python: str, threads: int, layers: int, warmup: int) -> workers.WorkerProcess:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               PADDLEBERT_NUM_THREADS=str(threads))
    command = [python, __file__, "--worker", kind, "--threads", str(threads), "--layers", str(layers),
               "--warmup", str(warmup)]
    return workers.WorkerProcess(kind, command, env=env, cwd=str(ROOT))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2, help="CPU threads of every contender.")
    parser.add_argument("--rounds", type=int, default=3, help="Rounds in which every contender takes a turn.")
    parser.add_argument("--steps", type=int, default=2, help="Timed training steps per contender per round.")
    parser.add_argument("--layers", type=int, default=12,
                        help="Encoder layers of every model: 12 is BERT-base; fewer for quick profiling.")
    parser.add_argument("--warmup", type=int, default=2, help="Untimed steps after building each contender.")
    peers.add_contender_flags(parser, CONTENDERS, "paddlenlp", "transformers")
    parser.add_argument("--worker", choices=sorted(BUILDERS), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.only = peers.chosen_contenders(parser, args, CONTENDERS)
    if min(args.threads, args.rounds, args.steps, args.layers) < 1 or args.warmup < 0:
        parser.error("--threads, --rounds, --steps and --layers must be at least 1, --warmup at least 0")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker:
        workers.serve(lambda: worker_answers(args.worker, args.threads, args.layers, args.warmup))
        return
    machine.print_header()
    names = args.only
    pythons = peers.peer_pythons(args, PEER_CONTENDERS, names, "bench_pretraining.py")
    print(f"load average {os.getloadavg()[0]:.1f}; building contenders ({args.threads} threads each)", flush=True)
    pool = {}
    try:
        for name in ["matmul", *names]:
            pool[name] = start_worker(name, pythons.get(name, sys.executable), args.threads, args.layers,
                                      args.warmup)
        report(pool, names, args.rounds, args.steps, args.layers)
    finally:
        for worker in pool.values():
            worker.close()
    print(workers.warning_report(pool.values()))


def report(pool: dict, names: list[str], rounds: int, steps: int, layers: int) -> None:
    step_flops = bert_base_train_flops(layers)
    print(f"{layers} layers, model FLOPs per step {step_flops / 1e9:.0f} G; {steps} steps per contender per round")
    medians = {name: {"wall": [], "cpu": []} for name in ["matmul", *names]}
    # ours / each other contender, per round; none without ours
    ratios = {other: [] for other in names if other != "ours" and "ours" in names}
    loads = []
    order = ["matmul", *names]
    for round_index in range(rounds):
        loads.append(os.getloadavg()[0])
        turn = order[round_index % len(order):] + order[:round_index % len(order)]
        for name in turn:
            times = workers.take_turn(pool[name], {"steps": steps})
            for clock in ("wall", "cpu"):
                medians[name][clock].append(statistics.median(times[clock]))
        gemm_rate = MATMUL_STEP_FLOPS / medians["matmul"]["wall"][-1]
        line = [f"round {round_index + 1}: load {loads[-1]:.1f}, matmul {gemm_rate / 1e9:.0f} GFLOP/s"]
        for name in names:
            seconds = medians[name]["wall"][-1]
            line.append(f"{name} {BATCH / seconds:.2f} seq/s (MFU {step_flops / seconds / gemm_rate:.0%})")
        for other in ratios:
            ratios[other].append(medians[other]["wall"][-1] / medians["ours"]["wall"][-1])
            line.append(f"ours/{other} {ratios[other][-1]:.2f}x")
        print(", ".join(line), flush=True)

    print(f"\nmedians over {rounds} rounds (load average {statistics.median(loads):.1f}, "
          f"{min(loads):.1f}-{max(loads):.1f}; now {os.getloadavg()[0]:.1f}):")
    gemm_wall = MATMUL_STEP_FLOPS / statistics.median(medians["matmul"]["wall"])
    gemm_cpu = MATMUL_STEP_FLOPS / statistics.median(medians["matmul"]["cpu"])
    print(f"{'matmul':>15}: {gemm_wall / 1e9:6.1f} GFLOP/s wall, {gemm_cpu / 1e9:6.1f} GFLOP per CPU-second")
    for name in names:
        wall, cpu = statistics.median(medians[name]["wall"]), statistics.median(medians[name]["cpu"])
        print(f"{name:>15}: {BATCH / wall:6.2f} seq/s, MFU {step_flops / wall / gemm_wall:4.0%}; "
              f"{BATCH / cpu:6.2f} seq per CPU-second, MFU by CPU time {step_flops / cpu / gemm_cpu:4.0%}")
    for other, values in ratios.items():
        cpu_ratio = statistics.median(medians[other]["cpu"]) / statistics.median(medians["ours"]["cpu"])
        print(f"ours / {other}: {statistics.median(values):.2f}x by wall time (per round: "
              f"{', '.join(f'{v:.2f}' for v in values)}); {cpu_ratio:.2f}x by CPU time")


if __name__ == "__main__":
    main()
