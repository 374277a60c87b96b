"""The optimiser and its parameter groups: which parameters weight decay pulls toward zero.

Decay applies to weight matrices (``train.decay=matrices``) or to every parameter (``all``, DIFFormer's protocol),
never to a scheme's own parameters (a stepper's momentum, gate, damping or learned coefficient): decay would pull
them toward a particular scheme.
"""

from __future__ import annotations

import torch
from torch import nn

from .config import TrainConfig


def decayed(model: nn.Module, scope: str) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    """``(decayed, not decayed)`` parameters. ``scope="matrices"``: weights of two or more dimensions outside the
    embeddings; ``"all"``: every parameter (DIFFormer's protocol). Scheme parameters (a stepper's momentum, gate or
    damping: the parameters of every ``solvers.AbstractStepper`` in the model) are never decayed: decay would pull
    them toward 0, i.e. toward a particular scheme (λ = ½ for a sigmoid gate)."""
    from solvers import AbstractStepper

    steppers = (m for m in model.modules() if isinstance(m, AbstractStepper))
    scheme = {id(p) for m in steppers for p in m.parameters()}
    on, off = [], []
    for name, p in model.named_parameters():
        matrix = p.dim() >= 2 and "embed" not in name
        (on if id(p) not in scheme and (scope == "all" or matrix) else off).append(p)
    return on, off


def make_optimizer(model: nn.Module, train: TrainConfig) -> torch.optim.Optimizer:
    """AdamW (decoupled decay) or Adam (decay as an L2 term in the gradient, as DIFFormer's code uses it)."""
    on, off = decayed(model, train.decay)
    groups = [{"params": on, "weight_decay": train.weight_decay}, {"params": off, "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW if train.optimizer == "adamw" else torch.optim.Adam
    # the fused kernel (one pass per tensor) where PyTorch has it: on CPU several times faster than the default loop
    fused = all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for p in model.parameters())
    return optimizer(groups, lr=train.lr, fused=fused or None)
