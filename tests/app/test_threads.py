"""A run's CPU threads: torch's default on an idle machine, fewer when other work keeps the cores busy, and what
``train.threads`` says when it is given."""

import os

import pytest
import torch

from odeformer.app.run import launch


@pytest.fixture
def threads():
    before = torch.get_num_threads()
    torch.set_num_threads(4)  # "torch's default" for these tests
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize(
    ("cores", "load", "chosen"),
    [(4, 0.0, 4), (4, 0.4, 4), (4, 1.0, 3), (4, 2.6, 1), (4, 9.0, 1), (8, 0.0, 4), (2, 1.6, 1)],
)
def test_idle_threads_are_the_cores_less_the_load_within_torchs_default(threads, monkeypatch, cores, load, chosen):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)))
    monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
    assert launch.idle_threads() == chosen


def test_without_a_load_average_the_machine_is_taken_as_idle(threads, monkeypatch):
    def unavailable():
        raise OSError("no load average")

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(os, "getloadavg", unavailable)
    assert launch.idle_threads() == 2


def _config(threads_setting, out_dir):
    from odeformer.app.commands.train import compose_config

    return compose_config(
        [
            "train=debug",
            "train.max_steps=1",
            "model.depth=1",
            f"train.threads={threads_setting}",
            f"train.out_dir={out_dir}",
        ]
    )


def test_a_busy_machine_gets_fewer_threads_and_is_told_so(threads, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setattr(os, "getloadavg", lambda: (3.2, 3.0, 3.0))
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    seen = []
    monkeypatch.setattr(launch, "build", lambda *a, **k: seen.append(torch.get_num_threads()) or _stop())
    with pytest.raises(_Stopped):
        launch.train(_config("null", tmp_path / "a"), tmp_path / "a")
    assert seen == [1] and "computing with 1 of 4 CPU threads" in capsys.readouterr().out
    torch.set_num_threads(4)
    with pytest.raises(_Stopped):  # train.threads given: exactly that, whatever the load
        launch.train(_config(3, tmp_path / "b"), tmp_path / "b")
    torch.set_num_threads(4)
    with pytest.raises(_Stopped):  # a caller that chose the threads itself (a sweep's worker) keeps them
        launch.train(_config("null", tmp_path / "c"), tmp_path / "c", choose_threads=False)
    assert seen == [1, 3, 4]


class _Stopped(Exception):
    pass


def _stop():
    raise _Stopped
