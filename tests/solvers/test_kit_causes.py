"""Messages name the real cause: a step that meets a singular time of its own dynamics, a step that breaks where its
limit is regular, a cache keyed on the state's size or on its storage address, and a ``coefficients()`` that raises.
Each fake is rejected with a message naming the claim and the cause, and ``check_stepper`` ends it with the one line
that draws the same instances again."""

import math
from typing import ClassVar

import pytest
import torch

import solvers
from solvers import AbstractStepper, PhaseState, axpy
from solvers.testing import (
    check_contexts,
    check_evals,
    check_one_step,
    check_precision,
    check_protocol,
    check_stepper,
    check_tableau,
)
from solvers.testing.references import _linear_autonomous


class UnstatedNesterov(AbstractStepper):
    """Verlet with the friction ``3 / (t + 1)`` (exact over each half step), singular at ``t = -1``, stating no time
    domain: the kit's negative steps reach the singular time."""

    order: ClassVar[int] = 2
    second_order: ClassVar[bool] = True
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 2

    def step(self, field, t, y, dt, state):
        x, v = self._unpack(y)
        half, middle = 0.5 * dt, t + 0.5 * dt
        v = v * ((t + 1) / (middle + 1)) ** 3
        v = axpy(v, half, field(middle, x))
        x = axpy(x, dt, v)
        v = axpy(v, half, field(middle, x))
        return PhaseState(x, v * ((middle + 1) / (t + dt + 1)) ** 3), state

    def limit_field(self, field):
        return lambda t, y: PhaseState(y.v, field(t, y.x) - 3 / (t + 1) * y.v)


class _Heun(AbstractStepper, abstract=True):
    order: ClassVar[int] = 2
    second_order: ClassVar[bool] = False
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 2


class LogOfTime(_Heun):
    """Heun with a "time-warp" factor ``1 + 0 * log(t + 2)`` that is NaN before ``t = -2``: its limit is the field's,
    regular at every time, so the step itself breaks."""

    def step(self, field, t, y, dt, state):
        warp = 1 + 0 * math.log(t + 2) if float(t) > -2 else math.nan
        k1 = field(t, y)
        k2 = field(t + dt, y + dt * k1)
        return y + (0.5 * dt * warp) * (k1 + k2), state


class ScaleKeyedHeun(_Heun):
    """Heun that keeps its first stage on itself, keyed on the time and the power of two of the state's largest
    entry ("the same scale at the same time is the same state"): a sample stepped alone gets the batch's stage."""

    def step(self, field, t, y, dt, state):
        key = (float(t), y.dtype, math.frexp(float(y.detach().abs().max()))[1])
        cached = getattr(self, "_cache", None)
        if cached is not None and cached[0] == key:
            k1 = cached[1]
            field(t, y)  # the evaluation is still made: only the cache is wrong
        else:
            k1 = field(t, y)
            self._cache = (key, k1)
        k2 = field(t + dt, y + dt * k1)
        return y + (0.5 * dt) * (k1 + k2), state


class AddressKeyedVerlet(solvers.VelocityVerlet):
    """Velocity Verlet whose first-same-as-last force is reused when the position has the address and the time of the
    one it was computed at: new values written into that storage get the old force."""

    def step(self, field, t, y, dt, state):
        x, v = self._unpack(y)
        if state is not None and state[0] == (x.data_ptr(), float(t)):
            a = state[1]
        else:
            a = field(t, x)
        half = 0.5 * dt
        v = axpy(v, half, a)
        x = axpy(x, dt, v)
        a1 = field(t + dt, x)
        return PhaseState(x, axpy(v, half, a1)), ((x.data_ptr(), float(t + dt)), a1)


class RaisingCoefficients(solvers.TwoStageRK):
    """The learnable two-stage family whose ``coefficients()`` refuses parameters it calls "unusual"."""

    def coefficients(self):
        raise ValueError("alpha outside the range I tabulated")


def test_a_step_reaching_a_singular_time_of_its_own_dynamics_names_it_and_how_to_state_the_domain():
    with pytest.raises(AssertionError) as caught:
        check_stepper(UnstatedNesterov, examples=2, seed=1)
    message = str(caught.value)
    assert "its limit field is not finite at t = -1, a singular time of the dynamics it claims" in message
    assert "time_domain = (0.0, math.inf)" in message
    assert "keeps something on the stepper" not in message
    assert message.splitlines()[-1].strip().startswith("seed 1; reproduce with: check_stepper(")


def test_the_same_scheme_stating_where_it_is_defined_passes_the_checks_that_met_the_singular_time():
    class Stated(UnstatedNesterov):
        time_domain = (0.0, math.inf)

    check_evals(Stated, examples=4)
    check_protocol(Stated, examples=4)


def test_a_step_that_breaks_where_its_limit_is_regular_says_so():
    with pytest.raises(AssertionError, match=r"LogOfTime's step from t = .* is not finite.*limit field is finite"):
        check_protocol(LogOfTime, examples=20)


def test_a_cache_keyed_on_the_states_scale_is_named_a_cache_not_batch_coupling():
    with pytest.raises(AssertionError) as caught:
        check_protocol(ScaleKeyedHeun, examples=0)
    message = str(caught.value)
    assert "serves something kept from an earlier step to a state it does not belong to" in message
    assert "does not step the samples of a batch independently" not in message


def test_a_force_cache_keyed_on_the_storage_address_is_caught_by_new_values_in_the_same_storage():
    with pytest.raises(AssertionError, match=r"new values written into its storage .* its address"):
        check_one_step(AddressKeyedVerlet, examples=0)
    check_one_step(solvers.VelocityVerlet, examples=0)  # its cache holds the position it keys on: not written


def test_a_coefficients_method_that_raises_names_the_claim_that_reads_it():
    said = "RaisingCoefficients.coefficients() raised ValueError (alpha outside the range I tabulated)"
    for claim, check in (("precision", check_precision), ("contexts", check_contexts), ("tableau", check_tableau)):
        with pytest.raises(AssertionError) as caught:
            check(RaisingCoefficients(), examples=1)
        assert said in str(caught.value) and f"the {claim} claim reads the scheme's coefficients" in str(caught.value)
    with pytest.raises(AssertionError) as caught:
        check_stepper(RaisingCoefficients(), examples=1, seed=2)
    assert "the tableau claim reads" in str(caught.value) and "reproduce with: check_stepper(" in str(caught.value)


class RaisingOnLargeStates(solvers.Heun):
    """Heun's step, which raises an exception of its own on a state of more than 64 entries."""

    def step(self, field, t, y, dt, state):
        if y.numel() > 64:
            raise RuntimeError("states this large are not supported")
        return super().step(field, t, y, dt, state)


def test_an_exception_the_scheme_raises_names_the_claim_and_the_seed_and_keeps_its_traceback():
    """Not a bare exception from deep inside a check, with no seed to draw it again: the claim it was raised under,
    what was drawn, the one line that reproduces it, and the scheme's own exception as the cause."""
    with pytest.raises(AssertionError) as caught:
        check_stepper(RaisingOnLargeStates, examples=4, seed=3)
    message = str(caught.value)
    said = "RaisingOnLargeStates raised RuntimeError (states this large are not supported) while its "
    assert said in message and " claim was checked" in message
    assert message.splitlines()[-1].strip().startswith("seed 3; reproduce with: check_stepper(")
    assert isinstance(caught.value.__cause__, RuntimeError)


@pytest.mark.parametrize(
    "limit, linear",
    [
        (lambda t, y: -y, True),
        (lambda t, y: -torch.tanh(y), False),
        (lambda t, y: -3 / (t + 1) * y, False),
    ],
)
def test_only_a_limit_linear_in_the_state_and_the_same_at_every_time_gets_the_exact_reference(limit, linear):
    assert _linear_autonomous(limit, torch.ones(2, 3, dtype=torch.float64), 0.0, 0.5) is linear


class ExtrapolatedEuler(AbstractStepper):
    """Richardson extrapolation of Euler by hand: two half steps against one whole, ``2 y_½ - y_1``, order 2, three
    evaluations. Its coefficients (2 and 1 on whole states) are not stated, so its arithmetic is allowed one's
    rounding; ``Stated`` below says them."""

    order: ClassVar[int] = 2
    second_order: ClassVar[bool] = False
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 3

    def step(self, field, t, y, dt, state):
        whole = axpy(y, dt, field(t, y))
        half = axpy(y, 0.5 * dt, field(t, y))
        halves = axpy(half, 0.5 * dt, field(t + 0.5 * dt, half))
        return 2 * halves - whole, state


class BFloat16Stage(AbstractStepper):
    """Heun written as a plain class, whose float32 step adds its stages in bfloat16 (a "fast path" for training): a
    lower precision."""

    order: ClassVar[int] = 2
    second_order: ClassVar[bool] = False
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 2

    def step(self, field, t, y, dt, state):
        k1 = field(t, y)
        k2 = field(t + dt, axpy(y, dt, k1))
        if y.dtype == torch.float32:
            return y + ((0.5 * dt) * (k1 + k2)).to(torch.bfloat16).to(y.dtype), state
        return y + (0.5 * dt) * (k1 + k2), state


def test_a_lower_precision_message_says_how_a_scheme_of_large_coefficients_states_them():
    """A plain class's arithmetic is allowed what its step shows on a constant field, within a bound: a rejection of its
    float32 step says so and names ``coefficients()``; a scheme that states its coefficients gets no such line, and is
    allowed their sum."""
    from solvers.testing.protocol import float32_allowance, unstated_coefficients

    class Stated(ExtrapolatedEuler):
        def coefficients(self):
            return {"A": [[0.0], [1.0, 0.0], [0.5, 0.0, 0.0]], "b": [-1.0, 1.0, 1.0]}

    with pytest.raises(AssertionError) as caught:
        check_precision(BFloat16Stage, examples=4)
    assert "rounds a coefficient. If the step combines its stages with coefficients larger than 1" in str(caught.value)
    assert "states no coefficients, so it was allowed what its step shows on a constant field" in str(caught.value)
    assert "state them by a method coefficients()" in str(caught.value)
    assert unstated_coefficients(solvers.TwoStageRK()) == "" and unstated_coefficients(Stated()) == ""
    assert float32_allowance(Stated()) > float32_allowance(ExtrapolatedEuler()) == 16


class ScaledThroughLargeNumber(solvers.Heun):
    """Heun whose result passes through ``* 7e4 / 7e4`` in the state's dtype: beyond float16's largest number."""

    def step(self, field, t, y, dt, state):
        y1, state = super().step(field, t, y, dt, state)
        return (y1 * 70000.0) / 70000.0, state


def test_a_step_that_overflows_a_lower_precision_is_said_to_overflow_not_to_take_another_path():
    with pytest.raises(AssertionError) as caught:
        check_contexts(ScaledThroughLargeNumber, examples=0)
    message = str(caught.value)
    assert "its step is not finite where the reference context's step from the same state is finite" in message
    assert "overflows float16 (its largest is 6.55e+04)" in message and "nan rounding units" not in message
