"""A trained run's stability atlas and refinement (:mod:`odeformer.atlas`), as ``odeformer-analyze RUN`` and the
reproduction's ``stability_atlas`` section compute them: the run's model with its best weights, its registered
diagnostic batch of validation items, and its own validation metric at every refinement."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from solvers import PhaseState

from ... import atlas
from ...tasks import task_of
from .bounds import check_refinement
from .builder import load_run
from .objectives import make_objective

LIMIT_METHOD = "dopri5"
"""The adaptive method that solves a trained run's ODE for the refinement's reference (torchdiffeq's)."""


def analyse_run(
    run_dir: Path,
    batch: int = 16,
    eigenvalues: int = 16,
    refine: tuple[int, ...] | list[int] | None = None,
    checkpoint: str = "best.pt",
    stepper: str | None = None,
) -> tuple[dict[str, Any], torch.nn.Module]:
    """``({"run", "solver", "depth", "layers", "small_step_limit", ["refinement", "observed_order", "metric"]},
    model)`` for the run in
    ``run_dir``: the atlas on ``batch`` validation items, and with ``refine`` the refinement at those ``k`` with the
    run's validation metric (its objective, its batch size and number of evaluation batches) at each."""
    data, model, record = load_run(run_dir, checkpoint, stepper=stepper)
    if not getattr(model.backbone, "layers", None):
        raise ValueError(f"{run_dir} is a continuous-depth run: one adaptive block, no layer steps to analyse.")
    if refine:
        check_refinement(list(refine), len(model.backbone.layers))
    inputs, _ = task_of(model).diagnostic_batch(data, model, batch)
    states: list = []
    with torch.no_grad():
        model(*inputs, record=states)
    if not all(bool(torch.isfinite(s.x if isinstance(s, PhaseState) else s).all()) for s in states):
        raise ValueError(
            f"{run_dir}: the model's states on its validation batch are not finite (its weights overflow float32 as "
            "they compute), so there is no spectrum to read; nothing was written."
        )
    numbers: dict[str, Any] = {
        "run": str(run_dir),
        "solver": record["solver"],
        "depth": record["depth"],
        "layers": atlas.atlas(model, inputs, count=eigenvalues),
        # whether the layers converge to an ODE at all (a fixed-size part or a map after a sublayer: no limit)
        "small_step_limit": all(layer.claims().order > 0 for layer in model.backbone.layers),
    }
    if refine:
        limited = numbers["small_step_limit"] and len({layer.second_order for layer in model.backbone.layers}) == 1
        found = atlas.refinement(model, inputs, parts=refine, limit=LIMIT_METHOD if limited else None)
        config = record.get("config") or {}
        batch_size = int((config.get("data") or {}).get("batch_size") or 64)  # checked when the run was built
        train = config.get("train") if isinstance(config.get("train"), dict) else {}
        eval_batches = train.get("eval_batches") or 0
        if isinstance(eval_batches, bool) or not isinstance(eval_batches, int) or eval_batches < 0:
            raise ValueError(
                f"{Path(run_dir) / checkpoint}: its config's train.eval_batches={eval_batches!r} is no number of "
                "validation batches: a whole number from 0 (the whole split); use a checkpoint of odeformer-train."
            )
        objective = make_objective(data, model, batch_size, 0, torch.device("cpu"))
        for row in found["refinement"]:
            with atlas.resampled(model.backbone, row["k"]), torch.no_grad():
                measured = objective.evaluate(model, "val", eval_batches)
            row["metric"] = measured.get(objective.metric)
        if "limit" in found and "unsolved" not in found["limit"]:
            try:
                with atlas.solved(model.backbone, method=LIMIT_METHOD), torch.no_grad():
                    found["limit"]["metric"] = objective.evaluate(model, "val", eval_batches).get(objective.metric)
            except atlas.StiffFlow as error:
                found["limit"]["unsolved_metric"] = str(error)
        order = min(layer.claims().order for layer in model.backbone.layers)
        numbers |= found | {"metric": objective.metric, "layer_order": order}
        numbers["verdict"] = atlas.verdict(numbers, order, "metric")
    return numbers, model
