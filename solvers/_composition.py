"""The splitting engine: a sequence of drifts and kicks for ``x'' = a(t, x)`` as a value, and the stepper running it.

A step of size ``dt`` runs ``drift a₁, kick b₁, drift a₂, kick b₂, …`` (ending with a drift or a kick), where

    drift aᵢ:  x <- x + aᵢ dt v                       (the exact flow of x' = v, v' = 0)
    kick bᵢ:   v <- v + bᵢ dt a(t + Cᵢ dt, x)         (the exact flow of x' = 0, v' = a; Cᵢ = a₁ + … + aᵢ)

so each kick evaluates the force at the time its drifts have reached. Zero coefficients are skipped and neighbours
of one kind merge (``kick ½, drift 0, kick ½`` is one kick and costs one evaluation). :class:`Splitting` holds the
``drifts`` and ``kicks`` and what they imply, derived when it is made:

- ``symplectic``: always (a composition of exact flows of Hamiltonian pieces, each a symplectic map);
- ``symmetric``, and so ``reversible`` by ``step(−dt)``, when the merged sequence reads the same backwards;
- ``order``: the consistency conditions ``Σ aᵢ = 1`` and ``Σ bᵢ = 1`` (an inconsistent sequence is an error), then the
  Nyström-tree conditions of the Runge–Kutta–Nyström method the sequence is (stages at the kicks, ``cₖ = Cₖ``,
  ``āₖₗ = bₗ (cₖ − cₗ)``, ``b̄ₖ = bₖ (1 − cₖ)``; ``_order_conditions.py``);
- ``evals_per_step``: the kicks left after merging; ``fsal`` when the merged sequence starts and ends with a kick (the
  last force is the next step's first, reused when the next step has the same field).

Velocity Verlet is ``drifts = (0, 1)``, ``kicks = (½, ½)``; position Verlet ``drifts = (½, ½)``, ``kicks = (1,)``.
A named splitting is a subclass of :class:`Composition` holding its value (``tableau = Splitting(...)``); one with no
name is a :class:`~solvers.Tableau` instance. Reference: Hairer, Lubich & Wanner, *Geometric
Numerical Integration*, §II.5 and §V.3; McLachlan & Quispel, *Splitting methods*, Acta Numerica 11 (2002).
"""

from __future__ import annotations

from typing import Any, ClassVar

from torch import Tensor

from ._base import AbstractStepper, Claims, PhaseState, axpy
from ._order_conditions import parse_exact_vector, parse_vector, rkn_order
from ._tableau import _same_time, _Stage, engine_claims

YOSHIDA_W1 = 1 / (2 - 2 ** (1 / 3))
"""Yoshida's triple-jump weight ``w₁``; ``w₀ = 1 − 2 w₁ < 0`` (the middle step goes back): a symmetric composition
``w₁, w₀, w₁`` of a symmetric order-2 method has order 4 (Yoshida, Phys. Lett. A 150 (1990))."""


def merged_sequence(drifts: Any, kicks: Any) -> tuple[tuple[str, float], ...]:
    """The step as ``(("drift", a), ("kick", b), ...)`` with zeros dropped and neighbours of one kind merged; a
    one-line ValueError for lengths that do not interleave or an inconsistent sequence."""
    a = parse_exact_vector(drifts, "drifts")  # as given: "1/2" and ints exact, so the conditions are checked exactly
    b = parse_exact_vector(kicks, "kicks")
    if len(a) not in (len(b), len(b) + 1):
        raise ValueError(
            f"{len(a)} drifts and {len(b)} kicks do not interleave: drift a₁, kick b₁, drift a₂, … has as many "
            "drifts as kicks (ending with a kick) or one more (ending with a drift); start with a drift of 0 to "
            "begin with a kick."
        )
    for label, values in (("drifts", a), ("kicks", b)):
        total = sum(values)
        if abs(total - 1) > 1e-12 * (1 + sum(abs(x) for x in values)):
            raise ValueError(
                f"the sequence is not consistent (order 0): Σ {label} = 1 is off by {float(abs(total - 1)):.3g} "
                f"(the {label} sum to {float(total):.6g}), so a step does not advance "
                f"{'x' if label == 'drifts' else 'v'} by "
                "dt times its derivative."
            )
    ops: list[list] = []
    for i, value in enumerate(a):
        for kind, coefficient in (("drift", value), *((("kick", b[i]),) if i < len(b) else ())):
            if coefficient == 0:
                continue
            if ops and ops[-1][0] == kind:
                ops[-1][1] += coefficient
            else:
                ops.append([kind, coefficient])
    return tuple((kind, coefficient) for kind, coefficient in ops if coefficient != 0)


def as_nystrom(ops: tuple[tuple[str, float], ...]) -> tuple:
    """The Runge–Kutta–Nyström tableau ``(Ā, b̄, b, c)`` of a merged sequence whose drifts sum to one."""
    c, b, time = [], [], 0
    for kind, coefficient in ops:
        if kind == "drift":
            time += coefficient
        else:
            c.append(time)
            b.append(coefficient)
    A = tuple(tuple(b[j] * (c[k] - c[j]) for j in range(k)) for k in range(len(b)))
    bbar = tuple(bk * (1 - ck) for bk, ck in zip(b, c))
    return A, bbar, tuple(b), tuple(c)


def _palindrome(ops: tuple[tuple[str, float], ...]) -> bool:
    return all(
        kind == back_kind and abs(value - back) <= 1e-12 * (1 + abs(value))
        for (kind, value), (back_kind, back) in zip(ops, reversed(ops))
    )


class Splitting:
    """A kick–drift splitting as a value: its ``drifts`` and ``kicks`` and the claims they imply (module docstring)."""

    kind = "splitting"

    def __init__(self, drifts: Any, kicks: Any):
        ops = merged_sequence(drifts, kicks)
        self.exact = parse_exact_vector(drifts, "drifts"), parse_exact_vector(kicks, "kicks")  # as given
        self.drifts, self.kicks = parse_vector(drifts, "drifts"), parse_vector(kicks, "kicks")
        self.derived = rkn_order(*as_nystrom(ops))
        if self.derived.order == 0:
            raise ValueError(f"the sequence is not consistent (order 0): {self.derived.message()}.")
        symmetric = _palindrome(ops)
        self._kicks = sum(1 for kind, _ in ops if kind == "kick")
        fsal = self._kicks > 1 and ops[0][0] == "kick" and ops[-1][0] == "kick"
        self.claims = Claims(
            order=self.derived.order, second_order=True, symplectic=True, reversible=symmetric,
            evals_per_step=self._kicks, fsal=fsal, symmetric=symmetric,
        )  # fmt: skip
        program, time = [], 0.0
        for kind, coefficient in ops:
            program.append((kind, float(coefficient), float(time)))
            if kind == "drift":
                time += coefficient
        self._program = tuple(program)

    def _reasons(self) -> dict[str, str]:
        return {
            "order": self.derived.message(),
            "evals_per_step": f"it has {self._kicks} kicks after merging",
            "fsal": "it does not start and end with a kick",
            "symmetric": "its sequence is not a palindrome",
            "reversible": "its sequence is not a palindrome (not symmetric), and it has no inverse of its own",
        }

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Splitting) and (self.drifts, self.kicks) == (other.drifts, other.kicks)

    def __hash__(self) -> int:
        return hash((self.drifts, self.kicks))

    def __repr__(self) -> str:
        return f"Splitting(drifts={list(self.drifts)}, kicks={list(self.kicks)})"

    def describe(self) -> dict[str, Any]:
        """The coefficients and the derived claims, as plain values (what a run's summary records)."""
        claims = self.claims
        return {
            "kind": self.kind,
            "drifts": list(self.drifts),
            "kicks": list(self.kicks),
            "order": claims.order,
            "order_conditions": self.derived.message(),
            "evals_per_step": claims.evals_per_step,
            "fsal": claims.fsal,
            "symplectic": claims.symplectic,
            "reversible": claims.reversible,
            "symmetric": claims.symmetric,
        }

    def step(self, field: Any, t: Any, y: PhaseState, dt: Any, state: Any) -> tuple[PhaseState, Any]:
        """One step from ``y = (x, v)``; ``state`` the last force kept for first-same-as-last reuse, or ``None``."""
        x, v = y
        force: Tensor | None = None
        for index, (kind, coefficient, time) in enumerate(self._program):
            if kind == "drift":
                x = axpy(x, coefficient * dt, v)
                continue
            if index == 0 and state is not None and state.field is field and state.x is x and _same_time(state.t, t):
                force = state.k  # first same as last
            else:
                force = field(t + time * dt if time else t, x)
            v = axpy(v, coefficient * dt, force)
        if self.claims.fsal:
            return PhaseState(x, v), _Stage(field, t + dt, x, force)
        return PhaseState(x, v), state


class Composition(AbstractStepper, abstract=True):
    """A kick–drift splitting: a subclass holds its :class:`Splitting` (see the module docstring)."""

    tableau: ClassVar[Splitting]

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
