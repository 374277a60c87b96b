"""Damped wave: ``v <- exp(-gamma dt) v + dt a(t, x)``, ``x <- x + dt v``.

Semi-implicit Euler with the velocity's friction integrated exactly. It converges with order 1 to
``x' = v, v' = a - gamma v``: ``gamma = 0`` is the wave (exactly ``semi_implicit_euler``), large ``gamma`` the
diffusion limit (overdamped: ``x' ≈ a / gamma``). One evaluation per step; neither symplectic (it contracts phase
volume by ``exp(-gamma dt)`` per channel) nor reversible.

``gamma >= 0`` is a fixed scalar by default; given ``dim`` it is learnable per channel, parametrised as
``softplus(rho)`` so it stays positive (start from ``gamma > 0`` then). Reference: Hairer, Lubich & Wanner,
*Geometric Numerical Integration*, §XII (conformal symplectic schemes).
"""

import math
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._base import AbstractStepper, PhaseState, axpy
from ._registry import register_stepper


@register_stepper("damped", update="`e^{−γ dt} v + dt a(x)`, then `x + dt v`")
class Damped(AbstractStepper):
    order: ClassVar[int] = 1
    second_order: ClassVar[bool] = True
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 1

    def __init__(self, gamma: float = 1.0, dim: int | None = None):
        super().__init__()
        if not math.isfinite(gamma) or gamma < 0:
            raise ValueError(f"gamma must be a finite number >= 0, got {gamma}.")
        if dim is None:
            self.register_buffer("gamma", torch.tensor(float(gamma)))
            self.rho = None
        else:
            if not isinstance(dim, int) or dim < 1:
                raise ValueError(f"dim must be a positive int (one learnable rate per channel) or None, got {dim!r}.")
            if gamma <= 0:
                raise ValueError("a learnable gamma is softplus(rho) > 0: start it from gamma > 0, or pass dim=None.")
            self.gamma = None
            self.rho = nn.Parameter(torch.full((dim,), gamma + math.log(-math.expm1(-gamma))))  # softplus⁻¹

    def rate(self) -> Tensor:
        """The damping rate ``gamma`` (a scalar, or one value per channel)."""
        return self.gamma if self.rho is None else F.softplus(self.rho)

    def step(self, field, t, y, dt, state):
        x, v = self._unpack(y)
        v = axpy(torch.exp(-self.rate().to(x.dtype) * dt) * v, dt, field(t, x))
        return PhaseState(axpy(x, dt, v), v), state

    def limit_field(self, field):
        gamma = self.rate()
        return lambda t, y: PhaseState(y.v, field(t, y.x) - gamma.to(y.v.dtype) * y.v)
