"""How a model's step, initialisation and optimiser settings scale with its depth: the one place the rules live.

Two parameterisations. ``standard`` is today's models: every multiplier is 1 and a layer's step is the one it is
given, so nothing changes. ``ode`` makes the ``depth`` layers ``L`` steps of one flow over depth-time ``[0, T]``:
each step is ``dt = T / L``, and the optimiser settings of each parameter follow from the *role* it plays, so that
one set of base hyperparameters trains a shallow and a deep model alike (the rules, their sources and their
derivation for first- and second-order schemes: ``docs/depth_as_time.md``).

The roles (:data:`ROLES`). Inside a step (their gradient carries the factor ``dt``):

- ``hidden``: a weight matrix of a field (attention's ``qkv`` and ``proj``, the FFN's ``fc1`` and ``fc2``);
- ``hidden_bias``: a bias of a field;
- ``field_norm``: the gain or bias of a LayerNorm inside a field (pre-LN, the FFN's joint LayerNorm);
- ``scheme``: a scheme's own parameter that its small-step limit depends on (Light Wave's momentum, a gate, a
  damping rate);
- ``discretisation``: a scheme's own parameter that its limit does not depend on (a learnable Runge–Kutta or
  splitting coefficient): it moves only the ``O(dt^{p+1})`` local error, so ``ode`` does not train it.

Outside the steps (their gradient does not depend on ``dt``): ``embedding`` (token, position and patch
embeddings, a [CLS] token, an encoder), ``outer_norm`` (a LayerNorm before or after the steps) and ``readout`` (a
head or classifier). :func:`scheme_roles` tells ``scheme`` from ``discretisation`` for any stepper, a scheme of one's
own included, by asking whether its limit field depends on the parameter.

Under ``ode`` with AdamW (decoupled decay) a parameter inside the steps keeps the base learning rate and decay and
gets Adam's epsilon times its *span* ``dt * uses`` (``uses``: how many steps the parameter acts in; 1 for one
layer's weight, ``L`` for a weight tied across depth, the summed interpolation weights for a knot); with Adam
(decay as an L2 term in the gradient) its decay is multiplied by the span too. A ``discretisation`` parameter's
learning rate is 0. Roles outside the steps, and every initialisation, keep their multipliers at 1: the step ``dt``
carries the depth factor (CompleteP's residual multiplier ``L^{-1}``), so no initialisation may add one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from solvers import PhaseState

PARAMETERIZATIONS = ("standard", "ode")
OPTIMIZERS = ("adamw", "adam")
STEP_ROLES = ("hidden", "hidden_bias", "field_norm", "scheme", "discretisation")
"""The roles of parameters that act inside the steps: their gradient is proportional to the step."""
OUTER_ROLES = ("embedding", "outer_norm", "readout")
"""The roles of parameters before or after the steps."""
ROLES = STEP_ROLES + OUTER_ROLES


def _choice(label: str, value: Any, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ValueError(f"{label} must be one of {', '.join(allowed)}; got {value!r}.")
    return value


@dataclass(frozen=True)
class Scale:
    """What one parameter gets, as multipliers of the base values: of its initial standard deviation
    (``init_std``), of the learning rate (``lr``), of the weight decay its group has (``weight_decay``; which
    parameters are decayed at all stays the optimiser's choice) and of Adam's epsilon (``eps``)."""

    init_std: float = 1.0
    lr: float = 1.0
    weight_decay: float = 1.0
    eps: float = 1.0


@dataclass(frozen=True)
class Parameterization:
    """The scale rules of one model: ``kind`` (``standard`` or ``ode``), its ``depth`` ``L``, its depth-time ``T``
    (``time``; ``ode`` only) and its ``optimizer`` (``adamw``: decoupled decay; ``adam``: decay as an L2 term).

    ``Parameterization("ode", depth=8, time=4.0).dt`` is ``0.5``; :meth:`step` is the step every layer takes,
    :meth:`scale` what a parameter of a role gets, :meth:`options` its settings in an optimiser's parameter group.
    Every value is checked here, once: a bad one is a one-line ``ValueError``.
    """

    kind: str = "standard"
    depth: int = 1
    time: float | None = None
    optimizer: str = "adamw"

    def __post_init__(self) -> None:
        _choice("parameterization", self.kind, PARAMETERIZATIONS)
        _choice("optimizer", self.optimizer, OPTIMIZERS)
        if isinstance(self.depth, bool) or not isinstance(self.depth, int) or self.depth < 1:
            raise ValueError(f"depth must be a positive int, got {self.depth!r}.")
        if self.kind == "standard":
            if self.time is not None:
                raise ValueError(
                    f"time={self.time!r} applies to parameterization=ode only (the depth-time its layers cover); "
                    "leave it unset under standard, where each layer takes its own dt."
                )
            return
        time = self.time
        if isinstance(time, bool) or not isinstance(time, (int, float)) or not (math.isfinite(time) and time > 0):
            raise ValueError(
                f"parameterization=ode needs time=T, a positive finite number (the depth-time [0, T] its {self.depth}"
                f" layers cover, each a step dt = T / depth); got {time!r}."
            )
        object.__setattr__(self, "time", float(time))

    @property
    def dt(self) -> float | None:
        """``T / L`` under ``ode``; ``None`` under ``standard`` (each layer takes the step it is given)."""
        return None if self.kind == "standard" else self.time / self.depth

    def step(self, dt: float) -> float:
        """The step a layer takes whose standard step is ``dt``: ``dt`` itself under ``standard``, ``T / L``
        under ``ode``."""
        return dt if self.kind == "standard" else self.dt

    def scale(self, role: str, uses: float = 1.0) -> Scale:
        """The multipliers of a parameter of ``role`` (:data:`ROLES`) that acts in ``uses`` steps (see the module
        docstring; only a role inside the steps acts in steps)."""
        _choice("role", role, ROLES)
        if isinstance(uses, bool) or not isinstance(uses, (int, float)) or not (math.isfinite(uses) and uses > 0):
            raise ValueError(f"uses (the steps a parameter acts in) must be a positive finite number, got {uses!r}.")
        if role in OUTER_ROLES and uses != 1:
            raise ValueError(f"a {role} parameter acts before or after the steps, in none of them: give no uses.")
        if self.kind == "standard" or role in OUTER_ROLES:
            return Scale()
        span = self.dt * uses  # the depth-time the parameter acts over: its gradient's factor
        return Scale(
            lr=0.0 if role == "discretisation" else 1.0,
            weight_decay=span if self.optimizer == "adam" else 1.0,
            eps=span,
        )

    def options(self, role: str, lr: float, weight_decay: float, eps: float = 1e-8, uses: float = 1.0) -> dict:
        """``{"lr", "weight_decay", "eps"}`` for an optimiser's parameter group of ``role``, from the base values
        (``weight_decay``: the decay the group has today, 0 for a group that is not decayed)."""
        scale = self.scale(role, uses)
        return {"lr": lr * scale.lr, "weight_decay": weight_decay * scale.weight_decay, "eps": eps * scale.eps}


def require_limit(parameterization: Parameterization, order: int, name: str) -> None:
    """Refuse, in one line, a layer that has no small-step limit (it claims ``order`` 0: a sub-step of fixed size,
    a map after a sublayer, a part not scaled by ``dt``) under ``ode``: such a stack discretises no ODE, so no
    choice of ``dt`` makes it one. Under ``standard`` every layer is accepted."""
    if parameterization.kind == "ode" and order < 1:
        raise ValueError(
            f"parameterization=ode needs layers that are steps of an ODE, but {name} has no small-step limit (order "
            "0: a sub-step of fixed size, a map after a sublayer, or a part not scaled by dt); use its scaled form "
            "(full_wave for full_wave_official, position_mix for mix) or parameterization=standard."
        )


def heavy_ball_momentum(rate: Tensor | float, dt: float) -> Tensor:
    """The momentum ``λ = exp(-rate dt)`` of a heavy ball ``x_{n+1} = x_n + λ (x_n - x_{n-1}) + dt² a(x_n)`` whose
    depth limit is the damped wave ``x'' = a - rate x'`` (``rate >= 0``, learnable as itself: a depth-independent
    parameter). ``1 - rate dt`` has the same limit but leaves ``(0, 1]`` once ``dt > 1 / rate``."""
    rate = rate if isinstance(rate, Tensor) else torch.tensor(float(rate), dtype=torch.float64)
    if bool((rate < 0).any()) or not bool(torch.isfinite(rate).all()):
        raise ValueError("a heavy ball's damping rate must be finite and >= 0 (its momentum exp(-rate dt) in (0, 1]).")
    return torch.exp(-rate * dt)


def scheme_roles(stepper: nn.Module) -> dict[str, str]:
    """``{name: role}`` for each learnable parameter of ``stepper`` (a :class:`solvers.AbstractStepper`, a scheme of
    one's own included): ``"scheme"`` where its :meth:`~solvers.AbstractStepper.limit_field` depends on the
    parameter, ``"discretisation"`` where it does not (the parameter moves only the local error). A stepper with no
    small-step limit cannot be parameterised: a one-line ``ValueError``.

    The dependence is read by autograd on a probe: a random state (and velocity) and a random nonlinear field."""
    learnable = {name: p for name, p in stepper.named_parameters() if p.requires_grad}
    if not learnable:
        return {}
    dtype = next(iter(learnable.values())).dtype
    width = max((p.shape[-1] for p in learnable.values() if p.dim() >= 1), default=3)
    generator = torch.Generator().manual_seed(0)

    def draw(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=generator, dtype=dtype)

    inner, outer, shift = draw(width, width) / math.sqrt(width), draw(width, width) / math.sqrt(width), draw(width)

    def field(t: Any, x: Tensor) -> Tensor:
        return torch.tanh(x @ inner) @ outer + shift - 0.5 * x

    x = draw(2, 3, width)
    y = PhaseState(x, draw(2, 3, width)) if getattr(stepper, "second_order", False) else x
    with torch.enable_grad():
        try:
            limit = stepper.limit_field(field)
            out = limit(0.0, y)
        except ValueError as error:
            raise ValueError(f"{type(stepper).__name__} cannot be parameterised for ode: {error}") from None
        flat = torch.cat([part.reshape(-1) for part in (out if isinstance(out, tuple) else (out,))])
        if not flat.requires_grad:  # no parameter reached the limit field at all
            return dict.fromkeys(learnable, "discretisation")
        grads = torch.autograd.grad((flat * draw(flat.numel())).sum(), list(learnable.values()), allow_unused=True)
    return {
        name: "scheme" if grad is not None and bool(grad.abs().max() > 0) else "discretisation"
        for name, grad in zip(learnable, grads)
    }
