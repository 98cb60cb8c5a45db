"""Fault cases of issue 66 item 1: no conversion and no load computes another model than the weights were trained as.

A weights file whose own config travels beside it (<prefix>_config.json beside <prefix>.pdparams or .safetensors,
as a step folder and a fine-tuned output hold it; or a Hugging Face folder's config.json) is converted and loaded as
that config says: a config given on the command line that builds another network is refused in one line naming
the field, both values and both files. A budget-recipe option that transformers' BertModel cannot hold refuses
paddle2hf, and a config that would travel with a written file must describe what was written. Every refusal exits
non-zero, writes nothing and leaves the files that were there byte for byte.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import paddle
import pytest

import convert_checkpoint
import run_glue
from bert_config import CONFIG_DIR, BertConfig
from checkpoints.checkpoint import save_checkpoint
from checkpoints.weights import model_config_file, write_safetensors_weights
from conftest import ROOT
from messages import assert_one_line
from modeling import BertForPretraining, BertForSequenceClassification

TINY_4K = CONFIG_DIR / "bert-tiny-4k-vocab.json"  # the command line: a plain BERT config
# A small plain BERT whose every architecture field the cases below change one at a time.
SMALL = BertConfig(vocab_size=60, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
                   max_position_embeddings=32, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
# (field as a config file writes it, another value, the field the message names): every field that changes what
# the weights compute.
ARCHITECTURE_CHANGES = [
    ("vocab_size", 64, "vocab_size"),
    ("hidden_size", 32, "hidden_size"),
    ("num_hidden_layers", 3, "num_hidden_layers"),
    ("num_attention_heads", 4, "num_attention_heads"),
    ("intermediate_size", 48, "intermediate_size"),
    ("hidden_act", "relu", "hidden_act"),
    ("max_position_embeddings", 64, "max_position_embeddings"),
    ("type_vocab_size", 3, "type_vocab_size"),
    ("layer_norm_eps", 1e-5, "layer_norm_eps"),
    ("encoder_layer_norm_eps", 1e-5, "encoder_eps"),
    ("pre_layer_norm", True, "pre_layer_norm"),
    ("linear_bias", False, "linear_bias"),
    ("gated_feed_forward", True, "gated_feed_forward"),
    ("alibi", True, "alibi"),
]
RECIPE_OPTIONS = {"pre_layer_norm": True, "linear_bias": False, "gated_feed_forward": True, "alibi": True}


def snapshot(*roots: Path) -> dict[str, str]:
    """sha256 of every file under roots, by path."""
    return {str(path): hashlib.sha256(path.read_bytes()).hexdigest()
            for root in roots for path in sorted(root.rglob("*")) if path.is_file()}


def write_config(path: Path, config: BertConfig, **changes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**config.to_dict(), **changes}, indent=2))
    return path


def save_weights(weights: Path, config: BertConfig, model_class=BertForPretraining) -> Path:
    """A model of config saved as weights (.pdparams or .safetensors) with its config beside it, as run_squad.py and
    run_glue.py leave a fine-tuned model."""
    paddle.seed(5)
    model = model_class(config) if model_class is BertForPretraining else model_class(config, 2)
    weights.parent.mkdir(parents=True, exist_ok=True)
    if weights.suffix == ".safetensors":
        write_safetensors_weights(weights, model.state_dict())
    else:
        paddle.save(model.state_dict(), str(weights))
    write_config(weights.with_name(weights.stem + "_config.json"), config)
    return weights


def refused(command: str, *argv: object) -> str:
    """The one-line message with which `convert_checkpoint.py command argv` exits (a str exit code: status 1)."""
    with pytest.raises(SystemExit) as raised:
        convert_checkpoint.main([command, *map(str, argv)])
    assert isinstance(raised.value.code, str), raised.value.code
    return raised.value.code


@pytest.fixture(scope="module")
def alibi_step(tmp_path_factory) -> Path:
    """results/.../phase1/1 of an ALiBi run of bert-tiny-4k-vocab, as run_pretraining.py --alibi saves it."""
    config = dataclasses.replace(BertConfig.from_json_file(TINY_4K), alibi=True)
    paddle.seed(3)
    phase = tmp_path_factory.mktemp("alibi") / "phase1"
    return save_checkpoint(phase, 1, BertForPretraining(config).state_dict(), None, {"phase": 1}, config=config,
                           rank=0)


@pytest.fixture(scope="module")
def small_weights(tmp_path_factory) -> Path:
    return save_weights(tmp_path_factory.mktemp("small") / "bert_paddle.pdparams", SMALL)


@pytest.fixture(scope="module")
def small_hf(tmp_path_factory, small_weights) -> Path:
    """SMALL as a Hugging Face folder (config.json, model.safetensors), written by paddle2hf."""
    folder = tmp_path_factory.mktemp("small_hf") / "hf"
    convert_checkpoint.main(["paddle2hf", str(small_weights), str(small_weights.with_name("bert_paddle_config.json")),
                             str(folder)])
    return folder


# ---------------------------------------------------------------------------------------------------------------
# paddle2hf


def test_paddle2hf_of_an_alibi_step_with_a_plain_config_is_refused_through_the_script(alibi_step, tmp_path):
    """The issue's command: exit 1, one line naming alibi, both values and both files; nothing written."""
    before = snapshot(alibi_step)
    out = tmp_path / "OUT"
    result = subprocess.run([sys.executable, str(ROOT / "convert_checkpoint.py"), "paddle2hf",
                             str(alibi_step / "bert_paddle.pdparams"), str(TINY_4K), str(out)],
                            capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert_one_line(result.stderr, "convert_checkpoint.py paddle2hf: ", TINY_4K, "alibi False",
                    alibi_step / "bert_paddle_config.json", "has True", alibi_step / "bert_paddle.pdparams",
                    "cannot hold its alibi True", "do not convert")
    assert not out.exists()
    assert snapshot(alibi_step) == before


@pytest.mark.parametrize("field, value, named", ARCHITECTURE_CHANGES, ids=[field for field, *_ in ARCHITECTURE_CHANGES])
def test_paddle2hf_refuses_a_config_that_differs_from_the_travelling_one_in_any_architecture_field(
        small_weights, tmp_path, field, value, named):
    given = write_config(tmp_path / "given.json", SMALL, **{field: value})
    saved = small_weights.with_name("bert_paddle_config.json")
    message = refused("paddle2hf", small_weights, given, tmp_path / "hf")
    expected_given = value if field != "encoder_layer_norm_eps" else 1e-5
    assert_one_line(message, "convert_checkpoint.py paddle2hf: ", f"{given} has {named} {expected_given!r}",
                    f"{saved}", f"has {getattr(SMALL, named)!r}", small_weights)
    assert not (tmp_path / "hf").exists()


@pytest.mark.parametrize("model_class", [BertForPretraining, BertForSequenceClassification])
@pytest.mark.parametrize("suffix", [".pdparams", ".safetensors"])
def test_paddle2hf_of_an_alibi_fine_tuned_model_with_a_plain_config_is_refused(tmp_path, model_class, suffix):
    config = dataclasses.replace(SMALL, alibi=True)
    weights = save_weights(tmp_path / "squad_out" / f"bert_paddle{suffix}", config, model_class)
    plain = write_config(tmp_path / "plain.json", SMALL)
    message = refused("paddle2hf", weights, plain, tmp_path / "hf")
    assert_one_line(message, "convert_checkpoint.py paddle2hf: ", "alibi False", "has True",
                    tmp_path / "squad_out" / "bert_paddle_config.json")
    assert not (tmp_path / "hf").exists()


@pytest.mark.parametrize("option", sorted(RECIPE_OPTIONS))
def test_paddle2hf_refuses_each_option_transformers_cannot_hold(tmp_path, option):
    """Given its own config, a recipe checkpoint is refused naming the option (this held before issue 66)."""
    config = dataclasses.replace(SMALL, **{option: RECIPE_OPTIONS[option]})
    weights = save_weights(tmp_path / "run" / "bert_paddle.pdparams", config)
    message = refused("paddle2hf", weights, weights.with_name("bert_paddle_config.json"), tmp_path / "hf")
    assert_one_line(message, "convert_checkpoint.py paddle2hf: ", option, "transformers")
    assert not (tmp_path / "hf").exists()


def test_paddle2hf_given_a_config_of_the_same_network_converts(small_weights, tmp_path, capsys):
    """Dropout and the layout fields change no function: such a config converts, its dropout in config.json."""
    given = write_config(tmp_path / "given.json", SMALL, hidden_dropout_prob=0.2, pad_vocab_size_multiple=4)
    convert_checkpoint.main(["paddle2hf", str(small_weights), str(given), str(tmp_path / "hf")])
    written = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert written["hidden_dropout_prob"] == 0.2 and written["vocab_size"] == 60


def test_paddle2hf_refuses_a_folder_whose_model_config_would_travel_with_the_written_weights(small_weights, tmp_path):
    """OUT_DIR/model_config.json (left there by hf2paddle OUT_DIR/model.safetensors) is what every loader takes as
    the config of the model.safetensors written beside it: one that says ALiBi is refused, the folder untouched."""
    out = tmp_path / "hf"
    stale = write_config(out / "model_config.json", SMALL, alibi=True)
    (out / "model.safetensors").write_bytes(b"an earlier model")
    before = snapshot(out)
    message = refused("paddle2hf", small_weights, small_weights.with_name("bert_paddle_config.json"), out,
                      "--overwrite")
    assert_one_line(message, "convert_checkpoint.py paddle2hf: ", stale, "alibi True", "False",
                    out / "model.safetensors")
    assert snapshot(out) == before


# ---------------------------------------------------------------------------------------------------------------
# hf2paddle


def test_hf2paddle_refuses_a_folder_whose_own_paddlebert_config_differs_from_its_config_json(small_hf, tmp_path):
    folder = tmp_path / "hf"
    folder.mkdir()
    for name in ("config.json", "model.safetensors"):
        (folder / name).write_bytes((small_hf / name).read_bytes())
    ours = write_config(folder / "model_config.json", SMALL, alibi=True)
    before = snapshot(folder)
    message = refused("hf2paddle", folder, tmp_path / "out.pdparams")
    assert_one_line(message, "convert_checkpoint.py hf2paddle: ", folder / "config.json", "alibi", "True", "False",
                    ours)
    assert not (tmp_path / "out.pdparams").exists() and not (tmp_path / "out_config.json").exists()
    assert snapshot(folder) == before


def hf_copy_setting(small_hf: Path, folder: Path, **settings: object) -> Path:
    """A copy of the small Hugging Face folder (weights and config.json) whose config.json also holds settings."""
    folder.mkdir()
    (folder / "model.safetensors").write_bytes((small_hf / "model.safetensors").read_bytes())
    hf_config = json.loads((small_hf / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**hf_config, **settings}))
    return folder


def test_hf2paddle_refuses_a_config_json_that_sets_an_option_transformers_ignores(small_hf, tmp_path):
    """transformers' BertModel reads `"alibi": true` in config.json as nothing: the folder is plain BERT there."""
    folder = hf_copy_setting(small_hf, tmp_path / "hf", alibi=True)
    message = refused("hf2paddle", folder, tmp_path / "out.pdparams", "--config-out", tmp_path / "out.json")
    assert_one_line(message, "convert_checkpoint.py hf2paddle: ", folder / "config.json", "alibi", "transformers")
    assert not (tmp_path / "out.pdparams").exists() and not (tmp_path / "out.json").exists()


def test_hf2paddle_never_replaces_the_config_another_weights_file_travels_with(small_hf, tmp_path, capsys):
    """OUT.pdparams and OUT.safetensors share OUT_config.json: writing OUT.safetensors of another network would
    give OUT.pdparams a config it was not trained with, even with --overwrite."""
    convert_checkpoint.main(["hf2paddle", str(small_hf), str(tmp_path / "out.pdparams")])
    other = tmp_path / "other_hf"
    other.mkdir()
    (other / "model.safetensors").write_bytes((small_hf / "model.safetensors").read_bytes())
    hf_config = json.loads((small_hf / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**hf_config, "hidden_act": "relu"}))
    before = snapshot(tmp_path / "out.pdparams", tmp_path / "out_config.json")
    message = refused("hf2paddle", other, tmp_path / "out.safetensors", "--overwrite")
    assert_one_line(message, "convert_checkpoint.py hf2paddle: ", tmp_path / "out_config.json",
                    tmp_path / "out.pdparams", "hidden_act", "relu", "gelu")
    assert not (tmp_path / "out.safetensors").exists()
    assert snapshot(tmp_path / "out.pdparams", tmp_path / "out_config.json") == before


# ---------------------------------------------------------------------------------------------------------------
# nvidia2paddle


@pytest.fixture(scope="module")
def ngc_file(tmp_path_factory) -> Path:
    """An NGC-layout .pdparams (tests/fixtures/ngc_static_bert.py's SQuAD network)."""
    from fixtures.ngc_static_bert import write_ngc_checkpoints

    prefix = write_ngc_checkpoints(tmp_path_factory.mktemp("ngc"), "squad").prefixes["unfused"]
    return prefix.with_name(prefix.name + ".pdparams")


@pytest.fixture
def ngc_copy(ngc_file, tmp_path) -> Path:
    copy = tmp_path / "ngc" / ngc_file.name
    copy.parent.mkdir()
    copy.write_bytes(ngc_file.read_bytes())
    return copy


def ngc_config() -> BertConfig:
    from fixtures.ngc_static_bert import CONFIG

    return BertConfig(**{**CONFIG, "hidden_act": "gelu"})


def test_nvidia2paddle_refuses_a_config_unlike_the_one_beside_the_checkpoint(ngc_copy, tmp_path):
    beside = write_config(ngc_copy.with_name("bert_paddle_config.json"), ngc_config())
    given = write_config(tmp_path / "given.json", ngc_config(), hidden_act="relu")
    message = refused("nvidia2paddle", ngc_copy, tmp_path / "out.pdparams", "--config", given)
    assert_one_line(message, "convert_checkpoint.py nvidia2paddle: ", f"{given} has hidden_act 'relu'", beside,
                    "'gelu'", ngc_copy)
    assert not (tmp_path / "out.pdparams").exists()


def test_nvidia2paddle_checks_the_checkpoint_against_the_config_beside_it(ngc_copy, tmp_path, capsys):
    """Without --config the config beside the checkpoint is the architecture: its shapes are checked, and
    --config-out writes it with NVIDIA's epsilons."""
    beside = write_config(ngc_copy.with_name("bert_paddle_config.json"), ngc_config())
    convert_checkpoint.main(["nvidia2paddle", str(ngc_copy), str(tmp_path / "out.pdparams"),
                             "--config-out", str(tmp_path / "nvidia.json")])
    written = BertConfig.from_json_file(tmp_path / "nvidia.json")
    assert (written.hidden_size, written.encoder_layer_norm_eps) == (ngc_config().hidden_size, 1e-5)
    write_config(beside, ngc_config(), intermediate_size=64)
    message = refused("nvidia2paddle", ngc_copy, tmp_path / "again.pdparams")
    assert_one_line(message, "convert_checkpoint.py nvidia2paddle: ", beside, "config implies [16, 64]")
    assert not (tmp_path / "again.pdparams").exists()


@pytest.mark.parametrize("option", sorted(RECIPE_OPTIONS))
def test_nvidia2paddle_refuses_a_recipe_config(ngc_copy, tmp_path, option):
    """NVIDIA's checkpoints are Devlin et al.'s BERT: a config with a budget-recipe option describes another
    network (ALiBi's weights have the same shapes, so only this check catches it)."""
    given = write_config(tmp_path / "given.json", ngc_config(), **{option: RECIPE_OPTIONS[option]})
    message = refused("nvidia2paddle", ngc_copy, tmp_path / "out.pdparams", "--config", given,
                      "--config-out", tmp_path / "out.json")
    assert_one_line(message, "convert_checkpoint.py nvidia2paddle: ", given, option)
    assert not (tmp_path / "out.pdparams").exists() and not (tmp_path / "out.json").exists()


def test_nvidia2paddle_refuses_a_config_beside_its_output_that_describes_another_network(ngc_copy, tmp_path):
    """out_config.json beside out.pdparams travels with what is written there: a stale one that says ALiBi is
    refused, and out.pdparams and out_config.json stay as they were."""
    (tmp_path / "out.pdparams").write_bytes(b"an earlier model")
    stale = write_config(tmp_path / "out_config.json", ngc_config(), alibi=True)
    before = snapshot(tmp_path / "out.pdparams", stale)
    message = refused("nvidia2paddle", ngc_copy, tmp_path / "out.pdparams", "--overwrite")
    assert_one_line(message, "convert_checkpoint.py nvidia2paddle: ", stale, "alibi")
    given = write_config(tmp_path / "given.json", ngc_config())
    message = refused("nvidia2paddle", ngc_copy, tmp_path / "out.pdparams", "--config", given, "--overwrite")
    assert_one_line(message, "convert_checkpoint.py nvidia2paddle: ", stale, "alibi True", given, "False")
    assert snapshot(tmp_path / "out.pdparams", stale) == before


def test_nvidia2paddle_refuses_a_config_beside_its_output_that_differs_from_config(ngc_copy, tmp_path):
    """Another difference than a recipe option (here the activation) is refused too: the weights written would
    travel with that file, and every loader would build a relu network."""
    stale = write_config(tmp_path / "out_config.json", ngc_config(), hidden_act="relu")
    given = write_config(tmp_path / "given.json", ngc_config())
    before = snapshot(stale)
    message = refused("nvidia2paddle", ngc_copy, tmp_path / "out.pdparams", "--config", given)
    assert_one_line(message, "convert_checkpoint.py nvidia2paddle: ", stale, "hidden_act 'relu'", given, "'gelu'")
    assert not (tmp_path / "out.pdparams").exists() and snapshot(stale) == before


# ---------------------------------------------------------------------------------------------------------------
# The loader of initial weights (run_squad.py, run_glue.py, downstream.py)


def test_a_config_file_unlike_the_alibi_checkpoints_is_refused_by_the_task_scripts(alibi_step, tmp_path, capsys):
    """This held before issue 66 (weights.model_config_file); kept as the loader's case of the issue's example."""
    argv = ["--vocab-file", str(ROOT / "vocab" / "bert-large-uncased-vocab.txt"), "--bert-model", "custom",
            "--config-file", str(TINY_4K), "--from-pretrained-params", str(alibi_step), "--task-name", "mrpc",
            "--do-eval", "--predict-file", str(TINY_4K), "--output-dir", str(tmp_path / "out")]
    with pytest.raises(SystemExit) as raised:
        run_glue.parse_args(argv)
    assert raised.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert_one_line(error, "", TINY_4K, "alibi False", alibi_step / "bert_paddle_config.json", "has True")
    assert not (tmp_path / "out").exists()


def test_the_loader_refuses_a_hugging_face_folder_whose_two_configs_differ(small_hf, tmp_path):
    folder = tmp_path / "hf"
    folder.mkdir()
    for name in ("config.json", "model.safetensors"):
        (folder / name).write_bytes((small_hf / name).read_bytes())
    ours = write_config(folder / "model_config.json", SMALL, hidden_act="relu")
    with pytest.raises(ValueError) as raised:
        model_config_file("custom", None, str(folder), flag="--from-pretrained-params", model_prefix="bert_paddle")
    assert_one_line(str(raised.value), "", folder / "config.json", "hidden_act", "'gelu'", ours, "'relu'")


def test_the_loader_refuses_a_hugging_face_config_json_that_sets_a_recipe_option(small_hf, tmp_path):
    folder = hf_copy_setting(small_hf, tmp_path / "hf", pre_layer_norm=True)
    with pytest.raises(ValueError) as raised:
        model_config_file("custom", None, str(folder), flag="--from-pretrained-params", model_prefix="bert_paddle")
    assert_one_line(str(raised.value), "", folder / "config.json", "pre_layer_norm", "transformers")
