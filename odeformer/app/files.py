"""Reading and writing the files of a run, a report or a comparison without following links planted there.

A folder the package writes may come from someone else, so none of its entries is trusted to be what its name says:

- a folder it makes or enters below the one the user named is made level by level (:func:`folder`), each level a real
  folder (a link or a file there is refused, whatever it points to);
- a file it appends to is opened with ``O_NOFOLLOW`` (:func:`append`), a file replaced whole is written to a temporary
  created exclusively (``O_EXCL``, a random name) beside it and renamed over it with :func:`os.replace`
  (:func:`replace`, :func:`write_text`, :func:`write_figure`), which replaces a name, never a link's target;
- a file it reads is a regular file (:func:`open_regular`, :func:`read_text`): a FIFO, a device node or a link to one
  (``/dev/zero``) is refused before it is opened, and a file larger than what it can hold is refused unread.

Each refusal is one :class:`UnsafeFile` line naming the entry; :func:`unwritable` says, before anything is written,
why a folder cannot be made or written, and :func:`printable` shows a name with its control characters escaped.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import stat
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
NONBLOCK = getattr(os, "O_NONBLOCK", 0)
NAME_MAX = 255
"""The longest name of one folder or file (bytes) the usual file systems take."""


class UnsafeFile(RuntimeError):
    """An entry that is a link, or not a regular file (or folder), where the package reads or writes one; or a folder
    it cannot make or write."""


def printable(text: Any) -> str:
    """``text`` with its control characters (an escape sequence in a folder's name, say) written as ``\\xNN``, so that
    a name echoed to a terminal shows what it is and does nothing to the terminal."""
    return re.sub(r"[\x00-\x1f\x7f-\x9f]", lambda m: f"\\x{ord(m.group()):02x}", str(text))


def _refusal(path: Path, what: str = "a link") -> UnsafeFile:
    return UnsafeFile(
        f"{printable(path)} is {what}; the package reads and writes only regular files and folders there, never "
        "through a link, so nothing was written there. Remove it (or choose another folder)."
    )


def refuse_links(directory: Path, names: Iterable[str]) -> None:
    """Raise :class:`UnsafeFile` naming the first of ``directory/<name>`` that is a symbolic link (dangling or not);
    names that do not exist are fine."""
    for name in names:
        path = Path(directory) / name
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            if stat.S_ISLNK(os.lstat(path).st_mode):
                raise _refusal(path)


def refuse_entries(directory: Path, names: Iterable[str]) -> None:
    """:func:`refuse_links`, and anything but a regular file (a folder, a FIFO, a device) at ``directory/<name>``:
    what a command replaces whole at its end, checked before its work begins."""
    refuse_links(directory, names)
    for name in names:
        path = Path(directory) / name
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            mode = os.lstat(path).st_mode
            if not stat.S_ISREG(mode):
                raise _refusal(path, "a folder, not a file" if stat.S_ISDIR(mode) else "not a regular file")


def folder(path: Path, root: Path | None = None) -> Path:
    """Make (or enter) the folder ``path`` and return it: ``root`` (by default ``path`` itself), the folder the user
    named, may be a link; every level below it is made with ``mkdir`` or found to be a real folder, and a link or a
    file at any of them is a one-line :class:`UnsafeFile` (nothing is made through it). A ``root`` that cannot be
    made or written (:func:`unwritable`) is one too."""
    path = Path(path)
    root = path if root is None else Path(root)
    refused = unwritable(root)
    if refused is not None:
        raise UnsafeFile(f"{printable(root)} cannot be {refused[0]}: {refused[1]}; nothing was written.")
    root.mkdir(parents=True, exist_ok=True)
    level = root
    for part in path.relative_to(root).parts:
        level = level / part
        with contextlib.suppress(FileExistsError):
            os.mkdir(level)
        mode = os.lstat(level).st_mode
        if not stat.S_ISDIR(mode):
            raise _refusal(level, "a link" if stat.S_ISLNK(mode) else "not a folder")
    return path


def open_nofollow(path: Path, flags: int, mode: int = 0o644) -> int:
    """``os.open(path, flags | O_NOFOLLOW)``: a link at ``path`` is a one-line :class:`UnsafeFile` (its target is
    never opened), and so is anything but a regular file there (a FIFO, a device, a folder)."""
    path = Path(path)
    try:
        fd = os.open(path, flags | NOFOLLOW | NONBLOCK, mode)
    except OSError as error:
        with contextlib.suppress(OSError):
            mode = os.lstat(path).st_mode
            if stat.S_ISLNK(mode):
                raise _refusal(path) from None
            if not stat.S_ISREG(mode):  # a FIFO without a reader, a device, a folder
                raise _refusal(path, "not a regular file") from None
        raise error
    return _regular(fd, path)


def _regular(fd: int, path: Path) -> int:
    """``fd`` if it is a regular file's (then blocking again), else closed and a one-line :class:`UnsafeFile`."""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _refusal(path, "not a regular file")
        if NONBLOCK:
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_regular(path: Path) -> int:
    """A descriptor of ``path`` opened for reading, which must be a regular file (a link to one is followed): a FIFO,
    a device node or a link to one (``/dev/zero``) is a one-line :class:`UnsafeFile` before it is opened (none of them
    ends, or one blocks), and a missing file is :class:`FileNotFoundError`."""
    path = Path(path)
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise _refusal(path, "not a regular file")
    return _regular(os.open(path, os.O_RDONLY | NONBLOCK), path)


def read_text(path: Path, limit: int = 64 << 20) -> str:
    """The text of the regular file ``path`` (:func:`open_regular`), refused unread when it holds more than ``limit``
    bytes (no file the package reads this way is that large)."""
    with os.fdopen(open_regular(path), "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size > limit:
            raise UnsafeFile(f"{printable(path)} holds {size} bytes, more than the {limit} such a file may; not read.")
        return f.read(limit + 1).decode("utf-8", errors="replace")


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
    (or a folder) at ``path`` is refused first (:class:`UnsafeFile`); on any failure the temporary is removed and
    ``path`` is as it was."""
    path = Path(path)
    refuse_links(path.parent, [path.name])
    if path.is_dir():
        raise _refusal(path, "a folder, not a file")
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


def write_figure(path: Path, figure: Any, dpi: int = 110) -> Path:
    """A matplotlib ``figure`` as the PNG ``path`` (:func:`replace`), then closed."""
    import matplotlib.pyplot as plt

    try:
        replace(Path(path), lambda f: figure.savefig(f, dpi=dpi, format="png"))
    finally:
        plt.close(figure)
    return Path(path)


def stale_temporaries(path: Path) -> list[Path]:
    """The temporaries :func:`replace` left beside ``path`` when killed mid-write (``<name>.*.tmp``), links among them
    included (removing a link leaves its target alone)."""
    path = Path(path)
    return sorted(path.parent.glob(f"{path.name}.*.tmp"))


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

    A name of more than :data:`NAME_MAX` bytes on the way is ``("made", ...)``. Then the first of ``path`` and its
    parents that exists decides: a file there is ``("made", "<it> is a file, not a folder")``, a folder this process
    cannot write (:func:`writable`) ``("written", "<it> is read-only for this user")``. When ``path`` itself is a
    folder, each of ``appended`` (files a run appends to) that exists must be writable too. Nothing is created."""
    path = Path(path)
    long = next((part for part in path.parts if len(os.fsencode(part)) > NAME_MAX), None)
    if long is not None:
        return "made", f"the name {printable(long[:40])}... has {len(os.fsencode(long))} bytes, more than {NAME_MAX}"
    for level in (path, *path.parents):
        if not level.exists():
            continue
        if not level.is_dir():
            return "made", f"{printable(level)} is a file, not a folder"
        if not writable(level):
            return "written", f"{printable(level)} is read-only for this user"
        break
    for name in appended if path.is_dir() else ():
        entry = path / name
        if entry.is_file() and not writable(entry):
            return "written", f"{printable(entry)} is read-only for this user"
    return None
