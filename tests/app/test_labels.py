"""Labels for runs side by side say what the runs differ in (solver and options first), never their paths."""

from odeformer.app.commands.train import compose_config
from odeformer.app.reporting.labels import run_labels


def _config(*overrides):
    return compose_config(["train=debug", *overrides])


def test_runs_are_labelled_by_their_solver_and_what_else_differs():
    configs = [
        _config("solver=diffusion", "train.out_dir=/somewhere/long/a"),
        _config("solver=light_wave", "solver.options.theta0=2.0", "train.out_dir=/elsewhere/b"),
        _config("solver=light_wave", "solver.options.theta0=-8.0", "model.depth=8", "train.out_dir=/x/c"),
    ]
    labels = run_labels(configs, ["a", "b", "c"])
    assert labels[0].split()[0] == "diffusion"
    assert labels[1].startswith("light_wave theta0=2") and labels[2].startswith("light_wave theta0=-8")
    assert labels[2].endswith("depth=8") and "depth=8" not in labels[1]  # another setting that differs
    assert not any("/" in label or "out_dir" in label for label in labels)  # never where a run lies


def test_runs_alike_but_for_the_seed_say_the_seed_and_identical_ones_their_folder():
    seeds = run_labels([_config("solver=rk4", f"train.seed={s}") for s in (0, 1)], ["r0", "r1"])
    assert seeds == ["rk4 seed=0", "rk4 seed=1"]
    same = run_labels([_config("solver=rk4"), _config("solver=rk4")], ["first", "second"])
    assert same == ["rk4 (first)", "rk4 (second)"]


def test_a_scheme_of_ones_own_is_named_by_its_class_and_a_run_without_a_config_by_its_folder():
    labels = run_labels([{"solver": {"name": "my_schemes.Yoshida4"}}, None], ["y", "old"])
    assert labels == ["my_schemes.Yoshida4", "old"]
