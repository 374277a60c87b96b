"""Bad input: one clear sentence that says what was wrong and what is allowed."""

import math

import pytest
import torch

import solvers
from solvers import Damped, Euler, LightWave, Mix, PhaseState, SemiImplicitEuler, integrate

x = torch.zeros(2, 3)
f = [lambda t, x: -x] * 3


def _one_line(info):
    message = str(info.value)
    assert "\n" not in message and len(message) < 300
    return message


@pytest.mark.parametrize("dt", [0.0, -0.1, math.inf, math.nan, torch.tensor(-1.0), torch.tensor(math.nan)])
def test_dt_must_be_positive_and_finite(dt):
    with pytest.raises(ValueError) as info:
        integrate(Euler(), f, x, dt)
    assert "dt must be positive and finite" in _one_line(info)


def test_dt_must_be_a_number():
    with pytest.raises(TypeError, match="dt must be a positive finite number or a scalar tensor, got str"):
        integrate(Euler(), f, x, "0.1")
    with pytest.raises(ValueError, match="dt must be a scalar"):
        integrate(Euler(), f, x, torch.ones(2))


def test_second_order_stepper_given_a_tensor():
    with pytest.raises(TypeError) as info:
        integrate(SemiImplicitEuler(), f, x, 0.1)
    assert "second-order stepper: y must be solvers.PhaseState(x, v), got Tensor" in _one_line(info)
    with pytest.raises(TypeError, match="second-order stepper"):
        SemiImplicitEuler().step(f[0], 0.0, x, 0.1, None)


def test_first_order_stepper_given_a_phase_state():
    with pytest.raises(TypeError) as info:
        integrate(Euler(), f, PhaseState(x, x), 0.1)
    assert "first-order stepper: y must be a Tensor, got a PhaseState" in _one_line(info)


def test_phase_state_shapes_must_match():
    with pytest.raises(ValueError) as info:
        integrate(SemiImplicitEuler(), f, PhaseState(x, torch.zeros(2, 4)), 0.1)
    assert "x and v must have the same shape, got x (2, 3) and v (2, 4)" in _one_line(info)


def test_empty_fields():
    with pytest.raises(ValueError) as info:
        integrate(Euler(), [], x, 0.1)
    assert "fields is empty" in _one_line(info)


def test_fields_must_be_a_list():
    with pytest.raises(TypeError, match=r"fields must be a list of callables, one per step.*\[field\] \* n"):
        integrate(Euler(), f[0], x, 0.1)


def test_steppers_and_fields_lengths_must_match():
    with pytest.raises(ValueError) as info:
        integrate([Euler(), Euler()], f, x, 0.1)
    assert "got 2 steppers for 3 fields" in _one_line(info)


def test_scheme_parameters_are_validated():
    with pytest.raises(ValueError, match="gamma must be a finite number >= 0"):
        Damped(gamma=-1.0)
    with pytest.raises(ValueError, match="start it from gamma > 0"):
        Damped(gamma=0.0, dim=3)
    with pytest.raises(ValueError, match="dim must be a positive int"):
        LightWave(dim=0)
    with pytest.raises(ValueError, match="theta0 must be a number or -inf"):
        Mix(theta0=math.nan)
    with pytest.raises(ValueError, match="wave must be a second-order stepper"):
        Mix(wave=Euler())
    with pytest.raises(ValueError, match="Leapfrog is a multistep scheme"):
        Mix(wave=solvers.Leapfrog())
    with pytest.raises(ValueError, match="LightWave is a multistep scheme"):
        Mix(diffusion=LightWave())


def test_nothing_is_mutated_by_a_failed_call():
    y0 = PhaseState(x.clone(), x.clone())
    with pytest.raises(ValueError):
        integrate(SemiImplicitEuler(), f, y0, -1.0)
    assert torch.equal(y0.x, x) and torch.equal(y0.v, x)


def test_schedules_switch_between_first_and_second_order():
    """A diffusion prefix then a wave segment: the wave starts from rest, as Wavy's v0 = 0."""
    x0 = torch.randn(2, 3)
    y = integrate([Euler(), SemiImplicitEuler(), SemiImplicitEuler()], f, x0, 0.1)
    assert isinstance(y, PhaseState)
    x1 = solvers.integrate(Euler(), f[:1], x0, 0.1)  # the diffusion prefix, as the Euler tableau computes it
    expected = solvers.integrate(SemiImplicitEuler(), f[:2], PhaseState(x1, torch.zeros_like(x1)), 0.1, t0=0.1)
    assert torch.equal(y.x, expected.x) and torch.equal(y.v, expected.v)
    back = integrate([SemiImplicitEuler(), Euler()], f[:2], PhaseState(x0, torch.ones_like(x0)), 0.1)
    assert isinstance(back, torch.Tensor)
