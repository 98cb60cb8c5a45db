"""Atomic file writes: the project's one way to write an output file, and the fsync helpers under it.

    atomic_write(path, lambda temp: paddle.save(state, temp))
    atomic_write_text(path, text)

The content goes to `.tmp-<name>-<pid>` beside the target, is fsynced and gets the usual permissions (0666
less the umask; paddle.save, safetensors and mkstemp create files 0600), then is renamed over the target and
the folder is fsynced: a kill at any moment leaves either the old file or the complete new one. checkpoint.py
builds its step folders from the same pieces. This module imports no Paddle, so that preprocessing and
plotting use it without paying for Paddle's start-up.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path

TEMP_PREFIX = ".tmp-"


def temp_beside(path: Path, label: str | None = None) -> Path:
    """`.tmp-<label>-<pid>` beside path (label defaults to its name): hidden from discovery, one per process."""
    return path.with_name(f"{TEMP_PREFIX}{label or path.name}-{os.getpid()}")


def fsync_file(path: Path) -> None:
    with open(path, "rb") as written:
        os.fsync(written.fileno())


def fsync_dir(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def write_synced(path: Path, write: Callable[[str], None]) -> None:
    """write(path), then give the file the usual permissions (0666 less the umask; paddle.save and
    safetensors create files 0600) and fsync it: the file is on disk before anything refers to it."""
    write(str(path))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)
    fsync_file(path)


def atomic_write(path: str | os.PathLike, write: Callable[[str], None]) -> Path:
    """The project's one way to write an output file: write(temp) beside path, fsync, rename over path.

    A kill at any moment leaves either the old file or the complete new one, never a torn file. Returns the
    path written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = temp_beside(path)
    try:
        write_synced(temp, write)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    fsync_dir(path.parent)
    return path


def text_writer(text: str) -> Callable[[str], None]:
    return lambda path: Path(path).write_text(text, encoding="utf-8")


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """atomic_write of a UTF-8 text file."""
    return atomic_write(path, text_writer(text))
