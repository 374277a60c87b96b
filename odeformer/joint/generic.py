"""Joint modules for any module: :class:`JointJVP` (the velocity by ``torch.func.jvp``) and :class:`JointSequential`
(a chain of joint modules).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from solvers import DifferentiableNorms


class JointJVP(nn.Module):
    """Carry the velocity through any module by forward-mode AD: ``(module(x), J_module(x) v)``.

    The module runs with ``F.layer_norm`` (so ``nn.LayerNorm``) written out in ordinary operations: PyTorch's JVP of
    its fused LayerNorm is right, but the derivatives of that JVP with respect to ``x`` (reverse or forward mode) are
    not, because the fused kernel's saved mean and variance carry no derivative; training differentiates the
    velocity. Normalisation by batch
    statistics (``BatchNorm`` in training mode, ``InstanceNorm``) has the same defect and raises
    ``NotImplementedError``.
    """

    def __init__(self, module: nn.Module):
        super().__init__()
        self.module = module

    def position(self, x: Tensor) -> Tensor:
        return self.module(x)

    def forward(self, x: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        with DifferentiableNorms():
            return torch.func.jvp(self.module, (x,), (v,))


class JointSequential(nn.Sequential):
    """Compose joint modules: ``(x, v)`` through each in turn."""

    def position(self, x: Tensor) -> Tensor:
        for module in self:
            x = module.position(x)
        return x

    def forward(self, x: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        for module in self:
            x, v = module(x, v)
        return x, v
