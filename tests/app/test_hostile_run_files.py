"""Hostile files beside a finished run, read by the commands that reuse or rebuild it (``odeformer-compare``,
``odeformer-reproduce``, ``odeformer-sample``, ``odeformer-diagnose``, ``odeformer-analyze``): each is one line
naming the file and what is allowed, before anything is built, allocated or trained."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

import odeformer
from odeformer.app.commands import sample
from odeformer.app.run.checkpoints import FORMAT, save_checkpoint
from odeformer.app.run.config import DataConfig, SolverConfig, model_config, stepper_options
from odeformer.app.run.identity import RUN_RECORD
from odeformer.app.run.sweep import Job, Sweep


def _one(capsys) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


def _never_composed(overrides):
    raise AssertionError(f"a refused run was composed: {overrides}")


COMPLETED = {"metric": "accuracy", "val": 0.5, "test": 0.5, "steps": 3, "wall_s": 1.0, "status": "completed"}


@pytest.mark.parametrize(
    "change, words",
    [
        ({"test": "abc"}, "its test is abc"),
        ({"test": [1, 2]}, "its test is [1, 2]"),
        ({"test": float("nan")}, "its test is nan"),
        ({"val": float("inf")}, "its val is inf"),
        ({"test": True}, "its test is True"),
        ({"wall_s": -1}, "its wall_s is -1"),
        ({"wall_s": "x"}, "its wall_s is x"),
        ({"test": ...}, "its test is missing"),
        ({"metric": ...}, "its metric is 'None', not a metric's name"),
        ({"metric": {"a": 1}}, "not a metric's name"),
        ({"steps": ...}, "its steps is missing"),  # a compute-matched row multiplied it: a KeyError
        ({"steps": "3"}, "its steps is 3, not a whole number of steps"),
        ({"steps": 2.5}, "its steps is 2.5"),
    ],
)
def test_a_reused_summary_the_tables_cannot_read_is_one_line_naming_it(tmp_path, change, words):
    run = tmp_path / "runs" / "job"
    run.mkdir(parents=True)
    summary = {k: v for k, v in {**COMPLETED, **change}.items() if v is not ...}
    (run / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(ValueError, match="finite numbers") as refused:
        Sweep(_never_composed, 1).run([Job("job", "row", "", 0, ["solver=diffusion"])], tmp_path / "runs")
    message = str(refused.value)
    assert str(run / "summary.json") in message and words in message and "\n" not in message


def test_a_diverged_runs_summary_without_numbers_is_still_read(tmp_path):
    from odeformer.app.run.sweep import checked_summary

    diverged = {"status": "diverged", "what": "step 3", "val": None, "test": None, "config": {}}
    assert checked_summary(tmp_path / "summary.json", diverged) is diverged
    assert checked_summary(tmp_path / "summary.json", COMPLETED) is COMPLETED


@pytest.mark.parametrize("name", ["summary.json", "costs.json"])
def test_json_nested_too_deeply_is_one_line_naming_the_file(tmp_path, name):
    from odeformer.app.run.sweep import read_json

    (tmp_path / name).write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="nests its JSON too deeply") as refused:
        read_json(tmp_path / name)
    assert str(tmp_path / name) in str(refused.value)


def test_a_reused_summary_nested_too_deeply_stops_the_sweep_in_one_line(tmp_path):
    run = tmp_path / "runs" / "job"
    run.mkdir(parents=True)
    (run / "summary.json").write_text('{"a":' * 50_000 + "1" + "}" * 50_000)
    with pytest.raises(ValueError, match="nests its JSON too deeply"):
        Sweep(_never_composed, 1).run([Job("job", "row", "", 0, ["solver=diffusion"])], tmp_path / "runs")


def _text_checkpoint(path, model=None, record=None):
    config = {
        "solver": asdict(SolverConfig(name="diffusion", options=stepper_options("diffusion"))),
        "model": asdict(model_config("causal_lm")(depth=1, dim=16, heads=2, max_len=16)) | (model or {}),
        "data": asdict(DataConfig("shakespeare", batch_size=4)),
    }
    save_checkpoint(path / "best.pt", {"format": FORMAT, "model": {}, RUN_RECORD: {"config": config, "vocabulary": "ab"}
                                       | (record or {})})  # fmt: skip


@pytest.mark.parametrize(
    "model, record, words",
    [
        ({"dim": 10**9}, None, "this run needs about"),
        ({"mlp_hidden": 10**9}, None, "this run needs about"),
        (None, {"vocabulary": "a" * 1000}, "a vocabulary of 1000 characters of which only 1 differ"),
        (None, {"config": [1]}, "stores no run config"),
        (None, {"config": {"solver": {}, "model": {}, "data": [1]}}, "stores no run config"),
    ],
)
def test_sample_refuses_sizes_and_shapes_a_checkpoint_sets_before_building(tmp_path, model, record, words, capsys,
                                                                           monkeypatch):  # fmt: skip
    _text_checkpoint(tmp_path, model, record)
    built = []
    monkeypatch.setattr(odeformer.CausalLM, "__init__", lambda *a, **k: built.append(a))
    assert sample.main([str(tmp_path)]) == 2
    line = _one(capsys)
    assert words in line and built == []
    assert "best.pt" in line


def _continuous_checkpoint(run, **solver):
    run.mkdir(parents=True, exist_ok=True)
    config = {
        "solver": {"_target_": "odeformer.continuous.continuous", "name": "rk4_grid", "method": "rk4", **solver},
        "model": {"_target_": "odeformer.ViT", "depth": 1, "dim": 8, "heads": 2, "patch_size": 2},
        "data": {"name": "synthetic", "root": None, "batch_size": 4, "options": {"task": "image", "n": 32}},
    }
    save_checkpoint(run / "best.pt", {"format": FORMAT, "step": 1, "model": {}, RUN_RECORD: {"config": config}})


@pytest.mark.parametrize(
    "solver, words",
    [
        ({"steps": 10**9}, "solver.steps=1000000000: a continuous solver's steps is a whole number from 1 to 100000"),
        ({"max_steps": 10**12}, "solver.max_steps=1000000000000: a continuous solver's max_steps is a whole number"),
        ({"steps": "8"}, "solver.steps='8': a continuous solver's steps is a whole number"),
        ({"steps": True}, "solver.steps=True"),
    ],
)
def test_a_continuous_solvers_steps_a_checkpoint_sets_are_bounded_before_building(tmp_path, solver, words, capsys):
    from odeformer.app.commands import analyze, diagnose

    _continuous_checkpoint(tmp_path / "run", **solver)
    for main in (diagnose.main, analyze.main):  # a forward of 10^9 steps never ends
        assert main([str(tmp_path / "run"), "--batch", "2", "--out", str(tmp_path / "out")]) == 2
        line = _one(capsys)
        assert str(tmp_path / "run" / "best.pt") in line and words in line
    assert not (tmp_path / "out").exists()


def test_a_continuous_solvers_steps_on_the_command_line_are_bounded_too(tmp_path):
    from odeformer.app.commands.train import compose_config
    from odeformer.app.run.bounds import check_config
    from odeformer.app.run.config import UsageError

    config = compose_config(["experiment=digits_vit", "solver=rk4_grid", "solver.steps=1000000000"])
    with pytest.raises(UsageError, match="a continuous solver's steps is a whole number from 1 to 100000"):
        check_config(config)
    check_config(compose_config(["experiment=digits_vit", "solver=rk4_grid", "solver.steps=100000"]))


def test_a_text_evaluation_of_more_windows_than_positions_allocates_one_per_position():
    import torch

    from odeformer.app.run.objectives import make_objective
    from odeformer.data import load

    data = load("synthetic", task="text", n=20, length=16, vocab_size=5)
    torch.manual_seed(0)
    model = odeformer.CausalLM(vocab_size=5, solver=odeformer.solver("diffusion"), depth=1, dim=8, heads=2, max_len=4)
    objective = make_objective(data, model.eval(), 4, 0, torch.device("cpu"))
    positions = len(objective.splits["val"][0]) - objective.context - 1
    every = objective.evaluate(model, "val", -(-positions // 4))  # batches enough for every position
    assert objective.evaluate(model, "val", 10**15) == every  # once asked 4·10^15 windows of memory at once


@pytest.mark.parametrize("value", [-5, "x", 2.5, True])
def test_analyze_refuses_a_stored_eval_batches_that_is_no_count_before_evaluating(tmp_path, value, capsys):
    import torch

    from odeformer.app.commands import analyze
    from odeformer.app.run.builder import build

    config = {
        "solver": {"_target_": "odeformer.solver", "name": "diffusion"},
        "model": {"_target_": "odeformer.CausalLM", "depth": 1, "dim": 8, "heads": 2, "max_len": 4},
        "data": {"name": "synthetic", "root": None, "batch_size": 4, "options": {"task": "text", "n": 20}},
    }
    torch.manual_seed(0)
    _, model, _ = build(config)
    config["train"] = {"eval_batches": value}
    (tmp_path / "run").mkdir()
    payload = {"format": FORMAT, "step": 1, "model": model.state_dict(), RUN_RECORD: {"config": config}}
    save_checkpoint(tmp_path / "run" / "best.pt", payload)
    assert analyze.main([str(tmp_path / "run"), "--refine", "2", "--batch", "2", "--out", str(tmp_path / "a")]) == 2
    line = _one(capsys)
    assert str(tmp_path / "run" / "best.pt") in line and f"train.eval_batches={value!r}" in line


def test_a_step_cost_of_true_is_no_measurement(tmp_path):
    from odeformer.app.run.sweep import _checked_costs

    with pytest.raises(ValueError, match=r"costs\.json holds step costs"):
        _checked_costs(tmp_path / "costs.json", {"rk4": True}, {"rk4"})  # read as 1.0 before
    assert _checked_costs(tmp_path / "costs.json", {"rk4": 1}, {"rk4"}) == {"rk4": 1}


DEEP = "[" * 100_000 + "]" * 100_000


def test_a_metrics_row_nested_too_deeply_is_one_line_naming_the_file_and_line(tmp_path):
    import os

    from odeformer.app.run.trainer import metrics_tail

    path = tmp_path / "metrics.jsonl"
    path.write_text(f'{{"step": 1}}\n{DEEP}\n{{"step": 2}}\n')
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(ValueError, match=r"metrics\.jsonl line 2 is not a JSON row \(nested too deeply\)"):
            metrics_tail(fd, path)
    finally:
        os.close(fd)


def test_a_history_line_nested_too_deeply_is_skipped_like_any_line_that_is_no_event(tmp_path):
    from odeformer.app.run.history import history

    (tmp_path / "history.jsonl").write_text(f'{DEEP}\n{{"event": "diverged", "step": 3}}\n')
    assert history(tmp_path) == [{"event": "diverged", "step": 3}]


@pytest.mark.parametrize("command", ["sample", "diagnose"])
@pytest.mark.parametrize("seed", ["100000000000000000000000", "9223372036854775808"])
def test_a_seed_beyond_torchs_is_one_line_saying_what_a_seed_is(tmp_path, command, seed, capsys):
    from odeformer.app.commands import diagnose

    argv = [str(tmp_path)] if command == "sample" else ["--fresh", "diffusion", "--depth", "1", "--out", str(tmp_path)]
    main = sample.main if command == "sample" else diagnose.main
    assert main([*argv, "--seed", seed]) == 2  # was torch's "Overflow when unpacking long long"
    assert "--seed from 0 to 2**63 - 1" in _one(capsys).replace("--seed must be from", "--seed from")


@pytest.mark.parametrize(
    "options, words",
    [
        ({"task": "image", "n": 10**12}, "with n=1000000000000, image_size=8 generates 64000000000000 numbers"),
        ({"task": "image", "image_size": 10**6}, "image_size=1000000 generates"),
    ],
)
def test_a_stored_synthetic_dataset_of_absurd_size_is_one_line_before_anything_is_allocated(
    tmp_path, options, words, capsys
):
    from odeformer.app.commands import diagnose

    config = {
        "solver": {"_target_": "odeformer.solver", "name": "diffusion"},
        "model": {"_target_": "odeformer.ViT", "depth": 1, "dim": 8, "heads": 2, "patch_size": 2},
        "data": {"name": "synthetic", "root": None, "batch_size": 4, "options": options},
    }
    (tmp_path / "run").mkdir()
    save_checkpoint(tmp_path / "run" / "best.pt", {"format": FORMAT, "model": {}, RUN_RECORD: {"config": config}})
    assert diagnose.main([str(tmp_path / "run"), "--out", str(tmp_path / "out")]) == 2
    line = _one(capsys)
    assert words in line and "more than the 134217728 a synthetic task may" in line


@pytest.mark.parametrize(
    "options, words",
    [
        ({"task": "text", "n": 10**9}, "synthetic task 'text' with n=1000000000, length=32"),
        ({"task": "sequence", "length": 10**9}, "synthetic task 'sequence' with n=512, length=1000000000"),
        ({"task": "graph", "n": 10**6}, "synthetic task 'graph' with n=1000000, features=16"),  # an n x n matrix
    ],
)
def test_every_synthetic_task_bounds_what_it_generates(options, words):
    from odeformer.data import load

    with pytest.raises(ValueError, match="a synthetic task may") as refused:
        load("synthetic", **options)
    assert words in str(refused.value)


@pytest.mark.parametrize("command", ["compare", "reproduce"])
@pytest.mark.parametrize("workers", ["100000", "0", "-3"])
def test_a_number_of_workers_beyond_the_machine_is_one_line_before_any_process_starts(
    tmp_path, command, workers, capsys, monkeypatch
):
    from odeformer.app.commands import compare, reproduce
    from odeformer.app.run import sweep

    def forked(*args, **kwargs):  # a pool forks all its workers at once: 100000 of them
        raise RuntimeError(f"a pool was started with {kwargs.get('max_workers')} workers")

    monkeypatch.setattr(sweep, "ProcessPoolExecutor", forked)
    out = tmp_path / "out"
    if command == "compare":
        argv = ["diffusion", "--against", "full_wave", "--out", str(out), "--workers", workers, "train.max_steps=1"]
        code = compare.main(argv)
    else:
        code = reproduce.main(["--smoke", "--out", str(out), "--workers", workers])
    assert code == 2
    assert "is not a number of worker processes: give 1 to" in _one(capsys) and not out.exists()


@pytest.mark.parametrize("train", [None, {}, {"seed": "0"}, {"seed": -1}, {"seed": 10**30}, [1]])
def test_the_coordinate_check_refuses_a_checkpoint_without_the_seed_its_run_began_with(tmp_path, train):
    from odeformer.app.reporting.transfer import initial_model

    config = {
        "solver": {"_target_": "odeformer.solver", "name": "diffusion"},
        "model": {"_target_": "odeformer.ViT", "depth": 1, "dim": 8, "heads": 2, "patch_size": 2},
        "data": {"name": "synthetic", "root": None, "batch_size": 4, "options": {"task": "image", "n": 32}},
    }
    if train is not None:
        config["train"] = train
    save_checkpoint(tmp_path / "best.pt", {"format": FORMAT, "model": {}, RUN_RECORD: {"config": config}})
    with pytest.raises(ValueError, match="stores no seed its run began with") as refused:
        initial_model(tmp_path)  # was a KeyError (or torch's overflow) as a traceback in odeformer-reproduce
    assert str(tmp_path / "best.pt") in str(refused.value)


@pytest.mark.parametrize("name", ["comparison.md", "comparison.json"])
def test_compare_refuses_a_folder_where_it_writes_its_table_before_any_run(tmp_path, name, capsys, monkeypatch):
    from odeformer.app.commands import compare
    from odeformer.app.run import sweep

    def trained(*args, **kwargs):
        raise AssertionError("a run was trained before the table's file was refused")

    monkeypatch.setattr(sweep.Sweep, "evaluations", trained)
    (tmp_path / "out" / name).mkdir(parents=True)
    argv = ["diffusion", "--against", "full_wave", "--out", str(tmp_path / "out"), "train.max_steps=1"]
    assert compare.main(argv) == 2
    assert f"{tmp_path / 'out' / name} is a folder, not a file" in _one(capsys)
    assert not (tmp_path / "out" / "runs").exists()
