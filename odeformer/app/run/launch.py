"""One training run from a resolved config: its directory locked and checked, its model built, the loop run.

:func:`train` is what ``odeformer-train`` runs for each configuration it composes, and what the sweep engine's
workers run for each job. It takes the config as plain containers (``solver``, ``model``, ``data``, ``train``), so
nothing here needs Hydra. Under ``torchrun`` rank 0 writes the run and holds its directory's lock.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import torch

from ..reporting.tables import print_summary
from .bounds import check_config
from .builder import build
from .config import cores
from .locks import lock_run_directory
from .resume import check_run_directory
from .stability import warn_unstable
from .trainer import Trainer


def idle_threads() -> int:
    """The CPU threads that do not oversubscribe this machine now: its cores (those this process may use) less the
    1-minute load average, rounded, at least 1 and at most torch's own default. On an idle machine that is torch's
    default; on one whose cores are busy with other work, fewer (one thread per busy core competes for it, and torch's
    threads then wait on each other far more than they compute)."""
    count = cores()
    try:
        load = os.getloadavg()[0]
    except (OSError, AttributeError):  # no load average on this system: assume an idle machine
        load = 0.0
    return max(1, min(torch.get_num_threads(), count, int(count - load + 0.5)))


def use_idle_threads(how: str = "") -> None:
    """Compute with :func:`idle_threads`, saying so in one line when that is fewer than torch's default (``how``: the
    setting that chooses instead)."""
    default, chosen = torch.get_num_threads(), idle_threads()
    if chosen < default:
        busy = f"computing with {chosen} of {default} CPU threads: the machine's cores are busy"
        print(f"{busy} (load {os.getloadavg()[0]:.1f}){'; ' + how if how else ''}")
        torch.set_num_threads(chosen)


def train(
    config: dict[str, Any], out_dir: Path, overrides: list[str] | None = None, choose_threads: bool = True
) -> dict[str, Any]:
    """Train the resolved ``config`` into ``out_dir``; return the summary (``{}`` on a rank other than 0).
    ``overrides`` (the command line's) are stored in the checkpoints, so that a resume with another config can be
    told the command to repeat. What a start or a resume must not do
    (:func:`~odeformer.app.run.resume.check_run_directory`) is refused before anything is written. With
    ``train.threads`` null, the run computes with :func:`idle_threads` (unless ``choose_threads`` is false: a caller
    that set the thread count itself, as the sweep engine's workers do)."""
    out_dir = Path(out_dir)
    config = check_config(config)  # the one check: the builder and the loop take its value as it is
    loop = config.loop
    writer = int(os.environ.get("RANK", "0")) == 0  # under torchrun, rank 0 writes the run and holds its lock
    if loop.threads is not None:
        torch.set_num_threads(loop.threads)
    elif choose_threads and int(os.environ.get("WORLD_SIZE", "1")) == 1:
        use_idle_threads("train.threads=N chooses")
    with lock_run_directory(out_dir) if writer else contextlib.nullcontext():
        changes = check_run_directory(out_dir, loop.resume, config)
        torch.manual_seed(loop.seed)  # the model's initial weights are part of the run's seed
        data, model, record = build(config)
        if overrides is not None:
            record["overrides"] = list(overrides)
        warn_unstable(model)
        trainer = Trainer(model, data, loop, out_dir, record)
        trainer.resume_changes = changes
        summary = trainer.fit()
    if summary:
        print_summary(summary, out_dir)
    return summary
