"""The scale rules (odeformer.parameterization; derived in docs/depth_as_time.md): ``standard`` is the identity, each
``ode`` rule, the layers that cannot scale, which scheme parameters a flow depends on, heavy ball's momentum, and a
coordinate check on a toy (x, v) stack: under ``ode`` per-layer activations and their updates under Adam do not
depend on depth, under ``standard`` they grow with it."""

import functools
import math
from typing import ClassVar

import pytest
import torch
import torch.nn.functional as F

import odeformer
import solvers
from odeformer.parameterization import (
    OPTIMIZERS,
    OUTER_ROLES,
    ROLES,
    STEP_ROLES,
    Parameterization,
    Scale,
    heavy_ball_momentum,
    require_limit,
    scheme_roles,
)
from solvers import Block, PhaseState, SemiImplicitEuler, Split

# -- the rules ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
@pytest.mark.parametrize("depth", [1, 4, 32])
def test_standard_is_the_identity(depth, optimizer):
    """Today's models, bit for bit: every multiplier 1, every step the one given, the base settings unchanged."""
    rules = Parameterization("standard", depth=depth, optimizer=optimizer)
    assert rules.dt is None
    assert rules.step(0.37) == 0.37 and rules.step(1.0) == 1.0
    for role in ROLES:
        for uses in [1] if role in OUTER_ROLES else [1, depth, 2.5]:
            assert rules.scale(role, uses) == Scale(1.0, 1.0, 1.0, 1.0)
            assert rules.options(role, 3e-3, 0.05, 1e-8, uses) == {"lr": 3e-3, "weight_decay": 0.05, "eps": 1e-8}
    assert Parameterization() == Parameterization("standard", depth=1)


def test_ode_steps_cover_the_time():
    rules = Parameterization("ode", depth=8, time=4.0)
    assert rules.dt == 0.5
    assert rules.step(1.0) == 0.5 and rules.step(0.25) == 0.5  # the layer's own step is replaced by T / L
    assert Parameterization("ode", depth=3, time=1).time == 1.0


# the table of docs/depth_as_time.md, §5: (lr, weight decay under adamw, weight decay under adam, eps) as multipliers,
# "span" standing for dt * uses; every initialisation keeps its multiplier 1
ODE_TABLE = {
    "hidden": (1.0, 1.0, "span", "span"),
    "hidden_bias": (1.0, 1.0, "span", "span"),
    "field_norm": (1.0, 1.0, "span", "span"),
    "scheme": (1.0, 1.0, "span", "span"),
    "discretisation": (0.0, 1.0, "span", "span"),
    "embedding": (1.0, 1.0, 1.0, 1.0),
    "outer_norm": (1.0, 1.0, 1.0, 1.0),
    "readout": (1.0, 1.0, 1.0, 1.0),
}


def test_the_table_names_every_role():
    assert set(ODE_TABLE) == set(ROLES) and set(STEP_ROLES) | set(OUTER_ROLES) == set(ROLES)


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
@pytest.mark.parametrize("role", ROLES)
def test_each_ode_rule(role, optimizer):
    lr, decay_adamw, decay_adam, eps = ODE_TABLE[role]
    for depth, time in [(4, 2.0), (32, 2.0), (10, 3.0)]:
        rules = Parameterization("ode", depth=depth, time=time, optimizer=optimizer)
        for uses in [1] if role in OUTER_ROLES else [1, depth, 2.5]:
            span = time / depth * uses
            decay = decay_adamw if optimizer == "adamw" else decay_adam
            decay, epsilon = (span if rule == "span" else rule for rule in (decay, eps))
            expected = Scale(init_std=1.0, lr=lr, weight_decay=decay, eps=epsilon)
            assert rules.scale(role, uses) == expected
            got = rules.options(role, lr=2e-3, weight_decay=0.1, eps=1e-8, uses=uses)
            assert got == pytest.approx({"lr": 2e-3 * lr, "weight_decay": 0.1 * decay, "eps": 1e-8 * epsilon})


@pytest.mark.parametrize(
    "make, fragment",
    [
        (lambda: Parameterization("odd"), "parameterization must be one of standard, ode"),
        (lambda: Parameterization("ode", depth=4), "needs time=T"),
        (lambda: Parameterization("ode", depth=4, time=0.0), "needs time=T"),
        (lambda: Parameterization("ode", depth=4, time=-1.0), "needs time=T"),
        (lambda: Parameterization("ode", depth=4, time=math.nan), "needs time=T"),
        (lambda: Parameterization("ode", depth=4, time=math.inf), "needs time=T"),
        (lambda: Parameterization("ode", depth=4, time=True), "needs time=T"),
        (lambda: Parameterization("standard", depth=4, time=2.0), "applies to parameterization=ode only"),
        (lambda: Parameterization("ode", depth=0, time=1.0), "depth must be a positive int"),
        (lambda: Parameterization("ode", depth=2.0, time=1.0), "depth must be a positive int"),
        (lambda: Parameterization("ode", depth=2, time=1.0, optimizer="sgd"), "optimizer must be one of adamw, adam"),
        (lambda: Parameterization("ode", depth=2, time=1.0).scale("weights"), "role must be one of hidden"),
        (lambda: Parameterization("ode", depth=2, time=1.0).scale("hidden", 0), "uses (the steps a parameter"),
        (lambda: Parameterization("ode", depth=2, time=1.0).scale("hidden", math.nan), "uses (the steps a"),
        (lambda: Parameterization().scale("readout", 4), "acts before or after the steps"),
        (lambda: heavy_ball_momentum(-1.0, 0.1), "damping rate must be finite and >= 0"),
    ],
)
def test_bad_input_is_one_line(make, fragment):
    with pytest.raises(ValueError) as caught:
        make()
    message = str(caught.value)
    assert fragment in message and "\n" not in message


# -- what cannot scale --------------------------------------------------------------------------------------------

LAYERS = {name: odeformer.as_solver(name) for name in odeformer.solver_names("discrete")}
UNSCALABLE = {"full_wave_official", "mix", "mix_bert", "velocity_mix"}


def test_exactly_the_layers_with_unit_steps_are_refused_under_ode():
    """Every solver in the table is either a step of an ODE (order >= 1 on its own block) or refused in one line."""
    ode, standard = Parameterization("ode", depth=8, time=4.0), Parameterization("standard", depth=8)
    refused = set()
    for name, entry in LAYERS.items():
        order = entry.build(8).claims().order
        require_limit(standard, order, name)  # standard takes every layer
        try:
            require_limit(ode, order, name)
        except ValueError as error:
            assert name in str(error) and "\n" not in str(error)
            refused.add(name)
    assert refused == UNSCALABLE


def test_a_post_norm_layer_is_refused_under_ode():
    """A map after a sublayer (LayerNorm, dropout on the state) is a step of fixed size: the layer claims order 0."""

    def field(t, x):
        return -x

    block = Block(field, field, after_attention=lambda x: x)
    order = Split(SemiImplicitEuler()).claims(block).order
    with pytest.raises(ValueError, match="no small-step limit"):
        require_limit(Parameterization("ode", depth=4, time=1.0), order, "a post-norm full_wave layer")


# -- scheme parameters: of the flow or of its discretisation ------------------------------------------------------


def test_every_schemes_parameters_have_a_role_or_the_scheme_is_refused():
    roles, refused = {}, set()
    for name, entry in LAYERS.items():
        try:
            found = scheme_roles(entry.build(8).stepper)
        except ValueError as error:
            assert "cannot be parameterised for ode" in str(error) and "\n" not in str(error)
            refused.add(name)
            continue
        if found:
            roles[name] = found
    assert roles == {
        "light_wave": {"theta": "scheme"},
        "damped": {"rho": "scheme"},
        "position_mix": {"theta": "scheme"},
        "two_stage_rk": {"theta": "discretisation"},
        "symmetric_splitting": {"theta": "discretisation"},
        "triple_jump": {"theta": "discretisation"},
    }
    assert refused == {"mix", "mix_bert", "velocity_mix"}  # full_wave_official's scheme is full_wave's: its FFN fails


class DampedWithDriftShare(solvers.AbstractStepper):
    """A scheme of one's own with one parameter of each kind: a learnable damping rate, which its limit has, and a
    learnable share of the force added to the drift, ``x <- x + dt v + s dt² a``, which moves ``x`` by O(dt²) only."""

    order: ClassVar[int] = 1
    second_order: ClassVar[bool] = True
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 1

    def __init__(self, dim: int = 3):
        super().__init__()
        self.rho = torch.nn.Parameter(torch.zeros(dim))
        self.share = torch.nn.Parameter(torch.zeros(dim))

    def step(self, field, t, y, dt, state):
        x, v = self._unpack(y)
        a = field(t, x)
        v = torch.exp(-F.softplus(self.rho) * dt) * v + dt * a
        return PhaseState(x + dt * v + torch.sigmoid(self.share) * dt * dt * a, v), state

    def limit_field(self, field):
        gamma = F.softplus(self.rho)
        return lambda t, y: PhaseState(y.v, field(t, y.x) - gamma * y.v)


def test_a_scheme_of_ones_own_needs_only_its_limit_field():
    """Nothing to declare beyond what the kit already checks: the parameter its limit field reads is the scheme's,
    the one it does not read is the discretisation's."""
    assert scheme_roles(DampedWithDriftShare()) == {"rho": "scheme", "share": "discretisation"}


def _tanh_field(width, generator):
    inner = torch.randn(width, width, generator=generator, dtype=torch.float64) / math.sqrt(width)
    outer = torch.randn(width, width, generator=generator, dtype=torch.float64) / math.sqrt(width)
    return lambda t, x: torch.tanh(x @ inner) @ outer - 0.5 * x


@pytest.mark.parametrize(
    "stepper, power",
    [
        (solvers.LightWave(dim=3), 1),
        (solvers.Damped(gamma=1.0, dim=3), 1),
        (solvers.Mix(dim=3, theta0=0.0), 1),
        (solvers.TwoStageRK(), 3),
        (solvers.SymmetricSplitting(dim=3), 3),
        (solvers.TripleJump(dim=3), 5),
    ],
    ids=lambda value: type(value).__name__ if not isinstance(value, int) else str(value),
)
def test_a_step_depends_on_a_scheme_parameter_at_dt_and_on_a_discretisation_parameter_at_dt_to_the_order_plus_one(
    stepper, power
):
    """The derivation's premise (§4): a parameter of the limit moves one step by O(dt), so its gradient carries dt
    like a field's weights; a coefficient of an order-p scheme moves only the local error, O(dt^{p+1})."""
    stepper = stepper.double()
    generator = torch.Generator().manual_seed(3)
    field = _tanh_field(3, generator)
    x = torch.randn(2, 4, 3, generator=generator, dtype=torch.float64)
    v = torch.randn(2, 4, 3, generator=generator, dtype=torch.float64)
    probe = torch.randn(2, 2, 4, 3, generator=generator, dtype=torch.float64)
    sizes = []
    steps = [0.2 / 2**k for k in range(4)]
    for dt in steps:
        y = PhaseState(x, v) if stepper.second_order else x
        state = x - dt * v if isinstance(stepper, solvers.LightWave) else None  # a history a smooth run leaves
        y1, _ = stepper.step(field, 0.0, y, dt, state)
        out = torch.stack(tuple(y1)) if isinstance(y1, tuple) else torch.stack((y1, y1))
        (grad,) = torch.autograd.grad((out * probe).sum(), [next(stepper.parameters())])
        sizes.append(grad.norm().item())
    slope = (math.log(sizes[0]) - math.log(sizes[-1])) / (math.log(steps[0]) - math.log(steps[-1]))
    assert abs(slope - power) < 0.2, (sizes, slope)


# -- heavy ball -----------------------------------------------------------------------------------------------------


def test_heavy_ball_momentum_is_exp_of_minus_rate_dt():
    rate = torch.tensor([0.0, 0.5, 3.0], dtype=torch.float64)
    got = heavy_ball_momentum(rate, 0.1)
    assert torch.equal(got, torch.exp(-0.1 * rate))
    assert bool(((got > 0) & (got <= 1)).all()) and bool((heavy_ball_momentum(rate, 100.0) > 0).all())


def _heavy_ball(force, x0, depth, time, momentum, power):
    """``x_{n+1} = x_n + λ(dt) (x_n - x_{n-1}) + dt^power a(x_n)``, ``x_{-1} = x_0``: every position."""
    dt = time / depth
    previous, x, xs = x0, x0, [x0]
    for _ in range(depth):
        previous, x = x, x + momentum(dt) * (x - previous) + dt**power * force(0.0, x)
        xs.append(x)
    return xs


def test_heavy_ball_has_a_depth_limit_only_with_fixed_momentum_or_exp_momentum_and_a_dt_squared_force():
    """The 2 x 2 table of §4c, read from the largest displacement per step times the depth (the largest speed the
    positions move at). With a fixed λ and an O(dt) force (an overdamped, first-order limit) it stays bounded: a step
    moves at most dt max|a| / (1 - λ), so from 8 to 64 layers it grows by less than 1 / (1 - λ) = 2 (the first
    steps build the momentum up); with λ = exp(-γ dt) and an O(dt²) force (the damped wave) likewise. With λ =
    1 - γ dt and an O(dt) force a step moves O(1) whatever dt: the "speed" grows like the depth, and there is no
    limit."""
    generator = torch.Generator().manual_seed(0)
    force, x0, gamma = _tanh_field(6, generator), torch.randn(5, 6, generator=generator, dtype=torch.float64), 1.0

    def speed(momentum, power, depth):
        xs = _heavy_ball(force, x0, depth, 2.0, momentum, power)
        return depth * max((b - a).norm().item() for a, b in zip(xs, xs[1:]))

    regimes = {
        "fixed": (lambda dt: 0.5, 1),
        "exp": (lambda dt: heavy_ball_momentum(gamma, dt), 2),
        "linear": (lambda dt: 1 - gamma * dt, 1),
    }
    grows = {name: speed(*rule, 64) / speed(*rule, 8) for name, rule in regimes.items()}
    assert grows["fixed"] < 2 and grows["exp"] < 2, grows
    assert grows["linear"] > 6, grows  # 8x the layers, about 8x the "speed"


def test_heavy_ball_with_exp_momentum_and_a_dt_squared_force_is_damped():
    """Step for step the damped wave's semi-implicit Euler (``solvers.Damped``) from ``v_0 = 0``."""
    generator = torch.Generator().manual_seed(1)
    force, x0 = _tanh_field(4, generator), torch.randn(3, 4, generator=generator, dtype=torch.float64)
    gamma, depth, time = 0.75, 16, 2.0  # exact in float32, as Damped keeps a fixed rate
    xs = _heavy_ball(force, x0, depth, time, lambda dt: heavy_ball_momentum(gamma, dt), 2)
    damped = solvers.trajectory(solvers.Damped(gamma=gamma), [force] * depth, PhaseState(x0, 0 * x0), time / depth)
    for x, y in zip(xs, damped):
        torch.testing.assert_close(x, y.x, rtol=1e-12, atol=1e-12)


def test_fixed_momentum_heavy_ball_tends_to_the_rescaled_field():
    """With λ fixed the limit is first order, ``x' = a / (1 - λ)``: momentum becomes a gain (solvers.LightWave's
    limit), and the error falls like dt."""
    generator = torch.Generator().manual_seed(2)
    force, x0 = _tanh_field(4, generator), torch.randn(3, 4, generator=generator, dtype=torch.float64)
    lam, time = 0.5, 1.0
    exact = x0
    for _ in range(4096):
        exact = exact + time / 4096 * force(0.0, exact) / (1 - lam)
    errors = [(_heavy_ball(force, x0, d, time, lambda dt: lam, 1)[-1] - exact).norm().item() for d in (16, 32, 64)]
    assert errors[1] / errors[0] < 0.6 and errors[2] / errors[1] < 0.6  # first order


# -- the coordinate check -------------------------------------------------------------------------------------------

WIDTH, HIDDEN, INPUTS, OUTPUTS, BATCH, TIME, STANDARD_DT, DEPTHS = 16, 32, 8, 4, 16, 2.0, 0.5, (4, 8, 16, 32)
ROLE_OF = {
    "embed_w": "embedding", "embed_b": "embedding", "final_g": "outer_norm", "final_b": "outer_norm",
    "head_w": "readout", "head_b": "readout", "rho": "scheme",
    **dict.fromkeys(["norm_a_g", "norm_a_b", "norm_f_g", "norm_f_b"], "field_norm"),
    **dict.fromkeys(["a_w1", "a_w2", "f_w1", "f_w2"], "hidden"),
    **dict.fromkeys(["a_b1", "a_b2", "f_b1", "f_b2"], "hidden_bias"),
}  # fmt: skip
DECAYED = {"a_w1", "a_w2", "f_w1", "f_w2", "head_w"}  # today's train.decay=matrices: matrices outside the embeddings


def _mlp(u, w1, b1, w2, b2):
    return torch.tanh(u @ w1 + b1) @ w2 + b2


def _mlp_and_jvp(z, v, g, b, w1, b1, w2, b2):
    """``f(z) = MLP(LN z)`` and ``J_f(z) v`` (the exact LayerNorm JVP, then the MLP's), written out."""
    mean, s = z.mean(-1, keepdim=True), (z.var(-1, unbiased=False, keepdim=True) + 1e-5).sqrt()
    unit = (z - mean) / s
    du = g * ((v - v.mean(-1, keepdim=True)) - unit * (unit * v).mean(-1, keepdim=True)) / s
    h = torch.tanh((g * unit + b) @ w1 + b1)
    return h @ w2 + b2, ((1 - h * h) * (du @ w1)) @ w2


def _toy(depth, seed=0):
    """A toy of Full Wave's damped layer: per layer a force ``a = MLP(LN x)``, a damped kick ``v <- e^{-γ dt} v +
    dt a``, a drift ``x <- x + dt v``, then the FFN sub-step with the chain rule, ``(x, v) <- (x + dt f(x), v + dt
    J_f(x) v)``; an embedding before, a LayerNorm and a linear readout after. Each layer has its own weights, all
    starting as copies of one draw (a discretisation of one flow: weights smooth in depth-time)."""
    generator = torch.Generator().manual_seed(seed)

    def draw(*shape, scale=1.0):
        return torch.randn(*shape, generator=generator, dtype=torch.float64) * scale

    layer = {
        "norm_a_g": torch.ones(WIDTH, dtype=torch.float64), "norm_a_b": torch.zeros(WIDTH, dtype=torch.float64),
        "a_w1": draw(WIDTH, HIDDEN, scale=WIDTH**-0.5), "a_b1": draw(HIDDEN, scale=0.1),
        "a_w2": draw(HIDDEN, WIDTH, scale=HIDDEN**-0.5), "a_b2": draw(WIDTH, scale=0.1),
        "norm_f_g": torch.ones(WIDTH, dtype=torch.float64), "norm_f_b": torch.zeros(WIDTH, dtype=torch.float64),
        "f_w1": draw(WIDTH, HIDDEN, scale=WIDTH**-0.5), "f_b1": draw(HIDDEN, scale=0.1),
        "f_w2": draw(HIDDEN, WIDTH, scale=HIDDEN**-0.5), "f_b2": draw(WIDTH, scale=0.1),
        "rho": torch.full((WIDTH,), math.log(math.expm1(0.5)), dtype=torch.float64),  # γ = softplus(ρ) = 0.5
    }  # fmt: skip
    params = {name: value.expand(depth, *value.shape).clone() for name, value in layer.items()}
    params.update(
        embed_w=draw(INPUTS, WIDTH, scale=INPUTS**-0.5),
        embed_b=torch.zeros(WIDTH, dtype=torch.float64),
        final_g=torch.ones(WIDTH, dtype=torch.float64),
        final_b=torch.zeros(WIDTH, dtype=torch.float64),
        head_w=draw(WIDTH, OUTPUTS, scale=WIDTH**-0.5),
        head_b=torch.zeros(OUTPUTS, dtype=torch.float64),
    )
    return {name: torch.nn.Parameter(value) for name, value in params.items()}


def _forward(p, inputs, depth, dt):
    """The readout and the state ``x`` after every layer."""
    x = inputs @ p["embed_w"] + p["embed_b"]
    v, states = torch.zeros_like(x), []
    for n in range(depth):
        a = _mlp(F.layer_norm(x, (WIDTH,), p["norm_a_g"][n], p["norm_a_b"][n]), *(p[k][n] for k in _A))
        v = torch.exp(-F.softplus(p["rho"][n]) * dt) * v + dt * a  # the kick
        x = x + dt * v  # the drift
        f, jv = _mlp_and_jvp(x, v, *(p[k][n] for k in _F))
        x, v = x + dt * f, v + dt * jv  # the FFN and, by the chain rule, its velocity
        states.append(x)
    return F.layer_norm(x, (WIDTH,), p["final_g"], p["final_b"]) @ p["head_w"] + p["head_b"], states


_A, _F = ("a_w1", "a_b1", "a_w2", "a_b2"), ("norm_f_g", "norm_f_b", "f_w1", "f_b1", "f_w2", "f_b2")


def _optimizer(p, rules, lr=1e-2, weight_decay=0.05, eps=1e-8, scaled=True):
    """AdamW with one group per parameter, its settings from ``rules`` (``scaled=False``: every eps the base one)."""
    groups = []
    for name, value in p.items():
        options = rules.options(ROLE_OF[name], lr, weight_decay if name in DECAYED else 0.0, eps)
        groups.append({"params": [value], **options, **({} if scaled else {"eps": eps})})
    return torch.optim.AdamW(groups)


def _data():
    generator = torch.Generator().manual_seed(99)
    inputs = torch.randn(BATCH, INPUTS, generator=generator, dtype=torch.float64)
    return inputs, torch.randn(BATCH, OUTPUTS, generator=generator, dtype=torch.float64)


def _rms(t):
    return t.pow(2).mean().sqrt().item()


@functools.cache
def coordinates(kind, depth, steps=5):
    """CompleteP's coordinate check on the toy: the state's size at depth-times ``T/4, T/2, 3T/4, T`` (the layers a
    quarter, half, ... of the way up) at initialisation, how far Adam's ``steps`` steps moved each of them, and how
    far they moved the readout."""
    rules = Parameterization(kind, depth=depth, time=TIME if kind == "ode" else None)
    dt = rules.step(STANDARD_DT)
    p, (inputs, targets) = _toy(depth), _data()
    optimizer = _optimizer(p, rules)
    with torch.no_grad():
        out0, states0 = _forward(p, inputs, depth, dt)
    for _ in range(steps):
        optimizer.zero_grad()
        out, _ = _forward(p, inputs, depth, dt)
        F.mse_loss(out, targets).backward()
        optimizer.step()
    with torch.no_grad():
        out1, states1 = _forward(p, inputs, depth, dt)
    layers = [j * depth // 4 - 1 for j in (1, 2, 3, 4)]
    return (
        [_rms(states0[n]) for n in layers],
        [_rms(states1[n] - states0[n]) for n in layers],
        _rms(out1 - out0),
    )


def _columns(kind):
    """Every coordinate as one list over the depths."""
    rows = [coordinates(kind, depth) for depth in DEPTHS]
    sizes = [[row[0][j] for row in rows] for j in range(4)]
    updates = [[row[1][j] for row in rows] for j in range(4)]
    return sizes, updates, [row[2] for row in rows]


def test_under_ode_per_layer_activations_and_their_updates_do_not_depend_on_depth():
    """Depth 4 to 32 at ``T = 2``: each coordinate stays within 25 % (the spread is the scheme's first-order error at
    the coarsest step dt = 1/2; measured about 10 %), and the activations converge (their change from 16 to 32 layers
    is smaller than from 4 to 8)."""
    sizes, updates, readout = _columns("ode")
    for column in [*sizes, *updates, readout]:
        assert max(column) / min(column) < 1.25, column
    for column in sizes:
        assert abs(column[3] - column[2]) < abs(column[1] - column[0]), column


def test_under_standard_they_grow_with_depth():
    """The same toy with every layer at the standard step 1/2: the total time grows with the depth, and so do the
    state and Adam's change of it (by more than 4x from 4 to 32 layers, at every depth-fraction but the first)."""
    sizes, updates, _ = _columns("standard")
    for column in [*sizes[1:], *updates[1:]]:
        assert column[-1] / column[0] > 4, column
        assert column == sorted(column), column


def test_ode_at_the_standard_depth_is_the_standard_model():
    """``T = 4 x 1/2``: at 4 layers the ``ode`` model takes the standard step. The two are one model: the same
    activations, and the same updates but for Adam's epsilon (1e-8 under ``standard``, halved under ``ode``), which
    moves them by less than 1e-4 relatively."""
    ode, standard = coordinates("ode", 4), coordinates("standard", 4)
    assert ode[0] == standard[0]
    assert ode[1] == pytest.approx(standard[1], rel=1e-4) and ode[2] == pytest.approx(standard[2], rel=1e-4)


def _first_update(depth, scaled, eps):
    """The size of Adam's first update of the force's output weights at depth-time T/2, and of the readout's."""
    rules = Parameterization("ode", depth=depth, time=TIME)
    p, (inputs, targets) = _toy(depth), _data()
    before = {name: value.detach().clone() for name, value in p.items()}
    optimizer = _optimizer(p, rules, weight_decay=0.0, eps=eps, scaled=scaled)
    out, _ = _forward(p, inputs, depth, rules.dt)
    F.mse_loss(out, targets).backward()
    optimizer.step()
    n = depth // 2 - 1
    return _rms(p["a_w2"][n].detach() - before["a_w2"][n]), _rms(p["head_w"].detach() - before["head_w"])


def test_adams_epsilon_must_scale_with_the_step():
    """An in-step gradient carries dt, so an epsilon comparable to it at 4 layers (1e-2) swamps it at 32 unless it
    is scaled by dt too: scaled, the per-layer update keeps its size; unscaled, it shrinks. The readout's does not
    depend on depth either way."""
    scaled = [_first_update(depth, True, 1e-2) for depth in DEPTHS]
    unscaled = [_first_update(depth, False, 1e-2) for depth in DEPTHS]
    hidden = [row[0] for row in scaled]
    assert max(hidden) / min(hidden) < 1.25, hidden
    assert unscaled[-1][0] < 0.5 * unscaled[0][0], unscaled
    for rows in (scaled, unscaled):
        readout = [row[1] for row in rows]
        assert max(readout) / min(readout) < 1.25, readout


def test_in_step_gradients_carry_dt_and_outer_ones_do_not():
    """The premise of every rule (§3): under ``ode`` an in-step parameter's gradient times the depth converges, an
    embedding's or readout's gradient converges as it is."""
    scaled, outer = [], []
    for depth in DEPTHS:
        rules = Parameterization("ode", depth=depth, time=TIME)
        p, (inputs, targets) = _toy(depth), _data()
        out, _ = _forward(p, inputs, depth, rules.dt)
        F.mse_loss(out, targets).backward()
        n = depth // 2 - 1
        scaled.append([depth * _rms(p[name].grad[n]) for name in ("a_w2", "f_w1", "norm_a_g", "a_b2", "rho")])
        outer.append([_rms(p[name].grad) for name in ("embed_w", "head_w", "final_g")])
    for rows in (scaled, outer):
        for column in zip(*rows):
            assert max(column) / min(column) < 1.5, column
            assert abs(column[3] - column[2]) < abs(column[1] - column[0]), column


def test_the_toys_chain_rule_is_the_jacobian():
    """The hand-written JVP of the toy's FFN equals forward-mode AD's."""
    p = _toy(1)
    generator = torch.Generator().manual_seed(5)
    z, v = (torch.randn(3, WIDTH, generator=generator, dtype=torch.float64) for _ in range(2))
    weights = [p[k][0].detach() for k in _F]
    f, jv = _mlp_and_jvp(z, v, *weights)

    def plain(z):
        return _mlp(F.layer_norm(z, (WIDTH,), weights[0], weights[1]), *weights[2:])

    expected = torch.func.jvp(plain, (z,), (v,))
    torch.testing.assert_close(f, expected[0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(jv, expected[1], rtol=1e-10, atol=1e-12)
