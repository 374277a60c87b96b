"""The optimiser and its parameter groups: which parameters weight decay pulls toward zero.

Decay applies to weight matrices (``train.decay=matrices``) or to every parameter (``all``, DIFFormer's protocol),
never to a scheme's own parameters (a stepper's momentum, gate, damping or learned coefficient): decay would pull
them toward a particular scheme.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

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
    """AdamW (decoupled decay) or Adam (decay as an L2 term in the gradient, as DIFFormer's code uses it), one group
    per setting: under ``model.parameterization=ode`` each parameter's learning rate, decay and Adam epsilon follow
    its role (:func:`scaled_groups`); each group records its ``lr_scale`` (its learning rate over ``train.lr``)."""
    on, off = decayed(model, train.decay)
    rules = getattr(getattr(model, "backbone", None), "parameterization", None)
    if rules is None or rules.kind == "standard":
        groups = [
            {"params": on, "weight_decay": train.weight_decay, "lr_scale": 1.0},
            {"params": off, "weight_decay": 0.0, "lr_scale": 1.0},
        ]
    else:
        groups = scaled_groups(model, replace(rules, optimizer=train.optimizer), on, train)
    optimizer = torch.optim.AdamW if train.optimizer == "adamw" else torch.optim.Adam
    # the fused kernel (one pass per tensor) where PyTorch has it: on CPU several times faster than the default loop
    fused = all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for p in model.parameters())
    return optimizer(groups, lr=train.lr, fused=fused or None)


def scaled_groups(model: nn.Module, rules: Any, on: list[nn.Parameter], train: TrainConfig) -> list[dict[str, Any]]:
    """The parameter groups under a depth parameterisation (``rules``, :class:`~odeformer.parameterization.
    Parameterization`): each parameter of the backbone gets its role's learning rate, decay and Adam epsilon for the
    steps it acts in (:meth:`~odeformer.backbone.Backbone.roles`), every other (embeddings, heads) the base ones;
    ``on`` are the parameters weight decay applies to. Parameters with equal settings share a group, in the model's
    order."""
    roles = {f"backbone.{name}": found for name, found in model.backbone.roles().items()}
    decays = {id(p) for p in on}
    groups: dict[tuple[float, float, float], dict[str, Any]] = {}
    for name, p in model.named_parameters():
        role, uses = roles.get(name, ("embedding", 1.0))
        decay = train.weight_decay if id(p) in decays else 0.0
        options = rules.options(role, lr=train.lr, weight_decay=decay, eps=ADAM_EPS, uses=uses)
        key = (options["lr"], options["weight_decay"], options["eps"])
        group = groups.setdefault(key, {"params": [], **options, "lr_scale": options["lr"] / train.lr})
        group["params"].append(p)
    return list(groups.values())


ADAM_EPS = 1e-8
"""Adam's epsilon (torch's default), the base a depth parameterisation scales per parameter."""
