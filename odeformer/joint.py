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
import threading
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from solvers import AutocastState, transforms_active

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
    ),
    "gelu_tanh": Activation(
        lambda z: F.gelu(z, approximate="tanh"),
        _gelu_tanh_prime,
        _gelu_tanh_second,
        _out_of(torch._C._nn.gelu, approximate="tanh"),
        _backward_kernel(torch.ops.aten.gelu_backward, approximate="tanh"),
        _curvature_by(_gelu_tanh_second),
    ),
    "relu": Activation(
        F.relu,
        _relu_prime,
        _relu_second,
        _out_of(partial(torch.clamp_min, min=0.0)),
        _backward_kernel(torch.ops.aten.threshold_backward, 0.0),
        _no_curvature,
    ),
    "silu": Activation(
        F.silu,
        _silu_prime,
        _silu_second,
        _out_of(torch._C._nn.silu),
        _times(_silu_prime),  # aten.silu_backward has no derivative: the dropout path could not train through it
        _curvature_by(_silu_second),
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


def vjp_with_graph(fn: Callable[..., Tensor | tuple[Tensor, ...]], inputs: tuple, grads) -> list[Tensor | None]:
    """``fn``'s vector-Jacobian product at ``inputs`` along ``grads``, built with a graph: what a fused Function's
    backward returns under ``create_graph=True``, so that its derivatives (double backward) are those of ``fn``.

    ``fn`` runs on aliases (views) of the inputs: asked for the inputs themselves, autograd would also follow paths
    from one input into another it was computed from (a velocity built from the state), adding derivatives that are
    not partial ones; the aliases stop there and still connect every result to the outer graph.
    """
    aliases = [t.view_as(t) if t.requires_grad else t for t in inputs]
    wanted = [a for a in aliases if a.requires_grad]
    outputs = fn(*aliases)
    outputs, grads = (outputs, grads) if isinstance(outputs, tuple) else ((outputs,), (grads,))
    kept = [(o, g) for o, g in zip(outputs, grads) if o.requires_grad]  # an output none of the wanted reach (the
    if not kept:  # velocity when only the state's bias is trained) has no graph, and autograd refuses it
        return [None] * len(aliases)
    reached, along = zip(*kept)
    found = iter(torch.autograd.grad(reached, wanted, along, create_graph=True, allow_unused=True))
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
    """:class:`_JointLayerNorm`'s forward pass: ``(stack(LN(x), u ⊙ γ), mean, 1/s)``."""
    out_x, mean, inv_std = torch.native_layer_norm(x, (x.shape[-1],), weight, bias, eps)
    x_hat = (x - mean) * inv_std if exact else None
    u = _velocity(x_hat, inv_std, v, exact)
    return torch.stack((out_x, u * weight)), mean, inv_std


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
        if isinstance(hidden, bool) or not isinstance(hidden, int) or hidden < 1:
            raise ValueError(f"the MLP's hidden width must be a positive int, got {hidden!r}.")
        self.act = activation(activation_name)
        self.activation_name = activation_name
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.drop = nn.Dropout(dropout)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["act"]  # functions made at run time (pickle cannot find them by name): rebuilt from the name
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self.act = activation(self.activation_name)

    def position(self, x: Tensor) -> Tensor:
        hidden = self.fc1(x)
        if hidden.requires_grad or transforms_active():
            hidden = self.act.phi(hidden)
        else:  # nothing will differentiate it (inference): φ in place, without a second hidden-size buffer
            hidden = self.act.phi_into(hidden, out=hidden)
        if not (self.training and self.drop.p > 0):  # no dropout to apply: skip its two calls (a token's pass)
            return self.fc2(hidden)
        return self.drop(self.fc2(self.drop(hidden)))

    def forward(self, x: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        return self.stacked(torch.stack((x, v)))

    def stacked(self, xv: Tensor) -> tuple[Tensor, Tensor]:
        """The joint map of ``xv = stack(x, v)``, ``(2, ..., D)``: one GEMM per weight for state and velocity."""
        weights = (self.fc1.weight, self.fc1.bias, self.fc2.weight, self.fc2.bias)
        if self.training and self.drop.p > 0:
            pre = F.linear(xv, self.fc1.weight)  # (2, ..., H), without the bias (it acts on the state only)
            pre_x = pre[0] + self.fc1.bias
            h_x, h_v = self._dropout(self.act.phi(pre_x), self.act.prime_times(pre[1], pre_x))
            out = F.linear(torch.stack((h_x, h_v)), self.fc2.weight)
            return self._dropout(out[0] + self.fc2.bias, out[1])
        if transforms_active():
            return _plain_joint_mlp(xv, *weights, self.act)
        if not torch.is_grad_enabled():  # nothing will differentiate it: the forward pass without autograd's record
            return _joint_mlp(xv, *weights, self.act)[0]
        return _JointMLP.apply(xv, *weights, self.act)

    def _dropout(self, x: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Dropout with one mask for state and velocity: the velocity must see the map the state went through."""
        p = self.drop.p
        if not self.training or p == 0.0:
            return x, v
        keep = (torch.rand_like(x) >= p).to(x.dtype) / (1.0 - p)
        return x * keep, v * keep


def _plain_joint_mlp(
    xv: Tensor, weight1: Tensor, bias1: Tensor, weight2: Tensor, bias2: Tensor, act: Activation
) -> tuple[Tensor, Tensor]:
    """:class:`_JointMLP`'s map, ``(φ(p_x) W₂ᵀ + b₂, (φ'(p_x) ⊙ p_v) W₂ᵀ)`` with ``p_x = x W₁ᵀ + b₁``, ``p_v = v W₁ᵀ``,
    in ordinary differentiable operations (``φ'`` written out, so that it has derivatives of every order in every
    mode)."""
    pre = F.linear(xv, weight1)
    pre_x = pre[0] + bias1
    out = F.linear(torch.stack((act.phi(pre_x), act.prime(pre_x) * pre[1])), weight2)  # (2, ..., D)
    return out[0] + bias2, out[1]


class _Workspace(threading.local):
    """Scratch buffers of the fused MLP on CPU, kept from call to call (one set per thread).

    The hidden pair and its gradient are ``(2M, H)`` buffers that live only within one forward or backward call. On
    CPU a fresh buffer of that size comes from the operating system as new pages on nearly every call; reusing one
    keeps it mapped and in cache, which is most of what separates the fused MLP from a plain MLP on the doubled batch
    (``joint_mlp_vs_doubled_mlp_time`` in ``docs/RESULTS.md``). The cost is holding the two largest buffers between
    steps (:func:`release_workspace` frees them). CUDA's caching allocator already reuses memory and a compiled graph
    plans its own, so there (and under ``torch.compile``) buffers are allocated. Nothing returned or saved for backward
    is a view of these buffers.
    """

    def __init__(self):
        self.buffers: dict[str, Tensor] = {}

    def take(self, name: str, like: Tensor) -> Tensor:
        """An uninitialised tensor shaped and typed as ``like``: the named buffer (grown as needed) on CPU."""
        if like.device.type != "cpu" or torch.compiler.is_compiling():
            return torch.empty_like(like)
        buffer = self.buffers.get(name)
        stale = buffer is None or buffer.dtype != like.dtype or buffer.numel() < like.numel()
        if stale or buffer.is_inference() and not torch.is_inference_mode_enabled():  # not writable outside it
            buffer = self.buffers[name] = torch.empty(like.numel(), dtype=like.dtype)
        return buffer[: like.numel()].view(like.shape)


_WORKSPACE = _Workspace()


def release_workspace() -> int:
    """Free the fused MLP's kept scratch buffers (this thread's); returns the bytes released. The next Full Wave step
    allocates them again."""
    released = sum(b.numel() * b.element_size() for b in _WORKSPACE.buffers.values())
    _WORKSPACE.buffers.clear()
    return released


def _product_into(a: Tensor, b: Tensor, out: Tensor) -> Tensor:
    """``a @ b`` written into ``out`` where the dtypes agree; otherwise (mixed under autocast) a new tensor."""
    if a.dtype == b.dtype == out.dtype:
        return torch.mm(a, b, out=out)
    return a @ b


def _joint_mlp(xv: Tensor, weight1: Tensor, bias1: Tensor, weight2: Tensor, bias2: Tensor, act: Activation):
    """:class:`_JointMLP`'s forward pass: ``((out_x, out_v), p)``, ``p`` the pre-activations of state and velocity."""
    rows = xv.reshape(-1, xv.shape[-1])  # (2M, D): the state's rows, then the velocity's
    pre = rows @ weight1.t()  # (2M, H)
    tokens = pre.shape[0] // 2
    pre_x, pre_v = pre[:tokens], pre[tokens:]
    pre_x += bias1
    hidden = _WORKSPACE.take("hidden", pre)
    act.phi_into(pre_x, out=hidden[:tokens])
    act.prime_times(pre_v, pre_x, out=hidden[tokens:])
    out = hidden @ weight2.t()  # (2M, D)
    out[:tokens] += bias2
    return out.view(xv.shape[:-1] + out.shape[-1:]).unbind(0), pre


class _JointMLP(torch.autograd.Function):
    """``xv = stack(x, v) -> (φ(p_x) W₂ᵀ + b₂, (φ'(p_x) ⊙ p_v) W₂ᵀ)``, ``p = stack(x W₁ᵀ + b₁, v W₁ᵀ)``, saving ``xv``
    and ``p`` (what autograd's two linear layers would save) and recomputing the hidden layer in the backward pass.

    Each weight meets state and velocity in one matrix product on ``(2M, ·)`` rows (M tokens). The elementwise work is
    written for few passes over the hidden layer: the bias added in place, the hidden pair written by one kernel each
    into one buffer (``φ`` and the fused ``g ⊙ φ'``, no stacking copy), and in the backward pass ``φ'`` once (the
    transcendental pass) for its three products and ``g ⊙ φ''`` in place (:attr:`Activation.add_curvature`); the
    large scratch buffers are reused from call to call (:class:`_Workspace`). Left to autograd, the chain would save
    every intermediate of ``φ'`` and both hidden activations; recomputing keeps Full Wave's memory near diffusion's.
    Under ``create_graph=True`` the backward pass is autograd's through :func:`_plain_joint_mlp`, so that
    double backward is exact.
    """

    @staticmethod
    def forward(ctx, xv: Tensor, weight1: Tensor, bias1: Tensor, weight2: Tensor, bias2: Tensor, act: Activation):
        out, pre = _joint_mlp(xv, weight1, bias1, weight2, bias2, act)
        ctx.save_for_backward(xv, pre, weight1, bias1, weight2, bias2)
        ctx.act = act
        ctx.autocast = AutocastState.capture(pre)
        return out

    @staticmethod
    def backward(ctx, grad_x: Tensor, grad_v: Tensor):
        with ctx.autocast():  # under bf16 autocast the products mix dtypes, as in the forward pass
            if torch.is_grad_enabled():  # create_graph: a backward pass that can itself be differentiated
                xv, _, weight1, bias1, weight2, bias2 = ctx.saved_tensors
                plain = partial(_plain_joint_mlp, act=ctx.act)
                return (*vjp_with_graph(plain, (xv, weight1, bias1, weight2, bias2), (grad_x, grad_v)), None)
            return _JointMLP._backward(ctx, grad_x, grad_v)

    @staticmethod
    def _backward(ctx, grad_x: Tensor, grad_v: Tensor):
        xv, pre, weight1, _, weight2, _ = ctx.saved_tensors
        act, tokens = ctx.act, pre.shape[0] // 2
        pre_x, pre_v = pre[:tokens], pre[tokens:]
        grads = torch.stack((grad_x, grad_v)).reshape(pre.shape[0], -1)  # (2M, D)
        hidden = _WORKSPACE.take("hidden", pre)  # the forward's hidden pair again, for W₂'s gradient
        act.phi_into(pre_x, out=hidden[:tokens])
        slope = act.prime_times(pre_x.new_ones(()).expand_as(pre_x), pre_x, out=_WORKSPACE.take("slope", pre_x))
        torch.mul(slope, pre_v, out=hidden[tokens:])  # φ'(p_x) once: it multiplies three tensors here
        grad_weight2 = grads.t() @ hidden
        grad_pre = _product_into(grads, weight2, _WORKSPACE.take("grad_pre", pre))  # (2M, H): turned into p's in place
        g_x, g_v = grad_pre[:tokens], grad_pre[tokens:]
        curved = torch.mul(g_v, pre_v, out=hidden[:tokens])  # g_v ⊙ p_v, for p_x's term g_v ⊙ p_v ⊙ φ''(p_x)
        g_v.mul_(slope)
        g_x.mul_(slope)
        act.add_curvature(g_x, curved, pre_x, hidden[tokens:])
        rows = xv.reshape(pre.shape[0], -1)
        return (
            (grad_pre @ weight1).view(xv.shape),
            grad_pre.t() @ rows,
            g_x.sum(0),
            grad_weight2,
            grads[:tokens].sum(0),
            None,
        )


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
