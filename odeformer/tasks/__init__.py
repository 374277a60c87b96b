"""Task models: each is an embedding, a :class:`~odeformer.backbone.Backbone` integrated in depth, and a head."""

from .graph import DIFFormer, NodeClassifier
from .lm import CausalLM, MaskedLM
from .vit import ViT

__all__ = ["CausalLM", "DIFFormer", "MaskedLM", "NodeClassifier", "ViT"]
