"""Labels for runs drawn side by side: what they differ in, never where they lie.

A figure with one curve per run reads best when each curve says what makes its run another: the solver and its
options first (``light_wave theta0=2``), then any other setting that differs between the runs (``depth=8``,
``dt=0.25``, ``data=cora``). Where they lie (``train.out_dir``), how they were started and the settings every run
shares are left out; runs whose configurations are the same are told apart by their folder's name.
"""

from __future__ import annotations

from typing import Any

LEFT_OUT = ("train.out_dir", "train.resume", "train.progress", "train.threads", "train.device", "data.root")
"""Where and how a run was started, not what it is."""


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """A nested config as ``{"group.key": value}`` (an empty mapping is a value of its own)."""
    if not isinstance(tree, dict):
        return {prefix.rstrip("."): tree} if prefix else {}
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            flat |= flatten(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _short(key: str) -> str:
    """A setting's name as a label shows it: a solver option by its own name, a group's key by its last part, a
    group's choice (``data.name``) by the group's."""
    if key.startswith("solver.options."):
        return key[len("solver.options.") :]
    group, _, rest = key.partition(".")
    if rest in ("name", "_target_"):
        return group
    return rest.rsplit(".", 1)[-1] if rest else key


def _value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def run_labels(configs: list[dict[str, Any] | None], names: list[str]) -> list[str]:
    """One label per run, from its resolved config (``solver``, ``model``, ``data``, ``train``; ``None`` where a run
    stores none) and its folder's ``names``: the solver's name and the options that differ between the runs, then
    the other settings that differ; runs still alike get their folder's name after it."""
    flats = [flatten(config or {}) for config in configs]
    keys = sorted({key for flat in flats for key in flat} - set(LEFT_OUT))
    differing = [key for key in keys if len({repr(flat.get(key)) for flat in flats}) > 1]
    solver_options = [k for k in differing if k.startswith("solver.options.")]
    solver_keys = [k for k in differing if k.startswith("solver.") and k not in solver_options and k != "solver.name"]
    others = [k for k in differing if not k.startswith("solver.")]
    labels = []
    for flat, name in zip(flats, names):
        parts = [str(flat.get("solver.name") or flat.get("solver") or name)]
        for key in [*solver_options, *solver_keys, *others]:
            if key not in flat:
                continue
            parts.append(f"{_short(key)}={_value(flat[key])}")
        labels.append(" ".join(parts))
    counts = {label: labels.count(label) for label in labels}
    return [f"{label} ({name})" if counts[label] > 1 else label for label, name in zip(labels, names)]
