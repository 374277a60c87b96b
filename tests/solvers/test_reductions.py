"""Reductions that the docstrings claim, exactly (bitwise), forward and backward."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from helpers import TanhField
from solvers import RK4, Damped, Euler, LightWave, Mix, PhaseState, SemiImplicitEuler, VelocityMix, integrate

seeds = st.integers(0, 2**31 - 1)
depths = st.integers(1, 6)
dts = st.floats(0.01, 1.0)


def _problem(seed, dim=4):
    g = torch.Generator().manual_seed(seed)
    field = TanhField(dim, g)
    x0 = torch.randn(3, dim, generator=g, dtype=torch.float64, requires_grad=True)
    v0 = torch.randn(3, dim, generator=g, dtype=torch.float64, requires_grad=True)
    return field, x0, v0


def _grads(out, inputs):
    return torch.autograd.grad(out.square().sum(), inputs, allow_unused=True, materialize_grads=True)


@given(seed=seeds, depth=depths, dt=dts)
def test_mix_with_gate_zero_is_euler(seed, depth, dt):
    field, x0, v0 = _problem(seed)
    params = [x0, *field.parameters()]
    mixed = integrate(Mix(dim=4, theta0=-math.inf), [field] * depth, PhaseState(x0, v0), dt).x
    plain = integrate(Euler(), [field] * depth, x0, dt)
    assert torch.equal(mixed, plain)
    mixed_grads = _grads(mixed, [v0, *params])
    for a, b in zip(mixed_grads[1:], _grads(plain, params)):
        assert torch.equal(a, b)
    assert torch.equal(mixed_grads[0], torch.zeros_like(v0))  # the velocity is carried, never read


@given(seed=seeds, depth=depths, dt=dts)
def test_damped_with_zero_friction_is_semi_implicit_euler(seed, depth, dt):
    field, x0, v0 = _problem(seed)
    params = [x0, v0, *field.parameters()]
    a = integrate(Damped(gamma=0.0), [field] * depth, PhaseState(x0, v0), dt)
    b = integrate(SemiImplicitEuler(), [field] * depth, PhaseState(x0, v0), dt)
    assert torch.equal(a.x, b.x) and torch.equal(a.v, b.v)
    for ga, gb in zip(_grads(a.x + a.v, params), _grads(b.x + b.v, params)):
        assert torch.equal(ga, gb)


@given(seed=seeds, depth=depths, dt=dts)
def test_light_wave_with_zero_momentum_is_euler(seed, depth, dt):
    field, x0, _ = _problem(seed)
    params = [x0, *field.parameters()]
    a = integrate(LightWave(dim=4, theta0=-math.inf), [field] * depth, x0, dt)
    b = integrate(Euler(), [field] * depth, x0, dt)
    assert torch.equal(a, b)
    for ga, gb in zip(_grads(a, params), _grads(b, params)):
        assert torch.equal(ga, gb)


@given(seed=seeds, k=st.integers(0, 6))
def test_semi_implicit_euler_from_rest_moves_like_euler_with_dt_squared(seed, k):
    """Exact for dt a power of two (the products dt·(dt·a) and dt²·a then round alike)."""
    field, x0, _ = _problem(seed)
    dt = 2.0**-k
    wave = SemiImplicitEuler().step(field, 0.0, PhaseState(x0, torch.zeros_like(x0)), dt, None)[0].x
    diffusion = Euler().step(field, 0.0, x0, dt * dt, None)[0]
    assert torch.equal(wave, diffusion)
    for a, b in zip(_grads(wave, [x0]), _grads(diffusion, [x0])):
        assert torch.equal(a, b)


@given(seed=seeds, dt=dts)
def test_semi_implicit_euler_from_rest_moves_like_euler_with_dt_squared_any_dt(seed, dt):
    field, x0, _ = _problem(seed)
    wave = SemiImplicitEuler().step(field, 0.0, PhaseState(x0, torch.zeros_like(x0)), dt, None)[0].x
    diffusion = Euler().step(field, 0.0, x0, dt * dt, None)[0]
    torch.testing.assert_close(wave, diffusion, rtol=4e-16, atol=4e-16)


def test_mix_default_gate_starts_at_sigmoid_minus_eight():
    assert float(Mix().lam()) == pytest.approx(1 / (1 + math.exp(8)))
    assert torch.allclose(Mix(dim=3).lam(), torch.full((3,), 1 / (1 + math.exp(8))))


@given(seed=seeds, depth=depths, dt=dts, step=st.floats(0.1, 2.0), shift=st.floats(0.0, 1.0))
def test_mix_with_gate_zero_and_own_diffusion_step_is_euler_on_the_shifted_field(seed, depth, dt, step, shift):
    """The official mix's diffusion half: Euler with its own step on a(x) + shift x (exactly, forward)."""
    field, x0, v0 = _problem(seed)
    mix = Mix(dim=4, theta0=-math.inf, diffusion_dt=step, diffusion_shift=shift)
    mixed = integrate(mix, [field] * depth, PhaseState(x0, v0), dt).x
    x, euler = x0, Euler()
    for t in [i * dt for i in range(depth)]:  # the layer times are the mix's; the step is the diffusion's own
        x, _ = euler.step(lambda t, x: field(t, x) + shift * x, t, x, step, None)
    assert torch.equal(mixed, x)


def test_mix_with_a_fixed_diffusion_step_has_no_small_step_limit():
    with pytest.raises(ValueError, match="no small-step limit"):
        Mix(diffusion_dt=1.0).limit_field(lambda t, x: -x)
    with pytest.raises(ValueError, match="diffusion_dt must be positive"):
        Mix(diffusion_dt=0.0)


@given(seed=seeds, depth=depths, dt=dts)
def test_velocity_mix_with_gate_zero_is_euler_and_gate_one_is_semi_implicit_euler(seed, depth, dt):
    """``lam = 0``: the velocity is the force, the position Euler's; ``lam = 1`` (sigmoid(40) rounds to 1): the
    wave's kick and drift. Exactly, forward and backward."""
    field, x0, v0 = _problem(seed)
    params = [x0, v0, *field.parameters()]
    zero = integrate(VelocityMix(dim=4, theta0=-math.inf), [field] * depth, PhaseState(x0, v0), dt)
    euler = integrate(Euler(), [field] * depth, x0, dt)
    assert torch.equal(zero.x, euler)
    before_last = x0 if depth == 1 else integrate(Euler(), [field] * (depth - 1), x0, dt)
    assert torch.equal(zero.v, field((depth - 1) * dt, before_last))
    for a, b in zip(_grads(zero.x, params), _grads(euler, params)):
        assert torch.equal(a, b)
    one = integrate(VelocityMix(theta0=40.0), [field] * depth, PhaseState(x0, v0), dt)
    wave = integrate(SemiImplicitEuler(), [field] * depth, PhaseState(x0, v0), dt)
    assert float(VelocityMix(theta0=40.0).lam()) == 1.0
    assert torch.equal(one.x, wave.x) and torch.equal(one.v, wave.v)
    for a, b in zip(_grads(one.x + one.v, params), _grads(wave.x + wave.v, params)):
        assert torch.equal(a, b)


@pytest.mark.parametrize("theta0", [-2.0, 0.0, 1.5])
def test_velocity_mix_position_converges_with_order_1_to_the_force(theta0):
    """No small-step limit in ``(x, v)`` (order 0, which the kit checks), but the position alone converges with
    order 1 to ``x' = a(t, x)`` for a fixed gate, from a velocity at rest or drawn (the heavy-ball reading)."""
    field, x0, v0 = _problem(7)
    T = 1.0
    with torch.no_grad():
        exact = integrate(RK4(), [field] * 4000, x0, T / 4000)
        for start in (torch.zeros_like(v0), v0):
            errors = []
            for n in (50, 100, 200, 400):
                x = integrate(VelocityMix(theta0=theta0), [field] * n, PhaseState(x0, start), T / n).x
                errors.append(float((x - exact).abs().max()))
            slopes = [math.log2(a / b) for a, b in zip(errors, errors[1:])]
            assert all(0.9 < s < 1.1 for s in slopes[1:]), (errors, slopes)
    with pytest.raises(ValueError, match="no small-step limit"):
        VelocityMix().limit_field(field)
    with pytest.raises(ValueError, match="gate must be one of channel, scalar; got 'layer'"):
        VelocityMix(gate="layer")
    assert VelocityMix(dim=6, gate="scalar").theta.shape == (1,) and VelocityMix(dim=6).theta.shape == (6,)
