"""Helpers shared by several test modules (tests never import each other's test modules)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import paddle

import cpu_ops
import run_pretraining
from conftest import ROOT, require_shared, unavailable
from dllog import read_report, training_step
from modeling import BertConfig, BertForPretraining
from squad_utils import SquadExample, convert_examples_to_features
from tokenizer import BertTokenizer

# ---------------------------------------------------------------------------------------------------------------
# Preprocessing and data

UINT64 = 2**64 - 1


def require_cpu_ops() -> cpu_ops.CpuOps:
    """The cpu_ops extension, for a test of its kernels; a machine without a compiler skips the test, but CI
    (CI=true) must build it, so there the test fails."""
    ops = cpu_ops.load()
    if ops is None:
        unavailable("the cpu_ops extension did not build here (see the cpu_ops warning)")
    return ops


def splitmix64(value: int) -> int:
    """SplitMix64's output function (Steele, Lea & Flood 2014, as in Vigna's splitmix64.c), in Python integers."""
    value = (value + 0x9E3779B97F4A7C15) & UINT64
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & UINT64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & UINT64
    return value ^ (value >> 31)


def documents_kept(corpus_file: Path, seed: int, sample_ratio: float) -> set[int]:
    """The documents (line numbers of a one-document-per-line file, the only file of its corpus) that the rule in
    preprocess_pipeline's docstring keeps: the key of the document at byte offset o of file 0 is
    SplitMix64(SplitMix64(SplitMix64(seed) ^ 0) ^ o); it is kept when the top 53 bits of SplitMix64(key), over
    2**53, are below the ratio."""
    kept, offset = set(), 0
    for line_number, line in enumerate(corpus_file.read_bytes().splitlines(keepends=True)):
        key = splitmix64(splitmix64(splitmix64(seed) ^ 0) ^ offset)
        if (splitmix64(key) >> 11) / 2**53 < sample_ratio:
            kept.add(line_number)
        offset += len(line)
    return kept


def documents_held_out(corpus_file: Path, seed: int, holdout_fraction: float) -> set[int]:
    """The documents (line numbers, as documents_kept) that --holdout-fraction sets aside by the rule in
    preprocess_pipeline's docstring: the top 53 bits of SplitMix64(SplitMix64(key)), over 2**53, are below it."""
    held, offset = set(), 0
    for line_number, line in enumerate(corpus_file.read_bytes().splitlines(keepends=True)):
        key = splitmix64(splitmix64(splitmix64(seed) ^ 0) ^ offset)
        if (splitmix64(splitmix64(key)) >> 11) / 2**53 < holdout_fraction:
            held.add(line_number)
        offset += len(line)
    return held


def words_of(tokens: list[str]) -> list[list[int]]:
    """The positions of each word of a WordPiece sequence: a piece and the "##" pieces right after it; [CLS],
    [SEP] and [PAD] belong to no word and end the one before them."""
    words: list[list[int]] = []
    in_word = False
    for position, token in enumerate(tokens):
        if token in ("[CLS]", "[SEP]", "[PAD]"):
            in_word = False
        elif in_word and token.startswith("##"):
            words[-1].append(position)
        else:
            words.append([position])
            in_word = True
    return words


def partly_masked_words(tokens: list[str], masked_positions: set[int]) -> list[list[int]]:
    """The words of `tokens` (the original, unmasked pieces) of which some positions are masked and some not."""
    return [word for word in words_of(tokens) if 0 < len(masked_positions.intersection(word)) < len(word)]


# ---------------------------------------------------------------------------------------------------------------
# Pretraining runs: a 1-layer, hidden-32 BERT (the uncased vocab, so the LDDL sample shards fit) trained for a few
# steps by run_pretraining.main() in this process.

UNBINNED = ("data", "lddl-sample", "wikitext2-test-seq128-unbinned")
BINNED = ("data", "lddl-sample", "wikitext2-test-seq128-bin64")
DYNAMIC = ("data", "lddl-sample", "wikitext2-test-seq128-unbinned-dynamic")


def write_config(folder: Path, dropout: float = 0.1, name: str = "bert-test.json", positions: int = 128) -> Path:
    """A 1-layer, hidden-32 BERT config with the uncased vocabulary."""
    config = {
        "vocab_size": 30522, "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
        "intermediate_size": 64, "max_position_embeddings": positions, "hidden_dropout_prob": dropout,
        "attention_probs_dropout_prob": dropout,
    }
    path = folder / name
    path.write_text(json.dumps(config))
    return path


def pretraining_argv(tmp_path: Path, *extra: str, dropout: float = 0.1, shards: tuple | Path = UNBINNED,
                     positions: int = 128) -> list[str]:
    """Arguments for a short phase-1 run writing to tmp_path/out and tmp_path/report.json; `extra` overrides.

    shards: a folder under ../shared (as a tuple of parts) or any folder (a Path)."""
    argv = [
        "--input-dir", str(shards if isinstance(shards, Path) else require_shared(*shards)),
        "--vocab-file", str(require_shared("vocab", "bert-uncased-vocab.txt")),
        "--output-dir", str(tmp_path / "out"), "--report-file", str(tmp_path / "report.json"),
        "--bert-model", "custom", "--config-file", str(write_config(tmp_path, dropout, positions=positions)),
        "--max-steps", "4", "--batch-size", "4", "--max-seq-length", "128", "--max-predictions-per-seq", "20",
        "--learning-rate", "5e-3", "--warmup-proportion", "0.25", "--log-freq", "1", "--num-workers", "0",
        "--show-config", "false", "--enable-cpu-affinity", "false",
    ]
    if "--phase2" not in extra:
        argv.append("--phase1")
    return argv + list(extra)


def train(argv: list[str]) -> int:
    """run_pretraining.main in this process: for runs whose numbers no test compares with another process's."""
    return run_pretraining.main(argv)


def without_omp_threads() -> dict[str, str]:
    """This process's environment without OMP_NUM_THREADS, which earlier in-process runs set
    (configure_cpu_threads) and which makes Paddle warn on stderr at import: that line is Paddle's."""
    import os

    return {name: value for name, value in os.environ.items() if name != "OMP_NUM_THREADS"}


def training_environment(**extra: str) -> dict[str, str]:
    """The environment of training processes whose results a test compares bit for bit.

    Two runs compared bit for bit must start the same way, both as processes of the real command: MKL picks its
    GEMM kernels once, at its first call, and a run inside pytest inherits the choice pytest's earlier tests made
    (on AMD, before runtime.apply_cpu_tweaks could set MKL_DEBUG_CPU_TYPE). These processes take MKL's AVX2
    kernels (MKL_DEBUG_CPU_TYPE=5, on a CPU that has AVX2 and FMA), which differ from this pytest process's own on
    Intel and AMD alike, so that a comparison with an in-process run fails on every machine, not only on AMD.
    """
    env = without_omp_threads()
    if {"avx2", "fma"} <= cpu_ops.cpu_vendor_and_flags()[1]:
        env["MKL_DEBUG_CPU_TYPE"] = "5"
    return {**env, **extra}


def start_training(argv: list[str], code: str | None = None, **env: str):
    """`python run_pretraining.py argv` (or `python -c code argv`) as a new process in training_environment(), its
    output on a pipe; returns the Popen."""
    import subprocess
    import sys

    command = [sys.executable, "-W", "ignore", *(["-c", code] if code else [str(ROOT / "run_pretraining.py")])]
    return subprocess.Popen([*command, *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                            env=training_environment(**env))


def run_training(argv: list[str], code: str | None = None, timeout: float = 600, **env: str) -> str:
    """start_training to its end; returns its output, and fails the test if it exited with an error."""
    import pytest

    process = start_training(argv, code, **env)
    output, _ = process.communicate(timeout=timeout)
    if process.returncode != 0:
        pytest.fail(f"run_pretraining exited {process.returncode}:\n{output[-3000:]}")
    return output


def step_records(report: Path) -> list[dict]:
    """The per-step LOG records of a report (run_pretraining.py's [epoch, step]), in order."""
    return [r for r in read_report(report) if r["type"] == "LOG" and training_step(r["step"]) is not None]


def step_numbers(records: list[dict]) -> list[int]:
    """The training step of each record ([epoch, step] -> step)."""
    return [training_step(r["step"]) for r in records]


def summaries(report: Path) -> list[dict]:
    return [r["data"] for r in read_report(report) if r["type"] == "LOG" and r["step"] == []]


def step_folder(out: Path, step: int, phase: int = 1) -> Path:
    """The checkpoint folder of `step` in a run of the test's custom model."""
    return out / "custom" / f"phase{phase}" / str(step)


def checkpoint_params(out: Path, step: int, phase: int = 1, prefix: str = "bert_paddle") -> dict[str, np.ndarray]:
    state = paddle.load(str(step_folder(out, step, phase) / f"{prefix}.pdparams"))
    return {name: value.numpy() for name, value in state.items()}


def step_folders(out: Path, phase: int = 1) -> list[int]:
    return sorted(int(p.name) for p in (out / "custom" / f"phase{phase}").iterdir() if p.name.isdigit())


# ---------------------------------------------------------------------------------------------------------------
# SQuAD features


def numbered_windows(tokenizer: BertTokenizer) -> tuple[SquadExample, list]:
    """Question "q" over the context "1 2 ... 40" (one word piece each), in more than two windows."""
    example = SquadExample("q", "which?", " ".join(str(number) for number in range(1, 41)), 0)
    features = convert_examples_to_features([example], tokenizer, max_seq_length=32, doc_stride=8,
                                            max_query_length=8)
    assert len(features) > 2
    return example, features


# ---------------------------------------------------------------------------------------------------------------
# Fine-tuning
# run_squad.py and run_glue.py runs: a dropout-free tiny model, a pretraining checkpoint, the report's records.

TINY_CONFIG = ROOT / "bert_configs" / "bert-tiny-uncased.json"


def tiny_config(dropout: float = 0.0) -> dict:
    """bert-tiny's config, by default without dropout so that training is deterministic."""
    config = json.loads(TINY_CONFIG.read_text())
    config.update(hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    return config


def write_tiny_model(folder: Path) -> None:
    """<folder>/config.json (tiny_config) and a pretraining checkpoint of it with random weights (seed 1),
    <folder>/pretrain/1000/bert_paddle.pdparams."""
    config = tiny_config()
    (folder / "config.json").write_text(json.dumps(config))
    paddle.seed(1)
    pretrained = BertForPretraining(BertConfig.from_dict(config))
    (folder / "pretrain" / "1000").mkdir(parents=True)
    paddle.save(pretrained.state_dict(), str(folder / "pretrain" / "1000" / "bert_paddle.pdparams"))


def fine_tuning_workspace(folder: Path, squad: dict[str, tuple[int, int | None]] | None = None,
                          mrpc: dict[str, tuple[str, int]] | None = None) -> Path:
    """folder with write_tiny_model's model and slices of the shared data, for run_squad.py and run_glue.py runs.

    squad maps a file name to (paragraphs, questions): the first paragraphs of SQuAD v1.1 dev's first article,
    the first of them cut to its first `questions` questions (None: all). mrpc maps a file name to (split, rows):
    the header and first rows of MRPC's <split>.tsv, byte for byte (BOM, quotes)."""
    if squad:
        article = json.loads(require_shared("data", "squad", "v1.1", "dev-v1.1.json").read_text())["data"][0]
        for name, (paragraphs, questions) in squad.items():
            chosen = [dict(article["paragraphs"][0], qas=article["paragraphs"][0]["qas"][:questions]),
                      *article["paragraphs"][1:paragraphs]]
            (folder / name).write_text(json.dumps({"version": "1.1", "data": [{"title": article["title"],
                                                                                 "paragraphs": chosen}]}))
    for name, (split, rows) in (mrpc or {}).items():
        lines = require_shared("data", "glue", "MRPC", f"{split}.tsv").read_bytes().split(b"\n")
        (folder / name).write_bytes(b"\n".join(lines[:rows + 1]) + b"\n")
    write_tiny_model(folder)
    return folder


def stage_args(stage: str, data: Path, *extra) -> list:
    """A fine-tuning script's options for one stage ("train" or "predict") on one data file, then `extra`."""
    return [f"--do-{stage}", f"--{stage}-file", data, *extra]


def assert_one_line(message: str, prefix: str, *parts: object) -> str:
    """message (an error's text, or a program's stderr with its final newline) is one line that starts with prefix
    (the program, or the file at fault) and names each of parts (the file, the line, the flag, the value, the
    rule); returns the line. Checking the parts and not the whole text lets a message be reworded without
    breaking its tests."""
    line = message.removesuffix("\n")
    assert line and "\n" not in line, f"not one line: {message!r}"
    assert line.startswith(prefix), f"{line!r} does not start with {prefix!r}"
    missing = [str(part) for part in parts if str(part) not in line]
    assert not missing, f"{line!r} does not name {missing}"
    return line


def logged(records: list[dict], name: str) -> list:
    """Values of a metric in the report's step and summary records (not the PARAMETER ones)."""
    return [record["data"][name] for record in records
            if record["type"] == "LOG" and record["step"] != "PARAMETER" and name in record["data"]]


def parameter(records: list[dict], name: str) -> list:
    """Values of `name` in the report's PARAMETER records."""
    return [record["data"][name] for record in records if record.get("step") == "PARAMETER" and name in record["data"]]


def params(output_dir: Path, prefix: str = "bert_paddle") -> dict[str, np.ndarray]:
    """The saved fine-tuned weights of a run."""
    return {name: np.asarray(value) for name, value in paddle.load(str(output_dir / f"{prefix}.pdparams")).items()}


def make_v2_dataset(v1_data: list) -> dict:
    """A SQuAD v2.0 file's content from a v1.1 "data" list, deterministically.

    Question k of the file (counting from 0) with k % 3 == 2 moves from paragraph p of article a to paragraph
    p (mod its count) of article a + 1 (the last article's go to the first), where it is appended with
    "is_impossible": true and no answers. Every other question stays, with "is_impossible": false.
    """
    data = copy.deepcopy(v1_data)
    moved = []  # (target article, target paragraph, question)
    question_index = 0
    for article_index, article in enumerate(data):
        target = data[(article_index + 1) % len(data)]["paragraphs"]
        for paragraph_index, paragraph in enumerate(article["paragraphs"]):
            kept = []
            for qa in paragraph["qas"]:
                if question_index % 3 == 2:
                    impossible = {"id": qa["id"], "question": qa["question"], "answers": [], "is_impossible": True}
                    moved.append((target[paragraph_index % len(target)], impossible))
                else:
                    kept.append({**qa, "is_impossible": False})
                question_index += 1
            paragraph["qas"] = kept
    for paragraph, qa in moved:
        paragraph["qas"].append(qa)
    return {"version": "v2.0", "data": data}


def use_gpu_amp_policy(monkeypatch) -> None:
    """Build the AMP policy as on a GPU, so that the loss-scaling flags act (autocast itself is a no-op on CPU)."""
    import amp
    import finetune

    monkeypatch.setattr(finetune, "amp_policy", lambda args: amp.amp_policy(args, device="gpu:0"))


def record_optimizer_options(monkeypatch) -> dict:
    """The options finetune.train gives create_optimizer, filled in when it is called."""
    import finetune

    received = {}
    original = finetune.create_optimizer

    def recording(name, model, learning_rate, weight_decay, beta1, beta2, epsilon, max_grad_norm, **options):
        received.update(name=name, weight_decay=weight_decay, beta1=beta1, beta2=beta2, epsilon=epsilon,
                        max_grad_norm=max_grad_norm)
        return original(name, model, learning_rate, weight_decay, beta1, beta2, epsilon, max_grad_norm, **options)
    monkeypatch.setattr(finetune, "create_optimizer", recording)
    return received


def record_amp_policies(monkeypatch) -> list:
    """The AMP policies finetune.train decorates the model with; autocast (of training and of the dygraph
    predictor) becomes a no-op (bfloat16 on CPU)."""
    import contextlib

    import finetune
    import inference

    policies = []
    monkeypatch.setattr(finetune, "amp_decorate", lambda model, optimizer, policy: (
        policies.append(policy), (model, optimizer))[1])
    monkeypatch.setattr(paddle.amp, "is_bfloat16_supported", lambda *args: True)
    for module in (finetune, inference):
        monkeypatch.setattr(module, "amp_autocast", lambda policy: contextlib.nullcontext())
    return policies


def common_argv(workspace: Path, output_dir: Path) -> list[str]:
    """The options every test run of run_squad.py and run_glue.py has: the tiny model of write_tiny_model, the
    uncased vocabulary, batches of 8 (training) and 16 (prediction), and the output folder."""
    from conftest import require_shared

    return ["--vocab-file", str(require_shared("vocab", "bert-uncased-vocab.txt")), "--bert-model", "custom",
            "--config-file", str(workspace / "config.json"), "--train-batch-size", "8", "--predict-batch-size", "16",
            "--output-dir", str(output_dir)]


def run_in_process(main, argv: list, output_dir: Path) -> tuple[Path, list[dict]]:
    """main(argv) of an entry script; returns the output folder and the records of its report."""
    from dllog import read_report

    main([str(arg) for arg in argv])
    return output_dir, read_report(output_dir / "report.json")


def run_script(script: str, argv: list, timeout: float = 120, launch_ranks: int = 0, log_dir: Path | None = None):
    """Run an entry script of the project in a new process (under paddle.distributed.launch with launch_ranks
    ranks, if given) with one CPU thread per process; returns the CompletedProcess."""
    import os
    import subprocess
    import sys

    launcher = ["-m", "paddle.distributed.launch", "--nproc_per_node", str(launch_ranks), "--log_dir",
                str(log_dir)] if launch_ranks else []
    # The project root on the path, so that a test module run as a launched worker imports the project too.
    env = {**os.environ, "PADDLEBERT_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, *launcher, str(ROOT / script), *map(str, argv)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


# ---------------------------------------------------------------------------------------------------------------
# Sequence packing


def ragged_batch(lengths: list[int], seq_length: int, vocab_size: int, seed: int = 0) -> dict[str, np.ndarray]:
    """A collated pretraining batch (the loader's keys and layout) of samples with these token counts, padded to
    seq_length: random ids after [CLS] = 1, segment B in each sample's second half, a few masked positions (never
    the [CLS]) and random NSP labels."""
    rng = np.random.default_rng(seed)
    batch = len(lengths)
    columns = np.arange(seq_length)[None]
    attention_mask = (columns < np.array(lengths)[:, None]).astype(np.int64)
    input_ids = rng.integers(2, vocab_size, (batch, seq_length)) * attention_mask
    input_ids[:, 0] = 1
    token_type_ids = (columns >= (np.array(lengths) // 2)[:, None]).astype(np.int64) * attention_mask
    masked_lm_labels = np.full((batch, seq_length), -1, np.int64)
    for row, length in enumerate(lengths):
        positions = rng.choice(np.arange(1, length), max(1, length // 4), replace=False)
        masked_lm_labels[row, positions] = rng.integers(2, vocab_size, len(positions))
    return {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": attention_mask,
            "masked_lm_labels": masked_lm_labels, "next_sentence_labels": rng.integers(0, 2, batch)}
