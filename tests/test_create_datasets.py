"""Tests for data/create_datasets_from_start.sh: local-corpus mode, and the download modes offline against a local
mirror folder (a tiny Wikipedia dump and SQuAD files built here)."""

from __future__ import annotations

import bz2
import hashlib
import json
import lzma
import os
import re
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

from conftest import ROOT, require_shared
from data_fixtures import document_draws, tag_offsets
from messages import assert_one_line

SCRIPT = ROOT / "data" / "create_datasets_from_start.sh"
# NVIDIA's layout under BERT_PREP_WORKING_DIR, as scripts/run_pretraining.sh and run.sub read it.
PHASE1 = Path("pretrain", "phase1", "unbinned", "parquet")
PHASE2 = Path("pretrain", "phase2", "bin_size_64", "parquet")
SOURCE = Path("wikipedia", "source")
WIKITEXT_TITLE = re.compile(rb" = [^=].* = \n")  # an article's first line in WikiText (wiki.test.raw has no \r)


SQUAD_FILES = ("v1.1/train-v1.1.json", "v1.1/dev-v1.1.json", "v1.1/evaluate-v1.1.py", "v2.0/train-v2.0.json",
               "v2.0/dev-v2.0.json", "v2.0/evaluate-v2.0.py")
PATH = f"{Path(sys.executable).parent}:/usr/bin:/bin"


def run_script(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env={"PATH": PATH, "PYTHON": sys.executable, **env})


def summaries(result: subprocess.CompletedProcess) -> list[dict]:
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def folder_bytes(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def kept_articles(files: list[Path], starts: bytes | re.Pattern, seed: int, sample_ratio: float) -> int:
    """How many articles of these corpus files (in corpus order) --sample-ratio keeps (data_fixtures.document_draws);
    an article starts at a line that begins with `starts` (WikiExtractor's <doc) or matches it (a WikiText title)."""
    kept = 0
    for file_index, path in enumerate(files):
        text = path.read_bytes()
        if isinstance(starts, bytes):
            offsets = tag_offsets(text, starts)
        else:
            offsets = [match.start() for match in starts.finditer(text) if match.start() == 0
                       or text[match.start() - 1] == ord("\n")]
        kept += sum(document_draws(seed, file_index, offset)[0] < sample_ratio for offset in offsets)
    return kept


def test_builds_nvidias_layout_from_wikitext(tmp_path):
    wikitext = require_shared("data", "wikitext-2")
    vocab = require_shared("vocab", "bert-uncased-vocab.txt")
    working = tmp_path / "prep"
    flags = ["--corpus", str(wikitext), "--vocab-file", str(vocab), "--num-shards", "2", "--num-workers", "1"]
    result = run_script("--working-dir", str(working), *flags)
    assert result.returncode == 0, result.stderr
    # A WikiText folder is read through its .raw file only (the .tokens files repeat the text with <unk>), which
    # wikipedia/source links to: no copy of the corpus is made.
    raw = Path(os.path.realpath(wikitext / "wiki.test.raw"))
    assert f"corpus: {raw}\n" in result.stdout
    assert f"vocab: {vocab}\n" in result.stdout
    links = sorted((working / SOURCE).iterdir())
    assert [(link.name, link.is_symlink(), link.resolve()) for link in links] == [("wiki.test.raw", True, raw)]

    # Both sets keep the articles that the recipes' defaults keep: --sample-ratio 0.9 drawn from --seed 12439.
    runs = summaries(result)
    assert [s["engine"] for s in runs] == ["in-process", "in-process"]  # --num-workers 1
    assert [s["documents"] for s in runs] == [kept_articles([raw], WIKITEXT_TITLE, 12439, 0.9)] * 2
    assert runs[0]["documents"] < 62  # the split's article count: the sample ratio really drops some
    phase1, phase2 = working / PHASE1, working / PHASE2
    assert sorted(p.name for p in phase1.iterdir()) == [".num_samples.json", "shard-0.parquet", "shard-1.parquet"]
    lengths = pq.read_table(phase1 / "shard-0.parquet", columns=["num_tokens"])["num_tokens"].to_pylist()
    assert max(lengths) == 128
    counts = json.loads((phase2 / ".num_samples.json").read_text())
    assert sorted(counts) == sorted(f"shard-{i}.parquet_{b}" for i in range(2) for b in range(8))
    longest = pq.read_table(phase2 / "shard-0.parquet_7", columns=["num_tokens", "masked_lm_positions"])
    assert max(longest["num_tokens"].to_pylist()) == 512 and min(longest["num_tokens"].to_pylist()) > 448
    assert sorted(p.name for p in working.iterdir()) == ["pretrain", "wikipedia"]  # no .part folders left

    # A rerun finds every step done and changes nothing.
    before = folder_bytes(working)
    rerun = run_script("--working-dir", str(working), *flags)
    assert rerun.returncode == 0, rerun.stderr
    assert f"have {working / SOURCE}\n" in rerun.stdout and summaries(rerun) == []
    assert f"have {phase1}\n" in rerun.stdout and f"have {phase2}\n" in rerun.stdout
    assert folder_bytes(working) == before


def test_seed_sample_ratio_and_the_working_dir_variable(tmp_path):
    wikitext = require_shared("data", "wikitext-2")
    vocab = require_shared("vocab", "bert-uncased-vocab.txt")
    working = tmp_path / "prep"
    # Only phase 1 is made: phase 2's folder already holds something.
    (working / PHASE2).mkdir(parents=True)
    (working / PHASE2 / "kept.txt").write_text("mine")
    result = run_script("--corpus", str(wikitext / "wiki.test.raw"), "--vocab-file", str(vocab), "--num-shards", "2",
                        "--num-workers", "1", "--seed", "3", "--sample-ratio", "0.5",
                        BERT_PREP_WORKING_DIR=str(working))
    assert result.returncode == 0, result.stderr
    kept = kept_articles([wikitext / "wiki.test.raw"], WIKITEXT_TITLE, 3, 0.5)
    assert kept != kept_articles([wikitext / "wiki.test.raw"], WIKITEXT_TITLE, 12439, 0.9)
    assert [s["documents"] for s in summaries(result)] == [kept]
    assert sorted(p.name for p in (working / PHASE1).iterdir())[1:] == ["shard-0.parquet", "shard-1.parquet"]
    assert [p.name for p in (working / PHASE2).iterdir()] == ["kept.txt"]


def test_bad_options_give_one_line_errors(tmp_path):
    working = str(tmp_path / "o")
    result = run_script("--corpus", str(tmp_path / "missing"), "--working-dir", working)
    assert result.returncode == 1 and result.stderr.strip().endswith(f"--corpus {tmp_path / 'missing'}: not found")
    result = run_script("--frobnicate", BERT_PREP_WORKING_DIR=working)
    assert result.returncode == 1 and "unknown option --frobnicate" in result.stderr
    result = run_script("--corpus", str(tmp_path), "--vocab-file", str(tmp_path / "none.txt"),
                        BERT_PREP_WORKING_DIR=working)
    assert result.returncode == 1 and f"--vocab-file {tmp_path / 'none.txt'}: file not found" in result.stderr
    for flag, value, named in [("--sample-ratio", "1.5", ("--sample-ratio", "(0, 1]", "'1.5'")),
                               ("--num-shards", "0", ("--num-shards", ">= 1", "'0'")),
                               ("--seed", "x", ("--seed", ">= 0", "'x'"))]:
        result = run_script("--corpus", str(tmp_path), flag, value, BERT_PREP_WORKING_DIR=working)
        assert result.returncode == 1
        assert_one_line(result.stderr, "create_datasets_from_start.sh: ", *named)
    assert not os.listdir(tmp_path)


def wikiextractor_file(first_article: int, articles: int) -> str:
    """WikiExtractor output: articles of a few paragraphs, sentences of every length, titles "Article <n>"."""
    text = []
    for article in range(first_article, first_article + articles):
        paragraphs = "\n".join(" ".join(f"The {'long ' * ((article * 7 + j * 3) % 40)}river {j} of article {article} "
                                         f"flows past town {j}." for j in range(paragraph, paragraph + 6))
                               for paragraph in range(0, 18, 6))
        text.append(f'<doc id="{article}" url="https://en.wikipedia.org/wiki?curid={article}" '
                    f'title="Article {article}">\nArticle {article}\n\n{paragraphs}\n</doc>\n')
    return "".join(text)


def test_an_xz_wikiextractor_folder_builds_both_phases_and_sparse_bins_are_said(tmp_path):
    """A WikiExtractor folder of .xz files (a SHA256SUMS beside them) is read as it is; wikipedia/source links to it.
    The corpus is too small to fill all of phase 2's length bins with --num-shards 40 each: phase 2 is written
    anyway, a bin with fewer samples in fewer files, and each such bin is named in one line (it used to fail after
    phase 1)."""
    corpus = tmp_path / "wiki"
    (corpus / "AA").mkdir(parents=True)
    plain = [wikiextractor_file(index * 10, 10) for index in range(3)]
    for index, text in enumerate(plain):
        (corpus / "AA" / f"wiki_{index:02d}.xz").write_bytes(lzma.compress(text.encode()))
    (corpus / "SHA256SUMS").write_text("".join(f"{'0' * 64}  AA/wiki_{index:02d}.xz\n" for index in range(3)))
    working = tmp_path / "prep"
    result = run_script("--corpus", str(corpus), "--working-dir", str(working), "--num-shards", "40",
                        "--num-workers", "2", "--sample-ratio", "1")
    assert result.returncode == 0, result.stderr
    assert (working / SOURCE).is_symlink() and (working / SOURCE).resolve() == corpus.resolve()
    assert not list(working.rglob("wiki_00"))  # nothing decompressed to disk
    phase1, phase2 = summaries(result)
    assert phase1["documents"] == phase2["documents"] == 30
    counts = json.loads((working / PHASE2 / ".num_samples.json").read_text())
    samples = [sum(rows for name, rows in counts.items() if name.endswith(f"_{b}")) for b in range(8)]
    assert sum(samples) == phase2["samples"] and phase1["files"] == 40
    sparse = [b for b, count in enumerate(samples) if count < 40]
    assert 0 < len(sparse) < 8
    notes = [line for line in result.stderr.splitlines() if line.startswith("lddl_preprocess.py: note: ")]
    assert len(notes) == len(sparse) == len(result.stderr.splitlines())
    for bin_index in sparse:
        assert sum(f"bin {bin_index} has {samples[bin_index]} samples, fewer than --num-shards 40" in note
                   for note in notes) == 1
        assert sorted(name for name in counts if name.endswith(f"_{bin_index}")) == sorted(
            f"shard-{i}.parquet_{bin_index}" for i in range(samples[bin_index]))

    # One .xz file on its own is read the same way (phase 2's folder is taken, so phase 1 alone is made).
    single = tmp_path / "single"
    (single / PHASE2).mkdir(parents=True)
    (single / PHASE2 / "kept.txt").write_text("mine")
    result = run_script("--corpus", str(corpus / "AA" / "wiki_01.xz"), "--working-dir", str(single),
                        "--num-shards", "1", "--num-workers", "1", "--sample-ratio", "1")
    assert result.returncode == 0, result.stderr
    assert [link.name for link in (single / SOURCE).iterdir()] == ["wiki_01.xz"]
    assert [s["documents"] for s in summaries(result)] == [10]


def run_corpus(tmp_path: Path, corpus: Path) -> subprocess.CompletedProcess:
    return run_script("--corpus", str(corpus), "--working-dir", str(tmp_path / "prep"), "--num-shards", "1",
                      "--num-workers", "2")


def test_a_rerun_with_another_corpus_is_refused_and_the_shards_are_kept(tmp_path):
    """Issue 46: a rerun into a finished folder with a different --corpus kept the old data and said "done"."""
    first, second = tmp_path / "first" / "AA", tmp_path / "second" / "AA"
    for folder, start in ((first, 0), (second, 50)):
        folder.mkdir(parents=True)
        (folder / "wiki_00").write_text(wikiextractor_file(start, 4))
    assert run_corpus(tmp_path, first.parent).returncode == 0
    built = folder_bytes(tmp_path / "prep" / PHASE1)
    again = run_corpus(tmp_path, first.parent)  # the same corpus: nothing to do
    assert again.returncode == 0 and f"have {tmp_path / 'prep' / SOURCE}" in again.stdout
    other = run_corpus(tmp_path, second.parent)
    assert other.returncode == 1
    assert_one_line(other.stderr, "create_datasets_from_start.sh: ", f"--corpus {second.parent}:",
                    f"was made from {first.parent.resolve()} instead", "--working-dir")
    assert folder_bytes(tmp_path / "prep" / PHASE1) == built and "done:" not in other.stdout


def test_an_empty_corpus_folder_is_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    result = run_corpus(tmp_path, tmp_path / "empty")
    assert result.returncode == 1
    assert_one_line(result.stderr, "lddl_preprocess.py: ", tmp_path / "empty", "corpus has no non-empty files")


def test_a_binary_corpus_file_is_one_line_naming_its_first_bad_byte(tmp_path):
    binary = tmp_path / "model.bin"
    binary.write_bytes(b"PK\x03\x04" + bytes(range(256)))
    result = run_corpus(tmp_path, binary)
    assert result.returncode == 1
    assert_one_line(result.stderr, "lddl_preprocess.py: ", binary, "line 1, byte 4", "NUL byte", "binary")


def test_a_latin1_corpus_file_is_one_line_naming_the_bad_byte_and_its_line(tmp_path):
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("A first line.\nThe café is open.\n".encode("latin-1"))  # é: byte 14 + 7 = 21, line 2
    result = run_corpus(tmp_path, latin1)
    assert result.returncode == 1
    assert_one_line(result.stderr, "lddl_preprocess.py: ", latin1, "line 2, byte 21", "not UTF-8", "0xe9")


def test_a_doc_without_its_end_is_one_line_naming_the_file_and_line(tmp_path):
    corpus = tmp_path / "wiki" / "AA"
    corpus.mkdir(parents=True)
    text = wikiextractor_file(0, 3)
    cut = text.index("</doc>", text.index("Article 1")) # the second article loses its end tag
    (corpus / "wiki_00").write_text(text[:cut] + text[cut + len("</doc>\n"):])
    line = text[:text.index('<doc id="1"')].count("\n") + 1
    result = run_corpus(tmp_path, tmp_path / "wiki")
    assert result.returncode == 1
    assert_one_line(result.stderr, "lddl_preprocess.py: ", corpus / "wiki_00", f"line {line}:", "<doc> without </doc>")


def md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def write_mirror(folder: Path) -> Path:
    """A mirror laid out as --mirror reads it: squad/<version>/<file> (the real dev-v1.1.json, stand-ins for the
    rest), wikipedia/enwiki-latest-pages-articles.xml.bz2 (six articles), and md5sums of its SQuAD files."""
    for name in SQUAD_FILES:
        path = folder / "squad" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if name == "v1.1/dev-v1.1.json":
            path.write_bytes(require_shared("data", "squad", "v1.1", "dev-v1.1.json").read_bytes())
        else:
            path.write_text(f"stand-in for {name}\n")
    (folder / "squad.md5").write_text("".join(f"{md5(folder / 'squad' / name)}  {name}\n" for name in SQUAD_FILES))
    sentences = [" ".join(f"Sentence {j} of article {index} tells of the river and the town." for j in range(40))
                 for index in range(6)]
    pages = "".join(f"""  <page>
    <title>Article {index}</title>
    <ns>0</ns>
    <id>{index + 1}</id>
    <revision>
      <id>{100 + index}</id>
      <text xml:space="preserve">{sentences[index]}

The town grew along the river, and its people built bridges over it.</text>
    </revision>
  </page>
""" for index in range(6))
    dump = f"""<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/" version="0.10" xml:lang="en">
  <siteinfo>
    <sitename>Wikipedia</sitename>
    <base>https://en.wikipedia.org/wiki/Main_Page</base>
    <namespaces>
      <namespace key="0" case="first-letter" />
      <namespace key="10" case="first-letter">Template</namespace>
    </namespaces>
  </siteinfo>
{pages}</mediawiki>
"""
    (folder / "wikipedia").mkdir()
    (folder / "wikipedia" / "enwiki-latest-pages-articles.xml.bz2").write_bytes(bz2.compress(dump.encode()))
    return folder


def test_shipped_md5sums_are_nvidias_and_hold_the_real_dev_set():
    """data/squad.md5 lists the six sums of NVIDIA's data/squad/squad_download.sh; the real dev-v1.1.json has its."""
    sums = dict(line.split()[::-1] for line in (ROOT / "data" / "squad.md5").read_text().splitlines())
    assert sorted(sums) == sorted(SQUAD_FILES)
    assert sums["v1.1/train-v1.1.json"] == "981b29407e0affa3b1b156f72073b945"
    assert sums["v2.0/evaluate-v2.0.py"] == "ff23213bed5516ea4a6d9edb6cd7d627"
    assert sums["v1.1/dev-v1.1.json"] == md5(require_shared("data", "squad", "v1.1", "dev-v1.1.json"))


def test_squad_only_fetches_both_versions_and_the_scripts_from_a_mirror_and_checks_md5(tmp_path):
    mirror = write_mirror(tmp_path / "mirror")
    working = tmp_path / "prep"
    squad = working / "download" / "squad"
    sums = ["--squad-md5sums", str(mirror / "squad.md5")]
    result = run_script("--squad-only", "--mirror", str(mirror), *sums, "--working-dir", str(working))
    assert result.returncode == 0, result.stderr
    assert all((squad / name).read_bytes() == (mirror / "squad" / name).read_bytes() for name in SQUAD_FILES)
    assert f"downloading file://{mirror}/squad/v1.1/evaluate-v1.1.py\n" in result.stdout
    assert sorted(p.name for p in working.iterdir()) == ["download"]  # nothing of Wikipedia, no .part files
    # A rerun has everything; a file changed since is refused by name, and kept.
    rerun = run_script("--squad-only", "--mirror", str(mirror), *sums, "--working-dir", str(working))
    assert rerun.returncode == 0 and f"have {squad / 'v2.0' / 'dev-v2.0.json'}\n" in rerun.stdout
    (squad / "v2.0" / "dev-v2.0.json").write_text("changed")
    changed = run_script("--squad-only", "--mirror", str(mirror), *sums, "--working-dir", str(working))
    assert changed.returncode == 1
    assert changed.stderr.strip().startswith(f"create_datasets_from_start.sh: {squad / 'v2.0' / 'dev-v2.0.json'}: md5 ")
    assert (squad / "v2.0" / "dev-v2.0.json").read_text() == "changed"


def test_a_download_with_the_wrong_md5_is_refused_naming_the_url_and_not_kept(tmp_path):
    """Against NVIDIA's sums (the default) the mirror's stand-in train-v1.1.json fails; nothing of it remains."""
    mirror = write_mirror(tmp_path / "mirror")
    working = tmp_path / "prep"
    result = run_script("--squad-only", "--mirror", str(mirror), "--working-dir", str(working))
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"create_datasets_from_start.sh: file://{mirror}/squad/v1.1/train-v1.1.json: md5 "
        f"{md5(mirror / 'squad' / 'v1.1' / 'train-v1.1.json')}, expected 981b29407e0affa3b1b156f72073b945 "
        f"({ROOT / 'data' / 'squad.md5'}): corrupt, or another copy of v1.1/train-v1.1.json")
    assert list((working / "download" / "squad" / "v1.1").iterdir()) == []


def test_from_start_runs_offline_against_a_mirror_with_the_shipped_vocab(tmp_path):
    """Download, md5 check, WikiExtractor, LDDL source and phase 1, with no network and no --vocab-file (phase 2's
    bins need more varied articles than six; its folder is made to hold something, so it is skipped)."""
    mirror = write_mirror(tmp_path / "mirror")
    working = tmp_path / "prep"
    (working / PHASE2).mkdir(parents=True)
    (working / PHASE2 / "kept.txt").write_text("mine")
    result = run_script("--mirror", str(mirror), "--squad-md5sums", str(mirror / "squad.md5"), "--working-dir",
                        str(working), "--num-shards", "1", "--num-workers", "1")
    assert result.returncode == 0, result.stderr
    assert f"vocab: {ROOT / 'vocab' / 'bert-large-uncased-vocab.txt'}\n" in result.stdout
    # wikipedia/source links to WikiExtractor's output, which preprocessing reads as it is.
    extracted = working / "wikipedia" / "extracted" / "en"
    assert (working / SOURCE).is_symlink() and (working / SOURCE).resolve() == extracted.resolve()
    files = sorted(path for path in extracted.rglob("*") if path.is_file())
    text = b"".join(path.read_bytes() for path in files).decode()
    assert text.count("<doc ") == 6 and text.count("tells of the river and the town") == 6 * 40
    assert [s["documents"] for s in summaries(result)] == [kept_articles(files, b"<doc", 12439, 0.9)]
    assert (working / PHASE1 / "shard-0.parquet").is_file()
    assert (working / "download" / "squad" / "v2.0" / "evaluate-v2.0.py").is_file()


def path_without(tmp_path: Path, tool: str) -> str:
    """A PATH holding everything of PATH but `tool`."""
    folder = tmp_path / f"bin-without-{tool}"
    folder.mkdir(parents=True)
    for directory in PATH.split(":"):
        for program in Path(directory).iterdir():
            if program.name != tool and not (folder / program.name).exists():
                (folder / program.name).symlink_to(program)
    return str(folder)


def test_every_tool_is_checked_before_anything_is_downloaded(tmp_path):
    mirror = write_mirror(tmp_path / "mirror")
    working = tmp_path / "prep"
    for mode in (["--squad-only"], []):
        for tool in ("curl", "md5sum"):
            result = run_script(*mode, "--mirror", str(mirror), "--working-dir", str(working),
                                PATH=path_without(tmp_path / "-".join(["x", *mode, tool]), tool))
            assert result.returncode == 1
            assert result.stderr.strip().startswith(f"create_datasets_from_start.sh: needs {tool} on PATH, and "
                                                    "nothing was downloaded")
    # A Python without WikiExtractor: the dump is not fetched to fail after it.
    python = tmp_path / "python"
    python.write_text(f'#!/bin/bash\n[[ "$2" == "import wikiextractor" ]] && exit 1\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    result = run_script("--mirror", str(mirror), "--working-dir", str(working), PYTHON=str(python))
    assert result.returncode == 1 and "WikiExtractor is needed" in result.stderr
    assert not working.exists()


def test_download_mode_options_are_checked(tmp_path):
    working = str(tmp_path / "o")
    result = run_script("--corpus", str(tmp_path), "--squad-only", "--working-dir", working)
    assert result.returncode == 1 and "--corpus and --squad-only exclude each other" in result.stderr
    result = run_script("--squad-only", "--mirror", str(tmp_path / "absent"), "--working-dir", working)
    assert result.returncode == 1 and f"--mirror {tmp_path / 'absent'}: neither a folder nor a URL" in result.stderr
    result = run_script("--squad-only", "--squad-md5sums", str(tmp_path / "none.md5"), "--working-dir", working)
    assert result.returncode == 1 and f"--squad-md5sums {tmp_path / 'none.md5'}: file not found" in result.stderr
    assert not os.path.exists(working)
