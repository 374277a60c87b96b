"""The property kit: prove what a stepper declares, on problems with known solutions.

Run it on your own scheme::

    from solvers.testing import check_stepper
    check_stepper(MyScheme)            # or an instance: check_stepper(MyScheme(dim=4, theta0=1.0))

``check_stepper`` runs every check the class's declarations call for and raises ``AssertionError`` with a readable
message (the claim, and the numbers that contradict it) on the first claim the scheme does not live up to:

- :func:`check_evals`: a recording field counts the evaluations of every step at ``dt`` = 1, 0.5, 0.1 and 0.001,
  starting at ``t = 0.25``, against ``evals_per_step`` (and ``evals_per_step - 1`` for repeated fields if ``fsal``),
  with one fresh field per step and with one field for all steps. Every evaluation time must be ``t + c dt`` with
  abscissae ``c`` that are the same at every ``dt``: where a scheme evaluates moves with its step. (``c`` may lie
  outside ``[0, 1]``: a composition with a negative sub-step, such as Yoshida's triple jump, evaluates there.)
- :func:`check_order`: the global error (relative, the largest over eight checkpoints in ``[0, T]``) is measured on
  grids of ``n`` steps of ``T / n``, ``n`` doubling from 8, until the error nears the float64 rounding floor
  (``100 n eps``, a margin over the worst case of ``n`` steps' rounding) or ``dt <= 2**-12`` (at most 4096 steps), so
  the fit sits in the asymptotic range, not at coarse steps where a small lower-order defect still hides behind the
  leading term. The slope of log error against log dt over the three finest grids above the floor must match
  ``order`` within 0.3, and the two local slopes there must agree within 0.1 (else the error has not settled to one
  power of dt, and the check fails saying so). Problems (``T = 0.5``): a linear one (matrix-exponential reference) and
  a forced pendulum (reference: classic RK4 at steps ``2**-10`` and ``2**-11``, Richardson-extrapolated, accurate to
  rounding); a scheme whose error reaches the floor within three grids has its horizon doubled (up to four times),
  so a high-order scheme still shows its order.
- :func:`check_symplectic` (if ``symplectic``): the Jacobian ``M`` of one step from a fresh ``init``, at three random
  points (``x, v`` standard normal, ``t in [0, 1]``, ``dt in [0.05, 0.5]``) of a linear Hamiltonian problem
  (``x'' = -K x``) and of a coupled nonlinear one (``x'' = -K x - x³``), has ``Mᵀ J M = J`` and ``det M = 1`` to
  rounding (``max|Mᵀ J M - J| <= 1000 eps |M|²`` and ``|det M - 1| <= 1000 eps |M|^(2d)``, ``|M|`` the spectral norm
  but at least 1, ``d`` the dimension of ``x``); on the linear problem the energy error at ``dt = 0.1`` stays bounded
  over ``t in [0, 200]`` (last quarter at most twice the first) and halving ``dt`` shrinks it like ``dt**order``.
- :func:`check_reversible` (if ``reversible``): at ``dt`` = 0.5, 0.1 and 0.01 on a forced nonlinear problem, every
  step from a fresh ``init``: ``inverse(field, t, step(y), dt)`` recovers ``y`` and ``step(field, t, inverse(y1), dt)``
  recovers ``y1`` (a state the scheme has never produced, so nothing remembered can serve), to a relative ``1e-12``.
  If ``symmetric`` too: ``step(field, t + dt, y1, -dt)`` from a fresh ``init`` recovers the ``y`` that ``step(dt)``
  started from, and ``step(dt)`` undoes ``step(-dt)`` likewise. A reversible scheme must be one-step.
- :func:`check_one_step` (unless ``multistep``): a step from the state carried along equals a step from a fresh
  ``init``, so ``state`` holds no history that ``y`` does not imply.

The reference is the flow of ``stepper.limit_field(field)``: the dynamics the scheme claims to converge to.

Problems are built from a seed with ``torch.Generator`` (float64). :func:`linear_problems`,
:func:`oscillator_problems`, :func:`anharmonic_problems`, :func:`pendulum_problems` and :func:`problems` are
hypothesis strategies over the same builders; hypothesis is needed only for those.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ._base import AbstractStepper, PhaseState, trajectory

ORDER_TOLERANCE = 0.3
_EPS = torch.finfo(torch.float64).eps
_ABOVE_FLOOR = 100  # a usable error exceeds n steps' worst-case rounding, n * eps, this many times
_MIN_DT = 2.0**-12  # refine at least to this step (unless the error reaches the rounding floor first)
_MAX_STEPS = 2**12  # ... or to T / 4096 on horizons longer than 1
_GRIDS = 3  # the slope is fitted on the finest three usable grids
_STEADY = 0.1  # their two local slopes must agree this closely
_ORDER_T = 0.5  # horizon of the default order problems
_REFERENCE_DT = 2.0**-10  # coarser of the two classic RK4 runs a nonlinear reference extrapolates from
_CHECKPOINTS = 8  # errors are compared at t_k = k T / 8
_EVAL_DTS = (1.0, 0.5, 0.1, 1e-3)
_EVAL_T0 = 0.25
_SYMPLECTIC_RTOL = 1000 * _EPS
_REVERSIBLE_DTS = (0.5, 0.1, 0.01)
_REVERSIBLE_RTOL = 1e-12


# ---------------------------------------------------------------------------------------------------------------------
# Problems


@dataclass(frozen=True)
class Problem:
    """An initial-value problem on ``[0, T]``.

    ``field(t, x)`` is ``dx/dt`` when ``v0`` is ``None`` and the acceleration otherwise. ``linear`` problems
    (autonomous, linear, homogeneous) get an exact matrix-exponential reference. ``potential`` (second-order problems
    only) makes the problem Hamiltonian with energy ``½|v|² + potential(x)`` (the field is then ``-∇ potential``).
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
    return Problem(f"linear(seed={seed}, dim={dim}, T={T:g})", lambda t, x: x @ A.T, x0, None, T, linear=True)


def _stiffness(g: torch.Generator, dim: int, omega_min: float, omega_max: float) -> Tensor:
    """``K = Q diag(omega²) Qᵀ``, ``Q`` a random rotation: coupled modes with frequencies in the range."""
    Q, _ = torch.linalg.qr(torch.randn(dim, dim, generator=g, dtype=torch.float64))
    omega = omega_min + (omega_max - omega_min) * torch.rand(dim, generator=g, dtype=torch.float64)
    return Q @ torch.diag(omega**2) @ Q.T


def oscillator_problem(
    seed: int = 0, dim: int = 2, omega_min: float = 0.5, omega_max: float = 2.0, T: float = 2.0, batch: int = 2
) -> Problem:
    """Coupled harmonic oscillators ``x'' = -K x``, ``K`` symmetric positive definite, frequencies in the range."""
    g = _generator(seed)
    K = _stiffness(g, dim, omega_min, omega_max)
    x0 = torch.randn(batch, dim, generator=g, dtype=torch.float64)
    v0 = torch.randn(batch, dim, generator=g, dtype=torch.float64)
    return Problem(
        f"oscillator(seed={seed}, dim={dim}, T={T:g})",
        lambda t, x: -x @ K,
        x0,
        v0,
        T,
        linear=True,
        potential=lambda x: 0.5 * ((x @ K) * x).sum(-1),
    )


def anharmonic_problem(
    seed: int = 0, dim: int = 2, omega_min: float = 0.5, omega_max: float = 1.5, T: float = 2.0, batch: int = 2
) -> Problem:
    """Coupled anharmonic oscillators ``x'' = -K x - x³`` (cube per coordinate): Hamiltonian and nonlinear.

    Energy ``½|v|² + ½ xᵀ K x + ¼ Σ x_i⁴``; ``K`` as in :func:`oscillator_problem` couples the coordinates, so the
    force's Jacobian ``-(K + 3 diag(x²))`` is symmetric but not constant. A scheme symplectic only for linear forces
    fails here.
    """
    g = _generator(seed)
    K = _stiffness(g, dim, omega_min, omega_max)
    x0 = torch.randn(batch, dim, generator=g, dtype=torch.float64)
    v0 = torch.randn(batch, dim, generator=g, dtype=torch.float64)
    return Problem(
        f"anharmonic(seed={seed}, dim={dim}, T={T:g})",
        lambda t, x: -x @ K - x**3,
        x0,
        v0,
        T,
        linear=False,
        potential=lambda x: 0.5 * ((x @ K) * x).sum(-1) + 0.25 * (x**4).sum(-1),
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
    name = f"pendulum(seed={seed}, dim={dim}, forcing={forcing:g}, T={T:g})"
    return Problem(name, field, x0, v0, T, False, potential)


def default_problems(stepper: AbstractStepper) -> list[Problem]:
    """The deterministic problems ``check_order`` uses: one linear, one nonlinear and time-dependent (``T = 0.5``)."""
    second = [oscillator_problem(seed=1, T=_ORDER_T), pendulum_problem(seed=2, T=_ORDER_T)]
    return second if stepper.second_order else [linear_problem(seed=0, T=_ORDER_T), *second]


class _TanhMLP:
    """``f(x) = tanh(x W₁) W₂`` per token, with its exact tangent ``joint(x, v) = (f(x), (tanh'(x W₁) ⊙ v W₁) W₂)``."""

    def __init__(self, W1: Tensor, W2: Tensor):
        self.W1, self.W2 = W1, W2

    def __call__(self, t, x: Tensor) -> Tensor:
        return torch.tanh(x @ self.W1) @ self.W2

    def joint(self, x: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        h = torch.tanh(x @ self.W1)
        return h @ self.W2, ((1 - h * h) * (v @ self.W1)) @ self.W2


def block_problem(
    seed: int = 0, second_order: bool = False, tokens: int = 3, dim: int = 2, T: float = 0.5, batch: int = 1
) -> Problem:
    """A small transformer-like layer as a :class:`~solvers.Block` of two fields, for checking block steppers.

    ``attention(t, x) = softmax(x Q (x K)ᵀ) x V - x`` mixes the ``tokens`` (a Laplacian-like force, so a second-order
    state sees a wave); ``ffn(t, x) = tanh(x W₁) W₂`` acts on each token. Both are smooth and autonomous, weights drawn
    from ``seed`` at scale ``1/sqrt(dim)``; ``x0`` (and ``v0`` if ``second_order``) standard normal, ``(batch, tokens,
    dim)``. The reference is the block stepper's ``limit_field`` (the block's ODE), integrated by classic RK4.
    """
    from ._splitting import Block

    g = _generator(seed)
    Q, K, V, W1, W2 = (torch.randn(dim, dim, generator=g, dtype=torch.float64) / dim**0.5 for _ in range(5))

    def attention(t, x):
        weights = torch.softmax((x @ Q) @ (x @ K).transpose(-2, -1), dim=-1)  # (B, N, N)
        return weights @ (x @ V) - x

    ffn = _TanhMLP(W1, W2)

    x0 = torch.randn(batch, tokens, dim, generator=g, dtype=torch.float64)
    v0 = torch.randn(batch, tokens, dim, generator=g, dtype=torch.float64) if second_order else None
    kind = "second" if second_order else "first"
    return Problem(
        f"block(seed={seed}, {kind}-order, {tokens} tokens, dim={dim})", Block(attention, ffn), x0, v0, T, False
    )


# hypothesis strategies -----------------------------------------------------------------------------------------------


def _st():
    try:
        from hypothesis import strategies
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError("solvers.testing strategies need hypothesis: pip install hypothesis") from error
    return strategies


def linear_problems():
    """Strategy: :func:`linear_problem` with drawn seed, size, spectral scale and horizon ``T in [0.25, 0.5]``."""
    st = _st()
    return st.builds(
        linear_problem,
        seed=st.integers(0, 2**31 - 1),
        dim=st.integers(1, 4),
        scale=st.floats(0.5, 2.0),
        T=st.floats(0.25, 0.5),
    )


def oscillator_problems():
    """Strategy: :func:`oscillator_problem` with drawn seed, size and horizon ``T in [0.25, 0.5]``."""
    st = _st()
    return st.builds(oscillator_problem, seed=st.integers(0, 2**31 - 1), dim=st.integers(1, 3), T=st.floats(0.25, 0.5))


def anharmonic_problems():
    """Strategy: :func:`anharmonic_problem` with drawn seed, size and horizon ``T in [0.25, 0.5]``."""
    st = _st()
    return st.builds(anharmonic_problem, seed=st.integers(0, 2**31 - 1), dim=st.integers(1, 3), T=st.floats(0.25, 0.5))


def pendulum_problems():
    """Strategy: :func:`pendulum_problem` with drawn seed, size, forcing and horizon ``T in [0.25, 0.5]``."""
    st = _st()
    return st.builds(
        pendulum_problem,
        seed=st.integers(0, 2**31 - 1),
        dim=st.integers(1, 3),
        forcing=st.floats(0.0, 1.0),
        T=st.floats(0.25, 0.5),
    )


def problems(second_order: bool = False):
    """Strategy over every problem family a stepper of this kind can run (second-order ones run on any stepper)."""
    st = _st()
    both = [oscillator_problems(), anharmonic_problems(), pendulum_problems()]
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

    Exact (matrix exponential) for linear problems. Otherwise classic RK4 with ``n`` and ``2n`` steps (step at most
    ``2**-10``, resp. ``2**-11``), Richardson-extrapolated, ``y_2n + (y_2n - y_n) / 15``: the ``dt**4`` terms cancel
    and the error is at the level of rounding (~1e-14).
    """
    y0 = problem.initial(stepper)
    F = stepper.limit_field(problem.field_for(stepper))
    if not problem.linear:
        per_checkpoint = math.ceil(problem.T / _CHECKPOINTS / _REFERENCE_DT)
        coarse = _classic_rk4(F, y0, problem.T, per_checkpoint * _CHECKPOINTS, per_checkpoint)
        fine = _classic_rk4(F, y0, problem.T, 2 * per_checkpoint * _CHECKPOINTS, 2 * per_checkpoint)
        return [_axpy(1 / 15, b, _axpy(-1.0, b, a)) for a, b in zip(coarse, fine)]
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
    0.1, i.e. whether the fit sits where the error is one power of ``dt``.
    """

    problem: str
    slope: float
    dts: tuple[float, ...]
    errors: tuple[float, ...]
    local: tuple[float, ...] = ()
    steady: bool = True

    def __str__(self) -> str:
        pairs = ", ".join(f"{e:.1e}@{d:.1e}" for d, e in zip(self.dts, self.errors))
        local = ", ".join(f"{s:.2f}" for s in self.local)
        where = f"at the finest grids on {self.problem}"
        return f"slope {self.slope:.2f} {where} (error@dt: {pairs}; local slopes: {local})"


@contextlib.contextmanager
def _one_thread():
    """The kit's problems are tiny: one intra-op thread is faster, and immune to a busy machine's thread contention."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@torch.no_grad()
def measure_order(stepper: AbstractStepper | type[AbstractStepper], problem: Problem) -> OrderMeasurement:
    """Slope of log error against log dt where the error is asymptotic: on the finest grids float64 can resolve.

    Step counts double from 8 until the error falls below the rounding floor ``100 n eps`` (``n`` steps' worst-case
    rounding, with a margin) or, with at least three grids measured, ``dt <= 2**-12`` (at most 4096 steps). The
    least-squares slope over the three finest grids above the floor is reported, with the local slopes of the whole
    ladder; the measurement is ``steady`` if the two local slopes of those three grids agree within 0.1. A problem so
    easy that fewer than three grids lie above the floor (a high-order scheme) has its horizon doubled, up to four
    times, so the scheme still shows its order.
    """
    stepper = _instance(stepper)
    with _one_thread():
        return _measure_over_horizons(stepper, problem)


def _measure_over_horizons(stepper: AbstractStepper, problem: Problem) -> OrderMeasurement:
    measurement, name = _measure(stepper, problem), problem.name
    for _ in range(4):
        if len(measurement.errors) >= _GRIDS:
            break
        problem = dataclasses.replace(problem, T=2 * problem.T, name=f"{name} over T={2 * problem.T:g}")
        measurement = _measure(stepper, problem)
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
        if not math.isfinite(error):
            if errors:
                raise AssertionError(
                    f"{_name(stepper)}'s error is {error} on {problem.name} with {n} steps of {dt:.2e}, though it "
                    f"was finite with fewer, larger steps ({errors[-1]:.1e} at {dts[-1]:.1e})."
                )
            n *= 2  # unstable at this coarse step: refine
            continue
        if error < _ABOVE_FLOOR * n * _EPS:  # rounding: finer grids would measure nothing
            break
        dts.append(dt)
        errors.append(error)
        if len(errors) >= _GRIDS and dt <= _MIN_DT:
            break
        n *= 2
    if not errors and n > _MAX_STEPS:
        raise AssertionError(
            f"{_name(stepper)}'s error on {problem.name} is not finite on any grid up to {_MAX_STEPS} steps."
        )
    local = tuple(math.log2(a / b) for a, b in zip(errors, errors[1:]))
    if len(errors) < _GRIDS:
        return OrderMeasurement(problem.name, math.inf, tuple(dts), tuple(errors), local, False)
    slope = _fit(dts[-_GRIDS:], errors[-_GRIDS:])
    steady = abs(local[-1] - local[-2]) <= _STEADY
    return OrderMeasurement(problem.name, slope, tuple(dts), tuple(errors), local, steady)


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
        )
    if not abs(m.slope - order) <= ORDER_TOLERANCE:
        raise AssertionError(
            f"{name} declares {what}order {order} but its error falls like dt^{m.slope:.2f}: {m}. "
            f"Fix the scheme or declare the order it has."
        )


def check_order(stepper: AbstractStepper | type[AbstractStepper], problem: Problem | None = None) -> list[float]:
    """Assert the error at the finest grids falls like ``dt**order`` (slope within 0.3, local slopes steady within
    0.1) on each problem (default: :func:`default_problems`); return the measured slopes."""
    stepper = _instance(stepper)
    slopes = []
    for p in [problem] if problem is not None else default_problems(stepper):
        m = measure_order(stepper, p)
        _assert_order(_name(stepper), stepper.order, m)
        slopes.append(m.slope)
    return slopes


def check_no_limit(stepper: AbstractStepper, field: Any) -> str:
    """For a scheme declaring order 0 (no small-step limit: a fixed-size part that does not shrink with ``dt``):
    assert ``limit_field`` says so (a ``ValueError``) rather than offering an ODE no order was measured against."""
    try:
        stepper.limit_field(field)
    except ValueError as error:
        return " ".join(str(error).split())
    raise AssertionError(
        f"{_name(stepper)} declares order 0 (no small-step limit) but limit_field returns a vector field; declare the "
        "order it converges with, or raise ValueError there."
    )


def check_layer(stepper: AbstractStepper, problem: Problem | None = None) -> dict[str, Any]:
    """Assert a block stepper (:class:`~solvers.Split`, :class:`~solvers.Whole` or one of your own, stepping on a
    :class:`~solvers.Block`) converges to its block's ODE with the order it declares for that block.

    The declared order is ``stepper.layer_order(block)`` if the stepper has that method (a split layer's order
    depends on the block: with no FFN it is the stepper's, with maps after the sublayers 0), else ``stepper.order``.
    It is measured as :func:`check_order` measures a scheme, against ``stepper.limit_field(block)``, on ``problem``
    (default: :func:`block_problem` of the stepper's kind, weight-tied: the same block every step). Order 0 means no
    small-step limit; then ``limit_field`` must raise ``ValueError`` and nothing is measured. Returns
    ``{"declared": order, "slope": slope}`` (``slope`` None for order 0, with the reason).
    """
    problem = problem or block_problem(second_order=stepper.second_order)
    block = problem.field
    declared = stepper.layer_order(block) if hasattr(stepper, "layer_order") else stepper.order
    if declared == 0:
        return {"declared": 0, "slope": None, "reason": check_no_limit(stepper, block)}
    m = measure_order(stepper, problem)
    _assert_order(repr(stepper), declared, m, what="layer ")
    return {"declared": declared, "slope": m.slope, "measurement": m}


class RecordingField:
    """Wraps a field and records the time of every evaluation."""

    def __init__(self, field):
        self.field, self.times = field, []

    def __call__(self, t, x):
        self.times.append(float(t))
        return self.field(t, x)


def _show(numbers: list[float]) -> str:
    return "[" + ", ".join(f"{a:.4g}" for a in numbers) + "]"


@torch.no_grad()
def check_evals(
    stepper: AbstractStepper | type[AbstractStepper], problem: Problem | None = None, dts=_EVAL_DTS
) -> None:
    """Assert every step evaluates the field ``evals_per_step`` times (``- 1`` on repeated fields if ``fsal``), at
    every ``dt`` in ``dts``, with one fresh field per step and with one field for all steps; and that the evaluation
    times are ``t + c dt`` with the same abscissae ``c`` at every ``dt`` (the steps start at ``t = 0.25``)."""
    stepper = _instance(stepper)
    problem = problem or default_problems(stepper)[-1]
    y0, base = problem.initial(stepper), problem.field_for(stepper)
    name, declared = _name(stepper), stepper.evals_per_step
    abscissae: dict[tuple[bool, int], tuple[float, list[float]]] = {}
    for dt in dts:
        for tied in (False, True):
            shared = RecordingField(base)
            t, y, state = _EVAL_T0, y0, None
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
                        f"{name} evaluated the field {len(times)} times in step {i} with {how} at dt = {dt:g}; it "
                        f"declares evals_per_step = {declared}{' and fsal' if stepper.fsal else ''}, so {expected} "
                        "were expected."
                    )
                c = [(s - t) / dt for s in times]
                first_dt, first = abscissae.setdefault((tied, i), (dt, c))
                if any(abs(a - b) > 1e-9 * max(1.0, abs(a)) for a, b in zip(c, first)):
                    raise AssertionError(
                        f"{name} evaluates the field at t + c dt with c = {_show(first)} at dt = {first_dt:g} but "
                        f"c = {_show(c)} at dt = {dt:g} (step {i}, {how}): where a step evaluates must move with "
                        "the step, at every dt."
                    )
                t = t + dt


def _jacobian(stepper: AbstractStepper, problem: Problem, t: float, y: PhaseState, dt: float) -> Tensor:
    """Jacobian of one step from a fresh ``init`` with respect to ``(x, v)`` (a batch of one)."""
    field = problem.field_for(stepper)

    def one_step(vector):
        y0 = _unflat(vector, y)
        y1, _ = stepper.step(field, t, y0, dt, stepper.init(field, t, y0))
        return _flat(y1)

    with torch.enable_grad():
        return torch.autograd.functional.jacobian(one_step, _flat(y))


def _symplectic_defect(stepper: AbstractStepper, problem: Problem, points: int = 3, seed: int = 0) -> dict:
    """The worst of ``points`` random ``(t, x, v, dt)`` (``x, v`` standard normal, ``t in [0, 1]``,
    ``dt in [0.05, 0.5]``): ``max|Mᵀ J M - J|`` and ``|det M - 1|`` of the one-step Jacobian ``M``, and ``ratio``, the
    larger of the two over what rounding allows (``1000 eps |M|²``, resp. ``1000 eps |M|^(2d)``, ``|M|`` the spectral
    norm, at least 1); ``ratio > 1`` means the step is not symplectic."""
    g = _generator(seed)
    d = problem.x0.shape[-1]
    eye, zero = torch.eye(d, dtype=torch.float64), torch.zeros(d, d, dtype=torch.float64)
    J = torch.cat([torch.cat([zero, eye], 1), torch.cat([-eye, zero], 1)], 0)
    worst: dict = {"ratio": -1.0}
    for _ in range(points):
        x, v = torch.randn(2, 1, d, generator=g, dtype=torch.float64)
        t = float(torch.rand((), generator=g, dtype=torch.float64))
        dt = 0.05 + 0.45 * float(torch.rand((), generator=g, dtype=torch.float64))
        y = PhaseState(x, v) if stepper.second_order else torch.cat([x, v], dim=-1)
        M = _jacobian(stepper, problem, t, y, dt)
        size = max(1.0, float(torch.linalg.matrix_norm(M, ord=2)))
        structure = float((M.T @ J @ M - J).abs().max())
        det = abs(float(torch.linalg.det(M)) - 1)
        ratio = max(structure / size**2, det / size ** M.shape[0]) / _SYMPLECTIC_RTOL
        if ratio > worst["ratio"]:
            worst = {"ratio": ratio, "structure": structure, "det": det, "size": size, "t": t, "dt": dt}
    return worst


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
    """Assert one step is a symplectic map, ``Mᵀ J M = J`` and ``det M = 1`` to rounding at random points, on each
    Hamiltonian problem (default: ``x'' = -K x`` and the coupled nonlinear ``x'' = -K x - x³``); and, on the linear
    ones, that the energy error stays bounded over ``[0, T]`` and falls like ``dt**order``."""
    stepper = _instance(stepper)
    name = _name(stepper)
    chosen = [problem] if problem is not None else [oscillator_problem(seed=3), anharmonic_problem(seed=3, dim=3)]
    report: dict[str, float] = {"structure_defect": 0.0, "det_defect": 0.0}
    for p in chosen:
        if p.potential is None or not p.second_order:
            raise ValueError(
                f"check_symplectic needs a Hamiltonian problem (one with a potential), got {p.name}; "
                "e.g. oscillator_problem() or anharmonic_problem()."
            )
        at = _symplectic_defect(stepper, p)
        if at["ratio"] > 1:
            raise AssertionError(
                f"{name} declares symplectic but one step of size {at['dt']:.3f} at t = {at['t']:.3f} on {p.name} "
                f"has Jacobian M (|M| = {at['size']:.2f}) with max|MᵀJM - J| = {at['structure']:.2e} and "
                f"|det M - 1| = {at['det']:.2e}; rounding allows {_SYMPLECTIC_RTOL:.1e} |M|² and "
                f"{_SYMPLECTIC_RTOL:.1e} |M|^{2 * p.x0.shape[-1]}."
            )
        report["structure_defect"] = max(report["structure_defect"], at["structure"])
        report["det_defect"] = max(report["det_defect"], at["det"])
        if not p.linear:
            continue
        coarse, fine = (_energy_errors(stepper, p, dt, T) for dt in (0.1, 0.05))
        quarter = len(coarse) // 4
        early, late = float(coarse[:quarter].max()), float(coarse[-quarter:].max())
        if not late <= 2 * early + 1e-12:
            raise AssertionError(
                f"{name} declares symplectic but its energy error grows over t in [0, {T}] at dt 0.1 on {p.name}: "
                f"max {early:.2e} in the first quarter, {late:.2e} in the last."
            )
        rate = math.log2(float(coarse.max()) / float(fine.max()))
        if rate < stepper.order - ORDER_TOLERANCE:
            raise AssertionError(
                f"{name} declares symplectic with order {stepper.order} but halving dt shrinks its maximum energy "
                f"error on {p.name} only by 2^{rate:.2f} ({float(coarse.max()):.2e} -> {float(fine.max()):.2e})."
            )
        report["energy_error"], report["rate"] = float(coarse.max()), rate
    return report


def _fresh_step(stepper: AbstractStepper, field, t, y, dt):
    """One step from a fresh ``init``: nothing a previous step left in ``state`` can serve."""
    return stepper.step(field, t, y, dt, stepper.init(field, t, y))[0]


def _inverse(stepper: AbstractStepper, field, t, y1, dt):
    try:
        return stepper.inverse(field, t, y1, dt)
    except NotImplementedError as error:
        raise AssertionError(f"{_name(stepper)} declares reversible but has no inverse: {error}") from error


@torch.no_grad()
def check_reversible(
    stepper: AbstractStepper | type[AbstractStepper], problem: Problem | None = None, dts=_REVERSIBLE_DTS
) -> float:
    """Assert a step can be undone to rounding (relative 1e-12), every step from a fresh ``init``, at every ``dt``:
    ``inverse(field, t, step(y), dt) = y`` and ``step(field, t, inverse(y1), dt) = y1``; if ``symmetric`` also
    ``step(t + dt, step(t, y, dt), -dt) = y`` and ``step(t, step(t + dt, y, -dt), dt) = y``. Default problem: forced
    pendulums (nonlinear, time-dependent), from ``t = 0.3``. Return the largest relative defect."""
    stepper = _instance(stepper)
    name = _name(stepper)
    if stepper.multistep:
        raise AssertionError(f"{name} declares reversible and multistep: an inverse from y1 alone needs one step.")
    problem = problem or pendulum_problem(seed=4)
    y0, field, t = problem.initial(stepper), problem.field_for(stepper), 0.3
    worst = 0.0
    for dt in dts:
        y1 = _fresh_step(stepper, field, t, y0, dt)
        checks = []
        if stepper.symmetric:
            earlier = _fresh_step(stepper, field, t + dt, y0, -dt)  # y0 as the start of a step of -dt
            checks += [
                ("symmetric", "step(t + dt, step(t, y, dt), -dt) = y", _fresh_step(stepper, field, t + dt, y1, -dt)),
                ("symmetric", "step(t, step(t + dt, y, -dt), dt) = y", _fresh_step(stepper, field, t, earlier, dt)),
            ]
        before = _inverse(stepper, field, t, y0, dt)  # y0 as the end of a step the scheme never took
        checks += [
            ("reversible", "inverse(field, t, step(y), dt) = y", _inverse(stepper, field, t, y1, dt)),
            ("reversible", "step(field, t, inverse(y1), dt) = y1", _fresh_step(stepper, field, t, before, dt)),
        ]
        for claim, what, recovered in checks:
            defect = _error(recovered, y0)
            if not defect <= _REVERSIBLE_RTOL:
                raise AssertionError(
                    f"{name} declares {claim} but {what} misses by {defect:.2e} (relative; rounding is "
                    f"{_REVERSIBLE_RTOL:g}) at dt = {dt:g} on {problem.name}, each step from a fresh init."
                )
            worst = max(worst, defect)
    return worst


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
    name = _name(stepper)
    for attr, kind in (
        ("order", int),
        ("evals_per_step", int),
        ("second_order", bool),
        ("symplectic", bool),
        ("reversible", bool),
        ("symmetric", bool),
        ("fsal", bool),
        ("multistep", bool),
    ):
        value = getattr(stepper, attr)
        least = 0 if attr == "order" else 1  # order 0: no small-step limit
        if not isinstance(value, kind) or (kind is int and (isinstance(value, bool) or value < least)):
            wanted = "bool" if kind is bool else ("non-negative int" if least == 0 else "positive int")
            raise AssertionError(f"{name}.{attr} must be a {wanted}, got {value!r}.")
    if stepper.symmetric and not stepper.reversible:
        raise AssertionError(f"{name} declares symmetric (step(-dt) undoes step(dt)) but not reversible.")
    check_evals(stepper)
    if stepper.order == 0:
        report: dict[str, Any] = {"order": check_no_limit(stepper, default_problems(stepper)[0].field)}
    else:
        report = {"order": check_order(stepper)}
    if stepper.symplectic:
        report["symplectic"] = check_symplectic(stepper)
    if stepper.reversible:
        report["reversible"] = check_reversible(stepper)
    if not stepper.multistep:
        report["one_step"] = check_one_step(stepper)
    return report
