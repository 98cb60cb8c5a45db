"""The fixed fine-tuning plan of downstream.py: per task its seeds, epochs and subsets, and the hyperparameters.

One place, without Paddle, so that benchmarks/time_to_quality.py can name the plan a downstream stage ran with (a
result of another plan is not reused) without importing Paddle into its own process.
"""

from __future__ import annotations

import dataclasses

# Every task downstream.py fine-tunes, in the order of its summary.
ALL_TASKS = ("sst-2", "mrpc", "rte", "cola", "sts-b", "qnli", "mnli", "squad")
# Its default --tasks: those whose data ../shared holds. STS-B, QNLI and MNLI run when named, with their GLUE data.
TASKS = ("sst-2", "mrpc", "rte", "cola", "squad")


@dataclasses.dataclass(frozen=True)
class TaskPlan:
    """How a task is fine-tuned: its seeds, its epochs, and the subsets it uses (None: the whole file). A subset
    counts examples (GLUE) or questions (SQuAD), drawn uniformly without replacement (downstream.SUBSET_SEED)."""

    seeds: tuple[int, ...]
    epochs: int
    train_subset: int | None = None
    dev_subset: int | None = None  # only --quick scores a part of a dev set (of each of MNLI's two)


# The fixed hyperparameters. GLUE: Devlin et al.'s batch 32, warmup 0.1 and length 128 (which cuts 12% of RTE's
# pairs and none of the other tasks'). SQuAD: length 256 with stride 128 keeps most paragraphs in one window; 384
# took 1.4 times as long to predict, 192 makes 24% more windows. Both rescale the loaded embedding tables to the
# initial scale (--rescale-embeddings): an hour of LAMB grows bert-tiny's word table from RMS 0.02 to 0.25, and
# AdamW's steps, whose size does not follow the weights', then barely move it (SST-2 at 3e-4: 65.0 as loaded, 74.4
# rescaled). The peak rates are the grid's (1e-4, 3e-4, 1e-3, the top of Turc et al. 2019's and one above) with the
# best mean over three checkpoints, random init and the plain and ALiBi 60-minute runs, all rescaled: GLUE average
# 48.5, 52.9, 51.1; SQuAD F1 8.5 at 3e-4 and 8.6 at 1e-3, a tie that one epoch of 4,000 questions cannot break.
# docs/time-to-quality-finetuning-rate.md has the grid; no other hyperparameter was tuned on a dev set.
HYPERPARAMETERS = {
    "glue": {"max_seq_length": 128, "train_batch_size": 32, "learning_rate": 3e-4, "warmup_proportion": 0.1,
             "predict_batch_size": 32, "rescale_embeddings": True},
    "squad": {"max_seq_length": 256, "doc_stride": 128, "max_query_length": 64, "train_batch_size": 32,
              "learning_rate": 1e-3, "warmup_proportion": 0.1, "predict_batch_size": 8, "rescale_embeddings": True},
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
# keeps one epoch so that the whole yardstick stays within 150 minutes. The tasks outside the default --tasks train
# on the same 4,000-example budget where their training sets are large (QNLI's 104,743 pairs, MNLI's 392,702) and
# on all of STS-B's 5,749; every dev set is scored whole (MNLI's matched and mismatched, 9,815 and 9,832 pairs).
PLAN = {
    "standard": {
        "sst-2": TaskPlan(seeds=(1, 2, 3), epochs=3, train_subset=4000),
        "mrpc": TaskPlan(seeds=(1, 2, 3), epochs=3),
        "rte": TaskPlan(seeds=(1, 2, 3), epochs=3),
        "cola": TaskPlan(seeds=(1, 2, 3), epochs=3),
        "sts-b": TaskPlan(seeds=(1, 2, 3), epochs=3),
        "qnli": TaskPlan(seeds=(1, 2, 3), epochs=3, train_subset=4000),
        "mnli": TaskPlan(seeds=(1, 2, 3), epochs=3, train_subset=4000),
        "squad": TaskPlan(seeds=(1,), epochs=1, train_subset=4000),
    },
    # Plumbing only: the scores of so few examples mean nothing.
    "quick": {task: TaskPlan(seeds=(1,), epochs=1, train_subset=64, dev_subset=64) for task in ALL_TASKS},
}
