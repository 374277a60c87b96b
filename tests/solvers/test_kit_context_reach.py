"""Contexts the kit did not draw before: a Heun that takes Euler's step (its evaluations still made) only where one
of them holds is rejected by ``check_contexts`` on its fixed contexts alone, naming the context; a Heun that evaluates
once more only for steps above 1.5 is rejected by the evaluation count."""

from typing import ClassVar

import pytest
import torch

import solvers
from solvers import AbstractStepper
from solvers.testing import check_contexts, check_evals, check_stepper


class _Heun(AbstractStepper, abstract=True):
    """Heun's method that takes Euler's step where ``wrong_here`` says so, with both evaluations made."""

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
            return y + dt * k1, state
        return y + 0.5 * dt * (k1 + k2), state


def _fake(name: str, test) -> type:
    return type(name, (_Heun,), {"wrong_here": lambda self, field, t, y, dt: test(field, t, y, dt)})


FAKES = [
    (_fake("RankOne", lambda f, t, y, dt: y.dim() == 1), r"under torch.func.vmap"),
    (_fake("RankFive", lambda f, t, y, dt: y.dim() == 5), r"heads \(2, 2\)"),
    (_fake("SeveralHeads", lambda f, t, y, dt: y.dim() >= 4 and y.shape[1] > 1), r"heads \("),
    (_fake("ChannelsLast", lambda f, t, y, dt: y.dim() == 4 and not y.is_contiguous()), r"channels-last|transposed"),
    (_fake("TokenBroadcast", lambda f, t, y, dt: 0 in y.stride()[1:]), r"a broadcast view"),
    (_fake("OneToken", lambda f, t, y, dt: y.dim() == 3 and y.shape[-2] == 1), r"rows as single tokens"),
    (_fake("MillionEntries", lambda f, t, y, dt: y.numel() >= 2**20), r"at least 1048576 entries"),
    (_fake("PastTimes", lambda f, t, y, dt: abs(float(t)) > 8192), r"from t = -1e\+04"),
    (_fake("ManyThreads", lambda f, t, y, dt: torch.get_num_threads() >= 3), r"[34] threads"),
    (
        _fake(
            "HalfAutocast",
            lambda f, t, y, dt: torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.float16,
        ),
        r"under fp16 autocast",
    ),
    (_fake("Deterministic", lambda f, t, y, dt: torch.are_deterministic_algorithms_enabled()), r"deterministic"),
    (_fake("Traced", lambda f, t, y, dt: torch.jit.is_tracing()), r"under torch.jit.trace"),
    (_fake("Transformed", lambda f, t, y, dt: solvers.transforms_active()), r"under torch.func"),
    (
        _fake("GradUnderNoGrad", lambda f, t, y, dt: y.requires_grad and not torch.is_grad_enabled()),
        r"no_grad, y requires grad",
    ),
    (_fake("Compiled", lambda f, t, y, dt: torch.compiler.is_compiling()), r"under torch.compile"),
    (_fake("DigitsPatches", lambda f, t, y, dt: y.dim() == 3 and y.shape[-2] == 17), r"states \(64, 17, 48\)"),
    (_fake("DeiTSequence", lambda f, t, y, dt: y.dim() == 3 and y.shape[-2] == 197), r"states \(2, 197, 192\)"),
    (_fake("WidthSixtyFour", lambda f, t, y, dt: y.shape[-1] == 64), r"states \((128, 17|2, 64), (64|768)\)"),
    (_fake("BatchOf128", lambda f, t, y, dt: y.shape[0] == 128), r"states \(128, 17, 64\)"),
]


@pytest.mark.parametrize("fake, context", FAKES, ids=[f.__name__ for f, _ in FAKES])
def test_a_scheme_wrong_only_in_a_context_never_drawn_before_is_rejected_naming_it(fake, context):
    check_evals(fake, examples=0)  # right where the evaluation count looks
    with pytest.raises(AssertionError, match=r"its step differs from the reference context's .*" + context):
        check_contexts(fake, examples=0)


class ExtraLookAboveOneAndAHalf(_Heun):
    """Heun that looks at the field once more for steps above 1.5 ("a big step needs a predictor check")."""

    def wrong_here(self, field, t, y, dt):
        if abs(float(dt)) > 1.5:
            field(t, y)
        return False


def test_an_extra_evaluation_for_steps_above_one_and_a_half_is_counted():
    with pytest.raises(AssertionError, match=r"evaluated the field 3 times in step 0 .* at dt = 2.5"):
        check_evals(ExtraLookAboveOneAndAHalf, examples=0)


def test_one_failure_reads_as_a_one_line_reproduction():
    with pytest.raises(AssertionError) as caught:
        check_stepper(FAKES[0][0], seed=9)
    assert str(caught.value).splitlines()[-1].strip().startswith("seed 9; reproduce with: check_stepper(")
