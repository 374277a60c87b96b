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

Derivatives of these layers. Outside function transforms, LayerNorm and the hidden layer run as fused autograd
Functions with hand-written first-order backward passes. Differentiating those backward passes again
(``create_graph=True``: Hessian-vector products, gradient penalties) recomputes the layer from its plain formula and
lets autograd differentiate that, so second and higher derivatives are exact. Under a ``torch.func`` transform
(``jvp``, ``vmap``, ``grad``, ``jacrev``, ``jacfwd``, ``hessian``, nested in any order) or a forward-mode AD level
(``torch.autograd.forward_ad.dual_level``) the modules run the same maths in ordinary differentiable operations
instead of the Functions, so every transform composes with them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from solvers._base import transformed

from ._amp import AutocastState

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


def _gelu_derivatives(z: Tensor) -> tuple[Tensor, Tensor]:
    density = torch.exp(z * z * -0.5).mul_(_INV_SQRT_2PI)  # the standard normal density at z
    prime = torch.erf(z * (1 / _SQRT_2)).add_(1.0).mul_(0.5).addcmul_(z, density)
    return prime, density.mul_((z * z).neg_().add_(2.0))


def _separately(prime, second):
    return lambda z: (prime(z), second(z))


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


class Activation(NamedTuple):
    """An activation with what the velocity path needs: ``φ``, ``φ'``, ``φ''`` and the fused ``g ⊙ φ'(z)``."""

    phi: Callable[[Tensor], Tensor]
    prime: Callable[[Tensor], Tensor]
    second: Callable[[Tensor], Tensor]
    prime_times: Callable[[Tensor, Tensor], Tensor]  # (g, z) -> g ⊙ φ'(z), one fused kernel
    derivatives: Callable[[Tensor], tuple[Tensor, Tensor]]  # z -> (φ'(z), φ''(z)), sharing subexpressions


ACTIVATIONS: dict[str, Activation] = {
    "gelu": Activation(
        F.gelu, _gelu_prime, _gelu_second, lambda g, z: torch.ops.aten.gelu_backward(g, z), _gelu_derivatives
    ),
    "gelu_tanh": Activation(
        lambda z: F.gelu(z, approximate="tanh"),
        _gelu_tanh_prime,
        _gelu_tanh_second,
        lambda g, z: torch.ops.aten.gelu_backward(g, z, approximate="tanh"),
        _separately(_gelu_tanh_prime, _gelu_tanh_second),
    ),
    "relu": Activation(
        F.relu,
        _relu_prime,
        _relu_second,
        lambda g, z: torch.ops.aten.threshold_backward(g, z, 0.0),
        _separately(_relu_prime, _relu_second),
    ),
    "silu": Activation(
        F.silu,
        _silu_prime,
        _silu_second,
        lambda g, z: torch.ops.aten.silu_backward(g, z),
        _separately(_silu_prime, _silu_second),
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


def _normalise(x: Tensor, dims: tuple[int, ...], eps: float) -> tuple[Tensor, Tensor]:
    """``(x̂, 1/s)`` over ``dims`` in ordinary operations: ``x̂ = (x - mean x) / s``, ``s = sqrt(var x + eps)``
    (biased variance), differentiable to every order in every mode (``torch.native_layer_norm``'s saved mean and
    ``1/s`` carry no derivative of their own, which the derivatives of its JVP need)."""
    mean = x.mean(dims, keepdim=True)
    centred = x - mean
    inv_std = torch.rsqrt((centred * centred).mean(dims, keepdim=True) + eps)
    return centred * inv_std, inv_std


def _layer_norm(
    input: Tensor,
    normalized_shape: tuple[int, ...] | list[int] | int,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
    cudnn_enable: bool = True,  # torch.layer_norm's signature; unused
) -> Tensor:
    """``F.layer_norm`` written out: ``γ ⊙ (x - mean x) / sqrt(var x + eps) + β`` over the last
    ``len(normalized_shape)`` dimensions."""
    count = 1 if isinstance(normalized_shape, int) else len(normalized_shape)
    out, _ = _normalise(input, tuple(range(-count, 0)), eps)
    if weight is not None:
        out = out * weight
    return out if bias is None else out + bias


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


def _vjp_with_graph(fn: Callable[..., Tensor | tuple[Tensor, ...]], inputs: tuple, grads) -> list[Tensor | None]:
    """``fn``'s vector-Jacobian product at ``inputs`` along ``grads``, built with a graph: what a fused Function's
    backward returns under ``create_graph=True``, so that its derivatives (double backward) are those of ``fn``.

    ``fn`` runs on aliases (views) of the inputs: asked for the inputs themselves, autograd would also follow paths
    from one input into another it was computed from (a velocity built from the state), adding derivatives that are
    not partial ones; the aliases stop there and still connect every result to the outer graph.
    """
    aliases = [t.view_as(t) if t.requires_grad else t for t in inputs]
    wanted = [a for a in aliases if a.requires_grad]
    found = iter(torch.autograd.grad(fn(*aliases), wanted, grads, create_graph=True, allow_unused=True))
    return [next(found) if a.requires_grad else None for a in aliases]


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
        return self.stacked(x, v).unbind(0)

    def stacked(self, x: Tensor, v: Tensor) -> Tensor:
        """``(x_out, v_out)`` stacked as one ``(2, ..., D)`` tensor (what :meth:`JointMLP.stacked` takes)."""
        if transformed():
            return _plain_joint_layer_norm(x, v, self.weight, self.bias, self.eps, self.mode == "exact")
        return _JointLayerNorm.apply(x, v, self.weight, self.bias, self.eps, self.mode == "exact")


def _velocity(x_hat: Tensor, inv_std: Tensor, v: Tensor, exact: bool) -> Tensor:
    """``u``, the velocity through the normalisation (before the gain): paper ``v / s``; exact the JVP of x̂."""
    if not exact:
        return v * inv_std
    return (v - v.mean(-1, keepdim=True) - x_hat * (x_hat * v).mean(-1, keepdim=True)) * inv_std


def _plain_joint_layer_norm(x: Tensor, v: Tensor, weight: Tensor, bias: Tensor, eps: float, exact: bool) -> Tensor:
    """:class:`_JointLayerNorm`'s map, ``stack(γ ⊙ x̂ + β, γ ⊙ u)``, in ordinary differentiable operations."""
    x_hat, inv_std = _normalise(x, (-1,), eps)
    return torch.stack((x_hat * weight + bias, _velocity(x_hat, inv_std, v, exact) * weight))  # (2, ..., D)


def _sum_leading(t: Tensor) -> Tensor:
    return t.reshape(-1, t.shape[-1]).sum(0)


class _JointLayerNorm(torch.autograd.Function):
    """``(x, v) -> stack(LN(x), u ⊙ γ)`` saving ``x``, ``v`` and the row statistics; the backward pass is written out.

    The state goes through PyTorch's fused LayerNorm (forward and backward). With ``a = g_v ⊙ γ``,
    ``m = mean(x̂ ⊙ v)`` and ``1/s`` per row, the velocity adds: paper rule, ``∂/∂v = a / s`` and
    ``∂/∂x = -x̂ mean(a ⊙ v) / s²``; exact rule, ``∂/∂v = (a - mean a - x̂ mean(a ⊙ x̂)) / s`` and ``∂/∂x =
    -x̂ mean(a ⊙ u) / s - m a / s² + m mean(a) / s² + m x̂ mean(a ⊙ x̂) / s² - u mean(a ⊙ x̂) / s``. Tested against
    autograd of the plain formulas. Under ``create_graph=True`` the backward pass is autograd's through the plain
    formula (:func:`_plain_joint_layer_norm`), so that double backward is exact.
    """

    @staticmethod
    def forward(ctx, x, v, weight, bias, eps: float, exact: bool):
        shape = (x.shape[-1],)
        out_x, mean, inv_std = torch.native_layer_norm(x, shape, weight, bias, eps)
        x_hat = (x - mean) * inv_std if exact else None
        u = _velocity(x_hat, inv_std, v, exact)
        ctx.save_for_backward(x, v, mean, inv_std, weight, bias)
        ctx.eps, ctx.exact = eps, exact
        return torch.stack((out_x, u * weight))

    @staticmethod
    def backward(ctx, grad_out):
        x, v, mean, inv_std, weight, bias = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph: a backward pass that can itself be differentiated
            plain = partial(_plain_joint_layer_norm, eps=ctx.eps, exact=ctx.exact)
            return (*_vjp_with_graph(plain, (x, v, weight, bias), grad_out), None, None)
        grad_x, grad_v = grad_out.unbind(0)
        dx, grad_weight, grad_bias = torch.ops.aten.native_layer_norm_backward(
            grad_x, x, (x.shape[-1],), mean, inv_std, weight, bias, [True, True, True]
        )
        x_hat = (x - mean) * inv_std
        u = _velocity(x_hat, inv_std, v, ctx.exact)
        a = grad_v * weight
        if not ctx.exact:
            dv = a * inv_std
            dx = dx - x_hat * ((a * v).mean(-1, keepdim=True) * inv_std * inv_std)
        else:
            a_mean, a_xhat = a.mean(-1, keepdim=True), (a * x_hat).mean(-1, keepdim=True)
            m = (x_hat * v).mean(-1, keepdim=True)
            dv = inv_std * (a - a_mean - x_hat * a_xhat)
            dx = dx + (
                -inv_std * x_hat * (a * u).mean(-1, keepdim=True)
                + inv_std * inv_std * m * (a_mean - a + x_hat * a_xhat)
                - inv_std * u * a_xhat
            )
        return dx, dv, grad_weight + _sum_leading(grad_v * u), grad_bias, None, None


class JointMLP(nn.Module):
    """Two-layer MLP ``φ(x W₁ᵀ + b₁) W₂ᵀ + b₂`` with the exact velocity ``(φ'(x W₁ᵀ + b₁) ⊙ v W₁ᵀ) W₂ᵀ``.

    :meth:`position` is the plain MLP. State and velocity share each matrix product (stacked on the batch axis).
    """

    def __init__(self, dim: int, hidden: int, activation_name: str = "gelu", dropout: float = 0.0):
        super().__init__()
        self.act = activation(activation_name)
        self.activation_name = activation_name
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.drop = nn.Dropout(dropout)

    def position(self, x: Tensor) -> Tensor:
        return self.drop(self.fc2(self.drop(self.act.phi(self.fc1(x)))))

    def forward(self, x: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        return self.stacked(torch.stack((x, v)))

    def stacked(self, xv: Tensor) -> tuple[Tensor, Tensor]:
        """The joint map of ``xv = stack(x, v)``, ``(2, ..., D)``: one GEMM per weight for state and velocity."""
        pre = F.linear(xv, self.fc1.weight)  # (2, ..., H), without the bias (it acts on the state only)
        if self.training and self.drop.p > 0:
            pre_x = pre[0] + self.fc1.bias
            h_x, h_v = self._dropout(self.act.phi(pre_x), self.act.prime_times(pre[1], pre_x))
            out = F.linear(torch.stack((h_x, h_v)), self.fc2.weight)
            return self._dropout(out[0] + self.fc2.bias, out[1])
        if transformed():
            return _plain_joint_hidden(pre, self.fc1.bias, self.fc2.weight, self.fc2.bias, self.act)
        return _JointHidden.apply(pre, self.fc1.bias, self.fc2.weight, self.fc2.bias, self.act)

    def _dropout(self, x: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Dropout with one mask for state and velocity: the velocity must see the map the state went through."""
        p = self.drop.p
        if not self.training or p == 0.0:
            return x, v
        keep = (torch.rand_like(x) >= p).to(x.dtype) / (1.0 - p)
        return x * keep, v * keep


def _plain_joint_hidden(
    pre: Tensor, bias1: Tensor, weight: Tensor, bias2: Tensor, act: Activation
) -> tuple[Tensor, Tensor]:
    """:class:`_JointHidden`'s map, ``(φ(p_x) W₂ᵀ + b₂, (φ'(p_x) ⊙ p_v) W₂ᵀ)``, in ordinary differentiable operations
    (``φ'`` written out, so that it has derivatives of every order in every mode)."""
    pre_x = pre[0] + bias1
    out = F.linear(torch.stack((act.phi(pre_x), act.prime(pre_x) * pre[1])), weight)  # (2, ..., D)
    return out[0] + bias2, out[1]


class _JointHidden(torch.autograd.Function):
    """``pre = stack(x W₁ᵀ, v W₁ᵀ) -> (φ(p_x) W₂ᵀ + b₂, (φ'(p_x) ⊙ p_v) W₂ᵀ)`` with ``p_x = pre[0] + b₁``, saving
    only ``pre``.

    Left to autograd, the chain ``φ'(p_x) ⊙ p_v`` saves every intermediate of ``φ'`` and both hidden activations;
    here the backward pass recomputes them (elementwise, with the fused ``g ⊙ φ'`` kernels) instead, which keeps Full
    Wave's memory near diffusion's, and the gradient for ``pre`` comes back as one tensor. Under ``create_graph=True``
    the backward pass is autograd's through :func:`_plain_joint_hidden`, so that double backward is exact.
    """

    @staticmethod
    def forward(ctx, pre: Tensor, bias1: Tensor, weight: Tensor, bias2: Tensor, act: Activation):
        pre_x = pre[0] + bias1
        hidden = torch.stack((act.phi(pre_x), act.prime_times(pre[1], pre_x)))  # (2, ..., H)
        out = F.linear(hidden, weight)  # (2, ..., D)
        ctx.save_for_backward(pre, bias1, weight, bias2)
        ctx.act = act
        ctx.autocast = AutocastState.capture(pre)
        return out[0] + bias2, out[1]

    @staticmethod
    def backward(ctx, grad_x: Tensor, grad_v: Tensor):
        with ctx.autocast():  # under bf16 autocast the products mix dtypes, as in the forward pass
            if torch.is_grad_enabled():  # create_graph: a backward pass that can itself be differentiated
                pre, bias1, weight, bias2 = ctx.saved_tensors
                plain = partial(_plain_joint_hidden, act=ctx.act)
                return (*_vjp_with_graph(plain, (pre, bias1, weight, bias2), (grad_x, grad_v)), None)
            return _JointHidden._backward(ctx, grad_x, grad_v)

    @staticmethod
    def _backward(ctx, grad_x: Tensor, grad_v: Tensor):
        # φ' and φ'' once (they share subexpressions); in place where the buffers are ours, so that few hidden-size
        # tensors are alive at once.
        pre, bias1, weight, _ = ctx.saved_tensors
        act = ctx.act
        pre_x, pre_v = pre[0] + bias1, pre[1]
        width = pre.shape[-1]
        flat_x, flat_v = grad_x.reshape(-1, grad_x.shape[-1]), grad_v.reshape(-1, grad_v.shape[-1])
        grad_weight = flat_x.t() @ act.phi(pre_x).reshape(-1, width)
        slope, curvature = act.derivatives(pre_x)
        grad_weight += flat_v.t() @ (slope * pre_v).reshape(-1, width)
        grad_pre = F.linear(torch.stack((grad_x, grad_v)), weight.t())  # (2, ..., H): gradient of the hidden pair
        curvature.mul_(pre_v).mul_(grad_pre[1])
        grad_pre.mul_(slope)
        grad_pre[0] += curvature
        del curvature, slope
        grad_bias1 = grad_pre[0].reshape(-1, width).sum(0)
        return grad_pre, grad_bias1, grad_weight, flat_x.sum(0), None


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
