"""Hyperparameters that carry across depth, measured: a learning-rate grid's best point at each depth, and the
coordinate check (the state's size layer by layer, at initialisation and trained).

A section with ``depths`` and ``lr_grid`` (:class:`~odeformer.app.run.sections.Section`) trains every row at every
depth and every factor on its learning rate. :func:`best_learning_rates` reads, per row and depth, the factor whose
runs reach the best validation metric (mean over seeds; a diverged run is the worst there is), and whether it is
the same grid point at every depth; :func:`transfer_markdown` writes it as two tables. :func:`run_coordinates`
measures a run's model as its training began and as trained, on one batch of validation items
(:func:`state_sizes`), and :func:`coordinate_figure` draws them for each depth, the parameterisations side by side.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import torch

from solvers import PhaseState

from .. import files
from .comparison import HIGHER_IS_BETTER
from .plots import pyplot

DIVERGED = "diverged"


def higher_is_better(metric: str) -> bool:
    """Whether a larger ``metric`` (a summary's ``metric``: ``accuracy``, ``loss``) is better
    (:data:`~.comparison.HIGHER_IS_BETTER`); an unknown metric is a ValueError."""
    if metric not in HIGHER_IS_BETTER:
        raise ValueError(f"no objective measures {metric!r}; the metrics are {', '.join(sorted(HIGHER_IS_BETTER))}.")
    return HIGHER_IS_BETTER[metric]


def _lr(overrides: list[str]) -> float:
    """The learning rate a job's overrides give last (a grid's own, after the row's base)."""
    return float(next(o.split("=", 1)[1] for o in reversed(overrides) if o.startswith("train.lr=")))


def best_learning_rates(results: list[Any], grid: dict[str, tuple[int, float, list[str]]]) -> dict[str, Any]:
    """Per row of a learning-rate grid's ``results`` (``(name, row, column, seed, overrides, summary)``, the
    columns ``grid``'s labels: :meth:`~odeformer.app.run.sections.Section.grid`), per depth: every factor's learning
    rate and validation and test metric (means over seeds; None where a seed's run diverged), the best factors
    (all of those tied at the best validation metric) and that metric; and ``same``: whether some best factor is
    best at every depth. Returns ``{"metric", "higher_is_better", "rows": {row: {"depths": {depth: ...},
    "same": bool}}}``."""
    finished = [r[5] for r in results if r[5].get("status") != DIVERGED]
    if not finished:
        raise ValueError("every run of the grid diverged: no learning rate is best")
    metric = finished[0]["metric"]
    higher = higher_is_better(metric)
    cells: dict[str, dict[int, dict[float, dict[str, Any]]]] = {}
    for _, row, column, _, overrides, summary in results:
        depth, factor, _ = grid[column]
        cell = cells.setdefault(row, {}).setdefault(depth, {}).setdefault(factor, {"lr": _lr(overrides), "runs": []})
        cell["runs"].append(summary)
    rows = {}
    for row, by_depth in cells.items():
        depths = {}
        for depth, by_factor in by_depth.items():
            points = {}
            for factor, cell in sorted(by_factor.items()):
                ok = all(s.get("status") != DIVERGED and s.get("val") is not None for s in cell["runs"])
                val = statistics.fmean(s["val"] for s in cell["runs"]) if ok else None
                test = (
                    statistics.fmean(s["test"] for s in cell["runs"])
                    if ok and all(s.get("test") is not None for s in cell["runs"])
                    else None
                )
                points[factor] = {"lr": cell["lr"], "val": val, "test": test, "seeds": len(cell["runs"])}
            scored = {f: p["val"] for f, p in points.items() if p["val"] is not None}
            top = (max if higher else min)(scored.values()) if scored else None
            best = [f for f, v in scored.items() if v == top]
            depths[depth] = {"grid": points, "best": best, "val": top, "lr": [points[f]["lr"] for f in best]}
        shared = set.intersection(*(set(d["best"]) for d in depths.values())) if depths else set()
        rows[row] = {"depths": depths, "same": bool(shared)}
    return {"metric": metric, "higher_is_better": higher, "rows": rows}


def _value(value: float | None) -> str:
    return DIVERGED if value is None else f"{value:.3f}"


def _best(entry: dict[str, Any]) -> str:
    if not entry["best"]:
        return "– (every rate diverged)"
    shown = ", ".join(f"{lr:.3g} (×{f:g})" for f, lr in zip(entry["best"], entry["lr"]))
    return shown + (" (tied)" if len(entry["best"]) > 1 else "")


def transfer_markdown(found: dict[str, Any], depths: tuple[int, ...], factors: tuple[float, ...]) -> str:
    """:func:`best_learning_rates`'s numbers as Markdown: a row per row with the best learning rate at each depth,
    the validation metric there and whether the best grid point is the same; then every grid point's validation
    metric."""
    metric = f"validation {found['metric']}"
    head = [f"best lr at depth {d}" for d in depths] + [f"{metric} at the best lr, depth {d}" for d in depths]
    lines = ["| run | " + " | ".join(head) + " | same grid point |", "|---|" + "---|" * (len(head) + 1)]
    for row, entry in found["rows"].items():
        by_depth = entry["depths"]
        cells = [_best(by_depth[d]) for d in depths] + [_value(by_depth[d]["val"]) for d in depths]
        lines.append(f"| {row} | " + " | ".join(cells) + f" | {'yes' if entry['same'] else 'no'} |")
    grid_head = [f"depth {d}, ×{f:g}" for d in depths for f in factors]
    lines += ["", f"Every grid point's {metric} (mean over seeds):", ""]
    lines += ["| run | " + " | ".join(grid_head) + " |", "|---|" + "---|" * len(grid_head)]
    for row, entry in found["rows"].items():
        cells = [_value(entry["depths"][d]["grid"][f]["val"]) for d in depths for f in factors]
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# -- the coordinate check -----------------------------------------------------------------------------------------


def _rms(x: torch.Tensor) -> float:
    return float(x.double().pow(2).mean().sqrt())


def _positions(model: torch.nn.Module, inputs: tuple[Any, ...]) -> list[torch.Tensor]:
    with torch.no_grad():
        states = model.eval().trajectory(*inputs)
    return [s.x if isinstance(s, PhaseState) else s for s in states]


def state_sizes(model: torch.nn.Module, inputs: tuple[Any, ...]) -> dict[str, list[float]]:
    """The state ``x_0 … x_L`` of ``model`` (a task model; ``x_0`` the backbone's input, a second-order layer's
    position) on ``inputs``: ``rms``, the root mean square of ``x_l`` over every item, token and channel, per state;
    ``update``, that of the step ``x_{l+1} − x_l``, per layer."""
    xs = _positions(model, inputs)
    return {"rms": [_rms(x) for x in xs], "update": [_rms(b - a) for a, b in zip(xs, xs[1:])]}


def initial_model(run_dir: Path) -> torch.nn.Module:
    """A run's model as its training began: built from the config its checkpoint keeps, under the run's seed, as
    :func:`odeformer.app.run.launch.train` builds it."""
    from ..run.builder import build
    from ..run.checkpoints import load_checkpoint
    from ..run.identity import run_record

    path = Path(run_dir) / "best.pt"
    config = run_record(load_checkpoint(path)).get("config")
    train = config.get("train") if isinstance(config, dict) else None
    seed = train.get("seed") if isinstance(train, dict) else None
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= 2**63 - 1:
        raise ValueError(
            f"{path} stores no seed its run began with (train.seed, a whole number from 0 to 2**63 - 1; it holds "
            f"{str(seed)[:40]}), so its model at initialisation cannot be rebuilt; use a checkpoint of odeformer-train."
        )
    torch.manual_seed(seed)
    return build(config, source=path)[1].eval()


def run_coordinates(run_dir: Path, size: int = 64) -> dict[str, Any]:
    """A finished run's coordinate check on its first ``size`` validation items: :func:`state_sizes` of its model
    at initialisation (``init``) and trained (``trained``, the best checkpoint), and ``change``, the root mean
    square of ``x_l(trained) − x_l(init)`` per state: how far training moved each layer's state; ``items``, the
    batch's size, and the run's ``parameterization``."""
    from ..run.builder import load_run
    from .diagnostics import batch_of

    data, trained, record = load_run(run_dir)
    inputs, _ = batch_of(data, trained, size)
    start = initial_model(run_dir)
    before, after = _positions(start, inputs), _positions(trained, inputs)
    return {
        "init": state_sizes(start, inputs),
        "trained": state_sizes(trained, inputs),
        "change": [_rms(b - a) for a, b in zip(before, after)],
        "items": int(before[0].shape[0]),
        "parameterization": record["config"]["model"].get("parameterization", "standard"),
    }


PANELS = (
    ("rms", "state's RMS, |x_l|", "layer index l / depth (0 = input)"),
    ("update", "step's RMS, |x_{l+1} − x_l|", "layer index l / depth (step from x_l)"),
    ("change", "training's change of the state, |x_l(trained) − x_l(init)|", "layer index l / depth (0 = input)"),
)


def coordinate_figure(measured: dict[str, dict[int, dict[str, Any]]], title: str, out: Path) -> list[str]:
    """Draw the coordinate check of one scheme into ``out`` (``coordinates.png``, with its numbers in
    ``coordinates.json``): ``measured`` is ``{parameterisation: {depth: run_coordinates(...)}}``; a column per
    parameterisation (side by side), a row per measure (:data:`PANELS`), a colour per depth, dashed at
    initialisation and solid trained; the layer index is divided by the depth, so that the depths share an axis
    (depth-time ``t / T`` under ``ode``). Return the names written."""
    plt = pyplot()
    names = list(measured)
    fig, axes = plt.subplots(len(PANELS), len(names), figsize=(5 * len(names), 3.2 * len(PANELS)), squeeze=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    depths = sorted({d for by_depth in measured.values() for d in by_depth})
    for column, name in enumerate(names):
        for row, (key, label, axis) in enumerate(PANELS):
            ax = axes[row][column]
            for i, depth in enumerate(depths):
                numbers = measured[name].get(depth)
                if numbers is None:
                    continue
                colour = colours[i % len(colours)]
                curves = (
                    [("trained", numbers["change"], "-")]
                    if key == "change"
                    else [
                        ("init", numbers["init"][key], "--"),
                        ("trained", numbers["trained"][key], "-"),
                    ]
                )
                for when, values, style in curves:
                    xs = [layer / depth for layer in range(len(values))]
                    ax.plot(xs, values, style, color=colour, marker="o", ms=2, label=f"depth {depth}, {when}")
            positive = [v for line in ax.lines for v in line.get_ydata() if v > 0]
            if positive and max(positive) > 10 * min(positive):
                ax.set_yscale("log")
            ax.set_title(f"{name}: {label}", fontsize=8)
            ax.set_xlabel(axis, fontsize=8)
            ax.legend(fontsize=6)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    folder = files.folder(out)
    files.write_figure(folder / "coordinates.png", fig)
    record = {
        "title": title,
        "definition": {
            "rms": "root mean square of the state x_l over items, tokens and channels, l = 0 (input) .. depth",
            "update": "root mean square of x_{l+1} − x_l, l = 0 .. depth − 1",
            "change": "root mean square of x_l(trained) − x_l(at initialisation), l = 0 .. depth",
        },
        "runs": {name: {str(d): v for d, v in by_depth.items()} for name, by_depth in measured.items()},
    }
    files.write_text(folder / "coordinates.json", json.dumps(record, indent=1, allow_nan=False) + "\n")
    return ["coordinates.png", "coordinates.json"]


def coordinate_markdown(measured: dict[str, dict[int, dict[str, Any]]]) -> str:
    """The coordinate check's numbers in a table: per run (``{label: {depth: run_coordinates(...)}}``) and depth,
    the last state's RMS at initialisation and trained, the largest step's RMS, and training's change of the last
    state."""
    lines = [
        "| run | depth | last state's RMS: init → trained | largest step's RMS: init → trained | training's change "
        "of the last state |",
        "|---|---|---|---|---|",
    ]
    for label, by_depth in measured.items():
        for depth, m in sorted(by_depth.items()):
            init, trained = m["init"], m["trained"]
            lines.append(
                f"| {label} | {depth} | {init['rms'][-1]:.3g} → {trained['rms'][-1]:.3g} | "
                f"{max(init['update']):.3g} → {max(trained['update']):.3g} | {m['change'][-1]:.3g} |"
            )
    return "\n".join(lines)
