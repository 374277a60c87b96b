"""Every registered stepper on the harmonic oscillator ``x'' = -x`` over a long horizon.

Prints, per scheme, the measured order of convergence (to the dynamics the scheme declares: see
``AbstractStepper.limit_field``; none for a scheme of order 0, which has no small-step limit) and the energy error,
and saves a PNG of the relative energy error against time.
First-order schemes run on the stacked state ``[x, v]`` with field ``[v, -x]``.

    python examples/oscillator.py [--dt 0.1] [--horizon 1000] [--out outputs/oscillator_energy.png]
"""

import argparse
import pathlib
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from solvers import STEPPERS  # noqa: E402
from solvers.testing import Problem, measure_order  # noqa: E402

OSCILLATOR = Problem(
    "x'' = -x",
    field=lambda t, x: -x,
    x0=torch.tensor([[1.0]], dtype=torch.float64),
    v0=torch.tensor([[0.5]], dtype=torch.float64),
    T=2.0,
    linear=True,
    potential=lambda x: 0.5 * (x * x).sum(-1),
)


@torch.no_grad()
def energy_errors(stepper, dt: float, horizon: float) -> torch.Tensor:
    """Relative energy error ``|H(t) - H(0)| / H(0)`` after each step."""
    y, field = OSCILLATOR.initial(stepper), OSCILLATOR.field_for(stepper)
    H0 = OSCILLATOR.energy(y)
    state, t, out = stepper.init(field, 0.0, y), 0.0, []
    for _ in range(round(horizon / dt)):
        y, state = stepper.step(field, t, y, dt, state)
        t += dt
        out.append(float((OSCILLATOR.energy(y) - H0).abs() / H0))
    return torch.tensor(out, dtype=torch.float64)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dt", type=float, default=0.1)
    parser.add_argument("--horizon", type=float, default=1000.0)
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("outputs/oscillator_energy.png"))
    args = parser.parse_args(argv)

    print(f"x'' = -x, x0 = 1, v0 = 0.5, dt = {args.dt}, t in [0, {args.horizon:g}]")
    print(f"{'stepper':<20} {'declared':>8} {'measured':>8} {'max energy err':>15} {'final energy err':>17}")
    fig, ax = plt.subplots(figsize=(8, 5))
    results = {}
    for name, cls in STEPPERS.schemes().items():
        stepper = cls()
        measured = None if cls.order == 0 else measure_order(stepper, OSCILLATOR).slope  # order 0: no limit to meet
        errors = energy_errors(stepper, args.dt, args.horizon)
        results[name] = {"order": measured, "max_energy_error": float(errors.max()), "final": float(errors[-1])}
        shown = "–" if measured is None else f"{measured:.2f}"
        print(f"{name:<20} {cls.order:>8d} {shown:>8} {float(errors.max()):>15.2e} {float(errors[-1]):>17.2e}")
        times = torch.arange(1, len(errors) + 1) * args.dt
        finite = torch.isfinite(errors) & (errors < 1e3)  # a blown-up run is drawn until it leaves the axes
        ax.loglog(times[finite], errors[finite].clamp_min(1e-17), label=name, lw=1)
    ax.set_xlabel("t")
    ax.set_ylabel("|H(t) - H(0)| / H(0)")
    ax.set_title(f"Energy error on x'' = -x, dt = {args.dt}")
    ax.legend(fontsize=8, ncol=2)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=120, bbox_inches="tight")
    print("Orders are measured against each scheme's limit dynamics (limit_field): light_wave -> x' = f/(1-lam),")
    print("damped -> v' = a - gamma v, mix -> x' = lam v + (1-lam) a; their energy is not conserved by design.")
    print("Order 0 (velocity_mix): no small-step limit in (x, v), so no order is measured (shown as –).")
    print(f"saved {args.out}")
    return results


if __name__ == "__main__":
    try:
        sys.exit(0 if main() is not None else 2)
    except KeyboardInterrupt:
        sys.exit("interrupted")  # one line and exit 1, not a traceback
