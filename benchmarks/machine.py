"""The header line every benchmark prints first: the machine (CPU model, cores, the vector and matrix extensions
that decide which kernels run), the date (UTC) and the command. `python benchmarks/machine.py` prints it alone
(.ci/run does, so that a failure names the machine).

A figure quoted in the README is only worth what its context says, so every benchmark starts its output with
this line and the figure can be traced to where, when and how it was measured. `in_process_parser` gives the
benchmarks that interleave their contenders in one process their shared options, the thread count and the rounds.
"""

from __future__ import annotations

import argparse
import datetime
import os
import shlex
import sys

# The extensions whose presence changes the kernels (MKL's and oneDNN's GEMMs, bf16 and int8 paths) and so the
# figures and the last bits of results: Intel and AMD machines differ here (AMD's Zen 4 has no AMX).
KERNEL_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")


def kernel_flags(cpuinfo_path: str = "/proc/cpuinfo") -> list[str]:
    """Which of KERNEL_FLAGS the first processor in /proc/cpuinfo lists, in that order."""
    try:
        with open(cpuinfo_path, encoding="utf-8") as reader:
            for line in reader:
                key, _, value = (part.strip() for part in line.partition(":"))
                if key == "flags":
                    present = set(value.split())
                    return [flag for flag in KERNEL_FLAGS if flag in present]
    except OSError:
        pass
    return []


def cpu_model_and_cores(cpuinfo_path: str = "/proc/cpuinfo") -> tuple[str, int]:
    """The CPU's model name and its physical cores, from /proc/cpuinfo ("unknown CPU" and the logical CPUs
    where the file lacks the fields, as on some virtual machines and non-x86 kernels). The name carries the
    family and model numbers where the file has them: virtual machines often name an AMD CPU only "AMD EPYC",
    and the numbers tell its generation (family 25 is Zen 3 or Zen 4, 26 is Zen 5), whose kernels differ."""
    model, cores, processor, generation = "unknown CPU", set(), {}, ""
    try:
        with open(cpuinfo_path, encoding="utf-8") as reader:
            lines = reader.read().splitlines() + [""]
    except OSError:
        lines = []
    for line in lines:
        key, _, value = (part.strip() for part in line.partition(":"))
        if not key:  # a blank line ends one processor's block
            if "physical id" in processor and "core id" in processor:
                cores.add((processor["physical id"], processor["core id"]))
            processor = {}
        else:
            processor[key] = value
            if key == "model name":
                model = value
            if key == "model" and "cpu family" in processor and not generation:
                generation = f" (family {processor['cpu family']}, model {value})"
    return model + generation, len(cores) or (os.cpu_count() or 1)


def header_line(cpuinfo_path: str = "/proc/cpuinfo", now: datetime.datetime | None = None,
                command: list[str] | None = None) -> str:
    """`machine: <CPU model>, <N> cores, <M> CPUs usable; flags: <KERNEL_FLAGS present>; date: <UTC>; command:
    <the exact command line>`."""
    model, cores = cpu_model_and_cores(cpuinfo_path)
    usable = len(os.sched_getaffinity(0))
    flags = " ".join(kernel_flags(cpuinfo_path)) or "none of " + " ".join(KERNEL_FLAGS)
    now = now or datetime.datetime.now(datetime.timezone.utc)
    command = command if command is not None else sys.orig_argv
    return (f"machine: {model}, {cores} cores, {usable} CPUs usable; flags: {flags}; date: {now:%Y-%m-%d %H:%M} UTC; "
            f"command: {shlex.join(command)}")


def in_process_parser(doc: str, rounds: int, rounds_help: str, threads_help: str) -> argparse.ArgumentParser:
    """The command line of a benchmark that times its contenders round by round in one process: described by
    the first line of its docstring `doc`, with --threads (default 2) and --rounds (default `rounds`)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2, help=threads_help)
    parser.add_argument("--rounds", type=int, default=rounds, help=rounds_help)
    return parser


def print_header() -> None:
    print(header_line(), flush=True)


if __name__ == "__main__":
    print_header()
