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


# -- one solver namespace ---------------------------------------------------------------------------------------------


def _readme_table(name: str) -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index(f"<!-- {name} table:")
    start = text.index("\n", start) + 1
    return text[start : text.index(f"\n<!-- end of the {name} table -->", start)]


def test_the_readme_solver_table_is_the_generated_one():
    from odeformer.presets import solver_table

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


def test_the_layer_spec_registry_s_old_names_are_its_new_ones():
    """The README's and the examples' old public names stay, as the same objects; the library's are the new ones."""
    import odeformer
    from odeformer import presets

    assert odeformer.preset is presets.layer_spec and odeformer.PRESETS is presets.LAYER_SPECS
    assert odeformer.Preset is presets.LayerSpec
    assert not hasattr(odeformer, "derive") and odeformer.spec_for_stepper is presets.spec_for_stepper
    assert odeformer.spec_of("full_wave") is presets.LAYER_SPECS["full_wave"]


def test_a_solver_name_means_one_thing():
    import solvers
    from odeformer.continuous import CONTINUOUS
    from odeformer.presets import LAYER_SPECS, solver_names, spec_for_stepper, spec_of

    names = solver_names()
    assert len(names) == len(set(names)) and not set(names) & set(CONTINUOUS)
    for name in set(LAYER_SPECS) & set(solvers.STEPPERS):  # one entry serves both: the scheme's own layer
        preset, derived = spec_of(name), spec_for_stepper(solvers.STEPPERS[name], name)
        built, own = preset.build(4), derived.build(4)
        assert repr(built) == repr(own) and preset.form == derived.form and preset.dt == derived.dt
        assert {k: v.tolist() for k, v in built.state_dict().items()} == {
            k: v.tolist() for k, v in own.state_dict().items()
        }
    # the official mix and the gated-mix scheme: two layers, two names
    assert spec_of("mix").build(4).stepper.order == 0 and spec_of("position_mix").build(4).stepper.order == 1
    assert "mix" not in solvers.STEPPERS


def test_a_taken_name_cannot_be_registered_twice(monkeypatch):
    import pytest

    import solvers
    from odeformer import presets

    monkeypatch.setattr(presets, "LAYER_SPECS", dict(presets.LAYER_SPECS))
    registry = solvers._registry.Registry(solvers.STEPPERS)
    monkeypatch.setattr(solvers, "STEPPERS", registry)

    class Other(solvers.Euler):
        pass

    with pytest.raises(ValueError, match="stepper name 'euler' is taken by Euler"):
        solvers.STEPPERS["euler"] = Other
    with pytest.raises(ValueError, match="stepper name 'heun' is taken by Heun"):
        solvers.STEPPERS.update(heun=Other)
    for name in ("full_wave", "dopri5", "position_mix"):  # a preset, a continuous solver, a scheme's own layer
        spec = presets.layer_spec("diffusion")
        with pytest.raises(ValueError, match=f"solver name '{name}' is taken by"):
            presets.register_solver(presets.replace(spec, name=name))
    same = presets.replace(presets.spec_for_stepper(solvers.Euler, "euler"), doc="Euler, described")
    assert presets.register_solver(same) is same  # a scheme's own layer, described: one entry for both
    registry["diffusion"] = Other  # a scheme of the user's under a preset's name (solvers cannot see presets)
    with pytest.raises(ValueError, match="solver name 'diffusion' names two things"):
        presets.solver_names()
