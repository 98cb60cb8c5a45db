"""NVIDIA's static-graph (NGC) checkpoints load wherever weights are read, converted in memory, and give exactly what
the converted file gives; names of neither layout are an error naming both and the converters.

The checkpoints are tests/fixtures/ngc_static_bert.py's stand-ins in all three encoder layouts.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import paddle
import pytest

import convert_checkpoint
import run_pretraining
import run_squad
from checkpoints.weights import ENCODER_PARTS, load_pretrained
from conftest import ROOT
from modeling import BertConfig, BertForPretraining, BertForQuestionAnswering, BertModel

LAYOUT_NAMES = {"unfused": "unfused", "fused_qkv": "fused-QKV", "fused_layer": "FusedTransformerEncoderLayer"}


@pytest.fixture(scope="module")
def ngc(tmp_path_factory) -> dict:
    """The fixture's checkpoints by head, each layout also converted by nvidia2paddle, and the config."""
    from fixtures.ngc_static_bert import CONFIG, HEADS, write_ngc_checkpoints

    folder = tmp_path_factory.mktemp("ngc")
    config = folder / "config.json"
    config.write_text(json.dumps({**CONFIG, "hidden_act": "gelu", "hidden_dropout_prob": 0.0,
                                  "attention_probs_dropout_prob": 0.0}))
    checkpoints = {head: write_ngc_checkpoints(folder, head) for head in HEADS}
    converted = {}
    for head, written in checkpoints.items():
        for layout, prefix in written.prefixes.items():
            converted[head, layout] = folder / f"{head}_{layout}.pdparams"
            convert_checkpoint.main(["nvidia2paddle", str(prefix), str(converted[head, layout])])
    return {"checkpoints": checkpoints, "converted": converted, "config": config}


def weights_of(model: paddle.nn.Layer) -> dict[str, np.ndarray]:
    return {name: value.numpy() for name, value in model.state_dict().items()}


@pytest.mark.parametrize("layout", list(LAYOUT_NAMES))
@pytest.mark.parametrize("head", ["pretraining", "squad"])
def test_load_pretrained_converts_an_ngc_checkpoint_in_memory(ngc, head, layout):
    """A folder holding bert_paddle.pdparams, or the prefix itself as NVIDIA's scripts pass it, loads with the
    weights (and so the logits) of the converted file, into an unfused or fused model, and the report says so."""
    config = BertConfig.from_json_file(ngc["config"])
    prefix = ngc["checkpoints"][head].prefixes[layout]
    model_class = BertForPretraining if head == "pretraining" else BertForQuestionAnswering
    for fuse_mha in (False, True):
        config = BertConfig.from_dict({**config.to_dict(), "fuse_mha": fuse_mha})
        expected = model_class(config)
        reference = load_pretrained(expected, ngc["converted"][head, layout], required=ENCODER_PARTS,
                                    flag="--from-pretrained-params")
        assert reference.converted_from is None
        for source in (prefix.parent, prefix):
            model = model_class(config)
            report = load_pretrained(model, source, required=ENCODER_PARTS, flag="--from-pretrained-params")
            assert report.converted_from == LAYOUT_NAMES[layout]
            assert (f"NVIDIA static-graph checkpoint ({LAYOUT_NAMES[layout]} encoder), converted in memory"
                    in report.describe())
            assert "\n" not in report.describe()
            assert report.loaded == reference.loaded and report.initialised == reference.initialised
            got, want = weights_of(model), weights_of(expected)
            assert got.keys() == want.keys()
            assert all(np.array_equal(got[name], want[name]) for name in want)


def test_phase2_from_phase1_final_params_takes_an_ngc_checkpoint(ngc, capsys):
    """run_pretraining's weights-only start (--from-phase1-final-params, --from-pretrained-params) reads the folder
    as NVIDIA's does, <folder>/<model-prefix>.pdparams, and converts it."""
    config = BertConfig.from_json_file(ngc["config"])
    prefix = ngc["checkpoints"]["pretraining"].prefixes["fused_qkv"]
    model = BertForPretraining(config)
    run_pretraining.load_weights_only(model, config, str(prefix.parent), "bert_paddle", "--from-phase1-final-params")
    assert "--from-phase1-final-params" in capsys.readouterr().out
    expected = BertForPretraining(config)
    load_pretrained(expected, ngc["converted"]["pretraining", "fused_qkv"], required=ENCODER_PARTS, flag="x")
    got, want = weights_of(model), weights_of(expected)
    assert all(np.array_equal(got[name], want[name]) for name in want)


def write_squad_inputs(folder: Path) -> tuple[Path, Path]:
    """A 40-word vocabulary (the fixture's) and a one-paragraph SQuAD file in its words."""
    words = [f"w{index}" for index in range(35)]
    vocab = folder / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    context = " ".join(words[:12])
    questions = [{"id": f"q{index}", "question": f"w{index} w{index + 1}",
                  "answers": [{"text": f"w{index + 2}", "answer_start": context.index(f"w{index + 2}")}]}
                 for index in range(3)]
    squad = folder / "dev.json"
    squad.write_text(json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": [
        {"context": context, "qas": questions}]}]}))
    return vocab, squad


@pytest.mark.parametrize("flag", ["--from-pretrained-params", "--init-checkpoint"])
def test_run_squad_predicts_from_an_ngc_checkpoint_as_from_the_converted_file(ngc, tmp_path, capsys, flag):
    vocab, squad = write_squad_inputs(tmp_path)
    prefix = ngc["checkpoints"]["squad"].prefixes["fused_qkv"]
    predictions = {}
    for name, weights in (("ngc", prefix.parent), ("converted", ngc["converted"]["squad", "fused_qkv"])):
        run_squad.main(["--do-predict", "--predict-file", str(squad), "--vocab-file", str(vocab), "--bert-model",
                        "custom", "--config-file", str(ngc["config"]), "--max-seq-length", "24", "--doc-stride",
                        "8", "--max-query-length", "6", flag, str(weights), "--output-dir", str(tmp_path / name)])
        predictions[name] = json.loads((tmp_path / name / "nbest_predictions.json").read_text())
    assert "converted in memory" in capsys.readouterr().out
    assert predictions["ngc"] == predictions["converted"]


def test_names_of_neither_layout_are_an_error_naming_both_and_the_converters(tmp_path):
    """A Hugging Face state dict (another naming) passed as is."""
    hf_file = tmp_path / "hf.pdparams"
    paddle.save({"bert.embeddings.LayerNorm.gamma": np.ones(16, np.float32),
                 "bert.encoder.layer.0.attention.self.query.weight": np.zeros((16, 16), np.float32)}, str(hf_file))
    with pytest.raises(ValueError) as raised:
        load_pretrained(BertModel(BertConfig.from_json_file(ROOT / "bert_configs" / "bert-tiny-uncased.json")),
                        hf_file, required=ENCODER_PARTS, flag="--from-pretrained-params")
    message = str(raised.value)
    assert message.startswith(f"--from-pretrained-params {hf_file}: its parameter names "
                              "(e.g. bert.embeddings.LayerNorm.gamma)")
    assert "match neither PaddleBERT's layout (bert.embeddings.word_embeddings.weight" in message
    assert "nor NVIDIA's static-graph names (embedding_0.w_0, linear_17.w_0" in message
    assert "convert_checkpoint.py hf2paddle" in message and "convert_checkpoint.py nvidia2paddle" in message
    assert "\n" not in message


@pytest.mark.parametrize("rows, loads", [(40, True), (36, True), (4096, False), (30, False), (100, False)])
def test_only_nvidias_padding_of_the_same_vocabulary_is_fitted(tmp_path, rows, loads):
    """A 36-word model takes 36 rows and NVIDIA's 40 (36 rounded up to 8); another vocabulary's table is an error
    naming both sizes (issue 24: 4,096 rows into 30,522 words were zero-padded, 100 accepted)."""
    config = BertConfig.from_dict({**json.loads((ROOT / "bert_configs" / "bert-tiny-uncased.json").read_text()),
                                   "vocab_size": 36})
    source = BertModel(BertConfig.from_dict({**config.to_dict(), "vocab_size": rows}))
    path = tmp_path / "weights.pdparams"
    paddle.save(source.state_dict(), str(path))
    model = BertModel(config)
    if loads:
        load_pretrained(model, path, required=ENCODER_PARTS, flag="--from-pretrained-params")
        table = model.embeddings.word_embeddings.weight.numpy()
        assert np.array_equal(table, source.embeddings.word_embeddings.weight.numpy()[:36])
        return
    with pytest.raises(ValueError, match=rf"word_embeddings.weight has {rows} vocabulary rows, the model a "
                                         r"vocabulary of 36 \(36 rows padded\)"):
        load_pretrained(model, path, required=ENCODER_PARTS, flag="--from-pretrained-params")


def test_own_name_pattern_holds_every_parameter_of_every_model():
    """The layout the foreign-names error names is modeling.py's: every model's every parameter, fused or not."""
    from checkpoints.weights import is_own_name
    from modeling import BertForSequenceClassification

    for fuse_mha in (False, True):
        config = BertConfig.from_dict({**json.loads((ROOT / "bert_configs" / "bert-tiny-uncased.json").read_text()),
                                       "fuse_mha": fuse_mha})
        with paddle.LazyGuard():
            models = [BertModel(config), BertForPretraining(config), BertForQuestionAnswering(config),
                      BertForSequenceClassification(config, 3)]
        names = [name for model in models for name in model.state_dict()]
        assert all(is_own_name(name) for name in names)
    assert not is_own_name("bert.embeddings.LayerNorm.weight") and not is_own_name("linear_17.w_0")
