"""Over-smoothing measures on inputs with known answers, and their invariances."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import odeformer
from odeformer.diagnostics import (
    dirichlet_energy,
    layer_measures,
    rank_collapse,
    spectral_gap,
    token_cosine,
    wave_energy,
)

seeds = st.integers(0, 2**31 - 1)


def _h(seed, B=2, N=6, D=5):
    return torch.randn(B, N, D, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@given(seed=seeds, n=st.integers(2, 9))
def test_identical_tokens(seed, n):
    token = _h(seed, N=1)
    h = token.expand(-1, n, -1)
    torch.testing.assert_close(token_cosine(h), torch.ones(2, dtype=torch.float64))
    assert torch.all(dirichlet_energy(h).abs() < 1e-12)
    assert torch.all(rank_collapse(h) < 1e-12)


def test_two_tokens_by_hand():
    h = torch.tensor([[[1.0, 0.0], [0.0, 2.0]]], dtype=torch.float64)
    assert float(token_cosine(h)) == pytest.approx(0.0)
    # (1/4) * (‖h0 - h1‖² twice) = (1/4) * 2 * 5
    assert float(dirichlet_energy(h)) == pytest.approx(2.5)
    assert float(dirichlet_energy(h, torch.tensor([[0], [1]]))) == pytest.approx(5 / 2)
    # mean (0.5, 1); deviations (0.5, -1), (-0.5, 1): ‖·‖_F² = 2.5, ‖X‖_F² = 5
    assert float(rank_collapse(h)) == pytest.approx(math.sqrt(0.5))
    A = torch.tensor([[[0.5, 0.5], [0.5, 0.5]]], dtype=torch.float64)
    assert float(spectral_gap(A)) == pytest.approx(1.0)
    assert float(spectral_gap(torch.eye(2, dtype=torch.float64)[None])) == pytest.approx(0.0)
    # at rest: potential only, (1/2) * (1/4) * (0.5 * 5 + 0.5 * 5)
    assert float(wave_energy(h, h, 0.5, A)) == pytest.approx(0.625)
    assert float(token_cosine(torch.tensor([[[1.0, 0.0], [-1.0, 0.0]]]))) == pytest.approx(-1.0)


@given(seed=seeds)
def test_measures_are_invariant_to_token_permutation(seed):
    h = _h(seed)
    perm = torch.randperm(6, generator=torch.Generator().manual_seed(seed))
    for measure in (token_cosine, dirichlet_energy, rank_collapse):
        torch.testing.assert_close(measure(h[:, perm]), measure(h))
    A = torch.softmax(_h(seed + 1, N=6, D=6), -1)
    torch.testing.assert_close(spectral_gap(A[:, perm][:, :, perm]), spectral_gap(A), rtol=1e-8, atol=1e-8)
    h2 = _h(seed + 2)
    torch.testing.assert_close(
        wave_energy(h[:, perm], h2[:, perm], 0.3, A[:, perm][:, :, perm]), wave_energy(h, h2, 0.3, A)
    )


def _doubly_stochastic(seed, n):
    """A symmetric doubly stochastic matrix: a convex mix of permutation matrices, symmetrised."""
    g = torch.Generator().manual_seed(seed)
    weights = torch.rand(4, generator=g, dtype=torch.float64)
    weights = weights / weights.sum()
    M = sum(w * torch.eye(n, dtype=torch.float64)[torch.randperm(n, generator=g)] for w in weights)
    return 0.5 * (M + M.T)


@given(seed=seeds, n=st.integers(2, 10), dt=st.floats(0.0, 1.0))
def test_diffusion_with_symmetric_doubly_stochastic_attention_never_raises_dirichlet_energy(seed, n, dt):
    A = _doubly_stochastic(seed, n)
    h = _h(seed, B=1, N=n)
    after = h + dt * (A @ h - h)  # one Euler step of dX/dt = (A - I) X
    assert float(dirichlet_energy(after)) <= float(dirichlet_energy(h)) * (1 + 1e-12) + 1e-12


def test_cls_token_can_be_dropped():
    h = torch.zeros(1, 3, 2)
    h[0, 0] = torch.tensor([1.0, 0.0])  # CLS points elsewhere
    h[0, 1:] = torch.tensor([0.0, 1.0])
    assert float(token_cosine(h, drop_first=True)) == pytest.approx(1.0)
    assert float(token_cosine(h)) < 1.0


@pytest.mark.parametrize("solver", ["diffusion", "full_wave"])
def test_layer_measures_on_a_model(solver):
    torch.manual_seed(0)
    model = odeformer.ViT(depth=3, dim=16, heads=2, solver=solver)
    out = layer_measures(model, torch.randn(4, 1, 8, 8), drop_first=True)
    assert out["depth"] == [0, 1, 2, 3]
    for key in ("cosine", "dirichlet", "rank_collapse"):
        assert len(out[key]) == 4 and all(math.isfinite(v) for v in out[key])
    assert len(out["spectral_gap"]) == 3 and all(0 <= g <= 1 for g in out["spectral_gap"])
    assert len(out["wave_energy"]) == 3
    assert ("phase" in out) == (solver == "full_wave")


def test_layer_measures_on_a_graph():
    torch.manual_seed(0)
    model = odeformer.NodeClassifier(5, 3, depth=2, dim=8)
    edges = torch.randint(0, 9, (2, 20))
    out = layer_measures(model, torch.randn(9, 5), edges, edge_index=edges)
    assert len(out["graph_dirichlet"]) == 3
