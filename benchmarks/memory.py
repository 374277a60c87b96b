"""Peak memory of training steps for one configuration, in a fresh process (run by ``benchmarks.run``).

    python -m benchmarks.memory --solver full_wave --depth 6 [--dim 128 --batch 32 --image 32 --patch 4]

Prints one JSON line. On CPU: the resident-set peak during three training steps, after a warm-up step that allocated
the weights, gradients and optimiser state, minus the resident size before them (``/proc/self/clear_refs`` resets the
peak, so this is the memory the steps themselves need: activations and workspace; the scratch buffers the fused MLP
keeps between calls are given back first, so that the steps' peak counts them too). On CUDA:
``torch.cuda.max_memory_allocated`` likewise reset after the warm-up.
"""

from __future__ import annotations

import argparse
import json
import resource

import torch
import torch.nn.functional as F


def _rss_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def measure(solver: str, depth: int, dim: int, batch: int, image: int, patch: int, device: str) -> dict:
    from benchmarks.run import build_model
    from odeformer.joint import release_workspace

    torch.manual_seed(0)
    model = build_model(solver, depth, dim, image, patch).to(device)
    optimiser = torch.optim.AdamW(model.parameters(), lr=1e-4)
    images = torch.randn(batch, 3, image, image, device=device)
    labels = torch.randint(0, 10, (batch,), device=device)

    def step():
        loss = F.cross_entropy(model(images), labels)
        optimiser.zero_grad(set_to_none=False)  # gradient buffers stay allocated, as in memory-tight training
        loss.backward()
        optimiser.step()

    step()  # warm-up: weights, gradients, optimiser state, allocator pools
    release_workspace()  # memory the model holds between steps is the steps' too
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        return {"peak_mb": (torch.cuda.max_memory_allocated() - base) / 2**20, "how": "cuda max_memory_allocated"}
    base = _rss_kb("VmRSS")
    exact = _reset_peak()
    for _ in range(3):
        step()
    peak = _rss_kb("VmHWM") if exact else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"peak_mb": (peak - base) / 1024, "rss_mb": peak / 1024, "how": "VmHWM" if exact else "ru_maxrss"}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--solver", required=True)
    parser.add_argument("--depth", type=int, default=6)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--image", type=int, default=32)
    parser.add_argument("--patch", type=int, default=4)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(json.dumps(measure(args.solver, args.depth, args.dim, args.batch, args.image, args.patch, args.device)))


if __name__ == "__main__":
    main()
