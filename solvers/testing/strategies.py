"""Hypothesis strategies: problems with known solutions, and the drawn instances every claim is checked on."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from hypothesis import assume
from hypothesis import strategies as st

from .._base import AbstractStepper
from . import thresholds as th
from ._common import _copy, _moved, is_block, placed
from .problems import (
    Problem,
    anharmonic_problem,
    block_problem,
    coupled_problem,
    linear_problem,
    nonlinear_problem,
    oscillator_problem,
    pendulum_problem,
    row_problem,
    scaled,
    token_problem,
)


def linear_problems():
    """Strategy: :func:`linear_problem` with drawn seed, size, spectral scale and horizon ``T in [0.25, 0.5]``."""
    return st.builds(
        linear_problem,
        seed=st.integers(0, 2**31 - 1),
        dim=st.integers(1, 4),
        scale=st.floats(0.5, 2.0),
        T=st.floats(0.25, 0.5),
    )


def oscillator_problems():
    """Strategy: :func:`oscillator_problem` with drawn seed, size and horizon ``T in [0.25, 0.5]``."""
    return st.builds(oscillator_problem, seed=st.integers(0, 2**31 - 1), dim=st.integers(1, 3), T=st.floats(0.25, 0.5))


def coupled_problems():
    """Strategy: :func:`coupled_problem` with drawn seed, size and horizon ``T in [0.25, 0.5]``."""
    return st.builds(coupled_problem, seed=st.integers(0, 2**31 - 1), dim=st.integers(1, 3), T=st.floats(0.25, 0.5))


def anharmonic_problems():
    """Strategy: :func:`anharmonic_problem` with drawn seed, size and horizon ``T in [0.25, 0.5]``."""
    return st.builds(anharmonic_problem, seed=st.integers(0, 2**31 - 1), dim=st.integers(1, 3), T=st.floats(0.25, 0.5))


def pendulum_problems():
    """Strategy: :func:`pendulum_problem` with drawn seed, size, forcing, modulation, phase and horizon in
    [0.25, 0.5]."""
    return st.builds(
        pendulum_problem,
        seed=st.integers(0, 2**31 - 1),
        dim=st.integers(1, 3),
        forcing=st.floats(0.0, 1.0),
        T=st.floats(0.25, 0.5),
        modulation=st.floats(0.0, 0.9),
        phase=st.floats(0.0, 3.0),
    )


def nonlinear_problems():
    """Strategy: :func:`nonlinear_problem` with drawn seed, size and horizon ``T in [0.25, 0.5]``."""
    return st.builds(nonlinear_problem, seed=st.integers(0, 2**31 - 1), dim=st.integers(1, 4), T=st.floats(0.25, 0.5))


def problems(second_order: bool = False):
    """Strategy over every problem family a stepper of this kind can run (second-order ones run on any stepper)."""
    both = [oscillator_problems(), coupled_problems(), anharmonic_problems(), pendulum_problems()]
    return st.one_of(both if second_order else [linear_problems(), nonlinear_problems(), *both])


def magnitudes():
    """Strategy: a magnitude log-uniform over ``MAGNITUDES`` (1e-3 to 1e3), or 1, or one end of that range. Within
    drawn instances about a third are at 1, a fifth at the largest size and one in thirty at the smallest (hypothesis
    favours the first of a choice): a scheme that switches path above some size is met at the largest size in most
    runs."""
    low, high = (math.log10(m) for m in th.MAGNITUDES)
    ends = st.sampled_from([1.0, *reversed(th.MAGNITUDES)])  # hypothesis favours the first: the largest size next
    return st.one_of(ends, st.floats(low, high).map(lambda e: float(10.0**e)))


def start_times():
    """Strategy: a start time in [-1, 1], or now and then of either sign, log-uniform over ``T0_RANGE`` (a deep
    model's layers run at t up to depth times dt; a scheme that clamps or wraps its stage times shows there)."""
    low, high = (math.log10(t) for t in th.T0_RANGE)
    far = st.builds(lambda e, sign: sign * 10.0**e, st.floats(low, high), st.sampled_from([1.0, -1.0]))
    return st.one_of(st.floats(-1.0, 1.0), far)


def scaled_problems(second_order: bool = False, width: int | None = None, block: bool = False):
    """Strategy: every problem family a stepper of this kind runs (second-order ones on any stepper, as ``[x, v]`` for
    a first-order one) and :func:`token_problem` instances (tokens coupled as attention couples them), at a drawn
    magnitude (:func:`scaled`). ``width`` fixes the state's width (a per-channel stepper's); else it is drawn.
    ``block``: :func:`block_problem` instances (a block stepper's layer), their attention depending on time."""
    seeds, horizons = st.integers(0, 2**31 - 1), st.floats(0.25, 0.5)
    if block:  # a layer: blocks of 1 to 8 tokens, of width up to 12 (or the stepper's), their attention timed
        blocks = st.builds(
            block_problem,
            seed=seeds,
            second_order=st.just(second_order),
            tokens=st.integers(1, 8),
            dim=st.just(width) if width is not None else st.integers(1, 12),
            T=horizons,
            batch=st.integers(1, 2),
            phase=st.floats(0.0, 3.0),
        )
        return st.builds(scaled, blocks, magnitudes())

    def dims(low: int, high: int, halve: bool = False):
        if width is None:
            return st.integers(low, high)
        return st.just(width // 2 if halve else width)

    families = []
    halve = not second_order  # a first-order scheme runs second-order problems as [x, v]
    if second_order or width is None or width % 2 == 0:
        d = dims(1, 3, halve=halve)
        families += [
            st.builds(oscillator_problem, seed=seeds, dim=d, T=horizons),
            st.builds(coupled_problem, seed=seeds, dim=d, T=horizons),
            st.builds(anharmonic_problem, seed=seeds, dim=d, T=horizons),
            st.builds(
                pendulum_problem,
                seed=seeds,
                dim=d,
                forcing=st.floats(0.0, 1.0),
                T=horizons,
                modulation=st.floats(0.0, 0.9),
                phase=st.floats(0.0, 3.0),
            ),
        ]
    if not second_order:
        families += [
            st.builds(linear_problem, seed=seeds, dim=dims(1, 4), scale=st.floats(0.5, 2.0), T=horizons),
            st.builds(nonlinear_problem, seed=seeds, dim=dims(1, 4), T=horizons),
        ]
    families.append(
        st.builds(
            token_problem,
            seed=seeds,
            tokens=st.integers(1, 4),
            dim=dims(1, 3),
            batch=st.integers(1, 3),
            T=horizons,
            second_order=st.just(second_order),
        )
    )
    return st.builds(scaled, st.one_of(families), magnitudes())


@dataclass(frozen=True)
class Instance:
    """One drawn instance of a claim: the problem's shape and magnitude, where and how the steps run, and how far the
    stepper's learnable parameters are moved from their start.

    ``tokens = 0`` means states of shape ``(batch, width)`` (:func:`row_problem`), else ``(batch, tokens, width)``
    (:func:`token_problem`, a field that couples tokens as attention does). ``layers`` instances of the stepper, each
    moved by ``moved * N(0, 1)`` with its own draw from ``moved_seed``, take the steps in turn and hand the running
    state on, as a model's layers do. ``dt`` is signed; ``rate`` scales it for a second run where one is compared
    (evaluation times), and the step sizes alternate ``dt`` and ``rate * dt`` where a claim needs them to change.
    """

    seed: int
    batch: int
    tokens: int
    width: int
    magnitude: float
    dt: float
    rate: float
    t0: float
    steps: int
    moved: float
    moved_seed: int
    layers: int

    def __str__(self) -> str:
        shape = (self.batch, self.tokens, self.width) if self.tokens else (self.batch, self.width)
        moved = (
            f"parameters moved by {self.moved:.3g} N(0, 1) (seed {self.moved_seed})"
            if self.moved
            else "parameters at their start"
        )
        layers = f", {self.layers} instances handing the state on" if self.layers > 1 else ""
        return (
            f"states {shape} (seed {self.seed}) at magnitude {self.magnitude:.3g}, dt = {self.dt:.4g} (and "
            f"{self.rate:.3g} dt), {self.steps} step(s) from t = {self.t0:.3g}, {moved}{layers}"
        )

    @property
    def entries(self) -> int:
        return self.batch * max(self.tokens, 1) * self.width

    def problem(self, stepper: AbstractStepper, batch: int | None = None) -> Problem:
        """The drawn problem in the form ``stepper`` takes (its field is the velocity or the acceleration)."""
        b = self.batch if batch is None else batch
        second = stepper.second_order
        if is_block(stepper):  # a layer steps a block: attention over the tokens (at least one) and an FFN
            p = block_problem(self.seed, second, max(self.tokens, 1), self.width, batch=b, phase=0.7)
        elif self.tokens:
            p = token_problem(self.seed, self.tokens, self.width, b, second_order=second)
        else:
            p = row_problem(self.seed, self.width, b, second_order=second)
        return scaled(p, self.magnitude)

    def dts(self) -> list[float]:
        """The step sizes of the run: alternating ``dt`` and ``rate * dt``."""
        return [self.dt if i % 2 == 0 else self.rate * self.dt for i in range(self.steps)]

    def steppers(self, stepper: AbstractStepper) -> list[AbstractStepper]:
        """``layers`` unused copies of ``stepper``, each with its learnable parameters moved by its own draw."""
        out = []
        for i in range(self.layers):
            moved = _moved(stepper, seed=self.moved_seed + i, sigma=self.moved) if self.moved else None
            out.append(moved if moved is not None else _copy(stepper))
        return out


@st.composite
def instances(
    draw,
    stepper: AbstractStepper,
    width: int | None = None,
    max_steps: int = th.MAX_HORIZON,
    min_steps: int = 1,
    layers: int = 3,
    large: bool = True,
    max_dt: float = 1.5,
    signed: bool = True,
    horizon: float = 8.0,
):
    """Strategy: :class:`Instance` for ``stepper``. ``width`` fixes the channel count (a per-channel stepper's);
    else 1 to 4. Batches of 2 or 3 (a sample can be compared with its neighbours); two- and three-dimensional states;
    now and then (``large``) a state of at least ``LARGE_STATE`` entries (as that many rows / width); magnitudes
    log-uniform over ``MAGNITUDES``; ``steps`` up to ``max_steps``, their total time at most ``horizon``; ``dt`` of
    either sign (``signed``) with ``|dt|`` log-uniform from 1e-3 to ``max_dt``; parameters moved by up to 2 standard
    normals; 1 to ``layers`` instances; ``t0`` from :func:`start_times`, the step sizes alternating ``dt`` and
    ``rate * dt`` (``rate`` log-uniform over ``RATES``)."""
    w = width if width is not None else draw(st.integers(1, 4))
    big = large and draw(st.booleans()) and draw(st.booleans())  # about one draw in four
    if big:  # many rows, not many tokens: the field stays cheap
        batch, tokens = max(2, math.ceil(th.LARGE_STATE / w)), 0
    else:
        batch, tokens = draw(st.integers(2, 3)), draw(st.sampled_from([0, 1, 2, 3, 5]))
    steps = draw(st.integers(min_steps, max_steps))
    top = min(max_dt, horizon / steps)
    size = 10.0 ** draw(st.floats(-3.0, math.log10(top)))
    sign = -1.0 if signed and draw(st.booleans()) else 1.0
    moved = draw(st.sampled_from([0.0, 0.5, 1.0, 2.0]))
    drawn = Instance(
        seed=draw(st.integers(0, 2**31 - 1)),
        batch=batch,
        tokens=tokens,
        width=w,
        magnitude=draw(magnitudes()),
        dt=sign * size,
        rate=10.0 ** draw(st.floats(*(math.log10(r) for r in th.RATES))),
        t0=draw(start_times()),
        steps=steps,
        moved=moved,
        moved_seed=draw(st.integers(0, 2**16)),
        layers=draw(st.integers(1, layers)) if layers > 1 else 1,
    )
    t0 = placed(stepper, drawn.t0, drawn.dts())  # inside the times a scheme states it is defined on
    assume(t0 is not None)
    return replace(drawn, t0=t0)


def hamiltonian_problems(second_order: bool, width: int | None = None):
    """Strategy: coupled oscillators or coupled anharmonic oscillators (``x'' = -K x - x³``), one sample, drawn width
    (1 to ``HAMILTONIAN_WIDTH`` unless fixed: enough coupled coordinates that a force changed on some of them only
    shows) and magnitude: the Hamiltonian problems the symplectic map is checked on. For a
    first-order scheme (which runs them as ``[x, v]``) the width is that of ``x``."""
    dims = st.just(width) if width is not None else st.integers(1, th.HAMILTONIAN_WIDTH)
    kind = st.sampled_from([oscillator_problem, anharmonic_problem])
    base = st.builds(lambda build, seed, dim: build(seed=seed, dim=dim, batch=1), kind, st.integers(0, 2**31 - 1), dims)
    return st.builds(scaled, base, magnitudes())


def time_problems(width: int | None = None, first_order_width: int | None = None):
    """Strategy: the reversible round trips' problems: modulated, forced pendulums with a drawn phase (a time
    dependence neither even nor odd) and coupled anharmonic oscillators, at a drawn magnitude; for a first-order
    scheme of odd width, :func:`nonlinear_problem`."""
    if first_order_width is not None and first_order_width % 2:
        base = st.builds(nonlinear_problem, seed=st.integers(0, 2**31 - 1), dim=st.just(first_order_width))
        return st.builds(scaled, base, magnitudes())
    if first_order_width is not None:
        width = first_order_width // 2
    dims = st.just(width) if width is not None else st.integers(1, 3)
    pendulums = st.builds(
        pendulum_problem,
        seed=st.integers(0, 2**31 - 1),
        dim=dims,
        forcing=st.floats(0.0, 1.0),
        modulation=st.floats(0.0, 0.9),
        phase=st.floats(0.1, 3.0),
    )
    anharmonic = st.builds(anharmonic_problem, seed=st.integers(0, 2**31 - 1), dim=dims)
    return st.builds(scaled, st.one_of(pendulums, anharmonic), magnitudes())
