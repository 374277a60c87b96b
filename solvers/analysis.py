"""The linear analysis of a scheme: stability, dispersion and error constants, from its coefficients or its step.

Every function takes a *scheme*: a stepper instance, a stepper class (constructed with no arguments), or a tableau's
coefficients as a mapping (``{"A": ..., "b": ...}``, ``{"A": ..., "bbar": ..., "b": ..., "c": ...}`` or
``{"drifts": ..., "kicks": ...}``, numbers or strings such as ``"1/6"``, as :func:`solvers.tableau` takes them). The
results are plain numbers and frozen dataclasses of numbers (``dataclasses.asdict`` gives a dict for JSON); nothing
here draws.

The test problems
-----------------
*First-order schemes* step ``y' = λ y`` and their amplification is a function of ``z = λ dt``. A step of a complex
``λ`` is taken in the real form ``(re, im)``, on which the field is ``[[Re λ, −Im λ], [Im λ, Re λ]]``; a scheme that
is linear on linear fields then maps ``y`` to ``R(z) y``. For an explicit Runge–Kutta tableau ``R`` is the stability
polynomial ``1 + z bᵀ(I − zA)⁻¹𝟙 = 1 + Σₖ z^{k+1} bᵀAᵏ𝟙`` (degree ≤ s), computed from the coefficients, exactly when
they are exact; for any other one-step scheme ``R`` is *measured from the step* (float64, under ``torch.no_grad()``,
on a plain function field): sampled on the unit circle, fitted by a polynomial of degree at most the number of field
evaluations a step makes, and checked at a second radius (a scheme whose ``R`` is no such polynomial is analysed
from its samples instead).

*Second-order schemes* (``x'' = a(t, x)``, state :class:`solvers.PhaseState`) step ``x'' = μ x`` and their
amplification is a function of ``z = μ dt²``; the harmonic oscillator ``x'' = −ω² x`` is ``z = −(ω dt)²``. The
one-step amplification matrix acts on ``(x, v)``. A scheme that carries its own damping (:class:`solvers.Damped`:
``x'' = a − γ x'``) is analysed with it: its matrix is that of the damped oscillator, and it depends on ``γ dt`` as
well as ``ω dt`` (pass ``dt``; the default ``dt = 1`` measures ``γ`` in units of the step). The field of a
second-order scheme sees ``x`` only, so damping that is not the scheme's own cannot be given to it.

*Schemes with a history* (``multistep``: heavy-ball momentum, the two-step leapfrog, Adams–Bashforth) are analysed on
the state together with its history: the amplification matrix is the companion matrix of the recurrence, measured
by stepping from each basis vector of ``(y, history)``, and its spectral radius takes the place of ``|R|``. A
multistep scheme takes part by defining two methods::

    def history(self, state) -> tuple[Tensor, ...]:
        '''The tensors of the running ``state`` that the next step reads (each shaped like y, or like x for a
        second-order scheme).'''

    def with_history(self, state, history: tuple[Tensor, ...]):
        '''``state`` with those tensors replaced by ``history`` (everything else kept).'''

The running state these methods see is the one a first step from ``init`` returns (so start-up steps are over). A
multistep scheme without them is refused in one line.

Per-channel parameters (a learnable momentum, rate or gate per channel) are analysed channel by channel: the test
problem has as many channels as the scheme's widest parameter, intervals are the smallest over the channels, and
``channel=k`` asks for one.

Conventions
-----------
- Stability: ``|R(z)| ≤ 1`` (one-step schemes), resp. spectral radius ``≤ 1 + STABLE_TOLERANCE`` for measured
  matrices. The *real stability interval* is the largest ``r`` with ``|R(−x)| ≤ 1`` on ``[−r, 0]``, the *imaginary*
  one the largest ``r`` with ``|R(iy)| ≤ 1`` on ``[−r, r]`` (both as nodepy defines them); the *oscillator stability
  interval* the largest ``ω dt`` up to which the oscillator's step is stable. For a polynomial ``R`` they are found
  from the polynomial ``|R|² − 1`` on the axis: its sign at 0 (from its lowest nonzero coefficient, exactly for an
  exact tableau), its positive real roots, its sign between them (exactly for an exact tableau), then bisection at
  the first root where it turns positive. Measured matrices are scanned on a grid of step :data:`SCAN_STEP` up to
  ``r_max``, then bisected; a scheme unstable at every one of ``r = 0.1, 0.05, 0.025, 0.0125`` with ``ρ − 1``
  growing has interval 0 (an instability that begins at 0, like Euler's on the imaginary axis). ``math.inf`` means
  stable at every point looked at (up to ``r_max`` for a scan).
- Dispersion and dissipation (second-order schemes): with ``λ`` the numerical eigenvalue that follows the exact one
  ``e^{μ₊ dt}`` (``μ₊`` the eigenvalue with ``Im ≥ 0`` of the scheme's limit dynamics, linearised: ``±iω`` for the
  plain oscillator), the *phase error* per step is ``arg λ − Im μ₊ dt`` and the *amplitude error* per step is
  ``|λ| / |e^{μ₊ dt}| − 1`` (negative: the scheme damps). An error per step ``~ C (ω dt)^{q+1}`` is of order ``q``
  (velocity Verlet's phase error is ``(ω dt)³/24``: dispersion order 2); an error below :data:`NONE_TOLERANCE` at
  every sampled ``ω dt`` is none (``None``: Verlet's amplitude error).
- Error constants: for an explicit Runge–Kutta tableau of order ``p`` the principal error coefficients are, for each
  rooted tree ``τ`` of ``p + 1`` vertices, ``(Σ bᵢΦᵢ(τ) − 1/γ(τ)) / σ(τ)`` (the coefficient of ``h^{p+1} F(τ)`` in
  the local error), and the principal error norm is their 2-norm, as nodepy's ``principal_error_norm`` defines it.
  For a Runge–Kutta–Nyström tableau, and a kick–drift splitting read as one (its Runge–Kutta–Nyström tableau:
  stages at the kicks), the analogue collects the ``h^{p+1}`` terms of the local error: the position's from Nyström
  trees of weight ``p + 1`` and the velocity's from trees of weight ``p + 2``, each residual divided by its tree's
  symmetry (``_order_conditions.rkn_error_coefficients``); the norm is the 2-norm of both. That analogue is this
  project's, not a nodepy quantity.
- Exactness: coefficients given as ints, ``Fraction``s or strings are exact. Coefficients a stepper class stores as
  floats are read back as the simplest fraction with denominator at most :data:`RECOGNISED_DENOMINATOR` that rounds
  to the same float, when every one has one (RK4's ``0.1666…`` reads as ``1/6``); the stability polynomial and the
  error coefficients are then exact (``Fraction``), else floats. Orders are those the engine derives from the
  coefficients as given (``_order_conditions``).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from numbers import Real
from typing import Any

import torch
from torch import Tensor

from ._base import AbstractStepper, PhaseState
from ._order_conditions import (
    MAX_ORDER,
    coefficients,
    rk_error_coefficients,
    rk_order,
    rkn_error_coefficients,
    rkn_order,
)

STABLE_TOLERANCE = 1e-10
"""A measured amplification is stable when its spectral radius is at most ``1 + STABLE_TOLERANCE``."""

SCAN_STEP = 1 / 64
"""The grid on which measured stability intervals are scanned before bisection."""

NONE_TOLERANCE = 1e-12
"""A phase or amplitude error below this at every sampled ``ω dt`` is no error (order ``None``)."""

RECOGNISED_DENOMINATOR = 10**6
"""Float coefficients are read as fractions with denominators up to this (see the module docstring)."""

DISPERSION_SAMPLES = (0.2, 0.1, 0.05, 0.025)
"""The ``ω dt`` at which the orders of the phase and amplitude errors are fitted."""

_PROBES = (0.1, 0.05, 0.025, 0.0125)


# -- results --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Polynomial:
    """A polynomial by its coefficients from ``z⁰`` up: ``Fraction``s when ``exact``, else floats (or complex)."""

    coefficients: tuple
    exact: bool

    def __call__(self, z: complex) -> complex:
        out = 0j
        for c in reversed(self.coefficients):
            out = out * z + complex(c)
        return out

    def floats(self) -> tuple[float, ...]:
        """The coefficients as floats (the real parts)."""
        return tuple(complex(c).real for c in self.coefficients)


@dataclass(frozen=True)
class StabilityRegion:
    """``radius[i][j]``: ``|R(z)|`` (one-step schemes) or the amplification's spectral radius at
    ``z = real[j] + i·imag[i]``; the region is where it is at most one."""

    real: tuple[float, ...]
    imag: tuple[float, ...]
    radius: tuple[tuple[float, ...], ...]


@dataclass(frozen=True)
class Dispersion:
    """Phase and amplitude errors per step at each ``omega_dt`` (see the module docstring for the conventions)."""

    omega_dt: tuple[float, ...]
    phase_error: tuple[float, ...]
    amplitude_error: tuple[float, ...]


@dataclass(frozen=True)
class DispersionOrders:
    """The orders ``q`` of the phase (dispersion) and amplitude (dissipation) errors per step, ``~ (ω dt)^{q+1}``;
    ``None`` when there is no such error; the fitted slopes (``q + 1``) beside them."""

    dispersion_order: int | None
    dissipation_order: int | None
    dispersion_slope: float | None
    dissipation_slope: float | None


@dataclass(frozen=True)
class ErrorTerm:
    """One principal error coefficient: the order condition's sum as text, the coefficient of ``h^{p+1} F(τ)``,
    and the part of the state it enters (``"y"``; ``"x"`` or ``"v"`` for a Nyström tableau)."""

    condition: str
    coefficient: Fraction | float
    part: str


@dataclass(frozen=True)
class ErrorCoefficients:
    """The principal (order ``p + 1``) error coefficients of a tableau of order ``p`` and their 2-norm
    (``norm``; ``norm_squared`` exact when ``exact``)."""

    kind: str
    order: int
    terms: tuple[ErrorTerm, ...]
    norm: float
    norm_squared: Fraction | float
    exact: bool


# -- what a scheme is -----------------------------------------------------------------------------------------------


def _stepper(scheme: Any) -> AbstractStepper:
    if isinstance(scheme, AbstractStepper):
        return scheme
    if isinstance(scheme, type) and issubclass(scheme, AbstractStepper):
        try:
            return scheme()
        except Exception as error:  # noqa: BLE001 - say which class could not be made
            raise ValueError(
                f"cannot analyse {scheme.__name__}: it is not constructible with no arguments "
                f"({type(error).__name__}: {error}); pass an instance."
            ) from None
    if isinstance(scheme, Mapping):
        from ._coefficients import tableau

        return tableau(**scheme)
    raise TypeError(
        f"a scheme is a stepper instance, a stepper class or a mapping of coefficients, got {type(scheme).__name__}."
    )


def _name(scheme: Any) -> str:
    if isinstance(scheme, type):
        return scheme.__name__
    if isinstance(scheme, Mapping):
        return "the tableau"
    return type(scheme).__name__


def _recognised(values: Sequence[Any]) -> list | None:
    """The values as exact fractions, if every float among them has one (see the module docstring); else None."""
    out = []
    for x in values:
        if isinstance(x, float):
            q = Fraction(x).limit_denominator(RECOGNISED_DENOMINATOR)
            if float(q) != x:
                return None
            out.append(q)
        else:
            out.append(x)
    return out


def _exactly(groups: list) -> tuple[list, bool]:
    """The coefficient groups in exact arithmetic when possible (given exactly, or floats read back as fractions)."""
    converted, exact = coefficients(*groups)
    if exact:
        return converted, True
    flat, shapes = [], []
    for g in groups:
        shape = []
        for item in g:
            if isinstance(item, Sequence) and not isinstance(item, str):
                shape.append(len(item))
                flat.extend(item)
            else:
                shape.append(None)
                flat.append(item)
        shapes.append(shape)
    flat_exact = _recognised([float(Fraction(x.strip())) if isinstance(x, str) else x for x in flat])
    if flat_exact is None:
        return converted, False
    out, k = [], 0
    for shape in shapes:
        group = []
        for n in shape:
            if n is None:
                group.append(flat_exact[k])
                k += 1
            else:
                group.append(tuple(flat_exact[k : k + n]))
                k += n
        out.append(tuple(group))
    return coefficients(*out)


def tableau_of(scheme: Any) -> dict[str, Any] | None:
    """The coefficients of a scheme that has them, as given: ``{"kind": "runge_kutta", "A", "b", "c"}``,
    ``{"kind": "runge_kutta_nystrom", "A", "bbar", "b", "c"}`` or ``{"kind": "splitting", "drifts", "kicks"}``;
    ``None`` for a scheme defined by its step alone. A stepper holds them as its ``tableau`` value (a
    :class:`~solvers.ButcherTableau`, :class:`~solvers.NystromTableau` or :class:`~solvers.Splitting`: a named
    scheme, a :class:`~solvers.Tableau`), or gives them by a method ``coefficients()`` returning such a mapping (a
    learnable family at its current values; ``None`` where its values differ per channel)."""
    from ._coefficients import VALUES

    value = None if isinstance(scheme, Mapping) else getattr(scheme, "tableau", None)
    if isinstance(value, VALUES):
        if value.kind == "splitting":
            return {"kind": "splitting", "drifts": value.exact[0], "kicks": value.exact[1]}
        keys = ("A", "b", "c") if value.kind == "runge_kutta" else ("A", "bbar", "b", "c")
        return {"kind": value.kind, **dict(zip(keys, value.exact))}
    if isinstance(scheme, Mapping):
        source: Any = dict(scheme)
    else:
        source = scheme
        method = getattr(scheme, "coefficients", None)
        if callable(method) and not isinstance(scheme, type):
            try:
                given = method()
            except TypeError:
                given = None
            if isinstance(given, Mapping):
                source = dict(given)

    def get(key: str) -> Any:
        return source.get(key) if isinstance(source, dict) else getattr(source, key, None)

    A, b, c, bbar, drifts, kicks = (get(k) for k in ("A", "b", "c", "bbar", "drifts", "kicks"))
    if drifts is not None and kicks is not None:
        if not all(isinstance(u, Real) for u in (*drifts, *kicks)):
            return None  # one value per channel: analysed channel by channel from the step
        return {"kind": "splitting", "drifts": tuple(drifts), "kicks": tuple(kicks)}
    if isinstance(A, Sequence) and isinstance(b, Sequence):
        rows = tuple(tuple(row) for row in A)
        if bbar is not None:
            return {"kind": "runge_kutta_nystrom", "A": rows, "bbar": tuple(bbar), "b": tuple(b), "c": tuple(c)}
        return {"kind": "runge_kutta", "A": rows, "b": tuple(b), "c": None if c is None else tuple(c)}
    return None


def _first_order_tableau(scheme: Any) -> dict[str, Any] | None:
    t = tableau_of(scheme)
    return t if t is not None and t["kind"] == "runge_kutta" else None


def _lower(A: Sequence[Sequence[Any]]) -> tuple[tuple, ...]:
    return tuple(tuple(row[:i]) for i, row in enumerate(A))


def _nystrom(t: dict[str, Any]) -> tuple:
    """``(Ā, b̄, b, c)`` of a Nyström tableau or of a splitting read as one (stages at the kicks)."""
    if t["kind"] == "runge_kutta_nystrom":
        return _lower(t["A"]), t["bbar"], t["b"], t["c"]
    from ._composition import as_nystrom, merged_sequence

    ops = merged_sequence(t["drifts"], t["kicks"])
    # the exact coefficients, when the given ones are exact, merged as the engine merges them
    (drifts, kicks), exact = _exactly([t["drifts"], t["kicks"]])
    if not exact:
        return as_nystrom(ops)
    seq: list[list] = []
    for i, value in enumerate(drifts):
        for kind, coefficient in (("drift", value), *((("kick", kicks[i]),) if i < len(kicks) else ())):
            if coefficient == 0:
                continue
            if seq and seq[-1][0] == kind:
                seq[-1][1] += coefficient
            else:
                seq.append([kind, coefficient])
    c, w, time = [], [], Fraction(0)
    for kind, coefficient in seq:
        if coefficient == 0:
            continue
        if kind == "drift":
            time += coefficient
        else:
            c.append(time)
            w.append(coefficient)
    A = tuple(tuple(w[j] * (c[k] - c[j]) for j in range(k)) for k in range(len(w)))
    return A, tuple(wk * (1 - ck) for wk, ck in zip(w, c)), tuple(w), tuple(c)


# -- the stability polynomial of a tableau --------------------------------------------------------------------------


def tableau_stability_polynomial(A: Sequence[Sequence[Any]], b: Sequence[Any]) -> Polynomial:
    """``R(z) = 1 + Σₖ z^{k+1} bᵀAᵏ𝟙`` of an explicit Runge–Kutta tableau (``A`` strictly lower triangular, by
    rows): ``Fraction`` coefficients when the coefficients are exact (or read back as fractions), else floats."""
    (A, b), exact = _exactly([_lower(A), b])
    s = len(b)
    zero, one = (Fraction(0), Fraction(1)) if exact else (0.0, 1.0)
    vector = [one] * s
    out = [one]
    for _ in range(s):
        out.append(sum((bi * vi for bi, vi in zip(b, vector)), zero))
        vector = [sum((a * vector[j] for j, a in enumerate(A[i])), zero) for i in range(s)]
    while len(out) > 1 and out[-1] == 0:
        out.pop()
    return Polynomial(tuple(out), exact)


# -- measuring a step -----------------------------------------------------------------------------------------------


def _width(stepper: AbstractStepper) -> int:
    sizes = [int(p.shape[-1]) for p in (*stepper.parameters(), *stepper.buffers()) if p.ndim >= 1]
    return max(sizes, default=1)


def _as_float64(stepper: AbstractStepper) -> AbstractStepper:
    try:
        return copy.deepcopy(stepper).to(torch.float64)
    except Exception:  # noqa: BLE001 - a stepper that cannot be copied is measured as it is
        return stepper


def _history_methods(stepper: AbstractStepper) -> tuple[Callable, Callable] | None:
    if not getattr(stepper, "multistep", False):
        return None
    history, with_history = getattr(stepper, "history", None), getattr(stepper, "with_history", None)
    if not (callable(history) and callable(with_history)):
        raise ValueError(
            f"cannot analyse {type(stepper).__name__}: it keeps a history in its state (multistep) and does not "
            "expose it; define history(state) and with_history(state, tensors) (see solvers.analysis)."
        )
    return history, with_history


class _Measured:
    """The amplification matrices of a stepper's step on the linear test problem, measured in float64."""

    def __init__(self, scheme: Any, dt: float = 1.0):
        self.name = _name(scheme)
        original = _stepper(scheme)
        self.stepper = _as_float64(original)
        self.second = bool(self.stepper.second_order)
        self.width = _width(self.stepper)
        self.dt = float(dt)
        self.methods = _history_methods(self.stepper)
        self.coordinates = 2 if self.second else 1  # complex coordinates of y
        self.histories = 0
        self.evals = 0
        if self.methods is not None or not self.second:
            self._probe()

    # the field of the test problem, in real form: u has shape (N, B, 2, W), the axis -2 holds (re, im)
    def _field(self, coefficient: Tensor, counter: list | None = None) -> Callable:
        re, im = coefficient.real.reshape(-1, 1, 1), coefficient.imag.reshape(-1, 1, 1)

        def field(t: Any, u: Tensor) -> Tensor:
            if counter is not None:
                counter.append(1)
            u0, u1 = u[..., 0, :], u[..., 1, :]
            return torch.stack((re * u0 - im * u1, im * u0 + re * u1), dim=-2)

        return field

    def _coefficient(self, z: Tensor) -> Tensor:
        return z / (self.dt**2 if self.second else self.dt)

    def _y(self, parts: list[Tensor]) -> Any:
        return PhaseState(parts[0], parts[1]) if self.second else parts[0]

    def _parts(self, y: Any) -> list[Tensor]:
        return [y.x, y.v] if self.second else [y]

    def _step(self, field: Callable, y: Any, state: Any) -> tuple[Any, Any]:
        try:
            with torch.no_grad():
                return self.stepper.step(field, 0.0, y, self.dt, state)
        except ValueError:
            raise
        except Exception as error:  # noqa: BLE001 - one line naming the scheme
            raise ValueError(
                f"cannot analyse {self.name}: its step on the linear test problem failed "
                f"({type(error).__name__}: {error})."
            ) from None

    def _init(self, field: Callable, y: Any) -> Any:
        try:
            with torch.no_grad():
                return self.stepper.init(field, 0.0, y)
        except Exception as error:  # noqa: BLE001
            raise ValueError(
                f"cannot analyse {self.name}: init on the linear test problem failed ({type(error).__name__}: {error})."
            ) from None

    def _running_state(self, field: Callable, batch: tuple[int, ...]) -> Any:
        """The state after one step from ``init`` (start-up over), for the history protocol."""
        generator = torch.Generator().manual_seed(0)
        parts = [
            torch.randn(*batch, 2, self.width, generator=generator, dtype=torch.float64)
            for _ in range(self.coordinates)
        ]
        y = self._y(parts)
        _, state = self._step(field, y, self._init(field, y))
        return state

    def _probe(self) -> None:
        counter: list = []
        z = torch.tensor([-0.5 + 0.25j], dtype=torch.complex128)
        field = self._field(self._coefficient(z), counter)
        if self.methods is not None:
            state = self._running_state(field, (1, 1))
            try:
                self.histories = len(tuple(self.methods[0](state)))
            except Exception as error:  # noqa: BLE001
                raise ValueError(
                    f"cannot analyse {self.name}: history(state) failed ({type(error).__name__}: {error})."
                ) from None
        else:
            y = self._y([torch.ones(1, 1, 2, self.width, dtype=torch.float64) for _ in range(self.coordinates)])
            counter.clear()
            self._step(field, y, self._init(field, y))
            self.evals = len(counter)

    @property
    def size(self) -> int:
        """The complex coordinates of ``(y, history)``."""
        return self.coordinates + self.histories

    def matrices(self, z: Tensor) -> Tensor:
        """``(N, W, n, n)`` complex amplification matrices at the ``N`` values ``z`` (first-order: ``z = λ dt``;
        second-order: ``z = μ dt²``)."""
        z = torch.as_tensor(z, dtype=torch.complex128).reshape(-1)
        N, n, W = z.numel(), self.size, self.width
        field = self._field(self._coefficient(z))
        B = n + 1  # the basis, and one random combination to check linearity
        generator = torch.Generator().manual_seed(1)
        alpha = torch.complex(
            torch.randn(n, generator=generator, dtype=torch.float64),
            torch.randn(n, generator=generator, dtype=torch.float64),
        )
        coords = torch.zeros(B, n, dtype=torch.complex128)
        coords[:n] = torch.eye(n, dtype=torch.complex128)
        coords[n] = alpha
        real = torch.stack((coords.real, coords.imag), dim=-1)  # (B, n, 2)
        inputs = [real[:, k, :, None].expand(N, B, 2, W).clone() for k in range(n)]  # each (N, B, 2, W)
        y = self._y(inputs[: self.coordinates])
        if self.methods is not None:
            history, with_history = self.methods
            template = self._running_state(field, (N, B))
            try:
                state = with_history(template, tuple(inputs[self.coordinates :]))
            except Exception as error:  # noqa: BLE001
                raise ValueError(
                    f"cannot analyse {self.name}: with_history(state, tensors) failed ({type(error).__name__}: "
                    f"{error})."
                ) from None
        else:
            state = self._init(field, y)
        y1, state1 = self._step(field, y, state)
        outputs = self._parts(y1)
        if self.methods is not None:
            outputs = outputs + list(self.methods[0](state1))
        columns = []
        for out in outputs:
            if not isinstance(out, Tensor) or tuple(out.shape) != (N, B, 2, W):
                raise ValueError(
                    f"cannot analyse {self.name}: its step (or history) gave a tensor of shape "
                    f"{tuple(getattr(out, 'shape', ()))}, not the state's {(N, B, 2, W)}."
                )
            columns.append(torch.complex(out[..., 0, :], out[..., 1, :]))  # (N, B, W)
        result = torch.stack(columns, dim=-1)  # (N, B, W, n): row b is the image of input b
        M = result[:, :n].permute(0, 2, 3, 1)  # (N, W, n_out, n_in)
        predicted = torch.einsum("nwij,j->nwi", M, alpha)
        actual = result[:, n]  # (N, W, n)
        scale = 1.0 + M.abs().amax(dim=(-1, -2)) * alpha.abs().sum()
        if not bool(((predicted - actual).abs().amax(dim=-1) <= 1e-9 * scale).all()):
            raise ValueError(
                f"cannot analyse {self.name}: its step is not linear in its state on a linear field, so it has no "
                "amplification matrix."
            )
        return M

    def channels(self, channel: int | None) -> slice | int:
        if channel is None:
            return slice(None)
        if not (isinstance(channel, int) and 0 <= channel < self.width):
            raise ValueError(f"channel must be an int in [0, {self.width}) for {self.name}, got {channel!r}.")
        return slice(channel, channel + 1)


def _radius(M: Tensor) -> Tensor:
    """Spectral radii of ``(..., n, n)`` complex matrices; a 2×2 real one from its trace and determinant (accurate
    where its eigenvalues nearly coincide, as at velocity Verlet's ``ω dt = 2``)."""
    if M.shape[-1] == 1:
        return M[..., 0, 0].abs()
    if M.shape[-1] == 2 and bool((M.imag == 0).all()):
        R = M.real
        tr = R[..., 0, 0] + R[..., 1, 1]
        det = R[..., 0, 0] * R[..., 1, 1] - R[..., 0, 1] * R[..., 1, 0]
        disc = tr * tr - 4 * det
        root = torch.sqrt(disc.abs())
        real_pair = torch.maximum((tr + root).abs(), (tr - root).abs()) / 2
        complex_pair = torch.sqrt(det.abs())
        return torch.where(disc >= 0, real_pair, complex_pair)
    return torch.linalg.eigvals(M).abs().amax(dim=-1)


def _eigenvalues(M: Tensor) -> Tensor:
    if M.shape[-1] == 2 and bool((M.imag == 0).all()):
        R = M.real
        tr = R[..., 0, 0] + R[..., 1, 1]
        det = R[..., 0, 0] * R[..., 1, 1] - R[..., 0, 1] * R[..., 1, 0]
        half = torch.sqrt(torch.complex(tr * tr - 4 * det, torch.zeros_like(tr))) / 2
        return torch.stack((tr / 2 + half, tr / 2 - half), dim=-1)
    return torch.linalg.eigvals(M)


# -- first-order schemes ----------------------------------------------------------------------------------------------


def _first_order(scheme: Any, what: str) -> None:
    stepper = scheme if isinstance(scheme, (AbstractStepper, type)) else None
    if stepper is not None and getattr(stepper, "second_order", False):
        raise ValueError(
            f"{what} is for first-order schemes; {_name(scheme)} is second-order (use the oscillator analysis: "
            "oscillator_matrix, oscillator_stability_interval, dispersion)."
        )


def _fitted(measured: _Measured) -> Polynomial | None:
    """``R`` of a one-step first-order scheme as a polynomial of degree at most its evaluations, or None."""
    if measured.methods is not None or measured.second or measured.width != 1 or measured.evals == 0:
        return None
    degree = measured.evals
    count = 2 * degree + 2
    k = torch.arange(count, dtype=torch.float64)
    z = torch.exp(2j * math.pi * k / count)
    R = measured.matrices(z)[:, 0, 0, 0]
    coefficients = [(R * z ** (-j)).mean() for j in range(count)]
    if any(abs(complex(c)) > 1e-12 for c in coefficients[degree + 1 :]):
        return None
    poly = [complex(c) for c in coefficients[: degree + 1]]
    if any(abs(c.imag) > 1e-12 for c in poly):
        return None
    polynomial = Polynomial(tuple(c.real for c in poly), exact=False)
    check = torch.tensor([3.0 + 1.0j, -2.5 - 0.5j], dtype=torch.complex128)
    measured_check = measured.matrices(check)[:, 0, 0, 0]
    for zc, rc in zip(check.tolist(), measured_check.tolist()):
        if abs(polynomial(zc) - rc) > 1e-9 * (1 + abs(rc)):
            return None
    while len(polynomial.coefficients) > 1 and abs(polynomial.coefficients[-1]) <= 1e-13:
        polynomial = Polynomial(polynomial.coefficients[:-1], exact=False)
    return polynomial


def stability_polynomial(scheme: Any) -> Polynomial:
    """The stability polynomial ``R(z)`` of a first-order scheme, coefficients from ``z⁰`` up: exact for a tableau
    (``Fraction``s), measured and fitted for any other one-step scheme whose ``R`` is a polynomial (floats); a
    one-line ValueError for schemes with a history or a non-polynomial ``R``."""
    _first_order(scheme, "stability_polynomial")
    t = _first_order_tableau(scheme)
    if t is not None:
        return tableau_stability_polynomial(t["A"], t["b"])
    measured = _Measured(scheme)
    if measured.second:
        _first_order(measured.stepper, "stability_polynomial")
    fitted = _fitted(measured)
    if fitted is None:
        raise ValueError(
            f"{measured.name} has no stability polynomial: "
            + ("it has a history (use amplification_matrix)." if measured.methods else "its R(z) is not a polynomial.")
        )
    return fitted


def amplification_matrix(
    scheme: Any, z: complex, dt: float = 1.0, channel: int | None = None
) -> tuple[tuple[complex, ...], ...]:
    """The one-step amplification matrix at ``z`` (first-order: ``z = λ dt`` for ``y' = λ y``; second-order:
    ``z = μ dt²`` for ``x'' = μ x``), measured from the step, on ``(y, history)``: 1×1 (``R(z)``) for a one-step
    first-order scheme, 2×2 on ``(x, v)`` for a one-step second-order one, larger with a history."""
    measured = _Measured(scheme, dt)
    if channel is None and measured.width > 1:
        raise ValueError(f"{measured.name} has per-channel parameters ({measured.width}): pass channel=k.")
    M = measured.matrices(torch.tensor([complex(z)], dtype=torch.complex128))[0, measured.channels(channel)][0]
    return tuple(tuple(complex(x) for x in row) for row in M.tolist())


def amplification(scheme: Any, z: complex, dt: float = 1.0, channel: int | None = None) -> complex:
    """``R(z)`` of a one-step first-order scheme (exact polynomial of a tableau, evaluated; else measured)."""
    _first_order(scheme, "amplification")
    t = _first_order_tableau(scheme)
    if t is not None:
        return tableau_stability_polynomial(t["A"], t["b"])(complex(z))
    M = amplification_matrix(scheme, z, dt, channel)
    if len(M) != 1:
        raise ValueError(f"{_name(scheme)} has a history: its amplification is a matrix (amplification_matrix).")
    return M[0][0]


def spectral_radius(scheme: Any, z: complex, dt: float = 1.0, channel: int | None = None) -> float:
    """``|R(z)|``, or the spectral radius of the amplification matrix at ``z`` (largest over channels when
    ``channel`` is None)."""
    measured = _Measured(scheme, dt)
    M = measured.matrices(torch.tensor([complex(z)], dtype=torch.complex128))[0, measured.channels(channel)]
    return float(_radius(M).max())


def stability_region(
    scheme: Any,
    real: tuple[float, float] = (-5.0, 1.0),
    imag: tuple[float, float] = (-4.0, 4.0),
    points: tuple[int, int] = (121, 161),
    dt: float = 1.0,
    channel: int | None = None,
) -> StabilityRegion:
    """``|R|`` (or the spectral radius) on a grid of ``points[0]`` real by ``points[1]`` imaginary values of ``z``
    (first-order: ``z = λ dt``; second-order: ``z = μ dt²``); exact polynomial of a tableau, else measured."""
    re = torch.linspace(real[0], real[1], points[0], dtype=torch.float64)
    im = torch.linspace(imag[0], imag[1], points[1], dtype=torch.float64)
    grid = torch.complex(re[None, :].expand(points[1], -1), im[:, None].expand(-1, points[0]))
    t = _first_order_tableau(scheme)
    if t is not None:
        p = tableau_stability_polynomial(t["A"], t["b"])
        radius = _horner(torch.tensor([complex(c) for c in p.coefficients], dtype=torch.complex128), grid).abs()
    else:
        measured = _Measured(scheme, dt)
        rows = []
        flat = grid.reshape(-1)
        for chunk in flat.split(4096):
            rows.append(_radius(measured.matrices(chunk)[:, measured.channels(channel)]).amax(dim=-1))
        radius = torch.cat(rows).reshape(points[1], points[0])
    return StabilityRegion(tuple(re.tolist()), tuple(im.tolist()), tuple(tuple(row) for row in radius.tolist()))


def _horner(coefficients: Tensor, z: Tensor) -> Tensor:
    out = torch.zeros_like(z)
    for c in reversed(coefficients):
        out = out * z + c
    return out


# polynomials on an axis, as coefficient lists from the constant up (exact or float)


def _pmul(p: list, q: list) -> list:
    zero = p[0] * 0
    out = [zero] * (len(p) + len(q) - 1)
    for i, a in enumerate(p):
        if a == 0:
            continue
        for j, b in enumerate(q):
            out[i + j] += a * b
    return out


def _padd(p: list, q: list) -> list:
    n = max(len(p), len(q))
    zero = (p or q)[0] * 0
    return [(p[i] if i < len(p) else zero) + (q[i] if i < len(q) else zero) for i in range(n)]


def _on_real_axis(p: Polynomial) -> list:
    """``R(−x)² − 1`` as a polynomial in ``x``."""
    c = [x if k % 2 == 0 else -x for k, x in enumerate(p.coefficients)]
    out = _pmul(c, c)
    out[0] -= 1
    return out


def _on_imaginary_axis(p: Polynomial) -> list:
    """``|R(iy)|² − 1`` as a polynomial in ``y`` (real coefficients)."""
    zero = p.coefficients[0] * 0
    re = [zero] * len(p.coefficients)
    im = [zero] * len(p.coefficients)
    for k, x in enumerate(p.coefficients):
        sign = -1 if (k // 2) % 2 else 1  # i^k = 1, i, −1, −i, ...
        if k % 2 == 0:
            re[k] = sign * x
        else:
            im[k] = sign * x
    out = _padd(_pmul(re, re), _pmul(im, im))
    out[0] -= 1
    return out


def _evaluate(coefficients: list, x: Any) -> Any:
    out = coefficients[0] * 0
    for c in reversed(coefficients):
        out = out * x + c
    return out


def _first_exit(poly: list, exact: bool) -> float:
    """The largest ``r`` with ``poly ≤ 0`` on ``[0, r]``, for a real polynomial with ``poly(0) = 0``."""
    scale = max(abs(float(c)) for c in poly)
    significant = [k for k, c in enumerate(poly) if (c != 0 if exact else abs(float(c)) > 1e-11 * max(scale, 1.0))]
    if not significant or significant[0] == 0 and float(poly[0]) > 0:
        return 0.0 if significant else math.inf
    m = significant[0]
    if float(poly[m]) > 0:
        return 0.0  # unstable right from zero
    q = poly[m : significant[-1] + 1]
    sign = (lambda x: _evaluate(q, Fraction(x))) if exact else (lambda x: _evaluate(q, x))
    if len(q) == 1:
        return math.inf
    lead = complex(float(q[-1]))
    companion = torch.zeros(len(q) - 1, len(q) - 1, dtype=torch.complex128)
    companion[1:, :-1] = torch.eye(len(q) - 2, dtype=torch.complex128)
    companion[:, -1] = torch.tensor([-float(c) / lead.real for c in q[:-1]], dtype=torch.complex128)
    roots = torch.linalg.eigvals(companion).tolist()
    candidates = sorted({r.real for r in roots if r.real > 0 and abs(r.imag) <= 1e-6 * (1 + abs(r))})
    lo = 0.0
    for k, root in enumerate(candidates):
        test = (root + candidates[k + 1]) / 2 if k + 1 < len(candidates) else 2 * root + 1
        if float(sign(test)) > 0:
            hi = test
            for _ in range(200):
                mid = (lo + hi) / 2
                if mid in (lo, hi):
                    break
                if float(sign(mid)) > 0:
                    hi = mid
                else:
                    lo = mid
            return lo
        lo = test
    return math.inf


def _scan(radius: Callable[[Tensor], Tensor], r_max: float) -> float:
    """The largest ``r`` with ``radius(r) ≤ 1 + STABLE_TOLERANCE`` on ``[0, r]``: a grid, then bisection."""
    probes = radius(torch.tensor(_PROBES, dtype=torch.float64)) - 1
    if bool((probes > STABLE_TOLERANCE).all()) and bool((probes[:-1] > probes[1:]).all()):
        return 0.0
    grid = torch.arange(1, int(math.ceil(r_max / SCAN_STEP)) + 1, dtype=torch.float64) * SCAN_STEP
    lo = 0.0
    for chunk in grid.split(512):
        unstable = (radius(chunk) > 1 + STABLE_TOLERANCE).nonzero()
        if unstable.numel():
            index = int(unstable[0, 0])
            hi = float(chunk[index])
            lo = float(chunk[index - 1]) if index > 0 else lo
            for _ in range(60):
                mid = (lo + hi) / 2
                if mid in (lo, hi):
                    break
                if float(radius(torch.tensor([mid], dtype=torch.float64))[0]) > 1 + STABLE_TOLERANCE:
                    hi = mid
                else:
                    lo = mid
            return lo
        lo = float(chunk[-1])
    return math.inf


def _interval(scheme: Any, axis: str, dt: float, channel: int | None, r_max: float) -> float:
    _first_order(scheme, f"{axis}_stability_interval")
    t = _first_order_tableau(scheme)
    if t is not None:
        p = tableau_stability_polynomial(t["A"], t["b"])
        on_axis = _on_real_axis(p) if axis == "real" else _on_imaginary_axis(p)
        return _first_exit(on_axis, p.exact)
    measured = _Measured(scheme, dt)
    if measured.second:
        _first_order(measured.stepper, f"{axis}_stability_interval")
    fitted = _fitted(measured)
    if fitted is not None:
        on_axis = _on_real_axis(fitted) if axis == "real" else _on_imaginary_axis(fitted)
        return _first_exit(on_axis, False)
    direction = -1.0 if axis == "real" else 1j
    where = measured.channels(channel)
    return _scan(lambda r: _radius(measured.matrices(direction * r)[:, where]).amax(dim=-1), r_max)


def real_stability_interval(scheme: Any, dt: float = 1.0, channel: int | None = None, r_max: float = 64.0) -> float:
    """The largest ``r`` with ``|R(−x)| ≤ 1`` for ``x ∈ [0, r]`` (a first-order scheme; the spectral radius for one
    with a history); ``math.inf`` when there is no bound (up to ``r_max`` for a scan)."""
    return _interval(scheme, "real", dt, channel, r_max)


def imaginary_stability_interval(
    scheme: Any, dt: float = 1.0, channel: int | None = None, r_max: float = 64.0
) -> float:
    """The largest ``r`` with ``|R(iy)| ≤ 1`` for ``y ∈ [−r, r]`` (a first-order scheme; real tableaux are symmetric
    in ``y``, and measured schemes are scanned on ``[0, r]``, since real coefficients make ``|R(−iy)| = |R(iy)|``)."""
    return _interval(scheme, "imaginary", dt, channel, r_max)


# -- second-order schemes ---------------------------------------------------------------------------------------------


def _second_order(measured: _Measured, what: str) -> None:
    if not measured.second:
        raise ValueError(
            f"{what} is for second-order schemes (x'' = a(t, x)); {measured.name} is first-order (use "
            "stability_polynomial, real_stability_interval, imaginary_stability_interval)."
        )


def oscillator_matrix(
    scheme: Any, omega_dt: float, dt: float = 1.0, channel: int | None = None
) -> tuple[tuple[float, ...], ...]:
    """The one-step amplification matrix of the harmonic oscillator ``x'' = −ω² x`` at ``ω dt = omega_dt`` (with
    the scheme's own damping, if it has one), acting on ``(x, v)`` (and the history, for a multistep scheme)."""
    measured = _Measured(scheme, dt)
    _second_order(measured, "oscillator_matrix")
    if channel is None and measured.width > 1:
        raise ValueError(f"{measured.name} has per-channel parameters ({measured.width}): pass channel=k.")
    z = torch.tensor([-(float(omega_dt) ** 2) + 0j], dtype=torch.complex128)
    M = measured.matrices(z)[0, measured.channels(channel)][0]
    return tuple(tuple(float(x.real) for x in row) for row in M.tolist())


def oscillator_stability_interval(
    scheme: Any, dt: float = 1.0, channel: int | None = None, r_max: float = 16.0
) -> float:
    """The largest ``ω dt`` up to which the oscillator's step is stable (spectral radius ``≤ 1 +
    STABLE_TOLERANCE``); velocity Verlet's and semi-implicit Euler's is 2."""
    measured = _Measured(scheme, dt)
    _second_order(measured, "oscillator_stability_interval")
    where = measured.channels(channel)
    return _scan(lambda h: _radius(measured.matrices(-(h**2) + 0j)[:, where]).amax(dim=-1), r_max)


def _limit_eigenvalue(measured: _Measured, omega: Tensor, channel: slice | int) -> Tensor:
    """``μ₊``: the eigenvalue with ``Im ≥ 0`` of the scheme's limit dynamics on the oscillator, per ``ω`` and channel
    (``(N, W)``)."""
    stepper = measured.stepper
    N, W = omega.numel(), measured.width
    mu = -(omega**2)
    field = measured._field(torch.complex(mu, torch.zeros_like(mu)))
    try:
        limit = stepper.limit_field(field)
    except Exception as error:  # noqa: BLE001
        raise ValueError(
            f"cannot compare {measured.name} with an exact flow: it has no small-step limit ({error})."
        ) from None
    basis = torch.zeros(N, 2, 2, W, dtype=torch.float64)
    x = basis.clone()
    v = basis.clone()
    x[:, 0, 0] = 1.0  # input 0: x = 1
    v[:, 1, 0] = 1.0  # input 1: v = 1
    with torch.no_grad():
        out = limit(0.0, PhaseState(x, v))
    G = torch.stack((out.x[..., 0, :], out.v[..., 0, :]), dim=-1)  # (N, B=2, W, 2): image of input b
    G = G.permute(0, 2, 3, 1)[:, channel]  # (N, W, 2, 2)
    tr = G[..., 0, 0] + G[..., 1, 1]
    det = G[..., 0, 0] * G[..., 1, 1] - G[..., 0, 1] * G[..., 1, 0]
    root = torch.sqrt(torch.complex(tr * tr - 4 * det, torch.zeros_like(tr)))
    plus = tr / 2 + root / 2
    return torch.where(plus.imag >= 0, plus, tr / 2 - root / 2)


def _dispersion(measured: _Measured, omega_dt: Sequence[float], channel: slice | int) -> tuple[Tensor, Tensor]:
    h = torch.tensor([float(x) for x in omega_dt], dtype=torch.float64)
    M = measured.matrices(torch.complex(-(h**2), torch.zeros_like(h)))[:, channel]  # (N, W, n, n)
    mu = _limit_eigenvalue(measured, h / measured.dt, channel) * measured.dt  # (N, W)
    exact = torch.exp(mu)
    eigenvalues = _eigenvalues(M)  # (N, W, n)
    nearest = (eigenvalues - exact[..., None]).abs().argmin(dim=-1, keepdim=True)
    principal = eigenvalues.gather(-1, nearest)[..., 0]
    phase = torch.angle(principal) - mu.imag
    amplitude = principal.abs() * torch.exp(-mu.real) - 1
    return phase, amplitude


def dispersion(scheme: Any, omega_dt: Sequence[float], dt: float = 1.0, channel: int | None = None) -> Dispersion:
    """Phase and amplitude errors per step of the oscillator at each ``ω dt`` (see the module docstring)."""
    measured = _Measured(scheme, dt)
    _second_order(measured, "dispersion")
    if channel is None and measured.width > 1:
        raise ValueError(f"{measured.name} has per-channel parameters ({measured.width}): pass channel=k.")
    phase, amplitude = _dispersion(measured, omega_dt, measured.channels(channel))
    return Dispersion(tuple(float(x) for x in omega_dt), tuple(phase[:, 0].tolist()), tuple(amplitude[:, 0].tolist()))


def _order_of(h: Sequence[float], errors: Sequence[float]) -> tuple[int | None, float | None]:
    if all(abs(e) <= NONE_TOLERANCE for e in errors):
        return None, None
    pairs = [
        (math.log(abs(errors[k]) / abs(errors[k + 1])) / math.log(h[k] / h[k + 1]))
        for k in range(len(h) - 1)
        if abs(errors[k]) > NONE_TOLERANCE and abs(errors[k + 1]) > NONE_TOLERANCE
    ]
    if not pairs:
        return None, None
    slope = pairs[-1]
    return max(int(round(slope)) - 1, 0), slope


def dispersion_orders(scheme: Any, omega: float = 1.0, channel: int | None = None) -> DispersionOrders:
    """The dispersion (phase) and amplitude (dissipation) orders as ``dt → 0`` on the oscillator of frequency
    ``omega`` (with the scheme's own damping, if any), at ``ω dt`` in :data:`DISPERSION_SAMPLES`: the slope of the
    log error against ``log ω dt`` at the two smallest, minus one; ``None`` for an error that is zero to
    :data:`NONE_TOLERANCE` (velocity Verlet's amplitude). For a scheme without a time scale of its own this is the
    same as ``ω dt → 0`` at any ``dt``; a damped scheme's error depends on ``γ dt`` too, so the problem is held fixed
    and ``dt`` shrinks. With per-channel parameters and no ``channel``, the lowest order over the channels."""
    phases, amplitudes = [], []
    for h in DISPERSION_SAMPLES:
        measured = _Measured(scheme, h / float(omega))
        _second_order(measured, "dispersion_orders")
        phase, amplitude = _dispersion(measured, (h,), measured.channels(channel))
        phases.append(phase[0])
        amplitudes.append(amplitude[0])
    results = []
    for errors in (torch.stack(phases), torch.stack(amplitudes)):  # (samples, W)
        per_channel = [_order_of(DISPERSION_SAMPLES, errors[:, w].tolist()) for w in range(errors.shape[1])]
        known = [r for r in per_channel if r[0] is not None]
        results.append(min(known) if known else (None, None))
    return DispersionOrders(results[0][0], results[1][0], results[0][1], results[1][1])


# -- error constants --------------------------------------------------------------------------------------------------


def _norm(terms: Sequence[ErrorTerm], exact: bool) -> tuple[float, Any]:
    squared = sum((t.coefficient * t.coefficient for t in terms), Fraction(0) if exact else 0.0)
    return math.sqrt(float(squared)), squared


def error_coefficients(scheme: Any) -> ErrorCoefficients:
    """The principal error coefficients of a tableau (explicit Runge–Kutta, Runge–Kutta–Nyström, or a kick–drift
    splitting read as its Runge–Kutta–Nyström tableau) and their norm (see the module docstring); exact when the
    coefficients are (or read back as fractions). A scheme without coefficients is a one-line ValueError."""
    t = tableau_of(scheme)
    if t is None:
        raise ValueError(
            f"error constants need a tableau's coefficients; {_name(scheme)} is defined by its step alone."
        )
    if t["kind"] == "runge_kutta":
        A = _lower(t["A"])
        order = rk_order(A, t["b"], t["c"])
        if order.at_least:
            raise ValueError(f"{_name(scheme)} has order at least {MAX_ORDER}: its error terms are beyond the engine.")
        (A, b), exact = _exactly([A, t["b"]])
        raw = rk_error_coefficients(A, b, None, order.order + 1)
        terms = tuple(ErrorTerm(text, value, "y") for text, _, value in raw)
    else:
        A, bbar, b, c = _nystrom(t)
        order = rkn_order(A, bbar, b, c)
        if order.at_least:
            raise ValueError(f"{_name(scheme)} has order at least {MAX_ORDER}: its error terms are beyond the engine.")
        (A, bbar, b, c), exact = _exactly([A, bbar, b, c])
        raw = rkn_error_coefficients(A, bbar, b, c, order.order + 1)
        terms = tuple(ErrorTerm(text, value, "x" if which == "bbar" else "v") for text, _, value, which in raw)
    norm, squared = _norm(terms, exact)
    return ErrorCoefficients(t["kind"], order.order, terms, norm, squared, exact)


def principal_error_norm(scheme: Any) -> float:
    """The 2-norm of the principal error coefficients (nodepy's ``principal_error_norm`` for a Runge–Kutta tableau;
    its analogue for Nyström tableaux and splittings)."""
    return error_coefficients(scheme).norm


# -- everything at once -----------------------------------------------------------------------------------------------


def analyze(scheme: Any, dt: float = 1.0, channel: int | None = None) -> dict[str, Any]:
    """The numbers of the analysis as a plain dict: ``order``, ``second_order``, and for first-order schemes
    ``stability_polynomial`` (floats from ``z⁰`` up, and ``stability_polynomial_exact`` as strings when exact; None
    for a scheme with a history), ``real_stability_interval``, ``imaginary_stability_interval``; for second-order
    ones ``oscillator_stability_interval``, ``dispersion_order``, ``dissipation_order`` (None, with a
    ``dispersion_note`` saying why, for a scheme without a small-step limit to compare with); and
    ``principal_error_norm`` for tableaux (None otherwise). ``math.inf`` marks an unbounded interval."""
    stepper = _stepper(scheme)
    target = scheme if isinstance(scheme, Mapping) else stepper
    t = tableau_of(target)
    out: dict[str, Any] = {"order": int(stepper.order), "second_order": bool(stepper.second_order)}
    if t is not None:
        if t["kind"] == "runge_kutta":
            derived = rk_order(_lower(t["A"]), t["b"], t["c"])
        else:
            derived = rkn_order(*_nystrom(t))
        out["order"] = derived.order
        out["order_at_least"] = derived.at_least
    if stepper.second_order:
        out["oscillator_stability_interval"] = oscillator_stability_interval(target, dt, channel)
        try:
            orders = dispersion_orders(target, channel=channel)
            out["dispersion_order"] = orders.dispersion_order
            out["dissipation_order"] = orders.dissipation_order
        except ValueError as error:  # no small-step limit to compare with (velocity_mix)
            out["dispersion_order"] = out["dissipation_order"] = None
            out["dispersion_note"] = str(error)
    else:
        try:
            p = stability_polynomial(target)
            out["stability_polynomial"] = list(p.floats())
            if p.exact:
                out["stability_polynomial_exact"] = [str(c) for c in p.coefficients]
        except ValueError:
            out["stability_polynomial"] = None
        out["real_stability_interval"] = real_stability_interval(target, dt, channel)
        out["imaginary_stability_interval"] = imaginary_stability_interval(target, dt, channel)
    out["principal_error_norm"] = principal_error_norm(target) if t is not None else None
    return out
