"""Every command README.md and the docs/ pages show runs as written, or at least parses.

The rule: every fenced block tagged `bash` (or sh, shell, console) carries a marker in its info string, after
the language, which GitHub does not render and which costs README no line:

    ```bash run=NAME [files=PATH]... [lines=TEXT]...     runs on a CPU, in order, as a newcomer would
    ```bash parse-only=REASON                             cannot run here (gpu, slurm, docker, hours, ...)

An untagged block whose first line starts like a command (python, bash, pip, ...) is flagged too, so that no
command dodges the test by its fence. The run blocks of README.md and then of each docs/ page (in name order)
run one after another with `bash -e -o pipefail`, in one fresh clone of the project with ../shared beside it,
as the data is beside the project; each must exit 0, leave every files= path (a glob, relative to the clone)
and print every lines= text, and none may print Paddle's or its launcher's noise. A parse-only block's commands
must name scripts that exist and flags those scripts' --help lists, and its presets must print their arguments.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from functools import cache
from pathlib import Path

import pytest

from conftest import ROOT, require_shared

# The pages with commands: README.md, then docs/ in name order (docs/options.md is generated, without fences).
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL_LANGUAGES = {"bash", "sh", "shell", "console"}
COMMAND_START = re.compile(r"^(\$ )?(python3?|bash|pip|sbatch|srun|cd|export|[A-Z_]+=\S*) ")
# What none of the runs may print: Paddle's import-time warnings, the launcher's own output and run_pretraining.py's
# 2 KB configuration (its report holds it).
NOISE = ["No ccache found", "PLEASE USE OMP_NUM_THREADS WISELY", "LAUNCH INFO", "Container failed !!!",
         'Configuration: {"', "not support input out tensor", "'place' interface"]
# Programs the parse-only blocks call that need not exist on a CPU machine.
CLUSTER_PROGRAMS = {"sbatch", "srun", "docker", "nvidia-smi"}


@dataclasses.dataclass
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    kind: str  # "run" or "parse-only"
    name: str
    files: list[str]
    lines: list[str]
    text: str

    def __str__(self) -> str:
        return f"{shown(self.page)}:{self.line} ({self.kind}={self.name})"


def shown(page: Path) -> str:
    return str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else page.name


def fences(page: Path) -> list[tuple[int, str, str]]:
    """(line of the opening fence, info string, body) of each fenced block of a Markdown page."""
    found, opening, info, body = [], None, "", []
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if opening is None and line.startswith("```"):
            opening, info, body = number, line[3:].strip(), []
        elif opening is not None and line.startswith("```"):
            found.append((opening, info, "\n".join(body)))
            opening = None
        elif opening is not None:
            body.append(line)
    return found


def marked_blocks(page: Path) -> tuple[list[Block], list[str]]:
    """The page's marked shell blocks, and a message for each command block without a valid marker."""
    blocks, problems = [], []
    for number, info, body in fences(page):
        words = shlex.split(info)
        where = f"{shown(page)}:{number}"
        if not words or words[0] not in SHELL_LANGUAGES:
            first = next((line for line in body.splitlines() if line.strip()), "")
            if COMMAND_START.match(first):
                problems.append(f"{where}: a command block must be tagged bash and marked run= or parse-only=")
            continue
        settings: dict[str, list[str]] = {}
        for word in words[1:]:
            key, _, value = word.partition("=")
            settings.setdefault(key, []).append(value)
        kinds = [kind for kind in ("run", "parse-only") if kind in settings]
        unknown = set(settings) - {"run", "parse-only", "files", "lines"}
        if len(kinds) != 1 or unknown or not settings[kinds[0]][0]:
            problems.append(f"{where}: needs exactly one of run=NAME or parse-only=REASON, and only files= and "
                            f"lines= besides (got {info!r})")
            continue
        blocks.append(Block(page, number, kinds[0], settings[kinds[0]][0], settings.get("files", []),
                            settings.get("lines", []), body))
    return blocks, problems


def all_blocks() -> list[Block]:
    return [block for page in PAGES for block in marked_blocks(page)[0]]


def test_every_command_block_is_marked():
    problems = [problem for page in PAGES for problem in marked_blocks(page)[1]]
    assert not problems, "\n".join(problems)
    assert {block.kind for block in all_blocks()} == {"run", "parse-only"}


def test_the_marker_rule_flags_an_unmarked_command_block(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```bash\npython run_squad.py --help\n```\n\n```\npython x.py\n```\n\n```\noutput line\n```\n"
                    "```bash run=ok files=a lines='b c'\ntrue\n```\n", encoding="utf-8")
    blocks, problems = marked_blocks(page)
    assert len(problems) == 2 and [(block.name, block.files, block.lines) for block in blocks] == [
        ("ok", ["a"], ["b c"])]


# ------------------------------------------------------------------------------------------------------------
# Parse-only blocks
# ------------------------------------------------------------------------------------------------------------

def commands(text: str) -> list[list[str]]:
    """The simple commands of a block: comments dropped, continuation lines joined, split at && ; | and
    newlines, a command substitution $(...) kept as one word, leading VAR=value assignments dropped."""
    joined = re.sub(r"\\\n", " ", text)
    result = []
    for line in joined.splitlines():
        line = re.sub(r"(^|\s)#.*$", "", line)
        # A command substitution stays one word: its spaces and && hidden until the line is split.
        line = re.sub(r"\$\([^)]*\)", lambda match: match.group(0).replace(" ", "\1").replace("&&", "\0"), line)
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";|&<>")
        lexer.whitespace_split = True
        words: list[str] = []
        redirected = False
        for token in [*lexer, ";"]:
            if token in (">", ">>", "<"):
                redirected = True  # the next word is the redirection's file
            elif token and set(token) <= set(";|&"):
                while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
                    words.pop(0)
                if words:
                    result.append([word.replace("\1", " ").replace("\0", "&&") for word in words])
                words = []
            elif redirected:
                redirected = False
            else:
                words.append(token)
    return result


@cache
def help_text(cwd: Path, script: str, subcommand: str) -> str:
    argv = [sys.executable, script, *([subcommand] if subcommand else []), "--help"]
    result = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, timeout=300)
    if result.returncode != 0 and subcommand:
        return help_text(cwd, script, "")
    assert result.returncode == 0, f"{' '.join(argv)}: {result.stderr.strip()[-500:]}"
    return result.stdout


def flags_of(words: list[str]) -> list[str]:
    return [word.split("=")[0] for word in words if word.startswith("--")]


def check_python(words: list[str], cwd: Path) -> None:
    """python [-m MODULE [launcher options]] SCRIPT.py ARGS: the script exists and knows every flag."""
    if words[:2] == ["-m", "pytest"]:
        help_ = subprocess.run([sys.executable, "-m", "pytest", "--help"], capture_output=True, text=True,
                               cwd=cwd, timeout=300).stdout
        assert all(flag in help_ for flag in flags_of(words[2:])), words
        return
    script_index = next((index for index, word in enumerate(words) if word.endswith(".py")), None)
    assert script_index is not None, f"no script in python {' '.join(words)}"
    if words[:2] == ["-m", "paddle.distributed.launch"]:
        launcher_help = help_text(cwd, "-m", "paddle.distributed.launch")
        unknown = [flag for flag in flags_of(words[2:script_index]) if flag not in launcher_help]
        assert not unknown, f"paddle.distributed.launch does not know {unknown}"
    script = words[script_index]
    assert (cwd / script).is_file(), f"{script}: no such script in {cwd}"
    rest = words[script_index + 1:]
    subcommand = rest[0] if rest and not rest[0].startswith("-") and rest[0] != "..." else ""
    help_ = help_text(cwd, script, subcommand)
    unknown = [flag for flag in flags_of(rest) if not re.search(rf"{re.escape(flag)}\b", help_)]
    assert not unknown, f"{script} does not know {unknown}"


def check_shell(words: list[str], cwd: Path) -> None:
    """bash SCRIPT ARGS: the script exists and parses; a preset substitution prints its arguments."""
    script = cwd / words[1]
    assert script.is_file(), f"{words[1]}: no such script"
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    for word in words[2:]:
        if word.startswith("$("):
            preset = subprocess.run(["bash", "-c", f"set -e; {word[2:-1]}"], capture_output=True, text=True,
                                    cwd=cwd)
            assert preset.returncode == 0 and preset.stdout.split(), f"{word}: {preset.stderr.strip()}"


def check_parses(block: Block, cwd: Path) -> None:
    for words in commands(block.text):
        program = words[0]
        if program in ("python", "python3"):
            check_python(words[1:], cwd)
        elif program == "bash":
            check_shell(words, cwd)
        elif program == "cd":
            cwd = cwd / words[1]
            assert cwd.is_dir(), f"cd {words[1]}: no such folder"
        elif program == "pip":
            requirements = [words[index + 1] for index, word in enumerate(words) if word == "-r"]
            assert all(Path(name).is_absolute() or (cwd / name).is_file() for name in requirements), words
        elif program == "sbatch":
            assert (cwd / words[-1]).is_file(), f"{words[-1]}: no such script"
        else:
            assert program in CLUSTER_PROGRAMS or shutil.which(program), f"{program}: not a program here"


@pytest.mark.slow
def test_parse_only_blocks_name_scripts_and_flags_that_exist():
    blocks = [block for block in all_blocks() if block.kind == "parse-only"]
    assert len(blocks) >= 10
    failures = []
    for block in blocks:
        try:
            check_parses(block, ROOT)
        except AssertionError as error:
            failures.append(f"{block}: {error}")
    assert not failures, "\n".join(failures)


def test_the_parse_check_finds_an_unknown_flag():
    block = Block(ROOT / "README.md", 1, "parse-only", "test", [], [],
                  "bash scripts/run_squad.sh CKPT\npython squad_evaluate.py a.json b.json --no-such-flag")
    with pytest.raises(AssertionError, match="no-such-flag"):
        check_parses(block, ROOT)


# ------------------------------------------------------------------------------------------------------------
# The run blocks, in one fresh clone
# ------------------------------------------------------------------------------------------------------------

def fresh_clone(folder: Path) -> Path:
    """A clone of the project in folder/PaddleBERT with the working tree's uncommitted files copied over (what
    is tested is what is here, without its ignored files: no data/, results/ or caches), and ../shared beside
    it."""
    clone = folder / "PaddleBERT"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True, timeout=300)
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split("\0")
    for name in filter(None, listed):
        source, target = ROOT / name, clone / name
        if source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
        elif target.exists():
            target.unlink()
    (folder / "shared").symlink_to(require_shared().resolve(), target_is_directory=True)
    return clone


def run_block(block: Block, clone: Path) -> str:
    started = time.monotonic()
    environment = {name: value for name, value in os.environ.items()
                   if name not in ("PADDLEBERT_SHARED_DIR", "RESULTS_DIR", "BERT_PREP_WORKING_DIR", "VOCAB_FILE")}
    result = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block.text], capture_output=True, text=True,
                            cwd=clone, env=environment, timeout=1200)
    output = result.stdout + result.stderr
    print(f"{block}: {time.monotonic() - started:.0f} s")
    assert result.returncode == 0, f"{block} exited {result.returncode}:\n{output[-4000:]}"
    missing = [pattern for pattern in block.files if not glob.glob(str(clone / pattern))]
    assert not missing, f"{block}: did not write {missing}"
    absent = [text for text in block.lines if text not in output]
    assert not absent, f"{block}: did not print {absent}:\n{output[-4000:]}"
    noise = [text for text in NOISE if text in output]
    assert not noise, f"{block}: printed {noise}:\n{output[-4000:]}"
    return output


@pytest.mark.slow
def test_the_run_blocks_run_in_order_in_a_fresh_clone(tmp_path):
    blocks = [block for block in all_blocks() if block.kind == "run"]
    names = [block.name for block in blocks]
    assert names[:3] == ["quick_start", "data_preparation", "cpu_tiny"] and "export" in names, names
    clone = fresh_clone(tmp_path)
    for block in blocks:
        run_block(block, clone)
