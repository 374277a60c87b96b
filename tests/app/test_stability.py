"""The start-up stability bound: the values the docstring quotes, and the dependence on scheme parameters."""

import math

import pytest

import solvers
from odeformer.app.run.stability import max_stable_dt, stable


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


@pytest.mark.parametrize("theta0", [-4.0, -2.0, 0.0, 1.0])
def test_heavy_ball_bound_is_its_companion_matrix_bound(theta0):
    """Heavy-ball momentum ``x_{n+1} = (1 + λ + dt μ) x_n - λ x_{n-1}`` is stable on the disk ``|μ + 1| <= 1`` up to
    ``dt = (1 - λ)² / (1 + λ)`` (its companion matrix's spectral radius reaches 1 as ``μ -> 0`` along the circle); a
    run of 200 steps that allowed a growth of 10 had reported up to 1.6 times that."""
    lam = 1 / (1 + math.exp(-theta0))
    exact = (1 - lam) ** 2 / (1 + lam)
    assert max_stable_dt(solvers.LightWave(theta0=theta0)) == pytest.approx(exact, rel=0.05)
    assert stable(solvers.LightWave(theta0=theta0), 0.9 * exact)
    assert not stable(solvers.LightWave(theta0=theta0), 1.15 * exact)


def test_a_scheme_without_a_small_step_limit_has_no_bound():
    """The mix preset's diffusion part takes a unit step whatever dt is (order 0): no dt makes the linear test
    decay, so a bound would only ever say "unstable"."""
    from odeformer import as_solver

    layer = as_solver("mix").build(8)
    assert layer.stepper.order == 0 and max_stable_dt(layer.stepper) is None


class _DampedVerlet(solvers.AbstractStepper):
    """A scheme of a user's own: velocity Verlet with a per-channel damping, friction applied at each kick."""

    order, second_order, symplectic, reversible, evals_per_step = 1, True, False, False, 2

    def __init__(self, dim: int = 1):
        super().__init__()
        import torch

        self.gamma = torch.nn.Parameter(torch.full((dim,), 0.1))

    def step(self, field, t, y, dt, state=None):
        x, v = y
        v = v * (1 - self.gamma * dt / 2) + dt / 2 * field(t, x)
        x = x + dt * v
        v = v * (1 - self.gamma * dt / 2) + dt / 2 * field(t + dt, x)
        return solvers.PhaseState(x, v), state


def test_a_users_scheme_in_a_laplacian_layer_is_warned_about_beyond_its_own_bound():
    """The start-up warning steps the layer's own stepper: a scheme of the user's gets its own bound (here a damped
    Verlet's, just under velocity Verlet's √2), not a table's."""
    import warnings

    import odeformer
    from odeformer.app.run.stability import warn_unstable

    bound = max_stable_dt(_DampedVerlet(4))
    assert 1.0 < bound < 2.5
    for dt, warned in ((0.9 * bound, False), (1.2 * bound, True)):
        model = odeformer.ViT(
            solver=odeformer.solver(_DampedVerlet),
            num_classes=3, image_size=8, patch_size=4, dim=4, depth=1, heads=1, dt=dt,
        )  # fmt: skip
        assert type(model.backbone.layers[0].stepper) is _DampedVerlet
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            warn_unstable(model)
        assert any("_DampedVerlet's stability bound" in str(w.message) for w in caught) is warned, dt
