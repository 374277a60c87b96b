"""A continuous-depth ViT on digits: one weight-tied block integrated over depth-time [0, T] by dopri5.

Trains it beside discrete diffusion and full_wave ViTs with the same (tied) block, so the same parameter count,
and prints test accuracy, wall time and how the number of field evaluations (NFE) the adaptive solver needs changes
as the block trains.

    python examples/continuous_vit.py [--steps 400] [--solver dopri5|tsit5|bosh3] [--T 1]
"""

import argparse
import sys
import time

import torch
import torch.nn.functional as F

import odeformer
from odeformer.continuous import continuous
from odeformer.data import load


def train(model, data, steps, log_nfe=False):
    images, labels = data.splits["train"]
    optimiser = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.05)
    generator = torch.Generator().manual_seed(0)
    nfe = []
    start = time.perf_counter()
    for step in range(steps):
        index = torch.randint(0, len(labels), (64,), generator=generator)
        loss = F.cross_entropy(model(images[index]), labels[index])
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        if log_nfe and step % max(1, steps // 8) == 0:
            nfe.append((step, model.solver_stats()["nfe"]))
    model.eval()
    with torch.no_grad():
        test_images, test_labels = data.splits["test"]
        accuracy = (model(test_images).argmax(-1) == test_labels).float().mean().item()
    return accuracy, time.perf_counter() - start, nfe


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--solver", default="dopri5", choices=["dopri5", "tsit5", "bosh3"])
    parser.add_argument("--T", type=float, default=1.0, help="depth-time; the discrete models take 4 steps of T/4")
    args = parser.parse_args(argv)
    data = load("digits")
    library = "torchode" if args.solver == "tsit5" else "torchdiffeq"
    sizes = dict(image_size=8, patch_size=2, num_classes=10, depth=4, dim=32, heads=4)
    results = {}
    for name, solver in [
        (f"continuous {args.solver}", continuous(library=library, method=args.solver, T=args.T)),
        ("discrete diffusion (tied)", "diffusion"),
        ("discrete full_wave (tied)", "full_wave"),
    ]:
        torch.manual_seed(0)
        tied = {} if name.startswith("continuous") else {"tie_weights": True, "dt": args.T / 4}
        model = odeformer.ViT(solver=solver, **sizes, **tied)
        params = sum(p.numel() for p in model.parameters())
        accuracy, seconds, nfe = train(model, data, args.steps, log_nfe=name.startswith("continuous"))
        results[name] = {"accuracy": accuracy, "seconds": seconds, "params": params, "nfe": nfe}
        print(f"{name:<28} test accuracy {accuracy:.3f}   {seconds:6.1f} s   {params} parameters")
        if nfe:
            print("    NFE per forward during training: " + ", ".join(f"step {s}: {n}" for s, n in nfe))
    return results


if __name__ == "__main__":
    try:
        sys.exit(0 if main() is not None else 2)
    except KeyboardInterrupt:
        sys.exit("interrupted")  # one line and exit 1, not a traceback
