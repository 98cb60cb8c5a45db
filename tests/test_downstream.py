"""downstream.py: --quick on a tiny checkpoint writes the JSON and the markdown row with every field, each run
provably started from the named weights (and a run that did not fails), a rerun skips finished units, the
majority baselines are those of the dev files counted by hand, median and spread are those of the seeds, and bad
input is one line."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import paddle
import pytest

import convert_checkpoint
import downstream
import run_glue
import run_squad
import squad_evaluate
from bert_config import BertConfig
from checkpoints.weights import LoadReport, convert_qkv_layout, encoder_fingerprint
from conftest import ROOT, require_shared
from fine_tuning_runs import tiny_config
from finetuning import downstream_plan, finetune
from messages import assert_one_line
from modeling import BertForPretraining
from utils.cli import run_main

WORDS = "bert.embeddings.word_embeddings.weight"
SCORES = {"sst-2": {"accuracy"}, "mrpc": {"accuracy", "f1"}, "rte": {"accuracy"}, "cola": {"mcc"},
          "squad": {"exact_match", "F1"}}


def write_step_folder(folder: Path, seed: int = 1234) -> Path:
    """A step folder as run_pretraining.py writes it: bert_paddle.pdparams (tiny, random, seed) and its config.
    The seed is none of the fine-tuning runs': a model initialised from a run's seed has the weights that run
    would start from without loading anything."""
    folder.mkdir(parents=True)
    config = BertConfig.from_dict(tiny_config())
    paddle.seed(seed)
    paddle.save(BertForPretraining(config).state_dict(), str(folder / "bert_paddle.pdparams"))
    (folder / "bert_paddle_config.json").write_text(config.to_json_string())
    return folder


def quick_argv(checkpoint: Path | None, output_dir: Path, *extra: str) -> list[str]:
    """--quick's options; the units run in this process (--jobs 1), where a test's monkeypatches act, unless extra
    says otherwise."""
    weights = [str(checkpoint)] if checkpoint else []
    return [*weights, "--quick", "--output-dir", str(output_dir), "--data-dir", str(require_shared("data")),
            "--vocab-file", str(require_shared("vocab", "bert-uncased-vocab.txt")), "--jobs", "1", *extra]


def finished_quick_run(root: Path) -> tuple[Path, Path]:
    """(checkpoint step folder, output folder) of a --quick run of every task, made under root."""
    checkpoint = write_step_folder(root / "phase1" / "1000")
    downstream.main(quick_argv(checkpoint, root / "out"))
    return checkpoint, root / "out"


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory) -> tuple[Path, Path]:
    return finished_quick_run(tmp_path_factory.mktemp("downstream"))


def test_quick_run_writes_every_score_with_its_baseline_and_the_weights_it_started_from(quick_run):
    checkpoint, output_dir = quick_run
    summary = json.loads((output_dir / "downstream.json").read_text())
    weights_file = checkpoint / "bert_paddle.pdparams"
    state = paddle.load(str(weights_file))
    assert summary["weights"]["weights_sha256"] == hashlib.sha256(weights_file.read_bytes()).hexdigest()
    assert summary["weights"]["encoder_fingerprint"] == encoder_fingerprint(state, 30522)[1]
    words = state["bert.embeddings.word_embeddings.weight"].numpy()[:30522].astype(np.float64)
    word_table_factor = 0.02 / np.sqrt(np.mean(words ** 2))  # bert-tiny's initializer_range over the table's RMS
    assert summary["mode"] == "quick"
    assert list(summary["tasks"]) == list(downstream.TASKS)
    for task, result in summary["tasks"].items():
        assert set(result["scores"]) == SCORES[task]
        for score in result["scores"].values():
            assert set(score) == {"seeds", "median", "spread", "majority"}
            assert list(score["seeds"]) == ["1"] and score["spread"] == 0
            assert 0 <= score["median"] <= 100 and score["median"] == score["seeds"]["1"]
        assert result["data"]["train_size"] == result["data"]["dev_size"] == 64
        assert result["hyperparameters"] == downstream_plan.hyperparameters(task) and result["plan"]["epochs"] == 1
        assert result["seconds"] > 0 and result["cpu_seconds"] > 0
        [run] = result["runs"]
        # every tensor of the embeddings and the encoder (bert-tiny: 5 + 2 layers x 16) came from the file, and
        # the plan's --rescale-embeddings brought its word table to the initial scale
        started = dict(run["started_from"])
        assert started.pop("embedding_rescale_factor") == pytest.approx(word_table_factor, rel=1e-5)
        assert started == {"init_encoder_tensors": 37, "init_encoder_tensors_loaded": 37,
                           "init_encoder_fingerprint": summary["weights"]["encoder_fingerprint"]}
    header, rule, row = (output_dir / "downstream.md").read_text().splitlines()
    assert summary["markdown_row"] == row
    cells = row.strip("|").split(" | ")
    assert len(cells) == len(header.strip("|").split(" | ")) == len(rule.strip("|").split(" | ")) == 2 + 7
    assert cells[0].strip() == f"{checkpoint} (quick)"
    assert cells[1] == "sha256 " + summary["weights"]["weights_sha256"][:12]
    assert cells[3] == f"{summary['tasks']['mrpc']['scores']['accuracy']['median']:.1f}"
    assert "MRPC F1 (majority" in header and "SQuAD F1 (empty 0.0)" in header


def test_the_fingerprint_tells_the_checkpoint_from_another_initialisation(quick_run, tmp_path):
    checkpoint, output_dir = quick_run
    fingerprint = json.loads((output_dir / "downstream.json").read_text())["weights"]["encoder_fingerprint"]
    other = write_step_folder(tmp_path / "other", seed=4321)
    assert encoder_fingerprint(paddle.load(str(other / "bert_paddle.pdparams")), 30522)[1] != fingerprint


def skip_loading(model, path, **options) -> LoadReport:
    """load_pretrained that loads nothing and says it loaded everything."""
    return LoadReport(path=str(path), loaded=["embeddings", "encoder"], initialised=[], missing=[], unused=0)


def test_learning_rate_replaces_the_plans_rate_in_every_run_and_in_the_summary(quick_run, tmp_path):
    """--learning-rate reaches run_glue.py and run_squad.py (their logged parameters), and downstream.json says
    which rate its scores were fine-tuned with; a rerun of the folder with the plan's rate is refused, since its
    units were fine-tuned with another."""
    checkpoint, _ = quick_run
    output_dir = tmp_path / "out"
    downstream.main(quick_argv(checkpoint, output_dir, "--tasks", "mrpc,squad", "--learning-rate", "2e-4",
                               "--jobs", "2"))  # in worker processes, whose output goes to each log.txt
    summary = json.loads((output_dir / "downstream.json").read_text())
    for task in ("mrpc", "squad"):
        assert summary["tasks"][task]["hyperparameters"]["learning_rate"] == 2e-4  # neither of the plan's
        log = (output_dir / "units" / f"{task}-seed1" / "log.txt").read_text()
        assert re.search(r"PARAMETER .* learning_rate : 0\.0002 ", log), log[:2000]
    with pytest.raises(ValueError, match="other weights, data or hyperparameters"):
        downstream.main(quick_argv(checkpoint, output_dir, "--tasks", "mrpc"))


@pytest.mark.parametrize("fault", ["loader skipped", "weights flag dropped"])
def test_a_run_that_does_not_start_from_the_checkpoint_fails(quick_run, tmp_path, monkeypatch, fault):
    checkpoint, _ = quick_run
    if fault == "loader skipped":
        monkeypatch.setattr(finetune, "load_pretrained", skip_loading)
    else:
        original = downstream.unit_argv
        monkeypatch.setattr(downstream, "unit_argv", lambda *args: [
            word for word in original(*args) if word != "--from-pretrained-params" and not word.endswith(".pdparams")])
    with pytest.raises(ValueError, match="did not start from") as failure:
        downstream.main(quick_argv(checkpoint, tmp_path / "out", "--tasks", "mrpc"))
    loaded = 37 if fault == "loader skipped" else 0
    assert_one_line(str(failure.value), str(tmp_path / "out" / "units" / "mrpc-seed1"), f"{loaded} of 37")
    assert not (tmp_path / "out" / "units" / "mrpc-seed1" / "result.json").exists()
    assert not (tmp_path / "out" / "downstream.json").exists()


def test_a_rerun_skips_finished_units_and_writes_the_same_results(quick_run, monkeypatch):
    checkpoint, output_dir = quick_run
    before = json.loads((output_dir / "downstream.json").read_text())

    def refuse(argv):
        raise AssertionError(f"a finished unit ran again: {argv}")
    monkeypatch.setattr(run_glue, "main", refuse)
    monkeypatch.setattr(run_squad, "main", refuse)
    downstream.main(quick_argv(checkpoint, output_dir))
    after = json.loads((output_dir / "downstream.json").read_text())
    after.pop("wall_seconds_of_this_invocation")
    before.pop("wall_seconds_of_this_invocation")
    assert after == before


def test_results_of_other_weights_are_not_taken(quick_run, monkeypatch):
    _, output_dir = quick_run
    monkeypatch.setattr(run_glue, "main", lambda argv: pytest.fail("a unit ran"))
    with pytest.raises(ValueError) as failure:
        downstream.main(quick_argv(None, output_dir, "--random-init", "--config-file",
                                   str(ROOT / "bert_configs" / "bert-tiny-uncased.json"), "--tasks", "mrpc"))
    assert_one_line(str(failure.value), str(output_dir / "units" / "mrpc-seed1" / "result.json"), "other weights")


def test_random_init_is_labelled_and_loads_nothing(tmp_path):
    config = ROOT / "bert_configs" / "bert-tiny-uncased.json"
    downstream.main(quick_argv(None, tmp_path, "--random-init", "--config-file", str(config), "--tasks", "rte"))
    summary = json.loads((tmp_path / "downstream.json").read_text())
    assert summary["weights"] == {"kind": "random init", "config_file": str(config),
                                  "config_sha256": hashlib.sha256(config.read_bytes()).hexdigest()}
    [run] = summary["tasks"]["rte"]["runs"]
    assert run["started_from"]["init_encoder_tensors_loaded"] == 0
    assert summary["markdown_row"].startswith(f"| random init of {config} (quick) | random |")


def test_a_hugging_face_folder_is_the_checkpoint_it_was_exported_from(quick_run, tmp_path):
    checkpoint, output_dir = quick_run
    weights = checkpoint / "bert_paddle.pdparams"
    convert_checkpoint.main(["paddle2hf", str(weights), str(checkpoint / "bert_paddle_config.json"),
                             str(tmp_path / "hf")])
    start = downstream.checkpoint_start(str(tmp_path / "hf"), None, None)
    assert start.description["kind"] == "hugging face"
    assert start.description["weights_sha256"] == hashlib.sha256((tmp_path / "hf" / "model.safetensors")
                                                                 .read_bytes()).hexdigest()
    assert start.fingerprint == json.loads((output_dir / "downstream.json").read_text())["weights"][
        "encoder_fingerprint"]
    assert start.weights_flags == ("--from-pretrained-params", str(tmp_path / "hf" / "model.safetensors"))
    assert start.vocab_file == str(tmp_path / "hf" / "vocab.txt")


def test_a_step_folder_is_fine_tuned_with_the_vocabulary_it_carries(tmp_path):
    """run_pretraining.py saves its --vocab-file in each step folder; without --vocab-file the units tokenize with
    it, where they took bert-base-uncased's before, whatever the checkpoint was trained with."""
    folder = write_step_folder(tmp_path / "phase1" / "10")
    carried = folder / "bert_paddle_vocab.txt"
    carried.write_text("".join(f"{token}\n" for token in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "word"]))
    assert downstream.checkpoint_start(str(folder), None, None).vocab_file == str(carried)
    given = str(require_shared("vocab", "bert-uncased-vocab.txt"))
    assert downstream.checkpoint_start(str(folder), None, given).vocab_file == given  # --vocab-file wins
    carried.unlink()
    assert downstream.checkpoint_start(str(folder), None, None).vocab_file == str(
        ROOT / "vocab" / "bert-base-uncased-vocab.txt")


def hand_counted_labels_of(path: Path, column: int, header: bool = True) -> list[str]:
    lines = path.read_text(encoding="utf-8-sig").splitlines()
    return [line.split("\t")[column] for line in lines[1 if header else 0:]]


def hand_counted_labels(folder: str, column: int, header: bool) -> list[str]:
    return hand_counted_labels_of(require_shared("data", "glue", folder, "dev.tsv"), column, header)


def test_majority_baselines_are_those_of_the_dev_files():
    glue = require_shared("data", "glue")
    mrpc = hand_counted_labels("MRPC", 0, header=True)
    positives = mrpc.count("1")
    assert (len(mrpc), positives) == (408, 279)
    # always "paraphrase": precision 279/408, recall 1
    assert downstream.majority_scores("mrpc", str(glue / "MRPC" / "dev.tsv")) == pytest.approx(
        {"accuracy": 100 * 279 / 408, "f1": 100 * 2 * 279 / (2 * 279 + 129)})
    assert round(100 * 2 * 279 / (2 * 279 + 129), 1) == 81.2
    for task, folder, column, header in (("sst-2", "SST-2", 1, True), ("rte", "RTE", 3, True)):
        labels = hand_counted_labels(folder, column, header)
        expected = max(labels.count(label) for label in set(labels)) / len(labels)
        assert downstream.majority_scores(task, str(glue / folder / "dev.tsv")) == pytest.approx(
            {"accuracy": 100 * expected})
    assert downstream.majority_scores("cola", str(glue / "CoLA" / "dev.tsv")) == {"mcc": 0.0}
    squad = require_shared("data", "squad", "v1.1", "dev-v1.1.json")
    # The empty answer matches exactly a gold answer of nothing but articles and punctuation ("The"); F1 counts
    # shared words, of which it has none.
    questions = [qa for article in json.loads(squad.read_text())["data"] for paragraph in article["paragraphs"]
                 for qa in paragraph["qas"]]
    empty = sum(any(not re.sub(r"\b(a|an|the)\b|[^\w\s]", " ", answer["text"].lower()).split()
                    for answer in qa["answers"]) for qa in questions)
    assert (len(questions), empty) == (10570, 3)
    assert downstream.majority_scores("squad", str(squad)) == pytest.approx({"exact_match": 100 * 3 / 10570,
                                                                            "F1": 0.0})


def fake_result(task: str, seed: int, scores: dict[str, float]) -> dict:
    return {"task": task, "seed": seed, "scores": scores, "seconds": 60.0, "cpu_seconds": 100.0,
            "started_from": {}}


def test_median_and_spread_are_those_of_the_seeds():
    assert downstream.summarize([80.0, 82.5, 81.0]) == {"median": 81.0, "spread": 2.5}
    assert downstream.summarize([70.0, 10.0, 40.0, 50.0]) == {"median": 45.0, "spread": 60.0}
    assert downstream.summarize([55.5]) == {"median": 55.5, "spread": 0.0}
    mrpc = require_shared("data", "glue", "MRPC", "dev.tsv")
    data = downstream.TaskData(str(mrpc), str(mrpc), 3668, 408)
    plan = downstream.TaskPlan(seeds=(1, 2, 3), epochs=1)
    results = [fake_result("mrpc", 1, {"accuracy": 70.0, "f1": 80.0}),
               fake_result("mrpc", 2, {"accuracy": 75.0, "f1": 81.0}),
               fake_result("mrpc", 3, {"accuracy": 72.0, "f1": 84.0})]
    summary = downstream.task_summary("mrpc", plan, data, results, {"learning_rate": 1e-4})
    accuracy = summary["scores"]["accuracy"]
    assert accuracy["seeds"] == {"1": 70.0, "2": 75.0, "3": 72.0}
    assert (accuracy["median"], accuracy["spread"]) == (72.0, 5.0)
    assert accuracy["majority"] == pytest.approx(100 * 279 / 408)
    assert summary["scores"]["f1"]["median"] == 81.0 and summary["scores"]["f1"]["spread"] == 4.0
    assert (summary["seconds"], summary["cpu_seconds"]) == (180.0, 300.0)
    start = downstream.Start({"checkpoint": "ckpt", "weights_sha256": "ab" * 32}, "", (), "", "", "f")
    table = downstream.markdown_table(start, {"mrpc": summary}, "standard")
    assert table.splitlines()[-1] == f"| ckpt | sha256 {'ab' * 6} | 72.0 (70.0-75.0) | 81.0 (80.0-84.0) |"


def test_subsets_are_fixed_rows_of_the_file_with_its_header(tmp_path):
    source = require_shared("data", "glue", "MRPC", "train.tsv")
    file, rows = downstream.glue_subset("mrpc", source, tmp_path / "a.tsv", 100)
    again, _ = downstream.glue_subset("mrpc", source, tmp_path / "b.tsv", 100)
    lines = source.read_bytes().splitlines(keepends=True)
    written = Path(file).read_bytes().splitlines(keepends=True)
    assert rows == 100 and len(written) == 101 and written[0] == lines[0]  # the header, byte-order mark and all
    assert set(written[1:]) <= set(lines[1:]) and Path(again).read_bytes() == Path(file).read_bytes()
    assert downstream.glue_subset("mrpc", source, tmp_path / "c.tsv", None) == (str(source), 3668)
    squad, questions = downstream.squad_subset(require_shared("data", "squad", "v1.1", "dev-v1.1.json"),
                                               tmp_path / "squad.json", 50)
    dataset = json.loads(Path(squad).read_text())["data"]
    original = {qa["id"]: paragraph["context"] for article in json.loads(
        require_shared("data", "squad", "v1.1", "dev-v1.1.json").read_text())["data"]
        for paragraph in article["paragraphs"] for qa in paragraph["qas"]}
    kept = {qa["id"]: paragraph["context"] for article in dataset for paragraph in article["paragraphs"]
            for qa in paragraph["qas"]}
    assert questions == len(kept) == 50 and all(original[qid] == context for qid, context in kept.items())


def one_line_error(capsys, argv: list[str]) -> str:
    assert run_main(lambda: downstream.main(argv), "downstream.py") == 1
    return capsys.readouterr().err


def test_bad_input_is_one_line(tmp_path, capsys):
    missing = tmp_path / "no-such-checkpoint"
    assert_one_line(one_line_error(capsys, quick_argv(missing, tmp_path / "a")), "downstream.py: ", missing,
                    "not found")
    bare = tmp_path / "bare"
    bare.mkdir()
    paddle.save({"x": paddle.zeros([1])}, str(bare / "bert_paddle.pdparams"))
    assert_one_line(one_line_error(capsys, quick_argv(bare, tmp_path / "b")), "downstream.py: ", "--config-file",
                    "bert_paddle_config.json")
    assert_one_line(one_line_error(capsys, quick_argv(None, tmp_path / "c", "--random-init")), "downstream.py: ",
                    "--random-init needs --config-file")
    small = tmp_path / "small.json"
    small.write_text(json.dumps({**tiny_config(), "vocab_size": 4096}))
    assert_one_line(one_line_error(capsys, quick_argv(None, tmp_path / "d", "--random-init", "--config-file",
                                                      str(small))), "downstream.py: ", "--vocab-file", "30522", "4096")
    assert_one_line(one_line_error(capsys, quick_argv(None, tmp_path / "e", "--random-init", "--config-file",
                                                      str(ROOT / "bert_configs" / "bert-tiny-uncased.json"),
                                                      "--data-dir", str(tmp_path))), "downstream.py: ", "--data-dir")


def test_the_script_passes_the_checkpoint_and_stops_in_one_line(tmp_path):
    missing = tmp_path / "no-such-checkpoint"
    result = subprocess.run(["bash", str(ROOT / "scripts" / "run_downstream.sh"), str(missing), str(tmp_path / "out"),
                             "None", "quick"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 1
    assert_one_line(result.stderr, "downstream.py: ", missing, "not found")


def test_standard_plan_keeps_three_seeds_and_the_whole_dev_sets():
    for task, plan in downstream.PLAN["standard"].items():
        assert plan.dev_subset is None
        assert len(plan.seeds) >= (1 if task == "squad" else 3)
    assert all(plan.seeds == (1,) for plan in downstream.PLAN["quick"].values())


def test_the_fingerprint_is_the_same_in_every_layout_of_the_same_weights(quick_run):
    checkpoint, _ = quick_run
    state = {name: np.asarray(value) for name, value in paddle.load(str(checkpoint / "bert_paddle.pdparams")).items()}
    tensors, fingerprint = encoder_fingerprint(state, 30522)
    assert tensors == 37
    bare = {name.removeprefix("bert."): value for name, value in state.items()}  # a BertModel's names
    fused = convert_qkv_layout(state, fuse_mha=True)
    padded = {**state, WORDS: np.concatenate([state[WORDS], np.ones((6, 128), np.float32)])}  # NVIDIA's 30528 rows
    heads_apart = {name: value for name, value in state.items() if name.startswith("bert.")}
    for layout in (bare, fused, padded, heads_apart):
        assert encoder_fingerprint(layout, 30522) == (37, fingerprint)
    nudged = {**state, "bert.encoder.1.output.bias": state["bert.encoder.1.output.bias"] + np.float32(1e-6)}
    assert encoder_fingerprint(nudged, 30522)[1] != fingerprint


def test_an_ngc_checkpoint_is_the_file_nvidia2paddle_converts_it_to(tmp_path):
    from fixtures.ngc_static_bert import CONFIG, write_ngc_checkpoints

    config = tmp_path / "config.json"
    config.write_text(json.dumps({**CONFIG, "hidden_act": "gelu"}))
    written = write_ngc_checkpoints(tmp_path, "pretraining")
    converted = tmp_path / "converted.pdparams"
    convert_checkpoint.main(["nvidia2paddle", str(written.prefixes["unfused"]), str(converted)])
    expected = encoder_fingerprint(paddle.load(str(converted)), CONFIG["vocab_size"])[1]
    for layout, prefix in written.prefixes.items():  # the same values in NVIDIA's three encoder layouts
        start = downstream.checkpoint_start(str(prefix), str(config), None)
        assert start.description["kind"] == "nvidia static graph", layout
        assert start.description["weights_file"] == f"{prefix}.pdparams"
        assert start.fingerprint == expected, layout


def test_each_score_is_that_of_the_predictions_its_run_left(quick_run):
    _, output_dir = quick_run
    summary = json.loads((output_dir / "downstream.json").read_text())
    mrpc = output_dir / "units" / "mrpc-seed1"
    predicted = [line.split("\t")[1] for line in (mrpc / "predictions.tsv").read_text().splitlines()[1:]]
    gold = hand_counted_labels_of(Path(summary["tasks"]["mrpc"]["data"]["dev_file"]), 0)
    assert len(predicted) == len(gold) == 64
    accuracy = 100 * sum(p == g for p, g in zip(predicted, gold, strict=True)) / 64
    assert summary["tasks"]["mrpc"]["scores"]["accuracy"]["seeds"]["1"] == pytest.approx(accuracy)
    squad = output_dir / "units" / "squad-seed1"
    answers = json.loads((squad / "predictions.json").read_text())
    dataset = json.loads(Path(summary["tasks"]["squad"]["data"]["dev_file"]).read_text())["data"]
    assert len(answers) == 64
    assert summary["tasks"]["squad"]["scores"]["F1"]["seeds"]["1"] == pytest.approx(
        squad_evaluate.evaluate(dataset, answers)["f1"])
    # the fine-tuned weights are gone: nothing reads them, and a standard run would keep 16 models
    assert not list(output_dir.glob("units/*/*.pdparams")) and not (squad / "nbest_predictions.json").exists()


def test_units_in_worker_processes_score_as_in_this_one(quick_run, tmp_path):
    checkpoint, output_dir = quick_run
    downstream.main(quick_argv(checkpoint, tmp_path, "--tasks", "mrpc,squad,cola", "--jobs", "2"))
    in_workers = json.loads((tmp_path / "downstream.json").read_text())
    in_process = json.loads((output_dir / "downstream.json").read_text())
    assert in_workers["jobs"] == 2 and in_process["jobs"] == 1
    for task in ("mrpc", "squad", "cola"):
        # one thread per process instead of two: the same sums here, to the last bit
        assert in_workers["tasks"][task]["scores"] == in_process["tasks"][task]["scores"]
        assert in_workers["tasks"][task]["runs"][0]["started_from"] == in_process["tasks"][task]["runs"][0][
            "started_from"]
    assert (tmp_path / "units" / "squad-seed1" / "log.txt").read_text().count("exact_match") >= 1


@pytest.fixture
def recorded_script(tmp_path):
    """Run scripts/run_downstream.sh with a `python` that writes its arguments, one per line, instead of running."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").write_text('#!/usr/bin/env bash\nprintf "%s\\n" "$@" > "$RECORDED_ARGS"\n')
    (bin_dir / "python").chmod(0o755)

    def run(*args: str, **env: str) -> subprocess.CompletedProcess:
        environment = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
                       "RECORDED_ARGS": str(tmp_path / "args.txt"), **env}
        return subprocess.run(["bash", str(ROOT / "scripts" / "run_downstream.sh"), *args], env=environment,
                              capture_output=True, text=True, cwd=tmp_path, timeout=60)
    return run


def test_the_script_names_the_output_folder_after_the_checkpoint(recorded_script, tmp_path):
    results = tmp_path / "results"
    assert recorded_script("results/bert-mini/custom/phase1/1200/", RESULTS_DIR=str(results)).returncode == 0
    assert (tmp_path / "args.txt").read_text().splitlines() == [
        str(ROOT / "downstream.py"), "results/bert-mini/custom/phase1/1200/",
        "--output-dir", f"{results}/downstream/bert-mini-custom-phase1-1200",
        "--data-dir", str(ROOT.parent / "shared" / "data")]
    assert (results / "downstream" / "bert-mini-custom-phase1-1200" / "logfile").is_file()


def test_every_argument_of_the_script_takes_effect(recorded_script, tmp_path):
    config = ROOT / "bert_configs" / "bert-tiny-uncased.json"
    result = recorded_script("random", str(tmp_path / "out"), str(config), "quick", VOCAB_FILE="v.txt",
                             DATA_DIR="/data")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "args.txt").read_text().splitlines() == [
        str(ROOT / "downstream.py"), "--random-init", "--output-dir", str(tmp_path / "out"), "--config-file",
        str(config), "--quick", "--vocab-file", "v.txt", "--data-dir", "/data"]
    assert recorded_script("random", "", str(config), RESULTS_DIR=str(tmp_path / "r")).returncode == 0
    assert f"{tmp_path}/r/downstream/random-bert-tiny-uncased" in (tmp_path / "args.txt").read_text().splitlines()
    for args, named in ((("ckpt", "", "None", "fast"), "mode"), (("random",), "config_file"), ((), "checkpoint")):
        failed = recorded_script(*args)
        assert failed.returncode == 1
        assert_one_line(failed.stderr, "run_downstream.sh: ", named)


def test_ctrl_c_stops_the_workers_in_one_line_and_a_rerun_goes_on(quick_run, tmp_path):
    checkpoint, _ = quick_run
    argv = [sys.executable, str(ROOT / "downstream.py"), *quick_argv(checkpoint, tmp_path, "--jobs", "2",
                                                                     "--tasks", "mrpc,squad")]
    # a terminal's Ctrl-C: SIGINT to the whole process group, once SQuAD's run has begun
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                               start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    log = tmp_path / "units" / "squad-seed1" / "log.txt"
    try:
        while not log.exists() and process.poll() is None:
            time.sleep(0.05)
        os.killpg(process.pid, signal.SIGINT)
        _, stderr = process.communicate(timeout=120)
    finally:  # a run that hangs (as a multiprocessing.Pool's could) leaves no process behind
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 130
    assert_one_line(stderr, "downstream.py: ", "interrupted")
    assert not (tmp_path / "units" / "squad-seed1" / "result.json").exists()
    downstream.main(quick_argv(checkpoint, tmp_path, "--tasks", "mrpc,squad"))
    assert (tmp_path / "units" / "squad-seed1" / "result.json").is_file()


def test_an_error_in_a_worker_is_the_runs_one_line(quick_run, tmp_path):
    checkpoint, _ = quick_run
    mrpc = tmp_path / "data" / "glue" / "MRPC"
    mrpc.mkdir(parents=True)
    shutil.copy(require_shared("data", "glue", "MRPC", "train.tsv"), mrpc / "train.tsv")
    header = require_shared("data", "glue", "MRPC", "dev.tsv").read_text(encoding="utf-8").splitlines()[0]
    (mrpc / "dev.tsv").write_text(header + "\n" + "1\tonly three\tfields\n" * 100)  # run_glue.py reads it first
    argv = quick_argv(checkpoint, tmp_path / "out", "--tasks", "mrpc", "--jobs", "2",
                      "--data-dir", str(tmp_path / "data"))
    with pytest.raises(ValueError) as failure:
        downstream.main(argv)
    assert_one_line(str(failure.value), str(tmp_path / "out" / "data" / "mrpc-dev.tsv"), "expected 5", "found 3")
