"""Training checkpoints: the step-folder format, atomic saves of step folders, rotation, the one resolver of the
resume forms, loading, the optimizer-state naming and RNG state capture. Each file is written with atomic_io.py,
the project's atomic writer.

Layout (the one NVIDIA's PaddlePaddle BERT uses):

    <output-dir>/<bert-model>/phase1|phase2/<global-step>/
        <prefix>.pdparams        model state dict (paddle.save)
        <prefix>.pdopt           optimizer state dict, including its LR scheduler (absent if none was given),
                                 keyed by structured parameter names (see optimizer_state_for_saving)
        <prefix>_config.json     the BertConfig of the model (absent in folders written before it was added)
        <prefix>_vocab.txt       the WordPiece vocabulary the model trained with (pretraining's; absent before it
                                 was added)
        <prefix>_progress.json   whatever the trainer needs to resume exactly; always has "global_step"

The config and vocabulary files make a step folder self-describing: `read_config` rebuilds the model without the
run's --config-file, and fine-tuning tokenizes with the vocabulary the embeddings were learned for (a checkpoint
pretrained with its own vocabulary would otherwise be fine-tuned on the wrong ids, silently).

A checkpoint is *complete* when its progress file exists and parses. Saves are atomic with respect to
a kill at any moment: every file is written (and fsynced) into `.tmp-<step>-<pid>/` beside the step
folders, the progress file last, and the folder is then renamed to `<step>`. A kill therefore leaves
either no `<step>` folder or a complete one; the temp folder it leaves behind is removed by the next
save. Re-saving a step that already exists moves the old folder aside to `.replaced-<step>-<pid>/`
before renaming the new one in; if a kill falls between those two renames, discovery still finds the
moved-aside copy, and the next save puts it back.

Resume (`open_resume_checkpoint`, NVIDIA's --from-checkpoint / --last-step-of-checkpoint forms; the rules are
in docs/resume.md): pretraining resolves them to resume, fine-tuning (read_only) to find its starting weights
in another run's checkpoints, which it never renames. A run never writes over a checkpoint it did not write
itself: one that cannot be read (`UnreadableCheckpoint`) is renamed `<step>.unreadable-<reason>` (`set_aside`),
where neither discovery nor rotation nor a save will touch it again, and a run refuses to start below
checkpoints of an earlier run (`check_no_later_checkpoints`).

Only one process may write a phase folder: `save_checkpoint` takes the caller's rank and writes
nothing unless it is 0, and only rank 0 may resolve an "auto" resume (it sets folders aside). Every rank
may call `load_checkpoint`.

`capture_rng_state` / `restore_rng_state` turn the Python, NumPy and Paddle generator states into
JSON and back, so that they can live in the progress file and a resumed run draws the same numbers.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import re
import shutil
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import paddle

from bert_config import BertConfig
from checkpoints.paddle_files import read_paddle_file, write_safetensors_state
from utils import paddle_private
from utils.atomic_io import TEMP_PREFIX, fsync_dir, temp_beside, text_writer, write_synced

DEFAULT_PREFIX = "bert_paddle"
PARAMS_SUFFIX = ".pdparams"
OPTIMIZER_SUFFIX = ".pdopt"
PROGRESS_SUFFIX = "_progress.json"
CONFIG_SUFFIX = "_config.json"
SAFETENSORS_SUFFIX = ".safetensors"  # the --save-safetensors twin of <prefix>.pdparams
VOCAB_SUFFIX = "_vocab.txt"
_REPLACED_PATTERN = re.compile(r"\.replaced-(\d+)-\d+")
_SET_ASIDE_MARK = ".unreadable-"
_SET_ASIDE_PATTERN = re.compile(r".+" + re.escape(_SET_ASIDE_MARK) + r".+")


def phase_dir(output_dir: str | os.PathLike, bert_model: str, phase: int) -> Path:
    """`<output-dir>/<bert-model>/phase<phase>`, the folder that holds one phase's step folders."""
    if phase not in (1, 2):
        raise ValueError(f"phase must be 1 or 2, got {phase}")
    return Path(output_dir) / bert_model / f"phase{phase}"


def read_progress(step_dir: str | os.PathLike, prefix: str = DEFAULT_PREFIX) -> dict:
    """The progress record of a checkpoint folder; FileNotFoundError/ValueError name the folder if incomplete."""
    path = Path(step_dir) / (prefix + PROGRESS_SUFFIX)
    if not path.is_file():
        raise FileNotFoundError(f"{step_dir}: incomplete or missing checkpoint (no {path.name})")
    try:
        progress = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: unreadable progress file ({error})") from None
    if not isinstance(progress, dict) or not isinstance(progress.get("global_step"), int):
        raise ValueError(f"{path}: progress file has no integer global_step")
    return progress


def is_complete(step_dir: str | os.PathLike, prefix: str = DEFAULT_PREFIX) -> bool:
    try:
        read_progress(step_dir, prefix)
    except (FileNotFoundError, ValueError):
        return False
    return True


def list_checkpoints(phase_folder: str | os.PathLike, prefix: str = DEFAULT_PREFIX) -> list[tuple[int, Path]]:
    """Complete checkpoints in a phase folder as (global_step, folder), oldest step first (see _step_folders)."""
    return sorted((step, folder) for step, folder in _step_folders(Path(phase_folder)).items()
                  if is_complete(folder, prefix))


class UnreadableCheckpoint(ValueError):
    """A checkpoint folder whose files are missing, truncated or garbled. `reason` says which in a few words fit
    for a folder name ("bad-params"); the message names the file."""

    def __init__(self, folder: Path, reason: str, message: str):
        super().__init__(message)
        self.folder, self.reason = folder, reason


def _checked_progress(step_dir: Path, prefix: str) -> dict:
    """read_progress, its errors as UnreadableCheckpoint."""
    try:
        return read_progress(step_dir, prefix)
    except FileNotFoundError as error:
        raise UnreadableCheckpoint(step_dir, "no-progress-file", str(error)) from None
    except ValueError as error:
        raise UnreadableCheckpoint(step_dir, "bad-progress-file", str(error)) from None


def load_checkpoint(step_dir: str | os.PathLike, prefix: str = DEFAULT_PREFIX) -> tuple[dict, dict | None, dict]:
    """(model_state, optimizer_state or None, progress) of a checkpoint folder; UnreadableCheckpoint otherwise."""
    step_dir = Path(step_dir)
    progress = _checked_progress(step_dir, prefix)
    params_path = step_dir / (prefix + PARAMS_SUFFIX)
    if not params_path.is_file():
        raise UnreadableCheckpoint(step_dir, "no-params", f"{step_dir}: checkpoint has no {params_path.name}")
    try:
        model_state = read_paddle_file(params_path)
    except ValueError as error:
        raise UnreadableCheckpoint(step_dir, "bad-params", str(error)) from None
    optimizer_path = step_dir / (prefix + OPTIMIZER_SUFFIX)
    try:
        optimizer_state = read_paddle_file(optimizer_path) if optimizer_path.is_file() else None
    except ValueError as error:
        raise UnreadableCheckpoint(step_dir, "bad-optimizer-state", str(error)) from None
    return model_state, optimizer_state, progress


def read_config(step_dir: str | os.PathLike, prefix: str = DEFAULT_PREFIX) -> BertConfig | None:
    """The BertConfig saved in a checkpoint folder, or None for a folder written before configs were saved."""
    path = Path(step_dir) / (prefix + CONFIG_SUFFIX)
    if not path.is_file():
        return None
    return BertConfig.from_json_file(path)


# ---------------------------------------------------------------------------------------------------------------
# Resume: which checkpoint a run continues from (see docs/resume.md)


@dataclasses.dataclass(frozen=True)
class SetAside:
    """An unreadable checkpoint folder that was renamed out of the way, and why."""

    original: Path
    moved_to: Path
    reason: str  # the UnreadableCheckpoint message, naming the file


@dataclasses.dataclass(frozen=True)
class Resume:
    """A checkpoint to resume from, and the unreadable newer ones set aside on the way to it. Its states are
    None when it was found read-only (only its progress file read) and optimizer_state when it has none."""

    folder: Path
    model_state: dict | None
    optimizer_state: dict | None
    progress: dict
    set_aside: tuple[SetAside, ...] = ()


def _step_folders(phase_folder: Path) -> dict[int, Path]:
    """step -> `<step>` folder of a phase folder, whatever its state; a `.replaced-<step>-*` folder (left by a kill
    while a step was being re-saved) stands in for its step when `<step>` itself is missing."""
    if not phase_folder.is_dir():
        return {}
    numbered: dict[int, Path] = {}
    replaced: dict[int, Path] = {}
    for entry in phase_folder.iterdir():
        if entry.name.isdigit():
            numbered[int(entry.name)] = entry
        elif match := _REPLACED_PATTERN.fullmatch(entry.name):
            replaced[int(match.group(1))] = entry
    return {**replaced, **numbered}


def _set_aside_folders(phase_folder: Path) -> list[str]:
    if not phase_folder.is_dir():
        return []
    return sorted(entry.name for entry in phase_folder.iterdir() if _SET_ASIDE_PATTERN.fullmatch(entry.name))


def _holds_checkpoint(folder: Path, prefix: str) -> bool:
    """Whether folder holds checkpoint files itself (rather than <step>/ folders of them)."""
    return any((folder / (prefix + suffix)).is_file() for suffix in (PROGRESS_SUFFIX, PARAMS_SUFFIX, OPTIMIZER_SUFFIX))


def open_checkpoint(folder: Path, prefix: str = DEFAULT_PREFIX, step: int | None = None,
                    read_only: bool = False) -> Resume:
    """Load folder (read_only: read only its progress file); with `step`, its progress must say that step (a
    folder's name is its step). UnreadableCheckpoint otherwise."""
    if read_only:
        model_state, optimizer_state, progress = None, None, _checked_progress(folder, prefix)
    else:
        model_state, optimizer_state, progress = load_checkpoint(folder, prefix)
    if step is not None and progress["global_step"] != step:
        raise UnreadableCheckpoint(folder, "step-mismatch", f"{folder}: its progress file says global_step "
                                   f"{progress['global_step']}, not {step}")
    return Resume(folder, model_state, optimizer_state, progress)


def set_aside(error: UnreadableCheckpoint) -> SetAside:
    """Rename an unreadable checkpoint folder to `<name>.unreadable-<reason>` (with -2, -3, ... if taken), where
    no discovery, rotation or save will ever use it again."""
    folder = error.folder
    moved_to = folder.with_name(f"{folder.name}{_SET_ASIDE_MARK}{error.reason}")
    copy = 1
    while moved_to.exists():
        copy += 1
        moved_to = folder.with_name(f"{folder.name}{_SET_ASIDE_MARK}{error.reason}-{copy}")
    os.rename(folder, moved_to)
    fsync_dir(folder.parent)
    return SetAside(folder, moved_to, str(error))


def _steps_held(phase_folder: Path, prefix: str) -> str:
    """What a phase folder holds, for a message: "<folder> holds steps 6, 8" (its complete checkpoints)."""
    if not phase_folder.is_dir():
        return f"{phase_folder} does not exist"
    steps = [str(step) for step, _ in list_checkpoints(phase_folder, prefix)]
    return f"{phase_folder} holds {'steps ' + ', '.join(steps) if steps else 'no complete checkpoint'}"


def _newest_intact(phase_folder: Path, prefix: str, read_only: bool) -> Resume | None:
    """The newest step folder that opens, after setting aside each newer one that does not (read_only: passing
    over it, where it stays); None if the phase folder holds no step folders and nothing unreadable, ValueError if
    it holds nothing intact."""
    moved: list[SetAside] = []
    passed_over: list[str] = []
    for step, folder in sorted(_step_folders(phase_folder).items(), reverse=True):
        try:
            return dataclasses.replace(open_checkpoint(folder, prefix, step, read_only), set_aside=tuple(moved))
        except UnreadableCheckpoint as error:
            if read_only:
                passed_over.append(folder.name)
            else:
                moved.append(set_aside(error))
    unreadable = sorted(passed_over + _set_aside_folders(phase_folder))
    if unreadable:
        raise ValueError(f"{phase_folder}: no intact checkpoint to resume from, only the unreadable "
                         f"{', '.join(unreadable)}; move them elsewhere to start this phase afresh")
    return None


def open_resume_checkpoint(
    from_checkpoint: str | os.PathLike | None,
    last_step_of_checkpoint: None | str | int,
    own_phase_folder: str | os.PathLike | None,
    prefix: str = DEFAULT_PREFIX,
    *,
    read_only: bool = False,
) -> Resume | None:
    """The checkpoint that --from-checkpoint and --last-step-of-checkpoint name, loaded; None to start fresh. The
    one resolver of their forms, for pretraining's resume and fine-tuning's starting weights (docs/resume.md).

    own_phase_folder: the phase folder the run writes (None for a run that writes none, as fine-tuning).
    read_only: read only the progress files and rename nothing (a run that reads another run's checkpoints).

    NVIDIA's forms, plus a phase folder with a step:
    - no last step: from_checkpoint is one checkpoint folder (None: start fresh);
    - a step N: from_checkpoint, if it holds checkpoint files itself, which must be those of step N; else
      `<phase folder>/N`, the phase folder being from_checkpoint or, without it, own_phase_folder;
    - "auto": the phase folder's newest intact `<step>/` folder (None if own_phase_folder does not exist or holds
      none; FileNotFoundError for any other folder); each newer one that cannot be read is set aside
      (`set_aside`; read_only: passed over), and if none is intact, ValueError.
      A from_checkpoint that holds checkpoint files itself is that checkpoint.
    A checkpoint named explicitly that cannot be read raises UnreadableCheckpoint and stays where it is.
    Without read_only only the process that writes the phase folder (rank 0) may call this with "auto": it
    renames folders.
    """
    explicit = Path(from_checkpoint) if from_checkpoint is not None else None
    own = Path(own_phase_folder) if own_phase_folder is not None else None
    if last_step_of_checkpoint is None:
        if explicit is None:
            return None
        if not _holds_checkpoint(explicit, prefix):
            raise FileNotFoundError(f"{explicit}: not a checkpoint folder (no {prefix}{PROGRESS_SUFFIX}); for a "
                                    "folder of <step>/ checkpoints add --last-step-of-checkpoint auto or a step")
        return open_checkpoint(explicit, prefix, read_only=read_only)
    search = explicit if explicit is not None else own
    if search is None:  # a caller that writes no phase folder must name one
        raise ValueError("--last-step-of-checkpoint needs --from-checkpoint")
    if last_step_of_checkpoint == "auto":
        if search.is_dir() and not _step_folders(search) and _holds_checkpoint(search, prefix):
            return open_checkpoint(search, prefix, read_only=read_only)
        resume = _newest_intact(search, prefix, read_only)
        # Only the run's own phase folder may not hold a checkpoint yet (its first run); any other folder was
        # named to be resumed from, and a typo in it must not start the run from step 1.
        if resume is None and (own is None or search.resolve() != own.resolve()):
            state = "holds no checkpoint" if search.is_dir() else "does not exist"
            only_own = (" (with --last-step-of-checkpoint auto only the run's own phase folder may be empty or "
                        "missing)") if own is not None else ""
            raise FileNotFoundError(f"{search}: --from-checkpoint {state}{only_own}")
        return resume
    step = int(last_step_of_checkpoint)
    if explicit is not None and _holds_checkpoint(explicit, prefix):
        resume = open_checkpoint(explicit, prefix, read_only=read_only)
        if resume.progress["global_step"] != step:
            raise ValueError(f"{explicit} holds the checkpoint of step {resume.progress['global_step']}, not of "
                             f"--last-step-of-checkpoint {step}")
        return resume
    folder = _step_folders(search).get(step)
    if folder is None:
        # --from-checkpoint may name the step folder itself (NVIDIA's <phase>/600 with 600), gone by rotation.
        missing = search if search.name == str(step) and not search.exists() else search / str(step)
        raise FileNotFoundError(f"{missing}: no checkpoint folder for step {step} "
                                f"({_steps_held(missing.parent, prefix)})")
    return open_checkpoint(folder, prefix, step, read_only)


def check_no_later_checkpoints(phase_folder: str | os.PathLike, start_step: int) -> None:
    """ValueError if the phase folder holds step folders after start_step: a run from there would write over the
    checkpoints of an earlier run, and a later "auto" resume would take them for its own."""
    later = sorted(step for step in _step_folders(Path(phase_folder)) if step > start_step)
    if later:
        after = f" after step {start_step}" if start_step else ""
        steps = f"step{'s' if len(later) > 1 else ''} {', '.join(map(str, later))}"
        raise ValueError(f"{phase_folder} holds checkpoints of an earlier run{after} ({steps}) that this run would "
                         "write over; resume from the newest "
                         "with --last-step-of-checkpoint auto, or write to another --output-dir")


def _rename_optimizer_state(state: Mapping[str, Any], renames: Mapping[str, str]) -> dict:
    """Optimizer state with each parameter name in its keys replaced through `renames`.

    Paddle keys accumulators "<param.name>_<accumulator>_<n>" and master weights "<param.name>", where
    param.name is a counter-based name such as "linear_5.w_0" that depends on construction order.
    """
    renamed = {}
    # Longest names first, so that "linear_1.w_0" never claims the keys of "linear_1.w_0_x" style names.
    ordered = sorted(renames, key=len, reverse=True)
    for key, value in state.items():
        if key == "LR_Scheduler":
            renamed[key] = value
        elif key == "master_weights":
            renamed[key] = {renames[name]: weight for name, weight in value.items()}
        else:
            old = next((name for name in ordered if key.startswith(name + "_")), None)
            if old is None:
                raise ValueError(f"optimizer state entry {key!r} belongs to no parameter of the model")
            renamed[renames[old] + key[len(old):]] = value
    return renamed


def optimizer_state_for_saving(model: paddle.nn.Layer, optimizer: paddle.optimizer.Optimizer) -> dict:
    """The optimizer's state keyed by structured parameter names ("bert.encoder.0.output.weight_moment1_0").

    Saved this way, a checkpoint's moments can only ever be loaded into the parameter they belong to, even if
    the model is built in another order and Paddle's counter-based names shift.
    """
    return _rename_optimizer_state(optimizer.state_dict(), {p.name: n for n, p in model.named_parameters()})


def load_optimizer_state(
    model: paddle.nn.Layer, optimizer: paddle.optimizer.Optimizer, state: Mapping[str, Any] | None, source: str
) -> None:
    """Inverse of optimizer_state_for_saving; ValueError/FileNotFoundError name `source` (the folder)."""
    if state is None:
        raise FileNotFoundError(f"{source}: checkpoint has no optimizer state to resume from")
    try:
        renamed = _rename_optimizer_state(state, {n: p.name for n, p in model.named_parameters()})
    except (KeyError, ValueError) as error:
        raise ValueError(f"{source}: optimizer state does not match this model ({error})") from None
    optimizer.set_state_dict(renamed)


def _json_default(value: Any) -> Any:
    """NumPy scalars (common in data positions and losses) are written as the Python numbers they hold."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable")


def _remove_folder(folder: Path) -> None:
    """Delete a folder so that no kill can leave a half-deleted step folder that still looks complete."""
    doomed = temp_beside(folder, f"deleting-{folder.name}")
    os.rename(folder, doomed)
    shutil.rmtree(doomed)


def _recover_interrupted_saves(phase_folder: Path, prefix: str) -> None:
    """Remove temp folders of killed saves; put back a step moved aside by an interrupted re-save."""
    for entry in phase_folder.iterdir():
        if entry.name.startswith(TEMP_PREFIX):
            shutil.rmtree(entry, ignore_errors=True)
        elif match := _REPLACED_PATTERN.fullmatch(entry.name):
            original = phase_folder / match.group(1)
            if original.exists() or not is_complete(entry, prefix):
                shutil.rmtree(entry, ignore_errors=True)
            else:
                os.rename(entry, original)


def _rotate(phase_folder: Path, just_saved: int, keep_max: int, prefix: str) -> None:
    """Keep the checkpoint just saved and the newest keep_max-1 others, counting those of earlier runs.

    The one just saved is always kept, even when an earlier run left checkpoints at higher steps:
    deleting it would leave a fresh run of the same job nothing of its own to resume from.
    """
    others = [folder for step, folder in list_checkpoints(phase_folder, prefix) if step != just_saved]
    for folder in others[: max(0, len(others) - (keep_max - 1))]:
        _remove_folder(folder)


def save_checkpoint(
    phase_folder: str | os.PathLike,
    global_step: int,
    model_state: Mapping[str, Any],
    optimizer_state: Mapping[str, Any] | None,
    progress: Mapping[str, Any],
    *,
    config: BertConfig,
    rank: int,
    prefix: str = DEFAULT_PREFIX,
    keep_max: int | None = None,
    with_safetensors: bool = False,
    vocab_file: str | os.PathLike | None = None,
) -> Path | None:
    """Atomically write `<phase_folder>/<global_step>/` and rotate; returns the folder (None on rank != 0).

    config: the BertConfig the model was built from, saved beside it.
    with_safetensors: also write model_state as `<prefix>.safetensors`, inside the same atomic save, so that the
    checkpoint never exists without it.
    progress: JSON-serialisable resume information (epoch, phase, data position, loss-scaler state,
    `capture_rng_state()`, ...). "global_step" is added; if present it must equal global_step.
    keep_max: how many complete checkpoints to keep (None keeps all).
    vocab_file: the vocabulary the model trains with, copied beside it as `<prefix>_vocab.txt` (None: no copy).
    """
    if rank != 0:
        return None
    if keep_max is not None and keep_max < 1:
        raise ValueError(f"keep_max must be at least 1 (or None to keep all), got {keep_max}")
    if progress.get("global_step", global_step) != global_step:
        raise ValueError(f"progress global_step {progress['global_step']} differs from the step saved, {global_step}")
    progress_text = json.dumps(
        {**progress, "global_step": global_step}, indent=2, sort_keys=True, default=_json_default
    )

    phase_folder = Path(phase_folder)
    phase_folder.mkdir(parents=True, exist_ok=True)
    _recover_interrupted_saves(phase_folder, prefix)
    final = phase_folder / str(global_step)
    temp = temp_beside(final)
    try:
        temp.mkdir()
        writes: list[tuple[str, Callable[[str], None]]] = [
            (PARAMS_SUFFIX, lambda path: paddle.save(dict(model_state), path)),
        ]
        if optimizer_state is not None:
            writes.append((OPTIMIZER_SUFFIX, lambda path: paddle.save(dict(optimizer_state), path)))
        if with_safetensors:
            writes.append((SAFETENSORS_SUFFIX, lambda path: write_safetensors_state(path, model_state)))
        writes.append((CONFIG_SUFFIX, text_writer(config.to_json_string())))
        if vocab_file is not None:
            writes.append((VOCAB_SUFFIX, lambda path: shutil.copyfile(vocab_file, path)))
        # The progress file goes last: its presence is what marks the checkpoint complete.
        writes.append((PROGRESS_SUFFIX, text_writer(progress_text)))
        for suffix, write in writes:
            write_synced(temp / (prefix + suffix), write)
        fsync_dir(temp)
    except OSError as error:  # a full disk, most often: say where, and that the older checkpoints are intact
        shutil.rmtree(temp, ignore_errors=True)
        raise OSError(error.errno, f"{final}: checkpoint not saved, the earlier ones are unchanged "
                      f"({error.strerror or error})") from error
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise

    if final.exists():
        moved_aside = phase_folder / f".replaced-{global_step}-{os.getpid()}"
        os.rename(final, moved_aside)
        os.rename(temp, final)
        shutil.rmtree(moved_aside)
    else:
        os.rename(temp, final)
    fsync_dir(phase_folder)

    if keep_max is not None:
        _rotate(phase_folder, global_step, keep_max, prefix)
    return final


def capture_rng_state() -> dict:
    """JSON-serialisable states of Python's `random`, NumPy's global RNG and Paddle's CPU and CUDA generators.

    A Paddle generator state is (device, seed, offset, engine bytes) (paddle_private.GeneratorStateFields),
    where the bytes are the text serialisation of its std::mt19937_64 engine; we keep the bytes as a latin-1
    string, which maps every byte value to one character and back.
    """

    def paddle_state(state: Any) -> dict:
        fields = paddle_private.generator_state_fields(state)
        return {"device": fields.device, "seed": fields.seed, "offset": fields.offset,
                "engine": fields.engine.decode("latin-1")}

    python_version, python_internal, python_gauss = random.getstate()
    numpy_kind, numpy_keys, numpy_pos, numpy_has_gauss, numpy_gauss = np.random.get_state(legacy=True)
    return {
        "python": {"version": python_version, "internal": list(python_internal), "gauss_next": python_gauss},
        "numpy": {
            "kind": numpy_kind,
            "keys": numpy_keys.tolist(),
            "pos": int(numpy_pos),
            "has_gauss": int(numpy_has_gauss),
            "cached_gaussian": float(numpy_gauss),
        },
        "paddle_cpu": [paddle_state(state) for state in paddle.get_rng_state(device="cpu")],
        "paddle_cuda": [paddle_state(state) for state in paddle.get_cuda_rng_state()],
    }


def restore_rng_state(rng_state: Mapping[str, Any]) -> None:
    """Put back the generator states saved by `capture_rng_state`."""

    def paddle_state(saved: Mapping[str, Any]) -> Any:
        return paddle_private.generator_state_from_fields(paddle_private.GeneratorStateFields(
            saved["device"], saved["seed"], saved["offset"], saved["engine"].encode("latin-1")))

    python = rng_state["python"]
    random.setstate((python["version"], tuple(python["internal"]), python["gauss_next"]))
    numpy_state = rng_state["numpy"]
    np.random.set_state(
        (
            numpy_state["kind"],
            np.array(numpy_state["keys"], dtype=np.uint32),
            numpy_state["pos"],
            numpy_state["has_gauss"],
            numpy_state["cached_gaussian"],
        )
    )
    paddle.set_rng_state([paddle_state(saved) for saved in rng_state["paddle_cpu"]], device="cpu")
    cuda_states = rng_state["paddle_cuda"]
    if cuda_states:
        if len(cuda_states) == len(paddle.get_cuda_rng_state()):
            paddle.set_cuda_rng_state([paddle_state(saved) for saved in cuda_states])
        else:
            warnings.warn(
                f"checkpoint holds {len(cuda_states)} CUDA generator states but this process sees "
                f"{len(paddle.get_cuda_rng_state())} GPUs; CUDA random streams are not restored",
                stacklevel=2,
            )
