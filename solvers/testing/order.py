"""The order check: the error on grids refined to float64's floor, its slope against the declared order."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import torch

from .._base import AbstractStepper, run_steps
from . import thresholds as th
from ._common import _fresh_step, _instance, _moved, _name, _one_thread, is_block, placed, singular_time
from .problems import Problem, default_problems, started, wide_problem
from .references import _flat, _trajectory_error, reference


def _fit(dts, errors) -> float:
    """Least-squares slope of log error against log dt."""
    x = torch.tensor([math.log(d) for d in dts], dtype=torch.float64)
    y = torch.tensor([math.log(e) for e in errors], dtype=torch.float64)
    x = x - x.mean()
    return float((x * (y - y.mean())).sum() / (x * x).sum())


@dataclass(frozen=True)
class OrderMeasurement:
    """Errors on a ladder of grids (coarse to fine) and the slope fitted on the finest three.

    ``slope`` is ``inf`` when fewer than three grids had an error above the rounding floor (no order can be read);
    ``local`` holds ``log2(e(dt) / e(dt/2))`` for consecutive grids; ``steady`` says whether the last two agree within
    0.1, i.e. whether the fit sits where the error is one power of ``dt``, or (``settling``) whether the last three
    approach a limit geometrically; the slope is then that limit, ``2 s_last - s_before`` (Richardson extrapolation
    of the local slopes, whose deviation halves with ``dt``). ``at_floor``: the ladder ended because the next finer
    grid's error fell below its rounding floor (finer grids cannot be resolved in float64).
    """

    problem: str
    slope: float
    dts: tuple[float, ...]
    errors: tuple[float, ...]
    local: tuple[float, ...] = ()
    steady: bool = True
    settling: bool = False
    at_floor: bool = False

    def __str__(self) -> str:
        pairs = ", ".join(f"{e:.1e}@{d:.1e}" for d, e in zip(self.dts, self.errors))
        local = ", ".join(f"{s:.2f}" for s in self.local)
        where = "as the limit of the settling local slopes" if self.settling else "at the finest grids"
        return f"slope {self.slope:.2f} {where} on {self.problem} (error@dt: {pairs}; local slopes: {local})"


@torch.no_grad()
def measure_order(
    stepper: AbstractStepper | type[AbstractStepper], problem: Problem, uneven: bool = False
) -> OrderMeasurement:
    """Slope of log error against log dt where the error is asymptotic: on the finest grids float64 can resolve.

    Step counts double from 8 until the error falls below the rounding floor ``100 n eps`` (``n`` steps' worst-case
    rounding, with a margin) or, with at least three grids measured, ``dt <= 2**-12`` (at most 4096 steps). The
    least-squares slope over the three finest grids above the floor is reported, with the local slopes of the whole
    ladder; the measurement is ``steady`` if the two local slopes of those three grids agree within 0.1. A problem so
    easy that fewer than three grids lie above the floor, or whose error has not settled before it reaches the floor
    (a high-order scheme), has its horizon doubled, up to four times, so the scheme still shows its order.
    ``uneven``: the steps alternate between ``4/3 dt`` and ``2/3 dt`` (the slope is read against the mean step
    ``dt``), as in a model whose layers have different steps: a scheme that assumes one step size fails there.
    """
    stepper = _instance(stepper)
    with _one_thread():
        return _measure_over_horizons(stepper, problem, uneven)


def _measure_over_horizons(stepper: AbstractStepper, problem: Problem, uneven: bool = False) -> OrderMeasurement:
    """:func:`_measure`, with the horizon doubled (up to four times) while fewer than three grids lie above the
    rounding floor, or while the error has not settled there (a high-order scheme reaches the floor before its
    asymptotic range); the first settled measurement counts, else the first one."""
    first = measurement = _measure(stepper, problem, uneven)
    name = problem.name
    for _ in range(4):
        if len(measurement.errors) >= th.GRIDS and measurement.steady:
            return measurement
        problem = dataclasses.replace(problem, T=2 * problem.T, name=f"{name} over T={2 * problem.T:g}")
        measurement = _measure(stepper, problem, uneven)
    if len(measurement.errors) >= th.GRIDS and measurement.steady:
        return measurement
    return first if len(first.errors) >= th.GRIDS else measurement


def _uneven(dt: float, n: int) -> list[float]:
    """``n`` steps (``n`` even) alternating ``4/3 dt`` and ``2/3 dt``: every pair spans ``2 dt``."""
    return [dt * (4 / 3 if i % 2 == 0 else 2 / 3) for i in range(n)]


def _measure(stepper: AbstractStepper, problem: Problem, uneven: bool = False) -> OrderMeasurement:
    refs = reference(stepper, problem)
    y0, field = problem.initial(stepper), problem.field_for(stepper)
    dts, errors, at_floor = [], [], False
    n = 2 * th.CHECKPOINTS if uneven else th.CHECKPOINTS  # an uneven grid: a whole number of step pairs per checkpoint
    if uneven:
        problem = dataclasses.replace(problem, name=f"{problem.name} on an uneven grid (steps 4/3 dt, 2/3 dt, ...)")
    while n <= th.MAX_STEPS:
        dt = problem.T / n  # negative for a problem run backwards in time
        steps = _uneven(dt, n) if uneven else [dt] * n
        path = [y0, *run_steps([stepper] * n, [field] * n, y0, steps, problem.t0)]  # the one loop, dt of either sign
        ys = path[n // th.CHECKPOINTS :: n // th.CHECKPOINTS]
        error = _trajectory_error(ys, refs, problem.scale)
        if not math.isfinite(error):
            if errors:
                raise AssertionError(
                    f"{_name(stepper)}'s error is {error} on {problem.name} with {n} steps of {dt:.2e}, though it "
                    f"was finite with fewer, larger steps ({errors[-1]:.1e} at {dts[-1]:.1e})."
                    f"{_singular(stepper, problem)}"
                )
            n *= 2  # unstable at this coarse step: refine
            continue
        if error < th.ABOVE_FLOOR * n * th.EPS:  # rounding: finer grids would measure nothing
            at_floor = True
            break
        dts.append(abs(dt))
        errors.append(error)
        if len(errors) >= th.GRIDS and abs(dt) <= th.MIN_DT:
            break
        n *= 2
    if not errors and n > th.MAX_STEPS:
        raise AssertionError(
            f"{_name(stepper)}'s error on {problem.name} is not finite on any grid up to {th.MAX_STEPS} steps."
            f"{_singular(stepper, problem)}"
        )
    local = tuple(math.log2(a / b) for a, b in zip(errors, errors[1:]))
    if len(errors) < th.GRIDS:
        return OrderMeasurement(problem.name, math.inf, tuple(dts), tuple(errors), local, False, at_floor=at_floor)
    slope = _fit(dts[-th.GRIDS :], errors[-th.GRIDS :])
    steady = abs(local[-1] - local[-2]) <= th.STEADY
    if not steady and _settling(local):
        limit = 2 * local[-1] - local[-2]
        return OrderMeasurement(problem.name, limit, tuple(dts), tuple(errors), local, True, True, at_floor)
    return OrderMeasurement(problem.name, slope, tuple(dts), tuple(errors), local, steady, at_floor=at_floor)


def _singular(stepper: AbstractStepper, problem: Problem) -> str:
    """A hint naming a singular time of the stepper's limit on the problem's interval (its friction ``r / t`` at a
    time it reaches), if there is one among 33 times of it."""
    y0, field = problem.initial(stepper), problem.field_for(stepper)
    for k in range(33):
        s = singular_time(stepper, field, problem.t0 + k * problem.T / 32, y0, 0.0)
        if s is not None:
            return (
                f" Its limit field is not finite at t = {s:.6g}, a singular time of the dynamics it claims: a scheme "
                "defined only on some times states them, e.g. time_domain = (0.0, math.inf)."
            )
    return ""


def _settling(local: tuple[float, ...]) -> bool:
    """Whether the last local slopes approach a limit geometrically: the error's next power of ``dt`` fading (each
    change in the same direction, at most ``SETTLING`` times the one before and at most ``3 STEADY``), as a
    high-order scheme shows when the rounding floor stops the ladder first. A lower-order term taking over instead
    makes the changes grow."""
    if len(local) < 3:
        return False
    before, last = local[-2] - local[-3], local[-1] - local[-2]
    return before * last > 0 and abs(last) <= th.SETTLING * abs(before) and abs(last) <= 3 * th.STEADY


def _assert_order(name: str, order: int, m: OrderMeasurement, what: str = "") -> None:
    """The failure messages of :func:`check_order` and :func:`check_layer`, with the numbers behind them."""
    if math.isinf(m.slope):
        raise AssertionError(
            f"{name} declares {what}order {order} but its error is at the rounding floor on all but "
            f"{len(m.errors)} grid(s) even over the longest horizon, so no order can be read: {m}. "
            "Check it on a harder problem."
        )
    if not m.steady:
        raise AssertionError(
            f"{name} declares {what}order {order} but its error has not settled to one power of dt at the finest "
            f"grids (dt down to {m.dts[-1]:.1e}): local slopes {m.local[-2]:.2f} then {m.local[-1]:.2f}; {m}."
            f"{_stalls(order, m)}"
        )
    if not abs(m.slope - order) <= th.ORDER_TOLERANCE:
        raise AssertionError(
            f"{name} declares {what}order {order} but its error falls like dt^{m.slope:.2f}: {m}. "
            f"Fix the scheme or declare the order it has.{_stalls(order, m)}"
        )


def _slopes(local: tuple[float, ...]) -> str:
    return ", ".join(f"{v:.2f}" for v in local)


def _stalls(order: int, m: OrderMeasurement) -> str:
    """A hint when the error's fall slows at a small level (a local slope half an order below an earlier one): the
    signature of an inexact coefficient. An error falling at one slope throughout gets none."""
    # the slope fell at small errors from a steeper one on coarser grids; an error that falls at one slope throughout
    # is a scheme of that order, not an inexact one
    dropping = len(m.local) >= 2 and max(m.local[:-1]) > m.local[-1] + 0.5
    if m.errors and m.errors[-1] < 1e-6 and dropping and m.local[-1] < order - th.ORDER_TOLERANCE:
        return (
            f" An error whose fall slows at a small level (local slopes {_slopes(m.local)}, down to "
            f"{m.errors[-1]:.1e}) is often an inexact "
            "coefficient: a rounded decimal, or a float32 constant in a float64 step."
        )
    return ""


class OrderSlopes(list):
    """The slopes :func:`check_order` measured (a list of floats), with ``unresolved``: a line for each fixed problem
    whose ladder reached float64's rounding floor before its error settled to one power of ``dt`` while every slope
    it measured was at least the declared order (an eighth-order composition whose higher error terms dominate until
    the floor): the order cannot be resolved there at this precision, which is said, not failed."""

    unresolved: list[str]

    def __init__(self, *args: Any):
        super().__init__(*args)
        self.unresolved = []


def _beyond_resolution(order: int, m: OrderMeasurement) -> bool:
    """Whether a fixed problem's ladder stopped at the rounding floor before its error settled while everything it
    measured at the finest grids falls at least like ``dt**order`` (:func:`_faster`): no slope can be read there,
    and none contradicts the claim."""
    return m.at_floor and not m.steady and _faster(order, m)


def placed_problem(stepper: AbstractStepper, problem: Problem) -> Problem:
    """``problem`` started where the stepper's ``time_domain`` holds all of it (itself for a scheme defined at every
    time); an ``AssertionError`` where no start fits."""
    t0 = placed(stepper, problem.t0, [problem.T])
    if t0 is None:
        raise AssertionError(
            f"{_name(stepper)}'s time_domain {stepper.time_domain!r} cannot hold {problem.name}: a span of "
            f"{abs(problem.T):g} with a step's length beyond each end, at least min(1, its width / 4) inside it."
        )
    return started(problem, t0)


def backwards(stepper: AbstractStepper, problem: Problem) -> Problem:
    """``problem`` run backwards in time (``T < 0``: every step negative), from a start inside the stepper's
    ``time_domain``: a scheme is used with steps of either sign (a reversible model's backward pass, a layer whose
    learned step is negative), so its order is measured on both."""
    back = dataclasses.replace(problem, T=-problem.T, name=f"{problem.name} backwards in time (dt < 0)")
    return placed_problem(stepper, back)


def check_order(
    stepper: AbstractStepper | type[AbstractStepper],
    problem: Problem | None = None,
    dim: int | None = None,
    examples: int = th.ORDER_EXAMPLES,
) -> list[float]:
    """Assert the error at the finest grids falls like ``dt**order`` (slope within ``ORDER_TOLERANCE``, local slopes
    steady within ``STEADY``) on each problem (default: :func:`default_problems` of width ``dim``, the last of them also
    on an uneven grid and backwards in time, every step negative: :func:`backwards`), and on tokens of a transformer's
    shape (:func:`_wide_order`); if the stepper has learnable parameters, also with them moved away from their initial
    values (on the last problem); and, unless ``problem`` is given, on ``examples`` drawn problems (where an error
    falling at least as fast as ``dt**order`` at the finest grids passes: a drawn problem may cancel a leading term)
    (:func:`~solvers.testing.strategies.scaled_problems`: every family, and states of tokens coupled as attention
    couples them, at magnitudes over six decades, with the parameters moved by a drawn amount). Problems start inside
    the stepper's ``time_domain`` where it states one. A fixed problem whose error falls steadily faster than
    ``dt**order`` is no counterexample where the declared order is met on another (a learnable family of order 1 for
    every parameter and of order 2 at its start, as a position-velocity splitting ``θ`` is at ``θ = 1/2``); a scheme
    faster on every problem it is measured on declares too low an order and fails. Return the measured slopes (an
    :class:`OrderSlopes`: a fixed
    problem whose ladder reaches the rounding floor before its error settles, every slope measured at least the order,
    cannot resolve it and is listed in ``unresolved`` instead of failing). A scheme declaring order 0 (no small-step
    limit) has none to measure: :func:`check_no_limit` runs on each problem instead, and the list is empty."""
    stepper = _instance(stepper)
    chosen = [problem] if problem is not None else [placed_problem(stepper, p) for p in default_problems(stepper, dim)]
    slopes = OrderSlopes()
    if stepper.order == 0:
        for p in chosen:
            check_no_limit(stepper, p)
        return slopes
    runs = [(stepper, p, False) for p in chosen]
    if problem is None:
        runs.append((stepper, chosen[-1], True))
        runs.append((stepper, backwards(stepper, chosen[-1]), False))
        moved = _moved(stepper)
        if moved is not None:
            runs.append((moved, chosen[-1], False))
            runs.append((moved, backwards(moved, chosen[-1]), False))
    faster: list[tuple[str, OrderMeasurement]] = []
    for s, p, uneven in runs:
        m = measure_order(s, p, uneven)
        name = _name(stepper) if s is stepper else f"{_name(stepper)}, its learnable parameters moved by N(0, 0.5²),"
        if _beyond_resolution(stepper.order, m):
            slopes.unresolved.append(f"cannot resolve order {stepper.order} at this precision: {m}")
            continue
        if m.steady and m.slope > stepper.order + th.ORDER_TOLERANCE and _faster(stepper.order, m):
            faster.append((name, m))  # a lower bound here; the order must be met exactly somewhere (below)
            continue
        _assert_order(name, stepper.order, m)
        slopes.append(m.slope)
    if problem is None and not is_block(stepper):  # a block stepper's fixed problems hold a wide block already
        _wide_order(stepper, placed_problem(stepper, wide_problem(stepper, dim)), slopes)
    if problem is None and examples > 0:
        slopes += _drawn_order(stepper, dim, examples)
    if faster and not any(abs(slope - stepper.order) <= th.ORDER_TOLERANCE for slope in slopes):
        name, m = faster[0]
        _assert_order(f"{name} (on every problem, with its parameters at their start and moved)", stepper.order, m)
    return slopes


def _wide_order(stepper: AbstractStepper, problem: Problem, slopes: OrderSlopes) -> None:
    """The order on a problem of a transformer's shape (:func:`~solvers.testing.problems.wide_problem`), judged as a
    drawn problem is: an error falling at least like ``dt**order`` passes (its slope is kept where it is the order's),
    and one that cannot settle above the rounding floor (:func:`_unresolved`, or still rising toward the order when
    the floor ends the ladder: :func:`_rising_at_floor`) is listed in ``unresolved``; an error falling slower fails.
    The narrow fixed problems hold the slope to the order itself; this one finds a scheme that takes another path on
    larger states."""
    m = measure_order(stepper, problem)
    if _faster(stepper.order, m):
        if abs(m.slope - stepper.order) <= th.ORDER_TOLERANCE:
            slopes.append(m.slope)
    elif _unresolved(stepper.order, m) or _rising_at_floor(stepper.order, m):
        slopes.unresolved.append(f"cannot resolve order {stepper.order} at this precision: {m}")
    else:
        _assert_order(_name(stepper), stepper.order, m)


def _rising_at_floor(order: int, m: OrderMeasurement) -> bool:
    """Whether the rounding floor ended the ladder while its error still approached ``dt**order`` from below: each of
    the last three local slopes larger than the one before, the last within one of the order (an eighth-order
    composition on attention-coupled tokens: 4.7, 6.8, 7.6). A lower order settles instead, and is judged."""
    last = m.local[-3:]
    return m.at_floor and len(last) == 3 and last[0] < last[1] < last[2] and last[2] >= order - 1


def _faster(order: int, m: OrderMeasurement) -> bool:
    """Whether the error on a drawn problem falls at least as fast as ``dt**order`` at every one of the finest grids
    (fitted slope and local slopes at least ``order - ORDER_TOLERANCE``, at least ``GRIDS`` usable grids). A drawn
    problem can cancel a scheme's leading error term (Dormand–Prince 5 falls like ``dt**6`` on some): that is no
    counterexample to order ``order``; the fixed problems still hold the slope to the declared order."""
    if math.isinf(m.slope) or len(m.errors) < th.GRIDS:
        return False
    finest = m.local[-(th.GRIDS - 1) :]
    return m.slope >= order - th.ORDER_TOLERANCE and all(slope >= order - th.ORDER_TOLERANCE for slope in finest)


def _unresolved(order: int, m: OrderMeasurement) -> bool:
    """Whether a drawn problem's ladder reached float64's rounding floor before its error settled to one power of
    ``dt``, while what it measured there is at or above the declared order: error terms of different powers still
    trading places (Dormand–Prince 5's ``dt**5``, ``dt**6`` and ``dt**7`` terms do on some problems). Either the local
    slopes still change too much to read a limit and the slope fitted over the finest grids reaches the order, or they
    change geometrically and only the limit extrapolated beyond the floor falls short, the fitted slope and the finest
    local slope reaching the order (Dormand–Prince 5's slopes dip to 4.84 and return to 5 below the floor on one
    problem, extrapolated to 4.64). Or the floor left fewer than ``GRIDS`` grids above it even over the longest
    horizon, every slope they show at least the order (Kahan and Li's eighth order on a drawn oscillator: two grids,
    slope 8.08). Such a draw cannot tell a right scheme from a wrong one and is redrawn. A ladder that settles to one
    power, one that ends above the floor, and one whose measured slopes fall short are judged."""
    low = order - th.ORDER_TOLERANCE
    if m.at_floor and len(m.errors) < th.GRIDS:
        return all(slope >= low for slope in m.local)
    if not m.at_floor:
        return False
    if m.settling:
        return _fit(m.dts[-th.GRIDS :], m.errors[-th.GRIDS :]) >= low and m.local[-1] >= low
    return not m.steady and m.slope >= low


def _drawn_order(stepper: AbstractStepper, dim: int | None, examples: int) -> list[float]:
    """The order on drawn problems at drawn magnitudes, the parameters moved by a drawn amount."""
    from hypothesis import strategies as st

    from ._common import _copy
    from ._drawn import check_drawn, reject
    from .problems import stepper_width
    from .strategies import scaled_problems

    pristine, slopes = _copy(stepper), []
    fixed = dim if dim is not None else stepper_width(stepper)
    problems = scaled_problems(stepper.second_order, fixed, block=is_block(stepper))

    def claim(case) -> None:
        p, sigma, seed = case
        s = (_moved(pristine, seed=seed, sigma=sigma) if sigma else None) or _copy(pristine)
        p = placed_problem(s, p)
        m = measure_order(s, p)
        moved = f", its learnable parameters moved by {sigma:g} N(0, 1) (seed {seed})," if sigma else ""
        if not _faster(stepper.order, m):
            if _unresolved(stepper.order, m):
                reject()
            _assert_order(f"{_name(stepper)}{moved}", stepper.order, m)
        slopes.append(m.slope)

    cases = st.tuples(problems, st.sampled_from([0.0, 0.5, 1.0]), st.integers(0, 2**16))
    check_drawn(cases, claim, examples)
    return slopes


def check_no_limit(stepper: AbstractStepper, problem: Problem) -> str:
    """For a scheme declaring order 0 (no small-step limit: a fixed-size part that does not shrink with ``dt``):
    assert ``limit_field`` says so (a ``ValueError``) rather than offering an ODE no order was measured against, and
    that the step indeed does not shrink with ``dt`` (from the problem's start, ``|step(dt) - y|`` at ``dt = 1e-4`` is
    at least a tenth of that at ``dt = 1e-2``, where a scheme with a limit shrinks a hundredfold)."""
    try:
        stepper.limit_field(problem.field)
    except ValueError as error:
        reason = " ".join(str(error).split())
    else:
        raise AssertionError(
            f"{_name(stepper)} declares order 0 (no small-step limit) but limit_field returns a vector field; declare "
            "the order it converges with, or raise ValueError there."
        )
    y, field = problem.initial(stepper), problem.field_for(stepper)
    with torch.no_grad():
        moves = [float((_flat(_fresh_step(stepper, field, 0.0, y, dt)) - _flat(y)).abs().max()) for dt in (1e-2, 1e-4)]
    if not moves[1] >= 0.1 * moves[0]:
        raise AssertionError(
            f"{_name(stepper)} declares order 0 (no small-step limit) but its step shrinks with dt on {problem.name}: "
            f"max|step(y, dt) - y| = {moves[0]:.2e} at dt = 1e-2 and {moves[1]:.2e} at dt = 1e-4, as a scheme with a "
            "small-step limit does; declare the order it converges with and its limit_field."
        )
    return reason
