"""Joint modules for any module: :class:`JointJVP` (the velocity by ``torch.func.jvp``) and :class:`JointSequential`
(a chain of joint modules).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from .layer_norm import _layer_norm


def _batch_statistics(func: Callable, args: tuple, kwargs: dict) -> bool:
    """Whether a call of ``F.batch_norm`` / ``F.instance_norm`` normalises by the batch's statistics (the flag is the
    sixth argument of both: ``training``, default False; ``use_input_stats``, default True)."""
    flag, default = ("training", False) if func is F.batch_norm else ("use_input_stats", True)
    return bool(kwargs[flag] if flag in kwargs else args[5] if len(args) > 5 else default)


class _DifferentiableNorms(TorchFunctionMode):
    """While active, ``F.layer_norm`` and ``torch.layer_norm`` run :func:`_layer_norm`, whose JVP autograd can
    differentiate; normalisation by batch statistics (``F.batch_norm`` in training mode, ``F.instance_norm``), whose
    JVP has the same defect and no written-out form here, is refused with an error instead of wrong gradients."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.layer_norm or func is torch.layer_norm:
            return _layer_norm(*args, **kwargs)
        if (func is F.batch_norm or func is F.instance_norm) and _batch_statistics(func, args, kwargs):
            raise NotImplementedError(
                f"JointJVP cannot differentiate {func.__name__} with batch statistics (PyTorch's JVP of it has no "
                "correct gradient); use running statistics (module.eval()) or a per-token norm (LayerNorm, "
                "GroupNorm, RMSNorm)."
            )
        return func(*args, **kwargs)


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
        with _DifferentiableNorms():
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
