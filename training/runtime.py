"""Process setup shared by the entry scripts: CPU threads, CPU affinity, CPU library settings, data parallelism.

Threads: `import paddle` sets OMP_NUM_THREADS=1 when it is unset, which silently leaves Paddle on
one core. We therefore set Paddle's thread count explicitly in every process:
PADDLEBERT_NUM_THREADS if it is set, otherwise the machine's cores divided evenly among the
processes that `paddle.distributed.launch` started on this node (PADDLE_LOCAL_SIZE).

CPU library settings (the MKL code path, glibc's malloc thresholds; cpu_kernels.py says why) change the
whole process, so only the entry scripts apply them, through `apply_cpu_tweaks`, and only when the run is
on a CPU. Importing a module of the project changes nothing, except that this one imports Paddle quietly.

Quiet import: `import paddle` prints two warnings that are not the user's business: "No ccache found" (Paddle's
C++ extension builder, which we run once per machine and which needs no ccache) and, whenever OMP_NUM_THREADS > 1
is inherited (configure_cpu_threads exports it to child processes), "PLEASE USE OMP_NUM_THREADS WISELY" (a warning
about OpenBLAS builds; Paddle's CPU wheel uses MKL, and we set the thread count ourselves). The entry scripts
import this module first, before anything that imports Paddle, so that Paddle is imported here, through
import_paddle_quietly, without those lines; any other warning or output of the import still shows. The filter it
uses, stderr_without, also keeps Paddle's tracing warnings out of an export (inference.py).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterator
from types import ModuleType
from warnings import catch_warnings, filterwarnings

# Paddle's import-time lines that import_paddle_quietly drops: the start of the ccache warning's message, and a
# part of each of the two OMP_NUM_THREADS lines (paddle/base/__init__.py, __bootstrap__).
CCACHE_WARNING = "No ccache found"
OMP_WARNING_LINES = ("WARNING: OMP_NUM_THREADS set to", "PLEASE USE OMP_NUM_THREADS WISELY")


@contextlib.contextmanager
def stderr_without(lines: tuple[str, ...] = (), warnings: tuple[str, ...] = ()) -> Iterator[None]:
    """Run the block with file descriptor 2 caught in a temporary file, then write what it caught to sys.stderr
    without the lines that contain any of `lines`; every other line passes on unchanged, in order. Warnings whose
    message starts with any of `warnings` are ignored.

    C++ code (Paddle's glog) writes to the descriptor below Python, so only the descriptor catches its lines.
    sys.stderr is pointed at the descriptor for the block too: where it is not the descriptor (under pytest's
    capture) Python's lines would otherwise escape the filter, and through one file they keep their order among
    the C++ lines.
    """
    stderr = sys.stderr
    with catch_warnings(), tempfile.TemporaryFile() as caught:
        for message in warnings:
            filterwarnings("ignore", message=re.escape(message))
        stderr.flush()
        saved_fd = os.dup(2)
        try:
            os.dup2(caught.fileno(), 2)
            # Line-buffered, as Python's own stderr, so that each Python line reaches the file when it is written.
            with (open(2, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False) as to_fd,
                  contextlib.redirect_stderr(to_fd)):
                yield
        finally:
            stderr.flush()  # what code holding the original sys.stderr wrote in the block goes to the file too
            os.dup2(saved_fd, 2)
            os.close(saved_fd)
            caught.seek(0)
            # A binary file's lines end at "\n" only: a progress bar's "\r" stays inside its line.
            text = (line.decode("utf-8", errors="replace") for line in caught)
            stderr.write("".join(line for line in text if not any(fragment in line for fragment in lines)))
            stderr.flush()


def import_paddle_quietly() -> ModuleType:
    """Import Paddle without its ccache and OMP_NUM_THREADS warnings; other output of the import, from Python or
    C++, passes on to stderr. A no-op when Paddle is imported already."""
    if "paddle" in sys.modules:
        return sys.modules["paddle"]
    with stderr_without(lines=OMP_WARNING_LINES, warnings=(CCACHE_WARNING,)):
        import paddle
    return paddle


paddle = import_paddle_quietly()

from kernels import cpu_kernels  # noqa: E402  (after Paddle's quiet import, which must come first)


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



# More threads than CPUs only take turns on them; tens of thousands make the OpenMP runtime abort the process
# (SIGABRT) when it cannot create them. A few per CPU stay allowed, for experiments with oversubscription.
MAX_THREADS_PER_CPU = 8


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
        limit = MAX_THREADS_PER_CPU * (os.cpu_count() or 1)
        if num_threads > limit:
            raise ValueError(f"PADDLEBERT_NUM_THREADS={requested!r} is more than {MAX_THREADS_PER_CPU} threads per "
                             f"CPU of the {os.cpu_count()} here ({limit}); it would only oversubscribe them")
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


def set_cpu_affinity(device: str | None = None) -> list[int]:
    """Pin this process to its own CPUs; returns the CPUs it now has.

    On a GPU node a rank takes CPUs next to its own GPU (`gpu_cpu_sets`, from NVML's topology): the GPU
    paddle.distributed.launch selected for it (FLAGS_selected_gpus, an index among the visible GPUs, so
    `--devices 4,5,6,7` gives the ranks GPUs 4-7). Elsewhere the CPUs this process may use are split evenly
    among the processes the launcher started on this node, in local-rank order, so that two ranks never
    compete for a core. A rank gets at least one CPU.
    """
    local_rank, local_size = local_rank_info()
    available = sorted(os.sched_getaffinity(0))
    device = device or paddle.get_device()
    if device.startswith("gpu"):
        affinities = _nvml_cpu_affinities(_visible_gpus(), len(available))
        cpus = gpu_cpu_sets(affinities, available, _read_thread_siblings)[_selected_gpu(len(affinities))]
    else:
        per_rank = max(1, len(available) // local_size)
        start = (local_rank * per_rank) % len(available)
        cpus = available[start : start + per_rank]
    os.sched_setaffinity(0, cpus)
    return cpus


def gpu_cpu_sets(affinities: list[set[int]], available: list[int],
                 siblings_of: Callable[[int], set[int]]) -> list[list[int]]:
    """Each visible GPU's CPUs, from the GPUs' CPU affinities (affinities[i], NVML's set for visible GPU i).

    GPUs that share a CPU set (the GPUs of one socket or NUMA node) split that set's physical cores into
    contiguous blocks, in visible order, and each takes its cores with their hyperthread siblings. Every
    visible GPU gets its block whether or not a rank uses it, so that each rank's CPUs follow from its own
    GPU alone (a rank does not know which GPUs the launcher gave the others); with fewer ranks than visible
    GPUs some cores stay unused, never shared. On DGX
    machines the siblings are numbered after all physical cores (CPU n and n + cores are one core), so
    contiguous blocks of CPU numbers would put some ranks on other ranks' siblings. This is the
    socket_unique_contiguous mode of NVIDIA's gpu_affinity.py (DeepLearningExamples). `siblings_of(cpu)` gives
    the CPUs of cpu's core, cpu included; only CPUs in `available` are used.
    """
    allowed = set(available)
    sharing: dict[frozenset[int], list[int]] = {}
    for gpu, affinity in enumerate(affinities):
        sharing.setdefault(frozenset(affinity & allowed), []).append(gpu)
    result: list[list[int]] = [[] for _ in affinities]
    for cpu_set, gpus in sharing.items():
        if not cpu_set:
            raise ValueError(f"--enable-cpu-affinity: visible GPU {gpus[0]} has no CPU this process may use")
        cores = sorted({min(siblings_of(cpu) & cpu_set) for cpu in cpu_set})  # one CPU per physical core
        per_gpu = max(1, len(cores) // len(gpus))
        for position, gpu in enumerate(gpus):
            start = (position * per_gpu) % len(cores)
            block = cores[start : start + per_gpu]
            result[gpu] = sorted(set().union(*(siblings_of(core) & cpu_set for core in block)))
    return result


def _visible_gpus() -> list[str] | None:
    """The entries of CUDA_VISIBLE_DEVICES (indices, or GPU-/MIG- UUIDs), or None when it is unset (all GPUs)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return None if visible is None else [entry.strip() for entry in visible.split(",") if entry.strip()]


def _selected_gpu(visible_count: int) -> int:
    """This rank's GPU as an index among the visible ones: the first entry of FLAGS_selected_gpus, which
    paddle.distributed.launch sets for each rank (Paddle's own default device reads it too; 0 when unset)."""
    selected = os.environ.get("FLAGS_selected_gpus", "0")
    first = selected.split(",")[0].strip()
    if not first.isdigit() or int(first) >= visible_count:
        raise ValueError(f"--enable-cpu-affinity: FLAGS_selected_gpus={selected!r} names no GPU of the "
                         f"{visible_count} visible")
    return int(first)


def _nvml_handle(nvml, entry: str):
    """The NVML handle of the physical GPU a CUDA_VISIBLE_DEVICES entry names.

    An index is NVML's own (NVML counts GPUs as CUDA does with CUDA_DEVICE_ORDER=PCI_BUS_ID). A GPU UUID may be
    abbreviated, as CUDA allows, to any prefix that names one GPU; a MIG instance's UUID gives its parent
    GPU, whose CPUs it shares.
    """
    if entry.isdigit():
        return nvml.nvmlDeviceGetHandleByIndex(int(entry))
    if entry.startswith("MIG-"):
        return nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvml.nvmlDeviceGetHandleByUUID(entry))
    if entry.startswith("GPU-"):
        handles = [nvml.nvmlDeviceGetHandleByIndex(index) for index in range(nvml.nvmlDeviceGetCount())]
        matches = [handle for handle in handles if nvml.nvmlDeviceGetUUID(handle).startswith(entry)]
        if len(matches) == 1:
            return matches[0]
    raise ValueError(f"--enable-cpu-affinity: CUDA_VISIBLE_DEVICES entry {entry!r} names no single GPU of this node")


def _nvml_cpu_affinities(visible: list[str] | None, cpu_count: int) -> list[set[int]]:
    """Each visible GPU's ideal CPUs (nvmlDeviceGetCpuAffinity: a bitmask in 64-bit words, CPU i = bit i % 64
    of word i // 64), in visible order; visible=None means every GPU of the node. pynvml (nvidia-ml-py) is
    imported here, on GPU nodes only."""
    import pynvml

    words = (max(os.cpu_count() or 1, cpu_count) + 63) // 64
    pynvml.nvmlInit()
    try:
        entries = visible if visible is not None else [str(index) for index in range(pynvml.nvmlDeviceGetCount())]
        affinities = []
        for entry in entries:
            mask = pynvml.nvmlDeviceGetCpuAffinity(_nvml_handle(pynvml, entry), words)
            affinities.append({64 * word + bit for word, value in enumerate(mask) for bit in range(64)
                               if value >> bit & 1})
        return affinities
    finally:
        pynvml.nvmlShutdown()


def _read_thread_siblings(cpu: int, cpu_dir: str = "/sys/devices/system/cpu") -> set[int]:
    """The CPUs of cpu's physical core, from /sys (a list like "3,67" or "6-7"); {cpu} where it is not there."""
    path = os.path.join(cpu_dir, f"cpu{cpu}", "topology", "thread_siblings_list")
    try:
        with open(path, encoding="ascii") as siblings:
            text = siblings.read().strip()
    except OSError:
        return {cpu}
    cpus = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus
