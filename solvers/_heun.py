"""Heun's method (explicit trapezoid): ``k1 = f(t, x)``, ``k2 = f(t + dt, x + dt k1)``, ``x + dt (k1 + k2) / 2``.

Order 2, two evaluations per step (at ``t`` and ``t + dt``), neither symplectic nor reversible. Reference: Hairer,
Nørsett & Wanner, *Solving ODEs I*, §II.1.
"""

from typing import ClassVar

from ._base import AbstractStepper


class Heun(AbstractStepper):
    order: ClassVar[int] = 2
    second_order: ClassVar[bool] = False
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 2

    def step(self, field, t, y, dt, state):
        x = self._unpack(y)
        k1 = field(t, x)
        k2 = field(t + dt, x + dt * k1)
        return x + (0.5 * dt) * (k1 + k2), state
