"""The tableau claim: a scheme stating its coefficients steps as they say wherever it is drawn (large and negative
steps, far times, large and small states), and a correct hand-written scheme that states them passes."""

from typing import ClassVar

import pytest
import torch

import solvers
from solvers import AbstractStepper, PhaseState
from solvers.testing import check_stepper, check_tableau, stated_tableau, stepper_report


def _rk4(field, t, y, dt, weights):
    k1 = field(t, y)
    k2 = field(t + dt / 2, y + dt / 2 * k1)
    k3 = field(t + dt / 2, y + dt / 2 * k2)
    k4 = field(t + dt, y + dt * k3)
    return y + dt * (weights[0] * k1 + weights[1] * k2 + weights[2] * k3 + weights[3] * k4)


_RIGHT, _WRONG = (1 / 6, 1 / 3, 1 / 3, 1 / 6), (1 / 4, 1 / 4, 1 / 4, 1 / 4)


def _value(u) -> float:
    return float(u.detach()) if isinstance(u, torch.Tensor) else float(u)


class LargeStepGuard(solvers.RK4):
    """The library's RK4 taking equal weights on steps above 0.5 ("large steps are rough anyway"): every evaluation
    where RK4 makes it, the order unchanged at the small steps the order check takes."""

    def step(self, field, t, y, dt, state):
        return _rk4(field, t, y, dt, _WRONG if abs(_value(dt)) > 0.5 else _RIGHT), state


class BackwardShortcut(solvers.RK4):
    """RK4 with equal weights on negative steps ("only reversible backpropagation takes them")."""

    def step(self, field, t, y, dt, state):
        return _rk4(field, t, y, dt, _WRONG if _value(dt) < 0 else _RIGHT), state


class ForwardOnlyVerlet(solvers.VelocityVerlet):
    """Velocity Verlet that kicks a whole step before drifting on negative steps, with its two evaluations."""

    def step(self, field, t, y, dt, state):
        if _value(dt) >= 0:
            return super().step(field, t, y, dt, state)
        v = y.v + dt * field(t, y.x)
        x = y.x + dt * v
        field(t + dt, x)
        return PhaseState(x, v), None


class HandWrittenRK4(AbstractStepper):
    """Classic RK4 written out by hand, its weights grouped differently from the tableau engine's sum, stating the
    tableau it runs: the same step to rounding."""

    order: ClassVar[int] = 4
    second_order: ClassVar[bool] = False
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 4
    tableau: ClassVar = solvers.RK4.tableau

    def step(self, field, t, y, dt, state):
        k1 = field(t, y)
        k2 = field(t + 0.5 * dt, y + (0.5 * dt) * k1)
        k3 = field(t + 0.5 * dt, y + (0.5 * dt) * k2)
        k4 = field(t + dt, y + dt * k3)
        return y + (dt / 6) * (k1 + 2 * (k2 + k3) + k4), None


@pytest.mark.parametrize(
    ("scheme", "where"),
    [(LargeStepGuard, r"dt = 1\b"), (BackwardShortcut, r"dt = -1\b"), (ForwardOnlyVerlet, r"dt = -")],
)
def test_a_scheme_that_steps_otherwise_than_its_coefficients_somewhere_is_rejected(scheme, where):
    with pytest.raises(AssertionError, match=rf"states its coefficients .* differs from their step .*{where}"):
        check_tableau(scheme, examples=0)
    with pytest.raises(AssertionError, match="states its coefficients"):
        check_stepper(scheme, seed=1)


def test_the_guard_is_what_the_other_claims_cannot_see():
    """Without the tableau claim each of these fakes keeps every other claim: only stating coefficients tells."""
    report = stepper_report(LargeStepGuard, seed=1)
    assert [r.claim for r in report.failed] == ["tableau"]


def test_a_correct_hand_written_scheme_stating_its_tableau_passes():
    assert check_tableau(HandWrittenRK4, examples=50) <= 1e-13
    check_stepper(HandWrittenRK4, seed=3)


class GuardedTwoStage(solvers.STEPPERS["two_stage_rk"]):
    """The learnable two-stage Runge–Kutta family taking the second stage alone on steps above 0.5."""

    def step(self, field, t, y, dt, state):
        if abs(_value(dt)) <= 0.5:
            return super().step(field, t, y, dt, state)
        a = self.alpha().to(y.dtype)
        k1 = field(t, y)
        return y + dt * field(t + a.double() * dt, y + (a * dt) * k1), state


def test_every_scheme_stating_coefficients_runs_them():
    stated = [name for name, cls in solvers.STEPPERS.schemes().items() if stated_tableau(cls()) is not None]
    assert {"rk4", "velocity_verlet", "semi_implicit_euler", "yoshida4", "nystrom4", "two_stage_rk"} <= set(stated)
    for name in stated:
        exact = stated_tableau(solvers.STEPPERS[name]()) is getattr(solvers.STEPPERS[name], "tableau", None)
        defect = check_tableau(solvers.STEPPERS[name], examples=20)
        assert defect == 0.0 if exact else defect <= 1e-13, name  # a learnable family's step is written out
    # the triple jump's coefficients() is a splitting that is its step for an autonomous field only: not checked
    assert check_tableau(solvers.TripleJump) is None


def test_a_learnable_runge_kutta_family_steps_as_its_current_coefficients_say():
    tableau = stated_tableau(solvers.STEPPERS["two_stage_rk"](alpha0=0.9))
    assert tableau.c[1] == pytest.approx(0.9) and tableau.derived.order == 2
    with pytest.raises(AssertionError, match=r"states its coefficients .* dt = 1\b"):
        check_tableau(GuardedTwoStage, examples=0)
