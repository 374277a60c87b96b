"""Omelyan, Mryglod & Folk's velocity-extended Forest–Ruth-like method (VEFRL): kick ξ, drift (1 − 2λ)/2, kick χ, drift
λ, kick 1 − 2(χ + ξ), drift λ, kick χ, drift (1 − 2λ)/2, kick ξ; four force evaluations per step on a repeated field
(its last kick is the next step's first, FSAL). Order 4, symplectic, symmetric. Reference: Omelyan, Mryglod & Folk,
Comput. Phys. Commun. 146 (2002), eq. (30).
"""

from ._composition import Composition, Splitting
from ._registry import register_stepper

_VX, _VL, _VC = 0.1644986515575760, -0.2094333910398989e-1, 0.1235692651138917e1


@register_stepper("omelyan4", update="Omelyan's velocity-extended Forest–Ruth-like method")
class Omelyan4(Composition):
    tableau = Splitting(
        drifts=(0, (1 - 2 * _VL) / 2, _VL, _VL, (1 - 2 * _VL) / 2), kicks=(_VX, _VC, 1 - 2 * (_VC + _VX), _VC, _VX)
    )
