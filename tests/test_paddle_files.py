"""paddle_files: the restricted reader against paddle.load on real files, refusals of crafted payloads, and
the safetensors state helpers."""

import collections
import functools
import io
import os
import pickle
import pickletools
import re
import subprocess
from pathlib import Path

import numpy as np
import paddle
import pytest
import safetensors
import safetensors.numpy
from paddle.pir_utils import OldIrGuard

from bert_config import BertConfig
from checkpoints.paddle_files import ADMITTED_GLOBALS, read_paddle_file, read_safetensors_state, write_safetensors_state
from lr_scheduler import LinearWarmupConstantPolyDecay
from modeling import BertForPretraining
from optimizer import Lamb
from utils.atomic_io import atomic_write

REQUIREMENTS = Path(__file__).resolve().parent.parent / "requirements.txt"
# Names of files written with NumPy 1 (Paddle 2.x): no file written here holds them.
LEGACY_NUMPY_GLOBALS = {("numpy.core.multiarray", "_reconstruct"), ("numpy.core.multiarray", "scalar")}


def pickle_globals(data: bytes) -> set[tuple[str, str]]:
    """(module, name) of every global a pickle names, read with pickletools (nothing is unpickled).

    STACK_GLOBAL takes the two strings pushed before it, directly or from the memo, as Python's pickler
    always writes them.
    """
    found, memo, pushed = set(), {}, []
    for opcode, arg, _ in pickletools.genops(data):
        if opcode.name == "GLOBAL":
            found.add(tuple(arg.split(" ", 1)))
        elif opcode.name == "STACK_GLOBAL":
            found.add((pushed[-2], pushed[-1]))
        elif opcode.name == "MEMOIZE":
            memo[len(memo)] = pushed[-1]
        elif opcode.name in ("PUT", "BINPUT", "LONG_BINPUT"):
            memo[arg] = pushed[-1]
        elif opcode.name in ("GET", "BINGET", "LONG_BINGET"):
            pushed.append(memo[arg])
        else:
            pushed.append(arg if isinstance(arg, str) else None)
    return found


# ---------------------------------------------------------------------------------------------
# Real files, written by paddle.save and paddle.static.save
# ---------------------------------------------------------------------------------------------


def tiny_bert() -> BertForPretraining:
    paddle.seed(7)
    return BertForPretraining(BertConfig(vocab_size=24, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                         intermediate_size=16, max_position_embeddings=16, fuse_mha=True))


def trained_optimizer_state(model: paddle.nn.Layer, optimizer: paddle.optimizer.Optimizer) -> dict:
    """The optimizer's state after two updates of a loss over every parameter."""
    for _ in range(2):
        sum((parameter.astype("float32") ** 2).sum() for parameter in model.parameters()).backward()
        optimizer.step()
        optimizer.clear_grad()
    return optimizer.state_dict()


def write_real_files(folder: Path, protocol: int) -> list[Path]:
    """A file of each kind the project (and a user of paddle.save) writes, in the given pickle protocol."""
    model = tiny_bert()
    adamw = paddle.optimizer.AdamW(learning_rate=LinearWarmupConstantPolyDecay(1e-3, 10, 0.2),
                                   parameters=model.parameters())
    half = paddle.nn.Linear(3, 4)
    half.to(dtype="bfloat16")
    lamb = Lamb(learning_rate=0.05, parameters=half.parameters(), multi_precision=True)
    fp16 = paddle.nn.Linear(3, 2)
    fp16.to(dtype="float16")
    paddle_schedule = paddle.optimizer.lr.LinearWarmup(paddle.optimizer.lr.PolynomialDecay(0.1, 10), 3, 0.0, 0.1)
    paddle_schedule.step()
    objects = {
        "model.pdparams": model.state_dict(),
        "adamw.pdopt": trained_optimizer_state(model, adamw),
        "bf16.pdparams": half.state_dict(),
        "lamb_master_weights.pdopt": trained_optimizer_state(half, lamb),
        "fp16.pdparams": fp16.state_dict(),
        "scheduler.pdopt": {"LR_Scheduler": paddle_schedule.state_dict(), "w": fp16.weight},
        "numpy.pdparams": {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "nested": {"b": np.arange(4)},
                           "scalars": [1, 2.5, np.float32(3.0), np.float64(-0.5)]},
        "mixed.pd": {"model": fp16.state_dict(), "tensors": [fp16.weight, fp16.bias], "pair": (1, "x")},
        "tensor.pdtensor": half.weight,
        "dense_tensor.pdtensor": fp16.weight.value().get_tensor(),
    }
    paths = []
    for name, obj in objects.items():
        paths.append(folder / name)
        paddle.save(obj, str(paths[-1]), protocol=protocol)
    return paths


def write_static_program(prefix: Path) -> None:
    """paddle.static.save of a trained static program, as NVIDIA's recipe saves its checkpoints (Paddle 2.x
    static graphs, hence the legacy program IR)."""
    with OldIrGuard():
        paddle.enable_static()
        try:
            main, startup = paddle.static.Program(), paddle.static.Program()
            with paddle.static.program_guard(main, startup):
                x = paddle.static.data("x", [None, 3], "float32")
                loss = paddle.mean(paddle.static.nn.fc(x, 4))
                paddle.optimizer.Adam(0.01).minimize(loss)
            executor = paddle.static.Executor(paddle.CPUPlace())
            executor.run(startup)
            executor.run(main, feed={"x": np.ones((2, 3), np.float32)}, fetch_list=[loss])
            paddle.static.save(main, str(prefix))
        finally:
            paddle.disable_static()


def load_program_state(prefix: Path) -> dict:
    with OldIrGuard():
        paddle.enable_static()
        try:
            return paddle.static.load_program_state(str(prefix))
        finally:
            paddle.disable_static()


def assert_identical(actual, expected, where="file"):
    """Same types, keys, tensor names, dtypes, shapes and bytes, all the way down."""
    assert type(actual) is type(expected), f"{where}: {type(actual)} vs {type(expected)}"
    if isinstance(expected, dict):
        assert list(actual) == list(expected), where
        for key in expected:
            assert_identical(actual[key], expected[key], f"{where}[{key!r}]")
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected), where
        for index, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_identical(a, e, f"{where}[{index}]")
    elif isinstance(expected, paddle.Tensor):
        assert (actual.dtype, actual.shape) == (expected.dtype, expected.shape), where
        # An unnamed tensor gets a fresh generated_tensor_<n> name at each creation.
        if not expected.name.startswith("generated_tensor_"):
            assert actual.name == expected.name, where
        assert str(actual.place) == str(expected.place), where
        assert actual.numpy().tobytes() == expected.numpy().tobytes(), where
    elif isinstance(expected, np.ndarray | np.generic):
        assert (actual.dtype, actual.shape, actual.tobytes()) == (expected.dtype, expected.shape, expected.tobytes())
    else:
        assert actual == expected, where


@pytest.fixture(scope="module")
def real_files(tmp_path_factory) -> dict[int, list[Path]]:
    return {protocol: write_real_files(tmp_path_factory.mktemp(f"protocol{protocol}"), protocol)
            for protocol in (2, 3, 4)}


def test_paddle_save_writes_only_admitted_globals(real_files, tmp_path):
    """Every global in paddle.save's files is admitted, and every admitted one (bar NumPy 1's names) is
    written by some file: after a Paddle or NumPy upgrade, re-derive ADMITTED_GLOBALS from this test."""
    write_static_program(tmp_path / "static")
    paths = [path for files in real_files.values() for path in files]
    paths += [tmp_path / "static.pdparams", tmp_path / "static.pdopt"]
    written = set()
    for path in paths:
        found = pickle_globals(path.read_bytes())
        assert found <= set(ADMITTED_GLOBALS), f"{path.name} names unadmitted {found - set(ADMITTED_GLOBALS)}"
        written |= found
    assert written == set(ADMITTED_GLOBALS) - LEGACY_NUMPY_GLOBALS


@pytest.mark.parametrize("protocol", [2, 3, 4])
def test_reads_what_paddle_load_reads(real_files, protocol):
    for path in real_files[protocol]:
        assert_identical(read_paddle_file(path), paddle.load(str(path)), path.name)


def test_state_dicts_come_back_bit_for_bit(tmp_path):
    """Against the tensors that were saved, not only against paddle.load."""
    model = tiny_bert()
    path = tmp_path / "model.pdparams"
    paddle.save(model.state_dict(), str(path))
    loaded = read_paddle_file(path)
    assert list(loaded) == list(model.state_dict())
    for key, tensor in model.state_dict().items():
        assert isinstance(loaded[key], paddle.Tensor) and loaded[key].name == tensor.name
        assert (loaded[key].dtype, loaded[key].shape) == (tensor.dtype, tensor.shape)
        assert loaded[key].numpy().tobytes() == tensor.numpy().tobytes()


def test_optimizer_state_with_master_weights_resumes_as_from_paddle_load(tmp_path):
    """set_state_dict of what the reader returns continues training exactly as paddle.load's result does."""

    def train(model_state: dict | None = None, optimizer_state: dict | None = None):
        """(model, optimizer) after two updates of a bf16 layer, from a fresh start or from the states."""
        paddle.seed(3)
        # A fresh name scope gives the parameter and accumulator names that a resumed run's new process gives.
        with paddle.utils.unique_name.guard():
            layer = paddle.nn.Linear(3, 4)
            layer.to(dtype="bfloat16")
            optimizer = Lamb(learning_rate=0.05, parameters=layer.parameters(), multi_precision=True)
            if model_state is not None:
                layer.set_state_dict(model_state)
                optimizer.set_state_dict(optimizer_state)
            trained_optimizer_state(layer, optimizer)
        return layer, optimizer

    def values(layer, optimizer) -> list[np.ndarray]:
        return ([p.astype("float32").numpy() for p in layer.parameters()]
                + [w.numpy() for w in optimizer._master_weights.values()])

    layer, optimizer = train()
    assert "master_weights" in optimizer.state_dict()
    params_path, optimizer_path = tmp_path / "lamb.pdparams", tmp_path / "lamb.pdopt"
    paddle.save(layer.state_dict(), str(params_path))
    paddle.save(optimizer.state_dict(), str(optimizer_path))
    from_reader = values(*train(read_paddle_file(params_path), read_paddle_file(optimizer_path)))
    from_paddle = values(*train(paddle.load(str(params_path)), paddle.load(str(optimizer_path))))
    for a, b in zip(from_reader, from_paddle, strict=True):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(from_reader[0], values(layer, optimizer)[0])  # training went on


def test_static_program_state_equals_load_program_state(tmp_path):
    """NVIDIA's NGC checkpoints: .pdparams and .pdopt of paddle.static.save hold load_program_state's dict."""
    prefix = tmp_path / "bert_paddle"
    write_static_program(prefix)
    expected = load_program_state(prefix)
    read = {**read_paddle_file(prefix.with_suffix(".pdparams")), **read_paddle_file(prefix.with_suffix(".pdopt"))}
    assert sorted(read) == sorted(expected)
    for key, array in expected.items():
        value = read[key].numpy()
        assert (value.dtype, value.shape, value.tobytes()) == (array.dtype, array.shape, array.tobytes()), key


class Global:
    """A stand-in that SpoofingPickler writes as the global module.name, whatever is installed."""

    def __init__(self, module: str, name: str):
        self.module, self.name = module, name

    def __call__(self, *args):
        raise AssertionError("a stand-in is only pickled")


class Call:
    """Unpickles as function(*args): the way a crafted pickle runs code."""

    def __init__(self, function, args: tuple):
        self.function, self.args = function, args

    def __reduce__(self):
        return self.function, self.args


class SpoofingPickler(pickle._Pickler):
    """Python's pickler, writing each Global as the global it names and, if numpy_module is given, naming
    NumPy's array reconstructor by that module (as files written with NumPy 1 do)."""

    dispatch = pickle._Pickler.dispatch.copy()

    def __init__(self, file, numpy_module: str | None = None):
        super().__init__(file, protocol=4)
        self.numpy_module = numpy_module

    def save_stand_in(self, obj: Global) -> None:
        self.save(obj.module)
        self.save(obj.name)
        self.write(pickle.STACK_GLOBAL)
        self.memoize(obj)

    dispatch[Global] = save_stand_in

    def reducer_override(self, obj):
        if self.numpy_module and type(obj) is np.ndarray:
            _, args, state = obj.__reduce__()
            return Global(self.numpy_module, "_reconstruct"), args, state
        return NotImplemented


def spoofed_pickle(obj, numpy_module: str | None = None) -> bytes:
    buffer = io.BytesIO()
    SpoofingPickler(buffer, numpy_module).dump(obj)
    return buffer.getvalue()


def test_arrays_of_numpy_1_files_are_read(tmp_path):
    """A dict of arrays as Paddle 2.x with NumPy 1 wrote it (numpy.core names)."""
    path = tmp_path / "legacy.pdparams"
    state = {"word_embedding": np.arange(12, dtype=np.float32).reshape(3, 4), "step": np.int64(5)}
    path.write_bytes(spoofed_pickle(state, numpy_module="numpy.core.multiarray"))
    assert ("numpy.core.multiarray", "_reconstruct") in pickle_globals(path.read_bytes())
    loaded = read_paddle_file(path)
    assert_identical(loaded, paddle.load(str(path)))
    np.testing.assert_array_equal(loaded["word_embedding"].numpy(), state["word_embedding"])


def test_split_arrays_are_rejoined(tmp_path):
    """Protocols 2 and 3 split arrays over 1 GiB into slices (io_utils._unpack_saved_dict); build the same
    layout on a small array and read it back whole, with its parameter name."""
    weight = np.arange(12, dtype=np.float32).reshape(3, 4)
    flat = weight.flatten()
    saved = {"w@@.0": flat[:5], "w@@.1": flat[5:10], "w@@.2": flat[10:], "b": np.ones(2, np.float32),
             "StructuredToParameterName@@": {"w": "linear_9.w_0", "b": "linear_9.b_0"},
             "UnpackBigParamInfor@@": {"w": {"OriginShape": (3, 4), "slices": ["w@@.0", "w@@.1", "w@@.2"]}}}
    path = tmp_path / "split.pdparams"
    path.write_bytes(pickle.dumps(saved, protocol=2))
    loaded = read_paddle_file(path)
    assert_identical(loaded, paddle.load(str(path)))
    assert sorted(loaded) == ["b", "w"] and loaded["w"].name == "linear_9.w_0"
    np.testing.assert_array_equal(loaded["w"].numpy(), weight)


# ---------------------------------------------------------------------------------------------
# Refusals
# ---------------------------------------------------------------------------------------------


def payloads(marker: Path) -> dict[str, tuple[object, str]]:
    """name -> (object that creates marker when unpickled, the global the reader must refuse)."""
    touch = f"touch {marker}"
    create = f"open({str(marker)!r}, 'w').close()"
    return {
        "os.system": (Call(Global("os", "system"), (touch,)), "os.system"),
        "posix.system": (Call(os.system, (touch,)), "posix.system"),
        "builtins.exec": (Call(exec, (create,)), "builtins.exec"),
        "builtins.eval": (Call(eval, (create,)), "builtins.eval"),
        "subprocess.call": (Call(subprocess.call, (["touch", str(marker)],)), "subprocess.call"),
        "functools.partial": (Call(functools.partial(os.system, touch), ()), "functools.partial"),
    }


def _in_model_state(state, payload):
    state["bert.embeddings.word_embeddings.weight"] = payload


def _in_optimizer_master_weights(state, payload):
    state["master_weights"][next(iter(state["master_weights"]))] = payload


def _in_scheduler_state(state, payload):
    state["LR_Scheduler"]["last_epoch"] = payload


def _in_list(state, payload):
    state["tensors"].insert(1, payload)


# position -> (real file it is planted in, how)
POSITIONS = {
    "top-level dict": ("model.pdparams", _in_model_state),
    "nested optimizer state": ("lamb_master_weights.pdopt", _in_optimizer_master_weights),
    "scheduler state": ("adamw.pdopt", _in_scheduler_state),
    "inside a list": ("mixed.pd", _in_list),
}


@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("payload", ["os.system", "posix.system", "builtins.exec", "builtins.eval",
                                     "subprocess.call", "functools.partial"])
def test_payload_is_refused_and_never_runs(real_files, tmp_path, payload, position):
    marker = tmp_path / "marker"
    payload_object, refused_global = payloads(marker)[payload]
    file_name, plant = POSITIONS[position]
    (source,) = [path for path in real_files[4] if path.name == file_name]
    with open(source, "rb") as trusted:  # our own file, read unrestricted to plant the payload in it
        state = pickle.load(trusted)
    plant(state, payload_object)
    crafted = tmp_path / file_name
    crafted.write_bytes(spoofed_pickle(state))

    pickle.loads(crafted.read_bytes())  # the payload is live: unrestricted unpickling runs it
    assert marker.exists()
    marker.unlink()

    with pytest.raises(ValueError) as refusal:
        read_paddle_file(crafted)
    message = str(refusal.value)
    assert message.startswith(f"{crafted}: refuses to load global {refused_global} ")
    assert "\n" not in message
    assert not marker.exists()


def test_a_file_that_is_only_a_payload_is_refused(tmp_path):
    marker = tmp_path / "marker"
    crafted = tmp_path / "model.pdparams"
    crafted.write_bytes(spoofed_pickle(payloads(marker)["os.system"][0]))
    with pytest.raises(ValueError, match=re.escape(f"{crafted}: refuses to load global os.system ")):
        read_paddle_file(crafted)
    assert not marker.exists()


def test_admitted_constructors_refuse_other_uses(tmp_path):
    """Admitted names called as no paddle.save file calls them are refused too."""
    cases = {
        "numpy._core.multiarray._reconstruct": Call(Global("numpy._core.multiarray", "_reconstruct"),
                                                    (collections.OrderedDict, (0,), b"b")),
        "_codecs.encode": Call(Global("_codecs", "encode"), ("eJw=", "base64")),
        "builtins.eval": Call(Global("builtins", "eval"), ("data", {"data": np.zeros(1), "x": 1})),
    }
    for refused_global, call in cases.items():
        path = tmp_path / "crafted.pdparams"
        path.write_bytes(spoofed_pickle({"w": call}))
        with pytest.raises(ValueError, match=re.escape(f"{path}: refuses to load global {refused_global} ")):
            read_paddle_file(path)


# ---------------------------------------------------------------------------------------------
# Other bad input
# ---------------------------------------------------------------------------------------------


def test_missing_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=re.escape(f"{tmp_path / 'absent.pdparams'}: no such file")):
        read_paddle_file(tmp_path / "absent.pdparams")


@pytest.mark.parametrize("kind", ["empty", "text", "truncated", "safetensors"])
def test_files_that_are_not_paddle_pickles_are_named(real_files, tmp_path, kind):
    path = tmp_path / "bad.pdparams"
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "text":
        path.write_text('{"hidden_size": 768}\n')
    elif kind == "truncated":
        data = real_files[4][0].read_bytes()
        path.write_bytes(data[: len(data) // 2])
    else:
        write_safetensors_state(path, {"w": np.ones(2, np.float32)})
    with pytest.raises(ValueError) as error:
        read_paddle_file(path)
    assert str(error.value).startswith(f"{path}: not a readable Paddle pickle (")
    assert "\n" not in str(error.value)


def test_static_mode_is_refused(real_files):
    """paddle.load gives static-graph DenseTensors there; the reader gives only dynamic-graph Tensors."""
    paddle.enable_static()
    try:
        with pytest.raises(RuntimeError, match="outside static mode"):
            read_paddle_file(real_files[4][0])
    finally:
        paddle.disable_static()

def test_paddle_version_is_the_pinned_one():
    (pin,) = re.findall(r"^paddlepaddle==(\S+)", REQUIREMENTS.read_text(), flags=re.MULTILINE)
    assert paddle.__version__ == pin, (
        f"paddle {paddle.__version__} is installed but requirements.txt pins {pin}: after an upgrade, re-derive "
        "paddle_files.ADMITTED_GLOBALS from test_paddle_save_writes_only_admitted_globals and update the pin"
    )


# ---------------------------------------------------------------------------------------------
# safetensors
# ---------------------------------------------------------------------------------------------


def test_safetensors_state_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    float32 = rng.normal(size=(3, 4)).astype(np.float32)
    bf16 = paddle.to_tensor(rng.normal(size=(2, 3)).astype(np.float32)).astype("bfloat16")
    fp16 = rng.normal(size=5).astype(np.float16)
    state = {"bert.embeddings.word_embeddings.weight": float32, "cls.decoder_bias": bf16,
             "qa_outputs.bias": paddle.to_tensor(fp16), "positions": np.arange(4, dtype=np.int64)}
    path = tmp_path / "model.safetensors"
    atomic_write(path, lambda temp: write_safetensors_state(temp, state, metadata={"format": "pt"}))
    loaded = read_safetensors_state(path)
    assert list(loaded) == sorted(state)
    np.testing.assert_array_equal(loaded["bert.embeddings.word_embeddings.weight"], float32)
    assert loaded["qa_outputs.bias"].dtype == np.float16
    np.testing.assert_array_equal(loaded["qa_outputs.bias"], fp16)
    np.testing.assert_array_equal(loaded["positions"], np.arange(4))
    # bfloat16 is the upper half of a float32 (Paddle's numpy() gives those bits as uint16).
    widened = (bf16.numpy().astype(np.uint32) << 16).view(np.float32)
    assert loaded["cls.decoder_bias"].dtype == np.float32
    np.testing.assert_array_equal(loaded["cls.decoder_bias"], widened)
    # The same file decoded here from its raw bytes, independently of the reader.
    for name, entry in safetensors.deserialize(path.read_bytes()):
        raw = np.frombuffer(entry["data"], dtype={"F32": "<f4", "F16": "<f2", "I64": "<i8", "BF16": "<u2"}[
            entry["dtype"]]).reshape(entry["shape"])
        expected = (raw.astype(np.uint32) << 16).view(np.float32) if entry["dtype"] == "BF16" else raw
        np.testing.assert_array_equal(loaded[name], expected)
    with safetensors.safe_open(path, framework="numpy") as file:
        assert file.metadata() == {"format": "pt"}


def test_safetensors_bad_input_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=re.escape(f"{tmp_path / 'absent.safetensors'}: no such file")):
        read_safetensors_state(tmp_path / "absent.safetensors")
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(b"\x00" * 64)
    with pytest.raises(ValueError, match=re.escape(f"{garbage}: not a valid safetensors file")):
        read_safetensors_state(garbage)
    unsupported = tmp_path / "uint16.safetensors"
    safetensors.numpy.save_file({"w": np.ones(2, np.uint16)}, str(unsupported))
    with pytest.raises(ValueError, match=re.escape(f"{unsupported}: tensor w has unsupported dtype U16")):
        read_safetensors_state(unsupported)

