"""Reading Paddle's and torch's pickled parameter files without running code, and safetensors state files.

`.pdparams` and `.pdopt` files are pickles, and `paddle.load` unpickles them without restriction: a file
whose pickle names `os.system` (or any other callable) runs it. `read_paddle_file` is the one reader the
project uses instead. Its unpickler admits only the globals that Paddle 3.3's `paddle.save` (and
`paddle.static.save`) write for tensors, NumPy arrays and plain containers, listed in ADMITTED_GLOBALS;
it refuses every other global before anything is called, with a ValueError naming the file and the global.
tests/test_paddle_files.py writes real files with paddle.save and checks that their globals are all
admitted, so a Paddle upgrade that writes a new one fails loudly there.

What `read_paddle_file(path)` returns is what `paddle.load(path)` returns in dynamic-graph mode, value for
value, dtype for dtype, with the same tensor names, built by the same `paddle.to_tensor` calls:
- a state dict saved by paddle.save (`model.state_dict()`, or an optimizer's without master weights) is
  pickled as NumPy arrays plus a "StructuredToParameterName@@" name table; the tabled entries come back
  as paddle Tensors carrying their parameter names, the table is dropped, and everything else (such as
  the "LR_Scheduler" dict of ints and floats) comes back as saved;
- anything else (an optimizer state whose "master_weights" dict holds tensors, a lone tensor, a list) is
  pickled with each tensor as a (name, array) tuple; those tuples come back as named Tensors;
- a pickle with neither (a dict of NumPy arrays, as convert_checkpoint and `paddle.static.save` write,
  NVIDIA's NGC checkpoints included) comes back with every array as an unnamed Tensor. For a
  `paddle.static.save` prefix, the .pdparams and .pdopt dicts together hold what
  `paddle.static.load_program_state(prefix)` returns, as Tensors instead of arrays.
bfloat16 tensors are pickled as uint16 arrays of their bits and come back as bfloat16 Tensors, as from
paddle.load. The result therefore drops into `Layer.set_state_dict`, `Optimizer.set_state_dict` (whose
master weights must be Tensors) and weights.py's loader. One difference: where paddle.load raises
NotImplementedError for a value it cannot walk (bytes, say), the reader returns the value as saved.

Covered: pickle protocols 2 to 4 (paddle.save's range), arrays split into "@@." slices by protocols 2
and 3 (rejoined as paddle.load rejoins them), Paddle's DenseTensor pickle (an `eval` of the name "data",
read here without evaluating anything) and the `numpy.core` global names of files written with NumPy 1
(Paddle 2.x). Not covered, each a ValueError naming the file: paddle.save's `use_binary_format` and
`safetensors=True` files and saved Programs (not pickles; use read_safetensors_state for safetensors), and
`paddle.nn.Layer` objects or other classes inside a pickle. Files over 4 GiB need nothing special: Paddle
writes them as protocol 4 pickles like any other.

`read_torch_bin` reads a torch.save'd pytorch_model.bin (Hugging Face's older weights file) without torch:
it is a zip holding a pickle whose tensors point at raw storages in the zip's data/ entries, and its
unpickler admits only the few globals torch.save writes for a state dict, rebuilding every tensor as a
NumPy array; any other global is a ValueError naming the file.

`read_safetensors_state` / `write_safetensors_state` read and write a .safetensors file of parameters
under the project's names; safetensors holds no code, so it needs no allowlist. Like paddle.save, the
writer writes its path directly; callers wrap it in atomic_io.atomic_write.
"""

from __future__ import annotations

import collections
import dataclasses
import errno
import os
import pickle
import re
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import paddle
import safetensors
import safetensors.paddle
from numpy._core.multiarray import _reconstruct, scalar

# Keys paddle.save adds to a state dict (paddle/framework/io.py, io_utils.py).
_NAME_TABLE = "StructuredToParameterName@@"
_SPLIT_ARRAYS = "UnpackBigParamInfor@@"  # Paddle's spelling


class _Refusal(Exception):
    """A global (or a call of an admitted one) that read_paddle_file will not load."""

    def __init__(self, qualified_name: str, reason: str):
        super().__init__(qualified_name, reason)
        self.qualified_name, self.reason = qualified_name, reason


def _array(subtype: type, shape: tuple, dtype: bytes) -> np.ndarray:
    # NumPy pickles an array as _reconstruct(np.ndarray, (0,), b"b") followed by __setstate__.
    if subtype is not np.ndarray:
        raise _Refusal("numpy._core.multiarray._reconstruct", f"called for {subtype!r}, not numpy.ndarray")
    return _reconstruct(subtype, shape, dtype)


def _latin1_bytes(*args: Any) -> bytes:
    # Protocol 2 has no bytes opcode, so Python pickles bytes as _codecs.encode(text, "latin1").
    if not (len(args) == 2 and isinstance(args[0], str) and args[1] in ("latin1", "latin-1")):
        raise _Refusal("_codecs.encode", "called with arguments other than (text, 'latin1')")
    return args[0].encode("latin1")


def _dense_tensor_array(*args: Any) -> np.ndarray:
    # paddle.save pickles a DenseTensor as eval("data", {"data": array}) (reduce_DenseTensor in
    # paddle/framework/io.py); the array is what that eval returns, so return it and evaluate nothing.
    if not (len(args) == 2 and args[0] == "data" and type(args[1]) is dict and list(args[1]) == ["data"]
            and isinstance(args[1]["data"], np.ndarray)):
        raise _Refusal("builtins.eval", "called with arguments other than paddle.save's ('data', {'data': array})")
    return args[1]["data"]


# The globals found in pickles written by paddle.save / paddle.static.save of Paddle 3.3.1 with NumPy 2
# (protocols 2, 3 and 4), plus the numpy.core names of files written with NumPy 1. Each maps to what it
# is loaded as; the three with conditions check their arguments before doing anything.
ADMITTED_GLOBALS: dict[tuple[str, str], Callable] = {
    ("numpy._core.multiarray", "_reconstruct"): _array,
    ("numpy.core.multiarray", "_reconstruct"): _array,
    ("numpy._core.multiarray", "scalar"): scalar,  # NumPy scalars, e.g. in a scheduler state
    ("numpy.core.multiarray", "scalar"): scalar,
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("builtins", "tuple"): tuple,  # paddle.save pickles a Tensor as tuple((name, array))
    ("__builtin__", "tuple"): tuple,  # protocol 2 spells builtins so
    ("_codecs", "encode"): _latin1_bytes,
    ("builtins", "eval"): _dense_tensor_array,
    ("__builtin__", "eval"): _dense_tensor_array,
}


class _RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Callable:
        admitted = ADMITTED_GLOBALS.get((module, name))
        if admitted is None:
            raise _Refusal(f"{module}.{name}", "not one that paddle.save writes for tensors, arrays or containers")
        return admitted


def _contains(obj: Any, condition: Callable[[Any], bool]) -> bool:
    """Whether obj or anything in its dicts, lists and tuples meets condition (paddle's _contain_x)."""
    if condition(obj):
        return True
    if type(obj) in (dict, collections.OrderedDict):
        return any(_contains(value, condition) for value in obj.values())
    if type(obj) in (list, tuple):
        return any(_contains(value, condition) for value in obj)
    return False


def _convert(obj: Any, condition: Callable[[Any], bool], convert: Callable[[Any], Any]) -> Any:
    """obj with every part that meets condition converted, outermost first (paddle's _parse_every_object)."""
    if condition(obj):
        return convert(obj)
    if type(obj) in (dict, collections.OrderedDict):
        for key, value in obj.items():
            obj[key] = _convert(value, condition, convert)
    elif type(obj) is list:
        obj[:] = [_convert(value, condition, convert) for value in obj]
    elif type(obj) is tuple:
        return tuple(_convert(value, condition, convert) for value in obj)
    return obj


def _is_named_array(obj: Any) -> bool:
    return type(obj) is tuple and len(obj) == 2 and isinstance(obj[0], str) and isinstance(obj[1], np.ndarray)


def _is_array(obj: Any) -> bool:
    return isinstance(obj, np.ndarray)


def _named_tensor(array: np.ndarray, name: str) -> paddle.Tensor:
    tensor = paddle.to_tensor(array)
    tensor.name = name
    return tensor


def _join_split_arrays(state: dict) -> dict:
    """Rejoin the arrays that protocols 2 and 3 split into "<key>@@.<i>" slices (paddle's _pack_loaded_dict)."""
    for key, info in state.pop(_SPLIT_ARRAYS, {}).items():
        state[key] = np.concatenate([state.pop(part) for part in info["slices"]]).reshape(info["OriginShape"])
    return state


def _as_paddle_load_returns(obj: Any) -> Any:
    """The unpickled obj turned into what paddle.load returns (paddle/framework/io.py, load)."""
    if isinstance(obj, dict):
        obj = _join_split_arrays(obj)
        if _NAME_TABLE in obj:
            for key, name in obj.pop(_NAME_TABLE).items():
                if isinstance(obj[key], np.ndarray):
                    obj[key] = _named_tensor(obj[key], name)
            return obj
    # A Tensor saved outside a state dict is a (name, array) tuple; without any, every array is a tensor.
    if _contains(obj, _is_named_array):
        return _convert(obj, _is_named_array, lambda pair: _named_tensor(pair[1], pair[0]))
    return _convert(obj, _is_array, paddle.to_tensor)


def read_paddle_file(path: str | os.PathLike) -> Any:
    """What paddle.load(path) returns for a pickle written by paddle.save or paddle.static.save, without
    loading any global outside ADMITTED_GLOBALS (see the module docstring for what it returns).

    Raises FileNotFoundError if path is not a file, and ValueError naming the file for a refused global
    or a file that is not such a pickle (damaged, truncated or of another format). Call it in
    dynamic-graph mode, as paddle.load's Tensors are dynamic-graph Tensors.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    if not paddle.in_dynamic_mode():
        raise RuntimeError("read_paddle_file returns dynamic-graph Tensors; call it outside static mode")
    try:
        with open(path, "rb") as file:
            # paddle.load reads with latin1 so that Python 2 str data becomes bytes-like text unchanged.
            obj = _RestrictedUnpickler(file, encoding="latin1").load()
        return _as_paddle_load_returns(obj)
    except _Refusal as refusal:
        raise ValueError(f"{path}: refuses to load global {refusal.qualified_name} ({refusal.reason})") from None
    except Exception as error:  # a damaged pickle can raise almost any kind
        raise ValueError(f"{path}: not a readable Paddle pickle ({type(error).__name__}: {error})") from None


_BFLOAT16 = "bfloat16"  # NumPy has no bfloat16: such data is read as uint16 bits and widened

# Storage classes torch.save names in its pickle, and the NumPy dtype of their elements.
_TORCH_STORAGE_DTYPES = {
    "FloatStorage": "<f4", "HalfStorage": "<f2", "BFloat16Storage": _BFLOAT16, "DoubleStorage": "<f8",
    "LongStorage": "<i8", "IntStorage": "<i4", "ShortStorage": "<i2", "CharStorage": "i1",
    "ByteStorage": "u1", "BoolStorage": "?",
}


def _raw_dtype(dtype: str) -> np.dtype:
    return np.dtype("<u2" if dtype == _BFLOAT16 else dtype)


def _widen_bfloat16(bits: np.ndarray) -> np.ndarray:
    # bfloat16 is the upper half of an IEEE float32, so shifting the bits up is exact.
    return (bits.astype(np.uint32) << 16).view(np.float32)


@dataclasses.dataclass
class _Storage:
    """One torch storage: a flat array of raw elements (uint16 bits for bfloat16)."""

    elements: np.ndarray
    dtype: str


class _TorchCheckpointUnpickler(pickle.Unpickler):
    """Unpickles a torch.save'd state dict, allowing only the globals such a file needs.

    Anything else -- in particular any callable a crafted file could use to run code -- is refused.
    The persistent ids name storages: ('storage', storage class, key, device, number of elements),
    whose bytes are the zip entry <root>/data/<key>.
    """

    def __init__(self, archive: zipfile.ZipFile, root: str, path: Path):
        super().__init__(archive.open(f"{root}/data.pkl"))
        self.archive, self.root, self.path = archive, root, path
        self.storages: dict[str, _Storage] = {}

    def find_class(self, module: str, name: str):
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if module == "torch._utils" and name in ("_rebuild_tensor", "_rebuild_tensor_v2"):
            return self._rebuild_tensor
        if (module, name) == ("torch._utils", "_rebuild_parameter"):
            return _rebuild_parameter
        if module == "torch" and name in _TORCH_STORAGE_DTYPES:
            return name
        raise pickle.UnpicklingError(f"refusing to load global {module}.{name}")

    def persistent_load(self, persistent_id):
        if not (isinstance(persistent_id, tuple) and len(persistent_id) == 5 and persistent_id[0] == "storage"):
            raise pickle.UnpicklingError(f"unexpected persistent id {persistent_id!r}")
        _, storage_class, key, _device, numel = persistent_id
        if storage_class not in _TORCH_STORAGE_DTYPES:
            raise pickle.UnpicklingError(f"unsupported storage type {storage_class!r}")
        if key not in self.storages:
            dtype = _TORCH_STORAGE_DTYPES[storage_class]
            raw = self.archive.read(f"{self.root}/data/{key}")
            elements = np.frombuffer(raw, dtype=_raw_dtype(dtype))
            if elements.size < numel:
                raise pickle.UnpicklingError(f"storage {key} holds {elements.size} elements, expected {numel}")
            self.storages[key] = _Storage(elements[:numel], dtype)
        return self.storages[key]

    @staticmethod
    def _rebuild_tensor(storage: _Storage, offset: int, size, stride, *_ignored) -> np.ndarray:
        size, stride = tuple(size), tuple(stride)
        if any(n == 0 for n in size):
            array = np.zeros(size, storage.elements.dtype)
        else:
            last = offset + sum((n - 1) * s for n, s in zip(size, stride, strict=True))
            if offset < 0 or min(stride, default=0) < 0 or last >= storage.elements.size:
                raise pickle.UnpicklingError(f"tensor view {size}/{stride}+{offset} lies outside its storage")
            itemsize = storage.elements.itemsize
            array = np.lib.stride_tricks.as_strided(
                storage.elements[offset:], shape=size, strides=[s * itemsize for s in stride]
            ).copy()
        return _widen_bfloat16(array) if storage.dtype == _BFLOAT16 else array


def _rebuild_parameter(data: np.ndarray, *_ignored) -> np.ndarray:
    return data


def read_torch_bin(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """The state dict of a torch.save'd pytorch_model.bin as NumPy arrays, without importing torch."""
    path = Path(path)
    if not zipfile.is_zipfile(path):
        raise ValueError(
            f"{path}: not a zip archive, so a legacy (torch < 1.6) or corrupt checkpoint; "
            "re-save it with a recent torch or as model.safetensors"
        )
    try:
        with zipfile.ZipFile(path) as archive:
            pickles = [name for name in archive.namelist() if name.endswith("/data.pkl")]
            if len(pickles) != 1:
                raise ValueError(f"expected one data.pkl in the archive, found {len(pickles)}")
            root = pickles[0][: -len("/data.pkl")]
            if f"{root}/byteorder" in archive.namelist() and archive.read(f"{root}/byteorder") != b"little":
                raise ValueError("big-endian checkpoints are not supported")
            state = _TorchCheckpointUnpickler(archive, root, path).load()
    except (pickle.UnpicklingError, zipfile.BadZipFile, KeyError, EOFError, TypeError, ValueError) as error:
        raise ValueError(f"{path}: cannot read torch checkpoint ({error})") from None
    if not isinstance(state, Mapping) or not all(isinstance(v, np.ndarray) for v in state.values()):
        raise ValueError(f"{path}: does not hold a state dict of tensors")
    return dict(state)



# safetensors dtypes read_safetensors_state returns; bfloat16 is widened to float32, NumPy having none.
_SAFETENSORS_DTYPES = ("F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U8", "BOOL")


def _rust_path(path: Path, handle: BinaryIO) -> str | Path:
    """A name under which safetensors (Rust, which takes UTF-8 paths only) opens the file: path itself, or for a path
    that is not UTF-8 (Linux keeps such bytes as surrogates) the /proc/self/fd entry of the open handle."""
    try:
        str(path).encode("utf-8")
        return path
    except UnicodeEncodeError:
        return f"/proc/self/fd/{handle.fileno()}"


def read_safetensors_state(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Every tensor of a .safetensors file as a NumPy array, bfloat16 widened exactly to float32.

    Raises FileNotFoundError if path is not a file and ValueError naming it if it is not a safetensors
    file or holds a dtype outside _SAFETENSORS_DTYPES.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    state = {}
    try:
        with open(path, "rb") as handle, safetensors.safe_open(_rust_path(path, handle), framework="paddle") as file:
            for name in file.keys():
                dtype = file.get_slice(name).get_dtype()
                if dtype not in _SAFETENSORS_DTYPES:
                    raise ValueError(f"{path}: tensor {name} has unsupported dtype {dtype}")
                tensor = file.get_tensor(name)
                # .numpy() copies, so no array outlives the file's memory map; bf16 -> f32 is exact.
                state[name] = (tensor.astype("float32") if dtype == "BF16" else tensor).numpy()
    except safetensors.SafetensorError as error:
        raise ValueError(f"{path}: not a valid safetensors file ({error})") from None
    return state


def write_safetensors_state(
    path: str | os.PathLike, state: Mapping[str, paddle.Tensor | np.ndarray], metadata: dict[str, str] | None = None
) -> None:
    """Write state (Tensors or arrays, each in its own dtype) to a .safetensors file.

    A uint16 array is taken as bfloat16 bits, Paddle's own convention (Tensor.numpy() of a bfloat16
    Tensor). metadata goes into the header as text (transformers, for one, wants {"format": "pt"}). Like
    paddle.save, this writes path directly: wrap it in atomic_io.atomic_write, the project's one writer.
    """
    tensors = {
        name: value if isinstance(value, paddle.Tensor) else paddle.to_tensor(value, place=paddle.CPUPlace())
        for name, value in state.items()
    }
    try:
        safetensors.paddle.save_file(tensors, path, metadata=metadata)
    except ValueError as error:  # a non-contiguous tensor
        raise ValueError(f"{path}: {error}") from None
    except safetensors.SafetensorError as error:  # its I/O errors (a full disk) end "... (os error 28)"
        code = re.search(r"os error (\d+)", str(error))
        number = int(code.group(1)) if code else errno.EIO
        raise OSError(number, os.strerror(number), str(path)) from None
