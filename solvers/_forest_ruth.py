"""Forest & Ruth's fourth-order method: Yoshida's triple jump ``w₁, w₀, w₁`` of position Verlet (drift–kick–drift),
``w₁ = 1/(2 − 2^{1/3})``, ``w₀ = 1 − 2 w₁``. Order 4, symplectic, symmetric, three evaluations. Reference: Forest &
Ruth, *Fourth-order symplectic integration*, Physica D 43 (1990).
"""

from ._composition import YOSHIDA_W1 as _THETA
from ._composition import Composition, Splitting
from ._registry import register_stepper


@register_stepper("forest_ruth", update="Forest–Ruth triple jump of position Verlet")
class ForestRuth(Composition):
    tableau = Splitting(
        drifts=(_THETA / 2, (1 - _THETA) / 2, (1 - _THETA) / 2, _THETA / 2), kicks=(_THETA, 1 - 2 * _THETA, _THETA)
    )
