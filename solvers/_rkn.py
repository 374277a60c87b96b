"""The explicit Runge–Kutta–Nyström engine for ``x'' = a(t, x)``: a tableau ``(c, Ā, b̄, b)`` as a value, its stepper.

``kᵢ = a(t + cᵢ dt, x + cᵢ dt v + dt² Σⱼ₍ⱼ₍ᵢ₎ āᵢⱼ kⱼ)``, ``x₁ = x + dt v + dt² Σ b̄ᵢ kᵢ``, ``v₁ = v + dt Σ bᵢ kᵢ``.
One evaluation per stage, no first-order rewrite (the velocity never enters a stage through a force), which is what
makes these methods cheaper than Runge–Kutta on the doubled system. :class:`NystromTableau` holds ``A`` (``Ā``, by
its strictly lower rows), ``bbar``, ``b`` and ``c`` and what they imply, derived when it is made:

- ``order`` from the Nyström-tree order conditions (``_order_conditions.py``, up to order 9, exactly for exact
  coefficients); inconsistent coefficients are a
  one-line ValueError naming the first failing condition;
- ``symplectic`` from the symplecticity conditions ``b̄ᵢ = bᵢ (1 − cᵢ)``, ``bᵢ (b̄ⱼ − āᵢⱼ) = bⱼ (b̄ᵢ − āⱼᵢ)``
  (Hairer, Lubich & Wanner, *Geometric Numerical Integration*, §VI.4; Suris 1989, Okunbor & Skeel 1992);
- ``symmetric`` (and so ``reversible``, undone by ``step(−dt)``) when the method is its own adjoint with its stages
  reversed;
- ``evals_per_step`` = the stages; ``fsal`` when the last stage sits at ``x₁`` (``c_s = 1``, its row of ``Ā`` equal
  to ``b̄``) and the first at ``x`` (``c₁ = 0``).

A named method is a subclass of :class:`RungeKuttaNystrom` holding its tableau (``tableau = NystromTableau(...)``);
coefficients with no name are a :class:`~solvers.Tableau` instance. Reference: Hairer, Nørsett & Wanner, *Solving
ODEs I*, §II.14.
"""

from __future__ import annotations

from typing import Any, ClassVar

from torch import Tensor

from ._base import AbstractStepper, Claims, PhaseState, axpy
from ._order_conditions import (
    parse_exact_vector,
    parse_vector,
    rkn_fsal,
    rkn_order,
    rkn_symmetric,
    rkn_symplectic_defect,
)
from ._tableau import _same_time, _Stage, engine_claims, validate_rk


def validate_rkn(A: Any, bbar: Any, b: Any, c: Any, exact: bool = False) -> tuple:
    """``(Ā, b̄, b, c)`` as tuples of floats (``exact``: as given, see :func:`~solvers._tableau.validate_rk`), ``Ā``
    strictly lower; a one-line ValueError for anything inconsistent."""
    if c is None:
        raise ValueError("c is missing: a Runge–Kutta–Nyström tableau gives each stage's time c (Ā, b̄, b and c).")
    parse = parse_exact_vector if exact else parse_vector
    times = parse(c, "c")
    lower, weights, _ = validate_rk(A, b, exact=exact)
    if len(times) != len(weights):
        raise ValueError(f"c has {len(times)} entries but b has {len(weights)}: one time per stage.")
    position = parse(bbar, "bbar")
    if len(position) != len(weights):
        raise ValueError(f"bbar has {len(position)} entries but b has {len(weights)}: one weight per stage.")
    return lower, position, weights, times


class NystromTableau:
    """An explicit Runge–Kutta–Nyström tableau as a value: ``Ā`` (``A``), ``b̄``, ``b``, ``c`` and their claims."""

    kind = "runge_kutta_nystrom"

    def __init__(self, A: Any, bbar: Any, b: Any, c: Any):
        self.exact = validate_rkn(A, bbar, b, c, exact=True)  # as given: the order conditions are checked on these
        self.A, self.bbar, self.b, self.c = A, bbar, b, c = validate_rkn(A, bbar, b, c)  # floats, for the step
        self.derived = rkn_order(*self.exact)
        if self.derived.order == 0:
            raise ValueError(f"the tableau is not consistent (order 0): {self.derived.message()}.")
        defect, self._which = rkn_symplectic_defect(A, bbar, b, c)
        self._defect = defect
        symmetric = rkn_symmetric(A, bbar, b, c)
        s = len(b)
        fsal = rkn_fsal(*self.exact)
        self.claims = Claims(
            order=self.derived.order, second_order=True, symplectic=defect <= 1e-12, reversible=symmetric,
            evals_per_step=s, fsal=fsal, symmetric=symmetric,
        )  # fmt: skip
        self._rows = tuple(tuple((j, a) for j, a in enumerate(row) if a != 0) for row in A)
        self._position = tuple((j, w) for j, w in enumerate(bbar) if w != 0)
        self._velocity = tuple((j, w) for j, w in enumerate(b) if w != 0)

    def _reasons(self) -> dict[str, str]:
        return {
            "order": self.derived.message(),
            "evals_per_step": f"it has {len(self.b)} stages",
            "fsal": "its last stage is not the next step's first",
            "symplectic": f"its symplecticity condition {self._which} is off by {self._defect:.3g}",
            "symmetric": "it is not its own adjoint with its stages reversed",
            "reversible": "it is not symmetric, and has no inverse of its own",
        }

    def _key(self) -> tuple:
        return (self.A, self.bbar, self.b, self.c)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NystromTableau) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        rows = [list(r) for r in self.A]
        return f"NystromTableau(A={rows}, bbar={list(self.bbar)}, b={list(self.b)}, c={list(self.c)})"

    def describe(self) -> dict[str, Any]:
        """The coefficients and the derived claims, as plain values (what a run's summary records)."""
        claims = self.claims
        return {
            "kind": self.kind,
            "A": [list(row) for row in self.A],
            "bbar": list(self.bbar),
            "b": list(self.b),
            "c": list(self.c),
            "order": claims.order,
            "order_conditions": self.derived.message(),
            "evals_per_step": claims.evals_per_step,
            "fsal": claims.fsal,
            "symplectic": claims.symplectic,
            "reversible": claims.reversible,
            "symmetric": claims.symmetric,
        }

    def step(self, field: Any, t: Any, y: PhaseState, dt: Any, state: Any) -> tuple[PhaseState, Any]:
        """One step from ``y = (x, v)``; ``state`` the last stage kept for first-same-as-last reuse, or ``None``."""
        x, v = y
        c, h2 = self.c, dt * dt
        fsal = self.claims.fsal
        ks: list[Tensor] = []
        for i, row in enumerate(self._rows):
            if i == 0 and state is not None and state.field is field and state.x is x and _same_time(state.t, t):
                ks.append(state.k)  # first same as last
                continue
            xi = axpy(x, c[i] * dt, v) if c[i] else x
            for j, a in row:
                xi = axpy(xi, a * h2, ks[j])
            ks.append(field(t + c[i] * dt if c[i] else t, xi))
        if fsal:  # the last stage's input is x1 itself
            x1 = xi
        else:
            x1 = axpy(x, dt, v)
            for j, w in self._position:
                x1 = axpy(x1, w * h2, ks[j])
        v1 = v
        for j, w in self._velocity:
            v1 = axpy(v1, w * dt, ks[j])
        return PhaseState(x1, v1), (_Stage(field, t + dt, x1, ks[-1]) if fsal else state)


class RungeKuttaNystrom(AbstractStepper, abstract=True):
    """An explicit Runge–Kutta–Nyström method: a subclass holds its :class:`NystromTableau` (module docstring)."""

    tableau: ClassVar[NystromTableau]

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
