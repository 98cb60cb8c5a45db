"""Pretraining throughput on this machine: ours against PaddleNLP and HF transformers, interleaved in one run.

Every contender trains one BERT shape (--config: bert-base by default, or the budget sizes tiny, mini and small,
all with the 30,522-entry vocabulary) at seq 128, 20 masked positions per sequence, fp32, on the same random
batch (micro-batch 8 for base, 64 for the budget sizes, as their presets train; --batch-size sets another), with
gradients clipped to a global norm of 1.0:

- ours:         run_pretraining.Trainer.step, the engine's own optimizer step (LAMB from optimizer.py);
- paddlenlp:    paddlenlp 2.8.1 BertForPretraining + BertPretrainingCriterion, paddle.optimizer.Lamb;
- paddlenlp-tuned: the same in a process given our process-level CPU settings (cpu_kernels: MKL's AVX
                kernels on AMD, freed memory kept for reuse), so that ours / paddlenlp-tuned is what the
                model code itself gains;
- transformers: HF BertForPreTraining on torch, MLM head gathered to the masked positions, torch AdamW
                (torch has no LAMB);
- transformers-compile: the same training step through torch.compile (Inductor's default mode), compiled
                during the warmup steps;
- matmul:       Paddle's fp32 GEMM rate at the forward GEMM shapes of one encoder layer of the shape (tokens x H
                by H x 3H / H x H / H x I, tokens x I by I x H), the denominator of model-FLOPs utilisation (MFU).

--profile N then times the parts of our step apart, N times each (a CPU runs Paddle's ops as they are called, so a
clock around them times them): the encoder's forward and backward, the heads' with the loss, the optimizer's
update, and the rest of the step; for the encoder and the heads it adds what their matrix products would take at
the matmul contender's rate, the rest of each being its elementwise ops.

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
    python benchmarks/bench_pretraining.py --config tiny --only ours,transformers,transformers-compile --profile 5
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
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import machine
import peers
import workers

ROOT = Path(__file__).resolve().parent.parent
SEQ, MASKED_PER_SEQ = 128, 20
# --config: the bert_configs file of each size, and the micro-batch it trains with (bert-base: NVIDIA's phase-1
# micro-batch on one GPU scaled to a CPU; the budget sizes: the cpu_budget_* presets' batch).
CONFIGS = {"tiny": ("bert-tiny-uncased.json", 64), "tiny-8k-vocab": ("bert-tiny-8k-vocab.json", 64),
           "mini": ("bert-mini-uncased.json", 64), "small": ("bert-small-uncased.json", 64),
           "base": ("bert-base-uncased.json", 8)}
CONTENDERS = ("ours", "paddlenlp", "paddlenlp-tuned", "transformers", "transformers-compile")
# The contenders that run in a peer's venv (peers.py), and which peer's.
PEER_CONTENDERS = {"paddlenlp": "paddlenlp", "paddlenlp-tuned": "paddlenlp", "transformers": "transformers",
                   "transformers-compile": "transformers"}


@dataclass(frozen=True)
class Shape:
    """The model every contender builds and the micro-batch it trains on."""

    config: str  # a key of CONFIGS
    layers: int
    batch: int

    @cached_property  # read once: the FLOP counts ask for it many times
    def architecture(self) -> dict:
        """The config file's values, with `layers` encoder layers."""
        values = json.loads((ROOT / "bert_configs" / CONFIGS[self.config][0]).read_text(encoding="utf-8"))
        return dict(values, num_hidden_layers=self.layers)

    @property
    def hidden(self) -> int:
        return self.architecture["hidden_size"]

    @property
    def vocab(self) -> int:
        return self.architecture["vocab_size"]

    @property
    def layer_gemms(self) -> tuple[tuple[int, int, int], ...]:
        """(rows, inner, columns) of one encoder layer's forward GEMMs: fused QKV, attention output, FFN in, out."""
        tokens, hidden, intermediate = self.batch * SEQ, self.hidden, self.architecture["intermediate_size"]
        return ((tokens, hidden, 3 * hidden), (tokens, hidden, hidden), (tokens, hidden, intermediate),
                (tokens, intermediate, hidden))

    def train_flops(self) -> float:
        """Model FLOPs of one training step (backward = 2x forward) with the MLM head gathered: the matrix
        products only (2 FLOPs per multiply-add), of the encoder and of the heads."""
        return self.encoder_flops() + self.head_flops()

    def encoder_flops(self) -> float:
        """Per layer the four projections and the two attention products, forward and backward."""
        projections = sum(2 * m * k * n for m, k, n in self.layer_gemms)
        attention = 2 * (2 * self.batch * SEQ * SEQ * self.hidden)  # Q K^T and P V over all heads
        return 3.0 * self.layers * (projections + attention)

    def head_flops(self) -> float:
        """The MLM transform and [H, V] decoder on the masked tokens, the pooler and NSP, forward and backward."""
        hidden, masked = self.hidden, self.batch * MASKED_PER_SEQ
        mlm = 2 * masked * (hidden * hidden + hidden * self.vocab)
        return 3.0 * (mlm + 2 * self.batch * (hidden * hidden + 2 * hidden))

    def matmul_flops(self) -> float:
        """FLOPs of one step of the matmul contender: four passes over layer_gemms."""
        return 4 * sum(2 * m * k * n for m, k, n in self.layer_gemms)


def random_batch(np, batch: int, vocab: int):
    """One LDDL-style micro-batch of ids below `vocab`: [B, S] ids, segments, mask, MLM labels (-1 = not masked),
    NSP labels."""
    rng = np.random.default_rng(0)
    input_ids = rng.integers(1000, vocab, (batch, SEQ)).astype("int64")
    token_type_ids = np.zeros((batch, SEQ), "int64")
    token_type_ids[:, SEQ // 2:] = 1
    masked_lm_labels = np.full((batch, SEQ), -1, "int64")
    for row in range(batch):
        positions = rng.choice(np.arange(1, SEQ), MASKED_PER_SEQ, replace=False)
        masked_lm_labels[row, positions] = rng.integers(1000, vocab, MASKED_PER_SEQ)
    return {
        "input_ids": input_ids,
        "token_type_ids": token_type_ids,
        "attention_mask": np.ones((batch, SEQ), "int64"),
        "masked_lm_labels": masked_lm_labels,
        "next_sentence_labels": rng.integers(0, 2, batch).astype("int64"),
    }


def gathered_targets(np, batch: dict):
    """Flat masked positions into the [B*S] tokens and their labels, as the gathered MLM heads take them."""
    flat_labels = batch["masked_lm_labels"].reshape(-1)
    positions = np.flatnonzero(flat_labels != -1).astype("int64")
    return positions, flat_labels[positions]


# ---------------------------------------------------------------------------------------------
# Workers: each builds one contender and returns a function that runs one training step
# ---------------------------------------------------------------------------------------------


def build_ours(threads: int, shape: Shape):
    import numpy as np

    sys.path.insert(0, str(ROOT))
    import run_pretraining
    from training import runtime

    runtime.configure_cpu_threads()
    runtime.apply_cpu_tweaks()  # as run_pretraining.py does on a CPU
    folder = tempfile.mkdtemp(prefix="bench_pretraining_")
    vocab = Path(folder) / "vocab.txt"
    vocab.write_text("[PAD]\n", encoding="utf-8")
    config_file = Path(folder) / "bert_config.json"
    config_file.write_text(json.dumps(shape.architecture), encoding="utf-8")
    args = run_pretraining.parse_args([
        "--input-dir", folder, "--vocab-file", str(vocab), "--output-dir", folder,
        "--bert-model", "custom", "--config-file", str(config_file), "--phase1", "--max-steps", "1000000",
        "--batch-size", str(shape.batch), "--max-seq-length", str(SEQ),
        "--max-predictions-per-seq", str(MASKED_PER_SEQ), "--max-grad-norm", "1.0",
    ])
    trainer = run_pretraining.Trainer(args, rank=0, world_size=1)
    batch = random_batch(np, shape.batch, shape.vocab)
    def step():
        trainer.step([batch])

    step.parts = lambda: profile_parts(trainer, batch)  # what --profile asks of the ours worker
    return step


def profile_parts(trainer, batch: dict) -> dict[str, float]:
    """Seconds of each part of our training step, each timed apart on the same batch (a CPU runs Paddle's ops as
    they are called, so a clock around them times them): the encoder's forward and backward, the pretraining
    heads' with the loss (on the encoder's output, detached), the optimizer's update, and the whole step."""
    import numpy as np
    import paddle

    model, criterion = trainer.model, trainer.criterion
    positions, labels = (paddle.to_tensor(array) for array in gathered_targets(np, batch))
    inputs = [paddle.to_tensor(batch[name]) for name in ("input_ids", "token_type_ids", "attention_mask")]
    nsp_labels = paddle.to_tensor(batch["next_sentence_labels"])

    def timed(work) -> float:
        began = time.perf_counter()
        work()
        return time.perf_counter() - began

    def encoder():
        sequence_output, pooled_output = model.bert(*inputs)
        (sequence_output.sum() + pooled_output.sum()).backward()

    sequence_output, pooled_output = (output.detach() for output in model.bert(*inputs))
    sequence_output.stop_gradient = pooled_output.stop_gradient = False

    def heads():
        scores, nsp_scores = model.cls(sequence_output, pooled_output, model.bert.embeddings.word_embeddings.weight,
                                       positions)
        criterion(scores, nsp_scores, labels, nsp_labels)[0].backward()

    parts = {"encoder": timed(encoder)}
    trainer.optimizer.clear_grad()
    parts["heads and loss"] = timed(heads)
    trainer.optimizer.clear_grad()
    encoder()
    heads()  # every parameter has its gradient now, as before an update
    parts["optimizer"] = timed(trainer.optimizer.step)
    trainer.optimizer.clear_grad()
    parts["step"] = timed(lambda: trainer.step([batch]))
    return parts


def build_paddlenlp_tuned(threads: int, shape: Shape):
    sys.path.insert(0, str(ROOT))
    from kernels import cpu_kernels

    cpu_kernels.use_fast_mkl_kernels()
    cpu_kernels.keep_freed_memory()
    return build_paddlenlp(threads, shape)


def build_paddlenlp(threads: int, shape: Shape):
    import numpy as np
    import paddle
    from paddlenlp.transformers import BertConfig, BertForPretraining, BertPretrainingCriterion

    paddle.base.core.set_num_threads(threads)
    paddle.seed(0)
    values = shape.architecture
    config = BertConfig(**{key: values[key] for key in ARCHITECTURE_KEYS})
    model = BertForPretraining(config)
    criterion = BertPretrainingCriterion(shape.vocab)
    no_decay = {p.name for n, p in model.named_parameters() if "bias" in n or "norm" in n}
    optimizer = paddle.optimizer.Lamb(
        learning_rate=1e-4, lamb_weight_decay=0.01, parameters=model.parameters(),
        grad_clip=paddle.nn.ClipGradByGlobalNorm(1.0), exclude_from_weight_decay_fn=lambda p: p.name in no_decay,
    )
    batch = random_batch(np, shape.batch, shape.vocab)
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


# The config keys that fix the network, which every contender builds its model from.
ARCHITECTURE_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                     "max_position_embeddings", "type_vocab_size")


def build_transformers(threads: int, shape: Shape, compile_step: bool = False):
    import numpy as np
    import torch
    from transformers import BertConfig, BertForPreTraining

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    values = shape.architecture
    model = BertForPreTraining(BertConfig(**{key: values[key] for key in ARCHITECTURE_KEYS},
                                          attn_implementation="sdpa"))
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    batch = random_batch(np, shape.batch, shape.vocab)
    positions, labels = (torch.from_numpy(a) for a in gathered_targets(np, batch))
    input_ids, token_type_ids, attention_mask, nsp = (
        torch.from_numpy(batch[key]) for key in ("input_ids", "token_type_ids", "attention_mask",
                                                 "next_sentence_labels"))
    hidden = shape.hidden

    def forward_backward():
        sequence_output, pooled = model.bert(input_ids, token_type_ids=token_type_ids, attention_mask=attention_mask,
                                             return_dict=False)[:2]
        scores = model.cls.predictions(sequence_output.reshape(-1, hidden)[positions])
        nsp_scores = model.cls.seq_relationship(pooled)
        loss = torch.nn.functional.cross_entropy(scores, labels) + torch.nn.functional.cross_entropy(nsp_scores, nsp)
        loss.backward()
        return loss

    # Inductor compiles the forward and backward graphs at the first call (the warmup steps); the clipping and
    # optimizer step stay eager, as torch.compile's own training examples leave them.
    run = torch.compile(forward_backward) if compile_step else forward_backward

    def step():
        loss = run()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        float(loss)

    return step


def build_transformers_compile(threads: int, shape: Shape):
    return build_transformers(threads, shape, compile_step=True)


def build_matmul(threads: int, shape: Shape):
    import paddle

    sys.path.insert(0, str(ROOT))
    from kernels import cpu_kernels

    # The best rate Paddle's GEMM reaches here, with the process settings modeling.py makes.
    cpu_kernels.use_fast_mkl_kernels()
    cpu_kernels.keep_freed_memory()
    paddle.base.core.set_num_threads(threads)
    operands = [(paddle.randn([m, k]), paddle.randn([k, n])) for m, k, n in shape.layer_gemms]

    def step():
        for _ in range(4):
            for a, b in operands:
                c = a @ b
        float(c[0, 0])

    return step


BUILDERS = {"ours": build_ours, "paddlenlp": build_paddlenlp, "paddlenlp-tuned": build_paddlenlp_tuned,
            "transformers": build_transformers, "transformers-compile": build_transformers_compile,
            "matmul": build_matmul}


def worker_answers(kind: str, threads: int, shape: Shape, warmup: int):
    """Build and warm up the contender; the worker then answers {"steps": N} with the wall and CPU seconds
    of N training steps."""
    step = BUILDERS[kind](threads, shape)
    for _ in range(warmup):
        step()

    def answer(request: dict) -> dict:
        if "profile" in request:  # ours only: the parts of its step, each the median of that many timings
            timings = [step.parts() for _ in range(request["profile"])]
            return {part: statistics.median(timing[part] for timing in timings) for part in timings[0]}
        wall, cpu = [], []
        for _ in range(request["steps"]):
            wall_start, cpu_start = time.perf_counter(), time.process_time()
            step()
            cpu.append(time.process_time() - cpu_start)
            wall.append(time.perf_counter() - wall_start)
        return {"wall": wall, "cpu": cpu}

    return answer


def start_worker(kind: str, python: str, threads: int, shape: Shape, warmup: int) -> workers.WorkerProcess:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               PADDLEBERT_NUM_THREADS=str(threads))
    command = [python, __file__, "--worker", kind, "--threads", str(threads), "--config", shape.config,
               "--layers", str(shape.layers), "--batch-size", str(shape.batch), "--warmup", str(warmup)]
    return workers.WorkerProcess(kind, command, env=env, cwd=str(ROOT))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2, help="CPU threads of every contender.")
    parser.add_argument("--rounds", type=int, default=3, help="Rounds in which every contender takes a turn.")
    parser.add_argument("--steps", type=int, default=2, help="Timed training steps per contender per round.")
    parser.add_argument("--config", choices=sorted(CONFIGS), default="base",
                        help="The model every contender trains: a bert_configs file (CONFIGS); tiny-8k-vocab is "
                             "bert-tiny with cpu_budget_tiny_8k_vocab's 8,192-entry vocabulary.")
    parser.add_argument("--layers", type=int, default=None,
                        help="Encoder layers of every model (default: the config's); fewer for quick profiling.")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="Sequences per step (default: 8 for base, 64 for the budget sizes).")
    parser.add_argument("--warmup", type=int, default=2,
                        help="Untimed steps after building each contender (transformers-compile compiles in them).")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="after the rounds, time the parts of our step apart, N times each, and print where its "
                             "time goes (encoder, heads and loss, optimizer, the rest); 0: not")
    peers.add_contender_flags(parser, CONTENDERS, "paddlenlp", "transformers")
    parser.add_argument("--worker", choices=sorted(BUILDERS), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.only = peers.chosen_contenders(parser, args, CONTENDERS)
    config_file, batch = CONFIGS[args.config]
    layers = args.layers
    if layers is None:
        layers = json.loads((ROOT / "bert_configs" / config_file).read_text(encoding="utf-8"))["num_hidden_layers"]
    for flag, value in (("--threads", args.threads), ("--rounds", args.rounds), ("--steps", args.steps),
                        ("--layers", layers), ("--batch-size", args.batch_size or batch)):
        if value < 1:
            parser.error(f"{flag} {value}: must be at least 1")
    if args.profile < 0 or (args.profile and "ours" not in args.only):
        parser.error(f"--profile {args.profile}: must be at least 0, and profiles ours, which --only must name")
    compiles = args.worker == "transformers-compile" or (not args.worker and "transformers-compile" in args.only)
    if args.warmup < 0 or (compiles and args.warmup < 1):
        parser.error(f"--warmup {args.warmup}: must be at least 0, and at least 1 with transformers-compile "
                     "(it compiles in the first step)")
    args.shape = Shape(args.config, layers, args.batch_size or batch)
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker:
        workers.serve(lambda: worker_answers(args.worker, args.threads, args.shape, args.warmup))
        return
    machine.print_header()
    names = args.only
    pythons = peers.peer_pythons(args, PEER_CONTENDERS, names, "bench_pretraining.py")
    print(f"load average {os.getloadavg()[0]:.1f}; building contenders ({args.threads} threads each)", flush=True)
    pool = {}
    try:
        for name in ["matmul", *names]:
            pool[name] = start_worker(name, pythons.get(name, sys.executable), args.threads, args.shape,
                                      args.warmup)
        report(pool, names, args.rounds, args.steps, args.shape, args.profile)
    finally:
        for worker in pool.values():
            worker.close()
    print(workers.warning_report(pool.values()))


def report(pool: dict, names: list[str], rounds: int, steps: int, shape: Shape, profile: int = 0) -> None:
    step_flops = shape.train_flops()
    print(f"bert-{shape.config}, {shape.layers} layers, batch {shape.batch}, model FLOPs per step "
          f"{step_flops / 1e9:.1f} G; {steps} steps per contender per round")
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
        gemm_rate = shape.matmul_flops() / medians["matmul"]["wall"][-1]
        line = [f"round {round_index + 1}: load {loads[-1]:.1f}, matmul {gemm_rate / 1e9:.0f} GFLOP/s"]
        for name in names:
            seconds = medians[name]["wall"][-1]
            line.append(f"{name} {shape.batch / seconds:.2f} seq/s (MFU {step_flops / seconds / gemm_rate:.0%})")
        for other in ratios:
            ratios[other].append(medians[other]["wall"][-1] / medians["ours"]["wall"][-1])
            line.append(f"ours/{other} {ratios[other][-1]:.2f}x")
        print(", ".join(line), flush=True)

    print(f"\nmedians over {rounds} rounds (load average {statistics.median(loads):.1f}, "
          f"{min(loads):.1f}-{max(loads):.1f}; now {os.getloadavg()[0]:.1f}):")
    gemm_wall = shape.matmul_flops() / statistics.median(medians["matmul"]["wall"])
    gemm_cpu = shape.matmul_flops() / statistics.median(medians["matmul"]["cpu"])
    print(f"{'matmul':>20}: {gemm_wall / 1e9:6.1f} GFLOP/s wall, {gemm_cpu / 1e9:6.1f} GFLOP per CPU-second")
    for name in names:
        wall, cpu = statistics.median(medians[name]["wall"]), statistics.median(medians[name]["cpu"])
        print(f"{name:>20}: {shape.batch / wall:6.2f} seq/s, MFU {step_flops / wall / gemm_wall:4.0%}; "
              f"{shape.batch / cpu:6.2f} seq per CPU-second, MFU by CPU time {step_flops / cpu / gemm_cpu:4.0%}")
    for other, values in ratios.items():
        cpu_ratio = statistics.median(medians[other]["cpu"]) / statistics.median(medians["ours"]["cpu"])
        print(f"ours / {other}: {statistics.median(values):.2f}x by wall time (per round: "
              f"{', '.join(f'{v:.2f}' for v in values)}); {cpu_ratio:.2f}x by CPU time")
    if profile and "ours" in names:
        print_profile(workers.take_turn(pool["ours"], {"profile": profile}), shape, gemm_wall)


def print_profile(parts: dict[str, float], shape: Shape, gemm_rate: float) -> None:
    """Where our step's time goes: each part's share of the step, and for the encoder and the heads the time their
    matrix products would take at the matmul contender's rate (the rest of a part is its elementwise ops:
    LayerNorm, GELU, softmax, dropout, the loss). "other": the step's remainder (gradient clipping, the loss
    statistics, Python)."""
    gemm_flops = {"encoder": shape.encoder_flops(), "heads and loss": shape.head_flops()}
    step = parts["step"]
    other = step - sum(parts[name] for name in ("encoder", "heads and loss", "optimizer"))
    print(f"\nwhere ours spends its step ({step * 1e3:.0f} ms, each part timed apart, median of the timings):")
    for name in ("encoder", "heads and loss", "optimizer"):
        line = f"{name:>15}: {parts[name] * 1e3:7.1f} ms ({parts[name] / step:4.0%})"
        if name in gemm_flops:
            gemm = gemm_flops[name] / gemm_rate
            line += (f"; its matrix products {gemm * 1e3:.1f} ms at the matmul rate, the rest "
                     f"{(parts[name] - gemm) * 1e3:.1f} ms")
        print(line)
    print(f"{'other':>15}: {other * 1e3:7.1f} ms ({other / step:4.0%})")


if __name__ == "__main__":
    main()
