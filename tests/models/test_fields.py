"""Attention as a vector field: forms, masks, the two implementations, the linear-complexity kernel."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import odeformer
from odeformer.fields import AttentionField, FeedForward, SimpleAttentionField, graph_mask

seeds = st.integers(0, 2**31 - 1)


def _x(seed, B=2, N=7, D=16, dtype=torch.float32):
    return torch.randn(B, N, D, generator=torch.Generator().manual_seed(seed), dtype=dtype)


@pytest.mark.parametrize("mask", ["full", "causal"])
@given(seed=seeds, heads=st.sampled_from([1, 2, 4]), n=st.integers(1, 12))
def test_math_and_sdpa_agree(mask, seed, heads, n):
    torch.manual_seed(seed)
    field = AttentionField(16, heads, mask=mask, impl="math")
    fused = AttentionField(16, heads, mask=mask, impl="sdpa")
    fused.load_state_dict(field.state_dict())
    x = _x(seed, N=n)
    torch.testing.assert_close(field(0.0, x), fused(0.0, x), rtol=1e-5, atol=1e-5)


@given(seed=seeds)
def test_math_and_sdpa_agree_with_graph_and_padding_masks(seed):
    torch.manual_seed(seed)
    n = 9
    edges = torch.randint(0, n, (2, 12), generator=torch.Generator().manual_seed(seed))
    x = _x(seed, N=n)
    for mask_kind, attn_mask in [
        ("graph", graph_mask(edges, n)),
        ("full", torch.rand(2, n, generator=torch.Generator().manual_seed(seed)).argsort(-1)[:, None, None, :] < 6),
        ("causal", torch.ones(2, 1, 1, n, dtype=torch.bool)),
    ]:
        field = AttentionField(16, 4, mask=mask_kind, impl="math")
        fused = AttentionField(16, 4, mask=mask_kind, impl="sdpa")
        fused.load_state_dict(field.state_dict())
        torch.testing.assert_close(field(0.0, x, attn_mask), fused(0.0, x, attn_mask), rtol=1e-5, atol=1e-5)


def _nothing_to_attend_to(which, n):
    """A mask with query rows that are all False (a fully padded sequence; a node with no edge, not even to itself),
    and those rows, broadcastable to ``(B, heads, N)``."""
    if which == "padded":
        mask, empty = torch.ones(2, 1, 1, n, dtype=torch.bool), torch.zeros(2, 1, n, dtype=torch.bool)
        mask[0, ..., n - 2 :] = False
        mask[1], empty[1] = False, True
    else:
        mask, empty = torch.ones(n, n, dtype=torch.bool).triu(), torch.zeros(n, dtype=torch.bool)
        mask[2], empty[2] = False, True
    return mask, empty


@pytest.mark.parametrize("mask_kind", ["full", "causal"])
@pytest.mark.parametrize("which", ["padded", "lonely"])
def test_math_and_sdpa_agree_on_queries_with_nothing_to_attend_to(mask_kind, which):
    """A row with no allowed key gets zero weights from impl="math", as from SDPA: same values and gradients, no NaN."""
    n = 5
    attn_mask, empty = _nothing_to_attend_to(which, n)
    torch.manual_seed(0)
    field = AttentionField(8, 2, mask=mask_kind, impl="math").double()
    fused = AttentionField(8, 2, mask=mask_kind, impl="sdpa").double()
    fused.load_state_dict(field.state_dict())
    weight = _x(1, N=n, D=8, dtype=torch.float64)
    results = []
    for f in (field, fused):
        x = _x(0, N=n, D=8, dtype=torch.float64).requires_grad_()
        out = f(0.0, x, attn_mask)
        grads = torch.autograd.grad((out * weight).sum(), [x, *f.parameters()])
        assert torch.isfinite(out).all() and all(torch.isfinite(g).all() for g in grads)
        results.append((out, grads))
    (out, grads), (fused_out, fused_grads) = results
    torch.testing.assert_close(out, fused_out, rtol=1e-12, atol=1e-12)
    for g, fused_g in zip(grads, fused_grads):
        torch.testing.assert_close(g, fused_g, rtol=1e-10, atol=1e-12)
    A = field.weights(_x(0, N=n, D=8, dtype=torch.float64), attn_mask)  # (B, H, N, N)
    empty = empty.expand(A.shape[:-1])
    assert torch.all(A[empty] == 0)
    torch.testing.assert_close(A[~empty].sum(-1), torch.ones_like(A[~empty].sum(-1)), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("impl", ["math", "sdpa"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
def test_non_bool_attn_masks_are_refused(impl, dtype):
    """SDPA would add a floating mask to the scores; only a bool mask (True = may attend) is taken."""
    field = AttentionField(8, 2, impl=impl)
    with pytest.raises(ValueError, match=f"attn_mask must be bool \\(True where a query may attend\\), got {dtype}"):
        field(0.0, torch.zeros(2, 3, 8), torch.ones(2, 1, 1, 3, dtype=dtype))


def test_forms():
    torch.manual_seed(0)
    residual = AttentionField(16, 4, form="residual").double()
    laplacian = AttentionField(16, 4, form="laplacian").double()
    laplacian.load_state_dict(residual.state_dict())
    x = _x(0, dtype=torch.float64)
    assert torch.equal(laplacian(0.0, x), residual(0.0, x) - x)
    # Euler with dt = 1 on the residual form is the pre-LN sublayer
    torch.testing.assert_close(x + 1.0 * residual(0.0, x), x + residual.attend(x), rtol=0, atol=0)


def test_laplacian_form_is_minus_random_walk_laplacian():
    """Without LayerNorm and with W_v W_o = I, the laplacian form is exactly (A - I) X."""
    torch.manual_seed(0)
    field = AttentionField(8, 1, form="laplacian", impl="math", norm_layer=torch.nn.Identity).double()
    with torch.no_grad():
        field.qkv.weight[16:].copy_(torch.eye(8))
        field.qkv.bias[16:].zero_()
        field.proj.weight.copy_(torch.eye(8))
        field.proj.bias.zero_()
    x = _x(1, D=8, dtype=torch.float64)
    A = field.weights(x)[:, 0]  # (B, N, N)
    torch.testing.assert_close(field(0.0, x), A @ x - x, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(A.sum(-1), torch.ones_like(A.sum(-1)), rtol=1e-12, atol=1e-12)


def test_graph_mask_restricts_attention_to_edges():
    n = 6
    edges = torch.tensor([[0, 1, 2], [1, 2, 3]])
    mask = graph_mask(edges, n)
    assert mask.diagonal().all() and mask[0, 1] and mask[1, 0] and not mask[0, 3] and not mask[4, 5]
    field = AttentionField(16, 2, mask="graph", impl="math").double()
    x = _x(0, N=n, dtype=torch.float64)
    A = field.weights(x, mask)
    assert torch.all(A[..., ~mask] == 0)
    y = x.clone()
    y[:, 5] += 1.0  # node 5 is isolated: nothing else may change
    changed = (field(0.0, y, mask) - field(0.0, x, mask)).abs().amax(dim=(0, 2)) > 0
    assert changed.tolist() == [False, False, False, False, False, True]
    with pytest.raises(ValueError, match="mask='graph' needs the graph's attention mask"):
        field(0.0, x)


def test_causal_field_ignores_the_future():
    field = AttentionField(16, 4, mask="causal", impl="sdpa").double()
    x = _x(0, N=8, dtype=torch.float64)
    y = x.clone()
    y[:, 5:] = torch.randn_like(y[:, 5:])
    torch.testing.assert_close(field(0.0, x)[:, :5], field(0.0, y)[:, :5], rtol=0, atol=0)


@given(seed=seeds, heads=st.sampled_from([1, 2]), n=st.integers(1, 20))
def test_simple_attention_matches_its_dense_weights(seed, heads, n):
    torch.manual_seed(seed)
    field = SimpleAttentionField(16, heads, form="laplacian").double()
    x = _x(seed, N=n, dtype=torch.float64)
    A = field.weights(x)  # (B, H, N, N)
    assert torch.all(A >= 0)
    torch.testing.assert_close(A.sum(-1), torch.ones_like(A.sum(-1)))
    B, N, D = x.shape
    _, _, v = field.qkv(field.norm(x)).view(B, N, 3, heads, D // heads).permute(2, 0, 3, 1, 4).unbind(0)
    dense = field.proj((A @ v).transpose(1, 2).reshape(B, N, D)) - x
    torch.testing.assert_close(field(0.0, x), dense, rtol=1e-10, atol=1e-10)


def test_feedforward_joint_is_its_jvp():
    ffn = FeedForward(8, 16, ln_mode="exact").double()
    x, v = _x(0, D=8, dtype=torch.float64), _x(1, D=8, dtype=torch.float64)
    out, dv = ffn.joint(x, v)
    ref_out, ref_dv = torch.func.jvp(lambda y: ffn(0.0, y), (x,), (v,))
    torch.testing.assert_close(out, ref_out, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(dv, ref_dv, rtol=1e-10, atol=1e-10)


def test_bad_field_arguments():
    with pytest.raises(ValueError, match="dim must be divisible by heads: got dim=10, heads=4"):
        AttentionField(10, 4)
    with pytest.raises(ValueError, match="form must be one of residual, laplacian"):
        AttentionField(8, 2, form="wave")
    with pytest.raises(ValueError, match="impl must be one of auto, sdpa, math"):
        AttentionField(8, 2, impl="flash")
    with pytest.raises(ValueError, match=r"expects x of shape \(B, N, 8\), got \(3, 8\)"):
        AttentionField(8, 2)(0.0, torch.zeros(3, 8))
    with pytest.raises(ValueError, match="takes no attn_mask"):
        SimpleAttentionField(8)(0.0, torch.zeros(1, 3, 8), torch.ones(3, 3, dtype=torch.bool))
    for hidden in (0, -4):  # a zero width is refused, not replaced by the default 4 * dim
        with pytest.raises(ValueError, match=f"hidden width must be a positive int, got {hidden}"):
            FeedForward(8, hidden=hidden)
        with pytest.raises(ValueError, match=f"hidden width must be a positive int, got {hidden}"):
            odeformer.transformer(1, 8, 2, "diffusion", mlp_hidden=hidden)


def test_fields_of_ones_own_build_the_backbone_and_refuse_standard_options_beside_them():
    """``transformer(..., fields=Fields(...))``: the layers are built from those fields (here simple attention, no
    FFN, one attention per layer); a standard-field option set beside them would be ignored, so it is an error."""
    fields = odeformer.Fields(lambda form: SimpleAttentionField(8, 2, form=form))
    backbone = odeformer.transformer(3, 8, 2, "diffusion", fields=fields, form="laplacian")
    assert all(isinstance(layer.attention, SimpleAttentionField) and layer.ffn is None for layer in backbone.layers)
    assert all(layer.attention.form == "laplacian" for layer in backbone.layers)
    assert len({id(layer.attention) for layer in backbone.layers}) == 3
    for option in ({"norm": "post"}, {"mask": "causal"}, {"mlp_hidden": 16}, {"dropout": 0.1}):
        with pytest.raises(ValueError, match=f"fields= replaces the standard fields, so {next(iter(option))} would"):
            odeformer.transformer(3, 8, 2, "diffusion", fields=fields, **option)


@given(seed=seeds, heads=st.sampled_from([1, 2]), n=st.integers(3, 30))
def test_simple_attention_low_rank_spectrum_matches_the_dense_one(seed, heads, n):
    torch.manual_seed(seed)
    field = SimpleAttentionField(8, heads).double()
    x = _x(seed, N=n, D=8, dtype=torch.float64)
    dense = torch.linalg.eigvals(field.weights(x)).abs().sort(-1, descending=True).values
    small = field.eigenvalues(x).abs().sort(-1, descending=True).values
    k = min(small.shape[-1], n)
    torch.testing.assert_close(small[..., :k], dense[..., :k], rtol=1e-8, atol=1e-8)
    assert torch.all(dense[..., k:] < 1e-8)  # the rest of the dense spectrum is zero (rank <= Dh + 1)


def test_fused_causal_attention_builds_no_mask(monkeypatch):
    """The fused kernel applies its own causal mask: no N × N mask is built for it and thrown away."""
    import odeformer.fields as fields

    field = fields.AttentionField(8, 2, mask="causal")
    built = []
    original = fields.AttentionField._mask
    monkeypatch.setattr(fields.AttentionField, "_mask", lambda self, x, m: built.append(1) or original(self, x, m))
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        fused = field(0.0, x)
    assert built == []
    math_path = fields.AttentionField(8, 2, mask="causal", impl="math")
    math_path.load_state_dict(field.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(math_path(0.0, x), fused, rtol=1e-5, atol=1e-6)  # still causal


@given(seed=seeds, n=st.integers(1, 9))
def test_math_causal_attention_projects_once_and_masks_as_the_general_path_does(seed, n):
    """The math path computes its queries and keys once per call (not again for the weights), and the causal weights
    without a padding mask are, to the bit, those of the general masked path given a mask that allows everything."""
    torch.manual_seed(seed)
    field = AttentionField(8, 2, mask="causal", impl="math").double()
    calls = []
    field.qkv.register_forward_hook(lambda m, args, out: calls.append(1))
    x = _x(seed, N=n, D=8, dtype=torch.float64)
    with torch.no_grad():
        field(0.0, x)
        assert calls == [1]
        allowed = torch.ones(2, 1, n, n, dtype=torch.bool)
        assert torch.equal(field.weights(x), field.weights(x, allowed))
