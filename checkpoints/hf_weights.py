"""Hugging Face's BERT checkpoints for convert_checkpoint.py: read a folder, convert it checked against its config,
and convert PaddleBERT weights back with the config.json that transformers reads.

A Hugging Face BERT folder holds config.json and model.safetensors or pytorch_model.bin (read without torch and
without running any code: paddle_files.py). hf_to_paddle renames its tensors (hf_names.py, whose renaming weights.py
also uses to load such a folder in memory wherever a script takes weights) and checks every tensor against the
config; paddle_to_hf is the way back.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import paddle

from bert_config import HF_ARCHITECTURE_VALUES, RECIPE_FIELDS, BertConfig
from checkpoints.hf_names import HF_CONFIG_FILE, HF_WEIGHT_FILES, hf_name_of, is_linear_weight, rename_hf_state
from checkpoints.paddle_files import read_safetensors_state, read_torch_bin
from checkpoints.weights import (
    ENCODER_PARTS,
    HEADS,
    VOCAB_ROWS,
    as_numpy,
    check_parts,
    convert_qkv_layout,
    fit_vocab_rows,
    part_of,
    travelling_config,
    with_bert_prefix,
)
from modeling import BertForPretraining, BertForQuestionAnswering, BertForSequenceClassification
from utils.progress import progress_bar


def read_hf_checkpoint(hf_dir: str | os.PathLike) -> tuple[BertConfig, dict[str, np.ndarray], Path]:
    """(config, tensors under their HF names, the weights file read) of a Hugging Face BERT folder. ValueError when
    its config.json is not the network the weights file is loaded as (weights.travelling_config): a config.json that
    sets one of our budget-recipe options, or a <name>_config.json of ours beside the weights that builds another
    network."""
    hf_dir = Path(hf_dir)
    if not hf_dir.is_dir():
        raise FileNotFoundError(f"{hf_dir}: Hugging Face checkpoint folder not found")
    config = BertConfig.from_json_file(hf_dir / HF_CONFIG_FILE)
    for file_name in HF_WEIGHT_FILES:
        weights_path = hf_dir / file_name
        if weights_path.is_file():
            travelling_config(weights_path)
            return config, read_hf_weights(weights_path), weights_path
    raise FileNotFoundError(f"{hf_dir}: holds neither model.safetensors nor pytorch_model.bin")


def read_hf_weights(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """The tensors of a Hugging Face weights file: safetensors, or torch's pickle read without running code."""
    return read_torch_bin(path) if Path(path).name == HF_WEIGHT_FILES[1] else read_safetensors_state(path)


# ---------------------------------------------------------------------------------------------
# Heads: weights' parts other than the encoder's
# ---------------------------------------------------------------------------------------------



def _expected_shapes(config: BertConfig, num_labels: int) -> dict[str, list[int]]:
    """Every parameter name and shape the (unfused) Paddle models built from config have."""
    config = dataclasses.replace(config, fuse_mha=False)
    # LazyGuard builds the layers without allocating or initialising their weights.
    with paddle.LazyGuard():
        models = [BertForPretraining(config), BertForQuestionAnswering(config),
                  BertForSequenceClassification(config, num_labels)]
    return {name: list(value.shape) for model in models for name, value in model.state_dict().items()}


@functools.cache
def hf_head_prefixes() -> dict[str, str]:
    """Each head's Hugging Face module (the dotted prefix its HF parameter names share), for messages."""
    smallest = BertConfig(vocab_size=1, hidden_size=1, num_hidden_layers=1, num_attention_heads=1,
                          intermediate_size=1, max_position_embeddings=1, type_vocab_size=1)
    hf_names: dict[str, list[list[str]]] = {head: [] for head in HEADS}
    for name in _expected_shapes(smallest, num_labels=1):
        if part_of(name) in hf_names:
            hf_names[part_of(name)].append(hf_name_of(name).split("."))
    # os.path.commonprefix compares any sequences element by element, here lists of dotted components.
    return {head: ".".join(os.path.commonprefix(names)) for head, names in hf_names.items()}


def check_parameters(state: Mapping[str, np.ndarray], config: BertConfig, source: str,
                     display_name: Callable[[str], str] = str) -> dict[str, bool]:
    """Validate Paddle-named parameters against config; return {head: present} for every head.

    Raises ValueError naming `source` (and parameters by display_name) if a parameter has no place
    or the wrong shape, the encoder is incomplete, or a head is only partly there (weights.check_parts).
    """
    num_labels = state["classifier.bias"].shape[0] if "classifier.bias" in state else 2
    expected = _expected_shapes(config, num_labels)
    for name, value in state.items():
        if name not in expected:
            raise ValueError(f"{source}: {display_name(name)} has no place in a "
                             f"{config.num_hidden_layers}-layer BERT")
        if list(value.shape) != expected[name]:
            raise ValueError(f"{source}: {display_name(name)} has shape {list(value.shape)}, "
                             f"the config implies {expected[name]}")
    present = check_parts(expected, state, required=ENCODER_PARTS, source=source, display=display_name)
    return {head: present[head] for head in HEADS}


@dataclasses.dataclass
class Conversion:
    """The outcome of hf_to_paddle."""

    state: dict[str, np.ndarray]  # Paddle names and layouts, float32
    heads: dict[str, bool]  # HEADS name -> present in the source
    dropped: list[str]  # source entries that are buffers or copies of other entries


def hf_to_paddle(hf_state: Mapping[str, np.ndarray], config: BertConfig, source: str) -> Conversion:
    """Rename, transpose and validate a Hugging Face BERT state dict for PaddleBERT."""
    renamed = rename_hf_state(hf_state, source)
    heads = check_parameters(renamed.state, config, source,
                             lambda name: renamed.origin.get(name) or hf_name_of(name))
    return Conversion(renamed.state, heads, renamed.dropped)


def paddle_to_hf(
    paddle_state: Mapping, config: BertConfig, source: str
) -> tuple[dict[str, np.ndarray], dict[str, bool]]:
    """A PaddleBERT state dict (any model class, fused or not, padded or not) in HF names and layouts.

    Returns the HF state and {head: present}; raises ValueError naming `source` as check_parameters does.
    """
    state = {}
    for name, value in paddle_state.items():
        array = as_numpy(value)
        state[with_bert_prefix(name)] = array.astype(np.float32) if np.issubdtype(array.dtype, np.floating) else array
    state = convert_qkv_layout(state, fuse_mha=False)
    fit_vocabulary(state, config, source)
    heads = check_parameters(state, config, source)
    with_prefix = any(heads[head] for head in HEADS if head != "pooler")
    hf_state = {}
    for name, array in progress_bar(sorted(state.items()), desc="convert", unit="tensor"):
        if name in VOCAB_ROWS:
            array = array[: config.vocab_size]  # drop the rows added by padding
        if is_linear_weight(name, array):
            array = array.T
        hf_name = hf_name_of(name)
        if with_prefix and name.startswith("bert."):
            hf_name = "bert." + hf_name
        hf_state[hf_name] = np.ascontiguousarray(array)
    return hf_state, heads


def fit_vocabulary(state: dict[str, np.ndarray], config: BertConfig, source: str) -> None:
    """Fit the vocabulary rows of state to config's padded vocabulary, in place, when they are padding of the
    same vocabulary (NVIDIA's multiple of 8, or the config's pad_vocab_size_multiple); else ValueError."""
    rows = config.padded_vocab_size
    state.update((name, fit_vocab_rows(state[name], rows, config.vocab_size, source, name))
                 for name in VOCAB_ROWS if name in state)


def hf_config_dict(config: BertConfig, heads: Mapping[str, bool], num_labels: int = 2) -> dict:
    """config as a Hugging Face config.json, naming the transformers classes the heads fit.

    num_labels is the classifier's output size; transformers reads it from id2label.
    """
    values = config.to_dict()
    for ours_alone in ("pad_vocab_size_multiple", "fuse_mha", "encoder_layer_norm_eps", *RECIPE_FIELDS):
        del values[ours_alone]
    architectures = []
    if heads["mlm"]:
        architectures.append("BertForPreTraining" if heads["nsp"] else "BertForMaskedLM")
    if heads["qa"]:
        architectures.append("BertForQuestionAnswering")
    if heads["classifier"]:
        architectures.append("BertForSequenceClassification")
        values["id2label"] = {str(label): f"LABEL_{label}" for label in range(num_labels)}
    values["architectures"] = architectures or ["BertModel"]
    values.update(HF_ARCHITECTURE_VALUES)
    return values
