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


def _generated_table(page: str, name: str) -> str:
    """The text between a page's markers of the generated table ``name``."""
    text = (ROOT / page).read_text()
    start = text.index(f"<!-- {name} table:")
    start = text.index("\n", start) + 1
    return text[start : text.index(f"\n<!-- end of the {name} table -->", start)]


def test_the_schemes_page_solver_table_is_the_generated_one():
    from odeformer.registry import solver_table

    assert _generated_table("docs/schemes.md", "solver") == solver_table()


def test_the_schemes_page_stepper_table_is_the_generated_one():
    import solvers

    assert _generated_table("docs/schemes.md", "stepper") == solvers.stepper_table()


def test_the_models_page_continuous_table_is_the_generated_one():
    from odeformer.continuous import continuous_table

    assert _generated_table("docs/models.md", "continuous") == continuous_table()


def test_the_stepper_table_states_each_schemes_claims():
    """A row's claims are its class's: a scheme registered with other claims shows them."""
    import solvers

    rows = {line.split(" | ")[0].strip("| `"): line for line in solvers.stepper_table().splitlines()[2:]}
    assert set(rows) == set(solvers.STEPPERS.schemes())
    for name, cls in solvers.STEPPERS.schemes().items():
        cells = [cell.strip() for cell in rows[name].strip("|").split(" | ")]
        assert cells[2] == str(cls.order) and cells[3].startswith(str(cls.evals_per_step))
        assert (cells[4] == "yes") == cls.symplectic and cells[5].startswith("yes") == cls.reversible


def test_old_public_names_resolve_to_the_new_ones_with_a_warning():
    """Renames are data (``odeformer.RENAMED``): each old name is the new object, with one warning."""
    import odeformer

    for old, new in odeformer.RENAMED.items():
        with pytest.warns(DeprecationWarning, match=f"odeformer.{old} is now odeformer.{new}"):
            assert getattr(odeformer, old) is getattr(odeformer, new)
    with pytest.warns(DeprecationWarning, match="Solver.for_stepper"):
        assert odeformer.spec_for_stepper == odeformer.Solver.for_stepper
    for gone in ("SOLVERS", "PRESETS", "LAYER_SPECS"):  # the second table: every name's record, read from the one
        with pytest.warns(DeprecationWarning, match=f"odeformer.{gone} is gone: solvers.STEPPERS is the one table"):
            table = getattr(odeformer, gone)
        assert list(table) == odeformer.solver_names()
        assert all(table[name] == odeformer.as_solver(name) for name in ("mix", "euler", "dopri5"))
    with pytest.raises(AttributeError, match="no attribute 'derive'"):
        odeformer.derive  # noqa: B018


def test_a_solver_name_means_one_thing():
    """One table of names, :data:`solvers.STEPPERS`: a scheme's name is its own layer (the one its claims call for),
    a variant row its scheme's layer with its own options and layout, and the continuous-depth solvers' names are
    reserved there."""
    import solvers
    from odeformer.continuous import CONTINUOUS
    from odeformer.registry import Solver, as_solver, solver_names

    names = solver_names("discrete")
    assert len(names) == len(set(names)) and not set(names) & set(CONTINUOUS)
    assert set(names) == set(solvers.STEPPERS) and set(CONTINUOUS) <= set(solvers.STEPPERS.reserved)
    for name, cls in solvers.STEPPERS.schemes().items():  # one row serves both: the scheme's own layer
        preset, derived = as_solver(name), Solver.for_stepper(cls, name)
        built, own = preset.build(4), derived.build(4)
        assert repr(built) == repr(own) and preset.form == derived.form and preset.dt == derived.dt
        assert {k: v.tolist() for k, v in built.state_dict().items()} == {
            k: v.tolist() for k, v in own.state_dict().items()
        }
    for name, row in solvers.STEPPERS.variants().items():  # the scheme's layout, with the row's own changes
        preset, derived = as_solver(name), Solver.for_stepper(row.scheme, name)
        assert (preset.stepper, preset.form, preset.dt, preset.block_stepper) == (
            derived.stepper, derived.form, derived.dt, derived.block_stepper
        )  # fmt: skip
        assert (preset.options, preset.ffn, preset.ffn_dt, preset.memory) == (
            dict(row.options), row.ffn, row.ffn_dt, row.memory
        )  # fmt: skip
    # the official mix and the gated-mix scheme: two layers, two names
    assert as_solver("mix").build(4).stepper.order == 0 and as_solver("position_mix").build(4).stepper.order == 1
    assert solvers.STEPPERS["mix"].scheme is solvers.STEPPERS["position_mix"] is solvers.Mix


def test_a_taken_name_cannot_be_registered_twice():
    """Uniqueness is checked when a name is written: a refused name is not written."""
    import solvers
    from odeformer import registry  # reserves the continuous-depth solvers' names

    class Other(solvers.Euler):
        pass

    before = dict(solvers.STEPPERS)
    with pytest.raises(ValueError, match="stepper name 'euler' is taken by Euler"):
        solvers.STEPPERS["euler"] = Other
    with pytest.raises(ValueError, match="stepper name 'heun' is taken by Heun"):
        solvers.STEPPERS.update(heun=Other)
    with pytest.raises(ValueError, match="stepper name 'diffusion' is taken by a variant of Euler"):
        solvers.register_stepper("diffusion")(Other)  # a scheme of the user's under a variant row's name
    with pytest.raises(ValueError, match="stepper name 'dopri5' is taken by a continuous-depth solver"):
        solvers.register_stepper("dopri5")(Other)
    for name in ("full_wave", "position_mix"):  # a variant row's name, a scheme's own
        with pytest.raises(ValueError, match=f"stepper name '{name}' is taken by"):
            solvers.STEPPERS[name] = solvers.Variant(solvers.Euler, "another layer")
    with pytest.raises(ValueError, match="variant 'mine': its scheme Other is not registered"):
        solvers.STEPPERS["mine"] = solvers.Variant(Other, "a variant of an unregistered scheme")
    solvers.STEPPERS["euler"] = solvers.Euler  # the same row again: no change
    solvers.STEPPERS["mix"] = solvers.STEPPERS["mix"]
    assert dict(solvers.STEPPERS) == before
    try:  # a scheme registered after import is a solver name as it is written
        solvers.register_stepper("my_test_scheme")(Other)
        assert registry.as_solver("my_test_scheme").stepper is Other
        assert registry.as_solver("my_test_scheme").block_stepper is solvers.Split
        assert "my_test_scheme" in registry.solver_names()
    finally:
        dict.pop(solvers.STEPPERS, "my_test_scheme", None)
