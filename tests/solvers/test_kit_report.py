"""stepper_report: every claim, passed and failed, with what was measured."""

from typing import ClassVar

import torch

import solvers
from solvers import AbstractStepper
from solvers.testing import check_stepper, stepper_report


class EulerCallingItselfHeun(AbstractStepper):
    """Declares Heun (order 2) but steps Euler, and on an nn.Module field adds a stray evaluation: two claims fail."""

    order: ClassVar[int] = 2
    second_order: ClassVar[bool] = False
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 2

    def step(self, field, t, y, dt, state):
        k1 = field(t, y)
        field(t + dt, y)
        if isinstance(field, torch.nn.Module):
            field(t, y)
        return y + dt * k1, None


def test_a_correct_scheme_reports_every_claim_passed_with_its_figures():
    report = stepper_report(solvers.VelocityVerlet, seed=5)
    assert report.passed and report.seed == 5
    claims = [r.claim for r in report.results]
    assert claims == [
        "declarations",
        "protocol",
        "tableau",
        "evaluations",
        "contexts",
        "precision",
        "continuity",
        "gradients",
        "order",
        "symplectic",
        "reversible",
        "one_step",
    ]
    by = {r.claim: r for r in report.results}
    assert by["evaluations"].figure == "evaluations a step: 2"
    assert by["tableau"].figure == "largest defect against its coefficients' step (relative): 0"
    assert by["order"].figure.startswith("slopes: [") and "2" in by["order"].figure
    text = str(report)
    assert "VelocityVerlet (seed 5): 12 of 12 claims hold" in text and "FAIL" not in text


def test_a_wrong_scheme_reports_every_failed_claim_and_runs_the_rest():
    report = stepper_report(EulerCallingItselfHeun, seed=1)
    failed = {r.claim for r in report.failed}
    assert {"order", "contexts"} <= failed  # both, though the contexts check fails first
    assert any(r.passed for r in report.results)  # the protocol holds
    order = next(r for r in report.results if r.claim == "order")
    assert "declares order 2" in order.message or "order 2" in order.message
    text = str(report)
    assert "FAIL" in text and f"of {len(report.results)} claims hold" in text
    # check_stepper stops at the first of them
    try:
        check_stepper(EulerCallingItselfHeun, seed=1)
    except AssertionError as error:
        assert "seed 1; reproduce with" in str(error)
    else:
        raise AssertionError("check_stepper passed a scheme stepper_report fails")


class ClampedHeun(AbstractStepper):
    """Heun that reads its state's size as a Python number (to clamp the step): it cannot run under ``vmap``."""

    order: ClassVar[int] = 2
    second_order: ClassVar[bool] = False
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 2

    def step(self, field, t, y, dt, state):
        dt = dt if float(y.detach().abs().max()) < 1e30 else 0.0 * dt
        k1 = field(t, y)
        k2 = field(t + dt, y + dt * k1)
        return y + 0.5 * dt * (k1 + k2), None


def test_a_check_in_which_the_scheme_raises_fails_that_claim_and_the_rest_run():
    report = stepper_report(ClampedHeun, seed=2)
    contexts = next(r for r in report.results if r.claim == "contexts")
    assert not contexts.passed and "ClampedHeun raised RuntimeError in this check" in contexts.message
    assert "vmap" in contexts.message
    assert [r.claim for r in report.results][-1] == "one_step" and any(r.passed for r in report.results[1:])


def test_declarations_of_the_wrong_kind_fail_the_first_row_and_stop():
    class BadOrder(EulerCallingItselfHeun):
        order: ClassVar = "one"

    report = stepper_report(BadOrder)
    assert not report.passed and [r.claim for r in report.results] == ["declarations"]
    assert "order must be a non-negative int" in report.results[0].message


def test_a_tableau_scheme_declaring_an_order_that_is_not_an_int_is_one_line():
    import pytest

    with pytest.raises(TypeError, match=r"declares order = 'one'; it must be an int \(its coefficients give 1\)"):

        class BadEuler(solvers.Euler):
            order: ClassVar = "one"
