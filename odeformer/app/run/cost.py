"""What a run costs and holds, in the units a comparison at equal compute reads: field evaluations and parameters.

A forward pass evaluates each layer's fields a number of times its scheme claims: the attention field
``evals_per_step`` times per step (its block stepper's claim on the layer's block), the FFN once per Lie sub-step
(per scheme stage: ``Euler`` 1, a Strang layer's two Heun halves 4) or, in a whole-block scheme, at every stage. Each
evaluation reads every token once, so the sum is the evaluations per token. A continuous-depth solver chooses its
steps; its evaluations are measured (the last forward's ``nfe``), each one of the block's attention and FFN.
"""

from __future__ import annotations

from typing import Any

from torch import nn

import solvers


def evaluations(model: nn.Module) -> dict[str, Any]:
    """``{"attention": [per layer], "ffn": [per layer], "per_token": total, "source": "claims" | "measured"}`` for
    one forward of ``model`` (a continuous-depth model: its last forward's, ``None`` before any)."""
    backbone = model.backbone
    layers = getattr(backbone, "layers", None)
    if not layers:
        stats = backbone.solver_stats() if callable(getattr(backbone, "solver_stats", None)) else {}
        nfe = stats.get("nfe")
        return {"attention": None, "ffn": None, "per_token": None if nfe is None else 2 * nfe, "source": "measured"}
    attention, ffn = [], []
    previous = None
    for layer in layers:
        claims = layer.claims()
        count = claims.evals_per_step
        reused = (
            claims.fsal
            and previous is not None
            and layer.continues(previous)
            and layer.attention is previous.attention  # tied weights: the same field, whose last force is this step's
        )
        attention.append(count - 1 if reused else count)
        ffn.append(_ffn_evaluations(layer, claims))
        previous = layer
    return {"attention": attention, "ffn": ffn, "per_token": sum(attention) + sum(ffn), "source": "claims"}


def _ffn_evaluations(layer: Any, claims: solvers.Claims) -> int:
    if layer.ffn is None:
        return 0
    block = layer.block_stepper
    if isinstance(block, solvers.Whole):
        return claims.evals_per_step  # every stage evaluates the whole block
    per_substep = block.ffn.claims().evals_per_step
    return per_substep * (2 if block.splitting == "strang" else 1)


def scheme_parameters(model: nn.Module) -> list[dict[str, list[float]]] | None:
    """Each layer's scheme parameters and buffers (a momentum's, a gate's, a damping's θ or ρ, ...) by name, as
    lists; ``None`` when no layer's scheme has any."""
    layers = getattr(model.backbone, "layers", None) or []
    out = []
    for layer in layers:
        own = {
            name: tensor.detach().reshape(-1).tolist()
            for name, tensor in (*layer.block_stepper.named_parameters(), *layer.block_stepper.named_buffers())
        }
        out.append(own)
    return out if any(out) else None
