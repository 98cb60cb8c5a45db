"""runtime.py and cli.py: thread count, CPU affinity (even split on a CPU, NVML topology on a GPU node), flag types."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import types

import pytest

from conftest import ROOT
from training import runtime
from training.runtime import configure_cpu_threads
from utils.cli import str_to_bool


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
        "import os, sys; sys.path.insert(0, sys.argv[1]); from training.runtime import set_cpu_affinity\n"
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


def uuid_of(gpu: int) -> str:
    return f"GPU-{gpu:08x}-aaaa-bbbb-cccc-{gpu:012x}"


def fake_nvml(affinities: list[set[int]]) -> types.ModuleType:
    """pynvml's calls that runtime makes, for a node whose GPU i has CPU set affinities[i] (answered as 64-bit
    bitmask words) and UUID uuid_of(i); MIG instance "MIG-<i>-<k>" lives on GPU i."""
    nvml = types.ModuleType("pynvml")
    nvml.nvmlInit = nvml.nvmlShutdown = lambda: None
    nvml.nvmlDeviceGetCount = lambda: len(affinities)
    nvml.nvmlDeviceGetHandleByIndex = lambda index: index
    nvml.nvmlDeviceGetUUID = uuid_of
    nvml.nvmlDeviceGetHandleByUUID = lambda uuid: ("mig", int(uuid.split("-")[1]))
    nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle = lambda mig: mig[1]

    def cpu_affinity(handle, words):
        assert isinstance(handle, int), "NVML gives no CPU affinity for a MIG instance's handle"
        return [sum(1 << (cpu - 64 * word) for cpu in affinities[handle] if cpu // 64 == word)
                for word in range(words)]

    nvml.nvmlDeviceGetCpuAffinity = cpu_affinity
    return nvml


def test_gpus_sharing_a_socket_split_its_cores_with_their_siblings():
    sets = runtime.gpu_cpu_sets([SOCKETS[gpu // 4] for gpu in range(8)], list(range(16)), dgx_siblings)
    assert sets == [[core, core + 8] for core in range(8)]
    # The even split of CPU numbers would give ranks 4-7 the siblings of ranks 0-3's cores.
    even = [list(range(2 * rank, 2 * rank + 2)) for rank in range(8)]
    assert {cpu % 8 for cpu in even[4]} == set(even[0])  # CPUs 8, 9 are the other halves of cores 0, 1
    # Two GPUs on one socket: two cores each, on that socket only.
    two = runtime.gpu_cpu_sets([SOCKETS[0], SOCKETS[0], SOCKETS[1]], list(range(16)), dgx_siblings)
    assert two == [[0, 1, 8, 9], [2, 3, 10, 11], [4, 5, 6, 7, 12, 13, 14, 15]]
    with pytest.raises(ValueError, match="visible GPU 0 has no CPU"):
        runtime.gpu_cpu_sets([{20}], list(range(16)), dgx_siblings)


def test_gpu_affinity_is_read_from_nvml(monkeypatch):
    wide = [set(range(0, 4)) | set(range(64, 68)), {70, 127}]  # CPUs beyond the first 64-bit word
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(wide))
    assert runtime._nvml_cpu_affinities(["1", "0"], 128) == [wide[1], wide[0]]
    assert runtime._nvml_cpu_affinities(None, 128) == wide  # CUDA_VISIBLE_DEVICES unset: every GPU


@pytest.fixture
def dgx(monkeypatch):
    """The DGX-like node above, with pinning recorded instead of done; returns the pinned CPU lists."""
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml([SOCKETS[gpu // 4] for gpu in range(8)]))
    monkeypatch.setattr(runtime, "_read_thread_siblings", dgx_siblings)
    monkeypatch.setattr(runtime.os, "sched_getaffinity", lambda pid: set(range(16)))
    pinned = []
    monkeypatch.setattr(runtime.os, "sched_setaffinity", lambda pid, cpus: pinned.append(sorted(cpus)))
    monkeypatch.setenv("PADDLE_LOCAL_SIZE", "4")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return pinned


def launched_rank(monkeypatch, local_rank: int, selected_gpu: int) -> None:
    """The environment paddle.distributed.launch gives a rank (controllers/collective.py, Paddle 3.3)."""
    monkeypatch.setenv("PADDLE_LOCAL_RANK", str(local_rank))
    monkeypatch.setenv("FLAGS_selected_gpus", str(selected_gpu))


def test_gpu_affinity_follows_the_gpu_the_launcher_selected(dgx, monkeypatch):
    # `--devices 4,5,6,7` without CUDA_VISIBLE_DEVICES: local rank 1 runs on GPU 5, next to socket 1.
    launched_rank(monkeypatch, 1, 5)
    assert runtime.set_cpu_affinity("gpu:5") == [5, 13] and dgx == [[5, 13]]
    # The same GPUs made visible instead: FLAGS_selected_gpus counts among the visible ones.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    launched_rank(monkeypatch, 1, 1)
    assert runtime.set_cpu_affinity("gpu:1") == [5, 13]
    # Two ranks on GPUs 0 and 2 of socket 0: each GPU keeps its own block, so they never share a core.
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    monkeypatch.setenv("PADDLE_LOCAL_SIZE", "2")
    pins = []
    for local_rank, gpu in enumerate((0, 2)):
        launched_rank(monkeypatch, local_rank, gpu)
        pins.append(runtime.set_cpu_affinity(f"gpu:{gpu}"))
    assert pins == [[0, 8], [2, 10]]
    launched_rank(monkeypatch, 0, 9)
    with pytest.raises(ValueError, match="FLAGS_selected_gpus='9' names no GPU of the 8 visible"):
        runtime.set_cpu_affinity("gpu:9")


def test_gpu_affinity_takes_uuid_style_visible_devices(dgx, monkeypatch):
    # Slurm and container runtimes often set UUIDs; CUDA also takes a unique prefix, and MIG instance UUIDs.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"{uuid_of(6)},{uuid_of(2)[:12]},MIG-1-0")
    # Visible: GPU 6, alone on socket 1, takes all of it; GPUs 2 and 1 (the MIG instance's) halve socket 0.
    expected = {0: [4, 5, 6, 7, 12, 13, 14, 15], 1: [0, 1, 8, 9], 2: [2, 3, 10, 11]}
    for selected, cpus in expected.items():
        launched_rank(monkeypatch, selected, selected)
        assert runtime.set_cpu_affinity(f"gpu:{selected}") == cpus
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-0000000")  # a prefix of every GPU's UUID here
    launched_rank(monkeypatch, 0, 0)
    with pytest.raises(ValueError, match="CUDA_VISIBLE_DEVICES entry 'GPU-0000000' names no single GPU"):
        runtime.set_cpu_affinity("gpu:0")


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
