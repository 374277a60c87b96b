"""Layers that carry a state and its velocity together, ``(x, v) -> (g(x), J_g(x) v)``, by the chain rule.

In a wave block the state ``x`` passes through per-token maps (LayerNorm, the FFN) between attention steps; the
velocity is a tangent vector at ``x`` and is carried by the map's Jacobian. Each module here returns
``(x_out, v_out)`` from ``forward(x, v)``:

- :class:`JointLayerNorm`: ``x -> γ ⊙ x̂ + β`` with ``x̂ = (x - mean x) / s``, ``s = sqrt(var x + eps)``; the velocity
  either by the Wavy Transformer's rule ``γ ⊙ v / s`` (``mode="paper"``: the JVP with mean and variance frozen) or by
  the exact JVP ``γ ⊙ [(v - mean v) / s - x̂ · mean(x̂ ⊙ v) / s]`` (``mode="exact"``).
- :class:`JointMLP`: ``x -> φ(x W₁ᵀ + b₁) W₂ᵀ + b₂``; velocity ``(φ'(x W₁ᵀ + b₁) ⊙ v W₁ᵀ) W₂ᵀ``, exact for the
  activations in :data:`ACTIVATIONS`. x and v go through each weight in one matrix product, and ``φ'`` is computed from
  the state's pre-activation.
- :class:`JointJVP`: any module, velocity by ``torch.func.jvp``: the oracle for the tests and the fallback for modules
  without a hand-written rule.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

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
    return _INV_SQRT_2PI * torch.exp(-0.5 * z * z) * (2.0 - z * z)


def _gelu_tanh_second(z: Tensor) -> Tensor:
    u = _TANH_C * (z + 0.044715 * z**3)
    th = torch.tanh(u)
    du = _TANH_C * (1.0 + 3 * 0.044715 * z * z)
    ddu = _TANH_C * 6 * 0.044715 * z
    return (1.0 - th * th) * (du + 0.5 * z * (ddu - 2.0 * th * du * du))


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


Triple = tuple[Callable[[Tensor], Tensor], Callable[[Tensor], Tensor], Callable[[Tensor], Tensor]]

ACTIVATIONS: dict[str, Triple] = {
    "gelu": (F.gelu, _gelu_prime, _gelu_second),
    "gelu_tanh": (lambda z: F.gelu(z, approximate="tanh"), _gelu_tanh_prime, _gelu_tanh_second),
    "relu": (F.relu, _relu_prime, _relu_second),
    "silu": (F.silu, _silu_prime, _silu_second),
}
"""Activation name -> (φ, φ', φ''). Only activations with exact derivatives here may carry a velocity (φ'' is what
the backward pass of the velocity path needs)."""


def activation(name: str) -> Triple:
    """``(φ, φ', φ'')`` for a known activation, or a one-line error listing the known ones."""
    if name not in ACTIVATIONS:
        raise ValueError(
            f"activation {name!r} has no known derivative for the velocity path; choose one of "
            f"{', '.join(ACTIVATIONS)}, or wrap your module in JointJVP."
        )
    return ACTIVATIONS[name]


class JointLayerNorm(nn.Module):
    """LayerNorm on the state; its velocity by the paper's rule (``mode="paper"``) or the exact JVP (``"exact"``).

    Parameters are named ``weight`` and ``bias`` like ``nn.LayerNorm``; :meth:`position` is the plain LayerNorm.
    """

    def __init__(self, dim: int, mode: str = "paper", eps: float = 1e-6):
        super().__init__()
        if mode not in ("paper", "exact"):
            raise ValueError(f"JointLayerNorm mode must be 'paper' or 'exact', got {mode!r}.")
        self.mode, self.eps = mode, eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def position(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)

    def forward(self, x: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        return _JointLayerNorm.apply(x, v, self.weight, self.bias, self.eps, self.mode == "exact")


def _normalise(x: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """``(x̂, 1/s)``: the normalised state and the inverse standard deviation ``(B.., 1)``."""
    var, mean = torch.var_mean(x, dim=-1, unbiased=False, keepdim=True)
    inv_std = torch.rsqrt(var + eps)
    return (x - mean) * inv_std, inv_std


def _velocity(x_hat: Tensor, inv_std: Tensor, v: Tensor, exact: bool) -> Tensor:
    """``u``, the velocity through the normalisation (before the gain): paper ``v / s``; exact the JVP of x̂."""
    if not exact:
        return v * inv_std
    return (v - v.mean(-1, keepdim=True) - x_hat * (x_hat * v).mean(-1, keepdim=True)) * inv_std


def _sum_leading(t: Tensor) -> Tensor:
    return t.reshape(-1, t.shape[-1]).sum(0)


class _JointLayerNorm(torch.autograd.Function):
    """``(x, v) -> (x̂ ⊙ γ + β, u ⊙ γ)`` saving only ``x̂``, ``1/s`` and ``v``; the backward pass is written out.

    With ``a = g_v ⊙ γ``, ``m = mean(x̂ ⊙ v)`` and ``1/s`` per row: the paper rule gives ``∂/∂v = a / s`` and
    ``∂/∂x = -x̂ mean(a ⊙ v) / s²``; the exact rule ``∂/∂v = (a - mean a - x̂ mean(a ⊙ x̂)) / s`` and ``∂/∂x =
    -x̂ mean(a ⊙ u) / s - m a / s² + m mean(a) / s² + m x̂ mean(a ⊙ x̂) / s² - u mean(a ⊙ x̂) / s``; plus the usual
    LayerNorm backward of the state. Tested against autograd of the plain formulas.
    """

    @staticmethod
    def forward(ctx, x, v, weight, bias, eps: float, exact: bool):
        x_hat, inv_std = _normalise(x, eps)
        u = _velocity(x_hat, inv_std, v, exact)
        ctx.save_for_backward(x_hat, inv_std, v, weight)
        ctx.exact = exact
        return x_hat * weight + bias, u * weight

    @staticmethod
    def backward(ctx, grad_x, grad_v):
        x_hat, inv_std, v, weight = ctx.saved_tensors
        u = _velocity(x_hat, inv_std, v, ctx.exact)
        g = grad_x * weight  # the state's LayerNorm backward
        dx = inv_std * (g - g.mean(-1, keepdim=True) - x_hat * (g * x_hat).mean(-1, keepdim=True))
        a = grad_v * weight
        if not ctx.exact:
            dv = a * inv_std
            dx = dx - x_hat * (a * v).mean(-1, keepdim=True) * inv_std * inv_std
        else:
            a_mean, a_xhat = a.mean(-1, keepdim=True), (a * x_hat).mean(-1, keepdim=True)
            m = (x_hat * v).mean(-1, keepdim=True)
            dv = inv_std * (a - a_mean - x_hat * a_xhat)
            dx = dx + (
                -inv_std * x_hat * (a * u).mean(-1, keepdim=True)
                + inv_std * inv_std * m * (a_mean - a + x_hat * a_xhat)
                - inv_std * u * a_xhat
            )
        grad_weight = _sum_leading(grad_x * x_hat) + _sum_leading(grad_v * u)
        return dx, dv, grad_weight, _sum_leading(grad_x), None, None


class JointMLP(nn.Module):
    """Two-layer MLP ``φ(x W₁ᵀ + b₁) W₂ᵀ + b₂`` with the exact velocity ``(φ'(x W₁ᵀ + b₁) ⊙ v W₁ᵀ) W₂ᵀ``.

    :meth:`position` is the plain MLP. State and velocity share each matrix product (stacked on the batch axis).
    """

    def __init__(self, dim: int, hidden: int, activation_name: str = "gelu", dropout: float = 0.0):
        super().__init__()
        self.functions = activation(activation_name)
        self.phi, self.phi_prime, _ = self.functions
        self.activation_name = activation_name
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.drop = nn.Dropout(dropout)

    def position(self, x: Tensor) -> Tensor:
        return self.drop(self.fc2(self.drop(self.phi(self.fc1(x)))))

    def forward(self, x: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        pre = F.linear(torch.stack((x, v)), self.fc1.weight)  # (2, ..., H): one GEMM for state and velocity
        pre[0] += self.fc1.bias  # in place: the saved pre-activations share one buffer
        pre_x, pre_v = pre.unbind(0)
        if self.training and self.drop.p > 0:
            h_x, h_v = self._dropout(self.phi(pre_x), self.phi_prime(pre_x) * pre_v)
            out = F.linear(torch.stack((h_x, h_v)), self.fc2.weight)
            return self._dropout(out[0] + self.fc2.bias, out[1])
        return _JointHidden.apply(pre_x, pre_v, self.fc2.weight, self.fc2.bias, self.functions)

    def _dropout(self, x: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Dropout with one mask for state and velocity: the velocity must see the map the state went through."""
        p = self.drop.p
        if not self.training or p == 0.0:
            return x, v
        keep = (torch.rand_like(x) >= p).to(x.dtype) / (1.0 - p)
        return x * keep, v * keep


class _JointHidden(torch.autograd.Function):
    """``(p_x, p_v) -> (φ(p_x) W₂ᵀ + b₂, (φ'(p_x) ⊙ p_v) W₂ᵀ)``, saving only ``p_x`` and ``p_v``.

    Left to autograd, the chain ``φ'(p_x) ⊙ p_v`` saves every intermediate of ``φ'`` and both hidden activations;
    here the backward pass recomputes ``φ(p_x)``, ``φ'(p_x)`` and ``φ''(p_x)`` (cheap, elementwise) instead, which is
    what keeps Full Wave's memory near diffusion's.
    """

    @staticmethod
    def forward(ctx, pre_x: Tensor, pre_v: Tensor, weight: Tensor, bias: Tensor, functions: Triple):
        phi, phi_prime, _ = functions
        out = F.linear(torch.stack((phi(pre_x), phi_prime(pre_x) * pre_v)), weight)  # (2, ..., D)
        ctx.save_for_backward(pre_x, pre_v, weight)
        ctx.functions = functions
        return out[0] + bias, out[1]

    @staticmethod
    def backward(ctx, grad_x: Tensor, grad_v: Tensor):
        # Ordered, and in place where the buffers are ours, to keep few hidden-size tensors alive at once.
        pre_x, pre_v, weight = ctx.saved_tensors
        phi, phi_prime, phi_second = ctx.functions
        width = pre_x.shape[-1]
        flat_x, flat_v = grad_x.reshape(-1, grad_x.shape[-1]), grad_v.reshape(-1, grad_v.shape[-1])
        grad_weight = flat_x.t() @ phi(pre_x).reshape(-1, width)
        slope = phi_prime(pre_x)
        grad_weight += flat_v.t() @ (slope * pre_v).reshape(-1, width)
        grad_hidden = F.linear(torch.stack((grad_x, grad_v)), weight.t())  # (2, ..., H)
        curvature = phi_second(pre_x).mul_(pre_v).mul_(grad_hidden[1])
        grad_pre_x = grad_hidden[0].mul_(slope).add_(curvature)
        del curvature
        grad_pre_v = grad_hidden[1].mul_(slope)
        return grad_pre_x, grad_pre_v, grad_weight, flat_x.sum(0), None


class JointJVP(nn.Module):
    """Carry the velocity through any module by forward-mode AD: ``(module(x), J_module(x) v)``."""

    def __init__(self, module: nn.Module):
        super().__init__()
        self.module = module

    def position(self, x: Tensor) -> Tensor:
        return self.module(x)

    def forward(self, x: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
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
