"""Convert BERT checkpoints between Hugging Face's format and PaddleBERT's Paddle parameters.

    python convert_checkpoint.py hf2paddle HF_DIR OUT.pdparams|OUT.safetensors [--config-out CONFIG.json]
                                                              [--require-heads HEAD [HEAD ...]] [--overwrite]
    python convert_checkpoint.py paddle2hf PADDLE.pdparams CONFIG.json OUT_DIR [--overwrite]
    python convert_checkpoint.py nvidia2paddle NGC_PREFIX_OR_FILE OUT.pdparams|OUT.safetensors [--config CONFIG.json
                                                                                [--config-out OUT.json]] [--overwrite]

hf2paddle reads HF_DIR/config.json and HF_DIR/model.safetensors, else HF_DIR/pytorch_model.bin, which
paddle_files.read_torch_bin reads without torch and without running code. The mapping of names and layouts is
hf_names.py's, with which every script also loads such a folder as it is, converted in memory. OUT.pdparams
is a paddle.save'd dict of float32 arrays under the names of BertForPretraining / BertForQuestionAnswering /
BertForSequenceClassification (`bert.`-prefixed encoder, `cls.`, `qa_outputs.`, `classifier.`); an output path
ending in .safetensors gets the same arrays as a safetensors file, the format to share. weights.load_state loads
either into any of them or into a bare BertModel, fused or unfused, with or without a padded vocabulary. The model's
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

Weights convert as they were trained. A weights file whose own config travels beside it (<name>_config.json
beside <name>.pdparams|.safetensors, as a step folder and a fine-tuned model hold it; weights.travelling_config) is
checked against it: a CONFIG.json or --config that builds another network (bert_config.first_difference: any field
that changes what the weights compute) is refused in one line naming the field, both values and both files, and
nvidia2paddle without --config takes it. paddle2hf refuses the budget-recipe options (ALiBi, pre-LayerNorm, no linear
biases, gated feed-forward), which transformers' BertModel cannot hold: it would load the folder as plain BERT. A
config that would travel with an output (OUT_DIR/model_config.json, <OUT name>_config.json that another weights
file shares, or one beside nvidia2paddle's OUT) must describe what is written.

No command writes onto a file it reads, and none replaces an existing output file unless --overwrite is given.
"""

from __future__ import annotations

from training import runtime  # noqa: F401  # isort: skip  (first: it imports Paddle without its import-time warnings)
import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import paddle
from safetensors.numpy import save_file

from bert_config import RECIPE_FIELDS, BertConfig, check_plain_bert, first_difference
from checkpoints.hf_names import HF_CONFIG_FILE
from checkpoints.hf_weights import (
    check_parameters,
    fit_vocabulary,
    hf_config_dict,
    hf_head_prefixes,
    hf_to_paddle,
    paddle_to_hf,
    read_hf_checkpoint,
)
from checkpoints.ngc_weights import NVIDIA_ENCODER_LAYER_NORM_EPS, NVIDIA_LAYER_NORM_EPS, nvidia_to_paddle
from checkpoints.weights import (
    HEADS,
    PARAMS_SUFFIX,
    SAFETENSORS_SUFFIX,
    as_numpy,
    config_beside,
    config_disagreement,
    is_own_name,
    part_of,
    read_weights,
    travelling_config,
    write_safetensors_weights,
)
from utils.atomic_io import atomic_write, atomic_write_text
from utils.cli import escape_unencodable_output

# What paddle2hf writes, for messages: the one network it holds is Devlin et al.'s BERT.
HF_TARGET = "a transformers BertModel"
# What --require-heads accepts: a head, or what a model class needs.
HEAD_GROUPS = {**{head: (head,) for head in HEADS}, "pretraining": ("pooler", "mlm", "nsp")}


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


def same_file(path: str | os.PathLike, other: str | os.PathLike) -> bool:
    """Whether two paths name one file (through symlinks and relative spellings); neither need exist."""
    return Path(path).resolve() == Path(other).resolve()


def recipe_option(config: BertConfig) -> str | None:
    """`<field> <value>` of the first budget-recipe option config sets, or None for Devlin et al.'s BERT."""
    return next((f"{name} {getattr(config, name)!r}" for name, plain in RECIPE_FIELDS.items()
                 if getattr(config, name) != plain), None)


def check_given_config(config: BertConfig, source: str | os.PathLike, weights: str | os.PathLike,
                       target: str | None = None) -> Path | None:
    """The config that travels with the input `weights` (weights.travelling_config), or None; ValueError when the
    config given on the command line (`config`, read from `source`) builds another network than it: the weights
    are converted as they were trained, never as another network of the same shapes. The message points to the
    travelling config, unless it sets a budget-recipe option that `target` (the format written) cannot hold."""
    travelling = travelling_config(weights)
    if travelling is None or same_file(travelling, source):
        return travelling
    disagreement = config_disagreement(config, str(source), travelling, str(weights))
    if disagreement:
        option = recipe_option(BertConfig.from_json_file(travelling))
        if target and option:
            raise ValueError(f"{disagreement}; and {target} cannot hold its {option} (a budget-recipe option): "
                             "these weights do not convert")
        raise ValueError(f"{disagreement}; give that config, with which the weights were trained")
    return travelling


def travelling_output_difference(weights_out: Path, config: BertConfig, source: str | os.PathLike,
                                 written: Sequence[str | os.PathLike]) -> str | None:
    """The config beside an output weights file (config_beside) goes with it into every loader: unless this command
    writes it (`written`) or it builds the network written (`config`, read from `source`), a line naming it, the
    first field that differs and both values; else None."""
    beside = config_beside(weights_out)
    if not beside.is_file() or any(same_file(beside, path) for path in written):
        return None
    difference = first_difference(config, BertConfig.from_json_file(beside))
    if difference is None:
        return None
    name, ours, other = difference
    return (f"{beside}, which would travel with the {weights_out} written, has {name} {other!r}, but {source} has "
            f"{ours!r}")


def check_shared_config(weights_out: Path, config: BertConfig, source: Path) -> None:
    """OUT.pdparams and OUT.safetensors share OUT_config.json: ValueError when writing weights_out (of `config`, read
    from `source`) would replace the config of the other one, which exists, with another network's, even under
    --overwrite, which names the files it replaces and not that one."""
    beside = config_beside(weights_out)
    others = [weights_out.with_suffix(suffix) for suffix in (PARAMS_SUFFIX, SAFETENSORS_SUFFIX)]
    other = next((path for path in others if path != weights_out and path.is_file()), None)
    if other is None or not beside.is_file():
        return
    difference = first_difference(config, BertConfig.from_json_file(beside))
    if difference:
        name, ours, theirs = difference
        raise ValueError(f"{beside} is also the config of {other}, with {name} {theirs!r} where {source} has "
                         f"{ours!r}; replacing it would change what {other} computes: write {weights_out.name} "
                         "under another name")


def run_hf2paddle(args: argparse.Namespace) -> None:
    config, hf_state, weights_path = read_hf_checkpoint(args.hf_dir)
    config_paths = [config_beside(args.out_weights)]
    check_shared_config(Path(args.out_weights), config, weights_path.parent / HF_CONFIG_FILE)
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
    check_given_config(config, args.config, args.pdparams, HF_TARGET)
    check_plain_bert(config, args.config, HF_TARGET)
    if config.encoder_eps != config.layer_norm_eps:
        # transformers' BertConfig has one layer_norm_eps for every LayerNorm.
        print(f"note: transformers has one layer_norm_eps; config.json gets {config.layer_norm_eps}, so the encoder's "
              f"{config.encoder_eps} is not kept and outputs change slightly")
    out_dir = Path(args.out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"{out_dir} is a file; paddle2hf writes a folder")
    outputs = [out_dir / "model.safetensors", out_dir / "config.json"]
    check_outputs(outputs, [Path(args.pdparams), Path(args.config)], args.overwrite)
    difference = travelling_output_difference(outputs[0], config, args.config, outputs)
    if difference:
        raise ValueError(f"{difference}; remove it or write to another folder")
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


def nvidia_config_file(args: argparse.Namespace, file: Path) -> str | None:
    """The config nvidia2paddle checks the checkpoint `file` against, or None: --config, which must build the network
    of a config travelling with the checkpoint (check_given_config); else that travelling config; else the config
    beside OUT, with which the weights written will travel into every loader. A config beside OUT that builds another
    network than --config is refused: the weights would load as that other network."""
    if args.config:
        check_given_config(BertConfig.from_json_file(args.config), args.config, file)
        config_file = args.config
    else:
        travelling = travelling_config(file)
        config_file = str(travelling) if travelling else None
    if args.config_out and not config_file:
        raise ValueError("--config-out needs --config (the architecture, which a checkpoint does not fully name), "
                         f"or a {config_beside(file).name} beside the checkpoint")
    out_config = config_beside(args.out_weights)
    if not out_config.is_file():
        return config_file
    if config_file is None:
        return str(out_config)
    written = [config_file, *([args.config_out] if args.config_out else [])]
    difference = travelling_output_difference(Path(args.out_weights), BertConfig.from_json_file(config_file),
                                              config_file, written)
    option = recipe_option(BertConfig.from_json_file(out_config)) if difference else None
    if option:
        raise ValueError(f"{difference}; an NVIDIA static-graph checkpoint never has {option}: remove it or write "
                         "to another place")
    if difference:
        raise ValueError(f"{difference}; loaders would build the model from {out_config.name}: remove it or write "
                         "to another place")
    return config_file


def run_nvidia2paddle(args: argparse.Namespace) -> None:
    ngc_state, file = read_ngc_checkpoint(args.ngc_checkpoint)
    config_file = nvidia_config_file(args, file)
    config_out = [Path(args.config_out)] if args.config_out else []
    check_outputs([Path(args.out_weights), *config_out], [file, *([Path(args.config)] if args.config else [])],
                  args.overwrite)
    if ngc_state and all(is_own_name(name) for name in ngc_state):
        raise ValueError(f"{file}: holds PaddleBERT's own parameter names, not NVIDIA's static-graph ones; it needs "
                         "no conversion: every script loads it as it is (--from-pretrained-params)")
    conversion = nvidia_to_paddle(ngc_state, str(file))
    state = conversion.state
    if config_file:
        config = BertConfig.from_json_file(config_file)
        # NVIDIA's recipe trains Devlin et al.'s BERT only; ALiBi's weights have the same shapes as BERT's, so only
        # this check tells them apart.
        check_plain_bert(config, config_file, "an NVIDIA static-graph checkpoint")
        fit_vocabulary(state, config, f"{file} (checked against {config_file})")
        check_parameters(state, config, f"{file} (checked against {config_file})")
    print(f"read {len(ngc_state)} parameters from {file}: "
          f"{sum(name.endswith('attention.query.weight') for name in state)} layers ({conversion.layout}), "
          f"hidden {state['bert.embeddings.word_embeddings.weight'].shape[1]}")
    print("\n".join(_describe_heads({head: any(part_of(name) == head for name in state) for head in HEADS})))
    write_weights(args.out_weights, state)
    if args.config_out:
        nvidia_config = dataclasses.replace(config, layer_norm_eps=NVIDIA_LAYER_NORM_EPS,
                                            encoder_layer_norm_eps=NVIDIA_ENCODER_LAYER_NORM_EPS)
        atomic_write_text(Path(args.config_out), nvidia_config.to_json_string())
        print(f"wrote {args.config_out}: {config_file} with NVIDIA's LayerNorm epsilons (encoder "
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
    paddle2hf.add_argument("config", help="PaddleBERT config JSON the parameters were trained with (it must build "
                                          "the network of the <name>_config.json beside them, if there is one)")
    paddle2hf.add_argument("out_dir", help="folder to write model.safetensors and config.json into")
    add_overwrite(paddle2hf)
    paddle2hf.set_defaults(run=run_paddle2hf)
    nvidia2paddle = commands.add_parser("nvidia2paddle", help="NVIDIA's static-graph (NGC) checkpoint -> ours")
    nvidia2paddle.add_argument("ngc_checkpoint", help="the checkpoint's .pdparams, or its prefix (without .pdparams)")
    add_out_weights(nvidia2paddle)
    nvidia2paddle.add_argument("--config", help="BERT config JSON to check every parameter's shape against "
                                                "(NVIDIA's bert_configs/*.json, or ours); default: the "
                                                "<name>_config.json beside the checkpoint, if there is one")
    nvidia2paddle.add_argument("--config-out", help="also write --config here with NVIDIA's LayerNorm epsilons, "
                                                    "for outputs equal to NVIDIA's")
    add_overwrite(nvidia2paddle)
    nvidia2paddle.set_defaults(run=run_nvidia2paddle)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    escape_unencodable_output()
    try:
        args.run(args)
    except (OSError, ValueError) as error:  # OSError: a full or read-only disk, named by the error's filename
        raise SystemExit(f"convert_checkpoint.py {args.command}: {error}") from None


if __name__ == "__main__":
    main(sys.argv[1:])
