"""odeformer: transformers whose depth is time.

A layer is one step ``dt`` of an integrator chosen by name (``solver="full_wave"``) from :data:`PRESETS`, built on the
``solvers`` package. Fields (:mod:`odeformer.fields`), chain-rule layers (:mod:`odeformer.joint`), the backbone
(:mod:`odeformer.model`) and four task models (:class:`ViT`, :class:`CausalLM`, :class:`MaskedLM`,
:class:`NodeClassifier`).
"""

from .blocks import PRESETS, Layer, Preset, check_preset, derive, preset, solver_names
from .fields import AttentionField, FeedForward, SimpleAttentionField, graph_mask
from .hf import from_hf
from .joint import JointJVP, JointLayerNorm, JointMLP, JointSequential
from .model import Backbone, schedule, transformer
from .tasks import CausalLM, DIFFormer, MaskedLM, NodeClassifier, ViT

__version__ = "0.1.0"

__all__ = [
    "PRESETS",
    "AttentionField",
    "Backbone",
    "CausalLM",
    "DIFFormer",
    "FeedForward",
    "JointJVP",
    "JointLayerNorm",
    "JointMLP",
    "JointSequential",
    "Layer",
    "MaskedLM",
    "NodeClassifier",
    "Preset",
    "SimpleAttentionField",
    "ViT",
    "check_preset",
    "derive",
    "from_hf",
    "graph_mask",
    "preset",
    "schedule",
    "solver_names",
    "transformer",
]
