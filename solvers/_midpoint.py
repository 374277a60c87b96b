"""The explicit midpoint rule (Runge 1895): ``x + dt f(t + dt/2, x + dt/2 f(t, x))``. Order 2, two evaluations.
Reference: Hairer, Nørsett & Wanner, *Solving ODEs I*, §II.1, eq. (1.7).
"""

from ._registry import register_stepper
from ._tableau import ButcherTableau, RungeKutta


@register_stepper("midpoint", update="explicit midpoint rule")
class Midpoint(RungeKutta):
    tableau = ButcherTableau(A=((), (1 / 2,)), b=(0, 1))
