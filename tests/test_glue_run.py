"""run_glue.py end to end with a tiny BERT on slices of MRPC: fine-tuning, prediction, evaluation, reloading, data
parallelism, named-column tables, and the effect of every command-line flag."""

from __future__ import annotations

import csv

import numpy as np
import paddle
import pytest

import run_glue
from conftest import ROOT, require_shared
from fine_tuning_runs import (
    TINY_CONFIG,
    common_argv,
    fine_tuning_workspace,
    logged,
    parameter,
    params,
    run_in_process,
    run_script,
    stage_args,
)
from finetuning.feature_batching import batch_indices
from finetuning.glue_data import convert_examples_to_features, read_glue_examples
from finetuning.glue_metrics import accuracy, binary_f1, roc_auc
from messages import assert_one_line
from modeling import BertConfig
from tokenizer import BertTokenizer
from utils.dllog import read_report

TRAIN_ROWS, DEV_ROWS = 32, 24


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """MRPC slices (kept byte for byte: BOM, header, quotes), the train slice as a CSV with other column names, a
    dropout-free tiny config and a pretraining checkpoint with random weights."""
    folder = fine_tuning_workspace(tmp_path_factory.mktemp("glue"),
                                   mrpc={"train.tsv": ("train", TRAIN_ROWS), "dev.tsv": ("dev", DEV_ROWS)})
    with open(folder / "train.tsv", encoding="utf-8-sig", newline="") as source, \
            open(folder / "train.csv", "w", encoding="utf-8", newline="") as target:
        writer = csv.writer(target)
        writer.writerow(["y", "pair", "first", "second"])
        for fields in list(csv.reader(source, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]:
            writer.writerow([fields[0], f"{fields[1]}-{fields[2]}", fields[3], fields[4]])
    return folder


def _common(workspace, output_dir, task="mrpc"):
    return ["--task-name", task, *common_argv(workspace, output_dir)]


def run(workspace, output_name, *args, task="mrpc"):
    """run_glue.main in process; returns the output folder and the report's records."""
    return run_in_process(run_glue.main, [*_common(workspace, workspace / output_name, task), *args],
                          workspace / output_name)


def predictions(output_dir):
    """(ids, labels, probabilities) of predictions.tsv."""
    with open(output_dir / "predictions.tsv", encoding="utf-8", newline="") as handle:
        rows = list(csv.reader(handle, delimiter="\t"))
    assert rows[0] == ["id", "label", "probability"]
    return [row[0] for row in rows[1:]], [row[1] for row in rows[1:]], np.array([float(row[2]) for row in rows[1:]])


def train_args(workspace, *extra, data="train.tsv"):
    return stage_args("train", workspace / data, *extra)


def predict_args(workspace, *extra, data="dev.tsv"):
    return stage_args("predict", workspace / data, *extra)


@pytest.fixture(scope="module")
def fine_tuned(workspace):
    """30 updates on the train slice, then predictions for that same slice, which the model should now know."""
    return run(workspace, "fine_tuned",
               *train_args(workspace, "--from-pretrained-params", workspace / "pretrain" / "1000", "--max-steps", 30,
                           "--epochs", 10, "--learning-rate", 2e-3, "--warmup-proportion", 0.1,
                           "--warmup-start-lr", 1e-4, "--log-freq", 1),
               *predict_args(workspace, "--do-eval", data="train.tsv"))


def test_fine_tunes_predicts_and_evaluates(workspace, fine_tuned):
    output_dir, records = fine_tuned
    losses = logged(records, "loss")
    assert len(losses) == 30
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5])
    # everything but the classifier came from the pretraining checkpoint, whose heads went unused
    assert parameter(records, "newly_initialized") == [["classifier.bias", "classifier.weight"]]
    assert parameter(records, "unused_params")[0] > 0

    gold = read_glue_examples("mrpc", workspace / "train.tsv")
    ids, labels, probabilities = predictions(output_dir)
    assert ids == [example.guid for example in gold] and ids[0] == "702876-702977"
    assert np.all((probabilities >= 0.5) & (probabilities <= 1.0))  # the predicted class of two is the likelier
    gold_ids = np.array([int(example.label) for example in gold])
    predicted_ids = np.array([int(label) for label in labels])
    assert accuracy(gold_ids, predicted_ids) >= 0.9  # the untrained model scores about 0.6 (the majority class)
    positive_probability = np.where(predicted_ids == 1, probabilities, 1.0 - probabilities)
    [metrics] = [record["data"] for record in records if record.get("step") == [] and "accuracy" in record["data"]]
    assert metrics == pytest.approx({"accuracy": accuracy(gold_ids, predicted_ids),
                                     "f1": binary_f1(gold_ids, predicted_ids),
                                     "auc": roc_auc(gold_ids, positive_probability)}, abs=1e-5)

    saved = params(output_dir)
    assert saved["classifier.weight"].shape == (128, 2) and not any(name.startswith("cls.") for name in saved)
    assert BertConfig.from_json_file(str(output_dir / "bert_paddle_config.json")).hidden_size == 128


def test_saved_model_reloads_through_init_checkpoint(workspace, fine_tuned):
    output_dir, records = fine_tuned
    reloaded_dir, reloaded_records = run(workspace, "reloaded", *predict_args(
        workspace, "--do-eval", "--init-checkpoint", output_dir, data="train.tsv"))
    assert (reloaded_dir / "predictions.tsv").read_text() == (output_dir / "predictions.tsv").read_text()
    assert logged(reloaded_records, "accuracy") == logged(records, "accuracy")
    assert parameter(reloaded_records, "newly_initialized") == [[]]


def test_exported_model_predicts_the_same_labels(workspace, fine_tuned):
    output_dir, records = fine_tuned
    export_dir = workspace / "exported_glue"
    run(workspace, "export_only", "--init-checkpoint", output_dir, "--export-dir", export_dir)
    assert (export_dir / "bert_paddle.pdiparams").is_file()
    exported_dir, exported_records = run(workspace, "from_exported", *predict_args(
        workspace, "--do-eval", "--inference-model-dir", export_dir, data="train.tsv"))
    ids, labels, probabilities = predictions(exported_dir)
    reference_ids, reference_labels, reference_probabilities = predictions(output_dir)
    assert (ids, labels) == (reference_ids, reference_labels)
    np.testing.assert_allclose(probabilities, reference_probabilities, atol=1e-4)
    assert logged(exported_records, "accuracy") == pytest.approx(logged(records, "accuracy"))


@pytest.fixture(scope="module")
def two_steps_batch_8(workspace):
    """Two updates (only the first has a learning rate above 0) from the pretraining checkpoint, then predictions."""
    output_dir, _ = run(workspace, "batch8", *train_args(
        workspace, "--from-pretrained-params", workspace / "pretrain" / "1000", "--max-steps", 2,
        "--learning-rate", 1e-3), *predict_args(workspace))
    return output_dir


def _two_steps(workspace, name, *extra, task="mrpc", data="train.tsv"):
    """As two_steps_batch_8, with other options; a custom task only trains."""
    return run(workspace, name, *train_args(workspace, "--from-pretrained-params", workspace / "pretrain" / "1000",
                                            "--max-steps", 2, "--learning-rate", 1e-3, *extra, data=data),
               *(predict_args(workspace) if task == "mrpc" else []), task=task)[0]


def _assert_same_params(output_dir, reference_dir, atol=1e-6):
    expected = params(reference_dir)
    actual = params(output_dir)
    assert actual.keys() == expected.keys()
    for name, value in expected.items():
        np.testing.assert_allclose(actual[name], value, rtol=1e-4, atol=atol, err_msg=name)


def test_gradient_merge_equals_the_larger_batch(workspace, two_steps_batch_8):
    merged_dir = _two_steps(workspace, "merged", "--train-batch-size", 4, "--gradient-merge-steps", 2)
    _assert_same_params(merged_dir, two_steps_batch_8)


def test_seed_changes_initialisation_and_data_order(workspace, two_steps_batch_8):
    other_dir = _two_steps(workspace, "seed7", "--seed", 7)
    assert not np.allclose(params(other_dir)["classifier.weight"], params(two_steps_batch_8)["classifier.weight"])


def test_data_parallel_matches_a_single_process_with_the_global_batch(workspace, two_steps_batch_8):
    output_dir = workspace / "data_parallel"
    result = run_script("run_glue.py", [*_common(workspace, output_dir), "--train-batch-size", "4",
                                        *train_args(workspace, "--from-pretrained-params",
                                                    workspace / "pretrain" / "1000", "--max-steps", 2,
                                                    "--learning-rate", 1e-3), *predict_args(workspace)],
                        timeout=300, launch_ranks=2, log_dir=workspace / "launch_logs")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert parameter(read_report(output_dir / "report.json"), "world_size") == [2]
    _assert_same_params(output_dir, two_steps_batch_8, atol=1e-5)
    ids, _, probabilities = predictions(output_dir)  # rank 0 alone predicts, every example once
    assert len(ids) == DEV_ROWS
    np.testing.assert_allclose(probabilities, predictions(two_steps_batch_8)[2], atol=1e-4)


def test_fuse_mha_trains_the_same_model_from_an_unfused_checkpoint(workspace, two_steps_batch_8):
    fused_dir = _two_steps(workspace, "fused", "--fuse-mha")
    fused, unfused = params(fused_dir), params(two_steps_batch_8)
    assert any(".attention.qkv." in name for name in fused) and not any(".attention.query." in n for n in fused)
    query = unfused["bert.encoder.0.attention.query.weight"]
    np.testing.assert_allclose(fused["bert.encoder.0.attention.qkv.weight"][:, :query.shape[1]], query, atol=1e-6)
    np.testing.assert_allclose(predictions(fused_dir)[2], predictions(two_steps_batch_8)[2], atol=1e-5)


def test_packed_rows_train_the_same_model(workspace, two_steps_batch_8):
    # The tiny config has no dropout, so packing leaves each example's function, and so the update, as it was.
    packed_dir = _two_steps(workspace, "packed", "--pack-sequences")
    _assert_same_params(packed_dir, two_steps_batch_8, atol=1e-5)
    # The report's padding share, against the rule counted here: the two batches of 8 (seed 42's first epoch),
    # each row as long as the batch's longest example rounded up to 8 tokens.
    tokenizer = BertTokenizer(str(require_shared("vocab", "bert-uncased-vocab.txt")))
    examples = read_glue_examples("mrpc", workspace / "train.tsv", require_labels=True)
    lengths = [len(feature.input_ids) for feature in convert_examples_to_features(examples, tokenizer, 128, ["0", "1"])]
    drawn = [[lengths[i] for i in indices] for indices in batch_indices(len(lengths), 8, shuffle=True, seed=42)][:2]
    slots = sum(len(batch) * (-(-max(batch) // 8) * 8) for batch in drawn)
    expected = 1 - sum(map(sum, drawn)) / slots
    [padded] = logged(read_report(two_steps_batch_8 / "report.json"), "padding_fraction")
    [packed] = logged(read_report(packed_dir / "report.json"), "padding_fraction")
    assert padded == pytest.approx(expected, abs=1e-9) and expected > 0.1
    assert 0 <= packed < padded
    # Micro-batches of 3 whose packed rows differ in number: the merge weighs them by examples, not rows.
    merged = _two_steps(workspace, "merged_3", "--train-batch-size", 3, "--gradient-merge-steps", 2)
    packed_merged = _two_steps(workspace, "packed_merged_3", "--train-batch-size", 3, "--gradient-merge-steps", 2,
                               "--pack-sequences")
    _assert_same_params(packed_merged, merged, atol=1e-5)


@pytest.mark.parametrize(("extra", "message"), [
    (["--train-batch-size", "1"], "--train-batch-size 1: --pack-sequences packs the samples of one micro-batch"),
    (["--max-seq-length", "40"], "--pack-sequences cannot pack these samples: the shortest two have"),
])
def test_packing_that_would_change_nothing_is_refused(workspace, extra, message, tmp_path):
    result = run_script("run_glue.py", [*_common(workspace, tmp_path / "out"),
                                        *train_args(workspace, "--max-steps", 1, "--pack-sequences"), *extra])
    assert result.returncode == 1
    line = assert_one_line(result.stderr.strip().splitlines()[-1], "run_glue.py: ", message)
    assert extra[0] in line and ("train.tsv" in line or extra[0] == "--train-batch-size")
    assert not (tmp_path / "out" / "bert_paddle.pdparams").exists()


def test_named_columns_of_a_csv_train_like_the_mrpc_reader(workspace, two_steps_batch_8):
    columns = ["--text-a-column", "first", "--text-b-column", "second", "--label-column", "y", "--labels", "0,1",
               "--id-column", "pair"]
    custom_dir = _two_steps(workspace, "custom_csv", *columns, task="custom", data="train.csv")
    _assert_same_params(custom_dir, two_steps_batch_8)
    # Without the second text no token has segment 1, so its embedding gets no gradient and keeps its pretrained
    # value (up to weight decay, a relative 5e-6 here); the pair model moved it by about the learning rate.
    single_dir = _two_steps(workspace, "custom_single", "--text-a-column", "first", *columns[4:], task="custom",
                            data="train.csv")
    name = "bert.embeddings.token_type_embeddings.weight"
    pretrained = paddle.load(str(workspace / "pretrain" / "1000" / "bert_paddle.pdparams"))[name].numpy()[1]
    np.testing.assert_allclose(params(single_dir)[name][1], pretrained, rtol=1e-4)
    assert not np.allclose(params(two_steps_batch_8)[name][1], pretrained, rtol=1e-2)


def test_unlabelled_table_is_predicted_with_the_given_label_names(workspace, two_steps_batch_8, tmp_path):
    table = tmp_path / "test.tsv"
    dev = read_glue_examples("mrpc", workspace / "dev.tsv")
    table.write_text("sentence\n" + "".join(f"{example.text_a}\n" for example in dev), encoding="utf-8")
    output_dir, records = run(workspace, "unlabelled", "--init-checkpoint", two_steps_batch_8 / "bert_paddle.pdparams",
                              "--do-predict", "--predict-file", table, "--text-a-column", "sentence",
                              "--label-column", "label", "--labels", "no,yes", task="custom")
    ids, labels, _ = predictions(output_dir)
    assert ids == [str(row) for row in range(DEV_ROWS)]
    assert set(labels) <= {"no", "yes"} and labels
    assert not logged(records, "accuracy")


def test_epochs_decide_the_length_without_max_steps(workspace):
    _, records = run(workspace, "epochs", *train_args(workspace, "--epochs", 2, "--train-batch-size", 24,
                                                      "--log-freq", 1000))
    steps = [record["step"] for record in records if record["type"] == "LOG" and "loss" in record["data"]]
    # 32 examples in batches of 24 make 2 updates per epoch; only the last update is logged, in epoch 1
    assert steps == [[1, 2 * 2]]
    assert parameter(records, "training_examples") == [TRAIN_ROWS]


def test_do_lower_case_changes_tokenization(workspace):
    common = ["--from-pretrained-params", workspace / "pretrain" / "1000"]
    auto_dir, _ = run(workspace, "case_auto", *predict_args(workspace, *common))
    lower_dir, _ = run(workspace, "case_lower", *predict_args(workspace, *common, "--do-lower-case"))
    cased_dir, _ = run(workspace, "case_cased", *predict_args(workspace, *common, "--no-do-lower-case"))
    auto = (auto_dir / "predictions.tsv").read_text()
    assert auto == (lower_dir / "predictions.tsv").read_text()  # the uncased vocab is detected
    assert auto != (cased_dir / "predictions.tsv").read_text()


def test_eval_alone_scores_without_writing_predictions(workspace):
    output_dir, records = run(workspace, "eval_only", "--do-eval", "--predict-file", workspace / "dev.tsv",
                              "--allow-random-weights")
    assert not (output_dir / "predictions.tsv").exists()
    assert len(logged(records, "accuracy")) == len(logged(records, "f1")) == len(logged(records, "auc")) == 1
    assert not (output_dir / "bert_paddle.pdparams").exists()  # nothing trained, nothing saved


def test_predict_batch_size_and_max_seq_length_shape_the_batches(workspace, monkeypatch):
    shapes = []
    original = run_glue.collate

    def recording(features, pad_token_id, max_seq_length):
        batch = original(features, pad_token_id, max_seq_length)
        shapes.append(batch["input_ids"].shape)
        return batch
    monkeypatch.setattr(run_glue, "collate", recording)
    run(workspace, "shapes", *predict_args(workspace, "--predict-batch-size", 5, "--max-seq-length", 20,
                                          "--allow-random-weights"))
    assert [shape[0] for shape in shapes] == [5] * (DEV_ROWS // 5) + [DEV_ROWS % 5]
    assert {shape[1] for shape in shapes} == {20}  # every MRPC pair is longer, so each batch is cut to 20


def test_defaults():
    defaults = run_glue.parse_args(["--task-name", "MRPC", "--vocab-file", str(TINY_CONFIG), "--output-dir", "x",
                                    "--do-train", "--train-file", str(TINY_CONFIG)])
    assert (defaults.task_name, defaults.learning_rate, defaults.warmup_proportion, defaults.max_seq_length,
            defaults.epsilon, defaults.weight_decay) == ("mrpc", 5e-5, 0.1, 128, 1e-6, 0.01)


def test_bert_model_names_a_bundled_config_and_max_steps_minus_one_means_unset():
    args = run_glue.parse_args(["--task-name", "rte", "--vocab-file", str(TINY_CONFIG), "--output-dir", "x",
                                "--do-train", "--train-file", str(TINY_CONFIG), "--bert-model", "bert-base-uncased",
                                "--max-steps", "-1"])
    assert args.config_file == str(ROOT / "bert_configs" / "bert-base-uncased.json")
    assert args.max_steps is None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--task-name", "mrpc", "--do-train"], "--do-train needs --train-file"),
        (["--task-name", "mrpc", "--do-eval"], "--do-predict and --do-eval need --predict-file"),
        (["--task-name", "mrpc"], "nothing to do"),
        (["--task-name", "squad", "--do-predict"], "invalid choice: 'squad'"),
        (["--task-name", "mrpc", "--do-predict", "--predict-file", "missing.tsv"],
         "--predict-file missing.tsv: file not found"),
        (["--task-name", "custom", "--do-predict", "--predict-file", str(TINY_CONFIG), "--text-a-column", "a",
          "--label-column", "y"], "--task-name custom needs --labels"),
        (["--task-name", "custom", "--do-predict", "--predict-file", str(TINY_CONFIG), "--text-a-column", "a",
          "--label-column", "y", "--labels", "yes,yes"], "--labels yes,yes: give two or more different labels"),
        (["--task-name", "sst-2", "--do-predict", "--predict-file", str(TINY_CONFIG), "--labels", "0,1"],
         "--labels is only used with --task-name custom"),
        (["--task-name", "mrpc", "--do-predict", "--predict-file", str(TINY_CONFIG), "--max-seq-length", "2"],
         "--max-seq-length must be at least 3"),
        (["--task-name", "mrpc", "--do-predict", "--predict-file", str(TINY_CONFIG), "--pack-sequences"],
         "--pack-sequences packs the training batches: it needs --do-train"),
    ],
)
def test_bad_arguments_are_rejected(argv, message, capsys):
    with pytest.raises(SystemExit):
        run_glue.parse_args(["--vocab-file", str(TINY_CONFIG), "--output-dir", "x", *argv])
    assert message in capsys.readouterr().err


def test_malformed_row_is_a_one_line_error_naming_file_and_line(workspace, tmp_path):
    broken = tmp_path / "broken.tsv"
    lines = (workspace / "train.tsv").read_text(encoding="utf-8").split("\n")
    lines[3] = lines[3].rsplit("\t", 1)[0]  # data row 3 loses its second sentence
    broken.write_text("\n".join(lines), encoding="utf-8")
    result = run_script("run_glue.py", [*_common(workspace, tmp_path / "out"), "--do-train", "--train-file", broken])
    assert result.returncode == 1
    last_line = result.stderr.strip().splitlines()[-1]
    assert_one_line(last_line, f"run_glue.py: {broken}:4: ", "expected 5", "found 4")


@pytest.mark.parametrize(("task", "folder", "metrics"), [("cola", "CoLA", {"accuracy", "mcc", "auc"}),
                                                         ("sst-2", "SST-2", {"accuracy", "auc"}),
                                                         ("rte", "RTE", {"accuracy", "auc"})])
def test_each_glue_task_reads_its_files_and_reports_its_metrics(workspace, task, folder, metrics):
    lines = require_shared("data", "glue", folder, "dev.tsv").read_text(encoding="utf-8").split("\n")
    rows = 40
    sliced = workspace / f"{task}-dev.tsv"
    sliced.write_text("\n".join(lines[:rows + (task != "cola")]) + "\n", encoding="utf-8")  # CoLA has no header
    output_dir, records = run(workspace, f"eval_{task}", "--from-pretrained-params", workspace / "pretrain" / "1000",
                              "--do-eval", "--do-predict", "--predict-file", sliced, task=task)
    [reported] = [record["data"] for record in records if record.get("step") == [] and "accuracy" in record["data"]]
    assert set(reported) == metrics
    gold = read_glue_examples(task, sliced)
    ids, labels, _ = predictions(output_dir)
    assert ids == [example.guid for example in gold] and len(ids) == rows
    assert reported["accuracy"] == pytest.approx(np.mean([label == example.label
                                                          for label, example in zip(labels, gold, strict=True)]))


def test_converted_hugging_face_checkpoint_is_an_initial_model(workspace, tmp_path):
    import convert_checkpoint

    converted, config = tmp_path / "tiny.pdparams", tmp_path / "tiny.json"
    convert_checkpoint.main(["hf2paddle", str(ROOT / "tests" / "fixtures" / "tiny_bert_torch"), str(converted),
                             "--config-out", str(config)])
    words = [f"w{index}" for index in range(22)]  # the fixture's vocabulary has 27 entries
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n", encoding="utf-8")
    table = tmp_path / "pairs.tsv"
    table.write_text("a\tb\tlabel\nw1 w2 w3\tw4\tyes\nw5\tw6 w7\tno\n", encoding="utf-8")
    output_dir = tmp_path / "hf"
    run_glue.main(["--task-name", "custom", "--text-a-column", "a", "--text-b-column", "b", "--label-column",
                   "label", "--labels", "no,yes", "--vocab-file", str(vocab), "--bert-model", "custom",
                   "--config-file", str(config), "--from-pretrained-params", str(converted), "--max-seq-length", "16",
                   "--do-train", "--train-file", str(table), "--max-steps", "1", "--do-eval", "--predict-file",
                   str(table), "--output-dir", str(output_dir)])
    records = read_report(output_dir / "report.json")
    assert parameter(records, "newly_initialized") == [["classifier.bias", "classifier.weight"]]
    assert parameter(records, "unused_params")[0] > 0  # the pretraining and span heads of the fixture
    assert logged(records, "accuracy")


def test_checkpoint_without_the_encoder_is_refused(workspace, tmp_path):
    partial = tmp_path / "embeddings_only.pdparams"
    state = paddle.load(str(workspace / "pretrain" / "1000" / "bert_paddle.pdparams"))
    paddle.save({name: value for name, value in state.items() if ".embeddings." in name}, str(partial))
    with pytest.raises(ValueError, match=f"{partial}: no complete encoder weights"):
        run(workspace, "partial", "--from-pretrained-params", partial, "--do-eval", "--predict-file",
            workspace / "dev.tsv")


def test_max_seq_length_must_fit_the_position_embeddings(workspace):
    with pytest.raises(ValueError, match=r"--max-seq-length 513 exceeds max_position_embeddings 512 of .*config"):
        run(workspace, "too_long", "--max-seq-length", 513, "--do-eval", "--predict-file", workspace / "dev.tsv",
            "--allow-random-weights")
