"""Build a run (dataset, model, run record) from a plain config dict, without Hydra: the application's one builder.

The training entry point composes the config with Hydra and calls :func:`build`; ``odeformer-diagnose`` and the
reproduction script rebuild a finished run from the resolved config stored in its checkpoints, and :func:`load_run`
returns that run's model with its best weights.

A config only reaches the package's registered builders: a solver node's ``_target_`` is one of
:data:`SOLVER_TARGETS`, a model node's a registered task model's (:func:`model_targets`), the dataset a name of
:data:`odeformer.data.DATASETS`, and a config read from a file (``source=``) names only registered solvers: a scheme
of your own (``solver.name: module.Class``) is imported only when the command line names it (``stepper=``),
never because a file says so. Sizes are checked, and the memory a run needs estimated (:func:`estimate_memory`),
before the model is built.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import re
from pathlib import Path
from typing import Any

import torch
from torch import nn

import solvers

from ...data import TaskData, data_kind, load
from ...tasks import TaskSpec
from .bounds import check_config
from .bounds import source_prefix as _from
from .checkpoints import load_checkpoint, load_weights
from .config import CONTINUOUS_TARGET, SOLVER_TARGET
from .config import UsageError as UsageError  # a configuration that cannot run (defined where no torch is needed)
from .identity import default_model, model_targets, run_record
from .schemes import SchemeNameError, check_scheme_name, import_scheme, own_scheme

SOLVER_TARGETS = (SOLVER_TARGET, CONTINUOUS_TARGET)
"""The ``_target_`` a solver node may name: a (discrete) solver, or a continuous-depth solver."""


def _check_kind(spec: TaskSpec, data_name: str, kind: str | None) -> None:
    if default_model(kind) is not None and spec.data != kind:  # a kind no model takes: the loader's error says why
        raise UsageError(
            f"model {spec.model.__name__} trains on {spec.data} data but data={data_name} is {kind} data; use "
            f"model={default_model(kind)}."
        )


def target(node: dict[str, Any], allowed: tuple[str, ...], group: str, source: Path | None = None) -> Any:
    """What a config node's ``_target_`` names among ``allowed``: a solver builder, or a model's :class:`TaskSpec`; any
    other import path is refused in one line (nothing is imported)."""
    name = node.get("_target_") if isinstance(node, dict) else None
    if name not in allowed:
        raise UsageError(
            f"{_from(source)}{group}._target_={name!r} is not one of odeformer's {group}s ({', '.join(allowed)}); "
            "refused: a config reaches only the package's registered models, solvers and data, never an arbitrary "
            "import path."
        )
    import odeformer

    from ... import continuous

    builders = {SOLVER_TARGET: odeformer.solver, CONTINUOUS_TARGET: continuous.continuous}
    return {**model_targets(), **builders}[name]


def _arguments(node: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in node.items() if not k.startswith("_")}


def _own(solver: dict[str, Any]) -> str | None:
    """The ``module.Class`` of a scheme of the user's own that a (discrete) solver node names, else ``None``."""
    return own_scheme(solver.get("name")) if solver.get("_target_") != CONTINUOUS_TARGET else None


def check_solver(solver: dict[str, Any], source: Path | None, stepper: str | None) -> str | None:
    """The ``module.Class`` of the solver node's scheme of the user's own (its name checked, its module not run),
    else None. A config read from a file names registered solvers only; its scheme of the user's own is imported
    only if the command line names the same ``module.Class`` (``stepper``)."""
    from ...registry import solver_names

    own = _own(solver)
    if source is not None:
        if own is not None and own != stepper:
            asked = f"; the command line names {stepper!r}" if stepper else ""
            raise UsageError(
                f"{source}: its config names a scheme of your own, solver={own!r}{asked}; refused: a path stored "
                "in a file is not imported (a file could name any code). If you trust it, name it on the command "
                f"line (--stepper {own})."
            )
        names = solver_names("continuous" if solver.get("_target_") == CONTINUOUS_TARGET else "discrete")
        if solver.get("name") not in names and own is None:
            raise UsageError(
                f"{source}: its config names solver {solver.get('name')!r}, which is not registered; refused: a "
                f"stored config may name only registered solvers ({', '.join(names)})."
            )
        ffn = solver.get("ffn")
        if ffn is not None and ffn not in solver_names("discrete"):
            raise UsageError(f"{source}: its config names ffn scheme {ffn!r}, which is not registered; refused.")
    if own is not None:
        try:
            check_scheme_name(own)
        except SchemeNameError as error:
            raise UsageError(f"{_from(source)}{error}") from None
    return own


def make_solver(build: Any, solver: dict[str, Any], own: str | None, source: Path | None = None) -> Any:
    """The solver ``build`` (:func:`target`) makes from the node ``solver``, a scheme of the user's own (``own``)
    imported first: its module runs now, one line if it raises or holds no such class."""
    if own is not None:
        try:
            import_scheme(own)
        except SchemeNameError as error:
            raise UsageError(f"{_from(source)}{error}") from None
    return build(**_arguments(solver))


def build(
    config: dict[str, Any], source: Path | None = None, stepper: str | None = None, device: str | None = None
) -> tuple[TaskData, nn.Module, dict[str, Any]]:
    """The dataset, the model and the run record (:data:`~odeformer.app.run.identity.RUN_RECORD`) from a resolved
    config (``solver``, ``model``, ``data``).

    ``source``: the file the config was read from (a checkpoint), named in errors; such a config's own scheme
    (``solver.name: module.Class``) is imported only if ``stepper`` (from the command line) names the same class. A
    scheme of the user's own is imported last, after its name (:func:`~odeformer.app.run.schemes.check_scheme_name`),
    the sizes, the data and the cost are checked, so that nothing else it could be refused for waits on running its
    module. Sizes that are not positive, and a model that cannot fit in this machine's memory, are one-line errors
    before it is built. The config is checked once (:func:`~odeformer.app.run.bounds.check_config`: a
    :class:`~odeformer.app.run.bounds.Checked` one is taken as it is; one read from a file is read as today's).
    ``device="meta"`` builds the model's weights as shapes only (nothing allocated, so its memory is not checked):
    what :func:`parameter_count` reads."""
    config = check_config(config, source)
    solver, model_node, data_node = config["solver"], config["model"], config["data"]
    solver_target = target(solver, SOLVER_TARGETS, "solver", source)
    spec = target(model_node, tuple(model_targets()), "model", source)
    own = check_solver(solver, source, stepper)  # a scheme of the user's: its module is run after every other check
    options = data_node.get("options") or {}
    _check_kind(spec, data_node["name"], data_kind(data_node["name"], options))
    chosen = make_solver(solver_target, solver, None) if own is None else None  # a bad option fails before the data
    data = load(data_node["name"], data_node.get("root"), **options)
    _check_kind(spec, data_node["name"], data.kind)
    sizes = {key: data.meta[key] for key in spec.sizes}
    if device != "meta":  # a model on the meta device holds shapes, no memory
        check_memory(config, data.meta, source)
    chosen = chosen or make_solver(solver_target, solver, own, source)
    try:
        with torch.device(device) if device is not None else contextlib.nullcontext():
            model = spec.model(solver=chosen, **_arguments(model_node), **sizes)
    except TypeError as error:  # a key the model (or the backbone it passes its options to) does not take
        unknown = re.search(r"unexpected keyword argument '(\w+)'", str(error))
        if unknown is None:
            raise
        raise UsageError(
            f"{_from(source)}model.{unknown.group(1)} is not a setting of the {spec.name} model; remove it."
        ) from None
    step = model_node.get("dt")
    record = {
        "solver": getattr(chosen, "name", None) or solver["name"],
        "model": spec.name,
        "data": data_node["name"],
        "depth": model_node["depth"],
        "dt": _step(model, chosen, model_node["depth"], step),
        "config": dict(config),  # a plain dict: a checkpoint holds plain values only
    }
    if getattr(chosen, "block_stepper", None) is not None and chosen.block_stepper.__name__ == "Split":
        record["splitting"] = chosen.splitting  # how the FFN enters the layer: lie or strang
    if getattr(chosen, "scheme", None):  # a scheme made from coefficients: they and its derived claims
        record["scheme"] = chosen.scheme
    elif own is not None:  # a class of one's own: what it claims, which a resume checks it still does
        record["scheme"] = {"class": own, "claims": dataclasses.asdict(solvers.Claims.of(chosen.stepper))}
    return data, model, record


def parameter_count(config: dict[str, Any], stepper: str | None = None) -> int:
    """The number of parameters the model of ``config`` has, without training it or allocating its weights: the
    model built on the meta device (its data read for the sizes it gives), every parameter counted once (a tied or
    shared one included). Equal to ``sum(p.numel() for p in model.parameters())`` of the model :func:`build` makes."""
    _, model, _ = build(config, stepper=stepper, device="meta")
    return sum(p.numel() for p in model.parameters())


def _step(model: nn.Module, chosen: Any, depth: int, given: float | None) -> float:
    """The step the model's layers take (``T / depth`` under ``parameterization=ode`` and for a continuous solver)."""
    layers = getattr(getattr(model, "backbone", None), "layers", None)
    if layers:
        return layers[0].dt
    return chosen.T / depth if hasattr(chosen, "T") else (chosen.dt if given is None else given)


def load_run(
    run_dir: str | Path, checkpoint: str = "best.pt", stepper: str | None = None
) -> tuple[TaskData, nn.Module, dict[str, Any]]:
    """A finished run's dataset, model (with the checkpoint's weights, in eval mode) and run record. The config
    stored in the checkpoint reaches only registered models, solvers and data; a run of a scheme of your own needs
    ``stepper`` (``module.Class``, as given on the command line) to be rebuilt."""
    path = Path(run_dir) / checkpoint
    if not Path(run_dir).is_dir():
        raise UsageError(
            f"{run_dir} does not exist or is not a folder; give a run directory (one holding {checkpoint})."
        )
    payload = load_checkpoint(path)
    config = run_record(payload).get("config")
    if not isinstance(config, dict) or not all(isinstance(config.get(k), dict) for k in ("solver", "model", "data")):
        raise UsageError(f"{path} stores no run config (solver, model, data), so its run cannot be rebuilt.")
    data, model, record = build(config, source=path, stepper=stepper)
    load_weights(model, payload["model"], path)
    return data, model.eval(), record


# -- sizes and memory ---------------------------------------------------------------------------------------------


def estimate_memory(config: dict[str, Any], meta: dict[str, Any], training: bool = True) -> dict[str, float] | None:
    """A lower estimate, in bytes, of the memory the run takes: ``parameters`` (with their gradients and AdamW's two
    moments when ``training``) and ``activations`` (what one batch's forward keeps: every layer's share for the
    backward pass when ``training``, unless the layers are recomputed; every layer's state when not). What the model
    holds and keeps is its task's own count (:attr:`odeformer.tasks.TaskSpec.footprint`); this adds the batch (its
    share per process under ``torchrun``), the precision and what training keeps. None: the task gives no count."""
    model, solver, data, train = config["model"], config["solver"], config["data"], config.get("train") or {}
    spec = model_targets()[model["_target_"]]
    if spec.footprint is None:
        return None
    depth = model["depth"]
    continuous = solver.get("_target_") == SOLVER_TARGETS[1]
    blocks = 1 if (continuous or model.get("tie_weights")) else depth
    footprint = spec.footprint(_arguments(model), meta, blocks)
    world = max(1, int(os.environ.get("WORLD_SIZE", "1")))
    batch = math.ceil(data.get("batch_size", 1) / world) if footprint.per_item else 1
    cuda = train.get("device") == "cuda" or (train.get("device", "auto") == "auto" and torch.cuda.is_available())
    bf16 = train.get("precision") == "bf16" or (train.get("precision", "auto") == "auto" and cuda)
    width = 2 if bf16 else 4
    if not training:
        layers_kept, per_layer = depth + 1, footprint.state  # the diagnostics keep every layer's state
    elif model.get("checkpoint") or (continuous and solver.get("adjoint")):
        layers_kept, per_layer = 1, footprint.layer
    else:
        layers_kept, per_layer = depth, footprint.layer
    return {
        "parameters": float(footprint.parameters) * (16 if training else 4),
        "parameter_count": float(footprint.parameters),
        "activations": float(batch * (per_layer * layers_kept + footprint.head)) * width,
    }


def memory_limit(config: dict[str, Any]) -> tuple[float, str]:
    """The memory the run's device has in all, in bytes, and a name for it: a CUDA device's, else the machine's."""
    train = config.get("train") or {}
    device = train.get("device", "auto")
    if device in ("cuda", "auto") and torch.cuda.is_available():
        index = int(os.environ.get("LOCAL_RANK", "0"))
        return float(torch.cuda.get_device_properties(index).total_memory), f"CUDA device {index}'s"
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not a POSIX system: no bound known
        return math.inf, "this machine's"
    return float(total), "this machine's"


def _bytes(value: float) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if value >= size:
            return f"{value / size:.3g} {unit}"
    return f"{value / 1e3:.3g} kB"


def check_memory(
    config: dict[str, Any], meta: dict[str, Any], source: Path | None = None, training: bool = True
) -> None:
    """Refuse, in one line with the estimate and the limit, a run whose :func:`estimate_memory` exceeds the memory of
    the device it would run on."""
    estimate = estimate_memory(config, meta, training)
    if estimate is None:
        return
    need = estimate["parameters"] + estimate["activations"]
    limit, where = memory_limit(config)
    if need <= limit:
        return
    model = config["model"]
    shown = ", ".join(f"model.{k}={model[k]}" for k in ("depth", "dim", "mlp_hidden") if model.get(k) is not None)
    state = " with their gradients and AdamW's moments" if training else ""
    raise UsageError(
        f"{_from(source)}this run needs about {_bytes(need)} of memory ({estimate['parameter_count']:.3g} parameters: "
        f"{_bytes(estimate['parameters'])}{state}; activations {_bytes(estimate['activations'])} at "
        f"data.batch_size={config['data'].get('batch_size')}), more than {where} {_bytes(limit)} ({shown}); make the "
        "model or the batch smaller."
    )
