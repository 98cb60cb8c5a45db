"""The BERT encoder written from the papers' equations in NumPy (float64): the tests' oracle for modeling.py.

Devlin et al. 2019 and Vaswani et al. 2017 for the post-LayerNorm block; the budget-recipe options of BertConfig
(pre-LayerNorm, Xiong et al. 2020; bias-free linear layers; the gated-GELU feed-forward, Shazeer 2020; ALiBi's
distance bias, Press et al. 2022) as their papers write them. It shares no code with modeling.py.
"""

from __future__ import annotations

import math

import numpy as np

from bert_config import BertConfig


def numpy_encoder(params: dict, config: BertConfig, input_ids: np.ndarray, token_type_ids: np.ndarray,
                  attention_mask: np.ndarray) -> np.ndarray:
    """The encoder's output [B, S, H] from the equations, with the recipe options of config; params holds the
    BertModel state dict's names (without a "bert." prefix) as float64 arrays."""
    gelu = np.vectorize(lambda x: 0.5 * x * (1.0 + math.erf(x / math.sqrt(2.0))))

    def layer_norm(x, prefix):
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + config.layer_norm_eps) * params[prefix + ".weight"] + params[prefix + ".bias"]

    def linear(x, prefix):
        bias = params[prefix + ".bias"] if config.linear_bias else 0.0
        return x @ params[prefix + ".weight"] + bias

    def feed_forward(x, p):
        hidden = linear(x, p + "intermediate")
        if config.gated_feed_forward:
            gate, up = hidden[..., :config.intermediate_size], hidden[..., config.intermediate_size:]
            return linear(gelu(gate) * up, p + "output")
        return linear(gelu(hidden), p + "output")

    batch, seq = input_ids.shape
    heads, head_dim = config.num_attention_heads, config.hidden_size // config.num_attention_heads
    x = (params["embeddings.word_embeddings.weight"][input_ids]
         + params["embeddings.position_embeddings.weight"][np.arange(seq)][None]
         + params["embeddings.token_type_embeddings.weight"][token_type_ids])
    x = layer_norm(x, "embeddings.layer_norm")
    bias = np.where(attention_mask[:, None, None, :] > 0, 0.0, -np.inf)  # [B, 1, 1, S]
    if config.alibi:  # head h of N (from 0) adds -m_h |i - j|, m_h = 2^(-8h/N)
        slopes = 2.0 ** (-8.0 * np.arange(heads) / heads)
        distance = np.abs(np.arange(seq)[:, None] - np.arange(seq)[None, :])
        bias = bias - slopes[None, :, None, None] * distance[None, None]  # [B, N, S, S]

    def attention(x, p):
        def split(t):
            return t.reshape(batch, seq, heads, head_dim).transpose(0, 2, 1, 3)  # [B, N, S, D]

        q, k, v = (split(linear(x, p + "attention." + name)) for name in ("query", "key", "value"))
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(head_dim) + bias
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        return linear((probs @ v).transpose(0, 2, 1, 3).reshape(batch, seq, -1), p + "attention_output")

    for i in range(config.num_hidden_layers):
        p = f"encoder.{i}."
        if config.pre_layer_norm:
            x = x + attention(layer_norm(x, p + "attention_layer_norm"), p)
            x = x + feed_forward(layer_norm(x, p + "output_layer_norm"), p)
        else:
            x = layer_norm(x + attention(x, p), p + "attention_layer_norm")
            x = layer_norm(x + feed_forward(x, p), p + "output_layer_norm")
    return layer_norm(x, "final_layer_norm") if config.pre_layer_norm else x


def numpy_pooler(params: dict, sequence_output: np.ndarray) -> np.ndarray:
    """The pooled output [B, H]: tanh of a dense layer on each row's first ([CLS]) position."""
    return np.tanh(sequence_output[:, 0] @ params["pooler.dense.weight"] + params["pooler.dense.bias"])
