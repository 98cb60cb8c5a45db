"""convert_checkpoint.py against transformers' own outputs, the source tensors and its error contract.

The expectations come from outside the code under test: tests/fixtures/minilm_reference.npz,
tests/fixtures/tiny_bert_torch/reference.npz and tests/fixtures/tiny_bert_tf5/ (saved by transformers 5)
were written once by transformers and torch (see the make_*.py scripts beside them); these tests need
neither library.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import io
import json
import os
import pickle
import runpy
import shutil
import sys
import zipfile
from pathlib import Path

import numpy as np
import paddle
import pytest
import safetensors
from safetensors.numpy import load_file

import convert_checkpoint
from bert_config import HF_ARCHITECTURE_VALUES
from checkpoints.paddle_files import read_safetensors_state, read_torch_bin
from checkpoints.weights import load_state
from conftest import ROOT, require_shared
from messages import assert_one_line
from modeling import (
    BertConfig,
    BertForPretraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertModel,
)

FIXTURES = ROOT / "tests" / "fixtures"
TINY_DIR = FIXTURES / "tiny_bert_torch"
TF5_DIR = FIXTURES / "tiny_bert_tf5"
TOLERANCE = 1e-4  # the parity bar: max abs diff, fp32 on CPU


def convert(capsys, *argv: str) -> str:
    """Run the CLI in process; return what it printed."""
    capsys.readouterr()
    convert_checkpoint.main(list(argv))
    return capsys.readouterr().out


def cli_error(*argv: str) -> str:
    with pytest.raises(SystemExit) as raised:
        convert_checkpoint.main(list(argv))
    message = str(raised.value)
    assert "\n" not in message
    return message


def max_diff(a, b) -> float:
    return float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())


def tiny_reference() -> dict[str, np.ndarray]:
    with np.load(TINY_DIR / "reference.npz") as npz:
        return dict(npz)


def tiny_inputs(reference) -> list[paddle.Tensor]:
    return [paddle.to_tensor(reference[k]) for k in ("input_ids", "token_type_ids", "attention_mask")]


# ---------------------------------------------------------------------------------------------
# all-MiniLM-L6-v2: a real checkpoint against transformers' BertModel
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class ConvertedMiniLM:
    hf_dir: Path
    pdparams: Path
    config_path: Path
    report: str  # what hf2paddle printed
    state: dict  # paddle.load of pdparams


@pytest.fixture(scope="module")
def minilm(tmp_path_factory) -> ConvertedMiniLM:
    """MiniLM converted once, with --config-out."""
    hf_dir = require_shared("models", "all-MiniLM-L6-v2")
    out = tmp_path_factory.mktemp("minilm")
    report = io.StringIO()
    with contextlib.redirect_stdout(report):
        convert_checkpoint.main(["hf2paddle", str(hf_dir), str(out / "minilm.pdparams"),
                                 "--config-out", str(out / "minilm.json")])
    return ConvertedMiniLM(hf_dir, out / "minilm.pdparams", out / "minilm.json", report.getvalue(),
                           paddle.load(str(out / "minilm.pdparams")))


@pytest.fixture(scope="module")
def minilm_reference() -> dict[str, np.ndarray]:
    with np.load(FIXTURES / "minilm_reference.npz") as npz:
        return dict(npz)


def run_minilm(minilm: ConvertedMiniLM, reference: dict, fuse_mha: bool) -> tuple[np.ndarray, np.ndarray]:
    """Our BertModel's (last hidden state, pooled output) on the reference inputs, eval mode."""
    config = BertConfig.from_json_file(str(minilm.config_path))
    config = dataclasses.replace(config, fuse_mha=fuse_mha)
    model = BertModel(config)
    missing, unexpected = load_state(model, minilm.state, str(minilm.pdparams))
    assert missing == [] and unexpected == []
    model.eval()
    with paddle.no_grad():
        sequence_output, pooled_output = model(
            *(paddle.to_tensor(reference[k]) for k in ("input_ids", "token_type_ids", "attention_mask"))
        )
    return sequence_output.numpy(), pooled_output.numpy()


@pytest.fixture(scope="module")
def minilm_unfused_outputs(minilm, minilm_reference) -> tuple[np.ndarray, np.ndarray]:
    return run_minilm(minilm, minilm_reference, fuse_mha=False)


def test_minilm_matches_transformers(minilm_unfused_outputs, minilm_reference):
    sequence_output, pooled_output = minilm_unfused_outputs
    reference = minilm_reference
    assert reference["attention_mask"].min() == 0, "the fixture must contain padding"
    tokens = reference["attention_mask"][..., None] > 0
    hidden_diff = max_diff(sequence_output, reference["last_hidden_state"])
    token_diff = max_diff(sequence_output * tokens, reference["last_hidden_state"] * tokens)
    pooled_diff = max_diff(pooled_output, reference["pooler_output"])
    print(f"\nMiniLM parity vs transformers ({reference['versions']}): max abs diff last_hidden_state "
          f"{hidden_diff:.2e} (real tokens {token_diff:.2e}), pooler_output {pooled_diff:.2e}")
    assert hidden_diff <= TOLERANCE
    assert pooled_diff <= TOLERANCE


def test_minilm_fused_attention_gives_the_same_outputs(minilm, minilm_reference, minilm_unfused_outputs):
    unfused_sequence, unfused_pooled = minilm_unfused_outputs
    fused_sequence, fused_pooled = run_minilm(minilm, minilm_reference, fuse_mha=True)
    print(f"\nMiniLM fused vs unfused QKV: max abs diff {max_diff(fused_sequence, unfused_sequence):.2e}")
    assert max_diff(fused_sequence, unfused_sequence) <= 1e-5
    assert max_diff(fused_pooled, unfused_pooled) <= 1e-5
    assert max_diff(fused_sequence, minilm_reference["last_hidden_state"]) <= TOLERANCE


def test_minilm_report_names_present_and_absent_heads(minilm):
    words = [line.split() for line in minilm.report.splitlines()]
    heads = {line[0]: line[1] for line in words if line and line[0] in convert_checkpoint.HEADS}
    assert heads == {"pooler": "present", "mlm": "absent", "nsp": "absent", "qa": "absent", "classifier": "absent"}
    assert "embeddings.position_ids" in minilm.report
    # Absent from the report means absent from the written file: nothing random was made up.
    assert not any(name.startswith(("cls.", "qa_outputs.", "classifier.")) for name in minilm.state)
    assert "bert.pooler.dense.weight" in minilm.state


def test_minilm_config_out_holds_the_hf_architecture(minilm):
    hf_config = json.loads((minilm.hf_dir / "config.json").read_text())
    written = json.loads(minilm.config_path.read_text())
    for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                "hidden_act", "max_position_embeddings", "type_vocab_size", "layer_norm_eps"):
        assert written[key] == hf_config[key], key
    assert written["fuse_mha"] is False and written["pad_vocab_size_multiple"] == 1


def test_minilm_round_trip_reproduces_the_original_tensors(minilm, capsys, tmp_path):
    convert(capsys, "paddle2hf", str(minilm.pdparams), str(minilm.config_path), str(tmp_path / "hf"))
    original = load_file(minilm.hf_dir / "model.safetensors")
    round_trip = load_file(tmp_path / "hf" / "model.safetensors")
    assert set(original) - set(round_trip) == {"embeddings.position_ids"}  # a buffer, not a parameter
    assert set(round_trip) <= set(original)
    for name, value in round_trip.items():
        assert value.dtype == original[name].dtype and np.array_equal(value, original[name]), name
    hf_config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert hf_config["architectures"] == ["BertModel"]
    written_config = BertConfig.from_json_file(str(minilm.config_path))
    assert BertConfig.from_dict(hf_config) == written_config


def test_require_heads_fails_naming_the_absent_heads_and_writes_nothing(tmp_path):
    hf_dir = require_shared("models", "all-MiniLM-L6-v2")
    out = tmp_path / "out.pdparams"
    message = cli_error("hf2paddle", str(hf_dir), str(out), "--require-heads", "pooler", "pretraining")
    assert "model.safetensors" in message
    assert "mlm (cls.predictions.*)" in message and "nsp (cls.seq_relationship.*)" in message
    assert "pooler" not in message.split("absent:")[1]
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------------------
# A tiny pytorch_model.bin with every head, read without torch
# ---------------------------------------------------------------------------------------------


def test_torch_bin_reader_matches_what_torch_reads():
    reference = tiny_reference()
    tensors = read_torch_bin(TINY_DIR / "pytorch_model.bin")
    expected = {name[len("tensor/"):]: value for name, value in reference.items() if name.startswith("tensor/")}
    assert set(tensors) == set(expected)
    for name, value in tensors.items():
        # The reference holds every float as float32. bfloat16 storages (the word embeddings and the
        # decoder weight tied to them) are widened to float32 too; float16 ones keep their dtype.
        dtype = np.float16 if "layer.1.output.LayerNorm" in name else expected[name].dtype
        assert value.dtype == dtype, name
        assert np.array_equal(value.astype(expected[name].dtype), expected[name]), name


def test_tiny_bin_converts_for_pretraining_and_squad_models(capsys, tmp_path):
    reference = tiny_reference()
    out = convert(capsys, "hf2paddle", str(TINY_DIR), str(tmp_path / "tiny.pdparams"),
                  "--config-out", str(tmp_path / "tiny.json"), "--require-heads", "pretraining", "qa")
    assert "pytorch_model.bin" in out
    for head in ("pooler", "mlm", "nsp", "qa"):
        assert f"{head:<10} present" in out
    assert "classifier absent" in out
    state = paddle.load(str(tmp_path / "tiny.pdparams"))
    vocab_size = reference["prediction_logits"].shape[-1]
    for pad_multiple in (1, 8):  # 27 -> 32 rows when padded; load_weights pads
        config = BertConfig.from_json_file(str(tmp_path / "tiny.json"))
        config = dataclasses.replace(config, pad_vocab_size_multiple=pad_multiple)
        pretraining = BertForPretraining(config)
        assert load_state(pretraining, state, "tiny")[0] == []
        span = BertForQuestionAnswering(config)
        assert load_state(span, state, "tiny")[0] == []
        pretraining.eval()
        span.eval()
        with paddle.no_grad():
            prediction_scores, seq_relationship = pretraining(*tiny_inputs(reference))
            start_logits, end_logits = span(*tiny_inputs(reference))
        assert max_diff(prediction_scores.numpy()[:, :vocab_size],
                        reference["prediction_logits"].reshape(-1, vocab_size)) <= 1e-5
        assert max_diff(seq_relationship.numpy(), reference["seq_relationship_logits"]) <= 1e-5
        assert max_diff(start_logits.numpy(), reference["start_logits"]) <= 1e-5
        assert max_diff(end_logits.numpy(), reference["end_logits"]) <= 1e-5


def expected_hf_tensors() -> dict[str, np.ndarray]:
    """The tiny file's tensors under the names paddle2hf writes: current LayerNorm names, no copies."""
    expected = {}
    for name, value in tiny_reference().items():
        if not name.startswith("tensor/"):
            continue
        name = name[len("tensor/"):].replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta",
                                                                                          "LayerNorm.bias")
        if name not in ("bert.embeddings.position_ids", "cls.predictions.decoder.weight",
                        "cls.predictions.decoder.bias"):
            expected[name] = value.astype(np.float32)
    return expected


def assert_equal_tensors(actual: dict, expected: dict) -> None:
    assert set(actual) == set(expected)
    for name, value in expected.items():
        assert actual[name].dtype == np.float32 and np.array_equal(actual[name], value), name


def test_tiny_round_trip_reproduces_the_tensors(capsys, tmp_path):
    convert(capsys, "hf2paddle", str(TINY_DIR), str(tmp_path / "tiny.pdparams"), "--config-out",
            str(tmp_path / "tiny.json"))
    out = convert(capsys, "paddle2hf", str(tmp_path / "tiny.pdparams"), str(tmp_path / "tiny.json"),
                  str(tmp_path / "hf"))
    assert "model.safetensors" in out
    assert_equal_tensors(load_file(tmp_path / "hf" / "model.safetensors"), expected_hf_tensors())
    hf_config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert hf_config["architectures"] == ["BertForPreTraining", "BertForQuestionAnswering"]
    assert hf_config["vocab_size"] == 27


def test_paddle2hf_unfuses_and_unpads_a_trained_model_state():
    conversion = convert_checkpoint.hf_to_paddle(tiny_hf_state(), tiny_config(), "tiny")
    config = tiny_config()
    config = dataclasses.replace(config, fuse_mha=True, pad_vocab_size_multiple=8)
    model = BertForPretraining(config)
    assert load_state(model, conversion.state, "tiny")[0] == []
    model_state = model.state_dict()
    assert "bert.encoder.0.attention.qkv.weight" in model_state
    assert model_state["bert.embeddings.word_embeddings.weight"].shape == [32, 8]
    # Paddle2hf of the model's own (fused, padded) state gives back the file's tensors.
    hf_state, heads = convert_checkpoint.paddle_to_hf(model_state, config, "model")
    assert_equal_tensors(hf_state, {k: v for k, v in expected_hf_tensors().items() if not k.startswith("qa_")})
    assert heads == {"pooler": True, "mlm": True, "nsp": True, "qa": False, "classifier": False}
    # The config file the run was trained with, which leaves the padding (to 8, as run_pretraining adds it) out.
    hf_state, _ = convert_checkpoint.paddle_to_hf(model_state, tiny_config(), "model")
    assert_equal_tensors(hf_state, {k: v for k, v in expected_hf_tensors().items() if not k.startswith("qa_")})
    # Rows that are no padding of the config's 27 words are another vocabulary.
    other = {**model_state, "bert.embeddings.word_embeddings.weight": np.zeros((40, 8), np.float32)}
    with pytest.raises(ValueError, match="word_embeddings.weight has 40 vocabulary rows, the model a vocabulary of 27"):
        convert_checkpoint.paddle_to_hf(other, tiny_config(), "model")


def test_classifier_head_converts_both_ways(capsys, tmp_path):
    hf_state = {name: value for name, value in tiny_hf_state().items() if not name.startswith(("cls.", "qa_"))}
    generator = np.random.default_rng(0)
    hf_state["classifier.weight"] = generator.standard_normal((3, 8)).astype(np.float32)  # torch: [out, in]
    hf_state["classifier.bias"] = generator.standard_normal(3).astype(np.float32)
    conversion = convert_checkpoint.hf_to_paddle(hf_state, tiny_config(), "classifier")
    assert conversion.heads == {"pooler": True, "mlm": False, "nsp": False, "qa": False, "classifier": True}
    model = BertForSequenceClassification(tiny_config(), num_labels=3)
    assert load_state(model, conversion.state, "classifier") == ([], [])
    model.eval()
    reference = tiny_reference()
    with paddle.no_grad():
        logits = model(*tiny_inputs(reference)).numpy()
        _, pooled_output = model.bert(*tiny_inputs(reference))
    # torch's Linear computes x W^T + b with W stored [out, in].
    expected = pooled_output.numpy() @ hf_state["classifier.weight"].T + hf_state["classifier.bias"]
    assert max_diff(logits, expected) <= 1e-5

    paddle.save(model.state_dict(), str(tmp_path / "classifier.pdparams"))
    (tmp_path / "config.json").write_text(tiny_config().to_json_string())
    convert(capsys, "paddle2hf", str(tmp_path / "classifier.pdparams"), str(tmp_path / "config.json"),
            str(tmp_path / "hf"))
    hf_config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert hf_config["architectures"] == ["BertForSequenceClassification"]
    assert hf_config["id2label"] == {"0": "LABEL_0", "1": "LABEL_1", "2": "LABEL_2"}  # transformers' num_labels
    _, round_trip, _ = convert_checkpoint.read_hf_checkpoint(tmp_path / "hf")
    assert np.array_equal(round_trip["classifier.weight"], hf_state["classifier.weight"])


def test_bare_bert_model_state_converts_without_prefix():
    config = BertConfig.from_json_file(str(ROOT / "bert_configs" / "bert-tiny-uncased.json"))
    model = BertModel(config)
    hf_state, heads = convert_checkpoint.paddle_to_hf(model.state_dict(), config, "bare")
    assert not any(name.startswith("bert.") for name in hf_state)
    query = model.state_dict()["encoder.1.attention.query.weight"].numpy()
    assert np.array_equal(hf_state["encoder.layer.1.attention.self.query.weight"], query.T)
    assert heads["pooler"] and not heads["mlm"]


# ---------------------------------------------------------------------------------------------
# A checkpoint as transformers 5 saves it (save_pretrained), both ways
# ---------------------------------------------------------------------------------------------


def tf5_reference() -> dict[str, np.ndarray]:
    with np.load(TF5_DIR / "reference.npz") as npz:
        return dict(npz)


@pytest.fixture(scope="module")
def tf5_converted(tmp_path_factory) -> tuple[Path, Path]:
    """(pdparams, our config JSON) of hf2paddle on the transformers-5 fixture."""
    out = tmp_path_factory.mktemp("tf5")
    with contextlib.redirect_stdout(io.StringIO()):
        convert_checkpoint.main(["hf2paddle", str(TF5_DIR), str(out / "tf5.pdparams"), "--config-out",
                                 str(out / "tf5.json"), "--require-heads", "pretraining"])
    return out / "tf5.pdparams", out / "tf5.json"


@pytest.mark.parametrize("fuse_mha, pad_multiple", [(False, 1), (True, 8)])
def test_transformers5_checkpoint_gives_its_logits(tf5_converted, fuse_mha, pad_multiple):
    pdparams, config_path = tf5_converted
    reference = tf5_reference()
    assert str(reference["versions"]).startswith("transformers 5.")
    assert reference["attention_mask"].min() == 0, "the fixture must contain padding"
    config = dataclasses.replace(BertConfig.from_json_file(str(config_path)), fuse_mha=fuse_mha,
                                 pad_vocab_size_multiple=pad_multiple)
    model = BertForPretraining(config)
    assert load_state(model, paddle.load(str(pdparams)), "tf5") == ([], [])
    model.eval()
    with paddle.no_grad():
        prediction_scores, seq_relationship = model(*tiny_inputs(reference))
    vocab_size = reference["prediction_logits"].shape[-1]
    prediction_scores = prediction_scores.numpy().reshape(reference["prediction_logits"].shape[:2] + (-1,))
    assert prediction_scores.shape[-1] == config.padded_vocab_size
    print(f"\ntransformers-5 checkpoint (fuse_mha={fuse_mha}, pad {pad_multiple}): max |logit diff| "
          f"{max_diff(prediction_scores[..., :vocab_size], reference['prediction_logits']):.2e}")
    assert max_diff(prediction_scores[..., :vocab_size], reference["prediction_logits"]) <= 1e-5
    assert max_diff(seq_relationship.numpy(), reference["seq_relationship_logits"]) <= 1e-5


def test_paddle2hf_reproduces_the_transformers5_files(tf5_converted, capsys, tmp_path):
    pdparams, config_path = tf5_converted
    convert(capsys, "paddle2hf", str(pdparams), str(config_path), str(tmp_path / "hf"))
    original = load_file(TF5_DIR / "model.safetensors")
    written = load_file(tmp_path / "hf" / "model.safetensors")
    assert sorted(written) == sorted(original)
    for name, value in original.items():
        assert written[name].dtype == value.dtype and written[name].shape == value.shape, name
        assert np.array_equal(written[name], value), name
    with safetensors.safe_open(tmp_path / "hf" / "model.safetensors", "np") as f:
        assert f.metadata() == {"format": "pt"}  # transformers refuses a file without it

    fixture_config = json.loads((TF5_DIR / "config.json").read_text())
    written_config = json.loads((tmp_path / "hf" / "config.json").read_text())
    architecture_keys = ({field.name for field in dataclasses.fields(BertConfig)} | set(HF_ARCHITECTURE_VALUES)
                         | {"architectures"})
    compared = architecture_keys & set(fixture_config)
    assert {"model_type", "architectures", "vocab_size", "tie_word_embeddings", "is_decoder"} <= compared
    assert {key: written_config[key] for key in compared} == {key: fixture_config[key] for key in compared}


# ---------------------------------------------------------------------------------------------
# Dtypes, damaged heads and bad input
# ---------------------------------------------------------------------------------------------


def write_safetensors_by_hand(path: Path, tensors: dict[str, tuple[str, list[int], bytes]]) -> None:
    """The safetensors layout: u64 little-endian header size, JSON header with byte offsets, raw data."""
    header, data = {}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    header_bytes = json.dumps(header).encode()
    header_bytes += b" " * (-len(header_bytes) % 8)
    path.write_bytes(len(header_bytes).to_bytes(8, "little") + header_bytes + data)


def test_safetensors_bfloat16_and_float16_are_read_exactly(tmp_path):
    values = np.array([1.0, -2.5, 0.15625, 2.0**100], np.float32)
    # bfloat16 keeps the upper 16 bits of a float32; these values have nothing in the lower 16.
    assert not (values.view(np.uint32) & 0xFFFF).any()
    bfloat16_bits = (values.view(np.uint32) >> 16).astype("<u2")
    path = tmp_path / "mixed.safetensors"
    write_safetensors_by_hand(path, {
        "a": ("BF16", [2, 2], bfloat16_bits.tobytes()),
        "b": ("F16", [3], np.array([0.5, -1.0, 65504.0], "<f2").tobytes()),
    })
    tensors = read_safetensors_state(path)
    assert tensors["a"].dtype == np.float32 and np.array_equal(tensors["a"], values.reshape(2, 2))
    assert tensors["b"].dtype == np.float16 and tensors["b"].tolist() == [0.5, -1.0, 65504.0]


def tiny_hf_state() -> dict[str, np.ndarray]:
    return read_torch_bin(TINY_DIR / "pytorch_model.bin")


def tiny_config() -> BertConfig:
    return BertConfig.from_json_file(str(TINY_DIR / "config.json"))


def test_partial_head_is_an_error_naming_the_missing_tensor():
    state = tiny_hf_state()
    del state["cls.predictions.transform.LayerNorm.weight"]
    missing = r"\(1 of 5 missing, e\.g\. cls\.predictions\.transform\.LayerNorm"
    with pytest.raises(ValueError, match=r"src: incomplete mlm weights " + missing):
        convert_checkpoint.hf_to_paddle(state, tiny_config(), "src")


def test_missing_encoder_tensor_is_an_error_naming_it():
    state = tiny_hf_state()
    del state["bert.encoder.layer.1.intermediate.dense.bias"]
    missing = r"\(1 of \d+ missing, e\.g\. encoder\.layer\.1\.intermediate"
    with pytest.raises(ValueError, match=r"src: no complete encoder weights " + missing):
        convert_checkpoint.hf_to_paddle(state, tiny_config(), "src")


def test_untied_decoder_unknown_tensor_and_wrong_shape_are_errors():
    state = tiny_hf_state()
    state["cls.predictions.decoder.weight"] = state["cls.predictions.decoder.weight"] + 1
    with pytest.raises(ValueError, match="src: cls.predictions.decoder.weight differs from the word embeddings"):
        convert_checkpoint.hf_to_paddle(state, tiny_config(), "src")
    state = tiny_hf_state()
    state["bert.encoder.layer.0.attention.self.distance_embedding.weight"] = np.zeros((3, 8), np.float32)
    with pytest.raises(ValueError, match="not BERT parameters: bert.encoder.layer.0.attention.self.distance_emb"):
        convert_checkpoint.hf_to_paddle(state, tiny_config(), "src")
    state = tiny_hf_state()
    state["bert.encoder.layer.2.output.dense.bias"] = np.zeros(8, np.float32)
    with pytest.raises(ValueError, match="encoder.layer.2.output.dense.bias has no place in a 2-layer BERT"):
        convert_checkpoint.hf_to_paddle(state, tiny_config(), "src")
    config = tiny_config()
    config = dataclasses.replace(config, intermediate_size=32)
    with pytest.raises(ValueError, match=r"intermediate.dense.weight has shape \[8, 16\], the config implies"):
        convert_checkpoint.hf_to_paddle(tiny_hf_state(), config, "src")


def make_hf_dir(tmp_path: Path, weights_name: str | None, weights: bytes = b"", config: str | None = None) -> Path:
    hf_dir = tmp_path / "hf"
    hf_dir.mkdir()
    (hf_dir / "config.json").write_text(config if config is not None else (TINY_DIR / "config.json").read_text())
    if weights_name:
        (hf_dir / weights_name).write_bytes(weights)
    return hf_dir


def zip_with_pickle(payload: bytes) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("archive/data.pkl", payload)
    return buffer.getvalue()


@pytest.mark.parametrize("case, file_name, expected", [
    ("missing_dir", "nowhere", "Hugging Face checkpoint folder not found"),
    ("no_weights", "hf", "holds neither model.safetensors nor pytorch_model.bin"),
    ("corrupt_config", "config.json", "not valid JSON"),
    ("unknown_config_key", "config.json", "unknown BERT config keys ['rotary_dim']"),
    ("legacy_bin", "pytorch_model.bin", "legacy (torch < 1.6)"),
    ("evil_bin", "pytorch_model.bin", "refusing to load global posix.system"),
    ("corrupt_safetensors", "model.safetensors", "not a valid safetensors file"),
])
def test_bad_hf_input_gives_one_line_naming_the_file(tmp_path, case, file_name, expected):
    if case == "missing_dir":
        hf_dir = tmp_path / "nowhere"
    elif case == "no_weights":
        hf_dir = make_hf_dir(tmp_path, None)
    elif case == "corrupt_config":
        hf_dir = make_hf_dir(tmp_path, None, config="{not json")
    elif case == "unknown_config_key":
        hf_dir = make_hf_dir(tmp_path, None, config=json.dumps({"rotary_dim": 4}))
    elif case == "legacy_bin":
        # torch < 1.6 wrote a bare pickle stream that begins with a magic number.
        hf_dir = make_hf_dir(tmp_path, "pytorch_model.bin", pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2))
    elif case == "evil_bin":
        hf_dir = make_hf_dir(tmp_path, "pytorch_model.bin", zip_with_pickle(pickle.dumps(os.system)))
    else:
        hf_dir = make_hf_dir(tmp_path, "model.safetensors", b"\x10\x00\x00\x00\x00\x00\x00\x00{garbage")
    message = cli_error("hf2paddle", str(hf_dir), str(tmp_path / "out.pdparams"))
    assert file_name in message and expected in message
    assert not (tmp_path / "out.pdparams").exists()


def test_bad_paddle_input_gives_one_line_naming_the_file(tmp_path):
    config = ROOT / "bert_configs" / "bert-tiny-uncased.json"
    message = cli_error("paddle2hf", str(tmp_path / "absent.pdparams"), str(config), str(tmp_path / "hf"))
    assert_one_line(message, "convert_checkpoint.py paddle2hf: ", f"{tmp_path / 'absent.pdparams'}", "not found")
    damaged = tmp_path / "damaged.pdparams"
    damaged.write_bytes(b"not a pickle")
    message = cli_error("paddle2hf", str(damaged), str(config), str(tmp_path / "hf"))
    assert_one_line(message, "convert_checkpoint.py paddle2hf: ", f"{damaged}", "not a readable Paddle pickle")
    wrong_config = tmp_path / "wrong.pdparams"
    paddle.save({"embeddings.word_embeddings.weight": np.zeros((5, 128), np.float32)}, str(wrong_config))
    message = cli_error("paddle2hf", str(wrong_config), str(config), str(tmp_path / "hf"))
    assert ("wrong.pdparams: bert.embeddings.word_embeddings.weight has 5 vocabulary rows, the model a vocabulary "
            "of 30522") in message
    assert not (tmp_path / "hf").exists()


def test_command_line_entry_point_exits_with_one_line(tmp_path, monkeypatch):
    script = ROOT / "convert_checkpoint.py"
    monkeypatch.setattr(sys, "argv", [str(script), "hf2paddle", str(tmp_path / "missing"), str(tmp_path / "o")])
    with pytest.raises(SystemExit) as raised:
        runpy.run_path(str(script), run_name="__main__")
    # A string exit code is printed to stderr as the only line, and the exit status is 1.
    assert raised.value.code == (f"convert_checkpoint.py hf2paddle: {tmp_path / 'missing'}: "
                                 "Hugging Face checkpoint folder not found")


def test_hf2paddle_writes_safetensors_equal_to_the_pdparams(capsys, tmp_path):
    """An output path ending in .safetensors gets the arrays the .pdparams gets, bit for bit, readable by all."""
    convert(capsys, "hf2paddle", str(TINY_DIR), str(tmp_path / "tiny.pdparams"))
    out = convert(capsys, "hf2paddle", str(TINY_DIR), str(tmp_path / "tiny.safetensors"))
    assert f"to {tmp_path / 'tiny.safetensors'}" in out
    pdparams = paddle.load(str(tmp_path / "tiny.pdparams"))
    shared = load_file(tmp_path / "tiny.safetensors")  # safetensors' own reader
    assert sorted(shared) == sorted(pdparams)
    for name, value in pdparams.items():
        value = np.asarray(value)
        assert (shared[name].dtype, shared[name].tobytes()) == (value.dtype, value.tobytes()), name
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "tiny.safetensors").stat().st_mode & 0o777 == 0o666 & ~umask


# ---------------------------------------------------------------------------------------------
# nvidia2paddle: NVIDIA's static-graph checkpoints (a stand-in built by tests/fixtures/ngc_static_bert.py)
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ngc_checkpoints(tmp_path_factory) -> dict:
    from fixtures.ngc_static_bert import HEADS, write_ngc_checkpoints

    folder = tmp_path_factory.mktemp("ngc")
    return {head: write_ngc_checkpoints(folder, head) for head in HEADS}


def ngc_config(tmp_path: Path) -> Path:
    from fixtures.ngc_static_bert import CONFIG

    path = tmp_path / "ngc_architecture.json"  # not ngc_config.json: that would travel with an ngc.pdparams here
    path.write_text(json.dumps({**CONFIG, "hidden_act": "gelu", "hidden_dropout_prob": 0.0,
                                "attention_probs_dropout_prob": 0.0}))
    return path


def model_outputs(model_class, config: BertConfig, state: dict, feed: dict) -> list[np.ndarray]:
    """(sequence, pooled, the head's two outputs) of our model with `state`, eval mode, as the fixture returns them."""
    model = model_class(config)
    assert load_state(model, state, "ngc")[0] == []
    model.eval()
    inputs = [paddle.to_tensor(feed[name]) for name in ("input_ids", "token_type_ids", "attention_mask")]
    with paddle.no_grad():
        return [tensor.numpy() for tensor in (*model.bert(*inputs), *model(*inputs))]


def assert_outputs_match(ours: list[np.ndarray], expected: tuple, tolerance: float) -> None:
    for index, (actual, wanted) in enumerate(zip(ours, expected, strict=True)):
        assert max_diff(actual.reshape(wanted.shape), wanted) <= tolerance, index


@pytest.mark.parametrize("layout", ["unfused", "fused_qkv", "fused_layer"])
@pytest.mark.parametrize("head", ["pretraining", "squad"])
def test_nvidia2paddle_gives_the_static_programs_outputs(ngc_checkpoints, capsys, tmp_path, head, layout):
    """Without any flag, each encoder layout converts, and the weights in our model (either attention layout) with
    the config --config-out writes (NVIDIA's epsilons) give the static program's outputs; the fused_layer network
    carries the unfused one's values, so its expectation is the unfused program's."""
    checkpoints = ngc_checkpoints[head]
    expected = checkpoints.outputs.get(layout, checkpoints.outputs["unfused"])
    out = convert(capsys, "nvidia2paddle", str(checkpoints.prefixes[layout]), str(tmp_path / "ngc.pdparams"),
                  "--config", str(ngc_config(tmp_path)), "--config-out", str(tmp_path / "nvidia.json"))
    names = {"unfused": "unfused", "fused_qkv": "fused-QKV", "fused_layer": "FusedTransformerEncoderLayer"}
    assert f"2 layers ({names[layout]}), hidden 16" in out
    assert ("mlm        present" in out) == (head == "pretraining")
    assert ("qa         present" in out) == (head == "squad")
    written = json.loads((tmp_path / "nvidia.json").read_text())
    assert written["layer_norm_eps"] == 1e-12 and written["encoder_layer_norm_eps"] == 1e-5
    state = paddle.load(str(tmp_path / "ngc.pdparams"))
    model_class = BertForPretraining if head == "pretraining" else BertForQuestionAnswering
    for fuse_mha in (False, True):
        config = dataclasses.replace(BertConfig.from_json_file(tmp_path / "nvidia.json"), fuse_mha=fuse_mha)
        assert_outputs_match(model_outputs(model_class, config, state, checkpoints.feed), expected, 2e-6)


def test_fused_qkv_fixture_computes_the_unfused_network(ngc_checkpoints):
    """The fixture's fuse_qkv layer (PR #53810's layout, its own forward) with the q, k, v weights side by side
    computes what nn.TransformerEncoderLayer does: the two programs agree."""
    for checkpoints in ngc_checkpoints.values():
        assert_outputs_match(list(checkpoints.outputs["fused_qkv"]), checkpoints.outputs["unfused"], 1e-6)


def test_nvidia2paddle_output_serves_squad_and_pretraining_from_weights(ngc_checkpoints, capsys, tmp_path):
    """What run_squad.py and run_pretraining.py --from-pretrained-params load: the encoder complete, from a file
    given as the .pdparams or its prefix, written as .pdparams or .safetensors."""
    from checkpoints.weights import ENCODER_PARTS, load_pretrained

    unfused_prefix = ngc_checkpoints["pretraining"].prefixes["unfused"]
    convert(capsys, "nvidia2paddle", str(unfused_prefix), str(tmp_path / "ngc.pdparams"))
    convert(capsys, "nvidia2paddle", f"{unfused_prefix}.pdparams", str(tmp_path / "ngc.safetensors"))
    config = BertConfig.from_json_file(ngc_config(tmp_path))
    for path in (tmp_path / "ngc.pdparams", tmp_path / "ngc.safetensors"):
        squad = load_pretrained(BertForQuestionAnswering(config), path, required=ENCODER_PARTS,
                                flag="--from-pretrained-params")
        assert squad.initialised == ["qa"]
        pretraining = load_pretrained(BertForPretraining(config), path, required=ENCODER_PARTS,
                                      flag="--from-pretrained-params")
        assert pretraining.initialised == [] and pretraining.missing == []


def test_nvidia2paddle_pads_and_cuts_only_nvidias_vocabulary_padding(ngc_checkpoints, capsys, tmp_path):
    """The fixture's 40-row vocabulary checked against a config of 36 words (NVIDIA pads 36 to 40) converts, cut
    to 36 rows; against 30 words (40 is no padding of 30) it is an error naming both sizes."""
    prefix = ngc_checkpoints["squad"].prefixes["unfused"]
    padded = tmp_path / "padded.json"
    padded.write_text(json.dumps({**json.loads(ngc_config(tmp_path).read_text()), "vocab_size": 36}))
    convert(capsys, "nvidia2paddle", str(prefix), str(tmp_path / "ngc.pdparams"), "--config", str(padded))
    assert list(paddle.load(str(tmp_path / "ngc.pdparams"))["bert.embeddings.word_embeddings.weight"].shape) == [36, 16]
    other = tmp_path / "other.json"
    other.write_text(json.dumps({**json.loads(ngc_config(tmp_path).read_text()), "vocab_size": 30}))
    message = cli_error("nvidia2paddle", str(prefix), str(tmp_path / "other.pdparams"), "--config", str(other))
    assert_one_line(message, "convert_checkpoint.py nvidia2paddle: ", "bert.embeddings.word_embeddings.weight",
                    "40 vocabulary rows", "vocabulary of 30")
    assert not (tmp_path / "other.pdparams").exists()


def test_nvidia2paddle_input_errors_name_the_file(ngc_checkpoints, tmp_path):
    unfused_prefix = ngc_checkpoints["squad"].prefixes["unfused"]
    out = str(tmp_path / "out.pdparams")
    message = cli_error("nvidia2paddle", str(tmp_path / "absent"), out)
    assert message.endswith(f"{tmp_path / 'absent'}: neither a .pdparams file nor the prefix of one")
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({**json.loads(ngc_config(tmp_path).read_text()), "intermediate_size": 64}))
    message = cli_error("nvidia2paddle", str(unfused_prefix), out, "--config", str(wrong))
    assert_one_line(message, "convert_checkpoint.py nvidia2paddle: ", "[16, 32]", "config implies [16, 64]")
    message = cli_error("nvidia2paddle", str(unfused_prefix), out, "--config-out", str(tmp_path / "c.json"))
    assert "--config-out needs --config" in message
    assert not (tmp_path / "out.pdparams").exists()


def test_nvidia2paddle_given_a_paddlebert_file_says_it_needs_no_conversion(ngc_checkpoints, tmp_path):
    ours = tmp_path / "ours.pdparams"
    convert_checkpoint.main(["nvidia2paddle", str(ngc_checkpoints["squad"].prefixes["unfused"]), str(ours)])
    before = sha256_of(ours)
    message = cli_error("nvidia2paddle", str(ours), str(tmp_path / "again.pdparams"))
    assert_one_line(message, "convert_checkpoint.py nvidia2paddle: ", str(ours), "PaddleBERT's own parameter names",
                    "needs no conversion", "--from-pretrained-params")
    assert sha256_of(ours) == before and not (tmp_path / "again.pdparams").exists()


def sha256_of(*paths: Path) -> list[str]:
    return [hashlib.sha256(path.read_bytes()).hexdigest() for path in paths]


def test_no_conversion_writes_onto_its_source_even_with_overwrite(tmp_path, capsys):
    """hf2paddle SRC SRC/model.safetensors would replace the file it reads; paddle2hf into the folder of its own
    inputs, and nvidia2paddle --config-out onto --config, likewise."""
    source = tmp_path / "hf"
    shutil.copytree(TF5_DIR, source)
    before = sha256_of(source / "model.safetensors", source / "config.json")
    for flags in ([], ["--overwrite"]):
        message = cli_error("hf2paddle", str(source), str(source / "model.safetensors"), *flags)
        assert message == (f"convert_checkpoint.py hf2paddle: {source / 'model.safetensors'} is what this command "
                           "reads; write the output elsewhere")
        message = cli_error("hf2paddle", str(source), str(tmp_path / "out.pdparams"), "--config-out",
                            str(source / "config.json"), *flags)
        assert message.endswith(f"{source / 'config.json'} is what this command reads; write the output elsewhere")
    assert sha256_of(source / "model.safetensors", source / "config.json") == before
    assert not (tmp_path / "out.pdparams").exists()
    convert(capsys, "hf2paddle", str(source), str(tmp_path / "out.pdparams"))
    message = cli_error("paddle2hf", str(tmp_path / "out.pdparams"), str(source / "config.json"), str(source),
                        "--overwrite")
    assert message.endswith(f"{source / 'config.json'} is what this command reads; write the output elsewhere")
    assert sha256_of(source / "model.safetensors", source / "config.json") == before


def test_an_existing_output_is_replaced_only_with_overwrite(tmp_path, capsys):
    """hf2paddle onto another model's weights, paddle2hf into a folder that holds a model: refused unless
    --overwrite, which replaces them and names what else the folder holds."""
    convert(capsys, "hf2paddle", str(TF5_DIR), str(tmp_path / "tf5.pdparams"))
    other = tmp_path / "other.pdparams"
    convert(capsys, "hf2paddle", str(TINY_DIR), str(other))
    kept = sha256_of(other, tmp_path / "other_config.json")
    message = cli_error("hf2paddle", str(TF5_DIR), str(other))
    assert message == f"convert_checkpoint.py hf2paddle: {other} exists; pass --overwrite to replace it"
    assert sha256_of(other, tmp_path / "other_config.json") == kept
    convert(capsys, "hf2paddle", str(TF5_DIR), str(other), "--overwrite")
    assert sha256_of(other) == sha256_of(tmp_path / "tf5.pdparams")
    assert sha256_of(tmp_path / "other_config.json") == sha256_of(tmp_path / "tf5_config.json")

    hf = tmp_path / "hf"
    convert(capsys, "paddle2hf", str(tmp_path / "tf5.pdparams"), str(tmp_path / "tf5_config.json"), str(hf))
    (hf / "vocab.txt").write_text("[PAD]\n")
    first = sha256_of(hf / "model.safetensors", hf / "config.json")
    message = cli_error("paddle2hf", str(other), str(tmp_path / "other_config.json"), str(hf))
    assert message == (f"convert_checkpoint.py paddle2hf: {hf / 'model.safetensors'} exists; pass --overwrite to "
                       "replace it")
    assert sha256_of(hf / "model.safetensors", hf / "config.json") == first
    out = convert(capsys, "paddle2hf", str(other), str(tmp_path / "other_config.json"), str(hf), "--overwrite")
    assert f"note: {hf} also holds vocab.txt, which this command neither wrote nor checked" in out


def test_an_out_dir_that_is_a_file_and_a_full_disk_are_one_line(tmp_path, capsys, monkeypatch):
    convert(capsys, "hf2paddle", str(TF5_DIR), str(tmp_path / "tf5.pdparams"))
    taken = tmp_path / "taken"
    taken.write_text("not a folder")
    message = cli_error("paddle2hf", str(tmp_path / "tf5.pdparams"), str(tmp_path / "tf5_config.json"), str(taken))
    assert message == f"convert_checkpoint.py paddle2hf: {taken} is a file; paddle2hf writes a folder"

    def full_disk(path, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(convert_checkpoint, "atomic_write", full_disk)
    message = cli_error("paddle2hf", str(tmp_path / "tf5.pdparams"), str(tmp_path / "tf5_config.json"),
                        str(tmp_path / "hf"))
    assert message == (f"convert_checkpoint.py paddle2hf: [Errno {errno.ENOSPC}] No space left on device: "
                       f"'{tmp_path / 'hf' / 'model.safetensors'}'")


def test_a_hugging_face_folder_whose_name_is_not_utf8_converts_and_is_named_with_its_bytes_escaped(tmp_path):
    """Linux names are bytes: a folder named b"model-\\xff" reaches Python as a surrogate, which safetensors (Rust)
    cannot open and a UTF-8 stdout cannot print."""
    import subprocess

    folder = Path(os.fsdecode(bytes(tmp_path) + b"/model-\xff"))
    shutil.copytree(TF5_DIR, folder)
    out = tmp_path / "tiny.pdparams"
    result = subprocess.run([sys.executable, str(ROOT / "convert_checkpoint.py"), "hf2paddle", os.fsencode(folder),
                             str(out)], capture_output=True, cwd=ROOT, env={**os.environ, "PYTHONIOENCODING": "utf-8"})
    assert result.returncode == 0, result.stderr.decode(errors="replace")[-2000:]
    assert b"model-\\udcff" in result.stdout  # the byte as Python names it, escaped (stderr writes it so too)
    expected = read_safetensors_state(TF5_DIR / "model.safetensors")
    assert read_safetensors_state(folder / "model.safetensors").keys() == expected.keys()
    assert paddle.load(str(out)).keys()
