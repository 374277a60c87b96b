"""The coefficients learnable schemes learned, layer by layer: read from trained models, as a table and a plot.

A learnable family (a splitting's drift ``λ``, a two-stage Runge–Kutta's ``c₂ = α``) is read from the scheme's own
property, so the mapping from the unconstrained parameter is the scheme's, not copied here; the table puts each
layer's mean beside the nearest of the known members the section names.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .plots import coefficient_plot, depth

COEFFICIENTS = ("lam", "alpha")  # what a learnable scheme calls its coefficient: a splitting's drift λ, c₂ = α


def coefficients(model: Any) -> list[tuple[str, list[float]]]:
    """Each layer's learnable integrator coefficient, ``(name, values)`` (one value, or one per channel), in layer
    order: read from the scheme's own method (``lam()``: ``λ``, ``alpha()``: ``α``), so the mapping from the
    unconstrained parameter is the scheme's, not copied here. Layers without a learnable one are left out."""
    import solvers

    out = []
    for layer in model.backbone.layers:
        for module in layer.modules():
            name = next(
                (n for n in COEFFICIENTS if isinstance(module, solvers.AbstractStepper) and hasattr(module, n)), None
            )
            if name is not None and any(p.requires_grad for p in module.parameters()):
                out.append(("λ" if name == "lam" else "α", getattr(module, name)().detach().reshape(-1).tolist()))
                break
    return out


def learned_coefficients(
    models: Iterable[tuple[str, int, Any]], members: dict[str, dict[str, float]], title: str, path: Path
) -> tuple[str, dict[str, dict[str, Any]]]:
    """The coefficients of trained ``models`` (``(row, seed, model)``), per layer and seed: a PNG at ``path`` of each
    layer's value against the known ``members`` (per symbol, label: value), and a Markdown table of the per-layer
    means with the nearest known member. Also what was found: ``{row: {"symbol": ..., "seeds": {seed: [values per
    layer]}}}``; models without a learnable coefficient are left out (no table when none has one)."""
    found: dict[str, dict[str, Any]] = {}
    for row, seed, model in models:
        layers = coefficients(model)
        if layers:
            record = found.setdefault(row, {"symbol": layers[0][0], "seeds": {}})
            record["seeds"][seed] = [values for _, values in layers]
    if not found:
        return "", found
    coefficient_plot(title, found, members, path)
    lines = ["| learned row | symbol | " + " | ".join(f"layer {i}" for i in range(1, depth(found) + 1)) + " |"]
    lines.append("|" + "---|" * (depth(found) + 2))
    for row, record in found.items():
        cells, known = [], members.get(record["symbol"], {})
        for layer in range(depth(found)):
            values = [v for seed in record["seeds"].values() if layer < len(seed) for v in seed[layer]]
            if not values:
                cells.append("–")
                continue
            mean = statistics.fmean(values)
            spread = f" [{min(values):.3f}, {max(values):.3f}]" if len(values) > 1 else ""
            near = min(known, key=lambda k: abs(known[k] - mean)) if known else ""
            cells.append(f"{mean:.3f}{spread}" + (f" (nearest: {near})" if near else ""))
        lines.append(f"| {row} | {record['symbol']} | " + " | ".join(cells) + " |")
    caption = (
        "Learned coefficient per layer after training (best checkpoint): the mean over seeds and channels, [min, max] "
        "over them, and the nearest of the known members: "
        + "; ".join(f"{s}: " + ", ".join(f"{k} = {v:.4g}" for k, v in m.items()) for s, m in members.items())
        + "."
    )
    return "\n".join(lines) + "\n\n" + caption, found
