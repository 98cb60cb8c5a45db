"""run_squad.py end to end with a tiny BERT on a slice of SQuAD dev: fine-tuning, prediction, evaluation,
export to Paddle Inference, data parallelism, and the effect of every command-line flag."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest

import run_squad
from conftest import ROOT, require_shared
from data_fixtures import make_v2_dataset
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
from inference import inference
from messages import assert_one_line
from modeling import BertConfig
from squad_evaluate import evaluate, load_dataset, load_squad_json
from squad_utils import convert_examples_to_features, read_squad_examples
from tokenizer import BertTokenizer
from utils.dllog import read_report


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """Slices of dev (2 paragraphs; 6 questions), a dropout-free tiny config and a pretraining checkpoint."""
    return fine_tuning_workspace(tmp_path_factory.mktemp("squad"),
                                 squad={"slice.json": (2, None), "small.json": (1, 6)})


def _common(workspace, output_dir):
    return [*common_argv(workspace, output_dir), "--max-seq-length", "128", "--doc-stride", "64",
            "--max-query-length", "32"]


def run(workspace, output_name, *args):
    """run_squad.main in process; returns the output folder and the report's records."""
    return run_in_process(run_squad.main, [*_common(workspace, workspace / output_name), *args],
                          workspace / output_name)


def train_args(workspace, *extra, data="small.json"):
    return stage_args("train", workspace / data, *extra)


def predict_args(workspace, *extra, data="small.json"):
    return stage_args("predict", workspace / data, *extra)


@pytest.fixture(scope="module")
def fine_tuned(workspace):
    output_dir, records = run(
        workspace, "fine_tuned",
        *train_args(workspace, "--from-pretrained-params", workspace / "pretrain" / "1000", "--max-steps", 30,
                    "--learning-rate", 2e-3, "--warmup-proportion", 0.1, "--warmup-start-lr", 1e-4,
                    "--log-freq", 1, data="slice.json"),
        *predict_args(workspace, "--do-eval", "--export-dir", workspace / "fine_tuned" / "export", data="slice.json"),
    )
    return output_dir, records


def test_fine_tunes_predicts_and_evaluates(workspace, fine_tuned):
    output_dir, records = fine_tuned
    losses = logged(records, "loss")
    assert len(losses) == 30
    assert np.mean(losses[-5:]) < 0.7 * np.mean(losses[:5])
    # all but the span head came from the pretraining checkpoint, whose heads went unused
    assert parameter(records, "newly_initialized") == [["qa_outputs.bias", "qa_outputs.weight"]]
    assert parameter(records, "unused_params")[0] > 0

    dataset = load_dataset(str(workspace / "slice.json"))
    contexts = {qa["id"]: paragraph["context"] for paragraph in dataset[0]["paragraphs"] for qa in paragraph["qas"]}
    predictions = json.loads((output_dir / "predictions.json").read_text())
    nbest = json.loads((output_dir / "nbest_predictions.json").read_text())
    assert set(predictions) == set(nbest) == set(contexts)
    for question_id, text in predictions.items():
        assert text and text in contexts[question_id]  # a slice of the original context, case and all
        assert nbest[question_id][0]["text"] == text
        assert len(nbest[question_id]) == 20
        assert sum(entry["probability"] for entry in nbest[question_id]) == pytest.approx(1.0)
    scores = evaluate(dataset, predictions)
    assert logged(records, "exact_match") == [pytest.approx(scores["exact_match"])]
    assert logged(records, "F1") == [pytest.approx(scores["f1"])]
    assert scores["f1"] > 20.0  # the untrained head scores about 5 (see test_eval_mode_from_pretraining)
    saved = params(output_dir)
    assert "qa_outputs.weight" in saved and not any(name.startswith("cls.") for name in saved)
    assert BertConfig.from_json_file(str(output_dir / "bert_paddle_config.json")).hidden_size == 128


def test_eval_mode_from_pretraining_checkpoint_scores_lower(workspace, fine_tuned):
    _, records = run(workspace, "untrained", *predict_args(
        workspace, "--do-eval", "--from-pretrained-params", workspace / "pretrain" / "1000", data="slice.json"))
    assert logged(records, "F1")[0] < 0.5 * logged(fine_tuned[1], "F1")[0]


def test_exported_model_predicts_the_same_answers(workspace, fine_tuned):
    output_dir, _ = fine_tuned
    assert (output_dir / "export" / "bert_paddle.pdiparams").is_file()
    exported_dir, records = run(workspace, "exported",
                                *predict_args(workspace, "--inference-model-dir", output_dir / "export",
                                              data="slice.json"))
    assert (exported_dir / "predictions.json").read_text() == (output_dir / "predictions.json").read_text()
    nbest = json.loads((exported_dir / "nbest_predictions.json").read_text())
    reference = json.loads((output_dir / "nbest_predictions.json").read_text())
    for question_id, entries in nbest.items():
        assert [e["start_logit"] for e in entries] == pytest.approx(
            [e["start_logit"] for e in reference[question_id]], abs=1e-4)
    assert not logged(records, "F1")  # no --do-eval: prediction mode only


def test_saved_model_reloads_through_init_checkpoint(workspace, fine_tuned):
    output_dir, _ = fine_tuned
    reloaded_dir, records = run(workspace, "reloaded", *predict_args(
        workspace, "--do-eval", "--init-checkpoint", output_dir / "bert_paddle.pdparams", "--model-prefix", "qa",
        data="slice.json"))
    assert (reloaded_dir / "predictions.json").read_text() == (output_dir / "predictions.json").read_text()
    assert logged(records, "F1") == logged(fine_tuned[1], "F1")


@pytest.fixture(scope="module")
def two_steps_batch_8(workspace):
    output_dir, _ = run(workspace, "batch8", *train_args(workspace, "--max-steps", 2, "--learning-rate", 1e-3,
                                                         data="slice.json"))
    return params(output_dir)


# The span head's bias has an exact gradient of 0 (test_loss.test_the_span_heads_bias_gets_only_rounding_as_its_
# gradient): after training it holds float32 rounding residue, which AdamW's m / (sqrt(v) + eps) scales up to about
# lr |g| / eps, so it differs between two correct runs that sum in different orders.
ROUNDING_RESIDUE = {"qa_outputs.bias"}


def assert_same_two_steps(actual: dict, expected: dict, atol: float) -> None:
    """Two runs of two updates at --learning-rate 1e-3 trained the same model."""
    assert actual.keys() == expected.keys()
    for name, value in expected.items():
        if name in ROUNDING_RESIDUE:  # AdamW moves a residue by at most about lr per update
            assert np.abs(actual[name]).max() < 2 * 1e-3 and np.abs(value).max() < 2 * 1e-3, name
        else:
            np.testing.assert_allclose(actual[name], value, rtol=1e-4, atol=atol, err_msg=name)


def test_gradient_merge_equals_the_larger_batch(workspace, two_steps_batch_8):
    merged_dir, _ = run(workspace, "merged", *train_args(
        workspace, "--max-steps", 2, "--learning-rate", 1e-3, "--train-batch-size", 4, "--gradient-merge-steps", 2,
        data="slice.json"))
    assert_same_two_steps(params(merged_dir), two_steps_batch_8, atol=1e-6)


def test_seed_changes_initialisation_and_data_order(workspace, two_steps_batch_8):
    other_dir, _ = run(workspace, "seed7", *train_args(workspace, "--max-steps", 2, "--learning-rate", 1e-3,
                                                       "--seed", 7, data="slice.json"))
    assert not np.allclose(params(other_dir)["qa_outputs.weight"], two_steps_batch_8["qa_outputs.weight"])


def test_data_parallel_matches_a_single_process_with_the_global_batch(workspace, two_steps_batch_8):
    output_dir = workspace / "data_parallel"
    result = run_script("run_squad.py", [*_common(workspace, output_dir), "--train-batch-size", "4",
                                         *train_args(workspace, "--max-steps", 2, "--learning-rate", 1e-3,
                                                     data="slice.json")],
                        timeout=240, launch_ranks=2, log_dir=workspace / "launch_logs")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    records = read_report(output_dir / "report.json")
    assert parameter(records, "world_size") == [2]
    assert_same_two_steps(params(output_dir), two_steps_batch_8, atol=1e-5)


def test_epochs_decide_the_length_without_max_steps(workspace):
    num_features = len(convert_examples_to_features(
        read_squad_examples(str(workspace / "small.json"), is_training=True),
        BertTokenizer(str(require_shared("vocab", "bert-uncased-vocab.txt"))),
        max_seq_length=128, doc_stride=64, max_query_length=32, is_training=True))
    _, records = run(workspace, "epochs", *train_args(workspace, "--epochs", 2, "--log-freq", 1000))
    steps = [r["step"] for r in records if r["type"] == "LOG" and "loss" in r["data"]]
    assert steps == [[1, 2 * -(-num_features // 8)]]  # only the last update is logged; it is in epoch 1


def test_fuse_mha_trains_the_same_model_from_an_unfused_checkpoint(workspace):
    # two updates, both at a learning rate above 0 (lr_scheduler.py), from the same unfused checkpoint
    common = ["--from-pretrained-params", workspace / "pretrain" / "1000", "--max-steps", 2, "--learning-rate", 1e-3]
    unfused_dir, _ = run(workspace, "unfused", *train_args(workspace, *common), *predict_args(workspace))
    fused_dir, _ = run(workspace, "fused", *train_args(workspace, *common, "--fuse-mha"), *predict_args(workspace))
    fused, unfused = params(fused_dir), params(unfused_dir)
    assert any(".attention.qkv." in name for name in fused) and not any(".attention.query." in n for n in fused)
    query = unfused["bert.encoder.0.attention.query.weight"]
    np.testing.assert_allclose(fused["bert.encoder.0.attention.qkv.weight"][:, :query.shape[1]], query, atol=1e-6)
    assert (fused_dir / "predictions.json").read_text() == (unfused_dir / "predictions.json").read_text()


def test_do_lower_case_changes_tokenization(workspace):
    common = ["--from-pretrained-params", workspace / "pretrain" / "1000"]
    auto_dir, _ = run(workspace, "case_auto", *predict_args(workspace, *common))
    lower_dir, _ = run(workspace, "case_lower", *predict_args(workspace, *common, "--do-lower-case"))
    with pytest.warns(UserWarning, match="vocab looks uncased but do_lower_case=False"):
        cased_dir, _ = run(workspace, "case_cased", *predict_args(workspace, *common, "--no-do-lower-case"))
    auto = (auto_dir / "nbest_predictions.json").read_text()
    assert auto == (lower_dir / "nbest_predictions.json").read_text()  # the uncased vocab is detected
    assert auto != (cased_dir / "nbest_predictions.json").read_text()


def test_n_best_size_and_max_answer_length(workspace, fine_tuned):
    tokenizer = BertTokenizer(str(require_shared("vocab", "bert-uncased-vocab.txt")))
    weights = ["--from-pretrained-params", fine_tuned[0] / "bert_paddle.pdparams"]
    def nbest_lengths(output_dir):
        return [len(entries) for entries in json.loads((output_dir / "nbest_predictions.json").read_text()).values()]

    # The default (20) keeps every valid candidate, more than one for some question; --n-best-size 1 keeps one.
    assert max(nbest_lengths(fine_tuned[0])) > 1
    nbest_dir, _ = run(workspace, "nbest1", *predict_args(workspace, *weights, "--n-best-size", 1))
    assert set(nbest_lengths(nbest_dir)) == {1}

    def longest_answer(output_dir):
        nbest = json.loads((output_dir / "nbest_predictions.json").read_text())
        return max(len(tokenizer.tokenize(entry["text"])) for entries in nbest.values() for entry in entries)

    assert longest_answer(fine_tuned[0]) > 2
    short_dir, _ = run(workspace, "short", *predict_args(workspace, *weights, "--max-answer-length", 2))
    assert longest_answer(short_dir) <= 2


def test_window_options_change_the_features(workspace):
    _, records = run(workspace, "windows", *predict_args(workspace, "--max-seq-length", 96, "--doc-stride", 16,
                                                         "--max-query-length", 8, "--allow-random-weights"))
    examples = read_squad_examples(str(workspace / "small.json"), is_training=False)
    tokenizer = BertTokenizer(str(require_shared("vocab", "bert-uncased-vocab.txt")))
    expected = len(convert_examples_to_features(examples, tokenizer, 96, 16, 8))
    assert expected != len(convert_examples_to_features(examples, tokenizer, 128, 64, 32))
    assert parameter(records, "eval_features") == [expected]


class _Recorder:
    """Wraps inference.dygraph_predictor and records the shape of every batch it is given."""

    def __init__(self, monkeypatch):
        self.shapes = []
        original = inference.dygraph_predictor

        def wrapped(*args):
            run = original(*args)

            def recording_run(input_ids, token_type_ids, attention_mask):
                self.shapes.append(input_ids.shape)
                return run(input_ids, token_type_ids, attention_mask)
            return recording_run
        monkeypatch.setattr(inference, "dygraph_predictor", wrapped)


def test_predict_batch_size(workspace, monkeypatch):
    recorder = _Recorder(monkeypatch)
    run(workspace, "batch5", *predict_args(workspace, "--predict-batch-size", 5, "--allow-random-weights"))
    assert {shape[0] for shape in recorder.shapes[:-1]} == {5}
    assert all(shape[1] <= 128 for shape in recorder.shapes)


def test_inference_benchmark_times_padded_batches_and_writes_no_predictions(workspace, monkeypatch):
    recorder = _Recorder(monkeypatch)
    output_dir, records = run(workspace, "bench", *predict_args(
        workspace, "--benchmark", "--benchmark-steps", 3, "--benchmark-warmup-steps", 2, "--predict-batch-size", 4,
        "--allow-random-weights"))
    assert recorder.shapes == [(4, 128)] * 5
    assert logged(records, "inference_sequences_per_second")[0] > 0
    assert not (output_dir / "predictions.json").exists()


def test_training_benchmark_runs_warmup_plus_timed_steps_and_saves_nothing(workspace):
    output_dir, records = run(workspace, "train_bench", *train_args(
        workspace, "--benchmark", "--benchmark-steps", 2, "--benchmark-warmup-steps", 1, "--log-freq", 1))
    assert len(logged(records, "loss")) == 3
    assert logged(records, "training_sequences_per_second")[0] > 0
    assert not (output_dir / "bert_paddle.pdparams").exists()


def test_verbose_logging_lists_answers_that_cut_a_word(workspace, capsys):
    _, records = run(workspace, "verbose", *train_args(workspace, "--max-steps", 1, "--verbose-logging"))
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("answer of question")]
    [count] = parameter(records, "unrecoverable_answers")
    assert len(lines) == count > 0
    # "gold" is annotated inside "golden" (question 56be4db0acb8001400a502f0)
    assert any("56be4db0acb8001400a502f0" in line and "'golden'" in line for line in lines)


def test_defaults():
    defaults = run_squad.parse_args(["--vocab-file", str(TINY_CONFIG), "--output-dir", "x", "--export-dir", "y"])
    assert (defaults.learning_rate, defaults.warmup_proportion, defaults.max_seq_length) == (1e-4, 0.01, 384)
    assert (defaults.epsilon, defaults.weight_decay, defaults.inference_precision) == (1e-6, 0.01, "fp32")


def test_bert_model_names_a_bundled_config_and_max_steps_minus_one_means_unset():
    args = run_squad.parse_args(["--vocab-file", str(TINY_CONFIG), "--output-dir", "x", "--export-dir", "y",
                                 "--bert-model", "bert-base-uncased", "--max-steps", "-1"])
    assert args.config_file == str(ROOT / "bert_configs" / "bert-base-uncased.json")
    assert args.max_steps is None
    assert not args.do_predict
    evaluating = run_squad.parse_args(["--vocab-file", str(TINY_CONFIG), "--output-dir", "x", "--do-eval",
                                       "--predict-file", str(TINY_CONFIG), "--allow-random-weights"])
    assert evaluating.do_predict  # scoring implies predicting


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--do-train"], "--do-train needs --train-file"),
        (["--do-predict"], "--do-predict and --do-eval need --predict-file"),
        ([], "nothing to do"),
        (["--export-dir", "e", "--bert-model", "custom"], "--bert-model custom needs --config-file"),
        (["--do-predict", "--predict-file", "missing.json"], "--predict-file missing.json: file not found"),
    ],
)
def test_bad_arguments_are_rejected(argv, message, capsys):
    with pytest.raises(SystemExit):
        run_squad.parse_args(["--vocab-file", str(TINY_CONFIG), "--output-dir", "x", *argv])
    assert message in capsys.readouterr().err


def test_bad_training_file_is_a_one_line_error_naming_file_and_question(workspace, tmp_path):
    content = json.loads((workspace / "slice.json").read_text())
    del content["data"][0]["paragraphs"][1]["qas"][2]["answers"][0]["answer_start"]
    question_id = content["data"][0]["paragraphs"][1]["qas"][2]["id"]
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(content))
    result = run_script("run_squad.py", [*_common(workspace, tmp_path / "out"), "--do-train", "--train-file", broken])
    assert result.returncode == 1
    last_line = result.stderr.strip().splitlines()[-1]
    assert_one_line(last_line, f"run_squad.py: {broken}: ", f"question {question_id}", '"answer_start"')


def test_starts_from_a_converted_hugging_face_checkpoint(workspace, tmp_path):
    import convert_checkpoint

    hf_dir = require_shared("models", "all-MiniLM-L6-v2")
    convert_checkpoint.main(["hf2paddle", str(hf_dir), str(tmp_path / "minilm.pdparams"),
                             "--config-out", str(tmp_path / "minilm.json")])
    output_dir = tmp_path / "out"
    run_squad.main([*_common(workspace, output_dir), "--config-file", str(tmp_path / "minilm.json"),
                    "--vocab-file", str(hf_dir / "vocab.txt"),
                    *map(str, predict_args(workspace, "--from-pretrained-params", tmp_path / "minilm.pdparams"))])
    records = read_report(output_dir / "report.json")
    # every encoder and pooler weight came from the checkpoint, and the checkpoint had nothing else
    assert parameter(records, "newly_initialized") == [["qa_outputs.bias", "qa_outputs.weight"]]
    assert parameter(records, "unused_params") == [0]
    assert len(json.loads((output_dir / "predictions.json").read_text())) == 6


# ---------------------------------------------------------------------------------------------
# --eval-script
# ---------------------------------------------------------------------------------------------


def test_eval_script_reports_the_official_scripts_scores_beside_ours(workspace, fine_tuned):
    weights = ["--from-pretrained-params", fine_tuned[0] / "bert_paddle.pdparams"]
    _, records = run(workspace, "eval_script", *predict_args(
        workspace, *weights, "--do-eval", "--eval-script", ROOT / "squad_evaluate.py", data="slice.json"))
    assert logged(records, "eval_script_exact_match") == [pytest.approx(logged(records, "exact_match")[0])]
    assert logged(records, "eval_script_F1") == [pytest.approx(logged(records, "F1")[0])]


def test_eval_script_is_called_as_nvidia_calls_it_and_its_json_is_reported(workspace, fine_tuned, tmp_path):
    script = tmp_path / "fixed_scores.py"
    script.write_text("import json, sys\n"
                      f"open({str(tmp_path / 'argv.json')!r}, 'w').write(json.dumps(sys.argv[1:]))\n"
                      "print(json.dumps({'exact': 12.5, 'f1': 34.25, 'total': 6}))\n")
    output_dir, records = run(workspace, "eval_script_fixed", *predict_args(
        workspace, "--from-pretrained-params", fine_tuned[0] / "bert_paddle.pdparams", "--do-eval", "--eval-script",
        script))
    assert json.loads((tmp_path / "argv.json").read_text()) == [str(workspace / "small.json"),
                                                                str(output_dir / "predictions.json")]
    assert (logged(records, "eval_script_exact_match"), logged(records, "eval_script_F1")) == ([12.5], [34.25])


@pytest.mark.parametrize(("body", "message"), [
    ("import sys\nsys.exit('no dataset here')", "exited with status 1: no dataset here"),
    ("print('exact match: 1')", "its output is not a JSON object with exact_match (or exact) and f1"),
])
def test_a_failing_eval_script_is_an_error_naming_it(workspace, fine_tuned, tmp_path, body, message):
    script = tmp_path / "broken_eval.py"
    script.write_text(body + "\n")
    with pytest.raises(ValueError, match="^" + re.escape(f"--eval-script {script}: {message}")):
        run(workspace, "eval_script_broken", *predict_args(
            workspace, "--from-pretrained-params", fine_tuned[0] / "bert_paddle.pdparams", "--do-eval",
            "--eval-script", script))


# ---------------------------------------------------------------------------------------------
# SQuAD v2.0
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def squad_v2(workspace):
    """A v2.0 file from the first paragraph of dev's first two articles (every third question made unanswerable
    by data_fixtures.make_v2_dataset), fine-tuned on for 40 updates and predicted with --do-eval."""
    dev = load_dataset(str(require_shared("data", "squad", "v1.1", "dev-v1.1.json")))
    articles = [dict(article, paragraphs=article["paragraphs"][:1]) for article in dev[:2]]
    path = workspace / "v2.json"
    path.write_text(json.dumps(make_v2_dataset(articles)))
    weights = ["--from-pretrained-params", workspace / "pretrain" / "1000"]
    output_dir, records = run(workspace, "v2", "--version-2-with-negative", *train_args(
        workspace, *weights, "--max-steps", 40, "--epochs", 20, "--learning-rate", 2e-3, "--warmup-proportion", 0.1,
        "--log-freq", 1, data="v2.json"), *predict_args(workspace, "--do-eval", data="v2.json"))
    return path, output_dir, records


def test_v2_trains_predicts_null_answers_and_writes_null_odds(squad_v2):
    path, output_dir, records = squad_v2
    questions = {qa["id"]: qa for article in load_squad_json(str(path))["data"]
                 for paragraph in article["paragraphs"] for qa in paragraph["qas"]}
    assert sum(qa["is_impossible"] for qa in questions.values()) == len(questions) // 3
    losses = logged(records, "loss")
    assert len(losses) == 40 and np.mean(losses[-5:]) < 0.7 * np.mean(losses[:5])
    predictions = json.loads((output_dir / "predictions.json").read_text())
    odds = json.loads((output_dir / "null_odds.json").read_text())
    assert set(predictions) == set(odds) == set(questions)
    # the default threshold 0: "" exactly where score_null exceeds the best span's score
    assert {qid for qid, text in predictions.items() if text == ""} == {qid for qid, odd in odds.items() if odd > 0}
    nbest = json.loads((output_dir / "nbest_predictions.json").read_text())
    assert all("" in [entry["text"] for entry in entries] for entries in nbest.values())


def test_v2_report_holds_the_official_v2_metrics_of_the_written_files(squad_v2):
    path, output_dir, records = squad_v2
    result = subprocess.run([sys.executable, str(ROOT / "squad_evaluate.py"), str(path),
                             str(output_dir / "predictions.json"), "--na-prob-file", str(output_dir / "null_odds.json"),
                             "--na-prob-thresh", "0.0"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    official = json.loads(result.stdout)
    [reported] = [record["data"] for record in records if record.get("step") == [] and "F1" in record["data"]]
    official["exact_match"], official["F1"] = official.pop("exact"), official.pop("f1")
    assert set(reported) == set(official) >= {"HasAns_exact", "NoAns_f1", "best_exact_thresh", "best_f1"}
    assert reported == pytest.approx(official)


def test_null_score_diff_threshold_decides_which_questions_get_no_answer(workspace, squad_v2):
    path, output_dir, _ = squad_v2
    odds = json.loads((output_dir / "null_odds.json").read_text())
    threshold = float(np.median(list(odds.values())))
    raised_dir, _ = run(workspace, "v2_threshold", "--version-2-with-negative", *predict_args(
        workspace, "--from-pretrained-params", output_dir / "bert_paddle.pdparams", "--null-score-diff-threshold",
        threshold, data="v2.json"))
    predictions = json.loads((raised_dir / "predictions.json").read_text())
    null_answered = {qid for qid, text in predictions.items() if text == ""}
    assert null_answered == {qid for qid, odd in odds.items() if odd > threshold}
    assert null_answered != {qid for qid, odd in odds.items() if odd > 0}


def test_v2_flags_are_refused_where_they_do_nothing(capsys):
    base = ["--vocab-file", str(TINY_CONFIG), "--output-dir", "x", "--export-dir", "y"]
    with pytest.raises(SystemExit):
        run_squad.parse_args([*base, "--null-score-diff-threshold", "1.5"])
    assert "--null-score-diff-threshold is only used with --version-2-with-negative" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        run_squad.parse_args([*base, "--eval-script", str(ROOT / "squad_evaluate.py")])
    assert "--eval-script is only used with --do-eval" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        run_squad.parse_args([*base, "--do-eval", "--predict-file", str(TINY_CONFIG), "--allow-random-weights",
                              "--eval-script", "missing.py"])
    assert "--eval-script missing.py: file not found" in capsys.readouterr().err
