"""What a step leaves besides its result, what its time carries, and where a step is beyond any scheme's reach.

Wrong schemes whose values are right: a step that reseeds torch's global generator, sets the default dtype, switches
autograd on, or puts its field in eval mode and leaves it so (each changes what the caller runs next), and one that
reads its start time as a number or detached (a model's time carries its layers' steps, so a learnable ``dt`` loses
that part of its gradient). Correct schemes of a friction that grows with the state (``c v³``, ``c x² v``): their
own dynamics blow up backwards in finite time, or are stiff beyond any explicit step at the large magnitudes the kit
draws, so a step that is not finite there says nothing against them."""

from typing import ClassVar

import pytest
import torch
from torch import Tensor, nn

from solvers import AbstractStepper, PhaseState, axpy
from solvers.testing import check_stepper


class _Heun(AbstractStepper, abstract=True):
    order: ClassVar[int] = 2
    second_order: ClassVar[bool] = False
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 2

    def before(self, field, t):
        """What the wrong scheme does besides Heun's step (here: nothing); returns the time it steps from."""
        return t

    def step(self, field, t, y, dt, state):
        self._unpack(y)
        t = self.before(field, t)
        k1 = field(t, y)
        k2 = field(t + dt, axpy(y, dt, k1))
        return axpy(y, 0.5 * dt, k1 + k2), state


class ReseedingHeun(_Heun):
    """Wrong: seeds torch's global generator every step ("for reproducibility"): every layer's dropout then draws the
    same mask, and the data order repeats."""

    def before(self, field, t):
        torch.manual_seed(0)
        return t


class DefaultDtypeHeun(_Heun):
    """Wrong: sets torch's default dtype to float64 "for accurate stage times" and leaves it so."""

    def before(self, field, t):
        torch.set_default_dtype(torch.float64)
        return t


class GradOnHeun(_Heun):
    """Wrong: switches autograd on "so its stages are differentiable", never restoring the caller's mode."""

    def before(self, field, t):
        if not torch.is_inference_mode_enabled():
            torch.set_grad_enabled(True)
        return t


class EvalsItsFieldHeun(_Heun):
    """Wrong: puts a module field in eval mode "so both stages see one dropout mask", and leaves it there: the
    caller's model trains on without dropout."""

    def before(self, field, t):
        if isinstance(field, nn.Module):
            field.eval()
        return t


class FloatTimeHeun(_Heun):
    """Wrong: reads its start time as a number, ``float(t)``."""

    def before(self, field, t):
        return float(t)


class DetachedTimeHeun(_Heun):
    """Wrong: detaches its start time ("times are not learned")."""

    def before(self, field, t):
        return t.detach() if isinstance(t, Tensor) else t


@pytest.mark.parametrize(
    "scheme, message",
    [
        (ReseedingHeun, r"draws from or reseeds torch's global random generator"),
        (DefaultDtypeHeun, r"changed torch's default dtype \(torch.float32 to torch.float64\)"),
        (GradOnHeun, r"changed autograd's mode \(grad off to on\)"),
        (EvalsItsFieldHeun, r"changed the training mode of its field \(an nn.Module\)"),
        (FloatTimeHeun, r"gradient is not that of its steps .* and of the start time"),
        (DetachedTimeHeun, r"gradient is not that of its steps .* and of the start time"),
    ],
    ids=lambda value: value.__name__ if isinstance(value, type) else "",
)
def test_a_step_that_moves_what_it_does_not_own_or_drops_its_times_gradient_is_rejected(scheme, message):
    dtype = torch.get_default_dtype()
    try:
        with pytest.raises(AssertionError, match=message):
            check_stepper(scheme, seed=1)
    finally:
        torch.set_default_dtype(dtype)
    assert torch.get_default_dtype() == dtype and torch.is_grad_enabled()  # the kit put back what the step moved


class _Friction(AbstractStepper, abstract=True):
    """``x'' = a(t, x) - g(x, v)``: velocity Verlet on the force between two half steps of the friction (Strang)."""

    order: ClassVar[int] = 2
    second_order: ClassVar[bool] = True
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 2

    def half(self, x, v, h):
        """The friction's flow over ``h`` (``x`` held)."""
        raise NotImplementedError

    def step(self, field, t, y, dt, state):
        x, v = self._unpack(y)
        v = axpy(self.half(x, v, 0.5 * dt), 0.5 * dt, field(t, x))
        x = axpy(x, dt, v)
        v = axpy(v, 0.5 * dt, field(t + dt, x))
        return PhaseState(x, self.half(x, v, 0.5 * dt)), state


class CubicDrag(_Friction):
    """``g = c v³``, its exact flow ``v / sqrt(1 + 2 c h v²)``: backwards it blows up within the step where
    ``1 + 2 c h v² <= 0``, as the dynamics' own backward solution does."""

    c: ClassVar[float] = 0.3

    def half(self, x, v, h):
        return v * torch.rsqrt(1 + (2 * self.c * h) * v * v)

    def limit_field(self, field):
        return lambda t, y: PhaseState(y.v, field(t, y.x) - self.c * y.v**3)


class CubicDragMidpoint(CubicDrag):
    """The same dynamics, each half step of the drag by the explicit midpoint rule (second order)."""

    def half(self, x, v, h):
        middle = v - 0.5 * h * self.c * v**3
        return v - h * self.c * middle**3


class PositionFriction(_Friction):
    """``g = c x² v``, its exact flow with ``x`` held, ``v exp(-c x² h)``: at ``x = 1000`` a rate of 4e5."""

    c: ClassVar[float] = 0.4

    def half(self, x, v, h):
        return v * torch.exp(-(self.c * h) * x * x)

    def limit_field(self, field):
        return lambda t, y: PhaseState(y.v, field(t, y.x) - self.c * y.x * y.x * y.v)


class PositionFrictionMidpoint(PositionFriction):
    """The same dynamics, the friction's half steps by the explicit midpoint rule: stiff at large ``x``."""

    def half(self, x, v, h):
        middle = v - 0.5 * h * self.c * x * x * v
        return v - h * self.c * x * x * middle


@pytest.mark.parametrize("scheme", [CubicDrag, CubicDragMidpoint, PositionFriction, PositionFrictionMidpoint])
def test_a_friction_whose_dynamics_blow_up_or_stiffen_at_the_drawn_sizes_passes(scheme):
    """Each was rejected at every seed: a drawn protocol step of ``dt = -1`` (the drag's backward flow leaves the
    finite numbers), a float32 step at magnitude 1000 (past float32's range where ``|dt| L`` is 4e4), or the order
    measured at magnitude 1024 (stiff there beyond the finest grid, so the error fell like ``dt``)."""
    assert check_stepper(scheme, seed=1)["seed"] == 1


def test_a_step_beyond_any_schemes_reach_is_told_from_one_that_breaks():
    """``beyond_reach``: the cubic drag's backward flow from ``v = 2`` over a step of -1 blows up (the exact solution
    does); a stiff friction at ``x = 1000`` is beyond an explicit step of 0.1; a gentle field at a step of 1 is not."""
    from solvers.testing._common import beyond_reach

    def force(t, x):
        return -x

    y = PhaseState(torch.zeros(2, 1, dtype=torch.float64), torch.full((2, 1), 2.0, dtype=torch.float64))
    assert beyond_reach(CubicDrag(), force, 0.0, y, -1.0)
    assert not beyond_reach(CubicDrag(), force, 0.0, y, 1.0)
    far = PhaseState(torch.full((2, 1), 1000.0, dtype=torch.float64), torch.ones(2, 1, dtype=torch.float64))
    assert beyond_reach(PositionFriction(), force, 0.0, far, 0.1)
    assert not beyond_reach(PositionFriction(), force, 0.0, PhaseState(far.v, far.v), 0.1)

    class SingularAtZero(CubicDrag):
        def limit_field(self, field):
            return lambda t, y: PhaseState(y.v, field(t, y.x) - 3 / t * y.v)

    assert not beyond_reach(SingularAtZero(), force, 0.0, y, 1.0)  # a singular time is the scheme's to state
