"""Every float option of every script refuses NaN and infinity (cli.finite_float).

The parsers are found, not listed: every project file that calls argparse.ArgumentParser (by its syntax tree, so
a docstring's example does not count) is run as __main__ with ArgumentParser.parse_known_args replaced by a stop
that hands back the parser the script built. A float option is one whose type is float or finite_float, or whose
default is a float; each must be typed finite_float (or a range-checked type of cli.py built on it) and refuse
"nan", "inf" and "-inf" with argparse's one line naming the option.
"""

from __future__ import annotations

import argparse
import ast
import runpy
import sys
from pathlib import Path

import pytest

from conftest import PACKAGES, ROOT
from utils import cli


class Captured(BaseException):
    """Raised instead of parsing: carries the parser a script built (BaseException, so no `except Exception` of
    a script swallows it)."""

    def __init__(self, parser: argparse.ArgumentParser):
        super().__init__()
        self.parser = parser


def builds_a_parser(path: Path) -> bool:
    """The file builds an ArgumentParser and parses a command line with one: a script. (benchmarks/machine.py
    builds the benchmarks' parser but parses nothing itself; the scripts that parse with it are walked.)"""
    called = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            function = node.func
            called.add(function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", None))
    return "ArgumentParser" in called and bool(called & {"parse_args", "parse_known_args"})


SCRIPTS = sorted(path.relative_to(ROOT).as_posix() for folder in (ROOT, *(ROOT / package for package in PACKAGES),
                                                                   ROOT / "benchmarks", ROOT / "scripts")
                 for path in folder.glob("*.py") if builds_a_parser(path))


def parser_of(script: str, monkeypatch) -> argparse.ArgumentParser:
    def stop(self, args=None, namespace=None):
        raise Captured(self)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", stop)
    monkeypatch.setattr(sys, "argv", [str(ROOT / script)])
    monkeypatch.syspath_prepend(str((ROOT / script).parent))  # as `python <script>` puts the script's folder first
    try:
        with pytest.raises(Captured) as captured:
            runpy.run_path(str(ROOT / script), run_name="__main__")
    except ModuleNotFoundError as error:  # benchmarks/squad_hf_peer.py needs torch, which no requirements file has
        if (ROOT / f"{error.name}.py").exists():
            raise
        pytest.skip(f"{script} imports {error.name}, not installed here (test_no_option_is_typed_float covers it)")
    return captured.value.parser


def all_parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """parser and its subcommands' parsers, recursively."""
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for subparser in dict.fromkeys(action.choices.values()):
                found += all_parsers(subparser)
    return found


def float_options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [action for action in parser._actions if action.option_strings and
            (action.type in (float, cli.finite_float) or
             (isinstance(action.default, float) and not isinstance(action.default, bool)))]


def test_the_walk_finds_the_entry_scripts():
    assert {"run_pretraining.py", "run_squad.py", "run_glue.py", "lddl_preprocess.py", "create_pretraining_data.py",
            "convert_checkpoint.py", "plot_report.py", "squad_evaluate.py"} <= set(SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_float_option_refuses_nan_and_infinity(script, monkeypatch, capsys):
    parsers = all_parsers(parser_of(script, monkeypatch))
    monkeypatch.undo()  # parse for real from here
    for parser in parsers:
        for action in float_options(parser):
            flag = action.option_strings[-1]
            # cli.finite_float, or one of cli's range-checked types built on it
            assert action.type not in (None, float), f"{script} {flag}: typed {action.type}, which takes nan"
            for text in ("nan", "inf", "-inf", "NaN", "1e999"):
                with pytest.raises(SystemExit) as exit_request:
                    parser.parse_args([f"{flag}={text}"])
                assert exit_request.value.code == 2
                error = capsys.readouterr().err.strip().splitlines()[-1]
                assert error.endswith(f"argument {'/'.join(action.option_strings)}: expected a finite number, got "
                                      f"{text!r}"), error
            assert action.type("0.5") == 0.5


def test_no_option_is_typed_float():
    """The same rule read from the syntax tree of every project file, so that a script whose imports are not
    installed here is checked too: no add_argument(..., type=float)."""
    offenders = []
    for path in sorted(ROOT.rglob("*.py")):
        if "tests" in path.relative_to(ROOT).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
                for keyword in node.keywords:
                    if keyword.arg == "type" and isinstance(keyword.value, ast.Name) and keyword.value.id == "float":
                        offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []


def test_finite_float():
    assert cli.finite_float("1e-4") == 1e-4
    assert cli.finite_float("-2.5") == -2.5
    for text in ("nan", "inf", "-Infinity", "1e400"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected a finite number"):
            cli.finite_float(text)
    with pytest.raises(argparse.ArgumentTypeError, match="expected a number, got 'x'"):
        cli.finite_float("x")
