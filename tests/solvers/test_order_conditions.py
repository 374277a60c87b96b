"""The order-condition engine (``solvers/_order_conditions.py``): trees to ten vertices, orders to nine, exact
arithmetic for exact coefficients, first-same-as-last with a tolerance for float ones, and the error coefficients."""

import math
from fractions import Fraction

import pytest

import solvers
from solvers._order_conditions import (
    MAX_ORDER,
    Derived,
    nystrom_symmetry,
    nystrom_trees,
    rk_conditions,
    rk_error_coefficients,
    rk_fsal,
    rk_order,
    rkn_fsal,
    rkn_order,
    rooted_trees,
    symmetry,
)

# -- trees ---------------------------------------------------------------------------------------------------------


def _size(tree):
    return 1 + sum(_size(child) for child in tree)


def _density(tree):  # γ(τ), from its definition: |τ| times the children's densities
    return _size(tree) * math.prod(_density(child) for child in tree)


def test_rooted_trees_to_ten_vertices_and_their_symmetries():
    assert [len(rooted_trees(n)) for n in range(1, 11)] == [1, 1, 2, 4, 9, 20, 48, 115, 286, 719]  # OEIS A000081
    for n in range(1, 11):
        # every tree is distinct, and the trees' labellings α(τ) = n!/(σ(τ)γ(τ)) add up to the (n − 1)! increasing
        # labellings of all rooted trees on n vertices (Butcher): a wrong symmetry or a missing tree breaks it
        assert len(set(rooted_trees(n))) == len(rooted_trees(n))
        total = sum(Fraction(math.factorial(n), symmetry(t) * _density(t)) for t in rooted_trees(n))
        assert total == math.factorial(n - 1)
    assert symmetry(((), (), ())) == 6 and symmetry((((),), ((),))) == 2 and symmetry((((), ()),)) == 2


def test_nystrom_trees_and_symmetries():
    assert [len(nystrom_trees(w)) for w in range(2, 8)] == [1, 1, 2, 3, 6, 10]
    # a'[v, v] (two leaves): 2; a''[a, a] (two equal children): 2; a'[v] with an a child: 1
    assert nystrom_symmetry((2, ())) == 2 and nystrom_symmetry((0, ((0, ()), (0, ())))) == 2
    assert nystrom_symmetry((1, ((0, ()),))) == 1


# -- orders ----------------------------------------------------------------------------------------------------------


class Surd:
    """``p + q√21`` with rational ``p, q``: exact arithmetic for Cooper–Verner's coefficients."""

    def __init__(self, p, q=0):
        self.p, self.q = Fraction(p), Fraction(q)

    @staticmethod
    def of(x):
        return x if isinstance(x, Surd) else Surd(x)

    def __add__(self, other):
        other = Surd.of(other)
        return Surd(self.p + other.p, self.q + other.q)

    __radd__ = __add__

    def __neg__(self):
        return Surd(-self.p, -self.q)

    def __sub__(self, other):
        return self + (-Surd.of(other))

    def __rsub__(self, other):
        return Surd.of(other) - self

    def __mul__(self, other):
        other = Surd.of(other)
        return Surd(self.p * other.p + 21 * self.q * other.q, self.p * other.q + self.q * other.p)

    __rmul__ = __mul__

    def __truediv__(self, n):
        return Surd(self.p / n, self.q / n)

    def __eq__(self, other):
        other = Surd.of(other)
        return self.p == other.p and self.q == other.q

    def __hash__(self):
        return hash((self.p, self.q))

    def __float__(self):
        return float(self.p) + float(self.q) * math.sqrt(21)


def cooper_verner_8(number):
    """Cooper & Verner's 11-stage eighth-order method (Cooper & Verner, *Some explicit Runge–Kutta methods of high
    order*, SIAM J. Numer. Anal. 9(3), 1972, pp. 389–405), its coefficients as tabulated there; ``number(p, q)``
    makes ``p + q√21``."""

    def n(p, q=0, d=1):
        return number(Fraction(p, d), Fraction(q, d))

    A = [
        [],
        [n(1, 0, 2)],
        [n(1, 0, 4), n(1, 0, 4)],
        [n(1, 0, 7), n(-7, -3, 98), n(21, 5, 49)],
        [n(11, 1, 84), n(0), n(18, 4, 63), n(21, -1, 252)],
        [n(5, 1, 48), n(0), n(9, 1, 36), n(-231, 14, 360), n(63, -7, 80)],
        [n(10, -1, 42), n(0), n(-432, 92, 315), n(633, -145, 90), n(-504, 115, 70), n(63, -13, 35)],
        [n(1, 0, 14), n(0), n(0), n(0), n(14, -3, 126), n(13, -3, 63), n(1, 0, 9)],
        [n(1, 0, 32), n(0), n(0), n(0), n(91, -21, 576), n(11, 0, 72), n(-385, -75, 1152), n(63, 13, 128)],
        [
            n(1, 0, 14),
            n(0),
            n(0),
            n(0),
            n(1, 0, 9),
            n(-733, -147, 2205),
            n(515, 111, 504),
            n(-51, -11, 56),
            n(132, 28, 245),
        ],
        [
            n(0),
            n(0),
            n(0),
            n(0),
            n(-42, 7, 18),
            n(-18, 28, 45),
            n(-273, -53, 72),
            n(301, 53, 72),
            n(28, -28, 45),
            n(49, -7, 18),
        ],
    ]
    b = [n(1, 0, 20), *[n(0)] * 6, n(49, 0, 180), n(16, 0, 45), n(49, 0, 180), n(1, 0, 20)]
    return A, b


def test_an_eighth_order_method_derives_order_eight_in_floats_and_exactly():
    A, b = cooper_verner_8(lambda p, q: float(p) + float(q) * math.sqrt(21))
    derived = rk_order(A, b)
    assert (derived.order, derived.at_least, derived.exactly) == (8, False, False)
    assert derived.failing in {text for text, _, _ in rk_conditions(9)}
    assert "hold to order 8;" in derived.message()
    A, b = cooper_verner_8(Surd)  # in Q(√21): every condition to order 8 holds exactly, a ninth-order one does not
    exact = rk_order(A, b)
    assert (exact.order, exact.at_least, exact.exactly, exact.failing) == (8, False, True, derived.failing)
    assert "checked exactly" in exact.message()


def test_a_method_meeting_every_condition_says_at_least():
    message = Derived(MAX_ORDER, at_least=True).message()
    assert f"at least {MAX_ORDER}" in message and f"up to order {MAX_ORDER}" in message
    assert MAX_ORDER >= 9  # an order-8 method is told apart from one of higher order


RK4_STRINGS = ([[], ["1/2"], ["0", "1/2"], ["0", "0", "1"]], ["1/6", "1/3", "1/3", "1/6"])


def test_coefficients_given_as_fractions_are_checked_exactly():
    A, b = RK4_STRINGS
    derived = rk_order(A, b)
    assert (derived.order, derived.exactly) == (4, True) and derived.failing == "Σ bᵢcᵢ⁴"
    # 1/6 written to sixteen digits: exact arithmetic sees that the weights do not sum to one; floats do not
    near = ["0.1666666666666667" if x == "1/6" else x for x in b]
    assert rk_order(A, near).order == 0 and rk_order(A, near).exactly
    assert rk_order(A, [float(Fraction(x)) for x in near]).order == 4
    assert rk_order(A, [Fraction(x) for x in b]).exactly and rk_order(A, [1 / 6, 1 / 3, 1 / 3, 1 / 6]).order == 4
    # Nyström conditions likewise: Nyström's fourth-order method in fractions, and one coefficient perturbed by 1e-17
    rkn = ([[], ["1/8"], ["0", "1/2"]], ["1/6", "1/3", "0"], ["1/6", "2/3", "1/6"], ["0", "1/2", "1"])
    assert (rkn_order(*rkn).order, rkn_order(*rkn).exactly) == (4, True)
    off = (rkn[0], ["1/6", "0.33333333333333333", "0"], rkn[2], rkn[3])
    assert rkn_order(*off).order == 1


DP5_A = [
    [],
    [1 / 5],
    [3 / 40, 9 / 40],
    [44 / 45, -56 / 15, 32 / 9],
    [19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729],
    [9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656],
    [35 / 384, 0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84],
]
DP5_B = [35 / 384, 0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84, 0]
"""Dormand & Prince, *A family of embedded Runge–Kutta formulae*, J. Comput. Appl. Math. 6 (1980), the fifth-order
solution."""

TSIT5_A = [
    [],
    [0.161],
    [-0.008480655492356989, 0.335480655492357],
    [2.8971530571054935, -6.359448489975075, 4.3622954328695815],
    [5.325864828439257, -11.748883564062828, 7.4955393428898365, -0.09249506636175525],
    [5.86145544294642, -12.92096931784711, 8.159367898576159, -0.071584973281401, -0.028269050394068383],
    [0.09646076681806523, 0.01, 0.4798896504144996, 1.379008574103742, -3.290069515436081, 2.324710524099774],
]
TSIT5_B = [*TSIT5_A[-1], 0.0]
"""Tsitouras, *Runge–Kutta pairs of order 5(4) satisfying only the first column simplifying assumption*, Comput.
Math. Appl. 62 (2011), the fifth-order solution, rounded to float64."""


@pytest.mark.parametrize("A, b", [(DP5_A, DP5_B), (TSIT5_A, TSIT5_B)], ids=["dormand_prince5", "tsit5"])
def test_first_same_as_last_with_stage_times_from_row_sums(A, b):
    c = [sum(row) for row in A]
    assert c[-1] != 1.0  # 0.9999999999999998: an exact comparison misses the reuse
    assert rk_fsal(A, b) and rk_fsal(A, b, c)
    assert rk_order(A, b).order == 5
    assert not rk_fsal(A, [*b[:-1], 1e-6]) and not rk_fsal(A, [x * (1 + 1e-9) for x in b])
    exact = [[Fraction(x).limit_denominator(10**5) for x in row] for row in DP5_A]
    assert rk_fsal(exact, exact[-1] + [0]) and not rk_fsal(exact, [*exact[-1], Fraction(1, 10**20)])


def test_first_same_as_last_of_the_library_and_of_nystrom_tableaux():
    for name, cls in solvers.TABLEAUX.items():
        if hasattr(cls, "bbar") or not hasattr(cls, "A"):
            continue
        assert rk_fsal(cls.A, cls.b) == (name == "bogacki_shampine3"), name
    verlet = ([[], [1 / 2]], [1 / 2, 0], [1 / 2, 1 / 2], [0, 1])  # velocity Verlet as a Nyström tableau
    assert rkn_fsal(*verlet) and not rkn_fsal(verlet[0], verlet[1], verlet[2], [0, 1 - 1e-9])
    assert rkn_fsal(verlet[0], verlet[1], verlet[2], [0, sum([0.1] * 10)])  # 0.9999999999999999


def test_the_classic_error_coefficients():
    rk4 = rk_error_coefficients(*RK4_STRINGS, None, 5)
    norm_squared = sum(e * e for *_, e in rk4)
    assert norm_squared == Fraction(1745, 2880**2)  # nodepy's error_metrics doc: RK44's A⁽⁵⁾ is sqrt(1745)/2880
    assert {text: e for text, _, e in rk4}["Σ bᵢcᵢ⁴"] == (Fraction(5, 24) - Fraction(1, 5)) / 24
    assert rk_error_coefficients([[]], [1], None, 2)[0][2] == Fraction(-1, 2)  # Euler: (Σ bᵢcᵢ − 1/2)/1
    with pytest.raises(ValueError, match="1 to 10 vertices"):
        rk_error_coefficients([[]], [1], None, 11)
