"""Weights that are a function of depth-time: a field given by its values at ``K`` knots.

A :class:`KnotField` holds ``K`` copies of one field (attention, or the FFN), its *knots*: knot ``k`` is the field's
weights at time ``t_k = k T / K`` of the flow over ``[0, T]``. At any other time the field runs with the weights
interpolated linearly between the two knots around it (constant after the last knot): the weights are a
continuous, piecewise-linear function of ``t``, and a model whose layers share one such field per sublayer is the
discretisation of one ODE ``x' = F(θ(t), x)``, which can be stepped at any number of steps after training (finer,
coarser, or by an adaptive solver), each evaluation at its own time.

``K`` knots over ``L`` layers of step ``T / L``: ``K = 1`` is a weight-tied (autonomous) model; ``K = L`` puts one
knot at each layer's start, so a scheme that evaluates its field once per step, at the step's start (Euler,
semi-implicit Euler, heavy ball, ...), computes exactly what the untied model computes (a multi-stage scheme's inner
stages, at ``t + c dt``, see the interpolated weights: the time-dependent ODE's own stages). The knots are ordinary
parameters (``knots.0.qkv.weight``, ...): the optimiser, weight decay, checkpoints and ``state_dict`` see them as such.

Interpolation is linear in each parameter, ``θ(t) = (1 - w) θ_k + w θ_{k+1}`` (``torch.lerp``). An evaluation at a
knot (to :data:`SNAP` of a knot spacing: a time summed from steps lands on a knot only to rounding) runs that knot's
module itself; any other runs it with the interpolated tensors bound for the call (``torch.func.functional_call``), so
every path of the field (its fused kernels, its chain rule ``joint``) sees the weights at ``t``.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from solvers import differentiable_jvp

SNAP = 1e-9
"""A time within this fraction of a knot spacing of a knot is at that knot."""


class KnotField(nn.Module):
    """A field whose weights are piecewise linear in depth-time, given at ``len(knots)`` knots ``t_k = k T / K``
    over ``[0, time]`` (see the module docstring). ``forward(t, x, **context)`` is the field at time ``t``;
    ``joint_at(t, x, v)`` its value and Jacobian-vector product there (the chain rule of a field that has one)."""

    def __init__(self, knots: Sequence[nn.Module], time: float):
        super().__init__()
        if not knots:
            raise ValueError("a KnotField needs at least one knot.")
        if isinstance(time, bool) or not (isinstance(time, (int, float)) and math.isfinite(time) and time > 0):
            raise ValueError(f"a KnotField's time T must be positive and finite, got {time!r}.")
        self.knots = nn.ModuleList(knots)
        self.time = float(time)
        self.form = getattr(knots[0], "form", None)  # an attention field's form (residual or laplacian)

    @property
    def count(self) -> int:
        return len(self.knots)

    def locate(self, t: Any) -> tuple[int, float]:
        """``(k, w)``: time ``t`` lies between knots ``k`` and ``k + 1``, the fraction ``w`` of their spacing past
        ``k`` (``w = 0`` at a knot, before the first and after the last, where the weights stay constant)."""
        u = float(t) * self.count / self.time
        k = math.floor(u + SNAP)
        if k <= 0 and u < SNAP:
            return 0, 0.0
        if k >= self.count - 1:
            return self.count - 1, 0.0
        w = u - k
        return k, (0.0 if abs(w) <= SNAP else w)

    def mixture(self, t: Any) -> list[tuple[int, float]]:
        """``[(k, weight), ...]``: the knots the field at time ``t`` combines, with their interpolation weights."""
        k, w = self.locate(t)
        return [(k, 1.0)] if w == 0.0 else [(k, 1.0 - w), (k + 1, w)]

    def forward(self, t: Any, x: Tensor, **context: Any) -> Tensor:
        return self._call("forward", t, (t, x), context)

    def joint_at(self, t: Any, x: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """``(f(t, x), J_f(t, x) v)`` by the knots' own chain rule (``joint``), else by forward-mode AD."""
        if not hasattr(self.knots[0], "joint"):
            return differentiable_jvp(lambda z: self(t, z), x, v)
        return self._call("joint", t, (x, v), {})

    def _call(self, method: str, t: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
        k, w = self.locate(t)
        if w == 0.0:
            return getattr(self.knots[k], method)(*args, **kwargs)
        tensors = _interpolated(self.knots[k], self.knots[k + 1], w)
        return torch.func.functional_call(_Method(self.knots[k], method), tensors, args, kwargs, strict=True)

    def at(self, t: Any) -> nn.Module:
        """A copy of the field with its weights at time ``t``, detached (for analysis: the attention matrix of a
        layer, its spectrum)."""
        k, w = self.locate(t)
        made = copy.deepcopy(self.knots[k])
        if w != 0.0:
            with torch.no_grad():
                pairs = zip(_tensors(self.knots[k]), _tensors(self.knots[k + 1]), _tensors(made))
                for (_, a), (_, b), (_, out) in pairs:
                    if out.is_floating_point():
                        out.copy_(torch.lerp(a, b, w))
        return made

    def extra_repr(self) -> str:
        return f"knots={self.count}, T={self.time:g}"


class _Method(nn.Module):
    """``module.<method>`` as a module's forward, so that ``functional_call`` binds tensors around any method."""

    def __init__(self, module: nn.Module, method: str):
        super().__init__()
        self.module, self.method = module, method

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.module, self.method)(*args, **kwargs)


def _tensors(module: nn.Module) -> list[tuple[str, Tensor]]:
    """A module's parameters and buffers by name, in one fixed order (a shared one under each of its names)."""
    return [*module.named_parameters(remove_duplicate=False), *module.named_buffers(remove_duplicate=False)]


def _interpolated(left: nn.Module, right: nn.Module, w: float) -> dict[str, Tensor]:
    """``{"module.<name>": (1 - w) a + w b}`` for each floating tensor of ``left`` (``a``) and ``right`` (``b``); the
    others (integer buffers) as ``left`` holds them."""
    return {
        f"module.{name}": torch.lerp(a, b, w) if a.is_floating_point() else a
        for (name, a), (_, b) in zip(_tensors(left), _tensors(right))
    }


def knot_uses(field: KnotField, times: Sequence[float]) -> list[float]:
    """How many steps each knot acts in, for steps starting at ``times``: the sum of its interpolation weights (a
    knot's share of the depth-time the steps cover, which its optimiser settings scale with)."""
    uses = [0.0] * field.count
    for t in times:
        for k, weight in field.mixture(t):
            uses[k] += weight
    return uses
