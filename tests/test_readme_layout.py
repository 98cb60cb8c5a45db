"""README.md stays a front door: at most 250 lines, a table of contents whose anchors exist, a headline table whose
every figure is copied from the committed results file its row names, and a link to docs/README.md, the index that
links every page of docs/. Every relative link of the README and of the docs pages points at a file that exists,
and every anchor it names at a heading of that file."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT

README = ROOT / "README.md"
DOCS = ROOT / "docs"
DOCS_INDEX = DOCS / "README.md"
MAX_README_LINES = 250
MAX_HEADLINE_ROWS = 8
HEADLINE_HEADING = "## Results at a glance"
# A figure: a number standing on its own, not part of a name such as int8, bf16, F1, SST-2 or L6.
FIGURE = re.compile(r"(?<![\w.\-])\d+(?:\.\d+)?(?![\w.])")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors_of(page: Path) -> set[str]:
    return {github_anchor(line.lstrip("#")) for line in page.read_text(encoding="utf-8").splitlines()
            if line.startswith("#")}


def test_readme_is_at_most_250_lines():
    lines = len(README.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines; move detail to docs/"


def test_contents_anchors_name_headings_of_the_readme():
    text = README.read_text(encoding="utf-8")
    contents = next(line for line in text.split("\n\n") if line.startswith("**Contents:**"))
    linked = re.findall(r"\]\(#([^)]+)\)", contents)
    assert len(linked) >= 10
    assert not [anchor for anchor in linked if anchor not in anchors_of(README)]


def test_the_readme_links_the_docs_index_and_the_index_links_every_docs_page():
    assert "docs/README.md" in LINK.findall(README.read_text(encoding="utf-8"))
    index = DOCS_INDEX.read_text(encoding="utf-8")
    # one list item per page: its link, then in the same item what the page answers
    described = {match[0] for match in re.findall(r"^- \[[^\]]+\]\(([\w.-]+\.md)\): (\S.*)$", index, re.M)
                 if match[1].strip()}
    pages = {page.name for page in DOCS.glob("*.md")} - {DOCS_INDEX.name}
    assert not sorted(pages - described), "docs pages without a line in docs/README.md"
    assert not sorted(described - pages), "docs/README.md describes pages that do not exist"


def test_every_relative_link_resolves_to_a_file_and_a_heading():
    problems = []
    for page in [README, *sorted(DOCS.glob("*.md"))]:
        for link in LINK.findall(page.read_text(encoding="utf-8")):
            if re.match(r"[a-z][a-z+.-]*:", link):  # https:, mailto:
                continue
            target, _, anchor = link.partition("#")
            path = (page.parent / target).resolve() if target else page
            if not path.exists():
                problems.append(f"{page.relative_to(ROOT)}: {link} does not exist")
            elif anchor and path.suffix == ".md" and anchor not in anchors_of(path):
                problems.append(f"{page.relative_to(ROOT)}: {link} names no heading of {path.name}")
    assert not problems, "\n".join(problems)


def test_every_python_file_the_readme_names_exists():
    named = set(re.findall(r"`([\w./-]+\.py)`", README.read_text(encoding="utf-8")))
    assert {"preprocessing/masking.py", "checkpoints/checkpoint.py", "utils/atomic_io.py"} <= named
    assert not sorted(name for name in named if not (ROOT / name).is_file())


# ------------------------------------------------------------------------------------------------------------
# The headline table: every figure from a committed results file
# ------------------------------------------------------------------------------------------------------------

def headline_rows(text: str) -> list[str]:
    """The body rows of the table under the README's headline heading."""
    section = text.split(HEADLINE_HEADING + "\n", 1)[1].split("\n## ", 1)[0]
    table = [line for line in section.splitlines() if line.startswith("|")]
    return table[2:]  # past the header and its rule


def cells(row: str) -> list[str]:
    return [cell.strip() for cell in row.strip().strip("|").split("|")]


def source_of(row: str) -> Path:
    """The results file the row's last cell links to."""
    links = LINK.findall(cells(row)[-1])
    assert len(links) == 1, f"the row must link one results file in its last cell: {row}"
    return ROOT / links[0]


def unbacked_figures(row: str, source_text: str) -> list[str]:
    """The figures of the row's measured cells (all but the first, which says what was measured, and the last,
    which names the file) that do not appear verbatim in the results file's text, as a whole number."""
    figures = [figure for cell in cells(row)[1:-1] for figure in FIGURE.findall(cell)]
    assert figures, f"a headline row without a figure: {row}"
    return [figure for figure in figures
            if not re.search(rf"(?<![\d.]){re.escape(figure)}(?!\d)", source_text)]


def committed(path: Path) -> bool:
    listed = subprocess.run(["git", "ls-files", "--", str(path.relative_to(ROOT))], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout
    return bool(listed.strip())


def test_every_headline_figure_is_in_the_committed_results_file_its_row_names():
    rows = headline_rows(README.read_text(encoding="utf-8"))
    assert 1 <= len(rows) <= MAX_HEADLINE_ROWS
    problems = []
    for row in rows:
        source = source_of(row)
        if not source.is_file() or not committed(source):
            problems.append(f"{source.relative_to(ROOT)} is not a committed file: {row}")
            continue
        missing = unbacked_figures(row, source.read_text(encoding="utf-8"))
        if missing:
            problems.append(f"{missing} not in {source.relative_to(ROOT)}: {row}")
    assert not problems, "\n".join(problems)


def test_the_headline_check_catches_a_doctored_figure():
    row = headline_rows(README.read_text(encoding="utf-8"))[0]
    source = source_of(row).read_text(encoding="utf-8")
    assert unbacked_figures(row, source) == []
    figure = FIGURE.findall(cells(row)[1])[0]
    doctored = row.replace(figure, f"{float(figure) + 0.01:.2f}", 1)
    assert doctored != row and unbacked_figures(doctored, source) == [f"{float(figure) + 0.01:.2f}"]
    # a figure that merely starts a number of the file is not that number: 1.9 is not 1.98
    assert unbacked_figures("| what | ours: 1.9 seq/s | x | y |", "ran at 1.98 seq/s") == ["1.9"]
    with pytest.raises(AssertionError, match="without a figure"):
        unbacked_figures("| what | fast | faster | y |", "")


def test_the_sample_output_is_a_committed_runs_output():
    # "What you should see" shows a real run's last lines, which the results file its paragraph links holds.
    text = README.read_text(encoding="utf-8")
    section = text[text.index("**What you should see**"):text.index(HEADLINE_HEADING)]
    source = ROOT / next(link for link in LINK.findall(section) if link.startswith("benchmarks/results/"))
    assert committed(source)
    shown = section.split("```")[1].strip().splitlines()
    assert shown and all(line in source.read_text(encoding="utf-8").splitlines() for line in shown)
