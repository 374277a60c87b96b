"""``odeformer-reproduce``: the sweep behind ``docs/RESULTS.md`` (graph, vision, language), from one command.

    odeformer-reproduce                       # every section, 2 worker processes, then rewrite docs/RESULTS.md
    odeformer-reproduce --sections graph      # one section
    odeformer-reproduce --smoke --out /tmp/x  # one tiny configuration end to end (CI)

Each run is ``odeformer-train experiment=<name> <overrides>`` composed in-process and trained in a worker process with
one thread (two workers fill the two cores of the reference machine). Runs are written under ``--runs``
(``runs/reproduce/<section>/<run>``); a run whose ``summary.json`` exists is not run again, so an interrupted sweep
resumes where it stopped. The tables (mean ± std over seeds), the PNGs and the over-smoothing curves go into
``docs/RESULTS.md`` between its ``reproduce`` markers, with the command, the hardware and the wall time.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BEGIN, END = "<!-- begin: odeformer-reproduce -->", "<!-- end: odeformer-reproduce -->"


@dataclass(frozen=True)
class Section:
    """A grid of runs: every combination of ``grid`` values, on top of ``experiment`` and ``fixed`` overrides."""

    title: str
    experiment: str
    grid: dict[str, list[Any]]
    fixed: list[str] = field(default_factory=list)
    axis: str = "model.depth"  # the table's columns
    note: str = ""
    label: str = "depth"  # column heading prefix

    def runs(self) -> list[tuple[str, list[str]]]:
        keys = list(self.grid)
        out = []
        for values in itertools.product(*(self.grid[k] for k in keys)):
            name = "_".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in zip(keys, values))
            out.append(
                (name, [f"experiment={self.experiment}", *self.fixed, *(f"{k}={v}" for k, v in zip(keys, values))])
            )
        return out


SEEDS = [0, 1, 2]
SECTIONS = {
    "graph": Section(
        "Cora node classification (DIFFormer-style, simple attention + graph propagation, τ = 0.2)",
        "cora_deep",
        {
            "solver": ["diffusion", "full_wave", "light_wave", "damped", "mix"],
            "model.depth": [2, 4, 8, 16, 32],
            "train.seed": SEEDS,
        },
        ["model.dt=0.2", "train.max_steps=100"],
        note="Paper (Cora, 20 layers, τ = 0.2): diffusion 39.92 %, Light Wave 85.18 %; ogbn-arxiv (7 layers): 24.44 % "
        "-> 66.73 %.",
    ),
    "digits": Section(
        "ViT on scikit-learn digits (8×8, patch 2, dim 48)",
        "digits_vit",
        {"solver": ["diffusion", "full_wave", "light_wave", "mix"], "model.depth": [6, 12], "train.seed": SEEDS},
        ["train.max_steps=600"],
    ),
    "fmnist": Section(
        "ViT on a 10k-image Fashion-MNIST subset (28×28, patch 7, dim 48)",
        "fmnist_vit",
        {"solver": ["diffusion", "full_wave", "light_wave", "mix"], "model.depth": [6, 12], "train.seed": SEEDS},
        ["model.dim=48", "data.batch_size=64", "train.max_steps=500", "train.eval_every=100"],
    ),
    "shakespeare": Section(
        "Tiny Shakespeare, character-level causal LM (depth 4, dim 64, context 64)",
        "shakespeare_char",
        {"solver": ["diffusion", "full_wave", "light_wave"], "train.seed": [0, 1]},
        ["model.dim=64", "model.max_len=64", "train.max_steps=800", "train.eval_every=200", "train.eval_batches=10"],
        axis="",
    ),
    "sst2": Section(
        "SST-2 sentiment, masked-LM encoder + classification head from scratch (depth 4, dim 64)",
        "sst2",
        {"solver": ["diffusion", "full_wave", "light_wave"], "train.seed": [0, 1]},
        ["train.max_steps=500", "train.eval_every=100"],
        axis="",
    ),
}
SECTIONS["momentum"] = Section(
    "Cora at depth 32: Light Wave's momentum start λ0 = sigmoid(θ0) (heavy ball, τ = 0.2)",
    "cora_deep",
    {"solver": ["light_wave"], "solver.options.theta0": [-2.0, 0.0, 2.0, 4.0], "train.seed": SEEDS},
    ["model.dt=0.2", "model.depth=32", "train.max_steps=100"],
    axis="solver.options.theta0",
    label="θ0 =",
    note="λ0 = sigmoid(θ0) ≈ 0.12, 0.5, 0.88, 0.98; the presets' default is θ0 = -2.",
)
SMOKE = Section(
    "smoke",
    "cora_deep",
    {"solver": ["diffusion"], "model.depth": [2], "train.seed": [0]},
    ["model.dt=0.2", "train.max_steps=3", "train.eval_every=3"],
)


def _train(job: tuple[str, list[str], str]) -> dict[str, Any]:
    """Worker: compose and train one configuration (one thread); return its summary."""
    import torch

    torch.set_num_threads(1)
    from . import train

    name, overrides, out_dir = job
    summary_path = Path(out_dir) / "summary.json"
    if summary_path.exists() and json.loads(summary_path.read_text())["status"] == "completed":
        return json.loads(summary_path.read_text())
    resume = ["train.resume=true"] if (Path(out_dir) / "last.pt").exists() else []  # an interrupted sweep
    cfg = train.compose([*overrides, *resume, "train.progress=false"])
    return train.run(cfg, Path(out_dir))


def run_section(section: Section, runs_dir: Path, workers: int) -> list[tuple[str, list[str], dict[str, Any]]]:
    jobs = [(name, overrides, str(runs_dir / name)) for name, overrides in section.runs()]
    if workers == 1:
        summaries = [_train(job) for job in jobs]
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            summaries = list(pool.map(_train, jobs))
    return [(name, overrides, summary) for (name, overrides, _), summary in zip(jobs, summaries)]


def _value(overrides: list[str], key: str) -> str:
    key = key.lstrip("+")
    return next((o.split("=", 1)[1] for o in overrides if o.lstrip("+").startswith(f"{key}=")), "")


def _fmt(values: list[float], percent: bool) -> str:
    scale = 100 if percent else 1
    if not values:
        return "–"
    mean = statistics.fmean(values) * scale
    spread = statistics.stdev(values) * scale if len(values) > 1 else 0.0
    return f"{mean:.1f} ± {spread:.1f}" if percent else f"{mean:.3f} ± {spread:.3f}"


def table(section: Section, results: list[tuple[str, list[str], dict[str, Any]]]) -> tuple[str, dict]:
    """Markdown table: one row per solver, one column per ``axis`` value, mean ± std of the test metric."""
    metric = results[0][2]["metric"]
    percent = metric == "accuracy"
    cells: dict[str, dict[str, list[float]]] = {}
    walls = []
    for _, overrides, summary in results:
        solver, column = _value(overrides, "solver"), _value(overrides, section.axis) if section.axis else "all"
        cells.setdefault(solver, {}).setdefault(column, []).append(summary["test"])
        walls.append(summary["wall_s"])
    columns = list(dict.fromkeys(c for row in cells.values() for c in row))
    label = f"test {metric}" + (" (%)" if percent else " (nats/char)")
    head = "| solver | " + " | ".join(f"{section.label} {c}" if section.axis else label for c in columns) + " |"
    lines = [head, "|" + "---|" * (len(columns) + 1)]
    for solver, row in cells.items():
        lines.append(f"| `{solver}` | " + " | ".join(_fmt(row.get(c, []), percent) for c in columns) + " |")
    seeds = len(next(iter(next(iter(cells.values())).values())))
    caption = f"{label}, mean ± std over {seeds} seeds; {len(results)} runs, {sum(walls) / 60:.1f} min of training."
    return "\n".join(lines) + "\n\n" + caption, cells


def accuracy_plot(section: Section, cells: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for solver, row in cells.items():
        depths = sorted(row, key=float)
        means = [100 * statistics.fmean(row[d]) for d in depths]
        stds = [100 * statistics.stdev(row[d]) if len(row[d]) > 1 else 0 for d in depths]
        ax.errorbar([int(d) for d in depths], means, yerr=stds, marker="o", ms=4, capsize=3, label=solver)
    ax.set(xscale="log", xlabel="depth (layers)", ylabel="test accuracy (%)")
    ax.set_title(section.title.split(" (")[0], fontsize=10)
    ax.set_xticks([int(d) for d in sorted(next(iter(cells.values())), key=float)])
    ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.get_xaxis().set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def oversmoothing(section: Section, results, runs_dir: Path, out: Path) -> list[str]:
    """Diagnose the seed-0 runs at the section's largest depth, one curve per solver; return the PNG names."""
    from .diagnose import diagnose
    from .runs import load_run

    deepest = max(int(_value(o, "model.depth")) for _, o, _ in results)
    chosen = [
        (n, o) for n, o, _ in results if _value(o, "train.seed") == "0" and int(_value(o, "model.depth")) == deepest
    ]
    runs = []
    for name, overrides in chosen:
        data, model, _ = load_run(runs_dir / name)
        runs.append((_value(overrides, "solver"), data, model))
    diagnose(runs, out, size=64)
    return [f"{m}.png" for m in ("cosine", "rank_collapse", "dirichlet", "spectral_gap") if (out / f"{m}.png").exists()]


def write_results(markdown: str, path: Path, begin: str = BEGIN, end: str = END) -> None:
    """Replace the block between ``begin`` and ``end`` in ``path`` (creating the file or the block if needed), so
    each generator owns its block and the prose around the blocks is kept."""
    block = f"{begin}\n{markdown}\n{end}"
    text = path.read_text() if path.exists() else "# Results\n\n"
    if begin in text and end in text:
        text = text[: text.index(begin)] + block + text[text.index(end) + len(end) :]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="odeformer-reproduce", description=__doc__.splitlines()[0])
    parser.add_argument("--sections", nargs="+", choices=list(SECTIONS), default=list(SECTIONS))
    parser.add_argument(
        "--runs", type=Path, default=None, help="where runs are written (default: <out>/runs, or runs/reproduce)"
    )
    parser.add_argument("--out", type=Path, default=None, help="folder of RESULTS.md and its figures (default: docs)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--smoke", action="store_true", help="one tiny configuration (for CI)")
    args = parser.parse_args(argv)
    if args.runs is None:
        args.runs = args.out / "runs" if args.out is not None else Path("runs") / "reproduce"
    if args.out is None:
        args.out = Path("docs")
    sections = {"smoke": SMOKE} if args.smoke else {name: SECTIONS[name] for name in args.sections}
    figures = args.out / "results"
    figures.mkdir(parents=True, exist_ok=True)
    command = "odeformer-reproduce" + (
        " --smoke"
        if args.smoke
        else ""
        if args.sections == list(SECTIONS)
        else " --sections " + " ".join(args.sections)
    )
    started = time.time()
    parts, training = [], []
    for key, section in sections.items():
        results = run_section(section, args.runs / key, args.workers)
        training.extend(summary["wall_s"] for _, _, summary in results)
        markdown, cells = table(section, results)
        parts.append(f"### {section.title}\n\n{markdown}\n")
        if section.note:
            parts.append(section.note + "\n")
        if section.axis == "model.depth" and len(next(iter(cells.values()))) > 1:
            accuracy_plot(section, cells, figures / f"{key}_accuracy.png")
            parts.append(f"![{key} accuracy against depth](results/{key}_accuracy.png)\n")
        if key in ("digits", "fmnist", "graph"):
            pngs = oversmoothing(section, results, args.runs / key, figures / f"{key}_oversmoothing")
            links = " ".join(f"[{p[:-4]}](results/{key}_oversmoothing/{p})" for p in pngs)
            parts.append(f"Over-smoothing per layer at the largest depth (seed 0, trained): {links}\n")
            if pngs:
                parts.append(f"![{key} token cosine per layer](results/{key}_oversmoothing/{pngs[0]})\n")
    minutes = (time.time() - started) / 60
    trained = sum(training) / 60
    cpu = platform.processor() or platform.machine()
    header = (
        f"Generated by `{command}` on {os.cpu_count()} CPU cores ({cpu}), {time.strftime('%Y-%m-%d')}: "
        f"{len(training)} runs, {trained:.0f} min of training summed over runs, {args.workers} single-thread "
        f"worker(s) in parallel (about {trained / args.workers:.0f} min wall; finished runs are reused, so a rerun "
        "only redraws the tables and figures). Each run is "
        "`odeformer-train` with the overrides in the section's config (`odeformer/reproduce.py`); test metrics are "
        "taken at the best validation step.\n"
    )
    write_results(header + "\n" + "\n".join(parts), args.out / "RESULTS.md")
    print(f"wrote {args.out / 'RESULTS.md'} ({minutes:.1f} min)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
