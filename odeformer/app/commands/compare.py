"""``odeformer-compare``: schemes side by side on one task, at equal compute, over seeds.

    odeformer-compare my_schemes.DampedVerlet --against diffusion full_wave --experiment digits_vit \\
        --seeds 3 --budget evals --out DIR [overrides...]

What a row is, the budgets (``steps``, ``evals``, ``time``), what ``DIR`` holds and the two controls (``--match
params``, :mod:`odeformer.app.run.controls`; ``--lr-grid``) are in ``docs/comparing.md`` and
``docs/comparing_schemes.md``; the runs are jobs of the sweep engine (:mod:`odeformer.app.run.sweep`), the table and
its seed-spread lines :mod:`odeformer.app.reporting.comparison`'s.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import files
from ..reporting.comparison import comparison_markdown, seed_spread
from ..run.bounds import MAX_LR_GRID, MAX_SEEDS, check_lr_grid
from . import Parser, folder_argument, run, workers_argument

BUDGETS = ("evals", "time", "steps")
MATCHES = ("params",)
_OVERRIDE = re.compile(r"^[+~]*[A-Za-z_][\w.\-]*=")  # key=value, the key without a colon
_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$")
_NAME = re.compile(r"^[A-Za-z_]\w*$")


class CompareError(ValueError):
    """Bad input to the command: one line saying what was wrong and what is allowed."""


@dataclass(frozen=True)
class Row:
    """One scheme of the comparison: its ``label`` (the solver and its options), its own overrides and, for a
    class of one's own, its dotted path (``stepper``: what rebuilds its runs)."""

    label: str
    overrides: tuple[str, ...]
    stepper: str | None = None


def parse_scheme(text: str) -> Row:
    """A scheme as the command line gives it: ``name``, ``module.Class`` or either with ``:key=value`` options."""
    name, *options = text.split(":")
    if not (_NAME.match(name) or _DOTTED.match(name)):
        raise CompareError(
            f"scheme {text!r}: give a solver name (full_wave), a class of your own (module.Class), or either with "
            "options after colons (light_wave:theta0=2)"
        )
    overrides = [f"solver={name}"]
    shown = []
    for option in options:
        key, equals, value = option.partition("=")
        if not equals or not key or not re.match(r"^[A-Za-z_][\w.]*$", key):
            raise CompareError(
                f"scheme {text!r}: option {option!r} is not key=value (a solver option such as theta0=2, or a "
                "dotted key such as model.dt=0.5)"
            )
        own = "+" if _DOTTED.match(name) else ""  # a class of one's own: its options are new to the config
        overrides.append(f"{key}={value}" if "." in key else f"{own}solver.options.{key}={value}")
        shown.append(f"{key}={value}")
    return Row(" ".join([name, *shown]), tuple(overrides), name if _DOTTED.match(name) else None)


def split_words(words: list[str]) -> tuple[list[str], list[str]]:
    """The command line's words as (schemes, overrides): a word ``key=value`` whose key has no colon is an
    override, any other a scheme."""
    schemes, overrides = [], []
    for word in words:
        (overrides if _OVERRIDE.match(word) and ":" not in word.split("=", 1)[0] else schemes).append(word)
    return schemes, overrides


def budget_steps(budget: str, rows: list[str], base_steps: int, per_token: dict[str, float], costs: dict[str, float]):
    """Each row's training steps under ``budget``, the first row being the reference that trains ``base_steps``:
    ``steps`` the same, ``evals`` inversely to its evaluations per token (``per_token``), ``time`` inversely to its
    step cost over the reference's (``costs``, the reference absent). At least one step each."""
    reference = rows[0]
    out = {}
    for row in rows:
        if budget == "steps" or row == reference:
            out[row] = base_steps
        elif budget == "evals":
            out[row] = max(1, round(base_steps * per_token[reference] / per_token[row]))
        else:
            out[row] = max(1, round(base_steps / costs[row]))
    return out


def _parser() -> Parser:
    parser = Parser(
        prog="odeformer-compare",
        description=__doc__.splitlines()[0].strip("`").split("``: ")[-1],
        epilog="Example: odeformer-compare my_schemes.DampedVerlet --against diffusion full_wave "
        "--experiment digits_vit --seeds 3 --budget evals --out cmp train.max_steps=300. Add --match params for "
        "baselines of the scheme's parameter count and --lr-grid 0.5 1 2 for each row at its best learning rate; "
        "after the table a line per row says whether its difference from the first baseline exceeds the seed "
        "spread (Welch). docs/comparing_schemes.md explains each.",
    )
    parser.add_argument(
        "words",
        nargs="*",
        metavar="SCHEME | key=value",
        help="schemes (full_wave, module.Class, light_wave:theta0=2), then overrides every run takes",
    )
    parser.add_argument(
        "--against",
        nargs="*",
        default=["diffusion", "full_wave"],
        metavar="SCHEME",
        help="baselines, after the schemes; the first is the reference of the budget (default: diffusion full_wave)",
    )
    parser.add_argument("--experiment", default="digits_vit", help="the task's experiment config (default digits_vit)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 per row (default 3)")
    parser.add_argument("--budget", choices=BUDGETS, default="evals", help="what is equal across rows (default evals)")
    parser.add_argument(
        "--out", type=folder_argument, required=True, help="folder of comparison.md/.json, figures/, runs/, lr_grid/"
    )
    parser.add_argument(
        "--match",
        choices=MATCHES,
        default=None,
        help="params: widen (or narrow) every baseline's FFN width (model.mlp_hidden; model.dim in steps of heads "
        "without an FFN) to the parameter count of the first scheme, the nearest a whole width reaches",
    )
    parser.add_argument(
        "--lr-grid",
        nargs="*",
        default=None,
        metavar="F",
        help=f"factors of train.lr (e.g. 0.5 1 2; at most {MAX_LR_GRID}): each row trains one seed at each, keeps "
        "the rate with the best validation metric and trains its seeds at it (runs in lr_grid/)",
    )
    parser.add_argument(
        "--lr-depth",
        type=int,
        default=None,
        metavar="D",
        help="the depth the grid runs at for rows under model.parameterization=ode, their rate carried over "
        "(default: each row's own; under standard always the row's own)",
    )
    parser.add_argument(
        "--workers", type=workers_argument, default=2, help="training processes side by side (default 2)"
    )
    parser.add_argument("--rounds", type=int, default=7, help="timed steps per row for the step costs (default 7)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """The command: bad input, a refused checkpoint, a scheme that cannot be one and missing data are one line and
    exit 2; an interrupt says how to resume (:func:`odeformer.app.commands.run`)."""
    return run("odeformer-compare", lambda: _main(argv), sweeps=True)


def _refuse(message: str) -> None:
    raise CompareError(message)


@dataclass(frozen=True)
class Plan:
    """What a checked command line asks for: the ``rows``, the overrides every run takes (``fixed``), the first
    scheme and the baselines (``--match params`` widens those to that), and the grid's factors (or None)."""

    rows: list[Row]
    fixed: list[str]
    scheme: str | None
    baselines: list[str]
    factors: list[float] | None


def _check(args: argparse.Namespace) -> Plan:
    words, fixed = split_words(args.words)
    if args.seeds < 1:
        _refuse(f"--seeds must be a whole number ≥ 1, got {args.seeds}")
    if args.rounds < 1:
        _refuse(f"--rounds must be a whole number ≥ 1, got {args.rounds}")
    if not re.match(r"^[A-Za-z_][\w\-]*$", args.experiment):
        _refuse(
            f"--experiment takes an experiment config's name (digits_vit, shakespeare_char, ...), got "
            f"{args.experiment!r}"
        )
    if args.seeds > MAX_SEEDS:
        _refuse(f"--seeds {args.seeds} is more than the {MAX_SEEDS} seeds a row may have")
    factors = check_lr_grid(args.lr_grid) if args.lr_grid is not None else None
    if args.lr_depth is not None and args.lr_depth < 1:
        _refuse(
            f"--lr-depth must be a whole number ≥ 1 (the depth the learning-rate grid runs at), got {args.lr_depth}"
        )
    if args.lr_depth is not None and factors is None:
        _refuse("--lr-depth sets the depth the learning-rate grid runs at; give the grid too (--lr-grid 0.5 1 2)")
    for override in fixed:
        key = override.split("=", 1)[0].lstrip("+~")
        if key in ("solver", "experiment") or key.startswith("solver.") or key in ("train.seed", "train.out_dir"):
            _refuse(
                f"{override!r}: every run takes the overrides after the schemes, so they may not choose the solver, "
                "the experiment (--experiment), the seed (--seeds) or the run folder (--out)"
            )
    rows = [parse_scheme(text) for text in [*words, *args.against]]
    for row in rows:  # what the command sets for every run is no row's own
        for override in row.overrides[1:]:
            key = override.split("=", 1)[0]
            if key in ("experiment", "train.seed", "train.out_dir", "train.max_steps"):
                _refuse(
                    f"scheme {row.label!r}: {key} is set by the command for every run (--experiment, --seeds, --out, "
                    "and the budget from train.max_steps after the schemes), not by one row"
                )
    seen: dict[str, Row] = {}
    for row in rows:
        seen.setdefault(row.label, row)  # a scheme that is also a baseline is one row
    rows = list(seen.values())
    if len(rows) < 2:
        _refuse("give at least two schemes in all (the schemes and --against) to compare")
    for row in rows:  # a class of one's own: its name checked (nothing imported) before any run is made
        if row.stepper is not None:
            from ..run.schemes import check_scheme_name

            check_scheme_name(row.stepper, key="scheme")
    scheme = parse_scheme(words[0]).label if words else None
    baselines = [label for label in dict.fromkeys(parse_scheme(t).label for t in args.against) if label != scheme]
    if args.match == "params" and (scheme is None or not baselines):
        _refuse(
            "--match params widens the baselines (--against) to the parameter count of the first scheme: give a "
            "scheme before --against and at least one baseline that is not it"
        )
    return Plan(rows, [f"experiment={args.experiment}", *fixed], scheme, baselines, factors)


_TAKES_ONE = {"--out", "--experiment", "--seeds", "--budget", "--workers", "--rounds", "--match", "--lr-depth"}


def _without_overrides(argv: list[str]) -> tuple[list[str], list[str]]:
    """``argv`` less its overrides (``key=value`` words that are no option's value), and the overrides, so that
    ``--against``'s list ends where they begin."""
    rest, overrides = [], []
    for i, word in enumerate(argv):
        after_option = i > 0 and argv[i - 1] in _TAKES_ONE
        is_override = _OVERRIDE.match(word) and ":" not in word.split("=", 1)[0] and not word.startswith("-")
        (overrides if is_override and not after_option else rest).append(word)
    return rest, overrides


def _main(argv: list[str] | None = None) -> int:
    parser = _parser()
    rest, overrides = _without_overrides(list(sys.argv[1:] if argv is None else argv))
    args = parser.parse_intermixed_args(rest)
    args.words = [*args.words, *overrides]
    plan = _check(args)  # every usage error before anything heavy is imported
    rows, fixed = plan.rows, plan.fixed

    from ..run.bounds import check_config
    from ..run.controls import rate
    from ..run.sweep import Progress, Sweep
    from .train import compose_config

    by_label = {row.label: row for row in rows}
    overrides = {row.label: list(row.overrides) for row in rows}
    reference = rows[0].label if not args.against else parse_scheme(args.against[0]).label
    order = [reference, *(label for label in by_label if label != reference)]
    configs = {label: compose_config([*fixed, *overrides[label]]) for label in order}
    for label in order:  # every row's config as a run would check it, its grid's rates too, before any run starts
        check_config(configs[label])
        for factor in plan.factors or ():
            train = {**configs[label]["train"], "lr": rate(float(configs[label]["train"]["lr"]), factor)}
            check_config({**configs[label], "train": train})
    if args.match == "params":
        _check_widths(plan, by_label, configs)
    base_steps = int(configs[reference]["train"]["max_steps"])
    sweep = Sweep(compose_config, args.workers)
    files.refuse_entries(args.out, ["comparison.md", "comparison.json"])  # where it writes: a link or a folder now
    runs, _ = files.folder(args.out / "runs", args.out), files.folder(args.out / "figures", args.out)
    matched: dict[str, Any] = {}
    if args.match == "params":  # before the budget: the widened rows' evaluations and step costs are theirs
        matched = sweep.match_parameters(fixed, overrides[plan.scheme], {b: overrides[b] for b in plan.baselines})
        for label, found in matched["rows"].items():
            overrides[label].append(f"model.{found['key']}={found['width']}")
            configs[label] = compose_config([*fixed, *overrides[label]])
            check_config(configs[label])
    counted = sweep.evaluations(fixed, {label: overrides[label] for label in order})
    per_token = {label: counted[label]["per_token"] for label in order}
    costs = sweep.step_costs(
        fixed, {label: overrides[label] for label in order}, {"": []}, runs, baseline=reference, rounds=args.rounds
    )
    steps = budget_steps(args.budget, order, base_steps, per_token, costs)
    tags = {label: _width_tag(matched, label) for label in order}
    grid = _grid_plan(args, plan.factors, order, fixed, overrides, configs, steps, tags) if plan.factors else {}
    progress = Progress(len(order) * args.seeds + sum(len(row["jobs"]) for row in grid.values()))  # grid included
    if grid:
        _run_grid(sweep, grid, args.out, progress)
    jobs = [
        _job(label, tags[label], steps[label], seed, [*fixed, *overrides[label]], grid[label]["lr"] if grid else None)
        for label in order
        for seed in range(args.seeds)
    ]
    results = sweep.run(jobs, runs, progress)
    comparison = _comparison(args, overrides, order, reference, base_steps, steps, per_token, counted, costs, results)
    _controls(comparison, plan, matched, grid, configs)
    figures = _figures(results, runs, by_label, args.out)
    comparison["figures"] = figures
    files.write_text(args.out / "comparison.json", json.dumps(comparison, indent=2, ensure_ascii=False) + "\n")
    files.write_text(args.out / "comparison.md", comparison_markdown(comparison))
    print(comparison_markdown(comparison), end="")
    shown = files.printable(args.out)
    print(f"wrote {shown}/comparison.md, {shown}/comparison.json and {len(figures)} figures in {shown}/figures")
    return 0


def _check_widths(plan: Plan, rows: dict[str, Row], configs: dict[str, dict[str, Any]]) -> None:
    """A baseline that sets the width ``--match params`` sets is refused: the command chooses it."""
    from ..run.controls import width_key

    for label in plan.baselines:
        key = width_key(configs[label]["model"])[0]
        if any(o.split("=", 1)[0] == f"model.{key}" for o in rows[label].overrides[1:]):
            _refuse(
                f"scheme {label!r}: --match params sets model.{key} of every baseline to match "
                f"{plan.scheme!r}'s parameter count; drop the row's own model.{key}"
            )


def _width_tag(matched: dict[str, Any], label: str) -> str:
    """A matched row's width in its runs' folder names (a wider baseline is another run)."""
    found = (matched.get("rows") or {}).get(label) if matched else None
    return f"__{found['key']}={found['width']}" if found else ""


def _job(label: str, tag: str, steps: int, seed: int, overrides: list[str], lr: float | None = None) -> Any:
    """The sweep job of one row's seed: its overrides with the budget's steps, the seed and (from a grid) the rate."""
    from ..run.sections import slug
    from ..run.sweep import Job

    rate = [] if lr is None else [f"train.lr={lr!r}"]
    name = slug(f"{label}{tag}{'' if lr is None else f'__lr={lr!r}'}__steps={steps}__seed={seed}")
    return Job(name, label, "", seed, [*overrides, f"train.max_steps={steps}", f"train.seed={seed}", *rate])


def _grid_plan(args, factors, order, fixed, overrides, configs, steps, tags) -> dict[str, dict[str, Any]]:
    """Per row, its learning-rate grid: the rates (``train.lr`` times each factor), the depth it runs at and why
    (:func:`odeformer.app.run.controls.grid_depth`), and its jobs (seed 0, the row's budget of steps)."""
    from ..run.controls import grid_depth, rate

    grid = {}
    for label in order:
        model = configs[label]["model"]
        depth, where = grid_depth(model, args.lr_depth)
        extra = [] if depth == model["depth"] else [f"model.depth={depth}"]
        base = float(configs[label]["train"]["lr"])
        rates = [rate(base, factor) for factor in factors]
        tag = f"{tags[label]}{'' if not extra else f'__depth={depth}'}"
        jobs = [_job(label, tag, steps[label], 0, [*fixed, *overrides[label], *extra], lr) for lr in rates]
        grid[label] = {"factors": factors, "rates": rates, "base": base, "depth": depth, "where": where, "jobs": jobs}
    return grid


def _run_grid(sweep, grid: dict[str, dict[str, Any]], out: Path, progress: Any) -> None:
    """Train every row's grid (one sweep, under ``out/lr_grid``) and keep, per row, the rate whose run had the best
    validation metric (``lr``, ``factor``, the runs' ``val``); a row none of whose grid runs finished keeps
    ``train.lr``."""
    from ..run.controls import best_rate

    jobs = [job for row in grid.values() for job in row["jobs"]]
    results = sweep.run(jobs, files.folder(out / "lr_grid", out), progress)
    for label, row in grid.items():
        summaries = [r.summary for r in results if r.row == label]
        best = best_rate(row["rates"], summaries)
        row["val"] = [s.get("val") for s in summaries]
        row["factor"] = None if best is None else row["factors"][row["rates"].index(best)]
        row["lr"] = row["base"] if best is None else best


def _controls(comparison, plan: Plan, matched, grid, configs) -> None:
    """Each row of ``comparison`` with its learning rate (and the grid that chose it), the width it was matched at,
    and its difference from the reference against the seed spread; the comparison with what was matched and the
    grid's factors."""
    rows = comparison["rows"]
    reference = next(row for row in rows if row["solver"] == comparison["reference"])
    for row in rows:
        label = row["solver"]
        chosen = grid.get(label)
        row["lr"] = chosen["lr"] if chosen else float(configs[label]["train"]["lr"])
        if chosen:
            row["overrides"].append(f"train.lr={chosen['lr']!r}")
            keep = ("factors", "rates", "val", "factor", "depth", "where")
            row["lr_grid"] = {key: chosen[key] for key in keep}
        if matched and label in matched["rows"]:
            row["match"] = {**matched["rows"][label], "target": matched["target"]}
        if row is not reference:
            row["against_reference"] = seed_spread(reference["tests"], row["tests"])
    if matched:
        comparison["match"] = {"kind": "params", "scheme": plan.scheme, "target": matched["target"]}
    if grid:
        comparison["lr_grid"] = {"factors": plan.factors}


def _comparison(
    args, overrides, order, reference, base_steps, steps, per_token, counted, costs, results
) -> dict[str, Any]:
    rows = []
    metric = None
    for label in order:
        mine = [r for r in results if r.row == label]
        summaries = [r.summary for r in mine]
        failed = [r.name for r in mine if r.summary.get("status") != "completed" or r.summary.get("test") is None]
        tests = [s["test"] for s in summaries if s.get("status") == "completed" and s.get("test") is not None]
        metric = metric or next((s.get("metric") for s in summaries if s.get("metric")), None)
        evals = per_token[label]
        rows.append(
            {
                "solver": label,
                "overrides": [*overrides[label], f"train.max_steps={steps[label]}"],
                "mean": statistics.fmean(tests) if tests else None,
                "std": statistics.stdev(tests) if len(tests) > 1 else None,  # undefined for one seed
                "tests": tests,
                "seeds": [r.seed for r in mine],
                "failed": failed,
                "budget": {
                    "kind": args.budget,
                    "steps": steps[label],
                    "evals_per_token_per_step": evals,
                    "evals_per_token": None if evals is None else evals * steps[label],
                    "evaluations_source": counted[label]["source"],
                },
                "step_cost": 1.0 if label == reference else costs.get(label),
                "params": summaries[0].get("params") if summaries else None,
                "wall_s": statistics.fmean(s.get("wall_s") or 0.0 for s in summaries) if summaries else None,
            }
        )
    return {
        "experiment": args.experiment,
        "reference": reference,
        "budget": args.budget,
        "reference_steps": base_steps,
        "metric": metric,
        "seeds": args.seeds,
        "rows": rows,
    }


def _figures(results, runs: Path, rows: dict[str, Row], out: Path) -> list[str]:
    """The per-layer diagnostics of every row's seed-0 run, one curve per row labelled by its solver and options,
    into ``out/figures``; the files written."""
    from ..reporting.diagnostics import diagnose
    from ..run.builder import load_run

    chosen = [r for r in results if r.seed == 0 and r.summary.get("status") == "completed"]
    loaded = []
    for result in chosen:
        data, model, _ = load_run(runs / result.name, stepper=rows[result.row].stepper)
        loaded.append((result.row, data, model))
    if not loaded:
        return []
    written = diagnose(loaded, files.folder(out / "figures", root=out), size=64)
    return [f"figures/{name}" for name in written if name.endswith(".png")]


if __name__ == "__main__":
    sys.exit(main())
