"""Preprocessing throughput: our lddl_preprocess.py against the real NVIDIA LDDL 0.1.0, same corpus, same cores.

    python benchmarks/bench_preprocess.py [--rounds 3] [--repeat 1] [--workers 2] [--bin-size 64]

The corpus is WikiText-2's wiki.test.raw converted to LDDL's `--wikipedia` layout exactly as
../shared/data/lddl-sample/README.md describes (corpus.convert_wikitext_to_lddl); `--repeat N` writes
the articles N times (with new ids) for a longer run. Both tools get the same settings (seq 128, 4 partitions,
duplicate factor 2, static masking, 4 balanced shards) and are timed end to end as a user runs them (process
start, preprocessing and balancing), alternating in each round, so both see the same machine load. LDDL runs
from its venv through benchmarks/run_real_lddl.sh (set it up once with `benchmarks/run_real_lddl.sh setup`) with
MPI ranks = 2 + dask workers; it is run with 1 and with `--workers` dask workers and its faster setting is the
baseline. Prints one JSON line per run and a summary with documents/s, samples/s and our speed-up.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import machine

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from corpus import convert_wikitext_to_lddl  # noqa: E402

LDDL_SCRIPT = ROOT / "benchmarks" / "run_real_lddl.sh"
NUM_SHARDS = 4


def make_source(wikitext: Path, folder: Path, repeat: int) -> int:
    """LDDL input with the articles `repeat` times; returns the number of documents."""
    converted = convert_wikitext_to_lddl(wikitext, folder / "single")
    lines = converted.read_text(encoding="utf-8").split("\n")
    documents = [f"wiki-{copy * len(lines) + index} {line.split(' ', 1)[1]}"
                 for copy in range(repeat) for index, line in enumerate(lines)]
    target = folder / "source" / "en" / "0.txt"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("\n".join(documents), encoding="utf-8")
    return len(documents)


def timed(command: list[str], log: Path) -> float:
    began = time.perf_counter()
    with open(log, "w") as output:
        subprocess.run(command, check=True, stdout=output, stderr=subprocess.STDOUT)
    return time.perf_counter() - began


def count_rows(folder: Path) -> int:
    return sum(json.loads((folder / ".num_samples.json").read_text()).values())


def run_lddl(source: Path, work: Path, vocab: Path, workers: int, bin_size: int | None) -> dict:
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    flags = ["--target-seq-length", "128", "--num-blocks", "4", "--duplicate-factor", "2", "--sample-ratio", "1.0",
             "--seed", "42", "--masking"] + (["--bin-size", str(bin_size)] if bin_size else [])
    preprocess = timed(["bash", str(LDDL_SCRIPT), "preprocess", str(2 + workers), str(source), str(work / "pre"),
                        str(vocab), *flags], work / "preprocess.log")
    balance = timed(["bash", str(LDDL_SCRIPT), "balance", str(workers), str(work / "pre"), str(work / "out"),
                     str(NUM_SHARDS)], work / "balance.log")
    return {"tool": f"lddl ({workers} dask workers)", "seconds": preprocess + balance,
            "preprocess_seconds": preprocess, "balance_seconds": balance, "samples": count_rows(work / "out")}


def run_ours(source: Path, work: Path, vocab: Path, workers: int, bin_size: int | None) -> dict:
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    command = [sys.executable, str(ROOT / "lddl_preprocess.py"), "--input", str(source), "--vocab-file", str(vocab),
               "--output-dir", str(work / "out"), "--max-seq-length", "128", "--num-blocks", "4",
               "--duplicate-factor", "2", "--seed", "42", "--masking", "--num-shards", str(NUM_SHARDS),
               "--num-workers", str(workers)] + (["--bin-size", str(bin_size)] if bin_size else [])
    seconds = timed(command, work / "run.log")
    return {"tool": f"ours ({workers} worker processes)", "seconds": seconds, "samples": count_rows(work / "out")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wikitext", type=Path, default=ROOT.parent / "shared/data/wikitext-2/wiki.test.raw")
    parser.add_argument("--vocab-file", type=Path, default=ROOT.parent / "shared/vocab/bert-uncased-vocab.txt")
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/bench_preprocess"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=1, help="write the articles this many times")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--bin-size", type=int, default=None)
    args = parser.parse_args()
    machine.print_header()

    num_documents = make_source(args.wikitext, args.work_dir, args.repeat)
    source = args.work_dir / "source"
    runners = {f"lddl-{w}": (run_lddl, w) for w in sorted({1, args.workers})}
    runners["ours"] = (run_ours, args.workers)
    results: dict[str, list[dict]] = {name: [] for name in runners}
    for round_index in range(args.rounds):
        for name, (runner, workers) in runners.items():
            result = runner(source, args.work_dir / name, args.vocab_file, workers, args.bin_size)
            result.update(round=round_index, documents=num_documents)
            results[name].append(result)
            print(json.dumps(result), flush=True)

    summary = {}
    for name, runs in results.items():
        seconds = statistics.median(run["seconds"] for run in runs)
        samples = statistics.median(run["samples"] for run in runs)
        summary[name] = {"tool": runs[0]["tool"], "median_seconds": round(seconds, 3),
                         "documents_per_second": round(num_documents / seconds, 2),
                         "samples_per_second": round(samples / seconds, 1), "median_samples": samples}
    baseline = min((name for name in summary if name.startswith("lddl")), key=lambda n: summary[n]["median_seconds"])
    print(json.dumps({
        "corpus": f"{args.wikitext} x{args.repeat} ({num_documents} documents)",
        "cores": os.cpu_count(),
        "results": summary,
        "baseline": baseline,
        "speedup_documents_per_second": round(summary["ours"]["documents_per_second"]
                                              / summary[baseline]["documents_per_second"], 2),
        "speedup_samples_per_second": round(summary["ours"]["samples_per_second"]
                                            / summary[baseline]["samples_per_second"], 2),
    }, indent=1))


if __name__ == "__main__":
    main()
