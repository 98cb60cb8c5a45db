"""Helpers shared by several test files."""

from __future__ import annotations

from pathlib import Path

# ---------------------------------------------------------------------------------------------------------------
# Preprocessing and data

UINT64 = 2**64 - 1


def splitmix64(value: int) -> int:
    """SplitMix64's output function (Steele, Lea & Flood 2014, as in Vigna's splitmix64.c), in Python integers."""
    value = (value + 0x9E3779B97F4A7C15) & UINT64
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & UINT64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & UINT64
    return value ^ (value >> 31)


def documents_kept(corpus_file: Path, seed: int, sample_ratio: float) -> set[int]:
    """The documents (line numbers of a one-document-per-line file, the only file of its corpus) that the rule in
    preprocess_pipeline's docstring keeps: the key of the document at byte offset o of file 0 is
    SplitMix64(SplitMix64(SplitMix64(seed) ^ 0) ^ o); it is kept when the top 53 bits of SplitMix64(key), over
    2**53, are below the ratio."""
    kept, offset = set(), 0
    for line_number, line in enumerate(corpus_file.read_bytes().splitlines(keepends=True)):
        key = splitmix64(splitmix64(splitmix64(seed) ^ 0) ^ offset)
        if (splitmix64(key) >> 11) / 2**53 < sample_ratio:
            kept.add(line_number)
        offset += len(line)
    return kept
