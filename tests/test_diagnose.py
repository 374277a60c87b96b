"""odeformer-diagnose on trained run directories and on fresh models."""

import json

import pytest

from helpers import cli
from odeformer.diagnose import main

SMALL = ["train=debug", "data=digits", "model.depth=3", "model.dim=16", "model.heads=2"]


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("runs")
    for solver in ("diffusion", "full_wave"):
        done = cli(*SMALL, f"solver={solver}", f"train.out_dir={base / solver}")
        assert done.returncode == 0, done.stderr
    return base


def test_diagnose_trained_runs_one_curve_per_solver(two_runs, tmp_path):
    out = tmp_path / "diag"
    assert main([str(two_runs / "diffusion"), str(two_runs / "full_wave"), "--out", str(out), "--batch", "8"]) == 0
    for measure in ("cosine", "dirichlet", "rank_collapse", "spectral_gap", "wave_energy"):
        assert (out / f"{measure}.png").stat().st_size > 5000
        curves = json.loads((out / f"{measure}.json").read_text())
        assert len(curves) == 2 and any("diffusion" in k for k in curves) and any("full_wave" in k for k in curves)
        lengths = {len(v) for v in curves.values()}
        assert lengths == ({4} if measure in ("cosine", "dirichlet", "rank_collapse") else {3})
    phase = json.loads((out / "phase.json").read_text())
    assert list(phase) == [k for k in curves if "full_wave" in k]  # only the second-order run has a phase portrait
    assert (out / "phase.png").exists()


def test_diagnose_defaults_to_the_run_directory(two_runs):
    assert main([str(two_runs / "full_wave")]) == 0
    assert (two_runs / "full_wave" / "diagnostics" / "cosine.json").exists()


@pytest.mark.parametrize("data", ["digits", "synthetic"])
def test_diagnose_fresh_models(tmp_path, data):
    out = tmp_path / "fresh"
    assert main(["--fresh", "diffusion", "mix", "--data", data, "--depth", "3", "--dim", "16", "--out", str(out)]) == 0
    assert set(json.loads((out / "cosine.json").read_text())) == {"diffusion (depth 3, init)", "mix (depth 3, init)"}


def test_diagnose_bad_input_is_one_line(tmp_path, capsys):
    assert main([str(tmp_path / "missing")]) == 2
    assert main(["--fresh", "wave"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("odeformer-diagnose: error:") for line in err)
    assert "unknown solver 'wave'" in err[1]


def test_diagnose_a_continuous_depth_run(tmp_path):
    run = tmp_path / "continuous"
    done = cli(*SMALL, "solver=dopri5_wave", "train.max_steps=4", "train.eval_every=2", f"train.out_dir={run}")
    assert done.returncode == 0, done.stderr
    assert main([str(run), "--batch", "4"]) == 0
    curves = json.loads((run / "diagnostics" / "spectral_gap.json").read_text())
    assert [len(v) for v in curves.values()] == [3]
    assert (run / "diagnostics" / "phase.png").exists()
