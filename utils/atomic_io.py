"""Atomic file writes: the project's one way to write an output file, and the fsync helpers under it.

    atomic_write(path, lambda temp: paddle.save(state, temp))
    atomic_write_text(path, text)
    atomic_write_set({model: save_model, twin: None})      # files that belong together, as one unit

The content goes to `.tmp-<name>-<pid>` beside the target, is fsynced and gets the usual permissions (0666
less the umask; paddle.save, safetensors and mkstemp create files 0600), then is renamed over the target and
the folder is fsynced: a kill at any moment leaves either the old file or the complete new one. checkpoint.py
builds its step folders from the same pieces. This module imports no Paddle, so that preprocessing and
plotting use it without paying for Paddle's start-up.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping
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
    except BaseException as error:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        if isinstance(error, OSError) and error.errno is not None:  # a full disk, most often: name the target
            raise OSError(error.errno, f"{path}: not written, any earlier file is unchanged "
                          f"({error.strerror or error})") from error
        raise
    fsync_dir(path.parent)
    return path


def atomic_write_set(writes: Mapping[str | os.PathLike, Callable[[str], None] | None]) -> list[Path]:
    """Write a set of files that belong together (a model and its .safetensors twin, SQuAD's prediction files) as
    one unit; a None writer means the file must not stand beside the others (a twin this run does not write).

    Every file is first written and fsynced beside its target; if any write fails (a full disk), the temps go and
    every old file is left as it was, and the OSError names the file. Only then are the old files removed and the
    new ones renamed in, so that a kill during the swap leaves a part of the new set, never a new file beside an
    old one it does not match. All targets must be in one folder. Returns the paths written."""
    targets = {Path(path): write for path, write in writes.items()}
    folder = next(iter(targets)).parent
    if any(path.parent != folder for path in targets):
        raise ValueError(f"atomic_write_set: the files are not in one folder: {', '.join(map(str, targets))}")
    folder.mkdir(parents=True, exist_ok=True)
    temps: dict[Path, Path] = {}
    try:
        for path, write in targets.items():
            if write is not None:
                temps[path] = temp_beside(path)
                try:
                    write_synced(temps[path], write)
                except OSError as error:
                    raise OSError(error.errno, f"{path}: not written, so none of {', '.join(p.name for p in targets)} "
                                  f"was replaced ({error.strerror or error})") from error
    except BaseException:
        for temp in temps.values():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
        raise
    for path in targets:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    fsync_dir(folder)
    for path, temp in temps.items():
        os.replace(temp, path)
    fsync_dir(folder)
    return list(temps)


def text_writer(text: str) -> Callable[[str], None]:
    return lambda path: Path(path).write_text(text, encoding="utf-8")


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """atomic_write of a UTF-8 text file."""
    return atomic_write(path, text_writer(text))
