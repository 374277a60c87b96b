"""The explicit Runge–Kutta engine: a Butcher tableau ``(A, b, c)`` as a value, and the stepper that runs one.

``kᵢ = f(t + cᵢ dt, x + dt Σⱼ₍ⱼ₍ᵢ₎ aᵢⱼ kⱼ)``, ``x₁ = x + dt Σᵢ bᵢ kᵢ``. :class:`ButcherTableau` holds the coefficients
and what they imply, derived when it is made:

- ``order`` from the rooted-tree order conditions (``_order_conditions.py``, up to order 9; exactly when the
  coefficients are exact: ints, Fractions, strings such as ``"1/6"``); inconsistent coefficients (order 0) are
  a one-line ValueError naming the first failing condition (``Σ bᵢ = 1 is off by 0.5``);
- ``evals_per_step`` = the number of stages;
- ``fsal`` when the last stage is the next step's first (``c_s = 1``, the last row of ``A`` equal to ``b``, to a
  rounding for float coefficients): the
  step keeps that evaluation in ``state`` and the next step, on the same field, reuses it;
- never ``symplectic`` nor ``reversible`` (no explicit Runge–Kutta method is: its symplecticity condition
  ``bᵢaᵢⱼ + bⱼaⱼᵢ = bᵢbⱼ`` at ``i = j`` asks ``bᵢ = 0``).

A named method is a short subclass of :class:`RungeKutta` holding its tableau, whose claims the engine derives::

    class Ralston(RungeKutta):
        tableau = ButcherTableau(A=((), (2 / 3,)), b=(1 / 4, 3 / 4))

A claim the subclass states itself is checked against the tableau when the class is made (a TypeError when it
claims more than the coefficients give). Coefficients with no name are a :class:`~solvers.Tableau` instance.
``c`` defaults to the row sums of ``A``; a ``c`` that differs from them is an error (stages at other times would
make the method's order on time-dependent problems that of its autonomous conditions no longer). The step touches
only the nonzero coefficients, each with one fused ``x + α k`` kernel.
Reference: Hairer, Nørsett & Wanner, *Solving ODEs I*, §II.1–II.2.
"""

from __future__ import annotations

from typing import Any, ClassVar, NamedTuple

import torch
from torch import Tensor

from ._base import CLAIMS, AbstractStepper, Claims, axpy
from ._order_conditions import parse_exact_vector, parse_vector, rk_fsal, rk_order


class _Stage(NamedTuple):
    field: Any
    t: Any
    x: Tensor
    k: Tensor


def _same_time(a: Any, b: Any) -> bool:
    """Whether two step times are the same: by value, also where either is a tensor (the loop over depth computes
    each step's ``t`` afresh, so a 0-d tensor time or step size never gives back the object a step returned)."""
    if a is b:
        return True
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        return a == b
    with torch.no_grad():
        a, b = torch.as_tensor(a), torch.as_tensor(b)
        return a.shape == b.shape and a.device == b.device and bool((a == b).all())


def validate_rk(A: Any, b: Any, c: Any = None, exact: bool = False) -> tuple[tuple[tuple, ...], tuple, tuple]:
    """``(A, b, c)`` as tuples of floats (``exact``: each coefficient as given, ``"1/6"`` and ints as Fractions),
    ``A`` given by its strictly lower rows (``A[i]`` has ``i`` entries, or ``s`` with zeros on and above the
    diagonal); a one-line ValueError for anything inconsistent."""
    parse = parse_exact_vector if exact else parse_vector
    if isinstance(A, (str, bytes)):
        raise ValueError(f"A must be a list of rows, got {A!r}.")
    try:
        rows = [parse(row, f"A[{i}]") for i, row in enumerate(A)]
    except TypeError:
        raise ValueError(f"A must be a list of rows, got {A!r}.") from None
    weights = parse(b, "b")
    s = len(weights)
    if s == 0:
        raise ValueError("b is empty: a tableau has at least one stage.")
    if len(rows) != s:
        raise ValueError(
            f"A has {len(rows)} rows but b has {s} entries: A is s × s (or its lower triangle) for s stages."
        )
    lower = []
    for i, row in enumerate(rows):
        if len(row) not in (i, s):
            raise ValueError(f"A[{i}] has {len(row)} entries; row {i} of an explicit {s}-stage A has {i} (or {s}).")
        if len(row) == s and any(x != 0 for x in row[i:]):
            j = next(j for j in range(i, s) if row[j] != 0)
            raise ValueError(
                f"A is not explicit: a{i + 1}{j + 1} = {float(row[j]):g} is on or above the diagonal (an implicit "
                "stage); "
                "explicit methods have a strictly lower-triangular A."
            )
        lower.append(tuple(row[:i]))
    sums = tuple(sum(row) for row in lower)
    if c is None:
        return tuple(lower), weights, sums
    times = parse(c, "c")
    if len(times) != s:
        raise ValueError(f"c has {len(times)} entries but b has {s}: one time per stage.")
    for i, (ci, si) in enumerate(zip(times, sums)):
        if abs(ci - si) > 1e-12 * (1 + abs(si)):
            raise ValueError(
                f"c{i + 1} = {float(ci):g} is not the row sum Σⱼ a{i + 1}ⱼ = {float(si):g}: each stage sits at the "
                "time its increments reach (leave c out to have it computed)."
            )
    return tuple(lower), weights, times


def declare(cls: type, claims: Claims, reasons: dict[str, str]) -> None:
    """Set each claim a tableau derives on ``cls``, or check the one ``cls`` states itself (a one-line TypeError when
    it claims more than its coefficients give)."""
    for key in CLAIMS:
        value = getattr(claims, key)
        if key not in cls.__dict__:
            setattr(cls, key, value)
            continue
        claimed = cls.__dict__[key]
        if key in ("order", "evals_per_step") and (not isinstance(claimed, int) or isinstance(claimed, bool)):
            raise TypeError(
                f"{cls.__name__} declares {key} = {claimed!r}; it must be an int (its coefficients give {value})."
            )
        if key == "order" and claimed > value or key not in ("order", "startup_evals") and bool(claimed) and not value:
            raise TypeError(
                f"{cls.__name__} declares {key} = {claimed!r}, but "
                f"{reasons.get(key, 'its coefficients do not give it')}."
            )
        if key == "evals_per_step" and claimed != value:
            raise TypeError(f"{cls.__name__} declares evals_per_step = {claimed}, but {reasons[key]}.")


class ButcherTableau:
    """An explicit Runge–Kutta tableau as a value: the coefficients, and the claims they imply (module docstring).

    ``A`` is given by its strictly lower rows (``A[i]`` has ``i`` entries, or ``s`` with zeros on and above the
    diagonal); coefficients are numbers or strings such as ``"1/3"``; anything inconsistent is a one-line ValueError.
    """

    kind = "runge_kutta"

    def __init__(self, A: Any, b: Any, c: Any = None):
        self.exact = validate_rk(A, b, c, exact=True)  # as given: the order conditions are checked on these
        self.A, self.b, self.c = validate_rk(A, b, c)  # floats: what a step computes with
        self.derived = rk_order(*self.exact)
        if self.derived.order == 0:
            raise ValueError(f"the tableau is not consistent (order 0): {self.derived.message()}.")
        s = len(self.b)
        fsal = rk_fsal(*self.exact)
        self.claims = Claims(
            order=self.derived.order, second_order=False, symplectic=False, reversible=False, evals_per_step=s,
            fsal=fsal,
        )  # fmt: skip
        self._rows = tuple(tuple((j, a) for j, a in enumerate(row) if a != 0) for row in self.A)
        self._weights = tuple((j, w) for j, w in enumerate(self.b) if w != 0)

    reasons: ClassVar[dict[str, str]] = {
        "fsal": "its last stage is not the next step's first",
        "symplectic": "no explicit Runge–Kutta method is (bᵢaᵢⱼ + bⱼaⱼᵢ = bᵢbⱼ at i = j asks bᵢ = 0)",
        "reversible": "no explicit Runge–Kutta method is (bᵢaᵢⱼ + bⱼaⱼᵢ = bᵢbⱼ at i = j asks bᵢ = 0)",
    }

    def _reasons(self) -> dict[str, str]:
        return {**self.reasons, "order": self.derived.message(), "evals_per_step": f"it has {len(self.b)} stages"}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ButcherTableau) and (self.A, self.b, self.c) == (other.A, other.b, other.c)

    def __hash__(self) -> int:
        return hash((self.A, self.b, self.c))

    def __repr__(self) -> str:
        return f"ButcherTableau(A={[list(r) for r in self.A]}, b={list(self.b)}, c={list(self.c)})"

    def describe(self) -> dict[str, Any]:
        """The coefficients and the derived claims, as plain values (what a run's summary records)."""
        claims = self.claims
        return {
            "kind": self.kind,
            "A": [list(row) for row in self.A],
            "b": list(self.b),
            "c": list(self.c),
            "order": claims.order,
            "order_conditions": self.derived.message(),
            "evals_per_step": claims.evals_per_step,
            "fsal": claims.fsal,
            "symplectic": claims.symplectic,
            "reversible": claims.reversible,
        }

    def step(self, field: Any, t: Any, x: Tensor, dt: Any, state: Any) -> tuple[Tensor, Any]:
        """One step from ``x`` (a Tensor); ``state`` the last stage kept for first-same-as-last reuse, or ``None``."""
        c = self.c
        ks: list[Tensor] = []
        for i, row in enumerate(self._rows):
            if i == 0 and state is not None and state.field is field and state.x is x and _same_time(state.t, t):
                ks.append(state.k)  # first same as last
                continue
            xi = x
            for j, a in row:
                xi = axpy(xi, a * dt, ks[j])
            ks.append(field(t + c[i] * dt if c[i] else t, xi))
        if self.claims.fsal:  # the last stage's input is x1 itself
            return xi, _Stage(field, t + dt, xi, ks[-1])
        x1 = x
        for j, w in self._weights:
            x1 = axpy(x1, w * dt, ks[j])
        return x1, state


def engine_claims(cls: type, tableau: Any) -> None:
    """What a named tableau's class claims: its tableau's derived claims, as class variables (those it states itself
    checked against them)."""
    if tableau is None:
        raise TypeError(f"{cls.__name__} gives no tableau: set tableau = ... in its body (or mark it abstract=True).")
    declare(cls, tableau.claims, tableau._reasons())


class RungeKutta(AbstractStepper, abstract=True):
    """An explicit Runge–Kutta method: a subclass holds its :class:`ButcherTableau` (see the module docstring)."""

    tableau: ClassVar[ButcherTableau]

    def __init_subclass__(cls, abstract: bool = False, **kwargs: Any) -> None:
        if not abstract:
            engine_claims(cls, getattr(cls, "tableau", None))
        super().__init_subclass__(abstract=abstract, **kwargs)

    @classmethod
    def describe(cls) -> dict[str, Any]:
        """The coefficients and the derived claims, as plain values (what a run's summary records)."""
        return cls.tableau.describe()

    def step(self, field, t, y, dt, state):
        return self.tableau.step(field, t, self._unpack(y), dt, state)
