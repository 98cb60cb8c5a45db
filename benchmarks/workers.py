"""Contenders in worker processes, driven one request at a time so that they take turns on the CPU.

Protocol, one JSON object per line: the worker builds its models, prints {"ready": true} on stdout, then
answers each request line on stdin with one reply line, until stdin closes. A worker's stdout carries only
these replies (serve() sends whatever the libraries print to stderr), and its stderr goes to a file that the
driver reads at the end: to_static Paddle prints the same warnings thousands of times, which would bury the
figures, so they are captured and counted instead (warning_report).

This module uses the standard library only: the workers also run in the peers' venvs.
"""

from __future__ import annotations

import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable

# glog's warning lines (W1201 09:54:25.148869 26801 eager_utils.cc:3584] message) and Python's warnings
# (path.py:241: UserWarning: message); the capture groups are the message without time, thread or path.
_GLOG_WARNING = re.compile(r"^W\d{4} [\d:.]+ +\d+ (\S+\] .*)$")
_PYTHON_WARNING = re.compile(r"^\S+:\d+: (\w*Warning: .*)$")
# A contender's threads keep spinning for a while after its turn (the OpenMP runtime under Paddle's CPU kernels
# waits 200 ms before it sleeps), and on a few cores they slow the next contender's first pass, in this process or
# another: one ORT fp32 GEMM [3072, 768] x [768, 3072] took 47.5 ms right after a Paddle bf16 predictor's run and
# 33.2 ms with no Paddle run before it, 34.1 ms 0.2 s after one (2 threads, AMD EPYC Zen 5). So a turn starts
# SETTLE_SECONDS after the one before it ended.
SETTLE_SECONDS = 0.3


def serve(build: Callable[[], Callable[[dict], dict]]) -> None:
    """Worker side: build() returns the function that answers a request; say ready, then answer every line."""
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # what the libraries print must not mix with the replies
    answer = build()
    print(json.dumps({"ready": True}), file=replies, flush=True)
    for line in sys.stdin:
        print(json.dumps(answer(json.loads(line))), file=replies, flush=True)


class WorkerProcess:
    """Driver side: one worker process; request(message) returns its reply."""

    def __init__(self, name: str, command: list[str], env: dict[str, str] | None = None, cwd: str | None = None):
        self.name = name
        # Appending: the worker's writes land at the end even after stderr_text() has moved the shared offset.
        self.stderr = tempfile.TemporaryFile(mode="a+", encoding="utf-8", errors="replace")
        self.process = subprocess.Popen(command, env=env, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=self.stderr, text=True)
        self._reply()

    def _reply(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.name} worker exited with code {self.process.wait()}:\n"
                               f"{self.stderr_text()[-3000:]}")
        return json.loads(line)

    def request(self, message: dict) -> dict:
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()
        return self._reply()

    def stderr_text(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read()

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            self.process.wait()


def take_turn(worker: WorkerProcess, message: dict) -> dict:
    """Driver side: the worker's reply to a timed request, sent once the previous turn's threads have settled."""
    time.sleep(SETTLE_SECONDS)
    return worker.request(message)


def count_warnings(lines: Iterable[str]) -> collections.Counter:
    """Warning message -> how often it appears among the lines (glog and Python warnings)."""
    counts = collections.Counter()
    for line in lines:
        match = _GLOG_WARNING.match(line) or _PYTHON_WARNING.match(line)
        if match:
            counts[match.group(1)] += 1
    return counts


def warning_report(workers: Iterable[WorkerProcess]) -> str:
    """One line per worker: how many warnings its stderr held and the most frequent one."""
    lines = []
    for worker in workers:
        counts = count_warnings(worker.stderr_text().splitlines())
        total = sum(counts.values())
        line = f"{worker.name}: {total} warning lines captured from stderr"
        if counts:
            message, count = counts.most_common(1)[0]
            line += f" ({len(counts)} distinct; most frequent, {count}x: {message[:160]})"
        lines.append(line)
    return "\n".join(lines)
