"""``odeformer-sample`` (= ``python -m odeformer.app.commands.sample``): text from a character-level language-model
run.

    odeformer-sample outputs/2026-01-01/12-00-00 --prompt "ROMEO:" --tokens 200 --temperature 0.8 --top-k 40

It rebuilds the run's model from its ``best.pt`` (:func:`odeformer.app.run.sampling.load`: weights only, through the
package's registered builders) and prints the prompt and its continuation as it is made, a few characters at a time:
Ctrl-C stops it with what was made printed. Bad input — a run directory without ``best.pt``, a run of another model, a
prompt character the vocabulary lacks — is one line on stderr and exit code 2, before torch is imported where the
command line alone shows it.
"""

from __future__ import annotations

import sys

from . import Parser, run

CHUNK = 64
"""Characters generated per call: each is printed as soon as its call returns."""


def parser() -> Parser:
    p = Parser(
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
    return run("odeformer-sample", lambda: _sample(parser().parse_args(argv)))


def _sample(args) -> int:
    if args.tokens < 0 or not 0 <= args.seed <= 2**63 - 1:
        raise ValueError(
            f"--tokens must be 0 or more and --seed from 0 to 2**63 - 1, got {args.tokens} and {args.seed}."
        )
    import torch

    from ...generate import sample_text
    from ..run.sampling import load

    model, itos = load(args.run_dir, args.checkpoint, args.stepper)
    generator = torch.Generator().manual_seed(args.seed)
    text, made = args.prompt, 0
    try:
        while made < args.tokens or not made:
            count = min(CHUNK, args.tokens - made)
            context = text[-model.max_len :]
            new = sample_text(model, itos, context, count, args.temperature, args.top_k, generator)[len(context) :]
            print(args.prompt + new if not made else new, end="", flush=True)  # the prompt once it is known good
            text, made = text + new, made + max(count, 1)
    except KeyboardInterrupt:
        print(flush=True)
        print(f"odeformer-sample: interrupted (Ctrl-C) after {len(text) - len(args.prompt)} of {args.tokens} "
              "characters; the text above is what was made.", file=sys.stderr)  # fmt: skip
        return 130
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
