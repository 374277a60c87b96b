"""The explicit Runge–Kutta–Nyström engine for ``x'' = a(t, x)``: a tableau ``(c, Ā, b̄, b)`` in, a stepper out.

``kᵢ = a(t + cᵢ dt, x + cᵢ dt v + dt² Σⱼ₍ⱼ₍ᵢ₎ āᵢⱼ kⱼ)``, ``x₁ = x + dt v + dt² Σ b̄ᵢ kᵢ``, ``v₁ = v + dt Σ bᵢ kᵢ``.
One evaluation per stage, no first-order rewrite (the velocity never enters a stage through a force), which is what
makes these methods cheaper than Runge–Kutta on the doubled system. A subclass gives ``A`` (``Ā``, by its strictly
lower rows), ``bbar``, ``b`` and ``c`` and gets its declarations from them when the class is made:

- ``order`` from the Nyström-tree order conditions (``_order_conditions.py``, up to order 6), a TypeError naming the
  first failing condition when a declared order is not reached;
- ``symplectic`` from the symplecticity conditions ``b̄ᵢ = bᵢ (1 − cᵢ)``, ``bᵢ (b̄ⱼ − āᵢⱼ) = bⱼ (b̄ᵢ − āⱼᵢ)``
  (Hairer, Lubich & Wanner, *Geometric Numerical Integration*, §VI.4; Suris 1989, Okunbor & Skeel 1992);
- ``symmetric`` (and so ``reversible``, undone by ``step(−dt)``) when the method is its own adjoint with its stages
  reversed;
- ``evals_per_step`` = the stages; ``fsal`` when the last stage sits at ``x₁`` (``c_s = 1``, its row of ``Ā`` equal
  to ``b̄``) and the first at ``x`` (``c₁ = 0``).

:meth:`RungeKuttaNystrom.from_coefficients` makes such a class at run time. Reference: Hairer, Nørsett & Wanner,
*Solving ODEs I*, §II.14.
"""

from __future__ import annotations

from typing import Any, ClassVar

from torch import Tensor

from ._base import AbstractStepper, PhaseState, axpy
from ._order_conditions import Derived, parse_vector, rkn_order, rkn_symmetric, rkn_symplectic_defect
from ._tableau import _same_time, _Stage, declare, validate_rk


def validate_rkn(A: Any, bbar: Any, b: Any, c: Any) -> tuple:
    """``(Ā, b̄, b, c)`` as tuples of floats, ``Ā`` strictly lower; a one-line ValueError for anything inconsistent."""
    if c is None:
        raise ValueError("c is missing: a Runge–Kutta–Nyström tableau gives each stage's time c (Ā, b̄, b and c).")
    times = parse_vector(c, "c")
    lower, weights, _ = validate_rk(A, b)
    if len(times) != len(weights):
        raise ValueError(f"c has {len(times)} entries but b has {len(weights)}: one time per stage.")
    position = parse_vector(bbar, "bbar")
    if len(position) != len(weights):
        raise ValueError(f"bbar has {len(position)} entries but b has {len(weights)}: one weight per stage.")
    return lower, position, weights, times


class RungeKuttaNystrom(AbstractStepper, abstract=True):
    """An explicit Runge–Kutta–Nyström method given by its tableau (see the module docstring)."""

    A: ClassVar[tuple[tuple[float, ...], ...]]
    bbar: ClassVar[tuple[float, ...]]
    b: ClassVar[tuple[float, ...]]
    c: ClassVar[tuple[float, ...]]
    second_order: ClassVar[bool] = True
    derived: ClassVar[Derived]

    def __init_subclass__(cls, abstract: bool = False, **kwargs: Any) -> None:
        if not abstract:
            try:
                A, bbar, b, c = validate_rkn(cls.A, cls.bbar, cls.b, getattr(cls, "c", None))
            except ValueError as error:
                raise TypeError(f"{cls.__name__}: {error}") from None
            cls.A, cls.bbar, cls.b, cls.c = A, bbar, b, c
            cls.derived = rkn_order(A, bbar, b, c)
            if cls.derived.order == 0:
                raise TypeError(f"{cls.__name__} is not consistent (order 0): {cls.derived.message()}.")
            defect, which = rkn_symplectic_defect(A, bbar, b, c)
            symplectic = defect <= 1e-12
            symmetric = rkn_symmetric(A, bbar, b, c)
            s = len(b)
            fsal = s > 1 and c[0] == 0 and c[-1] == 1 and A[-1] == bbar[:-1] and bbar[-1] == 0
            declare(
                cls,
                {
                    "order": cls.derived.order,
                    "evals_per_step": s,
                    "fsal": fsal,
                    "symplectic": symplectic,
                    "symmetric": symmetric,
                    "reversible": symmetric,
                },
                {
                    "order": cls.derived.message(),
                    "evals_per_step": f"it has {s} stages",
                    "fsal": "its last stage is not the next step's first",
                    "symplectic": f"its symplecticity condition {which} is off by {defect:.3g}",
                    "symmetric": "it is not its own adjoint with its stages reversed",
                    "reversible": "it is not symmetric, and has no inverse of its own",
                },
            )
            cls._rows = tuple(tuple((j, a) for j, a in enumerate(row) if a != 0) for row in A)
            cls._position = tuple((j, w) for j, w in enumerate(bbar) if w != 0)
            cls._velocity = tuple((j, w) for j, w in enumerate(b) if w != 0)
        super().__init_subclass__(abstract=abstract, **kwargs)

    @classmethod
    def from_coefficients(
        cls, A: Any, bbar: Any, b: Any, c: Any, name: str = "NystromTableau"
    ) -> type[RungeKuttaNystrom]:
        """A new stepper class from coefficients; a one-line ValueError for inconsistent ones."""
        A, bbar, b, c = validate_rkn(A, bbar, b, c)
        derived = rkn_order(A, bbar, b, c)
        if derived.order == 0:
            raise ValueError(f"the tableau is not consistent (order 0): {derived.message()}.")
        rows = [list(r) for r in A]
        doc = f"Explicit Runge–Kutta–Nyström tableau Ā = {rows}, b̄ = {list(bbar)}, b = {list(b)}, c = {list(c)}."
        return type(name, (cls,), {"A": A, "bbar": bbar, "b": b, "c": c, "__doc__": doc, "__module__": cls.__module__})

    @classmethod
    def describe(cls) -> dict[str, Any]:
        """The coefficients and the derived claims, as plain values (what a run's summary records)."""
        return {
            "kind": "runge_kutta_nystrom",
            "A": [list(row) for row in cls.A],
            "bbar": list(cls.bbar),
            "b": list(cls.b),
            "c": list(cls.c),
            "order": cls.order,
            "order_conditions": cls.derived.message(),
            "evals_per_step": cls.evals_per_step,
            "fsal": cls.fsal,
            "symplectic": cls.symplectic,
            "reversible": cls.reversible,
            "symmetric": cls.symmetric,
        }

    def step(self, field, t, y, dt, state):
        x, v = self._unpack(y)
        c, h2 = self.c, dt * dt
        ks: list[Tensor] = []
        for i, row in enumerate(self._rows):
            if i == 0 and state is not None and state.field is field and state.x is x and _same_time(state.t, t):
                ks.append(state.k)  # first same as last
                continue
            xi = axpy(x, c[i] * dt, v) if c[i] else x
            for j, a in row:
                xi = axpy(xi, a * h2, ks[j])
            ks.append(field(t + c[i] * dt if c[i] else t, xi))
        if self.fsal:  # the last stage's input is x1 itself
            x1 = xi
        else:
            x1 = axpy(x, dt, v)
            for j, w in self._position:
                x1 = axpy(x1, w * h2, ks[j])
        v1 = v
        for j, w in self._velocity:
            v1 = axpy(v1, w * dt, ks[j])
        return PhaseState(x1, v1), (_Stage(field, t + dt, x1, ks[-1]) if self.fsal else state)
