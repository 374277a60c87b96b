"""Configs and command lines written by earlier versions, read as today's: every rename is one entry of
:data:`RENAMED`, every setting added since one of :data:`ADDED`.

A run directory keeps the config its checkpoints were trained with and the overrides that made it. When a name
changes, saved runs must keep loading, resuming and comparing equal to what their overrides make now, so
:func:`upgrade_config` and :func:`upgrade_overrides` read the old names as today's, warning once per kind. Besides the
renames, two spellings became one: ``solver=tableau solver.options.name=X`` is ``solver=X`` (``tableau`` takes
coefficients with no name), and ``solver.stepper=solvers.C`` for a class registered as ``n`` is ``solver=n`` (read
from the ``solvers`` package's own names: nothing is imported because a file says so), any other
``solver.stepper=module.Class`` ``solver=module.Class``.
"""

from __future__ import annotations

import copy
import warnings
from typing import Any

from .config import CONTINUOUS_TARGET, SOLVER_TARGET, stepper_options

RENAMED = {
    "odeformer.preset": SOLVER_TARGET,  # solver._target_: the function's new name
    "symplectic_euler": "semi_implicit_euler",  # a named scheme
    "dynamics": "equation",  # a continuous solver's key
}
"""Every old name (a target, a scheme's, a key's) and today's."""

ADDED = {
    "model.parameterization": "standard",
    "model.time": None,
    "model.knots": None,
    "train.resolutions": [1.0],
    "train.check_scheme": False,
}
"""Settings added since runs were first saved, each with the value that is what a run without it did."""

_warned: set[str] = set()


def _warn(kind: str, message: str) -> None:
    if kind not in _warned:
        _warned.add(kind)
        warnings.warn(message, DeprecationWarning, stacklevel=3)


def registered_name(path: Any) -> str | None:
    """The solver name of ``solvers.Class`` when that class is a registered scheme (``None`` otherwise); only the
    ``solvers`` package's own names are read, nothing is imported."""
    if not isinstance(path, str) or not path.startswith("solvers.") or path.count(".") != 1:
        return None
    import solvers

    cls = vars(solvers).get(path.split(".", 1)[1])  # not getattr: the package loads some modules when asked
    return solvers.STEPPERS.name_of(cls) if isinstance(cls, type) else None


def upgrade_solver(node: dict[str, Any]) -> dict[str, Any]:
    """A solver config node as today's (a copy): old target, a named tableau, a registered class by path."""
    node = copy.deepcopy(node)
    target = node.get("_target_")
    if target in RENAMED:
        _warn("target", f"a saved solver._target_={target!r} is read as {RENAMED[target]!r}")
        node["_target_"] = target = RENAMED[target]
    if target == CONTINUOUS_TARGET:
        for old in [key for key in node if key in RENAMED]:
            _warn(old, f"a saved solver.{old} is read as solver.{RENAMED[old]}")
            node[RENAMED[old]] = node.pop(old)
        return node
    options = node.get("options")
    named = options.pop("name", None) if node.get("name") == "tableau" and isinstance(options, dict) else None
    if named is not None:
        _warn("tableau", f"a saved solver=tableau solver.options.name={named} is read as solver={named}")
        node["name"] = RENAMED.get(named, named)
        node["options"] = {k: v for k, v in options.items() if v is not None}
    path = node.pop("stepper", None)
    name = registered_name(path)
    if name is not None:
        _warn("stepper", f"a saved solver.stepper={path} is read as solver={name}")
        node["name"] = name
        node["options"] = {**stepper_options(name), **(node.get("options") or {})}  # what solver=<name> fills in
    elif path is not None:  # stored under a registered solver's name, which filled in that solver's options
        from ...registry import solver_names

        _warn("own", f"a saved solver.stepper={path} is read as solver={path}")
        filled = stepper_options(node["name"]) if node.get("name") in solver_names("discrete") else {}
        node["name"] = path
        node["options"] = {k: v for k, v in (node.get("options") or {}).items() if filled.get(k, ...) != v}
    return node


def with_added(stored: Any, config: dict[str, Any]) -> Any:
    """``stored`` (a run's config, already :func:`upgrade_config` d) with each :data:`ADDED` setting it lacks and
    ``config`` (this command's) has set to the value a run without it had: a run saved before the setting existed
    resumes as the run it was."""
    if not isinstance(stored, dict):
        return stored
    out = dict(stored)
    for key, value in ADDED.items():
        group, name = key.split(".")
        node, now = out.get(group), config.get(group)
        if isinstance(node, dict) and isinstance(now, dict) and name in now and name not in node:
            out[group] = {**node, name: value}
    return out


def upgrade_config(config: Any) -> Any:
    """A resolved run config as today's (a copy; anything that is not a config is returned as it is)."""
    if not isinstance(config, dict) or not isinstance(config.get("solver"), dict):
        return config
    return {**config, "solver": upgrade_solver(config["solver"])}


def upgrade_overrides(overrides: list[str]) -> list[str]:
    """Command-line overrides as today's spelling (the same run): ``solver=tableau solver.options.name=X`` as
    ``solver=X``, a registered ``solver.stepper=solvers.C`` as ``solver=<its name>`` and any other
    ``solver.stepper=module.Class`` as ``solver=module.Class``, ``solver.dynamics`` as ``solver.equation``."""
    out = list(overrides)

    def value(key: str) -> tuple[int, str] | None:
        found = (i for i, item in enumerate(out) if "=" in item and item.split("=", 1)[0].lstrip("+~") == key)
        i = next(found, None)
        return None if i is None else (i, out[i].split("=", 1)[1])

    def set_solver(name: str) -> None:
        found = value("solver")
        if found is None:
            out.append(f"solver={name}")
        else:
            out[found[0]] = f"solver={name}"

    named, chosen = value("solver.options.name"), value("solver")
    if named is not None and (chosen is None or chosen[1] == "tableau"):
        del out[named[0]]
        set_solver(RENAMED.get(named[1], named[1]))
    stepper = value("solver.stepper")
    if stepper is not None:
        del out[stepper[0]]
        set_solver(registered_name(stepper[1]) or stepper[1])
    for i, item in enumerate(out):  # a renamed key of the solver's
        key = item.partition("=")[0].lstrip("+~")
        if "=" in item and key.startswith("solver.") and key[7:] in RENAMED:
            out[i] = item.replace(key, f"solver.{RENAMED[key[7:]]}", 1)
    return out
