"""Runs saved by an earlier version keep working: they load, compose to the config their overrides make today, resume
and are diagnosed.

``tests/fixtures/runs_v1/`` holds tiny digits runs (depth 2, width 8, two steps) trained by the code before solvers
became one table and claims became values: a named tableau given as ``solver=tableau solver.options.name=omelyan2``,
a registered class given by its path (``solver=full_wave solver.stepper=solvers.SymmetricSplitting``, and
``solver=heun solver.stepper=solvers.TwoStageRK``), inline coefficients, and a continuous solver whose equation was
then called ``dynamics``. Their checkpoints are read weights-only, as every checkpoint is.
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest
import torch

from helpers import cli
from odeformer.app.commands.train import compose_config
from odeformer.app.run.builder import load_run
from odeformer.app.run.checkpoints import load_checkpoint
from odeformer.app.run.sweep import config_drift
from odeformer.app.run.upgrade import upgrade_config, upgrade_overrides

FIXTURES = Path(__file__).parents[1] / "fixtures" / "runs_v1"
RUNS = sorted(path.name for path in FIXTURES.iterdir())
NOW = {  # the solver each run is today, and what its stored spelling was
    "omelyan2": "omelyan2",
    "splitting": "symmetric_splitting",
    "two_stage": "two_stage_rk",
    "inline": "tableau",
    "wave_dopri": "dopri5_wave",
}


def _copy(name: str, tmp_path: Path) -> Path:
    run = tmp_path / name
    shutil.copytree(FIXTURES / name, run)
    return run


def _overrides(run: Path) -> list[str]:
    stored = load_checkpoint(run / "last.pt")["info"]["overrides"]
    return [o for o in stored if not o.startswith("train.out_dir=")]


def test_the_fixtures_are_what_this_file_says():
    assert RUNS == sorted(NOW)


@pytest.mark.parametrize("name", RUNS)
def test_a_saved_run_loads_and_computes_what_it_computed(name, tmp_path):
    """Rebuilt from its stored config (read as today's), its best weights load strictly into today's model, and the
    model evaluates its own test split to the accuracy the run reported."""
    run = _copy(name, tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        data, model, info = load_run(run)
    assert info["solver"] == NOW[name]
    images, labels = data.splits["test"]
    with torch.no_grad():
        accuracy = float((model(images).argmax(-1) == labels).float().mean())
    summary = json.loads((run / "summary.json").read_text())
    assert accuracy == pytest.approx(summary["test"], abs=1e-6)


@pytest.mark.parametrize("name", RUNS)
def test_a_saved_runs_overrides_compose_to_its_config_today(name, tmp_path):
    """Its stored overrides, in today's spelling, compose to the config it stored, read as today's: no setting
    drifted (what ``odeformer-reproduce`` checks before it reuses a run)."""
    run = _copy(name, tmp_path)
    overrides = upgrade_overrides(_overrides(run))
    assert not any("solver.options.name=" in o or "solver.stepper=" in o or "dynamics" in o for o in overrides)
    assert f"solver={NOW[name]}" in overrides or name == "inline"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert config_drift(run, overrides, compose_config) == []
        stored = upgrade_config(load_checkpoint(run / "last.pt")["info"]["config"])
    assert stored["solver"]["name"] == NOW[name]


def test_old_spellings_read_as_todays_with_one_warning():
    old = ["solver=tableau", "solver.options.name=symplectic_euler", "model.depth=2"]
    assert upgrade_overrides(old) == ["solver=semi_implicit_euler", "model.depth=2"]
    assert upgrade_overrides(["solver.stepper=solvers.TripleJump"]) == ["solver=triple_jump"]
    assert upgrade_overrides(["solver.stepper=my_schemes.Mine"]) == ["solver=my_schemes.Mine"]  # one spelling
    assert upgrade_overrides(["solver=dopri5", "solver.dynamics=wave"]) == ["solver=dopri5", "solver.equation=wave"]
    hostile = {"solver": {"_target_": "odeformer.preset", "name": "full_wave", "stepper": "os.system", "options": {}}}
    upgraded = upgrade_config(hostile)["solver"]  # a path: left for the builder to refuse, never read
    assert upgraded["name"] == "os.system" and "stepper" not in upgraded


def test_a_stored_stepper_path_into_the_solvers_package_loads_none_of_its_modules(monkeypatch):
    """``solvers`` loads its kit (``solvers.testing``, ``solvers.analysis``) when the attribute is asked for; reading
    a stored ``solver.stepper`` as today's name looks only at what the package already holds."""
    import sys

    import solvers

    for name in ("testing", "analysis"):  # as if never loaded in this process
        if name in vars(solvers):  # (hasattr would load it)
            monkeypatch.delattr(solvers, name)
        monkeypatch.delitem(sys.modules, f"solvers.{name}", raising=False)
    for path in ("solvers.testing", "solvers.analysis"):
        node = {"_target_": "odeformer.solver", "name": "full_wave", "stepper": path, "options": {}}
        assert upgrade_config({"solver": node})["solver"]["name"] == path
        assert upgrade_overrides([f"solver.stepper={path}"]) == [f"solver={path}"]
    assert "solvers.testing" not in sys.modules and "solvers.analysis" not in sys.modules


@pytest.mark.slow  # trains four more steps of each of two runs from the command line (about 20 s)
@pytest.mark.parametrize("name", ["splitting", "wave_dopri"])
def test_a_saved_run_resumes_with_its_overrides_in_todays_spelling(name, tmp_path):
    run = _copy(name, tmp_path)
    overrides = upgrade_overrides(_overrides(run))
    done = cli(*overrides, f"train.out_dir={run}", "train.resume=true", "train.max_steps=4")
    assert done.returncode == 0, done.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == 4 and summary["solver"] == NOW[name]


def test_a_saved_run_is_diagnosed(tmp_path):
    from odeformer.app.commands.diagnose import main

    run = _copy("splitting", tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert main([str(run), "--out", str(tmp_path / "out"), "--batch", "4"]) == 0
    assert (tmp_path / "out" / "cosine.json").exists()


def test_a_setting_added_since_a_run_was_saved_is_read_as_what_the_run_did():
    """A run saved before ``model.parameterization`` (and the other :data:`ADDED` settings) existed resumes: each
    setting it lacks and today's config has is read as the value that was its behaviour, and nothing else is filled."""
    from odeformer.app.run.resume import config_differences
    from odeformer.app.run.upgrade import ADDED, with_added

    stored = {"model": {"depth": 2}, "train": {"lr": 1e-3}}
    today = {"model": {"depth": 2, "parameterization": "standard", "knots": None}, "train": {"lr": 1e-3}}
    assert [d[0] for d in config_differences(stored, today)] == ["model.parameterization", "model.knots"]
    assert config_differences(with_added(stored, today), today) == []
    changed = {**today, "model": {**today["model"], "parameterization": "ode"}}  # a real change is still one
    assert [d[0] for d in config_differences(with_added(stored, changed), changed)] == ["model.parameterization"]
    assert with_added(stored, {"model": {}, "train": {}}) == stored and ADDED["train.resolutions"] == [1.0]
