"""Tests of benchmarks/finetune_parity.py and its peer benchmarks/glue_hf_peer.py without torch (CI has no peers'
venv) and without timing anything: the command line and its one-line refusals, the fixed training subsets, the
summary's arithmetic against hand-computed figures, resuming from stage files, the results file that is never
replaced, the peer's schedule and batching against run_glue.py's own, and one end-to-end run of our side on a tiny
model.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import paddle
import pytest

import convert_checkpoint
import lr_scheduler
import run_glue
from bert_config import BertConfig
from conftest import ROOT
from finetuning import finetune
from finetuning.glue_data import read_glue_examples
from messages import assert_one_line
from modeling import BertForPretraining
from utils import cli

BENCHMARKS = ROOT / "benchmarks"
SCRIPT = "finetune_parity.py"
BF16_FLAGS = ["avx2", "avx512f", "avx512_bf16"]
NO_BF16_FLAGS = ["avx2", "avx512f"]


@pytest.fixture
def parity(monkeypatch):
    """benchmarks/finetune_parity.py as a module, as its script sees its neighbours (benchmarks/ on the path), on a
    CPU with bf16 instructions unless a test says otherwise; no peers' folder in the environment."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    monkeypatch.delenv("PADDLEBERT_PEERS_DIR", raising=False)
    module = importlib.import_module("finetune_parity")
    monkeypatch.setattr(module.machine, "kernel_flags", lambda *args: BF16_FLAGS)
    return module


@pytest.fixture
def peer(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    return importlib.import_module("glue_hf_peer")


def run_parity(module, argv: list[str], capsys) -> tuple[int, str, str]:
    """(status, stdout, stderr) of `python finetune_parity.py argv`, in this process as its __main__ runs it."""
    capsys.readouterr()
    try:
        status = cli.run_main(lambda: module.main(argv), SCRIPT)
    except SystemExit as exit_request:  # argparse (status 2) or a message (status 1)
        status = exit_request.code
        if isinstance(status, str):
            print(status, file=sys.stderr)
            status = 1
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---------------------------------------------------------------------------------------------------------------
# Small GLUE folders and a fake peer Python
# ---------------------------------------------------------------------------------------------------------------

WORDS = ["the", "cat", "dog", "sat", "ran", "on", "a", "mat", "and", "fast", "slow", "big", "red", '"', "."]
MRPC_HEADER = "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"  # the real files start with a byte-order mark


def sentence(rng: np.random.Generator) -> str:
    return " ".join(rng.choice(WORDS, size=int(rng.integers(3, 9))))


def write_glue(root: Path, rows: int = 40, dev_rows: int = 12) -> Path:
    """root/MRPC and root/CoLA with train.tsv and dev.tsv in GLUE's layouts (MRPC with its header and byte-order
    mark, CoLA without a header); some sentences hold a lone quote character, as GLUE's do."""
    rng = np.random.default_rng(0)
    for split, count in (("train", rows), ("dev", dev_rows)):
        mrpc = "".join(f"{index % 2}\t{100 + index}\t{200 + index}\t{sentence(rng)}\t{sentence(rng)}\n"
                       for index in range(count))
        (root / "MRPC").mkdir(parents=True, exist_ok=True)
        (root / "MRPC" / f"{split}.tsv").write_text(MRPC_HEADER + mrpc, encoding="utf-8")
        cola = "".join(f"gj04\t{index % 2}\t\t{sentence(rng)}\n" for index in range(count))
        (root / "CoLA").mkdir(parents=True, exist_ok=True)
        (root / "CoLA" / f"{split}.tsv").write_text(cola, encoding="utf-8")
    return root


def write_model_dir(folder: Path, lower_case: bool | None = True) -> Path:
    """A folder with what the benchmark reads of a Hugging Face model itself: config.json, vocab.txt and, unless
    lower_case is None, tokenizer_config.json."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text("{}")
    (folder / "vocab.txt").write_text("".join(f"{token}\n" for token in
                                              ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]))
    if lower_case is not None:
        (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": lower_case}))
    return folder


def base_argv(tmp_path: Path, *more: str) -> list[str]:
    return ["--glue-dir", str(tmp_path / "glue"), "--model-dir", str(tmp_path / "model"), "--work-dir",
            str(tmp_path / "work"), *more]


@pytest.fixture
def folders(tmp_path) -> Path:
    write_glue(tmp_path / "glue")
    write_model_dir(tmp_path / "model")
    return tmp_path


# ---------------------------------------------------------------------------------------------------------------
# The command line
# ---------------------------------------------------------------------------------------------------------------


def test_defaults_are_the_four_tasks_three_seeds_the_preset_recipe_and_every_contender_on_a_bf16_cpu(parity):
    plan = parity.parse_plan(["--only", "ours"])
    assert (plan.tasks, plan.seeds, plan.epochs, plan.learning_rate) == (["mrpc", "rte", "cola", "sst-2"],
                                                                        [1, 2, 3], 2, 1e-4)
    assert plan.train_examples == {"mrpc": 1600, "rte": 1000, "cola": 4000, "sst-2": 3000}
    assert plan.model_dir == ROOT.parent / "shared" / "models" / "all-MiniLM-L6-v2"
    assert plan.glue_dir == ROOT.parent / "shared" / "data" / "glue"
    assert plan.work_dir == ROOT / "results" / "finetune_parity"
    assert plan.output is None
    assert parity.build_parser().parse_args([]).only == "ours,transformers,transformers-bf16"


def test_without_bf16_instructions_the_bf16_contender_is_left_out_and_refused_by_name(parity, monkeypatch, capsys):
    monkeypatch.setattr(parity.machine, "kernel_flags", lambda *args: NO_BF16_FLAGS)
    assert parity.build_parser().parse_args([]).only == "ours,transformers"
    status, out, err = run_parity(parity, ["--only", "ours,transformers-bf16"], capsys)
    assert status == 2
    assert out.startswith("machine: ")
    assert_one_line(err.splitlines()[-1], f"{SCRIPT}: error: ", "--only transformers-bf16", "avx512_bf16")


def test_every_flag_reaches_the_plan(parity, tmp_path):
    python = tmp_path / "python"
    python.write_text("")
    plan = parity.parse_plan(["--tasks", "CoLA,mrpc", "--seeds", "7,3", "--epochs", "3", "--learning-rate", "2e-5",
                              "--work-dir", "w", "--output", "out.txt", "--model-dir", "m", "--glue-dir", "g",
                              "--only", "transformers,ours", "--torch-python", str(python),
                              "--max-train-examples", "100", "--max-train-examples", "mrpc=all"])
    assert (plan.tasks, plan.seeds, plan.epochs, plan.learning_rate) == (["cola", "mrpc"], [7, 3], 3, 2e-5)
    assert plan.contenders == ["transformers", "ours"]
    assert plan.pythons == {"transformers": str(python)}
    assert plan.train_examples == {"cola": 100, "mrpc": None}
    assert (plan.work_dir, plan.output, plan.model_dir, plan.glue_dir) == (
        Path("w").absolute(), Path("out.txt").absolute(), Path("m").absolute(), Path("g").absolute())


def test_a_task_size_after_an_all_tasks_size_overrides_it_and_the_other_way_round(parity):
    sizes = parity.parse_plan(["--only", "ours", "--max-train-examples", "rte=50", "--max-train-examples", "64"])
    assert sizes.train_examples == dict.fromkeys(["mrpc", "rte", "cola", "sst-2"], 64)
    sizes = parity.parse_plan(["--only", "ours", "--max-train-examples", "all", "--max-train-examples", "rte=50"])
    assert sizes.train_examples == {"mrpc": None, "rte": 50, "cola": None, "sst-2": None}


@pytest.mark.parametrize(("argv", "names"), [
    (["--tasks", "qnli"], ["--tasks", "qnli"]),
    (["--tasks", "mrpc,mrpc"], ["--tasks", "repeat"]),
    (["--tasks", ","], ["--tasks"]),
    (["--seeds", "1,x"], ["--seeds", "'x'"]),
    (["--seeds", "-1"], ["--seeds", "'-1'"]),
    (["--seeds", "2,2"], ["--seeds", "repeat"]),
    (["--epochs", "0"], ["--epochs", "'0'"]),
    (["--learning-rate", "nan"], ["--learning-rate", "'nan'"]),
    (["--max-train-examples", "mrpc=0"], ["--max-train-examples", "mrpc=0"]),
    (["--max-train-examples", "qnli=5"], ["--max-train-examples", "qnli"]),
    (["--max-train-examples", "some"], ["--max-train-examples", "some"]),
    (["--tasks", "mrpc", "--max-train-examples", "rte=5"], ["--max-train-examples", "rte", "--tasks mrpc"]),
    (["--only", "ours,nope"], ["--only", "nope"]),
])
def test_a_bad_flag_is_one_line_naming_it_and_nothing_runs(parity, folders, capsys, argv, names):
    status, out, err = run_parity(parity, base_argv(folders, *argv), capsys)
    assert status == 2
    assert out.startswith("machine: ")
    assert "Traceback" not in err
    assert_one_line(err.splitlines()[-1], f"{SCRIPT}: error: ", *names)
    assert not (folders / "work").exists()


def test_an_existing_output_is_refused_before_anything_runs_and_left_as_it_was(parity, folders, capsys):
    output = folders / "results.txt"
    output.write_text("an earlier run's report\n")
    before = sha256(output)
    status, _, err = run_parity(parity, base_argv(folders, "--only", "ours", "--output", str(output)), capsys)
    assert status == 2
    assert_one_line(err.splitlines()[-1], f"{SCRIPT}: error: ", "--output", output, "exists")
    assert sha256(output) == before
    assert not (folders / "work").exists()


@pytest.mark.parametrize("only", ["transformers", "ours,transformers-bf16"])
def test_a_missing_peer_python_is_one_line_naming_the_flag(parity, folders, capsys, only, tmp_path):
    status, _, err = run_parity(parity, base_argv(folders, "--only", only), capsys)
    assert status == 1
    assert_one_line(err, f"{SCRIPT}: --torch-python is not given and PADDLEBERT_PEERS_DIR is not set",
                    "setup_peers.sh")
    status, _, err = run_parity(parity, base_argv(folders, "--only", only, "--torch-python",
                                                  str(tmp_path / "none")), capsys)
    assert status == 1
    assert_one_line(err, f"{SCRIPT}: --torch-python {tmp_path / 'none'}: no such file")


@pytest.mark.parametrize("missing", ["config.json", "vocab.txt"])
def test_a_model_folder_without_its_files_is_one_line(parity, folders, capsys, missing):
    (folders / "model" / missing).unlink()
    status, _, err = run_parity(parity, base_argv(folders, "--only", "ours", "--tasks", "mrpc"), capsys)
    assert status == 1
    assert_one_line(err, f"{SCRIPT}: --model-dir {folders / 'model'}: no {missing}")


def test_a_malformed_glue_row_is_one_line_naming_file_and_line(parity, folders, capsys):
    train = folders / "glue" / "MRPC" / "train.tsv"
    lines = train.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[3] = "1\t7\tonly three fields\n"
    train.write_text("".join(lines), encoding="utf-8")
    status, _, err = run_parity(parity, base_argv(folders, "--only", "ours", "--tasks", "mrpc"), capsys)
    assert status == 1
    assert_one_line(err, f"{SCRIPT}: {train}:4:", "expected 5")


def test_a_missing_glue_file_is_one_line_naming_it(parity, folders, capsys):
    (folders / "glue" / "CoLA" / "dev.tsv").unlink()
    status, _, err = run_parity(parity, base_argv(folders, "--only", "ours", "--tasks", "cola"), capsys)
    assert status == 1
    assert_one_line(err, f"{SCRIPT}: {folders / 'glue' / 'CoLA' / 'dev.tsv'}: file not found")


# ---------------------------------------------------------------------------------------------------------------
# The fixed subsets
# ---------------------------------------------------------------------------------------------------------------


def test_subset_rows_are_distinct_in_file_order_the_same_every_time_and_all_rows_at_or_above_the_total(parity):
    rows = parity.subset_rows(1000, 30)
    assert rows == parity.subset_rows(1000, 30)
    assert len(rows) == len(set(rows)) == 30 and rows == sorted(rows) and 0 <= rows[0] and rows[-1] < 1000
    assert rows != list(range(30))  # drawn over the whole file, not its head
    assert parity.subset_rows(5, 5) == parity.subset_rows(5, 9) == parity.subset_rows(5, None) == [0, 1, 2, 3, 4]


def test_a_subset_file_holds_the_header_and_the_chosen_rows_verbatim_and_reads_as_those_examples(parity, folders):
    plan = parity.parse_plan(base_argv(folders, "--only", "ours", "--max-train-examples", "mrpc=10"))
    data = parity.prepare_task(plan, "mrpc")
    source = folders / "glue" / "MRPC" / "train.tsv"
    source_lines = source.read_text(encoding="utf-8-sig").splitlines(keepends=True)
    kept = parity.subset_rows(40, 10)
    assert data.train_file.read_text(encoding="utf-8").splitlines(keepends=True) == (
        [source_lines[0]] + [source_lines[1 + row] for row in kept])
    examples = read_glue_examples("mrpc", source)
    assert read_glue_examples("mrpc", data.train_file) == [examples[row] for row in kept]
    assert (data.train_examples, data.train_total, data.dev_examples) == (10, 40, 12)
    assert data.dev_file.read_text(encoding="utf-8") == (folders / "glue" / "MRPC" / "dev.tsv").read_text(
        encoding="utf-8-sig")
    assert data.train_sha256 == sha256(data.train_file) and data.dev_sha256 == sha256(data.dev_file)


def test_a_headerless_task_keeps_no_header_and_the_same_subset_lands_in_any_work_folder(parity, folders):
    subsets = []
    for work in ("w1", "w2"):
        plan = parity.parse_plan(["--glue-dir", str(folders / "glue"), "--model-dir", str(folders / "model"),
                                  "--work-dir", str(folders / work), "--only", "ours", "--max-train-examples",
                                  "cola=7"])
        subsets.append(parity.prepare_task(plan, "cola").train_file.read_bytes())
    assert subsets[0] == subsets[1]
    source_lines = (folders / "glue" / "CoLA" / "train.tsv").read_text().splitlines(keepends=True)
    assert subsets[0].decode().splitlines(keepends=True) == [source_lines[row] for row in parity.subset_rows(40, 7)]


# ---------------------------------------------------------------------------------------------------------------
# The summary's arithmetic
# ---------------------------------------------------------------------------------------------------------------


def record(accuracy: float, f1: float, train: float, process: float) -> dict:
    return {"metrics": {"accuracy": accuracy, "f1": f1, "auc": 0.5}, "train_seconds": train,
            "process_seconds": process}


def test_glue_score_median_and_spread_against_hand_computed_values(parity):
    assert parity.glue_score("mrpc", {"accuracy": 0.80, "f1": 0.90}) == pytest.approx(85.0)
    assert parity.glue_score("cola", {"accuracy": 0.70, "mcc": 0.35}) == pytest.approx(35.0)
    assert parity.median_and_spread([70.0, 74.0, 71.0]) == (71.0, 4.0)
    assert parity.median_and_spread([70.0, 74.0]) == (72.0, 4.0)
    summary = parity.summarize("mrpc", [record(0.80, 0.86, 100.0, 130.0), record(0.76, 0.84, 90.0, 120.0),
                                        record(0.78, 0.88, 120.0, 150.0)])
    # scores 83, 80, 83 -> median 83, spread 3; accuracy median 78, F1 median 86
    assert summary.score == pytest.approx(83.0) and summary.spread == pytest.approx(3.0)
    assert summary.metrics == pytest.approx({"accuracy": 78.0, "f1": 86.0, "auc": 50.0})
    assert (summary.train_seconds, summary.process_seconds) == (100.0, 130.0)


def test_the_comparison_says_within_or_outside_the_larger_spread_and_the_time_ratios(parity):
    ours = parity.Summary(80.0, 2.0, {}, 60.0, 90.0)
    assert parity.comparison_line(ours, parity.Summary(81.0, 3.0, {}, 100.0, 120.0), "transformers") == (
        "ours vs transformers: score -1.00 (within the larger spread 3.00); training time ours/transformers 0.60 "
        "(target <= 0.75: met); process time ours/transformers 0.75")
    line = parity.comparison_line(ours, parity.Summary(75.0, 1.5, {}, 80.0, 100.0), "transformers")
    assert "score +5.00 (outside by 3.00 the larger spread 2.00)" in line and "0.75 (target <= 0.75: met)" in line
    line = parity.comparison_line(ours, parity.Summary(80.0, 0.0, {}, 70.0, 100.0), "transformers-bf16")
    assert line == ("ours vs transformers-bf16: score +0.00 (within the larger spread 2.00); training time "
                    "ours/transformers-bf16 0.86; process time ours/transformers-bf16 0.90")
    assert "0.81 (target <= 0.75: missed)" in parity.comparison_line(
        ours, parity.Summary(80.0, 0.0, {}, 74.0, 100.0), "transformers")


def test_the_totals_add_every_run_and_divide_ours_by_each_peer(parity):
    runs = {"ours": [record(0.8, 0.8, 10.0, 20.0), record(0.8, 0.8, 30.0, 40.0)],
            "transformers": [record(0.8, 0.8, 50.0, 60.0), record(0.8, 0.8, 30.0, 40.0)]}
    assert parity.totals_report(runs) == [
        "all tasks: ours training 40 s, process 60 s; transformers training 80 s, process 100 s",
        "all tasks: training time ours/transformers 0.50, process time ours/transformers 0.60"]


# ---------------------------------------------------------------------------------------------------------------
# Stages: resuming, order, settings
# ---------------------------------------------------------------------------------------------------------------

FAKE_RESULTS = {  # (contender, seed) -> (accuracy, f1, training seconds, process seconds)
    ("ours", 1): (0.80, 0.86, 100.0, 130.0), ("ours", 2): (0.76, 0.84, 90.0, 120.0),
    ("ours", 3): (0.78, 0.88, 120.0, 150.0),
    ("transformers", 1): (0.81, 0.87, 200.0, 230.0), ("transformers", 2): (0.79, 0.85, 180.0, 220.0),
    ("transformers", 3): (0.75, 0.83, 210.0, 250.0),
}
TOKENIZER_CHECK = {"examples": 52, "tokenized_differently": 0, "first_difference": None}


def fabricate_stages(parity, argv: list[str]) -> None:
    """The stage files that a finished run of argv would have left, with FAKE_RESULTS."""
    plan = parity.parse_plan(argv)
    stages = parity.Stages(plan.work_dir)
    model, _ = parity.machine.cpu_model_and_cores()
    cpu = f"{model}; flags: {' '.join(parity.machine.kernel_flags())}"
    for task in plan.tasks:
        data = parity.prepare_task(plan, task)
        stages.save(f"{task}--tokenizer", parity.stage_settings(plan, task, data, None, None, cpu), TOKENIZER_CHECK)
        for seed in plan.seeds:
            for contender in plan.contenders:
                stages.save(f"{task}--{contender}--seed{seed}",
                            parity.stage_settings(plan, task, data, contender, seed, cpu),
                            record(*FAKE_RESULTS[contender, seed]))


@pytest.fixture
def peer_python(tmp_path) -> str:
    python = tmp_path / "peer-python"
    python.write_text("")
    return str(python)


def test_finished_stages_are_not_run_again_and_the_report_holds_their_figures(parity, folders, capsys, monkeypatch,
                                                                              peer_python):
    argv = base_argv(folders, "--tasks", "mrpc", "--only", "ours,transformers", "--torch-python", peer_python)
    fabricate_stages(parity, argv)

    def must_not_run(*args, **kwargs):
        raise AssertionError("a finished stage ran again")

    monkeypatch.setattr(parity, "run_contender", must_not_run)
    monkeypatch.setattr(parity, "check_tokenizer", must_not_run)
    output = folders / "out" / "report.txt"
    status, out, err = run_parity(parity, [*argv, "--output", str(output)], capsys)
    assert status == 0, err
    # ours: scores 83, 80, 83 -> 83.00 spread 3.00; transformers: 84, 82, 79 -> 82.00 spread 5.00
    assert "ours               score  83.00 spread  3.00 (accuracy 78.00 f1 86.00 auc 50.00); training   100.0 s, " \
           "process   130.0 s (medians)" in out
    assert "transformers       score  82.00 spread  5.00 (accuracy 79.00 f1 85.00 auc 50.00); training   200.0 s, " \
           "process   230.0 s (medians)" in out
    assert ("ours vs transformers: score +1.00 (within the larger spread 5.00); training time ours/transformers "
            "0.50 (target <= 0.75: met); process time ours/transformers 0.57") in out
    assert "mrpc: transformers' tokenizer gives other ids than ours on 0 of 52 train and dev examples" in out
    assert out.count("(done before: ") == 6
    written = output.read_text()
    assert written.startswith("machine: ") and written == (folders / "work" / "report.txt").read_text()
    assert written in out  # everything it printed, and then where the report went


def test_a_missing_stage_runs_alone_and_the_contenders_take_turns_within_each_seed(parity, folders, capsys,
                                                                                   monkeypatch, peer_python):
    argv = base_argv(folders, "--tasks", "mrpc,cola", "--seeds", "1,2", "--only", "ours,transformers",
                     "--torch-python", peer_python)
    calls = []

    def fake_run(plan, task, data, contender, seed, run_dir):
        calls.append((task, contender, seed))
        accuracy, f1, train, process = FAKE_RESULTS[contender, seed]
        return {"metrics": {"accuracy": accuracy, "f1": f1, "mcc": 0.3}, "train_seconds": train,
                "process_seconds": process}

    monkeypatch.setattr(parity, "run_contender", fake_run)
    monkeypatch.setattr(parity, "check_tokenizer", lambda plan, task, data, run_dir: calls.append(task)
                        or TOKENIZER_CHECK)
    assert run_parity(parity, argv, capsys)[0] == 0
    assert calls == ["mrpc", ("mrpc", "ours", 1), ("mrpc", "transformers", 1), ("mrpc", "ours", 2),
                     ("mrpc", "transformers", 2), "cola", ("cola", "ours", 1), ("cola", "transformers", 1),
                     ("cola", "ours", 2), ("cola", "transformers", 2)]
    stage = folders / "work" / "stages" / "cola--transformers--seed1.json"
    stage.unlink()
    calls.clear()
    status, out, _ = run_parity(parity, argv, capsys)
    assert status == 0 and calls == [("cola", "transformers", 1)]
    assert json.loads(stage.read_text())["metrics"]["accuracy"] == 0.81
    assert out.count("(done before: ") == 7 and out.count("(ran: ") == 1


@pytest.mark.parametrize(("change", "field"), [(["--epochs", "3"], "epochs"),
                                               (["--learning-rate", "5e-5"], "learning_rate"),
                                               (["--max-train-examples", "mrpc=20"], "train_sha256")])
def test_a_stage_measured_with_other_settings_stops_the_run_in_one_line_naming_its_file(parity, folders, capsys,
                                                                                       change, field):
    argv = base_argv(folders, "--tasks", "mrpc", "--seeds", "1", "--only", "ours")
    fabricate_stages(parity, argv)
    stage = folders / "work" / "stages" / "mrpc--ours--seed1.json"
    before = sha256(stage)
    status, _, err = run_parity(parity, [*argv, *change], capsys)
    assert status == 1
    assert_one_line(err, f"{SCRIPT}: {stage} was measured with other settings", f"{field}: ", "--work-dir")
    assert sha256(stage) == before


def test_an_unreadable_stage_file_is_one_line_naming_it(parity, folders, capsys):
    argv = base_argv(folders, "--tasks", "mrpc", "--seeds", "1", "--only", "ours")
    stage = folders / "work" / "stages" / "mrpc--ours--seed1.json"
    stage.parent.mkdir(parents=True)
    stage.write_text('{"settings": ')
    status, _, err = run_parity(parity, argv, capsys)
    assert status == 1
    assert_one_line(err, f"{SCRIPT}: {stage}: not a stage file", "remove it")
    fabricate_stages(parity, argv)
    record = json.loads(stage.read_text())
    del record["train_seconds"]
    stage.write_text(json.dumps(record))
    status, _, err = run_parity(parity, argv, capsys)
    assert status == 1
    assert_one_line(err, f"{SCRIPT}: {stage}: not a stage file (no train_seconds)", "remove it")


def test_a_malformed_tokenizer_config_is_one_line_naming_it(parity, folders, capsys):
    config = folders / "model" / "tokenizer_config.json"
    config.write_text("{do_lower_case: true")
    status, _, err = run_parity(parity, base_argv(folders, "--tasks", "mrpc", "--only", "ours"), capsys)
    assert status == 1
    assert_one_line(err, f"{SCRIPT}: {config}: not a tokenizer configuration")


def test_a_failing_peer_is_one_line_naming_its_log_and_leaves_no_stage_file(parity, folders, capsys, tmp_path):
    python = tmp_path / "failing-python"
    python.write_text("#!/bin/sh\necho 'glue_hf_peer.py: something broke' >&2\nexit 1\n")
    python.chmod(0o755)
    argv = base_argv(folders, "--tasks", "mrpc", "--seeds", "1", "--only", "transformers", "--torch-python",
                     str(python))
    status, _, err = run_parity(parity, argv, capsys)
    assert status == 1
    log = folders / "work" / "runs" / "mrpc--tokenizer.log"
    assert_one_line(err, f"{SCRIPT}: glue_hf_peer.py failed with status 1: glue_hf_peer.py: something broke",
                    f"log: {log}")
    assert not (folders / "work" / "stages").exists()


def test_the_results_file_is_never_replaced_even_when_it_appears_during_the_run(parity, tmp_path):
    target = tmp_path / "results" / "report.txt"
    parity.write_new_file(target, "first\n")
    assert target.read_text() == "first\n"
    with pytest.raises(ValueError, match="appeared during the run; not replaced"):
        parity.write_new_file(target, "second\n")
    assert target.read_text() == "first\n"
    assert [path.name for path in target.parent.iterdir()] == ["report.txt"]  # no temporary file left


# ---------------------------------------------------------------------------------------------------------------
# The commands: every recipe flag reaches both contenders
# ---------------------------------------------------------------------------------------------------------------


def flag_value(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def test_our_command_carries_the_recipe_the_run_and_the_models_case(parity, folders):
    plan = parity.parse_plan(base_argv(folders, "--only", "ours", "--epochs", "3", "--learning-rate", "3e-5"))
    data = parity.prepare_task(plan, "mrpc")
    command = parity.ours_command(plan, "mrpc", data, 7, folders / "run")
    assert command[:2] == [sys.executable, str(ROOT / "run_glue.py")]
    expected = {"--task-name": "mrpc", "--train-file": str(data.train_file), "--predict-file": str(data.dev_file),
                "--epochs": "3", "--learning-rate": "3e-05", "--seed": "7", "--train-batch-size": "32",
                "--max-seq-length": "128", "--warmup-proportion": "0.1", "--weight-decay": "0.01",
                "--optimizer": "AdamW", "--from-pretrained-params": str(folders / "model"),
                "--config-file": str(folders / "model" / "config.json"), "--output-dir": str(folders / "run")}
    assert {flag: flag_value(command, flag) for flag in expected} == expected
    assert "--do-lower-case" in command and "--do-train" in command and "--do-eval" in command
    assert "--pack-sequences" in command
    write_model_dir(folders / "model", lower_case=False)
    assert "--no-do-lower-case" in parity.ours_command(plan, "mrpc", data, 7, folders / "run")


def test_the_peers_commands_carry_the_same_recipe_and_bf16_only_for_its_contender(parity, folders, peer_python):
    plan = parity.parse_plan(base_argv(folders, "--only", "transformers,transformers-bf16", "--torch-python",
                                       peer_python, "--epochs", "4", "--learning-rate", "2e-4"))
    data = parity.prepare_task(plan, "cola")
    fp32 = parity.peer_command(plan, "cola", data, 5, folders / "run", "transformers")
    assert fp32[:2] == [peer_python, str(BENCHMARKS / "glue_hf_peer.py")]
    expected = {"--task": "cola", "--train-file": str(data.train_file), "--dev-file": str(data.dev_file),
                "--epochs": "4", "--learning-rate": "0.0002", "--seed": "5", "--train-batch-size": "32",
                "--max-seq-length": "128", "--warmup-proportion": "0.1", "--weight-decay": "0.01",
                "--model-dir": str(folders / "model")}
    assert {flag: flag_value(fp32, flag) for flag in expected} == expected
    assert "--bf16" not in fp32 and "--check-tokenizer" not in fp32
    assert parity.peer_command(plan, "cola", data, 5, folders / "run", "transformers-bf16") == [*fp32, "--bf16"]
    check = parity.peer_command(plan, "cola", data, None, folders / "run", "transformers")
    assert check[-1] == "--check-tokenizer" and "--epochs" not in check


def test_the_models_case_comes_from_its_tokenizer_config_else_from_its_vocabulary(parity, tmp_path):
    assert parity.model_lowercases(write_model_dir(tmp_path / "a", lower_case=True))
    assert not parity.model_lowercases(write_model_dir(tmp_path / "b", lower_case=False))
    uncased = write_model_dir(tmp_path / "c", lower_case=None)
    assert parity.model_lowercases(uncased)
    (uncased / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nThe\nCat\nDog\nthe\n")
    assert not parity.model_lowercases(uncased)


# ---------------------------------------------------------------------------------------------------------------
# The peer's own arithmetic against run_glue.py's (no torch needed)
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("steps", "warmup"), [(1, 0.1), (2, 0.1), (10, 0.1), (230, 0.1), (57, 0.3), (40, 0.0)])
def test_the_peers_learning_rate_is_run_glues_schedule_at_every_update(peer, steps, warmup):
    schedule = lr_scheduler.create_lr_scheduler("poly", 1e-4, steps, warmup, warmup_start_lr=0.0, power=1.0)
    ours = []
    for _ in range(steps):
        ours.append(schedule.get_lr())
        schedule.step()
    assert [peer.learning_rate_at(update, 1e-4, steps, warmup) for update in range(1, steps + 1)] == (
        pytest.approx(ours, rel=1e-12, abs=0.0))


@pytest.mark.parametrize(("examples", "batch", "epochs"), [(64, 32, 1), (65, 32, 2), (1600, 32, 2), (5, 32, 3)])
def test_the_peers_update_count_is_run_glues(peer, examples, batch, epochs):
    args = argparse.Namespace(epochs=epochs, train_batch_size=batch, gradient_merge_steps=1, max_steps=None)
    assert peer.total_updates(examples, batch, epochs) == finetune.total_training_steps(examples, args, 1)


def run_glue_default(name: str):
    return run_glue.build_parser().get_default(name)


def test_the_peer_pads_batches_to_run_glues_multiple_and_takes_its_epsilon(peer):
    assert peer.SEQUENCE_MULTIPLE == finetune.SEQUENCE_MULTIPLE
    assert peer.EPSILON == run_glue_default("epsilon")


def test_the_recipe_is_run_glues_defaults_and_the_presets(parity):
    assert parity.RECIPE == {"train_batch_size": run_glue_default("train_batch_size"),
                             "max_seq_length": run_glue_default("max_seq_length"),
                             "warmup_proportion": run_glue_default("warmup_proportion"),
                             "weight_decay": run_glue_default("weight_decay")}
    preset = subprocess.run(["bash", "-c", "source scripts/configs/glue_config.sh && mrpc_cpu_minilm"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split()
    batch, learning_rate, warmup, epochs = preset[7], preset[9], preset[10], preset[11]  # run_glue.sh's 8, 10-12
    default = parity.build_parser().parse_args([])
    assert (float(learning_rate), int(epochs)) == (default.learning_rate, default.epochs)
    assert (int(batch), float(warmup)) == (parity.RECIPE["train_batch_size"], parity.RECIPE["warmup_proportion"])


# ---------------------------------------------------------------------------------------------------------------
# End to end, our side only: a tiny model in a Hugging Face folder, a few examples, one update
# ---------------------------------------------------------------------------------------------------------------


def tiny_hf_model(folder: Path, vocab: list[str]) -> Path:
    """A randomly initialised small BERT as a Hugging Face folder (paddle2hf), with its vocab.txt and a
    tokenizer_config.json."""
    config = BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=128)
    paddle.seed(3)
    weights = folder.parent / "paddle" / "bert_paddle.pdparams"
    weights.parent.mkdir(parents=True)
    paddle.save(BertForPretraining(config).state_dict(), str(weights))
    config_file = weights.with_name("bert_paddle_config.json")
    config_file.write_text(json.dumps(config.to_dict()))
    convert_checkpoint.main(["paddle2hf", str(weights), str(config_file), str(folder)])
    (folder / "vocab.txt").write_text("".join(f"{token}\n" for token in vocab))
    (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    return folder


def test_our_side_runs_end_to_end_on_a_tiny_model_and_a_rerun_reuses_its_stage(tmp_path):
    write_glue(tmp_path / "glue")
    model = tiny_hf_model(tmp_path / "model", ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS])
    command = [sys.executable, str(BENCHMARKS / "finetune_parity.py"), *base_argv(
        tmp_path, "--only", "ours", "--tasks", "mrpc", "--seeds", "4", "--epochs", "1", "--max-train-examples",
        "mrpc=16")]
    result = subprocess.run([*command, "--output", str(tmp_path / "first.txt")], capture_output=True, text=True,
                            cwd=ROOT, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    stage = json.loads((tmp_path / "work" / "stages" / "mrpc--ours--seed4.json").read_text())
    assert stage["settings"]["model"] == str(model) and stage["settings"]["seed"] == 4
    assert stage["settings"]["epochs"] == 1 and stage["settings"]["train_examples"] == 16
    assert stage["steps"] == 1  # 16 examples in batches of 32, one epoch
    assert set(stage["metrics"]) == {"accuracy", "f1", "auc"} and 0.0 <= stage["metrics"]["accuracy"] <= 1.0
    assert stage["newly_initialized"] == ["classifier.bias", "classifier.weight"]
    assert 0 < stage["train_seconds"] < stage["process_seconds"]
    report = (tmp_path / "first.txt").read_text()
    assert report.startswith("machine: ") and "mrpc--ours--seed4: accuracy" in report and "(ran: " in report
    assert "mrpc: train 16 of 40 examples, dev all 12" in report
    run_report = tmp_path / "work" / "runs" / "mrpc--ours--seed4" / "report.json"
    before = sha256(run_report)
    again = subprocess.run([*command, "--output", str(tmp_path / "second.txt")], capture_output=True, text=True,
                           cwd=ROOT, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "(done before: " in (tmp_path / "second.txt").read_text()
    assert sha256(run_report) == before
