"""Over-smoothing measures on inputs with known answers, and their invariances."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import odeformer
from odeformer.diagnostics import (
    dirichlet_energy,
    feature_variance,
    layer_measures,
    normalised_dirichlet_energy,
    rank_collapse,
    spectral_gap,
    token_cosine,
    wave_energy,
)

seeds = st.integers(0, 2**31 - 1)


def _h(seed, B=2, N=6, D=5):
    return torch.randn(B, N, D, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@given(seed=seeds, n=st.integers(2, 9))
def test_identical_tokens(seed, n):
    token = _h(seed, N=1)
    h = token.expand(-1, n, -1)
    torch.testing.assert_close(token_cosine(h), torch.ones(2, dtype=torch.float64))
    assert torch.all(dirichlet_energy(h).abs() < 1e-12)
    assert torch.all(normalised_dirichlet_energy(h).abs() < 1e-12)
    assert torch.all(feature_variance(h).abs() < 1e-12)
    assert torch.all(rank_collapse(h) < 1e-12)


def test_two_tokens_by_hand():
    h = torch.tensor([[[1.0, 0.0], [0.0, 2.0]]], dtype=torch.float64)
    assert float(token_cosine(h)) == pytest.approx(0.0)
    # (1/4) * (‖h0 - h1‖² twice) = (1/4) * 2 * 5
    assert float(dirichlet_energy(h)) == pytest.approx(2.5)
    assert float(dirichlet_energy(h, torch.tensor([[0], [1]]))) == pytest.approx(5 / 2)
    # mean (0.5, 1); deviations (0.5, -1), (-0.5, 1): ‖·‖_F² = 2.5, ‖X‖_F² = 5
    assert float(rank_collapse(h)) == pytest.approx(math.sqrt(0.5))
    # mean squared norm (1 + 4) / 2 = 2.5, so the scale-free energy is 2.5 / 2.5
    assert float(normalised_dirichlet_energy(h)) == pytest.approx(1.0)
    assert float(normalised_dirichlet_energy(h, torch.tensor([[0], [1]]))) == pytest.approx(1.0)
    # channel 0 holds (1, 0): variance 1/4; channel 1 holds (0, 2): variance 1; mean 5/8
    assert float(feature_variance(h)) == pytest.approx(0.625)
    A = torch.tensor([[[0.5, 0.5], [0.5, 0.5]]], dtype=torch.float64)
    assert float(spectral_gap(A)) == pytest.approx(1.0)
    assert float(spectral_gap(torch.eye(2, dtype=torch.float64)[None])) == pytest.approx(0.0)
    # at rest: potential only, (1/2) * (1/4) * (0.5 * 5 + 0.5 * 5)
    assert float(wave_energy(h, h, 0.5, A)) == pytest.approx(0.625)
    assert float(token_cosine(torch.tensor([[[1.0, 0.0], [-1.0, 0.0]]]))) == pytest.approx(-1.0)


@given(seed=seeds)
def test_measures_are_invariant_to_token_permutation(seed):
    h = _h(seed)
    perm = torch.randperm(6, generator=torch.Generator().manual_seed(seed))
    for measure in (token_cosine, dirichlet_energy, normalised_dirichlet_energy, feature_variance, rank_collapse):
        torch.testing.assert_close(measure(h[:, perm]), measure(h))
    A = torch.softmax(_h(seed + 1, N=6, D=6), -1)
    torch.testing.assert_close(spectral_gap(A[:, perm][:, :, perm]), spectral_gap(A), rtol=1e-8, atol=1e-8)
    h2 = _h(seed + 2)
    torch.testing.assert_close(
        wave_energy(h[:, perm], h2[:, perm], 0.3, A[:, perm][:, :, perm]), wave_energy(h, h2, 0.3, A)
    )


def _edges(seed, n, count=12):
    return torch.randint(0, n, (2, count), generator=torch.Generator().manual_seed(seed))


magnitudes = st.floats(-3.0, 3.0).map(lambda e: 10.0**e)


@given(seed=seeds, c=magnitudes, negative=st.booleans())
def test_normalised_dirichlet_is_invariant_to_scaling_while_the_raw_energy_scales_by_c_squared(seed, c, negative):
    c = -c if negative else c
    h, edges = _h(seed), _edges(seed, 6)
    for graph in (None, edges):
        torch.testing.assert_close(normalised_dirichlet_energy(c * h, graph), normalised_dirichlet_energy(h, graph))
        torch.testing.assert_close(dirichlet_energy(c * h, graph), c**2 * dirichlet_energy(h, graph))
    torch.testing.assert_close(feature_variance(c * h), c**2 * feature_variance(h))


@given(seed=seeds, n=st.integers(2, 9), j=st.integers(0, 8), eps=magnitudes)
def test_normalised_dirichlet_is_zero_iff_all_tokens_are_equal(seed, n, j, eps):
    h = _h(seed, N=1).expand(-1, n, -1).clone()
    assert torch.all(normalised_dirichlet_energy(h) < 1e-12)
    assert torch.equal(normalised_dirichlet_energy(torch.zeros_like(h)), torch.zeros(2, dtype=torch.float64))
    h[:, j % n, 0] += eps * 1e-3  # one token moves: no longer all equal
    assert torch.all(normalised_dirichlet_energy(h) > 0) and torch.all(feature_variance(h) > 0)


def test_normalised_graph_dirichlet_is_zero_iff_tokens_agree_along_every_edge():
    h = torch.tensor([[[1.0, 2.0], [1.0, 2.0], [-3.0, 0.5], [-3.0, 0.5]]], dtype=torch.float64)
    components = torch.tensor([[0, 1, 2, 3], [1, 0, 3, 2]])  # edges 0-1 and 2-3, both ways
    assert float(normalised_dirichlet_energy(h, components)) == 0.0
    assert float(normalised_dirichlet_energy(h)) > 0  # the complete graph links the two groups
    assert float(normalised_dirichlet_energy(h, torch.tensor([[0, 1], [1, 2]]))) > 0


@given(seed=seeds, n=st.integers(2, 9))
def test_normalised_dirichlet_equals_the_raw_energy_at_unit_mean_squared_norm(seed, n):
    h = _h(seed, N=n)
    h = h / h.square().sum(-1).mean(-1).sqrt()[:, None, None]  # (1/N) Σ ‖h_i‖² = 1 per sample
    for graph in (None, _edges(seed, n)):
        torch.testing.assert_close(normalised_dirichlet_energy(h, graph), dirichlet_energy(h, graph))


@given(seed=seeds, n=st.integers(2, 9), offset=st.floats(-5.0, 5.0))
def test_normalised_dirichlet_on_the_complete_graph_is_at_most_two_and_two_at_zero_mean(seed, n, offset):
    h = _h(seed, N=n) + offset
    value = normalised_dirichlet_energy(h)
    assert torch.all(value <= 2 * (1 + 1e-12))
    torch.testing.assert_close(value, 2 * rank_collapse(h) ** 2)
    centred = h - h.mean(1, keepdim=True)
    torch.testing.assert_close(normalised_dirichlet_energy(centred), torch.full((2,), 2.0, dtype=torch.float64))


@given(seed=seeds, n=st.integers(2, 9), count=st.integers(1, 20))
def test_normalised_graph_dirichlet_is_at_most_twice_the_largest_degree(seed, n, count):
    edges = _edges(seed, n, count)
    degree = torch.bincount(edges.flatten(), minlength=n).max()  # out_i + in_i
    assert torch.all(normalised_dirichlet_energy(_h(seed, N=n), edges) <= 2 * degree * (1 + 1e-12))
    opposite = torch.tensor([[[1.0, -2.0], [-1.0, 2.0]]], dtype=torch.float64)
    assert float(normalised_dirichlet_energy(opposite, torch.tensor([[0, 1], [1, 0]]))) == pytest.approx(4.0)


@given(seed=seeds, n=st.integers(1, 9), d=st.integers(1, 6))
def test_feature_variance_is_the_mean_over_channels_of_the_variance_across_tokens(seed, n, d):
    h = _h(seed, N=n, D=d)
    per_channel = torch.stack([h[b, :, c].var(correction=0) for b in range(2) for c in range(d)]).view(2, d)
    torch.testing.assert_close(feature_variance(h), per_channel.mean(-1))
    torch.testing.assert_close(feature_variance(h), dirichlet_energy(h) / (2 * d))
    shift = _h(seed + 1, N=1, D=d)
    torch.testing.assert_close(feature_variance(h + shift), feature_variance(h))


def test_bad_shapes_are_one_line_errors():
    with pytest.raises(ValueError, match=r"token states must have shape \(B, N, D\)"):
        normalised_dirichlet_energy(torch.zeros(3, 4))
    with pytest.raises(ValueError, match=r"edge_index must have shape \(2, E\)"):
        dirichlet_energy(torch.zeros(1, 3, 2), torch.zeros(3, 4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"token ids in \[0, 3\)"):
        normalised_dirichlet_energy(torch.zeros(1, 3, 2), torch.tensor([[0], [3]]))


def _doubly_stochastic(seed, n):
    """A symmetric doubly stochastic matrix: a convex mix of permutation matrices, symmetrised."""
    g = torch.Generator().manual_seed(seed)
    weights = torch.rand(4, generator=g, dtype=torch.float64)
    weights = weights / weights.sum()
    M = sum(w * torch.eye(n, dtype=torch.float64)[torch.randperm(n, generator=g)] for w in weights)
    return 0.5 * (M + M.T)


@given(seed=seeds, n=st.integers(2, 10), dt=st.floats(0.0, 1.0))
def test_diffusion_with_symmetric_doubly_stochastic_attention_never_raises_dirichlet_energy(seed, n, dt):
    A = _doubly_stochastic(seed, n)
    h = _h(seed, B=1, N=n)
    after = h + dt * (A @ h - h)  # one Euler step of dX/dt = (A - I) X
    assert float(dirichlet_energy(after)) <= float(dirichlet_energy(h)) * (1 + 1e-12) + 1e-12


def test_cls_token_can_be_dropped():
    h = torch.zeros(1, 3, 2)
    h[0, 0] = torch.tensor([1.0, 0.0])  # CLS points elsewhere
    h[0, 1:] = torch.tensor([0.0, 1.0])
    assert float(token_cosine(h, drop_first=True)) == pytest.approx(1.0)
    assert float(token_cosine(h)) < 1.0


@pytest.mark.parametrize("solver", ["diffusion", "full_wave"])
def test_layer_measures_on_a_model(solver):
    torch.manual_seed(0)
    model = odeformer.ViT(depth=3, dim=16, heads=2, solver=solver)
    out = layer_measures(model, torch.randn(4, 1, 8, 8), drop_first=True)
    assert out["depth"] == [0, 1, 2, 3]
    for key in ("cosine", "dirichlet", "dirichlet_normalised", "feature_variance", "rank_collapse"):
        assert len(out[key]) == 4 and all(math.isfinite(v) for v in out[key])
    assert all(0 < e <= 2 for e in out["dirichlet_normalised"])
    for raw, variance in zip(out["dirichlet"], out["feature_variance"]):
        assert variance == pytest.approx(raw / (2 * 16), rel=1e-5)  # dim 16
    assert len(out["spectral_gap"]) == 3 and all(0 <= g <= 1 for g in out["spectral_gap"])
    assert len(out["wave_energy"]) == 3
    assert out["second_order"] == (solver == "full_wave")
    assert ("phase" in out) == (solver == "full_wave")
    if solver == "full_wave":
        assert out["phase_token"] == {"sample": 0, "token": 0} and out["phase_channels"] == [0, 1, 2, 3]
        assert out["phase"][0] is None and all(len(p["x"]) == len(p["v"]) == 4 for p in out["phase"][1:])


def test_layer_measures_on_a_graph():
    torch.manual_seed(0)
    model = odeformer.NodeClassifier(5, 3, depth=2, dim=8)
    edges = torch.randint(0, 9, (2, 20))
    out = layer_measures(model, torch.randn(9, 5), edges, edge_index=edges)
    assert len(out["graph_dirichlet"]) == len(out["graph_dirichlet_normalised"]) == 3
    degree = int(torch.bincount(edges.flatten(), minlength=9).max())
    assert all(0 <= e <= 2 * degree for e in out["graph_dirichlet_normalised"])


@given(seed=seeds, real=st.lists(st.integers(2, 6), min_size=2, max_size=2), pad=st.integers(1, 4))
def test_padded_tokens_count_for_nothing(seed, real, pad):
    """Each sample's real tokens, padded to one length with arbitrary vectors and a mask, measure exactly as those
    tokens alone do (the padding used to enter every per-token measure and its count N)."""
    g = torch.Generator().manual_seed(seed)
    N = max(real) + pad
    h = torch.randn(2, N, 4, generator=g, dtype=torch.float64)
    h_next = torch.randn(2, N, 4, generator=g, dtype=torch.float64)
    attention = torch.rand(2, N, N, generator=g, dtype=torch.float64)
    mask = torch.arange(N)[None, :] < torch.tensor(real)[:, None]  # (B, N): True on real tokens
    for b, n in enumerate(real):
        alone, nxt, a = h[b : b + 1, :n], h_next[b : b + 1, :n], attention[b : b + 1, :n, :n]
        m = mask[b : b + 1]
        pairs = [
            (token_cosine(h[b : b + 1], mask=m), token_cosine(alone)),
            (dirichlet_energy(h[b : b + 1], mask=m), dirichlet_energy(alone)),
            (normalised_dirichlet_energy(h[b : b + 1], mask=m), normalised_dirichlet_energy(alone)),
            (feature_variance(h[b : b + 1], m), feature_variance(alone)),
            (rank_collapse(h[b : b + 1], m), rank_collapse(alone)),
            (
                wave_energy(h[b : b + 1], h_next[b : b + 1], 0.5, attention[b : b + 1], m),
                wave_energy(alone, nxt, 0.5, a),
            ),
        ]
        for got, expected in pairs:
            torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-14)
    batched = token_cosine(h, mask=mask)  # the batch at once equals each sample alone
    torch.testing.assert_close(batched[1], token_cosine(h[1:, : real[1]])[0], rtol=1e-12, atol=1e-14)


def test_layer_measures_leave_a_masked_lm_s_padding_out():
    """The same real tokens with and without trailing padding give the same per-layer measures."""
    torch.manual_seed(0)
    model = odeformer.MaskedLM(20, 16, depth=3, dim=8, heads=2, solver="full_wave").double()
    tokens = torch.randint(1, 20, (2, 6))
    padded = torch.cat([tokens, torch.zeros(2, 5, dtype=torch.long)], dim=1)  # pad_id 0
    plain = layer_measures(model, tokens)
    masked = layer_measures(model, padded, attn_mask=(padded != 0)[:, None, None, :])
    for name in ("cosine", "dirichlet", "dirichlet_normalised", "feature_variance", "rank_collapse", "spectral_gap"):
        assert masked[name] == pytest.approx(plain[name], rel=1e-9, abs=1e-12), name
    assert masked["wave_energy"] == pytest.approx(plain["wave_energy"], rel=1e-9)


def test_graph_softmax_attention_is_measured_along_its_edges():
    """A NodeClassifier whose softmax runs along the graph's edges: its weights are taken with the graph's mask, as
    the model attends (the measures used to stop with "mask='graph' needs the graph's attention mask")."""
    torch.manual_seed(0)
    model = odeformer.NodeClassifier(5, 3, depth=2, dim=8, attention="graph_softmax").double()
    edges = torch.randint(0, 9, (2, 20))
    features = torch.randn(9, 5, dtype=torch.float64)
    measures = layer_measures(model, features, edges, edge_index=edges)
    with torch.no_grad():
        states = model.eval().trajectory(features, edges)
    inner = model.backbone.layers[0].attention.attention
    mask = odeformer.fields.graph_mask(edges, 9)
    with torch.no_grad():
        assert measures["spectral_gap"][0] == pytest.approx(float(spectral_gap(inner.weights(states[0], mask)).mean()))


def test_the_input_has_no_phase_point_in_a_continuous_wave_run():
    torch.manual_seed(0)
    model = odeformer.ViT(depth=3, dim=16, heads=2, solver=odeformer.continuous.continuous(equation="wave"))
    phase = layer_measures(model, torch.randn(2, 1, 8, 8), drop_first=True)["phase"]
    assert phase[0] is None and all(p is not None for p in phase[1:])


@pytest.mark.parametrize(
    "dtype, scales",
    [(torch.float32, (1e-25, 1e-20, 1e15, 1e19)), (torch.float64, (1e-150, 1e-31, 1e-14, 1e150))],
)
def test_scale_free_measures_hold_at_any_token_scale(dtype, scales):
    """A collapsing run's 1e-30 or a diverging one's 1e20 must not turn a scale-free measure into 0, NaN or a
    different number: cosine, normalised Dirichlet energy and rank collapse are computed at unit scale."""
    g = torch.Generator().manual_seed(3)
    h = torch.randn(2, 5, 4, generator=g, dtype=torch.float64)
    mask = torch.tensor([[True] * 5, [True, True, True, False, False]])
    reference = [f(h, mask=mask) for f in (token_cosine, normalised_dirichlet_energy, rank_collapse)]
    for scale in scales:
        scaled = (h * scale).to(dtype)
        for f, expected in zip((token_cosine, normalised_dirichlet_energy, rank_collapse), reference):
            got = f(scaled, mask=mask).double()
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6, msg=f"{f.__name__} at {scale:g}")
        assert torch.allclose(2 * rank_collapse(scaled, mask=mask).double() ** 2, reference[1], rtol=1e-5)


def test_a_blown_up_runs_measures_are_strict_json_and_its_gap_is_nan():
    import json

    from odeformer.app.reporting.diagnostics import _json

    text = _json({"runs": {"a": {"values": [1.5, math.nan, math.inf, -math.inf]}}})
    assert json.loads(text)["runs"]["a"]["values"] == [1.5, None, None, None] and "NaN" not in text
    attention = torch.full((1, 3, 3), 1 / 3)
    attention = torch.cat([attention, torch.full((1, 3, 3), math.nan)])
    gap = spectral_gap(attention)
    assert gap[0] == pytest.approx(1.0) and math.isnan(gap[1])
