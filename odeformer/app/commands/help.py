"""What ``odeformer-train --help`` shows beyond Hydra's groups and config: every solver's ``solver.options``.

The solver group's options are generated from the one table of solvers (:func:`odeformer.app.run.config.group_options`,
read from the table of :func:`odeformer.app.run.groups.groups`),
each with the constructor arguments of its stepper and the solver's defaults; ``--help`` shows the chosen solver's
node only, so this lists them all, one line per solver.
"""

from __future__ import annotations

from typing import Any


def _shown(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_shown(v) for v in value) + "]"
    return str(value)


def solver_options_text() -> str:
    """One line per solver: ``name: key=default, ...`` (``(none)`` for a solver that takes no option; a continuous
    solver's settings, which are keys of the solver node itself, as ``solver.key=default``)."""
    from dataclasses import asdict, is_dataclass

    from ..run.config import ContinuousSolverConfig
    from ..run.groups import groups

    lines = ["== Solver options (solver.options.<key>=value; a scheme of your own: +solver.options.<key>=value) =="]
    for name, node in sorted(groups()["solver"].items()):
        fields = asdict(node) if is_dataclass(node) else dict(node)
        options = fields.get("options") or {}
        extra = {k: v for k, v in fields.items() if k not in ("name", "options", "_target_") and v is not None}
        shown = [f"{key}={_shown(value)}" for key, value in options.items()]
        if not options and isinstance(node, ContinuousSolverConfig):  # its settings are solver keys of their own
            shown = [f"solver.{k}={_shown(v)}" for k, v in extra.items() if k not in ("library", "method")]
        lines.append(f"{name}: {', '.join(shown) if shown else '(none)'}")
    return "\n".join(lines)
