"""A run directory or checkpoint received from someone else loses nothing outside the run: a refused command removes
only the config snapshot it wrote, inside its run directory; no file is written through a link planted there; a
checkpoint whose zip records would inflate is refused before it is loaded; and overrides stored in a checkpoint are
repeated to the user only where they are the package's own settings."""

import os
import zipfile
from pathlib import Path

import pytest
import torch

from helpers import cli_in_process
from odeformer.app import files
from odeformer.app.reporting.plots import plot_curves
from odeformer.app.run.checkpoints import FORMAT, CheckpointError, load_checkpoint, save_checkpoint
from odeformer.app.run.history import record
from odeformer.app.run.identity import RUN_RECORD
from odeformer.app.run.locks import RunDirectoryError, lock_run_directory
from odeformer.app.run.resume import hydra_quote, own_overrides

REFUSED = ["train=debug", "data=synthetic", "model.depth=1", "model.dim=16", "model.heads=3", "train.max_steps=3"]
"""A command refused after Hydra wrote its config snapshot (heads do not divide dim)."""


def _line(done, code):
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == code, done.stderr + done.stdout
    assert len(lines) == 1, done.stderr
    return lines[0]


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# -- a refused command removes only its own snapshot ----------------------------------------------------------------


@pytest.mark.parametrize("subdir", ["..", "../..", "../sibling", "a/../../x"])
def test_an_output_subdir_that_climbs_out_is_refused_and_nothing_is_removed(tmp_path, subdir):
    parent = tmp_path / "parent"
    (parent / "sibling").mkdir(parents=True)
    (parent / "sibling" / "last.pt").write_bytes(b"another run's weights")
    before = _tree(tmp_path)
    out = parent / "run"
    done = cli_in_process(*REFUSED, f"train.out_dir={hydra_quote(str(out))}", f"hydra.output_subdir={subdir}")
    line = _line(done, 2)
    assert f"hydra.output_subdir={subdir} is refused" in line and "relative path" in line
    assert _tree(tmp_path) == before and not out.exists()


def test_an_absolute_output_subdir_is_refused_and_that_folder_is_kept(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "precious.txt").write_text("kept")
    out = tmp_path / "run"
    done = cli_in_process(*REFUSED, f"train.out_dir={hydra_quote(str(out))}", f"hydra.output_subdir={elsewhere}")
    assert "is refused" in _line(done, 2)
    assert (elsewhere / "precious.txt").read_text() == "kept"


def test_a_refused_command_removes_its_snapshot_only_and_keeps_a_file_beside_it(tmp_path):
    out = tmp_path / "run"
    done = cli_in_process(*REFUSED, f"train.out_dir={hydra_quote(str(out))}", "hydra.output_subdir=snap")
    assert "heads" in _line(done, 2)
    assert not out.exists()  # the snapshot, and the folders it alone filled, are gone
    (out / "snap").mkdir(parents=True)
    (out / "snap" / "notes.txt").write_text("the user's")
    done = cli_in_process(*REFUSED, f"train.out_dir={hydra_quote(str(out))}", "hydra.output_subdir=snap")
    assert "heads" in _line(done, 2)
    assert _tree(out) == {"snap/notes.txt": b"the user's"}


def test_a_snapshot_folder_that_is_a_link_out_of_the_run_is_left_alone(tmp_path):
    from odeformer.app.commands.train import _forget_snapshot

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "config.yaml").write_text("not this run's")
    out = tmp_path / "run"
    out.mkdir()
    (out / "snap").symlink_to(outside)
    _forget_snapshot(out, "snap")
    assert (outside / "config.yaml").read_text() == "not this run's" and (out / "snap").is_symlink()


# -- no write through a link ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", [".lock", "metrics.jsonl", "last.pt.tmp", "best.pt.tmp", "summary.json", "curves.png", "history.jsonl"]
)
def test_a_link_planted_in_a_run_directory_is_refused_and_its_target_untouched(tmp_path, name):
    target = tmp_path / "target.txt"
    target.write_bytes(b"someone else's file\n")
    out = tmp_path / "run"
    out.mkdir()
    (out / name).symlink_to(target)
    done = cli_in_process(
        "train=debug", "data=synthetic", "model.depth=1", "model.dim=16", "model.heads=2", "train.max_steps=2",
        f"train.out_dir={hydra_quote(str(out))}",
    )  # fmt: skip
    line = _line(done, 2)
    assert str(out / name) in line and "link" in line
    assert target.read_bytes() == b"someone else's file\n"
    assert sorted(p.name for p in out.iterdir()) == [name]  # nothing else written (no config snapshot either)


def test_a_lock_linked_to_dev_null_is_one_line(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / ".lock").symlink_to("/dev/null")
    with pytest.raises(RunDirectoryError, match=r"\.lock is a link"), lock_run_directory(out):
        pass
    done = cli_in_process("train=debug", "data=synthetic", f"train.out_dir={hydra_quote(str(out))}")
    assert ".lock is a link" in _line(done, 2)


def test_the_writers_never_follow_a_link(tmp_path):
    target = tmp_path / "target.txt"
    target.write_bytes(b"kept")
    for name, write in [
        ("last.pt", lambda p: save_checkpoint(p, {"format": FORMAT})),
        ("curves.png", lambda p: plot_curves([{"step": 1, "loss": 1.0}], p)),
        ("history.jsonl", lambda p: record(p.parent, {"event": "x"})),
        ("summary.json", lambda p: files.write_text(p, "{}")),
    ]:
        link = tmp_path / name
        link.symlink_to(target)
        with pytest.raises(files.UnsafeFile, match="is a link"):
            write(link)
        assert target.read_bytes() == b"kept" and link.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["target.txt", "last.pt", "curves.png", "history.jsonl", "summary.json"]
    )  # no temporary left behind


def test_a_checkpoint_write_uses_a_fresh_temporary_and_leaves_none(tmp_path):
    planted = tmp_path / "target.txt"
    planted.write_bytes(b"kept")
    (tmp_path / "last.pt.tmp").symlink_to(planted)  # the fixed name an earlier version used
    save_checkpoint(tmp_path / "last.pt", {"format": FORMAT, "step": 3})
    assert load_checkpoint(tmp_path / "last.pt")["step"] == 3
    assert planted.read_bytes() == b"kept"
    stale = tmp_path / "last.pt.0123456789ab.tmp"
    stale.write_bytes(b"half")
    save_checkpoint(tmp_path / "last.pt", {"format": FORMAT, "step": 4})
    assert not stale.exists() and load_checkpoint(tmp_path / "last.pt")["step"] == 4


def test_appending_refuses_a_fifo(tmp_path):
    fifo = tmp_path / "history.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(files.UnsafeFile, match="not a regular file"):
        record(tmp_path, {"event": "x"})


# -- a checkpoint that would inflate ----------------------------------------------------------------------------


def test_a_compressed_record_is_refused_before_loading(tmp_path):
    path = tmp_path / "best.pt"
    torch.save({"format": FORMAT, "w": torch.zeros(4)}, path)
    with zipfile.ZipFile(path) as source:
        records = [(info.filename, source.read(info)) for info in source.infolist()]
    bomb = tmp_path / "bomb.pt"
    with zipfile.ZipFile(bomb, "w") as out:
        for name, data in records:
            out.writestr(name, data, compress_type=zipfile.ZIP_STORED)
        out.writestr(records[0][0].split("/")[0] + "/data/9", b"\0" * 10_000_000, compress_type=zipfile.ZIP_DEFLATED)
    assert bomb.stat().st_size < 100_000
    with pytest.raises(CheckpointError, match=r"bomb\.pt holds a compressed record"):
        load_checkpoint(bomb)


def test_a_record_declaring_more_bytes_than_the_file_is_refused(tmp_path):
    path = tmp_path / "best.pt"
    torch.save({"format": FORMAT, "w": torch.zeros(4)}, path)
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:
        info = archive.infolist()[0]
    start = bytes(data).find(b"PK\x01\x02")  # the first record's central directory entry
    data[start + 24 : start + 28] = (2**31).to_bytes(4, "little")  # its declared uncompressed size
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=rf"declares a record \('{info.filename}'\) of 2147483648 bytes"):
        load_checkpoint(path)


def test_a_checkpoint_torch_wrote_still_loads(tmp_path):
    path = tmp_path / "last.pt"
    save_checkpoint(path, {"format": FORMAT, "w": torch.arange(5.0)})
    assert torch.equal(load_checkpoint(path)["w"], torch.arange(5.0))


# -- stored overrides are not repeated as commands ----------------------------------------------------------------


def test_only_the_packages_own_overrides_are_repeated():
    stored = [
        "solver=diffusion",
        "model.depth=4",
        "+solver.options.theta=0.5",
        "+hydra.callbacks.x._target_=evilmod.Run",
        "hydra.run.dir=/tmp",
        "solver.stepper=evilmod.Evil",
        "solver=evilmod.Evil",
        "~model.dt",
        "+model.foo=1",
        "train.lr=${oc.env:HOME}",
    ]
    kept, dropped = own_overrides(stored)
    assert kept == ["solver=diffusion", "model.depth=4", "+solver.options.theta=0.5"]
    assert dropped == len(stored) - len(kept)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished 4-step run, copied by the tests that change it."""
    out = tmp_path_factory.mktemp("finished") / "run"
    done = cli_in_process(
        "train=debug", "data=synthetic", "model.depth=1", "model.dim=16", "model.heads=2", "train.max_steps=4",
        "train.eval_every=4", "train.eval_batches=1", f"train.out_dir={hydra_quote(str(out))}",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return out


def _copy(finished: Path, to: Path) -> Path:
    import shutil

    shutil.copytree(finished, to, symlinks=True)
    return to


def test_a_refused_resume_prints_only_the_packages_own_stored_overrides(finished, tmp_path):
    from odeformer.app.run.identity import RUN_RECORD

    out = _copy(finished, tmp_path / "run")
    payload = load_checkpoint(out / "last.pt")
    own = list(payload[RUN_RECORD]["overrides"])
    payload[RUN_RECORD]["overrides"] = [*own, "+hydra.callbacks.x._target_=evilmod.Run", "solver.stepper=evilmod.Evil"]
    save_checkpoint(out / "last.pt", payload)
    own = [o for o in own if not o.startswith("train.out_dir=")]
    done = cli_in_process(*own, f"train.out_dir={hydra_quote(str(out))}", "model.dim=32", "train.resume=true")
    line = _line(done, 2)
    assert f"as {out / 'last.pt'} stores them; 2 stored overrides" in line and "left out" in line
    assert "evilmod" not in line and "hydra.callbacks" not in line
    assert all(o in line for o in own)


def test_sample_refuses_a_compressed_checkpoint_in_one_line(finished, tmp_path, capsys):
    from odeformer.app.commands import sample

    out = _copy(finished, tmp_path / "run")
    with zipfile.ZipFile(out / "best.pt") as source:
        records = [(info.filename, source.read(info)) for info in source.infolist()]
    with zipfile.ZipFile(out / "best.pt", "w") as rewritten:
        for name, data in records:
            rewritten.writestr(name, data, compress_type=zipfile.ZIP_DEFLATED)
    assert sample.main([str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and f"{out / 'best.pt'} holds a compressed record" in err


def test_diagnose_refuses_a_bad_batch_an_out_under_a_file_and_a_linked_folder(finished, tmp_path, capsys):
    from odeformer.app.commands import diagnose

    out = _copy(finished, tmp_path / "run")
    assert diagnose.main([str(out), "--batch", "-1"]) == 2
    assert "--batch must be at least 1" in _one(capsys.readouterr().err)
    (tmp_path / "file").write_text("x")
    assert diagnose.main([str(out), "--out", str(tmp_path / "file" / "figures")]) == 2
    assert "is a file, not a folder" in _one(capsys.readouterr().err)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (out / "diagnostics").symlink_to(elsewhere)
    assert diagnose.main([str(out)]) == 2
    assert f"{out / 'diagnostics'} is a link" in _one(capsys.readouterr().err)
    figures = tmp_path / "figures"
    figures.mkdir()
    (figures / "cka.png").symlink_to(tmp_path / "file")
    assert diagnose.main([str(out), "--out", str(figures)]) == 2
    assert "cka.png is a link" in _one(capsys.readouterr().err)
    assert (tmp_path / "file").read_text() == "x" and not list(elsewhere.iterdir())


def _one(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    return lines[0]


# -- the training state a resume restores ---------------------------------------------------------------------------


def _sampler_with_order(payload):
    sampler = payload["sampler"]
    assert isinstance(sampler, dict)
    return sampler


@pytest.mark.parametrize(
    "key, change",
    [
        ("step", lambda p: p.update(step="abc")),
        ("step", lambda p: p.update(step=float("nan"))),
        ("step", lambda p: p.update(step=-1)),
        ("step", lambda p: p.update(step=True)),
        ("wall", lambda p: p.update(wall="soon")),
        ("best_step", lambda p: p.update(best_step=p["step"] + 1)),
        ("best_val", lambda p: p.update(best_val=float("inf"))),
        ("rng.torch", lambda p: p["rng"].update(torch=p["rng"]["torch"][:10])),
        ("sampler.generator", lambda p: _sampler_with_order(p).update(generator=torch.zeros(3, dtype=torch.uint8))),
        ("sampler.position", lambda p: _sampler_with_order(p).update(position=-1)),
        ("sampler.position", lambda p: _sampler_with_order(p).update(position=10**18)),
        ("sampler.order", lambda p: _sampler_with_order(p).update(order=torch.tensor([0, 10**12]))),
        ("sampler.order", lambda p: _sampler_with_order(p).update(order=torch.zeros(2, 2, dtype=torch.long))),
    ],
)
def test_a_last_pt_with_a_bad_training_state_is_one_line_naming_it_and_the_key(finished, tmp_path, key, change):
    from odeformer.app.run.resume import check_resumable

    out = _copy(finished, tmp_path / "run")
    payload = load_checkpoint(out / "last.pt")
    if key.startswith("sampler.") and not (isinstance(payload["sampler"], dict) and "position" in payload["sampler"]):
        payload["sampler"] = {**(payload["sampler"] or {}), "order": torch.randperm(8), "position": 0}
        payload["sampler"].setdefault("generator", torch.Generator().get_state())
    check_resumable(out / "last.pt", payload)  # the run's own state passes
    change(payload)
    with pytest.raises(CheckpointError, match=rf"{out / 'last.pt'} cannot be resumed: its {key} must be"):
        check_resumable(out / "last.pt", payload)


def test_a_resume_from_a_negative_step_is_one_line(finished, tmp_path):
    out = _copy(finished, tmp_path / "run")
    payload = load_checkpoint(out / "last.pt")
    payload["step"] = -5
    save_checkpoint(out / "last.pt", payload)
    own = [o for o in payload[RUN_RECORD]["overrides"] if not o.startswith("train.out_dir=")]
    before = _tree(out)
    done = cli_in_process(*own, f"train.out_dir={hydra_quote(str(out))}", "train.resume=true", "train.max_steps=6")
    assert "its step must be an integer of at least 0, not -5" in _line(done, 2)
    assert _tree(out) == before


def test_an_optimiser_state_of_another_shape_is_one_line_naming_the_key(finished, tmp_path):
    """Adam moments that do not fit the model's parameters are refused before anything is restored, naming last.pt
    and the entry, rather than trained on (or reported later as a divergence)."""
    out = _copy(finished, tmp_path / "run")
    payload = load_checkpoint(out / "last.pt")
    moments = payload["optimizer"]["state"][0]
    moments["exp_avg"] = torch.zeros(*moments["exp_avg"].shape, 2)
    save_checkpoint(out / "last.pt", payload)
    own = [o for o in payload[RUN_RECORD]["overrides"] if not o.startswith("train.out_dir=")]
    before = _tree(out)
    done = cli_in_process(*own, f"train.out_dir={hydra_quote(str(out))}", "train.resume=true", "train.max_steps=12")
    line = _line(done, 2)
    assert "last.pt" in line and "optimizer.state[0].exp_avg has shape" in line
    assert _tree(out) == before


# -- the config a resume compares with ------------------------------------------------------------------------------

_CONFIG = {"solver": {"name": "mix", "options": {"theta0": 0.5}}, "model": {"depth": 3}, "train": {"max_steps": 5}}
_TIED = {**_CONFIG, "model": {"depth": 3, "tie_weights": True}}


@pytest.mark.parametrize(
    "stored, key",
    [
        ({**_CONFIG, "solver": "x"}, "config.solver"),
        ({**_CONFIG, "solver": ["mix"]}, "config.solver"),
        ({**_CONFIG, "model": {"depth": {"of": 3}}}, "config.model.depth"),
        ({**_CONFIG, "solver": {"name": "mix", "options": "theta0=0.5"}}, "config.solver.options"),
        (["solver", "model"], "config"),
        ("solver=mix", "config"),
    ],
    ids=["string-for-mapping", "list-for-mapping", "mapping-for-value", "string-options", "list-config", "str-config"],
)
def test_a_stored_config_of_another_shape_is_one_line_naming_last_pt_and_the_key(tmp_path, stored, key):
    from odeformer.app.run.resume import check_resume_config

    payload = {RUN_RECORD: {"config": stored, "overrides": ["solver=mix", "model.depth=3"]}}
    with pytest.raises(CheckpointError) as error:
        check_resume_config(tmp_path, payload, _CONFIG)
    message = str(error.value)
    assert message.startswith(f"{tmp_path / 'last.pt'} cannot be resumed: its {key} must be ")
    assert "\n" not in message


@pytest.mark.parametrize(
    "stored, now, shown",
    [
        (_TIED, _CONFIG, "model.tie_weights (True in the run, absent now)"),
        (_CONFIG, _TIED, "model.tie_weights (absent in the run, True now)"),
        ({k: v for k, v in _CONFIG.items() if k != "model"}, _CONFIG, "model.depth (absent in the run, 3 now)"),
    ],
    ids=["only-stored", "only-now", "a-whole-group-only-now"],
)
def test_a_setting_only_one_side_has_is_a_difference(tmp_path, stored, now, shown):
    from odeformer.app.run.resume import check_resume_config

    payload = {RUN_RECORD: {"config": stored}}
    with pytest.raises(RunDirectoryError) as error:
        check_resume_config(tmp_path, payload, now)
    assert f"this command changes {shown}; only " in str(error.value)


def test_a_setting_that_may_change_is_not_a_difference_when_one_side_lacks_it(tmp_path):
    from odeformer.app.run.resume import check_resume_config

    payload = {RUN_RECORD: {"config": _CONFIG}}
    train = {**_CONFIG["train"], "threads": 1, "progress": False}
    assert check_resume_config(tmp_path, payload, {**_CONFIG, "train": train}) == []


def test_a_resume_from_a_config_of_another_shape_is_one_line_and_writes_nothing(finished, tmp_path):
    out = _copy(finished, tmp_path / "run")
    payload = load_checkpoint(out / "last.pt")
    payload[RUN_RECORD]["config"]["solver"] = "x"
    save_checkpoint(out / "last.pt", payload)
    own = [o for o in payload[RUN_RECORD]["overrides"] if not o.startswith("train.out_dir=")]
    before = _tree(out)
    done = cli_in_process(*own, f"train.out_dir={hydra_quote(str(out))}", "train.resume=true", "train.max_steps=6")
    line = _line(done, 2)
    assert f"{out / 'last.pt'} cannot be resumed: its config.solver must be a mapping, not a str" in line
    assert _tree(out) == before
