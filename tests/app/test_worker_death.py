"""A sweep's workers die with their parent: ``kill -9`` of ``odeformer-compare --workers 2`` (or of any command running
the sweep engine) leaves no worker training on; each is told to stop, saves what it has and exits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

GUARD = 300
"""Seconds after which the test gives up waiting: a guard against a hang, never a speed limit."""

PARENT = textwrap.dedent(
    """
    import os, sys, time
    from odeformer.app.run import sweep, trainer

    @sweep._job
    def job(path):
        open(path, "w").write(str(os.getpid()))
        while trainer.PENDING_STOP is None:  # what training does: run until asked to stop
            time.sleep(0.05)
        open(path + ".stopped", "w").write(str(trainer.PENDING_STOP))  # the checkpoint a stopped run saves
        return {"status": "interrupted", "signal": trainer.PENDING_STOP}

    if __name__ == "__main__":
        sweep._in_pool(job, [os.path.join(sys.argv[1], name) for name in ("a", "b")], 2)
    """
)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")  # a zombie has ended (its reaper may be slow to collect it)


def _wait(condition) -> bool:
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > GUARD:
            return False
        time.sleep(0.1)
    return True


def test_kill_9_of_the_parent_stops_its_workers(tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    parent = subprocess.Popen([sys.executable, str(script), str(tmp_path)], cwd=tmp_path)
    pid_files = [tmp_path / "a", tmp_path / "b"]
    try:
        assert _wait(lambda: all(p.exists() and p.read_text() for p in pid_files)), "the workers never started"
        workers = [int(p.read_text()) for p in pid_files]
        assert all(_alive(pid) for pid in workers)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        assert _wait(lambda: not any(_alive(pid) for pid in workers)), "a worker outlived its parent"
        assert all(Path(f"{p}.stopped").read_text() == str(int(signal.SIGTERM)) for p in pid_files)  # each saved
    finally:
        parent.kill()
        for p in pid_files:
            if p.exists() and p.read_text():
                try:
                    os.kill(int(p.read_text()), signal.SIGKILL)
                except ProcessLookupError:
                    pass
