"""What happened to a run beyond its metrics: ``history.jsonl``, and the divergences it records.

A run appends an event when it stops for divergence (a non-finite loss, or a non-finite state that is then not
saved: :func:`non_finite`) and when a resume after one changes its learning rate or clip; :func:`diverged_after`
tells a resume whether the checkpoint it continues was followed by such a stop.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from .. import files

HISTORY = "history.jsonl"  # what happened to a run beyond its metrics: a stop for divergence, a resume's changes


def record(out_dir: Path, event: dict[str, Any]) -> None:
    """Append ``event`` (with the time) to the run's ``history.jsonl``."""
    row = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), **event}
    with files.append(Path(out_dir) / HISTORY) as f:
        f.write(json.dumps(row, default=str) + "\n")


def history(out_dir: Path) -> list[dict[str, Any]]:
    """The events of ``history.jsonl`` (a line cut short by a kill, or any other that is not a JSON object, nested
    too deeply for the parser included, is skipped)."""
    path = Path(out_dir) / HISTORY
    if not os.path.lexists(path):
        return []
    rows = []
    for line in files.read_text(path).splitlines():  # a regular file only (a FIFO never ends a read)
        with contextlib.suppress(json.JSONDecodeError, RecursionError):
            row = json.loads(line)
            if isinstance(row, dict):
                rows.append(row)
    return rows


def diverged_after(out_dir: Path, step: int) -> dict[str, Any] | None:
    """The stop for divergence recorded after ``step`` (the checkpoint's): the run's last divergence, if no checkpoint
    was written since (a resume after it that was stopped before its first save leaves it in force)."""
    diverged = [event for event in history(out_dir) if event.get("event") == "diverged"]
    last = diverged[-1] if diverged else None
    if last and isinstance(last.get("step"), int) and last["step"] > step:
        return last
    return None


def non_finite(payload: dict[str, Any]) -> str | None:
    """Where a checkpoint's model or optimiser state holds a NaN or infinity (``"optimizer"``, ``"model"``), or None."""
    for key in ("model", "optimizer"):
        for tensor in _tensors(payload.get(key)):
            if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                return key
    return None


def _tensors(node: Any) -> Iterator[torch.Tensor]:
    if isinstance(node, torch.Tensor):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from _tensors(value)
    elif isinstance(node, (list, tuple)):
        for value in node:
            yield from _tensors(value)
