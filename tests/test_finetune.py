"""finetune.py and gradient_merge.py: the shared options act the same in run_squad.py and run_glue.py, gradient
merge and data parallelism give exactly the update of one batch of all the sequences, the inner micro-batches
do not all-reduce, a checkpoint without a pooler fine-tunes, batches are padded to a multiple of 8 without
changing any output, and empty data files stop with one line instead of looping forever.

Run as a script under paddle.distributed.launch this module is the worker of the two-rank test.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import paddle
import pytest

import run_glue
import run_squad
from conftest import require_shared
from fine_tuning_runs import (
    common_argv,
    fine_tuning_workspace,
    logged,
    parameter,
    params,
    record_amp_policies,
    record_optimizer_options,
    run_in_process,
    run_script,
    stage_args,
    tiny_config,
    use_gpu_amp_policy,
)
from finetuning import finetune
from finetuning.feature_batching import pad_token_rows
from finetuning.glue_data import ClassificationFeature, collate_classification
from messages import assert_one_line
from modeling import BertConfig, BertForQuestionAnswering, BertForSequenceClassification
from pretraining_runs import checkpoint_params, pretraining_argv, step_folders
from pretraining_runs import train as pretrain
from squad_utils import SquadFeature, collate_features
from training.amp import AmpPolicy
from training.gradient_merge import merged_backward
from training.runtime import init_data_parallel
from utils.dllog import DLLogger, read_report


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """Six SQuAD dev questions, 16 MRPC train rows, the tiny model and a copy of its checkpoint without the pooler."""
    folder = fine_tuning_workspace(tmp_path_factory.mktemp("finetune"), squad={"squad.json": (1, 6)},
                                   mrpc={"mrpc.tsv": ("train", 16)})
    state = paddle.load(str(folder / "pretrain" / "1000" / "bert_paddle.pdparams"))
    paddle.save({name: value for name, value in state.items() if not name.startswith("bert.pooler.")},
                str(folder / "no_pooler.pdparams"))
    return folder


@dataclasses.dataclass(frozen=True)
class Task:
    """One fine-tuning script with the task options and the data file (trained on and predicted) of its runs."""

    script: ModuleType
    task_argv: tuple[str, ...]
    data: str

    def run(self, workspace: Path, name: str, *args) -> tuple[Path, list[dict]]:
        output_dir = workspace / f"{self.script.__name__}-{name}"  # reports are appended to: one folder a run
        return run_in_process(self.script.main, [*common_argv(workspace, output_dir), *self.task_argv, *args],
                              output_dir)

    def train_args(self, workspace: Path, *extra) -> list:
        return stage_args("train", workspace / self.data, *extra)


TASKS = {
    "squad": Task(run_squad, ("--max-seq-length", "128", "--doc-stride", "64", "--max-query-length", "32"),
                  "squad.json"),
    "glue": Task(run_glue, ("--task-name", "mrpc"), "mrpc.tsv"),
}


@pytest.fixture(params=sorted(TASKS))
def task(request) -> Task:
    return TASKS[request.param]


# ---------------------------------------------------------------------------------------------
# The shared options, in both scripts
# ---------------------------------------------------------------------------------------------


def test_learning_rate_follows_linear_warmup_then_linear_decay(workspace, task):
    _, records = task.run(workspace, "schedule", *task.train_args(
        workspace, "--max-steps", 10, "--epochs", 10, "--learning-rate", 2e-3, "--warmup-proportion", 0.2,
        "--warmup-start-lr", 1e-4, "--log-freq", 1))
    # 10 updates, warmup 0.2 -> W = 2; from 1e-4 up to 2e-3, then down towards 0 at update 11 (lr_scheduler.py)
    expected = [1e-4 + (2e-3 - 1e-4) * k / 2 if k < 2 else 2e-3 * (1 - (k - 2) / 9) for k in range(1, 11)]
    assert logged(records, "learning_rate") == pytest.approx(expected)


def test_optimizer_receives_the_adamw_options(workspace, task, monkeypatch):
    received = record_optimizer_options(monkeypatch)
    task.run(workspace, "adamw", *task.train_args(workspace, "--max-steps", 1, "--beta1", 0.8, "--beta2", 0.99,
                                                  "--epsilon", 1e-7, "--weight-decay", 0.02))
    assert received == {"name": "AdamW", "weight_decay": 0.02, "beta1": 0.8, "beta2": 0.99, "epsilon": 1e-7,
                        "max_grad_norm": 1.0}


def test_report_file_show_config_and_model_prefix(workspace, task):
    report = workspace / "elsewhere" / f"{task.data}.log.json"
    output_dir = workspace / f"prefixed-{task.data}"
    task.script.main([*common_argv(workspace, output_dir), *task.task_argv,
                      *map(str, task.train_args(workspace, "--max-steps", 1)),
                      "--report-file", str(report), "--show-config", "false", "--model-prefix", "mine"])
    assert not (output_dir / "report.json").exists()
    records = read_report(report)
    assert parameter(records, "steps") == [1] and not parameter(records, "vocab_file")
    assert (output_dir / "mine.pdparams").is_file() and (output_dir / "mine_config.json").is_file()
    assert BertConfig.from_json_file(str(output_dir / "mine_config.json")).hidden_size == 128


def test_amp_on_cpu_says_so_in_one_line_and_trains_in_fp32(workspace, task, capsys):
    fp32_dir, _ = task.run(workspace, "fp32", *task.train_args(workspace, "--max-steps", 2))
    amp_dir, _ = task.run(workspace, "amp_cpu", *task.train_args(workspace, "--max-steps", 2, "--amp"))
    assert "--amp is ignored and this run continues in fp32" in capsys.readouterr().out
    for name, value in params(fp32_dir).items():
        np.testing.assert_array_equal(params(amp_dir)[name], value, err_msg=name)


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
@pytest.mark.parametrize(("dynamic", "expected_scale"), [(False, 1e39), (True, 5e38)])
def test_loss_scale_flags(workspace, task, monkeypatch, dynamic, expected_scale):
    # A scale beyond float32's range (3.4e38) makes the scaled loss inf: the update is skipped, and a dynamic
    # scale halves.
    use_gpu_amp_policy(monkeypatch)
    scaling = "--use-dynamic-loss-scaling" if dynamic else "--no-use-dynamic-loss-scaling"
    flags = ["--amp", "--scale-loss", 1e39, scaling]
    output_dir, records = task.run(workspace, f"scale_{dynamic}", *task.train_args(
        workspace, "--max-steps", 1, "--from-pretrained-params", workspace / "pretrain" / "1000", *flags))
    assert logged(records, "skipped_steps") == [1]
    assert logged(records, "loss_scale") == [pytest.approx(expected_scale)]
    pretrained = paddle.load(str(workspace / "pretrain" / "1000" / "bert_paddle.pdparams"))
    np.testing.assert_array_equal(params(output_dir)["bert.encoder.1.output.weight"],
                                  pretrained["bert.encoder.1.output.weight"])


def test_pure_fp16_and_amp_dtype_reach_the_decorated_model(workspace, task, monkeypatch):
    use_gpu_amp_policy(monkeypatch)
    policies = record_amp_policies(monkeypatch)
    task.run(workspace, "pure", *task.train_args(workspace, "--max-steps", 1, "--amp", "--use-pure-fp16",
                                                 "--amp-dtype", "bfloat16"))
    assert [(p.level, p.dtype, p.enabled) for p in policies] == [("O2", "bfloat16", True)]
    with pytest.raises(SystemExit):
        task.script.parse_args([*common_argv(workspace, workspace / "x"), *task.task_argv,
                                *map(str, task.train_args(workspace)), "--use-pure-fp16"])  # needs --amp


def test_lamb_moves_every_weight_matrix_by_the_learning_rate_times_its_norm(workspace, task):
    """LAMB's layer-wise step (You et al. 2020, algorithm 2): w - lr * (||w|| / ||r||) * r, so the first update of
    every weight-decayed tensor has norm lr * ||w||; AdamW's does not."""
    pretrained = paddle.load(str(workspace / "pretrain" / "1000" / "bert_paddle.pdparams"))
    matrices = [name for name, value in pretrained.items()
                if name.startswith("bert.encoder.") and name.endswith(".weight") and len(value.shape) == 2]

    def relative_steps(optimizer):
        output_dir, records = task.run(workspace, f"optimizer_{optimizer}", *task.train_args(
            workspace, "--optimizer", optimizer, "--max-steps", 1, "--warmup-proportion", 1.0, "--warmup-start-lr",
            1e-3, "--learning-rate", 1e-3, "--from-pretrained-params", workspace / "pretrain" / "1000"))
        [learning_rate] = logged(records, "learning_rate")
        trained = params(output_dir)
        return learning_rate, np.array([np.linalg.norm(trained[name] - pretrained[name].numpy())
                                        / np.linalg.norm(pretrained[name].numpy()) for name in matrices])

    learning_rate, lamb = relative_steps("Lamb")
    assert learning_rate == pytest.approx(1e-3)
    np.testing.assert_allclose(lamb, learning_rate, rtol=1e-3)
    _, adamw = relative_steps("AdamW")
    assert np.abs(adamw / learning_rate - 1).max() > 0.1


def test_max_steps_and_epochs_stop_at_whichever_comes_first(workspace, task):
    def steps(name, *flags):
        _, records = task.run(workspace, name, *task.train_args(workspace, *flags, "--log-freq", 1))
        assert parameter(records, "steps") == [len(logged(records, "loss"))]
        return len(logged(records, "loss"))

    one_epoch = steps("one_epoch", "--epochs", 1, "--max-steps", 1000)
    assert one_epoch >= 2
    assert steps("two_epochs", "--epochs", 2, "--max-steps", 1000) == 2 * one_epoch  # the epochs end the run
    assert steps("max_steps", "--epochs", 3, "--max-steps", one_epoch + 1) == one_epoch + 1  # mid-epoch


@pytest.mark.parametrize("enabled", ["true", "false"])
def test_enable_cpu_affinity_pins_this_local_rank_to_its_block_of_cpus(workspace, task, monkeypatch, enabled):
    available = sorted(os.sched_getaffinity(0))
    monkeypatch.setenv("PADDLE_LOCAL_RANK", "1")
    monkeypatch.setenv("PADDLE_LOCAL_SIZE", "2")  # rank 1 of 2 on this node takes the second half of the CPUs
    per_rank = max(1, len(available) // 2)
    expected = available[per_rank % len(available):][:per_rank]
    try:
        _, records = task.run(workspace, f"affinity_{enabled}", *task.train_args(
            workspace, "--max-steps", 1, "--enable-cpu-affinity", enabled))
        pinned = sorted(os.sched_getaffinity(0))
    finally:
        os.sched_setaffinity(0, available)
    if enabled == "true":
        assert parameter(records, "cpu_affinity") == [expected] and pinned == expected
    else:
        assert parameter(records, "cpu_affinity") == [None] and pinned == available


@pytest.mark.parametrize(("extra", "message"), [
    (["--seed", "-1"], "argument --seed: expected a whole number in [0, 4294967295], got '-1'"),
    # NumPy's legacy seeding takes no more than 32 bits; before, such a seed passed the parser.
    (["--seed", str(2**32)], "argument --seed: expected a whole number in [0, 4294967295]"),
    # The optimizer's options check their ranges as pretraining's do (before, fine-tuning took these).
    (["--beta2", "1.0"], "argument --beta2: expected a number in [0, 1), got '1.0'"),
    (["--epsilon", "0"], "argument --epsilon: expected a positive number, got '0'"),
    (["--weight-decay", "-0.5"], "argument --weight-decay: expected a number >= 0, got '-0.5'"),
    (["--warmup-proportion", "1.5"], "argument --warmup-proportion: expected a number in [0, 1], got '1.5'"),
    (["--predict-batch-size", "0"], "argument --predict-batch-size: expected a whole number >= 1, got '0'"),
    (["--epochs", "0"], "argument --epochs: expected a whole number >= 1, got '0'"),
])
def test_out_of_range_options_are_one_line_errors_naming_the_flag(workspace, task, capsys, extra, message):
    with pytest.raises(SystemExit):
        task.script.parse_args([*common_argv(workspace, workspace / "x"), *task.task_argv,
                                *map(str, task.train_args(workspace)), *extra])
    assert f"error: {message}" in capsys.readouterr().err.strip().splitlines()[-1]


def test_predicting_random_weights_needs_allow_random_weights(workspace, task, capsys):
    predict = ["--do-eval", "--predict-file", workspace / task.data]
    with pytest.raises(SystemExit):
        task.run(workspace, "random_refused", *predict)
    assert "would score random weights; add --allow-random-weights" in capsys.readouterr().err
    _, records = task.run(workspace, "random_allowed", *predict, "--allow-random-weights")
    assert logged(records, "F1" if task.script is run_squad else "accuracy")
    assert parameter(records, "init_params") == []  # nothing was loaded


def test_a_malformed_prediction_file_stops_the_run_before_training(workspace, task, tmp_path):
    broken = tmp_path / task.data
    if task.script is run_squad:
        content = json.loads((workspace / task.data).read_text())
        del content["data"][0]["paragraphs"][0]["qas"][3]["question"]
        broken.write_text(json.dumps(content))
        message = "lacks the field \"question\""
    else:
        lines = (workspace / task.data).read_text(encoding="utf-8").split("\n")
        lines[3] = lines[3].rsplit("\t", 1)[0]
        broken.write_text("\n".join(lines), encoding="utf-8")
        message = "expected 5 tab-separated fields, found 4"
    with pytest.raises(ValueError, match=f"^{re.escape(str(broken))}.*{re.escape(message)}"):
        task.run(workspace, "broken_prediction_file", *task.train_args(workspace, "--max-steps", 2), "--do-predict",
                 "--predict-file", broken)
    output_dir = workspace / f"{task.script.__name__}-broken_prediction_file"
    assert not logged(read_report(output_dir / "report.json"), "loss")
    assert not (output_dir / "bert_paddle.pdparams").exists()


# ---------------------------------------------------------------------------------------------
# --from-checkpoint and --last-step-of-checkpoint: the weights of run_pretraining.py's checkpoints
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pretraining_phase(tmp_path_factory) -> Path:
    """The phase folder of a 4-step pretraining run of a hidden-32 BERT with checkpoints at steps 2 and 4."""
    folder = tmp_path_factory.mktemp("pretraining")
    assert pretrain(pretraining_argv(folder, "--num-steps-per-checkpoint", "2")) in (0, None)
    phase = folder / "out" / "custom" / "phase1"
    assert step_folders(folder / "out") == [2, 4]
    return phase


def checkpoint_argv(workspace: Path, output_dir: Path, task: Task, *extra) -> list[str]:
    """A task's command line without --config-file: the checkpoint's config is the model's."""
    return [*common_argv(workspace, output_dir)[:2], "--bert-model", "custom", "--output-dir", str(output_dir),
            *task.task_argv, *map(str, extra)]


@pytest.mark.parametrize(("location", "last_step", "expected_step"),
                         [("phase", "auto", 4), ("phase", "2", 2), ("step 4", "None", 4)])
def test_from_checkpoint_takes_the_weights_and_config_of_the_step_folder(workspace, task, pretraining_phase,
                                                                          location, last_step, expected_step):
    source = pretraining_phase if location == "phase" else pretraining_phase / "4"
    output_dir = workspace / f"{task.script.__name__}-from_checkpoint_{last_step}"
    # learning rate 0: the saved model holds exactly the weights it started from
    task.script.main(checkpoint_argv(workspace, output_dir, task, *task.train_args(
        workspace, "--max-steps", 1, "--learning-rate", 0, "--from-checkpoint", source,
        "--last-step-of-checkpoint", last_step)))
    records = read_report(output_dir / "report.json")
    folder = pretraining_phase / str(expected_step)
    assert parameter(records, "init_params") == [str(folder / "bert_paddle.pdparams")]
    assert parameter(records, "last_step_of_checkpoint") == [expected_step]
    assert parameter(records, "config_file") == [str(folder / "bert_paddle_config.json")]
    assert BertConfig.from_json_file(str(output_dir / "bert_paddle_config.json")).hidden_size == 32
    started = checkpoint_params(pretraining_phase.parent.parent, expected_step)
    trained = params(output_dir)
    encoder = [name for name in started if name.startswith("bert.encoder.")]
    assert encoder
    for name in encoder:
        np.testing.assert_array_equal(trained[name], started[name], err_msg=name)


def test_a_checkpoint_trained_with_another_vocabulary_is_refused_in_one_line(workspace, task, pretraining_phase,
                                                                           tmp_path):
    """A pretraining step folder carries its vocabulary; fine-tuning it with another one would look every token up
    in the wrong embedding row, silently. The same vocabulary (the other tests' runs) passes."""
    folder = tmp_path / "4"
    shutil.copytree(pretraining_phase / "4", folder)
    vocab = require_shared("vocab", "bert-uncased-vocab.txt")
    assert (folder / "bert_paddle_vocab.txt").read_bytes() == vocab.read_bytes()  # what pretraining saved
    (folder / "bert_paddle_vocab.txt").write_bytes(require_shared("vocab", "bert-cased-vocab.txt").read_bytes())
    with pytest.raises(ValueError) as error:
        task.script.main(checkpoint_argv(workspace, tmp_path / "out", task, *task.train_args(
            workspace, "--max-steps", 1, "--from-pretrained-params", folder)))
    assert str(error.value) == (f"--vocab-file {vocab} is not the vocabulary the --from-pretrained-params weights "
                                f"were trained with ({folder / 'bert_paddle_vocab.txt'}): give that one")


@pytest.mark.parametrize(("extra", "message"), [
    (["--last-step-of-checkpoint", "auto"], "--last-step-of-checkpoint needs --from-checkpoint"),
    (["--from-checkpoint", "PHASE"], "phase1: not a checkpoint folder (no bert_paddle_progress.json); for a folder "
                                     "of <step>/ checkpoints add --last-step-of-checkpoint auto or a step"),
    (["--from-checkpoint", "PHASE", "--last-step-of-checkpoint", "3"],
     "phase1/3: no checkpoint folder for step 3 (PHASE holds steps 2, 4)"),
    (["--from-checkpoint", "PHASE/4", "--last-step-of-checkpoint", "2"],
     "phase1/4 holds the checkpoint of step 4, not of --last-step-of-checkpoint 2"),
    (["--from-checkpoint", "EMPTY", "--last-step-of-checkpoint", "auto"],
     "EMPTY: --from-checkpoint holds no checkpoint"),
    # A step folder rotated away (--keep-checkpoint-max), named with its step: the path once said ".../1/1".
    (["--from-checkpoint", "PHASE/1", "--last-step-of-checkpoint", "1"],
     "phase1/1: no checkpoint folder for step 1 (PHASE holds steps 2, 4)"),
    (["--from-checkpoint", "PHASE", "--last-step-of-checkpoint", "0"], "expected None, auto or a step >= 1"),
    (["--from-checkpoint", "PHASE", "--last-step-of-checkpoint", "auto", "--from-pretrained-params", "x"],
     "--from-checkpoint and --from-pretrained-params cannot both be set"),
])
def test_bad_checkpoint_options_are_one_line_errors(workspace, task, pretraining_phase, tmp_path, capsys, extra,
                                                    message):
    places = {"PHASE": pretraining_phase, "PHASE/4": pretraining_phase / "4", "PHASE/1": pretraining_phase / "1",
              "EMPTY": tmp_path}
    extra = [str(places.get(arg, arg)) for arg in extra]
    with pytest.raises(SystemExit):
        task.script.parse_args(checkpoint_argv(workspace, workspace / "x", task, *task.train_args(workspace),
                                               *extra))
    message = message.replace("EMPTY", str(tmp_path)).replace("PHASE", str(pretraining_phase))
    assert message in capsys.readouterr().err.strip().splitlines()[-1]


# ---------------------------------------------------------------------------------------------
# Empty data
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("flag", ["--train-file", "--predict-file"])
def test_an_empty_data_file_is_a_one_line_error_naming_it(workspace, task, tmp_path, flag):
    # Before, an empty training set drew batches forever: the timeout makes such a hang a failure.
    empty = tmp_path / task.data
    if task.script is run_squad:
        empty.write_text(json.dumps({"version": "1.1", "data": []}))
    else:
        empty.write_bytes((workspace / task.data).read_bytes().split(b"\n")[0] + b"\n")  # the header alone
    action = "--do-train" if flag == "--train-file" else "--do-predict"
    script = f"{task.script.__name__}.py"
    result = run_script(script, [*common_argv(workspace, tmp_path / "out"), *task.task_argv, action, flag, empty,
                                 "--allow-random-weights"], timeout=60)
    assert result.returncode == 1
    assert_one_line(result.stderr.strip().splitlines()[-1], f"{script}: {empty}: ", "no examples")


def test_training_batches_of_no_features_stop_at_once():
    with pytest.raises(ValueError, match="no training features"):
        next(finetune.training_batches([], list, batch_size=2, seed=0, rank=0, world_size=1))


# ---------------------------------------------------------------------------------------------
# Gradient merge, in one process
# ---------------------------------------------------------------------------------------------


def classification_features(count: int, seed: int) -> list[ClassificationFeature]:
    """Sentences of 4 to 20 random word pieces with random labels."""
    rng = np.random.default_rng(seed)
    features = []
    for _ in range(count):
        length = int(rng.integers(4, 21))
        features.append(ClassificationFeature([101, *rng.integers(1000, 5000, length - 2).tolist(), 102],
                                              [0] * length, int(rng.integers(0, 2))))
    return features


def tiny_classifier(seed: int = 0) -> BertForSequenceClassification:
    paddle.seed(seed)
    return BertForSequenceClassification(BertConfig.from_dict(tiny_config()), 2)


def training_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    finetune.add_training_arguments(parser, unit="examples", learning_rate=1e-4, warmup_proportion=0.0)
    return parser.parse_args(argv)


def quiet_session() -> finetune.Session:
    return finetune.Session(rank=0, world_size=1, num_threads=1, logger=DLLogger(None, enabled=False),
                            tokenizer=None, policy=AmpPolicy())


def train_tiny(features: list[ClassificationFeature], batch_size: int, merge: int) -> dict[str, np.ndarray]:
    model = finetune.train(tiny_classifier(), features, lambda batch: collate_classification(batch, 0, multiple=8),
                           run_glue.classification_loss,
                           training_args("--max-steps", "2", "--train-batch-size", str(batch_size),
                                         "--gradient-merge-steps", str(merge)),
                           quiet_session(), unit="examples")
    return {name: value.numpy() for name, value in model.state_dict().items()}


def largest_difference(first: dict[str, np.ndarray], second: dict[str, np.ndarray]) -> float:
    assert first.keys() == second.keys()
    return max(float(np.abs(first[name] - second[name]).max()) for name in first)


def test_merged_micro_batches_train_as_one_batch_of_all_their_sequences():
    # 13 examples: batches of 8 are [8, 5]; micro-batches of 4 are [4, 4] and [4, 1], so the second update merges
    # micro-batches of different sizes, which a plain division of each mean loss by k gets wrong.
    features = classification_features(13, seed=0)
    single = train_tiny(features, batch_size=8, merge=1)
    assert largest_difference(train_tiny(features, batch_size=4, merge=2), single) <= 1e-6
    # The check can fail: updates from the first micro-batches alone move the weights measurably elsewhere.
    assert largest_difference(train_tiny(features, batch_size=4, merge=1), single) > 1e-5


def gradients(model: paddle.nn.Layer) -> dict[str, np.ndarray]:
    return {name: parameter.grad.numpy().copy() for name, parameter in model.named_parameters()
            if parameter.grad is not None}


def one_batch_gradients(features: list[ClassificationFeature], seed: int = 0) -> dict[str, np.ndarray]:
    """Gradients of the mean loss over all features as one batch."""
    model = tiny_classifier(seed)
    run_glue.classification_loss(model, collate_classification(features, 0)).backward()
    return gradients(model)


def test_each_micro_batch_weighs_by_its_share_of_the_sequences():
    features = classification_features(7, seed=1)
    micro_batches = [collate_classification(part, 0) for part in (features[:5], features[5:6], features[6:])]
    model = tiny_classifier()
    losses = merged_backward(model, micro_batches, lambda batch: (len(batch["labels"]),),
                             lambda network, batch: [(run_glue.classification_loss(network, batch), 0)], 1)
    expected = one_batch_gradients(features)
    assert largest_difference(gradients(model), expected) <= 1e-6
    whole_loss = run_glue.classification_loss(tiny_classifier(), collate_classification(features, 0))
    assert losses == [pytest.approx(float(whole_loss), abs=1e-6)]
    # The former convention, each micro-batch's mean divided by k, weighs the lone examples 5 times too much.
    model = tiny_classifier()
    merged_backward(model, micro_batches, lambda batch: (1,),
                    lambda network, batch: [(run_glue.classification_loss(network, batch), 0)], 1)
    assert largest_difference(gradients(model), expected) > 1e-4


class RecordingNetwork:
    """Stands in for paddle.DataParallel: records no_sync scopes and forward passes."""

    def __init__(self, model: paddle.nn.Layer, events: list[str]):
        self.model = model
        self.events = events

    def no_sync(self):
        import contextlib

        @contextlib.contextmanager
        def scope():
            self.events.append("no_sync{")
            yield
            self.events.append("}")
        return scope()

    def __call__(self, *inputs):
        self.events.append("forward")
        return self.model(*inputs)


def test_terms_of_two_kinds_weigh_by_their_own_counts_and_only_the_last_backward_syncs():
    # Pretraining's two terms: one mean over a count that differs from the sequences (here: label-1 examples).
    features = classification_features(6, seed=2)
    micro_batches = [collate_classification(part, 0) for part in (features[:2], features[2:])]
    events: list[str] = []
    model = tiny_classifier()
    model.classifier.weight.register_hook(lambda grad: events.append("backward"))
    reduced = []

    def all_reduce(values):  # as if a second rank had exactly the same counts
        reduced.append(values.numpy().tolist())
        return values * 2

    def terms(network, batch):
        logits = network(*finetune.model_inputs(batch))
        labels = paddle.to_tensor(batch["labels"])
        positives = paddle.to_tensor((batch["labels"] == 1).astype("float32"))
        positive_mean = (logits[:, 1] * positives).sum() / paddle.clip(positives.sum(), min=1.0)
        return [(paddle.nn.functional.cross_entropy(logits, labels), 1), (positive_mean, 0)]

    def counts(batch):
        return (int((batch["labels"] == 1).sum()), len(batch["labels"]))

    shares = merged_backward(RecordingNetwork(model, events), micro_batches, counts, terms, 2, all_reduce=all_reduce)
    assert events == ["no_sync{", "forward", "backward", "}", "forward", "backward"]
    positives = sum(feature.label_id for feature in features)
    assert reduced == [[positives, 6]]  # one all-reduce, of the counts
    # Per rank, each term is the share of its mean over 2 ranks: half of this rank's mean over its items.
    everything = collate_classification(features, 0)
    logits = tiny_classifier()(*finetune.model_inputs(everything)).numpy()
    expected_cross_entropy = float(run_glue.classification_loss(tiny_classifier(), everything)) / 2
    expected_positive = float(logits[everything["labels"] == 1, 1].mean()) / 2
    assert shares == pytest.approx([expected_cross_entropy, expected_positive], abs=1e-6)


# ---------------------------------------------------------------------------------------------
# Gradient merge on two ranks
# ---------------------------------------------------------------------------------------------

# Each rank's micro-batches (features of classification_features(9, seed=3)): uneven within and across ranks.
RANK_MICRO_BATCHES = {0: [[0, 1, 2], [3, 4]], 1: [[5, 6, 7], [8]]}


def two_rank_worker(output_dir: Path) -> None:
    """On each rank: merged_backward of RANK_MICRO_BATCHES[rank] through DataParallel; saves the classifier's
    gradient as the second micro-batch starts (after the first backward) and every gradient at the end."""
    rank, world_size = init_data_parallel()
    features = classification_features(9, seed=3)
    model = tiny_classifier()
    network = paddle.DataParallel(model)
    snapshots = []

    def terms(network, batch):
        grad = model.classifier.weight.grad
        snapshots.append(None if grad is None else grad.numpy().copy())
        return [(run_glue.classification_loss(network, batch), 0)]

    micro_batches = [collate_classification([features[i] for i in part], 0, multiple=8)
                     for part in RANK_MICRO_BATCHES[rank]]
    merged_backward(network, micro_batches, lambda batch: (len(batch["labels"]),), terms, world_size)
    np.savez(output_dir / f"rank{rank}.npz", after_first=snapshots[1],
             **{name.replace(".", "__"): grad for name, grad in gradients(model).items()})


@pytest.mark.slow  # in the slow tier (tests/conftest.py)
def test_two_ranks_sync_once_and_equal_one_process_on_the_combined_batch(tmp_path):
    result = run_script("tests/test_finetune.py", [tmp_path], timeout=300, launch_ranks=2,
                        log_dir=tmp_path / "launch_logs")
    logs = "\n".join(path.read_text()[-2000:] for path in sorted((tmp_path / "launch_logs").glob("workerlog.*")))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:] + logs
    ranks = [dict(np.load(tmp_path / f"rank{rank}.npz")) for rank in (0, 1)]
    # Before the last micro-batch each rank holds its own gradient: the first backward did not all-reduce.
    first_0, first_1 = ranks[0].pop("after_first"), ranks[1].pop("after_first")
    assert np.abs(first_0 - first_1).max() > 1e-4
    features = classification_features(9, seed=3)
    expected = {name.replace(".", "__"): grad for name, grad in one_batch_gradients(features).items()}
    for rank in ranks:
        assert largest_difference(rank, expected) <= 1e-6
    # The first backward gave rank 0 exactly its first micro-batch's share: 3 of the 9 sequences, times 2 ranks.
    model = tiny_classifier()
    (run_glue.classification_loss(model, collate_classification(features[:3], 0)) * (3 / 9 * 2)).backward()
    np.testing.assert_allclose(first_0, model.classifier.weight.grad.numpy(), atol=1e-6)


# ---------------------------------------------------------------------------------------------
# Checkpoints without a pooler
# ---------------------------------------------------------------------------------------------


def test_squad_fine_tunes_from_a_checkpoint_without_the_pooler(workspace):
    output_dir, records = TASKS["squad"].run(workspace, "squad_no_pooler", *TASKS["squad"].train_args(
        workspace, "--from-pretrained-params", workspace / "no_pooler.pdparams", "--max-steps", 2),
        "--do-predict", "--predict-file", workspace / "squad.json")
    assert parameter(records, "newly_initialized") == [["bert.pooler.dense.bias", "bert.pooler.dense.weight",
                                                         "qa_outputs.bias", "qa_outputs.weight"]]
    assert len(logged(records, "loss")) == 1
    assert len(json.loads((output_dir / "predictions.json").read_text())) == 6
    assert any(name.startswith("bert.pooler.") for name in params(output_dir))


def test_glue_loads_a_checkpoint_without_the_pooler_and_says_it_starts_random(workspace, capsys):
    _, records = TASKS["glue"].run(workspace, "glue_no_pooler", "--from-pretrained-params",
                                   workspace / "no_pooler.pdparams", "--do-eval", "--predict-file",
                                   workspace / "mrpc.tsv")
    assert "pooler, classifier not in the file, starting from random initialisation" in capsys.readouterr().out
    assert sorted(parameter(records, "newly_initialized")[0]) == [
        "bert.pooler.dense.bias", "bert.pooler.dense.weight", "classifier.bias", "classifier.weight"]
    assert logged(records, "accuracy")


# ---------------------------------------------------------------------------------------------
# Padding to a multiple of 8
# ---------------------------------------------------------------------------------------------


def test_padding_rounds_the_longest_feature_up_to_the_multiple_but_not_past_max_length():
    def rows(*lengths):
        return [ClassificationFeature(list(range(1, n + 1)), [1] * n, 0) for n in lengths]

    batch = pad_token_rows(rows(3, 5), pad_token_id=0, multiple=8)
    np.testing.assert_array_equal(batch["input_ids"], [[1, 2, 3, 0, 0, 0, 0, 0], [1, 2, 3, 4, 5, 0, 0, 0]])
    np.testing.assert_array_equal(batch["token_type_ids"], [[1, 1, 1, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 0, 0, 0]])
    np.testing.assert_array_equal(batch["attention_mask"], [[1, 1, 1, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 0, 0, 0]])
    assert pad_token_rows(rows(8), 0, multiple=8)["input_ids"].shape == (1, 8)
    assert pad_token_rows(rows(9, 2), 0, multiple=8)["input_ids"].shape == (2, 16)
    assert pad_token_rows(rows(9), 0, multiple=8, max_length=12)["input_ids"].shape == (1, 12)
    assert pad_token_rows(rows(9), 0)["input_ids"].shape == (1, 9)
    assert collate_classification(rows(3, 5), 0, multiple=8)["input_ids"].shape == (2, 8)


def test_training_batches_of_both_scripts_are_padded_to_a_multiple_of_8(workspace, task, monkeypatch):
    lengths = []
    original = finetune.merged_backward

    def recording(network, micro_batches, *args, **kwargs):
        lengths.extend(batch["input_ids"].shape[1] for batch in micro_batches)
        return original(network, micro_batches, *args, **kwargs)
    monkeypatch.setattr(finetune, "merged_backward", recording)
    task.run(workspace, "padded", *task.train_args(workspace, "--max-steps", 3))
    assert len(lengths) == 3 and all(length % 8 == 0 for length in lengths)


def test_padding_changes_no_output():
    paddle.seed(0)
    config = BertConfig.from_dict(tiny_config())
    features = classification_features(3, seed=9)  # 11, 19 and 9 tokens
    classifier = tiny_classifier()
    classifier.eval()
    tight, padded = (collate_classification(features, 0, multiple=multiple) for multiple in (1, 8))
    assert tight["input_ids"].shape[1] % 8 != 0 and padded["input_ids"].shape[1] % 8 == 0
    np.testing.assert_allclose(classifier(*finetune.model_inputs(padded)).numpy(),
                               classifier(*finetune.model_inputs(tight)).numpy(), atol=1e-5)
    squad_features = [SquadFeature(i, 0, f.input_ids, f.token_type_ids, np.zeros(0), np.zeros(0), np.zeros(0))
                      for i, f in enumerate(features)]
    span_model = BertForQuestionAnswering(config)
    span_model.eval()
    tight, padded = (collate_features(squad_features, 0, is_training=False, multiple=multiple) for multiple in (1, 8))
    length = tight["input_ids"].shape[1]
    for tight_logits, padded_logits in zip(span_model(*finetune.model_inputs(tight)),
                                           span_model(*finetune.model_inputs(padded)), strict=True):
        np.testing.assert_allclose(padded_logits.numpy()[:, :length], tight_logits.numpy(), atol=1e-5)


if __name__ == "__main__":
    two_rank_worker(Path(sys.argv[1]))
