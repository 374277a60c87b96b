"""torch.func composes with every preset: jvp (inputs and parameters together), jacrev and jacfwd equal central
finite differences in float64; vmap over a batch equals the batched model and vmap over grad the per-sample
gradients; forward-mode AD (torch.autograd.forward_ad) equals torch.func.jvp.

Attention uses the ``math`` implementation; the default (``auto``) takes it by itself under a transform, and an
explicit ``sdpa`` (no forward-mode derivative in PyTorch) is a one-line error there. The presets come from
``odeformer.solver_names()``, so a new preset is covered without new test code.
"""

import pytest
import torch
from torch.func import functional_call

import odeformer

H = 1e-6  # central differences in float64: truncation ~H² and round-off ~1e-16 / H, both far below the tolerances


def _model(solver: str, ln_mode: str = "paper") -> torch.nn.Module:
    torch.manual_seed(0)
    model = odeformer.ViT(
        image_size=4, patch_size=2, depth=2, dim=8, heads=2, solver=solver, impl="math", ln_mode=ln_mode
    ).double()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # away from the zero / identity start, so that every term of the derivative is exercised
        for p in model.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return model


def _images(seed: int = 2, batch: int = 2) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, 1, 4, 4, generator=g, dtype=torch.float64)  # (B, C, H, W)


def _close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    torch.testing.assert_close(actual, expected, rtol=1e-7, atol=1e-8 * (1 + expected.abs().max().item()))


@pytest.mark.parametrize("ln_mode", ["paper", "exact"])
@pytest.mark.parametrize("solver", sorted(odeformer.solver_names("discrete")))
def test_jvp_in_inputs_and_parameters_is_the_central_difference(solver, ln_mode):
    model = _model(solver, ln_mode)
    params = {name: p.detach() for name, p in model.named_parameters()}
    g = torch.Generator().manual_seed(3)
    tangents = {name: torch.randn(p.shape, generator=g, dtype=p.dtype) for name, p in params.items()}
    x, dx = _images(), _images(4)

    def f(x, params):
        return functional_call(model, params, (x,))  # (B, classes)

    out, dout = torch.func.jvp(f, (x, params), (dx, tangents))

    def shifted(s):
        return f(x + s * dx, {name: p + s * tangents[name] for name, p in params.items()})

    with torch.no_grad():
        torch.testing.assert_close(out, model(x), rtol=1e-12, atol=1e-12)
        _close(dout, (shifted(H) - shifted(-H)) / (2 * H))


@pytest.mark.parametrize("solver", sorted(odeformer.solver_names("discrete")))
def test_jacrev_and_jacfwd_are_the_central_difference_jacobian(solver):
    model = _model(solver)
    x = _images(batch=1)  # one image: a batch would only add zero blocks to the Jacobian
    rev = torch.func.jacrev(model)(x)  # (B, classes, B, C, H, W)
    fwd = torch.func.jacfwd(model)(x)
    with torch.no_grad():
        columns = []
        for i in range(x.numel()):
            e = torch.zeros(x.numel(), dtype=x.dtype)
            e[i] = H
            e = e.view_as(x)
            columns.append((model(x + e) - model(x - e)) / (2 * H))
    fd = torch.stack(columns, -1).view(rev.shape)
    _close(rev, fd)
    _close(fwd, fd)


@pytest.mark.parametrize("solver", sorted(odeformer.solver_names("discrete")))
def test_vmap_over_a_batch_is_the_batched_model(solver):
    model = _model(solver)
    x = torch.randn(2, 2, 1, 4, 4, generator=torch.Generator().manual_seed(5), dtype=torch.float64)  # (V, B, C, H, W)
    with torch.no_grad():
        expected = torch.stack([model(xi) for xi in x])
    torch.testing.assert_close(torch.func.vmap(model)(x), expected, rtol=1e-12, atol=1e-12)
    # per-sample gradients: vmap over grad, against one backward pass per sample
    params = {name: p.detach() for name, p in model.named_parameters()}

    def loss(params, xi):
        return functional_call(model, params, (xi,)).square().sum()

    per_sample = torch.func.vmap(torch.func.grad(loss), in_dims=(None, 0))(params, x)
    for i, xi in enumerate(x):
        grads = torch.autograd.grad(model(xi).square().sum(), list(model.parameters()))
        for (name, batched), single in zip(per_sample.items(), grads):
            torch.testing.assert_close(batched[i], single, rtol=1e-10, atol=1e-12, msg=name)


OUTSIDE_FORWARD_AD: dict[str, str] = {}  # presets whose forward-mode AD fails in code outside odeformer/joint/


@pytest.mark.parametrize(
    "solver",
    [
        pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=OUTSIDE_FORWARD_AD[name]))
        if name in OUTSIDE_FORWARD_AD
        else name
        for name in sorted(odeformer.solver_names("discrete"))
    ],
)
def test_forward_mode_ad_is_torch_func_jvp(solver):
    model = _model(solver)
    x, dx = _images(), _images(4)
    _, expected = torch.func.jvp(model, (x,), (dx,))
    with torch.autograd.forward_ad.dual_level():
        tangent = torch.autograd.forward_ad.unpack_dual(model(torch.autograd.forward_ad.make_dual(x, dx))).tangent
    torch.testing.assert_close(tangent, expected, rtol=1e-12, atol=1e-12)


OUTSIDE_DOUBLE_BACKWARD: dict[str, str] = {}  # presets whose double backward is wrong outside odeformer/joint/


@pytest.mark.parametrize(
    "solver",
    [
        pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=OUTSIDE_DOUBLE_BACKWARD[name]))
        if name in OUTSIDE_DOUBLE_BACKWARD
        else name
        for name in sorted(odeformer.solver_names("discrete"))
    ],
)
def test_double_backward_is_torch_func_grad_of_grad(solver):
    """A gradient penalty ``∂/∂θ ‖∇_x L‖²`` by autograd with create_graph (the fused Functions' double backward)
    equals the same by torch.func.grad of torch.func.grad (the plain formulas)."""
    model = _model(solver, "exact")
    x = _images()
    params = {name: p.detach() for name, p in model.named_parameters()}

    def penalty(params):
        grad_x = torch.func.grad(lambda x: functional_call(model, params, (x,)).square().sum())(x)
        return grad_x.square().sum()

    expected = torch.func.grad(penalty)(params)
    leaf = x.clone().requires_grad_()
    (grad_x,) = torch.autograd.grad(model(leaf).square().sum(), leaf, create_graph=True)
    got = torch.autograd.grad(grad_x.square().sum(), list(model.parameters()), allow_unused=True)
    for (name, reference), value in zip(expected.items(), got):
        value = torch.zeros_like(reference) if value is None else value
        scale = 1 + reference.abs().max().item()
        torch.testing.assert_close(value, reference, rtol=1e-9, atol=1e-9 * scale, msg=name)


def test_the_default_attention_takes_forward_mode_ad_and_an_explicit_sdpa_says_it_cannot():
    """Built with the defaults (``impl="auto"``: the fused kernel), a model's jvp and forward-mode derivative are the
    central difference; asked for ``sdpa`` explicitly, both are one line saying what to use instead."""
    torch.manual_seed(0)
    default = odeformer.CausalLM(vocab_size=7, max_len=6, depth=2, dim=8, heads=2, solver="full_wave").double()
    embed = default.embed  # differentiate through the backbone, from the embedded tokens
    x = embed(torch.randint(0, 7, (2, 5)))
    dx = torch.randn_like(x)

    def run(model):
        return lambda h: model.backbone(h)

    out, tangent = torch.func.jvp(run(default), (x,), (dx,))
    central = (run(default)(x + H * dx) - run(default)(x - H * dx)) / (2 * H)
    _close(tangent, central)
    with torch.autograd.forward_ad.dual_level():
        dual = torch.autograd.forward_ad.make_dual(x, dx)
        _close(torch.autograd.forward_ad.unpack_dual(run(default)(dual)).tangent, tangent)
    explicit = odeformer.CausalLM(7, 6, depth=2, dim=8, heads=2, solver="full_wave", impl="sdpa").double()
    explicit.load_state_dict(default.state_dict())
    _close(run(explicit)(x), out)  # the same model (the fused kernel) outside a transform
    one_line = r"^AttentionField\(impl='sdpa'\) has no forward-mode derivative .*impl='auto'"
    with pytest.raises(RuntimeError, match=one_line):
        torch.func.jvp(run(explicit), (x,), (dx,))
