"""odeformer: transformers whose depth is time.

A layer is one step ``dt`` of an integrator chosen by name (``solver="full_wave"``) from :data:`LAYER_SPECS`, built on
the ``solvers`` package. Fields (:mod:`odeformer.fields`), chain-rule layers (:mod:`odeformer.joint`), the named solvers
(:mod:`odeformer.presets`), the layer (:mod:`odeformer.layer`), the backbone (:mod:`odeformer.backbone`) and the
task models (:class:`ViT`, :class:`CausalLM`, :class:`MaskedLM`, :class:`NodeClassifier`, :class:`DIFFormer`).
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
    from .backbone import Backbone, Fields, schedule, transformer
    from .fields import AttentionField, FeedForward, SimpleAttentionField, graph_mask
    from .hf import from_hf
    from .joint import JointJVP, JointLayerNorm, JointMLP, JointSequential
    from .layer import Layer
    from .presets import (
        LAYER_SPECS,
        LayerSpec,
        Preset,
        check_preset,
        layer_spec,
        register_solver,
        solver_names,
        spec_for_stepper,
        spec_of,
    )
    from .tasks import CausalLM, DIFFormer, MaskedLM, NodeClassifier, ViT
except KeyboardInterrupt:
    _interrupted_while_starting()
    raise

__version__ = "0.1.0"

# old names that the README and the examples use: preset (layer_spec), PRESETS (LAYER_SPECS), Preset (LayerSpec)
preset, PRESETS = layer_spec, LAYER_SPECS

__all__ = [
    "LAYER_SPECS",
    "PRESETS",
    "AttentionField",
    "Backbone",
    "Fields",
    "CausalLM",
    "DIFFormer",
    "FeedForward",
    "JointJVP",
    "JointLayerNorm",
    "JointMLP",
    "JointSequential",
    "Layer",
    "LayerSpec",
    "MaskedLM",
    "NodeClassifier",
    "Preset",
    "SimpleAttentionField",
    "ViT",
    "check_preset",
    "from_hf",
    "graph_mask",
    "layer_spec",
    "preset",
    "register_solver",
    "schedule",
    "solver_names",
    "spec_for_stepper",
    "spec_of",
    "transformer",
]
