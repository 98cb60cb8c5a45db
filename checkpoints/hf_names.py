"""Hugging Face's BERT parameter names and layouts against PaddleBERT's: the renaming both ways, and what a Hugging
Face folder holds.

A Hugging Face BERT folder holds config.json and model.safetensors or pytorch_model.bin. rename_hf_state maps its
tensors to modeling.py's names: it renames them, transposes the Linear weights (torch stores [out, in], Paddle
[in, out]) and drops the buffers and the tied decoder weight (a copy of the word embeddings, checked to be one).
weights.py loads such a file with it, converted in memory; hf_weights.py adds the checks against a config and the
way back for convert_checkpoint.py.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

import numpy as np

from utils.progress import progress_bar

# A Hugging Face folder's config, vocabulary and weights files, the weights in the order transformers prefers them.
HF_CONFIG_FILE = "config.json"
HF_VOCAB_FILE = "vocab.txt"
HF_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


def is_hf_state(state: Mapping) -> bool:
    """Whether a state dict's names are Hugging Face's (encoder.layer.N... with or without `bert.`)."""
    return any(_normalise_hf_name(name).startswith(("encoder.layer.", "embeddings.LayerNorm.")) for name in state)


# ---------------------------------------------------------------------------------------------
# Names and layouts
# ---------------------------------------------------------------------------------------------

# (HF module, Paddle module); each has a .weight and a .bias. HF names are given without the
# optional `bert.` prefix; Paddle names are those of BertForPretraining and friends.
_MODULE_NAMES = [
    ("embeddings.word_embeddings", "bert.embeddings.word_embeddings"),
    ("embeddings.position_embeddings", "bert.embeddings.position_embeddings"),
    ("embeddings.token_type_embeddings", "bert.embeddings.token_type_embeddings"),
    ("embeddings.LayerNorm", "bert.embeddings.layer_norm"),
    ("encoder.layer.{layer}.attention.self.query", "bert.encoder.{layer}.attention.query"),
    ("encoder.layer.{layer}.attention.self.key", "bert.encoder.{layer}.attention.key"),
    ("encoder.layer.{layer}.attention.self.value", "bert.encoder.{layer}.attention.value"),
    ("encoder.layer.{layer}.attention.output.dense", "bert.encoder.{layer}.attention_output"),
    ("encoder.layer.{layer}.attention.output.LayerNorm", "bert.encoder.{layer}.attention_layer_norm"),
    ("encoder.layer.{layer}.intermediate.dense", "bert.encoder.{layer}.intermediate"),
    ("encoder.layer.{layer}.output.dense", "bert.encoder.{layer}.output"),
    ("encoder.layer.{layer}.output.LayerNorm", "bert.encoder.{layer}.output_layer_norm"),
    ("pooler.dense", "bert.pooler.dense"),
    ("cls.predictions.transform.dense", "cls.transform"),
    ("cls.predictions.transform.LayerNorm", "cls.transform_layer_norm"),
    ("cls.seq_relationship", "cls.seq_relationship"),
    ("qa_outputs", "qa_outputs"),
    ("classifier", "classifier"),
]
# The masked-LM output bias is a lone parameter, not a module's.
_PARAMETER_NAMES = [("cls.predictions.bias", "cls.decoder_bias")]

# Entries of HF files that are not parameters, or copies of other entries.
_HF_BUFFERS = ("embeddings.position_ids", "embeddings.token_type_ids")
_HF_TIED_DECODER_WEIGHT = "cls.predictions.decoder.weight"  # the word embeddings again
_HF_DECODER_BIAS_ALIAS = "cls.predictions.decoder.bias"  # cls.predictions.bias again


def _rename_rules(module_pairs, parameter_pairs) -> list[tuple[re.Pattern, str]]:
    """(pattern, target template) rules that map names from the first to the second of each pair."""
    rules = []
    for source, target in module_pairs:
        pattern = re.escape(source).replace(re.escape("{layer}"), r"(?P<layer>\d+)") + r"\.(?P<kind>weight|bias)"
        rules.append((re.compile(pattern), target + ".{kind}"))
    rules += [(re.compile(re.escape(source)), target) for source, target in parameter_pairs]
    return rules


_HF_TO_PADDLE_RULES = _rename_rules(_MODULE_NAMES, _PARAMETER_NAMES)
_PADDLE_TO_HF_RULES = _rename_rules([pair[::-1] for pair in _MODULE_NAMES], [pair[::-1] for pair in _PARAMETER_NAMES])


def _rename(name: str, rules: list[tuple[re.Pattern, str]]) -> str | None:
    for pattern, target in rules:
        match = pattern.fullmatch(name)
        if match:
            return target.format(**match.groupdict())
    return None


def _normalise_hf_name(name: str) -> str:
    """Drop the `bert.` prefix and rename the old TF-era LayerNorm gamma/beta to weight/bias."""
    if name.startswith("bert."):
        name = name[len("bert."):]
    return re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", name))


def is_linear_weight(paddle_name: str, value: np.ndarray) -> bool:
    # Linear weights are [in, out] in Paddle and [out, in] in torch; embeddings are [rows, H] in both.
    return value.ndim == 2 and not paddle_name.startswith("bert.embeddings.")


@dataclasses.dataclass
class Renamed:
    """A Hugging Face state dict in PaddleBERT's names and layouts."""

    state: dict[str, np.ndarray]  # Paddle names and layouts, float32
    origin: dict[str, str]  # Paddle name -> the Hugging Face name it came from
    dropped: list[str]  # source entries that are buffers or copies of other entries


def hf_name_of(paddle_name: str) -> str | None:
    """The Hugging Face name of a PaddleBERT parameter (without the `bert.` prefix of a model with heads)."""
    return _rename(paddle_name, _PADDLE_TO_HF_RULES)


def rename_hf_state(hf_state: Mapping[str, np.ndarray], source: str) -> Renamed:
    """Rename and transpose a Hugging Face BERT state dict for PaddleBERT; ValueError naming `source` for a tensor
    that is no BERT parameter, two copies that differ, or a decoder weight that is not the word embeddings."""
    state: dict[str, np.ndarray] = {}
    origin: dict[str, str] = {}
    dropped, unknown = [], []
    tied_decoder_weight = None
    for hf_name, value in progress_bar(hf_state.items(), desc="convert", total=len(hf_state), unit="tensor"):
        name = _normalise_hf_name(hf_name)
        if name in _HF_BUFFERS:
            dropped.append(hf_name)
            continue
        if name == _HF_TIED_DECODER_WEIGHT:
            tied_decoder_weight = (hf_name, value)
            continue
        paddle_name = _rename("cls.predictions.bias" if name == _HF_DECODER_BIAS_ALIAS else name, _HF_TO_PADDLE_RULES)
        if paddle_name is None:
            unknown.append(hf_name)
            continue
        if np.issubdtype(value.dtype, np.floating):
            value = value.astype(np.float32)
        if is_linear_weight(paddle_name, value):
            value = np.ascontiguousarray(value.T)
        if paddle_name in state:
            if not np.array_equal(state[paddle_name], value):
                raise ValueError(f"{source}: {origin[paddle_name]} and {hf_name} should be equal but differ")
            dropped.append(hf_name)
            continue
        state[paddle_name], origin[paddle_name] = value, hf_name
    if unknown:
        raise ValueError(f"{source}: tensors that are not BERT parameters: {', '.join(unknown)}")
    word_embeddings = state.get("bert.embeddings.word_embeddings.weight")
    if tied_decoder_weight is not None:
        hf_name, value = tied_decoder_weight
        if word_embeddings is None or not np.array_equal(value.astype(np.float32), word_embeddings):
            raise ValueError(f"{source}: {hf_name} differs from the word embeddings; PaddleBERT ties the "
                             "masked-LM decoder to them, so this checkpoint cannot be converted faithfully")
        dropped.append(hf_name)
    return Renamed(state, origin, dropped)
