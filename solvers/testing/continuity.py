"""A step is a continuous function of its size and of its start time.

A model steps at a few exact sizes and times: ``dt = T / depth`` (1, 1/2, 1/4, ... at the defaults) from ``t = 0``
(its first layer) on. Drawn instances spread their sizes and times over ranges and never hit those exactly, and a
scheme that branches on its step's size (Euler's step where ``|dt| > 1.5``) or on its time (another step at
``t = 0``, or at ``dt = 0.5`` exactly) keeps every other claim: its order is a statement about small steps, and every
other comparison runs the same branch on both sides. What gives it away is the jump: a correct step is a continuous
function of ``dt`` and ``t`` wherever its limit is (its stages are evaluations of a field at times and states that
move with them), so :func:`check_continuity` scans the step over a grid of sizes and of start times that contains a
model's exact ones and follows every suspect to a jump or to continuity:

- at a point: ``|s(x) - (s(x - η) + s(x + η)) / 2|`` and ``|s(x + η) - s(x - η)| / 2`` as ``η`` halves
  ``CONTINUITY_LEVELS`` times fall with ``η`` where ``s`` is continuous there and stay where ``s(x)`` is not its
  neighbours' limit, or its two sides have different limits;
- between two grid points: bisection, keeping the half across which ``s`` changes more, keeps a jump and shrinks
  any continuous change.

The state too: the step from the problem's state and, for a second-order scheme, from the state at rest (``v = 0``,
where a model's second-order layers start), moved along a drawn direction, is followed the same way.

A step that grows without bound toward a point has a pole there, not a branch (a drag ``c |v| v`` integrated by its
exact flow, ``v / (1 + c dt |v|)``, has one at a negative ``dt``, where the flow backwards in time blows up): it is
not judged there. A jump whose size stays (within a factor of 2 over the last three halvings) above what
rounding can move the step
(``ONE_STEP_RTOL`` times how much the step amplifies rounding) fails the check, unless the scheme's own limit field
jumps in time where the step's stages reach (a force of its own switched on at a time) or in the state (a dry friction
``c sign(v)``): then the step may jump with it, by at most ``CONTINUITY_KICK |dt|`` times the limit's jump (what a
stage crossing it can move a step by).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from .._base import AbstractStepper, PhaseState
from . import thresholds as th
from ._common import _float64, _fresh_step, _instance, _name, placed, time_domain
from .problems import default_problems
from .protocol import amplification
from .references import _flat, _unflat

_Values = Callable[[float], "Tensor | None"]


def _values(fn: Callable[[float], Any]) -> _Values:
    """``fn`` flattened to a float64 vector, ``None`` where it raises or is not finite (outside what is judged)."""

    def value(x: float) -> Tensor | None:
        try:
            with torch.no_grad():
                out = _flat(fn(x)).detach().to(torch.float64)
        except (ArithmeticError, RuntimeError, ValueError):
            return None
        return out if bool(torch.isfinite(out).all()) else None

    return value


def _gap(a: Tensor | None, b: Tensor | None) -> float:
    return float((a - b).abs().max()) if a is not None and b is not None else 0.0


def _suspects(grid: list[float], values: list[Tensor | None], size: float) -> list[tuple[str, float, float]]:
    """The grid points and gaps where ``s`` departs most from a smooth curve: ``("point", x, x)`` by the second
    difference of the values, ``("gap", a, b)`` by the second difference of the differences; the
    ``CONTINUITY_SUSPECTS`` largest of each above rounding."""
    points, gaps = [], []
    for i in range(1, len(grid) - 1):
        left, mid, right = values[i - 1], values[i], values[i + 1]
        if left is not None and mid is not None and right is not None:
            points.append((float((mid - (left + right) / 2).abs().max()), ("point", grid[i], grid[i])))
    for i in range(1, len(grid) - 2):
        v = values[i - 1 : i + 3]
        if all(u is not None for u in v):
            d = (v[2] - v[1]) - ((v[1] - v[0]) + (v[3] - v[2])) / 2
            gaps.append((float(d.abs().max()), ("gap", grid[i], grid[i + 1])))
    floor = th.ONE_STEP_RTOL * size
    chosen = []
    for found in (points, gaps):
        found.sort(key=lambda p: -p[0])
        chosen += [where for size_of, where in found[: th.CONTINUITY_SUSPECTS] if size_of > floor]
    return chosen


def _follow(
    value: _Values, kind: str, a: float, b: float, eta: float = th.CONTINUITY_SPACING / 2
) -> tuple[float, float, float] | None:
    """A suspect followed ``CONTINUITY_LEVELS`` halvings down (a point from the distance ``eta``): ``(where, last,
    earlier)``, the size of the change at the last level and three levels before it (``None`` where a value is not
    defined)."""
    sizes: list[float] = []
    if kind == "point":
        x, centre = a, value(a)
        for _ in range(th.CONTINUITY_LEVELS):
            left, right = value(x - eta), value(x + eta)
            if centre is None or left is None or right is None:
                return None
            apart = (right - left) / 2  # a step across x (a jump from one side to the other)
            sizes.append(max(float((centre - (left + right) / 2).abs().max()), float(apart.abs().max())))
            eta /= 2
        return x, sizes[-1], sizes[-4]
    sa, sb = value(a), value(b)
    for _ in range(th.CONTINUITY_LEVELS):
        m = (a + b) / 2
        sm = value(m)
        if sa is None or sb is None or sm is None:
            return None
        if _gap(sm, sa) >= _gap(sb, sm):
            b, sb = m, sm
        else:
            a, sa = m, sm
        sizes.append(_gap(sb, sa))
    return (a + b) / 2, sizes[-1], sizes[-4]


def _screened(value: _Values, points: list[float], size: float) -> list[tuple[str, float, float]]:
    """The ``points`` (off the grid) where ``value`` is not the mean of its neighbours at ``CONTINUITY_SPACING /
    2**20`` (a smooth change moves it by the square of that, far below rounding) by more than rounding: suspects to
    follow."""
    eta, found = th.CONTINUITY_SPACING / 2**20, []
    for x in points:
        centre, left, right = value(x), value(x - eta), value(x + eta)
        if centre is None or left is None or right is None:
            continue
        if float((centre - (left + right) / 2).abs().max()) > th.ONE_STEP_RTOL * size:
            found.append(("point", x, x))
    return found


def _pole(value: _Values, x: float) -> bool:
    """Whether the step grows without bound toward ``x``: its size at ``2^-14`` spacings from ``x`` more than
    ``2^6`` times its size at ``2^-4`` spacings (a pole grows ``2^10`` times; across a jump the values stay those of
    its two sides), or not finite there while it is further out."""
    h = th.CONTINUITY_SPACING
    far = [value(x - h / 2**4), value(x + h / 2**4)]
    near = [value(x - h / 2**14), value(x + h / 2**14)]
    if any(u is None for u in far):
        return False
    if any(u is None for u in near):
        return True
    return max(float(u.abs().max()) for u in near) > 2**6 * max(float(u.abs().max()) for u in far)


def _jumps(value: _Values, grid: list[float], size: float, extra: list[float] = ()) -> list[tuple[float, float]]:
    """Where ``value`` jumps on ``grid`` and at the ``extra`` points (its suspects followed down): ``(where, size of
    the jump)``."""
    values = [value(x) for x in grid]
    found = []
    for kind, a, b in _suspects(grid, values, size) + _screened(value, list(extra), size):
        followed = _follow(value, kind, a, b)
        if followed is None:
            continue
        where, last, earlier = followed
        if last > th.ONE_STEP_RTOL * size and last > earlier / 2 and not _pole(value, where):
            found.append((where, last))  # it stays: not a continuous change, nor a blow-up
    return found


def _grid(low: float, high: float) -> list[float]:
    h = th.CONTINUITY_SPACING
    first, last = int(low / h), int(high / h)
    return [i * h for i in range(first, last + 1)]


def check_continuity(stepper: AbstractStepper | type[AbstractStepper], dim: int | None = None) -> float:
    """Assert a step is a continuous function of its size ``dt`` and its start time ``t`` (module docstring), on the
    last of :func:`default_problems` (nonlinear, time-dependent) from a fresh ``init`` in float64: over ``dt`` in
    ``±CONTEXT_MAX_DT`` on a grid of ``CONTINUITY_SPACING`` (it holds 1, 1/2, 1/4, ... exactly) from two start times
    (the first ``t = 0`` where the time domain holds it), and over ``t`` in ``[-4, 4]`` at ``dt = 1/2`` and ``dt = 1``
    (in a short time domain, the sizes and times that fit in it). Returns the largest jump found where the limit jumps
    too (0 where none)."""
    stepper = _instance(stepper)
    s = _float64(stepper)
    name = _name(stepper)
    problem = default_problems(s, dim)[-1]
    y, field = problem.initial(s), problem.field_for(s)
    size = max(problem.scale, float(_flat(y).abs().max()))
    span = th.CONTEXT_MAX_DT

    def step_from(t: float) -> _Values:
        return _values(lambda dt: _fresh_step(s, field, t, y, dt))

    def step_of(dt: float) -> _Values:
        return _values(lambda t: _fresh_step(s, field, t, y, dt))

    while span > 8 * th.CONTINUITY_SPACING and placed(s, 0.0, [span, -2 * span]) is None:
        span /= 2  # a short time domain: the sizes that fit in it
    scans = []
    start = placed(s, 0.0, [span, -2 * span])
    for t in (start, None if start is None else start + 0.3):
        fits = [dt for dt in _grid(-span, span) if dt != 0.0 and placed(s, t, [dt]) == t] if t is not None else []
        scans.append((step_from(t), fits, lambda x, t=t: f"dt = {x:.10g} from t = {t:.6g}", t, None))
    layers = range(1, th.CONTINUITY_LAYERS + 1)
    sizes = sorted({sign * depth_time / n for depth_time in th.CONTINUITY_TIMES for n in layers for sign in (1, -1)})
    for dt in (0.5, 1.0):
        fits: list[float] = []
        while len(fits) < 64 and dt > 8 * th.CONTINUITY_SPACING:  # a short time domain: smaller steps fit more times
            near = placed(s, 0.0, [dt])  # the start nearest t = 0, and the times around it
            fits = [] if near is None else [t for t in _grid(near - 4, near + 4) if placed(s, t, [dt]) == t]
            dt = dt if len(fits) >= 64 else dt / 2
        scans.append((step_of(dt), fits, lambda x, dt=dt: f"t = {x:.10g} with dt = {dt:g}", None, dt))
    worst_excused = 0.0
    for value, grid, where, t, dt in scans:
        if len(grid) < 5:
            continue
        extra = [x for x in sizes if placed(s, t, [x]) == t and x not in grid] if t is not None else []
        for x, jump in _jumps(value, grid, size, extra):
            at_t, at_dt = (t, x) if t is not None else (x, dt)
            reference = value(x)
            if reference is not None:
                gain = amplification(s, field, at_t, y, at_dt, reference, th.EPS, 0)
                if not jump > th.ONE_STEP_RTOL * max(1.0, gain) * max(size, float(reference.abs().max())):
                    continue  # rounding, amplified by a step that amplifies it
            limit = max(_limit_jump(s, field, y, at_t, at_dt, size), _limit_in_state(s, field, y, at_t, size))
            if jump <= th.CONTINUITY_KICK * abs(at_dt) * limit:
                worst_excused = max(worst_excused, jump / size)  # a stage crossing the limit's own jump
                continue
            raise AssertionError(
                f"{name}'s step is not a continuous function of its {'size' if t is not None else 'start time'}: at "
                f"{where(x)} on {problem.name} it jumps by {jump / size:.3g} (relative; still that after "
                f"{th.CONTINUITY_LEVELS} halvings of the distance), where its limit_field does not jump: the step "
                "branches there (on |dt|, on dt or t being a particular value). A model steps at exact sizes and "
                "times (dt = T / depth: 1, 1/2, 1/4, ...; its first layer at t = 0) and at any size its layers "
                "learn, so every step must be the scheme's own."
            )
    return max(worst_excused, _state_continuity(s, name, problem, field, y, scans, size))


def _state_continuity(
    s: AbstractStepper, name: str, problem: Any, field: Any, y: Any, scans: list, size: float
) -> float:
    """The step is a continuous function of its state at the problem's own and, for a second-order scheme, at rest
    (``v = 0``: a model's first layer starts its velocity there), along a drawn direction, from the start and at the
    step sizes of the scans; a jump is excused where the limit field jumps in the state there too. Returns the
    largest excused jump (relative)."""
    starts = [("its state", y)]
    if isinstance(y, PhaseState):
        starts.append(("its state at rest (v = 0, where a model's first layer starts)", PhaseState(y.x, 0 * y.v)))
    g = torch.Generator().manual_seed(0)
    direction = _unflat(torch.randn(_flat(y).shape, generator=g, dtype=torch.float64) * size, y)
    t = next((scan[3] for scan in scans if scan[3] is not None), None)
    dts = [scan[4] for scan in scans if scan[4] is not None]
    worst = 0.0
    for label, start in starts:
        for dt in dts:
            at = placed(s, 0.0, [dt]) if t is None else t
            if at is None:
                continue

            def moved(eta: float, start: Any = start) -> Any:
                return _unflat(_flat(start) + eta * _flat(direction), start)

            jump = point_jump(lambda eta, at=at, dt=dt: _fresh_step(s, field, at, moved(eta), dt), 0.0, 0.25) / size
            if not jump > th.ONE_STEP_RTOL:
                continue
            limit = _limit_in_state(s, field, y, at, size) / size
            if jump <= th.CONTINUITY_KICK * abs(dt) * limit:
                worst = max(worst, jump)
                continue
            raise AssertionError(
                f"{name}'s step is not a continuous function of its state: at {label} on {problem.name}, from t = "
                f"{at:g} with dt = {dt:g}, it jumps by {jump:.3g} (relative; still that after "
                f"{th.CONTINUITY_LEVELS} halvings of a move along a drawn direction), where its limit_field does not "
                "jump: the step branches on the state's values there. A model's states reach such values (a "
                "second-order layer starts its velocity at exactly 0)."
            )
    return worst


def _limit_in_state(stepper: AbstractStepper, field: Any, y: Any, t: float, size: float) -> float:
    """The largest jump of the limit field in the state, at ``y`` and (second order) at rest, along a drawn direction
    (0 where none, or no limit): a limit discontinuous in the state (a dry friction ``c sign(v)``) makes the step jump
    wherever a stage crosses its discontinuity, at any size and time."""
    try:
        limit = stepper.limit_field(field)
    except Exception:  # noqa: BLE001 - no limit (order 0): nothing that may jump with it
        return 0.0
    starts = [y] + ([PhaseState(y.x, 0 * y.v)] if isinstance(y, PhaseState) else [])
    g = torch.Generator().manual_seed(1)
    direction = torch.randn(_flat(y).shape, generator=g, dtype=torch.float64) * size
    return max(point_jump(lambda eta, u=u: limit(t, _unflat(_flat(u) + eta * direction, u)), 0.0, 0.25) for u in starts)


def _limit_jump(stepper: AbstractStepper, field: Any, y: Any, t: float, dt: float, size: float) -> float:
    """The largest jump in time of the stepper's limit field at ``y`` where a step from ``t`` of ``dt`` reaches (one
    step beyond either end, as a composition's sub-steps do); 0 where it has none (or no limit)."""
    try:
        limit = stepper.limit_field(field)
    except Exception:  # noqa: BLE001 - no limit (order 0): nothing that may jump with it
        return 0.0
    low, high = time_domain(stepper)
    lo, hi = max(t - 2 * abs(dt), low), min(t + 2 * abs(dt), high)
    if not hi > lo:
        return 0.0
    h = (hi - lo) / 256
    grid = [lo + i * h for i in range(1, 256)]
    value = _values(lambda u: limit(u, y))
    if any(value(u) is None for u in grid):
        return float("inf")  # a singular time of its own dynamics there (a friction 3 / t at t = 0)
    return max((jump for _, jump in _jumps(value, grid, size)), default=0.0)


def point_jump(fn: Callable[[float], Any], x: float, eta: float) -> float:
    """How far ``fn(x)`` is from the limit of ``fn`` around ``x`` (its size that stays as the distance halves
    ``CONTINUITY_LEVELS`` times from ``eta``; 0 where the change shrinks, or a value is not defined)."""
    followed = _follow(_values(fn), "point", x, x, eta)
    if followed is None:
        return 0.0
    _, last, earlier = followed
    return last if last > earlier / 2 else 0.0
