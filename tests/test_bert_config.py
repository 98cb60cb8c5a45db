"""bert_config.py: the three JSON dialects it reads, the values it refuses, and build_config's flags.

The configs below are copied from the files their authors publish (Google's uncased_L-12_H-768_A-12
bert_config.json, Hugging Face's bert-base-uncased config.json from transformers 4.x) or were written by
transformers 5.24 itself (tests/fixtures/tiny_bert_tf5/config.json); the expected fields are typed here
by hand.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from bert_config import CONFIG_DIR, BertConfig, build_config, config_file_for
from conftest import ROOT
from messages import assert_one_line

# Google's bert_config.json of BERT-Base uncased, as released with the paper's code.
GOOGLE_BASE = {
    "attention_probs_dropout_prob": 0.1, "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "hidden_size": 768,
    "initializer_range": 0.02, "intermediate_size": 3072, "max_position_embeddings": 512,
    "num_attention_heads": 12, "num_hidden_layers": 12, "type_vocab_size": 2, "vocab_size": 30522,
}
# bert-base-uncased's config.json as transformers 4.x wrote it (bookkeeping and all).
HF4_BASE = {
    "architectures": ["BertForMaskedLM"], "attention_probs_dropout_prob": 0.1, "gradient_checkpointing": False,
    "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "hidden_size": 768, "initializer_range": 0.02,
    "intermediate_size": 3072, "layer_norm_eps": 1e-12, "max_position_embeddings": 512, "model_type": "bert",
    "num_attention_heads": 12, "num_hidden_layers": 12, "pad_token_id": 0, "position_embedding_type": "absolute",
    "transformers_version": "4.6.0.dev0", "type_vocab_size": 2, "use_cache": True, "vocab_size": 30522,
}
BASE_FIELDS = dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                   intermediate_size=3072, hidden_act="gelu", hidden_dropout_prob=0.1,
                   attention_probs_dropout_prob=0.1, max_position_embeddings=512, type_vocab_size=2,
                   initializer_range=0.02, layer_norm_eps=1e-12, pad_vocab_size_multiple=1, fuse_mha=False)
TF5_CONFIG = ROOT / "tests" / "fixtures" / "tiny_bert_tf5" / "config.json"


def write_json(tmp_path: Path, values, name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(values))
    return path


def error_of(path: Path, exception=ValueError) -> str:
    with pytest.raises(exception) as raised:
        BertConfig.from_json_file(path)
    message = str(raised.value)
    assert "\n" not in message and str(path) in message
    return message


# ---------------------------------------------------------------------------------------------
# The dialects
# ---------------------------------------------------------------------------------------------


def test_our_config_round_trips_through_json(tmp_path):
    config = BertConfig(**{**BASE_FIELDS, "num_hidden_layers": 3, "pad_vocab_size_multiple": 8, "fuse_mha": True})
    path = tmp_path / "ours.json"
    path.write_text(config.to_json_string())
    assert BertConfig.from_json_file(path) == config
    assert BertConfig.from_json_file(path).padded_vocab_size == 30528  # 30522 rounded up to a multiple of 8


def test_our_config_refuses_an_unknown_key_naming_the_file(tmp_path):
    path = write_json(tmp_path, {**GOOGLE_BASE, "hiden_size": 12}, "typo.json")
    assert_one_line(error_of(path), f"{path}: ", "unknown", "'hiden_size'")


def test_shipped_configs_are_ours_and_load():
    config = BertConfig.from_json_file(CONFIG_DIR / "bert-base-uncased.json")
    assert config == BertConfig(**BASE_FIELDS)


def test_google_bert_config_json_reads_every_field(tmp_path):
    config = BertConfig.from_json_file(write_json(tmp_path, GOOGLE_BASE, "bert_config.json"))
    # Google's file has no layer_norm_eps: its LayerNorm uses 1e-12, our default.
    assert config == BertConfig(**BASE_FIELDS)


def test_transformers4_config_json_is_read_by_its_architecture_keys(tmp_path):
    config = BertConfig.from_json_file(write_json(tmp_path, HF4_BASE))
    assert config == BertConfig(**BASE_FIELDS)


def test_transformers5_config_json_as_save_pretrained_writes_it():
    written = json.loads(TF5_CONFIG.read_text())
    assert written["transformers_version"].startswith("5.")  # the fixture is what it says
    assert {"dtype", "bos_token_id", "eos_token_id", "use_cache", "classifier_dropout"} <= set(written)
    assert "position_embedding_type" not in written  # transformers 5 no longer writes it
    config = BertConfig.from_json_file(TF5_CONFIG)
    assert config == BertConfig(vocab_size=29, hidden_size=12, num_hidden_layers=2, num_attention_heads=3,
                                intermediate_size=20, max_position_embeddings=16, type_vocab_size=2,
                                initializer_range=0.5)


def test_hf_bookkeeping_of_any_version_is_ignored(tmp_path):
    """Keys transformers adds for its own purposes, including ones no version has written yet."""
    values = {
        **json.loads(TF5_CONFIG.read_text()),
        "transformers_version": "5.99.0", "architectures": ["BertForSequenceClassification"],
        "id2label": {"0": "NEGATIVE", "1": "POSITIVE"}, "label2id": {"NEGATIVE": 0, "POSITIVE": 1},
        "classifier_dropout": 0.3, "use_cache": False, "dtype": "bfloat16", "bos_token_id": 101,
        "eos_token_id": 102, "problem_type": "single_label_classification", "a_key_from_the_future": [1, 2],
    }
    assert BertConfig.from_json_file(write_json(tmp_path, values)) == BertConfig.from_json_file(TF5_CONFIG)


@pytest.mark.parametrize("marker", ["model_type", "architectures", "transformers_version"])
def test_any_one_marker_makes_a_config_huggingface(tmp_path, marker):
    value = {"model_type": "bert", "architectures": ["BertModel"], "transformers_version": "4.8.2"}[marker]
    path = write_json(tmp_path, {**GOOGLE_BASE, marker: value, "use_cache": True})
    assert BertConfig.from_json_file(path) == BertConfig(**BASE_FIELDS)
    # Without a marker the same bookkeeping key is a typo in our own config.
    assert "unknown BERT config keys ['use_cache']" in error_of(write_json(tmp_path, {**GOOGLE_BASE,
                                                                                    "use_cache": True}))


def test_hf_config_cannot_set_our_layout_fields(tmp_path):
    """pad_vocab_size_multiple and fuse_mha are how we lay a network out, not part of an HF architecture."""
    path = write_json(tmp_path, {**HF4_BASE, "pad_vocab_size_multiple": 8, "fuse_mha": True})
    assert BertConfig.from_json_file(path) == BertConfig(**BASE_FIELDS)


# ---------------------------------------------------------------------------------------------
# Refusals
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("key, value", [
    ("position_embedding_type", "relative_key"),
    ("position_embedding_type", "relative_key_query"),
    ("is_decoder", True),
    ("add_cross_attention", True),
    ("model_type", "roberta"),
    ("tie_word_embeddings", False),
    ("pruned_heads", {"0": [1]}),
])
def test_hf_values_that_change_the_architecture_are_refused(tmp_path, key, value):
    path = write_json(tmp_path, {**HF4_BASE, key: value})
    message = error_of(path)
    assert message.startswith(f"{path}: {key} {value!r} describes another architecture")


@pytest.mark.parametrize("activation", ["silu", "gelu_python", "tanh"])
def test_unsupported_activation_is_refused_naming_file_and_key(tmp_path, activation):
    message = error_of(write_json(tmp_path, {**HF4_BASE, "hidden_act": activation}))
    assert f"hidden_act {activation!r} is not one of" in message


@pytest.mark.parametrize("values, named", [
    ({"hidden_size": 10, "num_attention_heads": 3}, ("hidden_size 10", "num_attention_heads 3", "multiple")),
    ({"num_hidden_layers": 0}, ("num_hidden_layers", ">= 1", "got 0")),
    ({"num_hidden_layers": True}, ("num_hidden_layers", ">= 1", "got True")),
    ({"vocab_size": 30522.0}, ("vocab_size", ">= 1", "got 30522.0")),
    ({"hidden_dropout_prob": 1.0}, ("hidden_dropout_prob", "[0, 1)", "got 1.0")),
    ({"pad_vocab_size_multiple": 0}, ("pad_vocab_size_multiple", ">= 1", "got 0")),
    ({"fuse_mha": "yes"}, ("fuse_mha", "true or false", "'yes'")),
])
def test_bad_values_are_refused_naming_the_file(tmp_path, values, named):
    path = write_json(tmp_path, {**GOOGLE_BASE, **values})
    assert_one_line(error_of(path), f"{path}: ", *named)


def test_unreadable_files_give_one_line_naming_them(tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    assert "not valid JSON" in error_of(broken)
    assert "must be a JSON object" in error_of(write_json(tmp_path, [GOOGLE_BASE], "list.json"))
    assert "BERT config file not found" in error_of(tmp_path / "missing.json", FileNotFoundError)


# ---------------------------------------------------------------------------------------------
# build_config: the flags, checked on the final values
# ---------------------------------------------------------------------------------------------


def test_build_config_uses_the_named_model_or_the_config_file(tmp_path):
    assert config_file_for("bert-large-uncased", None) == str(CONFIG_DIR / "bert-large-uncased.json")
    assert build_config("bert-large-uncased", None).num_hidden_layers == 24
    path = write_json(tmp_path, {**GOOGLE_BASE, "num_hidden_layers": 2})
    assert build_config("bert-large-uncased", str(path)).num_hidden_layers == 2  # --config-file wins
    with pytest.raises(ValueError, match="^--bert-model custom needs --config-file$"):
        build_config("custom", None)


def test_fuse_mha_flag_decides_whatever_the_file_says(tmp_path):
    fused_file = write_json(tmp_path, {**GOOGLE_BASE, "fuse_mha": True})
    assert build_config("custom", str(fused_file), fuse_mha=False).fuse_mha is False
    assert build_config("custom", str(fused_file), fuse_mha=True).fuse_mha is True
    with pytest.raises(ValueError, match=r"config.json: fuse_mha must be true or false, got 1$"):
        build_config("custom", str(fused_file), fuse_mha=1)


def test_pad_multiple_applies_unless_the_file_sets_its_own(tmp_path):
    plain = write_json(tmp_path, GOOGLE_BASE, "plain.json")
    config = build_config("custom", str(plain), pad_vocab_size_multiple=8)
    assert config.pad_vocab_size_multiple == 8 and config.padded_vocab_size == 30528
    assert build_config("custom", str(plain)).padded_vocab_size == 30522
    own = write_json(tmp_path, {**GOOGLE_BASE, "pad_vocab_size_multiple": 128}, "own.json")
    assert build_config("custom", str(own), pad_vocab_size_multiple=8).padded_vocab_size == 30592  # 239 * 128
    with pytest.raises(ValueError, match=r"plain.json: pad_vocab_size_multiple must be a whole number >= 1, got 0"):
        build_config("custom", str(plain), pad_vocab_size_multiple=0)


def test_max_seq_length_beyond_the_position_table_is_refused_naming_both(tmp_path):
    path = write_json(tmp_path, {**GOOGLE_BASE, "max_position_embeddings": 128})
    assert build_config("custom", str(path), max_seq_length=128).max_position_embeddings == 128
    with pytest.raises(ValueError) as raised:
        build_config("custom", str(path), max_seq_length=129)
    assert str(raised.value) == f"--max-seq-length 129 exceeds max_position_embeddings 128 of {path}"


def test_build_config_reads_a_transformers5_config_with_the_flags():
    config = build_config("custom", str(TF5_CONFIG), fuse_mha=True, pad_vocab_size_multiple=8, max_seq_length=16)
    expected = BertConfig.from_json_file(TF5_CONFIG)
    assert config == dataclasses.replace(expected, fuse_mha=True, pad_vocab_size_multiple=8)
    assert config.padded_vocab_size == 32
    with pytest.raises(ValueError, match="--max-seq-length 17 exceeds max_position_embeddings 16"):
        build_config("custom", str(TF5_CONFIG), max_seq_length=17)


def test_config_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        BertConfig().hidden_size = 10
