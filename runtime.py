"""Process-level setup shared by the entry scripts: CPU threads and the data-parallel environment.

Threads: `import paddle` sets OMP_NUM_THREADS=1 when it is unset, which silently leaves Paddle on
one core. We therefore set Paddle's thread count explicitly in every process:
PADDLEBERT_NUM_THREADS if it is set, otherwise the machine's cores divided evenly among the
processes that `paddle.distributed.launch` started on this node (PADDLE_LOCAL_SIZE).
"""

from __future__ import annotations

import os

import paddle


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


def init_data_parallel() -> tuple[int, int]:
    """Join the collective group when started by paddle.distributed.launch; returns (rank, world_size)."""
    rank, world_size = world_info()
    if world_size > 1:
        paddle.distributed.init_parallel_env()
    return rank, world_size
