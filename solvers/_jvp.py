"""Forward-mode derivatives that training can differentiate: :func:`differentiable_jvp`, ``torch.func.jvp`` with
LayerNorm written out.

A split layer carries a second-order state's velocity through a first-order sub-step by the field's Jacobian
(``J_f(x) v``), and training differentiates that velocity again (reverse mode over forward mode). PyTorch's JVP of its
fused LayerNorm (``F.layer_norm``, ``nn.LayerNorm``) has the right value but not the right derivatives: the fused
kernel's saved mean and ``1/s`` carry no derivative of their own, so the gradient of ``J_f(x) v`` with respect to
``x``, the weights and the step size is wrong (by 1 to 100 % on a transformer's FFN). :class:`DifferentiableNorms`
runs LayerNorm in ordinary operations while it is active, and refuses normalisation by batch statistics (whose JVP
has the same defect) with an error instead of wrong gradients. Other norms (``F.rms_norm``, ``F.group_norm``) and
softmax attention differentiate correctly as they are.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.overrides import TorchFunctionMode


def layer_norm(
    input: Tensor,
    normalized_shape: tuple[int, ...] | list[int] | int,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
    cudnn_enable: bool = True,  # noqa: ARG001 - torch.layer_norm's signature
) -> Tensor:
    """``F.layer_norm`` in ordinary operations: ``γ ⊙ (x - mean x) / sqrt(var x + eps) + β`` (biased variance) over
    the last ``len(normalized_shape)`` dimensions, differentiable to every order in every mode."""
    count = 1 if isinstance(normalized_shape, int) else len(normalized_shape)
    dims = tuple(range(-count, 0))
    centred = input - input.mean(dims, keepdim=True)
    out = centred * torch.rsqrt((centred * centred).mean(dims, keepdim=True) + eps)
    if weight is not None:
        out = out * weight
    return out if bias is None else out + bias


def _batch_statistics(func: Callable, args: tuple, kwargs: dict) -> bool:
    """Whether a call of ``F.batch_norm`` / ``F.instance_norm`` normalises by the batch's statistics (the flag is the
    sixth argument of both: ``training``, default False; ``use_input_stats``, default True)."""
    flag, default = ("training", False) if func is F.batch_norm else ("use_input_stats", True)
    return bool(kwargs[flag] if flag in kwargs else args[5] if len(args) > 5 else default)


class DifferentiableNorms(TorchFunctionMode):
    """While active, ``F.layer_norm`` and ``torch.layer_norm`` run :func:`layer_norm`, whose JVP autograd can
    differentiate; normalisation by batch statistics (``F.batch_norm`` in training mode, ``F.instance_norm``) is
    refused with ``NotImplementedError``."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.layer_norm or func is torch.layer_norm:
            return layer_norm(*args, **kwargs)
        if (func is F.batch_norm or func is F.instance_norm) and _batch_statistics(func, args, kwargs):
            raise NotImplementedError(
                f"the velocity's forward-mode derivative cannot go through {func.__name__} with batch statistics "
                "(PyTorch's JVP of it has no correct gradient); use running statistics (module.eval()) or a "
                "per-token norm (LayerNorm, GroupNorm, RMSNorm), or give the field a joint(x, v) of its own."
            )
        return func(*args, **kwargs)


def differentiable_jvp(function: Callable[[Tensor], Any], x: Tensor, v: Tensor) -> tuple[Any, Any]:
    """``(function(x), J_function(x) v)`` by ``torch.func.jvp`` under :class:`DifferentiableNorms`: its value and
    every derivative of it are right where the function holds a LayerNorm."""
    with DifferentiableNorms():
        return torch.func.jvp(function, (x,), (v,))
