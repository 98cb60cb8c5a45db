"""Build a small English pre-training corpus offline, from text that ships with every CPython.

The source is the standard library's `pydoc_data.topics` (the Python language reference as plain text, about
80 topics and 0.5 MB). Each topic becomes one document, written in LDDL's Wikipedia source layout, so that
lddl_preprocess.py and scripts/run_pretraining.sh read it as they read `wikipedia/source/`:

    <output-dir>/en/pydoc_topics.txt      one line per document: `pydoc-<topic> <text>`

Within a topic, reStructuredText heading underlines are dropped and each paragraph is collapsed onto one line;
the paragraphs of a topic are joined by single spaces (the layout holds one line per document).

    python data/make_sample_corpus.py --output-dir results/sample_corpus/source

The corpus is tiny: it exists to run the whole pipeline (vocab, preprocessing, both phases, fine-tuning) on a
fresh machine without a download, not to pre-train a useful model.
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
from pathlib import Path

CORPUS_FILE_NAME = "pydoc_topics.txt"

# A line made only of one repeated punctuation character underlines a heading in reStructuredText.
_UNDERLINE = re.compile(r"^\s*([*=\-~^\"'`#+])\1{2,}\s*$")


def topic_documents() -> list[tuple[str, str]]:
    """(document id, text) per pydoc topic, sorted by topic name, text on one line."""
    from pydoc_data.topics import topics

    documents = []
    for name in sorted(topics):
        paragraphs = []
        for block in re.split(r"\n\s*\n", topics[name]):
            lines = [line.strip() for line in block.splitlines() if line.strip() and not _UNDERLINE.match(line)]
            if lines:
                paragraphs.append(" ".join(lines))
        text = " ".join(" ".join(paragraphs).split())
        if text:
            documents.append((f"pydoc-{name}", text))
    return documents


def write_corpus(output_dir: str | Path) -> Path:
    """Write the corpus to <output_dir>/en/pydoc_topics.txt atomically and return that path."""
    target_dir = Path(output_dir) / "en"
    target_dir.mkdir(parents=True, exist_ok=True)
    target = target_dir / CORPUS_FILE_NAME
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=target_dir, suffix=".tmp", delete=False) as out:
        for document_id, text in topic_documents():
            out.write(f"{document_id} {text}\n")
    os.replace(out.name, target)
    return target


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output-dir", required=True,
                        help="folder to write en/pydoc_topics.txt into (created if missing)")
    args = parser.parse_args(argv)
    if Path(args.output_dir).exists() and not Path(args.output_dir).is_dir():
        parser.error(f"--output-dir {args.output_dir}: exists and is not a folder")
    print(write_corpus(args.output_dir))


if __name__ == "__main__":
    main()
