"""A config travels with its weights: run_squad.py and run_glue.py build their model from the config beside the
initial weights (a step folder's <prefix>_config.json, or the <name>_config.json that convert_checkpoint.py
hf2paddle writes beside its output) when no --config-file is given, and refuse a --config-file that builds another
network, naming both files and the first field that differs (weights.model_config_file)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import paddle
import pytest

import convert_checkpoint
import run_glue
import run_squad
from bert_config import CONFIG_DIR, BertConfig, first_difference
from checkpoints.checkpoint import save_checkpoint
from checkpoints.paddle_files import read_safetensors_state
from conftest import ROOT, require_shared
from finetuning import finetune
from modeling import BertForPretraining, BertForQuestionAnswering, BertForSequenceClassification
from training.amp import AmpPolicy
from utils.dllog import DLLogger

VOCAB = ROOT / "vocab" / "bert-large-uncased-vocab.txt"  # shipped: these tests need nothing from ../shared
# What run_pretraining.py saves for a custom tiny model: hidden 32, its vocabulary padded to 30528 rows, a config
# unlike bert-large-uncased's (the default of --bert-model, which run_squad.sh passes when CONFIG_FILE is None).
STEP_CONFIG = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                         max_position_embeddings=128, pad_vocab_size_multiple=8)
SQUAD_WORD_EMBEDDINGS = "bert.embeddings.word_embeddings.weight"


@pytest.fixture(scope="module")
def step_folder(tmp_path_factory) -> Path:
    """results/<preset>/custom/phase2/4 as run_pretraining.py writes it: weights, config and progress."""
    phase = tmp_path_factory.mktemp("results") / "custom" / "phase2"
    paddle.seed(3)
    model = BertForPretraining(STEP_CONFIG)
    folder = save_checkpoint(phase, 4, model.state_dict(), None, {"phase": 2}, config=STEP_CONFIG, rank=0)
    assert folder == phase / "4" and (folder / "bert_paddle_config.json").is_file()
    return folder


@pytest.fixture(scope="module")
def data_files(tmp_path_factory) -> dict[str, Path]:
    """A one-question SQuAD file and a two-row MRPC file, for the prediction flags' file checks."""
    folder = tmp_path_factory.mktemp("data")
    context = "PaddleBERT fine-tunes what it pretrained."
    squad = {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": context, "qas": [
        {"id": "q1", "question": "What does it fine-tune?", "answers": [{"text": "what it pretrained",
                                                                        "answer_start": 21}]}]}]}]}
    (folder / "dev.json").write_text(json.dumps(squad))
    (folder / "dev.tsv").write_text("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
                                    "1\t1\t2\tThe cat sat.\tA cat was sitting.\n0\t3\t4\tIt rained.\tPrices rose.\n")
    return {"squad": folder / "dev.json", "glue": folder / "dev.tsv"}


def task_argv(task: str, data_files: dict[str, Path], output_dir: Path, *weights: str | Path) -> list[str]:
    """A prediction command line of run_squad.py or run_glue.py without --config-file, as run_squad.sh and
    run_glue.sh write it for CONFIG_FILE None (--bert-model bert-large-uncased)."""
    argv = ["--vocab-file", VOCAB, "--bert-model", "bert-large-uncased", "--output-dir", output_dir, *weights]
    if task == "squad":
        argv += ["--do-predict", "--predict-file", data_files["squad"], "--max-seq-length", "128"]
    else:
        argv += ["--task-name", "mrpc", "--do-eval", "--predict-file", data_files["glue"]]
    return [str(arg) for arg in argv]


SCRIPTS = {"squad": (run_squad, BertForQuestionAnswering),
           "glue": (run_glue, lambda config: BertForSequenceClassification(config, 2))}


def build(task: str, argv: list[str]) -> paddle.nn.Layer:
    """The model that the task script's main would build from argv, with its initial weights loaded."""
    script, make = SCRIPTS[task]
    args = script.parse_args(argv)
    session = finetune.Session(rank=0, world_size=1, num_threads=1, logger=DLLogger(None, enabled=False),
                               tokenizer=None, policy=AmpPolicy())
    return finetune.build_model(args, make, session)


@pytest.mark.parametrize("task", sorted(SCRIPTS))
@pytest.mark.parametrize("flag", ["--from-pretrained-params", "--init-checkpoint", "--from-checkpoint"])
def test_a_step_folder_brings_its_config(task, flag, step_folder, data_files, tmp_path):
    argv = task_argv(task, data_files, tmp_path / "out", flag, step_folder)
    script, _ = SCRIPTS[task]
    assert script.parse_args(argv).config_file == str(step_folder / "bert_paddle_config.json")
    model = build(task, argv)
    assert model.config.hidden_size == 32 and model.config.padded_vocab_size == 30528
    saved = paddle.load(str(step_folder / "bert_paddle.pdparams"))
    for name in (SQUAD_WORD_EMBEDDINGS, "bert.encoder.1.output.weight"):
        np.testing.assert_array_equal(model.state_dict()[name].numpy(), saved[name].numpy(), err_msg=name)


@pytest.mark.slow
def test_the_converted_hugging_face_model_brings_its_config(tmp_path, data_files):
    minilm = require_shared("models", "all-MiniLM-L6-v2")
    out = tmp_path / "minilm" / "model.safetensors"
    out.parent.mkdir()
    convert_checkpoint.main(["hf2paddle", str(minilm), str(out)])
    assert (tmp_path / "minilm" / "model_config.json").is_file()
    argv = task_argv("glue", data_files, tmp_path / "out", "--from-pretrained-params", out)
    argv[argv.index("--vocab-file") + 1] = str(minilm / "vocab.txt")
    model = build("glue", argv)
    hf_config = json.loads((minilm / "config.json").read_text())
    assert (model.config.num_hidden_layers, model.config.hidden_size) == (hf_config["num_hidden_layers"],
                                                                          hf_config["hidden_size"]) == (6, 384)
    hf_state = read_safetensors_state(minilm / "model.safetensors")
    hf_name = next(name for name in hf_state if name.endswith("embeddings.word_embeddings.weight"))
    np.testing.assert_array_equal(model.state_dict()[SQUAD_WORD_EMBEDDINGS].numpy(), np.asarray(hf_state[hf_name]))


@pytest.mark.parametrize("task", sorted(SCRIPTS))
@pytest.mark.parametrize("flag", ["--from-pretrained-params", "--from-checkpoint"])
def test_a_config_file_that_builds_another_network_is_refused_naming_both(task, flag, step_folder, data_files,
                                                                          tmp_path, capsys):
    other = CONFIG_DIR / "bert-tiny-uncased.json"  # hidden 128 where the weights' config says 32
    argv = task_argv(task, data_files, tmp_path / "out", flag, step_folder, "--config-file", other)
    script, _ = SCRIPTS[task]
    with pytest.raises(SystemExit):
        script.parse_args(argv)
    last_line = capsys.readouterr().err.strip().splitlines()[-1]
    saved = step_folder / "bert_paddle_config.json"
    assert last_line.endswith(f"--config-file {other} has hidden_size 128, but {saved}, the config that comes with "
                              f"{flag} {step_folder}, has 32; leave --config-file out to use it")
    assert not (tmp_path / "out").exists()


def test_a_config_file_for_the_same_network_may_change_dropout(step_folder, data_files, tmp_path):
    same = tmp_path / "no_dropout.json"
    values = dataclasses.replace(STEP_CONFIG, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                 pad_vocab_size_multiple=1).to_dict()
    same.write_text(json.dumps(values))
    argv = task_argv("glue", data_files, tmp_path / "out", "--from-pretrained-params", step_folder,
                     "--config-file", same)
    assert run_glue.parse_args(argv).config_file == str(same)
    assert build("glue", argv).config.hidden_dropout_prob == 0.0


def test_weights_without_a_config_keep_the_bert_model_config(step_folder, data_files, tmp_path):
    bare = tmp_path / "bare.pdparams"
    bare.write_bytes((step_folder / "bert_paddle.pdparams").read_bytes())
    argv = task_argv("squad", data_files, tmp_path / "out", "--from-pretrained-params", bare)
    assert run_squad.parse_args(argv).config_file == str(CONFIG_DIR / "bert-large-uncased.json")


def test_first_difference_compares_what_the_weights_compute():
    base = BertConfig(hidden_size=32, num_attention_heads=2, intermediate_size=64)
    assert first_difference(base, dataclasses.replace(base, hidden_dropout_prob=0.0, initializer_range=0.1,
                                                      pad_vocab_size_multiple=8, fuse_mha=True)) is None
    assert first_difference(base, dataclasses.replace(base, encoder_layer_norm_eps=1e-12)) is None  # the same eps
    assert first_difference(base, dataclasses.replace(base, encoder_layer_norm_eps=1e-5)) == ("encoder_eps", 1e-12,
                                                                                             1e-5)
    assert first_difference(base, dataclasses.replace(base, num_hidden_layers=3, hidden_act="relu")) == (
        "num_hidden_layers", 12, 3)


# ------------------------------------------------------------------------------------------------------------
# A Hugging Face folder is initial weights as it is (issue 45 §1): converted in memory, its config.json the config
# ------------------------------------------------------------------------------------------------------------

TINY_HF = ROOT / "tests" / "fixtures" / "tiny_bert_torch"  # config.json and a pytorch_model.bin


@pytest.mark.slow
@pytest.mark.parametrize("task", sorted(SCRIPTS))
@pytest.mark.parametrize("flag", ["--from-pretrained-params", "--init-checkpoint"])
def test_a_hugging_face_folder_loads_as_the_file_hf2paddle_converts_it_to(task, flag, data_files, tmp_path, capsys):
    minilm = require_shared("models", "all-MiniLM-L6-v2")
    converted = tmp_path / "minilm.pdparams"
    convert_checkpoint.main(["hf2paddle", str(minilm), str(converted)])
    models = {}
    for name, weights in (("folder", minilm), ("converted", converted)):
        argv = task_argv(task, data_files, tmp_path / name, flag, weights)
        argv[argv.index("--vocab-file") + 1] = str(minilm / "vocab.txt")
        script, _ = SCRIPTS[task]
        assert script.parse_args(argv).config_file == str(minilm / "config.json" if name == "folder" else
                                                          tmp_path / "minilm_config.json")
        capsys.readouterr()
        models[name] = build(task, argv)
        if name == "folder":
            assert (f"{minilm / 'model.safetensors'}: Hugging Face checkpoint, converted in memory"
                    in capsys.readouterr().out)
    assert (models["folder"].config.num_hidden_layers, models["folder"].config.hidden_size) == (6, 384)
    for name, value in models["converted"].state_dict().items():
        if name.startswith("bert."):  # the head is the task's own, from --seed
            np.testing.assert_array_equal(models["folder"].state_dict()[name].numpy(), value.numpy(), err_msg=name)


def test_a_folder_with_a_pytorch_bin_loads_its_heads(data_files, tmp_path, capsys):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *(f"w{i}" for i in range(22))]) + "\n")
    argv = task_argv("squad", data_files, tmp_path / "out", "--init-checkpoint", TINY_HF)
    argv[argv.index("--vocab-file") + 1] = str(vocab)
    argv[argv.index("--max-seq-length") + 1] = "16"  # the fixture's position table
    argv += ["--max-query-length", "4", "--doc-stride", "4"]
    model = build("squad", argv)
    assert "loaded embeddings, encoder, pooler, qa;" in capsys.readouterr().out  # nothing from random init
    reference = np.load(TINY_HF / "reference.npz")
    np.testing.assert_array_equal(model.state_dict()["qa_outputs.weight"].numpy(),
                                  reference["tensor/qa_outputs.weight"].T)


@pytest.mark.parametrize("flag", ["--from-pretrained-params", "--init-checkpoint"])
def test_a_folder_without_weights_is_one_line_naming_the_flag_as_typed_and_what_it_holds(flag, data_files, tmp_path,
                                                                                        capsys):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "tokenizer.json").write_text("{}")
    with pytest.raises(SystemExit):
        run_glue.parse_args(task_argv("glue", data_files, tmp_path / "out", flag, folder))
    last_line = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"error: {flag} {folder}: no weights in this folder" in last_line
    assert "model.safetensors or pytorch_model.bin" in last_line and "it holds config.json, tokenizer.json" in last_line


def test_a_config_file_unlike_the_folders_config_json_is_refused(data_files, tmp_path, capsys):
    other = CONFIG_DIR / "bert-tiny-uncased.json"
    argv = task_argv("squad", data_files, tmp_path / "out", "--init-checkpoint", TINY_HF, "--config-file", other)
    with pytest.raises(SystemExit):
        run_squad.parse_args(argv)
    last_line = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"{TINY_HF / 'config.json'}, the config that comes with --init-checkpoint {TINY_HF}" in last_line
