"""scripts/options_doc.py: the options reference lists every option of the three entry points with its default,
and --write / --check keep a file's marked block (docs/options.md's), and only that block, in step with the parsers."""

from __future__ import annotations

import argparse
import importlib
import re
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import options_doc  # noqa: E402  (scripts/ is put on the path just above)

ENTRY_SCRIPTS = ("run_pretraining.py", "run_squad.py", "run_glue.py")


@pytest.fixture(scope="module")
def rendered() -> str:
    return options_doc.render_all()


def section(rendered: str, script: str) -> str:
    start = rendered.index(f"### {script}\n")
    following = rendered.find("\n### ", start + 1)
    return rendered[start:following if following >= 0 else None]


def help_option_names(script: str) -> set[str]:
    """Every --option spelling that argparse's own --help formatter lists for the script (the invocation column
    of its option lines; with a wide terminal each option is on one line), without --help."""
    help_text = importlib.import_module(script.removesuffix(".py")).build_parser().format_help()
    invocations = [line.strip().split("  ")[0] for line in help_text.splitlines() if line.startswith("  -")]
    names = {name for invocation in invocations for name in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", invocation)}
    return names - {"--help"}


@pytest.mark.parametrize("script", ENTRY_SCRIPTS)
def test_every_option_of_the_help_is_listed(rendered, script, monkeypatch):
    monkeypatch.setenv("COLUMNS", "10000")  # one usage line, no option name broken across lines
    text = section(rendered, script)
    listed = set(re.findall(r"`(--[a-z][a-z0-9-]*)", text))
    assert listed == help_option_names(script)


@pytest.mark.parametrize("script, option, default", [
    # NVIDIA's documented defaults (DeepLearningExamples PaddlePaddle BERT README, "Parameters").
    ("run_pretraining.py", "--max-seq-length MAX_SEQ_LENGTH", "`512`"),
    ("run_pretraining.py", "--model-prefix MODEL_PREFIX", "`bert_paddle`"),
    ("run_pretraining.py", "--log-freq LOG_FREQ", "`10`"),
    ("run_pretraining.py", "--input-dir INPUT_DIR", "required"),
    ("run_squad.py", "--doc-stride DOC_STRIDE", "`128`"),
    ("run_squad.py", "--max-seq-length MAX_SEQ_LENGTH", "`384`"),
    ("run_glue.py", "--max-seq-length MAX_SEQ_LENGTH", "`128`"),
])
def test_defaults_and_required_options(rendered, script, option, default):
    row = next(line for line in section(rendered, script).splitlines() if line.startswith(f"| `{option}`"))
    assert row.split(" | ")[1] == default


def test_help_markup_is_escaped():
    parser = argparse.ArgumentParser(prog="demo.py")
    group = parser.add_argument_group("Paths")
    group.add_argument("--out", default="x", help="goes to <out>/a|b, %(default)s by default")
    text = options_doc.render_parser("demo", parser)
    assert "| `--out OUT` | `x` | goes to &lt;out&gt;/a\\|b, x by default |" in text.splitlines()
    assert "**Paths**" in text


README_TEXT = "# Title\n\nIntro.\n\n<!-- options:begin -->\nold list\n<!-- options:end -->\n\n## After\nTail.\n"


def test_write_replaces_only_the_block_and_check_then_passes(tmp_path, rendered, capsys):
    readme = tmp_path / "README.md"
    readme.write_text(README_TEXT)
    assert options_doc.main(["--check", str(readme)]) == 1
    assert options_doc.main(["--write", str(readme)]) == 0
    text = readme.read_text()
    assert text == README_TEXT.replace("old list\n", rendered)
    assert options_doc.main(["--check", str(readme)]) == 0
    # A hand edit inside the block makes the check fail again, naming the file.
    readme.write_text(text.replace("| `--seed SEED`", "| `--seed S`", 1))
    capsys.readouterr()
    assert options_doc.main(["--check", str(readme)]) == 1
    assert str(readme) in capsys.readouterr().err


def test_write_without_markers_fails_naming_the_file(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# Title\nNo block here.\n")
    with pytest.raises(SystemExit) as failure:
        options_doc.main(["--write", str(readme)])
    assert str(readme) in str(failure.value) and "<!-- options:begin -->" in str(failure.value)
    assert readme.read_text() == "# Title\nNo block here.\n"


def test_docs_options_block_is_current():
    options_file = ROOT / "docs" / "options.md"
    assert options_doc.BEGIN_MARKER in options_file.read_text(), f"{options_file} has no options block"
    assert options_doc.main(["--check", str(options_file)]) == 0, (
        "run: python scripts/options_doc.py --write docs/options.md")
