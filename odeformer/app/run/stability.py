"""Largest stable step of a scheme on the attention Laplacian's spectrum, for the training app's start-up warning.

With row-stochastic attention ``A``, the laplacian field ``(A - I) X`` has its eigenvalues ``μ`` in the disk
``|μ + 1| <= 1`` (real, in ``[-2, 0]``, when ``A`` is symmetric). A first-order scheme is tested on ``x' = μ x`` for
``μ`` on that disk's boundary (sampled densest near ``μ = 0``, where heavy-ball momentum's bound binds); a
second-order one on ``x'' = μ x`` for real ``μ`` in ``[-2, 0]`` (the wave equation; a complex ``μ`` makes the exact
solution itself grow). The bound is found by bisection: the largest ``dt`` at which the scheme does not grow, with the
stepper's own parameters (momentum, damping, gate), per channel. "Does not grow" is read from a long run: the largest
magnitude over its last quarter is at most ``_GROWTH`` times that over its second quarter, i.e. a spectral radius of
the one-step map at most ``1 + 1e-4`` (a shorter run that allowed a growth of 10 over 200 steps accepted a radius of
1.012, which is a factor 10⁵ over 1000 layers). Examples: Euler 1, Heun 1, RK4 ≈ 1.39, semi-implicit Euler and
Verlet ≈ √2, heavy-ball momentum ``λ`` ``(1 - λ)² / (1 + λ)``.

A scheme with no small-step limit (order 0: a part of the step that does not shrink with ``dt``) has no such bound;
:func:`max_stable_dt` returns ``None`` for it. :func:`warn_unstable` is the warning a run gives at start-up.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch

from solvers import AbstractStepper, PhaseState

_STEPS = 1000
_GROWTH = 1.05  # over the 500 steps between the two windows: a spectral radius of at most 1.05 ** (1 / 500)


def _spectrum(second_order: bool) -> torch.Tensor:
    s = torch.linspace(0.0, 1.0, 81, dtype=torch.float64)
    if second_order:
        return -(2.0 * s).to(torch.complex128)
    theta = math.pi * s**2  # the upper half suffices by symmetry; densest near μ = 0
    return (-1.0 + torch.exp(1j * theta)).to(torch.complex128)


def _width(stepper: AbstractStepper) -> int:
    sizes = [p.shape[-1] for p in list(stepper.parameters()) + list(stepper.buffers()) if p.dim() >= 1]
    return max(sizes, default=1)


@torch.no_grad()
def stable(stepper: AbstractStepper, dt: float) -> bool:
    """Whether ``stepper`` at step ``dt`` does not grow on the laplacian attention spectrum (one long run)."""
    mu = _spectrum(stepper.second_order)[:, None]  # (K, 1)
    x = torch.ones(mu.shape[0], _width(stepper), dtype=torch.complex128)  # (K, C): C channels of scheme parameters
    y = PhaseState(x, torch.zeros_like(x)) if stepper.second_order else x

    def field(t, z):
        return mu * z

    state = stepper.init(field, 0.0, y)
    early = late = 0.0
    for i in range(_STEPS):
        y, state = stepper.step(field, i * dt, y, dt, state)
        size = float(max(part.abs().amax() for part in y) if isinstance(y, PhaseState) else y.abs().amax())
        if not math.isfinite(size) or size > 1e150:
            return False
        if _STEPS // 4 <= i < _STEPS // 2:
            early = max(early, size)
        elif i >= 3 * _STEPS // 4:
            late = max(late, size)
    return late <= _GROWTH * early


def max_stable_dt(stepper: AbstractStepper, upper: float = 8.0) -> float | None:
    """The largest step (to 1e-3) at which ``stepper`` does not grow on the laplacian attention spectrum (``None`` for
    a scheme of order 0, which has no small-step limit and so no such bound)."""
    if stepper.order == 0:
        return None
    lo, hi = 0.0, upper
    if stable(stepper, hi):
        return hi
    while hi - lo > 1e-3:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if stable(stepper, mid) else (lo, mid)
    return lo


def warn_unstable(model: Any) -> None:
    """Warn when a layer's step exceeds its scheme's stability bound on the laplacian attention field."""
    seen = set()
    for layer in model.backbone.layers:
        if getattr(layer.attention, "form", None) != "laplacian" or (type(layer.stepper), layer.dt) in seen:
            continue
        seen.add((type(layer.stepper), layer.dt))
        if layer.stepper.order == 0 or stable(layer.stepper, layer.dt):  # order 0: no small-step limit, no bound
            continue
        bound = max_stable_dt(layer.stepper)
        if layer.dt > bound:
            warnings.warn(
                f"dt={layer.dt} exceeds {type(layer.stepper).__name__}'s stability bound ≈{bound:.2f} on the laplacian "
                "attention field (spectrum of A - I in |μ + 1| <= 1); expect the state to blow up.",
                stacklevel=2,
            )
