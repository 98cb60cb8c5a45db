"""scripts/run_glue.sh and its presets (scripts/configs/glue_config.sh): each positional argument reaches run_glue.py
as the right flag (a stand-in `python` on PATH records the command), bad arguments stop it with one line, and
shellcheck finds nothing."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from conftest import ROOT
from messages import assert_one_line
from recipe_fakes import FAKE_NVIDIA_SMI, write_executable

SCRIPT = ROOT / "scripts" / "run_glue.sh"


@pytest.fixture
def recorded(tmp_path):
    """Run the script with a `python` that writes its arguments, one per line, instead of running anything."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "python"
    fake.write_text('#!/usr/bin/env bash\nprintf "%s\\n" "$@" > "$RECORDED_ARGS"\n')
    fake.chmod(0o755)
    write_executable(bin_dir / "nvidia-smi", FAKE_NVIDIA_SMI)  # NVIDIA's default of 8 processes needs GPUs
    record = tmp_path / "args.txt"

    def run(*args: str, **variables: str) -> list[str]:
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "RECORDED_ARGS": str(record),
               "BERT_PREP_WORKING_DIR": "/prep", **variables}
        result = subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        return record.read_text().splitlines()
    return run


def test_defaults_are_nvidias(recorded, tmp_path):
    out_dir = tmp_path / "out"
    assert recorded("", "", "", "", str(out_dir)) == [
        "-m", "paddle.distributed.launch", "--log_dir", f"{out_dir}/log", "--nproc_per_node", "8",
        str(ROOT / "run_glue.py"), "--task-name", "mrpc",
        "--vocab-file", str(ROOT / "vocab" / "bert-large-uncased-vocab.txt"),
        "--bert-model", "bert-large-uncased", "--output-dir", str(out_dir), "--max-seq-length", "128", "--seed", "2",
        "--amp", "--use-dynamic-loss-scaling", "--scale-loss", "128",
        "--from-pretrained-params", str(ROOT / "results" / "bert-large-uncased" / "phase2" / "1563"),
        "--do-train", "--train-file", "/prep/download/glue/MRPC/train.tsv", "--train-batch-size", "16",
        "--gradient-merge-steps", "1", "--learning-rate", "2.4e-5", "--warmup-proportion", "0.1", "--epochs", "3",
        "--do-eval", "--predict-file", "/prep/download/glue/MRPC/dev.tsv", "--predict-batch-size", "16",
    ]
    assert (out_dir / "logfile").is_file()


def test_every_argument_takes_effect(recorded, tmp_path):
    out_dir = tmp_path / "sst"
    config = ROOT / "bert_configs" / "bert-tiny-uncased.json"
    assert recorded("ckpt/model.pdparams", "glue/SST-2/", "my-vocab.txt", str(config), str(out_dir), "sst-2", "2",
                    "24", "3", "1e-4", "0.2", "5", "7", "bf16", "11", "train prediction") == [
        "-m", "paddle.distributed.launch", "--log_dir", f"{out_dir}/log", "--nproc_per_node", "2",
        str(ROOT / "run_glue.py"), "--task-name", "sst-2", "--vocab-file", "my-vocab.txt",
        "--bert-model", "custom", "--config-file", str(config), "--output-dir", str(out_dir),
        "--max-seq-length", "128", "--seed", "11", "--amp", "--amp-dtype", "bfloat16",
        "--from-pretrained-params", "ckpt/model.pdparams",
        "--do-train", "--train-file", "glue/SST-2/train.tsv", "--train-batch-size", "8", "--gradient-merge-steps", "3",
        "--learning-rate", "1e-4", "--warmup-proportion", "0.2", "--epochs", "5", "--max-steps", "7",
        "--do-predict", "--predict-file", "glue/SST-2/dev.tsv", "--predict-batch-size", "24",
    ]


def test_evaluation_alone_runs_one_process_on_the_given_weights(recorded, tmp_path):
    # NVIDIA's eval mode passes its --init_checkpoint and --do_eval with the batch size, in one process.
    out_dir = tmp_path / "eval"
    assert recorded("mrpc-out/bert_paddle.pdparams", "glue/RTE", "v.txt", "None", str(out_dir), "rte", "4", "8", "1",
                    "1e-4", "0.1", "3", "-1", "fp32", "1", "eval") == [
        str(ROOT / "run_glue.py"), "--task-name", "rte", "--vocab-file", "v.txt", "--bert-model", "bert-large-uncased",
        "--output-dir", str(out_dir), "--max-seq-length", "128", "--seed", "1", "--float32-precision", "fp32",
        "--from-pretrained-params", "mrpc-out/bert_paddle.pdparams",
        "--do-eval", "--predict-file", "glue/RTE/dev.tsv", "--predict-batch-size", "8",
    ]


@pytest.mark.parametrize("mode", ["eval", "prediction", "eval,prediction"])
def test_scoring_without_training_or_weights_is_refused_before_anything_runs(tmp_path, mode):
    args = ["None", "", "", "", str(tmp_path / "out"), "", "", "", "", "", "", "", "", "", "", mode]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").write_text(f'#!/usr/bin/env bash\ntouch "{tmp_path}/python-ran"\n')
    (bin_dir / "python").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    result = subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and not (tmp_path / "python-ran").exists()
    assert_one_line(result.stderr, "run_glue.sh: ", f"mode '{mode}'", "init_checkpoint", "None")
    # Training from random weights (None) is still allowed, and passes no weights flag.
    args[15] = "train"
    (bin_dir / "python").write_text('#!/usr/bin/env bash\nprintf "%s\\n" "$@" > "$RECORDED_ARGS"\n')
    record = tmp_path / "args.txt"
    subprocess.run(["bash", str(SCRIPT), *args], env={**env, "RECORDED_ARGS": str(record)}, check=True,
                   capture_output=True, timeout=60)
    recorded_args = record.read_text().splitlines()
    assert "--do-train" in recorded_args and "--from-pretrained-params" not in recorded_args


@pytest.mark.parametrize(
    ("position", "value", "named"),
    [
        (6, "squad", ("task_name", "cola sst-2 mrpc rte qqp", "'squad'")),
        (14, "fp64", ("precision", "fp32 tf32 amp fp16 bf16", "'fp64'")),
        (16, "train evaluate", ("mode", "train eval prediction", "'evaluate'")),
        (13, "1.5", ("max_steps", ">= 1", "'1.5'")),
        (8, "0", ("batch_size", ">= 1", "'0'")),
        (9, "3", ("gradient_accumulation_steps 3", "divide", "batch_size 16")),
        (10, "inf", ("learning_rate", "(0, inf)", "'inf'")),
        (10, "0", ("learning_rate", "(0, inf)", "'0'")),
        (11, "1.1", ("warmup_proportion", "[0, 1]", "'1.1'")),
    ],
)
def test_bad_arguments_stop_with_one_line(tmp_path, position, value, named):
    args = [""] * 16
    args[4] = str(tmp_path / "out")
    args[position - 1] = value
    result = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert_one_line(result.stderr, "run_glue.sh: ", *named)


def test_pack_sequences_reaches_the_training_run(recorded, tmp_path):
    args = ["", "", "", "", str(tmp_path / "out"), "mrpc", "1"]
    assert "--pack-sequences" not in recorded(*args)
    packed = recorded(*args, PACK_SEQUENCES="true")
    assert packed[packed.index("--do-train"):].count("--pack-sequences") == 1


@pytest.mark.parametrize(("mode", "value", "named"), [
    ("train", "yes", ("PACK_SEQUENCES must be one of: true false", "'yes'")),
    ("eval", "true", ("PACK_SEQUENCES packs the training batches", "mode is 'eval'")),
])
def test_pack_sequences_that_cannot_act_stops_with_one_line(tmp_path, mode, value, named):
    args = ["ckpt", "", "", "", str(tmp_path / "out"), "mrpc", "1", "", "", "", "", "", "", "", "", mode]
    result = subprocess.run(["bash", str(SCRIPT), *args], env={**os.environ, "PACK_SEQUENCES": value},
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert_one_line(result.stderr, "run_glue.sh: ", *named)
    assert not (tmp_path / "out").exists()


def _preset(name: str) -> list[str]:
    result = subprocess.run(["bash", "-c", f"source scripts/configs/glue_config.sh && {name}"], cwd=ROOT,
                            env={**os.environ, "BERT_PREP_WORKING_DIR": "/prep"}, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def test_gpu_presets_split_nvidias_global_batch_into_micro_batches_that_fit(recorded):
    # NVIDIA's SST-2 on DGX-1 in fp32: global batch 512 on one GPU, micro-batches of at most 64 -> 8 x 64
    args = _preset("sst-2_dgx1-32g_1gpu_fp32")
    assert args[5:] == ["sst-2", "1", "512", "8", "1e-5", "0.1", "3", "-1.0", "fp32", "2", "train,eval"]
    assert args[1] == "/prep/download/glue/SST-2"
    argv = recorded(*args)
    assert argv[0] == str(ROOT / "run_glue.py")  # one GPU: no launcher
    values = [argv[argv.index(flag) + 1] for flag in ("--train-batch-size", "--gradient-merge-steps", "--config-file")]
    assert values == ["64", "8", str(ROOT / "bert_configs" / "bert-large-uncased.json")]
    assert "--do-eval" in argv and "--do-predict" not in argv
    # MRPC on 8 A100s in fp16: 128 / 8 = 16 per GPU fits at once
    assert _preset("mrpc_dgxa100-80g_8gpu_fp16")[5:] == ["mrpc", "8", "16", "1", "1.8e-5", "0.3", "3", "-1.0",
                                                         "fp16", "2", "train,eval"]


def test_shellcheck_finds_nothing():
    if shutil.which("shellcheck") is None:
        pytest.fail("shellcheck is missing: pip install -r requirements-dev.txt")
    result = subprocess.run(["shellcheck", "-x", "scripts/run_glue.sh", "scripts/configs/glue_config.sh"], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout
