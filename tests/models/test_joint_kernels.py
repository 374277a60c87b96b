"""The fused joint LayerNorm and MLP compute their values with the same kernels in the same order as the formulas
they are written from: the forward pass written into the stacked result equals the one stacked afterwards, and the
backward passes (products taken in place) equal the same products taken out of place, bit for bit, in float32 and
float64."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from odeformer.joint import ACTIVATIONS, JointMLP, _JointLayerNorm, _JointMLP
from odeformer.joint.layer_norm import _joint_layer_norm_into, _joint_layer_norm_stacked

seeds = st.integers(0, 2**31 - 1)
shapes = st.tuples(st.integers(1, 3), st.integers(1, 5), st.integers(2, 12))  # (B, N, D)
dtypes = st.sampled_from([torch.float32, torch.float64])


def _inputs(seed, shape, dtype):
    g = torch.Generator().manual_seed(seed)
    x, v = (3 * torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype) for _ in range(2))
    weight, bias = (torch.randn(shape[-1], generator=g, dtype=torch.float64).to(dtype) for _ in range(2))
    return g, x, v, weight, bias


@settings(max_examples=30)
@given(seed=seeds, shape=shapes, dtype=dtypes, exact=st.booleans())
def test_layer_norm_written_into_the_stack_equals_the_stacked_halves(seed, shape, dtype, exact):
    _, x, v, weight, bias = _inputs(seed, shape, dtype)
    into = _joint_layer_norm_into(x, v, weight, bias, 1e-6, exact)
    stacked = _joint_layer_norm_stacked(x, v, weight, bias, 1e-6, exact)
    assert all(torch.equal(a, b) for a, b in zip(into, stacked, strict=True))


def _paper_backward_out_of_place(x, v, weight, bias, eps, grad_out):
    """The paper rule's backward pass with every product a new tensor (the order the fused one keeps)."""
    out_x, mean, inv_std = torch.native_layer_norm(x, (x.shape[-1],), weight, bias, eps)
    grad_x, grad_v = grad_out.unbind(0)
    dx, grad_weight, grad_bias = torch.ops.aten.native_layer_norm_backward(
        grad_x, x, (x.shape[-1],), mean, inv_std, weight, bias, [True, True, True]
    )
    x_hat = (x - mean) * inv_std
    u = v * inv_std
    a = grad_v * weight
    dv = a * inv_std
    dx = dx - x_hat * ((a * v).mean(-1, keepdim=True) * inv_std * inv_std)
    return dx, dv, grad_weight + (grad_v * u).reshape(-1, x.shape[-1]).sum(0), grad_bias


@settings(max_examples=30)
@given(seed=seeds, shape=shapes, dtype=dtypes)
def test_paper_layer_norm_backward_equals_its_products_out_of_place(seed, shape, dtype):
    g, x, v, weight, bias = _inputs(seed, shape, dtype)
    grad_out = torch.randn(2, *shape, generator=g, dtype=torch.float64).to(dtype)
    leaves = [t.clone().requires_grad_() for t in (x, v, weight, bias)]
    _JointLayerNorm.apply(*leaves, 1e-6, False).backward(grad_out)
    expected = _paper_backward_out_of_place(x, v, weight, bias, 1e-6, grad_out)
    assert all(torch.equal(leaf.grad, e) for leaf, e in zip(leaves, expected, strict=True))


def _mlp_backward_out_of_place(xv, weight1, bias1, weight2, act, grad_x, grad_v):
    """The fused MLP's backward pass with every product a new tensor and each half scaled by ``φ'`` on its own."""
    rows = xv.reshape(-1, xv.shape[-1])
    pre = rows @ weight1.t()
    tokens = pre.shape[0] // 2
    pre_x, pre_v = pre[:tokens], pre[tokens:]
    pre_x += bias1
    grads = torch.stack((grad_x, grad_v)).reshape(pre.shape[0], -1)
    slope = act.prime_times(torch.ones_like(pre_x), pre_x)
    hidden = torch.cat((act.phi(pre_x), slope * pre_v))
    grad_weight2 = grads.t() @ hidden
    grad_pre = grads @ weight2
    g_x, g_v = grad_pre[:tokens], grad_pre[tokens:]
    curved = g_v * pre_v
    g_v = g_v * slope
    g_x = g_x * slope
    act.add_curvature(g_x, curved, pre_x, torch.empty_like(pre_x))
    grad_pre = torch.cat((g_x, g_v))
    return (grad_pre @ weight1).view(xv.shape), grad_pre.t() @ rows, g_x.sum(0), grad_weight2, grads[:tokens].sum(0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_joint_mlp_backward_equals_its_products_out_of_place(name, dtype):
    torch.manual_seed(0)
    mlp = JointMLP(8, 32, name).to(dtype)
    xv = torch.randn(2, 3, 5, 8, dtype=dtype)
    grad_x, grad_v = torch.randn(2, 3, 5, 8, dtype=dtype).unbind(0)
    weights = [
        t.detach().clone().requires_grad_() for t in (mlp.fc1.weight, mlp.fc1.bias, mlp.fc2.weight, mlp.fc2.bias)
    ]
    leaf = xv.clone().requires_grad_()
    out_x, out_v = _JointMLP.apply(leaf, *weights, mlp.act)
    torch.autograd.backward((out_x, out_v), (grad_x, grad_v))
    fixed = (t.detach() for t in (mlp.fc1.weight, mlp.fc1.bias, mlp.fc2.weight))
    expected = _mlp_backward_out_of_place(xv, *fixed, mlp.act, grad_x, grad_v)
    got = (leaf.grad, *(w.grad for w in weights))
    assert all(torch.equal(a, b) for a, b in zip(got, expected, strict=True))


def test_layer_norm_backward_does_not_depend_on_the_calls_between():
    """The paper rule's backward pass writes its temporaries into kept buffers: a larger call in between changes
    nothing in the gradients of a repeated one."""
    _, x, v, weight, bias = _inputs(0, (2, 3, 8), torch.float32)
    grad_out = torch.randn(2, 2, 3, 8)

    def grads(x, v, grad_out):
        leaves = [t.clone().requires_grad_() for t in (x, v, weight, bias)]
        _JointLayerNorm.apply(*leaves, 1e-6, False).backward(grad_out)
        return [leaf.grad for leaf in leaves]

    first = grads(x, v, grad_out)
    grads(torch.randn(4, 9, 8), torch.randn(4, 9, 8), torch.randn(2, 4, 9, 8))
    assert all(torch.equal(a, b) for a, b in zip(first, grads(x, v, grad_out), strict=True))
