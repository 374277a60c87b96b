"""Task models: each is an embedding, a :class:`~odeformer.backbone.Backbone` integrated in depth, and a head.

Each module registers its models (:func:`register`, a :class:`TaskSpec` beside the class) in :data:`TASK_MODELS`:
the kind of data a model trains on, the sizes it reads from the data, its objective, its diagnostic batch and its
footprint (what it holds and keeps, counted before it is built). A new task model is one module here, its class and
its registration, imported below.
"""

from ._common import TASK_MODELS, Footprint, TaskModel, TaskSpec, register, task_of, transformer_footprint
from .graph import DIFFormer, NodeClassifier
from .lm import CausalLM, MaskedLM
from .vit import ViT

__all__ = [
    "TASK_MODELS",
    "CausalLM",
    "DIFFormer",
    "Footprint",
    "MaskedLM",
    "NodeClassifier",
    "TaskModel",
    "TaskSpec",
    "ViT",
    "register",
    "task_of",
    "transformer_footprint",
]
