"""Fault cases of predicting through an exported model (issue 24), in the manner of tests/test_faults.py: an export
of the other task and a --max-seq-length beyond the exported position table on both backends, a classifier of
other labels, an export without (or with a damaged) record of what it is; a Ctrl-C during SQuAD
post-processing of a real run_squad.py process, held there until the signal comes; and exports replaced whole
or not at all, checked file by file against their record, and no model saved over without --overwrite (issue 46).

Each refusal asserts the exit status, one message line naming the folder or file at fault, and that the export and
the earlier predictions in the output folder are intact by checksum.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import run_glue
import run_squad
from conftest import ROOT, require_shared
from fine_tuning_runs import common_argv, tiny_config
from inference import inference
from interrupts import ChildOutput, signal_while_running
from modeling import BertConfig, BertForQuestionAnswering, BertForSequenceClassification
from test_faults import assert_kept, one_line_error, run_entry, snapshot
from utils import cli
from utils.atomic_io import TEMP_PREFIX

# The exported models' position table: shorter than bert-tiny's 512, so that --max-seq-length 512 exceeds it.
POSITIONS = 128
BACKENDS = ("paddle", "onnxruntime")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    """A tiny SQuAD model and a tiny 2-label classifier of POSITIONS positions, each exported for both backends
    (squad_export/, glue_export/), with the config, 16 MRPC dev pairs and one SQuAD paragraph."""
    folder = tmp_path_factory.mktemp("faults_inference")
    values = {**tiny_config(), "max_position_embeddings": POSITIONS}
    (folder / "config.json").write_text(json.dumps(values))
    config = BertConfig.from_dict(values)
    for name, model in (("squad_export", BertForQuestionAnswering(config)),
                        ("glue_export", BertForSequenceClassification(config, 2))):
        inference.export_onnx_model(model, inference.export_inference_model(model, str(folder / name), "bert_paddle"))
    lines = require_shared("data", "glue", "MRPC", "dev.tsv").read_bytes().split(b"\n")
    (folder / "dev.tsv").write_bytes(b"\n".join(lines[:17]) + b"\n")
    article = json.loads(require_shared("data", "squad", "v1.1", "dev-v1.1.json").read_text())["data"][0]
    squad = {"version": "1.1", "data": [{"title": article["title"], "paragraphs": article["paragraphs"][:1]}]}
    (folder / "squad.json").write_text(json.dumps(squad))
    return folder


def glue_argv(workspace: Path, export: Path, output_dir: Path, *extra: str) -> list[str]:
    return ["--task-name", "mrpc", *common_argv(workspace, output_dir), "--do-predict", "--predict-file",
            str(workspace / "dev.tsv"), "--inference-model-dir", str(export), *extra]


def squad_argv(workspace: Path, export: Path, output_dir: Path, *extra: str) -> list[str]:
    return [*common_argv(workspace, output_dir), "--do-predict", "--predict-file", str(workspace / "squad.json"),
            "--inference-model-dir", str(export), "--doc-stride", "64", *extra]


def earlier_predictions(output_dir: Path, *names: str) -> dict[str, str]:
    """An output folder that holds the prediction files of an earlier run; their checksums."""
    output_dir.mkdir(parents=True)
    for name in names:
        (output_dir / name).write_text(f"the earlier run's {name}\n")
    return snapshot(output_dir)


def refused(argv: list[str], capsys, script: str, export: Path, output_dir: Path, earlier: tuple[str, ...],
            *named: str) -> str:
    """Run the script, expect exit 1 with one line naming `named`, the export and the earlier files intact."""
    main = {"run_glue.py": run_glue.main, "run_squad.py": run_squad.main}[script]
    before = {**snapshot(export), **earlier_predictions(output_dir, *earlier)}
    status, output = run_entry(argv, capsys, main, script)
    assert status == 1, output[-3000:]
    line = one_line_error(output, f"{script}: ", *named)
    assert_kept(before)
    return line


GLUE_FILES = (run_glue.PREDICTIONS_FILE,)
SQUAD_FILES = ("predictions.json", "nbest_predictions.json")


# ---------------------------------------------------------------------------------------------------------------
# An export of another task


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_squad_export_given_to_run_glue_is_one_line_saying_it_is_a_span_model(workspace, tmp_path, capsys, backend):
    export = workspace / "squad_export"
    line = refused(glue_argv(workspace, export, tmp_path / "out", "--inference-backend", backend), capsys,
                   "run_glue.py", export, tmp_path / "out", GLUE_FILES, str(export))
    assert line == (f"run_glue.py: --inference-model-dir {export} holds a SQuAD (span) model, not a classifier of 2 "
                    "labels")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_glue_export_given_to_run_squad_is_one_line_saying_it_is_a_classifier(workspace, tmp_path, capsys, backend):
    export = workspace / "glue_export"
    line = refused(squad_argv(workspace, export, tmp_path / "out", "--inference-backend", backend), capsys,
                   "run_squad.py", export, tmp_path / "out", SQUAD_FILES, str(export))
    assert line == (f"run_squad.py: --inference-model-dir {export} holds a classifier of 2 labels, not a SQuAD (span) "
                    "model")


def test_a_classifier_of_other_labels_is_one_line_naming_both_counts(workspace, tmp_path, capsys):
    export = workspace / "glue_export"
    argv = glue_argv(workspace, export, tmp_path / "out")
    argv[argv.index("mrpc")] = "custom"
    argv += ["--text-a-column", "#1 String", "--text-b-column", "#2 String", "--label-column", "Quality",
             "--labels", "0,1,2"]
    line = refused(argv, capsys, "run_glue.py", export, tmp_path / "out", GLUE_FILES, str(export))
    assert line.endswith("holds a classifier of 2 labels, not a classifier of 3 labels")


# ---------------------------------------------------------------------------------------------------------------
# A sequence length beyond the exported position table


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("script", ["run_squad.py", "run_glue.py"])
def test_a_max_seq_length_beyond_the_exported_positions_is_one_line_with_both_numbers(workspace, tmp_path, capsys,
                                                                                      backend, script):
    squad = script == "run_squad.py"
    export = workspace / ("squad_export" if squad else "glue_export")
    argv = (squad_argv if squad else glue_argv)(workspace, export, tmp_path / "out", "--max-seq-length", "512",
                                                "--inference-backend", backend)
    line = refused(argv, capsys, script, export, tmp_path / "out", SQUAD_FILES if squad else GLUE_FILES)
    assert line == (f"{script}: --inference-model-dir {export}: --max-seq-length 512 exceeds the exported model's "
                    f"max_position_embeddings {POSITIONS}")


def test_the_exported_length_itself_is_accepted(workspace, tmp_path, capsys):
    argv = squad_argv(workspace, workspace / "squad_export", tmp_path / "out", "--max-seq-length", str(POSITIONS))
    status, output = run_entry(argv, capsys, run_squad.main, "run_squad.py")
    assert status == 0, output[-3000:]
    assert (tmp_path / "out" / "predictions.json").is_file()


# ---------------------------------------------------------------------------------------------------------------
# The export's record of what it is


def test_an_export_without_its_record_predicts_and_says_what_goes_unchecked(workspace, tmp_path, capsys):
    export = tmp_path / "export"  # as an export of an earlier PaddleBERT: the program and its weights alone
    shutil.copytree(workspace / "glue_export", export)
    Path(inference.export_record_file(str(export / "bert_paddle"))).unlink()
    status, output = run_entry(glue_argv(workspace, export, tmp_path / "out"), capsys, run_glue.main, "run_glue.py")
    assert status == 0, output[-3000:]
    notices = [line for line in output.splitlines() if line.startswith(str(export / "bert_paddle.export.json"))]
    assert notices == [f"{export / 'bert_paddle.export.json'}: not found (the model was exported by an earlier "
                       "PaddleBERT), so its head and max_position_embeddings are not checked against the task and "
                       "--max-seq-length"]
    assert (tmp_path / "out" / run_glue.PREDICTIONS_FILE).is_file()


def test_a_folder_without_a_model_is_one_line_naming_the_missing_model_and_no_notice(workspace, tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    status, output = run_entry(glue_argv(workspace, empty, tmp_path / "out"), capsys, run_glue.main, "run_glue.py")
    assert status == 1
    one_line_error(output, "run_glue.py: ", f"{empty / 'bert_paddle'}.json: no exported model")
    assert "export.json" not in output


@pytest.mark.parametrize("content, reason", [
    ("{", "not JSON"),
    ('{"head": "span"}', "no max_position_embeddings"),
    ('{"head": "regression", "max_position_embeddings": 128}', "head 'regression' is not span or classifier"),
    ('{"head": "classifier", "max_position_embeddings": 128}', "no num_labels"),
])
def test_a_damaged_record_is_one_line_naming_it(workspace, tmp_path, capsys, content, reason):
    export = tmp_path / "export"
    shutil.copytree(workspace / "glue_export", export)
    record = export / "bert_paddle.export.json"
    record.write_text(content)
    line = refused(glue_argv(workspace, export, tmp_path / "out"), capsys, "run_glue.py", export, tmp_path / "out",
                   GLUE_FILES, str(record))
    assert line == f"run_glue.py: {record}: {reason} (export the model again with --export-dir)"


# ---------------------------------------------------------------------------------------------------------------
# Ctrl-C of a real run_squad.py process during post-processing


# run_squad.py whose post-processing, at its first question, says PAUSED_IN_POST_PROCESSING and stays there until a
# signal handler raises (interrupts.pause_forever), so that the Ctrl-C surely finds it there. The pause replaces
# squad_utils._softmax, which postprocess_predictions calls once for every question, whatever its candidates.
PAUSED_IN_POST_PROCESSING = "paused in post-processing"
PAUSE_IN_POST_PROCESSING = f"""
import os, sys
sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "tests")]
import interrupts, run_squad, squad_utils; from utils import cli
interrupts.answer_ctrl_c()
def paused_softmax(scores):
    interrupts.say("{PAUSED_IN_POST_PROCESSING}")
    interrupts.pause_forever()
squad_utils._softmax = paused_softmax
sys.exit(cli.run_main(run_squad.main, "run_squad.py"))
"""


@pytest.mark.slow
def test_ctrl_c_in_squad_post_processing_is_one_line_status_130_and_keeps_the_earlier_predictions(workspace,
                                                                                                   tmp_path):
    output_dir = tmp_path / "out"
    before = earlier_predictions(output_dir, *SQUAD_FILES)
    argv = [*common_argv(workspace, output_dir), "--do-predict", "--predict-file", str(workspace / "squad.json"),
            "--allow-random-weights", "--max-seq-length", str(POSITIONS)]
    # Unbuffered: the report's lines reach the pipe in the order they are written, before and after the pause.
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PADDLEBERT_NUM_THREADS": "1"}
    # its own process group, which a terminal's Ctrl-C signals as a whole
    job = subprocess.Popen([sys.executable, "-c", PAUSE_IN_POST_PROCESSING, *argv], cwd=ROOT, env=env, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    output = ChildOutput(job)
    try:
        output.wait_for_line(PAUSED_IN_POST_PROCESSING, 120, "post-processing")
        assert_kept(before)  # the earlier predictions, as the signal finds them
        signal_while_running(job, signal.SIGINT, "paused in post-processing", group=True)
        out, err = output.finish(120)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    assert job.returncode == cli.INTERRUPTED_STATUS, err[-3000:]
    assert one_line_error(err, "run_squad.py: ") == "run_squad.py: interrupted (Ctrl-C)"
    predicted, interrupted = out.split(f"{PAUSED_IN_POST_PROCESSING}\n")
    assert "e2e_inference_time" in predicted and "e2e_inference_time" not in interrupted  # no second summary
    assert_kept(before)
    assert not [path for path in output_dir.iterdir() if path.name.startswith(TEMP_PREFIX)]


# ---------------------------------------------------------------------------------------------------------------
# An export is replaced whole or not at all, and its record names every file's checksum (issue 46 §1, §2)


def export_argv(workspace: Path, output_dir: Path, export: Path, *extra: str) -> list[str]:
    """run_glue.py training the tiny classifier for one step on the 16 dev pairs and exporting it with ONNX."""
    return ["--task-name", "mrpc", *common_argv(workspace, output_dir), "--do-train", "--train-file",
            str(workspace / "dev.tsv"), "--max-steps", "1", "--export-dir", str(export),
            "--export-onnx", *extra]


@pytest.fixture
def exported(workspace, tmp_path, capsys) -> Path:
    """A fresh export of a trained classifier, with its ONNX model and calibration inputs."""
    export = tmp_path / "export"
    status, output = run_entry(export_argv(workspace, tmp_path / "first", export), capsys, run_glue.main,
                               "run_glue.py")
    assert status == 0, output[-3000:]
    return export


def test_the_record_names_the_checksum_of_every_file_of_the_export(exported):
    record = json.loads((exported / "bert_paddle.export.json").read_text())
    files = sorted(path.name for path in exported.iterdir() if path.name != "bert_paddle.export.json")
    assert sorted(record["files"]) == files == ["bert_paddle.calibration.npz", "bert_paddle.json",
                                                "bert_paddle.onnx", "bert_paddle.pdiparams"]
    for name, digest in record["files"].items():
        assert digest == snapshot(exported / name)[str(exported / name)]
    assert [path.name for path in exported.parent.iterdir() if path.name.startswith(".")] == []  # no staging left


def test_an_export_into_an_earlier_one_is_refused_without_overwrite_before_training(workspace, exported, tmp_path,
                                                                                   capsys):
    before = snapshot(exported)
    status, output = run_entry(export_argv(workspace, tmp_path / "second", exported), capsys, run_glue.main,
                               "run_glue.py")
    assert status == 2
    one_line_error(output, f"{Path(sys.argv[0]).name}: error: ", f"--export-dir {exported} holds an export already",
                   "--overwrite")
    assert_kept(before)
    assert not (tmp_path / "second").exists()  # refused before the run started


@pytest.mark.parametrize("failure", [KeyboardInterrupt, lambda: OSError(28, "No space left on device")])
def test_a_re_export_stopped_during_the_onnx_conversion_keeps_the_whole_earlier_export(workspace, exported, tmp_path,
                                                                                      capsys, monkeypatch, failure):
    before = snapshot(exported)

    def stopped(*args, **kwargs):
        raise failure()

    monkeypatch.setattr(inference.onnx_backend, "export_onnx", stopped)
    status, output = run_entry(export_argv(workspace, tmp_path / "second", exported, "--overwrite"), capsys,
                               run_glue.main, "run_glue.py")
    assert status == (130 if failure is KeyboardInterrupt else 1), output[-3000:]
    one_line_error(output, "run_glue.py: ", f"--export-dir {exported}", "the export there before is unchanged")
    assert_kept(before)
    assert sorted(path.name for path in exported.iterdir()) == sorted(Path(path).name for path in before)
    assert [path.name for path in exported.parent.iterdir() if path.name.startswith(".")] == []


def test_a_re_export_with_overwrite_replaces_every_file(workspace, exported, tmp_path, capsys):
    before = snapshot(exported)
    status, output = run_entry(export_argv(workspace, tmp_path / "second", exported, "--overwrite", "--seed", "7"),
                               capsys, run_glue.main, "run_glue.py")
    assert status == 0, output[-3000:]
    after = snapshot(exported)
    assert sorted(after) == sorted(before)
    assert after[str(exported / "bert_paddle.pdiparams")] != before[str(exported / "bert_paddle.pdiparams")]
    record = json.loads((exported / "bert_paddle.export.json").read_text())
    assert {str(exported / name): digest for name, digest in record["files"].items()} == {
        path: digest for path, digest in after.items() if not path.endswith(".export.json")}


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_file_changed_after_the_export_is_one_line_naming_it(workspace, exported, tmp_path, capsys, backend):
    onnx = exported / "bert_paddle.onnx"
    onnx.write_bytes(onnx.read_bytes() + b"\0")  # another model's file in its place would do the same
    line = refused(glue_argv(workspace, exported, tmp_path / "out", "--inference-backend", backend), capsys,
                   "run_glue.py", exported, tmp_path / "out", GLUE_FILES, str(onnx))
    assert "not the file that" in line and "export the model again" in line


def test_a_model_file_the_record_does_not_name_is_one_line_naming_it(workspace, tmp_path, capsys):
    export = tmp_path / "export"
    shutil.copytree(workspace / "glue_export", export)
    record = json.loads((export / "bert_paddle.export.json").read_text())
    del record["files"]["bert_paddle.onnx"]  # as a record of the Paddle program alone, beside an older .onnx
    (export / "bert_paddle.export.json").write_text(json.dumps(record))
    line = refused(glue_argv(workspace, export, tmp_path / "out"), capsys, "run_glue.py", export, tmp_path / "out",
                   GLUE_FILES, str(export / "bert_paddle.onnx"))
    assert "not part of the export" in line


def test_training_into_a_folder_with_a_fine_tuned_model_is_refused_without_overwrite(workspace, exported, tmp_path,
                                                                                    capsys):
    folder = tmp_path / "first"  # the exported fixture's run saved its model there
    before = snapshot(folder / "bert_paddle.pdparams", folder / "bert_paddle_config.json")
    argv = ["--task-name", "mrpc", *common_argv(workspace, folder), "--do-train", "--train-file",
            str(workspace / "dev.tsv"), "--max-steps", "1"]
    status, output = run_entry(argv, capsys, run_glue.main, "run_glue.py")
    assert status == 2
    one_line_error(output, f"{Path(sys.argv[0]).name}: error: ", f"--output-dir {folder} holds a fine-tuned model",
                   str(folder / "bert_paddle.pdparams"), "--overwrite")
    assert_kept(before)
    status, output = run_entry([*argv, "--overwrite", "--seed", "7"], capsys, run_glue.main, "run_glue.py")
    assert status == 0, output[-3000:]
    assert snapshot(folder / "bert_paddle.pdparams") != {
        key: value for key, value in before.items() if key.endswith(".pdparams")}


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_export_without_a_record_of_the_other_task_is_one_line_naming_the_folder(workspace, tmp_path, capsys,
                                                                                   backend):
    export = tmp_path / "export"  # a GLUE export from before the record existed, given to SQuAD
    shutil.copytree(workspace / "glue_export", export)
    Path(inference.export_record_file(str(export / "bert_paddle"))).unlink()
    argv = squad_argv(workspace, export, tmp_path / "out", "--inference-backend", backend, "--max-seq-length",
                      str(POSITIONS))  # without a record, nothing checks the length against the position table
    line = refused(argv, capsys, "run_squad.py", export, tmp_path / "out", SQUAD_FILES,
                   f"--inference-model-dir {export}")
    assert "not those of a SQuAD (span) model" in line
