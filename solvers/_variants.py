"""The variant rows of :data:`solvers.STEPPERS`: names of layers that are more than their scheme's claims give, and the
names two layers are known by.

Every other name's layer follows from its scheme's claims (odeformer's :meth:`~odeformer.registry.Solver.for_stepper`):
a second-order scheme steps the laplacian force with the FFN by the chain rule (step 0.5), a multi-stage first-order
one the whole block (step 1), any other first-order one the residual attention field with the FFN as an Euler
sub-step (step 1). A row here keeps that layout and adds options, the FFN sub-step's scheme or fixed step, or a
backward pass that rebuilds states.
"""

from __future__ import annotations

from ._coefficients import Tableau
from ._euler import Euler
from ._mix import Mix
from ._registry import STEPPERS, Variant
from ._semi_implicit_euler import SemiImplicitEuler
from ._velocity_mix import VelocityMix

STEPPERS["tableau"] = Tableau  # coefficients with no name (solver.options A, b, c, bbar, drifts, kicks)
STEPPERS["diffusion"] = Variant(
    Euler, "`x ← x + dt F_a(x)`, then `x ← x + dt F_f(x)`; with dt = 1 exactly the pre-LN transformer (`euler`'s layer)"
)
STEPPERS["full_wave"] = Variant(
    SemiImplicitEuler,
    "`v ← v + τ F_a(x)`, `x ← x + τ v`, then `(x, v) ← (x + τ F_f(x), v + τ J_{F_f}(x) v)`, `v₀ = 0`: semi-implicit "
    "Euler on the continuous Full Wave (order 1; `semi_implicit_euler`'s layer)",
)
STEPPERS["full_wave_official"] = Variant(
    SemiImplicitEuler,
    "the official code's Full Wave: as `full_wave`, but the FFN at unit step, `(x, v) ← (x + F_f(x), v + "
    "J_{F_f}(x) v)`, as in a transformer (no small-step limit)",
    ffn_dt=1.0,
)
STEPPERS["mix"] = Variant(
    Mix,
    "the official ViT code's gated mix (`WavyBlockParallel`, its FeatScale left out: equal at FeatScale's start): "
    "`x ← x_d + λ ⊙ (x_w − x_d)` with `x_w` the wave step and `x_d = x + Attn(LN x)`, λ per channel from "
    "sigmoid(−8), then the FFN at unit step (order 0; `position_mix` is its scheme with both halves at step τ, "
    "order 1)",
    options={"theta0": -8.0, "diffusion_dt": 1.0, "diffusion_shift": 1.0},
    ffn_dt=1.0,
)
STEPPERS["mix_bert"] = Variant(
    VelocityMix,
    "the official BERT code's mix: `v ← λ (v + τ F_a(x)) + (1 − λ) F_a(x)`, `x ← x + τ v`, one learnable scalar λ "
    'per layer from sigmoid(0), then the FFN at unit step by the chain rule; with `norm="post"` it is BERT\'s mix '
    "layer (checked against the official code)",
    options={"theta0": 0.0, "gate": "scalar"},
    ffn_dt=1.0,
)
STEPPERS["reversible"] = Variant(
    SemiImplicitEuler,
    "`v ← v + τ F_a(x)`, `x ← x + τ v`, `v ← v + τ F_f(x)`, `x ← x + τ v` (each sublayer a force of an invertible "
    "kick-drift); training stores only the final state and rebuilds the rest backwards",
    ffn="semi_implicit_euler",
    memory="rebuild",
)
