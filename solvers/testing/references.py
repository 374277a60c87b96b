"""Reference solutions (matrix exponential, Richardson-extrapolated classic RK4) and the error measures."""

from __future__ import annotations

import inspect
import math
import types
from collections import OrderedDict
from typing import Any

import torch
from torch import Tensor

from .._base import AbstractStepper, PhaseState
from . import thresholds as th
from .problems import Problem


def _flat(y: Tensor | PhaseState) -> Tensor:
    return torch.cat([y.x.reshape(-1), y.v.reshape(-1)]) if isinstance(y, PhaseState) else y.reshape(-1)


def _unflat(vector: Tensor, like: Tensor | PhaseState) -> Tensor | PhaseState:
    if isinstance(like, PhaseState):
        n = like.x.numel()
        return PhaseState(vector[:n].reshape(like.x.shape), vector[n:].reshape(like.v.shape))
    return vector.reshape(like.shape)


def _axpy(a: float, x, b):
    return PhaseState(*(xi + a * bi for xi, bi in zip(x, b))) if isinstance(x, PhaseState) else x + a * b


def _classic_rk4(F, y, T: float, n: int, every: int, t0: float = 0.0) -> list:
    """Reference integrator, independent of the steppers under test; returns every ``every``-th state after y (from
    ``t0``)."""
    dt, out = T / n, []
    for i in range(n):
        t = t0 + i * dt
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


def _linear_autonomous(F, y0, t0: float, T: float) -> bool:
    """Whether the limit field ``F`` is linear in the state and the same at every time of ``[t0, t0 + T]``, at random
    states of ``y0``'s form (to ``1e-12`` of its size): a limit field with a friction ``r / t`` or ``c tanh v`` of its
    own is neither, even on a linear problem, and gets no matrix-exponential reference."""
    g = torch.Generator().manual_seed(1234)
    u, w = (torch.randn(_flat(y0).shape, generator=g, dtype=torch.float64) for _ in range(2))
    mixed = _unflat(0.7 * u - 1.3 * w, y0)
    try:
        at = [_flat(F(t0 + c * T, mixed)) for c in (0.0, 0.5, 1.0)]
        parts = 0.7 * _flat(F(t0, _unflat(u, y0))) - 1.3 * _flat(F(t0, _unflat(w, y0)))
    except (ArithmeticError, ValueError, RuntimeError):
        return False
    size = max(float(parts.abs().max()), 1e-300)
    return all(bool(torch.isfinite(a).all()) and float((a - parts).abs().max()) <= 1e-12 * size for a in at)


_KEPT = 32
"""How many references :func:`reference` keeps (the latest used)."""
_REFERENCES: OrderedDict[tuple, tuple[list, list]] = OrderedDict()


def _fingerprint(value: Any, kept: list, depth: int = 0) -> Any:
    """A key equal to another value's only where both compute the same, or ``None`` where that cannot be told.

    A tensor by its dtype, shape and bytes (on the CPU, without a gradient, at most 2¹⁶ entries); a number or string
    by its type and ``repr``; a tuple, list or dict by its items; a Python module, class or builtin by itself (kept
    alive in ``kept``, so that its id stays its own); a plain function by its code, defaults, closure, the globals its
    code names and the data and functions it may read as an attribute of a module or class (``config.GAIN``,
    ``helpers.force``: :func:`_attributes`), all read now.
    Anything else (a module with parameters, an object with state, values nested more than six deep) is ``None``."""
    if value is None or isinstance(value, (bool, int, float, complex, str)):
        return (type(value).__name__, repr(value))
    if depth > 6:  # nested too deep (or a container holding itself)
        return None
    if isinstance(value, (types.ModuleType, type, types.BuiltinFunctionType)):
        kept.append(value)
        return ("object", id(value))
    if isinstance(value, Tensor):
        if value.requires_grad or value.device.type != "cpu" or value.numel() > 1 << 16 or value.is_sparse:
            return None
        raw = value.detach().contiguous().reshape(-1).view(torch.uint8)
        return ("tensor", str(value.dtype), tuple(value.shape), bytes(raw.tolist()))
    if isinstance(value, dict):
        value = sorted(value.items(), key=lambda item: repr(item[0]))
    if isinstance(value, (tuple, list)):
        items = tuple(_fingerprint(item, kept, depth + 1) for item in value)
        return None if any(item is None for item in items) else (type(value).__name__, items)
    if isinstance(value, types.FunctionType) and not value.__kwdefaults__:
        try:
            cells = [cell.cell_contents for cell in value.__closure__ or ()]
        except ValueError:  # a cell not yet filled
            return None
        names = sorted(set(value.__code__.co_names))
        named = [value.__globals__[name] for name in names if name in value.__globals__]
        parts = [_fingerprint(part, kept, depth + 1) for part in (value.__defaults__, *cells, *named)]
        parts += [_fingerprint(part, kept, depth + 1) for part in _attributes(named, names)]
        return None if any(part is None for part in parts) else ("function", value.__code__, tuple(names), *parts)
    return None


_DATA = (bool, int, float, complex, str, Tensor, tuple, list, dict, types.FunctionType)


def _attributes(named: list, names: list[str]) -> list:
    """What a function's code may read as an attribute of the modules and classes it names, and of the modules and
    classes reached that way (``config.GAIN``, ``helpers.force``, ``helpers.sub.force``): each ``(name, value)`` that
    is data or a plain function, at most 64 owners deep."""
    owners, seen, found = [], set(), []
    for owner in named:
        if isinstance(owner, (types.ModuleType, type)) and id(owner) not in seen:
            owners.append(owner)
            seen.add(id(owner))
    for owner in owners:
        if len(seen) > 64:
            break
        for name in names:
            attribute = inspect.getattr_static(owner, name, None)  # no property or module __getattr__ is run
            if isinstance(attribute, (staticmethod, classmethod)):
                attribute = attribute.__func__
            if isinstance(attribute, (types.ModuleType, type)) and id(attribute) not in seen:
                owners.append(attribute)
                seen.add(id(attribute))
            elif isinstance(attribute, _DATA):
                found.append((name, attribute))
    return found


def default_limit(stepper: AbstractStepper) -> bool:
    """Whether the stepper keeps the default ``limit_field`` (``x' = f``, resp. ``x' = v, v' = f``): its limit is the
    problem's own flow, whatever the field."""
    return getattr(stepper.limit_field, "__func__", None) is AbstractStepper.limit_field


def _reference_key(stepper: AbstractStepper, problem: Problem, kept: list) -> tuple | None:
    """What :func:`reference` depends on, where the stepper's limit field is the default one (``x' = f``, resp.
    ``x' = v, v' = f``): the problem's field, start, span and kind, whether the stepper is second-order, and the
    checkpoints and step the reference is solved at; ``None`` where a part cannot be told apart from another
    (:func:`_fingerprint`) or the stepper states a limit of its own."""
    if not default_limit(stepper):
        return None
    parts = (problem.field, problem.x0, problem.v0, problem.t0, problem.T, problem.linear, stepper.second_order)
    parts += (th.CHECKPOINTS, th.REFERENCE_DT)  # how it is solved
    key = tuple(_fingerprint(part, kept) for part in parts)
    return None if any(part is None for part in key) else key


def reference(stepper: AbstractStepper, problem: Problem) -> list:
    """The flow of ``stepper.limit_field`` from the problem's start at the checkpoints ``t0 + k T / 8``, ``k = 1..8``
    (:func:`_solve`), solved once for every stepper of its kind where the limit is the default one and the problem's
    field is a plain function of tensors and numbers (the fixed problems are the same for every scheme checked). The
    latest ``_KEPT`` are kept, keyed by :func:`_reference_key`: the field's code and every value it closes over or
    reads as a global (:func:`_fingerprint`), the start's bytes, the span, and whether the stepper is second-order."""
    kept: list = []
    key = _reference_key(stepper, problem, kept)
    if key is None:
        return _solve(stepper, problem)
    if key in _REFERENCES:
        _REFERENCES.move_to_end(key)
        return list(_REFERENCES[key][0])
    solved = _solve(stepper, problem)
    _REFERENCES[key] = (solved, kept)
    while len(_REFERENCES) > _KEPT:
        _REFERENCES.popitem(last=False)
    return list(solved)


@torch.no_grad()
def _solve(stepper: AbstractStepper, problem: Problem) -> list:
    """The flow of ``stepper.limit_field`` from the problem's start at the checkpoints ``t0 + k T / 8``, ``k = 1..8``.

    Exact (matrix exponential) where the problem is linear and the limit field is too (linear in the state and the
    same at every time: :func:`_linear_autonomous`; a scheme's own friction may make it neither). Otherwise classic
    RK4 with ``n`` and ``2n`` steps (step at most ``2**-10``, resp. ``2**-11``), Richardson-extrapolated,
    ``y_2n + (y_2n - y_n) / 15``: the ``dt**4`` terms cancel and the error is at the level of rounding (~1e-14).
    Where the two runs differ by more than ``REFERENCE_RTOL`` (15 times the finer run's error, relative to the
    problem's magnitude) at a checkpoint, the limit is stiffer there than those steps resolve (a scheme's own drag
    ``c |v| v`` at magnitude 1e3 relaxes in a thousandth of a time unit): :func:`_refined` solves it again, each span
    between checkpoints refined on its own until it holds.
    """
    y0 = problem.initial(stepper)
    F = stepper.limit_field(problem.field_for(stepper))
    t0 = problem.t0
    if not (problem.linear and _linear_autonomous(F, y0, t0, problem.T)):
        per_checkpoint = math.ceil(abs(problem.T) / th.CHECKPOINTS / th.REFERENCE_DT)  # T < 0: backwards in time
        coarse = _classic_rk4(F, y0, problem.T, per_checkpoint * th.CHECKPOINTS, per_checkpoint, t0)
        fine = _classic_rk4(F, y0, problem.T, 2 * per_checkpoint * th.CHECKPOINTS, 2 * per_checkpoint, t0)
        if all(_resolved(a, b, problem.scale) for a, b in zip(coarse, fine)):
            return [_axpy(1 / 15, b, _axpy(-1.0, b, a)) for a, b in zip(coarse, fine)]
        return _refined(F, y0, problem.T, 2 * per_checkpoint, t0, problem.scale)
    n = _flat(y0).numel()
    basis = torch.eye(n, dtype=torch.float64)
    M = torch.stack([_flat(F(t0, _unflat(basis[j], y0))) for j in range(n)], dim=1)  # columns: F(e_j)
    times = [problem.T * k / th.CHECKPOINTS for k in range(1, th.CHECKPOINTS + 1)]
    return [_unflat(_expm(t * M) @ _flat(y0), y0) for t in times]


def _resolved(coarse: Any, fine: Any, scale: float) -> bool:
    """Whether two RK4 runs of ``n`` and ``2n`` steps agree to ``REFERENCE_RTOL`` (relative to the larger of the
    state and ``scale``): the finer one's error, a fifteenth of that, is resolved and Richardson's step removes it."""
    return _error(coarse, fine, scale) <= th.REFERENCE_RTOL


def _refined(F, y0: Any, T: float, n: int, t0: float, scale: float) -> list:
    """The flow of ``F`` at the checkpoints, each span between two of them solved by RK4 with ``n`` and ``2n`` steps,
    ``n`` doubled (up to ``2**REFERENCE_REFINE`` times) until they agree to ``REFERENCE_RTOL``, and
    Richardson-extrapolated; the next span starts from that value. A limit that is stiff only near the start (a drag
    relaxing a large velocity) is refined only there."""
    span, y, out = T / th.CHECKPOINTS, y0, []
    for k in range(th.CHECKPOINTS):
        start, steps = t0 + k * span, n
        coarse = _classic_rk4(F, y, span, steps, steps, start)[-1]
        fine = _classic_rk4(F, y, span, 2 * steps, 2 * steps, start)[-1]
        while not _resolved(coarse, fine, scale) and steps < n * 2**th.REFERENCE_REFINE:
            steps *= 2
            coarse, fine = fine, _classic_rk4(F, y, span, 2 * steps, 2 * steps, start)[-1]
        y = _axpy(1 / 15, fine, _axpy(-1.0, fine, coarse))
        out.append(y)
    return out


def _error(y: Tensor | PhaseState, ref: Tensor | PhaseState, scale: float = 1.0) -> float:
    """``max|y - ref|`` relative to ``max|ref|``, or to ``scale`` (the problem's magnitude) where that is larger."""
    r = _flat(ref)
    return float((_flat(y) - r).abs().max() / r.abs().max().clamp_min(scale))


def _trajectory_error(ys: list, refs: list, scale: float = 1.0) -> float:
    """Largest relative error over the checkpoints (robust to a lucky cancellation at any one time)."""
    return max(_error(y, r, scale) for y, r in zip(ys, refs))
