"""Block steppers get every claim checked: evaluations per step, an inverse that runs and undoes, one-step-ness."""

import pytest

import solvers
from solvers.testing import check_layer, check_stepper


class FourLookSplit(solvers.Split):
    """A split layer that evaluates the attention field four times a step and declares what its stepper does."""

    def step(self, field, t, y, dt, state):
        for _ in range(3):
            field.attention(t, y if not isinstance(y, solvers.PhaseState) else y.x)
        return super().step(field, t, y, dt, state)


class RaisingInverseSplit(solvers.Split):
    """A split layer declaring reversible (its stepper is) whose inverse raises."""

    def inverse(self, field, t, y1, dt):
        raise RuntimeError("not written yet")


def test_a_block_stepper_declaring_fewer_evaluations_than_it_makes_is_rejected():
    layer = FourLookSplit(solvers.STEPPERS["euler"]())
    with pytest.raises(AssertionError, match=r"declares 1 attention evaluation\(s\) per step .* made 4\."):
        check_layer(layer)


def test_a_reversible_block_stepper_whose_inverse_raises_is_rejected():
    layer = RaisingInverseSplit(solvers.SemiImplicitEuler(), ffn=solvers.SemiImplicitEuler())
    assert layer.claims(None).reversible
    with pytest.raises(AssertionError, match=r"declares reversible (on block.*|but its) inverse raises RuntimeError"):
        check_stepper(layer)


def test_check_stepper_runs_the_layer_check_on_a_block_stepper_and_names_it_for_a_class():
    report = check_stepper(solvers.Split(solvers.SemiImplicitEuler(), ffn=solvers.SemiImplicitEuler()), examples=2)
    assert report["layer"]["declared"] >= 1 and report["layer"]["evaluations"] >= 1
    with pytest.raises(TypeError, match=r"Split is a block stepper: .*check_layer\(Split\(\.\.\.\)\)"):
        check_stepper(solvers.Split)


class FrictionSplit(solvers.Split):
    """A split layer of symplectic parts that damps the velocity a little after each step: reversible (its inverse
    undoes the damping), not symplectic."""

    def step(self, field, t, y, dt, state):
        y1, state = super().step(field, t, y, dt, state)
        return solvers.PhaseState(y1.x, 0.999 * y1.v), state

    def inverse(self, field, t, y1, dt):  # undoes its step exactly: reversible, but it shrinks phase volume
        return super().inverse(field, t, solvers.PhaseState(y1.x, y1.v / 0.999), dt)


def test_a_symplectic_layer_passes_and_a_damped_one_is_rejected():
    right = solvers.Split(solvers.VelocityVerlet(), ffn=solvers.VelocityVerlet())
    assert right.claims(None).symplectic
    report = check_layer(right, examples=2)
    assert report["symplectic"] <= 1e-12
    with pytest.raises(AssertionError, match=r"declares symplectic on block.*forces of a potential"):
        check_layer(FrictionSplit(solvers.VelocityVerlet(), ffn=solvers.VelocityVerlet()), examples=2)
