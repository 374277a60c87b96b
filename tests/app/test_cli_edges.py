"""What a newcomer and a careful user hit at the edges of the commands: interrupts that a script can tell from a
finished run and that stop a whole sweep, the nearest valid name for a typo, a run folder that is not there, the
thread count on a shared machine, one config snapshot per torchrun invocation, the sweep script without its data."""

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers import HANG, cli_in_process
from odeformer.app.commands import diagnose, reproduce
from odeformer.app.commands.train import compose_config
from odeformer.app.run.sweep import Interrupted, Job, Sweep

DEBUG = ["train=debug", "data=synthetic", "model.depth=2", "model.dim=16", "model.heads=2", "train.eval_batches=1"]


def _line(done, code):
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == code, done.stderr + done.stdout
    assert len(lines) == 1, done.stderr
    return lines[0]


def _signal_at(monkeypatch, step, signum):
    """Deliver ``signum`` to this process during training step ``step`` (as Ctrl-C or ``kill`` would)."""
    import odeformer.app.run.trainer as trainer

    original = trainer.Trainer.fit

    def fit(self):
        loss = self.objective.loss

        def signalled(network, batch):
            if self.step + 1 == step:
                os.kill(os.getpid(), signum)
            return loss(network, batch)

        self.objective.loss = signalled
        return original(self)

    monkeypatch.setattr(trainer.Trainer, "fit", fit)


@pytest.mark.parametrize(
    "signum, code",
    [(signal.SIGINT, 130), pytest.param(signal.SIGTERM, 143, marks=pytest.mark.slow)],  # the slow CLI test: SIGTERM
)
def test_an_interrupted_run_saves_then_exits_128_plus_the_signal(tmp_path, monkeypatch, signum, code):
    out = tmp_path / "run"
    _signal_at(monkeypatch, 3, signum)
    threads = torch.get_num_threads()
    try:
        done = cli_in_process(*DEBUG, "train.threads=1", f"train.out_dir={out}")
        assert torch.get_num_threads() == 1  # train.threads: one place to set it on a shared machine
    finally:
        torch.set_num_threads(threads)
    assert done.returncode == code, done.stderr
    assert f"stopped by signal {int(signum)} at step 3; checkpoint saved, resume with: odeformer-train" in done.stdout
    assert (out / "last.pt").exists()


@pytest.mark.slow  # a sweep's first job trained to its interrupt (about 8 s)
def test_one_interrupt_stops_the_whole_sweep(tmp_path, monkeypatch):
    _signal_at(monkeypatch, 2, signal.SIGINT)
    done = cli_in_process("-m", *DEBUG, "model.depth=1,2,3", f"hydra.sweep.dir={tmp_path}")
    assert done.returncode == 130, done.stderr
    ran = sorted(p.name for p in tmp_path.iterdir() if p.is_dir())
    assert len(ran) == 1 and (tmp_path / ran[0] / "last.pt").exists()  # the next jobs never started


@pytest.mark.parametrize("threads", ["0", "-1", "100000"])
def test_threads_must_be_a_count_within_the_machines_cores(tmp_path, threads):
    """100,000 threads would starve the machine before failing: a count beyond its cores is refused up front."""
    line = _line(cli_in_process(*DEBUG, f"train.threads={threads}", f"train.out_dir={tmp_path / 'run'}"), 2)
    assert "train.threads" in line and threads in line and "this machine's" in line and "cores" in line
    assert not (tmp_path / "run" / "last.pt").exists()


@pytest.mark.parametrize(
    "override, hint",
    [
        ("solver=ful_wave", "did you mean solver=full_wave?"),
        ("model=vti", "did you mean model=vit?"),
        ("dt=-1", "did you mean model.dt?"),  # a group's key without its group: not "data"
        ("lr=0.1", "did you mean train.lr?"),
        ("model.dpth=3", "did you mean model.depth?"),
    ],
)
def test_a_typo_gets_the_nearest_valid_name(tmp_path, override, hint):
    line = _line(cli_in_process(*DEBUG, override, f"train.out_dir={tmp_path / 'run'}"), 2)
    assert hint in line, line


def test_diagnose_on_a_folder_that_does_not_exist_says_so(tmp_path, capsys):
    missing = tmp_path / "no_such_run"
    assert diagnose.main([str(missing)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"odeformer-diagnose: error: {missing} does not exist or is not a folder; give a run directory (one holding "
        "best.pt)."
    )
    assert not missing.exists()


def test_only_rank_0_writes_the_config_snapshot(tmp_path, monkeypatch):
    """Under torchrun every rank runs the command: the ranks after the first write no ``.hydra`` snapshot."""
    out = tmp_path / "run"
    monkeypatch.setenv("RANK", "1")
    done = cli_in_process(*DEBUG, "train.max_steps=2", f"train.out_dir={out}")
    assert done.returncode == 0, done.stderr
    assert not (out / ".hydra").exists()


def test_reproduce_without_its_data_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ODEFORMER_DATA", str(tmp_path / "empty"))
    (tmp_path / "empty").mkdir()
    code = reproduce.main(["--sections", "difformer_depth", "--out", str(tmp_path / "out"), "--workers", "1"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(err) == 1 and err[0].startswith("odeformer-reproduce: error: ")
    assert "planetoid" in err[0] and str(Path(tmp_path / "empty")) in err[0]


def _jobs(n, steps):
    overrides = [*DEBUG, f"train.max_steps={steps}", "train.eval_every=1000", "train.log_every=1"]
    return [Job(f"seed={s}", "diffusion", "", s, [*overrides, f"train.seed={s}"]) for s in range(n)]


def test_an_interrupt_stops_the_reproduction_sweep_after_the_running_job_saves(tmp_path, monkeypatch):
    """One worker (in process): the job that was signalled saves its checkpoint, the next jobs do not start."""
    _signal_at(monkeypatch, 3, signal.SIGINT)
    threads = torch.get_num_threads()
    try:
        with pytest.raises(Interrupted) as info:
            Sweep(compose_config, workers=1).run(_jobs(3, 50), tmp_path)
    finally:
        torch.set_num_threads(threads)
    assert info.value.signum == signal.SIGINT and info.value.saved
    assert (tmp_path / "seed=0" / "last.pt").exists()
    assert not (tmp_path / "seed=1" / "metrics.jsonl").exists() and not (tmp_path / "seed=2" / "last.pt").exists()


def test_reproduce_reports_an_interrupt_in_one_line_and_exits_130(monkeypatch, capsys):
    def interrupted(argv):
        raise Interrupted(signal.SIGINT)

    monkeypatch.setattr(reproduce, "_main", interrupted)
    assert reproduce.main([]) == 130
    err = capsys.readouterr().err.strip()
    assert err == (
        "odeformer-reproduce: interrupted by signal 2; the running runs saved their checkpoints; the same command "
        "resumes them."
    )


@pytest.mark.slow  # a sweep in two worker processes, signalled as a terminal's Ctrl-C signals it (about 30 s)
@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_one_signal_to_the_process_group_stops_a_reproduction_sweep_and_leaves_nothing_running(tmp_path, signum, code):
    import subprocess
    import sys
    import time

    runs = tmp_path / "runs"
    # main's reporting, around _run's sweep of four long jobs in two workers
    script = (
        "import pathlib, sys\n"
        "import odeformer.app.commands.reproduce as r\n"
        "from odeformer.app.commands.train import compose_config\n"
        "from odeformer.app.run.sweep import Job, Sweep\n"
        f"jobs = {[tuple(job) for job in _jobs(4, 100000)]!r}\n"
        f"runs = pathlib.Path({str(runs)!r})\n"
        "r._main = lambda argv: Sweep(compose_config, 2).run([Job(*j) for j in jobs], runs) and 0\n"
        "sys.exit(r.main([]))\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.time() + 240
    first = [runs / "seed=0" / "metrics.jsonl", runs / "seed=1" / "metrics.jsonl"]
    while not all(p.exists() for p in first) and time.time() < deadline:
        time.sleep(0.1)
    os.killpg(process.pid, signum)
    try:
        _, stderr = process.communicate(timeout=HANG)
        time.sleep(2)  # the workers are gone with the parent: no process of its group is left
        try:
            os.killpg(process.pid, 0)
            left = True
        except ProcessLookupError:
            left = False
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # whatever happened, nothing of it is left running
    assert not left
    assert process.returncode == code, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines == [
        f"odeformer-reproduce: interrupted by signal {int(signum)}; the running runs saved their checkpoints; the "
        "same command resumes them."
    ], stderr
    assert all((runs / f"seed={s}" / "last.pt").exists() for s in (0, 1))
    assert not any((runs / f"seed={s}" / "metrics.jsonl").exists() for s in (2, 3))


def test_ctrl_c_in_diagnose_is_one_line(tmp_path, monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(diagnose, "load_run", interrupted)
    assert diagnose.main([str(tmp_path)]) == 130
    assert capsys.readouterr().err.strip() == "odeformer-diagnose: interrupted (Ctrl-C)."


def test_ctrl_c_while_a_command_is_still_importing_is_one_line():
    """An interrupt that lands while odeformer is still loading torch (its public names load on first use): an
    ``odeformer-*`` command says so in one line and exits 130; anywhere else the KeyboardInterrupt goes on as usual.
    The Ctrl-C is delivered where torch starts to load (an import hook raises it), not after a delay: on a warm
    machine the whole import can take less than any delay one would choose."""
    code = (
        "import sys\n"
        "sys.argv[0] = sys.argv[1]\n"
        "class CtrlC:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'torch':\n"
        "            raise KeyboardInterrupt\n"
        "sys.meta_path.insert(0, CtrlC())\n"
        "from odeformer import ViT  # the first public name loads torch\n"
        "print('not interrupted')\n"
    )
    command = subprocess.run([sys.executable, "-c", code, "odeformer-train"], capture_output=True, text=True)
    assert command.returncode == 130, command.stderr[-2000:]
    assert command.stderr.strip() == "interrupted while starting up; nothing was written"
    script = subprocess.run([sys.executable, "-c", code, "my_script.py"], capture_output=True, text=True)
    assert script.returncode == -signal.SIGINT and "KeyboardInterrupt" in script.stderr  # as Python ends on one
