"""Command-line helpers shared by the entry scripts: argparse types (each option's range is checked by its type,
so a bad value is argparse's one line naming the flag), the Benchmark group, --report-file's default, help
formatting, and one-line errors.

Every entry script ends with `sys.exit(cli.run_main(main, "script.py"))`: the project's own errors
(ValueError, and OSError such as a missing file or a full disk) and a Ctrl-C print as one line naming the script,
and PADDLEBERT_DEBUG=1 brings the traceback back. (A SystemExit with a message already prints as one line.)
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import traceback
from collections.abc import Callable, Iterator


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's "(default: X)" after each option's help, except where the default is None: such an option is
    off, or its value is decided later (and its help says how), so "(default: None)" would only mislead."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None:
            return action.help
        return super()._get_help_string(action)


def str_to_bool(text: str) -> bool:
    """argparse type for NVIDIA's `--show-config true|false` style flags (distutils' strtobool is gone)."""
    value = text.strip().lower()
    if value in ("1", "true", "t", "yes", "y", "on"):
        return True
    if value in ("0", "false", "f", "no", "n", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def finite_float(text: str) -> float:
    """argparse type of every float option of every script: a finite number. float() takes "nan" and "inf",
    and every range check is False for NaN (nan <= 0, 0 <= nan <= 1), so without this a NaN learning rate
    trains to an all-NaN model and exits 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def file_name(text: str) -> str:
    """argparse type of --model-prefix: one file name, no folder part. A prefix "../x" or "sub/x" would put the
    files outside the folder whose atomic save and rotation guard them."""
    separators = {os.sep, os.altsep} - {None}
    if text in ("", ".", "..") or any(separator in text for separator in separators) or "\0" in text:
        raise argparse.ArgumentTypeError(f"expected a file name without a folder part, got {text!r}")
    return text


def _finite_in(accepts: Callable[[float], bool], expected: str) -> Callable[[str], float]:
    """An argparse type: a finite_float for which accepts(value) holds, else "expected <expected>"."""

    def parse(text: str) -> float:
        value = finite_float(text)
        if not accepts(value):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    return parse


# The range-checked float types of the options (each a finite_float first, so NaN is refused as such).
positive_float = _finite_in(lambda value: value > 0, "a positive number")
non_negative_float = _finite_in(lambda value: value >= 0, "a number >= 0")
unit_interval = _finite_in(lambda value: 0 <= value <= 1, "a number in [0, 1]")
# A moment's decay rate: 1 would never forget the first gradient, and Adam's bias correction would divide by 0.
decay_rate = _finite_in(lambda value: 0 <= value < 1, "a number in [0, 1)")


def _whole_number_in(minimum: int, limit: int | None = None) -> Callable[[str], int]:
    """An argparse type: a whole number in [minimum, limit) (no upper bound without limit)."""
    expected = f"in [{minimum}, {limit - 1}]" if limit is not None else f">= {minimum}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < minimum or (limit is not None and value >= limit):
            raise argparse.ArgumentTypeError(f"expected a whole number {expected}, got {text!r}")
        return value

    return parse


positive_int = _whole_number_in(1)
non_negative_int = _whole_number_in(0)
# --seed: NumPy's legacy seeding (np.random.seed), which every trainer calls with it, takes [0, 2**32), and
# Paddle's generator takes no negative seed (a pybind TypeError rather than a message).
random_seed = _whole_number_in(0, 2**32)


def checkpoint_step(text: str) -> None | str | int:
    """argparse type of --last-step-of-checkpoint: None (the string NVIDIA's scripts pass), auto or a step >= 1."""
    if text == "None":
        return None
    if text == "auto":
        return text
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected None, auto or a step >= 1, got {text!r}")
    return int(text)


def add_benchmark_arguments(parser: argparse.ArgumentParser, benchmark_help: str) -> None:
    """The Benchmark group: --benchmark (what it times is the script's, in benchmark_help), --benchmark-steps and
    --benchmark-warmup-steps, with NVIDIA's names and defaults."""
    group = parser.add_argument_group("Benchmark")
    group.add_argument("--benchmark", action="store_true", help=benchmark_help)
    group.add_argument("--benchmark-steps", type=positive_int, default=20, help="timed steps")
    group.add_argument("--benchmark-warmup-steps", type=non_negative_int, default=20,
                       help="untimed steps before them")


def default_report_file(args: argparse.Namespace) -> None:
    """--report-file, when not given: <output-dir>/report.json, each run's report beside its other outputs (NVIDIA's
    ./report.json is one file for every run started in a folder)."""
    if args.report_file is None:
        args.report_file = os.path.join(args.output_dir, "report.json")


# The shell's status for a process ended by SIGINT (128 + 2).
INTERRUPTED_STATUS = 130


def escape_unencodable_output() -> None:
    """Print a path whose name is not UTF-8 (Linux keeps such bytes as surrogates) with those bytes escaped, as
    stderr already does, instead of failing the print with a UnicodeEncodeError about the codec."""
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="backslashreplace")


def run_main(main: Callable[[], int | None], script: str) -> int:
    """Run an entry script's main(); the project's errors become `<script>: <message>` on stderr, exit 1, and a
    Ctrl-C (KeyboardInterrupt, whose message, if any, says what was lost) one such line, exit 130."""
    escape_unencodable_output()
    try:
        return main() or 0
    except (OSError, ValueError) as error:
        if os.environ.get("PADDLEBERT_DEBUG"):
            traceback.print_exc()
        print(f"{script}: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as interrupt:
        if os.environ.get("PADDLEBERT_DEBUG"):
            traceback.print_exc()
        print(f"{script}: {str(interrupt) or 'interrupted (Ctrl-C)'}", file=sys.stderr)
        return INTERRUPTED_STATUS


@contextlib.contextmanager
def output_to(log_file: str | os.PathLike, mode: str = "wb") -> Iterator[None]:
    """This process's stdout and stderr, C++ output too (a compiler's, Paddle's), into log_file meanwhile ("wb":
    a new file, "ab": appended), then back where they were."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    try:
        with open(log_file, mode) as target:
            os.dup2(target.fileno(), 1)
            os.dup2(target.fileno(), 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for descriptor, saved_descriptor in zip((1, 2), saved, strict=True):
            os.dup2(saved_descriptor, descriptor)
            os.close(saved_descriptor)
