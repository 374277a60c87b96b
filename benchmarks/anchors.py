"""What users run instead, as benchmark anchors of the same shape as the library's models.

- :class:`TorchViT`: a pre-LN ViT on PyTorch's ``nn.TransformerEncoder(norm_first=True)`` (``nn.MultiheadAttention``,
  which calls ``scaled_dot_product_attention`` when training and PyTorch's fused encoder kernel, its "fast path", in
  inference when it applies). ``load_from`` copies an ``odeformer.ViT``'s (diffusion) weights, so both compute the
  same function (exactly, with ``match_eps=True``; by default both LayerNorms keep one epsilon, which the fast path
  needs, where odeformer's FFN LayerNorm defaults to 1e-6).
- :func:`hf_vit` and :func:`hf_gpt2`: Hugging Face ``ViTForImageClassification`` and ``GPT2LMHeadModel`` built from a
  config (random init, no download), ``attn_implementation="sdpa"`` (``"eager"`` on versions whose model has no sdpa
  path; :func:`attention` says which ran), dropout off, wrapped to return the logits tensor.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def attention(hf: dict[str, nn.Module] | None = None) -> str:
    """Which attention each model ran: ``hf`` maps a name to a built Hugging Face model (``None``: not installed)."""
    if hf is None:
        used = "transformers not installed, no Hugging Face rows"
    else:
        used = ", ".join(f"{name} attn_implementation={hf_implementation(m)!r}" for name, m in hf.items())
    return (
        f"odeformer: F.scaled_dot_product_attention (impl='sdpa'); Hugging Face: {used}; nn.TransformerEncoder: "
        "nn.MultiheadAttention (scaled_dot_product_attention when training, the fused encoder fast path in "
        "inference where it applies)"
    )


def hf_implementation(model: nn.Module) -> str:
    return getattr(model, "model", model).config._attn_implementation


def _sdpa(build, config):
    """``build(config)`` with sdpa attention, or eager where this version of the model has no sdpa path."""
    try:
        config._attn_implementation = "sdpa"
        return build(config)
    except ValueError:  # "... does not support an attention implementation through scaled_dot_product_attention"
        config._attn_implementation = "eager"
        return build(config)


class TorchViT(nn.Module):
    """Patch embedding -> [CLS] + learned positions -> ``nn.TransformerEncoder`` (pre-LN, GELU) -> final LayerNorm
    (the encoder's ``norm``) -> linear head on the CLS token: ``odeformer.ViT``'s maths with diffusion, dt = 1."""

    def __init__(self, image_size=32, patch_size=4, in_chans=3, num_classes=10, depth=6, dim=128, heads=4, eps=1e-5):
        super().__init__()
        self.patch_embed = nn.Conv2d(in_chans, dim, patch_size, stride=patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.randn(1, (image_size // patch_size) ** 2 + 1, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(
            dim, heads, 4 * dim, dropout=0.0, activation="gelu", layer_norm_eps=eps, batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, depth, norm=nn.LayerNorm(dim, eps=eps), enable_nested_tensor=False)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, images: Tensor) -> Tensor:
        x = self.patch_embed(images).flatten(2).transpose(1, 2)  # (B, P, D)
        x = torch.cat([self.cls_token.expand(len(x), -1, -1), x], dim=1) + self.pos_embed  # (B, P + 1, D)
        return self.head(self.encoder(x)[:, 0])

    @torch.no_grad()
    def load_from(self, model, match_eps: bool = False) -> TorchViT:
        """Copy an ``odeformer.ViT``'s weights (its fused ``qkv`` is ``in_proj_weight``, rows ``[q; k; v]``);
        ``match_eps`` also copies each LayerNorm's epsilon (which turns the inference fast path off)."""
        self.patch_embed.load_state_dict(model.patch_embed.state_dict())
        self.cls_token.copy_(model.cls_token)
        self.pos_embed.copy_(model.pos_embed)
        self.encoder.norm.load_state_dict(model.backbone.norm.state_dict())
        self.head.load_state_dict(model.head.state_dict())
        for block, layer in zip(self.encoder.layers, model.backbone.layers):
            block.norm1.load_state_dict(layer.attention.norm.state_dict())
            block.self_attn.in_proj_weight.copy_(layer.attention.qkv.weight)
            block.self_attn.in_proj_bias.copy_(layer.attention.qkv.bias)
            block.self_attn.out_proj.load_state_dict(layer.attention.proj.state_dict())
            block.norm2.weight.copy_(layer.ffn.norm.weight)
            block.norm2.bias.copy_(layer.ffn.norm.bias)
            block.linear1.load_state_dict(layer.ffn.mlp.fc1.state_dict())
            block.linear2.load_state_dict(layer.ffn.mlp.fc2.state_dict())
            if match_eps:
                block.norm1.eps, block.norm2.eps = layer.attention.norm.eps, layer.ffn.norm.eps
        if match_eps:
            self.encoder.norm.eps = model.backbone.norm.eps
        return self


class Logits(nn.Module):
    """A Hugging Face model called like the library's: ``forward(inputs) -> logits`` (a tensor, not an output
    object), so that the same training step, loss and memory probe drive it."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, inputs: Tensor) -> Tensor:
        return self.model(inputs).logits


def hf_vit(image_size=32, patch_size=4, in_chans=3, num_classes=10, depth=6, dim=128, heads=4) -> Logits:
    """Hugging Face's ``ViTForImageClassification`` of this shape (MLP 4 × dim, qkv bias, sdpa attention)."""
    from transformers import ViTConfig, ViTForImageClassification

    config = ViTConfig(
        hidden_size=dim,
        num_hidden_layers=depth,
        num_attention_heads=heads,
        intermediate_size=4 * dim,
        image_size=image_size,
        patch_size=patch_size,
        num_channels=in_chans,
        num_labels=num_classes,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        layer_norm_eps=1e-5,
    )
    return Logits(_sdpa(ViTForImageClassification, config))


def hf_gpt2(vocab_size=65, max_len=128, depth=6, dim=128, heads=4) -> Logits:
    """Hugging Face's ``GPT2LMHeadModel`` of this shape (its defaults: MLP 4 × dim, ``gelu_new``, tied ``lm_head``;
    dropout off; sdpa attention)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=vocab_size,
        n_positions=max_len,
        n_embd=dim,
        n_layer=depth,
        n_head=heads,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,
        eos_token_id=0,
    )
    return Logits(_sdpa(GPT2LMHeadModel, config))


def have_transformers() -> bool:
    try:
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True
