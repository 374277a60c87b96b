"""Position Verlet, drift ½, kick 1, drift ½ (the Störmer–Verlet step in drift–kick–drift form). Order 2, symplectic,
symmetric, one evaluation. Reference: Hairer, Lubich & Wanner, *Geometric Numerical Integration*, §I.1.4.
"""

from ._composition import Composition, Splitting
from ._registry import register_stepper


@register_stepper("position_verlet", update="drift-kick-drift")
class PositionVerlet(Composition):
    tableau = Splitting(drifts=(1 / 2, 1 / 2), kicks=(1,))
