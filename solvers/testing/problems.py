"""Problems with known solutions: builders from a seed (float64, ``torch.Generator``), and the default sets."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from .._base import AbstractStepper, PhaseState
from . import thresholds as th


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
    scale: float = 1.0
    """The magnitude of the states (:func:`scaled`): errors are measured relative to it."""
    t0: float = 0.0
    """Where the problem starts: it runs on ``[t0, t0 + T]`` (a scheme whose step depends on the absolute time, or
    that is defined only on some times, is measured there; :func:`started`)."""

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


_ROOT2 = math.sqrt(2.0)
"""The problems' time dependence mixes frequencies 1, 2 and √2: no period, so a scheme that wraps its time (``t mod
2π``) or clamps it is seen."""


def _cos(t: Any) -> Any:
    """``cos t`` of a number, or of a tensor with its gradient (a scheme whose abscissae are learnable evaluates the
    field at a time that carries one)."""
    return torch.cos(t) if isinstance(t, Tensor) else math.cos(t)


def _sin(t: Any) -> Any:
    return torch.sin(t) if isinstance(t, Tensor) else math.sin(t)


def started(problem: Problem, t0: float) -> Problem:
    """The same problem started at ``t0``: its field, state and horizon unchanged, run on ``[t0, t0 + T]``."""
    if t0 == problem.t0:
        return problem
    return dataclasses.replace(problem, t0=float(t0), name=f"{problem.name} from t0={t0:.6g}")


def generator(seed: int) -> torch.Generator:
    """A CPU generator seeded with ``seed``: every problem and draw is built from one."""
    return torch.Generator().manual_seed(int(seed))


def scaled(problem: Problem, magnitude: float) -> Problem:
    """The same problem at another magnitude: states ``m x`` and field ``m f(t, x / m)`` (for a second-order problem
    both ``x`` and ``v`` are scaled, the acceleration likewise). Its solution is ``m`` times the original's, so a
    correct scheme's relative error, symplecticity and reversibility do not change; a scheme that clips, sub-steps or
    switches on the size of its state shows it. The potential scales to ``m² V(x / m)``."""
    if magnitude == 1.0:
        return problem
    from ._common import each

    m, potential = float(magnitude), problem.potential
    return dataclasses.replace(
        problem,
        name=f"{problem.name} at magnitude {m:.3g}",
        field=each(problem.field, lambda f: ScaledField(f, m)),
        x0=m * problem.x0,
        v0=None if problem.v0 is None else m * problem.v0,
        potential=None if potential is None else (lambda x: m * m * potential(x / m)),
        scale=problem.scale * m,
    )


class ScaledField:
    """``m f(t, x / m)``: a field at magnitude ``m`` (the same problem, its solution ``m`` times the original's); a
    field that offers ``joint(x, v) = (f(x), J_f(x) v)`` (or ``joint_at(t, x, v)``) keeps it, scaled."""

    def __init__(self, field: Callable, m: float):
        self.field, self.m = field, m
        if hasattr(field, "joint"):
            self.joint = self._joint
        if hasattr(field, "joint_at"):
            self.joint_at = self._joint_at

    def __call__(self, t, x):
        return self.m * self.field(t, x / self.m)

    def _joint(self, x: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        value, tangent = self.field.joint(x / self.m, v)
        return self.m * value, tangent

    def _joint_at(self, t, x: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        value, tangent = self.field.joint_at(t, x / self.m, v)
        return self.m * value, tangent


class Weighted(torch.nn.Module):
    """``f(t, x) ⊙ g + b``: a field with trainable per-channel weights (float64, ``g`` near 1 and ``b`` near 0 at the
    field's ``magnitude``, drawn from ``seed``), an ``nn.Module`` as a model's fields are: a step's gradient with
    respect to the weights of the field it steps is a claim too, checked against difference quotients in them
    (:func:`~solvers.testing.check_gradients`) and in float32 against float64
    (:func:`~solvers.testing.check_contexts`)."""

    def __init__(self, field: Callable, width: int, seed: int, magnitude: float = 1.0):
        super().__init__()
        g = generator(seed + 17)
        self.field = field
        self.gain = torch.nn.Parameter(1 + 0.1 * torch.randn(width, generator=g, dtype=torch.float64))
        self.bias = torch.nn.Parameter(0.1 * magnitude * torch.randn(width, generator=g, dtype=torch.float64))

    def forward(self, t, x: Tensor) -> Tensor:
        return self.field(t, x) * self.gain.to(x.dtype) + self.bias.to(x.dtype)


def weighted(field: Any, width: int, seed: int, magnitude: float = 1.0) -> Any:
    """``field`` as :class:`Weighted` (a :class:`~solvers.Block`'s attention and FFN each, with their own weights)."""
    from ._common import each

    made = iter(range(2))
    return each(field, lambda f: Weighted(f, width, seed + 101 * next(made), magnitude))


def linear_problem(seed: int = 0, dim: int = 3, scale: float = 1.0, T: float = 1.0, batch: int = 2) -> Problem:
    """``x' = A x`` with ``A`` random of spectral norm ``scale``."""
    g = generator(seed)
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
    g = generator(seed)
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
    g = generator(seed)
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
    """Pendulums ``x'' = -w² (1 + modulation cos(2t + phase)) sin x + forcing cos(√2 (t + phase))``: nonlinear;
    time-dependent unless ``forcing = modulation = 0``. The modulation makes time and state enter the force jointly (a
    scheme that evaluates at the wrong time fails there even if it handles an additive forcing right); a ``phase``
    that is not a multiple of π makes the force's time dependence neither even nor odd (an inverse that runs time
    backwards through ``-t`` fails there)."""
    g = generator(seed)
    w2 = 0.5 + 1.5 * torch.rand(dim, generator=g, dtype=torch.float64)
    x0 = 2 * torch.rand(batch, dim, generator=g, dtype=torch.float64) - 1
    v0 = torch.randn(batch, dim, generator=g, dtype=torch.float64)

    def field(t, x):
        s = t + phase
        return -w2 * (1 + modulation * _cos(2 * s)) * torch.sin(x) + forcing * _cos(_ROOT2 * s)

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
    g = generator(seed)
    U, _ = torch.linalg.qr(torch.randn(dim, dim, generator=g, dtype=torch.float64))
    V, _ = torch.linalg.qr(torch.randn(dim, dim, generator=g, dtype=torch.float64))
    S = U @ torch.diag(torch.linspace(1.0, 3.0, dim, dtype=torch.float64)) @ V.T
    omega = omega_min + (omega_max - omega_min) * torch.rand(dim, generator=g, dtype=torch.float64)
    A = S @ torch.diag(omega**2) @ torch.linalg.inv(S)
    x0 = torch.randn(batch, dim, generator=g, dtype=torch.float64)
    v0 = torch.randn(batch, dim, generator=g, dtype=torch.float64)
    return Problem(f"coupled(seed={seed}, dim={dim}, T={T:g})", lambda t, x: -x @ A.T, x0, v0, T, linear=True)


def nonlinear_problem(seed: int = 0, dim: int = 4, T: float = 1.0, batch: int = 2) -> Problem:
    """``x' = (1 + ½ cos 2t) tanh(x A) + ½ sin √2 t``, ``A`` random of spectral norm 1: a first-order problem of any
    width, nonlinear and coupled, with time and state entering jointly."""
    g = generator(seed)
    A = torch.randn(dim, dim, generator=g, dtype=torch.float64)
    A = A / torch.linalg.matrix_norm(A, ord=2)
    x0 = torch.randn(batch, dim, generator=g, dtype=torch.float64)

    def field(t, x):
        return (1 + 0.5 * _cos(2 * t)) * torch.tanh(x @ A) + 0.5 * _sin(_ROOT2 * t)

    return Problem(f"nonlinear(seed={seed}, dim={dim}, T={T:g})", field, x0, None, T, linear=False)


def stepper_width(stepper: AbstractStepper) -> int | None:
    """The channel count a per-channel stepper is built for: the last dimension of its parameters and buffers that
    have more than one element (``None`` if there are none, so any width will do)."""
    widths = {int(t.shape[-1]) for t in (*stepper.parameters(), *stepper.buffers()) if t.dim() and t.shape[-1] > 1}
    if len(widths) > 1:
        raise AssertionError(
            f"{type(stepper).__name__} has parameters of widths {sorted(widths)}: pass the state width (dim=...) to "
            "the check."
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
    Block steppers: :func:`block_problem` (3 tokens of width 2, or the stepper's width) and one of ``BLOCK_TOKENS``
    tokens of width ``BLOCK_WIDTH`` (or the stepper's) whose attention depends on time.
    """
    if _is_block(stepper):  # a layer: a small block, and one of transformer width whose attention depends on time
        fixed = dim if dim is not None else stepper_width(stepper)
        wide = fixed if fixed is not None else th.BLOCK_WIDTH
        return [
            block_problem(second_order=stepper.second_order, dim=fixed or 2),
            block_problem(seed=1, second_order=stepper.second_order, tokens=th.BLOCK_TOKENS, dim=wide, T=th.ORDER_T,
                          phase=0.7),
        ]  # fmt: skip
    width = _width(stepper, dim)
    pendulum = pendulum_problem(seed=2, T=th.ORDER_T, modulation=0.5, dim=width if stepper.second_order else width // 2)
    if stepper.second_order:
        return [coupled_problem(seed=1, dim=width, T=th.ORDER_T), pendulum]
    first = [linear_problem(seed=0, dim=width, T=th.ORDER_T), nonlinear_problem(seed=3, dim=width, T=th.ORDER_T)]
    return first + ([pendulum] if width % 2 == 0 else [])


def wide_problem(stepper: AbstractStepper, dim: int | None = None) -> Problem:
    """The order check's problem of a transformer's shape: ``BLOCK_TOKENS`` tokens of width ``BLOCK_WIDTH`` (or the
    stepper's) coupled as attention couples them (:func:`token_problem`), where a scheme that takes another path for
    larger states shows; the fixed problems of :func:`default_problems` are narrow."""
    fixed = dim if dim is not None else stepper_width(stepper)
    return token_problem(
        seed=5, tokens=th.BLOCK_TOKENS, dim=fixed or th.BLOCK_WIDTH, T=th.ORDER_T, second_order=stepper.second_order
    )


class _TanhMLP:
    """``f(x) = tanh(x W₁) W₂`` per token, with its exact tangent ``joint(x, v) = (f(x), (tanh'(x W₁) ⊙ v W₁) W₂)``."""

    def __init__(self, W1: Tensor, W2: Tensor):
        self.W1, self.W2 = W1, W2

    def __call__(self, t, x: Tensor) -> Tensor:
        return torch.tanh(x @ self.W1) @ self.W2

    def joint(self, x: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        h = torch.tanh(x @ self.W1)
        return h @ self.W2, ((1 - h * h) * (v @ self.W1)) @ self.W2


class _TimedTanhMLP:
    """``(1 + ½ sin(3t + phase)) tanh(x W₁) W₂``: the FFN of a layer whose weights depend on depth-time (knots), so a
    layer that evaluates it at the wrong time shows; its tangent at ``t`` is ``joint_at(t, x, v)`` (it has no
    ``joint``: that is an autonomous field's)."""

    def __init__(self, W1: Tensor, W2: Tensor, phase: float):
        self.mlp, self.phase = _TanhMLP(W1, W2), phase

    def gain(self, t):
        return 1 + 0.5 * _sin(3 * t + self.phase)

    def __call__(self, t, x: Tensor) -> Tensor:
        return self.gain(t) * self.mlp(t, x)

    def joint_at(self, t, x: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        f, df = self.mlp.joint(x, v)
        return self.gain(t) * f, self.gain(t) * df


def block_problem(
    seed: int = 0,
    second_order: bool = False,
    tokens: int = 3,
    dim: int = 2,
    T: float = 0.5,
    batch: int = 1,
    ffn: bool = True,
    phase: float | None = None,
) -> Problem:
    """A small transformer-like layer as a :class:`~solvers.Block` of two fields, for checking block steppers.

    ``attention(t, x) = softmax(x Q (x K)ᵀ) x V - x`` mixes the ``tokens`` (a Laplacian-like force, so a second-order
    state sees a wave); ``ffn(t, x) = tanh(x W₁) W₂`` acts on each token. Both are smooth and autonomous, weights drawn
    from ``seed`` at scale ``1/sqrt(dim)``; with a ``phase`` both are modulated in time, the attention by ``(1 + ½
    cos(2t + phase))`` and the FFN by ``(1 + ½ sin(3t + phase))`` (a layer that evaluates either at the wrong time
    shows: under ``model.parameterization=ode`` with knots a model's FFN depends on depth-time too); ``x0`` (and ``v0``
    if ``second_order``) standard normal, ``(batch, tokens, dim)``; ``ffn=False`` leaves the FFN out (a block of
    attention alone). The reference is the block stepper's ``limit_field`` (the block's ODE), integrated by classic RK4.
    """
    from .._splitting import Block

    g = generator(seed)
    Q, K, V, W1, W2 = (torch.randn(dim, dim, generator=g, dtype=torch.float64) / dim**0.5 for _ in range(5))

    def attention(t, x):
        weights = torch.softmax((x @ Q) @ (x @ K).transpose(-2, -1), dim=-1)  # (B, N, N)
        mixed = weights @ (x @ V) - x
        return mixed if phase is None else (1 + 0.5 * _cos(2 * t + phase)) * mixed

    mlp = (_TanhMLP(W1, W2) if phase is None else _TimedTanhMLP(W1, W2, phase)) if ffn else None

    x0 = torch.randn(batch, tokens, dim, generator=g, dtype=torch.float64)
    v0 = torch.randn(batch, tokens, dim, generator=g, dtype=torch.float64) if second_order else None
    kind = "second" if second_order else "first"
    timed = "" if phase is None else f", phase={phase:g}"
    name = f"block(seed={seed}, {kind}-order, {tokens} tokens, dim={dim}{'' if ffn else ', no FFN'}{timed})"
    return Problem(name, Block(attention, mlp), x0, v0, T, False)


def token_problem(
    seed: int = 0,
    tokens: int = 3,
    dim: int = 2,
    batch: int = 2,
    T: float = 0.5,
    second_order: bool = False,
    phase: float = 0.7,
) -> Problem:
    """States of shape ``(batch, tokens, dim)`` and a field that couples the tokens of each sample as attention does:
    ``f(t, X) = (1 + ½ cos(2t + phase)) (softmax(X Q (X K)ᵀ) X V - X) + ½ sin(√2 (t + phase)) c`` per sample
    (``dx/dt``, or the acceleration if ``second_order``), weights drawn from ``seed`` at scale ``1/sqrt(dim)``.

    The field insists on states shaped like ``y`` (three dimensions, the last two ``(tokens, dim)``): a step that
    flattens the batch into rows before calling it (and so mixes samples, or tokens of different samples) fails there
    with a message saying so, where a field acting row by row cannot tell."""
    g = generator(seed)
    Q, K, V = (torch.randn(dim, dim, generator=g, dtype=torch.float64) / dim**0.5 for _ in range(3))
    c = torch.randn(dim, generator=g, dtype=torch.float64)
    x0 = torch.randn(batch, tokens, dim, generator=g, dtype=torch.float64)
    v0 = torch.randn(batch, tokens, dim, generator=g, dtype=torch.float64) if second_order else None
    kind = "acceleration" if second_order else "velocity"
    name = f"tokens(seed={seed}, {batch} x {tokens} tokens x {dim}, {kind}, T={T:g})"

    def field(t, x):
        if x.dim() != 3 or tuple(x.shape[-2:]) != (tokens, dim):
            raise AssertionError(
                f"the field of {name} was called with a {tuple(x.shape)} tensor; a step must hand a field states "
                f"shaped like y, (batch, {tokens}, {dim}): attention couples the tokens of each sample, so a state "
                "flattened into rows mixes samples."
            )
        s = t + phase
        weights = torch.softmax((x @ Q) @ (x @ K).transpose(-2, -1), dim=-1)  # (B, N, N)
        return (1 + 0.5 * _cos(2 * s)) * (weights @ (x @ V) - x) + 0.5 * _sin(_ROOT2 * s) * c

    return Problem(name, field, x0, v0, T, False)


def row_problem(
    seed: int = 0, dim: int = 3, batch: int = 2, T: float = 0.5, second_order: bool = False, phase: float = 0.7
) -> Problem:
    """States of shape ``(batch, dim)`` and a field acting on each row, coupling its channels:
    ``f(t, x) = (1 + ½ cos(2t + phase)) (tanh(x A) - ½ x) + ½ sin(√2 (t + phase)) c`` (``dx/dt``, or the acceleration if
    ``second_order``), ``A`` random of spectral norm 1. Like :func:`token_problem`, the field insists on states shaped
    like ``y``."""
    g = generator(seed)
    A = torch.randn(dim, dim, generator=g, dtype=torch.float64)
    A = A / torch.linalg.matrix_norm(A, ord=2)
    c = torch.randn(dim, generator=g, dtype=torch.float64)
    x0 = torch.randn(batch, dim, generator=g, dtype=torch.float64)
    v0 = torch.randn(batch, dim, generator=g, dtype=torch.float64) if second_order else None
    kind = "acceleration" if second_order else "velocity"
    name = f"rows(seed={seed}, {batch} x {dim}, {kind}, T={T:g})"

    def field(t, x):
        if x.dim() != 2 or x.shape[-1] != dim:
            raise AssertionError(
                f"the field of {name} was called with a {tuple(x.shape)} tensor; a step must hand a field states "
                f"shaped like y, (batch, {dim})."
            )
        s = t + phase
        return (1 + 0.5 * _cos(2 * s)) * (torch.tanh(x @ A) - 0.5 * x) + 0.5 * _sin(_ROOT2 * s) * c

    return Problem(name, field, x0, v0, T, False)


def _half_width(stepper: AbstractStepper, dim: int | None) -> int:
    """The width of a second-order problem for ``stepper``: its state's width, halved for a first-order scheme (which
    runs it as ``[x, v]``); 0 when a first-order scheme's width is odd (no second-order problem fits it)."""
    width = _width(stepper, dim)
    if stepper.second_order:
        return width
    return width // 2 if width % 2 == 0 else 0


def _is_block(stepper: Any) -> bool:
    from ._common import is_block

    return is_block(stepper)


def _time_problem(stepper: AbstractStepper, dim: int | None, seed: int) -> Problem:
    """A nonlinear problem whose force depends on time neither evenly nor oddly, of the stepper's width: modulated,
    forced pendulums with a phase (as ``[x, v]`` for a first-order scheme), or, at an odd first-order width,
    :func:`nonlinear_problem` (``cos 2t`` and ``sin √2 t`` together); for a block stepper, a block whose attention
    depends on time."""
    if _is_block(stepper):
        width = dim if dim is not None else stepper_width(stepper)
        return block_problem(seed=seed, second_order=stepper.second_order, dim=width or 4, batch=2, phase=0.7)
    size = _half_width(stepper, dim)
    if size:
        return pendulum_problem(seed=seed, dim=size, modulation=0.5, phase=0.7)
    return nonlinear_problem(seed=seed, dim=_width(stepper, dim))
