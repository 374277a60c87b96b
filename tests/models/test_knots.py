"""Weights that are a function of depth-time (``knots=K``) and a model stepped at other resolutions: the knots'
interpolation, what ``K = 1`` and ``K = depth`` are, refinement and coarsening of a model built here, and what is
refused."""

import pytest
import torch
from torch import nn

import odeformer
from odeformer.atlas import check_resolution, refinement, resampled
from odeformer.knots import SNAP, KnotField, knot_uses


class Affine(nn.Module):
    """``f(t, x) = w x + b``: a field whose value at interpolated weights is known in closed form."""

    def __init__(self, w: float, b: float):
        super().__init__()
        self.w = nn.Parameter(torch.tensor(w, dtype=torch.float64))
        self.b = nn.Parameter(torch.tensor(b, dtype=torch.float64))

    def forward(self, t, x):
        return self.w * x + self.b

    def joint(self, x, v):
        return self.w * x + self.b, self.w * v


def _field():
    return KnotField([Affine(1.0, 0.0), Affine(3.0, 2.0), Affine(-1.0, 4.0)], time=3.0)  # knots at t = 0, 1, 2


def test_the_weights_are_piecewise_linear_in_time_and_constant_after_the_last_knot():
    field, x = _field(), torch.tensor(2.0, dtype=torch.float64)
    expected = {0.0: (1, 0), 0.25: (1.5, 0.5), 1.0: (3, 2), 1.5: (1, 3), 2.0: (-1, 4), 2.7: (-1, 4), 3.0: (-1, 4)}
    for t, (w, b) in expected.items():
        assert float(field(t, x)) == pytest.approx(w * 2 + b, abs=1e-12), t
    assert field.mixture(0.5) == [(0, 0.5), (1, 0.5)] and field.mixture(2.5) == [(2, 1.0)]
    assert field.mixture(1.0 + 1e-12) == [(1, 1.0)]  # a time summed from steps lands on a knot only to rounding
    assert field.mixture(1.0 + 10 * SNAP * 1.5) != [(1, 1.0)]


def test_between_knots_the_gradient_reaches_both_and_the_chain_rule_is_the_jacobians():
    field = _field()
    x = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    field(0.25, x).backward()
    grads = [(float(k.w.grad or 0), float(k.b.grad or 0)) for k in field.knots]
    assert grads[0] == pytest.approx((0.75 * 2, 0.75)) and grads[1] == pytest.approx((0.25 * 2, 0.25))
    assert grads[2] == (0.0, 0.0)
    v = torch.tensor(0.7, dtype=torch.float64)
    value, tangent = field.joint_at(0.25, x.detach(), v)
    _, expected = torch.func.jvp(lambda z: field(0.25, z), (x.detach(),), (v,))
    assert float(tangent) == pytest.approx(float(expected), abs=1e-12) and float(value) == pytest.approx(1.5 * 2 + 0.5)
    copy = field.at(0.25)  # a detached copy at t = 0.25, for analysis
    assert (float(copy.w), float(copy.b)) == pytest.approx((1.5, 0.5)) and copy is not field.knots[0]


class Normed(nn.Module):
    """``f(t, x) = W LayerNorm(x)``, with no chain rule of its own: the knots carry a velocity by forward-mode AD."""

    def __init__(self, seed: int):
        super().__init__()
        self.norm = nn.LayerNorm(3).double()
        g = torch.Generator().manual_seed(seed)
        self.weight = nn.Parameter(torch.randn(3, 3, generator=g, dtype=torch.float64))

    def forward(self, t, x):
        return self.norm(x) @ self.weight.T


def test_the_velocity_of_knots_without_a_chain_rule_has_autograds_derivatives():
    """Between knots whose modules hold an ``nn.LayerNorm`` and no ``joint``: the gradient of the Jacobian-vector
    product with respect to the state equals difference quotients (PyTorch's JVP of its fused LayerNorm has wrong
    derivatives; the knots' fallback runs LayerNorm written out)."""
    field = KnotField([Normed(1), Normed(2)], time=1.0)
    g = torch.Generator().manual_seed(0)
    x, v, r, d = (torch.randn(2, 3, generator=g, dtype=torch.float64) for _ in range(4))
    x.requires_grad_()
    (grad,) = torch.autograd.grad((r * field.joint_at(0.25, x, v)[1]).sum(), x)
    h = 1e-6
    with torch.no_grad():
        up, down = (field.joint_at(0.25, x + s * h * d, v)[1] for s in (1, -1))
    assert float((grad * d).sum()) == pytest.approx(float((r * (up - down)).sum()) / (2 * h), rel=1e-6, abs=1e-9)


def test_a_knots_uses_are_its_interpolation_weights_summed_over_the_steps():
    field = _field()
    assert knot_uses(field, [0.0, 0.5, 1.0, 1.5, 2.0, 2.5]) == [1.5, 2.0, 2.5]


@pytest.mark.parametrize("solver", ["diffusion", "full_wave", "light_wave", "leapfrog"])
def test_knots_at_every_layer_are_the_untied_model_for_a_scheme_that_evaluates_once_per_step(solver):
    """``K = depth``: the same initial weights as the untied model at the same seed (built knot by knot as layers
    are), and the same logits and gradients for a scheme evaluating its field at each step's start."""
    torch.manual_seed(0)
    untied = odeformer.ViT(depth=4, dim=16, heads=2, solver=solver).double()
    torch.manual_seed(0)
    knotted = odeformer.ViT(depth=4, dim=16, heads=2, solver=solver, knots=4).double()
    x = torch.randn(3, 1, 8, 8, dtype=torch.float64)
    a, b = untied(x), knotted(x)
    assert torch.equal(a, b)
    a.square().sum().backward()
    b.square().sum().backward()
    first = untied.backbone.layers[2].attention.qkv.weight.grad
    assert torch.equal(first, knotted.backbone.layers[0].attention.knots[2].qkv.weight.grad)


def test_one_knot_is_the_weight_tied_model():
    torch.manual_seed(0)
    tied = odeformer.ViT(depth=3, dim=16, heads=2, solver="rk4", tie_weights=True).double()
    torch.manual_seed(0)
    knotted = odeformer.ViT(depth=3, dim=16, heads=2, solver="rk4", knots=1).double()
    x = torch.randn(2, 1, 8, 8, dtype=torch.float64)
    assert torch.equal(tied(x), knotted(x))


def test_every_knot_learns_and_is_an_ordinary_parameter():
    torch.manual_seed(0)
    model = odeformer.CausalLM(vocab_size=11, max_len=8, depth=6, dim=16, heads=2, solver="velocity_verlet", knots=3)
    model(torch.randint(0, 11, (2, 8))).square().mean().backward()
    names = [name for name, _ in model.named_parameters()]
    assert any(name.startswith("backbone.layers.0.attention.knots.2.") for name in names)
    assert all(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in model.parameters() if p.dim() > 1)
    again = odeformer.CausalLM(vocab_size=11, max_len=8, depth=6, dim=16, heads=2, solver="velocity_verlet", knots=3)
    again.load_state_dict(model.state_dict())  # checkpoints keep the knots


@pytest.mark.parametrize(
    "options, message",
    [
        ({"knots": 5}, r"knots must be a whole number from 1 to depth \(4\), got 5"),
        ({"knots": 0}, "knots must be a whole number from 1 to depth"),
        ({"knots": 2, "tie_weights": True}, "knots make the weights a function of time; tie_weights"),
        ({"knots": 2, "norm": "post"}, "a map after each sublayer .* has no time"),
        ({"solver": "dopri5", "knots": 2}, "continuous-depth solver is already one flow"),
    ],
)
def test_what_knots_refuse_is_one_line(options, message):
    with pytest.raises(ValueError, match=message) as info:
        odeformer.ViT(depth=4, dim=16, heads=2, **{"solver": "full_wave", **options})
    assert "\n" not in str(info.value)


def _smooth(model):
    with torch.no_grad():
        model.cls_token.normal_()  # a [CLS] token of the patches' size: LayerNorm is smooth there, not near zero
    return model


@pytest.mark.parametrize(
    "solver, knots",
    [("rk4", 2), ("rk4", 3), ("heun", 3), (odeformer.solver("velocity_verlet", splitting="strang"), 3),
     ("diffusion", 3), ("full_wave", 2)],
)  # fmt: skip
def test_a_knot_model_refined_converges_to_its_ode_at_the_layers_order(solver, knots):
    """Refined ``k`` times with the weights at each step's own time, a knot model converges to its ODE
    ``x' = F(θ(t), x)`` at its layer's order where the knots sit on step boundaries (2 knots over 4 layers: the
    weights are linear within every step), and at least at ``min(order, 2)`` where a step straddles a knot (3 knots
    over 4 layers: the weights' kink there bounds a straddling step's local error by ``dt²``, for a fixed number of
    steps; how small that term is depends on where in the step the kink falls)."""
    torch.manual_seed(0)
    model = _smooth(odeformer.ViT(depth=4, dim=16, heads=2, solver=solver, knots=knots, dt=0.2).double().eval())
    order = model.backbone.layers[0].claims().order
    images = torch.randn(4, 1, 8, 8, dtype=torch.float64)
    observed = refinement(model, (images,), parts=(2, 4, 8, 16))["observed_order"]
    if 4 % knots == 0:
        assert abs(observed - order) < 0.35, (order, observed)
    else:
        assert min(order, 2) - 0.35 < observed < order + 0.35, (order, observed)


def test_coarsening_takes_every_other_layer_over_their_span():
    """``k = 1/2``: half the steps, each over two layers' span, with the fields at each step's own time: on a model
    of one knot (weights constant in time) it is the same model at depth 2 and step 2 dt."""
    torch.manual_seed(0)
    model = odeformer.ViT(depth=4, dim=16, heads=2, solver="full_wave", knots=1).double().eval()
    torch.manual_seed(0)
    half = odeformer.ViT(depth=2, dim=16, heads=2, solver="full_wave", knots=1, dt=1.0).double().eval()
    images = torch.randn(2, 1, 8, 8, dtype=torch.float64)
    with torch.no_grad(), resampled(model.backbone, 0.5):
        coarse = model(images)
    assert model.backbone.resolution == 1
    torch.testing.assert_close(coarse, half(images), rtol=1e-12, atol=1e-12)
    found = refinement(model, (images,), parts=(0.5, 2))
    assert [row["k"] for row in found["refinement"]] == [0.5, 1, 2]


@pytest.mark.parametrize(
    "k, message",
    [
        (3.5, "whole number"),
        (0.3, "1/m with m dividing"),
        (0.125, r"the depth \(4\)"),
        (0, "positive"),
        (True, "positive"),
    ],
)
def test_a_resolution_is_a_whole_number_or_one_over_a_divisor_of_the_depth(k, message):
    with pytest.raises(ValueError, match=message):
        check_resolution(k, 4)
    assert check_resolution(0.25, 4) == 0.25 and check_resolution(3, 4) == 3


@pytest.mark.parametrize("solver", ["rk4", "full_wave", "light_wave"])
def test_the_adaptive_solution_of_the_layers_ode_is_what_refinement_converges_to(solver):
    """``atlas.solved``: torchdiffeq's dopri5 on each layer's limit field (the FFN and a scheme's own limit
    included), on the trained weights at each evaluation's time; the refined model's distance from it shrinks at the
    layer's order from k = 1 to 16 (as far as the reference's tolerance lets it be measured)."""
    from odeformer.atlas import solved

    torch.manual_seed(0)
    model = _smooth(odeformer.ViT(depth=4, dim=16, heads=2, solver=solver, knots=2, dt=0.2).double().eval())
    order = model.backbone.layers[0].claims().order
    images = torch.randn(3, 1, 8, 8, dtype=torch.float64)
    tight = {"rtol": 1e-11, "atol": 1e-13, "max_steps": 100000}
    found = refinement(model, (images,), parts=(2, 4, 8, 16), limit="dopri5", limit_options=tight)
    distances = [row["limit_change"] for row in found["refinement"]]
    assert distances == sorted(distances, reverse=True), distances
    assert distances[0] / distances[-1] > min(0.5 * 16**order, 1e4), (order, distances)
    assert found["limit"]["evaluations"] > 0 and found["limit"]["logit_change"] == pytest.approx(distances[-1])
    with torch.no_grad(), solved(model.backbone, **tight) as counted:
        again = model(images)
    assert counted["evaluations"] > 0 and model.backbone.integrator is None
    assert float((again - model(images)).norm() / again.norm()) == pytest.approx(distances[0], rel=1e-3)


def test_a_stiff_flow_is_one_line_and_the_verdict_says_what_refinement_found():
    from odeformer.atlas import StiffFlow, solved, verdict

    torch.manual_seed(0)
    model = odeformer.ViT(depth=2, dim=16, heads=2, solver="diffusion", knots=1).double().eval()
    with pytest.raises(StiffFlow, match="dopri5 needed more than 3 steps"), solved(model.backbone, max_steps=3):
        model(torch.randn(1, 1, 8, 8, dtype=torch.float64))
    rows = [{"k": 1, "metric": 0.95}, {"k": 2, "metric": 0.949}, {"k": 4, "metric": 0.948}]
    assert verdict({"refinement": rows, "observed_order": 1.9}, 2).startswith("It behaves as an ODE: refined")
    drifting = [{"k": 1, "metric": 0.97}, {"k": 2, "metric": 0.94}, {"k": 4, "metric": 0.92}]
    assert "is not yet its ODE at its own step" in verdict({"refinement": drifting, "observed_order": 1.0}, 1)
    assert verdict({"refinement": rows, "observed_order": 0.2}, 4).startswith("It does not behave as an ODE")
    assert "no small-step limit" in verdict({"refinement": rows, "observed_order": 0.0}, 0)


def test_generation_and_reversible_backprop_work_with_knots_and_the_hugging_face_bridge_refuses_them():
    """A generated token's cache steps the knot fields at each evaluation's time (the same tokens as recomputing the
    sequence); the reversible solver rebuilds states through them to the stored path's gradients; ``from_hf`` copies
    one weight set per layer and refuses knots in one line."""
    torch.manual_seed(0)
    lm = odeformer.CausalLM(vocab_size=11, max_len=16, depth=4, dim=16, heads=2, solver="velocity_verlet", knots=2)
    lm = lm.double().eval()
    prompt = torch.randint(0, 11, (1, 5))
    cached, logits = lm.generate(prompt, 4, temperature=0.0, return_logits=True)
    again, recomputed = lm.generate(prompt, 4, temperature=0.0, cache=False, return_logits=True)
    assert torch.equal(cached, again)
    torch.testing.assert_close(logits, recomputed, rtol=1e-10, atol=1e-10)
    model = odeformer.ViT(depth=4, dim=16, heads=2, solver="reversible", knots=2).double()
    images = torch.randn(2, 1, 8, 8, dtype=torch.float64)
    model(images).square().sum().backward()
    rebuilt = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model.backbone.reversible = False  # the stored path
    model(images).square().sum().backward()
    for a, b in zip(rebuilt, (p.grad for p in model.parameters())):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)
    transformers = pytest.importorskip("transformers")
    gpt = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=11))
    with pytest.raises(ValueError, match="from_hf copies one set of weights per layer at its own step; knots"):
        odeformer.from_hf(gpt, "full_wave", knots=2)


def test_the_per_layer_measures_read_a_knot_field_at_each_layers_time():
    """The spectral gap of a layer's attention is read with the weights at the layer's start: for ``K = depth`` the
    untied model's, layer by layer."""
    from odeformer.diagnostics import layer_measures

    torch.manual_seed(0)
    untied = odeformer.ViT(depth=3, dim=16, heads=2, solver="full_wave").double().eval()
    torch.manual_seed(0)
    knotted = odeformer.ViT(depth=3, dim=16, heads=2, solver="full_wave", knots=3).double().eval()
    images = torch.randn(2, 1, 8, 8, dtype=torch.float64)
    with torch.no_grad():
        a, b = layer_measures(untied, images, drop_first=True), layer_measures(knotted, images, drop_first=True)
    assert a["spectral_gap"] == pytest.approx(b["spectral_gap"], abs=1e-12) and a["cosine"] == b["cosine"]
