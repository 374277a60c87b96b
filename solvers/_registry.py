"""The one table of names: ``STEPPERS`` maps a name to a stepper class, or to a :class:`Variant` row.

A scheme registers beside its definition with ``@register_stepper("name")``; a name means one thing, and registering
a taken name for another class is a one-line error. A *variant* row names a layer that is more than its scheme's
claims give (the official code's unit FFN step, a backward pass that rebuilds states) or a second name a layer is
known by (``diffusion`` for ``euler``'s layer, ``full_wave`` for ``semi_implicit_euler``'s): a registered scheme with
options and a layout of its own (``solvers/_variants.py``). The names ``solver=`` accepts on odeformer's command line
are these and the continuous-depth solvers'."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ._base import AbstractStepper, Claims

S = TypeVar("S", bound=type[AbstractStepper])

MEMORY = ("store", "rebuild")


@dataclass(frozen=True)
class Variant:
    """A row of :data:`STEPPERS` that is a registered scheme with ``options`` and a layout of its own: the FFN
    sub-step's scheme (``ffn``, a registered name) and fixed step (``ffn_dt``; ``None``: the layer's), and the
    backward pass (``memory="rebuild"``: states rebuilt by inverting every layer instead of stored). ``update`` says
    what the layer does, in one line of Markdown. Calling it makes the scheme with its options (``STEPPERS["mix"]()``),
    so ``Claims.of`` reads a row of either kind."""

    scheme: type[AbstractStepper]
    update: str
    options: Mapping[str, Any] = field(default_factory=dict)
    ffn: str | None = None
    ffn_dt: float | None = None
    memory: str = "store"

    def __post_init__(self) -> None:
        if not (isinstance(self.scheme, type) and issubclass(self.scheme, AbstractStepper)):
            raise TypeError(f"a variant's scheme is a solvers.AbstractStepper subclass, got {self.scheme!r}.")
        if self.memory not in MEMORY:
            raise ValueError(f"memory must be one of {', '.join(MEMORY)}; got {self.memory!r}.")

    def __call__(self, **options: Any) -> AbstractStepper:
        return self.scheme(**{**self.options, **options})

    def claims(self) -> Claims:
        """What the scheme made with the row's options claims (the layer may claim less: a unit FFN step, order 0)."""
        return self().claims()


class Registry(dict):
    """``name -> stepper class | Variant``; a name is registered once (the same row again is no change), and a
    variant's scheme must be registered first. Names another table of solvers holds (odeformer's continuous-depth
    solvers) are :meth:`reserve` d: a row under one of them is refused."""

    def __init__(self) -> None:
        super().__init__()
        self.reserved: dict[str, str] = {}

    def reserve(self, names: Any, owner: str) -> None:
        """Refuse a row under any of ``names`` from now on: ``owner`` (e.g. "a continuous-depth solver") holds them."""
        for name in names:
            if name in self:
                raise ValueError(f"{name!r} is already a registered stepper's name; {owner} cannot take it.")
            self.reserved[name] = owner

    def __setitem__(self, name: str, row: type[AbstractStepper] | Variant) -> None:
        if not (isinstance(name, str) and name.isidentifier()):
            raise ValueError(f"a stepper's name is a Python identifier (a config value), got {name!r}.")
        if name in self.reserved:
            owner = self.reserved[name]
            raise ValueError(f"stepper name {name!r} is taken by {owner}; register it under another name.")
        if isinstance(row, Variant):
            if row.scheme not in self.schemes().values():
                raise ValueError(f"variant {name!r}: its scheme {row.scheme.__name__} is not registered.")
        elif not (isinstance(row, type) and issubclass(row, AbstractStepper)):
            raise TypeError(f"STEPPERS[{name!r}] must be a solvers.AbstractStepper subclass or a Variant, got {row!r}.")
        if name in self and self[name] != row:
            raise ValueError(f"stepper name {name!r} is taken by {_label(self[name])}; register {_label(row)} under "
                             "another name.")  # fmt: skip
        super().__setitem__(name, row)

    def variants(self) -> dict[str, Variant]:
        """The variant rows, by name."""
        return {name: row for name, row in self.items() if isinstance(row, Variant)}

    def schemes(self) -> dict[str, type[AbstractStepper]]:
        """The rows that are schemes (classes), by name: each scheme once, without the variant rows."""
        return {name: row for name, row in self.items() if not isinstance(row, Variant)}

    def scheme(self, name: str) -> type[AbstractStepper]:
        """The scheme a row steps with: the class itself, or a variant's scheme."""
        row = self[name]
        return row.scheme if isinstance(row, Variant) else row

    def name_of(self, cls: type) -> str | None:
        """The name a scheme is registered under (``None`` for a class of one's own)."""
        return next((name for name, row in self.schemes().items() if row is cls), None)

    def update(self, *args: Any, **kwargs: Any) -> None:
        for name, cls in dict(*args, **kwargs).items():
            self[name] = cls

    def setdefault(self, name: str, cls: Any = None) -> Any:
        if name not in self:
            self[name] = cls
        return self[name]


def stepper_parameters(cls: type) -> dict[str, inspect.Parameter]:
    """The constructor's keyword parameters of a stepper class (what ``options`` may set; ``dim``, a per-channel
    scheme's width, is given by the model)."""
    return {
        key: p
        for key, p in inspect.signature(cls).parameters.items()
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)  # nn.Module's (*args, **kwargs): no options
    }


def check_options(cls: type[AbstractStepper], options: dict[str, Any]) -> dict[str, inspect.Parameter]:
    """The constructor parameters of ``cls`` if it takes every one of ``options``, else a one-line error naming the
    options it accepts (``dim`` is the model's width, never an option)."""
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
    return parameters


def make_stepper(cls: type[AbstractStepper], options: dict[str, Any], dim: int | None) -> AbstractStepper:
    """``cls(**options)`` (with ``dim`` if it takes one; a registry name where it takes a stepper), or a one-line
    error naming the options it accepts."""
    parameters = check_options(cls, options)
    kwargs = {
        key: (make_stepper(STEPPERS[value], {}, None) if _takes_stepper(parameters[key], value) else value)
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
    if value not in STEPPERS.schemes():
        raise ValueError(
            f"unknown stepper {value!r} for {parameter.name}; choose one of {', '.join(STEPPERS.schemes())}."
        )
    return True


def _label(row: Any) -> str:
    return f"a variant of {row.scheme.__name__}" if isinstance(row, Variant) else row.__name__


STEPPERS: Registry = Registry()
"""Every name of a scheme or a variant row: the ``solver`` config group, ``solver.ffn`` and
``odeformer.solver_names()`` read it."""

UPDATES: dict[str, str] = {}
"""A registered scheme's update in one line of Markdown, by name (its row of :func:`stepper_table`)."""


def register_stepper(name: str, update: str = "") -> Callable[[S], S]:
    """A class decorator: register the stepper class under ``name`` in :data:`STEPPERS`; ``update`` describes its
    step in one line of Markdown (default: the first line of the class's docstring)."""

    def registered(cls: S) -> S:
        STEPPERS[name] = cls
        if update:
            UPDATES[name] = update
        return cls

    return registered


def stepper_table() -> str:
    """The table in ``docs/schemes.md`` of registered schemes (the variant rows aside), generated from
    :data:`STEPPERS`: each one's update and what it claims (order, evaluations per step, symplectic, reversible);
    first-order schemes, then second-order ones, each by name."""
    rows = ["| stepper | update | order | evals/step | symplectic | reversible |", "|---|---|---|---|---|---|"]
    schemes = STEPPERS.schemes()
    claims = {name: Claims.of(cls) for name, cls in schemes.items()}
    for name, cls in sorted(schemes.items(), key=lambda item: (claims[item[0]].second_order, item[0])):
        c = claims[name]
        update = UPDATES.get(name) or (cls.__doc__ or "").strip().split("\n")[0]
        evals = f"{c.evals_per_step}" + (f" ({c.evals_per_step - 1} when the field repeats)" if c.fsal else "")
        reversible = ("yes (symmetric)" if c.symmetric else "yes (explicit inverse)") if c.reversible else ""
        symplectic = "yes" if c.symplectic else ""
        rows.append(f"| `{name}` | {update} | {c.order} | {evals} | {symplectic} | {reversible} |")
    return "\n".join(rows)
