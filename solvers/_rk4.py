"""The classic fourth-order Runge–Kutta method (Kutta 1901, the "1/6, 1/3, 1/3, 1/6" tableau).

``k1 = f(t, x)``, ``k2 = f(t + dt/2, x + dt k1/2)``, ``k3 = f(t + dt/2, x + dt k2/2)``, ``k4 = f(t + dt, x + dt k3)``,
``x + dt (k1 + 2 k2 + 2 k3 + k4) / 6``. Order 4, four evaluations per step, neither symplectic nor reversible: each
claim derived from the tableau (``_tableau.py``).

Not the same as ``torchdiffeq``'s ``method="rk4"``, which is Kutta's 3/8 rule; both are order 4.
Reference: Hairer, Nørsett & Wanner, *Solving ODEs I*, §II.1, Table 1.2.
"""

from ._registry import register_stepper
from ._tableau import ButcherTableau, RungeKutta


@register_stepper("rk4", update="classic Runge–Kutta (not torchdiffeq's 3/8 rule)")
class RK4(RungeKutta):
    tableau = ButcherTableau(A=((), (1 / 2,), (0, 1 / 2), (0, 0, 1)), b=(1 / 6, 1 / 3, 1 / 3, 1 / 6))
