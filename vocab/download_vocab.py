"""Download the standard BERT WordPiece vocabulary files (Google's releases, as mirrored on the Hugging Face Hub).

    python vocab/download_vocab.py                      # uncased and cased into vocab/
    python vocab/download_vocab.py multilingual-cased --output-dir /data/vocab

Each file is checked (line count, the five special tokens, and the SHA-256 where it is recorded below) before it is
moved into place, so a truncated or wrong download never lands under the final name.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tokenizer import load_vocab  # noqa: E402  (the repo root is put on the path just above)


@dataclass(frozen=True)
class VocabSource:
    url: str
    lines: int
    sha256: str | None  # None where no copy was at hand to record it from


# The base and large models of one casing share their vocab file.
VOCABS = {
    "uncased": VocabSource(
        "https://huggingface.co/google-bert/bert-base-uncased/resolve/main/vocab.txt",
        30522,
        "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3",
    ),
    "cased": VocabSource("https://huggingface.co/google-bert/bert-base-cased/resolve/main/vocab.txt", 28996, None),
    "multilingual-cased": VocabSource(
        "https://huggingface.co/google-bert/bert-base-multilingual-cased/resolve/main/vocab.txt", 119547, None
    ),
    "chinese": VocabSource("https://huggingface.co/google-bert/bert-base-chinese/resolve/main/vocab.txt", 21128, None),
}


def download(name: str, output_dir: Path) -> Path:
    """Fetch one vocab to output_dir/bert-{name}-vocab.txt, verified, written atomically; returns its path."""
    source = VOCABS[name]
    target = output_dir / f"bert-{name}-vocab.txt"
    with urllib.request.urlopen(source.url, timeout=60) as response:
        data = response.read()
    digest = hashlib.sha256(data).hexdigest()
    if source.sha256 is not None and digest != source.sha256:
        raise ValueError(f"{source.url}: SHA-256 {digest}, expected {source.sha256}")
    line_count = data.count(b"\n")
    if line_count != source.lines:
        raise ValueError(f"{source.url}: {line_count} lines, expected {source.lines}")
    with tempfile.NamedTemporaryFile("wb", dir=output_dir, suffix=".tmp", delete=False) as writer:
        writer.write(data)
    try:
        load_vocab(writer.name)  # UTF-8, and holds the special tokens
    except (ValueError, UnicodeDecodeError) as error:
        os.unlink(writer.name)
        raise ValueError(f"{source.url}: not a BERT vocab: {error}") from None
    os.replace(writer.name, target)
    print(f"{target}: {source.lines} tokens, sha256 {digest}")
    return target


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Download standard BERT vocab files.")
    parser.add_argument("names", nargs="*", default=["uncased", "cased"], help=f"any of {', '.join(VOCABS)}")
    parser.add_argument("--output-dir", default=str(Path(__file__).resolve().parent), help="default: vocab/")
    args = parser.parse_args(argv)
    unknown = [name for name in args.names if name not in VOCABS]
    if unknown:
        parser.error(f"unknown vocab name(s) {' '.join(unknown)}; choose from {' '.join(VOCABS)}")
    output_dir = Path(args.output_dir)
    if not output_dir.is_dir():
        parser.error(f"--output-dir {output_dir}: directory does not exist")
    for name in args.names:
        try:
            download(name, output_dir)
        except (OSError, ValueError) as error:
            raise SystemExit(f"{name}: {error}") from None


if __name__ == "__main__":
    main()
