"""README.md stays a short entry point: under 400 lines, a table of contents whose anchors exist, and every page of
docs/ linked from it, with every relative link it makes pointing at a file that exists."""

from __future__ import annotations

import re

from conftest import ROOT

README = ROOT / "README.md"


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_readme_is_under_400_lines():
    assert len(README.read_text(encoding="utf-8").splitlines()) < 400


def test_contents_anchors_name_headings_of_the_readme():
    text = README.read_text(encoding="utf-8")
    anchors = {github_anchor(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}
    contents = next(line for line in text.split("\n\n") if line.startswith("**Contents:**"))
    linked = re.findall(r"\]\(#([^)]+)\)", contents)
    assert len(linked) >= 10
    assert not [anchor for anchor in linked if anchor not in anchors]


def test_every_docs_page_is_linked_and_every_relative_link_resolves():
    text = README.read_text(encoding="utf-8")
    targets = set(re.findall(r"\]\(((?:docs|scripts|tests)/[^)#]*)", text))
    assert not [target for target in targets if not (ROOT / target).exists()]
    mentioned = set(re.findall(r"docs/[\w.-]+\.md", text))
    for page in (ROOT / "docs").glob("*.md"):
        assert f"docs/{page.name}" in mentioned, f"docs/{page.name} is not linked from README.md"
        for link in re.findall(r"\]\((\.\./[^)#]+)", page.read_text(encoding="utf-8")):
            assert (page.parent / link).resolve().exists(), f"docs/{page.name}: {link} does not exist"
