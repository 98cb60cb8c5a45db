"""Learning-rate schedules: hand-computed values, NVIDIA's composition of paddle schedulers, exact resume,
and the phase-2 trap (a new phase must not inherit the previous phase's position)."""

import paddle
import pytest

from lr_scheduler import LinearWarmupConstantPolyDecay, LinearWarmupPolyDecay, create_lr_scheduler


def learning_rates(scheduler, updates):
    """The learning rate of each of the next `updates` optimizer updates."""
    rates = []
    for _ in range(updates):
        rates.append(scheduler())
        scheduler.step()
    return rates


def test_warmup_poly_decay_hand_computed_values():
    # 100 updates, 10 of warmup from 0 to 1e-3, then linear decay over 90 updates.
    rates = learning_rates(LinearWarmupPolyDecay(1e-3, total_steps=100, warmup_proportion=0.1), 100)
    lr_of = dict(enumerate(rates, start=1))
    assert lr_of[1] == pytest.approx(1e-4)  # first warmup update: 1e-3 * 1/10
    assert lr_of[5] == pytest.approx(5e-4)
    assert lr_of[10] == pytest.approx(1e-3)  # warmup ends at the peak
    assert lr_of[55] == pytest.approx(1e-3 * (1 - 45 / 90))  # mid-decay
    assert lr_of[100] == pytest.approx(0.0, abs=1e-15)  # decayed to 0 at the last update
    assert max(rates) == pytest.approx(1e-3)


def test_warmup_start_lr_and_power():
    scheduler = LinearWarmupPolyDecay(1e-3, total_steps=100, warmup_proportion=0.1, warmup_start_lr=1e-4, power=2.0)
    lr_of = dict(enumerate(learning_rates(scheduler, 100), start=1))
    assert lr_of[5] == pytest.approx(1e-4 + 9e-4 * 5 / 10)
    assert lr_of[10] == pytest.approx(1e-3)
    assert lr_of[55] == pytest.approx(1e-3 * 0.5**2)
    assert lr_of[91] == pytest.approx(1e-3 * (9 / 90) ** 2)


def test_constant_phase_of_the_lans_schedule():
    # W = 10 warmup, C = 20 constant, D = 70 decay.
    scheduler = LinearWarmupConstantPolyDecay(2e-3, total_steps=100, warmup_proportion=0.1, constant_proportion=0.2)
    lr_of = dict(enumerate(learning_rates(scheduler, 100), start=1))
    assert lr_of[4] == pytest.approx(2e-3 * 4 / 10)
    assert all(lr_of[k] == pytest.approx(2e-3) for k in range(10, 31))
    assert lr_of[65] == pytest.approx(2e-3 * (1 - 35 / 70))
    assert lr_of[100] == pytest.approx(0.0, abs=1e-15)


def test_matches_nvidia_paddle_recipe_composition():
    # NVIDIA's lr_scheduler.py: LinearWarmup(PolynomialDecay(...), last_epoch=0) built from paddle's schedulers.
    total, warmup, peak, start = 50, 7, 1e-3, 2e-5
    nvidia = paddle.optimizer.lr.LinearWarmup(
        learning_rate=paddle.optimizer.lr.PolynomialDecay(peak, decay_steps=total - warmup, end_lr=0.0, power=1.0),
        warmup_steps=warmup, start_lr=start, end_lr=peak, last_epoch=0,
    )
    ours = LinearWarmupPolyDecay(peak, total_steps=total, warmup_proportion=warmup / total, warmup_start_lr=start)
    assert learning_rates(ours, total) == pytest.approx(learning_rates(nvidia, total), rel=1e-9, abs=1e-15)


def test_no_warmup_and_no_decay_edges():
    assert learning_rates(LinearWarmupPolyDecay(1.0, total_steps=4, warmup_proportion=0.0), 4) == pytest.approx(
        [0.75, 0.5, 0.25, 0.0]
    )
    # Everything warmup: the learning rate stays at the peak after it.
    assert learning_rates(LinearWarmupPolyDecay(1.0, total_steps=4, warmup_proportion=1.0), 5) == pytest.approx(
        [0.25, 0.5, 0.75, 1.0, 1.0]
    )


@pytest.mark.parametrize("kind", ["poly", "constant_poly"])
def test_resume_from_state_continues_exactly(kind, tmp_path):
    def build():
        return create_lr_scheduler(kind, 1e-3, total_steps=60, warmup_proportion=0.1, warmup_start_lr=1e-5,
                                   power=1.5, constant_proportion=0.2 if kind == "constant_poly" else 0.0)

    uninterrupted = learning_rates(build(), 60)
    first = build()
    before = learning_rates(first, 23)
    paddle.save(first.state_dict(), str(tmp_path / "sched.pdparams"))
    resumed = build()
    resumed.set_state_dict(paddle.load(str(tmp_path / "sched.pdparams")))
    assert resumed.last_epoch == 23
    assert before + learning_rates(resumed, 37) == uninterrupted


def test_resume_through_optimizer_state_dict():
    # paddle's Optimizer.state_dict carries the scheduler's state; loading it restores the position.
    layer = paddle.nn.Linear(2, 2)
    scheduler = LinearWarmupPolyDecay(1e-3, total_steps=30, warmup_proportion=0.2)
    optimizer = paddle.optimizer.SGD(learning_rate=scheduler, parameters=layer.parameters())
    for _ in range(9):
        scheduler.step()
    state = optimizer.state_dict()
    fresh = LinearWarmupPolyDecay(1e-3, total_steps=30, warmup_proportion=0.2)
    paddle.optimizer.SGD(learning_rate=fresh, parameters=layer.parameters()).set_state_dict(state)
    assert fresh.last_epoch == 9
    assert fresh() == scheduler() == pytest.approx(1e-3 * (1 - 4 / 24))


def test_phase2_starts_its_own_schedule_and_refuses_phase1_state():
    phase1 = LinearWarmupPolyDecay(6e-3, total_steps=40, warmup_proportion=0.25)
    learning_rates(phase1, 40)
    assert phase1() == pytest.approx(0.0, abs=1e-15)  # phase 1 ends at learning rate 0

    phase2 = LinearWarmupPolyDecay(4e-3, total_steps=16, warmup_proportion=0.25)
    assert phase2.last_epoch == 0
    assert phase2() == pytest.approx(4e-3 / 4)  # a fresh scheduler starts at the first warmup update

    # Loading phase 1's state would jump past phase 2's end (LR 0): it is refused with a clear error.
    with pytest.raises(ValueError, match="different schedule"):
        phase2.set_state_dict(phase1.state_dict())
    assert phase2() == pytest.approx(4e-3 / 4)


def test_refuses_state_without_schedule_fields():
    scheduler = LinearWarmupPolyDecay(1e-3, total_steps=10, warmup_proportion=0.1)
    with pytest.raises(ValueError, match="lacks"):
        scheduler.set_state_dict({"last_epoch": 3, "last_lr": 0.0})


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(total_steps=0, warmup_proportion=0.1), "total_steps"),
        (dict(total_steps=10, warmup_proportion=1.5), "warmup_proportion"),
        (dict(total_steps=10, warmup_proportion=0.6, constant_proportion=0.6), "at most 1"),
        (dict(total_steps=10, warmup_proportion=0.1, power=0.0), "power"),
    ],
)
def test_invalid_schedules(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LinearWarmupConstantPolyDecay(1e-3, **kwargs)


def test_create_lr_scheduler_kinds():
    assert isinstance(create_lr_scheduler("poly", 1e-3, 10, 0.1), LinearWarmupPolyDecay)
    lans = create_lr_scheduler("constant_poly", 1e-3, 10, 0.1, constant_proportion=0.3)
    assert lans.constant_steps == 3
    with pytest.raises(ValueError, match="constant_poly"):
        create_lr_scheduler("poly", 1e-3, 10, 0.1, constant_proportion=0.3)
    with pytest.raises(ValueError, match="unknown learning-rate schedule"):
        create_lr_scheduler("cosine", 1e-3, 10, 0.1)
