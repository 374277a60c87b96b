"""The property kit must fail loudly on a scheme that claims more than it has, and pass a correct user scheme.

Each fake below passed the kit as it was before it measured orders in the asymptotic range, tested symplecticity on a
nonlinear problem, checked reversibility from a fresh ``init`` and counted evaluations at more than one ``dt``; each
test names the claim and the evidence the kit now reports.
"""

import math
import re
import time
from typing import ClassVar

import pytest
import torch

from solvers import (
    RK4,
    AbstractStepper,
    Damped,
    Euler,
    Heun,
    LightWave,
    Mix,
    PhaseState,
    SemiImplicitEuler,
    VelocityVerlet,
    integrate,
)
from solvers.testing import (
    RecordingField,
    anharmonic_problem,
    check_evals,
    check_order,
    check_reversible,
    check_stepper,
    check_symplectic,
    linear_problem,
    measure_order,
    oscillator_problem,
    pendulum_problem,
    reference,
)


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


# -- tests ----------------------------------------------------------------------------------------------------------


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
    assert re.search(r"local slopes: 1\.99, .*1\.0\d\)", str(info.value))


def test_unsteady_slopes_are_reported():
    """Stopped in the middle of the crossover, the last two local slopes disagree: no order is read there."""
    from solvers import testing

    problem = oscillator_problem(seed=1, T=0.5)
    m = measure_order(DefectVerlet, problem)
    assert m.steady
    original = testing._MIN_DT
    try:
        testing._MIN_DT = 2.0**-9  # finest dt 2e-3: local slopes 1.92 then 1.71
        with pytest.raises(AssertionError, match=r"has not settled to one power of dt .* 1\.92 then 1\.71"):
            check_order(DefectVerlet, problem)
    finally:
        testing._MIN_DT = original


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
    from solvers.testing import _energy_errors

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
        r"\S+ \(relative.*at dt = 0\.5 .*fresh init",
    ):
        check_stepper(RememberingEuler)


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
    with pytest.raises(AssertionError, match=r"WrongTimeHeun declares order 2 but .*dt\^1\.\d+.* on pendulum"):
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


def test_yoshida_triple_jump_passes():
    """A correct fourth-order symplectic composition, evaluating outside [t, t + dt], passes in seconds."""
    p = pendulum_problem(seed=0)
    field = RecordingField(p.field)
    integrate(Yoshida4(), [field], PhaseState(p.x0, p.v0), 0.5)
    assert min(field.times) < 0 and max(field.times) > 0.5
    start = time.perf_counter()
    report = check_stepper(Yoshida4)
    assert time.perf_counter() - start < 30
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
    from solvers import testing

    p = anharmonic_problem(seed=3, dim=3, T=0.5)
    refs = reference(VelocityVerlet(), p)
    original = testing._REFERENCE_DT
    try:
        testing._REFERENCE_DT = original / 2
        finer = reference(VelocityVerlet(), p)
    finally:
        testing._REFERENCE_DT = original
    assert testing._trajectory_error(refs, finer) < 2e-14


def test_recording_field_records_times():
    f = RecordingField(lambda t, x: x)
    f(0.5, torch.zeros(1))
    assert f.times == [0.5]


class FakeOneStepLightWave(LightWave):
    multistep: ClassVar[bool] = False


def test_hidden_history_is_rejected():
    with pytest.raises(AssertionError, match="FakeOneStepLightWave reads history from its state.*multistep = True"):
        check_stepper(FakeOneStepLightWave)


@pytest.mark.parametrize(
    "wave, diffusion", [(VelocityVerlet, Heun), (Damped, RK4), (SemiImplicitEuler, Euler)], ids=lambda c: c.__name__
)
def test_custom_mix_pairs_live_up_to_their_declarations(wave, diffusion):
    mix = Mix(wave=wave(), diffusion=diffusion(), theta0=0.0)
    assert mix.evals_per_step == wave.evals_per_step + diffusion.evals_per_step - 1
    check_stepper(mix)
