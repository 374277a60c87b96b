"""Named tableaux and splittings, and :func:`tableau`: a stepper class from a name or from coefficients.

Every entry is a class of one of the three engines (``_tableau.py``, ``_rkn.py``, ``_composition.py``) and states the
order it is known to have; the engine checks that statement against the order conditions when the class is made, so
a mistyped coefficient here would stop the import with the condition it breaks. ``TABLEAUX`` maps the names that
``solver=tableau solver.options.name=...`` accepts to the classes.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ._base import AbstractStepper
from ._composition import Composition
from ._euler import Euler
from ._heun import Heun
from ._rk4 import RK4
from ._rk4_38 import RK4ThreeEighths
from ._rkn import RungeKuttaNystrom
from ._tableau import RungeKutta

# -- explicit Runge–Kutta (first-order dynamics) ---------------------------------------------------------------------


class Midpoint(RungeKutta):
    """The explicit midpoint rule (Runge 1895): ``x + dt f(t + dt/2, x + dt/2 f(t, x))``. Order 2, two evaluations.
    Reference: Hairer, Nørsett & Wanner, *Solving ODEs I*, §II.1, eq. (1.7)."""

    A = ((), (1 / 2,))
    b = (0, 1)
    order: ClassVar[int] = 2


class Ralston(RungeKutta):
    """Ralston's second-order method, ``c₂ = 2/3``: the two-stage method of least error bound. Order 2, two
    evaluations. Reference: Ralston, *Runge–Kutta methods with minimum error bounds*, Math. Comp. 16 (1962)."""

    A = ((), (2 / 3,))
    b = (1 / 4, 3 / 4)
    order: ClassVar[int] = 2


class Kutta3(RungeKutta):
    """Kutta's third-order method, ``c = (0, ½, 1)``, ``b = (1/6, 4/6, 1/6)`` (Simpson's weights). Order 3, three
    evaluations. Reference: Kutta (1901); Hairer, Nørsett & Wanner, *Solving ODEs I*, §II.1, Table 1.1."""

    A = ((), (1 / 2,), (-1, 2))
    b = (1 / 6, 2 / 3, 1 / 6)
    order: ClassVar[int] = 3


class SSPRK3(RungeKutta):
    """The strong-stability-preserving third-order method of Shu & Osher (1988), a convex combination of Euler steps.
    Order 3, three evaluations. Reference: Gottlieb & Shu, *Total variation diminishing Runge–Kutta schemes*,
    Math. Comp. 67 (1998)."""

    A = ((), (1,), (1 / 4, 1 / 4))
    b = (1 / 6, 1 / 6, 2 / 3)
    order: ClassVar[int] = 3


class BogackiShampine3(RungeKutta):
    """Bogacki–Shampine's third-order method (the solution of their 3(2) pair): its fourth stage is the next step's
    first, so on a repeated field a step costs three evaluations (FSAL). Order 3, four stages. Reference: Bogacki &
    Shampine, *A 3(2) pair of Runge–Kutta formulas*, Appl. Math. Lett. 2 (1989)."""

    A = ((), (1 / 2,), (0, 3 / 4), (2 / 9, 1 / 3, 4 / 9))
    b = (2 / 9, 1 / 3, 4 / 9, 0)
    order: ClassVar[int] = 3


# -- explicit Runge–Kutta–Nyström (x'' = a(t, x)) --------------------------------------------------------------------


class Nystrom4(RungeKuttaNystrom):
    """Nyström's fourth-order method, three evaluations of the force per step (the Runge–Kutta–Nyström counterpart of
    Kutta's RK4): ``c = (0, ½, 1)``, ``Ā = [[], [1/8], [0, ½]]``, ``b̄ = (1/6, 1/3, 0)``, ``b = (1/6, 4/6, 1/6)``.
    Order 4, not symplectic. Reference: Nyström (1925); Hairer, Nørsett & Wanner, *Solving ODEs I*, §II.14."""

    A = ((), (1 / 8,), (0, 1 / 2))
    bbar = (1 / 6, 1 / 3, 0)
    b = (1 / 6, 2 / 3, 1 / 6)
    c = (0, 1 / 2, 1)
    order: ClassVar[int] = 4


# -- kick–drift splittings (x'' = a(t, x)) ---------------------------------------------------------------------------

_THETA = 1 / (2 - 2 ** (1 / 3))  # Yoshida's triple-jump weight w₁; w₀ = 1 − 2 w₁ < 0 (the middle step goes back)


class SymplecticEuler(Composition):
    """Symplectic Euler, kick then drift (Wavy's Full Wave): ``drifts (0, 1)``, ``kicks (1,)``. Order 1, symplectic,
    not symmetric. Reference: Hairer, Lubich & Wanner, *Geometric Numerical Integration*, §I.1.2."""

    drifts = (0, 1)
    kicks = (1,)
    order: ClassVar[int] = 1


class VelocityVerletSplitting(Composition):
    """Velocity Verlet as a splitting, kick ½, drift 1, kick ½ (``drifts (0, 1)``, ``kicks (½, ½)``); its last force
    is the next step's first (FSAL). Order 2, symplectic, symmetric. Reference: Swope, Andersen, Berens & Wilson,
    J. Chem. Phys. 76 (1982); Hairer, Lubich & Wanner, §I.1.4."""

    drifts = (0, 1)
    kicks = (1 / 2, 1 / 2)
    order: ClassVar[int] = 2


class PositionVerlet(Composition):
    """Position Verlet, drift ½, kick 1, drift ½ (the Störmer–Verlet step in drift–kick–drift form). Order 2,
    symplectic, symmetric, one evaluation. Reference: Hairer, Lubich & Wanner, *Geometric Numerical Integration*,
    §I.1.4."""

    drifts = (1 / 2, 1 / 2)
    kicks = (1,)
    order: ClassVar[int] = 2


class ForestRuth(Composition):
    """Forest & Ruth's fourth-order method: Yoshida's triple jump ``w₁, w₀, w₁`` of position Verlet (drift–kick–drift),
    ``w₁ = 1/(2 − 2^{1/3})``, ``w₀ = 1 − 2 w₁``. Order 4, symplectic, symmetric, three evaluations. Reference: Forest &
    Ruth, *Fourth-order symplectic integration*, Physica D 43 (1990)."""

    drifts = (_THETA / 2, (1 - _THETA) / 2, (1 - _THETA) / 2, _THETA / 2)
    kicks = (_THETA, 1 - 2 * _THETA, _THETA)
    order: ClassVar[int] = 4


class Yoshida4(Composition):
    """Yoshida's fourth-order triple jump of velocity Verlet (kick–drift–kick), the kicks between substeps merged:
    four kicks, the last the next step's first (FSAL). Order 4, symplectic, symmetric. Reference: Yoshida,
    *Construction of higher order symplectic integrators*, Phys. Lett. A 150 (1990)."""

    drifts = (0, _THETA, 1 - 2 * _THETA, _THETA)
    kicks = (_THETA / 2, (1 - _THETA) / 2, (1 - _THETA) / 2, _THETA / 2)
    order: ClassVar[int] = 4


OMELYAN_LAMBDA = 0.1931833275037836
"""λ of Omelyan, Mryglod & Folk's second-order minimum-norm method (drift λ, kick ½, drift 1 − 2λ, kick ½, drift λ)."""


class Omelyan2(Composition):
    """Omelyan, Mryglod & Folk's two-stage second-order method of least error norm: drift λ, kick ½, drift 1 − 2λ,
    kick ½, drift λ with ``λ = 0.1931833275037836``. Order 2, symplectic, symmetric, two evaluations. Reference:
    Omelyan, Mryglod & Folk, *Optimized Verlet-like algorithms for molecular dynamics simulations*, Phys. Rev. E 65
    (2002), eq. (20)."""

    drifts = (OMELYAN_LAMBDA, 1 - 2 * OMELYAN_LAMBDA, OMELYAN_LAMBDA)
    kicks = (1 / 2, 1 / 2)
    order: ClassVar[int] = 2


_VX, _VL, _VC = 0.1644986515575760, -0.2094333910398989e-1, 0.1235692651138917e1


class Omelyan4(Composition):
    """Omelyan, Mryglod & Folk's velocity-extended Forest–Ruth-like method (VEFRL): kick ξ, drift (1 − 2λ)/2, kick χ,
    drift λ, kick 1 − 2(χ + ξ), drift λ, kick χ, drift (1 − 2λ)/2, kick ξ; four force evaluations per step on a
    repeated field (its last kick is the next step's first, FSAL). Order 4, symplectic, symmetric. Reference: Omelyan,
    Mryglod & Folk, Comput. Phys. Commun. 146 (2002), eq. (30)."""

    drifts = (0, (1 - 2 * _VL) / 2, _VL, _VL, (1 - 2 * _VL) / 2)
    kicks = (_VX, _VC, 1 - 2 * (_VC + _VX), _VC, _VX)
    order: ClassVar[int] = 4


_PX, _PL, _PC = 0.1786178958448091, -0.2123418310626054, -0.6626458266981849e-1


class PEFRL(Composition):
    """Omelyan, Mryglod & Folk's position-extended Forest–Ruth-like method: drift ξ, kick (1 − 2λ)/2, drift χ, kick λ,
    drift 1 − 2(χ + ξ), kick λ, drift χ, kick (1 − 2λ)/2, drift ξ. Order 4, symplectic, symmetric, four evaluations;
    about a hundred times smaller error constant than Forest–Ruth. Reference: Omelyan, Mryglod & Folk, Comput. Phys.
    Commun. 146 (2002), eq. (20)."""

    drifts = (_PX, _PC, 1 - 2 * (_PC + _PX), _PC, _PX)
    kicks = ((1 - 2 * _PL) / 2, _PL, _PL, (1 - 2 * _PL) / 2)
    order: ClassVar[int] = 4


TABLEAUX: dict[str, type[AbstractStepper]] = {
    "euler": Euler,
    "midpoint": Midpoint,
    "heun": Heun,
    "ralston": Ralston,
    "kutta3": Kutta3,
    "ssprk3": SSPRK3,
    "bogacki_shampine3": BogackiShampine3,
    "rk4": RK4,
    "rk4_38": RK4ThreeEighths,
    "nystrom4": Nystrom4,
    "symplectic_euler": SymplecticEuler,
    "velocity_verlet": VelocityVerletSplitting,
    "position_verlet": PositionVerlet,
    "forest_ruth": ForestRuth,
    "yoshida4": Yoshida4,
    "omelyan2": Omelyan2,
    "omelyan4": Omelyan4,
    "pefrl": PEFRL,
}
"""The named schemes ``tableau(name)`` knows."""

_COEFFICIENTS = ("A", "b", "c", "bbar", "drifts", "kicks")


def tableau(
    name: str | None = None,
    A: Any = None,
    b: Any = None,
    c: Any = None,
    bbar: Any = None,
    drifts: Any = None,
    kicks: Any = None,
) -> type[AbstractStepper]:
    """The stepper class of a named scheme (:data:`TABLEAUX`) or of coefficients, its claims derived from them:

    - ``A, b`` (and ``c``, default the row sums of ``A``): an explicit Runge–Kutta method for ``x' = f(t, x)``;
    - ``A, bbar, b, c``: an explicit Runge–Kutta–Nyström method for ``x'' = a(t, x)`` (``A`` is ``Ā``);
    - ``drifts, kicks``: a kick–drift splitting for ``x'' = a(t, x)``.

    Coefficients are numbers or strings such as ``"1/3"``. Anything inconsistent (an unknown name, a name together
    with coefficients, coefficients of two kinds, lengths that do not match, a non-explicit ``A``, order 0) is a
    one-line ValueError naming the problem.
    """
    given = {key: value for key, value in zip(_COEFFICIENTS, (A, b, c, bbar, drifts, kicks)) if value is not None}
    if name is not None:
        if given:
            raise ValueError(
                f"give a tableau's name or its coefficients, not both (name={name!r} with {', '.join(given)})."
            )
        if name not in TABLEAUX:
            raise ValueError(f"unknown tableau {name!r}; choose one of {', '.join(TABLEAUX)}, or give coefficients.")
        return TABLEAUX[name]
    if not given:
        raise ValueError(
            f"no tableau given: name one ({', '.join(TABLEAUX)}) or give coefficients (A, b[, c]; A, bbar, b, c; "
            "or drifts, kicks)."
        )
    if drifts is not None or kicks is not None:
        mixed = [key for key in ("A", "b", "c", "bbar") if key in given]
        if mixed or drifts is None or kicks is None:
            raise ValueError(
                "a splitting takes drifts and kicks, and only them"
                + (
                    f" (got {', '.join(mixed)} too)."
                    if mixed
                    else f" (got {'drifts' if kicks is None else 'kicks'} alone)."
                )
            )
        return Composition.from_coefficients(drifts, kicks)
    if A is None or b is None:
        raise ValueError(f"a Runge–Kutta tableau needs A and b (got {', '.join(given)}).")
    if bbar is not None:
        return RungeKuttaNystrom.from_coefficients(A, bbar, b, c)
    return RungeKutta.from_coefficients(A, b, c)


def describe(cls: type[AbstractStepper]) -> dict[str, Any]:
    """A tableau class's coefficients and derived claims as plain values; the declarations alone for other steppers."""
    if hasattr(cls, "describe"):
        return cls.describe()
    keys = ("order", "second_order", "symplectic", "reversible", "evals_per_step", "fsal")
    return {key: getattr(cls, key) for key in keys}


class Tableau(VelocityVerletSplitting):
    """``Tableau(name=...)`` or ``Tableau(A=..., b=...)``, ``Tableau(drifts=..., kicks=...)``: an instance of
    :func:`tableau`'s class (the options ``solver=tableau`` takes), whose declarations are those its coefficients
    give. With nothing given it is velocity Verlet (``DEFAULT``): an instance of this class, which is that splitting."""

    DEFAULT: ClassVar[str] = "velocity_verlet"

    def __new__(
        cls,
        name: str | None = None,
        A: Any = None,
        b: Any = None,
        c: Any = None,
        bbar: Any = None,
        drifts: Any = None,
        kicks: Any = None,
    ):
        if name is None and all(x is None for x in (A, b, c, bbar, drifts, kicks)):
            return super().__new__(cls)
        return tableau(name, A, b, c, bbar, drifts, kicks)()

    def __init__(
        self,
        name: str | None = None,
        A: Any = None,
        b: Any = None,
        c: Any = None,
        bbar: Any = None,
        drifts: Any = None,
        kicks: Any = None,
    ):
        super().__init__()
