"""The CPU fine-tuning presets that take the cpu_demo pre-training preset's checkpoint offline (docs/finetune-what-
you-pretrained.md): squad_cpu_demo (scripts/configs/squad_config.sh) cuts a SQuAD dev file into a training and a
prediction part, mrpc_cpu_demo and mrpc_cpu_minilm (scripts/configs/glue_config.sh) run MRPC, each on one process
into its own <RESULTS_DIR>/<preset>; mrpc_cpu_minilm gives the MiniLM folder as it is.

The end-to-end runs use a stand-in for cpu_demo's checkpoint (random weights of its config, saved as
run_pretraining.py saves them) and small data, so that they take seconds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import paddle
import pytest

from bert_config import BertConfig
from checkpoints.checkpoint import save_checkpoint
from conftest import ROOT, require_shared
from modeling import BertForPretraining

DEMO_CONFIG = ROOT / "bert_configs" / "bert-tiny-4k-vocab.json"


def articles(count: int) -> list[dict]:
    """`count` SQuAD articles of one paragraph and two questions each, the answers found in the context."""
    made = []
    for index in range(count):
        context = f"Article {index} says that the river number {index} flows north into the sea of glass."
        questions = [("Where does the river flow?", "north into the sea of glass"), ("What does it say?", "that")]
        made.append({"title": f"t{index}", "paragraphs": [{"context": context, "qas": [
            {"id": f"{index}-{number}", "question": question, "answers": [{"text": text,
                                                                           "answer_start": context.index(text)}]}
            for number, (question, text) in enumerate(questions)]}]})
    return made


def environment(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The recipes' environment with every folder in tmp_path: results, data (the sample vocab) and GLUE."""
    return {**os.environ, "RESULTS_DIR": str(tmp_path / "results"), "BERT_PREP_WORKING_DIR": str(tmp_path / "data"),
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "PADDLEBERT_NUM_THREADS": "1", **extra}


def preset(config: str, command: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", f"source scripts/configs/{config} && {command}"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_squad_cpu_demo_trains_on_all_articles_but_the_last_and_predicts_the_last(tmp_path):
    dev = tmp_path / "dev-v1.1.json"
    dev.write_text(json.dumps({"version": "1.1", "data": articles(3)}))
    env = environment(tmp_path)
    result = preset("squad_config.sh", f"squad_cpu_demo {dev}", env)
    assert result.returncode == 0, result.stderr
    results = tmp_path / "results"
    data = results / "squad_cpu_demo" / "data"
    checkpoint = results / "cpu_demo" / "custom" / "phase1" / "400"
    assert result.stdout.split() == [
        str(checkpoint), "1", "16", "5e-4", "0.1", "fp32", "1", "1", str(data), str(tmp_path / "data/sample/vocab.txt"),
        str(results / "squad_cpu_demo"), "train_eval", str(DEMO_CONFIG), "60", "false", "100", "100", "true"]
    assert json.loads((data / "train-v1.1.json").read_text())["data"] == articles(3)[:2]
    assert json.loads((data / "dev-v1.1.json").read_text())["data"] == articles(3)[2:]
    assert sorted(path.name for path in data.iterdir()) == ["dev-v1.1.json", "train-v1.1.json"]  # no .part left
    assert result.stderr.splitlines() == [
        f"squad_cpu_demo: {checkpoint}: not there yet; run the cpu_demo pre-training preset first",
        f"squad_cpu_demo: {dev} cut into {data}/train-v1.1.json (2 articles, 4 questions) and dev-v1.1.json (the last "
        "article, 2 questions)"]
    # Cut once: another file later leaves the two parts as they are.
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"version": "1.1", "data": articles(5)}))
    assert preset("squad_config.sh", f"squad_cpu_demo {other}", env).stdout == result.stdout
    assert json.loads((data / "train-v1.1.json").read_text())["data"] == articles(3)[:2]


def test_squad_cpu_demo_cuts_the_dev_set_beside_the_repository_by_default(tmp_path):
    dev = json.loads(require_shared("data", "squad", "v1.1", "dev-v1.1.json").read_text())["data"]
    if require_shared() != ROOT.parent / "shared":
        pytest.skip("the preset's default is ../shared beside the repository, not PADDLEBERT_SHARED_DIR")
    assert preset("squad_config.sh", "squad_cpu_demo", environment(tmp_path)).returncode == 0
    data = tmp_path / "results" / "squad_cpu_demo" / "data"
    assert json.loads((data / "dev-v1.1.json").read_text())["data"] == dev[-1:]
    assert len(json.loads((data / "train-v1.1.json").read_text())["data"]) == len(dev) - 1


@pytest.mark.parametrize("content", ["{not json", json.dumps({"version": "1.1"})])
def test_squad_cpu_demo_names_a_dev_file_it_cannot_read_in_one_line(tmp_path, content):
    dev = tmp_path / "dev.json"
    dev.write_text(content)
    result = preset("squad_config.sh", f"squad_cpu_demo {dev}", environment(tmp_path))
    last = result.stderr.splitlines()[-1]
    assert last.startswith(f"squad_cpu_demo: {dev}: not a readable SQuAD v1.1 file (")
    assert "Traceback" not in result.stderr
    assert last.endswith("); give the dev set: squad_cpu_demo DEV_FILE")
    assert not (tmp_path / "results" / "squad_cpu_demo").exists()


def test_mrpc_cpu_demo_fine_tunes_cpu_demos_checkpoint_on_one_process(tmp_path):
    result = preset("glue_config.sh", "mrpc_cpu_demo", environment(tmp_path, GLUE_DIR="/glue"))
    results = tmp_path / "results"
    assert result.stdout.split() == [
        str(results / "cpu_demo/custom/phase1/400"), "/glue/MRPC", str(tmp_path / "data/sample/vocab.txt"),
        str(DEMO_CONFIG), str(results / "mrpc_cpu_demo"), "mrpc", "1", "32", "1", "2e-4", "0.1", "1", "-1", "fp32",
        "42", "train,eval,prediction"]


def test_mrpc_cpu_minilm_gives_the_hugging_face_folder_as_it_is(tmp_path):
    minilm = ROOT.parent / "shared" / "models" / "all-MiniLM-L6-v2"  # the preset reads ../shared beside the repo
    result = preset("glue_config.sh", "mrpc_cpu_minilm", environment(tmp_path))
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert result.stdout.split() == [
        str(minilm), f"{ROOT.parent}/shared/data/glue/MRPC", f"{minilm}/vocab.txt", f"{minilm}/config.json",
        str(tmp_path / "results" / "mrpc_cpu_minilm"), "mrpc", "1", "32", "1", "1e-4", "0.1", "2", "-1", "fp32", "42",
        "train,eval,prediction"]
    assert not (tmp_path / "results" / "minilm").exists()  # nothing converted behind the user's back


# ---------------------------------------------------------------------------------------------
# End to end, on a stand-in for cpu_demo's checkpoint
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory) -> Path:
    """A folder with results/cpu_demo/custom/phase1/400 (random weights of cpu_demo's config, as run_pretraining.py
    saves them, padded and fused) and data/sample/vocab.txt (4096 tokens, the shipped vocab's first ones)."""
    folder = tmp_path_factory.mktemp("pretrained")
    config = BertConfig.from_dict({**json.loads(DEMO_CONFIG.read_text()), "pad_vocab_size_multiple": 8,
                                   "fuse_mha": True})
    paddle.seed(5)
    save_checkpoint(folder / "results" / "cpu_demo" / "custom" / "phase1", 400,
                    BertForPretraining(config).state_dict(), None, {"phase": 1}, config=config, rank=0)
    (folder / "data" / "sample").mkdir(parents=True)
    lines = (ROOT / "vocab" / "bert-large-uncased-vocab.txt").read_text(encoding="utf-8").splitlines()[:4096]
    (folder / "data" / "sample" / "vocab.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def run_preset(script: str, config: str, command: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    line = f'bash scripts/{script} $(source scripts/configs/{config} && {command})'
    return subprocess.run(["bash", "-c", line], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_squad_cpu_demo_runs_end_to_end(pretrained, tmp_path):
    dev = tmp_path / "dev-v1.1.json"
    dev.write_text(json.dumps({"version": "1.1", "data": articles(6)}))
    result = run_preset("run_squad.sh", "squad_config.sh", f"squad_cpu_demo {dev}", environment(pretrained))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = pretrained / "results" / "squad_cpu_demo"
    checkpoint = pretrained / "results" / "cpu_demo" / "custom" / "phase1" / "400"
    assert f"{checkpoint / 'bert_paddle.pdparams'}: loaded embeddings, encoder, pooler" in result.stdout
    assert "LAUNCH" not in result.stdout + result.stderr  # one process: no launcher
    predictions = json.loads((out / "custom" / "squad" / "predictions.json").read_text())
    assert sorted(predictions) == ["5-0", "5-1"]  # the last article's questions, and only those
    assert {"bert_paddle.pdparams", "nbest_predictions.json"} <= {p.name for p in (out / "custom" / "squad").iterdir()}
    assert (out / "logfile.txt").is_file() and (out / "dllogger_1_fp32.json").is_file()
    assert "exact_match :" in result.stdout and "F1 :" in result.stdout


@pytest.mark.slow
def test_mrpc_cpu_demo_runs_end_to_end(pretrained, tmp_path):
    lines = require_shared("data", "glue", "MRPC", "train.tsv").read_bytes().split(b"\n")
    (tmp_path / "MRPC").mkdir()
    (tmp_path / "MRPC" / "train.tsv").write_bytes(b"\n".join(lines[:41]) + b"\n")
    (tmp_path / "MRPC" / "dev.tsv").write_bytes(b"\n".join(lines[:1] + lines[41:61]) + b"\n")
    env = environment(pretrained, GLUE_DIR=str(tmp_path))
    result = run_preset("run_glue.sh", "glue_config.sh", "mrpc_cpu_demo", env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = pretrained / "results" / "mrpc_cpu_demo"
    assert "LAUNCH" not in result.stdout + result.stderr
    assert len((out / "predictions.tsv").read_text().splitlines()) == 1 + 20
    assert {"bert_paddle.pdparams", "bert_paddle_config.json", "report.json", "logfile"} <= {
        path.name for path in out.iterdir()}
    assert "accuracy :" in result.stdout


@pytest.mark.slow
def test_without_cpu_demos_checkpoint_the_run_stops_with_one_usage_and_one_error(tmp_path):
    dev = tmp_path / "dev-v1.1.json"
    dev.write_text(json.dumps({"version": "1.1", "data": articles(2)}))
    result = run_preset("run_squad.sh", "squad_config.sh", f"squad_cpu_demo {dev}", environment(tmp_path))
    checkpoint = tmp_path / "results" / "cpu_demo" / "custom" / "phase1" / "400"
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    # cpu_demo writes the sample vocab as well as the checkpoint: the first file checked is named, once.
    assert errors == [f"run_squad.py: error: --vocab-file {tmp_path}/data/sample/vocab.txt: file not found"]
    assert f"squad_cpu_demo: {checkpoint}: not there yet; run the cpu_demo pre-training preset first" in result.stderr
    assert result.stderr.count("usage: run_squad.py") == 1
