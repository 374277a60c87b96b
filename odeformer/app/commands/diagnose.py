"""``odeformer-diagnose``: over-smoothing and depth dynamics, layer by layer, as PNGs with the numbers beside them.

    odeformer-diagnose outputs/run_a outputs/run_b            # trained runs (best.pt), one curve each
    odeformer-diagnose --fresh diffusion full_wave --data digits --depth 12   # fresh models at initialisation

It loads the runs (:func:`odeformer.app.run.builder.load_run`) or builds fresh models, and draws the figures
(:func:`odeformer.app.reporting.diagnostics.diagnose`, whose docstring says what each file holds) into ``--out``.
Bad input — a folder that is not a run, a damaged or refused checkpoint, missing data — is one line on stderr and
exit code 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from ...data import DatasetNotFound, load
from .. import files
from ..files import UnsafeFile
from ..reporting.diagnostics import diagnose
from ..reporting.labels import run_labels
from ..run.builder import UsageError, build, load_run
from ..run.checkpoints import CheckpointError
from ..run.identity import default_model


def fresh_config(solver: str, data: str, depth: int, dim: int | None) -> dict[str, Any]:
    """The resolved config of a fresh (untrained) model of the dataset's default model type, composed exactly as
    ``odeformer-train solver=<solver> data=<data> model=<its model> model.depth=<depth>`` would compose it."""
    from .train import compose

    chosen = OmegaConf.to_container(compose([f"data={data}"]).data, resolve=True)
    kind = load(chosen["name"], chosen.get("root"), **(chosen.get("options") or {})).kind
    overrides = [f"solver={solver}", f"data={data}", f"model={default_model(kind)}", f"model.depth={depth}"]
    if dim is not None:
        overrides.append(f"model.dim={dim}")
    return OmegaConf.to_container(compose(overrides), resolve=True)


_BAD_INPUT = (UsageError, ValueError, TypeError, DatasetNotFound, CheckpointError, FileNotFoundError, UnsafeFile)


def check_out(out: Path, default: bool) -> None:
    """The figures' folder must be a folder this process can write or a path where one can be made (a file there or
    above it, or a read-only folder, is a one-line :class:`UsageError`: :func:`odeformer.app.files.unwritable`), and
    nothing in it is written through a link: a ``diagnostics`` folder inside a run that is a link, or an entry of the
    folder that is one, is a one-line :class:`~odeformer.app.files.UnsafeFile`."""
    if default:
        files.refuse_links(out.parent, [out.name])
    refused = files.unwritable(out)
    if refused is not None:
        verb, why = refused
        raise UsageError(
            f"--out {out} cannot be {verb}: {why}{'; choose a writable --out' if verb == 'written' else ''}."
        )
    if out.is_dir():
        files.refuse_links(out, sorted(p.name for p in out.iterdir()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="odeformer-diagnose", description=__doc__.splitlines()[0])
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
        type=Path,
        default=None,
        help="output folder (default: <run>/diagnostics for one run, else outputs/diagnostics)",
    )
    args = parser.parse_args(argv)
    if not args.runs and not args.fresh:
        parser.error("give run directories, or --fresh SOLVER [SOLVER ...]")
    if args.batch < 1:
        print(f"odeformer-diagnose: error: --batch must be at least 1 (items), got {args.batch}.", file=sys.stderr)
        return 2
    try:
        # one run's figures beside it; a comparison of several belongs to none of them
        alone = len(args.runs) == 1 and not args.fresh
        out = args.out or (args.runs[0] / "diagnostics" if alone else Path("outputs") / "diagnostics")
        check_out(out, default=args.out is None)
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
        diagnose(runs, out, args.batch)
    except _BAD_INPUT as error:
        print(f"odeformer-diagnose: error: {' '.join(str(error).split())}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("odeformer-diagnose: interrupted (Ctrl-C).", file=sys.stderr)
        return 130
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
