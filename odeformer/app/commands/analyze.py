"""``odeformer-analyze``: why a scheme behaves as it does, on paper and in a trained model.

    odeformer-analyze forest_ruth                       # a registered scheme: its region, intervals, error constant
    odeformer-analyze my_schemes.DampedVerlet           # a class of your own (naming a module runs its code)
    odeformer-analyze solver=tableau solver.options.A=[[],[1/2]] solver.options.b=[0,1]   # the training overrides
    odeformer-analyze outputs/run --refine 2 4 8        # a trained run: its stability atlas, and is it an ODE?

For a scheme (:func:`odeformer.app.reporting.analysis.scheme_report`, numbers from :mod:`solvers.analysis`): its
order, the stability polynomial (exact for a tableau), the real and imaginary stability intervals or the
oscillator's interval, dispersion and dissipation orders, and the principal error norm, as ``report.md`` and PNGs in
``--out`` (default ``outputs/analysis/<name>``). For a run directory (:mod:`odeformer.atlas`): per layer, the leading
eigenvalues of its attention field's Jacobian at the state it receives on a validation batch, the headroom on its
step, and the contraction the scheme predicts beside the one measured; with ``--refine K ...``, each layer's step
split into ``K`` steps of ``dt/K``: the logits' change, the task's metric and the observed order (``--out``
default: ``<run>/analysis``). ``--json FILE`` writes the numbers (``inf`` as the string ``"inf"``). Bad input is one
line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .. import files
from ..run.bounds import check_refinement, check_stages
from . import Parser, file_argument, folder_argument, run

JSON_KEYS = (
    "order", "stability_polynomial", "real_stability_interval", "imaginary_stability_interval", "principal_error_norm",
    "oscillator_stability_interval", "dispersion_order", "dissipation_order",
)  # fmt: skip
"""The keys a scheme's ``--json`` always has (``None`` where one does not apply)."""


def parser() -> Parser:
    made = Parser(prog="odeformer-analyze", description=__doc__.splitlines()[0])
    made.add_argument(
        "target",
        nargs="+",
        help="a solver name, module.Class, a run directory, or training overrides (solver=... solver.options....)",
    )
    made.add_argument("--out", type=folder_argument, default=None, help="folder of report.md and its figures")
    made.add_argument("--json", type=file_argument, default=None, metavar="FILE", help="write the numbers as JSON")
    made.add_argument(
        "--refine", type=float, nargs="+", default=None, metavar="K", help="a run: K steps per layer step (0.5: half)"
    )
    made.add_argument("--batch", type=int, default=16, help="a run: validation items for the atlas (default 16)")
    made.add_argument("--eigenvalues", type=int, default=16, help="a run: leading eigenvalues per layer")
    made.add_argument("--checkpoint", default="best.pt", help="a run: the checkpoint file (default best.pt)")
    made.add_argument("--stepper", default=None, metavar="MODULE.CLASS", help="a run of a scheme of your own")
    return made


def main(argv: list[str] | None = None) -> int:
    return run("odeformer-analyze", lambda: _main(parser().parse_args(argv)))


def _check(args: argparse.Namespace) -> None:
    if not 1 <= args.batch <= MAX_BATCH or not 1 <= args.eigenvalues <= MAX_BATCH:
        raise ValueError(
            f"--batch and --eigenvalues must be positive (at most {MAX_BATCH}), got {args.batch} and "
            f"{args.eigenvalues}."
        )
    if args.refine is not None:
        check_refinement(args.refine)


MAX_BATCH = 4096
"""The most validation items (and eigenvalues per layer) an atlas reads."""


def _main(args: argparse.Namespace) -> int:
    _check(args)
    target = args.target
    first = Path(target[0])
    if len(target) == 1 and first.is_dir():
        return _run(first, args)
    if args.refine is not None:
        raise ValueError("--refine measures a trained run: give a run directory (one holding best.pt).")
    if any("=" in item for item in target):
        stepper, label = _from_overrides(target)
    elif len(target) == 1:
        stepper, label = _from_name(target[0])
    else:
        raise ValueError(f"give one solver name, module.Class or run directory, or overrides; got {target}.")
    from ..reporting.analysis import scheme_report, write_json

    out = args.out or files.folder(Path("outputs") / "analysis" / label)
    numbers = scheme_report(stepper, label, out)
    if args.json is not None:
        write_json(args.json, {key: numbers.get(key) for key in JSON_KEYS} | numbers)
    print(f"wrote {files.printable(out / 'report.md')}")
    return 0


def _stepper_of(chosen: Any, label: str) -> Any:
    from solvers import make_stepper

    from ...continuous import ContinuousSolver

    if isinstance(chosen, ContinuousSolver):
        raise ValueError(
            f"{label!r} is a continuous-depth solver (an adaptive library method), not a scheme with a step to analyse."
        )
    return make_stepper(chosen.stepper, chosen.options, None)


def _from_name(name: str) -> tuple[Any, str]:
    from ...registry import as_solver
    from ..run.schemes import import_scheme

    if "." in name:
        import_scheme(name, key="target")  # its name checked, its module run: one line if either fails
    chosen = as_solver(name)
    return _stepper_of(chosen, name), name.rsplit(".", 1)[-1]


def _from_overrides(overrides: list[str]) -> tuple[Any, str]:
    from omegaconf import OmegaConf

    from ..run.builder import SOLVER_TARGETS, target
    from .train import compose

    node = OmegaConf.to_container(compose(overrides).solver, resolve=True)
    check_stages({"solver": node})  # a tableau's stages and coefficients bounded before its claims are derived
    build = target(node, SOLVER_TARGETS, "solver")
    chosen = build(**{k: v for k, v in node.items() if not k.startswith("_")})
    return _stepper_of(chosen, node.get("name", "solver")), str(node.get("name", "solver"))


def _run(run_dir: Path, args: argparse.Namespace) -> int:
    out = args.out or files.folder(run_dir / "analysis", run_dir)  # before the work: a read-only run, a link
    from ..reporting.analysis import run_markdown, write_json
    from ..run.analysis import analyse_run
    from ..run.launch import use_idle_threads

    use_idle_threads()
    numbers, model = analyse_run(run_dir, args.batch, args.eigenvalues, args.refine, args.checkpoint, args.stepper)
    run_markdown(numbers, model, out)
    if args.json is not None:
        write_json(args.json, numbers)
    print(f"wrote {files.printable(out / 'report.md')}")
    return 0
