"""Per-layer measures of over-smoothing and of depth dynamics; tested functions, no plotting.

Token states ``h`` have shape ``(B, N, D)`` (a batch of ``N`` tokens); every measure returns one value per sample
``(B,)`` unless it says otherwise:

- :func:`token_cosine`: mean pairwise cosine similarity between distinct tokens (1 when all tokens point the same way).
- :func:`dirichlet_energy`: ``(1/N²) Σ_{j,k} ‖h_j - h_k‖²`` on the complete graph, or ``(1/N) Σ_{(j,k) ∈ E} ‖h_j -
  h_k‖²`` over the directed edges of a given graph (each undirected edge counted both ways).
- :func:`rank_collapse`: ``‖X - 1 mean(X)ᵀ‖_F / ‖X‖_F``, 0 when every token equals the mean token.
- :func:`wave_energy`: ``(1/N) [½ Σ_j ‖(h'_j - h_j)/dt‖² + ¼ Σ_{j,k} A_jk ‖h_j - h_k‖²]`` between consecutive layers
  ``h -> h'``: kinetic plus the attention-weighted potential whose gradient is the wave force ``(A - I) h`` (for
  symmetric ``A``).
- :func:`spectral_gap`: ``1 - |λ₂(A)|`` of row-stochastic attention matrices ``(..., N, N)``: how fast diffusion by
  ``A`` mixes; 0 means some direction is never smoothed.

:func:`layer_measures` runs a task model on a batch and returns every measure at every layer.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from solvers import PhaseState


def _tokens(h: Tensor, drop_first: bool = False) -> Tensor:
    if h.dim() != 3:
        raise ValueError(f"token states must have shape (B, N, D), got {tuple(h.shape)}.")
    return h[:, 1:] if drop_first else h


def token_cosine(h: Tensor, drop_first: bool = False) -> Tensor:
    """Mean cosine similarity over pairs of distinct tokens; ``drop_first`` leaves out a [CLS] token."""
    h = _tokens(h, drop_first)
    n = h.shape[1]
    if n < 2:
        raise ValueError("token_cosine needs at least two tokens.")
    unit = torch.nn.functional.normalize(h, dim=-1)
    gram = unit @ unit.transpose(1, 2)  # (B, N, N)
    return (gram.sum((1, 2)) - gram.diagonal(dim1=1, dim2=2).sum(-1)) / (n * (n - 1))


def dirichlet_energy(h: Tensor, edge_index: Tensor | None = None) -> Tensor:
    """Dirichlet energy on the complete graph (``edge_index=None``) or on the given directed edges ``(2, E)``."""
    h = _tokens(h)
    n = h.shape[1]
    if edge_index is None:
        # (1/N²) Σ_jk ‖h_j - h_k‖² = 2 (mean ‖h_j‖² - ‖mean h‖²)
        return 2 * (h.square().sum(-1).mean(-1) - h.mean(1).square().sum(-1))
    difference = h[:, edge_index[0]] - h[:, edge_index[1]]  # (B, E, D)
    return difference.square().sum((-1, -2)) / n


def rank_collapse(h: Tensor) -> Tensor:
    """``‖X - 1 mean(X)ᵀ‖_F / ‖X‖_F`` per sample (0: all tokens equal)."""
    h = _tokens(h)
    return (h - h.mean(1, keepdim=True)).flatten(1).norm(dim=-1) / h.flatten(1).norm(dim=-1).clamp_min(1e-30)


def wave_energy(h: Tensor, h_next: Tensor, dt: float, attention: Tensor) -> Tensor:
    """Kinetic plus attention-weighted potential energy per token between layers ``h -> h_next``.

    ``attention`` is ``(B, N, N)`` or ``(B, heads, N, N)`` (heads are averaged).
    """
    h, h_next = _tokens(h), _tokens(h_next)
    if attention.dim() == 4:
        attention = attention.mean(1)
    n = h.shape[1]
    kinetic = 0.5 * ((h_next - h) / dt).square().sum((-1, -2))
    squared = torch.cdist(h, h).square()  # (B, N, N): ‖h_j - h_k‖²
    potential = 0.25 * (attention * squared).sum((-1, -2))
    return (kinetic + potential) / n


def spectral_gap(attention: Tensor) -> Tensor:
    """``1 - |λ₂|`` for each row-stochastic matrix in ``(..., N, N)`` (``λ₁ = 1``)."""
    return gap_from_eigenvalues(torch.linalg.eigvals(attention.double())).to(attention.dtype)


def gap_from_eigenvalues(eigenvalues: Tensor) -> Tensor:
    """``1 - |λ₂|`` from the eigenvalues ``(..., n)`` of a row-stochastic matrix (zeros may be left out)."""
    moduli = eigenvalues.abs().sort(dim=-1, descending=True).values
    if moduli.shape[-1] < 2:
        raise ValueError("spectral_gap needs at least two tokens.")
    return 1 - moduli[..., 1]


MEASURES = ("cosine", "dirichlet", "rank_collapse", "spectral_gap", "wave_energy")


@torch.no_grad()
def layer_measures(
    model: Any, *inputs: Any, drop_first: bool = False, edge_index: Tensor | None = None, **context: Any
) -> dict[str, Any]:
    """Every measure at every layer of ``model`` (a task model with a ``backbone``, discrete or continuous: then at
    its ``depth`` recorded times) on one batch ``inputs``.

    Returns ``{"depth": [0..L], "dt": [...], "cosine": [...], "dirichlet": [...], "rank_collapse": [...],
    "spectral_gap": [...] (L values, per layer input), "wave_energy": [...] (L values), "graph_dirichlet": [...]
    (with ``edge_index``)}``, each value the batch mean, plus ``"phase"``: per layer ``(x, v)`` of the first sample's
    first token for the first channels when the layers carry a velocity.
    """
    model.eval()
    states = model.trajectory(*inputs)
    xs = [s.x if isinstance(s, PhaseState) else s for s in states]
    steps = _steps(model.backbone, len(xs) - 1)
    out: dict[str, Any] = {"depth": list(range(len(xs))), "dt": [dt for _, dt in steps]}
    out["cosine"] = [float(token_cosine(x, drop_first).mean()) for x in xs]
    out["dirichlet"] = [float(dirichlet_energy(x).mean()) for x in xs]
    out["rank_collapse"] = [float(rank_collapse(x).mean()) for x in xs]
    if edge_index is not None:
        out["graph_dirichlet"] = [float(dirichlet_energy(x, edge_index).mean()) for x in xs]
    gaps, energies = [], []
    for (field, dt), x, x_next in zip(steps, xs, xs[1:]):
        inner = getattr(field, "attention", field)  # graph fields wrap an attention module
        attention = inner.weights(x, context.get("attn_mask"))
        low_rank = getattr(inner, "eigenvalues", None)  # large N: the spectrum without an N x N eigensolve
        gap = gap_from_eigenvalues(low_rank(x)) if low_rank is not None else spectral_gap(attention)
        gaps.append(float(gap.mean()))
        energies.append(float(wave_energy(x, x_next, dt, attention).mean()))
    out["spectral_gap"], out["wave_energy"] = gaps, energies
    if any(isinstance(s, PhaseState) for s in states):
        out["phase"] = [
            {"x": s.x[0, 0, :4].tolist(), "v": s.v[0, 0, :4].tolist()} if isinstance(s, PhaseState) else None
            for s in states
        ]
    return out


def _steps(backbone: Any, count: int) -> list[tuple[Any, float]]:
    """``(attention field, dt)`` per recorded step: a discrete backbone's layers, or a continuous backbone's tied
    field at its ``count`` evenly spaced output times."""
    if backbone.layers:
        return [(layer.attention, layer.dt) for layer in backbone.layers]
    return [(backbone.field.attention, backbone.preset.T / count)] * count
