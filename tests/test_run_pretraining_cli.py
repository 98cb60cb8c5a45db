"""run_pretraining.py command line: invalid combinations, and the effect of every option.

Training runs here call run_pretraining.main() in this process on a 1-layer, hidden-32 BERT (the uncased vocab,
so the LDDL sample shards fit) for a few steps: the options' effects do not depend on model size, and a fresh
process would cost more than the run (see tests/pretraining_runs.py).
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import paddle
import pyarrow.parquet as pq
import pytest

import run_pretraining
from checkpoints import checkpoint
from checkpoints.weights import load_state
from conftest import ROOT, require_shared
from data_fixtures import partly_masked_words
from messages import assert_one_line
from modeling import BertConfig, BertForPretraining
from optimizer import create_optimizer
from pretraining_dataset import PretrainingDataLoader
from pretraining_runs import (
    DYNAMIC,
    UNBINNED,
    checkpoint_params,
    pretraining_argv,
    step_folders,
    step_numbers,
    step_records,
    summaries,
    train,
)
from training import pretraining_report
from training.amp import LossScaler
from utils.dllog import DLLogger, read_report


def parse_error(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        run_pretraining.parse_args(argv)
    assert exit_info.value.code == 2
    error_lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("run_pretraining")
                   or "error:" in line]
    assert len(error_lines) == 1
    return error_lines[0]


# ---------------------------------------------------------------------------------------------
# Invalid input
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("extra, flag", [
    (["--phase2", "--phase1"], "--phase1 and --phase2"),
    (["--from-checkpoint", "x", "--from-pretrained-params", "y"], "--from-checkpoint and --from-pretrained-params"),
    (["--from-phase1-final-params", "x"], "--from-phase1-final-params is for phase 2, not with --phase1"),
    (["--max-steps", "0"], "argument --max-steps: expected a whole number >= 1, got '0'"),
    (["--gradient-merge-steps", "0"], "argument --gradient-merge-steps: expected a whole number >= 1"),
    (["--log-freq", "-1"], "argument --log-freq: expected a whole number >= 1, got '-1'"),
    (["--keep-checkpoint-max", "0"], "argument --keep-checkpoint-max: expected a whole number >= 1"),
    (["--batch-size", "0"], "argument --batch-size: expected a whole number >= 1"),
    (["--batch-size", "2.5"], "argument --batch-size: expected a whole number, got '2.5'"),
    (["--num-workers", "-1"], "argument --num-workers: expected a whole number >= 0, got '-1'"),
    (["--benchmark-steps", "0"], "argument --benchmark-steps: expected a whole number >= 1"),
    (["--benchmark-warmup-steps", "-1"], "argument --benchmark-warmup-steps: expected a whole number >= 0"),
    (["--last-step-of-checkpoint", "latest"],
     "argument --last-step-of-checkpoint: expected None, auto or a step >= 1, got 'latest'"),
    (["--warmup-proportion", "1.5"], "argument --warmup-proportion: expected a number in [0, 1], got '1.5'"),
    (["--warmup-proportion", "0.6", "--constant-proportion", "0.6"], "--constant-proportion must not exceed 1"),
    (["--learning-rate", "0"], "argument --learning-rate: expected a positive number, got '0'"),
    (["--warmup-start-lr", "-0.5"], "argument --warmup-start-lr: expected a number >= 0"),
    (["--max-grad-norm", "-1"], "argument --max-grad-norm: expected a positive number"),
    (["--beta2", "1.0"], "argument --beta2: expected a number in [0, 1), got '1.0'"),
    (["--beta1", "-0.1"], "argument --beta1: expected a number in [0, 1)"),
    (["--epsilon", "0"], "argument --epsilon: expected a positive number"),
    (["--weight-decay", "-0.01"], "argument --weight-decay: expected a number >= 0"),
    (["--seed", "-1"], "argument --seed: expected a whole number in [0, 4294967295], got '-1'"),
    (["--seed", str(2**32)], "argument --seed: expected a whole number in [0, 4294967295]"),
    (["--use-pure-fp16"], "--use-pure-fp16 needs --amp"),
    (["--show-config", "maybe"], "--show-config"),
    (["--input-dir", "/nonexistent/shards"], "--input-dir /nonexistent/shards: no such folder"),
    (["--vocab-file", "/nonexistent/vocab.txt"], "--vocab-file /nonexistent/vocab.txt: no such file"),
    (["--config-file", "/nonexistent/bert.json"], "--config-file /nonexistent/bert.json: no such file"),
    (["--from-pretrained-params", "/nonexistent"], "--from-pretrained-params /nonexistent: no bert_paddle.pdparams"),
])
def test_invalid_combinations_exit_with_one_line_naming_the_flag(tmp_path, capsys, extra, flag):
    assert flag in parse_error(pretraining_argv(tmp_path, *extra), capsys)


def test_phase2_needs_existing_phase1_params_and_custom_needs_a_config(tmp_path, capsys):
    argv = pretraining_argv(tmp_path, "--phase2", "--from-phase1-final-params", str(tmp_path / "missing"))
    assert "--from-phase1-final-params" in parse_error(argv, capsys)
    argv = pretraining_argv(tmp_path)
    argv.remove("--config-file")
    argv.remove(argv[argv.index("--bert-model") + 2])
    assert "--bert-model custom needs --config-file" in parse_error(argv, capsys)


def test_bert_model_selects_its_config_file(tmp_path):
    argv = pretraining_argv(tmp_path, "--bert-model", "bert-base-cased")
    del argv[argv.index("--config-file"):argv.index("--config-file") + 2]
    args = run_pretraining.parse_args(argv)
    assert Path(args.config_file) == ROOT / "bert_configs" / "bert-base-cased.json"
    assert run_pretraining.load_bert_config(args).vocab_size == 28996  # the cased vocabulary


def model_argv(tmp_path: Path, *model_flags: str) -> list[str]:
    """pretraining_argv with these model flags in place of its --bert-model custom --config-file."""
    argv = pretraining_argv(tmp_path)
    at = argv.index("--bert-model")
    del argv[at:at + 4]
    return argv + list(model_flags)


@pytest.mark.parametrize(("flags", "folder"), [
    ((), "bert-large-uncased"),  # NVIDIA's default model
    (("--config-file", str(ROOT / "bert_configs" / "bert-mini-uncased.json")), "custom"),  # issue 45: not bert-large
    (("--config-file", str(ROOT / "bert_configs" / "bert-base-cased.json")), "bert-base-cased"),
    (("--bert-model", "bert-base-uncased", "--config-file", str(ROOT / "bert_configs" / "bert-base-uncased.json")),
     "bert-base-uncased"),
])
def test_the_checkpoint_folder_is_named_after_the_network_trained(tmp_path, flags, folder):
    args = run_pretraining.parse_args(model_argv(tmp_path, *flags))
    assert args.bert_model == folder
    config = json.loads(Path(args.config_file).read_text(encoding="utf-8"))
    expected = json.loads((ROOT / "bert_configs" / f"{folder if folder != 'custom' else 'bert-mini-uncased'}.json")
                          .read_text(encoding="utf-8"))
    assert config["hidden_size"] == expected["hidden_size"]


def test_a_bert_model_of_another_shape_than_the_config_file_is_refused(tmp_path, capsys):
    mini = ROOT / "bert_configs" / "bert-mini-uncased.json"
    line = parse_error(model_argv(tmp_path, "--bert-model", "bert-large-uncased", "--config-file", str(mini)), capsys)
    assert line.endswith(f"--bert-model bert-large-uncased and --config-file {mini} disagree on hidden_size 1024 "
                         "and 256, num_hidden_layers 24 and 4, num_attention_heads 16 and 4, intermediate_size 4096 "
                         "and 1024; the checkpoints would be filed under bert-large-uncased/: drop --bert-model (the "
                         "file's network names the folder) or pass --bert-model custom")


def test_max_seq_length_beyond_position_embeddings_is_an_error(tmp_path):
    args = run_pretraining.parse_args(pretraining_argv(tmp_path, "--max-seq-length", "256"))
    with pytest.raises(ValueError, match="--max-seq-length 256 exceeds max_position_embeddings 128"):
        run_pretraining.load_bert_config(args)


# ---------------------------------------------------------------------------------------------
# Effects of options
# ---------------------------------------------------------------------------------------------


def test_defaults_match_nvidia_reference():
    parser = run_pretraining.build_parser()
    defaults = {action.dest: action.default for action in parser._actions}
    # NVIDIA DeepLearningExamples PaddlePaddle/LanguageModeling/BERT utils/config.py.
    expected = {
        "bert_model": "bert-large-uncased", "config_file": None, "log_freq": 10, "num_steps_per_checkpoint": 100,
        "from_pretrained_params": None, "from_checkpoint": None, "last_step_of_checkpoint": None,
        "from_phase1_final_params": None, "steps_this_run": None, "seed": 42,
        "model_prefix": "bert_paddle", "show_config": True, "enable_cpu_affinity": True, "benchmark": False,
        "benchmark_steps": 20, "benchmark_warmup_steps": 20, "optimizer": "Lamb", "gradient_merge_steps": 1,
        "learning_rate": 1e-4, "warmup_start_lr": 0.0, "warmup_proportion": 0.01, "beta1": 0.9, "beta2": 0.999,
        "epsilon": 1e-6, "weight_decay": 0.01, "max_seq_length": 512, "batch_size": 32, "phase1": False,
        "phase2": False, "max_predictions_per_seq": 80, "amp": False, "use_pure_fp16": False, "fuse_mha": False,
        "num_workers": 1,
        # Deliberately not NVIDIA's 1.0 and False: float16 AMP scales dynamically from 2^20 unless told otherwise.
        "scale_loss": 1048576.0, "use_dynamic_loss_scaling": True,
        # Deliberately not NVIDIA's ./report.json: unset, the report goes to <output-dir>/report.json (below).
        "report_file": None,
        # Additions.
        "keep_checkpoint_max": 3, "amp_dtype": "float16", "lr_decay_power": 1.0, "constant_proportion": 0.0,
        "max_grad_norm": 1.0, "max_nonfinite_steps": 100, "min_loss_scale": 1.0, "float32_precision": None,
    }
    assert {name: defaults[name] for name in expected} == expected


def test_seed_sets_the_initial_weights(tmp_path):
    def initial_weights(seed: str) -> np.ndarray:
        args = run_pretraining.parse_args(pretraining_argv(tmp_path, "--seed", seed))
        return run_pretraining.Trainer(args, rank=0, world_size=1).model.bert.encoder[0].output.weight.numpy()

    first = initial_weights("1")
    assert np.array_equal(first, initial_weights("1"))
    assert not np.array_equal(first, initial_weights("2"))


def test_optimizer_options_reach_the_optimizer(tmp_path, monkeypatch):
    seen = {}

    def recording_create_optimizer(name, model, learning_rate, **kwargs):
        seen.update(kwargs, name=name, learning_rate=learning_rate)
        return create_optimizer(name, model, learning_rate, **kwargs)

    monkeypatch.setattr(run_pretraining, "create_optimizer", recording_create_optimizer)
    argv = pretraining_argv(tmp_path, "--beta1", "0.8", "--beta2", "0.95", "--epsilon", "1e-8", "--weight-decay",
                            "0.02", "--max-grad-norm", "2.5")
    for name in ("Lamb", "AdamW", "Lans"):
        trainer = run_pretraining.Trainer(run_pretraining.parse_args(argv + ["--optimizer", name]), 0, 1)
        assert type(trainer.optimizer).__name__ == name
        assert seen == {"name": name, "learning_rate": trainer.scheduler, "beta1": 0.8, "beta2": 0.95,
                        "epsilon": 1e-8, "weight_decay": 0.02, "max_grad_norm": 2.5, "multi_precision": False}


def test_schedule_options_give_the_logged_learning_rates(tmp_path):
    # 6 steps: W = floor(0.34 * 6) = 2 warmup steps, C = 2 constant steps, then power-2 decay over D = 2 steps
    # towards 0 one step after the last.
    argv = pretraining_argv(tmp_path, "--max-steps", "6", "--learning-rate", "1e-3", "--warmup-start-lr", "1e-4",
                            "--warmup-proportion", "0.34", "--constant-proportion", "0.34", "--lr-decay-power", "2")
    assert train(argv) == 0
    logged = [r["data"]["learning_rate"] for r in step_records(tmp_path / "report.json")]
    # Step k (1-based) runs at lr(k) of the LANS schedule (Zheng et al. 2020), written out by hand:
    expected = [1e-4 + (1e-3 - 1e-4) * 1 / 2, 1e-3, 1e-3, 1e-3, 1e-3 * (1 - 1 / 3) ** 2, 1e-3 * (1 - 2 / 3) ** 2]
    np.testing.assert_allclose(logged, expected, rtol=1e-12, atol=1e-15)


def test_the_report_goes_to_the_output_dir_unless_report_file_says_otherwise(tmp_path, monkeypatch):
    # As the fine-tuning scripts: not ./report.json, which collected every run started in a folder (the
    # repository's root, for a command from the README) into one file.
    monkeypatch.chdir(tmp_path)
    argv = pretraining_argv(tmp_path, "--max-steps", "1")
    del argv[argv.index("--report-file"):argv.index("--report-file") + 2]
    assert run_pretraining.parse_args(argv).report_file == str(tmp_path / "out" / "report.json")
    assert train(argv) == 0
    assert step_numbers(step_records(tmp_path / "out" / "report.json")) == [1]
    assert not (tmp_path / "report.json").exists()
    assert run_pretraining.parse_args([*argv, "--report-file", "r.json"]).report_file == "r.json"


def test_log_freq_model_prefix_checkpoint_frequency_and_report_file(tmp_path, capsys):
    assert train(pretraining_argv(tmp_path, "--max-steps", "5", "--output-dir", str(tmp_path / "every-step"))) == 0
    per_step = [r["data"]["loss"] for r in step_records(tmp_path / "report.json")]
    capsys.readouterr()
    report = tmp_path / "elsewhere" / "dllog.json"
    argv = pretraining_argv(tmp_path, "--max-steps", "5", "--log-freq", "2", "--num-steps-per-checkpoint", "2",
                            "--model-prefix", "tiny", "--report-file", str(report), "--keep-checkpoint-max", "5")
    assert train(argv) == 0
    records = step_records(report)
    assert step_numbers(records) == [2, 4, 5]  # every 2 steps, and the last one
    # Each record averages its interval: the same run logged every step gives the parts.
    expected = [np.mean(per_step[0:2]), np.mean(per_step[2:4]), per_step[4]]
    np.testing.assert_allclose([r["data"]["loss"] for r in records], expected, rtol=1e-12)
    assert set(records[0]["data"]) == {"loss", "mlm_loss", "nsp_loss", "learning_rate", "loss_scale",
                                       "sequences_per_second", "step_cost", "step_samples", "seqs_per_sec",
                                       "elapsed_training_minutes", "trained_sequences"}
    assert [record["data"]["trained_sequences"] for record in records] == [8, 16, 20]  # steps x batch 4
    (summary,) = summaries(report)
    assert summary["final_loss"] == pytest.approx(per_step[4], rel=1e-12)  # the mean over the last interval
    units = {r["metric"]: r["metadata"].get("unit") for r in read_report(report) if r["type"] == "METADATA"}
    assert units["training_sequences_per_second"] == units["sequences_per_second"] == "sequences/s"
    assert units["e2e_train_time"] == units["step_cost"] == "s"
    assert units["step_samples"] == "sequences" and units["seqs_per_sec"] == "sequences/s per rank"
    assert units["elapsed_training_minutes"] == "min" and units["trained_sequences"] == "sequences"
    progress_lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("step ")]
    assert [line.split()[1] for line in progress_lines] == ["2/5", "4/5", "5/5"]
    assert all(" ETA " in line for line in progress_lines)
    assert step_folders(tmp_path / "out") == [2, 4, 5]
    assert sorted(p.name for p in (tmp_path / "out" / "custom" / "phase1" / "5").iterdir()) == [
        "tiny.pdopt", "tiny.pdparams", "tiny_config.json", "tiny_progress.json", "tiny_vocab.txt"]


def nvidia_style_records(report: Path) -> list[tuple[int, int, float, float, int]]:
    """(epoch, step, seqs_per_sec, step_cost, step_samples) of each throughput record, read as a parser written for
    NVIDIA's reports would: the `DLLL ` JSON lines, the LOG ones that have seqs_per_sec, their step [epoch, step]."""
    rows = []
    for line in report.read_text().splitlines():
        if not line.startswith("DLLL "):
            continue
        record = json.loads(line[len("DLLL "):])
        if record["type"] == "LOG" and "seqs_per_sec" in record["data"]:
            data = record["data"]
            rows.append((record["step"][0], record["step"][1], data["seqs_per_sec"], data["step_cost"],
                         data["step_samples"]))
    return rows


def test_interval_records_measure_nvidias_step_cost_samples_and_per_rank_throughput(tmp_path, monkeypatch):
    # A scripted clock: the reporter reads it once when built and once per interval it reports.
    clock = iter([100.0, 103.5, 104.0])
    monkeypatch.setattr(pretraining_report.time, "perf_counter", lambda: next(clock))
    epoch = [0]
    report = tmp_path / "report.json"
    logger = DLLogger(report, stdout=False)
    reporter = pretraining_report.ProgressReporter(logger, lambda *a, **k: None, start_step=0, last_step=3,
                                                   log_freq=2, epoch_of=lambda: epoch[0])

    def step_result(loss: float, rank_sequences: int, skipped: bool = False) -> pretraining_report.StepResult:
        # Two ranks, each with rank_sequences of the step's sequences.
        return pretraining_report.StepResult(loss, loss - 1, 1.0, 2 * rank_sequences, rank_sequences, 1e-3, 1.0,
                                             skipped, 0.0)

    reporter.record(1, step_result(5.0, 16), stopping=False)
    reporter.record(2, step_result(math.nan, 16, skipped=True), stopping=False)  # an overflow: no update
    epoch[0] = 1  # the loader started its second pass during step 3
    reporter.record(3, step_result(4.0, 8), stopping=False)
    logger.close()
    # Step 2 closes an interval of 3.5 s in which this rank trained on 16 + 16 sequences (NVIDIA counts every
    # micro-batch it ran); step 3, the last, one of 0.5 s and 8 sequences.
    assert nvidia_style_records(report) == [(0, 2, 32 / 3.5, 3.5, 32), (1, 3, 8 / 0.5, 0.5, 8)]
    intervals = [r["data"] for r in step_records(report) if "seqs_per_sec" in r["data"]]
    assert [data["sequences_per_second"] for data in intervals] == [64 / 3.5, 16 / 0.5]  # both ranks
    assert [data["loss"] for data in intervals] == [5.0, 4.0]  # our mean over the interval's updates
    skipped = [r["step"] for r in step_records(report) if "skipped_update" in r["data"]]
    assert skipped == [[0, 2]]


def test_an_nvidia_style_parser_reads_the_run_report(tmp_path):
    # 12 samples, micro-batches of 4, 2 per step: an epoch is 3 micro-batches, so the epoch turns within the run.
    shards = tmp_path / "shards"
    shards.mkdir()
    source = require_shared(*UNBINNED) / "shard-0.parquet"
    pq.write_table(pq.read_table(source).slice(0, 12), shards / "shard-0.parquet")
    argv = pretraining_argv(tmp_path, "--max-steps", "5", "--log-freq", "2", "--gradient-merge-steps", "2",
                            "--batch-size", "4", shards=shards)
    assert train(argv) == 0
    vocab = require_shared("vocab", "bert-uncased-vocab.txt")
    steps_per_epoch = PretrainingDataLoader(str(shards), str(vocab), batch_size=4, max_seq_length=128,
                                            max_predictions_per_seq=20, seed=42).steps_per_epoch
    assert steps_per_epoch == 3
    rows = nvidia_style_records(tmp_path / "report.json")
    # Step s ends with micro-batch 2s - 1 (0-based) of the stream, in epoch (2s - 1) // 3.
    assert [(epoch, step) for epoch, step, *_ in rows] == [(1, 2), (2, 4), (3, 5)]
    assert [samples for *_, samples in rows] == [2 * 2 * 4, 2 * 2 * 4, 1 * 2 * 4]
    for _, _, seqs_per_sec, step_cost, samples in rows:
        assert step_cost > 0 and seqs_per_sec == pytest.approx(samples / step_cost, rel=1e-12)
    # One rank: the per-rank figure is the global one.
    global_rates = [r["data"]["sequences_per_second"] for r in step_records(tmp_path / "report.json")]
    np.testing.assert_allclose([seqs_per_sec for _, _, seqs_per_sec, *_ in rows], global_rates, rtol=1e-12)


@pytest.mark.parametrize("folder", ["wikitext2-test-seq128-unbinned", "wikitext2-test-seq128-bin64",
                                    "wikitext2-test-seq128-unbinned-dynamic"])
def test_trains_straight_from_each_lddl_sample_folder(tmp_path, folder):
    assert train(pretraining_argv(tmp_path, "--max-steps", "2", shards=("data", "lddl-sample", folder))) == 0
    losses = [r["data"]["loss"] for r in step_records(tmp_path / "report.json")]
    assert len(losses) == 2 and all(math.isfinite(loss) for loss in losses)
    assert step_folders(tmp_path / "out") == [2]


def test_show_config_reports_and_prints_the_arguments(tmp_path, capsys):
    assert train(pretraining_argv(tmp_path, "--max-steps", "1", "--show-config", "true")) == 0
    records = read_report(tmp_path / "report.json")
    parameters = [r["data"] for r in records if r["type"] == "LOG" and r["step"] == "PARAMETER"]
    assert len(parameters) == 1 and parameters[0]["max_steps"] == 1 and parameters[0]["world_size"] == 1
    assert "Configuration: " in capsys.readouterr().out
    assert train(pretraining_argv(tmp_path, "--max-steps", "1", "--show-config", "false",
                                  "--output-dir", str(tmp_path / "second"))) == 0
    records = read_report(tmp_path / "report.json")
    assert sum(r["step"] == "PARAMETER" for r in records if r["type"] == "LOG") == 1
    assert "Configuration: " not in capsys.readouterr().out


def test_data_options_reach_the_loader(tmp_path, monkeypatch):
    seen = {}

    class RecordingLoader(PretrainingDataLoader):
        def __init__(self, *args, **kwargs):
            seen.update(kwargs, input_dir=args[0], vocab_file=args[1])
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(run_pretraining, "PretrainingDataLoader", RecordingLoader)
    argv = pretraining_argv(tmp_path, "--max-steps", "1", "--num-workers", "1", "--batch-size", "3",
                            "--max-predictions-per-seq", "19", "--seed", "7")
    assert train(argv) == 0
    assert (seen["num_workers"], seen["batch_size"], seen["max_predictions_per_seq"], seen["seed"],
            seen["max_seq_length"]) == (1, 3, 19, 7, 128)
    assert seen["input_dir"] == str(require_shared(*UNBINNED))


def batches_trained_on(monkeypatch) -> list[dict]:
    """The micro-batches Trainer.step receives, filled in as the run goes."""
    seen: list[dict] = []
    original = run_pretraining.Trainer.step

    def recording(self, micro_batches, *args, **kwargs):
        seen.extend(micro_batches)
        return original(self, micro_batches, *args, **kwargs)
    monkeypatch.setattr(run_pretraining.Trainer, "step", recording)
    return seen


@pytest.mark.parametrize("ratio", [0.15, 0.3])
def test_masked_lm_ratio_sets_the_masked_count_of_each_dynamic_sequence(tmp_path, monkeypatch, ratio):
    batches = batches_trained_on(monkeypatch)
    assert train(pretraining_argv(tmp_path, "--max-steps", "2", "--max-predictions-per-seq", "80",
                                  "--masked-lm-ratio", str(ratio), shards=DYNAMIC)) == 0
    for batch in batches:
        lengths = batch["attention_mask"].sum(axis=1)
        # masking.py's rule (Google's): round(tokens x ratio), at least 1, at most --max-predictions-per-seq.
        expected = np.minimum(80, np.maximum(1, np.rint(lengths * ratio)))
        np.testing.assert_array_equal((batch["masked_lm_labels"] != -1).sum(axis=1), expected)


@pytest.mark.parametrize("whole_words", [False, True])
def test_whole_word_masking_masks_every_piece_of_a_chosen_word(tmp_path, monkeypatch, whole_words):
    batches = batches_trained_on(monkeypatch)
    flag = ["--whole-word-masking"] if whole_words else []
    assert train(pretraining_argv(tmp_path, "--max-steps", "2", *flag, shards=DYNAMIC)) == 0
    vocab = require_shared("vocab", "bert-uncased-vocab.txt").read_text(encoding="utf-8").splitlines()
    partly_masked = 0
    for batch in batches:
        labels = batch["masked_lm_labels"]
        original = np.where(labels != -1, labels, batch["input_ids"])
        for row in range(len(original)):
            tokens = [vocab[index] for index in original[row]]
            partly_masked += len(partly_masked_words(tokens, set(np.flatnonzero(labels[row] != -1))))
    # Masking single pieces splits some words of these 8 sequences; whole-word masking never does.
    assert (partly_masked == 0) == whole_words


def test_masked_lm_ratio_outside_0_1_names_the_flag(tmp_path, capsys):
    assert "--masked-lm-ratio 1.0: must be between 0 and 1 (both excluded)" in parse_error(
        pretraining_argv(tmp_path, "--masked-lm-ratio", "1"), capsys)


def test_shard_limits_are_enforced_through_the_loader(tmp_path):
    # The sample shards hold up to 128 tokens and 19 masked positions per sequence; the loader refuses to cut.
    with pytest.raises(ValueError, match="max_seq_length"):
        train(pretraining_argv(tmp_path, "--max-steps", "1", "--max-seq-length", "64"))
    with pytest.raises(ValueError, match="max_predictions_per_seq"):
        train(pretraining_argv(tmp_path, "--max-steps", "1", "--max-predictions-per-seq", "5"))


def test_vocab_file_maps_the_shard_tokens(tmp_path):
    vocab = require_shared("vocab", "bert-uncased-vocab.txt").read_text(encoding="utf-8").splitlines()
    shuffled = tmp_path / "shuffled-vocab.txt"
    # Same special tokens, other ids for every ordinary word piece: the inputs, and so the loss, change.
    ordinary = vocab[1000:]
    shuffled.write_text("\n".join(vocab[:1000] + ordinary[::-1]) + "\n", encoding="utf-8")
    assert train(pretraining_argv(tmp_path, "--max-steps", "1", "--output-dir", str(tmp_path / "a"))) == 0
    assert train(pretraining_argv(tmp_path, "--max-steps", "1", "--output-dir", str(tmp_path / "b"),
                                  "--vocab-file", str(shuffled))) == 0
    first, second = (r["data"]["loss"] for r in step_records(tmp_path / "report.json"))
    assert first != second


def test_steps_this_run_stops_early_on_the_full_schedule(tmp_path):
    assert train(pretraining_argv(tmp_path, "--max-steps", "8", "--steps-this-run", "3")) == 0
    records = step_records(tmp_path / "report.json")
    assert step_numbers(records) == [1, 2, 3]
    # The schedule spans --max-steps 8 (2 warmup steps), not the 3 steps of this run.
    np.testing.assert_allclose(records[-1]["data"]["learning_rate"], 5e-3 * (1 - 1 / 7), rtol=1e-12)
    assert step_folders(tmp_path / "out") == [3]


def test_benchmark_runs_warmup_then_timed_steps_without_checkpoints(tmp_path, capsys):
    argv = pretraining_argv(tmp_path, "--max-steps", "10", "--benchmark", "--benchmark-warmup-steps", "1",
                            "--benchmark-steps", "2")
    assert train(argv) == 0
    assert step_numbers(step_records(tmp_path / "report.json")) == [1, 2, 3]
    (summary,) = summaries(tmp_path / "report.json")
    assert summary["timed_steps"] == 2
    # Throughput over the timed steps only: 2 steps of 4 sequences.
    assert summary["training_sequences_per_second"] == pytest.approx(8 / summary["raw_train_time"], rel=1e-9)
    assert "Benchmark: " in capsys.readouterr().out
    assert not (tmp_path / "out" / "custom").exists()


def test_benchmark_runs_its_steps_even_beyond_max_steps(tmp_path):
    # NVIDIA's rule: the run ends at the last step + warmup + timed steps, whatever --max-steps says.
    argv = pretraining_argv(tmp_path, "--max-steps", "2", "--benchmark", "--benchmark-warmup-steps", "2",
                            "--benchmark-steps", "3")
    assert train(argv) == 0
    assert step_numbers(step_records(tmp_path / "report.json")) == [1, 2, 3, 4, 5]
    assert summaries(tmp_path / "report.json")[0]["timed_steps"] == 3


def test_phase1_final_params_need_no_explicit_phase2(tmp_path, capsys):
    assert train(pretraining_argv(tmp_path, "--max-steps", "1", "--output-dir", str(tmp_path / "p1"))) == 0
    argv = pretraining_argv(tmp_path, "--max-steps", "1", "--from-phase1-final-params",
                            str(tmp_path / "p1" / "custom" / "phase1" / "1"))
    argv.remove("--phase1")  # phase 2 is the default
    capsys.readouterr()
    assert train(argv) == 0
    assert "--from-phase1-final-params " in capsys.readouterr().out
    assert step_folders(tmp_path / "out", phase=2) == [1]


def test_a_config_vocab_smaller_than_the_vocab_file_is_an_error_naming_both(tmp_path):
    config = tmp_path / "small-vocab.json"
    config.write_text('{"vocab_size": 1000, "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, '
                      '"intermediate_size": 64, "max_position_embeddings": 128}')
    with pytest.raises(ValueError, match=r"small-vocab.json: vocab_size 1000 is smaller than the 30522 tokens of "
                       r"--vocab-file .*bert-uncased-vocab.txt"):
        train(pretraining_argv(tmp_path, "--config-file", str(config)))
    assert not any((tmp_path / "out" / "custom" / "phase1").iterdir())  # checked and locked at start, nothing saved


def test_the_stop_file_saves_a_checkpoint_and_exits_0_at_the_next_step(tmp_path, monkeypatch, capsys):
    stop_file = tmp_path / "stop-now"
    monkeypatch.setenv("PADDLEBERT_STOP_FILE", str(stop_file))
    argv = pretraining_argv(tmp_path, "--max-steps", "100", "--num-steps-per-checkpoint", "50")
    assert train([*argv, "--steps-this-run", "2"]) == 0  # no file, no stop: steps 1 and 2, saved at 2
    stop_file.touch()
    assert train([*argv, "--last-step-of-checkpoint", "auto"]) == 0
    assert f"stop file {stop_file}: stopped after step 3" in capsys.readouterr().out
    assert step_folders(tmp_path / "out") == [2, 3]
    assert step_numbers(step_records(tmp_path / "report.json")) == [1, 2, 3]
    assert stop_file.exists()  # the file belongs to whoever made it


def test_amp_on_cpu_says_so_once_and_trains_in_fp32(tmp_path, capsys):
    assert train(pretraining_argv(tmp_path, "--max-steps", "2", "--output-dir", str(tmp_path / "fp32"))) == 0
    capsys.readouterr()
    assert train(pretraining_argv(tmp_path, "--max-steps", "2", "--output-dir", str(tmp_path / "amp"), "--amp",
                                  "--use-dynamic-loss-scaling", "--scale-loss", "1048576")) == 0
    assert sum("AMP needs a GPU" in line for line in capsys.readouterr().out.splitlines()) == 1
    fp32, amp = checkpoint_params(tmp_path / "fp32", 2), checkpoint_params(tmp_path / "amp", 2)
    assert all(np.array_equal(fp32[name], amp[name]) for name in fp32)


def test_float16_overflow_skips_the_update_and_halves_the_scale(tmp_path):
    # On a CPU --amp falls back to fp32, so the scaler a GPU run would get is installed by hand. A large NSP
    # weight gives gradients of about 1e10: finite, but times a loss scale of 2^100 they overflow float32 the
    # way moderate gradients times 2^20 overflow float16.
    trainer = run_pretraining.Trainer(run_pretraining.parse_args(pretraining_argv(tmp_path)), 0, 1)
    trainer.scaler = LossScaler(2.0**100, dynamic=True)
    trainer.model.cls.seq_relationship.weight.set_value(
        paddle.full(trainer.model.cls.seq_relationship.weight.shape, 1e10))
    loader = PretrainingDataLoader(str(require_shared(*UNBINNED)), str(require_shared("vocab",
                                   "bert-uncased-vocab.txt")), 4, 128, 20, seed=42)
    before = {name: p.numpy().copy() for name, p in trainer.model.named_parameters()}
    result, _ = trainer.step([next(iter(loader))])
    assert result.skipped and math.isfinite(result.loss) and result.loss_scale == 2.0**100
    assert trainer.scaler.scale_value == 2.0**99
    assert all(np.array_equal(before[name], p.numpy()) for name, p in trainer.model.named_parameters())
    assert trainer.scheduler.last_epoch == 1  # the schedule moves on
    # The same step without loss scaling is finite and updates the weights.
    trainer.scaler = None
    result, _ = trainer.step([next(iter(loader))])
    assert not result.skipped
    assert not np.array_equal(before["bert.pooler.dense.weight"], trainer.model.bert.pooler.dense.weight.numpy())


def test_repeated_nonfinite_losses_stop_the_run_naming_the_step(tmp_path, capsys):
    # AdamW moves every weight by about the learning rate: 1e30 makes the next forward pass overflow, and
    # since non-finite steps are skipped, every later loss stays non-finite.
    argv = pretraining_argv(tmp_path, "--max-steps", "20", "--optimizer", "AdamW", "--learning-rate", "1e30",
                            "--warmup-proportion", "0", "--max-nonfinite-steps", "2")
    with pytest.raises(SystemExit, match=r"step 4: the loss has been non-finite for 3 steps in a row, more than "
                                         r"--max-nonfinite-steps 2"):
        train(argv)
    out = capsys.readouterr().out
    assert "Step 2: non-finite loss or float16 overflow; update skipped" in out
    skipped = step_numbers([r for r in step_records(tmp_path / "report.json") if "skipped_update" in r["data"]])
    assert skipped == [2, 3, 4]


def test_fuse_mha_checkpoints_load_into_unfused_models_and_back(tmp_path):
    fused_out, unfused_out = tmp_path / "fused", tmp_path / "unfused"
    assert train(pretraining_argv(tmp_path, "--max-steps", "1", "--fuse-mha", "--output-dir", str(fused_out),
                                  dropout=0.0)) == 0
    fused = checkpoint_params(fused_out, 1)
    assert "bert.encoder.0.attention.qkv.weight" in fused and "bert.encoder.0.attention.query.weight" not in fused
    # Unfused run from the fused weights, then a fused run from those unfused weights.
    assert train(pretraining_argv(tmp_path, "--max-steps", "1", "--output-dir", str(unfused_out),
                                  "--from-pretrained-params", str(fused_out / "custom" / "phase1" / "1"),
                                  dropout=0.0)) == 0
    assert "bert.encoder.0.attention.query.weight" in checkpoint_params(unfused_out, 1)
    # A full resume (optimizer moments included) needs the layout the checkpoint was saved with.
    with pytest.raises(ValueError, match="phase1/1: saved with --fuse-mha; resume with the same setting"):
        train(pretraining_argv(tmp_path, "--from-checkpoint", str(fused_out / "custom" / "phase1" / "1")))
    assert train(pretraining_argv(tmp_path, "--max-steps", "1", "--output-dir", str(tmp_path / "refused"),
                                  "--fuse-mha", "--from-pretrained-params",
                                  str(unfused_out / "custom" / "phase1" / "1"), dropout=0.0)) == 0
    # Each run's first loss is the loss its starting weights give on the first batch (dropout 0): computed here
    # independently from the file it started from.
    losses = [r["data"]["loss"] for r in step_records(tmp_path / "report.json")]
    loader = PretrainingDataLoader(str(require_shared(*UNBINNED)), str(require_shared("vocab",
                                   "bert-uncased-vocab.txt")), 4, 128, 20, seed=42)
    batch = next(iter(loader))
    for start, logged, fuse in ((fused_out, losses[1], False), (unfused_out, losses[2], True)):
        config = BertConfig.from_json_file(str(tmp_path / "bert-test.json"))
        config = dataclasses.replace(config, fuse_mha=fuse, pad_vocab_size_multiple=8)
        model = BertForPretraining(config)
        model.eval()
        load_state(model, paddle.load(str(start / "custom" / "phase1" / "1" / "bert_paddle.pdparams")), "start")
        assert logged == pytest.approx(first_batch_loss(model, batch), rel=1e-5)


def first_batch_loss(model: BertForPretraining, batch: dict) -> float:
    """Masked-LM mean + NSP mean of one batch, written out in NumPy from the model's scores."""
    labels = batch["masked_lm_labels"].reshape(-1)
    positions = np.flatnonzero(labels != -1)
    scores, nsp_scores = model(paddle.to_tensor(batch["input_ids"]), paddle.to_tensor(batch["token_type_ids"]),
                               paddle.to_tensor(batch["attention_mask"]), paddle.to_tensor(positions))

    def cross_entropy(logits: np.ndarray, targets: np.ndarray) -> float:
        logits = logits.astype(np.float64)
        shifted = logits - logits.max(axis=1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        return float(-log_probs[np.arange(len(targets)), targets].mean())

    return cross_entropy(scores.numpy(), labels[positions]) + cross_entropy(nsp_scores.numpy(),
                                                                            batch["next_sentence_labels"])


def test_pretrained_params_may_lack_the_heads_but_not_encoder_weights(tmp_path, capsys):
    state = run_pretraining.Trainer(run_pretraining.parse_args(pretraining_argv(tmp_path)), 0, 1).model.state_dict()
    encoder_only, incomplete = tmp_path / "encoder-only", tmp_path / "incomplete"
    for folder, kept in ((encoder_only, lambda name: name.startswith("bert.")),
                         (incomplete, lambda name: name != "bert.pooler.dense.weight")):
        folder.mkdir()
        paddle.save({name: value for name, value in state.items() if kept(name)}, str(folder / "bert_paddle.pdparams"))
    assert train(pretraining_argv(tmp_path, "--max-steps", "1", "--from-pretrained-params", str(encoder_only))) == 0
    assert "mlm, nsp not in the file, starting from random initialisation" in capsys.readouterr().out
    with pytest.raises(ValueError, match="incomplete pooler weights .*bert.pooler.dense.weight"):
        train(pretraining_argv(tmp_path, "--max-steps", "1", "--from-pretrained-params", str(incomplete),
                               "--output-dir", str(tmp_path / "second")))
    with pytest.raises(FileNotFoundError, match="phase1: not a checkpoint folder .*add --last-step-of-checkpoint auto"):
        train(pretraining_argv(tmp_path, "--from-checkpoint", str(tmp_path / "out" / "custom" / "phase1")))


def test_rerunning_a_finished_run_says_it_is_complete_and_reports_nothing(tmp_path, capsys):
    # The same command again after the last step (what a resubmitted recipe does): before, it printed "Training
    # phase 1 from step 3 to 2" and appended a summary with a NaN final_loss.
    argv = pretraining_argv(tmp_path, "--max-steps", "2", "--num-steps-per-checkpoint", "2",
                            "--last-step-of-checkpoint", "auto")
    assert train(argv) == 0
    records = read_report(tmp_path / "report.json")
    capsys.readouterr()
    assert train(argv) == 0
    output = capsys.readouterr().out
    assert f"Phase 1 is complete: {tmp_path / 'out' / 'custom' / 'phase1' / '2'} is step 2 of --max-steps 2" in output
    assert "Training phase 1 from step" not in output
    log_records = [r for r in read_report(tmp_path / "report.json") if r["type"] == "LOG"]
    assert log_records == [r for r in records if r["type"] == "LOG"]


@pytest.mark.slow
def test_pretraining_starts_from_a_hugging_face_folder_as_it_is(tmp_path, capsys):
    minilm = require_shared("models", "all-MiniLM-L6-v2")
    argv = pretraining_argv(tmp_path, "--max-steps", "1", "--from-pretrained-params", str(minilm))
    argv[argv.index("--config-file") + 1] = str(minilm / "config.json")
    assert run_pretraining.main(argv) == 0
    out = capsys.readouterr().out
    assert (f"--from-pretrained-params {minilm / 'model.safetensors'}: Hugging Face checkpoint, converted in memory"
            in out)
    assert "loaded embeddings, encoder, pooler" in out
    # A run of another network refuses the folder, naming the config.json that comes with it.
    other = tmp_path / "other"
    other.mkdir()
    with pytest.raises(ValueError) as raised:
        run_pretraining.main(pretraining_argv(other, "--max-steps", "1", "--from-pretrained-params", str(minilm)))
    assert_one_line(str(raised.value), "--from-pretrained-params", minilm / "config.json", "hidden_size")


def _progress_folder(folder: Path, **progress) -> str:
    folder.mkdir(parents=True)
    (folder / f"{checkpoint.DEFAULT_PREFIX}{checkpoint.PROGRESS_SUFFIX}").write_text(json.dumps(progress))
    return str(folder)


def test_phase2_refuses_a_budgeted_phase1_that_stopped_before_its_budget(tmp_path, capsys):
    """Under a time budget phase 1 ends at no fixed step, so run_pretraining.sh starts phase 2 from phase 1's newest
    checkpoint; a SIGTERM checkpoint before the budget was spent (run_pretraining.py exits 0 after it) must not
    start phase 2. A spent budget, a run counted in steps and bare weights are taken."""
    stopped = _progress_folder(tmp_path / "stopped" / "40", global_step=40, time_budget_minutes=18.0,
                               elapsed_training_seconds=60 * 18.0 - 1)
    (Path(stopped) / f"{checkpoint.DEFAULT_PREFIX}{checkpoint.PARAMS_SUFFIX}").write_bytes(b"")
    argv = pretraining_argv(tmp_path, "--phase2", "--from-phase1-final-params", stopped, "--max-steps", "4",
                            "--time-budget", "2")
    assert parse_error(argv, capsys).endswith(f"error: --from-phase1-final-params {stopped}: phase 1 stopped "
                                              "after 17.98 of its 18 minutes (interrupted?); rerun phase 1 to finish "
                                              "it first")
    spent = _progress_folder(tmp_path / "spent" / "41", global_step=41, time_budget_minutes=18.0,
                             elapsed_training_seconds=60 * 18.0)
    # a step-based phase 1 at its max_steps (one that stopped before them is refused: test_faults_pretraining_flags)
    by_steps = _progress_folder(tmp_path / "steps" / "15", global_step=15, max_steps=15, time_budget_minutes=None)
    weights_alone = tmp_path / "weights"
    weights_alone.mkdir()
    for folder in (spent, by_steps, str(weights_alone)):
        run_pretraining.check_phase1_finished(folder, checkpoint.DEFAULT_PREFIX)
