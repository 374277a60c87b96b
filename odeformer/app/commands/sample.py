"""``odeformer-sample`` (= ``python -m odeformer.app.commands.sample``): text from a character-level language-model
run.

    odeformer-sample outputs/2026-01-01/12-00-00 --prompt "ROMEO:" --tokens 200 --temperature 0.8 --top-k 40

It rebuilds the run's model from its ``best.pt`` (:func:`odeformer.app.run.sampling.load`: weights only, through the
package's registered builders) and prints the prompt and its continuation. Bad input — a run directory without
``best.pt``, a run of another model, a prompt character the vocabulary lacks — is one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import sys

import torch

from ...generate import sample_text
from ..run.sampling import SampleError, load


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="odeformer-sample", description="Print text from a character-level CausalLM run (its best weights)."
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="the run directory (holding best.pt)")
    p.add_argument("--prompt", default="\n", help="the text to continue (default: a newline)")
    p.add_argument("--tokens", type=int, default=200, help="characters to generate (default 200)")
    p.add_argument("--temperature", type=float, default=1.0, help="0: greedy; higher: more varied (default 1)")
    p.add_argument("--top-k", type=int, default=None, help="draw from the k most likely characters only")
    p.add_argument("--seed", type=int, default=0, help="seed of the draws (default 0)")
    p.add_argument("--checkpoint", default="best.pt", choices=("best.pt", "last.pt"), help="default best.pt")
    p.add_argument("--stepper", default=None, help="module.Class: import the run's own scheme (if you trust it)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.tokens < 0:
            raise SampleError(f"--tokens must be 0 or more, got {args.tokens}.")
        if args.seed < 0:
            raise SampleError(f"--seed must be 0 or more, got {args.seed}.")
        model, itos = load(args.run_dir, args.checkpoint, args.stepper)
        generator = torch.Generator().manual_seed(args.seed)
        text = sample_text(model, itos, args.prompt, args.tokens, args.temperature, args.top_k, generator)
    except (ValueError, TypeError, OSError, RuntimeError) as error:  # also CheckpointError, DatasetNotFound
        print(f"odeformer-sample: error: {' '.join(str(error).split())}", file=sys.stderr)
        return 2
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
