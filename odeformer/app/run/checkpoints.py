"""Checkpoints: written atomically, read without unpickling code.

A checkpoint is a ``dict`` saved with ``torch.save`` and read back by :func:`load_checkpoint`, the package's one
checkpoint reader, with ``weights_only=True``: tensors and plain values only, never a pickled object that could run
code (a file naming any other global is refused in one line). Its ``format`` key names this layout. A write goes to a
temporary file created exclusively beside it (never through a link planted there, :mod:`odeformer.app.files`) that
is renamed over the old one, so a reader or a kill sees the old checkpoint or the new one, never
half of one; a full disk is one line and leaves the previous checkpoint as it was.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
from pathlib import Path
from typing import Any

import torch

from .. import files

FORMAT = "odeformer-checkpoint-2"
"""The layout this version writes: the run record under ``run_record``."""
READABLE = ("odeformer-checkpoint-1", FORMAT)
"""The layouts :func:`load_checkpoint` reads: the earlier one kept the run record under ``info``
(:func:`odeformer.app.run.identity.run_record` reads either)."""


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be read (truncated, foreign, or from another format)."""


class CheckpointWriteError(CheckpointError):
    """A checkpoint that could not be written (the disk is full); the previous one is intact."""


def save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` to ``path`` atomically: a reader, or a kill -9, sees the old file or the new one, not half.
    A full disk is a one-line :class:`CheckpointWriteError`; the half-written temporary file is removed and the
    previous checkpoint left as it was."""
    path = Path(path)
    try:
        files.replace(path, lambda f: torch.save(payload, f))
    except (OSError, RuntimeError) as error:
        if isinstance(error, files.UnsafeFile):
            raise
        if _disk_full(error):
            kept = "the previous checkpoint is intact" if path.exists() else "no earlier checkpoint was there"
            raise CheckpointWriteError(
                f"no space left on device while writing {path}; {kept} (free some space, then resume)."
            ) from None
        if isinstance(error, OSError):
            raise CheckpointWriteError(
                f"cannot write {path} ({error_text(error, 'writing it')}); "
                f"{'the previous checkpoint is intact' if path.exists() else 'nothing was written'}."
            ) from None
        raise
    for stale in files.stale_temporaries(path):  # what a write killed mid-way left (the run's lock is held)
        with contextlib.suppress(OSError):
            stale.unlink()


def _disk_full(error: BaseException) -> bool:
    """Whether ``error`` (or what caused it) is a full disk: ``ENOSPC``/``EDQUOT``, or torch's zip writer failing
    mid-file, which is how a full disk shows through ``torch.save`` ("unexpected pos")."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
            return True
        if isinstance(seen, RuntimeError) and re.search(r"unexpected pos|failed writing|file write failed", str(seen)):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def error_text(error: BaseException, doing: str) -> str:
    """``Type: message`` of ``error`` in one line, or, when the message is empty, what was being done."""
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text[:160]}" if text else f"{type(error).__name__} while {doing}"


def _check_archive(path: Path, file: Any) -> None:
    """Refuse, before ``torch.load`` allocates anything, a checkpoint whose zip directory declares a record that is
    compressed (``torch.save`` writes every record stored as it is, so a compressed one is not torch's: a few
    megabytes can inflate to gigabytes) or whose sizes exceed the file's own size. A file that is not a zip archive
    (or none at all) is left to ``torch.load``, whose error is reported as it is."""
    import zipfile

    try:
        size = os.fstat(file.fileno()).st_size
        with zipfile.ZipFile(file) as archive:
            records = archive.infolist()
    except (OSError, zipfile.BadZipFile, ValueError, EOFError):
        return
    finally:
        file.seek(0)
    for info in records:
        if info.compress_type != zipfile.ZIP_STORED:
            raise CheckpointError(
                f"{path} holds a compressed record ({info.filename!r}), which a checkpoint written by torch.save never "
                "does; it was not loaded (it could inflate to any size). Use a checkpoint written by odeformer-train."
            )
        if info.file_size > size or info.compress_size > size or info.header_offset > size:
            raise CheckpointError(
                f"{path} declares a record ({info.filename!r}) of {info.file_size} bytes in a file of {size}; it was "
                "not loaded. Use a checkpoint written by odeformer-train."
            )


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Read a checkpoint with ``weights_only=True`` (never unpickles code): the package's one checkpoint reader.

    Anything but a regular file (a FIFO, a device node, a link to ``/dev/zero``) is refused before it is opened
    (:func:`odeformer.app.files.open_regular`). A file whose zip records are compressed or larger than the file is
    refused before anything is allocated (:func:`_check_archive`). A file that names a global a checkpoint never
    holds (``os.system``, a class of someone's) is refused without running anything; a truncated, empty or foreign
    file is a one-line :class:`CheckpointError` naming the file."""
    path = Path(path)
    try:
        file = os.fdopen(files.open_regular(path), "rb")  # a FIFO or a device (/dev/zero) is refused unopened
    except FileNotFoundError:
        raise CheckpointError(f"{files.printable(path)} does not exist.") from None
    except files.UnsafeFile as error:
        raise CheckpointError(str(error)) from None
    try:
        with file:
            _check_archive(path, file)
            payload = torch.load(file, map_location="cpu", weights_only=True)
    except CheckpointError:
        raise
    except Exception as error:  # truncated zip, foreign pickle, ...
        refused = re.search(r"(?:unsupported|Unsupported) (?:GLOBAL|global:? (?:GLOBAL )?)\s*([\w.]+)", str(error))
        if refused:
            raise CheckpointError(
                f"{path}: refused to load {refused.group(1)}, which a checkpoint never holds (checkpoints are read "
                "as tensors and plain values only, so a file cannot run code); nothing was run from it. Use a "
                "checkpoint written by odeformer-train."
            ) from None
        size = path.stat().st_size if path.exists() else 0
        reason = error_text(error, f"reading its {size} bytes ({'empty' if size == 0 else 'cut short or damaged'})")
        raise CheckpointError(
            f"{path} is not a readable checkpoint ({reason}); move it away or start a new run."
        ) from None
    _check_structure(path, payload)
    if not isinstance(payload, dict) or payload.get("format") not in READABLE:
        raise CheckpointError(
            f"{path} is not an odeformer checkpoint ({' or '.join(READABLE)}); move it away or start a new run."
        )
    return payload


MAX_ENTRIES = 2_000_000
"""The most entries (containers and values, counted along every path) a checkpoint's nested structure may expand to:
what walking its config or optimiser state costs. A real checkpoint holds a few thousand."""
MAX_DEPTH = 64
"""The deepest nesting a checkpoint's structure may have (a real one nests a few levels)."""


def _check_structure(path: Path, payload: Any) -> None:
    """Refuse a payload whose nested dicts, lists and tuples reference themselves, nest deeper than
    :data:`MAX_DEPTH`, or, shared between several places (a DAG), expand to more than :data:`MAX_ENTRIES` entries
    along its paths: walking it (comparing configs, restoring an optimiser) would never end. Each container is
    counted once (a visited map), so the check itself is linear in the file."""
    sizes: dict[int, int] = {}
    open_now: set[int] = set()

    def size(node: Any, depth: int) -> int:
        if not isinstance(node, (dict, list, tuple, set, frozenset)):
            return 1
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_now:
            raise CheckpointError(f"{path} holds a structure that contains itself; not a checkpoint (move it away).")
        if depth > MAX_DEPTH:
            raise CheckpointError(
                f"{path} nests deeper than {MAX_DEPTH} levels; not a checkpoint (move it away or start a new run)."
            )
        open_now.add(key)
        total = 1
        for child in (item for pair in node.items() for item in pair) if isinstance(node, dict) else node:
            total += size(child, depth + 1)
            if total > MAX_ENTRIES:
                raise CheckpointError(
                    f"{path} holds shared structures that expand to more than {MAX_ENTRIES} entries; not a "
                    "checkpoint (move it away or start a new run)."
                )
        open_now.discard(key)
        sizes[key] = total
        return total

    size(payload, 0)


def check_weights(model: torch.nn.Module, weights: Any, path: Path) -> None:
    """``weights`` (a state dict read from ``path``) fit ``model`` before anything is loaded: a mapping of tensors,
    each of its entry's shape and, where the model's entry is floating point, itself real floating point (an
    integer, bool or complex tensor would be cast without a word) and finite. Anything else is one line naming the
    file and the key."""
    own = model.state_dict()
    if not isinstance(weights, dict):
        raise CheckpointError(f"{path} holds no weights (a mapping of tensors); use a checkpoint of odeformer-train.")
    for key, value in weights.items():
        mine = own.get(key)
        if mine is None:
            continue  # load_state_dict names an entry the model lacks
        why = None
        if not isinstance(value, torch.Tensor):
            why = f"is a {type(value).__name__}, not a tensor"
        elif value.shape != mine.shape:
            why = f"has shape {tuple(value.shape)}, the model's {tuple(mine.shape)}"
        elif mine.is_floating_point() and not value.is_floating_point():
            why = f"is {str(value.dtype).removeprefix('torch.')}, not a real floating-point tensor"
        elif mine.is_floating_point() and not bool(torch.isfinite(value).all()):
            why = "holds non-finite values (NaN or inf)"
        if why is not None:
            raise CheckpointError(f"{path}: the weight {key} {why}; the weights were not loaded.")


def load_weights(model: torch.nn.Module, weights: Any, path: Path) -> None:
    """``weights`` read from ``path`` into ``model`` once :func:`check_weights` passes; entries missing or too many
    are one line naming the file."""
    check_weights(model, weights, path)
    try:
        model.load_state_dict(weights)
    except (RuntimeError, ValueError, KeyError) as error:
        reason = " ".join(str(error).split())[:200]
        raise CheckpointError(f"{path}: the weights do not fit the run's model ({reason}).") from None
