"""Learning-rate schedules for BERT pre-training: linear warmup, optional constant hold, polynomial decay.

Step convention: the k-th optimizer update, k = 1 .. total_steps, runs at lr(k), where

    lr(k) = warmup_start_lr + (learning_rate - warmup_start_lr) * k / W      k < W          (linear warmup)
          = learning_rate                                                    W <= k < W + C (constant hold)
          = learning_rate * (1 - (k - W - C) / (D + 1)) ** power             otherwise      (polynomial decay)

with W = floor(warmup_proportion * total_steps), C = floor(constant_proportion * total_steps) and
D = total_steps - W - C. The warmup line starts at warmup_start_lr at k = 0 and reaches learning_rate at
k = W; the decay line reaches 0 at k = total_steps + 1, one update after the last, and stays there.

That is one step later than NVIDIA's Paddle recipe (LinearWarmup(PolynomialDecay(decay_steps=D))) and GluonNLP's
LANS scripts, whose last update runs at learning rate 0 and so changes nothing: a one-step run would train
nothing. Here every update of the schedule moves the weights, the last one at learning_rate / (D + 1) ** power.

The scheduler's `last_epoch` counts completed updates, so call `scheduler.step()` once after every
`optimizer.step()`; `state_dict()` / `set_state_dict()` restore that count exactly on resume.

Phase 2 of BERT pre-training runs its own schedule (its own steps, warmup and peak learning rate). Build a
fresh scheduler for it and do NOT load phase 1's scheduler or optimizer state into it: phase 1 ended at its
last step, so its state would put phase 2 at the end of a decay, i.e. at learning rate 0. `set_state_dict`
refuses state saved by a scheduler with a different schedule, which catches exactly that mistake (note that
`paddle.optimizer.Optimizer.set_state_dict` loads the scheduler state too).
"""

from __future__ import annotations

import math

from paddle.optimizer.lr import LRScheduler

# The fields that define a schedule. A saved state is only valid for a scheduler with equal fields.
_SCHEDULE_FIELDS = ("base_lr", "total_steps", "warmup_steps", "constant_steps", "warmup_start_lr", "power")


class LinearWarmupConstantPolyDecay(LRScheduler):
    """The LANS schedule (Zheng et al. 2020, arXiv:2006.13484): linear warmup, constant, then decay towards 0.

    Args:
        learning_rate: the peak learning rate, reached at the end of warmup.
        total_steps: the number of optimizer updates of this phase.
        warmup_proportion: fraction of total_steps spent warming up (W = floor(fraction * total_steps)).
        constant_proportion: fraction of total_steps held at learning_rate after warmup.
        warmup_start_lr: the learning rate at the start of the warmup line (k = 0).
        power: exponent of the polynomial decay; 1.0 is linear.
    """

    def __init__(
        self,
        learning_rate: float,
        total_steps: int,
        warmup_proportion: float,
        constant_proportion: float = 0.0,
        warmup_start_lr: float = 0.0,
        power: float = 1.0,
    ):
        if total_steps < 1:
            raise ValueError(f"total_steps must be positive, got {total_steps}")
        for name, value in (("warmup_proportion", warmup_proportion), ("constant_proportion", constant_proportion)):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value}")
        if warmup_proportion + constant_proportion > 1.0:
            raise ValueError(
                f"warmup_proportion + constant_proportion must be at most 1, got "
                f"{warmup_proportion} + {constant_proportion}"
            )
        if warmup_start_lr < 0:
            raise ValueError(f"warmup_start_lr must be non-negative, got {warmup_start_lr}")
        if power <= 0:
            raise ValueError(f"power must be positive, got {power}")
        self.total_steps = int(total_steps)
        self.warmup_steps = math.floor(warmup_proportion * total_steps)
        self.constant_steps = math.floor(constant_proportion * total_steps)
        self.decay_steps = self.total_steps - self.warmup_steps - self.constant_steps
        self.warmup_start_lr = float(warmup_start_lr)
        self.power = float(power)
        # LRScheduler.__init__ calls step() once, which moves last_epoch from -1 to 0 (no update done yet).
        super().__init__(learning_rate=learning_rate, last_epoch=-1)

    def lr_at(self, update: int) -> float:
        """The learning rate of the update-th optimizer update (1-based)."""
        if update < self.warmup_steps:
            return self.warmup_start_lr + (self.base_lr - self.warmup_start_lr) * update / self.warmup_steps
        decay_start = self.warmup_steps + self.constant_steps
        if update < decay_start:
            return self.base_lr
        # D + 1, not D: the line reaches 0 one update after the last one (see the module docstring)
        remaining = max(0.0, 1.0 - (update - decay_start) / (self.decay_steps + 1))
        return self.base_lr * remaining**self.power

    def get_lr(self) -> float:
        # last_epoch updates are done; the next one is number last_epoch + 1.
        return self.lr_at(self.last_epoch + 1)

    def state_keys(self) -> None:
        self.keys = ["last_epoch", "last_lr", *_SCHEDULE_FIELDS]

    def set_state_dict(self, state_dict: dict) -> None:
        """Restore the position saved by state_dict(). Raises ValueError for state of a different schedule."""
        missing = [key for key in ("last_epoch", *_SCHEDULE_FIELDS) if key not in state_dict]
        if missing:
            raise ValueError(f"learning-rate scheduler state lacks {missing}: not saved by {type(self).__name__}")
        different = {
            key: (state_dict[key], getattr(self, key))
            for key in _SCHEDULE_FIELDS
            if not math.isclose(float(state_dict[key]), float(getattr(self, key)), rel_tol=1e-12, abs_tol=0.0)
        }
        if different:
            details = ", ".join(f"{key} saved {saved} vs now {now}" for key, (saved, now) in different.items())
            raise ValueError(
                f"learning-rate scheduler state belongs to a different schedule ({details}); a new phase must "
                "start its own scheduler instead of loading the previous phase's state"
            )
        self.last_epoch = int(state_dict["last_epoch"])
        self.last_lr = self.get_lr()

    set_dict = set_state_dict


class LinearWarmupPolyDecay(LinearWarmupConstantPolyDecay):
    """NVIDIA's BERT schedule: warmup_start_lr -> learning_rate over warmup_proportion * total_steps, then
    polynomial decay (power 1.0 = linear), as the Paddle recipe's LinearWarmup(PolynomialDecay), but reaching 0
    one update after the last instead of at it.

    It is the LANS schedule with no constant hold, and takes its arguments except constant_proportion.
    """

    def __init__(self, learning_rate: float, total_steps: int, warmup_proportion: float, **decay: float):
        # decay: warmup_start_lr and power, as LinearWarmupConstantPolyDecay takes them
        super().__init__(learning_rate, total_steps, warmup_proportion, constant_proportion=0.0, **decay)


SCHEDULES = {"poly": LinearWarmupPolyDecay, "constant_poly": LinearWarmupConstantPolyDecay}


def create_lr_scheduler(kind: str, learning_rate: float, total_steps: int, warmup_proportion: float,
                        **shape: float) -> LRScheduler:
    """Build a schedule by name: "poly" (LinearWarmupPolyDecay) or "constant_poly" (the LANS schedule).

    shape: warmup_start_lr, power and constant_proportion, as LinearWarmupConstantPolyDecay takes them; "poly"
    accepts only constant_proportion = 0.
    """
    if kind not in SCHEDULES:
        raise ValueError(f"unknown learning-rate schedule {kind!r}; expected one of {tuple(SCHEDULES)}")
    if kind == "poly" and shape.pop("constant_proportion", 0.0):
        raise ValueError("constant_proportion needs the 'constant_poly' schedule, not 'poly'")
    return SCHEDULES[kind](learning_rate, total_steps, warmup_proportion, **shape)
