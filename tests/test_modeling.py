"""modeling.py against a NumPy transcription of the BERT equations, known parameter counts and layouts."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import paddle
import pytest

import modeling
from checkpoints.weights import load_state
from conftest import ROOT
from data_fixtures import ragged_batch
from loss import BertPretrainingCriterion
from numpy_bert import numpy_encoder, numpy_pooler
from preprocessing.packing import pack_batch

CONFIG_DIR = ROOT / "bert_configs"


def tiny_config(**overrides) -> modeling.BertConfig:
    values = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=64, max_position_embeddings=64, hidden_dropout_prob=0.0,
                  attention_probs_dropout_prob=0.0)
    values.update(overrides)
    return modeling.BertConfig(**values)


def numpy_bert(params: dict, config: modeling.BertConfig, input_ids, token_type_ids, attention_mask):
    """The sequence and pooled outputs of BertModel from the NumPy equations (numpy_bert.py)."""
    sequence_output = numpy_encoder(params, config, input_ids, token_type_ids, attention_mask)
    return sequence_output, numpy_pooler(params, sequence_output)


def random_batch(config, batch=3, seq=10, seed=0):
    rng = np.random.default_rng(seed)
    input_ids = rng.integers(0, config.vocab_size, (batch, seq))
    token_type_ids = (np.arange(seq)[None] >= seq // 2).astype(np.int64).repeat(batch, 0)
    attention_mask = np.ones((batch, seq), np.int64)
    attention_mask[1, 7:] = 0  # one padded row
    return input_ids, token_type_ids, attention_mask


def run_model(model, input_ids, token_type_ids, attention_mask):
    model.eval()
    outputs = model(paddle.to_tensor(input_ids), paddle.to_tensor(token_type_ids), paddle.to_tensor(attention_mask))
    return [o.numpy() for o in outputs]


@pytest.mark.parametrize("use_cpu_kernels", [True, False])
def test_bert_model_matches_numpy_equations(use_cpu_kernels):
    paddle.seed(1)
    # A wide initialisation gives activations large enough that erf and tanh GELU differ visibly.
    config = tiny_config(initializer_range=0.3)
    model = modeling.BertModel(config, use_cpu_kernels)
    params = {k: v.numpy().astype(np.float64) for k, v in model.state_dict().items()}
    batch = random_batch(config)
    sequence_output, pooled_output = run_model(model, *batch)
    expected_sequence, expected_pooled = numpy_bert(params, config, *batch)
    valid = batch[2].astype(bool)
    np.testing.assert_allclose(sequence_output[valid], expected_sequence[valid], atol=2e-5)
    np.testing.assert_allclose(pooled_output, expected_pooled, atol=2e-5)


FLASH_BLOCK_ROWS = 128  # kBlockM of the fork's forward kernels for head dim 64


def flash_mask_as_read(mask: np.ndarray, batch: int, heads: int, seq_q: int) -> np.ndarray:
    """The [B, N, S_q, S_k] scores bias that PaddlePaddle/flash-attention's kernel reads from a [B, H_m, R, S_k]
    mask (flash_fwd_kernel.h: row_offset_mask, then a tile of 128 query rows with row stride S_k): query row i of
    head h reads flat row (b * H_m + h % H_m) * R + (i0 % R) + (i - i0), i0 = i rounded down to the tile. A read
    past the mask's end is an illegal memory access."""
    mask_heads, mask_rows, seq_k = mask.shape[1:]
    flat = mask.reshape(-1, seq_k)
    rows = np.empty((batch, heads, seq_q), np.int64)
    for b, h, i in np.ndindex(batch, heads, seq_q):
        tile_start = i // FLASH_BLOCK_ROWS * FLASH_BLOCK_ROWS
        rows[b, h, i] = (b * mask_heads + h % mask_heads) * mask_rows + tile_start % mask_rows + (i - tile_start)
    if rows.max() >= len(flat):
        raise RuntimeError(f"flash attention: illegal memory access reading a {list(mask.shape)} mask")
    return flat[rows]


def stand_in_sdpa(backend: str, received: list):
    """F.scaled_dot_product_attention as Paddle 3.3 runs it in `backend` on a GPU: the mask handling of
    paddle/nn/functional/sdpa.py, then each kernel's own rules on the mask, then the plain math on the mask as the
    kernel reads it. Each call appends to `received` (mask as passed, bytes sdpa.py copied it into). Under
    emulated autocast the query would be in autocast's dtype on a GPU; here it stays fp32, so the mask's dtype
    is checked against autocast's."""

    def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, training=True):
        batch, seq_q, heads, head_dim = query.shape
        seq_k = key.shape[1]
        kernel_dtype = paddle.get_autocast_dtype() if paddle.is_autocast_enabled() else query.dtype
        kernel_dtype = str(kernel_dtype).removeprefix("paddle.")
        passed, copied = attn_mask, 0
        if attn_mask is not None and attn_mask.dtype == paddle.bool:  # sdpa.py turns a bool mask additive
            attn_mask = paddle.where(attn_mask, paddle.zeros([], query.dtype), paddle.full([], -np.inf, query.dtype))
        bias = None
        if attn_mask is not None and backend == "flash_attn":
            # flash_attn_utils.h (4-D, the query's dtype) and the fork's CHECK_FWD_EXECTUABLE (capi/flash_attn.cu).
            assert attn_mask.ndim == 4 and str(attn_mask.dtype).removeprefix("paddle.") == kernel_dtype, attn_mask
            b, h, r, k = attn_mask.shape
            assert b == batch and h in (1, heads) and r in (1, seq_q) and k == seq_k, attn_mask.shape
            bias = paddle.to_tensor(flash_mask_as_read(attn_mask.astype("float32").numpy(), batch, heads, seq_q))
        if attn_mask is not None and backend == "mem_efficient":
            assert attn_mask.shape[-1] % 8 == 0  # else sdpa.py's check_attn_mask_alignment picks another backend
            if attn_mask.ndim == 4 and attn_mask.shape[0] != 1 and attn_mask.shape[1] != heads:  # as sdpa.py does
                attn_mask = attn_mask.expand([attn_mask.shape[0], heads, attn_mask.shape[2], attn_mask.shape[3]])
                copied = attn_mask.numel().item() * attn_mask.element_size()
            # memory_efficient_attention_utils.h: [S_q, S_k], or [B, N, S_q, S_k] / [1, 1, S_q, S_k].
            assert str(attn_mask.dtype).removeprefix("paddle.") == kernel_dtype, attn_mask.dtype
            assert list(attn_mask.shape[-2:]) == [seq_q, seq_k], attn_mask.shape
            assert attn_mask.ndim == 2 or list(attn_mask.shape[:2]) in ([batch, heads], [1, 1]), attn_mask.shape
            bias = attn_mask
        if attn_mask is not None and backend == "math":
            bias = attn_mask  # _math_attention adds it to the [B, N, S_q, S_k] scores, broadcasting
        received.append((passed, copied))
        q, k, v = (t.transpose([0, 2, 1, 3]) for t in (query, key, value))  # [B, N, S, D]
        scores = paddle.matmul(q, k, transpose_y=True) / np.sqrt(head_dim)
        if bias is not None:
            scores = scores + bias.astype(scores.dtype)
        return paddle.matmul(paddle.nn.functional.softmax(scores), v).transpose([0, 2, 1, 3])

    return sdpa


def emulate_cuda_build(monkeypatch, backend: str, amp_dtype: str | None = None) -> None:
    """A CUDA build of Paddle; for flash attention an SM 8.0+ GPU under float16 autocast (the dtype the model
    sizes its mask by; the stand-in computes in fp32)."""
    monkeypatch.setattr(paddle, "is_compiled_with_cuda", lambda: backend != "math")
    monkeypatch.setattr(modeling, "varlen_attention_available", lambda: backend == "flash_attn")
    if amp_dtype is not None:
        monkeypatch.setattr(paddle, "is_autocast_enabled", lambda: True)
        monkeypatch.setattr(paddle, "get_autocast_dtype", lambda: amp_dtype)


@pytest.mark.parametrize("backend", ["flash_attn", "mem_efficient", "math"])
def test_attention_mask_suits_every_sdpa_backend(backend, monkeypatch):
    paddle.seed(1)
    config = tiny_config(initializer_range=0.3)
    emulate_cuda_build(monkeypatch, backend, "float16" if backend == "flash_attn" else None)
    model = modeling.BertModel(config, use_cpu_kernels=False)
    params = {k: v.numpy().astype(np.float64) for k, v in model.state_dict().items()}
    batch = random_batch(config, seq=16)  # a multiple of 8: memory-efficient attention is eligible in fp32
    received = []
    monkeypatch.setattr(paddle.nn.functional, "scaled_dot_product_attention", stand_in_sdpa(backend, received))
    sequence_output, pooled_output = run_model(model, *batch)
    expected_sequence, expected_pooled = numpy_bert(params, config, *batch)
    valid = batch[2].astype(bool)
    np.testing.assert_allclose(sequence_output[valid], expected_sequence[valid], atol=2e-5)
    np.testing.assert_allclose(pooled_output, expected_pooled, atol=2e-5)
    assert len(received) == config.num_hidden_layers


def mask_traffic(backend: str, monkeypatch, old_layout: bool) -> tuple[list[int], int, int]:
    """(mask shape SDPA gets, bytes of masks built per forward, bytes copied inside SDPA per layer) for a
    forward pass of the tiny model on [3, 16] rows; old_layout sizes the mask as before this change
    ([B, 1, S, S] for every GPU backend)."""
    config = tiny_config()
    emulate_cuda_build(monkeypatch, backend, "float16" if backend == "flash_attn" else None)
    model = modeling.BertModel(config, use_cpu_kernels=False)
    if old_layout:
        monkeypatch.setattr(modeling, "attention_bias", lambda mask, heads, rows, dtype: paddle.expand(
            paddle.where(mask != 0, 0.0, -np.inf).astype(dtype).reshape([3, 1, 1, 16]), [3, 1, 16, 16]))
    received = []
    monkeypatch.setattr(paddle.nn.functional, "scaled_dot_product_attention", stand_in_sdpa(backend, received))
    run_model(model, *random_batch(config, seq=16))
    masks = {id(mask): mask.numel().item() * mask.element_size() for mask, _ in received}
    copied = {copy for _, copy in received}
    assert len(received) == config.num_hidden_layers and len(copied) == 1
    return list(received[0][0].shape), sum(masks.values()), copied.pop()


def test_memory_efficient_attention_gets_its_mask_once_not_once_per_layer(monkeypatch):
    """fp32/tf32 on a GPU runs memory-efficient attention, which takes a padding bias only as [B, N, S, S]:
    given [B, 1, S, S], sdpa.py made that copy in every layer (kept for the backward pass). At the tf32
    phase-2 preset (B 16, N 16, S 512, 24 layers) that is 256 MiB per layer, 6 GiB per step; now one 256 MiB
    mask serves all layers. The tiny model here: B 3, N 4, S 16, fp32."""
    full = 3 * 4 * 16 * 16 * 4  # bytes of one [B, N, S, S] fp32 mask
    assert mask_traffic("mem_efficient", monkeypatch, old_layout=True) == ([3, 1, 16, 16], 3 * 16 * 16 * 4, full)
    monkeypatch.undo()
    assert mask_traffic("mem_efficient", monkeypatch, old_layout=False) == ([3, 4, 16, 16], full, 0)


def test_flash_attention_gets_per_query_rows_and_the_math_backend_one_row(monkeypatch):
    """Flash attention reads a [B, 1, S, S] mask without a copy; a [B, 1, 1, S] one would be read as other
    sequences' rows (flash_mask_as_read), so it keeps S rows. The math backend, the only one without a CUDA
    build, broadcasts [B, 1, 1, S], a view of the [B, S] padding: 16 times fewer bytes here."""
    assert mask_traffic("flash_attn", monkeypatch, old_layout=False) == ([3, 1, 16, 16], 3 * 16 * 16 * 2, 0)
    monkeypatch.undo()
    assert mask_traffic("math", monkeypatch, old_layout=False) == ([3, 1, 1, 16], 3 * 16 * 4, 0)
    with pytest.raises(RuntimeError, match="illegal memory access"):  # query row i of sequence b reads row b + i
        flash_mask_as_read(np.zeros((3, 1, 1, 16), np.float32), batch=3, heads=4, seq_q=16)


def stand_in_flash_attn_unpadded(calls: list):
    """flash_attn_unpadded as Paddle 3.3 declares it (paddle/nn/functional/flash_attention.py), its argument contract
    enforced (3-D [total tokens, N, D] float16/bfloat16 inputs, int32 cumulative cu_seqlens ending at the total,
    max_seqlen bounding every length), then the plain math in float32, each sample on its own."""

    def flash_attn_unpadded(query, key, value, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale,
                            dropout=0.0, causal=False, return_softmax=False, fixed_seed_offset=None, rng_name="",
                            training=True, name=None):
        total, heads, head_dim = query.shape
        assert query.dtype in (paddle.float16, paddle.bfloat16), query.dtype
        assert key.dtype == value.dtype == query.dtype and key.shape == value.shape == query.shape
        assert cu_seqlens_q.dtype == cu_seqlens_k.dtype == paddle.int32
        cumulative = cu_seqlens_q.numpy()
        np.testing.assert_array_equal(cu_seqlens_k.numpy(), cumulative)
        lengths = np.diff(cumulative)
        assert cumulative[0] == 0 and cumulative[-1] == total and lengths.min() > 0, cumulative
        assert isinstance(max_seqlen_q, int) and max_seqlen_q == max_seqlen_k >= lengths.max()
        assert scale == pytest.approx(1 / math.sqrt(head_dim)) and not causal and not return_softmax
        calls.append(lengths)
        q, k, v = (t.astype("float32").transpose([1, 0, 2]) for t in (query, key, value))  # [N, T, D]
        contexts = []
        for start, end in zip(cumulative[:-1], cumulative[1:], strict=True):
            scores = paddle.matmul(q[:, start:end], k[:, start:end], transpose_y=True) * scale
            contexts.append(paddle.matmul(paddle.nn.functional.softmax(scores), v[:, start:end]))
        return paddle.concat(contexts, axis=1).transpose([1, 0, 2]).astype(query.dtype), None

    return flash_attn_unpadded


@pytest.mark.parametrize("amp_dtype", [None, "float16", "bfloat16"])
def test_packed_rows_use_varlen_flash_attention_on_a_gpu_under_amp_only(amp_dtype, monkeypatch):
    """On a GPU (emulated: the device check and, for AMP, autocast's state) packed rows go through
    flash_attn_unpadded in float16/bfloat16 and through the block-diagonal mask in fp32; either way each sample
    comes out as it does alone in a padded row."""
    calls = []
    monkeypatch.setattr(modeling, "varlen_attention_available", lambda: True)
    monkeypatch.setattr(paddle.nn.functional.flash_attention, "flash_attn_unpadded",
                        stand_in_flash_attn_unpadded(calls))
    paddle.seed(8)
    config = tiny_config(initializer_range=0.3)
    model = modeling.BertModel(config, use_cpu_kernels=False)
    model.eval()
    batch = ragged_batch([9, 4, 12, 7, 3], seq_length=16, vocab_size=config.vocab_size, seed=2)
    padded_sequence, padded_pooled = run_model(model, batch["input_ids"], batch["token_type_ids"],
                                               batch["attention_mask"])
    packed = pack_batch(batch, max_seq_length=16)
    if amp_dtype is not None:
        monkeypatch.setattr(paddle, "is_autocast_enabled", lambda: True)
        monkeypatch.setattr(paddle, "get_autocast_dtype", lambda: amp_dtype)
    sequence, pooled = (output.numpy() for output in model(
        paddle.to_tensor(packed["input_ids"]), paddle.to_tensor(packed["token_type_ids"]),
        position_ids=paddle.to_tensor(packed["position_ids"]), sample_ids=paddle.to_tensor(packed["sample_ids"]),
        cls_positions=paddle.to_tensor(packed["cls_positions"])))
    if amp_dtype is None:
        assert calls == []
    else:
        starts = (packed["position_ids"] == 0) & (packed["sample_ids"] >= 0)
        in_row_order = packed["sample_ids"][starts]  # each row's samples, left to right
        assert len(calls) == config.num_hidden_layers
        for lengths in calls:
            np.testing.assert_array_equal(lengths, batch["attention_mask"].sum(1)[in_row_order])
    tolerance = {None: 2e-5, "float16": 5e-3, "bfloat16": 4e-2}[amp_dtype]  # q, k, v rounded to 11 or 8 bits
    flat = sequence.reshape(-1, config.hidden_size)
    for sample, length in enumerate(batch["attention_mask"].sum(1)):
        start = packed["cls_positions"][sample]
        np.testing.assert_allclose(flat[start:start + length], padded_sequence[sample, :length], atol=tolerance)
    np.testing.assert_allclose(pooled, padded_pooled, atol=tolerance)


@pytest.mark.parametrize("use_cpu_kernels", [True, False])
def test_packed_rows_give_each_sample_its_padded_outputs(use_cpu_kernels):
    paddle.seed(9)
    config = tiny_config(initializer_range=0.3)
    model = modeling.BertForPretraining(config, use_cpu_kernels)
    model.eval()
    batch = ragged_batch([9, 4, 12, 7, 3, 10], seq_length=16, vocab_size=config.vocab_size, seed=4)
    packed = pack_batch(batch, max_seq_length=16)
    flat_positions = [int(packed["cls_positions"][sample]) + 2 for sample in range(6)]  # each sample's 3rd token
    scores, nsp = model(paddle.to_tensor(packed["input_ids"]), paddle.to_tensor(packed["token_type_ids"]),
                        masked_lm_positions=paddle.to_tensor(flat_positions),
                        position_ids=paddle.to_tensor(packed["position_ids"]),
                        sample_ids=paddle.to_tensor(packed["sample_ids"]),
                        cls_positions=paddle.to_tensor(packed["cls_positions"]))
    assert nsp.shape == [6, 2]  # one NSP pair per sample, in batch order
    padded_scores, padded_nsp = model(*(paddle.to_tensor(batch[name]) for name in
                                        ("input_ids", "token_type_ids", "attention_mask")),
                                      paddle.to_tensor(np.arange(6) * 16 + 2))
    np.testing.assert_allclose(scores.numpy(), padded_scores.numpy(), atol=2e-5)
    np.testing.assert_allclose(nsp.numpy(), padded_nsp.numpy(), atol=2e-5)
    with pytest.raises(ValueError, match="attention_mask .* or sample_ids"):
        model(paddle.to_tensor(packed["input_ids"]), attention_mask=paddle.to_tensor(packed["attention_mask"]),
              sample_ids=paddle.to_tensor(packed["sample_ids"]))


def test_padding_does_not_change_real_tokens():
    paddle.seed(2)
    config = tiny_config()
    model = modeling.BertModel(config)
    input_ids, token_type_ids, attention_mask = random_batch(config)
    first = run_model(model, input_ids, token_type_ids, attention_mask)[0]
    input_ids[1, 7:] = 5  # change only the padding tokens
    second = run_model(model, input_ids, token_type_ids, attention_mask)[0]
    np.testing.assert_allclose(first[1, :7], second[1, :7], atol=1e-6)
    assert np.abs(first[1, 7:] - second[1, 7:]).max() > 1e-3


def test_fused_and_unfused_layouts_load_into_each_other():
    paddle.seed(3)
    unfused = modeling.BertForPretraining(tiny_config())
    fused = modeling.BertForPretraining(tiny_config(fuse_mha=True))
    assert "bert.encoder.0.attention.qkv.weight" in fused.state_dict()
    missing, unexpected = load_state(fused, unfused.state_dict(), "unfused")
    assert (missing, unexpected) == ([], [])
    batch = random_batch(unfused.config)
    for a, b in zip(run_model(unfused, *batch), run_model(fused, *batch), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)
    back = modeling.BertForPretraining(tiny_config())
    load_state(back, fused.state_dict(), "fused")
    for name, value in unfused.state_dict().items():
        np.testing.assert_array_equal(value.numpy(), back.state_dict()[name].numpy(), err_msg=name)


def test_vocab_padding_rounds_up_and_loads_unpadded_weights():
    config = tiny_config(pad_vocab_size_multiple=8)
    assert config.padded_vocab_size == 104
    padded = modeling.BertForPretraining(config)
    assert padded.bert.embeddings.word_embeddings.weight.shape == [104, 32]
    assert padded.cls.decoder_bias.shape == [104]
    unpadded = modeling.BertForPretraining(tiny_config())
    load_state(padded, unpadded.state_dict(), "unpadded")
    table = padded.bert.embeddings.word_embeddings.weight.numpy()
    np.testing.assert_array_equal(table[:99], unpadded.bert.embeddings.word_embeddings.weight.numpy())
    np.testing.assert_array_equal(table[99:], 0)


def test_mlm_head_scores_only_masked_positions_with_tied_decoder():
    paddle.seed(4)
    config = tiny_config()
    model = modeling.BertForPretraining(config)
    model.eval()
    input_ids, token_type_ids, attention_mask = (paddle.to_tensor(a) for a in random_batch(config))
    positions = paddle.to_tensor([3, 12, 25], dtype="int64")
    gathered, nsp = model(input_ids, token_type_ids, attention_mask, positions)
    full, _ = model(input_ids, token_type_ids, attention_mask)
    assert gathered.shape == [3, config.vocab_size] and nsp.shape == [3, 2]
    np.testing.assert_allclose(gathered.numpy(), full.numpy()[[3, 12, 25]], atol=1e-5)
    # The decoder is the word-embedding table: moving one row moves that vocabulary score.
    sequence_output, _ = model.bert(input_ids, token_type_ids, attention_mask)
    head = model.cls
    hidden = head.transform_layer_norm(head.activation(head.transform(sequence_output.reshape([-1, 32]))))
    expected = hidden.numpy() @ model.bert.embeddings.word_embeddings.weight.numpy().T + head.decoder_bias.numpy()
    np.testing.assert_allclose(full.numpy(), expected, atol=1e-5)


def test_initialisation_follows_initializer_range():
    paddle.seed(5)
    model = modeling.BertModel(tiny_config(hidden_size=128, intermediate_size=512, initializer_range=0.05))
    weight = model.encoder[0].intermediate.weight.numpy()
    assert abs(weight.std() - 0.05) < 0.003 and abs(weight.mean()) < 0.003
    assert np.all(model.encoder[0].intermediate.bias.numpy() == 0)
    assert np.all(model.encoder[0].output_layer_norm.weight.numpy() == 1)


@pytest.mark.parametrize(
    ("name", "expected"),
    # BertModel sizes as published for Google's checkpoints (Hugging Face reports the same counts).
    [("bert-base-uncased", 109_482_240), ("bert-large-uncased", 335_141_888), ("bert-base-cased", 108_310_272)],
)
def test_standard_configs_have_published_parameter_counts(name, expected):
    config = modeling.BertConfig.from_json_file(str(CONFIG_DIR / f"{name}.json"))
    with paddle.LazyGuard():
        model = modeling.BertModel(config)
    assert modeling.count_parameters(model) == expected


def test_every_config_file_loads():
    files = sorted(CONFIG_DIR.glob("*.json"))
    assert {f.stem for f in files} >= {"bert-base-uncased", "bert-base-cased", "bert-large-uncased",
                                       "bert-large-cased", "bert-tiny-uncased", "bert-mini-uncased",
                                       "bert-small-uncased"}
    for path in files:
        config = modeling.BertConfig.from_json_file(str(path))
        assert config.to_dict() == {**modeling.BertConfig().to_dict(), **json.loads(path.read_text())}


def test_bad_config_errors_name_the_file(tmp_path: Path):
    bad_key = tmp_path / "typo.json"
    bad_key.write_text(json.dumps({"hiden_size": 12}))
    with pytest.raises(ValueError, match="typo.json.*hiden_size"):
        modeling.BertConfig.from_json_file(str(bad_key))
    heads = tmp_path / "heads.json"
    heads.write_text(json.dumps({"hidden_size": 10, "num_attention_heads": 3}))
    with pytest.raises(ValueError, match="heads.json.*multiple"):
        modeling.BertConfig.from_json_file(str(heads))
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(ValueError, match="broken.json"):
        modeling.BertConfig.from_json_file(str(broken))
    with pytest.raises(FileNotFoundError, match="missing.json"):
        modeling.BertConfig.from_json_file(str(tmp_path / "missing.json"))


def test_question_answering_and_classification_heads_shapes():
    config = tiny_config()
    batch = random_batch(config)
    start, end = run_model(modeling.BertForQuestionAnswering(config), *batch)
    assert start.shape == end.shape == (3, 10)
    (logits,) = [run_model(modeling.BertForSequenceClassification(config, num_labels=3), *batch)]
    assert np.asarray(logits).shape == (3, 3)


def test_tiny_pretraining_loss_falls_on_a_fixed_batch():
    paddle.seed(6)
    config = modeling.BertConfig.from_json_file(str(CONFIG_DIR / "bert-tiny-uncased.json"))
    model = modeling.BertForPretraining(config)
    criterion = BertPretrainingCriterion()
    optimizer = paddle.optimizer.AdamW(learning_rate=1e-3, parameters=model.parameters())
    rng = np.random.default_rng(0)
    input_ids = paddle.to_tensor(rng.integers(1000, 2000, (4, 32)))
    positions = paddle.to_tensor(np.sort(rng.choice(4 * 32, 20, replace=False)))
    labels = paddle.to_tensor(rng.integers(1000, 2000, 20))
    nsp_labels = paddle.to_tensor([0, 1, 0, 1])
    losses = []
    for _ in range(30):
        scores, nsp = model(input_ids, masked_lm_positions=positions)
        loss, _, _ = criterion(scores, nsp, labels, nsp_labels)
        loss.backward()
        optimizer.step()
        optimizer.clear_grad()
        losses.append(float(loss))
    assert losses[0] > math.log(config.vocab_size) - 1
    assert losses[-1] < 0.5 * losses[0]
