"""checkpoint.py: atomic saves under kills, rotation across runs, discovery, loading and RNG round trips."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import paddle
import pytest

from bert_config import BertConfig
from checkpoints import checkpoint
from checkpoints.checkpoint import (
    UnreadableCheckpoint,
    capture_rng_state,
    check_no_later_checkpoints,
    list_checkpoints,
    load_checkpoint,
    open_resume_checkpoint,
    phase_dir,
    read_config,
    restore_rng_state,
    save_checkpoint,
)
from conftest import ROOT
from interrupts import signal_while_running

# The architecture saved beside the states (save_checkpoint requires one); any valid config will do.
CONFIG = BertConfig(vocab_size=4, hidden_size=3, num_hidden_layers=1, num_attention_heads=1, intermediate_size=8,
                    pad_vocab_size_multiple=8)


def states(step: int) -> tuple[dict, dict]:
    """Small model and optimizer state dicts whose values identify the step they were saved at."""
    model_state = {
        "bert.embeddings.word_embeddings.weight": paddle.full([4, 3], float(step)),
        "cls.predictions.bias": paddle.arange(4, dtype="float32") + step,
    }
    optimizer_state = {
        "moment1": paddle.full([4, 3], step / 3.0),
        "LR_Scheduler": {"last_epoch": step, "last_lr": 1e-3 * step},
    }
    return model_state, optimizer_state


def save(folder, step: int, **kwargs):
    model_state, optimizer_state = states(step)
    return save_checkpoint(folder, step, model_state, optimizer_state, {"epoch": 0}, config=CONFIG, rank=0,
                           **kwargs)


def saved_steps(folder) -> list[int]:
    return [step for step, _ in list_checkpoints(folder)]


def resumed_from(from_checkpoint, last_step, own):
    """The folder open_resume_checkpoint resumes from (None: start fresh)."""
    resume = open_resume_checkpoint(from_checkpoint, last_step, own)
    return resume and resume.folder


def file_bytes(folder) -> dict[str, bytes]:
    """Every file under folder (relative path -> content)."""
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def test_phase_dir_layout(tmp_path):
    assert phase_dir(tmp_path, "bert-large-uncased", 2) == tmp_path / "bert-large-uncased" / "phase2"
    with pytest.raises(ValueError, match="phase"):
        phase_dir(tmp_path, "bert-large-uncased", 3)


def test_save_load_round_trip(tmp_path):
    folder = phase_dir(tmp_path, "bert-tiny", 1)
    model_state, optimizer_state = states(7)
    progress = {
        "epoch": 2,
        "phase": 1,
        "data_position": {"file_index": np.int64(3), "sample_index": 41, "files": ["a.parquet", "b.parquet"]},
        "loss_scaler": {"scale": 32768.0, "incr_count": 5},
        "rng": capture_rng_state(),
    }
    path = save_checkpoint(folder, 7, model_state, optimizer_state, progress, config=CONFIG, rank=0,
                           prefix="bert_paddle")
    assert path == folder / "7"
    assert sorted(p.name for p in path.iterdir()) == [
        "bert_paddle.pdopt",
        "bert_paddle.pdparams",
        "bert_paddle_config.json",
        "bert_paddle_progress.json",
    ]
    assert read_config(path) == CONFIG
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\nword\n", encoding="utf-8")
    with_vocab = save_checkpoint(folder, 8, model_state, None, progress, config=CONFIG, rank=0, vocab_file=vocab)
    assert (with_vocab / "bert_paddle_vocab.txt").read_bytes() == vocab.read_bytes()
    loaded_model, loaded_optimizer, loaded_progress = load_checkpoint(path)
    for name, tensor in model_state.items():
        np.testing.assert_array_equal(loaded_model[name].numpy(), tensor.numpy())
    np.testing.assert_array_equal(loaded_optimizer["moment1"].numpy(), optimizer_state["moment1"].numpy())
    assert loaded_optimizer["LR_Scheduler"] == {"last_epoch": 7, "last_lr": 1e-3 * 7}
    expected = json.loads(json.dumps({**progress, "global_step": 7}, default=int))
    assert loaded_progress == expected
    assert loaded_progress["data_position"]["file_index"] == 3


def test_without_optimizer_state(tmp_path):
    model_state, _ = states(1)
    path = save_checkpoint(tmp_path, 1, model_state, None, {}, config=CONFIG, rank=0, prefix="squad")
    assert not (path / "squad.pdopt").exists()
    _, optimizer_state, progress = load_checkpoint(path, prefix="squad")
    assert optimizer_state is None and progress == {"global_step": 1}


def test_progress_must_agree_with_step(tmp_path):
    model_state, _ = states(1)
    with pytest.raises(ValueError, match="global_step 5 differs"):
        save_checkpoint(tmp_path, 6, model_state, None, {"global_step": 5}, config=CONFIG, rank=0)
    assert not list(tmp_path.iterdir())


def test_only_rank_zero_writes(tmp_path):
    folder = tmp_path / "phase1"
    model_state, optimizer_state = states(3)
    assert save_checkpoint(folder, 3, model_state, optimizer_state, {}, config=CONFIG, rank=1) is None
    assert not folder.exists()


def test_failed_save_leaves_previous_checkpoint(tmp_path, monkeypatch):
    save(tmp_path, 10)
    real_save = paddle.save

    def failing_save(obj, path, *args, **kwargs):
        if path.endswith(".pdopt"):
            raise OSError("disk full")
        real_save(obj, path, *args, **kwargs)

    monkeypatch.setattr(checkpoint.paddle, "save", failing_save)
    with pytest.raises(OSError, match=r"/20: checkpoint not saved, the earlier ones are unchanged \(disk full\)"):
        save(tmp_path, 20)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["10"]  # temp folder removed too
    assert resumed_from(None, "auto", tmp_path) == tmp_path / "10"
    model_state, _, progress = load_checkpoint(tmp_path / "10")
    assert progress["global_step"] == 10
    assert model_state["bert.embeddings.word_embeddings.weight"].numpy()[0, 0] == 10.0


KILLED_SAVER = """
import sys, threading
import paddle
from checkpoints import checkpoint
from bert_config import BertConfig

real_save = paddle.save

def stalling_save(obj, path, *args, **kwargs):
    real_save(obj, path, *args, **kwargs)
    # The parameters are on disk, the optimizer state and progress file are not: announce it and wait, with no
    # time limit, for SIGKILL, which is what a preemption during a save looks like.
    open(sys.argv[2], "w").close()
    threading.Event().wait()

checkpoint.paddle.save = stalling_save
state = {"w": paddle.full([256, 256], 20.0)}
checkpoint.save_checkpoint(sys.argv[1], 20, state, state, {"epoch": 0}, config=BertConfig(), rank=0, keep_max=1)
"""


def test_sigkill_during_save_leaves_previous_checkpoint(tmp_path):
    folder = tmp_path / "phase1"
    save(folder, 10, keep_max=1)
    marker = tmp_path / "params_written"
    saver = subprocess.Popen(
        [sys.executable, "-c", KILLED_SAVER, str(folder), str(marker)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert saver.poll() is None, "saver exited before reaching the middle of its save"
            assert time.monotonic() < deadline, "saver never reached the middle of its save"
            time.sleep(0.05)
        signal_while_running(saver, signal.SIGKILL, "waiting in the middle of its save")
        assert saver.wait(timeout=30) == -signal.SIGKILL
    finally:
        saver.kill()
        saver.wait()
    leftovers = sorted(p.name for p in folder.iterdir())
    assert len(leftovers) == 2 and leftovers[0].startswith(".tmp-20-") and leftovers[1] == "10"
    assert saved_steps(folder) == [10]
    assert resumed_from(None, "auto", folder) == folder / "10"
    assert load_checkpoint(folder / "10")[2]["global_step"] == 10

    # The next save (a resumed run reaching step 20) removes the killed save's temp folder.
    save(folder, 20, keep_max=1)
    assert sorted(p.name for p in folder.iterdir()) == ["20"]


def test_resave_of_existing_step_replaces_it(tmp_path):
    save(tmp_path, 10)
    model_state, _ = states(99)
    save_checkpoint(tmp_path, 10, model_state, None, {"epoch": 5}, config=CONFIG, rank=0)
    loaded_model, loaded_optimizer, progress = load_checkpoint(tmp_path / "10")
    assert progress == {"epoch": 5, "global_step": 10} and loaded_optimizer is None
    assert loaded_model["cls.predictions.bias"].numpy()[0] == 99.0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["10"]


def test_kill_between_renames_of_a_resave_is_recovered(tmp_path):
    # State after a kill between moving step 10 aside and renaming its replacement into place.
    save(tmp_path, 10)
    os.rename(tmp_path / "10", tmp_path / ".replaced-10-4242")
    (tmp_path / ".tmp-10-4242").mkdir()
    assert resumed_from(None, "auto", tmp_path) == tmp_path / ".replaced-10-4242"
    assert resumed_from(None, 10, tmp_path) == tmp_path / ".replaced-10-4242"
    assert load_checkpoint(tmp_path / ".replaced-10-4242")[2]["global_step"] == 10
    save(tmp_path, 20)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["10", "20"]


def test_rotation_counts_checkpoints_of_earlier_runs(tmp_path):
    for step in (10, 20, 30):
        save(tmp_path, step)  # an earlier run that kept everything
    (tmp_path / "5").mkdir()  # not ours and incomplete: neither counted nor deleted
    (tmp_path / ".tmp-35-999").mkdir()  # a save that was killed
    save(tmp_path, 40, keep_max=2)
    assert saved_steps(tmp_path) == [30, 40]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["30", "40", "5"]
    save(tmp_path, 50, keep_max=2)
    assert saved_steps(tmp_path) == [40, 50]


def test_rotation_keeps_new_checkpoint_when_earlier_run_went_further(tmp_path):
    for step in (100, 200):
        save(tmp_path, step)
    save(tmp_path, 10, keep_max=2)
    assert saved_steps(tmp_path) == [10, 200]
    save(tmp_path, 20, keep_max=1)
    assert saved_steps(tmp_path) == [20]


def test_keep_max_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="keep_max"):
        save(tmp_path, 1, keep_max=0)


def test_auto_resumes_from_the_newest_checkpoint(tmp_path):
    folder = tmp_path / "phase2"
    assert resumed_from(None, "auto", folder) is None  # folder does not exist yet
    assert resumed_from(None, None, folder) is None
    for step in (8, 16, 24):
        save(folder, step)
    assert resumed_from(None, None, folder) is None  # no resume flags: start fresh
    assert resumed_from(None, "auto", folder) == folder / "24"
    resume = open_resume_checkpoint(None, 16, folder)
    assert resume.folder == folder / "16" and resume.progress["global_step"] == 16 and resume.set_aside == ()
    assert resume.model_state["cls.predictions.bias"].numpy()[0] == 16.0
    assert resume.optimizer_state["LR_Scheduler"]["last_epoch"] == 16
    with pytest.raises(FileNotFoundError, match=r"phase2/12: no checkpoint folder for step 12"):
        open_resume_checkpoint(None, 12, folder)


def test_nvidia_resume_forms(tmp_path):
    own, other = tmp_path / "own", tmp_path / "other"
    for step in (2, 4):
        save(own, step)
        save(other, step + 10)
    # NVIDIA's README: --from-checkpoint <phase>/600 --last-step-of-checkpoint 600, or with the step omitted
    # (the progress file records it), or with auto (a folder of checkpoint files or of <step>/ folders).
    assert resumed_from(other / "12", 12, own) == other / "12"
    assert resumed_from(other / "12", None, own) == other / "12"
    assert resumed_from(other / "12", "auto", own) == other / "12"
    assert resumed_from(other, "auto", own) == other / "14"
    assert resumed_from(tmp_path / "not-yet", "auto", tmp_path / "not-yet") is None  # the first run of a job
    with pytest.raises(FileNotFoundError, match="not-yet: --from-checkpoint does not exist"):
        resumed_from(tmp_path / "not-yet", "auto", own)  # a folder other than the run's own: a typo
    # The project's addition: a phase folder and a step.
    assert resumed_from(other, 12, own) == other / "12"
    assert resumed_from(None, 2, own) == own / "2"
    with pytest.raises(ValueError, match=r"other/12 holds the checkpoint of step 12, not of "
                       r"--last-step-of-checkpoint 14"):
        open_resume_checkpoint(other / "12", 14, own)
    with pytest.raises(FileNotFoundError, match=r"other/13: no checkpoint folder for step 13"):
        open_resume_checkpoint(other, 13, own)
    # A phase folder without a last step is not a checkpoint: the error says what to add.
    with pytest.raises(FileNotFoundError, match=r"other: not a checkpoint folder .*add --last-step-of-checkpoint auto"):
        open_resume_checkpoint(other, None, own)


def test_a_step_folder_rotated_away_is_named_once_with_the_steps_that_remain(tmp_path):
    # NVIDIA's form --from-checkpoint <phase>/4 --last-step-of-checkpoint 4, after rotation removed step 4: the
    # message named ".../4/4", a folder nobody asked for.
    for step in (2, 4, 6, 8):
        save(tmp_path, step, keep_max=2)
    with pytest.raises(FileNotFoundError) as error:
        open_resume_checkpoint(tmp_path / "4", 4, tmp_path)
    assert str(error.value) == f"{tmp_path / '4'}: no checkpoint folder for step 4 ({tmp_path} holds steps 6, 8)"
    with pytest.raises(FileNotFoundError, match=r"/4: no checkpoint folder for step 4 \(.* holds steps 6, 8\)$"):
        open_resume_checkpoint(tmp_path, 4, tmp_path)
    with pytest.raises(FileNotFoundError, match=r"absent/4: no checkpoint folder for step 4 \(.*absent does not "
                       r"exist\)"):
        open_resume_checkpoint(None, 4, tmp_path / "absent")


def test_read_only_resolution_renames_nothing_and_loads_no_weights(tmp_path):
    # Fine-tuning's mode: another run's checkpoints are read, never set aside.
    for step in (16, 24, 32):
        save(tmp_path, step)
    break_checkpoint(tmp_path / "32", "garbled progress")
    break_checkpoint(tmp_path / "24", "truncated params")  # only the progress file is read
    before = file_bytes(tmp_path)
    resume = open_resume_checkpoint(tmp_path, "auto", None, read_only=True)
    assert resume.folder == tmp_path / "24" and resume.progress["global_step"] == 24
    assert resume.model_state is None and resume.optimizer_state is None and resume.set_aside == ()
    assert open_resume_checkpoint(tmp_path / "16", None, None, read_only=True).folder == tmp_path / "16"
    assert open_resume_checkpoint(tmp_path, 16, None, read_only=True).folder == tmp_path / "16"
    assert file_bytes(tmp_path) == before
    # Nothing intact: the unreadable folders are named, and stay.
    break_checkpoint(tmp_path / "24", "no progress file")
    break_checkpoint(tmp_path / "16", "wrong step")
    with pytest.raises(ValueError, match=r"no intact checkpoint to resume from, only the unreadable 16, 24, 32;"):
        open_resume_checkpoint(tmp_path, "auto", None, read_only=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["16", "24", "32"]
    # Without a phase folder of its own, an empty or missing folder is never a fresh start.
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"empty: --from-checkpoint holds no checkpoint$"):
        open_resume_checkpoint(tmp_path / "empty", "auto", None, read_only=True)


def break_checkpoint(folder, how: str) -> None:
    """Damage a checkpoint folder the way a crash, a full disk or a stray edit does."""
    if how == "garbled progress":
        (folder / "bert_paddle_progress.json").write_text('{"global_st', encoding="utf-8")
    elif how == "truncated params":
        params = folder / "bert_paddle.pdparams"
        params.write_bytes(params.read_bytes()[:100])
    elif how == "truncated optimizer state":
        optimizer = folder / "bert_paddle.pdopt"
        optimizer.write_bytes(optimizer.read_bytes()[:50])
    elif how == "no progress file":
        (folder / "bert_paddle_progress.json").unlink()
    elif how == "wrong step":
        (folder / "bert_paddle_progress.json").write_text('{"global_step": 3}', encoding="utf-8")


@pytest.mark.parametrize("how, reason, names", [
    ("garbled progress", "bad-progress-file", "32/bert_paddle_progress.json: unreadable progress file"),
    ("truncated params", "bad-params", "32/bert_paddle.pdparams: not a readable Paddle pickle"),
    ("truncated optimizer state", "bad-optimizer-state", "32/bert_paddle.pdopt: not a readable Paddle pickle"),
    ("no progress file", "no-progress-file", "32: incomplete or missing checkpoint"),
    ("wrong step", "step-mismatch", "32: its progress file says global_step 3, not 32"),
])
def test_auto_sets_an_unreadable_newest_checkpoint_aside_and_resumes_from_the_one_before(tmp_path, how, reason,
                                                                                          names):
    for step in (16, 24, 32):
        save(tmp_path, step)
    break_checkpoint(tmp_path / "32", how)
    before = file_bytes(tmp_path)
    resume = open_resume_checkpoint(None, "auto", tmp_path)
    assert resume.folder == tmp_path / "24"
    (moved,) = resume.set_aside
    assert moved.original == tmp_path / "32" and moved.moved_to == tmp_path / f"32.unreadable-{reason}"
    assert names in moved.reason
    # Nothing is lost: the same files, byte for byte, the damaged folder's under its new name.
    assert file_bytes(tmp_path) == {name.replace("32/", f"32.unreadable-{reason}/"): content
                                    for name, content in before.items()}
    # The set-aside folder is no checkpoint any more: not resumed from, not counted or deleted by rotation.
    assert resumed_from(None, "auto", tmp_path) == tmp_path / "24"
    save(tmp_path, 40, keep_max=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"32.unreadable-{reason}", "40"]


def test_auto_with_no_intact_checkpoint_stops_instead_of_starting_fresh(tmp_path):
    for step in (1, 2):
        save(tmp_path, step)
        break_checkpoint(tmp_path / str(step), "garbled progress")
    (tmp_path / "2.unreadable-bad-progress-file").mkdir()  # set aside by an earlier run: a second name is found
    message = (r"no intact checkpoint to resume from, only the unreadable 1.unreadable-bad-progress-file, "
               r"2.unreadable-bad-progress-file, 2.unreadable-bad-progress-file-2; move them elsewhere")
    with pytest.raises(ValueError, match=message):
        open_resume_checkpoint(None, "auto", tmp_path)
    # The same command again still refuses: the set-aside folders are there until someone looks at them.
    with pytest.raises(ValueError, match=message):
        open_resume_checkpoint(None, "auto", tmp_path)


def test_an_unreadable_checkpoint_named_explicitly_is_an_error_and_stays(tmp_path):
    save(tmp_path, 8)
    break_checkpoint(tmp_path / "8", "truncated params")
    for from_checkpoint, last_step in ((None, 8), (tmp_path / "8", None), (tmp_path / "8", 8)):
        with pytest.raises(UnreadableCheckpoint, match=r"8/bert_paddle.pdparams: not a readable Paddle pickle"):
            open_resume_checkpoint(from_checkpoint, last_step, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["8"]


def test_a_run_may_not_start_below_checkpoints_of_an_earlier_run(tmp_path):
    check_no_later_checkpoints(tmp_path / "absent", 0)
    for step in (2, 4, 6):
        save(tmp_path, step)
    (tmp_path / "4.unreadable-bad-params").mkdir()
    check_no_later_checkpoints(tmp_path, 6)
    with pytest.raises(ValueError, match=r"holds checkpoints of an earlier run after step 2 \(steps 4, 6\) that "
                       r"this run would write over; resume from the newest with --last-step-of-checkpoint auto"):
        check_no_later_checkpoints(tmp_path, 2)
    with pytest.raises(ValueError, match=r"of an earlier run \(steps 2, 4, 6\)"):
        check_no_later_checkpoints(tmp_path, 0)


def test_load_checkpoint_without_params_names_folder(tmp_path):
    save(tmp_path, 3)
    (tmp_path / "3" / "bert_paddle.pdparams").unlink()
    with pytest.raises(UnreadableCheckpoint, match=r"/3: checkpoint has no bert_paddle.pdparams"):
        load_checkpoint(tmp_path / "3")


def test_config_is_written_before_the_progress_file(tmp_path, monkeypatch):
    written = []
    real_write = checkpoint.write_synced
    monkeypatch.setattr(checkpoint, "write_synced", lambda path, write: (written.append(path.name),
                                                                          real_write(path, write)))
    save(tmp_path, 5)
    assert written == ["bert_paddle.pdparams", "bert_paddle.pdopt", "bert_paddle_config.json",
                       "bert_paddle_progress.json"]
    assert json.loads((tmp_path / "5" / "bert_paddle_config.json").read_text()) == CONFIG.to_dict()


def test_a_failed_config_write_leaves_no_step_folder(tmp_path, monkeypatch):
    save(tmp_path, 10)

    def refuse(self):
        raise OSError("disk full")

    monkeypatch.setattr(BertConfig, "to_json_string", refuse)
    with pytest.raises(OSError, match="disk full"):
        save(tmp_path, 20)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["10"]


def test_folder_without_config_still_loads(tmp_path):
    # Checkpoints written before the config file was added to the format.
    save(tmp_path, 4)
    (tmp_path / "4" / "bert_paddle_config.json").unlink()
    assert read_config(tmp_path / "4") is None
    assert resumed_from(None, "auto", tmp_path) == tmp_path / "4"
    model_state, optimizer_state, progress = load_checkpoint(tmp_path / "4")
    assert progress["global_step"] == 4 and optimizer_state["LR_Scheduler"]["last_epoch"] == 4
    assert model_state["cls.predictions.bias"].numpy()[0] == 4.0


def test_unreadable_config_names_the_file(tmp_path):
    save(tmp_path, 4)
    (tmp_path / "4" / "bert_paddle_config.json").write_text('{"hidden_size": ', encoding="utf-8")
    with pytest.raises(ValueError, match=r"4/bert_paddle_config.json: not valid JSON"):
        read_config(tmp_path / "4")


def trained_adamw(model: paddle.nn.Layer, scale: float) -> paddle.optimizer.Optimizer:
    optimizer = paddle.optimizer.AdamW(learning_rate=0.1, parameters=model.parameters())
    (model(paddle.full([2, 3], scale)) ** 2).sum().backward()
    optimizer.step()
    optimizer.clear_grad()
    return optimizer


def test_optimizer_state_follows_the_structured_parameter_names(tmp_path):
    paddle.seed(0)
    saved_model = paddle.nn.Sequential(paddle.nn.Linear(3, 4), paddle.nn.Linear(4, 2))
    saved_optimizer = trained_adamw(saved_model, 1.0)
    state = checkpoint.optimizer_state_for_saving(saved_model, saved_optimizer)
    assert "0.weight_moment1_0" in state and "1.bias_moment2_0" in state

    paddle.nn.Linear(5, 5)  # shifts Paddle's counter-based parameter names of the model built next
    loaded_model = paddle.nn.Sequential(paddle.nn.Linear(3, 4), paddle.nn.Linear(4, 2))
    assert loaded_model[0].weight.name != saved_model[0].weight.name
    loaded_optimizer = trained_adamw(loaded_model, -3.0)  # its own moments, which the load must replace
    checkpoint.load_optimizer_state(loaded_model, loaded_optimizer, state, "ckpt/7")
    saved, loaded = saved_optimizer.state_dict(), loaded_optimizer.state_dict()
    for layer in (0, 1):
        for parameter in ("weight", "bias"):
            for moment in ("moment1_0", "moment2_0"):
                expected = saved[f"{getattr(saved_model[layer], parameter).name}_{moment}"]
                actual = loaded[f"{getattr(loaded_model[layer], parameter).name}_{moment}"]
                np.testing.assert_array_equal(actual.numpy(), expected.numpy())

    with pytest.raises(ValueError, match=r"ckpt/7: optimizer state does not match this model .*'2.weight_moment1_0'"):
        checkpoint.load_optimizer_state(loaded_model, loaded_optimizer, {"2.weight_moment1_0": 0}, "ckpt/7")
    with pytest.raises(FileNotFoundError, match="ckpt/7: checkpoint has no optimizer state"):
        checkpoint.load_optimizer_state(loaded_model, loaded_optimizer, None, "ckpt/7")


def draws() -> dict:
    """Numbers from every generator a training step may use, including cached Gaussians and dropout."""
    return {
        "python": [random.random(), random.gauss(0, 1), random.randrange(1000)],
        "numpy": np.concatenate([np.random.rand(3), np.random.randn(3), np.random.permutation(5)]).tolist(),
        "paddle": paddle.rand([5]).numpy().tolist(),
        "dropout": paddle.nn.functional.dropout(paddle.ones([16]), p=0.5, training=True).numpy().tolist(),
    }


def test_rng_state_round_trip_through_json():
    random.seed(1)
    np.random.seed(2)
    paddle.seed(3)
    random.gauss(0, 1)  # leave a cached Gaussian in both Python and NumPy state
    np.random.randn(1)
    saved = json.loads(json.dumps(capture_rng_state()))
    expected = draws()
    random.seed(11)
    np.random.seed(12)
    paddle.seed(13)
    assert draws() != expected
    restore_rng_state(saved)
    assert draws() == expected


RESTORING_PROCESS = """
import json, random, sys
import numpy as np
import paddle
from checkpoints.checkpoint import restore_rng_state
restore_rng_state(json.load(open(sys.argv[1])))
print(json.dumps({"python": random.random(), "numpy": np.random.rand(), "paddle": paddle.rand([3]).numpy().tolist()}))
"""


def test_rng_state_restores_in_a_new_process(tmp_path):
    paddle.seed(2024)
    np.random.seed(2024)
    random.seed(2024)
    paddle.rand([7])
    state_file = tmp_path / "rng.json"
    state_file.write_text(json.dumps(capture_rng_state()), encoding="utf-8")
    expected = {"python": random.random(), "numpy": np.random.rand(), "paddle": paddle.rand([3]).numpy().tolist()}
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(RESTORING_PROCESS), str(state_file)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert json.loads(result.stdout.strip().splitlines()[-1]) == expected
