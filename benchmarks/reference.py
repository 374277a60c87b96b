"""A hand-written nanoGPT-style pre-LN ViT with the same maths and parameter names as ``odeformer.ViT`` with
``solver="diffusion", dt=1``: the baseline that ``euler_vs_reference`` compares the library against."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, hidden: int):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim, eps=1e-6)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        B, N, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, N, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        y = F.scaled_dot_product_attention(q, k, v)  # (B, H, N, Dh)
        x = x + self.proj(y.transpose(1, 2).reshape(B, N, D))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class ReferenceViT(nn.Module):
    def __init__(self, image_size=32, patch_size=4, in_chans=3, num_classes=10, depth=6, dim=128, heads=4):
        super().__init__()
        self.patch_embed = nn.Conv2d(in_chans, dim, patch_size, stride=patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, (image_size // patch_size) ** 2 + 1, dim))
        self.blocks = nn.ModuleList(Block(dim, heads, 4 * dim) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, images):
        x = self.patch_embed(images).flatten(2).transpose(1, 2)  # (B, P, D)
        x = torch.cat([self.cls_token.expand(len(x), -1, -1), x], dim=1) + self.pos_embed
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x)[:, 0])

    def load_from(self, model) -> ReferenceViT:
        """Copy the weights of an ``odeformer.ViT`` (diffusion preset) so both compute the same function."""
        with torch.no_grad():
            self.patch_embed.load_state_dict(model.patch_embed.state_dict())
            self.norm.load_state_dict(model.backbone.norm.state_dict())
            self.head.load_state_dict(model.head.state_dict())
            self.cls_token.copy_(model.cls_token)
            self.pos_embed.copy_(model.pos_embed)
            for block, layer in zip(self.blocks, model.backbone.layers):
                block.ln1.load_state_dict(layer.attention.norm.state_dict())
                block.qkv.load_state_dict(layer.attention.qkv.state_dict())
                block.proj.load_state_dict(layer.attention.proj.state_dict())
                block.ln2.weight.copy_(layer.ffn.norm.weight)
                block.ln2.bias.copy_(layer.ffn.norm.bias)
                block.fc1.load_state_dict(layer.ffn.mlp.fc1.state_dict())
                block.fc2.load_state_dict(layer.ffn.mlp.fc2.state_dict())
        return self
