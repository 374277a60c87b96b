"""The tableau engine's RK4 beside the hand-written RK4 it replaced, side by side in one process.

``python -m benchmarks.tableau [--rounds N]`` times, alternating the two in every round (this machine is shared and
noisy: only the ratio of medians is read), a whole-block RK4 ViT layer stack's forward and backward on digits-sized
input, and the bare step on a cheap field (where the engine's bookkeeping would show). Prints a table and writes
``benchmarks/results/tableau.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import ClassVar

import torch

import odeformer
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


def _time(fn, repeats: int) -> float:
    fn()  # warm
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats


def _model_case(stepper: type[AbstractStepper]):
    torch.manual_seed(0)
    model = odeformer.ViT(depth=6, dim=64, heads=4, solver=stepper)
    images = torch.randn(64, 1, 8, 8)

    def run():
        model.zero_grad(set_to_none=True)
        model(images).square().mean().backward()

    return run


def _step_case(stepper: type[AbstractStepper]):
    s = stepper()
    x = torch.randn(64, 64)
    field = lambda t, x: torch.tanh(x)  # noqa: E731 - a cheap field: the step's own overhead shows

    def run():
        y = x
        for _ in range(20):
            y, _ = s.step(field, 0.0, y, 0.05, None)

    return run


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--out", default=str(Path(__file__).with_name("results") / "tableau.json"))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    results = {}
    for case, make, repeats in (
        ("ViT depth 6, whole-block RK4, fwd+bwd", _model_case, 3),
        ("bare step, tanh field", _step_case, 50),
    ):
        runs = {"hand-written": make(HandWrittenRK4), "engine": make(RK4)}
        times: dict[str, list[float]] = {name: [] for name in runs}
        for r in range(args.rounds):
            order = list(runs) if r % 2 == 0 else list(reversed(runs))  # alternate which goes first
            for name in order:
                times[name].append(_time(runs[name], repeats))
        medians = {name: statistics.median(values) for name, values in times.items()}
        results[case] = {
            **{f"{k}_ms": 1e3 * v for k, v in medians.items()},
            "engine/hand-written": medians["engine"] / medians["hand-written"],
        }
    print(f"{'case':40} {'hand-written ms':>16} {'engine ms':>10} {'ratio':>7}")
    for case, row in results.items():
        print(f"{case:40} {row['hand-written_ms']:16.3f} {row['engine_ms']:10.3f} {row['engine/hand-written']:7.3f}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
