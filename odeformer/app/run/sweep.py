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
import os
import signal
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from ..reporting.labels import flatten

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

    def run(self, jobs: list[Job], runs_dir: Path) -> list[Result]:
        """Train every job into ``runs_dir / job.name`` (reusing finished runs); one :class:`Result` per job."""
        runs_dir = Path(runs_dir)
        _reuse(jobs, runs_dir, runs_dir.parent)
        for name, _, _, _, overrides in jobs:  # what each run is made of, for reuse by other tables
            record = runs_dir / name / "overrides.json"
            if not (runs_dir / name).is_symlink():
                record.parent.mkdir(parents=True, exist_ok=True)
                record.write_text(json.dumps(overrides) + "\n")
        work = [(name, overrides, str(runs_dir / name)) for name, _, _, _, overrides in jobs]
        train = functools.partial(_train, compose=self.compose)
        if self.workers == 1:
            summaries = []
            for job in work:
                summaries.append(train(job))
                if summaries[-1].get("status") == "interrupted":  # the job saved its checkpoint: the sweep stops
                    raise Interrupted(int(summaries[-1].get("signal") or signal.SIGINT))
        else:
            summaries = _in_pool(train, work, self.workers)
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
        path = Path(runs_dir) / "costs.json"
        measured = {"fixed": fixed, "rows": rows, "columns": columns, "rounds": rounds}
        if baseline != "diffusion":
            measured["baseline"] = baseline
        if path.exists():
            saved = json.loads(path.read_text())
            if "costs" not in saved and set(saved) == set(rows) - {baseline}:
                saved = {"measured": measured, "costs": saved}  # a file from before the key was kept: adopted once
                path.write_text(json.dumps(saved, indent=2, ensure_ascii=False) + "\n")
            if saved.get("measured") == measured:
                return saved["costs"]
        measure = functools.partial(_measure_costs, compose=self.compose)
        (costs,) = _in_pool(measure, [(fixed, rows, columns, rounds, baseline)], 1)
        if "interrupted" in costs:
            raise Interrupted(costs["interrupted"])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"measured": measured, "costs": costs}, indent=2, ensure_ascii=False) + "\n")
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


# -- in a worker ----------------------------------------------------------------------------------------------------

_IN_WORKER = False  # whether this process is a sweep's worker (set by _worker_start)


def _worker_start() -> None:
    """A worker process's signal handling: Ctrl-C or SIGTERM (to the process group, or forwarded by the parent)
    asks the running job to save its checkpoint and stop (the trainer's own handler while it trains, a pending stop
    it finds before that), and no job starts after it; nothing is printed from the worker."""
    from . import trainer

    global _IN_WORKER
    _IN_WORKER = True

    def stop(signum, frame):
        trainer.PENDING_STOP = signum

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, stop)


def _train(job: tuple[str, list[str], str], compose: Compose) -> dict[str, Any]:
    """Worker: compose and train one configuration (one thread); return its summary."""
    import torch

    torch.set_num_threads(1)
    from . import launch, trainer

    name, overrides, out_dir = job
    if trainer.PENDING_STOP is not None:  # the sweep was stopped before this job began
        return {"status": "interrupted", "signal": trainer.PENDING_STOP}
    summary_path = Path(out_dir) / "summary.json"
    if summary_path.exists() and json.loads(summary_path.read_text())["status"] == "completed":
        drift = config_drift(Path(out_dir), overrides, compose)
        if drift:
            raise ValueError(
                f"{out_dir} was trained with {'; '.join(drift)} (then → now): its overrides compose to another "
                "configuration today, so its numbers are not this run's; delete the folder to train it again."
            )
        return json.loads(summary_path.read_text())
    resume = ["train.resume=true"] if (Path(out_dir) / "last.pt").exists() else []  # an interrupted sweep
    config = compose([*overrides, *resume, "train.progress=false"])
    summary = launch.train(config, Path(out_dir), choose_threads=False)  # one thread: the workers fill the cores
    if summary.get("status") == "interrupted" and _IN_WORKER:  # signalled while training: no other job here
        trainer.PENDING_STOP = summary.get("signal") or signal.SIGINT
    return summary


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

# -- reuse and drift ------------------------------------------------------------------------------------------------


def config_drift(run_dir: Path, overrides: list[str], compose: Compose) -> list[str]:
    """Where a finished run's configuration (saved in its checkpoint) and what its overrides compose to now
    disagree, as ``key: then → now``. A changed default of an experiment or a group makes the same overrides mean
    another run; keys that only one side has (options added since) are not compared."""
    from .checkpoints import load_checkpoint
    from .identity import run_record
    from .upgrade import upgrade_config

    saved = upgrade_config(run_record(load_checkpoint(run_dir / "last.pt")).get("config"))  # read as today's
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
        if overrides.exists() and json.loads(summary.read_text()).get("status") == "completed":
            done.setdefault(frozenset(json.loads(overrides.read_text())), summary.parent)
    for name, _, _, _, overrides in jobs:
        target, twin = runs_dir / name, done.get(frozenset(overrides))
        if twin is not None and not target.exists() and twin.parent != runs_dir:
            runs_dir.mkdir(parents=True, exist_ok=True)
            target.symlink_to(os.path.relpath(twin, runs_dir), target_is_directory=True)


# -- the pool -------------------------------------------------------------------------------------------------------


def _in_pool(function: Callable[[Any], dict[str, Any]], work: list[Any], workers: int) -> list[dict[str, Any]]:
    """``function`` of each of ``work`` in ``workers`` processes. One Ctrl-C or SIGTERM stops the sweep: no job
    starts after it, the running ones save their checkpoints (the signal is forwarded to them) and are waited for,
    then :class:`Interrupted`; a second signal while waiting kills the workers. Nothing is left running."""

    def on_term(signum, frame):
        raise Interrupted(signum)

    pool = ProcessPoolExecutor(max_workers=workers, initializer=_worker_start)
    previous = signal.signal(signal.SIGTERM, on_term)
    futures = [pool.submit(function, job) for job in work]
    try:
        summaries = []
        for future in futures:
            summaries.append(future.result())
            if summaries[-1].get("status") == "interrupted":
                raise Interrupted(int(summaries[-1].get("signal") or signal.SIGINT))
        return summaries
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
