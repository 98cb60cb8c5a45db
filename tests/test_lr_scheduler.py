"""Learning-rate schedules: hand-computed values, NVIDIA's composition of paddle schedulers (with the decay one
update longer, so that the last update is not at learning rate 0), exact resume, the phase-2 trap (a new phase
must not inherit the previous phase's position), and the same shape over a training-time budget."""

import paddle
import pytest

from lr_scheduler import LinearWarmupConstantPolyDecay, LinearWarmupPolyDecay, TimeBudgetDecay, create_lr_scheduler


def learning_rates(scheduler, updates):
    """The learning rate of each of the next `updates` optimizer updates."""
    rates = []
    for _ in range(updates):
        rates.append(scheduler())
        scheduler.step()
    return rates


def test_warmup_poly_decay_hand_computed_values():
    # 100 updates, 10 of warmup from 0 to 1e-3, then linear decay over 90 updates towards 0 at update 101.
    rates = learning_rates(LinearWarmupPolyDecay(1e-3, total_steps=100, warmup_proportion=0.1), 100)
    lr_of = dict(enumerate(rates, start=1))
    assert lr_of[1] == pytest.approx(1e-4)  # first warmup update: 1e-3 * 1/10
    assert lr_of[5] == pytest.approx(5e-4)
    assert lr_of[10] == pytest.approx(1e-3)  # warmup ends at the peak
    assert lr_of[55] == pytest.approx(1e-3 * (1 - 45 / 91))  # mid-decay
    assert lr_of[100] == pytest.approx(1e-3 / 91)  # the last update still moves the weights
    assert max(rates) == pytest.approx(1e-3)


def test_warmup_start_lr_and_power():
    scheduler = LinearWarmupPolyDecay(1e-3, total_steps=100, warmup_proportion=0.1, warmup_start_lr=1e-4, power=2.0)
    lr_of = dict(enumerate(learning_rates(scheduler, 100), start=1))
    assert lr_of[5] == pytest.approx(1e-4 + 9e-4 * 5 / 10)
    assert lr_of[10] == pytest.approx(1e-3)
    assert lr_of[55] == pytest.approx(1e-3 * (1 - 45 / 91) ** 2)
    assert lr_of[91] == pytest.approx(1e-3 * (10 / 91) ** 2)


def test_constant_phase_of_the_lans_schedule():
    # W = 10 warmup, C = 20 constant, D = 70 decay (towards 0 at update 101).
    scheduler = LinearWarmupConstantPolyDecay(2e-3, total_steps=100, warmup_proportion=0.1, constant_proportion=0.2)
    lr_of = dict(enumerate(learning_rates(scheduler, 100), start=1))
    assert lr_of[4] == pytest.approx(2e-3 * 4 / 10)
    assert all(lr_of[k] == pytest.approx(2e-3) for k in range(10, 31))
    assert lr_of[65] == pytest.approx(2e-3 * (1 - 35 / 71))
    assert lr_of[100] == pytest.approx(2e-3 / 71)


def nvidia_schedule(peak, start, warmup, decay_steps):
    # NVIDIA's lr_scheduler.py: LinearWarmup(PolynomialDecay(...), last_epoch=0) built from paddle's schedulers.
    return paddle.optimizer.lr.LinearWarmup(
        learning_rate=paddle.optimizer.lr.PolynomialDecay(peak, decay_steps=decay_steps, end_lr=0.0, power=1.0),
        warmup_steps=warmup, start_lr=start, end_lr=peak, last_epoch=0,
    )


def test_matches_nvidia_paddle_recipe_composition_with_the_decay_one_update_longer():
    total, warmup, peak, start = 50, 7, 1e-3, 2e-5
    ours = learning_rates(
        LinearWarmupPolyDecay(peak, total_steps=total, warmup_proportion=warmup / total, warmup_start_lr=start), total)
    # Paddle's own schedulers are the reference; ours decays over D + 1 updates where NVIDIA's decays over D.
    longer = learning_rates(nvidia_schedule(peak, start, warmup, decay_steps=total - warmup + 1), total)
    assert ours == pytest.approx(longer, rel=1e-9, abs=1e-15)
    nvidia = learning_rates(nvidia_schedule(peak, start, warmup, decay_steps=total - warmup), total)
    assert nvidia[-1] == 0.0 < ours[-1] == pytest.approx(peak / (total - warmup + 1))
    assert ours[:warmup] == pytest.approx(nvidia[:warmup], rel=1e-9)  # the warmups are the same


def test_a_one_step_schedule_updates():
    # With the decay ending at the last update, a one-step run would train at learning rate 0; here W = 0, D = 1
    # and the one update runs at 1e-3 * (1 - 1/2).
    assert learning_rates(LinearWarmupPolyDecay(1e-3, total_steps=1, warmup_proportion=0.01), 1) == [
        pytest.approx(5e-4)]


def test_no_warmup_and_no_decay_edges():
    # No warmup: 4 updates on the line from 1 at update 0 to 0 at update 5; past the schedule it stays at 0.
    assert learning_rates(LinearWarmupPolyDecay(1.0, total_steps=4, warmup_proportion=0.0), 6) == pytest.approx(
        [0.8, 0.6, 0.4, 0.2, 0.0, 0.0]
    )
    # Everything warmup: the last update runs at the peak, and the line falls to 0 one update later.
    assert learning_rates(LinearWarmupPolyDecay(1.0, total_steps=4, warmup_proportion=1.0), 5) == pytest.approx(
        [0.25, 0.5, 0.75, 1.0, 0.0]
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
    assert fresh() == scheduler() == pytest.approx(1e-3 * (1 - 4 / 25))


def test_phase2_starts_its_own_schedule_and_refuses_phase1_state():
    phase1 = LinearWarmupPolyDecay(6e-3, total_steps=40, warmup_proportion=0.25)
    learning_rates(phase1, 40)
    assert phase1() == pytest.approx(0.0, abs=1e-15)  # past its last update, phase 1 is at learning rate 0

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


# ---------------------------------------------------------------------------------------------
# The time-budget schedule
# ---------------------------------------------------------------------------------------------


def time_schedule(**shape: float) -> TimeBudgetDecay:
    # A 10-minute budget: 10% warmup from 1e-4 to 2e-3, 20% at the peak, then quadratic decay over the last 70%.
    return TimeBudgetDecay(2e-3, budget_seconds=600.0, warmup_proportion=0.1, constant_proportion=0.2,
                           warmup_start_lr=1e-4, power=2.0, **shape)


@pytest.mark.parametrize("elapsed, expected", [
    (0.0, 1e-4),  # the start of the warmup line
    (30.0, 1e-4 + 1.9e-3 * 0.5),  # p = 0.05, half-way up
    (60.0, 2e-3),  # p = 0.1, the peak
    (150.0, 2e-3),  # held
    (180.0, 2e-3),  # p = 0.3, the decay starts at the peak
    (390.0, 2e-3 * 0.5**2),  # p = 0.65: (1 - 0.35 / 0.7) ** 2
    (540.0, 2e-3 * (1 - 0.6 / 0.7) ** 2),  # p = 0.9
    (600.0, 0.0),  # the budget is spent
    (900.0, 0.0),
])
def test_time_budget_schedule_hand_computed_values(elapsed, expected):
    scheduler = time_schedule()
    scheduler.set_elapsed(elapsed)
    assert scheduler() == pytest.approx(expected, rel=1e-12, abs=1e-18)


def test_time_budget_schedule_without_decay_holds_the_peak_to_the_end():
    # w + c = 1: no decay interval; the peak holds until the budget is spent.
    scheduler = TimeBudgetDecay(1.0, budget_seconds=100.0, warmup_proportion=0.5, constant_proportion=0.5)
    rates = []
    for elapsed in (25.0, 50.0, 99.0, 100.0):
        scheduler.set_elapsed(elapsed)
        rates.append(scheduler())
    assert rates == [0.5, 1.0, 1.0, 0.0]


def test_an_optimizer_updates_at_the_rate_of_the_elapsed_time():
    layer = paddle.nn.Linear(1, 1, bias_attr=False)
    scheduler = TimeBudgetDecay(1.0, budget_seconds=100.0, warmup_proportion=0.5)
    optimizer = paddle.optimizer.SGD(learning_rate=scheduler, parameters=layer.parameters())
    moves = []
    for elapsed in (10.0, 75.0):  # p = 0.1: lr 0.2 (warmup); p = 0.75: lr 0.5 (half-way down the decay)
        scheduler.set_elapsed(elapsed)
        before = layer.weight.numpy().item()
        layer(paddle.ones([1, 1])).sum().backward()  # d/dw of w * 1: a gradient of 1
        optimizer.step()
        optimizer.clear_grad()
        scheduler.step()
        moves.append(before - layer.weight.numpy().item())
    assert moves == [pytest.approx(0.2, rel=1e-6), pytest.approx(0.5, rel=1e-6)]


def test_time_budget_schedule_resumes_from_its_state_and_refuses_another_budget():
    scheduler = time_schedule()
    for _ in range(3):
        scheduler.step()
    scheduler.set_elapsed(390.0)
    state = scheduler.state_dict()
    resumed = time_schedule()
    resumed.set_state_dict(state)
    assert (resumed.last_epoch, resumed.elapsed_seconds, resumed()) == (3, 390.0, pytest.approx(5e-4))
    other = TimeBudgetDecay(2e-3, budget_seconds=1200.0, warmup_proportion=0.1, constant_proportion=0.2,
                            warmup_start_lr=1e-4, power=2.0)
    with pytest.raises(ValueError, match="budget_seconds saved 600.0 vs now 1200.0"):
        other.set_state_dict(state)
    # A step schedule's state is not a time schedule's, nor the other way round.
    with pytest.raises(ValueError, match="lacks"):
        time_schedule().set_state_dict(LinearWarmupPolyDecay(1e-3, total_steps=10, warmup_proportion=0.1).state_dict())
    with pytest.raises(ValueError, match="lacks"):
        LinearWarmupPolyDecay(1e-3, total_steps=10, warmup_proportion=0.1).set_state_dict(state)


@pytest.mark.parametrize("budget", [0.0, -60.0, float("nan"), float("inf")])
def test_time_budget_schedule_needs_a_positive_budget(budget):
    with pytest.raises(ValueError, match="budget_seconds must be a positive number"):
        TimeBudgetDecay(1e-3, budget_seconds=budget, warmup_proportion=0.1)


def test_time_budget_schedule_checks_its_shape_as_the_step_schedule_does():
    with pytest.raises(ValueError, match="at most 1"):
        TimeBudgetDecay(1e-3, budget_seconds=60.0, warmup_proportion=0.6, constant_proportion=0.6)
