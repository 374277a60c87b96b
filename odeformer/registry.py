"""The solvers: every name ``solver=`` accepts, and the record of the layer each builds.

A *solver* is a scheme laid out as a layer: the scheme each layer gets (a :class:`solvers.AbstractStepper` class and
its options), how the FFN enters (a :class:`solvers.Split` sub-step, Lie or Strang, or the whole block as one field,
:class:`solvers.Whole`), the attention form and the default step. :class:`Solver` is that record. The names are one
table, :data:`solvers.STEPPERS` (every scheme by its name, and the variant rows ``diffusion``, ``full_wave``,
``full_wave_official``, ``mix``, ``mix_bert`` and ``reversible``, ``solvers/_variants.py``), beside the
continuous-depth solvers (:data:`odeformer.continuous.CONTINUOUS`). A scheme's layer follows from its claims
(:meth:`Solver.for_stepper`); a variant row keeps that layout and adds its options, FFN sub-step or backward pass.

:func:`as_solver` turns any accepted value into its record: a name, a stepper class (a registered one by its name's
record; one of your own in the layer its claims call for) or ``"module.Class"``; :func:`solver` is a named solver
with its changes (what a config builds). Not to be confused with :mod:`solvers`, the package of schemes: ``euler``
and ``diffusion`` (or ``semi_implicit_euler`` and ``full_wave``) are two names of one layer, while ``position_mix``
(the scheme) and ``mix`` (the official code's layer, unit steps) are not.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import solvers
from solvers import STEPPERS, AbstractStepper, Claims, Split, Variant, Whole, check_options, make_stepper

from .continuous import CONTINUOUS, ContinuousSolver
from .layer import check_step

SPLITTINGS = ("lie", "strang")
FORMS = ("residual", "laplacian")
FORM_LABELS = {"residual": "residual `Attn(LN x)`", "laplacian": "laplacian `Attn(LN x) − x`"}


@dataclass(frozen=True)
class Solver:
    """What a layer is built from: the stepper each layer gets, how the FFN enters, the attention form, the default
    step. ``equation`` says it in words.

    ``options`` are passed to the stepper's constructor (with ``dim`` when the stepper takes one, so scheme parameters
    are learnable per channel and per layer): ``as_solver("mix").with_options(theta0=-4.0)``. ``block_stepper`` is
    :class:`solvers.Split` or :class:`solvers.Whole`; ``ffn`` names the FFN sub-step's scheme in
    :data:`solvers.STEPPERS` (``None``: ``euler`` under Lie, ``heun`` under Strang; a second-order scheme makes the FFN
    a force of it); ``ffn_dt`` fixes the FFN sub-step (``None``: the layer's ``dt``). ``memory="rebuild"``: the
    backward pass rebuilds states by inverting every layer instead of storing them (layers must be reversible).
    Every value is checked here, once (a step that is not positive and finite, an unknown form, splitting, memory or
    FFN scheme is a one-line error); the stepper's options are checked when a layer builds it.
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

    def __post_init__(self) -> None:
        object.__setattr__(self, "dt", check_step(self.dt))
        if self.ffn_dt is not None:
            object.__setattr__(self, "ffn_dt", check_step(self.ffn_dt, "ffn_dt"))
        for label, allowed in (("form", FORMS), ("splitting", SPLITTINGS), ("memory", solvers._registry.MEMORY)):
            if getattr(self, label) not in allowed:
                raise ValueError(f"{label} must be one of {', '.join(allowed)}; got {getattr(self, label)!r}.")
        if self.block_stepper not in (Split, Whole):
            raise ValueError(f"block_stepper must be solvers.Split or solvers.Whole, got {self.block_stepper!r}.")
        if self.ffn is not None and self.ffn not in STEPPERS.schemes():
            raise ValueError(f"unknown ffn scheme {self.ffn!r}; choose one of {', '.join(STEPPERS.schemes())}.")

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
        ffn = None if self.ffn is None else make_stepper(STEPPERS[self.ffn], {}, dim)
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
        if stepper.steps_on_blocks:
            raise ValueError(
                f"{stepper.__name__} steps on a solvers.Block (steps_on_blocks): a model's layers are made from a "
                "scheme on one field (solvers.Split and solvers.Whole make the layer); train with that scheme, and "
                f"check the layer itself with solvers.testing.check_stepper({stepper.__name__}())."
            )
        claims, label, options = _claims_of(stepper, options or {}), name or stepper.__name__, dict(options or {})
        if claims.second_order:
            text = f"{label}: {stepper.__name__} on X'' = Attn(LN x) - x with step τ; FFN by the chain rule"
            return cls(text, stepper, "laplacian", 0.5, options=options, name=label)
        if claims.evals_per_step > 1:
            text = f"{label}: {stepper.__name__} on x' = Attn(LN x) + MLP(LN x) (the whole block as the field)"
            return cls(text, stepper, "residual", 1.0, block_stepper=Whole, options=options, name=label)
        text = f"{label}: {stepper.__name__} on x' = Attn(LN x), then the FFN as an Euler sub-step"
        return cls(text, stepper, "residual", 1.0, options=options, name=label)


def _claims_of(stepper: type[AbstractStepper], options: dict[str, Any]) -> Claims:
    """What ``stepper(**options)`` claims (with no options, the class's claims, read once per class); a class that
    cannot claim anything yet is a one-line error."""
    missing = [key for key in solvers.DECLARATIONS if not hasattr(stepper, key)]
    if missing and stepper.claims is AbstractStepper.claims:
        raise ValueError(
            f"{stepper.__name__} is abstract: it declares no {', '.join(missing)}; train with a concrete subclass."
        )
    if options:
        return make_stepper(stepper, options, None).claims()
    return _class_claims(stepper)


@functools.cache
def _class_claims(stepper: type[AbstractStepper]) -> Claims:
    """``Claims.of(stepper)``, once per class: a class whose claims are computed makes an instance to read them."""
    return Claims.of(stepper)


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
    """Every name ``solver=`` accepts (:data:`solvers.STEPPERS`, its variant rows first, then the continuous-depth
    solvers), or only the discrete (``kind="discrete"``) or continuous ones."""
    if kind not in (None, "discrete", "continuous"):
        raise ValueError(f"kind must be None, 'discrete' or 'continuous'; got {kind!r}.")
    discrete = [*STEPPERS.variants(), *STEPPERS.schemes()] if kind != "continuous" else []
    return [*discrete, *(CONTINUOUS if kind != "discrete" else ())]


def solver_table() -> str:
    """The table in ``docs/schemes.md`` of the variant rows of :data:`solvers.STEPPERS`: name, layer update, attention
    form and default step (every other scheme's layer follows from its claims)."""
    rows = ["| solver | layer update (attention field `F_a`, FFN field `F_f(x) = MLP(LN x)`) | form | default dt |"]
    rows.append("|---|---|---|---|")
    for name, row in STEPPERS.items():
        if isinstance(row, Variant):
            entry = as_solver(name)
            rows.append(f"| `{name}` | {row.update} | {FORM_LABELS[entry.form]} | {entry.dt:g} |")
    return "\n".join(rows)


_AN_INSTANCE = (
    "a {name} instance cannot be a model's solver (every layer builds a stepper of its own): give the class, "
    "solver={name}, or odeformer.solver({name}, options={{...}}) for its constructor's options."
)


def as_solver(value: str | Solver | ContinuousSolver | type) -> Solver | ContinuousSolver:
    """The record a solver value names: a name in :data:`solvers.STEPPERS` or :data:`~odeformer.continuous.
    CONTINUOUS`, a dotted ``module.Class`` path, a stepper class (a registered one's record, else the layer its claims
    call for) or a record itself; an unknown name lists the known ones, with the nearest."""
    if isinstance(value, (Solver, ContinuousSolver)):
        return value
    if isinstance(value, AbstractStepper):
        raise ValueError(_AN_INSTANCE.format(name=type(value).__name__))
    if isinstance(value, type):
        name = STEPPERS.name_of(value)
        return as_solver(name) if name is not None else Solver.for_stepper(value)
    if isinstance(value, str):
        row = STEPPERS.get(value)
        if isinstance(row, Variant):  # its scheme's layout (a variant's options change the scheme's kind in none)
            layout = {"ffn": row.ffn, "ffn_dt": row.ffn_dt, "memory": row.memory, "options": dict(row.options)}
            return replace(Solver.for_stepper(row.scheme, value), equation=f"{value}: {row.update}", **layout)
        if row is not None:
            return Solver.for_stepper(row, value)
        if value in CONTINUOUS:
            return ContinuousSolver(name=value, **CONTINUOUS[value])
        if "." in value:
            cls = import_stepper(value)
            name = STEPPERS.name_of(cls)
            if name is not None:
                raise ValueError(
                    f"{cls.__name__} is registered as the solver {name!r}: pick it by its name, solver={name} (one "
                    "spelling per scheme)."
                )
            return Solver.for_stepper(cls)
    close = difflib.get_close_matches(str(value), solver_names(), n=1)
    nearest = f" (did you mean {close[0]!r}?)" if close else ""
    raise ValueError(f"unknown solver {value!r}{nearest}; choose one of {', '.join(solver_names())}, or module.Class.")


def solver(
    name: str | type,
    dt: float | None = None,
    form: str | None = None,
    splitting: str | None = None,
    options: dict[str, Any] | None = None,
    ffn: str | None = None,
    ffn_dt: float | None = None,
) -> Solver:
    """The :class:`Solver` named ``name`` (a name, ``"module.Class"`` or a stepper class) with its step, attention form,
    splitting, FFN scheme or stepper options changed (what a config builds). Each change is checked against what the
    layer uses: a splitting or FFN scheme for a whole-block scheme, a named tableau given as coefficients' options, an
    unknown name, a non-positive ``dt``, an option the stepper does not take are one-line errors (option values are
    checked when a layer builds the stepper). A registered scheme is picked by its name: ``solver="forest_ruth"``."""
    chosen = as_solver(name)
    if isinstance(chosen, ContinuousSolver):
        raise ValueError(f"{name!r} is a continuous-depth solver; it takes the continuous solver's options.")
    options = dict(options or {})
    if chosen.stepper is solvers.Tableau:
        if "name" in options:
            raise ValueError(
                f"a named scheme is picked by its name: solver={options['name']} (the tableau solver takes "
                "coefficients with no name: A, b, c, bbar, drifts, kicks)."
            )
        given = {key: value for key, value in {**chosen.options, **options}.items() if value is not None}
        claims = make_stepper(solvers.Tableau, given, None).claims()
        said = ", ".join(f"{key} {getattr(claims, key)}" for key in ("order", "evals_per_step", "symplectic"))
        derived = Solver.for_stepper(solvers.Tableau, chosen.name, given)
        chosen, options = replace(derived, equation=f"Tableau ({said}): {derived.equation}"), {}
    if chosen.block_stepper is Whole:
        for label, value in (("splitting", splitting), ("ffn", ffn), ("ffn_dt", ffn_dt)):
            if value is not None:
                raise ValueError(
                    f"solver {chosen.name} takes the whole block as its field, so {label} does not apply; use a "
                    "split scheme (e.g. full_wave, diffusion) to choose it."
                )
    options = {**chosen.options, **options}
    check_options(chosen.stepper, options)  # their values are checked when a layer builds the stepper
    changes = {"dt": dt, "form": form, "splitting": splitting, "ffn": ffn, "ffn_dt": ffn_dt}
    return replace(chosen, options=options, **{k: v for k, v in changes.items() if v is not None})
