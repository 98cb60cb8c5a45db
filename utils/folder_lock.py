"""One run per output folder: the folder is checked for use, then locked for the life of the process.

    folder_lock.hold(args.output_dir, "--output-dir")

`prepare_output_folder` finds an unusable folder before any work is done (a regular file, a symlink to nothing,
a read-only file system) and creates it. `hold` then takes an exclusive `fcntl.flock` on `<folder>/.paddlebert.lock`
and keeps the descriptor open until the process ends: the kernel releases the lock however the process dies
(SIGKILL, the OOM killer), so no stale lock is ever left to clear by hand. The holder writes its PID, host and
start time into the file, so that a second run can stop with one line naming them. The lock file itself is never
deleted: unlinking it while another process opens it would let two runs hold two different files' locks.

Network file systems: on NFS the Linux client emulates flock with POSIX byte-range locks, which the server
arbitrates, so two hosts exclude each other (a crashed client's lock lasts until the server's lease expires,
about 90 s on NFSv4; a mount with `nolock` or `local_lock=flock` keeps locks on one host). Lustre arbitrates
flock across clients only when mounted with `-o flock`; under `-o localflock` the lock holds between processes
of one node only, and without either option (older releases' default) flock fails with ENOSYS. Where the file
system cannot lock at all, the run says so in one line and goes on unlocked.

This module imports no Paddle, so that preprocessing can use it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import sys
import time
from pathlib import Path

LOCK_NAME = ".paddlebert.lock"
# flock's errors on a file system that does not lock (Lustre without -o flock: ENOSYS; some FUSE/SMB: EOPNOTSUPP,
# ENOLCK), as opposed to EWOULDBLOCK, which means another process holds the lock.
_CANNOT_LOCK = (errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOLCK)
# How long to wait for a holder that has just taken the lock to write its PID into the file.
_HOLDER_WAIT_SECONDS = 2.0

# folder (resolved) -> open descriptor of its lock file, until release() or the end of the process. A second hold
# of the same folder by the same process (a script's main run twice from Python) keeps the one lock.
_held: dict[str, int] = {}


def _close_in_child() -> None:
    """In a forked child (a loader worker): close this process's copies of the lock descriptors, so that the lock
    lives exactly as long as the process that took it, not until its last worker has gone too. (The lock is the
    open file's; closing a copy leaves the parent's in force.)"""
    for descriptor in _held.values():
        with contextlib.suppress(OSError):
            os.close(descriptor)
    _held.clear()


os.register_at_fork(after_in_child=_close_in_child)


class FolderInUse(ValueError):
    """Another live process holds the folder's lock; the message names the folder, its PID and host."""


def prepare_output_folder(folder: str | os.PathLike, flag: str) -> Path:
    """Create folder (and its parents) unless it is a folder already; ValueError naming flag and folder if it is
    a regular file, a symlink to nothing, or cannot be created."""
    folder = Path(folder)
    if folder.is_symlink() and not folder.exists():
        raise ValueError(f"{flag} {folder}: a symlink to {os.readlink(folder)}, which does not exist")
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{flag} {folder}: not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ValueError(f"{flag} {folder}: cannot create the folder ({error.strerror or error})") from None
    return folder


def check_writable(folder: Path, flag: str) -> None:
    """ValueError naming flag and folder unless a file can be created in folder (a read-only file system, a full
    one, missing permissions: found now rather than at the first save)."""
    probe = folder / f".tmp-probe-{os.getpid()}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        raise ValueError(f"{flag} {folder}: not writable ({error.strerror or error})") from None


def _holder(lock_file: Path) -> str:
    """"PID p on host h since t" from the lock file, waiting briefly for a holder that has just taken the lock."""
    deadline = time.monotonic() + _HOLDER_WAIT_SECONDS
    while True:
        try:
            fields = lock_file.read_text(encoding="utf-8", errors="replace").split()
        except OSError:
            fields = []
        if len(fields) >= 3 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    if len(fields) < 3:
        return "a process that has not written its PID"
    pid, host, since = fields[:3]
    return f"PID {pid} on host {host} since {since}"


def hold(folder: str | os.PathLike, flag: str) -> Path:
    """Check and create folder (prepare_output_folder), then lock it until release() or the end of the process.

    FolderInUse if another process holds it; ValueError naming flag and folder if it cannot be used. Returns the
    lock file."""
    folder = prepare_output_folder(folder, flag)
    key = os.path.realpath(folder)
    lock_file = folder / LOCK_NAME
    if key in _held:
        return lock_file
    try:
        descriptor = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as error:
        raise ValueError(f"{flag} {folder}: not writable ({error.strerror or error})") from None
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        os.close(descriptor)
        if error.errno in _CANNOT_LOCK:
            print(f"Warning: {flag} {folder}: its file system cannot lock files ({error.strerror}); nothing stops "
                  "a second run from writing into it (on Lustre, mount with -o flock)", file=sys.stderr, flush=True)
            return lock_file
        if error.errno not in (errno.EWOULDBLOCK, errno.EACCES):
            raise ValueError(f"{flag} {folder}: cannot lock {LOCK_NAME} ({error.strerror or error})") from None
        raise FolderInUse(f"{flag} {folder}: in use by another run ({_holder(lock_file)}); one run per folder: "
                          "wait for it to end, or write to another folder") from None
    os.ftruncate(descriptor, 0)
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime())
    os.write(descriptor, f"{os.getpid()} {socket.gethostname()} {since}\n".encode())
    _held[key] = descriptor
    return lock_file


def release(folder: str | os.PathLike) -> None:
    """Give up this process's lock of folder (if it holds one), for a run that ends but whose process goes on."""
    descriptor = _held.pop(os.path.realpath(folder), None)
    if descriptor is not None:
        os.close(descriptor)  # closing the last descriptor of the open file releases its flock
