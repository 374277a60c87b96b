import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_oscillator_example(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("oscillator", ROOT / "examples" / "oscillator.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "energy.png"
    results = module.main(["--horizon", "50", "--out", str(out)])
    assert out.stat().st_size > 10_000
    printed = capsys.readouterr().out
    import solvers

    for name, cls in solvers.STEPPERS.items():
        assert name in printed
        assert abs(results[name]["order"] - cls.order) < 0.3
    # the symplectic schemes keep the energy error bounded; explicit Euler does not
    assert results["velocity_verlet"]["max_energy_error"] < 1e-2
    assert results["semi_implicit_euler"]["max_energy_error"] < 0.1
    assert results["euler"]["max_energy_error"] > 1.0
