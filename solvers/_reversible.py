"""Backpropagation without stored states, for schedules of reversible steps.

:func:`integrate_reversible` computes what :func:`~solvers.integrate` computes, but its backward pass does not read
states stored by the forward pass: it keeps only the final state, rebuilds each step's input from its output with the
stepper's ``inverse`` (every stepper must declare ``reversible``), and backpropagates through that one step at a
time. Activation memory is then independent of the number of steps; the price is one inverse and one re-run of every
step. The rebuilt states equal the forward ones up to rounding, so the gradients equal ordinary backpropagation's up
to rounding — provided the fields are deterministic (no dropout: a random mask drawn again in the backward pass would
differ from the forward's). A differentiable backward (``create_graph=True``) is supported: it recomputes the forward
with autograd recording, so second derivatives are exact.

The backward pass replays the forward's autocast state, so a step run under ``torch.autocast`` is rebuilt and
differentiated in the same precision. Under a ``torch.func`` transform (``jvp``, ``vmap``, ``jacrev``) the plain
:func:`~solvers.integrate` is used instead, so transforms compose.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from ._base import AbstractStepper, PhaseState, Y, _per_step, _per_step_dt, run_steps, transforms_active
from ._recompute import Bindings, modules_of


class AutocastState(NamedTuple):
    """The autocast state in force for a device type, captured in a forward pass and replayed in its backward."""

    device_type: str
    enabled: bool
    dtype: torch.dtype

    @classmethod
    def capture(cls, tensor: Tensor) -> AutocastState:
        """The autocast state in force now for ``tensor``'s device type."""
        device = tensor.device.type
        if device not in ("cpu", "cuda", "xpu", "mps", "hpu"):
            return cls(device, False, tensor.dtype)
        return cls(device, torch.is_autocast_enabled(device), torch.get_autocast_dtype(device))

    def __call__(self) -> contextlib.AbstractContextManager:
        """A context manager that restores this state (a no-op when autocast was off)."""
        if not self.enabled:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)


class _Run(NamedTuple):
    steppers: Sequence[AbstractStepper]
    fields: Sequence[Any]
    dts: list[Any]
    t0: Any
    second_order: bool
    bound: Bindings

    def times(self) -> list[Any]:
        t, out = self.t0, []
        for dt in self.dts:
            out.append(t)
            t = t + dt
        return out


def _last(states: Iterator[Y]) -> Y:
    return deque(states, maxlen=1)[0]  # keeps only the last state alive


def integrate_reversible(
    stepper: AbstractStepper | Sequence[AbstractStepper],
    fields: Sequence[Any],
    y0: Y,
    dt: Any,
    t0: Any = 0.0,
    params: Sequence[Tensor] | None = None,
    modules: Sequence[nn.Module] | None = None,
) -> Y:
    """:func:`~solvers.integrate`, with a backward pass that rebuilds states by inverting each step (see module doc).

    ``modules`` are the modules whose parameters and buffers the steps read; by default the steppers and every
    field, map or block that is an ``nn.Module`` (pass them when a field reaches its module through a wrapper).
    ``params`` are the tensors the steps depend on besides ``y0`` (gradients reach them); by default the trainable
    parameters of ``modules``. The backward pass steps with the tensors the modules held in the forward pass, also
    when those were substituted only for the call (``torch.func.functional_call``). Every stepper must declare
    ``reversible``; a schedule may not switch between first- and second-order steppers.
    """
    if torch.compiler.is_compiling():  # Dynamo is tracing this call: the custom backward calls autograd.grad,
        return _eager()(stepper, fields, y0, dt, t0, params, modules)  # which it does not trace, so it stays eager
    return _integrate_reversible(stepper, fields, y0, dt, t0, params, modules)


_EAGER: list = []
""":func:`_integrate_reversible` under ``torch.compiler.disable``, made when a compilation first needs it: the mark
imports Dynamo, seconds that a process which never compiles (an analysis, a user's script of the kit) need not pay."""


def _eager():
    if not _EAGER:
        _EAGER.append(torch.compiler.disable(_integrate_reversible))
    return _EAGER[0]


def _integrate_reversible(stepper, fields, y0, dt, t0, params, modules):
    steppers = _per_step(stepper, fields)
    dts = _per_step_dt(dt, steppers)
    for i, s in enumerate(steppers):
        if not s.reversible:
            raise ValueError(
                f"step {i}: {s!r} is not reversible, so its input cannot be rebuilt from its output; "
                "use integrate (stored states) or a reversible scheme."
            )
    if len({s.second_order for s in steppers}) > 1:
        raise ValueError("integrate_reversible needs every step of one kind (all first- or all second-order).")
    if transforms_active():
        return _last(run_steps(steppers, fields, y0, dts, t0))  # transforms and forward-mode AD compose with the loop
    second = steppers[0].second_order
    tensors = (y0.x, y0.v) if second else (y0,)
    bound = Bindings.capture(modules_of([*steppers, *fields]) if modules is None else modules)
    if params is None:
        params = bound.trainable()
    run = _Run(steppers, fields, dts, t0, second, bound)
    out = _RebuildingBackward.apply(run, len(tensors), *tensors, *params)
    return PhaseState(*out) if second else out[0]


class _RebuildingBackward(torch.autograd.Function):
    """Forward without storing states; backward rebuilds each step's input by its inverse, then backpropagates through
    that one step, so memory does not grow with the number of steps.

    Only the input and output states are kept (two states, whatever the depth). A backward that must itself be
    differentiable (``create_graph=True``: a gradient penalty, a Hessian-vector product) recomputes the whole forward
    from the kept input with autograd recording instead, so second derivatives are exact, at the usual memory cost.
    """

    @staticmethod
    def forward(ctx, run: _Run, count: int, *inputs: Tensor):
        tensors, params = inputs[:count], inputs[count:]
        y0 = PhaseState(*tensors) if run.second_order else tensors[0]
        with torch.no_grad():
            y = _last(run_steps(run.steppers, run.fields, y0, run.dts, run.t0))
        out = (y.x, y.v) if run.second_order else (y,)
        ctx.run, ctx.count = run, count
        ctx.autocast = AutocastState.capture(tensors[0])  # the rebuilt steps must compute as the forward pass did
        ctx.save_for_backward(*tensors, *out, *params)
        return tuple(o.clone() for o in out)

    @staticmethod
    def backward(ctx, *grads: Tensor):
        return ctx.run.bound.call(lambda: _RebuildingBackward._backward(ctx, grads))

    @staticmethod
    def _backward(ctx, grads: tuple[Tensor, ...]):
        run, count = ctx.run, ctx.count
        saved = ctx.saved_tensors
        inputs, outputs, params = saved[:count], saved[count : 2 * count], saved[2 * count :]
        grads = tuple(torch.zeros_like(o) if g is None else g for g, o in zip(grads, outputs))
        if torch.is_grad_enabled():  # create_graph=True: a differentiable backward, through the recorded forward
            with ctx.autocast():
                y0 = PhaseState(*inputs) if run.second_order else inputs[0]
                y = _last(run_steps(run.steppers, run.fields, y0, run.dts, run.t0))
                outs = (y.x, y.v) if run.second_order else (y,)
                wanted = [t for t in (*inputs, *params) if t.requires_grad]
                got = iter(torch.autograd.grad(outs, wanted, grads, allow_unused=True, create_graph=True))
            return (None, None, *(next(got) if t.requires_grad else None for t in (*inputs, *params)))
        y = PhaseState(*outputs) if run.second_order else outputs[0]
        totals: list[Tensor | None] = [None] * len(params)
        for s, f, t, dt in reversed(list(zip(run.steppers, run.fields, run.times(), run.dts))):
            with torch.no_grad(), ctx.autocast():
                y_in = s.inverse(f, t, y, dt)
            with torch.enable_grad(), ctx.autocast():
                leaves = tuple(p.detach().requires_grad_() for p in (y_in if run.second_order else (y_in,)))
                start = PhaseState(*leaves) if run.second_order else leaves[0]
                out, _ = s.step(f, t, start, dt, s.init(f, t, start))
                outs = (out.x, out.v) if run.second_order else (out,)
                g = torch.autograd.grad(outs, (*leaves, *params), grads, allow_unused=True)
            grads = tuple(torch.zeros_like(leaf) if gi is None else gi for gi, leaf in zip(g[:count], leaves))
            for i, gp in enumerate(g[count:]):
                if gp is not None:
                    totals[i] = gp if totals[i] is None else totals[i] + gp
            y = y_in
        return (None, None, *grads, *totals)
