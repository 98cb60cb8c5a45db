"""Worker processes that end with their parent: the loader's, the preprocessing pool's and downstream.py's."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def end_with_parent(parent_pid: int) -> None:
    """Make this worker end when the process that started it dies, whatever killed it (SIGKILL, the OOM killer): on
    Linux the kernel sends the worker SIGKILL (prctl PR_SET_PDEATHSIG). A parent that died before prctl took effect
    is caught by the check after it; elsewhere a worker loop may poll os.getppid() itself."""
    with contextlib.suppress(OSError, AttributeError):  # no libc with prctl: not Linux
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:
        os._exit(0)
