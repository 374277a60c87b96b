"""The backbone: ``depth`` layers driven by their steppers, then a final LayerNorm.

    x (B, N, D) -> [layer 1: one step of dt_1] -> ... -> [layer L] -> LN -> features (B, N, D)

A second-order layer starts its velocity at zero (``v0 = 0``, as in the Wavy Transformer); consecutive layers whose
steppers share a class share the scheme's running state (a two-step scheme's previous position, a cached force);
where a schedule switches between first- and second-order layers the velocity starts at zero on entry and is dropped
on exit (``solvers.adapt``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import torch
import torch.utils.checkpoint
from torch import Tensor, nn

import solvers
from solvers import PhaseState

from ._amp import AutocastState
from .blocks import Layer, Preset, ReversibleDynamics, resolve
from .continuous import ContinuousBackbone, ContinuousPreset
from .fields import AttentionField, FeedForward

Solver = str | Preset | Sequence[str | Preset] | Callable[[int], str | Preset]
"""A preset name or :class:`Preset` for every layer, a sequence with one per layer, or ``layer_index -> preset``."""


def schedule(solver: Solver, depth: int) -> list[Preset]:
    """One :class:`Preset` per layer from any accepted ``solver`` value."""
    if not isinstance(depth, int) or depth < 1:
        raise ValueError(f"depth must be a positive int, got {depth!r}.")
    if isinstance(solver, (str, Preset)):
        return [resolve(solver)] * depth
    if callable(solver):
        return [resolve(solver(i)) for i in range(depth)]
    presets = [resolve(s) for s in solver]
    if len(presets) != depth:
        raise ValueError(f"a solver schedule needs one entry per layer: got {len(presets)} for depth {depth}.")
    return presets


class Backbone(nn.Module):
    """A stack of :class:`~odeformer.blocks.Layer` s integrated in depth; see the module docstring.

    ``make_attention(form)`` and ``make_ffn()`` build one layer's fields (``make_ffn=None``: attention only, as in
    DIFFormer); ``dt=None`` takes each preset's default step, ``form=None`` each preset's attention form;
    ``tie_weights=True`` builds the fields once and shares them across depth; ``checkpoint=True`` recomputes each
    layer in the backward pass instead of storing its activations. A backbone of ``reversible`` layers stores only
    its final state when training and rebuilds the others by inverting the layers (:class:`_ReversibleStack`).
    """

    def __init__(
        self,
        depth: int,
        dim: int,
        solver: Solver,
        make_attention: Callable[[str], nn.Module],
        make_ffn: Callable[[], nn.Module] | None,
        dt: float | None = None,
        final_norm: bool = True,
        form: str | None = None,
        tie_weights: bool = False,
        checkpoint: bool = False,
    ):
        super().__init__()
        presets = schedule(solver, depth)
        self.checkpoint = checkpoint
        if tie_weights:  # one set of fields for every layer (each layer still has its own stepper)
            shared = make_attention(presets[0].form if form is None else form)
            shared_ffn = None if make_ffn is None else make_ffn()
            make_attention, make_ffn = (lambda _: shared), (None if make_ffn is None else (lambda: shared_ffn))
        self.layers = nn.ModuleList(
            Layer(
                make_attention(p.form if form is None else form),
                None if make_ffn is None else make_ffn(),
                p.build(dim),
                p.dt if dt is None else dt,
            )
            for p in presets
        )
        self.norm = nn.LayerNorm(dim) if final_norm else nn.Identity()
        kinds = {isinstance(layer.dynamics, ReversibleDynamics) for layer in self.layers}
        if len(kinds) > 1:
            raise ValueError(
                "a schedule cannot mix the reversible preset with others: its backward rebuilds every layer."
            )
        self.reversible = kinds == {True}
        if self.reversible and any(_drops(m) for m in self.layers.modules()):
            raise ValueError(
                "the reversible preset needs dropout=0: its backward rebuilds states by inverting each "
                "layer, which random dropout masks would break."
            )

    @property
    def second_order(self) -> bool:
        """Whether any layer carries a velocity."""
        return any(layer.stepper.second_order for layer in self.layers)

    def forward(self, x: Tensor, record: list | None = None, **context: Any) -> Tensor:
        """Features ``(B, N, D)``. ``context`` (e.g. ``attn_mask``) goes to every attention field. If ``record`` is a
        list, the state after every layer is appended to it (the input first): a Tensor, or a ``PhaseState`` for
        second-order layers."""
        if self.reversible and record is None and torch.is_grad_enabled():
            return self.norm(_reversible(self.layers, context, x, self._trainable()))
        y, t, state, previous = x, 0.0, None, None
        if record is not None:
            record.append(y)
        for layer in self.layers:
            stepper = layer.stepper
            if previous is None or type(stepper) is not type(previous):
                y = solvers.adapt(y, stepper)
                state = stepper.init(layer.attention, t, y)
            if self.checkpoint and torch.is_grad_enabled():
                y, state = torch.utils.checkpoint.checkpoint(layer, t, y, state, use_reentrant=False, **context)
            else:
                y, state = layer(t, y, state, **context)
            t, previous = t + layer.dt, stepper
            if record is not None:
                record.append(y)
        return self.norm(y.x if isinstance(y, PhaseState) else y)

    def _trainable(self) -> list[Tensor]:
        return [p for p in self.layers.parameters() if p.requires_grad]


def _drops(module: nn.Module) -> bool:
    rate = module.p if isinstance(module, nn.Dropout) else getattr(module, "dropout", 0.0)
    return isinstance(rate, float) and rate > 0


@torch.compiler.disable  # its backward calls autograd.grad, which Dynamo does not trace: this part stays eager
def _reversible(layers: nn.ModuleList, context: dict[str, Any], x: Tensor, params: list[Tensor]) -> Tensor:
    out, _ = _ReversibleStack.apply(_Run(layers, context), x, torch.zeros_like(x), *params)
    return out


class _Run:
    """What the reversible autograd function needs besides tensors: the layers and the attention context."""

    def __init__(self, layers: nn.ModuleList, context: dict[str, Any]):
        self.layers, self.context = layers, context

    def times(self) -> list[float]:
        t, out = 0.0, []
        for layer in self.layers:
            out.append(t)
            t = t + layer.dt
        return out


class _ReversibleStack(torch.autograd.Function):
    """Forward without storing activations; backward rebuilds each layer's input by its inverse and backpropagates
    through that one layer at a time, so memory does not grow with depth."""

    @staticmethod
    def forward(ctx, run: _Run, x: Tensor, v: Tensor, *params: Tensor):
        y = PhaseState(x, v)
        with torch.no_grad():
            for layer, t in zip(run.layers, run.times()):
                y, _ = layer(t, y, None, **run.context)
        ctx.run = run
        ctx.autocast = AutocastState.capture(x)  # the rebuilt layers must compute exactly as the forward pass did
        ctx.save_for_backward(y.x, y.v)
        return y.x.clone(), y.v.clone()

    @staticmethod
    def backward(ctx, grad_x: Tensor, grad_v: Tensor):
        run = ctx.run
        x, v = ctx.saved_tensors
        y = PhaseState(x, v)
        params = [p for p in run.layers.parameters() if p.requires_grad]
        grads: dict[int, Tensor] = {}
        for layer, t in reversed(list(zip(run.layers, run.times()))):
            with torch.no_grad(), ctx.autocast():
                y_in = layer.inverse(t, y, **run.context)
            with torch.enable_grad(), ctx.autocast():
                xi, vi = y_in.x.detach().requires_grad_(), y_in.v.detach().requires_grad_()
                out, _ = layer(t, PhaseState(xi, vi), None, **run.context)
                local = [p for p in layer.parameters() if p.requires_grad]
                g = torch.autograd.grad((out.x, out.v), (xi, vi, *local), (grad_x, grad_v), allow_unused=True)
            grad_x, grad_v = g[0], g[1]
            for p, gp in zip(local, g[2:]):
                if gp is not None:
                    grads[id(p)] = gp if id(p) not in grads else grads[id(p)] + gp
            y = PhaseState(y_in.x, y_in.v)
        return (None, grad_x, grad_v, *(grads.get(id(p)) for p in params))


def backbone(
    depth: int,
    dim: int,
    solver: Solver | ContinuousPreset,
    make_attention: Callable[[str], nn.Module],
    make_ffn: Callable[[], nn.Module] | None,
    dt: float | None = None,
    form: str | None = None,
    tie_weights: bool = False,
    checkpoint: bool = False,
) -> nn.Module:
    """A discrete :class:`Backbone`, or a :class:`~odeformer.continuous.ContinuousBackbone` when ``solver`` is a
    :class:`~odeformer.continuous.ContinuousPreset` (adaptive solvers; weights are tied by construction)."""
    if isinstance(solver, ContinuousPreset):
        return ContinuousBackbone(depth, dim, solver, make_attention, make_ffn, form=form)
    return Backbone(
        depth, dim, solver, make_attention, make_ffn, dt=dt, form=form, tie_weights=tie_weights, checkpoint=checkpoint
    )


def transformer(
    depth: int,
    dim: int,
    heads: int,
    solver: Solver,
    dt: float | None = None,
    mask: str = "full",
    impl: str = "sdpa",
    mlp_ratio: float = 4.0,
    activation: str = "gelu",
    ln_mode: str = "paper",
    dropout: float = 0.0,
    tie_weights: bool = False,
    checkpoint: bool = False,
) -> nn.Module:
    """The standard backbone: softmax attention (:class:`~odeformer.fields.AttentionField`) and an FFN per layer
    (or one weight-tied block for a continuous ``solver``)."""
    if not isinstance(dim, int) or not isinstance(heads, int) or heads < 1 or dim % heads:
        raise ValueError(f"dim must be divisible by heads: got dim={dim}, heads={heads}.")
    return backbone(
        depth,
        dim,
        solver,
        make_attention=partial(AttentionField, dim, heads, mask=mask, impl=impl, dropout=dropout),
        make_ffn=partial(FeedForward, dim, int(mlp_ratio * dim), activation, ln_mode, dropout),
        dt=dt,
        tie_weights=tie_weights,
        checkpoint=checkpoint,
    )
