"""Where a command promises one line for bad input it gives one line (never a traceback, never argparse's or Hydra's
usage of several lines), naming the value or file and what is allowed, with control characters in names escaped."""

from __future__ import annotations

import pytest

from helpers import cli_in_process
from odeformer.app.commands import analyze, compare, diagnose, reproduce, sample
from odeformer.app.run.resume import hydra_quote

DEBUG = ["train=debug", "data=synthetic", "model.depth=1", "model.dim=16", "model.heads=2", "train.max_steps=2"]


def _line(done, code=2):
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == code, done.stderr + done.stdout
    assert len(lines) == 1, done.stderr
    return lines[0]


@pytest.mark.parametrize(
    "override, words",
    [
        ("model.dt=1e-320", "model.dt=1e-320 is 0 in float32"),
        ("train.lr=1e-320", "train.lr=1e-320 is 0 in float32"),
        ("+data._target_=os.system", "+data._target_ adds the key data._target_: a key starting with _"),
        ("+train._target_=os.system", "+train._target_ adds the key train._target_"),
        ("model.depth=${oc.env:HOME}", "bad value for model.depth"),
        ("model.dt=${eval:1}", "bad value for model.dt: Unsupported interpolation type eval"),
        ("train.out_dir=${hydra:runtime.cwd}/x", "${hydra:...} is known to a running job only"),
        ("hydra.run.dir=/proc/self", "hydra.run.dir=/proc/self cannot be written"),
        ("+hydra.callbacks.x._target_=os.getcwd", "+hydra.callbacks.x._target_ is refused"),
        ("hydra.job_logging.handlers.file.filename=/tmp/x.log", "hydra.job_logging.handlers.file.filename is refused"),
        ("hydra/job_logging=default", "hydra/job_logging is refused"),
        ("--foo", "unknown option --foo"),
        ("--shell-completion", "--shell-completion takes install=SHELL"),
        ("solver=tableau solver.options.A=[[],[1e308]] solver.options.b=[0.5,0.5]", "coefficient 1e+308"),
        ("model.depth=10001 model.tie_weights=true", "model.depth=10001 with model.tie_weights=true is more than"),
    ],
)
def test_train_refuses_in_one_line_what_no_run_can_use(tmp_path, override, words):
    out = tmp_path / "run"
    done = cli_in_process(*DEBUG, f"train.out_dir={hydra_quote(str(out))}", *override.split())
    assert words in _line(done), done.stderr
    assert not out.exists()


def test_a_folder_name_too_long_for_the_file_system_is_one_line(tmp_path):
    out = tmp_path / ("a" * 300)
    line = _line(cli_in_process(*DEBUG, f"train.out_dir={out}"))
    assert "has 300 bytes, more than 255" in line and not list(tmp_path.iterdir())


def test_a_control_character_in_a_path_is_shown_escaped(tmp_path):
    out = tmp_path / "\x1b[31mred"
    done = cli_in_process(*DEBUG, f"train.out_dir={hydra_quote(str(out))}")
    assert done.returncode == 0 and (out / "summary.json").exists(), done.stderr
    assert "\x1b" not in done.stdout + done.stderr and "\\x1b[31mred" in done.stdout
    line = _line(cli_in_process(*DEBUG, f"train.out_dir={hydra_quote(str(out))}"))  # a run is there already
    assert "\x1b" not in line and "\\x1b[31mred" in line


def test_hydra_help_answers_after_an_override():
    done = cli_in_process("train.lr=0.1", "solver=rk4", "--hydra-help")
    assert done.returncode == 0 and "Hydra" in done.stdout, done.stderr


@pytest.mark.parametrize(
    "main, argv, words",
    [
        (compare.main, ["rk4", "--out", "X", "--nonesuch"], "unrecognized arguments: --nonesuch"),
        (analyze.main, ["--batch"], "argument --batch: expected one argument"),
        (diagnose.main, ["--depth", "x"], "argument --depth: invalid int value"),
        (sample.main, [], "the following arguments are required: RUN_DIR"),
        (reproduce.main, ["--workers", "x"], "argument --workers: invalid int value"),
    ],
)
def test_a_usage_error_is_one_line_not_argparses_usage(main, argv, words, capsys):
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "--help" in lines[0], lines


def test_diagnose_writes_fresh_models_and_runs_to_folders_of_their_own(tmp_path, monkeypatch, capsys):
    """``odeformer-diagnose RUN_A RUN_B`` and ``odeformer-diagnose --fresh ...`` (the README's two lines) do not
    overwrite each other's figures."""
    from odeformer.app.commands.diagnose import default_out

    monkeypatch.chdir(tmp_path)
    fresh = ["--fresh", "diffusion", "--data", "synthetic", "--depth", "1", "--dim", "16", "--batch", "2"]
    assert diagnose.main(fresh) == 0, capsys.readouterr().err
    assert (tmp_path / "outputs" / "diagnostics_fresh" / "cosine.json").exists()
    assert not (tmp_path / "outputs" / "diagnostics").exists()
    runs = [tmp_path / "a", tmp_path / "b"]
    assert default_out(runs, fresh=False)[0] != default_out([], fresh=True)[0]
    assert default_out(runs[:1], fresh=False) == (tmp_path / "a" / "diagnostics", tmp_path / "a")


def test_a_misspelled_class_is_refused_with_the_nearest_before_anything_runs(tmp_path, monkeypatch):
    (tmp_path / "typo_schemes.py").write_text(
        "import pathlib\npathlib.Path('ran.txt').touch()\nimport solvers\n\n\nclass Yoshida4(solvers.Heun):\n    pass\n"
    )
    monkeypatch.chdir(tmp_path)
    line = _line(cli_in_process(*DEBUG, "solver=typo_schemes.Yoshida", f"train.out_dir={tmp_path / 'run'}"))
    assert "typo_schemes.py defines no Yoshida; did you mean typo_schemes.Yoshida4?" in line
    assert not (tmp_path / "ran.txt").exists() and not (tmp_path / "run").exists()


def test_a_config_file_with_a_key_its_group_lacks_is_one_line_naming_the_file(tmp_path):
    """A solver YAML on a ``hydra.searchpath`` that sets a key the solver schema lacks: one line naming the file (as
    its group and option) and the keys there are, the nearest first; the old ``stepper:`` spelling names the new one."""
    folder = tmp_path / "my_configs" / "solver"
    folder.mkdir(parents=True)
    (folder / "typo.yaml").write_text("defaults:\n  - velocity_verlet\n  - _self_\nsplittin: strang\n")
    (folder / "old.yaml").write_text("defaults:\n  - velocity_verlet\n  - _self_\nstepper: my_schemes.Yoshida4\n")
    search = f"hydra.searchpath=[file://{tmp_path / 'my_configs'}]"
    line = _line(cli_in_process(*DEBUG, search, "solver=typo"))
    assert "solver/typo sets an unknown key 'solver.splittin'; did you mean splitting?" in line
    assert "the keys of solver are: " in line and "name" in line
    line = _line(cli_in_process(*DEBUG, search, "solver=old"))
    assert "solver/old: stepper is no key of a solver: a scheme of your own is its name (name: module.Class)." in line
