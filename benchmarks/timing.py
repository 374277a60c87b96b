"""Timing side by side: every benchmark's medians come from :func:`interleaved` (or :func:`paired_median`).

The configurations of one comparison run in one process, taking turns round by round (the order rotating, so that
clock ramps, a busy neighbour and cache state hit all of them alike); each reports the median of its samples. Only the
ratios of those medians are read: this machine is shared and its absolute times are noise. Where a single sample is
long enough to see the load change (a whole generation), :func:`interleaved_samples` keeps the samples round by round
and :func:`paired_median` takes the median of the ratios within the rounds.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch


def synchronizer(device: str) -> Callable[[], None]:
    """What waits for the device's queued work before a clock is read (nothing on the CPU)."""
    return torch.cuda.synchronize if device == "cuda" else (lambda: None)


def interleaved(
    functions: dict[str, Callable[[], object]],
    rounds: int,
    warmup: int,
    device: str,
    repeats: int = 1,
    settle: int = 0,
    after_round: Callable[[dict[str, float]], None] | None = None,
) -> dict[str, float]:
    """Median seconds per call of each function, timed in turn (rotating the order) ``rounds`` times.

    First ``warmup`` untimed rounds of every function in order. A timed sample is ``repeats`` calls in a row, its time
    divided by ``repeats``; ``settle`` untimed calls go before each sample (to warm caches again after the others ran).
    ``after_round`` receives the medians of the rounds so far after every round (so that a run cut short keeps them).
    """
    report = None
    if after_round is not None:

        def report(times: dict[str, list[float]]) -> None:
            after_round({name: statistics.median(values) for name, values in times.items()})

    samples = interleaved_samples(functions, rounds, warmup, device, repeats, settle, report)
    return {name: statistics.median(values) for name, values in samples.items()}


def interleaved_samples(
    functions: dict[str, Callable[[], object]],
    rounds: int,
    warmup: int,
    device: str,
    repeats: int = 1,
    settle: int = 0,
    after_round: Callable[[dict[str, list[float]]], None] | None = None,
) -> dict[str, list[float]]:
    """The samples :func:`interleaved` takes the medians of: per function, its seconds per call in each round;
    ``after_round`` receives them as they stand after every round."""
    sync = synchronizer(device)
    names = list(functions)
    for _ in range(warmup):
        for name in names:
            for _ in range(repeats):
                functions[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            for _ in range(settle):
                functions[name]()
            sync()
            start = time.perf_counter()
            for _ in range(repeats):
                functions[name]()
            sync()
            times[name].append((time.perf_counter() - start) / repeats)
        if after_round is not None:
            after_round(times)
    return times


def median(values: list[float]) -> float:
    return statistics.median(values)


def paired_median(numerator: list[float], denominator: list[float]) -> float:
    """The median over rounds of ``numerator[r] / denominator[r]``: two configurations' ratio at each moment."""
    return statistics.median(a / b for a, b in zip(numerator, denominator, strict=True))


@contextmanager
def cpu_threads(device: str, threads: int) -> Iterator[None]:
    """On the CPU, torch runs ``threads`` threads meanwhile (0: its default); the previous count is restored."""
    previous = torch.get_num_threads()
    if device == "cpu" and threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
