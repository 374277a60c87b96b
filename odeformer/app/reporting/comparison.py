"""What ``odeformer-compare`` shows: the comparison's table (one row per scheme) and, after it, one line per row
saying whether its difference from the reference row exceeds the spread of the seeds.

The spread is Welch's: the difference of the two rows' means over the standard error pooled from both rows' seeds,
``SE = sqrt(s₁²/n₁ + s₂²/n₂)``, read against Student's t (:func:`t_needed`) at the Welch–Satterthwaite degrees of
freedom ``(s₁²/n₁ + s₂²/n₂)² / ((s₁²/n₁)²/(n₁−1) + (s₂²/n₂)²/(n₂−1))``, two-sided at 95 %. With 3
seeds a row the threshold is near 2.8 SE, not 2: few seeds say little, and the line says how much would be needed. A
row with one seed has no spread to read, and the line says so.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

HIGHER_IS_BETTER = {"accuracy": True, "loss": False}
"""Which way each metric a run reports is better (accuracy: higher; a loss in nats: lower): the one table, torch-free,
that the objectives' own ``higher_is_better`` agree with (tests/app/test_depth_transfer.py)."""
LEVEL = 0.95
"""The two-sided level at which a difference is said to exceed the seed spread."""


def seed_spread(reference: list[float], row: list[float]) -> dict[str, Any] | None:
    """``row``'s test metrics (one per seed) against ``reference``'s: the ``difference`` of their means, its pooled
    standard error ``se`` (Welch), ``z`` (the difference in units of ``se``), the Welch–Satterthwaite ``df``, the
    ``needed`` ``|z|`` (Student's t at ``df``, two-sided :data:`LEVEL`) and the ``verdict``: ``"within"`` the seed
    spread, ``"exceeds"`` it, or ``"no spread"`` (a row with one seed). None if either has no finished seed. Seeds
    that agree exactly (``se = 0``) are within it if the means are equal, else exceed it."""
    if not reference or not row:
        return None
    difference = statistics.fmean(row) - statistics.fmean(reference)
    out: dict[str, Any] = {"difference": difference, "seeds": [len(reference), len(row)]}
    if len(reference) < 2 or len(row) < 2:
        return out | {"se": None, "z": None, "df": None, "needed": None, "verdict": "no spread"}
    a, b = statistics.variance(reference) / len(reference), statistics.variance(row) / len(row)
    se = math.sqrt(a + b)
    if se == 0:
        return out | {
            "se": 0.0,
            "z": None,
            "df": None,
            "needed": None,
            "verdict": "within" if difference == 0 else "exceeds",
        }
    df = (a + b) ** 2 / (a**2 / (len(reference) - 1) + b**2 / (len(row) - 1))
    needed = t_needed(df)
    z = difference / se
    return out | {"se": se, "z": z, "df": df, "needed": needed, "verdict": "exceeds" if abs(z) > needed else "within"}


def t_needed(df: float, level: float = LEVEL) -> float:
    """The ``|t|`` Student's t with ``df`` degrees of freedom (a real number ≥ 1, as Welch's are) exceeds with
    probability ``1 − level``: its two-sided ``level`` quantile (``t_needed(4) ≈ 2.776`` at 95 %), by bisection on
    the tail ``P(|T| > t) = I_{df/(df+t²)}(df/2, 1/2)``, the regularized incomplete beta function."""
    low, high = 0.0, 1e4  # the tail at 1e4 is below 1e-4 for df ≥ 1
    while high - low > 1e-12 * max(1.0, high):
        middle = (low + high) / 2
        low, high = (
            (middle, high) if _incomplete_beta(df / 2, 0.5, df / (df + middle**2)) > 1 - level else (low, middle)
        )
    return (low + high) / 2


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function ``I_x(a, b)``, by its continued fraction (Lentz's method), taken on
    the side of ``x`` where it converges fast."""
    if x <= 0 or x >= 1:
        return 0.0 if x <= 0 else 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return front * _beta_fraction(a, b, x) / a
    return 1 - front * _beta_fraction(b, a, 1 - x) / b


def _beta_fraction(a: float, b: float, x: float) -> float:
    tiny = 1e-300

    def kept(value: float) -> float:
        return tiny if abs(value) < tiny else value

    c, d = 1.0, 1 / kept(1 - (a + b) * x / (a + 1))
    fraction = d
    for m in range(1, 1000):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d, c = 1 / kept(1 + numerator * d), kept(1 + numerator / c)
            fraction *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return fraction


def _units(metric: str) -> tuple[float, str, int]:
    """How a metric's differences are shown: its scale, unit and decimals (accuracy in points, a loss in nats)."""
    return (100.0, "points", 2) if metric == "accuracy" else (1.0, "nats" if metric == "loss" else metric, 4)


def spread_line(label: str, reference: str, metric: str, spread: dict[str, Any] | None) -> str:
    """One row's line after the table: its difference from ``reference`` and whether it exceeds the seed spread
    (:func:`seed_spread`), in words."""
    head = f"`{label}` against `{reference}`"
    if spread is None:
        return f"{head}: no finished run to compare."
    scale, unit, places = _units(metric)
    shown = f"{spread['difference'] * scale:+.{places}f} {unit}"
    if spread["verdict"] == "no spread":
        return f"{head}: {shown}; one seed: no spread can be read (give --seeds 2 or more)."
    better = spread["difference"] > 0 if HIGHER_IS_BETTER.get(metric, True) else spread["difference"] < 0
    side = "better" if better else "worse"
    if spread["se"] == 0:
        if spread["verdict"] == "within":
            return f"{head}: {shown}; the seeds agree exactly: within the seed spread (no difference)."
        return f"{head}: {shown}; the seeds agree exactly, so any difference exceeds it: exceeds it ({side})."
    pooled = f"{shown} over a pooled standard error of {spread['se'] * scale:.{places}f}"
    needed = f"{spread['needed']:.1f} SE needed at {spread['df']:.1f} Welch degrees of freedom, {LEVEL:.0%} two-sided"
    if spread["verdict"] == "exceeds":
        return f"{head}: {pooled}: exceeds it: {spread['z']:+.1f} SE ({side}; {needed})."
    return f"{head}: {pooled}: within the seed spread ({spread['z']:+.1f} SE; {needed})."


def _lr_cell(row: dict[str, Any]) -> str:
    chosen = row.get("lr_grid")
    lr = f"{row['lr']:g}" if isinstance(row.get("lr"), (int, float)) else "–"
    if not chosen:
        return lr
    if chosen["factor"] is None:
        return f"{lr} (no grid run finished)"
    return f"{lr} (×{chosen['factor']:g} at {chosen['where']})"


def _params_cell(row: dict[str, Any]) -> str:
    params = f"{row['params']}" if row.get("params") else "–"
    matched = row.get("match")
    if not matched:
        return params
    return f"{params} (model.{matched['key']} {matched['from']} → {matched['width']})"


def comparison_markdown(comparison: dict[str, Any]) -> str:
    """The comparison's table: one row per scheme, the test metric's mean ± std over the seeds, its budget, step
    cost against the reference, parameter count (and the width it was matched at) and learning rate (and where it
    was chosen); then what the budget, the matching and the grid held equal; then, per row after the reference, its
    difference from the reference against the seed spread (:func:`spread_line`)."""
    metric = comparison["metric"] or "metric"
    percent = metric == "accuracy"
    scale = 100 if percent else 1
    unit = " (%)" if percent else ""
    reference = comparison["reference"]
    lines = [
        f"| solver | test {metric}{unit} | seeds | steps | evals/token per step | evals/token in all | "
        f"step cost vs {reference} | params | lr |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in comparison["rows"]:
        if row["mean"] is None:
            shown = "failed"
        else:
            shown = f"{row['mean'] * scale:.2f}"
            if row["std"] is not None:
                shown += f" ± {row['std'] * scale:.2f}"
            if row["failed"]:
                shown += f" ({len(row['failed'])} failed)"
        budget = row["budget"]
        cost = "–" if row["step_cost"] is None else f"{row['step_cost']:.2f}"
        per_step = budget["evals_per_token_per_step"]
        total = budget["evals_per_token"]
        lines.append(
            f"| `{row['solver']}` | {shown} | {len(row['tests'])} | {budget['steps']} | "
            f"{'–' if per_step is None else f'{per_step:g}'}"
            f"{' (measured)' if budget['evaluations_source'] == 'measured' else ''} | "
            f"{'–' if total is None else f'{total:g}'} | {cost} | {_params_cell(row)} | {_lr_cell(row)} |"
        )
    held = {
        "steps": f"every row trains {comparison['reference_steps']} steps",
        "evals": f"every row gets the field evaluations per token of `{reference}`'s {comparison['reference_steps']} "
        "steps",
        "time": f"every row gets the training time of `{reference}`'s {comparison['reference_steps']} steps, by its "
        "step cost measured side by side",
    }[comparison["budget"]]
    caption = (
        f"\n{comparison['experiment']}: test {metric}, mean ± std over {comparison['seeds']} seeds; budget "
        f"`{comparison['budget']}`: {held}. Step cost: a training step's time over `{reference}`'s, measured side "
        "by side in one process."
    )
    matched = comparison.get("match")
    if matched:
        caption += (
            f" Parameters matched (`--match params`): each baseline widened (or narrowed) to the count nearest "
            f"`{matched['scheme']}`'s {matched['target']} that a whole width reaches, counted on models built without "
            "weights."
        )
    grid = comparison.get("lr_grid")
    if grid:
        factors = " ".join(f"{f:g}" for f in grid["factors"])
        caption += (
            f" Learning rate: each row's best of train.lr × ({factors}) by the validation {metric} of one seed "
            "(seed 0) at the depth shown, then its seeds at that rate; under `ode` a rate found at a smaller depth is "
            "carried over."
        )
    spread = [
        f"- {spread_line(row['solver'], reference, metric, row.get('against_reference'))}"
        for row in comparison["rows"]
        if row["solver"] != reference
    ]
    return "\n".join(lines) + "\n" + caption + "\n\n" + "\n".join(spread) + "\n"
