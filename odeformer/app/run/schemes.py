"""A scheme of the user's own, named ``module.Class`` on a command line, checked before its module is imported.

Naming a module imports it, and importing a module runs its code, so a command checks everything it can about the
name first, without running anything: its spelling (identifiers joined by dots, at least a module and a class), that
its top package is not one of Python's own (``os.system`` is no scheme), and that the top package can be found on
the Python path or in the current directory (``importlib.util.find_spec``, which reads no module's code for a
top-level name). Only then, and only after the rest of the command line is checked, is the module imported (by
:func:`odeformer.registry.import_stepper`, when the run is built). Nothing here imports torch.
"""

from __future__ import annotations

import ast
import difflib
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
    missing = _missing_class(path) if find else None
    if missing is not None:
        raise SchemeNameError(f"{shown}: {missing}")
    return path


def import_scheme(path: str, key: str = "solver") -> type:
    """The stepper class ``path`` names, imported now, after :func:`check_scheme_name`: a module that raises
    anything while it runs (a syntax error, an exception of its own) or holds no such stepper class is one line,
    :class:`SchemeNameError`."""
    check_scheme_name(path, key)
    from ...registry import import_stepper

    try:
        return import_stepper(path)
    except Exception as error:  # noqa: BLE001 - the user's module may raise anything while it runs
        said = " ".join(str(error).split())[:200]
        why = said if isinstance(error, ValueError) else f"importing it raised {type(error).__name__}: {said}"
        raise SchemeNameError(f"{key}={path}: {why}") from None


def _missing_class(path: str) -> str | None:
    """Why the module ``module.py`` of ``module.Class`` holds no ``Class``, read from its source (nothing is run),
    with the nearest of its classes; None when it may hold it (it binds the name at its top level, imports ``*``,
    defines ``__getattr__``, is a package's or not a source file)."""
    module, _, name = path.rpartition(".")
    if "." in module:
        return None  # finding a package's module runs the package
    spec = _spec(module)
    origin = getattr(spec, "origin", None)
    if not origin or not origin.endswith(".py") or os.path.basename(origin) == "__init__.py":
        return None
    try:
        with open(origin, "rb") as f:
            tree = ast.parse(f.read(4 << 20))
    except (OSError, SyntaxError, ValueError):
        return None  # the import says what is wrong
    bound, classes, statements = set(), [], list(tree.body)
    while statements:
        node = statements.pop()
        if isinstance(node, ast.ClassDef):
            classes.append(node.name)
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bound |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        else:  # if / try / with / for at the top level: what they bind is bound too
            statements += [child for child in ast.iter_child_nodes(node) if isinstance(child, ast.stmt)]
    if name in bound or "*" in bound or "__getattr__" in bound:
        return None
    near = difflib.get_close_matches(name, classes, n=1, cutoff=0.5)
    hint = f"did you mean {module}.{near[0]}?" if near else f"its classes: {', '.join(sorted(classes)) or 'none'}."
    return f"{origin} defines no {name}; {hint}"


def _spec(module: str) -> importlib.machinery.ModuleSpec | None:
    try:
        return importlib.util.find_spec(module) or importlib.machinery.PathFinder.find_spec(module, [os.getcwd()])
    except (ImportError, ValueError):
        return None


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
