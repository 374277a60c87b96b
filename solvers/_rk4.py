"""The classic fourth-order Runge–Kutta method (Kutta 1901, the "1/6, 1/3, 1/3, 1/6" tableau).

``k1 = f(t, x)``, ``k2 = f(t + dt/2, x + dt k1/2)``, ``k3 = f(t + dt/2, x + dt k2/2)``, ``k4 = f(t + dt, x + dt k3)``,
``x + dt (k1 + 2 k2 + 2 k3 + k4) / 6``. Order 4, four evaluations per step, neither symplectic nor reversible: each
declaration is checked against the tableau when the class is made (``_tableau.py``).

Not the same as ``torchdiffeq``'s ``method="rk4"``, which is Kutta's 3/8 rule; both are order 4.
Reference: Hairer, Nørsett & Wanner, *Solving ODEs I*, §II.1, Table 1.2.
"""

from typing import ClassVar

from ._registry import register_stepper
from ._tableau import RungeKutta


@register_stepper("rk4", update="classic Runge–Kutta (not torchdiffeq's 3/8 rule)")
class RK4(RungeKutta):
    A = ((), (1 / 2,), (0, 1 / 2), (0, 0, 1))
    b = (1 / 6, 1 / 3, 1 / 3, 1 / 6)
    order: ClassVar[int] = 4
    second_order: ClassVar[bool] = False
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 4
