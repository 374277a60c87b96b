"""The symmetric two-kick splitting family with a learnable drift ``λ``: symplectic, symmetric and order 2 for every λ.

    drift λ, kick ½, drift 1 − 2λ, kick ½, drift λ         (x <- x + λ dt v;  v <- v + ½ dt a(t + dt/2, x); ...)

Every member is a palindromic composition of exact flows of ``x' = v`` and ``v' = a`` whose coefficients sum to one:
symplectic (each piece is), symmetric (the sequence reads the same backwards: ``step(−dt)`` undoes ``step(dt)``), and
so of even order, at least 2, whatever ``λ`` is (Hairer, Lubich & Wanner, *Geometric Numerical Integration*, §II.5,
§V.1). ``λ → 0`` is velocity Verlet, ``λ → ½`` position Verlet, and Omelyan, Mryglod & Folk's ``λ ≈ 0.1932``
minimises the error constant (Phys. Rev. E 65 (2002)); the family starts there (``lambda0``).

``λ = ½ sigmoid(θ) ∈ (0, ½)`` keeps every drift forward. With ``dim`` (the model's width) ``λ`` is learnable per
channel: each channel's drifts are still a palindrome summing to one and each drift a shear ``x <- x + dt Λ v`` with
``Λ`` diagonal, so the guarantees hold channel by channel. Both kicks evaluate the force at ``t + dt/2``: the time
coordinate drifts ``½, 0, ½``, itself a consistent palindrome, so a time-dependent force keeps order 2 without the
stage time depending on ``λ``. Two evaluations per step.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import nn

from ._base import AbstractStepper, PhaseState
from ._omelyan2 import OMELYAN_LAMBDA
from ._registry import register_stepper


def half_sigmoid_logit(lam: float, what: str) -> float:
    """``θ`` with ``½ sigmoid(θ) = lam``, for ``lam`` in ``(0, ½)``."""
    if not (isinstance(lam, (int, float)) and 0 < lam < 0.5):
        raise ValueError(f"{what} must lie in (0, 1/2) (every drift forward), got {lam!r}.")
    return math.log(2 * lam / (1 - 2 * lam))


def drift_parameter(dim: int | None, per_channel: bool, theta0: float) -> nn.Parameter:
    """A learnable logit: one per channel with ``dim`` and ``per_channel``, else one per layer."""
    if dim is not None and (not isinstance(dim, int) or dim < 1):
        raise ValueError(f"dim must be a positive int (one λ per channel) or None, got {dim!r}.")
    shape = (dim,) if dim is not None and per_channel else ()
    return nn.Parameter(torch.full(shape, float(theta0)))


@register_stepper(
    "symmetric_splitting",
    update="drift λ, kick ½, drift 1 − 2λ, kick ½, drift λ with a learnable `λ` (symplectic order 2 for every λ)",
)
class SymmetricSplitting(AbstractStepper):
    order: ClassVar[int] = 2
    second_order: ClassVar[bool] = True
    symplectic: ClassVar[bool] = True
    reversible: ClassVar[bool] = True
    symmetric: ClassVar[bool] = True
    evals_per_step: ClassVar[int] = 2

    def __init__(self, dim: int | None = None, lambda0: float = OMELYAN_LAMBDA, per_channel: bool = True):
        super().__init__()
        self.theta = drift_parameter(dim, per_channel, half_sigmoid_logit(lambda0, "lambda0"))

    def lam(self) -> torch.Tensor:
        """The drift ``λ ∈ (0, ½)`` (a scalar, or one per channel)."""
        return 0.5 * torch.sigmoid(self.theta)

    def _lam(self, like: torch.Tensor) -> torch.Tensor:
        return 0.5 * torch.sigmoid(self.theta.to(like.dtype))  # in the state's precision: drifts that sum to one

    def describe(self) -> dict[str, Any]:
        """The current coefficients and the family's guaranteed claims (what a run's summary records)."""
        lam = self.lam().detach().tolist()
        return {
            "kind": "learnable symmetric splitting (drift λ, kick ½, drift 1 − 2λ, kick ½, drift λ)",
            "lambda": lam,
            "order": 2,
            "evals_per_step": 2,
            "symplectic": True,
            "reversible": True,
            "symmetric": True,
        }

    def step(self, field, t, y, dt, state):
        x, v = self._unpack(y)
        lam = self._lam(x)
        half = 0.5 * dt
        middle = t + half
        x = x + (lam * dt) * v
        v = v + half * field(middle, x)
        x = x + ((1 - 2 * lam) * dt) * v
        v = v + half * field(middle, x)
        return PhaseState(x + (lam * dt) * v, v), state
