"""Chain-rule layers: exact modes equal torch.func.jvp, the paper's LayerNorm rule is the frozen-statistics JVP,
composition commutes with the joint map, and central finite differences agree."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from odeformer.joint import ACTIVATIONS, JointJVP, JointLayerNorm, JointMLP, JointSequential

seeds = st.integers(0, 2**31 - 1)
shapes = st.tuples(st.integers(1, 3), st.integers(1, 5), st.integers(2, 12))  # (B, N, D)
scales = st.floats(0.1, 10.0)


def _draw(seed, shape, scale):
    g = torch.Generator().manual_seed(seed)
    x = scale * torch.randn(*shape, generator=g, dtype=torch.float64) + torch.randn(
        shape[-1], generator=g, dtype=torch.float64
    )
    v = torch.randn(*shape, generator=g, dtype=torch.float64)
    return g, x, v


def _randomise(module, g):
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype))
    return module


def _jvp(f, x, v):
    return torch.func.jvp(f, (x,), (v,))


@given(seed=seeds, shape=shapes, scale=scales)
def test_exact_layer_norm_is_the_jvp(seed, shape, scale):
    g, x, v = _draw(seed, shape, scale)
    ln = _randomise(JointLayerNorm(shape[-1], mode="exact").double(), g)
    out, dv = ln(x, v)
    ref_out, ref_dv = _jvp(ln.position, x, v)
    torch.testing.assert_close(out, ref_out, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(dv, ref_dv, rtol=1e-10, atol=1e-10)


@given(seed=seeds, shape=shapes, scale=scales)
def test_paper_layer_norm_is_the_jvp_with_frozen_statistics(seed, shape, scale):
    g, x, v = _draw(seed, shape, scale)
    ln = _randomise(JointLayerNorm(shape[-1], mode="paper").double(), g)
    mean = x.mean(-1, keepdim=True)
    std = (x.var(-1, unbiased=False, keepdim=True) + ln.eps).sqrt()

    def frozen(y):  # LayerNorm with the statistics of x held constant
        return (y - mean) / std * ln.weight + ln.bias

    out, dv = ln(x, v)
    ref_out, ref_dv = _jvp(frozen, x, v)
    torch.testing.assert_close(out, ref_out, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(dv, ref_dv, rtol=1e-12, atol=1e-12)


def test_paper_and_exact_differ_where_they_should():
    """The paper rule drops the mean and variance terms: equal for v orthogonal to both, different otherwise."""
    g, x, v = _draw(0, (1, 3, 8), 1.0)
    paper, exact = JointLayerNorm(8, "paper").double(), JointLayerNorm(8, "exact").double()
    assert not torch.allclose(paper(x, v)[1], exact(x, v)[1])
    x_hat = (x - x.mean(-1, keepdim=True)) / x.std(-1, unbiased=False, keepdim=True)
    w = v - v.mean(-1, keepdim=True)
    w = w - x_hat * (x_hat * w).mean(-1, keepdim=True) / (x_hat * x_hat).mean(-1, keepdim=True)
    torch.testing.assert_close(paper(x, w)[1], exact(x, w)[1], rtol=1e-5, atol=1e-8)  # eps makes them differ slightly


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
@given(seed=seeds, shape=shapes, scale=scales)
def test_joint_mlp_is_the_jvp(name, seed, shape, scale):
    g, x, v = _draw(seed, shape, scale)
    mlp = _randomise(JointMLP(shape[-1], 2 * shape[-1] + 1, name).double(), g)
    out, dv = mlp(x, v)
    ref_out, ref_dv = _jvp(mlp.position, x, v)
    torch.testing.assert_close(out, ref_out, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(dv, ref_dv, rtol=1e-10, atol=1e-10)


@given(seed=seeds, shape=shapes, scale=scales, mode=st.sampled_from(["exact", "paper"]))
def test_joint_of_a_composition_is_the_composition_of_joints(seed, shape, scale, mode):
    g, x, v = _draw(seed, shape, scale)
    d = shape[-1]
    chain = _randomise(
        JointSequential(
            JointLayerNorm(d, mode), JointMLP(d, 3 * d), JointLayerNorm(d, "exact"), JointMLP(d, d, "silu")
        ).double(),
        g,
    )
    out, dv = chain(x, v)
    y, w = x, v
    for module in chain:
        y, w = module(y, w)
    torch.testing.assert_close(out, y, rtol=0, atol=0)
    torch.testing.assert_close(dv, w, rtol=0, atol=0)
    if mode == "exact":  # all-exact chains are the JVP of the whole composition
        ref_out, ref_dv = _jvp(chain.position, x, v)
        torch.testing.assert_close(dv, ref_dv, rtol=1e-9, atol=1e-9)


@given(seed=seeds, shape=shapes, scale=st.floats(0.5, 3.0), name=st.sampled_from(["gelu", "gelu_tanh", "silu"]))
def test_central_finite_differences_agree(seed, shape, scale, name):
    g, x, v = _draw(seed, shape, scale)
    d = shape[-1]
    chain = _randomise(JointSequential(JointLayerNorm(d, "exact"), JointMLP(d, 2 * d, name)).double(), g)
    h = 1e-6
    fd = (chain.position(x + h * v) - chain.position(x - h * v)) / (2 * h)
    torch.testing.assert_close(chain(x, v)[1], fd, rtol=1e-5, atol=1e-5 * (1 + fd.abs().max().item()))


def test_jvp_wrapper_is_the_oracle_for_any_module():
    g, x, v = _draw(1, (2, 3, 6), 1.0)
    module = torch.nn.Sequential(torch.nn.Linear(6, 6), torch.nn.Tanh()).double()
    out, dv = JointJVP(module)(x, v)
    ref_out, ref_dv = _jvp(module, x, v)
    assert torch.equal(out, ref_out) and torch.equal(dv, ref_dv)


def test_unknown_activation_is_a_clear_error():
    with pytest.raises(ValueError, match="activation 'tanh' has no known derivative.*gelu, gelu_tanh, relu, silu"):
        JointMLP(4, 8, "tanh")
    with pytest.raises(ValueError, match="mode must be 'paper' or 'exact'"):
        JointLayerNorm(4, mode="approx")


def test_dropout_uses_one_mask_for_state_and_velocity():
    """With dropout the velocity must still be the JVP of the map the state went through."""
    mlp = JointMLP(6, 12, "gelu", dropout=0.5).double().train()
    x, v = torch.randn(4, 6, dtype=torch.float64), torch.randn(4, 6, dtype=torch.float64)
    torch.manual_seed(0)
    out, dv = mlp(x, v)
    torch.manual_seed(0)
    eps = 1e-7
    out_plus, _ = mlp(x + eps * v, v)
    torch.testing.assert_close((out_plus - out) / eps, dv, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_second_derivatives_are_exact(name):
    phi, phi_prime, phi_second, prime_times, derivatives = ACTIVATIONS[name]
    z = torch.linspace(-6, 6, 2001, dtype=torch.float64).requires_grad_()
    (first,) = torch.autograd.grad(phi(z).sum(), z, create_graph=True)
    torch.testing.assert_close(first, phi_prime(z), rtol=1e-12, atol=1e-12)
    slope = phi_prime(z)
    second = torch.autograd.grad(slope.sum(), z)[0] if slope.requires_grad else torch.zeros_like(z)  # relu: a step
    mask = z.abs() > 1e-9  # relu's kink
    torch.testing.assert_close(second[mask], phi_second(z.detach())[mask], rtol=1e-10, atol=1e-12)
    g = torch.randn_like(z)
    torch.testing.assert_close(prime_times(g, z.detach()), g * phi_prime(z.detach()), rtol=1e-12, atol=1e-12)
    both = derivatives(z.detach())
    torch.testing.assert_close(both[0], phi_prime(z.detach()), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(both[1], phi_second(z.detach()), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_joint_mlp_backward_equals_autograd_of_its_definition(name):
    """The fused backward (recomputing φ, φ', φ'') against autograd through the plain formula, and gradcheck."""
    g, x, v = _draw(7, (2, 3, 5), 1.0)
    mlp = _randomise(JointMLP(5, 9, name).double(), g)
    phi, phi_prime = ACTIVATIONS[name].phi, ACTIVATIONS[name].prime

    def plain(x, v, w1, b1, w2, b2):
        pre_x, pre_v = x @ w1.T + b1, v @ w1.T
        return phi(pre_x) @ w2.T + b2, (phi_prime(pre_x) * pre_v) @ w2.T

    x, v = x.requires_grad_(), v.requires_grad_()
    params = [mlp.fc1.weight, mlp.fc1.bias, mlp.fc2.weight, mlp.fc2.bias]
    weights = (
        torch.randn(2, 3, 5, dtype=torch.float64, generator=g),
        torch.randn(2, 3, 5, dtype=torch.float64, generator=g),
    )
    fused = torch.autograd.grad(mlp(x, v), [x, v, *params], weights)
    reference = torch.autograd.grad(plain(x, v, *params), [x, v, *params], weights)
    for a, b in zip(fused, reference):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    if name != "relu":  # relu's kink defeats finite differences
        assert torch.autograd.gradcheck(
            lambda x, v, *p: plain(x, v, *p)[0] * 0 + mlp(x, v)[0] + mlp(x, v)[1], (x, v, *params)
        )


@pytest.mark.parametrize("mode", ["paper", "exact"])
@given(seed=seeds, shape=shapes, scale=scales)
def test_joint_layer_norm_backward_equals_autograd_of_its_definition(mode, seed, shape, scale):
    g, x, v = _draw(seed, shape, scale)
    ln = _randomise(JointLayerNorm(shape[-1], mode=mode).double(), g)

    def plain(x, v, w, b):
        mean = x.mean(-1, keepdim=True)
        inv_std = torch.rsqrt(x.var(-1, unbiased=False, keepdim=True) + ln.eps)
        x_hat = (x - mean) * inv_std
        if mode == "paper":
            u = v * inv_std
        else:
            u = (v - v.mean(-1, keepdim=True) - x_hat * (x_hat * v).mean(-1, keepdim=True)) * inv_std
        return x_hat * w + b, u * w

    x, v = x.requires_grad_(), v.requires_grad_()
    params = [ln.weight, ln.bias]
    weights = (
        torch.randn(*shape, dtype=torch.float64, generator=g),
        torch.randn(*shape, dtype=torch.float64, generator=g),
    )
    fused = torch.autograd.grad(ln(x, v), [x, v, *params], weights)
    reference = torch.autograd.grad(plain(x, v, *params), [x, v, *params], weights)
    for a, b in zip(fused, reference):
        torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-9 * (1 + b.abs().max().item()))


@pytest.mark.parametrize("mode", ["paper", "exact"])
def test_joint_layer_norm_gradcheck(mode):
    g, x, v = _draw(3, (2, 3, 6), 2.0)
    ln = _randomise(JointLayerNorm(6, mode=mode).double(), g)
    assert torch.autograd.gradcheck(
        lambda x, v, w, b: ln.__class__.forward(ln, x, v), (x.requires_grad_(), v.requires_grad_(), ln.weight, ln.bias)
    )
