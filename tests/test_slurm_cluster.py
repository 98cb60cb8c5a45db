"""run.sub on a real one-node Slurm cluster without pyxis (CONT=none), as scripts/slurm/local_cluster.sh starts
it (.ci/run does, with SLURM_CONF exported).

What the fake srun of test_run_sub.py cannot show: sbatch reading run.sub's #SBATCH lines and its own options,
srun starting the tasks on the node, `scontrol show hostnames`, and Slurm's time-limit warning reaching the batch
shell. The trainers are bert-tiny on the LDDL sample shards, which are already preprocessed, so each job goes
straight to training, except in the test of the preprocessing, which runs the dask cluster of run.sub on the
node for real. Outside CI, without sbatch or a cluster that answers, the tests skip; with CI=true they
fail.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import ROOT, require_shared, unavailable
from test_run_sub import RUN_SUB_VARIABLES, assert_same_files, one_process_shards

TINY_CONFIG = str(ROOT / "bert_configs" / "bert-tiny-uncased.json")
START_CLUSTER = 'export SLURM_CONF="$(scripts/slurm/local_cluster.sh start)"'


@pytest.fixture(scope="module")
def cluster() -> None:
    """A Slurm controller that answers, with a node that takes jobs."""
    if shutil.which("sbatch") is None:
        unavailable(f"sbatch not found: install Debian's slurm-wlm and munge, then {START_CLUSTER}")
    nodes = subprocess.run(["sinfo", "--noheader", "--format=%t"], capture_output=True, text=True)
    if nodes.returncode != 0 or not {"idle", "mix", "alloc"} & set(nodes.stdout.split()):
        said = (nodes.stderr.strip() or nodes.stdout.strip()).splitlines()
        unavailable(f"no Slurm node takes jobs ({said[-1] if said else 'sinfo lists none'}): {START_CLUSTER}")


@dataclass
class Job:
    """A finished batch job: sbatch's exit status, the job's id, state, run time and output file."""

    returncode: int
    job_id: str
    state: str
    run_seconds: int
    output: str


def job_record(job_id: str) -> dict[str, str]:
    shown = subprocess.run(["scontrol", "--oneliner", "show", "job", job_id], capture_output=True, text=True)
    assert shown.returncode == 0, f"scontrol show job {job_id}: {shown.stderr}"
    return dict(field.split("=", 1) for field in shown.stdout.split() if "=" in field)


def seconds(duration: str) -> int:
    """Slurm's [days-]hours:minutes:seconds as seconds."""
    days, _, clock = duration.rpartition("-")
    hours, minutes, secs = (int(part) for part in clock.split(":"))
    return ((int(days or 0) * 24 + hours) * 60 + minutes) * 60 + secs


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def prepare(tmp: Path) -> None:
    """The phase-1 parquet folder run.sub looks for: the LDDL sample shards, so that nothing is preprocessed."""
    parquet = tmp / "data" / "pretrain" / "phase1" / "unbinned" / "parquet"
    parquet.parent.mkdir(parents=True)
    parquet.symlink_to(require_shared("data", "lddl-sample", "wikitext2-test-seq128-unbinned"))


def sbatch(tmp: Path, *options: str, **variables: str) -> Job:
    """`sbatch -N1 --wait <options> run.sub` from the repository root, with run.sub's variables for bert-tiny on
    one CPU process, then the job's record."""
    env = {name: text for name, text in os.environ.items() if name not in RUN_SUB_VARIABLES}
    env.update(
        # The job's `python` is this test's: Slurm passes the submitting environment on.
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        CONT="none", GPUS="1", PRECISION="fp32", TRAIN_BATCH_SIZE="4", GRADIENT_ACCUMULATION_STEPS="1",
        NUM_WORKERS="0", BERT_CONFIG=TINY_CONFIG, VOCAB_FILE=str(require_shared("vocab", "bert-uncased-vocab.txt")),
        datadir=str(tmp / "data"), checkpointdir=str(tmp / "results"), MASTER_PORT=str(free_port()), **variables)
    submitted = subprocess.run(["sbatch", "-N1", "--wait", f"--output={tmp}/slurm-%j.out", *options, "run.sub"],
                               capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    # --parsable (run.sub's #SBATCH line): the first line is the job id alone.
    job_id = submitted.stdout.split("\n", 1)[0].strip()
    assert job_id.isdigit(), submitted.stdout + submitted.stderr
    record = job_record(job_id)
    output = Path(tmp / f"slurm-{job_id}.out")
    return Job(submitted.returncode, job_id, record["JobState"], seconds(record["RunTime"]),
               output.read_text() if output.exists() else "")


def step_folders(tmp: Path) -> list[int]:
    return sorted(int(path.name) for path in (tmp / "results" / "custom" / "phase1").iterdir())


def trainer_log(tmp: Path, job: Job) -> str:
    return (tmp / "results" / job.job_id / "log" / "node0" / "workerlog.0").read_text()


def test_sbatch_trains_without_a_container(cluster, tmp_path):
    prepare(tmp_path)
    job = sbatch(tmp_path, TRAIN_STEPS="4", SAVE_CHECKPOINT_STEPS="2")
    assert (job.returncode, job.state) == (0, "COMPLETED"), job.output[-3000:]
    assert step_folders(tmp_path) == [2, 4]
    # No srun got a container option, and the launcher's rendezvous is the address of the node that
    # `scontrol show hostnames` lists first, this machine.
    commands = [line for line in job.output.splitlines() if line.startswith("+ srun ")]
    assert len(commands) == 1 and "--container" not in job.output
    address = socket.gethostbyname(socket.getfqdn(socket.gethostname()))
    assert re.search(rf"--master {re.escape(address)}:\d+ ", commands[0]), commands[0]
    # The launcher's logs are in the job's own folder, with the one rank's training.
    log = trainer_log(tmp_path, job)
    assert "Training phase 1 from step 1 to 4 on 1 rank(s)" in log
    assert sorted(path.name for path in (tmp_path / "results" / job.job_id).iterdir()) == ["log"]
    # The launcher's own output (its configuration dump) is kept in the node's launcherlog, not in the job's output.
    launcher_log = (tmp_path / "results" / job.job_id / "log" / "node0" / "launcherlog").read_text()
    assert "LAUNCH INFO" in launcher_log and "LAUNCH INFO" not in job.output


def test_a_real_time_limit_stops_at_a_checkpoint_and_the_resubmission_continues(cluster, tmp_path):
    """--time=1 --signal=B:USR1@45 (on sbatch's command line, over run.sub's own @300): Slurm warns the batch
    shell 45 s before the limit (its timer checks every 30 s, so maybe earlier); the trainers save at the next
    step boundary and the job ends well before Slurm would kill it. bert-tiny at batch 4 takes 0.1-0.5 s a step
    on two CPU cores, so 100000 steps would take hours."""
    prepare(tmp_path)
    job = sbatch(tmp_path, "--time=1", "--signal=B:USR1@45", TRAIN_STEPS="100000", SAVE_CHECKPOINT_STEPS="100000")
    assert (job.returncode, job.state) == (0, "COMPLETED"), job.output[-3000:]
    assert job.run_seconds < 60
    assert "USR1 (time limit near): asking the trainers to checkpoint and stop" in job.output
    (stopped_at,) = step_folders(tmp_path)
    assert 0 < stopped_at < 100000
    stop_file = tmp_path / "results" / job.job_id / "stop-request"
    assert f"stop file {stop_file}: stopped after step {stopped_at} (checkpoint in " in trainer_log(tmp_path, job)

    # The same command without the time limit, three steps this time.
    again = sbatch(tmp_path, TRAIN_STEPS="100000", SAVE_CHECKPOINT_STEPS="100000", STEPS_THIS_RUN="3")
    assert (again.returncode, again.state) == (0, "COMPLETED"), again.output[-3000:]
    assert step_folders(tmp_path) == [stopped_at, stopped_at + 3]
    assert (f"Training phase 1 from step {stopped_at + 1} to {stopped_at + 3} on 1 rank(s)"
            in trainer_log(tmp_path, again))


@pytest.mark.slow
def test_sbatch_preprocesses_on_a_dask_cluster_and_makes_the_one_process_shards(cluster, tmp_path):
    """An empty parquet folder: run.sub starts `dask scheduler` and a `dask worker` step of DASK_TASKS_PER_NODE
    processes through the real srun, lddl_preprocess.py --scheduler-address fills the folder, the cluster stops,
    and one step trains. The shards are byte for byte those of one process with the same seed and flags."""
    source = tmp_path / "data" / "wikipedia" / "source"  # without en/, which would mean LDDL's .txt files
    source.mkdir(parents=True)
    # The first ~100 KB of WikiText-2's test split, cut at an article's title line.
    text = require_shared("data", "wikitext-2", "wiki.test.raw").read_text(encoding="utf-8")
    (source / "wiki.test.raw").write_text(text[:text.index("\n = ", 100_000) + 1], encoding="utf-8")
    job = sbatch(tmp_path, TRAIN_STEPS="1", SAVE_CHECKPOINT_STEPS="1", USE_JEMALLOC="false",
                 DASK_TASKS_PER_NODE="2", NUM_SHARDS_PER_WORKER="2")
    assert (job.returncode, job.state) == (0, "COMPLETED"), job.output[-3000:]
    assert "dask scheduler at tcp://" in job.output
    (client,) = [shlex.split(line[2:]) for line in job.output.splitlines()
                 if line.startswith("+ srun ") and "lddl_preprocess.py" in line]
    preprocessing = client[[Path(word).name for word in client].index("lddl_preprocess.py") + 1:]
    parquet = tmp_path / "data" / "pretrain" / "phase1" / "unbinned" / "parquet"
    assert_same_files(parquet, one_process_shards(preprocessing, tmp_path / "one-process"))
    # The node's worker step ran both worker processes; srun ended both steps (it cancels a step on TERM).
    logs = tmp_path / "results" / job.job_id / "log" / "dask"
    workers = (logs / "worker-node0.log").read_text()
    assert workers.count("Start worker at:") == 2, workers[-2000:]
    for log in ("worker-node0.log", "scheduler.log"):
        assert f"STEP {job.job_id}." in (logs / log).read_text() and "CANCELLED" in (logs / log).read_text()
    assert not (tmp_path / "results" / job.job_id / "dask-scheduler.json").exists()
    leftover = subprocess.run(["pgrep", "-f", str(tmp_path / "results" / job.job_id)], capture_output=True,
                              text=True)
    assert leftover.stdout == "", f"processes of the job still run: {leftover.stdout}"
    assert step_folders(tmp_path) == [1]
