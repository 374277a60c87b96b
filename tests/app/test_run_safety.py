"""A run directory's safety: one writer at a time, sizes bounded before anything is allocated, the way back after a
divergence (a lower learning rate, recorded), a full disk, checkpoints of other versions, and Ctrl-C at start-up.
Each case is one line on stderr and an exit code, and leaves what was already written as it was."""

import errno
import json
import math
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import odeformer.app.commands.train as entry
from helpers import cli_in_process
from odeformer.app.run.builder import build, estimate_memory
from odeformer.app.run.checkpoints import CheckpointError, CheckpointWriteError, load_checkpoint, save_checkpoint
from odeformer.app.run.identity import RUN_RECORD
from odeformer.app.run.locks import RunDirectoryBusy, lock_run_directory
from odeformer.app.run.resume import hydra_quote

DEBUG = ["train=debug", "data=synthetic", "model.depth=2", "model.dim=16", "model.heads=2", "train.eval_batches=1"]


def _line(done, code):
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == code, done.stderr + done.stdout
    assert len(lines) == 1, done.stderr
    return lines[0]


def _tree(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``folder`` with its size and modification time: what "touches nothing" compares."""
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*")) if p.is_file()}


def _train(out: Path, *overrides: str):
    return cli_in_process(*DEBUG, f"train.out_dir={hydra_quote(str(out))}", *overrides)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished 10-step run (last.pt at step 10), copied by the tests that change it."""
    out = tmp_path_factory.mktemp("finished") / "run"
    done = _train(out, "train.max_steps=10", "train.eval_every=10")
    assert done.returncode == 0, done.stderr
    return out


def _copy(finished: Path, to: Path) -> Path:
    import shutil

    shutil.copytree(finished, to, symlinks=True)
    return to


# -- one writer per run directory --------------------------------------------------------------------------------


def test_a_second_run_on_a_directory_in_use_is_one_line_naming_the_pid_and_touches_nothing(finished, tmp_path):
    out = _copy(finished, tmp_path / "run")
    before = _tree(out)
    with lock_run_directory(out):  # this process is the run writing it
        time.sleep(0.01)
        done = _train(out, "train.resume=true", "train.max_steps=20")
        line = _line(done, 2)
        assert f"process {os.getpid()}" in line and str(out) in line and "in use by another run" in line
        assert _tree(out) == {**before, str(out / ".lock"): _tree(out)[str(out / ".lock")]}
    assert _tree(out) == before  # released on exit, its file removed: the next command may take it


def test_a_lock_held_by_another_process_names_it_and_a_killed_holders_lock_is_stale(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time\n"
            f"fd = os.open({str(out / '.lock')!r}, os.O_RDWR | os.O_CREAT)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\n"
            "os.write(fd, b'%d\\n' % os.getpid())\n"
            "print('held', flush=True)\n"
            "time.sleep(60)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunDirectoryBusy, match=f"process {holder.pid} holds"):
            with lock_run_directory(out):
                pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert (out / ".lock").read_text().split() == [str(holder.pid)]  # left behind by the killed run: stale
    with lock_run_directory(out):
        assert (out / ".lock").read_text().split() == [str(os.getpid())]
    assert not (out / ".lock").exists()


# -- sizes before anything is allocated ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["model.dim=-64"], "model.dim must be a positive int, got -64"),
        (["model.depth=0"], "model.depth must be a positive int, got 0"),
        (["model.heads=-2"], "model.heads must be a positive int, got -2"),
        (["model.mlp_hidden=-5"], "model.mlp_hidden must be a positive int, got -5"),
        (["model.mlp_ratio=-1.0"], "model.mlp_ratio=-1.0 gives an FFN of"),
        (["model.dim=100000", "model.heads=4"], "more than this machine's"),
        (["model.mlp_hidden=10000000000"], "more than this machine's"),
        (["model.depth=90000"], "more than this machine's"),
        (["model.depth=100000000"], "model.depth=100000000 is more than the 100000 allowed"),
        (["data.options.task=text", "model=causal_lm", "data.batch_size=10000000000"], "more than this machine's"),
        (["model.depth=1e8"], "could not be converted to Integer"),
        (["data.batch_size=1e10"], "could not be converted to Integer"),
    ],
)
def test_sizes_are_checked_and_memory_estimated_before_the_model_is_built(tmp_path, overrides, message, monkeypatch):
    """Refused from the config, not after allocating: no layer of the model is built, and the parameters made on the
    way (a scheme's own, checked on a width-2 layer) hold a few elements, not the model's."""
    import odeformer.layer

    made: list[int] = []
    original = torch.nn.Parameter.__new__

    def counted(cls, data=None, requires_grad=True):
        parameter = original(cls, data, requires_grad)
        made.append(parameter.numel())
        return parameter

    def refused(*args, **kwargs):
        raise AssertionError("a layer of the model was built before the size was refused")

    monkeypatch.setattr(torch.nn.Parameter, "__new__", counted)
    monkeypatch.setattr(odeformer.layer.Layer, "__init__", refused)
    out = tmp_path / "run"
    done = _train(out, *overrides)
    line = _line(done, 2)
    assert message in line, line
    if "machine" in message:
        assert "this run needs about" in line and "parameters" in line and "activations" in line
    assert sum(made) < 1000, made
    assert not out.exists() or not _tree(out)


@pytest.mark.parametrize(
    "overrides",
    [
        ["model=vit", "data=synthetic"],
        ["model=causal_lm", "data=synthetic", "data.options.task=text"],
        ["model=masked_lm", "data=synthetic", "data.options.task=sequence"],
        ["model=node_classifier", "data=synthetic", "data.options.task=graph"],
        ["model=vit", "data=synthetic", "model.tie_weights=true", "model.depth=5"],
    ],
)
def test_the_parameter_estimate_is_the_models_count_within_a_few_percent(overrides):
    """The memory check counts the parameters from the config alone; it must be close to the real count (the bound
    it refuses by is a lower estimate: it may not overshoot)."""
    from omegaconf import OmegaConf

    config = OmegaConf.to_container(entry.compose(overrides), resolve=True)
    data, model, _ = build(config)
    real = sum(p.numel() for p in model.parameters())
    estimate = estimate_memory(config, data.meta)["parameter_count"]
    assert 0.85 * real <= estimate <= 1.02 * real, (estimate, real)


# -- the way back after a divergence ------------------------------------------------------------------------------


def _diverge_from(monkeypatch, step):
    """Make the loss NaN from training step ``step`` on, as a blow-up of the dynamics does."""
    import odeformer.app.run.trainer as trainer

    original = trainer.Trainer.fit

    def fit(self):
        loss = self.objective.loss

        def poisoned(network, batch):
            value = loss(network, batch)
            return value * float("nan") if self.step + 1 >= step else value

        self.objective.loss = poisoned
        return original(self)

    monkeypatch.setattr(trainer.Trainer, "fit", fit)


def test_after_a_divergence_the_suggested_resume_with_a_lower_lr_works_and_is_recorded(finished, tmp_path, monkeypatch):
    out = _copy(finished, tmp_path / "a run dir é")  # a space and a non-ASCII character: the command quotes it
    with monkeypatch.context() as patch:
        _diverge_from(patch, 13)
        done = _train(out, "train.resume=true", "train.max_steps=20", "train.eval_every=10")
    line = _line(done, 1)
    assert "loss is nan at step 13" in line and f"the last good checkpoint is {out / 'last.pt'} (step 10)" in line
    history = [json.loads(row) for row in (out / "history.jsonl").read_text().splitlines()]
    assert history[-1]["event"] == "diverged" and history[-1]["step"] == 13 and history[-1]["checkpoint_step"] == 10
    command = shlex.split(line.split("resume from it with a lower learning rate: ", 1)[1].split(" (or start")[0])
    assert command[0] == "odeformer-train" and "train.lr=0.0003" in command and "train.resume=true" in command

    # what the user is told to type, as the shell splits it
    done = cli_in_process(*command[1:])
    assert done.returncode == 0, done.stderr
    assert "resuming after the divergence from step 10 with train.lr 0.003 -> 0.0003" in done.stdout
    history = [json.loads(row) for row in (out / "history.jsonl").read_text().splitlines()]
    assert history[-1]["event"] == "resumed" and history[-1]["changes"] == {"train.lr": [0.003, 0.0003]}
    rows = [json.loads(row) for row in (out / "metrics.jsonl").read_text().splitlines()]
    lr = {row["step"]: row["lr"] for row in rows if "lr" in row}
    # the schedule goes on from step 10 (stretched to the 20 steps this command asks for), scaled to the new peak
    factor = 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (10 - 2) / (20 - 2)))  # train=debug: 2 warm-up steps
    assert lr[11] == pytest.approx(0.0003 * factor, rel=1e-9)
    assert load_checkpoint(out / "last.pt")[RUN_RECORD]["config"]["train"]["lr"] == 0.0003


@pytest.mark.slow  # a 20-step training run
def test_a_resume_after_a_divergence_may_not_raise_the_lr(finished, tmp_path, monkeypatch):
    out = _copy(finished, tmp_path / "run")
    with monkeypatch.context() as patch:
        _diverge_from(patch, 11)
        assert _train(out, "train.resume=true", "train.max_steps=20").returncode == 1
    line = _line(_train(out, "train.resume=true", "train.max_steps=20", "train.lr=0.01"), 2)
    assert "may lower train.lr (the run's is 0.003), not raise it to 0.01" in line
    line = _line(_train(out, "train.resume=true", "train.max_steps=20", "train.weight_decay=0.1"), 2)
    assert "changes train.weight_decay" in line  # other settings are still the run's own


def test_without_a_divergence_the_lr_is_the_runs_own(finished, tmp_path):
    out = _copy(finished, tmp_path / "run")
    line = _line(_train(out, "train.resume=true", "train.max_steps=20", "train.lr=0.0003"), 2)
    assert "changes train.lr (0.003 in the run, 0.0003 now)" in line


def test_a_checkpoint_with_non_finite_optimiser_state_is_not_offered_as_good(finished, tmp_path):
    out = _copy(finished, tmp_path / "run")
    payload = load_checkpoint(out / "last.pt")
    state = next(iter(payload["optimizer"]["state"].values()))
    state["exp_avg_sq"].view(-1)[0] = float("inf")
    save_checkpoint(out / "last.pt", payload)
    line = _line(_train(out, "train.resume=true", "train.max_steps=20"), 2)
    assert f"{out / 'last.pt'} holds non-finite values in its optimizer state" in line


@pytest.mark.slow  # a 20-step training run
def test_a_non_finite_state_is_never_saved_as_last_pt(tmp_path, monkeypatch):
    """The optimiser's moments overflow while the loss is still finite: the save that would write them stops the run
    as diverged and keeps the last good last.pt."""
    import odeformer.app.run.trainer as trainer

    out = tmp_path / "run"
    original = trainer.Trainer._save_last

    def save(self):
        if self.step == 20:
            for state in self.optimizer.state.values():
                state["exp_avg"].fill_(float("inf"))
        return original(self)

    monkeypatch.setattr(trainer.Trainer, "_save_last", save)
    done = _train(out, "train.eval_every=10")
    line = _line(done, 1)
    assert "the optimizer state holds non-finite values at step 20" in line
    assert "the last good checkpoint is" in line and "(step 10)" in line
    assert load_checkpoint(out / "last.pt")["step"] == 10


def test_the_resume_command_survives_spaces_quotes_and_non_ascii(tmp_path):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    for name in ["plain/dir-1", "a b", "é ü", 'say "hi"', "it's", "tail\\", "cost $5", "x${y}"]:
        quoted = f"train.out_dir={hydra_quote(name)}"
        (override,) = parser.parse_overrides(shlex.split(shlex.quote(quoted)))
        assert override.value() == name or override.value().replace("\\${", "${") == name, (name, override.value())


# -- a full disk, other versions' checkpoints, empty reasons, Ctrl-C ----------------------------------------------


@pytest.mark.parametrize(
    "error",
    [
        OSError(errno.ENOSPC, "No space left on device"),
        RuntimeError("[enforce fail at inline_container.cc:626] . unexpected pos 4416 vs 4310"),
    ],
)
def test_a_full_disk_while_saving_is_one_line_and_the_previous_checkpoint_is_intact(tmp_path, monkeypatch, error):
    import odeformer.app.run.checkpoints as checkpoints

    path = tmp_path / "last.pt"
    save_checkpoint(path, {"format": checkpoints.FORMAT, "step": 1})
    before = path.read_bytes()

    def full(payload, f):
        f.write(b"PK\x03\x04 half a checkpoint")
        raise error

    monkeypatch.setattr(checkpoints.torch, "save", full)
    with pytest.raises(CheckpointWriteError) as info:
        save_checkpoint(path, {"format": checkpoints.FORMAT, "step": 2})
    assert str(info.value) == (
        f"no space left on device while writing {path}; the previous checkpoint is intact (free some space, then "
        "resume)."
    )
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]


@pytest.mark.slow  # a resumed training run (the message itself is checked above, without training)
def test_a_full_disk_during_training_stops_with_one_line(finished, tmp_path, monkeypatch):
    import odeformer.app.run.checkpoints as checkpoints

    out = _copy(finished, tmp_path / "run")
    before = (out / "last.pt").read_bytes()

    def full(payload, f):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoints.torch, "save", full)
    line = _line(_train(out, "train.resume=true", "train.max_steps=20"), 1)
    assert line.startswith("odeformer-train: no space left on device while writing")
    assert "the previous checkpoint is intact" in line
    assert (out / "last.pt").read_bytes() == before and not list(out.glob("*.tmp"))


def test_a_last_pt_without_a_stored_config_is_resumed_only_into_the_solver_it_names(finished, tmp_path):
    out = _copy(finished, tmp_path / "run")
    payload = load_checkpoint(out / "last.pt")
    solver = payload[RUN_RECORD]["solver"]
    other = "full_wave" if solver != "full_wave" else "diffusion"
    payload[RUN_RECORD] = {k: v for k, v in payload[RUN_RECORD].items() if k not in ("config", "overrides")}
    save_checkpoint(out / "last.pt", payload)
    before = _tree(out)
    line = _line(_train(out, "train.resume=true", "train.max_steps=20", f"solver={other}"), 2)
    assert "stores no config" in line and f"solver ({solver} in the run, {other} now)" in line
    assert _tree(out) == before
    payload[RUN_RECORD] = {}
    save_checkpoint(out / "last.pt", payload)
    line = _line(_train(out, "train.resume=true", "train.max_steps=20"), 2)
    assert "stores no config and does not name its solver, model, data, depth" in line


def test_a_run_saved_in_the_earlier_checkpoint_layout_loads_is_diagnosed_and_resumes(finished, tmp_path):
    """Checkpoints of the earlier layout (format ``odeformer-checkpoint-1``, the run record under ``info``) are read
    as they are: the run rebuilds with its best weights, is diagnosed, and resumes (writing today's layout)."""
    import torch

    from odeformer.app.commands.diagnose import main as diagnose
    from odeformer.app.run.builder import load_run

    out = _copy(finished, tmp_path / "run")
    for name in ("last.pt", "best.pt"):
        payload = load_checkpoint(out / name)
        payload["format"], payload["info"] = "odeformer-checkpoint-1", payload.pop(RUN_RECORD)
        save_checkpoint(out / name, payload)
    best = load_checkpoint(out / "best.pt")
    _, model, record = load_run(out)
    assert record["solver"] == best["info"]["solver"] and record["depth"] == best["info"]["depth"]
    assert all(torch.equal(v, best["model"][k]) for k, v in model.state_dict().items())
    assert diagnose([str(out), "--out", str(tmp_path / "diagnostics"), "--batch", "4"]) == 0
    assert (tmp_path / "diagnostics" / "cosine.json").exists()
    done = _train(out, "train.resume=true", "train.max_steps=12")
    assert done.returncode == 0, done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == 12
    last = load_checkpoint(out / "last.pt")
    assert last["format"] == "odeformer-checkpoint-2" and "info" not in last and last[RUN_RECORD]["config"]


def test_an_empty_error_says_what_was_being_read(tmp_path):
    path = tmp_path / "last.pt"
    path.write_bytes(b"")
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    assert "(EOFError while reading its 0 bytes (empty))" in str(info.value)
    assert "EOFError: )" not in str(info.value)


def test_ctrl_c_during_start_up_is_one_line(tmp_path, monkeypatch):
    out = tmp_path / "run"

    def interrupted(config, *args, **kwargs):
        raise KeyboardInterrupt

    import odeformer.app.run.launch as launch

    monkeypatch.setattr(launch, "build", interrupted)
    line = _line(_train(out), 130)
    assert line == "odeformer-train: interrupted (Ctrl-C) before training started; nothing was trained."
    assert not out.exists() or not _tree(out)

    def interrupted_early(argv):
        raise KeyboardInterrupt

    monkeypatch.setattr(entry, "check_command_line", interrupted_early)
    line = _line(_train(out), 130)
    assert line == "odeformer-train: interrupted (Ctrl-C) during start-up; nothing was written."


def test_a_divergence_stays_in_force_until_a_checkpoint_is_written_after_it(tmp_path):
    """A resume after a divergence that is itself stopped before its first save may be resumed again with the lower
    learning rate: the last.pt is still the one from before the divergence."""
    from odeformer.app.run.history import diverged_after, record

    record(tmp_path, {"event": "diverged", "step": 13, "checkpoint_step": 10})
    record(tmp_path, {"event": "resumed", "step": 10, "changes": {"train.lr": [0.003, 0.0003]}})
    assert diverged_after(tmp_path, 10)["step"] == 13
    assert diverged_after(tmp_path, 20) is None  # a checkpoint written after it: the run's config is its own again
    assert diverged_after(tmp_path / "elsewhere", 10) is None


def test_a_run_that_loses_the_race_for_the_lock_is_one_line_and_writes_no_run_files(finished, tmp_path, monkeypatch):
    """Two commands started at once both pass the early check; the one that does not get the lock at the start of
    the run stops there, in one line, having written none of the run's files (its config snapshot, named to the
    second like the other's, is left as it is)."""
    out = _copy(finished, tmp_path / "run")
    before = {k: v for k, v in _tree(out).items() if "/.hydra/" not in k}
    monkeypatch.setattr(entry, "check_not_locked", lambda path: None)  # as if the other took the lock just after
    with lock_run_directory(out):
        line = _line(_train(out, "train.resume=true", "train.max_steps=20"), 2)
    assert f"process {os.getpid()} holds" in line
    assert {k: v for k, v in _tree(out).items() if "/.hydra/" not in k} == before
