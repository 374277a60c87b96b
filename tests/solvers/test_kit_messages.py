"""Messages agree with their counterexample: abscissae printed apart, no stale hint, short numbers."""

from typing import ClassVar

import pytest

import solvers
from solvers import AbstractStepper
from solvers.testing import check_evals, check_order
from solvers.testing.evals import _apart
from solvers.testing.geometry import _not_symplectic
from solvers.testing.problems import oscillator_problem


def test_abscissae_that_differ_in_a_late_digit_are_printed_apart():
    a, b = _apart([0.0, 0.5], [0.0, 0.5000004])
    assert a != b and "0.5000004" in b
    assert _apart([0.0, 1 / 3], [0.0, 0.25]) == ("[0, 0.3333]", "[0, 0.25]")


class CreepingMidpoint(AbstractStepper):
    """A midpoint whose stage sits at ``(1/2 + 1e-6 dt) dt``: its abscissa moves with dt, in the seventh digit."""

    order: ClassVar[int] = 2
    second_order: ClassVar[bool] = False
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 2

    def step(self, field, t, y, dt, state):
        k1 = field(t, y)
        return y + dt * field(t + (0.5 + 1e-6 * dt) * dt, y + 0.5 * dt * k1), state


def test_an_abscissa_message_shows_the_two_c_vectors_differently():
    with pytest.raises(AssertionError) as caught:
        check_evals(CreepingMidpoint, examples=0)
    message = str(caught.value)
    first, second = message.split("c = ")[1].split(" at dt")[0], message.split("c = ")[2].split(" at dt")[0]
    assert first != second


class _Heun4(AbstractStepper):
    order: ClassVar[int] = 4
    second_order: ClassVar[bool] = False
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 2

    def step(self, field, t, y, dt, state):
        k1 = field(t, y)
        k2 = field(t + dt, y + dt * k1)
        return y + 0.5 * dt * (k1 + k2), state


class RoundedRK4(AbstractStepper):
    """Classic RK4 with its weights typed to four digits: the error stops falling near 1e-5."""

    order: ClassVar[int] = 4
    second_order: ClassVar[bool] = False
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 4

    def step(self, field, t, y, dt, state):
        k1 = field(t, y)
        k2 = field(t + dt / 2, y + dt / 2 * k1)
        k3 = field(t + dt / 2, y + dt / 2 * k2)
        k4 = field(t + dt, y + dt * k3)
        return y + dt * (0.1667 * k1 + 0.3333 * k2 + 0.3333 * k3 + 0.1667 * k4), state


def test_a_steady_wrong_slope_gets_no_inexact_coefficient_hint():
    with pytest.raises(AssertionError) as caught:
        check_order(_Heun4, examples=0)
    assert "falls like dt^2" in str(caught.value) and "inexact" not in str(caught.value)


def test_an_error_that_stalls_gets_the_inexact_coefficient_hint():
    with pytest.raises(AssertionError, match="inexact coefficient"):
        check_order(RoundedRK4, examples=0)


def test_a_huge_jacobian_norm_is_printed_short():
    at = {"dt": 0.5, "t": 0.0, "size": 6.7e215, "structure": 1.0, "det": 0.0}
    message = _not_symplectic(solvers.VelocityVerlet(), oscillator_problem(seed=0, dim=2), at)
    assert "|M| = 6.7e+215" in message and len(message) < 400
