"""Command-line helpers shared by the entry scripts: argparse types, checks and help, and one-line errors.

Every entry script ends with `sys.exit(cli.run_main(main, "script.py"))`: the project's own errors
(ValueError, and OSError such as a missing file or a full disk) and a Ctrl-C print as one line naming the script,
and PADDLEBERT_DEBUG=1 brings the traceback back. (A SystemExit with a message already prints as one line.)
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import traceback
from collections.abc import Callable


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


def check_at_least(parser: argparse.ArgumentParser, args: argparse.Namespace, *names: str, minimum: int = 1) -> None:
    """parser.error (one line naming the flag) unless each named option is unset (None) or >= minimum."""
    for name in names:
        value = getattr(args, name)
        if value is not None and value < minimum:
            parser.error(f"--{name.replace('_', '-')} must be at least {minimum}, got {value}")


# NumPy's legacy seeding (np.random.seed), which every trainer calls with --seed, takes [0, 2**32).
SEED_LIMIT = 2**32


def check_seed(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """parser.error unless --seed is in [0, 2**32): NumPy rejects other seeds, and Paddle's generator takes no
    negative ones (a pybind TypeError rather than a message)."""
    if not 0 <= args.seed < SEED_LIMIT:
        parser.error(f"--seed must be in [0, {SEED_LIMIT - 1}], got {args.seed}")


# The shell's status for a process ended by SIGINT (128 + 2).
INTERRUPTED_STATUS = 130


def run_main(main: Callable[[], int | None], script: str) -> int:
    """Run an entry script's main(); the project's errors become `<script>: <message>` on stderr, exit 1, and a
    Ctrl-C (KeyboardInterrupt, whose message, if any, says what was lost) one such line, exit 130."""
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
