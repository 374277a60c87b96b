"""Block steppers: where the inner stepper starts, what evaluations the layer declares, which limit it converges to."""

import dataclasses
from typing import ClassVar

import pytest
import torch
from torch import nn

import solvers
from solvers import AbstractStepper, Block, Claims, Euler, Heun, LightWave, PhaseState, SemiImplicitEuler, Split, Whole
from solvers.testing import block_problem, check_evals, check_layer, check_reversible


class GatedAB2(AbstractStepper):
    """Adams–Bashforth 2 (Heun start) on ``s ⊙ f``: its history is the previous *force*, its limit ``x' = s ⊙ f``."""

    order: ClassVar[int] = 2
    second_order: ClassVar[bool] = False
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 1
    multistep: ClassVar[bool] = True
    startup_evals: ClassVar[tuple[int, ...]] = (2,)

    def __init__(self, scale: float = 1.5):
        super().__init__()
        self.register_buffer("s", torch.tensor(scale))

    def step(self, field, t, y, dt, state):
        x = self._unpack(y)
        s = self.s.to(x.dtype)
        f = s * field(t, x)
        if state is None:
            k2 = s * field(t + dt, x + dt * f)
            return x + 0.5 * dt * (f + k2), (f, dt)
        previous, previous_dt = state
        r = dt / previous_dt
        return x + dt * ((1 + 0.5 * r) * f - 0.5 * r * previous), (f, dt)

    def limit_field(self, field):
        return lambda t, x: self.s.to(x.dtype) * field(t, x)


# -- where the inner stepper starts ----------------------------------------------------------------------------------


def _heun_half(ffn, t, x, dt):
    return Heun().step(ffn, t, x, 0.5 * dt, None)[0]


def test_strang_starts_the_stepper_where_it_first_steps():
    """light_wave under Strang, two layers (each its own stepper): x_{-1} = x_0 for the attention step's own start,
    the state after the first FFN half step, so the first layer has no momentum; the second reads the first's."""
    p = block_problem(seed=1)
    block, x0, dt = p.field, p.x0, 0.4
    layers = [Split(LightWave(), splitting="strang"), Split(LightWave(), splitting="strang")]
    x1, x2 = solvers.trajectory(layers, [block, block], x0, dt)[1:]
    lam = float(layers[0].stepper.lam())
    h1 = _heun_half(block.ffn, 0.0, x0, dt)
    expected1 = _heun_half(block.ffn, 0.5 * dt, h1 + dt * block.attention(0.0, h1), dt)  # no momentum
    h2 = _heun_half(block.ffn, dt, expected1, dt)
    expected2 = _heun_half(block.ffn, 1.5 * dt, h2 + dt * block.attention(dt, h2) + lam * (h2 - h1), dt)
    torch.testing.assert_close(x1, expected1, rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(x2, expected2, rtol=1e-13, atol=1e-13)


def test_strang_start_is_lie_start_without_an_ffn():
    """With no FFN a Strang layer is its stepper's step: started at the layer's input."""
    p = block_problem(seed=1)
    block = Block(p.field.attention)
    layer = Split(LightWave(), splitting="strang")
    y1, _ = layer.step(block, 0.0, p.x0, 0.3, layer.init(block, 0.0, p.x0))
    torch.testing.assert_close(y1, p.x0 + 0.3 * block.attention(0.0, p.x0), rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("splitting", ["lie", "strang"])
@pytest.mark.parametrize("stepper", [SemiImplicitEuler, solvers.VelocityVerlet])
def test_reversible_layers_invert_what_they_step(stepper, splitting):
    """inverse(step(y)) = y and step(inverse(y1)) = y1 on a block, each step from the layer's own init."""
    layer = Split(stepper(), ffn=SemiImplicitEuler(), splitting=splitting)
    assert layer.reversible
    check_reversible(layer, block_problem(seed=2, second_order=True))


def test_a_strang_layer_checks_its_start_at_init():
    layer = Split(LightWave(), splitting="strang")
    p = block_problem()
    with pytest.raises(TypeError, match="is a first-order stepper: y must be a Tensor, got a PhaseState"):
        layer.init(p.field, 0.0, PhaseState(p.x0, p.x0))


# -- evaluations ------------------------------------------------------------------------------------------------------


class OnAttention(AbstractStepper, abstract=True):
    """A block stepper seen as a stepper of the attention field alone, the rest of ``block`` fixed, so that
    ``check_evals`` counts its attention evaluations against the layer's declarations for that block."""

    def __init__(self, layer: AbstractStepper, block: Block):
        super().__init__()
        self.layer, self.rest = layer, block

    def claims(self, field=None) -> Claims:
        return self.layer.claims(self.rest)

    def init(self, field, t0, y0):
        return self.layer.init(self.rest._replace(attention=field), t0, y0)

    def step(self, field, t, y, dt, state):
        return self.layer.step(self.rest._replace(attention=field), t, y, dt, state)


def _doubled(x):
    return 2.0 * x


LAYERS = {
    "lie": lambda s: Split(s),
    "strang": lambda s: Split(s, splitting="strang"),
    "whole": Whole,
}
BLOCKS = {
    "ffn": lambda b: b,
    "no ffn": lambda b: Block(b.attention),
    "a map": lambda b: Block(b.attention, None, _doubled),
    "ffn and a map": lambda b: Block(b.attention, b.ffn, None, _doubled),
}


@pytest.mark.parametrize("blocks", BLOCKS)
@pytest.mark.parametrize("dynamics", LAYERS)
@pytest.mark.parametrize("stepper", [solvers.VelocityVerlet, GatedAB2, LightWave, Heun, SemiImplicitEuler])
def test_a_layer_declares_the_evaluations_it_makes(stepper, dynamics, blocks):
    """Counted by check_evals on a block problem, tied and untied: a start-up scheme's first steps cost what it
    declares under every layer, and first-same-as-last reuse is declared exactly where nothing acts between two of
    the stepper's steps (no FFN, no map)."""
    layer = LAYERS[dynamics](stepper())
    p = block_problem(seed=3, second_order=layer.second_order)
    block = BLOCKS[blocks](p.field)
    counted = OnAttention(layer, block)
    check_evals(counted, dataclasses.replace(p, field=block.attention))
    assert counted.fsal == (stepper is solvers.VelocityVerlet and blocks == "no ffn")
    assert layer.startup_evals == stepper.startup_evals


# -- the limit --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("splitting", ["lie", "strang"])
def test_a_force_history_multistep_layer_converges_to_the_additive_limit(splitting):
    """Adams–Bashforth on s ⊙ F_a, then the FFN: the history is the previous force, which the FFN sub-step does not
    touch, so the layer converges (order 1, a splitting) to x' = s ⊙ F_a + F_f, not to s ⊙ (F_a + F_f)."""
    layer = Split(GatedAB2(), splitting=splitting)
    p = block_problem(seed=0)
    report = check_layer(layer, p)
    assert report["declared"] == 1
    x = p.x0
    torch.testing.assert_close(
        layer.limit_field(p.field)(0.0, x), 1.5 * p.field.attention(0.0, x) + p.field.ffn(0.0, x), rtol=0, atol=0
    )


def test_a_position_history_multistep_layer_converges_to_the_limit_of_the_summed_field():
    """Heavy ball (light_wave) then the FFN: the history x_n - x_{n-1} records the FFN's displacement too, so the layer
    converges to x' = (F_a + F_f) / (1 - lam), as its limit hook declares."""
    layer = Split(LightWave(theta0=-1.0))
    p = block_problem(seed=0)
    assert check_layer(layer, p)["declared"] == 1
    lam = layer.stepper.lam().double()
    x = p.x0
    expected = (p.field.attention(0.0, x) + p.field.ffn(0.0, x)) / (1 - lam)
    torch.testing.assert_close(layer.limit_field(p.field)(0.0, x), expected, rtol=1e-15, atol=1e-15)


def test_whole_keeps_a_force_history_schemes_order():
    """Whole(AB2): the scheme on the summed field, order 2, limit s ⊙ (F_a + F_f)."""
    assert check_layer(Whole(GatedAB2()), block_problem(seed=0))["declared"] == 2


class GatedEuler(AbstractStepper):
    """``x + dt s ⊙ f``: a one-step scheme with the limit ``x' = s ⊙ f``."""

    order: ClassVar[int] = 1
    second_order: ClassVar[bool] = False
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 1

    def __init__(self, scale: float = 0.5):
        super().__init__()
        self.s = nn.Parameter(torch.tensor(scale))

    def step(self, field, t, y, dt, state):
        x = self._unpack(y)
        return x + dt * self.s.to(x.dtype) * field(t, x), state

    def limit_field(self, field):
        return lambda t, x: self.s.to(x.dtype) * field(t, x)


@pytest.mark.parametrize("second_order", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_the_ffn_sub_step_enters_the_limit_by_its_own_scheme(second_order):
    """An FFN sub-step by a scheme with its own limit (s ⊙ F_f) makes the layer converge to F_a + s ⊙ F_f (for a
    second-order state, its tangent lift)."""
    stepper = SemiImplicitEuler() if second_order else Euler()
    check_layer(Split(stepper, ffn=GatedEuler()).double(), block_problem(seed=4, second_order=second_order))


class _NormedFFN(nn.Module):
    """An FFN behind ``nn.LayerNorm``, time-modulated, with no ``joint`` of its own: a split layer carries the velocity
    through it by forward-mode AD."""

    def __init__(self, width: int):
        super().__init__()
        g = torch.Generator().manual_seed(3)
        self.norm = nn.LayerNorm(width).double()
        self.up = nn.Parameter(torch.randn(4 * width, width, generator=g, dtype=torch.float64) / width**0.5)
        self.down = nn.Parameter(torch.randn(width, 4 * width, generator=g, dtype=torch.float64) / (2 * width**0.5))

    def forward(self, t, x):
        return (
            (1 + 0.5 * torch.cos(2 * torch.as_tensor(t) + 0.7))
            * nn.functional.gelu(self.norm(x) @ self.up.T)
            @ (self.down.T)
        )


@pytest.mark.parametrize("splitting", ["lie", "strang"])
def test_the_velocity_through_a_layer_norm_has_autograds_derivatives(splitting):
    """Full Wave's layer over an FFN with an ``nn.LayerNorm`` and no chain rule of its own: PyTorch's JVP of its fused
    LayerNorm has the right value but wrong derivatives (its saved mean and ``1/s`` carry none), and training
    differentiates the velocity. The gradients of a step with respect to the state, the step size and the FFN's
    weights (the norm's among them) equal difference quotients."""
    width = 4
    ffn = _NormedFFN(width)
    g = torch.Generator().manual_seed(5)
    attention_weight = torch.randn(width, width, generator=g, dtype=torch.float64) / width

    def attention(t, x):
        return torch.tanh(x @ attention_weight)

    block = Block(attention, ffn)
    layer = Split(SemiImplicitEuler(), splitting=splitting)
    x, v = (torch.randn(2, 3, width, generator=g, dtype=torch.float64) for _ in range(2))
    cotangent = torch.randn(2, 2, 3, width, generator=g, dtype=torch.float64)
    params = [x, v, ffn.norm.weight, ffn.norm.bias, ffn.up]

    def value(x, v, dt):
        y1, _ = layer.step(block, 0.3, PhaseState(x, v), dt, layer.init(block, 0.3, PhaseState(x, v)))
        return (cotangent * torch.stack(tuple(y1))).sum()

    dt = torch.tensor(0.7, dtype=torch.float64, requires_grad=True)
    for p in (x, v):
        p.requires_grad_()
    grads = torch.autograd.grad(value(x, v, dt), [*params, dt])
    h = 1e-6
    with torch.no_grad():
        for p, grad in zip([*params, dt], grads):
            direction = torch.randn(p.shape, generator=g, dtype=torch.float64)
            p += h * direction
            up = value(x, v, dt)
            p -= 2 * h * direction
            down = value(x, v, dt)
            p += h * direction
            quotient = float(up - down) / (2 * h)
            assert abs(float((grad * direction).sum()) - quotient) <= 1e-6 * max(1.0, abs(quotient))
