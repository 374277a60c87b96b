"""Plots of runs: a run's training curves, a section's accuracy against depth, learned coefficients per layer.

Each function takes the numbers it draws (rows, cells) and the PNG's path, and reads nothing else.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from .. import files


def pyplot() -> Any:
    """matplotlib's pyplot on the file-only backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_curves(rows: list[dict[str, Any]], path: Path) -> Path:
    """A run's curves (``curves.png``): training loss and validation metrics against step, from its
    ``metrics.jsonl`` rows."""
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    train = [(r["step"], r["loss"]) for r in rows if "loss" in r]
    if train:
        left.plot(*zip(*train), lw=1)
    left.set(xlabel="step", ylabel="training loss", yscale="log")
    for key in sorted({k for r in rows for k in r if k.startswith("val_")}):
        points = [(r["step"], r[key]) for r in rows if key in r]
        right.plot(*zip(*points), marker="o", ms=3, label=key)
    right.set(xlabel="step", ylabel="validation")
    if right.lines:
        right.legend()
    fig.tight_layout()
    return files.write_figure(path, fig, dpi=100)  # never through a link


def accuracy_plot(title: str, columns: list[str], cells: dict[str, dict[str, list[float]]], path: Path) -> None:
    """Test accuracy (mean ± std over seeds) against depth, one line per row: ``columns`` are depth labels
    (``"depth 12"``), ``cells`` the results table's (:func:`~odeformer.app.reporting.tables.results_table`)."""
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    depths = [int(c.split()[-1]) for c in columns]
    for row, by_column in cells.items():
        points = [(int(c.split()[-1]), v) for c, v in by_column.items() if v]
        means = [100 * statistics.fmean(v) for _, v in points]
        stds = [100 * statistics.stdev(v) if len(v) > 1 else 0 for _, v in points]
        ax.errorbar([d for d, _ in points], means, yerr=stds, marker="o", ms=4, capsize=3, label=row)
    ax.set(xscale="log", xlabel="depth (layers)", ylabel="test accuracy (%)")
    ax.set_title(title.split(":")[0], fontsize=9)
    ax.set_xticks(depths)
    ax.get_xaxis().set_major_formatter(ScalarFormatter())
    ax.get_xaxis().set_minor_formatter(NullFormatter())
    ax.legend(fontsize=7)
    fig.tight_layout()
    files.write_figure(path, fig)  # never through a link


def front_plot(fronts: dict[str, dict[str, Any]], metric: str, path: Path) -> None:
    """Work-precision fronts: each run's ``metric`` against the field evaluations one forward pass takes, one line per
    run over its resolutions (``fronts[run]["points"]``: ``(evaluations, metric)``), and its ODE's solution as a star
    where it was solved (``fronts[run]["ode"]``); a scheme of higher order pays where its line reaches its ODE's level
    at fewer evaluations."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.set_prop_cycle(color=plt.cm.tab20.colors)  # twenty distinct colours: a section's runs each their own
    for run, front in fronts.items():
        points = sorted(p for p in front["points"] if p[1] is not None)
        if not points:
            continue
        (line,) = ax.plot([e for e, _ in points], [m for _, m in points], marker="o", ms=3, label=run)
        if front.get("ode") is not None and front["ode"][1] is not None:
            ax.plot(*front["ode"], marker="*", ms=10, color=line.get_color(), linestyle="none")
    ax.set(xscale="log", xlabel="field evaluations per forward pass (★: the ODE by dopri5)", ylabel=metric)
    ax.set_title("work-precision fronts: the trained models stepped at k = ½ … 8", fontsize=9)
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    files.write_figure(path, fig)  # never through a link


def depth(found: dict[str, dict[str, Any]]) -> int:
    """The most layers any learned row's run has."""
    return max(len(layers) for record in found.values() for layers in record["seeds"].values())


def coefficient_plot(
    title: str, found: dict[str, dict[str, Any]], members: dict[str, dict[str, float]], path: Path
) -> None:
    """Each learned row's coefficient against the layer, per seed (the per-channel spread as a band), beside the
    known ``members`` of its symbol (dashed lines); ``found`` as :func:`~odeformer.app.reporting.learned.
    learned_coefficients` gathers it."""
    plt = pyplot()
    symbols = list(dict.fromkeys(record["symbol"] for record in found.values()))
    fig, axes = plt.subplots(1, len(symbols), figsize=(5.5 * len(symbols), 3.8), squeeze=False)
    for ax, symbol in zip(axes[0], symbols):
        for row, record in found.items():
            if record["symbol"] != symbol:
                continue
            for seed, layers in sorted(record["seeds"].items()):
                x = list(range(1, len(layers) + 1))
                means = [statistics.fmean(v) for v in layers]
                line = ax.plot(x, means, marker="o", ms=3, label=f"{row[:48]} (seed {seed})")[0]
                if any(len(v) > 1 for v in layers):
                    ax.fill_between(
                        x, [min(v) for v in layers], [max(v) for v in layers], alpha=0.15, color=line.get_color()
                    )
        low, high = ax.get_ylim()
        for label, value in members.get(symbol, {}).items():
            if low - 0.05 <= value <= high + 0.05:
                ax.axhline(value, ls="--", lw=0.8, color="grey")
                ax.annotate(label, (1, value), fontsize=6, color="grey", va="bottom")
        ax.set(xlabel="layer", ylabel=f"learned {symbol}")
        ax.set_xticks(range(1, depth(found) + 1))
        ax.legend(fontsize=6)
    fig.suptitle(title.split(":")[0], fontsize=9)
    fig.tight_layout()
    files.write_figure(path, fig)  # never through a link
