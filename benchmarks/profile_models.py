"""What a training step saves and where its time goes, model by model: the figures behind the memory and time
readings of ``docs/RESULTS.md``.

For each model of ``benchmarks.run`` (a solver's ViT, ``reference``, ``hf``, ``torch``): the activations one training
forward pass saves for backward (distinct storages seen by ``torch.autograd.graph.saved_tensors_hooks``, the weights
left out) at the memory probe's size, then ``--steps`` training steps (or, with ``--inference``, no-grad forward
passes) at the timing size under ``torch.profiler``: self CPU milliseconds per step of the operations named by
``--ops`` (:func:`matches`), the total self time and the wall time. The models run
one after another, each warmed up first; read the operations side by side, not the totals across runs.

    python -m benchmarks.profile_models [--models diffusion reference hf] [--steps 5] [--threads 1] [--inference]
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from benchmarks.profile_compile import profile_step
from benchmarks.run import MEMORY, VIT, build_model, inference_step, train_step

OPS = ("gelu", "gelu_backward", "native_layer_norm", "add", "copy_", "cat", "scaled_dot_product*", "addmm", "mm")
"""The operations reported by default: an ATen operator's name, or a substring of event names ending in ``*``."""


def matches(op: str, key: str) -> bool:
    """Whether the profiler event ``key`` is operation ``op`` (``aten::op`` or ``op``; ``op*``: any event containing
    ``op``)."""
    if op.endswith("*"):
        return op[:-1] in key
    return key in (op, f"aten::{op}")


def saved_megabytes(model: torch.nn.Module, batch: int, image: int) -> float:
    """Megabytes of the distinct storages a training forward pass of ``model`` saves for backward, weights left out."""
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    storages: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in weights:
            storages[storage.data_ptr()] = storage.nbytes()
        return t

    images = torch.randn(batch, 3, image, image)
    labels = torch.randint(0, 10, (batch,))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = F.cross_entropy(model(images), labels)
    del loss
    return sum(storages.values()) / 2**20


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["diffusion", "reference", "hf"])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--inference", action="store_true", help="profile no-grad forward passes instead")
    parser.add_argument("--ops", nargs="+", default=list(OPS), help="operations to report (name, or substring*)")
    parser.add_argument("--tiny", action="store_true", help="two layers at width 32 (a check that it runs)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    timing = dict(VIT, depth=2, dim=32, batch=4) if args.tiny else VIT
    memory = dict(MEMORY, dim=32, batch=4) if args.tiny else MEMORY
    depth = timing["depth"]
    what = "no-grad forward" if args.inference else "training step"
    print(
        f"saved activations: depth {depth}, dim {memory['dim']}, batch {memory['batch']}; profile: {what}, dim "
        f"{timing['dim']}, batch {timing['batch']}, {args.threads} thread(s), {args.steps} steps (self ms / step)"
    )
    print(
        f"{'model':12s} {'saved MB':>9s} "
        + " ".join(f"{op:>{max(8, len(op))}s}" for op in args.ops)
        + f" {'total':>9s} {'wall':>9s}"
    )
    for name in args.models:
        saved = saved_megabytes(
            build_model(name, depth, memory["dim"], memory["image"], memory["patch"]), memory["batch"], memory["image"]
        )
        model = build_model(name, depth, timing["dim"], timing["image"], timing["patch"])
        if args.inference:
            step = inference_step(model, torch.randn(timing["batch"], 3, timing["image"], timing["image"]))
        else:
            step = train_step(model, timing["batch"], timing["image"], "cpu")
        for _ in range(3):
            step()
        by_category, events, wall = profile_step(step, args.steps)
        per_op = [sum(ms for key, ms in events if matches(op, key)) for op in args.ops]
        print(
            f"{name:12s} {saved:9.1f} "
            + " ".join(f"{ms:{max(8, len(op))}.2f}" for op, ms in zip(args.ops, per_op))
            + f" {sum(by_category.values()):9.1f} {wall:9.1f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
