"""The property kit must fail loudly on a scheme that claims more than it has, and pass a correct user scheme."""

import math
import re
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
)
from solvers.testing import (
    RecordingField,
    check_evals,
    check_order,
    check_reversible,
    check_stepper,
    check_symplectic,
    linear_problem,
    oscillator_problem,
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


class FakeReversibleSemiImplicitEuler(SemiImplicitEuler):
    reversible: ClassVar[bool] = True


class FakeEvalCount(Euler):
    evals_per_step: ClassVar[int] = 2


class WrongTimeHeun(AbstractStepper):
    """Heun evaluating its second stage at t + 2 dt: outside the step."""

    order: ClassVar[int] = 2
    second_order: ClassVar[bool] = False
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 2

    def step(self, field, t, y, dt, state):
        k1 = field(t, y)
        k2 = field(t + 2 * dt, y + dt * k1)
        return y + 0.5 * dt * (k1 + k2), state


def test_fake_order_two_euler_is_rejected():
    with pytest.raises(AssertionError, match=r"FakeOrder2Euler declares order 2 but its error falls like dt\^1\.0"):
        check_stepper(FakeOrder2Euler)


def test_fake_symplectic_explicit_euler_is_rejected():
    with pytest.raises(AssertionError, match="FakeSymplecticExplicitEuler declares symplectic but one step") as info:
        check_stepper(FakeSymplecticExplicitEuler)
    assert re.search(r"\|det M - 1\| = [1-9]", str(info.value))


def test_fake_symplectic_energy_growth_is_reported():
    """Past the Jacobian test the energy test catches it too (called directly on the run)."""
    from solvers.testing import _energy_errors

    errors = _energy_errors(FakeSymplecticExplicitEuler(), oscillator_problem(seed=3), 0.1, 200.0)
    assert errors[-len(errors) // 4 :].max() > 100 * errors[: len(errors) // 4].max()


def test_fake_reversible_semi_implicit_euler_is_rejected():
    with pytest.raises(AssertionError, match="FakeReversibleSemiImplicitEuler declares reversible but 5 steps"):
        check_stepper(FakeReversibleSemiImplicitEuler)


def test_wrong_evaluation_count_is_rejected():
    with pytest.raises(AssertionError, match="evaluated the field 1 times in step 0 with a new field"):
        check_evals(FakeEvalCount)


def test_evaluation_outside_the_step_is_rejected():
    with pytest.raises(AssertionError, match="outside its step"):
        check_evals(WrongTimeHeun)


def test_missing_declaration_is_a_clear_error():
    with pytest.raises(TypeError, match="Incomplete must declare the class variable\\(s\\) order, second_order"):

        class Incomplete(AbstractStepper):
            def step(self, field, t, y, dt, state):
                return y, state


def test_kit_passes_each_check_on_true_claims():
    assert check_order(Euler, linear_problem(seed=5))[0] == pytest.approx(1.0, abs=0.3)
    assert check_symplectic(SemiImplicitEuler)["det_defect"] < 1e-12
    assert check_reversible(VelocityVerlet) < 1e-12


def test_linear_reference_is_the_matrix_exponential():
    p = oscillator_problem(seed=0, dim=1)
    k = -float(p.field(0.0, torch.ones(1, 1, dtype=torch.float64)))  # x'' = -k x
    w = k**0.5
    refs = reference(SemiImplicitEuler(), p)
    t = p.T
    x = p.x0 * math.cos(w * t) + p.v0 / w * math.sin(w * t)
    assert torch.allclose(refs[-1].x, x, rtol=1e-13, atol=1e-13)


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
