"""The property kit checks each claim on drawn instances: schemes wrong only where the fixed points do not look.

Every fake below passes the kit's fixed points (``examples=0``: the problems, sizes, steps and parameter values the
kit tried before its claims became hypothesis properties) and is rejected once instances are drawn, with a message
that names the claim and the (shrunk) counterexample. Ten kinds of defect, at least two schemes each.

How often the kit finds each fake is measured by running this module as a script: ``python
tests/solvers/test_kit_drawn.py --seeds 16`` checks each fake under ``seeded(1000 + s)`` for ``s < 16`` and prints,
per fake, in how many seeds it was found (exit 1 if any was missed).
"""

import argparse
import copy
import re
import sys
import threading
from typing import ClassVar

import pytest
import torch
from torch import nn

if __name__ == "__main__":  # run as a script: the tests' shared helpers are one folder up, beside the package
    _here = __import__("pathlib").Path(__file__).resolve()
    sys.path[1:1] = [str(_here.parents[2]), str(_here.parents[1])]

from helpers import PlainEuler, PlainHeun
from solvers import AbstractStepper, PhaseState, Split, Whole
from solvers.testing import (
    check_evals,
    check_gradients,
    check_layer,
    check_one_step,
    check_precision,
    check_protocol,
    check_stepper,
    check_symplectic,
)
from solvers.testing import thresholds as th
from solvers.testing._common import _copy

_Euler, _Heun = PlainEuler, PlainHeun


class _Verlet(AbstractStepper, abstract=True):
    """Velocity Verlet with a first-same-as-last force kept in ``state`` as ``(field, t, x, a)``; ``force`` is the
    force the scheme applies (a subclass scales or clips it)."""

    order: ClassVar[int] = 2
    second_order: ClassVar[bool] = True
    symplectic: ClassVar[bool] = True
    reversible: ClassVar[bool] = True
    symmetric: ClassVar[bool] = True
    evals_per_step: ClassVar[int] = 2
    fsal: ClassVar[bool] = True

    def force(self, field, t, x):
        return field(t, x)

    def cached(self, a):
        return a

    def step(self, field, t, y, dt, state):
        x, v = self._unpack(y)
        if state is not None and state[0] is field and state[2] is x and state[1] == t:
            a = state[3]
        else:
            a = self.force(field, t, x)
        v = v + 0.5 * dt * a
        x = x + dt * v
        a1 = self.force(field, t + dt, x)
        return PhaseState(x, v + 0.5 * dt * a1), (field, t + dt, x, self.cached(a1))


class _HeavyBall(_Euler, abstract=True):
    """Heavy-ball momentum ``x + dt f(x) + lam (x - x_prev)``, ``lam = sigmoid(theta)`` learnable."""

    multistep: ClassVar[bool] = True

    def __init__(self):
        super().__init__()
        self.theta = nn.Parameter(torch.tensor(0.0))

    def init(self, field, t0, y0):
        return y0

    def limit_field(self, field):
        lam = torch.sigmoid(self.theta)
        return lambda t, x: field(t, x) / (1 - lam.to(x.dtype))


# -- 1. gradients through carried state -------------------------------------------------------------------------------


class DetachedCacheVerlet(_Verlet):
    """Reuses its end-of-step force detached: one step from a fresh init is right, the next one's gradient is not."""

    def cached(self, a):
        return a.detach()


class DetachedHistoryHeavyBall(_HeavyBall):
    """Keeps its history as ``x.detach()``: the momentum term's gradient is lost from the second step on."""

    def step(self, field, t, y, dt, state):
        lam = torch.sigmoid(self.theta).to(y.dtype)
        return y + dt * field(t, y) + lam * (y - state), y.detach()


# -- 2. state (or y) written in place ---------------------------------------------------------------------------------


class AppendingHeavyBall(_HeavyBall):
    """Keeps its history in a list that it appends to and trims in place."""

    def init(self, field, t0, y0):
        return [y0]

    def step(self, field, t, y, dt, state):
        lam = torch.sigmoid(self.theta).to(y.dtype)
        y1 = y + dt * field(t, y) + lam * (y - state[-1])
        state.append(y)
        del state[0]
        return y1, state


class LargeInPlaceVerlet(_Verlet):
    """Updates ``y.v`` in place, but only on states of at least 4096 entries (a memory saving for big models)."""

    def step(self, field, t, y, dt, state):
        x, v = self._unpack(y)
        if v.numel() < 4096:
            return super().step(field, t, y, dt, state)
        v.add_(0.5 * dt * field(t, x))
        x1 = x + dt * v
        a1 = field(t + dt, x1)
        return PhaseState(x1, v + 0.5 * dt * a1), None


# -- 3. claims that hold only at the starting parameters ---------------------------------------------------------------


class RateSwitchHeun(_Heun):
    """A Heun with a learnable rate that takes an extra (wasted) evaluation once the rate exceeds 1.5."""

    def __init__(self):
        super().__init__()
        self.rate = nn.Parameter(torch.tensor(1.0))

    def step(self, field, t, y, dt, state):
        k1, k2 = self.stages(field, t, y, dt)
        if float(self.rate) > 1.5:
            field(t, y)  # a "refinement" that is thrown away
        return y + 0.5 * dt * self.rate.to(y.dtype) * (k1 + k2), state

    def limit_field(self, field):
        return lambda t, x: self.rate.to(x.dtype) * field(t, x)


class EvalCachedGateEuler(_Euler):
    """A gated Euler ``x + dt lam f`` whose gate in eval mode is the one cached when it was built: right at the start,
    off once the gate's parameter moves."""

    def __init__(self):
        super().__init__()
        self.theta = nn.Parameter(torch.tensor(0.0))
        self.register_buffer("frozen", torch.sigmoid(self.theta.detach()))

    def gate(self):
        return torch.sigmoid(self.theta) if self.training else self.frozen

    def step(self, field, t, y, dt, state):
        return y + dt * self.gate().to(y.dtype) * field(t, y), state

    def limit_field(self, field):
        return lambda t, x: torch.sigmoid(self.theta).to(x.dtype) * field(t, x)


# -- 4. dead parameters -----------------------------------------------------------------------------------------------


class InitGateEuler(_Euler):
    """Reads its gate once in ``__init__``: the parameter never acts (training cannot move the scheme)."""

    def __init__(self):
        super().__init__()
        self.theta = nn.Parameter(torch.tensor(0.0))
        self.lam = float(torch.sigmoid(self.theta))

    def step(self, field, t, y, dt, state):
        return y + dt * self.lam * field(t, y), state

    def limit_field(self, field):
        return lambda t, x: self.lam * field(t, x)


class SpareParameterVerlet(_Verlet):
    """A Verlet with a damping parameter it registers and never uses."""

    def __init__(self):
        super().__init__()
        self.damping = nn.Parameter(torch.zeros(()))


# -- 5. short horizons ------------------------------------------------------------------------------------------------


class RefreshEuler(_Euler):
    """Counts its steps in ``state`` and evaluates the field once more every 16th step (a "refresh")."""

    def init(self, field, t0, y0):
        return 0

    def step(self, field, t, y, dt, state):
        if state % 16 == 15:
            field(t, y)
        return y + dt * field(t, y), state + 1


class LateAbscissaHeun(_Heun):
    """From its 20th step on, evaluates the second stage at ``t + 0.9 dt`` (a step count in ``state``)."""

    def init(self, field, t0, y0):
        return 0

    def step(self, field, t, y, dt, state):
        c = 0.9 if state >= 20 else 1.0
        k1 = field(t, y)
        k2 = field(t + c * dt, y + dt * k1)
        return y + 0.5 * dt * (k1 + k2), state + 1


# -- 6. magnitudes ----------------------------------------------------------------------------------------------------


class SubSteppingHeun(_Heun):
    """Takes two half steps (four evaluations) where the state exceeds 50 in size."""

    def step(self, field, t, y, dt, state):
        if float(y.abs().max()) <= 50:
            return super().step(field, t, y, dt, state)
        half, _ = super().step(field, t, y, dt / 2, state)
        return super().step(field, t + dt / 2, half, dt / 2, state)


class SubSteppingLargeStatesHeun(_Heun):
    """Takes two half steps (four evaluations) where the state exceeds 500 in size (the fixed counts, steps of 2.5
    included, do not take it there: only a drawn magnitude does)."""

    def step(self, field, t, y, dt, state):
        if float(y.detach().abs().max()) <= 500:
            return super().step(field, t, y, dt, state)
        half, _ = super().step(field, t, y, dt / 2, state)
        return super().step(field, t + dt / 2, half, dt / 2, state)


class ClippedVerlet(_Verlet):
    """Clips the force at ±20 per coordinate and still claims symplectic."""

    def force(self, field, t, x):
        return field(t, x).clamp(-20.0, 20.0)


# -- 7. samples and tokens --------------------------------------------------------------------------------------------


class FlatHeun(_Heun):
    """Flattens a ``(B, N, D)`` state into rows before calling the field (attention then mixes samples)."""

    def step(self, field, t, y, dt, state):
        flat = y.reshape(-1, y.shape[-1])
        k1, k2 = self.stages(field, t, flat, dt)
        return (flat + 0.5 * dt * (k1 + k2)).reshape(y.shape), state


class SwappedAxesEuler(_Euler):
    """Calls the field on the state with its first two axes swapped (tokens as samples), and swaps back."""

    def step(self, field, t, y, dt, state):
        if y.dim() < 3:
            return super().step(field, t, y, dt, state)
        return y + dt * field(t, y.transpose(0, 1)).transpose(0, 1), state


# -- 8. precision -----------------------------------------------------------------------------------------------------


class Bf16StageHeun(_Heun):
    """Computes its second stage in bfloat16 when the state is float32 (a mixed-precision "speed-up")."""

    def step(self, field, t, y, dt, state):
        k1 = field(t, y)
        if y.dtype == torch.float32:
            k2 = field(t + dt, (y + dt * k1).to(torch.bfloat16)).to(y.dtype)
        else:
            k2 = field(t + dt, y + dt * k1)
        return y + 0.5 * dt * (k1 + k2), state


class HalfIncrementEuler(_Euler):
    """Rounds its increment ``dt f`` to float16 when the state is float32."""

    def step(self, field, t, y, dt, state):
        increment = dt * field(t, y)
        if y.dtype == torch.float32:
            increment = increment.to(torch.float16).to(y.dtype)
        return y + increment, state


# -- 9. state handed between instances --------------------------------------------------------------------------------


class ScaledCacheVerlet(_Verlet):
    """A Verlet on a learnable force scale ``s a`` that caches the *scaled* force: the next layer, with another scale,
    reuses this one's."""

    symplectic: ClassVar[bool] = False

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(1.0))

    def force(self, field, t, x):
        return self.scale.to(x.dtype) * field(t, x)

    def limit_field(self, field):
        return lambda t, y: PhaseState(y.v, self.scale.to(y.x.dtype) * field(t, y.x))


class ChannelMassVerlet(ScaledCacheVerlet):
    """The same with a learnable mass per channel, ``a / m``: the cached force carries the previous layer's mass."""

    def __init__(self, dim: int = 2):
        AbstractStepper.__init__(self)
        self.log_mass = nn.Parameter(torch.zeros(dim))

    def force(self, field, t, x):
        return field(t, x) * torch.exp(-self.log_mass).to(x.dtype)

    def limit_field(self, field):
        return lambda t, y: PhaseState(y.v, field(t, y.x) * torch.exp(-self.log_mass).to(y.x.dtype))


# -- 10. what the kit itself must not do (and the graph-carrying copy test below) --------------------------------------


class LockedEuler(_Euler):
    """A correct Euler that holds a lock: it cannot be deep-copied, so the kit cannot make the unused copies it
    compares with; it must say so instead of comparing the stepper with itself."""

    def __init__(self):
        super().__init__()
        self.lock = threading.Lock()


CASES = [
    # (scheme, check, what the message says)
    (DetachedCacheVerlet, check_gradients, "gradient is not that of its steps"),
    (DetachedHistoryHeavyBall, check_gradients, "gradient is not that of its steps"),
    (AppendingHeavyBall, check_protocol, r"wrote into its input in place .*a container"),
    (LargeInPlaceVerlet, check_protocol, r"wrote into its input in place at step \d+ \(y\.v\)"),
    (RateSwitchHeun, check_evals, r"evaluated the field 3 times"),
    (EvalCachedGateEuler, check_protocol, "steps differently in (eval|training) mode"),
    (InitGateEuler, check_gradients, r"parameter theta of instance 0 gets no gradient"),
    (SpareParameterVerlet, check_gradients, r"parameter damping of instance 0 gets no gradient"),
    (RefreshEuler, check_evals, r"evaluated the field 2 times in step 15"),
    (LateAbscissaHeun, check_one_step, r"reads history .* at step 20"),
    (SubSteppingLargeStatesHeun, check_evals, "evaluated the field 4 times"),
    # A force clipped above one size breaks symplecticity only where some of its coordinates are clipped and others
    # not: a band of magnitudes that about three default runs in four meet (12 of 16 seeds); 100 examples meet it in
    # every one of 16 seeds.
    (ClippedVerlet, check_symplectic, "declares symplectic but one step", 100),
    (FlatHeun, check_protocol, r"called with a \(\d+, \d+\) tensor"),
    (SwappedAxesEuler, check_protocol, r"called with a \(\d+, \d+, \d+\) tensor|samples of a batch independently"),
    (Bf16StageHeun, check_precision, "float32 step differs from its float64 step"),
    (HalfIncrementEuler, check_precision, "float32 step differs from its float64 step"),
    (ScaledCacheVerlet, check_one_step, r"reads history .*instance \d of \d"),
    (ChannelMassVerlet, check_one_step, r"reads history .*instance \d of \d"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0].__name__ for c in CASES])
def test_a_scheme_wrong_only_away_from_the_fixed_points_is_rejected_with_a_counterexample(case):
    """Each fake is found by the default number of drawn examples (unless its case says how many it needs) under the
    suite's derandomized draws. Measured over 16 seeds (``seeded(1000 + s)``, the module run as a script): every fake
    in all 16 but the sub-stepping Heun, in 15 (in one seed no instance is drawn above its size)."""
    scheme, check, message, *examples = case
    check(scheme, examples=0)  # the fixed points alone pass it
    with pytest.raises(AssertionError, match=message) as failure:
        check(scheme, **({"examples": examples[0]} if examples else {}))
    assert "counterexample: " in str(failure.value)


def test_a_scheme_that_sub_steps_large_states_is_rejected_at_the_fixed_steps_above_one_and_a_half():
    """Ten steps of 2.5 grow the pendulums past the size where SubSteppingHeun takes two half steps: the fixed count
    finds it (the drawn instances did too, in 15 of 16 seeds, from a drawn magnitude above 50)."""
    with pytest.raises(AssertionError, match=r"evaluated the field 4 times in step \d+ .* at dt = 2.5"):
        check_evals(SubSteppingHeun, examples=0)


def test_a_counterexample_is_shrunk_to_the_smallest_instance_that_fails():
    """RefreshEuler fails only from its 16th step: the shrunk instance has exactly 16 steps, parameters at their start
    (it has none to move) and one instance."""
    with pytest.raises(AssertionError) as failure:
        check_evals(RefreshEuler)
    message = str(failure.value)
    assert ", 16 step(s) from" in message, message


def test_a_scheme_the_kit_cannot_copy_is_reported_not_compared_with_itself():
    with pytest.raises(AssertionError, match=r"copy\.deepcopy fails on it \(TypeError: cannot pickle '_thread\.lock'"):
        check_stepper(LockedEuler)


def test_a_stepper_holding_a_graph_is_copied_detached_not_returned_itself():
    """A cache with its graph on the stepper (left by a step under autograd) defeats ``copy.deepcopy``; the kit's
    copies used to fall back to the stepper itself, so "an unused copy" compared the stepper with itself."""
    stepper = _Heun.__new__(type("CachingHeun", (_Heun,), {}))
    _Heun.__init__(stepper)
    leaf = torch.ones(3, requires_grad=True)
    stepper.cache = leaf * 2  # carries a graph
    with pytest.raises(RuntimeError):
        copy.deepcopy(stepper)
    copied = _copy(stepper)
    assert copied is not stepper and copied.cache is not stepper.cache
    assert copied.cache.grad_fn is None and torch.equal(copied.cache, stepper.cache.detach())


def test_a_flattening_step_is_rejected_inside_a_layer_too():
    for layer in (Whole(FlatHeun()), Split(FlatHeun())):
        with pytest.raises(AssertionError, match="samples of a batch independently|called with a"):
            check_layer(layer)


def test_every_category_has_two_schemes():
    assert len(CASES) >= 18 and len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("examples", [3])
def test_drawn_checks_pass_a_correct_scheme_on_both_kinds(examples):
    class Correct(_Heun):
        pass

    class CorrectVerlet(_Verlet):
        pass

    check_stepper(Correct, examples=examples)
    check_stepper(CorrectVerlet, examples=examples)


def test_thresholds_are_stated_once():
    assert th.ORDER_TOLERANCE == 0.3 and th.EXAMPLES >= 10 and th.LARGE_STATE >= 4096
    assert th.MAGNITUDES == (1e-3, 1e3) and th.MAX_HORIZON >= 64


def test_the_docs_quote_the_thresholds_as_they_are():
    """docs/extending.md names the kit's thresholds; each named one exists, and a number quoted beside it is its
    value (``1000 eps`` as 1000 float64 rounding units)."""
    import pathlib
    import re

    text = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "extending.md").read_text()
    quoted = re.findall(r"`([A-Z][A-Z0-9_]{3,})`(?: \(([^)]*)\))?", text)
    named = {name for name, _ in quoted if hasattr(th, name)}
    assert {"ORDER_TOLERANCE", "EXAMPLES", "MAGNITUDES", "MAX_HORIZON", "FLOAT32_UNITS"} <= named
    for name, value in quoted:
        if not hasattr(th, name) or not value:
            continue
        number = re.match(r"[-+0-9.e]+", value)
        if number and name != "MAGNITUDES":
            quoted_value = float(number.group()) * (th.EPS if value[number.end() :].startswith(" eps") else 1.0)
            assert quoted_value == float(getattr(th, name)), f"{name} is quoted as {value}"
        if name == "MAGNITUDES":
            low, high = (float(v) for v in value.split(" to "))
            assert (low, high) == th.MAGNITUDES, value


@pytest.mark.parametrize("name", __import__("odeformer").solver_names("discrete"))
def test_every_preset_layer_keeps_the_protocol_on_drawn_blocks(name):
    from odeformer.registry import as_solver
    from solvers.testing import check_layer_protocol

    layer = as_solver(name).build(4).double()
    check_layer_protocol(layer, width=4)


# -- correct unusual schemes keep passing ------------------------------------------------------------------------------


class SSPRK3(_Euler):
    """Shu & Osher's strong-stability-preserving third-order Runge–Kutta method (J. Comput. Phys. 77, 1988)."""

    order: ClassVar[int] = 3
    evals_per_step: ClassVar[int] = 3

    def step(self, field, t, y, dt, state):
        u1 = y + dt * field(t, y)
        u2 = 0.75 * y + 0.25 * (u1 + dt * field(t + dt, u1))
        return y / 3 + 2 / 3 * (u2 + dt * field(t + 0.5 * dt, u2)), state


class _Composition(_Verlet, abstract=True):
    """A palindromic drift–kick composition ``D(a₀) K(b₀) D(a₁) ... K(b_m) D(a_m+1)``, each kick at the time its drifts
    have reached: symplectic and symmetric."""

    drifts: ClassVar[tuple[float, ...]]
    kicks: ClassVar[tuple[float, ...]]
    fsal: ClassVar[bool] = False

    def step(self, field, t, y, dt, state):
        x, v = self._unpack(y)
        reached = 0.0
        for a, b in zip(self.drifts, self.kicks):
            x, reached = x + (a * dt) * v, reached + a
            v = v + (b * dt) * field(t + reached * dt, x)
        return PhaseState(x + (self.drifts[-1] * dt) * v, v), state


_THETA = 1 / (2 - 2 ** (1 / 3))


class ForestRuth(_Composition):
    """Forest & Ruth's fourth-order composition (Physica D 43, 1990)."""

    order: ClassVar[int] = 4
    evals_per_step: ClassVar[int] = 3
    drifts = (_THETA / 2, (1 - _THETA) / 2, (1 - _THETA) / 2, _THETA / 2)
    kicks = (_THETA, 1 - 2 * _THETA, _THETA)


_XI, _LAMBDA, _CHI = 0.1786178958448091, -0.2123418310626054, -0.06626458266981849


class PEFRL(_Composition):
    """Omelyan, Mryglod & Folk's position-extended Forest–Ruth-like fourth-order composition (Comput. Phys. Commun.
    146, 2002)."""

    order: ClassVar[int] = 4
    evals_per_step: ClassVar[int] = 4
    drifts = (_XI, _CHI, 1 - 2 * (_CHI + _XI), _CHI, _XI)
    kicks = ((1 - 2 * _LAMBDA) / 2, _LAMBDA, _LAMBDA, (1 - 2 * _LAMBDA) / 2)


class StartedAB2(_Euler):
    """Variable-step Adams–Bashforth 2, started by one Heun step: ``y + dt ((1 + r/2) f_n - (r/2) f_n-1)``,
    ``r = dt / dt_prev``."""

    order: ClassVar[int] = 2
    multistep: ClassVar[bool] = True
    startup_evals: ClassVar[tuple[int, ...]] = (2,)

    def step(self, field, t, y, dt, state):
        f = field(t, y)
        if state is None:
            return y + 0.5 * dt * (f + field(t + dt, y + dt * f)), (f, dt)
        previous, dt_previous = state
        r = dt / dt_previous
        return y + dt * ((1 + r / 2) * f - (r / 2) * previous), (f, dt)


@pytest.mark.parametrize(
    "scheme",
    [ForestRuth, *(pytest.param(s, marks=pytest.mark.slow) for s in (SSPRK3, PEFRL, StartedAB2))],  # 5 s each
    ids=lambda c: c.__name__,
)
def test_correct_unusual_schemes_pass_the_whole_kit(scheme):
    report = check_stepper(scheme)
    assert all(abs(slope - scheme.order) <= th.ORDER_TOLERANCE for slope in report["order"])


def _draws(strategy, count: int) -> list:
    """``count`` derandomized draws of ``strategy``, the same whatever modules this process has loaded: hypothesis
    also draws numbers it finds written in loaded local modules (its "local constants"), so without this the draws
    followed which test files a worker had imported before."""
    from unittest import mock

    from hypothesis import given, settings
    from hypothesis.internal.conjecture import providers

    out = []

    def record(value):
        out.append(value)

    nothing_local = providers.Constants(
        integers=providers.SortedSet(),
        floats=providers.SortedSet(key=providers.float_to_int),
        bytes=providers.SortedSet(),
        strings=providers.SortedSet(),
    )
    with mock.patch.object(providers, "_get_local_constants", lambda: nothing_local):
        settings(max_examples=count, derandomize=True, database=None)(given(strategy)(record))()
    return out


def test_magnitudes_draw_one_both_ends_and_between_and_hamiltonian_points_reach_their_widest():
    from hypothesis import find

    from solvers.testing.strategies import hamiltonian_problems, instances

    drawn = [instance.magnitude for instance in _draws(instances(_Heun(), None), 300)]
    low, high = th.MAGNITUDES
    counts = {value: drawn.count(value) for value in (1.0, low, high)}
    assert counts[1.0] >= 50 and counts[high] >= 50 and counts[low] >= 6, counts  # out of 300
    between = [m for m in drawn if m not in counts]
    assert len(between) >= 75 and all(low < m < high for m in between), len(between)
    for second_order in (False, True):
        widest = find(hamiltonian_problems(second_order), lambda p: p.x0.shape[-1] >= th.HAMILTONIAN_WIDTH)
        assert widest.x0.shape[-1] == th.HAMILTONIAN_WIDTH


def _power(seeds: int, only: list[str]) -> int:
    from solvers.testing._drawn import seeded

    missed = 0
    for scheme, check, message, *examples in CASES:
        if only and scheme.__name__ not in only:
            continue
        found, misses = 0, []
        for s in range(seeds):
            try:
                with seeded(1000 + s):
                    check(scheme, **({"examples": examples[0]} if examples else {}))
                misses.append(str(s))
            except AssertionError as error:
                if re.search(message, str(error)):
                    found += 1
                else:
                    misses.append(f"{s} (another failure: {str(error).splitlines()[0][:100]})")
        missed += seeds - found
        shown = f"; missed in seeds {', '.join(misses)}" if misses else ""
        print(f"{scheme.__name__}: found in {found} of {seeds} seeds{shown}", flush=True)
    return missed


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Measure in how many seeds the kit finds each fake.")
    parser.add_argument("--seeds", type=int, default=16)
    parser.add_argument("only", nargs="*", help="fakes to measure (default: all)")
    args = parser.parse_args()
    sys.exit(1 if _power(args.seeds, args.only) else 0)
