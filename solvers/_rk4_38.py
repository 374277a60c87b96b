"""Kutta's 3/8 rule, the other classic fourth-order Runge–Kutta method (``torchdiffeq``'s ``method="rk4"``).

``k1 = f(t, x)``, ``k2 = f(t + dt/3, x + dt k1/3)``, ``k3 = f(t + 2dt/3, x + dt (k2 - k1/3))``,
``k4 = f(t + dt, x + dt (k1 - k2 + k3))``, ``x + dt (k1 + 3 k2 + 3 k3 + k4) / 8``. Order 4, four evaluations per step,
neither symplectic nor reversible (each derived from the tableau, ``_tableau.py``). Kept beside ``rk4`` (the
1/6-1/3-1/3-1/6 tableau) so comparisons with torchdiffeq are like with like. Reference: Hairer, Nørsett & Wanner,
*Solving ODEs I*, §II.1, Table 1.2 (right).
"""

from ._registry import register_stepper
from ._tableau import ButcherTableau, RungeKutta


@register_stepper("rk4_38", update="Kutta's 3/8 rule (torchdiffeq's `rk4`)")
class RK4ThreeEighths(RungeKutta):
    tableau = ButcherTableau(A=((), (1 / 3,), (-1 / 3, 1), (1, -1, 1)), b=(1 / 8, 3 / 8, 3 / 8, 1 / 8))
