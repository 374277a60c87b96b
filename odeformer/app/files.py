"""Writing into a run directory without following links planted in it.

A run directory may come from someone else, so none of its entries is trusted to be what its name says: a file the
package writes there is opened with ``O_NOFOLLOW`` (a link in its place is refused, its target untouched), a file
replaced whole is written to a temporary created exclusively (``O_EXCL``, a random name) beside it and renamed over
it with :func:`os.replace` (which replaces a name, never a link's target), and :func:`refuse_links` turns a run
directory whose entries are links away before anything is written. Each refusal is one :class:`UnsafeFile` line
naming the entry.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


class UnsafeFile(RuntimeError):
    """An entry of a run directory that is a link, or not a regular file, where the package writes a file."""


def _refusal(path: Path, what: str = "a link") -> UnsafeFile:
    return UnsafeFile(
        f"{path} is {what}; a run directory's files are written only as regular files, never through a link, so "
        "nothing was written there. Remove it (or choose another train.out_dir)."
    )


def refuse_links(directory: Path, names: Iterable[str]) -> None:
    """Raise :class:`UnsafeFile` naming the first of ``directory/<name>`` that is a symbolic link (dangling or not);
    names that do not exist are fine."""
    for name in names:
        path = Path(directory) / name
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            if stat.S_ISLNK(os.lstat(path).st_mode):
                raise _refusal(path)


def open_nofollow(path: Path, flags: int, mode: int = 0o644) -> int:
    """``os.open(path, flags | O_NOFOLLOW)``: a link at ``path`` is a one-line :class:`UnsafeFile` (its target is
    never opened), and so is anything but a regular file there (a FIFO, a device, a folder)."""
    path = Path(path)
    try:
        fd = os.open(path, flags | NOFOLLOW | getattr(os, "O_NONBLOCK", 0), mode)
    except OSError as error:
        with contextlib.suppress(OSError):
            mode = os.lstat(path).st_mode
            if stat.S_ISLNK(mode):
                raise _refusal(path) from None
            if not stat.S_ISREG(mode):  # a FIFO without a reader, a device, a folder
                raise _refusal(path, "not a regular file") from None
        raise error
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _refusal(path, "not a regular file")
        if hasattr(os, "O_NONBLOCK"):
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def append(path: Path) -> Iterator[IO[str]]:
    """``path`` opened for appending text (created if missing), never through a link."""
    fd = open_nofollow(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    with os.fdopen(fd, "a") as f:
        yield f


def exclusive_temporary(path: Path) -> tuple[int, Path]:
    """A new file beside ``path`` (``<name>.<random>.tmp``) created with ``O_CREAT | O_EXCL | O_NOFOLLOW``: no entry
    planted there beforehand, link or file, is ever opened. Returns its descriptor and path."""
    path = Path(path)
    for _ in range(100):
        tmp = path.with_name(f"{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o644), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"cannot create a temporary file beside {path}")


def replace(path: Path, write: Callable[[IO[bytes]], None]) -> None:
    """Write ``path`` whole and atomically: ``write(f)`` fills an exclusive temporary beside it
    (:func:`exclusive_temporary`), which is flushed to disk and renamed over ``path`` with :func:`os.replace`. A link
    at ``path`` is refused first (:class:`UnsafeFile`); on any failure the temporary is removed and ``path`` is as it
    was."""
    path = Path(path)
    refuse_links(path.parent, [path.name])
    fd, tmp = exclusive_temporary(path)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def write_text(path: Path, text: str) -> None:
    """``path``'s whole text, replaced atomically and never through a link (:func:`replace`)."""
    replace(path, lambda f: f.write(text.encode()))


def stale_temporaries(path: Path) -> list[Path]:
    """The temporaries :func:`replace` left beside ``path`` when killed mid-write (``<name>.*.tmp``, and the older
    fixed ``<name>.tmp``), links among them included (removing a link leaves its target alone)."""
    path = Path(path)
    found = sorted(path.parent.glob(f"{path.name}.*.tmp"))
    return found


KERNEL_FILE_SYSTEMS = ("/proc", "/sys")
"""The kernel's own file systems, where no run can be written (not even by root)."""


def writable(path: Path) -> bool:
    """Whether this process may write the existing ``path``: a folder, create and replace files in it (write and
    search permission); a file, append to it. Asked of ``os.access`` (which also answers no on a read-only file
    system, even to root); nothing in :data:`KERNEL_FILE_SYSTEMS` is writable."""
    resolved = Path(path).resolve()
    kernel = any(resolved == Path(p) or Path(p) in resolved.parents for p in KERNEL_FILE_SYSTEMS)
    return not kernel and os.access(path, os.W_OK | (os.X_OK if resolved.is_dir() else 0))


def unwritable(path: Path, appended: Iterable[str] = ()) -> tuple[str, str] | None:
    """Why the folder ``path`` cannot be made or written into, checked before anything is written; None when it can.

    The first of ``path`` and its parents that exists decides: a file there is ``("made", "<it> is a file, not a
    folder")``, a folder this process cannot write (:func:`writable`) ``("written", "<it> is read-only for this
    user")``. When ``path`` itself is a folder, each of ``appended`` (files a run appends to) that exists must be
    writable too. Nothing is created."""
    path = Path(path)
    for folder in (path, *path.parents):
        if not folder.exists():
            continue
        if not folder.is_dir():
            return "made", f"{folder} is a file, not a folder"
        if not writable(folder):
            return "written", f"{folder} is read-only for this user"
        break
    for name in appended if path.is_dir() else ():
        entry = path / name
        if entry.is_file() and not writable(entry):
            return "written", f"{entry} is read-only for this user"
    return None
