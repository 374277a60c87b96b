"""Build a run (dataset, model, description) from a plain config dict, without Hydra.

The training entry point composes the config with Hydra and calls :func:`build`; ``odeformer-diagnose`` and the
reproduction script rebuild a finished run from the resolved config stored in its checkpoints, and :func:`load_run`
returns that run's model with its best weights.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from torch import nn

from .checkpoints import load_checkpoint
from .data import TaskData, load

# what each model trains on, and the sizes it takes from the dataset
KINDS = {"ViT": "image", "CausalLM": "text", "MaskedLM": "sequence", "NodeClassifier": "graph", "DIFFormer": "graph"}
SIZES = {
    "ViT": ("image_size", "in_chans", "num_classes"),
    "CausalLM": ("vocab_size",),
    "MaskedLM": ("vocab_size", "max_len", "num_classes", "pad_id"),
    "NodeClassifier": ("in_features", "num_classes"),
    "DIFFormer": ("in_features", "num_classes"),
}
MODEL_FOR_KIND = {"image": "vit", "text": "causal_lm", "sequence": "masked_lm", "graph": "node_classifier"}
CONFIG_NAMES = {
    "ViT": "vit",
    "CausalLM": "causal_lm",
    "MaskedLM": "masked_lm",
    "NodeClassifier": "node_classifier",
    "DIFFormer": "difformer",
}


DATA_KINDS = {
    "digits": "image",
    "fashion_mnist": "image",
    "planetoid": "graph",
    "shakespeare": "text",
    "sst2": "sequence",
}
"""The kind of data each dataset gives (``synthetic``: its ``task`` option), known before any file is read."""


def _check_kind(model_name: str, data_name: str, kind: str | None) -> None:
    if kind is not None and KINDS.get(model_name) != kind:
        raise UsageError(
            f"model {model_name} trains on {KINDS.get(model_name)} data but data={data_name} is {kind} data; use "
            f"model={MODEL_FOR_KIND[kind]}."
        )


class UsageError(ValueError):
    """A configuration that cannot run; reported in one line."""


def target(node: dict[str, Any]) -> Any:
    """The callable a config node's ``_target_`` names (``module.attribute``)."""
    module, _, attribute = node["_target_"].rpartition(".")
    return getattr(importlib.import_module(module), attribute)


def _arguments(node: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in node.items() if not k.startswith("_")}


def build(config: dict[str, Any]) -> tuple[TaskData, nn.Module, dict[str, Any]]:
    """The dataset, the model and the run's description from a resolved config (``solver``, ``model``, ``data``)."""
    solver, model_node, data_node = config["solver"], config["model"], config["data"]
    model_name = model_node["_target_"].rsplit(".", 1)[-1]
    options = data_node.get("options") or {}
    _check_kind(model_name, data_node["name"], DATA_KINDS.get(data_node["name"]) or options.get("task"))
    preset = target(solver)(**_arguments(solver))  # a bad solver option fails before the data is read
    data = load(data_node["name"], data_node.get("root"), **options)
    _check_kind(model_name, data_node["name"], data.kind)
    sizes = {key: data.meta[key] for key in SIZES[model_name]}
    model = target(model_node)(solver=preset, **_arguments(model_node), **sizes)
    info = {
        "solver": getattr(preset, "name", None) or solver["name"],
        "model": CONFIG_NAMES[model_name],
        "data": data_node["name"],
        "depth": model_node["depth"],
        "dt": model.backbone.layers[0].dt if model.backbone.layers else preset.T / model_node["depth"],
        "config": config,
    }
    return data, model, info


def load_run(run_dir: str | Path, checkpoint: str = "best.pt") -> tuple[TaskData, nn.Module, dict[str, Any]]:
    """A finished run's dataset, model (with the checkpoint's weights, in eval mode) and description."""
    payload = load_checkpoint(Path(run_dir) / checkpoint)
    data, model, info = build(payload["info"]["config"])
    model.load_state_dict(payload["model"])
    return data, model.eval(), info
