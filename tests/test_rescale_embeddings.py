"""--rescale-embeddings: run_glue.py and run_squad.py scale the loaded word, position and segment tables by one
factor so that the word table's root mean square is the config's initializer_range; the classifier computes what
it computed before, and without the flag the tables are the file's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import paddle
import pytest

import run_glue
from bert_config import BertConfig
from conftest import ROOT
from finetuning import finetune
from modeling import BertForPretraining, BertForSequenceClassification
from training.amp import AmpPolicy
from utils.dllog import DLLogger

VOCAB = ROOT / "vocab" / "bert-large-uncased-vocab.txt"
CONFIG = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                    max_position_embeddings=128, pad_vocab_size_multiple=8)
TABLES = [f"bert.embeddings.{name}.weight" for name in ("word_embeddings", "position_embeddings",
                                                         "token_type_embeddings")]
GROWTH = 12.0  # about what an hour of LAMB does to bert-tiny's word table (0.02 -> 0.25)


@pytest.fixture(scope="module")
def grown_weights(tmp_path_factory) -> tuple[Path, dict[str, np.ndarray]]:
    """A pretraining state whose embedding tables are GROWTH times their initial size, each grown by its own
    factor (as LAMB's per-tensor steps grow them), saved as a .pdparams file."""
    paddle.seed(5)
    state = BertForPretraining(CONFIG).state_dict()
    arrays = {name: tensor.numpy() for name, tensor in state.items()}
    for growth, name in zip((GROWTH, 3.0, 9.0), TABLES, strict=True):
        arrays[name] = arrays[name] * growth
    path = tmp_path_factory.mktemp("weights") / "grown.pdparams"
    paddle.save({name: paddle.to_tensor(array) for name, array in arrays.items()}, str(path))
    (path.parent / "grown_config.json").write_text(CONFIG.to_json_string())
    return path, arrays


def classifier(weights: Path, tmp_path: Path, *flags: str) -> paddle.nn.Layer:
    argv = ["--task-name", "mrpc", "--vocab-file", str(VOCAB), "--bert-model", "custom", "--do-train",
            "--train-file", str(ROOT / "README.md"), "--output-dir", str(tmp_path / "out"),
            "--from-pretrained-params", str(weights), *flags]
    args = run_glue.parse_args(argv)
    session = finetune.Session(rank=0, world_size=1, num_threads=1, logger=DLLogger(None, enabled=False),
                               tokenizer=None, policy=AmpPolicy())
    model = finetune.build_model(args, lambda config: BertForSequenceClassification(config, 2), session)
    model.eval()
    return model


def test_the_word_table_comes_back_to_the_initial_scale_and_the_function_stays(grown_weights, tmp_path):
    path, arrays = grown_weights
    plain = classifier(path, tmp_path)
    rescaled = classifier(path, tmp_path, "--rescale-embeddings", "true")
    words = arrays[TABLES[0]][:CONFIG.vocab_size].astype(np.float64)  # the padding rows are no word's
    factor = CONFIG.initializer_range / np.sqrt(np.mean(words ** 2))
    state = rescaled.state_dict()
    for name in TABLES:
        np.testing.assert_allclose(state[name].numpy(), arrays[name] * factor, rtol=1e-5, atol=1e-9)
    word = state[TABLES[0]].numpy()[:CONFIG.vocab_size].astype(np.float64)
    assert np.sqrt(np.mean(word ** 2)) == pytest.approx(CONFIG.initializer_range, rel=1e-5)
    rng = np.random.default_rng(0)
    input_ids = paddle.to_tensor(rng.integers(0, CONFIG.vocab_size, (3, 16)))
    token_type_ids = paddle.to_tensor(np.repeat([[0] * 8 + [1] * 8], 3, axis=0))
    mask = paddle.ones([3, 16], dtype="int64")
    expected = plain(input_ids, token_type_ids, mask).numpy()
    np.testing.assert_allclose(rescaled(input_ids, token_type_ids, mask).numpy(), expected, rtol=1e-4, atol=1e-5)


def test_without_the_flag_the_tables_are_the_files(grown_weights, tmp_path):
    path, arrays = grown_weights
    state = classifier(path, tmp_path).state_dict()
    for name in TABLES:
        np.testing.assert_array_equal(state[name].numpy(), arrays[name])
