"""scripts/run_pretraining.sh's arguments for the features beyond NVIDIA's recipe (39 whole_word_masking,
40 masked_lm_ratio, 41 no_nsp, 42 pack_sequences) and the cpu_tiny_beyond preset that turns them on.

With the recording `python` of tests/recipe_fakes.py, each argument must change the preprocessing
(lddl_preprocess.py) and training (run_pretraining.py) command lines by exactly its own flags, the masking ones
going to whichever script draws the masks, and the defaults must leave every command line as the 38-argument
interface writes it. The last test runs cpu_tiny_beyond for real on CPU.
"""

from __future__ import annotations

import difflib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import lddl_preprocess
import run_pretraining
from conftest import ROOT
from fine_tuning_runs import parameter
from messages import assert_one_line
from pretraining_runs import step_folder, step_numbers, step_records
from recipe_fakes import Fakes, make_fakes, preset, preset_names, script_args, value
from utils.dllog import read_report

RUN_PRETRAINING = ROOT / "scripts" / "run_pretraining.sh"
NEW_FLAGS = ("--whole-word-masking", "--masked-lm-ratio", "--no-nsp", "--nsp", "--pack-sequences", "--time-budget",
             "--eval-interval-minutes")
# The positions (from 1) of run_pretraining.sh's arguments these tests change.
MASKING, WHOLE_WORD_MASKING, MASKED_LM_RATIO, NO_NSP, PACK_SEQUENCES = 27, 39, 40, 41, 42
GRADIENT_ACCUMULATION, GRADIENT_MERGE_RAMP, ALIBI = 9, 51, 52


@dataclass
class Recorded:
    """One recorded run of run_pretraining.sh in `folder`: its result and the arguments of each phase's two
    scripts, with `folder` written as TMP so that runs in different folders compare."""

    result: subprocess.CompletedProcess
    calls: list[dict]
    folder: Path

    def _args(self, script: str) -> list[list[str]]:
        return [[arg.replace(str(self.folder), "TMP") for arg in args] for args in script_args(self.calls, script)]

    @property
    def preprocessing(self) -> list[list[str]]:  # phase 1, phase 2
        return self._args("lddl_preprocess.py")

    @property
    def training(self) -> list[list[str]]:  # phase 1, phase 2
        return self._args("run_pretraining.py")


def record(args: list[str], fakes: Fakes, folder: Path, **env: str) -> Recorded:
    """Run the recipe in a fresh `folder` (data and results below it) with the recording python."""
    fakes.python_log.unlink(missing_ok=True)
    folder.mkdir(parents=True, exist_ok=True)
    environment = fakes.env(BERT_PREP_WORKING_DIR=str(folder / "data"), RESULTS_DIR=str(folder / "results"), **env)
    result = subprocess.run(["bash", str(RUN_PRETRAINING), *args], capture_output=True, text=True, cwd=folder,
                            env=environment)
    return Recorded(result, fakes.python_calls(), folder)


def record_ok(args: list[str], fakes: Fakes, folder: Path, **env: str) -> Recorded:
    run = record(args, fakes, folder, **env)
    assert run.result.returncode == 0, run.result.stdout + run.result.stderr
    return run


def changes(args: list[str], base: list[str]) -> tuple[list[str], list[str]]:
    """(tokens added, tokens removed) that turn the command line `base` into `args`, in order."""
    added, removed = [], []
    for tag, base_start, base_end, start, end in difflib.SequenceMatcher(a=base, b=args, autojunk=False).get_opcodes():
        if tag != "equal":
            removed += base[base_start:base_end]
            added += args[start:end]
    return added, removed


def with_changes(args: list[str], positions: dict[int, str]) -> list[str]:
    changed = list(args)
    for position, text in positions.items():
        changed[position - 1] = text
    return changed


@pytest.fixture
def fakes(tmp_path) -> Fakes:
    return make_fakes(tmp_path / "fakes")


def cpu_tiny(fakes: Fakes, folder: Path) -> list[str]:
    return preset("pretrain_config.sh", "cpu_tiny", fakes.env(BERT_PREP_WORKING_DIR=str(folder / "data"),
                                                                RESULTS_DIR=str(folder / "results")))


@pytest.fixture(scope="module")
def baselines(tmp_path_factory) -> dict[str, Recorded]:
    """cpu_tiny as it is (static masking) and with dynamic masking, each recorded once, in its own folder."""
    runs = {}
    for masking in ("static", "dynamic"):
        folder = tmp_path_factory.mktemp(masking)
        fakes = make_fakes(folder / "fakes")
        runs[masking] = record_ok(with_changes(cpu_tiny(fakes, folder), {MASKING: masking}), fakes, folder)
    return runs


# ------------------------------------------------------------------------------------------------------------
# Each argument adds exactly its flags, to the script that uses them
# ------------------------------------------------------------------------------------------------------------

# A ratio above 0.15 raises each phase's mask cap (--max-predictions-per-seq) from NVIDIA's to ceil(ratio x length):
# CAP stands for the phase's new cap, which replaces its old one wherever the cap is passed.
CAP = "<cap>"
NVIDIA_CAPS, CAPS_AT_0_3 = ("20", "80"), ("39", "154")
# (masking, changed arguments, tokens added to each phase's lddl_preprocess.py, to each phase's run_pretraining.py)
CASES = {
    "39 whole_word_masking, static: in the shards": (
        "static", {WHOLE_WORD_MASKING: "true"}, ["--whole-word-masking"], []),
    "39 whole_word_masking, dynamic: in the loader": (
        "dynamic", {WHOLE_WORD_MASKING: "true"}, [], ["--whole-word-masking"]),
    "40 masked_lm_ratio, static: in the shards": (
        "static", {MASKED_LM_RATIO: "0.3"}, [CAP, "--masked-lm-ratio", "0.3"], [CAP]),
    "40 masked_lm_ratio, dynamic: in the loader": (
        "dynamic", {MASKED_LM_RATIO: "0.3"}, [], [CAP, "--masked-lm-ratio", "0.3"]),
    "39 and 40, static": (
        "static", {WHOLE_WORD_MASKING: "true", MASKED_LM_RATIO: "0.3"},
        [CAP, "--whole-word-masking", "--masked-lm-ratio", "0.3"], [CAP]),
    "39 and 40, dynamic": (
        "dynamic", {WHOLE_WORD_MASKING: "true", MASKED_LM_RATIO: "0.3"}, [],
        [CAP, "--whole-word-masking", "--masked-lm-ratio", "0.3"]),
    "41 no_nsp: single-segment shards and no NSP head": ("static", {NO_NSP: "true"}, ["--no-nsp"], ["--no-nsp"]),
    "41 no_nsp, dynamic": ("dynamic", {NO_NSP: "true"}, ["--no-nsp"], ["--no-nsp"]),
    "42 pack_sequences: training only": ("static", {PACK_SEQUENCES: "true"}, [], ["--pack-sequences"]),
    "40 masked_lm_ratio 0.150 is the default": ("static", {MASKED_LM_RATIO: "0.150"}, [], []),
}


@pytest.mark.parametrize("case", CASES)
def test_each_argument_adds_exactly_its_flags(case, tmp_path, fakes, baselines):
    masking, positions, preprocessing_added, training_added = CASES[case]
    args = with_changes(cpu_tiny(fakes, tmp_path), {MASKING: masking, **positions})
    run = record_ok(args, fakes, tmp_path)
    base = baselines[masking]
    assert len(run.preprocessing) == len(run.training) == 2
    caps = CAPS_AT_0_3 if CAP in preprocessing_added + training_added else NVIDIA_CAPS
    for phase in (0, 1):
        for command, base_command, added in ((run.preprocessing[phase], base.preprocessing[phase], preprocessing_added),
                                             (run.training[phase], base.training[phase], training_added)):
            got_added, got_removed = changes(command, base_command)
            assert sorted(got_added) == sorted(caps[phase] if token == CAP else token for token in added)
            assert got_removed == ([NVIDIA_CAPS[phase]] if CAP in added else [])

    # The scripts' own parsers take every flag and read the values the arguments ask for.
    ratio = float(positions.get(MASKED_LM_RATIO, "0.15"))
    whole_words = positions.get(WHOLE_WORD_MASKING) == "true"
    for args in script_args(run.calls, "lddl_preprocess.py"):
        parsed = lddl_preprocess.build_parser().parse_args(args)
        assert parsed.masking == (masking == "static") and parsed.nsp == (positions.get(NO_NSP) != "true")
        if masking == "static":
            assert (parsed.whole_word_masking, parsed.masked_lm_ratio or 0.15) == (whole_words, ratio)
    for phase, args in enumerate(script_args(run.calls, "run_pretraining.py")):
        parsed = run_pretraining.build_parser().parse_args(args)
        assert parsed.max_predictions_per_seq == int(caps[phase])
        assert (parsed.no_nsp, parsed.pack_sequences) == (positions.get(NO_NSP) == "true",
                                                            positions.get(PACK_SEQUENCES) == "true")
        if masking == "dynamic":
            assert (parsed.whole_word_masking, parsed.masked_lm_ratio or run_pretraining.MASKED_LM_RATIO) == (
                whole_words, ratio)


def test_the_defaults_leave_the_38_argument_command_lines_as_they_were(tmp_path, fakes):
    # Without argument 43 both runs write to RESULTS_DIR, so that the command lines compare.
    full_args, short_args = cpu_tiny(fakes, tmp_path / "42")[:42], cpu_tiny(fakes, tmp_path / "38")[:38]
    assert full_args[WHOLE_WORD_MASKING - 1:] == ["false", "0.15", "false", "false"]
    full = record_ok(full_args, fakes, tmp_path / "42")
    short = record_ok(short_args, fakes, tmp_path / "38")
    assert len(full.calls) == 8  # corpus, vocab, and per phase preprocessing, training and the plot
    assert [call["argv"] for call in full.calls] == [
        [arg.replace(str(tmp_path / "38"), str(tmp_path / "42")) for arg in call["argv"]] for call in short.calls]
    for args in full.preprocessing + full.training:
        assert not set(NEW_FLAGS) & set(args), args


def test_the_arguments_after_43_left_at_their_defaults_leave_the_43_argument_command_lines_as_they_were(
        tmp_path, fakes):
    """Arguments 44 (time_budget) and 45 (eval_interval_minutes) as every preset prints them, none, 46-49 (the
    budget-recipe model options) at NVIDIA's model, 50 (trained_vocab_size) none, 51 (gradient_merge_ramp) 0, 52
    (alibi) false and 53 (phase2_budget_share) 0 pass nothing: the command lines are those of the same preset's
    first 43 arguments."""
    full_args, short_args = cpu_tiny(fakes, tmp_path / "45"), cpu_tiny(fakes, tmp_path / "43")[:43]
    assert full_args[43:] == ["none", "none", "false", "true", "false", "true", "none", "0", "false", "0"]
    full = record_ok(full_args, fakes, tmp_path / "45")
    short = record_ok(short_args, fakes, tmp_path / "43")
    assert [call["argv"] for call in full.calls] == [
        [arg.replace(str(tmp_path / "43"), str(tmp_path / "45")) for arg in call["argv"]] for call in short.calls]


def test_validation_flag_help_names_each_default_once():
    """Arguments 37 and 38 become --eval-freq and --num-eval-batches, whose defaults (1000, 100) apply only with
    --eval-dir: their help says so, and argparse's "(default: None)" must not contradict it."""
    text = " ".join(run_pretraining.build_parser().format_help().split())
    assert ("Evaluate every this many steps (with --eval-dir; default 1000, none with --eval-interval-minutes). "
            "--eval-interval-minutes") in text
    assert "--eval-dir; default --batch-size). The batches" in text
    assert "(default: None)" not in text
    assert "for dropout). (default: 42)" in text  # real defaults are still named


@pytest.mark.parametrize("masking", ["static", "dynamic"])
def test_static_masks_are_capped_at_what_each_phase_reads(masking, tmp_path, fakes):
    """At masked_lm_ratio 0.3 each phase reads up to ceil(0.3 x its length) masks, 39 of 128 and 154 of 512
    (NVIDIA's 20 and 80 would hold the ratio to 16%): shards masked in preprocessing get each phase's
    --max-predictions-per-seq as their cap (lddl_preprocess.py takes the flag), and dynamic masks are capped by the
    training loader itself."""
    args = with_changes(cpu_tiny(fakes, tmp_path), {MASKING: masking, MASKED_LM_RATIO: "0.3"})
    run = record_ok(args, fakes, tmp_path)
    reads = [value(phase_args, "--max-predictions-per-seq") for phase_args in run.training]
    caps = [value(phase_args, "--max-predictions-per-seq") for phase_args in run.preprocessing]
    assert reads == ["39", "154"]
    assert caps == (reads if masking == "static" else [None, None])
    for phase_args in run.preprocessing:
        assert lddl_preprocess.build_parser().parse_args(phase_args).max_predictions_per_seq == (
            None if masking == "dynamic" else int(value(phase_args, "--max-predictions-per-seq")))


def test_nvidias_defaults_pass_none_of_the_new_flags(tmp_path, fakes):
    corpus = tmp_path / "data" / "wikipedia" / "source" / "en"
    corpus.mkdir(parents=True)
    (corpus / "wiki.txt").write_text("doc-1 Some text.\n")
    (tmp_path / "vocab.txt").write_text("[PAD]\n")
    run = record_ok([], fakes, tmp_path, VOCAB_FILE=str(tmp_path / "vocab.txt"))
    assert len(run.preprocessing) == len(run.training) == 2
    for args in run.preprocessing + run.training:
        assert not set(NEW_FLAGS) & set(args), args


@pytest.mark.parametrize("position, text, named", [
    (WHOLE_WORD_MASKING, "yes", ("whole_word_masking", "true false", "'yes'")),
    (MASKED_LM_RATIO, "1", ("masked_lm_ratio", "(0, 1)", "'1'")),
    (MASKED_LM_RATIO, "0", ("masked_lm_ratio", "(0, 1)", "'0'")),
    (MASKED_LM_RATIO, "15%", ("masked_lm_ratio", "(0, 1)", "'15%'")),
    (NO_NSP, "1", ("no_nsp", "true false", "'1'")),
    (PACK_SEQUENCES, "on", ("pack_sequences", "true false", "'on'")),
    (GRADIENT_MERGE_RAMP, "-0.1", ("gradient_merge_ramp", "[0, 1]", "'-0.1'")),
    (GRADIENT_MERGE_RAMP, "1.5", ("gradient_merge_ramp", "[0, 1]", "'1.5'")),
    (GRADIENT_MERGE_RAMP, "half", ("gradient_merge_ramp", "[0, 1]", "'half'")),
    (ALIBI, "yes", ("alibi", "true false", "'yes'")),
    (54, "extra", ("at most 53", "got 54")),
])
def test_bad_values_are_named_before_anything_runs(position, text, named, tmp_path, fakes):
    args = cpu_tiny(fakes, tmp_path)
    if position > len(args):
        args.append(text)
    else:
        args[position - 1] = text
    run = record(args, fakes, tmp_path)
    assert run.result.returncode == 1
    assert_one_line(run.result.stderr, "run_pretraining.sh: ", *named)
    assert run.calls == []


# ------------------------------------------------------------------------------------------------------------
# Presets
# ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [name for name in preset_names("pretrain_config.sh") if name != "cpu_tiny_beyond"])
def test_the_other_presets_keep_the_features_off(name, fakes):
    args = preset("pretrain_config.sh", name, fakes.env())
    # BERT's masking, but in the masking-rate trial: 30%
    assert args[WHOLE_WORD_MASKING - 1:PACK_SEQUENCES] == [
        "false", "0.3" if name == "cpu_budget_tiny_mask30" else "0.15", "false", "false"]
    # no time budget and validation (if any) by steps, but in the budget presets: 60 minutes, validated every 2
    assert args[43:45] == (["60", "2"] if name.startswith("cpu_budget_") else ["none", "none"])
    # NVIDIA's model (46-49), but in the budget-recipe trials: pre-LayerNorm without dropout; gated GELU
    # and bias-free linear layers
    assert args[45:49] == {"cpu_budget_tiny_prenorm": ["true", "true", "false", "false"],
                           "cpu_budget_tiny_gated": ["false", "true", "true", "true"],
                           "cpu_budget_tiny_nobias": ["false", "false", "false", "true"],
                           "cpu_budget_tiny_alibi_nobias": ["false", "false", "false", "true"]}.get(
                               name, ["false", "true", "false", "true"])
    # the budget presets warm up over 10% of the budget (5), but in the one-cycle trial: half of it
    if name.startswith("cpu_budget_"):
        assert args[4] == ("0.5" if name == "cpu_budget_tiny_onecycle" else "0.1")
    # the learning rate held at the peak after warmup (34): none, but in LANS's schedule and the WSD trial
    assert args[33] == {"cpu_tiny_lans": "0.34", "cpu_budget_tiny_wsd": "0.7"}.get(name, "0")
    # BERT's vocabulary (50), but in the vocabulary trial: 8,192 entries trained on the corpus
    assert args[49] == ("8192" if name.endswith("_8k_vocab") else "none")
    # the full batch from the first step (51), but in the batch-ramp trial
    assert args[50] == ("0.5" if name == "cpu_budget_tiny_ramp" else "0")
    # Devlin et al.'s attention (52), but in the ALiBi trial
    assert args[51] == ("true" if name.startswith("cpu_budget_tiny_alibi") else "false")
    # phase 1 alone under a budget (53), but in the sequence-length trial: its last tenth is a phase 2 at 512
    assert args[52:] == (["0.1"] if name == "cpu_budget_tiny_seq512" else ["0"])


def test_the_batch_ramp_reaches_phase_1_alone_and_needs_micro_batches_to_grow(tmp_path, fakes):
    """Argument 51 becomes phase 1's --gradient-merge-ramp (phase 2 keeps its full batch); with one micro-batch a
    step (argument 9) there is nothing to grow, which stops the recipe in one line before any work."""
    args = with_changes(cpu_tiny(fakes, tmp_path), {GRADIENT_ACCUMULATION: "4", GRADIENT_MERGE_RAMP: "0.25"})
    run = record_ok(args, fakes, tmp_path / "ramp")
    assert [value(phase_args, "--gradient-merge-ramp") for phase_args in run.training] == ["0.25", None]
    assert value(run.training[0], "--gradient-merge-steps") == "4"
    refused = record(with_changes(args, {GRADIENT_ACCUMULATION: "1"}), fakes, tmp_path / "one")
    assert refused.result.returncode == 1 and refused.calls == []
    assert_one_line(refused.result.stderr, "run_pretraining.sh: ", "gradient_merge_ramp 0.25",
                    "gradient_accumulation_steps", "2 or more")


def test_cpu_tiny_beyond_turns_on_all_four_features(tmp_path, fakes):
    env = fakes.env(BERT_PREP_WORKING_DIR=str(tmp_path / "data"), RESULTS_DIR=str(tmp_path / "results"))
    args = preset("pretrain_config.sh", "cpu_tiny_beyond", env)
    tiny = preset("pretrain_config.sh", "cpu_tiny", env)
    # Its own data folders (arguments 17 and 18): shards without masks or NSP pairs, with a held-out split.
    assert [args[16], args[17]] == [str(tmp_path / "data" / "sample" / "beyond" / "pretrain" / phase / "parquet")
                                     for phase in ("phase1/unbinned", "phase2/bin_size_64")]
    assert (args[MASKING - 1], args[35:38], args[WHOLE_WORD_MASKING - 1:PACK_SEQUENCES]) == (
        "dynamic", ["0.1", "3", "2"], ["true", "0.15", "true", "true"])
    # Its own results folder (argument 43).
    assert args[42] == str(tmp_path / "results" / "cpu_tiny_beyond")
    # Everything else is cpu_tiny's.
    assert [a for position, a in enumerate(args) if position not in (16, 17, 26, 35, 36, 37, 38, 40, 41, 42)] == [
        a for position, a in enumerate(tiny) if position not in (16, 17, 26, 35, 36, 37, 38, 40, 41, 42)]

    run = record_ok(args, fakes, tmp_path)
    data = "TMP/data/sample/beyond/pretrain"
    for args, folder in zip(run.preprocessing, ("phase1/unbinned", "phase2/bin_size_64"), strict=True):
        assert {"--no-masking", "--no-nsp"} <= set(args) and "--whole-word-masking" not in args
        assert args[args.index("--holdout-dir") + 1] == f"{data}/{folder}/parquet_holdout"
    for args, folder in zip(run.training, ("phase1/unbinned", "phase2/bin_size_64"), strict=True):
        assert {"--whole-word-masking", "--no-nsp", "--pack-sequences"} <= set(args)
        assert "--masked-lm-ratio" not in args
        assert args[args.index("--eval-dir") + 1] == f"{data}/{folder}/parquet_holdout"
        assert args[args.index("--eval-freq") + 1] == "3" and args[args.index("--num-eval-batches") + 1] == "2"


# ------------------------------------------------------------------------------------------------------------
# A real run of cpu_tiny_beyond on CPU
# ------------------------------------------------------------------------------------------------------------


def test_cpu_tiny_beyond_pretrains_both_phases_mlm_only_packed_and_validated(tmp_path):
    env = {**os.environ, "BERT_PREP_WORKING_DIR": str(tmp_path / "data"), "RESULTS_DIR": str(tmp_path / "results")}
    env.pop("VOCAB_FILE", None)
    args = preset("pretrain_config.sh", "cpu_tiny_beyond", env)
    result = subprocess.run(["bash", str(RUN_PRETRAINING), *args], capture_output=True, text=True, cwd=tmp_path,
                            env=env, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    results = tmp_path / "results" / "cpu_tiny_beyond"
    assert result.stdout.splitlines()[-1] == f"Final checkpoint: {step_folder(results, 4, phase=2)}"

    data = tmp_path / "data" / "sample" / "beyond" / "pretrain"
    for folder in (data / "phase1" / "unbinned" / "parquet", data / "phase2" / "bin_size_64" / "parquet"):
        for shards in (folder, folder.with_name("parquet_holdout")):
            tables = [pq.read_table(path) for path in sorted(shards.glob("*.parquet*"))]  # binned: .parquet_<bin>
            assert tables, shards
            for table in tables:  # single segments (--no-nsp), no masks in the shards (dynamic masking)
                assert "masked_lm_positions" not in table.column_names
                assert set(table.column("B").to_pylist()) == {""}
                assert not any(table.column("is_random_next").to_pylist())

    for phase, last_step, evaluated in ((1, 6, [3, 6]), (2, 4, [3, 4])):
        records = step_records(results / f"dllogger_p{phase}.json")
        trained = [record for record in records if "loss" in record["data"]]
        assert step_numbers(trained) == list(range(1, last_step + 1))
        assert all("nsp_loss" not in record["data"] and record["data"]["loss"] == record["data"]["mlm_loss"]
                   for record in trained)
        evaluations = [record for record in records if "eval_mlm_loss" in record["data"]]
        assert step_numbers(evaluations) == evaluated
        assert all("eval_nsp_loss" not in record["data"] for record in evaluations)
        report = read_report(results / f"dllogger_p{phase}.json")
        assert [parameter(report, name)[-1] for name in ("whole_word_masking", "no_nsp", "pack_sequences")] == [
            True, True, True]
        assert (results / f"dllogger_p{phase}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
