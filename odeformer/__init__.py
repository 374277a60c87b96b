"""odeformer: transformers whose depth is time.

A layer is one step ``dt`` of an integrator chosen by name (``solver="full_wave"``) from :data:`solvers.STEPPERS` (and
the continuous-depth solvers), built on the ``solvers`` package. Fields (:mod:`odeformer.fields`), chain-rule layers
(:mod:`odeformer.joint`), the solvers (:mod:`odeformer.registry`), the layer (:mod:`odeformer.layer`), the backbone and
its builder (:mod:`odeformer.backbone`) and the task models (:class:`ViT`, :class:`CausalLM`, :class:`MaskedLM`,
:class:`NodeClassifier`, :class:`DIFFormer`). Old names (``preset``, ``PRESETS``, ``Preset``, ``LayerSpec``, ...)
resolve to the new ones with a warning (:data:`odeformer.RENAMED`).
"""

import os as _os
import sys as _sys


def _interrupted_while_starting() -> None:
    """Ctrl-C while an ``odeformer-*`` command is still importing (torch takes seconds): one line and exit 130 instead
    of a traceback from deep inside an import. Anywhere else (a notebook, a script) the interrupt goes on as it was."""
    if _os.path.basename(_sys.argv[0] if _sys.argv else "").startswith("odeformer-"):
        print("interrupted while starting up; nothing was written", file=_sys.stderr)
        raise SystemExit(130) from None


_PUBLIC = {
    "Backbone": "backbone", "Fields": "backbone", "SolverSchedule": "backbone", "schedule": "backbone",
    "transformer": "backbone", "ContinuousSolver": "continuous", "AttentionField": "fields",
    "FeedForward": "fields", "SimpleAttentionField": "fields", "graph_mask": "fields", "from_hf": "hf",
    "JointJVP": "joint", "JointLayerNorm": "joint", "JointMLP": "joint", "JointSequential": "joint", "Layer": "layer",
    "Solver": "registry", "as_solver": "registry", "check_solver": "checking", "solver": "registry",
    "solver_names": "registry", "CausalLM": "tasks",
    "DIFFormer": "tasks", "MaskedLM": "tasks", "NodeClassifier": "tasks", "ViT": "tasks",
}  # fmt: skip
"""Each public name and the submodule that defines it. They are imported on first use (``odeformer.ViT``, ``from
odeformer import ViT``), so that ``import odeformer`` (and every command's ``--help`` or usage error) does not wait
for torch."""

__version__ = "0.1.0"


__all__ = [
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
    "schedule",
    "solver",
    "solver_names",
    "transformer",
]


def __getattr__(name: str):
    import importlib

    if name in _PUBLIC:
        try:
            value = getattr(importlib.import_module(f".{_PUBLIC[name]}", __name__), name)
        except KeyboardInterrupt:
            _interrupted_while_starting()
            raise
        globals()[name] = value  # found once; later reads do not come here
        return value
    try:
        return _renamed(name, _Namespace(globals()))
    except AttributeError:
        raise AttributeError(f"module 'odeformer' has no attribute {name!r}") from None


RENAMED = {
    "preset": "solver",
    "Preset": "Solver",
    "LayerSpec": "Solver",
    "layer_spec": "solver",
    "spec_of": "as_solver",
    "check_preset": "check_solver",
}
"""Old public names of ``odeformer``, each resolved to its new one with a warning (``odeformer.preset`` ->
``odeformer.solver``); ``spec_for_stepper`` is ``Solver.for_stepper``, and ``SOLVERS`` (the table of layers, now
:data:`solvers.STEPPERS` with the continuous-depth solvers) reads as a dict of every name's record."""


def _renamed(name: str, namespace: dict) -> object:
    """The object an old name stands for, with a DeprecationWarning naming the new one; ``AttributeError`` if
    ``name`` is not an old name."""
    import warnings

    if name == "spec_for_stepper":
        warnings.warn("odeformer.spec_for_stepper is now odeformer.Solver.for_stepper", DeprecationWarning, 3)
        return namespace["Solver"].for_stepper
    if name in ("SOLVERS", "PRESETS", "LAYER_SPECS"):
        warnings.warn(
            f"odeformer.{name} is gone: solvers.STEPPERS is the one table of names (odeformer.solver_names() adds the "
            "continuous-depth solvers) and odeformer.as_solver(name) a name's record",
            DeprecationWarning,
            3,
        )
        return {each: namespace["as_solver"](each) for each in namespace["solver_names"]()}
    if name not in RENAMED:
        raise AttributeError(name)
    warnings.warn(f"odeformer.{name} is now odeformer.{RENAMED[name]}", DeprecationWarning, 3)
    return namespace[RENAMED[name]]


class _Namespace(dict):
    """This module's names, a public one imported when it is read."""

    def __missing__(self, key: str):
        return getattr(_sys.modules[__name__], key)


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})
