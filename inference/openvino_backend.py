"""The OpenVINO side of inference.py: compile the exported <prefix>.onnx with OpenVINO's CPU plugin, in fp32, bf16
or int8 (quantized once with NNCF), and run it like the other predictors.

What one export keeps beside its ONNX model, in <prefix>.openvino/ (derived files only, rebuilt at will):
- record.json: the SHA-256 of the ONNX model (and of the calibration inputs and the int8 IR once int8 was asked)
  that the rest of the folder was made from. When the ONNX model is not that file any more, the folder is
  emptied and made again: the int8 IR of the old model must not run in its place, and the old compiled blobs
  would only take space (OpenVINO 2026.4 itself compiles a changed file again: a model of the same size and
  modification time with other weights was not loaded from its cache, checked by hand).
- cache/: OpenVINO's CACHE_DIR: the compiled model of each precision and thread count, which a later run imports
  instead of compiling (the "second run starts fast").
- int8.xml and int8.bin: the int8 IR that NNCF's post-training quantization made from the ONNX model on the
  calibration inputs that --export-onnx saved (model_type TRANSFORMER, the MIXED preset: symmetric int8 weights
  and asymmetric activations, with SmoothQuant and bias correction), the task head's GEMM left in fp32
  (quantize). It is written once, atomically (the files first, the record naming them last), and made
  again only when the ONNX model, the calibration inputs or the quantization settings (INT8_SETTINGS, and NNCF's
  version) changed.

A folder that cannot be written (a read-only export) gets no cache: the model is compiled, and int8 quantized,
on every run, which one line says.

The compile properties: the LATENCY performance hint (one stream with every thread: a predictor runs one batch at
a time, so the THROUGHPUT hint's parallel streams would sit idle), INFERENCE_NUM_THREADS, and the inference
precision hint: f32 for fp32 (OpenVINO's CPU plugin would otherwise choose bf16 itself on an AMX CPU), bf16
for bf16, and f32 for what int8 leaves unquantized (softmax, normalization, the head).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import io
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping

import numpy as np

from inference import onnx_backend
from utils.atomic_io import atomic_write_text

# The inference precision hint per --inference-precision; int8's is that of the ops left in float.
PRECISION_HINTS = {"fp32": "f32", "bf16": "bf16", "int8": "f32"}  # openvino.Type attribute names
RECORD = "record.json"
CACHE = "cache"
INT8_FILES = ("int8.xml", "int8.bin")
# How quantize makes the int8 IR; the record keeps them, so that an IR made otherwise is made again. SmoothQuant
# (Xiao et al. 2023) moves alpha of each activation channel's range into the weights: NNCF's TRANSFORMER default,
# 0.95, left SQuAD 1.59 EM points under fp32 (docs/inference.md); 0.8 agreed best with the fp32 model on the
# calibration features, which are training features (the dev sets only report).
INT8_SETTINGS = {"model_type": "TRANSFORMER", "preset": "MIXED", "smooth_quant_matmul_alpha": 0.8,
                 "fp32": "the task head's GEMMs"}
# Runs the compiled model on one batch: (input_ids, token_type_ids, attention_mask) [B, S] -> the outputs
Predictor = Callable[[np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, ...]]


def folder_of(onnx_path: str) -> str:
    """Where the derived files of the export of onnx_path go: <prefix>.openvino beside it."""
    return os.path.splitext(onnx_path)[0] + ".openvino"


def _read_record(folder: str) -> dict:
    try:
        with open(os.path.join(folder, RECORD), encoding="utf-8") as reader:
            record = json.load(reader)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}  # none yet, or torn: the folder is made again
    return record if isinstance(record, dict) else {}


def _renew_folder(folder: str, onnx_digest: str) -> None:
    """folder emptied and recorded as made from the ONNX model of onnx_digest: a new folder is built beside it and
    renamed in place, so that the old cache and IR never sit beside the new record."""
    staging = tempfile.mkdtemp(prefix=f".{os.path.basename(folder)}.", dir=os.path.dirname(folder))
    try:
        atomic_write_text(os.path.join(staging, RECORD), json.dumps({"onnx": onnx_digest}, indent=2) + "\n")
        replaced = staging + ".replaced"
        if os.path.isdir(folder):
            os.rename(folder, replaced)
        os.rename(staging, folder)
        shutil.rmtree(replaced, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _calibration_batches(calibration: Mapping[str, np.ndarray], input_names: tuple[str, ...],
                         mask_input: str) -> list[dict[str, np.ndarray]]:
    """The calibration inputs in batches of onnx_backend.CALIBRATION_BATCH, each cut to its longest row, as ORT's
    static int8 reads them."""
    rows, batches = len(calibration[mask_input]), []
    for start in range(0, rows, onnx_backend.CALIBRATION_BATCH):
        mask = calibration[mask_input][start:start + onnx_backend.CALIBRATION_BATCH]
        length = int(mask.sum(axis=1).max())
        batches.append({name: calibration[name][start:start + onnx_backend.CALIBRATION_BATCH, :length]
                        .astype(np.int64) for name in input_names})
    return batches


def head_gemms(model) -> list[str]:
    """The names of the MatMul nodes nearest each output of an openvino.Model: the task head's GEMMs."""
    found, stack, seen = [], [result.input_value(0).get_node() for result in model.get_results()], set()
    while stack:
        node = stack.pop()
        if node.get_friendly_name() in seen:
            continue
        seen.add(node.get_friendly_name())
        if node.get_type_name() == "MatMul":
            found.append(node.get_friendly_name())
            continue
        stack.extend(value.get_node() for value in node.input_values())
    return found


@contextlib.contextmanager
def _quiet_nncf() -> Iterator[None]:
    """NNCF draws progress bars on stdout and logs every step; a run says what it quantized in one line."""
    import nncf

    previous = logging.getLogger("nncf").level
    nncf.set_log_level(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        nncf.set_log_level(previous)


def quantize(onnx_path: str, calibration: Mapping[str, np.ndarray], xml_path: str, input_names: tuple[str, ...],
             mask_input: str) -> int:
    """NNCF's int8 model of the ONNX model on the calibration inputs, saved as the IR xml_path (and its .bin);
    returns the number of calibration batches."""
    import nncf
    import openvino
    from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters, AdvancedSmoothQuantParameters

    model = openvino.Core().read_model(onnx_path)
    batches = _calibration_batches(calibration, input_names, mask_input)
    # The ignored scope: the task head's GEMM (SQuAD's span projection, GLUE's classifier or STS-B's regression)
    # stays fp32, 1 of BERT's GEMMs with 1 to num_labels output columns, so it costs nothing, and it makes the
    # logits that rank the answer spans against each other (and STS-B's scores, which no argmax rounds).
    ignored = nncf.IgnoredScope(names=head_gemms(model))
    smooth_quant = AdvancedSmoothQuantParameters(matmul=INT8_SETTINGS["smooth_quant_matmul_alpha"])
    with _quiet_nncf():
        quantized = nncf.quantize(model, nncf.Dataset(batches), model_type=nncf.ModelType[INT8_SETTINGS["model_type"]],
                                  preset=nncf.QuantizationPreset[INT8_SETTINGS["preset"]], subset_size=len(batches),
                                  ignored_scope=ignored,
                                  advanced_parameters=AdvancedQuantizationParameters(smooth_quant_alphas=smooth_quant))
    openvino.save_model(quantized, xml_path, compress_to_fp16=False)
    return len(batches)


def _int8_model(onnx_path: str, folder: str, record: dict, calibration_path: str, calibration_digest: str,
                digest: Callable[[str], str], input_names: tuple[str, ...], mask_input: str) -> str:
    """The path of the int8 IR in folder, quantized now unless the record shows one of this ONNX model and these
    calibration inputs; ValueError naming the file when a recorded IR file is not the one written."""
    xml_path = os.path.join(folder, INT8_FILES[0])
    settings = {**INT8_SETTINGS, "nncf": importlib.metadata.version("nncf")}
    made = isinstance(record.get("int8"), dict)
    if made and record.get("calibration") == calibration_digest and record.get("int8_settings") == settings:
        for name in INT8_FILES:
            path = os.path.join(folder, name)
            if not os.path.isfile(path) or digest(path) != record["int8"].get(name):
                raise ValueError(f"{path}: not the int8 model that {os.path.join(folder, RECORD)} describes (changed "
                                 f"or removed since it was quantized); delete {folder} to quantize again")
        return xml_path
    if made and record.get("int8_settings") != settings:
        print(f"{xml_path}: made with other quantization settings ({record.get('int8_settings')}); quantized again "
              f"with {settings}", flush=True)
    calibration = onnx_backend.load_calibration(calibration_path)
    missing = [name for name in input_names if name not in calibration]
    if missing:
        raise ValueError(f"{calibration_path}: no calibration input {missing[0]!r} (it has {sorted(calibration)})")
    onnx_backend.check_calibration_ids(calibration, onnx_backend.load_checked(onnx_path, input_names),
                                       calibration_path)
    # the files under temporary names first, then renamed in; the record that names them is written last, so a
    # stop in between leaves files that no record vouches for, which the next run quantizes again
    staging = tempfile.mkdtemp(prefix=".int8.", dir=folder)
    try:
        batches = quantize(onnx_path, calibration, os.path.join(staging, INT8_FILES[0]), input_names, mask_input)
        for name in INT8_FILES:
            os.replace(os.path.join(staging, name), os.path.join(folder, name))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    record = {**record, "calibration": calibration_digest, "int8_settings": settings,
              "int8": {name: digest(os.path.join(folder, name)) for name in INT8_FILES}}
    atomic_write_text(os.path.join(folder, RECORD), json.dumps(record, indent=2) + "\n")
    print(f"{onnx_path}: int8 model written to {xml_path} (NNCF, calibrated on {batches} batches of "
          f"{calibration_path})", flush=True)
    return xml_path


def compile_properties(precision: str, num_threads: int, cache_dir: str | None) -> dict:
    """The compile_model properties of a precision (PRECISION_HINTS) on num_threads, cached in cache_dir."""
    import openvino
    import openvino.properties as props
    import openvino.properties.hint as hints

    properties = {hints.performance_mode: hints.PerformanceMode.LATENCY, props.inference_num_threads: num_threads,
                  hints.inference_precision: getattr(openvino.Type, PRECISION_HINTS[precision])}
    if cache_dir is not None:
        properties[props.cache_dir] = cache_dir
    return properties


def prepared_model(onnx_path: str, precision: str, digest: Callable[[str], str], input_names: tuple[str, ...],
                   mask_input: str, work_dir: str) -> tuple[str, str | None, str | None]:
    """(the model file to compile for `precision`, OpenVINO's cache folder, a notice), from the export's folder
    (folder_of) brought up to date with the ONNX model; work_dir stands in for a folder that cannot be written
    (no cache then). digest: the SHA-256 of a file."""
    if not os.path.isfile(onnx_path):
        raise FileNotFoundError(f"{onnx_path}: no ONNX model (export it with --export-dir and --export-onnx)")
    calibration_path = onnx_backend.calibration_file(os.path.splitext(onnx_path)[0])
    if precision == "int8" and not os.path.isfile(calibration_path):
        raise FileNotFoundError(f"{calibration_path}: no calibration inputs for --inference-backend openvino "
                                "--inference-precision int8 (export with --do-train --export-onnx, which saves them "
                                "from the training file)")
    onnx_digest, folder, notice = digest(onnx_path), folder_of(onnx_path), None
    if not os.access(os.path.dirname(os.path.abspath(onnx_path)), os.W_OK):
        folder, notice = work_dir, (f"{os.path.dirname(onnx_path)}: not writable, so OpenVINO's compiled model is not "
                                    "cached there" + (" and int8 is quantized again on each run" if precision == "int8"
                                                      else ""))
    record = _read_record(folder)
    if record.get("onnx") != onnx_digest:
        onnx_backend.load_checked(onnx_path, input_names)  # a broken model stops here in one line
        if record:
            print(f"{onnx_path}: changed since {folder} was made; its compiled models and int8 model are made "
                  "again", flush=True)
        _renew_folder(folder, onnx_digest)
        record = _read_record(folder)
    cache = os.path.join(folder, CACHE) if folder != work_dir else None
    if precision != "int8":
        return onnx_path, cache, notice
    return (_int8_model(onnx_path, folder, record, calibration_path, digest(calibration_path), digest, input_names,
                        mask_input), cache, notice)


def compiled_predictor(model_path: str, precision: str, num_threads: int, cache_dir: str | None,
                       input_names: tuple[str, ...]) -> Predictor:
    """The compiled model at model_path (ONNX or IR) on the CPU with compile_properties, called like the dygraph
    model; ValueError in one line naming the file when OpenVINO cannot read or compile it."""
    import openvino

    try:
        compiled = openvino.Core().compile_model(model_path, "CPU",
                                                 compile_properties(precision, num_threads, cache_dir))
    except RuntimeError as error:  # OpenVINO's C++ exceptions: the first line that says something names the cause
        lines = [line.strip() for line in str(error).splitlines() if line.strip() and not line.startswith("Check")]
        raise ValueError(f"{model_path}: not a model OpenVINO can compile ({lines[-1] if lines else error})") from None
    names = tuple(model_input.get_any_name() for model_input in compiled.inputs)
    if names != input_names:
        raise ValueError(f"{model_path}: the model's inputs {list(names)} are not {list(input_names)}")
    request = compiled.create_infer_request()

    def run(input_ids: np.ndarray, token_type_ids: np.ndarray, attention_mask: np.ndarray) -> tuple[np.ndarray, ...]:
        request.infer(dict(zip(input_names, (input_ids, token_type_ids, attention_mask), strict=True)))
        # copies: the request reuses its output tensors on the next batch
        return tuple(np.array(request.get_output_tensor(index).data, dtype=np.float32)
                     for index in range(len(compiled.outputs)))

    return run


def openvino_predictor(onnx_path: str, precision: str, num_threads: int, digest: Callable[[str], str],
                       input_names: tuple[str, ...], mask_input: str) -> Predictor:
    """The OpenVINO predictor of the export's ONNX model in precision (fp32, bf16 or int8, as resolved by
    inference.resolve_precision) on num_threads."""
    with tempfile.TemporaryDirectory(prefix="paddlebert-openvino-") as work_dir:
        model_path, cache, notice = prepared_model(onnx_path, precision, digest, input_names, mask_input, work_dir)
        if notice:
            print(notice, flush=True)
        return compiled_predictor(model_path, precision, num_threads, cache, input_names)
