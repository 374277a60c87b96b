"""Every preset on every task model; reductions to a hand-written transformer; causality; equivariance; errors."""

import math

import pytest
import torch
import torch.nn.functional as F

import odeformer
import solvers
from odeformer import CausalLM, MaskedLM, NodeClassifier, ViT
from solvers import PhaseState

NAMES = sorted(odeformer.solver_names("discrete"))
TASKS = ["vit", "causal_lm", "masked_lm", "node_classifier"]


def build(task, solver, **kw):
    """A small model of ``task`` and a function computing a scalar loss that touches every parameter."""
    torch.manual_seed(0)
    if task == "vit":
        model = ViT(image_size=8, patch_size=4, depth=3, dim=16, heads=2, solver=solver, **kw)
        images = torch.randn(3, 1, 8, 8)
        return model, lambda: model(images).logsumexp(-1).sum(), (images,)
    if task == "causal_lm":
        model = CausalLM(vocab_size=11, max_len=6, depth=3, dim=16, heads=2, solver=solver, **kw)
        tokens = torch.randint(0, 11, (2, 6))
        return model, lambda: model(tokens).logsumexp(-1).sum(), (tokens,)
    if task == "masked_lm":
        model = MaskedLM(vocab_size=11, max_len=6, depth=3, dim=16, heads=2, solver=solver, num_classes=3, **kw)
        tokens = torch.randint(1, 11, (2, 6))
        tokens[1, 4:] = 0  # padding
        return model, lambda: model(tokens).logsumexp(-1).sum() + model.classify(tokens).logsumexp(-1).sum(), (tokens,)
    model = NodeClassifier(5, 3, depth=3, dim=8, heads=2, solver=solver, **{"dt": None, "dropout": 0.0, **kw})
    features, edges = torch.randn(9, 5), torch.randint(0, 9, (2, 20))
    return model, lambda: model(features, edges).logsumexp(-1).sum(), (features, edges)


# Parameters whose gradient is structurally zero: the first layer's momentum/damping acts on a zero velocity (v0 = 0,
# x_{-1} = x0), so nothing depends on it yet.
STRUCTURAL_ZEROS = {
    "light_wave": "backbone.layers.0.block_stepper.stepper.",
    "damped": "backbone.layers.0.block_stepper.stepper.",
}


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("solver", NAMES)
def test_every_preset_on_every_task(task, solver):
    model, loss_fn, _ = build(task, solver)
    loss = loss_fn()
    assert torch.isfinite(loss)
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        if solver in STRUCTURAL_ZEROS and name.startswith(STRUCTURAL_ZEROS[solver]):
            assert torch.all(p.grad == 0), name
        else:
            assert p.grad.abs().sum() > 0, f"{name} gets no gradient under {solver}"


@pytest.mark.parametrize("solver", ["light_wave", "damped", "mix"])
def test_checkpoints_naming_the_block_stepper_dynamics_still_load(solver):
    """A layer's block stepper was stored under ``dynamics``: such a state dict loads strictly, each scheme
    parameter into its place, and a model saved now names it ``block_stepper``."""
    torch.manual_seed(0)
    saved = CausalLM(vocab_size=11, max_len=6, depth=2, dim=8, heads=2, solver=solver)
    with torch.no_grad():
        for name, p in saved.named_parameters():
            if ".block_stepper." in name:
                p.add_(torch.randn_like(p))  # moved away from the fresh model's values
    state = saved.state_dict()
    scheme_keys = [k for k in state if ".block_stepper." in k]
    assert scheme_keys and not any(".dynamics." in k for k in state)
    old = {k.replace(".block_stepper.", ".dynamics."): v for k, v in state.items()}
    fresh = CausalLM(vocab_size=11, max_len=6, depth=2, dim=8, heads=2, solver=solver)
    fresh.load_state_dict(old)  # strict: nothing missing, nothing unexpected
    for key, value in fresh.state_dict().items():
        torch.testing.assert_close(value, state[key], rtol=0, atol=0)


@pytest.mark.parametrize("solver", NAMES)
def test_a_whole_model_pickles_and_copies(solver):
    """``torch.save(model)`` (the whole module, not only its weights) and ``copy.deepcopy`` give the same model: each
    module of the same class, with the same claims, and the same logits."""
    import copy
    import io

    torch.manual_seed(0)
    model = CausalLM(vocab_size=11, max_len=6, depth=2, dim=8, heads=2, solver=solver).double().eval()
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    tokens = torch.randint(0, 11, (2, 6))
    for other in (torch.load(buffer, weights_only=False), copy.deepcopy(model)):
        for (name, a), (_, b) in zip(model.named_modules(), other.named_modules(), strict=True):
            assert type(a) is type(b), name
        for a, b in zip(model.backbone.layers, other.backbone.layers, strict=True):
            assert a.claims() == b.claims()
        torch.testing.assert_close(other(tokens), model(tokens), rtol=0, atol=0)


def _reference_pre_ln(model: CausalLM, tokens):
    """A hand-written nanoGPT-style pre-LN transformer reading the model's weights."""
    x = model.embed.tokens(tokens) + model.embed.positions(torch.arange(tokens.shape[1]))
    B, T, D = x.shape
    for layer in model.backbone.layers:
        attn, ffn = layer.attention, layer.ffn
        h = F.layer_norm(x, (D,), attn.norm.weight, attn.norm.bias, attn.norm.eps)
        q, k, v = (h @ attn.qkv.weight.T + attn.qkv.bias).split(D, dim=-1)
        q, k, v = (z.view(B, T, attn.heads, D // attn.heads).transpose(1, 2) for z in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(D // attn.heads)
        scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
        y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, D)
        x = x + y @ attn.proj.weight.T + attn.proj.bias
        h = F.layer_norm(x, (D,), ffn.norm.weight, ffn.norm.bias, ffn.norm.eps)
        h = F.gelu(h @ ffn.mlp.fc1.weight.T + ffn.mlp.fc1.bias)
        x = x + h @ ffn.mlp.fc2.weight.T + ffn.mlp.fc2.bias
    x = F.layer_norm(x, (D,), model.backbone.norm.weight, model.backbone.norm.bias, model.backbone.norm.eps)
    return x @ model.head.weight.T


@pytest.mark.parametrize("impl", ["math", "sdpa"])
def test_diffusion_with_unit_step_is_the_pre_ln_transformer(impl):
    torch.manual_seed(0)
    model = CausalLM(vocab_size=13, max_len=10, depth=3, dim=16, heads=4, solver="diffusion", dt=1.0, impl=impl)
    model = model.double()
    tokens = torch.randint(0, 13, (2, 10))
    torch.testing.assert_close(model(tokens), _reference_pre_ln(model, tokens), rtol=1e-6, atol=1e-6)


def _same_weights(a, b):
    missing, unexpected = b.load_state_dict(a.state_dict(), strict=False)
    assert all(".stepper." in k for k in missing + unexpected), (missing, unexpected)


def _compare(task, a, b, inputs, tolerance):
    a, b = a.double(), b.double()
    inputs = tuple(i.double() if i.is_floating_point() else i for i in inputs)
    forward = "classify" if task == "masked_lm" else "forward"
    torch.testing.assert_close(getattr(a, forward)(*inputs), getattr(b, forward)(*inputs), rtol=0, atol=tolerance)


@pytest.mark.parametrize("task", TASKS)
def test_mix_at_gate_zero_is_diffusion(task):
    """Equal up to rounding (the FFN runs on the stacked (x, v) in the mix, on x alone in diffusion): the official
    mix's diffusion half is the pre-LN update x + Attn(LN x); on the graph model it is DIFFormer's h + dt a(h)."""
    mixed, _, inputs = build(task, odeformer.as_solver("mix").with_options(theta0=-math.inf))
    diffusion = "diffusion"
    if task == "node_classifier":  # the graph model's diffusion is laplacian; compare at the mix's step
        diffusion = odeformer.Solver("Euler on the laplacian form", solvers.Euler, "laplacian", 0.5)
    plain, _, _ = build(task, diffusion)
    _same_weights(mixed, plain)
    _compare(task, mixed, plain, inputs, 1e-12)


@pytest.mark.parametrize("task", TASKS)
def test_light_wave_at_zero_momentum_is_diffusion(task):
    heavy, _, inputs = build(task, odeformer.as_solver("light_wave").with_options(theta0=-math.inf))
    plain, _, _ = build(task, "diffusion")
    _same_weights(heavy, plain)
    _compare(task, heavy, plain, inputs, 0.0)


@pytest.mark.parametrize("solver", NAMES)
def test_causal_lm_never_looks_ahead(solver):
    torch.manual_seed(0)
    model = CausalLM(vocab_size=11, max_len=8, depth=3, dim=16, heads=2, solver=solver).double()
    tokens = torch.randint(0, 11, (2, 8))
    base = model(tokens)
    for k in range(8):
        changed = tokens.clone()
        changed[:, k] = (changed[:, k] + 1) % 11
        torch.testing.assert_close(model(changed)[:, :k], base[:, :k], rtol=0, atol=0)


@pytest.mark.parametrize("solver", ["diffusion", "full_wave", "light_wave", "mix", "rk4"])
def test_encoder_is_permutation_equivariant(solver):
    torch.manual_seed(0)
    backbone = odeformer.transformer(depth=3, dim=16, heads=2, solver=solver).double()
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    perm = torch.randperm(7)
    torch.testing.assert_close(backbone(x[:, perm]), backbone(x)[:, perm], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("attention", ["simple", "softmax", "graph_softmax"])
@pytest.mark.parametrize("solver", ["diffusion", "full_wave", "light_wave"])
def test_node_classifier_is_permutation_equivariant(attention, solver):
    torch.manual_seed(0)
    model = NodeClassifier(5, 3, depth=3, dim=8, heads=2, solver=solver, attention=attention, dropout=0.0).double()
    features, edges = torch.randn(9, 5, dtype=torch.float64), torch.randint(0, 9, (2, 20))
    perm = torch.randperm(9)
    inverse = torch.empty_like(perm)
    inverse[perm] = torch.arange(9)
    out = model(features[perm], inverse[edges])
    torch.testing.assert_close(out, model(features, edges)[perm], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("solver", NAMES)
def test_trajectory_records_every_layer(solver):
    model, _, inputs = build("vit", solver)
    states = model.trajectory(*inputs)
    assert len(states) == 4
    second = odeformer.as_solver(solver).stepper.second_order
    assert all(isinstance(s, PhaseState) == (second and i > 0) for i, s in enumerate(states))
    if second:
        assert states[1].v.abs().sum() > 0


def test_schedules_and_callables():
    schedule = ["diffusion", "diffusion", "full_wave", "full_wave"]
    model = ViT(depth=4, dim=16, heads=2, solver=schedule)
    states = model.trajectory(torch.randn(2, 1, 8, 8))
    assert [type(s).__name__ for s in states] == ["Tensor", "Tensor", "Tensor", "PhaseState", "PhaseState"]
    assert [layer.dt for layer in model.backbone.layers] == [1.0, 1.0, 0.5, 0.5]
    same = ViT(depth=4, dim=16, heads=2, solver=lambda i: "diffusion" if i < 2 else "full_wave")
    assert [type(layer.stepper) for layer in same.backbone.layers] == [
        type(layer.stepper) for layer in model.backbone.layers
    ]


def test_strang_splitting_differs_from_lie_and_both_run():
    torch.manual_seed(0)
    lie = ViT(depth=2, dim=16, heads=2, solver="full_wave")
    strang = ViT(depth=2, dim=16, heads=2, solver=odeformer.registry.solver("full_wave", splitting="strang"))
    strang.load_state_dict(lie.state_dict())
    images = torch.randn(2, 1, 8, 8)
    assert not torch.allclose(lie(images), strang(images))


def test_per_layer_parameters_are_separate():
    model = ViT(depth=3, dim=16, heads=2, solver="mix")
    thetas = [layer.stepper.theta for layer in model.backbone.layers]
    assert len({id(t) for t in thetas}) == 3 and all(t.shape == (16,) for t in thetas)
    assert float(thetas[0][0].detach()) == -8.0


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: ViT(dim=10, heads=4), "dim must be divisible by heads: got dim=10, heads=4"),
        (lambda: ViT(depth=0), "depth must be a positive int, got 0"),
        (
            lambda: ViT(solver="wave"),
            r"unknown solver 'wave' \(did you mean 'full_wave'\?\); choose one of diffusion, full_wave",
        ),
        (lambda: ViT(solver=["diffusion"] * 2, depth=3), "one entry per layer: got 2 for depth 3"),
        (
            lambda: ViT(solver=solvers.Heun()),
            r"a Heun instance cannot be a model's solver .*: give the class, solver=Heun, or odeformer.solver\(Heun",
        ),
        (lambda: ViT(solver=["diffusion", solvers.RK4()], depth=2), "a RK4 instance cannot be a model's solver"),
        (lambda: ViT(solver=lambda i: solvers.Heun(), depth=2), "a Heun instance cannot be a model's solver"),
        (lambda: ViT(dt=-0.5), "dt must be positive and finite"),
        (lambda: ViT(image_size=9, patch_size=2), "image_size must be divisible by patch_size"),
        (lambda: odeformer.solver("full_wave", splitting="yoshida"), "splitting must be one of lie, strang"),
        (lambda: odeformer.solver("full_wave", dt=0.0), "dt must be positive and finite"),
        (
            lambda: odeformer.solver("wave"),
            r"unknown solver 'wave' \(did you mean 'full_wave'\?\); choose one of diffusion",
        ),
        (lambda: CausalLM(11, 8, solver=odeformer.as_solver("mix").with_options(thetaa=1.0)), "bad options"),
        (lambda: NodeClassifier(5, 3, dim=10, heads=3), "dim must be divisible by heads"),
        (lambda: NodeClassifier(5, 3, attention="gat"), "attention must be 'simple', 'softmax' or 'graph_softmax'"),
    ],
)
def test_bad_construction_is_one_clear_sentence(make, message):
    with pytest.raises(ValueError, match=message) as info:
        make()
    assert "\n" not in str(info.value)


def test_bad_inputs_are_one_clear_sentence():
    with pytest.raises(ValueError, match=r"ViT expects images of shape \(B, 1, 8, 8\), got \(2, 3, 8, 8\)"):
        ViT()(torch.zeros(2, 3, 8, 8))
    lm = CausalLM(vocab_size=11, max_len=8)
    with pytest.raises(ValueError, match="sequence length 9 exceeds max_len=8"):
        lm(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(RuntimeError, match=r"token ids must lie in \[0, 11\)"):  # training: on the device
        lm(torch.full((1, 4), 11))
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 11\), got \[11, 11\]"):
        lm.eval()(torch.full((1, 4), 11))
    with pytest.raises(ValueError, match=r"integer tokens of shape \(B, T\)"):
        lm(torch.zeros(4))
    with pytest.raises(ValueError, match="needs a classification head"):
        MaskedLM(11, 8).classify(torch.ones(1, 4, dtype=torch.long))
    node = NodeClassifier(5, 3)
    with pytest.raises(ValueError, match=r"features of shape \(N, 5\)"):
        node(torch.zeros(4, 6), torch.zeros(2, 1, dtype=torch.long))
    with pytest.raises(ValueError, match=r"edge_index refers to nodes outside \[0, 4\)"):
        node(torch.zeros(4, 5), torch.tensor([[0], [7]]))


@pytest.mark.parametrize("impl", ["math", "sdpa"])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.float32, torch.float64])
def test_masked_lm_reads_a_0_1_padding_mask_as_hugging_faces_attention_mask(impl, dtype):
    """A 0/1 padding mask of an integer or floating dtype (1 = real token) gives exactly the bool mask's outputs."""
    torch.manual_seed(0)
    model = MaskedLM(11, 6, depth=2, dim=16, heads=2, num_classes=3, impl=impl).double()
    tokens = torch.randint(1, 11, (3, 6), generator=torch.Generator().manual_seed(0))  # no pad_id: the mask decides
    real = torch.arange(6) < torch.tensor([[6], [4], [2]])  # (B, T): padding at the end
    with torch.no_grad():
        for method in (model.encode, model, model.classify):
            assert torch.equal(method(tokens, real.to(dtype)), method(tokens, real))
            assert not torch.equal(method(tokens, real), method(tokens, torch.ones_like(real)))  # the mask matters


@pytest.mark.parametrize(
    "mask, found",
    [
        (torch.full((2, 4), 0.5), "torch.float32 values such as 0.5"),
        (torch.full((2, 4), -1.0, dtype=torch.float64), "torch.float64 values such as -1.0"),
        (torch.full((2, 4), float("nan")), "torch.float32 values such as nan"),
        (torch.full((2, 4), 2), "torch.int64 values such as 2"),
        (torch.ones(2, 4, dtype=torch.complex64), "dtype torch.complex64"),
    ],
)
def test_masked_lm_refuses_padding_masks_other_than_bool_or_0_1(mask, found):
    model = MaskedLM(11, 8, depth=1, num_classes=2)
    tokens = torch.ones(2, 4, dtype=torch.long)
    for method in (model.encode, model, model.classify):
        with pytest.raises(ValueError) as info:
            method(tokens, mask)
        message = str(info.value)
        assert "\n" not in message
        assert "padding_mask must be bool (True on real tokens) or 0/1 like Hugging Face's attention_mask" in message
        assert found in message


def test_masked_lm_gives_a_fully_padded_sequence_the_same_finite_output_under_math_and_sdpa():
    """No key to attend to: SDPA's attention output is zero, and impl="math" matches it (no NaN)."""
    torch.manual_seed(0)
    math_model = MaskedLM(11, 6, depth=2, dim=16, heads=2, num_classes=3, impl="math").double()
    sdpa_model = MaskedLM(11, 6, depth=2, dim=16, heads=2, num_classes=3, impl="sdpa").double()
    sdpa_model.load_state_dict(math_model.state_dict())
    tokens = torch.randint(1, 11, (2, 6), generator=torch.Generator().manual_seed(0))
    tokens[1] = 0  # every token is pad_id
    for method in ("encode", "classify"):
        ours, fused = getattr(math_model, method)(tokens), getattr(sdpa_model, method)(tokens)
        assert torch.isfinite(ours).all()
        torch.testing.assert_close(ours, fused, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_padding_leaves_a_sentences_features_and_class_as_they_are_under_every_preset(norm):
    """Pad tokens are keys to no one, and every scheme acts per token, so appending padding changes no real token's
    features and no pooled classification, for every preset (reversible has no post-LN form)."""
    g = torch.Generator().manual_seed(5)
    sentence = torch.randint(1, 11, (2, 7), generator=g)
    padded = torch.cat([sentence, torch.zeros(2, 9, dtype=torch.long)], dim=1)
    for name in odeformer.solver_names("discrete"):
        if name == "reversible" and norm == "post":
            continue
        torch.manual_seed(0)
        model = MaskedLM(11, 16, depth=3, dim=16, heads=2, solver=name, num_classes=3, norm=norm).double().eval()
        with torch.no_grad():
            torch.testing.assert_close(model.encode(padded)[:, :7], model.encode(sentence), rtol=1e-12, atol=1e-12)
            torch.testing.assert_close(model.classify(padded), model.classify(sentence), rtol=1e-12, atol=1e-12)
