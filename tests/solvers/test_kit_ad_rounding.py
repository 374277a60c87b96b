"""The tangent check under ``torch.func.jvp`` compares a step's forward-mode tangent with the reference's reverse-mode
gradient. A field whose derivative cancels inside (a softmax saturated by large logits) gives those two fewer digits
than its values: the allowance counts the field's own forward/reverse difference at the step's evaluations
(``contexts._ad_rounding``), so a correct scheme on such a field passes (SSPRK3 was failed at one seed of the sweep by
5.16e-11 against 1.2e-11 allowed), while a scheme whose tangent is wrong under a transform is still rejected."""

from typing import ClassVar

import pytest
import torch

import solvers
from solvers import AbstractStepper
from solvers.testing import check_contexts, check_stepper
from solvers.testing.contexts import _ad_rounding
from solvers.testing.problems import token_problem


def test_the_fields_own_forward_and_reverse_rounding_is_measured_where_the_step_evaluates_it():
    ssprk3 = solvers.STEPPERS["ssprk3"]()
    y = torch.randn(2, 3, 3, generator=torch.Generator().manual_seed(7), dtype=torch.float64) * 20
    linear = _ad_rounding(ssprk3, lambda t, x: -x + 0.5 * x.flip(-1), 0.0, y, 1.0, seed=3)
    attention = _ad_rounding(ssprk3, token_problem(seed=7, tokens=3, dim=3).field, 0.0, y, 1.0, seed=3)
    assert linear < 10  # forward and reverse mode agree to float64's rounding on a linear field
    assert attention > 1e3  # logits of size 400 saturate the softmax: its derivative cancels, and the modes differ


def test_ssprk3_is_not_failed_by_its_fields_derivative_rounding_at_the_seed_that_failed_it():
    report = check_stepper(solvers.STEPPERS["ssprk3"], seed=3211309643)
    assert report["seed"] == 3211309643


class TangentlessHeun(AbstractStepper):
    """Heun's step whose second evaluation carries no tangent under a torch.func transform: its values are right in
    every context, its forward-mode derivative is not."""

    order: ClassVar[int] = 2
    second_order: ClassVar[bool] = False
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 2

    def step(self, field, t, y, dt, state):
        k1 = field(t, y)
        k2 = field(t + dt, y + dt * k1)
        if solvers.transforms_active():
            k2 = k2.detach()
        return y + 0.5 * dt * (k1 + k2), state


def test_a_wrong_tangent_under_jvp_is_still_rejected():
    with pytest.raises(AssertionError, match=r"its tangent under torch.func.jvp differs from the reference gradient"):
        check_contexts(TangentlessHeun, examples=0)
