"""Tables of runs: the line a finished run prints, the table of a Hydra sweep, a section's results table.

Each function takes the summaries it tabulates (``summary.json``'s keys) and returns or prints Markdown; the sweep
table reads the ``summary.json`` files under a sweep directory.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from ..files import printable, read_text


def print_summary(summary: dict[str, Any], out_dir: Path) -> None:
    metric = summary["metric"]
    test = "-" if summary["test"] is None else f"{summary['test']:.4f}"
    print(f"\n{'solver':<16} {'depth':>5} {'test ' + metric:>14} {'time':>8}")
    print(f"{summary['solver']:<16} {summary['depth']:>5} {test:>14} {summary['wall_s']:>7.1f}s")
    print(f"run directory: {printable(out_dir)}")


SWEEP_COLUMNS = (
    "run", "solver", "model", "data", "depth", "metric", "val", "test", "steps", "wall_s", "params", "evals/token",
    "status",
)  # fmt: skip
"""A sweep table's columns: the summary's keys, ``evals/token`` its field evaluations per token of one forward."""


def sweep_table(sweep_dir: Path) -> tuple[str, list[dict[str, Any]]]:
    """A Markdown table of every run's ``summary.json`` under ``sweep_dir`` (one row per run), and the rows."""
    rows = []
    for path in sorted(Path(sweep_dir).glob("*/summary.json"), key=lambda p: _job_number(p.parent.name)):
        summary = json.loads(read_text(path, limit=4 << 20))
        evaluations = summary.get("evaluations") or {}
        row = {"run": path.parent.name, **{k: summary.get(k) for k in SWEEP_COLUMNS[1:]}}
        rows.append(row | {"evals/token": evaluations.get("per_token")})
    lines = ["| " + " | ".join(SWEEP_COLUMNS) + " |", "|" + "---|" * len(SWEEP_COLUMNS)]
    for row in rows:
        lines.append("| " + " | ".join(_cell(row[k]) for k in SWEEP_COLUMNS) + " |")
    return "\n".join(lines) + "\n", rows


def _job_number(name: str) -> int:
    head = name.split("_", 1)[0]
    return int(head) if head.isdigit() else 0


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4f}"
    return "-" if value is None else str(value)


def _fmt(values: list[float], percent: bool) -> str:
    scale = 100 if percent else 1
    if not values:
        return "–"
    mean = statistics.fmean(values) * scale
    spread = statistics.stdev(values) * scale if len(values) > 1 else 0.0
    return f"{mean:.1f} ± {spread:.1f}" if percent else f"{mean:.3f} ± {spread:.3f}"


def results_table(results: list[Any], costs: dict[str, float], seeds: int) -> tuple[str, dict]:
    """A section's Markdown table from its sweep's results (``(name, row, column, seed, overrides, summary)``): one
    row per row label, one column per column label, mean ± std of the test metric over the ``seeds``; then the cost
    of each row's training step relative to diffusion's (``costs``). Also the cells: ``{row: {column: [tests]}}``."""
    metric = results[0][5]["metric"]
    percent = metric == "accuracy"
    cells: dict[str, dict[str, list[float]]] = {}
    walls: dict[str, list[float]] = {}
    for _, row, column, _, _, summary in results:
        cells.setdefault(row, {}).setdefault(column, []).append(summary["test"])
        walls.setdefault(row, []).append(summary["wall_s"])
    columns = list(dict.fromkeys(c for row in cells.values() for c in row))
    label = f"test {metric}" + (" (%)" if percent else " (nats/char)")
    head = "| solver | " + " | ".join(c or label for c in columns) + " | step cost vs diffusion |"
    lines = [head, "|" + "---|" * (len(columns) + 2)]
    for row, by_column in cells.items():
        ratio = "1.00" if row == "diffusion" else (f"{costs[row]:.2f}" if row in costs else "–")
        shown = f"`{row}`" if " " not in row else row
        lines.append(
            f"| {shown} | " + " | ".join(_fmt(by_column.get(c, []), percent) for c in columns) + f" | {ratio} |"
        )
    minutes = sum(sum(w) for w in walls.values()) / 60
    caption = f"{label}, mean ± std over {seeds} seeds; {len(results)} runs, {minutes:.1f} min of training."
    return "\n".join(lines) + "\n\n" + caption, cells
