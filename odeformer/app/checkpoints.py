"""Checkpoints and run directories: atomic writes, safe reads, one writer per run, and the checks made before
anything is written.

A checkpoint is a ``dict`` saved with ``torch.save`` and read back by :func:`load_checkpoint`, the package's one
checkpoint reader, with ``weights_only=True``: tensors and plain values only, never a pickled object that could run
code (a file naming any other global is refused in one line). Its ``format`` key names this layout. A run directory
holds at most one run and one process writing it (:func:`lock_run_directory`): starting a run where one exists,
resuming one that is not there, or resuming one with a config other than its own (beyond :data:`RESUME_MAY_CHANGE`,
and after a stop for divergence :data:`AFTER_DIVERGENCE`) is refused before anything is written.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import re
import shlex
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import yaml

from .identity import IDENTITY, describe

FORMAT = "odeformer-checkpoint-1"
LOCK = ".lock"  # the run directory's lock file: the PID of the process writing the run
HISTORY = "history.jsonl"  # what happened to a run beyond its metrics: a stop for divergence, a resume's changes


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be read (truncated, foreign, or from another format)."""


class CheckpointWriteError(CheckpointError):
    """A checkpoint that could not be written (the disk is full); the previous one is intact."""


class RunDirectoryError(RuntimeError):
    """The run directory is not in the state the settings ask for (a run already there, or none to resume)."""


class RunDirectoryBusy(RunDirectoryError):
    """Another process holds the run directory's lock."""


def save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` to ``path`` atomically: a reader, or a kill -9, sees the old file or the new one, not half.
    A full disk is a one-line :class:`CheckpointWriteError`; the half-written temporary file is removed and the
    previous checkpoint left as it was."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())
    except (OSError, RuntimeError) as error:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if _disk_full(error):
            kept = "the previous checkpoint is intact" if path.exists() else "no earlier checkpoint was there"
            raise CheckpointWriteError(
                f"no space left on device while writing {path}; {kept} (free some space, then resume)."
            ) from None
        if isinstance(error, OSError):
            raise CheckpointWriteError(
                f"cannot write {path} ({_reason(error, 'writing it')}); "
                f"{'the previous checkpoint is intact' if path.exists() else 'nothing was written'}."
            ) from None
        raise
    os.replace(tmp, path)


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


def _reason(error: BaseException, doing: str) -> str:
    """``Type: message`` of ``error`` in one line, or, when the message is empty, what was being done."""
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text[:160]}" if text else f"{type(error).__name__} while {doing}"


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Read a checkpoint with ``weights_only=True`` (never unpickles code): the package's one checkpoint reader.

    A file that names a global a checkpoint never holds (``os.system``, a class of someone's) is refused without
    running anything; a truncated, empty or foreign file is a one-line :class:`CheckpointError` naming the file."""
    path = Path(path)
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"{path} does not exist.") from None
    except Exception as error:  # truncated zip, foreign pickle, ...
        refused = re.search(r"(?:unsupported|Unsupported) (?:GLOBAL|global:? (?:GLOBAL )?)\s*([\w.]+)", str(error))
        if refused:
            raise CheckpointError(
                f"{path}: refused to load {refused.group(1)}, which a checkpoint never holds (checkpoints are read "
                "as tensors and plain values only, so a file cannot run code); nothing was run from it. Use a "
                "checkpoint written by odeformer-train."
            ) from None
        size = path.stat().st_size if path.exists() else 0
        reason = _reason(error, f"reading its {size} bytes ({'empty' if size == 0 else 'cut short or damaged'})")
        raise CheckpointError(
            f"{path} is not a readable checkpoint ({reason}); move it away or start a new run."
        ) from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not an {FORMAT} file; move it away or start a new run.")
    return payload


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


# -- one writer per run directory -------------------------------------------------------------------------------------


@contextlib.contextmanager
def lock_run_directory(out_dir: Path) -> Iterator[None]:
    """Hold ``out_dir``'s lock while the block runs: a second process asking for it gets a one-line
    :class:`RunDirectoryBusy` naming the holder's PID, and has written nothing. The lock is an ``flock`` on
    ``out_dir/.lock`` (which holds the holder's PID): the system releases it when its process ends, however it ends,
    so the lock file a killed run leaves behind is stale and taken over. Where ``flock`` is missing (or the file
    system refuses it), a lock file whose PID is no live process is taken over instead. The file is removed on
    release."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / LOCK
    fd = _acquire(path)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            if os.fstat(fd).st_ino == os.stat(path).st_ino:
                path.unlink()
        os.close(fd)  # closing releases the flock


def check_not_locked(out_dir: Path) -> None:
    """Raise :class:`RunDirectoryBusy` if a live process holds ``out_dir``'s lock; create nothing (a command checks
    this before Hydra writes its config snapshot into the directory; the lock itself is taken when the run starts)."""
    path = Path(out_dir) / LOCK
    try:
        import fcntl

        fd = os.open(path, os.O_RDONLY)
    except (ImportError, OSError):  # no lock file (or no flock): nothing holds it
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunDirectoryBusy(_busy(path.parent, _holder(fd))) from None
        except OSError:
            return
    finally:
        os.close(fd)


def _acquire(path: Path) -> int:
    try:
        import fcntl
    except ImportError:  # not a POSIX system
        fcntl = None
    for _ in range(100):  # another process may unlink the file between our open and our lock: retry on a new one
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as error:
            raise RunDirectoryError(f"cannot take the lock {path} ({_reason(error, 'opening it')}).") from None
        try:
            if fcntl is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    holder = _holder(fd)
                    raise RunDirectoryBusy(_busy(path.parent, holder)) from None
                except OSError:  # no flock on this file system: fall back to the PID in the file
                    _pid_lock(fd, path)
            else:
                _pid_lock(fd, path)
            with contextlib.suppress(OSError):
                if os.fstat(fd).st_ino != os.stat(path).st_ino:  # unlinked by its holder as we locked it
                    os.close(fd)
                    continue
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            return fd
        except BaseException:
            with contextlib.suppress(OSError):
                os.close(fd)
            raise
    raise RunDirectoryError(f"cannot take the lock {path}: it keeps being replaced by another process.")


def _holder(fd: int) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        return int(os.pread(fd, 32, 0).split()[0])
    return None


def _pid_lock(fd: int, path: Path) -> None:
    holder = _holder(fd)
    if holder is not None and holder != os.getpid() and _alive(holder):
        raise RunDirectoryBusy(_busy(path.parent, holder))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def _busy(out_dir: Path, holder: int | None) -> str:
    who = f"process {holder}" if holder is not None else "another process"
    return (
        f"{out_dir} is in use by another run ({who} holds {out_dir / LOCK}); nothing was written. Wait for it to "
        "finish, stop it, or choose another train.out_dir."
    )


# -- what a run did -----------------------------------------------------------------------------------------------


def record(out_dir: Path, event: dict[str, Any]) -> None:
    """Append ``event`` (with the time) to the run's ``history.jsonl``."""
    row = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), **event}
    with open(Path(out_dir) / HISTORY, "a") as f:
        f.write(json.dumps(row, default=str) + "\n")


def history(out_dir: Path) -> list[dict[str, Any]]:
    """The events of ``history.jsonl`` (a line cut short by a kill is skipped)."""
    path = Path(out_dir) / HISTORY
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):
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


# -- commands a user is told to run -------------------------------------------------------------------------------


def hydra_quote(value: str) -> str:
    """``value`` as Hydra's override grammar reads it back unchanged: as it is when it is plain, else double-quoted
    (spaces, non-ASCII characters, quotes, ``${``)."""
    if re.fullmatch(r"[A-Za-z0-9_./:+\-]+", value):
        return value
    quoted = re.sub(r'(\\*)"', lambda m: m.group(1) * 2 + '\\"', value)
    quoted = re.sub(r"(\\+)$", lambda m: m.group(1) * 2, quoted).replace("${", "\\${")
    return f'"{quoted}"'


def resume_command(out_dir: Path, overrides: list[str] | None, *extra: str) -> str:
    """The shell command that resumes the run in ``out_dir``: its own ``overrides`` (where known), ``out_dir``
    quoted for Hydra and for the shell, and ``extra`` overrides."""
    kept = [o for o in overrides or [] if not o.lstrip("+~").startswith(("train.out_dir=", "train.resume="))]
    command = [*kept, f"train.out_dir={hydra_quote(str(out_dir))}", "train.resume=true", *extra]
    return "odeformer-train " + " ".join(shlex.quote(o) for o in command)


# -- what a resume may change -------------------------------------------------------------------------------------

RESUME_MAY_CHANGE = (
    "train.max_steps",  # training longer is the usual reason to resume (the cosine schedule stretches to it)
    "train.resume",
    "train.out_dir",
    "train.device",
    "train.compile",
    "train.progress",
    "train.log_every",  # how often the loss is logged
    "train.checkpoint_every",  # how often last.pt is written
    "train.threads",  # how many CPU threads compute it
    "data.root",  # where the same dataset's files are (Hydra's override_dirname leaves it out too)
    "model.checkpoint",  # activation checkpointing: recomputes the same layers in the backward pass
)
"""The config keys a resumed run may change: where and how it runs and what it writes, never what it computes
(anything else — the solver, the model, the data, the batch size, the optimiser and its schedule, the seed, the
evaluation — must be the run's own: the checkpoint's state only continues the run it came from)."""

AFTER_DIVERGENCE = ("train.lr", "train.grad_clip")
"""What a resume may change after the run stopped for divergence (its ``history.jsonl`` says so): a lower learning
rate (the whole schedule scaled down from the checkpoint's step on) and another gradient clip. The change is recorded
in the run's history and in its later checkpoints' config."""


def check_run_directory(
    out_dir: Path, resume: bool, config: dict[str, Any] | None = None
) -> list[tuple[str, Any, Any]]:
    """Refuse to write over an earlier run, to resume one that is not there, or (given the resolved ``config`` of
    this command) to resume one with another config; called before anything is written. Returns the changes a
    resume after a divergence makes (:data:`AFTER_DIVERGENCE`), ``(key, run's value, new value)``."""
    last = out_dir / "last.pt"
    if resume and not last.exists():
        why = "" if out_dir.exists() else " (the folder does not exist)"
        raise RunDirectoryError(
            f"train.resume=true continues an existing run, but {out_dir} holds none (no last.pt){why}; start the run "
            "without train.resume, or point train.out_dir at a stopped run's directory."
        )
    if not resume and (last.exists() or (out_dir / "summary.json").exists()):
        raise RunDirectoryError(
            f"{out_dir} already holds a run; pass train.resume=true to continue it or choose another train.out_dir."
        )
    if resume and config is not None:
        payload = load_checkpoint(last)
        where = non_finite(payload)
        if where is not None:
            raise CheckpointError(
                f"{last} holds non-finite values in its {where} state (written as the run diverged), so it cannot "
                "continue the run; start a new run with a smaller train.lr or model.dt."
            )
        return check_resume_config(out_dir, payload, config)
    return []


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


def check_resume_config(out_dir: Path, payload: dict[str, Any], config: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """Refuse to resume the run whose ``last.pt`` holds ``payload`` with a ``config`` that differs from the one it was
    started with (beyond :data:`RESUME_MAY_CHANGE`, and :data:`AFTER_DIVERGENCE` after a stop for divergence): one
    line naming a few differing keys and the command to resume with. A checkpoint without a stored config (another
    version's) is resumed only if the solver, model, data and depth it names are this command's. Returns the changes
    allowed after a divergence."""
    last = Path(out_dir) / "last.pt"
    info = payload.get("info") if isinstance(payload.get("info"), dict) else {}
    stored = info.get("config")
    if not isinstance(stored, dict):
        _check_identity(last, info, config)
        return []
    differences = config_differences(stored, config)
    allowed: list[tuple[str, Any, Any]] = []
    diverged = diverged_after(out_dir, int(payload.get("step") or 0))
    if diverged is not None:
        allowed = [d for d in differences if d[0] in AFTER_DIVERGENCE]
        for key, old, new in allowed:
            if key == "train.lr" and not new < old:
                raise RunDirectoryError(
                    f"after the divergence at step {diverged['step']}, a resume may lower train.lr (the run's is "
                    f"{old}), not raise it to {new}; resume with train.lr below {old}: "
                    + resume_command(out_dir, run_overrides(out_dir, payload), f"train.lr={_lower(old)}")
                )
        differences = [d for d in differences if d[0] not in AFTER_DIVERGENCE]
    if not differences:
        return allowed
    shown = ", ".join(f"{key} ({_show(old)} in the run, {_show(new)} now)" for key, old, new in differences[:3])
    more = f" and {len(differences) - 3} more" if len(differences) > 3 else ""
    overrides = run_overrides(out_dir, payload)
    if overrides is None:
        how = "the overrides it was started with"
    else:
        how = "its own overrides: " + resume_command(out_dir, overrides)
    may = ", ".join(RESUME_MAY_CHANGE + (AFTER_DIVERGENCE if diverged is not None else ()))
    raise RunDirectoryError(
        f"train.resume=true continues the run in {out_dir} with its own config, but this command changes {shown}"
        f"{more}; only {may} may differ. Resume with {how}"
    )


def _check_identity(last: Path, info: dict[str, Any], config: dict[str, Any]) -> None:
    """A ``last.pt`` without a stored config: resume it only into the solver, model, data and depth it names."""
    now = describe(config)
    missing = [key for key in IDENTITY if info.get(key) is None]
    if missing:
        raise RunDirectoryError(
            f"{last} stores no config and does not name its {', '.join(missing)} (written by another version of "
            "odeformer?), so this command cannot tell it continues the same run; start a new run in another "
            "train.out_dir."
        )
    differing = [f"{key} ({info[key]} in the run, {now[key]} now)" for key in IDENTITY if info[key] != now[key]]
    if differing:
        raise RunDirectoryError(
            f"{last} stores no config (written by another version of odeformer?) and was trained with another "
            f"{', '.join(differing)}; resume it with its own settings or start a new run in another train.out_dir."
        )


def _lower(lr: Any) -> str:
    return f"{float(lr) / 10:.3g}" if isinstance(lr, (int, float)) and math.isfinite(lr) else "<lower>"


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
