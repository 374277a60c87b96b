"""DIFFormer-s against a hand-written reference of its official code's equations, and the Cora protocol's settings.

The reference (qitianwu/DIFFormer, ``node classification/difformer.py`` and ``main.py``, written out here from the
equations, not the code): encoder ``ReLU(LN(x W₀ + b₀))`` (then dropout); per layer ``conv = Attn(h) + Â h`` with
``Attn(h)_i = (Σ_j h_j + q̃_i (k̃ᵀ h)) / (N + q̃_i · Σ_j k̃_j)``, ``q̃ = q / ‖q‖_F``, ``k̃ = k / ‖k‖_F`` over the whole
``N × D`` tensor, no value projection, ``Â = D^{-1/2} (A + I) D^{-1/2}``; ``h <- LN(α conv + (1 - α) h)`` (then
dropout); logits ``h W + b`` on the last layer.
"""

import pytest
import torch
import torch.nn.functional as F

import odeformer
import odeformer.app.commands.train as entry
from odeformer.tasks.graph import GlobalSimpleAttention, _Gram, _HeadRatios


def _graph(seed=0, n=12, features=9, edges=20):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, features, generator=g, dtype=torch.float64)
    x = x * (torch.rand(n, features, generator=g, dtype=torch.float64) < 0.3)  # sparse-ish bag of words
    edge_index = torch.randint(0, n, (2, edges), generator=g)
    edge_index = edge_index[:, edge_index[0] != edge_index[1]]
    return x, edge_index


def _dense_adjacency(edge_index, n):
    A = torch.zeros(n, n, dtype=torch.float64)
    A[edge_index[0], edge_index[1]] = 1.0
    A = ((A + A.T) > 0).double() + torch.eye(n, dtype=torch.float64)  # symmetrised, one self loop each
    d = A.sum(1).rsqrt()
    return d[:, None] * A * d[None, :]


def _reference(model, x, edge_index, alpha):
    linear, norm, _, _ = model.encoder
    pre = x @ linear.weight.T + linear.bias
    h = F.relu(F.layer_norm(pre, (linear.out_features,), norm.weight, norm.bias, norm.eps))
    adjacency = _dense_adjacency(edge_index, x.shape[0])
    n = x.shape[0]
    for layer in model.backbone.layers:
        attention = layer.attention.attention
        q = h @ attention.query.weight.T + attention.query.bias
        k = h @ attention.key.weight.T + attention.key.bias
        q, k = q / q.norm(), k / k.norm()
        attn = (h.sum(0) + q @ (k.T @ h)) / (n + q @ k.sum(0))[:, None]
        conv = attn + adjacency @ h
        h = alpha * conv + (1 - alpha) * h
        layer_norm = layer.after_attention.module[0]
        h = F.layer_norm(h, (h.shape[-1],), layer_norm.weight, layer_norm.bias, layer_norm.eps)
    return h @ model.classifier.weight.T + model.classifier.bias


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("depth, alpha", [(1, 0.5), (3, 0.5), (4, 0.2)])
def test_difformer_is_the_official_equations(seed, depth, alpha):
    x, edge_index = _graph(seed)
    torch.manual_seed(seed)
    model = odeformer.DIFFormer(x.shape[1], 4, depth=depth, dim=6, dt=alpha).double().eval()
    for p in model.parameters():  # away from LayerNorm's identity start, so every weight matters
        p.data.add_(0.3 * torch.randn_like(p))
    torch.testing.assert_close(model(x, edge_index), _reference(model, x, edge_index, alpha), rtol=1e-11, atol=1e-11)


def test_the_attention_equals_its_dense_weights_for_several_heads():
    torch.manual_seed(0)
    attention = GlobalSimpleAttention(5, heads=3).double()
    h = torch.randn(2, 7, 5, dtype=torch.float64)
    dense = (attention.weights(h) @ h.unsqueeze(1)).mean(1)  # heads averaged
    torch.testing.assert_close(attention.attend(h), dense, rtol=1e-13, atol=1e-13)
    weights = attention.weights(h)
    torch.testing.assert_close(weights.sum(-1), torch.ones_like(weights.sum(-1)))
    dense_spectrum = torch.linalg.eigvals(weights.mean(1)).abs().sort(descending=True).values[..., :4]
    low_rank = attention.eigenvalues(h).abs().sort(descending=True).values[:, 0, :4]
    torch.testing.assert_close(low_rank, dense_spectrum, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("batch, nodes, dim, heads", [(1, 6, 3, 1), (2, 5, 3, 2), (1, 4, 2, 3)])
def test_the_attentions_written_out_backward_passes_are_their_derivatives(batch, nodes, dim, heads):
    """The head ratios and the Gram matrix, first and second derivatives against finite differences, with the
    arguments laid out as ``attend`` passes them (the denominator's matrix a transposed view)."""
    g = torch.Generator().manual_seed(batch * 100 + heads)

    def rand(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    h = rand(batch, nodes, dim).requires_grad_()
    M, c = rand(batch, dim, heads * dim).requires_grad_(), rand(batch, 1, heads * dim).requires_grad_()
    m = rand(batch, heads, dim).transpose(1, 2).detach().requires_grad_()  # (B, D, H), not contiguous
    c0 = (2 * nodes + rand(batch, 1, heads).abs()).requires_grad_()  # denominators kept away from zero
    assert torch.autograd.gradcheck(_HeadRatios.apply, (h, M, c, m, c0))
    assert torch.autograd.gradgradcheck(_HeadRatios.apply, (h, M, c, m, c0))
    assert torch.autograd.gradcheck(_Gram.apply, (h,))
    assert torch.autograd.gradgradcheck(_Gram.apply, (h,))


@pytest.mark.parametrize("heads", [1, 3])
def test_the_attentions_gradients_are_those_of_its_plain_formula(heads):
    """Autograd through the fused Functions equals torch.func.grad (which takes the plain operations), for the
    state and every weight."""
    torch.manual_seed(heads)
    attention = GlobalSimpleAttention(4, heads=heads).double()
    attention.forward = attention.attend  # a module call for functional_call
    h = torch.randn(2, 9, 4, dtype=torch.float64)
    weights = torch.randn(2, 9, 4, dtype=torch.float64)
    params = {name: p.detach() for name, p in attention.named_parameters()}

    def loss(params, h):
        return (torch.func.functional_call(attention, params, (h,), strict=True) * weights).sum()

    expected = torch.func.grad(loss, argnums=(0, 1))(params, h)
    leaf = h.clone().requires_grad_()
    (attention(leaf) * weights).sum().backward()
    torch.testing.assert_close(leaf.grad, expected[1], rtol=1e-12, atol=1e-12)
    for name, p in attention.named_parameters():
        torch.testing.assert_close(p.grad, expected[0][name], rtol=1e-12, atol=1e-12, msg=name)


def test_gradients_through_the_sparse_fast_paths_match_dense_autograd():
    x, edge_index = _graph(3, n=15, features=11)
    torch.manual_seed(0)
    model = odeformer.DIFFormer(x.shape[1], 3, depth=2, dim=4).double().eval()

    def grads(sparse):
        model.zero_grad()
        if not sparse:
            model._features = (None, None)  # the next call re-checks: pretend dense
        out = (
            model(x, edge_index)
            if sparse
            else model.classifier(
                model.backbone(model.encoder(x).unsqueeze(0), propagation=model.propagation(edge_index, 15, x.dtype))[0]
            )
        )
        out.square().sum().backward()
        return [p.grad.clone() for p in model.parameters()]

    for a, b in zip(grads(True), grads(False)):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_the_cora_protocol_is_the_official_run():
    """The official Cora DIFFormer-s command (run.sh): lr 1e-3, weight decay 0.01 (Adam, every parameter), dropout
    0.2, hidden 64, 8 layers, alpha 0.5, one head, 500 epochs, its random 20-per-class / 500 / 1000 split (the draw
    of its class_rand_splits after seed 123), test at the best validation epoch (evaluated every epoch)."""
    cfg = entry.compose(["experiment=difformer_cora"])
    model, train, data = cfg.model, cfg.train, cfg.data
    assert (model._target_, model.depth, model.dim, model.heads, model.dt, model.dropout) == (
        "odeformer.DIFFormer",
        8,
        64,
        1,
        0.5,
        0.2,
    )
    assert (model.norm, model.propagation, model.form, cfg.solver.name) == ("post", "sum", "laplacian", "diffusion")
    assert (train.optimizer, train.lr, train.weight_decay, train.decay) == ("adam", 1e-3, 1e-2, "all")
    assert (train.max_steps, train.eval_every, train.warmup_steps, train.min_lr_ratio, train.grad_clip) == (
        500,
        1,
        0,
        1.0,
        0.0,
    )
    options = data.options
    assert (data.name, options.split, options.seed, options.per_class, options.num_val, options.num_test) == (
        "planetoid",
        "difformer",
        123,
        20,
        500,
        1000,
    )


def test_light_wave_momentum_reads_the_normalised_states():
    """h_{l+1} = Dropout(LN((1 - τ) h_l + τ P(h_l) + λ ⊙ (h_l - h_{l-1}))): the momentum is on the states the
    previous layers output, after their LayerNorm."""
    x, edge_index = _graph(4)
    torch.manual_seed(0)
    model = odeformer.DIFFormer(x.shape[1], 3, depth=3, dim=6, dt=0.2, solver="light_wave").double().eval()
    adjacency = model.propagation(edge_index, x.shape[0], x.dtype)
    h = model.encoder(x).unsqueeze(0)
    states = [h, h]  # h_{-1} = h_0
    for layer in model.backbone.layers:
        current, previous = states[-1], states[-2]
        force = layer.attention(0.0, current, propagation=adjacency)  # P(h) - h
        lam = torch.sigmoid(layer.stepper.theta)
        moved = current + 0.2 * force + lam * (current - previous)
        states.append(layer.after_attention(moved))
    torch.testing.assert_close(model(x, edge_index), model.classifier(states[-1][0]), rtol=1e-12, atol=1e-12)


def test_graph_propagation_under_torch_func_transforms():
    """``Â h`` under ``torch.func.jvp`` and ``vmap`` (the stability atlas's Jacobian-vector products): a sparse product
    has no forward-mode rule, so transforms take the entries a ``Propagation`` keeps (a gather and a scatter-add),
    equal to it, from the CSR matrix the layers use on CPU and from COO."""
    from odeformer.tasks.graph import Propagation, propagate

    g = torch.Generator().manual_seed(0)
    dense = (torch.rand(7, 7, generator=g) > 0.6).double()
    dense = dense + dense.T + torch.eye(7, dtype=torch.float64)
    h, v = torch.randn(2, 7, 3, generator=g, dtype=torch.float64)
    for layout in ("csr", "coo"):
        adjacency = Propagation.of(dense.to_sparse().coalesce(), layout)
        torch.testing.assert_close(propagate(adjacency, h), dense @ h)
        out, tangent = torch.func.jvp(lambda z, a=adjacency: propagate(a, z), (h,), (v,))
        torch.testing.assert_close(out, dense @ h)
        torch.testing.assert_close(tangent, dense @ v)
        batched = torch.func.vmap(lambda z, a=adjacency: propagate(a, z))(torch.stack((h, v)))
        torch.testing.assert_close(batched, dense @ torch.stack((h, v)))
