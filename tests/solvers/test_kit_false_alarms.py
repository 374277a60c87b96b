"""No false alarms: every registered stepper, named tableau and learnable family (its parameter near both ends of its
range), and correct schemes written here (Yoshida's sixth- and eighth-order compositions, Dormand–Prince 5, a
variable-step Adams–Bashforth 2 with its start-up step), pass check_stepper whatever is drawn.

The slow suite runs each once from a fixed seed. The full sweep (many seeds, and thorough runs) is this module run as
a script: ``python tests/solvers/test_kit_false_alarms.py --runs 20 --thorough 3`` runs :func:`stepper_report` (every
claim to its end) and prints one line per run with its seed and each claim's seconds (or every failed claim's
message), prints every thread's stack when a run goes on past ``--stall`` seconds, and exits 1 if any correct scheme
failed. Labels after the options sweep only those schemes.
"""

import argparse
import faulthandler
import sys
import time
from typing import ClassVar

import pytest

import solvers
from solvers import AbstractStepper, ButcherTableau, Composition, RungeKutta, Splitting
from solvers.testing import ORDER_TOLERANCE, check_order, check_stepper, stepper_report


def _verlet_composition(weights):
    """The composition of velocity Verlet steps of sizes ``w dt`` (kicks between two sub-steps merged)."""
    kicks = (weights[0] / 2, *((a + b) / 2 for a, b in zip(weights, weights[1:])), weights[-1] / 2)
    return Splitting(drifts=(0.0, *weights), kicks=kicks)


_W6 = (0.784513610477560, 0.235573213359357, -1.17767998417887)  # Yoshida, Phys. Lett. A 150 (1990), solution A


class Yoshida6(Composition):
    """Yoshida's sixth-order symmetric composition of seven velocity Verlet steps."""

    tableau = _verlet_composition((*_W6, 1 - 2 * sum(_W6), *reversed(_W6)))


_W8 = (  # Yoshida, Phys. Lett. A 150 (1990), order 8, solution A: w1 ... w7
    -1.61582374150097,
    -2.44699182370524,
    -0.00716989419708120,
    2.44002732616735,
    0.157739928123617,
    1.82020630970714,
    1.04242620869991,
)


class Yoshida8(Composition):
    """Yoshida's eighth-order symmetric composition of fifteen velocity Verlet steps (w7 ... w1, w0, w1 ... w7)."""

    tableau = _verlet_composition((*reversed(_W8), 1 - 2 * sum(_W8), *_W8))


class DormandPrince5(RungeKutta):
    """Dormand & Prince's fifth-order weights (J. Comput. Appl. Math. 6 (1980)), first same as last."""

    tableau = ButcherTableau(
        A=[
            [],
            [1 / 5],
            [3 / 40, 9 / 40],
            [44 / 45, -56 / 15, 32 / 9],
            [19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729],
            [9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656],
            [35 / 384, 0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84],
        ],
        b=[35 / 384, 0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84, 0],
    )


class VariableStepAB2(AbstractStepper):
    """Adams–Bashforth 2 for any step sequence, ``y + dt ((1 + r/2) f_n - (r/2) f_{n-1})`` with ``r = dt / dt_prev``,
    its history started by one explicit midpoint step."""

    order: ClassVar[int] = 2
    second_order: ClassVar[bool] = False
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 1
    multistep: ClassVar[bool] = True
    startup_evals: ClassVar[tuple[int, ...]] = (2,)

    def step(self, field, t, y, dt, state):
        f = field(t, y)
        if state is None:
            return y + dt * field(t + dt / 2, y + (dt / 2) * f), (f, dt)
        previous, dt_previous = state
        r = dt / dt_previous
        return y + dt * ((1 + r / 2) * f - (r / 2) * previous), (f, dt)


def schemes():
    """``{label: stepper class or instance}``: everything that must pass."""
    chosen = {name: cls for name, cls in sorted(solvers.STEPPERS.items())}
    chosen.update({f"tableau {name}": solvers.STEPPERS[name] for name in solvers.TABLEAUX if name not in chosen})
    chosen["triple_jump(lambda0=0.02)"] = solvers.TripleJump(lambda0=0.02)
    chosen["triple_jump(lambda0=0.48)"] = solvers.TripleJump(lambda0=0.48)
    chosen.update(Yoshida6=Yoshida6, Yoshida8=Yoshida8, DormandPrince5=DormandPrince5, VariableStepAB2=VariableStepAB2)
    return chosen


SCHEMES = schemes()


@pytest.mark.slow  # every scheme once, about 5-10 s each
@pytest.mark.parametrize("label", sorted(SCHEMES))
def test_a_correct_scheme_passes_a_drawn_run(label):
    report = check_stepper(SCHEMES[label], seed=20261204 + sorted(SCHEMES).index(label))
    assert report["order"] or SCHEMES[label].order == 0


def test_the_order_check_confirms_an_eighth_order_composition():
    assert Yoshida8().order == 8  # derived by the tableau engine from the weights
    slopes = check_order(Yoshida8)
    assert all(abs(s - 8) <= ORDER_TOLERANCE for s in slopes)


def _sweep(runs: int, thorough: int, only: list[str], stall: float) -> int:
    """Run every chosen scheme ``runs`` times by default and ``thorough`` times at ``examples=200``, one line a run with
    each claim's seconds; a run still going after ``stall`` seconds prints where it is (every thread's stack)."""
    failures = 0
    for label in only or sorted(SCHEMES):
        for examples, count in ((None, runs), (200, thorough)):
            for _ in range(count):
                start = time.perf_counter()
                faulthandler.dump_traceback_later(stall, repeat=True)
                try:
                    report = stepper_report(SCHEMES[label], **({} if examples is None else {"examples": examples}))
                finally:
                    faulthandler.cancel_dump_traceback_later()
                took = time.perf_counter() - start
                claims = " ".join(f"{r.claim} {r.seconds:.0f}s" for r in report.results if r.seconds >= 1)
                if report.passed:
                    verdict = f"ok (seed {report.seed}; {claims})"
                else:
                    failures += 1
                    verdict = f"FALSE ALARM (seed {report.seed}): " + " | ".join(
                        f"{r.claim}: {r.message}".replace("\n", " | ") for r in report.failed
                    )
                print(f"{label} examples={examples or 'default'} {took:.1f}s {verdict}", flush=True)
    return failures


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Run check_stepper repeatedly on every correct scheme.")
    parser.add_argument("--runs", type=int, default=20, help="default runs per scheme")
    parser.add_argument("--thorough", type=int, default=3, help="runs at examples=200 per scheme")
    parser.add_argument("--stall", type=float, default=900, help="seconds after which a run prints its stack")
    parser.add_argument("only", nargs="*", help="labels to sweep (default: all)")
    args = parser.parse_args()
    sys.exit(1 if _sweep(args.runs, args.thorough, args.only, args.stall) else 0)
