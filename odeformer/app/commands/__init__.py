"""The commands: thin fronts that parse and check a command line, then call into the run and reporting rooms.

``odeformer-train`` (:mod:`~odeformer.app.commands.train`, the only module importing Hydra), ``odeformer-diagnose``
(:mod:`~odeformer.app.commands.diagnose`), ``odeformer-reproduce`` (:mod:`~odeformer.app.commands.reproduce`),
``odeformer-sample`` (:mod:`~odeformer.app.commands.sample`) and ``odeformer-data``
(:mod:`~odeformer.app.commands.data`, which also holds the downloader only it uses). Bad input is one line on stderr
and exit code 2, before anything is written.
"""

import os as _os
import sys as _sys
import warnings as _warnings


def _one_line_warning(message, category, filename, lineno, line=None) -> str:
    """A warning as a command prints it: ``odeformer-<command>: warning: <message>``, on one line, without the
    source line of the project that raised it."""
    command = _os.path.basename(_sys.argv[0]) if _sys.argv else "odeformer"
    return f"{command}: warning: {' '.join(str(message).split())}\n"


if _os.path.basename(_sys.argv[0] if _sys.argv else "").startswith("odeformer-"):  # a command, not a library user
    _warnings.formatwarning = _one_line_warning


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
