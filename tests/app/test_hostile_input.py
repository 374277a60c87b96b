"""What a file or a command line may not decide: a checkpoint whose structure would never end being walked, a stored
config that would set the cost, and values no run can use, each one line (exit 2) before anything is written."""

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers import cli_in_process
from odeformer.app.run.resume import hydra_quote

DEBUG = ["train=debug", "data=synthetic", "model.depth=2", "model.dim=16", "model.heads=2", "train.eval_batches=1"]


def _line(done, code):
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == code, done.stderr + done.stdout
    assert len(lines) == 1, done.stderr
    return lines[0]


# structures that would make walking a checkpoint never end


def _save_raw(path: Path, payload) -> Path:
    import torch

    torch.save(payload, path)
    return path


def test_a_shared_structure_that_expands_exponentially_is_one_line_naming_the_file(tmp_path):
    from odeformer.app.run.checkpoints import CheckpointError, load_checkpoint

    node: dict = {"lr": 0.1}
    for _ in range(40):  # 2**40 paths, 40 containers
        node = {"a": node, "b": node}
    path = _save_raw(tmp_path / "last.pt", {"format": "odeformer-checkpoint-2", "run_record": {"config": node}})
    with pytest.raises(CheckpointError, match=r"last\.pt holds shared structures"):
        load_checkpoint(path)


def test_a_self_referencing_structure_is_one_line_naming_the_file(tmp_path):
    from odeformer.app.run.checkpoints import CheckpointError, load_checkpoint

    loop: list = []
    loop.append(loop)
    path = _save_raw(tmp_path / "last.pt", {"format": "odeformer-checkpoint-2", "optimizer": {"state": loop}})
    with pytest.raises(CheckpointError, match=r"last\.pt holds a structure that contains itself"):
        load_checkpoint(path)


def test_a_small_shared_value_in_a_real_checkpoint_is_still_read(tmp_path):
    from odeformer.app.run.checkpoints import load_checkpoint

    betas = (0.9, 0.999)
    payload = {"format": "odeformer-checkpoint-2", "groups": [{"betas": betas}, {"betas": betas}]}
    assert load_checkpoint(_save_raw(tmp_path / "last.pt", payload))["groups"][1]["betas"] == betas


def test_a_deeply_nested_structure_is_one_line_naming_the_file(tmp_path):
    from odeformer.app.run.checkpoints import MAX_DEPTH, CheckpointError, load_checkpoint

    node: list = []
    for _ in range(MAX_DEPTH + 5):
        node = [node]
    path = _save_raw(tmp_path / "last.pt", {"format": "odeformer-checkpoint-2", "run_record": {"config": node}})
    with pytest.raises(CheckpointError, match=r"last\.pt nests deeper"):
        load_checkpoint(path)


# the training state a resume would trust


# a file does not set what a command costs


def test_a_stored_config_goes_through_the_same_bounds_as_the_command_line(tmp_path):
    from odeformer.app.run.bounds import MAX_DEPTH, MAX_LEN, MAX_STAGES, UsageError, check_cost

    source = tmp_path / "best.pt"
    base = {"solver": {"name": "tableau", "options": {}}, "model": {"depth": 4, "max_len": 64}, "data": {}}
    check_cost(base, source)
    for model, word in (({"depth": MAX_DEPTH + 1}, "model.depth"), ({"max_len": MAX_LEN * 100}, "model.max_len")):
        with pytest.raises(UsageError, match=rf"best\.pt: {word}=\d+ is more than the \d+ allowed"):
            check_cost({**base, "model": model}, source)
    stages = {"A": [[0] * 3000] * 3000, "b": [0] * 3000}
    with pytest.raises(UsageError, match=rf"best\.pt: solver\.options\.A has 3000 stages, more than the {MAX_STAGES}"):
        check_cost({**base, "solver": {"name": "tableau", "options": stages}}, source)


def test_a_tied_deep_model_from_the_command_line_is_refused_before_it_is_built(tmp_path):
    done = cli_in_process(
        *DEBUG,
        f"train.out_dir={hydra_quote(str(tmp_path / 'run'))}",
        "model.depth=100000000",
        "model.tie_weights=true",
        "model.checkpoint=true",  # little memory at any depth: the estimate alone lets it through
    )
    assert "model.depth=100000000 is more than the 100000 allowed" in _line(done, 2)


# odeformer-diagnose on a hostile run directory


@pytest.mark.parametrize(
    "override, words",
    [
        ("model.dt=1e308", "model.dt=1e+308 is not a finite float32"),
        ("model.dropout=nan", "model.dropout=nan must be a probability"),
        ("model.norm_eps=-1", "model.norm_eps=-1"),
        ("model.norm_eps=nan", "model.norm_eps=nan must be a positive finite"),
        ("train.lr=1e400", "train.lr is beyond the largest float"),
        (f"train.seed={2**64}", "train.seed=18446744073709551616 must be from 0 to 2**63 - 1"),
        ("train.threads=100000", "train.threads=100000 is more than this machine's"),
        ("+foo=bar", "+foo adds the key foo, which nothing reads"),
        ("++foo=bar", "++foo adds the key foo"),
    ],
)
def test_a_value_no_run_can_use_is_one_line_before_anything_is_written(tmp_path, override, words):
    out = tmp_path / "run"
    done = cli_in_process(*DEBUG, f"train.out_dir={hydra_quote(str(out))}", override)
    assert words in _line(done, 2)
    assert not out.exists()


def test_an_empty_out_dir_is_refused_not_the_current_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    done = cli_in_process(*DEBUG, "train.out_dir=''")
    assert "train.out_dir='' names no folder" in _line(done, 2)
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished 2-step run, copied by the tests that change it."""
    out = tmp_path_factory.mktemp("finished") / "run"
    done = cli_in_process(*DEBUG, "train.max_steps=2", "train.eval_every=2", f"train.out_dir={hydra_quote(str(out))}")
    assert done.returncode == 0, done.stderr
    return out


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _attempt(where: str, finished: Path, tmp_path: Path, capsys) -> tuple[Path, Callable[[], str]]:
    """The path the caller makes read-only for the command ``where`` names (one of :data:`WHERE`), and that command:
    called, it runs and returns its one line (exit 2)."""
    import shutil

    from odeformer.app.commands import diagnose
    from odeformer.app.run.checkpoints import load_checkpoint
    from odeformer.app.run.identity import RUN_RECORD

    if where == "fresh":
        parent = tmp_path / "ro"
        parent.mkdir()
        return parent, lambda: _line(cli_in_process(*DEBUG, f"train.out_dir={hydra_quote(str(parent / 'run'))}"), 2)
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    if where == "resume":
        own = [o for o in load_checkpoint(run / "last.pt")[RUN_RECORD]["overrides"] if "out_dir=" not in o]
        command = [*own, f"train.out_dir={hydra_quote(str(run))}", "train.resume=true", "train.max_steps=4"]
        return run, lambda: _line(cli_in_process(*command), 2)
    if where == "resume-metrics":
        own = [o for o in load_checkpoint(run / "last.pt")[RUN_RECORD]["overrides"] if "out_dir=" not in o]
        command = [*own, f"train.out_dir={hydra_quote(str(run))}", "train.resume=true", "train.max_steps=4"]
        return run / "metrics.jsonl", lambda: _line(cli_in_process(*command), 2)
    figures = tmp_path / "figures"
    figures.mkdir()

    def run_diagnose():
        assert diagnose.main([str(run), "--out", str(figures / "new")]) == 2
        lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert len(lines) == 1, lines
        return lines[0]

    return figures, run_diagnose


WHERE = ["fresh", "resume", "resume-metrics", "diagnose"]
"""A new run's parent folder, a stopped run's directory (resumed), a stopped run's ``metrics.jsonl`` (which a
resume appends to), and the folder above ``odeformer-diagnose --out``."""


@pytest.mark.parametrize("where", WHERE)
def test_a_read_only_out_dir_is_one_line_and_nothing_is_written(where, finished, tmp_path, capsys, monkeypatch):
    """The refusal itself, whoever runs it (root included, whom permissions do not stop): the writability probe is
    made to answer no for one path, the same answer a read-only folder or file system gives."""
    from odeformer.app import files

    read_only, attempt = _attempt(where, finished, tmp_path, capsys)
    probe = files.writable
    monkeypatch.setattr(files, "writable", lambda path: Path(path).resolve() != read_only.resolve() and probe(path))
    before = _tree(tmp_path)
    line = attempt()
    assert f"{read_only} is read-only for this user" in line and "cannot be written" in line
    assert _tree(tmp_path) == before


def _permissions_bind(tmp_path: Path) -> bool:
    """Whether a folder without write permission stops this process (not root, or root without the capability to
    override permissions)."""
    folder = tmp_path / "probe"
    folder.mkdir(mode=0o500)
    try:
        return not os.access(folder, os.W_OK)
    finally:
        folder.rmdir()


@pytest.mark.parametrize("where", WHERE)
def test_a_folder_without_write_permission_is_one_line(where, finished, tmp_path, capsys):
    if not _permissions_bind(tmp_path):
        pytest.skip("this process writes into folders without write permission (root)")
    read_only, attempt = _attempt(where, finished, tmp_path, capsys)
    mode = read_only.stat().st_mode
    read_only.chmod(0o500 if read_only.is_dir() else 0o400)
    try:
        before = _tree(tmp_path)
        assert f"{read_only} is read-only for this user" in attempt()
        assert _tree(tmp_path) == before
    finally:
        read_only.chmod(mode)


def test_a_path_no_user_can_make_a_folder_at_is_one_line(finished, tmp_path, capsys):
    """An out_dir under a regular file cannot be made even by root: a fresh run and diagnose's --out both say so."""
    from odeformer.app.commands import diagnose

    (tmp_path / "file").write_text("x")
    done = cli_in_process(*DEBUG, f"train.out_dir={hydra_quote(str(tmp_path / 'file' / 'run'))}")
    assert f"cannot be made: {tmp_path / 'file'} is a file, not a folder" in _line(done, 2)
    assert diagnose.main([str(finished), "--out", str(tmp_path / "file" / "figures")]) == 2
    assert f"cannot be made: {tmp_path / 'file'} is a file, not a folder" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_an_out_dir_in_the_kernels_file_systems_is_one_line():
    done = cli_in_process(*DEBUG, "train.out_dir=/proc/x")
    assert "train.out_dir=/proc/x cannot be written" in _line(done, 2)


@pytest.mark.parametrize(
    "override, words",
    [
        ("~solver.name", "~solver.name removes solver.name from the config"),
        ("model.dt=1,2", "model.dt=1,2 gives several values; run a sweep over them with -m"),
        ("model." + "k" * 5000 + "=1", "an override's key has 5006 characters (at most 200)"),
        ("model.dt=" + "9" * 5000, "model.dt= has a value of 5000 characters"),
        ("model.dt=" + "9" * 100, "model.dt= has a number of more than 60 digits"),
    ],
)
def test_an_override_no_run_can_take_is_one_line(tmp_path, override, words):
    out = tmp_path / "run"
    done = cli_in_process(*DEBUG, f"train.out_dir={hydra_quote(str(out))}", override)
    assert words in _line(done, 2)
    assert not out.exists()


@pytest.mark.parametrize("args", [["--config-name=missing"], ["--config-path=/etc"], ["-cn", "missing"]])
def test_another_primary_config_is_one_line(tmp_path, args):
    done = cli_in_process(*DEBUG, f"train.out_dir={hydra_quote(str(tmp_path / 'run'))}", *args)
    assert "is refused: odeformer-train composes its own config" in _line(done, 2)
    assert not (tmp_path / "run").exists()


def test_an_added_model_key_is_named(tmp_path):
    done = cli_in_process(*DEBUG, f"train.out_dir={hydra_quote(str(tmp_path / 'run'))}", "+model.foo=1")
    assert "model.foo is not a setting of the" in _line(done, 2)


# -- a scheme of one's own: its name checked before its module runs ---------------------------------------------------

SHAPE = "give module.Class, the dotted path to a stepper class in a module of your own"


@pytest.mark.parametrize(
    "name, words",
    [
        ("..os", "unknown solver '..os'"),  # not identifiers joined by dots: no solver's name and no class's path
        (".x", "unknown solver '.x'"),
        ("os.", "unknown solver 'os.'"),
        ("a..b", "unknown solver 'a..b'"),
        ("my_schemes", "unknown solver 'my_schemes'"),  # a module without a class
        ("my-schemes.Mine", "unknown solver 'my-schemes.Mine'"),
        ("os.system", "names Python's own module os, not a scheme of yours"),
        ("builtins.print", "names Python's own module builtins"),
        ("sys.exit", "names Python's own module sys"),
        ("json.decoder.JSONDecoder", "names Python's own module json"),
        ("no_such_schemes_here.Mine", "there is no module no_such_schemes_here on the Python path or in the current"),
    ],
)
def test_a_name_that_cannot_be_a_scheme_of_ones_own_is_one_line_before_anything_runs(tmp_path, name, words):
    out = tmp_path / "run"
    done = cli_in_process(*DEBUG, f"train.out_dir={hydra_quote(str(out))}", f"solver={name}")
    line = _line(done, 2)
    assert (f"solver={name}" in line or "unknown solver" in line) and words in line
    assert SHAPE.removeprefix("give ") in line or "." not in name  # a plain name is a solver's name mistyped
    assert "Error" not in line and "Traceback" not in line
    assert done.stdout == "" and not out.exists()  # refused before Hydra started: nothing was made


def test_a_solver_choice_that_cannot_be_a_scheme_says_what_a_schemes_name_looks_like(tmp_path):
    done = cli_in_process(*DEBUG, f"train.out_dir={tmp_path / 'run'}", "solver=..os")
    line = _line(done, 2)
    assert "unknown solver '..os'; choose one of: " in line and SHAPE.removeprefix("give ") in line


def test_a_scheme_name_in_a_sweep_is_checked_for_every_value(tmp_path):
    done = cli_in_process(*DEBUG, f"hydra.sweep.dir={tmp_path / 'sweep'}", "-m", "solver=diffusion,os.system")
    assert "names Python's own module os" in _line(done, 2)
    assert not (tmp_path / "sweep").exists()


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """``planted_scheme.py`` in the working directory, a real stepper whose import leaves a marker file."""
    import sys

    marker = tmp_path / "imported"
    (tmp_path / "planted_scheme.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).touch()\nfrom solvers import Euler\n\n\n"
        "class Mine(Euler):\n    pass\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "planted_scheme", raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the import adds the working directory: undone after
    yield marker
    sys.modules.pop("planted_scheme", None)


@pytest.mark.parametrize(
    "override, words",
    [
        ("model.nonesuch=1", "unknown key 'model.nonesuch'"),
        ("model.dt=1e308", "model.dt=1e+308 is not a finite float32 step size"),
        ("model.depth=-1", "model.depth must be a positive int, got -1"),
        ("model.depth=100001 model.tie_weights=true model.checkpoint=true", "model.depth=100001 is more than the"),
        ("data.batch_size=0", "data.batch_size must be a positive int, got 0"),
        ("model.dim=200000", "this run needs about"),
        ("train.lr=-1", "train.lr"),
        ("data=planetoid", "planetoid"),
    ],
)
def test_a_bad_override_beside_a_scheme_of_ones_own_is_refused_without_running_its_module(
    planted, tmp_path, monkeypatch, override, words
):
    monkeypatch.setenv("ODEFORMER_DATA", str(tmp_path / "no_data_here"))
    out = tmp_path / "run"
    done = cli_in_process(*DEBUG, f"train.out_dir={out}", "solver=planted_scheme.Mine", *override.split())
    assert words in _line(done, 2)
    assert not planted.exists()


def test_a_scheme_of_ones_own_is_imported_once_all_else_is_checked(planted, tmp_path):
    """The same command line without the bad override trains with the planted class: the check itself does not stop
    a good name (the marker shows its module ran, as naming it asks)."""
    out = tmp_path / "run"
    done = cli_in_process(*DEBUG, f"train.out_dir={out}", "solver=planted_scheme.Mine", "model.dim=200000")
    assert "this run needs about" in _line(done, 2) and not planted.exists()
    from odeformer.app.run.builder import build

    config = {
        "solver": {"_target_": "odeformer.solver", "name": "planted_scheme.Mine"},
        "model": {"_target_": "odeformer.ViT", "depth": 1, "dim": 8, "heads": 2, "patch_size": 2},
        "data": {"name": "synthetic", "root": None, "batch_size": 4, "options": {"task": "image", "n": 32}},
        "train": {"device": "cpu"},
    }
    _, model, _ = build(config)
    assert planted.exists() and type(model.backbone.layers[0].stepper).__name__ == "Mine"


def test_a_scheme_a_stored_config_names_is_never_imported_by_a_resume(planted, finished, tmp_path):
    """A last.pt whose config (and stored overrides) name a module of someone's: resuming it with the command line's
    own solver is refused as a change of solver.name, and the module never runs; the command it prints leaves the
    module out."""
    import shutil

    from odeformer.app.run.checkpoints import load_checkpoint, save_checkpoint
    from odeformer.app.run.identity import RUN_RECORD

    run = tmp_path / "run"
    shutil.copytree(finished, run)
    payload = load_checkpoint(run / "last.pt")
    own = [o for o in payload[RUN_RECORD]["overrides"] if "out_dir=" not in o]
    payload[RUN_RECORD]["config"]["solver"]["name"] = "planted_scheme.Mine"
    payload[RUN_RECORD]["overrides"] = [*own, "solver=planted_scheme.Mine"]
    save_checkpoint(run / "last.pt", payload)
    done = cli_in_process(*own, f"train.out_dir={hydra_quote(str(run))}", "train.resume=true", "train.max_steps=4")
    line = _line(done, 2)
    assert "changes solver.name (planted_scheme.Mine in the run, " in line
    assert "planted_scheme" not in line.split("Resume with")[1]
    assert not planted.exists()
