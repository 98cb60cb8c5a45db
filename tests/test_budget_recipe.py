"""The budget-recipe options of run_pretraining.py (issue 43): pre-LayerNorm blocks, bias-free linear layers,
gated-GELU feed-forward, ALiBi's attention bias and --no-dropout.

The layers are checked against the equations written out in NumPy: pre-LayerNorm as Xiong et al. 2020
(arXiv:2002.04745) define it, x + f(LN(x)) with a LayerNorm after the last block, and the gated feed-forward as
Shazeer 2020 (arXiv:2002.05202), GELU(x W) * (x V) W2. The architecture options travel in the checkpoint's config, so
that fine-tuning builds the network that was trained, and every path that cannot build it refuses in one line:
resuming or starting from weights under other settings, paddle2hf, and the transformers peer of the yardstick.
"""

from __future__ import annotations

import dataclasses
import sys

import numpy as np
import paddle
import pytest

import convert_checkpoint
import modeling
from bert_config import BertConfig
from checkpoints.weights import load_pretrained, model_config_file
from conftest import ROOT
from messages import assert_one_line
from numpy_bert import numpy_encoder
from pretraining_runs import checkpoint_params, pretraining_argv, step_folder, step_records, train

sys.path.insert(0, str(ROOT / "benchmarks"))
import time_to_quality  # noqa: E402

RECIPES = {
    "pre-LN": {"pre_layer_norm": True},
    "bias-free": {"linear_bias": False},
    "gated": {"gated_feed_forward": True},
    "ALiBi": {"alibi": True},
    "all four": {"pre_layer_norm": True, "linear_bias": False, "gated_feed_forward": True, "alibi": True},
}


def small_config(**overrides) -> BertConfig:
    values = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
                  max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                  initializer_range=0.3)
    return BertConfig(**{**values, **overrides})


@pytest.mark.parametrize("use_cpu_kernels", [True, False])
@pytest.mark.parametrize("recipe", list(RECIPES))
def test_each_recipe_option_computes_its_equations(recipe, use_cpu_kernels):
    paddle.seed(3)
    config = small_config(**RECIPES[recipe])
    model = modeling.BertModel(config, use_cpu_kernels)
    model.eval()
    state = {name: value.numpy().astype(np.float64) for name, value in model.state_dict().items()}
    # LayerNorm gains and biases start at 1 and 0; random ones make a skipped or misplaced LayerNorm visible.
    rng = np.random.default_rng(0)
    for name, value in model.state_dict().items():
        if "layer_norm" in name:
            state[name] = rng.normal(1.0 if name.endswith("weight") else 0.0, 0.3, value.shape)
            value.set_value(state[name].astype(np.float32))
    input_ids = rng.integers(0, config.vocab_size, (2, 9))
    token_type_ids = (np.arange(9)[None] >= 5).astype(np.int64).repeat(2, 0)
    attention_mask = np.ones((2, 9), np.int64)
    attention_mask[1, 6:] = 0
    output, _ = model(*(paddle.to_tensor(array) for array in (input_ids, token_type_ids, attention_mask)))
    expected = numpy_encoder(state, config, input_ids, token_type_ids, attention_mask)
    valid = attention_mask.astype(bool)
    np.testing.assert_allclose(output.numpy()[valid], expected[valid], atol=5e-5)
    for name in ("pre_layer_norm", "alibi"):  # the same weights without the option compute something else
        if getattr(config, name):
            without = numpy_encoder(state, dataclasses.replace(config, **{name: False}), input_ids, token_type_ids,
                                    attention_mask)
            assert np.abs(without[valid] - expected[valid]).max() > 1e-2


@pytest.mark.parametrize("use_cpu_kernels", [True, False])
def test_alibi_without_a_mask_and_in_packed_rows_is_each_samples_own(use_cpu_kernels):
    """With no attention_mask ALiBi still biases the scores (no padding is not no bias), and a packed row's samples
    are biased by their distances within the sample: each equals the sample encoded alone."""
    paddle.seed(5)
    config = small_config(alibi=True)
    model = modeling.BertModel(config, use_cpu_kernels)
    model.eval()
    state = {name: value.numpy().astype(np.float64) for name, value in model.state_dict().items()}
    rng = np.random.default_rng(1)
    first, second = rng.integers(0, config.vocab_size, (1, 5)), rng.integers(0, config.vocab_size, (1, 4))
    alone = [numpy_encoder(state, config, ids, np.zeros_like(ids), np.ones_like(ids))[0] for ids in (first, second)]
    unmasked, _ = model(paddle.to_tensor(first))
    np.testing.assert_allclose(unmasked.numpy()[0], alone[0], atol=5e-5)
    packed_ids = np.concatenate([first, second, [[0]]], axis=1)  # [1, 10]: two samples and one padding slot
    sample_ids = np.array([[0] * 5 + [1] * 4 + [-1]])
    position_ids = np.array([[0, 1, 2, 3, 4, 0, 1, 2, 3, 0]])
    packed, _ = model(paddle.to_tensor(packed_ids), paddle.zeros([1, 10], "int64"),
                      position_ids=paddle.to_tensor(position_ids), sample_ids=paddle.to_tensor(sample_ids))
    np.testing.assert_allclose(packed.numpy()[0, :5], alone[0], atol=5e-5)
    np.testing.assert_allclose(packed.numpy()[0, 5:9], alone[1], atol=5e-5)


def test_the_options_change_exactly_the_parameters_they_name():
    plain = dict(modeling.BertModel(small_config()).named_parameters())
    shapes = {name: list(value.shape) for name, value in plain.items()}
    bias_free = {name: list(value.shape) for name, value in
                 modeling.BertModel(small_config(linear_bias=False)).named_parameters()}
    dropped = sorted(set(shapes) - set(bias_free))
    assert dropped == sorted(f"encoder.{i}.{linear}.bias" for i in range(2)
                             for linear in ("attention.query", "attention.key", "attention.value",
                                            "attention_output", "intermediate", "output"))
    gated = {name: list(value.shape) for name, value in
             modeling.BertModel(small_config(gated_feed_forward=True)).named_parameters()}
    assert {name for name in gated if gated[name] != shapes[name]} == {
        f"encoder.{i}.intermediate.{part}" for i in range(2) for part in ("weight", "bias")}
    assert gated["encoder.0.intermediate.weight"] == [32, 96]
    pre = {name for name, _ in modeling.BertModel(small_config(pre_layer_norm=True)).named_parameters()}
    assert pre - set(shapes) == {"final_layer_norm.weight", "final_layer_norm.bias"}


def test_a_config_file_with_a_non_boolean_option_names_it(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"pre_layer_norm": "yes"}')
    with pytest.raises(ValueError) as raised:
        BertConfig.from_json_file(path)
    assert_one_line(str(raised.value), str(path), "pre_layer_norm", "'yes'")


# ------------------------------------------------------------------------------------------------------------
# run_pretraining.py's flags
# ------------------------------------------------------------------------------------------------------------

ALL_FLAGS = ("--pre-layer-norm", "--no-linear-bias", "--gated-feed-forward")


def first_losses(tmp_path, name: str, *extra: str, dropout: float) -> list[float]:
    folder = tmp_path / name
    folder.mkdir()
    assert train(pretraining_argv(folder, "--max-steps", "2", "--seed", "7", *extra, dropout=dropout)) == 0
    return [record["data"]["loss"] for record in step_records(folder / "report.json")]


def test_no_dropout_trains_as_a_dropout_free_config_and_saves_the_files_dropout(tmp_path):
    without_flag = first_losses(tmp_path, "dropout", dropout=0.1)
    flag = first_losses(tmp_path, "flag", "--no-dropout", dropout=0.1)
    zero = first_losses(tmp_path, "zero", dropout=0.0)
    assert flag == zero  # the same weights, data and seed: only dropout could differ
    assert without_flag[0] != flag[0]
    saved = BertConfig.from_json_file(step_folder(tmp_path / "flag" / "out", 2) / "bert_paddle_config.json")
    assert (saved.hidden_dropout_prob, saved.attention_probs_dropout_prob) == (0.1, 0.1)  # fine-tuning's dropout


def test_architecture_flags_travel_to_fine_tuning_and_load_whole(tmp_path):
    assert train(pretraining_argv(tmp_path, "--max-steps", "1", *ALL_FLAGS)) == 0
    folder = step_folder(tmp_path / "out", 1)
    saved = checkpoint_params(tmp_path / "out", 1)
    assert "bert.final_layer_norm.weight" in saved and "bert.encoder.0.intermediate.bias" not in saved
    assert list(saved["bert.encoder.0.intermediate.weight"].shape) == [32, 128]
    config_file = model_config_file("custom", None, str(folder), flag="--init-checkpoint", model_prefix="bert_paddle")
    config = BertConfig.from_json_file(config_file)
    assert (config.pre_layer_norm, config.linear_bias, config.gated_feed_forward) == (True, False, True)
    model = modeling.BertForSequenceClassification(config, num_labels=2)
    report = load_pretrained(model, str(folder), required=("embeddings", "encoder"), flag="--init-checkpoint")
    assert report.loaded == ["embeddings", "encoder", "pooler"] and report.missing == ["classifier.bias",
                                                                                   "classifier.weight"]
    assert report.unused == len([name for name in saved if name.startswith("cls.")])  # the pretraining heads
    # The plain config beside it would build another network from the same file: refused, naming the field.
    with pytest.raises(ValueError) as raised:
        model_config_file("custom", str(tmp_path / "bert-test.json"), str(folder), flag="--init-checkpoint",
                          model_prefix="bert_paddle")
    assert_one_line(str(raised.value), "--config-file", "pre_layer_norm", "--init-checkpoint")


def test_a_resume_or_a_start_under_other_architecture_flags_is_refused(tmp_path):
    assert train(pretraining_argv(tmp_path, "--max-steps", "2", "--steps-this-run", "1", "--pre-layer-norm")) == 0
    with pytest.raises(ValueError) as raised:
        train(pretraining_argv(tmp_path, "--max-steps", "2", "--last-step-of-checkpoint", "auto"))
    assert_one_line(str(raised.value), "resuming from", "phase1/1", "pre_layer_norm")
    other = tmp_path / "other"
    other.mkdir()
    with pytest.raises(ValueError) as raised:
        train(pretraining_argv(other, "--max-steps", "1", "--gated-feed-forward", "--pre-layer-norm",
                               "--from-pretrained-params", str(step_folder(tmp_path / "out", 1))))
    assert_one_line(str(raised.value), "--from-pretrained-params", "gated_feed_forward")
    # The same flags resume.
    assert train(pretraining_argv(tmp_path, "--max-steps", "2", "--last-step-of-checkpoint", "auto",
                                  "--pre-layer-norm")) == 0


def test_paddle2hf_refuses_a_recipe_checkpoint_in_one_line(tmp_path):
    assert train(pretraining_argv(tmp_path, "--max-steps", "1", "--no-linear-bias")) == 0
    folder = step_folder(tmp_path / "out", 1)
    with pytest.raises(SystemExit) as raised:
        convert_checkpoint.main(["paddle2hf", str(folder / "bert_paddle.pdparams"),
                                 str(folder / "bert_paddle_config.json"), str(tmp_path / "hf")])
    assert_one_line(str(raised.value), "", "bert_paddle_config.json", "linear_bias", "transformers")
    assert not (tmp_path / "hf").exists()


@pytest.mark.parametrize("flag", time_to_quality.RECIPE_FLAGS)
def test_the_transformers_peer_refuses_to_copy_a_recipe_run(flag):
    options = {"gradient_merge_steps": 1, **dict.fromkeys(time_to_quality.RECIPE_FLAGS, False)}
    assert time_to_quality.peer_mismatch(options) is None
    assert "--" + flag.replace("_", "-") in time_to_quality.peer_mismatch({**options, flag: True})
    assert "gradient merge" in time_to_quality.peer_mismatch({**options, "gradient_merge_steps": 4})
    # Every name is one of run_pretraining.py's options, so that the report's PARAMETER record has it.
    import run_pretraining

    destinations = {action.dest for action in run_pretraining.build_parser()._actions}
    assert flag in destinations


def test_an_alibi_model_exports_to_paddle_inference_and_onnx_computing_the_same(tmp_path):
    """The distance bias is built from the input's shape inside the program, so both exports (any batch and
    sequence length) give the dygraph model's span logits, padding included."""
    import onnxruntime

    from inference import inference

    paddle.seed(1)
    model = modeling.BertForQuestionAnswering(small_config(alibi=True))
    model.eval()
    rng = np.random.default_rng(0)
    input_ids = rng.integers(0, 99, (2, 11))
    token_type_ids = (np.arange(11)[None] >= 6).astype(np.int64).repeat(2, 0)
    attention_mask = np.ones_like(input_ids)
    attention_mask[1, 8:] = 0
    inputs = (input_ids, token_type_ids, attention_mask)
    expected = [logits.numpy() for logits in model(*(paddle.to_tensor(array) for array in inputs))]
    without_bias = modeling.BertForQuestionAnswering(small_config())
    without_bias.set_state_dict(model.state_dict())
    without_bias.eval()
    assert np.abs(without_bias(*(paddle.to_tensor(array) for array in inputs))[0].numpy() - expected[0]).max() > 1e-3
    inference.export_inference_model(model, str(tmp_path), "qa")
    predicted = inference.inference_predictor(str(tmp_path), "qa", 1)(*inputs)
    onnx_file = inference.export_onnx_model(model, str(tmp_path / "qa"))
    session = onnxruntime.InferenceSession(onnx_file)
    from_onnx = session.run(None, dict(zip(("input_ids", "token_type_ids", "attention_mask"), inputs, strict=True)))
    for outputs in (predicted, from_onnx):
        for got, want in zip(outputs, expected, strict=True):
            np.testing.assert_allclose(got, want, atol=1e-5)
