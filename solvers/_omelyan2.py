"""Omelyan, Mryglod & Folk's two-stage second-order method of least error norm: drift λ, kick ½, drift 1 − 2λ, kick ½,
drift λ with ``λ = 0.1931833275037836``. Order 2, symplectic, symmetric, two evaluations. Reference: Omelyan, Mryglod
& Folk, *Optimized Verlet-like algorithms for molecular dynamics simulations*, Phys. Rev. E 65 (2002), eq. (20).
"""

from ._composition import Composition, Splitting
from ._registry import register_stepper

OMELYAN_LAMBDA = 0.1931833275037836
"""λ of Omelyan, Mryglod & Folk's second-order minimum-norm method (drift λ, kick ½, drift 1 − 2λ, kick ½, drift λ)."""


@register_stepper("omelyan2", update="Omelyan's two-kick minimum-norm splitting (λ ≈ 0.1932)")
class Omelyan2(Composition):
    tableau = Splitting(drifts=(OMELYAN_LAMBDA, 1 - 2 * OMELYAN_LAMBDA, OMELYAN_LAMBDA), kicks=(1 / 2, 1 / 2))
