"""``odeformer-analyze``: a scheme's numbers and figures, a run's atlas and refinement, and bad input in one line."""

from __future__ import annotations

import json
import math
import shutil
import warnings
from pathlib import Path

import pytest

import odeformer
from odeformer.app.commands.analyze import JSON_KEYS, main

FIXTURES = Path(__file__).parents[1] / "fixtures" / "runs_v1"


def _analyse(tmp_path, *args):
    out = tmp_path / "numbers.json"
    assert main([*args, "--out", str(tmp_path / "report"), "--json", str(out)]) == 0
    assert (tmp_path / "report" / "report.md").exists() and (tmp_path / "report" / "region.png").exists()
    return json.loads(out.read_text())


def test_a_first_order_tableau_has_its_exact_polynomial_and_intervals(tmp_path):
    numbers = _analyse(tmp_path, "rk4")
    assert set(JSON_KEYS) <= set(numbers)
    assert numbers["order"] == 4 and numbers["stability_polynomial"] == pytest.approx([1, 1, 1 / 2, 1 / 6, 1 / 24])
    assert numbers["imaginary_stability_interval"] == pytest.approx(2 * math.sqrt(2), rel=1e-10)
    assert numbers["real_stability_interval"] == pytest.approx(2.785293563405282, rel=1e-9)
    assert numbers["principal_error_norm"] == pytest.approx(math.sqrt(1745) / 2880, rel=1e-12)
    assert numbers["oscillator_stability_interval"] is None


def test_a_second_order_scheme_has_its_oscillator_interval_and_dispersion(tmp_path):
    numbers = _analyse(tmp_path, "velocity_verlet")
    assert numbers["oscillator_stability_interval"] == pytest.approx(2.0, rel=1e-9)
    assert numbers["dispersion_order"] == 2 and numbers["dissipation_order"] is None
    assert numbers["stability_polynomial"] is None and (tmp_path / "report" / "dispersion.png").exists()


def test_inline_coefficients_from_the_training_overrides(tmp_path):
    numbers = _analyse(tmp_path, "solver=tableau", "solver.options.A=[[],[1/2]]", "solver.options.b=[0,1]")
    assert numbers["order"] == 2 and numbers["stability_polynomial"] == pytest.approx([1, 1, 1 / 2])
    assert numbers["real_stability_interval"] == pytest.approx(2.0)


def test_a_heavy_ball_has_no_polynomial_but_its_companions_interval(tmp_path):
    numbers = _analyse(tmp_path, "light_wave")
    lam = 1 / (1 + math.exp(2.0))  # the solver's θ₀ = -2
    assert numbers["stability_polynomial"] is None
    assert numbers["real_stability_interval"] == pytest.approx(2 * (1 + lam), rel=1e-6)


@pytest.mark.slow  # every name of the table (about a second each)
@pytest.mark.parametrize("name", odeformer.solver_names("discrete"))
def test_every_solver_is_analysed(tmp_path, name):
    numbers = _analyse(tmp_path, name)
    assert numbers["order"] >= 0 and set(JSON_KEYS) <= set(numbers)


@pytest.mark.parametrize(
    "args, says",
    [
        (["wave"], "unknown solver 'wave' (did you mean 'full_wave'?)"),
        (["dopri5"], "'dopri5' is a continuous-depth solver"),
        (["rk4", "--refine", "2"], "--refine measures a trained run"),
        (["rk4", "--batch", "0"], "--batch and --eigenvalues must be positive"),
        (["solver=tableau", "solver.options.A=[[0,1],[0,0]]", "solver.options.b=[0,1]"], "A is not explicit"),
        (["solver=nope"], "unknown solver 'nope'"),
        (["rk4", "heun"], "give one solver name"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, tmp_path, args, says):
    assert main([*args, "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("odeformer-analyze: error:") and says in err and "\n" not in err, err


def test_a_run_gets_its_atlas_and_refinement(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "splitting", run)
    out = tmp_path / "numbers.json"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert main([str(run), "--refine", "2", "4", "8", "--json", str(out), "--batch", "4"]) == 0
    numbers = json.loads(out.read_text())
    assert len(numbers["layers"]) == 2 and numbers["small_step_limit"] is True
    for entry in numbers["layers"]:
        assert {"dt", "eigenvalues", "headroom", "predicted_contraction", "measured_contraction"} <= set(entry)
        assert entry["dt"] == 0.5 and all(len(pair) == 2 for pair in entry["eigenvalues"])
    assert [row["k"] for row in numbers["refinement"]] == [1, 2, 4, 8] and numbers["metric"] == "accuracy"
    assert all(0 <= row["metric"] <= 1 for row in numbers["refinement"]) and "observed_order" in numbers
    local = numbers["local_orders"]  # from each difference (k to 2k) to the next, the report's line beside the fit
    assert len(local) == 2 and all(isinstance(p, float) for p in local)
    assert ", ".join(f"{p:.2f}" for p in local) in (run / "analysis" / "report.md").read_text()
    assert {"atlas.png", "headroom.png", "contraction.png", "refinement.png", "report.md"} <= {
        p.name for p in (run / "analysis").iterdir()
    }
