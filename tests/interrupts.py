"""Signalling a child process at a known point of its work (issue 41), for the tests of Ctrl-C, SIGKILL and SIGTERM.

A test must not decide when to signal by a fixed sleep: whether the child is still in the phase by then depends on
the CPU and its load. Instead the child runs its entry script through a `python -c` wrapper that patches a
function of the phase (no test hook in the product code) so that, once inside the phase, the child says so (a
line on stdout, or a mark file from a pool worker) and then stays there until the signal arrives. The test waits
for that word with a deadline, checks that the child is still running, and only then signals.

Two halves: what the wrapped child runs (`say`, `answer_ctrl_c`, `pause_forever`, `tokenize_range_then_pause`; a
spawned pool worker imports this module by name, so it imports nothing of pytest), and what the test runs
(`wait_for`, `ChildOutput`, `signal_while_running`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, NoReturn

from preprocessing import preprocess_pipeline

# ---------------------------------------------------------------------------------------------------------------
# In the child


def say(line: str) -> None:
    """Write line to stdout at once, past Python's buffer (block-buffered on a pipe), for the test that waits for
    it."""
    os.write(1, f"{line}\n".encode())


def answer_ctrl_c() -> None:
    """Give SIGINT Python's KeyboardInterrupt, as a program started from a terminal has it. A program started in the
    background by a shell without job control (`pytest &` in a script, nohup, some CI runners) inherits SIGINT
    ignored, and Python then installs no handler of its own: the test's Ctrl-C would do nothing."""
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pause_forever() -> NoReturn:
    """Block the calling thread until a signal handler raises (Python's KeyboardInterrupt on Ctrl-C, or the second
    Ctrl-C of run_pretraining's StopRequest) or the process is killed. Short sleeps in a loop, not signal.pause() or
    Event.wait(): the kernel may deliver the signal to any thread of the process (Paddle's, the tokenizers'), and a
    main thread blocked in those would not wake up for it; Python runs the handler in the main thread at its next
    bytecode, which this loop reaches every 50 ms."""
    while True:
        time.sleep(0.05)


# The mark file folder of tokenize_range_then_pause, passed to the pool workers in the environment.
MARKS_VARIABLE = "PADDLEBERT_TEST_MARKS"
# preprocess_pipeline's own stage 1 task, taken before a wrapper replaces it (a forked worker would inherit the
# replacement; a spawned one imports the module afresh).
_tokenize_range = preprocess_pipeline.tokenize_range


def tokenize_range_then_pause(task: preprocess_pipeline.ReadTask, settings: preprocess_pipeline.PipelineSettings,
                              work_dir: str) -> NoReturn:
    """Stage 1's task in a pool worker as far as its end: the range tokenized and spilled into the work folder, then
    `tokenized-<pid>` in $PADDLEBERT_TEST_MARKS, then held there, so that the run cannot leave stage 1. The
    workers ignore Ctrl-C (preprocess_pipeline._start_pool_worker); their parent kills them."""
    _tokenize_range(task, settings, work_dir)
    Path(os.environ[MARKS_VARIABLE], f"tokenized-{os.getpid()}").touch()
    pause_forever()


# ---------------------------------------------------------------------------------------------------------------
# In the test


def wait_for(condition: Callable[[], object], seconds: float, what: str) -> None:
    """Poll condition every 0.1 s until it holds; fail naming what after seconds."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {seconds} s waiting for {what}"
        time.sleep(0.1)


class ChildOutput:
    """A child's stdout and stderr (pipes, text mode), read line by line by two threads as the child writes them:
    a test can wait for a line with a deadline (a bare readline waits forever for a child that hangs), and a full
    pipe never stalls the child."""

    def __init__(self, process: subprocess.Popen):
        self.process = process
        self._changed = threading.Condition()
        self._lines: dict[str, list[str]] = {"stdout": [], "stderr": []}
        self._open = {"stdout", "stderr"}
        self._seen = 0  # stdout lines that wait_for_line has looked at
        self._readers = [threading.Thread(target=self._read, args=(name, getattr(process, name)), daemon=True)
                         for name in ("stdout", "stderr")]
        for reader in self._readers:
            reader.start()

    def _read(self, name: str, stream: IO[str]) -> None:
        for line in stream:
            with self._changed:
                self._lines[name].append(line)
                self._changed.notify_all()
        with self._changed:
            self._open.discard(name)
            self._changed.notify_all()

    def wait_for_line(self, prefix: str, seconds: float, what: str) -> str:
        """The next stdout line that starts with prefix. Fails if the child's stdout ends first (the child
        finished, or died: its status and output are in the message) or after seconds."""
        deadline = time.monotonic() + seconds
        with self._changed:
            while True:
                lines = self._lines["stdout"]
                for index in range(self._seen, len(lines)):
                    if lines[index].startswith(prefix):
                        self._seen = index + 1
                        return lines[index]
                self._seen = len(lines)
                if "stdout" not in self._open:
                    break
                left = deadline - time.monotonic()
                assert left > 0, f"timed out after {seconds} s waiting for {what}:\n{self.tail()}"
                self._changed.wait(left)
        try:
            status = self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            status = "none yet: its stdout is closed but it runs on"
        raise AssertionError(f"the job ended (status {status}) before {what}:\n{self.tail()}")

    def finish(self, seconds: float) -> tuple[str, str]:
        """(stdout, stderr) once the child has exited and both pipes are closed, each at most seconds away."""
        self.process.wait(timeout=seconds)
        for reader in self._readers:
            reader.join(seconds)
        with self._changed:
            return "".join(self._lines["stdout"]), "".join(self._lines["stderr"])

    def tail(self) -> str:
        """The last 3000 characters of what the child has written so far, stdout then stderr."""
        with self._changed:  # an RLock: wait_for_line calls this holding it
            return ("".join(self._lines["stdout"]) + "".join(self._lines["stderr"]))[-3000:]


def signal_while_running(process: subprocess.Popen, signum: int, phase: str, group: bool = False) -> None:
    """Send signum to process (to its whole process group if group) if it is still running; if it has exited, fail
    saying so, rather than go on to check an exit status that the signal did not cause. The caller has seen the
    process enter the phase, where it stays until signalled."""
    status = process.poll()
    assert status is None, (f"the job finished before the signal: it exited with status {status} while it should "
                            f"have been {phase}")
    if group:
        os.killpg(process.pid, signum)
    else:
        process.send_signal(signum)
