"""Where a training step's time goes, eager and under ``torch.compile``: why compiling does or does not pay here.

The step is ``compile_speedup``'s (the diffusion ViT of ``benchmarks.run``, AdamW). Each variant is warmed up, then
``--steps`` steps run under ``torch.profiler``; self time is grouped into matrix products (``mm``, ``addmm``, ``bmm``,
BLAS or oneDNN calls, which inductor hands to the same libraries), attention (``scaled_dot_product_attention`` and its
kernels), the optimiser, and everything else (elementwise, reductions, layout, inductor's fused kernels). The last
line is the bound on what compiling can gain: a step whose every operation but its matrix products and attention took
no time at all would be ``total / (matrix products + attention)`` times faster than eager.

    python -m benchmarks.profile_compile [--steps 5] [--threads 2] [--tiny]
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks.run import VIT, build_model, train_step

#: Substrings of profiler event names, by category (the first that matches wins).
CATEGORIES = (
    ("matrix products", ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "mkl", "onednn")),
    ("attention", ("scaled_dot_product", "_flash_attention", "_efficient_attention", "attention_math")),
    ("optimiser", ("adamw", "adam", "_foreach", "optimizer")),
)


def category(name: str) -> str:
    lowered = name.lower()
    for label, keys in CATEGORIES:
        if any(key in lowered for key in keys):
            return label
    return "other"


def profile_step(step, steps: int) -> tuple[dict[str, float], list[tuple[str, float]], float]:
    """Self CPU milliseconds per step by category, every event's (largest first), and the wall milliseconds per step."""
    import time

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        for _ in range(steps):
            step()
        wall = (time.perf_counter() - start) * 1e3 / steps
    by_category: dict[str, float] = defaultdict(float)
    events = []
    for event in prof.key_averages():
        ms = event.self_cpu_time_total / 1e3 / steps
        by_category[category(event.key)] += ms
        events.append((event.key, ms))
    events.sort(key=lambda e: -e[1])
    return dict(by_category), events, wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tiny", action="store_true", help="a two-layer model at width 32 (a check that it runs)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    sizes = dict(VIT, depth=2, dim=32, batch=4) if args.tiny else VIT
    shape = (sizes["depth"], sizes["dim"], sizes["image"], sizes["patch"])
    variants = {"eager": build_model("diffusion", *shape), "compiled": torch.compile(build_model("diffusion", *shape))}
    results = {}
    for name, model in variants.items():
        step = train_step(model, sizes["batch"], sizes["image"], "cpu")
        for _ in range(3):  # compile, warm up the allocator
            step()
        results[name] = profile_step(step, args.steps)
    labels = [label for label, _ in CATEGORIES] + ["other"]
    print(f"diffusion ViT {shape} batch {sizes['batch']}, {args.threads} thread(s), {args.steps} profiled steps")
    print(f"{'self CPU ms / step':24s} {'eager':>10s} {'compiled':>10s}")
    for label in labels:
        print(f"{label:24s} {results['eager'][0].get(label, 0.0):10.2f} {results['compiled'][0].get(label, 0.0):10.2f}")
    print(f"{'wall ms / step':24s} {results['eager'][2]:10.2f} {results['compiled'][2]:10.2f}")
    for name, (_, top, _) in results.items():
        print(f"largest events, {name}: " + "; ".join(f"{key} {ms:.2f}" for key, ms in top[:6]))
    eager = results["eager"][0]
    total = sum(eager.values())
    floor = eager.get("matrix products", 0.0) + eager.get("attention", 0.0)
    print(
        f"eager: matrix products and attention are {floor / total:.0%} of self time; removing all else would make "
        f"the step at most {total / floor:.2f}x faster (measured eager/compiled: "
        f"{results['eager'][2] / results['compiled'][2]:.2f}x)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
