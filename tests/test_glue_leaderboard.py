"""GLUE's leaderboard files: run_glue.py --do-predict on each task's test file (glue_files.py's, in GLUE's layouts)
writes the file GLUE's server takes, under GLUE's name, with GLUE's labels and STS-B's scores clipped to [0, 5];
`run_glue.py --gather-submission DIR ZIP` zips all eleven, and refuses in one line a folder that lacks one or holds
a malformed one, or a ZIP that exists, writing nothing."""

from __future__ import annotations

import csv
import shutil
import subprocess
import sys
import zipfile

import numpy as np
import paddle
import pytest

import run_glue
from conftest import ROOT, require_shared
from fine_tuning_runs import common_argv, run_in_process, write_tiny_model
from finetuning.glue_data import GLUE_TASKS, convert_examples_to_features, read_glue_examples
from finetuning.glue_submission import submission_text
from glue_files import write_glue_files
from modeling import BertConfig, BertForSequenceClassification
from test_faults import assert_kept, one_line_error, run_entry, snapshot
from tokenizer import BertTokenizer

# GLUE's file of each task and the predictions it takes (gluebenchmark.com's submission format), written out here
# rather than read from the code under test.
SUBMISSION_LABELS = {
    "CoLA.tsv": {"0", "1"}, "SST-2.tsv": {"0", "1"}, "MRPC.tsv": {"0", "1"}, "QQP.tsv": {"0", "1"},
    "WNLI.tsv": {"0", "1"}, "QNLI.tsv": {"entailment", "not_entailment"}, "RTE.tsv": {"entailment", "not_entailment"},
    "MNLI-m.tsv": {"entailment", "neutral", "contradiction"}, "MNLI-mm.tsv": {"entailment", "neutral", "contradiction"},
    "AX.tsv": {"entailment", "neutral", "contradiction"}, "STS-B.tsv": None,  # STS-B: a score from 0 to 5
}
# (task, its test file in glue_files, the leaderboard file, its predictions file)
TEST_RUNS = [("cola", "cola", "test", "CoLA.tsv"), ("sst-2", "sst-2", "test", "SST-2.tsv"),
             ("mrpc", "mrpc", "test", "MRPC.tsv"), ("qqp", "qqp", "test", "QQP.tsv"),
             ("sts-b", "sts-b", "test", "STS-B.tsv"), ("qnli", "qnli", "test", "QNLI.tsv"),
             ("rte", "rte", "test", "RTE.tsv"), ("wnli", "wnli", "test", "WNLI.tsv"),
             ("mnli", "mnli", "test_matched", "MNLI-m.tsv"), ("mnli", "mnli", "test_mismatched", "MNLI-mm.tsv"),
             ("ax", "ax", "test", "AX.tsv")]


def test_the_submission_text_is_glues_format():
    assert submission_text(GLUE_TASKS["mnli"], ["0", "1"], ["neutral", "entailment"]) == (
        "index\tprediction\n0\tneutral\n1\tentailment\n")
    assert submission_text(GLUE_TASKS["sts-b"], ["0", "1", "2", "3"], np.array([-0.4, 5.7, 2.34567, 4.0])) == (
        "index\tprediction\n0\t0.000\n1\t5.000\n2\t2.346\n3\t4.000\n")


def read_table(path):
    with open(path, encoding="utf-8", newline="") as handle:
        return list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))


def wide_scores_head(workspace, test_file) -> dict:
    """The pretraining checkpoint with a regression head whose scores on test_file run from -1.5 to 6.5: the pooled
    outputs of a random encoder hardly differ between sentences, so a random projection of them is stretched to a
    range of 8 around 2.5."""
    state = paddle.load(str(workspace / "pretrain" / "1000" / "bert_paddle.pdparams"))
    model = BertForSequenceClassification(BertConfig.from_json_file(str(workspace / "config.json")), 1)
    model.set_state_dict(state)
    model.eval()
    tokenizer = BertTokenizer(str(require_shared("vocab", "bert-uncased-vocab.txt")))
    examples = read_glue_examples("sts-b", test_file, require_labels=False)
    batch = run_glue.collate(convert_examples_to_features(examples, tokenizer, 128, []), tokenizer.pad_token_id, 128)
    _, pooled = model.bert(*(paddle.to_tensor(batch[name]) for name in ("input_ids", "token_type_ids",
                                                                        "attention_mask")))
    weight = np.random.default_rng(0).normal(0, 1, (pooled.shape[1], 1))
    projection = pooled.numpy() @ weight
    stretch = 8.0 / np.ptp(projection)
    state["classifier.weight"] = paddle.to_tensor((stretch * weight).astype(np.float32))
    middle = (projection.max() + projection.min()) / 2
    state["classifier.bias"] = paddle.to_tensor(np.array([2.5 - stretch * middle], np.float32))
    return state


@pytest.fixture(scope="module")
def predicted(tmp_path_factory):
    """Every task's test file predicted by run_glue.py: MNLI's model trained one step (so that it is saved), its
    matched and mismatched test files in one run and the diagnostic set with it; STS-B's with a head whose scores
    spread beyond [0, 5]; the others from the pretraining checkpoint, their heads as initialised. Returns the
    workspace, the files and each leaderboard file's run."""
    workspace = tmp_path_factory.mktemp("leaderboard")
    write_tiny_model(workspace)
    glue = write_glue_files(workspace / "glue")
    pretrained = ["--from-pretrained-params", workspace / "pretrain" / "1000"]

    def run(task, name, *args):
        run_in_process(run_glue.main, ["--task-name", task, *common_argv(workspace, workspace / name), *args],
                       workspace / name)
        return workspace / name

    outputs = {}
    mnli = run("mnli", "mnli", "--do-train", "--train-file", glue["mnli"]["train"].path, "--max-steps", 1,
               *pretrained, "--do-predict", "--predict-file", glue["mnli"]["test_matched"].path,
               "--mismatched-predict-file", glue["mnli"]["test_mismatched"].path)
    outputs["MNLI-m.tsv"] = outputs["MNLI-mm.tsv"] = mnli
    outputs["AX.tsv"] = run("ax", "ax", "--from-pretrained-params", mnli, "--do-predict", "--predict-file",
                            glue["ax"]["test"].path)
    paddle.save(wide_scores_head(workspace, glue["sts-b"]["test"].path), str(workspace / "wide_scores.pdparams"))
    outputs["STS-B.tsv"] = run("sts-b", "sts-b", "--from-pretrained-params", workspace / "wide_scores.pdparams",
                               "--do-predict", "--predict-file", glue["sts-b"]["test"].path)
    for task, folder, split, submission in TEST_RUNS:
        if submission not in outputs:
            outputs[submission] = run(task, task, *pretrained, "--do-predict", "--predict-file",
                                      glue[folder][split].path)
    return workspace, glue, outputs


@pytest.mark.parametrize(("task", "folder", "split", "submission"), TEST_RUNS)
def test_each_test_file_gets_glues_file_with_glues_labels(predicted, task, folder, split, submission):
    _, glue, outputs = predicted
    output_dir = outputs[submission]
    rows = read_table(output_dir / submission)
    assert rows[0] == ["index", "prediction"]
    assert [row[0] for row in rows[1:]] == [row.guid for row in glue[folder][split].rows]
    assert [row[0] for row in rows[1:]] == [str(index) for index in range(len(rows) - 1)]
    predictions = read_table(output_dir / ("predictions_mm.tsv" if submission == "MNLI-mm.tsv" else "predictions.tsv"))
    values = [row[1] for row in rows[1:]]
    if SUBMISSION_LABELS[submission] is None:  # STS-B: the predicted scores, clipped to [0, 5], 3 decimals
        assert predictions[0] == ["id", "score"]
        expected = np.clip([float(row[1]) for row in predictions[1:]], 0, 5)
        assert all(len(value.split(".")[1]) == 3 for value in values)
        np.testing.assert_allclose([float(value) for value in values], expected, atol=5e-4 + 1e-6)
    else:
        assert set(values) <= SUBMISSION_LABELS[submission]
        assert values == [row[1] for row in predictions[1:]]
    # the run writes only its own task's leaderboard files
    written = {path.name for path in output_dir.glob("*.tsv")} & set(SUBMISSION_LABELS)
    assert written == ({"MNLI-m.tsv", "MNLI-mm.tsv"} if task == "mnli" else {submission})


def test_stsbs_file_clips_scores_outside_0_to_5(predicted):
    _, _, outputs = predicted
    scores = [float(row[1]) for row in read_table(outputs["STS-B.tsv"] / "predictions.tsv")[1:]]
    clipped = [row[1] for row in read_table(outputs["STS-B.tsv"] / "STS-B.tsv")[1:]]
    assert any(score < 0 for score in scores) and any(score > 5 for score in scores)
    assert all(value == "0.000" for score, value in zip(scores, clipped, strict=True) if score < 0)
    assert all(value == "5.000" for score, value in zip(scores, clipped, strict=True) if score > 5)


@pytest.fixture
def submission_dir(predicted, tmp_path):
    """A folder with the eleven leaderboard files of the runs."""
    _, _, outputs = predicted
    folder = tmp_path / "submission"
    folder.mkdir()
    for name, output_dir in outputs.items():
        shutil.copy(output_dir / name, folder / name)
    return folder


def test_gather_zips_the_eleven_files_from_the_command_line(submission_dir, tmp_path):
    zip_path = tmp_path / "out" / "glue.zip"
    result = subprocess.run([sys.executable, str(ROOT / "run_glue.py"), "--gather-submission", str(submission_dir),
                             str(zip_path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    with zipfile.ZipFile(zip_path) as archive:
        assert sorted(archive.namelist()) == sorted(SUBMISSION_LABELS)
        for name in SUBMISSION_LABELS:
            assert archive.read(name) == (submission_dir / name).read_bytes()
    assert [path.name for path in zip_path.parent.iterdir()] == ["glue.zip"]  # no temporary file left
    # A second gather never writes over the zip: one line, exit 1, the zip as it was.
    before = snapshot(zip_path)
    again = subprocess.run([sys.executable, str(ROOT / "run_glue.py"), "--gather-submission", str(submission_dir),
                            str(zip_path)], capture_output=True, text=True, timeout=120)
    assert again.returncode == 1
    one_line_error(again.stderr, "run_glue.py: ", str(zip_path), "exists already")
    assert_kept(before)


def _edit(path, change):
    lines = path.read_text(encoding="utf-8").split("\n")
    path.write_text("\n".join(change(lines)), encoding="utf-8")


@pytest.mark.parametrize(("name", "change", "where", "named"), [
    ("WNLI.tsv", None, "", ("WNLI.tsv", "all 11 files")),
    ("RTE.tsv", lambda lines: ["id\tprediction", *lines[1:]], ":1", ("header", "'index\\tprediction'")),
    ("QNLI.tsv", lambda lines: [*lines[:3], lines[3] + "\textra", *lines[4:]], ":4", ("expected 2", "found 3")),
    ("MRPC.tsv", lambda lines: [lines[0], lines[2], lines[1], *lines[3:]], ":2", ("index '1' where 0 belongs",)),
    ("RTE.tsv", lambda lines: [lines[0], "0\t1", *lines[2:]], ":2",
     ("prediction '1' is not one of ['entailment', 'not_entailment']",)),
    ("CoLA.tsv", lambda lines: [*lines[:5], "4\tentailment", *lines[6:]], ":6", ("prediction 'entailment'",)),
    ("STS-B.tsv", lambda lines: [lines[0], "0\t5.200", *lines[2:]], ":2", ("prediction '5.200'", "a score in [0, 5]")),
    ("AX.tsv", lambda lines: [lines[0], ""], "", ("no predictions",)),
])
def test_gather_refuses_a_folder_lacking_a_file_or_holding_a_malformed_one(submission_dir, tmp_path, capsys, name,
                                                                           change, where, named):
    path = submission_dir / name
    if change is None:
        path.unlink()
    else:
        _edit(path, change)
    before = snapshot(submission_dir)
    zip_path = tmp_path / "glue.zip"
    status, output = run_entry([run_glue.GATHER_FLAG, str(submission_dir), str(zip_path)], capsys, run_glue.main,
                               "run_glue.py")
    assert status == 1
    one_line_error(output, f"run_glue.py: {submission_dir if change is None else path}{where}", *named)
    assert not zip_path.exists() and not list(tmp_path.glob(".tmp-*"))
    assert_kept(before)


def test_gather_takes_no_other_options_and_needs_a_folder(submission_dir, tmp_path, capsys):
    status, output = run_entry([run_glue.GATHER_FLAG, str(submission_dir), str(tmp_path / "a.zip"), "--task-name",
                                "mrpc"], capsys, run_glue.main, "run_glue.py")
    assert status == 2 and "unrecognized arguments: --task-name mrpc" in output
    status, output = run_entry(["--gather", str(tmp_path / "none"), str(tmp_path / "b.zip")], capsys, run_glue.main,
                               "run_glue.py")
    assert status == 1
    one_line_error(output, "run_glue.py: ", str(tmp_path / "none"), "not a folder")
    assert not list(tmp_path.glob("*.zip"))
    with pytest.raises(SystemExit):
        run_glue.parse_args(["--task-name", "mrpc", "--vocab-file", str(ROOT / "README.md"), "--output-dir", "x",
                             "--do-predict", "--predict-file", str(ROOT / "README.md"), "--allow-random-weights",
                             run_glue.GATHER_FLAG, "a", "b"])
    assert "--gather-submission runs on its own" in capsys.readouterr().err
