"""``odeformer-compare`` checks what it is given before it builds anything: sizes bounded before the job list, every
row's config checked as a run would check it, step costs read from a file bounded, a scheme of one's own refused
quickly when its class is not there (with the nearest one) and in one line when its module raises as it runs; and
it says how far it is and how much is left, counting the figures it really wrote."""

from __future__ import annotations

import json
import re
import sys
import textwrap

import pytest

from odeformer.app.commands import analyze, compare
from odeformer.app.run.bounds import MAX_COST, MAX_SEEDS

TINY = ["train=debug", "train.max_steps=2", "model.depth=1", "data=synthetic", "model.dim=16", "model.heads=2"]


def _one(capsys) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--seeds", "1000000000"], f"--seeds 1000000000 is more than the {MAX_SEEDS} seeds"),
        (["diffusion:train.out_dir=/tmp/elsewhere"], "train.out_dir is set by the command for every run"),
        (["diffusion:train.max_steps=-5"], "train.max_steps is set by the command"),
        (["train.max_steps=-5"], "train.max_steps must be at least 1, got -5"),
        (["model.dt=1e-320"], "model.dt=1e-320 is 0 in float32"),
        (["tableau:A=[[],[1e308]]:b=[0.5,0.5]"], "coefficient 1e+308"),
    ],
)
def test_compare_refuses_before_any_job_is_built(tmp_path, argv, words, capsys, monkeypatch):
    from odeformer.app.run import sweep

    built = []
    monkeypatch.setattr(sweep.Sweep, "evaluations", lambda *a, **k: built.append(a) or {})
    out = tmp_path / "cmp"
    assert compare.main(["rk4", "--against", "diffusion", "--out", str(out), *TINY, *argv]) == 2
    assert words in _one(capsys)
    assert built == [] and not list(out.glob("runs/*"))


def test_forged_step_costs_are_refused_naming_the_file(tmp_path):
    from odeformer.app.commands.train import compose_config
    from odeformer.app.run.sweep import Sweep

    fixed, rows = TINY, {"diffusion": ["solver=diffusion"], "rk4": ["solver=rk4"]}
    measured = {"fixed": fixed, "rows": rows, "columns": {"": []}, "rounds": 2}
    for forged in (-1, 0, 1e-9, 1e9, "1", None):
        (tmp_path / "costs.json").write_text(json.dumps({"measured": measured, "costs": {"rk4": forged}}))
        with pytest.raises(ValueError, match=r"costs\.json holds step costs .*must be a number from 0\.001 to 1000"):
            Sweep(compose_config, 1).step_costs(fixed, rows, {"": []}, tmp_path, baseline="diffusion", rounds=2)
    (tmp_path / "costs.json").write_text(json.dumps({"measured": measured, "costs": {"rk4": 2.5}}))
    assert Sweep(compose_config, 1).step_costs(fixed, rows, {"": []}, tmp_path, "diffusion", 2) == {"rk4": 2.5}
    assert 1 / MAX_COST <= 2.5 <= MAX_COST


SCHEMES = textwrap.dedent(
    """
    import pathlib
    pathlib.Path("ran.txt").write_text("the module ran")
    import solvers


    class MyHeun(solvers.Heun):
        pass
    """
)


def test_a_misspelled_class_is_refused_with_the_nearest_before_its_module_runs(tmp_path, capsys, monkeypatch):
    (tmp_path / "my_schemes_typo.py").write_text(SCHEMES)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "my_schemes_typo", raising=False)
    assert compare.main(["my_schemes_typo.MyHuen", "--against", "diffusion", "--out", "cmp", *TINY]) == 2
    line = _one(capsys)
    assert "defines no MyHuen; did you mean my_schemes_typo.MyHeun?" in line
    assert not (tmp_path / "ran.txt").exists() and not (tmp_path / "cmp").exists()  # nothing ran, nothing written
    assert analyze.main(["my_schemes_typo.Nothing"]) == 2
    assert "defines no Nothing; its classes: MyHeun." in _one(capsys)
    assert not (tmp_path / "ran.txt").exists()


RAISES = "raise ZeroDivisionError('the module fails as it runs')\n\n\nclass Mine:\n    pass\n"


def test_a_module_that_raises_as_it_runs_is_one_line(tmp_path, capsys, monkeypatch):
    (tmp_path / "raising_schemes.py").write_text(RAISES)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "raising_schemes", raising=False)
    assert analyze.main(["raising_schemes.Mine", "--out", str(tmp_path / "a")]) == 2
    assert "importing it raised ZeroDivisionError: the module fails as it runs" in _one(capsys)
    argv = ["raising_schemes.Mine", "--against", "diffusion", "--out", "cmp", "--workers", "1", *TINY]
    assert compare.main(argv) == 2
    assert "importing it raised ZeroDivisionError: the module fails as it runs" in _one(capsys)


def test_compare_says_run_i_of_n_and_counts_the_figures_it_wrote(tmp_path, capsys):
    out = tmp_path / "cmp"
    argv = ["rk4", "--against", "diffusion", "--seeds", "2", "--out", str(out), "--workers", "1", "--rounds", "1"]
    assert compare.main([*argv, *TINY]) == 0, capsys.readouterr().err
    said = capsys.readouterr().out.splitlines()
    progress = [line for line in said if re.match(r"run \d+ of \d+ done", line)]
    assert [line.split(" done")[0] for line in progress] == [f"run {i} of 4" for i in range(1, 5)]
    assert all("min left" in line for line in progress[:-1]) and "left" not in progress[-1]
    figures = json.loads((out / "comparison.json").read_text())["figures"]
    pngs = sorted(p.name for p in (out / "figures").glob("*.png"))
    assert sorted(f.split("/")[-1] for f in figures) == pngs and len(pngs) > 6  # every figure, not a fixed six
    assert f"and {len(pngs)} figures" in said[-1]
    assert compare.main([*argv, *TINY]) == 0  # every run reused: no time to extrapolate from, however fast
    again = [line for line in capsys.readouterr().out.splitlines() if re.match(r"run \d+ of \d+ done", line)]
    assert len(again) == 4 and not any("left" in line for line in again)
    assert "reused" not in json.loads((out / "comparison.json").read_text())["rows"][0]
