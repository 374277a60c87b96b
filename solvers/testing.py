"""The property kit: prove what a stepper declares, on problems with known solutions.

Run it on your own scheme::

    from solvers.testing import check_stepper
    check_stepper(MyScheme)            # or an instance: check_stepper(MyScheme(dim=4, theta0=1.0))

``check_stepper`` runs every check the class's declarations call for and raises ``AssertionError`` with a readable
message (the claim, and the numbers that contradict it) on the first claim the scheme does not live up to. The
problems have the width of the stepper's per-channel parameters (``MyScheme(dim=4)``: states of width 4), else 4 for
a first-order and 2 for a second-order scheme; ``check_stepper(stepper, dim=...)`` sets it.

- :func:`check_protocol`: one step from a fresh ``init`` returns ``(y1, state)`` with ``y1`` of ``y``'s kind, shape,
  dtype and device (also for float32), leaves ``y`` untouched (and so does a second step, from the state the first
  carried), gives the same ``y1`` when taken again (nothing kept on the stepper), the same in the other mode
  (``eval()``), steps the samples of a batch independently, and has the gradient of the step with respect to ``y``
  and to its learnable parameters (autograd along a random direction equals difference quotients, to what they
  resolve: nothing computed on a detached tensor or read by ``float()``).
- :func:`check_evals`: a recording field counts the evaluations of each of ten steps at ``dt`` = 1, 0.5, 0.1 and
  0.001, starting at ``t = 0.25``, against ``evals_per_step`` (``evals_per_step - 1`` for repeated fields if
  ``fsal``; the first steps against ``startup_evals`` if a multistep scheme declares it), with one fresh field per
  step and with one field for all steps. Every evaluation time must be ``t + c dt`` with abscissae ``c`` that are the
  same at every ``dt``: where a scheme evaluates moves with its step. (``c`` may lie outside ``[0, 1]``: a
  composition with a negative sub-step, such as Yoshida's triple jump, evaluates there.)
- :func:`check_order`: the global error (relative, the largest over eight checkpoints in ``[0, T]``) is measured on
  grids of ``n`` steps of ``T / n``, ``n`` doubling from 8, until the error nears the float64 rounding floor
  (``100 n eps``, a margin over the worst case of ``n`` steps' rounding) or ``dt <= 2**-12`` (at most 4096 steps), so
  the fit sits in the asymptotic range, not at coarse steps where a small lower-order defect still hides behind the
  leading term. The slope of log error against log dt over the three finest grids above the floor must match ``order``
  within 0.3, and the two local slopes there must agree within 0.1, or be settling toward a limit geometrically (then
  the slope is that limit); else the error has not settled to one power of dt, and the check fails saying so. Problems
  (``T = 0.5``): second-order schemes, linear modes coupled by a non-symmetric matrix (:func:`coupled_problem`,
  matrix-exponential reference: a force whose Jacobian is not symmetric, as attention's is not) and pendulums whose
  force is modulated in time and forced (``x'' = -w² (1 + ½ cos 2t) sin x + ½ cos t``: time and state enter jointly);
  first-order schemes, a linear problem, a nonlinear time-modulated one (:func:`nonlinear_problem`) and the pendulums as
  a system ``[x, v]``; nonlinear references are classic RK4 at steps ``2**-10`` and ``2**-11``, Richardson-extrapolated,
  accurate to rounding. The last problem is measured again on an uneven grid (steps alternating ``4/3 dt`` and
  ``2/3 dt``, as layers with different steps), and, if the stepper has learnable parameters, with them moved by
  ``N(0, 0.5²)`` from their start (a claim must hold wherever training takes them). A scheme whose error reaches the
  floor within three grids, or before its slopes settle, has its horizon doubled (up to four times), so a high-order
  scheme still shows its order (a fifth-order one does; an order-8 scheme reaches float64's floor before its error
  settles, and fails saying so). ``order = 0`` (no small-step limit) is checked by :func:`check_no_limit` instead:
  ``limit_field`` raises ``ValueError`` and the step indeed does not shrink with ``dt``.
- :func:`check_symplectic` (if ``symplectic``): the Jacobian ``M`` of one step from a fresh ``init``, at four random
  points (``x, v`` standard normal, ``t in [0, 1]``, ``dt in [0.05, 1.5]``, and two in ``[1e-3, 0.05]``) of a linear
  Hamiltonian problem (``x'' = -K x``) and of a coupled nonlinear one (``x'' = -K x - x³``), has ``Mᵀ J M = J`` and
  ``det M = 1`` to rounding (``max|Mᵀ J M - J| <= 1000 eps |M|²`` and ``|det M - 1| <= 1000 eps |M|^(2d)``, ``|M|`` the
  spectral norm but at least 1, ``d`` the dimension of ``x``; a step that is not finite there, as a far-reaching
  composition's on the cubic force, is taken again at half the size, up to six times); with learnable parameters, also
  with them moved from their start; on the linear problem the energy error at ``dt = 0.1`` stays bounded over
  ``t in [0, 200]`` (last quarter at most twice the first) and halving ``dt`` shrinks it like ``dt**order``.
- :func:`check_reversible` (if ``reversible``): at ``dt`` = 1, 0.5, 0.1 and 0.01 on modulated, forced pendulums
  whose time dependence has no parity (``cos(t + 0.7)``: an inverse that runs time back through ``-t`` fails), and at
  0.5, 0.1 and 0.01 on coupled anharmonic oscillators (a force whose Jacobian is not diagonal), with learnable
  parameters also moved from their start, every step from a fresh ``init``: ``inverse(field, t, step(y), dt)``
  recovers ``y`` and ``step(field, t, inverse(y1), dt)`` recovers ``y1`` (a state the scheme has never produced, so
  nothing remembered can serve), to a relative ``1e-12``.
  If ``symmetric`` too: ``step(field, t + dt, y1, -dt)`` from a fresh ``init`` recovers the ``y`` that ``step(dt)``
  started from, and ``step(dt)`` undoes ``step(-dt)`` likewise. A reversible scheme must be one-step.
- :func:`check_one_step` (unless ``multistep``): along ten steps whose size changes every step, a step from the
  state carried along equals a step by an unused copy of the stepper from a fresh ``init``, from a perturbed copy of
  the state reached and from the state itself, so neither ``state`` nor the stepper holds history (or a cache keyed
  on anything but ``y``) that ``y`` does not imply.

The reference is the flow of ``stepper.limit_field(field)``: the dynamics the scheme claims to converge to.

Problems are built from a seed with ``torch.Generator`` (float64). :func:`linear_problems`,
:func:`oscillator_problems`, :func:`coupled_problems`, :func:`anharmonic_problems`, :func:`pendulum_problems`,
:func:`nonlinear_problems` and :func:`problems` are hypothesis strategies over the same builders; hypothesis is needed
only for those.
"""

from __future__ import annotations

import contextlib
import copy
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
_SETTLING = 0.7  # ... or be approaching a limit, each change at most this fraction of the one before
_ORDER_T = 0.5  # horizon of the default order problems
_REFERENCE_DT = 2.0**-10  # coarser of the two classic RK4 runs a nonlinear reference extrapolates from
_CHECKPOINTS = 8  # errors are compared at t_k = k T / 8
_EVAL_DTS = (1.0, 0.5, 0.1, 1e-3)
_EVAL_T0 = 0.25
_EVAL_STEPS = 10  # steps counted per run: a scheme that changes its count later (history, a refresh) shows it
_SYMPLECTIC_RTOL = 1000 * _EPS
_REVERSIBLE_DTS = (1.0, 0.5, 0.1, 0.01)
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


def pendulum_problem(
    seed: int = 0,
    dim: int = 2,
    forcing: float = 0.5,
    T: float = 2.0,
    batch: int = 2,
    modulation: float = 0.0,
    phase: float = 0.0,
) -> Problem:
    """Pendulums ``x'' = -w² (1 + modulation cos(2t + phase)) sin x + forcing cos(t + phase)``: nonlinear;
    time-dependent unless ``forcing = modulation = 0``. The modulation makes time and state enter the force jointly (a
    scheme that evaluates at the wrong time fails there even if it handles an additive forcing right); a ``phase``
    that is not a multiple of π makes the force's time dependence neither even nor odd (an inverse that runs time
    backwards through ``-t`` fails there)."""
    g = _generator(seed)
    w2 = 0.5 + 1.5 * torch.rand(dim, generator=g, dtype=torch.float64)
    x0 = 2 * torch.rand(batch, dim, generator=g, dtype=torch.float64) - 1
    v0 = torch.randn(batch, dim, generator=g, dtype=torch.float64)

    def field(t, x):
        s = float(t) + phase
        return -w2 * (1 + modulation * math.cos(2 * s)) * torch.sin(x) + forcing * math.cos(s)

    potential = None if (forcing or modulation) else (lambda x: (w2 * (1 - torch.cos(x))).sum(-1))
    modulated = f", modulation={modulation:g}" if modulation else ""
    phased = f", phase={phase:g}" if phase else ""
    name = f"pendulum(seed={seed}, dim={dim}, forcing={forcing:g}{modulated}{phased}, T={T:g})"
    return Problem(name, field, x0, v0, T, False, potential)


def coupled_problem(
    seed: int = 0, dim: int = 2, omega_min: float = 0.5, omega_max: float = 2.0, T: float = 2.0, batch: int = 2
) -> Problem:
    """Linear modes coupled by a non-symmetric matrix: ``x'' = -A x``, ``A = S diag(omega²) S⁻¹`` with ``S`` random
    and not orthogonal (singular values in ``[1, 3]``). Its solutions oscillate like :func:`oscillator_problem`'s, but
    the force's Jacobian ``-A`` is not symmetric, as the attention force ``(A(X) - I) X`` has none: a scheme that
    applies ``Jᵀ v`` where ``J v`` is due (a vector-Jacobian product for a Jacobian-vector product) fails here, where
    symmetric and per-coordinate forces cannot tell the two apart. Linear (exact reference), not Hamiltonian."""
    g = _generator(seed)
    U, _ = torch.linalg.qr(torch.randn(dim, dim, generator=g, dtype=torch.float64))
    V, _ = torch.linalg.qr(torch.randn(dim, dim, generator=g, dtype=torch.float64))
    S = U @ torch.diag(torch.linspace(1.0, 3.0, dim, dtype=torch.float64)) @ V.T
    omega = omega_min + (omega_max - omega_min) * torch.rand(dim, generator=g, dtype=torch.float64)
    A = S @ torch.diag(omega**2) @ torch.linalg.inv(S)
    x0 = torch.randn(batch, dim, generator=g, dtype=torch.float64)
    v0 = torch.randn(batch, dim, generator=g, dtype=torch.float64)
    return Problem(f"coupled(seed={seed}, dim={dim}, T={T:g})", lambda t, x: -x @ A.T, x0, v0, T, linear=True)


def nonlinear_problem(seed: int = 0, dim: int = 4, T: float = 1.0, batch: int = 2) -> Problem:
    """``x' = (1 + ½ cos 2t) tanh(x A) + ½ sin t``, ``A`` random of spectral norm 1: a first-order problem of any
    width, nonlinear and coupled, with time and state entering jointly."""
    g = _generator(seed)
    A = torch.randn(dim, dim, generator=g, dtype=torch.float64)
    A = A / torch.linalg.matrix_norm(A, ord=2)
    x0 = torch.randn(batch, dim, generator=g, dtype=torch.float64)

    def field(t, x):
        return (1 + 0.5 * math.cos(2 * float(t))) * torch.tanh(x @ A) + 0.5 * math.sin(float(t))

    return Problem(f"nonlinear(seed={seed}, dim={dim}, T={T:g})", field, x0, None, T, linear=False)


def stepper_width(stepper: AbstractStepper) -> int | None:
    """The channel count a per-channel stepper is built for: the last dimension of its parameters and buffers that
    have more than one element (``None`` if there are none, so any width will do)."""
    widths = {int(t.shape[-1]) for t in (*stepper.parameters(), *stepper.buffers()) if t.dim() and t.shape[-1] > 1}
    if len(widths) > 1:
        raise AssertionError(
            f"{_name(stepper)} has parameters of widths {sorted(widths)}: pass the state width (dim=...) to the check."
        )
    return widths.pop() if widths else None


def _width(stepper: AbstractStepper, dim: int | None) -> int:
    """The width of the state the kit's problems give ``stepper``: ``dim``, else its parameters', else 4 (first-order
    steppers) or 2 (second-order ones)."""
    width = dim if dim is not None else stepper_width(stepper)
    return width if width is not None else (2 if stepper.second_order else 4)


def default_problems(stepper: AbstractStepper, dim: int | None = None) -> list[Problem]:
    """The deterministic problems ``check_order`` uses (``T = 0.5``), of the state width :func:`_width` gives.

    Second-order steppers: linear modes coupled by a non-symmetric matrix (:func:`coupled_problem`) and modulated,
    forced pendulums. First-order steppers: a linear problem, :func:`nonlinear_problem`, and (at an even width) the
    modulated, forced pendulums as a first-order system ``[x, v]``. The last problem is nonlinear and time-dependent.
    """
    width = _width(stepper, dim)
    pendulum = pendulum_problem(seed=2, T=_ORDER_T, modulation=0.5, dim=width if stepper.second_order else width // 2)
    if stepper.second_order:
        return [coupled_problem(seed=1, dim=width, T=_ORDER_T), pendulum]
    first = [linear_problem(seed=0, dim=width, T=_ORDER_T), nonlinear_problem(seed=3, dim=width, T=_ORDER_T)]
    return first + ([pendulum] if width % 2 == 0 else [])


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
    seed: int = 0,
    second_order: bool = False,
    tokens: int = 3,
    dim: int = 2,
    T: float = 0.5,
    batch: int = 1,
    ffn: bool = True,
) -> Problem:
    """A small transformer-like layer as a :class:`~solvers.Block` of two fields, for checking block steppers.

    ``attention(t, x) = softmax(x Q (x K)ᵀ) x V - x`` mixes the ``tokens`` (a Laplacian-like force, so a second-order
    state sees a wave); ``ffn(t, x) = tanh(x W₁) W₂`` acts on each token. Both are smooth and autonomous, weights drawn
    from ``seed`` at scale ``1/sqrt(dim)``; ``x0`` (and ``v0`` if ``second_order``) standard normal, ``(batch, tokens,
    dim)``; ``ffn=False`` leaves the FFN out (a block of attention alone). The reference is the block stepper's
    ``limit_field`` (the block's ODE), integrated by classic RK4.
    """
    from ._splitting import Block

    g = _generator(seed)
    Q, K, V, W1, W2 = (torch.randn(dim, dim, generator=g, dtype=torch.float64) / dim**0.5 for _ in range(5))

    def attention(t, x):
        weights = torch.softmax((x @ Q) @ (x @ K).transpose(-2, -1), dim=-1)  # (B, N, N)
        return weights @ (x @ V) - x

    mlp = _TanhMLP(W1, W2) if ffn else None

    x0 = torch.randn(batch, tokens, dim, generator=g, dtype=torch.float64)
    v0 = torch.randn(batch, tokens, dim, generator=g, dtype=torch.float64) if second_order else None
    kind = "second" if second_order else "first"
    name = f"block(seed={seed}, {kind}-order, {tokens} tokens, dim={dim}{'' if ffn else ', no FFN'})"
    return Problem(name, Block(attention, mlp), x0, v0, T, False)


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


def coupled_problems():
    """Strategy: :func:`coupled_problem` with drawn seed, size and horizon ``T in [0.25, 0.5]``."""
    st = _st()
    return st.builds(coupled_problem, seed=st.integers(0, 2**31 - 1), dim=st.integers(1, 3), T=st.floats(0.25, 0.5))


def anharmonic_problems():
    """Strategy: :func:`anharmonic_problem` with drawn seed, size and horizon ``T in [0.25, 0.5]``."""
    st = _st()
    return st.builds(anharmonic_problem, seed=st.integers(0, 2**31 - 1), dim=st.integers(1, 3), T=st.floats(0.25, 0.5))


def pendulum_problems():
    """Strategy: :func:`pendulum_problem` with drawn seed, size, forcing, modulation, phase and horizon in
    [0.25, 0.5]."""
    st = _st()
    return st.builds(
        pendulum_problem,
        seed=st.integers(0, 2**31 - 1),
        dim=st.integers(1, 3),
        forcing=st.floats(0.0, 1.0),
        T=st.floats(0.25, 0.5),
        modulation=st.floats(0.0, 0.9),
        phase=st.floats(0.0, 3.0),
    )


def nonlinear_problems():
    """Strategy: :func:`nonlinear_problem` with drawn seed, size and horizon ``T in [0.25, 0.5]``."""
    st = _st()
    return st.builds(nonlinear_problem, seed=st.integers(0, 2**31 - 1), dim=st.integers(1, 4), T=st.floats(0.25, 0.5))


def problems(second_order: bool = False):
    """Strategy over every problem family a stepper of this kind can run (second-order ones run on any stepper)."""
    st = _st()
    both = [oscillator_problems(), coupled_problems(), anharmonic_problems(), pendulum_problems()]
    return st.one_of(both if second_order else [linear_problems(), nonlinear_problems(), *both])


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
    0.1, i.e. whether the fit sits where the error is one power of ``dt``, or (``settling``) whether the last three
    approach a limit geometrically; the slope is then that limit, ``2 s_last - s_before`` (Richardson extrapolation
    of the local slopes, whose deviation halves with ``dt``).
    """

    problem: str
    slope: float
    dts: tuple[float, ...]
    errors: tuple[float, ...]
    local: tuple[float, ...] = ()
    steady: bool = True
    settling: bool = False

    def __str__(self) -> str:
        pairs = ", ".join(f"{e:.1e}@{d:.1e}" for d, e in zip(self.dts, self.errors))
        local = ", ".join(f"{s:.2f}" for s in self.local)
        where = "as the limit of the settling local slopes" if self.settling else "at the finest grids"
        return f"slope {self.slope:.2f} {where} on {self.problem} (error@dt: {pairs}; local slopes: {local})"


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
        if len(measurement.errors) >= _GRIDS and measurement.steady:
            return measurement
        problem = dataclasses.replace(problem, T=2 * problem.T, name=f"{name} over T={2 * problem.T:g}")
        measurement = _measure(stepper, problem, uneven)
    if len(measurement.errors) >= _GRIDS and measurement.steady:
        return measurement
    return first if len(first.errors) >= _GRIDS else measurement


def _uneven(dt: float, n: int) -> list[float]:
    """``n`` steps (``n`` even) alternating ``4/3 dt`` and ``2/3 dt``: every pair spans ``2 dt``."""
    return [dt * (4 / 3 if i % 2 == 0 else 2 / 3) for i in range(n)]


def _measure(stepper: AbstractStepper, problem: Problem, uneven: bool = False) -> OrderMeasurement:
    refs = reference(stepper, problem)
    y0, field = problem.initial(stepper), problem.field_for(stepper)
    dts, errors = [], []
    n = 2 * _CHECKPOINTS if uneven else _CHECKPOINTS  # an uneven grid has a whole number of step pairs per checkpoint
    if uneven:
        problem = dataclasses.replace(problem, name=f"{problem.name} on an uneven grid (steps 4/3 dt, 2/3 dt, ...)")
    while n <= _MAX_STEPS:
        dt = problem.T / n
        steps = _uneven(dt, n) if uneven else dt
        ys = trajectory(stepper, [field] * n, y0, steps)[n // _CHECKPOINTS :: n // _CHECKPOINTS]
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
    if not steady and _settling(local):
        return OrderMeasurement(problem.name, 2 * local[-1] - local[-2], tuple(dts), tuple(errors), local, True, True)
    return OrderMeasurement(problem.name, slope, tuple(dts), tuple(errors), local, steady)


def _settling(local: tuple[float, ...]) -> bool:
    """Whether the last local slopes approach a limit geometrically: the error's next power of ``dt`` fading (each
    change in the same direction, at most ``_SETTLING`` times the one before and at most ``3 _STEADY``), as a
    high-order scheme shows when the rounding floor stops the ladder first. A lower-order term taking over instead
    makes the changes grow."""
    if len(local) < 3:
        return False
    before, last = local[-2] - local[-3], local[-1] - local[-2]
    return before * last > 0 and abs(last) <= _SETTLING * abs(before) and abs(last) <= 3 * _STEADY


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
    if not abs(m.slope - order) <= ORDER_TOLERANCE:
        raise AssertionError(
            f"{name} declares {what}order {order} but its error falls like dt^{m.slope:.2f}: {m}. "
            f"Fix the scheme or declare the order it has.{_stalls(order, m)}"
        )


def _stalls(order: int, m: OrderMeasurement) -> str:
    """A hint when the error stops falling at a small level: the signature of an inexact coefficient."""
    if m.errors and m.errors[-1] < 1e-6 and m.local and m.local[-1] < order - ORDER_TOLERANCE:
        return (
            f" An error that stops falling at a small level (here {m.errors[-1]:.1e}) is often an inexact "
            "coefficient: a rounded decimal, or a float32 constant in a float64 step."
        )
    return ""


def check_order(
    stepper: AbstractStepper | type[AbstractStepper], problem: Problem | None = None, dim: int | None = None
) -> list[float]:
    """Assert the error at the finest grids falls like ``dt**order`` (slope within 0.3, local slopes steady within
    0.1) on each problem (default: :func:`default_problems` of width ``dim``, the last of them also on an uneven grid);
    if the stepper has learnable parameters, also with them moved away from their initial values (on the last
    problem). Return the measured slopes. A scheme declaring order 0 (no small-step limit) has none to measure:
    :func:`check_no_limit` runs on each problem instead, and the list is empty."""
    stepper = _instance(stepper)
    chosen = [problem] if problem is not None else default_problems(stepper, dim)
    if stepper.order == 0:
        for p in chosen:
            check_no_limit(stepper, p)
        return []
    runs = [(stepper, p, False) for p in chosen]
    if problem is None:
        runs.append((stepper, chosen[-1], True))
        moved = _moved(stepper)
        if moved is not None:
            runs.append((moved, chosen[-1], False))
    slopes = []
    for s, p, uneven in runs:
        m = measure_order(s, p, uneven)
        name = _name(stepper) if s is stepper else f"{_name(stepper)}, its learnable parameters moved by N(0, 0.5²),"
        _assert_order(name, stepper.order, m)
        slopes.append(m.slope)
    return slopes


def _moved(stepper: AbstractStepper, seed: int = 0) -> AbstractStepper | None:
    """A copy of ``stepper`` with every learnable parameter moved by ``N(0, 0.5²)`` (``None`` if it has none): a
    declaration must hold wherever training takes the parameters, not only at their start."""
    learnable = [p for p in stepper.parameters() if p.requires_grad]
    if not learnable:
        return None
    moved = copy.deepcopy(stepper)
    g = _generator(seed)
    with torch.no_grad():
        for p in moved.parameters():
            if p.requires_grad:
                p.add_(0.5 * torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype))
    return moved


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


def check_layer(stepper: AbstractStepper, problem: Problem | None = None) -> dict[str, Any]:
    """Assert a block stepper (:class:`~solvers.Split`, :class:`~solvers.Whole` or one of your own, stepping on a
    :class:`~solvers.Block`) converges to its block's ODE with the order it declares for that block.

    The declared order is ``stepper.layer_order(block)`` if the stepper has that method (a split layer's order
    depends on the block: with no FFN it is the stepper's, with maps after the sublayers 0), else ``stepper.order``.
    It is measured as :func:`check_order` measures a scheme, against ``stepper.limit_field(block)``, on ``problem``
    (default: :func:`block_problem` of the stepper's kind and per-channel width, weight-tied: the same block every
    step). Order 0 means no small-step limit; then :func:`check_no_limit` runs instead (``limit_field`` raises
    ``ValueError``, the step does not shrink with ``dt``). Returns ``{"declared": order, "slope": slope}`` (``slope``
    None for order 0, with the reason).
    """
    problem = problem or block_problem(second_order=stepper.second_order, dim=stepper_width(stepper) or 2)
    block = problem.field
    declared = stepper.layer_order(block) if hasattr(stepper, "layer_order") else stepper.order
    if declared == 0:
        return {"declared": 0, "slope": None, "reason": check_no_limit(stepper, problem)}
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
    stepper: AbstractStepper | type[AbstractStepper],
    problem: Problem | None = None,
    dts=_EVAL_DTS,
    dim: int | None = None,
) -> None:
    """Assert every step of ``_EVAL_STEPS`` evaluates the field ``evals_per_step`` times (``- 1`` on repeated fields
    if ``fsal``; the first steps as ``startup_evals`` says, if a multistep scheme declares it), at every ``dt`` in
    ``dts``, with one fresh field per step and with one field for all steps; and that the evaluation times are
    ``t + c dt`` with the same abscissae ``c`` at every ``dt`` (the steps start at ``t = 0.25``).

    On a :class:`~solvers.Block` problem (a block stepper's, e.g. :func:`block_problem`) the attention field's
    evaluations are counted, and first-same-as-last is what the stepper's ``layer_fsal(block)`` says for that block,
    where it has the method."""
    from ._splitting import Block

    stepper = _instance(stepper)
    problem = problem or default_problems(stepper, dim)[-1]
    y0, base = problem.initial(stepper), problem.field_for(stepper)
    block = base if isinstance(base, Block) else None
    counted = base if block is None else block.attention
    fsal = stepper.layer_fsal(block) if block is not None and hasattr(stepper, "layer_fsal") else stepper.fsal
    name, declared, startup = _name(stepper), stepper.evals_per_step, tuple(stepper.startup_evals)
    abscissae: dict[tuple[bool, int], tuple[float, list[float]]] = {}
    for dt in dts:
        for tied in (False, True):
            shared = RecordingField(counted)
            t, y, state = _EVAL_T0, y0, None
            for i in range(_EVAL_STEPS):
                recorder = shared if tied else RecordingField(counted)
                field = recorder if block is None else block._replace(attention=recorder)
                before = len(recorder.times)
                if i == 0:
                    state = stepper.init(field, t, y)
                y, state = stepper.step(field, t, y, dt, state)
                times = recorder.times[before:]
                if i < len(startup):
                    expected, claim = startup[i], f"startup_evals = {startup}"
                else:
                    expected = declared - 1 if (tied and fsal and i > 0) else declared
                    claim = f"evals_per_step = {declared}{' and fsal' if fsal else ''}"
                how = "the same field as the step before" if (tied and i > 0) else "a new field"
                if len(times) != expected:
                    raise AssertionError(
                        f"{name} evaluated the field {len(times)} times in step {i} with {how} at dt = {dt:g}; it "
                        f"declares {claim}, so {expected} were expected."
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


def _symplectic_defect(stepper: AbstractStepper, problem: Problem, points: int = 4, seed: int = 0) -> dict:
    """The worst of ``points`` random ``(t, x, v, dt)`` (``x, v`` standard normal, ``t in [0, 1]``,
    ``dt in [0.05, 1.5]``: a residual layer's step is often 1), and two with small steps (``dt`` log-uniform in
    ``[1e-3, 0.05]``, as in a deep stack): ``max|Mᵀ J M - J|`` and ``|det M - 1|`` of the
    one-step Jacobian ``M``, and ``ratio``, the larger of the two over what rounding allows (``1000 eps |M|²``, resp.
    ``1000 eps |M|^(2d)``, ``|M|`` the spectral norm, at least 1); ``ratio > 1`` means the step is not symplectic."""
    g = _generator(seed)
    d = problem.x0.shape[-1]
    eye, zero = torch.eye(d, dtype=torch.float64), torch.zeros(d, d, dtype=torch.float64)
    J = torch.cat([torch.cat([zero, eye], 1), torch.cat([-eye, zero], 1)], 0)
    worst: dict = {"ratio": -1.0}
    for i in range(points + 2):
        x, v = torch.randn(2, 1, d, generator=g, dtype=torch.float64)
        t = float(torch.rand((), generator=g, dtype=torch.float64))
        u = float(torch.rand((), generator=g, dtype=torch.float64))
        dt = 0.05 + 1.45 * u if i < points else 0.05 * 50**-u  # then two small steps, in [1e-3, 0.05]
        y = PhaseState(x, v) if stepper.second_order else torch.cat([x, v], dim=-1)
        M = _jacobian(stepper, problem, t, y, dt)
        drawn = dt
        while not bool(torch.isfinite(M).all()) and dt > drawn / 64:  # the step overflows on a stiff force (a
            dt /= 2  # high-order composition's sub-steps reach far): the map is not defined there, take a smaller one
            M = _jacobian(stepper, problem, t, y, dt)
        if not bool(torch.isfinite(M).all()):
            raise AssertionError(
                f"{_name(stepper)}'s step is not finite at t = {t:.3f} on {problem.name} for any dt from {drawn:.3f} "
                f"down to {dt:.4f}, so its symplecticity cannot be checked there."
            )
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
    stepper: AbstractStepper | type[AbstractStepper],
    problem: Problem | None = None,
    T: float = 200.0,
    dim: int | None = None,
) -> dict[str, float]:
    """Assert one step is a symplectic map, ``Mᵀ J M = J`` and ``det M = 1`` to rounding at random points, on each
    Hamiltonian problem (default: ``x'' = -K x`` and the coupled nonlinear ``x'' = -K x - x³``, of width ``dim``, else
    the stepper's, else 2 and 3); and, on the linear ones, that the energy error stays bounded over ``[0, T]`` and
    falls like ``dt**order``."""
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


def _assert_symplectic_map(stepper: AbstractStepper, problem: Problem) -> dict:
    """:func:`_symplectic_defect` on ``problem``, failing where it exceeds rounding; returns the worst point."""
    at = _symplectic_defect(stepper, problem)
    if at["ratio"] > 1:
        raise AssertionError(
            f"{_name(stepper)} declares symplectic but one step of size {at['dt']:.3f} at t = {at['t']:.3f} on "
            f"{problem.name} has Jacobian M (|M| = {at['size']:.2f}) with max|MᵀJM - J| = {at['structure']:.2e} and "
            f"|det M - 1| = {at['det']:.2e}; rounding allows {_SYMPLECTIC_RTOL:.1e} |M|² and "
            f"{_SYMPLECTIC_RTOL:.1e} |M|^{2 * problem.x0.shape[-1]}."
        )
    return at


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
    stepper: AbstractStepper | type[AbstractStepper],
    problem: Problem | None = None,
    dts=_REVERSIBLE_DTS,
    dim: int | None = None,
) -> float:
    """Assert a step can be undone to rounding (relative 1e-12), every step from a fresh ``init``, at every ``dt``:
    ``inverse(field, t, step(y), dt) = y`` and ``step(field, t, inverse(y1), dt) = y1``; if ``symmetric`` also
    ``step(t + dt, step(t, y, dt), -dt) = y`` and ``step(t, step(t + dt, y, -dt), dt) = y``. Default problems (of
    width ``dim``, else the stepper's): modulated, forced pendulums with a phase (nonlinear, their time dependence
    neither even nor odd; :func:`nonlinear_problem` at an odd first-order width) and coupled anharmonic oscillators (a
    force whose Jacobian is not diagonal; without the largest ``dt``, where its cubic force makes a step lose every
    digit), from ``t = 0.3``; with learnable parameters, also with them moved from their start. Return the largest
    relative defect."""
    stepper = _instance(stepper)
    name = _name(stepper)
    if stepper.multistep:
        raise AssertionError(f"{name} declares reversible and multistep: an inverse from y1 alone needs one step.")
    if problem is None:
        worst = 0.0
        for s in _as_trained(stepper):
            runs = [(_time_problem(s, dim, seed=4), dts)]
            size = _half_width(s, dim)
            if size:  # its cubic force grows fast: dt = 1 overflows there
                fixed = dim is not None or stepper_width(s) is not None  # else any width: take a coupled one
                runs.append((anharmonic_problem(seed=4, dim=size if fixed else max(size, 2)), dts[1:]))
            worst = max([worst] + [_moved_says(stepper, s, check_reversible, s, p, d) for p, d in runs])
        return worst
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
def check_one_step(
    stepper: AbstractStepper | type[AbstractStepper], problem: Problem | None = None, dim: int | None = None
) -> float:
    """Assert a step does not depend on history in ``state`` (for schemes that do not declare ``multistep``): along
    ten steps whose size changes every step, a step from the carried state equals one from a fresh ``init`` by an
    unused copy of the stepper, both from a perturbed copy of the state reached (first, while anything the last step
    left behind is still there: a state the scheme never produced, so a cache keyed on anything but ``y`` itself, in
    ``state`` or on the stepper, is caught) and from the state reached."""
    stepper = _instance(stepper)
    problem = problem or _time_problem(stepper, dim, seed=5)
    y, field = problem.initial(stepper), problem.field_for(stepper)
    pristine = _copy(stepper)  # the fresh steps run on copies of the stepper as it was: nothing kept on it can serve
    g = _generator(6)
    t = 0.0
    state = stepper.init(field, t, y)
    worst = 0.0
    for i in range(10):
        dt = 0.1 * (1.5 if i % 2 else 0.7)
        nudged = _unflat(_flat(y) + 1e-3 * torch.randn(_flat(y).shape, generator=g, dtype=_flat(y).dtype), y)
        for start, which in ((nudged, "a perturbed copy of the state it reached"), (y, "the state it reached")):
            carried, _ = stepper.step(field, t, start, dt, state)
            fresh_stepper = _copy(pristine)
            fresh, _ = fresh_stepper.step(field, t, start, dt, fresh_stepper.init(field, t, start))
            defect = _error(carried, fresh)
            if defect > 1e-12:
                raise AssertionError(
                    f"{_name(stepper)} reads history from its state or from itself: after {i} steps, a step of {dt:g} "
                    f"from {which} with the carried state differs from one by an unused copy of the stepper from a "
                    f"fresh init by {defect:.2e} (relative) on {problem.name}; declare multistep = True, or key "
                    "anything kept between steps on y itself."
                )
            worst = max(worst, defect)
        y, state = stepper.step(field, t, y, dt, state)
        t = t + dt
    return worst


def _half_width(stepper: AbstractStepper, dim: int | None) -> int:
    """The width of a second-order problem for ``stepper``: its state's width, halved for a first-order scheme (which
    runs it as ``[x, v]``); 0 when a first-order scheme's width is odd (no second-order problem fits it)."""
    width = _width(stepper, dim)
    if stepper.second_order:
        return width
    return width // 2 if width % 2 == 0 else 0


def _time_problem(stepper: AbstractStepper, dim: int | None, seed: int) -> Problem:
    """A nonlinear problem whose force depends on time neither evenly nor oddly, of the stepper's width: modulated,
    forced pendulums with a phase (as ``[x, v]`` for a first-order scheme), or, at an odd first-order width,
    :func:`nonlinear_problem` (``cos 2t`` and ``sin t`` together)."""
    size = _half_width(stepper, dim)
    if size:
        return pendulum_problem(seed=seed, dim=size, modulation=0.5, phase=0.7)
    return nonlinear_problem(seed=seed, dim=_width(stepper, dim))


def _copy(stepper: AbstractStepper) -> AbstractStepper:
    """A deep copy of ``stepper`` (the stepper itself if it cannot be copied)."""
    try:
        return copy.deepcopy(stepper)
    except Exception:  # noqa: BLE001 - an uncopyable stepper is checked on itself
        return stepper


def _as_trained(stepper: AbstractStepper) -> list[AbstractStepper]:
    """The stepper, and a copy with its learnable parameters moved from their start if it has any (:func:`_moved`);
    :func:`_moved_says` names the copy in a failure."""
    moved = _moved(stepper)
    return [stepper] + ([moved] if moved is not None else [])


_MOVED = "with its learnable parameters moved by N(0, 0.5²) from their start"


def _moved_says(stepper: AbstractStepper, s: AbstractStepper, check: Callable, *args: Any) -> Any:
    """``check(*args)``, its failure message saying so when ``s`` is the moved copy of ``stepper``."""
    if s is stepper:
        return check(*args)
    try:
        return check(*args)
    except AssertionError as error:
        raise AssertionError(f"{_name(stepper)}, {_MOVED}: {error}") from error


def _cast(y: Tensor | PhaseState, dtype: torch.dtype) -> Tensor | PhaseState:
    return PhaseState(y.x.to(dtype), y.v.to(dtype)) if isinstance(y, PhaseState) else y.to(dtype)


def _tensors(y: Any) -> tuple[Tensor, ...]:
    return tuple(y) if isinstance(y, PhaseState) else (y,)


def check_protocol(stepper: AbstractStepper | type[AbstractStepper], dim: int | None = None) -> float:
    """Assert a step keeps the protocol every other check takes for granted, on the last of :func:`default_problems`
    (nonlinear, time-dependent, a batch of two) from a fresh ``init``:

    - ``step`` returns ``(y1, state)``, ``y1`` of ``y``'s kind, shape, dtype and device, also for a float32 ``y``;
    - ``y`` is left as it was (no in-place update of the input);
    - the same step taken twice gives the same ``y1`` (nothing is kept on the stepper between steps);
    - the samples of a batch are stepped independently (each alone gives its row of the batch);
    - a second step, from the state the first carried, leaves its input as it was too;
    - a copy in the other mode (``eval()`` for a stepper in training mode) takes the same step;
    - gradients are those of the step: the derivative along a random direction of ``y`` and of the stepper's learnable
      parameters by autograd equals difference quotients (a term computed without gradient, e.g. on ``y.detach()`` or
      a parameter read by ``float()``, makes them differ), to what the quotients can resolve (their spread between
      steps ``h`` and ``10 h``, at least ``1e-6``).

    Returns the relative difference of the two derivatives.
    """
    stepper = _instance(stepper)
    name = _name(stepper)
    problem = default_problems(stepper, dim)[-1]
    y, field, t, dt = problem.initial(stepper), problem.field_for(stepper), 0.3, 0.4
    kept = _unflat(_flat(y).clone(), y)
    with torch.no_grad():
        try:
            out = stepper.step(field, t, y, dt, stepper.init(field, t, y))
        except (RuntimeError, ValueError, TypeError) as error:
            raise AssertionError(
                f"{name} failed to step {problem.name} (states of shape {tuple(problem.x0.shape)}): "
                f"{' '.join(str(error).split())[:200]}; if it is built for another width, pass dim=... to the check."
            ) from error
        if not (isinstance(out, tuple) and not isinstance(out, PhaseState) and len(out) == 2):
            raise AssertionError(f"{name}.step must return (y1, state); it returned {type(out).__name__} {out!r:.80}.")
        y1 = out[0]
        _same_form(name, y, y1, problem)
        if not torch.equal(_flat(y), _flat(kept)):
            raise AssertionError(f"{name}.step changed its input y in place on {problem.name}; return new tensors.")
        again = _fresh_step(stepper, field, t, y, dt)
        if not torch.equal(_flat(again), _flat(y1)):
            raise AssertionError(
                f"{name} gives a different y1 when the same step (same field, t, y, dt, fresh init) is taken again "
                f"(by {_error(again, y1):.2e}): it keeps something on the stepper between steps; keep it in state."
            )
        other = _copy(stepper)
        if other is not stepper:
            other.train(not stepper.training)
            flipped = _fresh_step(other, field, t, y, dt)
            if not torch.equal(_flat(flipped), _flat(y1)):
                mode = "eval" if stepper.training else "training"
                raise AssertionError(
                    f"{name} steps differently in {mode} mode (by {_error(flipped, y1):.2e}) on {problem.name}: the "
                    "kit checks one mode, and its claims must hold for training and inference alike."
                )
        state1 = out[1]
        carried = _unflat(_flat(y1).clone(), y1)
        y2, _ = stepper.step(field, t + dt, y1, dt, state1)
        if not torch.equal(_flat(y1), _flat(carried)):
            raise AssertionError(
                f"{name}.step changed its input y in place on the second step (from the state the first one carried) "
                f"on {problem.name}; return new tensors."
            )
        _same_form(name, y, y2, problem, "second step's ")
        for b in range(problem.x0.shape[0]):
            alone = _fresh_step(stepper, field, t, _select(y, b), dt)
            _same_form(name, _select(y, b), alone, problem, f"sample {b}'s ")
            defect = _error(alone, _select(y1, b))
            if defect > 1e-12:
                raise AssertionError(
                    f"{name} does not step the samples of a batch independently: sample {b} stepped alone differs "
                    f"from its row of the batch's step by {defect:.2e} (relative) on {problem.name}."
                )
        low = _cast(y, torch.float32)
        low_field = lambda t, x: field(t, x.to(torch.float64)).to(x.dtype)  # noqa: E731 - the problem in float32
        _same_form(name, low, _fresh_step(stepper, low_field, t, low, dt), problem, "float32 ")
    return _check_derivative(name, stepper, field, t, y, dt, problem)


def _select(y: Tensor | PhaseState, b: int) -> Tensor | PhaseState:
    return PhaseState(y.x[b : b + 1], y.v[b : b + 1]) if isinstance(y, PhaseState) else y[b : b + 1]


def _same_form(name: str, y: Any, y1: Any, problem: Problem, what: str = "") -> None:
    if isinstance(y1, PhaseState) != isinstance(y, PhaseState) or not isinstance(y1, (Tensor, PhaseState)):
        raise AssertionError(
            f"{name}.step returned y1 of type {type(y1).__name__} for a {what}y of type {type(y).__name__}."
        )
    for a, b in zip(_tensors(y), _tensors(y1)):
        if not isinstance(b, Tensor) or b.shape != a.shape or b.dtype != a.dtype or b.device != a.device:
            got = f"{tuple(b.shape)} {b.dtype} on {b.device}" if isinstance(b, Tensor) else type(b).__name__
            raise AssertionError(
                f"{name}.step returned {got} for a {what}y of {tuple(a.shape)} {a.dtype} on {a.device} "
                f"({problem.name}): y1 must have y's shape, dtype and device."
            )


def _check_derivative(name: str, stepper: AbstractStepper, field, t, y, dt, problem: Problem) -> float:
    """Autograd's derivative of one step along a random direction of ``y`` and of the stepper's learnable parameters
    (on a float64 copy) against difference quotients. The quotient's step ``h`` is chosen where quotients at ``h``
    and ``10 h`` agree best (rounding noise grows as ``h`` shrinks, truncation as it grows), and their spread bounds
    how far the quotient can be trusted: a step that is itself noisy (e.g. one that takes a finite difference inside)
    is held to what can be resolved, a smooth one to ``1e-6``."""
    stepper = _float64(stepper)
    params = [p for p in stepper.parameters() if p.requires_grad]
    g = _generator(7)
    base = _flat(y)
    direction = torch.randn(base.shape, generator=g, dtype=base.dtype)
    along = [torch.randn(p.shape, generator=g, dtype=p.dtype) for p in params]

    def one_step(vector: Tensor) -> Tensor:
        return _flat(_fresh_step(stepper, field, t, _unflat(vector, y), dt))

    with torch.enable_grad():
        point = base.clone().requires_grad_()
        out = one_step(point)
        if not out.requires_grad:
            raise AssertionError(f"{name}: no gradient flows from y1 back to y on {problem.name} (is y detached?).")
        cotangent = torch.randn(out.shape, generator=g, dtype=out.dtype)
        grad, *grads = torch.autograd.grad(out, [point, *params], cotangent, allow_unused=True)
    if grad is None:
        raise AssertionError(f"{name}: y1 does not depend on y through autograd on {problem.name}.")
    by_autograd = float((grad * direction).sum()) + sum(
        float((q * d).sum()) for q, d in zip(grads, along) if q is not None
    )

    def quotient(h: float) -> float:
        ends = []
        with torch.no_grad():
            saved = [p.clone() for p in params]
            for sign in (1.0, -1.0):
                for p, d, p0 in zip(params, along, saved):
                    p.copy_(p0 + sign * h * d)
                ends.append(one_step(base + sign * h * direction))
            for p, p0 in zip(params, saved):
                p.copy_(p0)
        return float((cotangent * (ends[0] - ends[1])).sum()) / (2 * h)

    steps = (1e-7, 1e-6, 1e-5, 1e-4, 1e-3)
    values = [quotient(h) for h in steps]
    spread, by_difference = min((abs(a - b), a) for a, b in zip(values, values[1:]))
    scale = max(1.0, abs(by_difference))
    defect = abs(by_autograd - by_difference) / scale
    allowed = max(1e-6, 10 * spread / scale)
    if allowed > 1e-3:
        raise AssertionError(
            f"{name}'s step is too irregular on {problem.name} to check its gradient by differences: quotients at "
            f"steps 10x apart differ by at least {spread:.2e}."
        )
    if defect > allowed:
        moved = " and of its learnable parameters" if params else ""
        raise AssertionError(
            f"{name}'s gradient is not that of its step on {problem.name}: along a random direction of y{moved}, "
            f"autograd gives {by_autograd:.8g} and difference quotients {by_difference:.8g} (trusted to "
            f"{allowed * scale:.1e}); is a term computed without gradient (detach, no_grad, .item(), float())?"
        )
    return defect


def _float64(stepper: AbstractStepper) -> AbstractStepper:
    """A float64 copy of a stepper with floating parameters or buffers (so that difference quotients in them are not
    float32 rounding), else the stepper itself."""
    tensors = [*stepper.parameters(), *stepper.buffers()]
    if not any(t.is_floating_point() and t.dtype != torch.float64 for t in tensors):
        return stepper
    return copy.deepcopy(stepper).to(torch.float64)


def check_stepper(stepper: AbstractStepper | type[AbstractStepper], dim: int | None = None) -> dict[str, Any]:
    """Run every check the stepper's declarations call for; return what was measured.

    ``dim`` is the width of the states the problems have; by default the width of the stepper's per-channel
    parameters (``MyScheme(dim=6)``), else 4 for a first-order and 2 for a second-order scheme.
    """
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
    startup = stepper.startup_evals
    if not (
        isinstance(startup, tuple) and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in startup)
    ):
        raise AssertionError(f"{name}.startup_evals must be a tuple of non-negative ints, got {startup!r}.")
    if startup and not stepper.multistep:
        raise AssertionError(f"{name} declares startup_evals, which only a multistep scheme has (it builds a history).")
    report: dict[str, Any] = {"protocol": check_protocol(stepper, dim)}
    check_evals(stepper, dim=dim)
    if stepper.order == 0:
        report["order"] = check_no_limit(stepper, default_problems(stepper, dim)[-1])
    else:
        report["order"] = check_order(stepper, dim=dim)
    if stepper.symplectic:
        report["symplectic"] = check_symplectic(stepper, dim=dim)
    if stepper.reversible:
        report["reversible"] = check_reversible(stepper, dim=dim)
    if not stepper.multistep:
        report["one_step"] = check_one_step(stepper, dim=dim)
    return report
