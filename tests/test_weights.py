"""weights.py: which part each parameter is, and load_pretrained's contract (parts, layouts, dtypes, errors).

Expected parts come from the model's module tree (model.bert.encoder, model.cls.seq_relationship, ...), not
from the name prefixes weights.py matches; expected values come from the saved source state itself.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import paddle
import pytest

from bert_config import BertConfig
from checkpoints.weights import (
    ENCODER_PARTS,
    HEADS,
    PARTS,
    check_parts,
    load_pretrained,
    load_state,
    part_of,
    safetensors_beside,
    write_safetensors_weights,
)
from modeling import BertForPretraining, BertForQuestionAnswering, BertForSequenceClassification, BertModel

FLAG = "--from-pretrained-params"
CONFIG = BertConfig(vocab_size=29, hidden_size=8, num_hidden_layers=2, num_attention_heads=2, intermediate_size=16,
                    max_position_embeddings=16, initializer_range=0.5)


def make(model_class, config: BertConfig = CONFIG, seed: int = 0):
    paddle.seed(seed)
    if model_class is BertForSequenceClassification:
        return model_class(config, num_labels=3)
    return model_class(config)


def arrays(model) -> dict[str, np.ndarray]:
    return {name: value.numpy() for name, value in model.state_dict().items()}


def save(tmp_path: Path, state: dict, name: str = "bert_paddle.pdparams") -> Path:
    path = tmp_path / name
    paddle.save(state, str(path))
    return path


def expected_parts(model) -> dict[str, str]:
    """Each parameter's part, read off the module that owns it."""
    bert = model if isinstance(model, BertModel) else model.bert
    owners = [(bert.embeddings, "embeddings"), (bert.encoder, "encoder"), (bert.pooler, "pooler")]
    if isinstance(model, BertForPretraining):
        owners += [(model.cls.seq_relationship, "nsp"), (model.cls, "mlm")]  # the nsp layer is inside cls
    if isinstance(model, BertForQuestionAnswering):
        owners.append((model.qa_outputs, "qa"))
    if isinstance(model, BertForSequenceClassification):
        owners.append((model.classifier, "classifier"))
    parts: dict[int, str] = {}
    for module, part in owners:
        for parameter in module.parameters():
            parts.setdefault(id(parameter), part)
    return {name: parts[id(parameter)] for name, parameter in model.named_parameters()}


# ---------------------------------------------------------------------------------------------
# Parts
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fuse_mha", [False, True])
@pytest.mark.parametrize("model_class", [BertModel, BertForPretraining, BertForQuestionAnswering,
                                         BertForSequenceClassification])
def test_part_of_every_parameter_of_every_model(model_class, fuse_mha):
    model = make(model_class, dataclasses.replace(CONFIG, fuse_mha=fuse_mha))
    expected = expected_parts(model)
    assert len(expected) == len(model.parameters())  # every parameter was found under some module
    assert {name: part_of(name) for name in expected} == expected


def test_parts_and_heads():
    assert ENCODER_PARTS == ("embeddings", "encoder")
    assert HEADS == ("pooler", "mlm", "nsp", "qa", "classifier")
    assert set(PARTS) == set(ENCODER_PARTS) | set(HEADS)
    assert part_of("cls.predictions.decoder.weight") is None  # a Hugging Face name, not ours
    assert part_of("optimizer.moment1") is None


def test_check_parts_reports_each_part_and_names_what_is_missing():
    names = ["bert.embeddings.a", "bert.encoder.0.a", "bert.encoder.1.a", "bert.pooler.dense.weight",
             "bert.pooler.dense.bias", "qa_outputs.weight"]
    present = check_parts(names, set(names) - {"bert.pooler.dense.weight", "bert.pooler.dense.bias"},
                          required=ENCODER_PARTS, source="src")
    assert present == {"embeddings": True, "encoder": True, "pooler": False, "qa": True}
    with pytest.raises(ValueError) as raised:
        check_parts(names, set(names) - {"bert.encoder.1.a"}, required=ENCODER_PARTS, source="src",
                    display=str.upper)
    assert str(raised.value) == ("src: no complete encoder weights (1 of 2 missing, e.g. BERT.ENCODER.1.A); "
                                 "is it a BERT checkpoint for this config?")
    with pytest.raises(ValueError, match=r"^src: incomplete pooler weights \(1 of 2 missing, e.g. bert.pooler"):
        check_parts(names, set(names) - {"bert.pooler.dense.bias"}, required=ENCODER_PARTS, source="src")


# ---------------------------------------------------------------------------------------------
# load_pretrained
# ---------------------------------------------------------------------------------------------


def test_pooler_less_state_loads_into_squad_model_and_reports_the_pooler_initialised(tmp_path):
    source = arrays(make(BertForPretraining, seed=1))
    state = {name: value for name, value in source.items() if not name.startswith("bert.pooler.")}
    save(tmp_path, state)
    model = make(BertForQuestionAnswering, seed=2)
    before = arrays(model)
    report = load_pretrained(model, tmp_path, required=ENCODER_PARTS, flag=FLAG)  # a folder: <prefix>.pdparams
    assert report.path == str(tmp_path / "bert_paddle.pdparams")
    assert report.loaded == ["embeddings", "encoder"]
    assert report.initialised == ["pooler", "qa"]
    assert report.missing == ["bert.pooler.dense.bias", "bert.pooler.dense.weight", "qa_outputs.bias",
                              "qa_outputs.weight"]
    assert report.unused == sum(name.startswith("cls.") for name in state) == 7
    assert "pooler, qa not in the file, starting from random initialisation" in report.describe()
    assert "7 entries the model has no place for were ignored" in report.describe()
    after = arrays(model)
    for name, value in after.items():
        expected = state[name] if part_of(name) in ENCODER_PARTS else before[name]
        assert np.array_equal(value, expected), name


def test_missing_encoder_weight_is_one_line_naming_flag_file_and_part(tmp_path):
    state = arrays(make(BertForPretraining))
    del state["bert.encoder.1.output.bias"]
    path = save(tmp_path, state, "damaged.pdparams")
    with pytest.raises(ValueError) as raised:
        load_pretrained(make(BertForQuestionAnswering), path, required=ENCODER_PARTS, flag=FLAG)
    assert str(raised.value) == (f"{FLAG} {path}: no complete encoder weights (1 of 32 missing, e.g. "
                                 "bert.encoder.1.output.bias); is it a BERT checkpoint for this config?")


def test_file_without_any_encoder_is_refused(tmp_path):
    state = {name: value for name, value in arrays(make(BertForPretraining)).items() if part_of(name) != "encoder"}
    path = save(tmp_path, state, "embeddings_only.pdparams")
    with pytest.raises(ValueError, match=rf"^{FLAG} {path}: no complete encoder weights \(32 of 32 missing"):
        load_pretrained(make(BertModel), path, required=ENCODER_PARTS, flag=FLAG)


def test_partial_head_is_refused_even_when_not_required(tmp_path):
    state = arrays(make(BertForPretraining))
    del state["cls.transform_layer_norm.bias"]
    path = save(tmp_path, state)
    with pytest.raises(ValueError, match=rf"^{FLAG} {path}: incomplete mlm weights \(1 of 5 missing, e.g. "
                                         r"cls.transform_layer_norm.bias\)"):
        load_pretrained(make(BertForPretraining), path, required=ENCODER_PARTS, flag=FLAG)
    # The same file is fine for a model without the masked-LM head.
    report = load_pretrained(make(BertForSequenceClassification), path, required=ENCODER_PARTS, flag=FLAG)
    assert report.loaded == ["embeddings", "encoder", "pooler"] and report.initialised == ["classifier"]


def test_missing_file_and_unknown_part_are_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match=rf"^{FLAG} {tmp_path}: no weights in this folder: neither "
                                                rf"bert_paddle.pdparams nor bert_paddle.safetensors, .*; it holds "
                                                rf"nothing$"):
        load_pretrained(make(BertModel), tmp_path, required=ENCODER_PARTS, flag=FLAG)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "notes.txt").write_text("")
    with pytest.raises(FileNotFoundError, match=rf"^{FLAG} {tmp_path / 'run'}: no weights in this folder: neither "
                                                rf"ckpt.pdparams nor ckpt.safetensors, .*; it holds notes.txt$"):
        load_pretrained(make(BertModel), tmp_path / "run", required=ENCODER_PARTS, flag=FLAG, model_prefix="ckpt")
    with pytest.raises(FileNotFoundError, match=rf"^{FLAG} {tmp_path / 'absent.pdparams'}: weights file not found"):
        load_pretrained(make(BertModel), tmp_path / "absent.pdparams", required=ENCODER_PARTS, flag=FLAG)
    with pytest.raises(ValueError, match="unknown parts"):
        load_pretrained(make(BertModel), tmp_path, required=("encoder", "decoder"), flag=FLAG)
    damaged = tmp_path / "damaged.pdparams"
    damaged.write_bytes(b"not a pickle")
    with pytest.raises(ValueError, match=f"^{damaged}: not a readable Paddle pickle"):
        load_pretrained(make(BertModel), damaged, required=ENCODER_PARTS, flag=FLAG)


def qkv_of(state: dict, layer: int, kind: str) -> np.ndarray:
    """A layer's fused [H, 3H] weight (or [3H] bias), whichever layout the state holds."""
    prefix = f"bert.encoder.{layer}.attention."
    if prefix + f"qkv.{kind}" in state:
        return state[prefix + f"qkv.{kind}"]
    return np.concatenate([state[prefix + f"{part}.{kind}"] for part in ("query", "key", "value")], axis=-1)


@pytest.mark.parametrize("source_layout, target_layout", [((True, 8), (False, 1)), ((False, 1), (True, 8)),
                                                          ((True, 8), (True, 1))])
def test_fused_unfused_padded_unpadded_load_into_each_other(tmp_path, source_layout, target_layout):
    def config(layout):
        return dataclasses.replace(CONFIG, fuse_mha=layout[0], pad_vocab_size_multiple=layout[1])

    source = arrays(make(BertForPretraining, config(source_layout), seed=1))
    path = save(tmp_path, source)
    model = make(BertForPretraining, config(target_layout), seed=2)
    report = load_pretrained(model, path, required=ENCODER_PARTS, flag=FLAG)
    assert report.initialised == [] and report.unused == 0
    loaded = arrays(model)
    for layer in range(CONFIG.num_hidden_layers):
        for kind in ("weight", "bias"):
            assert np.array_equal(qkv_of(loaded, layer, kind), qkv_of(source, layer, kind))
    rows = config(target_layout).padded_vocab_size
    for name in ("bert.embeddings.word_embeddings.weight", "cls.decoder_bias"):
        assert loaded[name].shape[0] == rows
        assert np.array_equal(loaded[name][:29], source[name][:29])
        assert not loaded[name][29:].any()  # padding rows are zero: they never win a softmax
    for name in source:
        if ".attention." not in name and name not in ("bert.embeddings.word_embeddings.weight", "cls.decoder_bias"):
            assert np.array_equal(loaded[name], source[name]), name


def test_bare_encoder_state_loads_into_a_model_with_heads_and_back(tmp_path):
    encoder = arrays(make(BertModel, seed=1))
    assert "embeddings.word_embeddings.weight" in encoder  # no `bert.` prefix
    model = make(BertForQuestionAnswering, seed=2)
    report = load_pretrained(model, save(tmp_path, encoder), required=ENCODER_PARTS, flag=FLAG)
    assert report.loaded == ["embeddings", "encoder", "pooler"] and report.initialised == ["qa"]
    assert np.array_equal(model.bert.encoder[1].output.weight.numpy(), encoder["encoder.1.output.weight"])
    bare = make(BertModel, seed=3)
    assert load_state(bare, arrays(model), "qa") == ([], ["qa_outputs.bias", "qa_outputs.weight"])
    assert all(np.array_equal(value, encoder[name]) for name, value in arrays(bare).items())


def test_loading_into_float16_parameters_casts_to_float16(tmp_path):
    source = arrays(make(BertForPretraining, seed=1))
    model = make(BertForPretraining, seed=2)
    # Pure-fp16 (O2) emulation on CPU, where paddle.amp.decorate returns early: parameters in float16 except
    # the LayerNorms, which O2 keeps in float32.
    model.to(dtype="float16")
    for layer in model.sublayers():
        if isinstance(layer, paddle.nn.LayerNorm):
            layer.to(dtype="float32")
    dtypes = {name: parameter.dtype for name, parameter in model.named_parameters()}
    assert paddle.float16 in dtypes.values() and paddle.float32 in dtypes.values()
    load_pretrained(model, save(tmp_path, source), required=ENCODER_PARTS, flag=FLAG)
    for name, parameter in model.named_parameters():
        assert parameter.dtype == dtypes[name], name
        expected = source[name].astype(np.float16 if dtypes[name] == paddle.float16 else np.float32)
        assert np.array_equal(parameter.numpy(), expected), name


def test_float16_file_loads_into_float32_model(tmp_path):
    source = {name: value.astype(np.float16) for name, value in arrays(make(BertForPretraining, seed=1)).items()}
    model = make(BertForPretraining, seed=2)
    load_pretrained(model, save(tmp_path, source), required=ENCODER_PARTS, flag=FLAG)
    for name, parameter in model.named_parameters():
        assert parameter.dtype == paddle.float32
        assert np.array_equal(parameter.numpy(), source[name].astype(np.float32)), name


def test_wrong_shape_names_the_file_and_parameter(tmp_path):
    state = arrays(make(BertForPretraining))
    state["bert.encoder.0.intermediate.weight"] = np.zeros((8, 12), np.float32)
    path = save(tmp_path, state)
    with pytest.raises(ValueError, match=rf"^{path}: parameter bert.encoder.0.intermediate.weight has shape \[8, 12\]"):
        load_pretrained(make(BertForPretraining), path, required=ENCODER_PARTS, flag=FLAG)


def test_safetensors_file_or_folder_loads_like_the_pdparams(tmp_path):
    """--from-pretrained-params takes a .safetensors file, or a folder holding <prefix>.safetensors; a folder
    holding both reads the .pdparams. The values come from the source model itself."""
    source = make(BertForPretraining, seed=1)
    expected = arrays(source)
    shared = write_safetensors_weights(safetensors_beside(tmp_path / "only" / "bert_paddle.pdparams"),
                                       source.state_dict())
    assert shared == tmp_path / "only" / "bert_paddle.safetensors"
    for path in (shared, shared.parent):
        target = make(BertForPretraining, seed=2)
        report = load_pretrained(target, path, required=ENCODER_PARTS, flag=FLAG)
        assert report.path == str(shared) and report.initialised == []
        for name, value in arrays(target).items():
            assert value.tobytes() == expected[name].tobytes(), name
    both = tmp_path / "both"
    both.mkdir()
    save(both, make(BertForPretraining, seed=3).state_dict())
    write_safetensors_weights(both / "bert_paddle.safetensors", source.state_dict())
    assert load_pretrained(make(BertForPretraining), both, required=ENCODER_PARTS, flag=FLAG).path == str(
        both / "bert_paddle.pdparams")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
def test_safetensors_weights_of_every_floating_dtype_load(tmp_path, dtype):
    """The refusal of integer and non-finite tensors (load_state) lets every floating dtype through: the loaded
    weights are the file's, rounded as the cast to the file's dtype rounds them."""
    source = make(BertForPretraining, seed=1)
    state = {name: value.astype(dtype) for name, value in source.state_dict().items()}
    path = write_safetensors_weights(tmp_path / "bert_paddle.safetensors", state)
    target = make(BertForPretraining, seed=2)
    load_pretrained(target, path, required=ENCODER_PARTS, flag=FLAG)
    for name, value in arrays(target).items():
        expected = state[name].astype("float32").numpy()
        np.testing.assert_array_equal(value, expected, err_msg=name)
