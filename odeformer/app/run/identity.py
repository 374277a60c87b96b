"""A run's identity: the solver, model, data and depth its config names, known without building it, and the run
record a checkpoint keeps them in.

:func:`describe` gives those four names from a resolved config, as :func:`~odeformer.app.run.builder.build` names its
run; a checkpoint stores them in its run record (:func:`run_record`) beside its config, so a checkpoint without a
config can still be told apart from another run's. The model's name is the registered task model's
(:data:`odeformer.tasks.TASK_MODELS`) whose ``_target_`` the config's model node holds (:func:`model_targets`).
"""

from __future__ import annotations

from typing import Any

from ...tasks import TASK_MODELS, TaskSpec

IDENTITY = ("solver", "model", "data", "depth")
"""What a run's record names even without its config."""

RUN_RECORD = "run_record"
"""The checkpoint key of the run record: the dict :func:`~odeformer.app.run.builder.build` makes beside the model,
naming the run's solver, model, data and depth, with its ``dt`` and resolved ``config``, the command line's
``overrides``, and where they apply its ``scheme`` (coefficients and derived claims) and its text ``vocabulary``."""
EARLIER_KEYS = ("info",)
"""Where checkpoints of the earlier format (``odeformer-checkpoint-1``) hold their run record."""


def run_record(payload: dict[str, Any]) -> dict[str, Any]:
    """The run record a checkpoint's ``payload`` holds (:data:`RUN_RECORD`, or an earlier format's key); ``{}`` when
    it holds none."""
    for key in (RUN_RECORD, *EARLIER_KEYS):
        record = payload.get(key)
        if isinstance(record, dict):
            return record
    return {}


def model_targets() -> dict[str, TaskSpec]:
    """The ``_target_`` a model node may name, and its registered task model (:data:`odeformer.tasks.TASK_MODELS`)."""
    return {spec.target: spec for spec in TASK_MODELS.values()}


def model_name(target: Any) -> str | None:
    """The config name of the task model a model node's ``_target_`` names (None: not a registered one)."""
    spec = model_targets().get(target)
    return spec.name if spec else None


def default_model(kind: str) -> str | None:
    """The config name of the task model the commands choose for ``kind`` of data (None: no model trains on it)."""
    return next((spec.name for spec in TASK_MODELS.values() if spec.data == kind and spec.default), None)


def describe(config: dict[str, Any]) -> dict[str, Any]:
    """The solver, model, data and depth names :func:`~odeformer.app.run.builder.build` gives ``config``'s run, without
    building it."""
    target = config["model"].get("_target_")
    stepper = config["solver"].get("stepper")  # a class of one's own: the layer is named after it
    return {
        "solver": stepper.rsplit(".", 1)[-1] if isinstance(stepper, str) and stepper else config["solver"].get("name"),
        "model": model_name(target) or str(target or "").rsplit(".", 1)[-1],
        "data": config["data"].get("name"),
        "depth": config["model"].get("depth"),
    }
