"""The controls a comparison puts on its rows, so that a difference between two rows is their schemes': baselines
matched to a scheme's parameter count, and each row at its own best learning rate from a small grid.

Both are pure: the width search takes the count as a function (:func:`odeformer.app.run.builder.parameter_count` of
the config at a width, in a sweep's worker), the learning-rate choice the summaries of the grid's runs. Without torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ..reporting.comparison import HIGHER_IS_BETTER

MAX_WIDTH = 1 << 20
"""The widest a matched row may be made (its FFN's hidden units, or its ``model.dim``)."""


def width_key(model: dict[str, Any]) -> tuple[str, int, int]:
    """Where a row is widened to match a parameter count, as ``(key, step, width now)``: the FFN's hidden width
    (``model.mlp_hidden``, in steps of 1: the attention heads stay as they are) where the model has an FFN, else the
    state's width ``model.dim`` in steps of ``model.heads`` (so that every head keeps a whole share)."""
    if "mlp_hidden" in model:
        now = model.get("mlp_hidden") or max(1, int(model.get("mlp_ratio", 4.0) * model["dim"]))
        return "mlp_hidden", 1, int(now)
    step = int(model.get("heads") or 1)
    return "dim", step, int(model["dim"])


def nearest_width(
    count: Callable[[int], int], target: int, start: int, step: int = 1, limit: int = MAX_WIDTH
) -> tuple[int, int]:
    """The width, a multiple of ``step`` from ``step`` to ``limit``, whose ``count`` (a parameter count that does not
    fall as the width grows) is nearest ``target``, and that count; of widths as near, the one nearest ``start`` (a
    count the width does not change keeps the width), then the wider. The search starts at ``start`` and steps by the
    secant through the counts it has seen (exact at the second count for a count linear in the width, as an FFN's
    is), kept inside the bracket it has found; it asks for each width once."""
    seen: dict[int, int] = {}

    def at(units: int) -> int:
        if units not in seen:
            seen[units] = count(units * step)
        return seen[units]

    top = max(1, limit // step)
    below = above = None  # the widest with a count at most target, the narrowest with a count at least target
    units = first = min(top, max(1, round(start / step)))
    for _ in range(200):
        value = at(units)
        if value <= target:
            below = units if below is None else max(below, units)
        if value >= target:
            above = units if above is None else min(above, units)
        if value == target or (below is not None and above is not None and above - below <= 1):
            break
        if (below == top and above is None) or (above == 1 and below is None):
            break  # the count cannot reach the target within the widths allowed
        others = [u for u in seen if u != units]
        near = min(others, key=lambda u: abs(u - units)) if others else None
        slope = (value - seen[near]) / (units - near) if near is not None else 0.0
        if slope > 0:
            guess = units + round((target - value) / slope)
        else:  # no slope known yet (or a flat stretch): one step, then doubling, towards the target
            guess = units + (1 if near is None else 2 * abs(units - near)) * (1 if value < target else -1)
        low = below + 1 if below is not None else 1
        high = above - 1 if above is not None else top
        units = min(high, max(low, guess))
    best = min(seen, key=lambda u: (abs(seen[u] - target), abs(u - first), -u))  # the bracket's ends among them
    toward = -1 if best > first else 1
    if best != first and at(best + toward) == seen[best]:  # a flat stretch: its end nearest the start, by bisection
        near, far = first, best  # the count at far is the best's, at near (the start) another
        while abs(far - near) > 1:
            middle = (near + far) // 2
            near, far = (near, middle) if at(middle) == seen[best] else (middle, far)
        best = far
    return best * step, seen[best]


def grid_depth(model: dict[str, Any], lr_depth: int | None) -> tuple[int, str]:
    """The depth a row's learning-rate grid runs at, and why: under ``model.parameterization=ode`` the smaller of
    ``lr_depth`` (when given) and the row's depth, never below its ``model.knots`` (the learning rate found there
    carries over to the row's depth); under ``standard`` the row's own depth (a learning rate does not carry across
    depth there)."""
    depth = int(model["depth"])
    if lr_depth is None or lr_depth >= depth:
        return depth, "its own depth"
    kind = model.get("parameterization", "standard")
    if kind != "ode":
        return depth, f"its own depth (under {kind} an lr does not carry across depth)"
    shallow = max(lr_depth, int(model.get("knots") or 1))
    if shallow >= depth:
        return depth, "its own depth"
    return shallow, f"depth {shallow}, carried over to {depth} (ode)"


def best_rate(rates: list[float], summaries: list[dict[str, Any]]) -> float | None:
    """Of a grid's learning ``rates`` (in order, one finished run's ``summary.json`` each), the one whose run had the
    best validation metric (``val``; which way is better by its ``metric``); of two as good, the first. None if no
    run finished with a finite validation metric."""
    best = None
    for rate_, summary in zip(rates, summaries):
        value = summary.get("val")
        finished = summary.get("status") == "completed" and isinstance(value, (int, float)) and math.isfinite(value)
        if not finished:
            continue
        score = value if HIGHER_IS_BETTER.get(summary.get("metric"), True) else -value
        if best is None or score > best[0]:
            best = (score, rate_)
    return None if best is None else best[1]


def rate(base: float, factor: float) -> float:
    """``base · factor`` as the learning rate a run is given, to 12 significant digits (so that ``1e-3 · 3`` reads
    ``0.003`` in a run's overrides and folder name)."""
    return float(f"{base * factor:.12g}")
