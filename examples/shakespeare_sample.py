"""Tiny Shakespeare, character level: train a diffusion and a Full Wave CausalLM briefly, then read what each writes.

Both models have the same shape, seed and data order; only the integrator differs (diffusion: Euler on the residual
fields, the pre-LN transformer; full_wave: semi-implicit Euler on the wave equation, τ = 0.5). After training each
continues the same prompt with the same draws (``CausalLM.generate`` with its key/value cache), printed side by side.

    ODEFORMER_DATA=/path/to/data python examples/shakespeare_sample.py [--steps 300] [--prompt "ROMEO:"]

Without ``text/tinyshakespeare.txt`` under ``$ODEFORMER_DATA`` (``odeformer-data shakespeare`` fetches it) it says so
and exits with code 2 without training.
"""

import argparse
import itertools
import sys
import textwrap
import time

import torch
import torch.nn.functional as F

import odeformer
from odeformer.data import DatasetNotFound, load
from odeformer.generate import sample_text


def train(model, stream, steps, context, batch, seed):
    optimiser = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.05)
    generator = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(steps):
        starts = torch.randint(0, len(stream) - context - 1, (batch,), generator=generator)
        chunk = stream[starts[:, None] + torch.arange(context + 1)]  # (B, T + 1)
        logits = model(chunk[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), chunk[:, 1:].flatten())
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimiser.step()
    return model.eval()


@torch.no_grad()
def validation_loss(model, stream, context, windows=32):
    starts = torch.linspace(0, len(stream) - context - 2, windows).long()
    chunk = stream[starts[:, None] + torch.arange(context + 1)]
    return F.cross_entropy(model(chunk[:, :-1]).flatten(0, 1), chunk[:, 1:].flatten()).item()


def side_by_side(texts, width=48):
    """Texts in columns of ``width`` characters, their own line breaks kept."""
    columns = [[piece for line in text.split("\n") for piece in (textwrap.wrap(line, width) or [""])] for text in texts]
    return "\n".join(
        "  |  ".join(part.ljust(width) for part in row).rstrip()
        for row in itertools.zip_longest(*columns, fillvalue="")
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--prompt", default="ROMEO:")
    parser.add_argument("--tokens", type=int, default=300)
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--top-k", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args(argv)
    try:
        data = load("shakespeare")
    except DatasetNotFound as missing:
        print(f"skipped: {' '.join(str(missing).split())}", file=sys.stderr)
        return None
    itos = data.meta["itos"]
    train_stream, val_stream = data.splits["train"][0], data.splits["val"][0]
    results = {}
    for solver in ("diffusion", "full_wave"):
        torch.manual_seed(args.seed)
        model = odeformer.CausalLM(
            len(itos), args.context, depth=args.depth, dim=args.dim, heads=4, solver=solver
        )
        start = time.perf_counter()
        train(model, train_stream, args.steps, args.context, args.batch, args.seed)
        seconds = time.perf_counter() - start
        generator = torch.Generator().manual_seed(args.seed)
        text = sample_text(model, itos, args.prompt, args.tokens, args.temperature, args.top_k, generator)
        results[solver] = {"val_loss": validation_loss(model, val_stream, args.context), "sample": text, "s": seconds}
    width = 48
    print(
        "  |  ".join(
            f"{s}: val loss {r['val_loss']:.3f} nats, {r['s']:.0f} s".ljust(width) for s, r in results.items()
        ).rstrip()
    )
    print("-" * (2 * width + 5))
    print(side_by_side([r["sample"] for r in results.values()], width))
    return results


if __name__ == "__main__":
    try:
        sys.exit(0 if main() is not None else 2)
    except KeyboardInterrupt:
        sys.exit("interrupted")  # one line and exit 1, not a traceback
