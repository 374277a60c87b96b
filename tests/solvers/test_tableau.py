"""Schemes from coefficients: the order conditions, the derived claims, the named library, the learnable families that
keep their guarantees, and ``solver=tableau`` from the command line (float64 throughout)."""

import dataclasses
import json
import math
import re
import sys
from fractions import Fraction
from typing import ClassVar

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import odeformer
import solvers
from helpers import cli, cli_in_process
from odeformer.registry import solver
from solvers import (
    TABLEAUX,
    ButcherTableau,
    Claims,
    Composition,
    NystromTableau,
    PhaseState,
    RungeKutta,
    RungeKuttaNystrom,
    Splitting,
    tableau,
)
from solvers._composition import as_nystrom, merged_sequence
from solvers._forest_ruth import ForestRuth as _ForestRuth
from solvers._order_conditions import rk_conditions, rk_order, rkn_order, rkn_symplectic_defect, rooted_trees
from solvers.testing import check_evals, check_order, check_stepper

KNOWN_ORDERS = {
    "euler": 1,
    "midpoint": 2,
    "heun": 2,
    "ralston": 2,
    "kutta3": 3,
    "ssprk3": 3,
    "bogacki_shampine3": 3,
    "rk4": 4,
    "rk4_38": 4,
    "nystrom4": 4,
    "semi_implicit_euler": 1,
    "velocity_verlet": 2,
    "position_verlet": 2,
    "forest_ruth": 4,
    "yoshida4": 4,
    "omelyan2": 2,
    "omelyan4": 4,
    "pefrl": 4,
}
SYMPLECTIC = {
    "semi_implicit_euler",
    "velocity_verlet",
    "position_verlet",
    "forest_ruth",
    "yoshida4",
    "omelyan2",
    "omelyan4",
    "pefrl",
}
ForestRuth = _ForestRuth.tableau  # the coefficients of a named scheme, given inline
DEBUG = [
    "train=debug",
    "data=synthetic",
    "model.depth=2",
    "model.dim=16",
    "model.heads=2",
    "train.max_steps=4",
    "train.eval_every=2",
]


# -- the order conditions ----------------------------------------------------------------------------------------------


def test_tree_counts_and_the_classic_conditions():
    assert [len(rooted_trees(n)) for n in range(1, 8)] == [1, 1, 2, 4, 9, 20, 48]  # OEIS A000081
    texts = {text: value for p in range(1, 5) for text, _, value in rk_conditions(p)}
    assert texts == {
        "Σ bᵢ": 1,
        "Σ bᵢcᵢ": Fraction(1, 2),
        "Σ bᵢcᵢ²": Fraction(1, 3),
        "Σ bᵢaᵢⱼcⱼ": Fraction(1, 6),
        "Σ bᵢcᵢ³": Fraction(1, 4),
        "Σ bᵢcᵢaᵢⱼcⱼ": Fraction(1, 8),
        "Σ bᵢaᵢⱼcⱼ²": Fraction(1, 12),
        "Σ bᵢaᵢⱼaⱼₖcₖ": Fraction(1, 24),
    }


@pytest.mark.parametrize("name", sorted(KNOWN_ORDERS))
def test_every_named_scheme_derives_its_known_order(name):
    """The order the literature gives each named scheme is what the engine derives from its coefficients (none of
    them states it), and what the class claims; a hand-written one claims what its coefficients derive."""
    cls = TABLEAUX[name]
    derived = cls.tableau.claims
    assert cls.tableau.derived.order == derived.order == Claims.of(cls).order == KNOWN_ORDERS[name]
    hand_written = name == "semi_implicit_euler"  # writes its inverse: reversible, which the splitting alone is not
    assert dataclasses.replace(derived, reversible=hand_written or derived.reversible) == Claims.of(cls)
    assert derived.symplectic == (name in SYMPLECTIC) and derived.second_order == (
        name in SYMPLECTIC or name == "nystrom4"
    )
    assert "Reference" in (cls.__doc__ or sys.modules[cls.__module__].__doc__)  # the class's, or its file's
    if name not in ("velocity_verlet", "semi_implicit_euler"):  # derived, not restated in the class's body
        import inspect

        assert not re.search(r"^\s+(order|symplectic|evals_per_step)\b", inspect.getsource(cls), re.M), name


@pytest.mark.parametrize("name", ["velocity_verlet", "semi_implicit_euler"])
def test_a_hand_written_scheme_steps_as_its_coefficients_do(name):
    cls = TABLEAUX[name]
    g = torch.Generator().manual_seed(1)
    y = PhaseState(*torch.randn(2, 3, 4, generator=g, dtype=torch.float64))

    def force(t, x):
        return -torch.sin(x) * (1 + t)

    got, _ = cls().step(force, 0.2, y, 0.3, None)
    want, _ = tableau(drifts=cls.tableau.drifts, kicks=cls.tableau.kicks).step(force, 0.2, y, 0.3, None)
    torch.testing.assert_close(torch.cat(got), torch.cat(want), rtol=1e-14, atol=1e-14)


def test_evaluations_fsal_and_symmetry_follow_from_the_coefficients():
    expected = {  # name: (evals_per_step, fsal, symmetric)
        "velocity_verlet": (2, True, True),
        "position_verlet": (1, False, True),
        "forest_ruth": (3, False, True),
        "yoshida4": (4, True, True),
        "omelyan4": (5, True, True),
        "pefrl": (4, False, True),
        "semi_implicit_euler": (1, False, False),
        "bogacki_shampine3": (4, True, False),
        "rk4": (4, False, False),
    }
    for name, claims in expected.items():
        derived = TABLEAUX[name].tableau.claims
        assert (derived.evals_per_step, derived.fsal, derived.symmetric) == claims, name
    # kick ½, drift 0, kick ½ is one kick: the merged sequence of velocity Verlet run twice in a row
    assert tableau(drifts=[0, 0, 1], kicks=["1/4", "1/4", "1/2"]).evals_per_step == 2


def test_a_typo_names_the_first_failing_condition_and_by_how_much():
    with pytest.raises(
        TypeError,
        match=r"declares order = 3, but order conditions hold to order 2; Σ bᵢcᵢ² = 1/3 "
        r"is off by 0\.0833",
    ):

        class ThirdOrderMidpoint(RungeKutta):  # the midpoint rule claiming order 3
            tableau = ButcherTableau(A=((), (1 / 2,)), b=(0, 1))
            order: ClassVar[int] = 3

    with pytest.raises(TypeError, match=r"order conditions hold to order 1; Σ bᵢcᵢ = 1/2 is off by 0\.00667"):

        class TypoRK4(RungeKutta):  # a₃₂ typed 0.52 instead of 0.5
            tableau = ButcherTableau(A=((), (1 / 2,), (0, 0.52), (0, 0, 1)), b=(1 / 6, 1 / 3, 1 / 3, 1 / 6))
            order: ClassVar[int] = 4

    derived = rk_order(((), (1 / 2,), (0, 1 / 2), (0, 0, 1)), (1 / 6, 1 / 3, 0.35, 0.15), (0, 0.5, 0.5, 1))
    assert derived.message().startswith("order conditions hold to order 1; Σ bᵢcᵢ = 1/2 is off by 0.00833")
    derived = rkn_order(*as_nystrom(merged_sequence([0.2, 0.6, 0.2], [0.5, 0.5])))  # Omelyan's λ mistyped as 0.2
    assert derived.order == 2 and derived.failing == "Σ b̄ᵢcᵢ" and "1/6 is off by 0.00667" in derived.message()


def test_wrong_claims_are_refused():
    with pytest.raises(TypeError, match=r"declares symplectic = True, but its symplecticity condition .* is off by"):

        class SymplecticNystrom(RungeKuttaNystrom):
            tableau = NystromTableau(
                ((), (1 / 8,), (0, 1 / 2)), (1 / 6, 1 / 3, 0), (1 / 6, 2 / 3, 1 / 6), (0, 1 / 2, 1)
            )
            symplectic: ClassVar[bool] = True

    with pytest.raises(TypeError, match="declares symplectic = True, but no explicit Runge–Kutta method is"):

        class SymplecticHeun(RungeKutta):
            tableau = ButcherTableau(((), (1,)), (1 / 2, 1 / 2))
            symplectic: ClassVar[bool] = True

    with pytest.raises(TypeError, match="declares symmetric = True, but its sequence is not a palindrome"):

        class SymmetricEuler(Composition):
            tableau = Splitting((0, 1), (1,))
            symmetric: ClassVar[bool] = True

    with pytest.raises(TypeError, match="declares evals_per_step = 3, but it has 2 kicks after merging"):

        class CheapVerlet(Composition):
            tableau = Splitting((0, 1), (1 / 2, 1 / 2))
            evals_per_step: ClassVar[int] = 3

    # the symplecticity conditions hold for every splitting's tableau and for none of the Runge–Kutta–Nyström one here
    for name in SYMPLECTIC:
        ops = merged_sequence(TABLEAUX[name].tableau.drifts, TABLEAUX[name].tableau.kicks)
        assert rkn_symplectic_defect(*as_nystrom(ops))[0] < 1e-14, name
    assert rkn_symplectic_defect(*(getattr(TABLEAUX["nystrom4"].tableau, k) for k in ("A", "bbar", "b", "c")))[0] > 0.01


@pytest.mark.parametrize(
    "coefficients, message",
    [
        ({"A": [[], [1]], "b": [1, 1, 1]}, "A has 2 rows but b has 3 entries"),
        ({"A": [[0, 1], [0.5, 0]], "b": [0, 1]}, "A is not explicit: a12 = 1 is on or above the diagonal"),
        ({"A": [[], [0.5]], "b": [0, 1], "c": [0, 0.6]}, "c2 = 0.6 is not the row sum"),
        ({"A": [[], [0.5]], "b": [0.1, 0.1]}, "not consistent (order 0): order conditions hold to order 0; Σ bᵢ = 1"),
        ({"drifts": [0.5, 0.4], "kicks": [1]}, "Σ drifts = 1 is off by 0.1"),
        ({"drifts": [1, 0, 0], "kicks": [1]}, "3 drifts and 1 kicks do not interleave"),
        ({"A": [[], [0.5]], "bbar": [0.5], "b": [0.5, 0.5], "c": [0, 1]}, "bbar has 1 entries but b has 2"),
        ({"drifts": [1], "b": [1]}, "a splitting takes drifts and kicks, and only them"),
        ({"A": [[], ["1/x"]], "b": [0, 1]}, "A[1][0] must be a number such as 0.5 or 1/3"),
    ],
)
def test_inconsistent_coefficients_are_one_line_errors(coefficients, message):
    with pytest.raises(ValueError, match=re.escape(message)) as error:
        tableau(**coefficients)
    assert "\n" not in str(error.value)


# -- the engine is the schemes it replaced -----------------------------------------------------------------------------


def test_the_engine_steps_as_the_hand_written_formulas():
    g = torch.Generator().manual_seed(0)
    W = torch.randn(5, 5, generator=g, dtype=torch.float64)
    x = torch.randn(3, 5, generator=g, dtype=torch.float64)

    def f(t, x):
        return torch.tanh(x @ W) * math.cos(t)

    t, h = 0.3, 0.2
    k1 = f(t, x)
    k2 = f(t + h / 2, x + h / 2 * k1)
    k3 = f(t + h / 2, x + h / 2 * k2)
    k4 = f(t + h, x + h * k3)
    expected = {
        "euler": x + h * k1,
        "heun": x + h / 2 * (k1 + f(t + h, x + h * k1)),
        "rk4": x + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4),
        "midpoint": x + h * f(t + h / 2, x + h / 2 * k1),
    }
    for name, want in expected.items():
        got, _ = TABLEAUX[name]().step(f, t, x, h, None)
        torch.testing.assert_close(got, want, rtol=1e-14, atol=1e-14)
    assert solvers.STEPPERS["rk4"] is solvers.RK4 is TABLEAUX["rk4"] and issubclass(solvers.Euler, RungeKutta)


def test_a_splitting_kicks_at_the_time_its_drifts_have_reached():
    cls = tableau(drifts=["1/4", "3/4"], kicks=[1])
    times = []
    y, _ = cls.step(lambda t, x: times.append(t) or -x, 1.0, PhaseState(torch.ones(2), torch.ones(2)), 0.4, None)
    assert times == [pytest.approx(1.1)]
    torch.testing.assert_close(y.x, torch.full((2,), 1 + 0.1 + 0.3 * (1 - 0.4 * 1.1)))


# -- every scheme passes the kit: tests/solvers/test_steppers.py runs it on every registered scheme, each measured order
# within 0.3 of the declared one, which the test of the derived claims above holds to the textbook's (KNOWN_ORDERS) --


def test_a_scheme_typed_as_coefficients_passes_the_kit():
    cls = tableau(drifts=["1/6", "2/3", "1/6"], kicks=["1/2", "1/2"])  # a symmetric two-kick member, λ = 1/6
    assert (cls.order, cls.symplectic, cls.reversible, cls.evals_per_step) == (2, True, True, 2)
    check_stepper(cls)


# -- learnable families ------------------------------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(alpha=st.floats(0.2 + 1e-6, 1.5 - 1e-6), lam=st.floats(1e-6, 0.5 - 1e-6))
def test_the_families_meet_their_order_conditions_at_every_parameter(alpha, lam):
    rk2 = solvers.TwoStageRK(alpha0=alpha).double()
    t = rk2.coefficients()
    assert rk_order(tuple(tuple(r) for r in t["A"]), t["b"], t["c"]).order == 2
    two = rkn_order(*as_nystrom(merged_sequence([lam, 1 - 2 * lam, lam], [0.5, 0.5])))
    assert two.order == 2
    w1, w0 = solvers._learnable_composition4.W1, solvers._learnable_composition4.W0
    drifts = [
        lam * w1,
        (1 - 2 * lam) * w1,
        lam * (w1 + w0),
        (1 - 2 * lam) * w0,
        lam * (w0 + w1),
        (1 - 2 * lam) * w1,
        lam * w1,
    ]
    kicks = [w1 / 2, w1 / 2, w0 / 2, w0 / 2, w1 / 2, w1 / 2]
    assert rkn_order(*as_nystrom(merged_sequence(drifts, kicks))).order == 4


def _jacobian(stepper, field, y, dt):
    flat = torch.cat([y.x, y.v])
    n = y.x.numel()

    def one(z):
        y1, _ = stepper.step(field, 0.3, PhaseState(z[:n], z[n:]), dt, None)
        return torch.cat([y1.x, y1.v])

    return torch.autograd.functional.jacobian(one, flat)


@settings(max_examples=10, deadline=None)
@given(theta=st.lists(st.floats(-6, 6), min_size=3, max_size=3), seed=st.integers(0, 2**16), dt=st.floats(0.01, 0.5))
def test_the_splitting_families_stay_symplectic_and_symmetric_at_moved_parameters(theta, seed, dt):
    """One step's Jacobian M has MᵀJM = J, and step(−dt) undoes step(dt), with per-channel λ drawn across (0, ½),
    on a coupled nonlinear force (the kit's full check with moved parameters runs in the slow suite)."""
    g = torch.Generator().manual_seed(seed)
    K = torch.randn(3, 3, generator=g, dtype=torch.float64)
    K = K @ K.T / 3

    def force(t, x):  # -∇(½ xᵀKx + ¼ Σ x⁴) (1 + ½ sin t): Hamiltonian at every frozen time
        return -(x @ K + x**3) * (1 + 0.5 * math.sin(float(t)))

    y = PhaseState(*(0.5 * torch.randn(2, 3, generator=g, dtype=torch.float64)))
    J = torch.zeros(6, 6, dtype=torch.float64)
    J[:3, 3:], J[3:, :3] = torch.eye(3), -torch.eye(3)
    for cls in (solvers.SymmetricSplitting, solvers.TripleJump):
        stepper = cls(dim=3).double()
        with torch.no_grad():
            stepper.theta.copy_(torch.tensor(theta))
        M = _jacobian(stepper, force, y, dt)
        torch.testing.assert_close(M.T @ J @ M, J, rtol=0, atol=1e-11)
        y1, _ = stepper.step(force, 0.3, y, dt, None)
        back, _ = stepper.step(force, 0.3 + dt, y1, -dt, None)
        torch.testing.assert_close(torch.cat(back), torch.cat(y), rtol=0, atol=1e-12)


@pytest.mark.slow  # the kit checks every claim with the parameters also moved from their start (minutes on 2 cores)
@pytest.mark.parametrize("dim", [None, 4])
def test_the_splitting_family_passes_the_kit_with_its_parameters_moved(dim):
    check_stepper(solvers.SymmetricSplitting, dim=dim)


@pytest.mark.slow  # six evaluations a step at order 4: about a minute
@pytest.mark.parametrize("dim", [None, 4])
def test_the_fourth_order_family_passes_the_kit_with_its_parameters_moved(dim):
    check_stepper(solvers.TripleJump, dim=dim)


@pytest.mark.slow  # the kit, with α also moved from its start (about a minute)
def test_the_two_stage_family_passes_the_kit_with_its_parameter_moved():
    check_stepper(solvers.TwoStageRK)


@pytest.mark.slow  # order measurements across α's range (the kit's checks draw problems themselves)
@pytest.mark.parametrize("alpha", [0.25, 0.5, 1.0, 1.45])
def test_the_two_stage_family_has_order_2_wherever_alpha_is(alpha):
    """Order and evaluations (each at ``t + cᵢ dt``, ``c₂ = α``) across α's range, not only at the start and one
    move."""
    rk2 = solvers.TwoStageRK(alpha0=alpha).double()
    check_order(rk2)
    check_evals(rk2)


def test_the_two_stage_family_differentiates_in_its_parameter():
    rk2 = solvers.TwoStageRK().double()
    x = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    field = lambda t, x: torch.sin(x) * torch.cos(torch.as_tensor(t))  # noqa: E731 - differentiable in t too
    assert torch.autograd.gradcheck(
        lambda x, theta: torch.func.functional_call(rk2, {"theta": theta}, (field, 0.3, x, 0.4, None))[0],
        (x, rk2.theta.detach().clone().requires_grad_()),
    )


def test_families_are_learnable_per_layer_and_per_channel_and_keep_their_range():
    model = odeformer.ViT(depth=3, dim=16, heads=2, solver=solvers.SymmetricSplitting)
    thetas = [layer.stepper.theta for layer in model.backbone.layers]
    assert len({id(p) for p in thetas}) == 3 and all(p.shape == (16,) for p in thetas)
    scalar = solvers.SymmetricSplitting(dim=16, per_channel=False)
    assert scalar.theta.shape == ()
    with torch.no_grad():
        scalar.theta.fill_(40.0)
    assert 0 < float(scalar.lam()) <= 0.5
    assert 0.2 < float(solvers.TwoStageRK(alpha0=1.49).alpha()) < 1.5
    with pytest.raises(ValueError, match=r"alpha0 must lie in \(0.2, 1.5\)"):
        solvers.TwoStageRK(alpha0=0.0)
    with pytest.raises(ValueError, match=r"lambda0 must lie in \(0, 1/2\)"):
        solvers.TripleJump(lambda0=0.5)


# -- the tableau solver ------------------------------------------------------------------------------------------------


def test_the_tableau_solver_lays_out_the_layer_its_claims_call_for():
    second = solver("tableau", options={"drifts": ForestRuth.drifts, "kicks": ForestRuth.kicks})
    assert (second.stepper, second.form, second.dt, second.block_stepper) == (
        solvers.Tableau,
        "laplacian",
        0.5,
        solvers.Split,
    )
    assert solver("forest_ruth").stepper is TABLEAUX["forest_ruth"]  # a named one is picked by its name
    with pytest.raises(ValueError, match="a named scheme is picked by its name: solver=forest_ruth"):
        solver("tableau", options={"name": "forest_ruth"})
    first = solver("tableau", options={"A": [[], ["2/3"]], "b": ["1/4", "3/4"]})
    assert (first.form, first.dt, first.block_stepper, first.stepper.order) == ("residual", 1.0, solvers.Whole, 2)
    assert first.scheme["A"] == [[], [2 / 3]] and first.scheme["order"] == 2 and not first.scheme["symplectic"]
    model = odeformer.ViT(depth=2, dim=8, heads=2, solver=second)
    model(torch.randn(2, 1, 8, 8)).sum().backward()
    assert type(model.backbone.layers[0].stepper) is solvers.Tableau
    assert model.backbone.layers[0].stepper.tableau == ForestRuth


@pytest.mark.slow  # two layer-order measurements (about 10 s each)
def test_tableau_layers_measure_their_declared_order():
    splitting = solver("tableau", options={"drifts": [0, 1], "kicks": [0.5, 0.5]})
    assert odeformer.check_solver(splitting)["declared"] == 1
    assert odeformer.check_solver(solver("tableau", options={"A": [[], ["2/3"]], "b": ["1/4", "3/4"]}))["declared"] == 2


@pytest.mark.slow  # trains from the command line (about 10 s); bad coefficients are checked in the default suite
def test_cli_trains_inline_coefficients_and_records_them(tmp_path):
    out = tmp_path / "run"
    done = cli(
        *DEBUG,
        "solver=tableau",
        "solver.options.drifts=[0.2,0.6,0.2]",
        "solver.options.kicks=[0.5,0.5]",
        f"train.out_dir={out}",
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["solver"] == "tableau" and summary["steps"] == 4
    scheme = summary["scheme"]
    assert scheme["drifts"] == [0.2, 0.6, 0.2] and scheme["order"] == 2 and scheme["symplectic"] is True
    assert scheme["order_conditions"].startswith("order conditions hold to order 2; Σ b̄ᵢcᵢ = 1/6 is off by")
    (snapshot,) = (out / ".hydra").iterdir()
    assert "drifts:\n    - 0.2" in (snapshot / "config.yaml").read_text()


@pytest.mark.slow  # a CLI training run (about 10 s)
def test_cli_trains_a_named_tableau(tmp_path):
    out = tmp_path / "run"
    done = cli(*DEBUG, "solver=forest_ruth", f"train.out_dir={out}")
    assert done.returncode == 0, done.stderr
    assert json.loads((out / "summary.json").read_text())["scheme"]["order"] == 4


@pytest.mark.parametrize(
    "args, message",
    [
        (["solver.options.drifts=[0.5,0.4]", "solver.options.kicks=[1]"], "Σ drifts = 1 is off by 0.1"),
        (["solver.options.A=[[0,1],[0.5,0]]", "solver.options.b=[0,1]"], "A is not explicit"),
        (["solver.options.A=[[],[0.5]]", "solver.options.b=[0.1,0.1]"], "order conditions hold to order 0"),
        (["solver.options.name=forest_ruth"], "a named scheme is picked by its name: solver=forest_ruth"),
    ],
)
def test_cli_bad_coefficients_are_one_line_and_exit_2(tmp_path, args, message):
    done = cli_in_process(*DEBUG[:1], "solver=tableau", *args, f"train.out_dir={tmp_path / 'run'}")
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("odeformer-train: error:") and message in lines[0]


@pytest.mark.slow  # the kit, a layer measurement and a few training steps (about 40 s)
def test_the_design_example_proves_measures_and_trains(capsys):
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[2] / "examples" / "design_a_scheme.py"
    spec = importlib.util.spec_from_file_location("design_a_scheme", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    results = module.main(["--steps", "3"])
    claims = results["claims"]
    assert (claims["order"], claims["symplectic"], claims["symmetric"], claims["evals_per_step"], claims["fsal"]) == (
        2,
        True,
        True,
        3,
        True,
    )
    assert all(abs(s - 2) < 0.3 for s in results["order"]) and results["layer"]["declared"] == 1
    assert 0 <= results["accuracy"] <= 1 and "test accuracy" in capsys.readouterr().out


@pytest.mark.slow
def test_the_learned_integrators_sections_compose_and_build():
    """``odeformer-reproduce --sections learned_integrators learned_integrators_text learned_integrators_order4``:
    every row composes, and builds on digits with the scheme it names; the learned rows' coefficients are learnable
    and are what the section's coefficient table reads."""
    from omegaconf import OmegaConf

    import odeformer.app.commands.train as entry
    import odeformer.app.run.builder as builder
    from odeformer.app.reporting.learned import coefficients
    from odeformer.app.run.sections import results_sections

    keys = ("learned_integrators", "learned_integrators_text", "learned_integrators_order4")
    sections = [results_sections()[key] for key in keys]
    assert set(sections[1].rows) == set(sections[0].rows)  # text has the digits section's rows
    for *_, overrides in sections[1].runs()[:: len(sections[1].seeds)]:
        entry.compose(overrides)
    kinds = set()
    for section in (sections[0], sections[2]):
        assert section.learned, section.title
        for _, row, _, _, overrides in section.runs()[:: len(section.seeds)]:
            cfg = entry.compose([*overrides, "model.depth=2", "model.dim=16", "model.heads=2"])
            _, model, _ = builder.build(OmegaConf.to_container(cfg, resolve=True))
            kinds.add(type(model.backbone.layers[1].stepper).__name__)
            found = coefficients(model)
            assert bool(found) == ("learned" in row), row  # a learned row has one coefficient per layer, a fixed none
            assert len(found) in (0, 2) and all(symbol in section.learned for symbol, _ in found)
    expected = {"SymmetricSplitting", "TwoStageRK", "TripleJump", "Omelyan2", "Ralston", "Midpoint", "Heun"}
    assert expected | {"ForestRuth", "Yoshida4", "VelocityVerlet", "PositionVerlet"} <= kinds


def test_dormand_prince_given_inline_reuses_its_last_stage():
    """Dormand–Prince 5 with ``c`` computed from ``A``'s row sums (``c₇`` rounds to 0.9999999999999998): first same
    as last, so ten steps on one field cost 7 + 9 × 6 evaluations, not 7 each (Dormand & Prince, J. Comput. Appl.
    Math. 6 (1980), the 5th-order weights)."""
    A = [
        [],
        [1 / 5],
        [3 / 40, 9 / 40],
        [44 / 45, -56 / 15, 32 / 9],
        [19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729],
        [9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656],
        [35 / 384, 0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84],
    ]
    b = [35 / 384, 0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84, 0]
    dp5 = tableau(A=A, b=b)
    assert (dp5.order, dp5.evals_per_step, dp5.fsal) == (5, 7, True)
    calls = []

    def field(t, x):
        calls.append(t)
        return -x

    x, state, t = torch.ones(3, dtype=torch.float64), None, 0.0
    for _ in range(10):
        x, state = dp5.step(field, t, x, 0.1, state)
        t += 0.1  # as the depth loop advances time
    assert len(calls) == 7 + 9 * 6
