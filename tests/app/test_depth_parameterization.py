"""``model.parameterization=ode``: the model's step is ``T / depth``, layers with no small-step limit are refused, and
the optimiser gives each parameter its role's settings (``odeformer.parameterization``), which a resume keeps."""

import pytest
import torch

import odeformer
from helpers import cli_in_process
from odeformer.app.run.config import LoopConfig
from odeformer.app.run.optimizer import ADAM_EPS, make_optimizer
from odeformer.app.run.resume import hydra_quote

DEBUG = ["train=debug", "data=synthetic", "model.depth=4", "model.dim=16", "model.heads=2", "train.eval_batches=1"]


def _vit(**options):
    return odeformer.ViT(image_size=8, patch_size=4, num_classes=3, dim=16, heads=2, **options)


def test_under_ode_every_step_is_the_time_over_the_depth_whatever_the_depth():
    for depth in (2, 4, 8):
        model = _vit(depth=depth, solver="full_wave", parameterization="ode", time=2.0)
        assert [layer.dt for layer in model.backbone.layers] == [2.0 / depth] * depth
        assert model.backbone.layers[-1].t0 + model.backbone.layers[-1].dt == pytest.approx(2.0)
    default = _vit(depth=8, solver="full_wave", parameterization="ode").backbone.parameterization
    assert default.time == 4 * 0.5  # four of the solver's default steps: the depth-4 standard model's span
    assert _vit(depth=3, solver="diffusion", parameterization="ode").backbone.parameterization.time == 4.0
    standard = _vit(depth=4, solver="full_wave")  # today's model: its solver's step, rules that change nothing
    assert standard.backbone.parameterization.kind == "standard" and standard.backbone.layers[0].dt == 0.5


@pytest.mark.parametrize(
    "options, message",
    [
        ({"solver": "mix"}, "mix has no small-step limit"),
        ({"solver": "full_wave_official"}, "full_wave_official has no small-step limit"),
        ({"solver": "mix_bert"}, "mix_bert has no small-step limit"),
        ({"solver": "full_wave", "norm": "post"}, "full_wave has no small-step limit"),
        ({"solver": "full_wave", "dt": 0.25}, r"leave dt \(0.25\) unset and give time"),
        ({"solver": "full_wave", "time": -1.0}, "needs time=T, a positive finite number"),
        ({"solver": "full_wave", "parameterization": "mup"}, "parameterization must be one of standard, ode"),
    ],
)
def test_what_ode_refuses_is_one_line(options, message):
    options = {"parameterization": "ode", **options}
    with pytest.raises(ValueError, match=message) as info:
        _vit(depth=4, **options)
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match="applies to parameterization=ode only"):
        _vit(depth=4, solver="full_wave", time=2.0)


def test_each_parameter_has_its_role_and_its_span():
    model = _vit(depth=4, solver="light_wave", parameterization="ode", knots=2)
    roles = model.backbone.roles()
    # knots at t = 0 and 2 of [0, 4]; layers at 0, 1, 2, 3: knot 0 weighs 1 + ½, knot 1 ½ + 1 + 1 (constant after it)
    assert roles["layers.0.attention.knots.1.qkv.weight"] == ("hidden", 2.5)
    assert roles["layers.0.attention.knots.0.qkv.bias"] == ("hidden_bias", 1.5)
    assert roles["layers.0.attention.knots.0.norm.weight"] == ("field_norm", 1.5)
    assert roles["layers.0.ffn.knots.1.norm.bias"] == ("field_norm", 2.5)
    assert roles["layers.3.block_stepper.stepper.theta"] == ("scheme", 1.0)  # its limit x' = F / (1 - λ) reads it
    assert roles["norm.weight"] == ("outer_norm", 1.0)
    assert set(roles) == {name for name, _ in model.backbone.named_parameters()}
    rk = _vit(depth=2, solver="two_stage_rk", parameterization="ode").backbone.roles()
    assert rk["layers.1.block_stepper.stepper.theta"] == ("discretisation", 1.0)  # order 2 for every c₂
    tied = _vit(depth=3, solver="full_wave", tie_weights=True).backbone.roles()
    assert tied["layers.0.ffn.mlp.fc1.weight"] == ("hidden", 3.0)


def test_the_optimiser_scales_epsilon_by_the_span_and_freezes_discretisation_coefficients():
    loop = LoopConfig(lr=1e-3, weight_decay=0.05)
    model = _vit(depth=4, solver="two_stage_rk", parameterization="ode", time=2.0)
    optimizer = make_optimizer(model, loop)
    settings = {id(p): group for group in optimizer.param_groups for p in group["params"]}
    named = dict(model.named_parameters())
    qkv = settings[id(named["backbone.layers.2.attention.qkv.weight"])]
    assert qkv["eps"] == pytest.approx(ADAM_EPS * 0.5) and qkv["lr"] == 1e-3 and qkv["weight_decay"] == 0.05
    coefficient = settings[id(named["backbone.layers.2.block_stepper.stepper.theta"])]
    assert coefficient["lr"] == 0.0 and coefficient["lr_scale"] == 0.0 and coefficient["weight_decay"] == 0.0
    head = settings[id(named["head.weight"])]
    assert (head["eps"], head["lr"], head["lr_scale"]) == (ADAM_EPS, 1e-3, 1.0)
    assert sum(len(group["params"]) for group in optimizer.param_groups) == len(named)
    standard = make_optimizer(_vit(depth=4, solver="two_stage_rk"), loop)  # today's two groups, as they were
    assert [(g["weight_decay"], g["eps"], g["lr_scale"]) for g in standard.param_groups] == [
        (0.05, ADAM_EPS, 1.0),
        (0.0, ADAM_EPS, 1.0),
    ]


def test_adams_coupled_decay_is_scaled_by_the_span_too():
    loop = LoopConfig(lr=1e-3, weight_decay=0.05, optimizer="adam")
    model = _vit(depth=8, solver="full_wave", parameterization="ode", time=2.0)
    named = dict(model.named_parameters())
    settings = {id(p): group for group in make_optimizer(model, loop).param_groups for p in group["params"]}
    assert settings[id(named["backbone.layers.0.ffn.mlp.fc2.weight"])]["weight_decay"] == pytest.approx(0.05 * 0.25)
    assert settings[id(named["head.weight"])]["weight_decay"] == 0.05


def test_a_run_under_ode_trains_and_resumes_keeping_each_groups_share_of_the_rate(tmp_path):
    out = tmp_path / "run"
    overrides = [*DEBUG, "solver=two_stage_rk", "model.parameterization=ode", "model.knots=2", "model.time=2.0"]
    done = cli_in_process(*overrides, f"train.out_dir={hydra_quote(str(out))}", "train.max_steps=4")
    assert done.returncode == 0, done.stderr
    from odeformer.app.run.checkpoints import load_checkpoint

    state = load_checkpoint(out / "last.pt")["optimizer"]
    assert sorted({group["lr_scale"] for group in state["param_groups"]}) == [0.0, 1.0]
    done = cli_in_process(
        *overrides, f"train.out_dir={hydra_quote(str(out))}", "train.max_steps=8", "train.resume=true"
    )
    assert done.returncode == 0, done.stderr
    state = load_checkpoint(out / "last.pt")["optimizer"]
    frozen = [group for group in state["param_groups"] if group["lr_scale"] == 0.0]
    assert frozen and all(group["lr"] == 0.0 and group["initial_lr"] == 0.0 for group in frozen)


def test_a_lower_rate_after_a_divergence_keeps_each_groups_share():
    """A resume with a lower ``train.lr`` (after a divergence) rescales every group to its own share of the new rate:
    a frozen coefficient stays frozen, the rest take the new rate."""
    from types import SimpleNamespace

    from odeformer.app.run.trainer import Trainer

    model = _vit(depth=2, solver="two_stage_rk", parameterization="ode")
    optimizer = make_optimizer(model, LoopConfig(lr=1e-3))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.5)
    trainer = SimpleNamespace(loop=LoopConfig(lr=1e-4), optimizer=optimizer, scheduler=scheduler)
    trainer._lr_factor = lambda step: 0.5
    Trainer._rescale_lr(trainer)
    for group, base in zip(optimizer.param_groups, scheduler.base_lrs):
        assert base == pytest.approx(1e-4 * group["lr_scale"]) and group["lr"] == pytest.approx(0.5 * base)
    assert {group["lr_scale"] for group in optimizer.param_groups} == {0.0, 1.0}


@pytest.mark.parametrize(
    "override, words",
    [
        ("model.knots=9", "knots must be a whole number from 1 to depth (4), got 9"),
        ("model.time=0", "needs time=T, a positive finite number"),
        ("model.dt=0.5", "leave dt (0.5) unset and give time"),
        ("solver=mix", "mix has no small-step limit"),
    ],
)
def test_bad_ode_settings_on_the_command_line_are_one_line(tmp_path, override, words):
    done = cli_in_process(*DEBUG, "model.parameterization=ode", override, f"train.out_dir={tmp_path / 'run'}")
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1 and words in lines[0], done.stderr


def test_training_resolutions_cycle_by_step_and_are_checked_against_the_model(tmp_path, monkeypatch):
    """``train.resolutions=[1,2]``: every other training step runs the model at twice the steps (a model that must
    fit at both learns the flow, not one discretisation of it); the cycle follows the step, so a resume continues
    it; a resolution the model cannot take is one line."""
    from odeformer import atlas

    seen = []
    original = atlas.resampled

    def recorded(backbone, k):
        seen.append(k)
        return original(backbone, k)

    monkeypatch.setattr(atlas, "resampled", recorded)
    out = tmp_path / "run"
    done = cli_in_process(
        *DEBUG, "train.resolutions=[1,2]", "train.max_steps=6", f"train.out_dir={hydra_quote(str(out))}"
    )
    assert done.returncode == 0, done.stderr
    assert seen[:3] == [2, 2, 2]  # steps 1, 3 and 5 of 0..5 (evaluations take none)
    bad = {"[3.5]": "whole numbers from 1 to 64, or 1/m", "[0.3]": "whole numbers from 1 to 64, or 1/m",
           "[1,0.125]": "m dividing the depth (4)"}  # fmt: skip
    for resolutions, words in bad.items():  # checked with the command line, before anything is built or written
        done = cli_in_process(*DEBUG, f"train.resolutions={resolutions}", f"train.out_dir={tmp_path / 'x'}")
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert done.returncode == 2 and len(lines) == 1 and words in lines[0], done.stderr
        assert not (tmp_path / "x").exists()


def test_a_tableau_typed_as_coefficients_and_a_class_of_ones_own_are_parameterised_alike():
    """The rules reach any scheme: coefficients with no name (their layer by their kind) and a class of one's own,
    whose learnable parameter's role is read from its limit field (here a damping rate its limit reads)."""
    import solvers

    heun = odeformer.solver("tableau", options={"A": [[], [1]], "b": ["1/2", "1/2"]})
    model = _vit(depth=4, solver=heun, parameterization="ode", time=1.0)
    assert [layer.dt for layer in model.backbone.layers] == [0.25] * 4
    assert model.backbone.layers[0].claims().order == 2

    class Braked(solvers.SemiImplicitEuler):
        """Semi-implicit Euler with friction: v <- v + dt (a(x) - γ v), γ learnable; limit x' = v, v' = a - γ v."""

        def __init__(self):
            super().__init__()
            self.gamma = torch.nn.Parameter(torch.tensor(0.5))

        def step(self, field, t, y, dt, state):
            v = y.v + dt * (field(t, y.x) - self.gamma * y.v)
            return solvers.PhaseState(y.x + dt * v, v), state

        def limit_field(self, field):
            return lambda t, y: solvers.PhaseState(y.v, field(t, y.x) - self.gamma * y.v)

    own = _vit(depth=4, solver=Braked, parameterization="ode").backbone.roles()
    assert own["layers.2.block_stepper.stepper.gamma"] == ("scheme", 1.0)
