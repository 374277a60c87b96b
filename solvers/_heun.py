"""Heun's method (explicit trapezoid): ``k1 = f(t, x)``, ``k2 = f(t + dt, x + dt k1)``, ``x + dt (k1 + k2) / 2``.

Order 2, two evaluations per step (at ``t`` and ``t + dt``), neither symplectic nor reversible; the tableau
``A = [[], [1]]``, ``b = [½, ½]`` (each claim derived from it, ``_tableau.py``). Reference: Hairer, Nørsett &
Wanner, *Solving ODEs I*, §II.1.
"""

from ._registry import register_stepper
from ._tableau import ButcherTableau, RungeKutta


@register_stepper("heun", update="explicit trapezoid")
class Heun(RungeKutta):
    tableau = ButcherTableau(A=((), (1,)), b=(1 / 2, 1 / 2))
