"""A scheme given by coefficients and no name: :class:`Tableau`, and the view :data:`TABLEAUX` of the named ones.

``Tableau(A=..., b=...)`` (explicit Runge–Kutta), ``Tableau(A=..., bbar=..., b=..., c=...)`` (Runge–Kutta–Nyström
for ``x'' = a(t, x)``) or ``Tableau(drifts=..., kicks=...)`` (a kick–drift splitting) is a stepper whose coefficients
are a value it holds (a :class:`~solvers.ButcherTableau`, :class:`~solvers.NystromTableau` or
:class:`~solvers.Splitting`) and whose claims are the ones that value derives: order, symplecticity, symmetry,
evaluations and first-same-as-last reuse. It is one class whatever the kind, and ``Tableau()`` with nothing given is
velocity Verlet (kick ½, drift 1, kick ½). :func:`tableau` is the same constructor as a function.

A scheme with a name is a registered class of its own (``solvers.STEPPERS["forest_ruth"]``), a file of its own that
holds its coefficients; :data:`TABLEAUX` lists the registered schemes that are given by coefficients.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

from ._base import AbstractStepper, Claims, stated
from ._composition import Splitting
from ._registry import STEPPERS
from ._rkn import NystromTableau
from ._tableau import ButcherTableau

COEFFICIENTS = ("A", "b", "c", "bbar", "drifts", "kicks")
"""The coefficients a :class:`Tableau` takes, by kind: ``A, b[, c]``; ``A, bbar, b, c``; ``drifts, kicks``."""

VALUES = (ButcherTableau, NystromTableau, Splitting)


def coefficients_value(
    A: Any = None, b: Any = None, c: Any = None, bbar: Any = None, drifts: Any = None, kicks: Any = None
) -> ButcherTableau | NystromTableau | Splitting:
    """The coefficient value the given coefficients make (velocity Verlet when none are given); a one-line
    ValueError for anything inconsistent (coefficients of two kinds, lengths that do not match, a non-explicit
    ``A``, order 0)."""
    given = {key: value for key, value in zip(COEFFICIENTS, (A, b, c, bbar, drifts, kicks)) if value is not None}
    if not given:
        return Splitting(drifts=(0, 1), kicks=(0.5, 0.5))
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
        return Splitting(drifts, kicks)
    if A is None or b is None:
        raise ValueError(f"a Runge–Kutta tableau needs A and b (got {', '.join(given)}).")
    if bbar is not None:
        return NystromTableau(A, bbar, b, c)
    return ButcherTableau(A, b, c)


class Tableau(AbstractStepper):
    """A scheme given by its coefficients (see the module docstring): its claims are those they derive."""

    def __init__(
        self,
        A: Any = None,
        b: Any = None,
        c: Any = None,
        bbar: Any = None,
        drifts: Any = None,
        kicks: Any = None,
    ):
        super().__init__()
        self.tableau = coefficients_value(A, b, c, bbar, drifts, kicks)
        self._claims = replace(self.tableau.claims, **stated(self, Tableau))

    @property
    def derived(self) -> Any:
        """What the order conditions say (``derived.message()``: the order, and the first condition beyond it)."""
        return self.tableau.derived

    def claims(self, field: Any = None) -> Claims:
        return self._claims

    def describe(self) -> dict[str, Any]:
        """The coefficients and the derived claims, as plain values (what a run's summary records)."""
        return self.tableau.describe()

    def step(self, field, t, y, dt, state):
        return self.tableau.step(field, t, self._unpack(y), dt, state)

    def extra_repr(self) -> str:
        return repr(self.tableau)


def tableau(
    A: Any = None, b: Any = None, c: Any = None, bbar: Any = None, drifts: Any = None, kicks: Any = None
) -> Tableau:
    """The stepper of coefficients, their claims derived (:class:`Tableau`): ``A, b`` (and ``c``, default the row sums
    of ``A``) for an explicit Runge–Kutta method; ``A, bbar, b, c`` for a Runge–Kutta–Nyström one (``A`` is ``Ā``);
    ``drifts, kicks`` for a kick–drift splitting. Coefficients are numbers or strings such as ``"1/3"``."""
    return Tableau(A, b, c, bbar, drifts, kicks)


class _Tableaux(Mapping):
    """The registered schemes given by coefficients, by name: a view of :data:`solvers.STEPPERS`."""

    def _items(self) -> dict[str, type[AbstractStepper]]:
        return {name: cls for name, cls in STEPPERS.items() if isinstance(getattr(cls, "tableau", None), VALUES)}

    def __getitem__(self, name: str) -> type[AbstractStepper]:
        return self._items()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items())

    def __len__(self) -> int:
        return len(self._items())

    def __repr__(self) -> str:
        return f"TABLEAUX({', '.join(self)})"


TABLEAUX: Mapping[str, type[AbstractStepper]] = _Tableaux()
"""The registered schemes given by coefficients (a view of :data:`solvers.STEPPERS`), each with its ``tableau``."""
