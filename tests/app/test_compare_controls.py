"""``odeformer-compare``'s controls: baselines matched to a scheme's parameter count (counted on models built without
weights), each row at its own best learning rate from a small grid (carried across depth under ``ode`` only), and a
line per row saying whether its difference from the reference exceeds the spread of the seeds."""

from __future__ import annotations

import json
import math
import re
import shlex
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_compare_bounds import _one

from odeformer.app.commands import compare
from odeformer.app.commands.train import compose_config
from odeformer.app.reporting.comparison import seed_spread, spread_line, t_needed
from odeformer.app.run.bounds import MAX_LR_GRID
from odeformer.app.run.builder import build, parameter_count
from odeformer.app.run.controls import best_rate, grid_depth, nearest_width, width_key
from odeformer.app.run.sections import slug

ROOT = Path(__file__).resolve().parents[2]
TINY = ["train=debug", "train.max_steps=2", "model.depth=2", "data=synthetic", "model.dim=16", "model.heads=2"]


# -- the parameter count, without training ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides",
    [
        ["solver=light_wave", *TINY],
        ["solver=full_wave", "model.mlp_hidden=7", *TINY],
        ["solver=rk4", "model.parameterization=ode", "model.knots=1", *TINY],
        ["solver=mix", "model.tie_weights=true", *TINY],
        ["solver=dopri5", *TINY],
        ["model=causal_lm", "data=synthetic", "data.options.task=text", "model.depth=1", "model.dim=16"],
        ["model=node_classifier", "data=synthetic", "data.options.task=graph", "solver=light_wave", "model.dim=8"],
    ],
)
def test_the_parameter_count_is_the_built_models_without_its_weights(overrides):
    config = compose_config(overrides)
    _, model, _ = build(config)
    assert parameter_count(config) == sum(p.numel() for p in model.parameters())
    _, empty, _ = build(config, device="meta")
    assert {p.device.type for p in empty.parameters()} == {"meta"}  # nothing allocated


# -- matching: the width search --------------------------------------------------------------------------------------


@given(
    base=st.integers(0, 10_000),
    slope=st.integers(1, 500),
    curve=st.integers(0, 3),
    step=st.sampled_from([1, 2, 4]),
    start=st.integers(1, 300),
    target=st.integers(0, 200_000),
)
def test_the_nearest_width_is_the_nearest_a_whole_width_reaches(base, slope, curve, step, start, target):
    limit = 400
    asked: list[int] = []

    def count(width: int) -> int:
        asked.append(width)
        return base + slope * width + curve * width * width  # an FFN's count is linear, a dim's quadratic

    width, params = nearest_width(count, target, start, step, limit)
    searched = list(asked)
    widths = range(step, limit + 1, step)
    best = min(abs(count(w) - target) for w in widths)
    assert width % step == 0 and step <= width <= limit and params == count(width)
    assert abs(params - target) == best  # no whole width comes nearer
    first = min(limit // step, max(1, round(start / step)))
    ties = [w // step for w in widths if abs(count(w) - target) == best]
    assert width // step == min(ties, key=lambda u: (abs(u - first), -u))  # of two as near: nearer the start, wider
    assert len(searched) == len(set(searched)) <= 40  # each width asked once, far fewer than all of them


def test_a_linear_count_is_matched_in_a_few_counts():
    asked = []

    def count(width):
        asked.append(width)
        return 1000 + 33 * width

    assert nearest_width(count, 1000 + 33 * 500 + 10, start=64) == (500, 1000 + 33 * 500)
    assert len(asked) <= 5  # the start, its neighbour, the secant's exact guess, its bracket and a flat stretch's check


def test_a_count_the_width_does_not_change_keeps_the_width():
    assert nearest_width(lambda width: 5000, 9000, start=64, limit=1024) == (64, 5000)
    assert nearest_width(lambda width: 5000 + min(width, 100), 9000, start=64, limit=1024) == (100, 5100)


def test_a_model_is_widened_in_its_ffn_else_in_whole_heads():
    vit = compose_config(["solver=diffusion", *TINY])["model"]
    assert width_key(vit) == ("mlp_hidden", 1, 64)  # mlp_ratio 4 x dim 16
    assert width_key({**vit, "mlp_hidden": 20}) == ("mlp_hidden", 1, 20)
    assert width_key({"dim": 64, "heads": 4, "depth": 8}) == ("dim", 4, 64)  # no FFN (node_classifier)


# -- the learning-rate grid: its depth and its choice ----------------------------------------------------------------


def test_the_grid_runs_shallower_only_where_ode_carries_the_rate_over():
    ode = {"depth": 8, "parameterization": "ode", "knots": None}
    assert grid_depth(ode, 2) == (2, "depth 2, carried over to 8 (ode)")
    assert grid_depth(ode, None) == (8, "its own depth")
    assert grid_depth(ode, 16) == (8, "its own depth")  # never deeper than the row
    assert grid_depth({**ode, "knots": 4}, 2) == (4, "depth 4, carried over to 8 (ode)")  # never below its knots
    standard = {"depth": 8, "parameterization": "standard"}
    depth, why = grid_depth(standard, 2)
    assert depth == 8 and "under standard an lr does not carry across depth" in why


def test_the_best_rate_is_the_best_validation_metric_each_way():
    rates = [0.1, 0.2, 0.4]

    def runs(metric, vals, status="completed"):
        return [{"metric": metric, "val": v, "status": status} for v in vals]

    assert best_rate(rates, runs("accuracy", [0.5, 0.9, 0.7])) == 0.2
    assert best_rate(rates, runs("loss", [2.0, 1.5, 1.2])) == 0.4  # a loss: lower is better
    assert best_rate(rates, runs("accuracy", [0.9, 0.9, 0.1])) == 0.1  # a tie: the first
    diverged = runs("loss", [math.nan, 1.5, None])
    assert best_rate(rates, diverged) == 0.2
    assert best_rate(rates, runs("loss", [1.0, 1.0, 1.0], status="failed")) is None


# -- the seed spread -------------------------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:Precision loss:RuntimeWarning")  # scipy's, on seeds that nearly agree
@given(
    a=st.lists(st.integers(0, 1000), min_size=2, max_size=6),
    b=st.lists(st.integers(0, 1000), min_size=2, max_size=6),
)
def test_the_spread_is_welchs_test(a, b):
    from scipy import stats

    a, b = [k / 1000 for k in a], [k / 1000 for k in b]  # accuracies: fractions of a test set
    spread = seed_spread(a, b)
    welch = stats.ttest_ind(b, a, equal_var=False)
    if spread["se"] == 0 or not math.isfinite(welch.statistic):
        return
    assert spread["z"] == pytest.approx(welch.statistic, rel=1e-9, abs=1e-9)
    assert spread["df"] == pytest.approx(welch.df, rel=1e-9)
    assert spread["verdict"] == ("exceeds" if welch.pvalue < 0.05 else "within")


@pytest.mark.parametrize("df", [1, 1.3, 2, 3.9, 10, 30.5, 1e4])
def test_the_threshold_is_students_two_sided_quantile(df):
    from scipy import stats

    assert t_needed(df) == pytest.approx(stats.t.ppf(0.975, df), rel=1e-9)
    assert t_needed(df, level=0.9) == pytest.approx(stats.t.ppf(0.95, df), rel=1e-9)


def test_each_row_says_whether_it_exceeds_the_seed_spread():
    within = seed_spread([0.90, 0.92, 0.94], [0.91, 0.93, 0.95])
    assert within["verdict"] == "within" and within["z"] == pytest.approx(0.01 / math.sqrt(2 * 0.0004 / 3))
    line = spread_line("rk4", "diffusion", "accuracy", within)
    assert line.startswith("`rk4` against `diffusion`: +1.00 points") and "within the seed spread (+0.6 SE" in line
    beyond = seed_spread([0.90, 0.91, 0.92], [0.80, 0.81, 0.82])
    assert "exceeds it: -12.2 SE (worse;" in spread_line("rk4", "diffusion", "accuracy", beyond)
    better = seed_spread([2.0, 2.1, 2.2], [1.0, 1.1, 1.2])  # a loss falls: better
    assert "exceeds it: -12.2 SE (better;" in spread_line("rk4", "diffusion", "loss", better)
    one = seed_spread([0.9], [0.8])
    assert one["verdict"] == "no spread"
    assert "-10.00 points; one seed: no spread can be read" in spread_line("rk4", "diffusion", "accuracy", one)
    assert seed_spread([0.5, 0.5], [0.5, 0.5])["verdict"] == "within"
    assert seed_spread([0.5, 0.5], [0.6, 0.6])["verdict"] == "exceeds"
    assert "no finished run" in spread_line("rk4", "diffusion", "accuracy", seed_spread([], [0.5]))


# -- the command: refusals -------------------------------------------------------------------------------------------


BASELINE = ["rk4", "--against", "diffusion"]


@pytest.mark.parametrize(
    "argv, words",
    [
        ([*BASELINE, "--match", "flops"], "invalid choice: 'flops' (choose from 'params')"),
        (["--against", "diffusion", "rk4", "--match", "params"], "--match params widens the baselines"),
        (["rk4", "light_wave", "--against", "rk4", "--match", "params"], "one baseline that is not it"),
        (["rk4", "light_wave", "--against", "--match", "params"], "at least one baseline that is not it"),
        ([*BASELINE, "--lr-grid"], "--lr-grid takes 1 to 8 distinct positive factors of train.lr"),
        ([*BASELINE, "--lr-grid", "0", "1"], "factors of train.lr from 1e-06 to 1e+06 (e.g. 0.5 1 2); got 0."),
        ([*BASELINE, "--lr-grid", "-1"], "got -1."),
        ([*BASELINE, "--lr-grid", "nan"], "got nan."),
        ([*BASELINE, "--lr-grid", "1", "x2"], "'x2' is not a number."),
        ([*BASELINE, "--lr-grid", "1", "1.0"], "1.0 is given twice."),
        ([*BASELINE, "--lr-grid", *map(str, range(1, MAX_LR_GRID + 2))], "got 9 (each costs every row a run)."),
        ([*BASELINE, "--lr-grid", "1", "2", "--lr-depth", "0"], "--lr-depth must be a whole number ≥ 1"),
        ([*BASELINE, "--lr-depth", "2"], "--lr-depth sets the depth the learning-rate grid runs at; give the grid"),
        ([*BASELINE, "--lr-grid", "1e-6", "train.lr=1e-33"], "train.lr=1e-39 is 0 in float32"),
    ],
)
def test_the_controls_refuse_bad_input_in_one_line_before_any_run(tmp_path, argv, words, capsys, monkeypatch):
    from odeformer.app.run import sweep

    built = []
    monkeypatch.setattr(sweep.Sweep, "evaluations", lambda *a, **k: built.append(a) or {})
    monkeypatch.setattr(sweep.Sweep, "match_parameters", lambda *a, **k: built.append(a) or {})
    out = tmp_path / "cmp"
    try:
        code = compare.main([*argv, *TINY, "--out", str(out)])
    except SystemExit as stopped:
        code = stopped.code
    assert code == 2
    assert words in _one(capsys)
    assert built == [] and not list(out.glob("runs/*"))


def test_a_baseline_may_not_set_the_width_the_match_sets(tmp_path, capsys):
    argv = ["rk4", "--against", "diffusion:model.mlp_hidden=8", "--match", "params", "--out", str(tmp_path / "c")]
    assert compare.main([*argv, *TINY]) == 2
    assert "--match params sets model.mlp_hidden of every baseline" in _one(capsys)


# -- the command: the controls at work -------------------------------------------------------------------------------


@pytest.fixture
def no_figures(monkeypatch):
    """The per-layer figures are the comparison's own tests' (tests/app/test_compare.py); these runs skip them."""
    monkeypatch.setattr(compare, "_figures", lambda *args: [])


def test_match_params_widens_each_baseline_to_the_schemes_count(tmp_path, capsys, no_figures):
    out = tmp_path / "cmp"
    scheme = "light_wave:model.mlp_ratio=8"  # a scheme with twice the FFN: the baseline must widen to match it
    argv = [scheme, "--against", "diffusion", "--match", "params", "--seeds", "1", "--budget", "steps"]
    assert compare.main([*argv, "--out", str(out), "--workers", "1", "--rounds", "1", *TINY]) == 0, capsys.readouterr()
    comparison = json.loads((out / "comparison.json").read_text())
    rows = {row["solver"]: row for row in comparison["rows"]}
    target = rows["light_wave model.mlp_ratio=8"]["params"]
    assert comparison["match"] == {"kind": "params", "scheme": "light_wave model.mlp_ratio=8", "target": target}
    matched = rows["diffusion"]["match"]
    assert matched["key"] == "mlp_hidden" and matched["from"] == 64 and matched["width"] > 120  # widened
    assert rows["diffusion"]["params"] == matched["params"]  # the trained model has the count it was matched at

    def count(width):
        widened = ["experiment=digits_vit", "solver=diffusion", *TINY, f"model.mlp_hidden={width}"]
        return parameter_count(compose_config(widened))

    near = abs(matched["params"] - target)
    assert near <= abs(count(matched["width"] - 1) - target) and near <= abs(count(matched["width"] + 1) - target)
    assert "model.mlp_hidden=" + str(matched["width"]) in rows["diffusion"]["overrides"]
    markdown = (out / "comparison.md").read_text()
    assert f"| {matched['params']} (model.mlp_hidden 64 → {matched['width']}) |" in markdown
    assert f"| {target} |" in markdown and "Parameters matched (`--match params`)" in markdown
    assert re.search(r"^- `light_wave model.mlp_ratio=8` against `diffusion`: .*no spread can be read", markdown, re.M)


def test_each_row_trains_its_seeds_at_its_best_rate_carried_over_only_under_ode(tmp_path, capsys, no_figures):
    out = tmp_path / "cmp"
    ode = "rk4:model.parameterization=ode"
    argv = [ode, "--against", "diffusion", "--lr-grid", "0.5", "4", "--lr-depth", "1", "--seeds", "1"]
    code = compare.main([*argv, "--budget", "steps", "--out", str(out), "--workers", "1", "--rounds", "1", *TINY])
    assert code == 0, capsys.readouterr().err
    said = capsys.readouterr().out.splitlines()
    progress = [line.split(" done")[0] for line in said if re.match(r"run \d+ of \d+ done", line)]
    assert progress == [f"run {i} of 6" for i in range(1, 7)]  # 2 rows x 2 rates, then 2 rows x 1 seed
    comparison = json.loads((out / "comparison.json").read_text())
    assert comparison["lr_grid"] == {"factors": [0.5, 4.0]}
    rows = {row["solver"]: row for row in comparison["rows"]}
    for label, depth in ((ode.replace(":", " "), 1), ("diffusion", 2)):  # standard: the grid at the row's own depth
        row = rows[label]
        grid = sorted((out / "lr_grid").glob(f"{slug(label)}__*"))
        summaries = [json.loads((run / "summary.json").read_text()) for run in grid]
        assert len(summaries) == 2 and {s["depth"] for s in summaries} == {depth}
        assert row["lr_grid"]["rates"] == [0.0015, 0.012] and row["lr_grid"]["depth"] == depth
        vals = row["lr_grid"]["val"]
        best = row["lr_grid"]["rates"][max(range(2), key=lambda i: (vals[i], -i))]
        assert row["lr"] == best and f"train.lr={best!r}" in row["overrides"]
        seeds = list((out / "runs").glob(f"{slug(label)}__*"))
        assert len(seeds) == 1
        for run in seeds:  # its seeds, at its own depth, at that rate
            summary = json.loads((run / "summary.json").read_text())
            assert summary["depth"] == 2 and f"train.lr={best!r}" in json.loads((run / "overrides.json").read_text())
    assert rows[ode.replace(":", " ")]["lr_grid"]["where"] == "depth 1, carried over to 2 (ode)"
    assert (out / "runs" / f"diffusion__lr={rows['diffusion']['lr']!r}__steps=2__seed=0").is_symlink()  # the grid's
    markdown = (out / "comparison.md").read_text()
    carried, own = rows[ode.replace(":", " ")], rows["diffusion"]
    assert f"| {carried['lr']:g} (×{carried['lr_grid']['factor']:g} at depth 1, carried over to 2 (ode)) |" in markdown
    why = "at its own depth (under standard an lr does not carry across depth)"
    assert f"| {own['lr']:g} (×{own['lr_grid']['factor']:g} {why}) |" in markdown
    assert re.search(r"^- `rk4 model.parameterization=ode` against `diffusion`: [+-]\d", markdown, re.M)


# -- the documentation -----------------------------------------------------------------------------------------------


def test_the_help_names_the_controls(capsys):
    with pytest.raises(SystemExit) as stopped:
        compare.main(["--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert stopped.value.code == 0
    assert "--match {params}" in said and "--lr-grid [F ...]" in said and "--lr-depth D" in said
    assert f"at most {MAX_LR_GRID}" in said and "docs/comparing_schemes.md" in said


def test_every_compare_command_on_the_comparing_page_passes_the_commands_checks():
    text = (ROOT / "docs" / "comparing_schemes.md").read_text()
    lines = re.findall(r"^odeformer-compare .*$", text, re.M)
    assert len(lines) >= 2 and any("--match params" in line for line in lines)
    assert any("--lr-grid" in line for line in lines)
    for line in lines:
        rest, overrides = compare._without_overrides(shlex.split(line)[1:])
        args = compare._parser().parse_intermixed_args(rest)
        args.words = [*args.words, *overrides]
        compare._check(args)  # every usage check the command makes before it composes a config
    assert "docs/comparing_schemes.md" in (ROOT / "README.md").read_text()
