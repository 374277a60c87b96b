"""Largest stable step of a scheme on the attention Laplacian's spectrum, for the training app's start-up warning.

With row-stochastic attention ``A``, the laplacian field ``(A - I) X`` has its eigenvalues ``μ`` in the disk
``|μ + 1| <= 1`` (real, in ``[-2, 0]``, when ``A`` is symmetric). A first-order scheme is tested on ``x' = μ x`` for
``μ`` on that disk's boundary; a second-order one on ``x'' = μ x`` for real ``μ`` in ``[-2, 0]`` (the wave equation; a
complex ``μ`` makes the exact solution itself grow). The bound is found by bisection: the largest ``dt`` for which 200
steps from a unit start stay bounded, with the stepper's own parameters (momentum, damping, gate), per channel.
Examples: Euler 1, Heun 1, RK4 ≈ 1.39, semi-implicit Euler and Verlet ≈ √2.
"""

from __future__ import annotations

import math

import torch

from solvers import AbstractStepper, PhaseState

_STEPS = 200
_GROWTH = 10.0


def _spectrum(second_order: bool) -> torch.Tensor:
    if second_order:
        return -torch.linspace(0.0, 2.0, 41, dtype=torch.float64).to(torch.complex128)
    theta = torch.linspace(0.0, math.pi, 41, dtype=torch.float64)  # the upper half suffices by symmetry
    return (-1.0 + torch.exp(1j * theta)).to(torch.complex128)


def _width(stepper: AbstractStepper) -> int:
    sizes = [p.shape[-1] for p in list(stepper.parameters()) + list(stepper.buffers()) if p.dim() >= 1]
    return max(sizes, default=1)


@torch.no_grad()
def _bounded(stepper: AbstractStepper, dt: float) -> bool:
    mu = _spectrum(stepper.second_order)[:, None]  # (K, 1)
    x = torch.ones(mu.shape[0], _width(stepper), dtype=torch.complex128)  # (K, C): C channels of scheme parameters
    y = PhaseState(x, torch.zeros_like(x)) if stepper.second_order else x

    def field(t, z):
        return mu * z

    state = stepper.init(field, 0.0, y)
    for i in range(_STEPS):
        y, state = stepper.step(field, i * dt, y, dt, state)
    size = torch.stack([part.abs() for part in y]).amax() if isinstance(y, PhaseState) else y.abs().amax()
    return bool(torch.isfinite(size)) and float(size) <= _GROWTH


def max_stable_dt(stepper: AbstractStepper, upper: float = 8.0) -> float:
    """The largest step (to 1e-3) at which ``stepper`` stays bounded on the laplacian attention spectrum."""
    lo, hi = 0.0, upper
    if _bounded(stepper, hi):
        return hi
    while hi - lo > 1e-3:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _bounded(stepper, mid) else (lo, mid)
    return lo
