"""messages.assert_one_line, which the error-message tests use: it passes only a single line with the given
start that names every given part."""

from __future__ import annotations

import pytest

from messages import assert_one_line


def test_a_line_naming_every_part_passes_and_is_returned():
    message = "run.sub: EVAL_FREQ must be an integer >= 1, got '0'\n"
    assert assert_one_line(message, "run.sub: ", "EVAL_FREQ", ">= 1", "'0'") == message[:-1]


@pytest.mark.parametrize("message, prefix, parts", [
    ("run.sub: EVAL_FREQ must be an integer >= 1, got '0'\nTraceback (most recent call last):", "run.sub: ",
     ("EVAL_FREQ",)),  # a second line
    ("", "run.sub: ", ()),  # nothing at all
    ("run_squad.sh: EVAL_FREQ must be an integer >= 1, got '0'", "run.sub: ", ("EVAL_FREQ",)),  # another program
    ("run.sub: EVAL_FREQ must be an integer >= 1, got '0'", "run.sub: ", ("EVAL_FREQ", "'-1'")),  # another value
])
def test_a_second_line_another_start_or_a_missing_part_fails(message, prefix, parts):
    with pytest.raises(AssertionError):
        assert_one_line(message, prefix, *parts)
