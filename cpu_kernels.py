"""CPU fast paths for BERT training in Paddle: which MKL kernels run, and cheaper kernels for hot ops.

Paddle's CPU build does its matrix products in Intel MKL (mklml 2019). That MKL picks its kernels by CPU
vendor: on an AMD processor it ignores AVX2/AVX-512 and falls back to a generic path about 2.4x slower
(measured here, an AMD EPYC with AVX-512: 37 against 90 GFLOP per CPU-second for a 1024x768 by 768x3072
product). MKL_DEBUG_CPU_TYPE, which this MKL reads when it first dispatches, selects the kernels
explicitly; use_fast_mkl_kernels() sets it, before Paddle's first matrix product, to the best code path
the CPU's own feature flags allow.
"""

from __future__ import annotations

import os

# MKL_DEBUG_CPU_TYPE values of MKL 2019: 5 = AVX2 kernels, 7 = AVX-512 (Skylake-SP) kernels.
_MKL_AVX2, _MKL_AVX512 = "5", "7"
_AVX512_FLAGS = {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"}


def _cpu_vendor_and_flags(cpuinfo_path: str = "/proc/cpuinfo") -> tuple[str, set[str]]:
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


def mkl_cpu_type(vendor: str, flags: set[str]) -> str | None:
    """The MKL_DEBUG_CPU_TYPE that gives an AMD CPU with these flags MKL's fastest kernels it can run.

    None for other vendors (MKL already chooses well on Intel) and for CPUs without AVX2 and FMA.
    """
    if vendor != "AuthenticAMD":
        return None
    if _AVX512_FLAGS <= flags:
        return _MKL_AVX512
    if {"avx2", "fma"} <= flags:
        return _MKL_AVX2
    return None


def use_fast_mkl_kernels(cpuinfo_path: str = "/proc/cpuinfo") -> str | None:
    """Set MKL_DEBUG_CPU_TYPE for this process (unless the user set it) and return the value in effect.

    It takes effect only if MKL has not dispatched a kernel yet in this process, so call it before the
    first matrix product (modeling.py does on import).
    """
    if "MKL_DEBUG_CPU_TYPE" not in os.environ:
        cpu_type = mkl_cpu_type(*_cpu_vendor_and_flags(cpuinfo_path))
        if cpu_type is not None:
            os.environ["MKL_DEBUG_CPU_TYPE"] = cpu_type
    return os.environ.get("MKL_DEBUG_CPU_TYPE")
