"""The fine-tuning parity benchmark's peer: Hugging Face transformers' BertForSequenceClassification fine-tuned on a
GLUE task in a plain PyTorch loop with run_glue.py's recipe, and scored by run_glue.py's metrics.

    $PADDLEBERT_PEERS_DIR/torch/bin/python benchmarks/glue_hf_peer.py --model-dir ../shared/models/all-MiniLM-L6-v2 \
        --task mrpc --train-file MRPC/train.tsv --dev-file MRPC/dev.tsv --epochs 2 --learning-rate 1e-4 --seed 1 \
        --output-dir OUT [--bf16]

benchmarks/finetune_parity.py runs it once per task and seed; what it shares with run_glue.py, so that only the
engine differs:
- the examples: read by finetuning.glue_data (the same rows, labels and label order);
- the batches: finetuning.feature_batching's shuffle of (seed, epoch) and its padding (to the longest feature of the
  batch rounded up to SEQUENCE_MULTIPLE, at most --max-seq-length), batch 32 with the last one partial;
- the recipe: AdamW (betas 0.9/0.999, epsilon 1e-6, decoupled weight decay 0.01 on every tensor but biases and
  LayerNorm gains and biases), gradients clipped to a global norm of 1.0, and lr_scheduler's linear warmup over
  floor(0.1 * updates) then linear decay reaching 0 one update after the last; --epochs passes;
- the scores: finetuning.glue_metrics on the softmax of the logits.
What is its own: transformers' tokenizer (BertTokenizerFast over the model's vocab.txt, truncating the longer text
first), transformers' model (the classifier head drawn from torch's generator seeded with --seed, N(0, 0.02) with
zero bias as ours; dropout 0.1 where ours has it) and torch's kernels. --bf16 runs the forward passes, training's
and evaluation's, under torch.autocast("cpu", dtype=torch.bfloat16), which a user who wants speed would pick.

--check-tokenizer trains nothing: it counts the examples of both files whose token ids from transformers' tokenizer
differ from ours (tokenizer.BertTokenizer and glue_data's features), the one part of the input not shared.

Writes OUT/result.json atomically: the metrics, the training loop's seconds (batches, forward, backward and update;
not start-up, tokenization or evaluation), the updates, the tensors newly initialised and how many tensors are
decayed; and OUT/model (save_pretrained), as run_glue.py saves its fine-tuned model.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from finetuning.feature_batching import batch_indices, pad_token_rows  # noqa: E402
from finetuning.glue_data import GLUE_TASKS, ClassificationFeature, read_glue_examples  # noqa: E402
from finetuning.glue_metrics import compute_metrics  # noqa: E402
from utils.atomic_io import atomic_write_text  # noqa: E402  (after the path insert: the peer's venv has no package)
from utils.cli import finite_float, positive_int, random_seed, run_main  # noqa: E402

SCRIPT = "glue_hf_peer.py"
# finetuning.finetune.SEQUENCE_MULTIPLE, which run_glue.py pads its batches to (that module imports Paddle, which
# this venv lacks; tests/test_finetune_parity.py checks that the two agree).
SEQUENCE_MULTIPLE = 8
MAX_GRAD_NORM = 1.0
BETAS = (0.9, 0.999)
EPSILON = 1e-6  # run_glue.py's --epsilon default (torch's AdamW default is 1e-8)
RESULT_FILE = "result.json"


def learning_rate_at(update: int, peak: float, total_steps: int, warmup_proportion: float) -> float:
    """The learning rate of the update-th optimizer update (1-based) on run_glue.py's schedule
    (lr_scheduler.LinearWarmupPolyDecay, warmup from 0, power 1): peak * k / W during the W = floor(proportion *
    total) warmup updates, then peak * (1 - (k - W) / (total - W + 1)), 0 one update after the last."""
    warmup = math.floor(warmup_proportion * total_steps)
    if update < warmup:
        return peak * update / warmup
    return peak * max(0.0, 1.0 - (update - warmup) / (total_steps - warmup + 1))


def total_updates(num_features: int, batch_size: int, epochs: int) -> int:
    """run_glue.py's updates for --epochs passes (finetune.total_training_steps, one process, no gradient merge)."""
    return max(1, epochs * math.ceil(num_features / batch_size))


def hf_features(tokenizer, examples: list, max_seq_length: int, labels: tuple[str, ...]) -> list[ClassificationFeature]:
    """transformers' tokenization of the examples, `[CLS] a [SEP] (b [SEP])` cut to max_seq_length tokens by
    truncating the longer text first, as glue_data.ClassificationFeature."""
    texts_a = [example.text_a for example in examples]
    texts_b = [example.text_b for example in examples] if examples and examples[0].text_b is not None else None
    encoded = tokenizer(texts_a, texts_b, truncation="longest_first", max_length=max_seq_length)
    label_ids = {label: index for index, label in enumerate(labels)}
    return [ClassificationFeature(list(ids), list(types), label_ids[example.label])
            for example, ids, types in zip(examples, encoded["input_ids"], encoded["token_type_ids"], strict=True)]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", required=True, help="Hugging Face BERT folder (config.json, weights, vocab.txt)")
    parser.add_argument("--task", required=True, choices=sorted(GLUE_TASKS), help="the GLUE layout of the files")
    parser.add_argument("--train-file", required=True)
    parser.add_argument("--dev-file", required=True)
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--do-lower-case", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--check-tokenizer", action="store_true",
                        help="only count the examples that transformers' tokenizer and ours tokenize differently")
    parser.add_argument("--epochs", type=positive_int, default=2)
    parser.add_argument("--learning-rate", type=finite_float, default=1e-4)
    parser.add_argument("--warmup-proportion", type=finite_float, default=0.1)
    parser.add_argument("--weight-decay", type=finite_float, default=0.01)
    parser.add_argument("--train-batch-size", type=positive_int, default=32)
    parser.add_argument("--predict-batch-size", type=positive_int, default=32)
    parser.add_argument("--max-seq-length", type=positive_int, default=128)
    parser.add_argument("--seed", type=random_seed, default=42)
    parser.add_argument("--bf16", action="store_true", help="forward passes under torch's bf16 autocast")
    parser.add_argument("--threads", type=positive_int, default=len(os.sched_getaffinity(0)))
    return parser.parse_args(argv)


def check_tokenizer(args: argparse.Namespace, tokenizer) -> dict:
    """How many examples of the two files transformers' tokenizer gives other ids than ours (and the first)."""
    from finetuning.glue_data import convert_examples_to_features
    from tokenizer import BertTokenizer

    ours = BertTokenizer(str(Path(args.model_dir) / "vocab.txt"), do_lower_case=args.do_lower_case)
    labels = GLUE_TASKS[args.task].labels
    examples = differ = 0
    first = None
    for path in (args.train_file, args.dev_file):
        rows = read_glue_examples(args.task, path)
        pairs = zip(rows, hf_features(tokenizer, rows, args.max_seq_length, labels),
                    convert_examples_to_features(rows, ours, args.max_seq_length, labels), strict=True)
        for example, theirs, mine in pairs:
            examples += 1
            if (theirs.input_ids, theirs.token_type_ids) != (mine.input_ids, mine.token_type_ids):
                differ += 1
                first = first or f"{path}: example {example.guid}"
    return {"examples": examples, "tokenized_differently": differ, "first_difference": first}


def decay_groups(model) -> tuple[list, list]:
    """(decayed, not decayed) parameters: biases and LayerNorm gains and biases get no weight decay, by the
    layer's role as optimizer.no_weight_decay_parameters picks them (transformers' BertLayerNorm is torch's)."""
    import torch

    decayed, undecayed = [], []
    for module in model.modules():
        for name, parameter in module.named_parameters(recurse=False):
            no_decay = isinstance(module, torch.nn.LayerNorm) or name == "bias" or name.endswith("_bias")
            (undecayed if no_decay else decayed).append(parameter)
    return decayed, undecayed


def main(argv: list[str] | None = None) -> None:
    import torch
    import transformers
    from transformers import BertForSequenceClassification, BertTokenizerFast

    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    task = GLUE_TASKS[args.task]
    # The vocabulary positionally: transformers 5 ignores vocab_file= and builds an empty vocabulary.
    tokenizer = BertTokenizerFast(str(Path(args.model_dir) / "vocab.txt"), do_lower_case=args.do_lower_case)
    output_dir = Path(args.output_dir)
    if args.check_tokenizer:
        atomic_write_text(output_dir / RESULT_FILE, json.dumps(check_tokenizer(args, tokenizer), indent=1) + "\n")
        return
    train = hf_features(tokenizer, read_glue_examples(args.task, args.train_file), args.max_seq_length, task.labels)
    dev = hf_features(tokenizer, read_glue_examples(args.task, args.dev_file), args.max_seq_length, task.labels)

    torch.manual_seed(args.seed)  # the classifier head's initialisation, then the dropout masks
    model, loading = BertForSequenceClassification.from_pretrained(
        args.model_dir, num_labels=len(task.labels), output_loading_info=True)
    decayed, undecayed = decay_groups(model)
    optimizer = torch.optim.AdamW([{"params": decayed, "weight_decay": args.weight_decay},
                                   {"params": undecayed, "weight_decay": 0.0}], lr=0.0, betas=BETAS, eps=EPSILON)
    steps = total_updates(len(train), args.train_batch_size, args.epochs)
    pad_token_id = tokenizer.pad_token_id

    def tensors(features: list[ClassificationFeature]) -> dict:
        batch = pad_token_rows(features, pad_token_id, SEQUENCE_MULTIPLE, args.max_seq_length)
        return {name: torch.from_numpy(value) for name, value in batch.items()}

    def logits_of(inputs: dict):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            return model(**inputs).logits.float()

    def batches():
        for epoch in range(args.epochs):
            yield from batch_indices(len(train), args.train_batch_size, shuffle=True, seed=args.seed, epoch=epoch)

    model.train()
    start = time.perf_counter()
    for update, indices in enumerate(batches(), start=1):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate_at(update, args.learning_rate, steps, args.warmup_proportion)
        features = [train[i] for i in indices]
        labels = torch.tensor([feature.label_id for feature in features])
        loss = torch.nn.functional.cross_entropy(logits_of(tensors(features)), labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if update % 10 == 0 or update == steps:
            print(f"step {update}/{steps} loss {loss.item():.4f}", flush=True)
    train_seconds = time.perf_counter() - start

    model.eval()
    probabilities = []
    with torch.no_grad():
        for indices in batch_indices(len(dev), args.predict_batch_size, shuffle=False):
            probabilities.append(torch.softmax(logits_of(tensors([dev[i] for i in indices])), dim=-1).double().numpy())
    label_ids = np.array([feature.label_id for feature in dev])
    metrics = compute_metrics(task.metrics, label_ids, np.concatenate(probabilities))
    model.save_pretrained(output_dir / "model")
    atomic_write_text(output_dir / RESULT_FILE, json.dumps({
        "metrics": metrics, "train_seconds": train_seconds, "steps": steps, "train_examples": len(train),
        "dev_examples": len(dev), "newly_initialized": sorted(loading["missing_keys"]),
        "decayed_tensors": len(decayed), "undecayed_tensors": len(undecayed),
        "attention": model.config._attn_implementation,
        "engine": f"transformers {transformers.__version__} on torch {torch.__version__}"}, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(run_main(main, SCRIPT))
