"""Per-layer measures of over-smoothing and of depth dynamics; tested functions, no plotting.

Token states ``h`` have shape ``(B, N, D)`` (a batch of ``N`` tokens ``h_1 … h_N`` in ``R^D``); every measure returns
one value per sample ``(B,)`` unless it says otherwise:

- :func:`token_cosine`: mean pairwise cosine similarity between distinct tokens (1 when all tokens point the same way).
- :func:`dirichlet_energy`: the raw energy ``E(h) = (1/N²) Σ_{j,k} ‖h_j - h_k‖²`` on the complete graph, or
  ``(1/N) Σ_{(j,k) ∈ E} ‖h_j - h_k‖²`` over the directed edges of a given graph (each undirected edge counted both
  ways). It scales as ``c²`` under ``h -> c h``: it grows when token norms grow, even while directions collapse.
- :func:`normalised_dirichlet_energy`: the scale-free energy ``E(h) / ((1/N) Σ_i ‖h_i‖²)`` (Cai & Wang 2020; Rusch,
  Bronstein & Mishra 2023): invariant to ``h -> c h``, 0 iff the tokens are equal (along every edge), at most 2 on
  the complete graph, where it equals ``2 · rank_collapse(h)²``.
- :func:`feature_variance`: the variance of each channel across tokens, averaged over channels,
  ``(1/D) Σ_c (1/N) Σ_i (h_ic - mean_i h_ic)²`` (node-feature variance); it equals ``E(h) / (2D)``.
- :func:`rank_collapse`: ``‖X - 1 mean(X)ᵀ‖_F / ‖X‖_F``, 0 when every token equals the mean token.
- :func:`wave_energy`: ``(1/N) [½ Σ_j ‖(h'_j - h_j)/dt‖² + ¼ Σ_{j,k} A_jk ‖h_j - h_k‖²]`` between consecutive layers
  ``h -> h'``: the kinetic energy of the difference quotient ``(h' - h)/dt`` (the only velocity a first-order run
  has; a second-order run's carried velocity is not used) plus the attention-weighted potential whose gradient is the
  wave force ``(A - I) h`` (for symmetric ``A``).
- :func:`spectral_gap`: ``1 - |λ₂(A)|`` of row-stochastic attention matrices ``(..., N, N)``: how fast diffusion by
  ``A`` mixes; 0 means some direction is never smoothed. Per head, then averaged over heads; for an attention whose
  heads share the values and are averaged (DIFFormer's simple kernel), the gap of the head-averaged matrix, which is
  the operator it applies.

:func:`layer_measures` runs a task model on a batch and returns every measure at every layer.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from solvers import PhaseState

from .fields import graph_mask


def _tokens(h: Tensor, drop_first: bool = False, mask: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """``(h, w, n)``: the token states (without the first if ``drop_first``), a ``(B, N, 1)`` weight that is 1 on the
    tokens that count (``mask``: True on real tokens; padding is left out) and 0 elsewhere, and ``n`` ``(B,)`` their
    number."""
    if h.dim() != 3:
        raise ValueError(f"token states must have shape (B, N, D), got {tuple(h.shape)}.")
    if mask is not None and tuple(mask.shape) != tuple(h.shape[:2]):
        raise ValueError(f"token mask must have shape (B, N) = {tuple(h.shape[:2])}, got {tuple(mask.shape)}.")
    w = torch.ones(h.shape[:2], dtype=h.dtype, device=h.device) if mask is None else mask.to(h.dtype)
    if drop_first:
        h, w = h[:, 1:], w[:, 1:]
    return h, w.unsqueeze(-1), w.sum(1)


def _centred(h: Tensor, w: Tensor, n: Tensor) -> Tensor:
    """``h - mean h`` over the counted tokens, zero on the others."""
    return (h - (w * h).sum(1, keepdim=True) / n.clamp_min(1)[:, None, None]) * w


def _nonzero(t: Tensor) -> Tensor:
    """``t`` with its zeros replaced by 1: a divisor for ratios defined as 0 where ``t`` is (every token 0)."""
    return torch.where(t > 0, t, torch.ones_like(t))


def _unit_scale(h: Tensor, w: Tensor) -> Tensor:
    """``h`` divided, per sample, by its largest entry over the counted tokens (a sample of zeros stays zero): a
    scale-free measure computed on it cannot overflow or underflow, whatever the tokens' scale (a diverging run's
    1e20, a collapsing one's 1e-30)."""
    peak = (w * h).abs().amax(dim=(1, 2), keepdim=True)  # (B, 1, 1)
    return h / _nonzero(peak)


def token_cosine(h: Tensor, drop_first: bool = False, mask: Tensor | None = None) -> Tensor:
    """Mean cosine similarity over pairs of distinct tokens; ``drop_first`` leaves out a [CLS] token, ``mask``
    (``(B, N)``, True on real tokens) padding."""
    h, w, n = _tokens(h, drop_first, mask)
    if int(n.min()) < 2:
        raise ValueError("token_cosine needs at least two tokens.")
    unit = torch.nn.functional.normalize(_unit_scale(h, w), dim=-1) * w
    gram = unit @ unit.transpose(1, 2)  # (B, N, N), zero on pairs with a padded token
    return (gram.sum((1, 2)) - gram.diagonal(dim1=1, dim2=2).sum(-1)) / (n * (n - 1))


def dirichlet_energy(h: Tensor, edge_index: Tensor | None = None, mask: Tensor | None = None) -> Tensor:
    """Dirichlet energy on the complete graph of the real tokens (``edge_index=None``; ``mask`` ``(B, N)``, True on
    real tokens, leaves padding out) or on the given directed edges ``(2, E)``."""
    h, w, n = _tokens(h, mask=mask)
    if edge_index is None:
        # (1/N²) Σ_jk ‖h_j - h_k‖² = (2/N) Σ_j ‖h_j - mean h‖²; the centred form never rounds below 0
        return 2 * _centred(h, w, n).square().sum((-1, -2)) / n
    if mask is not None:
        raise ValueError("dirichlet_energy takes a token mask or a graph's edges, not both.")
    if edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise ValueError(f"edge_index must have shape (2, E), got {tuple(edge_index.shape)}.")
    size = h.shape[1]
    if edge_index.numel() and (edge_index.min() < 0 or edge_index.max() >= size):
        raise ValueError(
            f"edge_index must hold token ids in [0, {size}), got [{edge_index.min()}, {edge_index.max()}]."
        )
    difference = h[:, edge_index[0]] - h[:, edge_index[1]]  # (B, E, D)
    return difference.square().sum((-1, -2)) / size


def normalised_dirichlet_energy(h: Tensor, edge_index: Tensor | None = None, mask: Tensor | None = None) -> Tensor:
    """The scale-free Dirichlet energy ``E(h) / ((1/N) Σ_i ‖h_i‖²)``, ``E`` as in :func:`dirichlet_energy` (``N``
    and the sums over the real tokens when ``mask`` is given).

    - Invariant to ``h -> c h`` for every ``c ≠ 0`` (numerator and denominator both scale by ``c²``).
    - Complete graph: ``E(h) = (2/N) Σ_i ‖h_i - h̄‖²``, so the ratio is ``2 (1 - ‖h̄‖² / mean_i ‖h_i‖²)
      = 2 · rank_collapse(h)²`` (``h̄`` the mean token): 0 iff all tokens are equal, at most 2, and 2 exactly when
      the mean token is 0.
    - Graph ``(2, E)``: ``Σ_{(j,k) ∈ E} ‖h_j - h_k‖² / Σ_i ‖h_i‖²``: 0 iff the tokens are equal along every edge, at
      most ``2 max_i (out_i + in_i)`` (``out_i``, ``in_i`` the edges leaving and entering ``i``; from
      ``‖a - b‖² ≤ 2‖a‖² + 2‖b‖²``), attained by ``h_1 = -h_2`` on one edge counted both ways.

    When every token is 0 (all equal, norm 0) the value is defined as 0.
    """
    _, w, n = _tokens(h, mask=mask)
    h = _unit_scale(h, w)  # the ratio is scale-free: computed at unit scale, it neither overflows nor underflows
    energy = dirichlet_energy(h, edge_index, mask)
    scale = (w * h).square().sum((-1, -2)) / n  # (B,): (1/N) Σ_i ‖h_i‖²
    return energy / _nonzero(scale)  # scale 0: every token is 0, and so is the energy


def feature_variance(h: Tensor, mask: Tensor | None = None) -> Tensor:
    """Node-feature variance: the population variance of each channel across the ``N`` tokens (the real ones, with
    ``mask``), averaged over the ``D`` channels, ``(1/D) Σ_c (1/N) Σ_i (h_ic - mean_i h_ic)²``.

    It is 0 iff all tokens are equal, unchanged by adding one vector to every token, scales as ``c²`` under
    ``h -> c h``, and equals ``dirichlet_energy(h) / (2D)`` on the complete graph.
    """
    h, w, n = _tokens(h, mask=mask)
    return _centred(h, w, n).square().sum((1, 2)) / (n * h.shape[-1])


def rank_collapse(h: Tensor, mask: Tensor | None = None) -> Tensor:
    """``‖X - 1 mean(X)ᵀ‖_F / ‖X‖_F`` per sample over the (real) tokens (0: all tokens equal)."""
    h, w, n = _tokens(h, mask=mask)
    h = _unit_scale(h, w)  # scale-free: at unit scale it neither overflows nor underflows
    spread = _centred(h, w, n).flatten(1).norm(dim=-1)
    norm = (w * h).flatten(1).norm(dim=-1)
    return spread / _nonzero(norm)  # every token 0: all equal, 0


def wave_energy(h: Tensor, h_next: Tensor, dt: float, attention: Tensor, mask: Tensor | None = None) -> Tensor:
    """Kinetic plus attention-weighted potential energy per token between layers ``h -> h_next``, over the (real)
    tokens: padded ones enter neither the sums nor ``N``.

    ``attention`` is ``(B, N, N)`` or ``(B, heads, N, N)`` (heads are averaged).
    """
    (h, w, n), (h_next, _, _) = _tokens(h, mask=mask), _tokens(h_next, mask=mask)
    if attention.dim() == 4:
        attention = attention.mean(1)
    pairs = w * w.transpose(1, 2)  # (B, N, N): 1 on pairs of real tokens
    kinetic = 0.5 * (w * (h_next - h) / dt).square().sum((-1, -2))
    squared = torch.cdist(h, h).square()  # (B, N, N): ‖h_j - h_k‖²
    potential = 0.25 * (pairs * attention * squared).sum((-1, -2))
    return (kinetic + potential) / n


def spectral_gap(attention: Tensor) -> Tensor:
    """``1 - |λ₂|`` for each row-stochastic matrix in ``(..., N, N)`` (``λ₁ = 1``)."""
    matrices = attention.double()
    finite = torch.isfinite(matrices).flatten(-2).all(-1)  # a blown-up run's attention: no eigenvalues to take
    eigenvalues = torch.linalg.eigvals(
        torch.where(finite[..., None, None], matrices, torch.eye(matrices.shape[-1]).to(matrices))
    )
    gap = gap_from_eigenvalues(eigenvalues)
    return torch.where(finite, gap, torch.full_like(gap, math.nan)).to(attention.dtype)


def gap_from_eigenvalues(eigenvalues: Tensor) -> Tensor:
    """``1 - |λ₂|`` from the eigenvalues ``(..., n)`` of a row-stochastic matrix (zeros may be left out)."""
    moduli = eigenvalues.abs().sort(dim=-1, descending=True).values
    if moduli.shape[-1] < 2:
        raise ValueError("spectral_gap needs at least two tokens.")
    return 1 - moduli[..., 1]


PHASE_CHANNELS = 4  # the phase portrait follows channels 0 .. PHASE_CHANNELS - 1 of sample 0, token 0


@torch.no_grad()
def layer_measures(
    model: Any,
    *inputs: Any,
    drop_first: bool = False,
    edge_index: Tensor | None = None,
    token_mask: Tensor | None = None,
    **context: Any,
) -> dict[str, Any]:
    """Every measure at every layer of ``model`` (a task model with a ``backbone``, discrete or continuous: then at
    its ``depth`` recorded times) on one batch ``inputs``; each value is the batch mean. ``token_mask`` ``(B, N)``
    (True on real tokens; by default read from a key-padding ``attn_mask`` of shape ``(B, 1, 1, N)`` in ``context``)
    leaves padding out of every measure but the spectral gap, whose masked keys already have no weight.

    Returns ``{"depth": [0..L], "dt": [...], "second_order": bool}`` (whether the layers carry a velocity) and, with
    one value per state ``x_0 .. x_L`` (``x_0`` the backbone input): ``"cosine"``, ``"dirichlet"`` (raw),
    ``"dirichlet_normalised"`` (scale-free), ``"feature_variance"``, ``"rank_collapse"``, and with ``edge_index``
    ``"graph_dirichlet"``, ``"graph_dirichlet_normalised"``; with one value per layer ``l = 1..L``:
    ``"spectral_gap"`` (layer ``l``'s attention at its input ``x_{l-1}``) and ``"wave_energy"`` (from ``x_{l-1}``
    to ``x_l``). When the layers carry a velocity, ``"phase"``: per state ``(x, v)`` of ``"phase_token"`` (sample
    0, token 0) in channels ``"phase_channels"`` (``None`` for the input ``x_0``, whose velocity is 0).
    """
    model.eval()
    states = model.trajectory(*inputs)
    xs = [s.x if isinstance(s, PhaseState) else s for s in states]
    if token_mask is None:
        token_mask = _key_padding(context.get("attn_mask"), xs[0])
    mask = token_mask
    steps = _steps(model.backbone, len(xs) - 1)
    second_order = any(isinstance(s, PhaseState) for s in states)
    out: dict[str, Any] = {"depth": list(range(len(xs))), "dt": [dt for _, dt in steps], "second_order": second_order}
    out["cosine"] = [float(token_cosine(x, drop_first, mask).mean()) for x in xs]
    out["dirichlet"] = [float(dirichlet_energy(x, mask=mask).mean()) for x in xs]
    out["dirichlet_normalised"] = [float(normalised_dirichlet_energy(x, mask=mask).mean()) for x in xs]
    out["feature_variance"] = [float(feature_variance(x, mask).mean()) for x in xs]
    out["rank_collapse"] = [float(rank_collapse(x, mask).mean()) for x in xs]
    if edge_index is not None:
        out["graph_dirichlet"] = [float(dirichlet_energy(x, edge_index).mean()) for x in xs]
        out["graph_dirichlet_normalised"] = [float(normalised_dirichlet_energy(x, edge_index).mean()) for x in xs]
    gaps, energies = [], []
    for (field, dt), x, x_next in zip(steps, xs, xs[1:]):
        inner = getattr(field, "attention", field)  # graph fields wrap an attention module
        attn_mask = context.get("attn_mask")
        if attn_mask is None and getattr(inner, "mask", None) == "graph" and edge_index is not None:
            attn_mask = graph_mask(edge_index, x.shape[1])  # softmax along the edges, as the model attends
        attention = inner.weights(x, attn_mask)
        low_rank = getattr(inner, "eigenvalues", None)  # large N: the spectrum without an N x N eigensolve
        gap = gap_from_eigenvalues(low_rank(x)) if low_rank is not None else spectral_gap(attention)
        gaps.append(float(gap.mean()))
        energies.append(float(wave_energy(x, x_next, dt, attention, mask).mean()))
    out["spectral_gap"], out["wave_energy"] = gaps, energies
    if second_order:
        channels = min(PHASE_CHANNELS, xs[0].shape[-1])
        out["phase_token"] = {"sample": 0, "token": 0}
        out["phase_channels"] = list(range(channels))
        out["phase"] = [
            {"x": s.x[0, 0, :channels].tolist(), "v": s.v[0, 0, :channels].tolist()}
            if isinstance(s, PhaseState) and i > 0
            else None  # the input: its velocity is 0 by construction (a continuous run records it as a state)
            for i, s in enumerate(states)
        ]
    return out


def _key_padding(attn_mask: Tensor | None, x: Tensor) -> Tensor | None:
    """The ``(B, N)`` real-token mask of a key-padding attention mask ``(B, 1, 1, N)`` (``None`` for any other)."""
    B, N = x.shape[:2]
    if attn_mask is None or attn_mask.dim() != 4 or tuple(attn_mask.shape) != (B, 1, 1, N):
        return None
    return attn_mask.reshape(B, N)


def _at(field: Any, t: float) -> Any:
    """``field`` as it is at time ``t``: a knot field's weights there (:meth:`~odeformer.knots.KnotField.at`)."""
    at = getattr(field, "at", None)
    return field if at is None else at(t)


def _steps(backbone: Any, count: int) -> list[tuple[Any, float]]:
    """``(attention field, dt)`` per recorded step: a discrete backbone's layers, or a continuous backbone's tied
    field at its ``count`` evenly spaced output times."""
    if backbone.layers:  # a field whose weights are a function of time: its weights at the layer's start
        return [(_at(layer.attention, layer.t0), layer.dt) for layer in backbone.layers]
    return [(backbone.field.attention, backbone.solver.T / count)] * count
