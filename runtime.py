"""Process setup shared by the entry scripts: CPU threads, CPU affinity, CPU library settings, data parallelism.

Threads: `import paddle` sets OMP_NUM_THREADS=1 when it is unset, which silently leaves Paddle on
one core. We therefore set Paddle's thread count explicitly in every process:
PADDLEBERT_NUM_THREADS if it is set, otherwise the machine's cores divided evenly among the
processes that `paddle.distributed.launch` started on this node (PADDLE_LOCAL_SIZE).

CPU library settings (the MKL code path, glibc's malloc thresholds; cpu_kernels.py says why) change the
whole process, so only the entry scripts apply them, through `apply_cpu_tweaks`, and only when the run is
on a CPU. Importing a module of the project changes nothing.
"""

from __future__ import annotations

import os

import paddle

import cpu_kernels


def apply_cpu_tweaks(device: str | None = None) -> dict[str, object]:
    """On a CPU run, select MKL's fast kernels and keep freed memory for reuse; a no-op on a GPU.

    Call it before the first matrix product of the process (MKL reads its setting once). Returns what was
    set, for the run's report: {"mkl_cpu_type": ..., "malloc_keeps_freed_memory": ...}, or {} on a GPU.
    """
    device = device or paddle.get_device()
    if not device.startswith("cpu"):
        return {}
    return {"mkl_cpu_type": cpu_kernels.use_fast_mkl_kernels(),
            "malloc_keeps_freed_memory": cpu_kernels.keep_freed_memory()}



def configure_cpu_threads() -> int:
    """Set and return the number of CPU threads Paddle's kernels use in this process."""
    requested = os.environ.get("PADDLEBERT_NUM_THREADS")
    if requested:
        try:
            num_threads = int(requested)
        except ValueError:
            raise ValueError(f"PADDLEBERT_NUM_THREADS={requested!r} is not a whole number") from None
        if num_threads < 1:
            raise ValueError(f"PADDLEBERT_NUM_THREADS={requested!r} must be at least 1")
    else:
        local_processes = int(os.environ.get("PADDLE_LOCAL_SIZE", "1"))
        num_threads = max(1, (os.cpu_count() or 1) // local_processes)
    paddle.base.core.set_num_threads(num_threads)
    os.environ["OMP_NUM_THREADS"] = str(num_threads)
    return num_threads


def world_info() -> tuple[int, int]:
    """(rank, world_size) from the launcher's environment; (0, 1) for a plain `python script.py`."""
    return int(os.environ.get("PADDLE_TRAINER_ID", "0")), int(os.environ.get("PADDLE_TRAINERS_NUM", "1"))


def local_rank_info() -> tuple[int, int]:
    """(local rank, processes on this node) from the launcher's environment; (0, 1) without a launcher."""
    return int(os.environ.get("PADDLE_LOCAL_RANK", "0")), int(os.environ.get("PADDLE_LOCAL_SIZE", "1"))


def init_data_parallel() -> tuple[int, int]:
    """Join the collective group when started by paddle.distributed.launch; returns (rank, world_size)."""
    rank, world_size = world_info()
    if world_size > 1:
        paddle.distributed.init_parallel_env()
    return rank, world_size


def set_cpu_affinity() -> list[int]:
    """Pin this process to its own contiguous block of the CPUs it may use; returns the CPUs it now has.

    The allowed CPUs are split evenly among the processes the launcher started on this node, in local-rank
    order, so that two ranks never compete for a core (and on a GPU node each rank stays on the cores next to
    its device when the launcher numbers GPUs in NUMA order, as DGX machines do). A rank gets at least one CPU.
    """
    local_rank, local_size = local_rank_info()
    available = sorted(os.sched_getaffinity(0))
    per_rank = max(1, len(available) // local_size)
    start = (local_rank * per_rank) % len(available)
    cpus = available[start : start + per_rank]
    os.sched_setaffinity(0, cpus)
    return cpus
