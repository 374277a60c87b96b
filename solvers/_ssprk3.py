"""The strong-stability-preserving third-order method of Shu & Osher (1988), a convex combination of Euler steps. Order
3, three evaluations. Reference: Gottlieb & Shu, *Total variation diminishing Runge–Kutta schemes*, Math. Comp. 67
(1998).
"""

from ._registry import register_stepper
from ._tableau import ButcherTableau, RungeKutta


@register_stepper("ssprk3", update="strong-stability-preserving RK3 (Shu–Osher)")
class SSPRK3(RungeKutta):
    tableau = ButcherTableau(A=((), (1,), (1 / 4, 1 / 4)), b=(1 / 6, 1 / 6, 2 / 3))
