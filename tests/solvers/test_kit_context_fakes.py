"""Fakes that are right where the other checks look and wrong in one context a model runs them in: each is rejected,
naming the claim and the context; the library's schemes pass in every context.

Each fake is a plausible "speed trick", "guard" or "cache" written against the public API.
"""

import math
from typing import ClassVar

import pytest
import torch

import solvers
from solvers import AbstractStepper, PhaseState
from solvers.testing import CONTEXTS, REFERENCE, check_contexts, check_evals, check_reversible
from solvers.testing.contexts import (
    AUTOCASTS,
    DTYPES,
    FIELDS,
    LAYOUTS,
    MODES,
    SCALES,
    THREADS,
    TIMES,
    TRANSFORMS,
    AttentionFFN,
)


class _Heun(AbstractStepper, abstract=True):
    """Heun's method that takes ``cheat`` where ``wrong_here`` says so; right everywhere else."""

    order: ClassVar[int] = 2
    second_order: ClassVar[bool] = False
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 2

    def wrong_here(self, field, t, y, dt) -> bool:
        raise NotImplementedError

    def step(self, field, t, y, dt, state):
        k1 = field(t, y)
        k2 = field(t + dt, y + dt * k1)
        if self.wrong_here(field, t, y, dt):
            return self.cheat(y, dt, k1, k2), None
        return y + 0.5 * dt * (k1 + k2), None

    def cheat(self, y, dt, k1, k2):  # Euler, with the evaluations still made
        return y + dt * k1


class _RightHeun(_Heun):
    def wrong_here(self, field, t, y, dt):
        return False


class Bf16UnderAutocast(_Heun):
    def wrong_here(self, field, t, y, dt):
        return torch.is_autocast_enabled("cpu")

    def cheat(self, y, dt, k1, k2):  # the update in bf16 "because autocast is on anyway"
        return (y.bfloat16() + (0.5 * dt * (k1 + k2)).bfloat16()).to(y.dtype)


class EulerForHalf(_Heun):
    def wrong_here(self, field, t, y, dt):
        return y.dtype in (torch.float16, torch.bfloat16)


class TypoWithThreads(_Heun):
    def wrong_here(self, field, t, y, dt):
        return torch.get_num_threads() > 1

    def cheat(self, y, dt, k1, k2):  # a typo'd weight on the path only several threads take
        return y + dt * (0.5 * k1 + 0.6 * k2)


class Bf16SumAtWidth8(_Heun):
    def wrong_here(self, field, t, y, dt):
        return y.shape[-1] >= 8

    def cheat(self, y, dt, k1, k2):  # a bf16 stage sum where the width "makes it worth it"
        return y + (0.5 * dt * (k1.bfloat16() + k2.bfloat16())).to(y.dtype)


class EulerAtEightTokens(_Heun):
    def wrong_here(self, field, t, y, dt):
        return y.dim() >= 3 and y.shape[-2] >= 8


class EulerOn4D(_Heun):
    def wrong_here(self, field, t, y, dt):
        return y.dim() == 4


class EulerOnLargeStates(_Heun):
    def wrong_here(self, field, t, y, dt):
        return y.numel() >= 2**16


class FastRK4(solvers.RK4):
    """The library's RK4 with a "fast path" for big states that drops the last stage's weight to Euler's."""

    def step(self, field, t, y, dt, state):
        if isinstance(y, torch.Tensor) and y.numel() >= 2**16:
            k1 = field(t, y)
            for c in (0.5, 0.5, 1.0):
                field(t + c * dt, y)
            return y + dt * k1, state
        return super().step(field, t, y, dt, state)


class StridedFlatten(_Heun):
    """A "zero-copy" flatten by ``as_strided`` that assumes the state is contiguous."""

    def wrong_here(self, field, t, y, dt):
        return False

    def step(self, field, t, y, dt, state):
        k1 = field(t, y)
        k2 = field(t + dt, y + dt * k1)
        flat = [torch.as_strided(u, (u.numel(),), (1,)) for u in (y, k1, k2)]
        return (flat[0] + 0.5 * dt * (flat[1] + flat[2])).reshape(y.shape), None


class DetachedPredictorInFloat32Training(_Heun):
    """Heun whose corrector sees a detached predictor in float32 training ("saves memory"): the same values."""

    def wrong_here(self, field, t, y, dt):
        return False

    def step(self, field, t, y, dt, state):
        k1 = field(t, y)
        guess = y + dt * k1
        if torch.is_grad_enabled() and y.dtype == torch.float32:
            guess = guess.detach()
        k2 = field(t + dt, guess)
        return y + 0.5 * dt * (k1 + k2), None


class DetachedStepInCorrector(_Heun):
    """Heun whose corrector uses ``dt.detach()`` when the step size is a tensor: a learnable dt loses a gradient."""

    def wrong_here(self, field, t, y, dt):
        return False

    def step(self, field, t, y, dt, state):
        k1 = field(t, y)
        k2 = field(t + dt, y + dt * k1)
        fixed = dt.detach() if isinstance(dt, torch.Tensor) else dt
        return y + 0.5 * dt * k1 + 0.5 * fixed * k2, None


class Bf16CachedForceVerlet(solvers.VelocityVerlet):
    """Velocity Verlet whose kept force is stored in bf16 in float32 runs ("halves the cache"): fresh steps are right,
    a carried one starts from the rounded force."""

    def step(self, field, t, y, dt, state):
        y1, state = super().step(field, t, y, dt, state)
        if y.x.dtype == torch.float32:
            state = state._replace(a=state.a.bfloat16().float())
        return y1, state


class Float16InverseVerlet(solvers.VelocityVerlet):
    """Velocity Verlet whose inverse runs in float16 for float32 states ("it only needs to be approximately right")."""

    def inverse(self, field, t, y1, dt):
        if y1.x.dtype == torch.float32:
            half = PhaseState(y1.x.half(), y1.v.half())

            def field16(s, x):
                return field(s, x.float()).half()

            back = super().inverse(field16, t, half, dt)
            return PhaseState(back.x.float(), back.v.float())
        return super().inverse(field, t, y1, dt)


@pytest.mark.parametrize(
    ("scheme", "context"),
    [
        (Bf16UnderAutocast, r"under bf16 autocast"),
        (EulerForHalf, r"(float16|bfloat16)"),
        (TypoWithThreads, r"2 threads"),
        (Bf16SumAtWidth8, r"states \(\d+, \d+, \d+\)"),
        (EulerAtEightTokens, r"states \(\d+, \d+, \d+\)"),
        (EulerOn4D, r"4-D states"),
        (EulerOnLargeStates, r"(at least 131072 entries|states \(\d+, \d+, \d+\))"),
        (FastRK4, r"(at least 131072 entries|states \(\d+, \d+, \d+\))"),
        (StridedFlatten, r"a (transposed|sliced|expanded) view"),
        (Bf16CachedForceVerlet, r"carried state .*float32"),
        (Float16InverseVerlet, r"its inverse differs .*float32"),
        (DetachedPredictorInFloat32Training, r"gradient of its step with respect to the state .*float32, enable_grad"),
        (
            DetachedStepInCorrector,
            r"gradient of its step with respect to a learnable dt .*dt a 0-d tensor requiring grad",
        ),
    ],
)
def test_a_scheme_wrong_in_one_context_is_rejected_naming_it(scheme, context):
    with pytest.raises(AssertionError, match=context) as caught:
        check_contexts(scheme)
    assert "counterexample:" in str(caught.value) or "in context (" in str(caught.value)


def test_the_fakes_are_right_in_the_reference_context():
    """Each fake passes where the other checks look (float64, no grad, a plain function, small contiguous states)."""
    for scheme in (Bf16UnderAutocast, EulerForHalf, TypoWithThreads, EulerOnLargeStates, DetachedStepInCorrector):
        check_evals(scheme, examples=0)
    y = torch.randn(2, 3, 4, dtype=torch.float64)
    want = _RightHeun().step(lambda t, x: -x, 0.0, y, 0.1, None)[0]
    for scheme in (Bf16SumAtWidth8, EulerAtEightTokens, EulerOn4D, StridedFlatten):
        assert torch.equal(scheme().step(lambda t, x: -x, 0.0, y, 0.1, None)[0], want)


# -- time: far start times and changing steps ------------------------------------------------------------------------


class ClampedTimes(_Heun):
    """Heun whose stage time is clamped at 16 ("the positional schedule ends there")."""

    def wrong_here(self, field, t, y, dt):
        return False

    def step(self, field, t, y, dt, state):
        k1 = field(t, y)
        later = t + dt
        k2 = field(min(later, 16.0) if not isinstance(later, torch.Tensor) else later.clamp(max=16.0), y + dt * k1)
        return y + 0.5 * dt * (k1 + k2), None


class WrappedInverse(solvers.VelocityVerlet):
    """Velocity Verlet whose inverse wraps its time with ``fmod(t, 2π)`` ("the forcing is periodic")."""

    def inverse(self, field, t, y1, dt):
        return super().inverse(field, math.fmod(float(t), 2 * math.pi), y1, dt)


class RestartingAB2(AbstractStepper):
    """A variable-step Adams–Bashforth 2 that restarts (a midpoint step, one more evaluation) when the step changes
    by more than 8 times."""

    order: ClassVar[int] = 2
    second_order: ClassVar[bool] = False
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 1
    multistep: ClassVar[bool] = True
    startup_evals: ClassVar[tuple[int, ...]] = (2,)

    def step(self, field, t, y, dt, state):
        f = field(t, y)
        if state is None or abs(float(dt)) > 8 * abs(state[1]) or 8 * abs(float(dt)) < abs(state[1]):
            mid = field(t + 0.5 * dt, y + 0.5 * dt * f)
            return y + dt * mid, (f, float(dt))
        previous, h = state
        r = float(dt) / h
        return y + dt * ((1 + 0.5 * r) * f - 0.5 * r * previous), (f, float(dt))


class EulerPastTheSchedule(_Heun):
    """Heun that drops its corrector past t = 100 ("the schedule is flat there"): every evaluation at the right time,
    so only a reference that does not share the far time tells."""

    def wrong_here(self, field, t, y, dt):
        return abs(float(t.detach() if isinstance(t, torch.Tensor) else t)) > 100


class EulerBeforeZero(_Heun):
    """Heun that drops its corrector at negative times ("no layer runs there")."""

    def wrong_here(self, field, t, y, dt):
        return float(t.detach() if isinstance(t, torch.Tensor) else t) < -10


class OverflowGuard(_Heun):
    """Heun with an "overflow guard": Euler once the state exceeds 100 in size."""

    def wrong_here(self, field, t, y, dt):
        return float(y.detach().abs().max()) > 100


class UnderflowGuard(_Heun):
    """Heun that skips the corrector on "negligible" states, below 0.01 in size."""

    def wrong_here(self, field, t, y, dt):
        return float(y.detach().abs().max()) < 1e-2


class EulerOnEvalFields(_Heun):
    """Heun with an "inference fast path": Euler when the field is a module in eval mode (a model generating)."""

    def wrong_here(self, field, t, y, dt):
        return isinstance(field, torch.nn.Module) and not field.training


@pytest.mark.parametrize(
    ("scheme", "context"),
    [
        (EulerPastTheSchedule, r"from t = 500 \(the reference from t = 0\.3\)"),
        (EulerBeforeZero, r"from t = -64 \(the reference from t = 0\.3\)"),
        (OverflowGuard, r"state and field scaled by 2\^10"),
        (UnderflowGuard, r"state and field scaled by 2\^-10"),
        (EulerOnEvalFields, r"an nn.Module field in eval mode"),
    ],
)
def test_a_scheme_that_switches_on_the_time_the_size_or_the_fields_mode_is_rejected(scheme, context):
    """The reference does not share what the scheme switches on: a far start is compared with the reference from the
    instance's own start (the field shifted in time), a scaled state with the reference at its own size."""
    with pytest.raises(AssertionError, match=context):
        check_contexts(scheme, examples=0)
    check_evals(scheme, examples=0)  # right where the other checks look: every evaluation at the right time


def test_a_far_start_and_a_scale_leave_a_correct_step_where_it_was():
    """The shifted and scaled runs of correct schemes agree with the reference: a scale by a power of two to the bit in
    float64, a far start to what rounding its stage times moves it."""
    y = torch.randn(2, 3, 4, dtype=torch.float64)

    def field(t, x):
        return math.cos(t) * x.roll(1, dims=-1) - x

    for scheme in (solvers.RK4(), solvers.Heun(), solvers.BogackiShampine3()):
        plain = scheme.step(field, 0.3, y, 0.4, scheme.init(field, 0.3, y))[0]
        big = scheme.step(lambda t, x: 1024 * field(t, x / 1024), 0.3, 1024 * y, 0.4, None)[0]
        assert torch.equal(big / 1024, plain)
        late = scheme.step(lambda t, x: field(t - 499.7, x), 500.0, y, 0.4, None)[0]
        assert torch.allclose(late, plain, rtol=0, atol=1e-12)


def test_stage_times_clamped_far_from_zero_are_rejected():
    with pytest.raises(AssertionError, match=r"c = .* at dt"):
        check_evals(ClampedTimes)


def test_an_inverse_that_wraps_its_time_is_rejected():
    with pytest.raises(AssertionError, match=r"declares reversible but inverse"):
        check_reversible(WrappedInverse)


def test_an_ab2_that_restarts_when_the_step_changes_much_is_rejected():
    with pytest.raises(AssertionError, match=r"evaluated the field 2 times in step"):
        check_evals(RestartingAB2)


# -- the contexts themselves -----------------------------------------------------------------------------------------


def test_every_value_of_every_aspect_is_run_on_the_fixed_instance():
    assert REFERENCE.dtype == torch.float64 and REFERENCE.mode == "no_grad" and REFERENCE.field == "function"
    assert {c.dtype for c in CONTEXTS} == set(DTYPES)
    assert {c.mode for c in CONTEXTS} == set(MODES)
    assert {c.field for c in CONTEXTS} == set(FIELDS) - {"given"}
    assert {c.layout for c in CONTEXTS} == set(LAYOUTS)
    assert {c.time for c in CONTEXTS} == set(TIMES)
    assert any(c.autocast for c in CONTEXTS) and any(c.rank4 for c in CONTEXTS) and any(c.token for c in CONTEXTS)
    assert {c.threads for c in CONTEXTS} == set(THREADS)
    assert {c.transform for c in CONTEXTS} == set(TRANSFORMS)
    assert {c.autocast_dtype for c in CONTEXTS} == {None, *AUTOCASTS}
    assert any(c.deterministic for c in CONTEXTS) and any(len(c.heads) >= 2 for c in CONTEXTS)
    assert any(c.t0 is not None and abs(c.t0) > 8192 for c in CONTEXTS) and any(
        c.dt and abs(c.dt) > 1.5 for c in CONTEXTS
    )
    assert any(c.t0 is not None and abs(c.t0) >= 100 for c in CONTEXTS)
    assert any(c.size == "large" for c in CONTEXTS) and any(c.size == (2, 64, 768) for c in CONTEXTS)
    assert {c.scale for c in CONTEXTS} >= {1.0, *SCALES}


def test_the_attention_field_couples_tokens_and_depends_on_time():
    field = AttentionFFN(8, seed=3)
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    moved = x.clone()
    moved[:, 0] += torch.randn(2, 8, dtype=torch.float64)
    assert not torch.allclose(field(0.0, x)[:, 1], field(0.0, moved)[:, 1])  # token 1 sees token 0
    assert torch.allclose(field(0.0, x)[:1], field(0.0, torch.cat([x[:1], moved[1:]]))[:1])  # samples do not mix
    assert not torch.allclose(field(0.0, x), field(1.0, x))
    assert field(0.0, x[:, 0]).shape == (2, 8)  # rows are one token each


# The library's schemes step the same in every context: check_stepper runs check_contexts on every registered scheme
# (tests/solvers/test_steppers.py), these among them.


class AbsoluteMidpoint(_Heun):
    """A midpoint whose stage time is ``t + |dt| / 2`` ("a time is never before its start"): wrong for dt < 0, which
    reversible backpropagation takes."""

    evals_per_step: ClassVar[int] = 2

    def wrong_here(self, field, t, y, dt):
        return False

    def step(self, field, t, y, dt, state):
        k1 = field(t, y)
        return y + dt * field(t + abs(dt) / 2, y + 0.5 * dt * k1), None


def test_an_abscissa_wrong_for_negative_steps_is_rejected():
    with pytest.raises(AssertionError, match=r"c = \[-?0, -0\.5\] at dt = -0\.5"):
        check_evals(AbsoluteMidpoint)
