"""One layer = one step: a layer's fields driven by its block stepper, with its step ``dt``.

A :class:`Layer` holds two fields, the attention field ``F_a`` and optionally the FFN field ``F_f`` (see
:mod:`odeformer.fields`), the maps that follow each sublayer in the post-norm layout (:class:`StateMap`, with
:class:`JointDropout`), a block stepper from :mod:`solvers` (:class:`solvers.Split` or :class:`solvers.Whole`) and
its step ``dt``. It is a stepper over its own fields, and the backbone's depth loop steps it through :meth:`Layer.init`,
:meth:`Layer.step` and :meth:`Layer.inverse`. What a layer is built from is a :class:`~odeformer.presets.LayerSpec`
(:mod:`odeformer.presets`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from solvers import AbstractStepper, Block


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
    (``dynamics``: :class:`solvers.Split` or :class:`solvers.Whole`), and its step ``dt``.

    It is a stepper over its own fields: :meth:`init`, :meth:`forward` (one step) and, where the dynamics declares
    ``reversible``, :meth:`inverse`; ``context`` (e.g. ``attn_mask``) reaches the attention field.
    """

    def __init__(
        self,
        attention: nn.Module,
        ffn: nn.Module | None,
        dynamics: AbstractStepper,
        dt: float,
        after_attention: nn.Module | None = None,
        after_ffn: nn.Module | None = None,
    ):
        super().__init__()
        if not (isinstance(dt, (int, float)) and math.isfinite(dt) and dt > 0):
            raise ValueError(f"dt must be positive and finite, got {dt!r}.")
        self.attention, self.ffn, self.dynamics, self.dt = attention, ffn, dynamics, float(dt)
        self.after_attention, self.after_ffn = after_attention, after_ffn

    @property
    def stepper(self) -> AbstractStepper:
        """The layer's scheme (the stepper on the attention field)."""
        return self.dynamics.stepper

    @property
    def order(self) -> int:
        """The layer's order of convergence to its small-step limit (0: it has none)."""
        return self.dynamics.layer_order(self.block())

    def block(self, context: dict[str, Any] | None = None) -> Block:
        """The layer's fields as the :class:`solvers.Block` its dynamics steps on (attention bound to ``context``)."""
        attention = self.attention
        if context:
            attention = _Bound(self.attention, context)
        return Block(attention, self.ffn, self.after_attention, self.after_ffn)

    def init(self, t, y, **context: Any):
        return self.dynamics.init(self.block(context), t, y)

    def forward(self, t, y, state, **context: Any):
        """One step; ``context`` (e.g. ``attn_mask``) is passed to the attention field."""
        return self.dynamics.step(self.block(context), t, y, self.dt, state)

    def inverse(self, t, y1, **context: Any):
        """The input of :meth:`forward` from its output (reversible dynamics only)."""
        return self.dynamics.inverse(self.block(context), t, y1, self.dt)


class _Bound:
    """A field with its call-time context (masks, the graph's propagation matrix) bound."""

    __slots__ = ("field", "context")

    def __init__(self, field: Callable, context: dict[str, Any]):
        self.field, self.context = field, context

    def __call__(self, t, x):
        return self.field(t, x, **self.context)

