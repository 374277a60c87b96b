"""Reference solutions (matrix exponential, Richardson-extrapolated classic RK4) and the error measures."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .._base import AbstractStepper, PhaseState
from . import thresholds as th
from .problems import Problem


def _flat(y: Tensor | PhaseState) -> Tensor:
    return torch.cat([y.x.reshape(-1), y.v.reshape(-1)]) if isinstance(y, PhaseState) else y.reshape(-1)


def _unflat(vector: Tensor, like: Tensor | PhaseState) -> Tensor | PhaseState:
    if isinstance(like, PhaseState):
        n = like.x.numel()
        return PhaseState(vector[:n].reshape(like.x.shape), vector[n:].reshape(like.v.shape))
    return vector.reshape(like.shape)


def _axpy(a: float, x, b):
    return PhaseState(*(xi + a * bi for xi, bi in zip(x, b))) if isinstance(x, PhaseState) else x + a * b


def _classic_rk4(F, y, T: float, n: int, every: int, t0: float = 0.0) -> list:
    """Reference integrator, independent of the steppers under test; returns every ``every``-th state after y (from
    ``t0``)."""
    dt, out = T / n, []
    for i in range(n):
        t = t0 + i * dt
        k1 = F(t, y)
        k2 = F(t + dt / 2, _axpy(dt / 2, y, k1))
        k3 = F(t + dt / 2, _axpy(dt / 2, y, k2))
        k4 = F(t + dt, _axpy(dt, y, k3))
        y = _axpy(dt / 6, y, _axpy(2.0, _axpy(2.0, _axpy(1.0, k1, k4), k3), k2))
        if (i + 1) % every == 0:
            out.append(y)
    return out


def _expm(A: Tensor) -> Tensor:
    """Matrix exponential by scaling and squaring a 24-term Taylor series (accurate to ~1e-15 in float64;
    ``torch.linalg.matrix_exp`` loses digits for small norms, which are exactly the early checkpoints)."""
    norm = float(A.abs().sum(0).max())
    squarings = max(0, math.ceil(math.log2(norm / 0.5))) if norm > 0.5 else 0
    B = A / 2**squarings
    term = result = torch.eye(A.shape[0], dtype=A.dtype)
    for k in range(1, 25):
        term = term @ B / k
        result = result + term
    for _ in range(squarings):
        result = result @ result
    return result


def _linear_autonomous(F, y0, t0: float, T: float) -> bool:
    """Whether the limit field ``F`` is linear in the state and the same at every time of ``[t0, t0 + T]``, at random
    states of ``y0``'s form (to ``1e-12`` of its size): a limit field with a friction ``r / t`` or ``c tanh v`` of its
    own is neither, even on a linear problem, and gets no matrix-exponential reference."""
    g = torch.Generator().manual_seed(1234)
    u, w = (torch.randn(_flat(y0).shape, generator=g, dtype=torch.float64) for _ in range(2))
    mixed = _unflat(0.7 * u - 1.3 * w, y0)
    try:
        at = [_flat(F(t0 + c * T, mixed)) for c in (0.0, 0.5, 1.0)]
        parts = 0.7 * _flat(F(t0, _unflat(u, y0))) - 1.3 * _flat(F(t0, _unflat(w, y0)))
    except (ArithmeticError, ValueError, RuntimeError):
        return False
    size = max(float(parts.abs().max()), 1e-300)
    return all(bool(torch.isfinite(a).all()) and float((a - parts).abs().max()) <= 1e-12 * size for a in at)


@torch.no_grad()
def reference(stepper: AbstractStepper, problem: Problem) -> list:
    """The flow of ``stepper.limit_field`` from the problem's start at the checkpoints ``t0 + k T / 8``, ``k = 1..8``.

    Exact (matrix exponential) where the problem is linear and the limit field is too (linear in the state and the
    same at every time: :func:`_linear_autonomous`; a scheme's own friction may make it neither). Otherwise classic
    RK4 with ``n`` and ``2n`` steps (step at most ``2**-10``, resp. ``2**-11``), Richardson-extrapolated,
    ``y_2n + (y_2n - y_n) / 15``: the ``dt**4`` terms cancel and the error is at the level of rounding (~1e-14).
    """
    y0 = problem.initial(stepper)
    F = stepper.limit_field(problem.field_for(stepper))
    t0 = problem.t0
    if not (problem.linear and _linear_autonomous(F, y0, t0, problem.T)):
        per_checkpoint = math.ceil(problem.T / th.CHECKPOINTS / th.REFERENCE_DT)
        coarse = _classic_rk4(F, y0, problem.T, per_checkpoint * th.CHECKPOINTS, per_checkpoint, t0)
        fine = _classic_rk4(F, y0, problem.T, 2 * per_checkpoint * th.CHECKPOINTS, 2 * per_checkpoint, t0)
        return [_axpy(1 / 15, b, _axpy(-1.0, b, a)) for a, b in zip(coarse, fine)]
    n = _flat(y0).numel()
    basis = torch.eye(n, dtype=torch.float64)
    M = torch.stack([_flat(F(t0, _unflat(basis[j], y0))) for j in range(n)], dim=1)  # columns: F(e_j)
    times = [problem.T * k / th.CHECKPOINTS for k in range(1, th.CHECKPOINTS + 1)]
    return [_unflat(_expm(t * M) @ _flat(y0), y0) for t in times]


def _error(y: Tensor | PhaseState, ref: Tensor | PhaseState, scale: float = 1.0) -> float:
    """``max|y - ref|`` relative to ``max|ref|``, or to ``scale`` (the problem's magnitude) where that is larger."""
    r = _flat(ref)
    return float((_flat(y) - r).abs().max() / r.abs().max().clamp_min(scale))


def _trajectory_error(ys: list, refs: list, scale: float = 1.0) -> float:
    """Largest relative error over the checkpoints (robust to a lucky cancellation at any one time)."""
    return max(_error(y, r, scale) for y, r in zip(ys, refs))
