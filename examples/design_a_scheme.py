"""Design a second-order scheme as coefficients: its claims derived, checked by the kit, its layer measured, trained.

The scheme: kick 1/6, drift 1/2, kick 2/3, drift 1/2, kick 1/6 — Simpson's weights on the force. Nothing about it is
written by hand: the order comes from the Nyström-tree order conditions, symplecticity from its being a splitting,
symmetry from its reading the same backwards, the evaluations from its kicks (three, two on a repeated field: its
last kick is the next step's first). The same scheme trains from the command line:

    odeformer-train solver=tableau solver.options.drifts=[0,1/2,1/2] solver.options.kicks=[1/6,2/3,1/6]

    python examples/design_a_scheme.py [--steps 150]
"""

import argparse
import sys
import time

import torch
import torch.nn.functional as F

import odeformer
import solvers
from odeformer.data import load
from solvers.testing import check_stepper

DRIFTS, KICKS = [0, "1/2", "1/2"], ["1/6", "2/3", "1/6"]


def train(model, data, steps):
    images, labels = data.splits["train"]
    optimiser = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.05)
    generator = torch.Generator().manual_seed(0)
    for _ in range(steps):
        index = torch.randint(0, len(labels), (64,), generator=generator)
        loss = F.cross_entropy(model(images[index]), labels[index])
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    test_images, test_labels = data.splits["test"]
    with torch.no_grad():
        return (model.eval()(test_images).argmax(-1) == test_labels).float().mean().item()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=150)
    args = parser.parse_args(argv)

    Simpson = solvers.tableau(drifts=DRIFTS, kicks=KICKS)  # a stepper, its claims derived from the coefficients
    claims = Simpson.describe()
    print({key: claims[key] for key in ("order", "symplectic", "symmetric", "evals_per_step", "fsal")})
    print(claims["order_conditions"])  # which condition stops it at order 2, and by how much

    report = check_stepper(Simpson)  # the kit measures what the coefficients claim
    slopes = ", ".join(f"{s:.2f}" for s in report["order"])
    print(f"kit: order slopes {slopes}; symplectic and reversible checked on drawn problems (evidence, not proof)")

    layer = odeformer.solver("tableau", options={"drifts": DRIFTS, "kicks": KICKS})
    measured = odeformer.check_solver(layer)  # attention by the scheme, then the FFN: a Lie layer, order 1
    print(f"layer: declared order {measured['declared']}, measured {measured['slope']:.2f}")

    torch.manual_seed(0)
    model = odeformer.ViT(image_size=8, patch_size=2, num_classes=10, depth=4, dim=32, heads=4, solver=layer)
    start = time.perf_counter()
    accuracy = train(model, load("digits"), args.steps)
    print(f"digits, {args.steps} steps: test accuracy {accuracy:.3f} in {time.perf_counter() - start:.1f} s")
    return {"claims": claims, "order": report["order"], "layer": measured, "accuracy": accuracy}


if __name__ == "__main__":
    try:
        sys.exit(0 if main() is not None else 2)
    except KeyboardInterrupt:
        sys.exit("interrupted")  # one line and exit 1, not a traceback
