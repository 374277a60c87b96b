"""One layer = one step: a block stepper over the layer's fields, and the named presets.

A layer holds two fields, the attention field ``F_a`` (see :mod:`odeformer.fields`) and optionally the FFN field
``F_f(x) = MLP(LN(x))``, and a *block stepper* from :mod:`solvers` that advances the state by one step ``dt`` with
them (its field is a :class:`solvers.Block`):

- :class:`solvers.Split` (Lie–Trotter by default): the layer's stepper takes one step on the attention field, then
  the FFN acts as a sub-step of the same size. For a first-order state that is Euler, ``x <- x + dt F_f(x)``; for a
  second-order state ``(x, v)`` it is the map ``g(x) = x + dt F_f(x)`` with the velocity carried by its Jacobian,
  ``v <- v + dt J_{F_f}(x) v`` (the chain rule through LayerNorm and the MLP). ``splitting="strang"`` runs half an
  FFN sub-step (by Heun's second-order scheme), the attention step, and another half. The FFN may instead enter as a
  force of a second-order scheme (the ``reversible`` preset).
- :class:`solvers.Whole`: the stepper takes one step on the whole block's field ``F_a(x) + F_f(x)``, the ODE whose
  Lie–Trotter splitting is the diffusion preset; the multi-stage schemes (heun, rk4) use it, so every stage evaluates
  the same layer's weights.

In the post-norm layout (``norm="post"``) a map follows each sublayer — LayerNorm on the state and, by its Jacobian,
on the velocity (the paper's BERT), optionally with dropout — and the fields have no LayerNorm of their own.

A *preset* names a block stepper, the attention form and the default step; :data:`LAYER_SPECS` holds the named ones,
and every scheme in :data:`solvers.STEPPERS` (or any :class:`~solvers.AbstractStepper` subclass, by its dotted import
path) is a solver too: its layer follows from its declarations (:func:`spec_for_stepper`).
"""

from __future__ import annotations

import importlib
import inspect
import math
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

import solvers
from solvers import AbstractStepper, Block, Split, Whole

SPLITTINGS = ("lie", "strang")
FORMS = ("residual", "laplacian")
MEMORY = ("store", "rebuild")


@dataclass(frozen=True)
class LayerSpec:
    """A named layer: the stepper each layer gets, how the FFN enters, the attention form, the default step.

    ``options`` are passed to the stepper's constructor (with ``dim`` when the stepper takes one, so scheme parameters
    are learnable per channel and per layer): ``LAYER_SPECS["mix"].with_options(theta0=-4.0)``. ``block_stepper`` is
    :class:`solvers.Split` or :class:`solvers.Whole`; ``ffn`` names the FFN sub-step's scheme in
    :data:`solvers.STEPPERS` (``None``: ``euler`` under Lie, ``heun`` under Strang; a second-order scheme makes the FFN
    a force of it); ``ffn_dt`` fixes the FFN sub-step (``None``: the layer's ``dt``). ``memory="rebuild"``: the
    backward pass rebuilds states by inverting every layer instead of storing them (layers must be reversible).
    Every value is checked here, once, when the layer is specified (a step ``dt`` that is not positive and finite,
    an unknown form, splitting or memory is a one-line error); the layer built from it takes them as they are.
    """

    equation: str
    stepper: type[AbstractStepper]
    form: str
    dt: float
    block_stepper: type[AbstractStepper] = Split
    options: dict[str, Any] = field(default_factory=dict)
    splitting: str = "lie"
    ffn: str | None = None
    ffn_dt: float | None = None
    memory: str = "store"
    name: str = ""
    doc: str = field(default="", compare=False)  # the layer's update in Markdown: its row of the solver table

    def __post_init__(self) -> None:
        # the one place a layer's step is checked: a Layer takes its dt from here, and no forward checks it again
        for label in ("dt", "ffn_dt"):
            value = getattr(self, label)
            if label == "ffn_dt" and value is None:
                continue
            if isinstance(value, bool) or not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"{label} must be positive and finite, got {value!r}.")
            object.__setattr__(self, label, float(value))
        for label, allowed in (("form", FORMS), ("splitting", SPLITTINGS), ("memory", MEMORY)):
            if getattr(self, label) not in allowed:
                raise ValueError(f"{label} must be one of {', '.join(allowed)}; got {getattr(self, label)!r}.")
        if self.block_stepper not in (Split, Whole):
            raise ValueError(f"block_stepper must be solvers.Split or solvers.Whole, got {self.block_stepper!r}.")

    @property
    def scheme(self) -> dict[str, Any] | None:
        """A scheme made from coefficients (a tableau, a splitting): its coefficients and derived claims as plain
        values, which a run's summary records; ``None`` for other schemes."""
        describe = getattr(self.stepper, "describe", None)
        return describe() if inspect.ismethod(describe) else None  # a classmethod: the class holds its coefficients

    def with_options(self, **options: Any) -> LayerSpec:
        return replace(self, options={**self.options, **options})

    def build(self, dim: int) -> AbstractStepper:
        """The block stepper for one layer of width ``dim``."""
        stepper = make_stepper(self.stepper, self.options, dim)
        if self.block_stepper is Whole:
            return Whole(stepper)
        ffn = None if self.ffn is None else make_stepper(solvers.STEPPERS[self.ffn], {}, dim)
        return Split(stepper, ffn=ffn, splitting=self.splitting, ffn_dt=self.ffn_dt)


Preset = LayerSpec  # the name the README and the examples use (``odeformer.Preset``); LayerSpec says what it holds


def stepper_parameters(cls: type) -> dict[str, inspect.Parameter]:
    """The constructor's keyword parameters of a stepper class (what ``options`` may set; ``dim`` is the model's)."""
    return dict(inspect.signature(cls).parameters)


def make_stepper(cls: type[AbstractStepper], options: dict[str, Any], dim: int | None) -> AbstractStepper:
    """``cls(**options)`` (with ``dim`` if it takes one; a registry name where it takes a stepper), or a one-line
    error naming the options it accepts."""
    parameters = {
        key: p
        for key, p in stepper_parameters(cls).items()
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)  # nn.Module's (*args, **kwargs): no options
    }
    if "dim" in options:
        raise ValueError(
            f"dim is not a scheme option of {cls.__name__}: a per-channel scheme is given the model's width "
            "(model.dim); leave dim out of the options."
        )
    unknown = sorted(set(options) - set(parameters))
    if unknown:
        allowed = ", ".join(p for p in parameters if p != "dim") or "none"
        raise ValueError(
            f"bad options {options} for {cls.__name__}: it takes no {', '.join(unknown)} (allowed: {allowed})."
        )
    kwargs = {
        key: (make_stepper(solvers.STEPPERS[value], {}, None) if _takes_stepper(parameters[key], value) else value)
        for key, value in options.items()
    }
    if "dim" in parameters and dim is not None:
        kwargs.setdefault("dim", dim)
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as error:
        raise ValueError(f"bad options {options} for {cls.__name__}: {' '.join(str(error).split())}") from None


def _takes_stepper(parameter: inspect.Parameter, value: Any) -> bool:
    if not isinstance(value, str) or "AbstractStepper" not in str(parameter.annotation):
        return False
    if value not in solvers.STEPPERS:
        raise ValueError(
            f"unknown stepper {value!r} for {parameter.name}; choose one of {', '.join(solvers.STEPPERS)}."
        )
    return True


_NAMED: dict[str, LayerSpec] = {
    "diffusion": LayerSpec(
        "x <- x + dt Attn(LN x); x <- x + dt MLP(LN x)   (Euler; residual form, dt = 1: the pre-LN transformer)",
        solvers.Euler,
        "residual",
        1.0,
        doc="`x ← x + dt F_a(x)`, then `x ← x + dt F_f(x)`; with dt = 1 exactly the pre-LN transformer",
    ),
    "full_wave": LayerSpec(
        "v <- v + τ (Attn(LN x) - x); x <- x + τ v; (x, v) <- (x + τ MLP(LN x), v + τ J_MLP∘LN(x) v)   "
        "(semi-implicit Euler on X'' = (A - I) X, v0 = 0, τ = 0.5)",
        solvers.SemiImplicitEuler,
        "laplacian",
        0.5,
        doc=(
            "`v ← v + τ F_a(x)`, `x ← x + τ v`, then `(x, v) ← (x + τ F_f(x), v + τ J_{F_f}(x) v)`, `v₀ = 0`: "
            "semi-implicit Euler on the continuous Full Wave (order 1)"
        ),
    ),
    "full_wave_official": LayerSpec(
        "v <- v + τ (Attn(LN x) - x); x <- x + τ v; (x, v) <- (x + MLP(LN x), v + J_MLP∘LN(x) v)   (the official "
        "code's Full Wave: the wave step on attention, the FFN at unit step as in a transformer; no small-step limit)",
        solvers.SemiImplicitEuler,
        "laplacian",
        0.5,
        ffn_dt=1.0,
        doc=(
            "the official code's Full Wave: as `full_wave`, but the FFN at unit step, `(x, v) ← (x + F_f(x), v + "
            "J_{F_f}(x) v)`, as in a transformer (no small-step limit)"
        ),
    ),
    "light_wave": LayerSpec(
        "x_{n+1} = x_n + dt Attn(LN x_n) + λ ⊙ (x_n - x_{n-1}), λ = sigmoid(θ) per channel (θ0 = -2); then the FFN "
        "sub-step   (heavy-ball momentum)",
        solvers.LightWave,
        "residual",
        1.0,
        options={"theta0": -2.0},
        doc="`x ← x + dt F_a(x) + λ ⊙ (x_n − x_{n−1})`, `λ = sigmoid(θ)` per channel (θ₀ = −2), then FFN",
    ),
    "mix": LayerSpec(
        "v <- v + τ (Attn(LN x) - x); x <- x_d + λ ⊙ (x_w - x_d) with x_w = x + τ v and x_d = x + Attn(LN x); then "
        "(x, v) <- (x + MLP(LN x), v + J v)   (the official code's gated mix: λ = sigmoid(θ) per channel, θ0 = -8, "
        "the diffusion half and the FFN at unit step)",
        solvers.Mix,
        "laplacian",
        0.5,
        options={"theta0": -8.0, "diffusion_dt": 1.0, "diffusion_shift": 1.0},
        ffn_dt=1.0,
        doc=(
            "the official ViT code's gated mix (`WavyBlockParallel`, its FeatScale left out: equal at FeatScale's "
            "start): `x ← x_d + λ ⊙ (x_w − x_d)` with `x_w` the wave step and `x_d = x + Attn(LN x)`, λ per channel "
            "from sigmoid(−8), then the FFN at unit step (order 0; `position_mix` is its scheme with both halves at "
            "step τ, order 1)"
        ),
    ),
    "mix_bert": LayerSpec(
        "v <- λ (v + τ a) + (1 - λ) a with a = Attn(LN x) - x; x <- x + τ v; then (x, v) <- (x + MLP(LN x), "
        "v + J_MLP∘LN(x) v)   (the official BERT code's mix: λ = sigmoid(β), one learnable scalar per layer, β0 = 0; "
        "the FFN at unit step; BERT's own layout is norm=post)",
        solvers.VelocityMix,
        "laplacian",
        0.5,
        options={"theta0": 0.0, "gate": "scalar"},
        ffn_dt=1.0,
        doc=(
            "the official BERT code's mix: `v ← λ (v + τ F_a(x)) + (1 − λ) F_a(x)`, `x ← x + τ v`, one learnable "
            'scalar λ per layer from sigmoid(0), then the FFN at unit step by the chain rule; with `norm="post"` it'
            " is BERT's mix layer (checked against the official code)"
        ),
    ),
    "damped": LayerSpec(
        "v <- exp(-γ τ) v + τ (Attn(LN x) - x); x <- x + τ v; FFN by the chain rule   (γ = softplus(ρ) per channel, "
        "γ0 = 1)",
        solvers.Damped,
        "laplacian",
        0.5,
        options={"gamma": 1.0},
        doc="`v ← e^{−γτ} v + τ F_a(x)`, `x ← x + τ v`, γ per channel, then FFN by the chain rule",
    ),
    "velocity_verlet": LayerSpec(
        "kick-drift-kick on X'' = (A - I) X with step τ; FFN by the chain rule",
        solvers.VelocityVerlet,
        "laplacian",
        0.5,
        doc="kick-drift-kick on `F_a`, then FFN by the chain rule",
    ),
    "leapfrog": LayerSpec(
        "x_{n+1} = 2 x_n - x_{n-1} + τ² (Attn(LN x_n) - x_n) (Störmer, Taylor start; the history carried in v); FFN "
        "by the chain rule",
        solvers.Leapfrog,
        "laplacian",
        0.5,
        doc=(
            "`x_{n+1} = 2x_n − x_{n−1} + τ² F_a(x_n)` with the history `x_n − x_{n−1}` kept in a velocity, then FFN "
            "by the chain rule, which carries that velocity (so with an FFN the positions are not the bare "
            "recurrence's; `solvers/_leapfrog.py`)"
        ),
    ),
    "heun": LayerSpec(
        "Heun on x' = Attn(LN x) + MLP(LN x) (the whole block as the field)",
        solvers.Heun,
        "residual",
        1.0,
        block_stepper=Whole,
        doc="Heun's scheme (explicit trapezoid) on the whole block's field `F_a(x) + F_f(x)`",
    ),
    "rk4": LayerSpec(
        "classic RK4 on x' = Attn(LN x) + MLP(LN x) (the whole block as the field)",
        solvers.RK4,
        "residual",
        1.0,
        block_stepper=Whole,
        doc="classic RK4 on the whole block's field `F_a(x) + F_f(x)`",
    ),
    "reversible": LayerSpec(
        "v <- v + τ (Attn(LN x) - x); x <- x + τ v; v <- v + τ MLP(LN x); x <- x + τ v   (every sublayer a force of "
        "an invertible kick-drift; the backward pass rebuilds states instead of storing them)",
        solvers.SemiImplicitEuler,
        "laplacian",
        0.5,
        ffn="semi_implicit_euler",
        memory="rebuild",
        doc=(
            "`v ← v + τ F_a(x)`, `x ← x + τ v`, `v ← v + τ F_f(x)`, `x ← x + τ v` (each sublayer a force of an "
            "invertible kick-drift); training stores only the final state and rebuilds the rest backwards"
        ),
    ),
    "tableau": LayerSpec(
        "a scheme from coefficients or a name (solver.options: name; A, b[, c]; A, bbar, b, c; drifts, kicks), its "
        "order, symplecticity, symmetry and evaluations derived from them; its layer follows from those (a "
        "first-order tableau on the whole block, a second-order one on X'' = Attn(LN x) - x with the FFN by the chain "
        "rule); with nothing given, velocity Verlet",
        solvers.Tableau,
        "laplacian",
        0.5,
        doc=(
            "a scheme from `solver.options` (a name, or `A`/`b`/`c`, `A`/`bbar`/`b`/`c`, `drifts`/`kicks`): a "
            "first-order tableau on the whole block (residual, 1), a second-order one on the laplacian force with the"
            " FFN by the chain rule (0.5); velocity Verlet when none is given"
        ),
    ),
}


LAYER_SPECS: dict[str, LayerSpec] = {}
"""The named layers: the presets, and the registered schemes' layers where they have an entry of their own (a
description); ``odeformer.PRESETS`` is its old name, kept for the README. With :data:`solvers.STEPPERS` and
:data:`odeformer.continuous.CONTINUOUS` it makes one namespace of solver names (:func:`solver_names`), in which a name
means one thing: :func:`register_solver` refuses a taken name."""


def _layer_of(spec: LayerSpec) -> tuple:
    """What a layer is built from, with the options written out over the stepper's defaults (so ``{"gamma": 1.0}`` and
    ``{}`` are the same layer of a scheme whose ``gamma`` defaults to 1.0)."""
    defaults = {
        key: p.default
        for key, p in stepper_parameters(spec.stepper).items()
        if p.default is not inspect.Parameter.empty
    }
    options = {**defaults, **spec.options}
    return (
        spec.stepper,
        spec.form,
        spec.dt,
        spec.block_stepper,
        options,
        spec.splitting,
        spec.ffn,
        spec.ffn_dt,
        spec.memory,
    )


def _taken(name: str, spec: LayerSpec | None = None) -> str | None:
    """What ``name`` already names in the solver namespace, if anything but ``spec``'s own scheme's layer."""
    from .continuous import CONTINUOUS

    if name in LAYER_SPECS:
        return f"the preset {LAYER_SPECS[name].equation!r}"
    if name in CONTINUOUS:
        return "a continuous-depth solver"
    cls = solvers.STEPPERS.get(name)
    if cls is not None and (spec is None or _layer_of(spec) != _layer_of(spec_for_stepper(cls, name))):
        return f"the registered scheme {cls.__name__}, whose layer this is not"
    return None


def register_solver(spec: LayerSpec) -> LayerSpec:
    """Register a named layer under ``spec.name``. A name that is taken (a preset, a continuous-depth solver, or a
    registered scheme whose own layer ``spec`` is not) is a one-line error: a name means one thing on the command line,
    in ``solver.ffn``, in :data:`solvers.STEPPERS` and here. A registered scheme's name may describe that scheme's
    own layer (:func:`spec_for_stepper`), so one entry serves both."""
    if not (isinstance(spec.name, str) and spec.name.isidentifier()):
        raise ValueError(f"a solver's name is a Python identifier (a config value), got {spec.name!r}.")
    taken = _taken(spec.name, spec)
    if taken is not None:
        raise ValueError(f"solver name {spec.name!r} is taken by {taken}; register this layer under another name.")
    LAYER_SPECS[spec.name] = spec
    return spec


def check_namespace() -> None:
    """Every solver name means one thing: a scheme registered in :data:`solvers.STEPPERS` after the presets (a user's)
    under a preset's or a continuous solver's name, whose layer that is not, is a one-line error naming both."""
    from .continuous import CONTINUOUS

    for name, cls in solvers.STEPPERS.items():
        own = name in LAYER_SPECS and _layer_of(LAYER_SPECS[name]) != _layer_of(spec_for_stepper(cls, name))
        if name in CONTINUOUS or own:
            raise ValueError(
                f"solver name {name!r} names two things: solvers.STEPPERS[{name!r}] = {cls.__name__} and "
                f"{'a continuous-depth solver' if name in CONTINUOUS else 'the preset of the same name'}; register the "
                "scheme under another name."
            )
    clash = sorted(set(LAYER_SPECS) & set(CONTINUOUS))
    if clash:
        raise ValueError(f"solver names {', '.join(clash)} name both a preset and a continuous-depth solver.")


def spec_for_stepper(cls: type[AbstractStepper], name: str | None = None) -> LayerSpec:
    """The layer a bare stepper class gets, from its declarations.

    A ``second_order`` scheme gets the laplacian force ``Attn(LN x) - x`` as its acceleration, step 0.5, and the FFN
    by the chain rule (Full Wave's layout); a one-stage first-order scheme the residual field ``Attn(LN x)``, step 1,
    and the FFN as an Euler sub-step (the pre-LN transformer's layout); a multi-stage first-order scheme the whole
    block ``Attn(LN x) + MLP(LN x)`` as its field, step 1, so every stage evaluates both sublayers.
    """
    if not (isinstance(cls, type) and issubclass(cls, AbstractStepper)):
        raise ValueError(f"{cls!r} is not a solvers.AbstractStepper subclass.")
    missing = [key for key in solvers.DECLARATIONS if not hasattr(cls, key)]
    if missing:
        raise ValueError(
            f"{cls.__name__} is abstract: it declares no {', '.join(missing)}; train with a concrete subclass."
        )
    label = name or cls.__name__
    if cls.second_order:
        return LayerSpec(
            f"{label} on X'' = Attn(LN x) - x with step τ; FFN by the chain rule",
            cls,
            "laplacian",
            0.5,
            name=label,
            doc=f"`{cls.__name__}` on the force `F_a(x)`, then the FFN by the chain rule",
        )
    if cls.evals_per_step > 1:
        return LayerSpec(
            f"{label} on x' = Attn(LN x) + MLP(LN x) (the whole block as the field)",
            cls,
            "residual",
            1.0,
            block_stepper=Whole,
            name=label,
            doc=f"`{cls.__name__}` on the whole block's field `F_a(x) + F_f(x)`",
        )
    return LayerSpec(
        f"{label} on x' = Attn(LN x), then the FFN as an Euler sub-step",
        cls,
        "residual",
        1.0,
        name=label,
        doc=f"`{cls.__name__}` on `F_a(x)`, then the FFN as an Euler sub-step",
    )


for _name, _spec in _NAMED.items():
    register_solver(replace(_spec, name=_name))
del _name, _spec


def import_stepper(path: str) -> type[AbstractStepper]:
    """The stepper class at ``module.Class``, or a one-line error. The module is looked up on the Python path, then
    in the current directory (where a console script such as ``odeformer-train`` does not look by itself)."""
    module, _, attribute = path.rpartition(".")
    if not module:
        raise ValueError(f"stepper {path!r} is not a dotted path module.Class.")
    try:
        try:
            found = importlib.import_module(module)
        except ModuleNotFoundError as missing:
            here = str(Path.cwd())
            if missing.name != module.split(".")[0] or here in sys.path:
                raise
            sys.path.append(here)  # a file of the user's beside the run: make it importable from here on
            try:
                found = importlib.import_module(module)
            except ImportError:
                sys.path.remove(here)  # not there either: leave the path as it was
                raise
        cls = getattr(found, attribute)
    except (ImportError, AttributeError) as error:
        raise ValueError(f"cannot import stepper {path!r}: {' '.join(str(error).split())}") from None
    if not (isinstance(cls, type) and issubclass(cls, AbstractStepper)):
        raise ValueError(f"stepper {path!r} is {cls!r}, not a solvers.AbstractStepper subclass.")
    return cls


def solver_names() -> list[str]:
    """Every name a discrete solver may be given by: the presets, then the registered schemes that have no entry of
    their own (the continuous-depth solvers are :data:`odeformer.continuous.CONTINUOUS`); checks that no name means
    two things (:func:`check_namespace`)."""
    check_namespace()
    return [*LAYER_SPECS, *(name for name in solvers.STEPPERS if name not in LAYER_SPECS)]


FORM_LABELS = {"residual": "residual `Attn(LN x)`", "laplacian": "laplacian `Attn(LN x) − x`"}


def solver_table() -> str:
    """The README's table of discrete solvers, generated from the registry: name, layer update, attention form and
    default step of every name :func:`solver_names` lists."""
    rows = ["| solver | layer update (attention field `F_a`, FFN field `F_f(x) = MLP(LN x)`) | form | default dt |"]
    rows.append("|---|---|---|---|")
    for name in solver_names():
        spec = spec_of(name)
        form, dt = FORM_LABELS[spec.form], f"{spec.dt:g}"
        if spec.stepper is solvers.Tableau:
            form, dt = "by its kind", "by its kind"
        rows.append(f"| `{name}` | {spec.doc or spec.equation} | {form} | {dt} |")
    return "\n".join(rows)


def spec_of(solver: str | LayerSpec | type) -> LayerSpec:
    """The ``LayerSpec`` a solver value names: a preset's name, a registered scheme's name, a dotted ``module.Class``
    path, a stepper class or a ``LayerSpec`` itself; an unknown name lists the known ones."""
    if isinstance(solver, LayerSpec):
        return solver
    if isinstance(solver, type):
        return spec_for_stepper(solver)
    if isinstance(solver, str):
        check_namespace()
        if solver in LAYER_SPECS:
            return LAYER_SPECS[solver]
        if solver in solvers.STEPPERS:
            return spec_for_stepper(solvers.STEPPERS[solver], solver)
        if "." in solver:
            return spec_for_stepper(import_stepper(solver))
    raise ValueError(f"unknown solver {solver!r}; choose one of {', '.join(solver_names())}, or module.Class.")


def layer_spec(
    name: str,
    dt: float | None = None,
    form: str | None = None,
    splitting: str | None = None,
    options: dict[str, Any] | None = None,
    stepper: str | type | None = None,
    ffn: str | None = None,
    ffn_dt: float | None = None,
) -> LayerSpec:
    """The ``LayerSpec`` of solver ``name`` with its step, attention form, splitting, FFN scheme or stepper options
    changed (what a solver config builds; ``odeformer.preset`` is its old name, kept for the README and examples).
    Each change is checked against what the layer uses: a splitting or FFN scheme for a whole-block scheme, an option
    the stepper does not take, an unknown name, a non-positive ``dt`` are one-line errors.

    ``stepper`` (a class, or ``"module.Class"``) replaces the scheme with a class of the user's. If it is of the kind
    the solver ``name``'s layer steps (first- or second-order, one evaluation or the whole block), the layer keeps
    that solver's layout (form, step, splitting, FFN scheme and step, memory) with the class in it; otherwise the
    layer follows from the class's declarations (:func:`spec_for_stepper`). Every option the class takes is handed to
    it, so the run's config says what the scheme got; an option it does not take is dropped if it is the solver
    ``name``'s default (the config fills those in for the named scheme), and is an error otherwise."""
    chosen = spec_of(name) if not stepper else _with_stepper(name, _stepper_class(stepper))
    if chosen.stepper is solvers.Tableau:
        chosen, options = _tableau_layer(chosen, options or {}), None
    if stepper:
        takes = set(stepper_parameters(chosen.stepper))
        options = {k: v for k, v in (options or {}).items() if k in takes or not _solver_default(name, k, v)}
        chosen = replace(chosen, name=name if name not in solver_names() else chosen.name)
    if chosen.block_stepper is Whole:
        for label, value in (("splitting", splitting), ("ffn", ffn), ("ffn_dt", ffn_dt)):
            if value is not None:
                raise ValueError(
                    f"solver {chosen.name or chosen.stepper.__name__} takes the whole block as its field, so "
                    f"{label} does not apply; use a split scheme (e.g. full_wave, diffusion) to choose it."
                )
    if ffn is not None and ffn not in solvers.STEPPERS:
        raise ValueError(f"unknown ffn scheme {ffn!r}; choose one of {', '.join(solvers.STEPPERS)}.")
    merged = {**chosen.options, **(options or {})}
    made = replace(
        chosen,
        dt=chosen.dt if dt is None else dt,
        form=chosen.form if form is None else form,
        splitting=chosen.splitting if splitting is None else splitting,
        options=merged,
        ffn=chosen.ffn if ffn is None else ffn,
        ffn_dt=chosen.ffn_dt if ffn_dt is None else ffn_dt,
    )
    made.build(2)  # every option is checked now, not at the first forward
    changed = {
        key: getattr(made, key)
        for key in ("dt", "form", "splitting", "ffn", "ffn_dt", "options")
        if getattr(made, key) != getattr(chosen, key)
    }
    if changed:  # the equation text is the preset's: say what this layer does differently
        made = replace(
            made, equation=f"{made.equation}   [changed: {', '.join(f'{k}={v}' for k, v in changed.items())}]"
        )
    return made


def _tableau_layer(named: LayerSpec, options: dict[str, Any]) -> LayerSpec:
    """The layer of a ``tableau`` solver: the class its options make (:func:`solvers.tableau`), laid out as its
    derived declarations call for (:func:`spec_for_stepper`), with the coefficients and claims in its equation."""
    allowed = [key for key in stepper_parameters(solvers.Tableau)]
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(
            f"bad options {options} for tableau: it takes no {', '.join(unknown)} (allowed: {', '.join(allowed)})."
        )
    given = {key: value for key, value in {**named.options, **options}.items() if value is not None}
    if not given:  # solvers.Tableau itself: velocity Verlet
        return replace(named, options={})
    cls = solvers.tableau(**given)
    derived = spec_for_stepper(cls, named.name)
    claims = cls.describe()
    said = ", ".join(f"{key} {claims[key]}" for key in ("order", "evals_per_step", "symplectic", "reversible"))
    return replace(derived, equation=f"{cls.__name__} ({said}): {derived.equation}")


def _stepper_class(stepper: str | type) -> type[AbstractStepper]:
    """``stepper`` as a class: a stepper class itself, or one imported from ``"module.Class"``."""
    if isinstance(stepper, str):
        return import_stepper(stepper)
    if isinstance(stepper, type) and issubclass(stepper, AbstractStepper):
        return stepper
    raise ValueError(f"stepper must be a solvers.AbstractStepper subclass or 'module.Class', got {stepper!r}.")


def _with_stepper(name: str, cls: type[AbstractStepper]) -> LayerSpec:
    """Solver ``name``'s layer with ``cls`` as its scheme if ``cls`` is of the kind that layer steps, else
    ``spec_for_stepper(cls)`` (also for a name that is no solver's); the named scheme's options are dropped (see
    :func:`layer_spec`)."""
    derived = spec_for_stepper(cls)
    try:
        named = spec_of(name)
    except ValueError:
        return derived
    if cls is named.stepper:
        return named
    if (cls.second_order, derived.block_stepper) != (named.stepper.second_order, named.block_stepper):
        return derived
    equation = f"{named.name}'s layer with {cls.__name__} as its scheme: {named.equation}"
    return replace(named, stepper=cls, options={}, equation=equation, name=derived.name)


def _solver_default(name: str, key: str, value: Any) -> bool:
    """Whether ``value`` is what the config fills in for option ``key`` of solver ``name`` (its default)."""
    try:
        named = spec_of(name)
    except ValueError:
        return False
    if key in named.options:
        return named.options[key] == value
    parameter = stepper_parameters(named.stepper).get(key)
    return parameter is not None and parameter.default is not inspect.Parameter.empty and parameter.default == value


def check_preset(
    solver: str | LayerSpec | type, dim: int = 4, heads: int = 2, tokens: int = 3, seed: int = 0
) -> dict[str, Any]:
    """Measure the order of the layer a solver builds, on a small weight-tied block of this library's own fields.

    The block is one :class:`~odeformer.fields.AttentionField` (the preset's form, the plain softmax path) and one
    :class:`~odeformer.fields.FeedForward` (exact LayerNorm tangent), in float64, initialised from ``seed``; the start
    ``x0`` (and ``v0`` for a second-order layer) is standard normal, ``(1, tokens, dim)``. The reference is the fine
    integration of the block's ODE (:meth:`solvers.Split.limit_field`: for Full Wave the continuous Full Wave
    ``x' = v + F_f(x), v' = F_a(x) + J_{F_f}(x) v``), and :func:`solvers.testing.check_layer` asserts the measured
    slope matches the layer's declared order (Lie 1; Strang 2 with second-order parts; the whole-block schemes their
    stepper's; 0 = no small-step limit, e.g. the official mix's unit steps). Returns what it measured.
    """
    from solvers.testing import Problem, check_layer

    from .fields import AttentionField, FeedForward

    chosen = spec_of(solver)
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
