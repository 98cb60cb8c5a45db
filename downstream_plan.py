"""The fixed fine-tuning plan of downstream.py: per task its seeds, epochs and subsets, and the hyperparameters.

One place, without Paddle, so that benchmarks/time_to_quality.py can name the plan a downstream stage ran with (a
result of another plan is not reused) without importing Paddle into its own process.
"""

from __future__ import annotations

import dataclasses

TASKS = ("sst-2", "mrpc", "rte", "cola", "squad")


@dataclasses.dataclass(frozen=True)
class TaskPlan:
    """How a task is fine-tuned: its seeds, its epochs, and the subsets it uses (None: the whole file). A subset
    counts examples (GLUE) or questions (SQuAD), drawn uniformly without replacement (downstream.SUBSET_SEED)."""

    seeds: tuple[int, ...]
    epochs: int
    train_subset: int | None = None
    dev_subset: int | None = None  # only --quick scores a part of a dev set


# The fixed hyperparameters. GLUE: Devlin et al.'s batch 32, warmup 0.1 and length 128 (which cuts 12% of RTE's
# pairs and none of the other tasks'), and a learning rate of 1e-4, from the grid Google fine-tuned its small BERTs
# with (3e-4, 1e-4, 5e-5, 3e-5; Turc et al. 2019); it underfits bert-tiny, and at 3e-4 random weights beat every
# pretrained checkpoint (docs/time-to-quality-finetuning-rate.md), so the rate is to be chosen again. SQuAD:
# length 256 with stride 128 keeps most paragraphs in one window; 384 took 1.4 times as long to predict, 192 makes
# 24% more windows.
HYPERPARAMETERS = {
    "glue": {"max_seq_length": 128, "train_batch_size": 32, "learning_rate": 1e-4, "warmup_proportion": 0.1,
             "predict_batch_size": 32},
    "squad": {"max_seq_length": 256, "doc_stride": 128, "max_query_length": 64, "train_batch_size": 32,
              "learning_rate": 1e-4, "warmup_proportion": 0.1, "predict_batch_size": 8},
}


def hyperparameters(task: str, learning_rate: float | None = None) -> dict:
    """A task's fine-tuning hyperparameters: HYPERPARAMETERS' for its kind (GLUE or SQuAD), with `learning_rate` as
    the peak rate instead of the plan's when one is given (downstream.py --learning-rate)."""
    chosen = HYPERPARAMETERS["squad" if task == "squad" else "glue"]
    return dict(chosen) if learning_rate is None else {**chosen, "learning_rate": learning_rate}


# The standard mode is to take at most 15 minutes for bert-tiny, the yardstick's model, on 2 cores: three seeds of
# every GLUE task, three epochs each (the middle of Devlin et al.'s 2 to 4), SST-2 on 4,000 of its 67,349 training
# phrases, SQuAD once for one epoch on 4,000 of its 87,599 questions and scored on all 10,570 dev questions; for
# bert-tiny from random weights that took 5 minutes 14 seconds (docs/finetune-what-you-pretrained.md). One GLUE
# epoch (bert-mini's whole plan then took 13 minutes) was too little for small models: 125 SST-2 steps left random
# init and the 60-minute bert-tiny alike at the majority class (50.9), where three epochs give 56.4 and 61.6. SQuAD
# keeps one epoch so that the whole yardstick stays within 150 minutes.
PLAN = {
    "standard": {
        "sst-2": TaskPlan(seeds=(1, 2, 3), epochs=3, train_subset=4000),
        "mrpc": TaskPlan(seeds=(1, 2, 3), epochs=3),
        "rte": TaskPlan(seeds=(1, 2, 3), epochs=3),
        "cola": TaskPlan(seeds=(1, 2, 3), epochs=3),
        "squad": TaskPlan(seeds=(1,), epochs=1, train_subset=4000),
    },
    # Plumbing only: the scores of so few examples mean nothing.
    "quick": {task: TaskPlan(seeds=(1,), epochs=1, train_subset=64, dev_subset=64) for task in TASKS},
}
