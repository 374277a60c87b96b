"""The reversible preset's memory-free backward equals ordinary backpropagation; checkpointing changes nothing."""

import pytest
import torch

import odeformer
from odeformer import CausalLM, MaskedLM, NodeClassifier, ViT


def _models(solver, **kw):
    torch.manual_seed(0)
    tokens = torch.randint(1, 11, (2, 6))
    tokens[1, 4:] = 0
    return [
        (ViT(image_size=8, patch_size=4, depth=4, dim=16, heads=2, solver=solver, **kw), (torch.randn(3, 1, 8, 8),)),
        (CausalLM(11, 6, depth=4, dim=16, heads=2, solver=solver, **kw), (torch.randint(0, 11, (2, 6)),)),
        (MaskedLM(11, 6, depth=4, dim=16, heads=2, solver=solver, **kw), (tokens,)),
        (
            NodeClassifier(5, 3, depth=4, dim=8, heads=2, solver=solver, dt=None, dropout=0.0),
            (torch.randn(9, 5), torch.randint(0, 9, (2, 20))),
        ),
    ]


def _grads(model, inputs):
    inputs = tuple(i.double() if i.is_floating_point() else i for i in inputs)
    loss = model(*inputs).square().sum()
    return loss.detach(), torch.autograd.grad(loss, [p for p in model.parameters()])


@pytest.mark.parametrize(
    "index, tie",
    [(0, False), (1, False), (2, False), (3, False), (0, True), (1, True), (2, True)],  # NodeClassifier: no tying
)
def test_reversible_backward_equals_backpropagation(index, tie):
    model, inputs = _models("reversible", **({"tie_weights": True} if tie else {}))[index]
    model = model.double()
    assert model.backbone.reversible
    loss, reversible = _grads(model, inputs)
    model.backbone.reversible = False  # the plain loop over the same layers, stored activations
    plain_loss, plain = _grads(model, inputs)
    assert torch.equal(loss, plain_loss)
    for a, b in zip(reversible, plain):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-9)


def test_reversible_layers_invert():
    model, (images,) = _models("reversible")[0]
    model = model.double()
    states = model.trajectory(images.double())
    for layer, before, after in zip(model.backbone.layers[1:], states[1:], states[2:]):  # states[0]: no velocity
        rebuilt = layer.inverse(after)
        torch.testing.assert_close(rebuilt.x, before.x, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(rebuilt.v, before.v, rtol=1e-12, atol=1e-12)


def test_reversible_refuses_dropout_and_mixed_schedules():
    with pytest.raises(ValueError, match="reversible solver needs dropout=0"):
        ViT(depth=2, dim=16, heads=2, solver="reversible", dropout=0.1)
    with pytest.raises(ValueError, match="cannot mix the reversible solver"):
        ViT(depth=2, dim=16, heads=2, solver=["reversible", "full_wave"])


@pytest.mark.parametrize("solver", sorted(set(odeformer.solver_names("discrete")) - {"reversible"}))
def test_activation_checkpointing_changes_nothing(solver):
    model, inputs = _models(solver)[0]
    model = model.double()
    loss, stored = _grads(model, inputs)
    model.backbone.checkpoint = True
    loss_again, recomputed = _grads(model, inputs)
    assert torch.equal(loss, loss_again)
    for a, b in zip(stored, recomputed):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)


def _assert_functional_call_grads_are_the_substituted_weights(model, inputs):
    """Gradients of a loss through ``functional_call(model, other weights)`` equal those of the plain loop (stored
    states) with the same weights loaded into the module."""
    model = model.double()
    inputs = tuple(i.double() if i.is_floating_point() else i for i in inputs)
    g = torch.Generator().manual_seed(5)
    other = {
        n: p.detach() + 0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype) for n, p in model.named_parameters()
    }
    leaves = {n: t.clone().requires_grad_() for n, t in other.items()}
    loss = torch.func.functional_call(model, leaves, inputs).square().sum()
    got = torch.autograd.grad(loss, list(leaves.values()))
    with torch.no_grad():  # the reference: the same weights loaded into the module, the plain loop (stored states)
        for n, p in model.named_parameters():
            p.copy_(other[n])
    model.backbone.checkpoint = model.backbone.reversible = False
    plain_loss, expected = _grads(model, inputs)
    torch.testing.assert_close(loss.detach(), plain_loss, rtol=1e-12, atol=0)
    for name, a, b in zip(leaves, got, expected):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-9, msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.parametrize("solver", sorted(odeformer.solver_names("discrete")))
def test_checkpointed_and_rebuilt_backward_under_functional_call_use_the_substituted_weights(solver):
    """``torch.func.functional_call`` binds other weights only for the call; a backward pass that recomputes steps
    (activation checkpointing) or rebuilds them (the reversible preset) runs after it, and must step with those
    weights, not with the module's own (it did not: every layer weight got a wrong or no gradient)."""
    model, inputs = _models(solver)[2]  # MaskedLM: its attention reaches the field through a context wrapper
    model.backbone.checkpoint = solver != "reversible"
    _assert_functional_call_grads_are_the_substituted_weights(model, inputs)


@pytest.mark.parametrize("index", [0, 1, 3])
def test_reversible_backward_under_functional_call_uses_the_substituted_weights(index):
    """The same for the reversible preset of the other task models (ViT, CausalLM, NodeClassifier)."""
    _assert_functional_call_grads_are_the_substituted_weights(*_models("reversible")[index])


def test_transformer_accepts_checkpoint_option():
    assert odeformer.transformer(2, 16, 2, "diffusion", checkpoint=True).checkpoint


def test_integrate_reversible_binds_the_forward_buffers_and_parameters_again():
    """At the solvers level: a field module with a parameter and a buffer, both substituted by functional_call."""
    import solvers

    class Field(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.tensor([[0.3, -0.2], [0.1, 0.4]], dtype=torch.float64))
            self.register_buffer("scale", torch.tensor(1.0, dtype=torch.float64))

        def forward(self, t, x):
            return -self.scale * torch.tanh(x @ self.w)

    class Run(torch.nn.Module):
        def __init__(self, reversible):
            super().__init__()
            self.field, self.integrate = Field(), solvers.integrate_reversible if reversible else solvers.integrate

        def forward(self, x, v):
            y = self.integrate(solvers.VelocityVerlet(), [self.field] * 5, solvers.PhaseState(x, v), 0.3)
            return (y.x.square() + y.v).sum()

    x, v = torch.randn(3, 2, dtype=torch.float64), torch.randn(3, 2, dtype=torch.float64)
    bound = {
        "field.w": torch.tensor([[1.0, 0.5], [-0.7, 0.2]], dtype=torch.float64).requires_grad_(),
        "field.scale": torch.tensor(2.5, dtype=torch.float64),
    }
    grads = {}
    for reversible in (True, False):
        loss = torch.func.functional_call(Run(reversible), bound, (x, v))
        grads[reversible] = torch.autograd.grad(loss, bound["field.w"])[0]
    torch.testing.assert_close(grads[True], grads[False], rtol=1e-10, atol=1e-12)
