"""The application as a package: the wheel carries its configs, and odeformer-train runs from it, outside the repo."""

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from helpers import HANG

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation", "-q", "-w", str(out)],
        capture_output=True,
        text=True,
        timeout=HANG,
    )
    assert build.returncode == 0, build.stderr
    (path,) = out.glob("*.whl")
    return path


def test_the_wheel_is_named_for_pypi_and_carries_the_configs(wheel):
    assert wheel.name.startswith("depth_as_time-")  # odeformer and solvers are other projects' names on PyPI
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"odeformer/configs/train.yaml", "odeformer/configs/experiment/digits_vit.yaml"} <= names
    assert {"odeformer/app/run/sweeps/results.yaml", "odeformer/app/run/sweeps/smoke.yaml"} <= names  # the sections
    assert "odeformer/app/run/groups.json" in names  # the config groups, read without torch
    assert any(n.startswith("solvers/") for n in names) and not any(n.startswith("configs/") for n in names)
    assert {"solvers/testing/__init__.py", "solvers/testing/thresholds.py"} <= names  # the property kit's package


def test_the_wheel_carries_every_module_of_the_library(wheel):
    """A sub-package missing from pyproject's list would import in the repository and fail once installed."""
    names = set(zipfile.ZipFile(wheel).namelist())
    modules = {
        p.relative_to(ROOT).as_posix() for package in ("odeformer", "solvers") for p in (ROOT / package).rglob("*.py")
    }
    assert modules - names == set()


@pytest.mark.slow  # installs the wheel in a fresh venv and trains (about 15 s)
def test_odeformer_train_runs_from_the_installed_wheel_outside_the_repository(wheel, tmp_path):
    target = tmp_path / "site"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        capture_output=True,
        text=True,
        timeout=HANG,
    )
    assert install.returncode == 0, install.stderr
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(target)}
    where = subprocess.run(
        [sys.executable, "-c", "import odeformer, solvers; print(odeformer.__file__); print(solvers.__file__)"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
    )
    assert all(line.startswith(str(target)) for line in where.stdout.split()), where.stdout  # the wheel, not the repo
    out = tmp_path / "run"
    args = ["train=debug", "train.max_steps=3", "data=synthetic", "model.depth=1", "model.dim=16", "model.heads=2"]
    run = subprocess.run(
        [sys.executable, "-m", "odeformer.app.train", *args, f"train.out_dir={out}"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG,
    )
    assert run.returncode == 0, run.stderr
    assert json.loads((out / "summary.json").read_text())["steps"] == 3
    assert not (ROOT / "outputs" / "run").exists() and not list(work.iterdir())  # nothing written where it ran
