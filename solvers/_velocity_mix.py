"""Velocity mix (the Wavy Transformer BERT code's "mix"): ``v <- lam (v + dt a) + (1 - lam) a``, ``x <- x + dt v``.

The new velocity is a gated blend of the wave's kick ``v + dt a(t, x)`` and the force itself, ``a(t, x)``; the
position then drifts along it. ``lam = 1`` is ``semi_implicit_euler``; ``lam = 0`` replaces the velocity by the force,
so the position takes an Euler step of size ``dt`` on ``a`` (diffusion). ``lam = sigmoid(theta)``: a fixed scalar by
default (``theta0 = 0``, ``lam = 0.5``, the official code's start); given ``dim``, learnable, one value per channel
(``gate="channel"``) or one for the whole layer (``gate="scalar"``, the official code's single ``beta``).
``theta0 = -inf`` gives ``lam = 0`` exactly.

No small-step limit in ``(x, v)``, so it declares order 0: the force's share ``(1 - lam) a`` is not scaled by ``dt``,
so each step moves the velocity by an amount that does not shrink with ``dt`` (``(1 - lam)(a - v)``): ``v`` is
pulled back to ``a(x)`` at every step, forgetting its start geometrically, and is no state of an ODE. The position
alone has a limit: eliminating ``v`` gives heavy-ball momentum, ``x_{n+1} = x_n + lam (x_n - x_{n-1}) +
dt (1 - lam + lam dt) a(x_n)``, which for a fixed ``lam < 1`` converges with order 1 to ``x' = a`` (tested beside the
kit). One evaluation per step; neither symplectic nor reversible. Reference: the Wavy Transformer paper's mixed
residual and its official code (github.com/noguchisatoshi/Wavy-Transformer, ``src/bert/models/attention.py``).

Not to be confused with :class:`~solvers.Mix` (the ViT code's mix, which blends the *positions* of a wave and a
diffusion step); this scheme laid out as the BERT layer is the ``mix_bert`` solver.
"""

from typing import ClassVar

import torch
from torch import Tensor

from ._base import AbstractStepper, PhaseState, axpy, register, sigmoid_gate
from ._registry import register_stepper

GATES = ("channel", "scalar")


@register_stepper(
    "velocity_mix",
    update=(
        "`v ← λ(v + dt a) + (1 − λ) a`, then `x + dt v` (the official BERT mix; order 0: its `x` alone converges "
        "with order 1 to `x' = a`)"
    ),
)
class VelocityMix(AbstractStepper):
    order: ClassVar[int] = 0
    second_order: ClassVar[bool] = True
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 1

    def __init__(self, dim: int | None = None, theta0: float = 0.0, gate: str = "channel"):
        super().__init__()
        if gate not in GATES:
            raise ValueError(f"VelocityMix: gate must be one of {', '.join(GATES)}; got {gate!r}.")
        register(self, "theta", sigmoid_gate(1 if gate == "scalar" and dim is not None else dim, theta0))

    def lam(self) -> Tensor:
        """The gate ``sigmoid(theta)`` (a scalar, or one value per channel)."""
        return torch.sigmoid(self.theta)

    def step(self, field, t, y, dt, state):
        x, v = self._unpack(y)
        a = field(t, x)
        v = torch.lerp(a, axpy(v, dt, a), self.lam().to(x.dtype))  # a + lam ((v + dt a) - a)
        return PhaseState(axpy(x, dt, v), v), state

    def limit_field(self, field):
        raise ValueError(
            "VelocityMix has no small-step limit in (x, v): the force's share (1 - lam) a of the velocity is not "
            "scaled by dt (its position alone converges to x' = a)."
        )
