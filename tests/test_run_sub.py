"""run.sub without Slurm: fake `srun` / `scontrol` (tests/recipe_fakes.py) run each "node" as a local process.

With the recording `python`, each environment variable is changed alone and must change exactly the command
lines it stands for; the variables of the features beyond NVIDIA's recipe (HOLDOUT_FRACTION ... PACK_SEQUENCES)
must add exactly their flags to the script where each takes effect, as run_pretraining.sh's arguments 36-42 do.
The last test really trains: preprocessing (the parquet folder is empty) by a dask cluster with a worker on
each "node", then two launchers with --nnodes 2 and one master on this machine, two ranks, one checkpoint.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

import lddl_preprocess
import run_pretraining
from conftest import ROOT
from data.make_sample_corpus import write_corpus
from interrupts import signal_while_running, wait_for
from messages import assert_one_line
from recipe_fakes import Fakes, launcher_args, make_fakes, script_args, value
from tokenizer import train_vocab

RUN_SUB = ROOT / "run.sub"
TINY_CONFIG = str(ROOT / "bert_configs" / "bert-tiny-uncased.json")
FEATURE_VARIABLES = ("HOLDOUT_FRACTION", "EVAL_FREQ", "NUM_EVAL_BATCHES", "WHOLE_WORD_MASKING", "MASKED_LM_RATIO",
                     "NO_NSP", "PACK_SEQUENCES")
# Every variable run.sub reads (or exports), so that a test's job sees only the ones it sets.
RUN_SUB_VARIABLES = ("CONT", "IMAGE_VERSION", "RERUN_DASK", "USE_JEMALLOC", "PADDLEBERT_STOP_FILE", "PHASE",
                     "TRAIN_BATCH_SIZE", "GRADIENT_ACCUMULATION_STEPS", "GPUS", "PRECISION", "SEED", "TRAIN_STEPS",
                     "SAVE_CHECKPOINT_STEPS", "STEPS_THIS_RUN", "BIN_SIZE", "MASKING", "SAMPLE_RATIO",
                     "DASK_TASKS_PER_NODE", "NUM_SHARDS_PER_WORKER", "NUM_WORKERS", "INIT_CHECKPOINT", "BERT_CONFIG",
                     "VOCAB_FILE", "datadir", "checkpointdir", "MASTER_ADDR", "MASTER_PORT", "NVIDIA_TF32_OVERRIDE",
                     *FEATURE_VARIABLES)
FEATURE_FLAGS = ("--holdout-fraction", "--holdout-dir", "--eval-dir", "--eval-freq", "--num-eval-batches",
                 "--whole-word-masking", "--masked-lm-ratio", "--no-nsp", "--pack-sequences")


@dataclass
class Job:
    result: subprocess.CompletedProcess
    python_calls: list[dict]
    srun_calls: list[list[str]]

    @property
    def training(self) -> list[dict]:
        """The launcher calls, one per node, in node order."""
        calls = [call for call in self.python_calls if call["argv"][:2] == ["-m", "paddle.distributed.launch"]]
        return sorted(calls, key=lambda call: call["node"])

    @property
    def pretraining_args(self) -> list[str]:
        return script_args(self.training[:1], "run_pretraining.py")[0]

    @property
    def address_queries(self) -> list[list[str]]:
        """The srun calls that ask a node for its address (`python -c ...`)."""
        return [call for call in self.srun_calls if "python" in call and call[call.index("python") + 1] == "-c"]

    def step_running(self, *command: str) -> list[str]:
        """The srun options and command of the one step whose command starts with `command` (a program's name,
        or a script's file name after `python`, and the words after it)."""
        def runs(call: list[str]) -> bool:
            words = [Path(word).name for word in call]
            return any(words[start:start + len(command)] == list(command) for start in range(len(words)))
        (call,) = [call for call in self.srun_calls if runs(call)]
        return call

    @property
    def preprocessing(self) -> list[str] | None:
        found = script_args(self.python_calls, "lddl_preprocess.py")
        return found[0] if found else None


def job_env(tmp: Path, fakes: Fakes, **changes: str) -> dict[str, str]:
    env = {name: text for name, text in fakes.env().items() if name not in RUN_SUB_VARIABLES}
    env.update(SLURM_JOB_NUM_NODES="2", SLURM_JOB_NODELIST="node[1-2]", SLURM_JOB_ID="1234",
               SLURM_SUBMIT_DIR=str(ROOT), datadir=str(tmp / "data"), checkpointdir=str(tmp / "results"),
               VOCAB_FILE=str(tmp / "vocab.txt"))
    return {**env, **{name: text.format(tmp=tmp) for name, text in changes.items()}}


def submit(tmp: Path, fakes: Fakes, **changes: str) -> Job:
    fakes.python_log.unlink(missing_ok=True)
    fakes.srun_log.unlink(missing_ok=True)
    result = subprocess.run(["bash", str(RUN_SUB)], capture_output=True, text=True, cwd=tmp,
                            env=job_env(tmp, fakes, **changes))
    return Job(result, fakes.python_calls(), fakes.srun_calls())


def prepare(tmp: Path) -> Fakes:
    """A corpus folder, a vocab file and an initial checkpoint folder, for the recording runs."""
    source = tmp / "data" / "wikipedia" / "source" / "en"
    source.mkdir(parents=True)
    (source / "wiki.txt").write_text("doc-1 Some text.\n")
    (tmp / "vocab.txt").write_text("[PAD]\n")
    (tmp / "init").mkdir()
    (tmp / "init" / "bert_paddle.pdparams").write_text("")
    return make_fakes(tmp / "fakes")


def submit_ok(tmp: Path, fakes: Fakes, **changes: str) -> Job:
    job = submit(tmp, fakes, **changes)
    assert job.result.returncode == 0, job.result.stdout + job.result.stderr
    return job


def test_defaults_follow_nvidias_run_sub(tmp_path):
    fakes = prepare(tmp_path)
    job = submit_ok(tmp_path, fakes)
    parquet = f"{tmp_path}/data/pretrain/phase1/unbinned/parquet"

    # Both "nodes" start one launcher with the same rendezvous; each logs to its own folder.
    assert [call["node"] for call in job.training] == ["0", "1"]
    for node, call in enumerate(job.training):
        launcher = launcher_args(call)
        assert value(launcher, "--nnodes") == "2" and value(launcher, "--nproc_per_node") == "8"
        assert value(launcher, "--master") == f"10.1.2.3:{20000 + 1234 % 20000}"
        assert value(launcher, "--log_dir") == f"{tmp_path}/results/1234/log/node{node}"
        assert call["stop_file"] == f"{tmp_path}/results/1234/stop-request"
    # The master address is asked of the first node that scontrol lists.
    (address_query,) = job.address_queries
    assert "--nodelist=node1" in address_query and "--nodes=1" in address_query

    expected = {"--max-seq-length": "128", "--max-predictions-per-seq": "20", "--learning-rate": "6e-3",
                "--warmup-proportion": "0.2843", "--num-steps-per-checkpoint": "2500", "--max-steps": "7038",
                "--input-dir": parquet, "--output-dir": f"{tmp_path}/results", "--vocab-file": f"{tmp_path}/vocab.txt",
                "--bert-model": "bert-large-uncased", "--config-file": f"{ROOT}/bert_configs/bert-large-uncased.json",
                "--batch-size": "256", "--gradient-merge-steps": "32", "--num-workers": "4", "--seed": "42",
                "--optimizer": "Lamb", "--last-step-of-checkpoint": "auto", "--scale-loss": "1048576",
                "--report-file": f"{tmp_path}/results/dllogger_p1.json"}
    args = job.pretraining_args
    assert {flag: value(args, flag) for flag in expected} == expected
    assert {"--phase1", "--amp", "--use-dynamic-loss-scaling"} <= set(args) and "--phase2" not in args

    preprocessing = {"--input": f"{tmp_path}/data/wikipedia/source", "--output-dir": parquet,
                     "--max-seq-length": "128", "--num-blocks": "4096", "--num-shards": "4096",
                     "--num-workers": str(128 * 2), "--seed": "42", "--sample-ratio": "0.9",
                     "--scheduler-address": "tcp://10.1.2.3:8786"}
    assert {flag: value(job.preprocessing, flag) for flag in preprocessing} == preprocessing
    assert "--masking" in job.preprocessing and "--bin-size" not in job.preprocessing

    mounts = f"{ROOT}:{ROOT},{tmp_path}/data:{tmp_path}/data,{tmp_path}/results:{tmp_path}/results"
    # The dask scheduler, the workers, the preprocessing client, the address query, the launchers.
    assert len(job.srun_calls) == 5
    # NVIDIA's USE_JEMALLOC=true: the preprocessing runs with jemalloc preloaded, in the client and the workers.
    jemalloc = "LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
    assert f"--export=ALL,{jemalloc}" in job.step_running("lddl_preprocess.py")
    assert f"--export=ALL,PYTHONPATH={ROOT},{jemalloc}" in job.step_running("dask", "worker")
    assert not (tmp_path / "results" / "1234" / "stop-request").exists()
    for call in job.srun_calls:
        assert "--container-image=paddlebert:latest" in call and f"--container-mounts={mounts}" in call


@pytest.fixture(scope="module")
def baseline_job(tmp_path_factory) -> Job:
    tmp = tmp_path_factory.mktemp("run_sub_baseline")
    return submit_ok(tmp, prepare(tmp))


def _training(flag):
    return lambda job: value(job.pretraining_args, flag)


def _launcher(flag):
    return lambda job: [value(launcher_args(call), flag) for call in job.training]


def _preprocessing(flag):
    return lambda job: value(job.preprocessing, flag)


# (environment changed, what to read from the job, the value expected); the baseline job reads differently.
ENV_CASES = {
    "CONT": ({"CONT": "registry/bert:1"}, lambda job: {arg for call in job.srun_calls for arg in call
                                                        if arg.startswith("--container-image=")},
             {"--container-image=registry/bert:1"}),
    "IMAGE_VERSION": ({"IMAGE_VERSION": "24.01"}, lambda job: {arg for call in job.srun_calls for arg in call
                                                                if arg.startswith("--container-image=")},
                      {"--container-image=paddlebert:24.01"}),
    "RERUN_DASK": ({"RERUN_DASK": "true"}, lambda job: (_training("--input-dir")(job),
                                                        _preprocessing("--output-dir")(job)),
                   ("{tmp}/results/1234/parquet", "{tmp}/results/1234/parquet")),
    "USE_JEMALLOC": ({"USE_JEMALLOC": "false"}, lambda job: [arg for call in job.srun_calls for arg in call
                                                              if "LD_PRELOAD=" in arg], []),
    "INIT_CHECKPOINT a file in it": ({"PHASE": "2", "INIT_CHECKPOINT": "{tmp}/init/bert_paddle.pdparams"},
                                     _training("--from-phase1-final-params"), "{tmp}/init"),
    "PHASE": ({"PHASE": "2", "INIT_CHECKPOINT": "{tmp}/init"},
              lambda job: [value(job.pretraining_args, flag) for flag in (
                  "--max-seq-length", "--max-predictions-per-seq", "--learning-rate", "--warmup-proportion",
                  "--num-steps-per-checkpoint", "--max-steps", "--input-dir", "--report-file")] + [
                  "--phase2" in job.pretraining_args, _preprocessing("--max-seq-length")(job)],
              ["512", "80", "4e-3", "0.128", "1000", "1563", "{tmp}/data/pretrain/phase2/unbinned/parquet",
               "{tmp}/results/dllogger_p2.json", True, "512"]),
    "INIT_CHECKPOINT": ({"PHASE": "2", "INIT_CHECKPOINT": "{tmp}/init"}, _training("--from-phase1-final-params"),
                        "{tmp}/init"),
    "TRAIN_BATCH_SIZE": ({"TRAIN_BATCH_SIZE": "8"}, _training("--batch-size"), "8"),
    "GRADIENT_ACCUMULATION_STEPS": ({"GRADIENT_ACCUMULATION_STEPS": "3"}, _training("--gradient-merge-steps"), "3"),
    "GPUS": ({"GPUS": "2"}, _launcher("--nproc_per_node"), ["2", "2"]),
    "PRECISION tf32": ({"PRECISION": "tf32"}, lambda job: ("--amp" in job.pretraining_args,
                                                            job.training[0]["tf32_override"]), (False, None)),
    "PRECISION fp32": ({"PRECISION": "fp32"}, lambda job: ("--amp" in job.pretraining_args,
                                                            job.training[0]["tf32_override"]), (False, "0")),
    "PRECISION bf16": ({"PRECISION": "bf16"}, _training("--amp-dtype"), "bfloat16"),
    "SEED": ({"SEED": "5"}, lambda job: (_training("--seed")(job), _preprocessing("--seed")(job)), ("5", "5")),
    "TRAIN_STEPS": ({"TRAIN_STEPS": "9"}, _training("--max-steps"), "9"),
    "SAVE_CHECKPOINT_STEPS": ({"SAVE_CHECKPOINT_STEPS": "50"}, _training("--num-steps-per-checkpoint"), "50"),
    "STEPS_THIS_RUN": ({"STEPS_THIS_RUN": "300"}, _training("--steps-this-run"), "300"),
    "datadir": ({"datadir": "{tmp}/data2"}, lambda job: (_training("--input-dir")(job), _preprocessing("--input")(job)),
                ("{tmp}/data2/pretrain/phase1/unbinned/parquet", "{tmp}/data2/wikipedia/source")),
    "checkpointdir": ({"checkpointdir": "{tmp}/ckpt"},
                      lambda job: (_training("--output-dir")(job), _training("--report-file")(job)),
                      ("{tmp}/ckpt", "{tmp}/ckpt/dllogger_p1.json")),
    "BIN_SIZE": ({"BIN_SIZE": "64"}, lambda job: (_training("--input-dir")(job), _preprocessing("--bin-size")(job)),
                 ("{tmp}/data/pretrain/phase1/bin_size_64/parquet", "64")),
    "MASKING": ({"MASKING": "dynamic"}, lambda job: ("--masking" in job.preprocessing,
                                                     "--no-masking" in job.preprocessing), (False, True)),
    "SAMPLE_RATIO": ({"SAMPLE_RATIO": "0.5"}, _preprocessing("--sample-ratio"), "0.5"),
    "SAMPLE_RATIO 1": ({"SAMPLE_RATIO": "1"}, _preprocessing("--sample-ratio"), None),
    "DASK_TASKS_PER_NODE": ({"DASK_TASKS_PER_NODE": "3"},
                            lambda job: (_preprocessing("--num-workers")(job),
                                         value(job.step_running("dask", "worker"), "--nworkers")), ("6", "3")),
    "NUM_SHARDS_PER_WORKER": ({"NUM_SHARDS_PER_WORKER": "2"}, _preprocessing("--num-shards"), str(2 * 4 * 2 * 8)),
    "NUM_WORKERS": ({"NUM_WORKERS": "1", "NUM_SHARDS_PER_WORKER": "2"},
                    lambda job: (_training("--num-workers")(job), _preprocessing("--num-shards")(job)),
                    ("1", str(2 * 1 * 2 * 8))),
    "BERT_CONFIG": ({"BERT_CONFIG": TINY_CONFIG}, lambda job: (_training("--bert-model")(job),
                                                               _training("--config-file")(job)),
                    ("custom", TINY_CONFIG)),
    "VOCAB_FILE": ({"VOCAB_FILE": "{tmp}/init/vocab.txt"},
                   lambda job: (_training("--vocab-file")(job), _preprocessing("--vocab-file")(job)),
                   ("{tmp}/init/vocab.txt", "{tmp}/init/vocab.txt")),
    "MASTER_ADDR": ({"MASTER_ADDR": "192.0.2.7"}, lambda job: (_launcher("--master")(job), len(job.address_queries)),
                    (["192.0.2.7:21234", "192.0.2.7:21234"], 0)),
    "MASTER_PORT": ({"MASTER_PORT": "4000"}, _launcher("--master"), ["10.1.2.3:4000", "10.1.2.3:4000"]),
    "SLURM_JOB_NUM_NODES": ({"SLURM_JOB_NUM_NODES": "3"}, lambda job: (_launcher("--nnodes")(job),
                                                                       [call["node"] for call in job.training]),
                            (["3", "3", "3"], ["0", "1", "2"])),
}


def _fill(item, tmp: Path):
    if isinstance(item, str):
        return item.format(tmp=tmp)
    if isinstance(item, (list, tuple, set)):
        return type(item)(_fill(part, tmp) for part in item)
    return item


@pytest.mark.parametrize("case", ENV_CASES)
def test_each_environment_variable_takes_effect(case, tmp_path, baseline_job):
    changes, read, expected = ENV_CASES[case]
    fakes = prepare(tmp_path)
    if "datadir" in changes:
        (tmp_path / "data").rename(tmp_path / "data2")
    if "VOCAB_FILE" in changes:
        (tmp_path / "init" / "vocab.txt").write_text("[PAD]\n")
    job = submit_ok(tmp_path, fakes, **changes)
    assert read(job) == _fill(expected, tmp_path)
    assert read(baseline_job) != _fill(expected, tmp_path)


def test_phase2_starts_from_phase1s_final_checkpoint_by_default(tmp_path):
    fakes = prepare(tmp_path)
    missing = submit(tmp_path, fakes, PHASE="2")
    final = tmp_path / "results" / "bert-large-uncased" / "phase1" / "7038"
    assert missing.result.returncode == 1
    assert missing.result.stderr.strip() == (
        f"run.sub: INIT_CHECKPOINT {final}: no such folder (run phase 1 to its end first)")
    final.mkdir(parents=True)
    job = submit_ok(tmp_path, fakes, PHASE="2")
    assert value(job.pretraining_args, "--from-phase1-final-params") == str(final)
    job = submit_ok(tmp_path, fakes, PHASE="2", INIT_CHECKPOINT="none")  # NVIDIA's spelling of the default
    assert value(job.pretraining_args, "--from-phase1-final-params") == str(final)


def test_cont_none_drops_exactly_the_container_options(tmp_path):
    """Without pyxis (CONT=none) every srun is the pyxis form minus --container-image and --container-mounts, so
    each step runs the `python` on the job's PATH (here the recording one)."""
    pyxis = submit_ok(tmp_path / "pyxis", prepare(tmp_path / "pyxis"), USE_JEMALLOC="false")
    plain = submit_ok(tmp_path / "plain", prepare(tmp_path / "plain"), CONT="none", USE_JEMALLOC="false")

    def normalised(job: Job, tmp: Path) -> list[list[str]]:
        return [[arg.replace(str(tmp), "TMP") for arg in call if not arg.startswith("--container-")]
                for call in job.srun_calls]
    assert all(any(arg.startswith("--container-image=") for arg in call) for call in pyxis.srun_calls)
    assert not [arg for call in plain.srun_calls for arg in call if arg.startswith("--container")]
    assert len(plain.srun_calls) == 5
    # Sorted: the dask workers' step and the preprocessing client's start together, in either order.
    assert sorted(normalised(plain, tmp_path / "plain")) == sorted(normalised(pyxis, tmp_path / "pyxis"))
    assert len(plain.training) == 2  # the launchers ran, as the recording python on PATH


def test_cont_none_with_jemalloc_needs_the_library_on_the_node(tmp_path):
    """The image has libjemalloc2; without a container the preload needs the node's own, or the loader would
    only warn and preprocess without it."""
    fakes = prepare(tmp_path)
    job = submit(tmp_path, fakes, CONT="none")
    jemalloc = Path("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2")
    if jemalloc.exists():
        assert job.result.returncode == 0, job.result.stderr
        assert any(f"--export=ALL,LD_PRELOAD={jemalloc}" in call for call in job.srun_calls)
    else:
        assert job.result.returncode == 1
        assert_one_line(job.result.stderr, "run.sub: ", "USE_JEMALLOC", f"{jemalloc} not found", "libjemalloc2",
                        "USE_JEMALLOC=false")
        assert job.srun_calls == [] and job.python_calls == []


def test_filled_parquet_folder_is_not_preprocessed_again(tmp_path):
    fakes = prepare(tmp_path)
    assert submit_ok(tmp_path, fakes).preprocessing is not None
    job = submit_ok(tmp_path, fakes)
    assert job.preprocessing is None and len(job.training) == 2


@pytest.mark.parametrize("changes, named", [
    ({"PHASE": "3"}, ("PHASE", "1 2", "'3'")),
    ({"MASKING": "random"}, ("MASKING", "static dynamic", "'random'")),
    ({"HOLDOUT_FRACTION": "1"}, ("HOLDOUT_FRACTION", "[0, 1)", "'1'")),
    ({"HOLDOUT_FRACTION": "-0.1"}, ("HOLDOUT_FRACTION", "[0, 1)", "'-0.1'")),
    ({"EVAL_FREQ": "0"}, ("EVAL_FREQ", ">= 1", "'0'")),
    ({"NUM_EVAL_BATCHES": "many"}, ("NUM_EVAL_BATCHES", ">= 1", "'many'")),
    ({"WHOLE_WORD_MASKING": "yes"}, ("WHOLE_WORD_MASKING", "true false", "'yes'")),
    ({"MASKED_LM_RATIO": "1"}, ("MASKED_LM_RATIO", "(0, 1)", "'1'")),
    ({"MASKED_LM_RATIO": "15%"}, ("MASKED_LM_RATIO", "(0, 1)", "'15%'")),
    ({"NO_NSP": "1"}, ("NO_NSP", "true false", "'1'")),
    ({"PACK_SEQUENCES": "on"}, ("PACK_SEQUENCES", "true false", "'on'")),
    ({"BIN_SIZE": "100"}, ("BIN_SIZE 100", "divide", "128")),
    ({"PRECISION": "fp8"}, ("precision", "fp32 tf32 amp fp16 bf16", "'fp8'")),
    ({"SLURM_JOB_NUM_NODES": ""}, ("SLURM_JOB_NUM_NODES", ">= 1", "''")),
    ({"SLURM_JOB_NODELIST": ""}, ("SLURM_JOB_NODELIST", "not set", "sbatch", "MASTER_ADDR")),
])
def test_bad_settings_are_named(changes, named, tmp_path):
    job = submit(tmp_path, prepare(tmp_path), **changes)
    assert job.result.returncode == 1
    assert_one_line(job.result.stderr, "run.sub: ", *named)
    assert job.python_calls == [] and job.srun_calls == []



def test_a_job_without_a_node_list_is_one_line_before_any_work(tmp_path):
    # Run outside sbatch, Slurm's SLURM_JOB_NODELIST is unset: named, not bash's "unbound variable".
    fakes = prepare(tmp_path)
    env = job_env(tmp_path, fakes)
    del env["SLURM_JOB_NODELIST"]
    result = subprocess.run(["bash", str(RUN_SUB)], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert result.returncode == 1
    assert_one_line(result.stderr, "run.sub: ", "SLURM_JOB_NODELIST", "not set", "sbatch", "MASTER_ADDR")
    assert fakes.python_calls() == [] and fakes.srun_calls() == []

# ------------------------------------------------------------------------------------------------------------
# The features beyond NVIDIA's recipe
# ------------------------------------------------------------------------------------------------------------

PARQUET = "TMP/data/pretrain/phase1/unbinned/parquet"
HOLDOUT = f"{PARQUET}_holdout"
# (MASKING, variables set, tokens added to lddl_preprocess.py's command line, to run_pretraining.py's)
FEATURE_CASES = {
    "WHOLE_WORD_MASKING, static: in the shards": (
        "static", {"WHOLE_WORD_MASKING": "true"}, ["--whole-word-masking"], []),
    "WHOLE_WORD_MASKING, dynamic: in the loader": (
        "dynamic", {"WHOLE_WORD_MASKING": "true"}, [], ["--whole-word-masking"]),
    "MASKED_LM_RATIO, static": ("static", {"MASKED_LM_RATIO": "0.3"}, ["--masked-lm-ratio", "0.3"], []),
    "MASKED_LM_RATIO, dynamic": ("dynamic", {"MASKED_LM_RATIO": "0.3"}, [], ["--masked-lm-ratio", "0.3"]),
    "both, static": ("static", {"WHOLE_WORD_MASKING": "true", "MASKED_LM_RATIO": "0.3"},
                     ["--whole-word-masking", "--masked-lm-ratio", "0.3"], []),
    "both, dynamic": ("dynamic", {"WHOLE_WORD_MASKING": "true", "MASKED_LM_RATIO": "0.3"},
                      [], ["--whole-word-masking", "--masked-lm-ratio", "0.3"]),
    "MASKED_LM_RATIO 0.150 is the default": ("static", {"MASKED_LM_RATIO": "0.150"}, [], []),
    "NO_NSP, static: to both": ("static", {"NO_NSP": "true"}, ["--no-nsp"], ["--no-nsp"]),
    "NO_NSP, dynamic: to both": ("dynamic", {"NO_NSP": "true"}, ["--no-nsp"], ["--no-nsp"]),
    "PACK_SEQUENCES: training only": ("static", {"PACK_SEQUENCES": "true"}, [], ["--pack-sequences"]),
    "HOLDOUT_FRACTION, static": (
        "static", {"HOLDOUT_FRACTION": "0.1"}, ["--holdout-fraction", "0.1", "--holdout-dir", HOLDOUT],
        ["--eval-dir", HOLDOUT, "--eval-freq", "1000", "--num-eval-batches", "100"]),
    "HOLDOUT_FRACTION, EVAL_FREQ, NUM_EVAL_BATCHES, dynamic": (
        "dynamic", {"HOLDOUT_FRACTION": "0.1", "EVAL_FREQ": "5", "NUM_EVAL_BATCHES": "7"},
        ["--holdout-fraction", "0.1", "--holdout-dir", HOLDOUT],
        ["--eval-dir", HOLDOUT, "--eval-freq", "5", "--num-eval-batches", "7"]),
    "EVAL_FREQ and NUM_EVAL_BATCHES without HOLDOUT_FRACTION: no validation": (
        "static", {"EVAL_FREQ": "5", "NUM_EVAL_BATCHES": "7"}, [], []),
}


@dataclass
class CommandLines:
    """lddl_preprocess.py's and run_pretraining.py's arguments in one job, its folder written as TMP."""

    preprocessing: list[str]
    training: list[str]


def command_lines(job: Job, tmp: Path) -> CommandLines:
    def normalised(args: list[str]) -> list[str]:
        return [arg.replace(str(tmp), "TMP") for arg in args]
    return CommandLines(normalised(job.preprocessing), normalised(job.pretraining_args))


def added_tokens(args: list[str], base: list[str], expected: list[str]) -> bool:
    """`args` is `base` plus exactly the tokens `expected`, which appear in it together and in their order."""
    if Counter(base) - Counter(args) or Counter(args) - Counter(base) != Counter(expected):
        return False
    if not expected:
        return True
    start = args.index(expected[0])
    return args[start:start + len(expected)] == expected


@pytest.fixture(scope="module")
def feature_baselines(tmp_path_factory) -> dict[str, CommandLines]:
    """The command lines of a job with static and with dynamic masking and every feature variable unset."""
    baselines = {}
    for masking in ("static", "dynamic"):
        tmp = tmp_path_factory.mktemp(f"run_sub_{masking}")
        baselines[masking] = command_lines(submit_ok(tmp, prepare(tmp), MASKING=masking), tmp)
    return baselines


def test_the_feature_defaults_pass_none_of_their_flags(feature_baselines):
    for masking, lines in feature_baselines.items():
        assert not set(FEATURE_FLAGS) & set(lines.preprocessing + lines.training), masking
        assert ("--masking" in lines.preprocessing, "--no-masking" in lines.preprocessing) == (
            (True, False) if masking == "static" else (False, True))


def with_cap(args: list[str], cap: str) -> list[str]:
    """The command line with the value of its --max-predictions-per-seq, if it has one, replaced by `cap`."""
    args = list(args)
    if "--max-predictions-per-seq" in args:
        args[args.index("--max-predictions-per-seq") + 1] = cap
    return args


@pytest.mark.parametrize("case", FEATURE_CASES)
def test_each_feature_variable_adds_exactly_its_flags(case, tmp_path, feature_baselines):
    masking, changes, preprocessing_added, training_added = FEATURE_CASES[case]
    lines = command_lines(submit_ok(tmp_path, prepare(tmp_path), MASKING=masking, **changes), tmp_path)
    base = feature_baselines[masking]
    # A ratio above 0.15 masks up to ceil(0.3 x 128) = 39 tokens of phase 1's sequences, where NVIDIA's cap is 20;
    # the cap is passed wherever the masks are drawn or trained on: training, and static preprocessing. The rest of
    # each command line is compared with the baseline's at NVIDIA's cap.
    cap = "39" if changes.get("MASKED_LM_RATIO") == "0.3" else "20"
    training_cap = lines.training[lines.training.index("--max-predictions-per-seq") + 1]
    preprocessing_caps = [lines.preprocessing[i + 1] for i, arg in enumerate(lines.preprocessing)
                          if arg == "--max-predictions-per-seq"]
    assert (training_cap, preprocessing_caps) == (cap, [cap] if masking == "static" else [])
    lines = CommandLines(with_cap(lines.preprocessing, "20"), with_cap(lines.training, "20"))
    assert added_tokens(lines.preprocessing, base.preprocessing, preprocessing_added), lines.preprocessing
    assert added_tokens(lines.training, base.training, training_added), lines.training

    # The scripts' own parsers take every flag and read the values the variables ask for.
    preprocessing = lddl_preprocess.build_parser().parse_args(lines.preprocessing)
    training = run_pretraining.build_parser().parse_args(lines.training)
    no_nsp = changes.get("NO_NSP") == "true"
    assert (preprocessing.nsp, training.no_nsp, training.pack_sequences) == (
        not no_nsp, no_nsp, changes.get("PACK_SEQUENCES") == "true")
    masks_drawn_by = preprocessing if masking == "static" else training
    assert (masks_drawn_by.whole_word_masking, masks_drawn_by.masked_lm_ratio or 0.15) == (
        changes.get("WHOLE_WORD_MASKING") == "true", float(changes.get("MASKED_LM_RATIO", "0.15")))


def dask_marks(tmp: Path) -> Path:
    marks = tmp / "dask-marks"
    marks.mkdir()
    return marks


def test_preprocessing_runs_on_a_dask_cluster_over_every_node(tmp_path):
    """NVIDIA's LDDL job runs on every node x DASK_TASKS_PER_NODE: a scheduler on one node, one worker step per node
    of DASK_TASKS_PER_NODE single-threaded processes, lddl_preprocess.py as the client at the scheduler's address,
    all sharing the nodes (--overlap); the cluster is stopped before training, its scheduler file removed."""
    fakes = prepare(tmp_path)
    marks = dask_marks(tmp_path)
    job = submit_ok(tmp_path, fakes, SLURM_JOB_NUM_NODES="3", DASK_TASKS_PER_NODE="5", FAKE_DASK_MARKS=str(marks))
    scheduler_file = f"{tmp_path}/results/1234/dask-scheduler.json"
    scheduler = job.step_running("dask", "scheduler")
    assert {"--overlap", "--nodes=1", "--ntasks=1"} <= set(scheduler)
    assert value(scheduler, "--scheduler-file") == scheduler_file and value(scheduler, "--port") == "0"
    workers = job.step_running("dask", "worker")
    assert "--overlap" in workers and "--ntasks-per-node=1" in workers and "--nodes=1" not in workers
    assert (value(workers, "--scheduler-file"), value(workers, "--nworkers"), value(workers, "--nthreads")) == (
        scheduler_file, "5", "1")
    client = job.step_running("lddl_preprocess.py")
    assert {"--overlap", "--nodes=1", "--ntasks=1"} <= set(client)
    assert (value(job.preprocessing, "--scheduler-address"), value(job.preprocessing, "--num-workers")) == (
        "tcp://10.1.2.3:8786", str(5 * 3))
    # The scheduler first (the others need its address); every node's worker and the scheduler got the TERM that
    # stops them.
    assert job.srun_calls.index(scheduler) == 0 and {job.srun_calls.index(step) for step in (workers, client)} == {1, 2}
    assert sorted(path.name for path in marks.glob("stopped-*")) == [
        "stopped-scheduler-node0", "stopped-worker-node0", "stopped-worker-node1", "stopped-worker-node2"]
    assert not Path(scheduler_file).exists() and len(job.training) == 3


def test_filled_parquet_folder_starts_no_dask_cluster(tmp_path):
    fakes = prepare(tmp_path)
    submit_ok(tmp_path, fakes)
    job = submit_ok(tmp_path, fakes)
    assert not [call for call in job.srun_calls if "dask" in call] and len(job.srun_calls) == 2


@pytest.mark.parametrize("failure, message", [
    ({"FAKE_PREPROCESS_EXIT": "3"}, "preprocessing {parquet} failed (exit status 3)"),
    ({"FAKE_DASK_WORKER_EXIT": "1", "FAKE_PREPROCESS_UNTIL_KILLED": "1"},
     "the dask cluster stopped before preprocessing ended (logs: {tmp}/results/1234/log/dask/)"),
])
def test_a_failed_preprocessing_stops_the_cluster_and_the_job(failure, message, tmp_path):
    """The client fails, or a worker step ends while the client waits (which would wait forever): one line, the
    dask steps and the client stopped, no training."""
    fakes = prepare(tmp_path)
    marks = dask_marks(tmp_path)
    began = time.monotonic()
    job = submit(tmp_path, fakes, FAKE_DASK_MARKS=str(marks), **failure)
    parquet = tmp_path / "data" / "pretrain" / "phase1" / "unbinned" / "parquet"
    assert job.result.returncode == 1
    assert job.result.stderr.strip().splitlines()[-1] == "run.sub: " + message.format(parquet=parquet, tmp=tmp_path)
    assert time.monotonic() - began < 30 and job.training == []
    assert "stopped-scheduler-node0" in {path.name for path in marks.iterdir()}
    assert not (tmp_path / "results" / "1234" / "dask-scheduler.json").exists()


def wait_while_running(batch: subprocess.Popen, condition: Callable[[], bool], what: str) -> None:
    """Wait (at most 60 s) for condition while run.sub runs; fail with its output if it ends first."""
    def holds() -> bool:
        if batch.poll() is not None:
            stdout, stderr = batch.communicate()
            raise AssertionError(f"run.sub ended (status {batch.returncode}) before {what}:\n{stdout}{stderr}")
        return condition()

    wait_for(holds, 60, what)


def test_a_signal_during_preprocessing_stops_the_cluster(tmp_path):
    fakes = prepare(tmp_path)
    marks = dask_marks(tmp_path)
    batch = subprocess.Popen(["bash", str(RUN_SUB)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             cwd=tmp_path, env=job_env(tmp_path, fakes, FAKE_DASK_MARKS=str(marks),
                                                       FAKE_PREPROCESS_UNTIL_KILLED="1"))
    # The client running (until it is stopped) and every dask step up with its TERM trap set.
    started = {"started-client", "started-scheduler-node0", "started-worker-node0", "started-worker-node1"}
    wait_while_running(batch, lambda: {path.name for path in marks.iterdir()} >= started, "the cluster and client")
    signal_while_running(batch, signal.SIGTERM, "preprocessing")
    stdout, stderr = batch.communicate(timeout=30)
    assert batch.returncode == 143, stdout + stderr
    assert sorted(path.name for path in marks.glob("stopped-*")) == [
        "stopped-scheduler-node0", "stopped-worker-node0", "stopped-worker-node1"]
    assert not (tmp_path / "data" / "pretrain" / "phase1" / "unbinned" / "parquet").exists()


@pytest.mark.parametrize("phase, cap", [("1", "39"), ("2", "154")])
def test_static_masks_are_capped_at_the_phases_max_predictions_per_seq(phase, cap, tmp_path):
    """At MASKED_LM_RATIO 0.3 a phase reads up to ceil(0.3 x its length) masks, 39 of 128 and 154 of 512 (NVIDIA's
    20 and 80 would hold the ratio to 16%), and static masks are drawn with the cap training reads (Google's rule;
    scripts/run_pretraining.sh passes it too); dynamic masks are the loader's."""
    fakes = prepare(tmp_path)
    static = submit_ok(tmp_path, fakes, PHASE=phase, INIT_CHECKPOINT="{tmp}/init", MASKED_LM_RATIO="0.3")
    assert value(static.preprocessing, "--max-predictions-per-seq") == cap
    assert value(static.pretraining_args, "--max-predictions-per-seq") == cap
    assert lddl_preprocess.build_parser().parse_args(static.preprocessing).max_predictions_per_seq == int(cap)
    dynamic = submit_ok(tmp_path / "dynamic", prepare(tmp_path / "dynamic"), PHASE=phase,
                        INIT_CHECKPOINT="{tmp}/init", MASKING="dynamic")
    assert "--max-predictions-per-seq" not in dynamic.preprocessing


def test_holdout_fraction_refuses_a_parquet_folder_made_without_a_held_out_split(tmp_path):
    fakes = prepare(tmp_path)
    submit_ok(tmp_path, fakes)
    job = submit(tmp_path, fakes, HOLDOUT_FRACTION="0.1")
    parquet = tmp_path / "data" / "pretrain" / "phase1" / "unbinned" / "parquet"
    assert job.result.returncode == 1
    assert job.result.stderr.strip() == (f"run.sub: HOLDOUT_FRACTION 0.1: {parquet} was made without a held-out "
                                         f"split ({parquet}_holdout is missing); remove {parquet} to preprocess it "
                                         "again")
    assert job.python_calls == [] and job.srun_calls == []


def test_usr1_before_the_time_limit_becomes_a_stop_request_that_the_job_waits_for(tmp_path):
    """Slurm's `--signal=B:USR1@...` reaches the batch shell only: it must create the stop file that the trainers
    poll, keep waiting for srun while they checkpoint, and end with srun's status."""
    assert "#SBATCH --signal=B:USR1@" in RUN_SUB.read_text()
    fakes = prepare(tmp_path)
    marks = tmp_path / "marks"
    marks.mkdir()
    fakes.python_log.unlink(missing_ok=True)
    env = job_env(tmp_path, fakes, FAKE_TRAIN_UNTIL_STOP_FILE=str(marks))
    batch = subprocess.Popen(["bash", str(RUN_SUB)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             cwd=tmp_path, env=env)
    wait_while_running(batch, lambda: {path.name for path in marks.iterdir()} >= {"started-node0", "started-node1"},
                       'both "nodes" training')
    stop_file = tmp_path / "results" / "1234" / "stop-request"
    assert not stop_file.exists()
    signal_while_running(batch, signal.SIGUSR1, "training, which lasts until the stop file appears")
    stdout, stderr = batch.communicate(timeout=120)
    assert batch.returncode == 0, stdout + stderr
    assert stop_file.exists()
    # The trainers exited only after they had seen the file, and the batch shell only after them.
    assert {path.name for path in marks.iterdir()} == {"started-node0", "started-node1", "finished-node0",
                                                        "finished-node1"}
    assert "asking the trainers to checkpoint and stop" in stdout


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def one_process_shards(preprocessing: list[str], output_dir: Path) -> Path:
    """The same lddl_preprocess.py command line in this process, without the dask cluster: one worker, no
    --scheduler-address, into output_dir."""
    args = list(preprocessing)
    del args[args.index("--scheduler-address"):args.index("--scheduler-address") + 2]
    args[args.index("--output-dir") + 1] = str(output_dir)
    args[args.index("--num-workers") + 1] = "1"
    lddl_preprocess.main([*args, "--quiet"])
    return output_dir


def assert_same_files(folder: Path, expected: Path) -> None:
    names = sorted(path.name for path in expected.iterdir())
    assert sorted(path.name for path in folder.iterdir()) == names and len(names) > 1
    for name in names:
        assert (folder / name).read_bytes() == (expected / name).read_bytes(), name


def test_the_fake_srun_records_concurrent_calls_whole(tmp_path):
    """run.sub starts steps at once (a dask scheduler beside its client); each fake srun call's record must stay
    whole, or step_running reads words of one step in another (bash's printf writes line by line)."""
    fakes = make_fakes(tmp_path / "fakes")
    calls = [[f"--job-name=step{index}", *(f"--word-{index}-{word}" for word in range(3000)), "true"]
             for index in range(16)]
    env = fakes.env(SLURM_JOB_NUM_NODES="1")
    for process in [subprocess.Popen([str(fakes.bin_dir / "srun"), *call], env=env) for call in calls]:
        assert process.wait(timeout=60) == 0
    assert sorted(fakes.srun_calls()) == sorted(calls)


def test_two_nodes_train_one_model(tmp_path):
    """Two launchers (--nnodes 2) on loopback, one process each: preprocessing, then two ranks, one checkpoint."""
    write_corpus(tmp_path / "data" / "wikipedia" / "source")
    train_vocab([str(tmp_path / "data" / "wikipedia" / "source" / "en" / "pydoc_topics.txt")], 2048,
                str(tmp_path / "vocab.txt"))
    fakes = make_fakes(tmp_path / "fakes", recording_python=False)
    job = submit(tmp_path, fakes, GPUS="1", PRECISION="fp32", TRAIN_BATCH_SIZE="4", GRADIENT_ACCUMULATION_STEPS="1",
                 TRAIN_STEPS="2", NUM_WORKERS="0", DASK_TASKS_PER_NODE="1", NUM_SHARDS_PER_WORKER="1",
                 SAMPLE_RATIO="1", BERT_CONFIG=TINY_CONFIG, MASTER_PORT=str(_free_port()))
    assert job.result.returncode == 0, job.result.stdout[-3000:] + job.result.stderr[-3000:]

    parquet = tmp_path / "data" / "pretrain" / "phase1" / "unbinned" / "parquet"
    assert len(list(parquet.glob("*.parquet"))) == 1 * 1 * 2 * 1  # shards per worker x workers x nodes x GPUs
    # Made by the dask workers of both "nodes", byte for byte what one process makes.
    client = job.step_running("lddl_preprocess.py")
    preprocessing = client[[Path(word).name for word in client].index("lddl_preprocess.py") + 1:]
    assert_same_files(parquet, one_process_shards(preprocessing, tmp_path / "one-process"))
    logs = {node: (tmp_path / "results" / "1234" / "log" / f"node{node}" / "workerlog.0").read_text()
            for node in (0, 1)}
    ranks = sorted(line.split(":")[0] for text in logs.values() for line in text.splitlines()
                   if line.startswith("Rank "))
    assert ranks == ["Rank 0 of 2", "Rank 1 of 2"]
    phase = tmp_path / "results" / "custom" / "phase1"
    assert [path.name for path in phase.iterdir()] == ["2"]
    assert sorted(path.name for path in (tmp_path / "results" / "1234").iterdir()) == ["log"]
    progress = json.loads(next((phase / "2").glob("*progress.json")).read_text())
    assert progress["world_size"] == 2 and len(progress["data_positions"]) == 2
    assert all("--container-image=paddlebert:latest" in call for call in job.srun_calls)
    assert Path(tmp_path / "results" / "dllogger_p1.json").is_file()
