"""odeformer-diagnose on trained run directories and on fresh models."""

import json

import pytest
import torch

import odeformer.app.commands.train as entry
from helpers import cli
from odeformer.app.commands.diagnose import fresh_config, main
from odeformer.app.reporting.diagnostics import TITLES, _readable_log_ticks, _tick_label, batch_of
from odeformer.app.run.builder import build
from odeformer.diagnostics import layer_measures

SMALL = ["train=debug", "data=digits", "model.depth=3", "model.dim=16", "model.heads=2"]


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("runs")
    for solver in ("diffusion", "full_wave"):
        done = cli(*SMALL, f"solver={solver}", f"train.out_dir={base / solver}")
        assert done.returncode == 0, done.stderr
    return base


@pytest.mark.slow  # two CLI trainings in its fixture: kept out of the default suite's 10 minutes
def test_diagnose_trained_runs_one_curve_per_solver(two_runs, tmp_path):
    out = tmp_path / "diag"
    assert main([str(two_runs / "diffusion"), str(two_runs / "full_wave"), "--out", str(out), "--batch", "8"]) == 0
    per_state = ("cosine", "dirichlet", "dirichlet_normalised", "feature_variance", "rank_collapse")
    for measure in (*per_state, "spectral_gap", "wave_energy"):
        assert (out / f"{measure}.png").stat().st_size > 5000
        record = json.loads((out / f"{measure}.json").read_text())
        assert record["measure"] == measure and record["title"] == " ".join(TITLES[measure].split())
        assert "=" in record["definition"] and record["units"] and record["y_scale"] in ("log", "linear")
        assert record["axis"].startswith("layer index")
        curves = record["runs"]
        assert set(curves) == {"diffusion", "full_wave"}  # labelled by what the runs differ in, not their folders
        layers = [0, 1, 2, 3] if measure in per_state else [1, 2, 3]
        assert all(c["layers"] == layers and len(c["values"]) == len(layers) for c in curves.values())
    assert json.loads((out / "dirichlet_normalised.json").read_text())["units"] == "dimensionless"
    assert "c²" in json.loads((out / "dirichlet.json").read_text())["units"]
    wave = json.loads((out / "wave_energy.json").read_text())
    assert "difference quotient" in wave["definition"] and "difference quotient" in wave["velocity"]
    assert {k: c["carries_velocity"] for k, c in wave["runs"].items()} == {k: "full_wave" in k for k in curves}
    phase = json.loads((out / "phase.json").read_text())
    assert list(phase["runs"]) == [k for k in curves if "full_wave" in k]  # only the second-order run has one
    assert (
        phase["token"]["token"] == 0 and "[CLS]" in phase["token"]["description"] and phase["channels"] == [0, 1, 2, 3]
    )
    (run,) = phase["runs"].values()
    assert run["layers"] == [1, 2, 3] and len(run["x"]) == len(run["v"]) == 3 and len(run["x"][0]) == 4
    assert (out / "phase.png").exists()


@pytest.mark.parametrize(
    ("low", "high", "labels"),
    [
        (7.5, 1030.0, {"10", "20", "50", "100", "200", "500", "1000"}),
        (0.18, 0.7, {"0.2", "0.3", "0.4", "0.5", "0.6", "0.7"}),
        (1e-9, 3.0, {"$10^{-8}$", "$10^{-4}$", "1"}),
    ],
)
def test_log_axes_label_only_readable_major_ticks(low, high, labels):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [low, high])
    ax.set_yscale("log")
    _readable_log_ticks(ax.yaxis, low, high)
    fig.canvas.draw()
    bottom, top = ax.get_ylim()
    shown = {t.get_text() for t in ax.yaxis.get_ticklabels() if bottom <= t.get_position()[1] <= top}
    assert labels <= shown and all(not t.get_text() for t in ax.yaxis.get_ticklabels(minor=True))
    plt.close(fig)
    assert _tick_label(2e-5) == "$2\\times 10^{-5}$" and _tick_label(250.0) == "250"


@pytest.mark.slow  # two CLI trainings in its fixture: kept out of the default suite's 10 minutes
def test_diagnose_defaults_to_the_run_directory(two_runs, tmp_path, monkeypatch):
    assert main([str(two_runs / "full_wave")]) == 0
    assert (two_runs / "full_wave" / "diagnostics" / "cosine.json").exists()
    monkeypatch.chdir(tmp_path)  # several runs: a comparison of them belongs to none, so not into the first's folder
    assert main([str(two_runs / "diffusion"), str(two_runs / "full_wave")]) == 0
    assert (tmp_path / "outputs" / "diagnostics" / "cosine.json").exists()
    assert not (two_runs / "diffusion" / "diagnostics").exists()


@pytest.mark.parametrize("data", ["digits", "synthetic"])
def test_diagnose_fresh_models(tmp_path, data):
    out = tmp_path / "fresh"
    assert main(["--fresh", "diffusion", "mix", "--data", data, "--depth", "3", "--dim", "16", "--out", str(out)]) == 0
    curves = json.loads((out / "cosine.json").read_text())["runs"]
    assert set(curves) == {"diffusion (depth 3, init)", "mix (depth 3, init)"}


def test_diagnose_bad_input_is_one_line(tmp_path, capsys):
    assert main([str(tmp_path / "missing")]) == 2
    assert main(["--fresh", "wave"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("odeformer-diagnose: error:") for line in err)
    assert "unknown solver 'wave'" in err[1]


@pytest.mark.slow  # trains and diagnoses an adaptive-solver run (about 15 s)
def test_diagnose_a_continuous_depth_run(tmp_path):
    run = tmp_path / "continuous"
    done = cli(*SMALL, "solver=dopri5_wave", "train.max_steps=4", "train.eval_every=2", f"train.out_dir={run}")
    assert done.returncode == 0, done.stderr
    assert main([str(run), "--batch", "4"]) == 0
    curves = json.loads((run / "diagnostics" / "spectral_gap.json").read_text())["runs"]
    assert [c["layers"] for c in curves.values()] == [[1, 2, 3]]
    assert (run / "diagnostics" / "phase.png").exists()


@pytest.mark.parametrize("solver", entry.choices("solver"))
def test_every_solver_of_the_training_app_diagnoses_fresh(solver):
    """``--fresh`` composes through ``odeformer-train``'s own config function, so every solver option works."""
    torch.manual_seed(0)
    data, model, info = build(fresh_config(solver, "digits", 2, 16))
    inputs, options = batch_of(data, model, 3)
    measures = layer_measures(model, *inputs, **options)
    assert len(measures["cosine"]) == 3 and info["solver"] == solver
