"""One layer = one step: a layer's fields driven by its block stepper, from its time ``t0`` by its step ``dt``.

A :class:`Layer` is a module holding two fields, the attention field ``F_a`` and optionally the FFN field ``F_f``
(see :mod:`odeformer.fields`), the maps that follow each sublayer in the post-norm layout (:class:`StateMap`, with
:class:`JointDropout`), a block stepper from :mod:`solvers` (:class:`solvers.Split` or :class:`solvers.Whole`), its
start time ``t0`` and its step ``dt``. The backbone's depth loop (:func:`solvers.run_steps`) steps each layer's block
stepper on the layer's :meth:`Layer.block` (its fields, bound to the call-time context: masks, a cache) by the
layer's own ``dt``. What a layer is built from is a :class:`~odeformer.registry.Solver`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from solvers import Block, Claims, Y

if TYPE_CHECKING:
    from .registry import Solver


def check_step(value: Any, label: str = "dt") -> float:
    """A layer's step as a float, or a one-line error: it must be a positive, finite number (in float32 too)."""
    if isinstance(value, bool) or not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ValueError(f"{label} must be positive and finite, got {value!r}.")
    # on the CPU: a model built on the meta device (its parameter count) checks its steps too
    if not math.isfinite(torch.tensor(float(value), dtype=torch.float32, device="cpu").item()):
        raise ValueError(f"{label} must be positive and finite in float32 (at most about 3.4e38), got {value!r}.")
    return float(value)


class StateMap(nn.Module):
    """A map applied to the state after a sublayer (post-norm): ``forward(x)`` on a state, ``joint(x, v)`` on a state
    and its velocity (the chain rule). Wraps a joint module with ``position(x)`` and ``forward(x, v)``."""

    def __init__(self, module: nn.Module):
        super().__init__()
        self.module = module

    def forward(self, x: Tensor) -> Tensor:
        return self.module.position(x)

    def joint(self, x: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        return self.module(x, v)


class JointDropout(nn.Module):
    """Dropout on a state and, with the same mask, on its velocity (dropout is linear: its Jacobian is the mask)."""

    def __init__(self, p: float = 0.0):
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout must lie in [0, 1), got {p}.")
        self.p = p

    def _mask(self, x: Tensor) -> Tensor:
        # uniform draws (cheaper than bernoulli), compared and scaled in place: the mask (u >= p) / (1 - p)
        return torch.rand_like(x).ge_(self.p).div_(1.0 - self.p)

    def position(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        return x * self._mask(x)

    def forward(self, x: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        if not self.training or self.p == 0.0:
            return x, v
        keep = self._mask(x)
        return x * keep, v * keep


class Layer(nn.Module):
    """One layer: its fields (attention, optional FFN), optional maps after each (post-norm), its block stepper
    (``block_stepper``: a :class:`solvers.Split` or :class:`solvers.Whole`, built from ``solver``), its start time
    ``t0`` and its step ``dt`` (checked here, once; nothing checks it again per forward).

    The depth loop steps ``layer.block_stepper`` on ``layer.block(context)`` (``context`` a dict such as
    ``{"attn_mask": mask}``, or ``None``) from ``layer.t0`` by ``layer.dt``; where the block stepper is reversible
    and no map follows a sublayer, ``y = layer.inverse(y1, context)`` undoes a step; ``layer.continues(previous)``
    says whether the running state of the layer before carries on. Its claims are its block stepper's on its own
    block (:meth:`claims`).

    Checkpoints written when the block stepper's attribute was named ``dynamics`` load as they are: their
    ``….dynamics.…`` parameter names are read as ``….block_stepper.…``.
    """

    def __init__(
        self,
        solver: Solver,
        dim: int,
        attention: nn.Module,
        ffn: nn.Module | None,
        after_attention: nn.Module | None = None,
        after_ffn: nn.Module | None = None,
        *,
        dt: float | None = None,
        t0: float = 0.0,
    ):
        super().__init__()
        self.solver = solver
        self.dt = solver.dt if dt is None else check_step(dt)
        self.t0 = float(t0)
        self.attention, self.ffn, self.block_stepper = attention, ffn, solver.build(dim)
        self.after_attention, self.after_ffn = after_attention, after_ffn

    @property
    def stepper(self) -> nn.Module:
        """The layer's scheme (the stepper on the attention field)."""
        return self.block_stepper.stepper

    @property
    def second_order(self) -> bool:
        """Whether the layer carries a velocity."""
        return self.block_stepper.stepper.second_order

    def claims(self) -> Claims:
        """What the layer claims: its block stepper's claims on the layer's own block."""
        return self.block_stepper.claims(self.block())

    def block(self, context: dict[str, Any] | None = None) -> Block:
        """The layer's fields as the :class:`solvers.Block` its block stepper steps on (attention bound to
        ``context``)."""
        attention = self.attention
        if context:
            attention = _Bound(self.attention, context)
        return Block(attention, self.ffn, self.after_attention, self.after_ffn)

    def bind_cache(self, cache: Any) -> tuple[Block, list[nn.Module]]:
        """``(block, modules)``: the layer's block for passes with ``cache`` (one layer's
        :class:`~odeformer.generate.LayerCache`), each field's weights read once (a field's ``bind_cache(cache)``, an
        FFN's ``bind()``, where it offers one; else the field itself, bound to the cache as :meth:`block` binds it),
        and the modules whose calls those leave out: stepping on ``block`` is stepping on ``block({"cache":
        cache})`` while the check :func:`~odeformer.hooks.direct_calls` makes of them holds."""
        binder = getattr(self.attention, "bind_cache", None)
        attention, modules = binder(cache) if binder is not None else (_Bound(self.attention, {"cache": cache}), [])
        ffn = self.ffn
        binder = getattr(ffn, "bind", None)
        if binder is not None:
            ffn, bypassed = binder()
            modules = modules + bypassed
        return Block(attention, ffn, self.after_attention, self.after_ffn), modules

    def inverse(self, y1: Y, context: dict[str, Any] | None = None) -> Y:
        """The input of :meth:`step` from its output (a reversible block stepper, no maps)."""
        return self.block_stepper.inverse(self.block(context), self.t0, y1, self.dt)

    def continues(self, previous: Layer) -> bool:
        """Whether this layer takes over the running state of ``previous`` (a scheme of one kind)."""
        return self.block_stepper.continues(previous.block_stepper)

    def extra_repr(self) -> str:
        return f"t0={self.t0:g}, dt={self.dt:g}"

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        old = prefix + "dynamics."  # the block stepper's earlier name, in checkpoints written before the rename
        for key in [key for key in state_dict if key.startswith(old)]:
            state_dict[prefix + "block_stepper." + key[len(old) :]] = state_dict.pop(key)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


class _Bound:
    """A field with its call-time context (masks, the graph's propagation matrix) bound."""

    __slots__ = ("field", "context")

    def __init__(self, field: Callable, context: dict[str, Any]):
        self.field, self.context = field, context

    def __call__(self, t, x):
        return self.field(t, x, **self.context)
