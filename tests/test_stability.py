"""The start-up stability bound: the values the docstring quotes, and the dependence on scheme parameters."""

import math

import pytest

import solvers
from odeformer.stability import max_stable_dt


@pytest.mark.parametrize(
    "cls, bound",
    [
        (solvers.Euler, 1.0),  # |1 + dt μ| <= 1 on the disk |μ + 1| <= 1
        (solvers.Heun, 1.0),
        (solvers.RK4, 1.39),  # the real-axis end of RK4's region, 2.785 / 2
        (solvers.SemiImplicitEuler, math.sqrt(2)),  # dt ω <= 2 with ω² <= 2
        (solvers.VelocityVerlet, math.sqrt(2)),
        (solvers.Leapfrog, math.sqrt(2)),
    ],
)
def test_known_bounds(cls, bound):
    assert max_stable_dt(cls()) == pytest.approx(bound, abs=0.015)


def test_damping_and_momentum_change_the_bound():
    assert max_stable_dt(solvers.Damped(gamma=0.0)) == pytest.approx(math.sqrt(2), abs=0.015)
    assert max_stable_dt(solvers.Damped(gamma=1.0)) < math.sqrt(2)
    assert max_stable_dt(solvers.LightWave(theta0=-math.inf)) == pytest.approx(1.0, abs=0.015)  # λ = 0: Euler
    assert max_stable_dt(solvers.LightWave(dim=4, theta0=0.0)) < 1.0
