"""Every option of NVIDIA's PaddlePaddle BERT parsers (DeepLearningExamples, PaddlePaddle/LanguageModeling/BERT,
utils/config.py: add_global_args, add_training_args and add_advance_args, for Task.squad and Task.pretrain) is an
option of ours of the same kind (a flag or an option with a value), so NVIDIA's command lines parse here."""

from __future__ import annotations

import argparse

import pytest

import run_pretraining
import run_squad

# Written down from NVIDIA's utils/config.py (commit 729963dd): (flags, options with a value) of each script.
_SHARED_FLAGS = ["--benchmark", "--amp", "--use-dynamic-loss-scaling", "--use-pure-fp16", "--fuse-mha"]
_SHARED_VALUES = [
    "--vocab-file", "--output-dir", "--bert-model", "--config-file", "--max-steps", "--log-freq",
    "--num-steps-per-checkpoint", "--from-pretrained-params", "--from-checkpoint", "--last-step-of-checkpoint",
    "--seed", "--report-file", "--model-prefix", "--show-config", "--enable-cpu-affinity", "--benchmark-steps",
    "--benchmark-warmup-steps", "--optimizer", "--gradient-merge-steps", "--learning-rate", "--warmup-start-lr",
    "--warmup-proportion", "--beta1", "--beta2", "--epsilon", "--weight-decay", "--max-seq-length", "--scale-loss"]
NVIDIA_OPTIONS = {
    "run_squad": (_SHARED_FLAGS + ["--do-train", "--do-predict", "--do-eval", "--verbose-logging", "--do-lower-case",
                                   "--version-2-with-negative"],
                  _SHARED_VALUES + ["--train-file", "--predict-file", "--eval-script", "--epochs", "--train-batch-size",
                                    "--predict-batch-size", "--doc-stride", "--max-query-length", "--n-best-size",
                                    "--max-answer-length", "--null-score-diff-threshold"]),
    "run_pretraining": (_SHARED_FLAGS + ["--phase1", "--phase2"],
                        _SHARED_VALUES + ["--input-dir", "--num-workers", "--from-phase1-final-params",
                                          "--steps-this-run", "--batch-size", "--max-predictions-per-seq"]),
}
PARSERS = {"run_squad": run_squad.build_parser, "run_pretraining": run_pretraining.build_parser}


@pytest.mark.parametrize("script", sorted(NVIDIA_OPTIONS))
def test_every_nvidia_option_is_ours_of_the_same_kind(script):
    actions = PARSERS[script]()._option_string_actions
    flags, valued = NVIDIA_OPTIONS[script]
    assert [option for option in flags + valued if option not in actions] == []
    # A flag takes no value; BooleanOptionalAction (--do-lower-case / --no-do-lower-case) is a flag too.
    assert [option for option in flags if actions[option].nargs != 0] == []
    assert [option for option in valued if actions[option].nargs == 0] == []


def test_num_steps_per_checkpoint_of_run_squad_is_accepted_with_a_one_line_note(tmp_path, capsys):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n")
    squad = tmp_path / "train.json"
    squad.write_text('{"version": "1.1", "data": []}')
    args = run_squad.parse_args(["--do-train", "--train-file", str(squad), "--vocab-file", str(vocab), "--output-dir",
                                 str(tmp_path / "out"), "--allow-random-weights", "--num-steps-per-checkpoint", "200"])
    assert isinstance(args, argparse.Namespace)
    notes = [line for line in capsys.readouterr().out.splitlines() if "--num-steps-per-checkpoint" in line]
    assert notes == ["run_squad.py: --num-steps-per-checkpoint has no effect here; NVIDIA's run_squad.py does not read "
                     "it either: the fine-tuned model is saved once, after training"]


def test_num_workers_defaults_to_nvidias_one_loader_process():
    defaults = {action.dest: action.default for action in run_pretraining.build_parser()._actions}
    assert defaults["num_workers"] == 1
