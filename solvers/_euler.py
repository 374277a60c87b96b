"""Explicit Euler: ``x_{n+1} = x_n + dt * f(t_n, x_n)``, the one-stage tableau ``A = [[]]``, ``b = [1]``.

Order 1, one evaluation per step, neither symplectic nor reversible (derived from the tableau,
``_tableau.py``). With the residual-form field ``f(X) = Attn(LN(X))`` and ``dt = 1`` it is exactly the pre-LN
transformer sublayer; with the Laplacian form ``f(X) = (A(X) - I) X`` it is diffusion on the complete graph of tokens.
Reference: Hairer, Nørsett & Wanner, *Solving Ordinary Differential Equations I*, §I.7.
"""

from ._registry import register_stepper
from ._tableau import ButcherTableau, RungeKutta


@register_stepper("euler", update="`x + dt f(x)`")
class Euler(RungeKutta):
    tableau = ButcherTableau(A=((),), b=(1,))
