"""Yoshida's fourth-order triple jump of velocity Verlet (kick–drift–kick), the kicks between substeps merged: four
kicks, the last the next step's first (FSAL). Order 4, symplectic, symmetric. Reference: Yoshida, *Construction of
higher order symplectic integrators*, Phys. Lett. A 150 (1990).
"""

from ._composition import YOSHIDA_W1 as _THETA
from ._composition import Composition, Splitting
from ._registry import register_stepper


@register_stepper("yoshida4", update="Yoshida's triple jump of velocity Verlet")
class Yoshida4(Composition):
    tableau = Splitting(
        drifts=(0, _THETA, 1 - 2 * _THETA, _THETA), kicks=(_THETA / 2, (1 - _THETA) / 2, (1 - _THETA) / 2, _THETA / 2)
    )
