"""``odeformer-reproduce``: the sweep behind ``docs/RESULTS.md`` (graph, vision, language), from one command.

    odeformer-reproduce                          # every section, 2 worker processes, then rewrite docs/RESULTS.md
    odeformer-reproduce --sections difformer     # some sections
    odeformer-reproduce --smoke                  # one tiny configuration end to end on built-in data (CI), written
                                                 # into a new temporary folder (or --out)

The sections are ``odeformer/app/run/sweeps/results.yaml``'s (:mod:`odeformer.app.run.sections`), each cell a job of
the sweep engine (:mod:`odeformer.app.run.sweep`); ``docs/comparing.md`` ("Reproducing the results") says what a
section runs, reuses and writes, and what a learning-rate grid's block holds (:func:`transfer_section`).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .. import files
from ..reporting.plots import accuracy_plot, front_plot
from ..reporting.results import HEADER, split_combined_block, write_results, write_section
from ..reporting.tables import results_table
from ..run.schemes import own_scheme
from ..run.sections import Section, results_sections, run_section, slug, smoke_section
from ..run.sweep import Result, Sweep
from . import Parser, folder_argument, run, workers_argument

# what loads torch (building, analysing, diagnosing runs) or Hydra (composing) is imported once the command line is
# checked: --help and a usage error answer without it


def _stepper_override(overrides: list[str]) -> str | None:
    """The ``module.Class`` of a row's scheme of its own (``solver=module.Class``), which rebuilds its runs."""
    return next((own_scheme(o.split("=", 1)[1]) for o in overrides if o.startswith("solver=")), None)


def section_coefficients(
    section: Section, results: list[Result], runs_dir: Path, path: Path
) -> tuple[str, dict[str, Any]]:
    """The learnable rows' coefficients after training (best checkpoint), per layer and seed, as a table and a PNG
    (:func:`odeformer.app.reporting.learned.learned_coefficients`) against the section's known members; rows whose
    scheme learns no coefficient are left out. A scheme of one's own is rebuilt from the row's own overrides, not
    from what its checkpoint says."""
    from ..reporting.learned import learned_coefficients
    from ..run.builder import load_run

    def models():
        for name, row, _, seed, overrides, _ in results:
            yield row, seed, load_run(runs_dir / name, stepper=_stepper_override(overrides))[1]

    return learned_coefficients(models(), section.learned, section.title, path)


def oversmoothing(section: Section, column: str, results: list[Result], runs_dir: Path, out: Path) -> list[str]:
    """Diagnose the seed-0 runs of ``column``, one curve per row; return the PNG names."""
    from ..reporting.diagnostics import DIAGNOSED, diagnose
    from ..run.builder import load_run

    chosen = [(row, name) for name, row, c, seed, _, _ in results if seed == 0 and c == column]
    runs = []
    for row, name in chosen:
        data, model, _ = load_run(runs_dir / name)
        runs.append((row, data, model))
    written = diagnose(runs, out, size=64)
    return [f"{m}.png" for m in DIAGNOSED if f"{m}.png" in written]


def _reports(results: list[Result], runs_dir: Path, key: str, figures: Path, refine: tuple, title: str) -> Any:
    """Every row's seed-0 run analysed at the resolutions ``refine`` (:func:`odeformer.app.run.analysis.analyse_run`),
    its report with figures written under ``figures``: ``(row, numbers, model, link to the report)`` for each."""
    from ..reporting.analysis import run_markdown
    from ..run.analysis import analyse_run

    for name, row, _, seed, _, _ in results:
        if seed == 0:
            numbers, model = analyse_run(runs_dir / name, refine=refine)
            folder = f"{key}_{slug(row)}"
            run_markdown(numbers, model, files.folder(figures / folder, figures), title=f"{row}: {title}")
            yield row, numbers, model, f"[{row}](results/{folder}/report.md)"


def stability_atlas(section: Section, results: list[Result], runs_dir: Path, key: str, figures: Path) -> str:
    """Every row's seed-0 run: its stability atlas and refinement (:func:`_reports`), and a table of them; return the
    Markdown."""
    lines = [
        "| run | layers | smallest headroom (layer) | growing modes | contraction predicted / measured (median over "
        f"layers) | small-step limit | observed order | validation metric: k = 1 → k = {max(section.atlas)} |",
        "|---|---|---|---|---|---|---|---|",
    ]
    links, title = [], "stability atlas and refinement"
    for row, numbers, _, link in _reports(results, runs_dir, key, figures, section.atlas, title):
        layers = numbers["layers"]
        low = min(layers, key=lambda entry: entry["headroom"])
        ratios = sorted(entry["predicted_contraction"] / entry["measured_contraction"] for entry in layers)
        rows = numbers["refinement"]
        order = numbers["observed_order"]
        lines.append(
            f"| {row} | {len(layers)} | {low['headroom']:.3g} (layer {low['layer']}) | "
            f"{sum(entry['growing'] for entry in layers)} | {ratios[len(ratios) // 2]:.3f} | "
            f"{'yes' if numbers['small_step_limit'] else 'no'} | "
            f"{'–' if order is None else f'{order:.2f}'} | {numbers['metric']} {rows[0]['metric']:.3f} → "
            f"{rows[-1]['metric']:.3f} |"
        )
        links.append(link)
    return "\n".join(lines) + "\n\nEach run's atlas, headroom, contraction and refinement figures: " + ", ".join(links)


def refinement_table(section: Section, results: list[Result], runs_dir: Path, key: str, figures: Path) -> str:
    """Every row's seed-0 run stepped at the section's resolutions and its ODE solved (:func:`_reports`), and a table
    of its validation metric at each resolution and at the ODE's solution, its observed order and the verdict;
    return the Markdown."""
    fronts: dict[str, dict[str, Any]] = {}
    ks = sorted({1.0, *section.refine})
    head = " | ".join(f"k = {k:g}" for k in ks)
    lines = [f"| run | {head} | ODE (dopri5) | observed order (layers') | verdict |", "|---|" + "---|" * (len(ks) + 3)]
    links = []
    for row, numbers, model, link in _reports(results, runs_dir, key, figures, section.refine, "refinement"):
        cells = " | ".join("–" if r.get("metric") is None else f"{r['metric']:.3f}" for r in numbers["refinement"])
        solution = (numbers.get("limit") or {}).get("metric")
        order = numbers["observed_order"]
        verdict = numbers["verdict"].split(":")[0]
        lines.append(
            f"| {row} | {cells} | {'–' if solution is None else f'{solution:.3f}'} | "
            f"{'–' if order is None else f'{order:.2f}'} ({numbers['layer_order']}) | {verdict} |"
        )
        links.append(link)
        fronts[str(row)] = work_precision(numbers, model)
    front_plot(fronts, "validation " + numbers["metric"], figures / f"{key}_fronts.png")
    return (
        "\n".join(lines)
        + f"\n\n![work-precision fronts](results/{key}_fronts.png)\n\nEach run's refinement report and figures: "
        + ", ".join(links)
    )


def work_precision(numbers: dict[str, Any], model: Any) -> dict[str, Any]:
    """A run's work-precision front from its refinement (:func:`odeformer.app.run.analysis.analyse_run`): at each
    resolution ``k`` its forward pass evaluates its fields ``k`` times its layers' ``evals_per_step`` summed (each
    layer step taken as ``k`` steps, or every ``1/k``-th layer over ``1/k`` of them), with its metric there; and the
    ODE's solution at dopri5's evaluations where it was solved."""
    per_pass = sum(layer.claims().evals_per_step for layer in model.backbone.layers)
    points = [(row["k"] * per_pass, row.get("metric")) for row in numbers["refinement"]]
    limit = numbers.get("limit") or {}
    ode = (limit["evaluations"], limit.get("metric")) if "evaluations" in limit and "unsolved" not in limit else None
    return {"points": points, "ode": ode}


def transfer_section(section: Section, results: list[Result], runs_dir: Path, key: str, figures: Path) -> list[str]:
    """A learning-rate grid's block: the best learning rate at each depth per row
    (:func:`odeformer.app.reporting.transfer.best_learning_rates`), every grid point's validation metric, and the
    coordinate check of each row's runs at the base learning rate (factor 1, the first seed): one figure per scheme
    under ``figures/<key>_<scheme>/`` with its parameterisations side by side (rows whose overrides differ only in
    ``model.parameterization`` are one scheme, named by what their labels share), and its numbers in a table."""
    from ..reporting.transfer import (
        best_learning_rates,
        coordinate_figure,
        coordinate_markdown,
        run_coordinates,
        transfer_markdown,
    )

    grid = section.grid(1.0)  # the labels and grid points; the learning rates are each job's own
    found = best_learning_rates(results, grid)
    minutes = sum(summary.get("wall_s", 0.0) for *_, summary in results) / 60
    diverged = sum(summary.get("status") == "diverged" for *_, summary in results)
    caption = f"{len(results)} runs ({diverged} diverged), {minutes:.1f} min of training" + (
        " (the diverged runs' not counted)." if diverged else "."
    )
    parts = [transfer_markdown(found, section.depths, section.lr_grid) + f"\n\n{caption}\n"]
    measured: dict[str, dict[int, dict[str, Any]]] = {}
    for name, row, column, seed, _, _ in results:
        depth, factor, _ = grid[column]
        if factor == 1.0 and seed == section.seeds[0]:
            measured.setdefault(row, {})[depth] = run_coordinates(runs_dir / name)
    schemes: dict[tuple[str, ...], list[str]] = {}
    for row, overrides in section.rows.items():
        same = tuple(o for o in [*section.fixed, *overrides] if not o.startswith("model.parameterization="))
        schemes.setdefault(same, []).append(row)
    links = []
    for rows in schemes.values():
        shared = os.path.commonprefix(rows).rstrip(", ").strip() if len(rows) > 1 else rows[0]
        label = shared or rows[0]
        by_parameterisation = {
            measured[row][min(measured[row])]["parameterization"] if len(rows) > 1 else row: measured[row]
            for row in rows
        }
        folder = f"{key}_{slug(label)}"
        title = f"{label}: the coordinate check (lr ×1, seed {section.seeds[0]})"
        coordinate_figure(by_parameterisation, title, files.folder(figures / folder, figures))
        links.append((label, folder))
    parts.append(
        "The coordinate check: per layer, the state's RMS, the step's RMS and training's change of the state, at "
        "the base learning rate, dashed at initialisation and solid trained (numbers beside each PNG):\n\n"
        + coordinate_markdown(measured)
        + "\n\n"
        + ", ".join(f"[{label}](results/{folder}/coordinates.png)" for label, folder in links)
        + "\n"
    )
    parts += [f"![{key} coordinate check, {label}](results/{folder}/coordinates.png)\n" for label, folder in links]
    return parts


def main(argv: list[str] | None = None) -> int:
    """The command: bad input, a damaged or refused checkpoint and missing data are one line and exit 2
    (:func:`odeformer.app.commands.run`)."""
    return run("odeformer-reproduce", lambda: _main(argv), sweeps=True)


def _main(argv: list[str] | None = None) -> int:
    known = results_sections()  # sweeps/results.yaml: a malformed file is one line, naming the file and the key
    keys = list(known)
    parser = Parser(prog="odeformer-reproduce", description=__doc__.splitlines()[0])
    parser.add_argument("--sections", nargs="+", choices=keys, default=keys)
    parser.add_argument(
        "--runs", type=folder_argument, default=None, help="where runs are written (default: <out>/runs)"
    )
    parser.add_argument(
        "--out", type=folder_argument, default=None, help="folder of RESULTS.md and its figures (default: docs)"
    )
    parser.add_argument(
        "--workers", type=workers_argument, default=2, help="training processes side by side (default 2)"
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="one tiny configuration on built-in data (digits), written into a new temporary folder unless --out",
    )
    args = parser.parse_args(argv)
    from .train import compose_config

    if args.out is None and args.smoke:  # a smoke run never rewrites the repository's docs
        args.out = Path(tempfile.mkdtemp(prefix="odeformer-smoke-"))
        print(f"odeformer-reproduce --smoke: writing into {args.out} (--out chooses the folder)")
    if args.runs is None:
        args.runs = files.folder(args.out / "runs", args.out) if args.out is not None else Path("runs") / "reproduce"
    if args.out is None:
        args.out = Path("docs")
    smoke = smoke_section()
    sections = {"smoke": smoke} if args.smoke else {name: known[name] for name in args.sections}
    figures = files.folder(args.out / "results", root=args.out)
    started = time.time()
    results_md = args.out / "RESULTS.md"
    split_combined_block(results_md, {"smoke": smoke.title, **{key: s.title for key, s in known.items()}})
    write_results(HEADER, results_md)
    sweep = Sweep(compose_config, args.workers)
    for key, section in sections.items():
        parts: list[str] = []
        results, costs = run_section(sweep, section, args.runs / key)
        if section.lr_grid:  # a learning-rate grid: its own tables and the coordinate check
            tables, *coordinates = transfer_section(section, results, args.runs / key, key, figures)
            parts += [
                f"### {section.title}\n\n{tables}",
                *([section.note + "\n"] if section.note else []),
                *coordinates,
            ]
            write_section(results_md, key, parts, ["smoke", *known], args.workers)
            continue
        markdown, cells = results_table(results, costs, len(section.seeds))
        parts.append(f"### {section.title}\n\n{markdown}\n")
        if section.note:
            parts.append(section.note + "\n")
        if section.plot:
            accuracy_plot(section.title, list(section.columns), cells, figures / f"{key}_accuracy.png")
            parts.append(f"![{key} accuracy against depth](results/{key}_accuracy.png)\n")
        if section.learned:
            learned, _ = section_coefficients(section, results, args.runs / key, figures / f"{key}_coefficients.png")
            if learned:
                parts.append(f"{learned}\n")
                parts.append(f"![{key} learned coefficient per layer](results/{key}_coefficients.png)\n")
        if section.atlas:
            parts.append(stability_atlas(section, results, args.runs / key, key, figures) + "\n")
        if section.refine:
            parts.append(refinement_table(section, results, args.runs / key, key, figures) + "\n")
        for column in section.diagnose:
            folder = f"{key}_oversmoothing_{slug(column)}" if column else f"{key}_oversmoothing"
            pngs = oversmoothing(section, column, results, args.runs / key, files.folder(figures / folder, figures))
            links = " ".join(f"[{p[:-4]}](results/{folder}/{p})" for p in pngs)
            where = f", {column}" if column else ""
            parts.append(f"Per layer{where} (seed 0, trained; numbers beside each PNG): {links}\n")
            if pngs:
                parts.append(f"![{key} token cosine per layer{where}](results/{folder}/{pngs[0]})\n")
        # after every section, so a stopped sweep keeps what it finished
        write_section(results_md, key, parts, ["smoke", *known], args.workers)
    print(f"wrote {files.printable(args.out / 'RESULTS.md')} ({(time.time() - started) / 60:.1f} min)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
