"""``odeformer-compare``: a user's scheme beside baselines at equal compute, over seeds, in one command."""

from __future__ import annotations

import json
import re
import textwrap

import pytest

from odeformer.app.commands import compare
from odeformer.app.commands.compare import CompareError, budget_steps, parse_scheme, split_words

TINY = ["train=debug", "train.max_steps=8", "model.depth=2"]

MY_SCHEMES = textwrap.dedent(
    """
    import solvers


    class MyHeun(solvers.AbstractStepper):
        order, second_order, symplectic, reversible, evals_per_step = 2, False, False, False, 2

        def step(self, f, t, x, dt, state=None):
            k1 = f(t, x)
            k2 = f(t + dt, x + dt * k1)
            return x + dt / 2 * (k1 + k2), state
    """
)


def test_a_scheme_is_a_name_a_class_or_either_with_options():
    assert parse_scheme("full_wave") == compare.Row("full_wave", ("solver=full_wave",))
    assert parse_scheme("my_schemes.DampedVerlet") == compare.Row(
        "my_schemes.DampedVerlet", ("solver=my_schemes.DampedVerlet",), "my_schemes.DampedVerlet"
    )
    row = parse_scheme("light_wave:theta0=2:model.dt=0.5")
    assert row.label == "light_wave theta0=2 model.dt=0.5"
    assert row.overrides == ("solver=light_wave", "solver.options.theta0=2", "model.dt=0.5")
    own = parse_scheme("my_schemes.Damped:gamma=0.25")
    assert own.overrides == ("solver=my_schemes.Damped", "+solver.options.gamma=0.25")  # new keys to the config
    inline = parse_scheme("tableau:a=[[0,0],[1,0]]:b=[0.5,0.5]")
    assert inline.overrides == ("solver=tableau", "solver.options.a=[[0,0],[1,0]]", "solver.options.b=[0.5,0.5]")


@pytest.mark.parametrize("text", ["", "full wave", "light_wave:theta0", "light_wave:=2", "1abc", "a..b"])
def test_a_malformed_scheme_is_refused_saying_what_is_allowed(text):
    with pytest.raises(CompareError, match="scheme"):
        parse_scheme(text)


def test_words_split_into_schemes_and_overrides():
    schemes, overrides = split_words(["m.C", "light_wave:theta0=2", "train.max_steps=5", "+model.x=1", "rk4"])
    assert schemes == ["m.C", "light_wave:theta0=2", "rk4"]
    assert overrides == ["train.max_steps=5", "+model.x=1"]


def test_each_budget_gives_the_steps_that_make_it_equal():
    rows = ["diffusion", "rk4", "heun"]
    per_token = {"diffusion": 4, "rk4": 16, "heun": 8}
    costs = {"rk4": 3.2, "heun": 1.6}
    assert budget_steps("steps", rows, 100, per_token, costs) == {"diffusion": 100, "rk4": 100, "heun": 100}
    evals = budget_steps("evals", rows, 100, per_token, costs)
    assert evals == {"diffusion": 100, "rk4": 25, "heun": 50}
    assert {row: evals[row] * per_token[row] for row in rows} == {row: 400 for row in rows}  # equal in all
    assert budget_steps("time", rows, 100, per_token, costs) == {"diffusion": 100, "rk4": 31, "heun": 62}
    assert budget_steps("evals", rows, 1, per_token, costs)["rk4"] == 1  # never zero steps


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["rk4", "--out", "X", "--seeds", "0"], "--seeds must be a whole number ≥ 1"),
        (["rk4", "--out", "X", "solver=euler"], "may not choose the solver"),
        (["rk4", "--out", "X", "train.seed=3"], "the seed (--seeds)"),
        (["rk4", "--out", "X", "--against"], "at least two schemes"),
        (["rk4", "--out", "X", "--budget", "flops"], "invalid choice: 'flops'"),
        (["full wave", "--out", "X"], "scheme 'full wave'"),
        (["rk4", "--out", "X", "--experiment", "../x"], "--experiment takes an experiment config's name"),
        (["os.system", "--out", "X"], "scheme os.system names Python's own module os, not a scheme of yours"),
        (["no_such_mod_here.Mine", "--out", "X"], "scheme no_such_mod_here.Mine: there is no module no_such_mod_here"),
    ],
)
def test_usage_errors_are_one_line_before_anything_runs(argv, says, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    try:
        code = compare.main(argv)
    except SystemExit as stopped:  # argparse's own refusals (an unknown choice)
        code = stopped.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert says in err[-1]
    assert not (tmp_path / "X").exists()  # nothing written


def test_an_unknown_solver_is_one_line_with_the_nearest_name(tmp_path, capsys):
    code = compare.main(["ful_wave", "--against", "diffusion", "--out", str(tmp_path / "c"), *TINY])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "ful_wave" in err and "full_wave" in err


def test_a_users_scheme_beside_baselines_at_equal_evaluations(tmp_path, monkeypatch, capsys):
    (tmp_path / "my_schemes.py").write_text(MY_SCHEMES)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "cmp"
    argv = ["my_schemes.MyHeun", "rk4", "--against", "diffusion", "--seeds", "2", "--budget", "evals"]
    code = compare.main([*argv, "--out", str(out), "--workers", "1", "--rounds", "2", *TINY])
    assert code == 0, capsys.readouterr().err
    comparison = json.loads((out / "comparison.json").read_text())
    rows = {row["solver"]: row for row in comparison["rows"]}
    assert list(rows) == ["diffusion", "my_schemes.MyHeun", "rk4"]  # the reference first
    assert comparison["reference"] == "diffusion" and comparison["budget"] == "evals"
    per_step = {name: row["budget"]["evals_per_token_per_step"] for name, row in rows.items()}
    steps = {name: row["budget"]["steps"] for name, row in rows.items()}
    assert per_step["my_schemes.MyHeun"] == 2 * per_step["diffusion"]  # two stages: each field twice a layer
    assert per_step["rk4"] == 4 * per_step["diffusion"]
    assert steps == {"diffusion": 8, "my_schemes.MyHeun": 4, "rk4": 2}
    assert len({row["budget"]["evals_per_token"] for row in rows.values()}) == 1  # equal compute, stated
    for name, row in rows.items():
        assert row["seeds"] == [0, 1] and len(row["tests"]) == 2 and row["failed"] == []
        assert row["mean"] == pytest.approx(sum(row["tests"]) / 2)
        assert row["std"] >= 0 and row["params"] > 0
        assert row["step_cost"] > 0 and (name != "diffusion" or row["step_cost"] == 1.0)
        mine = [json.loads(p.read_text()) for p in (out / "runs").glob(f"{name}__steps=*/summary.json")]
        assert len(mine) == 2 and all(s["steps"] == steps[name] and s["status"] == "completed" for s in mine)
    markdown = (out / "comparison.md").read_text()
    assert "| `my_schemes.MyHeun` |" in markdown and "step cost vs diffusion" in markdown
    for name in ("my_schemes.MyHeun", "rk4"):  # after the table: its difference against the seed spread
        line = re.search(
            rf"^- `{re.escape(name)}` against `diffusion`: [+-]\d.* pooled standard error .*$", markdown, re.M
        )
        assert line and ("within the seed spread (" in line[0] or "exceeds it: " in line[0]), markdown
    cosine = json.loads((out / "figures" / "cosine.json").read_text())
    assert all(label in json.dumps(cosine) for label in ("diffusion", "my_schemes.MyHeun", "rk4"))
    assert str(tmp_path) not in json.dumps(cosine)  # labels are schemes, not run folders
    assert (out / "figures" / "cosine.png").stat().st_size > 0

    # the same command again reuses every finished run
    stamps = {p: p.stat().st_mtime_ns for p in (out / "runs").glob("*/summary.json")}
    assert compare.main([*argv, "--out", str(out), "--workers", "1", "--rounds", "2", *TINY]) == 0
    assert {p: p.stat().st_mtime_ns for p in (out / "runs").glob("*/summary.json")} == stamps
    assert json.loads((out / "comparison.json").read_text())["rows"] == comparison["rows"]


def test_equal_time_gives_each_row_steps_by_its_measured_cost(tmp_path, capsys):
    out = tmp_path / "cmp"
    argv = ["rk4", "--against", "diffusion", "--seeds", "1", "--budget", "time", "--out", str(out)]
    assert compare.main([*argv, "--workers", "1", "--rounds", "2", *TINY]) == 0, capsys.readouterr().err
    comparison = json.loads((out / "comparison.json").read_text())
    rk4 = comparison["rows"][1]
    cost = json.loads((out / "runs" / "costs.json").read_text())["costs"]["rk4"]
    assert rk4["step_cost"] == cost and rk4["budget"]["steps"] == max(1, round(8 / cost))
    assert rk4["std"] is None and "± " not in (out / "comparison.md").read_text().splitlines()[3]  # one seed
