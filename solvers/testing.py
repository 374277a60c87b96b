"""The property kit: prove what a stepper declares, on problems with known solutions.

Run it on your own scheme::

    from solvers.testing import check_stepper
    check_stepper(MyScheme)            # or an instance: check_stepper(MyScheme(dim=4, theta0=1.0))

``check_stepper`` runs every check the class's declarations call for and raises ``AssertionError`` with a readable
message on the first claim the scheme does not live up to:

- :func:`check_evals`: a recording field counts evaluations per step against ``evals_per_step`` (and
  ``evals_per_step - 1`` for repeated fields if ``fsal``) and checks every evaluation lies in ``[t, t + dt]``;
- :func:`check_order`: the slope of log error (the largest over eight checkpoints in ``[0, T]``) against log dt
  matches ``order`` within 0.3, on a linear problem (matrix-exponential reference) and a forced nonlinear one
  (reference from a fine classic RK4 run);
- :func:`check_symplectic` (if ``symplectic``): one step on ``x'' = -K x`` has Jacobian ``M`` with ``Mᵀ J M = J`` (so
  ``det M = 1``), and over a long run the energy error stays bounded and shrinks like ``dt**order``;
- :func:`check_reversible` (if ``reversible``): stepping back with ``-dt`` retraces the steps taken with ``dt``;
- :func:`check_one_step` (unless ``multistep``): a step from the state carried along equals a step from a fresh
  ``init``, so ``state`` holds no history that ``y`` does not imply.

The reference is the flow of ``stepper.limit_field(field)``: the dynamics the scheme claims to converge to.

Problems are built from a seed with ``torch.Generator`` (float64). :func:`linear_problems`,
:func:`oscillator_problems`, :func:`pendulum_problems` and :func:`problems` are hypothesis strategies over the same
builders; hypothesis is needed only for those.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ._base import AbstractStepper, PhaseState, trajectory

ORDER_TOLERANCE = 0.3
_ASYMPTOTIC = 0.02  # errors above this are not yet in the asymptotic range
_STEADY = 0.1  # local slopes this close mean the asymptotic range is reached
_MAX_STEPS = 8192
_FLOOR = 1e-12  # errors below this are rounding, not truncation, in float64
_REFERENCE_STEPS = 4096  # fine classic RK4 for problems without a closed form
_CHECKPOINTS = 8  # errors are compared at t_k = k T / 8


# ---------------------------------------------------------------------------------------------------------------------
# Problems


@dataclass(frozen=True)
class Problem:
    """An initial-value problem on ``[0, T]``.

    ``field(t, x)`` is ``dx/dt`` when ``v0`` is ``None`` and the acceleration otherwise. ``linear`` problems
    (autonomous, linear, homogeneous) get an exact matrix-exponential reference. ``potential`` (second-order problems
    only) makes the problem Hamiltonian with energy ``½|v|² + potential(x)``.
    """

    name: str
    field: Callable[[Any, Tensor], Tensor]
    x0: Tensor
    v0: Tensor | None
    T: float
    linear: bool
    potential: Callable[[Tensor], Tensor] | None = None

    @property
    def second_order(self) -> bool:
        return self.v0 is not None

    def initial(self, stepper: AbstractStepper) -> Tensor | PhaseState:
        """``y0`` in the form ``stepper`` takes (second-order problems are stacked ``[x, v]`` for first-order ones)."""
        if stepper.second_order:
            if not self.second_order:
                raise ValueError(f"{type(stepper).__name__} is second-order; {self.name} is a first-order problem.")
            return PhaseState(self.x0, self.v0)
        return self.x0 if not self.second_order else torch.cat([self.x0, self.v0], dim=-1)

    def field_for(self, stepper: AbstractStepper) -> Callable[[Any, Tensor], Tensor]:
        """The field in the form ``stepper`` takes."""
        if stepper.second_order or not self.second_order:
            return self.field
        d = self.x0.shape[-1]
        return lambda t, y: torch.cat([y[..., d:], self.field(t, y[..., :d])], dim=-1)

    def energy(self, y: Tensor | PhaseState) -> Tensor:
        """Total energy per sample; ``y`` as returned by a stepper."""
        if self.potential is None:
            raise ValueError(f"{self.name} is not Hamiltonian (no potential).")
        if isinstance(y, PhaseState):
            x, v = y
        else:
            d = self.x0.shape[-1]
            x, v = y[..., :d], y[..., d:]
        return 0.5 * (v * v).sum(-1) + self.potential(x)


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(int(seed))


def linear_problem(seed: int = 0, dim: int = 3, scale: float = 1.0, T: float = 1.0, batch: int = 2) -> Problem:
    """``x' = A x`` with ``A`` random of spectral norm ``scale``."""
    g = _generator(seed)
    A = torch.randn(dim, dim, generator=g, dtype=torch.float64)
    A = A * (scale / torch.linalg.matrix_norm(A, ord=2))
    x0 = torch.randn(batch, dim, generator=g, dtype=torch.float64)
    return Problem(f"linear(seed={seed}, dim={dim})", lambda t, x: x @ A.T, x0, None, T, linear=True)


def oscillator_problem(
    seed: int = 0, dim: int = 2, omega_min: float = 0.5, omega_max: float = 2.0, T: float = 2.0, batch: int = 2
) -> Problem:
    """Coupled harmonic oscillators ``x'' = -K x``, ``K`` symmetric positive definite, frequencies in the range."""
    g = _generator(seed)
    Q, _ = torch.linalg.qr(torch.randn(dim, dim, generator=g, dtype=torch.float64))
    omega = omega_min + (omega_max - omega_min) * torch.rand(dim, generator=g, dtype=torch.float64)
    K = Q @ torch.diag(omega**2) @ Q.T
    x0 = torch.randn(batch, dim, generator=g, dtype=torch.float64)
    v0 = torch.randn(batch, dim, generator=g, dtype=torch.float64)
    return Problem(
        f"oscillator(seed={seed}, dim={dim})",
        lambda t, x: -x @ K,
        x0,
        v0,
        T,
        linear=True,
        potential=lambda x: 0.5 * ((x @ K) * x).sum(-1),
    )


def pendulum_problem(seed: int = 0, dim: int = 2, forcing: float = 0.5, T: float = 2.0, batch: int = 2) -> Problem:
    """Pendulums ``x'' = -w² sin x + forcing cos(t)``: nonlinear, and time-dependent unless ``forcing = 0``."""
    g = _generator(seed)
    w2 = 0.5 + 1.5 * torch.rand(dim, generator=g, dtype=torch.float64)
    x0 = 2 * torch.rand(batch, dim, generator=g, dtype=torch.float64) - 1
    v0 = torch.randn(batch, dim, generator=g, dtype=torch.float64)

    def field(t, x):
        return -w2 * torch.sin(x) + forcing * math.cos(float(t))

    potential = None if forcing else (lambda x: (w2 * (1 - torch.cos(x))).sum(-1))
    return Problem(f"pendulum(seed={seed}, dim={dim}, forcing={forcing})", field, x0, v0, T, False, potential)


def default_problems(stepper: AbstractStepper) -> list[Problem]:
    """The deterministic problems ``check_order`` uses: one linear, one nonlinear and time-dependent."""
    second = [oscillator_problem(seed=1), pendulum_problem(seed=2)]
    return second if stepper.second_order else [linear_problem(seed=0), *second]


# hypothesis strategies -----------------------------------------------------------------------------------------------


def _st():
    try:
        from hypothesis import strategies
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError("solvers.testing strategies need hypothesis: pip install hypothesis") from error
    return strategies


def linear_problems():
    """Strategy: :func:`linear_problem` with drawn seed, size, spectral scale and horizon."""
    st = _st()
    return st.builds(
        linear_problem,
        seed=st.integers(0, 2**31 - 1),
        dim=st.integers(1, 4),
        scale=st.floats(0.5, 2.0),
        T=st.floats(0.5, 1.5),
    )


def oscillator_problems():
    """Strategy: :func:`oscillator_problem` with drawn seed, size and horizon."""
    st = _st()
    return st.builds(oscillator_problem, seed=st.integers(0, 2**31 - 1), dim=st.integers(1, 3), T=st.floats(1.0, 3.0))


def pendulum_problems():
    """Strategy: :func:`pendulum_problem` with drawn seed, size, forcing and horizon."""
    st = _st()
    return st.builds(
        pendulum_problem,
        seed=st.integers(0, 2**31 - 1),
        dim=st.integers(1, 3),
        forcing=st.floats(0.0, 1.0),
        T=st.floats(1.0, 3.0),
    )


def problems(second_order: bool = False):
    """Strategy over every problem family a stepper of this kind can run (second-order ones run on any stepper)."""
    st = _st()
    both = [oscillator_problems(), pendulum_problems()]
    return st.one_of(both if second_order else [linear_problems(), *both])


# ---------------------------------------------------------------------------------------------------------------------
# Reference solutions


def _flat(y: Tensor | PhaseState) -> Tensor:
    return torch.cat([y.x.reshape(-1), y.v.reshape(-1)]) if isinstance(y, PhaseState) else y.reshape(-1)


def _unflat(vector: Tensor, like: Tensor | PhaseState) -> Tensor | PhaseState:
    if isinstance(like, PhaseState):
        n = like.x.numel()
        return PhaseState(vector[:n].reshape(like.x.shape), vector[n:].reshape(like.v.shape))
    return vector.reshape(like.shape)


def _axpy(a: float, x, b):
    return PhaseState(*(xi + a * bi for xi, bi in zip(x, b))) if isinstance(x, PhaseState) else x + a * b


def _classic_rk4(F, y, T: float, n: int, every: int) -> list:
    """Reference integrator, independent of the steppers under test; returns every ``every``-th state after y."""
    dt, out = T / n, []
    for i in range(n):
        t = i * dt
        k1 = F(t, y)
        k2 = F(t + dt / 2, _axpy(dt / 2, y, k1))
        k3 = F(t + dt / 2, _axpy(dt / 2, y, k2))
        k4 = F(t + dt, _axpy(dt, y, k3))
        y = _axpy(dt / 6, y, _axpy(2.0, _axpy(2.0, _axpy(1.0, k1, k4), k3), k2))
        if (i + 1) % every == 0:
            out.append(y)
    return out


def _expm(A: Tensor) -> Tensor:
    """Matrix exponential by scaling and squaring a 24-term Taylor series (accurate to ~1e-15 in float64;
    ``torch.linalg.matrix_exp`` loses digits for small norms, which are exactly the early checkpoints)."""
    norm = float(A.abs().sum(0).max())
    squarings = max(0, math.ceil(math.log2(norm / 0.5))) if norm > 0.5 else 0
    B = A / 2**squarings
    term = result = torch.eye(A.shape[0], dtype=A.dtype)
    for k in range(1, 25):
        term = term @ B / k
        result = result + term
    for _ in range(squarings):
        result = result @ result
    return result


@torch.no_grad()
def reference(stepper: AbstractStepper, problem: Problem) -> list:
    """The flow of ``stepper.limit_field`` from the problem's start at the checkpoints ``t_k = k T / 8``, ``k = 1..8``.

    Exact (matrix exponential) for linear problems, else a classic RK4 run with 4096 steps.
    """
    y0 = problem.initial(stepper)
    F = stepper.limit_field(problem.field_for(stepper))
    if not problem.linear:
        return _classic_rk4(F, y0, problem.T, _REFERENCE_STEPS, _REFERENCE_STEPS // _CHECKPOINTS)
    n = _flat(y0).numel()
    basis = torch.eye(n, dtype=torch.float64)
    M = torch.stack([_flat(F(0.0, _unflat(basis[j], y0))) for j in range(n)], dim=1)  # columns: F(e_j)
    times = [problem.T * k / _CHECKPOINTS for k in range(1, _CHECKPOINTS + 1)]
    return [_unflat(_expm(t * M) @ _flat(y0), y0) for t in times]


def _error(y: Tensor | PhaseState, ref: Tensor | PhaseState) -> float:
    r = _flat(ref)
    return float((_flat(y) - r).abs().max() / r.abs().max().clamp_min(1.0))


def _trajectory_error(ys: list, refs: list) -> float:
    """Largest relative error over the checkpoints (robust to a lucky cancellation at any one time)."""
    return max(_error(y, r) for y, r in zip(ys, refs))


# ---------------------------------------------------------------------------------------------------------------------
# Checks


def _instance(stepper: AbstractStepper | type[AbstractStepper]) -> AbstractStepper:
    return stepper() if isinstance(stepper, type) else stepper


def _name(stepper: AbstractStepper) -> str:
    return type(stepper).__name__


@dataclass(frozen=True)
class OrderMeasurement:
    problem: str
    slope: float
    dts: tuple[float, ...]
    errors: tuple[float, ...]

    def __str__(self) -> str:
        pairs = ", ".join(f"{e:.1e}@{d:.1e}" for d, e in zip(self.dts, self.errors))
        return f"slope {self.slope:.2f} on {self.problem} (error@dt: {pairs})"


@torch.no_grad()
def measure_order(stepper: AbstractStepper | type[AbstractStepper], problem: Problem) -> OrderMeasurement:
    """Least-squares slope of log error against log dt, over three grids in the asymptotic range.

    Step counts double from 8 (at most 8192) until the two local slopes ``log2(e(dt) / e(dt/2))`` of the last three
    grids agree within 0.1 with errors below 0.02, or the error reaches rounding (1e-12). A problem so easy that the
    coarsest grid is already near rounding for this scheme has its horizon doubled (up to four times), so a high-order
    scheme still shows its order.
    """
    stepper = _instance(stepper)
    for _ in range(5):
        measurement = _measure(stepper, problem)
        if len(measurement.errors) >= 3 or measurement.errors[0] > 1e-7:
            break
        problem = dataclasses.replace(problem, T=2 * problem.T, name=f"{problem.name} over T={2 * problem.T:g}")
    return measurement


def _measure(stepper: AbstractStepper, problem: Problem) -> OrderMeasurement:
    refs = reference(stepper, problem)
    y0, field = problem.initial(stepper), problem.field_for(stepper)
    dts, errors = [], []
    n = _CHECKPOINTS
    while n <= _MAX_STEPS:
        dt = problem.T / n
        ys = trajectory(stepper, [field] * n, y0, dt)[n // _CHECKPOINTS :: n // _CHECKPOINTS]
        error = _trajectory_error(ys, refs)
        if error <= _FLOOR:
            break
        dts.append(dt)
        errors.append(error)
        if len(errors) >= 3 and errors[-1] <= _ASYMPTOTIC:
            s1, s2 = (math.log2(errors[i] / errors[i + 1]) for i in (-3, -2))
            if abs(s1 - s2) <= _STEADY:
                break
        n *= 2
    if len(errors) < 3:
        slope = math.inf  # exact to rounding on all but at most two grids: above any finite declared order
    else:
        x = torch.tensor([math.log(d) for d in dts[-3:]], dtype=torch.float64)
        y = torch.tensor([math.log(e) for e in errors[-3:]], dtype=torch.float64)
        x = x - x.mean()
        slope = float((x * (y - y.mean())).sum() / (x * x).sum())
    return OrderMeasurement(problem.name, slope, tuple(dts), tuple(errors))


def check_order(stepper: AbstractStepper | type[AbstractStepper], problem: Problem | None = None) -> list[float]:
    """Assert the measured order matches the declared ``order`` within 0.3; return the measured slopes."""
    stepper = _instance(stepper)
    slopes = []
    for p in [problem] if problem is not None else default_problems(stepper):
        m = measure_order(stepper, p)
        if not abs(m.slope - stepper.order) <= ORDER_TOLERANCE:
            raise AssertionError(
                f"{_name(stepper)} declares order {stepper.order} but its error falls like dt^{m.slope:.2f}: {m}. "
                f"Fix the scheme or declare the order it has."
            )
        slopes.append(m.slope)
    return slopes


class RecordingField:
    """Wraps a field and records the time of every evaluation."""

    def __init__(self, field):
        self.field, self.times = field, []

    def __call__(self, t, x):
        self.times.append(float(t))
        return self.field(t, x)


@torch.no_grad()
def check_evals(stepper: AbstractStepper | type[AbstractStepper], problem: Problem | None = None) -> None:
    """Assert every step evaluates the field ``evals_per_step`` times (``- 1`` on repeated fields if ``fsal``), in
    ``[t, t + dt]``; one fresh field per step and one field for all steps are both tried."""
    stepper = _instance(stepper)
    problem = problem or default_problems(stepper)[-1]
    y0, base = problem.initial(stepper), problem.field_for(stepper)
    name, declared, dt = _name(stepper), stepper.evals_per_step, 0.1
    for tied in (False, True):
        shared = RecordingField(base)
        t, y, state = 0.0, y0, None
        for i in range(4):
            field = shared if tied else RecordingField(base)
            before = len(field.times)
            if i == 0:
                state = stepper.init(field, t, y)
            y, state = stepper.step(field, t, y, dt, state)
            times = field.times[before:]
            expected = declared - 1 if (tied and stepper.fsal and i > 0) else declared
            how = "the same field as the step before" if (tied and i > 0) else "a new field"
            if len(times) != expected:
                raise AssertionError(
                    f"{name} evaluated the field {len(times)} times in step {i} with {how}; it declares "
                    f"evals_per_step = {declared}{' and fsal' if stepper.fsal else ''}, so {expected} were expected."
                )
            outside = [s for s in times if not (t - 1e-12 <= s <= t + dt + 1e-12)]
            if outside:
                raise AssertionError(f"{name} evaluated the field at t = {outside}, outside its step [{t}, {t + dt}].")
            t = t + dt


def _symplectic_defect(stepper: AbstractStepper, problem: Problem, dt: float) -> tuple[float, float]:
    """``(max |Mᵀ J M - J|, |det M - 1|)`` for the Jacobian ``M`` of one step on a batch of one."""
    single = Problem(problem.name, problem.field, problem.x0[:1], problem.v0[:1], problem.T, problem.linear)
    y0, field = single.initial(stepper), single.field_for(stepper)

    def one_step(vector):
        y = _unflat(vector, y0)
        y1, _ = stepper.step(field, 0.0, y, dt, stepper.init(field, 0.0, y))
        return _flat(y1)

    M = torch.autograd.functional.jacobian(one_step, _flat(y0))
    d = single.x0.numel()
    eye, zero = torch.eye(d, dtype=M.dtype), torch.zeros(d, d, dtype=M.dtype)
    J = torch.cat([torch.cat([zero, eye], 1), torch.cat([-eye, zero], 1)], 0)
    return float((M.T @ J @ M - J).abs().max()), abs(float(torch.linalg.det(M)) - 1)


@torch.no_grad()
def _energy_errors(stepper: AbstractStepper, problem: Problem, dt: float, T: float) -> Tensor:
    y, field = problem.initial(stepper), problem.field_for(stepper)
    H0 = problem.energy(y)
    errors = []
    t, state = 0.0, stepper.init(field, 0.0, y)
    for _ in range(round(T / dt)):
        y, state = stepper.step(field, t, y, dt, state)
        t = t + dt
        errors.append(((problem.energy(y) - H0).abs() / H0).max())
    return torch.stack(errors)


def check_symplectic(
    stepper: AbstractStepper | type[AbstractStepper], problem: Problem | None = None, T: float = 200.0
) -> dict[str, float]:
    """Assert one step is symplectic on ``x'' = -K x`` and the energy error stays bounded and falls like dt^order."""
    stepper = _instance(stepper)
    name = _name(stepper)
    problem = problem or oscillator_problem(seed=3)
    if not (problem.linear and problem.potential is not None):
        raise ValueError("check_symplectic needs a linear Hamiltonian problem, e.g. oscillator_problem().")
    structure, det = _symplectic_defect(stepper, problem, 0.1)
    if structure > 1e-9 or det > 1e-9:
        raise AssertionError(
            f"{name} declares symplectic but one step of size 0.1 on {problem.name} has Jacobian M with "
            f"max|MᵀJM - J| = {structure:.2e} and |det M - 1| = {det:.2e} (both should be ~0)."
        )
    coarse, fine = (_energy_errors(stepper, problem, dt, T) for dt in (0.1, 0.05))
    quarter = len(coarse) // 4
    early, late = float(coarse[:quarter].max()), float(coarse[-quarter:].max())
    if not late <= 2 * early + 1e-12:
        raise AssertionError(
            f"{name} declares symplectic but its energy error grows over t in [0, {T}] at dt 0.1: "
            f"max {early:.2e} in the first quarter, {late:.2e} in the last."
        )
    rate = math.log2(float(coarse.max()) / float(fine.max()))
    if rate < stepper.order - ORDER_TOLERANCE:
        raise AssertionError(
            f"{name} declares symplectic with order {stepper.order} but halving dt shrinks its maximum energy error "
            f"only by 2^{rate:.2f} ({float(coarse.max()):.2e} -> {float(fine.max()):.2e})."
        )
    return {"structure_defect": structure, "det_defect": det, "energy_error": float(coarse.max()), "rate": rate}


@torch.no_grad()
def check_reversible(
    stepper: AbstractStepper | type[AbstractStepper], problem: Problem | None = None, steps: int = 5
) -> float:
    """Assert ``steps`` steps back with ``-dt`` retrace ``steps`` steps with ``dt``; return the relative defect."""
    stepper = _instance(stepper)
    problem = problem or pendulum_problem(seed=4)
    y0, field = problem.initial(stepper), problem.field_for(stepper)
    dt, t, y = 0.1, 0.0, y0
    state = stepper.init(field, t, y)
    for _ in range(steps):
        y, state = stepper.step(field, t, y, dt, state)
        t = t + dt
    for _ in range(steps):
        y, state = stepper.step(field, t, y, -dt, state)
        t = t - dt
    defect = _error(y, y0)
    if defect > 1e-12:
        raise AssertionError(
            f"{_name(stepper)} declares reversible but {steps} steps with dt = {dt} followed by {steps} with "
            f"dt = {-dt} miss the start by {defect:.2e} (relative) on {problem.name}."
        )
    return defect


@torch.no_grad()
def check_one_step(stepper: AbstractStepper | type[AbstractStepper], problem: Problem | None = None) -> float:
    """Assert a step does not depend on history in ``state`` (for schemes that do not declare ``multistep``)."""
    stepper = _instance(stepper)
    problem = problem or pendulum_problem(seed=5)
    y, field = problem.initial(stepper), problem.field_for(stepper)
    dt, t = 0.1, 0.0
    state = stepper.init(field, t, y)
    for _ in range(3):
        y, state = stepper.step(field, t, y, dt, state)
        t = t + dt
    carried, _ = stepper.step(field, t, y, dt, state)
    fresh, _ = stepper.step(field, t, y, dt, stepper.init(field, t, y))
    defect = _error(carried, fresh)
    if defect > 1e-12:
        raise AssertionError(
            f"{_name(stepper)} reads history from its state: a step from the carried state differs from one from a "
            f"fresh init by {defect:.2e} (relative) on {problem.name}; declare multistep = True."
        )
    return defect


def check_stepper(stepper: AbstractStepper | type[AbstractStepper]) -> dict[str, Any]:
    """Run every check the stepper's declarations call for; return what was measured."""
    stepper = _instance(stepper)
    for attr, kind in (
        ("order", int),
        ("evals_per_step", int),
        ("second_order", bool),
        ("symplectic", bool),
        ("reversible", bool),
        ("fsal", bool),
        ("multistep", bool),
    ):
        value = getattr(stepper, attr)
        if not isinstance(value, kind) or (kind is int and (isinstance(value, bool) or value < 1)):
            raise AssertionError(
                f"{_name(stepper)}.{attr} must be a {'positive int' if kind is int else 'bool'}, got {value!r}."
            )
    check_evals(stepper)
    report: dict[str, Any] = {"order": check_order(stepper)}
    if stepper.symplectic:
        report["symplectic"] = check_symplectic(stepper)
    if stepper.reversible:
        report["reversible"] = check_reversible(stepper)
    if not stepper.multistep:
        report["one_step"] = check_one_step(stepper)
    return report
