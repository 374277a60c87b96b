"""One layer = one step: a layer's fields driven by its block stepper, with its step ``dt``.

A :class:`Layer` holds two fields, the attention field ``F_a`` and optionally the FFN field ``F_f`` (see
:mod:`odeformer.fields`), the maps that follow each sublayer in the post-norm layout (:class:`StateMap`, with
:class:`JointDropout`), a block stepper from :mod:`solvers` (:class:`solvers.Split` or :class:`solvers.Whole`) and
its step ``dt``. It is a stepper over its own fields, and the backbone's depth loop steps it through :meth:`Layer.init`,
:meth:`Layer.step` and :meth:`Layer.inverse`. What a layer is built from is a :class:`~odeformer.presets.LayerSpec`
(:mod:`odeformer.presets`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from solvers import AbstractStepper, Block, Carry, Claims, StepSize, Time, Y

if TYPE_CHECKING:
    from .presets import LayerSpec


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


class Layer(AbstractStepper, abstract=True):
    """One layer: its fields (attention, optional FFN), optional maps after each (post-norm), its block stepper
    (``block_stepper``: a :class:`solvers.Split` or :class:`solvers.Whole`, built from ``spec.block_stepper``) and its
    step ``spec.dt``.

    It is the stepper the backbone's depth loop drives (:func:`solvers.iterate` with ``dt=None``: each layer steps by
    its own ``dt``, checked once, where ``spec`` was made). Its field is the call-time context (a dict such as
    ``{"attn_mask": mask}``, or ``None``), which reaches the attention field: :meth:`init`, :meth:`step` and, where
    the block stepper is reversible and no map follows a sublayer, :meth:`inverse`. Its claims are its block
    stepper's on its own block.

    Checkpoints written when the block stepper's attribute was named ``dynamics`` load as they are: their
    ``….dynamics.…`` parameter names are read as ``….block_stepper.…``.
    """

    def __init__(
        self,
        spec: LayerSpec,
        dim: int,
        attention: nn.Module,
        ffn: nn.Module | None,
        after_attention: nn.Module | None = None,
        after_ffn: nn.Module | None = None,
    ):
        super().__init__()
        self.spec = spec
        self.attention, self.ffn, self.block_stepper = attention, ffn, spec.build(dim)
        self.after_attention, self.after_ffn = after_attention, after_ffn
        self.claim(Claims.of(self.block_stepper.on(self.block())))  # its block stepper's claims on its own block

    @property
    def dt(self) -> float:
        """The layer's step: its spec's (one place; checked when the spec was made)."""
        return self.spec.dt

    @property
    def stepper(self) -> AbstractStepper:
        """The layer's scheme (the stepper on the attention field)."""
        return self.block_stepper.stepper

    def block(self, context: dict[str, Any] | None = None) -> Block:
        """The layer's fields as the :class:`solvers.Block` its block stepper steps on (attention bound to
        ``context``)."""
        attention = self.attention
        if context:
            attention = _Bound(self.attention, context)
        return Block(attention, self.ffn, self.after_attention, self.after_ffn)

    def init(self, field: dict[str, Any] | None, t0: Time, y0: Y) -> Carry:
        return self.block_stepper.init(self.block(field), t0, y0)

    def step(self, field: dict[str, Any] | None, t: Time, y: Y, dt: StepSize, state: Carry) -> tuple[Y, Carry]:
        """One step of ``dt`` (the driver passes the layer's own); ``field`` is the context, e.g. ``attn_mask``."""
        return self.block_stepper.step(self.block(field), t, y, dt, state)

    def inverse(self, field: dict[str, Any] | None, t: Time, y1: Y, dt: StepSize) -> Y:
        """The input of :meth:`step` from its output (a reversible block stepper, no maps)."""
        return self.block_stepper.inverse(self.block(field), t, y1, dt)

    def continues(self, previous: AbstractStepper) -> bool:
        return isinstance(previous, Layer) and self.block_stepper.continues(previous.block_stepper)

    def extra_repr(self) -> str:
        return f"dt={self.dt:g}"

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

