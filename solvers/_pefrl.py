"""Omelyan, Mryglod & Folk's position-extended Forest–Ruth-like method: drift ξ, kick (1 − 2λ)/2, drift χ, kick λ, drift
1 − 2(χ + ξ), kick λ, drift χ, kick (1 − 2λ)/2, drift ξ. Order 4, symplectic, symmetric, four evaluations; about a
hundred times smaller error constant than Forest–Ruth. Reference: Omelyan, Mryglod & Folk, Comput. Phys. Commun. 146
(2002), eq. (20).
"""

from ._composition import Composition, Splitting
from ._registry import register_stepper

_PX, _PL, _PC = 0.1786178958448091, -0.2123418310626054, -0.6626458266981849e-1


@register_stepper("pefrl", update="Omelyan's position-extended Forest–Ruth-like method")
class PEFRL(Composition):
    tableau = Splitting(
        drifts=(_PX, _PC, 1 - 2 * (_PC + _PX), _PC, _PX), kicks=((1 - 2 * _PL) / 2, _PL, _PL, (1 - 2 * _PL) / 2)
    )
