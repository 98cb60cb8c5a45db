"""Convert BERT checkpoints between Hugging Face's format and PaddleBERT's Paddle parameters.

    python convert_checkpoint.py hf2paddle HF_DIR OUT.pdparams|OUT.safetensors [--config-out CONFIG.json]
                                                              [--require-heads HEAD [HEAD ...]] [--overwrite]
    python convert_checkpoint.py paddle2hf PADDLE.pdparams CONFIG.json OUT_DIR [--overwrite]
    python convert_checkpoint.py nvidia2paddle NGC_PREFIX_OR_FILE OUT.pdparams|OUT.safetensors [--config CONFIG.json
                                                                                [--config-out OUT.json]] [--overwrite]

hf2paddle reads HF_DIR/config.json and HF_DIR/model.safetensors, else HF_DIR/pytorch_model.bin, which
paddle_files.read_torch_bin reads without torch and without running code. OUT.pdparams is a paddle.save'd
dict of float32 arrays under the names of BertForPretraining / BertForQuestionAnswering /
BertForSequenceClassification
(`bert.`-prefixed encoder, `cls.`, `qa_outputs.`, `classifier.`); an output path ending in .safetensors
gets the same arrays as a safetensors file, the format to share. weights.load_state loads either into
any of them or into a bare BertModel, fused or unfused, with or without a padded vocabulary. The model's
PaddleBERT config goes beside OUT as <OUT name>_config.json, which the fine-tuning scripts take with the
weights (weights.model_config_file).

The encoder (embeddings and every layer) must be complete. Each head -- pooler, mlm, nsp, qa,
classifier -- is all there or absent; the command prints which, so that a model built with an absent
head knows it starts from random weights. --require-heads makes an absent head an error.

paddle2hf writes OUT_DIR/model.safetensors and OUT_DIR/config.json in HF naming: unfused Q/K/V,
unpadded vocabulary, torch's [out, in] Linear layout, `bert.` prefix only when a head is present
(as transformers' BertModel and BertFor* models save themselves). The tied decoder weight is not
written, as transformers does not write it either.

nvidia2paddle reads a checkpoint of NVIDIA's "BERT for PaddlePaddle" (the NGC downloads): the .pdparams of
a paddle.static.save, through paddle_files' restricted reader like every other file, and maps its parameters
with ngc_weights.py, which recognises the encoder's layout (unfused, NVIDIA's --fuse-mha fused QKV, or
FusedTransformerEncoderLayer) by itself. weights.load_pretrained does the same in memory, so every script also
takes such a file as it is. --config-out writes the --config with NVIDIA's LayerNorm epsilons (encoder 1e-5,
embeddings and masked-LM head 1e-12): with it our model computes NVIDIA's function, which our configs' 1e-12
everywhere changes slightly.

No command writes onto a file it reads, and none replaces an existing output file unless --overwrite is given.
"""

from __future__ import annotations

import runtime  # noqa: F401  # isort: skip  (first: it imports Paddle without its import-time warnings)
import argparse
import dataclasses
import functools
import json
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import paddle
from safetensors.numpy import save_file

from atomic_io import atomic_write, atomic_write_text
from bert_config import HF_ARCHITECTURE_VALUES, BertConfig
from modeling import BertForPretraining, BertForQuestionAnswering, BertForSequenceClassification
from ngc_weights import NVIDIA_ENCODER_LAYER_NORM_EPS, NVIDIA_LAYER_NORM_EPS, nvidia_to_paddle
from paddle_files import read_safetensors_state, read_torch_bin
from progress import progress_bar
from weights import (
    ENCODER_PARTS,
    HEADS,
    SAFETENSORS_SUFFIX,
    VOCAB_ROWS,
    as_numpy,
    check_parts,
    config_beside,
    convert_qkv_layout,
    fit_vocab_rows,
    part_of,
    read_weights,
    with_bert_prefix,
    write_safetensors_weights,
)


def read_hf_checkpoint(hf_dir: str | os.PathLike) -> tuple[BertConfig, dict[str, np.ndarray], Path]:
    """(config, tensors under their HF names, the weights file read) of a Hugging Face BERT folder."""
    hf_dir = Path(hf_dir)
    if not hf_dir.is_dir():
        raise FileNotFoundError(f"{hf_dir}: Hugging Face checkpoint folder not found")
    config = BertConfig.from_json_file(hf_dir / "config.json")
    for file_name, reader in (("model.safetensors", read_safetensors_state), ("pytorch_model.bin", read_torch_bin)):
        weights_path = hf_dir / file_name
        if weights_path.is_file():
            return config, reader(weights_path), weights_path
    raise FileNotFoundError(f"{hf_dir}: holds neither model.safetensors nor pytorch_model.bin")


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


def _is_linear_weight(paddle_name: str, value: np.ndarray) -> bool:
    # Linear weights are [in, out] in Paddle and [out, in] in torch; embeddings are [rows, H] in both.
    return value.ndim == 2 and not paddle_name.startswith("bert.embeddings.")


# ---------------------------------------------------------------------------------------------
# Heads: weights' parts other than the encoder's
# ---------------------------------------------------------------------------------------------

# What --require-heads accepts: a head, or what a model class needs.
HEAD_GROUPS = {**{head: (head,) for head in HEADS}, "pretraining": ("pooler", "mlm", "nsp")}


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
            hf_names[part_of(name)].append(_rename(name, _PADDLE_TO_HF_RULES).split("."))
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
        if _is_linear_weight(paddle_name, value):
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
    heads = check_parameters(state, config, source, lambda name: origin.get(name) or _rename(name, _PADDLE_TO_HF_RULES))
    return Conversion(state, heads, dropped)


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
        if _is_linear_weight(name, array):
            array = array.T
        hf_name = _rename(name, _PADDLE_TO_HF_RULES)
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
    del values["pad_vocab_size_multiple"], values["fuse_mha"], values["encoder_layer_norm_eps"]
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


# ---------------------------------------------------------------------------------------------
# NVIDIA's static-graph checkpoints (NGC)
# ---------------------------------------------------------------------------------------------


def read_ngc_checkpoint(path: str | os.PathLike) -> tuple[dict[str, np.ndarray], Path]:
    """(parameters by static name as float arrays, the file read) of a paddle.static.save prefix or .pdparams."""
    path = Path(path)
    file = path if path.suffix == ".pdparams" else path.with_name(path.name + ".pdparams")
    if not file.is_file():
        raise FileNotFoundError(f"{path}: neither a .pdparams file nor the prefix of one")
    return {name: as_numpy(value) for name, value in read_weights(file).items()}, file


# ---------------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------------


def _describe_heads(heads: Mapping[str, bool]) -> list[str]:
    prefixes = hf_head_prefixes()
    return [f"  {head:<10} {'present' if present else 'absent'} ({prefixes[head]}.*)"
            for head, present in heads.items()]


def write_weights(path: str | os.PathLike, state: Mapping[str, np.ndarray]) -> None:
    """Write our parameters to a .safetensors file, or else a paddle.save'd .pdparams; print what was written."""
    path = Path(path)
    if path.suffix == SAFETENSORS_SUFFIX:
        write_safetensors_weights(path, state)
    else:
        atomic_write(path, lambda temp_path: paddle.save(dict(state), temp_path))
    print(f"wrote {len(state)} parameters to {path}")


def check_outputs(outputs: Sequence[Path], inputs: Sequence[Path], overwrite: bool) -> None:
    """Before anything is written: refuse an output that is one of the command's inputs (even with --overwrite:
    a conversion that destroys its source cannot be undone), and an existing output unless overwrite is set."""
    read = {path.resolve() for path in inputs}
    for output in outputs:
        if output.resolve() in read:
            raise ValueError(f"{output} is what this command reads; write the output elsewhere")
        if output.is_dir():
            raise ValueError(f"{output} is a folder, not a file")
        if output.exists() and not overwrite:
            raise ValueError(f"{output} exists; pass --overwrite to replace it")


def run_hf2paddle(args: argparse.Namespace) -> None:
    config, hf_state, weights_path = read_hf_checkpoint(args.hf_dir)
    config_paths = [config_beside(args.out_weights)]
    if args.config_out and Path(args.config_out).resolve() != config_paths[0].resolve():
        config_paths.append(Path(args.config_out))
    # A config that already says what this one says is no work to lose (an OUT.pdparams and OUT.safetensors share it).
    changed = [path for path in config_paths
               if not (path.is_file() and path.read_text(encoding="utf-8") == config.to_json_string())]
    check_outputs([Path(args.out_weights), *changed], [weights_path, Path(args.hf_dir, "config.json")],
                  args.overwrite)
    conversion = hf_to_paddle(hf_state, config, str(weights_path))
    print(f"read {len(hf_state)} tensors from {weights_path} ({config.num_hidden_layers} layers, "
          f"hidden {config.hidden_size})")
    print("\n".join(_describe_heads(conversion.heads)))
    if conversion.dropped:
        print(f"  dropped buffers and duplicates: {', '.join(conversion.dropped)}")
    required = sorted({head for group in args.require_heads for head in HEAD_GROUPS[group]})
    absent = [head for head in required if not conversion.heads[head]]
    if absent:
        raise ValueError(f"{weights_path}: required head(s) absent: "
                         + ", ".join(f"{head} ({hf_head_prefixes()[head]}.*)" for head in absent))
    write_weights(args.out_weights, conversion.state)
    # The config beside the weights travels with them: --from-pretrained-params OUT builds its model from it.
    for config_path in config_paths:
        atomic_write_text(config_path, config.to_json_string())
        print(f"wrote PaddleBERT config to {config_path}")
    absent = [head for head, present in conversion.heads.items() if not present]
    if absent:
        print(f"absent heads start from random initialisation if a model has them: {', '.join(absent)}")


def run_paddle2hf(args: argparse.Namespace) -> None:
    config = BertConfig.from_json_file(args.config)
    if config.encoder_eps != config.layer_norm_eps:
        # transformers' BertConfig has one layer_norm_eps for every LayerNorm.
        print(f"note: transformers has one layer_norm_eps; config.json gets {config.layer_norm_eps}, so the encoder's "
              f"{config.encoder_eps} is not kept and outputs change slightly")
    out_dir = Path(args.out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"{out_dir} is a file; paddle2hf writes a folder")
    outputs = [out_dir / "model.safetensors", out_dir / "config.json"]
    check_outputs(outputs, [Path(args.pdparams), Path(args.config)], args.overwrite)
    hf_state, heads = paddle_to_hf(read_weights(args.pdparams), config, args.pdparams)
    others = sorted(path.name for path in out_dir.iterdir() if path not in outputs) if out_dir.is_dir() else []
    if others:  # a tokenizer left there belongs to whatever model the folder held before
        print(f"note: {out_dir} also holds {', '.join(others)}, which this command neither wrote nor checked")
    # transformers refuses safetensors files without format metadata.
    atomic_write(out_dir / "model.safetensors",
                      lambda temp_path: save_file(hf_state, temp_path, metadata={"format": "pt"}))
    num_labels = hf_state["classifier.bias"].shape[0] if heads["classifier"] else 2
    hf_config = hf_config_dict(config, heads, num_labels)
    atomic_write_text(out_dir / "config.json", json.dumps(hf_config, indent=2, sort_keys=True) + "\n")
    print(f"wrote {len(hf_state)} tensors to {out_dir / 'model.safetensors'} and {out_dir / 'config.json'}")
    print("\n".join(_describe_heads(heads)))


def run_nvidia2paddle(args: argparse.Namespace) -> None:
    if args.config_out and not args.config:
        raise ValueError("--config-out needs --config (the architecture, which a checkpoint does not fully name)")
    ngc_state, file = read_ngc_checkpoint(args.ngc_checkpoint)
    check_outputs([Path(args.out_weights), *([Path(args.config_out)] if args.config_out else [])],
                  [file, *([Path(args.config)] if args.config else [])], args.overwrite)
    conversion = nvidia_to_paddle(ngc_state, str(file))
    state = conversion.state
    if args.config:
        config = BertConfig.from_json_file(args.config)
        fit_vocabulary(state, config, f"{file} (checked against {args.config})")
        check_parameters(state, config, f"{file} (checked against {args.config})")
    print(f"read {len(ngc_state)} parameters from {file}: "
          f"{sum(name.endswith('attention.query.weight') for name in state)} layers ({conversion.layout}), "
          f"hidden {state['bert.embeddings.word_embeddings.weight'].shape[1]}")
    print("\n".join(_describe_heads({head: any(part_of(name) == head for name in state) for head in HEADS})))
    write_weights(args.out_weights, state)
    if args.config_out:
        nvidia_config = dataclasses.replace(config, layer_norm_eps=NVIDIA_LAYER_NORM_EPS,
                                            encoder_layer_norm_eps=NVIDIA_ENCODER_LAYER_NORM_EPS)
        atomic_write_text(Path(args.config_out), nvidia_config.to_json_string())
        print(f"wrote {args.config_out}: {args.config} with NVIDIA's LayerNorm epsilons (encoder "
              f"{NVIDIA_ENCODER_LAYER_NORM_EPS}, embeddings and masked-LM head {NVIDIA_LAYER_NORM_EPS})")


def add_out_weights(command: argparse.ArgumentParser) -> None:
    """The weights file that hf2paddle and nvidia2paddle write, its format chosen by its suffix."""
    command.add_argument("out_weights", metavar="out",
                         help="weights file to write: OUT.pdparams, or OUT.safetensors (the format to share)")


def add_overwrite(command: argparse.ArgumentParser) -> None:
    command.add_argument("--overwrite", action="store_true",
                         help="replace output files that exist (never a file the command reads)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    hf2paddle = commands.add_parser("hf2paddle", help="Hugging Face folder -> Paddle .pdparams")
    hf2paddle.add_argument("hf_dir", help="folder with config.json and model.safetensors or pytorch_model.bin")
    add_out_weights(hf2paddle)
    hf2paddle.add_argument("--config-out", help="also write the PaddleBERT config JSON here (it is always written "
                                                "beside OUT as <OUT name>_config.json)")
    hf2paddle.add_argument("--require-heads", nargs="+", default=[], choices=sorted(HEAD_GROUPS),
                           help="fail unless these heads are in the source; pretraining = pooler mlm nsp")
    add_overwrite(hf2paddle)
    hf2paddle.set_defaults(run=run_hf2paddle)
    paddle2hf = commands.add_parser("paddle2hf", help="Paddle .pdparams -> Hugging Face folder")
    paddle2hf.add_argument("pdparams", help="Paddle parameter file (paddle.save of a state dict)")
    paddle2hf.add_argument("config", help="PaddleBERT config JSON the parameters were trained with")
    paddle2hf.add_argument("out_dir", help="folder to write model.safetensors and config.json into")
    add_overwrite(paddle2hf)
    paddle2hf.set_defaults(run=run_paddle2hf)
    nvidia2paddle = commands.add_parser("nvidia2paddle", help="NVIDIA's static-graph (NGC) checkpoint -> ours")
    nvidia2paddle.add_argument("ngc_checkpoint", help="the checkpoint's .pdparams, or its prefix (without .pdparams)")
    add_out_weights(nvidia2paddle)
    nvidia2paddle.add_argument("--config", help="BERT config JSON to check every parameter's shape against "
                                                "(NVIDIA's bert_configs/*.json, or ours)")
    nvidia2paddle.add_argument("--config-out", help="also write --config here with NVIDIA's LayerNorm epsilons, "
                                                    "for outputs equal to NVIDIA's")
    add_overwrite(nvidia2paddle)
    nvidia2paddle.set_defaults(run=run_nvidia2paddle)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        args.run(args)
    except (OSError, ValueError) as error:  # OSError: a full or read-only disk, named by the error's filename
        raise SystemExit(f"convert_checkpoint.py {args.command}: {error}") from None


if __name__ == "__main__":
    main(sys.argv[1:])
