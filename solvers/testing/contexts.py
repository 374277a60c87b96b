"""The execution context as part of what is drawn: a scheme steps the same in every context a model runs it in.

A model runs a step in float32 with autograd on (training), under ``torch.inference_mode()`` (generation), or with
autograd off, and its field is an ``nn.Module``; the other checks run float64, autograd off, a plain function. A scheme
that branches on any of these (a cheaper path when grad is on, Euler under ``inference_mode`` or for a module field)
passes them and is wrong where it is used. Here every drawn instance is run in a drawn context and compared with the
reference context (float64, no grad, a plain function).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import strategies as st
from torch import Tensor, nn

from .._base import AbstractStepper, PhaseState
from . import thresholds as th
from ._common import _cast, _copy, _float64, _fresh_step, _instance, _name
from ._drawn import check_drawn
from .problems import stepper_width
from .protocol import float32_allowance
from .references import _flat, _unflat
from .strategies import Instance, instances


@dataclass(frozen=True)
class Context:
    """Where a step runs: its ``dtype``, its grad ``mode`` (``"no_grad"``, ``"enable_grad"`` with a state that requires
    grad, ``"inference_mode"``) and its ``field`` kind (``"function"`` or ``"module"``, an ``nn.Module``)."""

    dtype: torch.dtype
    mode: str
    field: str

    def __str__(self) -> str:
        kind = "a plain function" if self.field == "function" else "an nn.Module field"
        return f"{str(self.dtype).removeprefix('torch.')}, {self.mode}, {kind}"

    def grad(self) -> AbstractContextManager:
        return {"no_grad": torch.no_grad, "enable_grad": torch.enable_grad, "inference_mode": torch.inference_mode}[
            self.mode
        ]()


@dataclass(frozen=True)
class _InContext:
    instance: Instance
    context: Context

    def __str__(self) -> str:
        return f"{self.instance}; in context ({self.context})"


REFERENCE = Context(torch.float64, "no_grad", "function")
"""The context the other checks run in; every drawn context is compared with it."""

CONTEXTS = tuple(
    Context(dtype, mode, field)
    for dtype, mode in (
        (torch.float64, "no_grad"),
        (torch.float32, "no_grad"),
        (torch.float64, "enable_grad"),
        (torch.float32, "enable_grad"),
        (torch.float64, "inference_mode"),
        (torch.float32, "inference_mode"),
    )
    for field in ("function", "module")
)
"""The drawn contexts: float64 and float32, each with autograd off, on (a state that requires grad, as in training)
and under ``inference_mode``, each with a plain function and an ``nn.Module`` field."""


class _Counted:
    """A field that counts its evaluations, rounding the state to float64 and the result back to the state's dtype
    (so the field is exact and the step's own arithmetic is what a float32 run measures)."""

    def __init__(self, field: Callable):
        self.field, self.calls = field, 0

    def __call__(self, t, x):
        self.calls += 1
        return self.field(t, x.to(torch.float64)).to(x.dtype)


class _ModuleField(nn.Module):
    """The same field as an ``nn.Module`` (every model's field is one)."""

    def __init__(self, counted: _Counted):
        super().__init__()
        self.counted = counted

    def forward(self, t, x):
        return self.counted(t, x)


def _field(exact: Callable, kind: str) -> tuple[_Counted, Any]:
    counted = _Counted(exact)
    return counted, (counted if kind == "function" else _ModuleField(counted))


def _start(y: Tensor | PhaseState, context: Context) -> Tensor | PhaseState:
    y = _cast(y, context.dtype)
    if context.mode == "enable_grad":
        y = PhaseState(*(u.detach().requires_grad_(True) for u in y)) if isinstance(y, PhaseState) else y.detach()
        y = y.requires_grad_(True) if isinstance(y, Tensor) else y
    return y


def _run(stepper: AbstractStepper, exact: Callable, y0, t0: float, dts: list[float], context: Context):
    """Take the steps in ``context`` with one field for all of them, the state carried; return each step's
    evaluation count and, for each step, its result and the state it started from (detached, float64)."""
    counted, field = _field(exact, context.field)
    counts, starts, results = [], [], []
    with context.grad():
        y, t = _start(y0, context), t0
        state = stepper.init(field, t, y)
        for dt in dts:
            fresh = _fresh_step(stepper, field, t, y, dt)  # from the same start, for the reference to compare
            after_fresh = counted.calls
            y1, state = stepper.step(field, t, y, dt, state)
            counts.append(counted.calls - after_fresh)
            starts.append(_detached(y))
            results.append(_detached(fresh))
            y, t = y1, t + dt
    return counts, starts, results


def _detached(y: Tensor | PhaseState) -> Tensor:
    return _flat(PhaseState(*(u.detach().clone() for u in y)) if isinstance(y, PhaseState) else y.detach().clone())


def check_contexts(
    stepper: AbstractStepper | type[AbstractStepper], dim: int | None = None, examples: int = th.EXAMPLES
) -> float:
    """Assert a step is the same in every drawn :data:`CONTEXTS` as in the :data:`REFERENCE` (float64, no grad, a
    plain function): on ``examples`` drawn instances (:func:`~solvers.testing.strategies.instances`, up to 4 steps),
    each in a drawn context, (1) a carried run with one field for all steps evaluates the field as often at every step
    as the reference run does (``evals_per_step``, first-same-as-last, start-up), and (2) at every step a step from a
    fresh ``init`` agrees with the reference step from the same state: to ``ONE_STEP_RTOL`` in float64, to
    :func:`~solvers.testing.protocol.float32_allowance` float32 rounding units in float32 (relative to the states'
    sizes and ``|dt| max|f|``). Block steppers are left to :func:`~solvers.testing.check_layer`. Returns the largest
    defect (relative)."""
    from .._splitting import Block

    stepper = _instance(stepper)
    name, pristine = _name(stepper), _copy(stepper)
    width = dim if dim is not None else stepper_width(stepper)
    allowed32 = float32_allowance(stepper)
    worst = [0.0]

    def claim(drawn: _InContext) -> None:
        inst, context = drawn.instance, drawn.context
        low = inst.steppers(pristine)[0]
        problem = inst.problem(low)
        exact = problem.field_for(low)
        if isinstance(exact, Block) or not callable(exact):
            return
        high = _float64(_copy(low))
        ran = high if context.dtype == torch.float64 else low
        dts = inst.dts()[:4]
        y0 = problem.initial(low)
        counts, starts, results = _run(ran, exact, y0, inst.t0, dts, context)
        ref_counts, _, _ = _run(_copy(high), exact, y0, inst.t0, dts, REFERENCE)
        for i, (n, m) in enumerate(zip(counts, ref_counts)):
            if n != m:
                raise AssertionError(
                    f"{name} declares evals_per_step = {stepper.evals_per_step}"
                    f"{' and fsal' if stepper.fsal else ''} but evaluated the field {n} times in step {i} in context "
                    f"({context}), {m} times in the reference context ({REFERENCE}), one field for all steps."
                )
        t = inst.t0
        for i, (start, result, dt) in enumerate(zip(starts, results, dts)):
            y = _unflat(start.to(torch.float64), y0)
            counted, _ = _field(exact, "function")
            with torch.no_grad():
                reference = _flat(_fresh_step(_copy(high), counted, t, y, dt))
                rate = exact(t, y.x if isinstance(y, PhaseState) else y)
            size = max(float(start.abs().max()), float(reference.abs().max()), abs(dt) * float(rate.abs().max()))
            defect = float((result.double() - reference).abs().max()) / max(size, 1e-300)
            if context.dtype == torch.float64:
                allowed, unit, what = th.ONE_STEP_RTOL, 1.0, f"ONE_STEP_RTOL is {th.ONE_STEP_RTOL:g}"
            else:
                allowed, unit = allowed32 * th.EPS32, th.EPS32
                what = f"its arithmetic allows {allowed32:.3g} float32 rounding units"
            worst[0] = max(worst[0], defect)
            if not defect <= allowed:
                raise AssertionError(
                    f"{name}'s step (order {stepper.order}) in context ({context}) differs from its step in the "
                    f"reference context ({REFERENCE}) from the same state by {defect / unit:.3g}"
                    f"{' float32 rounding units' if unit != 1.0 else ' (relative)'} at step {i}, dt = {dt:.4g}, on "
                    f"{problem.name} ({what}): the scheme takes another path in that context."
                )
            t = t + dt

    strategy = st.builds(_InContext, instances(pristine, width, max_steps=4, large=False), st.sampled_from(CONTEXTS))
    check_drawn(strategy, claim, examples)
    return worst[0]
