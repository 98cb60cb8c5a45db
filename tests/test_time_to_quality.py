"""The time-to-quality yardstick (benchmarks/time_to_quality.py): its miniature end to end on a slice of the real
Wikipedia corpus, and the parts the full run depends on (the peer's schedule, the preset's argument names, the
stage files, the targets)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from conftest import ROOT, require_shared
from messages import assert_one_line

sys.path.insert(0, str(ROOT / "benchmarks"))
import hf_pretraining_peer  # noqa: E402
import time_to_quality  # noqa: E402


@pytest.fixture(scope="module")
def miniature(tmp_path_factory) -> Path:
    """The --quick yardstick, run once: a slice of en-2015, bert-tiny for 0.3 minutes, --quick fine-tuning."""
    require_shared("data", "wikipedia", "en-2015")
    work = tmp_path_factory.mktemp("ttq")
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "time_to_quality.py"), "--quick", "--work-dir",
                          str(work), "--report-dir", str(work / "report")], capture_output=True, text=True,
                         cwd=ROOT, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return work


def test_every_score_comes_from_the_checkpoint_that_its_row_names(miniature):
    from checkpoints.weights import encoder_fingerprint, read_weights

    report = json.loads((miniature / "report" / "time-to-quality.json").read_text(encoding="utf-8"))
    ours = report["runs"]["ours-quick"]
    checkpoint = Path(ours["pretraining"]["checkpoint"])
    # The checkpoint is the last one of that run's own folder, at the step its report ends on.
    assert checkpoint.parent == miniature / "runs" / "ours-quick" / "custom" / "phase1"
    assert int(checkpoint.name) == ours["pretraining"]["steps"] > 0
    weights = checkpoint / "bert_paddle.pdparams"
    assert ours["downstream"]["weights"]["weights_sha256"] == hashlib.sha256(weights.read_bytes()).hexdigest()
    config = json.loads((checkpoint / "bert_paddle_config.json").read_text(encoding="utf-8"))
    state = read_weights(weights)
    tensors, fingerprint = encoder_fingerprint(state, config["vocab_size"])
    # The plan's --rescale-embeddings brings that checkpoint's word table to the initial scale.
    word_table = np.asarray(state["bert.embeddings.word_embeddings.weight"], dtype=np.float64)[:config["vocab_size"]]
    factor = config["initializer_range"] / np.sqrt(np.mean(word_table ** 2))
    for task in time_to_quality.MAIN_SCORES:
        for unit in ours["downstream"]["tasks"][task]["runs"]:
            started = dict(unit["started_from"])
            assert started.pop("embedding_rescale_factor") == pytest.approx(factor, rel=1e-5)
            assert started == {"init_encoder_tensors": tensors, "init_encoder_tensors_loaded": tensors,
                               "init_encoder_fingerprint": fingerprint}
    for task in time_to_quality.MAIN_SCORES:
        for unit in report["runs"]["random"]["downstream"]["tasks"][task]["runs"]:
            assert unit["started_from"]["init_encoder_tensors_loaded"] == 0


def test_a_run_trains_its_own_optimizer_and_learning_rate(miniature):
    from utils.dllog import read_report

    report = json.loads((miniature / "report" / "time-to-quality.json").read_text(encoding="utf-8"))
    lans = report["runs"]["lans-quick"]
    [parameters] = [r["data"] for r in read_report(lans["pretraining"]["report"]) if r.get("step") == "PARAMETER"]
    assert (parameters["optimizer"], parameters["learning_rate"], parameters["time_budget"]) == ("Lans", 1e-3, 0.1)
    assert parameters["gradient_merge_steps"] == 2 and parameters["batch_size"] == 8
    # Every optimizer step took two micro-batches of 8.
    assert lans["pretraining"]["sequences"] == lans["pretraining"]["steps"] * 16 > 0
    assert "downstream" not in lans and lans["pretraining"]["validation"]
    row = next(line for line in (miniature / "report" / "time-to-quality.md").read_text(encoding="utf-8").splitlines()
               if line.startswith("| lans-quick |"))
    assert row.endswith("| - | - |")


def test_the_table_shows_the_medians_of_the_runs(miniature):
    report = json.loads((miniature / "report" / "time-to-quality.json").read_text(encoding="utf-8"))
    table = (miniature / "report" / "time-to-quality.md").read_text(encoding="utf-8").split("## Targets")[0]
    rows = {line.split(" | ")[0].strip("| "): line for line in table.splitlines() if line.startswith("| ")}
    for name, result in report["runs"].items():
        if "downstream" not in result:
            continue
        cells = rows[name].strip("| ").split(" | ")
        scores = result["downstream"]["tasks"]
        assert cells[5] == f"{scores['sst-2']['scores']['accuracy']['median']:.1f}"
        assert cells[-3] == f"{scores['squad']['scores']['F1']['median']:.1f}"
        mrpc = (scores["mrpc"]["scores"]["accuracy"]["median"] + scores["mrpc"]["scores"]["f1"]["median"]) / 2
        glue = np.mean([scores["sst-2"]["scores"]["accuracy"]["median"], mrpc,
                        scores["rte"]["scores"]["accuracy"]["median"], scores["cola"]["scores"]["mcc"]["median"]])
        assert cells[-2] == f"{glue:.1f}"
    assert (miniature / "report" / "time-to-quality.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_no_held_out_article_is_in_the_training_shards(miniature):
    """The held-out titles name whole articles: none of their sentences is in a training sample, and they are in
    the validation samples."""
    from corpus import document_sentences, find_corpus_files, read_documents
    from tokenizer import BertTokenizer

    data = miniature / "data" / "wikipedia-en-2015" / "pretrain" / "phase1" / "unbinned"
    listed = [line.split("\t") for line in (data / "parquet_holdout" / "held_out_documents.tsv").read_text(
        encoding="utf-8").splitlines()[1:]]
    assert listed
    tokenizer = BertTokenizer(str(ROOT / "vocab" / "bert-large-uncased-vocab.txt"))
    files = [path for path, _ in find_corpus_files(miniature / "corpus-slice", "auto")]
    held_out_documents = {(file_name, int(offset)) for file_name, offset, _title in listed}
    held_out, others = set(), set()
    for file_index, file in enumerate(files):
        for document in read_documents(file, file_index, "wikiextractor"):
            sentences = {" ".join(tokenizer.tokenize(s)) for s in document_sentences(document) if len(s.split()) >= 8}
            (held_out if (str(file), document.offset) in held_out_documents else others).update(sentences)
    # Sentences of a held-out article alone: boilerplate ("This article incorporates ...") is in others too.
    held_out_sentences = sorted(held_out - others)
    assert held_out_sentences

    def samples(folder: Path) -> str:
        tables = [pq.read_table(path) for path in sorted(folder.glob("*.parquet*"))]
        return "\n".join(a + " " + b for table in tables for a, b in zip(table.column("A").to_pylist(),
                                                                           table.column("B").to_pylist(),
                                                                           strict=True))

    training, validation = samples(data / "parquet"), samples(data / "parquet_holdout")
    assert not [sentence for sentence in held_out_sentences if sentence in training]
    assert [sentence for sentence in held_out_sentences if sentence in validation]


def test_a_rerun_skips_every_stage_that_is_done(miniature):
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "time_to_quality.py"), "--quick", "--work-dir",
                          str(miniature), "--report-dir", str(miniature / "report-again")], capture_output=True,
                         text=True, cwd=ROOT, timeout=300)
    assert run.returncode == 0, run.stderr
    done = [line for line in run.stdout.splitlines() if line.endswith(".json)") and ": done (" in line]
    # data, then each run's pretraining and (but for the optimizer comparison's) its downstream scores, then the
    # context-free floor
    assert len(done) == 1 + sum(1 + run.downstream for run in time_to_quality.QUICK_RUNS) + 1 == 7
    assert not [line for line in run.stdout.splitlines() if line.startswith("+ ")]  # nothing was run again
    assert (json.loads((miniature / "report-again" / "time-to-quality.json").read_text(encoding="utf-8"))["runs"]
            == json.loads((miniature / "report" / "time-to-quality.json").read_text(encoding="utf-8"))["runs"])


def test_report_only_reports_the_finished_runs_and_names_the_others(miniature, tmp_path, capsys):
    """--report-only runs nothing: with the optimizer run's pretraining and the 0.3-minute run's fine-tuning not
    done, the report has the random init's row as the full report has it, and names the two others as not run."""
    shutil.copytree(miniature / "stages", tmp_path / "stages")
    (tmp_path / "stages" / "pretrain--lans-quick.json").unlink()
    (tmp_path / "stages" / "downstream--ours-quick.json").unlink()
    time_to_quality.main(["--quick", "--report-only", "--work-dir", str(tmp_path), "--report-dir",
                          str(tmp_path / "report")])
    assert "\n+ " not in capsys.readouterr().out  # no command was run
    partial = json.loads((tmp_path / "report" / "time-to-quality.json").read_text(encoding="utf-8"))
    full = json.loads((miniature / "report" / "time-to-quality.json").read_text(encoding="utf-8"))
    assert list(partial["runs"]) == ["random"] and partial["missing"] == ["ours-quick", "lans-quick"]
    assert partial["runs"]["random"] == full["runs"]["random"]
    table = (tmp_path / "report" / "time-to-quality.md").read_text(encoding="utf-8")
    assert "**Not run yet: ours-quick, lans-quick**" in table
    assert [line for line in table.splitlines() if line.startswith("| random |")] == [
        line for line in (miniature / "report" / "time-to-quality.md").read_text(encoding="utf-8").splitlines()
        if line.startswith("| random |")]
    assert not (tmp_path / "runs").exists()


def test_a_stage_measured_with_other_settings_is_refused_in_one_line(tmp_path):
    stages = time_to_quality.Stages(tmp_path)
    began = time.perf_counter()
    stages.save("pretrain/ours-20", {"budget": 20.0}, {"steps": 3}, began)
    done = stages.done("pretrain/ours-20", {"budget": 20.0})
    assert done["steps"] == 3 and 0 <= done["wall_seconds"] <= round(time.perf_counter() - began, 1)
    with pytest.raises(SystemExit) as stop:
        stages.done("pretrain/ours-20", {"budget": 60.0})
    assert str(stop.value).startswith(f"time_to_quality.py: {stages.path('pretrain/ours-20')} was measured with")
    assert "\n" not in str(stop.value)


def yardstick(work_dir: Path, *flags: str) -> time_to_quality.Yardstick:
    parser_args = ["--work-dir", str(work_dir), *flags]
    return time_to_quality.Yardstick(time_to_quality.parse_args(parser_args))


def test_recipe_trials_at_another_budget_compare_with_the_plain_run_at_that_budget(tmp_path):
    """--recipe-budget 60: the baseline is the yardstick's own 60-minute run (ours-60, not trained again), each trial
    runs 60 minutes, and the report keeps its own name so that the 20-minute trials' report stays; a budget the
    yardstick has no plain run at, or any other under --quick, stops with one line naming the flag."""
    runs = yardstick(tmp_path, "--recipe-budget", "60").recipe_runs(["cpu_budget_tiny_8k_vocab"])
    assert [(run.name, run.budget, run.preset) for run in runs] == [
        ("ours-60", 60.0, None), ("cpu_budget_tiny_8k_vocab-60", 60.0, "cpu_budget_tiny_8k_vocab")]
    default = yardstick(tmp_path).recipe_runs(["cpu_budget_tiny_8k_vocab"])
    assert [run.name for run in default] == ["ours-20", "cpu_budget_tiny_8k_vocab-20"]
    assert (time_to_quality.recipes_report_kind(20.0), time_to_quality.recipes_report_kind(60.0)) == (
        "recipes", "recipes-60")
    for flags, message in ((("--recipe-budget", "30"), "--recipe-budget 30: the yardstick has no plain run"),
                           (("--recipe-budget", "60", "--quick"), "--recipe-budget: --quick has one budget")):
        with pytest.raises(SystemExit) as stop:
            yardstick(tmp_path, *flags).recipe_runs(["cpu_budget_tiny_8k_vocab"])
        assert message in str(stop.value) and "\n" not in str(stop.value)


OLD_PLAN = {"glue": {"learning_rate": 1e-4}, "squad": {"learning_rate": 1e-4}}  # before --rescale-embeddings


def scored(sst2: float, mrpc: tuple[float, float], rte: float, cola: float, squad_f1: float,
           plan: dict = OLD_PLAN) -> dict:
    """A downstream result with these medians, as downstream.py writes one (only what the averages and the
    ablation read), fine-tuned with `plan`'s hyperparameters."""
    medians = {"sst-2": {"accuracy": sst2}, "mrpc": {"accuracy": mrpc[0], "f1": mrpc[1]}, "rte": {"accuracy": rte},
               "cola": {"mcc": cola}, "squad": {"F1": squad_f1}}
    return {"downstream": {"tasks": {
        task: {"scores": {name: {"median": value} for name, value in scores.items()},
               "hyperparameters": plan["squad" if task == "squad" else "glue"]} for task, scores in medians.items()}}}


def test_recipe_targets_at_60_minutes_are_issue_43s():
    """recipe_targets: a budget preset at 60 minutes needs 2 GLUE-average points over the plain 60-minute run, and
    its 20-minute run needs the plain 60-minute downstream average; the figures are worked by hand here."""
    plain = scored(60.0, (68.0, 80.0), 54.0, 10.0, 20.0)  # GLUE (60 + 74 + 54 + 10) / 4 = 49.5; avg 43.6
    trials = {"ours-60": plain, "budget-60": scored(64.0, (70.0, 82.0), 56.0, 10.0, 20.0)}  # GLUE 51.5: +2.0
    half_time = {"budget-20": scored(60.0, (68.0, 80.0), 54.0, 9.0, 20.5)}  # avg (60 + 74 + 54 + 9 + 20.5) / 5
    checks = time_to_quality.recipe_targets(trials, "ours-60", half_time)
    assert [(check["value"], check["needed"], check["holds"]) for check in checks] == [
        (pytest.approx(2.0), 2.0, True), (pytest.approx(43.5 - 43.6), 0.0, False)]
    assert checks[0]["target"] == "budget-60: GLUE average at least 2 points above ours-60"
    trials["budget-60"] = scored(64.0, (70.0, 82.0), 56.0, 9.9, 20.0)
    assert not time_to_quality.recipe_targets(trials, "ours-60", {})[0]["holds"]
    lines = time_to_quality.target_table(checks)
    assert lines[2].endswith("| 2.00 | 2.00 | yes |") and lines[3].endswith("| -0.10 | 0.00 | **no** |")


def trial_run(budget: float, arguments: dict, steps: int, sequences: int, accuracy: float, medians: tuple,
              plan: dict = OLD_PLAN) -> dict:
    """A run of a trials report as write_trials_report keeps it (only what ablation reads)."""
    return {"settings": {"budget": budget, "arguments": arguments}, "steps": steps, "minutes": budget,
            "sequences": sequences, "validation": [{"mlm_accuracy": 0.05}, {"mlm_accuracy": accuracy}],
            **scored(*medians, plan=plan)}


NEW_PLAN = {"glue": {"learning_rate": 3e-4, "rescale_embeddings": True},
            "squad": {"learning_rate": 1e-3, "rescale_embeddings": True}}


def test_the_ablation_sets_each_trial_beside_the_plain_run_of_its_own_report(tmp_path):
    """ablation: every trials report in the folder, shortest budget first; each trial with the preset arguments it
    changes (bookkeeping left out) and its gains over the plain run that its own report holds; worked by hand."""
    plain = {"warmup_proportion": "0.1", "alibi": "false", "BERT_CONFIG": "<code>/bert_configs/bert-tiny.json",
             "results_dir": "<code>/results/cpu_budget_tiny", "num_eval_batches": "20"}
    plain_scores = (60.0, (68.0, 80.0), 54.0, 10.0, 20.0)  # GLUE (60 + 74 + 54 + 10) / 4 = 49.5; avg 43.6
    reports = {
        "time-to-quality-recipes-60.json": {  # sorts before time-to-quality-recipes.json, but its budget is longer
            "ours-60": trial_run(60.0, plain, 7200, 460800, 0.15, plain_scores, NEW_PLAN),
            "alibi-60": trial_run(60.0, {**plain, "alibi": "true", "results_dir": "<code>/results/alibi"}, 7000,
                                  448000, 0.30, (60.0, (68.0, 80.0), 52.0, 10.0, 25.0), NEW_PLAN)},  # GLUE 49.0
        "time-to-quality-recipes.json": {
            "ours-20": trial_run(20.0, plain, 2400, 153600, 0.14, plain_scores),
            "onecycle-20": trial_run(20.0, {**plain, "warmup_proportion": "0.5", "num_eval_batches": "80",
                                            "BERT_CONFIG": "<code>/bert_configs/other.json"}, 1800, 115200, 0.12,
                                     (64.0, (70.0, 82.0), 56.0, 10.0, 20.0))}}  # GLUE 51.5, avg 45.2
    for name, runs in reports.items():
        (tmp_path / name).write_text(json.dumps(runs), encoding="utf-8")
    rows = time_to_quality.ablation(tmp_path, 128.0)
    assert [(row["run"], row["plain"], row["report"]) for row in rows] == [
        ("ours-20", True, "time-to-quality-recipes"), ("onecycle-20", False, "time-to-quality-recipes"),
        ("ours-60", True, "time-to-quality-recipes-60"), ("alibi-60", False, "time-to-quality-recipes-60")]
    onecycle, alibi = rows[1], rows[3]
    assert onecycle["changes"] == "warmup_proportion=0.5, BERT_CONFIG=other.json" and alibi["changes"] == "alibi=true"
    assert onecycle["steps_per_second"] == pytest.approx(1800 / 1200) and onecycle["tokens"] == 115200 * 128
    assert (onecycle["glue_gain"], onecycle["downstream_gain"], onecycle["mlm_accuracy_gain"]) == (
        pytest.approx(2.0), pytest.approx(1.6), pytest.approx(-2.0))
    assert (alibi["glue_gain"], alibi["downstream_gain"], alibi["mlm_accuracy_gain"]) == (
        pytest.approx(-0.5), pytest.approx(0.6), pytest.approx(15.0))
    lines = time_to_quality.ablation_table(rows)
    assert lines[3] == ("| [time-to-quality-recipes](time-to-quality-recipes.md) | onecycle-20 | "
                        "warmup_proportion=0.5, BERT_CONFIG=other.json | 20 | 1800 | 1.50 | 115200 | 14.7 | "
                        "12.0% (-2.0) | 0.0001 / 0.0001 | 51.5 (+2.0) | 45.2 (+1.6) |")
    assert lines[4].startswith("| [time-to-quality-recipes-60](time-to-quality-recipes-60.md) | ours-60 | plain "
                               "recipe | 60 | 7200 | 2.00 |")
    assert "| 30.0% (+15.0) | 0.0003 / 0.001, rescaled | 49.0 (-0.5) |" in lines[5]
    assert time_to_quality.ablation(tmp_path, None)[1]["tokens"] is None
    time_to_quality.plot_ablation(rows, tmp_path / "gains.png")
    assert (tmp_path / "gains.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_changes_name_phase_2_only_for_a_trial_that_trains_it_and_step_caps_only_without_a_budget():
    """recipe_changes: the plain recipe's phase-2 arguments are never read in a budget without a phase-2 share, so a
    trial with a share shows its own phase-2 settings and share, not the step cap its budget ends before; a trial
    without a share shows none of them; without a budget the step caps are how a run trains, and count."""
    plain = {"train_steps": "10000000", "train_batch_size_phase2": "4", "learning_rate_phase2": "4e-3",
             "train_steps_phase2": "0", "time_budget": "20", "phase2_budget_share": "0", "alibi": "false"}
    seq512 = {**plain, "train_batch_size_phase2": "16", "learning_rate_phase2": "5e-3",
              "train_steps_phase2": "10000000", "phase2_budget_share": "0.1"}
    assert time_to_quality.recipe_changes(seq512, plain) == (
        "train_batch_size_phase2=16, learning_rate_phase2=5e-3, phase2_budget_share=0.1")
    assert time_to_quality.recipe_changes({**plain, "learning_rate_phase2": "5e-3", "alibi": "true"}, plain) == (
        "alibi=true")
    unbudgeted = {**plain, "time_budget": "none"}
    assert time_to_quality.recipe_changes({**unbudgeted, "train_steps": "500"}, unbudgeted) == "train_steps=500"


def test_training_totals_take_the_sequences_of_the_last_interval_not_of_the_validation_after_it(tmp_path):
    """A run's sequences are its report's own count (trained_sequences, which a ramped batch needs), read from the
    intervals' records: the validation record at the same step, which has none, must not drop it; a report from
    before the count has no sequences, and the yardstick then multiplies steps by the batch."""
    def line(step: int, **data) -> str:
        return "DLLL " + json.dumps({"timestamp": "0", "datetime": "-", "elapsedtime": "0", "type": "LOG",
                                     "step": [0, step], "data": data}) + "\n"
    report = tmp_path / "report.json"
    report.write_text(line(10, loss=7.0, elapsed_training_minutes=1.0, trained_sequences=160)
                      + line(10, eval_mlm_accuracy=0.1, elapsed_training_minutes=1.0)
                      + line(20, loss=6.0, elapsed_training_minutes=2.0, trained_sequences=800)
                      + line(20, eval_mlm_accuracy=0.2, elapsed_training_minutes=2.0), encoding="utf-8")
    assert time_to_quality.training_totals(report) == {"steps": 20, "minutes": 2.0, "sequences": 800}
    report.write_text(line(10, loss=7.0, elapsed_training_minutes=1.0)
                      + line(10, eval_mlm_accuracy=0.1, elapsed_training_minutes=1.0), encoding="utf-8")
    assert time_to_quality.training_totals(report) == {"steps": 10, "minutes": 1.0}


def test_minutes_measured_on_another_cpu_are_refused(tmp_path):
    """A pretraining stage's settings name the CPU: a rerun on another machine does not mix its minutes in."""
    here = yardstick(tmp_path)
    run = time_to_quality.Run("ours-20", "ours", 20.0)
    here.stages.save("pretrain/ours-20", here.settings(run), {"steps": 3}, time.perf_counter())
    assert here.pretrain(run)["steps"] == 3
    elsewhere = yardstick(tmp_path)
    elsewhere.cpu = "Intel(R) Xeon(R) Processor (family 6, model 143); flags: avx2 fma avx512f amx_tile"
    with pytest.raises(SystemExit, match="was measured with other settings"):
        elsewhere.pretrain(run)


def test_each_search_trial_trains_its_optimizer_learning_rate_and_batch(tmp_path):
    """--search's runs pass their optimizer, learning rate and batch (the preset's when they name none) to
    run_pretraining.sh in the preset's slots."""
    names = time_to_quality.preset_argument_names()
    search = yardstick(tmp_path)
    trials = search.search_runs()
    assert len(trials) == len(time_to_quality.SEARCH) == len({trial.name for trial in trials})
    tiny = time_to_quality.preset_arguments("cpu_budget_tiny", search.environment)
    assert {batch for _, _, batch in time_to_quality.SEARCH} > {None}  # some trial tries another batch
    for trial, (optimizer, rate, batch) in zip(trials, time_to_quality.SEARCH, strict=True):
        command, _ = search.pretraining_command(trial)
        arguments = dict(zip(names, command[2:], strict=True))
        assert (arguments["optimizer"], arguments["learning_rate"]) == (optimizer, rate)
        assert arguments["train_batch_size"] == str(batch or tiny["train_batch_size"])
        assert arguments["BERT_CONFIG"] == tiny["BERT_CONFIG"] and arguments["time_budget"] == "5"


def test_an_edited_preset_is_another_run(tmp_path, monkeypatch):
    """The preset's arguments are part of a run's settings: a stage trained before the preset's learning rate
    changed is not taken for the new one."""
    before = yardstick(tmp_path)
    run = time_to_quality.Run("ours-20", "ours", 20.0)
    before.stages.save("pretrain/ours-20", before.settings(run), {"steps": 3}, time.perf_counter())
    after = yardstick(tmp_path)
    edited = dict(after.preset_args, learning_rate="5e-2")
    monkeypatch.setattr(after, "arguments_of", lambda preset: edited)
    with pytest.raises(SystemExit, match="was measured with other settings"):
        after.pretrain(run)


def test_the_preset_argument_names_are_the_scripts_positional_arguments():
    """The names come from _print_pretrain_args; run_pretraining.sh's comment numbers the same arguments."""
    names = time_to_quality.preset_argument_names()
    header = (ROOT / "scripts" / "run_pretraining.sh").read_text(encoding="utf-8")
    numbered = dict(re.findall(r"^# {1,4}(\d+) (\w+) \(", header, re.M))
    assert [numbered[str(position)] for position in range(1, len(names) + 1)] == names
    arguments = time_to_quality.preset_arguments("cpu_budget_mini", {"PATH": "/usr/bin:/bin"})
    assert arguments["BERT_CONFIG"].endswith("bert_configs/bert-mini-uncased.json")
    assert arguments["time_budget"] == "60" and arguments["optimizer"] == "Lamb"


@pytest.mark.parametrize("warmup", [0.0, 0.1, 0.3])
def test_the_peers_schedule_is_ours(warmup):
    """hf_pretraining_peer.lr_at_fraction is run_pretraining.py --time-budget's schedule (no hold, power 1)."""
    from lr_scheduler import warmup_hold_decay

    for fraction in np.linspace(0.0, 1.2, 49):
        expected = warmup_hold_decay(fraction, warmup, warmup, 1.0, 2e-3, 0.0, 1.0)
        assert hf_pretraining_peer.lr_at_fraction(fraction, 2e-3, warmup) == pytest.approx(expected, abs=1e-15)
    assert hf_pretraining_peer.lr_at_fraction(0.55, 2e-3, 0.1) == pytest.approx(2e-3 * 0.5)  # by hand


def test_the_targets_read_the_runs_as_the_issue_states_them():
    def run(budget, engine, medians, spread, curve):
        tasks = {task: {"scores": {name: {"median": medians[task], "spread": spread, "majority": 0.0,
                                          "seeds": {"1": medians[task]}}
                                   for name in time_to_quality.MAIN_SCORES[task]}}
                 for task in time_to_quality.MAIN_SCORES}
        return {"run": {"budget": budget, "engine": engine}, "downstream": {"tasks": tasks},
                "pretraining": {"validation": [{"mlm_accuracy": value} for value in curve]}}

    base = dict.fromkeys(time_to_quality.MAIN_SCORES, 50.0)
    results = {"random": run(0, "random", base, 1.0, []),
               "ours-60": run(60, "ours", {**base, "sst-2": 52.5, "squad": 59.0}, 1.0, [0.1, 0.3]),
               "ours-20": run(20, "ours", base, 0.0, [0.2]),
               "transformers-20": run(20, "transformers", base, 0.0, [0.25])}
    checks = {check["target"]: check for check in time_to_quality.targets(results)}
    sst2 = checks["60 min beats random init on sst-2 accuracy by more than twice the spread"]
    assert (sst2["value"], sst2["needed"], sst2["holds"]) == (2.5, 2.0, True)
    squad = checks["60 min beats random init on squad F1 by more than 10 points and twice the spread"]
    assert (squad["value"], squad["needed"], squad["holds"]) == (9.0, 10.0, False)
    assert not checks["60 min beats random init on rte accuracy by more than twice the spread"]["holds"]
    # validation MLM accuracy in points, as every other value of the table (a fraction printed a 0.4-point lead as
    # 0.00 and a 9.5-point rise as 0.10)
    rise = checks["validation MLM accuracy rises over the 60-minute run"]
    assert rise["value"] == pytest.approx(20.0) and rise["holds"]
    peer = checks["20 min: ours at or above transformers on validation MLM accuracy"]
    assert peer["value"] == pytest.approx(-5.0) and not peer["holds"]
    assert checks["20 min: ours at or above transformers on the downstream average"]["holds"]


def test_compare_sizes_trains_each_budget_preset_on_the_same_shards(miniature):
    from utils.dllog import read_report

    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "time_to_quality.py"), "--quick",
                          "--compare-sizes", "--work-dir", str(miniature), "--report-dir", str(miniature / "sizes")],
                         capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    runs = json.loads((miniature / "sizes" / "time-to-quality-sizes.json").read_text(encoding="utf-8"))
    assert list(runs) == ["tiny-0.1", "mini-0.1", "small-0.1"]
    table = (miniature / "sizes" / "time-to-quality-sizes.md").read_text(encoding="utf-8")
    for size, result in zip(("tiny", "mini", "small"), runs.values(), strict=True):
        [parameters] = [r["data"] for r in read_report(result["report"]) if r.get("step") == "PARAMETER"]
        assert Path(parameters["config_file"]).name == f"bert-{size}-uncased.json"
        assert parameters["input_dir"] == str(miniature / "data" / "wikipedia-en-2015" / "pretrain" / "phase1" /
                                              "unbinned" / "parquet")
        assert parameters["time_budget"] == 0.1 and result["steps"] > 0 and result["validation"]
        assert f"| {size}-0.1 | bert-{size}-uncased.json | " in table


def test_a_run_stopped_before_its_budget_is_not_a_result():
    run = time_to_quality.Run("ours-20", "ours", 20.0)
    time_to_quality.check_budget_spent(run, {"steps": 900, "minutes": 20.01})
    with pytest.raises(SystemExit) as stop:
        time_to_quality.check_budget_spent(run, {"steps": 300, "minutes": 6.5})
    assert str(stop.value) == ("time_to_quality.py: ours-20 stopped after 6.50 of its 20 minutes (interrupted?); "
                               "run the same command again to continue it")


def test_a_downstream_result_of_another_fine_tuning_plan_is_not_reused(tmp_path, monkeypatch):
    """Going from one to three GLUE epochs must fine-tune every checkpoint again: the stage's settings name the plan
    and the hyperparameters, so the stage file of the old plan is refused rather than reported as the new one's."""
    from finetuning import downstream_plan

    yardstick = time_to_quality.Yardstick(time_to_quality.parse_args(["--quick", "--work-dir", str(tmp_path)]))
    run, pretrained = time_to_quality.Run("ours-quick", "ours", 0.3), {"checkpoint": str(tmp_path / "ckpt")}
    settings = yardstick.downstream_settings(run, pretrained)
    assert settings["plan"]["sst-2"] == {"seeds": [1], "epochs": 1, "train_subset": 64, "dev_subset": 64}
    yardstick.stages.save("downstream/ours-quick", settings, {"downstream": {}}, time.perf_counter())
    assert yardstick.stages.done("downstream/ours-quick", settings) is not None  # the same plan: reused
    for change in ({"epochs": 3}, {"seeds": (1, 2)}):
        plan = {**downstream_plan.PLAN, "quick": {**downstream_plan.PLAN["quick"], "sst-2": dataclasses.replace(
            downstream_plan.PLAN["quick"]["sst-2"], **change)}}
        monkeypatch.setattr(downstream_plan, "PLAN", plan)
        with pytest.raises(SystemExit, match="was measured with other settings"):
            yardstick.stages.done("downstream/ours-quick", yardstick.downstream_settings(run, pretrained))
    monkeypatch.setattr(downstream_plan, "HYPERPARAMETERS", {**downstream_plan.HYPERPARAMETERS, "glue": {}})
    assert yardstick.downstream_settings(run, pretrained)["hyperparameters"]["glue"] == {}


def test_a_new_fine_tuning_plan_runs_in_a_folder_of_its_own(tmp_path, monkeypatch):
    """downstream.py refuses to resume units of another setup, so after a change of the plan (or a new checkpoint)
    the yardstick must not send the new stage into the folder that holds the old stage's units; the same settings
    must find their folder again, so that a killed stage resumes."""
    from finetuning import downstream_plan

    yardstick = time_to_quality.Yardstick(time_to_quality.parse_args(["--quick", "--work-dir", str(tmp_path)]))
    run, pretrained = time_to_quality.Run("ours-quick", "ours", 0.3), {"checkpoint": str(tmp_path / "ckpt")}
    old = yardstick.downstream_dir(run, yardstick.downstream_settings(run, pretrained))
    assert old == yardstick.downstream_dir(run, yardstick.downstream_settings(run, pretrained))
    assert old.parent == tmp_path / "downstream" / "ours-quick"
    glue = {**downstream_plan.HYPERPARAMETERS["glue"],
            "learning_rate": 3 * downstream_plan.HYPERPARAMETERS["glue"]["learning_rate"]}
    monkeypatch.setattr(downstream_plan, "HYPERPARAMETERS", {**downstream_plan.HYPERPARAMETERS, "glue": glue})
    new_plan = yardstick.downstream_dir(run, yardstick.downstream_settings(run, pretrained))
    new_checkpoint = yardstick.downstream_dir(run, yardstick.downstream_settings(run, {"checkpoint": "other"}))
    assert len({old, new_plan, new_checkpoint}) == 3


# The page that sets the time-to-quality results out for a reader (the README links it from its headline table).
SUMMARY_PAGE = ROOT / "docs" / "time-to-quality-summary.md"
# The budget-recipe rows that the summary page shows beside the plain recipe, each from its report, all scored with
# today's fine-tuning plan: ALiBi (the first to leave the copy floor) at 60 minutes, bias-free linear layers at 60,
# and ALiBi without linear biases at 20 and 60.
SUMMARY_BUDGET_ROWS = (("time-to-quality-recipes-alibi-60", 60, "cpu_budget_tiny_alibi-60"),
                       ("time-to-quality-recipes-alibi-nobias", 20, "cpu_budget_tiny_alibi_nobias-20"),
                       ("time-to-quality-recipes-nobias-60", 60, "cpu_budget_tiny_nobias-60"),
                       ("time-to-quality-recipes-alibi-nobias-60", 60, "cpu_budget_tiny_alibi_nobias-60"))


def test_the_summary_page_table_is_the_committed_reports_summary():
    """The summary page's results are the committed docs/time-to-quality.json as the report writer puts them, so
    that a new run's report and the page cannot disagree."""
    report = json.loads((ROOT / "docs" / "time-to-quality.json").read_text(encoding="utf-8"))
    table = time_to_quality.summary_table(report["runs"])
    assert table.count("\n") >= 3  # the header, its rule and at least two scored runs
    page = SUMMARY_PAGE.read_text(encoding="utf-8")
    assert table in page
    assert table in (ROOT / "docs" / "time-to-quality.md").read_text(encoding="utf-8")
    # and the budget recipes beside the plain recipe (each report's baseline is a plain "ours" run at its budget):
    # the page's table goes on with their rows
    rows = []
    for report, minutes, run in SUMMARY_BUDGET_ROWS:
        trials = json.loads((ROOT / "docs" / f"{report}.json").read_text(encoding="utf-8"))
        recipes = time_to_quality.recipe_summary_table(trials)
        assert recipes.splitlines()[2].startswith(f"| ours, {minutes} min |")
        assert recipes in (ROOT / "docs" / f"{report}.md").read_text(encoding="utf-8")
        label = time_to_quality.SUMMARY_LABELS[run]
        rows += [row for row in recipes.splitlines()[3:] if row.startswith(f"| {label} |")]
    assert len(rows) == len(SUMMARY_BUDGET_ROWS)
    assert table + "\n" + "\n".join(rows) + "\n" in page


def test_a_phase2_share_of_the_budget_trains_phase2_after_phase1_and_is_counted_with_it(miniature, tmp_path):
    """cpu_budget_tiny_seq512 (phase2_budget_share 0.1): phase 1 trains 90% of the budget at length 128, phase 2
    the rest at 512 from phase 1's last checkpoint, validated on phase 1's held-out batches. The run's steps,
    sequences, minutes and validation curve are both phases', its tokens count phase 2's longer rows, and it is
    scored from phase 2's checkpoint. It runs in a copy of the miniature, whose stages other tests count."""
    work = tmp_path / "work"
    shutil.copytree(miniature, work, symlinks=True)
    command = [sys.executable, str(ROOT / "benchmarks" / "time_to_quality.py"), "--quick", "--work-dir",
               str(work), "--report-dir", str(tmp_path), "--recipe-trials", "cpu_budget_tiny_seq512"]
    run = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    trial = json.loads((tmp_path / "time-to-quality-recipes.json").read_text())["cpu_budget_tiny_seq512-0.3"]
    results = work / "runs" / "cpu_budget_tiny_seq512-0.3"
    phase1, phase2 = (time_to_quality.run_parameters(results / f"dllogger_p{phase}.json") for phase in (1, 2))
    assert (phase1["time_budget"], phase1["max_seq_length"]) == (pytest.approx(0.27), 128)
    assert (phase2["time_budget"], phase2["max_seq_length"]) == (pytest.approx(0.03), 512)
    phase1_steps = max(int(path.name) for path in (results / "custom" / "phase1").iterdir() if path.name.isdigit())
    phase2_steps = max(int(path.name) for path in (results / "custom" / "phase2").iterdir() if path.name.isdigit())
    assert phase2["from_phase1_final_params"] == str(results / "custom" / "phase1" / str(phase1_steps))
    assert Path(phase2["eval_dir"]).name == "parquet_holdout" and "phase1" in Path(phase2["eval_dir"]).parts
    assert (phase2["eval_batch_size"], phase2["num_eval_batches"]) == (8, phase1["num_eval_batches"])
    assert trial["checkpoint"] == str(results / "custom" / "phase2" / str(phase2_steps))
    assert (trial["steps"], trial["phase2"]["steps"]) == (phase1_steps + phase2_steps, phase2_steps)
    assert trial["phase2"]["sequences"] == 16 * phase2_steps
    assert trial["sequences"] == 8 * phase1_steps + 16 * phase2_steps
    assert trial["minutes"] >= 0.3 and trial["phase2"]["minutes"] >= 0.03
    last = trial["validation"][-1]
    assert (last["step"], last["minutes"]) == (trial["steps"], pytest.approx(trial["minutes"]))
    pipeline = json.loads((work / "stages" / "data--cpu_budget_tiny_seq512.json").read_text())["pipeline_phase2"]
    per_row = (pipeline["sample_tokens"] + pipeline["padding_tokens"]) / pipeline["samples"]
    assert 128 < per_row <= 512 and trial["phase2"]["tokens"] == pytest.approx(16 * phase2_steps * per_row)
    assert time_to_quality.run_tokens(trial, 100.0) == pytest.approx(100.0 * 8 * phase1_steps
                                                                     + trial["phase2"]["tokens"])
    weights = Path(trial["checkpoint"]) / "bert_paddle.pdparams"
    assert trial["downstream"]["weights"]["weights_sha256"] == hashlib.sha256(weights.read_bytes()).hexdigest()
    table = (tmp_path / "time-to-quality-recipes.md").read_text(encoding="utf-8")
    assert "| cpu_budget_tiny_seq512-0.3 | bert-tiny-uncased.json | phase 2 at seq 512 for 0.1 of the budget |" in table


def test_a_recipe_trial_trains_its_options_and_is_scored_beside_the_baseline(miniature, tmp_path):
    """--recipe-trials: the baseline is the miniature's own ours run (not trained again), and the trial preset's
    options reach its checkpoint, its report and the table; its scores come from its own checkpoint. --data-only
    first builds the trials' data alone, which the trials then find done."""
    command = [sys.executable, str(ROOT / "benchmarks" / "time_to_quality.py"), "--quick", "--work-dir",
               str(miniature), "--report-dir", str(miniature / "report"), "--recipe-trials", "cpu_budget_tiny_prenorm",
               "cpu_budget_tiny_8k_vocab", "cpu_budget_tiny_mask30"]
    built = subprocess.run([*command, "--data-only"], capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    assert sorted(path.name for path in (miniature / "stages").glob("data*")) == [
        "data--cpu_budget_tiny_8k_vocab.json", "data--cpu_budget_tiny_mask30.json",
        "data--cpu_budget_tiny_prenorm.json", "data.json"]
    assert not list((miniature / "stages").glob("*cpu_budget_tiny_*-0.3.json"))  # nothing trained
    main_page = (miniature / "report" / "time-to-quality.md").read_text(encoding="utf-8")
    run = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "pretrain/ours-quick: done" in run.stdout and "data/cpu_budget_tiny_8k_vocab: done" in run.stdout
    # The yardstick's page in the same folder gains the new report's trials in its ablation, its own tables as
    # they were (write_main_page renders them from its JSON).
    rerendered = (miniature / "report" / "time-to-quality.md").read_text(encoding="utf-8")
    heading = "## Budget-recipe options at equal time"
    assert rerendered.split(heading)[0].rstrip("\n") == main_page.split(heading)[0].rstrip("\n")
    assert "| cpu_budget_tiny_mask30-0.3 | masked_lm_ratio=0.3 | 0.3 |" in rerendered.split(heading)[1]
    assert f"Ablation re-rendered: {miniature / 'report' / 'time-to-quality.md'}" in run.stdout
    trials = json.loads((miniature / "report" / "time-to-quality-recipes.json").read_text(encoding="utf-8"))
    assert list(trials) == ["ours-quick", "cpu_budget_tiny_prenorm-0.3", "cpu_budget_tiny_8k_vocab-0.3",
                            "cpu_budget_tiny_mask30-0.3"]
    # The vocabulary trial: its own data stage trains the vocabulary and its shards; the checkpoint carries that
    # vocabulary, and fine-tuning tokenized with it.
    vocab_trial = trials["cpu_budget_tiny_8k_vocab-0.3"]
    trained = sorted((miniature / "data").rglob("parquet_wordpiece-8192.txt"))
    assert len(trained) == 1 and (miniature / "stages" / "data--cpu_budget_tiny_8k_vocab.json").is_file()
    carried = Path(vocab_trial["checkpoint"]) / "bert_paddle_vocab.txt"
    assert carried.read_bytes() == trained[0].read_bytes() and vocab_trial["downstream"]["vocab_file"] == str(carried)
    entries = len(carried.read_text(encoding="utf-8").splitlines())
    assert 4096 < entries <= 8192 == json.loads((carried.parent / "bert_paddle_config.json").read_text())["vocab_size"]
    assert trials["ours-quick"]["downstream"]["vocab_file"].endswith("bert_paddle_vocab.txt")
    configs = {name: json.loads((Path(trial["checkpoint"]) / "bert_paddle_config.json").read_text(encoding="utf-8"))
               for name, trial in trials.items()}
    assert (configs["ours-quick"]["pre_layer_norm"], configs["cpu_budget_tiny_prenorm-0.3"]["pre_layer_norm"]) == (
        False, True)
    assert configs["cpu_budget_tiny_prenorm-0.3"]["hidden_dropout_prob"] == 0.1  # fine-tuning's, kept
    parameters = time_to_quality.run_parameters(Path(trials["cpu_budget_tiny_prenorm-0.3"]["report"]))
    assert parameters["pre_layer_norm"] and parameters["no_dropout"] and not parameters["gated_feed_forward"]
    trial = trials["cpu_budget_tiny_prenorm-0.3"]
    weights = Path(trial["checkpoint"]) / "bert_paddle.pdparams"
    assert trial["downstream"]["weights"]["weights_sha256"] == hashlib.sha256(weights.read_bytes()).hexdigest()
    table = (miniature / "report" / "time-to-quality-recipes.md").read_text(encoding="utf-8")
    assert "| cpu_budget_tiny_prenorm-0.3 | bert-tiny-uncased.json | --pre-layer-norm --no-dropout | Lamb |" in table
    # The masking trial masks up to 39 of a sequence's 128 tokens, 30%, where the baseline masks up to 20.
    masking = time_to_quality.run_parameters(Path(trials["cpu_budget_tiny_mask30-0.3"]["report"]))
    baseline = time_to_quality.run_parameters(Path(trials["ours-quick"]["report"]))
    assert (masking["masked_lm_ratio"], masking["max_predictions_per_seq"]) == (0.3, 39)
    assert (baseline["masked_lm_ratio"], baseline["max_predictions_per_seq"]) == (0.15, 20)
    assert "| cpu_budget_tiny_mask30-0.3 | bert-tiny-uncased.json | --masked-lm-ratio 0.3 | Lamb |" in table
    # A rerun of fewer trials (done, so not trained again) would replace the report without the others: refused.
    fewer = subprocess.run(command[:-2], capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert fewer.returncode == 1
    assert_one_line(fewer.stderr, "time_to_quality.py: ", "time-to-quality-recipes.json",
                    "cpu_budget_tiny_8k_vocab-0.3", "cpu_budget_tiny_mask30-0.3", "--report-dir")
    assert (miniature / "report" / "time-to-quality-recipes.md").read_text(encoding="utf-8") == table
    # The yardstick's own report sets the trials of the reports beside it after its tables (ablation), here rendered
    # from a copy of the stages into a folder that holds this trials report.
    shutil.copytree(miniature / "stages", tmp_path / "stages")
    shutil.copy(miniature / "report" / "time-to-quality-recipes.json", tmp_path)
    time_to_quality.main(["--quick", "--report-only", "--work-dir", str(tmp_path), "--report-dir", str(tmp_path)])
    report = (tmp_path / "time-to-quality.md").read_text(encoding="utf-8")
    section = report[report.index("## Budget-recipe options at equal time"):]
    assert "| cpu_budget_tiny_prenorm-0.3 | pre_layer_norm=true, dropout=false | 0.3 |" in section
    assert "| cpu_budget_tiny_mask30-0.3 | masked_lm_ratio=0.3 | 0.3 |" in section
    assert "| ours-quick | plain recipe | 0.3 |" in section
    assert (tmp_path / "time-to-quality-recipes.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("text", ["{not json", '{"runs": {}}', "[1, 2]"])
def test_a_main_report_that_cannot_be_rendered_stops_a_trials_report_before_it_is_written(tmp_path, text):
    """A trials report re-renders the yardstick's page beside it from its JSON: where that JSON is not the
    yardstick's, one line names it and nothing is written."""
    (tmp_path / "time-to-quality.json").write_text(text)
    args = time_to_quality.parse_args(["--report-dir", str(tmp_path), "--recipe-trials", "cpu_budget_tiny_alibi"])
    with pytest.raises(SystemExit) as raised:
        time_to_quality.write_trials_report(args, "recipes", {"ours-20": {"report": str(tmp_path / "none.json")}})
    assert_one_line(str(raised.value), "time_to_quality.py: ", str(tmp_path / "time-to-quality.json"),
                    "not a time-to-quality report", "--report-dir")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["time-to-quality.json"]


def test_the_options_column_names_every_option_that_differs_from_the_plain_recipe():
    """The warmup-stable-decay trial's table row said "-": --constant-proportion was missing from the column; the
    one-cycle trial's would have too, without its warmup proportion (the plain recipe's is the table's first run's)."""
    plain = {"pre_layer_norm": False, "no_dropout": False, "masked_lm_ratio": 0.15, "gradient_merge_ramp": 0.0,
             "constant_proportion": 0.0, "warmup_proportion": 0.1}
    assert time_to_quality.options_column(plain, 0.1) == "-"
    assert time_to_quality.options_column({**plain, "constant_proportion": 0.7}, 0.1) == "--constant-proportion 0.7"
    assert time_to_quality.options_column({**plain, "warmup_proportion": 0.5}, 0.1) == "--warmup-proportion 0.5"
    assert time_to_quality.options_column({**plain, "pre_layer_norm": True, "no_dropout": True,
                                           "masked_lm_ratio": 0.3, "gradient_merge_ramp": 0.5}, 0.1) == (
        "--pre-layer-norm --no-dropout --masked-lm-ratio 0.3 --gradient-merge-ramp 0.5")


def test_the_peers_checkpoint_is_a_hugging_face_folder_with_the_vocabulary_it_trained_with(tmp_path):
    """The yardstick fine-tunes the peer's folder as a Hugging Face folder, whose tokenizer is its vocab.txt: without
    it downstream.py stopped ("--vocab-file .../vocab.txt: file not found")."""
    from downstream import checkpoint_start

    # CI has no torch. The stand-in writes what transformers 5's BertForPreTraining.save_pretrained wrote for
    # tests/fixtures/tiny_bert_tf5 (make_tiny_bert_tf5.py): today's config.json bookkeeping and safetensors layout.
    saved = ROOT / "tests" / "fixtures" / "tiny_bert_tf5"

    class SavesLikeTransformers:
        def save_pretrained(self, folder: Path, safe_serialization: bool) -> None:
            assert safe_serialization
            for name in ("config.json", "model.safetensors"):
                (folder / name).write_bytes((saved / name).read_bytes())

    vocab = tmp_path / "vocab-used.txt"
    vocab.write_text("".join(f"{token}\n" for token in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"]))
    hf_pretraining_peer.save_checkpoint(SavesLikeTransformers(), tmp_path / "peer", str(vocab))
    assert (tmp_path / "peer" / "vocab.txt").read_bytes() == vocab.read_bytes()
    start = checkpoint_start(str(tmp_path / "peer"), None, None)
    assert start.description["kind"] == "hugging face" and start.vocab_file == str(tmp_path / "peer" / "vocab.txt")
    assert start.description["weights_file"] == str(tmp_path / "peer" / "model.safetensors")
    # every embedding and encoder tensor of the saved BERT reaches the fine-tuning runs: 5 + 16 per layer
    layers = json.loads((saved / "config.json").read_text(encoding="utf-8"))["num_hidden_layers"]
    assert start.description["encoder_tensors"] == 5 + 16 * layers


def test_the_context_free_floor_is_counted_on_the_validation_batches_of_the_run(miniature):
    from itertools import islice

    from mlm_baselines import PREDICTORS, context_free_accuracy

    from pretraining_dataset import PretrainingDataLoader
    from training.pretraining_eval import EVAL_SEED
    from utils.dllog import read_report

    report = json.loads((miniature / "report" / "time-to-quality.json").read_text(encoding="utf-8"))
    [options] = [r["data"] for r in read_report(report["runs"]["ours-quick"]["pretraining"]["report"])
                 if r.get("step") == "PARAMETER"]

    def batches(folder: str, seed: int, count: int) -> list[dict]:
        loader = PretrainingDataLoader(folder, options["vocab_file"], options["batch_size"],
                                       options["max_seq_length"], options["max_predictions_per_seq"], seed, nsp=True)
        return list(islice(loader, count))

    validation = batches(options["eval_dir"], EVAL_SEED, options["num_eval_batches"])
    expected = context_free_accuracy(batches(options["input_dir"], options["seed"],
                                             time_to_quality.QUICK_CONTEXT_FREE_TRAIN_BATCHES), validation, 103)
    assert report["context_free"] == expected
    # Every masked token of the validation batches that pretraining_eval.py scores, and no other.
    assert expected["masked tokens"] == sum(int((b["masked_lm_labels"] >= 0).sum()) for b in validation) > 0
    table = (miniature / "report" / "time-to-quality.md").read_text(encoding="utf-8")
    for name in PREDICTORS:
        assert f"| context-free: {name} | - | - | - | {expected[name] * 100:.1f} |" in table


def test_a_trials_report_that_does_not_parse_is_named_and_left_in_place(tmp_path):
    report = tmp_path / "time-to-quality-recipes.json"
    report.write_text("{not json")
    with pytest.raises(SystemExit) as raised:
        time_to_quality.check_no_trial_dropped(report, {"ours-20": {}})
    assert_one_line(str(raised.value), "time_to_quality.py: ", str(report), "not a trials report", "--report-dir")
    assert report.read_text() == "{not json"
    report.write_text('{"ours-20": {}}')  # the same trials: nothing is lost, so it may be replaced
    time_to_quality.check_no_trial_dropped(report, {"ours-20": {}, "cpu_budget_tiny_alibi-20": {}})
