import importlib.util
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_oscillator_example(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("oscillator", ROOT / "examples" / "oscillator.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "energy.png"
    results = module.main(["--horizon", "50", "--out", str(out)])
    assert out.stat().st_size > 10_000
    printed = capsys.readouterr().out
    import solvers

    for name, cls in solvers.STEPPERS.schemes().items():  # every scheme (a variant row is a scheme's layer)
        assert name in printed
        if cls.order == 0:  # no small-step limit: nothing to measure
            assert results[name]["order"] is None
        else:
            assert abs(results[name]["order"] - cls.order) < 0.3
    # the symplectic schemes keep the energy error bounded; explicit Euler does not
    assert results["velocity_verlet"]["max_energy_error"] < 1e-2
    assert results["semi_implicit_euler"]["max_energy_error"] < 0.1
    assert results["euler"]["max_energy_error"] > 1.0


def test_continuous_vit_example_runs(capsys):
    spec = importlib.util.spec_from_file_location("continuous_vit", ROOT / "examples" / "continuous_vit.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    results = module.main(["--steps", "8"])
    assert len(results) == 3 and len({r["params"] for r in results.values()}) == 1  # equal parameter counts
    continuous = results["continuous dopri5"]
    assert continuous["nfe"] and all(n >= 6 for _, n in continuous["nfe"])
    assert "NFE per forward" in capsys.readouterr().out


def test_hf_finetune_example_runs(capsys):
    pytest.importorskip("transformers")
    spec = importlib.util.spec_from_file_location("hf_finetune", ROOT / "examples" / "hf_finetune.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    results = module.main(["--steps", "6"])
    assert results["initial_gap"] < 1e-5  # the diffusion copy computes the HF model
    assert all(0.0 <= results[s]["accuracy"] <= 1.0 for s in ("diffusion", "full_wave"))
    assert "full_wave    test accuracy" in capsys.readouterr().out


def test_an_example_without_its_data_says_so_and_exits_2(tmp_path):
    import os
    import subprocess
    import sys

    from helpers import HANG

    env = {**os.environ, "ODEFORMER_DATA": str(tmp_path / "none")}
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "shakespeare_sample.py")],
        env=env, capture_output=True, text=True, timeout=HANG, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2 and "skipped:" in done.stderr and "odeformer-data shakespeare" in done.stderr
