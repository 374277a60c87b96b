"""Throughput and peak memory on a GPU: a DeiT-Ti-sized ViT (dim 192, depth 12, heads 3, 224² images, patch 16,
batch 128, bf16 autocast) for diffusion, light_wave, full_wave and reversible: our analogue of the Wavy Transformer
paper's throughput table. Beside them, the anchors of the same size (``benchmarks/anchors.py``): Hugging Face's
``ViTForImageClassification`` (sdpa attention; only where ``transformers`` is installed) and a ViT on
``nn.TransformerEncoder`` (under autocast and with 3 heads PyTorch's fused encoder fast path does not apply), under
the same compile setting (``--compile`` compiles every model alike). Run by
``benchmarks/gpu_check.sh``; prints a table and writes JSON. ``--render`` turns the files that script wrote into the
GPU block of ``docs/RESULTS.md`` (on any machine, no GPU needed).

    python -m benchmarks.gpu [--steps 20] [--compile] [--json gpu.json]
    python -m benchmarks.gpu --render OUT_DIR --results docs/RESULTS.md
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

import odeformer

SOLVERS = ("diffusion", "light_wave", "full_wave", "reversible")
ANCHORS = ("hf_vit", "torch_vit")
"""Hugging Face's ViTForImageClassification and the nn.TransformerEncoder ViT, DeiT-Ti-sized like the solvers."""
DEIT_TI = dict(image_size=224, patch_size=16, in_chans=3, num_classes=1000, depth=12, dim=192, heads=3)


def models() -> tuple[str, ...]:
    """The solvers, then the anchors this machine can build (the Hugging Face one needs ``transformers``)."""
    from benchmarks.anchors import have_transformers

    return SOLVERS + tuple(a for a in ANCHORS if a != "hf_vit" or have_transformers())


def build(name: str) -> torch.nn.Module:
    """A DeiT-Ti-sized ViT on the CPU: a solver's, or an anchor's (:data:`ANCHORS`)."""
    from benchmarks.anchors import TorchViT, hf_vit

    torch.manual_seed(0)
    if name == "hf_vit":
        return hf_vit(**DEIT_TI)
    if name == "torch_vit":
        return TorchViT(**DEIT_TI)
    dt = 1.0 if name in ("diffusion", "light_wave") else None
    return odeformer.ViT(**DEIT_TI, solver=name, dt=dt)


def _model(name: str, compile: bool = False) -> torch.nn.Module:
    model = build(name).cuda()
    return torch.compile(model) if compile else model


def _steps(model: torch.nn.Module, batch: int) -> dict[str, Callable[[], None]]:
    """The training step (forward, backward, AdamW) and the inference step of ``model`` on a fixed synthetic batch."""
    optimiser = torch.optim.AdamW(model.parameters(), lr=1e-4)
    images = torch.randn(batch, 3, 224, 224, device="cuda")
    labels = torch.randint(0, 1000, (batch,), device="cuda")

    def train():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(images), labels)
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()

    @torch.no_grad()
    def inference():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            model(images)

    return {"train": train, "inference": inference}


def peak_memory(solver: str, batch: int, compile: bool = False) -> dict[str, float]:
    """Peak allocated GiB of a training and of an inference step, with only this model (and its optimiser) alive."""
    model = _model(solver, compile)
    out = {}
    for mode, fn in _steps(model, batch).items():
        for _ in range(2):
            fn()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        fn()
        torch.cuda.synchronize()
        out[f"{mode}_peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
    del model
    torch.cuda.empty_cache()
    return out


def throughput(batch: int, steps: int, rounds: int, compile: bool = False) -> dict[str, dict[str, float]]:
    """Images/s per model and mode: the median over ``rounds`` blocks of ``steps`` steps, the models taking turns
    block by block (so clock ramps and a busy neighbour hit all of them alike)."""
    from benchmarks.run import interleaved

    names = models()
    runs = {name: _steps(_model(name, compile), batch) for name in names}
    out: dict[str, dict[str, float]] = {name: {} for name in names}
    for mode in ("train", "inference"):
        blocks = {name: _repeat(runs[name][mode], steps) for name in names}
        seconds = interleaved(blocks, rounds, warmup=1, device="cuda")
        for solver in names:
            out[solver][f"{mode}_images_per_s"] = steps * batch / seconds[solver]
    return out


def _repeat(fn: Callable[[], None], times: int) -> Callable[[], None]:
    def block() -> None:
        for _ in range(times):
            fn()

    return block


BEGIN, END = "<!-- begin: gpu -->", "<!-- end: gpu -->"


def render(folder: Path) -> str:
    """Markdown for the files ``benchmarks/gpu_check.sh`` wrote into ``folder``."""
    from benchmarks.run import table

    gpu = json.loads((folder / "gpu.json").read_text())
    base = gpu["diffusion"]
    lines = [
        f"Generated by `bash benchmarks/gpu_check.sh OUT` on one {gpu['gpu']} (torch {gpu['torch']}), then "
        f"`python -m benchmarks.gpu --render OUT --results docs/RESULTS.md`. DeiT-Ti-sized ViT: dim 192, depth 12, "
        f"heads 3, 224² synthetic images, patch 16, batch {gpu['batch']}, bf16 autocast, AdamW; images/s is the "
        f"median of {gpu['rounds']} blocks of {gpu['steps']} steps, the solvers taking turns; peak is "
        "`torch.cuda.max_memory_allocated` "
        f"of one step with only that model alive{', every model torch.compile-d' if gpu.get('compile') else ''}. "
        "Ratios are against diffusion (the plain transformer); `hf_vit` is Hugging Face's ViTForImageClassification "
        "(sdpa attention) and `torch_vit` a ViT on nn.TransformerEncoder, both of the same size, where measured.",
        "",
        "| solver | train img/s | train peak GiB | inference img/s | inference peak GiB | train time ratio | "
        "train memory ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for solver in (name for name in SOLVERS + ANCHORS if name in gpu):
        r = gpu[solver]
        lines.append(
            f"| `{solver}` | {r['train_images_per_s']:.0f} | {r['train_peak_gib']:.2f} | "
            f"{r['inference_images_per_s']:.0f} | {r['inference_peak_gib']:.2f} | "
            f"{base['train_images_per_s'] / r['train_images_per_s']:.2f} | "
            f"{r['train_peak_gib'] / base['train_peak_gib']:.2f} |"
        )
    lines += [
        "",
        "Paper (DeiT-Ti, their GPU): Full Wave about 2× time and 2× memory; Light Wave about 1.0× time, 1.1× memory.",
    ]
    ratios = folder / "ratios.json"
    if ratios.exists():
        results = json.loads(ratios.read_text())
        raw = results["raw"]
        lines += [
            "",
            f"The benchmark ratios on the same GPU (`python -m benchmarks.run --quick --device cuda`, "
            f"{raw['rounds']} rounds, {raw['wall_s']} s; CPU sizes, so small kernels and launch overhead dominate):",
            "",
            table(results),
        ]
    summary = folder / "train_summary.json"
    if summary.exists():
        s = json.loads(summary.read_text())
        lines += [
            "",
            f"Main job on CUDA (`odeformer-train experiment=digits_vit train.device=cuda`, bf16 autocast): "
            f"{s['solver']}, depth {s['depth']}, test {s['metric']} {100 * s['test']:.1f} % after {s['steps']} "
            f"steps in {s['wall_s']:.0f} s ({s['status']}).",
        ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10, help="steps per timed block")
    parser.add_argument("--rounds", type=int, default=5, help="timed blocks per solver (they take turns)")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--compile", action="store_true", help="torch.compile every model, solvers and anchors alike")
    parser.add_argument("--json", default=None)
    parser.add_argument("--render", type=Path, default=None, help="a folder written by benchmarks/gpu_check.sh")
    parser.add_argument("--results", type=Path, default=None, help="with --render: rewrite this markdown's GPU block")
    args = parser.parse_args()
    if args.render is not None:
        from odeformer.reproduce import write_results

        text = render(args.render)
        print(text)
        if args.results:
            write_results(text, args.results, BEGIN, END)
        return
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks.gpu needs a CUDA device.")
    torch.backends.cuda.matmul.allow_tf32 = True
    results = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "batch": args.batch,
        "steps": args.steps,
        "rounds": args.rounds,
        "compile": args.compile,
    }
    names = models()
    if "hf_vit" not in names:
        print("transformers is not installed: no Hugging Face anchor (pip install transformers)")
    memory = {name: peak_memory(name, args.batch, args.compile) for name in names}
    speed = throughput(args.batch, args.steps, args.rounds, args.compile)
    print(f"{'model':<12} {'train img/s':>12} {'train GiB':>10} {'infer img/s':>12} {'infer GiB':>10}")
    for solver in names:
        r = results[solver] = {**speed[solver], **memory[solver]}
        print(
            f"{solver:<12} {r['train_images_per_s']:>12.0f} {r['train_peak_gib']:>10.2f} "
            f"{r['inference_images_per_s']:>12.0f} {r['inference_peak_gib']:>10.2f}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
