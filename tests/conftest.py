"""Shared test fixtures: the project root, the ../shared data folder, and a seeded Paddle."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import NoReturn

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


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


@pytest.fixture
def uncased_vocab() -> Path:
    return require_shared("vocab", "bert-uncased-vocab.txt")
