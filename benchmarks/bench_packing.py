"""Sequence packing on this machine: real (non-pad) tokens per second of run_pretraining's training step, with and
without --pack-sequences, on phase-1 (seq 128) and phase-2 (seq 512) shards made from WikiText-2, in one run.

Shards: lddl_preprocess.py on ../shared/data/wikitext-2/wiki.test.raw (converted to LDDL's input by corpus.py),
static masking, duplicate factor 2, seed 42, no binning (two samples of a bin narrower than half the sequence fill
more than a row, so binned shards leave packing little to do), built once into --work-dir and reused.

For each phase two run_pretraining.Trainers are built (BERT-base by default, fp32, LAMB, the CPU kernels), the
second with --pack-sequences, each with its own loader over the same shards and seed, so both train on the same
samples in the same order. They take turns, --steps steps each, round after round, the order flipping every round
so that a change in machine load hits both alike. A loader batch is fetched outside the timing; the packing itself
(inside Trainer.step) is timed. Real tokens are the ones of the unpacked batches, the same for both. Per round the
script prints each side's real tokens/s and padding fraction (of the rows the model computes) and packed /
unpacked; at the end the medians over the rounds, and one JSON line. Packing removes padding and nothing else, so
where the step's cost grows with the token slots (the projections and feed-forward layers), packed/unpacked is
near the slots ratio (1 - packed padding) / (1 - unpacked padding), printed beside it.

    python benchmarks/bench_packing.py [--rounds 3] [--steps 3] [--threads 2] [--phases 1,2]
    python benchmarks/bench_packing.py --config-file bert_configs/bert-tiny-uncased.json --rounds 1 --steps 1  # smoke
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import machine

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


# Sequence length and masked positions per sequence of NVIDIA's two phases; micro-batch sizes that fit a CPU step
# into seconds while giving first-fit-decreasing several samples to combine.
PHASES = {1: {"seq": 128, "predictions": 20, "batch": 32}, 2: {"seq": 512, "predictions": 80, "batch": 8}}


def build_shards(wikitext: Path, vocab: Path, work_dir: Path, seq_length: int, workers: int) -> Path:
    """WikiText-2's phase shards at this sequence length (made by lddl_preprocess.py unless already there)."""
    from corpus import convert_wikitext_to_lddl

    shards = work_dir / f"wikitext2-test-seq{seq_length}"
    if (shards / ".num_samples.json").is_file():
        return shards
    source = work_dir / "source"
    if not (source / "en" / "0.txt").is_file():
        convert_wikitext_to_lddl(wikitext, source)
    print(f"building {shards} with lddl_preprocess.py", flush=True)
    subprocess.run([sys.executable, str(ROOT / "lddl_preprocess.py"), "--input", str(source), "--vocab-file",
                    str(vocab), "--output-dir", str(shards), "--max-seq-length", str(seq_length),
                    "--duplicate-factor", "2", "--seed", "42", "--masking", "--num-shards", "2",
                    "--num-workers", str(workers)], check=True, stdout=subprocess.DEVNULL)
    return shards


class Contender:
    """A Trainer, packed or not, and its own loader; `run` times its steps."""

    def __init__(self, packed: bool, shards: Path, vocab: Path, config_file: Path, phase: int, batch_size: int,
                 output: str):
        import run_pretraining

        self.name = "packed" if packed else "unpacked"
        settings = PHASES[phase]
        args = run_pretraining.parse_args([
            "--input-dir", str(shards), "--vocab-file", str(vocab), "--output-dir", output,
            "--bert-model", "custom", "--config-file", str(config_file), f"--phase{phase}",
            "--max-steps", "1000000", "--batch-size", str(batch_size), "--max-seq-length", str(settings["seq"]),
            "--max-predictions-per-seq", str(settings["predictions"]), "--num-workers", "0",
        ] + (["--pack-sequences"] if packed else []))
        self.trainer = run_pretraining.Trainer(args, rank=0, world_size=1)
        self.batches = iter(run_pretraining.build_loader(args, rank=0, world_size=1))

    def run(self, steps: int) -> dict:
        """Seconds, real tokens and padding fraction of `steps` training steps."""
        seconds, tokens, padding = 0.0, 0, []
        for _ in range(steps):
            batch = next(self.batches)
            started = time.perf_counter()
            result, _ = self.trainer.step([batch])
            seconds += time.perf_counter() - started
            tokens += int(batch["attention_mask"].sum())
            padding.append(result.padding_fraction)
        return {"seconds": seconds, "tokens": tokens, "padding_fraction": statistics.mean(padding)}


def compare(phase: int, contenders: list[Contender], rounds: int, steps: int) -> dict:
    """Rounds of turns; prints each round and returns the medians of the phase."""
    rates = {contender.name: [] for contender in contenders}
    padding = {contender.name: [] for contender in contenders}
    ratios = []
    for round_index in range(rounds):
        turn = contenders if round_index % 2 == 0 else contenders[::-1]
        results = {contender.name: contender.run(steps) for contender in turn}
        for name, result in results.items():
            rates[name].append(result["tokens"] / result["seconds"])
            padding[name].append(result["padding_fraction"])
        ratios.append(rates["packed"][-1] / rates["unpacked"][-1])
        print(f"phase {phase} round {round_index + 1}: load {os.getloadavg()[0]:.1f}, " + ", ".join(
            f"{name} {rates[name][-1]:.1f} real tokens/s (padding {padding[name][-1]:.1%})" for name in rates)
            + f", packed/unpacked {ratios[-1]:.2f}x (slots ratio "
            f"{(1 - padding['packed'][-1]) / (1 - padding['unpacked'][-1]):.2f}x)", flush=True)
    return {"seq_length": PHASES[phase]["seq"],
            **{f"{name}_real_tokens_per_second": round(statistics.median(values), 2) for name, values in rates.items()},
            **{f"{name}_padding_fraction": round(statistics.median(values), 4) for name, values in padding.items()},
            "packed_over_unpacked": round(statistics.median(ratios), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config-file", type=Path, default=ROOT / "bert_configs" / "bert-base-uncased.json",
                        help="BERT config of both contenders (BERT-base; a tiny one for a smoke test).")
    parser.add_argument("--phases", default="1,2", help="Comma-separated phases to measure, of 1 and 2.")
    parser.add_argument("--rounds", type=int, default=3, help="Rounds in which both contenders take a turn.")
    parser.add_argument("--steps", type=int, default=3, help="Timed training steps per contender per round.")
    parser.add_argument("--warmup", type=int, default=1, help="Untimed steps of each contender before round 1.")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads of the training step.")
    parser.add_argument("--wikitext", type=Path, default=ROOT.parent / "shared/data/wikitext-2/wiki.test.raw")
    parser.add_argument("--vocab-file", type=Path, default=ROOT.parent / "shared/vocab/bert-uncased-vocab.txt")
    parser.add_argument("--work-dir", type=Path, default=Path(tempfile.gettempdir()) / "bench_packing",
                        help="Where the shards are built (and found again by later runs).")
    args = parser.parse_args()
    machine.print_header()
    phases = sorted(set(args.phases.replace(" ", "").split(",")))
    if not phases or not set(phases) <= {"1", "2"}:
        parser.error(f"--phases {args.phases}: expected 1, 2 or 1,2")
    phases = [int(phase) for phase in phases]
    if min(args.rounds, args.steps, args.threads) < 1 or args.warmup < 0:
        parser.error("--rounds, --steps and --threads must be at least 1, --warmup at least 0")
    for flag in ("config_file", "wikitext", "vocab_file"):
        if not getattr(args, flag).is_file():
            parser.error(f"--{flag.replace('_', '-')} {getattr(args, flag)}: no such file")

    os.environ["PADDLEBERT_NUM_THREADS"] = str(args.threads)
    from training import runtime

    threads = runtime.configure_cpu_threads()
    runtime.apply_cpu_tweaks()
    print(f"{threads} threads; load average {os.getloadavg()[0]:.1f}; model {args.config_file.name}; "
          f"{args.steps} steps per contender per round", flush=True)
    summary = {"cpu": machine.cpu_model_and_cores()[0], "threads": threads, "config": args.config_file.name}
    for phase in phases:
        shards = build_shards(args.wikitext, args.vocab_file, args.work_dir, PHASES[phase]["seq"], args.threads)
        with tempfile.TemporaryDirectory(prefix="bench_packing_") as output:  # the Trainers' (unused) output folder
            contenders = [Contender(packed, shards, args.vocab_file, args.config_file, phase, PHASES[phase]["batch"],
                                    output) for packed in (False, True)]
            for contender in contenders:
                if args.warmup:
                    contender.run(args.warmup)
            summary[f"phase{phase}"] = compare(phase, contenders, args.rounds, args.steps)
            del contenders
    print("\nmedians over the rounds:")
    for phase in phases:
        result = summary[f"phase{phase}"]
        print(f"phase {phase} (seq {result['seq_length']}): unpacked {result['unpacked_real_tokens_per_second']:.1f}, "
              f"packed {result['packed_real_tokens_per_second']:.1f} real tokens/s (padding "
              f"{result['unpacked_padding_fraction']:.1%} -> {result['packed_padding_fraction']:.1%}): "
              f"{result['packed_over_unpacked']:.2f}x")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
