"""The commands: thin fronts that parse and check a command line, then call into the run and reporting rooms.

``odeformer-train`` (:mod:`~odeformer.app.commands.train`, the only module importing Hydra), ``odeformer-diagnose``
(:mod:`~odeformer.app.commands.diagnose`), ``odeformer-reproduce`` (:mod:`~odeformer.app.commands.reproduce`),
``odeformer-sample`` (:mod:`~odeformer.app.commands.sample`), ``odeformer-analyze``, ``odeformer-compare`` and
``odeformer-data`` (:mod:`~odeformer.app.commands.data`, which also holds the downloader only it uses). Each parses
its words with :class:`Parser` and runs under :func:`run`: bad input, a usage error included, is one line on stderr
and exit code 2, before anything is written; a name echoed back has its control characters escaped.
"""

import argparse as _argparse
import os as _os
import signal as _signal
import sys as _sys
import warnings as _warnings
from collections.abc import Callable as _Callable
from pathlib import Path as _Path

from .. import files as _files
from ..files import printable


def _one_line_warning(message, category, filename, lineno, line=None) -> str:
    """A warning as a command prints it: ``odeformer-<command>: warning: <message>``, on one line, without the
    source line of the project that raised it."""
    command = _os.path.basename(_sys.argv[0]) if _sys.argv else "odeformer"
    return f"{command}: warning: {printable(' '.join(str(message).split()))}\n"


if _os.path.basename(_sys.argv[0] if _sys.argv else "").startswith("odeformer-"):  # a command, not a library user
    _warnings.formatwarning = _one_line_warning


class Parser(_argparse.ArgumentParser):
    """argparse's parser whose usage error is one line, ``<prog>: error: <what> (<prog> --help lists the options)``,
    exit 2 (argparse's own repeats the whole usage above it): it raises :class:`UsageWords`, which :func:`run`
    reports."""

    def error(self, message: str) -> None:
        raise UsageWords(f"{message} ({self.prog} --help lists the options)")


class UsageWords(ValueError):
    """A command line argparse cannot parse; one line."""


EXPECTED = (ValueError, TypeError, OSError, ImportError, ArithmeticError)
"""What bad input raises (with the errors the application defines itself): one line, never a traceback."""


def one_line(error: BaseException) -> str:
    """``error`` as one printable line: a file error names the file and what went wrong, an error the application or a
    usage check raised is its message, anything else (a scheme of one's own failing) also its type."""
    if isinstance(error, OSError) and error.filename is not None and error.strerror:
        text = f"{error.filename}: {error.strerror}"
    elif isinstance(error, (ValueError, OSError)) or type(error).__module__.startswith("odeformer."):
        text = str(error)
    else:
        text = f"{type(error).__name__}: {error}"
    return printable(" ".join(text.split()) or type(error).__name__)


def run(prog: str, body: _Callable[[], int], sweeps: bool = False) -> int:
    """A command's top level: ``body()``'s exit code; bad input (:data:`EXPECTED`, or an error the application
    defines) one line and exit 2; Ctrl-C one line and 130 (a command that runs ``sweeps`` says how its runs resume);
    a sweep stopped by a signal, how it resumes and ``128 + signum``. ``ODEFORMER_DEBUG=1`` shows the traceback."""
    try:
        return body()
    except KeyboardInterrupt:
        if sweeps:
            return stopped(prog, _signal.SIGINT, saved=True)
        print(f"{prog}: interrupted (Ctrl-C).", file=_sys.stderr)
        return 130
    except Exception as error:  # noqa: BLE001 - sorted below; anything else goes on as a traceback
        if hasattr(error, "signum") and hasattr(error, "saved"):  # odeformer.app.run.sweep.Interrupted
            return stopped(prog, error.signum, error.saved)
        expected = isinstance(error, EXPECTED) or type(error).__module__.startswith("odeformer.app.")
        if not expected or _os.environ.get("ODEFORMER_DEBUG"):
            raise
        print(f"{prog}: error: {one_line(error)}", file=_sys.stderr)
        return 2


def stopped(prog: str, signum: int, saved: bool) -> int:
    """A sweep-running command stopped by a signal: one line saying how its runs resume; the exit status
    ``128 + signum``."""
    how = (
        "the running runs saved their checkpoints; the same command resumes them"
        if saved
        else "stopped again before the running runs saved: they resume from their last checkpoints"
    )
    print(f"{prog}: interrupted by signal {int(signum)}; {how}.", file=_sys.stderr)
    return 128 + int(signum)


def folder_argument(text: str) -> _Path:
    """An option's folder (``--out``): a path where a folder can be made or written (:func:`~odeformer.app.files.
    unwritable`); an empty one, a file there or above it, a read-only or kernel folder, or a name too long is a
    one-line usage error before anything runs."""
    if not text.strip():
        raise _argparse.ArgumentTypeError("'' names no folder; give a folder's path")
    refused = _files.unwritable(_Path(text))
    if refused is not None:
        raise _argparse.ArgumentTypeError(f"{printable(text)} cannot be {refused[0]}: {refused[1]}")
    return _Path(text)


def workers_argument(text: str) -> int:
    """An option's number of worker processes (``--workers``): a whole number from 1 to this machine's cores (at
    least 2, the default), each worker training with one thread. A pool forks all its workers at once, so a count
    beyond the machine is refused in one line before anything starts."""
    from ..run.config import cores

    limit = max(2, cores())
    try:
        count = int(text)
    except ValueError:
        raise _argparse.ArgumentTypeError(f"invalid int value: {printable(text)!r}") from None
    if not 1 <= count <= limit:
        raise _argparse.ArgumentTypeError(
            f"{count} is not a number of worker processes: give 1 to {limit} (this machine has {cores()} cores, and "
            "each worker trains with one thread)"
        )
    return count


def file_argument(text: str) -> _Path:
    """An option's file (``--json FILE``): not empty, not a folder, in a folder that can be made or written."""
    path = _Path(text)
    if not text.strip() or path.is_dir():
        raise _argparse.ArgumentTypeError(f"{printable(text) or repr(text)} is not a file's path (give FILE.json)")
    folder_argument(str(path.parent))
    return path
