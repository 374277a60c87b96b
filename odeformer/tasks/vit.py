"""Vision Transformer with the depth loop as an integrator."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..backbone import SolverSchedule, transformer
from ._common import Footprint, TaskModel, TaskSpec, register, transformer_footprint


class ViT(TaskModel):
    """Patch embedding -> [CLS] + learned positions -> backbone -> CLS token or mean pooling -> linear head.

    ``ViT(image_size=8, patch_size=2, in_chans=1, num_classes=10, depth=6, dim=64, heads=4, solver="full_wave")``
    maps images ``(B, C, H, W)`` to logits ``(B, num_classes)``.
    """

    def __init__(
        self,
        image_size: int = 8,
        patch_size: int = 2,
        in_chans: int = 1,
        num_classes: int = 10,
        depth: int = 6,
        dim: int = 64,
        heads: int = 4,
        dt: float | None = None,
        solver: SolverSchedule = "diffusion",
        pool: str = "cls",
        **backbone_options,
    ):
        super().__init__()
        for name, value in (("image_size", image_size), ("patch_size", patch_size), ("in_chans", in_chans)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}.")
        if image_size % patch_size:
            raise ValueError(f"image_size must be divisible by patch_size: got {image_size} and {patch_size}.")
        if pool not in ("cls", "mean"):
            raise ValueError(f"pool must be 'cls' or 'mean', got {pool!r}.")
        self.image_size, self.in_chans, self.pool = image_size, in_chans, pool
        num_patches = (image_size // patch_size) ** 2
        self.patch_embed = nn.Conv2d(in_chans, dim, kernel_size=patch_size, stride=patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.randn(1, num_patches + 1, dim) * 0.02)
        self.backbone = transformer(depth, dim, heads, solver, dt, **backbone_options)
        self.head = nn.Linear(dim, num_classes)

    def encode(self, images: Tensor, *, record: list | None = None) -> Tensor:
        """Features of every token after the backbone (and its final norm), ``(B, P + 1, D)``: CLS first."""
        expected = (self.in_chans, self.image_size, self.image_size)
        if images.dim() != 4 or tuple(images.shape[1:]) != expected:
            raise ValueError(
                f"ViT expects images of shape (B, {', '.join(map(str, expected))}), got {tuple(images.shape)}."
            )
        x = self.patch_embed(images).flatten(2).transpose(1, 2)  # (B, P, D)
        x = torch.cat([self.cls_token.expand(len(x), -1, -1), x], dim=1) + self.pos_embed  # (B, P + 1, D)
        return self.backbone(x, record=record)

    def forward(self, images: Tensor, *, record: list | None = None) -> Tensor:
        x = self.encode(images, record=record)  # (B, P + 1, D)
        return self.head(x[:, 0] if self.pool == "cls" else x[:, 1:].mean(1))


def _diagnostic_batch(data, model: ViT, size: int):
    """The first ``size`` validation images; the [CLS] token is left out of the token measures."""
    return (data.splits["val"][0][:size],), {"drop_first": True}


def _footprint(options: dict, meta: dict, blocks: int) -> Footprint:
    """Patches and the [CLS] token as tokens; the patch embedding and the positions as the embedding."""
    patch, d = options.get("patch_size") or 1, options["dim"]
    tokens = (meta.get("image_size", 1) // patch) ** 2 + 1
    embed = patch * patch * meta.get("in_chans", 1) * d + tokens * d
    return transformer_footprint(options, blocks, tokens, embed, meta.get("num_classes", 1))


register(
    TaskSpec(
        "vit",
        ViT,
        data="image",
        sizes=("image_size", "in_chans", "num_classes"),
        objective="classification",
        diagnostic_batch=_diagnostic_batch,
        first_token="the [CLS] token",
        options_to=transformer,
        set_by_model=("mask",),
        default=True,
        footprint=_footprint,
    )
)
