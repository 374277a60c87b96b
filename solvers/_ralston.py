"""Ralston's second-order method, ``c₂ = 2/3``: the two-stage method of least error bound. Order 2, two evaluations.
Reference: Ralston, *Runge–Kutta methods with minimum error bounds*, Math. Comp. 16 (1962).
"""

from ._registry import register_stepper
from ._tableau import ButcherTableau, RungeKutta


@register_stepper("ralston", update="Ralston's two-stage method (c₂ = 2/3)")
class Ralston(RungeKutta):
    tableau = ButcherTableau(A=((), (2 / 3,)), b=(1 / 4, 3 / 4))
