"""The two-layer MLP on the state and its velocity: :class:`JointMLP`, the fused Function it runs, and its CPU
scratch buffers (:func:`release_workspace`).
"""

from __future__ import annotations

import threading
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from solvers import AutocastState, transforms_active

from ..hooks import plain_calls
from .activations import Activation, activation
from .double_backward import vjp_with_graph

RECOMPUTE_FROM = 1 << 16
"""The hidden layer's size (elements) from which :meth:`JointMLP.position` recomputes it in the backward pass instead
of saving it: below it the saving is under 256 KB (float32) and the Python backward pass's overhead (about 0.1 ms a
call on CPU) costs more than the memory is worth. Either way the values and gradients are the same bits."""


class JointMLP(nn.Module):
    """Two-layer MLP ``φ(x W₁ᵀ + b₁) W₂ᵀ + b₂`` with the exact velocity ``(φ'(x W₁ᵀ + b₁) ⊙ v W₁ᵀ) W₂ᵀ``.

    :meth:`position` is the plain MLP; while training (hidden layers of :data:`RECOMPUTE_FROM` elements or more) it
    saves its input and pre-activation and recomputes the hidden layer in the backward pass (:class:`_RecomputedMLP`).
    State and velocity share each matrix product (stacked on the batch axis).
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
        fc1, fc2 = self.fc1, self.fc2
        if (
            torch.is_grad_enabled()  # first: inference (a generated token's pass) asks nothing more
            and x.numel() // max(x.shape[-1], 1) * fc1.out_features >= RECOMPUTE_FROM
            and (x.requires_grad or any(p is not None and p.requires_grad for p in _weights(fc1, fc2)))
            and not (self.training and self.drop.p > 0)
            and type(fc1) is nn.Linear
            and type(fc2) is nn.Linear
            and not transforms_active()
            and plain_calls(fc1, fc2)
        ):  # training at size: the hidden layer is recomputed in the backward pass instead of saved
            return _RecomputedMLP.apply(x, *_weights(fc1, fc2), self.act)
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


def _weights(fc1: nn.Linear, fc2: nn.Linear) -> tuple[Tensor | None, ...]:
    return fc1.weight, fc1.bias, fc2.weight, fc2.bias


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
    """Scratch buffers of the fused MLP and LayerNorm on CPU, kept from call to call (one set per thread).

    The hidden pair (``(2M, H)``, then the pre-activations' gradient in the backward pass), ``φ'(p_x)`` and
    ``g_v ⊙ p_v`` (``(M, H)`` each) live only within one forward or backward call (the plain MLP's hidden layer and
    its gradient take the first and the last), as do the MLP's stacked output gradient and the LayerNorm backward
    pass's ``x̂``, ``u`` and ``a``. On CPU a fresh buffer of that size comes from the operating system as new pages on
    nearly every call; reusing one keeps it mapped and in cache, which is most of what separates the fused MLP from a
    plain MLP on the doubled batch (``joint_mlp_vs_doubled_mlp_time`` in ``docs/RESULTS.md``). The cost is holding
    the buffers between steps (:func:`release_workspace` frees them). CUDA's caching allocator already reuses memory
    and a compiled graph plans its own, so there (and under ``torch.compile``) buffers are allocated. Nothing returned
    or saved for backward is a view of these buffers.
    """

    def __init__(self):
        self.buffers: dict[str, Tensor] = {}

    def take(self, name: str, like: Tensor, shape: tuple[int, ...] | None = None) -> Tensor:
        """An uninitialised tensor typed as ``like`` and shaped as it (or as ``shape``): the named buffer (grown as
        needed) on CPU."""
        shape = like.shape if shape is None else torch.Size(shape)
        if like.device.type != "cpu" or torch.compiler.is_compiling():
            return like.new_empty(shape)
        size = shape.numel()
        buffer = self.buffers.get(name)
        stale = buffer is None or buffer.dtype != like.dtype or buffer.numel() < size
        if stale or buffer.is_inference() and not torch.is_inference_mode_enabled():  # not writable outside it
            buffer = self.buffers[name] = torch.empty(size, dtype=like.dtype)
        return buffer[:size].view(shape)


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


def _plain_mlp(x: Tensor, weight1: Tensor, bias1: Tensor, weight2: Tensor, bias2: Tensor, act: Activation) -> Tensor:
    """:class:`_RecomputedMLP`'s map in ordinary differentiable operations: ``φ(x W₁ᵀ + b₁) W₂ᵀ + b₂``."""
    return F.linear(act.phi(F.linear(x, weight1, bias1)), weight2, bias2)


class _RecomputedMLP(torch.autograd.Function):
    """``x -> φ(x W₁ᵀ + b₁) W₂ᵀ + b₂`` (the plain MLP of :meth:`JointMLP.position` while training), saving ``x`` and
    the pre-activation ``p`` but not the hidden layer ``φ(p)``: the backward pass computes it again for ``W₂``'s
    gradient. That is a quarter of the activations a pre-LN transformer layer saves (``4D`` of about ``16D`` per
    token) for one pass of ``φ`` per layer and step. The forward value and every gradient are bit for bit those of
    autograd through ``nn.Linear``, ``φ`` and ``nn.Linear`` (the same kernels on the same operands, ``φ``'s gradient by
    the kernel autograd runs, :attr:`Activation.grad`); the hidden layer and its gradient are written into the kept
    scratch buffers (:class:`_Workspace`), which on CPU also spares the page faults of two fresh hidden-size buffers.
    Under ``create_graph=True`` the backward pass is autograd's through :func:`_plain_mlp`, so that double backward is
    exact.
    """

    @staticmethod
    def forward(ctx, x: Tensor, weight1: Tensor, bias1: Tensor, weight2: Tensor, bias2: Tensor, act: Activation):
        pre = F.linear(x, weight1, bias1)
        hidden = act.phi_into(pre, out=_WORKSPACE.take("hidden", pre))
        ctx.save_for_backward(x, pre, weight1, bias1, weight2, bias2)
        ctx.act = act
        ctx.autocast = AutocastState.capture(pre)
        return F.linear(hidden, weight2, bias2)

    @staticmethod
    def backward(ctx, grad: Tensor):
        with ctx.autocast():  # under bf16 autocast the products mix dtypes, as in the forward pass
            x, pre, weight1, bias1, weight2, bias2 = ctx.saved_tensors
            if torch.is_grad_enabled():  # create_graph: a backward pass that can itself be differentiated
                plain = partial(_plain_mlp, act=ctx.act)
                return (*vjp_with_graph(plain, (x, weight1, bias1, weight2, bias2), grad), None)
            # the products autograd's addmm backward makes for each nn.Linear: grad·W, gradᵀ·input, Σ grad
            rows = pre.reshape(-1, pre.shape[-1])
            hidden = ctx.act.phi_into(rows, out=_WORKSPACE.take("hidden", rows))
            grads = grad.reshape(-1, grad.shape[-1])
            grad_weight2 = _weight_grad(grads, hidden, weight2) if ctx.needs_input_grad[3] else None
            grad_bias2 = grads.sum(0) if ctx.needs_input_grad[4] else None
            grad_pre = _product_into(grads, weight2, _WORKSPACE.take("product", rows))
            grad_pre = ctx.act.grad_kernel()(grad_pre, rows, out=grad_pre)
            inputs = x.reshape(-1, x.shape[-1])  # the matrix the first product saw (a view where it can be one)
            return (
                _input_grad(grad_pre, inputs, weight1).reshape(x.shape) if ctx.needs_input_grad[0] else None,
                _weight_grad(grad_pre, inputs, weight1) if ctx.needs_input_grad[1] else None,
                grad_pre.sum(0) if ctx.needs_input_grad[2] else None,
                grad_weight2,
                grad_bias2,
                None,
            )


def _column_major(matrix: Tensor) -> bool:
    """Whether a matrix is stored column by column (a transposed contiguous one): autograd's matrix-product backward
    then computes the gradient in that layout, and the BLAS kernel it calls depends on the layout."""
    return matrix.stride(0) == 1 and matrix.stride(1) == matrix.shape[0]


def _input_grad(grad: Tensor, inputs: Tensor, weight: Tensor) -> Tensor:
    """The gradient of ``inputs`` in ``inputs @ weight.t()``, by the product autograd's backward of ``mm`` makes for
    that layout (a column-major input's gradient is computed transposed): the same call on the same operands, so the
    same bits on any CPU's BLAS."""
    if _column_major(inputs):
        return weight.t().mm(grad.t()).t()
    return grad.mm(weight)


def _weight_grad(grad: Tensor, inputs: Tensor, weight: Tensor) -> Tensor:
    """The gradient of ``weight`` in ``inputs @ weight.t()``, as autograd's backward of ``mm`` computes it for the
    transposed weight's layout (column-major when the weight is contiguous)."""
    if _column_major(weight.t()):
        return grad.t().mm(inputs)
    return inputs.t().mm(grad).t()


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
        if grad_x.dtype == grad_v.dtype:  # stacked into a kept buffer: it lives only within this call
            grads = torch.stack((grad_x, grad_v), out=_WORKSPACE.take("grads", grad_x, (2, *grad_x.shape)))
        else:
            grads = torch.stack((grad_x, grad_v))
        grads = grads.view(pre.shape[0], -1)  # (2M, D)
        hidden = _WORKSPACE.take("hidden", pre)  # the forward's hidden pair again, for W₂'s gradient
        act.phi_into(pre_x, out=hidden[:tokens])
        slope = act.prime_times(pre_x.new_ones(()).expand_as(pre_x), pre_x, out=_WORKSPACE.take("slope", pre_x))
        torch.mul(slope, pre_v, out=hidden[tokens:])  # φ'(p_x) once: it multiplies three tensors here
        grad_weight2 = grads.t() @ hidden
        # (2M, H), turned into p's gradient in place, in the hidden pair's buffer (spent once W₂'s gradient has it)
        grad_pre = _product_into(grads, weight2, hidden)
        g_x, g_v = grad_pre[:tokens], grad_pre[tokens:]
        curved = torch.mul(g_v, pre_v, out=_WORKSPACE.take("product", pre_x))  # for p_x's term g_v ⊙ p_v ⊙ φ''(p_x)
        grad_pre.view(2, tokens, -1).mul_(slope)  # both halves by φ'(p_x), one kernel
        act.add_curvature(g_x, curved, pre_x, slope)  # φ'(p_x) is spent: its buffer is the scratch
        rows = xv.reshape(pre.shape[0], -1)
        return (
            (grad_pre @ weight1).view(xv.shape),
            grad_pre.t() @ rows,
            g_x.sum(0),
            grad_weight2,
            grads[:tokens].sum(0),
            None,
        )
