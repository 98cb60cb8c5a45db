"""The claims of docs/nvidia-differences.md's rows that no other test checks, each test named after
its row. The scripts run with a recording `python` first on PATH (tests/recipe_fakes.py); what NVIDIA's recipe
does comes from its source (DeepLearningExamples, PaddlePaddle/LanguageModeling/BERT) and is quoted in the row."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import run_squad
from conftest import ROOT
from recipe_fakes import make_fakes, preset, script_args, value, write_executable

# A python that records its arguments and the CUDA_VISIBLE_DEVICES it was started with.
ENV_PYTHON = f"""#!{sys.executable}
import json, os, sys
with open(os.environ["FAKE_PYTHON_LOG"], "a") as log:
    log.write(json.dumps({{"argv": sys.argv[1:], "cuda": os.environ.get("CUDA_VISIBLE_DEVICES")}}) + "\\n")
"""


def run_recipe(script: str, args: list[str], tmp_path: Path, env_python: bool = True, **env: str) -> list[dict]:
    """The python calls of a recipe run; env_python: record CUDA_VISIBLE_DEVICES (else the shared recording python,
    which also leaves the checkpoint folders run_pretraining.sh looks for)."""
    fakes = make_fakes(tmp_path / "fakes", recording_python=not env_python)
    if env_python:
        write_executable(fakes.bin_dir / "python", ENV_PYTHON)
    environment = fakes.env(BERT_PREP_WORKING_DIR=str(tmp_path / "data"), RESULTS_DIR=str(tmp_path / "results"),
                            **env)
    result = subprocess.run(["bash", str(ROOT / "scripts" / script), *args], capture_output=True, text=True,
                            cwd=tmp_path, env=environment)
    assert result.returncode == 0, result.stdout + result.stderr
    return fakes.python_calls()


def test_cuda_visible_devices_row_the_recipes_honour_it(tmp_path):
    """NVIDIA's run_squad.sh and run_pretraining.sh `unset CUDA_VISIBLE_DEVICES`; ours pass it on."""
    calls = run_recipe("run_squad.sh", ["ckpt"], tmp_path, CUDA_VISIBLE_DEVICES="2,3")
    assert [call["cuda"] for call in calls] == ["2,3"]
    calls = run_recipe("run_pretraining_p1.sh", ["--gpus", "2"], tmp_path / "p1", CUDA_VISIBLE_DEVICES="1,2")
    assert [call["cuda"] for call in calls] == ["1,2"]


def test_run_squad_sh_lower_case_row_no_do_lower_case_is_passed(tmp_path):
    """NVIDIA's run_squad.sh passes --do-lower-case whatever the vocabulary; ours leaves the casing to
    run_squad.py, which reads it from the vocabulary (a cased vocabulary holds upper-case pieces)."""
    calls = run_recipe("run_squad.sh", ["ckpt"], tmp_path)
    (args,) = script_args(calls, "run_squad.py")
    assert "--do-lower-case" not in args and "--no-do-lower-case" not in args


def test_output_folder_rows_squad_presets_and_run_squad_py(tmp_path):
    """The SQuAD presets' OUT_DIR is results/squad, so run_squad.sh writes to results/squad/<model>/squad/ (NVIDIA's
    presets: results, so results/<model>/squad/); run_squad.py writes into --output-dir itself."""
    env = {"RESULTS_DIR": str(tmp_path / "results"), "PATH": "/usr/bin:/bin"}
    args = preset("squad_config.sh", "dgxa100-80g_8gpu_amp", env)
    assert args[10] == f"{tmp_path}/results/squad"
    calls = run_recipe("run_squad.sh", args, tmp_path)
    (squad_args,) = script_args(calls, "run_squad.py")
    assert value(squad_args, "--output-dir") == f"{tmp_path}/results/squad/bert-large-uncased/squad"
    parsed = run_squad.build_parser().parse_args(["--vocab-file", "v", "--output-dir", "X"])
    assert parsed.output_dir == "X"


@pytest.mark.parametrize("script, phase", [("run_pretraining_p1.sh", "phase1"), ("run_pretraining_p2.sh", "phase2")])
def test_output_folder_row_named_phase_scripts_write_under_results(tmp_path, script, phase):
    """NVIDIA's run_pretraining_p1.sh/_p2.sh write under ./results/checkpoints; ours under results/, where
    run_pretraining.sh writes too, and phase 2 starts from results/bert-large-uncased/phase1/7038."""
    calls = run_recipe(script, [], tmp_path)
    (args,) = script_args(calls, "run_pretraining.py")
    assert value(args, "--output-dir") == f"{ROOT}/results"
    if phase == "phase2":
        assert value(args, "--from-phase1-final-params") == f"{ROOT}/results/bert-large-uncased/phase1/7038"


def test_fuse_mha_row_fuses_in_every_precision_and_both_phases(tmp_path):
    """NVIDIA's scripts pass --fuse-mha with amp only and its run_pretraining.sh in phase 1 only; ours whenever the
    argument is true: tf32 here, and both phases."""
    calls = run_recipe("run_squad.sh", ["ckpt", "2", "32", "4.6e-5", "0.2", "tf32"], tmp_path)
    (args,) = script_args(calls, "run_squad.py")
    assert "--fuse-mha" in args and "--amp" not in args
    corpus = tmp_path / "p" / "data" / "pretrain"
    for phase_dir in ("phase1/unbinned/parquet", "phase2/bin_size_64/parquet"):
        (corpus / phase_dir).mkdir(parents=True)
        (corpus / phase_dir / "shard-0.parquet").write_text("")
    calls = run_recipe("run_pretraining.sh", [], tmp_path / "p", env_python=False)
    phases = script_args(calls, "run_pretraining.py")
    assert len(phases) == 2 and all("--fuse-mha" in args for args in phases)


def test_num_workers_row_the_recipes_pass_four_the_parser_defaults_to_one(tmp_path):
    """NVIDIA's run_pretraining.sh argument 24 and run.sub's NUM_WORKERS (4) only size the shard count, so its loader
    runs --num-workers' default, 1, which ours shares; ours also pass the 4 to the loader."""
    corpus = tmp_path / "data" / "pretrain"
    for phase_dir in ("phase1/unbinned/parquet", "phase2/bin_size_64/parquet"):
        (corpus / phase_dir).mkdir(parents=True)
        (corpus / phase_dir / "shard-0.parquet").write_text("")
    phases = script_args(run_recipe("run_pretraining.sh", [], tmp_path, env_python=False), "run_pretraining.py")
    assert [value(args, "--num-workers") for args in phases] == ["4", "4"]
    assert 'NUM_WORKERS=${NUM_WORKERS:-4}' in (ROOT / "run.sub").read_text()
    assert '--num-workers "$NUM_WORKERS"' in (ROOT / "run.sub").read_text()


def test_report_file_row_run_sub_writes_the_phase_report_beside_the_checkpoints():
    """NVIDIA's run.sub leaves --report-file at its default, ./report.json."""
    text = (ROOT / "run.sub").read_text()
    assert '--report-file "$checkpointdir/dllogger_p$PHASE.json"' in text
    assert json.dumps("./report.json") not in text
