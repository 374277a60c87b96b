"""The evaluation count: how often, and where in the step, a stepper evaluates its field."""

from __future__ import annotations

import torch

from .._base import AbstractStepper, PhaseState
from . import thresholds as th
from ._common import _copy, _instance, _name, not_finite, placed
from ._drawn import check_drawn
from .problems import Problem, default_problems, stepper_width
from .strategies import Instance, instances


class RecordingField:
    """Wraps a field and records the time of every evaluation."""

    def __init__(self, field):
        self.field, self.times = field, []

    def __call__(self, t, x):
        self.times.append(float(t.detach()) if isinstance(t, torch.Tensor) else float(t))  # a learnable dt's time too
        return self.field(t, x)


#: How ``t0`` and ``dt`` are handed to a step: as Python floats, as 0-d tensors, and with ``dt`` a 0-d tensor that
#: requires grad (a learnable step size). The loop over depth computes each ``t`` afresh, so a scheme that
#: recognises "the same time" by identity loses its first-same-as-last reuse on tensors.
TIME_KINDS = ("float", "tensor", "learnable dt")


def _as_kind(value: float, kind: str, is_dt: bool):
    if kind == "float":
        return value
    tensor = torch.tensor(value, dtype=torch.float64)
    return tensor.requires_grad_(is_dt and kind == "learnable dt")


def _counted_run(
    steppers: list[AbstractStepper],
    problem: Problem,
    dts: list[float],
    t0: float,
    tied: bool,
    what: str,
    kind: str = "float",
    grad: bool = False,
) -> tuple[list[list[float]], float]:
    """Take ``len(dts)`` steps (by ``steppers`` in turn, handing the state on where one continues the other), each
    with a recording field (one for all steps if ``tied``), with ``t0`` and every ``dt`` handed over as ``kind``
    (:data:`TIME_KINDS`), and assert each step's evaluation count; return each step's abscissae ``c = (s - t) / dt``
    of its evaluation times ``s``, and the largest ``|t| / |dt|`` (how finely float64 resolves ``c``). ``grad``:
    with autograd on and a state that requires grad, as in training (a step that evaluates more there shows)."""
    if kind != "float":
        what = f"{what} (t0 and dt as {'0-d tensors' if kind == 'tensor' else 'a 0-d tensor, dt requiring grad'})"
    if grad:
        with torch.enable_grad():
            return _counted_run(steppers, problem, dts, t0, tied, f"{what} with autograd on", kind, grad=None)
    from .._splitting import Block

    first = steppers[0]
    y, base = problem.initial(first), problem.field_for(first)
    if grad is None:  # the state a training step takes: it requires grad
        y = PhaseState(*(u.detach().requires_grad_() for u in y)) if isinstance(y, PhaseState) else y.detach()
        y = y if isinstance(y, PhaseState) else y.requires_grad_()
    block = base if isinstance(base, Block) else None
    counted = base if block is None else block.attention
    fsal = first.claims(base).fsal  # a block stepper's reuse depends on its block
    name, declared, startup = _name(first), first.evals_per_step, tuple(first.startup_evals)
    shared = RecordingField(counted)
    t, state, previous, out, far = _as_kind(t0, kind, False), None, None, [], 0.0
    for i, dt_value in enumerate(dts):
        dt = _as_kind(dt_value, kind, True)
        s = steppers[i % len(steppers)]
        recorder = shared if tied else RecordingField(counted)
        field = recorder if block is None else block._replace(attention=recorder)
        before = len(recorder.times)
        fresh = previous is None or not s.continues(previous)
        try:
            if fresh:
                state = s.init(field, t, y)
            y, state = s.step(field, t, y, dt, state)
        except (ArithmeticError, ValueError, RuntimeError) as error:
            where = f"(step {i} of {len(dts)} on {problem.name}{what}, counting its evaluations)"
            raise AssertionError(not_finite(s, base, t, y, dt, where, error)) from None
        times = recorder.times[before:]
        if i < len(startup):
            expected, claim = startup[i], f"startup_evals = {startup}"
        else:
            expected = declared - 1 if (tied and fsal and i > 0) else declared
            claim = f"evals_per_step = {declared}{' and fsal' if fsal else ''}"
        how = "the same field as the step before" if (tied and i > 0) else "a new field"
        if len(times) != expected:
            raise AssertionError(
                f"{name} evaluated {'the attention' if block is not None else 'the field'} {len(times)} times in "
                f"step {i} with {how} at dt = {dt_value:g}{what}; it "
                f"declares {claim}, so {expected} were expected."
            )
        start = float(t.detach()) if isinstance(t, torch.Tensor) else float(t)
        out.append([(u - start) / dt_value for u in times])
        far = max(far, abs(start) / abs(dt_value))  # c resolves only to float64's rounding of t, over dt
        t, previous = t + dt, s
    return out, far


def _apart(a: list[float], b: list[float]) -> tuple[str, str]:
    """``a`` and ``b`` printed with the fewest digits (at least 4) that tell them apart: two abscissae that differ in
    the sixth digit are not printed alike."""
    for digits in range(4, 18):
        shown = tuple("[" + ", ".join(f"{u:.{digits}g}" for u in v) + "]" for v in (a, b))
        if shown[0] != shown[1] or len(a) != len(b):
            return shown
    return shown


def _same_abscissae(name: str, runs: list[tuple[float, tuple[list[list[float]], float]]], how: str) -> None:
    """Every run's step ``i`` evaluates at the same abscissae ``c``: where a step evaluates moves with the step (to
    ``1e-9`` relative, and to what float64 resolves of ``c`` where ``|t|`` is large beside ``|dt|``)."""
    first_dt, (first, far) = runs[0]
    for dt, (run, far_b) in runs[1:]:
        slack = 64 * th.EPS * max(far, far_b)
        for i, (a, b) in enumerate(zip(first, run)):
            if any(abs(u - v) > 1e-9 * max(1.0, abs(u)) + slack for u, v in zip(a, b)):
                shown_a, shown_b = _apart(a, b)
                raise AssertionError(
                    f"{name} evaluates the field at t + c dt with c = {shown_a} at dt = {first_dt:.6g} but "
                    f"c = {shown_b} at dt = {dt:.6g} (step {i}, {how}): where a step evaluates must move with "
                    "the step, at every dt."
                )


def _fitting(stepper: AbstractStepper, dts: list[float]) -> list[float]:
    """``dts``, halved together until ``EVAL_STEPS`` steps of each (and of each alternating with ``RATES[0]`` times
    it) fit inside the stepper's ``time_domain``: a scheme defined on a short interval is counted there (the same
    abscissae at every ``dt`` is a claim at any scale); unchanged where it states none. An interval too short for
    any of them keeps them as they are (the count then says it cannot run there)."""
    steps = th.EVAL_STEPS
    for halvings in range(40):
        scaled = [d / 2**halvings for d in dts]
        runs = [[d] * steps for d in scaled] + [
            [d if i % 2 == 0 else th.RATES[0] * d for i in range(steps)] for d in scaled
        ]
        if all(placed(stepper, th.EVAL_T0, run) is not None for run in runs):
            return scaled
    return dts


@torch.no_grad()
def check_evals(
    stepper: AbstractStepper | type[AbstractStepper],
    problem: Problem | None = None,
    dts=th.EVAL_DTS,
    dim: int | None = None,
    examples: int = th.EXAMPLES,
) -> None:
    """Assert every step evaluates the field ``evals_per_step`` times (``- 1`` on repeated fields if ``fsal``; the
    first steps as ``startup_evals`` says, if a multistep scheme declares it), with one fresh field per step and with
    one field for all steps, with autograd off and on (a state that requires grad, as in training), and that the
    evaluation times are ``t + c dt`` with the same abscissae ``c`` at every ``dt``.

    Fixed: ``EVAL_STEPS`` steps from ``t = EVAL_T0`` at every ``dt`` in ``dts``, and as many alternating ``dt`` and
    ``RATES[0] dt`` (a step size that changes twentyfold), all halved together where the runs do not fit the scheme's
    ``time_domain`` (:func:`_fitting`). Drawn (unless ``problem`` is given;
    ``examples`` instances, :func:`~solvers.testing.strategies.instances`): up to ``MAX_HORIZON`` steps of sizes
    alternating ``dt`` and ``rate dt`` (either sign), from a drawn ``t``, on states of drawn shape and magnitude, with
    the learnable parameters moved, compared with the same run at another ``dt``.

    On a :class:`~solvers.Block` problem (a block stepper's, e.g. :func:`block_problem`) the attention field's
    evaluations are counted, and first-same-as-last is what the stepper's ``on(block)`` claims for that block,
    where it has the method."""
    stepper = _instance(stepper)
    name = _name(stepper)
    chosen = problem or default_problems(stepper, dim)[-1]

    def start(sizes: list[float]) -> float:  # inside the times the scheme states it is defined on
        t0 = placed(stepper, th.EVAL_T0, sizes)
        if t0 is None:
            raise AssertionError(
                f"{name}'s time_domain holds no run of steps {sizes[:2]}...: the kit cannot count there."
            )
        return t0

    dts = _fitting(stepper, list(dts))
    for kind in TIME_KINDS:
        for tied in (False, True):
            how = "one field for all steps" if tied else "a new field each step"
            steps = th.EVAL_STEPS
            runs = [
                (dt, _counted_run([stepper], chosen, [dt] * steps, start([dt] * steps), tied, "", kind)) for dt in dts
            ]
            _same_abscissae(name, runs, how)
            changing = [[dt if i % 2 == 0 else th.RATES[0] * dt for i in range(steps)] for dt in dts]
            what = f" (steps alternating dt and {th.RATES[0]:g} dt)"
            runs = [(d[0], _counted_run([stepper], chosen, d, start(d), tied, what, kind)) for d in changing]
            _same_abscissae(name, runs, how + what)
    for tied in (False, True):  # with autograd on, as a model trains: the same count
        steps = [dts[0]] * th.EVAL_STEPS
        _counted_run([stepper], chosen, steps, start(steps), tied, "", grad=True)
    if problem is not None or examples <= 0:
        return
    pristine = _copy(stepper)
    width = dim if dim is not None else stepper_width(stepper)

    def claim(inst: Instance) -> None:
        moved = inst.steppers(pristine)[0]
        drawn = inst.problem(moved)
        kind = TIME_KINDS[inst.seed % len(TIME_KINDS)]  # the time kind drawn with the instance
        for tied in (False, True):
            how = "one field for all steps" if tied else "a new field each step"
            runs = [
                (
                    scale * inst.dt,
                    _counted_run([moved], drawn, [scale * d for d in inst.dts()], inst.t0, tied, "", kind),
                )
                for scale in (1.0, inst.rate)
            ]
            _same_abscissae(name, runs, how)

    check_drawn(instances(pristine, width, layers=1), claim, examples)
