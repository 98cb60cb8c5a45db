"""Shared test fixtures: the project root, the ../shared data folder and the cpu_ops extension a test needs, a
seeded Paddle, a GPU's answer to Paddle's bf16 question, and the slow tier."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import pytest

if TYPE_CHECKING:
    from kernels.cpu_ops import CpuOps

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# The folders that hold the project's modules beside the recipe at the root, each a package (README, "Layout").
PACKAGES = ("utils", "kernels", "preprocessing", "checkpoints", "training", "finetuning", "inference")


def project_modules() -> list[Path]:
    """The project's Python modules: the root's and its packages' (not tests, benchmarks or scripts)."""
    return sorted([*ROOT.glob("*.py"), *(path for package in PACKAGES for path in (ROOT / package).glob("*.py")
                                           if path.name != "__init__.py")])


# The slow tier: modules whose tests launch training processes, recipes, Slurm jobs, SIGKILL trials or the demo.
# `python -m pytest -m "not slow"` leaves them (and the single tests marked slow in other modules) out, for a quick
# developer loop; CI runs everything.
SLOW_MODULES = {"test_demo", "test_faults", "test_glue_run", "test_gpu_check", "test_gradient_merge_o2",
                "test_pretraining_eval", "test_recipe_features", "test_recipes", "test_run_pretraining_dp",
                "test_run_pretraining_resume", "test_run_sub", "test_slurm_cluster", "test_squad_run"}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: part of the slow tier (deselect with -m 'not slow')")


# The longest test file (README's command blocks in a fresh clone, about 6 minutes) goes first, so that one worker
# runs it while the other takes the rest, instead of it starting last and running alone.
FIRST_MODULES = ("test_readme_commands",)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.module is not None and item.module.__name__ in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: item.module is None or item.module.__name__ not in FIRST_MODULES)  # stable


# Each test starts from the environment the one before it found: the processes that later tests in the same worker
# start inherit os.environ, and an in-process run of an entry script sets variables for its own process on purpose
# (runtime.apply_cpu_tweaks: OMP_NUM_THREADS, and MKL_DEBUG_CPU_TYPE on AMD). A test once left
# MKL_DEBUG_CPU_TYPE=7, MKL's AVX-512 kernels, behind; every training process launched after it on an AVX2-only CPU
# died of SIGILL.
@pytest.fixture(autouse=True)
def restored_environment() -> Iterator[None]:
    before = dict(os.environ)
    yield
    if dict(os.environ) != before:
        os.environ.clear()
        os.environ.update(before)


def shared_dir() -> Path | None:
    """The shared data folder: $PADDLEBERT_SHARED_DIR, else ../shared beside the project root."""
    path = Path(os.environ.get("PADDLEBERT_SHARED_DIR", ROOT.parent / "shared"))
    return path if path.is_dir() else None


def require_shared(*parts: str) -> Path:
    """A path inside ../shared. In CI (CI=true) a missing file fails the test; elsewhere it skips."""
    base = shared_dir()
    path = base.joinpath(*parts) if base else None
    if path is None or not path.exists():
        unavailable(f"shared data {'/'.join(parts)} not found (set PADDLEBERT_SHARED_DIR)")
    return path


def unavailable(message: str) -> NoReturn:
    """What a test does without something it needs: in CI (CI=true) it fails, elsewhere it skips."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


def require_cpu_ops() -> CpuOps:
    """The cpu_ops extension, for a test of its kernels; a machine without a compiler skips the test, but CI
    (CI=true) must build it, so there the test fails."""
    from kernels import cpu_ops

    ops = cpu_ops.load()
    if ops is None:
        unavailable("the cpu_ops extension did not build here (see the cpu_ops warning)")
    return ops


def gpu_with_bf16(monkeypatch: pytest.MonkeyPatch, supported: bool) -> list[str | None]:
    """paddle.amp.is_bfloat16_supported as a GPU answers it (an A100 yes, a V100 no); the CPU build's answer is the
    CPU's own bf16 support. Returns the devices it was asked about."""
    import paddle

    asked = []
    monkeypatch.setattr(paddle.amp, "is_bfloat16_supported", lambda device=None: (asked.append(device), supported)[1])
    return asked


@pytest.fixture
def uncased_vocab() -> Path:
    return require_shared("vocab", "bert-uncased-vocab.txt")
