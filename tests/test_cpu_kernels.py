"""cpu_kernels: MKL code-path selection from /proc/cpuinfo."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import cpu_kernels

ROOT = Path(__file__).resolve().parent.parent
AVX512 = "fpu sse2 avx avx2 fma avx512f avx512cd avx512bw avx512dq avx512vl"
AVX2 = "fpu sse2 avx avx2 fma"


def write_cpuinfo(folder: Path, vendor: str, flags: str) -> str:
    processor = f"processor\t: {{index}}\nvendor_id\t: {vendor}\nmodel name\t: test cpu\nflags\t\t: {flags}\n\n"
    path = folder / "cpuinfo"
    path.write_text(processor.format(index=0) + processor.format(index=1), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize(
    ("vendor", "flags", "expected"),
    [
        ("AuthenticAMD", AVX512, "7"),
        ("AuthenticAMD", AVX2, "5"),
        ("AuthenticAMD", "fpu sse2 avx avx2", None),  # AVX2 without FMA: MKL's AVX2 kernels need both
        ("AuthenticAMD", "fpu sse2 avx512f avx2 fma", "5"),  # AVX-512 foundation alone is not Skylake-SP
        ("GenuineIntel", AVX512, None),
        ("", "", None),
    ],
)
def test_mkl_cpu_type(vendor, flags, expected):
    assert cpu_kernels.mkl_cpu_type(vendor, set(flags.split())) == expected


def test_cpuinfo_is_parsed(tmp_path):
    path = write_cpuinfo(tmp_path, "AuthenticAMD", AVX2)
    assert cpu_kernels._cpu_vendor_and_flags(path) == ("AuthenticAMD", set(AVX2.split()))
    assert cpu_kernels._cpu_vendor_and_flags(str(tmp_path / "missing")) == ("", set())


def test_sets_the_code_path_for_amd(tmp_path, monkeypatch):
    monkeypatch.delenv("MKL_DEBUG_CPU_TYPE", raising=False)
    assert cpu_kernels.use_fast_mkl_kernels(write_cpuinfo(tmp_path, "AuthenticAMD", AVX512)) == "7"
    assert os.environ["MKL_DEBUG_CPU_TYPE"] == "7"


def test_leaves_intel_alone(tmp_path, monkeypatch):
    monkeypatch.delenv("MKL_DEBUG_CPU_TYPE", raising=False)
    assert cpu_kernels.use_fast_mkl_kernels(write_cpuinfo(tmp_path, "GenuineIntel", AVX512)) is None
    assert "MKL_DEBUG_CPU_TYPE" not in os.environ


def test_a_user_setting_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("MKL_DEBUG_CPU_TYPE", "4")
    assert cpu_kernels.use_fast_mkl_kernels(write_cpuinfo(tmp_path, "AuthenticAMD", AVX512)) == "4"
    assert os.environ["MKL_DEBUG_CPU_TYPE"] == "4"


def test_importing_modeling_selects_the_code_path():
    env = {k: v for k, v in os.environ.items() if k != "MKL_DEBUG_CPU_TYPE"}
    code = "import os, cpu_kernels, modeling; print(os.environ.get('MKL_DEBUG_CPU_TYPE'))"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                            check=True)
    expected = cpu_kernels.mkl_cpu_type(*cpu_kernels._cpu_vendor_and_flags())
    assert result.stdout.strip().splitlines()[-1] == str(expected)
