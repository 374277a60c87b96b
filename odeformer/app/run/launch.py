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
from .builder import build
from .locks import lock_run_directory
from .resume import check_run_directory
from .stability import warn_unstable
from .trainer import LoopConfig, Trainer


def train(config: dict[str, Any], out_dir: Path, overrides: list[str] | None = None) -> dict[str, Any]:
    """Train the resolved ``config`` into ``out_dir``; return the summary (``{}`` on a rank other than 0).
    ``overrides`` (the command line's) are stored in the checkpoints, so that a resume with another config can be
    told the command to repeat. What a start or a resume must not do
    (:func:`~odeformer.app.run.resume.check_run_directory`) is refused before anything is written."""
    out_dir = Path(out_dir)
    loop = LoopConfig(**config["train"], batch_size=config["data"]["batch_size"])
    writer = int(os.environ.get("RANK", "0")) == 0  # under torchrun, rank 0 writes the run and holds its lock
    if loop.threads is not None:
        torch.set_num_threads(loop.threads)
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
