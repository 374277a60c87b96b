"""The sections of the reproduction sweep: tables of runs, each cell an ``odeformer-train`` command line, read from
data files.

A section is a table: rows (a solver and its options), columns (a depth, a split, ...) and seeds, on top of fixed
overrides; every cell and seed is a job of the sweep engine (:mod:`odeformer.app.run.sweep`), named by its row,
column and seed. The sections ``odeformer-reproduce`` runs are ``sweeps/results.yaml`` beside this module, in
``docs/RESULTS.md``'s order (:func:`results_sections`), and ``sweeps/smoke.yaml`` (:func:`smoke_section`); that
file's header says what each setting means.

A sections file is data, never code: it is read with YAML's safe loader (no tags, no objects), a setting is one of
:data:`SETTINGS`, an override may set a key of the ``solver``, ``model``, ``data`` or ``train`` group or choose an
``experiment`` (not Hydra's own settings, which could point it at other files), and a ``solver`` is a registered
name, never a ``module.Class`` path (nothing is imported because a file names it). A file that
breaks any of this is one line, :class:`SectionError`, naming the file and the key.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from .bounds import is_resolution
from .sweep import Job, Result, Sweep

MATCH_ABOVE = 1.1  # rows costing more than this many times diffusion's training time get a compute-matched row
SETTINGS = (
    "title", "fixed", "rows", "columns", "seeds", "note", "plot", "diagnose", "matched", "learned", "atlas", "refine",
    "depths", "lr_grid",
)  # fmt: skip
"""The settings a section may have (``title``, ``fixed`` and ``rows`` it must have)."""
GRID_EXCLUDES = ("columns", "plot", "diagnose", "matched", "learned", "atlas", "refine")
"""The settings a learning-rate grid (``depths`` and ``lr_grid``) takes none of: its columns are its grid points."""
GROUPS = ("solver", "model", "data", "train", "experiment")
"""What an override in a sections file may set: a key of these groups, or the group's option."""


@dataclass(frozen=True)
class Section:
    """A table of runs: every ``row`` x ``column`` x seed, on top of the ``fixed`` overrides.

    ``rows`` and ``columns`` map a label to the overrides that make it; ``plot`` draws accuracy against the columns
    (depths); ``diagnose`` names the columns whose seed-0 runs get per-layer diagnostics, one curve per row;
    ``learned`` names, per coefficient symbol (``λ``, ``α``), the known members (label: value) that the trained runs'
    learnable integrator coefficients are set beside, layer by layer
    (:func:`odeformer.app.reporting.learned.learned_coefficients`); ``atlas`` (the ``k`` of a refinement, e.g.
    ``[2, 4, 8]``) gives every row's seed-0 run its stability atlas and refinement (:mod:`odeformer.atlas`);
    ``refine`` (resolutions such as ``[0.5, 2, 4, 8]``) gives every row's seed-0 run its refinement alone, the
    metric at each resolution and at the ODE's solution, in one table.

    ``depths`` and ``lr_grid`` (given together) make a learning-rate transfer grid: the columns are every depth
    (``model.depth``) and every factor on the learning rate the row's overrides compose to (``train.lr``), so each
    row is trained at each depth and each learning rate (:meth:`grid`); such a section has no other columns.
    """

    title: str
    fixed: list[str]
    rows: dict[str, list[str]]
    columns: dict[str, list[str]] = field(default_factory=lambda: {"": []})
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    note: str = ""
    plot: bool = False
    diagnose: tuple[str, ...] = ()
    matched: bool = True
    learned: dict[str, dict[str, float]] = field(default_factory=dict)
    atlas: tuple[int, ...] = ()
    refine: tuple[float, ...] = ()
    depths: tuple[int, ...] = ()
    lr_grid: tuple[float, ...] = ()

    def grid(self, base_lr: float) -> dict[str, tuple[int, float, list[str]]]:
        """A learning-rate grid's columns for a row whose learning rate is ``base_lr``: label (``depth 4, lr ×0.25``)
        to its depth, its factor on ``base_lr`` and the overrides that make it; depth by depth, factors in order."""
        return {
            f"depth {depth}, lr ×{factor:g}": (
                depth,
                factor,
                [f"model.depth={depth}", f"train.lr={base_lr * factor:.6g}"],
            )
            for depth in self.depths
            for factor in self.lr_grid
        }

    def runs(self, base_lr: Callable[[list[str]], float] | None = None) -> list[Job]:
        """The sweep's job for every cell and seed: its run's name, row, column, seed and overrides. A learning-rate
        grid needs ``base_lr``: the learning rate a row's overrides (the fixed ones, then the row's) compose to."""
        if self.lr_grid and base_lr is None:
            raise ValueError(f"section {self.title!r}: a learning-rate grid needs each row's base learning rate")
        out = []
        for row, row_overrides in self.rows.items():
            columns = self.columns
            if self.lr_grid:
                base = base_lr([*self.fixed, *row_overrides])
                columns = {label: overrides for label, (_, _, overrides) in self.grid(base).items()}
            for column, column_overrides in columns.items():
                for seed in self.seeds:
                    name = slug(f"{row}__{column}__seed={seed}" if column else f"{row}__seed={seed}")
                    overrides = [*self.fixed, *row_overrides, *column_overrides, f"train.seed={seed}"]
                    out.append(Job(name, row, column, seed, overrides))
        names = [job[0] for job in out]
        if len(set(names)) < len(names):
            twin = next(job for job in out if names.count(job[0]) > 1)[0]
            rows = sorted({job[1] for job in out if job[0] == twin})
            raise ValueError(
                f"section {self.title!r}: rows {rows} share the run folder {twin!r}; give them labels that "
                "differ in letters, digits or _.=+-"
            )
        return out


def slug(text: str) -> str:
    """``text`` as a folder name: runs of other characters than letters, digits and ``_.=+-`` become one ``_``."""
    return re.sub(r"[^A-Za-z0-9_.=+-]+", "_", text).strip("_")


class SectionError(ValueError):
    """A sections file that cannot be read as sections; the message is one line naming the file and the key."""


def results_sections() -> dict[str, Section]:
    """The sections of ``docs/RESULTS.md``, by key, in the file's order (``sweeps/results.yaml``)."""
    return _packaged("results.yaml")


def smoke_section() -> Section:
    """The one tiny section ``odeformer-reproduce --smoke`` runs (``sweeps/smoke.yaml``)."""
    return _packaged("smoke.yaml")["smoke"]


@functools.cache
def _packaged(name: str) -> dict[str, Section]:
    with resources.as_file(resources.files(__package__) / "sweeps" / name) as path:
        return load_sections(path)


def load_sections(path: str | Path) -> dict[str, Section]:
    """The sections of a sections file, by key, in the file's order (see the module docstring for what it may
    hold); a file that breaks the format is a :class:`SectionError` naming the file and the key."""
    path = Path(path)
    try:
        tree = yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)  # a SafeLoader
    except OSError as error:
        raise SectionError(f"{path}: cannot be read ({error.strerror or error}).") from None
    except yaml.YAMLError as error:
        raise SectionError(f"{path}: not a sections file: {_yaml_problem(error)}.") from None
    if not isinstance(tree, dict) or not tree:
        raise SectionError(f"{path}: must map each section's key to its settings; it holds {_kind(tree)}.")
    sections = {}
    for key, node in tree.items():
        if not isinstance(key, str) or not re.fullmatch(r"[A-Za-z0-9_]+", key):
            raise SectionError(f"{path}: {key!r}: a section's key names its folder; use letters, digits and _.")
        sections[key] = _section(path, key, node)
    return sections


class _Loader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (the safe loader keeps the last silently)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} is given twice", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep)


def _yaml_problem(error: yaml.YAMLError) -> str:
    mark = getattr(error, "problem_mark", None)
    where = f" at line {mark.line + 1}" if mark is not None else ""
    problem = getattr(error, "problem", None) or str(error)
    return " ".join(f"{problem}{where}".split())


def _kind(value: Any) -> str:
    return "nothing" if value is None else f"a {type(value).__name__}"


def _section(path: Path, key: str, node: Any) -> Section:
    def fail(setting: str, problem: str) -> SectionError:
        return SectionError(f"{path}: {key}.{setting}: {problem}")

    if not isinstance(node, dict):
        raise SectionError(f"{path}: {key}: must be a mapping of settings ({', '.join(SETTINGS)}); got {_kind(node)}.")
    unknown = [name for name in node if name not in SETTINGS]
    if unknown:
        raise fail(str(unknown[0]), f"not a setting of a section; a section has {', '.join(SETTINGS)}.")
    missing = [name for name in ("title", "fixed", "rows") if name not in node]
    if missing:
        raise SectionError(f"{path}: {key}: missing {', '.join(missing)}.")
    title, note = node["title"], node.get("note", "")
    for setting, value in (("title", title), ("note", note)):
        if not isinstance(value, str) or (setting == "title" and not value.strip()):
            raise fail(setting, f"must be text, got {_kind(value)}.")
    fixed = _overrides(node["fixed"], lambda problem: fail("fixed", problem))
    rows = _table(node["rows"], "rows", fail)
    columns = _table(node["columns"], "columns", fail) if "columns" in node else {"": []}
    seeds = node.get("seeds", [0, 1, 2])
    if not isinstance(seeds, list) or not seeds or not all(_natural(s) for s in seeds) or len(set(seeds)) < len(seeds):
        raise fail("seeds", f"must be a list of distinct seeds (integers 0 or more), got {seeds!r}.")
    flags = {name: node.get(name, name == "matched") for name in ("plot", "matched")}
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise fail(name, f"must be true or false, got {value!r}.")
    if flags["plot"]:
        undated = [label for label in columns if not re.search(r"\d+$", label)]
        if undated:
            raise fail("plot", f"draws accuracy against depth: the column {undated[0]!r} does not end in a depth.")
    diagnose = node.get("diagnose", [])
    if not isinstance(diagnose, list) or not all(isinstance(c, str) for c in diagnose):
        raise fail("diagnose", f"must be a list of column labels, got {diagnose!r}.")
    strange = [c for c in diagnose if c not in columns]
    if strange:
        raise fail("diagnose", f"{strange[0]!r} is not one of the columns ({', '.join(map(repr, columns))}).")
    learned = node.get("learned", {})
    if not isinstance(learned, dict) or not all(
        isinstance(members, dict) and all(_number(v) for v in members.values()) for members in learned.values()
    ):
        raise fail("learned", "must map each coefficient's symbol to its known members (label: number).")
    atlas = node.get("atlas", [])
    if not isinstance(atlas, list) or not all(_natural(k) and k >= 2 for k in atlas):
        raise fail("atlas", f"must be a list of whole numbers of at least 2 (a refinement's k), got {atlas!r}.")
    refine = node.get("refine", [])
    if not isinstance(refine, list) or not all(is_resolution(k) for k in refine):
        raise fail(
            "refine", f"must be a list of resolutions (whole numbers from 2, or 1/m such as 0.5), got {refine!r}."
        )
    depths, lr_grid = _grid(node, fixed, rows, fail)
    section = Section(
        title,
        fixed,
        rows,
        columns,
        list(seeds),
        note,
        flags["plot"],
        tuple(diagnose),
        flags["matched"] and not lr_grid,
        {str(symbol): {str(k): float(v) for k, v in members.items()} for symbol, members in learned.items()},
        tuple(atlas),
        tuple(float(k) for k in refine),
        depths,
        lr_grid,
    )
    try:
        section.runs(lambda overrides: 1.0)  # the names: a grid's labels do not depend on its base
    except ValueError as error:
        raise fail("rows", str(error)) from None
    return section


def _grid(node: dict, fixed: list[str], rows: dict[str, list[str]], fail) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """A learning-rate grid's ``depths`` and ``lr_grid`` (both or neither), checked against the other settings."""
    if "depths" not in node and "lr_grid" not in node:
        return (), ()
    for name in ("depths", "lr_grid"):
        if name not in node:
            other = "lr_grid" if name == "depths" else "depths"
            raise fail(other, f"a learning-rate grid needs both depths and lr_grid; {name} is missing.")
    depths, factors = node["depths"], node["lr_grid"]
    if not isinstance(depths, list) or len(depths) < 2 or not all(_natural(d) and d >= 1 for d in depths):
        raise fail("depths", f"must be a list of at least two depths (whole numbers from 1), got {depths!r}.")
    if len(set(depths)) < len(depths):
        raise fail("depths", f"must be distinct, got {depths!r}.")
    if not isinstance(factors, list) or len(factors) < 2 or not all(_number(f) and 0 < f < math.inf for f in factors):
        raise fail(
            "lr_grid", f"must be a list of at least two factors on the learning rate (above 0), got {factors!r}."
        )
    if len({float(f) for f in factors}) < len(factors) or 1 not in factors:
        raise fail(
            "lr_grid",
            f"must be distinct factors including 1 (the base learning rate, the coordinate check's), got {factors!r}.",
        )
    given = [name for name in GRID_EXCLUDES if name in node]
    if given:
        raise fail(
            given[0],
            "a learning-rate grid's columns are its depths and factors; it takes none of "
            + ", ".join(GRID_EXCLUDES)
            + ".",
        )
    for where, overrides in (("fixed", fixed), *((f"rows.{label}", o) for label, o in rows.items())):
        depth = next((o for o in overrides if o.lstrip("+~").startswith("model.depth=")), None)
        if depth is not None:
            raise fail(where, f"{depth!r}: the grid sets model.depth from depths; remove it.")
    return tuple(depths), tuple(sorted(float(f) for f in factors))


def _natural(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _table(node: Any, setting: str, fail) -> dict[str, list[str]]:
    """A rows or columns setting: label to overrides, at least one label."""
    if not isinstance(node, dict) or not node:
        raise fail(setting, f"must map each label to its overrides, got {_kind(node)}.")
    table = {}
    for label, overrides in node.items():
        if not isinstance(label, str):
            raise fail(setting, f"the label {label!r} must be text.")
        table[label] = _overrides(overrides, lambda problem, label=label: fail(f"{setting}.{label}", problem))
    return table


def _overrides(node: Any, fail) -> list[str]:
    """A list of ``odeformer-train`` overrides a sections file may give (see the module docstring)."""

    if not isinstance(node, list) or not all(isinstance(o, str) for o in node):
        raise fail(f"must be a list of overrides (key=value text), got {node!r}.")
    for override in node:
        key, equals, value = override.partition("=")
        group = key.lstrip("+~").split(".", 1)[0]
        if not equals or group not in GROUPS:
            raise fail(
                f"{override!r} is not an override a section may give: it sets a key of one of "
                f"{', '.join(GROUPS)} (key=value)."
            )
        if key.lstrip("+~") in ("solver", "solver.name", "solver.stepper") and "." in value:
            raise fail(
                f"{override!r}: a sections file names registered solvers only (solver=<name>); a path in a file is "
                "never imported."
            )
        if key.lstrip("+~") == "solver.stepper":
            raise fail(f"{override!r}: solver.stepper is no key; a sections file names a solver as solver=<name>.")
    return list(node)


def run_section(sweep: Sweep, section: Section, runs_dir: Path) -> tuple[list[Result], dict[str, float]]:
    """Measure the rows' step costs against diffusion's, train every cell (reusing finished runs), then the
    compute-matched rows the costs call for. A learning-rate grid trains its cells alone (no costs, no matched
    rows), and a run of it that diverges is a result of the grid (``status: diverged``), not the sweep's end."""
    if section.lr_grid:
        jobs = section.runs(lambda overrides: float(sweep.compose(overrides)["train"]["lr"]))
        return sweep.run(jobs, runs_dir, keep_diverged=True), {}
    costs = sweep.step_costs(section.fixed, section.rows, section.columns, runs_dir)
    results = sweep.run(section.runs(), runs_dir)
    extra = matched_jobs(section, results, costs)
    return results + (sweep.run(extra, runs_dir) if extra else []), costs


def matched_jobs(section: Section, results: list[Result], costs: dict[str, float]) -> list[Job]:
    """Compute-matched diffusion runs: for every row whose step costs more than 1.1× diffusion's (``costs``),
    diffusion with that many times its steps (rounded), in every column and seed; the run's name carries its steps."""
    if not section.matched or "diffusion" not in section.rows:
        return []
    steps = {(c, s): summary["steps"] for _, row, c, s, _, summary in results if row == "diffusion"}
    jobs = []
    for row, ratio in costs.items():
        if ratio <= MATCH_ABOVE:
            continue
        label = f"diffusion at {row}'s cost (×{ratio:.2f} steps)"
        for (column, seed), n in steps.items():
            more = max(1, round(n * ratio))
            name = slug(f"diffusion_matched_{row}__{column}__steps={more}__seed={seed}")
            overrides = [*section.fixed, *section.rows["diffusion"], *section.columns[column]]
            jobs.append(Job(name, label, column, seed, [*overrides, f"train.seed={seed}", f"train.max_steps={more}"]))
    return jobs
