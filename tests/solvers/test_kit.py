"""The property kit must fail loudly on a scheme that claims more than it has, and pass a correct user scheme.

Each fake below passed the kit as it was before it measured orders in the asymptotic range, tested symplecticity on a
nonlinear problem, checked reversibility from a fresh ``init`` and counted evaluations at more than one ``dt``; each
test names the claim and the evidence the kit now reports.
"""

import math
import re
import types
from typing import ClassVar

import pytest
import torch

from helpers import PlainEuler, PlainHeun
from solvers import (
    RK4,
    AbstractStepper,
    Damped,
    LightWave,
    Mix,
    Omelyan4,
    PhaseState,
    SemiImplicitEuler,
    Split,
    VelocityMix,
    VelocityVerlet,
    axpy,
    integrate,
)
from solvers.testing import (
    ORDER_TOLERANCE,
    RecordingField,
    anharmonic_problem,
    check_evals,
    check_layer,
    check_one_step,
    check_order,
    check_protocol,
    check_reversible,
    check_stepper,
    check_symplectic,
    default_problems,
    linear_problem,
    measure_order,
    oscillator_problem,
    pendulum_problem,
    reference,
)

Euler, Heun = PlainEuler, PlainHeun  # written out: fakes below change their declarations


class FakeOrder2Euler(Euler):
    order: ClassVar[int] = 2


class FakeSymplecticExplicitEuler(AbstractStepper):
    """Explicit Euler on (x, v): both updates read the old state. Claims symplectic; is not."""

    order: ClassVar[int] = 1
    second_order: ClassVar[bool] = True
    symplectic: ClassVar[bool] = True
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 1

    def step(self, field, t, y, dt, state):
        x, v = self._unpack(y)
        return PhaseState(x + dt * v, v + dt * field(t, x)), state


class FakeSymmetricSemiImplicitEuler(SemiImplicitEuler):
    """Semi-implicit Euler is reversible (its inverse drifts back, then kicks back) but not symmetric."""

    symmetric: ClassVar[bool] = True


class FakeEvalCount(Euler):
    evals_per_step: ClassVar[int] = 2


class WrongTimeHeun(AbstractStepper):
    """Heun evaluating its second stage at t + 2 dt instead of t + dt."""

    order: ClassVar[int] = 2
    second_order: ClassVar[bool] = False
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 2

    def step(self, field, t, y, dt, state):
        k1 = field(t, y)
        k2 = field(t + 2 * dt, y + dt * k1)
        return y + 0.5 * dt * (k1 + k2), state


class FixedOffsetHeun(WrongTimeHeun):
    """Heun evaluating its second stage at t + 0.1, a fixed offset: right only when dt = 0.1."""

    def step(self, field, t, y, dt, state):
        k1 = field(t, y)
        k2 = field(t + 0.1, y + dt * k1)
        return y + 0.5 * dt * (k1 + k2), state


# -- 1. an order that holds only at coarse steps ------------------------------------------------------------------


class DefectVerlet(AbstractStepper):
    """Velocity Verlet plus a first-order defect ``1e-3 dt² v`` in the velocity: order 1, though at the coarse steps
    the second-order term dominates and the local slopes are 2 (they fall to 1 below dt ≈ 4e-3)."""

    order: ClassVar[int] = 2
    second_order: ClassVar[bool] = True
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 2

    def step(self, field, t, y, dt, state):
        x, v = self._unpack(y)
        half = v + (0.5 * dt) * field(t, x)
        x1 = x + dt * half
        return PhaseState(x1, half + (0.5 * dt) * field(t + dt, x1) + (1e-3 * dt * dt) * v), state


# -- 2. symplectic only for linear forces -------------------------------------------------------------------------


class LookAheadKick(AbstractStepper):
    """``v <- v + dt a(x + dt² a(x))``, ``x <- x + dt v``. For ``a = -K x`` the kick's Jacobian ``-K + dt² K²`` is
    symmetric, so the step is symplectic; for a nonlinear force the kick's Jacobian ``A(x̃)(I + dt² A(x))`` is not
    symmetric, and the step is not symplectic."""

    order: ClassVar[int] = 1
    second_order: ClassVar[bool] = True
    symplectic: ClassVar[bool] = True
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 2

    def step(self, field, t, y, dt, state):
        x, v = self._unpack(y)
        v = v + dt * field(t, x + (dt * dt) * field(t, x))
        return PhaseState(x + dt * v, v), state


# -- 3. reversible by remembering, or with a wrong inverse ----------------------------------------------------------


class RememberingEuler(AbstractStepper):
    """Explicit Euler that pushes every state it leaves onto ``state`` and, asked for a step with ``dt < 0``, pops it:
    a carried state retraces any forward run exactly, though the scheme cannot undo a step."""

    order: ClassVar[int] = 1
    second_order: ClassVar[bool] = False
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = True
    symmetric: ClassVar[bool] = True
    evals_per_step: ClassVar[int] = 1

    def init(self, field, t0, y0):
        self._unpack(y0)
        return ()

    def step(self, field, t, y, dt, state):
        history = state or ()
        if dt < 0 and history:
            return history[-1], history[:-1]
        return y + dt * field(t, y), (*history, y)


class WrongInverseSemiImplicitEuler(SemiImplicitEuler):
    """Kicks back with the force where the step ended, ``a(t, x1)``, instead of where it started."""

    def inverse(self, field, t, y1, dt):
        x1, v1 = self._unpack(y1)
        return PhaseState(x1 - dt * v1, v1 - dt * field(t, x1))


class WrongTimeInverseVerlet(VelocityVerlet):
    """Symmetric, but its own inverse steps back from ``t`` instead of ``t + dt``: wrong for a time-dependent field."""

    def inverse(self, field, t, y1, dt):
        return self.step(field, t, y1, -dt, None)[0]


# -- 4. evaluations counted at one dt -------------------------------------------------------------------------------


class SubSteppingEuler(Euler):
    """Takes ``round(dt / 0.1)`` Euler sub-steps (at least one): one evaluation at ``dt = 0.1``, ten at ``dt = 1``."""

    def step(self, field, t, y, dt, state):
        n = max(1, round(abs(dt) / 0.1))
        h = dt / n
        for i in range(n):
            y = y + h * field(t + i * h, y)
        return y, state


# -- a correct user scheme: Yoshida's fourth-order triple jump -----------------------------------------------------


class Yoshida4(AbstractStepper):
    """Yoshida's triple jump: velocity Verlet with steps ``w1 dt, w0 dt, w1 dt``, ``w1 = 1 / (2 - 2^(1/3))``,
    ``w0 = 1 - 2 w1 < 0``; the inner half-kicks merge. Each kick's force is evaluated at the time its drifts have
    reached, ``t, t + w1 dt, t + (w1 + w0) dt, t + dt`` (two of them outside ``[t, t + dt]``). Order 4, symplectic and
    symmetric (so reversible); 4 evaluations, none cached. Reference: Yoshida, Phys. Lett. A 150 (1990);
    Hairer, Lubich & Wanner, §II.4."""

    order: ClassVar[int] = 4
    second_order: ClassVar[bool] = True
    symplectic: ClassVar[bool] = True
    reversible: ClassVar[bool] = True
    symmetric: ClassVar[bool] = True
    evals_per_step: ClassVar[int] = 4
    w1 = 1 / (2 - 2 ** (1 / 3))
    w0 = 1 - 2 * w1

    def step(self, field, t, y, dt, state):
        x, v = self._unpack(y)
        a = field(t, x)
        for w in (self.w1, self.w0, self.w1):
            v = v + (0.5 * w * dt) * a
            x = x + (w * dt) * v
            t = t + w * dt
            a = field(t, x)
            v = v + (0.5 * w * dt) * a
        return PhaseState(x, v), state


class HeunForwardEulerBack(Heun):
    """Heun's step for positive ``dt``; for negative ones its second stage is dropped (Euler): order 1 backwards."""

    def step(self, field, t, y, dt, state):
        if float(dt) > 0:
            return super().step(field, t, y, dt, state)
        k = field(t, y)
        field(t + dt, y + dt * k)  # the same evaluations at the same times: only the result differs
        return y + dt * k, state


class NarrowHeunWideEuler(VelocityVerlet):
    """Velocity Verlet on states of at most four tokens; on more (a transformer's sequence), a path that drifts with
    the old velocity: order 1 there, the same evaluations at the same times."""

    def step(self, field, t, y, dt, state):
        x, v = self._unpack(y)
        if x.dim() < 3 or x.shape[-2] <= 4:
            return super().step(field, t, y, dt, state)
        a0 = field(t, x)
        x1 = axpy(x, dt, v)
        return PhaseState(x1, axpy(axpy(v, 0.5 * dt, a0), 0.5 * dt, field(t + dt, x1))), state


class InPlaceKickVerlet(VelocityVerlet):
    """Velocity Verlet whose kicks scale the evaluation in place (``a.mul_(dt / 2)``): right wherever the field returns
    a new tensor, as every field the kit drew did, but it writes into the position when the field returns it (``x'' =
    x``) and into a constant force the model keeps."""

    def step(self, field, t, y, dt, state):
        x, v = self._unpack(y)
        v = v + field(t, x).mul_(0.5 * dt)
        x = axpy(x, dt, v)
        return PhaseState(x, v + field(t + dt, x).mul_(0.5 * dt)), state


class KickOnSecondInPlace(VelocityVerlet):
    """Velocity Verlet that scales its second evaluation in place where it is neither the first one's tensor nor its
    own input (what a field returning its input, or a single kept tensor, cannot show): a field keeping a tensor for
    each call is written into."""

    def step(self, field, t, y, dt, state):
        x, v = self._unpack(y)
        a0 = field(t, x)
        v = axpy(v, 0.5 * dt, a0)
        x = axpy(x, dt, v)
        a1 = field(t + dt, x)
        a1 = a1.mul_(0.5 * dt) if a1 is not a0 and a1 is not x else a1 * (0.5 * dt)
        return PhaseState(x, v + a1), state


class FrozenRateBackwards(AbstractStepper):
    """Velocity Verlet inside two half steps of a learnable friction ``exp(-r h / 2)``, order 2, whose backward steps
    read the rate it had when it was made: right at its start, order 0 backwards once the rate has moved."""

    order: ClassVar[int] = 2
    second_order: ClassVar[bool] = True
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 2

    def __init__(self):
        super().__init__()
        self.rate = torch.nn.Parameter(torch.tensor(0.5, dtype=torch.float64))
        self.made_with = float(self.rate)

    def step(self, field, t, y, dt, state):
        x, v = self._unpack(y)
        rate = self.rate if float(dt) > 0 else self.made_with
        damp = torch.exp(-rate * (0.5 * dt) * torch.ones((), dtype=torch.float64)).to(v.dtype)
        v = axpy(v * damp, 0.5 * dt, field(t, x))
        x = axpy(x, dt, v)
        return PhaseState(x, axpy(v, 0.5 * dt, field(t + dt, x)) * damp), state

    def limit_field(self, field):
        return lambda t, y: PhaseState(y.v, field(t, y.x) - self.rate * y.v)


# -- tests ----------------------------------------------------------------------------------------------------------


def test_a_step_that_writes_into_a_later_evaluation_or_reads_a_stale_rate_backwards_is_rejected():
    with pytest.raises(AssertionError, match=r"another tensor it keeps at each call, the step wrote into the field"):
        check_protocol(KickOnSecondInPlace, examples=0)
    moved_backwards = r"its learnable parameters moved .* falls like dt\^0\.0.* backwards in time"
    with pytest.raises(AssertionError, match=moved_backwards):
        check_order(FrozenRateBackwards, examples=0)


def test_a_step_that_writes_into_what_its_field_returned_is_rejected():
    with pytest.raises(
        AssertionError, match=r"InPlaceKickVerlet.step writes into what its field returned: .* its input"
    ):
        check_protocol(InPlaceKickVerlet, examples=0)
    check_protocol(VelocityVerlet, examples=0)


def test_the_order_is_measured_backwards_in_time_and_on_states_of_a_transformers_shape():
    """A scheme of lower order for negative steps, or for states of more tokens than the narrow problems have, is
    rejected by the order check itself (the other checks compare it with its own path at the same signed step and
    shape, where it is consistent)."""
    with pytest.raises(
        AssertionError, match=r"order 2 but its error falls like dt\^1\.0.*backwards in time \(dt < 0\)"
    ):
        check_order(HeunForwardEulerBack, examples=0)
    with pytest.raises(AssertionError, match=r"order 2 but its error falls like dt\^1\.0.* on tokens\(seed=5, 2 x 6"):
        check_order(NarrowHeunWideEuler, examples=0)
    assert check_order(Heun, examples=0) and check_order(VelocityVerlet, examples=0)


def test_fake_order_two_euler_is_rejected():
    with pytest.raises(AssertionError, match=r"FakeOrder2Euler declares order 2 but its error falls like dt\^1\.0"):
        check_stepper(FakeOrder2Euler)


def test_order_is_measured_where_it_is_asymptotic():
    """At the coarse grids the defect hides (local slopes ~2); the finest grids show order 1."""
    m = measure_order(DefectVerlet, oscillator_problem(seed=1, T=0.5))
    assert min(m.local[:3]) > 1.9 and m.dts[-1] <= 2**-12
    claim = r"DefectVerlet declares order 2 but its error falls like dt\^1\.0"
    with pytest.raises(AssertionError, match=claim) as info:
        check_stepper(DefectVerlet)
    assert re.search(r"local slopes: (1\.9\d|2\.0\d), .*1\.0\d\)", str(info.value))


def test_unsteady_slopes_are_reported():
    """Stopped in the middle of the crossover, the last two local slopes disagree: no order is read there; the kit
    then tries longer horizons, where the slopes settle toward the lower order, so the claim still fails."""
    from solvers.testing import thresholds
    from solvers.testing.order import _measure

    problem = oscillator_problem(seed=1, T=0.5)
    m = measure_order(DefectVerlet, problem)
    assert m.steady
    original = thresholds.MIN_DT
    try:
        thresholds.MIN_DT = 2.0**-9  # finest dt 2e-3: local slopes 1.92 then 1.71
        assert not _measure(DefectVerlet(), problem).steady  # local slopes 1.92 then 1.71
        with pytest.raises(
            AssertionError, match=r"DefectVerlet declares order 2 but its error (has not settled|falls l)"
        ):
            check_order(DefectVerlet, problem)
    finally:
        thresholds.MIN_DT = original


def test_high_order_scheme_is_measured_above_the_rounding_floor():
    m = measure_order(RK4, linear_problem(seed=0, T=0.5))
    assert len(m.errors) >= 3 and m.steady and abs(m.slope - 4) < 0.1
    assert all(e >= 100 * 8 * 2**k * 2.2e-16 for k, e in enumerate(m.errors))


def test_fake_symplectic_explicit_euler_is_rejected():
    with pytest.raises(AssertionError, match="FakeSymplecticExplicitEuler declares symplectic but one step") as info:
        check_stepper(FakeSymplecticExplicitEuler)
    assert re.search(r"\|det M - 1\| = [1-9]", str(info.value))


def test_fake_symplectic_energy_growth_is_reported():
    """Past the Jacobian test the energy test catches it too (called directly on the run)."""
    from solvers.testing.geometry import _energy_errors

    errors = _energy_errors(FakeSymplecticExplicitEuler(), oscillator_problem(seed=3), 0.1, 200.0)
    assert errors[-len(errors) // 4 :].max() > 100 * errors[: len(errors) // 4].max()


def test_symplectic_only_for_linear_forces_is_rejected():
    check_symplectic(LookAheadKick, oscillator_problem(seed=3), T=50.0)  # the linear problem alone is fooled
    with pytest.raises(AssertionError, match=r"LookAheadKick declares symplectic but .* on anharmonic") as info:
        check_stepper(LookAheadKick)
    assert float(re.search(r"max\|MᵀJM - J\| = (\S+) ", str(info.value)).group(1)) > 1e-6


def test_symplectic_tolerance_is_rounding_level():
    report = check_symplectic(SemiImplicitEuler, anharmonic_problem(seed=0, dim=3))
    assert report["structure_defect"] < 1e-14 and report["det_defect"] < 1e-14


def test_fake_symmetric_semi_implicit_euler_is_rejected():
    assert check_reversible(SemiImplicitEuler) < 1e-14  # reversible through its inverse
    with pytest.raises(
        AssertionError, match=r"FakeSymmetricSemiImplicitEuler declares symmetric but step\(t \+ dt, .* misses by"
    ):
        check_stepper(FakeSymmetricSemiImplicitEuler)


def test_reversible_by_remembering_is_rejected():
    p = linear_problem(seed=0)
    stepper, y, state = RememberingEuler(), p.x0, None
    for k in range(5):  # with its carried state, five steps back retrace five forward exactly
        y, state = stepper.step(p.field, 0.1 * k, y, 0.1, state)
    for k in range(5, 0, -1):
        y, state = stepper.step(p.field, 0.1 * k, y, -0.1, state)
    assert torch.equal(y, p.x0)
    with pytest.raises(
        AssertionError,
        match=r"RememberingEuler declares symmetric but step\(t \+ dt, step\(t, y, dt\), -dt\) = y misses by "
        r"\S+ \(relative.*at dt = 1 .*fresh init",
    ):
        check_reversible(RememberingEuler)
    with pytest.raises(AssertionError, match="RememberingEuler evaluated the field 0 times"):
        check_stepper(RememberingEuler)  # its drawn evaluation count, earlier in the run, sees it skip the field


def test_wrong_inverse_is_rejected():
    with pytest.raises(
        AssertionError,
        match=r"WrongInverseSemiImplicitEuler declares reversible but inverse\(field, t, step\(y\), dt\) = y misses",
    ):
        check_stepper(WrongInverseSemiImplicitEuler)
    with pytest.raises(
        AssertionError, match=r"WrongTimeInverseVerlet declares reversible but inverse\(.*forcing=0\.5"
    ):  # its symmetric steps are right; only the time-dependent field exposes the inverse
        check_reversible(WrongTimeInverseVerlet)


def test_inverse_of_a_state_never_produced_is_checked():
    """``step(inverse(y1)) = y1`` for a y1 no step produced: an inverse that looks up what step saw cannot pass."""

    class LookupInverseEuler(AbstractStepper):
        order: ClassVar[int] = 1
        second_order: ClassVar[bool] = False
        symplectic: ClassVar[bool] = False
        reversible: ClassVar[bool] = True
        evals_per_step: ClassVar[int] = 1
        seen: ClassVar[dict] = {}

        def step(self, field, t, y, dt, state):
            y1 = y + dt * field(t, y)
            self.seen[tuple(y1.reshape(-1).tolist())] = y
            return y1, state

        def inverse(self, field, t, y1, dt):
            return self.seen.get(tuple(y1.reshape(-1).tolist()), y1)

    with pytest.raises(AssertionError, match=r"declares reversible but step\(field, t, inverse\(y1\), dt\) = y1"):
        check_reversible(LookupInverseEuler)


def test_reversible_declarations_must_agree():
    with pytest.raises(TypeError, match="declares reversible and multistep"):

        class ReversibleLightWave(LightWave):
            reversible: ClassVar[bool] = True
            symmetric: ClassVar[bool] = True

    with pytest.raises(TypeError, match="declares reversible but neither writes inverse"):

        class ReversibleDamped(Damped):
            reversible: ClassVar[bool] = True

    with pytest.raises(TypeError, match="declares symmetric, so step\\(-dt\\) is its inverse"):

        class SymmetricHeun(Heun):
            symmetric: ClassVar[bool] = True


def test_wrong_evaluation_count_is_rejected():
    with pytest.raises(AssertionError, match="evaluated the field 1 times in step 0 with a new field"):
        check_evals(FakeEvalCount)


def test_evaluations_are_counted_at_every_dt():
    field = RecordingField(linear_problem(seed=0).field)
    SubSteppingEuler().step(field, 0.0, linear_problem(seed=0).x0, 0.1, None)
    assert len(field.times) == 1  # one evaluation at dt = 0.1, as declared
    with pytest.raises(
        AssertionError,
        match=r"SubSteppingEuler evaluated the field 10 times in step 0 with a new field at dt = 1; .*"
        r"evals_per_step = 1",
    ):
        check_stepper(SubSteppingEuler)


def test_evaluation_times_must_move_with_the_step():
    with pytest.raises(
        AssertionError, match=r"FixedOffsetHeun evaluates the field at t \+ c dt with c = \[0, 0\.1\] at dt = 1 but"
    ):
        check_evals(FixedOffsetHeun)


def test_evaluation_at_the_wrong_time_is_rejected():
    """t + 2 dt moves with the step, so the count passes; the order on the forced pendulum does not."""
    check_evals(WrongTimeHeun)
    with pytest.raises(
        AssertionError, match=r"WrongTimeHeun declares order 2 but .*dt\^1\.\d+.* on (nonlinear|pendulum)"
    ):
        check_stepper(WrongTimeHeun)


def test_missing_declaration_is_a_clear_error():
    with pytest.raises(TypeError, match="Incomplete must declare the class variable\\(s\\) order, second_order"):

        class Incomplete(AbstractStepper):
            def step(self, field, t, y, dt, state):
                return y, state


def test_kit_passes_each_check_on_true_claims():
    assert check_order(Euler, linear_problem(seed=5))[0] == pytest.approx(1.0, abs=0.3)
    assert check_symplectic(SemiImplicitEuler)["det_defect"] < 1e-12
    assert check_reversible(VelocityVerlet) < 1e-12


def test_yoshida_triple_jump_passes(monkeypatch):
    """A correct fourth-order symplectic composition, evaluating outside [t, t + dt], passes, and the kit does no more
    work for it than for a fourth-order composition whose stages stay inside the step (counted in steps taken, not
    seconds: Omelyan's 4th order, whose coefficients lie in [0, 1]). Both are compared on a few drawn examples: their
    default runs are test_steppers'."""
    p = pendulum_problem(seed=0)
    field = RecordingField(p.field)
    integrate(Yoshida4(), [field], PhaseState(p.x0, p.v0), 0.5)
    assert min(field.times) < 0 and max(field.times) > 0.5
    steps = {Yoshida4: 0, Omelyan4: 0}
    for cls in steps:

        def counted(self, *args, _step=cls.step, _cls=cls):
            steps[_cls] += 1
            return _step(self, *args)

        monkeypatch.setattr(cls, "step", counted)
    report = check_stepper(Yoshida4, examples=4)
    check_stepper(Omelyan4, examples=4)
    assert 0 < steps[Yoshida4] <= 2 * steps[Omelyan4], steps
    assert all(abs(s - 4) < 0.1 for s in report["order"])
    assert report["symplectic"]["rate"] > 3.7 and report["reversible"] < 1e-14


def test_linear_reference_is_the_matrix_exponential():
    p = oscillator_problem(seed=0, dim=1)
    k = -float(p.field(0.0, torch.ones(1, 1, dtype=torch.float64)))  # x'' = -k x
    w = k**0.5
    refs = reference(SemiImplicitEuler(), p)
    t = p.T
    x = p.x0 * math.cos(w * t) + p.v0 / w * math.sin(w * t)
    assert torch.allclose(refs[-1].x, x, rtol=1e-13, atol=1e-13)


def test_nonlinear_reference_is_converged():
    """The extrapolated RK4 reference at half its step agrees to rounding, far below the smallest error an order fit
    uses (100 n eps >= 1.8e-13); either RK4 run alone would not (1e-12, 7e-14 on this problem)."""
    from solvers.testing import thresholds
    from solvers.testing.references import _trajectory_error

    p = anharmonic_problem(seed=3, dim=3, T=0.5)
    refs = reference(VelocityVerlet(), p)
    original = thresholds.REFERENCE_DT
    try:
        thresholds.REFERENCE_DT = original / 2
        finer = reference(VelocityVerlet(), p)
    finally:
        thresholds.REFERENCE_DT = original
    assert _trajectory_error(refs, finer) < 2e-14


_GAIN = {"gain": 1.0}
"""A global a field below reads when called (a user may change it between two checks)."""


class _Settings:
    """A class whose attribute a field below reads when called."""

    rate = 1.0

    @staticmethod
    def force(x):
        return -torch.sin(x)


_helpers = types.ModuleType("_helpers")
"""A module whose functions a field below calls, one of them in a module of its own (``_helpers.sub.force``)."""
_helpers.sub = types.ModuleType("_helpers.sub")
_helpers.sub.force = lambda x: -torch.sin(x)


def test_a_reference_is_solved_once_for_every_scheme_of_its_kind_and_only_for_the_same_problem(monkeypatch):
    """The reference is kept, keyed by what it depends on: the field's code and every value it closes over or reads
    from its module, the start, the span and the stepper's kind. Rebuilding a problem finds it; a problem that
    differs in any of these, or a stepper with a limit field of its own, is solved anew."""
    from collections import OrderedDict

    from solvers.testing import references
    from solvers.testing import thresholds as th
    from solvers.testing.problems import Problem

    def problem(scale=1.0, x0=0.3):
        w = torch.tensor([scale, 2.0], dtype=torch.float64)
        start = torch.full((2, 2), 0.3, dtype=torch.float64)
        start[-1, -1] = x0  # the last entry alone
        return Problem("p", lambda t, x: -_GAIN["gain"] * w * torch.sin(x), start, torch.zeros_like(start), 0.5, False)

    solved, solve = [], references._solve
    monkeypatch.setattr(references, "_REFERENCES", OrderedDict())
    monkeypatch.setattr(references, "_solve", lambda stepper, p: solved.append(p) or solve(stepper, p))
    first = reference(VelocityVerlet(), problem())
    again = reference(Omelyan4(), problem())  # another scheme of the same kind, the problem built anew
    assert len(solved) == 1 and all(torch.equal(a.x, b.x) and torch.equal(a.v, b.v) for a, b in zip(first, again))
    fresh = solve(VelocityVerlet(), problem())
    assert all(torch.equal(a.x, b.x) and torch.equal(a.v, b.v) for a, b in zip(first, fresh))
    reference(VelocityVerlet(), problem(scale=-0.0))  # a tensor the field closes over
    reference(VelocityVerlet(), problem(x0=0.30000000000000004))  # the start's last bits
    reference(Heun(), problem())  # a first-order stepper: the stacked system
    with monkeypatch.context() as patch:
        patch.setitem(_GAIN, "gain", 2.0)  # a global the field reads
        reference(VelocityVerlet(), problem())
    scaled = lambda t, x: -math.tau * torch.sin(x)  # noqa: E731
    start = torch.full((2, 2), 0.3, dtype=torch.float64)
    reference(VelocityVerlet(), Problem("q", scaled, start, 0 * start, 0.5, False))
    with monkeypatch.context() as patch:
        patch.setattr(math, "tau", 6.0)  # data read from a module
        reference(VelocityVerlet(), Problem("q", scaled, start, 0 * start, 0.5, False))
    reference(VelocityVerlet(), Problem("q", scaled, start, 0 * start, 0.5, False))
    assert len(solved) == 7
    rated = lambda t, x: -_Settings.rate * torch.sin(x)  # noqa: E731
    reference(VelocityVerlet(), Problem("r", rated, start, 0 * start, 0.5, False))
    with monkeypatch.context() as patch:
        patch.setattr(_Settings, "rate", 3.0)  # data read from a class
        reference(VelocityVerlet(), Problem("r", rated, start, 0 * start, 0.5, False))
    reference(VelocityVerlet(), Problem("r", rated, start, 0 * start, 0.5, False))
    assert len(solved) == 9
    reference(LightWave(), problem())  # a friction of its own: never kept
    reference(LightWave(), problem())
    assert len(solved) == 11
    for name, value in (("REFERENCE_DT", th.REFERENCE_DT / 2), ("CHECKPOINTS", 2 * th.CHECKPOINTS)):
        with monkeypatch.context() as patch:  # how the reference is solved
            patch.setattr(th, name, value)
            reference(VelocityVerlet(), problem())
    assert len(solved) == 13
    called = {  # a function the field calls, read as an attribute of a module, of a module in it, of a class
        "s": (lambda t, x: _helpers.sub.force(x), _helpers.sub, "force"),  # noqa: E731
        "c": (lambda t, x: _Settings.force(x), _Settings, "force"),  # noqa: E731
    }
    for name, (field, owner, attribute) in called.items():
        reference(VelocityVerlet(), Problem(name, field, start, 0 * start, 0.5, False))
        with monkeypatch.context() as patch:
            patch.setattr(owner, attribute, staticmethod(lambda x: -2 * torch.sin(x)))
            reference(VelocityVerlet(), Problem(name, field, start, 0 * start, 0.5, False))
        reference(VelocityVerlet(), Problem(name, field, start, 0 * start, 0.5, False))
    assert len(solved) == 17


def test_recording_field_records_times():
    f = RecordingField(lambda t, x: x)
    f(0.5, torch.zeros(1))
    assert f.times == [0.5]


class FakeOneStepLightWave(LightWave):
    multistep: ClassVar[bool] = False


def test_hidden_history_is_rejected():
    with pytest.raises(AssertionError, match="FakeOneStepLightWave reads history from its state.*multistep = True"):
        check_stepper(FakeOneStepLightWave)


SLOW_PAIR = pytest.mark.slow  # about 10 s each; the first pair stands for them in the default suite


@pytest.mark.parametrize(
    "wave, diffusion",
    [
        (SemiImplicitEuler, Euler),
        pytest.param(VelocityVerlet, Heun, marks=SLOW_PAIR),
        pytest.param(Damped, RK4, marks=SLOW_PAIR),
    ],
    ids=lambda c: c.__name__,
)
def test_custom_mix_pairs_live_up_to_their_declarations(wave, diffusion):
    mix = Mix(wave=wave(), diffusion=diffusion(), theta0=0.0)
    assert mix.evals_per_step == wave.evals_per_step + diffusion.evals_per_step - 1
    check_stepper(mix)


# -- claims that held only on the problems, step sizes and parameter values the kit used to try ----------------------


class _First(AbstractStepper, abstract=True):
    order: ClassVar[int] = 1
    second_order: ClassVar[bool] = False
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 1


class MixedTimeHeun3(_First):
    """Heun's third-order weights with stage times (1, 1/3, 1/3) instead of (0, 1/3, 2/3): every order condition a
    field ``g(x) + h(t)`` sees holds, the mixed one (``Σ b c r = 1/3``) does not, so it is of order 2 wherever time and
    state enter the field jointly."""

    order: ClassVar[int] = 3
    evals_per_step: ClassVar[int] = 3

    def step(self, field, t, y, dt, state):
        k1 = field(t + dt, y)
        k2 = field(t + dt / 3, y + dt / 3 * k1)
        k3 = field(t + dt / 3, y + 2 * dt / 3 * k2)
        return y + dt * (k1 / 4 + 3 * k3 / 4), state


class DampedAtLargeSteps(VelocityVerlet):
    """Velocity Verlet that damps the velocity when dt > 0.5 (a "guard" for big layer steps): neither symplectic nor
    symmetric at a residual layer's dt = 1."""

    def step(self, field, t, y, dt, state):
        y1, state = super().step(field, t, y, dt, state)
        return (PhaseState(y1.x, 0.9 * y1.v) if abs(dt) > 0.5 else y1), state


class DiagonalNewtonEuler(FakeSymplecticExplicitEuler):
    """Explicit Euler on (x, v) with an inverse by Newton's method on a diagonal Jacobian: exact for forces acting per
    coordinate, slow to converge (off by ~1e-8 after six iterations) for coupled ones."""

    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = True

    def inverse(self, field, t, y1, dt):
        x1, v1 = self._unpack(y1)
        rhs = x1 - dt * v1
        x = rhs.clone()
        for _ in range(6):
            with torch.enable_grad():
                leaf = x.detach().requires_grad_()
                a = field(t, leaf)
                (diagonal,) = torch.autograd.grad(a.sum(), leaf)
            x = x - (x - dt * dt * a.detach() - rhs) / (1 - dt * dt * diagonal)
        return PhaseState(x, v1 - dt * field(t, x))


class LateMomentumEuler(_First):
    """Euler that adds heavy-ball momentum from its fifth step on: it reads history, and claims not to."""

    def init(self, field, t0, y0):
        return (0, y0)

    def step(self, field, t, y, dt, state):
        n, previous = state
        y1 = y + dt * field(t, y)
        return (y1 + 0.5 * dt * (y - previous) if n >= 4 else y1), (n + 1, y)


class StaleCacheVerlet(VelocityVerlet):
    """Velocity Verlet whose first-same-as-last force is reused whenever field and time match, whatever ``x`` is:
    stale as soon as something edits the state between steps (an FFN sub-step, a norm)."""

    def step(self, field, t, y, dt, state):
        x, v = self._unpack(y)
        a = state[1] if (state is not None and state[0] is field and state[2] == t) else field(t, x)
        v = v + 0.5 * dt * a
        x = x + dt * v
        a1 = field(t + dt, x)
        return PhaseState(x, v + 0.5 * dt * a1), (field, a1, t + dt)


class ConstantStepAB2(_First):
    """Adams–Bashforth 2 with its constant-step weights: order 2 only while dt does not change."""

    order: ClassVar[int] = 2
    multistep: ClassVar[bool] = True

    def step(self, field, t, y, dt, state):
        f = field(t, y)
        return (y + dt * f if state is None else y + dt * (1.5 * f - 0.5 * state)), f


class NoLimitClaimHeun(_First):
    """A Heun with a wrong weight (0.4 for 0.5) that escapes the order check by declaring order 0 (no small-step
    limit) though its step shrinks with dt: it converges to x' = 0.9 f."""

    order: ClassVar[int] = 0
    evals_per_step: ClassVar[int] = 2

    def step(self, field, t, y, dt, state):
        k1 = field(t, y)
        return y + dt * (0.5 * k1 + 0.4 * field(t + dt, y + dt * k1)), state

    def limit_field(self, field):
        raise ValueError("no small-step limit")


class LearnableStageHeun(_First):
    """A two-stage family with a learnable stage ``alpha`` but weights fixed at (1/2, 1/2): order 2 only at its
    initial ``alpha = 1``, order 1 wherever training moves it."""

    order: ClassVar[int] = 2
    evals_per_step: ClassVar[int] = 2

    def __init__(self):
        super().__init__()
        self.alpha = torch.nn.Parameter(torch.tensor(1.0))

    def step(self, field, t, y, dt, state):
        a = self.alpha.to(y.dtype)
        k1 = field(t, y)
        return y + 0.5 * dt * (k1 + field(t + a * dt, y + a * dt * k1)), state


def test_a_stage_time_wrong_only_where_time_and_state_mix_is_rejected():
    with pytest.raises(AssertionError, match=r"MixedTimeHeun3 declares order 3 but .*dt\^2\.\d+.* on nonlinear"):
        check_order(MixedTimeHeun3)


def test_claims_are_checked_at_a_residual_layers_step():
    with pytest.raises(
        AssertionError, match=r"DampedAtLargeSteps declares symplectic but one step of size (0\.[5-9]|1\.)"
    ):
        check_symplectic(DampedAtLargeSteps)
    with pytest.raises(AssertionError, match=r"DampedAtLargeSteps declares symmetric .* at dt = 1 "):
        check_reversible(DampedAtLargeSteps)


def test_an_inverse_exact_only_for_forces_acting_per_coordinate_is_rejected():
    assert check_reversible(DiagonalNewtonEuler, pendulum_problem(seed=4), dts=(0.5, 0.1)) < 1e-12  # uncoupled: fine
    with pytest.raises(AssertionError, match=r"DiagonalNewtonEuler declares reversible .* on anharmonic"):
        check_reversible(DiagonalNewtonEuler, anharmonic_problem(seed=4, dim=3), dts=(0.5, 0.1))


def test_history_read_only_after_a_few_steps_is_rejected():
    with pytest.raises(
        AssertionError, match=r"LateMomentumEuler reads history from its state or from itself: after 4 steps"
    ):
        check_one_step(LateMomentumEuler)


def test_a_cache_keyed_on_anything_but_the_state_is_rejected():
    with pytest.raises(
        AssertionError, match=r"StaleCacheVerlet reads history .* from a perturbed copy of the state it reached"
    ):
        check_one_step(StaleCacheVerlet)


def test_a_scheme_that_assumes_one_step_size_is_rejected_on_an_uneven_grid():
    uniform = measure_order(ConstantStepAB2, pendulum_problem(seed=2, T=0.5))
    assert abs(uniform.slope - 2) < 0.1  # right while dt stays put
    with pytest.raises(AssertionError, match=r"ConstantStepAB2 declares order 2 but .*dt\^1\.\d+.* on an uneven grid"):
        check_order(ConstantStepAB2)


def test_order_zero_must_mean_a_step_that_does_not_shrink():
    with pytest.raises(AssertionError, match=r"NoLimitClaimHeun declares order 0 .* shrinks with dt"):
        check_stepper(NoLimitClaimHeun)
    assert "diffusion" in check_stepper(Mix(diffusion_dt=1.0))["order"]  # a genuine order-0 scheme passes
    with pytest.raises(AssertionError, match=r"NoLimitClaimHeun declares order 0 .* shrinks with dt"):
        check_order(NoLimitClaimHeun)  # check_order alone too, on each problem
    assert check_order(VelocityMix) == [] and check_order(VelocityMix, dim=3) == []  # nothing to measure


def test_learnable_parameters_are_checked_away_from_their_start():
    assert abs(measure_order(LearnableStageHeun, pendulum_problem(seed=2, T=0.5)).slope - 2) < 0.1
    with pytest.raises(AssertionError, match=r"LearnableStageHeun, its learnable parameters moved .* declares order 2"):
        check_order(LearnableStageHeun)


@pytest.mark.parametrize(
    "stepper",
    [
        LightWave(dim=4),
        *(pytest.param(s, marks=pytest.mark.slow) for s in (LightWave(dim=3), Mix(dim=5), Damped(gamma=0.5, dim=3))),
    ],
    ids=["LightWave-4", "LightWave-3", "Mix-5", "Damped-3"],
)
def test_per_channel_schemes_are_checked_at_their_width(stepper):
    """The module docstring's ``check_stepper(MyScheme(dim=4, ...))``: the problems take the parameters' width."""
    report = check_stepper(stepper)
    assert all(abs(s - stepper.order) < 0.3 for s in report["order"])
    layer = check_layer(Split(stepper))  # and the layer it makes, on a block of that width
    assert layer["declared"] == 1 and abs(layer["slope"] - 1) < 0.3


# -- the protocol every measurement takes for granted -----------------------------------------------------------------


class InPlaceEuler(_First):
    def step(self, field, t, y, dt, state):
        return y.add_(dt * field(t, y)), state


class BatchMeanHeun(Heun):
    """Heun plus a term that couples the samples of a batch (small: O(dt³), so every order still reads 2)."""

    def step(self, field, t, y, dt, state):
        y1, state = super().step(field, t, y, dt, state)
        return y1 + dt**3 * (y - y.mean(0, keepdim=True)), state


class UpcastEuler(_First):
    def step(self, field, t, y, dt, state):
        return y.double() + dt * field(t, y).double(), state


class DetachedEuler(_First):
    """Evaluates the field on ``y.detach()`` "to save memory": the step is right, its gradient is not."""

    def step(self, field, t, y, dt, state):
        return y + dt * field(t, y.detach()), state


class SelfCountingEuler(_First):
    """Keeps a step counter on the stepper (never reset) and evaluates at ``n dt`` instead of the ``t`` it is given."""

    def __init__(self):
        super().__init__()
        self.n, self.t0 = 0, 0.0

    def step(self, field, t, y, dt, state):
        self.n += 1
        return y + dt * field(self.t0 + (self.n - 1) * dt, y), state


class UnsqueezingEuler(_First):
    def step(self, field, t, y, dt, state):
        return (y + dt * field(t, y)).unsqueeze(0), state


class ForgetfulEuler(_First):
    def step(self, field, t, y, dt, state):
        return y + dt * field(t, y)


class DetachedLookAheadKick(FakeSymplecticExplicitEuler):
    """A kick at a look-ahead position whose inner force is detached, then a drift: its autograd Jacobian is
    symplectic, the map is not (the detached term is missing from the Jacobian)."""

    evals_per_step: ClassVar[int] = 2

    def step(self, field, t, y, dt, state):
        x, v = self._unpack(y)
        v = v + dt * field(t, x + dt * dt * field(t, x).detach())
        return PhaseState(x + dt * v, v), state


@pytest.mark.parametrize(
    "stepper, message",
    [
        (InPlaceEuler, r"InPlaceEuler\.step changed its input y in place"),
        (BatchMeanHeun, r"BatchMeanHeun does not step the samples of a batch independently: sample 0"),
        (
            UpcastEuler,
            r"UpcastEuler\.step returned \(2, 4\) torch\.float64 .* for a float32 y of \(2, 4\) torch\.float32",
        ),
        (DetachedEuler, r"DetachedEuler's gradient is not that of its step"),
        (SelfCountingEuler, r"SelfCountingEuler gives a different y1 when the same step .* is taken again"),
        (UnsqueezingEuler, r"UnsqueezingEuler\.step returned \(1, 2, 4\) .*: y1 must have y's shape"),
        (ForgetfulEuler, r"ForgetfulEuler\.step must return \(y1, state\)"),
        (DetachedLookAheadKick, r"DetachedLookAheadKick's gradient is not that of its step"),
    ],
    ids=lambda v: v.__name__ if isinstance(v, type) else "",
)
def test_a_step_that_breaks_the_protocol_is_rejected_first(stepper, message):
    with pytest.raises(AssertionError, match=message):
        check_stepper(stepper)


def test_the_protocol_holds_for_every_variant_row():
    """A variant row is its scheme with options, checked as made (each registered scheme's protocol is checked by its
    default check_stepper in tests/solvers/test_steppers.py)."""
    from solvers import STEPPERS

    for row in STEPPERS.variants().values():
        assert check_protocol(row()) < 1e-6


# -- correct schemes the kit used to reject ----------------------------------------------------------------------------


class Butcher5(_First):
    """Butcher's six-stage fifth-order Runge–Kutta method (1964): its local slopes are still settling toward 5 when
    the error reaches float64's rounding floor."""

    order: ClassVar[int] = 5
    evals_per_step: ClassVar[int] = 6
    A = ((), (1 / 4,), (1 / 8, 1 / 8), (0, -1 / 2, 1), (3 / 16, 0, 0, 9 / 16), (-3 / 7, 2 / 7, 12 / 7, -12 / 7, 8 / 7))
    b = (7 / 90, 0, 32 / 90, 12 / 90, 32 / 90, 7 / 90)
    c = (0, 1 / 4, 1 / 4, 1 / 2, 3 / 4, 1)

    def step(self, field, t, y, dt, state):
        k = []
        for row, c in zip(self.A, self.c):
            k.append(field(t + c * dt, y + dt * sum((a * ki for a, ki in zip(row, k)), torch.zeros_like(y))))
        return y + dt * sum(b * ki for b, ki in zip(self.b, k)), state


class HeunStartedAB3(_First):
    """Adams–Bashforth 3 (variable step not needed: it is checked at one step size) started by a Heun step and an AB2
    step: two evaluations in the first step, one after."""

    order: ClassVar[int] = 3
    multistep: ClassVar[bool] = True
    startup_evals: ClassVar[tuple[int, ...]] = (2,)

    def step(self, field, t, y, dt, state):
        f = field(t, y)
        history = state or ()
        if not history:
            return y + 0.5 * dt * (f + field(t + dt, y + dt * f)), (f,)
        if len(history) == 1:
            return y + dt * (1.5 * f - 0.5 * history[0]), (history[0], f)
        older, old = history
        return y + dt * (23 / 12 * f - 16 / 12 * old + 5 / 12 * older), (old, f)


@pytest.mark.slow  # the whole kit on a six-stage scheme (about 10 s); RK4's order is measured in the default suite
def test_a_fifth_order_scheme_whose_slopes_settle_at_the_rounding_floor_passes():
    report = check_stepper(Butcher5)
    assert all(abs(s - 5) < 0.3 for s in report["order"])


def test_a_drawn_ladder_that_reaches_the_floor_before_settling_is_redrawn_and_a_given_one_judged():
    """Dormand–Prince 5 on this problem: its dt^6 term still trades places with its dt^5 term when the next grid
    falls below float64's floor (local slopes 6.6, 5.6, 4.4; fitted 5.0). Drawn, it is redrawn (it failed one
    examples=200 run); given, it is judged. A scheme whose slope falls short at the floor is never excused."""
    from test_kit_false_alarms import DormandPrince5

    from solvers.testing.order import _unresolved, measure_order
    from solvers.testing.problems import nonlinear_problem

    problem = nonlinear_problem(seed=0, dim=1, T=0.25)
    m = measure_order(DormandPrince5, problem)
    assert m.at_floor and not m.steady and _unresolved(5, m), m
    with pytest.raises(AssertionError, match="has not settled to one power of dt"):
        check_order(DormandPrince5, problem=problem)
    short = measure_order(RK4, problem)  # order 4: as if it declared 5
    assert not _unresolved(5, short) and _unresolved(4, short) is False


def test_a_drawn_ladder_whose_extrapolated_limit_alone_falls_short_at_the_floor_is_redrawn():
    """Dormand–Prince 5 on this problem: its local slopes 6.72, 5.69, 5.19, 4.91 change geometrically when the next
    grid falls below float64's floor, so their limit is extrapolated (4.64), but finer grids (a reference accurate to
    1e-14) show them dip to 4.84 and come back to 5. What was measured (fitted slope over the finest grids, finest local
    slope) reaches order 5: drawn, it is redrawn (it failed one examples=200 run); given, it is judged. A scheme of
    order 4 declared 5 measures short on the same ladder and is judged."""
    from test_kit_false_alarms import DormandPrince5

    from solvers.testing.order import _unresolved, measure_order
    from solvers.testing.problems import nonlinear_problem

    problem = nonlinear_problem(seed=4, dim=1, T=0.375)
    m = measure_order(DormandPrince5, problem)
    assert m.at_floor and m.settling and m.slope < 5 - ORDER_TOLERANCE <= m.local[-1], m
    assert _unresolved(5, m)
    with pytest.raises(AssertionError, match=r"falls like dt\^4\.6"):
        check_order(DormandPrince5, problem=problem)
    short = measure_order(RK4, problem)
    assert not _unresolved(5, short), short


def test_a_drawn_ladder_with_too_few_grids_above_the_floor_is_redrawn_where_its_slopes_reach_the_order():
    """Found by a thorough sweep: Kahan and Li's eighth-order composition on a drawn oscillator leaves two grids above
    float64's floor even over the longest horizon (slope 8.08 between them): no order can be read, none contradicts
    the claim, so the draw is redrawn (it failed an examples=200 run); the same two grids declared order 9 or more,
    or a slope short of the order, are judged."""
    from test_kit_false_alarms import KahanLi8

    from solvers.testing.order import OrderMeasurement, _unresolved, measure_order
    from solvers.testing.problems import oscillator_problem

    m = measure_order(KahanLi8, oscillator_problem(seed=1, dim=1, T=0.25))
    assert m.at_floor and len(m.errors) == 2 and _unresolved(8, m), m
    assert not _unresolved(9, m)
    short = OrderMeasurement("short", math.inf, (0.5, 0.25), (2e-6, 2e-7), (3.3,), False, at_floor=True)
    assert not _unresolved(8, short)


def test_a_multistep_start_up_is_declared_by_startup_evals():
    check_evals(HeunStartedAB3)
    assert all(abs(s - 3) < 0.3 for s in check_order(HeunStartedAB3, linear_problem(seed=0, dim=4, T=0.5)))

    class Undeclared(HeunStartedAB3):
        startup_evals: ClassVar[tuple[int, ...]] = ()

    with pytest.raises(AssertionError, match=r"Undeclared evaluated the field 2 times in step 0 .* evals_per_step = 1"):
        check_evals(Undeclared)

    class OneStep(Heun):
        startup_evals: ClassVar[tuple[int, ...]] = (2,)

    with pytest.raises(AssertionError, match="OneStep declares startup_evals, which only a multistep scheme has"):
        check_stepper(OneStep)


def test_an_error_that_stalls_at_a_small_level_hints_at_an_inexact_coefficient():
    class RoundedRK4(_First):
        order: ClassVar[int] = 4
        evals_per_step: ClassVar[int] = 4

        def step(self, field, t, y, dt, state):
            k1 = field(t, y)
            k2 = field(t + dt / 2, y + dt / 2 * k1)
            k3 = field(t + dt / 2, y + dt / 2 * k2)
            k4 = field(t + dt, y + dt * k3)
            return y + dt * (0.1667 * k1 + 0.3333 * (k2 + k3) + 0.1667 * k4), state

    with pytest.raises(AssertionError, match="often an inexact coefficient: a rounded decimal"):
        check_order(RoundedRK4)


def test_evaluations_of_a_layer_are_counted_on_its_block():
    """On a block problem the attention's evaluations are counted; velocity Verlet's force is reused between layers
    only where nothing acts between its steps (no FFN), as the layer claims on that block (``claims(block)``)."""
    from solvers.testing import block_problem

    layer = Split(VelocityVerlet())
    assert layer.claims(block_problem(second_order=True, ffn=False).field).fsal
    assert not layer.claims(block_problem(second_order=True).field).fsal
    for ffn in (True, False):
        check_evals(layer, block_problem(second_order=True, ffn=ffn))

    class ClaimsReuse(Split):  # reuse claimed on every block: wrong where the FFN acts between steps
        fsal: ClassVar[bool] = True

    with pytest.raises(AssertionError, match=r"ClaimsReuse evaluated the attention 2 times in step 1 .* and fsal"):
        check_evals(ClaimsReuse(VelocityVerlet()), block_problem(second_order=True))


# -- schemes the kit once judged wrongly ------------------------------------------------------------------------------
# Each of these passed (or crashed, or was refused though correct) before the kit moved parameters for every claim,
# ran its order problems on a non-symmetric force, gave its reversible problems a time dependence with no parity,
# stepped fresh copies of the stepper, checked odd widths, parameter gradients and the other mode.


class ChannelKick(AbstractStepper):
    """``v ← v + dt s a(x)``, ``x ← x + dt v`` with a learnable kick scale ``s`` (one per channel, or one in all), 1
    at the start: semi-implicit Euler there. Per channel, ``s ⊙ ∇V`` is not a gradient, so the map is symplectic only
    while ``s`` is uniform; one scale for all keeps it symplectic (``s ∇V = ∇(s V)``)."""

    order: ClassVar[int] = 1
    second_order: ClassVar[bool] = True
    symplectic: ClassVar[bool] = True
    reversible: ClassVar[bool] = True
    evals_per_step: ClassVar[int] = 1

    def __init__(self, dim: int | None = 2):
        super().__init__()
        self.s = torch.nn.Parameter(torch.ones(dim if dim is not None else ()))

    def step(self, field, t, y, dt, state):
        x, v = self._unpack(y)
        v = v + dt * self.s.to(x.dtype) * field(t, x)
        return PhaseState(x + dt * v, v), state

    def inverse(self, field, t, y1, dt):
        x1, v1 = self._unpack(y1)
        x = x1 - dt * v1
        return PhaseState(x, v1 - dt * self.s.to(x.dtype) * field(t, x))

    def limit_field(self, field):
        return lambda t, y: PhaseState(y.v, self.s.to(y.v.dtype) * field(t, y.x))


class StaleInverseKick(ChannelKick):
    """Its inverse, copied from semi-implicit Euler, forgets ``s``: right only while ``s = 1``."""

    symplectic: ClassVar[bool] = False

    def inverse(self, field, t, y1, dt):
        x = y1.x - dt * y1.v
        return PhaseState(x, y1.v - dt * field(t, x))


def test_symplectic_and_reversible_claims_must_hold_with_learnable_parameters_moved():
    with pytest.raises(
        AssertionError, match=r"ChannelKick, with its learnable parameters moved .* declares symplectic"
    ):
        check_symplectic(ChannelKick())
    with pytest.raises(AssertionError, match=r"StaleInverseKick, with its learnable parameters moved .* reversible"):
        check_reversible(StaleInverseKick())
    report = check_stepper(ChannelKick(dim=None))  # one scale for all channels: symplectic wherever it moves
    assert report["symplectic"]["structure_defect"] < 1e-12 and report["reversible"] < 1e-12


class Taylor2(AbstractStepper):
    """Second-order Taylor: ``x + dt v + dt²/2 a``, ``v + dt a + dt²/2 (J v + ∂a/∂t)``, ``J v`` by forward mode."""

    order: ClassVar[int] = 2
    second_order: ClassVar[bool] = True
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 2

    def tangent(self, field, t, x, v):
        return torch.func.jvp(lambda z: field(t, z), (x,), (v,))

    def step(self, field, t, y, dt, state):
        x, v = self._unpack(y)
        a, jv = self.tangent(field, t, x, v)
        a_t = (field(t + dt, x) - a) / dt
        return PhaseState(x + dt * v + (0.5 * dt * dt) * a, v + dt * a + (0.5 * dt * dt) * (jv + a_t)), state


class TransposedTaylor2(Taylor2):
    """``J v`` taken by a vector-Jacobian product, which gives ``Jᵀ v``: equal only where the force's Jacobian is
    symmetric (the oscillator, per-coordinate pendulums), not on attention's force."""

    def tangent(self, field, t, x, v):
        with torch.enable_grad():
            z = x if x.requires_grad else x.detach().requires_grad_()
            a = field(t, z)
            (jv,) = torch.autograd.grad(a, z, v, create_graph=x.requires_grad)
        return (a, jv) if x.requires_grad else (a.detach(), jv.detach())


def test_order_is_measured_on_a_force_whose_jacobian_is_not_symmetric():
    problem = default_problems(Taylor2())[0]
    assert problem.name.startswith("coupled(")
    assert abs(check_order(Taylor2, problem)[0] - 2) < 0.1
    with pytest.raises(AssertionError, match=r"TransposedTaylor2 declares order 2 .*dt\^1\.0\d.* on coupled\("):
        check_order(TransposedTaylor2, problem)


class MirroredInverseVerlet(VelocityVerlet):
    """Velocity Verlet undone by time reversal (flip v, step from ``-(t + dt)``, flip back), which forgets to mirror
    the force's time argument: right only for forces even in time."""

    symmetric: ClassVar[bool] = False

    def inverse(self, field, t, y1, dt):
        y, _ = self.step(field, -(t + dt), PhaseState(y1.x, -y1.v), dt, None)
        return PhaseState(y.x, -y.v)


def test_reversibility_is_checked_on_a_force_whose_time_dependence_has_no_parity():
    with pytest.raises(AssertionError, match=r"MirroredInverseVerlet declares reversible .* phase=0\.7"):
        check_reversible(MirroredInverseVerlet)


class SelfCacheVerlet(VelocityVerlet):
    """Reuses the last force from a cache on the stepper itself, keyed on the field and time but not on x."""

    fsal: ClassVar[bool] = True

    def __init__(self):
        super().__init__()
        self.cache = None

    def step(self, field, t, y, dt, state):
        x, v = self._unpack(y)
        hit = self.cache is not None and self.cache[0] is field and self.cache[1] == t
        v = v + 0.5 * dt * (self.cache[2] if hit else field(t, x))
        x = x + dt * v
        end = field(t + dt, x)
        self.cache = (field, t + dt, end)
        return PhaseState(x, v + 0.5 * dt * end), state


def test_a_cache_kept_on_the_stepper_itself_is_rejected():
    with pytest.raises(AssertionError, match=r"SelfCacheVerlet reads history from its state or from itself"):
        check_one_step(SelfCacheVerlet)


class RateHeun(Heun):
    """Heun on ``softplus(ρ) ⊙ f``, ``ρ`` one per channel: order 2 to ``x' = softplus(ρ) ⊙ f``."""

    def __init__(self, dim: int = 3):
        super().__init__()
        self.rho = torch.nn.Parameter(torch.zeros(dim))

    def rate(self, x):
        return torch.nn.functional.softplus(self.rho).to(x.dtype)

    def step(self, field, t, y, dt, state):
        k1 = self.rate(y) * field(t, y)
        k2 = self.rate(y) * field(t + dt, y + dt * k1)
        return y + 0.5 * dt * (k1 + k2), state

    def limit_field(self, field):
        return lambda t, x: self.rate(x) * field(t, x)


class DetachedRateHeun(RateHeun):
    """Reads its rate as Python floats: the step is right, but no gradient reaches ``ρ``, so training cannot move
    it."""

    def rate(self, x):
        return torch.tensor([float(r) for r in torch.nn.functional.softplus(self.rho)], dtype=x.dtype)


def test_a_first_order_scheme_of_odd_width_is_checked_and_its_parameters_get_their_gradient():
    from solvers.testing import thresholds

    report = check_stepper(RateHeun(dim=3))  # was refused: the one-step check wanted an even width for [x, v]
    assert report["one_step"] == 0.0
    # linear, nonlinear, uneven grid, backwards in time, moved rate forwards and backwards, tokens of a transformer's
    # shape, the drawn problems
    assert len(report["order"]) == 7 + thresholds.ORDER_EXAMPLES
    with pytest.raises(AssertionError, match=r"along a random direction of y and of the learnable parameters"):
        check_protocol(DetachedRateHeun(dim=3))


class DifferenceTaylor2(Heun):
    """Jacobian-free second-order Taylor, ``y + dt f + dt²/2 (f_t + J f)``, the bracket by a forward difference of
    relative size 1e-7: correct, and its output carries rounding noise of about ``eps / 1e-7 · dt²``. Heun's
    declarations (order 2, two evaluations)."""

    def step(self, field, t, y, dt, state):
        f = field(t, y)
        h = 1e-7 * dt
        return y + dt * f + (0.5 * dt * dt) * ((field(t + h, y + h * f) - self.inner(f)) / h), state

    def inner(self, f):
        return f


class DetachedDifferenceTaylor2(DifferenceTaylor2):
    def inner(self, f):
        return f.detach()


def test_a_noisy_but_correct_step_passes_the_gradient_check_and_a_detached_one_does_not():
    """Difference quotients at a fixed small step drown in such a step's rounding noise; the kit picks the step where
    quotients agree and holds the gradient to what they resolve."""
    assert check_protocol(DifferenceTaylor2) < 1e-3
    with pytest.raises(AssertionError, match="DetachedDifferenceTaylor2's gradient is not that of its step"):
        check_protocol(DetachedDifferenceTaylor2)


def test_protocol_faults_found_beyond_the_first_batched_step_are_reported():
    class RowGateKick(ChannelKick):  # the per-channel scale broadcast along the batch axis by mistake
        symplectic: ClassVar[bool] = False
        reversible: ClassVar[bool] = False

        def step(self, field, t, y, dt, state):
            x, v = self._unpack(y)
            v = v + dt * self.s.to(x.dtype)[:, None] * field(t, x)
            return PhaseState(x + dt * v, v), state

    class BufferReuseHeun(Heun):  # from its second step on, writes its result into its input
        def step(self, field, t, y, dt, state):
            k1 = field(t, y)
            k2 = field(t + dt, y + dt * k1)
            return (y + 0.5 * dt * (k1 + k2) if state is None else y.add_(0.5 * dt * (k1 + k2))), True

    class CheapAtInferenceHeun(Heun):  # Euler in eval mode
        def step(self, field, t, y, dt, state):
            if not self.training:
                return y + dt * field(t, y), state
            return super().step(field, t, y, dt, state)

    with pytest.raises(AssertionError, match=r"for a sample 0's y of \(1, 2\) .* y1 must have y's shape"):
        check_protocol(RowGateKick())  # was a RuntimeError from inside the kit
    with pytest.raises(AssertionError, match="changed its input y in place on the second step"):
        check_protocol(BufferReuseHeun)
    for stepper, mode in ((CheapAtInferenceHeun(), "eval"), (CheapAtInferenceHeun().eval(), "training")):
        with pytest.raises(AssertionError, match=f"CheapAtInferenceHeun steps differently in {mode} mode"):
            check_protocol(stepper)


W8 = (0.102799849391985, -1.96061023297549, 1.93813913762276, -0.158240635368243, -1.44485223686048, 0.253693336566229)
W8 = W8 + (0.914844246229740,)


class Yoshida8(VelocityVerlet):
    """Yoshida's eighth-order composition of fifteen drift-kick-drift steps (his solution D): symplectic and
    symmetric; its sub-steps reach far (weights near ±1.9), so a large step overflows on a stiff force."""

    order: ClassVar[int] = 8
    evals_per_step: ClassVar[int] = 15
    fsal: ClassVar[bool] = False

    def step(self, field, t, y, dt, state):
        x, v = self._unpack(y)
        for w in (*reversed(W8), 1 - 2 * sum(W8), *W8):
            x = x + (0.5 * w * dt) * v
            v = v + (w * dt) * field(t + 0.5 * w * dt, x)
            x = x + (0.5 * w * dt) * v
            t = t + w * dt
        return PhaseState(x, v), state


@pytest.mark.slow  # fifteen force evaluations per step, Jacobians by autograd (about 5 s)
def test_symplecticity_is_checked_where_a_far_reaching_composition_stays_finite():
    report = check_symplectic(Yoshida8)  # was a crash: an SVD of the Jacobian of a step that had overflowed
    assert report["structure_defect"] < 1e-12 and report["rate"] > 7.7


@pytest.mark.slow  # fifteen force evaluations per step on grids down to float64's floor
def test_an_eighth_order_scheme_is_beyond_float64_and_the_order_check_says_so():
    """The documented limit: the error of an order-8 scheme reaches the rounding floor before it settles to one power
    of dt, so the order cannot be read and the check fails saying that, not that the order is wrong."""
    with pytest.raises(AssertionError, match=r"Yoshida8 declares order 8 but its error has not settled"):
        check_order(Yoshida8)


class SmallStepTrapezoidVerlet(VelocityVerlet):
    """Velocity Verlet at layer-sized steps, the (non-symplectic) explicit trapezoid below dt = 0.02: both order 2."""

    def step(self, field, t, y, dt, state):
        if abs(dt) >= 0.02:
            return super().step(field, t, y, dt, state)
        x, v = self._unpack(y)
        a = field(t, x)
        x1, v1 = x + dt * v, v + dt * a
        return PhaseState(x + 0.5 * dt * (v + v1), v + 0.5 * dt * (a + field(t + dt, x1))), state


def test_symplecticity_is_checked_at_the_small_steps_of_a_deep_stack_too():
    with pytest.raises(AssertionError, match=r"SmallStepTrapezoidVerlet declares symplectic but one step of size 0\.0"):
        check_symplectic(SmallStepTrapezoidVerlet)


class UnitKick(AbstractStepper):
    """A kick and a drift of unit size whatever ``dt`` (no small-step limit: order 0), a symplectic map."""

    order: ClassVar[int] = 0
    second_order: ClassVar[bool] = True
    symplectic: ClassVar[bool] = True
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 1

    def step(self, field, t, y, dt, state):
        x, v = self._unpack(y)
        v = v + field(t, x)
        return PhaseState(x + v, v), state

    def limit_field(self, field):
        raise ValueError("a unit kick has no small-step limit")


def test_a_symplectic_map_with_no_small_step_limit_has_its_map_checked_and_no_energy_rate():
    report = check_symplectic(UnitKick, examples=4)
    assert report["energy"] == "not measured: its limit is not the problem's Hamiltonian flow"
