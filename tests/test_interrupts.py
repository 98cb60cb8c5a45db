"""tests/interrupts.py, the helpers of the signal tests (issue 41): a paused child reacts to the signal whichever of
its threads the kernel hands it to, and a child that is not where the test expects it fails the test with a message
that says what happened, instead of a check of an exit status that no signal caused."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from conftest import ROOT
from interrupts import ChildOutput, signal_while_running

# A child that pauses (interrupts.pause_forever) with SIGINT blocked in its main thread, so that the kernel has to
# hand a SIGINT to its other thread, as it may hand one to a thread of Paddle's or the tokenizers'. It starts with
# SIGINT ignored, as a shell's background job does, which interrupts.answer_ctrl_c undoes.
PAUSED_WITH_A_SECOND_THREAD = """
import os, signal, sys, threading
sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "tests")]
signal.signal(signal.SIGINT, signal.SIG_IGN)
import interrupts
interrupts.answer_ctrl_c()
threading.Thread(target=threading.Event().wait, daemon=True).start()
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
try:  # the handler may run as soon as the line is out, before the pause
    interrupts.say("paused")
    interrupts.pause_forever()
except KeyboardInterrupt:
    interrupts.say("interrupted")
    sys.exit(130)
"""


def start(code: str) -> tuple[subprocess.Popen, ChildOutput]:
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             cwd=ROOT)
    return child, ChildOutput(child)


def test_a_paused_child_ends_on_a_signal_that_another_of_its_threads_receives():
    child, output = start(PAUSED_WITH_A_SECOND_THREAD)
    try:
        assert output.wait_for_line("paused", 60, "the pause") == "paused\n"
        signal_while_running(child, signal.SIGINT, "paused")
        output.wait_for_line("interrupted", 60, "the KeyboardInterrupt")
        assert output.finish(30) == ("paused\ninterrupted\n", "")
        assert child.returncode == 130
    finally:
        child.kill()
        child.wait()


def test_a_job_that_finished_before_the_signal_fails_the_test_saying_so():
    child, output = start("raise SystemExit(3)")
    output.finish(60)
    with pytest.raises(AssertionError, match=r"^the job finished before the signal: it exited with status 3 while it "
                                             r"should have been paused in stage 1$"):
        signal_while_running(child, signal.SIGINT, "paused in stage 1")


def test_a_job_that_ends_before_the_awaited_line_fails_the_test_with_its_status_and_output():
    child, output = start("print('tokenized'); raise SystemExit(3)")
    with pytest.raises(AssertionError, match=r"^the job ended \(status 3\) before the pause:\ntokenized\n$"):
        output.wait_for_line("paused", 60, "the pause")


def test_a_job_that_never_writes_the_awaited_line_fails_the_test_at_the_deadline():
    child, output = start(PAUSED_WITH_A_SECOND_THREAD)
    try:
        output.wait_for_line("paused", 60, "the pause")
        with pytest.raises(AssertionError, match=r"^timed out after 0.5 s waiting for the resumption:\npaused\n$"):
            output.wait_for_line("resumed", 0.5, "the resumption")
        assert child.poll() is None
    finally:
        child.kill()
        child.wait()
