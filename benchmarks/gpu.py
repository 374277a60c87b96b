"""Throughput and peak memory on a GPU: a DeiT-Ti-sized ViT (dim 192, depth 12, heads 3, 224² images, patch 16,
batch 128, bf16 autocast) for diffusion, light_wave, full_wave and reversible: our analogue of the Wavy Transformer
paper's throughput table. Run by ``benchmarks/gpu_check.sh``; prints a table and writes JSON.

    python -m benchmarks.gpu [--steps 20] [--json gpu.json]
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F

import odeformer

SOLVERS = ("diffusion", "light_wave", "full_wave", "reversible")


def measure(solver: str, steps: int, batch: int) -> dict[str, float]:
    torch.manual_seed(0)
    dt = 1.0 if solver in ("diffusion", "light_wave") else None
    model = odeformer.ViT(
        image_size=224, patch_size=16, in_chans=3, num_classes=1000, depth=12, dim=192, heads=3, solver=solver, dt=dt
    ).cuda()
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
    def infer():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            model(images)

    out = {}
    for name, fn in (("train", train), ("inference", infer)):
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        for _ in range(steps):
            fn()
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        out[f"{name}_images_per_s"] = steps * batch / seconds
        out[f"{name}_peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks.gpu needs a CUDA device.")
    torch.backends.cuda.matmul.allow_tf32 = True
    results = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "batch": args.batch}
    print(f"{'solver':<12} {'train img/s':>12} {'train GiB':>10} {'infer img/s':>12} {'infer GiB':>10}")
    for solver in SOLVERS:
        r = measure(solver, args.steps, args.batch)
        results[solver] = r
        print(
            f"{solver:<12} {r['train_images_per_s']:>12.0f} {r['train_peak_gib']:>10.2f} "
            f"{r['inference_images_per_s']:>12.0f} {r['inference_peak_gib']:>10.2f}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
