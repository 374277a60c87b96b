"""The sweep engine: jobs in, summaries out.

A :class:`Job` is a named ``odeformer-train`` command line (its overrides) and where it sits in a table (row,
column, seed). :meth:`Sweep.run` trains every job into ``<runs_dir>/<name>``, each composed in its worker process
and trained there with one thread (two workers fill the two cores of the reference machine), and returns one
:class:`Result` per job, in order. What makes a sweep safe to rerun:

- A run whose ``summary.json`` says it completed is not trained again, and an interrupted one resumes from its
  ``last.pt``, so a stopped sweep resumes where it stopped.
- A completed run is reused only if the configuration saved in its checkpoint is what its overrides compose to now
  (:meth:`Sweep.drift`): a changed default stops the sweep with one line naming the run and the setting, instead of
  putting another run's numbers in a table.
- A job whose overrides (in any order) a completed run elsewhere under the same root was made of is linked to that
  run rather than trained twice (``overrides.json`` beside each run says what it is made of).
- One Ctrl-C or SIGTERM stops the sweep: no job starts after it, the running ones save their checkpoints, and
  :class:`Interrupted` is raised; a second signal while waiting kills the workers. Nothing is left running.

:meth:`Sweep.step_costs` measures training steps against a baseline row side by side in one worker process (the
models taking turns, one thread), for comparisons at equal compute. The engine composes through the function it is
given (``compose``: overrides to a resolved config, :func:`odeformer.app.commands.train.compose_config` for the
commands), so it imports nothing of Hydra and nothing of the commands; a table of jobs (a section of
``odeformer-reproduce``) is :mod:`odeformer.app.run.sections`'s.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import signal
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from .. import files
from ..reporting.labels import flatten
from .bounds import MAX_COST

Compose = Callable[[list[str]], dict[str, Any]]
"""Overrides to the resolved config (plain containers) ``odeformer-train`` would run with them."""


class Job(NamedTuple):
    """One run of a sweep: its folder's ``name``, its place in a table (``row``, ``column``, ``seed``) and the
    overrides that make it."""

    name: str
    row: str
    column: str
    seed: int
    overrides: list[str]


class Result(NamedTuple):
    """A job and the summary its run wrote (``summary.json``)."""

    name: str
    row: str
    column: str
    seed: int
    overrides: list[str]
    summary: dict[str, Any]


class Interrupted(Exception):
    """The sweep was stopped by a signal (``signum``); the running jobs saved their checkpoints (``saved``)."""

    def __init__(self, signum: int, saved: bool = True):
        super().__init__(signum, saved)
        self.signum, self.saved = signum, saved


HOW_STARTED = {"train.out_dir", "train.resume", "train.progress"}  # where and how a run was started, not what it is


@dataclass(frozen=True)
class Sweep:
    """Trains jobs in ``workers`` processes (1: in this process, one after the other), composing each job's
    overrides with ``compose``."""

    compose: Compose
    workers: int = 2

    def run(
        self, jobs: list[Job], runs_dir: Path, progress: Progress | None = None, keep_diverged: bool = False
    ) -> list[Result]:
        """Train every job into ``runs_dir / job.name`` (reusing finished runs); one :class:`Result` per job. Each
        run's end is said by ``progress`` (one :class:`Progress` may count the runs of several calls), else by a
        :class:`Progress` of these jobs. With ``keep_diverged`` (a learning-rate grid, whose largest rates may
        diverge), a run that diverges writes a summary saying so (``status: diverged``, no metric) that a rerun
        reuses, and the sweep goes on; without, its one-line error stops the sweep."""
        runs_dir = files.folder(runs_dir, root=Path(runs_dir).parent)  # the table's folder: not a link
        _reuse(jobs, runs_dir, runs_dir.parent)
        for name, _, _, _, overrides in jobs:  # what each run is made of, for reuse by other tables
            if not _reused(runs_dir / name, runs_dir.parent):
                made = files.folder(runs_dir / name, runs_dir)
                files.write_text(made / "overrides.json", json.dumps(overrides) + "\n")
        work = [(name, overrides, str(runs_dir / name)) for name, _, _, _, overrides in jobs]
        train = functools.partial(_train, compose=self.compose, keep_diverged=keep_diverged)
        said = progress if progress is not None else Progress(len(work))
        if self.workers == 1:
            summaries = []
            for job in work:
                summaries.append(said(job[0], train(job)))
                if summaries[-1].get("status") == "interrupted":  # the job saved its checkpoint: the sweep stops
                    raise Interrupted(int(summaries[-1].get("signal") or signal.SIGINT))
        else:
            summaries = _in_pool(train, work, self.workers, said)
        return [Result(*job, summary) for job, summary in zip(jobs, summaries)]

    def drift(self, run_dir: Path, overrides: list[str]) -> list[str]:
        """Where a finished run's configuration (saved in its checkpoint) and what its overrides compose to now
        disagree, as ``key: then → now`` (:func:`config_drift`)."""
        return config_drift(Path(run_dir), overrides, self.compose)

    def step_costs(
        self,
        fixed: list[str],
        rows: dict[str, list[str]],
        columns: dict[str, list[str]],
        runs_dir: Path,
        baseline: str = "diffusion",
        rounds: int = 7,
    ) -> dict[str, float]:
        """Per row other than ``baseline``, its training step's time over the baseline's, measured side by side in
        one worker process with one thread (the rows' models, built from seed 0, take turns step by step,
        ``rounds`` times per column; the median over the columns). Kept in ``<runs_dir>/costs.json`` with what was
        measured (the overrides and the rounds), so that a rerun reads the same numbers and a changed table is
        measured again. Empty without a baseline and another row."""
        if baseline not in rows or len(rows) < 2:
            return {}
        path = files.folder(runs_dir, root=Path(runs_dir).parent) / "costs.json"
        measured = {"fixed": fixed, "rows": rows, "columns": columns, "rounds": rounds}
        if baseline != "diffusion":
            measured["baseline"] = baseline
        if path.exists():
            saved = read_json(path)
            if isinstance(saved, dict) and "costs" not in saved and set(saved) == set(rows) - {baseline}:
                saved = {"measured": measured, "costs": _checked_costs(path, saved, set(rows) - {baseline})}
                files.write_text(path, json.dumps(saved, indent=2, ensure_ascii=False) + "\n")  # adopted once
            if isinstance(saved, dict) and saved.get("measured") == measured:
                return _checked_costs(path, saved.get("costs"), set(rows) - {baseline})
        measure = functools.partial(_measure_costs, compose=self.compose)
        (costs,) = _in_pool(measure, [(fixed, rows, columns, rounds, baseline)], 1)
        if "interrupted" in costs:
            raise Interrupted(costs["interrupted"])
        _checked_costs(path, costs, set(rows) - {baseline})
        files.write_text(path, json.dumps({"measured": measured, "costs": costs}, indent=2, ensure_ascii=False) + "\n")
        return costs

    def evaluations(self, fixed: list[str], rows: dict[str, list[str]]) -> dict[str, dict[str, Any]]:
        """Per row, the field evaluations per token of one forward of its model, built from seed 0 in a worker
        process (:func:`odeformer.app.run.cost.evaluations`): from the claims for a fixed-step scheme, measured over
        one training batch at initialisation for a continuous-depth one."""
        measure = functools.partial(_measure_evaluations, compose=self.compose)
        (counts,) = _in_pool(measure, [(fixed, rows)], 1)
        if "interrupted" in counts:
            raise Interrupted(counts["interrupted"])
        return counts

    def match_parameters(self, fixed: list[str], target: list[str], rows: dict[str, list[str]]) -> dict[str, Any]:
        """The parameter count of the model ``target``'s overrides make, and per row the width that brings its model's
        count nearest it (:func:`odeformer.app.run.controls.nearest_width`, in the key
        :func:`~odeformer.app.run.controls.width_key` names), each count read from a model built on the meta device
        (:func:`odeformer.app.run.builder.parameter_count`: nothing trained or allocated) in a worker process:
        ``{"target": N, "rows": {row: {"key", "step", "from", "width", "params"}}}``."""
        measure = functools.partial(_match_parameters, compose=self.compose)
        (matched,) = _in_pool(measure, [(fixed, target, rows)], 1)
        if "interrupted" in matched:
            raise Interrupted(matched["interrupted"])
        return matched


# -- in a worker ----------------------------------------------------------------------------------------------------

_IN_WORKER = False  # whether this process is a sweep's worker (set by _worker_start)
_PARENT: int | None = None  # the process that started this worker
_BUSY = False  # whether this worker runs a job now


def _worker_start(parent: int | None = None) -> None:
    """A worker process's signal handling: Ctrl-C or SIGTERM (to the process group, or forwarded by the parent)
    asks the running job to save its checkpoint and stop (the trainer's own handler while it trains, a pending stop
    it finds before that), and no job starts after it; nothing is printed from the worker.

    A worker dies with its ``parent``: a thread watches it, and once it is gone (killed with ``kill -9``, say) sends
    this worker SIGTERM, so the running job saves its checkpoint and stops; an idle worker, or one whose job has
    ended (:func:`_job`), then exits."""
    from . import trainer

    global _IN_WORKER, _PARENT
    _IN_WORKER, _PARENT = True, parent

    def stop(signum, frame):
        trainer.PENDING_STOP = signum
        if _orphaned() and not _BUSY:
            os._exit(128 + signum)

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, stop)
    if parent is not None:
        threading.Thread(target=_watch_parent, daemon=True, name="parent-watch").start()


def _orphaned() -> bool:
    return _PARENT is not None and os.getppid() != _PARENT


def _watch_parent() -> None:
    while not _orphaned():
        time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGTERM)


def _job(function: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    """A worker's job: while it runs the worker is busy; when it ends in a worker whose parent is gone, the worker
    exits (nobody is left to take the result, and no job comes after it)."""

    @functools.wraps(function)
    def job(*args: Any, **kwargs: Any) -> dict[str, Any]:
        global _BUSY
        _BUSY = True
        try:
            return function(*args, **kwargs)
        finally:
            _BUSY = False
            if _orphaned():
                os._exit(128 + signal.SIGTERM)

    return job


@_job
def _train(job: tuple[str, list[str], str], compose: Compose, keep_diverged: bool = False) -> dict[str, Any]:
    """Worker: compose and train one configuration (one thread); return its summary (see :meth:`Sweep.run` for
    ``keep_diverged``)."""
    import torch

    torch.set_num_threads(1)
    from . import launch, trainer

    name, overrides, out_dir = job
    if trainer.PENDING_STOP is not None:  # the sweep was stopped before this job began
        return {"status": "interrupted", "signal": trainer.PENDING_STOP}
    summary = read_json(Path(out_dir) / "summary.json") if (Path(out_dir) / "summary.json").exists() else None
    done = ("completed", "diverged") if keep_diverged else ("completed",)
    if isinstance(summary, dict) and summary.get("status") in done:
        checked_summary(Path(out_dir) / "summary.json", summary)  # what the tables read from it
        saved = summary.get("config") if summary["status"] == "diverged" else None
        drift = config_drift(Path(out_dir), overrides, compose, saved)
        if drift:
            raise ValueError(
                f"{out_dir} was trained with {'; '.join(drift)} (then → now): its overrides compose to another "
                "configuration today, so its numbers are not this run's; delete the folder to train it again."
            )
        return {**summary, REUSED: True}  # Progress takes the mark off: it counts no time for this run
    resume = ["train.resume=true"] if (Path(out_dir) / "last.pt").exists() else []  # an interrupted sweep
    config = compose([*overrides, *resume, "train.progress=false"])
    try:
        summary = launch.train(config, Path(out_dir), choose_threads=False)  # one thread: the workers fill the cores
    except trainer.TrainingDiverged as error:
        if not keep_diverged:
            raise
        what = str(error).split(": the dynamics diverged")[0]
        summary = {"status": "diverged", "what": what, "val": None, "test": None, "config": config}
        files.write_text(Path(out_dir) / "summary.json", json.dumps(summary, indent=2) + "\n")
    if summary.get("status") == "interrupted" and _IN_WORKER:  # signalled while training: no other job here
        trainer.PENDING_STOP = summary.get("signal") or signal.SIGINT
    return summary


@_job
def _measure_costs(
    job: tuple[list[str], dict[str, list[str]], dict[str, list[str]], int, str], compose: Compose
) -> dict[str, Any]:
    """Worker: per row, its training step's time over the baseline's (see :meth:`Sweep.step_costs`);
    ``{"interrupted": signum}`` if the sweep was stopped meanwhile."""
    import torch

    torch.set_num_threads(1)
    from . import trainer
    from .builder import build
    from .objectives import make_objective

    fixed, rows, columns, rounds, baseline = job
    per_column = []
    for column_overrides in columns.values():
        steps = {}
        for row, row_overrides in rows.items():
            config = compose([*fixed, *row_overrides, *column_overrides])
            torch.manual_seed(0)
            data, model, _ = build(config)
            objective = make_objective(data, model, config["data"]["batch_size"], 0, torch.device("cpu"))
            network = objective.network(model)  # what the trainer steps (e.g. the encoder and its task head)
            optimizer = torch.optim.AdamW(network.parameters(), lr=1e-4)

            def step(network=network, objective=objective, optimizer=optimizer):
                loss = objective.loss(network, objective.batch(0, 1))
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()

            step()  # warm-up
            steps[row] = step
        seconds: dict[str, list[float]] = {row: [] for row in steps}
        for _ in range(rounds):
            if trainer.PENDING_STOP is not None:
                return {"interrupted": trainer.PENDING_STOP}
            for row, step in steps.items():
                started = time.perf_counter()
                step()
                seconds[row].append(time.perf_counter() - started)
        base = statistics.median(seconds[baseline])
        per_column.append({row: statistics.median(times) / base for row, times in seconds.items()})
    return {row: statistics.median(c[row] for c in per_column) for row in rows if row != baseline}


@_job
def _measure_evaluations(job: tuple[list[str], dict[str, list[str]]], compose: Compose) -> dict[str, Any]:
    """Worker: per row, :func:`odeformer.app.run.cost.evaluations` of its model (see :meth:`Sweep.evaluations`)."""
    import torch

    torch.set_num_threads(1)
    from . import trainer
    from .builder import build
    from .cost import evaluations
    from .objectives import make_objective

    fixed, rows = job
    out: dict[str, Any] = {}
    for row, row_overrides in rows.items():
        if trainer.PENDING_STOP is not None:
            return {"interrupted": trainer.PENDING_STOP}
        config = compose([*fixed, *row_overrides])
        torch.manual_seed(0)
        data, model, _ = build(config)
        counted = evaluations(model)
        if counted["per_token"] is None:  # continuous depth: the solver chooses its steps; count one forward's
            objective = make_objective(data, model, config["data"]["batch_size"], 0, torch.device("cpu"))
            with torch.no_grad():
                objective.loss(objective.network(model), objective.batch(0, 1))
            counted = evaluations(model)
        out[row] = counted
    return out


@_job
def _match_parameters(job: tuple[list[str], list[str], dict[str, list[str]]], compose: Compose) -> dict[str, Any]:
    """Worker: the target's parameter count and each row's matched width (see :meth:`Sweep.match_parameters`)."""
    import copy

    import torch

    torch.set_num_threads(1)
    from . import trainer
    from .builder import parameter_count
    from .controls import nearest_width, width_key

    fixed, target, rows = job
    goal = parameter_count(compose([*fixed, *target]))
    out: dict[str, Any] = {}
    for row, row_overrides in rows.items():
        if trainer.PENDING_STOP is not None:
            return {"interrupted": trainer.PENDING_STOP}
        config = compose([*fixed, *row_overrides])
        key, step, now = width_key(config["model"])

        def count(width: int, config=config, key=key) -> int:
            widened = copy.deepcopy(config)
            widened["model"][key] = width
            return parameter_count(widened)

        width, params = nearest_width(count, goal, now, step)
        out[row] = {"key": key, "step": step, "from": now, "width": width, "params": params}
    return {"target": goal, "rows": out}


# -- reuse and drift ------------------------------------------------------------------------------------------------


def config_drift(run_dir: Path, overrides: list[str], compose: Compose, saved: Any = None) -> list[str]:
    """Where a finished run's configuration (saved in its checkpoint, or ``saved``: a diverged run's summary's)
    and what its overrides compose to now disagree, as ``key: then → now``. A changed default of an experiment or a
    group makes the same overrides mean another run; keys that only one side has (options added since) are not
    compared."""
    from .checkpoints import load_checkpoint
    from .identity import run_record
    from .upgrade import upgrade_config

    if saved is None:
        saved = run_record(load_checkpoint(run_dir / "last.pt")).get("config")
    saved = upgrade_config(saved)  # read as today's
    if not isinstance(saved, dict):
        raise ValueError(
            f"{run_dir / 'last.pt'} stores no config, so its run cannot be checked; delete the folder to "
            "train it again."
        )
    now = compose([*overrides, "train.progress=false"])
    then, now = flatten(saved), flatten({key: now[key] for key in saved if key in now})
    return [
        f"{key}: {then[key]!r} → {now[key]!r}"
        for key in sorted(then.keys() & now.keys())
        if key not in HOW_STARTED and then[key] != now[key]
    ]


def _reuse(jobs: list[Job], runs_dir: Path, runs_root: Path) -> None:
    """Link each job to a completed run of another table under ``runs_root`` made of the same overrides (in any
    order), so a cell that two tables share is trained once."""
    done: dict[frozenset[str], Path] = {}
    for summary in sorted(runs_root.glob("*/*/summary.json")):
        overrides = summary.parent / "overrides.json"
        if summary.parent.is_symlink() or summary.parent.parent.is_symlink() or not overrides.exists():
            continue  # only the engine's own runs are twins
        made, status = read_json(overrides), read_json(summary)
        if isinstance(made, list) and isinstance(status, dict) and status.get("status") == "completed":
            done.setdefault(frozenset(str(o) for o in made), summary.parent)
    for name, _, _, _, overrides in jobs:
        target, twin = runs_dir / name, done.get(frozenset(overrides))
        if twin is not None and not os.path.lexists(target) and twin.parent != runs_dir:
            files.folder(runs_dir, root=runs_root)
            target.symlink_to(os.path.relpath(twin, runs_dir), target_is_directory=True)


def _reused(path: Path, runs_root: Path) -> bool:
    """Whether the job folder ``path`` is a link :func:`_reuse` made (relative, to a real run folder of another table
    under ``runs_root``); any other link there is refused (:class:`~odeformer.app.files.UnsafeFile`): a run would be
    trained into, or read from, wherever it points."""
    if not path.is_symlink():
        return False
    real, root = Path(os.path.realpath(path)), Path(os.path.realpath(runs_root))
    twin = Path(runs_root) / real.relative_to(root) if root in real.parents else None
    if os.path.isabs(os.readlink(path)) or twin is None or len(twin.relative_to(runs_root).parts) != 2:
        raise files.UnsafeFile(f"{files.printable(path)} is a link out of the sweep's runs; nothing was written there.")
    if not (twin / "summary.json").is_file():
        raise files.UnsafeFile(f"{files.printable(path)} is a link to no finished run; nothing was written there.")
    return True


def read_json(path: Path) -> Any:
    """The JSON value of a run's small file (``summary.json``, ``overrides.json``, ``costs.json``): a regular file
    of at most a few megabytes (:func:`odeformer.app.files.read_text`); anything else is one line naming it."""
    try:
        return json.loads(files.read_text(path, limit=4 << 20))
    except json.JSONDecodeError as error:
        raise ValueError(f"{files.printable(path)} is not JSON ({error}); remove it (or its run) to redo it.") from None
    except RecursionError:  # JSON nested deeper than Python's parser recurses: no file the engine writes
        raise ValueError(
            f"{files.printable(path)} nests its JSON too deeply to be one of the engine's files (they nest a few "
            "levels); remove it (or its run) to redo it."
        ) from None


def checked_summary(path: Path, summary: dict[str, Any]) -> dict[str, Any]:
    """A finished run's summary (read from ``path``) as the tables read it: a completed run's ``metric`` a name and
    its ``test``, ``val``, ``wall_s`` and ``steps`` present; each of ``test``, ``val`` a finite number or null,
    ``wall_s`` a finite number of seconds from 0, ``steps`` a whole number from 0. Anything else is one line naming
    the file and the key."""
    completed = summary.get("status") == "completed"
    why = None
    if completed and not isinstance(summary.get("metric"), str):
        why = f"its metric is {str(summary.get('metric'))[:40]!r}, not a metric's name"
    for key, low, null in (("test", -math.inf, True), ("val", -math.inf, True), ("wall_s", 0.0, False)):
        value = summary.get(key, ...)
        if why is None and (completed or value is not ...) and not (null and value is None or _real(value, low)):
            why = f"its {key} is {'missing' if value is ... else str(value)[:40]}"
    steps = summary.get("steps", ...)
    if why is None and (completed or steps is not ...) and not (_real(steps, 0) and isinstance(steps, int)):
        why = f"its steps is {'missing' if steps is ... else str(steps)[:40]}, not a whole number of steps"
    if why is not None:
        raise ValueError(
            f"{files.printable(path)} says its run {summary.get('status')} but {why}: a completed run names its "
            "metric, a finished run's test and val are finite numbers (or null), its wall_s a finite number of "
            "seconds from 0 and its steps a whole number; delete the run's folder to train it again."
        )
    return summary


def _real(value: Any, low: float) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= low


def _checked_costs(path: Path, costs: Any, rows: set[str]) -> dict[str, float]:
    """Step costs (``costs.json``'s, or just measured): one per row, each a finite number within
    ``[1 / MAX_COST, MAX_COST]`` of the baseline's; anything else is one line naming the file."""
    good = isinstance(costs, dict) and set(costs) == rows
    good = good and all(_real(v, 1 / MAX_COST) and v <= MAX_COST for v in costs.values())
    if not good:
        raise ValueError(
            f"{files.printable(path)} holds step costs {str(costs)[:80]}: each row's must be a number from "
            f"{1 / MAX_COST:g} to {MAX_COST:g} (its step's time over the baseline's); remove the file to measure again."
        )
    return costs


# -- the pool -------------------------------------------------------------------------------------------------------


REUSED = "reused"
"""The mark :func:`_train` puts on the summary of a finished run it reused; :class:`Progress` takes it off."""


class Progress:
    """Says, as each of ``total`` runs ends, ``run i of N done`` with its name and status, and about how long the rest
    will take: the time so far over the runs trained so far (a reused run, marked :data:`REUSED`, counts for none)."""

    def __init__(self, total: int):
        self.total, self.done, self.trained = total, 0, 0
        self.started = time.monotonic()

    def __call__(self, name: str, summary: dict[str, Any]) -> dict[str, Any]:
        now = time.monotonic()
        self.done, self.trained = self.done + 1, self.trained + (not summary.pop(REUSED, False))
        left = (now - self.started) / self.trained * (self.total - self.done) if self.trained else 0
        rest = f"; about {left / 60:.1f} min left" if self.done < self.total and self.trained else ""
        print(
            f"run {self.done} of {self.total} done: {files.printable(name)} ({summary.get('status')}){rest}", flush=True
        )
        return summary


def _in_pool(
    function: Callable[[Any], dict[str, Any]], work: list[Any], workers: int, said: Progress | None = None
) -> list[dict[str, Any]]:
    """``function`` of each of ``work`` in ``workers`` processes (each ended by ``said``, when given, as it ends).
    One Ctrl-C or SIGTERM stops the sweep: no job starts after it, the running ones save their checkpoints (the
    signal is forwarded to them) and are waited for, then :class:`Interrupted`; a second signal while waiting kills
    the workers. A worker whose parent is killed (``kill -9``) stops too (:func:`_worker_start`). Nothing is left
    running."""

    def on_term(signum, frame):
        raise Interrupted(signum)

    pool = ProcessPoolExecutor(max_workers=workers, initializer=_worker_start, initargs=(os.getpid(),))
    previous = signal.signal(signal.SIGTERM, on_term)
    futures = [pool.submit(function, job) for job in work]
    try:
        for future in as_completed(futures):
            summary = future.result()
            if summary.get("status") == "interrupted":
                raise Interrupted(int(summary.get("signal") or signal.SIGINT))
            if said is not None:
                said(work[futures.index(future)][0], summary)
        return [future.result() for future in futures]
    except (KeyboardInterrupt, Interrupted) as error:
        signum = error.signum if isinstance(error, Interrupted) else signal.SIGINT
        for future in futures:
            future.cancel()
        processes = list(getattr(pool, "_processes", {}).values())
        for process in processes:  # the group may not have been signalled (kill PID): pass it on
            with contextlib.suppress(OSError):
                os.kill(process.pid, signum)
        try:
            wait([f for f in futures if not f.cancelled()])
        except (KeyboardInterrupt, Interrupted):  # a second signal: stop now
            for process in processes:
                process.kill()
            raise Interrupted(signum, saved=False) from None
        raise Interrupted(signum) from None
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        signal.signal(signal.SIGTERM, previous)
