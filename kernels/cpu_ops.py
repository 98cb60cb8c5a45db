"""Builds and loads csrc/cpu_ops.cc, PaddleBERT's fused multi-threaded CPU kernels (Paddle custom operators).

The extension is compiled once per machine with paddle.utils.cpp_extension (gcc; 13-20 s here) into a cache
directory keyed by a hash of the source, the flags, Paddle's and Python's versions:
$PADDLEBERT_CACHE (default ~/.cache/paddlebert)/cpu_ops/<hash>/. Later processes only register the cached
library (5 ms, no compiler run). A build that fails (no compiler, or a glibc older than 2.35 without vector
erff) leaves `load()` returning None with a one-line warning (the compiler's own output goes to a log, not the
terminal), and the callers keep Paddle's ops; the failure is remembered in the cache, so later processes warn
without building again until the compiler or the source changes. The flags
are portable across Intel and AMD x86-64 (AVX2 + FMA, no -march=native), since a cache directory can
outlive the CPU it was built on; a CPU without AVX2 or FMA gets Paddle's ops.
The CPU's vendor and feature flags are read here too (cpu_vendor_and_flags), for this check and for
cpu_kernels' choice of MKL's code path.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import platform
import shutil
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

import paddle
from paddle import _C_ops
from paddle.utils import cpp_extension

from utils.atomic_io import atomic_write_text
from utils.cli import output_to

NAME = "paddlebert_cpu_ops"
SOURCE = Path(__file__).resolve().parent.parent / "csrc" / "cpu_ops.cc"
# -fno-math-errno lets sqrt vectorize (it changes no value, only errno); "omp simd" in the source lets the
# reductions vectorize.
CXX_FLAGS = ["-O3", "-mavx2", "-mfma", "-fno-math-errno", "-fopenmp"]
REQUIRED_CPU_FLAGS = {"avx2", "fma"}  # what CXX_FLAGS let the compiler use
# Paddle's OpenMP runtime, not GCC's: one thread pool with Paddle's kernels and MKL (see csrc/cpu_ops.cc).
# libmvec: glibc's vector erff/expf for GELU (see csrc/cpu_ops.cc).
LD_FLAGS = [f"-L{Path(paddle.__file__).parent / 'libs'}", "-liomp5", "-lmvec"]


def cpu_vendor_and_flags(cpuinfo_path: str = "/proc/cpuinfo") -> tuple[str, set[str]]:
    """(vendor_id, feature flags) of the first processor in /proc/cpuinfo; ("", set()) where there is none."""
    vendor, flags = "", set()
    try:
        with open(cpuinfo_path, encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "vendor_id" and not vendor:
                    vendor = value.strip()
                elif key == "flags":
                    flags = set(value.split())
                    break
    except OSError:
        pass
    return vendor, flags



class CpuOps:
    """The extension's operators as Python functions (dygraph, CPU tensors)."""

    def layer_norm(self, x: paddle.Tensor, weight: paddle.Tensor, bias: paddle.Tensor, epsilon: float
                   ) -> paddle.Tensor:
        """F.layer_norm over x's last axis (float32), with its gradients: one row per pass each way."""
        return _C_ops._run_custom_op("paddlebert_layer_norm", x, weight, bias, float(epsilon))[0]

    def gelu(self, x: paddle.Tensor) -> paddle.Tensor:
        """F.gelu(x, approximate=False) of a float32 tensor, with its gradient (the op's grad kernel)."""
        return _C_ops._run_custom_op("paddlebert_gelu", x)[0]

    def masked_lm_xent(self, logits: paddle.Tensor, labels: paddle.Tensor) -> paddle.Tensor:
        """Per-row softmax cross-entropy of float32 logits [M, V] against int64 labels [M] (0 where a label is -1),
        with its gradient; no [M, V] softmax is kept for the backward pass (see csrc/cpu_ops.cc)."""
        return _C_ops._run_custom_op("paddlebert_masked_lm_xent", logits, labels)[0]

    def lamb_(self, param, grad, moment1, moment2, beta1_pow, beta2_pow, learning_rate, *, beta1: float,
              beta2: float, epsilon: float, weight_decay: float, grad_scale: float) -> None:
        """One LAMB step of one tensor in place (param, moment1, moment2); see csrc/cpu_ops.cc."""
        # A custom op may not write into a leaf that requires grad, even under no_grad; detach() is a view.
        _C_ops._run_custom_op("paddlebert_lamb", param.detach(), grad, moment1, moment2, beta1_pow, beta2_pow,
                              learning_rate, beta1, beta2, epsilon, weight_decay, grad_scale)


def cache_directory() -> Path:
    """Where this source, built with these flags for this Paddle and Python, lives."""
    key = hashlib.sha256()
    for part in (SOURCE.read_bytes(), repr((CXX_FLAGS, LD_FLAGS, paddle.__version__, sys.version,
                                           platform.machine())).encode()):
        key.update(part)
    root = Path(os.environ.get("PADDLEBERT_CACHE", Path.home() / ".cache" / "paddlebert"))
    return root / "cpu_ops" / key.hexdigest()[:16]


def _library(directory: Path) -> Path:
    return directory / NAME / f"{NAME}.so"


def _build(directory: Path) -> None:
    """Compile into a private directory, then move it into place, so that concurrent builds (two test
    processes) never see half a library; the loser of the race discards its copy."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}-", dir=directory.parent))
    try:
        with output_to(staging / "build.log"):
            cpp_extension.load(name=NAME, sources=[str(SOURCE)], extra_cxx_cflags=CXX_FLAGS,
                               extra_ldflags=LD_FLAGS, build_directory=str(staging))
        try:
            staging.rename(directory)
        except OSError:
            if not _library(directory).exists():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


@contextlib.contextmanager
def _build_lock(directory: Path) -> Iterator[None]:
    """Hold an exclusive flock on `<hash>.lock` beside the cache directory: the first of several processes that
    start at once (pytest's workers) builds, the others wait for its library. Two processes that both built would
    each register their own library's operators in-process (cpp_extension.load does), and the one that then
    registered the winner's, another file, would abort in Paddle's operator registry. The kernel releases the
    lock when the file closes, however the process ends; where the file system cannot lock, builds go unlocked."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    with open(directory.with_name(directory.name + ".lock"), "a", encoding="utf-8") as lock:
        with contextlib.suppress(OSError):
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


# The compilers a build may run (setuptools takes $CXX/$CC, else the platform's c++/cc; Paddle checks g++/gcc).
_COMPILER_NAMES = ("c++", "g++", "gcc", "cc")


def compiler_identity() -> list:
    """What decides whether a failed build is worth retrying: each compiler a build may run, as its path, size and
    modification time (or None where there is none); installing, removing or upgrading one changes it."""
    names = [os.environ.get("CXX"), os.environ.get("CC"), *_COMPILER_NAMES]
    identity = []
    for name in filter(None, names):
        path = shutil.which(name.split()[0])
        stat = os.stat(path) if path else None
        identity.append([name, path, stat.st_size if stat else None, stat.st_mtime_ns if stat else None])
    return identity


def failure_record(directory: Path) -> Path:
    """`<hash>.failed` beside the cache directory: a failed build of this source, flags, Paddle and Python."""
    return directory.with_name(directory.name + ".failed")


@functools.cache
def load() -> CpuOps | None:
    """The extension, built on first use on this machine; None (with a warning) where it cannot be built.

    A failed build is remembered in failure_record() with the compiler_identity() it ran with: later processes
    warn once and do not try again until the compiler changes (or the source, the flags, Paddle or Python, which
    change the cache directory)."""
    _, flags = cpu_vendor_and_flags()
    if not REQUIRED_CPU_FLAGS <= flags:
        warnings.warn(f"cpu_ops: this CPU lacks {sorted(REQUIRED_CPU_FLAGS - flags)}; using Paddle's CPU ops",
                      stacklevel=2)
        return None
    directory = cache_directory()
    record, compiler = failure_record(directory), compiler_identity()
    if not _library(directory).exists() and record.is_file():
        with contextlib.suppress(ValueError, OSError):
            failed = json.loads(record.read_text(encoding="utf-8"))
            if failed.get("compiler") == compiler:
                warnings.warn(f"cpu_ops: {SOURCE.name} failed to build before with this compiler "
                              f"({failed.get('message')}); using Paddle's CPU ops (delete {record} to retry)",
                              stacklevel=2)
                return None
    try:
        with _build_lock(directory):
            if not _library(directory).exists():
                _build(directory)
        cpp_extension.load_op_meta_info_and_register_op(str(_library(directory)))
    except Exception as error:  # a missing compiler or header fails in many ways; all mean "use Paddle's ops"
        message = str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
        with contextlib.suppress(OSError):  # an unwritable cache only costs the next process another try
            atomic_write_text(record, json.dumps({"compiler": compiler, "message": message}))
        warnings.warn(f"cpu_ops: cannot build {SOURCE.name} ({message}); using Paddle's CPU ops", stacklevel=2)
        return None
    return CpuOps()
