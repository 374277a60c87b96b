"""Integrators for depth-as-time: one residual layer is one step of an explicit scheme.

``STEPPERS`` maps a name to a stepper class, one scheme per file (a scheme registers beside its definition with
``@register_stepper("name")``, and a taken name is refused): the hand-written schemes, the named tableaux and
splittings (each a file holding its coefficients; ``TABLEAUX`` lists them) and the learnable families. A stepper's
claims are a value, ``stepper.claims()`` (a ``Claims`` record); coefficients with no name are a ``Tableau``.
``run_steps`` is the one loop over depth (``iterate`` checks its arguments and runs it; ``integrate`` and
``trajectory`` keep its last or every state;
``integrate_reversible`` rebuilds states in the backward pass instead of storing them, and the ``checkpointed`` hook
recomputes them). ``Split`` and ``Whole`` make a layer of two sublayers one step of a block stepper over a ``Block``
of fields. The long explanation of the interface is in
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
    Hook,
    PhaseState,
    StepSize,
    Time,
    Y,
    axpy,
    integrate,
    iterate,
    register,
    run_steps,
    sigmoid_gate,
    trajectory,
    transforms_active,
    y_for,
)
from ._bogacki_shampine3 import BogackiShampine3
from ._coefficients import TABLEAUX, Tableau, tableau
from ._composition import Composition, Splitting
from ._damped import Damped
from ._euler import Euler
from ._forest_ruth import ForestRuth
from ._heun import Heun
from ._jvp import DifferentiableNorms, differentiable_jvp
from ._kutta3 import Kutta3
from ._leapfrog import Leapfrog
from ._learnable_composition4 import TripleJump
from ._learnable_rk2 import TwoStageRK
from ._learnable_splitting import SymmetricSplitting
from ._light_wave import LightWave
from ._midpoint import Midpoint
from ._mix import Mix
from ._nystrom4 import Nystrom4
from ._omelyan2 import OMELYAN_LAMBDA, Omelyan2
from ._omelyan4 import Omelyan4
from ._pefrl import PEFRL
from ._position_verlet import PositionVerlet
from ._ralston import Ralston
from ._recompute import checkpointed, recomputed
from ._registry import (
    STEPPERS,
    Variant,
    check_options,
    make_stepper,
    register_stepper,
    stepper_parameters,
    stepper_table,
)
from ._reversible import AutocastState, integrate_reversible
from ._rk4 import RK4
from ._rk4_38 import RK4ThreeEighths
from ._rkn import NystromTableau, RungeKuttaNystrom
from ._semi_implicit_euler import SemiImplicitEuler
from ._splitting import Block, Split, Whole
from ._ssprk3 import SSPRK3
from ._tableau import ButcherTableau, RungeKutta
from ._velocity_mix import VelocityMix
from ._velocity_verlet import VelocityVerlet
from ._yoshida4 import Yoshida4

__all__ = [
    "CLAIMS",
    "DECLARATIONS",
    "OMELYAN_LAMBDA",
    "PEFRL",
    "RK4",
    "SSPRK3",
    "STEPPERS",
    "TABLEAUX",
    "Y",
    "AbstractStepper",
    "AutocastState",
    "Block",
    "BogackiShampine3",
    "ButcherTableau",
    "Carry",
    "Claims",
    "Composition",
    "Damped",
    "DifferentiableNorms",
    "Euler",
    "Field",
    "ForestRuth",
    "Heun",
    "Hook",
    "Kutta3",
    "Leapfrog",
    "LightWave",
    "Midpoint",
    "Mix",
    "Nystrom4",
    "NystromTableau",
    "Omelyan2",
    "Omelyan4",
    "PhaseState",
    "PositionVerlet",
    "RK4ThreeEighths",
    "Ralston",
    "RungeKutta",
    "RungeKuttaNystrom",
    "SemiImplicitEuler",
    "Split",
    "Splitting",
    "StepSize",
    "SymmetricSplitting",
    "Tableau",
    "Time",
    "TripleJump",
    "TwoStageRK",
    "VelocityMix",
    "Variant",
    "VelocityVerlet",
    "Whole",
    "Yoshida4",
    "axpy",
    "check_options",
    "checkpointed",
    "differentiable_jvp",
    "integrate",
    "integrate_reversible",
    "iterate",
    "make_stepper",
    "recomputed",
    "register",
    "register_stepper",
    "run_steps",
    "sigmoid_gate",
    "stepper_parameters",
    "stepper_table",
    "tableau",
    "trajectory",
    "transforms_active",
    "y_for",
]


from . import _variants  # noqa: E402, F401  (the variant rows join STEPPERS after every scheme)

_RENAMED = {"adapt": "y_for", "transformed": "transforms_active"}
"""Old names of this package's functions, each resolved to its new one with a warning."""


def __getattr__(name: str):
    if name in _RENAMED:
        import warnings

        new = _RENAMED[name]
        warnings.warn(f"solvers.{name} is now solvers.{new}", DeprecationWarning, stacklevel=2)
        return globals()[new]
    if name in ("testing", "analysis"):  # the kit needs hypothesis, and neither is needed to step: load when asked
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'solvers' has no attribute {name!r}")
