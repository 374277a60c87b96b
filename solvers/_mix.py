"""Gated mix of a wave and a diffusion step (the Wavy Transformer's "mix"): ``x <- lam ⊙ x_wave + (1 - lam) ⊙ x_diff``.

From ``(x, v)`` the wave stepper (default ``semi_implicit_euler``) gives ``(x_wave, v_wave)`` and the diffusion stepper
(default ``euler``) gives ``x_diff``, both on the same field; the result is ``(x_diff + lam ⊙ (x_wave - x_diff),
v_wave)``. ``lam = sigmoid(theta)``: a fixed scalar by default, learnable per channel when given ``dim``; the start
``theta0 = -8`` is the official ViT code's. ``theta0 = -inf`` gives ``lam = 0``: the position is then exactly the
diffusion stepper's (the velocity is carried but never read).

With ``lam`` fixed in (0, 1) it converges with order 1 to ``x' = lam v + (1 - lam) a, v' = a``, whatever the order of
its parts: the wave part moves ``x`` along its own velocity, not the mixed one, which costs an O(dt²) local error.
Options for transplanting the official code's mix, whose diffusion half is the pre-LN update ``x + Attn(LN x)``
rather than a small step of the wave's force ``a(x) = Attn(LN x) - x``: ``diffusion_shift`` gives the diffusion part
the field ``a(x) + shift x`` (``shift = 1``: the residual field ``Attn(LN x)``) and ``diffusion_dt`` a fixed step
of its own (``1``: the unit residual step). With ``diffusion_dt`` set the diffusion step no longer shrinks with
``dt``, so the scheme has no small-step limit: such an instance declares order 0 (the default,
``diffusion_dt=None``, order 1): an instance claims what its parts make (:meth:`~solvers.AbstractStepper.claim`).
Both parts must be one-step schemes (not ``multistep``).
Both evaluate the field at ``(t, x)``; that evaluation is made once and shared, so the default pair costs one
evaluation per step and a custom pair one fewer than its two parts together (every registered stepper begins by
evaluating at ``(t, x)``). Neither symplectic nor reversible. Reference: the Wavy Transformer paper's mixed residual
and its official code (github.com/noguchisatoshi/Wavy-Transformer, ``WavyBlockParallel``).

Not to be confused with :class:`~solvers.VelocityMix` (the official BERT code's mix, which blends the *velocity*
with the force) nor with the ``mix`` solver, which is this scheme laid out as the official ViT layer (its diffusion
half and FFN at unit step: order 0); this scheme is the ``position_mix`` solver.
"""

import math
from dataclasses import replace
from typing import ClassVar

import torch
from torch import Tensor

from ._base import AbstractStepper, Claims, PhaseState, register, sigmoid_gate, stated
from ._euler import Euler
from ._registry import register_stepper
from ._semi_implicit_euler import SemiImplicitEuler


class _SharedEvaluation:
    """Calls ``field`` once per distinct ``(t, x)`` object pair within one step."""

    __slots__ = ("field", "seen")

    def __init__(self, field):
        self.field, self.seen = field, []

    def __call__(self, t, x):
        for t_seen, x_seen, value in self.seen:
            if t_seen is t and x_seen is x:
                return value
        value = self.field(t, x)
        self.seen.append((t, x, value))
        return value


@register_stepper(
    "position_mix",
    update=(
        "`λ x_wave + (1 − λ) x_diffusion`, `λ = sigmoid(θ)` (the `mix` solver is the official layer: unit steps, "
        "order 0)"
    ),
)
class Mix(AbstractStepper):
    second_order: ClassVar[bool] = True  # fixed; the other claims follow from the parts (claims)

    def __init__(
        self,
        wave: AbstractStepper | None = None,
        diffusion: AbstractStepper | None = None,
        dim: int | None = None,
        theta0: float = -8.0,
        diffusion_dt: float | None = None,
        diffusion_shift: float = 0.0,
    ):
        super().__init__()
        if diffusion_dt is not None and not (math.isfinite(diffusion_dt) and diffusion_dt > 0):
            raise ValueError(f"Mix: diffusion_dt must be positive and finite or None, got {diffusion_dt}.")
        self.diffusion_dt, self.diffusion_shift = diffusion_dt, float(diffusion_shift)
        wave = SemiImplicitEuler() if wave is None else wave
        diffusion = Euler() if diffusion is None else diffusion
        if not wave.second_order:
            raise ValueError(f"Mix: wave must be a second-order stepper, got {type(wave).__name__}.")
        if diffusion.second_order:
            raise ValueError(f"Mix: diffusion must be a first-order stepper, got {type(diffusion).__name__}.")
        for part in (wave, diffusion):
            if part.multistep:
                raise ValueError(
                    f"Mix: {type(part).__name__} is a multistep scheme (it keeps its own history, which the mix "
                    "would overwrite); use one-step parts such as semi_implicit_euler, velocity_verlet, damped, "
                    "euler, heun, rk4."
                )
        self.wave, self.diffusion = wave, diffusion
        register(self, "theta", sigmoid_gate(dim, theta0))

    def claims(self, field=None) -> Claims:
        """Order 1 (0 with a fixed ``diffusion_dt``, or a part without a limit); the parts' evaluations less the
        shared one; neither symplectic nor reversible."""
        wave, diffusion = self.wave.claims(), self.diffusion.claims()
        limit = self.diffusion_dt is None and min(wave.order, diffusion.order) > 0
        made = Claims(
            order=1 if limit else 0,
            second_order=True,
            symplectic=False,
            reversible=False,
            evals_per_step=wave.evals_per_step + diffusion.evals_per_step - 1,
        )
        return replace(made, **stated(self, Mix))

    def lam(self) -> Tensor:
        """The gate ``sigmoid(theta)`` (a scalar, or one value per channel)."""
        return torch.sigmoid(self.theta)

    def init(self, field, t0, y0):
        x, _ = self._unpack(y0)
        return self.wave.init(field, t0, y0), self.diffusion.init(field, t0, x)

    def step(self, field, t, y, dt, state):
        x, _ = self._unpack(y)
        wave_state, diffusion_state = (None, None) if state is None else state
        shared = _SharedEvaluation(field)
        (x_wave, v_wave), wave_state = self.wave.step(shared, t, y, dt, wave_state)
        step = dt if self.diffusion_dt is None else self.diffusion_dt
        x_diff, diffusion_state = self.diffusion.step(self._diffusion_field(shared), t, x, step, diffusion_state)
        x1 = x_diff + self.lam().to(x.dtype) * (x_wave - x_diff)
        return PhaseState(x1, v_wave), (wave_state, diffusion_state)

    def _diffusion_field(self, field):
        shift = self.diffusion_shift
        return field if shift == 0 else (lambda t, x: field(t, x) + shift * x)

    def limit_field(self, field):
        if self.diffusion_dt is not None:
            raise ValueError("Mix with a fixed diffusion_dt has no small-step limit.")
        lam, wave = self.lam(), self.wave.limit_field(field)
        diffusion = self.diffusion.limit_field(self._diffusion_field(field))

        def mixed(t, y):
            w, d = wave(t, y), diffusion(t, y.x)
            return PhaseState(d + lam.to(y.x.dtype) * (w.x - d), w.v)

        return mixed
