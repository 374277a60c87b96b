"""House rules that code review would otherwise have to remember."""

import ast
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


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


def _application_imports(root):
    """``module:line: import`` for every import of ``odeformer.app`` in the library (``odeformer`` outside
    ``odeformer/app``): absolute or relative, at the top of a module or inside a function."""
    found = []
    for path in sorted((root / "odeformer").rglob("*.py")):
        relative = path.relative_to(root)
        if relative.parts[:2] == ("odeformer", "app"):
            continue
        package = list(relative.parent.parts)  # the package a relative import starts from
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package[: len(package) - node.level + 1] if node.level else []
                module = ".".join(base + (node.module.split(".") if node.module else []))
                names = [module] + [f"{module}.{alias.name}" for alias in node.names]
            else:
                continue
            if any(name == "odeformer.app" or name.startswith("odeformer.app.") for name in names):
                found.append(f"{relative}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_library_does_not_import_the_application():
    found = _application_imports(ROOT)
    assert not found, f"the library may not import odeformer.app (the commands and what only they use): {found}"


def test_the_check_finds_an_application_import(tmp_path):
    (tmp_path / "odeformer" / "tasks").mkdir(parents=True)
    (tmp_path / "odeformer" / "app").mkdir()
    (tmp_path / "odeformer" / "app" / "train.py").write_text("from ..presets import preset\n")  # app -> library: fine
    (tmp_path / "odeformer" / "tasks" / "x.py").write_text(
        "import odeformer.app.train\nfrom ..app import builder\nfrom .. import app\nfrom ..presets import preset\n"
        "def f():\n    from ..app.checkpoints import load_checkpoint\n"
    )
    (tmp_path / "odeformer" / "y.py").write_text("from .app.config import Config\nfrom .application import z\n")
    assert [line.split(": ", 1)[0] for line in _application_imports(tmp_path)] == [
        "odeformer/tasks/x.py:1",
        "odeformer/tasks/x.py:2",
        "odeformer/tasks/x.py:3",
        "odeformer/tasks/x.py:6",
        "odeformer/y.py:1",
    ]


def test_one_scheme_per_file():
    import solvers

    files = {cls.__module__ for cls in solvers.STEPPERS.schemes().values()}
    assert len(files) == len(solvers.STEPPERS.schemes())


def _stepper_classes() -> set[type]:
    import solvers

    seen, todo = set(), [solvers.AbstractStepper]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in seen:
                seen.add(sub)
                todo.append(sub)
    return seen


def test_no_class_is_made_at_run_time():
    """Building every solver's layer, its claims on every block, coefficients of every kind given inline, copies and
    pickles, and a model of each kind make no new stepper class; and no module makes a class with ``type(...)`` or
    re-classes an instance (``x.__class__ = ...``)."""
    import copy
    import io

    import torch
    from torch import nn

    import odeformer
    import solvers
    from odeformer.layer import Layer

    before = _stepper_classes()
    inline = [
        {"A": [[], ["1/2"]], "b": [0, 1]},
        {"A": [[], ["1/8"], [0, "1/2"]], "bbar": ["1/6", "1/3", 0], "b": ["1/6", "2/3", "1/6"], "c": [0, "1/2", 1]},
        {"drifts": [0, "1/2", "1/2"], "kicks": ["1/6", "2/3", "1/6"]},
    ]
    chosen = [odeformer.as_solver(n) for n in odeformer.solver_names("discrete")]
    chosen += [odeformer.solver("tableau", options=options) for options in inline]
    for entry in chosen:
        layer = Layer(entry, 4, nn.Identity(), nn.Identity())
        for block in (solvers.Block(lambda t, x: x), solvers.Block(lambda t, x: x, lambda t, x: x, lambda x: x)):
            layer.block_stepper.claims(block)
        copy.deepcopy(layer)
        torch.save(layer, io.BytesIO())
    for name in ("full_wave", "mix", "tableau", "dopri5"):
        odeformer.CausalLM(vocab_size=5, max_len=4, depth=2, dim=8, heads=2, solver=name)
    assert _stepper_classes() == before
    for path in sorted([*(ROOT / "solvers").rglob("*.py"), *(ROOT / "odeformer").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            made = isinstance(node, ast.Call) and getattr(node.func, "id", None) == "type" and len(node.args) == 3
            reclassed = isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Attribute) and t.attr == "__class__" for t in node.targets
            )
            assert not (made or reclassed), f"{path.relative_to(ROOT)}:{node.lineno} makes or re-classes a class"


def test_one_spelling_per_scheme():
    """Every registered scheme is picked by its name and by nothing else: ``solver=<name>`` builds it; its class by
    path (``solver=solvers.Class``) and a named tableau through ``solver=tableau solver.options.name=<name>`` are
    refused, each naming the one spelling, and ``solver.stepper=`` is no key (a class of one's own is
    ``solver=module.Class``). Every name of the command line's solver group has one meaning."""
    import pytest

    import odeformer
    import odeformer.app.commands.train as entry
    import solvers
    from helpers import cli_in_process

    assert sorted(entry.choices("solver")) == sorted(odeformer.solver_names())
    for name, cls in solvers.STEPPERS.schemes().items():
        entry_ = odeformer.as_solver(name)
        assert entry_ == odeformer.as_solver(name) and entry_.stepper is cls and entry_.name == name
        assert odeformer.as_solver(cls) == entry_  # the class itself is the same entry
        with pytest.raises(ValueError, match=f"pick it by its name, solver={name}"):
            odeformer.solver(f"solvers.{cls.__name__}")
    done = cli_in_process("train=debug", "solver.stepper=my_schemes.Mine")
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "odeformer-train: error: solver.stepper is no key: a scheme of your own is picked by its path, "
        "solver=my_schemes.Mine."
    ]
    for name in solvers.TABLEAUX:
        with pytest.raises(ValueError, match=f"a named scheme is picked by its name: solver={name}"):
            odeformer.solver("tableau", options={"name": name})
def _app_import_graph(root):
    """``{module: {modules it imports}}`` among the modules of ``odeformer/app`` (dotted names, a package by its own
    name): every import, absolute or relative, at the top of a module or inside a function."""
    app = root / "odeformer" / "app"
    modules = {}
    for path in sorted(app.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = (path, parts[:-1])  # a relative import starts from the module's package
    graph = {}
    for name, (path, package) in modules.items():
        edges = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package[: len(package) - node.level + 1] if node.level else []
                module = ".".join(base + (node.module.split(".") if node.module else []))
                targets = [f"{module}.{alias.name}" for alias in node.names] + [module]
            else:
                continue
            for target in targets:  # `from . import x`: the submodule x if there is one, else the package
                if target in modules and target != name:
                    edges.add(target)
                    break
        graph[name] = edges
    return graph


def _import_circles(graph):
    """The import circles of ``graph``: each strongly connected set of two or more modules, sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            members = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                members.append(member)
                if member == node:
                    break
            if len(members) > 1:
                found.append(sorted(members))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_no_import_circle_inside_the_application():
    circles = _import_circles(_app_import_graph(ROOT))
    assert not circles, f"modules of odeformer/app that import each other (directly or round a loop): {circles}"


def test_the_check_finds_an_import_circle(tmp_path):
    app = tmp_path / "odeformer" / "app"
    (app / "run").mkdir(parents=True)
    (app / "__init__.py").write_text('"""app"""\n')
    (app / "run" / "__init__.py").write_text("")
    (app / "run" / "a.py").write_text("from . import b\n")
    (app / "run" / "b.py").write_text("def f():\n    from odeformer.app.run.c import g\n")  # inside a function too
    (app / "run" / "c.py").write_text("from .a import x\nfrom ...data import load\n")  # a -> b -> c -> a
    (app / "d.py").write_text("from .run import a\nfrom .run.b import f\n")  # into the circle, not part of it
    graph = _app_import_graph(tmp_path)
    assert graph["odeformer.app.d"] == {"odeformer.app.run.a", "odeformer.app.run.b"}
    assert _import_circles(graph) == [["odeformer.app.run.a", "odeformer.app.run.b", "odeformer.app.run.c"]]


def test_tests_are_grouped_by_area():
    """Every test module lies in one area's folder, each folder is described in tests/README.md, and no two modules
    share a name (pytest imports them by their base name)."""
    tests = ROOT / "tests"
    assert not sorted(p.name for p in tests.glob("test_*.py")), "a test module at tests/: put it in its area's folder"
    areas = sorted(p.name for p in tests.iterdir() if p.is_dir() and any(p.glob("test_*.py")))
    readme = (tests / "README.md").read_text()
    assert [a for a in areas if f"`{a}/`" not in readme] == [], "an area missing from tests/README.md"
    names = [p.name for p in tests.glob("*/test_*.py")]
    assert len(names) == len(set(names)), "two test modules share a name"


CLOCKS = {"perf_counter", "perf_counter_ns", "time", "time_ns", "monotonic", "monotonic_ns", "process_time"}


def _clock_asserts(source: str) -> list[int]:
    """Lines of ``assert`` statements that read a clock: a call of ``time.<clock>()`` in the assertion, or a name
    assigned from an expression that calls one (``start = time.perf_counter()``, ``took = time.time() - start``)."""

    def reads_clock(node: ast.AST, timed: set[str]) -> bool:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr in CLOCKS:
                if isinstance(sub.func.value, ast.Name) and sub.func.value.id == "time":
                    return True
            if isinstance(sub, ast.Name) and sub.id in timed:
                return True
        return False

    tree = ast.parse(source)
    timed: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and reads_clock(node.value, set()):
            timed.update(t.id for t in node.targets if isinstance(t, ast.Name))
    timed.discard("deadline")  # a wait's bound (poll until a file appears): it fails nothing by itself
    return [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Assert) and reads_clock(node.test, timed)]


def test_no_test_asserts_on_time():
    """No test depends on speed (a loaded machine runs anything slower): speed is shown by benchmarks, and a test
    shows what a time limit stood for (refused before allocating, no extra work) by counting."""
    found = {
        str(path.relative_to(ROOT)): lines
        for path in sorted((ROOT / "tests").rglob("*.py"))
        if (lines := _clock_asserts(path.read_text()))
    }
    assert found == {}, f"tests asserting on a clock: {found}"


def test_the_check_finds_an_assert_on_time():
    assert _clock_asserts("import time\nstart = time.perf_counter()\nassert time.perf_counter() - start < 30\n") == [3]
    assert _clock_asserts("import time\ntook = time.time() - 0\nassert took < 1\n") == [3]
    assert _clock_asserts("import time\nstart = time.monotonic()\nprint(time.monotonic() - start)\n") == []
