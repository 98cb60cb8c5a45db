"""The BERT architecture's hyperparameters, and the one place that builds the config a run uses.

    config = build_config("bert-large-uncased", None, fuse_mha=True, max_seq_length=512)

`build_config` reads the JSON (ours, Google's bert_config.json or Hugging Face's config.json), applies the
run's flags, and only then builds the frozen BertConfig, so that every check runs on the values the model
is actually built with. Every entry script builds its config through it; the converter, which has no such
flags, reads its JSON with the same reader (BertConfig.from_json_file).

A Hugging Face config.json is read by the keys that define the architecture (the BertConfig field names,
which Google and Hugging Face share); its bookkeeping (transformers_version, architectures, dtype, token
ids, label maps, ...) is ignored, whatever new keys a future version adds. Values that would make
transformers build a different network than ours are refused: relative position embeddings, a decoder,
cross-attention, untied MLM decoder weights, pruned attention heads, another model type.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from pathlib import Path

BERT_MODELS = ("bert-base-uncased", "bert-base-cased", "bert-large-uncased", "bert-large-cased", "custom")
CONFIG_DIR = Path(__file__).resolve().parent / "bert_configs"
ACTIVATIONS = ("gelu", "gelu_new", "relu")  # modeling.ACTIVATIONS implements each
# The budget-recipe fields, each with the value of Devlin et al.'s BERT (BertConfig says what they do).
RECIPE_FIELDS = {"pre_layer_norm": False, "linear_bias": True, "gated_feed_forward": False, "alibi": False}

# Hugging Face values that change the network transformers builds, with the value our model corresponds to
# (the converter writes them, so that any transformers version builds our network).
HF_ARCHITECTURE_VALUES = {
    "model_type": "bert",
    "position_embedding_type": "absolute",
    "is_decoder": False,
    "add_cross_attention": False,
    "tie_word_embeddings": True,
    "pruned_heads": {},
}
# Keys that mark a config.json as Hugging Face's (each transformers version writes at least one).
_HF_MARKERS = ("model_type", "architectures", "transformers_version")


@dataclasses.dataclass(frozen=True)
class BertConfig:
    """Architecture hyperparameters. The field names are those of Google's bert_config.json."""

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    # The LayerNorms' epsilon: the embeddings' and the masked-LM head's, and the encoder layers' unless
    # encoder_layer_norm_eps gives theirs apart (None: the same). Google's and Hugging Face's BERT have one value;
    # NVIDIA's Paddle BERT uses Paddle's transformer layers, 1e-5 in the encoder and 1e-12 elsewhere.
    layer_norm_eps: float = 1e-12
    encoder_layer_norm_eps: float | None = None
    # Round the embedding table up to this multiple (8 suits tensor cores); 1 = no padding.
    pad_vocab_size_multiple: int = 1
    # Project Q, K and V with one [H, 3H] matrix instead of three [H, H] ones.
    fuse_mha: bool = False
    # Budget-recipe options (run_pretraining.py's --pre-layer-norm, --no-linear-bias, --gated-feed-forward and
    # --alibi); the defaults build Devlin et al.'s BERT, the only network transformers' BertModel and NGC's
    # checkpoints hold.
    # Pre-LayerNorm residual blocks, x + f(LN(x)), with one more LayerNorm after the last layer (Xiong et al. 2020,
    # "On Layer Normalization in the Transformer Architecture", arXiv:2002.04745; Cramming trains so).
    pre_layer_norm: bool = False
    # Biases in the encoder's linear layers (Q, K, V, attention output, feed-forward); Cramming drops them.
    linear_bias: bool = True
    # Gated feed-forward, act(x W_gate) * (x W_up) (Shazeer 2020, "GLU Variants Improve Transformer",
    # arXiv:2002.05202): the intermediate layer projects to 2 x intermediate_size, gate columns first.
    gated_feed_forward: bool = False
    # A fixed bias -m_h |i - j| on every attention score, by head h and the distance between query i and key j
    # (ALiBi: Press et al. 2022, "Train Short, Test Long", arXiv:2108.12409; MosaicBERT uses it in both directions,
    # Portes et al. 2023, arXiv:2312.17482). The learned position table stays: it tells left from right.
    alibi: bool = False

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                     "max_position_embeddings", "type_vocab_size", "pad_vocab_size_multiple"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size {self.hidden_size} is not a multiple of num_attention_heads {self.num_attention_heads}"
            )
        for name in ("fuse_mha", *RECIPE_FIELDS):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.hidden_act not in ACTIVATIONS:
            raise ValueError(f"hidden_act {self.hidden_act!r} is not one of {sorted(ACTIVATIONS)}")
        for name in ("layer_norm_eps", "encoder_layer_norm_eps"):
            value = getattr(self, name)
            if value is None and name == "encoder_layer_norm_eps":
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1:
                raise ValueError(f"{name} must be a number in (0, 1), got {value!r}")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {getattr(self, name)}")

    @property
    def encoder_eps(self) -> float:
        """The epsilon of the encoder layers' LayerNorms."""
        return self.layer_norm_eps if self.encoder_layer_norm_eps is None else self.encoder_layer_norm_eps

    @property
    def padded_vocab_size(self) -> int:
        multiple = self.pad_vocab_size_multiple
        return (self.vocab_size + multiple - 1) // multiple * multiple

    @classmethod
    def from_dict(cls, values: Mapping, source: str = "config") -> BertConfig:
        """Our, Google's or Hugging Face's config as a dict (see config_values); errors name `source`."""
        return _build(config_values(values, source), source)

    @classmethod
    def from_json_file(cls, path: str | os.PathLike) -> BertConfig:
        return cls.from_dict(_read_json(path), source=str(path))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json_string(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"


_FIELDS = {field.name for field in dataclasses.fields(BertConfig)}
# Fields that are ours alone: how we lay out the same network, not what the network is.
_LAYOUT_FIELDS = {"pad_vocab_size_multiple", "fuse_mha"}
_ARCHITECTURE_FIELDS = _FIELDS - _LAYOUT_FIELDS


def config_values(values: Mapping, source: str) -> dict:
    """The BertConfig fields a config dict gives: from ours or Google's every key, which must be a field;
    from a Hugging Face config (one with a marker key) its architecture keys, after refusing any value
    that makes transformers build another network."""
    if not any(key in values for key in _HF_MARKERS):
        unknown = sorted(set(values) - _FIELDS)
        if unknown:
            raise ValueError(f"{source}: unknown BERT config keys {unknown}")
        return dict(values)
    for key, ours in HF_ARCHITECTURE_VALUES.items():
        if key in values and values[key] != ours:
            raise ValueError(f"{source}: {key} {values[key]!r} describes another architecture than BERT's "
                             f"(PaddleBERT builds {key} {ours!r})")
    return {key: values[key] for key in _ARCHITECTURE_FIELDS if key in values}


def _read_json(path: str | os.PathLike) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            values = json.load(f)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: BERT config file not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: not valid JSON ({error})") from None
    if not isinstance(values, dict):
        raise ValueError(f"{path}: a BERT config must be a JSON object")
    return values


def _build(values: dict, source: str) -> BertConfig:
    try:
        return BertConfig(**values)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{source}: {error}") from None


# The fields that decide what function a set of weights computes. The others may differ between two configs of
# the same weights: dropout and initializer_range only shape training, and the layout fields (_LAYOUT_FIELDS) are
# converted when the weights load.
_FUNCTION_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                    "hidden_act", "max_position_embeddings", "type_vocab_size", "layer_norm_eps", "encoder_eps",
                    *RECIPE_FIELDS)


def first_difference(config: BertConfig, other: BertConfig) -> tuple[str, object, object] | None:
    """(field, config's value, other's value) of the first field in which the two configs build networks that
    compute different functions, or None when they build the same one (see _FUNCTION_FIELDS)."""
    for name in _FUNCTION_FIELDS:
        if getattr(config, name) != getattr(other, name):
            return name, getattr(config, name), getattr(other, name)
    return None


def check_plain_bert(config: BertConfig, source: str, target: str) -> None:
    """ValueError naming `source` and the first budget-recipe option it uses, for a `target` (transformers'
    BertModel, an NGC layout) that only holds Devlin et al.'s BERT."""
    for name, plain in RECIPE_FIELDS.items():
        if getattr(config, name) != plain:
            raise ValueError(f"{source}: {name} {getattr(config, name)!r} (a budget-recipe option) cannot be "
                             f"expressed in {target}, which only holds BERT's own architecture")


def config_file_for(bert_model: str, config_file: str | None) -> str:
    """--config-file if given, else bert_configs/<bert-model>.json; ValueError for `custom` without one."""
    if config_file is not None:
        return config_file
    if bert_model == "custom":
        raise ValueError("--bert-model custom needs --config-file")
    return str(CONFIG_DIR / f"{bert_model}.json")


def build_config(
    bert_model: str,
    config_file: str | None,
    *,
    fuse_mha: bool = False,
    pad_vocab_size_multiple: int | None = None,
    max_seq_length: int | None = None,
    recipe: Mapping[str, bool] | None = None,
) -> BertConfig:
    """The config a run builds its model from: the JSON of --config-file (or --bert-model's), with the flags.

    recipe holds the budget-recipe fields (RECIPE_FIELDS) that flags set, over the file's values.
    pad_vocab_size_multiple replaces the file's value when the file leaves it at 1 (no padding). A
    --max-seq-length longer than the position table, and a type_vocab_size below 2, are refused, naming the file.
    """
    path = config_file_for(bert_model, config_file)
    values = config_values(_read_json(path), path)
    values["fuse_mha"] = fuse_mha
    values.update(recipe or {})
    if pad_vocab_size_multiple is not None and values.get("pad_vocab_size_multiple", 1) == 1:
        values["pad_vocab_size_multiple"] = pad_vocab_size_multiple
    config = _build(values, path)
    # Every input the scripts build gives its second segment (sentence B, SQuAD's context) token type 1; with one
    # row the embedding lookup would fail inside Paddle at the first step.
    if config.type_vocab_size < 2:
        raise ValueError(f"{path}: type_vocab_size {config.type_vocab_size} is too small: the inputs give the "
                         "second segment token type 1, so it must be at least 2")
    if max_seq_length is not None and max_seq_length > config.max_position_embeddings:
        raise ValueError(f"--max-seq-length {max_seq_length} exceeds max_position_embeddings "
                         f"{config.max_position_embeddings} of {path}")
    return config
