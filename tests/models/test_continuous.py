"""Continuous depth: torchdiffeq and torchode as solver choices, against the discrete steppers and each other."""

import pytest
import torch
import torchdiffeq

import odeformer
import solvers
from odeformer.backbone import transformer
from odeformer.continuous import ContinuousBackbone, continuous
from solvers.testing import linear_problem, pendulum_problem


def _grid_field(seed):
    p = pendulum_problem(seed=seed, forcing=0.5)
    d = p.x0.shape[-1]

    def f(t, y):  # first-order form of the forced pendulum
        return torch.cat([y[..., d:], p.field(t, y[..., :d])], dim=-1)

    return f, torch.cat([p.x0, p.v0], dim=-1)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_torchdiffeq_fixed_grid_rk4_is_the_three_eighths_rule(seed):
    f, y0 = _grid_field(seed)
    n, T = 20, 2.0
    grid = torch.linspace(0, T, n + 1, dtype=torch.float64)
    theirs = torchdiffeq.odeint(f, y0, grid, method="rk4")
    ours = solvers.trajectory(solvers.RK4ThreeEighths(), [f] * n, y0, T / n)
    torch.testing.assert_close(torch.stack(ours), theirs, rtol=1e-10, atol=1e-10)
    # the classic tableau is a different order-4 method: close, not equal
    classic = solvers.integrate(solvers.RK4(), [f] * n, y0, T / n)
    assert 1e-10 < (classic - theirs[-1]).abs().max() < 1e-3


def test_torchdiffeq_euler_is_euler():
    f, y0 = _grid_field(0)
    grid = torch.linspace(0, 1, 11, dtype=torch.float64)
    torch.testing.assert_close(
        torchdiffeq.odeint(f, y0, grid, method="euler")[-1],
        solvers.integrate(solvers.Euler(), [f] * 10, y0, 0.1),
        rtol=1e-12,
        atol=1e-12,
    )


def _block(dynamics, library="torchdiffeq", method="dopri5", **options):
    torch.manual_seed(0)
    preset = continuous(library=library, method=method, equation=dynamics, T=1.0, **options)
    return transformer(depth=2, dim=8, heads=2, solver=preset).double()


def _fine_reference(model, x):
    """The same field on a fine fixed grid (torchdiffeq rk4, 400 steps)."""
    fine = _block(model.solver.equation, method="rk4", steps=400)
    fine.load_state_dict(model.state_dict())
    return fine(x)


@pytest.mark.parametrize("dynamics", ["diffusion", "wave"])
@pytest.mark.parametrize(
    "library, method",
    [("torchdiffeq", "dopri5"), ("torchdiffeq", "bosh3"), ("torchode", "dopri5"), ("torchode", "tsit5")],
)
@torch.no_grad()
def test_adaptive_solutions_converge_as_tolerances_shrink(dynamics, library, method):
    x = torch.randn(2, 5, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    model = _block(dynamics, library, method)
    reference = _fine_reference(model, x)
    errors, nfes = [], []
    for tol in (1e-3, 1e-6, 1e-9):
        m = _block(dynamics, library, method, rtol=tol, atol=tol, max_steps=10000)
        m.load_state_dict(model.state_dict())
        errors.append(float((m(x) - reference).abs().max()))
        nfes.append(m.solver_stats()["nfe"])
    assert errors[0] > errors[1] > errors[2] and errors[2] < 1e-5, errors
    assert nfes[0] < nfes[1] < nfes[2], nfes  # tighter tolerances cost more evaluations


@pytest.mark.parametrize("dynamics", ["diffusion", "wave"])
def test_adjoint_gradients_match_backpropagation(dynamics):
    x = torch.randn(2, 5, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1), requires_grad=True)
    plain = _block(dynamics, rtol=1e-9, atol=1e-9)
    adjoint = _block(dynamics, rtol=1e-9, atol=1e-9, adjoint=True)
    adjoint.load_state_dict(plain.state_dict())
    grads = []
    for model in (plain, adjoint):
        loss = model(x).square().sum()
        grads.append(torch.autograd.grad(loss, [x, *model.parameters()]))
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("method", ["dopri5", "tsit5"])
def test_torchode_samples_do_not_depend_on_their_batch(method):
    model = _block("diffusion", "torchode", method, rtol=1e-5, atol=1e-5)
    g = torch.Generator().manual_seed(2)
    easy = 0.1 * torch.randn(1, 5, 8, dtype=torch.float64, generator=g)
    hard = 10 * torch.randn(3, 5, 8, dtype=torch.float64, generator=g)
    alone = model(easy)
    nfe_alone = model.solver_stats()["nfe"]
    together = model(torch.cat([easy, hard]))[:1]
    torch.testing.assert_close(together, alone, rtol=1e-10, atol=1e-10)
    assert model.solver_stats()["nfe"] >= nfe_alone


@pytest.mark.parametrize(
    "name, options",
    [
        ("tsit5", {"library": "torchode", "method": "tsit5"}),
        ("dopri5", {}),
        ("dopri5_wave", {"dynamics": "wave"}),
        ("bosh3_adjoint", {"method": "bosh3", "adjoint": True}),
    ],
)
def test_padding_does_not_change_a_sequences_features(name, options):
    """The error norm counts only real tokens, so a sentence's adaptive steps do not depend on its padding (before,
    5 or 20 pad tokens moved its features by up to 8e-4 in float64). torchode controls each sequence's steps, so a
    batch of differently padded sentences gives each its own features; torchdiffeq's step is shared, so one alone."""
    torch.manual_seed(0)
    model = odeformer.MaskedLM(vocab_size=20, max_len=32, depth=2, dim=16, heads=2, solver=continuous(**options))
    model = model.double()
    g = torch.Generator().manual_seed(4)
    sentences = [torch.randint(1, 20, (1, n), generator=g) for n in (10, 7)]
    if options.get("library") != "torchode":
        sentences = sentences[:1]
    width = 30
    padded = torch.cat([torch.cat([s, torch.zeros(1, width - s.shape[1], dtype=torch.long)], 1) for s in sentences])
    together = model.encode(padded)
    for i, sentence in enumerate(sentences):
        alone = model.encode(sentence)
        torch.testing.assert_close(together[i : i + 1, : sentence.shape[1]], alone, rtol=1e-10, atol=1e-10)
    if options.get("adjoint"):  # the backward pass solves with the same norm, and its gradients agree too
        grads = [
            torch.autograd.grad(model.encode(tokens)[:, :10].sum(), model.embed.tokens.weight)[0]
            for tokens in (sentences[0], padded)
        ]
        torch.testing.assert_close(grads[1], grads[0], rtol=1e-6, atol=1e-8)


def test_error_norm_counts_the_tokens_some_query_attends_to():
    backbone = _block("wave")
    x = torch.zeros(2, 4, 8, dtype=torch.float64)
    keys = torch.tensor([[True, True, False, False], [False, False, False, False]])[:, None, None, :]
    weights = backbone._error_weights(keys, x).view(2, 2, 4, 8)  # wave: [x, v] each weighted alike
    assert weights[0, :, :2].eq(1).all() and weights[0, :, 2:].eq(0).all()
    assert weights[1].eq(1).all()  # a sequence with no real token counts all of its own (no 0 / 0)
    graph = torch.eye(4, dtype=torch.bool)  # every node attends to itself: all count, the default norm
    assert backbone._error_weights(graph, x) is None and backbone._error_weights(None, x) is None


@pytest.mark.parametrize("dynamics, preset", [("diffusion", "diffusion"), ("wave", "full_wave")])
@torch.no_grad()
def test_continuous_block_is_the_limit_of_the_discrete_preset(dynamics, preset):
    """Discrete layers sharing one block, dt = T / L, approach the continuous solution at order 1."""
    torch.manual_seed(0)
    x = torch.randn(2, 5, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    smooth = _block(dynamics, rtol=1e-10, atol=1e-10)
    target = smooth(x)
    errors = []
    for layers in (8, 32, 128):
        discrete = transformer(depth=layers, dim=8, heads=2, solver=preset, dt=1.0 / layers, tie_weights=True).double()
        first = discrete.layers[0]
        first.attention.load_state_dict(smooth.field.attention.state_dict())
        first.ffn.load_state_dict(smooth.field.ffn.state_dict())
        discrete.norm.load_state_dict(smooth.norm.state_dict())
        errors.append(float((discrete(x) - target).abs().max()))
    rates = [errors[i] / errors[i + 1] for i in range(2)]
    assert all(3.0 < r < 5.5 for r in rates), (errors, rates)  # order 1: a 4x finer step, a 4x smaller error


def test_solver_statistics_and_trajectory():
    model = odeformer.ViT(depth=4, dim=16, heads=2, solver=continuous())
    states = model.trajectory(torch.randn(2, 1, 8, 8))
    assert len(states) == 5
    stats = model.solver_stats()
    assert stats["nfe"] >= 6 * stats["steps_accepted"] and stats["steps_rejected"] >= 0
    wave = odeformer.ViT(depth=2, dim=16, heads=2, solver=continuous(equation="wave"))
    assert isinstance(wave.trajectory(torch.randn(2, 1, 8, 8))[-1], solvers.PhaseState)
    assert isinstance(wave.backbone, ContinuousBackbone) and wave.backbone.second_order


@pytest.mark.parametrize(
    "options, message",
    [
        ({"method": "euler_maruyama"}, "method 'euler_maruyama' is not available with torchdiffeq; choose one of"),
        ({"library": "torchode", "method": "bosh3"}, "choose one of dopri5, tsit5"),
        ({"library": "diffrax"}, "library must be one of torchdiffeq, torchode"),
        ({"rtol": -1e-3}, "rtol must be positive and finite"),
        ({"atol": 0.0}, "atol must be positive and finite"),
        ({"T": 0.0}, "T must be positive and finite"),
        ({"dynamics": "heat"}, "equation must be one of diffusion, wave"),
        ({"library": "torchode", "method": "tsit5", "adjoint": True}, "adjoint=True is available with"),
        ({"tolerance": 1e-3}, "bad continuous solver option"),
    ],
)
def test_bad_options_are_clear_errors(options, message):
    with pytest.raises(ValueError, match=message) as info:
        continuous(**options)
    assert "\n" not in str(info.value)


def test_linear_problem_sanity():
    """dopri5 through the ContinuousBackbone machinery integrates a known linear ODE to its tolerance."""
    p = linear_problem(seed=0, dim=3)
    grid = torch.tensor([0.0, p.T], dtype=torch.float64)
    y = torchdiffeq.odeint(p.field, p.x0, grid, method="dopri5", rtol=1e-10, atol=1e-10)[-1]
    ref = solvers.integrate(solvers.RK4(), [p.field] * 2000, p.x0, p.T / 2000)
    torch.testing.assert_close(y, ref, rtol=1e-8, atol=1e-8)


def test_fixed_grid_records_off_grid_layer_times_to_the_methods_accuracy():
    """Depth 6 on a grid of 8 steps: the recorded states at t_k = k T / 6 fall between grid points. They are
    interpolated by cubic Hermite (error of the grid's order), not linearly (which was 1e-4 to 1e-3 off here), and
    recording leaves the output unchanged."""
    x = torch.randn(2, 5, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))

    def block(**options):
        torch.manual_seed(0)
        return transformer(depth=6, dim=8, heads=2, solver=continuous(**options)).double()

    exact, grid = block(rtol=1e-12, atol=1e-12, max_steps=100000), block(method="rk4", steps=8)
    grid.load_state_dict(exact.state_dict())
    with torch.no_grad():
        reference, recorded = [], []
        exact(x, record=reference)
        out = grid(x, record=recorded)
        unrecorded = grid(x)
    torch.testing.assert_close(out, unrecorded, rtol=0, atol=0)
    on_grid = float((reference[-1] - recorded[-1]).abs().max())  # T is a grid point: the method's own error
    off_grid = max(float((a - b).abs().max()) for a, b in zip(reference, recorded))
    assert off_grid < 50 * max(on_grid, 1e-9) and off_grid < 1e-5
