"""Test doubles for the recipe scripts: a `python` that records its command line instead of training, and Slurm's
`srun` and `scontrol`, put first on PATH. The recording python leaves behind what the real tools would (the
output folder of lddl_preprocess.py, phase 1's final checkpoint folder, ...), so a script carries on to its
next command; which files the real tools write is tested with the real tools elsewhere."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from conftest import ROOT

FAKE_PYTHON = f"""#!{sys.executable}
import json, os, sys, threading, time
from pathlib import Path

argv = sys.argv[1:]
with open(os.environ["FAKE_PYTHON_LOG"], "a") as log:
    log.write(json.dumps({{"argv": argv, "tf32_override": os.environ.get("NVIDIA_TF32_OVERRIDE"),
                          "node": os.environ.get("SLURM_NODEID"),
                          "stop_file": os.environ.get("PADDLEBERT_STOP_FILE")}}) + "\\n")

def value(flag):
    return argv[len(argv) - 1 - argv[::-1].index(flag) + 1] if flag in argv else None

script = next((Path(arg).name for arg in argv if arg.endswith(".py")), "")
if argv[:1] == ["-c"]:
    print("10.1.2.3")
elif argv[:2] == ["-m", "paddle.distributed.launch"] and os.environ.get("FAKE_TRAIN_UNTIL_STOP_FILE"):
    # A trainer that runs until the stop file appears, then takes a while to "checkpoint" before it exits.
    marks = Path(os.environ["FAKE_TRAIN_UNTIL_STOP_FILE"])
    (marks / f"started-node{{os.environ['SLURM_NODEID']}}").write_text("")
    stop_file = Path(os.environ["PADDLEBERT_STOP_FILE"])
    for _ in range(600):
        if stop_file.exists():
            break
        time.sleep(0.1)
    else:
        sys.exit("fake python: no stop file after 60 s")
    time.sleep(1)
    (marks / f"finished-node{{os.environ['SLURM_NODEID']}}").write_text("")
elif script == "run_pretraining.py" and "--benchmark" not in argv and not os.environ.get("FAKE_NO_CHECKPOINT"):
    phase = "phase1" if "--phase1" in argv else "phase2"
    Path(value("--output-dir"), value("--bert-model"), phase, value("--max-steps")).mkdir(parents=True, exist_ok=True)
elif script == "lddl_preprocess.py":
    if os.environ.get("FAKE_DASK_MARKS") and "--scheduler-address" in argv:
        # The client is up (its srun passes on a TERM from now on): what FAKE_DASK_WORKER_EXIT's worker waits for.
        (Path(os.environ["FAKE_DASK_MARKS"]) / "started-client").write_text("")
        # As a real client waits for the cluster's workers: until every node's fake worker is up (at most 30 s), so
        # that stopping the cluster afterwards finds each worker step started, however loaded the machine is.
        nodes = int(os.environ.get("SLURM_JOB_NUM_NODES", "1"))
        for _ in range(300):
            if len(list(Path(os.environ["FAKE_DASK_MARKS"]).glob("started-worker-node*"))) >= nodes:
                break
            time.sleep(0.1)
    if os.environ.get("FAKE_PREPROCESS_UNTIL_KILLED"):
        # Preprocessing that lasts until run.sub stops it, so that a test's signal surely finds it running (at
        # most 10 minutes, so that a client run.sub failed to stop does not outlive the test run by much).
        threading.Event().wait(600)
        sys.exit("fake python: lddl_preprocess.py was not stopped within 600 s")
    if os.environ.get("FAKE_PREPROCESS_EXIT"):
        sys.exit(int(os.environ["FAKE_PREPROCESS_EXIT"]))
    Path(value("--output-dir")).mkdir(parents=True)
    (Path(value("--output-dir")) / "shard-0.parquet").write_text("")
    if "--holdout-dir" in argv:
        Path(value("--holdout-dir")).mkdir(parents=True)
        (Path(value("--holdout-dir")) / "shard-0.parquet").write_text("")
elif script == "make_sample_corpus.py":
    (Path(value("--output-dir")) / "en").mkdir(parents=True)
    (Path(value("--output-dir")) / "en" / "pydoc_topics.txt").write_text("doc-1 text\\n")
elif script == "tokenizer.py":
    Path(value("--output")).write_text("[PAD]\\n")
"""

FAKE_SRUN = """#!/usr/bin/env bash
# srun: start the command once per node (--nodes=N, else SLURM_JOB_NUM_NODES) as local processes.
# Under a lock: run.sub starts steps at once, and bash's printf writes line by line.
{ flock 9; printf '%s\\n' "$@" --- >&9; } 9>> "$FAKE_SRUN_LOG"
# --export=ALL,NAME=value,...: the tasks get those variables on top of this environment.
nodes=$SLURM_JOB_NUM_NODES
exports=()
while (( $# > 0 )) && [[ $1 == -* ]]; do
  case $1 in
    --nodes=*) nodes=${1#--nodes=} ;;
    --export=ALL,*) IFS=, read -ra exports <<< "${1#--export=ALL,}" ;;
  esac
  shift
done
pids=()
# As srun, pass TERM and INT on to the tasks (a trap interrupts `wait`, which the loop below then resumes); as
# srun ending its step, KILL the tasks that are still there a few seconds after a TERM (Slurm's KillWait).
trap 'kill -TERM "${pids[@]}" 2>/dev/null; (sleep 5; kill -KILL "${pids[@]}") >/dev/null 2>&1 &' TERM
trap 'kill -INT "${pids[@]}" 2>/dev/null' INT
for ((node = 0; node < nodes; node++)); do
  SLURM_NODEID=$node SLURM_PROCID=$node env "${exports[@]}" "$@" &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do
  while kill -0 "$pid" 2>/dev/null; do wait "$pid" || true; done
  wait "$pid" || status=$?  # bash keeps a reaped background job's status
done
exit $status
"""

FAKE_DASK = """#!/usr/bin/env bash
# dask scheduler | worker: the scheduler writes an address into its --scheduler-file; both run until TERM, and
# then, if FAKE_DASK_MARKS names a folder, leave stopped-<scheduler|worker>-node<N> in it (and started-... once
# the TERM trap is set).
role=$1
# A worker step that fails once the client runs (the fake client's started-client mark in FAKE_DASK_MARKS; at
# most 60 s), so that it ends while run.sub waits for the client.
if [[ $role == worker && -n "${FAKE_DASK_WORKER_EXIT:-}" ]]; then
  for ((waited = 0; waited < 600; waited++)); do
    [[ -e "$FAKE_DASK_MARKS/started-client" ]] && break
    sleep 0.1
  done
  exit "$FAKE_DASK_WORKER_EXIT"
fi
# The trap before the scheduler file: run.sub may stop the cluster as soon as it has read the address.
trap '[[ -n "${FAKE_DASK_MARKS:-}" ]] && : > "$FAKE_DASK_MARKS/stopped-$role-node$SLURM_NODEID"; exit 0' TERM
if [[ $role == scheduler ]]; then
  while (( $# > 0 )); do
    [[ $1 == --scheduler-file ]] && printf '{"type": "Scheduler", "address": "tcp://10.1.2.3:8786"}\\n' > "$2"
    shift
  done
fi
[[ -z "${FAKE_DASK_MARKS:-}" ]] || : > "$FAKE_DASK_MARKS/started-$role-node$SLURM_NODEID"
while :; do sleep 0.1; done
"""

FAKE_SCONTROL = """#!/usr/bin/env bash
# scontrol show hostnames: node1 .. node<SLURM_JOB_NUM_NODES>.
[[ "$1 $2" == "show hostnames" ]] || { echo "fake scontrol: $* is not supported" >&2; exit 2; }
for ((node = 1; node <= SLURM_JOB_NUM_NODES; node++)); do echo "node$node"; done
"""

# nvidia-smi -L of an 8-GPU node (the DGX the NVIDIA defaults are made for), in the driver's line format.
FAKE_NVIDIA_SMI = """#!/usr/bin/env bash
[[ "$1" == "-L" ]] || { echo "fake nvidia-smi: $* is not supported" >&2; exit 2; }
for ((gpu = 0; gpu < 8; gpu++)); do echo "GPU $gpu: NVIDIA A100-SXM4-80GB (UUID: GPU-0000000$gpu)"; done
"""


def write_executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@dataclass
class Fakes:
    """The folder of fake tools and the logs they write."""

    bin_dir: Path
    python_log: Path
    srun_log: Path

    def env(self, **extra: str) -> dict[str, str]:
        return {**os.environ, "PATH": f"{self.bin_dir}:{os.environ['PATH']}", "FAKE_PYTHON_LOG": str(self.python_log),
                "FAKE_SRUN_LOG": str(self.srun_log), **extra}

    def python_calls(self) -> list[dict]:
        if not self.python_log.exists():
            return []
        return [json.loads(line) for line in self.python_log.read_text().splitlines()]

    def srun_calls(self) -> list[list[str]]:
        """The arguments of every srun call."""
        if not self.srun_log.exists():
            return []
        return [call.strip("\n").split("\n") for call in self.srun_log.read_text().split("---\n") if call.strip()]


def make_fakes(folder: Path, recording_python: bool = True) -> Fakes:
    """Fake srun, scontrol and nvidia-smi (8 GPUs) in folder/bin, and the recording python and a stand-in dask
    (scheduler and workers that do nothing) unless recording_python is False."""
    bin_dir = folder / "bin"
    bin_dir.mkdir(parents=True)
    if recording_python:
        write_executable(bin_dir / "python", FAKE_PYTHON)
        write_executable(bin_dir / "dask", FAKE_DASK)
    write_executable(bin_dir / "srun", FAKE_SRUN)
    write_executable(bin_dir / "scontrol", FAKE_SCONTROL)
    write_executable(bin_dir / "nvidia-smi", FAKE_NVIDIA_SMI)
    return Fakes(bin_dir, folder / "python.log", folder / "srun.log")


def script_args(calls: list[dict], script: str) -> list[list[str]]:
    """The arguments after `script` (a file name such as run_pretraining.py) of every call that ran it."""
    found = []
    for call in calls:
        names = [Path(arg).name for arg in call["argv"]]
        if script in names:
            found.append(call["argv"][names.index(script) + 1:])
    return found


def launcher_args(call: dict) -> list[str]:
    """The paddle.distributed.launch options of a call: between `-m paddle.distributed.launch` and the script."""
    argv = call["argv"]
    assert argv[:2] == ["-m", "paddle.distributed.launch"], argv
    end = next(index for index, arg in enumerate(argv) if arg.endswith(".py"))
    return argv[2:end]


def value(args: list[str], flag: str) -> str | None:
    """The value of the flag's last occurrence (argparse keeps the last one), None if absent."""
    positions = [index for index, arg in enumerate(args) if arg == flag]
    return args[positions[-1] + 1] if positions else None


def preset(config: str, name: str, env: dict[str, str]) -> list[str]:
    """The positional arguments a preset of scripts/configs/<config> prints."""
    command = f'source scripts/configs/{config} && {name}'
    output = subprocess.run(["bash", "-c", command], capture_output=True, text=True, check=True, cwd=ROOT, env=env)
    return output.stdout.split()


def preset_names(config: str) -> list[str]:
    """The presets of scripts/configs/<config>: its functions whose name does not start with an underscore."""
    command = f"source scripts/configs/{config} && declare -F"
    output = subprocess.run(["bash", "-c", command], capture_output=True, text=True, check=True, cwd=ROOT)
    names = [line.split()[-1] for line in output.stdout.splitlines()]
    return [name for name in names if not name.startswith("_")]
