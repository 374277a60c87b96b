"""The property kit on this library's own layers: :func:`check_solver`.

The only module of :mod:`odeformer` that imports the kit (:mod:`solvers.testing`, which needs hypothesis); the
library itself never imports this one (``odeformer.check_solver`` loads it when it is first read).
"""

from __future__ import annotations

from typing import Any

import torch

from solvers import Block
from solvers.testing import Problem, check_layer

from .fields import AttentionField, FeedForward
from .registry import Solver, as_solver


def check_solver(
    value: str | Solver | type, dim: int = 4, heads: int = 2, tokens: int = 3, seed: int = 0
) -> dict[str, Any]:
    """Measure the order of the layer a solver builds, on a small weight-tied block of this library's own fields.

    The block is one :class:`~odeformer.fields.AttentionField` (the solver's form, the plain softmax path) and one
    :class:`~odeformer.fields.FeedForward` (exact LayerNorm tangent), in float64, initialised from ``seed``; the start
    ``x0`` (and ``v0`` for a second-order layer) is standard normal, ``(1, tokens, dim)``. The reference is the fine
    integration of the block's ODE (:meth:`solvers.Split.limit_field`: for Full Wave the continuous Full Wave
    ``x' = v + F_f(x), v' = F_a(x) + J_{F_f}(x) v``), and :func:`solvers.testing.check_layer` asserts the measured
    slope matches the layer's claimed order (Lie 1; Strang 2 with second-order parts; the whole-block schemes their
    stepper's; 0 = no small-step limit, e.g. the official mix's unit steps). Returns what it measured.
    """
    chosen = as_solver(value)
    if not isinstance(chosen, Solver):
        raise ValueError(f"check_solver measures a discrete layer; {chosen.name!r} is a continuous-depth solver.")
    generator = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        attention = AttentionField(dim, heads, form=chosen.form, impl="math").double().eval()
        ffn = FeedForward(dim, 2 * dim, ln_mode="exact").double().eval()
        stepper = chosen.build(dim).double()
    x0 = torch.randn(1, tokens, dim, generator=generator, dtype=torch.float64)
    v0 = torch.randn(1, tokens, dim, generator=generator, dtype=torch.float64) if stepper.second_order else None
    label = chosen.name or chosen.stepper.__name__
    problem = Problem(
        f"{label} layer (dim={dim}, {tokens} tokens, seed={seed})", Block(attention, ffn), x0, v0, 0.5, False
    )
    with torch.no_grad():
        return check_layer(stepper, problem)
