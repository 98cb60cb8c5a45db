"""Training-loader throughput (samples/s) at seq 128 and seq 512, against a per-row collate peer.

Data: seq 128 = the real LDDL sample shards (shared/data/lddl-sample, static and dynamic masking); seq 512 =
parquet shards in the same layout written here to a temporary folder: the real WordPiece token stream of the LDDL
sample cut into rows (90% of 512 tokens, the rest 8..512, as short_seq_prob 0.1), static masks by
masking.mask_tokens.

Measured, interleaved round by round so all share the machine's state:
- ours, 1 process: PretrainingDataLoader with num_workers=0 (reading, tokens -> ids, padding, masking), i.e. the
  throughput of one core;
- peer, 1 process: the same rows, already in memory, collated one row at a time the straightforward way
  (split, dict lookup per token, np.load of the positions, per-row mask_tokens), as LDDL's collate does;
- ours, N workers: num_workers=N worker processes feeding this process; "per worker" = total / N.
Prints medians over rounds of samples per wall second and per CPU second of the batch-building processes (the
per-core figure, robust to other jobs on the machine), and the ratio ours / peer in CPU terms.

    python benchmarks/bench_loader.py [--rounds 5] [--batch-size 32] [--workers 2]
"""

from __future__ import annotations

import argparse
import io
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import machine
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from preprocessing.masking import mask_tokens  # noqa: E402
from pretraining_dataset import PretrainingDataLoader  # noqa: E402
from tokenizer import load_vocab  # noqa: E402

SHARED = Path(os.environ.get("PADDLEBERT_SHARED_DIR", ROOT.parent / "shared"))


def write_seq512_sets(folder: Path, vocab: dict[str, int], source: Path, shards: int = 4) -> tuple[Path, Path]:
    """Static and dynamic seq-512 sets in LDDL's parquet layout, cut from the real token stream of `source`."""
    tokens = sorted(vocab, key=vocab.get)
    stream = np.array([vocab[token] for path in sorted(source.glob("*.parquet"))
                       for row in pq.read_table(path, columns=["A", "B"]).to_pylist()
                       for token in f"{row['A']} {row['B']}".split(" ")])
    rng = np.random.default_rng(0)
    static_dir, dynamic_dir = folder / "seq512-static", folder / "seq512-dynamic"
    static_dir.mkdir()
    dynamic_dir.mkdir()
    rows, start = [], 0
    while start + 509 <= stream.size:
        num_tokens = 512 if rng.random() < 0.9 else int(rng.integers(8, 513))  # short_seq_prob 0.1
        length_a = int(rng.integers(1, num_tokens - 3))
        body = stream[start:start + num_tokens - 3]
        start += num_tokens - 3
        ids = np.concatenate([[vocab["[CLS]"]], body[:length_a], [vocab["[SEP]"]], body[length_a:], [vocab["[SEP]"]]])
        candidates = np.ones(num_tokens, dtype=bool)
        candidates[[0, length_a + 1, num_tokens - 1]] = False
        masked, positions, originals = mask_tokens(ids, candidates, rng, len(tokens), vocab["[MASK]"],
                                                   max_predictions_per_seq=80)
        npy = io.BytesIO()
        np.save(npy, positions.astype(np.uint16))
        rows.append({"A": " ".join(tokens[i] for i in masked[1:length_a + 1]),
                     "B": " ".join(tokens[i] for i in masked[length_a + 2:-1]),
                     "A_plain": " ".join(tokens[i] for i in body[:length_a]),
                     "B_plain": " ".join(tokens[i] for i in body[length_a:]),
                     "is_random_next": bool(rng.integers(0, 2)), "num_tokens": num_tokens,
                     "masked_lm_positions": npy.getvalue(),
                     "masked_lm_labels": " ".join(tokens[i] for i in originals)})
    for shard in range(shards):
        table = pa.Table.from_pylist(rows[shard::shards])
        common = [table["is_random_next"], table["num_tokens"].cast(pa.uint16())]
        pq.write_table(pa.table([table["A"], table["B"], *common, table["masked_lm_positions"],
                                 table["masked_lm_labels"]], names=["A", "B", "is_random_next", "num_tokens",
                                                                    "masked_lm_positions", "masked_lm_labels"]),
                       static_dir / f"shard-{shard}.parquet")
        pq.write_table(pa.table([table["A_plain"], table["B_plain"], *common],
                                names=["A", "B", "is_random_next", "num_tokens"]),
                       dynamic_dir / f"shard-{shard}.parquet")
    return static_dir, dynamic_dir


def peer_collate(rows: list[dict], vocab: dict[str, int], rng: np.random.Generator, max_predictions: int
                 ) -> dict[str, np.ndarray]:
    """One row at a time: tokens -> ids, static labels via np.load or dynamic masks via mask_tokens."""
    length = -(-max(row["num_tokens"] for row in rows) // 8) * 8
    input_ids, token_type_ids, attention_mask = (np.zeros((len(rows), length), np.int64) for _ in range(3))
    masked_lm_labels = np.full((len(rows), length), -1, np.int64)
    for i, row in enumerate(rows):
        tokens_a, tokens_b = row["A"].split(" "), row["B"].split(" ")
        ids = np.array([vocab[t] for t in ["[CLS]", *tokens_a, "[SEP]", *tokens_b, "[SEP]"]])
        if "masked_lm_positions" in row:
            positions = np.load(io.BytesIO(row["masked_lm_positions"]))
            masked_lm_labels[i, positions] = [vocab[t] for t in row["masked_lm_labels"].split(" ")]
        else:
            candidates = np.ones(ids.size, dtype=bool)
            candidates[[0, len(tokens_a) + 1, ids.size - 1]] = False
            ids, positions, originals = mask_tokens(ids, candidates, rng, len(vocab), vocab["[MASK]"],
                                                    max_predictions_per_seq=max_predictions)
            masked_lm_labels[i, positions] = originals
        input_ids[i, :ids.size] = ids
        token_type_ids[i, len(tokens_a) + 2:ids.size] = 1
        attention_mask[i, :ids.size] = 1
    next_sentence_labels = np.array([int(row["is_random_next"]) for row in rows])
    return {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": attention_mask,
            "masked_lm_labels": masked_lm_labels, "next_sentence_labels": next_sentence_labels}


def time_ours(loader: PretrainingDataLoader, batches: int) -> tuple[float, float]:
    """(samples per wall second, samples per CPU second of the processes that build batches) over `batches`
    batches after the first one (worker start-up and the first window are excluded). CPU seconds are those of this
    process for num_workers=0, and those of the worker processes otherwise, which keeps the per-core figure
    meaningful on a machine that other jobs share."""
    iterator = iter(loader)
    next(iterator)
    wall, cpu, children = time.perf_counter(), time.process_time(), resource.getrusage(resource.RUSAGE_CHILDREN)
    samples = sum(len(next(iterator)["input_ids"]) for _ in range(batches))
    wall = time.perf_counter() - wall
    cpu = time.process_time() - cpu
    iterator.close()  # joins the workers, so that their CPU time is counted in RUSAGE_CHILDREN
    if loader.num_workers:
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime
    return samples / wall, samples / cpu


def time_peer(rows: list[dict], vocab: dict[str, int], batch_size: int, batches: int, max_predictions: int
              ) -> tuple[float, float]:
    rng = np.random.default_rng(0)
    wall, cpu = time.perf_counter(), time.process_time()
    for index in range(batches):
        peer_collate(rows[index * batch_size:(index + 1) * batch_size], vocab, rng, max_predictions)
    samples = batches * batch_size
    return samples / (time.perf_counter() - wall), samples / (time.process_time() - cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds per configuration (medians printed)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2, help="worker processes for the multi-process figure")
    args = parser.parse_args()
    machine.print_header()

    vocab_file = SHARED / "vocab" / "bert-uncased-vocab.txt"
    vocab = load_vocab(vocab_file)
    lddl = SHARED / "data" / "lddl-sample"
    with tempfile.TemporaryDirectory() as temporary:
        source = lddl / "wikitext2-test-seq128-unbinned-dynamic"
        static512, dynamic512 = write_seq512_sets(Path(temporary), vocab, source)
        sets = {"seq128 static ": (lddl / "wikitext2-test-seq128-unbinned", 128, 20),
                "seq128 dynamic": (lddl / "wikitext2-test-seq128-unbinned-dynamic", 128, 20),
                "seq512 static ": (static512, 512, 80), "seq512 dynamic": (dynamic512, 512, 80)}
        results = {name: {"ours": [], "peer": [], "workers": []} for name in sets}
        for _ in range(args.rounds):
            for name, (folder, max_seq_length, max_predictions) in sets.items():
                settings = dict(input_dir=str(folder), vocab_file=str(vocab_file), batch_size=args.batch_size,
                                max_seq_length=max_seq_length, max_predictions_per_seq=max_predictions, seed=0)
                serial = PretrainingDataLoader(**settings)
                batches = serial.steps_per_epoch - 1
                rows = [row for path in sorted(folder.glob("*.parquet")) for row in pq.read_table(path).to_pylist()]
                results[name]["ours"].append(time_ours(serial, batches))
                results[name]["peer"].append(time_peer(rows, vocab, args.batch_size, batches, max_predictions))
                parallel = PretrainingDataLoader(**settings, num_workers=args.workers)
                results[name]["workers"].append(time_ours(parallel, 2 * batches))

    print(f"batch {args.batch_size}, {args.rounds} rounds, load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} cores; medians of samples per wall second and per CPU second (= per core)")
    print(f"{'set':15s} | {'ours 1 proc':>19s} | {'peer 1 proc':>19s} | {'ours/peer':>9s} | "
          f"{f'ours, {args.workers} workers':>21s}")
    print(f"{'':15s} | {'wall/s':>9s} {'CPU/s':>9s} | {'wall/s':>9s} {'CPU/s':>9s} | {'CPU/s':>9s} | "
          f"{'wall/s':>9s} {'per worker CPU/s':>11s}")
    for name, measured in results.items():
        (ours_wall, ours_cpu), (peer_wall, peer_cpu), (workers_wall, workers_cpu) = (
            tuple(statistics.median(values) for values in zip(*measured[key], strict=True))
            for key in ("ours", "peer", "workers"))
        print(f"{name:15s} | {ours_wall:9.0f} {ours_cpu:9.0f} | {peer_wall:9.0f} {peer_cpu:9.0f} | "
              f"{ours_cpu / peer_cpu:9.2f} | {workers_wall:9.0f} {workers_cpu:16.0f}")


if __name__ == "__main__":
    main()
