"""One writer per run directory: a lock that a killed run cannot leave held.

A run directory holds at most one run and one process writing it (:func:`lock_run_directory`); a second command
asking for it is told, in one line, which process holds it, before it writes anything. A run directory whose entries
are links is refused in one line before anything is read or written (:func:`refuse_planted_links`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from .. import files

LOCK = ".lock"  # the run directory's lock file: the PID of the process writing the run
RUN_ENTRIES = (
    LOCK, "last.pt", "best.pt", "last.pt.tmp", "best.pt.tmp", "metrics.jsonl", "history.jsonl", "summary.json",
    "curves.png", "tensorboard", "previous", "diagnostics", ".hydra",
)  # fmt: skip
"""The entries of a run directory the package reads or writes: none of them may be a link."""


class RunDirectoryError(RuntimeError):
    """The run directory is not in the state the settings ask for (a run already there, or none to resume)."""


class RunDirectoryBusy(RunDirectoryError):
    """Another process holds the run directory's lock."""


def refuse_planted_links(out_dir: Path) -> None:
    """A run directory whose entries (:data:`RUN_ENTRIES`, and the temporaries a killed checkpoint write left) are
    links is refused, in one line naming the link, before anything is read or written: a link planted there would
    otherwise have a run write into (or read from) whatever it points to. The directory itself may be a link."""
    out_dir = Path(out_dir)
    try:
        temporaries = [p.name for p in out_dir.glob("*.tmp")]
    except OSError:
        temporaries = []
    try:
        files.refuse_links(out_dir, [*RUN_ENTRIES, *temporaries])
    except files.UnsafeFile as error:
        raise RunDirectoryError(str(error)) from None


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
    refuse_planted_links(out_dir)
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
    refuse_planted_links(out_dir)
    path = Path(out_dir) / LOCK
    try:
        import fcntl

        fd = files.open_nofollow(path, os.O_RDONLY)
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
            fd = files.open_nofollow(path, os.O_RDWR | os.O_CREAT)
        except files.UnsafeFile as error:
            raise RunDirectoryError(str(error)) from None
        except OSError as error:
            from .checkpoints import error_text

            raise RunDirectoryError(f"cannot take the lock {path} ({error_text(error, 'opening it')}).") from None
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
