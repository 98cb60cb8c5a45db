"""Exported models and their predictors for the fine-tuned heads (run_squad.py, run_glue.py): Paddle Inference,
ONNX Runtime and OpenVINO.

A task script adds the option group (add_inference_arguments), checks it (check_inference_arguments), exports
its fine-tuned model with --export-dir (export_inference_model; with --export-onnx also to ONNX, onnx_backend.py)
and predicts through the exported model with --inference-model-dir (predictor_for) on --inference-backend. A
predictor, exported or dygraph, is called like the model on the [B, S] int64 arrays of INPUT_NAMES and returns
the model's outputs as NumPy arrays: SQuAD's start and end logits [B, S], GLUE's logits [B, num_labels] (for
STS-B's regression the scores [B, 1]); each task keeps only its own handling of them.

Precisions (--inference-precision) per backend and device, decided once in resolve_precision:
- paddle on a CPU: fp32 with oneDNN kernels, or bf16 through oneDNN where the CPU has native bf16 instructions
  (Paddle's supports_bfloat16_fast_performance: AVX512-BF16 or AMX); on a CPU without them bf16 runs fp32;
- paddle on a GPU: fp32 or fp16 (enable_use_gpu's precision_mode; PIR's mixed-precision pass converts the
  program); bf16 there runs fp16;
- onnxruntime on a CPU: fp32 with ORT's transformer fusions, or int8 (dynamic or static quantization, with
  per-matrix or per-column weight scales, and outlier channels apart: --int8-quantization); ORT's CPU execution
  provider has no bf16 kernels for BERT's ops, so bf16 runs fp32;
- onnxruntime on a GPU (onnxruntime-gpu's CUDA execution provider): fp32 or fp16; bf16 and int8 run fp16;
- openvino (CPU plugin, openvino_backend.py): fp32, bf16 on a CPU with native bf16 instructions (else fp32), or
  int8 quantized once by NNCF on the exported calibration inputs; fp16 runs fp32. Its GPU plugin is for Intel
  GPUs, so with Paddle on a GPU it still runs on the CPU.
Whatever runs instead of the choice is said in one line; so is a GPU that ONNX Runtime cannot use.
--inference-backend auto (the default) runs the backend measured fastest for the precision on this kind of CPU
(FASTEST_BACKENDS, one place for that choice), and the next one where the export lacks its model or it fails to
start, each in one line.
int8 on Paddle Inference is refused: README, "Exported models and reduced precision", says what fails in Paddle 3.3.1.
TensorRT is not offered: Config.enable_tensorrt_engine ignores the PIR (.json) programs that paddle.jit.save
writes, and Paddle's PIR route (paddle.tensorrt.convert) needs TensorRT's libraries and Python package, which
neither requirements.txt nor the Docker image has, and which no machine of this project can run.

The settings of the thread pools, the execution mode and the graph optimizations of each backend are made here
(CPU_SETTINGS, onnxruntime_session_settings).

Beside the program, export_inference_model records what the model is (<prefix>.export.json: its Head and the
length of its position table); before either backend loads the model, check_exported_model compares that record
with the task's head and --max-seq-length, so that a SQuAD export given to run_glue.py, or a length the export
cannot embed, is a one-line error at the start instead of a failure inside the first batches.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
from collections.abc import Callable, Mapping
from types import MappingProxyType

import numpy as np
import onnxruntime
import paddle

from inference import onnx_backend
from kernels import cpu_ops
from modeling import INPUT_NAMES, BertForQuestionAnswering, BertForSequenceClassification, standard_copy
from training import runtime
from training.amp import AmpPolicy, amp_autocast
from utils.atomic_io import atomic_write_text
from utils.checksums import sha256_of_file

INFERENCE_BACKENDS = ("auto", "paddle", "onnxruntime", "openvino")
# The backends that read <model-prefix>.onnx.
ONNX_BACKENDS = ("onnxruntime", "openvino")
INFERENCE_PRECISIONS = ("fp32", "bf16", "fp16", "int8")
# Training features that --export-onnx saves as int8's calibration inputs (static and -outliers quantization): a
# few hundred rows for the activation ranges, calibrated in seconds to minutes on a CPU.
CALIBRATION_FEATURES = 256
# The input whose zeros mark padding, which the ONNX attention fusion reads.
MASK_INPUT = "attention_mask"
# Initial size of Paddle Inference's GPU memory pool; it grows on demand.
GPU_MEMORY_POOL_MB = 1024
# Paddle 3 with PIR writes the exported program as <prefix>.json; older formats used <prefix>.pdmodel.
PROGRAM_SUFFIXES = (".json", ".pdmodel")
# Runs the model on a collated batch: (input_ids, token_type_ids, attention_mask) [B, S] -> the model's outputs
BatchPredictor = Callable[[np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, ...]]

# What Paddle Inference runs on a CPU: the exported program with oneDNN kernels, 2.4x the default CPU kernels
# for BERT-base on this machine (benchmarks/bench_squad_inference.py).
CPU_SETTINGS: Mapping[str, Mapping] = MappingProxyType({"disable_gpu": {}, "enable_onednn": {}})


# ---------------------------------------------------------------------------------------------
# Options
# ---------------------------------------------------------------------------------------------


def add_inference_arguments(group: argparse._ArgumentGroup, int8_quantization: str) -> None:
    """--export-dir, --export-onnx, --inference-model-dir, --inference-backend, --inference-precision and
    --int8-quantization, whose default (the task's choice, from benchmarks/inference_accuracy.py) the task gives;
    it stays None on the command line until check_inference_arguments fills it in, so that naming it is seen."""
    group.add_argument("--export-dir",
                       help="save the model with paddle.jit.save to <export-dir>/<model-prefix> for Paddle Inference")
    group.add_argument("--export-onnx", action="store_true",
                       help=f"--export-dir: also convert the program to <model-prefix>.onnx (paddle2onnx, opset "
                            f"{onnx_backend.ONNX_OPSET}, dynamic batch and sequence axes) for ONNX Runtime; with "
                            "--do-train also save the first training features as int8's calibration inputs")
    group.add_argument("--inference-model-dir",
                       help="predict with the predictor of a model exported by --export-dir")
    group.add_argument("--inference-backend", choices=INFERENCE_BACKENDS, default="auto",
                       help="--inference-model-dir: Paddle Inference (<model-prefix>.json), ONNX Runtime or OpenVINO "
                            "(both <model-prefix>.onnx, from --export-onnx); auto: the fastest measured for the "
                            "precision on this kind of CPU (inference.FASTEST_BACKENDS)")
    group.add_argument("--inference-precision", choices=INFERENCE_PRECISIONS, default="fp32",
                       help="--inference-model-dir: the precision of the predictor's kernels; bf16 with paddle or "
                            "openvino on a CPU with bf16 instructions (else fp32), fp16 on a GPU (bf16 there runs "
                            "fp16), int8 with onnxruntime or openvino")
    group.add_argument("--int8-quantization", choices=onnx_backend.QUANTIZATIONS,
                       help="--inference-precision int8 on onnxruntime: dynamic (activation scales per batch) or "
                            "static (calibrated on the inputs that --export-onnx saved); with -per-channel, one weight "
                            "scale per output column instead of one per matrix; with -outliers, the activation "
                            "channels far outside the rest on those inputs kept out of the int8 scales "
                            f"(default: {int8_quantization})")


def check_inference_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace,
                              int8_quantization: str) -> None:
    """Exit through parser.error where the inference options do not fit together, then give --int8-quantization
    the task's default int8_quantization where it was not named. (Without training or export,
    --inference-model-dir is left only prediction or evaluation to do, which check_shared_arguments requires.)"""
    if args.inference_model_dir and (args.do_train or args.export_dir or args.from_pretrained_params
                                     or args.from_checkpoint):
        parser.error("--inference-model-dir predicts with an exported model; it cannot train, export or load "
                     "--from-pretrained-params or --from-checkpoint")
    if args.export_onnx and not args.export_dir:
        parser.error("--export-onnx converts the model that --export-dir exports; give --export-dir")
    if args.export_dir and os.path.isdir(args.export_dir) and os.listdir(args.export_dir) and not args.overwrite:
        parser.error(f"--export-dir {args.export_dir} holds an export already; give another --export-dir, or "
                     "--overwrite to replace it (as a whole: the folder holds the old export or the new one)")
    if not args.inference_model_dir and (args.inference_backend != "auto" or args.inference_precision != "fp32"):
        parser.error("--inference-backend and --inference-precision are only used with --inference-model-dir")
    if args.inference_precision == "int8" and args.inference_backend == "paddle":
        parser.error("--inference-precision int8 needs --inference-backend onnxruntime, openvino or auto (Paddle "
                     "3.3.1 has no int8 kernels for PIR programs)")
    if args.int8_quantization is not None and (
            args.inference_precision != "int8" or args.inference_backend not in ("onnxruntime", "auto")
            or (args.inference_backend == "auto"
                and auto_backends(paddle.get_device(), "int8", cpu_kind())[0] != "onnxruntime")):
        parser.error("--int8-quantization is only used with --inference-precision int8 on --inference-backend "
                     "onnxruntime (or auto, where it chooses onnxruntime)")
    args.int8_quantization = args.int8_quantization or int8_quantization


# ---------------------------------------------------------------------------------------------
# What an export is
# ---------------------------------------------------------------------------------------------


SPAN, CLASSIFIER = "span", "classifier"


@dataclasses.dataclass(frozen=True)
class Head:
    """The head a task model ends in, which decides its outputs: SQuAD's span head (start and end logits
    [B, S]) or a classifier of num_labels labels (logits [B, num_labels]; one output is a regression's score, as
    STS-B's; num_labels is 0 for the span head)."""

    kind: str
    num_labels: int = 0

    def __str__(self) -> str:
        if self.kind == SPAN:
            return "a SQuAD (span) model"
        if self.num_labels == 1:
            return "a regression model (one output)"
        return f"a classifier of {self.num_labels} labels"


SPAN_HEAD = Head(SPAN)


def classifier_head(num_labels: int) -> Head:
    return Head(CLASSIFIER, num_labels)


def head_of(model: paddle.nn.Layer) -> Head:
    if isinstance(model, BertForSequenceClassification):
        return classifier_head(model.num_labels)
    if isinstance(model, BertForQuestionAnswering):
        return SPAN_HEAD
    raise ValueError(f"{type(model).__name__} has no task head to export")


def export_record_file(prefix: str) -> str:
    return prefix + ".export.json"


def export_files(prefix: str) -> list[str]:
    """The files of the export at prefix that a predictor reads: the program, its weights, the ONNX model and the
    calibration inputs, those that are there."""
    candidates = [prefix + suffix for suffix in (*PROGRAM_SUFFIXES, ".pdiparams")]
    candidates += [onnx_backend.onnx_file(prefix), onnx_backend.calibration_file(prefix)]
    return [path for path in candidates if os.path.isfile(path)]


def write_export_record(prefix: str, model: paddle.nn.Layer, *extra_files: str) -> None:
    """The record of what the export of `model` at prefix is: its head, its position table and the SHA-256 of
    every file of it, the program and its weights and extra_files, which check_exported_model verifies before a
    predictor reads them."""
    head = head_of(model)
    record = {"head": head.kind, "max_position_embeddings": model.config.max_position_embeddings}
    if head.kind == CLASSIFIER:
        record["num_labels"] = head.num_labels
    files = [exported_program_file(prefix), prefix + ".pdiparams", *extra_files]
    record["files"] = {os.path.basename(path): sha256_of_file(path) for path in files}
    atomic_write_text(export_record_file(prefix), json.dumps(record, indent=2) + "\n")


def read_export_record(prefix: str) -> tuple[Head, int] | None:
    """(head, max_position_embeddings) from the record that export_inference_model wrote at prefix; None when
    there is none. ValueError in one line naming the file when it is not such a record."""
    path = export_record_file(prefix)
    if not os.path.isfile(path):
        return None

    def damaged(reason: str) -> ValueError:
        return ValueError(f"{path}: {reason} (export the model again with --export-dir)")

    try:
        with open(path, encoding="utf-8") as reader:
            record = json.load(reader)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise damaged("not JSON") from None
    if not isinstance(record, dict):
        raise damaged("not a JSON object")
    for key in ("head", "max_position_embeddings") + (("num_labels",) if record.get("head") == CLASSIFIER else ()):
        if key not in record:
            raise damaged(f"no {key}")
    if record["head"] not in (SPAN, CLASSIFIER):
        raise damaged(f"head {record['head']!r} is not {SPAN} or {CLASSIFIER}")
    for key in ("max_position_embeddings", "num_labels"):
        value = record.get(key, 1)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise damaged(f"{key} {value!r} is not a positive integer")
    files = record.get("files")  # records from before the checksums have none
    if files is not None and (not isinstance(files, dict)
                              or not all(isinstance(value, str) for value in files.values())):
        raise damaged("files is not an object of file names and SHA-256 digests")
    check_export_files(prefix, files)
    return Head(record["head"], record.get("num_labels", 0)), record["max_position_embeddings"]


def check_export_files(prefix: str, files: Mapping[str, str] | None) -> None:
    """ValueError in one line naming the file when the export at prefix is not the one its record describes: a
    recorded file missing or changed, or a model file beside it that the record does not name (left there by
    another export). None: a record from before the checksums, not checked."""
    if files is None:
        return
    folder, record = os.path.dirname(prefix), export_record_file(prefix)
    for name, digest in files.items():
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            raise ValueError(f"{path}: missing, but {record} lists it (export the model again with --export-dir)")
        if sha256_of_file(path) != digest:
            raise ValueError(f"{path}: not the file that {record} describes (changed since the export; export the "
                             "model again with --export-dir)")
    for path in export_files(prefix):
        if os.path.basename(path) not in files:
            raise ValueError(f"{path}: not part of the export that {record} describes (left by another export?); "
                             "export the model again with --export-dir")


def check_exported_model(model_dir: str, model_prefix: str, head: Head, max_seq_length: int) -> str | None:
    """ValueError in one line naming model_dir when the export there is not a model of `head` or its position
    table is shorter than max_seq_length, the same for both backends (the ONNX model is converted from the
    recorded program). Returns the notice for an export without a record (from before the record existed),
    whose head and length go unchecked; without a model either, the predictor names the missing file."""
    prefix = os.path.join(model_dir, model_prefix)
    record = read_export_record(prefix)
    if record is None:
        model_files = [prefix + suffix for suffix in PROGRAM_SUFFIXES] + [onnx_backend.onnx_file(prefix)]
        if not any(os.path.isfile(path) for path in model_files):
            return None
        return (f"{export_record_file(prefix)}: not found (the model was exported by an earlier PaddleBERT), so its "
                "head and max_position_embeddings are not checked against the task and --max-seq-length")
    exported_head, positions = record
    if exported_head != head:
        raise ValueError(f"--inference-model-dir {model_dir} holds {exported_head}, not {head}")
    if max_seq_length > positions:
        raise ValueError(f"--inference-model-dir {model_dir}: --max-seq-length {max_seq_length} exceeds the exported "
                         f"model's max_position_embeddings {positions}")
    return None


# ---------------------------------------------------------------------------------------------
# Export
# ---------------------------------------------------------------------------------------------


# What paddle.jit.save prints while it traces a model, none of it about the user's model or command: a C++ warning
# (glog, straight to file descriptor 2) about an op's `out` argument inside Paddle, and a Python UserWarning about a
# tensor's `place` in PIR mode. export_inference_model drops them (runtime.stderr_without); everything else it
# prints passes on.
TRACING_NOISE_LINES = ("Paddle static graph(PIR) not support input out tensor",)
TRACING_NOISE_WARNING = "Tensor do not have 'place' interface"


def export_inference_model(model: paddle.nn.Layer, export_dir: str, model_prefix: str, *, record: bool = True) -> str:
    """paddle.jit.save the model with dynamic [batch, sequence] int64 inputs, and with `record` its record (head
    and position table length) beside it; returns the path prefix.

    The program is always fp32 with Paddle's standard layers and attention (standard_copy), whatever the
    training precision or device: Paddle Inference fuses those ops itself and chooses its own kernels. It has
    no dropout ops: in eval mode each copies its input, and in the oneDNN bf16 predictor each one also stands
    between bf16 ops with a conversion on either side (BERT-base: 1.09x faster in bf16, 1.01x in fp32 without
    them, on an AMD EPYC Zen 4).
    """
    head_of(model)  # a model without a task head is refused before anything is written
    model.eval()
    input_spec = [paddle.static.InputSpec([None, None], "int64", name) for name in INPUT_NAMES]
    prefix = os.path.join(export_dir, model_prefix)
    os.makedirs(export_dir, exist_ok=True)
    # An earlier export's record goes first: if the save fails halfway, no record describes the wrong program.
    if os.path.isfile(export_record_file(prefix)):
        os.remove(export_record_file(prefix))
    with runtime.stderr_without(lines=TRACING_NOISE_LINES, warnings=(TRACING_NOISE_WARNING,)):
        paddle.jit.save(standard_copy(model, dropout=False), prefix, input_spec=input_spec)
    if record:
        write_export_record(prefix, model)
    return prefix


def export_onnx_model(model: paddle.nn.Layer, prefix: str, *, record: bool = True) -> str:
    """Convert the program that export_inference_model wrote at prefix to <prefix>.onnx, and with `record` add it
    to the record; returns its path."""
    path = onnx_backend.onnx_file(prefix)
    onnx_backend.export_onnx(exported_program_file(prefix), prefix + ".pdiparams", path, INPUT_NAMES,
                             {"num_attention_heads": model.config.num_attention_heads,
                              "hidden_size": model.config.hidden_size})
    if record:
        write_export_record(prefix, model, path)
    return path


def export_folder(model: paddle.nn.Layer, export_dir: str, model_prefix: str, onnx: bool,
                  calibration_inputs: Mapping[str, np.ndarray] | None) -> str:
    """The whole export of --export-dir (the Paddle program, with onnx the ONNX model, and the calibration inputs
    when given), written into a staging folder beside export_dir and then put in its place: export_dir holds the
    earlier export or this one, never a part of each, whatever stops the run (Ctrl-C, a full disk). Returns the
    prefix of the export in export_dir. The record is written once, last, with the checksums of every file."""
    target = os.path.abspath(export_dir)
    staging = os.path.join(os.path.dirname(target), f".{os.path.basename(target)}.partial")
    shutil.rmtree(staging, ignore_errors=True)  # what an interrupted export left
    try:
        prefix = export_inference_model(model, staging, model_prefix, record=False)
        extra_files = []
        if onnx:
            extra_files.append(export_onnx_model(model, prefix, record=False))
        if calibration_inputs is not None:
            extra_files.append(onnx_backend.calibration_file(prefix))
            onnx_backend.save_calibration(extra_files[-1], calibration_inputs)
        write_export_record(prefix, model, *extra_files)
        replace_folder(staging, target)
    except (OSError, KeyboardInterrupt) as error:  # a full disk, Ctrl-C: nothing of this export stays
        shutil.rmtree(staging, ignore_errors=True)
        kept = "the export there before is unchanged" if os.path.isdir(target) else "nothing was written there"
        if isinstance(error, KeyboardInterrupt):
            raise KeyboardInterrupt(f"interrupted while exporting to --export-dir {export_dir}; {kept}") from None
        reason = error.strerror or str(error)
        raise OSError(error.errno, f"--export-dir {export_dir}: not exported ({reason}); {kept}") from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return os.path.join(export_dir, model_prefix)


def replace_folder(new: str, target: str) -> None:
    """Put the finished folder `new` in the place of target (a sibling): two renames, the earlier folder moved
    aside first and deleted last, so that a stop between them leaves both whole (target's as
    .<name>.replaced), and target never holds a mix."""
    replaced = os.path.join(os.path.dirname(target), f".{os.path.basename(target)}.replaced")
    shutil.rmtree(replaced, ignore_errors=True)
    if os.path.exists(target):
        os.rename(target, replaced)
    os.rename(new, target)
    shutil.rmtree(replaced, ignore_errors=True)


def exported_program_file(prefix: str) -> str:
    for suffix in PROGRAM_SUFFIXES:
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


def resolve_precision(backend: str, device: str, precision: str) -> tuple[str, str | None]:
    """The precision that runs on `backend` and `device` ("cpu", "gpu:N") for the asked one, and the one-line
    notice of what runs instead (None when the choice runs as asked)."""
    on_gpu = device.startswith("gpu")
    if on_gpu and precision in ("bf16", "int8"):
        return "fp16", f"--inference-precision {precision} is the CPU's; on a GPU the predictor runs fp16."
    if on_gpu:
        return precision, None
    if precision == "fp16":
        return "fp32", (f"--inference-precision fp16 needs a GPU; the device is {device}, so the predictor runs "
                        "fp32 (bf16 and int8 are the CPU's reduced precisions).")
    if precision == "bf16" and backend == "onnxruntime":
        return "fp32", ("--inference-precision bf16: ONNX Runtime's CPU execution provider has no bf16 kernels for "
                        "BERT's MatMul and Attention, so the predictor runs fp32 (Paddle's runs bf16).")
    if precision == "bf16" and not cpu_has_bf16():
        return "fp32", ("--inference-precision bf16: this CPU has no bf16 instructions (avx512_bf16 or amx_bf16), "
                        "so the predictor runs fp32.")
    return precision, None


# --inference-backend auto: per kind of CPU (cpu_kind) and precision, the backends in the order of their measured
# speed, the fastest first (SQuAD, BERT-base, batch 8, seq 384, bench_squad_inference.py; docs/inference.md, "Speed
# per machine"). To update from a new run, reorder the row of its CPU kind; a backend that is not listed for a
# precision is never chosen for it.
# - amx (Intel Xeon, family 6 model 167): fp32 Paddle 3.00-3.41 seq/s, ORT 3.03-3.37 (level); bf16 only Paddle's
#   (10.4-12.1); int8 only ORT's (7.9-10.1, below Paddle bf16: auto never trades accuracy for a slower run, so bf16
#   is what to ask for there). OpenVINO not measured yet.
# - avx512_bf16 (AMD Zen 4 and Zen 5, Intel without AMX): on Zen 4 (2026-12-05, benchmarks/results/
#   bench_squad_inference-zen4-2026-12-05.txt) OpenVINO leads at every precision: fp32 2.84 against Paddle 2.81 and
#   ORT 2.68 (8.88, 7.80 and 8.41 at batch 1, seq 128); bf16 5.55 against Paddle 5.14 (17.47 against 12.20); int8
#   8.96 against ORT 7.29 (28.10 against 26.46). Zen 5 and Intel without AMX have no OpenVINO figures yet.
# - avx2 (AMD Zen 3 and older, no bf16 instructions): on a Zen 3 (2026-12-06, benchmarks/results/
#   bench_squad_inference-zen3-2026-12-06.txt) fp32 ORT 2.19 against OpenVINO 1.94 and Paddle 1.71 (6.24, 6.24 and
#   5.56 at batch 1, seq 128); bf16 runs fp32 on every backend, so it follows fp32; int8 ORT 3.59 against OpenVINO
#   1.90 (12.00 against 5.07), so OpenVINO's int8, slower there than ORT's fp32, is left out.
# On an amx CPU OpenVINO is not measured yet, so there it runs only when named.
_AVX2_FP32_ORDER = ("onnxruntime", "openvino", "paddle")  # bf16 runs fp32 on an avx2 CPU: the same order
FASTEST_BACKENDS: Mapping[str, Mapping[str, tuple[str, ...]]] = MappingProxyType({
    "amx": {"fp32": ("paddle", "onnxruntime"), "bf16": ("paddle",), "int8": ("onnxruntime",)},
    "avx512_bf16": {"fp32": ("openvino", "paddle", "onnxruntime"), "bf16": ("openvino", "paddle"),
                    "int8": ("openvino", "onnxruntime")},
    "avx2": {"fp32": _AVX2_FP32_ORDER, "bf16": _AVX2_FP32_ORDER, "int8": ("onnxruntime",)},
})


def cpu_kind(cpuinfo_path: str = "/proc/cpuinfo") -> str:
    """The row of FASTEST_BACKENDS for this CPU: amx (AMX bf16 tiles), avx512_bf16, or avx2 (everything else)."""
    _, flags = cpu_ops.cpu_vendor_and_flags(cpuinfo_path)
    return next((kind for kind, flag in (("amx", "amx_bf16"), ("avx512_bf16", "avx512_bf16")) if flag in flags),
                "avx2")


def auto_backends(device: str, precision: str, kind: str) -> tuple[str, ...]:
    """The backends that --inference-backend auto tries for `precision`, fastest first: on a GPU Paddle Inference
    (the only GPU predictor in this project's tests); on a CPU the FASTEST_BACKENDS row of `kind`, where fp16 (which
    a CPU runs in fp32) follows fp32."""
    if device.startswith("gpu"):
        return ("onnxruntime",) if precision == "int8" else ("paddle",)
    return FASTEST_BACKENDS[kind]["fp32" if precision == "fp16" else precision]


def predictor_settings(device: str, precision: str) -> dict[str, dict]:
    """The paddle.inference.Config calls (method name -> keyword arguments, in order) for a device and a
    precision that runs there (resolve_precision)."""
    if not device.startswith("gpu"):
        settings = dict(CPU_SETTINGS)
        if precision == "bf16":
            settings["enable_onednn_bfloat16"] = {}
        return settings
    precision_mode = {"fp32": paddle.inference.PrecisionType.Float32,
                      "fp16": paddle.inference.PrecisionType.Half}[precision]
    return {"enable_use_gpu": {"memory_pool_init_size_mb": GPU_MEMORY_POOL_MB,
                               "device_id": int(device.partition(":")[2] or 0), "precision_mode": precision_mode}}


def openvino_device(device: str) -> tuple[str, str | None]:
    """The device OpenVINO runs on for Paddle's device: the CPU, with a notice when Paddle's device is a GPU
    (OpenVINO's GPU plugin drives Intel GPUs, not the CUDA ones Paddle uses)."""
    if device.startswith("gpu"):
        return "cpu", (f"--inference-backend openvino runs on the CPU (its GPU plugin is for Intel GPUs), not on "
                       f"{device}.")
    return device, None


def onnxruntime_device(device: str) -> tuple[str, str | None]:
    """The device ONNX Runtime runs on for Paddle's device, and a notice when a GPU has no CUDA execution
    provider (the CPU package onnxruntime is installed instead of onnxruntime-gpu)."""
    if device.startswith("gpu") and "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        return "cpu", (f"--inference-backend onnxruntime: this onnxruntime has no CUDAExecutionProvider (install "
                       f"onnxruntime-gpu=={onnxruntime.__version__} for {device}), so it runs on the CPU.")
    return device, None


# ORT's CPU SkipLayerNormalization kernel (residual Add, bias and LayerNormalization in one op) took twice as long
# as the separate Add and LayerNormalization kernels on [8, 384, 768] (7.1 against 3.5 ms, 2 threads, AMD EPYC
# Zen 5); keeping them apart made BERT-base 1.15x faster in int8 and 1.09x in fp32 there
# (benchmarks/bench_onnxruntime_graph.py). The session's own SkipLayerNormFusion would put them back together.
CPU_DISABLED_ONNXRUNTIME_OPTIMIZERS = ("SkipLayerNormFusion",)


def onnxruntime_session_settings(device: str, num_threads: int) -> dict:
    """The onnxruntime.SessionOptions attributes, the execution providers and the graph's fusions of a session
    on `device`: num_threads for the operators, no parallel branches (BERT's graph is one chain), every graph
    optimization but, on a CPU, the SkipLayerNormalization fusion (CPU_DISABLED_ONNXRUNTIME_OPTIMIZERS); a GPU
    keeps ORT's fused kernels."""
    on_gpu = device.startswith("gpu")
    providers = ["CPUExecutionProvider"]
    if on_gpu:
        providers.insert(0, ("CUDAExecutionProvider", {"device_id": int(device.partition(":")[2] or 0)}))
    return {"options": {"intra_op_num_threads": num_threads, "inter_op_num_threads": 1,
                        "execution_mode": onnxruntime.ExecutionMode.ORT_SEQUENTIAL,
                        "graph_optimization_level": onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL},
            "providers": providers, "skip_layer_norm": on_gpu,
            "disabled_optimizers": [] if on_gpu else list(CPU_DISABLED_ONNXRUNTIME_OPTIMIZERS)}


def _print_notices(notices: list[str | None]) -> None:
    for notice in notices:
        if notice:
            print(notice, flush=True)


def settings_for(args: argparse.Namespace, device: str) -> dict[str, dict]:
    """predictor_settings of the command line on `device`; what runs instead of a choice is printed in one line."""
    precision, notice = resolve_precision("paddle", device, args.inference_precision)
    _print_notices([notice])
    return predictor_settings(device, precision)


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


def onnxruntime_session(model_dir: str, model_prefix: str, precision: str, quantization: str,
                        settings: Mapping) -> onnxruntime.InferenceSession:
    """The ONNX Runtime session of <model_dir>/<model_prefix>.onnx prepared for `precision`
    (onnx_backend.prepared_model) with onnxruntime_session_settings' `settings`."""
    options = onnxruntime.SessionOptions()
    for name, value in settings["options"].items():
        setattr(options, name, value)
    options.log_severity_level = 3  # paddle2onnx's unused initializers: one warning each otherwise
    onnx_path = onnx_backend.onnx_file(os.path.join(model_dir, model_prefix))
    with onnx_backend.temporary_work_dir() as work_dir:
        path = onnx_backend.prepared_model(onnx_path, work_dir, precision, quantization, INPUT_NAMES, MASK_INPUT,
                                           skip_layer_norm=settings["skip_layer_norm"])
        return onnxruntime.InferenceSession(path, options, providers=settings["providers"],
                                            disabled_optimizers=settings["disabled_optimizers"])


def session_predictor(session: onnxruntime.InferenceSession) -> BatchPredictor:
    """An ONNX Runtime session called like the dygraph model."""
    # the fusions may have narrowed an input to int32
    dtypes = {graph_input.name: np.int32 if graph_input.type == "tensor(int32)" else np.int64
              for graph_input in session.get_inputs()}

    def run(input_ids: np.ndarray, token_type_ids: np.ndarray, attention_mask: np.ndarray) -> tuple[np.ndarray, ...]:
        feeds = {name: array.astype(dtypes[name], copy=False)
                 for name, array in zip(INPUT_NAMES, (input_ids, token_type_ids, attention_mask), strict=True)}
        return tuple(np.asarray(output, dtype=np.float32) for output in session.run(None, feeds))

    return run


def onnxruntime_predictor(model_dir: str, model_prefix: str, precision: str, quantization: str, device: str,
                          num_threads: int) -> BatchPredictor:
    """The ONNX Runtime session of a precision that runs on `device` (resolve_precision) with the device's
    settings, called like the dygraph model."""
    settings = onnxruntime_session_settings(device, num_threads)
    return session_predictor(onnxruntime_session(model_dir, model_prefix, precision, quantization, settings))


def openvino_predictor(model_dir: str, model_prefix: str, precision: str, num_threads: int) -> BatchPredictor:
    """The OpenVINO predictor of <model_dir>/<model_prefix>.onnx in a precision that runs on the CPU
    (resolve_precision), on num_threads (openvino_backend.py)."""
    from inference import openvino_backend  # imports OpenVINO, which the other backends do without

    return openvino_backend.openvino_predictor(onnx_backend.onnx_file(os.path.join(model_dir, model_prefix)),
                                               precision, num_threads, sha256_of_file, INPUT_NAMES, MASK_INPUT)


def backend_predictor(args: argparse.Namespace, backend: str, num_threads: int) -> BatchPredictor:
    """The predictor of --inference-model-dir on `backend` in --inference-precision on Paddle's device; what
    runs instead of the asked precision or device is said in one line."""
    if backend == "paddle":
        return inference_predictor(args.inference_model_dir, args.model_prefix, num_threads,
                                   settings_for(args, paddle.get_device()))
    device, device_notice = (onnxruntime_device if backend == "onnxruntime" else openvino_device)(paddle.get_device())
    precision, notice = resolve_precision(backend, device, args.inference_precision)
    _print_notices([device_notice, notice])
    if backend == "onnxruntime":
        return onnxruntime_predictor(args.inference_model_dir, args.model_prefix, precision, args.int8_quantization,
                                     device, num_threads)
    return openvino_predictor(args.inference_model_dir, args.model_prefix, precision, num_threads)


def predictor_for(args: argparse.Namespace, num_threads: int) -> BatchPredictor:
    """The predictor of --inference-model-dir on --inference-backend in --inference-precision on Paddle's device.
    auto tries auto_backends in turn: one whose model the export lacks, or that fails to start, gives way to the
    next, with one line each."""
    if args.inference_backend != "auto":
        return backend_predictor(args, args.inference_backend, num_threads)
    kind, device = cpu_kind(), paddle.get_device()
    candidates = auto_backends(device, args.inference_precision, kind)
    onnx_path = onnx_backend.onnx_file(os.path.join(args.inference_model_dir, args.model_prefix))
    where = f"GPU {device}" if device.startswith("gpu") else f"a CPU of kind {kind}"
    print(f"--inference-backend auto: {candidates[0]}, the fastest measured for {args.inference_precision} on {where} "
          "(inference.FASTEST_BACKENDS)", flush=True)
    for index, backend in enumerate(candidates):
        fallback = candidates[index + 1] if index + 1 < len(candidates) else None
        if fallback and backend in ONNX_BACKENDS and not os.path.isfile(onnx_path):
            print(f"--inference-backend auto: {onnx_path} is missing (export with --export-onnx for {backend}), so "
                  f"{fallback} runs", flush=True)
            continue
        try:
            return backend_predictor(args, backend, num_threads)
        except (ValueError, RuntimeError) as error:
            if not fallback:
                raise
            print(f"--inference-backend auto: {backend} failed ({' '.join(str(error).split())}), so {fallback} runs",
                  flush=True)
    raise AssertionError("unreachable: the last candidate returns or raises")


def with_checked_outputs(run: BatchPredictor, head: Head, source: str) -> BatchPredictor:
    """run, whose outputs are checked at every call to be those of `head` (SQuAD's two [B, S] logits, or one
    [B, num_labels]): ValueError in one line naming source otherwise. An export without a record (from before the
    record existed) may hold the other task's model, which would fail inside the task's post-processing."""
    def checked(input_ids: np.ndarray, token_type_ids: np.ndarray, attention_mask: np.ndarray
                ) -> tuple[np.ndarray, ...]:
        outputs = run(input_ids, token_type_ids, attention_mask)
        batch, seq = input_ids.shape
        expected = [(batch, seq)] * 2 if head.kind == SPAN else [(batch, head.num_labels)]
        shapes = [tuple(output.shape) for output in outputs]
        if shapes != expected:
            raise ValueError(f"{source}: the model's outputs have shapes {shapes}, not those of {head}: {expected}")
        return outputs

    return checked


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
                       predict: Callable[[BatchPredictor], None],
                       calibration_inputs: Callable[[], dict[str, np.ndarray]] | None = None, *, head: Head) -> None:
    """Rank 0's part of a fine-tuning run after training: --export-dir (and --export-onnx, with the
    calibration_inputs of the training file when training), then, when `predicting`, `predict` with the
    exported predictor of --inference-model-dir, checked to be a model of the task's `head` that takes
    --max-seq-length, or else with the model itself (a finetune.Session)."""
    if args.export_dir:
        calibration = (calibration_inputs() if args.export_onnx and args.do_train and calibration_inputs is not None
                       else None)
        prefix = export_folder(model, args.export_dir, args.model_prefix, args.export_onnx, calibration)
        session.logger.log("PARAMETER", {"exported_model": prefix})
        if args.export_onnx:
            session.logger.log("PARAMETER", {"exported_onnx_model": onnx_backend.onnx_file(prefix)})
    if predicting:
        if args.inference_model_dir:
            _print_notices([check_exported_model(args.inference_model_dir, args.model_prefix, head,
                                                 args.max_seq_length)])
            run = with_checked_outputs(predictor_for(args, session.num_threads), head,
                                       f"--inference-model-dir {args.inference_model_dir}")
        else:
            run = dygraph_predictor(model, session.policy)
        predict(run)
