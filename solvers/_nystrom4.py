"""Nyström's fourth-order method, three evaluations of the force per step (the Runge–Kutta–Nyström counterpart of
Kutta's RK4): ``c = (0, ½, 1)``, ``Ā = [[], [1/8], [0, ½]]``, ``b̄ = (1/6, 1/3, 0)``, ``b = (1/6, 4/6, 1/6)``. Order
4, not symplectic. Reference: Nyström (1925); Hairer, Nørsett & Wanner, *Solving ODEs I*, §II.14.
"""

from ._registry import register_stepper
from ._rkn import NystromTableau, RungeKuttaNystrom


@register_stepper("nystrom4", update="Nyström's fourth-order RKN method")
class Nystrom4(RungeKuttaNystrom):
    tableau = NystromTableau(
        A=((), (1 / 8,), (0, 1 / 2)), bbar=(1 / 6, 1 / 3, 0), b=(1 / 6, 2 / 3, 1 / 6), c=(0, 1 / 2, 1)
    )
