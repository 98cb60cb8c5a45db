"""Exported models and Paddle Inference predictors for the fine-tuned heads (run_squad.py, run_glue.py).

A task script adds the option group (add_inference_arguments), checks it (check_inference_arguments), exports
its fine-tuned model with --export-dir (export_inference_model) and predicts through the exported model with
--inference-model-dir (predictor_for). A predictor, exported or dygraph, is called like the model on the
[B, S] int64 arrays of INPUT_NAMES and returns the model's outputs as NumPy arrays: SQuAD's start and end
logits [B, S], GLUE's logits [B, num_labels]; each task keeps only its own handling of them.

Precisions (--inference-precision), decided once in resolve_precision:
- a CPU runs fp32 with oneDNN kernels, or bf16 through oneDNN where the CPU has native bf16 instructions
  (Paddle's supports_bfloat16_fast_performance: AVX512-BF16 or AMX); on a CPU without them bf16 runs fp32;
- a GPU runs fp32 or fp16, optionally through TensorRT (--use-tensorrt); bf16 there runs fp16.
Whatever runs instead of the choice is said in one line. int8 is not offered: README, "Exported models and
reduced precision", says what fails on Paddle 3.3.1's CPU build.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping
from types import MappingProxyType

import numpy as np
import paddle

from amp import AmpPolicy, amp_autocast
from finetune import INPUT_NAMES
from modeling import standard_copy

INFERENCE_PRECISIONS = ("fp32", "bf16", "fp16")
# Initial size of Paddle Inference's GPU memory pool; it grows on demand.
GPU_MEMORY_POOL_MB = 1024
# Runs the model on a collated batch: (input_ids, token_type_ids, attention_mask) [B, S] -> the model's outputs
BatchPredictor = Callable[[np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, ...]]

# What Paddle Inference runs on a CPU: the exported program with oneDNN kernels, 2.4x the default CPU kernels
# for BERT-base on this machine (benchmarks/bench_squad_inference.py).
CPU_SETTINGS: Mapping[str, Mapping] = MappingProxyType({"disable_gpu": {}, "enable_onednn": {}})


# ---------------------------------------------------------------------------------------------
# Options
# ---------------------------------------------------------------------------------------------


def add_inference_arguments(group: argparse._ArgumentGroup) -> None:
    """--export-dir, --inference-model-dir, --inference-precision and --use-tensorrt."""
    group.add_argument("--export-dir",
                       help="save the model with paddle.jit.save to <export-dir>/<model-prefix> for Paddle Inference")
    group.add_argument("--inference-model-dir",
                       help="predict with the Paddle Inference predictor of a model exported by --export-dir")
    group.add_argument("--inference-precision", choices=INFERENCE_PRECISIONS, default="fp32",
                       help="--inference-model-dir: the precision of the predictor's kernels; bf16 on a CPU with "
                            "bf16 instructions (else fp32), fp16 on a GPU (bf16 there runs fp16)")
    group.add_argument("--use-tensorrt", action="store_true",
                       help="--inference-model-dir on a GPU: run the model through TensorRT engines")


def check_inference_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Exit through parser.error where the inference options do not fit together. (Without training or export,
    --inference-model-dir is left only prediction or evaluation to do, which check_shared_arguments requires.)"""
    if args.inference_model_dir and (args.do_train or args.export_dir or args.from_pretrained_params
                                     or args.from_checkpoint):
        parser.error("--inference-model-dir predicts with an exported model; it cannot train, export or load "
                     "--from-pretrained-params or --from-checkpoint")
    if not args.inference_model_dir and (args.use_tensorrt or args.inference_precision != "fp32"):
        parser.error("--inference-precision and --use-tensorrt are only used with --inference-model-dir")


# ---------------------------------------------------------------------------------------------
# Export
# ---------------------------------------------------------------------------------------------


def export_inference_model(model: paddle.nn.Layer, export_dir: str, model_prefix: str) -> str:
    """paddle.jit.save the model with dynamic [batch, sequence] int64 inputs; returns the path prefix.

    The program is always fp32 with Paddle's standard layers and attention (standard_copy), whatever the
    training precision or device: Paddle Inference fuses those ops itself and chooses its own kernels.
    """
    model.eval()
    input_spec = [paddle.static.InputSpec([None, None], "int64", name) for name in INPUT_NAMES]
    prefix = os.path.join(export_dir, model_prefix)
    os.makedirs(export_dir, exist_ok=True)
    paddle.jit.save(standard_copy(model), prefix, input_spec=input_spec)
    return prefix


def exported_program_file(prefix: str) -> str:
    # Paddle 3 with PIR writes the program as <prefix>.json; older formats used <prefix>.pdmodel.
    for suffix in (".json", ".pdmodel"):
        if os.path.isfile(prefix + suffix):
            return prefix + suffix
    raise FileNotFoundError(f"{prefix}.json: no exported model (run with --export-dir first)")


# ---------------------------------------------------------------------------------------------
# Predictor settings per device and precision
# ---------------------------------------------------------------------------------------------


def cpu_has_bf16() -> bool:
    """Paddle's own check for native bf16 instructions (AVX512-BF16, AMX-BF16), under which its docs promise
    the bf16 speed; plain AVX-512 runs bf16 emulated, slower than fp32."""
    return paddle.base.core.supports_bfloat16_fast_performance()


def resolve_precision(device: str, precision: str, use_tensorrt: bool) -> tuple[str, bool, str | None]:
    """(precision, use_tensorrt) that run on `device` ("cpu", "gpu:N") for the asked ones, and the one-line
    notice of what runs instead (None when the choice runs as asked)."""
    if device.startswith("gpu"):
        if precision == "bf16":
            return "fp16", use_tensorrt, "--inference-precision bf16 is the CPU's; on a GPU the predictor runs fp16."
        return precision, use_tensorrt, None
    notices = []
    if use_tensorrt:
        notices.append(f"--use-tensorrt needs a GPU; the device is {device}, so the predictor runs oneDNN.")
    if precision == "fp16":
        notices.append(f"--inference-precision fp16 needs a GPU; the device is {device}, so the predictor runs "
                       "fp32 (bf16 is the CPU's reduced precision).")
        precision = "fp32"
    if precision == "bf16" and not cpu_has_bf16():
        notices.append("--inference-precision bf16: this CPU has no bf16 instructions (avx512_bf16 or amx_bf16), "
                       "so the predictor runs fp32.")
        precision = "fp32"
    return precision, False, " ".join(notices) or None


def predictor_settings(device: str, precision: str, use_tensorrt: bool, *, max_batch_size: int,
                       max_seq_length: int) -> dict[str, dict]:
    """The paddle.inference.Config calls (method name -> keyword arguments, in order) for a device and a
    precision and TensorRT choice that run there (resolve_precision).

    TensorRT gets the dynamic shape range of the inputs: [1, 1] up to [max_batch_size, max_seq_length].
    """
    if not device.startswith("gpu"):
        settings = dict(CPU_SETTINGS)
        if precision == "bf16":
            settings["enable_onednn_bfloat16"] = {}
        return settings
    precision_mode = {"fp32": paddle.inference.PrecisionType.Float32,
                      "fp16": paddle.inference.PrecisionType.Half}[precision]
    device_id = int(device.partition(":")[2] or 0)
    if not use_tensorrt:
        return {"enable_use_gpu": {"memory_pool_init_size_mb": GPU_MEMORY_POOL_MB, "device_id": device_id,
                                   "precision_mode": precision_mode}}
    largest = [max_batch_size, max_seq_length]
    return {
        # TensorRT sets the precision of its engines; the ops it cannot take run in fp32 on the GPU
        "enable_use_gpu": {"memory_pool_init_size_mb": GPU_MEMORY_POOL_MB, "device_id": device_id},
        "enable_tensorrt_engine": {"workspace_size": 1 << 30, "max_batch_size": max_batch_size,
                                   "min_subgraph_size": 3, "precision_mode": precision_mode, "use_static": False,
                                   "use_calib_mode": False},
        "set_trt_dynamic_shape_info": {"min_input_shape": dict.fromkeys(INPUT_NAMES, [1, 1]),
                                       "max_input_shape": dict.fromkeys(INPUT_NAMES, largest),
                                       "optim_input_shape": dict.fromkeys(INPUT_NAMES, largest)},
    }


def settings_for(args: argparse.Namespace, device: str) -> dict[str, dict]:
    """predictor_settings of the command line on `device`; what runs instead of a choice is printed in one line."""
    precision, use_tensorrt, notice = resolve_precision(device, args.inference_precision, args.use_tensorrt)
    if notice:
        print(notice, flush=True)
    return predictor_settings(device, precision, use_tensorrt, max_batch_size=args.predict_batch_size,
                              max_seq_length=args.max_seq_length)


# ---------------------------------------------------------------------------------------------
# Predictors
# ---------------------------------------------------------------------------------------------


def inference_config(model_dir: str, model_prefix: str, num_threads: int,
                     settings: Mapping[str, Mapping] = CPU_SETTINGS) -> paddle.inference.Config:
    """The paddle.inference.Config of the exported <model_dir>/<model_prefix>, with the predictor_settings calls."""
    prefix = os.path.join(model_dir, model_prefix)
    config = paddle.inference.Config(exported_program_file(prefix), prefix + ".pdiparams")
    for method, arguments in settings.items():
        getattr(config, method)(**arguments)
    config.disable_glog_info()
    config.set_cpu_math_library_num_threads(num_threads)
    return config


def inference_predictor(model_dir: str, model_prefix: str, num_threads: int,
                        settings: Mapping[str, Mapping] = CPU_SETTINGS) -> BatchPredictor:
    """A Paddle Inference predictor for <model_dir>/<model_prefix>, called like the dygraph model."""
    config = inference_config(model_dir, model_prefix, num_threads, settings)
    try:
        predictor = paddle.inference.create_predictor(config)
    except RuntimeError as error:  # a truncated or garbled export: Paddle's C++ error, its first line names the cause
        cause = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ValueError(f"{os.path.join(model_dir, model_prefix)}: not a readable exported model ({cause})") from None
    if tuple(predictor.get_input_names()) != INPUT_NAMES:
        raise ValueError(f"{os.path.join(model_dir, model_prefix)}: exported inputs {predictor.get_input_names()} "
                         f"are not {list(INPUT_NAMES)}")
    outputs = [predictor.get_output_handle(name) for name in predictor.get_output_names()]

    def run(input_ids: np.ndarray, token_type_ids: np.ndarray, attention_mask: np.ndarray) -> tuple[np.ndarray, ...]:
        for name, array in zip(INPUT_NAMES, (input_ids, token_type_ids, attention_mask), strict=True):
            predictor.get_input_handle(name).copy_from_cpu(array)
        predictor.run()
        return tuple(output.copy_to_cpu() for output in outputs)

    return run


def predictor_for(args: argparse.Namespace, num_threads: int) -> BatchPredictor:
    """The predictor of --inference-model-dir in --inference-precision on Paddle's device."""
    return inference_predictor(args.inference_model_dir, args.model_prefix, num_threads,
                               settings_for(args, paddle.get_device()))


def dygraph_predictor(model: paddle.nn.Layer, policy: AmpPolicy) -> BatchPredictor:
    """The model itself in eval mode under the AMP policy, called like an exported predictor."""
    model.eval()

    def run(input_ids: np.ndarray, token_type_ids: np.ndarray, attention_mask: np.ndarray) -> tuple[np.ndarray, ...]:
        with paddle.no_grad(), amp_autocast(policy):
            outputs = model(paddle.to_tensor(input_ids), paddle.to_tensor(token_type_ids),
                            paddle.to_tensor(attention_mask))
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        return tuple(output.astype("float32").numpy() for output in outputs)

    return run


def export_and_predict(model: paddle.nn.Layer | None, args: argparse.Namespace, session, predicting: bool,
                       predict: Callable[[BatchPredictor], None]) -> None:
    """Rank 0's part of a fine-tuning run after training: --export-dir, then, when `predicting`, `predict` with
    the exported predictor of --inference-model-dir or else with the model itself (a finetune.Session)."""
    if args.export_dir:
        session.logger.log("PARAMETER", {"exported_model": export_inference_model(
            model, args.export_dir, args.model_prefix)})
    if predicting:
        if args.inference_model_dir:
            run = predictor_for(args, session.num_threads)
        else:
            run = dygraph_predictor(model, session.policy)
        predict(run)
