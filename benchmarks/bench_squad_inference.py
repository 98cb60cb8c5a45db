"""SQuAD inference speed: sequences/s of our span model against PaddleNLP's and transformers', interleaved in one run.

Contenders (CONTENDERS), each group in its own worker process with the same thread count:

- ours:         our BertForQuestionAnswering in dygraph, with paddle.jit.to_static, through the exported
                Paddle Inference predictor that `run_squad.py --inference-model-dir` uses (inference.py), in
                each precision of OUR_PREDICTOR_PRECISIONS (fp32 and oneDNN bf16), and through the ONNX
                Runtime session of `--inference-backend onnxruntime` in each of OUR_ONNXRUNTIME_RUNS (fp32
                with ORT's transformer fusions, int8 with GLUE's and with SQuAD's --int8-quantization
                default), and through OpenVINO (`--inference-backend openvino`) in each of
                OUR_OPENVINO_PRECISIONS (int8 quantized by NNCF on random calibration rows); the process gets the CPU
                settings run_squad.py applies;
- paddlenlp:    paddlenlp 2.8.1's BertForQuestionAnswering in the same three forms (--paddlenlp-python);
- transformers: HF BertForQuestionAnswering on torch, eager, torch.compile and eager under bf16 autocast
                (--torch-python).

Ours and transformers also time the matmuls of the model's forward pass (gemm_shapes) with nothing between them,
each an upper bound on the contenders that compute those matmuls in its precision (BOUNDED): GEMMS_ALONE, in fp32,
in ONNX Runtime (our faster fp32 backend; Paddle's dygraph batched matmul is slower) and in torch; INT8_GEMMS_ALONE
in ONNX Runtime as our int8 graphs compute them; BF16_GEMMS_ALONE in torch. The report gives each contender as a
share of the faster bound of its precision, and the int8 bound against the bf16 contenders: the highest ratio to
them an int8 graph could reach whose attention runs in ONNX Runtime's CPU attention kernels (fp32 inside).

    benchmarks/setup_peers.sh /work/peers && export PADDLEBERT_PEERS_DIR=/work/peers
    python benchmarks/bench_squad_inference.py                      # BERT-base, batch 8, seq 384, 3 rounds
    python benchmarks/bench_squad_inference.py --shapes 8x384 1x128 # and the latency case, batch 1, seq 128
    python benchmarks/bench_squad_inference.py --only ours --config bert_configs/bert-tiny-uncased.json

For each shape (--shapes) every contender first runs untimed (torch.compile compiles then), then the contenders take
turns, `--passes` timed forward passes each, round after round, the order rotating every round and each turn
starting once the last one's threads have settled (workers.take_turn), so that a change in machine load hits all
of them alike. The figures are medians over rounds; each ratio of ours to a peer is the median of the per-round
ratios. Inputs are the same random token ids in every worker, with no padding (every sequence is seq_length tokens
long); weights are random, which inference speed does not see, except for int8 with its outlier channels apart:
our model gets outlier channels put in (put_outlier_channels).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import machine
import peers
import workers

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = "bench_squad_inference.py"
# Our exported predictor's CPU precisions (inference.INFERENCE_PRECISIONS; fp16 is the GPU's). On a CPU without
# bf16 instructions the bf16 row runs fp32, which the worker prints.
OUR_PREDICTOR_PRECISIONS = ("fp32", "bf16")
# Our ONNX Runtime session's CPU precisions (bf16 runs fp32 there, inference.resolve_precision says why) with,
# for int8, its --int8-quantization: run_glue.py's default and run_squad.py's (tests/test_benchmarks.py checks).
OUR_ONNXRUNTIME_RUNS = (("fp32", None), ("int8", "dynamic-per-channel"), ("int8", "dynamic-per-channel-outliers"))
# OpenVINO's CPU precisions (bf16 runs fp32 on a CPU without bf16 instructions, which the worker prints).
OUR_OPENVINO_PRECISIONS = ("fp32", "bf16", "int8")
# Random weights have none of the outlier activation channels of a trained BERT, which the -outliers int8 takes
# apart at a cost that grows with their number and their size (an input channel of range r gets ceil(r / threshold)
# copies). So every layer of our model gets some: OUTLIER_CHANNELS of the attention's LayerNorm output (the
# feed-forward input) and OUTLIER_CHANNELS neurons of the feed-forward layer, scaled by OUTLIER_SCALES. The
# fine-tuned all-MiniLM-L6-v2 of docs/inference.md had 21 over its 6 layers, the largest 16 times the median
# channel's range (LayerNorm outputs 30.2 against 1.9, GELU outputs 24.4 against 1.4). These scales give 42 over 12
# layers, LayerNorm outputs 5 to 15 times the median and GELU outputs 4 to 18 times. (The LayerNorm's channels pass
# into the residual stream and grow from layer to layer: one scale of 20 for both made them 700 times the median
# in the later layers, with 39 copies of each in the second.)
OUTLIER_CHANNELS = (7, 300)
OUTLIER_SCALES = {"attention_layer_norm": 1.5, "intermediate": 8.0}
# Random rows whose activation ranges find the outlier channels (the export's calibration inputs).
CALIBRATION_SHAPE = (16, 128)


def onnxruntime_mode(precision: str, quantization: str | None) -> str:
    """The report's name of one of OUR_ONNXRUNTIME_RUNS, e.g. "onnxruntime int8 dynamic-per-channel"."""
    return " ".join(("onnxruntime", precision, *([quantization] if quantization else [])))


# The modes that run only the model's matmuls (gemm_shapes): bounds, not contenders to compare. GEMMS_ALONE in
# fp32; INT8_GEMMS_ALONE as ONNX Runtime's int8 graphs compute them (onnxruntime_multiplier): the Linear layers'
# inputs quantized per call against int8 weights with one scale per column (DynamicQuantizeMatMul), the attention's
# two products in fp32, as every ORT CPU attention kernel computes them (QAttention too); BF16_GEMMS_ALONE in
# torch's bf16 matmuls.
GEMMS_ALONE = "fp32 GEMMs alone"
INT8_GEMMS_ALONE = "int8 GEMMs alone"
BF16_GEMMS_ALONE = "bf16 GEMMs alone"
# (worker, mode): the rows of the report, in this order.
CONTENDERS = (
    ("ours", "dygraph"), ("ours", "to_static"), *(("ours", f"predictor {p}") for p in OUR_PREDICTOR_PRECISIONS),
    *(("ours", onnxruntime_mode(*run)) for run in OUR_ONNXRUNTIME_RUNS),
    *(("ours", f"openvino {precision}") for precision in OUR_OPENVINO_PRECISIONS), ("ours", GEMMS_ALONE),
    ("ours", INT8_GEMMS_ALONE),
    ("paddlenlp", "dygraph"), ("paddlenlp", "to_static"), ("paddlenlp", "predictor"),
    ("transformers", "eager"), ("transformers", "torch.compile"), ("transformers", "bf16 autocast"),
    ("transformers", GEMMS_ALONE), ("transformers", BF16_GEMMS_ALONE),
)
# The contenders that compute in fp32 throughout, in int8 and in bf16, each set against the faster bound of its
# precision (BOUNDED). The int8 bound is ONNX Runtime's GEMMs, so it bounds ONNX Runtime's int8 graphs only:
# OpenVINO's int8 has its own kernels (AMX's on a CPU that has them) and its attention's products in int8 too.
FP32_CONTENDERS = (("ours", "dygraph"), ("ours", "to_static"), ("ours", "predictor fp32"), ("ours", "onnxruntime fp32"),
                   ("ours", "openvino fp32"), ("paddlenlp", "dygraph"), ("paddlenlp", "to_static"),
                   ("paddlenlp", "predictor"), ("transformers", "eager"), ("transformers", "torch.compile"))
INT8_CONTENDERS = tuple(("ours", onnxruntime_mode(*run)) for run in OUR_ONNXRUNTIME_RUNS if run[0] == "int8")
BF16_CONTENDERS = (("ours", "predictor bf16"), ("ours", "openvino bf16"), ("transformers", "bf16 autocast"))
BOUNDED = {GEMMS_ALONE: FP32_CONTENDERS, INT8_GEMMS_ALONE: INT8_CONTENDERS, BF16_GEMMS_ALONE: BF16_CONTENDERS}
# Pairs of our own contenders whose ratio is reported too: int8, or another backend's bf16, is worth shipping only
# where it beats our Paddle bf16.
OWN_COMPARISONS = tuple((contender, ("ours", "predictor bf16"))
                        for contender in (*INT8_CONTENDERS, ("ours", "openvino int8"), ("ours", "openvino bf16")))
WORKER_NAMES = tuple(dict.fromkeys(worker for worker, _ in CONTENDERS))
# The peers' workers run in their own venvs (peers.py).
PEER_WORKERS = {"paddlenlp": "paddlenlp", "transformers": "transformers"}
# The architecture fields of a Google-style BERT config, which every framework's BertConfig takes by name.
ARCHITECTURE_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                     "hidden_act", "hidden_dropout_prob", "attention_probs_dropout_prob", "max_position_embeddings",
                     "type_vocab_size", "initializer_range")


def random_batch(batch_size: int, seq_length: int):
    """[B, S] input_ids, token_type_ids (second half 1) and attention_mask (all 1), the same in every worker."""
    import numpy as np

    rng = np.random.default_rng(0)
    input_ids = rng.integers(1000, 20000, (batch_size, seq_length), dtype=np.int64)
    token_type_ids = np.zeros_like(input_ids)
    token_type_ids[:, seq_length // 2:] = 1
    return input_ids, token_type_ids, np.ones_like(input_ids)


def gemm_shapes(config_path: str, batch_size: int, seq_length: int) -> list[tuple[int, int, int, int]]:
    """(count, m, k, n) of every matmul in one forward pass of the span model, [count, m, k] @ [count, k, n]:
    per layer the fused query/key/value projection, the attention scores and context (one product per sequence and
    head), the attention output and the two feed-forward layers; then the span head. The embeddings' lookups,
    softmax, LayerNorm, GELU and the bias additions are left out."""
    config = architecture(config_path)
    hidden, inner = config["hidden_size"], config["intermediate_size"]
    heads = config["num_attention_heads"]
    tokens, head_size = batch_size * seq_length, hidden // heads
    layer = [(1, tokens, hidden, 3 * hidden),
             (batch_size * heads, seq_length, head_size, seq_length),  # Q K^T
             (batch_size * heads, seq_length, seq_length, head_size),  # probabilities V
             (1, tokens, hidden, hidden), (1, tokens, hidden, inner), (1, tokens, inner, hidden)]
    return layer * config["num_hidden_layers"] + [(1, tokens, hidden, 2)]


def gemms_alone(config_path: str, random, multiplier):
    """A runner of GEMMS_ALONE: a @ b for each of gemm_shapes, by multiplier(b, is_weight)(a), over random(shape)
    operands. The right-hand operands of the Linear layers (count 1) are their weights, which a framework may
    prepare once, as ONNX Runtime packs a model's. Operands are made once per input shape and shared by the layers
    (so they may stay in cache, which only raises the bound). It returns None: there are no logits to compare."""
    products = {}

    def prepared(count: int, m: int, k: int, n: int) -> tuple:
        batch = [count] if count > 1 else []
        return random([*batch, m, k]), multiplier(random([*batch, k, n]), count == 1)

    def run(input_ids, token_type_ids, attention_mask):
        if input_ids.shape not in products:
            products[input_ids.shape] = {shape: prepared(*shape)
                                         for shape in set(gemm_shapes(config_path, *input_ids.shape))}
        for shape in gemm_shapes(config_path, *input_ids.shape):
            a, multiply = products[input_ids.shape][shape]
            multiply(a)
    return run


def put_outlier_channels(model) -> None:
    """Scale the OUTLIER_CHANNELS of every layer's attention LayerNorm gamma and of its first feed-forward
    layer's weight columns by their OUTLIER_SCALES, in place (their betas and biases start at zero)."""
    import paddle

    with paddle.no_grad():
        for layer in model.bert.encoder:
            for sublayer, scale in OUTLIER_SCALES.items():
                parameter = getattr(layer, sublayer).weight
                values = parameter.numpy()
                channels = [channel % values.shape[-1] for channel in OUTLIER_CHANNELS]
                values[..., channels] *= scale
                parameter.set_value(values)


def architecture(config_path: str) -> dict:
    with open(config_path, encoding="utf-8") as reader:
        values = json.load(reader)
    return {key: values[key] for key in ARCHITECTURE_KEYS}


# ---------------------------------------------------------------------------------------------
# Workers: each builds its models and returns mode -> function(input_ids, token_type_ids, attention_mask)
# that returns the start logits as a NumPy array
# ---------------------------------------------------------------------------------------------


def build_ours(config_path: str, threads: int, export_dir: str) -> dict:
    sys.path.insert(0, str(ROOT))
    import numpy as np
    import paddle

    from bert_config import BertConfig
    from inference import inference, onnx_backend
    from modeling import BertForQuestionAnswering, standard_copy
    from training.amp import AmpPolicy
    from training.runtime import apply_cpu_tweaks

    apply_cpu_tweaks()  # as run_squad.py does on a CPU
    paddle.base.core.set_num_threads(threads)
    paddle.seed(0)
    model = BertForQuestionAnswering(BertConfig.from_json_file(config_path))
    model.eval()
    put_outlier_channels(model)
    input_spec = [paddle.static.InputSpec([None, None], "int64", name) for name in inference.INPUT_NAMES]
    static_model = paddle.jit.to_static(standard_copy(model), input_spec=input_spec, full_graph=True)
    prefix = inference.export_inference_model(model, export_dir, "qa")
    inference.export_onnx_model(model, prefix)
    onnx_backend.save_calibration(onnx_backend.calibration_file(prefix),
                                  dict(zip(inference.INPUT_NAMES, random_batch(*CALIBRATION_SHAPE), strict=True)))
    runners = {"dygraph": inference.dygraph_predictor(model, AmpPolicy()),
               "to_static": inference.dygraph_predictor(static_model, AmpPolicy())}
    for precision in OUR_PREDICTOR_PRECISIONS:
        runs, notice = inference.resolve_precision("paddle", "cpu", precision)
        if notice:
            print(f"predictor {precision}: {notice}", file=sys.stderr, flush=True)
        runners[f"predictor {precision}"] = inference.inference_predictor(export_dir, "qa", threads,
                                                                          inference.predictor_settings("cpu", runs))
    for precision, quantization in OUR_ONNXRUNTIME_RUNS:
        runners[onnxruntime_mode(precision, quantization)] = inference.onnxruntime_predictor(
            export_dir, "qa", precision, quantization, "cpu", threads)
    for precision in OUR_OPENVINO_PRECISIONS:
        runs, notice = inference.resolve_precision("openvino", "cpu", precision)
        if notice:
            print(f"openvino {precision}: {notice}", file=sys.stderr, flush=True)
        runners[f"openvino {precision}"] = inference.openvino_predictor(export_dir, "qa", runs, threads)
    runs = {mode: start_logits_of(run) for mode, run in runners.items()}
    rng = np.random.default_rng(0)
    settings = inference.onnxruntime_session_settings("cpu", threads)

    def random(shape):
        return rng.standard_normal(shape, np.float32)
    return {**runs, GEMMS_ALONE: gemms_alone(config_path, random, onnxruntime_multiplier(settings)),
            INT8_GEMMS_ALONE: gemms_alone(config_path, random, onnxruntime_multiplier(settings, int8_weights=True))}


def onnxruntime_multiplier(settings: dict, *, int8_weights: bool = False):
    """multiplier(b, is_weight) of gemms_alone: a function of a that gives a @ b (float32) in an ONNX Runtime
    session of one node, made with our sessions' settings (inference.onnxruntime_session_settings) but threads
    that sleep when done. A weight is the graph's initializer, which ORT packs once as it does the model's; any
    other b is fed with each a. With int8_weights a weight is int8 with one scale per column and a is quantized per
    call (DynamicQuantizeMatMul, the node ORT makes of the dynamic int8 graph's DynamicQuantizeLinear, MatMulInteger
    and rescaling); products of two activations stay MatMul in fp32, as in ORT's int8 attention."""
    import numpy as np
    import onnxruntime
    from onnx import TensorProto, helper, numpy_helper

    def multiplier(b, is_weight: bool):
        inputs = [helper.make_tensor_value_info("a", TensorProto.FLOAT, None)]
        if not is_weight:
            inputs.append(helper.make_tensor_value_info("b", TensorProto.FLOAT, b.shape))
            node, initializer = helper.make_node("MatMul", ["a", "b"], ["c"]), []
        elif int8_weights:
            scale = np.maximum(np.abs(b).max(axis=0), np.finfo(np.float32).tiny) / 127  # symmetric, per column
            quantized = np.clip(np.rint(b / scale), -127, 127).astype(np.int8)
            node = helper.make_node("DynamicQuantizeMatMul", ["a", "b", "b_scale"], ["c"], domain="com.microsoft")
            initializer = [numpy_helper.from_array(quantized, "b"),
                           numpy_helper.from_array(scale.astype(np.float32), "b_scale")]
        else:
            node, initializer = helper.make_node("MatMul", ["a", "b"], ["c"]), [numpy_helper.from_array(b, "b")]
        graph = helper.make_graph([node], "matmul", inputs,
                                  [helper.make_tensor_value_info("c", TensorProto.FLOAT, None)],
                                  initializer=initializer)
        options = onnxruntime.SessionOptions()
        for name, value in settings["options"].items():
            setattr(options, name, value)
        # Each session has its own thread pool, whose threads would spin on after their MatMul and take the cores
        # from the next session's (the GEMMs ran at half speed so).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                        helper.make_opsetid("com.microsoft", 1)])
        session = onnxruntime.InferenceSession(model.SerializeToString(), options, providers=settings["providers"])
        fed = {} if is_weight else {"b": b}
        return lambda a: session.run(None, {"a": a, **fed})[0]
    return multiplier


def start_logits_of(run):
    """inference.BatchPredictor, reduced to the start logits that the workers compare."""
    return lambda *batch: run(*batch)[0]


def build_paddlenlp(config_path: str, threads: int, export_dir: str) -> dict:
    import paddle
    from paddlenlp.transformers import BertConfig, BertForQuestionAnswering

    paddle.base.core.set_num_threads(threads)
    paddle.seed(0)
    config = BertConfig(**architecture(config_path))
    model = BertForQuestionAnswering(config)
    model.eval()
    input_spec = [paddle.static.InputSpec([None, None], "int64", name) for name in ("input_ids", "token_type_ids")]
    static_model = BertForQuestionAnswering(config)
    static_model.set_state_dict(model.state_dict())
    static_model.eval()
    static_model = paddle.jit.to_static(static_model, input_spec=input_spec, full_graph=True)
    prefix = os.path.join(export_dir, "paddlenlp_qa")
    paddle.jit.save(model, prefix, input_spec=input_spec)
    program = prefix + ".json" if os.path.isfile(prefix + ".json") else prefix + ".pdmodel"
    predictor_config = paddle.inference.Config(program, prefix + ".pdiparams")
    predictor_config.disable_gpu()
    predictor_config.enable_mkldnn()
    predictor_config.disable_glog_info()
    predictor_config.set_cpu_math_library_num_threads(threads)
    predictor = paddle.inference.create_predictor(predictor_config)

    # No padding in the inputs, so PaddleNLP's default attention mask (attend everywhere) is the same.
    def eager(layer):
        def run(input_ids, token_type_ids, attention_mask):
            with paddle.no_grad():
                start, _ = layer(paddle.to_tensor(input_ids), token_type_ids=paddle.to_tensor(token_type_ids))
            return start.numpy()
        return run

    def predict(input_ids, token_type_ids, attention_mask):
        predictor.get_input_handle("input_ids").copy_from_cpu(input_ids)
        predictor.get_input_handle("token_type_ids").copy_from_cpu(token_type_ids)
        predictor.run()
        return predictor.get_output_handle(predictor.get_output_names()[0]).copy_to_cpu()

    return {"dygraph": eager(model), "to_static": eager(static_model), "predictor": predict}


def build_transformers(config_path: str, threads: int, export_dir: str) -> dict:
    import torch
    from transformers import BertConfig, BertForQuestionAnswering

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = BertForQuestionAnswering(BertConfig(**architecture(config_path), attn_implementation="sdpa"))
    model.eval()
    compiled = torch.compile(model)

    def multiplier(b, is_weight: bool):
        return lambda a: torch.matmul(a, b)

    def runner(module, autocast: bool):
        def run(input_ids, token_type_ids, attention_mask):
            with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                output = module(input_ids=torch.from_numpy(input_ids), token_type_ids=torch.from_numpy(token_type_ids),
                                attention_mask=torch.from_numpy(attention_mask))
            return output.start_logits.float().numpy()
        return run

    return {"eager": runner(model, False), "torch.compile": runner(compiled, False),
            "bf16 autocast": runner(model, True),
            GEMMS_ALONE: gemms_alone(config_path, lambda shape: torch.randn(shape), multiplier),
            BF16_GEMMS_ALONE: gemms_alone(config_path, lambda shape: torch.randn(shape, dtype=torch.bfloat16),
                                          multiplier)}


BUILDERS = {"ours": build_ours, "paddlenlp": build_paddlenlp, "transformers": build_transformers}


def worker_answers(kind: str, config_path: str, threads: int, export_dir: str):
    """The worker's request handler: {"warm": [B, S]} runs every mode once and replies each mode's largest
    difference in start logits from the first mode (the BOUNDED modes have none); {"mode": M, "shape": [B, S],
    "passes": P} replies the wall seconds of P forward passes."""
    runners = BUILDERS[kind](config_path, threads, export_dir)

    def answer(request: dict) -> dict:
        if "warm" in request:
            batch = random_batch(*request["warm"])
            outputs = {mode: run(*batch) for mode, run in runners.items()}
            first = next(iter(outputs.values()))
            return {"difference": {mode: float(abs(output - first).max()) for mode, output in outputs.items()
                                   if mode not in BOUNDED}}
        batch, seconds = random_batch(*request["shape"]), []
        for _ in range(request["passes"]):
            start = time.perf_counter()
            runners[request["mode"]](*batch)
            seconds.append(time.perf_counter() - start)
        return {"seconds": seconds}

    return answer


# ---------------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------------


def start_worker(kind: str, python: str, config: str, threads: int) -> workers.WorkerProcess:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               PADDLEBERT_NUM_THREADS=str(threads))
    command = [python, __file__, "--worker", kind, "--config", config, "--threads", str(threads)]
    return workers.WorkerProcess(kind, command, env=env, cwd=str(ROOT))


def contender_name(contender: tuple[str, str]) -> str:
    return " ".join(contender)


def time_batch(pool: dict, contenders: list, shape: list[int], rounds: int, passes: int) -> dict:
    """Contender -> its sequences/s in each round, the contenders taking turns in a rotating order."""
    throughput = {contender: [] for contender in contenders}
    for round_index in range(rounds):
        shift = round_index % len(contenders)
        for worker, mode in contenders[shift:] + contenders[:shift]:
            seconds = workers.take_turn(pool[worker], {"mode": mode, "shape": shape, "passes": passes})["seconds"]
            throughput[(worker, mode)].append(shape[0] / statistics.median(seconds))
    return throughput


def report_lines(throughput: dict) -> list[str]:
    """The report of one batch size: every contender's median seq/s, then each of our contenders' ratios
    to every peer's and the OWN_COMPARISONS present, then for each precision of BOUNDED its contenders' shares of
    the faster bound, and the int8 bound's ratio to each bf16 contender (the ceiling of int8's ratios to them),
    each the median of the per-round ratios."""
    def ratio(mine: tuple[str, str], other: tuple[str, str]) -> float:
        return statistics.median(a / b for a, b in zip(throughput[mine], throughput[other], strict=True))

    lines = []
    for contender, values in throughput.items():
        per_round = ", ".join(f"{value:.2f}" for value in values)
        lines.append(f"  {contender_name(contender):28s} {statistics.median(values):8.2f} seq/s   "
                     f"(rounds: {per_round})")
    compared = [contender for contender in throughput if contender[1] not in BOUNDED]
    ours = [contender for contender in compared if contender[0] == "ours"]
    others = [contender for contender in compared if contender[0] != "ours"]
    for mine in ours if others else []:
        lines.append(f"  {contender_name(mine)}: " + ", ".join(
            f"{ratio(mine, other):.2f}x {contender_name(other)}" for other in others))
    for mine, other in OWN_COMPARISONS:
        if mine in throughput and other in throughput:
            lines.append(f"  {contender_name(mine)}: {ratio(mine, other):.2f}x {contender_name(other)}")
    faster_bound = {}
    for mode, bounded in BOUNDED.items():
        bounds = [contender for contender in throughput if contender[1] == mode]
        present = [contender for contender in bounded if contender in throughput]
        if bounds:
            faster_bound[mode] = max(bounds, key=lambda contender: statistics.median(throughput[contender]))
        if bounds and present:
            bound = faster_bound[mode]
            lines.append(f"  share of {contender_name(bound)} ({statistics.median(throughput[bound]):.2f} seq/s): "
                         + ", ".join(f"{contender_name(contender)} {ratio(contender, bound):.2f}"
                                     for contender in present))
    bf16 = [contender for contender in BF16_CONTENDERS if contender in throughput]
    if INT8_GEMMS_ALONE in faster_bound and bf16:
        bound = faster_bound[INT8_GEMMS_ALONE]
        lines.append(f"  {contender_name(bound)}: " + ", ".join(
            f"{ratio(bound, contender):.2f}x {contender_name(contender)}" for contender in bf16))
    return lines


def batch_shape(text: str) -> list[int]:
    """[batch, seq] of a --shapes value such as 8x384; argparse turns the ValueError into a one-line error."""
    batch, _, seq = text.partition("x")
    if not (batch.isdigit() and seq.isdigit() and int(batch) > 0 and int(seq) > 0):
        raise ValueError(text)
    return [int(batch), int(seq)]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default=str(ROOT / "bert_configs" / "bert-base-uncased.json"),
                        help="BERT config JSON of every contender's model (Google's field names).")
    parser.add_argument("--shapes", type=batch_shape, nargs="+", default=[batch_shape("8x384")],
                        help="BATCHxSEQ of the inputs, timed one after the other: 8x384 (the default) is the "
                             "throughput case, 1x128 the latency case.")
    parser.add_argument("--rounds", type=int, default=3, help="Rounds in which every contender takes a turn.")
    parser.add_argument("--passes", type=int, default=2, help="Timed forward passes per contender per round.")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                        help="CPU threads of every contender.")
    peers.add_contender_flags(parser, WORKER_NAMES, *PEER_WORKERS.values())
    parser.add_argument("--worker", choices=sorted(BUILDERS), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.only = peers.chosen_contenders(parser, args, WORKER_NAMES)
    if min(args.threads, args.rounds, args.passes) < 1:
        parser.error("--threads, --rounds and --passes must be at least 1")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker:
        with tempfile.TemporaryDirectory() as export_dir:
            workers.serve(lambda: worker_answers(args.worker, args.config, args.threads, export_dir))
        return
    machine.print_header()
    pythons = {name: sys.executable for name in args.only}
    pythons.update(peers.peer_pythons(args, PEER_WORKERS, args.only, SCRIPT))
    contenders = [contender for contender in CONTENDERS if contender[0] in args.only]
    print(f"config {args.config}, {args.threads} threads per contender, {args.rounds} rounds "
          f"of {args.passes} timed passes; load average {os.getloadavg()[0]:.1f}", flush=True)
    pool = {}
    try:
        for name in args.only:
            pool[name] = start_worker(name, pythons[name], args.config, args.threads)
        for batch_size, seq_length in args.shapes:
            shape = [batch_size, seq_length]
            print(f"\nbatch {batch_size}, seq {seq_length}:")
            for name, worker in pool.items():
                difference = worker.request({"warm": shape})["difference"]
                print(f"  {name}: start logits differ from {next(iter(difference))} by at most "
                      + ", ".join(f"{value:.1e} ({mode})" for mode, value in list(difference.items())[1:]))
            throughput = time_batch(pool, contenders, shape, args.rounds, args.passes)
            print("\n".join(report_lines(throughput)), flush=True)
    finally:
        for worker in pool.values():
            worker.close()
    print(f"\nload average now {os.getloadavg()[0]:.1f}\n{workers.warning_report(pool.values())}")


if __name__ == "__main__":
    main()
