"""A one-parameter family of symmetric fourth-order compositions: Yoshida's triple jump of the λ-splitting.

One step is three steps of the symmetric two-kick splitting ``drift λ, kick ½, drift 1 − 2λ, kick ½, drift λ``
(``_learnable_splitting.py``) of sizes ``w₁ dt, w₀ dt, w₁ dt``, ``w₁ = 1/(2 − 2^{1/3})``, ``w₀ = 1 − 2w₁``. The inner
method is symmetric and of order 2 for every ``λ``; a symmetric composition with ``2w₁ + w₀ = 1`` and
``2w₁³ + w₀³ = 0`` of such a method has order 4 (Yoshida, Phys. Lett. A 150 (1990); Hairer, Lubich & Wanner,
*Geometric Numerical Integration*, §II.4, §V.3). So every member is symplectic, symmetric (``step(−dt)`` undoes a
step) and of order 4, whatever ``λ``; ``λ → ½`` is Forest–Ruth and ``λ → 0`` Yoshida's triple jump of velocity Verlet.

``λ = ½ sigmoid(θ) ∈ (0, ½)``, learnable per layer or, with ``dim``, per channel (each channel's composition is still
a symmetric one of a symmetric order-2 method); it starts at Omelyan's ``λ ≈ 0.1932``. Each inner step's kicks
evaluate the force at that inner step's midpoint time. Six evaluations per step (two per inner step; the drifts
between inner steps merge).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from ._base import AbstractStepper, PhaseState
from ._composition import YOSHIDA_W1 as W1
from ._learnable_splitting import drift_parameter, half_sigmoid_logit
from ._omelyan2 import OMELYAN_LAMBDA
from ._registry import register_stepper

W0 = 1 - 2 * W1


@register_stepper(
    "triple_jump", update="Yoshida's triple jump of the λ-splitting, `λ` learnable (symplectic order 4 for every λ)"
)
class TripleJump(AbstractStepper):
    order: ClassVar[int] = 4
    second_order: ClassVar[bool] = True
    symplectic: ClassVar[bool] = True
    reversible: ClassVar[bool] = True
    symmetric: ClassVar[bool] = True
    evals_per_step: ClassVar[int] = 6

    def __init__(self, dim: int | None = None, lambda0: float = OMELYAN_LAMBDA, per_channel: bool = True):
        super().__init__()
        self.theta = drift_parameter(dim, per_channel, half_sigmoid_logit(lambda0, "lambda0"))

    def lam(self) -> torch.Tensor:
        """The inner splitting's drift ``λ ∈ (0, ½)`` (a scalar, or one per channel)."""
        return 0.5 * torch.sigmoid(self.theta)

    def _lam(self, like: torch.Tensor) -> torch.Tensor:
        return 0.5 * torch.sigmoid(self.theta.to(like.dtype))  # in the state's precision: drifts that sum to one

    def describe(self) -> dict[str, Any]:
        """The current coefficients and the family's guaranteed claims (what a run's summary records)."""
        return {
            "kind": "learnable triple jump of the λ-splitting",
            "lambda": self.lam().detach().tolist(),
            "weights": [W1, W0, W1],
            "order": 4,
            "evals_per_step": 6,
            "symplectic": True,
            "reversible": True,
            "symmetric": True,
        }

    def coefficients(self) -> dict[str, Any]:
        """The step as one kick–drift splitting at the current ``λ``, the drifts between inner steps merged: drifts
        ``λw₁, (1−2λ)w₁, λ(w₁+w₀), (1−2λ)w₀, λ(w₀+w₁), (1−2λ)w₁, λw₁`` and kicks ``½w₁, ½w₁, ½w₀, ½w₀, ½w₁, ½w₁``.
        For an autonomous field it is the step (a time-dependent one sees each inner step's kicks at that inner step's
        midpoint, not at the splitting's drift times). Floats for one ``λ``; with one ``λ`` per channel each
        coefficient is a tensor of one value per channel."""
        lam = 0.5 * torch.sigmoid(self.theta.detach().double())  # in float64 whatever the parameter's dtype
        lam = float(lam) if lam.dim() == 0 else lam
        inner = (1 - 2 * lam) * W1, (1 - 2 * lam) * W0
        drifts = (lam * W1, inner[0], lam * (W1 + W0), inner[1], lam * (W0 + W1), inner[0], lam * W1)
        return {"drifts": drifts, "kicks": tuple(0.5 * w for w in (W1, W1, W0, W0, W1, W1))}

    def step(self, field, t, y, dt, state):
        x, v = self._unpack(y)
        lam = self._lam(x)
        carry = 0.0  # the drift λ w dt left from the previous inner step, merged into the next one's first
        start = t
        for w in (W1, W0, W1):
            h = w * dt
            x = x + (lam * (carry + h)) * v
            middle = start + 0.5 * h
            v = v + (0.5 * h) * field(middle, x)
            x = x + ((1 - 2 * lam) * h) * v
            v = v + (0.5 * h) * field(middle, x)
            carry, start = h, start + h
        return PhaseState(x + (lam * carry) * v, v), state
