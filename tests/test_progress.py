"""Progress on long work (progress.py): plain lines on a non-terminal stderr, a redrawn bar on a terminal, nothing
with quiet or for short work; the preprocessors' progress, which changes no byte of their output; SQuAD and GLUE
feature building and checkpoint conversion."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import random
import re
from pathlib import Path

import numpy as np
import paddle
import pytest

import convert_checkpoint
import create_pretraining_data
import lddl_preprocess
import run_glue
import run_squad
import squad_utils
from bert_config import BertConfig
from conftest import ROOT, require_shared
from finetuning import glue_data
from finetuning.glue_data import ClassificationExample
from inference import inference
from modeling import BertForPretraining
from preprocessing.preprocess_pipeline import run_tasks
from squad_utils import SquadExample
from tokenizer import BertTokenizer
from training.amp import AmpPolicy
from utils import progress
from utils.progress import progress_bar, show_counts

# tqdm's statistics without a bar: "desc: 100% 3/3 [00:00<00:00, 1.5it/s, ...]"
PLAIN_LINE = re.compile(r"^(?P<desc>\w+): +(?P<percent>\d+)% (?P<done>[\d.]+k?)/(?P<total>[\d.]+k?) "
                        r"\[\d\d:\d\d<[\d:?]+, [^\]]+\]$")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def no_delay(monkeypatch):
    """Show progress from the first moment (the default delay hides work shorter than DELAY_SECONDS)."""
    monkeypatch.setattr(progress, "DELAY_SECONDS", 0.0)


def plain_lines(text: str, desc: str) -> list[re.Match]:
    lines = [line for line in text.splitlines() if line.startswith(desc + ":")]
    matches = [PLAIN_LINE.match(line) for line in lines]
    assert all(matches), lines
    return matches


def test_plain_lines_on_a_non_terminal_stderr(no_delay, capsys):
    for _ in progress_bar(range(3), desc="features", unit="example"):
        pass
    err = capsys.readouterr().err
    assert "\r" not in err and "|" not in err  # no redraws and no bar, so a Slurm file reads line by line
    first, last = plain_lines(err, "features")
    assert (first["percent"], first["done"], last["percent"], last["done"], last["total"]) == ("0", "0", "100", "3",
                                                                                             "3")
    assert "example/s" in err


def test_a_terminal_gets_the_redrawn_bar(no_delay, monkeypatch):
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    for _ in progress_bar(range(3), desc="features", unit="example"):
        pass
    assert "\rfeatures: 100%|" in terminal.getvalue()


def test_quiet_and_short_work_print_nothing(no_delay, capsys, monkeypatch):
    for _ in progress_bar(range(3), desc="features", quiet=True):
        pass
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(progress, "DELAY_SECONDS", 60.0)
    for _ in progress_bar(range(3), desc="features"):
        pass
    assert capsys.readouterr().err == ""


def test_counts_and_their_rates_are_shown(no_delay, capsys):
    with progress_bar(desc="tokenize", total=2000, unit="B", unit_scale=True) as bar:
        for documents in (3, 4):
            show_counts(bar, {"documents": documents})
            bar.update(1000)
    last = plain_lines(capsys.readouterr().err, "tokenize")[-1]
    assert last["done"] == last["total"] == "2.00k"
    assert re.search(r", 4 documents \(\d+/s\)\]$", last.group(0))


def test_run_tasks_advances_by_the_work_of_each_task_and_adds_the_counts(no_delay, capsys):
    bar = progress_bar(desc="tokenize", total=10, unit="B")
    results = run_tasks(None, pow, [(2, 3), (3, 2)], bar, work=[4, 6], counted=lambda result: {"units": result})
    assert results == [8, 9]
    last = plain_lines(capsys.readouterr().err, "tokenize")[-1]
    assert (last["done"], last["total"]) == ("10", "10") and ", 17 units (" in last.group(0)


# ---------------------------------------------------------------------------------------------- preprocessing


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, Path]:
    """A vocab of 40 made-up words and a one-document-per-line corpus of 10 documents."""
    root = tmp_path_factory.mktemp("corpus")
    rng = random.Random(3)
    words = [a + b for a in ("ba", "ke", "li", "mo", "nu") for b in ("pa", "re", "si", "to", "vu", "da", "fe", "go")]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "."] + words
    documents = [" ".join(" ".join(rng.choice(words) for _ in range(rng.randint(3, 10))) + " ."
                          for _ in range(rng.randint(8, 20))) for _ in range(10)]
    (root / "vocab.txt").write_text("\n".join(vocab) + "\n")
    (root / "docs.txt").write_text("\n".join(documents) + "\n")
    return {"vocab": root / "vocab.txt", "text": root / "docs.txt"}


def preprocess(module, corpus: dict[str, Path], output: Path, *flags: str) -> dict[str, str]:
    """module.main on the corpus; the SHA-256 of every file it wrote, by relative path."""
    argv = ["--input", str(corpus["text"]), "--vocab-file", str(corpus["vocab"]), "--output-dir", str(output),
            "--num-shards", "2", "--num-blocks", "2", "--duplicate-factor", "2", "--max-seq-length", "32",
            "--num-workers", "1", *flags]
    with contextlib.redirect_stdout(io.StringIO()):
        module.main(argv)
    return {str(path.relative_to(output)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(output.rglob("*")) if path.is_file()}


@pytest.mark.parametrize("module", [lddl_preprocess, create_pretraining_data])
def test_preprocessing_progress_on_stderr_changes_no_output_byte(module, corpus, tmp_path, no_delay, capsys):
    shown = preprocess(module, corpus, tmp_path / "shown")
    err = capsys.readouterr().err
    tokenize, pairs, shards = (plain_lines(err, desc)[-1] for desc in ("tokenize", "pairs", "shards"))
    assert tokenize["percent"] == pairs["percent"] == shards["percent"] == "100"
    assert re.search(r", 10 documents \(\d+/s\)\]$", tokenize.group(0))  # every document of the corpus was read
    assert re.search(r", \d+ pairs \(\d+/s\)\]$", pairs.group(0))
    assert (shards["done"], shards["total"]) == ("2", "2")

    quiet = preprocess(module, corpus, tmp_path / "quiet", "--quiet")
    assert capsys.readouterr().err == ""
    assert len(shown) >= 2 and quiet == shown


# ---------------------------------------------------------------------------------------------- features, conversion


def test_squad_and_glue_feature_building_show_progress(no_delay, capsys):
    tokenizer = BertTokenizer(str(require_shared("vocab", "bert-uncased-vocab.txt")))
    squad = [SquadExample(f"q{index}", "which?", " ".join(str(number) for number in range(1, 41)), 0)
             for index in range(3)]
    squad_utils.convert_examples_to_features(squad, tokenizer, max_seq_length=32, doc_stride=8, max_query_length=8)
    glue = [ClassificationExample(str(index), "The cat sat.", "A cat was sitting!", "1") for index in range(4)]
    glue_data.convert_examples_to_features(glue, tokenizer, 64, ["0", "1"])
    err = capsys.readouterr().err
    squad_line = [line for line in err.splitlines() if line.startswith("SQuAD features: 100%")]
    glue_line = [line for line in err.splitlines() if line.startswith("GLUE features: 100%")]
    assert len(squad_line) == len(glue_line) == 1
    assert " 3/3 [" in squad_line[0] and " 4/4 [" in glue_line[0] and "example/s" in glue_line[0]


def test_checkpoint_conversion_shows_progress_both_ways(no_delay, capsys):
    config = BertConfig.from_json_file(str(ROOT / "bert_configs" / "bert-tiny-uncased.json"))
    paddle.seed(1)
    model_state = BertForPretraining(config).state_dict()
    hf_state, _ = convert_checkpoint.paddle_to_hf(model_state, config, "model")
    convert_checkpoint.hf_to_paddle(hf_state, config, "hf")
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("convert: 100%")]
    assert len(lines) == 2 and all(f" {len(hf_state)}/{len(hf_state)} [" in line for line in lines), lines


def test_squad_and_glue_prediction_show_progress(no_delay, capsys):
    tokenizer = BertTokenizer(str(require_shared("vocab", "bert-uncased-vocab.txt")))
    squad = [SquadExample(f"q{index}", "which?", "one two three", 0) for index in range(5)]
    features = squad_utils.convert_examples_to_features(squad, tokenizer, max_seq_length=32, doc_stride=8,
                                                        max_query_length=8)

    def zeros(input_ids, token_type_ids, attention_mask):
        return np.zeros(input_ids.shape, np.float32), np.zeros(input_ids.shape, np.float32)

    run_squad.predict_logits(zeros, features, batch_size=2, pad_token_id=0, max_seq_length=32)
    config = BertConfig.from_json_file(str(ROOT / "bert_configs" / "bert-tiny-uncased.json"))
    glue = [ClassificationExample(str(index), "The cat sat.", None, "1") for index in range(3)]
    glue_features = glue_data.convert_examples_to_features(glue, tokenizer, 16, ["0", "1"])
    args = argparse.Namespace(predict_batch_size=2, max_seq_length=16)
    model = run_glue.BertForSequenceClassification(config, 2)
    run_glue.predict_probabilities(inference.dygraph_predictor(model, AmpPolicy()), glue_features, args, 0)
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if line.startswith("SQuAD prediction: 100%")][0].count(" 3/3 [") == 1
    assert [line for line in err.splitlines() if line.startswith("GLUE prediction: 100%")][0].count(" 2/2 [") == 1
