"""What a run prints is the run's own: no Paddle import-time warnings from the entry scripts and no tracing warnings
from an export (runtime.stderr_without, which drops chosen lines from Python and C++ and nothing else), the
launcher's dumps in its log folder with one line pointing there and a failed rank's error once
(scripts/common.sh run_launcher), and progress lines from prediction that ends within PLAIN_LINE_SECONDS when
stderr is a pipe (progress.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import run_squad
import squad_utils
from conftest import ROOT
from squad_utils import SquadExample
from tokenizer import BertTokenizer
from training import runtime
from utils import progress

COMMON_SH = ROOT / "scripts" / "common.sh"
CCACHE = "No ccache found"
OMP = "PLEASE USE OMP_NUM_THREADS WISELY"


def environment(**extra: str) -> dict[str, str]:
    return {**os.environ, **extra}


def stderr_of(argv: list[str], **env: str) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=environment(**env), timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stderr


def test_plain_import_of_paddle_prints_both_warnings():
    """The noise the entry scripts drop: a plain `import paddle` with OMP_NUM_THREADS=2 inherited (as a child of
    a configured process has it) prints both."""
    err = stderr_of([sys.executable, "-c", "import paddle"], OMP_NUM_THREADS="2")
    assert CCACHE in err and OMP in err


@pytest.mark.parametrize("script", ["run_pretraining.py", "run_squad.py", "run_glue.py", "convert_checkpoint.py"])
def test_entry_scripts_import_paddle_without_its_warnings(script):
    err = stderr_of([sys.executable, str(ROOT / script), "--help"], OMP_NUM_THREADS="2")
    assert CCACHE not in err and "OMP_NUM_THREADS" not in err, err


def test_quiet_import_keeps_the_other_output_of_the_import(tmp_path, monkeypatch, capsys):
    fake = tmp_path / "paddle"
    fake.mkdir()
    (fake / "__init__.py").write_text(
        "import os, sys, warnings\n"
        f"warnings.warn({CCACHE + '. Please be aware...'!r})\n"
        "warnings.warn('a warning of its own')\n"
        "print('WARNING: OMP_NUM_THREADS set to 2, not 1. The computation speed ...', file=sys.stderr)\n"
        f"print({OMP!r}, file=sys.stderr)\n"
        "os.write(2, b'a line of the import below Python\\n')\n"
        "print('another line of the import', file=sys.stderr)\n")
    monkeypatch.delitem(sys.modules, "paddle")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.warns(UserWarning) as warned:
        module = runtime.import_paddle_quietly()
    assert module.__file__ == str(fake / "__init__.py")
    assert [str(warning.message) for warning in warned] == ["a warning of its own"]
    assert capsys.readouterr().err == "a line of the import below Python\nanother line of the import\n"


def run_launcher(tmp_path: Path, worker_code: str, nproc: int) -> subprocess.CompletedProcess:
    worker = tmp_path / "worker.py"
    worker.write_text(worker_code)
    command = f'source "{COMMON_SH}" && run_launcher "" "{tmp_path}/log" --nproc_per_node {nproc} "{worker}"'
    return subprocess.run(["bash", "-c", command], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                          env={name: value for name, value in os.environ.items() if name != "OMP_NUM_THREADS"})


WORKER = """
import os, sys
rank = int(os.environ["PADDLE_TRAINER_ID"])
print(f"step 1 on rank {rank}", flush=True)
if rank == int(os.environ.get("FAILING_RANK", "-1")):
    sys.exit(f"worker error on rank {rank}")
"""


@pytest.mark.slow
def test_the_launchers_own_output_goes_to_its_log_folder(tmp_path):
    result = run_launcher(tmp_path, WORKER, 1)
    assert result.returncode == 0, result.stdout + result.stderr
    output = result.stdout + result.stderr
    launcher_log = tmp_path / "log" / "launcherlog"
    assert output.count("Launcher output: ") == 1 and f"Launcher output: {launcher_log}\n" in result.stdout
    assert "step 1 on rank 0" in result.stdout
    assert "LAUNCH" not in output and CCACHE not in output
    kept = launcher_log.read_text()
    assert "-----------  Configuration  ----------------------" in kept and "Exit code 0" in kept


@pytest.mark.slow
def test_a_failed_rank_0_shows_its_error_once(tmp_path, monkeypatch):
    monkeypatch.setenv("FAILING_RANK", "0")
    (tmp_path / "worker.py").write_text(WORKER)
    plain = subprocess.run(  # the launcher as it was called before run_launcher: the error twice, and its dumps
        [sys.executable, "-m", "paddle.distributed.launch", "--log_dir", str(tmp_path / "plain"),
         str(tmp_path / "worker.py")], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert plain.returncode == 1 and plain.stdout.count("worker error on rank 0") == 2
    assert "Container failed !!!" in plain.stderr

    result = run_launcher(tmp_path, WORKER, 1)
    output = result.stdout + result.stderr
    assert result.returncode == 1
    assert output.count("worker error on rank 0") == 1 and "LAUNCH" not in output, output
    assert result.stderr.splitlines()[-1] == f"Rank 0 failed with exit code 1; its log: {tmp_path}/log/workerlog.0"
    assert "Container failed !!!" in (tmp_path / "log" / "launcherlog").read_text()


@pytest.mark.slow
def test_another_ranks_error_shows_once_from_the_launchers_copy(tmp_path, monkeypatch):
    monkeypatch.setenv("FAILING_RANK", "1")
    result = run_launcher(tmp_path, WORKER, 2)
    output = result.stdout + result.stderr
    assert result.returncode == 1
    assert output.count("worker error on rank 1") == 1 and "LAUNCH" not in output, output
    assert result.stderr.splitlines()[-1] == f"Rank 1 failed with exit code 1; its log: {tmp_path}/log/workerlog.1"


def test_prediction_shorter_than_a_plain_line_interval_shows_progress_on_a_pipe(monkeypatch, capsys):
    """Piped, progress lines come every PLAIN_LINE_SECONDS; work that ends sooner (SQuAD prediction of 5-30 s)
    still shows its first line once it outlasts DELAY_SECONDS, and its last."""
    monkeypatch.setattr(progress, "DELAY_SECONDS", 0.3)
    monkeypatch.setattr(progress, "PLAIN_LINE_SECONDS", 60.0)
    tokenizer = BertTokenizer(str(ROOT / "vocab" / "bert-base-uncased-vocab.txt"))
    examples = [SquadExample(f"q{index}", "which?", "one two three", 0) for index in range(8)]
    features = squad_utils.convert_examples_to_features(examples, tokenizer, max_seq_length=32, doc_stride=8,
                                                        max_query_length=8)

    def slow_model(input_ids, token_type_ids, attention_mask):
        time.sleep(0.1)
        return np.zeros(input_ids.shape, np.float32), np.zeros(input_ids.shape, np.float32)

    run_squad.predict_logits(slow_model, features, batch_size=1, pad_token_id=0, max_seq_length=32)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("SQuAD prediction:")]
    assert len(lines) == 2, lines
    assert " 100% " not in lines[0] and " 100% 8/8 [" in lines[1]


# Exports a one-layer classifier, as run_glue.py --export-dir does (inference.export_inference_model).
EXPORT_A_TINY_MODEL = """
import sys, tempfile
from training import runtime
from inference import inference
from bert_config import BertConfig
from modeling import BertForSequenceClassification
config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=64, max_position_embeddings=64)
inference.export_inference_model(BertForSequenceClassification(config, num_labels=2), tempfile.mkdtemp(), "m")
"""


def test_an_export_prints_none_of_paddles_tracing_warnings():
    """Issue 29: exporting printed Paddle's C++ 'not support input out tensor' warning and a UserWarning about
    `place` in PIR mode, neither about the user's model."""
    stderr = stderr_of([sys.executable, "-c", EXPORT_A_TINY_MODEL])
    assert "not support input out tensor" not in stderr and "'place' interface" not in stderr, stderr


# Writes to stderr inside runtime.stderr_without from Python and from below it (os.write on descriptor 2, as C++
# code writes), lines to drop ("noise:") and to keep, an ignored warning and another warning.
FILTERED_CHILD = """
import os, sys, warnings
from training import runtime
print("before the block", file=sys.stderr)
with runtime.stderr_without(lines=("noise:",), warnings=("a noisy warning",)):
    print("kept: a Python line", file=sys.stderr)
    print("noise: a Python line", file=sys.stderr)
    os.write(2, b"noise: a line below Python\\n")
    os.write(2, b"kept: a line below Python\\n")
    warnings.warn("a noisy warning, ignored")
    warnings.warn("kept: a warning of its own")
    print("kept: the last line", file=sys.stderr)
print("after the block", file=sys.stderr)
"""


def test_the_stderr_filter_drops_the_chosen_lines_and_warnings_and_keeps_the_rest_in_order():
    warning_line = FILTERED_CHILD.splitlines().index('    warnings.warn("kept: a warning of its own")') + 1
    assert stderr_of([sys.executable, "-c", FILTERED_CHILD]).splitlines() == [
        "before the block", "kept: a Python line", "kept: a line below Python",
        f"<string>:{warning_line}: UserWarning: kept: a warning of its own", "kept: the last line", "after the block"]


def test_the_stderr_filter_catches_python_lines_where_sys_stderr_is_not_the_descriptor(capfd):
    """Under capfd, as under pytest's own capture, sys.stderr writes to a file of pytest's, not to descriptor 2;
    the filter still drops Python's lines as well as Paddle's glog line (the export's TRACING_NOISE_LINES), and
    keeps the others in the order written."""
    from inference import inference
    with runtime.stderr_without(lines=(*inference.TRACING_NOISE_LINES, "noise:")):
        print("kept: a Python line", file=sys.stderr)
        os.write(2, b"W1202 01:51:28.275887  6137 eager_utils.cc:3584] Paddle static graph(PIR) not support input "
                    b"out tensor for now!!!!!\n")
        os.write(2, b"kept: a line below Python\n")
        print("noise: a Python line", file=sys.stderr)
        print("kept: another Python line", file=sys.stderr)
    assert capfd.readouterr().err.splitlines() == ["kept: a Python line", "kept: a line below Python",
                                                   "kept: another Python line"]
