"""Order conditions of explicit Runge–Kutta and Runge–Kutta–Nyström tableaux, from trees.

A Runge–Kutta method has order ``p`` iff ``Σ bᵢ Φᵢ(τ) = 1/γ(τ)`` for every rooted tree ``τ`` with at most ``p``
vertices (Butcher; Hairer, Nørsett & Wanner, *Solving ODEs I*, §II.2, Theorem 2.13). The elementary weight ``Φᵢ`` is
read off the tree: the root carries ``bᵢ``, a leaf child of a vertex with index ``i`` gives ``cᵢ``, any other child
``aᵢⱼ`` times the weight of its own subtree at ``j``. The right-hand side comes from the same recursion applied to the
exact flow, whose "stages" are the continuum ``θ ∈ [0, 1]`` (a leaf gives ``θ``, a subtree ``∫₀^θ``), so nothing is
looked up in a table. The stage times must be the row sums, ``cᵢ = Σⱼ aᵢⱼ``: then a time-dependent problem obeys the
same conditions as an autonomous one.

A Runge–Kutta–Nyström method for ``x'' = a(t, x)``,
``kᵢ = a(t + cᵢh, x + cᵢ h v + h² Σⱼ āᵢⱼ kⱼ)``, ``x₁ = x + h v + h² Σ b̄ᵢ kᵢ``, ``v₁ = v + h Σ bᵢ kᵢ``, has its own trees
(Hairer, Nørsett & Wanner, §II.14, "special Nyström trees"): every vertex is an evaluation of ``a``, each of its
children is either the velocity (a leaf, worth one) or another evaluation reached through ``āᵢⱼ`` (a vertex, worth
two). A tree of weight ``ρ`` gives the conditions ``Σ bᵢ Φᵢ = ∫₀¹ Φ(s) ds`` for ``ρ ≤ p + 1`` and
``Σ b̄ᵢ Φᵢ = ∫₀¹ (1 − s) Φ(s) ds`` for ``ρ ≤ p`` (again computed from the exact flow's continuum of stages). The stage
times need no condition: a time-dependent problem is the autonomous one with ``t'' = 0``, whose stages sit at
``t + cᵢ h`` exactly.

Symplecticity (Hairer, Lubich & Wanner, *Geometric Numerical Integration*, §VI.4): a Runge–Kutta–Nyström method is
symplectic if ``b̄ᵢ = bᵢ (1 − cᵢ)`` and ``bᵢ (b̄ⱼ − āᵢⱼ) = bⱼ (b̄ᵢ − āⱼᵢ)`` for all ``i, j`` (Suris; Okunbor & Skeel).
An explicit Runge–Kutta method never is (``bᵢaᵢⱼ + bⱼaⱼᵢ = bᵢbⱼ`` at ``i = j`` asks ``bᵢ = 0``).

Symmetry: a method is symmetric when it equals its adjoint ``Φ*_h = Φ_{−h}^{−1}``. The adjoint of a Runge–Kutta–Nyström
method has ``c* = 1 − c``, ``b* = b``, ``b̄* = b − b̄``, ``ā*ᵢⱼ = āᵢⱼ + bⱼ (1 − cᵢ) − b̄ⱼ``; the method is symmetric if the
adjoint is the method with its stages in reverse order.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import cache

MAX_ORDER = 6
"""Orders are derived up to this (a method whose conditions all hold here has order at least ``MAX_ORDER``)."""

_INDICES = "ᵢⱼₖₗₘₙₚᵣₛₜᵤᵥ"
_POWERS = {2: "²", 3: "³", 4: "⁴", 5: "⁵", 6: "⁶", 7: "⁷", 8: "⁸"}


@dataclass(frozen=True)
class Derived:
    """What a tableau's coefficients imply: its order, and the first condition beyond it that fails (``None`` when
    every condition up to :data:`MAX_ORDER` holds), with the sum the coefficients give."""

    order: int
    failing: str | None = None
    exact: Fraction | None = None
    value: float | None = None

    def message(self) -> str:
        """``"order conditions hold to order 2; Σ bᵢcᵢ² = 1/3 is off by 0.02"``."""
        if self.failing is None:
            return f"order conditions hold to order {self.order} (every one checked, up to order {MAX_ORDER})"
        off = self.value - float(self.exact)
        return (
            f"order conditions hold to order {self.order}; {self.failing} = {_fraction(self.exact)} "
            f"is off by {abs(off):.3g} (the coefficients give {self.value:.6g})"
        )


def _fraction(q: Fraction) -> str:
    return str(q.numerator) if q.denominator == 1 else f"{q.numerator}/{q.denominator}"


def _close(value: float, exact: float, scale: float) -> bool:
    return abs(value - exact) <= 1e-10 * (1.0 + scale)


# -- rooted trees (Runge–Kutta) -------------------------------------------------------------------------------------
# A tree is the sorted tuple of its children; the leaf is (). Sorting by (order, tuple) makes each tree canonical.


def _size(tree: tuple) -> int:
    return 1 + sum(_size(child) for child in tree)


def _key(tree: tuple) -> tuple:
    return (_size(tree), tuple(_key(child) for child in tree))


def _multisets(pool: Sequence[tuple], total: int, start: int = 0) -> list[tuple]:
    """Non-increasing (by position in ``pool``) selections from ``pool`` whose sizes sum to ``total``."""
    if total == 0:
        return [()]
    out = []
    for index in range(start, len(pool)):
        size = _size(pool[index])
        if size <= total:
            out += [(pool[index], *rest) for rest in _multisets(pool, total - size, index)]
    return out


@cache
def rooted_trees(order: int) -> tuple[tuple, ...]:
    """Every rooted tree with ``order`` vertices (1, 1, 2, 4, 9, 20, 48, ... of them)."""
    if order == 1:
        return ((),)
    pool = [tree for n in range(1, order) for tree in rooted_trees(n)]
    trees = {tuple(sorted(children, key=_key)) for children in _multisets(pool, order - 1)}
    return tuple(sorted(trees, key=_key))


def _rk_formula(tree: tuple, index: int = 0, head: str = "b") -> tuple[str, int]:
    """The elementary weight as text (``bᵢcᵢ²``, ``bᵢaᵢⱼcⱼ``) and the next free index."""
    me = _INDICES[index]
    leaves = sum(1 for child in tree if child == ())
    text = f"{head}{me}"
    if leaves:
        text += f"c{me}{_POWERS.get(leaves, '') if leaves > 1 else ''}"
    free = index + 1
    for child in tree:
        if child != ():
            part, free2 = _rk_formula(child, free, f"a{me}")
            text += part
            free = free2
    return text, free


def _rk_weights(tree: tuple, A: Sequence[Sequence[float]], c: Sequence[float]) -> list[float]:
    """``Φᵢ(τ)`` for every stage ``i``."""
    s = len(c)
    out = [1.0] * s
    for child in tree:
        if child == ():
            out = [out[i] * c[i] for i in range(s)]
        else:
            inner = _rk_weights(child, A, c)
            out = [out[i] * sum(A[i][j] * inner[j] for j in range(len(A[i]))) for i in range(s)]
    return out


@cache
def _rk_exact(tree: tuple) -> Fraction:
    """``1/γ(τ)``: the exact flow's weight ``κ θ^{|τ|−1}`` integrated over ``θ ∈ [0, 1]``."""
    return _rk_kappa(tree) / _size(tree)


@cache
def _rk_kappa(tree: tuple) -> Fraction:
    kappa = Fraction(1)
    for child in tree:
        kappa *= _rk_kappa(child) / _size(child)
    return kappa


def rk_conditions(order: int) -> list[tuple[str, tuple, Fraction]]:
    """The order conditions of ``order`` (trees with that many vertices): ``(text, tree, exact value)``."""
    return [(f"Σ {_rk_formula(tree)[0]}", tree, _rk_exact(tree)) for tree in rooted_trees(order)]


def rk_order(A: Sequence[Sequence[float]], b: Sequence[float], c: Sequence[float]) -> Derived:
    """The order of an explicit Runge–Kutta tableau (``A`` lower triangular, ``c`` its row sums), up to
    :data:`MAX_ORDER`, and the first failing condition."""
    for p in range(1, MAX_ORDER + 1):
        for text, tree, exact in rk_conditions(p):
            terms = [bi * phi for bi, phi in zip(b, _rk_weights(tree, A, c))]
            value = sum(terms)
            if not _close(value, float(exact), sum(abs(x) for x in terms)):
                return Derived(p - 1, text, exact, value)
    return Derived(MAX_ORDER)


# -- Nyström trees (Runge–Kutta–Nyström) ----------------------------------------------------------------------------
# A Nyström tree is (leaves, children): an evaluation of the force with ``leaves`` velocity arguments and the sorted
# tuple of its evaluation children. Weight: 2 per evaluation, 1 per velocity leaf.


def _weight(tree: tuple) -> int:
    leaves, children = tree
    return 2 + leaves + sum(_weight(child) for child in children)


def _nkey(tree: tuple) -> tuple:
    leaves, children = tree
    return (_weight(tree), leaves, tuple(_nkey(child) for child in children))


def _nmultisets(pool: Sequence[tuple], total: int, start: int = 0) -> list[tuple]:
    if total == 0:
        return [()]
    out = []
    for index in range(start, len(pool)):
        weight = _weight(pool[index])
        if weight <= total:
            out += [(pool[index], *rest) for rest in _nmultisets(pool, total - weight, index)]
    return out


@cache
def nystrom_trees(weight: int) -> tuple[tuple, ...]:
    """Every Nyström tree of ``weight`` (an evaluation counts two, a velocity leaf one)."""
    if weight < 2:
        return ()
    pool = [tree for w in range(2, weight - 1) for tree in nystrom_trees(w)]
    trees = set()
    for leaves in range(weight - 1):
        rest = weight - 2 - leaves
        for children in _nmultisets(pool, rest):
            trees.add((leaves, tuple(sorted(children, key=_nkey))))
    return tuple(sorted(trees, key=_nkey))


def _n_formula(tree: tuple, index: int = 0, head: str = "b") -> tuple[str, int]:
    me = _INDICES[index]
    leaves, children = tree
    text = f"{head}{me}"
    if leaves:
        text += f"c{me}{_POWERS.get(leaves, '') if leaves > 1 else ''}"
    free = index + 1
    for child in children:
        part, free = _n_formula(child, free, f"ā{me}")
        text += part
    return text, free


def _n_weights(tree: tuple, A: Sequence[Sequence[float]], c: Sequence[float]) -> list[float]:
    leaves, children = tree
    s = len(c)
    out = [c[i] ** leaves for i in range(s)]
    for child in children:
        inner = _n_weights(child, A, c)
        out = [out[i] * sum(A[i][j] * inner[j] for j in range(len(A[i]))) for i in range(s)]
    return out


@cache
def _n_kappa(tree: tuple) -> Fraction:
    """The exact flow's weight is ``κ θ^{ρ−2}``: a leaf gives ``θ``, a child ``∫₀^θ (θ − s) Φ(s) ds``."""
    _, children = tree
    kappa = Fraction(1)
    for child in children:
        e = _weight(child) - 2
        kappa *= _n_kappa(child) / ((e + 1) * (e + 2))
    return kappa


def rkn_conditions(weight: int) -> list[tuple[str, tuple, Fraction, str]]:
    """The conditions of order ``weight``: on ``b`` for trees of weight ``weight``, on ``b̄`` for weight
    ``weight − 1`` trees (which enter the position one power of ``h`` later): ``(text, tree, exact, which)``."""
    out = []
    for tree in nystrom_trees(weight - 1):
        e = _weight(tree) - 2
        out.append((f"Σ {_n_formula(tree, head='b̄')[0]}", tree, _n_kappa(tree) / ((e + 1) * (e + 2)), "bbar"))
    for tree in nystrom_trees(weight):
        e = _weight(tree) - 2
        out.append((f"Σ {_n_formula(tree)[0]}", tree, _n_kappa(tree) / (e + 1), "b"))
    return out


def rkn_order(A: Sequence[Sequence[float]], bbar: Sequence[float], b: Sequence[float], c: Sequence[float]) -> Derived:
    """The order of an explicit Runge–Kutta–Nyström tableau, up to :data:`MAX_ORDER`, and the first failing
    condition (order ``p`` needs ``b``'s conditions on trees of weight ``≤ p + 1`` and ``b̄``'s on ``≤ p``)."""
    for p in range(1, MAX_ORDER + 1):
        for text, tree, exact, which in rkn_conditions(p + 1):
            weights = bbar if which == "bbar" else b
            terms = [w * phi for w, phi in zip(weights, _n_weights(tree, A, c))]
            value = sum(terms)
            if not _close(value, float(exact), sum(abs(x) for x in terms)):
                return Derived(p - 1, text, exact, value)
    return Derived(MAX_ORDER)


def rkn_symplectic_defect(
    A: Sequence[Sequence[float]], bbar: Sequence[float], b: Sequence[float], c: Sequence[float]
) -> tuple[float, str]:
    """The largest violation of the symplecticity conditions, and which one (``""`` when they hold)."""
    s = len(c)
    a = [[A[i][j] if j < len(A[i]) else 0.0 for j in range(s)] for i in range(s)]
    worst, which = 0.0, ""
    for i in range(s):
        defect = abs(bbar[i] - b[i] * (1 - c[i]))
        if defect > worst:
            worst, which = defect, f"b̄{i + 1} = b{i + 1}(1 − c{i + 1})"
        for j in range(s):
            defect = abs(b[i] * (bbar[j] - a[i][j]) - b[j] * (bbar[i] - a[j][i]))
            if defect > worst:
                worst, which = defect, f"b{i + 1}(b̄{j + 1} − ā{i + 1}{j + 1}) = b{j + 1}(b̄{i + 1} − ā{j + 1}{i + 1})"
    return worst, which


def rkn_symmetric(A: Sequence[Sequence[float]], bbar: Sequence[float], b: Sequence[float], c: Sequence[float]) -> bool:
    """Whether the method is its own adjoint with its stages reversed (see the module docstring)."""
    s = len(c)
    a = [[A[i][j] if j < len(A[i]) else 0.0 for j in range(s)] for i in range(s)]
    r = [s - 1 - i for i in range(s)]
    scale = 1.0 + max(abs(x) for x in (*b, *bbar, *c, *(y for row in a for y in row)))
    tol = 1e-12 * scale
    if any(abs(c[r[i]] - (1 - c[i])) > tol or abs(b[r[i]] - b[i]) > tol for i in range(s)):
        return False
    if any(abs(bbar[r[i]] - (b[i] - bbar[i])) > tol for i in range(s)):
        return False
    return all(abs(a[r[i]][r[j]] - (a[i][j] + b[j] * (1 - c[i]) - bbar[j])) <= tol for i in range(s) for j in range(s))


def parse_number(value: object, what: str) -> float:
    """A coefficient: a number, or a string such as ``"1/3"`` or ``"0.25"``; anything else is a one-line error."""
    if isinstance(value, bool):
        raise ValueError(f"{what} must be a number, got {value!r}.")
    if isinstance(value, (int, float, Fraction)):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(Fraction(value.strip()))
        except (ValueError, ZeroDivisionError):
            raise ValueError(f"{what} must be a number such as 0.5 or 1/3, got {value!r}.") from None
    else:
        raise ValueError(f"{what} must be a number, got {type(value).__name__} {value!r}.")
    if not math.isfinite(number):
        raise ValueError(f"{what} must be finite, got {value!r}.")
    return number


def parse_vector(values: object, what: str) -> tuple[float, ...]:
    """A list of coefficients (see :func:`parse_number`), or a one-line error."""
    if isinstance(values, (str, bytes)):
        raise ValueError(f"{what} must be a list of numbers, got {values!r}.")
    if not isinstance(values, Sequence):
        try:
            values = list(values)  # e.g. an OmegaConf ListConfig
        except TypeError:
            raise ValueError(f"{what} must be a list of numbers, got {values!r}.") from None
    return tuple(parse_number(x, f"{what}[{i}]") for i, x in enumerate(values))
