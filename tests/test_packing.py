"""packing.py: first-fit-decreasing rows checked by hand, packed batches that give back every sample, and a packed
training step whose losses and gradients equal those of the same samples unpadded (Krell et al. 2021's claim of
no cross-contamination)."""

from __future__ import annotations

import numpy as np
import paddle
import pytest

import modeling
from conftest import require_shared
from data_fixtures import ragged_batch
from finetuning import finetune
from loss import IGNORE_INDEX, BertPretrainingCriterion
from preprocessing.packing import check_packable, first_fit_decreasing, pack_batch, padding_fraction
from pretraining_dataset import PretrainingDataLoader
from pretraining_runs import pretraining_argv, step_records, summaries, train

# A tiny model without dropout, so that a packed and an unpacked forward compute the same function.
NO_DROPOUT_CONFIG = modeling.BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                        intermediate_size=64, max_position_embeddings=32, hidden_dropout_prob=0.0,
                                        attention_probs_dropout_prob=0.0, initializer_range=0.2)


def test_first_fit_decreasing_by_hand():
    # Longest first: 7 opens row 0, 5 does not fit beside it (12 > 10) and opens row 1, 3 fills row 0 to 10,
    # 2 goes to row 1 (7).
    assert first_fit_decreasing([5, 3, 7, 2], 10) == [[2, 1], [0, 3]]
    # Equal lengths keep their batch order; each sample that fits nowhere opens a row.
    assert first_fit_decreasing([4, 4, 4], 8) == [[0, 1], [2]]
    assert first_fit_decreasing([6, 6, 6], 8) == [[0], [1], [2]]


def test_pack_batch_by_hand():
    batch = ragged_batch([5, 3, 7, 2], seq_length=8, vocab_size=50)
    packed = pack_batch(batch, max_seq_length=10)
    ids = batch["input_ids"]
    # Rows [sample 2 | sample 1] and [sample 0 | sample 3 | padding], 10 columns (16 after alignment, capped).
    expected_ids = np.array([list(ids[2, :7]) + list(ids[1, :3]),
                             list(ids[0, :5]) + list(ids[3, :2]) + [0, 0, 0]])
    np.testing.assert_array_equal(packed["input_ids"], expected_ids)
    np.testing.assert_array_equal(packed["position_ids"], [[0, 1, 2, 3, 4, 5, 6, 0, 1, 2],
                                                           [0, 1, 2, 3, 4, 0, 1, 0, 0, 0]])
    np.testing.assert_array_equal(packed["sample_ids"], [[2] * 7 + [1] * 3, [0] * 5 + [3] * 2 + [-1] * 3])
    np.testing.assert_array_equal(packed["attention_mask"], [[1] * 10, [1] * 7 + [0] * 3])
    np.testing.assert_array_equal(packed["cls_positions"], [10, 7, 0, 15])
    segments = batch["token_type_ids"]
    np.testing.assert_array_equal(packed["token_type_ids"][1], list(segments[0, :5]) + list(segments[3, :2]) + [0] * 3)
    labels = batch["masked_lm_labels"]
    np.testing.assert_array_equal(packed["masked_lm_labels"][0], list(labels[2, :7]) + list(labels[1, :3]))
    np.testing.assert_array_equal(packed["masked_lm_labels"][1, 7:], IGNORE_INDEX)
    np.testing.assert_array_equal(packed["next_sentence_labels"], batch["next_sentence_labels"])


def test_rows_are_as_long_as_the_longest_one_rounded_to_the_loaders_alignment():
    packed = pack_batch(ragged_batch([5, 3, 2], seq_length=8, vocab_size=50), max_seq_length=512)
    assert packed["input_ids"].shape == (1, 16)  # 10 tokens, rounded up to a multiple of 8


def test_check_packable_refuses_only_when_no_bin_holds_two_samples_that_fit():
    # Unbinned: the shortest two come from two files (65 and 70); 135 > 128.
    with pytest.raises(ValueError, match=r"^wide: --pack-sequences cannot pack these samples: the shortest two have "
                                         r"65 and 70 tokens, together more than --max-seq-length 128, so no two "
                                         r"samples share a row; drop --pack-sequences$"):
        check_packable({"": [np.array([70, 80]), np.array([65])]}, 128, 4, "wide")
    # Two bins, neither packs: the closer one (bin 2: 66 + 67 < bin 3: 97 + 98) is named, the other listed.
    with pytest.raises(ValueError, match=r"the shortest two of bin 2 have 66 and 67 tokens, together more than "
                                         r"--max-seq-length 128, and no other bin \(3\) has two that fit, so no two "
                                         r"samples share a row; drop --pack-sequences$"):
        check_packable({"bin 2": [np.array([90, 67, 66])], "bin 3": [np.array([97, 98])]}, 128, 4, "bins")
    with pytest.raises(ValueError, match="no bin holds two samples"):
        check_packable({"bin 1": [np.array([70])], "bin 2": [np.array([100])]}, 128, 4, "one-each")
    # Exactly a row: 64 + 64 = 128 packs, as first_fit_decreasing would put them together.
    check_packable({"": [np.array([64, 100]), np.array([64])]}, 128, 4, "fits")
    assert first_fit_decreasing([64, 100, 64], 128) == [[1], [0, 2]]


def test_check_packable_refuses_micro_batches_of_one_sample():
    with pytest.raises(ValueError, match=r"^--batch-size 1: --pack-sequences packs the samples of one micro-batch"):
        check_packable({"": [np.array([10, 20])]}, 128, 1, "short")
    check_packable({"": [np.array([10, 20])]}, 128, 2, "short")


def test_check_packable_stops_at_the_first_bin_that_packs():
    def files():
        yield np.array([10, 100])  # 10 + 100 fit in 128
        raise AssertionError("read a file after the bin was known to pack")

    check_packable({"bin 0": files(), "bin 1": (np.array([100, 120]) for _ in range(1))}, 128, 4, "lazy")


def test_bad_batches_are_refused():
    batch = ragged_batch([5, 3], seq_length=8, vocab_size=50)
    with pytest.raises(ValueError, match="sample 0 has 5 tokens, more than max_seq_length 4"):
        pack_batch(batch, max_seq_length=4)
    batch["attention_mask"][1, 0] = 0  # padding before a token
    with pytest.raises(ValueError, match="attention_mask: packing needs every row's tokens first"):
        pack_batch(batch, max_seq_length=16)


def test_padding_fraction_counts_padding_slots():
    batch = ragged_batch([5, 3, 7, 2], seq_length=8, vocab_size=50)
    assert padding_fraction(batch) == pytest.approx(1 - 17 / 32)
    assert padding_fraction(pack_batch(batch, max_seq_length=10)) == pytest.approx(1 - 17 / 20)


def test_packed_real_batches_hold_every_sample_unchanged():
    loader = PretrainingDataLoader(str(require_shared("data", "lddl-sample", "wikitext2-test-seq128-bin64")),
                                   str(require_shared("vocab", "bert-uncased-vocab.txt")), batch_size=16,
                                   max_seq_length=128, max_predictions_per_seq=20, seed=1, num_workers=0)
    batches = iter(loader)
    fewer_rows = 0
    for _ in range(8):
        batch = next(batches)
        packed = pack_batch(batch, max_seq_length=128)
        lengths = batch["attention_mask"].sum(1)
        assert packed["attention_mask"].sum() == lengths.sum()
        for name in ("input_ids", "token_type_ids", "masked_lm_labels"):
            flat = packed[name].reshape(-1)
            for sample, length in enumerate(lengths):
                start = packed["cls_positions"][sample]
                np.testing.assert_array_equal(flat[start:start + length], batch[name][sample, :length], err_msg=name)
        fewer_rows += len(packed["input_ids"]) < len(batch["input_ids"])
        assert padding_fraction(packed) <= padding_fraction(batch)
    assert fewer_rows > 0  # the short-sample bin packs several samples per row


def loss_and_gradients(model: modeling.BertForPretraining, batch: dict) -> tuple[list[float], dict]:
    """(loss, mlm, nsp) of one forward over a batch (packed, if it has sample_ids) and the gradients."""
    labels = batch["masked_lm_labels"].reshape(-1)
    positions = np.flatnonzero(labels != IGNORE_INDEX)
    layout = ({name: paddle.to_tensor(batch[name]) for name in ("position_ids", "sample_ids", "cls_positions")}
              if "sample_ids" in batch else {"attention_mask": paddle.to_tensor(batch["attention_mask"])})
    scores, nsp_scores = model(paddle.to_tensor(batch["input_ids"]), paddle.to_tensor(batch["token_type_ids"]),
                               masked_lm_positions=paddle.to_tensor(positions), **layout)
    losses = BertPretrainingCriterion()(scores, nsp_scores, paddle.to_tensor(labels[positions]),
                                        paddle.to_tensor(batch["next_sentence_labels"]))
    losses[0].backward()
    gradients = {name: parameter.grad.numpy().copy() for name, parameter in model.named_parameters()}
    model.clear_gradients()
    return [float(loss) for loss in losses], gradients


@pytest.mark.parametrize("use_cpu_kernels", [True, False])
def test_packed_step_has_the_losses_and_gradients_of_the_unpacked_one(use_cpu_kernels):
    paddle.seed(7)
    model = modeling.BertForPretraining(NO_DROPOUT_CONFIG, use_cpu_kernels)
    batch = ragged_batch([9, 4, 12, 7, 3, 10, 5], seq_length=16, vocab_size=99, seed=3)
    packed = pack_batch(batch, max_seq_length=16)
    assert len(packed["input_ids"]) == 4  # 7 samples in 4 rows: the samples share rows
    unpacked_losses, unpacked_gradients = loss_and_gradients(model, batch)
    packed_losses, packed_gradients = loss_and_gradients(model, packed)
    np.testing.assert_allclose(packed_losses, unpacked_losses, atol=1e-5)
    for name, gradient in unpacked_gradients.items():
        np.testing.assert_allclose(packed_gradients[name], gradient, atol=1e-5, err_msg=name)
    assert max(np.abs(g).max() for g in unpacked_gradients.values()) > 1e-2  # the gradients are not all tiny


def test_packed_run_trains_on_the_same_samples_with_the_same_first_loss(tmp_path):
    """run_pretraining.py --pack-sequences end to end (dropout 0): the first step's loss is the unpacked run's,
    and the report's padding fraction falls."""
    runs = {}
    for name, extra in (("unpacked", ()), ("packed", ("--pack-sequences",))):
        folder = tmp_path / name
        folder.mkdir()
        argv = pretraining_argv(folder, "--max-steps", "3", "--batch-size", "16", *extra, dropout=0.0)
        assert train(argv) == 0
        runs[name] = ([record["data"]["loss"] for record in step_records(folder / "report.json")],
                      summaries(folder / "report.json")[0]["padding_fraction"])
    (unpacked_losses, unpacked_padding), (packed_losses, packed_padding) = runs["unpacked"], runs["packed"]
    assert len(packed_losses) == len(unpacked_losses) == 3
    assert packed_losses[0] == pytest.approx(unpacked_losses[0], abs=1e-5)
    np.testing.assert_allclose(packed_losses, unpacked_losses, atol=1e-4)
    assert 0.0 <= packed_padding < unpacked_padding


def fine_tuning_batch(lengths: list[int], seq_length: int, vocab_size: int, seed: int = 0) -> dict[str, np.ndarray]:
    """A batch as run_glue.py collates it: ragged_batch's tokens without the pretraining labels, and labels [B]."""
    batch = ragged_batch(lengths, seq_length, vocab_size, seed)
    del batch["masked_lm_labels"], batch["next_sentence_labels"]
    batch["labels"] = np.arange(len(lengths)) % 3
    return batch


def test_a_fine_tuning_batch_packs_its_tokens_and_keeps_its_labels_in_batch_order():
    batch = fine_tuning_batch([5, 3, 7, 2], seq_length=8, vocab_size=50)
    packed = pack_batch(batch, max_seq_length=10)
    # The rows of test_pack_batch_by_hand: [sample 2 | sample 1] and [sample 0 | sample 3 | padding].
    assert sorted(packed) == ["attention_mask", "cls_positions", "input_ids", "labels", "position_ids", "sample_ids",
                              "token_type_ids"]
    ids = batch["input_ids"]
    np.testing.assert_array_equal(packed["input_ids"], [list(ids[2, :7]) + list(ids[1, :3]),
                                                        list(ids[0, :5]) + list(ids[3, :2]) + [0, 0, 0]])
    np.testing.assert_array_equal(packed["cls_positions"], [10, 7, 0, 15])
    np.testing.assert_array_equal(packed["labels"], [0, 1, 2, 0])  # per sample: untouched, in batch order


@pytest.mark.parametrize("use_cpu_kernels", [True, False])
def test_packed_classification_has_the_logits_and_gradients_of_the_unpacked_batch(use_cpu_kernels):
    paddle.seed(11)
    model = modeling.BertForSequenceClassification(NO_DROPOUT_CONFIG, num_labels=3, use_cpu_kernels=use_cpu_kernels)
    batch = fine_tuning_batch([9, 4, 12, 7, 3, 10, 5], seq_length=16, vocab_size=99, seed=5)
    packed = pack_batch(batch, max_seq_length=16)
    assert len(packed["input_ids"]) == 4  # 7 samples in 4 rows
    results = []
    for layout in (batch, packed):
        logits = model(*finetune.model_inputs(layout))
        loss = paddle.nn.functional.cross_entropy(logits, paddle.to_tensor(layout["labels"]))
        loss.backward()
        results.append((logits.numpy(), {name: p.grad.numpy().copy() for name, p in model.named_parameters()}))
        model.clear_gradients()
    (logits, gradients), (packed_logits, packed_gradients) = results
    assert logits.shape == packed_logits.shape == (7, 3)
    np.testing.assert_allclose(packed_logits, logits, atol=1e-5)
    for name, gradient in gradients.items():
        np.testing.assert_allclose(packed_gradients[name], gradient, atol=1e-5, err_msg=name)
    assert max(np.abs(g).max() for g in gradients.values()) > 1e-2


def test_a_packed_batch_counts_its_samples_not_its_rows():
    # gradient_merge weighs each micro-batch's mean loss by its sequences: a packed batch's are its samples.
    batch = fine_tuning_batch([9, 4, 12, 7, 3], seq_length=16, vocab_size=99)
    packed = pack_batch(batch, max_seq_length=16)
    assert len(packed["input_ids"]) < 5
    assert finetune._sequences(packed) == finetune._sequences(batch) == (5,)
