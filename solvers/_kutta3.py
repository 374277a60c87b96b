"""Kutta's third-order method, ``c = (0, ½, 1)``, ``b = (1/6, 4/6, 1/6)`` (Simpson's weights). Order 3, three
evaluations. Reference: Kutta (1901); Hairer, Nørsett & Wanner, *Solving ODEs I*, §II.1, Table 1.1.
"""

from ._registry import register_stepper
from ._tableau import ButcherTableau, RungeKutta


@register_stepper("kutta3", update="Kutta's third-order method")
class Kutta3(RungeKutta):
    tableau = ButcherTableau(A=((), (1 / 2,), (-1, 2)), b=(1 / 6, 2 / 3, 1 / 6))
