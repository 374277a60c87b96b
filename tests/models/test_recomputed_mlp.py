"""The plain MLP while training (``JointMLP.position`` through ``_RecomputedMLP``): it saves the input and the
pre-activation but not the hidden layer, and its value and every gradient are bit for bit autograd's through
``nn.Linear``, ``φ`` and ``nn.Linear``."""

from __future__ import annotations

import contextlib

import pytest
import torch

from odeformer.joint import mlp as mlp_module
from odeformer.joint.activations import ACTIVATIONS, Activation
from odeformer.joint.mlp import JointMLP


@pytest.fixture(autouse=True)
def _every_size(monkeypatch):
    """These tests' layers are small: recompute at every size (the threshold has a test of its own)."""
    monkeypatch.setattr(mlp_module, "RECOMPUTE_FROM", 0)


def test_small_hidden_layers_are_saved_large_ones_recomputed(monkeypatch):
    monkeypatch.setattr(mlp_module, "RECOMPUTE_FROM", 4 * 5 * 32)
    mlp = JointMLP(8, 32)
    at = torch.randn(4, 5, 8, requires_grad=True)
    below = torch.randn(4, 4, 8, requires_grad=True)
    assert mlp.position(at).grad_fn.name() == "_RecomputedMLPBackward"
    assert mlp.position(below).grad_fn.name() != "_RecomputedMLPBackward"


class _Patched:
    """A context in which ``position`` takes the module path (what it did before the fused Function)."""

    def __enter__(self):
        self.saved = mlp_module.plain_calls
        mlp_module.plain_calls = lambda *modules: False
        return self

    def __exit__(self, *exc):
        mlp_module.plain_calls = self.saved


def _value_and_grads(mlp, x, loss, module_path: bool):
    wanted = [x] + [p for p in mlp.parameters() if p.requires_grad]
    wanted = [t for t in wanted if t.requires_grad]
    if module_path:
        with _Patched():
            out = mlp.position(x)
    else:
        out = mlp.position(x)
    return out, torch.autograd.grad(loss(out), wanted)


LOSSES = {"square": lambda out: out.square().sum(), "sum": lambda out: out.sum()}  # "sum": an expanded gradient


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("loss", sorted(LOSSES))
def test_value_and_gradients_are_autograds_bit_for_bit(name, dtype, loss):
    torch.manual_seed(0)
    mlp = JointMLP(8, 32, name).to(dtype)
    x = torch.randn(4, 5, 8, dtype=dtype, requires_grad=True)
    fused_out, fused = _value_and_grads(mlp, x, LOSSES[loss], module_path=False)
    assert fused_out.grad_fn.name() == "_RecomputedMLPBackward"
    plain_out, plain = _value_and_grads(mlp, x, LOSSES[loss], module_path=True)
    assert plain_out.grad_fn.name() != "_RecomputedMLPBackward"
    assert torch.equal(fused_out, plain_out)
    assert len(fused) == len(plain) == 5
    for a, b in zip(fused, plain, strict=True):
        assert a.dtype == b.dtype and torch.equal(a, b)


@pytest.mark.parametrize("frozen", ["input", "weights", "first_layer", "no_bias"])
def test_partial_gradients_match(frozen):
    torch.manual_seed(1)
    mlp = JointMLP(6, 12, "gelu").double()
    x = torch.randn(3, 6, dtype=torch.float64, requires_grad=frozen != "input")
    if frozen == "weights":
        mlp.requires_grad_(False)
    if frozen == "first_layer":
        mlp.fc1.requires_grad_(False)
    if frozen == "no_bias":
        mlp.fc1 = torch.nn.Linear(6, 12, bias=False).double()
        mlp.fc2 = torch.nn.Linear(12, 6, bias=False).double()
    fused_out, fused = _value_and_grads(mlp, x, LOSSES["square"], module_path=False)
    assert fused_out.grad_fn.name() == "_RecomputedMLPBackward"
    _, plain = _value_and_grads(mlp, x, LOSSES["square"], module_path=True)
    assert len(fused) == len(plain) > 0
    for a, b in zip(fused, plain, strict=True):
        assert torch.equal(a, b)


def _saved_bytes(mlp, x, module_path: bool) -> int:
    weights = {p.untyped_storage().data_ptr() for p in mlp.parameters()}
    storages: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in weights:  # activations, not the weights (or views of them)
            storages[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        if module_path:
            with _Patched():
                mlp.position(x)
        else:
            mlp.position(x)
    return sum(storages.values())


def test_it_saves_no_hidden_layer():
    torch.manual_seed(2)
    mlp = JointMLP(16, 64)
    x = torch.randn(8, 10, 16, requires_grad=True)
    hidden = 8 * 10 * 64 * 4  # one float32 hidden-size tensor
    plain, fused = _saved_bytes(mlp, x, module_path=True), _saved_bytes(mlp, x, module_path=False)
    assert plain == x.numel() * 4 + 2 * hidden  # the input, the pre-activation, the hidden layer
    assert fused == plain - hidden


def _retained_bytes(mlp, x, module_path: bool) -> int:
    """CPU memory a forward call leaves allocated (the output and whatever the graph keeps, a Function's own
    attributes included), from the profiler's allocation records; the scratch buffer exists before."""
    from torch.profiler import ProfilerActivity, profile

    with _Patched() if module_path else contextlib.nullcontext():
        mlp.position(x)  # the kept scratch buffer is allocated here, not below
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            out = mlp.position(x)
    del out
    return sum(event.self_cpu_memory_usage for event in prof.key_averages())


def test_the_graph_holds_no_hidden_layer_in_any_form():
    torch.manual_seed(2)
    mlp = JointMLP(16, 64)
    x = torch.randn(8, 10, 16, requires_grad=True)
    hidden, out = 8 * 10 * 64 * 4, 8 * 10 * 16 * 4
    assert _retained_bytes(mlp, x, module_path=True) == out + 2 * hidden  # the pre-activation and φ of it
    assert _retained_bytes(mlp, x, module_path=False) == out + hidden  # the pre-activation only


def test_bf16_autocast_matches_autograd():
    torch.manual_seed(3)
    mlp = JointMLP(8, 32)
    x = torch.randn(4, 5, 8, requires_grad=True)

    def run(module_path):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out, grads = _value_and_grads(mlp, x, lambda o: o.float().square().sum(), module_path)
        return out, grads

    (fused_out, fused), (plain_out, plain) = run(False), run(True)
    assert fused_out.dtype == torch.bfloat16 and torch.equal(fused_out, plain_out)
    for a, b in zip(fused, plain, strict=True):
        assert a.dtype == torch.float32 and torch.equal(a, b)


def test_double_backward_is_the_plain_maps():
    torch.manual_seed(4)
    mlp = JointMLP(5, 9, "silu").double()
    x = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)

    def second(module_path):
        params = list(mlp.parameters())
        if module_path:
            with _Patched():
                out = mlp.position(x)
        else:
            out = mlp.position(x)
        first = torch.autograd.grad(out.square().sum(), [x, *params], create_graph=True)
        return torch.autograd.grad(sum(g.square().sum() for g in first), [x, *params])

    for a, b in zip(second(False), second(True), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_hooks_dropout_and_transforms_take_the_module_path():
    torch.manual_seed(5)
    mlp = JointMLP(4, 8)
    x = torch.randn(2, 4, requires_grad=True)
    calls = []
    handle = mlp.fc1.register_forward_hook(lambda module, args, out: calls.append(out.shape))
    out = mlp.position(x)
    handle.remove()
    assert calls == [torch.Size([2, 8])] and out.grad_fn.name() != "_RecomputedMLPBackward"
    assert mlp.position(x).grad_fn.name() == "_RecomputedMLPBackward"

    dropping = JointMLP(4, 8, dropout=0.5).train()
    assert dropping.position(x).grad_fn.name() != "_RecomputedMLPBackward"
    assert dropping.eval().position(x).grad_fn.name() == "_RecomputedMLPBackward"

    tangent = torch.randn_like(x)
    value, jvp = torch.func.jvp(mlp.position, (x.detach(),), (tangent,))
    reference = torch.autograd.functional.jvp(mlp.position, x.detach(), tangent)
    torch.testing.assert_close(value, reference[0])
    torch.testing.assert_close(jvp, reference[1])

    with torch.no_grad():
        assert mlp.position(x).grad_fn is None


def test_results_do_not_depend_on_the_calls_between():
    """The recomputed MLP and Full Wave's joint MLP take the same kept scratch buffers: a forward pass, other MLPs'
    forward and backward passes (other shapes, another dtype), then the backward pass still gives autograd's bits."""
    torch.manual_seed(6)
    mlp = JointMLP(6, 20).double()
    x = torch.randn(3, 7, 6, dtype=torch.float64, requires_grad=True)
    out = mlp.position(x)
    assert out.grad_fn.name() == "_RecomputedMLPBackward"
    for dim, hidden, dtype in ((6, 20, torch.float64), (9, 40, torch.float64), (6, 20, torch.float32)):
        other = JointMLP(dim, hidden).to(dtype)
        a, b = other(torch.randn(5, 4, dim, dtype=dtype), torch.randn(5, 4, dim, dtype=dtype))
        (a.sum() + b.sum()).backward()
        other.position(torch.randn(2, 8, dim, dtype=dtype, requires_grad=True)).sum().backward()
    fused = torch.autograd.grad(out.square().sum(), [x, *mlp.parameters()])
    _, plain = _value_and_grads(mlp, x, LOSSES["square"], module_path=True)
    for a, b in zip(fused, plain, strict=True):
        assert torch.equal(a, b)


def test_full_waves_backward_keeps_four_hidden_sized_buffers():
    """The joint MLP's backward pass: the hidden pair (2M × H, then the pre-activations' gradient), φ'(p_x) and
    g_v ⊙ p_v (M × H each), and the stacked output gradient (2M × D); the recomputed MLP adds nothing to them."""
    mlp_module.release_workspace()
    tokens, dim, hidden = 5 * 7, 6, 24
    joint = JointMLP(dim, hidden).double()
    x = torch.randn(5, 7, dim, dtype=torch.float64, requires_grad=True)
    v = torch.randn(5, 7, dim, dtype=torch.float64, requires_grad=True)
    a, b = joint(x, v)
    (a.square().sum() + b.square().sum()).backward()
    joint.position(x).square().sum().backward()
    assert mlp_module.release_workspace() == 8 * (4 * tokens * hidden + 2 * tokens * dim)


def test_an_activation_without_autograds_kernel_uses_its_prime_times():
    """An :class:`Activation` built with the six fields it had before ``grad`` recomputes through ``prime_times``."""
    gelu = ACTIVATIONS["gelu"]
    six = Activation(*gelu[:6])
    assert six.grad is None and six.grad_kernel() is six.prime_times
    torch.manual_seed(7)
    mlp = JointMLP(8, 32).double()
    mlp.act = six
    x = torch.randn(4, 5, 8, dtype=torch.float64, requires_grad=True)
    fused_out, fused = _value_and_grads(mlp, x, LOSSES["square"], module_path=False)
    assert fused_out.grad_fn.name() == "_RecomputedMLPBackward"
    _, plain = _value_and_grads(mlp, x, LOSSES["square"], module_path=True)
    for a, b in zip(fused, plain, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-14, atol=1e-14)  # gelu_backward both: the same kernel here


LAYOUTS = ["transposed", "strided", "matrix", "transposed_matrix", "column_major_batch", "transposed_weights"]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_inputs_of_any_layout_get_autograds_bits(layout):
    """Bits equal by construction, on any CPU: the backward pass makes the products autograd's ``mm`` backward makes,
    in the layouts it picks (a column-major input's gradient, and a non-contiguous weight's, computed transposed;
    the BLAS kernel, and so the last bits, depend on that layout)."""
    torch.manual_seed(8)
    mlp = JointMLP(8, 32)
    if layout == "transposed_weights":  # stored column by column: autograd computes their gradients transposed
        mlp.fc1.weight = torch.nn.Parameter(mlp.fc1.weight.detach().t().contiguous().t())
        mlp.fc2.weight = torch.nn.Parameter(mlp.fc2.weight.detach().t().contiguous().t())
    x = {
        "transposed": lambda: torch.randn(5, 4, 8).transpose(0, 1),
        "strided": lambda: torch.randn(4, 5, 16)[..., ::2],
        "matrix": lambda: torch.randn(3, 8),
        "transposed_matrix": lambda: torch.randn(8, 20).t(),
        "column_major_batch": lambda: torch.randn(1, 8, 20).transpose(1, 2),  # folds to a column-major matrix view
        "transposed_weights": lambda: torch.randn(4, 5, 8),
    }[layout]().requires_grad_()
    fused_out, fused = _value_and_grads(mlp, x, LOSSES["square"], module_path=False)
    assert fused_out.grad_fn.name() == "_RecomputedMLPBackward"
    plain_out, plain = _value_and_grads(mlp, x, LOSSES["square"], module_path=True)
    assert torch.equal(fused_out, plain_out)
    for a, b in zip(fused, plain, strict=True):
        assert torch.equal(a, b)


def test_parametrized_or_hooked_weights_take_the_module_path():
    """A parametrization (its class is no longer ``nn.Linear``) or a pre-hook (old-style spectral norm) recomputes the
    weight at each call: the fused Function, which reads ``weight`` once, steps aside for the module."""
    torch.manual_seed(9)
    x = torch.randn(3, 8, requires_grad=True)
    parametrized = JointMLP(8, 16)
    torch.nn.utils.parametrizations.weight_norm(parametrized.fc1)
    out = parametrized.position(x)
    assert out.grad_fn.name() != "_RecomputedMLPBackward"
    out.sum().backward()
    assert parametrized.fc1.parametrizations.weight.original0.grad is not None
    hooked = JointMLP(8, 16)
    torch.nn.utils.spectral_norm(hooked.fc2)
    assert hooked.position(x).grad_fn.name() != "_RecomputedMLPBackward"


def test_a_retained_graph_gives_the_same_gradients_twice_and_an_edited_input_is_refused():
    """The backward pass reads only what the forward saved (the scratch buffers are written again each time), so a
    retained graph differentiates again to the same bits; an input changed in place after the forward pass is caught
    by autograd's version check, as on the module path."""
    torch.manual_seed(10)
    mlp = JointMLP(8, 32)
    x = torch.randn(4, 5, 8, requires_grad=True)
    out = mlp.position(x)
    assert out.grad_fn.name() == "_RecomputedMLPBackward"
    first = torch.autograd.grad(out.square().sum(), [x, *mlp.parameters()], retain_graph=True)
    mlp.position(torch.randn(6, 3, 8, requires_grad=True)).sum().backward()  # another call takes the buffers between
    second = torch.autograd.grad(out.square().sum(), [x, *mlp.parameters()])
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a, b)
    y = torch.randn(4, 5, 8).requires_grad_()
    h = y * 1.0
    out = mlp.position(h)
    h.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()
