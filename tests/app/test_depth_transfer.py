"""A learning-rate grid at several depths (a section's ``depths`` and ``lr_grid``): how it expands into runs, the
best grid point per depth, the coordinate check's measurements, a diverged run kept as a result, and the block
``odeformer-reproduce`` writes for it."""

import json

import pytest
import torch

import odeformer
from odeformer.app.commands import reproduce
from odeformer.app.commands.train import compose_config
from odeformer.app.reporting import transfer
from odeformer.app.reporting.transfer import (
    best_learning_rates,
    initial_model,
    run_coordinates,
    state_sizes,
    transfer_markdown,
)
from odeformer.app.run import launch, trainer
from odeformer.app.run.sections import Section, SectionError, load_sections
from odeformer.app.run.sweep import Job, Sweep
from solvers import PhaseState

GRID = (
    "s:\n  title: t\n  fixed: [experiment=digits_vit]\n  rows:\n    a, standard: [solver=diffusion]\n"
    "    a, ode: [solver=diffusion, model.parameterization=ode]\n  seeds: [0]\n"
)
TINY = ["data=synthetic", "data.options.task=image", "data.options.n=64", "model.dim=8", "model.heads=2"]
TINY += ["train.max_steps=2", "train.eval_every=2", "train.progress=false"]


def _load(tmp_path, text):
    path = tmp_path / "mine.yaml"
    path.write_text(text)
    (section,) = load_sections(path).values()
    return section


# -- the section: settings and expansion ----------------------------------------------------------------------------


def test_a_grid_expands_each_row_into_every_depth_and_factor_on_its_own_learning_rate(tmp_path):
    section = _load(tmp_path, GRID + "  depths: [4, 32]\n  lr_grid: [4, 0.25, 1]\n")
    assert section.depths == (4, 32) and section.lr_grid == (0.25, 1.0, 4.0) and not section.matched
    bases = {"a, standard": 2e-3, "a, ode": 1e-2}  # as if the rows composed to different learning rates
    jobs = section.runs(
        lambda overrides: bases["a, ode" if "model.parameterization=ode" in overrides else "a, standard"]
    )
    assert len(jobs) == 2 * 2 * 3
    assert [job.name for job in jobs[:3]] == [f"a_standard__depth_4_lr_{f}__seed=0" for f in ("0.25", "1", "4")]
    assert jobs[3].column == "depth 32, lr ×0.25" and jobs[3].overrides == [
        "experiment=digits_vit",
        "solver=diffusion",
        "model.depth=32",
        "train.lr=0.0005",
        "train.seed=0",
    ]
    assert jobs[-1].row == "a, ode" and jobs[-1].overrides[-3:] == ["model.depth=32", "train.lr=0.04", "train.seed=0"]
    assert section.grid(1.0)["depth 32, lr ×4"][:2] == (32, 4.0)
    with pytest.raises(ValueError, match="needs each row's base learning rate"):
        section.runs()


def test_a_grid_row_trains_at_the_learning_rate_its_overrides_compose_to_times_the_factor():
    """The base is what ``odeformer-train`` would run the row with (the experiment's, or a row's own ``train.lr``),
    and the grid's ``train.lr`` is the one the run composes to."""
    section = Section(
        "t",
        ["experiment=digits_vit"],
        {"own": ["train.lr=1e-3"], "experiment's": []},
        seeds=[0],
        depths=(2, 3),
        lr_grid=(0.5, 1.0),
    )
    jobs = section.runs(lambda overrides: compose_config(overrides)["train"]["lr"])
    found = {(job.row, job.column): compose_config(job.overrides)["train"] for job in jobs}
    assert found["own", "depth 2, lr ×0.5"]["lr"] == pytest.approx(5e-4)
    assert found["experiment's", "depth 3, lr ×1"]["lr"] == pytest.approx(3e-3)  # digits_vit's 3e-3


@pytest.mark.parametrize(
    "extra, where",
    [
        ("  depths: [4, 32]\n", "s.depths: a learning-rate grid needs both depths and lr_grid; lr_grid is missing"),
        ("  lr_grid: [0.5, 1]\n", "s.lr_grid: a learning-rate grid needs both depths and lr_grid; depths is missing"),
        ("  depths: [4]\n  lr_grid: [0.5, 1]\n", "s.depths: must be a list of at least two depths"),
        ("  depths: [4, 0]\n  lr_grid: [0.5, 1]\n", "s.depths: must be a list of at least two depths"),
        ("  depths: [4, 4]\n  lr_grid: [0.5, 1]\n", "s.depths: must be distinct"),
        ("  depths: [4, 8]\n  lr_grid: [0, 1]\n", "s.lr_grid: must be a list of at least two factors"),
        ("  depths: [4, 8]\n  lr_grid: [.inf, 1]\n", "s.lr_grid: must be a list of at least two factors"),
        ("  depths: [4, 8]\n  lr_grid: [0.5, 2]\n", "s.lr_grid: must be distinct factors including 1"),
        ("  depths: [4, 8]\n  lr_grid: [1, 1.0]\n", "s.lr_grid: must be distinct factors including 1"),
        ("  depths: [4, 8]\n  lr_grid: [1, 2]\n  columns:\n    x: [model.dim=8]\n", "s.columns: a learning-rate"),
        ("  depths: [4, 8]\n  lr_grid: [1, 2]\n  refine: [2]\n", "s.refine: a learning-rate grid's columns"),
        ("  depths: [4, 8]\n  lr_grid: [1, 2]\n  matched: true\n", "s.matched: a learning-rate grid's columns"),
    ],
)
def test_a_bad_grid_setting_is_one_line_naming_it(tmp_path, extra, where):
    with pytest.raises(SectionError) as info:
        _load(tmp_path, GRID + extra)
    message = str(info.value)
    assert where in message and "\n" not in message, message


def test_a_grid_refuses_a_depth_set_elsewhere(tmp_path):
    text = GRID.replace("[solver=diffusion]\n", "[solver=diffusion, model.depth=6]\n", 1)
    with pytest.raises(SectionError, match=r"s.rows.a, standard: 'model.depth=6': the grid sets model.depth"):
        _load(tmp_path, text + "  depths: [4, 8]\n  lr_grid: [1, 2]\n")


def test_the_published_grid_is_a_grid_over_schemes_under_both_parameterisations():
    section = reproduce.results_sections()["depth_transfer"]
    assert len(section.depths) >= 2 and 1.0 in section.lr_grid and len(section.lr_grid) >= 3
    pairs = {}
    for overrides in section.rows.values():
        solver = next(o for o in overrides if o.startswith("solver="))
        pairs.setdefault(solver, set()).add("model.parameterization=ode" in overrides)
    assert len(pairs) >= 2 and all(kinds == {False, True} for kinds in pairs.values())
    assert "experiment=digits_vit" in section.fixed


# -- the best learning rate at each depth ---------------------------------------------------------------------------


def _fake(section, vals, metric="accuracy"):
    """Results of a grid with the validation metric ``vals[(row, depth, factor)]`` (None: diverged)."""
    out = []
    grid = section.grid(1.0)
    for job in section.runs(lambda overrides: 1e-3):
        depth, factor, _ = grid[job.column]
        val = vals[job.row, depth, factor]
        summary = (
            {"status": "diverged", "val": None, "test": None}
            if val is None
            else {"status": "completed", "metric": metric, "val": val, "test": val - 0.01}
        )
        out.append((*job, summary))
    return out


def test_the_best_learning_rate_is_the_best_validation_point_at_each_depth():
    section = Section("t", [], {"a": [], "b": []}, seeds=[0], depths=(4, 32), lr_grid=(0.5, 1.0, 2.0))
    vals = {
        ("a", 4, 0.5): 0.80, ("a", 4, 1.0): 0.90, ("a", 4, 2.0): 0.85,
        ("a", 32, 0.5): 0.70, ("a", 32, 1.0): 0.95, ("a", 32, 2.0): None,  # diverged: the worst there is
        ("b", 4, 0.5): 0.60, ("b", 4, 1.0): 0.70, ("b", 4, 2.0): 0.90,
        ("b", 32, 0.5): 0.91, ("b", 32, 1.0): 0.50, ("b", 32, 2.0): 0.91,  # a tie
    }  # fmt: skip
    found = best_learning_rates(_fake(section, vals), section.grid(1.0))
    a, b = found["rows"]["a"], found["rows"]["b"]
    assert found["metric"] == "accuracy" and found["higher_is_better"]
    assert a["depths"][4]["best"] == [1.0] and a["depths"][32]["best"] == [1.0] and a["same"]
    assert a["depths"][32]["val"] == 0.95 and a["depths"][32]["lr"] == [1e-3]
    assert a["depths"][32]["grid"][2.0] == {"lr": 2e-3, "val": None, "test": None, "seeds": 1}
    assert b["depths"][4]["best"] == [2.0] and b["depths"][32]["best"] == [0.5, 2.0] and b["same"]  # shares ×2
    vals["b", 32, 2.0] = 0.90
    found = best_learning_rates(_fake(section, vals), section.grid(1.0))
    assert found["rows"]["b"]["depths"][32]["best"] == [0.5] and not found["rows"]["b"]["same"]
    markdown = transfer_markdown(found, section.depths, section.lr_grid)
    assert (
        "| run | best lr at depth 4 | best lr at depth 32 | validation accuracy at the best lr, depth 4 |" in markdown
    )
    assert "| a | 0.001 (×1) | 0.001 (×1) | 0.900 | 0.950 | yes |" in markdown
    assert "| b | 0.002 (×2) | 0.0005 (×0.5) | 0.900 | 0.910 | no |" in markdown
    assert "| a | 0.800 | 0.900 | 0.850 | 0.700 | 0.950 | diverged |" in markdown  # every grid point


def test_a_loss_is_best_where_it_is_lowest_and_seeds_are_averaged():
    section = Section("t", [], {"a": []}, seeds=[0, 1], depths=(2, 3), lr_grid=(1.0, 2.0))
    vals = {("a", 2, 1.0): 1.5, ("a", 2, 2.0): 1.2, ("a", 3, 1.0): 1.1, ("a", 3, 2.0): 1.3}
    results = _fake(section, vals, metric="loss")
    results[-1][5]["val"] = 0.9  # seed 1 at depth 3, ×2: the mean over seeds is 1.1, tied with ×1
    found = best_learning_rates(results, section.grid(1.0))
    assert not found["higher_is_better"]
    assert found["rows"]["a"]["depths"][2]["best"] == [2.0] and found["rows"]["a"]["depths"][3]["best"] == [1.0, 2.0]
    assert found["rows"]["a"]["same"] and "(tied)" in transfer_markdown(found, (2, 3), (1.0, 2.0))
    with pytest.raises(ValueError, match="no objective measures 'perplexity'"):
        transfer.higher_is_better("perplexity")


# -- the coordinate check -------------------------------------------------------------------------------------------


class _Recorded(torch.nn.Module):
    """A model whose trajectory is given."""

    def __init__(self, states):
        super().__init__()
        self.states = states

    def trajectory(self, *inputs):
        return self.states


def test_state_sizes_are_the_states_and_steps_root_mean_squares_of_the_position():
    x0 = torch.ones(2, 3, 4)
    x1 = x0.clone()
    x1[0] = 3.0  # half the entries move by 2
    velocity = torch.full_like(x0, 100.0)  # a second-order layer's velocity is not the state measured
    sizes = state_sizes(_Recorded([x0, PhaseState(x1, velocity), PhaseState(-x1, velocity)]), ())
    assert sizes["rms"] == pytest.approx([1.0, 5**0.5, 5**0.5])
    assert sizes["update"] == pytest.approx([2**0.5, 2 * 5**0.5])


def test_under_ode_the_state_keeps_its_size_across_depth_and_its_steps_shrink_as_one_over_depth():
    """What the coordinate check reads, measured on models built here (float64, 4 knots, so that the weights are
    one function of depth-time at every depth): under ``ode`` the last state's size stays within 20 % from depth 4
    to 32 and the steps shrink as ``T / L``; under ``standard`` the last state grows with depth."""
    images = torch.randn(8, 1, 8, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    found = {}
    for parameterization in ("standard", "ode"):
        for depth in (4, 32):
            torch.manual_seed(0)
            model = odeformer.ViT(
                depth=depth,
                dim=16,
                heads=2,
                solver="diffusion",
                knots=4,
                dropout=0.0,
                parameterization=parameterization,
            ).double()
            found[parameterization, depth] = state_sizes(model, (images,))
    ode4, ode32 = found["ode", 4], found["ode", 32]
    assert len(ode32["rms"]) == 33 and len(ode32["update"]) == 32
    assert abs(ode32["rms"][-1] / ode4["rms"][-1] - 1) < 0.2
    assert 4 < max(ode4["update"]) / max(ode32["update"]) < 16  # the step is T / L: 8 times smaller
    assert found["standard", 32]["rms"][-1] > 2 * found["standard", 4]["rms"][-1]


def test_a_runs_coordinates_start_from_the_weights_its_training_started_from(tmp_path):
    """``initial_model`` rebuilds the model a run began with: a run at learning rate 1e-30 ends with those weights, so
    training moved no state; a run at a learning rate moves them, and its trained sizes are its best weights'."""
    still, moved = tmp_path / "still", tmp_path / "moved"
    for out, lr in ((still, 1e-30), (moved, 3e-2)):  # 1e-30: below every weight's rounding
        config = compose_config([*TINY, "model.depth=2", "solver=diffusion", "train.seed=5", f"train.lr={lr}"])
        assert launch.train(config, out, choose_threads=False)["status"] == "completed"
    start, end = initial_model(still), torch.load(still / "best.pt", weights_only=True)["model"]
    # equal but for the 1e-31 steps of the parameters that start at 0 (another seed differs by O(0.1))
    assert all(torch.allclose(value, end[key], rtol=0, atol=1e-25) for key, value in start.state_dict().items())
    found = run_coordinates(still, size=4)
    assert max(found["change"]) < 1e-20 and found["init"]["rms"] == pytest.approx(found["trained"]["rms"], rel=1e-12)
    assert found["items"] == 4
    assert found["parameterization"] == "standard" and len(found["init"]["update"]) == 2
    moved_found = run_coordinates(moved, size=4)
    assert all(value > 0 for value in moved_found["change"][1:]) and moved_found["init"] == found["init"]


# -- the sweep keeps a diverged run as a result ---------------------------------------------------------------------


def test_a_grid_run_that_diverges_is_a_result_reused_on_a_rerun_and_an_error_elsewhere(tmp_path, monkeypatch):
    calls = []

    def diverge(config, out_dir, **kwargs):
        calls.append(out_dir)
        raise trainer.TrainingDiverged("loss is nan at step 3: the dynamics diverged; start again with less")

    monkeypatch.setattr(launch, "train", diverge)
    job = Job("hot", "a", "depth 2, lr ×4", 0, [*TINY, "model.depth=2", "train.lr=1.0", "train.seed=0"])
    (result,) = Sweep(compose_config, 1).run([job], tmp_path / "grid", keep_diverged=True)
    assert result.summary["status"] == "diverged" and result.summary["what"] == "loss is nan at step 3"
    saved = json.loads((tmp_path / "grid" / "hot" / "summary.json").read_text())
    assert saved["status"] == "diverged" and saved["config"]["train"]["lr"] == 1.0
    assert Sweep(compose_config, 1).run([job], tmp_path / "grid", keep_diverged=True)[0].summary == saved
    assert len(calls) == 1  # the rerun reused it
    changed = Job("hot", "a", "depth 2, lr ×4", 0, [*TINY, "model.depth=2", "train.lr=2.0", "train.seed=0"])
    with pytest.raises(ValueError, match=r"train.lr: 1.0 → 2.0"):
        Sweep(compose_config, 1).run([changed], tmp_path / "grid", keep_diverged=True)
    with pytest.raises(trainer.TrainingDiverged):
        Sweep(compose_config, 1).run([job._replace(name="other")], tmp_path / "grid")


# -- the command ----------------------------------------------------------------------------------------------------


def test_reproduce_writes_the_grids_tables_and_its_coordinate_check(tmp_path, monkeypatch):
    section = Section(
        "transfer: tiny",
        TINY,
        {
            "diffusion, standard": ["solver=diffusion"],
            "diffusion, ode": ["solver=diffusion", "model.parameterization=ode"],
        },
        seeds=[0],
        note="a note",
        depths=(1, 2),
        lr_grid=(1.0, 4.0),
        matched=False,
    )
    monkeypatch.setattr(reproduce, "results_sections", lambda: {"depth_transfer": section})
    out = tmp_path / "docs"
    argv = ["--sections", "depth_transfer", "--out", str(out), "--runs", str(tmp_path / "runs"), "--workers", "1"]
    assert reproduce.main(argv) == 0
    text = (out / "RESULTS.md").read_text()
    assert "### transfer: tiny" in text and "| run | best lr at depth 1 | best lr at depth 2 |" in text
    assert "| diffusion, standard | " in text and "a note" in text and "8 runs (0 diverged), " in text
    assert "![depth_transfer coordinate check, diffusion](results/depth_transfer_diffusion/coordinates.png)" in text
    figure = out / "results" / "depth_transfer_diffusion"
    numbers = json.loads((figure / "coordinates.json").read_text())
    assert set(numbers["runs"]) == {"standard", "ode"} and set(numbers["runs"]["ode"]) == {"1", "2"}
    assert len(numbers["runs"]["ode"]["2"]["trained"]["rms"]) == 3 and (figure / "coordinates.png").stat().st_size
    assert len(list((tmp_path / "runs" / "depth_transfer").glob("*/summary.json"))) == 8


def test_the_one_table_of_which_way_a_metric_is_better_is_the_objectives():
    """The torch-free table the comparison, its controls and the transfer grid read agrees with every objective's own
    ``higher_is_better`` (what the trainer keeps its best checkpoint by), metric for metric."""
    from odeformer.app.reporting.comparison import HIGHER_IS_BETTER
    from odeformer.app.run.objectives import Objective

    found, todo = {}, [Objective]
    while todo:
        kind = todo.pop()
        if "metric" in vars(kind):
            assert found.setdefault(kind.metric, kind.higher_is_better) == kind.higher_is_better, kind
        todo.extend(kind.__subclasses__())
    assert found == HIGHER_IS_BETTER
