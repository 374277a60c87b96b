"""Task models: each is an embedding, a :class:`~odeformer.backbone.Backbone` integrated in depth, and a head.

Each module registers its models (:func:`register`, a :class:`TaskSpec` beside the class) in :data:`TASK_MODELS`:
the kind of data a model trains on, the sizes it reads from the data, its objective and its diagnostic batch. A new
task model is one module here, its class and its registration, imported below.
"""

from ._common import TASK_MODELS, TaskModel, TaskSpec, register, task_of
from .graph import DIFFormer, NodeClassifier
from .lm import CausalLM, MaskedLM
from .vit import ViT

__all__ = [
    "TASK_MODELS",
    "CausalLM",
    "DIFFormer",
    "MaskedLM",
    "NodeClassifier",
    "TaskModel",
    "TaskSpec",
    "ViT",
    "register",
    "task_of",
]
