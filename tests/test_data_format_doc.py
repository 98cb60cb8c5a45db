"""docs/data-format.md: every section a module's docstring cites exists, and the doc names the columns and
datasets the code reads."""

from __future__ import annotations

import re

from conftest import ROOT, project_modules
from preprocessing.shard_formats import HDF5_DATASETS, PARQUET_COLUMNS, PARQUET_MASK_COLUMNS

DOC = ROOT / "docs" / "data-format.md"


def anchors(markdown: str) -> set[str]:
    """GitHub's anchor of each heading: lowercase, punctuation dropped, spaces to hyphens."""
    return {re.sub(r"[^a-z0-9 -]", "", title.lower()).replace(" ", "-")
            for title in re.findall(r"^#+ (.+)$", markdown, flags=re.MULTILINE)}


def test_cited_sections_exist():
    known = anchors(DOC.read_text(encoding="utf-8"))
    cited = {}
    for path in project_modules():
        for line in path.read_text(encoding="utf-8").splitlines():
            if "docs/data-format.md#" in line:
                for anchor in re.findall(r"#([a-z0-9-]+)", line.split("docs/data-format.md", 1)[1]):
                    cited.setdefault(anchor, path.name)
    assert cited, "no module cites docs/data-format.md"
    assert {anchor: name for anchor, name in cited.items() if anchor not in known} == {}


def test_doc_names_every_column_and_dataset_the_loader_reads():
    text = DOC.read_text(encoding="utf-8")
    for name in PARQUET_COLUMNS + PARQUET_MASK_COLUMNS + HDF5_DATASETS:
        assert f"| `{name}` |" in text, name
