"""runtime.py and cli.py: thread count, CPU affinity (even split on a CPU, NVML topology on a GPU node), flag types."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import types

import pytest

import runtime
from cli import str_to_bool
from conftest import ROOT
from runtime import configure_cpu_threads


def test_configure_cpu_threads_from_environment(monkeypatch):
    monkeypatch.setenv("PADDLEBERT_NUM_THREADS", "1")
    assert configure_cpu_threads() == 1
    assert os.environ["OMP_NUM_THREADS"] == "1"
    monkeypatch.setenv("PADDLEBERT_NUM_THREADS", "two")
    with pytest.raises(ValueError, match="PADDLEBERT_NUM_THREADS"):
        configure_cpu_threads()
    monkeypatch.delenv("PADDLEBERT_NUM_THREADS")
    monkeypatch.setenv("PADDLE_LOCAL_SIZE", "1")
    assert configure_cpu_threads() == os.cpu_count()


def test_cpu_affinity_gives_each_local_rank_its_own_block():
    # In a child process: pinning the test process itself would slow down the rest of the suite. The child
    # plays local ranks 0 and 1 of 2 in turn, restoring its CPUs in between.
    code = (
        "import os, sys; sys.path.insert(0, sys.argv[1]); from runtime import set_cpu_affinity\n"
        "everything = os.sched_getaffinity(0)\n"
        "for rank in ('0', '1'):\n"
        "    os.environ.update(PADDLE_LOCAL_RANK=rank, PADDLE_LOCAL_SIZE='2')\n"
        "    print(sorted(set_cpu_affinity('cpu')), sorted(os.sched_getaffinity(0)))\n"
        "    os.sched_setaffinity(0, everything)\n"
    )
    available = sorted(os.sched_getaffinity(0))
    per_rank = max(1, len(available) // 2)
    lines = subprocess.run([sys.executable, "-c", code, str(ROOT)], capture_output=True, text=True,
                           check=True).stdout.strip().splitlines()[-2:]
    for local_rank, line in enumerate(lines):
        expected = available[(local_rank * per_rank) % len(available):][:per_rank]
        assert line == f"{expected} {expected}"


# A DGX-like node in miniature: 2 sockets of 4 cores, hyperthread siblings numbered after all physical cores
# (CPU n and n + 8 are one core), 8 GPUs, GPUs 0-3 next to socket 0 and 4-7 next to socket 1.
SOCKETS = [set(range(0, 4)) | set(range(8, 12)), set(range(4, 8)) | set(range(12, 16))]


def dgx_siblings(cpu: int) -> set[int]:
    return {cpu % 8, cpu % 8 + 8}


def fake_nvml(affinities: list[set[int]]) -> types.ModuleType:
    """pynvml's calls that runtime makes, answering with these CPU sets as 64-bit bitmask words."""
    nvml = types.ModuleType("pynvml")
    nvml.nvmlInit = nvml.nvmlShutdown = lambda: None
    nvml.nvmlDeviceGetHandleByIndex = lambda index: index

    def cpu_affinity(handle, words):
        return [sum(1 << (cpu - 64 * word) for cpu in affinities[handle] if cpu // 64 == word)
                for word in range(words)]

    nvml.nvmlDeviceGetCpuAffinity = cpu_affinity
    return nvml


def test_gpu_ranks_sharing_a_socket_split_its_cores_with_their_siblings():
    sets = runtime.gpu_cpu_sets([SOCKETS[gpu // 4] for gpu in range(8)], list(range(16)), dgx_siblings)
    assert sets == [[core, core + 8] for core in range(8)]
    # The even split of CPU numbers would give ranks 4-7 the siblings of ranks 0-3's cores.
    even = [list(range(2 * rank, 2 * rank + 2)) for rank in range(8)]
    assert {cpu % 8 for cpu in even[4]} == set(even[0])  # CPUs 8, 9 are the other halves of cores 0, 1
    # Two ranks on one socket: two cores each, on that socket only.
    two = runtime.gpu_cpu_sets([SOCKETS[0], SOCKETS[0], SOCKETS[1]], list(range(16)), dgx_siblings)
    assert two == [[0, 1, 8, 9], [2, 3, 10, 11], [4, 5, 6, 7, 12, 13, 14, 15]]
    with pytest.raises(ValueError, match="local rank 0 has no CPU"):
        runtime.gpu_cpu_sets([{20}], list(range(16)), dgx_siblings)


def test_gpu_affinity_is_read_from_nvml(monkeypatch):
    wide = [set(range(0, 4)) | set(range(64, 68)), {70, 127}]  # CPUs beyond the first 64-bit word
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(wide))
    assert runtime._nvml_cpu_affinities([1, 0], 128) == [wide[1], wide[0]]

    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml([SOCKETS[gpu // 4] for gpu in range(8)]))
    monkeypatch.setattr(runtime, "_read_thread_siblings", dgx_siblings)
    monkeypatch.setattr(runtime.os, "sched_getaffinity", lambda pid: set(range(16)))
    pinned = []
    monkeypatch.setattr(runtime.os, "sched_setaffinity", lambda pid, cpus: pinned.append(sorted(cpus)))
    monkeypatch.setenv("PADDLE_LOCAL_SIZE", "4")
    monkeypatch.setenv("PADDLE_LOCAL_RANK", "1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")  # NVML numbers all GPUs of the node
    assert runtime.set_cpu_affinity("gpu:1") == [5, 13] and pinned == [[5, 13]]


def test_thread_siblings_are_read_from_sys(tmp_path):
    for cpu, text in ((3, "3,67\n"), (6, "6-7\n")):
        (tmp_path / f"cpu{cpu}" / "topology").mkdir(parents=True)
        (tmp_path / f"cpu{cpu}" / "topology" / "thread_siblings_list").write_text(text)
    assert runtime._read_thread_siblings(3, str(tmp_path)) == {3, 67}
    assert runtime._read_thread_siblings(6, str(tmp_path)) == {6, 7}
    assert runtime._read_thread_siblings(9, str(tmp_path)) == {9}  # not in /sys: the CPU alone
    assert 0 in runtime._read_thread_siblings(0)


def test_str_to_bool_reads_reference_style_flags():
    assert [str_to_bool(text) for text in ("True", "false", "1", "0", "yes", "off")] == [
        True, False, True, False, True, False]
    with pytest.raises(argparse.ArgumentTypeError, match="expected true or false"):
        str_to_bool("maybe")
