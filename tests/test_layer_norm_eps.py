"""The config's two LayerNorm epsilons: layer_norm_eps for the embeddings and the masked-LM head, and
encoder_layer_norm_eps (None: the same) for the encoder layers, as NVIDIA's Paddle BERT has them (1e-12 and 1e-5)."""

from __future__ import annotations

import json

import numpy as np
import paddle
import pytest

from bert_config import BertConfig
from conftest import ROOT
from modeling import BertForPretraining

TINY = json.loads((ROOT / "bert_configs" / "bert-tiny-uncased.json").read_text())


def layer_norm_epsilons(model: BertForPretraining) -> dict[str, float]:
    return {name: layer._epsilon for name, layer in model.named_sublayers() if isinstance(layer, paddle.nn.LayerNorm)}


def test_encoder_layer_norms_take_their_own_epsilon_and_the_others_keep_layer_norm_eps():
    model = BertForPretraining(BertConfig.from_dict({**TINY, "encoder_layer_norm_eps": 1e-5}))
    epsilons = layer_norm_epsilons(model)
    encoder = {name: eps for name, eps in epsilons.items() if ".encoder." in name}
    assert len(encoder) == 2 * TINY["num_hidden_layers"] and set(encoder.values()) == {1e-5}
    others = {name: eps for name, eps in epsilons.items() if name not in encoder}
    assert sorted(others) == ["bert.embeddings.layer_norm", "cls.transform_layer_norm"]
    assert set(others.values()) == {1e-12}


def test_our_configs_keep_one_epsilon_of_1e_12():
    for path in sorted((ROOT / "bert_configs").glob("*.json")):
        config = BertConfig.from_json_file(path)
        assert config.layer_norm_eps == 1e-12 and config.encoder_eps == 1e-12, path
    assert set(layer_norm_epsilons(BertForPretraining(BertConfig.from_dict(TINY))).values()) == {1e-12}


def test_the_encoder_epsilon_changes_only_the_encoder_output():
    """A large encoder epsilon changes the sequence output and leaves the embeddings' output as it is."""
    ids = paddle.to_tensor(np.arange(1, 17).reshape(2, 8))
    outputs = []
    for encoder_eps in (None, 0.5):
        paddle.seed(0)
        model = BertForPretraining(BertConfig.from_dict({**TINY, "encoder_layer_norm_eps": encoder_eps,
                                                         "hidden_dropout_prob": 0.0,
                                                         "attention_probs_dropout_prob": 0.0}))
        model.eval()
        with paddle.no_grad():
            outputs.append((model.bert.embeddings(ids, paddle.zeros_like(ids)).numpy(), model.bert(ids)[0].numpy()))
    assert np.array_equal(outputs[0][0], outputs[1][0])
    assert np.abs(outputs[0][1] - outputs[1][1]).max() > 1e-2


@pytest.mark.parametrize("value", [0, -1e-5, 1.5, "1e-5", True])
def test_a_bad_epsilon_is_refused(value):
    with pytest.raises(ValueError, match="encoder_layer_norm_eps must be a number in"):
        BertConfig.from_dict({**TINY, "encoder_layer_norm_eps": value})


def test_paddle2hf_says_transformers_keeps_one_epsilon(tmp_path, capsys):
    import convert_checkpoint

    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps({**TINY, "encoder_layer_norm_eps": 1e-5}))
    weights = tmp_path / "model.pdparams"
    paddle.save(BertForPretraining(BertConfig.from_json_file(config_path)).state_dict(), str(weights))
    convert_checkpoint.main(["paddle2hf", str(weights), str(config_path), str(tmp_path / "hf")])
    assert "transformers has one layer_norm_eps" in capsys.readouterr().out
    hf_config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert hf_config["layer_norm_eps"] == 1e-12 and "encoder_layer_norm_eps" not in hf_config
