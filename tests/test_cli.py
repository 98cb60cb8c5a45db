"""cli.py's argparse types (each range's edges, one in and one out) and the entry scripts' --help."""

from __future__ import annotations

import argparse
import contextlib
import io

import pytest

import run_glue
import run_pretraining
import run_squad
from utils import cli


@pytest.mark.parametrize(("parse", "accepted", "refused", "expected"), [
    (cli.positive_float, ["1e-9", "3"], ["0", "-1e-9"], "expected a positive number"),
    (cli.non_negative_float, ["0", "0.5"], ["-1e-9"], "expected a number >= 0"),
    (cli.unit_interval, ["0", "1"], ["-0.01", "1.01"], r"expected a number in \[0, 1\]"),
    (cli.decay_rate, ["0", "0.999"], ["1", "-0.1"], r"expected a number in \[0, 1\)"),
    (cli.positive_int, ["1", "7"], ["0", "-3"], "expected a whole number >= 1"),
    (cli.non_negative_int, ["0", "5"], ["-1"], "expected a whole number >= 0"),
    (cli.random_seed, ["0", str(2**32 - 1)], ["-1", str(2**32)], r"expected a whole number in \[0, 4294967295\]"),
])
def test_range_types_accept_their_range_and_refuse_its_edges(parse, accepted, refused, expected):
    for text in accepted:
        assert parse(text) == float(text)
    for text in refused:
        with pytest.raises(argparse.ArgumentTypeError, match=f"^{expected}, got {text!r}$"):
            parse(text)


def test_float_ranges_refuse_nan_as_not_finite_and_whole_numbers_refuse_fractions():
    for parse in (cli.positive_float, cli.non_negative_float, cli.unit_interval, cli.decay_rate):
        with pytest.raises(argparse.ArgumentTypeError, match="expected a finite number, got 'nan'"):
            parse("nan")
    for parse in (cli.positive_int, cli.random_seed):
        with pytest.raises(argparse.ArgumentTypeError, match="expected a whole number, got '2.5'"):
            parse("2.5")


def test_checkpoint_step():
    assert cli.checkpoint_step("None") is None
    assert cli.checkpoint_step("auto") == "auto"
    assert cli.checkpoint_step("600") == 600
    for text in ("0", "-1", "latest", "1.5", ""):
        with pytest.raises(argparse.ArgumentTypeError, match=f"expected None, auto or a step >= 1, got {text!r}"):
            cli.checkpoint_step(text)


def help_text(parser: argparse.ArgumentParser) -> str:
    output = io.StringIO()
    with contextlib.redirect_stdout(output), pytest.raises(SystemExit):
        parser.parse_args(["--help"])
    return output.getvalue()


@pytest.mark.parametrize("script", [run_pretraining, run_squad, run_glue])
def test_help_never_says_default_none(script):
    # An option whose default is None is off or decided later, and its help says how ("--report-file ...;
    # default <output-dir>/report.json"); argparse's own "(default: None)" after that only misleads.
    text = help_text(script.build_parser())
    assert "(default: None)" not in text
    # The defaults that mean something are still shown.
    assert "(default: 42)" in text  # --seed
    assert "--report-file" in text and "report.json" in text
