"""The stability atlas and the refinement test, where the answer is known: a linear field (fixed row-stochastic
attention, no FFN, no norm), whose prediction is exact and whose stability bounds are closed forms, and smooth
models whose refinement converges at their scheme's order (float64)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import odeformer
from odeformer import Fields, transformer
from odeformer.atlas import atlas, headroom, krylov, radius, refinement

N, D = 5, 3


class FixedAttention(nn.Module):
    """``(A − I) x`` (laplacian) or ``A x`` (residual) with a fixed row-stochastic ``A``: a linear field."""

    def __init__(self, A: torch.Tensor, form: str):
        super().__init__()
        self.register_buffer("A", A)
        self.form = form

    def forward(self, t, x):
        y = torch.einsum("nm,bmd->bnd", self.A, x)
        return y - x if self.form == "laplacian" else y


def _attention(seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    S = torch.rand(N, N, generator=g, dtype=torch.float64)
    S = S + S.T
    return S / S.sum(1, keepdim=True)  # row-stochastic, similar to a symmetric matrix: real spectrum in [-1, 1]


def _linear(solver, dt, A, depth=3):
    fields = Fields(attention=lambda form: FixedAttention(A, form), ffn=None, final_norm=False)
    return transformer(depth, D, 1, solver, dt=dt, fields=fields).double()


def _state(seed: int = 1) -> torch.Tensor:
    return torch.randn(2, N, D, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize("solver", ["diffusion", "full_wave", "rk4", "velocity_verlet", "damped", "heun"])
def test_on_a_linear_field_the_prediction_is_the_measurement(solver):
    """Each layer's predicted contraction (its scheme on the field linearised at its input) equals the Dirichlet
    energy ratio the layer itself gives, and the Krylov space closes on the state's modes."""
    A = _attention()
    for entry in atlas(_linear(solver, 0.4, A), (_state(),)):
        assert entry["predicted_contraction"] == pytest.approx(entry["measured_contraction"], rel=1e-10)
        assert entry["krylov"] <= 2 * N  # the state's modes (and the velocity's): the space is invariant


def test_the_eigenvalues_are_the_fields_own():
    """On ``(A − I) x`` the Ritz values are the eigenvalues of ``A − I`` (each of multiplicity ``D`` in the state's
    space, seen once from one start)."""
    A = _attention()
    (first, *_) = atlas(_linear("full_wave", 0.4, A, depth=1), (_state(),))
    got = sorted(complex(re, im).real for re, im in first["eigenvalues"])
    want = sorted(torch.linalg.eigvals(A - torch.eye(N, dtype=torch.float64)).real.tolist())
    assert got == pytest.approx(want, abs=1e-10)


def test_krylov_on_a_matrix_is_its_projection():
    g = torch.Generator().manual_seed(2)
    M = torch.randn(6, 6, generator=g, dtype=torch.float64)
    Q, H = krylov(lambda v: M @ v, [torch.randn(6, generator=g, dtype=torch.float64)], size=6)
    torch.testing.assert_close(Q.T @ Q, torch.eye(6, dtype=torch.float64), rtol=0, atol=1e-12)
    torch.testing.assert_close(Q @ H @ Q.T, M, rtol=0, atol=1e-10)


@pytest.mark.parametrize(
    "solver, bound",
    [  # the largest stable step on x' = μx (x'' = μx) for μ in [-2, 0], with μ_max the most negative eigenvalue
        (odeformer.solver("diffusion", form="laplacian"), lambda mu: 2 / mu),  # Euler: |1 + dt μ| <= 1
        ("full_wave", lambda mu: 2 / math.sqrt(mu)),  # semi-implicit Euler: dt² |μ| <= 4
        ("velocity_verlet", lambda mu: 2 / math.sqrt(mu)),  # Verlet's interval in ω dt is 2
    ],
)
def test_headroom_is_the_closed_form_bound_just_inside_and_just_outside(solver, bound):
    A = _attention()
    mu = float(-torch.linalg.eigvals(A - torch.eye(N, dtype=torch.float64)).real.min())
    largest = bound(mu)
    for factor in (0.98, 1.02):
        dt = factor * largest
        (entry, *_) = atlas(_linear(solver, dt, A, depth=1), (_state(),))
        assert entry["headroom"] == pytest.approx(1 / factor, rel=1e-4)
        assert (entry["headroom"] > 1) == (factor < 1)


def test_radius_reads_the_schemes_own_parameters():
    """Heavy ball's radius at λ = −1: the companion matrix's; damping shrinks the wave's."""
    import solvers

    lam = torch.tensor([-1.0 + 0j], dtype=torch.complex128)
    beta = 0.5
    heavy = solvers.LightWave(theta0=math.log(beta / (1 - beta)))
    dt = 0.5  # r² − (1 + dt λ + β) r + β = 0
    roots = torch.linalg.eigvals(torch.tensor([[1 - dt + beta, -beta], [1.0, 0.0]], dtype=torch.float64)).abs()
    assert float(radius(heavy, dt, lam)) == pytest.approx(float(roots.max()), rel=1e-10)  # its companion matrix
    leapfrog = solvers.Leapfrog()  # Verlet's positions: neutral inside ω dt < 2, growing beyond
    assert float(radius(leapfrog, 1.0, lam * 3.0)) == pytest.approx(1.0, abs=1e-9)
    assert float(radius(leapfrog, 1.0, lam * 4.5)) > 1.1
    wave, damped = solvers.SemiImplicitEuler(), solvers.Damped(gamma=1.0)
    assert float(radius(wave, dt, lam)) == pytest.approx(1.0, abs=1e-12)
    assert float(radius(damped, dt, lam)) < 1.0
    assert headroom(wave, 1.0, lam) == pytest.approx(2.0, rel=1e-6)


@pytest.mark.parametrize(
    "solver, order",
    [
        ("rk4", 4),
        ("heun", 2),
        ("diffusion", 1),
        ("full_wave", 1),
        (odeformer.solver("velocity_verlet", splitting="strang"), 2),
    ],
)
def test_refinement_converges_at_the_schemes_order_on_a_smooth_model(solver, order):
    """Splitting each layer's step into k steps of dt/k converges to the ODE the layers discretise, at the layer's
    order (whole-block schemes their own; Lie 1; Strang 2)."""
    torch.manual_seed(0)
    model = odeformer.ViT(depth=3, dim=16, heads=2, solver=solver, dt=0.25).double().eval()
    with torch.no_grad():
        model.cls_token.normal_()  # a [CLS] token of the patches' size: LayerNorm is smooth there, not near zero
    images = torch.randn(4, 1, 8, 8, dtype=torch.float64)
    found = refinement(model, (images,), parts=(2, 4, 8, 16))
    assert abs(found["observed_order"] - order) < 0.3, found
    assert abs(found["local_orders"][-1] - order) < 0.3 and len(found["local_orders"]) == 3, found  # the finest
    changes = [row["logit_change"] for row in found["refinement"]]
    assert changes == sorted(changes, reverse=True) and changes[-1] == 0.0
    assert model.backbone.resolution == 1  # restored


def test_the_atlas_refuses_a_continuous_model():
    model = odeformer.ViT(depth=2, dim=8, heads=2, solver="dopri5")
    with pytest.raises(ValueError, match="continuous-depth model has one adaptive block"):
        atlas(model, (torch.randn(1, 1, 8, 8),))
