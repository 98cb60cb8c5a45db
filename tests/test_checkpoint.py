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

import checkpoint
from bert_config import BertConfig
from checkpoint import (
    capture_rng_state,
    find_checkpoint,
    list_checkpoints,
    load_checkpoint,
    phase_dir,
    read_config,
    read_progress,
    resolve_resume_folder,
    restore_rng_state,
    save_checkpoint,
)
from conftest import ROOT

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
    with pytest.raises(OSError, match="disk full"):
        save(tmp_path, 20)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["10"]  # temp folder removed too
    assert find_checkpoint(tmp_path, "auto") == tmp_path / "10"
    model_state, _, progress = load_checkpoint(tmp_path / "10")
    assert progress["global_step"] == 10
    assert model_state["bert.embeddings.word_embeddings.weight"].numpy()[0, 0] == 10.0


KILLED_SAVER = """
import sys, time
import paddle
import checkpoint
from bert_config import BertConfig

real_save = paddle.save

def stalling_save(obj, path, *args, **kwargs):
    real_save(obj, path, *args, **kwargs)
    # The parameters are on disk, the optimizer state and progress file are not: announce it and wait
    # for SIGKILL, which is what a preemption during a save looks like.
    open(sys.argv[2], "w").close()
    time.sleep(120)

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
        saver.send_signal(signal.SIGKILL)
    finally:
        saver.kill()
        saver.wait()
    leftovers = sorted(p.name for p in folder.iterdir())
    assert len(leftovers) == 2 and leftovers[0].startswith(".tmp-20-") and leftovers[1] == "10"
    assert saved_steps(folder) == [10]
    assert find_checkpoint(folder, "auto") == folder / "10"
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
    assert find_checkpoint(tmp_path, "auto") == tmp_path / ".replaced-10-4242"
    assert find_checkpoint(tmp_path, 10) == tmp_path / ".replaced-10-4242"
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


def test_find_checkpoint(tmp_path):
    folder = tmp_path / "phase2"
    assert find_checkpoint(folder, "auto") is None  # folder does not exist yet
    assert find_checkpoint(folder, None) is None
    for step in (8, 16, 24):
        save(folder, step)
    assert find_checkpoint(folder, None) is None
    assert find_checkpoint(folder, "auto") == folder / "24"
    assert find_checkpoint(folder, 16) == folder / "16"
    assert find_checkpoint(folder, "16") == folder / "16"
    assert read_progress(find_checkpoint(folder, 16))["global_step"] == 16

    with pytest.raises(FileNotFoundError, match=r"phase2/12: no checkpoint folder"):
        find_checkpoint(folder, 12)
    (folder / "32").mkdir()
    (folder / "32" / "bert_paddle.pdparams").write_bytes(b"")
    assert find_checkpoint(folder, "auto") == folder / "24"  # incomplete folders are never "newest"
    with pytest.raises(FileNotFoundError, match=r"phase2/32: incomplete"):
        find_checkpoint(folder, 32)
    (folder / "32" / "bert_paddle_progress.json").write_text('{"global_st', encoding="utf-8")
    with pytest.raises(ValueError, match=r"32/bert_paddle_progress.json: unreadable"):
        find_checkpoint(folder, 32)
    with pytest.raises(ValueError, match="'latest'"):
        find_checkpoint(folder, "latest")


def test_load_checkpoint_without_params_names_folder(tmp_path):
    save(tmp_path, 3)
    (tmp_path / "3" / "bert_paddle.pdparams").unlink()
    with pytest.raises(FileNotFoundError, match=r"/3: checkpoint has no bert_paddle.pdparams"):
        load_checkpoint(tmp_path / "3")


def test_config_is_written_before_the_progress_file(tmp_path, monkeypatch):
    written = []
    real_write = checkpoint._write_synced
    monkeypatch.setattr(checkpoint, "_write_synced", lambda path, write: (written.append(path.name),
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
    assert find_checkpoint(tmp_path, "auto") == tmp_path / "4"
    model_state, optimizer_state, progress = load_checkpoint(tmp_path / "4")
    assert progress["global_step"] == 4 and optimizer_state["LR_Scheduler"]["last_epoch"] == 4
    assert model_state["cls.predictions.bias"].numpy()[0] == 4.0


def test_unreadable_config_names_the_file(tmp_path):
    save(tmp_path, 4)
    (tmp_path / "4" / "bert_paddle_config.json").write_text('{"hidden_size": ', encoding="utf-8")
    with pytest.raises(ValueError, match=r"4/bert_paddle_config.json: not valid JSON"):
        read_config(tmp_path / "4")


def test_resolve_resume_folder(tmp_path):
    own, other = tmp_path / "own", tmp_path / "other"
    assert resolve_resume_folder(None, None, own) is None  # neither flag: start fresh
    assert resolve_resume_folder(None, "auto", own) is None  # auto in an empty phase folder: start fresh
    for step in (2, 4):
        save(own, step)
        save(other, step + 10)
    assert resolve_resume_folder(None, "auto", own) == own / "4"  # the run's own phase folder
    assert resolve_resume_folder(None, 2, own) == own / "2"
    assert resolve_resume_folder(other, "auto", own) == other / "14"  # --from-checkpoint's phase folder
    assert resolve_resume_folder(other, 12, own) == other / "12"
    assert resolve_resume_folder(other / "12", None, own) == other / "12"  # one checkpoint folder
    with pytest.raises(FileNotFoundError, match=r"other/13: no checkpoint folder for step 13"):
        resolve_resume_folder(other, 13, own)
    # A phase folder without a last step is not a checkpoint: the error says what to add.
    with pytest.raises(FileNotFoundError, match=r"other: incomplete or missing .*add --last-step-of-checkpoint auto"):
        resolve_resume_folder(other, None, own)
    (other / "12" / "bert_paddle_progress.json").write_text("[]", encoding="utf-8")
    with pytest.raises(ValueError, match=r"12/bert_paddle_progress.json: progress file has no integer global_step"):
        resolve_resume_folder(other / "12", None, own)


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
from checkpoint import restore_rng_state
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
