"""The step protocol, gradients, precision and one-step-ness: what every other claim takes for granted."""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial
from numbers import Real
from typing import Any

import torch
from torch import Tensor

from .._base import AbstractStepper, PhaseState
from . import thresholds as th
from ._common import (
    RoundingEveryOperation,
    Untouched,
    _cast,
    _copy,
    _float64,
    _fresh_step,
    _instance,
    _name,
    _Scaled,
    _select,
    _tensors,
    beyond_reach,
    draws_randomness,
    each,
    field_size,
    fields_of,
    finite,
    is_block,
    not_finite,
    placed,
    reachable_tensors,
    rounded_field,
    rounding_model,
    singular_time,
    structure,
)
from ._drawn import check_drawn, reject
from .problems import Problem, _time_problem, default_problems, generator, stepper_width, weighted
from .references import _error, _flat, _unflat
from .strategies import Instance, instances

TIME = "the start time"
"""How the gradient checks name the time the steps start from, a tensor that carries a gradient (a model's time is the
sum of its layers' steps, so a learnable ``dt`` reaches every later step through ``t`` too): judged by the quotients."""
FIELD_WEIGHT = "the field's weight"
"""How the gradient checks name a trainable weight of the field (not the scheme's: a weight that gets no gradient is a
wrong gradient, judged by the quotients, not a dead parameter of the scheme)."""


def _fixed_protocol(stepper: AbstractStepper, dim: int | None = None) -> float:
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
    name = _name(stepper)
    problem = default_problems(stepper, dim)[-1]
    y, field, dt = problem.initial(stepper), problem.field_for(stepper), 0.4
    t = placed(stepper, 0.3, [dt, dt])
    while t is None and dt > 1e-6:  # a short time domain: smaller steps fit
        dt /= 2
        t = placed(stepper, 0.3, [dt, dt])
    if t is None:
        raise AssertionError(f"{name}'s time_domain holds no two steps of {dt:g}: the kit cannot step it.")
    kept = _unflat(_flat(y).clone(), y)
    unused = _copy(stepper)  # nothing a step leaves behind is on it
    with torch.no_grad():
        try:
            out = stepper.step(field, t, y, dt, stepper.init(field, t, y))
        except ArithmeticError as error:
            raise AssertionError(not_finite(stepper, field, t, y, dt, f"on {problem.name}", error)) from error
        except (RuntimeError, ValueError, TypeError) as error:
            if singular_time(stepper, field, t, y, dt) is not None:
                raise AssertionError(not_finite(stepper, field, t, y, dt, f"on {problem.name}", error)) from error
            raise AssertionError(
                f"{name} failed to step {problem.name} (states of shape {tuple(problem.x0.shape)}): "
                f"{' '.join(str(error).split())[:200]}; if it is built for another width, pass dim=... to the check."
            ) from error
        if not (isinstance(out, tuple) and not isinstance(out, PhaseState) and len(out) == 2):
            raise AssertionError(f"{name}.step must return (y1, state); it returned {type(out).__name__} {out!r:.80}.")
        y1 = out[0]
        _same_form(name, y, y1, problem)
        if not finite(y1):
            raise AssertionError(not_finite(stepper, field, t, y, dt, f"on {problem.name}"))
        if not torch.equal(_flat(y), _flat(kept)):
            raise AssertionError(f"{name}.step changed its input y in place on {problem.name}; return new tensors.")
        again = _fresh_step(stepper, field, t, y, dt)
        if not torch.equal(_flat(again), _flat(y1)):
            raise AssertionError(
                f"{name} gives a different y1 when the same step (same field, t, y, dt, fresh init) is taken again "
                f"(by {_error(again, y1):.2e}): it keeps something on the stepper between steps; keep it in state."
            )
        g = generator(8)
        nudged = _unflat(_flat(y) + 1e-3 * torch.randn(_flat(y).shape, generator=g, dtype=_flat(y).dtype), y)
        near, unkept = _fresh_step(stepper, field, t, nudged, dt), _fresh_step(_copy(unused), field, t, nudged, dt)
        if not _error(near, unkept) <= th.ONE_STEP_RTOL:
            raise AssertionError(
                f"{name} serves something kept from an earlier step to a state it does not belong to: a step from a "
                f"fresh init from y moved by 1e-3 differs by {_error(near, unkept):.2e} (relative) from the same step "
                f"by an unused copy of the stepper, on {problem.name}; a cache kept on the stepper and keyed on a "
                "property of the state (its size, norm, shape or address) rather than on y itself serves a stale "
                "value."
            )
        other = _copy(stepper)
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
            if not defect <= th.ONE_STEP_RTOL:
                _kept_or_coupled(name, unused, field, t, _select(y, b), dt, _select(y1, b), b, defect, problem.name)
        low = _cast(y, torch.float32)
        low_field = each(field, _in_float32)  # the problem in float32
        _same_form(name, low, _fresh_step(stepper, low_field, t, low, dt), problem, "float32 ")
        if not is_block(stepper):
            _aliased_fields(name, stepper, t, y, dt)
    return _check_derivative(name, stepper, field, t, y, dt, problem)


def _aliased_fields(name: str, stepper: AbstractStepper, t: float, y: Any, dt: float) -> None:
    """A field may return its input itself (``x' = x``, a residual branch that is the identity) or a tensor it keeps
    (a constant force, a cached projection): the step must leave both as they were, and take the same step as with a
    field returning fresh copies. A step that scales what the field returned in place (``k.mul_(dt)``) writes into
    its own input or the model's tensor; every other field the kit draws returns a new tensor, where it cannot."""
    x = y.x if isinstance(y, PhaseState) else y
    force = torch.linspace(-1.0, 1.0, x.numel(), dtype=x.dtype).reshape(x.shape)
    bank = [force * (1 + k) / 8 for k in range(8)]  # a tensor kept for each call (a table of forces by time)
    kept = [force.clone(), *(b.clone() for b in bank)]
    calls = [0]

    def banked(s, u, copied=False):
        calls[0] += 1
        out = bank[(calls[0] - 1) % len(bank)]
        return out.clone() if copied else out

    fields = (
        ("its input itself (x' = x)", lambda s, u: u, lambda s, u: u.clone()),
        ("a tensor it keeps (a constant force)", lambda s, u: force, lambda s, u: force.clone()),
        ("another tensor it keeps at each call", banked, lambda s, u: banked(s, u, copied=True)),
    )
    for what, aliased, fresh in fields:
        start = _unflat(_flat(y).clone(), y)
        calls[0] = 0
        y1 = _fresh_step(stepper, aliased, t, start, dt)
        calls[0] = 0
        expected = _fresh_step(stepper, fresh, t, _unflat(_flat(y).clone(), y), dt)
        unchanged = all(torch.equal(a, b) for a, b in zip([force, *bank], kept))
        written = [part for part, kept_as_was in (("y", torch.equal(_flat(start), _flat(y))),
                   ("the field's tensors", unchanged)) if not kept_as_was]  # fmt: skip
        if written or not torch.equal(_flat(y1), _flat(expected)):
            if written:
                did = f"wrote into {' and '.join(written)}"
            else:
                did = f"differs by {_error(y1, expected):.2e} from its step with a field returning a copy"
            raise AssertionError(
                f"{name}.step writes into what its field returned: with a field that returns {what}, the step {did}; "
                "a model's field may return its input or a tensor it keeps, so use an evaluation out of place "
                "(k * dt, not k.mul_(dt))."
            )


def _kept_or_coupled(
    name: str, unused: AbstractStepper, field, t, alone: Any, dt, row: Any, b: int, defect: float, where: str
) -> None:
    """A sample stepped alone differs from its row of the batch's step by ``defect``: say why. Where an unused copy
    of the stepper (nothing kept from an earlier step) steps it alone to its row, the stepper served something kept
    from before to a state it does not belong to (a cache keyed on the state's size, shape or address); else the
    samples are coupled."""
    again = _fresh_step(_copy(unused), field, t, alone, dt)
    if _error(again, row) <= th.ONE_STEP_RTOL:
        raise AssertionError(
            f"{name} serves something kept from an earlier step to a state it does not belong to: sample {b} stepped "
            f"alone by the stepper that took the batch's step differs from its row of the batch's step by "
            f"{defect:.2e} (relative) on {where}, but an unused copy of the stepper steps it alone to its row; a cache "
            "keyed on a property of the state (its size, norm, shape or address) rather than on y itself serves a "
            "stale value."
        )
    raise AssertionError(
        f"{name} does not step the samples of a batch independently: sample {b} stepped alone differs from its row "
        f"of the batch's step by {defect:.2e} (relative) on {where}."
    )


def _in_float32(f: Callable) -> Callable:
    """``f`` evaluated in float64 on a state of another dtype, its result rounded to that dtype."""

    def rounded(t, x):
        return f(t, x.to(torch.float64)).to(x.dtype)

    return rounded


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
    """Autograd's derivative of one step from a fresh ``init`` along a random direction of ``y`` and of the stepper's
    learnable parameters (on a float64 copy) against difference quotients (:func:`_compare_derivative`)."""
    stepper = _float64(stepper)
    params = [(f"{name}.{n}", p) for n, p in stepper.named_parameters() if p.requires_grad]

    def one_step(vector: Tensor) -> Tensor:
        return _flat(_fresh_step(stepper, field, t, _unflat(vector, y), dt))

    return _compare_derivative(name, one_step, _flat(y), params, problem.name, 1.0, dead=False)


def best_quotient(quotient: Callable[[float], float], steps: Sequence[float]) -> tuple[float, float]:
    """The difference quotient (``quotient(h)`` at each of ``steps``, 10 times apart) where two neighbours agree
    best, and their spread: rounding noise grows as ``h`` shrinks and truncation as it grows, so the spread bounds how
    far the quotient can be trusted (a NaN spread never counts as agreement)."""
    values = [quotient(h) for h in steps]
    pairs = [(abs(a - b), a) for a, b in zip(values, values[1:])]
    spread, value = min(pairs, key=lambda p: p[0] if p[0] == p[0] else math.inf)
    return value, spread


def _compare_derivative(
    name: str,
    run,
    base: Tensor,
    params: list[tuple[str, Tensor]],
    where: str,
    scale: float,
    dead: bool = True,
    irregular=None,
    of: str = "its steps",
) -> float:
    """Autograd's derivative of ``run`` (a map of the flat start ``base`` and of ``params``) along a random direction
    against difference quotients. The quotient's step ``h`` is chosen where quotients at ``h`` and ``10 h`` agree best
    (rounding noise grows as ``h`` shrinks, truncation as it grows), and their spread bounds how far the quotient can
    be trusted: a step that is itself noisy (one that takes a finite difference inside) is held to what can be
    resolved, a smooth one to ``GRADIENT_RTOL``. With ``dead``, a learnable parameter that gets no gradient (or a zero
    one) is reported by name. ``irregular`` (drawn instances) is called where the quotients resolve nothing, in place of
    failing: the instance is too stiff to say anything (the fixed check still holds a scheme to its gradient)."""
    g = generator(7)
    direction = scale * torch.randn(base.shape, generator=g, dtype=base.dtype)
    tensors = [p for _, p in params]
    along = [torch.randn(p.shape, generator=g, dtype=p.dtype) for p in tensors]
    with torch.enable_grad():
        point = base.clone().requires_grad_()
        out = run(point)
        if not out.requires_grad:
            raise AssertionError(f"{name}: no gradient flows from the result back to y on {where} (is y detached?).")
        cotangent = torch.randn(out.shape, generator=g, dtype=out.dtype)
        grad, *grads = torch.autograd.grad(out, [point, *tensors], cotangent, allow_unused=True)
    if grad is None:
        raise AssertionError(f"{name}: the result does not depend on y through autograd on {where}.")
    if dead:
        for (label, p), q, d in zip(params, grads, along):
            if label.startswith(FIELD_WEIGHT) or label == TIME:  # judged by the quotients below
                continue
            zero = q is not None and not bool(q.ne(0).any())
            if zero and irregular is not None and not _resolved_effect(run, base, out, p, d):
                irregular()  # a drawn instance where the parameter's whole effect is below float64's resolution
            if q is None or zero:
                got = "no gradient (it is not used, or used detached)" if q is None else "a gradient of zero"
                raise AssertionError(
                    f"{name}'s learnable parameter {label} gets {got} through the steps on {where}: every learnable "
                    "parameter must act on the result (drop it, or make it a buffer)."
                )
    by_autograd = float((grad * direction).sum()) + sum(
        float((q * d).sum()) for q, d in zip(grads, along) if q is not None
    )

    def quotient(h: float) -> float:
        ends = []
        with torch.no_grad():
            saved = [p.clone() for p in tensors]
            for sign in (1.0, -1.0):
                for p, d, p0 in zip(tensors, along, saved):
                    p.copy_(p0 + sign * h * d)
                ends.append(run(base + sign * h * direction))
            for p, p0 in zip(tensors, saved):
                p.copy_(p0)
        return float((cotangent * (ends[0] - ends[1])).sum()) / (2 * h)

    by_difference, spread = best_quotient(quotient, (1e-7, 1e-6, 1e-5, 1e-4, 1e-3))
    magnitude = max(1.0, abs(by_difference))
    defect = abs(by_autograd - by_difference) / magnitude
    allowed = max(th.GRADIENT_RTOL, 10 * spread / magnitude)
    if allowed > 1e-3 and irregular is not None:
        irregular()  # a drawn instance too stiff for difference quotients: it tells nothing either way
    if allowed > 1e-3:
        raise AssertionError(
            f"{name}'s step is too irregular on {where} to check its gradient by differences: quotients at "
            f"steps 10x apart differ by at least {spread:.2e}."
        )
    if defect > allowed:
        own = any(not n.startswith(FIELD_WEIGHT) and n != TIME for n, _ in params)
        moved = " and of the learnable parameters" if own else ""
        moved += " and of the field's trainable weights" if any(n.startswith(FIELD_WEIGHT) for n, _ in params) else ""
        moved += " and of the start time (a tensor, as a model's is)" if any(n == TIME for n, _ in params) else ""
        raise AssertionError(
            f"{name}'s gradient is not that of {of} on {where}: along a random direction of y{moved}, "
            f"autograd gives {by_autograd:.8g} and difference quotients {by_difference:.8g} (trusted to "
            f"{allowed * magnitude:.1e}); is a term computed without gradient (detach, no_grad, .item(), float())?"
        )
    return defect


@torch.no_grad()
def _fixed_one_step(stepper: AbstractStepper, problem: Problem | None = None, dim: int | None = None) -> float:
    """Assert a step does not depend on history in ``state`` (for schemes that do not declare ``multistep``): along
    ten steps whose size changes every step, a step from the carried state equals one from a fresh ``init`` by an
    unused copy of the stepper, both from a perturbed copy of the state reached (first, while anything the last step
    left behind is still there: a state the scheme never produced, so a cache keyed on anything but ``y`` itself, in
    ``state`` or on the stepper, is caught) and from the state reached."""
    problem = problem or _time_problem(stepper, dim, seed=5)
    y, field = problem.initial(stepper), problem.field_for(stepper)
    y = _unflat(_flat(y).clone(), y)  # the kit's own: its storage is written below
    pristine = _copy(stepper)  # the fresh steps run on copies of the stepper as it was: nothing kept on it can serve
    g = generator(6)
    dts = [0.1 * (1.5 if i % 2 else 0.7) for i in range(10)]
    t = placed(stepper, 0.0, dts)
    if t is None:
        raise AssertionError(
            f"{_name(stepper)}'s time_domain holds no run of ten steps of 0.1: the kit cannot run one."
        )
    state = stepper.init(field, t, y)
    worst = 0.0
    for i, dt in enumerate(dts):
        nudged = _unflat(_flat(y) + 1e-3 * torch.randn(_flat(y).shape, generator=g, dtype=_flat(y).dtype), y)
        other = _unflat(_flat(nudged) + 1e-3 * torch.randn(_flat(y).shape, generator=g, dtype=_flat(y).dtype), y)
        writable = not _holds_storage((state, stepper), y)  # nothing kept refers to y: its storage may be written
        for start, which in _starts(nudged, y, other if writable else None):
            carried, _ = stepper.step(field, t, start, dt, state)
            fresh_stepper = _copy(pristine)
            fresh, _ = fresh_stepper.step(field, t, start, dt, fresh_stepper.init(field, t, start))
            if not (finite(carried) and finite(fresh)):
                raise AssertionError(not_finite(stepper, field, t, start, dt, f"on {problem.name} (step {i})"))
            defect = _error(carried, fresh)
            if not defect <= th.ONE_STEP_RTOL:
                raise AssertionError(
                    f"{_name(stepper)} reads history from its state or from itself: after {i} steps, a step of {dt:g} "
                    f"from {which} with the carried state differs from one by an unused copy of the stepper from a "
                    f"fresh init by {defect:.2e} (relative) on {problem.name}; declare multistep = True, or key "
                    "anything kept between steps on y itself (its identity or values, not its address, size or norm)."
                )
            worst = max(worst, defect)
        y, state = stepper.step(field, t, y, dt, state)
        t = t + dt
    return worst


def _starts(nudged: Any, y: Any, other: Any) -> Iterator[tuple[Any, str]]:
    """The states a carried step is compared from: a perturbed copy of ``y``, ``y``, then (unless ``other`` is
    ``None``) ``y`` with ``other``'s values written into its storage (a cache keyed on its address serves the old
    force)."""
    yield nudged, "a perturbed copy of the state it reached"
    yield y, "the state it reached"
    if other is not None:
        for u, w in zip(_tensors(y), _tensors(other)):
            u.copy_(w)
        yield y, "the state it reached with new values written into its storage"


def _holds_storage(kept: Any, y: Any) -> bool:
    """Whether any tensor reachable from ``kept`` shares storage with a part of ``y`` (then ``y`` may not be written:
    a cache keyed on its identity would see the write)."""
    mine = {u.untyped_storage().data_ptr() for u in _tensors(y)}
    return any(t.untyped_storage().data_ptr() in mine for _, t in reachable_tensors(kept) if t.device.type == "cpu")


# -- drawn instances --------------------------------------------------------------------------------------------------


class _Kept:
    """What a step must leave as it was: every tensor reachable from ``y`` and ``state`` (its values and its version
    counter, which any write in place advances) and the containers that hold them (a list appended to in place)."""

    def __init__(self, y: Any, state: Any):
        self.objects = {"y": y, "state": state}
        self.tensors = [
            (f"{label}{path}", t, t.detach().clone(), t._version)
            for label, obj in self.objects.items()
            for path, t in reachable_tensors(obj)
        ]
        self.picture = structure(self.objects)

    def changed(self) -> str | None:
        """Where the step wrote in place (a path such as ``state.history[0]``), or ``None``."""
        for path, t, kept, version in self.tensors:
            if t._version != version or t.shape != kept.shape or not torch.equal(t.detach(), kept):
                return path
        if structure(self.objects) != self.picture:
            return "a container in y or state (a list or dict changed in place)"
        return None


def _layers_run(layers: list[AbstractStepper], field, y, t: float, dts: list[float], each=None):
    """Take the steps as the depth loop does: ``layers`` in turn, the running state handed on where a layer
    ``continues`` the one before, else a fresh ``init``; ``each(i, s, t, y, dt, state)`` runs before step ``i`` and
    may return the step's ``(y1, state1)``. Returns the last ``y``."""
    state, previous = None, None
    for i, dt in enumerate(dts):
        s = layers[i % len(layers)]
        if previous is None or not s.continues(previous):
            state = s.init(field, t, y)
        out = each(i, s, t, y, dt, state) if each is not None else None
        y, state = out if out is not None else s.step(field, t, y, dt, state)
        t, previous = t + dt, s
    return y


def _replace_rows(y: Any, b: int, g: torch.Generator, scale: float) -> Any:
    """``y`` with every sample but ``b`` replaced by noise."""

    def one(x: Tensor) -> Tensor:
        other = scale * torch.randn(x.shape, generator=g, dtype=torch.float64).to(x.dtype)
        keep = torch.zeros(x.shape[0], dtype=torch.bool)
        keep[b] = True
        return torch.where(keep.view(-1, *[1] * (x.dim() - 1)), x, other)

    return PhaseState(one(y.x), one(y.v)) if isinstance(y, PhaseState) else one(y)


def _protocol_run(name: str, layers: list[AbstractStepper], problem: Problem, t0: float, dts: list[float], seed: int):
    """Take the steps of ``problem`` by ``layers`` as the depth loop does, asserting the protocol at every step (see
    :func:`check_protocol`); the batch checks run at the first and the last step."""
    field = problem.field_for(layers[0])
    last = len(dts) - 1
    g = generator(seed)
    batch = problem.x0.shape[0]
    pristine = [_copy(s) for s in layers]  # unused copies: a step by one of them keeps nothing from before

    def each(i, s, t, y, dt, state):
        kept, untouched_globals = _Kept(y, state), Untouched(field)
        try:
            out = s.step(field, t, y, dt, state)
        except AssertionError as error:  # the field's own (a state of the wrong shape)
            raise AssertionError(f"{name} at step {i}: {error}") from error
        except ArithmeticError as error:
            if beyond_reach(s, field, t, y, dt):
                reject()  # a drawn step beyond any step of the scheme: its dynamics blow up, or are this stiff
            raise AssertionError(not_finite(s, field, t, y, dt, f"at step {i} of {problem.name}", error)) from error
        except (RuntimeError, ValueError, TypeError) as error:
            if singular_time(s, field, t, y, dt) is not None:
                raise AssertionError(not_finite(s, field, t, y, dt, f"at step {i} of {problem.name}", error)) from error
            raise AssertionError(
                f"{name} failed at step {i} of {problem.name}: {' '.join(str(error).split())[:200]}"
            ) from error
        if not (isinstance(out, tuple) and not isinstance(out, PhaseState) and len(out) == 2):
            raise AssertionError(f"{name}.step must return (y1, state); it returned {type(out).__name__}.")
        y1 = out[0]
        moved = untouched_globals.changed()
        if moved is not None:
            raise AssertionError(
                f"{name}.step changed {moved} at step {i} on {problem.name}: a step leaves what it does not own as it "
                "found it (set a mode inside a with block that restores it)."
            )
        _same_form(name, y, y1, problem, f"step {i}'s ")
        if not finite(y1):
            if beyond_reach(s, field, t, y, dt):
                reject()  # a drawn step beyond any step of the scheme: its dynamics blow up, or are this stiff
            raise AssertionError(not_finite(s, field, t, y, dt, f"at step {i} of {problem.name}"))
        where = kept.changed()
        if where is not None:
            raise AssertionError(
                f"{name}.step wrote into its input in place at step {i} ({where}) on {problem.name}: return new "
                "tensors and new containers (in place, activation checkpointing and autograd see wrong values)."
            )
        if i not in (0, last):
            return out

        def untouched(after: str) -> None:
            where = kept.changed()
            if where is not None:
                raise AssertionError(
                    f"{name}.step wrote into its input in place at step {i} ({where}) when the step was taken "
                    f"{after} on {problem.name}: return new tensors and new containers."
                )

        again = s.step(field, t, y, dt, state)[0]
        untouched("again from the same state")
        x = y.x if isinstance(y, PhaseState) else y
        if i == 0 and draws_randomness(lambda: s.step(field, t, y, dt, state), field, t, x):
            raise AssertionError(
                f"{name}.step draws from or reseeds torch's global random generator at step {i} on {problem.name}, "
                "where its field does not: the step of a scheme is a function of its inputs, and the caller's "
                "random state (dropout's masks, data order) is not the step's to move."
            )
        if not torch.equal(_flat(again), _flat(y1)):
            raise AssertionError(
                f"{name} gives a different y1 when step {i} is taken again from the same y and state (by "
                f"{_error(again, y1, problem.scale):.2e}): it keeps something on the stepper between steps."
            )
        other = _copy(s)
        other.train(not s.training)
        flipped = other.step(field, t, y, dt, state)[0]
        untouched("again in the other mode")
        if not torch.equal(_flat(flipped), _flat(y1)):
            mode = "eval" if s.training else "training"
            raise AssertionError(
                f"{name} steps differently in {mode} mode at step {i} (by "
                f"{_error(flipped, y1, problem.scale):.2e}): its claims must hold for training and inference alike."
            )
        for b in range(min(batch, 3)):  # the first three samples: a large state has thousands
            replaced = _replace_rows(y, b, g, problem.scale)
            mixed = s.step(field, t, replaced, dt, state)[0]
            untouched("again with the other samples changed")
            defect = _error(_select(mixed, b), _select(y1, b), problem.scale)
            if not defect <= th.ONE_STEP_RTOL:
                unused = _copy(pristine[i % len(pristine)])
                alone = _fresh_step(unused, field, t, replaced, dt)  # the same states, nothing kept from before
                if _error(_select(alone, b), _select(y1, b), problem.scale) <= th.ONE_STEP_RTOL:
                    raise AssertionError(
                        f"{name} serves something kept from an earlier step to a state it does not belong to: at "
                        f"step {i}, sample {b}'s result moves by {defect:.2e} (relative) when the other samples "
                        f"change, on {problem.name}, but an unused copy of the stepper from a fresh init steps the "
                        "changed batch right; a cache keyed on a property of the state (its size, norm, shape or "
                        "address) rather than on y itself serves a stale value (declare multistep = True if the "
                        "step reads history)."
                    )
                raise AssertionError(
                    f"{name} does not step the samples of a batch independently: at step {i}, sample {b}'s "
                    f"result moves by {defect:.2e} (relative) when the other samples change, on {problem.name}."
                )
            if i == 0:
                alone = _fresh_step(_copy(s), field, t, _select(y, b), dt)
                defect = _error(alone, _select(y1, b), problem.scale)
                if not defect <= th.ONE_STEP_RTOL:
                    unused = _copy(pristine[i % len(pristine)])
                    _kept_or_coupled(name, unused, field, t, _select(y, b), dt, _select(y1, b), b, defect, problem.name)
        return out

    with torch.no_grad():
        _layers_run(layers, field, problem.initial(layers[0]), t0, dts, each)


def _drawn_protocol(stepper: AbstractStepper, dim: int | None, examples: int) -> None:
    name, pristine = _name(stepper), _copy(stepper)
    width = dim if dim is not None else stepper_width(stepper)

    def claim(inst: Instance) -> None:
        layers = inst.steppers(pristine)
        _protocol_run(name, layers, inst.problem(layers[0]), inst.t0, inst.dts(), inst.seed + 1)

    check_drawn(instances(pristine, width), claim, examples)


def _resolved_effect(run: Any, base: Tensor, out: Tensor, p: Tensor, direction: Tensor) -> bool:
    """Whether moving ``p`` by one standard normal ``direction`` moves ``run(base)`` by more than float64 resolves
    (``64 EPS`` of the result's size). A parameter whose whole effect is below that (a fourth-order family's free
    coefficient acts at ``dt⁵``: at ``dt = 1e-3`` that is 1e-15 of the state) honestly gets a gradient of zero there,
    and such a drawn instance is not judged (the fixed instances still hold every parameter to acting)."""
    with torch.no_grad():
        saved = p.clone()
        try:
            p.add_(direction)
            moved = run(base)
        finally:
            p.copy_(saved)
    change = float((moved - out.detach()).abs().max())
    return not change <= 64 * th.EPS * max(float(out.detach().abs().max()), 1e-300)


def check_protocol(
    stepper: AbstractStepper | type[AbstractStepper], dim: int | None = None, examples: int = th.EXAMPLES
) -> float:
    """Assert a step keeps the protocol every other check takes for granted.

    Fixed, on the last of :func:`default_problems` (nonlinear, time-dependent, a batch of two) from a fresh
    ``init``: ``step`` returns ``(y1, state)``, ``y1`` of ``y``'s kind, shape, dtype and device, also for a float32
    ``y``; ``y`` is left as it was; the same step taken twice gives the same ``y1``; each sample alone gives its row of
    the batch; a second step leaves its input as it was too; a copy in the other mode (``eval()``) takes the same
    step; the gradient of the step with respect to ``y`` and the learnable parameters is that of autograd.

    Drawn (``examples`` :class:`~solvers.testing.strategies.Instance` objects: two- and three-dimensional states whose
    field couples the tokens of a sample as attention does, batches of 2 or 3, some of at least ``LARGE_STATE``
    entries, magnitudes over six decades, up to ``MAX_HORIZON`` steps of either sign, parameters moved, up to three
    instances handing the state on): every step returns a ``y1`` of ``y``'s form and writes into nothing reachable
    from ``y`` and ``state`` (values, version counters, containers); at the first and the last step, the same step
    taken again, and in the other mode, gives the same ``y1``, and a sample's result does not move when the other
    samples change (nor, at the first step, when it is stepped alone).

    Returns the relative difference of the two derivatives of the fixed gradient check.
    """
    stepper = _instance(stepper)
    defect = _fixed_protocol(stepper, dim)
    _drawn_protocol(stepper, dim, examples)
    return defect


def _limit_gradient(stepper: AbstractStepper, dim: int | None) -> None:
    """Where the stepper has learnable parameters and a small-step limit: the gradient of ``limit_field`` along a
    random direction of the state and of the parameters equals difference quotients (on a float64 copy, at a start
    inside its ``time_domain``, on the last of :func:`default_problems`). Which parameters shape the limit is read by
    autograd (``model.parameterization=ode`` scales them as the scheme's own: ``odeformer.parameterization``), so a
    limit that reads a parameter detached would leave it frozen there, though every value is right."""
    learnable = [(n, p) for n, p in stepper.named_parameters() if p.requires_grad]
    if not learnable or stepper.order == 0:
        return
    s = _float64(stepper)
    params = [(f"{_name(stepper)}.{n}", p) for n, p in s.named_parameters() if p.requires_grad]
    problem = default_problems(s, dim)[-1]
    y, t, field = problem.initial(s), placed(s, 0.3, [0.0]), problem.field_for(s)

    made: list[AbstractStepper] = []  # every object kept alive to the end: none shares an id() with a freed one

    def run(vector: Tensor) -> Tensor:  # the limit made anew, by a stepper object of its own sharing the parameters:
        made.append(copy.copy(s))  # nothing kept for one object (an attribute, a table keyed by id) serves another
        return _flat(made[-1].limit_field(field)(t, _unflat(vector, y)))

    where = f"{problem.name} at t = {t:g} (which parameters shape the limit is read by autograd)"
    of = "the vector field its limit_field returns"
    _compare_derivative(_name(stepper), run, _flat(y), params, where, problem.scale, dead=False, of=of)


def check_gradients(
    stepper: AbstractStepper | type[AbstractStepper], dim: int | None = None, examples: int = th.EXAMPLES
) -> None:
    """Assert the gradient of several steps, the running state handed on between them (and between instances with
    different parameters, as a model's layers hand it), is autograd's: along a random direction of ``y0``, of every
    layer's learnable parameters and of the trainable weights of the field (an ``nn.Module``,
    :class:`~solvers.testing.problems.Weighted`, as a model's fields are: a stage that drops the weights' graph
    shows), it equals difference quotients (to ``GRADIENT_RTOL``, or what the quotients resolve), and every learnable
    parameter gets a gradient that is not zero (a parameter that is never used, or used detached, is named); the
    gradient of its ``limit_field`` to its parameters is autograd's too (:func:`_limit_gradient`). Drawn:
    ``examples`` instances of ``GRADIENT_STEPS`` steps (4 to 8) in float64 copies, of drawn shape, magnitude, signed
    ``dt`` and parameter moves: a history kept detached, or a cache carried across a
    step without its graph, shows there where one step from a fresh ``init`` cannot show it."""
    stepper = _instance(stepper)
    name, pristine = _name(stepper), _copy(stepper)
    width = dim if dim is not None else stepper_width(stepper)
    low, high = th.GRADIENT_STEPS
    _limit_gradient(stepper, dim)

    def claim(inst: Instance) -> None:
        layers = [_float64(s) for s in inst.steppers(pristine)]
        k, dts = inst.steps, inst.dts()
        problem = inst.problem(layers[0])
        y0 = problem.initial(layers[0])
        field = weighted(problem.field_for(layers[0]), problem.x0.shape[-1], inst.seed, problem.scale)
        params = [
            (f"{n} of instance {i}", p)
            for i, s in enumerate(layers)
            for n, p in s.named_parameters()
            if p.requires_grad
        ]
        parts = fields_of(field)
        weights = [
            (f"{FIELD_WEIGHT} {n}" + (f" (its {part})" if len(parts) > 1 else ""), p)
            for part, f in zip(("attention", "FFN"), parts)
            for n, p in f.named_parameters()
        ]

        t0 = torch.tensor(float(inst.t0), dtype=torch.float64, requires_grad=True)  # as a model's time is

        def run(vector: Tensor) -> Tensor:
            return _flat(_layers_run(layers, field, _unflat(vector, y0), t0, dts))

        where = f"{problem.name} through {k} steps with the state handed on"
        _compare_derivative(
            name, run, _flat(y0), params + weights + [(TIME, t0)], where, problem.scale, irregular=reject
        )

    drawn = instances(pristine, width, min_steps=low, max_steps=high, large=False, max_dt=1.0, horizon=2.0)
    check_drawn(drawn, claim, examples)


def _coefficient_sum(value: Any) -> float:
    """The sum of a tableau's absolute coefficients (a tensor is one coefficient per channel: its largest counts)."""
    if isinstance(value, Real):
        return abs(float(value))
    if isinstance(value, Tensor):
        return float(value.detach().abs().max()) if value.numel() else 0.0
    if isinstance(value, (tuple, list)):
        return sum(_coefficient_sum(v) for v in value)
    return 0.0


def _stated_coefficients(stepper: AbstractStepper, claim: str = "precision") -> Any:
    """Where a stepper's coefficients are: its ``tableau`` value, else the mapping its ``coefficients()`` method
    returns (a learnable family at its current values), else None."""
    tableau = getattr(stepper, "tableau", None)
    if tableau is not None:
        return tableau
    method = getattr(stepper, "coefficients", None)
    given = called_coefficients(stepper, method, claim) if callable(method) else None
    return given if isinstance(given, Mapping) else None


def called_coefficients(stepper: AbstractStepper, method: Callable, claim: str) -> Any:
    """``stepper.coefficients()``; a method that needs arguments (another meaning of the name) gives ``None``, and one
    that raises anything else is an ``AssertionError`` naming the claim that reads it."""
    try:
        return method()
    except TypeError as error:
        if "argument" in str(error):
            return None
        raise AssertionError(_coefficients_failed(stepper, claim, error)) from None
    except Exception as error:  # noqa: BLE001 - reported as the claim's failure, with its cause
        raise AssertionError(_coefficients_failed(stepper, claim, error)) from None


def _coefficients_failed(stepper: AbstractStepper, claim: str, error: Exception) -> str:
    return (
        f"{_name(stepper)}.coefficients() raised {type(error).__name__} ({' '.join(str(error).split())[:160]}) at its "
        f"current parameters: the {claim} claim reads the scheme's coefficients from it (a mapping with A and b, or "
        "drifts and kicks, at any parameters training reaches), so it must return them."
    )


def amplification(
    stepper: AbstractStepper,
    field,
    t,
    y,
    dt,
    reference: Tensor,
    eps: float,
    seed: int,
    inverse: bool = False,
    every_operation: bool = False,
) -> float:
    """How many rounding units of size ``eps`` a step's result moves when its start and every evaluation's input and
    result are rounded (modelled, in float64, by relative perturbations of ``eps``): the honest low-precision defect
    of a step grows with it where the step amplifies changes (a composition's large sub-steps, a stiff or sharply
    attending field). ``dt`` itself is not rounded: a step at a model's exact size (``dt == 0.5``) stays that step.
    Relative to the larger of the start and ``reference`` (the step unperturbed); ``inf`` if the step does not stay
    finite. ``inverse``: the same for ``stepper.inverse`` from ``y`` (``reference`` its result).

    ``every_operation``: every value the step computes is rounded as well
    (:class:`~solvers.testing._common.RoundingEveryOperation`; slower, so the checks ask for it only where the first
    model does not explain a difference), and only the part of the move that halves when the rounding halves counts:
    a step that branches on a computed value (``torch.as_tensor(dt) == 1``) jumps by the same amount under any
    rounding, and a jump is another step, not rounding."""

    def moved(size_of: float) -> Tensor:
        nudged = rounding_model(size_of, seed)
        rounded = rounded_field(field, nudged)
        every = RoundingEveryOperation(size_of, seed + 2) if every_operation else contextlib.nullcontext()
        with torch.no_grad(), every:
            start = _unflat(nudged(_flat(y)), y)
            return _flat(
                stepper.inverse(rounded, t, start, dt) if inverse else _fresh_step(stepper, rounded, t, start, dt)
            )

    try:
        change = moved(eps) - reference
        if every_operation:  # the same draws at half the size: what scales with the rounding is twice the difference
            change = 2 * (change - (moved(eps / 2) - reference))
    except RuntimeError:  # a step the mode cannot run (an operation it cannot see through): the first model
        if not every_operation:
            raise
        return amplification(stepper, field, t, y, dt, reference, eps, seed, inverse)
    size = max(float(_flat(y).abs().max()), float(reference.abs().max()), 1e-300)
    units = float(change.abs().max()) / (eps * size)
    return units if units == units and units != float("inf") else float("inf")


def own_rounding(
    stepper: AbstractStepper, field, t, y, dt, reference: Tensor, eps: float, seed: int, allowed: float
) -> float:
    """``MODELLED_ROUNDING`` times the units a step moves when every value it computes is rounded
    (:func:`amplification` with ``every_operation``), for a step nonlinear in the state (:func:`nonlinear_in_state`)
    whose linear part rounds within its arithmetic's ``allowed`` units (:func:`linear_part_rounds_within`): what a
    low-precision step may differ by where its own arithmetic is ill-conditioned at that state (a drag
    ``v / (1 + c h |v|)`` applied twice, near the pole of the second) though the start's rounding is not amplified. A
    step linear in the state has no such points: its arithmetic is its coefficients (``coefficients()`` states them;
    ``1001 y - 1000 y`` loses three digits everywhere and is allowed none of them), and 0 is returned; so is it for a
    step that loses digits in its linear part and adds a small nonlinearity of its own. A step outside the scheme's
    stability region by this measure (``BLOWN_UP``) is redrawn."""
    if not rounds_its_own_values(stepper, field, t, y, dt, eps, seed, allowed):
        return 0.0
    gain = amplification(_copy(stepper), field, t, y, dt, reference, eps, seed, every_operation=True)
    if not gain <= th.BLOWN_UP:  # rounding there proves nothing
        reject()
    return th.MODELLED_ROUNDING * gain


def rounds_its_own_values(stepper: AbstractStepper, field, t, y, dt, eps: float, seed: int, allowed: float) -> bool:
    """Whether a step may be allowed what rounding every value it computes moves it (its value by
    :func:`own_rounding`, its state gradient by the contexts' check): it is nonlinear in the state
    (:func:`nonlinear_in_state`) and its linear part rounds within its arithmetic's ``allowed`` units
    (:func:`linear_part_rounds_within`)."""
    return nonlinear_in_state(stepper, t, y, dt) and linear_part_rounds_within(
        stepper, field, t, y, dt, eps, seed, allowed
    )


@torch.no_grad()
def linear_part_rounds_within(stepper: AbstractStepper, field, t, y, dt, eps: float, seed: int, allowed: float) -> bool:
    """Whether the step's linear part rounds within ``allowed`` units of ``eps`` (the arithmetic's allowance, times
    what the start's and evaluations' rounding moves it): the step from ``y`` scaled to ``LINEAR_PART_SIZE``, on the
    field scaled with it (``s f(t, x / s)``: the field is the same field), where a nonlinearity of the scheme's own
    that grows with the state (a drag ``c |v| v``) has vanished, else scaled to ``1 / LINEAR_PART_SIZE``, where one
    that does not grow with it (a friction ``c sign(v)``, ``c tanh(v)``) has, with every value it computes rounded
    (:func:`amplification`). A step nonlinear at both sizes (both kinds at once, or ``v tanh(log |v|)``) cannot be
    separated from its linear part this way and is taken to: ``True``; so is one that does not stay finite there."""
    flat = _flat(y)
    size = float(flat.abs().max())
    if not 0.0 < size < float("inf"):
        return True
    for target in (th.LINEAR_PART_SIZE, 1.0 / th.LINEAR_PART_SIZE):
        scale = 2.0 ** round(math.log2(target / size))
        there = _unflat(flat * scale, y)
        if nonlinear_in_state(stepper, t, there, dt):
            continue
        scaled = each(field, partial(_Scaled, scale=scale))
        try:
            reference = _flat(_fresh_step(_copy(stepper), scaled, t, there, dt))
            first = amplification(_copy(stepper), scaled, t, there, dt, reference, eps, seed)
            every = amplification(_copy(stepper), scaled, t, there, dt, reference, eps, seed, every_operation=True)
        except Exception:  # noqa: BLE001 - a step that cannot take this state: not separable here
            continue
        if math.isfinite(first) and math.isfinite(every):
            return every <= allowed * max(1.0, first)
    return True


@torch.no_grad()
def nonlinear_in_state(stepper: AbstractStepper, t, y, dt) -> bool:
    """Whether the step on a field that is zero is not linear in the state at ``y``: ``S(2 y) != 2 S(y)`` beyond
    ``ONE_STEP_RTOL`` (a friction or drag of the scheme's own; every Runge–Kutta or splitting step is linear there)."""

    def zero(s: Any, x: Tensor) -> Tensor:
        return torch.zeros_like(x)

    try:
        once = _flat(_fresh_step(_copy(stepper), zero, t, y, dt))
        twice = _flat(_fresh_step(_copy(stepper), zero, t, _unflat(2 * _flat(y), y), dt))
    except Exception:  # noqa: BLE001 - a step that cannot take these: treated as linear (no allowance)
        return False
    size = max(float(twice.abs().max()), 1e-300)
    return bool(float((twice - 2 * once).abs().max()) > th.ONE_STEP_RTOL * size)


def unstated_coefficients(stepper: AbstractStepper, claim: str = "precision") -> str:
    """For a message on a lower-precision step of a scheme that states no coefficients (no ``tableau``, no
    ``coefficients()``): that its arithmetic was allowed what its step shows on a constant field, within a bound, and
    how to state its coefficients; else ``""``."""
    if is_block(stepper) or _stated_coefficients(stepper, claim) is not None:
        return ""
    return (
        " If the step combines its stages with coefficients larger than 1 (an extrapolation, a composition written "
        "out), that arithmetic rounds more: it states no coefficients, so it was allowed what its step shows on a "
        "constant field, up to FLOAT32_UNSTATED_MOST units; state them by a method "
        "coefficients() returning {'A': ..., 'b': ...} (or {'drifts': ..., 'kicks': ...}), as docs/extending.md says."
    )


def float32_allowance(stepper: AbstractStepper, claim: str = "precision") -> float:
    """How many float32 rounding units a float32 step may differ from the float64 step by, from the scheme's own
    arithmetic: ``FLOAT32_UNITS_PER_TERM`` for each evaluation (``evals_per_step``) times the sum of the absolute
    values of its tableau's coefficients (``A`` and ``b``; a splitting's drifts and kicks; a learnable family's at
    their current values from its ``coefficients()``, the largest channel's where they are per channel; 1 where it has
    none), at least ``FLOAT32_UNITS``. Fifteen stages with weights near 2 round more than Euler."""
    if isinstance(getattr(stepper, "stepper", None), AbstractStepper):  # a layer's arithmetic: its schemes' own
        parts = [stepper.stepper] + (
            [stepper.ffn] if isinstance(getattr(stepper, "ffn", None), AbstractStepper) else []
        )
        return sum(float32_allowance(part, claim) for part in parts)
    source = _stated_coefficients(stepper, claim)
    names = ("A", "b", "bbar", "drifts", "kicks")
    get = source.get if isinstance(source, Mapping) else (lambda n, d: getattr(source, n, d))
    coefficients = sum(_coefficient_sum(get(n, ())) for n in names) if source is not None else 0.0
    terms = max(1, int(stepper.evals_per_step)) * max(1.0, coefficients)
    allowance = max(float(th.FLOAT32_UNITS), th.FLOAT32_UNITS_PER_TERM * terms)
    if source is None:  # its arithmetic unstated: what its own step shows where no stage can round, within a bound
        measured = th.FLOAT32_MEASURED * _constant_field_units(stepper)
        allowance = max(allowance, min(measured, float(th.FLOAT32_UNSTATED_MOST)))
    return allowance


def _constant_field_units(stepper: AbstractStepper) -> float:
    """How many float32 rounding units a float32 step on a constant field moves from the float64 step from the same
    (float32) state, at steps of 1/4, 1 and 3 (the largest): the field is exact in both, so what moves is the scheme's
    own arithmetic on states (an extrapolation's combination of sub-step results with weights up to 13.5 shows some
    tens of units where a Runge–Kutta step shows one)."""
    width = stepper_width(stepper) or 4
    g = generator(7)
    second = stepper.second_order
    low, high = _copy(stepper), _float64(stepper)
    worst = 0.0
    for dt in (0.25, 1.0, 3.0):
        t = placed(stepper, 0.3, [dt])
        if t is None:
            continue
        parts = [torch.randn(3, 4, width, generator=g, dtype=torch.float64).float() for _ in range(2 if second else 1)]
        force = torch.randn(width, generator=g, dtype=torch.float64).float()
        y32 = PhaseState(*parts) if second else parts[0]
        y64 = PhaseState(*(u.double() for u in parts)) if second else parts[0].double()

        def constant(s: Any, x: Tensor, force: Tensor = force) -> Tensor:
            return force.to(x.dtype).expand_as(x).clone()

        try:
            with torch.no_grad():
                a, b = (
                    _flat(_fresh_step(low, constant, t, y32, dt)).double(),
                    _flat(_fresh_step(high, constant, t, y64, dt)),
                )
        except Exception:  # noqa: BLE001 - a step that cannot take this one shows its failure in the claims' own checks
            continue
        size = max(float(b.abs().max()), float(_flat(y64).abs().max()), 1e-300)
        units = float((a - b).abs().max()) / (th.EPS32 * size)
        worst = max(worst, units) if math.isfinite(units) else worst
    return worst


@torch.no_grad()
def time_held_step(
    stepper: AbstractStepper, exact: Any, t: float, y: Any, dt: float, far: float, eps: float, inverse: bool = False
) -> Any:
    """The (float64) step from ``y`` (its inverse, with ``inverse``) started ``eps (|far| + |dt|)`` later: a
    low-precision step may hold its times in its state's dtype (the kit allows its stage times that much), and a limit
    that depends on the time moves with them (a force ``b sin(w t)`` of the scheme's own, at ``t = 1000`` in float32,
    by ``w t`` units). ``MODELLED_ROUNDING`` times its difference from the step is allowed besides the arithmetic."""
    later = t + eps * (abs(far) + abs(dt))
    return stepper.inverse(exact, later, y, dt) if inverse else _fresh_step(stepper, exact, later, y, dt)


def check_precision(
    stepper: AbstractStepper | type[AbstractStepper], dim: int | None = None, examples: int = th.EXAMPLES
) -> float:
    """Assert a float32 step is the float64 step to float32's rounding: on ``examples`` drawn instances, at the first
    three steps of a float32 run (whose every carried step must keep y's form), one step from a fresh ``init`` in
    float32 and one by a float64 copy of the stepper from the same (float32) state agree to
    :func:`float32_allowance` float32 rounding units (from the scheme's stages and coefficients) relative to the
    largest of the states' sizes and ``|dt| max|f|`` (the field is exact and rounded to float32, so the step's own
    arithmetic is measured: a stage computed in a lower precision shows). Returns the largest defect in rounding
    units."""
    stepper = _instance(stepper)
    name, pristine = _name(stepper), _copy(stepper)
    width = dim if dim is not None else stepper_width(stepper)
    worst = [0.0]
    allowed = float32_allowance(stepper)

    def claim(inst: Instance) -> None:
        low = inst.steppers(pristine)[0]
        high = _float64(_copy(low))
        problem = inst.problem(low)
        exact = problem.field_for(low)
        rounded = each(exact, _in_float32)

        y, t = _cast(problem.initial(low), torch.float32), inst.t0
        state = low.init(rounded, t, y)
        for i, dt in enumerate(inst.dts()[:3]):
            fresh32 = _fresh_step(low, rounded, t, y, dt)
            _same_form(name, y, fresh32, problem, "float32 ")
            start = _cast(y, torch.float64)
            fresh64 = _fresh_step(high, exact, t, start, dt)
            reach = abs(dt) * field_size(exact, t, start.x if isinstance(start, PhaseState) else start)
            size = max(float(_flat(y).abs().max()), float(_flat(fresh64).abs().max()), reach, 1e-30)
            units = float((_flat(fresh32).double() - _flat(fresh64)).abs().max()) / (size * th.EPS32)
            worst[0] = max(worst[0], units)
            if not units <= allowed:  # the arithmetic's own allowance, times how much this step amplifies rounding
                if not finite(fresh32) and beyond_reach(high, exact, t, start, dt):
                    reject()  # past float32's range on a step beyond any of the scheme's (stiff, or blowing up)
                gain = amplification(_copy(high), exact, t, start, dt, _flat(fresh64), th.EPS32, inst.seed + i)
                if not gain <= th.BLOWN_UP:  # outside the scheme's stability region: rounding there proves nothing
                    reject()
                held = time_held_step(_copy(high), exact, t, start, dt, t, th.EPS32)
                times = th.MODELLED_ROUNDING * float((_flat(held) - _flat(fresh64)).abs().max()) / (size * th.EPS32)
                own = 0.0
                if not units <= allowed * max(1.0, gain) + times:  # only then: slower
                    own = own_rounding(high, exact, t, start, dt, _flat(fresh64), th.EPS32, inst.seed + i, allowed)
                if not units <= max(allowed * max(1.0, gain), own) + times:
                    raise AssertionError(
                        f"{name}'s float32 step differs from its float64 step from the same state by {units:.3g} "
                        f"float32 rounding units at step {i} on {problem.name} (its arithmetic allows {allowed:.3g}"
                        f"{f', times {gain:.3g}, how much this step amplifies rounding' if gain > 1 else ''}"
                        f"{f' (or {own:.3g}, what rounding every value it computes moves it)' if own > 0 else ''}"
                        f"{f', plus {times:.3g}, what its time held in float32 moves it' if times > 0 else ''}): part "
                        f"of the step runs in a lower precision, or rounds a coefficient.{unstated_coefficients(low)}"
                    )
            y1, state = low.step(rounded, t, y, dt, state)
            _same_form(name, y, y1, problem, f"float32 step {i}'s ")
            y, t = y1, t + dt

    with torch.no_grad():
        check_drawn(instances(pristine, width, max_steps=8, large=False), claim, examples)
    return worst[0]


@torch.no_grad()
def check_one_step(
    stepper: AbstractStepper | type[AbstractStepper],
    problem: Problem | None = None,
    dim: int | None = None,
    examples: int = th.EXAMPLES,
) -> float:
    """Assert a step does not depend on history in ``state`` or on the stepper (for schemes that do not declare
    ``multistep``): a step from the carried state equals one by an unused copy of the stepper from a fresh ``init``,
    from a perturbed copy of the state reached (first, while anything the last step left behind is still there: a
    state the scheme never produced, so a cache keyed on anything but ``y`` itself is caught) and from the state
    reached, to ``ONE_STEP_RTOL``.

    Fixed: ten steps whose size changes every step. Drawn (unless ``problem`` is given): ``examples`` instances, up to
    ``MAX_HORIZON / 2`` steps (two unused copies each) of drawn shape, magnitude and signed sizes, by up to three
    instances with different parameters handing the state on as a model's layers do (a cache of a quantity scaled by one
    instance's parameter fails when the next one reads it)."""
    stepper = _instance(stepper)
    worst = _fixed_one_step(stepper, problem, dim)
    if problem is not None or examples <= 0:
        return worst
    name, pristine = _name(stepper), _copy(stepper)
    width = dim if dim is not None else stepper_width(stepper)

    def claim(inst: Instance) -> None:
        layers = inst.steppers(pristine)
        unused = [_copy(s) for s in layers]
        drawn = inst.problem(layers[0])
        field = drawn.field_for(layers[0])
        g = generator(inst.seed + 2)

        def each(i, s, t, y, dt, state):
            noise = torch.randn(_flat(y).shape, generator=g, dtype=torch.float64).to(_flat(y).dtype)
            nudged = _unflat(_flat(y) + 1e-3 * drawn.scale * noise, y)
            for start, which in ((nudged, "a perturbed copy of the state it reached"), (y, "the state it reached")):
                carried = s.step(field, t, start, dt, state)[0]
                fresh_stepper = _copy(unused[i % len(layers)])
                fresh = fresh_stepper.step(field, t, start, dt, fresh_stepper.init(field, t, start))[0]
                defect = _error(carried, fresh, drawn.scale)
                if defect > th.ONE_STEP_RTOL:
                    handed = f" (instance {i % len(layers)} of {len(layers)})" if len(layers) > 1 else ""
                    raise AssertionError(
                        f"{name} reads history from its state or from itself: at step {i}{handed}, a step of "
                        f"{dt:.4g} from {which} with the carried state differs from one by an unused copy of the "
                        f"stepper from a fresh init by {defect:.2e} (relative) on {drawn.name}; declare "
                        "multistep = True, or key anything kept between steps on y itself."
                    )
            return None

        _layers_run(layers, field, drawn.initial(layers[0]), inst.t0, inst.dts(), each)

    check_drawn(instances(pristine, width, max_steps=th.MAX_HORIZON // 2), claim, examples)
    return worst
