"""``odeformer-diagnose``: over-smoothing and depth dynamics, layer by layer, as PNGs with the numbers beside them.

    odeformer-diagnose outputs/run_a outputs/run_b            # trained runs (best.pt), one curve each
    odeformer-diagnose --fresh diffusion full_wave --data digits --depth 12   # fresh models at initialisation

For every measure of :mod:`odeformer.diagnostics` it writes ``<measure>.png`` (the measure against depth, one curve
per run) and ``<measure>.json`` (the numbers); for runs whose layers carry a velocity, ``phase.png``/``phase.json``: the
x–v path of a few channels of one token through the layers. The batch is the first ``--batch`` items of the
validation split (the whole graph for node classification).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from .checkpoints import CheckpointError
from .data import DatasetNotFound, TaskData, load
from .diagnostics import layer_measures
from .runs import MODEL_FOR_KIND, UsageError, build, load_run

PLOTTED = ("cosine", "dirichlet", "rank_collapse", "spectral_gap", "wave_energy", "graph_dirichlet")
TITLES = {
    "cosine": "mean pairwise token cosine similarity",
    "dirichlet": "Dirichlet energy (complete graph)",
    "graph_dirichlet": "Dirichlet energy (input graph)",
    "rank_collapse": "‖X − 1 mean(X)ᵀ‖_F / ‖X‖_F",
    "spectral_gap": "attention spectral gap 1 − |λ₂(A)|",
    "wave_energy": "wave energy per token",
}


def batch_of(data: TaskData, model: torch.nn.Module, size: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``(inputs, options)`` for :func:`layer_measures` from the validation split."""
    if data.kind == "image":
        return (data.splits["val"][0][:size],), {"drop_first": True}
    if data.kind == "sequence":
        tokens = data.splits["val"][0][:size]
        keys = (tokens != data.meta["pad_id"])[:, None, None, :]
        return (tokens,), {"attn_mask": keys}
    if data.kind == "text":
        stream, length = data.splits["val"][0], model.max_len
        starts = torch.arange(size) * length
        return (stream[starts[:, None] + torch.arange(length)],), {}
    features, edges, _ = data.graph
    return (features, edges), {"edge_index": edges}


def fresh_config(solver: str, data: str, depth: int, dim: int | None) -> dict[str, Any]:
    """The resolved config of a fresh (untrained) model of the dataset's default model type, composed exactly as
    ``odeformer-train solver=<solver> data=<data> model=<its model> model.depth=<depth>`` would compose it."""
    from .train import compose

    chosen = OmegaConf.to_container(compose([f"data={data}"]).data, resolve=True)
    kind = load(chosen["name"], chosen.get("root"), **(chosen.get("options") or {})).kind
    overrides = [f"solver={solver}", f"data={data}", f"model={MODEL_FOR_KIND[kind]}", f"model.depth={depth}"]
    if dim is not None:
        overrides.append(f"model.dim={dim}")
    return OmegaConf.to_container(compose(overrides), resolve=True)


def diagnose(runs: list[tuple[str, TaskData, torch.nn.Module]], out: Path, size: int) -> dict[str, Any]:
    """Measure every run, write the PNGs and JSON files into ``out``; return the numbers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    results = {}
    for label, data, model in runs:
        inputs, options = batch_of(data, model, size)
        results[label] = layer_measures(model, *inputs, **options)
    for measure in PLOTTED:
        curves = {label: r[measure] for label, r in results.items() if measure in r}
        if not curves:
            continue
        fig, ax = plt.subplots(figsize=(6, 4))
        for label, values in curves.items():
            start = 0 if len(values) == len(results[label]["depth"]) else 1  # per-layer measures start at layer 1
            ax.plot(range(start, start + len(values)), values, marker="o", ms=3, label=label)
        ax.set(xlabel="layer", title=TITLES[measure])
        if measure in ("dirichlet", "graph_dirichlet", "wave_energy"):
            ax.set_yscale("log")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / f"{measure}.png", dpi=110)
        plt.close(fig)
        (out / f"{measure}.json").write_text(json.dumps(curves, indent=1) + "\n")
    phases = {label: r["phase"] for label, r in results.items() if "phase" in r}
    if phases:
        fig, axes = plt.subplots(1, len(phases), figsize=(5 * len(phases), 4), squeeze=False)
        for ax, (label, path) in zip(axes[0], phases.items()):
            points = [p for p in path if p is not None]
            for channel in range(len(points[0]["x"])):
                ax.plot(
                    [p["x"][channel] for p in points],
                    [p["v"][channel] for p in points],
                    marker="o",
                    ms=3,
                    label=f"channel {channel}",
                )
            ax.set(xlabel="x", ylabel="v", title=f"{label}: x–v through the layers")
            ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "phase.png", dpi=110)
        plt.close(fig)
        (out / "phase.json").write_text(json.dumps(phases, indent=1) + "\n")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="odeformer-diagnose", description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="*", type=Path, help="run directories (with best.pt)")
    parser.add_argument("--fresh", nargs="+", metavar="SOLVER", help="fresh models with these solver presets")
    parser.add_argument("--data", default="digits", help="dataset for --fresh (default: digits)")
    parser.add_argument("--depth", type=int, default=12, help="depth for --fresh (default: 12)")
    parser.add_argument("--dim", type=int, default=None, help="width for --fresh (default: the model config's)")
    parser.add_argument("--seed", type=int, default=0, help="initialisation seed for --fresh")
    parser.add_argument("--batch", type=int, default=16, help="items from the validation split (default: 16)")
    parser.add_argument("--checkpoint", default="best.pt", help="checkpoint file in each run directory")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="output folder (default: <first run>/diagnostics, or outputs/diagnostics)",
    )
    args = parser.parse_args(argv)
    if not args.runs and not args.fresh:
        parser.error("give run directories, or --fresh SOLVER [SOLVER ...]")
    try:
        runs = []
        for run_dir in args.runs:
            data, model, info = load_run(run_dir, args.checkpoint)
            runs.append((f"{info['solver']} (depth {info['depth']}) {run_dir.name}", data, model))
        for solver in args.fresh or []:
            torch.manual_seed(args.seed)
            data, model, info = build(fresh_config(solver, args.data, args.depth, args.dim))
            runs.append((f"{solver} (depth {args.depth}, init)", data, model))
        out = args.out or (args.runs[0] / "diagnostics" if args.runs else Path("outputs") / "diagnostics")
        diagnose(runs, out, args.batch)
    except (UsageError, ValueError, DatasetNotFound, CheckpointError, FileNotFoundError) as error:
        print(f"odeformer-diagnose: error: {' '.join(str(error).split())}", file=sys.stderr)
        return 2
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
