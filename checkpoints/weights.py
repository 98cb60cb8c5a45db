"""Pretrained weights by part: which part of BERT each parameter belongs to, the one loader that puts a
file's weights into a model, and the config that travels with a weights file (model_config_file).

    report = load_pretrained(model, "results/phase2/7038", required=("embeddings", "encoder"),
                             flag="--from-pretrained-params", model_prefix="bert_paddle")
    print(report.describe())   # which parts came from the file, which start from their initialisation

A task names the parts it cannot do without (SQuAD: embeddings and encoder; the pooler it never uses);
a part the file lacks and the task does not require starts from its initialisation, and the report says
so. Loading works whatever the file's QKV layout (fused or not), its `bert.` prefix, its vocabulary
padding (of the model's own vocabulary), and whatever dtype the model's parameters have (float16 under
pure-fp16 AMP): each value is cast to the dtype of the parameter it goes into. NVIDIA's static-graph NGC
files are converted in memory (ngc_weights.py), and the report says so.

Parameter names are those of modeling.py's models: `bert.`-prefixed encoder, `cls.` pretraining heads,
`qa_outputs.`, `classifier.`; docs/data-format.md lists the files.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
import paddle
import paddle.nn as nn

from bert_config import BertConfig, check_plain_bert, config_file_for, first_difference
from checkpoints.checkpoint import CONFIG_SUFFIX, PARAMS_SUFFIX, SAFETENSORS_SUFFIX, VOCAB_SUFFIX
from checkpoints.hf_names import HF_CONFIG_FILE, HF_VOCAB_FILE, HF_WEIGHT_FILES, is_hf_state, rename_hf_state
from checkpoints.ngc_weights import STATIC_LAYOUT_EXAMPLE, is_static_graph_state, nvidia_to_paddle
from checkpoints.paddle_files import read_paddle_file, read_safetensors_state, read_torch_bin, write_safetensors_state
from tokenizer import load_vocab
from utils.atomic_io import atomic_write

# read_pretrained_state's name for a Hugging Face file it converted.
HUGGING_FACE = "Hugging Face"
# Each part, and the parameter-name prefixes that make it up.
PARTS: dict[str, tuple[str, ...]] = {
    "embeddings": ("bert.embeddings.",),
    "encoder": ("bert.encoder.", "bert.final_layer_norm."),
    "pooler": ("bert.pooler.",),
    "mlm": ("cls.transform.", "cls.transform_layer_norm.", "cls.decoder_bias"),
    "nsp": ("cls.seq_relationship.",),
    "qa": ("qa_outputs.",),
    "classifier": ("classifier.",),
}
# The parts every task needs from a pretrained file; the others are heads a task may start without.
ENCODER_PARTS = ("embeddings", "encoder")
HEADS = tuple(part for part in PARTS if part not in ENCODER_PARTS)
_HEAD_PREFIXES = ("bert.", "cls.", "qa_outputs.", "classifier.")
_QKV_PARTS = ("query", "key", "value")
# Parameters with a row per vocabulary entry (padded to pad_vocab_size_multiple in the model).
VOCAB_ROWS = ("bert.embeddings.word_embeddings.weight", "cls.decoder_bias")
# Every parameter name of modeling.py's models (with or without the `bert.` of a bare BertModel), fused or not.
_OWN_NAME = re.compile(
    r"(bert\.)?(embeddings\.(word|position|token_type)_embeddings\.weight|embeddings\.layer_norm\.(weight|bias)"
    r"|encoder\.\d+\.(attention\.(query|key|value|qkv)|attention_output|attention_layer_norm|intermediate|output"
    r"|output_layer_norm)\.(weight|bias)|final_layer_norm\.(weight|bias)|pooler\.dense\.(weight|bias))"
    r"|cls\.(transform|transform_layer_norm|seq_relationship)\.(weight|bias)|cls\.decoder_bias"
    r"|(qa_outputs|classifier)\.(weight|bias)")
NVIDIA_VOCAB_MULTIPLE = 8  # NVIDIA's run_squad.py and run_pretraining.py round vocab_size up to a multiple of 8


def with_bert_prefix(name: str) -> str:
    """name as a model with heads calls it: a bare BertModel's names lack the `bert.` of its submodule."""
    return name if name.startswith(_HEAD_PREFIXES) else "bert." + name


def is_own_name(name: str) -> bool:
    """Whether name is one of PaddleBERT's parameter names."""
    return _OWN_NAME.fullmatch(name) is not None


def part_of(name: str) -> str | None:
    """The part a parameter belongs to ("encoder", "pooler", ...), or None for a name that is no BERT part."""
    name = with_bert_prefix(name)
    for part, prefixes in PARTS.items():
        if name.startswith(prefixes):
            return part
    return None


def check_parts(expected: Iterable[str], provided: Collection[str], *, required: Sequence[str], source: str,
                display: Callable[[str], str] = str) -> dict[str, bool]:
    """{part: provided in full} for each part that has names in `expected` (a model's parameter names).

    A part in `required` must be provided in full, any other part in full or not at all (some of a part's
    weights mean a damaged or foreign file): otherwise ValueError naming `source`, the part and a missing
    parameter (shown by `display`, e.g. under a file's own naming).
    """
    by_part: dict[str, list[str]] = {}
    for name in expected:
        by_part.setdefault(part_of(name), []).append(name)
    present = {}
    for part in PARTS:
        if part not in by_part:
            continue
        missing = sorted(name for name in by_part[part] if name not in provided)
        if missing and (part in required or len(missing) < len(by_part[part])):
            absent = "no complete" if part in required else "incomplete"
            raise ValueError(f"{source}: {absent} {part} weights ({len(missing)} of {len(by_part[part])} missing, "
                             f"e.g. {display(missing[0])}); is it a BERT checkpoint for this config?")
        present[part] = not missing
    return present


# ---------------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------------


def resolve_weights_file(path: str | os.PathLike, model_prefix: str, flag: str) -> Path:
    """A weights file itself; in a folder, its <model_prefix>.pdparams or <model_prefix>.safetensors (the Paddle
    file first, as in a checkpoint folder that holds both), else the model.safetensors or pytorch_model.bin of a
    Hugging Face folder (one with a config.json); or a prefix <path>.pdparams as paddle.static.save writes
    (NVIDIA's recipe takes those). FileNotFoundError names the flag and path, and for a folder what it holds."""
    path = Path(path)
    prefixed = path.with_name(path.name + PARAMS_SUFFIX)
    if not path.exists() and prefixed.is_file():
        path = prefixed
    if path.is_dir():
        ours = [path / (model_prefix + suffix) for suffix in (PARAMS_SUFFIX, SAFETENSORS_SUFFIX)]
        hugging_face = [path / name for name in HF_WEIGHT_FILES] if (path / HF_CONFIG_FILE).is_file() else []
        found = next((candidate for candidate in ours + hugging_face if candidate.is_file()), None)
        if found is None:
            raise FileNotFoundError(f"{flag} {path}: no weights in this folder: neither {ours[0].name} nor "
                                    f"{ours[1].name}, nor a Hugging Face {HF_CONFIG_FILE} with "
                                    f"{' or '.join(HF_WEIGHT_FILES)}; it holds {_folder_contents(path)}")
        return found
    if not path.is_file():
        raise FileNotFoundError(f"{flag} {path}: weights file not found")
    return path


def _folder_contents(folder: Path, shown: int = 5) -> str:
    """The first few names in a folder, for a message."""
    names = sorted(entry.name + ("/" if entry.is_dir() else "") for entry in folder.iterdir())
    if not names:
        return "nothing"
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


def config_beside(weights_file: str | os.PathLike) -> Path:
    """The config that travels with a weights file: <name>_config.json beside <name>.pdparams or
    <name>.safetensors, as a step folder holds bert_paddle_config.json, the fine-tuning scripts write it beside
    their model and convert_checkpoint.py hf2paddle beside its output; for a Hugging Face weights file without
    one, its folder's config.json."""
    path = Path(weights_file)
    ours = path.with_name(path.stem + CONFIG_SUFFIX)
    if not ours.is_file() and path.name in HF_WEIGHT_FILES and (path.parent / HF_CONFIG_FILE).is_file():
        return path.parent / HF_CONFIG_FILE
    return ours


def vocab_beside(weights_file: str | os.PathLike) -> Path | None:
    """The vocabulary that travels with a weights file, or None: <name>_vocab.txt beside <name>.pdparams (a
    pretraining step folder's), else a Hugging Face folder's vocab.txt."""
    path = Path(weights_file)
    candidates = [path.with_name(path.stem + VOCAB_SUFFIX)]
    if path.name in HF_WEIGHT_FILES:
        candidates.append(path.parent / HF_VOCAB_FILE)
    return next((candidate for candidate in candidates if candidate.is_file()), None)


def check_vocabulary_matches(weights_file: str | os.PathLike, vocab_file: str, flag: str) -> None:
    """A ValueError when the weights carry a vocabulary (vocab_beside) other than --vocab-file's: its ids would
    select the wrong embedding rows, and fine-tuning would run without an error."""
    beside = vocab_beside(weights_file)
    if beside is not None and load_vocab(beside) != load_vocab(vocab_file):
        raise ValueError(f"--vocab-file {vocab_file} is not the vocabulary the {flag} weights were trained with "
                         f"({beside}): give that one")


def travelling_config(weights_file: str | os.PathLike) -> Path | None:
    """The config that travels with weights_file (config_beside), or None when there is none.

    A Hugging Face weights file can have two: its folder's config.json, which transformers reads, and a
    <name>_config.json of ours, which config_beside prefers. ValueError, naming both, when they build different
    networks; and when the folder's config.json sets a budget-recipe option, which transformers' BertModel ignores:
    the folder is plain BERT there, and would be another network here.
    """
    path = Path(weights_file)
    beside = config_beside(path)
    if not beside.is_file():
        return None
    hf_config = path.parent / HF_CONFIG_FILE
    if path.name in HF_WEIGHT_FILES and hf_config.is_file():
        check_plain_bert(BertConfig.from_json_file(hf_config), str(hf_config),
                         "a Hugging Face folder's config.json (transformers' BertModel ignores the key)")
        if beside != hf_config:
            disagreement = config_disagreement(BertConfig.from_json_file(hf_config), str(hf_config), beside, str(path))
            if disagreement:
                raise ValueError(f"{disagreement}; which one is the network? make them agree or remove one")
    return beside


def config_disagreement(config: BertConfig, source: str, travelling: Path, weights: str) -> str | None:
    """None when `config` (read from `source`) builds the network of `travelling`, the config that comes with
    `weights`; else a line naming source, the first field that differs (bert_config.first_difference), both values
    and both files, for the caller to end with what to do."""
    difference = first_difference(config, BertConfig.from_json_file(travelling))
    if difference is None:
        return None
    name, given, saved = difference
    return f"{source} has {name} {given!r}, but {travelling}, the config that comes with {weights}, has {saved!r}"


def model_config_file(bert_model: str, config_file: str | None, weights: str | None, *, flag: str,
                      model_prefix: str) -> str:
    """The config file a fine-tuning run builds its model from, given --bert-model, --config-file and the initial
    weights `weights` (given to `flag`; None: no initial weights).

    Weights that come with a config (travelling_config) bring it: it is the default, before --bert-model's file. An
    explicit --config-file must build the same network (bert_config.first_difference): otherwise ValueError names
    both files and the first field that differs. FileNotFoundError names a missing --config-file or weights file.
    """
    travelling = travelling_config(resolve_weights_file(weights, model_prefix, flag)) if weights else None
    if config_file is None:
        return str(travelling) if travelling else config_file_for(bert_model, None)
    if not Path(config_file).is_file():
        raise FileNotFoundError(f"--config-file {config_file}: file not found")
    if travelling:
        disagreement = config_disagreement(BertConfig.from_json_file(config_file), f"--config-file {config_file}",
                                           travelling, f"{flag} {weights}")
        if disagreement:
            raise ValueError(f"{disagreement}; leave --config-file out to use it")
    return config_file


def check_same_network(config: BertConfig, weights_file: str | os.PathLike, flag: str) -> None:
    """ValueError when the config that travels with weights_file (travelling_config; none: nothing to check) builds
    another network than `config`, naming the flag, the file and the first field that differs. Weights of the
    same shapes load into a network with another function (post- or pre-LayerNorm) without any error."""
    travelling = travelling_config(weights_file)
    if travelling is None:
        return
    difference = first_difference(config, BertConfig.from_json_file(travelling))
    if difference:
        name, ours, saved = difference
        raise ValueError(f"{flag} {weights_file}: its config {travelling} has {name} {saved!r}, this run builds "
                         f"{ours!r}; train with the same model settings (config file and architecture flags)")


def read_weights(path: str | os.PathLike) -> dict:
    """The state dict stored in a .pdparams or .safetensors file, read without running any code from it
    (paddle_files.py); errors name the file."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"{path}: Paddle parameter file not found")
    if str(path).endswith(SAFETENSORS_SUFFIX):
        return read_safetensors_state(path)
    if Path(path).name == HF_WEIGHT_FILES[1]:  # torch's pickle, read without torch and without running code
        return read_torch_bin(path)
    state = read_paddle_file(path)
    if not isinstance(state, Mapping):
        raise ValueError(f"{path}: holds a {type(state).__name__}, not a dict of parameters")
    return dict(state)


def safetensors_beside(params_path: str | os.PathLike) -> Path:
    """The <prefix>.safetensors that --save-safetensors writes beside a <prefix>.pdparams."""
    return Path(params_path).with_suffix(SAFETENSORS_SUFFIX)


def write_safetensors_weights(path: str | os.PathLike, state: Mapping) -> Path:
    """Write a state dict (Tensors or arrays, under the project's parameter names, each in its own dtype) as a
    .safetensors file through atomic_io.atomic_write, readable by everyone the umask allows (0644 under 022);
    returns the path. The format to share: reading it runs no code, unlike a pickled .pdparams."""
    return atomic_write(path, lambda temp: write_safetensors_state(temp, state))


# ---------------------------------------------------------------------------------------------
# Layouts
# ---------------------------------------------------------------------------------------------


def as_numpy(value) -> np.ndarray:
    """A state-dict value (Paddle tensor or array) as a NumPy array; a half-precision tensor becomes float32."""
    if isinstance(value, paddle.Tensor):
        # NumPy has no bfloat16; float32 holds every bfloat16 and float16 value exactly.
        return (value.astype("float32") if value.dtype in (paddle.bfloat16, paddle.float16) else value).numpy()
    return np.asarray(value)


def convert_qkv_layout(state_dict: Mapping, fuse_mha: bool) -> dict:
    """Rewrite attention weights into the fused (qkv) or unfused (query/key/value) layout.

    Weights of the other layout are converted; everything else passes through unchanged, so a
    checkpoint saved with either setting loads into a model built with either.
    """
    converted = dict(state_dict)
    for name in list(state_dict):
        for kind in ("weight", "bias"):
            axis = 1 if kind == "weight" else 0  # Paddle Linear weights are [in, out]
            if fuse_mha and name.endswith(f".attention.query.{kind}"):
                prefix = name[: -len(f"query.{kind}")]
                parts = [as_numpy(converted.pop(f"{prefix}{part}.{kind}")) for part in _QKV_PARTS]
                converted[f"{prefix}qkv.{kind}"] = np.concatenate(parts, axis=axis)
            if not fuse_mha and name.endswith(f".attention.qkv.{kind}"):
                prefix = name[: -len(f"qkv.{kind}")]
                for part, value in zip(_QKV_PARTS, np.split(as_numpy(converted.pop(name)), 3, axis=axis),
                                       strict=True):
                    converted[f"{prefix}{part}.{kind}"] = value
    return converted


def fit_vocab_rows(array: np.ndarray, rows: int, vocab_size: int, source: str, name: str) -> np.ndarray:
    """array's vocabulary axis cut or zero-padded to `rows` (a model's padded vocabulary size).

    Only padding of the same vocabulary is fitted: `vocab_size` rows, `rows` themselves, or NVIDIA's padding to a
    multiple of 8 (30522 -> 30528). Any other count is another vocabulary's table: ValueError naming `source`,
    the parameter and both sizes.
    """
    nvidia_rows = -(-vocab_size // NVIDIA_VOCAB_MULTIPLE) * NVIDIA_VOCAB_MULTIPLE
    if array.shape[0] not in (vocab_size, rows, nvidia_rows):
        raise ValueError(f"{source}: {name} has {array.shape[0]} vocabulary rows, the model a vocabulary of "
                         f"{vocab_size} ({rows} rows padded); a checkpoint of another vocabulary?")
    if array.shape[0] > rows:
        return array[:rows]
    return np.concatenate([array, np.zeros((rows - array.shape[0], *array.shape[1:]), array.dtype)])


def load_state(model: nn.Layer, state_dict: Mapping, source: str) -> tuple[list[str], list[str]]:
    """Load a state dict into model, whatever its QKV layout, prefix, vocabulary padding or dtype.

    - fused and unfused attention weights convert into the model's layout;
    - an encoder-only state (keys "embeddings...") loads into a model with a `bert` submodule, and back;
    - vocabulary rows (word embeddings, MLM bias) are cut or zero-padded to the model's padded vocabulary size
      when they are padding of the model's vocabulary (fit_vocab_rows); another vocabulary is an error;
    - each value takes the dtype of the parameter itself, not of model.state_dict(), which reports float32
      under pure-fp16 AMP (paddle.amp.decorate's save_dtype hook) while the parameter is float16.
    - a value for a floating-point parameter must be floating point (float16, bfloat16, float32, float64) and
      finite everywhere: ValueError naming `source` and the tensor otherwise.

    Returns (missing, unexpected): model parameters the state did not provide, left as initialised, and
    state entries the model has no place for. A shape mismatch raises ValueError naming `source`.
    """
    targets = dict(model.named_parameters())
    targets.update((name, buffer) for name, buffer in model.named_buffers() if name not in targets)
    has_bert_prefix = any(name.startswith("bert.") for name in targets)
    state = {}
    for name, value in state_dict.items():
        if has_bert_prefix:
            name = with_bert_prefix(name)
        if not has_bert_prefix and name.startswith("bert."):
            name = name[len("bert."):]
        state[name] = value
    state = convert_qkv_layout(state, fuse_mha=any(name.endswith(".attention.qkv.weight") for name in targets))
    config = getattr(model, "config", None)

    loaded = []
    for name, value in state.items():
        target = targets.get(name)
        if target is None:
            continue
        array = as_numpy(value)
        if paddle.is_floating_point(target):
            # set_value would cast integers silently and copy NaN as it is: neither is a trained weight.
            if not np.issubdtype(array.dtype, np.floating):
                raise ValueError(f"{source}: tensor {name} is {array.dtype}, not floating point like the parameter")
            if not np.isfinite(array).all():
                raise ValueError(f"{source}: tensor {name} holds NaN or infinity")
        expected = list(target.shape)
        if with_bert_prefix(name) in VOCAB_ROWS and list(array.shape[1:]) == expected[1:]:
            vocab_size = config.vocab_size if config is not None else expected[0]
            array = fit_vocab_rows(array, expected[0], vocab_size, source, name)
        if list(array.shape) != expected:
            raise ValueError(f"{source}: parameter {name} has shape {list(array.shape)}, the model expects {expected}")
        target.set_value(paddle.to_tensor(array).astype(target.dtype))
        loaded.append(name)
    missing = sorted(set(targets) - set(loaded))
    unexpected = sorted(set(state) - set(targets))
    return missing, unexpected


# ---------------------------------------------------------------------------------------------
# Pretrained weights by part
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class LoadReport:
    """What load_pretrained did: the file, the parts it filled, those left initialised (and their parameters),
    and how many entries of the file the model had no place for."""

    path: str
    loaded: list[str]
    initialised: list[str]
    missing: list[str]
    unused: int
    # What read_pretrained_state converted the file from: HUGGING_FACE, or an NVIDIA static-graph encoder layout.
    converted_from: str | None = None

    def describe(self) -> str:
        text = f"{self.path}: "
        if self.converted_from == HUGGING_FACE:
            text += "Hugging Face checkpoint, converted in memory as convert_checkpoint.py hf2paddle does; "
        elif self.converted_from:
            text += (f"NVIDIA static-graph checkpoint ({self.converted_from} encoder), converted in memory as "
                     "convert_checkpoint.py nvidia2paddle does; ")
        text += f"loaded {', '.join(self.loaded) or 'nothing'}"
        if self.initialised:
            text += f"; {', '.join(self.initialised)} not in the file, starting from random initialisation"
        if self.unused:
            text += f"; {self.unused} entries the model has no place for were ignored"
        return text


def read_pretrained_state(file: str | os.PathLike, flag: str) -> tuple[dict, str | None]:
    """(the state dict of a resolved weights file, what it was converted from or None): the state that
    load_pretrained puts into a model. Converted in memory are NVIDIA's static-graph files (the layout of
    their encoder is returned) and Hugging Face's with their config.json beside them (HUGGING_FACE is returned;
    the model, built from that config, checks every tensor as it loads)."""
    state = read_weights(file)
    if is_static_graph_state(state):
        conversion = nvidia_to_paddle({name: as_numpy(value) for name, value in state.items()}, f"{flag} {file}")
        return conversion.state, conversion.layout
    if not is_hf_state(state) or not config_beside(file).is_file():  # without a config: load_pretrained's error
        return state, None
    hf_state = {name: as_numpy(value) for name, value in state.items()}
    return rename_hf_state(hf_state, f"{flag} {file}").state, HUGGING_FACE


def encoder_fingerprint(state: Mapping, vocab_size: int) -> tuple[int, str]:
    """(tensors, sha256) of the embeddings and encoder in a state dict, in one form whatever the layout they are
    stored in: `bert.`-prefixed names, separate query/key/value, the word embeddings' first vocab_size rows (the
    rest is padding), float32 values. A model that loaded a file gives the file's fingerprint, so that a run can
    show which weights it started from (downstream.py compares the two)."""
    encoder = {with_bert_prefix(name): value for name, value in state.items()
               if part_of(name) in ENCODER_PARTS}
    digest = hashlib.sha256()
    canonical = convert_qkv_layout(encoder, fuse_mha=False)
    for name in sorted(canonical):
        array = np.ascontiguousarray(as_numpy(canonical[name]), dtype="<f4")
        if name in VOCAB_ROWS:
            array = array[:vocab_size]
        digest.update(f"{name} {list(array.shape)}\n".encode())
        digest.update(array.tobytes())
    return len(canonical), digest.hexdigest()


def load_pretrained(
    model: nn.Layer,
    path: str | os.PathLike,
    *,
    required: Sequence[str],
    flag: str,
    model_prefix: str = "bert_paddle",
) -> LoadReport:
    """Load the weights of `path` (a .pdparams or .safetensors file, or a folder holding <model_prefix>.pdparams
    or <model_prefix>.safetensors) into model.

    Every part in `required` that the model has must come complete from the file, and any other part
    either complete or not at all (a part with some of its weights means a damaged or foreign file):
    otherwise ValueError names the flag, the file and the part. Parts the file lacks start from their
    initialisation, and the report lists them.
    """
    unknown = sorted(set(required) - set(PARTS))
    if unknown:
        raise ValueError(f"unknown parts {unknown}; the parts are {list(PARTS)}")
    file = resolve_weights_file(path, model_prefix, flag)
    state, converted_from = read_pretrained_state(file, flag)
    missing, unexpected = load_state(model, state, str(file))
    parameters = [name for name, _ in model.named_parameters()]
    try:
        present = check_parts(parameters, set(parameters) - set(missing), required=required,
                              source=f"{flag} {file}")
    except ValueError:
        foreign = sorted(name for name in state if not is_own_name(name))
        if foreign:
            raise ValueError(_foreign_names_message(f"{flag} {file}", foreign)) from None
        raise
    return LoadReport(
        path=str(file),
        loaded=[part for part, complete in present.items() if complete],
        initialised=[part for part, complete in present.items() if not complete],
        missing=missing,
        unused=len(unexpected),
        converted_from=converted_from,
    )


def _foreign_names_message(source: str, foreign: Sequence[str]) -> str:
    """The error for a file whose names are neither ours nor NVIDIA's static-graph ones, naming both layouts and
    the converters."""
    return (f"{source}: its parameter names (e.g. {foreign[0]}) match neither PaddleBERT's layout "
            f"(bert.embeddings.word_embeddings.weight, bert.encoder.0.attention.query.weight, ...) nor "
            f"{STATIC_LAYOUT_EXAMPLE}; convert it first: python convert_checkpoint.py hf2paddle HF_DIR OUT.pdparams "
            "for a Hugging Face model, or python convert_checkpoint.py nvidia2paddle NGC_PREFIX OUT.pdparams for "
            "NVIDIA's")
