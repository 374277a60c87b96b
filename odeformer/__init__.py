"""odeformer: transformers whose depth is time.

A layer is one step ``dt`` of an integrator chosen by name (``solver="full_wave"``) from :data:`SOLVERS`, built on
the ``solvers`` package. Fields (:mod:`odeformer.fields`), chain-rule layers (:mod:`odeformer.joint`), the solvers
(:mod:`odeformer.registry`), the layer (:mod:`odeformer.layer`), the backbone and its builder
(:mod:`odeformer.backbone`) and the task models (:class:`ViT`, :class:`CausalLM`, :class:`MaskedLM`,
:class:`NodeClassifier`, :class:`DIFFormer`). Old names (``preset``, ``PRESETS``, ``Preset``, ``LayerSpec``, ...)
resolve to the new ones with a warning (:data:`odeformer.registry.RENAMED`).
"""

import os as _os
import sys as _sys


def _interrupted_while_starting() -> None:
    """Ctrl-C while an ``odeformer-*`` command is still importing (torch takes seconds): one line and exit 130 instead
    of a traceback from deep inside an import. Anywhere else (a notebook, a script) the interrupt goes on as it was."""
    if _os.path.basename(_sys.argv[0] if _sys.argv else "").startswith("odeformer-"):
        print("interrupted while starting up; nothing was written", file=_sys.stderr)
        raise SystemExit(130) from None


try:
    from .backbone import Backbone, Fields, SolverSchedule, schedule, transformer
    from .continuous import ContinuousSolver
    from .fields import AttentionField, FeedForward, SimpleAttentionField, graph_mask
    from .hf import from_hf
    from .joint import JointJVP, JointLayerNorm, JointMLP, JointSequential
    from .layer import Layer
    from .registry import SOLVERS, Solver, as_solver, check_solver, register_solver, solver, solver_names
    from .tasks import CausalLM, DIFFormer, MaskedLM, NodeClassifier, ViT
except KeyboardInterrupt:
    _interrupted_while_starting()
    raise

__version__ = "0.1.0"


__all__ = [
    "SOLVERS",
    "AttentionField",
    "Backbone",
    "CausalLM",
    "ContinuousSolver",
    "DIFFormer",
    "FeedForward",
    "Fields",
    "JointJVP",
    "JointLayerNorm",
    "JointMLP",
    "JointSequential",
    "Layer",
    "MaskedLM",
    "NodeClassifier",
    "SimpleAttentionField",
    "Solver",
    "SolverSchedule",
    "ViT",
    "as_solver",
    "check_solver",
    "from_hf",
    "graph_mask",
    "register_solver",
    "schedule",
    "solver",
    "solver_names",
    "transformer",
]


def __getattr__(name: str):
    from .registry import renamed

    try:
        return renamed(name, globals())
    except AttributeError:
        raise AttributeError(f"module 'odeformer' has no attribute {name!r}") from None
