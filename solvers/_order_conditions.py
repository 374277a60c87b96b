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

Arithmetic: when every coefficient is exact (an ``int``, a ``Fraction``, a string such as ``"1/6"`` or ``"0.25"``, or
any number type that is not a float), the conditions are checked *exactly*, in that arithmetic (``fractions.Fraction``
for the usual inputs), and a condition holds only if it holds exactly. When any coefficient is a float, every one is
taken as a float and a condition holds when ``|Σ − exact| ≤ TOLERANCE · (1 + Σ |terms|)`` (:data:`TOLERANCE` is
``1e-10``, relative to the size of the sum's terms): a method whose coefficients are rounded to float64 then keeps its
order, and a coefficient mistyped in its fourth digit does not. Orders are derived up to :data:`MAX_ORDER` (trees of
up to that many vertices, Nyström trees of weight up to ``MAX_ORDER + 1``); a method that meets every condition
checked has order *at least* :data:`MAX_ORDER`, and :class:`Derived` says so (``at_least``). The error coefficients
(:func:`rk_error_coefficients`, :func:`rkn_error_coefficients`) reach one order further, so a method of order up to
``MAX_ORDER − 1`` has its leading error terms.

First same as last (:func:`rk_fsal`, :func:`rkn_fsal`): the last stage is the next step's first when it sits at the
step's end. The stage times are often computed as row sums (Dormand–Prince 5's ``c₇`` comes out as
0.9999999999999998 in float64), so the test allows :data:`FSAL_TOLERANCE` on float coefficients, and none on exact
ones.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import cache
from typing import Any

MAX_ORDER = 9
"""Orders are derived up to this (a method whose conditions all hold here has order *at least* ``MAX_ORDER``: an
eighth-order method is found to be of order 8 exactly, by a ninth-order condition that fails)."""

TOLERANCE = 1e-10
"""A condition on float coefficients holds when ``|Σ − exact| ≤ TOLERANCE · (1 + Σ |terms|)``."""

FSAL_TOLERANCE = 1e-12
"""Float coefficients are first-same-as-last when ``c_s``, the last row of ``A`` and ``b`` agree to this (relative to
``1 + |value|``): stage times computed as row sums are off by a rounding or two."""

_INDICES = "ᵢⱼₖₗₘₙₚᵣₛₜᵤᵥ"
_POWERS = {2: "²", 3: "³", 4: "⁴", 5: "⁵", 6: "⁶", 7: "⁷", 8: "⁸", 9: "⁹"}


@dataclass(frozen=True)
class Derived:
    """What a tableau's coefficients imply: its order, and the first condition beyond it that fails (``None`` when
    every condition up to :data:`MAX_ORDER` holds: then the order is at least ``order``, ``at_least``), with the sum
    the coefficients give; ``exactly`` when the conditions were checked in exact arithmetic."""

    order: int
    failing: str | None = None
    exact: Fraction | None = None
    value: float | None = None
    at_least: bool = False
    exactly: bool = False

    def message(self) -> str:
        """``"order conditions hold to order 2; Σ bᵢcᵢ² = 1/3 is off by 0.02"``."""
        how = "exactly" if self.exactly else f"to a relative tolerance of {TOLERANCE:g}"
        if self.failing is None:
            return (
                f"order conditions hold to order {self.order} (every one checked, up to order {MAX_ORDER}, {how}): "
                f"the order is at least {self.order}"
            )
        off = self.value - float(self.exact)
        return (
            f"order conditions hold to order {self.order}; {self.failing} = {_fraction(self.exact)} "
            f"is off by {abs(off):.3g} (the coefficients give {self.value:.6g}; checked {how})"
        )


def _fraction(q: Fraction) -> str:
    return str(q.numerator) if q.denominator == 1 else f"{q.numerator}/{q.denominator}"


def _close(value: float, exact: float, scale: float) -> bool:
    return abs(value - exact) <= TOLERANCE * (1.0 + scale)


# -- exact or float coefficients ------------------------------------------------------------------------------------


def _inexact(x: Any) -> bool:
    return isinstance(x, (float, complex)) or (hasattr(x, "dtype") and not isinstance(x, numbers.Integral))


def _as_exact(x: Any) -> Any:
    if isinstance(x, str):
        return Fraction(x.strip())
    if isinstance(x, numbers.Rational):
        return Fraction(x)
    return x  # another exact number type (its own arithmetic)


def _as_float(x: Any) -> float:
    return float(Fraction(x.strip())) if isinstance(x, str) else float(x)


def coefficients(*groups: Any) -> tuple[list, bool]:
    """Each group (a vector, or a matrix as a list of rows) in one arithmetic: exact (``Fraction``s, or the numbers'
    own exact type) when no coefficient is a float, else floats. Returns the groups and whether they are exact."""
    flat = [x for g in groups for item in g for x in (item if _is_row(item) else (item,))]
    exact = not any(_inexact(x) for x in flat)
    convert = _as_exact if exact else _as_float
    out = []
    for g in groups:
        out.append(tuple(tuple(convert(x) for x in item) if _is_row(item) else convert(item) for item in g))
    return out, exact


def _is_row(item: Any) -> bool:
    return isinstance(item, Sequence) and not isinstance(item, str)


def row_sums(A: Sequence[Sequence[Any]], exact: bool) -> tuple:
    zero = Fraction(0) if exact else 0.0
    return tuple(sum(row, zero) for row in A)


def _prepare_rk(A: Any, b: Any, c: Any) -> tuple[tuple, tuple, tuple, bool]:
    groups = [A, b] + ([] if c is None else [c])
    converted, exact = coefficients(*groups)
    A, b = converted[0], converted[1]
    c = converted[2] if c is not None else row_sums(A, exact)
    return A, b, c, exact


def _zero(exact: bool) -> Any:
    return Fraction(0) if exact else 0.0


def _one(exact: bool) -> Any:
    return Fraction(1) if exact else 1.0


# -- rooted trees (Runge–Kutta) -------------------------------------------------------------------------------------
# A tree is the tuple of its children, sorted (by size, then shape); the leaf is (). Trees are made once, each from
# trees already made, so equal trees are the same object (elementary weights are cached by identity).

_TREES: list[tuple] = [()]  # every tree made so far, sorted by (size, shape)
_SIZE: dict[int, int] = {id(()): 1}
_KEY: dict[int, tuple] = {id(()): (1, ())}
_UPTO: list[int] = [0, 1]  # _UPTO[n]: how many trees have at most n vertices


def _size(tree: tuple) -> int:
    size = _SIZE.get(id(tree))
    return size if size is not None else 1 + sum(_size(child) for child in tree)


def _choose(n: int, total: int, high: int, chosen: list[int], made: list) -> None:
    """Append to ``made`` every tree of ``n`` vertices whose children (indices at most ``high``, non-increasing,
    after ``chosen``) have ``total`` vertices left to place, with its sort key."""
    if total == 0:
        children = tuple(_TREES[i] for i in reversed(chosen))
        made.append(((n, tuple(_KEY[id(child)] for child in children)), children))
        return
    for index in range(min(high, _UPTO[total] - 1), -1, -1):
        chosen.append(index)
        _choose(n, total - _SIZE[id(_TREES[index])], index, chosen, made)
        chosen.pop()


def _grow_trees(order: int) -> None:
    while len(_UPTO) <= order:
        n = len(_UPTO)  # make the trees with n vertices
        made: list[tuple[tuple, tuple]] = []
        _choose(n, n - 1, len(_TREES) - 1, [], made)
        for key, tree in sorted(made, key=lambda item: item[0]):
            _TREES.append(tree)
            _SIZE[id(tree)] = n
            _KEY[id(tree)] = key
        _UPTO.append(len(_TREES))


@cache
def rooted_trees(order: int) -> tuple[tuple, ...]:
    """Every rooted tree with ``order`` vertices (1, 1, 2, 4, 9, 20, 48, 115, 286, ... of them)."""
    if order < 1:
        return ()
    _grow_trees(order)
    return tuple(_TREES[_UPTO[order - 1] : _UPTO[order]])


@cache
def symmetry(tree: tuple) -> int:
    """``σ(τ)``: the order of the tree's automorphism group (``Π m! σ(child)^m`` over its kinds of children)."""
    out = 1
    for child in set(tree):
        m = tree.count(child)
        out *= math.factorial(m) * symmetry(child) ** m
    return out


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


class _RKWeights:
    """``Φᵢ(τ)`` for every stage, cached per tree (and ``Σⱼ aᵢⱼ Φⱼ(τ)`` per subtree) for one tableau."""

    def __init__(self, A: Sequence[Sequence[Any]], c: Sequence[Any], exact: bool):
        self.s, self.c, self.one = len(c), tuple(c), _one(exact)
        self.rows = [tuple((j, a) for j, a in enumerate(row) if a != 0) for row in A]
        self.zero = _zero(exact)
        self.phi: dict[int, tuple] = {}
        self.aphi: dict[int, tuple] = {}
        self.keep: list[tuple] = []  # keeps the trees cached by identity alive

    def __call__(self, tree: tuple) -> tuple:
        found = self.phi.get(id(tree))
        if found is not None:
            return found
        out = [self.one] * self.s
        for child in tree:
            factor = self.c if child == () else self._a_times(child)
            out = [o * f for o, f in zip(out, factor)]
        self.phi[id(tree)] = out = tuple(out)
        self.keep.append(tree)
        return out

    def _a_times(self, child: tuple) -> tuple:
        found = self.aphi.get(id(child))
        if found is None:
            inner = self(child)
            found = tuple(sum((a * inner[j] for j, a in row), self.zero) for row in self.rows)
            self.aphi[id(child)] = found
        return found


def _rk_weights(tree: tuple, A: Sequence[Sequence[float]], c: Sequence[float]) -> list[float]:
    """``Φᵢ(τ)`` for every stage ``i`` (float arithmetic)."""
    return list(_RKWeights(A, c, exact=False)(tree))


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


@cache
def rk_conditions(order: int) -> tuple[tuple[str, tuple, Fraction], ...]:
    """The order conditions of ``order`` (trees with that many vertices): ``(text, tree, exact value)``."""
    return tuple((f"Σ {_rk_formula(tree)[0]}", tree, _rk_exact(tree)) for tree in rooted_trees(order))


def _sum_terms(weights: Sequence[Any], phi: Sequence[Any], zero: Any) -> tuple[Any, list]:
    terms = [w * p for w, p in zip(weights, phi) if w != 0]
    return sum(terms, zero), terms


def _holds(value: Any, exact_value: Fraction, terms: list, exact: bool) -> bool:
    if exact:
        return value == exact_value
    return _close(value, float(exact_value), sum(abs(x) for x in terms))


def rk_order(A: Sequence[Sequence[Any]], b: Sequence[Any], c: Sequence[Any] | None = None) -> Derived:
    """The order of an explicit Runge–Kutta tableau (``A`` lower triangular, ``c`` its row sums, computed when
    ``None``), up to :data:`MAX_ORDER`, and the first failing condition: exactly when every coefficient is exact, else
    to :data:`TOLERANCE` (the module docstring)."""
    A, b, c, exact = _prepare_rk(A, b, c)
    weights, zero = _RKWeights(A, c, exact), _zero(exact)
    for p in range(1, MAX_ORDER + 1):
        for text, tree, exact_value in rk_conditions(p):
            value, terms = _sum_terms(b, weights(tree), zero)
            if not _holds(value, exact_value, terms, exact):
                return Derived(p - 1, text, exact_value, float(value), exactly=exact)
    return Derived(MAX_ORDER, at_least=True, exactly=exact)


def rk_error_coefficients(
    A: Sequence[Sequence[Any]], b: Sequence[Any], c: Sequence[Any] | None, order: int
) -> tuple[tuple[str, tuple, Any], ...]:
    """The error coefficients of the trees with ``order`` vertices: ``(text, tree, (Σ bᵢΦᵢ(τ) − 1/γ(τ)) / σ(τ))``,
    the coefficient of ``h^order F(τ)`` in the local error (numerical minus exact), as nodepy's
    ``error_coefficient`` defines it; exact (``Fraction``) when the coefficients are. ``order`` up to
    ``MAX_ORDER + 1``."""
    if not 1 <= order <= MAX_ORDER + 1:
        raise ValueError(f"error coefficients are derived for trees of 1 to {MAX_ORDER + 1} vertices, not {order}.")
    A, b, c, exact = _prepare_rk(A, b, c)
    weights, zero = _RKWeights(A, c, exact), _zero(exact)
    out = []
    for tree in rooted_trees(order):
        value, _ = _sum_terms(b, weights(tree), zero)
        residual = value - (_rk_exact(tree) if exact else float(_rk_exact(tree)))
        out.append((f"Σ {_rk_formula(tree)[0]}", tree, residual / symmetry(tree)))
    return tuple(out)


def rk_fsal(A: Sequence[Sequence[Any]], b: Sequence[Any], c: Sequence[Any] | None = None) -> bool:
    """Whether an explicit Runge–Kutta tableau is first-same-as-last: more than one stage, the last at the step's end
    (``c_s = 1``), its row of ``A`` equal to ``b`` and ``b_s = 0`` (so the last stage evaluates the field at
    ``x₁``, the next step's first evaluation). Exact coefficients compare exactly; float ones to
    :data:`FSAL_TOLERANCE` (``c`` computed from row sums is off by a rounding: Dormand–Prince 5, Tsit5)."""
    A, b, c, exact = _prepare_rk(A, b, c)
    s = len(b)
    if s < 2 or len(A[-1]) < s - 1:
        return False
    last = tuple(A[-1][: s - 1])
    same = _same if exact else _near
    return same(c[-1], 1) and same(b[-1], 0) and all(same(x, y) for x, y in zip(last, b[: s - 1]))


def _same(x: Any, y: Any) -> bool:
    return x == y


def _near(x: float, y: float) -> bool:
    return abs(x - y) <= FSAL_TOLERANCE * (1.0 + abs(y))


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
    canonical = {tree: tree for w in range(2, weight) for tree in nystrom_trees(w)}  # reuse the same objects
    return tuple(
        (leaves, tuple(canonical.get(child, child) for child in children))
        for leaves, children in sorted(trees, key=_nkey)
    )


@cache
def nystrom_symmetry(tree: tuple) -> int:
    """``σ(τ)`` of a Nyström tree: ``leaves! · Π m! σ(child)^m`` over its kinds of evaluation children."""
    leaves, children = tree
    out = math.factorial(leaves)
    for child in set(children):
        m = children.count(child)
        out *= math.factorial(m) * nystrom_symmetry(child) ** m
    return out


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


class _NWeights:
    """``Φᵢ(τ)`` of Nyström trees for one tableau, cached per tree."""

    def __init__(self, A: Sequence[Sequence[Any]], c: Sequence[Any], exact: bool):
        self.s, self.c, self.one, self.zero = len(c), tuple(c), _one(exact), _zero(exact)
        self.rows = [tuple((j, a) for j, a in enumerate(row) if a != 0) for row in A]
        self.phi: dict[tuple, tuple] = {}
        self.aphi: dict[tuple, tuple] = {}

    def __call__(self, tree: tuple) -> tuple:
        found = self.phi.get(tree)
        if found is not None:
            return found
        leaves, children = tree
        out = [ci**leaves if leaves else self.one for ci in self.c]
        for child in children:
            out = [o * f for o, f in zip(out, self._a_times(child))]
        self.phi[tree] = out = tuple(out)
        return out

    def _a_times(self, child: tuple) -> tuple:
        found = self.aphi.get(child)
        if found is None:
            inner = self(child)
            found = tuple(sum((a * inner[j] for j, a in row), self.zero) for row in self.rows)
            self.aphi[child] = found
        return found


def _n_weights(tree: tuple, A: Sequence[Sequence[float]], c: Sequence[float]) -> list[float]:
    return list(_NWeights(A, c, exact=False)(tree))


@cache
def _n_kappa(tree: tuple) -> Fraction:
    """The exact flow's weight is ``κ θ^{ρ−2}``: a leaf gives ``θ``, a child ``∫₀^θ (θ − s) Φ(s) ds``."""
    _, children = tree
    kappa = Fraction(1)
    for child in children:
        e = _weight(child) - 2
        kappa *= _n_kappa(child) / ((e + 1) * (e + 2))
    return kappa


def _n_exact(tree: tuple, which: str) -> Fraction:
    e = _weight(tree) - 2
    return _n_kappa(tree) / ((e + 1) * (e + 2)) if which == "bbar" else _n_kappa(tree) / (e + 1)


@cache
def rkn_conditions(weight: int) -> tuple[tuple[str, tuple, Fraction, str], ...]:
    """The conditions of order ``weight``: on ``b`` for trees of weight ``weight``, on ``b̄`` for weight
    ``weight − 1`` trees (which enter the position one power of ``h`` later): ``(text, tree, exact, which)``."""
    out = []
    for tree in nystrom_trees(weight - 1):
        out.append((f"Σ {_n_formula(tree, head='b̄')[0]}", tree, _n_exact(tree, "bbar"), "bbar"))
    for tree in nystrom_trees(weight):
        out.append((f"Σ {_n_formula(tree)[0]}", tree, _n_exact(tree, "b"), "b"))
    return tuple(out)


def _prepare_rkn(A: Any, bbar: Any, b: Any, c: Any) -> tuple[tuple, tuple, tuple, tuple, bool]:
    (A, bbar, b, c), exact = coefficients(A, bbar, b, c)
    return A, bbar, b, c, exact


def rkn_order(A: Sequence[Sequence[Any]], bbar: Sequence[Any], b: Sequence[Any], c: Sequence[Any]) -> Derived:
    """The order of an explicit Runge–Kutta–Nyström tableau, up to :data:`MAX_ORDER`, and the first failing
    condition (order ``p`` needs ``b``'s conditions on trees of weight ``≤ p + 1`` and ``b̄``'s on ``≤ p``); exactly
    when every coefficient is exact, else to :data:`TOLERANCE`."""
    A, bbar, b, c, exact = _prepare_rkn(A, bbar, b, c)
    weights, zero = _NWeights(A, c, exact), _zero(exact)
    for p in range(1, MAX_ORDER + 1):
        for text, tree, exact_value, which in rkn_conditions(p + 1):
            value, terms = _sum_terms(bbar if which == "bbar" else b, weights(tree), zero)
            if not _holds(value, exact_value, terms, exact):
                return Derived(p - 1, text, exact_value, float(value), exactly=exact)
    return Derived(MAX_ORDER, at_least=True, exactly=exact)


def rkn_error_coefficients(
    A: Sequence[Sequence[Any]], bbar: Sequence[Any], b: Sequence[Any], c: Sequence[Any], order: int
) -> tuple[tuple[str, tuple, Any, str], ...]:
    """The local error terms of order ``h^order``: the position's from Nyström trees of weight ``order``
    (``(Σ b̄ᵢΦᵢ − e(τ)) / σ(τ)``) and the velocity's from trees of weight ``order + 1`` (``(Σ bᵢΦᵢ − e(τ)) / σ(τ)``),
    each the coefficient of ``h^order F(τ)`` (``F`` the elementary differential: the force's derivative of order
    ``leaves + children`` applied to ``v`` per leaf and to each child's ``F``) in numerical minus exact:
    ``(text, tree, coefficient, "bbar" or "b")``. Exact when the coefficients are. ``order`` up to ``MAX_ORDER + 1``."""
    if not 2 <= order <= MAX_ORDER + 1:
        raise ValueError(f"error terms are derived for orders 2 to {MAX_ORDER + 1}, not {order}.")
    A, bbar, b, c, exact = _prepare_rkn(A, bbar, b, c)
    weights, zero = _NWeights(A, c, exact), _zero(exact)
    out = []
    for text, tree, exact_value, which in rkn_conditions(order + 1):
        value, _ = _sum_terms(bbar if which == "bbar" else b, weights(tree), zero)
        residual = value - (exact_value if exact else float(exact_value))
        out.append((text, tree, residual / nystrom_symmetry(tree), which))
    return tuple(out)


def rkn_fsal(A: Sequence[Sequence[Any]], bbar: Sequence[Any], b: Sequence[Any], c: Sequence[Any]) -> bool:
    """Whether an explicit Runge–Kutta–Nyström tableau is first-same-as-last: more than one stage, the first at the
    step's start (``c₁ = 0``), the last at its end (``c_s = 1``) with its row of ``Ā`` equal to ``b̄`` and
    ``b̄_s = 0`` (so the last stage evaluates the force at ``x₁``). Exact coefficients compare exactly; float ones
    to :data:`FSAL_TOLERANCE`."""
    A, bbar, b, c, exact = _prepare_rkn(A, bbar, b, c)
    s = len(b)
    if s < 2 or len(A[-1]) < s - 1:
        return False
    same = _same if exact else _near
    last = tuple(A[-1][: s - 1])
    return (
        same(c[0], 0) and same(c[-1], 1) and same(bbar[-1], 0) and all(same(x, y) for x, y in zip(last, bbar[: s - 1]))
    )


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
    return float(worst), which


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


def parse_exact_number(value: object, what: str) -> Fraction | float:
    """A coefficient as given: an ``int``, a ``Fraction`` or a string such as ``"1/3"`` or ``"0.25"`` becomes an
    exact ``Fraction`` (so the order conditions are checked exactly), a float stays a float; anything else is a
    one-line error (the checks of :func:`parse_number`)."""
    number = parse_number(value, what)
    if isinstance(value, str):
        return Fraction(value.strip())
    if isinstance(value, numbers.Rational) and not isinstance(value, bool):
        return Fraction(value)
    return number


def parse_exact_vector(values: object, what: str) -> tuple[Fraction | float, ...]:
    """A list of coefficients, each as :func:`parse_exact_number` reads it, or a one-line error."""
    parse_vector(values, what)  # the same one-line errors
    return tuple(parse_exact_number(x, f"{what}[{i}]") for i, x in enumerate(list(values)))


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
