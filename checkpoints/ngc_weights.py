"""NVIDIA's static-graph BERT checkpoints (the NGC downloads of "BERT for PaddlePaddle") under our parameter names.

    if is_static_graph_state(state):
        conversion = nvidia_to_paddle(state, "bert_paddle.pdparams")   # .state, .layout

A `paddle.static.save` names each parameter by layer type and creation counter (embedding_0.w_0, layer_norm_3.b_0,
linear_17.w_0), so the names carry no role; each counter's order is the order NVIDIA's modeling.py creates its
layers in: embeddings (word, position, token type, layer norm), the encoder layers, the pooler, then the head (the
masked-LM transform, its layer norm, the decoder bias and next-sentence classifier; or the SQuAD classifier). The
counters need not start at 0 (they go on from earlier layers of the process that saved them).

Three encoder layouts are recognised, from the names and shapes alone:
- `nn.TransformerEncoderLayer` (post-norm): q, k, v and output projections, linear1, linear2, norm1, norm2;
- the same layer with `fuse_qkv=True`, which NVIDIA's --fuse-mha builds (a Paddle of NVIDIA's container;
  PaddlePaddle/Paddle PR #53810): one qkv projection, weight [H, 3H], whose output reshapes to
  [batch, seq, 3, heads, head size], so its columns are q | k | v, each head-major as in the unfused
  projections; then the output projection, linear1, linear2, norm1, norm2;
- `paddle.incubate.nn.FusedTransformerEncoderLayer` (qkv_weight [3, heads, head size, H] as x @ W^T, its
  output projection and post-norm, then the feed-forward's two linears and post-norm), which NVIDIA's
  modeling.py can build but switches off.
NVIDIA's encoder LayerNorms are those layers' (epsilon 1e-5); its embedding and masked-LM head LayerNorms use 1e-12.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection, Mapping

import numpy as np

# The epsilons of NVIDIA's LayerNorms: Paddle's transformer layers' default, and BertEmbeddings'/the MLM head's.
NVIDIA_ENCODER_LAYER_NORM_EPS = 1e-5
NVIDIA_LAYER_NORM_EPS = 1e-12

UNFUSED, FUSED_QKV, FUSED_LAYER = "unfused", "fused-QKV", "FusedTransformerEncoderLayer"

# A static-graph parameter name: <layer type>_<creation counter>.<w|b>_<parameter counter within the layer>.
_STATIC_NAME = re.compile(r"(?P<kind>[a-z_]+?)_(?P<index>\d+)\.(?P<role>[wb]_\d+)")
_LAYER_KINDS = ("embedding", "layer_norm", "linear", "fused_multi_head_attention", "fused_feed_forward")
_WEIGHT_AND_BIAS = {"w_0": "weight", "b_0": "bias"}  # Linear and LayerNorm alike
# paddle.incubate.nn.FusedMultiHeadAttention / FusedFeedForward (post-norm) create, in this order:
_FUSED_ATTENTION = ("qkv_weight", "qkv_bias", "linear_weight", "linear_bias", "ln_scale", "ln_bias")
_FUSED_FEED_FORWARD = ("linear1_weight", "linear1_bias", "linear2_weight", "linear2_bias", "ln2_scale", "ln2_bias")
_FUSED_ROLES = ("w_0", "b_0", "w_1", "b_1", "w_2", "b_2")

# What an example name of each layout looks like, for messages.
STATIC_LAYOUT_EXAMPLE = "NVIDIA's static-graph names (embedding_0.w_0, linear_17.w_0, ...)"


def is_static_graph_state(names: Collection[str]) -> bool:
    """Whether every name is a static-graph parameter name (and there is at least one)."""
    return bool(names) and all(_STATIC_NAME.fullmatch(name) for name in names)


@dataclasses.dataclass
class NgcConversion:
    """The outcome of nvidia_to_paddle."""

    state: dict[str, np.ndarray]  # our names, unfused Q/K/V, Linear weights [in, out], float32
    layout: str  # UNFUSED, FUSED_QKV or FUSED_LAYER


def _layers_in_creation_order(state: Mapping[str, np.ndarray]) -> tuple[dict, dict]:
    """({layer type: [{role: array} per layer, in creation order]}, {name: array} of names of no layer type)."""
    layers: dict[str, dict[int, dict[str, np.ndarray]]] = {}
    others = {}
    for name, value in state.items():
        match = _STATIC_NAME.fullmatch(name)
        if match is None or match["kind"] not in _LAYER_KINDS:
            others[name] = value
            continue
        layers.setdefault(match["kind"], {}).setdefault(int(match["index"]), {})[match["role"]] = value
    return {kind: [by_index[index] for index in sorted(by_index)] for kind, by_index in layers.items()}, others


def _pop(layers: list[dict], kind: str, source: str, roles: Collection[str] = tuple(_WEIGHT_AND_BIAS)) -> dict:
    """The next layer of `layers` (removed), which must hold exactly `roles`."""
    if not layers:
        raise ValueError(f"{source}: fewer {kind} layers than NVIDIA's BERT creates; is it one of its checkpoints?")
    layer = layers.pop(0)
    if set(layer) != set(roles):
        raise ValueError(f"{source}: a {kind} layer holds {sorted(layer)}, expected {sorted(roles)}")
    return layer


def _put(layer: Mapping[str, np.ndarray], prefix: str, state: dict) -> None:
    """A Linear's or LayerNorm's w_0/b_0 as <prefix>.weight/.bias."""
    for role, suffix in _WEIGHT_AND_BIAS.items():
        state[f"{prefix}.{suffix}"] = layer[role]


def _fused_layer(attention: Mapping[str, np.ndarray], feed_forward: Mapping[str, np.ndarray], prefix: str,
                 state: dict) -> None:
    """One FusedTransformerEncoderLayer's parameters under our names (unfused Q/K/V, Linear weights [in, out])."""
    attention = dict(zip(_FUSED_ATTENTION, (attention[role] for role in _FUSED_ROLES), strict=True))
    feed_forward = dict(zip(_FUSED_FEED_FORWARD, (feed_forward[role] for role in _FUSED_ROLES), strict=True))
    qkv_weight, qkv_bias = attention["qkv_weight"], attention["qkv_bias"]  # [3, heads, head size, H], [3, heads, hs]
    hidden = qkv_weight.shape[-1]
    for part, weight, bias in zip(("query", "key", "value"), qkv_weight, qkv_bias, strict=True):
        # The fused kernel computes x @ W^T with W = qkv_weight[part] as [heads * head size, H].
        state[f"{prefix}.attention.{part}.weight"] = np.ascontiguousarray(weight.reshape(-1, hidden).T)
        state[f"{prefix}.attention.{part}.bias"] = bias.reshape(-1)
    pairs = [("attention_output", "linear_weight", "linear_bias"), ("attention_layer_norm", "ln_scale", "ln_bias")]
    for module, weight, bias in pairs:
        state[f"{prefix}.{module}.weight"], state[f"{prefix}.{module}.bias"] = attention[weight], attention[bias]
    pairs = [("intermediate", "linear1_weight", "linear1_bias"), ("output", "linear2_weight", "linear2_bias"),
             ("output_layer_norm", "ln2_scale", "ln2_bias")]
    for module, weight, bias in pairs:
        state[f"{prefix}.{module}.weight"], state[f"{prefix}.{module}.bias"] = feed_forward[weight], feed_forward[bias]


def _attention_linears(linears: list[dict], hidden: int, prefix: str, state: dict, source: str) -> str:
    """Take one nn.TransformerEncoderLayer's attention projections from `linears`; return its layout.

    With fuse_qkv the layer has two projections where it otherwise has four: the one whose weight is [H, 3H] is
    the qkv projection (whichever of the two comes first), the other the output projection.
    """
    if any(layer.get("w_0") is not None and list(layer["w_0"].shape) == [hidden, 3 * hidden] for layer in linears[:2]):
        first, second = _pop(linears, "linear", source), _pop(linears, "linear", source)
        qkv, output = (first, second) if first["w_0"].shape[-1] == 3 * hidden else (second, first)
        # Columns q | k | v (the output reshapes to [batch, seq, 3, heads, head size]).
        for part, weight, bias in zip(("query", "key", "value"), np.split(qkv["w_0"], 3, axis=1),
                                      np.split(qkv["b_0"], 3), strict=True):
            state[f"{prefix}.attention.{part}.weight"] = np.ascontiguousarray(weight)
            state[f"{prefix}.attention.{part}.bias"] = bias
        _put(output, f"{prefix}.attention_output", state)
        return FUSED_QKV
    for module in ("attention.query", "attention.key", "attention.value", "attention_output"):
        _put(_pop(linears, "linear", source), f"{prefix}.{module}", state)
    return UNFUSED


def nvidia_to_paddle(ngc_state: Mapping[str, np.ndarray], source: str) -> NgcConversion:
    """NVIDIA's static-graph BERT parameters (pretraining or SQuAD, any of the three encoder layouts) under our
    names and layouts, float32; ValueError naming `source` if they fit no NVIDIA BERT."""
    layers, others = _layers_in_creation_order(ngc_state)
    if len(others) > 1:
        raise ValueError(f"{source}: parameters of no BERT layer: {', '.join(sorted(others))}")
    has_mlm = bool(others)  # the masked-LM decoder bias is the one parameter a layer type does not name
    embeddings, norms, linears = (layers.get(kind, []) for kind in ("embedding", "layer_norm", "linear"))
    state: dict[str, np.ndarray] = {}
    for name in ("word_embeddings", "position_embeddings", "token_type_embeddings"):
        state[f"bert.embeddings.{name}.weight"] = _pop(embeddings, "embedding", source, ("w_0",))["w_0"]
    _put(_pop(norms, "layer_norm", source), "bert.embeddings.layer_norm", state)
    hidden = state["bert.embeddings.word_embeddings.weight"].shape[-1]
    attentions, feed_forwards = layers.get("fused_multi_head_attention", []), layers.get("fused_feed_forward", [])
    if attentions or feed_forwards:
        if len(attentions) != len(feed_forwards):
            raise ValueError(f"{source}: {len(attentions)} fused attention layers but {len(feed_forwards)} "
                             "fused feed-forward layers")
        for layer, (attention, feed_forward) in enumerate(zip(attentions, feed_forwards, strict=True)):
            if set(attention) != set(_FUSED_ROLES) or set(feed_forward) != set(_FUSED_ROLES):
                raise ValueError(f"{source}: fused layer {layer} is not in FusedTransformerEncoderLayer's post-norm "
                                 "layout")
            _fused_layer(attention, feed_forward, f"bert.encoder.{layer}", state)
        layouts = {FUSED_LAYER}
    else:
        # Each nn.TransformerEncoderLayer has two layer norms; the masked-LM head has one more.
        num_layers, odd = divmod(len(norms) - has_mlm, 2)
        if odd:
            raise ValueError(f"{source}: {len(norms) + 1} layer norms fit no NVIDIA BERT")
        layouts = set()
        for layer in range(num_layers):
            prefix = f"bert.encoder.{layer}"
            layouts.add(_attention_linears(linears, hidden, prefix, state, source))
            for module in ("intermediate", "output"):
                _put(_pop(linears, "linear", source), f"{prefix}.{module}", state)
            for module in ("attention_layer_norm", "output_layer_norm"):
                _put(_pop(norms, "layer_norm", source), f"{prefix}.{module}", state)
        if len(layouts) > 1:
            raise ValueError(f"{source}: some encoder layers have fused QKV projections and some not")
    _put(_pop(linears, "linear", source), "bert.pooler.dense", state)
    if has_mlm:
        _put(_pop(linears, "linear", source), "cls.transform", state)
        _put(_pop(norms, "layer_norm", source), "cls.transform_layer_norm", state)
        state["cls.decoder_bias"] = next(iter(others.values()))
        _put(_pop(linears, "linear", source), "cls.seq_relationship", state)
    elif linears:
        _put(_pop(linears, "linear", source), "qa_outputs", state)
    left = len(embeddings) + len(norms) + len(linears)
    if left:
        raise ValueError(f"{source}: {left} layers more than NVIDIA's BERT creates; is it one of its checkpoints?")
    return NgcConversion({name: np.asarray(value, np.float32) for name, value in state.items()},
                         layouts.pop() if layouts else UNFUSED)
