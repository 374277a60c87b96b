"""Chain-rule layers: exact modes equal torch.func.jvp, the paper's LayerNorm rule is the frozen-statistics JVP,
composition commutes with the joint map, and central finite differences agree; JointJVP's gradients are right; double
backward through the fused Functions is that of their plain formulas; torch.func transforms compose with the layers."""

from functools import partial

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from odeformer.joint import (
    ACTIVATIONS,
    JointJVP,
    JointLayerNorm,
    JointMLP,
    JointSequential,
    _JointLayerNorm,
    _JointMLP,
    release_workspace,
)

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


@pytest.mark.parametrize("mode", ["paper", "exact"])
@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_without_grad_the_joint_maps_skip_autograd_and_agree(name, mode):
    """Under ``no_grad`` and ``inference_mode`` the joint LayerNorm and MLP run their forward pass without the
    autograd Function (generation's path): the same numbers, bit for bit, and nothing that tracks a graph."""
    torch.manual_seed(0)
    norm, mlp = JointLayerNorm(6, mode=mode).double(), JointMLP(6, 12, name).double().eval()
    with torch.no_grad():
        norm.weight.add_(torch.randn(6, dtype=torch.float64))
    x, v = torch.randn(3, 5, 6, dtype=torch.float64), torch.randn(3, 5, 6, dtype=torch.float64)
    stacked = norm.stacked(x, v)
    expected = (stacked, *mlp.stacked(stacked))
    assert expected[0].grad_fn is not None
    for context in (torch.no_grad, torch.inference_mode):
        with context():
            got = norm.stacked(x, v)
            got = (got, *mlp.stacked(got))
        for a, b in zip(got, expected, strict=True):
            assert a.grad_fn is None and not a.requires_grad
            torch.testing.assert_close(a, b.detach(), rtol=0, atol=0)


def test_position_drops_out_in_training_only():
    """The plain MLP (``position``) applies its dropout on the hidden and the output in training, and none in eval
    mode or at rate 0 (where it skips the dropout calls)."""
    x = torch.randn(64, 6, dtype=torch.float64)
    mlp = JointMLP(6, 12, "gelu", dropout=0.5).double()
    plain = mlp.fc2(mlp.act.phi(mlp.fc1(x)))
    torch.testing.assert_close(mlp.eval().position(x), plain, rtol=0, atol=0)
    mlp.train()
    torch.manual_seed(0)
    first = mlp.position(x)
    torch.manual_seed(0)
    hidden = torch.nn.functional.dropout(mlp.act.phi(mlp.fc1(x)), 0.5, True)
    expected = torch.nn.functional.dropout(mlp.fc2(hidden), 0.5, True)
    torch.testing.assert_close(first, expected, rtol=0, atol=0)
    assert not torch.equal(first, plain)
    mlp.drop.p = 0.0
    torch.testing.assert_close(mlp.position(x), plain, rtol=0, atol=0)


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_second_derivatives_are_exact(name):
    act = ACTIVATIONS[name]
    z = torch.linspace(-6, 6, 2001, dtype=torch.float64).requires_grad_()
    (first,) = torch.autograd.grad(act.phi(z).sum(), z, create_graph=True)
    torch.testing.assert_close(first, act.prime(z), rtol=1e-12, atol=1e-12)
    slope = act.prime(z)
    second = torch.autograd.grad(slope.sum(), z)[0] if slope.requires_grad else torch.zeros_like(z)  # relu: a step
    mask = z.abs() > 1e-9  # relu's kink
    torch.testing.assert_close(second[mask], act.second(z.detach())[mask], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_kernels_compute_their_products(name):
    """The single-pass kernels of the fused MLP (allocating, and writing into ``out``) against the plain formulas."""
    act = ACTIVATIONS[name]
    g = torch.Generator().manual_seed(1)
    z = torch.linspace(-6, 6, 2001, dtype=torch.float64)
    grad, acc = (torch.randn(z.shape, generator=g, dtype=z.dtype) for _ in range(2))
    out = torch.full_like(z, float("nan"))
    torch.testing.assert_close(act.phi_into(z), act.phi(z), rtol=1e-14, atol=1e-14)
    torch.testing.assert_close(act.phi_into(z, out=out), act.phi(z), rtol=1e-14, atol=1e-14)
    torch.testing.assert_close(act.prime_times(grad, z), grad * act.prime(z), rtol=1e-12, atol=1e-12)
    out.fill_(float("nan"))
    torch.testing.assert_close(act.prime_times(grad, z, out=out), grad * act.prime(z), rtol=1e-12, atol=1e-12)
    expected = acc + grad * act.second(z)
    act.add_curvature(acc, grad.clone(), z, torch.full_like(z, float("nan")))
    torch.testing.assert_close(acc[z.abs() > 1e-9], expected[z.abs() > 1e-9], rtol=1e-12, atol=1e-12)


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


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_mlp_position_without_gradients_equals_the_differentiable_one(name):
    """Where nothing differentiates it, the plain MLP applies φ in place; the values are the same."""
    g, x, _ = _draw(2, (2, 3, 5), 2.0)
    mlp = _randomise(JointMLP(5, 9, name).double(), g)
    expected = mlp.position(x)
    assert expected.requires_grad
    with torch.no_grad():
        torch.testing.assert_close(mlp.position(x), expected, rtol=0, atol=0)
    tangent = torch.randn(x.shape, generator=g, dtype=x.dtype)
    with torch.no_grad():  # forward mode on a no-grad module call still sees φ's derivative
        _, jvp = torch.func.jvp(mlp.position, (x,), (tangent,))
    _, reference = torch.func.jvp(mlp.position, (x,), (tangent,))
    torch.testing.assert_close(jvp, reference, rtol=1e-12, atol=1e-14)  # rounding: autograd's order of products


def test_joint_mlp_results_do_not_depend_on_the_calls_between():
    """The fused MLP reuses its scratch buffers on CPU from call to call: outputs and gradients of one call stay what
    they were while other MLPs (other shapes, another dtype) run between its forward and its backward."""
    g, x, v = _draw(3, (2, 3, 5), 1.0)
    first = _randomise(JointMLP(5, 9).double(), g)
    x, v = x.requires_grad_(), v.requires_grad_()
    out = first(x, v)
    kept = [o.detach().clone() for o in out]
    for dim, hidden, dtype in ((5, 9, torch.float64), (7, 30, torch.float64), (5, 9, torch.float32)):
        other = JointMLP(dim, hidden).to(dtype)
        a, b = other(torch.randn(4, 6, dim, dtype=dtype), torch.randn(4, 6, dim, dtype=dtype))
        (a.sum() + b.sum()).backward()
    for o, k in zip(out, kept):
        assert torch.equal(o, k)
    assert release_workspace() > 0 and release_workspace() == 0  # the kept buffers can be given back
    weights = [torch.randn(o.shape, generator=g, dtype=o.dtype) for o in out]
    params = [x, v, first.fc1.weight, first.fc1.bias, first.fc2.weight, first.fc2.bias]
    fused = torch.autograd.grad(out, params, weights)
    act = first.act

    def plain(x, v, w1, b1, w2, b2):
        pre_x, pre_v = x @ w1.T + b1, v @ w1.T
        return act.phi(pre_x) @ w2.T + b2, (act.prime(pre_x) * pre_v) @ w2.T

    for a, b in zip(fused, torch.autograd.grad(plain(*params), params, weights)):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


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


# The fallback's gradients. torch.func.jvp through PyTorch's fused LayerNorm gives the right velocity but a wrong
# gradient of it with respect to x; JointJVP must be right in value and in every gradient.

MODULE_ACTIVATIONS = {
    "gelu": torch.nn.GELU(),
    "gelu_tanh": torch.nn.GELU("tanh"),
    "relu": torch.nn.ReLU(),
    "silu": torch.nn.SiLU(),
}


class _Call(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def _fallback_modules(d: int, n: int) -> dict:
    """Modules whose gradients through JointJVP are checked: every way to reach LayerNorm, and the per-token norms
    the batch-statistics error recommends."""
    nn = torch.nn
    return {
        "layer_norm_mlp": nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d)),
        "layer_norm_without_affine": nn.Sequential(nn.LayerNorm(d, elementwise_affine=False), nn.Tanh()),
        "layer_norm_over_two_dims": nn.Sequential(nn.LayerNorm((n, d)), nn.SiLU()),
        "torch_layer_norm": nn.Sequential(nn.Linear(d, d), _Call(lambda x: torch.layer_norm(x, (d,), eps=1e-3))),
        "group_norm": nn.Sequential(nn.GroupNorm(1, n), nn.Tanh()),
        "rms_norm": nn.Sequential(nn.RMSNorm(d), nn.Tanh()),
        "batch_norm_eval": nn.Sequential(nn.BatchNorm1d(n), nn.Tanh()).eval(),
    }


@pytest.mark.parametrize("name", sorted(_fallback_modules(4, 3)))
def test_jvp_fallback_gradients_match_finite_differences(name):
    """gradcheck of (x_out, v_out) with respect to x, v and every parameter (BatchNorm: running statistics)."""
    g, x, v = _draw(11, (2, 3, 4), 2.0)
    module = _randomise(_fallback_modules(4, 3)[name].double(), g)
    joint = JointJVP(module)
    params = list(module.parameters())
    x, v = x.requires_grad_(), v.requires_grad_()
    assert torch.autograd.gradcheck(lambda x, v, *p: joint(x, v), (x, v, *params))


@given(seed=seeds, shape=shapes, scale=scales, name=st.sampled_from(sorted(MODULE_ACTIVATIONS)))
def test_jvp_fallback_equals_the_fused_exact_path(seed, shape, scale, name):
    """JointJVP(LayerNorm, MLP) and JointLayerNorm(exact) + JointMLP with the same weights: values and the gradients
    of both outputs with respect to x, v and every parameter."""
    g, x, v = _draw(seed, shape, scale)
    d = shape[-1]
    fused = _randomise(JointSequential(JointLayerNorm(d, "exact"), JointMLP(d, 2 * d + 1, name)).double(), g)
    ln, mlp = fused
    nn = torch.nn
    module = nn.Sequential(nn.LayerNorm(d, eps=ln.eps), mlp.fc1, MODULE_ACTIVATIONS[name], mlp.fc2)
    module[0].weight, module[0].bias = ln.weight, ln.bias  # shared: the same Parameters in both
    fallback = JointJVP(module)
    x, v = x.requires_grad_(), v.requires_grad_()
    inputs = [x, v, *fused.parameters()]
    assert len(inputs) == 2 + len(list(fallback.parameters()))
    weights = (torch.randn(shape, generator=g, dtype=x.dtype), torch.randn(shape, generator=g, dtype=x.dtype))
    out, ref = fallback(x, v), fused(x, v)
    for a, b in zip(out, ref):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    grads = torch.autograd.grad(out, inputs, weights)
    reference = torch.autograd.grad(ref, inputs, weights)
    for a, b in zip(grads, reference):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9 * (1 + b.abs().max().item()))


@pytest.mark.parametrize(
    "module",
    [torch.nn.BatchNorm1d(3, track_running_stats=False), torch.nn.InstanceNorm1d(3, affine=True)],
    ids=["batch_norm", "instance_norm"],
)
def test_jvp_fallback_refuses_batch_statistics(module):
    """(BatchNorm with running statistics in training mode already fails in torch.func: it counts batches in place.)"""
    x, v = torch.randn(2, 3, 4, dtype=torch.float64), torch.randn(2, 3, 4, dtype=torch.float64)
    with pytest.raises(NotImplementedError, match="cannot go through .*_norm with batch statistics.*eval"):
        JointJVP(module.double().train())(x, v)


# Double backward through the fused Functions: exact, as autograd through the plain formulas gives it.


def _layer_norm_formula(x, v, w, b, eps, mode):
    mean = x.mean(-1, keepdim=True)
    inv_std = torch.rsqrt(x.var(-1, unbiased=False, keepdim=True) + eps)
    x_hat = (x - mean) * inv_std
    if mode == "paper":
        u = v * inv_std
    else:
        u = (v - v.mean(-1, keepdim=True) - x_hat * (x_hat * v).mean(-1, keepdim=True)) * inv_std
    return torch.stack((x_hat * w + b, u * w))


def _mlp_formula(name):
    phi, phi_prime = ACTIVATIONS[name].phi, ACTIVATIONS[name].prime

    def formula(xv, w1, b1, w2, b2):
        pre_x, pre_v = xv[0] @ w1.T + b1, xv[1] @ w1.T
        return phi(pre_x) @ w2.T + b2, (phi_prime(pre_x) * pre_v) @ w2.T

    return formula


def _hessian_vector_products(f, inputs, weights, directions):
    """``∂/∂θ ⟨∇_θ ⟨weights, f(θ)⟩, directions⟩`` for every input θ, by double backward."""
    first = torch.autograd.grad(f(*inputs), inputs, weights, create_graph=True)
    inner = sum((a * u).sum() for a, u in zip(first, directions))
    return torch.autograd.grad(inner, inputs, allow_unused=True)


def _fused_layer_norm(eps, mode):
    return lambda x, v, w, b: _JointLayerNorm.apply(x, v, w, b, eps, mode == "exact")


def _fused_mlp(act):
    return lambda xv, w1, b1, w2, b2: _JointMLP.apply(xv, w1, b1, w2, b2, act)


def _fused_functions():
    """(name, fused, formula, inputs): every custom autograd Function of odeformer.joint with its plain formula."""
    g, x, v = _draw(5, (2, 3, 5), 2.0)
    cases = []
    for mode in ("paper", "exact"):
        ln = _randomise(JointLayerNorm(5, mode).double(), g)
        formula = partial(_layer_norm_formula, eps=ln.eps, mode=mode)
        inputs = [x.clone(), v.clone(), ln.weight.detach().clone(), ln.bias.detach().clone()]
        cases.append((f"layer_norm_{mode}", _fused_layer_norm(ln.eps, mode), formula, inputs))
    for name in sorted(ACTIVATIONS):
        mlp = _randomise(JointMLP(5, 7, name).double(), g)
        weights = (mlp.fc1.weight, mlp.fc1.bias, mlp.fc2.weight, mlp.fc2.bias)
        inputs = [torch.stack((x, v)), *(p.detach().clone() for p in weights)]  # xv: (2, B, N, D)
        cases.append((f"mlp_{name}", _fused_mlp(mlp.act), _mlp_formula(name), inputs))
    return cases


def _entangled(f):
    """``f`` of inputs each built from the ones before it, ``t_i ↦ t_i · (1 + tanh(0.1 Σ_{j<i} t_j))``, as inside a
    model, where the velocity is built from the state: a partial derivative must not leak into earlier inputs."""

    def g(*inputs):
        built = [inputs[0]]
        for t in inputs[1:]:
            built.append(t * (1 + torch.tanh(0.1 * sum(u.sum() for u in built))))
        return f(*built)

    return g


@pytest.mark.parametrize("entangled", [False, True], ids=["independent_inputs", "inputs_sharing_history"])
@pytest.mark.parametrize("case", _fused_functions(), ids=lambda case: case[0])
def test_fused_double_backward_is_that_of_the_plain_formula(case, entangled):
    name, fused, formula, inputs = case
    if entangled:
        fused, formula = _entangled(fused), _entangled(formula)
    inputs = [t.detach().clone().requires_grad_() for t in inputs]
    g = torch.Generator().manual_seed(9)
    out = formula(*inputs)
    weights = [torch.randn(o.shape, generator=g, dtype=o.dtype) for o in (out if isinstance(out, tuple) else (out,))]
    weights = weights if isinstance(out, tuple) else weights[0]
    directions = [torch.randn(t.shape, generator=g, dtype=t.dtype) for t in inputs]
    got = _hessian_vector_products(fused, inputs, weights, directions)
    expected = _hessian_vector_products(formula, inputs, weights, directions)
    for a, b in zip(got, expected):
        if b is None:
            assert a is None or torch.count_nonzero(a) == 0
        else:
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10 * (1 + b.abs().max().item()))
    if "relu" not in name:  # relu's kink defeats finite differences
        assert torch.autograd.gradgradcheck(fused, inputs)


# torch.func transforms and forward-mode AD run the plain formulas; outside them the fused Functions stay in use.


def _chain(d, mode, name, g):
    return _randomise(JointSequential(JointLayerNorm(d, mode), JointMLP(d, 2 * d, name)).double(), g)


def test_outside_transforms_the_fused_functions_run():
    g, x, v = _draw(0, (2, 3, 4), 1.0)
    ln, mlp = _chain(4, "exact", "gelu", g)
    x = x.requires_grad_()
    assert type(ln.stacked(x, v).grad_fn).__name__ == "_JointLayerNormBackward"
    assert type(mlp(x, v)[1].grad_fn).__name__ == "_JointMLPBackward"


@pytest.mark.parametrize("mode", ["paper", "exact"])
@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_joint_modules_compose_with_torch_func(mode, name):
    """jvp and jacrev equal central differences; vmap equals the batched call; forward-mode AD equals jvp."""
    g, x, v = _draw(4, (2, 3, 4), 1.5)
    chain = _chain(4, mode, name, g)
    dx, dv = torch.randn(x.shape, generator=g, dtype=x.dtype), torch.randn(v.shape, generator=g, dtype=v.dtype)

    def f(x, v):
        return torch.stack(chain(x, v))  # (2, B, N, D)

    h = 1e-6
    with torch.no_grad():
        fd = (f(x + h * dx, v + h * dv) - f(x - h * dx, v - h * dv)) / (2 * h)
    out, tangent = torch.func.jvp(f, (x, v), (dx, dv))
    torch.testing.assert_close(out, f(x, v), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(tangent, fd, rtol=1e-6, atol=1e-7 * (1 + fd.abs().max().item()))
    jx, jv = torch.func.jacrev(f, argnums=(0, 1))(x, v)  # each (2, B, N, D, B, N, D)
    product = (jx * dx).sum((-3, -2, -1)) + (jv * dv).sum((-3, -2, -1))
    torch.testing.assert_close(product, tangent, rtol=1e-10, atol=1e-10 * (1 + fd.abs().max().item()))
    torch.testing.assert_close(torch.func.vmap(f, out_dims=1)(x, v), f(x, v), rtol=1e-12, atol=1e-12)
    with torch.autograd.forward_ad.dual_level():
        dual = f(torch.autograd.forward_ad.make_dual(x, dx), torch.autograd.forward_ad.make_dual(v, dv))
        torch.testing.assert_close(torch.autograd.forward_ad.unpack_dual(dual).tangent, tangent, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", _fused_functions(), ids=lambda case: case[0])
def test_fused_double_backward_with_any_inputs_frozen(case):
    """Every subset of the inputs requiring grad (frozen weights, a state that needs none): the fused Function's
    double backward is the plain formula's. Training only the second bias of the MLP used to crash there, because
    the velocity's output then has no graph."""
    import itertools

    name, fused, formula, inputs = case
    for wanted in itertools.product((False, True), repeat=len(inputs)):
        if not any(wanted):
            continue
        ins = [t.detach().clone().requires_grad_(w) for t, w in zip(inputs, wanted)]
        chosen = [t for t in ins if t.requires_grad]
        results = []
        for f in (fused, formula):
            out = f(*ins)
            outs = out if isinstance(out, tuple) else (out,)
            loss = outs[0].sin().sum() + (outs[-1] * outs[0]).sum()
            first = torch.autograd.grad(loss, chosen, create_graph=True, allow_unused=True)
            inner = sum((q * q).sum() for q in first if q is not None)
            results.append(torch.autograd.grad(inner, chosen, allow_unused=True) if inner.requires_grad else None)
        if results[1] is None:
            assert results[0] is None or all(a is None or not a.any() for a in results[0])
            continue
        for a, b in zip(*results):
            b = torch.zeros_like(a) if b is None and a is not None else b
            a = torch.zeros_like(b) if a is None and b is not None else a
            if a is not None:
                torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10 * (1 + b.abs().max().item()), msg=str(wanted))


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_training_with_dropout_differentiates_every_activation(name):
    """With dropout in training the MLP runs unfused; its velocity product must be differentiable for every
    activation (SiLU's ATen backward kernel is not: training crashed on the first backward pass)."""
    mlp = _randomise(JointMLP(4, 6, name, dropout=0.3).double().train(), torch.Generator().manual_seed(11))
    g, x, v = _draw(12, (2, 3, 4), 1.0)

    def run(x, v):
        torch.manual_seed(0)  # the same dropout masks every call
        return mlp(x, v)

    assert torch.autograd.gradcheck(run, (x.requires_grad_(), v.requires_grad_()))
