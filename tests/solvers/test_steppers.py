"""Every registered stepper, with no per-stepper test code: its declarations proven by the kit, gradients, dtypes."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import solvers
from helpers import TanhField, make_stepper, start
from solvers import STEPPERS, PhaseState, integrate
from solvers.testing import check_order, check_stepper, problems
from solvers.testing.thresholds import EXAMPLES

NAMES = sorted(STEPPERS.schemes())  # the scheme classes; the variant rows are their schemes with options


def _holds_its_claims(name: str, report: dict) -> None:
    assert len(report["order"]) >= 2
    claims = solvers.Claims.of(STEPPERS[name])
    if claims.order >= 1:  # an order-0 scheme's report says in words that it has no small-step limit
        assert all(abs(slope - claims.order) < 0.3 for slope in report["order"]), report["order"]
    assert ("symplectic" in report) == claims.symplectic
    assert ("reversible" in report) == claims.reversible


@pytest.mark.parametrize("name", NAMES)
def test_check_stepper(name):
    """Every fixed problem and context, and half the default drawn instances (seed 0): the slow test below draws the
    other half from another seed, so CI draws a default run's number of instances, from two seeds."""
    _holds_its_claims(name, check_stepper(STEPPERS[name], examples=EXAMPLES // 2))


@pytest.mark.slow  # a second run per scheme: about 2.5 CPU-minutes in all
@pytest.mark.parametrize("name", NAMES)
def test_check_stepper_from_another_seed(name):
    _holds_its_claims(name, check_stepper(STEPPERS[name], seed=1, examples=EXAMPLES - EXAMPLES // 2))


@pytest.mark.slow  # six more drawn problems each; check_stepper above already measures the order on a drawn one
@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=6)
@given(data=st.data())
def test_order_on_drawn_problems(name, data):
    cls = STEPPERS[name]
    check_order(cls, data.draw(problems(second_order=solvers.Claims.of(cls).second_order)))


@pytest.mark.parametrize("name", NAMES)
def test_gradcheck_through_integrate(name):
    cls = STEPPERS[name]
    g = torch.Generator().manual_seed(0)
    stepper = make_stepper(cls, dim=3).double()
    field = TanhField(3, g)
    x0 = torch.randn(2, 3, generator=g, dtype=torch.float64, requires_grad=True)
    v0 = torch.randn(2, 3, generator=g, dtype=torch.float64, requires_grad=True)
    # perturb learnable gates away from saturation so their gradients are not ~0
    with torch.no_grad():
        for p in stepper.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64))

    class Run(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.stepper, self.field = stepper, field

        def forward(self, x0, v0):
            y = integrate(self.stepper, [self.field] * 4, start(cls, x0, v0), 0.3)
            return tuple(y) if isinstance(y, PhaseState) else y

    run = Run()
    names = [name for name, _ in run.named_parameters()]

    def f(x0, v0, *params):
        return torch.func.functional_call(run, dict(zip(names, params)), (x0, v0))

    inputs = (x0, v0, *(p.detach().requires_grad_() for p in run.parameters()))
    assert len(inputs) == 2 + 2 + len(list(stepper.parameters()))
    assert torch.autograd.gradcheck(f, inputs)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_dtype_preserved(name, dtype):
    cls = STEPPERS[name]
    stepper = make_stepper(cls, dim=4)
    x = torch.randn(2, 5, 4).to(dtype)
    y = integrate(stepper, [lambda t, x: torch.tanh(x) - x] * 3, start(cls, x), 0.5)
    for part in y if isinstance(y, PhaseState) else [y]:
        assert part.dtype == dtype and part.shape == x.shape and torch.isfinite(part.float()).all()


@pytest.mark.parametrize("name", NAMES)
def test_every_parameter_gets_a_gradient(name):
    cls = STEPPERS[name]
    stepper = make_stepper(cls, dim=4)
    x = torch.randn(3, 4, requires_grad=True)
    y = integrate(stepper, [lambda t, x: torch.sin(x) - x] * 3, start(cls, x, torch.randn(3, 4)), 0.5)
    (y.x if isinstance(y, PhaseState) else y).square().sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0
    for pname, p in stepper.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, pname


def test_registry_is_complete_and_constructible():
    expected = {
        "euler",
        "heun",
        "rk4",
        "semi_implicit_euler",
        "velocity_verlet",
        "leapfrog",
        "damped",
        "light_wave",
        "position_mix",
    }
    assert expected <= set(STEPPERS)
    for cls in STEPPERS.schemes().values():
        assert issubclass(cls, solvers.AbstractStepper)
        cls()
    for name, row in STEPPERS.variants().items():
        assert row.scheme in STEPPERS.schemes().values() and STEPPERS.scheme(name) is row.scheme
        assert isinstance(row(), row.scheme)


@pytest.mark.parametrize("name", sorted(STEPPERS.variants()))
def test_a_variant_row_is_its_scheme_with_options_and_passes_the_kit(name):
    """A row with options is checked as built; a row without any builds its scheme's default stepper, which
    test_check_stepper checks (its layer, FFN step and memory are the layer's, not the stepper's)."""
    row = STEPPERS[name]
    stepper = row()
    assert set(row.options) <= set(solvers.stepper_parameters(row.scheme))
    if not row.options:
        plain = row.scheme()
        assert type(stepper) is row.scheme and stepper.state_dict().keys() == plain.state_dict().keys()
        assert all(torch.equal(a, b) for a, b in zip(stepper.state_dict().values(), plain.state_dict().values()))
        return
    report = check_stepper(stepper)
    assert ("symplectic" in report) == row.claims().symplectic
