"""The BERT model in Paddle: the encoder and the task heads, built from a bert_config.BertConfig.

One sample's way through the model:

    input_ids [B, S] --BertEmbeddings--> [B, S, H] --BertLayer x L--> sequence_output [B, S, H]
                                                                   \\--BertPooler--> pooled_output [B, H]

and then a head: BertPretrainingHeads (masked-LM + next-sentence, or masked-LM alone without the pooler),
a span head for SQuAD, or a classifier for GLUE. The architecture follows Devlin et al. 2019 (arXiv:1810.04805) and
Google's reference implementation: post-LayerNorm residual blocks, exact (erf) GELU, weights
drawn from N(0, initializer_range). BertConfig's budget-recipe fields (pre_layer_norm, linear_bias,
gated_feed_forward, alibi) change the encoder layers, as run_pretraining.py's flags of the same names ask.

A packed batch (packing.py) holds several samples per row: then position_ids restart for each sample, attention
is block-diagonal over `sample_ids`, and the pooler reads each sample's [CLS] at `cls_positions`, so pooled_output
is [number of samples, H].

Every model chooses once, when it is built, between two sets of layers (`use_cpu_kernels`, default: whether
Paddle's current device is a CPU): cpu_kernels.py's Linear, LayerNorm, Dropout, attention core and exact
GELU (LayerNorm and GELU through the cpu_ops extension where it builds), which compute the same functions with
kernels that are faster on a CPU, or Paddle's own layers and scaled_dot_product_attention (flash attention on
a GPU). Exported programs need Paddle's own ops: `standard_copy` gives the model with those.

Shapes in comments use B = batch, S = sequence length, H = hidden size, N = attention heads,
D = H / N, V = (padded) vocabulary size, M = number of masked positions in the batch, T = real (non-padding)
tokens of packed rows.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import paddle
import paddle.nn as nn
import paddle.nn.functional as F
from paddle.nn.functional import flash_attention

from bert_config import BertConfig
from kernels import cpu_kernels

# Each name bert_config.ACTIVATIONS accepts.
ACTIVATIONS = {
    "gelu": lambda x: F.gelu(x, approximate=False),
    "gelu_new": lambda x: F.gelu(x, approximate=True),
    "relu": F.relu,
}


def activation(name: str, use_cpu_kernels: bool) -> Callable[[paddle.Tensor], paddle.Tensor]:
    """ACTIVATIONS[name]; on the CPU path exact GELU is cpu_kernels.exact_gelu."""
    return cpu_kernels.exact_gelu() if use_cpu_kernels and name == "gelu" else ACTIVATIONS[name]


def choose_cpu_kernels(use_cpu_kernels: bool | None) -> bool:
    """The model's choice of layers: as given, or for None whether Paddle's current device is a CPU."""
    return paddle.get_device() == "cpu" if use_cpu_kernels is None else use_cpu_kernels


def layer_classes(use_cpu_kernels: bool) -> tuple[type[nn.Linear], type[nn.LayerNorm], type[nn.Dropout]]:
    """The Linear, LayerNorm and Dropout classes a model is built from: cpu_kernels' or Paddle's own.

    Both have the same parameters under the same names, so weights and checkpoints move between them.
    """
    if use_cpu_kernels:
        return cpu_kernels.Linear, cpu_kernels.LayerNorm, cpu_kernels.Dropout
    return nn.Linear, nn.LayerNorm, nn.Dropout


class BertEmbeddings(nn.Layer):
    """Sum of word, position and segment embeddings, then LayerNorm and dropout."""

    def __init__(self, config: BertConfig, use_cpu_kernels: bool):
        super().__init__()
        _, LayerNorm, Dropout = layer_classes(use_cpu_kernels)
        self.word_embeddings = nn.Embedding(config.padded_vocab_size, config.hidden_size)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.layer_norm = LayerNorm(config.hidden_size, epsilon=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids: paddle.Tensor, token_type_ids: paddle.Tensor,
                position_ids: paddle.Tensor | None = None) -> paddle.Tensor:
        if position_ids is None:
            position_ids = paddle.arange(input_ids.shape[1], dtype="int64").unsqueeze(0)  # [1, S]
        embeddings = (
            self.word_embeddings(input_ids)
            + self.position_embeddings(position_ids)
            + self.token_type_embeddings(token_type_ids)
        )  # [B, S, H]
        return self.dropout(self.layer_norm(embeddings))

    def rescale(self, word_rms: float, vocab_size: int) -> float:
        """Scale the word, position and segment tables by one factor, so that the root mean square of the word
        table's first `vocab_size` rows (the padding rows are no word's) becomes `word_rms`; return the factor.

        The LayerNorm over their sum makes the output the same (to its epsilon): only the tables' size changes, and
        with it how far AdamW's steps, whose size does not depend on the weights', move them relative to it.
        """
        with paddle.no_grad():
            word = self.word_embeddings.weight[:vocab_size].astype("float64")  # float32 sums drift by 1e-4
            factor = word_rms / float(paddle.sqrt(paddle.mean(paddle.square(word))))
            for table in (self.word_embeddings, self.position_embeddings, self.token_type_embeddings):
                table.weight.set_value(table.weight * factor)
        return factor


class BertSelfAttention(nn.Layer):
    """Multi-head self-attention: scaled_dot_product_attention (flash attention on a GPU), or the same function
    through cpu_kernels.attention, or for packed rows on a GPU under AMP variable-length flash attention."""

    def __init__(self, config: BertConfig, use_cpu_kernels: bool):
        super().__init__()
        Linear, _, _ = layer_classes(use_cpu_kernels)
        self.use_cpu_kernels = use_cpu_kernels
        hidden = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_dim = hidden // self.num_heads
        self.fuse_mha = config.fuse_mha
        bias = None if config.linear_bias else False  # Paddle's bias_attr: None = a bias, False = none
        if self.fuse_mha:
            # Columns are [query | key | value]: the unfused matrices side by side, which is what
            # convert_qkv_layout relies on.
            self.qkv = Linear(hidden, 3 * hidden, bias_attr=bias)
        else:
            self.query = Linear(hidden, hidden, bias_attr=bias)
            self.key = Linear(hidden, hidden, bias_attr=bias)
            self.value = Linear(hidden, hidden, bias_attr=bias)
        self.dropout_prob = config.attention_probs_dropout_prob

    def forward(self, hidden_states: paddle.Tensor, attention_mask: paddle.Tensor | UnpaddedTokens | None
                ) -> paddle.Tensor:
        if self.use_cpu_kernels:
            # Heads moved by whole rows into [B, N, S, D] and back (cpu_kernels.attention says why).
            if self.fuse_mha:
                query, key, value = cpu_kernels.split_heads(self.qkv(hidden_states), 3, self.num_heads).unbind(0)
            else:
                query, key, value = (
                    cpu_kernels.split_heads(projection(hidden_states), 1, self.num_heads).squeeze(0)
                    for projection in (self.query, self.key, self.value)
                )  # each [B, N, S, D]
            context = cpu_kernels.attention(query, key, value, attention_mask, self.dropout_prob, self.training)
            return cpu_kernels.merge_heads(context)  # [B, S, H]
        batch, seq_length = hidden_states.shape[0], hidden_states.shape[1]
        head_shape = [batch, seq_length, self.num_heads, self.head_dim]
        if self.fuse_mha:
            qkv = self.qkv(hidden_states).reshape([batch, seq_length, 3, self.num_heads, self.head_dim])
            query, key, value = qkv.unbind(axis=2)  # each [B, S, N, D]
        else:
            query = self.query(hidden_states).reshape(head_shape)
            key = self.key(hidden_states).reshape(head_shape)
            value = self.value(hidden_states).reshape(head_shape)
        dropout_p = self.dropout_prob if self.training else 0.0
        if isinstance(attention_mask, UnpaddedTokens):
            context = attention_mask.attention(query, key, value, dropout_p, self.training)  # [B, S, N, D]
        else:
            context = F.scaled_dot_product_attention(
                query, key, value, attn_mask=attention_mask, dropout_p=dropout_p, training=self.training,
            )  # [B, S, N, D]
        return context.reshape([batch, seq_length, self.num_heads * self.head_dim])


class BertLayer(nn.Layer):
    """One transformer block: attention, add & norm, feed-forward, add & norm (post-LayerNorm, Devlin et al.), or
    with config.pre_layer_norm x + f(LN(x)) for each of the two (the model then normalises the last output)."""

    def __init__(self, config: BertConfig, use_cpu_kernels: bool):
        super().__init__()
        Linear, LayerNorm, Dropout = layer_classes(use_cpu_kernels)
        bias = None if config.linear_bias else False  # Paddle's bias_attr: None = a bias, False = none
        self.pre_layer_norm = config.pre_layer_norm
        self.gated_feed_forward = config.gated_feed_forward
        self.attention = BertSelfAttention(config, use_cpu_kernels)
        self.attention_output = Linear(config.hidden_size, config.hidden_size, bias_attr=bias)
        self.attention_layer_norm = LayerNorm(config.hidden_size, epsilon=config.encoder_eps)
        intermediate_columns = config.intermediate_size * (2 if config.gated_feed_forward else 1)
        self.intermediate = Linear(config.hidden_size, intermediate_columns, bias_attr=bias)
        self.output = Linear(config.intermediate_size, config.hidden_size, bias_attr=bias)
        self.output_layer_norm = LayerNorm(config.hidden_size, epsilon=config.encoder_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)
        self.activation = activation(config.hidden_act, use_cpu_kernels)

    def forward(self, hidden_states: paddle.Tensor, attention_mask: paddle.Tensor | UnpaddedTokens | None
                ) -> paddle.Tensor:
        if self.pre_layer_norm:
            attention = self.attention_output(self.attention(self.attention_layer_norm(hidden_states), attention_mask))
            hidden_states = hidden_states + self.dropout(attention)
            return hidden_states + self.dropout(self._feed_forward(self.output_layer_norm(hidden_states)))
        attention = self.attention_output(self.attention(hidden_states, attention_mask))
        hidden_states = self.attention_layer_norm(hidden_states + self.dropout(attention))
        return self.output_layer_norm(hidden_states + self.dropout(self._feed_forward(hidden_states)))

    def _feed_forward(self, hidden_states: paddle.Tensor) -> paddle.Tensor:
        """[B, S, H] -> [B, S, H]: act(x W1) W2, or gated act(x W_gate) * (x W_up) W2."""
        intermediate = self.intermediate(hidden_states)  # [B, S, I], gated [B, S, 2I]
        if self.gated_feed_forward:
            gate, up = intermediate.chunk(2, axis=-1)  # each [B, S, I]
            return self.output(self.activation(gate) * up)
        return self.output(self.activation(intermediate))


class BertPooler(nn.Layer):
    """tanh(W h_[CLS] + b): the sentence representation used by NSP and classifiers."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, sequence_output: paddle.Tensor, cls_positions: paddle.Tensor | None = None) -> paddle.Tensor:
        """[B, S, H] -> [B, H] from each row's first token, or [number of samples, H] from the flat [B*S] token
        indices cls_positions (packed rows)."""
        if cls_positions is None:
            return paddle.tanh(self.dense(sequence_output[:, 0]))
        tokens = sequence_output.reshape([-1, sequence_output.shape[-1]])  # [B*S, H]
        return paddle.tanh(self.dense(paddle.gather(tokens, cls_positions)))


def init_bert_weights(layer: nn.Layer, initializer_range: float) -> None:
    """N(0, initializer_range) for matrices and embeddings, zero biases, unit LayerNorm gains."""
    normal = nn.initializer.Normal(mean=0.0, std=initializer_range)
    for sublayer in layer.sublayers(include_self=True):
        if isinstance(sublayer, (nn.Linear, nn.Embedding)):
            normal(sublayer.weight)
        if isinstance(sublayer, nn.Linear) and sublayer.bias is not None:
            nn.initializer.Constant(0.0)(sublayer.bias)
        if isinstance(sublayer, nn.LayerNorm):
            nn.initializer.Constant(1.0)(sublayer.weight)
            nn.initializer.Constant(0.0)(sublayer.bias)


def attention_bias(attention_mask: paddle.Tensor | None, heads: int, query_rows: int, dtype: str | paddle.dtype
                   ) -> paddle.Tensor | None:
    """[B, S] with 1 = token, 0 = padding  ->  additive [B, heads, query_rows, S] in `dtype` (query_rows 1 or S):
    0 where a key may be attended to, -inf for a padding key (every row keeps its real tokens, so no softmax row
    is all -inf). [B, 1, 1, S] is a view of the [B, S] values; any other shape is one materialised copy."""
    if attention_mask is None:
        return None
    batch, seq_length = attention_mask.shape
    # Built in fp32 and cast: [B, S] values, and Paddle's CPU build has no float16 `where`.
    keys = paddle.where(attention_mask != 0, paddle.zeros([], "float32"), paddle.full([], -math.inf, "float32"))
    keys = keys.astype(dtype).reshape([batch, 1, 1, seq_length])
    if heads == 1 and query_rows == 1:
        return keys
    return paddle.expand(keys, [batch, heads, query_rows, seq_length])


def block_diagonal_bias(sample_ids: paddle.Tensor, heads: int, dtype: str | paddle.dtype) -> paddle.Tensor:
    """[B, S] sample ids of packed rows (-1 = padding)  ->  additive [B, heads, S, S] in `dtype`: 0 where query and
    key belong to the same sample, -inf elsewhere (Krell et al. 2021, arXiv:2107.02027: no cross-contamination).
    Padding queries see only padding; nothing reads their outputs, and no softmax row is all -inf."""
    batch, seq_length = sample_ids.shape
    same_sample = sample_ids.unsqueeze(2) == sample_ids.unsqueeze(1)  # [B, S_q, S_k]
    bias = paddle.where(same_sample, paddle.zeros([], dtype), paddle.full([], -math.inf, dtype))
    return paddle.expand(bias.unsqueeze(1), [batch, heads, seq_length, seq_length])


def alibi_slopes(heads: int) -> list[float]:
    """ALiBi's per-head slopes m_h, h = 0 .. N-1: 1, 2^(-8/N), ..., 2^(-8(N-1)/N). Press et al. 2022
    (arXiv:2108.12409, section 3) use the same geometric sequence one step on, 2^(-8/N) to 2^-8. Starting at 1 keeps
    one head local whatever N: with bert-tiny's two heads the paper's slopes (2^-4, 2^-8) barely favour a
    neighbour, and in a probe at equal steps (LAMB 1e-2, batch 64, en-2015) they learnt no faster than no bias (11.8%
    validation MLM accuracy at step 300, against 11.5%), where 1 and 2^-4 reached 15.7%."""
    return [2.0 ** (-8.0 * head / heads) for head in range(heads)]


def distance_bias(heads: int, seq_length: int, dtype: str | paddle.dtype) -> paddle.Tensor:
    """Additive [1, heads, S, S] in `dtype`: -m_h |i - j| for query i and key j in head h (alibi_slopes). By
    token slots, which within one sample of a packed row are its positions, and across samples are masked."""
    slots = paddle.arange(seq_length, dtype="float32")
    distance = paddle.abs(slots.unsqueeze(1) - slots.unsqueeze(0))  # [S, S]
    slopes = paddle.to_tensor(alibi_slopes(heads), dtype="float32").reshape([heads, 1, 1])
    return (-slopes * distance).unsqueeze(0).astype(dtype)  # [1, N, S, S]


HALF_DTYPES = ("float16", "bfloat16")


def varlen_attention_available() -> bool:
    """Whether Paddle's variable-length flash attention (flash_attn_unpadded, FlashAttention-2) runs here: a CUDA
    build on a GPU of compute capability 8.0 or newer, which FlashAttention-2 needs."""
    if not paddle.is_compiled_with_cuda() or not paddle.get_device().startswith("gpu"):
        return False
    return paddle.device.cuda.get_device_capability()[0] >= 8


@dataclasses.dataclass(frozen=True)
class UnpaddedTokens:
    """The real tokens of packed rows, for flash_attn_unpadded (paddle/nn/functional/flash_attention.py), which
    takes the tokens of all samples one after the other, [T, N, D] in float16/bfloat16, with cu_seqlens.

    token_index: int64 [T], flat indices into the B*S token slots, sample after sample;
    cu_seqlens: int32 [number of samples + 1], 0, then the running sum of the sample lengths, T last;
    max_seqlen: the row length S, a bound on every sample's length (the kernel sizes its grid by it, and the
        bound needs no copy of the lengths to the host);
    dtype: the half dtype the kernel runs in (autocast's: the projections already give it, so the cast is free).
    """

    token_index: paddle.Tensor
    cu_seqlens: paddle.Tensor
    max_seqlen: int
    dtype: str | paddle.dtype

    @classmethod
    def of(cls, sample_ids: paddle.Tensor, dtype: str | paddle.dtype) -> UnpaddedTokens:
        """From [B, S] sample ids: each sample's tokens contiguous in one row, -1 for padding."""
        seq_length = sample_ids.shape[1]
        flat = sample_ids.reshape([-1])  # [B*S]
        token_index = paddle.nonzero(flat >= 0).reshape([-1])  # [T]
        ids = paddle.gather(flat, token_index)
        # A sample starts where the id changes or a row begins (so ids need only differ within a row).
        starts = paddle.nonzero((ids[1:] != ids[:-1]) | (token_index[1:] % seq_length == 0)).reshape([-1]) + 1
        ends = paddle.full([1], token_index.shape[0], "int64")
        cu_seqlens = paddle.concat([paddle.zeros([1], "int64"), starts, ends]).astype("int32")
        return cls(token_index, cu_seqlens, seq_length, dtype)

    def attention(self, query: paddle.Tensor, key: paddle.Tensor, value: paddle.Tensor, dropout_p: float,
                  training: bool) -> paddle.Tensor:
        """query, key, value [B, S, N, D] -> the context [B, S, N, D] of each sample's own tokens, 0 at padding."""
        batch, seq_length, heads, head_dim = query.shape

        def unpad(tensor: paddle.Tensor) -> paddle.Tensor:
            return paddle.gather(tensor.reshape([batch * seq_length, heads, head_dim]), self.token_index
                                 ).astype(self.dtype)  # [T, N, D]

        context, _ = flash_attention.flash_attn_unpadded(
            unpad(query), unpad(key), unpad(value), self.cu_seqlens, self.cu_seqlens, self.max_seqlen,
            self.max_seqlen, scale=1.0 / math.sqrt(head_dim), dropout=dropout_p, causal=False, training=training,
        )  # [T, N, D]
        slots = paddle.zeros([batch * seq_length, heads, head_dim], query.dtype)
        return paddle.scatter(slots, self.token_index, context.astype(query.dtype)).reshape(
            [batch, seq_length, heads, head_dim])


class BertModel(nn.Layer):
    """The BERT encoder: embeddings, a stack of BertLayers and the pooler (None in an MLM-only BertForPretraining,
    whose pooled_output is then None)."""

    def __init__(self, config: BertConfig, use_cpu_kernels: bool | None = None):
        super().__init__()
        self.config = config
        self.use_cpu_kernels = choose_cpu_kernels(use_cpu_kernels)
        # FlashAttention-2 runs here: packed rows under AMP skip the padding and the other samples' keys
        # altogether, and padded rows under AMP take flash attention's mask.
        self.varlen_attention = not self.use_cpu_kernels and varlen_attention_available()
        # Whether F.scaled_dot_product_attention may run a GPU kernel (flash or memory-efficient attention).
        self.cuda_attention = not self.use_cpu_kernels and paddle.is_compiled_with_cuda()
        self.embeddings = BertEmbeddings(config, self.use_cpu_kernels)
        self.encoder = nn.LayerList([BertLayer(config, self.use_cpu_kernels) for _ in range(config.num_hidden_layers)])
        # Pre-LayerNorm blocks add to the residual stream unnormalised: the stream is normalised once at the end.
        self.final_layer_norm = (layer_classes(self.use_cpu_kernels)[1](config.hidden_size, epsilon=config.encoder_eps)
                                 if config.pre_layer_norm else None)
        self.pooler = BertPooler(config)
        init_bert_weights(self, config.initializer_range)

    def forward(
        self,
        input_ids: paddle.Tensor,
        token_type_ids: paddle.Tensor | None = None,
        attention_mask: paddle.Tensor | None = None,
        position_ids: paddle.Tensor | None = None,
        sample_ids: paddle.Tensor | None = None,
        cls_positions: paddle.Tensor | None = None,
    ) -> tuple[paddle.Tensor, paddle.Tensor]:
        """Returns sequence_output [B, S, H] and pooled_output [B, H].

        attention_mask is [B, S] with 1 for a token and 0 for padding; None means no padding.
        Packed rows (packing.pack_batch) give instead of it position_ids [B, S] (each token's position in its
        sample), sample_ids [B, S] (its sample, -1 for padding; a token attends to its own sample only) and
        cls_positions int64 [number of samples] (flat indices into the B*S tokens of each sample's [CLS]);
        pooled_output is then [number of samples, H].
        """
        if attention_mask is not None and sample_ids is not None:
            raise ValueError("BertModel: give attention_mask (padded rows) or sample_ids (packed rows), not both")
        if token_type_ids is None:
            token_type_ids = paddle.zeros_like(input_ids)
        if self.config.alibi and attention_mask is None and sample_ids is None:
            attention_mask = paddle.ones_like(input_ids)  # no padding, but the distance bias rides on a mask
        mask = self._attention_input(attention_mask, sample_ids)
        hidden_states = self.embeddings(input_ids, token_type_ids, position_ids)
        for layer in self.encoder:
            hidden_states = layer(hidden_states, mask)
        if self.final_layer_norm is not None:
            hidden_states = self.final_layer_norm(hidden_states)
        return hidden_states, None if self.pooler is None else self.pooler(hidden_states, cls_positions)

    def _attention_input(self, attention_mask: paddle.Tensor | None, sample_ids: paddle.Tensor | None
                         ) -> paddle.Tensor | UnpaddedTokens | None:
        """One materialised mask per forward, shared by all layers (or the unpadded layout of packed rows), in
        the smallest shape that the attention which runs takes as it is, so that no layer copies it again.

        - cpu_kernels.attention adds a same-shape [B, N, S, S] mask, 13x faster than a broadcasting add.
        - Flash attention (float16/bfloat16 on a GPU of SM 8.0 or later) gets [B, 1, S, S]. Its kernel
          (PaddlePaddle/flash-attention, flash_fwd_kernel.h and flash_bwd_kernel.h: row_offset_mask and gMask)
          reads heads modulo dim 1, but query rows as a tile of 128 rows with a stride of S_k, starting at
          (first row % dim 2): a [B, 1, 1, S] mask, which its shape checks accept, would give query row i the
          key mask of sequence b + i.
        - Memory-efficient attention (every other GPU case with S a multiple of 8, fp32/tf32 included) gets
          [B, N, S, S]: its kernel takes a per-sequence bias only as [B, N, S_q, S_k] (dims 0-1 are [B, N] or
          [1, 1], memory_efficient_attention_utils.h), and given [B, 1, S, S] sdpa.py expands it to that in
          every layer, a copy per layer that the backward pass keeps (24 x 256 MiB at the tf32 phase-2 preset).
        - The math backend (the only one without a CUDA build) broadcasts: [B, 1, 1, S]. On a CUDA build
          without flash or memory-efficient attention it gets [B, 1, S, S], which every backend reads right.

        Packed rows get the block-diagonal [B, 1 or N, S, S] mask by the same rule for heads, except in
        float16/bfloat16 where flash_attn_unpadded runs (it takes no fp32). With config.alibi every case gets
        [B, N, S, S], the padding or block-diagonal mask plus distance_bias. These choices only size the mask:
        were F.scaled_dot_product_attention to pick another backend than foreseen, each of these shapes is still
        read correctly by it, at worst with one more copy.
        """
        if attention_mask is None and sample_ids is None:
            return None
        dtype = self._compute_dtype()
        alibi = self.config.alibi
        # flash_attn_unpadded takes no bias, so ALiBi's packed rows take the block-diagonal mask instead.
        flash = self.varlen_attention and str(dtype).removeprefix("paddle.") in HALF_DTYPES and not alibi
        if sample_ids is not None and flash:
            return UnpaddedTokens.of(sample_ids, dtype)
        seq_length = (attention_mask if sample_ids is None else sample_ids).shape[1]
        memory_efficient = self.cuda_attention and not flash and seq_length % 8 == 0
        heads = self.config.num_attention_heads if self.use_cpu_kernels or memory_efficient or alibi else 1
        if sample_ids is not None:
            mask = block_diagonal_bias(sample_ids, heads, dtype)
        else:
            query_rows = 1 if heads == 1 and not self.cuda_attention else seq_length
            mask = attention_bias(attention_mask, heads, query_rows, dtype)
        return mask + distance_bias(heads, seq_length, dtype) if alibi else mask  # [B, N, S, S] with ALiBi

    def _compute_dtype(self) -> str | paddle.dtype:
        """The dtype of the attention scores: autocast's under AMP (its matmuls), else the weights'."""
        if paddle.is_autocast_enabled():
            return paddle.get_autocast_dtype()
        return self.embeddings.word_embeddings.weight.dtype


class BertPretrainingHeads(nn.Layer):
    """Masked-LM head (decoder tied to the word embeddings, own bias) and, with nsp, the next-sentence head."""

    def __init__(self, config: BertConfig, use_cpu_kernels: bool, nsp: bool = True):
        super().__init__()
        Linear, LayerNorm, _ = layer_classes(use_cpu_kernels)
        self.transform = Linear(config.hidden_size, config.hidden_size)
        self.activation = activation(config.hidden_act, use_cpu_kernels)
        self.transform_layer_norm = LayerNorm(config.hidden_size, epsilon=config.layer_norm_eps)
        self.decoder_bias = self.create_parameter(
            [config.padded_vocab_size], is_bias=True, default_initializer=nn.initializer.Constant(0.0)
        )
        self.seq_relationship = nn.Linear(config.hidden_size, 2) if nsp else None

    def forward(
        self,
        sequence_output: paddle.Tensor,
        pooled_output: paddle.Tensor | None,
        word_embeddings: paddle.Tensor,
        masked_lm_positions: paddle.Tensor | None,
    ) -> tuple[paddle.Tensor, paddle.Tensor | None]:
        hidden = sequence_output.shape[-1]
        flat = sequence_output.reshape([-1, hidden])  # [B*S, H]
        if masked_lm_positions is not None:
            # Only the masked tokens need the [H, V] decoder: about 15% of the work.
            flat = paddle.gather(flat, masked_lm_positions)  # [M, H]
        transformed = self.transform_layer_norm(self.activation(self.transform(flat)))
        prediction_scores = paddle.matmul(transformed, word_embeddings, transpose_y=True) + self.decoder_bias
        if self.seq_relationship is None:
            return prediction_scores, None
        return prediction_scores, self.seq_relationship(pooled_output)


# The task models' inputs, in the order of their forward's arguments; exported programs name their inputs so.
INPUT_NAMES = ("input_ids", "token_type_ids", "attention_mask")


class _BertWithHead(nn.Layer):
    """The encoder a task model puts its head on, built with the model's one choice of layers."""

    def __init__(self, config: BertConfig, use_cpu_kernels: bool | None):
        super().__init__()
        self.config = config
        self.use_cpu_kernels = choose_cpu_kernels(use_cpu_kernels)
        self.bert = BertModel(config, self.use_cpu_kernels)


class BertForPretraining(_BertWithHead):
    """BERT with the masked-LM and next-sentence-prediction heads; with nsp=False, the masked-LM head alone
    (RoBERTa's objective, Liu et al. 2019, arXiv:1907.11692)."""

    def __init__(self, config: BertConfig, use_cpu_kernels: bool | None = None, nsp: bool = True):
        super().__init__(config, use_cpu_kernels)
        self.nsp = nsp
        if not nsp:
            # Only NSP reads the pooled [CLS] vector. Without the pooler no weight goes untrained (DataParallel
            # needs a gradient for every parameter) and the checkpoint holds none, so fine-tuning reports the
            # pooler as starting from random initialisation rather than loading an untrained one.
            self.bert.pooler = None
        self.cls = BertPretrainingHeads(config, self.use_cpu_kernels, nsp)
        init_bert_weights(self.cls, config.initializer_range)

    def forward(
        self,
        input_ids: paddle.Tensor,
        token_type_ids: paddle.Tensor | None = None,
        attention_mask: paddle.Tensor | None = None,
        masked_lm_positions: paddle.Tensor | None = None,
        position_ids: paddle.Tensor | None = None,
        sample_ids: paddle.Tensor | None = None,
        cls_positions: paddle.Tensor | None = None,
    ) -> tuple[paddle.Tensor, paddle.Tensor]:
        """Returns prediction_scores and seq_relationship_score [B, 2] ([number of samples, 2] for packed rows;
        None without nsp).

        masked_lm_positions holds flat indices into the [B*S] tokens of the batch (int64 [M]); the
        scores are then [M, V]. Without it they cover every token: [B*S, V]. position_ids, sample_ids and
        cls_positions describe packed rows (BertModel.forward).
        """
        sequence_output, pooled_output = self.bert(input_ids, token_type_ids, attention_mask, position_ids,
                                                   sample_ids, cls_positions)
        return self.cls(
            sequence_output, pooled_output, self.bert.embeddings.word_embeddings.weight, masked_lm_positions
        )


class BertForQuestionAnswering(_BertWithHead):
    """BERT with a span head: a start and an end logit for every token (SQuAD)."""

    def __init__(self, config: BertConfig, use_cpu_kernels: bool | None = None):
        super().__init__(config, use_cpu_kernels)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        init_bert_weights(self.qa_outputs, config.initializer_range)

    def forward(self, input_ids: paddle.Tensor, token_type_ids: paddle.Tensor | None = None,
                attention_mask: paddle.Tensor | None = None) -> tuple[paddle.Tensor, paddle.Tensor]:
        """Returns start_logits and end_logits, each [B, S]."""
        sequence_output, _ = self.bert(input_ids, token_type_ids, attention_mask)
        logits = self.qa_outputs(sequence_output)  # [B, S, 2]
        start_logits, end_logits = logits.unbind(axis=-1)
        return start_logits, end_logits


class BertForSequenceClassification(_BertWithHead):
    """BERT with dropout and a linear classifier on the pooled [CLS] output (GLUE)."""

    def __init__(self, config: BertConfig, num_labels: int, use_cpu_kernels: bool | None = None):
        super().__init__(config, use_cpu_kernels)
        self.num_labels = num_labels
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, num_labels)
        init_bert_weights(self.classifier, config.initializer_range)

    def forward(self, input_ids: paddle.Tensor, token_type_ids: paddle.Tensor | None = None,
                attention_mask: paddle.Tensor | None = None, position_ids: paddle.Tensor | None = None,
                sample_ids: paddle.Tensor | None = None, cls_positions: paddle.Tensor | None = None) -> paddle.Tensor:
        """Returns logits [B, num_labels], or [number of samples, num_labels] for packed rows (position_ids,
        sample_ids and cls_positions, as BertModel.forward takes them)."""
        _, pooled_output = self.bert(input_ids, token_type_ids, attention_mask, position_ids, sample_ids,
                                     cls_positions)
        return self.classifier(self.dropout(pooled_output))


def standard_copy(model: BertModel | _BertWithHead, *, dropout: bool = True) -> BertModel | _BertWithHead:
    """The same model (class, config, head, weights in fp32, train/eval mode) built from Paddle's own layers.

    For paddle.jit.save and paddle.jit.to_static: Paddle Inference knows and fuses Paddle's standard ops,
    exported shapes may be dynamic (cpu_kernels' head permutations need fixed ones), and to_static trains
    slower here anyway. The copy shares nothing with `model`. Weights are read through model.state_dict(),
    so under pure fp16 (O2) they come out as the fp32 that amp_decorate's save_dtype asks for.

    With dropout False the copy's dropout probabilities are 0, so that it traces no dropout op: for a program
    that only ever runs in eval mode, where each one would copy its input (F.dropout returns its input at p 0).
    """
    head_arguments = (model.num_labels,) if isinstance(model, BertForSequenceClassification) else ()
    head_options = {"nsp": model.nsp} if isinstance(model, BertForPretraining) else {}
    config = model.config if dropout else dataclasses.replace(model.config, hidden_dropout_prob=0.0,
                                                              attention_probs_dropout_prob=0.0)
    standard = type(model)(config, *head_arguments, use_cpu_kernels=False, **head_options)
    standard.set_state_dict({name: value.astype("float32") for name, value in model.state_dict().items()})
    standard.train(model.training)
    return standard


def count_parameters(model: nn.Layer) -> int:
    return sum(math.prod(p.shape) for p in model.parameters())
