"""The splitting engine: a sequence of drifts and kicks for ``x'' = a(t, x)`` in, a stepper with derived claims out.

A step of size ``dt`` runs ``drift a₁, kick b₁, drift a₂, kick b₂, …`` (ending with a drift or a kick), where

    drift aᵢ:  x <- x + aᵢ dt v                       (the exact flow of x' = v, v' = 0)
    kick bᵢ:   v <- v + bᵢ dt a(t + Cᵢ dt, x)         (the exact flow of x' = 0, v' = a; Cᵢ = a₁ + … + aᵢ)

so each kick evaluates the force at the time its drifts have reached. Zero coefficients are skipped and neighbours
of one kind merge (``kick ½, drift 0, kick ½`` is one kick and costs one evaluation). A subclass gives ``drifts`` and
``kicks`` as class variables and gets its declarations from them when the class is made:

- ``symplectic``: always (a composition of exact flows of Hamiltonian pieces, each a symplectic map);
- ``symmetric``, and so ``reversible`` by ``step(−dt)``, when the merged sequence reads the same backwards;
- ``order``: the consistency conditions ``Σ aᵢ = 1`` and ``Σ bᵢ = 1`` (an inconsistent sequence is an error), then the
  Nyström-tree conditions of the Runge–Kutta–Nyström method the sequence is (stages at the kicks, ``cₖ = Cₖ``,
  ``āₖₗ = bₗ (cₖ − cₗ)``, ``b̄ₖ = bₖ (1 − cₖ)``; ``_order_conditions.py``), up to order 6;
- ``evals_per_step``: the kicks left after merging; ``fsal`` when the merged sequence starts and ends with a kick (the
  last force is the next step's first, reused when the next step has the same field).

Velocity Verlet is ``drifts = (0, 1)``, ``kicks = (½, ½)``; position Verlet ``drifts = (½, ½)``, ``kicks = (1,)``.
:meth:`Composition.from_coefficients` makes such a class at run time. Reference: Hairer, Lubich & Wanner, *Geometric
Numerical Integration*, §II.5 and §V.3; McLachlan & Quispel, *Splitting methods*, Acta Numerica 11 (2002).
"""

from __future__ import annotations

from typing import Any, ClassVar

from torch import Tensor

from ._base import AbstractStepper, PhaseState, axpy
from ._order_conditions import Derived, parse_vector, rkn_order
from ._tableau import _same_time, _Stage, declare


def merged_sequence(drifts: Any, kicks: Any) -> tuple[tuple[str, float], ...]:
    """The step as ``(("drift", a), ("kick", b), ...)`` with zeros dropped and neighbours of one kind merged; a
    one-line ValueError for lengths that do not interleave or an inconsistent sequence."""
    a = parse_vector(drifts, "drifts")
    b = parse_vector(kicks, "kicks")
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
                f"the sequence is not consistent (order 0): Σ {label} = 1 is off by {abs(total - 1):.3g} "
                f"(the {label} sum to {total:.6g}), so a step does not advance {'x' if label == 'drifts' else 'v'} by "
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
    c, b, time = [], [], 0.0
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


class Composition(AbstractStepper, abstract=True):
    """A kick–drift splitting given by its coefficients (see the module docstring)."""

    drifts: ClassVar[tuple[float, ...]]
    kicks: ClassVar[tuple[float, ...]]
    second_order: ClassVar[bool] = True
    derived: ClassVar[Derived]

    def __init_subclass__(cls, abstract: bool = False, **kwargs: Any) -> None:
        if not abstract:
            try:
                ops = merged_sequence(cls.drifts, cls.kicks)
            except ValueError as error:
                raise TypeError(f"{cls.__name__}: {error}") from None
            cls.drifts, cls.kicks = parse_vector(cls.drifts, "drifts"), parse_vector(cls.kicks, "kicks")
            cls.derived = rkn_order(*as_nystrom(ops))
            if cls.derived.order == 0:
                raise TypeError(f"{cls.__name__} is not consistent (order 0): {cls.derived.message()}.")
            symmetric = _palindrome(ops)
            kicks = sum(1 for kind, _ in ops if kind == "kick")
            fsal = kicks > 1 and ops[0][0] == "kick" and ops[-1][0] == "kick"
            declare(
                cls,
                {
                    "order": cls.derived.order,
                    "evals_per_step": kicks,
                    "fsal": fsal,
                    "symplectic": True,
                    "symmetric": symmetric,
                    "reversible": symmetric,
                },
                {
                    "order": cls.derived.message(),
                    "evals_per_step": f"it has {kicks} kicks after merging",
                    "fsal": "it does not start and end with a kick",
                    "symplectic": "",
                    "symmetric": "its sequence is not a palindrome",
                    "reversible": "its sequence is not a palindrome (not symmetric), and it has no inverse of its own",
                },
            )
            program, time = [], 0.0
            for kind, coefficient in ops:
                program.append((kind, coefficient, time))
                if kind == "drift":
                    time += coefficient
            cls._program = tuple(program)
        super().__init_subclass__(abstract=abstract, **kwargs)

    @classmethod
    def from_coefficients(cls, drifts: Any, kicks: Any, name: str = "Splitting") -> type[Composition]:
        """A new stepper class from drift and kick coefficients; a one-line ValueError for inconsistent ones."""
        ops = merged_sequence(drifts, kicks)
        derived = rkn_order(*as_nystrom(ops))
        if derived.order == 0:
            raise ValueError(f"the sequence is not consistent (order 0): {derived.message()}.")
        a, b = parse_vector(drifts, "drifts"), parse_vector(kicks, "kicks")
        doc = f"Kick–drift splitting with drifts {list(a)} and kicks {list(b)}."
        return type(name, (cls,), {"drifts": a, "kicks": b, "__doc__": doc, "__module__": cls.__module__})

    @classmethod
    def describe(cls) -> dict[str, Any]:
        """The coefficients and the derived claims, as plain values (what a run's summary records)."""
        return {
            "kind": "splitting",
            "drifts": list(cls.drifts),
            "kicks": list(cls.kicks),
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
        if self.fsal:
            return PhaseState(x, v), _Stage(field, t + dt, x, force)
        return PhaseState(x, v), state
