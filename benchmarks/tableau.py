"""The tableau engine's RK4 beside the hand-written RK4 it replaced, side by side in one process.

``python -m benchmarks.tableau [--rounds N]`` times, alternating the two in every round (this machine is shared and
noisy: only the ratio of medians is read), a whole-block RK4 ViT layer stack's forward and backward on digits-sized
input, and the bare step on a cheap field (where the engine's bookkeeping would show). Prints a table and writes
``benchmarks/results/tableau.json``. ``python -m benchmarks.run`` (``make bench``) reports both ratios against their
goal (the engine's RK4 within 3 % of the hand-written one) through :func:`tableau_times`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import ClassVar

import torch

import odeformer
from benchmarks.timing import cpu_threads, interleaved
from solvers import RK4, AbstractStepper


class HandWrittenRK4(AbstractStepper):
    """The classic RK4 step as it was written before the engine (the reference of the comparison)."""

    order: ClassVar[int] = 4
    second_order: ClassVar[bool] = False
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 4

    def step(self, field, t, y, dt, state):
        x = self._unpack(y)
        half = 0.5 * dt
        k1 = field(t, x)
        k2 = field(t + half, x + half * k1)
        k3 = field(t + half, x + half * k2)
        k4 = field(t + dt, x + dt * k3)
        return x + (dt / 6) * (k1 + 2 * (k2 + k3) + k4), state


def _model_case(stepper: type[AbstractStepper], device: str):
    torch.manual_seed(0)
    model = odeformer.ViT(depth=6, dim=64, heads=4, solver=stepper).to(device)
    images = torch.randn(64, 1, 8, 8, device=device)

    def run():
        model.zero_grad(set_to_none=True)
        model(images).square().mean().backward()

    return run


def _step_case(stepper: type[AbstractStepper], device: str):
    s = stepper()
    x = torch.randn(64, 64, device=device)
    field = lambda t, x: torch.tanh(x)  # noqa: E731 - a cheap field: the step's own overhead shows

    def run():
        y = x
        for _ in range(20):
            y, _ = s.step(field, 0.0, y, 0.05, None)

    return run


CASES = {
    "model": ("ViT depth 6, whole-block RK4, fwd+bwd", _model_case, 3),
    "step": ("bare step, tanh field", _step_case, 50),
}
"""Each case: its label, how it is built for a stepper class, and calls per timed sample."""


def tableau_times(rounds: int, device: str = "cpu", threads: int = 1) -> dict[str, dict[str, float]]:
    """Median seconds per call of each case (:data:`CASES`) under the hand-written RK4 and the engine's, the two
    alternating which goes first in every round, each sample after one untimed call; on the CPU with ``threads``
    threads (0: torch's default). What ``python -m benchmarks.run`` (``make bench``) reports as ``tableau_rk4_*``."""
    with cpu_threads(device, threads):
        medians = {}
        for case, (_, make, repeats) in CASES.items():
            runs = {"hand-written": make(HandWrittenRK4, device), "engine": make(RK4, device)}
            medians[case] = interleaved(runs, rounds, warmup=0, device=device, repeats=repeats, settle=1)
        return medians


def ratios(medians: dict[str, dict[str, float]]) -> dict[str, float]:
    """The reported measures: engine / hand-written time per case."""
    return {f"tableau_rk4_{case}_time": m["engine"] / m["hand-written"] for case, m in medians.items()}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--out", default=str(Path(__file__).with_name("results") / "tableau.json"))
    args = parser.parse_args(argv)
    medians = tableau_times(args.rounds)
    results = {
        CASES[case][0]: {
            **{f"{k}_ms": 1e3 * v for k, v in m.items()},
            "engine/hand-written": m["engine"] / m["hand-written"],
        }
        for case, m in medians.items()
    }
    print(f"{'case':40} {'hand-written ms':>16} {'engine ms':>10} {'ratio':>7}")
    for case, row in results.items():
        print(f"{case:40} {row['hand-written_ms']:16.3f} {row['engine_ms']:10.3f} {row['engine/hand-written']:7.3f}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
