"""LayerNorm on the state and its velocity: :class:`JointLayerNorm` and the fused Function it runs.

(LayerNorm written out in ordinary operations, which :class:`~odeformer.joint.JointJVP` runs in place of PyTorch's
fused kernel, is ``solvers._jvp.layer_norm``: every forward-mode fallback of the solvers runs it too.)
"""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from solvers import transforms_active

from .double_backward import vjp_with_graph
from .mlp import _WORKSPACE


def _normalise(x: Tensor, dims: tuple[int, ...], eps: float) -> tuple[Tensor, Tensor]:
    """``(x̂, 1/s)`` over ``dims`` in ordinary operations: ``x̂ = (x - mean x) / s``, ``s = sqrt(var x + eps)``
    (biased variance), differentiable to every order in every mode (``torch.native_layer_norm``'s saved mean and
    ``1/s`` carry no derivative of their own, which the derivatives of its JVP need)."""
    mean = x.mean(dims, keepdim=True)
    centred = x - mean
    inv_std = torch.rsqrt((centred * centred).mean(dims, keepdim=True) + eps)
    return centred * inv_std, inv_std


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
        if transforms_active():
            return _plain_joint_layer_norm(x, v, self.weight, self.bias, self.eps, self.mode == "exact")
        if not torch.is_grad_enabled():  # nothing will differentiate it: the forward pass without autograd's record
            return _joint_layer_norm(x, v, self.weight, self.bias, self.eps, self.mode == "exact")[0]
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


def _joint_layer_norm(x: Tensor, v: Tensor, weight: Tensor, bias: Tensor, eps: float, exact: bool):
    """:class:`_JointLayerNorm`'s forward pass: ``(stack(LN(x), u ⊙ γ), mean, 1/s)``.

    Where every operand has one dtype, float32 or float64 (whose row statistics have that dtype on every device), and
    nothing traces the call, both halves are written straight into the stacked result (:func:`_joint_layer_norm_into`:
    the same kernels, so the same values) instead of into two tensors that ``torch.stack`` copies
    (:func:`_joint_layer_norm_stacked`)."""
    same = x.dtype == v.dtype == weight.dtype == bias.dtype and x.dtype in (torch.float32, torch.float64)
    if same and not torch.compiler.is_compiling():
        return _joint_layer_norm_into(x, v, weight, bias, eps, exact)
    return _joint_layer_norm_stacked(x, v, weight, bias, eps, exact)


def _joint_layer_norm_stacked(x: Tensor, v: Tensor, weight: Tensor, bias: Tensor, eps: float, exact: bool):
    out_x, mean, inv_std = torch.native_layer_norm(x, (x.shape[-1],), weight, bias, eps)
    x_hat = (x - mean) * inv_std if exact else None
    u = _velocity(x_hat, inv_std, v, exact)
    return torch.stack((out_x, u * weight)), mean, inv_std


def _joint_layer_norm_into(x: Tensor, v: Tensor, weight: Tensor, bias: Tensor, eps: float, exact: bool):
    out = x.new_empty((2, *x.shape))
    stats = x.new_empty((*x.shape[:-1], 1))
    _, mean, inv_std = torch.ops.aten.native_layer_norm.out(
        x, (x.shape[-1],), weight, bias, eps, out0=out[0], out1=stats, out2=torch.empty_like(stats)
    )
    if exact:
        torch.mul(_velocity((x - mean) * inv_std, inv_std, v, exact), weight, out=out[1])
    else:  # u = v / s written in place, then scaled by γ there
        torch.mul(v, inv_std, out=out[1]).mul_(weight)
    return out, mean, inv_std


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
        out, mean, inv_std = _joint_layer_norm(x, v, weight, bias, eps, exact)
        ctx.save_for_backward(x, v, mean, inv_std, weight, bias)
        ctx.eps, ctx.exact = eps, exact
        return out

    @staticmethod
    def backward(ctx, grad_out):
        x, v, mean, inv_std, weight, bias = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph: a backward pass that can itself be differentiated
            plain = partial(_plain_joint_layer_norm, eps=ctx.eps, exact=ctx.exact)
            return (*vjp_with_graph(plain, (x, v, weight, bias), grad_out), None, None)
        grad_x, grad_v = grad_out.unbind(0)
        dx, grad_weight, grad_bias = torch.ops.aten.native_layer_norm_backward(
            grad_x, x, (x.shape[-1],), mean, inv_std, weight, bias, [True, True, True]
        )
        if not ctx.exact and x.dtype == v.dtype == grad_v.dtype == weight.dtype == mean.dtype == inv_std.dtype:
            # x̂, u and a live only within this call: kept buffers (the same kernels, written with out=)
            x_hat = torch.sub(x, mean, out=_WORKSPACE.take("norm_x_hat", x)).mul_(inv_std)
            u = torch.mul(v, inv_std, out=_WORKSPACE.take("norm_u", x))
            a = torch.mul(grad_v, weight, out=_WORKSPACE.take("norm_a", x))
        else:
            x_hat = torch.sub(x, mean).mul_(inv_std)
            u = _velocity(x_hat, inv_std, v, ctx.exact)
            a = grad_v * weight
        if not ctx.exact:  # the products in place where their operand is not read again (the same kernels)
            dv = a * inv_std
            dx.sub_(x_hat.mul_((a.mul_(v)).mean(-1, keepdim=True) * inv_std * inv_std))
            return dx, dv, grad_weight + _sum_leading(u.mul_(grad_v)), grad_bias, None, None
        a_mean, a_xhat = a.mean(-1, keepdim=True), (a * x_hat).mean(-1, keepdim=True)
        m = (x_hat * v).mean(-1, keepdim=True)
        dv = inv_std * (a - a_mean - x_hat * a_xhat)
        dx = dx + (
            -inv_std * x_hat * (a * u).mean(-1, keepdim=True)
            + inv_std * inv_std * m * (a_mean - a + x_hat * a_xhat)
            - inv_std * u * a_xhat
        )
        return dx, dv, grad_weight + _sum_leading(grad_v * u), grad_bias, None, None
