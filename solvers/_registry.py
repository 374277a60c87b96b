"""The registry of named schemes: ``STEPPERS`` maps a name to a stepper class, and a scheme registers beside its
definition with ``@register_stepper("name")``. A name means one thing: registering a taken name for another class is
a one-line error (odeformer's solver namespace builds on this one, so the same name cannot name a second scheme
there either)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ._base import AbstractStepper, Claims

S = TypeVar("S", bound=type[AbstractStepper])


class Registry(dict):
    """``name -> stepper class``; a name is registered once (the same class again is no change). A table built on
    this one (odeformer's solvers) :meth:`watch` es it: it is told of every new name as it is written, and may refuse
    it (the name is then not registered)."""

    def __init__(self) -> None:
        super().__init__()
        self._watchers: list[Callable[[str, type[AbstractStepper]], None]] = []

    def watch(self, watcher: Callable[[str, type[AbstractStepper]], None]) -> None:
        """Call ``watcher(name, cls)`` for every name registered from now on; an exception it raises refuses the
        name."""
        self._watchers.append(watcher)

    def __setitem__(self, name: str, cls: type[AbstractStepper]) -> None:
        if not (isinstance(name, str) and name.isidentifier()):
            raise ValueError(f"a stepper's name is a Python identifier (a config value), got {name!r}.")
        if not (isinstance(cls, type) and issubclass(cls, AbstractStepper)):
            raise TypeError(f"STEPPERS[{name!r}] must be a solvers.AbstractStepper subclass, got {cls!r}.")
        if name in self and self[name] is not cls:
            raise ValueError(
                f"stepper name {name!r} is taken by {self[name].__name__}; register {cls.__name__} under another name."
            )
        if name in self:
            return
        for watcher in self._watchers:
            watcher(name, cls)  # may refuse the name: nothing is written then
        super().__setitem__(name, cls)

    def update(self, *args: Any, **kwargs: Any) -> None:
        for name, cls in dict(*args, **kwargs).items():
            self[name] = cls

    def setdefault(self, name: str, cls: Any = None) -> Any:
        if name not in self:
            self[name] = cls
        return self[name]


STEPPERS: Registry = Registry()
"""Every registered scheme by name: the ``solver`` config group, ``solver.ffn`` and ``odeformer.solver_names()`` read
it."""

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
    """The README's table of registered schemes, generated from :data:`STEPPERS`: each one's update and what it
    claims (order, evaluations per step, symplectic, reversible); first-order schemes, then second-order ones, each
    by name."""
    rows = ["| stepper | update | order | evals/step | symplectic | reversible |", "|---|---|---|---|---|---|"]
    claims = {name: Claims.of(cls) for name, cls in STEPPERS.items()}
    for name, cls in sorted(STEPPERS.items(), key=lambda item: (claims[item[0]].second_order, item[0])):
        c = claims[name]
        update = UPDATES.get(name) or (cls.__doc__ or "").strip().split("\n")[0]
        evals = f"{c.evals_per_step}" + (f" ({c.evals_per_step - 1} when the field repeats)" if c.fsal else "")
        reversible = ("yes (symmetric)" if c.symmetric else "yes (explicit inverse)") if c.reversible else ""
        symplectic = "yes" if c.symplectic else ""
        rows.append(f"| `{name}` | {update} | {c.order} | {evals} | {symplectic} | {reversible} |")
    return "\n".join(rows)
