"""A step is a continuous function of its size and start time (``check_continuity``): a scheme that takes another
step at a model's exact sizes (``dt = 1/2``, ``1``, ...), beyond a size (``|dt| > 1.5``) or at ``t = 0`` (a model's
first layer) keeps every other claim, and is rejected here naming the size or time; a scheme whose own force
switches on at a time (its limit jumps there) steps with a jump where its stages cross it, and passes."""

from typing import ClassVar

import pytest
import torch

import solvers
from solvers import AbstractStepper, PhaseState, axpy
from solvers.testing import check_continuity, check_stepper


class _Heun(AbstractStepper, abstract=True):
    """Heun's method that takes Euler's step where ``euler_here`` says so, with both evaluations made."""

    order: ClassVar[int] = 2
    second_order: ClassVar[bool] = False
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 2

    def euler_here(self, t, dt) -> bool:
        raise NotImplementedError

    def step(self, field, t, y, dt, state):
        k1 = field(t, y)
        k2 = field(t + dt, y + dt * k1)
        if self.euler_here(float(t), float(dt)):
            return y + dt * k1, state
        return y + 0.5 * dt * (k1 + k2), state


def _fake(name: str, test) -> type:
    return type(name, (_Heun,), {"euler_here": lambda self, t, dt: test(t, dt)})


FAKES = [
    (
        _fake("AtModelSizes", lambda t, dt: abs(dt) in (1.0, 0.5, 0.25, 0.125)),
        r"its size: at dt = -?(1|0\.5|0\.25|0\.125) ",
    ),
    (_fake("AtHalfOnly", lambda t, dt: dt == 0.5), r"its size: at dt = 0\.5 from t = 0 "),
    (_fake("AtAThird", lambda t, dt: abs(dt - 1 / 3) < 1e-12), r"its size: at dt = 0\.3333333333 from t = 0 "),
    (_fake("AboveOneAndAHalf", lambda t, dt: abs(dt) > 1.5), r"its size: at dt = -?1\.5 "),
    (_fake("FirstLayer", lambda t, dt: t == 0.0), r"its start time: at t = 0 with dt = (0\.5|1) "),
]


@pytest.mark.parametrize("fake, where", FAKES, ids=[f.__name__ for f, _ in FAKES])
def test_a_step_that_branches_on_its_size_or_time_is_rejected_naming_where(fake, where):
    with pytest.raises(AssertionError, match=r"step is not a continuous function of " + where):
        check_continuity(fake)
    with pytest.raises(AssertionError, match=r"not a continuous function"):
        check_stepper(fake, seed=0)  # the claim is one of check_stepper's


class SwitchedOnVerlet(AbstractStepper):
    """Velocity Verlet on ``x'' = a(t, x) - k(t) x`` with ``k = 1/2`` from ``t = 1`` on and 0 before: a force of its
    own switched on at a time, so its limit jumps there and its step jumps where its stages cross it."""

    order: ClassVar[int] = 2
    second_order: ClassVar[bool] = True
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 2

    @staticmethod
    def k(t):
        return 0.5 * (torch.as_tensor(t, dtype=torch.float64) >= 1.0).double()

    def step(self, field, t, y, dt, state):
        x, v = self._unpack(y)
        v = axpy(v, 0.5 * dt, field(t, x) - self.k(t) * x)
        x = axpy(x, dt, v)
        return PhaseState(x, axpy(v, 0.5 * dt, field(t + dt, x) - self.k(t + dt) * x)), state

    def limit_field(self, field):
        return lambda t, y: PhaseState(y.v, field(t, y.x) - self.k(t) * y.x)


def test_a_step_may_jump_where_its_own_limit_jumps():
    assert check_continuity(SwitchedOnVerlet) > 0.0  # it found the jump, and the limit's jump beside it


@pytest.mark.parametrize("name", ["heun", "rk4", "velocity_verlet", "light_wave", "damped", "leapfrog"])
def test_registered_schemes_are_continuous(name):
    assert check_continuity(solvers.STEPPERS[name]) == 0.0


class ExcusedFirstLayer(_Heun):
    """Euler's step at ``t = 0`` behind a limit that jumps there by a trace (``1e-9`` of the field): the step's jump is
    far more than a stage crossing that jump can make."""

    def euler_here(self, t, dt):
        return t == 0.0

    def limit_field(self, field):
        return lambda t, x: field(t, x) * (1.0 + 1e-9 * float(t >= 0.0))


def test_a_trace_of_a_jump_in_the_limit_excuses_no_larger_jump_of_the_step():
    with pytest.raises(AssertionError, match=r"its start time: at t = 0 with dt"):
        check_continuity(ExcusedFirstLayer)


class RestingStartVerlet(AbstractStepper):
    """Velocity Verlet that drops its first half-kick where the whole velocity is exactly zero (written with tensors,
    no Python branch): a model's second-order layers start their velocity at 0, so its first step is wrong in every
    model and right on every state the other checks draw."""

    order: ClassVar[int] = 2
    second_order: ClassVar[bool] = True
    symplectic: ClassVar[bool] = True
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 2

    def step(self, field, t, y, dt, state):
        x, v = self._unpack(y)
        moving = (v.abs().sum() > 0).to(v.dtype)
        v = axpy(v, 0.5 * dt * moving, field(t, x))
        x = axpy(x, dt, v)
        return PhaseState(x, axpy(v, 0.5 * dt, field(t + dt, x))), state


def test_a_step_that_branches_on_a_state_at_rest_is_rejected():
    with pytest.raises(AssertionError, match=r"not a continuous function of its state: at its state at rest \(v = 0"):
        check_continuity(RestingStartVerlet)


class CoulombVerlet(AbstractStepper):
    """Velocity Verlet on ``x'' = a(t, x) - c sign(v)`` (a dry friction): its limit jumps at rest, its step with it."""

    order: ClassVar[int] = 1
    second_order: ClassVar[bool] = True
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 2

    def step(self, field, t, y, dt, state):
        x, v = self._unpack(y)
        v = axpy(v, 0.5 * dt, field(t, x) - 0.3 * torch.sign(v))
        x = axpy(x, dt, v)
        return PhaseState(x, axpy(v, 0.5 * dt, field(t + dt, x) - 0.3 * torch.sign(v))), state

    def limit_field(self, field):
        return lambda t, y: PhaseState(y.v, field(t, y.x) - 0.3 * torch.sign(y.v))


def test_a_step_may_jump_in_the_state_where_its_own_limit_does():
    assert check_continuity(CoulombVerlet) > 0.0
