"""Checkpoints and run directories: atomic writes, safe reads, and the check made before anything is written.

A checkpoint is a ``dict`` saved with ``torch.save`` and read back with ``weights_only=True`` (never unpickling code);
its ``format`` key names this layout. A run directory holds at most one run: starting a run where one exists,
resuming one that is not there, or resuming one with a config other than its own (beyond :data:`RESUME_MAY_CHANGE`)
is refused before anything is written.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any

import torch
import yaml

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


RESUME_MAY_CHANGE = (
    "train.max_steps",  # training longer is the usual reason to resume (the cosine schedule stretches to it)
    "train.resume",
    "train.out_dir",
    "train.device",
    "train.compile",
    "train.progress",
    "train.log_every",  # how often the loss is logged
    "train.checkpoint_every",  # how often last.pt is written
    "data.root",  # where the same dataset's files are (Hydra's override_dirname leaves it out too)
    "model.checkpoint",  # activation checkpointing: recomputes the same layers in the backward pass
)
"""The config keys a resumed run may change: where and how it runs and what it writes, never what it computes
(anything else — the solver, the model, the data, the batch size, the optimiser and its schedule, the seed, the
evaluation — must be the run's own: the checkpoint's state only continues the run it came from)."""


def check_run_directory(out_dir: Path, resume: bool, config: dict[str, Any] | None = None) -> None:
    """Refuse to write over an earlier run, to resume one that is not there, or (given the resolved ``config`` of
    this command) to resume one with another config; called before anything is written."""
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
    if resume and config is not None:
        check_resume_config(out_dir, load_checkpoint(last), config)


def config_differences(stored: dict[str, Any], config: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """``(dotted key, stored value, new value)`` for every setting of two resolved configs that differs, outside
    :data:`RESUME_MAY_CHANGE`. An ``options`` node (a stepper's or a loader's arguments) is one setting, compared
    whole; a key only one side has elsewhere is a setting added (or removed) since the run started, not compared (as
    ``odeformer-reproduce``'s drift check does)."""
    a, b = _settings(stored), _settings(config)
    return [(k, a[k], b[k]) for k in a if k in b and k not in RESUME_MAY_CHANGE and a[k] != b[k]]


def _settings(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, dict) and node and not prefix.endswith("options."):
        return {k: v for key, value in node.items() for k, v in _settings(value, f"{prefix}{key}.").items()}
    return {prefix[:-1]: node}


def check_resume_config(out_dir: Path, payload: dict[str, Any], config: dict[str, Any]) -> None:
    """Refuse to resume the run whose ``last.pt`` holds ``payload`` with a ``config`` that differs from the one it was
    started with (beyond :data:`RESUME_MAY_CHANGE`): one line naming a few differing keys and the run's overrides."""
    stored = (payload.get("info") or {}).get("config")
    if stored is None:
        return
    differences = config_differences(stored, config)
    if not differences:
        return
    shown = ", ".join(f"{key} ({_show(old)} in the run, {_show(new)} now)" for key, old, new in differences[:3])
    more = f" and {len(differences) - 3} more" if len(differences) > 3 else ""
    overrides = run_overrides(out_dir, payload)
    if overrides is None:
        how = "the overrides it was started with"
    else:
        command = [o for o in overrides if not o.lstrip("+~").startswith(("train.out_dir=", "train.resume="))]
        command += [f"train.out_dir={out_dir}", "train.resume=true"]
        how = "its own overrides: odeformer-train " + " ".join(shlex.quote(o) for o in command)
    raise RunDirectoryError(
        f"train.resume=true continues the run in {out_dir} with its own config, but this command changes {shown}"
        f"{more}; only {', '.join(RESUME_MAY_CHANGE)} may differ. Resume with {how}"
    )


def _show(value: Any) -> str:
    return repr(value) if isinstance(value, str) and not value else str(value)


def run_overrides(out_dir: Path, payload: dict[str, Any]) -> list[str] | None:
    """The command-line overrides the run in ``out_dir`` was last run with: those stored in its checkpoint, else (an
    older checkpoint) those of the first config snapshot, ``.hydra/<date>_<time>/overrides.yaml``; None if neither."""
    stored = (payload.get("info") or {}).get("overrides")
    if stored is not None:
        return [str(o) for o in stored]
    snapshots = sorted((out_dir / ".hydra").glob("*/overrides.yaml"))
    if not snapshots:
        return None
    try:
        overrides = yaml.safe_load(snapshots[0].read_text())
    except (OSError, yaml.YAMLError):
        return None
    return [str(o) for o in overrides] if isinstance(overrides, list) else None
