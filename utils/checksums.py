"""File checksums: the SHA-256 of a file's bytes, by which exports, checkpoints and training files are told apart."""

from __future__ import annotations

import hashlib
import os


def sha256_of_file(path: str | os.PathLike) -> str:
    """The SHA-256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as reader:
        for block in iter(lambda: reader.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
