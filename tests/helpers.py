"""Small shared builders for the tests."""

import contextlib
import inspect
import io
import os
import subprocess
import sys
from typing import ClassVar
from unittest import mock

import torch

from solvers import AbstractStepper, PhaseState


class PlainEuler(AbstractStepper):
    """Explicit Euler written out. Fakes in the kit's tests change its declarations, which the registered tableau
    classes refuse when a subclass is made."""

    order: ClassVar[int] = 1
    second_order: ClassVar[bool] = False
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 1

    def step(self, field, t, y, dt, state):
        return y + dt * field(t, y), state


class PlainHeun(PlainEuler):
    """Heun's method written out, for the same reason; ``stages`` gives its two evaluations."""

    order: ClassVar[int] = 2
    evals_per_step: ClassVar[int] = 2

    def stages(self, field, t, y, dt):
        k1 = field(t, y)
        return k1, field(t + dt, y + dt * k1)

    def step(self, field, t, y, dt, state):
        k1, k2 = self.stages(field, t, y, dt)
        return y + 0.5 * dt * (k1 + k2), state


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


HANG = 1800
"""Seconds after which a test's subprocess counts as hung: a guard against a hang, never a speed limit (a loaded
machine is many times slower than an idle one)."""


def cli(*args, cwd=None, env=None, timeout=HANG):
    """Run ``python -m odeformer.app.train`` and return the completed process."""
    return subprocess.run(
        [sys.executable, "-m", "odeformer.app.train", *args],
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

    import odeformer.app.commands.train as entry

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
