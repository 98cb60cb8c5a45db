"""Peer for the SQuAD real-weights check: Hugging Face transformers' BertForQuestionAnswering (PyTorch), fine-tuned
on exactly the features, batches, learning-rate schedule and AdamW settings that run_squad.py uses, and scored by
the same postprocessing and evaluation. An experiment, not CI: it needs torch and transformers (dev-only).

    python benchmarks/squad_hf_peer.py --hf-dir ../shared/models/all-MiniLM-L6-v2 --train-file train.json \
        --predict-file eval.json --max-seq-length 256 --train-batch-size 16 --max-steps 64 --learning-rate 1e-4 \
        --warmup-proportion 0.1 --output-dir results/hf_peer

What differs from run_squad.py is only the framework and the random draws (span-head initialisation, dropout
masks); so the two F1 scores should agree within run-to-run noise.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import torch
from transformers import BertForQuestionAnswering

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from finetuning.feature_batching import batch_indices  # noqa: E402
from squad_evaluate import evaluate, load_dataset  # noqa: E402
from squad_utils import (  # noqa: E402
    collate_features,
    convert_examples_to_features,
    postprocess_predictions,
    read_squad_examples,
)
from tokenizer import BertTokenizer  # noqa: E402
from utils.cli import finite_float  # noqa: E402

MAX_GRAD_NORM = 1.0
INPUT_NAMES = ("input_ids", "token_type_ids", "attention_mask")


def learning_rate_at(update: int, peak: float, total: int, warmup: int) -> float:
    """The schedule of lr_scheduler.LinearWarmupPolyDecay with power 1 and warmup_start_lr 0 (1-based update)."""
    if update < warmup:
        return peak * update / warmup
    return peak * (1.0 - min(update - warmup, total - warmup) / (total - warmup))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hf-dir", required=True, help="Hugging Face BERT folder (config.json, weights, vocab.txt)")
    parser.add_argument("--train-file", required=True)
    parser.add_argument("--predict-file", required=True)
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--max-seq-length", type=int, default=384)
    parser.add_argument("--doc-stride", type=int, default=128)
    parser.add_argument("--max-query-length", type=int, default=64)
    parser.add_argument("--train-batch-size", type=int, default=32)
    parser.add_argument("--predict-batch-size", type=int, default=32)
    parser.add_argument("--max-steps", type=int, required=True)
    parser.add_argument("--learning-rate", type=finite_float, default=5e-5)
    parser.add_argument("--warmup-proportion", type=finite_float, default=0.1)
    parser.add_argument("--weight-decay", type=finite_float, default=0.01)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)

    tokenizer = BertTokenizer(os.path.join(args.hf_dir, "vocab.txt"), do_lower_case=True)
    windows = (tokenizer, args.max_seq_length, args.doc_stride, args.max_query_length)
    train_features = convert_examples_to_features(read_squad_examples(args.train_file, is_training=True), *windows,
                                                  is_training=True)
    model = BertForQuestionAnswering.from_pretrained(args.hf_dir)
    no_decay = [p for n, p in model.named_parameters() if n.endswith("bias") or "LayerNorm" in n]
    decay = [p for n, p in model.named_parameters() if not (n.endswith("bias") or "LayerNorm" in n)]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=0.0, eps=1e-6)
    warmup = math.floor(args.warmup_proportion * args.max_steps)

    def batches():
        epoch = 0
        while True:
            for indices in batch_indices(len(train_features), args.train_batch_size, True, args.seed, epoch):
                yield collate_features([train_features[i] for i in indices], tokenizer.pad_token_id, True)
            epoch += 1

    model.train()
    start = time.perf_counter()
    for update, batch in zip(range(1, args.max_steps + 1), batches(), strict=False):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate_at(update, args.learning_rate, args.max_steps, warmup)
        inputs = {name: torch.from_numpy(batch[name]) for name in INPUT_NAMES}
        loss = model(**inputs, start_positions=torch.from_numpy(batch["start_positions"]),
                     end_positions=torch.from_numpy(batch["end_positions"])).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
        optimizer.step()
        optimizer.zero_grad()
        if update % 4 == 0:
            print(f"step {update} loss {loss.item():.4f} ({time.perf_counter() - start:.0f} s)", flush=True)

    train_seconds = time.perf_counter() - start
    examples = read_squad_examples(args.predict_file, is_training=False)
    features = convert_examples_to_features(examples, *windows, is_training=False)
    model.eval()
    logits = {}
    with torch.no_grad():
        for indices in batch_indices(len(features), args.predict_batch_size, shuffle=False):
            batch = collate_features([features[i] for i in indices], tokenizer.pad_token_id, False)
            output = model(**{name: torch.from_numpy(batch[name]) for name in INPUT_NAMES})
            for row, unique_id in enumerate(batch["unique_ids"].tolist()):
                logits[unique_id] = (output.start_logits[row].numpy(), output.end_logits[row].numpy())
    predictions, _ = postprocess_predictions(examples, features, logits)
    os.makedirs(args.output_dir, exist_ok=True)
    path = os.path.join(args.output_dir, "predictions.json")
    with open(path + ".tmp", "w", encoding="utf-8") as writer:
        json.dump(predictions, writer)
    os.replace(path + ".tmp", path)
    scores = evaluate(load_dataset(args.predict_file), predictions, source=args.predict_file)
    print(json.dumps({**scores, "train_seconds": round(train_seconds)}))


if __name__ == "__main__":
    main()
