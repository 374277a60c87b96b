"""The solvers: one table of every name ``solver=`` accepts, and the record each name holds.

A *solver* is what a layer is built from: the scheme each layer gets (a :class:`solvers.AbstractStepper` class and
its options), how the FFN enters (a :class:`solvers.Split` sub-step, Lie or Strang, or the whole block as one field,
:class:`solvers.Whole`), the attention form and the default step. :class:`Solver` is that record; :data:`SOLVERS` is
the one table of them, filled at import, where each name has one entry and one meaning:

- the named layers (``diffusion``, ``full_wave``, ``light_wave``, ``mix``, ``reversible``, ..., and ``tableau`` for
  coefficients with no name), written below;
- every scheme registered in :data:`solvers.STEPPERS`, the named tableaux and the learnable families included
  (``forest_ruth``, ``symmetric_splitting``), each with the layer its claims call for (:meth:`Solver.for_stepper`);
  a scheme registered later (``@solvers.register_stepper``) joins the table as it is registered;
- the continuous-depth solvers (:data:`odeformer.continuous.CONTINUOUS`), as :class:`~odeformer.continuous.
  ContinuousSolver` records.

A name is checked when it is written: a taken name is a one-line error, whichever table it is written to. One
spelling picks a scheme: its name (``solver=forest_ruth``), or, for a class of your own, its dotted path
(``"module.Class"``); coefficients with no name are the ``tableau`` solver with ``A``/``b`` (...) options.
:func:`solver` is a named solver with its changes (what a config builds); :func:`as_solver` turns any accepted value
into its record.

Not to be confused with :mod:`solvers`, the package of schemes: a solver here is a scheme *laid out as a layer*, so
``euler`` and ``diffusion`` (or ``semi_implicit_euler`` and ``full_wave``) are two names of one layer, while
``position_mix`` (the scheme) and ``mix`` (the official code's layer, unit steps) are not.
"""

from __future__ import annotations

import importlib
import inspect
import math
import sys
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

import solvers
from solvers import AbstractStepper, Block, Claims, Split, Whole

from .continuous import CONTINUOUS, ContinuousSolver

SPLITTINGS = ("lie", "strang")
FORMS = ("residual", "laplacian")
MEMORY = ("store", "rebuild")


def check_step(value: Any, label: str = "dt") -> float:
    """A layer's step as a float, or a one-line error: it must be a positive, finite number."""
    if isinstance(value, bool) or not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ValueError(f"{label} must be positive and finite, got {value!r}.")
    if not math.isfinite(torch.tensor(float(value), dtype=torch.float32).item()):
        raise ValueError(f"{label} must be positive and finite in float32 (at most about 3.4e38), got {value!r}.")
    return float(value)


@dataclass(frozen=True)
class Solver:
    """What a layer is built from: the stepper each layer gets, how the FFN enters, the attention form, the default
    step.

    ``options`` are passed to the stepper's constructor (with ``dim`` when the stepper takes one, so scheme parameters
    are learnable per channel and per layer): ``SOLVERS["mix"].with_options(theta0=-4.0)``. ``block_stepper`` is
    :class:`solvers.Split` or :class:`solvers.Whole`; ``ffn`` names the FFN sub-step's scheme in
    :data:`solvers.STEPPERS` (``None``: ``euler`` under Lie, ``heun`` under Strang; a second-order scheme makes the FFN
    a force of it); ``ffn_dt`` fixes the FFN sub-step (``None``: the layer's ``dt``). ``memory="rebuild"``: the
    backward pass rebuilds states by inverting every layer instead of storing them (layers must be reversible).
    Every value is checked here, once (a step that is not positive and finite, an unknown form, splitting or memory
    is a one-line error).
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
        object.__setattr__(self, "dt", check_step(self.dt))
        if self.ffn_dt is not None:
            object.__setattr__(self, "ffn_dt", check_step(self.ffn_dt, "ffn_dt"))
        for label, allowed in (("form", FORMS), ("splitting", SPLITTINGS), ("memory", MEMORY)):
            if getattr(self, label) not in allowed:
                raise ValueError(f"{label} must be one of {', '.join(allowed)}; got {getattr(self, label)!r}.")
        if self.block_stepper not in (Split, Whole):
            raise ValueError(f"block_stepper must be solvers.Split or solvers.Whole, got {self.block_stepper!r}.")

    @property
    def scheme(self) -> dict[str, Any] | None:
        """A scheme made from coefficients (a tableau, a splitting): its coefficients and derived claims as plain
        values, which a run's summary records; ``None`` for other schemes."""
        if isinstance(getattr(self.stepper, "tableau", None), solvers._coefficients.VALUES):
            return self.stepper.tableau.describe()
        if self.stepper is solvers.Tableau:
            return make_stepper(self.stepper, self.options, None).describe()
        return None

    def with_options(self, **options: Any) -> Solver:
        return replace(self, options={**self.options, **options})

    def build(self, dim: int) -> AbstractStepper:
        """The block stepper for one layer of width ``dim``."""
        stepper = make_stepper(self.stepper, self.options, dim)
        if self.block_stepper is Whole:
            return Whole(stepper)
        ffn = None if self.ffn is None else make_stepper(solvers.STEPPERS[self.ffn], {}, dim)
        return Split(stepper, ffn=ffn, splitting=self.splitting, ffn_dt=self.ffn_dt)

    @classmethod
    def for_stepper(
        cls, stepper: type[AbstractStepper], name: str | None = None, options: dict[str, Any] | None = None
    ) -> Solver:
        """The layer a stepper class gets from its claims (with ``options``, those of the instance they make).

        A ``second_order`` scheme gets the laplacian force ``Attn(LN x) - x`` as its acceleration, step 0.5, and the
        FFN by the chain rule (Full Wave's layout); a one-stage first-order scheme the residual field ``Attn(LN x)``,
        step 1, and the FFN as an Euler sub-step (the pre-LN transformer's layout); a multi-stage first-order scheme
        the whole block ``Attn(LN x) + MLP(LN x)`` as its field, step 1, so every stage evaluates both sublayers.
        """
        if not (isinstance(stepper, type) and issubclass(stepper, AbstractStepper)):
            raise ValueError(f"{stepper!r} is not a solvers.AbstractStepper subclass.")
        claims = _claims_of(stepper, options or {})
        label = name or stepper.__name__
        options = dict(options or {})
        if claims.second_order:
            return cls(
                f"{label} on X'' = Attn(LN x) - x with step τ; FFN by the chain rule",
                stepper,
                "laplacian",
                0.5,
                options=options,
                name=label,
                doc=f"`{stepper.__name__}` on the force `F_a(x)`, then the FFN by the chain rule",
            )
        if claims.evals_per_step > 1:
            return cls(
                f"{label} on x' = Attn(LN x) + MLP(LN x) (the whole block as the field)",
                stepper,
                "residual",
                1.0,
                block_stepper=Whole,
                options=options,
                name=label,
                doc=f"`{stepper.__name__}` on the whole block's field `F_a(x) + F_f(x)`",
            )
        return cls(
            f"{label} on x' = Attn(LN x), then the FFN as an Euler sub-step",
            stepper,
            "residual",
            1.0,
            options=options,
            name=label,
            doc=f"`{stepper.__name__}` on `F_a(x)`, then the FFN as an Euler sub-step",
        )


def _claims_of(stepper: type[AbstractStepper], options: dict[str, Any]) -> Claims:
    """What ``stepper(**options)`` claims; a class that cannot claim anything yet is a one-line error."""
    missing = [key for key in solvers.DECLARATIONS if not hasattr(stepper, key)]
    if missing and stepper.claims is AbstractStepper.claims:
        raise ValueError(
            f"{stepper.__name__} is abstract: it declares no {', '.join(missing)}; train with a concrete subclass."
        )
    if not options and not missing:
        return Claims.of(stepper)
    return make_stepper(stepper, options, None).claims()


def stepper_parameters(cls: type) -> dict[str, inspect.Parameter]:
    """The constructor's keyword parameters of a stepper class (what ``options`` may set; ``dim`` is the model's)."""
    return {
        key: p
        for key, p in inspect.signature(cls).parameters.items()
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)  # nn.Module's (*args, **kwargs): no options
    }


def make_stepper(cls: type[AbstractStepper], options: dict[str, Any], dim: int | None) -> AbstractStepper:
    """``cls(**options)`` (with ``dim`` if it takes one; a registry name where it takes a stepper), or a one-line
    error naming the options it accepts."""
    parameters = stepper_parameters(cls)
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


class SolverTable(dict):
    """``name -> Solver | ContinuousSolver``: every name ``solver=`` accepts, each written once. Writing a name that
    is taken (by another entry, or by a registered scheme whose layer the entry is not) is a one-line error."""

    def __setitem__(self, name: str, entry: Solver | ContinuousSolver) -> None:
        if not (isinstance(name, str) and name.isidentifier()):
            raise ValueError(f"a solver's name is a Python identifier (a config value), got {name!r}.")
        if not isinstance(entry, (Solver, ContinuousSolver)):
            raise TypeError(f"SOLVERS[{name!r}] must be an odeformer.Solver or ContinuousSolver, got {entry!r}.")
        if name in self and self[name] != entry:
            raise ValueError(f"solver name {name!r} is taken by {_what(self[name])}; register it under another name.")
        scheme = solvers.STEPPERS.get(name)
        if scheme is not None and not (isinstance(entry, Solver) and entry.stepper is scheme):
            raise ValueError(
                f"solver name {name!r} is taken by the registered scheme {scheme.__name__}, and {_what(entry)} is not "
                "its layer; register it under another name."
            )
        super().__setitem__(name, entry)

    def update(self, *args: Any, **kwargs: Any) -> None:
        for name, entry in dict(*args, **kwargs).items():
            self[name] = entry

    def setdefault(self, name: str, entry: Any = None) -> Any:
        if name not in self:
            self[name] = entry
        return self[name]


def _what(entry: Solver | ContinuousSolver) -> str:
    if isinstance(entry, ContinuousSolver):
        return f"the continuous-depth solver {entry.name!r}"
    return f"the solver {entry.equation!r}"


SOLVERS: SolverTable = SolverTable()
"""Every name ``solver=`` accepts: the named layers, every registered scheme's layer, the continuous-depth solvers."""


def register_solver(entry: Solver | ContinuousSolver) -> Solver | ContinuousSolver:
    """Add ``entry`` to :data:`SOLVERS` under its ``name`` (a taken name is a one-line error)."""
    SOLVERS[entry.name] = entry
    return entry


def _named(name: str, equation: str, stepper: type[AbstractStepper], form: str, dt: float, doc: str, **rest) -> None:
    register_solver(Solver(equation, stepper, form, dt, name=name, doc=doc, **rest))


_named(
    "diffusion",
    "x <- x + dt Attn(LN x); x <- x + dt MLP(LN x)   (Euler; residual form, dt = 1: the pre-LN transformer)",
    solvers.Euler,
    "residual",
    1.0,
    "`x ← x + dt F_a(x)`, then `x ← x + dt F_f(x)`; with dt = 1 exactly the pre-LN transformer",
)
_named(
    "full_wave",
    "v <- v + τ (Attn(LN x) - x); x <- x + τ v; (x, v) <- (x + τ MLP(LN x), v + τ J_MLP∘LN(x) v)   "
    "(semi-implicit Euler on X'' = (A - I) X, v0 = 0, τ = 0.5)",
    solvers.SemiImplicitEuler,
    "laplacian",
    0.5,
    "`v ← v + τ F_a(x)`, `x ← x + τ v`, then `(x, v) ← (x + τ F_f(x), v + τ J_{F_f}(x) v)`, `v₀ = 0`: "
    "semi-implicit Euler on the continuous Full Wave (order 1)",
)
_named(
    "full_wave_official",
    "v <- v + τ (Attn(LN x) - x); x <- x + τ v; (x, v) <- (x + MLP(LN x), v + J_MLP∘LN(x) v)   (the official "
    "code's Full Wave: the wave step on attention, the FFN at unit step as in a transformer; no small-step limit)",
    solvers.SemiImplicitEuler,
    "laplacian",
    0.5,
    "the official code's Full Wave: as `full_wave`, but the FFN at unit step, `(x, v) ← (x + F_f(x), v + "
    "J_{F_f}(x) v)`, as in a transformer (no small-step limit)",
    ffn_dt=1.0,
)
_named(
    "light_wave",
    "x_{n+1} = x_n + dt Attn(LN x_n) + λ ⊙ (x_n - x_{n-1}), λ = sigmoid(θ) per channel (θ0 = -2); then the FFN "
    "sub-step   (heavy-ball momentum)",
    solvers.LightWave,
    "residual",
    1.0,
    "`x ← x + dt F_a(x) + λ ⊙ (x_n − x_{n−1})`, `λ = sigmoid(θ)` per channel (θ₀ = −2), then FFN",
    options={"theta0": -2.0},
)
_named(
    "mix",
    "v <- v + τ (Attn(LN x) - x); x <- x_d + λ ⊙ (x_w - x_d) with x_w = x + τ v and x_d = x + Attn(LN x); then "
    "(x, v) <- (x + MLP(LN x), v + J v)   (the official code's gated mix: λ = sigmoid(θ) per channel, θ0 = -8, "
    "the diffusion half and the FFN at unit step)",
    solvers.Mix,
    "laplacian",
    0.5,
    "the official ViT code's gated mix (`WavyBlockParallel`, its FeatScale left out: equal at FeatScale's "
    "start): `x ← x_d + λ ⊙ (x_w − x_d)` with `x_w` the wave step and `x_d = x + Attn(LN x)`, λ per channel "
    "from sigmoid(−8), then the FFN at unit step (order 0; `position_mix` is its scheme with both halves at "
    "step τ, order 1)",
    options={"theta0": -8.0, "diffusion_dt": 1.0, "diffusion_shift": 1.0},
    ffn_dt=1.0,
)
_named(
    "mix_bert",
    "v <- λ (v + τ a) + (1 - λ) a with a = Attn(LN x) - x; x <- x + τ v; then (x, v) <- (x + MLP(LN x), "
    "v + J_MLP∘LN(x) v)   (the official BERT code's mix: λ = sigmoid(β), one learnable scalar per layer, β0 = 0; "
    "the FFN at unit step; BERT's own layout is norm=post)",
    solvers.VelocityMix,
    "laplacian",
    0.5,
    "the official BERT code's mix: `v ← λ (v + τ F_a(x)) + (1 − λ) F_a(x)`, `x ← x + τ v`, one learnable "
    'scalar λ per layer from sigmoid(0), then the FFN at unit step by the chain rule; with `norm="post"` it'
    " is BERT's mix layer (checked against the official code)",
    options={"theta0": 0.0, "gate": "scalar"},
    ffn_dt=1.0,
)
_named(
    "damped",
    "v <- exp(-γ τ) v + τ (Attn(LN x) - x); x <- x + τ v; FFN by the chain rule   (γ = softplus(ρ) per channel, "
    "γ0 = 1)",
    solvers.Damped,
    "laplacian",
    0.5,
    "`v ← e^{−γτ} v + τ F_a(x)`, `x ← x + τ v`, γ per channel, then FFN by the chain rule",
    options={"gamma": 1.0},
)
_named(
    "velocity_verlet",
    "kick-drift-kick on X'' = (A - I) X with step τ; FFN by the chain rule",
    solvers.VelocityVerlet,
    "laplacian",
    0.5,
    "kick-drift-kick on `F_a`, then FFN by the chain rule",
)
_named(
    "leapfrog",
    "x_{n+1} = 2 x_n - x_{n-1} + τ² (Attn(LN x_n) - x_n) (Störmer, Taylor start; the history carried in v); FFN "
    "by the chain rule",
    solvers.Leapfrog,
    "laplacian",
    0.5,
    "`x_{n+1} = 2x_n − x_{n−1} + τ² F_a(x_n)` with the history `x_n − x_{n−1}` kept in a velocity, then FFN "
    "by the chain rule, which carries that velocity (so with an FFN the positions are not the bare "
    "recurrence's; `solvers/_leapfrog.py`)",
)
_named(
    "heun",
    "Heun on x' = Attn(LN x) + MLP(LN x) (the whole block as the field)",
    solvers.Heun,
    "residual",
    1.0,
    "Heun's scheme (explicit trapezoid) on the whole block's field `F_a(x) + F_f(x)`",
    block_stepper=Whole,
)
_named(
    "rk4",
    "classic RK4 on x' = Attn(LN x) + MLP(LN x) (the whole block as the field)",
    solvers.RK4,
    "residual",
    1.0,
    "classic RK4 on the whole block's field `F_a(x) + F_f(x)`",
    block_stepper=Whole,
)
_named(
    "reversible",
    "v <- v + τ (Attn(LN x) - x); x <- x + τ v; v <- v + τ MLP(LN x); x <- x + τ v   (every sublayer a force of "
    "an invertible kick-drift; the backward pass rebuilds states instead of storing them)",
    solvers.SemiImplicitEuler,
    "laplacian",
    0.5,
    "`v ← v + τ F_a(x)`, `x ← x + τ v`, `v ← v + τ F_f(x)`, `x ← x + τ v` (each sublayer a force of an "
    "invertible kick-drift); training stores only the final state and rebuilds the rest backwards",
    ffn="semi_implicit_euler",
    memory="rebuild",
)
_named(
    "tableau",
    "a scheme from coefficients with no name (solver.options: A, b[, c]; A, bbar, b, c; drifts, kicks), its "
    "order, symplecticity, symmetry and evaluations derived from them; its layer follows from those (a "
    "first-order tableau on the whole block, a second-order one on X'' = Attn(LN x) - x with the FFN by the chain "
    "rule); with nothing given, velocity Verlet",
    solvers.Tableau,
    "laplacian",
    0.5,
    "a scheme from coefficients in `solver.options` (`A`/`b`/`c`, `A`/`bbar`/`b`/`c`, `drifts`/`kicks`): a "
    "first-order tableau on the whole block (residual, 1), a second-order one on the laplacian force with the"
    " FFN by the chain rule (0.5); velocity Verlet when none is given",
)
NAMED_LAYERS = tuple(SOLVERS)
"""The solvers written above (each registered scheme's layer and the continuous solvers follow them in the table)."""


def _add_stepper(name: str, cls: type[AbstractStepper]) -> None:
    """A registered scheme's entry: its own named layer if it has one, else the layer its claims call for."""
    if name not in SOLVERS:
        SOLVERS[name] = Solver.for_stepper(cls, name)
    elif not (isinstance(SOLVERS[name], Solver) and SOLVERS[name].stepper is cls):
        raise ValueError(
            f"stepper name {name!r} is taken by {_what(SOLVERS[name])}; register {cls.__name__} under another name."
        )


for _name, _cls in solvers.STEPPERS.items():
    _add_stepper(_name, _cls)
solvers.STEPPERS.watch(_add_stepper)  # a scheme registered from now on joins the table as it is written
for _name, _settings in CONTINUOUS.items():
    register_solver(ContinuousSolver(name=_name, **_settings))
del _name, _cls, _settings


def import_stepper(path: str) -> type[AbstractStepper]:
    """The stepper class at ``module.Class``, or a one-line error. The module is looked up on the Python path, then
    in the current directory (where a console script such as ``odeformer-train`` does not look by itself). Naming a
    module runs its code: only name modules you trust."""
    module, _, attribute = path.rpartition(".")
    if not module or not all(part.isidentifier() for part in path.split(".")):
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


def solver_names(kind: str | None = None) -> list[str]:
    """Every name in :data:`SOLVERS`, or only the discrete (``kind="discrete"``) or continuous ones."""
    if kind not in (None, "discrete", "continuous"):
        raise ValueError(f"kind must be None, 'discrete' or 'continuous'; got {kind!r}.")
    wanted = {None: (Solver, ContinuousSolver), "discrete": Solver, "continuous": ContinuousSolver}[kind]
    return [name for name, entry in SOLVERS.items() if isinstance(entry, wanted)]


FORM_LABELS = {"residual": "residual `Attn(LN x)`", "laplacian": "laplacian `Attn(LN x) − x`"}


def solver_table() -> str:
    """The README's table of discrete solvers, generated from :data:`SOLVERS`: name, layer update, attention form and
    default step of every discrete name."""
    rows = ["| solver | layer update (attention field `F_a`, FFN field `F_f(x) = MLP(LN x)`) | form | default dt |"]
    rows.append("|---|---|---|---|")
    for name in solver_names("discrete"):
        entry = SOLVERS[name]
        form, dt = FORM_LABELS[entry.form], f"{entry.dt:g}"
        if entry.stepper is solvers.Tableau:
            form, dt = "by its kind", "by its kind"
        rows.append(f"| `{name}` | {entry.doc or entry.equation} | {form} | {dt} |")
    return "\n".join(rows)


def _registered_name(cls: type[AbstractStepper]) -> str | None:
    return next((name for name, c in solvers.STEPPERS.items() if c is cls), None)


def as_solver(value: str | Solver | ContinuousSolver | type) -> Solver | ContinuousSolver:
    """The record a solver value names: a name in :data:`SOLVERS`, a dotted ``module.Class`` path, a stepper class
    (a registered one's entry, else the layer its claims call for) or a record itself; an unknown name lists the
    known ones, with the nearest."""
    if isinstance(value, (Solver, ContinuousSolver)):
        return value
    if isinstance(value, type):
        name = _registered_name(value)
        return SOLVERS[name] if name is not None else Solver.for_stepper(value)
    if isinstance(value, str):
        if value in SOLVERS:
            return SOLVERS[value]
        if "." in value:
            return as_solver(import_stepper(value))
    raise ValueError(f"unknown solver {value!r}{_nearest(value)}; choose one of {', '.join(SOLVERS)}, or module.Class.")


def _nearest(value: Any) -> str:
    import difflib

    close = difflib.get_close_matches(str(value), list(SOLVERS), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def solver(
    name: str,
    dt: float | None = None,
    form: str | None = None,
    splitting: str | None = None,
    options: dict[str, Any] | None = None,
    stepper: str | type | None = None,
    ffn: str | None = None,
    ffn_dt: float | None = None,
) -> Solver:
    """The :class:`Solver` named ``name`` with its step, attention form, splitting, FFN scheme or stepper options
    changed (what a solver config builds). Each change is checked against what the layer uses: a splitting or FFN
    scheme for a whole-block scheme, an option the stepper does not take, an unknown name, a non-positive ``dt`` are
    one-line errors.

    ``stepper`` (a class of your own, or ``"module.Class"``) replaces the scheme. If it is of the kind the solver
    ``name``'s layer steps (first- or second-order, one evaluation or the whole block), the layer keeps that solver's
    layout (form, step, splitting, FFN scheme and step, memory) with the class in it; otherwise the layer follows from
    the class's claims (:meth:`Solver.for_stepper`). Every option the class takes is handed to it, so the run's
    config says what the scheme got; an option it does not take is dropped if it is the solver ``name``'s default
    (the config fills those in for the named scheme), and is an error otherwise. A registered scheme is picked by
    its name, not by its class: ``solver="forest_ruth"``."""
    options = dict(options or {})
    if stepper:
        cls = _stepper_class(stepper)
        registered = _registered_name(cls)
        if registered is not None:
            raise ValueError(
                f"{cls.__name__} is registered as the solver {registered!r}: pick it by its name, "
                f"solver={registered} (one spelling per scheme)."
            )
        chosen = _with_stepper(name, cls)
        takes = set(stepper_parameters(chosen.stepper))
        options = {k: v for k, v in options.items() if k in takes or not _solver_default(name, k, v)}
        chosen = replace(chosen, name=name if name not in SOLVERS else chosen.name)
    else:
        named = as_solver(name)
        if isinstance(named, ContinuousSolver):
            raise ValueError(f"{name!r} is a continuous-depth solver; it takes the continuous solver's options.")
        chosen = named
    if chosen.stepper is solvers.Tableau:
        if "name" in options:
            raise ValueError(
                f"a named scheme is picked by its name: solver={options['name']} (the tableau solver takes "
                "coefficients with no name: A, b, c, bbar, drifts, kicks)."
            )
        given = {key: value for key, value in {**chosen.options, **options}.items() if value is not None}
        derived = Solver.for_stepper(solvers.Tableau, chosen.name, given)
        made = make_stepper(solvers.Tableau, given, None)
        said = ", ".join(f"{key} {getattr(made.claims(), key)}" for key in ("order", "evals_per_step", "symplectic"))
        chosen = replace(derived, equation=f"Tableau ({said}): {derived.equation}", doc=chosen.doc)
        options = {}
    if chosen.block_stepper is Whole:
        for label, value in (("splitting", splitting), ("ffn", ffn), ("ffn_dt", ffn_dt)):
            if value is not None:
                raise ValueError(
                    f"solver {chosen.name or chosen.stepper.__name__} takes the whole block as its field, so "
                    f"{label} does not apply; use a split scheme (e.g. full_wave, diffusion) to choose it."
                )
    if ffn is not None and ffn not in solvers.STEPPERS:
        raise ValueError(f"unknown ffn scheme {ffn!r}; choose one of {', '.join(solvers.STEPPERS)}.")
    made = replace(
        chosen,
        dt=chosen.dt if dt is None else dt,
        form=chosen.form if form is None else form,
        splitting=chosen.splitting if splitting is None else splitting,
        options={**chosen.options, **options},
        ffn=chosen.ffn if ffn is None else ffn,
        ffn_dt=chosen.ffn_dt if ffn_dt is None else ffn_dt,
    )
    made.build(2)  # every option is checked now, not at the first forward
    changed = {
        key: getattr(made, key)
        for key in ("dt", "form", "splitting", "ffn", "ffn_dt", "options")
        if getattr(made, key) != getattr(chosen, key)
    }
    if changed:  # the equation text is the named solver's: say what this layer does differently
        made = replace(
            made, equation=f"{made.equation}   [changed: {', '.join(f'{k}={v}' for k, v in changed.items())}]"
        )
    return made


def _stepper_class(stepper: str | type) -> type[AbstractStepper]:
    """``stepper`` as a class: a stepper class itself, or one imported from ``"module.Class"``."""
    if isinstance(stepper, str):
        return import_stepper(stepper)
    if isinstance(stepper, type) and issubclass(stepper, AbstractStepper):
        return stepper
    raise ValueError(f"stepper must be a solvers.AbstractStepper subclass or 'module.Class', got {stepper!r}.")


def _with_stepper(name: str, cls: type[AbstractStepper]) -> Solver:
    """Solver ``name``'s layer with ``cls`` as its scheme if ``cls`` is of the kind that layer steps, else
    ``Solver.for_stepper(cls)`` (also for a name that is no solver's); the named scheme's options are dropped (see
    :func:`solver`)."""
    derived = Solver.for_stepper(cls)
    named = SOLVERS.get(name)
    if not isinstance(named, Solver):
        return derived
    if cls is named.stepper:
        return named
    kind = Claims.of(named.stepper) if named.stepper is not solvers.Tableau else None
    if kind is None or (Claims.of(cls).second_order, derived.block_stepper) != (kind.second_order, named.block_stepper):
        return derived
    equation = f"{named.name}'s layer with {cls.__name__} as its scheme: {named.equation}"
    return replace(named, stepper=cls, options={}, equation=equation, name=derived.name)


def _solver_default(name: str, key: str, value: Any) -> bool:
    """Whether ``value`` is what the config fills in for option ``key`` of solver ``name`` (its default)."""
    named = SOLVERS.get(name)
    if not isinstance(named, Solver):
        return False
    if key in named.options:
        return named.options[key] == value
    parameter = stepper_parameters(named.stepper).get(key)
    return parameter is not None and parameter.default is not inspect.Parameter.empty and parameter.default == value


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
    from solvers.testing import Problem, check_layer

    from .fields import AttentionField, FeedForward

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


RENAMED = {
    "preset": "solver",
    "PRESETS": "SOLVERS",
    "Preset": "Solver",
    "LayerSpec": "Solver",
    "LAYER_SPECS": "SOLVERS",
    "layer_spec": "solver",
    "spec_of": "as_solver",
    "check_preset": "check_solver",
}
"""Old public names of ``odeformer``, each resolved to its new one with a warning (``odeformer.preset`` ->
``odeformer.solver``); ``spec_for_stepper`` is ``Solver.for_stepper``."""


def renamed(name: str, namespace: dict[str, Any]) -> Any:
    """The object an old name stands for, with a DeprecationWarning naming the new one; ``AttributeError`` if
    ``name`` is not an old name."""
    if name == "spec_for_stepper":
        warnings.warn("odeformer.spec_for_stepper is now odeformer.Solver.for_stepper", DeprecationWarning, 3)
        return Solver.for_stepper
    if name not in RENAMED:
        raise AttributeError(name)
    warnings.warn(f"odeformer.{name} is now odeformer.{RENAMED[name]}", DeprecationWarning, 3)
    return namespace[RENAMED[name]]
