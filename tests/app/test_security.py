"""Nothing runs from a file: checkpoints are read as tensors and plain values only, and a config stored in one reaches
only the package's registered models, solvers and data (a scheme of the user's own only when the command line names
it). Each exploit is a file the test writes; the test checks that its command did not run and that the refusal is one
line naming the file."""

import os
import sys
from pathlib import Path

import pytest
import torch

from odeformer.app.commands import diagnose, reproduce
from odeformer.app.run.builder import UsageError, build, load_run
from odeformer.app.run.checkpoints import FORMAT, CheckpointError, load_checkpoint
from odeformer.app.run.identity import RUN_RECORD
from odeformer.app.run.sections import smoke_section

ROOT = Path(__file__).resolve().parents[2]


class _Exploit:
    """Pickles as a call of ``os.system(command)``: what loading with ``weights_only=False`` runs."""

    def __init__(self, command):
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


def _touch(marker: Path) -> str:
    return f"{sys.executable} -c \"open({str(marker)!r}, 'w').close()\""


def _one_line(text: str, *parts: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    for part in parts:
        assert part in lines[0], lines[0]
    return lines[0]


def _loads(path: Path) -> list[str]:
    """Where ``path`` calls ``torch.load`` (or ``load`` imported from torch), or passes ``weights_only=False``."""
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    aliases = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module in ("torch", "torch.serialization")
        for alias in node.names
        if alias.name == "load"
    }
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        torch_load = (
            isinstance(func, ast.Attribute)
            and func.attr == "load"
            and isinstance(func.value, ast.Name)
            and func.value.id in ("torch", "serialization")
        ) or (isinstance(func, ast.Name) and func.id in aliases)
        unsafe = any(
            k.arg == "weights_only" and not (isinstance(k.value, ast.Constant) and k.value.value is True)
            for k in node.keywords
        )
        if torch_load or unsafe:
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_the_package_has_one_checkpoint_loader():
    """Every checkpoint is read by odeformer.app.run.checkpoints.load_checkpoint (weights only): no other torch.load
    call, and no weights_only other than True, anywhere in the packages."""
    offenders = [
        where
        for package in ("odeformer", "solvers")
        for path in sorted((ROOT / package).rglob("*.py"))
        for where in _loads(path)
    ]
    loader = [where for where in offenders if where.startswith("odeformer/app/run/checkpoints.py:")]
    assert len(loader) == 1, offenders
    others = [where for where in offenders if where not in loader]
    assert not others, f"load checkpoints with odeformer.app.run.checkpoints.load_checkpoint, not: {others}"
    assert (
        "weights_only=True"
        in (ROOT / "odeformer" / "app" / "run" / "checkpoints.py")
        .read_text()
        .splitlines()[int(loader[0].rsplit(":", 1)[1]) - 1]
    )


def test_a_pickled_call_in_a_checkpoint_is_refused_naming_the_file(tmp_path):
    marker, path = tmp_path / "ran", tmp_path / "last.pt"
    torch.save({"format": FORMAT, "info": _Exploit(_touch(marker))}, path)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    _one_line(str(info.value), str(path), "refused to load", "system")
    assert "weights_only=False" not in str(info.value)  # torch's advice to load it unsafely is not passed on
    assert not marker.exists()


def test_reproduce_refuses_a_finished_runs_last_pt_that_would_run_code(tmp_path, capsys):
    """A completed run of the sweep whose last.pt was replaced by a pickled os.system: rerunning the sweep reads it
    to check the run's config, and must not run the command."""
    marker = tmp_path / "ran"
    runs = tmp_path / "runs"
    run = runs / "smoke" / smoke_section().runs()[0].name
    run.mkdir(parents=True)
    summary = '{"status": "completed", "metric": "accuracy", "val": 0.5, "test": 0.5, "steps": 1, "wall_s": 1}\n'
    (run / "summary.json").write_text(summary)
    torch.save({"format": FORMAT, "info": _Exploit(_touch(marker))}, run / "last.pt")
    code = reproduce.main(["--smoke", "--out", str(tmp_path / "out"), "--runs", str(runs), "--workers", "1"])
    assert code == 2
    _one_line(capsys.readouterr().err, "odeformer-reproduce: error:", str(run / "last.pt"), "refused to load")
    assert not marker.exists()


def _stored_config(**solver):
    return {
        "solver": {"_target_": "odeformer.solver", "name": "diffusion", **solver},
        "model": {"_target_": "odeformer.ViT", "depth": 1, "dim": 8, "heads": 2, "patch_size": 2},
        "data": {"name": "synthetic", "root": None, "batch_size": 4, "options": {"task": "image", "n": 32}},
        "train": {"device": "cpu"},
    }


def _best(run: Path, config: dict, model=None) -> Path:
    run.mkdir(parents=True, exist_ok=True)
    payload = {"format": FORMAT, "step": 1, "model": model or {}, RUN_RECORD: {"config": config}}
    torch.save(payload, run / "best.pt")
    return run / "best.pt"


@pytest.mark.parametrize(
    "node, key, value",
    [
        ("solver", "_target_", "os.system"),
        ("model", "_target_", "subprocess.call"),
        ("solver", "name", "exploit_module.Scheme"),  # a dotted name resolves to an import path
    ],
)
def test_diagnose_refuses_a_stored_config_naming_an_import_path(tmp_path, monkeypatch, capsys, node, key, value):
    """A weights-only best.pt (plain strings and dicts) whose stored config names os.system or a module of the
    attacker's: odeformer-diagnose must call nothing but the package's registered builders."""
    marker = tmp_path / "ran"
    monkeypatch.chdir(tmp_path)  # a module beside the run would be importable from here
    (tmp_path / "exploit_module.py").write_text(f"import os\nos.system({_touch(marker)!r})\nclass Scheme: pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    config = _stored_config()
    config[node][key] = value
    if value == "os.system":
        config["solver"]["command"] = _touch(marker)
    if value == "subprocess.call":
        config["model"]["args"] = ["touch", str(marker)]
    best = _best(tmp_path / "run", config)
    assert diagnose.main([str(tmp_path / "run"), "--out", str(tmp_path / "diag")]) == 2
    _one_line(capsys.readouterr().err, "odeformer-diagnose: error:", str(best), "refused", repr(value))
    assert not marker.exists() and "exploit_module" not in sys.modules
    assert not (tmp_path / "diag").exists()


def test_a_stored_user_scheme_is_imported_only_when_the_command_line_names_it(tmp_path, monkeypatch, capsys):
    marker = tmp_path / "imported"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_scheme.py").write_text(
        f"import os\nos.system({_touch(marker)!r})\nfrom solvers import Euler\nclass Mine(Euler):\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "my_scheme", raising=False)
    config = _stored_config(name="my_scheme.Mine", options={})
    best = _best(tmp_path / "run", config)
    assert diagnose.main([str(tmp_path / "run")]) == 2
    _one_line(capsys.readouterr().err, str(best), "solver='my_scheme.Mine'", "--stepper my_scheme.Mine")
    assert not marker.exists() and "my_scheme" not in sys.modules
    with pytest.raises(UsageError, match="the command line names 'other.Class'"):
        load_run(tmp_path / "run", stepper="other.Class")
    assert not marker.exists()

    # named on the command line, it is the user's own choice: the run is rebuilt with it
    torch.manual_seed(0)
    _, model, _ = build(config)  # as odeformer-train builds it from its command line
    assert marker.exists()
    _best(tmp_path / "run", config, model.state_dict())
    _, loaded, info = load_run(tmp_path / "run", stepper="my_scheme.Mine")
    assert type(loaded.backbone.layers[0].stepper).__name__ == "Mine"
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), model.state_dict().values()))
    monkeypatch.delitem(sys.modules, "my_scheme", raising=False)


def test_the_training_config_reaches_only_registered_models_too(tmp_path):
    """``model._target_`` is a typed config key a command line (or a YAML file on the search path) can set: it still
    names only the package's models."""
    marker = tmp_path / "ran"
    config = _stored_config()
    config["model"] = {"_target_": "os.system", "command": _touch(marker), "depth": 1, "dim": 8}
    with pytest.raises(UsageError, match="model._target_='os.system' is not one of odeformer's models"):
        build(config)
    assert not marker.exists()


def test_hydras_rerun_of_a_pickled_config_is_refused(tmp_path):
    """``--experimental-rerun FILE`` makes Hydra unpickle FILE: a file that would run code when a run is rebuilt."""
    import pickle

    from helpers import cli_in_process

    marker, path = tmp_path / "ran", tmp_path / "config.pickle"
    path.write_bytes(pickle.dumps(_Exploit(_touch(marker))))
    done = cli_in_process("--experimental-rerun", str(path))
    assert done.returncode == 2
    _one_line(done.stderr, "odeformer-train: error: --experimental-rerun is refused: it unpickles the file")
    assert not marker.exists()


def test_a_stored_config_with_foreign_arguments_is_one_line(tmp_path, capsys):
    """A config edited by hand (an argument the model does not take): one line naming it, not a traceback."""
    config = _stored_config()
    config["model"]["not_an_option"] = 1
    _best(tmp_path / "run", config)
    assert diagnose.main([str(tmp_path / "run"), "--out", str(tmp_path / "diag")]) == 2
    _one_line(capsys.readouterr().err, "odeformer-diagnose: error:", "not_an_option")
