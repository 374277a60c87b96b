"""The two-stage explicit Runge–Kutta family with a learnable ``c₂ = α``: order 2 for every ``α``.

``k1 = f(t, x)``, ``k2 = f(t + α dt, x + α dt k1)``, ``x + dt ((1 − 1/(2α)) k1 + 1/(2α) k2)``. Every explicit
two-stage method of order 2 is one of these (Hairer, Nørsett & Wanner, *Solving ODEs I*, §II.1, eq. (1.9)): the order
conditions ``Σ bᵢ = 1`` and ``Σ bᵢcᵢ = 1/2`` hold identically in ``α``, so training moves the method within the
order-2 family and never out of it. ``α = 1/2`` is the midpoint rule, ``2/3`` Ralston's method, ``1`` Heun's.

The parametrisation keeps ``α`` where the guarantee holds and the weights stay bounded:
``α = 0.2 + 1.3 · sigmoid(θ) ∈ (0.2, 1.5)`` (at ``α → 0`` the weights ``1 − 1/(2α)`` and ``1/(2α)`` blow up). ``α``
is one scalar per layer, not per channel: a per-channel ``α`` evaluates channels at different stage positions and
loses order 2 (the cross terms ``∂_d f_c f_d`` get ``α_d/α_c`` instead of 1). Two evaluations per step, neither
symplectic nor reversible. Starts at Ralston's ``α = 2/3`` (``alpha0``).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import nn

from ._base import AbstractStepper
from ._registry import register_stepper


@register_stepper("two_stage_rk", update="two-stage Runge–Kutta with a learnable `c₂ = α` (order 2 for every α)")
class TwoStageRK(AbstractStepper):
    order: ClassVar[int] = 2
    second_order: ClassVar[bool] = False
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 2
    LOW: ClassVar[float] = 0.2
    HIGH: ClassVar[float] = 1.5

    def __init__(self, alpha0: float = 2 / 3):
        super().__init__()
        if not (isinstance(alpha0, (int, float)) and self.LOW < alpha0 < self.HIGH):
            raise ValueError(f"alpha0 must lie in ({self.LOW}, {self.HIGH}) (c₂ kept away from 0), got {alpha0!r}.")
        share = (alpha0 - self.LOW) / (self.HIGH - self.LOW)
        self.theta = nn.Parameter(torch.tensor(math.log(share / (1 - share))))

    def alpha(self) -> torch.Tensor:
        """``c₂ = α ∈ (0.2, 1.5)``."""
        return self.LOW + (self.HIGH - self.LOW) * torch.sigmoid(self.theta)

    def coefficients(self) -> dict[str, Any]:
        """The Butcher tableau at the current ``α``."""
        a = float(self.alpha().detach())
        return {"A": [[], [a]], "b": [1 - 1 / (2 * a), 1 / (2 * a)], "c": [0.0, a]}

    def describe(self) -> dict[str, Any]:
        """The current coefficients and the family's guaranteed claims (what a run's summary records)."""
        return {
            "kind": "learnable two-stage Runge–Kutta (c₂ = α)",
            **self.coefficients(),
            "order": 2,
            "evals_per_step": 2,
            "symplectic": False,
            "reversible": False,
        }

    def step(self, field, t, y, dt, state):
        x = self._unpack(y)
        a = self.LOW + (self.HIGH - self.LOW) * torch.sigmoid(self.theta.to(x.dtype))  # in the state's precision
        w2 = 0.5 / a
        k1 = field(t, x)
        k2 = field(t + a.double() * dt, x + (a * dt) * k1)  # its time in float64: t may be far from 0
        return x + dt * (k1 + w2 * (k2 - k1)), state
