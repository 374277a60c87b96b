"""Small shared builders for the tests."""

import contextlib
import inspect
import io
import os
import subprocess
import sys
from unittest import mock

import torch

from solvers import PhaseState


def make_stepper(cls, dim=None, **kwargs):
    """Default stepper; with ``dim``, per-channel learnable parameters where the class takes a ``dim``."""
    if dim is not None and "dim" in inspect.signature(cls).parameters:
        kwargs["dim"] = dim
    return cls(**kwargs)


def start(cls, x, v=None):
    """``y0`` for a stepper class: ``x`` or ``PhaseState(x, v)``."""
    if not cls.second_order:
        return x
    return PhaseState(x, torch.zeros_like(x) if v is None else v)


class TanhField(torch.nn.Module):
    """``f(t, x) = tanh(x W^T + b) + 0.1 t``: a small nonlinear, time-dependent field with parameters."""

    def __init__(self, dim, generator, dtype=torch.float64):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(dim, dim, generator=generator, dtype=dtype) / dim**0.5)
        self.bias = torch.nn.Parameter(torch.randn(dim, generator=generator, dtype=dtype) * 0.1)

    def forward(self, t, x):
        return torch.tanh(x @ self.weight.T + self.bias) + 0.1 * t


def cli(*args, cwd=None, env=None, timeout=300):
    """Run ``python -m odeformer.train`` and return the completed process."""
    return subprocess.run(
        [sys.executable, "-m", "odeformer.train", *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def cli_in_process(*args):
    """``odeformer-train`` called in this process, for command lines that stop before training (bad input): the same
    ``main`` as :func:`cli` without an interpreter's start-up. Returns a ``CompletedProcess`` with its exit code and
    what it printed; the global RNG and Hydra's global state are left as they were."""
    from hydra.core.global_hydra import GlobalHydra

    import odeformer.train as entry

    stdout, stderr, code = io.StringIO(), io.StringIO(), 0
    with (
        torch.random.fork_rng(devices=[]),
        mock.patch.object(sys, "argv", ["odeformer-train", *args]),
        contextlib.redirect_stdout(stdout),
        contextlib.redirect_stderr(stderr),
    ):
        try:
            entry.main()
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
        finally:
            GlobalHydra.instance().clear()
    return subprocess.CompletedProcess(["odeformer-train", *args], code, stdout.getvalue(), stderr.getvalue())
