"""The presets that claim the official Wavy Transformer code's update, against that update written out by hand from
its code (github noguchisatoshi/Wavy-Transformer: ``src/bert/models/attention.py`` and ``layers.py`` for BERT's wave
and mix layers, ``src/vit/wavy_vit.py`` for the ViT blocks), in float64.

The official code applies the FFN at unit step, ``(x, v) <- (x + MLP(x'), v + J v')`` after the attention's wave step
``v <- v + τ (Attn - x)``, ``x <- x + τ v``: ``full_wave_official`` is that layer; ``full_wave`` takes the FFN at ``τ``
instead, a consistent discretisation of the continuous Full Wave (order 1), which the official one is not.
"""

import torch
import torch.nn.functional as F

import odeformer


def _layer_norm(x, v, norm):
    """The official joint LayerNorm: the state normalised, the velocity ``γ ⊙ v / sqrt(var(x) + ε)``."""
    x_hat = F.layer_norm(x, x.shape[-1:], None, None, norm.eps)
    inv_std = (x.var(-1, unbiased=False, keepdim=True) + norm.eps).rsqrt()
    return x_hat * norm.weight + norm.bias, v * inv_std * norm.weight


def _attention(field, x):
    """Softmax attention with the output projection, no LayerNorm before it (BERT is post-LN)."""
    B, N, D = x.shape
    q, k, v = field.qkv(x).view(B, N, 3, field.heads, field.head_dim).permute(2, 0, 3, 1, 4)
    weights = (q @ k.transpose(-2, -1) / field.head_dim**0.5).softmax(-1)
    return field.proj((weights @ v).transpose(1, 2).reshape(B, N, D))


def _mlp(mlp, x, v):
    """GELU MLP and its tangent ``(φ'(x W₁ + b₁) ⊙ v W₁) W₂`` (no bias on the velocity)."""
    hidden = mlp.fc1(x)
    with torch.enable_grad():
        leaf = hidden.detach().requires_grad_()
        (slope,) = torch.autograd.grad(F.gelu(leaf).sum(), leaf)
    return mlp.fc2(F.gelu(hidden)), (slope * (v @ mlp.fc1.weight.T)) @ mlp.fc2.weight.T


def _post_ln_ffn(layer, x, v):
    """The rest of BERT's wave and mix layers after the attention's update: its joint LN, then the joint FFN at unit
    step, ``x <- LN(x + MLP(x))``, ``v <- LN'(v + J v)``."""
    x, v = _layer_norm(x, v, layer.after_attention.module)
    dx, dv = _mlp(layer.ffn.mlp, x, v)
    return _layer_norm(x + dx, v + dv, layer.after_ffn.module)


def test_post_ln_full_wave_official_is_berts_wave_layer():
    """BERT's wave layer with ``apply_velocity_transform``: ``v <- τ (Attn(x) - x) + v``, ``x <- τ v + x``, joint LN;
    then ``x <- LN(x + MLP(x))``, ``v <- LN'(v + J v)``."""
    torch.manual_seed(0)
    model = odeformer.MaskedLM(30, 8, depth=2, dim=16, heads=2, solver="full_wave_official", norm="post").double()
    model.eval()
    x = torch.randn(2, 8, 16, dtype=torch.float64)
    states = []
    with torch.no_grad():
        model.backbone(x, record=states)
        v = torch.zeros_like(x)
        for layer, state in zip(model.backbone.layers, states[1:]):
            tau = layer.dt
            v = tau * (_attention(layer.attention, x) - x) + v
            x = tau * v + x
            x, v = _post_ln_ffn(layer, x, v)
            torch.testing.assert_close(state.x, x, rtol=1e-12, atol=1e-12)
            torch.testing.assert_close(state.v, v, rtol=1e-12, atol=1e-12)


def test_pre_ln_full_wave_official_takes_the_ffn_at_unit_step():
    """The pre-LN layout (the ViT blocks): ``v <- v + τ (Attn(LN x) - x)``, ``x <- x + τ v``, then
    ``(x, v) <- (x + MLP(LN x), v + J_MLP(LN x) LN'(x) v)``; ``full_wave`` differs from it exactly by the FFN's step."""
    torch.manual_seed(0)
    official = odeformer.ViT(image_size=8, patch_size=4, depth=2, dim=16, heads=2, solver="full_wave_official")
    official = official.double().eval()
    ours = odeformer.ViT(image_size=8, patch_size=4, depth=2, dim=16, heads=2, solver="full_wave").double().eval()
    ours.load_state_dict(official.state_dict())
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    with torch.no_grad():
        for model, ffn_step in ((official, 1.0), (ours, 0.5)):
            states, y, v = [], x, torch.zeros_like(x)
            model.backbone(x, record=states)
            for layer, state in zip(model.backbone.layers, states[1:]):
                attention = layer.attention
                v = v + layer.dt * (_attention(attention, attention.norm(y)) - y)
                y = y + layer.dt * v
                normed, tangent = _layer_norm(y, v, layer.ffn.norm)
                dx, dv = _mlp(layer.ffn.mlp, normed, tangent)
                y, v = y + ffn_step * dx, v + ffn_step * dv
                torch.testing.assert_close(state.x, y, rtol=1e-12, atol=1e-12)
                torch.testing.assert_close(state.v, v, rtol=1e-12, atol=1e-12)


def test_post_ln_mix_bert_is_berts_mix_layer():
    """BERT's mix layer (``attention.py``, ``residual_type="mix"``): with ``δ = Attn(x) - x`` and ``α = sigmoid(β)``,
    ``v <- α (τ δ + v) + (1 - α) δ``, ``x <- τ v + x``, joint LN; then the joint FFN at unit step as in the wave layer.
    One learnable gate per layer, from ``β = 0``; moved here to a different value per layer."""
    torch.manual_seed(0)
    model = odeformer.MaskedLM(30, 8, depth=3, dim=16, heads=2, solver="mix_bert", norm="post").double()
    model.eval()
    betas = [layer.stepper.theta for layer in model.backbone.layers]
    assert all(beta.requires_grad and beta.shape == (1,) and float(beta.detach()) == 0.0 for beta in betas)
    with torch.no_grad():
        for beta, value in zip(betas, (-1.5, 0.3, 2.0)):
            beta.fill_(value)
    x = torch.randn(2, 8, 16, dtype=torch.float64)
    states = []
    with torch.no_grad():
        model.backbone(x, record=states)
        v = torch.zeros_like(x)
        for layer, state, beta in zip(model.backbone.layers, states[1:], betas):
            tau, alpha = layer.dt, torch.sigmoid(beta)
            delta = _attention(layer.attention, x) - x
            v = alpha * (tau * delta + v) + (1 - alpha) * delta
            x = tau * v + x
            x, v = _post_ln_ffn(layer, x, v)
            torch.testing.assert_close(state.x, x, rtol=1e-12, atol=1e-12)
            torch.testing.assert_close(state.v, v, rtol=1e-12, atol=1e-12)
