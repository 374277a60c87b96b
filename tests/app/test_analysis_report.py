"""What ``odeformer-analyze`` tells a scheme's designer: every report ends with its verdicts in words; a number that
is absent says why (an error constant needs coefficients; an exact phase or amplitude is "none (exact)"); a
time-dependent scheme is said to be analysed at one time; figures have labelled axes, whole-number layer ticks and a
log axis that stops at double precision's rounding; and a run's analysis computes with the cores that are free."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

import solvers
from helpers import PlainEuler
from odeformer import atlas
from odeformer.app import files
from odeformer.app.commands.analyze import main
from odeformer.app.reporting.analysis import FLOOR, run_verdicts, scheme_report

FIXTURES = Path(__file__).parents[1] / "fixtures" / "runs_v1"


class TimedEuler(PlainEuler):
    """Euler whose step shrinks as the time grows: its coefficients depend on t."""

    def step(self, field, t, y, dt, state):
        return y + dt / (1.0 + float(t)) * field(t, y), state


def _report(tmp_path, stepper) -> tuple[dict, str]:
    numbers = scheme_report(stepper, "mine", tmp_path)
    return numbers, (tmp_path / "report.md").read_text()


def test_a_scheme_without_coefficients_says_why_it_has_no_error_constant(tmp_path):
    numbers, report = _report(tmp_path, PlainEuler())
    assert numbers["principal_error_norm"] is None
    assert "principal error norm: none (no coefficients to read it from)" in report
    verdicts = report.split("## Verdicts", 1)[1]
    assert "No error constant: it is read from a scheme's coefficients" in verdicts
    assert "Order 1: halving dt divides a step-size-limited error by about 2." in verdicts
    assert "stable for dt·|λ| up to 2" in verdicts and "None" not in report


def test_a_time_dependent_scheme_is_said_to_be_analysed_at_one_time(tmp_path):
    assert "depends on the time t: every number here is at t = 0" in _report(tmp_path / "a", TimedEuler())[1]
    assert "depends on the time" not in _report(tmp_path / "b", PlainEuler())[1]


def test_an_exact_amplitude_reads_as_none_exact_and_in_words(tmp_path):
    numbers, report = _report(tmp_path, solvers.VelocityVerlet())
    assert numbers["dissipation_order"] is None
    assert "dissipation order: none (exact)" in report
    assert "keeps the amplitude (no dissipation" in report and "Its phase errs by O((ω dt)^2)" in report


def test_the_dispersion_plot_stops_at_rounding(tmp_path, monkeypatch):
    """forest_ruth's amplitude error is exactly zero at many ω dt: the log axis ends at :data:`FLOOR`, not at 1e-300."""
    drawn = []
    real = files.write_figure
    monkeypatch.setattr(files, "write_figure", lambda path, fig, dpi=110: drawn.append(fig) or real(path, fig, dpi))
    scheme_report(solvers.STEPPERS["forest_ruth"](), "forest_ruth", tmp_path)
    axis = next(fig.axes[0] for fig in drawn if "dispersion" in fig.axes[0].get_title())
    low, _ = axis.get_ylim()
    assert FLOOR / 10 < low <= FLOOR
    assert min(min(line.get_ydata()) for line in axis.get_lines()) >= FLOOR


def test_a_runs_figures_have_labelled_axes_and_whole_layer_ticks(tmp_path, monkeypatch, capsys):
    drawn = []
    real = files.write_figure
    monkeypatch.setattr(files, "write_figure", lambda path, fig, dpi=110: drawn.append(fig) or real(path, fig, dpi))
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "splitting", run)
    assert main([str(run), "--batch", "2"]) == 0, capsys.readouterr().err
    for fig in drawn:
        fig.canvas.draw()
        for axis in (a for a in fig.axes if a.get_visible() and a.axison):
            assert axis.get_xlabel() and axis.get_ylabel(), axis.get_title()
            if axis.get_xlabel() == "layer":
                ticks = [t for t in axis.get_xticks() if axis.get_xlim()[0] <= t <= axis.get_xlim()[1]]
                assert ticks and all(float(t).is_integer() for t in ticks)
    report = (run / "analysis" / "report.md").read_text()
    assert report.split("## Verdicts", 1)[1].strip().startswith("- Every layer's step is inside")


def _layer(i, predicted, measured, headroom=2.0):
    return {
        "layer": i,
        "headroom": headroom,
        "growing": 0,
        "predicted_contraction": predicted,
        "measured_contraction": measured,
    }


def test_a_runs_verdicts_explain_the_contraction_and_the_refinement():
    layers = [_layer(1, 0.6, 1.4), _layer(2, 0.7, 1.3)]
    converging = {"refinement": [{"k": 1, "logit_change": 0.01}], "observed_order": 2.05, "small_step_limit": True}
    converging["verdict"] = atlas.verdict(converging, 2)
    said = " ".join(run_verdicts({"layers": layers, **converging}))
    assert "agree within 10 % in 0 of 2 layers" in said
    assert "In layers 1, 2 the layer spreads the tokens more than its attention predicts" in said
    assert "It behaves as an ODE: refined, its logits converge at observed order 2.05 (its layers' order is 2)" in said
    diverging = {"refinement": [{"k": 1, "logit_change": 0.4}], "observed_order": -0.3, "small_step_limit": True}
    diverging["verdict"] = atlas.verdict(diverging, 1)
    said = " ".join(run_verdicts({"layers": [_layer(1, 0.5, 0.5, headroom=0.4)], **diverging}))
    assert "Layer 1's step is outside its scheme's stability region (headroom 0.4 < 1)" in said
    assert "It does not behave as an ODE: refined, its logits converge at observed order -0.30" in said


def test_a_runs_analysis_computes_with_the_idle_cores(tmp_path, monkeypatch, capsys):
    """On a machine whose cores are busy, torch's own thread count makes the analysis many times slower (threads
    wait on each other): it computes with the idle ones, as training does, and says so."""
    from odeformer.app.run import launch

    seen = []
    monkeypatch.setattr(launch, "idle_threads", lambda: 1)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 4)
    monkeypatch.setattr(torch, "set_num_threads", seen.append)
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "splitting", run)
    assert main([str(run), "--batch", "2", "--json", str(tmp_path / "n.json")]) == 0
    assert seen == [1] and "computing with 1 of 4 CPU threads" in capsys.readouterr().out
    assert json.loads((tmp_path / "n.json").read_text())["layers"]
