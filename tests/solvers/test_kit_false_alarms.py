"""No false alarms: every registered stepper, named tableau and learnable family (its parameter near both ends of its
range), and correct schemes written here (Yoshida's sixth- and eighth-order compositions, Kahan and Li's eighth-order
one, Dormand–Prince 5, a variable-step Adams–Bashforth 2 with its start-up step, Verlet with a friction of its own that
depends on the absolute time (Nesterov's ``3 / t`` family, one of them reversible), saturates in the velocity
(``c tanh v``) or is clamped (``c clamp(v, -1, 1)``), Verlets with a force of their own (a mass term, a ``k / t²``
singular at ``t = 0``, a drive ``b sin(w t)``), a drag ``c |v| v``), a learnable splitting of order 1 that starts
at its order-2 point, and the layers a model runs (block steppers, every check on blocks), pass check_stepper
whatever is drawn.

The slow suite runs each once from a fixed seed (a registered scheme's runs are tests/solvers/test_steppers.py's: half
the default draws in the default suite, the other half from another seed in the slow suite). The full sweep (many
seeds, and thorough runs) is this module run as a script: ``python tests/solvers/test_kit_false_alarms.py --runs 20
--thorough 3`` runs :func:`stepper_report` (every claim to its end) and prints one line per run with its seed and each
claim's seconds (or every failed claim's message), prints every thread's stack when a run goes on past ``--stall``
seconds, and exits 1 if any correct scheme failed. Labels after the options sweep only those schemes.
"""

import argparse
import faulthandler
import math
import sys
import time
from typing import ClassVar

import pytest
import torch

import solvers
from solvers import AbstractStepper, ButcherTableau, Composition, PhaseState, RungeKutta, Splitting, axpy
from solvers.testing import (
    ORDER_TOLERANCE,
    check_contexts,
    check_order,
    check_precision,
    check_reversible,
    check_stepper,
    check_symplectic,
    stepper_report,
)


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


_KL8 = (  # Kahan & Li, Math. Comp. 66 (1997), s15odr8: gamma_1 ... gamma_7 (gamma_8 = 1 - 2 sum)
    0.74167036435061295344822780,
    -0.40910082580003159399730010,
    0.19075471029623837995387626,
    -0.57386247111608226665638773,
    0.29906418130365592384446354,
    0.33462491824529818378495798,
    0.31529309239676659663205666,
)


class KahanLi8(Composition):
    """Kahan and Li's eighth-order symmetric composition of fifteen velocity Verlet steps (s15odr8): its error stays
    above its order's slope until float64's rounding floor on some problems."""

    tableau = _verlet_composition((*_KL8, 1 - 2 * sum(_KL8), *reversed(_KL8)))


class _FrictionVerlet(AbstractStepper, abstract=True):
    """``x'' = a(t, x) - friction``: velocity Verlet on the force between two half steps of the friction (Strang),
    order 2, two evaluations a step; neither symplectic nor reversible."""

    order: ClassVar[int] = 2
    second_order: ClassVar[bool] = True
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 2


class NesterovVerlet(_FrictionVerlet):
    """``x'' = a(t, x) - r / (t + s) x'`` (Nesterov's accelerated flow for ``r = 3``, ``s = 0``): the friction's exact
    flow ``v ((t₀ + s) / (t₁ + s))^r`` over each half step, the time a variable of the friction (so the force is
    evaluated at the step's middle). Singular at ``t = -s``: it states the times a model runs it at."""

    time_domain = (0.0, math.inf)

    def __init__(self, r: float = 3.0, s: float = 1.0):
        super().__init__()
        self.r, self.s = r, s

    def friction(self, v, t0, t1):
        return v * ((t0 + self.s) / (t1 + self.s)) ** self.r

    def step(self, field, t, y, dt, state):
        x, v = self._unpack(y)
        half, middle = 0.5 * dt, t + 0.5 * dt
        v = self.friction(v, t, middle)
        v = axpy(v, half, field(middle, x))
        x = axpy(x, dt, v)
        v = axpy(v, half, field(middle, x))
        return PhaseState(x, self.friction(v, middle, t + dt)), state

    def gamma(self, t):
        return self.r / (t + self.s)

    def limit_field(self, field):
        return lambda t, y: PhaseState(y.v, field(t, y.x) - self.gamma(t) * y.v)


class Nesterov(NesterovVerlet):
    """Nesterov's own ``3 / t``, singular at ``t = 0``."""

    def __init__(self):
        super().__init__(3.0, 0.0)


class RegularNesterov(NesterovVerlet):
    """``r / sqrt(1 + t²)``: like ``r / |t|`` far out, regular at every time, so it states no time domain."""

    time_domain = None

    def friction(self, v, t0, t1):  # exp(-r (asinh t1 - asinh t0)), the times in float64
        a0, a1 = (torch.asinh(torch.as_tensor(u, dtype=torch.float64)) for u in (t0, t1))
        return v * torch.exp(-self.r * (a1 - a0)).to(v.dtype)

    def gamma(self, t):
        return self.r / (torch.sqrt(1 + t * t) if isinstance(t, torch.Tensor) else math.sqrt(1 + t * t))


class TanhFriction(_FrictionVerlet):
    """``x'' = a(t, x) - c tanh(x')``: a friction that saturates (no step commutes with scaling the state), each half
    step of it by the explicit midpoint rule."""

    def __init__(self, c: float = 0.7):
        super().__init__()
        self.c = c

    def friction(self, v, h):
        return v - (h * self.c) * torch.tanh(v - (0.5 * h * self.c) * torch.tanh(v))

    def step(self, field, t, y, dt, state):
        x, v = self._unpack(y)
        half = 0.5 * dt
        v = axpy(self.friction(v, half), half, field(t, x))
        x = axpy(x, dt, v)
        v = axpy(v, half, field(t + dt, x))
        return PhaseState(x, self.friction(v, half)), state

    def limit_field(self, field):
        return lambda t, y: PhaseState(y.v, field(t, y.x) - self.c * torch.tanh(y.v))


class ClampedFriction(AbstractStepper):
    """``x'' = a(t, x) - c clamp(x', -1, 1)``: a friction continuous but not smooth, each half kick taking it at the
    velocity the kick starts from, so first order; where it saturates (large states) it is a constant force, which that
    treatment integrates exactly, and the error falls like ``dt**2`` there."""

    order: ClassVar[int] = 1
    second_order: ClassVar[bool] = True
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 2

    def __init__(self, c: float = 0.6):
        super().__init__()
        self.c = c

    def kick(self, a, v, h):
        return axpy(v, h, a - self.c * v.clamp(-1.0, 1.0))

    def step(self, field, t, y, dt, state):
        x, v = self._unpack(y)
        v = self.kick(field(t, x), v, 0.5 * dt)
        x = axpy(x, dt, v)
        return PhaseState(x, self.kick(field(t + dt, x), v, 0.5 * dt)), state

    def limit_field(self, field):
        return lambda t, y: PhaseState(y.v, field(t, y.x) - self.c * y.v.clamp(-1.0, 1.0))


class ForcedVerlet(AbstractStepper):
    """``x'' = a(t, x) + b sin(w t)``: a driving force of the scheme's own, velocity Verlet on the sum (symmetric). The
    force does not scale with the state, though at ``t = 0`` it vanishes; it holds its time in the state's dtype, as
    code written from the docs does (``torch.as_tensor(t, dtype=x.dtype)``), so at ``t = 1000`` in float32 the force
    is off by ``w t`` rounding units."""

    order: ClassVar[int] = 2
    second_order: ClassVar[bool] = True
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = True
    symmetric: ClassVar[bool] = True
    evals_per_step: ClassVar[int] = 2

    def __init__(self, b: float = 0.5, w: float = 3.0):
        super().__init__()
        self.b, self.w = b, w

    def force(self, field, t, x):
        return field(t, x) + self.b * torch.sin(self.w * torch.as_tensor(t, dtype=x.dtype))

    def step(self, field, t, y, dt, state):
        x, v = self._unpack(y)
        v = axpy(v, 0.5 * dt, self.force(field, t, x))
        x = axpy(x, dt, v)
        return PhaseState(x, axpy(v, 0.5 * dt, self.force(field, t + dt, x))), state

    def limit_field(self, field):
        return lambda t, y: PhaseState(y.v, self.force(field, t, y.x))


class QuadDragVerlet(_FrictionVerlet):
    """``x'' = a(t, x) - c |v| v``: a quadratic drag of the scheme's own, its exact flow ``v / (1 + c h |v|)`` over
    each half step around velocity Verlet. That flow blows up backwards in time, so the step has a pole at a negative
    ``dt`` (``1 + c dt |v| / 2 = 0``)."""

    def __init__(self, c: float = 0.4):
        super().__init__()
        self.c = c

    def drag(self, v, h):
        return v / (1 + self.c * h * v.abs())

    def step(self, field, t, y, dt, state):
        x, v = self._unpack(y)
        half = 0.5 * dt
        v = axpy(self.drag(v, half), half, field(t, x))
        x = axpy(x, dt, v)
        v = axpy(v, half, field(t + dt, x))
        return PhaseState(x, self.drag(v, half)), state

    def limit_field(self, field):
        return lambda t, y: PhaseState(y.v, field(t, y.x) - self.c * y.v.abs() * y.v)


class ThetaVerlet(AbstractStepper):
    """A position-velocity splitting with a learnable ``θ = sigmoid(w)``: drift ``θ dt``, kick, drift ``(1 - θ) dt``.
    Symplectic for every ``θ`` (each part is a shear), first order, second order at ``θ = 1/2``, where it starts."""

    order: ClassVar[int] = 1
    second_order: ClassVar[bool] = True
    symplectic: ClassVar[bool] = True
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 1

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor(0.0))

    def step(self, field, t, y, dt, state):
        x, v = self._unpack(y)
        theta = torch.sigmoid(self.w).to(x.dtype)
        x = x + (theta * dt) * v
        v = axpy(v, dt, field(t + theta * dt, x))
        return PhaseState(x + ((1 - theta) * dt) * v, v), state


class HeunDeclaredFirstOrder(solvers.Heun):
    """Wrong: Heun declaring order 1 (faster on every problem)."""

    order: ClassVar[int] = 1


class LargeStatesEulerTanh(TanhFriction):
    """Wrong: TanhFriction whose second half kick reuses the force at the step's start where the velocity is large
    (``|v| > 100`` anywhere): first order there."""

    def step(self, field, t, y, dt, state):
        x, v = self._unpack(y)
        half = 0.5 * dt
        start = field(t, x)
        v = axpy(self.friction(v, half), half, start)
        x = axpy(x, dt, v)
        end = field(t + dt, x)
        v = axpy(v, half, start if bool(v.abs().max() > 100) else end)
        return PhaseState(x, self.friction(v, half)), state


class ReversibleNesterov(NesterovVerlet):
    """``x'' = a(t, x) - (2 / t) x'``: the friction's exact flow from the step's middle out is undone by the step
    back, so the step is symmetric (reversible) though it is not symplectic; singular at ``t = 0``, so every round
    trip must start inside its time domain."""

    reversible: ClassVar[bool] = True
    symmetric: ClassVar[bool] = True

    def __init__(self):
        super().__init__(2.0, 0.0)


class KleinGordonVerlet(AbstractStepper):
    """Velocity Verlet on ``x'' = a(t, x) - m² x``: a mass term of the scheme's own, a force with a potential, so the
    step is symplectic; the problem's energy is not its limit's, whose energy ``H + m² |x|² / 2`` it conserves."""

    order: ClassVar[int] = 2
    second_order: ClassVar[bool] = True
    symplectic: ClassVar[bool] = True
    reversible: ClassVar[bool] = True
    symmetric: ClassVar[bool] = True
    evals_per_step: ClassVar[int] = 2
    mass: ClassVar[float] = 0.5

    def step(self, field, t, y, dt, state):
        x, v = self._unpack(y)
        v = axpy(v, 0.5 * dt, field(t, x) - self.mass * x)
        x = axpy(x, dt, v)
        v = axpy(v, 0.5 * dt, field(t + dt, x) - self.mass * x)
        return PhaseState(x, v), state

    def limit_field(self, field):
        return lambda t, y: PhaseState(y.v, field(t, y.x) - self.mass * y.x)


class InverseSquareVerlet(AbstractStepper):
    """Position Verlet on ``x'' = a(t, x) - (k / t²) x``: a conservative force of its own that depends on the time
    and is singular at ``t = 0`` (symplectic, symmetric, one evaluation): its energy is measured inside its time
    domain, and not as the problem's."""

    order: ClassVar[int] = 2
    second_order: ClassVar[bool] = True
    symplectic: ClassVar[bool] = True
    reversible: ClassVar[bool] = True
    symmetric: ClassVar[bool] = True
    evals_per_step: ClassVar[int] = 1
    time_domain = (0.0, math.inf)
    k: ClassVar[float] = 0.75

    def step(self, field, t, y, dt, state):
        x, v = self._unpack(y)
        middle = t + 0.5 * dt
        x = axpy(x, 0.5 * dt, v)
        v = axpy(v, dt, field(middle, x) - (self.k / middle**2) * x)
        x = axpy(x, 0.5 * dt, v)
        return PhaseState(x, v), state

    def limit_field(self, field):
        return lambda t, y: PhaseState(y.v, field(t, y.x) - (self.k / t**2) * y.x)


class ShortLivedVerlet(solvers.VelocityVerlet):
    """Velocity Verlet stated on the times a model runs it at, a short interval ``(1, 4)``: every fixed run (the
    evaluations' ten steps of up to 2.5, the round trips' step of 1, the energy's span of 200) must fit inside."""

    time_domain = (1.0, 4.0)


class LateForceVerlet(AbstractStepper):
    """Velocity Verlet on ``x'' = a(t, x) - k(t) x`` with ``k = 0`` before ``t = 1`` and ``0.5`` from ``t = 2`` on
    (smoothly between): a force of its own that acts only later, so its limit differs from the problem's flow at
    times the energy run reaches, not at the first ones; symplectic at every step (the kicks are forces of a
    potential at each time)."""

    order: ClassVar[int] = 2
    second_order: ClassVar[bool] = True
    symplectic: ClassVar[bool] = True
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 2

    @staticmethod
    def k(t):  # the time kept differentiable (a learnable dt's gradient runs through it)
        s = torch.clamp(torch.as_tensor(t, dtype=torch.float64) - 1.0, 0.0, 1.0)
        return 0.5 * s * s * (3 - 2 * s)

    def step(self, field, t, y, dt, state):
        x, v = self._unpack(y)
        v = axpy(v, 0.5 * dt, field(t, x) - self.k(t) * x)
        x = axpy(x, dt, v)
        return PhaseState(x, axpy(v, 0.5 * dt, field(t + dt, x) - self.k(t + dt) * x)), state

    def limit_field(self, field):
        return lambda t, y: PhaseState(y.v, field(t, y.x) - self.k(t) * y.x)


class GeometricTimeVerlet(AbstractStepper):
    """Position Verlet whose kick is scaled by ``sqrt(t (t + dt)) / (t + dt / 2) = 1 + O(dt²)``: order 2 with the
    problem's own limit, but its step reads the absolute time, so it says ``time_invariant = False`` and is compared
    where it runs (symmetric in ``t`` and ``t + dt``: reversible)."""

    order: ClassVar[int] = 2
    second_order: ClassVar[bool] = True
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = True
    symmetric: ClassVar[bool] = True
    evals_per_step: ClassVar[int] = 1
    time_domain = (0.0, math.inf)
    time_invariant: ClassVar[bool] = False

    def step(self, field, t, y, dt, state):
        x, v = self._unpack(y)
        middle = t + 0.5 * dt
        ratio = (t * (t + dt)) ** 0.5 / middle
        x = axpy(x, 0.5 * dt, v)
        v = axpy(v, dt * ratio, field(middle, x))
        return PhaseState(axpy(x, 0.5 * dt, v), v), state


def schemes():
    """``{label: stepper class or instance}``: everything that must pass."""
    chosen = {name: cls for name, cls in sorted(solvers.STEPPERS.schemes().items())}
    chosen.update(  # schemes with options (a row without any builds its scheme's default stepper, checked above)
        {name: row() for name, row in sorted(solvers.STEPPERS.variants().items()) if row.options}
    )
    chosen.update({f"tableau {name}": solvers.STEPPERS[name] for name in solvers.TABLEAUX if name not in chosen})
    chosen["triple_jump(lambda0=0.02)"] = solvers.TripleJump(lambda0=0.02)
    chosen["triple_jump(lambda0=0.48)"] = solvers.TripleJump(lambda0=0.48)
    chosen.update(Yoshida6=Yoshida6, Yoshida8=Yoshida8, DormandPrince5=DormandPrince5, VariableStepAB2=VariableStepAB2)
    chosen.update(KahanLi8=KahanLi8, NesterovVerlet=NesterovVerlet, Nesterov=Nesterov, RegularNesterov=RegularNesterov)
    chosen.update(TanhFriction=TanhFriction, ReversibleNesterov=ReversibleNesterov, ClampedFriction=ClampedFriction)
    chosen.update(ForcedVerlet=ForcedVerlet, QuadDragVerlet=QuadDragVerlet, ThetaVerlet=ThetaVerlet)
    chosen.update(KleinGordonVerlet=KleinGordonVerlet, InverseSquareVerlet=InverseSquareVerlet)
    chosen.update(
        ShortLivedVerlet=ShortLivedVerlet, LateForceVerlet=LateForceVerlet, GeometricTimeVerlet=GeometricTimeVerlet
    )
    chosen.update(  # the layers a model runs: every check on blocks
        {
            "layer full wave": solvers.Split(solvers.SemiImplicitEuler()),
            "layer strang heun": solvers.Split(solvers.Heun(), splitting="strang"),
            "layer whole rk4": solvers.Whole(solvers.RK4()),
            "layer light wave": solvers.Split(solvers.LightWave()),
            "layer reversible": solvers.Split(solvers.SemiImplicitEuler(), ffn=solvers.SemiImplicitEuler()),
            "layer verlet forces": solvers.Split(solvers.VelocityVerlet(), ffn=solvers.VelocityVerlet()),
        }
    )
    return chosen


SCHEMES = schemes()


EIGHTH = {"KahanLi8", "Yoshida8"}
"""Drawn runs of eighth-order compositions, about 40 s each: `make test-thorough` (their order is checked in the default
suite, and the rounding their inverses amplify in a slow replay)."""


@pytest.mark.parametrize(  # 5-20 s each; the registered schemes' runs are test_steppers
    "label",
    [
        pytest.param(label, marks=pytest.mark.thorough if label in EIGHTH else pytest.mark.slow)
        for label in sorted(set(SCHEMES) - set(solvers.STEPPERS.schemes()))
    ],
)
def test_a_correct_scheme_passes_a_drawn_run(label):
    report = check_stepper(SCHEMES[label], seed=20261204 + sorted(SCHEMES).index(label))
    assert report["order"] or SCHEMES[label].order == 0


@pytest.mark.parametrize("scheme", [ReversibleNesterov, KleinGordonVerlet, InverseSquareVerlet])
def test_round_trips_and_energy_are_measured_inside_the_time_domain_and_against_the_schemes_own_limit(scheme):
    """A reversible scheme singular at ``t = 0`` is stepped back from inside its time domain (it divided by zero from
    hypothesis's simplest point, ``t = 0``); a symplectic scheme with a force of its own has the Jacobian of its map
    checked, not the problem's energy, which its limit does not conserve (its energy error did not fall with dt)."""
    check_reversible(scheme, examples=4)
    if scheme.symplectic:
        report = check_symplectic(scheme, examples=4)
        assert report["energy"].startswith("not measured") and report["structure_defect"] < 1e-12


@pytest.mark.parametrize("scheme", [ShortLivedVerlet, LateForceVerlet, GeometricTimeVerlet])
def test_a_short_time_domain_a_late_force_and_a_step_that_reads_the_time_pass(scheme):
    """Every fixed run fits a time domain of three units (the counted steps and the round trip's are halved until
    they do); a force of the scheme's own that acts only after ``t = 1`` keeps its energy out of the energy test
    (the limit is compared with the flow over the whole run, not at its first times); a step that reads the absolute
    time and says so (``time_invariant = False``) is compared with the reference where it runs."""
    report = check_stepper(scheme, examples=4, seed=11)
    assert report["order"]
    if scheme is LateForceVerlet:
        assert check_symplectic(scheme, examples=0)["energy"].startswith("not measured")


def test_the_order_check_confirms_an_eighth_order_composition():
    assert Yoshida8().order == 8  # derived by the tableau engine from the weights
    slopes = check_order(Yoshida8)
    assert all(abs(s - 8) <= ORDER_TOLERANCE for s in slopes)


@pytest.mark.parametrize("scheme", [NesterovVerlet, Nesterov, RegularNesterov, TanhFriction])
def test_a_friction_of_the_schemes_own_passes_the_order_and_context_checks(scheme):
    """The limit's own time or size dependence is measured where it acts: a friction ``r / t`` from a far start, a
    ``c tanh v`` at the context's scale; the linear problem gets no matrix-exponential reference for such a limit."""
    slopes = check_order(scheme, examples=0)
    assert all(abs(s - 2) <= ORDER_TOLERANCE for s in slopes) and not slopes.unresolved
    check_contexts(scheme, examples=2)


def test_where_its_own_friction_saturates_a_first_order_scheme_may_converge_faster():
    """Held out: at magnitude 1024 ``c clamp(v, -1, 1)`` is a constant force, which ClampedFriction's kicks integrate
    exactly, so its error there falls like ``dt**2``; the order measured where a scheme's own dynamics differ is held
    to the declared order as a lower bound (the fixed problems hold it exactly), as on a drawn problem."""
    from solvers.testing.contexts import _held_there

    _held_there(ClampedFriction(), None, "size", 1024.0)
    slopes = check_order(ClampedFriction, examples=0)
    assert all(abs(s - 1) <= ORDER_TOLERANCE for s in slopes)


def test_a_step_that_takes_another_path_at_large_states_is_still_held_to_its_order_there():
    from solvers.testing.contexts import _held_there

    with pytest.raises(AssertionError, match=r"magnitude 1024\) declares order 2 but its error falls like dt\^1\.0"):
        _held_there(LargeStatesEulerTanh(), None, "size", 1024.0)


def test_a_limit_is_asked_to_commute_over_the_times_and_states_the_run_visits():
    """Held out: a force ``b sin(w t)`` of the scheme's own does not scale with the state, but vanishes at ``t = 0``,
    where the check asked alone; a friction ``c clamp(v, -1, 1)`` scales where ``|v| < 1`` and not where the run takes
    the velocity. Asked at every step's start, middle and end and every state the run visits, neither is taken to
    commute, and each context that scales is compared with the reference where it runs."""
    from solvers.testing.contexts import _commutes

    def field(t, x):
        return -x

    y = PhaseState(torch.ones(2, 3, dtype=torch.float64), torch.full((2, 3), 0.5, dtype=torch.float64))
    fast = PhaseState(y.x, 3 * y.v)
    scale = 2.0**-10
    assert _commutes(ForcedVerlet(), field, [y], [0.0], 0.0, scale) == (True, True)  # one point: fooled
    assert _commutes(ForcedVerlet(), field, [y], [0.0, 0.5, 1.0], 0.0, scale) == (True, False)
    assert _commutes(ClampedFriction(), field, [y], [0.0, 0.5, 1.0], 0.0, scale) == (True, True)
    assert _commutes(ClampedFriction(), field, [y, fast], [0.0, 0.5, 1.0], 0.0, scale) == (True, False)
    assert _commutes(solvers.VelocityVerlet(), field, [y, fast], [0.0, 0.5, 1.0], 0.0, scale) == (True, True)


def test_a_force_of_the_schemes_own_held_in_float32_passes_the_precision_and_context_checks():
    """The kit allows a low-precision step's stage times its dtype's rounding near the run's start; what that moves a
    force of the scheme's own (``w t`` units at ``t = 1000``) is allowed too, in the float32 contexts and in the
    precision claim, so the held-out ForcedVerlet passes both where it failed each at the seeds below."""
    check_precision(ForcedVerlet, examples=20)


@pytest.mark.slow  # about 20 s
def test_a_force_of_the_schemes_own_passes_at_the_seed_that_failed_it():
    assert check_stepper(ForcedVerlet, seed=5)["seed"] == 5


def test_a_step_with_a_pole_is_not_taken_for_a_branch():
    """Held out: a quadratic drag's exact flow makes QuadDragVerlet's step blow up at a negative ``dt``; bisection
    toward it keeps one end next to the pole, so the change it measures stayed and read as a jump (4e10, relative).
    A step that grows without bound toward the point is a pole and is not judged; a branch still is."""
    from solvers.testing import check_continuity
    from solvers.testing.continuity import _pole

    check_continuity(QuadDragVerlet)
    assert _pole(lambda x: torch.tensor([1.0 / (x + 3.375)], dtype=torch.float64), -3.375 + 1e-12)
    assert not _pole(lambda x: torch.tensor([1.0 if x < 0.5 else 2.0], dtype=torch.float64), 0.5)


def test_a_family_of_order_one_that_starts_at_its_second_order_point_passes_the_order_check():
    """Held out: ThetaVerlet is first order for every ``θ`` and second order at ``θ = 1/2``, where it starts, so every
    fixed problem at its start shows slope 2; with its parameters moved it shows 1. The declared order is a lower bound
    on each problem and must be met on one; Heun declaring order 1 is faster everywhere and still fails."""
    slopes = check_order(ThetaVerlet, examples=0)
    assert any(abs(s - 1) <= ORDER_TOLERANCE for s in slopes)
    with pytest.raises(AssertionError, match=r"declares order 1 but its error falls like dt\^2\.00.*Fix the scheme or"):
        check_order(HeunDeclaredFirstOrder, examples=0)


@pytest.mark.slow  # about 20 s: the drawn contexts of a fifteen-stage composition
def test_an_inverse_that_amplifies_rounding_beyond_resolution_is_not_judged():
    """Found by the sweep: drawn at dt = 3.16 from t = 10, Yoshida's eighth-order step stays within BLOWN_UP but its
    inverse amplifies rounding 4.8·10¹³ times, so float64 resolves nothing of it (the far start's other stage-time
    rounding gave an inverse 2.5·10⁴ off, relative): no comparison whose allowance exceeds UNRESOLVED is judged, in
    float64 as in low precision."""
    from solvers.testing import thresholds as th
    from solvers.testing._drawn import seeded

    with seeded(2011245880):
        assert check_contexts(Yoshida8) < th.UNRESOLVED  # raised nothing; its largest judged defect (relative)


def test_a_dt_gradient_is_judged_on_the_steps_speed_not_the_fields_alone(monkeypatch):
    """Found by the sweep (TanhFriction, seed 1645729372, thorough; the instance it shrank to): an attention and FFN
    field over one channel is zero (LayerNorm of one entry), so the field's size was 0 and a learnable dt's gradient
    was judged against the cotangent's dot product alone (0.037, of terms near 80: the drift ``x + dt v`` and the
    friction move the state). The float32 gradient, right to 4·10⁻⁹ of those terms, read as 80 rounding units off.
    The scale is the scheme's limit field at the state (velocity, acceleration and its own friction)."""
    from solvers.testing import contexts
    from solvers.testing.strategies import Instance

    drawn = Instance(
        seed=29636, batch=2, tokens=3, width=1, magnitude=1.0, dt=-0.1, rate=0.1, t0=0.0, steps=2, moved=0.0,
        moved_seed=0, layers=1,
    )  # fmt: skip
    context = contexts.Context(torch.float32, "enable_grad", "attention", heads=(3,), time="learnable dt")
    only = lambda strategy, claim, *_, **__: claim(contexts._InContext(drawn, context))  # noqa: E731
    monkeypatch.setattr(contexts, "check_drawn", only)
    assert contexts.check_contexts(TanhFriction) < 1e-6  # the largest defect judged (relative)
    still = PhaseState(torch.ones(1), torch.full((1,), -3.0))  # no force at all: the drift alone moves it
    assert contexts._speed(solvers.VelocityVerlet(), lambda t, x: 0 * x, 0.0, still, 0.0) == 3.0


def test_an_inverse_from_a_far_start_is_allowed_the_rounding_its_own_stage_times_make(monkeypatch):
    """Found by the sweep (Omelyan's fourth order, seed 258048279): from t = 10⁴ at dt = 3.65 on coupled tokens, the
    inverse moved 8.4e-11 (relative) from the reference's, where what the far stage times' rounding moves the step,
    not the inverse, was allowed (16 × 2.7e-12). The inverse is now allowed what that rounding moves the inverse."""
    from solvers.testing import contexts
    from solvers.testing.strategies import Instance

    drawn = Instance(
        seed=0, batch=2, tokens=2, width=1, magnitude=1.0, dt=1.0, rate=0.1, t0=-1.0, steps=3, moved=0.0,
        moved_seed=0, layers=1,
    )  # fmt: skip
    context = contexts.Context(torch.float64, "no_grad", "function", t0=10000.0, dt=3.651741272548377)
    only = lambda strategy, claim, *_, **__: claim(contexts._InContext(drawn, context))  # noqa: E731
    monkeypatch.setattr(contexts, "check_drawn", only)
    assert contexts.check_contexts(solvers.STEPPERS["omelyan4"]) < 1e-9


def test_a_limit_even_in_time_is_compared_over_the_steps_not_at_their_start():
    """``r / sqrt(1 + t²)`` has the same friction at t = 10 and t = -10 but not over the step after each: the kit asks
    whether the limit commutes with the context's shift at every step's start, middle and end, so a far start at
    ``-t₀`` is compared with the reference where the context runs it (the sweep found the one-point test fooled)."""
    from solvers.testing.contexts import _commutes

    y = PhaseState(torch.ones(2, 3, dtype=torch.float64), torch.full((2, 3), 0.5, dtype=torch.float64))
    scheme = RegularNesterov().double()
    assert _commutes(scheme, lambda t, x: -x, [y], [10.0], -20.0, 1.0) == (True, True)  # one point: fooled
    assert _commutes(scheme, lambda t, x: -x, [y], [10.0, 10.5, 11.0], -20.0, 1.0) == (False, True)
    assert _commutes(solvers.VelocityVerlet(), lambda t, x: -x, [y], [10.0, 10.5, 11.0], -20.0, 1.0) == (True, True)


@pytest.mark.slow  # about 25 s: every context at examples=200
def test_a_friction_even_in_time_passes_the_thorough_context_check_from_minus_its_start():
    """The sweep's seed: drawn from t = -10 beside an instance starting at t = 10, ``RegularNesterov`` was failed for
    taking another path there (0.0099 off, relative), which its friction does."""
    from solvers.testing._drawn import seeded

    with seeded(3518854764):
        check_contexts(RegularNesterov, examples=200)


@pytest.mark.slow  # fifteen-stage ladders to float64's floor: about 25 s
def test_an_eighth_order_composition_passes_the_order_check_or_is_said_unresolved():
    """Kahan and Li's composition reaches float64's floor before its error settles on a fixed problem: every slope it
    measures there is at least 8, so that problem is reported as unresolved, not failed; the others read 8."""
    assert KahanLi8().order == 8
    slopes = check_order(KahanLi8, examples=0)
    assert all(abs(s - 8) <= ORDER_TOLERANCE for s in slopes)
    assert all("cannot resolve order 8 at this precision" in line for line in slopes.unresolved)
    assert len(slopes) >= 1


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


@pytest.mark.slow
@pytest.mark.parametrize("label", ["Nesterov", "GeometricTimeVerlet", "ShortLivedVerlet"])
def test_a_schemes_statements_hold_for_its_layer(label):
    """A time domain and a step that reads the absolute time, stated on the scheme, are its layer's: the layer check
    and the contexts keep a split layer of it inside its domain and compare it where it runs (the layer check stepped
    ``Split(Nesterov())`` from ``t = 0`` into its singular time, and the far start took ``Split(GeometricTimeVerlet())``
    for another path)."""
    assert check_stepper(solvers.Split(SCHEMES[label]()))["seed"] is not None
