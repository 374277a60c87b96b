"""Velocity Verlet, kick-drift-kick.

``v_½ = v + dt/2 a(t, x)``, ``x_1 = x + dt v_½``, ``v_1 = v_½ + dt/2 a(t + dt, x_1)``.

Order 2, symplectic and symmetric (``step(-dt)`` undoes ``step(dt)``, so it is reversible with that as its inverse).
Evaluations: the force at the end of a step is the force at the start of the next, so when consecutive steps use the
same field (weight tying; ``state`` remembers the field, time and position) a step costs one evaluation; the first
step, and every step whose field differs from the previous one (one field per layer), costs two. Reference: Hairer,
Lubich & Wanner, *Geometric Numerical Integration*, §I.1.4; Swope et al., J. Chem. Phys. 76 (1982).
"""

from typing import Any, ClassVar, NamedTuple

from torch import Tensor

from ._base import AbstractStepper, PhaseState, axpy
from ._composition import Splitting
from ._registry import register_stepper
from ._tableau import _same_time


class _Force(NamedTuple):
    field: Any
    t: Any
    x: Tensor
    a: Tensor


@register_stepper("velocity_verlet", update="kick-drift-kick")
class VelocityVerlet(AbstractStepper):
    order: ClassVar[int] = 2
    second_order: ClassVar[bool] = True
    symplectic: ClassVar[bool] = True
    reversible: ClassVar[bool] = True
    symmetric: ClassVar[bool] = True
    evals_per_step: ClassVar[int] = 2
    tableau: ClassVar[Splitting] = Splitting(drifts=(0, 1), kicks=(1 / 2, 1 / 2))  # its coefficients, for analysis
    fsal: ClassVar[bool] = True

    def step(self, field, t, y, dt, state):
        x, v = self._unpack(y)
        if state is not None and state.field is field and state.x is x and _same_time(state.t, t):
            a = state.a  # first same as last
        else:
            a = field(t, x)
        half = 0.5 * dt
        v = axpy(v, half, a)
        x = axpy(x, dt, v)
        t1 = t + dt
        a1 = field(t1, x)
        return PhaseState(x, axpy(v, half, a1)), _Force(field, t1, x, a1)
