"""Checkpoints and run directories: atomic writes, safe reads, and the check made before anything is written.

A checkpoint is a ``dict`` saved with ``torch.save`` and read back with ``weights_only=True`` (never unpickling code);
its ``format`` key names this layout. A run directory holds at most one run: starting a run where one exists, or
resuming one that is not there, is refused before anything is written.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

FORMAT = "odeformer-checkpoint-1"


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be read (truncated, foreign, or from another format)."""


class RunDirectoryError(RuntimeError):
    """The run directory is not in the state the settings ask for (a run already there, or none to resume)."""


def save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` to ``path`` atomically: a reader, or a kill -9, sees the old file or the new one, not half."""
    tmp = path.with_name(path.name + ".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Read a checkpoint with ``weights_only=True`` (never unpickles code); one-line error if it is not ours."""
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # truncated zip, foreign pickle, ...
        reason = " ".join(str(error).split())[:160]
        raise CheckpointError(
            f"{path} is not a readable checkpoint ({type(error).__name__}: {reason}); move it away or start a new run."
        ) from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not an {FORMAT} file; move it away or start a new run.")
    return payload


def check_run_directory(out_dir: Path, resume: bool) -> None:
    """Refuse to write over an earlier run, or to resume one that is not there; called before anything is written."""
    last = out_dir / "last.pt"
    if resume and not last.exists():
        raise RunDirectoryError(
            f"train.resume=true continues an existing run, but {out_dir} holds none (no last.pt); start the run "
            "without train.resume, or point train.out_dir at a stopped run's directory."
        )
    if not resume and (last.exists() or (out_dir / "summary.json").exists()):
        raise RunDirectoryError(
            f"{out_dir} already holds a run; pass train.resume=true to continue it or choose another train.out_dir."
        )
