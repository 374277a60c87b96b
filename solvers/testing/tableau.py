"""The tableau claim: a scheme that states its coefficients steps as they say, wherever it is drawn."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import torch

from .._base import AbstractStepper, PhaseState
from .._coefficients import VALUES, coefficients_value
from . import thresholds as th
from ._common import _copy, _float64, _fresh_step, _instance, _name
from ._drawn import check_drawn, reject
from .problems import stepper_width
from .protocol import amplification, called_coefficients
from .references import _flat
from .strategies import Instance, instances


def stated_tableau(stepper: AbstractStepper) -> Any:
    """The coefficients ``stepper`` states as a value, or ``None``: its ``tableau`` (a :class:`~solvers.ButcherTableau`,
    :class:`~solvers.NystromTableau` or :class:`~solvers.Splitting`, whose claims are derived from it), else the
    Runge–Kutta tableau its ``coefficients()`` gives at its current parameters (``A``, ``b`` and ``c`` as numbers: a
    learnable Runge–Kutta family). A splitting given by ``coefficients()`` is left out: a learnable composition's (the
    triple jump's) is its step for an autonomous field only."""
    tableau = getattr(stepper, "tableau", None)
    if isinstance(tableau, VALUES):
        return tableau
    method = getattr(stepper, "coefficients", None)
    if not callable(method):
        return None
    given = called_coefficients(stepper, method, "tableau")  # None for a method of another meaning
    if not isinstance(given, Mapping) or set(given) - {"A", "b", "c"} or not {"A", "b"} <= set(given):
        return None
    numbers = [u for key in ("A", "b", "c") for u in _entries(given.get(key, ()))]
    if not all(isinstance(u, (int, float)) and not isinstance(u, bool) for u in numbers):
        return None  # tensors per channel: no one tableau
    try:
        return coefficients_value(A=given["A"], b=given["b"], c=given.get("c"))
    except ValueError:
        return None


def _entries(value: Any) -> list[Any]:
    """The entries of a coefficient vector or matrix given as nested lists or tuples."""
    if isinstance(value, (list, tuple)):
        return [u for item in value for u in _entries(item)]
    return [value]


class _Stated:
    """The coefficients' own step as a stepper (how much it amplifies rounding is measured on it, not on the scheme
    under test)."""

    def __init__(self, tableau: Any):
        self.tableau = tableau

    def init(self, field: Any, t: Any, y: Any) -> None:
        return None

    def step(self, field: Any, t: Any, y: Any, dt: Any, state: Any) -> tuple[Any, None]:
        return self.tableau.step(field, t, y, dt, None)[0], None


def check_tableau(
    stepper: AbstractStepper | type[AbstractStepper], dim: int | None = None, examples: int = th.EXAMPLES
) -> float | None:
    """Assert that a scheme stating its coefficients (``tableau``, or a Runge–Kutta tableau from ``coefficients()``;
    see :func:`stated_tableau`) steps as they say, at its current (drawn, moved) parameters: its
    step from a fresh ``init`` is the tableau's own step from the same state (``tableau.step``), in float64, to
    ``ONE_STEP_RTOL`` times how much the step amplifies rounding (a step written out by hand rounds in another order).
    Checked at fixed points (step sizes of 1 and -1, a far start time, parameters moved, a large state) and on
    ``examples`` drawn instances: any step size up to 1.5 of either sign, start times up to ``T0_RANGE[1]``, magnitudes
    over six decades, states of ``LARGE_STATE`` entries, parameters moved, up to four steps, each from where the
    scheme's last step left the state.

    Its claims (order, evaluations, first-same-as-last) are derived from the coefficients, so a scheme that states them
    and steps otherwise somewhere (a fast path for large states, a guard on the step size or on the size of its state,
    a shortcut past some time) claims what it does not do there, also where no order is measured (large steps).
    Steps that blow up (growth over ``BLOWN_UP``) are not judged. Returns the largest defect (relative), or ``None``
    (without checking anything) when the stepper states no tableau."""
    stepper = _instance(stepper)
    if stated_tableau(stepper) is None:
        return None
    name, pristine = _name(stepper), _copy(stepper)
    fixed_width = stepper_width(stepper)
    width = dim if dim is not None else fixed_width
    worst = [0.0]

    def claim(inst: Instance) -> None:
        low = _float64(inst.steppers(pristine)[0])
        tableau = stated_tableau(low)
        if tableau is None:
            return
        problem = inst.problem(low)
        field, y, t = problem.field_for(low), problem.initial(low), inst.t0
        for i, dt in enumerate(inst.dts()[:4]):
            with torch.no_grad():
                got = _fresh_step(low, field, t, y, dt)
                want = tableau.step(field, t, y, dt, None)[0]
                rate = field(t, y.x if isinstance(y, PhaseState) else y)
            start, ours, theirs = _flat(y), _flat(got), _flat(want)
            gain = amplification(_Stated(tableau), field, t, y, dt, theirs, th.EPS, inst.seed + i)
            if not gain <= th.BLOWN_UP:  # outside the scheme's stability region: rounding there proves nothing
                if i == 0:
                    reject()
                return
            size = max(float(start.abs().max()), float(theirs.abs().max()), abs(dt) * float(rate.abs().max()), 1e-300)
            defect = float((ours - theirs).abs().max()) / size
            worst[0] = max(worst[0], defect)
            allowed = th.ONE_STEP_RTOL * max(1.0, gain)
            if not defect <= allowed:
                raise AssertionError(
                    f"{name} states its coefficients ({type(tableau).__name__}) but its step differs from their step "
                    f"by {defect:.3g} (relative) at step {i} from t = {t:.4g}, dt = {dt:.4g}, on {problem.name} "
                    f"(ONE_STEP_RTOL is {th.ONE_STEP_RTOL:g}, times {max(1.0, gain):.3g}, how much this step "
                    "amplifies rounding): the scheme takes another path there, so the claims derived from its "
                    "coefficients do not hold for it."
                )
            y, t = got, t + dt

    base = Instance(
        seed=0, batch=2, tokens=3, width=width or 3, magnitude=1.0, dt=1.0, rate=0.5, t0=0.3, steps=4, moved=0.0,
        moved_seed=0, layers=1,
    )  # fmt: skip
    big = max(2, -(-th.LARGE_STATE // (width or 3)))
    fixed = [
        base,
        replace(base, dt=-1.0, t0=500.0, magnitude=1e3, moved=1.0, moved_seed=3),
        replace(base, batch=big, tokens=0, dt=0.7, magnitude=1e-3),
    ]
    strategy = instances(pristine, width, max_steps=4)
    check_drawn(strategy, claim, examples, fixed=fixed)
    return worst[0]
