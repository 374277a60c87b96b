"""House rules that code review would otherwise have to remember."""

import ast
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _imports(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            yield node.module.split(".")[0]


def test_solvers_imports_only_torch():
    allowed = {"torch"} | set(sys.stdlib_module_names)
    for path in (ROOT / "solvers").rglob("*.py"):
        kit = path.parent.name == "testing"  # the property kit: its claims are hypothesis properties
        extra = set(_imports(path)) - allowed - ({"hypothesis"} if kit else set())
        assert not extra, f"{path.name} imports {extra}: solvers/ may import only torch and the standard library"


def test_importing_solvers_pulls_in_nothing_else():
    code = "import sys, solvers; print([m for m in ('odeformer', 'hydra', 'hypothesis') if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"


def test_one_scheme_per_file():
    import solvers

    files = {cls.__module__ for cls in solvers.STEPPERS.values()}
    assert len(files) == len(solvers.STEPPERS)
