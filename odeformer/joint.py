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


def _relu_prime(z: Tensor) -> Tensor:
    return (z > 0).to(z.dtype)


def _silu_prime(z: Tensor) -> Tensor:
    s = torch.sigmoid(z)
    return s * (1.0 + z * (1.0 - s))


ACTIVATIONS: dict[str, tuple[Callable[[Tensor], Tensor], Callable[[Tensor], Tensor]]] = {
    "gelu": (F.gelu, _gelu_prime),
    "gelu_tanh": (lambda z: F.gelu(z, approximate="tanh"), _gelu_tanh_prime),
    "relu": (F.relu, _relu_prime),
    "silu": (F.silu, _silu_prime),
}
"""Activation name -> (φ, φ'). Only activations with an exact derivative here may carry a velocity."""


def activation(name: str) -> tuple[Callable[[Tensor], Tensor], Callable[[Tensor], Tensor]]:
    """``(φ, φ')`` for a known activation, or a one-line error listing the known ones."""
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
        mean = x.mean(-1, keepdim=True)
        inv_std = torch.rsqrt(x.var(-1, unbiased=False, keepdim=True) + self.eps)  # 1 / s
        x_hat = (x - mean) * inv_std
        if self.mode == "paper":
            dv = v * inv_std
        else:
            dv = (v - v.mean(-1, keepdim=True) - x_hat * (x_hat * v).mean(-1, keepdim=True)) * inv_std
        return x_hat * self.weight + self.bias, dv * self.weight


class JointMLP(nn.Module):
    """Two-layer MLP ``φ(x W₁ᵀ + b₁) W₂ᵀ + b₂`` with the exact velocity ``(φ'(x W₁ᵀ + b₁) ⊙ v W₁ᵀ) W₂ᵀ``.

    :meth:`position` is the plain MLP. State and velocity share each matrix product (stacked on the batch axis).
    """

    def __init__(self, dim: int, hidden: int, activation_name: str = "gelu", dropout: float = 0.0):
        super().__init__()
        self.phi, self.phi_prime = activation(activation_name)
        self.activation_name = activation_name
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.drop = nn.Dropout(dropout)

    def position(self, x: Tensor) -> Tensor:
        return self.drop(self.fc2(self.drop(self.phi(self.fc1(x)))))

    def forward(self, x: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        pre = F.linear(torch.stack((x, v)), self.fc1.weight)  # (2, ..., H): one GEMM for state and velocity
        pre_x = pre[0] + self.fc1.bias
        h_x, h_v = self._dropout(self.phi(pre_x), self.phi_prime(pre_x) * pre[1])
        out = F.linear(torch.stack((h_x, h_v)), self.fc2.weight)
        return self._dropout(out[0] + self.fc2.bias, out[1])

    def _dropout(self, x: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Dropout with one mask for state and velocity: the velocity must see the map the state went through."""
        p = self.drop.p
        if not self.training or p == 0.0:
            return x, v
        keep = (torch.rand_like(x) >= p).to(x.dtype) / (1.0 - p)
        return x * keep, v * keep


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
