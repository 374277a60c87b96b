"""What the fused autograd Functions share: a backward pass built with a graph, so that it can be differentiated."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor


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
