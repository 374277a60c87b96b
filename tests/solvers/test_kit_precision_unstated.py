"""A scheme that states no coefficients is allowed, in float32, what its own step shows on a constant field (no stage
can round there, so what moves is its own combination of states), up to ``FLOAT32_UNSTATED_MOST`` units: an Euler
extrapolation of order 4 written as a plain class (weights up to 13.5) passes; the same with one sub-step result
rounded through bf16 fails."""

from typing import ClassVar

import pytest
import torch

from solvers import AbstractStepper
from solvers.testing import check_precision
from solvers.testing import thresholds as th
from solvers.testing.protocol import _constant_field_units, float32_allowance

_WEIGHTS = (-1 / 6, 4.0, -27 / 2, 32 / 3)  # Aitken–Neville weights of Euler results with 1, 2, 3, 4 sub-steps


class EulerExtrapolation4(AbstractStepper):
    """Extrapolation of Euler's method from 1, 2, 3 and 4 equal sub-steps (order 4; the first evaluation shared by all
    four: 1 + 1 + 2 + 3 evaluations)."""

    order: ClassVar[int] = 4
    second_order: ClassVar[bool] = False
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 7

    def sub_steps(self, field, t, y, dt, n, k0):
        h, x = dt / n, y + dt / n * k0
        for i in range(1, n):
            x = x + h * field(t + i * h, x)
        return x

    def step(self, field, t, y, dt, state):
        k0 = field(t, y)
        results = [self.sub_steps(field, t, y, dt, n, k0) for n in (1, 2, 3, 4)]
        return sum(w * r for w, r in zip(_WEIGHTS, self.rounded(results))), state

    def rounded(self, results):
        return results


class Bf16Extrapolation4(EulerExtrapolation4):
    """The same with the 4-sub-step result passed through bf16 in a float32 model ("it is the finest, its error is
    the smallest"): the float64 step, which the order check measures, is the scheme's."""

    def rounded(self, results):
        if results[3].dtype != torch.float32:
            return results
        return [*results[:3], results[3].to(torch.bfloat16).to(torch.float32)]


def test_an_unstated_extrapolation_is_allowed_what_its_own_arithmetic_shows():
    assert float32_allowance(EulerExtrapolation4()) > th.FLOAT32_UNITS  # measured, not the default 16
    assert float32_allowance(EulerExtrapolation4()) <= th.FLOAT32_UNSTATED_MOST
    check_precision(EulerExtrapolation4)


def test_a_lower_precision_sub_step_is_still_rejected_within_the_bound():
    assert th.FLOAT32_MEASURED * _constant_field_units(Bf16Extrapolation4()) > th.FLOAT32_UNSTATED_MOST
    with pytest.raises(AssertionError, match=r"float32 step differs from its float64 step"):
        check_precision(Bf16Extrapolation4)
