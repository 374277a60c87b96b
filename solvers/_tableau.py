"""The explicit Runge–Kutta engine: a Butcher tableau ``(A, b, c)`` in, a stepper with derived claims out.

``kᵢ = f(t + cᵢ dt, x + dt Σⱼ₍ⱼ₍ᵢ₎ aᵢⱼ kⱼ)``, ``x₁ = x + dt Σᵢ bᵢ kᵢ``. A subclass gives the coefficients as class
variables and gets its declarations from them when the class is made:

- ``order`` from the rooted-tree order conditions (``_order_conditions.py``, up to order 6); a subclass that
  declares an order its coefficients do not reach is a TypeError naming the first failing condition and by how much
  (``order conditions hold to order 2; Σ bᵢcᵢ² = 1/3 is off by 0.02``);
- ``evals_per_step`` = the number of stages;
- ``fsal`` when the last stage is the next step's first (``c_s = 1``, the last row of ``A`` equal to ``b``): the
  step keeps that evaluation in ``state`` and the next step, on the same field, reuses it;
- never ``symplectic`` nor ``reversible`` (no explicit Runge–Kutta method is: its symplecticity condition
  ``bᵢaᵢⱼ + bⱼaⱼᵢ = bᵢbⱼ`` at ``i = j`` asks ``bᵢ = 0``); declaring either is a TypeError.

::

    class Ralston(RungeKutta):
        A = ((), (2 / 3,))
        b = (1 / 4, 3 / 4)

``c`` defaults to the row sums of ``A``; a ``c`` that differs from them is an error (stages at other times would
make the method's order on time-dependent problems that of its autonomous conditions no longer).
:meth:`RungeKutta.from_coefficients` makes such a class at run time (what ``solver=tableau solver.options.A=...``
does). The step touches only the nonzero coefficients, each with one fused ``x + α k`` kernel.
Reference: Hairer, Nørsett & Wanner, *Solving ODEs I*, §II.1–II.2.
"""

from __future__ import annotations

from typing import Any, ClassVar, NamedTuple

from torch import Tensor

from ._base import AbstractStepper, axpy
from ._order_conditions import Derived, parse_vector, rk_order


class _Stage(NamedTuple):
    field: Any
    t: Any
    x: Tensor
    k: Tensor


def _same_time(a: Any, b: Any) -> bool:
    return a is b or (not isinstance(a, Tensor) and not isinstance(b, Tensor) and a == b)


def validate_rk(A: Any, b: Any, c: Any = None) -> tuple[tuple[tuple[float, ...], ...], tuple[float, ...], tuple]:
    """``(A, b, c)`` as tuples of floats, ``A`` given by its strictly lower rows (``A[i]`` has ``i`` entries, or ``s``
    with zeros on and above the diagonal); a one-line ValueError for anything inconsistent."""
    if isinstance(A, (str, bytes)):
        raise ValueError(f"A must be a list of rows, got {A!r}.")
    try:
        rows = [parse_vector(row, f"A[{i}]") for i, row in enumerate(A)]
    except TypeError:
        raise ValueError(f"A must be a list of rows, got {A!r}.") from None
    weights = parse_vector(b, "b")
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
                f"A is not explicit: a{i + 1}{j + 1} = {row[j]:g} is on or above the diagonal (an implicit stage); "
                "explicit methods have a strictly lower-triangular A."
            )
        lower.append(tuple(row[:i]))
    sums = tuple(sum(row) for row in lower)
    if c is None:
        return tuple(lower), weights, sums
    times = parse_vector(c, "c")
    if len(times) != s:
        raise ValueError(f"c has {len(times)} entries but b has {s}: one time per stage.")
    for i, (ci, si) in enumerate(zip(times, sums)):
        if abs(ci - si) > 1e-12 * (1 + abs(si)):
            raise ValueError(
                f"c{i + 1} = {ci:g} is not the row sum Σⱼ a{i + 1}ⱼ = {si:g}: each stage sits at the time its "
                "increments reach (leave c out to have it computed)."
            )
    return tuple(lower), weights, times


def declare(cls: type, derived: dict[str, Any], reasons: dict[str, str]) -> None:
    """Set each derived declaration on ``cls``, or check the one ``cls`` states itself (a one-line TypeError when it
    claims more than its coefficients give)."""
    for key, value in derived.items():
        if key not in cls.__dict__:
            setattr(cls, key, value)
            continue
        claimed = cls.__dict__[key]
        if key == "order" and claimed > value or key != "order" and bool(claimed) and not value:
            raise TypeError(f"{cls.__name__} declares {key} = {claimed!r}, but {reasons[key]}.")
        if key == "evals_per_step" and claimed != value:
            raise TypeError(f"{cls.__name__} declares evals_per_step = {claimed}, but {reasons[key]}.")


class RungeKutta(AbstractStepper, abstract=True):
    """An explicit Runge–Kutta method given by its tableau (see the module docstring)."""

    A: ClassVar[tuple[tuple[float, ...], ...]]
    b: ClassVar[tuple[float, ...]]
    c: ClassVar[tuple[float, ...] | None] = None
    second_order: ClassVar[bool] = False
    derived: ClassVar[Derived]

    def __init_subclass__(cls, abstract: bool = False, **kwargs: Any) -> None:
        if not abstract:
            try:
                A, b, c = validate_rk(cls.A, cls.b, cls.c)
            except ValueError as error:
                raise TypeError(f"{cls.__name__}: {error}") from None
            cls.A, cls.b, cls.c = A, b, c
            cls.derived = rk_order(A, b, c)
            if cls.derived.order == 0:
                raise TypeError(f"{cls.__name__} is not consistent (order 0): {cls.derived.message()}.")
            s = len(b)
            fsal = s > 1 and c[-1] == 1 and A[-1] == b[:-1] and b[-1] == 0
            never = "no explicit Runge–Kutta method is (bᵢaᵢⱼ + bⱼaⱼᵢ = bᵢbⱼ at i = j asks bᵢ = 0)"
            declare(
                cls,
                {
                    "order": cls.derived.order,
                    "evals_per_step": s,
                    "fsal": fsal,
                    "symplectic": False,
                    "reversible": False,
                },
                {
                    "order": cls.derived.message(),
                    "evals_per_step": f"it has {s} stages",
                    "fsal": "its last stage is not the next step's first",
                    "symplectic": never,
                    "reversible": never,
                },
            )
            cls._rows = tuple(tuple((j, a) for j, a in enumerate(row) if a != 0) for row in A)
            cls._weights = tuple((j, w) for j, w in enumerate(b) if w != 0)
        super().__init_subclass__(abstract=abstract, **kwargs)

    @classmethod
    def from_coefficients(cls, A: Any, b: Any, c: Any = None, name: str = "ButcherTableau") -> type[RungeKutta]:
        """A new stepper class from coefficients (lists of numbers or strings such as ``"1/3"``); a one-line
        ValueError for inconsistent ones (lengths, a non-explicit ``A``, stage times off the row sums, order 0)."""
        A, b, c = validate_rk(A, b, c)
        derived = rk_order(A, b, c)
        if derived.order == 0:
            raise ValueError(f"the tableau is not consistent (order 0): {derived.message()}.")
        doc = f"Explicit Runge–Kutta tableau A = {[list(r) for r in A]}, b = {list(b)}, c = {list(c)}."
        return type(name, (cls,), {"A": A, "b": b, "c": c, "__doc__": doc, "__module__": cls.__module__})

    @classmethod
    def describe(cls) -> dict[str, Any]:
        """The coefficients and the derived claims, as plain values (what a run's summary records)."""
        return {
            "kind": "runge_kutta",
            "A": [list(row) for row in cls.A],
            "b": list(cls.b),
            "c": list(cls.c),
            "order": cls.order,
            "order_conditions": cls.derived.message(),
            "evals_per_step": cls.evals_per_step,
            "fsal": cls.fsal,
            "symplectic": cls.symplectic,
            "reversible": cls.reversible,
        }

    def step(self, field, t, y, dt, state):
        x = self._unpack(y)
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
        if self.fsal:  # the last stage's input is x1 itself
            return xi, _Stage(field, t + dt, xi, ks[-1])
        x1 = x
        for j, w in self._weights:
            x1 = axpy(x1, w * dt, ks[j])
        return x1, state
