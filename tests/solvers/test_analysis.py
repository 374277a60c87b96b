"""``solvers.analysis``: exact values (Euler, Heun, RK4, velocity Verlet), the same numbers by another route (the step
sampled, a product of shears, a measured local error), and nodepy's numbers for every named tableau (float64)."""

import dataclasses
import json
import math
from fractions import Fraction
from typing import ClassVar

import pytest
import torch

import solvers
from solvers import TABLEAUX, AbstractStepper, PhaseState, analysis
from solvers._order_conditions import rooted_trees

FIRST_ORDER = sorted(name for name, cls in TABLEAUX.items() if not cls.second_order)
SECOND_ORDER = sorted(name for name, cls in TABLEAUX.items() if cls.second_order)
RK4_INTERVALS = (2.785293563405282, 2 * math.sqrt(2))  # nodepy's RK44 doc: 2.7852935634, 2.8284271247...


# -- first-order schemes: exact values -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "scheme, coefficients",
    [
        (solvers.Euler, (1, 1)),
        (solvers.Heun, (1, 1, Fraction(1, 2))),
        (solvers.RK4, (1, 1, Fraction(1, 2), Fraction(1, 6), Fraction(1, 24))),
        ({"A": [[], ["1/2"], [0, "1/2"], [0, 0, 1]], "b": ["1/6", "1/3", "1/3", "1/6"]}, None),
        (TABLEAUX["rk4_38"], (1, 1, Fraction(1, 2), Fraction(1, 6), Fraction(1, 24))),
    ],
    ids=["euler", "heun", "rk4", "rk4_strings", "rk4_38"],
)
def test_the_stability_polynomial_is_exact(scheme, coefficients):
    p = analysis.stability_polynomial(scheme)
    expected = coefficients or (1, 1, Fraction(1, 2), Fraction(1, 6), Fraction(1, 24))
    assert p.exact and p.coefficients == expected and all(isinstance(c, Fraction) for c in p.coefficients)


@pytest.mark.parametrize(
    "scheme, real, imaginary",
    [(solvers.Euler, 2.0, 0.0), (solvers.Heun, 2.0, 0.0), (solvers.RK4, *RK4_INTERVALS)],
    ids=["euler", "heun", "rk4"],
)
def test_stability_intervals_exact_values(scheme, real, imaginary):
    assert analysis.real_stability_interval(scheme) == pytest.approx(real, abs=1e-14)
    assert analysis.imaginary_stability_interval(scheme) == pytest.approx(imaginary, abs=1e-14)
    assert analysis.imaginary_stability_interval(scheme()) == analysis.imaginary_stability_interval(scheme)


class StepRK4(AbstractStepper):
    """The classic RK4 written as a step (no coefficients to read): its R(z) can only be measured."""

    order: ClassVar[int] = 4
    second_order: ClassVar[bool] = False
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 4

    def step(self, field, t, y, dt, state):
        k1 = field(t, y)
        k2 = field(t + dt / 2, y + dt / 2 * k1)
        k3 = field(t + dt / 2, y + dt / 2 * k2)
        k4 = field(t + dt, y + dt * k3)
        return y + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4), state


@pytest.mark.parametrize("name", FIRST_ORDER)
def test_the_measured_amplification_is_the_exact_polynomial(name):
    cls = TABLEAUX[name]
    p = analysis.stability_polynomial(cls)
    generator = torch.Generator().manual_seed(len(name))
    for z in torch.complex(torch.randn(6, generator=generator), torch.randn(6, generator=generator)).tolist():
        z = 2 * z
        ((measured,),) = analysis.amplification_matrix(cls, z)
        assert abs(measured - p(z)) <= 1e-12 * (1 + abs(p(z)))


def test_a_step_without_coefficients_is_measured_and_fitted():
    p = analysis.stability_polynomial(StepRK4)
    assert not p.exact and p.floats() == pytest.approx([1, 1, 1 / 2, 1 / 6, 1 / 24], abs=1e-13)
    assert analysis.real_stability_interval(StepRK4) == pytest.approx(RK4_INTERVALS[0], abs=1e-10)
    assert analysis.imaginary_stability_interval(StepRK4) == pytest.approx(RK4_INTERVALS[1], abs=1e-10)
    rk2 = solvers.TwoStageRK(alpha0=0.5)  # the midpoint rule at α = ½: R = 1 + z + z²/2 whatever α
    assert analysis.real_stability_interval(rk2) == pytest.approx(2.0, abs=1e-10)
    assert analysis.imaginary_stability_interval(rk2) == 0.0


def test_the_stability_region_on_a_grid():
    region = analysis.stability_region(solvers.RK4, real=(-3, 1), imag=(-3, 3), points=(41, 61))
    assert len(region.radius) == 61 and len(region.radius[0]) == 41
    for i, y in enumerate(region.imag):
        for j, x in enumerate(region.real):
            z = complex(x, y)
            assert region.radius[i][j] == pytest.approx(abs(1 + z + z**2 / 2 + z**3 / 6 + z**4 / 24), rel=1e-12)
    measured = analysis.stability_region(StepRK4, real=(-3, 1), imag=(-3, 3), points=(41, 61))
    assert torch.allclose(torch.tensor(measured.radius), torch.tensor(region.radius), rtol=1e-12)


# -- schemes with a history ------------------------------------------------------------------------------------------


class AB2(AbstractStepper):
    """Adams–Bashforth 2, ``y + dt (3/2 f_n − 1/2 f_{n−1})``, started by one Heun step; its history is ``f_{n−1}``."""

    order: ClassVar[int] = 2
    second_order: ClassVar[bool] = False
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 1
    multistep: ClassVar[bool] = True
    startup_evals: ClassVar[tuple[int, ...]] = (2,)

    def step(self, field, t, y, dt, state):
        f = field(t, y)
        if state is None:
            return y + dt / 2 * (f + field(t + dt, y + dt * f)), f
        return y + dt * (1.5 * f - 0.5 * state), f

    def history(self, state):
        return (state,)

    def with_history(self, state, history):
        return history[0]


class HiddenAB2(AB2):
    history = None  # keeps a history and does not expose it


def test_heavy_ball_momentum_has_the_companion_matrix_region():
    # x_{n+1} = (1 + z + λ) x_n − λ x_{n−1}: a root at −1 when z = −2(1 + λ); on the imaginary axis |ζ| > 1 near 0
    for theta0 in (-2.0, 0.0, 1.5):
        lam = float(torch.sigmoid(torch.tensor(theta0, dtype=torch.float64)))
        stepper = solvers.LightWave(theta0=theta0)
        assert analysis.real_stability_interval(stepper) == pytest.approx(2 * (1 + lam), abs=1e-8)
        assert analysis.imaginary_stability_interval(stepper) == 0.0
        M = analysis.amplification_matrix(stepper, -0.5 + 0.25j)
        assert M[0][0] == pytest.approx(1 + (-0.5 + 0.25j) + lam) and M[0][1] == pytest.approx(-lam)
    euler_like = solvers.LightWave(theta0=-math.inf)  # λ = 0: Euler's numbers, with a history that is ignored
    assert analysis.real_stability_interval(euler_like) == pytest.approx(2.0, abs=1e-8)
    assert analysis.imaginary_stability_interval(euler_like) == 0.0


def test_adams_bashforth_with_start_up_takes_part_through_its_history():
    assert analysis.real_stability_interval(AB2) == pytest.approx(1.0, abs=1e-8)  # ζ = −1 at z = −1
    assert analysis.imaginary_stability_interval(AB2) == 0.0  # |ζ| ≈ 1 + y⁴/4
    z = -0.3 + 0.2j
    M = analysis.amplification_matrix(AB2, z)
    assert M[0] == pytest.approx((1 + 1.5 * z, -0.5)) and M[1] == pytest.approx((z, 0))  # f_n = λ y_n, dt = 1
    with pytest.raises(ValueError, match=r"^cannot analyse HiddenAB2: it keeps a history .* define history\(state\)"):
        analysis.real_stability_interval(HiddenAB2)


# -- second-order schemes -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", [solvers.VelocityVerlet, solvers.SemiImplicitEuler, solvers.Leapfrog])
def test_the_oscillator_interval_of_the_wave_schemes_is_two(scheme):
    assert analysis.oscillator_stability_interval(scheme) == pytest.approx(2.0, abs=1e-9)
    assert analysis.spectral_radius(scheme, -(1.99**2)) == pytest.approx(1.0, abs=1e-12)
    assert analysis.spectral_radius(scheme, -(2.01**2)) > 1.1


def test_velocity_verlet_amplification_dispersion_and_dissipation():
    h = 0.5
    M = analysis.oscillator_matrix(solvers.VelocityVerlet, h)  # dt = 1, ω = h
    expected = ((1 - h**2 / 2, 1.0), (-(h**2) * (1 - h**2 / 4), 1 - h**2 / 2))
    assert all(row == pytest.approx(want, abs=1e-15) for row, want in zip(M, expected))
    orders = analysis.dispersion_orders(solvers.VelocityVerlet)
    assert (orders.dispersion_order, orders.dissipation_order) == (2, None)
    d = analysis.dispersion(solvers.VelocityVerlet, [0.01, 0.5, 1.5])
    exact_phase = [math.acos(1 - x**2 / 2) - x for x in d.omega_dt]  # cos θ = 1 − (ω dt)²/2
    assert d.phase_error == pytest.approx(exact_phase, rel=1e-9, abs=1e-15)
    assert d.phase_error[0] == pytest.approx(0.01**3 / 24, rel=1e-3)
    assert max(abs(a) for a in d.amplitude_error) <= 1e-14
    assert analysis.dispersion_orders(solvers.VelocityVerlet, omega=3.0) == orders  # no time scale of its own


def test_dispersion_orders_of_other_schemes():
    assert analysis.dispersion_orders(solvers.SemiImplicitEuler).dispersion_order == 2  # Verlet's eigenvalues
    assert analysis.dispersion_orders(solvers.Leapfrog).dispersion_order == 2
    assert analysis.dispersion_orders(TABLEAUX["yoshida4"]).dispersion_order == 4
    damped = analysis.dispersion_orders(solvers.Damped(gamma=0.5))
    # det = e^{−γ dt}: |λ| is the damped oscillator's own e^{−γ dt/2}, so no dissipation error; a phase error of
    # order one (its velocity is an Euler step of the friction's exact flow)
    assert damped.dissipation_order is None and damped.dispersion_order == 1
    d = analysis.dispersion(solvers.Damped(gamma=0.5), [0.3])
    assert abs(d.amplitude_error[0]) <= 1e-14


def _shear_product(drifts, kicks, h):
    """The oscillator's step of a splitting as a product of 2×2 shears (ω = h, dt = 1): the same matrix by hand."""
    M = torch.eye(2, dtype=torch.float64)
    for i, a in enumerate(drifts):
        M = torch.tensor([[1.0, a], [0.0, 1.0]], dtype=torch.float64) @ M
        if i < len(kicks):
            M = torch.tensor([[1.0, 0.0], [-kicks[i] * h * h, 1.0]], dtype=torch.float64) @ M
    return M


@pytest.mark.parametrize("name", SECOND_ORDER)
def test_splittings_oscillator_interval_from_a_product_of_shears(name):
    cls = TABLEAUX[name]
    if not hasattr(cls, "drifts"):
        pytest.skip("a Nyström tableau, not a splitting")
    for h in (0.3, 1.1):
        assert torch.allclose(
            torch.tensor(analysis.oscillator_matrix(cls, h), dtype=torch.float64),
            _shear_product(cls.tableau.drifts, cls.tableau.kicks, h),
            atol=1e-13,
        )
    # symplectic, so det = 1 and the step is stable while |trace| ≤ 2: the first h where it is not, by bisection
    hs = torch.arange(1, 2049, dtype=torch.float64) / 256
    traces = torch.stack([torch.trace(_shear_product(cls.tableau.drifts, cls.tableau.kicks, float(h))) for h in hs])
    first = int((traces.abs() > 2 + 1e-12).nonzero()[0, 0])
    lo, hi = float(hs[first - 1]), float(hs[first])
    for _ in range(50):
        mid = (lo + hi) / 2
        trace = torch.trace(_shear_product(cls.tableau.drifts, cls.tableau.kicks, mid))
        lo, hi = (lo, mid) if abs(trace) > 2 + 1e-12 else (mid, hi)
    assert analysis.oscillator_stability_interval(cls) == pytest.approx(lo, abs=1e-8)


# -- error constants -----------------------------------------------------------------------------------------------


def test_error_constants_exact_values():
    rk4 = analysis.error_coefficients(solvers.RK4)
    assert rk4.exact and rk4.order == 4 and rk4.norm_squared == Fraction(1745, 2880**2)
    assert rk4.norm == pytest.approx(math.sqrt(1745) / 2880, rel=1e-15)  # nodepy's RK44 error_metrics
    assert len(rk4.terms) == len(rooted_trees(5)) == 9
    assert analysis.principal_error_norm(solvers.Euler) == 0.5
    # velocity Verlet, by Taylor expansion of its step: x₁ − x(h) = −h³/6 a'v; v₁ − v(h) = h³/12 (a'a + a''(v, v))
    verlet = analysis.error_coefficients(TABLEAUX["velocity_verlet"])
    assert verlet.exact and {(t.part, t.coefficient) for t in verlet.terms} == {
        ("x", Fraction(-1, 6)),
        ("v", Fraction(1, 12)),
    }
    assert verlet.norm_squared == Fraction(1, 36) + 2 * Fraction(1, 144)
    assert analysis.error_coefficients({"A": [[]], "b": ["1"]}).norm_squared == Fraction(1, 4)


def _rk_differential(tree, derivative):
    """``F(τ)`` of a scalar autonomous ODE ``y' = f(y)``: ``f^{(k)}`` at each vertex with ``k`` children."""
    return derivative[len(tree)] * math.prod(_rk_differential(child, derivative) for child in tree)


@pytest.mark.parametrize("name", ["heun", "kutta3", "rk4", "ralston"])
def test_runge_kutta_error_coefficients_predict_the_local_error(name):
    cls, y0 = TABLEAUX[name], 0.5
    coefficients = analysis.error_coefficients(cls)
    f = [y0**2, 2 * y0, 2.0] + [0.0] * 8  # f(y) = y²: f, f', f'', 0, ...
    predicted = sum(
        float(t.coefficient) * _rk_differential(tree, f)
        for t, tree in zip(coefficients.terms, rooted_trees(coefficients.order + 1))
    )
    p = coefficients.order

    def scaled_error(h):  # (numerical − exact)/h^{p+1}; y(h) = y0/(1 − y0 h)
        y1, _ = cls().step(lambda t, y: y * y, 0.0, torch.tensor([y0], dtype=torch.float64), h, None)
        return (float(y1) - y0 / (1 - y0 * h)) / h ** (p + 1)

    h = 0.02
    assert 2 * scaled_error(h / 2) - scaled_error(h) == pytest.approx(predicted, rel=2e-3)


def _nystrom_differential(tree, derivative, v):
    leaves, children = tree
    return (
        derivative[leaves + len(children)]
        * v**leaves
        * math.prod(_nystrom_differential(child, derivative, v) for child in children)
    )


@pytest.mark.parametrize("name", ["velocity_verlet", "position_verlet", "nystrom4", "forest_ruth", "omelyan2"])
def test_nystrom_error_terms_predict_the_local_error(name):
    cls, x0, v0 = TABLEAUX[name], 0.3, 0.7
    coefficients = analysis.error_coefficients(cls)
    a = [-x0 - x0**2, -1 - 2 * x0, -2.0] + [0.0] * 8  # a(x) = −x − x²

    def force(t, x):
        return -x - x * x

    from solvers._order_conditions import rkn_conditions

    trees = [tree for _, tree, _, _ in rkn_conditions(coefficients.order + 2)]
    predicted = {"x": 0.0, "v": 0.0}
    for term, tree in zip(coefficients.terms, trees):
        predicted[term.part] += float(term.coefficient) * _nystrom_differential(tree, a, v0)
    p = coefficients.order

    def reference(h, n=2000):  # RK4 on (x, v) with n steps: error ~ h⁵/n⁴
        x, v, k = x0, v0, h / n
        for _ in range(n):
            k1 = (v, -x - x * x)
            x2, v2 = x + k / 2 * k1[0], v + k / 2 * k1[1]
            k2 = (v2, -x2 - x2 * x2)
            x3, v3 = x + k / 2 * k2[0], v + k / 2 * k2[1]
            k3 = (v3, -x3 - x3 * x3)
            x4, v4 = x + k * k3[0], v + k * k3[1]
            k4 = (v4, -x4 - x4 * x4)
            x, v = (
                x + k / 6 * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0]),
                v + k / 6 * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1]),
            )
        return x, v

    def scaled_error(h):
        x = torch.tensor([x0], dtype=torch.float64)
        y1, _ = cls().step(force, 0.0, PhaseState(x, torch.tensor([v0], dtype=torch.float64)), h, None)
        exact = reference(h)
        return (float(y1.x) - exact[0]) / h ** (p + 1), (float(y1.v) - exact[1]) / h ** (p + 1)

    # the scaled error is C + D h + E h² + ...: three steps sizes remove D and E
    h = 0.04 if p <= 2 else 0.1
    errors = [scaled_error(h / 2**k) for k in range(3)]
    for index, part in enumerate(("x", "v")):
        value = errors[0][index] / 3 - 2 * errors[1][index] + 8 * errors[2][index] / 3
        assert value == pytest.approx(predicted[part], rel=1e-3, abs=1e-7), part


# -- the whole record, and refusals -----------------------------------------------------------------------------------


def test_analyze_gives_the_numbers_a_report_needs():
    first = analysis.analyze(solvers.RK4)
    assert first["order"] == 4 and first["stability_polynomial"] == pytest.approx([1, 1, 1 / 2, 1 / 6, 1 / 24])
    assert first["stability_polynomial_exact"] == ["1", "1", "1/2", "1/6", "1/24"]
    assert first["real_stability_interval"] == pytest.approx(RK4_INTERVALS[0])
    assert first["principal_error_norm"] == pytest.approx(math.sqrt(1745) / 2880)
    second = analysis.analyze(solvers.VelocityVerlet)
    assert second["oscillator_stability_interval"] == pytest.approx(2.0)
    assert (second["dispersion_order"], second["dissipation_order"]) == (2, None)
    splitting = solvers.tableau(drifts=(0, 1), kicks=("1/2", "1/2"))  # the coefficients it holds, for analysis
    assert second["principal_error_norm"] == pytest.approx(analysis.principal_error_norm(splitting))
    light = analysis.analyze(solvers.LightWave)
    assert light["stability_polynomial"] is None and light["imaginary_stability_interval"] == 0.0
    json.dumps([first, second, light])
    assert dataclasses.asdict(analysis.dispersion_orders(solvers.Leapfrog))["dispersion_order"] == 2


LEARNABLE = [solvers.TwoStageRK, solvers.SymmetricSplitting, solvers.TripleJump]


@pytest.mark.parametrize(
    "scheme",
    [*solvers.STEPPERS.schemes().values(), *TABLEAUX.values(), *LEARNABLE],
    ids=[
        *(f"stepper-{n}" for n in solvers.STEPPERS.schemes()),
        *(f"tableau-{n}" for n in TABLEAUX),
        *(c.__name__ for c in LEARNABLE),
    ],
)
def test_every_registered_scheme_is_analysed(scheme):
    numbers = analysis.analyze(scheme)
    keys = ("oscillator_stability_interval", "dispersion_order", "dissipation_order")
    if not scheme.second_order:
        keys = ("stability_polynomial", "real_stability_interval", "imaginary_stability_interval")
    assert set(keys) | {"order", "principal_error_norm"} <= set(numbers)
    interval = numbers[keys[0] if scheme.second_order else keys[1]]
    assert 0 < interval < math.inf  # every one of them is stable somewhere, and explicit: not everywhere
    assert (numbers["principal_error_norm"] is not None) == (analysis.tableau_of(scheme()) is not None)
    assert numbers["order"] >= 0
    json.dumps(numbers)


def test_bad_input_is_one_line():
    cases = [
        (lambda: analysis.real_stability_interval(solvers.VelocityVerlet), "is for first-order schemes"),
        (lambda: analysis.oscillator_stability_interval(solvers.RK4), "is for second-order schemes"),
        (lambda: analysis.error_coefficients(solvers.LightWave), "error constants need a tableau"),
        (lambda: analysis.amplification_matrix(solvers.Split, 0.5), "not constructible with no arguments"),
        (lambda: analysis.stability_polynomial(solvers.LightWave), "has a history"),
        (lambda: analysis.amplification_matrix(solvers.LightWave(dim=3), 0.5), "pass channel=k"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message) as error:
            call()
        assert "\n" not in str(error.value)
    with pytest.raises(TypeError, match="a scheme is a stepper"):
        analysis.real_stability_interval("rk4")


class Clipped(StepRK4):
    def step(self, field, t, y, dt, state):
        return torch.tanh(y + dt * field(t, y)), state  # not linear: no amplification


def test_a_step_that_is_not_linear_is_refused():
    with pytest.raises(ValueError, match="not linear in its state"):
        analysis.amplification_matrix(Clipped, 0.5)


def test_per_channel_parameters_are_analysed_channel_by_channel():
    stepper = solvers.LightWave(dim=3, theta0=0.0)
    with torch.no_grad():
        stepper.theta.copy_(torch.tensor([-2.0, 0.0, 2.0]))
    lams = torch.sigmoid(torch.tensor([-2.0, 0.0, 2.0], dtype=torch.float64)).tolist()
    for k, lam in enumerate(lams):
        assert analysis.real_stability_interval(stepper, channel=k) == pytest.approx(2 * (1 + lam), abs=1e-8)
    assert analysis.real_stability_interval(stepper) == pytest.approx(2 * (1 + lams[0]), abs=1e-8)  # the smallest


# -- nodepy, an independent implementation ---------------------------------------------------------------------------


def _nodepy_method(A, b, exact):
    np = pytest.importorskip("numpy")
    sympy = pytest.importorskip("sympy")
    from nodepy import runge_kutta_method as rk

    s = len(b)
    full = [list(row) + [0] * (s - len(row)) for row in A]
    if exact:
        q = lambda x: sympy.Rational(Fraction(x).numerator, Fraction(x).denominator)  # noqa: E731
        return rk.ExplicitRungeKuttaMethod(
            np.array([[q(x) for x in row] for row in full], dtype=object), np.array([q(x) for x in b], dtype=object)
        )
    return rk.ExplicitRungeKuttaMethod(np.array(full, dtype=float), np.array(b, dtype=float))


def _exact(values):
    out = [Fraction(x).limit_denominator(10**6) for x in values]
    assert all(float(q) == x for q, x in zip(out, values))
    return out


@pytest.mark.parametrize("name", FIRST_ORDER)
def test_named_tableaux_agree_with_nodepy(name):
    pytest.importorskip("nodepy")
    cls = TABLEAUX[name]
    method = _nodepy_method([_exact(row) for row in cls.tableau.A], _exact(cls.tableau.b), exact=True)
    p, q = method.stability_function(mode="exact")
    theirs = [float(c) / float(q.coeffs[0]) for c in p.coeffs[::-1]]
    assert analysis.stability_polynomial(cls).floats() == pytest.approx(theirs, abs=1e-12)
    # nodepy's exact mode: its float mode misplaces roots of high multiplicity at 0 (Heun's |R(iy)|² − 1 = y⁴/4)
    assert analysis.real_stability_interval(cls) == pytest.approx(float(method.real_stability_interval()), abs=1e-8)
    assert analysis.imaginary_stability_interval(cls) == pytest.approx(
        float(method.imaginary_stability_interval()), abs=1e-8
    )
    assert analysis.principal_error_norm(cls) == pytest.approx(float(method.principal_error_norm()), abs=1e-8)


@pytest.mark.parametrize("name", ["DP5", "BS5", "Fehlberg45", "SSP104", "CMR6", "PD8"])
def test_nodepy_library_methods_agree(name):
    rk = pytest.importorskip("nodepy.runge_kutta_method")
    method = rk.loadRKM(name)
    s = len(method.b)
    A = [[float(method.A[i][j]) for j in range(i)] for i in range(s)]
    b = [float(x) for x in method.b]
    ours = analysis.error_coefficients({"A": A, "b": b})
    assert ours.order == method.order()
    assert ours.norm == pytest.approx(float(method.__num__().principal_error_norm()), rel=1e-8)
    if name in ("DP5", "BS5"):  # FSAL pairs, with c from row sums
        from solvers._order_conditions import rk_fsal

        assert rk_fsal(A, b)
    if name in ("DP5", "BS5", "Fehlberg45"):  # rational coefficients: nodepy's exact intervals
        real = float(method.real_stability_interval(mode="exact"))
        imaginary = float(method.imaginary_stability_interval(mode="exact"))
        assert analysis.real_stability_interval({"A": A, "b": b}) == pytest.approx(real, abs=1e-8)
        assert analysis.imaginary_stability_interval({"A": A, "b": b}) == pytest.approx(imaginary, abs=1e-8)
