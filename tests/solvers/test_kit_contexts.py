"""The kit checks a scheme in the contexts models run it in, and first-same-as-last survives tensor times.

A model hands a step ``t0`` and ``dt`` as Python floats or as 0-d tensors (a learnable step size requires grad); the
loop over depth computes each step's ``t`` afresh, so reuse keyed on object identity is lost on tensors.
"""

from typing import ClassVar

import pytest
import torch

import solvers
from solvers import AbstractStepper, PhaseState, integrate
from solvers.testing import check_evals


class _Counting:
    def __init__(self):
        self.calls = 0

    def __call__(self, t, x):
        self.calls += 1
        return -x


def _time(value, kind):
    if kind == "float":
        return value
    tensor = torch.tensor(value, dtype=torch.float64)
    return tensor.requires_grad_(kind == "learnable")


@pytest.mark.parametrize("kind", ["float", "tensor", "learnable"])
@pytest.mark.parametrize("t_kind", ["float", "tensor"])
def test_velocity_verlet_reuses_the_last_force_over_tied_steps_with_tensor_times(kind, t_kind):
    field, steps = _Counting(), 10
    y0 = PhaseState(torch.randn(3, 4, dtype=torch.float64), torch.randn(3, 4, dtype=torch.float64))
    dt = _time(0.1, kind)
    y = integrate(solvers.VelocityVerlet(), [field] * steps, y0, dt, t0=_time(0.5, t_kind))
    assert field.calls == steps + 1
    if kind == "learnable":  # the reused force still carries the step size's gradient
        (grad,) = torch.autograd.grad(y.x.sum(), dt)
        assert torch.isfinite(grad) and grad != 0


@pytest.mark.parametrize("kind", ["tensor", "learnable"])
def test_fsal_tableau_reuses_its_last_stage_with_tensor_times(kind):
    field, steps = _Counting(), 10
    stepper = solvers.BogackiShampine3()
    assert stepper.fsal
    integrate(stepper, [field] * steps, torch.randn(2, 3, dtype=torch.float64), _time(0.1, kind), t0=_time(0.0, kind))
    assert field.calls == stepper.evals_per_step + (steps - 1) * (stepper.evals_per_step - 1)


class _IdentityVerlet(AbstractStepper):
    """Velocity Verlet that recognises the repeated time by identity only: right on floats, no reuse on tensors."""

    order: ClassVar[int] = 2
    second_order: ClassVar[bool] = True
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 2
    fsal: ClassVar[bool] = True

    def step(self, field, t, y, dt, state):
        x, v = self._unpack(y)
        same = state is not None and state[0] is field and state[2] is x
        same = same and (state[1] is t or (not isinstance(t, torch.Tensor) and state[1] == t))
        a = state[3] if same else field(t, x)
        v = v + 0.5 * dt * a
        x = x + dt * v
        a1 = field(t + dt, x)
        return PhaseState(x, v + 0.5 * dt * a1), (field, t + dt, x, a1)


def test_the_kit_rejects_fsal_lost_on_tensor_times():
    with pytest.raises(AssertionError, match=r"0-d tensors\); it declares evals_per_step = 2 and fsal"):
        check_evals(_IdentityVerlet, examples=0)


def test_the_kit_passes_velocity_verlet_with_tensor_times():
    check_evals(solvers.VelocityVerlet, examples=20)
