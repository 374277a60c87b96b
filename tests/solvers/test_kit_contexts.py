"""The kit checks a scheme in the contexts models run it in, and first-same-as-last survives tensor times.

A model hands a step ``t0`` and ``dt`` as Python floats or as 0-d tensors (a learnable step size requires grad); the
loop over depth computes each step's ``t`` afresh, so reuse keyed on object identity is lost on tensors.
"""

import math
from typing import ClassVar

import pytest
import torch

import solvers
from solvers import AbstractStepper, PhaseState, integrate
from solvers.testing import (
    check_contexts,
    check_evals,
    check_reversible,
    check_stepper,
    check_symplectic,
)
from solvers.testing import thresholds as th
from solvers.testing.protocol import float32_allowance


class _Counting:
    def __init__(self):
        self.calls = 0

    def __call__(self, t, x):
        self.calls += 1
        return -x


def _time(value, kind):
    if kind == "float":
        return value
    tensor = torch.tensor(value, dtype=torch.float64)
    return tensor.requires_grad_(kind == "learnable")


@pytest.mark.parametrize("kind", ["float", "tensor", "learnable"])
@pytest.mark.parametrize("t_kind", ["float", "tensor"])
def test_velocity_verlet_reuses_the_last_force_over_tied_steps_with_tensor_times(kind, t_kind):
    field, steps = _Counting(), 10
    y0 = PhaseState(torch.randn(3, 4, dtype=torch.float64), torch.randn(3, 4, dtype=torch.float64))
    dt = _time(0.1, kind)
    y = integrate(solvers.VelocityVerlet(), [field] * steps, y0, dt, t0=_time(0.5, t_kind))
    assert field.calls == steps + 1
    if kind == "learnable":  # the reused force still carries the step size's gradient
        (grad,) = torch.autograd.grad(y.x.sum(), dt)
        assert torch.isfinite(grad) and grad != 0


@pytest.mark.parametrize("kind", ["tensor", "learnable"])
def test_fsal_tableau_reuses_its_last_stage_with_tensor_times(kind):
    field, steps = _Counting(), 10
    stepper = solvers.BogackiShampine3()
    assert stepper.fsal
    integrate(stepper, [field] * steps, torch.randn(2, 3, dtype=torch.float64), _time(0.1, kind), t0=_time(0.0, kind))
    assert field.calls == stepper.evals_per_step + (steps - 1) * (stepper.evals_per_step - 1)


class _IdentityVerlet(AbstractStepper):
    """Velocity Verlet that recognises the repeated time by identity only: right on floats, no reuse on tensors."""

    order: ClassVar[int] = 2
    second_order: ClassVar[bool] = True
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 2
    fsal: ClassVar[bool] = True

    def step(self, field, t, y, dt, state):
        x, v = self._unpack(y)
        same = state is not None and state[0] is field and state[2] is x
        same = same and (state[1] is t or (not isinstance(t, torch.Tensor) and state[1] == t))
        a = state[3] if same else field(t, x)
        v = v + 0.5 * dt * a
        x = x + dt * v
        a1 = field(t + dt, x)
        return PhaseState(x, v + 0.5 * dt * a1), (field, t + dt, x, a1)


def test_the_kit_rejects_fsal_lost_on_tensor_times():
    with pytest.raises(AssertionError, match=r"0-d tensors\); it declares evals_per_step = 2 and fsal"):
        check_evals(_IdentityVerlet, examples=0)


def test_the_kit_passes_velocity_verlet_with_tensor_times():
    check_evals(solvers.VelocityVerlet, examples=20)


# -- no false alarms: geometric claims are judged relative to what a step reaches ----------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", ["Yoshida4", "ForestRuth", "VelocityVerlet", "PEFRL", "Omelyan4"])
def test_correct_compositions_pass_the_thorough_geometric_checks(name):
    """Compositions with large sub-steps (weights 1.35 and -1.70) grow the cubic force's state 10² to 10¹⁰ times at
    dt 0.5 to 1; judged against the starting state their honest round trips failed at ``examples=200``."""
    cls = getattr(solvers, name)
    check_reversible(cls, examples=200)
    check_symplectic(cls, examples=200)


@pytest.mark.thorough  # about 80 s: `make test-thorough`
def test_the_whole_thorough_kit_passes_a_far_reaching_composition():
    """Yoshida's triple jump through every check at ``examples=200``. Forest–Ruth is its adjoint (the same weights,
    drift first) through the same composition engine: its thorough geometric checks are the test above, and the
    default kit's every check runs on it with the registered schemes."""
    check_stepper(solvers.Yoshida4, examples=200)


def test_a_round_trip_is_allowed_the_schemes_own_rounding_units_times_the_modelled_rounding(monkeypatch):
    """The rounding model perturbs no sum of the scheme's own, so the multiplier of what it moves a round trip is the
    scheme's rounding units (1333 for Yoshida's eighth-order composition), not a fixed 16. With REVERSIBLE_RTOL set to
    0 the multiplier alone decides: these draws of the composition's honest round trips pass under the scheme's units
    and fail under 16 (an examples=200 run failed so at 1.07e-12)."""
    import sys
    from pathlib import Path

    from solvers.testing import check_reversible, geometry
    from solvers.testing._drawn import seeded

    sys.path.insert(0, str(Path(__file__).parent))
    from test_kit_false_alarms import Yoshida8

    monkeypatch.setattr(th, "REVERSIBLE_RTOL", 0.0)
    with seeded(3):
        check_reversible(Yoshida8, examples=20)
    monkeypatch.setattr(geometry, "float32_allowance", lambda stepper, claim="": float(th.MODELLED_ROUNDING))
    with seeded(3), pytest.raises(AssertionError, match="declares symmetric|declares reversible"):
        check_reversible(Yoshida8, examples=20)


def test_a_round_trip_is_judged_relative_to_the_magnitude_the_steps_reach():
    """A drawn point that blows the state up is redrawn; a judged one is relative to the largest state reached, so
    a scheme whose inverse is off by a fixed fraction of that is still rejected."""

    class _Lossy(solvers.VelocityVerlet):
        def inverse(self, field, t, y1, dt):
            y = super().inverse(field, t, y1, dt)
            return PhaseState(y.x * (1 + 1e-9), y.v)

    with pytest.raises(AssertionError, match="relative to the largest magnitude the steps reach"):
        check_reversible(_Lossy, examples=20)


@pytest.mark.parametrize(
    ("name", "smallest"),
    [("Euler", th.FLOAT32_UNITS), ("RK4", th.FLOAT32_UNITS_PER_TERM * 4 * 3), ("Yoshida4", None)],
)
def test_the_float32_allowance_follows_the_schemes_arithmetic(name, smallest):
    allowed = float32_allowance(getattr(solvers, name)())
    assert allowed >= th.FLOAT32_UNITS
    if smallest is not None:
        assert allowed == smallest
    else:  # weights near 2 and four kicks round more than Euler
        assert allowed > float32_allowance(solvers.Euler())


def test_a_learnable_familys_allowance_follows_its_current_coefficients():
    """The triple jump has no tableau value: its ``coefficients()`` (weights 1.35 and -1.70) give it the allowance of
    a composition (a float32 inverse off by 56 units at dt = 1 on an attention field was honest), per channel too."""
    shared, per_channel = solvers.TripleJump(), solvers.TripleJump(dim=3)
    assert float32_allowance(shared) > 5 * th.FLOAT32_UNITS
    assert float32_allowance(per_channel) == pytest.approx(float32_allowance(shared))
    with torch.no_grad():
        per_channel.theta[1] = -4.0  # λ near 0 in one channel: the largest drifts
    assert float32_allowance(per_channel) > float32_allowance(shared)


def test_the_triple_jumps_coefficients_are_its_autonomous_step():
    stepper = solvers.TripleJump(lambda0=0.3)
    c = stepper.coefficients()
    as_splitting = solvers.Tableau(drifts=c["drifts"], kicks=c["kicks"])
    g = torch.Generator().manual_seed(0)
    y = PhaseState(
        torch.randn(2, 3, generator=g, dtype=torch.float64), torch.randn(2, 3, generator=g, dtype=torch.float64)
    )

    def force(t, x):
        return -torch.sin(x)

    ours = stepper.double().step(force, 0.0, y, 0.7, None)[0]
    theirs = as_splitting.step(force, 0.0, y, 0.7, as_splitting.init(force, 0.0, y))[0]
    assert torch.allclose(ours.x, theirs.x, rtol=0, atol=1e-14) and torch.allclose(ours.v, theirs.v, rtol=0, atol=1e-14)
    assert solvers.analysis.tableau_of(solvers.TripleJump(dim=2)) is None  # per channel: analysed from the step


class _Exponential(AbstractStepper):
    """``x exp(a dt)``: a step whose size derivative has large higher derivatives (truncation dominates)."""

    order: ClassVar[int] = 1
    second_order: ClassVar[bool] = False
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 1
    rate: ClassVar[float] = 300.0

    def step(self, field, t, y, dt, state):
        field(t, y)
        return y * torch.exp(torch.as_tensor(self.rate * dt, dtype=y.dtype)), state


@pytest.mark.parametrize("case", ["rounding", "truncation"])
def test_a_learnable_dts_difference_quotient_is_taken_where_it_resolves(case):
    """A field small beside the state (rounding swamps a small h) and a step stiff in dt (truncation swamps a large
    one) both resolve their derivative; one quotient at 1e-5 |dt| resolved neither to GRADIENT_RTOL."""
    from solvers.testing.contexts import _dt_quotient

    g = torch.Generator().manual_seed(1)
    y = 1 + torch.rand(4, 3, generator=g, dtype=torch.float64)
    r = torch.randn(12, generator=g, dtype=torch.float64)
    if case == "rounding":
        stepper, dt, scale = solvers.Euler(), 0.01, 1e-4

        def field(t, x):
            return scale * x

        exact = float((r * (scale * y).flatten()).sum())
    else:
        stepper, dt = _Exponential(), 1.0

        def field(t, x):
            return x

        exact = float((r * (_Exponential.rate * y * math.exp(_Exponential.rate * dt)).flatten()).sum())
    value, spread = _dt_quotient(stepper, field, y, 0.0, dt, r)
    h = 1e-5 * dt
    up, down = (stepper.step(field, 0.0, y, dt + s, None)[0].flatten() for s in (h, -h))
    single = float((r * (up - down)).sum()) / (2 * h)
    assert abs(single - exact) > th.GRADIENT_RTOL * abs(exact)  # the old quotient: a false alarm
    assert abs(value - exact) <= max(th.GRADIENT_RTOL * abs(exact) / 10, 10 * spread)
    assert 10 * spread <= th.GRADIENT_RTOL * abs(exact)


# -- the execution context is drawn ----------------------------------------------------------------------------------


class _ContextHeun(AbstractStepper, abstract=True):
    """Heun's method that takes ``cheat`` (another path) where ``wrong_here`` says so; right everywhere else."""

    order: ClassVar[int] = 2
    second_order: ClassVar[bool] = False
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 2

    def wrong_here(self, field, y) -> bool:
        raise NotImplementedError

    def step(self, field, t, y, dt, state):
        k1 = field(t, y)
        if self.wrong_here(field, y):
            return self.cheat(field, t, y, dt, k1), None
        k2 = field(t + dt, y + dt * k1)
        return y + 0.5 * dt * (k1 + k2), None

    def cheat(self, field, t, y, dt, k1):  # Euler with a padding evaluation: the count stays right
        field(t + dt, y)
        return y + dt * k1


class EulerUnderInference(_ContextHeun):
    def wrong_here(self, field, y):
        return torch.is_inference_mode_enabled()


class ExtraEvalWithGrad(_ContextHeun):
    def wrong_here(self, field, y):
        return torch.is_grad_enabled()

    def cheat(self, field, t, y, dt, k1):  # right result, one more evaluation
        field(t, y)
        k2 = field(t + dt, y + dt * k1)
        return y + 0.5 * dt * (k1 + k2)


class EulerOnModules(_ContextHeun):
    def wrong_here(self, field, y):
        return isinstance(field, torch.nn.Module)


class NoiseInFloat32Training(_ContextHeun):
    def wrong_here(self, field, y):
        return torch.is_grad_enabled() and y.dtype == torch.float32

    def cheat(self, field, t, y, dt, k1):  # the right step, plus a small Euler-like perturbation
        k2 = field(t + dt, y + dt * k1)
        return y + 0.5 * dt * (k1 + k2) + 1e-3 * dt * k1


@pytest.mark.parametrize(
    ("scheme", "message"),
    [
        (EulerUnderInference, r"its step differs from the reference context's .* in context \(\w+, inference_mode"),
        (
            ExtraEvalWithGrad,
            r"evals_per_step = 2 but evaluated the field 3 times .* context \(\w+, enable_grad",
        ),
        (EulerOnModules, r"its step differs .* in context \(\w+, \w+, an (attention and FFN )?nn.Module field"),
        (NoiseInFloat32Training, r"its step differs .* in context \(float32, enable_grad, .*float32 rounding units"),
    ],
)
def test_a_scheme_wrong_only_in_one_context_is_rejected_naming_the_claim_and_the_context(scheme, message):
    # the other checks run float64, no grad, a plain function: there each fake is right (the evaluation check counts
    # with autograd on too, and finds the extra evaluation there)
    if scheme is not ExtraEvalWithGrad:
        check_evals(scheme, examples=0)
    with pytest.raises(AssertionError, match=message) as caught:
        check_contexts(scheme, examples=60)
    assert "counterexample:" in str(caught.value)


@pytest.mark.slow  # the default number of examples runs on every registered scheme in tests/solvers/test_steppers.py
@pytest.mark.parametrize("name", ["Heun", "RK4", "VelocityVerlet", "BogackiShampine3", "Yoshida4"])
def test_correct_schemes_step_the_same_in_every_context(name):
    check_contexts(getattr(solvers, name), examples=40)


# -- reproducible for users ------------------------------------------------------------------------------------------


def test_a_failure_names_the_seed_and_a_one_line_reproduction(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(AssertionError) as caught:
        check_stepper(EulerOnModules, seed=1234)
    message = str(caught.value)
    assert "seed 1234; reproduce with: check_stepper(" in message
    assert "EulerOnModules, seed=1234, examples=" in message
    assert not (tmp_path / ".hypothesis").exists()  # no example database in the working directory


def test_a_users_process_gets_no_hypothesis_folder_and_leaves_no_scratch(tmp_path):
    """In a process of the user's own (no pytest, whose run resolves hypothesis's storage first), a check writes no
    ``.hypothesis/`` folder (hypothesis caches constants read from source files there) into the working directory;
    its scratch folder is gone after exit."""
    import os
    import subprocess
    import sys

    code = (
        "import solvers, hypothesis.configuration as c\n"
        "from solvers.testing import check_precision\n"
        "check_precision(solvers.Heun, examples=1)\n"
        "from solvers.testing._drawn import _SCRATCH\n"
        "print(_SCRATCH[0])\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYPOTHESIS_")}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / ".hypothesis").exists()
    assert not os.path.exists(done.stdout.strip())


def _contexts_seeded(scheme, seed):
    from solvers.testing._drawn import seeded

    with seeded(seed):
        check_contexts(scheme, examples=30)


def test_the_same_seed_draws_the_same_counterexample():
    messages = []
    for _ in range(2):
        with pytest.raises(AssertionError) as caught:
            _contexts_seeded(NoiseInFloat32Training, 99)
        messages.append(str(caught.value))
    assert messages[0] == messages[1]


def test_a_correct_scheme_passes_under_any_seed():
    for seed in (0, 7):
        check_stepper(solvers.Heun, seed=seed)


def test_an_extra_evaluation_with_autograd_on_is_counted_by_the_evaluation_check():
    with pytest.raises(AssertionError, match=r"evaluated the field 3 times in step 0 .* with autograd on"):
        check_evals(ExtraEvalWithGrad, examples=0)


def test_a_traced_context_leaves_nothing_in_torchs_global_compilation_unit():
    """torch registers every trace in its global TorchScript unit, which keeps it and the tensors it holds as
    constants for the life of the process: a thorough sweep grew to 19 GB and was killed. Each trace runs in a unit of
    its own, freed with it."""
    import torch

    import solvers
    from solvers.testing import check_contexts

    check_contexts(solvers.Euler(), examples=2)  # the fixed contexts hold a traced one (torch registers its own once)
    before = len(torch.jit._state._python_cu.get_functions())
    check_contexts(solvers.Euler(), examples=2)
    assert len(torch.jit._state._python_cu.get_functions()) == before
