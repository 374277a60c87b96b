"""Integrators for depth-as-time: one residual layer is one step of an explicit scheme.

``STEPPERS`` maps a config name to a stepper class (a scheme registers beside its definition with
``@register_stepper("name")``, and a taken name is refused); ``iterate`` is the one loop over depth (``integrate`` and
``trajectory`` keep its last or every state; ``integrate_reversible`` rebuilds states in the backward pass instead of
storing them, and the ``checkpointed`` hook recomputes them). ``Split`` and ``Whole`` make a layer of two sublayers
one step of a block stepper over a ``Block`` of fields. The long explanation of the interface is in
``solvers/_base.py``; ``solvers.testing`` is the property kit (order, symplecticity, reversibility, evaluation
count) that users run on their own schemes. This package imports only torch.
"""

from ._base import (
    CLAIMS,
    DECLARATIONS,
    AbstractStepper,
    Carry,
    Claims,
    Field,
    PhaseState,
    StepSize,
    Time,
    Y,
    adapt,
    axpy,
    claimed_class,
    integrate,
    iterate,
    made_as,
    register,
    sigmoid_gate,
    trajectory,
    transformed,
)
from ._composition import Composition
from ._damped import Damped
from ._euler import Euler
from ._heun import Heun
from ._leapfrog import Leapfrog
from ._learnable_composition4 import TripleJump
from ._learnable_rk2 import TwoStageRK
from ._learnable_splitting import SymmetricSplitting
from ._light_wave import LightWave
from ._mix import Mix
from ._recompute import checkpointed
from ._registry import STEPPERS, register_stepper, stepper_table
from ._reversible import AutocastState, integrate_reversible
from ._rk4 import RK4
from ._rk4_38 import RK4ThreeEighths
from ._rkn import RungeKuttaNystrom
from ._semi_implicit_euler import SemiImplicitEuler
from ._splitting import Block, Split, Whole
from ._tableau import RungeKutta
from ._tableau_library import TABLEAUX, Tableau, tableau
from ._velocity_mix import VelocityMix
from ._velocity_verlet import VelocityVerlet

__all__ = [
    "CLAIMS",
    "DECLARATIONS",
    "STEPPERS",
    "TABLEAUX",
    "AbstractStepper",
    "AutocastState",
    "Carry",
    "Claims",
    "Block",
    "Composition",
    "Damped",
    "Euler",
    "Field",
    "Heun",
    "Leapfrog",
    "LightWave",
    "Mix",
    "PhaseState",
    "RK4",
    "RK4ThreeEighths",
    "RungeKutta",
    "RungeKuttaNystrom",
    "SemiImplicitEuler",
    "StepSize",
    "Split",
    "SymmetricSplitting",
    "Tableau",
    "TripleJump",
    "Time",
    "TwoStageRK",
    "VelocityMix",
    "VelocityVerlet",
    "Whole",
    "Y",
    "adapt",
    "axpy",
    "claimed_class",
    "checkpointed",
    "integrate",
    "integrate_reversible",
    "iterate",
    "made_as",
    "register",
    "register_stepper",
    "sigmoid_gate",
    "stepper_table",
    "tableau",
    "trajectory",
    "transformed",
]


def __getattr__(name: str):
    if name in ("testing", "analysis"):  # the kit needs hypothesis, and neither is needed to step: load when asked
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'solvers' has no attribute {name!r}")
