"""The time-to-quality yardstick's peer: Hugging Face transformers' BertForPreTraining pretrained on torch to a
wall-clock budget, with everything but the engine taken from our run.

    $PADDLEBERT_PEERS_DIR/torch/bin/python benchmarks/hf_pretraining_peer.py --input-dir SHARDS \
        --eval-dir SHARDS_holdout --vocab-file VOCAB --config-file bert_configs/bert-mini-uncased.json \
        --batch-size 64 --max-seq-length 128 --max-predictions-per-seq 20 --learning-rate 2e-3 \
        --warmup-proportion 0.1 --time-budget 20 --eval-interval-minutes 2 --eval-seed 20190411 \
        --output-dir OUT

benchmarks/time_to_quality.py runs it with the arguments of our run at the same budget, so that only the
pretraining engine differs:
- the same batches in the same order with the same dynamic masks: our loader (pretraining_dataset.py, which
  needs no Paddle) with the same seed;
- the same objective: masked-LM cross-entropy averaged over the masked tokens of the batch plus next-sentence
  cross-entropy averaged over its sequences, the MLM head applied to the masked positions only (as ours and as
  benchmarks/bench_pretraining.py's transformers contender);
- the same optimizer: LAMB as NVIDIA uses it (You et al. 2020, arXiv:1904.00962, Algorithm 2; apex FusedLAMB
  with use_nvlamb=False), which torch does not ship, written below with torch tensor ops after the equations in
  optimizer.Lamb's docstring; gradients clipped to a global norm of 1.0; weight decay 0.01 on every tensor
  but biases and LayerNorm parameters;
- the same schedule over the same budget: the learning rate at each update is lr_at_fraction of the fraction
  of the budget used, and elapsed time counts the training loop alone (loading a batch and the step), not the
  validations, as run_pretraining.py --time-budget counts it;
- the same validation: the first --num-eval-batches batches of a loader over --eval-dir seeded with
  --eval-seed (pretraining_eval.EVAL_SEED, passed in by the yardstick), every --eval-interval-minutes of
  training time and at the end, masked-LM loss and accuracy over all their masked tokens.

Writes OUT/config.json and OUT/model.safetensors (transformers' save_pretrained: every PaddleBERT script loads the
folder as it is), OUT/vocab.txt (the --vocab-file it trained with, the folder's tokenizer, which downstream.py
fine-tunes with) and OUT/peer_log.json: the validation records and the run's totals, written atomically.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from itertools import islice
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pretraining_dataset import PretrainingDataLoader  # noqa: E402
from utils.atomic_io import atomic_write_text  # noqa: E402  (after the path insert: the peer's venv has no package)
from utils.cli import finite_float  # noqa: E402

WEIGHT_DECAY = 0.01
MAX_GRAD_NORM = 1.0
BETAS = (0.9, 0.999)
EPSILON = 1e-6


def lr_at_fraction(fraction: float, peak: float, warmup_proportion: float) -> float:
    """The learning rate after `fraction` of the budget: linear warmup to `peak` over warmup_proportion of it,
    then linear decay to 0 at the end (run_pretraining.py --time-budget's schedule with no constant hold and
    decay power 1, the yardstick's)."""
    if fraction < warmup_proportion:
        return peak * fraction / warmup_proportion
    return peak * max(0.0, 1.0 - (fraction - warmup_proportion) / (1.0 - warmup_proportion))


def hf_config(config_file: str):
    """transformers' BertConfig with the architecture of one of our config JSONs."""
    from transformers import BertConfig

    ours = json.loads(Path(config_file).read_text(encoding="utf-8"))
    return BertConfig(**{key: ours[key] for key in (
        "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "hidden_act",
        "hidden_dropout_prob", "attention_probs_dropout_prob", "max_position_embeddings", "type_vocab_size",
        "initializer_range", "layer_norm_eps")}, attn_implementation="sdpa")


class TorchLamb:
    """LAMB (optimizer.Lamb's equations) over torch parameters: Adam moments with bias correction, epsilon
    outside the square root, decoupled weight decay, and the trust ratio ||w|| / ||u|| on decayed tensors."""

    def __init__(self, named_parameters, weight_decay: float):
        import torch

        self.groups = [(parameter, weight_decay if _is_decayed(name, parameter) else 0.0)
                       for name, parameter in named_parameters]
        self.moments = {id(p): (torch.zeros_like(p), torch.zeros_like(p)) for p, _ in self.groups}
        self.steps = 0

    def step(self, lr: float) -> None:
        import torch

        self.steps += 1
        beta1, beta2 = BETAS
        correction1, correction2 = 1 - beta1 ** self.steps, 1 - beta2 ** self.steps
        with torch.no_grad():
            for weight, decay in self.groups:
                if weight.grad is None:
                    continue
                m, v = self.moments[id(weight)]
                m.mul_(beta1).add_(weight.grad, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(weight.grad, weight.grad, value=1 - beta2)
                update = (m / correction1) / ((v / correction2).sqrt() + EPSILON)
                if decay:
                    update.add_(weight, alpha=decay)
                    weight_norm, update_norm = float(weight.norm()), float(update.norm())
                    ratio = weight_norm / update_norm if weight_norm > 0 and update_norm > 0 else 1.0
                    weight.sub_(update, alpha=lr * ratio)
                else:
                    weight.sub_(update, alpha=lr)


def _is_decayed(name: str, parameter) -> bool:
    """Biases and LayerNorm parameters get no weight decay (optimizer.no_weight_decay_parameters' rule)."""
    return parameter.dim() > 1 and "LayerNorm" not in name


def masked_lm_sums(model, batch: dict, hidden_size: int):
    """(masked-LM loss summed over the masked tokens, correct predictions, masked tokens, next-sentence loss
    summed over the sequences, sequences) of one batch, the MLM head applied at the masked positions alone."""
    import torch
    import torch.nn.functional as F

    tensors = {key: torch.from_numpy(value) for key, value in batch.items()}
    sequence_output, pooled = model.bert(tensors["input_ids"], token_type_ids=tensors["token_type_ids"],
                                         attention_mask=tensors["attention_mask"], return_dict=False)[:2]
    labels = tensors["masked_lm_labels"].reshape(-1)  # [B*L], -1 = not masked
    positions = torch.nonzero(labels != -1).squeeze(1)  # [M]
    scores = model.cls.predictions(sequence_output.reshape(-1, hidden_size)[positions])  # [M, V]
    targets = labels[positions]
    mlm_loss = F.cross_entropy(scores, targets, reduction="sum")
    correct = int((scores.argmax(-1) == targets).sum())
    nsp_loss = F.cross_entropy(model.cls.seq_relationship(pooled), tensors["next_sentence_labels"].reshape(-1),
                               reduction="sum")
    return mlm_loss, correct, len(positions), nsp_loss, len(tensors["input_ids"])


def evaluate(model, batches: list[dict], hidden_size: int) -> dict[str, float]:
    """Masked-LM loss and accuracy over every masked token of the evaluation batches (pretraining_eval's)."""
    import torch

    model.eval()
    loss = correct = tokens = 0.0
    with torch.no_grad():
        for batch in batches:
            mlm_loss, batch_correct, masked, _, _ = masked_lm_sums(model, batch, hidden_size)
            loss, correct, tokens = loss + float(mlm_loss), correct + batch_correct, tokens + masked
    model.train()
    return {"eval_mlm_loss": loss / max(tokens, 1.0), "eval_mlm_accuracy": correct / max(tokens, 1.0),
            "eval_masked_tokens": int(tokens)}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--input-dir", required=True)
    parser.add_argument("--eval-dir", required=True)
    parser.add_argument("--vocab-file", required=True)
    parser.add_argument("--config-file", required=True)
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--max-seq-length", type=int, required=True)
    parser.add_argument("--max-predictions-per-seq", type=int, required=True)
    parser.add_argument("--masked-lm-ratio", type=finite_float, default=0.15)
    parser.add_argument("--learning-rate", type=finite_float, required=True)
    parser.add_argument("--warmup-proportion", type=finite_float, required=True)
    parser.add_argument("--time-budget", type=finite_float, required=True, help="minutes of training")
    parser.add_argument("--eval-interval-minutes", type=finite_float, required=True)
    parser.add_argument("--num-eval-batches", type=int, default=100)
    parser.add_argument("--eval-seed", type=int, required=True)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--output-dir", required=True)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    import torch
    from transformers import BertForPreTraining

    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    config = hf_config(args.config_file)
    model = BertForPreTraining(config)
    model.train()
    optimizer = TorchLamb(model.named_parameters(), WEIGHT_DECAY)

    def loader(input_dir: str, seed: int) -> PretrainingDataLoader:
        return PretrainingDataLoader(input_dir, args.vocab_file, args.batch_size, args.max_seq_length,
                                     args.max_predictions_per_seq, seed, masked_lm_ratio=args.masked_lm_ratio,
                                     nsp=True)

    eval_loader = loader(args.eval_dir, args.eval_seed)
    eval_batches = list(islice(eval_loader, min(args.num_eval_batches, eval_loader.steps_per_epoch)))
    budget = args.time_budget * 60.0
    records, elapsed, step, next_eval = [], 0.0, 0, args.eval_interval_minutes * 60.0
    sequences = tokens = 0
    batches = iter(loader(args.input_dir, args.seed))
    while elapsed < budget:
        began = time.perf_counter()
        batch = next(batches)
        mlm_loss, _, masked, nsp_loss, size = masked_lm_sums(model, batch, config.hidden_size)
        loss = mlm_loss / max(masked, 1) + nsp_loss / size
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
        lr = lr_at_fraction(elapsed / budget, args.learning_rate, args.warmup_proportion)
        optimizer.step(lr)
        model.zero_grad(set_to_none=True)
        elapsed += time.perf_counter() - began
        step += 1
        sequences += size
        tokens += int(batch["attention_mask"].sum())
        if elapsed >= next_eval or elapsed >= budget:
            records.append({"step": step, "elapsed_minutes": round(elapsed / 60.0, 4), "learning_rate": lr,
                            **evaluate(model, eval_batches, config.hidden_size)})
            print(json.dumps(records[-1]), flush=True)
            while next_eval <= elapsed:
                next_eval += args.eval_interval_minutes * 60.0
    output_dir = Path(args.output_dir)
    save_checkpoint(model, output_dir, args.vocab_file)
    atomic_write_text(output_dir / "peer_log.json", json.dumps({
        "engine": f"transformers {__import__('transformers').__version__} on torch {torch.__version__}",
        "steps": step, "sequences": sequences, "tokens": tokens, "training_minutes": round(elapsed / 60.0, 4),
        "validation": records}, indent=1) + "\n")


def save_checkpoint(model, output_dir: Path, vocab_file: str) -> None:
    """The trained model as a Hugging Face folder: transformers' save_pretrained (config.json, model.safetensors)
    and the vocabulary it was trained with as the folder's vocab.txt, which its fine-tuning tokenizes with."""
    output_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(output_dir, safe_serialization=True)
    atomic_write_text(output_dir / "vocab.txt", Path(vocab_file).read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
