"""Bogacki–Shampine's third-order method (the solution of their 3(2) pair): its fourth stage is the next step's first,
so on a repeated field a step costs three evaluations (FSAL). Order 3, four stages. Reference: Bogacki & Shampine,
*A 3(2) pair of Runge–Kutta formulas*, Appl. Math. Lett. 2 (1989).
"""

from ._registry import register_stepper
from ._tableau import ButcherTableau, RungeKutta


@register_stepper("bogacki_shampine3", update="Bogacki–Shampine 3 (FSAL)")
class BogackiShampine3(RungeKutta):
    tableau = ButcherTableau(A=((), (1 / 2,), (0, 3 / 4), (2 / 9, 1 / 3, 4 / 9)), b=(2 / 9, 1 / 3, 4 / 9, 0))
