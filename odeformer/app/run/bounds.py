"""Bounds on a config's sizes and cost, checked without torch: by ``odeformer-train`` on its command line before
anything starts, and by the builder (:func:`odeformer.app.run.builder.build`) for every config, a config read from a
file included (``source``, named in the error). A file does not set what a command costs."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from .config import UsageError


def source_prefix(source: Path | None) -> str:
    """``"<file>: "`` for a config read from a file (what an error names first), else nothing."""
    return f"{source}: " if source is not None else ""


_from = source_prefix

POSITIVE = ("depth", "dim", "heads", "mlp_hidden", "max_len", "patch_size")


def check_sizes(config: dict[str, Any], source: Path | None = None) -> None:
    """Every size of the model and the batch a positive int (``model.mlp_hidden`` may be null)."""
    model, data = config["model"], config["data"]
    checks = [(f"model.{key}", model[key]) for key in POSITIVE if key in model and model[key] is not None]
    checks.append(("data.batch_size", data.get("batch_size", 1)))
    for key, value in checks:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UsageError(f"{_from(source)}{key} must be a positive int, got {value!r}.")
    ratio = model.get("mlp_ratio")
    if (
        model.get("mlp_hidden") is None
        and ratio is not None
        and not (isinstance(ratio, (int, float)) and math.isfinite(ratio) and int(ratio * model["dim"]) >= 1)
    ):
        raise UsageError(
            f"{_from(source)}model.mlp_ratio={ratio!r} gives an FFN of {ratio!r} x {model['dim']} hidden units; it "
            "must give at least 1."
        )


MAX_DEPTH = 100_000
"""The most layers a model may have: a bound on the time a forward pass takes, which the memory estimate does not see
(tied weights with activation checkpointing need little memory at any depth)."""
MAX_LEN = 1_000_000
"""The longest context ``model.max_len`` may ask for (its position table is allocated whole)."""
MAX_STAGES = 64
"""The most stages a scheme given by coefficients may have (``solver.options`` ``A``, ``b``, ``drifts``, ...)."""


def check_cost(config: dict[str, Any], source: Path | None = None) -> None:
    """Bounds on what the memory estimate does not measure, the same for a command line and for a config read from a
    file (``source``): the depth (:data:`MAX_DEPTH`), the context (:data:`MAX_LEN`) and a coefficient scheme's stages
    (:data:`MAX_STAGES`). A file does not set what a command costs."""
    model = config["model"]
    for key, bound in (("depth", MAX_DEPTH), ("max_len", MAX_LEN)):
        value = model.get(key)
        if isinstance(value, int) and value > bound:
            raise UsageError(f"{_from(source)}model.{key}={value} is more than the {bound} allowed.")
    check_stages(config, source)


def check_stages(config: dict[str, Any], source: Path | None = None) -> None:
    """A scheme given by coefficients has at most :data:`MAX_STAGES` stages (checked before it is built: deriving
    its claims costs time with every stage)."""
    options = (config.get("solver") or {}).get("options") or {}
    if isinstance(options, dict):
        for key in ("A", "b", "c", "bbar", "drifts", "kicks"):
            value = options.get(key)
            if isinstance(value, (list, tuple)) and len(value) > MAX_STAGES:
                raise UsageError(
                    f"{_from(source)}solver.options.{key} has {len(value)} stages, more than the {MAX_STAGES} allowed."
                )
