"""Learning-rate schedules for BERT pre-training: linear warmup, optional constant hold, polynomial decay, over a
step count or over a training-time budget.

One shape (warmup_hold_decay) serves both: a line from warmup_start_lr to the peak, the peak held, then a polynomial
decay to 0. LinearWarmupConstantPolyDecay places it on the optimizer updates; TimeBudgetDecay on the fraction of a
training-time budget used so far.

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

Time convention (TimeBudgetDecay, run_pretraining.py --time-budget): as budget recipes do (Izsak et al. 2021, "How
to Train BERT with an Academic Budget", arXiv:2104.07705; Geiping & Goldstein 2022, "Cramming", arXiv:2212.14034),
the schedule is a function of p = elapsed / budget, the fraction of the training-time budget used:

    lr(p) = warmup_start_lr + (learning_rate - warmup_start_lr) * p / w       p < w          (linear warmup)
          = learning_rate                                                    w <= p < w + c (constant hold)
          = learning_rate * (1 - (p - w - c) / (1 - w - c)) ** power         w + c <= p < 1 (polynomial decay)
          = 0                                                                1 <= p

with w = warmup_proportion and c = constant_proportion. Its position is the elapsed time, set with set_elapsed()
before each update (the caller owns the clock); `last_epoch` still counts the updates, and both are in its state.
"""

from __future__ import annotations

import math

from paddle.optimizer.lr import LRScheduler


def warmup_hold_decay(position: float, warmup_end: float, decay_start: float, decay_end: float, peak: float,
                      start: float, power: float) -> float:
    """The learning rate at `position` (an update number, or a fraction of a budget) on the one shape of every
    schedule here: the line from `start` at position 0 to `peak` at warmup_end, `peak` until decay_start, then
    peak * (1 - (position - decay_start) / (decay_end - decay_start)) ** power, and 0 from decay_end on."""
    if position < warmup_end:
        return start + (peak - start) * position / warmup_end
    if position >= decay_end:
        return 0.0
    if position < decay_start:
        return peak
    remaining = 1.0 - (position - decay_start) / (decay_end - decay_start)
    return peak * remaining**power


def _check_shape(warmup_proportion: float, constant_proportion: float, warmup_start_lr: float, power: float) -> None:
    """The shape's arguments, as both schedules take them; ValueError names the one at fault."""
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


class _CheckedSchedule(LRScheduler):
    """A scheduler whose saved state loads only into a scheduler of the same schedule: `schedule_fields` define
    the schedule, `position_fields` (besides last_epoch) say where on it the run is."""

    schedule_fields: tuple[str, ...] = ()
    position_fields: tuple[str, ...] = ()

    def state_keys(self) -> None:
        self.keys = ["last_epoch", "last_lr", *self.position_fields, *self.schedule_fields]

    def set_state_dict(self, state_dict: dict) -> None:
        """Restore the position saved by state_dict(). Raises ValueError for state of a different schedule."""
        missing = [key for key in ("last_epoch", *self.position_fields, *self.schedule_fields) if key not in state_dict]
        if missing:
            raise ValueError(f"learning-rate scheduler state lacks {missing}: not saved by {type(self).__name__}")
        different = {
            key: (state_dict[key], getattr(self, key))
            for key in self.schedule_fields
            if not math.isclose(float(state_dict[key]), float(getattr(self, key)), rel_tol=1e-12, abs_tol=0.0)
        }
        if different:
            details = ", ".join(f"{key} saved {saved} vs now {now}" for key, (saved, now) in different.items())
            raise ValueError(
                f"learning-rate scheduler state belongs to a different schedule ({details}); a new phase must "
                "start its own scheduler instead of loading the previous phase's state"
            )
        self.last_epoch = int(state_dict["last_epoch"])
        for key in self.position_fields:
            setattr(self, key, float(state_dict[key]))
        self.last_lr = self.get_lr()

    set_dict = set_state_dict


class LinearWarmupConstantPolyDecay(_CheckedSchedule):
    """The LANS schedule (Zheng et al. 2020, arXiv:2006.13484): linear warmup, constant, then decay towards 0.

    Args:
        learning_rate: the peak learning rate, reached at the end of warmup.
        total_steps: the number of optimizer updates of this phase.
        warmup_proportion: fraction of total_steps spent warming up (W = floor(fraction * total_steps)).
        constant_proportion: fraction of total_steps held at learning_rate after warmup.
        warmup_start_lr: the learning rate at the start of the warmup line (k = 0).
        power: exponent of the polynomial decay; 1.0 is linear.
    """

    schedule_fields = ("base_lr", "total_steps", "warmup_steps", "constant_steps", "warmup_start_lr", "power")

    def __init__(self, learning_rate: float, total_steps: int, warmup_proportion: float,
                 constant_proportion: float = 0.0, warmup_start_lr: float = 0.0, power: float = 1.0):
        if total_steps < 1:
            raise ValueError(f"total_steps must be positive, got {total_steps}")
        _check_shape(warmup_proportion, constant_proportion, warmup_start_lr, power)
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
        decay_start = self.warmup_steps + self.constant_steps
        # decay_end = total_steps + 1, not total_steps: the line reaches 0 one update after the last one (see the
        # module docstring), so the decay spans D + 1 updates.
        return warmup_hold_decay(update, self.warmup_steps, decay_start, self.total_steps + 1, self.base_lr,
                                 self.warmup_start_lr, self.power)

    def get_lr(self) -> float:
        # last_epoch updates are done; the next one is number last_epoch + 1.
        return self.lr_at(self.last_epoch + 1)


class LinearWarmupPolyDecay(LinearWarmupConstantPolyDecay):
    """NVIDIA's BERT schedule: warmup_start_lr -> learning_rate over warmup_proportion * total_steps, then
    polynomial decay (power 1.0 = linear), as the Paddle recipe's LinearWarmup(PolynomialDecay), but reaching 0
    one update after the last instead of at it.

    It is the LANS schedule with no constant hold, and takes its arguments except constant_proportion.
    """

    def __init__(self, learning_rate: float, total_steps: int, warmup_proportion: float, **decay: float):
        # decay: warmup_start_lr and power, as LinearWarmupConstantPolyDecay takes them
        super().__init__(learning_rate, total_steps, warmup_proportion, constant_proportion=0.0, **decay)


class TimeBudgetDecay(_CheckedSchedule):
    """The same warmup, hold and decay over a training-time budget instead of a step count (the module
    docstring's time convention): the learning rate is a function of p = elapsed / budget_seconds, reaching 0 at
    p = 1. Call set_elapsed() with the elapsed training time before each update; the scheduler reads no clock.

    Args:
        learning_rate: the peak learning rate, reached at p = warmup_proportion.
        budget_seconds: the training time the schedule spans.
        warmup_proportion, constant_proportion, warmup_start_lr, power: as LinearWarmupConstantPolyDecay takes
            them, as fractions of the budget.
    """

    schedule_fields = ("base_lr", "budget_seconds", "warmup_proportion", "constant_proportion", "warmup_start_lr",
                       "power")
    position_fields = ("elapsed_seconds",)

    def __init__(self, learning_rate: float, budget_seconds: float, warmup_proportion: float,
                 constant_proportion: float = 0.0, warmup_start_lr: float = 0.0, power: float = 1.0):
        if not budget_seconds > 0 or not math.isfinite(budget_seconds):
            raise ValueError(f"budget_seconds must be a positive number, got {budget_seconds}")
        _check_shape(warmup_proportion, constant_proportion, warmup_start_lr, power)
        self.budget_seconds = float(budget_seconds)
        self.warmup_proportion = float(warmup_proportion)
        self.constant_proportion = float(constant_proportion)
        self.warmup_start_lr = float(warmup_start_lr)
        self.power = float(power)
        self.elapsed_seconds = 0.0
        super().__init__(learning_rate=learning_rate, last_epoch=-1)

    def lr_at_fraction(self, fraction: float) -> float:
        """The learning rate when `fraction` of the budget has been used."""
        return warmup_hold_decay(fraction, self.warmup_proportion, self.warmup_proportion + self.constant_proportion,
                                 1.0, self.base_lr, self.warmup_start_lr, self.power)

    def get_lr(self) -> float:
        return self.lr_at_fraction(self.elapsed_seconds / self.budget_seconds)

    def set_elapsed(self, seconds: float) -> None:
        """Move to `seconds` of elapsed training time: the next update runs at the learning rate of that time."""
        self.elapsed_seconds = float(seconds)
        self.last_lr = self.get_lr()


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
