"""``odeformer-diagnose``: over-smoothing and depth dynamics, layer by layer, as PNGs with the numbers beside them.

    odeformer-diagnose outputs/run_a outputs/run_b            # trained runs (best.pt), one curve each
    odeformer-diagnose --fresh diffusion full_wave --data digits --depth 12   # fresh models at initialisation

It loads the runs (:func:`odeformer.app.run.builder.load_run`) or builds fresh models, and draws the figures
(:func:`odeformer.app.reporting.diagnostics.diagnose`, whose docstring says what each file holds) into ``--out``:
by default ``<run>/diagnostics`` for one run, ``outputs/diagnostics`` for several, ``outputs/diagnostics_fresh``
for fresh models alone. Bad input — a folder that is not a run, a damaged or refused checkpoint, missing data — is one
line on stderr and exit code 2 (a usage error before torch is imported).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from .. import files
from . import Parser, folder_argument, run


def fresh_config(solver: str, data: str, depth: int, dim: int | None) -> dict[str, Any]:
    """The resolved config of a fresh (untrained) model of the dataset's default model type, composed exactly as
    ``odeformer-train solver=<solver> data=<data> model=<its model> model.depth=<depth>`` would compose it."""
    from omegaconf import OmegaConf

    from ...data import load
    from ..run.identity import default_model
    from .train import compose

    chosen = OmegaConf.to_container(compose([f"data={data}"]).data, resolve=True)
    kind = load(chosen["name"], chosen.get("root"), **(chosen.get("options") or {})).kind
    overrides = [f"solver={solver}", f"data={data}", f"model={default_model(kind)}", f"model.depth={depth}"]
    if dim is not None:
        overrides.append(f"model.dim={dim}")
    return OmegaConf.to_container(compose(overrides), resolve=True)


def load_run(*args: Any, **kwargs: Any) -> Any:
    """:func:`odeformer.app.run.builder.load_run`, imported when first called (a usage error answers without torch)."""
    from ..run.builder import load_run as load

    return load(*args, **kwargs)


def default_out(runs: list[Path], fresh: bool) -> tuple[Path, Path]:
    """The figures' folder when ``--out`` is not given, and the folder below which no link is followed (a run's
    ``diagnostics`` may not be one): one run's figures beside it, a comparison of several runs in
    ``outputs/diagnostics`` (it belongs to none of them), fresh models alone in ``outputs/diagnostics_fresh``."""
    if len(runs) == 1 and not fresh:
        return runs[0] / "diagnostics", runs[0]
    out = Path("outputs") / ("diagnostics" if runs else "diagnostics_fresh")
    return out, out


def main(argv: list[str] | None = None) -> int:
    return run("odeformer-diagnose", lambda: _diagnose(_parser().parse_args(argv)))


def _parser() -> Parser:
    parser = Parser(prog="odeformer-diagnose", description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="*", type=Path, help="run directories (with best.pt)")
    parser.add_argument("--fresh", nargs="+", metavar="SOLVER", help="fresh models with these solvers")
    parser.add_argument("--data", default="digits", help="dataset for --fresh (default: digits)")
    parser.add_argument("--depth", type=int, default=12, help="depth for --fresh (default: 12)")
    parser.add_argument("--dim", type=int, default=None, help="width for --fresh (default: the model config's)")
    parser.add_argument("--seed", type=int, default=0, help="initialisation seed for --fresh")
    parser.add_argument("--batch", type=int, default=16, help="items from the validation split (default: 16)")
    parser.add_argument("--checkpoint", default="best.pt", help="checkpoint file in each run directory")
    parser.add_argument(
        "--stepper",
        default=None,
        metavar="MODULE.CLASS",
        help="a run trained with a scheme of your own (solver=module.Class): its class; a path stored in a checkpoint "
        "is never imported by itself",
    )
    parser.add_argument(
        "--out",
        type=folder_argument,
        default=None,
        help="output folder (default: <run>/diagnostics for one run, outputs/diagnostics for several, "
        "outputs/diagnostics_fresh for fresh models)",
    )
    return parser


def _diagnose(args) -> int:
    if not args.runs and not args.fresh:
        raise ValueError("give run directories, or --fresh SOLVER [SOLVER ...]")
    if args.batch < 1:
        raise ValueError(f"--batch must be at least 1 (items), got {args.batch}.")
    if not 0 <= args.seed <= 2**63 - 1:
        raise ValueError(f"--seed must be from 0 to 2**63 - 1 (a torch seed), got {args.seed}.")
    import torch

    from ..reporting.diagnostics import diagnose
    from ..reporting.labels import run_labels
    from ..run.builder import build

    runs, configs = [], []
    for run_dir in args.runs:
        data, model, record = load_run(run_dir, args.checkpoint, stepper=args.stepper)
        runs.append((run_dir.name, data, model))
        configs.append(record.get("config") if isinstance(record.get("config"), dict) else None)
    labels = run_labels(configs, [run_dir.name for run_dir in args.runs])  # what the runs differ in
    runs = [(label, data, model) for label, (_, data, model) in zip(labels, runs)]
    for solver in args.fresh or []:
        torch.manual_seed(args.seed)
        data, model, _ = build(fresh_config(solver, args.data, args.depth, args.dim))
        runs.append((f"{solver} (depth {args.depth}, init)", data, model))
    out, root = (args.out, args.out) if args.out is not None else default_out(args.runs, bool(args.fresh))
    files.folder(out, root)  # never through a link below the folder named
    files.refuse_links(out, sorted(p.name for p in out.iterdir()))
    diagnose(runs, out, args.batch)
    print(f"wrote {files.printable(out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
