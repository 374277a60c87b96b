"""The activations a velocity can pass through: ``φ``, ``φ'``, ``φ''`` and the fused kernels of the joint MLP.

Only a name in :data:`ACTIVATIONS` may carry a velocity; :func:`activation` looks one up or says which there are.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

_SQRT_2 = math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_TANH_C = math.sqrt(2.0 / math.pi)


def _gelu_prime(z: Tensor) -> Tensor:
    return 0.5 * (1.0 + torch.erf(z / _SQRT_2)) + z * _INV_SQRT_2PI * torch.exp(-0.5 * z * z)


def _gelu_tanh_prime(z: Tensor) -> Tensor:
    u = _TANH_C * (z + 0.044715 * z**3)
    th = torch.tanh(u)
    return 0.5 * (1.0 + th) + 0.5 * z * (1.0 - th * th) * _TANH_C * (1.0 + 3 * 0.044715 * z * z)


def _gelu_second(z: Tensor) -> Tensor:
    square = z * z
    return torch.exp(square * -0.5).mul_(square.neg_().add_(2.0)).mul_(_INV_SQRT_2PI)


def _gelu_tanh_second(z: Tensor) -> Tensor:
    u = _TANH_C * (z + 0.044715 * z**3)
    th = torch.tanh(u)
    du = _TANH_C * (1.0 + 3 * 0.044715 * z * z)
    ddu = _TANH_C * 6 * 0.044715 * z
    return (1.0 - th * th) * (du + 0.5 * z * (ddu - 2.0 * th * du * du))


def _add_gelu_curvature(acc: Tensor, g: Tensor, z: Tensor, scratch: Tensor) -> None:
    """``acc += g ⊙ φ''(z)`` for the exact GELU without temporaries: with ``s = -z²/2``,
    ``φ''(z) = ϕ(z)(2 - z²) = 2 e^s (1 + s) / √(2π)``. Overwrites ``g`` and ``scratch``."""
    torch.addcmul(z.new_zeros(()), z, z, value=-0.5, out=scratch)  # s
    g.addcmul_(g, scratch)  # g (1 + s)
    acc.addcmul_(g, scratch.exp_(), value=2.0 * _INV_SQRT_2PI)


def _curvature_by(second: Callable[[Tensor], Tensor]) -> Callable[[Tensor, Tensor, Tensor, Tensor], None]:
    def add(acc: Tensor, g: Tensor, z: Tensor, scratch: Tensor) -> None:
        acc.addcmul_(g, second(z))

    return add


def _no_curvature(acc: Tensor, g: Tensor, z: Tensor, scratch: Tensor) -> None:
    """ReLU: ``φ'' = 0`` away from the kink."""


def _relu_prime(z: Tensor) -> Tensor:
    return (z > 0).to(z.dtype)


def _relu_second(z: Tensor) -> Tensor:
    return torch.zeros_like(z)


def _silu_prime(z: Tensor) -> Tensor:
    s = torch.sigmoid(z)
    return s * (1.0 + z * (1.0 - s))


def _silu_second(z: Tensor) -> Tensor:
    s = torch.sigmoid(z)
    return s * (1.0 - s) * (2.0 + z * (1.0 - 2.0 * s))


def _times(prime: Callable[[Tensor], Tensor]) -> Callable[..., Tensor]:
    """``(g, z, out=None) -> g ⊙ φ'(z)`` with ``φ'`` written out: for an activation whose ATen backward kernel has no
    derivative of its own (the training path with dropout differentiates this product)."""
    return lambda g, z, out=None: torch.mul(g, prime(z), out=out) if out is not None else g * prime(z)


def _out_of(kernel: Callable[..., Tensor], **options: Any) -> Callable[..., Tensor]:
    """``kernel`` as ``f(*args, out=None)``: writes into ``out`` when given one, allocates otherwise."""
    return lambda *args, out=None: kernel(*args, **options) if out is None else kernel(*args, **options, out=out)


class Activation(NamedTuple):
    """An activation with what the velocity path needs: ``φ``, ``φ'``, ``φ''`` and single-pass kernels of the products
    the fused Full Wave MLP computes (each writes into ``out=`` when given one, so that state and velocity halves fill
    one buffer without a copy)."""

    phi: Callable[[Tensor], Tensor]
    prime: Callable[[Tensor], Tensor]
    second: Callable[[Tensor], Tensor]
    phi_into: Callable[..., Tensor]  # (z, out=None) -> φ(z), one kernel
    prime_times: Callable[..., Tensor]  # (g, z, out=None) -> g ⊙ φ'(z), one fused kernel where it is differentiable
    add_curvature: Callable[[Tensor, Tensor, Tensor, Tensor], None]  # (acc, g, z, scratch): acc += g ⊙ φ''(z)
    grad: Callable[..., Tensor] | None = None  # (g, z, out=None) -> g ⊙ φ'(z) by the kernel autograd runs for φ
    """``g ⊙ φ'(z)`` as autograd computes it for ``φ`` (the same bits), for the plain MLP's recomputing backward pass;
    ``None``: :attr:`prime_times`."""

    def grad_kernel(self) -> Callable[..., Tensor]:
        """:attr:`grad`, or :attr:`prime_times` where an activation gives none."""
        return self.prime_times if self.grad is None else self.grad


def _backward_kernel(op, *args: Any, **options: Any) -> Callable[..., Tensor]:
    """``(g, z, out=None) -> g ⊙ φ'(z)`` by an ATen ``*_backward`` kernel (one pass), into ``out`` when given one."""

    def kernel(g: Tensor, z: Tensor, out: Tensor | None = None) -> Tensor:
        if out is None:
            return op(g, z, *args, **options)
        return op.grad_input(g, z, *args, **options, grad_input=out)

    return kernel


ACTIVATIONS: dict[str, Activation] = {
    "gelu": Activation(
        F.gelu,
        _gelu_prime,
        _gelu_second,
        _out_of(torch._C._nn.gelu),
        _backward_kernel(torch.ops.aten.gelu_backward),
        _add_gelu_curvature,
        _backward_kernel(torch.ops.aten.gelu_backward),
    ),
    "gelu_tanh": Activation(
        lambda z: F.gelu(z, approximate="tanh"),
        _gelu_tanh_prime,
        _gelu_tanh_second,
        _out_of(torch._C._nn.gelu, approximate="tanh"),
        _backward_kernel(torch.ops.aten.gelu_backward, approximate="tanh"),
        _curvature_by(_gelu_tanh_second),
        _backward_kernel(torch.ops.aten.gelu_backward, approximate="tanh"),
    ),
    "relu": Activation(
        F.relu,
        _relu_prime,
        _relu_second,
        _out_of(partial(torch.clamp_min, min=0.0)),
        _backward_kernel(torch.ops.aten.threshold_backward, 0.0),
        _no_curvature,
        _backward_kernel(torch.ops.aten.threshold_backward, 0.0),  # autograd passes φ(z), positive where z is
    ),
    "silu": Activation(
        F.silu,
        _silu_prime,
        _silu_second,
        _out_of(torch._C._nn.silu),
        _times(_silu_prime),  # aten.silu_backward has no derivative: the dropout path could not train through it
        _curvature_by(_silu_second),
        _backward_kernel(torch.ops.aten.silu_backward),
    ),
}
"""Activation name -> :class:`Activation`. Only activations with exact derivatives here may carry a velocity
(``φ''`` is what the backward pass of the velocity path needs)."""


def activation(name: str) -> Activation:
    """The :class:`Activation` for a known name, or a one-line error listing the known ones."""
    if name not in ACTIVATIONS:
        raise ValueError(
            f"activation {name!r} has no known derivative for the velocity path; choose one of "
            f"{', '.join(ACTIVATIONS)}, or wrap your module in JointJVP."
        )
    return ACTIVATIONS[name]
