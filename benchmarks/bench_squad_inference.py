"""SQuAD inference speed: sequences/s of our span model in dygraph, with paddle.jit.to_static, and through the
exported Paddle Inference predictor that `run_squad.py --inference-model-dir` uses; optionally the same three
for PaddleNLP's BertForQuestionAnswering, run in its own venv by benchmarks/paddlenlp_squad_worker.py.

    python benchmarks/bench_squad_inference.py                      # BERT-base, batch 32 and 8, seq 384
    python benchmarks/bench_squad_inference.py --paddlenlp-venv /work/pnlp-venv

Every mode gets one untimed pass per batch size, then the modes take turns, one timed forward pass each,
`--repeats` times; the PaddleNLP worker waits while ours run and vice versa. Interleaving keeps the ratios
fair when other work on the machine changes the speed during the run. Inputs are random token ids with
no padding (every sequence is seq_length tokens long); weights are random.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import paddle  # noqa: E402

import run_squad  # noqa: E402
from modeling import BertConfig, BertForQuestionAnswering, standard_copy  # noqa: E402
from runtime import AmpPolicy, configure_cpu_threads  # noqa: E402


class PaddleNLPWorker:
    """The PaddleNLP peer process; `time(mode, batch_size, seq_length)` returns the seconds of one pass."""

    def __init__(self, venv: str, config: str, threads: int):
        python = os.path.join(venv, "bin", "python")
        if not os.path.isfile(python):
            raise SystemExit(f"--paddlenlp-venv {venv}: no bin/python")
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        self.process = subprocess.Popen(
            [python, str(ROOT / "benchmarks" / "paddlenlp_squad_worker.py"), "--config", config,
             "--threads", str(threads)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
        )
        self._reply()

    def _reply(self) -> dict:
        for line in self.process.stdout:
            if line.startswith("{"):
                return json.loads(line)
        raise SystemExit(f"PaddleNLP worker exited with code {self.process.wait()}")

    def time(self, mode: str, batch_size: int, seq_length: int) -> float:
        request = {"mode": mode, "batch_size": batch_size, "seq_length": seq_length}
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        return self._reply()["seconds"]

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()


def our_runners(config: BertConfig, threads: int, export_dir: str) -> dict:
    paddle.seed(0)
    model = BertForQuestionAnswering(config)
    model.eval()
    static_model = standard_copy(model)
    input_spec = [paddle.static.InputSpec([None, None], "int64", name) for name in run_squad.INPUT_NAMES]
    static_model = paddle.jit.to_static(static_model, input_spec=input_spec, full_graph=True)
    run_squad.export_inference_model(model, export_dir, "qa")
    return {
        "dygraph": run_squad.dygraph_predictor(model, AmpPolicy()),
        "to_static": run_squad.dygraph_predictor(static_model, AmpPolicy()),
        "predictor": run_squad.inference_predictor(export_dir, "qa", threads),
    }


def random_batch(rng: np.random.Generator, batch_size: int, seq_length: int) -> tuple[np.ndarray, ...]:
    input_ids = rng.integers(1000, 20000, (batch_size, seq_length), dtype=np.int64)
    token_type_ids = np.zeros_like(input_ids)
    token_type_ids[:, seq_length // 2:] = 1
    return input_ids, token_type_ids, np.ones_like(input_ids)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default=str(ROOT / "bert_configs" / "bert-base-uncased.json"))
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[32, 8])
    parser.add_argument("--seq-length", type=int, default=384)
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per mode and batch size")
    parser.add_argument("--paddlenlp-venv", help="venv with paddlenlp==2.8.1: also time PaddleNLP's model")
    args = parser.parse_args()
    threads = configure_cpu_threads()
    config = BertConfig.from_json_file(args.config)
    rng = np.random.default_rng(0)
    print(f"config {args.config}, seq {args.seq_length}, fp32, {threads} threads, {args.repeats} timed passes, "
          f"MKL_DEBUG_CPU_TYPE={os.environ.get('MKL_DEBUG_CPU_TYPE')} (the PaddleNLP worker inherits it)")

    worker = PaddleNLPWorker(args.paddlenlp_venv, args.config, threads) if args.paddlenlp_venv else None
    with tempfile.TemporaryDirectory() as export_dir:
        ours = our_runners(config, threads, export_dir)
        modes = [f"ours {name}" for name in ours] + ([f"paddlenlp {name}" for name in ours] if worker else [])

        def one_pass(mode: str, batch: tuple[np.ndarray, ...]) -> float:
            owner, name = mode.split(" ")
            if owner == "paddlenlp":
                return worker.time(name, batch[0].shape[0], batch[0].shape[1])
            start = time.perf_counter()
            ours[name](*batch)
            return time.perf_counter() - start

        for batch_size in args.batch_sizes:
            batch = random_batch(rng, batch_size, args.seq_length)
            outputs = [ours[name](*batch)[0] for name in ours]  # also the untimed first pass
            agreement = max(float(np.abs(output - outputs[0]).max()) for output in outputs)
            for mode in modes[len(ours):]:
                one_pass(mode, batch)
            seconds = dict.fromkeys(modes, 0.0)
            for _ in range(args.repeats):
                for mode in modes:
                    seconds[mode] += one_pass(mode, batch)
            throughput = {mode: batch_size * args.repeats / seconds[mode] for mode in modes}
            print(f"\nbatch {batch_size} (our three modes agree to {agreement:.1e} in start logits)")
            for mode in modes:
                ratios = f"{throughput[mode] / throughput['ours predictor']:.2f}x ours predictor"
                if worker:
                    ratios += f", {throughput[mode] / throughput['paddlenlp predictor']:.2f}x PaddleNLP predictor"
                print(f"  {mode:22s} {throughput[mode]:7.2f} seq/s   {ratios}")
    if worker:
        worker.close()


if __name__ == "__main__":
    main()
