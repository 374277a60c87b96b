"""Names: what one package imports from another is public there (no ``_private`` name, no ``_private`` module).

``solvers.testing`` is the ``solvers`` package's own kit and reads its internals; ``odeformer``'s sub-packages (tasks,
data) are users of the modules above them and import only what those export."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


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


# -- one solver namespace ---------------------------------------------------------------------------------------------


def _readme_table(name: str) -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index(f"<!-- {name} table:")
    start = text.index("\n", start) + 1
    return text[start : text.index(f"\n<!-- end of the {name} table -->", start)]


def test_the_readme_solver_table_is_the_generated_one():
    from odeformer.registry import solver_table

    assert _readme_table("solver") == solver_table()


def test_the_readme_stepper_table_is_the_generated_one():
    import solvers

    assert _readme_table("stepper") == solvers.stepper_table()


def test_the_readme_continuous_table_is_the_generated_one():
    from odeformer.continuous import continuous_table

    assert _readme_table("continuous") == continuous_table()


def test_the_stepper_table_states_each_schemes_claims():
    """A row's claims are its class's: a scheme registered with other claims shows them."""
    import solvers

    rows = {line.split(" | ")[0].strip("| `"): line for line in solvers.stepper_table().splitlines()[2:]}
    assert set(rows) == set(solvers.STEPPERS)
    for name, cls in solvers.STEPPERS.items():
        cells = [cell.strip() for cell in rows[name].strip("|").split(" | ")]
        assert cells[2] == str(cls.order) and cells[3].startswith(str(cls.evals_per_step))
        assert (cells[4] == "yes") == cls.symplectic and cells[5].startswith("yes") == cls.reversible


def test_old_public_names_resolve_to_the_new_ones_with_a_warning():
    """Renames are data (``odeformer.registry.RENAMED``): each old name is the new object, with one warning."""
    import odeformer
    from odeformer import registry

    for old, new in registry.RENAMED.items():
        with pytest.warns(DeprecationWarning, match=f"odeformer.{old} is now odeformer.{new}"):
            assert getattr(odeformer, old) is getattr(odeformer, new)
    with pytest.warns(DeprecationWarning, match="Solver.for_stepper"):
        assert odeformer.spec_for_stepper == odeformer.Solver.for_stepper
    with pytest.raises(AttributeError, match="no attribute 'derive'"):
        odeformer.derive  # noqa: B018


def test_a_solver_name_means_one_thing():
    import solvers
    from odeformer.continuous import CONTINUOUS
    from odeformer.registry import SOLVERS, Solver, as_solver, solver_names

    names = solver_names("discrete")
    assert len(names) == len(set(names)) and not set(names) & set(CONTINUOUS)
    for name in set(SOLVERS) & set(solvers.STEPPERS):  # one entry serves both: the scheme's own layer
        preset, derived = as_solver(name), Solver.for_stepper(solvers.STEPPERS[name], name)
        built, own = preset.build(4), derived.build(4)
        assert repr(built) == repr(own) and preset.form == derived.form and preset.dt == derived.dt
        assert {k: v.tolist() for k, v in built.state_dict().items()} == {
            k: v.tolist() for k, v in own.state_dict().items()
        }
    # the official mix and the gated-mix scheme: two layers, two names
    assert as_solver("mix").build(4).stepper.order == 0 and as_solver("position_mix").build(4).stepper.order == 1
    assert "mix" not in solvers.STEPPERS


def test_a_taken_name_cannot_be_registered_twice():
    """Uniqueness is checked when a name is written, in either table: a refused name is written to neither."""
    from dataclasses import replace

    import solvers
    from odeformer import registry

    class Other(solvers.Euler):
        pass

    before = (dict(solvers.STEPPERS), dict(registry.SOLVERS))
    with pytest.raises(ValueError, match="stepper name 'euler' is taken by Euler"):
        solvers.STEPPERS["euler"] = Other
    with pytest.raises(ValueError, match="stepper name 'heun' is taken by Heun"):
        solvers.STEPPERS.update(heun=Other)
    for name in ("diffusion", "dopri5"):  # a scheme of the user's under a named layer's or a continuous solver's name
        with pytest.raises(ValueError, match=f"stepper name '{name}' is taken by the"):
            solvers.register_stepper(name)(Other)
    for name in ("full_wave", "dopri5", "position_mix"):  # a named layer, a continuous solver, a scheme's own layer
        with pytest.raises(ValueError, match=f"solver name '{name}' is taken by"):
            registry.register_solver(replace(registry.solver("diffusion"), name=name))
    same = registry.SOLVERS["euler"]
    assert registry.register_solver(same) is same  # the same entry again: no change
    assert (dict(solvers.STEPPERS), dict(registry.SOLVERS)) == before
    try:  # a scheme registered after import joins the one table as it is written
        solvers.register_stepper("my_test_scheme")(Other)
        assert registry.SOLVERS["my_test_scheme"].stepper is Other
        assert registry.as_solver("my_test_scheme").block_stepper is solvers.Split
    finally:
        dict.pop(solvers.STEPPERS, "my_test_scheme", None)
        dict.pop(registry.SOLVERS, "my_test_scheme", None)
