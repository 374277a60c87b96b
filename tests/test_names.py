"""Names: what one package imports from another is public there (no ``_private`` name, no ``_private`` module).

``solvers.testing`` is the ``solvers`` package's own kit and reads its internals; ``odeformer``'s sub-packages (tasks,
data) are users of the modules above them and import only what those export."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _cross_package_private_imports(root: pathlib.Path) -> list[str]:
    found = []
    for package in ("odeformer", "solvers", "benchmarks", "examples"):
        for path in sorted((root / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.ImportFrom):
                    continue
                module = (node.module or "").split(".")
                if node.level == 0:
                    elsewhere = module[0] != package
                else:  # a relative import reaching out of an odeformer sub-package
                    elsewhere = node.level > 1 and package == "odeformer"
                if not elsewhere:
                    continue
                private = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
                private += [m for m in module if m.startswith("_") and not m.startswith("__")]
                if private:
                    found.append(f"{path.relative_to(root)}:{node.lineno} imports {', '.join(private)}")
    return found


def test_no_private_name_is_imported_across_packages():
    assert _cross_package_private_imports(ROOT) == []


def test_the_check_finds_a_private_import(tmp_path):
    (tmp_path / "odeformer" / "tasks").mkdir(parents=True)
    (tmp_path / "odeformer" / "tasks" / "x.py").write_text("from ..joint import _hidden\nfrom solvers._base import y\n")
    for package in ("solvers", "benchmarks", "examples"):
        (tmp_path / package).mkdir()
    assert len(_cross_package_private_imports(tmp_path)) == 2
