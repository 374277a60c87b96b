"""One layer = one step: block dynamics built on ``solvers`` steppers, and the named presets.

A layer holds two fields, the attention field ``F_a`` (see :mod:`odeformer.fields`) and optionally the FFN field
``F_f(x) = MLP(LN(x))``, and a *dynamics* that advances the state by one step ``dt`` with them:

:class:`SplitDynamics` (Lie–Trotter by default): the layer's stepper takes one step on the attention field, then the
FFN acts as a sub-step of the same size. For a first-order state that is Euler, ``x <- x + dt F_f(x)``; for a
second-order state ``(x, v)`` it is the map ``g(x) = x + dt F_f(x)`` with the velocity carried by its Jacobian,
``v <- v + dt J_{F_f}(x) v`` (the chain rule through LayerNorm and the MLP). ``splitting="strang"`` runs half an FFN
sub-step, the attention step, and another half (Macaron Net's ordering).

:class:`WholeDynamics`: the stepper takes one step on the whole block's field ``F_a(x) + F_f(x)``, the ODE whose
Lie–Trotter splitting is the diffusion preset; the multi-stage schemes (heun, rk4) use it, so every stage evaluates
the same layer's weights.

:class:`ReversibleDynamics`: attention and FFN each enter as a force of an invertible kick-drift step, so the
backward pass can rebuild every layer's input from its output (the ``reversible`` preset: activation memory that
does not grow with depth).

``PRESETS`` names the dynamics a config chooses with ``solver=...``; each entry states its equation.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from torch import nn

import solvers
from solvers import AbstractStepper, PhaseState

SPLITTINGS = ("lie", "strang")


class SplitDynamics(nn.Module):
    """Attention by ``stepper``; the FFN as a sub-step of the same size (chain rule on the velocity). See module doc."""

    def __init__(self, stepper: AbstractStepper, splitting: str = "lie", ffn_dt: float | None = None):
        super().__init__()
        if splitting not in SPLITTINGS:
            raise ValueError(f"splitting must be one of {', '.join(SPLITTINGS)}; got {splitting!r}.")
        self.stepper, self.splitting, self.ffn_dt = stepper, splitting, ffn_dt

    def forward(self, attention, ffn, t, y, dt, state):
        if ffn is None:
            return self.stepper.step(attention, t, y, dt, state)
        h = dt if self.ffn_dt is None else self.ffn_dt
        if self.splitting == "lie":
            y, state = self.stepper.step(attention, t, y, dt, state)
            return _ffn_step(ffn, t, y, h), state
        y = _ffn_step(ffn, t, y, 0.5 * h)
        y, state = self.stepper.step(attention, t, y, dt, state)
        return _ffn_step(ffn, t, y, 0.5 * h), state


def _ffn_step(ffn, t, y, h):
    if isinstance(y, PhaseState):
        dx, dv = ffn.joint(y.x, y.v)
        return PhaseState(solvers.axpy(y.x, h, dx), solvers.axpy(y.v, h, dv))
    return solvers.axpy(y, h, ffn(t, y))


class WholeDynamics(nn.Module):
    """``stepper`` on the whole block's field ``F_a(x) + F_f(x)`` (``splitting`` does not apply)."""

    def __init__(self, stepper: AbstractStepper, splitting: str = "lie", ffn_dt: float | None = None):
        super().__init__()
        self.stepper = stepper

    def forward(self, attention, ffn, t, y, dt, state):
        field = attention if ffn is None else (lambda t, x: attention(t, x) + ffn(t, x))
        return self.stepper.step(field, t, y, dt, state)


class ReversibleDynamics(nn.Module):
    """Every sublayer a force of an invertible kick-drift step: ``v += dt F_a(x); x += dt v`` then
    ``v += dt F_f(x); x += dt v`` (``F_f`` the FFN in residual form, as an acceleration).

    Each step is a pair of shears, so :meth:`inverse` rebuilds the layer's input from its output; a backbone made of
    these layers stores only its final state and recomputes the rest in the backward pass (see
    :class:`~odeformer.model.Backbone`). The stepper must offer ``inverse`` (``semi_implicit_euler`` does).
    """

    def __init__(self, stepper: AbstractStepper, splitting: str = "lie", ffn_dt: float | None = None):
        super().__init__()
        if not callable(getattr(stepper, "inverse", None)):
            raise ValueError(f"reversible dynamics need a stepper with an inverse; {type(stepper).__name__} has none.")
        self.stepper = stepper

    def forward(self, attention, ffn, t, y, dt, state):
        y, state = self.stepper.step(attention, t, y, dt, state)
        if ffn is not None:
            y, state = self.stepper.step(ffn, t, y, dt, state)
        return y, state

    def inverse(self, attention, ffn, t, y1, dt):
        """The layer input ``y`` with ``forward(..., y, ...) == y1`` (up to rounding)."""
        if ffn is not None:
            y1 = self.stepper.inverse(ffn, t, y1, dt)
        return self.stepper.inverse(attention, t, y1, dt)


@dataclass(frozen=True)
class Preset:
    """A named block dynamics: the stepper each layer gets, how the FFN enters, the attention form, the default step.

    ``options`` are passed to the stepper's constructor (with ``dim`` when the stepper takes one, so scheme parameters
    are learnable per channel and per layer): ``PRESETS["mix"].with_options(theta0=-4.0)``.
    """

    equation: str
    stepper: type[AbstractStepper]
    form: str
    dt: float
    dynamics: type[nn.Module] = SplitDynamics
    options: dict[str, Any] = field(default_factory=dict)
    splitting: str = "lie"
    ffn_dt: float | None = None  # the FFN sub-step; None: the layer's dt

    def with_options(self, **options: Any) -> Preset:
        return replace(self, options={**self.options, **options})

    def build(self, dim: int) -> nn.Module:
        """The dynamics module for one layer of width ``dim``."""
        kwargs = dict(self.options)
        if "dim" in _parameters(self.stepper):
            kwargs.setdefault("dim", dim)
        try:
            stepper = self.stepper(**kwargs)
        except TypeError as error:
            raise ValueError(f"bad options {self.options} for {self.stepper.__name__}: {error}") from None
        return self.dynamics(stepper, self.splitting, self.ffn_dt)


def _parameters(cls) -> set[str]:
    return set(inspect.signature(cls).parameters)


PRESETS: dict[str, Preset] = {
    "diffusion": Preset(
        "x <- x + dt Attn(LN x); x <- x + dt MLP(LN x)   (Euler; residual form, dt = 1: the pre-LN transformer)",
        solvers.Euler,
        "residual",
        1.0,
    ),
    "full_wave": Preset(
        "v <- v + τ (Attn(LN x) - x); x <- x + τ v; (x, v) <- (x + τ MLP(LN x), v + τ J_MLP∘LN(x) v)   "
        "(semi-implicit Euler on X'' = (A - I) X, v0 = 0, τ = 0.5)",
        solvers.SemiImplicitEuler,
        "laplacian",
        0.5,
    ),
    "light_wave": Preset(
        "x_{n+1} = x_n + dt Attn(LN x_n) + λ ⊙ (x_n - x_{n-1}), λ = sigmoid(θ) per channel (θ0 = -2); then the FFN "
        "sub-step   (heavy-ball momentum)",
        solvers.LightWave,
        "residual",
        1.0,
        options={"theta0": -2.0},
    ),
    "mix": Preset(
        "v <- v + τ (Attn(LN x) - x); x <- x_d + λ ⊙ (x_w - x_d) with x_w = x + τ v and x_d = x + Attn(LN x); then "
        "(x, v) <- (x + MLP(LN x), v + J v)   (the official code's gated mix: λ = sigmoid(θ) per channel, θ0 = -8, "
        "the diffusion half and the FFN at unit step)",
        solvers.Mix,
        "laplacian",
        0.5,
        options={"theta0": -8.0, "diffusion_dt": 1.0, "diffusion_shift": 1.0},
        ffn_dt=1.0,
    ),
    "damped": Preset(
        "v <- exp(-γ τ) v + τ (Attn(LN x) - x); x <- x + τ v; FFN by the chain rule   (γ = softplus(ρ) per channel, "
        "γ0 = 1)",
        solvers.Damped,
        "laplacian",
        0.5,
        options={"gamma": 1.0},
    ),
    "velocity_verlet": Preset(
        "kick-drift-kick on X'' = (A - I) X with step τ; FFN by the chain rule",
        solvers.VelocityVerlet,
        "laplacian",
        0.5,
    ),
    "leapfrog": Preset(
        "x_{n+1} = 2 x_n - x_{n-1} + τ² (Attn(LN x_n) - x_n) (Störmer, Taylor start); FFN by the chain rule",
        solvers.Leapfrog,
        "laplacian",
        0.5,
    ),
    "heun": Preset(
        "Heun on x' = Attn(LN x) + MLP(LN x) (the whole block as the field)",
        solvers.Heun,
        "residual",
        1.0,
        dynamics=WholeDynamics,
    ),
    "rk4": Preset(
        "classic RK4 on x' = Attn(LN x) + MLP(LN x) (the whole block as the field)",
        solvers.RK4,
        "residual",
        1.0,
        dynamics=WholeDynamics,
    ),
    "reversible": Preset(
        "v <- v + τ (Attn(LN x) - x); x <- x + τ v; v <- v + τ MLP(LN x); x <- x + τ v   (every sublayer a force of "
        "an invertible kick-drift; the backward pass rebuilds states instead of storing them)",
        solvers.SemiImplicitEuler,
        "laplacian",
        0.5,
        dynamics=ReversibleDynamics,
    ),
}


def preset(
    name: str,
    dt: float | None = None,
    form: str | None = None,
    splitting: str = "lie",
    options: dict[str, Any] | None = None,
) -> Preset:
    """``PRESETS[name]`` with its step, attention form, splitting or stepper options changed (what a solver config
    builds). An unknown name, a non-positive ``dt``, or an unknown form or splitting is a one-line error."""
    chosen = resolve(name)
    if dt is not None and not (isinstance(dt, (int, float)) and math.isfinite(dt) and dt > 0):
        raise ValueError(f"dt must be positive and finite, got {dt!r}.")
    if form is not None and form not in ("residual", "laplacian"):
        raise ValueError(f"form must be one of residual, laplacian; got {form!r}.")
    if splitting not in SPLITTINGS:
        raise ValueError(f"splitting must be one of {', '.join(SPLITTINGS)}; got {splitting!r}.")
    return replace(
        chosen,
        dt=chosen.dt if dt is None else float(dt),
        form=chosen.form if form is None else form,
        splitting=splitting,
        options={**chosen.options, **(options or {})},
    )


def resolve(solver: str | Preset) -> Preset:
    """A ``Preset`` from a name or a ``Preset``; an unknown name lists the known ones."""
    if isinstance(solver, Preset):
        return solver
    if isinstance(solver, str) and solver in PRESETS:
        return PRESETS[solver]
    raise ValueError(f"unknown solver {solver!r}; choose one of {', '.join(PRESETS)}.")


class Layer(nn.Module):
    """One layer: its fields (attention, optional FFN), its dynamics, and its step ``dt``."""

    def __init__(self, attention: nn.Module, ffn: nn.Module | None, dynamics: nn.Module, dt: float):
        super().__init__()
        if not (isinstance(dt, (int, float)) and math.isfinite(dt) and dt > 0):
            raise ValueError(f"dt must be positive and finite, got {dt!r}.")
        self.attention, self.ffn, self.dynamics, self.dt = attention, ffn, dynamics, float(dt)

    @property
    def stepper(self) -> AbstractStepper:
        return self.dynamics.stepper

    def forward(self, t, y, state, **context: Any):
        """One step; ``context`` (e.g. ``attn_mask``) is passed to the attention field."""
        return self.dynamics(self._bound(context), self.ffn, t, y, self.dt, state)

    def inverse(self, t, y1, **context: Any):
        """The input of :meth:`forward` from its output (reversible dynamics only)."""
        return self.dynamics.inverse(self._bound(context), self.ffn, t, y1, self.dt)

    def _bound(self, context: dict[str, Any]):
        return (lambda t, x: self.attention(t, x, **context)) if context else self.attention


LayerBuilder = Callable[[int], Layer]
