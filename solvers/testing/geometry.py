"""Symplecticity and reversibility: the one-step map's Jacobian, energy over long times, and round trips."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import strategies as st
from torch import Tensor

from .._base import AbstractStepper, PhaseState
from . import thresholds as th
from ._common import (
    _as_trained,
    _copy,
    _fresh_step,
    _instance,
    _moved,
    _moved_says,
    _name,
    placed,
    rounded_field,
    rounding_model,
)
from ._drawn import check_drawn, reject
from .problems import (
    Problem,
    _half_width,
    _time_problem,
    anharmonic_problem,
    generator,
    oscillator_problem,
    stepper_width,
)
from .protocol import float32_allowance
from .references import _flat, _unflat, default_limit
from .strategies import hamiltonian_problems, start_times, time_problems


@dataclass(frozen=True)
class Point:
    """A drawn point of a one-step claim: the problem, where the step starts (``t``, and the state drawn from
    ``seed`` at the problem's magnitude, or the problem's own start), its signed size, and how far the learnable
    parameters are moved."""

    problem: Problem
    t: float
    dt: float
    seed: int
    moved: float
    moved_seed: int

    def __str__(self) -> str:
        moved = (
            f"parameters moved by {self.moved:g} N(0, 1) (seed {self.moved_seed})"
            if self.moved
            else "parameters at their start"
        )
        return f"{self.problem.name}, t = {self.t:.4g}, dt = {self.dt:.4g}, state seed {self.seed}, {moved}"

    def stepper(self, stepper: AbstractStepper) -> AbstractStepper:
        moved = _moved(stepper, seed=self.moved_seed, sigma=self.moved) if self.moved else None
        return moved if moved is not None else _copy(stepper)


def _points(problems: Any, max_dt: float, min_dt: float = 1e-3, far: bool = False):
    """Strategy: :class:`Point` on ``problems``, ``|dt|`` log-uniform in ``[min_dt, max_dt]`` of either sign, ``t`` in
    [-1, 1] (or, if ``far``, from :func:`~solvers.testing.strategies.start_times`: time-dependent problems, where a
    scheme that wraps or clamps its time shows)."""
    low, high = math.log10(min_dt), math.log10(max_dt)
    return st.builds(
        Point,
        problem=problems,
        t=start_times() if far else st.floats(-1.0, 1.0),
        dt=st.builds(lambda e, sign: sign * 10.0**e, st.floats(low, high), st.sampled_from([1.0, -1.0])),
        seed=st.integers(0, 2**31 - 1),
        moved=st.sampled_from([0.0, 0.5, 1.0, 2.0]),
        moved_seed=st.integers(0, 2**16),
    )


# -- symplectic -------------------------------------------------------------------------------------------------------


def _jacobian(stepper: AbstractStepper, problem: Problem, t: float, y: Any, dt: float) -> Tensor:
    """Jacobian of one step from a fresh ``init`` with respect to ``(x, v)`` (a batch of one)."""
    field = problem.field_for(stepper)

    def one_step(vector):
        y0 = _unflat(vector, y)
        y1, _ = stepper.step(field, t, y0, dt, stepper.init(field, t, y0))
        return _flat(y1)

    with torch.enable_grad():
        return torch.autograd.functional.jacobian(one_step, _flat(y))


def _symplectic_at(stepper: AbstractStepper, problem: Problem, t: float, x: Tensor, v: Tensor, dt: float) -> dict:
    """``max|Mᵀ J M - J|`` and ``|det M - 1|`` of the one-step Jacobian ``M`` at ``(t, x, v, dt)``, and ``ratio``, the
    larger of the two over what rounding allows (``SYMPLECTIC_RTOL |M|²``, resp. ``SYMPLECTIC_RTOL |M|^(2d)``, ``|M|``
    the spectral norm, at least 1); ``ratio > 1`` means the step is not symplectic. A step that is not finite there,
    or whose Jacobian exceeds ``BLOWN_UP`` (a far-reaching composition on a stiff force, outside its stability
    interval: its honest rounding is not resolved by any tolerance), is taken again at half the size, up to six
    times; one still blown up then is marked ``blown_up`` and not judged (a drawn point is redrawn)."""
    d = x.shape[-1]
    eye, zero = torch.eye(d, dtype=torch.float64), torch.zeros(d, d, dtype=torch.float64)
    J = torch.cat([torch.cat([zero, eye], 1), torch.cat([-eye, zero], 1)], 0)
    y = PhaseState(x, v) if stepper.second_order else torch.cat([x, v], dim=-1)
    drawn = dt

    def stable(M: Tensor) -> bool:
        return bool(torch.isfinite(M).all()) and float(torch.linalg.matrix_norm(M, ord=2)) <= th.BLOWN_UP

    M = _jacobian(stepper, problem, t, y, dt)
    while not stable(M) and abs(dt) > abs(drawn) / 64:
        dt /= 2
        M = _jacobian(stepper, problem, t, y, dt)
    if not bool(torch.isfinite(M).all()):
        raise AssertionError(
            f"{_name(stepper)}'s step is not finite at t = {t:.3f} on {problem.name} for any dt from {drawn:.3g} "
            f"down to {dt:.3g}, so its symplecticity cannot be checked there."
        )
    if not stable(M):
        return {"ratio": 0.0, "structure": 0.0, "det": 0.0, "size": math.inf, "t": t, "dt": dt, "blown_up": True}
    size = max(1.0, float(torch.linalg.matrix_norm(M, ord=2)))
    structure = float((M.T @ J @ M - J).abs().max())
    det = abs(float(torch.linalg.det(M)) - 1)
    log_size = math.log(size)  # |M|^(2d) overflows a float where a far-reaching step's Jacobian is large but finite

    def relative(defect: float, power: int) -> float:
        return defect * math.exp(-min(power * log_size, 700.0))

    ratio = max(relative(structure, 2), relative(det, M.shape[0])) / th.SYMPLECTIC_RTOL
    return {"ratio": ratio, "structure": structure, "det": det, "size": size, "t": t, "dt": dt}


def _symplectic_defect(stepper: AbstractStepper, problem: Problem, points: int = 4, seed: int = 0) -> dict:
    """The worst of ``points`` fixed random ``(t, x, v, dt)`` (``x, v`` standard normal, ``t in [0, 1]``,
    ``dt in [0.05, 1.5]``: a residual layer's step is often 1) and two with small steps (``dt`` log-uniform in
    ``[1e-3, 0.05]``, as in a deep stack), as :func:`_symplectic_at` measures them."""
    g = generator(seed)
    d = problem.x0.shape[-1]
    worst: dict = {"ratio": -1.0}
    for i in range(points + 2):
        x, v = torch.randn(2, 1, d, generator=g, dtype=torch.float64)
        t = float(torch.rand((), generator=g, dtype=torch.float64))
        u = float(torch.rand((), generator=g, dtype=torch.float64))
        dt = 0.05 + 1.45 * u if i < points else 0.05 * 50**-u  # then two small steps, in [1e-3, 0.05]
        t = placed(stepper, t, [dt])  # inside the scheme's time_domain, where it states one
        if t is None:
            continue
        at = _symplectic_at(stepper, problem, t, problem.scale * x, problem.scale * v, dt)
        if at["ratio"] > worst["ratio"]:
            worst = at
    return worst


def _not_symplectic(stepper: AbstractStepper, problem: Problem, at: dict) -> str:
    return (
        f"{_name(stepper)} declares symplectic but one step of size {at['dt']:.4g} at t = {at['t']:.3f} on "
        f"{problem.name} has Jacobian M (|M| = {at['size']:.3g}) with max|MᵀJM - J| = {at['structure']:.2e} and "
        f"|det M - 1| = {at['det']:.2e}; rounding allows {th.SYMPLECTIC_RTOL:.1e} |M|² and "
        f"{th.SYMPLECTIC_RTOL:.1e} |M|^{2 * problem.x0.shape[-1]} (SYMPLECTIC_RTOL)."
    )


def _assert_symplectic_map(stepper: AbstractStepper, problem: Problem) -> dict:
    """:func:`_symplectic_defect` on ``problem``, failing where it exceeds rounding; returns the worst point."""
    at = _symplectic_defect(_copy(stepper), problem)
    if at["ratio"] > 1:
        raise AssertionError(_not_symplectic(stepper, problem, at))
    return at


@torch.no_grad()
def _energy_errors(stepper: AbstractStepper, problem: Problem, dt: float, T: float) -> Tensor:
    """The relative energy error after each of the ``T / dt`` steps, from a start inside the scheme's
    ``time_domain`` (``t = 0`` where it states none)."""
    y, field = problem.initial(stepper), problem.field_for(stepper)
    H0 = problem.energy(y)
    errors = []
    t = placed(stepper, 0.0, [dt] * round(T / dt))
    if t is None:
        raise AssertionError(
            f"{_name(stepper)}'s time_domain {stepper.time_domain!r} holds no span of {T:g}: its energy over long "
            "times cannot be measured inside it."
        )
    state = stepper.init(field, t, y)
    for _ in range(round(T / dt)):
        y, state = stepper.step(field, t, y, dt, state)
        t = t + dt
        errors.append(((problem.energy(y) - H0).abs() / H0).max())
    return torch.stack(errors)


def _energy_floor(stepper: AbstractStepper, problem: Problem, T: float, dt: float, errors: Tensor) -> float:
    """The energy error rounding alone moves the run at ``dt`` by: below it a rate measures rounding, not the scheme.
    Where the error is above ``ABOVE_FLOOR`` times the worst case of ``T / dt`` steps' rounding, that bound; else
    ``MODELLED_ROUNDING`` times how far the energy errors move when the start and every evaluation are rounded
    (modelled in float64): a composition of eighth order reaches that level only at small steps."""
    bound = th.ABOVE_FLOOR * (T / dt) * th.EPS
    if float(errors.max()) >= bound:
        return bound
    nudged = rounding_model(th.EPS, 19)
    rounded = dataclasses.replace(
        problem, field=rounded_field(problem.field, nudged), x0=nudged(problem.x0), v0=nudged(problem.v0)
    )
    moved = _energy_errors(_copy(stepper), rounded, dt, T)
    return th.MODELLED_ROUNDING * float((moved - errors).abs().max())


def _flows_by(stepper: AbstractStepper, problem: Problem, start: float, span: float, points: int = 16) -> bool:
    """Whether the stepper's limit is the problem's own flow (``x' = v, v' = a``), whose energy it conserves, over the
    energy run ``[start, start + span]``: its default ``limit_field``, or one of its own that agrees with it (to
    ``COMMUTES``, relative) at random states and ``points`` times spread over the run. A scheme whose limit adds a
    term of its own (a friction, a force of its own, one that acts only after some time) flows by another field, and
    one with no small-step limit (order 0) by none: the problem's energy says nothing of its order there."""
    if default_limit(stepper):
        return True
    field, g = problem.field_for(stepper), generator(11)
    try:
        own = stepper.limit_field(field)
    except ValueError:  # no small-step limit
        return False
    flow = AbstractStepper.limit_field(stepper, field)
    y0 = problem.initial(stepper)
    with torch.no_grad():
        for k in range(points):
            t = start + span * (k + float(torch.rand((), generator=g, dtype=torch.float64))) / points
            y = _unflat(_flat(y0) + problem.scale * torch.randn(_flat(y0).shape, generator=g, dtype=torch.float64), y0)
            a, b = _flat(own(t, y)), _flat(flow(t, y))
            if not bool(torch.isfinite(a).all()) or float((a - b).abs().max()) > th.COMMUTES * float(b.abs().max()):
                return False
    return True


def check_symplectic(
    stepper: AbstractStepper | type[AbstractStepper],
    problem: Problem | None = None,
    T: float = 200.0,
    dim: int | None = None,
    examples: int = th.EXAMPLES,
) -> dict[str, float]:
    """Assert one step is a symplectic map, ``Mᵀ J M = J`` and ``det M = 1`` to rounding (``SYMPLECTIC_RTOL``), on
    each Hamiltonian problem (default: ``x'' = -K x`` and the coupled nonlinear ``x'' = -K x - x³``, of width ``dim``,
    else the stepper's, else 2 and 3) at fixed random points, with learnable parameters at their start and moved;
    and, unless ``problem`` is given, at ``examples`` drawn points (:class:`Point`: oscillators or anharmonic ones of
    drawn width and magnitude, ``t``, ``dt`` of either sign with ``|dt|`` from 1e-3 to 1.5, parameters moved by up to
    two standard normals). A step whose Jacobian exceeds ``BLOWN_UP`` (outside the scheme's stability interval) is
    halved up to six times, and a drawn point still blown up is redrawn, not judged. On the linear problems, where the
    scheme's limit is the problem's own flow (:func:`_flows_by`; not a friction or a force of its own), the energy
    error stays bounded over ``T`` at ``dt = 0.1`` and falls like ``dt**order``. Every time is inside the scheme's
    ``time_domain``."""
    stepper = _instance(stepper)
    name = _name(stepper)
    width = dim if dim is not None else stepper_width(stepper)
    if problem is not None:
        chosen = [problem]
    else:
        chosen = [oscillator_problem(seed=3, dim=width or 2), anharmonic_problem(seed=3, dim=width or 3)]
    report: dict[str, float] = {"structure_defect": 0.0, "det_defect": 0.0}
    for p in chosen:
        if p.potential is None or not p.second_order:
            raise ValueError(
                f"check_symplectic needs a Hamiltonian problem (one with a potential), got {p.name}; "
                "e.g. oscillator_problem() or anharmonic_problem()."
            )
        for s in _as_trained(stepper) if problem is None else [stepper]:
            at = _moved_says(stepper, s, _assert_symplectic_map, s, p)
            report["structure_defect"] = max(report["structure_defect"], at["structure"])
            report["det_defect"] = max(report["det_defect"], at["det"])
        if not p.linear:
            continue
        start = placed(stepper, 0.0, [0.1] * round(T / 0.1))
        if start is None:
            report["energy"] = f"not measured: its time domain holds no span of {T:g}"
            continue
        if not _flows_by(stepper, p, start, T):
            report["energy"] = "not measured: its limit is not the problem's Hamiltonian flow"
            continue
        coarse, fine = (_energy_errors(_copy(stepper), p, dt, T) for dt in (0.1, 0.05))
        quarter = len(coarse) // 4
        early, late = float(coarse[:quarter].max()), float(coarse[-quarter:].max())
        if not late <= 2 * early + 1e-12:
            raise AssertionError(
                f"{name} declares symplectic but its energy error grows over t in [0, {T}] at dt 0.1 on {p.name}: "
                f"max {early:.2e} in the first quarter, {late:.2e} in the last."
            )
        report["energy_error"] = float(coarse.max())
        step, span = 0.1, T
        if float(fine.max()) < th.ABOVE_FLOOR * (T / 0.05) * th.EPS:  # a high order reaches rounding at dt 0.05
            span = T / 10  # the rate at larger steps, over a tenth of the time (its error is bounded: no drift)
            for step in (0.2, 0.4):
                coarse, fine = (_energy_errors(_copy(stepper), p, dt, span) for dt in (step, step / 2))
                if float(fine.max()) >= _energy_floor(stepper, p, span, step / 2, fine):
                    break
            else:
                report["rate"] = math.nan  # below rounding at every step tried: no rate can be read, none contradicts
                continue
        rate = math.log2(float(coarse.max()) / float(fine.max()))
        if rate < stepper.order - th.ORDER_TOLERANCE:
            raise AssertionError(
                f"{name} declares symplectic with order {stepper.order} but halving dt from {step:g} shrinks its "
                f"maximum energy error over t in [0, {span:g}] on {p.name} only by 2^{rate:.2f} "
                f"({float(coarse.max()):.2e} -> {float(fine.max()):.2e})."
            )
        report["rate"] = rate
    if problem is None and examples > 0:
        pristine = _copy(stepper)

        def claim(point: Point) -> None:
            g = generator(point.seed)
            d = point.problem.x0.shape[-1]
            x, v = (point.problem.scale * torch.randn(1, d, generator=g, dtype=torch.float64) for _ in range(2))
            t = placed(pristine, point.t, [point.dt])
            if t is None:
                reject()
            at = _symplectic_at(point.stepper(pristine), point.problem, t, x, v, point.dt)
            if at.get("blown_up"):
                reject()
            if at["ratio"] > 1:
                raise AssertionError(_not_symplectic(stepper, point.problem, at))

        family = hamiltonian_problems(stepper.second_order, _half_width(stepper, dim) if width is not None else None)
        check_drawn(_points(family, 1.5), claim, examples)
    return report


# -- reversible -------------------------------------------------------------------------------------------------------


def _inverse(stepper: AbstractStepper, field, t, y1, dt):
    try:
        return stepper.inverse(field, t, y1, dt)
    except NotImplementedError as error:
        raise AssertionError(f"{_name(stepper)} declares reversible but has no inverse: {error}") from error


class _Reach:
    """Wraps a field and records the largest entry of any state it is evaluated at (a step's intermediate states)."""

    def __init__(self, field):
        self.field, self.largest = field, 0.0

    def __call__(self, t, x):
        self.largest = max(self.largest, float(x.detach().abs().max()) if x.numel() else 0.0)
        return self.field(t, x)


class _BlownUp(Exception):
    """A step outside the scheme's stability region (``BLOWN_UP``): rounding there says nothing of the claim."""

    def __init__(self, growth: float):
        super().__init__(growth)
        self.growth = growth


def _fixed_round_trips(stepper: AbstractStepper, problem: Problem, y0: Any, dt: float, name: str) -> float:
    """The round trips of a fixed point at ``dt``, or where that step blows up (outside the scheme's stability
    region: a composition's large sub-steps on the cubic force), at ``dt`` halved until it does not (four times at
    most; then the message says the step blows up)."""
    h = dt
    for _ in range(5):
        t = placed(stepper, 0.3, [h])  # t = 0.3, or the nearest start inside the scheme's time_domain
        while t is None and abs(h) > abs(dt) * 2.0**-30:  # a short time domain: a smaller step fits
            h = h / 2
            t = placed(stepper, 0.3, [h])
        if t is None:
            raise AssertionError(
                f"{name}'s time_domain {stepper.time_domain!r} holds no step of {h:g}: its round trips cannot be "
                "checked inside it."
            )
        try:
            return _round_trips(stepper, problem, t, y0, h, name)
        except _BlownUp as blown:
            growth = blown.growth
            h = h / 2
    raise AssertionError(
        f"{name}'s step blows up (it grows the state {growth:.3g} times, BLOWN_UP is {th.BLOWN_UP:g}) on "
        f"{problem.name} from t = {t:.4g} at dt = {dt:g} and at every halving down to dt = {2 * h:g}: reversibility "
        "cannot be judged on a step outside the scheme's stability region."
    )


def _round_trips(
    stepper: AbstractStepper, problem: Problem, t: float, y0: Any, dt: float, name: str, drawn: bool = False
) -> float:
    """The round trips of one step of ``dt`` from ``(t, y0)``, each step from a fresh ``init``; the largest defect,
    relative to the largest magnitude the steps reach (``y0``, their results, every state the field is evaluated at,
    the problem's scale). A point whose steps reach more than ``BLOWN_UP`` times the start (outside the scheme's
    stability interval) is redrawn if ``drawn``, else raises :class:`_BlownUp`: its honest rounding is not resolved by
    any tolerance."""
    field = problem.field_for(stepper)
    reach = None
    if callable(field) and not hasattr(field, "_replace"):  # a plain field: its evaluation points are seen
        field = reach = _Reach(field)
    y1 = _fresh_step(stepper, field, t, y0, dt)

    def forward_back(f, y):
        return _fresh_step(stepper, f, t + dt, _fresh_step(stepper, f, t, y, dt), -dt)

    def back_forward(f, y):
        return _fresh_step(stepper, f, t, _fresh_step(stepper, f, t + dt, y, -dt), dt)

    def there_and_back(f, y):
        return _inverse(stepper, f, t, _fresh_step(stepper, f, t, y, dt), dt)

    def back_and_there(f, y):  # y0 as the end of a step the scheme never took
        return _fresh_step(stepper, f, t, _inverse(stepper, f, t, y, dt), dt)

    trips = [("symmetric", "step(t + dt, step(t, y, dt), -dt) = y", forward_back)] if stepper.symmetric else []
    trips += [("symmetric", "step(t, step(t + dt, y, -dt), dt) = y", back_forward)] if stepper.symmetric else []
    trips += [
        ("reversible", "inverse(field, t, step(y), dt) = y", there_and_back),
        ("reversible", "step(field, t, inverse(y1), dt) = y1", back_and_there),
    ]
    checks = [(claim, what, trip, trip(field, y0)) for claim, what, trip in trips]
    before = _inverse(stepper, field, t, y0, dt)
    start = max(problem.scale, float(_flat(y0).abs().max()))
    sizes = [start, float(_flat(y1).abs().max()), float(_flat(before).abs().max())]
    sizes += [float(_flat(r).abs().max()) for *_, r in checks] + ([reach.largest] if reach is not None else [])
    largest = max(sizes)
    if not (math.isfinite(largest) and largest <= th.BLOWN_UP * start):
        if drawn:
            reject()
        raise _BlownUp(largest / start)
    worst = 0.0
    for claim, what, trip, recovered in checks:
        defect = float((_flat(recovered) - _flat(y0)).abs().max()) / largest
        allowed, rule = th.REVERSIBLE_RTOL, f"REVERSIBLE_RTOL is {th.REVERSIBLE_RTOL:g}"
        if not defect <= allowed and not hasattr(problem.field_for(stepper), "_replace"):
            # how far modelled rounding (start and every evaluation) moves this round trip; a systematic miss moves
            # nothing
            nudged = rounding_model(th.EPS, 17)
            moved = trip(rounded_field(problem.field_for(stepper), nudged), _unflat(nudged(_flat(y0)), y0))
            modelled = float((_flat(moved) - _flat(recovered)).abs().max()) / largest
            # the model perturbs no sum of the scheme's own: its arithmetic's rounding units count them
            units = max(float(th.MODELLED_ROUNDING), float32_allowance(stepper, "reversible"))
            if units * modelled > allowed:  # a round trip through many large sub-steps rounds more
                allowed = units * modelled
                rule = f"{units:.3g} times what modelled rounding moves this round trip, {modelled:.2e}"
        if not defect <= allowed:
            raise AssertionError(
                f"{name} declares {claim} but {what} misses by {defect:.2e} (relative to the largest magnitude the "
                f"steps reach, {largest:.3g}; {rule}) at dt = {dt:.4g} from "
                f"t = {t:.4g} on {problem.name}, each step from a fresh init."
            )
        worst = max(worst, defect)
    return worst


@torch.no_grad()
def check_reversible(
    stepper: AbstractStepper | type[AbstractStepper],
    problem: Problem | None = None,
    dts=th.REVERSIBLE_DTS,
    dim: int | None = None,
    examples: int = th.EXAMPLES,
) -> float:
    """Assert a step can be undone to rounding (``REVERSIBLE_RTOL``), every step from a fresh ``init``:
    ``inverse(field, t, step(y), dt) = y`` and ``step(field, t, inverse(y1), dt) = y1``; if ``symmetric`` also
    ``step(t + dt, step(t, y, dt), -dt) = y`` and ``step(t, step(t + dt, y, -dt), dt) = y``.

    Fixed: at every ``dt`` in ``dts`` from ``t = 0.3`` (or the nearest start inside the scheme's ``time_domain``) on
    modulated, forced pendulums with a phase (nonlinear, their time dependence neither even nor odd;
    :func:`nonlinear_problem` at an odd first-order width) and coupled anharmonic oscillators (without the largest
    ``dt``, where the cubic force makes a step lose every digit), with learnable parameters at their start and moved.
    Drawn (unless ``problem`` is given): ``examples`` :class:`Point` instances on those families at drawn width and
    magnitude, state, ``t``, ``dt`` of either sign (``|dt|`` up to 1, 0.5 on the cubic force) and parameter moves. A
    defect is relative to the largest magnitude the steps reach (the start, the results and every state the field is
    evaluated at); a drawn point whose steps grow the state more than ``BLOWN_UP`` times (outside the scheme's stability
    interval) is redrawn, not judged. Return the largest relative defect."""
    stepper = _instance(stepper)
    name = _name(stepper)
    if stepper.multistep:
        raise AssertionError(f"{name} declares reversible and multistep: an inverse from y1 alone needs one step.")
    if problem is not None:
        y0 = problem.initial(stepper)
        return max(_fixed_round_trips(stepper, problem, y0, dt, name) for dt in dts)
    worst = 0.0
    for s in _as_trained(stepper):
        runs = [(_time_problem(s, dim, seed=4), dts)]
        size = _half_width(s, dim)
        if size:  # its cubic force grows fast: dt = 1 overflows there
            fixed = dim is not None or stepper_width(s) is not None  # else any width: take a coupled one
            runs.append((anharmonic_problem(seed=4, dim=size if fixed else max(size, 2)), dts[1:]))
        worst = max([worst] + [_moved_says(stepper, s, check_reversible, s, p, d) for p, d in runs])
    if examples <= 0:
        return worst
    pristine = _copy(stepper)
    fixed_width = dim if dim is not None else stepper_width(stepper)
    if stepper.second_order:
        family = time_problems(width=fixed_width)
    else:
        family = time_problems(first_order_width=fixed_width if fixed_width is not None else 4)

    def claim(point: Point) -> None:
        s = point.stepper(pristine)
        problem = point.problem
        dt = 0.5 * point.dt if problem.name.startswith("anharmonic") else point.dt  # the cubic force: |dt| <= 0.5
        g = generator(point.seed)
        y0 = problem.initial(s)
        noise = torch.randn(_flat(y0).shape, generator=g, dtype=torch.float64)
        y0 = _unflat(_flat(y0) + 0.5 * problem.scale * noise, y0)
        t = placed(s, point.t, [dt])  # inside the scheme's time_domain
        if t is None:
            reject()
        try:
            _round_trips(s, problem, t, y0, dt, name, drawn=True)
        except AssertionError as error:
            if dt == point.dt:
                raise
            half = f"the cubic force takes half the drawn dt, {point.dt:.4g}"
            raise AssertionError(f"{error} ({half})") from None

    check_drawn(_points(family, 1.0, far=True), claim, examples)
    return worst
