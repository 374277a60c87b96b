"""A scheme of the user's own, named ``module.Class`` on a command line, checked before its module is imported.

Naming a module imports it, and importing a module runs its code, so a command checks everything it can about the
name first, without running anything: its spelling (identifiers joined by dots, at least a module and a class), that
its top package is not one of Python's own (``os.system`` is no scheme), and that the top package can be found on
the Python path or in the current directory (``importlib.util.find_spec``, which reads no module's code for a
top-level name). Only then, and only after the rest of the command line is checked, is the module imported (by
:func:`odeformer.registry.import_stepper`, when the run is built). Nothing here imports torch.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import re
import sys

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

SHAPE = (
    "module.Class, the dotted path to a stepper class in a module of your own (e.g. my_schemes.DampedVerlet for "
    "class DampedVerlet in my_schemes.py in the working directory)"
)
"""What a scheme's name must look like, as an error says it."""


def own_scheme(name: object) -> str | None:
    """The ``module.Class`` a solver name spells when it is a class of the user's own (a dotted name: every registered
    solver's name is one identifier), else ``None``. Reads the name only."""
    return name if isinstance(name, str) and "." in name else None


class SchemeNameError(ValueError):
    """A ``module.Class`` name that cannot name a scheme of the user's own; one line."""


def check_scheme_name(path: object, key: str = "solver", find: bool = True) -> str:
    """``path`` if it can name a stepper class of the user's own (see the module docstring), else a one-line
    :class:`SchemeNameError` that names ``key`` and says what a name must look like. ``find=False`` leaves out the
    look-up of its module (a sweep's job does it, so that a module not found fails that job's row only). Imports
    nothing."""
    shown = f"{key}={path}" if key == "solver" else f"{key} {path}"  # a config key (solver=), or a word
    if not isinstance(path, str):
        raise SchemeNameError(f"{shown} is not a scheme's name; give {SHAPE}.")
    parts = path.split(".")
    if len(parts) < 2 or not all(_IDENTIFIER.match(part) for part in parts):
        raise SchemeNameError(f"{shown} is not a scheme's name; give {SHAPE}.")
    top = parts[0]
    if top in sys.stdlib_module_names or top in sys.builtin_module_names:
        raise SchemeNameError(f"{shown} names Python's own module {top}, not a scheme of yours; give {SHAPE}.")
    if find and not _findable(top):
        raise SchemeNameError(
            f"{shown}: there is no module {top} on the Python path or in the current directory ({os.getcwd()}); "
            f"give {SHAPE}."
        )
    return path


def _findable(top: str) -> bool:
    """Whether the top-level module ``top`` is already imported, or can be found on the Python path or in the current
    directory (where :func:`odeformer.registry.import_stepper` also looks), without running it."""
    if top in sys.modules:
        return True
    try:
        if importlib.util.find_spec(top) is not None:
            return True
    except (ImportError, ValueError):
        return False
    return importlib.machinery.PathFinder.find_spec(top, [os.getcwd()]) is not None
