"""The BERT model in Paddle: its configuration, the encoder and the task heads.

One sample's way through the model:

    input_ids [B, S] --BertEmbeddings--> [B, S, H] --BertLayer x L--> sequence_output [B, S, H]
                                                                   \\--BertPooler--> pooled_output [B, H]

and then a head: BertPretrainingHeads (masked-LM + next-sentence), a span head for SQuAD,
or a classifier for GLUE. The architecture follows Devlin et al. 2019 (arXiv:1810.04805) and
Google's reference implementation: post-LayerNorm residual blocks, exact (erf) GELU, weights
drawn from N(0, initializer_range).

On the CPU the Linear, LayerNorm and Dropout layers and the attention core run through cpu_kernels.py,
which computes the same functions with kernels that are faster there; on a GPU Paddle's own ops run.

Shapes in comments use B = batch, S = sequence length, H = hidden size, N = attention heads,
D = H / N, V = (padded) vocabulary size, M = number of masked positions in the batch.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping

import numpy as np
import paddle
import paddle.nn as nn
import paddle.nn.functional as F

import cpu_kernels

# Before the first matrix product of the process: MKL's fast kernels on AMD CPUs, and tensors in reused
# memory instead of fresh pages (see cpu_kernels.py).
cpu_kernels.use_fast_mkl_kernels()
cpu_kernels.keep_freed_memory()

ACTIVATIONS = {
    "gelu": lambda x: F.gelu(x, approximate=False),
    "gelu_new": lambda x: F.gelu(x, approximate=True),
    "relu": F.relu,
}

# Keys that Hugging Face writes into config.json for its own bookkeeping. They say nothing
# about the architecture we build, so from_dict(..., ignore_hf_metadata=True) skips them.
_HF_METADATA_KEYS = {
    "_name_or_path", "architectures", "model_type", "transformers_version", "torch_dtype",
    "gradient_checkpointing", "use_cache", "pad_token_id", "classifier_dropout",
    "position_embedding_type", "output_past", "id2label", "label2id", "directionality",
    "pooler_fc_size", "pooler_num_attention_heads", "pooler_num_fc_layers", "pooler_size_per_head",
    "pooler_type", "dtype", "tie_word_embeddings", "problem_type", "finetuning_task", "is_decoder",
    "add_cross_attention", "chunk_size_feed_forward",
}


@dataclasses.dataclass
class BertConfig:
    """Architecture hyperparameters. The field names are those of Google's bert_config.json."""

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    # Round the embedding table up to this multiple (8 suits tensor cores); 1 = no padding.
    pad_vocab_size_multiple: int = 1
    # Project Q, K and V with one [H, 3H] matrix instead of three [H, H] ones.
    fuse_mha: bool = False

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size {self.hidden_size} is not a multiple of "
                f"num_attention_heads {self.num_attention_heads}"
            )
        if self.hidden_act not in ACTIVATIONS:
            raise ValueError(f"hidden_act {self.hidden_act!r} is not one of {sorted(ACTIVATIONS)}")
        if self.pad_vocab_size_multiple < 1:
            raise ValueError("pad_vocab_size_multiple must be at least 1")

    @property
    def padded_vocab_size(self) -> int:
        multiple = self.pad_vocab_size_multiple
        return (self.vocab_size + multiple - 1) // multiple * multiple

    @classmethod
    def from_dict(cls, values: Mapping, source: str = "config", ignore_hf_metadata: bool = False) -> BertConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        skipped = _HF_METADATA_KEYS if ignore_hf_metadata else set()
        unknown = sorted(set(values) - known - skipped)
        if unknown:
            raise ValueError(f"{source}: unknown BERT config keys {unknown}")
        if ignore_hf_metadata and values.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(f"{source}: only absolute position embeddings are supported")
        try:
            return cls(**{k: v for k, v in values.items() if k in known})
        except (TypeError, ValueError) as error:
            raise ValueError(f"{source}: {error}") from None

    @classmethod
    def from_json_file(cls, path: str, ignore_hf_metadata: bool = False) -> BertConfig:
        try:
            with open(path, encoding="utf-8") as f:
                values = json.load(f)
        except FileNotFoundError:
            raise FileNotFoundError(f"{path}: BERT config file not found") from None
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}: not valid JSON ({error})") from None
        if not isinstance(values, dict):
            raise ValueError(f"{path}: a BERT config must be a JSON object")
        return cls.from_dict(values, source=path, ignore_hf_metadata=ignore_hf_metadata)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json_string(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"


class BertEmbeddings(nn.Layer):
    """Sum of word, position and segment embeddings, then LayerNorm and dropout."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.padded_vocab_size, config.hidden_size)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.layer_norm = cpu_kernels.LayerNorm(config.hidden_size, epsilon=config.layer_norm_eps)
        self.dropout = cpu_kernels.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids: paddle.Tensor, token_type_ids: paddle.Tensor) -> paddle.Tensor:
        seq_length = input_ids.shape[1]
        position_ids = paddle.arange(seq_length, dtype="int64").unsqueeze(0)  # [1, S]
        embeddings = (
            self.word_embeddings(input_ids)
            + self.position_embeddings(position_ids)
            + self.token_type_embeddings(token_type_ids)
        )  # [B, S, H]
        return self.dropout(self.layer_norm(embeddings))


class BertSelfAttention(nn.Layer):
    """Multi-head self-attention: scaled_dot_product_attention (flash attention on a GPU); on the CPU the same
    function through cpu_kernels.attention."""

    def __init__(self, config: BertConfig):
        super().__init__()
        hidden = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_dim = hidden // self.num_heads
        self.fuse_mha = config.fuse_mha
        if self.fuse_mha:
            # Columns are [query | key | value]: the unfused matrices side by side, which is what
            # convert_qkv_layout relies on.
            self.qkv = cpu_kernels.Linear(hidden, 3 * hidden)
        else:
            self.query = cpu_kernels.Linear(hidden, hidden)
            self.key = cpu_kernels.Linear(hidden, hidden)
            self.value = cpu_kernels.Linear(hidden, hidden)
        self.dropout_prob = config.attention_probs_dropout_prob

    def forward(self, hidden_states: paddle.Tensor, attention_mask: paddle.Tensor | None) -> paddle.Tensor:
        if cpu_kernels.enabled_for(hidden_states):
            return self._forward_cpu(hidden_states, attention_mask)
        batch, seq_length = hidden_states.shape[0], hidden_states.shape[1]
        head_shape = [batch, seq_length, self.num_heads, self.head_dim]
        if self.fuse_mha:
            qkv = self.qkv(hidden_states).reshape([batch, seq_length, 3, self.num_heads, self.head_dim])
            query, key, value = qkv.unbind(axis=2)  # each [B, S, N, D]
        else:
            query = self.query(hidden_states).reshape(head_shape)
            key = self.key(hidden_states).reshape(head_shape)
            value = self.value(hidden_states).reshape(head_shape)
        context = F.scaled_dot_product_attention(
            query, key, value, attn_mask=attention_mask,
            dropout_p=self.dropout_prob if self.training else 0.0, training=self.training,
        )  # [B, S, N, D]
        return context.reshape([batch, seq_length, self.num_heads * self.head_dim])

    def _forward_cpu(self, hidden_states: paddle.Tensor, attention_mask: paddle.Tensor | None) -> paddle.Tensor:
        """The same function with heads moved by whole rows (cpu_kernels.attention says why)."""
        if self.fuse_mha:
            query, key, value = cpu_kernels.split_heads(self.qkv(hidden_states), 3, self.num_heads).unbind(axis=0)
        else:
            query, key, value = (
                cpu_kernels.split_heads(projection(hidden_states), 1, self.num_heads).squeeze(0)
                for projection in (self.query, self.key, self.value)
            )  # each [B, N, S, D]
        context = cpu_kernels.attention(query, key, value, attention_mask, self.dropout_prob, self.training)
        return cpu_kernels.merge_heads(context)  # [B, S, H]


class BertLayer(nn.Layer):
    """One post-LayerNorm transformer block: attention, add & norm, feed-forward, add & norm."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.attention = BertSelfAttention(config)
        self.attention_output = cpu_kernels.Linear(config.hidden_size, config.hidden_size)
        self.attention_layer_norm = cpu_kernels.LayerNorm(config.hidden_size, epsilon=config.layer_norm_eps)
        self.intermediate = cpu_kernels.Linear(config.hidden_size, config.intermediate_size)
        self.output = cpu_kernels.Linear(config.intermediate_size, config.hidden_size)
        self.output_layer_norm = cpu_kernels.LayerNorm(config.hidden_size, epsilon=config.layer_norm_eps)
        self.dropout = cpu_kernels.Dropout(config.hidden_dropout_prob)
        self.activation = ACTIVATIONS[config.hidden_act]

    def forward(self, hidden_states: paddle.Tensor, attention_mask: paddle.Tensor | None) -> paddle.Tensor:
        attention = self.attention_output(self.attention(hidden_states, attention_mask))
        hidden_states = self.attention_layer_norm(hidden_states + self.dropout(attention))
        feed_forward = self.output(self.activation(self.intermediate(hidden_states)))
        return self.output_layer_norm(hidden_states + self.dropout(feed_forward))


class BertPooler(nn.Layer):
    """tanh(W h_[CLS] + b): the sentence representation used by NSP and classifiers."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, sequence_output: paddle.Tensor) -> paddle.Tensor:
        return paddle.tanh(self.dense(sequence_output[:, 0]))


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


def extended_attention_mask(attention_mask: paddle.Tensor | None) -> paddle.Tensor | None:
    """[B, S] with 1 = token, 0 = padding  ->  bool [B, 1, 1, S] with True = may be attended to."""
    if attention_mask is None:
        return None
    return (attention_mask != 0).unsqueeze([1, 2])


class BertModel(nn.Layer):
    """The BERT encoder: embeddings, a stack of BertLayers and the pooler."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.encoder = nn.LayerList([BertLayer(config) for _ in range(config.num_hidden_layers)])
        self.pooler = BertPooler(config)
        init_bert_weights(self, config.initializer_range)

    def forward(
        self,
        input_ids: paddle.Tensor,
        token_type_ids: paddle.Tensor | None = None,
        attention_mask: paddle.Tensor | None = None,
    ) -> tuple[paddle.Tensor, paddle.Tensor]:
        """Returns sequence_output [B, S, H] and pooled_output [B, H].

        attention_mask is [B, S] with 1 for a token and 0 for padding; None means no padding.
        """
        if token_type_ids is None:
            token_type_ids = paddle.zeros_like(input_ids)
        mask = extended_attention_mask(attention_mask)
        hidden_states = self.embeddings(input_ids, token_type_ids)
        for layer in self.encoder:
            hidden_states = layer(hidden_states, mask)
        return hidden_states, self.pooler(hidden_states)


class BertPretrainingHeads(nn.Layer):
    """Masked-LM head (decoder tied to the word embeddings, own bias) and next-sentence head."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.transform = cpu_kernels.Linear(config.hidden_size, config.hidden_size)
        self.activation = ACTIVATIONS[config.hidden_act]
        self.transform_layer_norm = cpu_kernels.LayerNorm(config.hidden_size, epsilon=config.layer_norm_eps)
        self.decoder_bias = self.create_parameter(
            [config.padded_vocab_size], is_bias=True, default_initializer=nn.initializer.Constant(0.0)
        )
        self.seq_relationship = nn.Linear(config.hidden_size, 2)

    def forward(
        self,
        sequence_output: paddle.Tensor,
        pooled_output: paddle.Tensor,
        word_embeddings: paddle.Tensor,
        masked_lm_positions: paddle.Tensor | None,
    ) -> tuple[paddle.Tensor, paddle.Tensor]:
        hidden = sequence_output.shape[-1]
        flat = sequence_output.reshape([-1, hidden])  # [B*S, H]
        if masked_lm_positions is not None:
            # Only the masked tokens need the [H, V] decoder: about 15% of the work.
            flat = paddle.gather(flat, masked_lm_positions)  # [M, H]
        transformed = self.transform_layer_norm(self.activation(self.transform(flat)))
        prediction_scores = paddle.matmul(transformed, word_embeddings, transpose_y=True) + self.decoder_bias
        return prediction_scores, self.seq_relationship(pooled_output)


class BertForPretraining(nn.Layer):
    """BERT with the masked-LM and next-sentence-prediction heads."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.bert = BertModel(config)
        self.cls = BertPretrainingHeads(config)
        init_bert_weights(self.cls, config.initializer_range)

    def forward(
        self,
        input_ids: paddle.Tensor,
        token_type_ids: paddle.Tensor | None = None,
        attention_mask: paddle.Tensor | None = None,
        masked_lm_positions: paddle.Tensor | None = None,
    ) -> tuple[paddle.Tensor, paddle.Tensor]:
        """Returns prediction_scores and seq_relationship_score [B, 2].

        masked_lm_positions holds flat indices into the [B*S] tokens of the batch (int64 [M]); the
        scores are then [M, V]. Without it they cover every token: [B*S, V].
        """
        sequence_output, pooled_output = self.bert(input_ids, token_type_ids, attention_mask)
        return self.cls(
            sequence_output, pooled_output, self.bert.embeddings.word_embeddings.weight, masked_lm_positions
        )


class BertForQuestionAnswering(nn.Layer):
    """BERT with a span head: a start and an end logit for every token (SQuAD)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.bert = BertModel(config)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        init_bert_weights(self.qa_outputs, config.initializer_range)

    def forward(
        self,
        input_ids: paddle.Tensor,
        token_type_ids: paddle.Tensor | None = None,
        attention_mask: paddle.Tensor | None = None,
    ) -> tuple[paddle.Tensor, paddle.Tensor]:
        """Returns start_logits and end_logits, each [B, S]."""
        sequence_output, _ = self.bert(input_ids, token_type_ids, attention_mask)
        logits = self.qa_outputs(sequence_output)  # [B, S, 2]
        start_logits, end_logits = logits.unbind(axis=-1)
        return start_logits, end_logits


class BertForSequenceClassification(nn.Layer):
    """BERT with dropout and a linear classifier on the pooled [CLS] output (GLUE)."""

    def __init__(self, config: BertConfig, num_labels: int):
        super().__init__()
        self.config = config
        self.num_labels = num_labels
        self.bert = BertModel(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, num_labels)
        init_bert_weights(self.classifier, config.initializer_range)

    def forward(
        self,
        input_ids: paddle.Tensor,
        token_type_ids: paddle.Tensor | None = None,
        attention_mask: paddle.Tensor | None = None,
    ) -> paddle.Tensor:
        """Returns logits [B, num_labels]."""
        _, pooled_output = self.bert(input_ids, token_type_ids, attention_mask)
        return self.classifier(self.dropout(pooled_output))


# ---------------------------------------------------------------------------------------------
# Loading weights across layouts
# ---------------------------------------------------------------------------------------------

_QKV_PARTS = ("query", "key", "value")


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
                parts = [converted.pop(f"{prefix}{part}.{kind}") for part in _QKV_PARTS]
                converted[f"{prefix}qkv.{kind}"] = _concat(parts, axis)
            if not fuse_mha and name.endswith(f".attention.qkv.{kind}"):
                prefix = name[: -len(f"qkv.{kind}")]
                for part, value in zip(_QKV_PARTS, _split(converted.pop(name), 3, axis), strict=True):
                    converted[f"{prefix}{part}.{kind}"] = value
    return converted


def _as_numpy(value):
    return value.numpy() if isinstance(value, paddle.Tensor) else value


def _concat(parts, axis):
    return np.concatenate([_as_numpy(p) for p in parts], axis=axis)


def _split(value, sections, axis):
    return np.split(_as_numpy(value), sections, axis=axis)


_VOCAB_ROWS = ("embeddings.word_embeddings.weight", "cls.decoder_bias")


def load_weights(model: nn.Layer, state_dict: Mapping, source: str) -> tuple[list[str], list[str]]:
    """Load a state dict into model, whatever its QKV layout, prefix or vocabulary padding.

    - fused and unfused attention weights convert into the model's layout;
    - an encoder-only state (keys "embeddings...") loads into a model with a `bert` submodule;
    - word-embedding rows are cut or zero-padded to the model's padded vocabulary size.

    Returns (missing, unexpected): model parameters the state did not provide, left as
    initialised, and state entries the model has no place for. The caller reports them; a
    shape mismatch raises ValueError naming `source` and the parameter.
    """
    model_state = model.state_dict()
    has_bert_prefix = any(k.startswith("bert.") for k in model_state)
    state = {}
    for name, value in state_dict.items():
        if has_bert_prefix and not name.startswith(("bert.", "cls.", "qa_outputs.", "classifier.")):
            name = "bert." + name
        if not has_bert_prefix and name.startswith("bert."):
            name = name[len("bert."):]
        state[name] = value
    fuse_mha = any(k.endswith(".attention.qkv.weight") for k in model_state)
    state = convert_qkv_layout(state, fuse_mha)

    to_load = {}
    for name, value in state.items():
        if name not in model_state:
            continue
        array = _as_numpy(value)
        expected = list(model_state[name].shape)
        if name.endswith(_VOCAB_ROWS) and list(array.shape[1:]) == expected[1:] and array.shape[0] != expected[0]:
            rows = expected[0]
            if array.shape[0] > rows:
                array = array[:rows]
            else:
                array = np.concatenate([array, np.zeros((rows - array.shape[0], *array.shape[1:]), array.dtype)])
        if list(array.shape) != expected:
            raise ValueError(f"{source}: parameter {name} has shape {list(array.shape)}, model expects {expected}")
        to_load[name] = paddle.to_tensor(array, dtype=model_state[name].dtype)
    model.set_state_dict(to_load)
    missing = sorted(set(model_state) - set(to_load))
    unexpected = sorted(set(state) - set(model_state))
    return missing, unexpected


def count_parameters(model: nn.Layer) -> int:
    return sum(math.prod(p.shape) for p in model.parameters())
