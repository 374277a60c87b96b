"""What the leapfrog and velocity-Verlet docstrings claim beyond their declarations."""

import torch
from hypothesis import given
from hypothesis import strategies as st

from solvers import Leapfrog, PhaseState, SemiImplicitEuler, VelocityVerlet, integrate, trajectory
from solvers.testing import RecordingField, check_order, oscillator_problem, pendulum_problem

seeds = st.integers(0, 2**31 - 1)


@given(seed=seeds, depth=st.integers(1, 30), dt=st.floats(0.01, 0.5))
def test_leapfrog_positions_are_velocity_verlet_positions(seed, depth, dt):
    p = pendulum_problem(seed=seed)
    y0 = PhaseState(p.x0, p.v0)
    a = trajectory(Leapfrog(), [p.field] * depth, y0, dt)
    b = trajectory(VelocityVerlet(), [p.field] * depth, y0, dt)
    for ya, yb in zip(a, b):
        torch.testing.assert_close(ya.x, yb.x, rtol=1e-12, atol=1e-12)


@given(seed=seeds, depth=st.integers(2, 30), dt=st.floats(0.01, 0.5))
def test_leapfrog_recurrence_is_stoermer_and_time_symmetric(seed, depth, dt):
    p = pendulum_problem(seed=seed, forcing=0.0)
    ys = trajectory(Leapfrog(), [p.field] * depth, PhaseState(p.x0, p.v0), dt)
    for n in range(1, depth):
        stoermer = 2 * ys[n].x - ys[n - 1].x + dt * dt * p.field(n * dt, ys[n].x)
        torch.testing.assert_close(ys[n + 1].x, stoermer, rtol=1e-12, atol=1e-12)
    # stepping with -dt from the last state, with the state the forward run left, retraces the positions
    stepper, y, state = Leapfrog(), ys[0], None
    for n in range(depth):
        y, state = stepper.step(p.field, n * dt, y, dt, state)
    for n in range(depth - 1, -1, -1):
        y, state = stepper.step(p.field, (n + 1) * dt, y, -dt, state)
        torch.testing.assert_close(y.x, ys[n].x, rtol=1e-9, atol=1e-9)


def test_leapfrog_is_order_two_for_any_initial_velocity():
    """The start step is Taylor to dt², so order 2 holds with v0 != 0 (and the problem draws v0 at random)."""
    p = oscillator_problem(seed=7)
    assert p.v0.abs().min() > 0
    check_order(Leapfrog, p)


def test_semi_implicit_euler_is_only_order_one_even_from_rest():
    p = oscillator_problem(seed=7)
    from dataclasses import replace

    check_order(SemiImplicitEuler, replace(p, v0=torch.zeros_like(p.v0)))


def test_velocity_verlet_reuses_the_force_only_for_the_same_field():
    p = pendulum_problem(seed=1)
    tied = RecordingField(p.field)
    integrate(VelocityVerlet(), [tied] * 5, PhaseState(p.x0, p.v0), 0.1)
    assert len(tied.times) == 2 + 4  # two on the first step, then one per step
    untied = [RecordingField(p.field) for _ in range(5)]
    integrate(VelocityVerlet(), untied, PhaseState(p.x0, p.v0), 0.1)
    assert [len(f.times) for f in untied] == [2] * 5


def test_velocity_verlet_recomputes_when_the_state_was_changed():
    p = pendulum_problem(seed=1)
    f = RecordingField(p.field)
    s = VelocityVerlet()
    y, state = s.step(f, 0.0, PhaseState(p.x0, p.v0), 0.1, None)
    y = PhaseState(y.x + 1.0, y.v)  # edited between steps: the cached force no longer applies
    y2, _ = s.step(f, 0.1, y, 0.1, state)
    assert len(f.times) == 4
    fresh, _ = VelocityVerlet().step(p.field, 0.1, y, 0.1, None)
    assert torch.equal(y2.x, fresh.x) and torch.equal(y2.v, fresh.v)


@given(seed=seeds, dt=st.floats(0.01, 1.0))
def test_semi_implicit_euler_inverse_undoes_a_step(seed, dt):
    p = pendulum_problem(seed=seed)
    stepper = SemiImplicitEuler()
    y0 = PhaseState(p.x0, p.v0)
    y1, _ = stepper.step(p.field, 0.3, y0, dt, None)
    back = stepper.inverse(p.field, 0.3, y1, dt)
    torch.testing.assert_close(back.x, y0.x, rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(back.v, y0.v, rtol=1e-13, atol=1e-13)
