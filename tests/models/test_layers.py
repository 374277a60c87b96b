"""Layers as block steppers: what reaches the output, what the reversible path refuses, one loop for every driver."""

import dataclasses
from typing import ClassVar

import pytest
import torch
import torch.nn.functional as F

import odeformer
import solvers
from odeformer import Layer, ViT
from odeformer.fields import FeedForward
from solvers import Block, Euler, Heun, PhaseState, SemiImplicitEuler, Split, Whole

CHAIN_RULE = sorted(
    name
    for name, p in ((name, odeformer.as_solver(name)) for name in odeformer.solver_names("discrete"))
    if p.stepper.second_order and p.block_stepper is Split and p.ffn is None
)


def test_every_second_order_preset_with_a_chain_rule_ffn_is_covered():
    assert {"full_wave", "velocity_verlet", "leapfrog", "damped", "mix"} <= set(CHAIN_RULE)


@pytest.mark.parametrize("solver", CHAIN_RULE)
def test_the_ffn_velocity_reaches_the_output(solver, monkeypatch):
    """Scale the velocity the FFN's chain rule produces: every second-order preset must feel it (leapfrog once
    threw it away and read its history from a stored position instead)."""
    torch.manual_seed(0)
    model = ViT(depth=3, dim=16, heads=2, solver=solver).double().eval()
    images = torch.randn(2, 1, 8, 8, dtype=torch.float64)
    base = model(images)
    joint = FeedForward.joint

    def louder(self, x, v):
        f, jv = joint(self, x, v)
        return f, 1e6 * jv

    monkeypatch.setattr(FeedForward, "joint", louder)
    assert (model(images) - base).abs().max() > 1e-3


def _toggle(model, where):
    for layer in model.backbone.layers:
        if where == "attention":
            layer.attention.dropout = 0.1
        else:
            layer.ffn.mlp.drop.p = 0.1


@pytest.mark.parametrize("where", ["attention", "ffn"])
def test_reversible_refuses_dropout_switched_on_after_construction(where):
    model = ViT(depth=2, dim=16, heads=2, solver="reversible")
    _toggle(model, where)
    with pytest.raises(ValueError, match="reversible solver needs dropout=0 \\(it was switched on after construction"):
        model(torch.randn(2, 1, 8, 8))
    model.eval()  # evaluation draws no masks: allowed
    with torch.no_grad():
        model(torch.randn(2, 1, 8, 8))


def test_a_layer_is_a_module_stepped_by_its_own_dt_from_its_own_time():
    torch.manual_seed(0)
    model = ViT(depth=2, dim=16, heads=2, solver="reversible").double()
    layer = model.backbone.layers[0]
    assert type(layer) is Layer and not isinstance(layer, solvers.AbstractStepper)
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    y = PhaseState(x, torch.randn_like(x))
    block, stepper = layer.block(), layer.block_stepper
    y1, _ = stepper.step(block, layer.t0, y, layer.dt, stepper.init(block, layer.t0, y))
    back = layer.inverse(y1)
    torch.testing.assert_close(back.x, y.x, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(back.v, y.v, rtol=1e-12, atol=1e-12)
    claims = layer.claims()
    assert (claims.reversible, layer.second_order, claims.order) == (True, True, 1)
    assert [(each.t0, each.dt) for each in model.backbone.layers] == [(0.0, 0.5), (0.5, 0.5)]


@pytest.mark.parametrize("solver", ["diffusion", "full_wave", "rk4"])
def test_the_backbone_steps_each_layer_through_its_own_step_by_its_own_dt(solver, monkeypatch):
    """The depth loop is :func:`solvers.run_steps`, the kit's loop: it steps each layer's block stepper on the layer's
    block from the layer's own time by the layer's own ``dt``, checked when it was set (a forward pass checks no step
    size again)."""
    torch.manual_seed(0)
    model = ViT(depth=3, dim=16, heads=2, solver=solver, dt=0.25, impl="math").double().eval()
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    taken, loops = [], []
    run_steps = solvers.run_steps

    def spy(steppers, fields, y0, dts, t0=0.0, hook=None):
        loops.append(len(steppers))
        for stepper in steppers:
            step = stepper.step

            def recorded(field, t, y, dt, state, _stepper=stepper, _step=step):
                taken.append((_stepper, t, dt))
                return _step(field, t, y, dt, state)

            monkeypatch.setattr(stepper, "step", recorded)
        return run_steps(steppers, fields, y0, dts, t0, hook)

    def refuse(dt):
        raise AssertionError("a forward pass checked a step size again")

    monkeypatch.setattr(solvers, "run_steps", spy)
    monkeypatch.setattr(solvers._base, "_check_dt", refuse)
    out = model.backbone(x)
    layers = list(model.backbone.layers)
    assert loops == [3]
    assert taken == [(layer.block_stepper, 0.25 * i, 0.25) for i, layer in enumerate(layers)]
    y = PhaseState(x, torch.zeros_like(x)) if layers[0].second_order else x
    for layer in layers:  # the same steps, taken by hand
        stepper, t = layer.block_stepper, 0.25 * layers.index(layer)
        y, _ = stepper.step(layer.block(), t, y, 0.25, stepper.init(layer.block(), t, y))
    torch.testing.assert_close(out, model.backbone.norm(y.x if isinstance(y, PhaseState) else y), rtol=0, atol=0)


def test_block_steppers_declare_from_their_parts():
    assert Split(SemiImplicitEuler()).order == 1 and not Split(SemiImplicitEuler()).reversible
    assert Split(SemiImplicitEuler(), ffn=SemiImplicitEuler()).reversible
    assert Split(solvers.VelocityVerlet(), splitting="strang").order == 2
    assert Split(solvers.VelocityVerlet(), ffn=Euler(), splitting="strang").order == 1  # Euler halves: order 1
    assert Split(solvers.RK4(), ffn=Heun(), splitting="strang").order == 2
    assert Whole(solvers.RK4()).order == 4
    assert Split(SemiImplicitEuler(), ffn_dt=1.0).order == 0  # a fixed FFN step: no small-step limit


def test_bad_block_construction_is_one_sentence():
    with pytest.raises(ValueError, match="only when the layer's stepper is second-order"):
        Split(Euler(), ffn=SemiImplicitEuler())
    with pytest.raises(ValueError, match="must be a one-step scheme"):
        Split(SemiImplicitEuler(), ffn=solvers.LightWave())
    with pytest.raises(TypeError, match=r"steps on a solvers.Block\(attention, ffn, ...\)"):
        Split(Euler()).step(lambda t, x: x, 0.0, torch.zeros(1), 0.1, None)


def test_tangent_lift_of_any_rk_scheme_is_the_jacobian_of_its_map():
    """The FFN sub-step by Heun on (x, v): v1 is exactly the Jacobian of x -> x1 applied to v."""
    g = torch.Generator().manual_seed(0)
    W = torch.randn(3, 3, generator=g, dtype=torch.float64)

    def ffn(t, x):
        return torch.tanh(x @ W)

    layer = Split(SemiImplicitEuler(), ffn=Heun())
    block = Block(lambda t, x: torch.zeros_like(x), ffn)
    x = torch.randn(2, 3, generator=g, dtype=torch.float64)
    v = torch.randn(2, 3, generator=g, dtype=torch.float64)
    y1, _ = layer.step(block, 0.0, PhaseState(x, v), 0.3, None)

    def position(x):
        return layer.step(block, 0.0, PhaseState(x, torch.zeros_like(x)), 0.3, None)[0].x

    # with no force the attention step only drifts: x1 = heun(x + 0.3 v), v1 = J_heun v
    _, jv = torch.func.jvp(lambda z: position(z), (x + 0.3 * v,), (v,))
    torch.testing.assert_close(y1.v, jv, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("solver", sorted(solvers.STEPPERS))
def test_every_registered_scheme_trains_as_a_solver(solver):
    model = ViT(depth=2, dim=16, heads=2, solver=solver)
    model(torch.randn(2, 1, 8, 8)).square().sum().backward()
    assert all(p.grad is not None for p in model.parameters())


STRANG = [  # the second-order Strang layers measure slowly (about 15 s each): they run in the slow suite
    odeformer.solver("diffusion", splitting="strang"),
    *(
        pytest.param(odeformer.solver(n, splitting="strang"), marks=pytest.mark.slow)
        for n in ("full_wave", "velocity_verlet")
    ),
]


# Layers the default suite's cases already stand for (about 8 s each): tableau's default is velocity Verlet's layer;
# rk4_38 is a second whole-block RK4; the other one-step schemes' Lie layers are order 1 as full_wave's is. They run in
# the slow suite. (euler's layer is diffusion's and semi_implicit_euler's full_wave's: SAME below, measured once.)
SLOW_LAYERS = {"rk4_38", "leapfrog", "damped", "velocity_verlet", "heun", "tableau"}
# The named tableaux and learnable families are whole-block first-order or Lie second-order layers like those above.
SLOW_LAYERS |= set(solvers.TABLEAUX) | {"two_stage_rk", "symmetric_splitting", "triple_jump"}


def _layer(name):
    """A preset's layer, whatever it is called: its solver record without its name and words."""
    return dataclasses.replace(odeformer.registry.as_solver(name), name="", equation="")


_DISCRETE = odeformer.solver_names("discrete")
SAME = {
    name: twin
    for i, name in enumerate(_DISCRETE)
    for twin in [next((n for n in _DISCRETE[:i] if _layer(n) == _layer(name)), None)]
    if twin is not None
}
"""``{preset: earlier preset}`` for a preset whose layer is exactly an earlier one's: measured once, as the earlier."""
LAYERS = [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_LAYERS else n for n in _DISCRETE if n not in SAME]


def test_a_preset_whose_layer_is_another_presets_builds_that_layer():
    """What lets a preset's measurement stand for its twin's: the same record, and the same layer built from it (the
    same steppers and parameters)."""
    assert SAME  # euler's layer is diffusion's, semi_implicit_euler's full_wave's
    for name, twin in SAME.items():
        built = [odeformer.registry.as_solver(n).build(6) for n in (name, twin)]
        assert repr(built[0]) == repr(built[1])
        a, b = (dict(layer.state_dict()) for layer in built)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize(
    "solver", [*LAYERS, *STRANG], ids=lambda s: s if isinstance(s, str) else f"{s.name}-{s.splitting}"
)
def test_every_layer_converges_with_its_declared_order(solver):
    """Measured on a weight-tied block of the library's own fields against the block's ODE: Lie 1, Strang 2 with
    second-order parts, whole-block schemes their stepper's order, no small-step limit declared as 0."""
    report = odeformer.check_solver(solver)
    chosen = odeformer.registry.as_solver(solver)
    no_limit = ("mix", "full_wave_official", "mix_bert", "velocity_mix")
    whole = chosen.block_stepper is Whole  # the whole block: the scheme's own order
    expected = solvers.Claims.of(chosen.stepper).order if whole else 0 if chosen.name in no_limit else 1
    if chosen.splitting == "strang" and chosen.stepper.order >= 2:
        expected = 2
    assert report["declared"] == expected


class FourthOrderLie(Split):
    """A Lie layer that claims the order of its fourth-order stepper."""

    order: ClassVar[int] = 4


class SecondOrderLeapfrogStrang(Split):
    """Leapfrog (two-step) under Strang, claiming Strang's order 2: its history is not carried through the FFN's
    half steps to second order."""

    order: ClassVar[int] = 2


@pytest.mark.parametrize(
    "layer, slope",
    [
        (FourthOrderLie(solvers.RK4()), "1.00"),
        (SecondOrderLeapfrogStrang(solvers.Leapfrog(), splitting="strang"), "1.00"),
    ],
)
def test_a_layer_claiming_more_than_it_has_fails_with_the_measured_slope(layer, slope):
    from solvers.testing import check_layer

    with pytest.raises(AssertionError, match=rf"declares layer order \d but its error falls like dt\^{slope}"):
        check_layer(layer)


def test_a_layer_without_a_small_step_limit_says_so():
    from solvers.testing import check_layer

    report = check_layer(Split(SemiImplicitEuler(), ffn_dt=1.0))
    assert report["declared"] == 0 and "no small-step limit" in report["reason"]


def _post_backbone(solver, ln_mode="exact", depth=2):
    torch.manual_seed(0)
    backbone = odeformer.transformer(depth, 8, 2, solver, norm="post", ln_mode=ln_mode, impl="math").double().eval()
    for p in backbone.parameters():  # away from LayerNorm's identity start
        p.data.add_(0.2 * torch.randn_like(p))
    return backbone


def test_post_norm_layers_carry_the_velocity_by_the_chain_rule():
    """Full Wave, post-norm: v <- v + τ a(x); x <- x + τ v; (x, v) <- (LN x, J_LN v); then the FFN sub-step with its
    Jacobian on v; then (LN x, J_LN v) again — each map's Jacobian by forward-mode AD here."""
    backbone = _post_backbone("full_wave")
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    states = []
    backbone(x, record=states)
    y = PhaseState(x, torch.zeros_like(x))
    for layer, recorded in zip(backbone.layers, states[1:]):
        v = y.v + 0.5 * layer.attention(0.0, y.x)  # kick: the attention force Attn(x) - x
        x1 = y.x + 0.5 * v  # drift
        y = PhaseState(*torch.func.jvp(layer.after_attention.module.position, (x1,), (v,)))

        def ffn_step(z, ffn=layer.ffn):
            return z + 0.5 * ffn(0.0, z)

        y = PhaseState(*torch.func.jvp(ffn_step, (y.x,), (y.v,)))
        y = PhaseState(*torch.func.jvp(layer.after_ffn.module.position, (y.x,), (y.v,)))
        torch.testing.assert_close(recorded.x, y.x, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(recorded.v, y.v, rtol=1e-12, atol=1e-12)


def test_post_norm_diffusion_at_unit_step_is_the_post_ln_transformer():
    """x <- LN(x + Attn(x)); x <- LN(x + MLP(x)): BERT's layer, with the library's weights."""
    backbone = _post_backbone("diffusion")
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    h = x
    for layer in backbone.layers:
        attention, ffn = layer.attention, layer.ffn
        B, N, D = h.shape
        q, k, v = (h @ attention.qkv.weight.T + attention.qkv.bias).split(D, dim=-1)
        q, k, v = (z.view(B, N, 2, D // 2).transpose(1, 2) for z in (q, k, v))
        mixed = ((q @ k.transpose(-2, -1)) / (D // 2) ** 0.5).softmax(-1) @ v
        out = mixed.transpose(1, 2).reshape(B, N, D) @ attention.proj.weight.T + attention.proj.bias
        ln1, ln2 = layer.after_attention.module, layer.after_ffn.module
        h = F.layer_norm(h + out, (D,), ln1.weight, ln1.bias, ln1.eps)
        hidden = F.gelu(h @ ffn.mlp.fc1.weight.T + ffn.mlp.fc1.bias)
        h = F.layer_norm(h + hidden @ ffn.mlp.fc2.weight.T + ffn.mlp.fc2.bias, (D,), ln2.weight, ln2.bias, ln2.eps)
    torch.testing.assert_close(backbone(x), h, rtol=1e-12, atol=1e-12)
    assert isinstance(backbone.norm, torch.nn.Identity)  # no final norm: each layer ends normalised


def test_a_bare_stepper_gets_the_layer_its_declarations_call_for():
    from odeformer import Solver

    wave, one_stage = Solver.for_stepper(solvers.VelocityVerlet), Solver.for_stepper(solvers.Euler)
    multi_stage = Solver.for_stepper(solvers.RK4)
    assert (wave.block_stepper, wave.form, wave.dt) == (Split, "laplacian", 0.5)  # the force, FFN by the chain rule
    assert (one_stage.block_stepper, one_stage.form, one_stage.dt) == (Split, "residual", 1.0)
    assert (multi_stage.block_stepper, multi_stage.form, multi_stage.dt) == (Whole, "residual", 1.0)  # both
    assert odeformer.registry.as_solver("rk4_38") == Solver.for_stepper(solvers.RK4ThreeEighths, "rk4_38")
    with pytest.raises(
        ValueError, match="unknown solver 'wave' .*; choose one of diffusion, .*, rk4_38, .*module.Class"
    ):
        odeformer.registry.as_solver("wave")


def test_tied_weights_share_every_field_and_map_but_not_the_steppers():
    model = odeformer.MaskedLM(50, 16, depth=3, dim=16, heads=2, solver="mix", norm="post", tie_weights=True)
    first, *rest = model.backbone.layers
    for layer in rest:
        assert layer.attention is first.attention and layer.ffn is first.ffn
        assert layer.after_attention is first.after_attention and layer.after_ffn is first.after_ffn
        assert layer.stepper is not first.stepper  # each layer learns its own gate
    assert first.after_attention is not first.after_ffn  # two LayerNorms per block, as untied
    with pytest.raises(ValueError, match="share one attention field, whose form is fixed"):
        ViT(depth=2, dim=16, heads=2, solver=["diffusion", "full_wave"], tie_weights=True)


@pytest.mark.parametrize(
    "schedule", [["diffusion", "heun"], ["heun", "diffusion"], ["heun", "light_wave", "rk4"]], ids="-".join
)
def test_tied_post_norm_layers_are_the_untied_ones_with_shared_weights(schedule):
    """Post-norm, tied, a schedule mixing Split and Whole layers: every layer has the maps its untied twin has (Whole:
    one after the FFN; Split: one after each sublayer), one shared module per role, and the tied backbone computes what
    the untied one does once its layers hold the tied weights."""
    depth = len(schedule)
    build = dict(norm="post", ln_mode="exact", impl="math")
    torch.manual_seed(0)
    tied = odeformer.transformer(depth, 8, 2, schedule, tie_weights=True, **build).double().eval()
    untied = odeformer.transformer(depth, 8, 2, schedule, **build).double().eval()
    with torch.no_grad():
        for p in tied.parameters():  # away from LayerNorm's identity start
            p.add_(0.2 * torch.randn_like(p))
    for role in ("after_attention", "after_ffn"):
        assert len({id(getattr(layer, role)) for layer in tied.layers if getattr(layer, role) is not None}) == 1
    for i, (a, b) in enumerate(zip(tied.layers, untied.layers)):
        for role in ("attention", "ffn", "after_attention", "after_ffn", "block_stepper"):
            source, target = getattr(a, role), getattr(b, role)
            assert (source is None) == (target is None), (
                f"layer {i} ({schedule[i]}): {role} tied {source}, untied {target}"
            )
            if target is not None:
                target.load_state_dict(source.state_dict())
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(tied(x), untied(x), rtol=1e-12, atol=1e-12)
