"""run_pretraining.py --no-nsp: the masked-LM objective alone (RoBERTa), a model without the NSP head and the pooler,
its report, and fine-tuning from its checkpoints.

The gradient check compares the --no-nsp step with the masked-LM part of the two-task loss of a model with the same
weights, on the same batch, with dropout off. Shards made with lddl_preprocess.py --no-nsp train only with
--no-nsp: with NSP, the first batch is a one-line error naming the shard.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import paddle
import pytest

import lddl_preprocess
import run_glue
import run_pretraining
from conftest import require_shared
from fine_tuning_runs import logged
from loss import BertPretrainingCriterion
from modeling import BertConfig, BertForPretraining
from pretraining_dataset import PretrainingDataLoader
from pretraining_runs import (
    BINNED,
    DYNAMIC,
    UNBINNED,
    checkpoint_params,
    pretraining_argv,
    step_folder,
    step_numbers,
    step_records,
    train,
)
from utils import cli
from utils.dllog import read_report

NSP_PARTS = ("bert.pooler.", "cls.seq_relationship.")


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def first_batch(argv: list[str]) -> dict:
    args = run_pretraining.parse_args(argv)
    return next(iter(run_pretraining.build_loader(args, rank=0, world_size=1)))


def test_the_mlm_only_model_has_no_pooler_and_no_nsp_head():
    config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=16)
    both, mlm_only = BertForPretraining(config), BertForPretraining(config, nsp=False)
    both_names = {name for name, _ in both.named_parameters()}
    assert {name for name, _ in mlm_only.named_parameters()} == {
        name for name in both_names if not name.startswith(NSP_PARTS)}
    assert any(name.startswith("bert.pooler.") for name in both_names)
    input_ids = paddle.to_tensor(np.arange(8).reshape(2, 4) + 5)
    prediction_scores, seq_relationship_score = mlm_only(input_ids)
    assert prediction_scores.shape == [8, config.padded_vocab_size] and seq_relationship_score is None


def test_the_no_nsp_step_is_the_mlm_loss_and_its_gradient(tmp_path, monkeypatch):
    argv = pretraining_argv(tmp_path, "--no-nsp", dropout=0.0)
    trainer = run_pretraining.Trainer(run_pretraining.parse_args(argv), rank=0, world_size=1)
    batch = first_batch(argv)
    # The two-task model, with the --no-nsp model's weights (its pooler and NSP head keep their own).
    both = BertForPretraining(trainer.config)
    both.set_state_dict(trainer.model.state_dict() | {name: value for name, value in both.state_dict().items()
                                                      if name.startswith(NSP_PARTS)})
    micro_batch = trainer._micro_batch_tensors(batch)
    labels, next_sentence_labels = micro_batch.masked_lm_labels, micro_batch.next_sentence_labels
    scores = trainer.model(*micro_batch.inputs)[0].numpy()
    expected_loss = -log_softmax(scores)[np.arange(len(labels)), labels.numpy()].mean()

    gradients = {}

    def record_gradients():
        gradients.update({name: p.grad.numpy() for name, p in trainer.model.named_parameters()})
    monkeypatch.setattr(trainer.optimizer, "step", record_gradients)
    result, _ = trainer.step([batch])
    assert result.loss == result.mlm_loss == pytest.approx(expected_loss, rel=1e-6) and result.nsp_loss == 0.0

    def two_task_gradients(part: int) -> dict[str, np.ndarray]:
        """The gradients of the masked-LM (1) or NSP (2) part of the two-task loss (one forward each: the CPU
        kernels' PyLayers cannot run backward twice over one graph)."""
        both.clear_gradients()
        scores = both(*micro_batch.inputs)
        BertPretrainingCriterion()(*scores, labels, next_sentence_labels)[part].backward()
        return {name: p.grad.numpy() for name, p in both.named_parameters() if p.grad is not None}

    mlm_gradients = two_task_gradients(1)
    assert gradients.keys() == {name for name, _ in both.named_parameters() if not name.startswith(NSP_PARTS)}
    for name, gradient in gradients.items():
        np.testing.assert_allclose(gradient, mlm_gradients[name], rtol=0, atol=1e-6, err_msg=name)
    # The check can tell: the NSP part of the two-task loss moves the shared weights by far more than 1e-6.
    nsp_gradients = two_task_gradients(2)
    assert max(np.abs(nsp_gradients[name]).max() for name in gradients if name in nsp_gradients) > 1e-4


@pytest.mark.parametrize("packing", [[], ["--pack-sequences"]])
def test_a_no_nsp_run_reports_the_mlm_loss_and_saves_no_nsp_weights(tmp_path, packing):
    assert train(pretraining_argv(tmp_path, "--max-steps", "2", "--no-nsp", *packing, shards=DYNAMIC)) == 0
    records = step_records(tmp_path / "report.json")
    assert step_numbers(records) == [1, 2]
    for record in records:
        assert "nsp_loss" not in record["data"] and record["data"]["loss"] == record["data"]["mlm_loss"]
    saved = checkpoint_params(tmp_path / "out", 2)
    assert saved and not [name for name in saved if name.startswith(NSP_PARTS)]


def test_fine_tuning_from_a_no_nsp_checkpoint_starts_the_pooler_from_random(tmp_path, capsys):
    assert train(pretraining_argv(tmp_path, "--max-steps", "1", "--no-nsp")) == 0
    capsys.readouterr()
    mrpc = tmp_path / "mrpc.tsv"
    mrpc.write_bytes(b"\n".join(require_shared("data", "glue", "MRPC", "train.tsv").read_bytes().split(b"\n")[:9])
                     + b"\n")
    output_dir = tmp_path / "mrpc"
    run_glue.main([
        "--task-name", "mrpc", "--do-train", "--train-file", str(mrpc), "--max-steps", "1",
        "--vocab-file", str(require_shared("vocab", "bert-uncased-vocab.txt")), "--bert-model", "custom",
        "--config-file", str(tmp_path / "bert-test.json"), "--max-seq-length", "128", "--train-batch-size", "4",
        "--from-pretrained-params", str(step_folder(tmp_path / "out", 1)), "--output-dir", str(output_dir),
    ])
    assert ("loaded embeddings, encoder; pooler, classifier not in the file, starting from random "
            "initialisation") in capsys.readouterr().out
    assert logged(read_report(output_dir / "report.json"), "loss")
    assert (output_dir / "bert_paddle.pdparams").is_file()



@pytest.mark.parametrize("saved_with, resumed_with", [(["--no-nsp"], []), ([], ["--no-nsp"])])
def test_a_checkpoint_resumes_only_with_its_own_nsp_setting(tmp_path, saved_with, resumed_with):
    # Without the check, a resume would silently start the NSP head from random, or drop its trained weights.
    assert train(pretraining_argv(tmp_path, "--max-steps", "2", "--steps-this-run", "1", *saved_with)) == 0
    word = "with" if saved_with else "without"
    with pytest.raises(ValueError, match=f"phase1/1: saved {word} --no-nsp; resume with the same setting"):
        train(pretraining_argv(tmp_path, "--max-steps", "2", "--last-step-of-checkpoint", "auto", *resumed_with))


# ------------------------------------------------------------------------------------------------------------
# Single-segment shards need --no-nsp
# ------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def single_segment_shards(tmp_path_factory) -> Path:
    """lddl_preprocess.py --no-nsp shards of a fifth of the LDDL sample's source documents (dynamic masking)."""
    folder = tmp_path_factory.mktemp("single_segment") / "parquet"
    lddl_preprocess.main([
        "--input", str(require_shared("data", "lddl-sample", "wikitext2-test-source")),
        "--vocab-file", str(require_shared("vocab", "bert-uncased-vocab.txt")), "--output-dir", str(folder),
        "--no-nsp", "--no-masking", "--max-seq-length", "128", "--num-shards", "1", "--num-blocks", "1",
        "--num-workers", "1", "--sample-ratio", "0.2"])
    return folder


@pytest.mark.parametrize("num_workers", ["0", "2"])
def test_single_segment_shards_trained_with_nsp_are_a_one_line_error_naming_the_shard(
        tmp_path, capsys, single_segment_shards, num_workers):
    argv = pretraining_argv(tmp_path, "--max-steps", "1", "--num-workers", num_workers, shards=single_segment_shards)
    capsys.readouterr()
    assert cli.run_main(lambda: train(argv), "run_pretraining.py") == 1
    error = capsys.readouterr().err
    shard = re.escape(str(single_segment_shards / "shard-0.parquet"))
    assert re.fullmatch(rf"run_pretraining.py: {shard}: row \d+: segment B is empty, a single-segment sample "
                        r"\(lddl_preprocess.py --no-nsp\), and next-sentence prediction would learn its constant "
                        r"label; train with --no-nsp, or use shards of NSP pairs\n", error), error
    assert not (tmp_path / "out" / "custom" / "phase1" / "1").exists()


@pytest.mark.parametrize("num_workers", ["0", "2"])
def test_single_segment_shards_train_with_no_nsp(tmp_path, single_segment_shards, num_workers):
    argv = pretraining_argv(tmp_path, "--max-steps", "1", "--num-workers", num_workers, "--no-nsp",
                            shards=single_segment_shards)
    assert train(argv) == 0
    assert step_numbers(step_records(tmp_path / "report.json")) == [1]


def test_nsp_shards_train_with_nsp_through_the_workers(tmp_path):
    assert train(pretraining_argv(tmp_path, "--max-steps", "1", "--num-workers", "2", shards=DYNAMIC)) == 0
    [record] = step_records(tmp_path / "report.json")
    assert "nsp_loss" in record["data"]


def test_an_eval_dir_of_single_segment_shards_needs_no_nsp_too(tmp_path, capsys, single_segment_shards):
    argv = pretraining_argv(tmp_path, "--max-steps", "1", "--eval-dir", str(single_segment_shards), "--eval-freq", "1",
                            "--num-eval-batches", "1", shards=DYNAMIC)
    with pytest.raises(ValueError, match=re.escape(f"{single_segment_shards / 'shard-0.parquet'}: row ")):
        train(argv)
    assert train(argv + ["--no-nsp", "--output-dir", str(tmp_path / "mlm_only")]) == 0


@pytest.mark.parametrize("shards", [UNBINNED, BINNED, DYNAMIC], ids=["unbinned", "bin64", "dynamic"])
def test_every_sample_of_the_real_lddl_shards_has_a_segment_b(shards):
    """The guard relies on LDDL's NSP pairs always having a B: a whole epoch of NVIDIA LDDL 0.1.0's output passes."""
    loader = PretrainingDataLoader(str(require_shared(*shards)), str(require_shared("vocab", "bert-uncased-vocab.txt")),
                                   batch_size=512, max_seq_length=128, max_predictions_per_seq=20, seed=0, nsp=True)
    batches = [batch for _, batch in zip(range(loader.steps_per_epoch), loader, strict=False)]
    assert sum(len(batch["next_sentence_labels"]) for batch in batches) == loader.num_samples
    assert all((batch["token_type_ids"] == 1).any(axis=1).all() for batch in batches)
