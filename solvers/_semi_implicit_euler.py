"""Semi-implicit (symplectic) Euler, kick then drift: ``v <- v + dt a(t, x)``, ``x <- x + dt v``.

The Wavy Transformer's wave update (``a(X) = (A(X) - I) X``, ``v0 = 0``). Order 1, one evaluation per step,
symplectic and reversible, not symmetric (``step(-dt)`` is the adjoint scheme, which drifts first). Eliminating ``v``
gives the two-step Störmer recurrence ``x_{n+1} = 2 x_n - x_{n-1} + dt² a(x_n)`` with the one-sided start
``x_1 = x_0 + dt v_0 + dt² a(x_0)``; that start is why it is order 1 while ``leapfrog`` is order 2. One step from
``v = 0`` moves ``x`` like Euler with step ``dt²``. The step is a composition of two shears, so it is invertible:
:meth:`SemiImplicitEuler.inverse` (drift back, then kick back) recovers ``y`` from ``y1`` up to rounding, which lets a
network rebuild its states instead of storing them.
Also called symplectic Euler. Not to be confused with ``leapfrog`` (the same recurrence with a second-order start)
nor ``velocity_verlet`` (kick-drift-kick, order 2). Reference: Hairer, Lubich & Wanner, *Geometric Numerical
Integration*, §I.1.2 and Theorem VI.3.3.
"""

from typing import ClassVar

from ._base import AbstractStepper, PhaseState, axpy
from ._composition import Splitting
from ._registry import register_stepper


@register_stepper("semi_implicit_euler", update="`v + dt a(x)`, then `x + dt v` (Wavy's Full Wave)")
class SemiImplicitEuler(AbstractStepper):
    order: ClassVar[int] = 1
    second_order: ClassVar[bool] = True
    symplectic: ClassVar[bool] = True
    reversible: ClassVar[bool] = True
    evals_per_step: ClassVar[int] = 1
    tableau: ClassVar[Splitting] = Splitting(drifts=(0, 1), kicks=(1,))  # its coefficients, for analysis

    def step(self, field, t, y, dt, state):
        x, v = self._unpack(y)
        v = axpy(v, dt, field(t, x))
        return PhaseState(axpy(x, dt, v), v), state

    def inverse(self, field, t, y1, dt):
        """The ``y`` with ``step(field, t, y, dt) == y1``: ``x = x1 - dt v1``, then ``v = v1 - dt a(t, x)``."""
        x1, v1 = self._unpack(y1)
        x = axpy(x1, -dt, v1)
        return PhaseState(x, axpy(v1, -dt, field(t, x)))
