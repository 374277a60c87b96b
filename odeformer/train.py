"""``odeformer-train`` (= ``python -m odeformer.train``): the one entry point, and the only module importing Hydra.

    odeformer-train                                     # the default experiment (configs/train.yaml)
    odeformer-train solver=full_wave model.depth=12 data=fashion_mnist
    odeformer-train experiment=cora_deep model.depth=32
    odeformer-train -m solver=diffusion,full_wave model.depth=4,8,16      # a sweep
    torchrun --nproc_per_node=2 -m odeformer.train train.device=cpu       # DistributedDataParallel

Bad input (an unknown solver/model/data name, ``dt <= 0``, heads not dividing dim, a missing data root, a corrupt
checkpoint, ...) is one line on stderr and exit code 2; nothing already written is touched.
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from pathlib import Path
from typing import Any

import hydra
import torch
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from .config import MODEL_SCHEMAS, Config, ContinuousSolverConfig, DataConfig, SolverConfig, TrainOptions
from .data import DatasetNotFound
from .runs import UsageError, build
from .stability import max_stable_dt
from .trainer import CheckpointError, Options, RunDirectoryError, Trainer, TrainingDiverged, check_run_directory

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
GROUPS = ("solver", "model", "data", "train", "experiment")

store = ConfigStore.instance()
store.store(name="config_schema", node=Config)
store.store(group="solver", name="solver_schema", node=SolverConfig)
store.store(group="solver", name="continuous_schema", node=ContinuousSolverConfig)
store.store(group="data", name="data_schema", node=DataConfig)
store.store(group="train", name="train_schema", node=TrainOptions)
for _name, _node in MODEL_SCHEMAS.items():
    store.store(group="model", name=_name, node=_node)


def choices(group: str) -> list[str]:
    return sorted(p.stem for p in (CONFIGS / group).glob("*.yaml"))


def check_group_choices(argv: list[str]) -> None:
    """Unknown config-group options, e.g. ``solver=wave``: one line listing the choices (before Hydra composes)."""
    for arg in argv:
        match = re.fullmatch(r"\+?(solver|model|data|train|experiment)=(.*)", arg)
        if not match or "(" in match.group(2):  # sweep functions like range(...) are Hydra's to check
            continue
        group, values = match.groups()
        for value in filter(None, values.split(",")):
            if value not in choices(group) and value != "null":
                raise UsageError(f"unknown {group} {value!r}; choose one of: {', '.join(choices(group))}.")


def compose(overrides: list[str]) -> DictConfig:
    """The config ``odeformer-train <overrides>`` would run (Hydra's compose API; no run directory is made)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    check_group_choices(overrides)
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return hydra_compose(config_name="train", overrides=overrides)


def warn_unstable(model: Any) -> None:
    """Warn when a layer's step exceeds its scheme's stability bound on the laplacian attention field."""
    seen = set()
    for layer in model.backbone.layers:
        if getattr(layer.attention, "form", None) != "laplacian" or (type(layer.stepper), layer.dt) in seen:
            continue
        seen.add((type(layer.stepper), layer.dt))
        bound = max_stable_dt(layer.stepper)
        if layer.dt > bound:
            warnings.warn(
                f"dt={layer.dt} exceeds {type(layer.stepper).__name__}'s stability bound ≈{bound:.2f} on the laplacian "
                "attention field (spectrum of A - I in |μ + 1| <= 1); expect the state to blow up.",
                stacklevel=2,
            )


def run(cfg: DictConfig, out_dir: Path) -> dict[str, Any]:
    """Train one configuration into ``out_dir``; return the summary."""
    options = Options(**OmegaConf.to_container(cfg.train, resolve=True), batch_size=cfg.data.batch_size)
    check_run_directory(out_dir, options.resume)
    torch.manual_seed(options.seed)  # the model's initial weights are part of the run's seed
    data, model, info = build(OmegaConf.to_container(cfg, resolve=True))
    warn_unstable(model)
    summary = Trainer(model, data, options, out_dir, info).fit()
    if summary:
        print_summary(summary, out_dir)
    return summary


def print_summary(summary: dict[str, Any], out_dir: Path) -> None:
    metric = summary["metric"]
    test = "-" if summary["test"] is None else f"{summary['test']:.4f}"
    print(f"\n{'solver':<16} {'depth':>5} {'test ' + metric:>14} {'time':>8}")
    print(f"{summary['solver']:<16} {summary['depth']:>5} {test:>14} {summary['wall_s']:>7.1f}s")
    print(f"run directory: {out_dir}")


@hydra.main(version_base="1.3", config_path=str(CONFIGS), config_name="train")
def _main(cfg: DictConfig) -> None:
    out_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        run(cfg, out_dir)
    except TrainingDiverged as error:
        print(f"odeformer-train: {error}", file=sys.stderr)
        sys.exit(1)
    except (UsageError, ValueError, TypeError, DatasetNotFound, CheckpointError, RunDirectoryError) as error:
        if os.environ.get("ODEFORMER_DEBUG"):
            raise
        print(f"odeformer-train: error: {' '.join(str(error).split())}", file=sys.stderr)
        sys.exit(2)


def main() -> None:
    """Console-script entry: check group choices, then hand over to Hydra."""
    try:
        check_group_choices(sys.argv[1:])
    except UsageError as error:
        print(f"odeformer-train: error: {error}", file=sys.stderr)
        sys.exit(2)
    _main()


if __name__ == "__main__":
    main()
