"""Leapfrog, here meaning the two-step Störmer recurrence ``x_{n+1} = 2 x_n - x_{n-1} + dt² a(t_n, x_n)``.

This is the form the Wavy wave update takes once the velocity is eliminated; the previous position ``x_{n-1}`` lives
in ``state``. The start step is the second-order Taylor step ``x_1 = x_0 + dt v_0 + dt²/2 a(x_0)``, so the global
order is 2 for any initial velocity (semi-implicit Euler is the same recurrence started with ``dt² a``, hence order 1).
For a step size that changes, the recurrence uses the variable-step form
``x_{n+1} = x_n + r (x_n - x_{n-1}) + dt (dt + dt_prev)/2 a(x_n)``, ``r = dt / dt_prev``.

Order 2 in ``x`` and ``v``; one evaluation per step whatever the fields, which is why it suits untied layers better
than ``velocity_verlet`` (two evaluations per step when the field changes). The reported velocity is the one-sided
``v_{n+1} = (x_{n+1} - x_n)/dt + dt/2 a(x_n)``, accurate to O(dt²); it is not fed back: after the start step the
scheme reads only ``y.x`` and its state. In exact arithmetic the positions are those of velocity Verlet, so the
energy behaviour is Verlet's. The position recurrence is time-symmetric (stepping with ``-dt`` retraces ``x``), but as a
one-step map of ``(x, v)`` with the reported velocity it is neither symplectic nor reversible, and it does not claim
to be. Reference: Hairer, Lubich & Wanner, *Geometric Numerical Integration*, §I.1.4 (Störmer's form (1.15)).
"""

from typing import Any, ClassVar, NamedTuple

from torch import Tensor

from ._base import AbstractStepper, PhaseState


class _History(NamedTuple):
    x: Tensor  # x_{n-1}
    dt: Any  # the step from x_{n-1} to x_n


class Leapfrog(AbstractStepper):
    order: ClassVar[int] = 2
    second_order: ClassVar[bool] = True
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 1
    multistep: ClassVar[bool] = True

    def step(self, field, t, y, dt, state):
        x, v = self._unpack(y)
        a = field(t, x)
        if state is None:
            x1 = x + dt * v + (0.5 * dt * dt) * a  # Taylor start, local error O(dt³)
        else:
            x1 = x + (dt / state.dt) * (x - state.x) + (0.5 * dt * (dt + state.dt)) * a
        v1 = (x1 - x) / dt + (0.5 * dt) * a
        return PhaseState(x1, v1), _History(x, dt)
