"""Assertions on the project's error messages: by their parts, so that a message can be reworded without breaking
its tests."""

from __future__ import annotations


def assert_one_line(message: str, prefix: str, *parts: object) -> str:
    """message (an error's text, or a program's stderr with its final newline) is one line that starts with prefix
    (the program, or the file at fault) and names each of parts (the file, the line, the flag, the value, the
    rule); returns the line. Checking the parts and not the whole text lets a message be reworded without
    breaking its tests."""
    line = message.removesuffix("\n")
    assert line and "\n" not in line, f"not one line: {message!r}"
    assert line.startswith(prefix), f"{line!r} does not start with {prefix!r}"
    missing = [str(part) for part in parts if str(part) not in line]
    assert not missing, f"{line!r} does not name {missing}"
    return line
