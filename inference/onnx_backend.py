"""The ONNX side of inference.py: export an exported Paddle program to ONNX, and prepare it for ONNX Runtime.

- export_onnx: paddle2onnx converts the fp32 PIR program that inference.export_inference_model wrote
  (<prefix>.json + <prefix>.pdiparams) at ONNX_OPSET; the inputs get the dynamic axes "batch" and "sequence",
  the architecture goes into the model's metadata (the fusions need the head count), and onnx.checker checks
  the result before it is written to <prefix>.onnx. Calibration inputs for static int8 go beside it.
- prepared_model: the file an ONNX Runtime session loads for a precision:
  - "fp32": ONNX Runtime's transformer fusions (onnxruntime.transformers.optimizer: Attention, BiasGelu and,
    where the device's settings ask for it, SkipLayerNormalization) on the converted graph;
  - "fp16": the fused graph in float16 with float32 inputs and outputs, for the CUDA execution provider;
  - "int8" with "dynamic" quantization: the fused graph with int8 weights and per-batch activation scales
    (MatMulInteger, and QAttention in place of Attention);
  - "int8" with "static" quantization: activation scales calibrated once on the exported calibration inputs
    (QDQ MatMuls). ONNX Runtime's static quantizer has no fused Attention, so this graph is fused without it
    and every GEMM, the query, key and value projections included, runs in int8;
  - either quantization with "-per-channel": one weight scale per output column of each matrix instead of
    one per matrix (a column of small weights then keeps its own resolution);
  - "dynamic-per-channel-outliers": the same as "dynamic-per-channel" after outlier_channels_apart has taken the
    few activation channels far outside the rest out of the per-batch activation scale (see there).

The transformer optimizer is called with opt_level=0: any level above imports torch (optimizer.py's
optimize_by_onnxruntime reads torch's version), so ONNX Runtime's own basic graph pass runs here first, through
an InferenceSession that saves its optimized graph. paddle2onnx writes scaled dot-product attention as
softmax(q * scale @ k^T + mask) with a float mask built through Where; ORT's BERT attention fusion recognises
softmax(q @ k^T / sqrt(d) + (1 - mask) * -10000), so standard_attention_patterns rewrites the two (the same
arithmetic: the scale moves after the matmul, and exp(-10000 - max) is 0 in fp32 as exp(-inf) is).
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import zipfile
from collections.abc import Iterator, Mapping

import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto, helper, numpy_helper

from utils.atomic_io import atomic_write

# ONNX opset of the export: 17 has LayerNormalization as one op, which ONNX Runtime and TensorRT both run.
ONNX_OPSET = 17
# The exported inputs' dynamic axes, shared by all three inputs, so that ONNX Runtime knows their shapes agree.
DYNAMIC_AXES = ("batch", "sequence")
# What export_onnx records in the model's metadata_props: the fusions need the head count and hidden size.
ARCHITECTURE_KEYS = ("num_attention_heads", "hidden_size")
# The padding value of the rewritten mask: ORT's attention fusion expects -10000 (its kernels' default filter).
MASK_FILTER_VALUE = -10000.0
# --int8-quantization: how activations get their scales (per batch, or calibrated once), and with
# PER_CHANNEL the weights one scale per output column (per_channel of ORT's quantizers) instead of one per matrix.
PER_CHANNEL = "-per-channel"
# With OUTLIERS, the channels of a GEMM's input that the calibration inputs show far outside the rest no longer
# set its activation scale (outlier_channels_apart).
OUTLIERS = "-outliers"
QUANTIZATIONS = ("dynamic", "static", "dynamic" + PER_CHANNEL, "static" + PER_CHANNEL,
                 "dynamic" + PER_CHANNEL + OUTLIERS)
# An input channel of a GEMM is an outlier when its largest magnitude over the calibration features' tokens is
# above OUTLIER_RATIO times the median channel's. On the 20-article SQuAD model (docs/inference.md) ratios of 3,
# 4 and 6 all kept EM and F1 within 0.7 of fp32; 4 is the middle of that range.
OUTLIER_RATIO = 4.0
# ONNX's shape inference knows no types for the outputs of ORT's fused ops (com.microsoft domain); they are fp32.
FUSED_OUTPUT_TYPE = {"DefaultTensorType": TensorProto.FLOAT}
# Features per calibration batch of static quantization.
CALIBRATION_BATCH = 8


def onnx_file(prefix: str) -> str:
    return prefix + ".onnx"


def calibration_file(prefix: str) -> str:
    return prefix + ".calibration.npz"


# ---------------------------------------------------------------------------------------------
# Export
# ---------------------------------------------------------------------------------------------


def export_onnx(program_file: str, params_file: str, onnx_path: str, input_names: tuple[str, ...],
                architecture: Mapping[str, int]) -> None:
    """Convert the exported Paddle program to ONNX at ONNX_OPSET, name its dynamic axes, record the architecture,
    check it with onnx.checker and write it atomically to onnx_path. ValueError naming the program when
    paddle2onnx cannot convert it (a one-line error through cli.run_main)."""
    import paddle2onnx

    try:
        # save_file=None returns the bytes without paddle2onnx's optional polygraphy pass, which installs
        # packages at run time (POLYGRAPHY_AUTOINSTALL_DEPS).
        serialized = paddle2onnx.export(program_file, params_file, None, opset_version=ONNX_OPSET,
                                        auto_upgrade_opset=False, enable_onnx_checker=True)
    except (Exception, SystemExit) as error:  # its C++ converter's errors; on some it logs them and exits
        raise ValueError(f"{program_file}: paddle2onnx could not convert the program ({error!r})") from None
    model = onnx.load_model_from_string(serialized)
    if tuple(graph_input.name for graph_input in model.graph.input) != input_names:
        raise ValueError(f"{program_file}: the converted inputs are not {list(input_names)}")
    for graph_input in model.graph.input:
        for dimension, axis in zip(graph_input.type.tensor_type.shape.dim, DYNAMIC_AXES, strict=True):
            dimension.dim_param = axis
    for output in model.graph.output:
        output.type.tensor_type.shape.dim[0].dim_param = DYNAMIC_AXES[0]
    onnx.helper.set_model_props(model, {key: str(architecture[key]) for key in ARCHITECTURE_KEYS})
    onnx.checker.check_model(model, full_check=True)
    atomic_write(onnx_path, lambda temp: onnx.save_model(model, temp))


def save_calibration(path: str, inputs: Mapping[str, np.ndarray]) -> None:
    """The calibration inputs ([N, S] int64 per input name) of static int8, written atomically."""
    def write(temp: str) -> None:
        with open(temp, "wb") as writer:  # an open file: np.savez would add ".npz" to the temporary name
            np.savez(writer, **inputs)

    atomic_write(path, write)


def load_calibration(path: str) -> dict[str, np.ndarray]:
    """The calibration inputs that save_calibration wrote, by input name; ValueError in one line naming the file
    when it is not a readable .npz of arrays that all start [features, sequence]."""
    try:
        with np.load(path) as stored:
            inputs = {name: stored[name] for name in stored.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:  # truncated, not a zip, pickled arrays
        reason = " ".join(str(error).split())  # NumPy's refusal of a huge header spans several lines
        raise ValueError(f"{path}: not a readable calibration file ({reason})") from None
    shapes = {name: array.shape for name, array in inputs.items()}
    starts = {shape[:2] for shape in shapes.values()}  # every input's [features, sequence]
    if len(starts) != 1 or any(len(start) != 2 or 0 in start for start in starts):
        raise ValueError(f"{path}: the calibration inputs do not all start with the same nonempty [features, "
                         f"sequence] ({shapes})")
    return inputs


# ---------------------------------------------------------------------------------------------
# Loading and checking
# ---------------------------------------------------------------------------------------------


def check_calibration_ids(stored: Mapping[str, np.ndarray], model: onnx.ModelProto, calibration: str) -> None:
    """ValueError in one line naming the calibration file when an input holds ids outside the table that the model
    looks it up in (a Gather of an initializer), which ONNX Runtime would read out of bounds while calibrating."""
    tables = {initializer.name: initializer.dims[0] for initializer in model.graph.initializer if initializer.dims}
    for node in model.graph.node:  # paddle2onnx writes the weights as Constant nodes
        if node.op_type == "Constant":
            value = next((attribute.t for attribute in node.attribute if attribute.name == "value"), None)
            if value is not None and value.dims:
                tables[node.output[0]] = value.dims[0]
    for node in model.graph.node:
        if node.op_type == "Gather" and len(node.input) == 2 and node.input[1] in stored and node.input[0] in tables:
            values, rows = stored[node.input[1]], tables[node.input[0]]
            if not np.issubdtype(values.dtype, np.integer) or values.min() < 0 or values.max() >= rows:
                raise ValueError(f"{calibration}: calibration input {node.input[1]!r} holds ids outside the model's "
                                 f"table of {rows} rows (from {values.min()} to {values.max()}); export again with "
                                 "--do-train --export-onnx")


def load_checked(path: str, input_names: tuple[str, ...]) -> onnx.ModelProto:
    """The ONNX model at path; FileNotFoundError or ValueError in one line naming the file when it is missing,
    is not an ONNX model, or does not take input_names."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no ONNX model (export it with --export-dir and --export-onnx)")
    try:
        model = onnx.load_model(path)
        onnx.checker.check_model(model)
    except Exception as error:  # protobuf's DecodeError, onnx's ValidationError
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ValueError(f"{path}: not a valid ONNX model ({reason})") from None
    names = tuple(graph_input.name for graph_input in model.graph.input)
    if names != input_names:
        raise ValueError(f"{path}: the model's inputs {list(names)} are not {list(input_names)}")
    return model


def architecture_of(model: onnx.ModelProto) -> tuple[int, int]:
    """(heads, hidden size) from export_onnx's metadata; (0, 0) lets ORT's optimizer look for them itself."""
    props = {prop.key: prop.value for prop in model.metadata_props}
    return tuple(int(props.get(key, 0)) for key in ARCHITECTURE_KEYS)


# ---------------------------------------------------------------------------------------------
# Graph preparation
# ---------------------------------------------------------------------------------------------


def basic_optimized(model_path: str, output_path: str) -> None:
    """ONNX Runtime's basic graph optimizations (constant folding, redundant node removal) saved to a file:
    what optimize_model's opt_level=1 does, without its torch import."""
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = output_path
    options.log_severity_level = 3  # paddle2onnx leaves unused initializers, which ORT warns about one by one
    onnxruntime.InferenceSession(model_path, options, providers=["CPUExecutionProvider"])


def _producers(graph: onnx.GraphProto) -> dict[str, onnx.NodeProto]:
    return {output: node for node in graph.node for output in node.output}


def _scalar(graph: onnx.GraphProto, name: str) -> float | None:
    for initializer in graph.initializer:
        if initializer.name == name:
            value = numpy_helper.to_array(initializer)
            return float(value.reshape(-1)[0]) if value.size == 1 else None
    return None


def standard_attention_patterns(model: onnx.ModelProto, mask_input: str) -> int:
    """Rewrite every softmax(Mul(q, c) @ k + mask) to softmax((q @ k) / (1 / c) + (1 - mask) * -10000), the form
    ORT's BERT attention fusion matches (its path with a Div: with a Mul there, it would take the scale for the
    mask's Mul); mask_input is the [B, S] graph input with 1 for tokens and 0 for padding.
    Returns the number of attention blocks rewritten; the old mask subgraph is left for the optimizer to prune."""
    graph = model.graph
    producers = _producers(graph)
    # (1 - mask) * -10000 as [B, 1, 1, S], built once for every layer
    names = [f"standard_mask.{index}" for index in range(7)]
    mask_nodes = [
        helper.make_node("Unsqueeze", [mask_input, names[0]], [names[1]]),
        helper.make_node("Unsqueeze", [names[1], names[2]], [names[3]]),
        helper.make_node("Cast", [names[3]], [names[4]], to=TensorProto.FLOAT),
        helper.make_node("Sub", ["standard_mask.one", names[4]], [names[5]]),
        helper.make_node("Mul", [names[5], "standard_mask.filter"], [names[6]]),
    ]
    constants = [numpy_helper.from_array(np.array([1], np.int64), names[0]),
                 numpy_helper.from_array(np.array([2], np.int64), names[2]),
                 numpy_helper.from_array(np.array(1.0, np.float32), "standard_mask.one"),
                 numpy_helper.from_array(np.array(MASK_FILTER_VALUE, np.float32), "standard_mask.filter")]
    rewritten = 0
    new_nodes = []
    for softmax in [node for node in graph.node if node.op_type == "Softmax"]:
        add = producers.get(softmax.input[0])
        if add is None or add.op_type != "Add":
            continue
        matmul = next((producers[name] for name in add.input if name in producers
                       and producers[name].op_type == "MatMul"), None)
        scale = producers.get(matmul.input[0]) if matmul is not None else None
        if scale is None or scale.op_type != "Mul":
            continue
        factor = next((name for name in scale.input if _scalar(graph, name) is not None), None)
        if factor is None:
            continue
        query = next(name for name in scale.input if name != factor)
        scaled, divisor = f"standard_scale.{rewritten}", f"standard_scale.{rewritten}.divisor"
        matmul.input[0] = query
        constants.append(numpy_helper.from_array(np.array(1 / _scalar(graph, factor), np.float32), divisor))
        new_nodes.append(helper.make_node("Div", [matmul.output[0], divisor], [scaled]))
        del add.input[:]
        add.input.extend([scaled, names[6]])
        rewritten += 1
    if rewritten:
        graph.initializer.extend(constants)
        graph.node.extend(mask_nodes + new_nodes)
        _sort_topologically(graph)
    return rewritten


def _sort_topologically(graph: onnx.GraphProto) -> None:
    available = {graph_input.name for graph_input in graph.input} | {init.name for init in graph.initializer}
    pending, ordered = list(graph.node), []
    while pending:
        ready = [node for node in pending if all(not name or name in available for name in node.input)]
        if not ready:
            raise ValueError("a graph rewrite left a cycle in the graph")
        for node in ready:
            available.update(node.output)
        ordered.extend(ready)
        pending = [node for node in pending if all(node is not other for other in ready)]
    del graph.node[:]
    graph.node.extend(ordered)


def fused(model_path: str, output_path: str, *, mask_input: str, skip_layer_norm: bool) -> dict[str, int]:
    """ORT's transformer fusions on the model at model_path, written to output_path; returns the fused op counts.
    With skip_layer_norm False, each residual Add and its LayerNormalization stay two ops, and so do the
    embeddings' sum and LayerNormalization (ORT's embedding fusion then finds no match).

    torch is never imported: opt_level=0 after basic_optimized, and model_type "bert" with the head count and
    hidden size given."""
    from onnxruntime.transformers import optimizer
    from onnxruntime.transformers.fusion_options import FusionOptions

    basic_path = output_path + ".basic.onnx"
    basic_optimized(model_path, basic_path)
    model = onnx.load_model(basic_path)
    os.remove(basic_path)
    # the basic pass keeps no metadata
    heads, hidden_size = architecture_of(onnx.load_model(model_path, load_external_data=False))
    standard_attention_patterns(model, mask_input)
    options = FusionOptions("bert")
    options.enable_skip_layer_norm = options.enable_bias_skip_layer_norm = skip_layer_norm
    optimized = optimizer.optimize_model(model, model_type="bert", num_heads=heads, hidden_size=hidden_size,
                                         optimization_options=options, opt_level=0, use_gpu=False)
    optimized.save_model_to_file(output_path)
    return {op: count for op, count in optimized.get_fused_operator_statistics().items() if count}


class _CalibrationReader:
    """onnxruntime.quantization's CalibrationDataReader over the exported calibration inputs, in batches cut to
    their longest row (the rest is padding), cast to the model's input types."""

    def __init__(self, inputs: Mapping[str, np.ndarray], dtypes: Mapping[str, np.dtype], mask_input: str):
        self._batches = self._cut(inputs, dtypes, mask_input)

    @staticmethod
    def _cut(inputs, dtypes, mask_input) -> Iterator[dict[str, np.ndarray]]:
        rows = len(inputs[mask_input])
        for start in range(0, rows, CALIBRATION_BATCH):
            mask = inputs[mask_input][start:start + CALIBRATION_BATCH]
            length = int(mask.sum(axis=1).max())
            yield {name: array[start:start + CALIBRATION_BATCH, :length].astype(dtypes[name])
                   for name, array in inputs.items()}

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._batches, None)


def input_dtypes(model_path: str) -> dict[str, np.dtype]:
    model = onnx.load_model(model_path, load_external_data=False)
    return {graph_input.name: helper.tensor_dtype_to_np_dtype(graph_input.type.tensor_type.elem_type)
            for graph_input in model.graph.input}


def is_static(quantization: str) -> bool:
    """Whether a QUANTIZATIONS choice calibrates its activation scales."""
    return quantization.removesuffix(PER_CHANNEL) == "static"


def needs_calibration(quantization: str) -> bool:
    """Whether a QUANTIZATIONS choice reads the exported calibration inputs: for its activation scales, or to
    find the outlier channels."""
    return is_static(quantization) or quantization.endswith(OUTLIERS)


def channel_ranges(model_path: str, inputs: Mapping[str, np.ndarray], tensor_names: list[str],
                   mask_input: str) -> dict[str, np.ndarray]:
    """Per channel (last axis) the largest magnitude of each named [B, S, C] tensor of the fp32 model over the
    tokens (not the padding) of the calibration inputs."""
    model = onnx.load_model(model_path)
    outputs = {output.name for output in model.graph.output}
    model.graph.output.extend(helper.make_empty_tensor_value_info(name) for name in tensor_names
                              if name not in outputs)
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    session = onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    ranges: dict[str, np.ndarray] = {}
    reader = _CalibrationReader(inputs, input_dtypes(model_path), mask_input)
    while (batch := reader.get_next()) is not None:
        tokens = batch[mask_input].astype(bool)  # [B, S]
        for name, tensor in zip(tensor_names, session.run(tensor_names, batch), strict=True):
            largest = np.abs(tensor[tokens]).max(axis=0)  # [C]
            ranges[name] = np.maximum(ranges[name], largest) if name in ranges else largest
    return ranges


def outlier_channels_apart(model_path: str, output_path: str, calibration: Mapping[str, np.ndarray],
                           mask_input: str) -> tuple[list[str], int]:
    """The fp32 model at model_path rewritten so that no quantized GEMM input keeps an outlier channel (above
    OUTLIER_RATIO times its median channel's range on the calibration inputs), written to output_path; the
    result in fp32 is the same. Returns the names of the GEMMs that must stay fp32, and the number of outlier
    channels.

    One activation scale per batch serves a whole GEMM input, so one channel at 28 where the median channel
    reaches 2 leaves the others a few levels. Two rewrites, both exact in real arithmetic:
    - an outlier neuron of the feed-forward layer (a channel of BiasGelu's output, which feeds the second
      GEMM) leaves both int8 GEMMs: its column of the first weight and its row of the second go to a small fp32
      path, whose result is added after the second GEMM's bias; the mixed-precision decomposition of Dettmers
      et al., 2022 (LLM.int8()), with the outliers fixed from the calibration inputs instead of found per batch;
    - any other outlier channel j is split into n_j = ceil(range_j / threshold) copies of x_j / n_j appended to
      the GEMM's input, with its weight row repeated for each copy: outlier channel splitting (Zhao et al., 2019),
      applied to activations. The input then spans at most the threshold, and the GEMM gains sum(n_j - 1) rows.
    """
    model = onnx.load_model(model_path)
    graph = model.graph
    producers = _producers(graph)
    initializers = {initializer.name: initializer for initializer in graph.initializer}
    gemms = [node for node in graph.node if node.op_type == "MatMul" and node.input[1] in initializers]
    ranges = channel_ranges(model_path, calibration, sorted({gemm.input[0] for gemm in gemms}), mask_input)
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)

    def weight(name: str) -> np.ndarray:
        return numpy_helper.to_array(initializers[name])

    def store(name: str, value: np.ndarray) -> None:
        if name in initializers:
            initializers[name].CopyFrom(numpy_helper.from_array(value, name))
        else:
            graph.initializer.append(numpy_helper.from_array(value, name))
            initializers[name] = graph.initializer[-1]

    fp32_gemms, new_nodes, outlier_count = [], [], 0
    for gemm in gemms:
        channel_range = ranges[gemm.input[0]]  # [K]
        threshold = OUTLIER_RATIO * float(np.median(channel_range))
        outliers = np.flatnonzero(channel_range > threshold)
        if not outliers.size or threshold <= 0:  # an input that is mostly zeros has no scale to protect
            continue
        outlier_count += outliers.size
        name = gemm.name + ".outliers"
        gelu = producers.get(gemm.input[0])
        first = producers.get(gelu.input[0]) if gelu is not None and gelu.op_type == "BiasGelu" else None
        after = consumers.get(gemm.output[0], [])
        bias_add = after[0] if len(after) == 1 else None
        if (first is not None and first.op_type == "MatMul" and first.input[1] in initializers
                and gelu.input[1] in initializers and bias_add is not None and bias_add.op_type == "Add"):
            # the feed-forward layer's outlier neurons in fp32
            inner, inner_bias, outer = weight(first.input[1]), weight(gelu.input[1]), weight(gemm.input[1])
            kept = np.setdiff1d(np.arange(inner.shape[1]), outliers)
            store(first.input[1], inner[:, kept])  # [H, I - k]
            store(gelu.input[1], inner_bias[kept])
            store(gemm.input[1], outer[kept])  # [I - k, H]
            store(name + ".inner", inner[:, outliers])  # [H, k]
            store(name + ".inner_bias", inner_bias[outliers])
            store(name + ".outer", outer[outliers])  # [k, H]
            result = bias_add.output[0]
            bias_add.output[0] = name + ".int8_part"
            new_nodes += [
                helper.make_node("MatMul", [first.input[0], name + ".inner"], [name + ".hidden"], name=name + ".inner"),
                helper.make_node("BiasGelu", [name + ".hidden", name + ".inner_bias"], [name + ".activation"],
                                 domain=gelu.domain, name=name + ".gelu"),
                helper.make_node("MatMul", [name + ".activation", name + ".outer"], [name + ".fp32_part"],
                                 name=name + ".outer"),
                helper.make_node("Add", [name + ".int8_part", name + ".fp32_part"], [result], name=name + ".sum")]
            fp32_gemms += [name + ".inner", name + ".outer"]
            continue
        # outlier channel splitting; the copies go after the input's channels. Each outlier channel is sliced out
        # once, a Concat of the slices (each named as often as it has copies) makes the copies, and a Concat of two
        # inputs appends them: a Gather along the last axis copies element by element (4.3 ms per GEMM input of
        # BERT-base), and a Concat of the input with many one-channel slices copies them row by row (2.7 ms).
        copies = np.ones(channel_range.size, np.int64)  # [K]
        copies[outliers] = np.ceil(channel_range[outliers] / threshold).astype(np.int64)
        repeated = np.repeat(np.arange(channel_range.size), copies - 1)  # [sum(n_j - 1)]
        matrix = weight(gemm.input[1])
        store(gemm.input[1], np.concatenate([matrix, matrix[repeated]]))  # [K + sum(n_j - 1), N]
        store(name + ".scale", (1 / copies).astype(np.float32))
        store(name + ".last_axis", np.array([-1], np.int64))
        new_nodes.append(helper.make_node("Mul", [gemm.input[0], name + ".scale"], [name + ".scaled"],
                                          name=name + ".scale"))
        for channel in outliers:
            sliced = f"{name}.channel{channel}"
            store(sliced + ".start", np.array([channel], np.int64))
            store(sliced + ".end", np.array([channel + 1], np.int64))
            new_nodes.append(helper.make_node("Slice", [name + ".scaled", sliced + ".start", sliced + ".end",
                                                        name + ".last_axis"], [sliced], name=sliced))  # [B, S, 1]
        # the copies in the order of the weight rows appended above
        copy_inputs = [f"{name}.channel{channel}" for channel in repeated]
        new_nodes += [
            helper.make_node("Concat", copy_inputs, [name + ".copies"], axis=-1, name=name + ".copies"),
            helper.make_node("Concat", [name + ".scaled", name + ".copies"], [name + ".split"], axis=-1,
                             name=name + ".split")]
        gemm.input[0] = name + ".split"
    graph.node.extend(new_nodes)
    _sort_topologically(graph)
    onnx.save_model(model, output_path)
    return fp32_gemms, outlier_count


def quantized(fused_path: str, output_path: str, quantization: str, calibration: Mapping[str, np.ndarray] | None,
              mask_input: str) -> int:
    """int8 weights (and, for "static", calibrated int8 activations) of the fused model, written to output_path;
    returns the number of outlier channels taken apart (OUTLIERS), else 0. calibration: the load_calibration
    inputs, for the choices that needs_calibration names."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_dynamic, quantize_static

    per_channel = PER_CHANNEL in quantization
    if not is_static(quantization):
        fp32_gemms, outlier_count = [], 0
        if quantization.endswith(OUTLIERS):
            apart_path = output_path + ".apart.onnx"
            fp32_gemms, outlier_count = outlier_channels_apart(fused_path, apart_path, calibration, mask_input)
            fused_path = apart_path
        # Gathers (the embedding tables) stay fp32: a lookup gains nothing from int8.
        quantize_dynamic(fused_path, output_path, op_types_to_quantize=["MatMul", "Attention"],
                         nodes_to_exclude=fp32_gemms, per_channel=per_channel, weight_type=QuantType.QInt8,
                         extra_options=FUSED_OUTPUT_TYPE)
        return outlier_count
    reader = _CalibrationReader(calibration, input_dtypes(fused_path), mask_input)
    quantize_static(fused_path, output_path, reader, quant_format=QuantFormat.QDQ, op_types_to_quantize=["MatMul"],
                    per_channel=per_channel, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                    extra_options=FUSED_OUTPUT_TYPE)
    return 0


@contextlib.contextmanager
def _quiet_root_logger(level: int) -> Iterator[None]:
    """ORT's fusion and quantization modules log every step to the root logger (which Paddle sets to INFO); a run
    prints what was prepared in one line instead. The quantizer also advises its pre-processing script at WARNING:
    its shape inference is what DefaultTensorType replaces here."""
    previous = logging.root.level
    logging.root.setLevel(max(previous, level))
    try:
        yield
    finally:
        logging.root.setLevel(previous)


def prepared_model(onnx_path: str, work_dir: str, precision: str, quantization: str, input_names: tuple[str, ...],
                   mask_input: str, *, skip_layer_norm: bool) -> str:
    """The path of the model an ONNX Runtime session runs in `precision` (module docstring), prepared in work_dir
    from the checked export at onnx_path; skip_layer_norm as fused takes it."""
    model = load_checked(onnx_path, input_names)
    calibration = calibration_file(os.path.splitext(onnx_path)[0])
    stored = None  # the calibration inputs, read once here for the choices that need them
    if precision == "int8" and needs_calibration(quantization):
        if not os.path.isfile(calibration):
            raise FileNotFoundError(f"{calibration}: no calibration inputs for --int8-quantization {quantization} "
                                    "(export with --do-train --export-onnx, which saves them from the training "
                                    "file, or choose dynamic or dynamic-per-channel, which need none)")
        stored = load_calibration(calibration)
        missing = [name for name in input_names if name not in stored]
        if missing:  # checked here, before minutes of graph preparation
            raise ValueError(f"{calibration}: no calibration input {missing[0]!r} (it has {sorted(stored)})")
        check_calibration_ids(stored, model, calibration)
    if precision == "int8" and is_static(quantization):
        # ORT's static quantizer cannot see through the fused com.microsoft ops (their outputs have no types for
        # its calibration), so it quantizes the graph of standard ops; the session's own fusions run after.
        basic_path = os.path.join(work_dir, "basic.onnx")
        basic_optimized(onnx_path, basic_path)
        output_path = os.path.join(work_dir, f"int8-{quantization}.onnx")
        with _quiet_root_logger(logging.ERROR):
            quantized(basic_path, output_path, quantization, stored, mask_input)
        print(f"{onnx_path}: int8 with {quantization} quantization, calibrated on {calibration}", flush=True)
        return output_path
    fused_path = os.path.join(work_dir, "fused.onnx")
    with _quiet_root_logger(logging.WARNING):
        counts = fused(onnx_path, fused_path, mask_input=mask_input, skip_layer_norm=skip_layer_norm)
    print(f"{onnx_path}: fused " + ", ".join(f"{count} {op}" for op, count in counts.items()), flush=True)
    if precision == "fp32":
        return fused_path
    output_path = os.path.join(work_dir, f"{precision}.onnx")
    if precision == "fp16":
        from onnxruntime.transformers.onnx_model import OnnxModel

        model = OnnxModel(onnx.load_model(fused_path))
        model.convert_float_to_float16(keep_io_types=True)
        model.save_model_to_file(output_path)
        return output_path
    with _quiet_root_logger(logging.ERROR):
        outlier_count = quantized(fused_path, output_path, quantization, stored, mask_input)
    if quantization.endswith(OUTLIERS):
        print(f"{onnx_path}: int8 with {quantization} quantization, {outlier_count} outlier channels of the GEMM "
              f"inputs kept apart (found on {calibration})", flush=True)
    return output_path


def temporary_work_dir() -> tempfile.TemporaryDirectory:
    """Where prepared_model writes: the prepared graphs are rebuilt on every run and never left in the model dir."""
    return tempfile.TemporaryDirectory(prefix="paddlebert-onnx-")
