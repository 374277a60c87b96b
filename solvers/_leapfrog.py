"""Leapfrog, here meaning the two-step Störmer recurrence ``x_{n+1} = 2 x_n - x_{n-1} + dt² a(t_n, x_n)``.

This is the form the Wavy wave update takes once the velocity is eliminated. The start step is the second-order
Taylor step ``x_1 = x_0 + dt v_0 + dt²/2 a(x_0)``, so the global order is 2 for any initial velocity (semi-implicit
Euler is the same recurrence started with ``dt² a``, hence order 1). For a step size that changes, the recurrence is
the variable-step form ``x_{n+1} = x_n + r (x_n - x_{n-1}) + dt (dt + dt_prev)/2 a(x_n)``, ``r = dt / dt_prev``.

The history lives in the velocity. The reported velocity is ``v_{n+1} = (x_{n+1} - x_n)/dt + dt/2 a(x_n)``, accurate
to O(dt²), and the next step reads the displacement back from it: ``x_{n+1} - x_n = dt (v_{n+1} - dt/2 a(x_n))``,
with only the force ``a(x_n)`` and ``dt`` kept in ``state``. So the step is::

    x_{n+1} = x_n + dt v_n + dt/2 (dt a_n + dt_prev (a_n - a_{n-1}))
    v_{n+1} = v_n + dt a_n + dt_prev/2 (a_n - a_{n-1})        (a_{-1} = a_0 at the start)

which is exactly the recurrence above when nothing acts between steps, and which makes a map applied to the state
between steps (the FFN sub-step with its chain rule, a post-norm) act on the history through the velocity, as it does
for every other second-order scheme. One evaluation per step whatever the fields, which is why it suits untied layers
better than ``velocity_verlet`` (two evaluations per step when the field changes). In exact arithmetic the positions
are those of velocity Verlet, so the energy behaviour is Verlet's. It reads history (``multistep``), so as a one-step
map of ``(x, v)`` it is neither symplectic nor reversible, and it does not claim to be; stepping with ``-dt`` from the
state a forward run left retraces the positions. Reference: Hairer, Lubich & Wanner, *Geometric Numerical
Integration*, §I.1.4 (Störmer's form (1.15)).
"""

from typing import Any, ClassVar, NamedTuple

from torch import Tensor

from ._base import AbstractStepper, PhaseState, axpy
from ._registry import register_stepper


class _History(NamedTuple):
    a: Tensor  # a(x_{n-1}), the force at the start of the previous step
    dt: Any  # the previous step


@register_stepper("leapfrog", update="two-step Störmer `2x_n − x_{n−1} + dt² a(x_n)`, Taylor start")
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
        if state is None:  # Taylor start, local error O(dt³)
            return PhaseState(axpy(axpy(x, dt, v), 0.5 * dt * dt, a), axpy(v, dt, a)), _History(a, dt)
        correction = (0.5 * state.dt) * (a - state.a)
        v1 = axpy(v, dt, a) + correction
        x1 = axpy(axpy(x, dt, v), 0.5 * dt, dt * a + 2 * correction)
        return PhaseState(x1, v1), _History(a, dt)

    def history(self, state):
        """The history the next step reads: the force at the previous step's start (``solvers.analysis``'s protocol;
        the previous step size is kept as it is)."""
        return (state.a,)

    def with_history(self, state, history):
        """The running state with the previous force replaced."""
        (a,) = history
        return _History(a, state.dt)
