"""``check_in_model``: every claim of every step a model's depth loop takes, on its real fields and states, against
the same computation in float64 on deep copies. The model here is a small transformer of its own whose layers are
driven through ``solvers.iterate`` (the kit imports no model package); the library's block steppers pass on it, in
float32 and under bf16 autocast, and schemes that are wrong only on this model's states or fields are rejected."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import solvers
from solvers import Block, PhaseState
from solvers.testing import check_in_model


class Attention(nn.Module):
    """Softmax self-attention on LayerNorm'd tokens, ``Attn(LN x) - x`` (a Laplacian-like force)."""

    def __init__(self, width: int):
        super().__init__()
        self.qkv = nn.Linear(width, 3 * width)

    def forward(self, t, x):
        q, k, v = self.qkv(F.layer_norm(x, x.shape[-1:])).chunk(3, dim=-1)
        return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(x.shape[-1]), dim=-1) @ v - x


class FFN(nn.Module):
    """A GELU MLP with dropout (training draws masks: the check replays them)."""

    def __init__(self, width: int, dropout: float):
        super().__init__()
        self.up, self.down, self.drop = nn.Linear(width, 2 * width), nn.Linear(2 * width, width), nn.Dropout(dropout)

    def forward(self, t, x):
        return self.drop(self.down(F.gelu(self.up(F.layer_norm(x, x.shape[-1:])))))


class Tiny(nn.Module):
    """Embedding, ``len(steppers)`` layers (attention and FFN as a ``solvers.Block`` each, stepped by the given block
    steppers through ``solvers.iterate``), a head on the mean token."""

    def __init__(self, steppers, width: int = 24, dt: float = 0.5, dropout: float = 0.1):
        super().__init__()
        self.embed, self.head = nn.Linear(4, width), nn.Linear(width, 2)
        self.attention = nn.ModuleList(Attention(width) for _ in steppers)
        self.ffn = nn.ModuleList(FFN(width, dropout) for _ in steppers)
        self.steppers = nn.ModuleList(steppers)
        self.dt = dt

    def forward(self, x):
        y = self.embed(x)  # (B, N, D)
        fields = [Block(a, f) for a, f in zip(self.attention, self.ffn)]
        if self.steppers[0].second_order:
            y = PhaseState(y, torch.zeros_like(y))
        *_, y = solvers.iterate(list(self.steppers), fields, y, self.dt, 0.0)
        return self.head((y.x if isinstance(y, PhaseState) else y).mean(1))


def _batch():
    return torch.randn(3, 5, 4, generator=torch.Generator().manual_seed(0))


LAYERS = {
    "full wave": lambda: [solvers.Split(solvers.SemiImplicitEuler()) for _ in range(3)],
    "rk4 whole": lambda: [solvers.Whole(solvers.RK4()) for _ in range(2)],
    "strang heun": lambda: [solvers.Split(solvers.Heun(), splitting="strang") for _ in range(2)],
    "light wave": lambda: [solvers.Split(solvers.LightWave(dim=24)) for _ in range(3)],
    "reversible": lambda: [
        solvers.Split(solvers.SemiImplicitEuler(), ffn=solvers.SemiImplicitEuler()) for _ in range(2)
    ],
}


@pytest.mark.parametrize("layers", sorted(LAYERS))
def test_the_librarys_layers_pass_in_a_model_of_their_own(layers):
    torch.manual_seed(1)
    report = check_in_model(Tiny(LAYERS[layers]()), _batch())
    assert report["steps"] == len(LAYERS[layers]())
    assert {"values", "gradients", "evaluations"} <= set(report["claims"])


def test_a_model_under_bf16_autocast_is_checked_in_those_modes():
    torch.manual_seed(2)
    model = Tiny([solvers.Whole(solvers.Heun()) for _ in range(2)])

    def forward(m, batch):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return m(batch)

    report = check_in_model(model, _batch(), forward=forward, order=False)
    assert report["steps"] == 2


class EulerAtWidth24(solvers.Heun):
    """Heun that takes Euler's step on states 24 channels wide ("the model's width: the field is smooth there"):
    width 24 is drawn by no check of the kit's own, so only the model shows it."""

    def step(self, field, t, y, dt, state):
        if y.shape[-1] == 24:
            return y + dt * field(t, y) + 0 * field(t + dt, y), state
        return super().step(field, t, y, dt, state)


class DoublesFFNInTraining(solvers.Whole):
    """A layer that looks at the attention once more when its module is in training mode (a "warm-up" look)."""

    def step(self, field, t, y, dt, state):
        if isinstance(field.attention, nn.Module) and field.attention.training and torch.is_grad_enabled():
            field.attention(t, y)
        return super().step(field, t, y, dt, state)


class Float32WeightsShortcut(solvers.Whole):
    """A layer that, on a field whose weights are float32 (the model's), drops the last quarter of its step ("the
    rest is below float32 anyway"): right on every field the kit makes, which are float64."""

    def step(self, field, t, y, dt, state):
        y1, state = super().step(field, t, y, dt, state)
        weights = [p for p in field.attention.parameters()] if isinstance(field.attention, nn.Module) else []
        if weights and weights[0].dtype == torch.float32:
            return y + 0.75 * (y1 - y), state
        return y1, state


@pytest.mark.parametrize(
    "layer, claim",
    [
        (lambda: EulerAtWidth24(), r"\(order\): declares order 2.*falls like dt\^2"),
        (lambda: DoublesFFNInTraining(solvers.RK4()), r"\(evaluations\): declares evals_per_step = 4 .* 5 times"),
        (lambda: Float32WeightsShortcut(solvers.RK4()), r"\(values\): the step the model took differs"),
    ],
)
def test_a_scheme_wrong_only_on_this_models_states_or_fields_is_rejected(layer, claim):
    torch.manual_seed(3)
    made = [layer() for _ in range(2)]
    made = [m if isinstance(m, solvers.Whole) else solvers.Whole(m) for m in made]
    with pytest.raises(AssertionError, match=claim) as caught:
        check_in_model(Tiny(made), _batch())
    assert "reproduce with: solvers.testing.check_in_model(model, batch" in str(caught.value)


def test_a_model_whose_depth_loop_is_not_iterate_is_told_so():
    model = nn.Sequential(nn.Linear(4, 4))
    with pytest.raises(AssertionError, match="took no step through solvers.iterate"):
        check_in_model(model, torch.ones(2, 4))


class EulerAtTheModelsStep(solvers.Heun):
    """Heun that takes Euler's step at exactly this model's ``dt = 0.5`` (its evaluations still made): the in-model
    order check refines the step from ``dt / 2`` on and never sees it."""

    def step(self, field, t, y, dt, state):
        if float(dt) == 0.5:
            return y + dt * field(t, y) + 0 * field(t + dt, y), state
        return super().step(field, t, y, dt, state)


def test_a_scheme_wrong_only_at_the_models_own_step_is_rejected_there():
    torch.manual_seed(4)
    with pytest.raises(AssertionError, match=r"\(continuity\): the step at the model's own dt = 0.5 is not the limit"):
        check_in_model(Tiny([solvers.Whole(EulerAtTheModelsStep()) for _ in range(2)]), _batch())
    report = check_in_model(Tiny([solvers.Whole(solvers.Heun()) for _ in range(2)]), _batch())
    assert report["claims"]["continuity"] <= 1e-12


def _own(label):
    import test_kit_false_alarms as schemes  # the correct schemes of users' kinds the kit must accept

    return getattr(schemes, label)


@pytest.mark.parametrize("layer", ["Whole", "Split"])
def test_a_friction_singular_at_the_models_start_is_judged_after_it_and_its_first_step_said_unresolved(layer):
    """Nesterov's ``3 / t`` states ``time_domain = (0, inf)``: a model steps it from ``t = 0`` (its step is finite
    there), where its limit has no flow to compare with. The in-model order check leaves that step out and says so;
    the layer states what its scheme states (it raised ZeroDivisionError from the order's reference before)."""
    torch.manual_seed(1)
    wrap = getattr(solvers, layer)
    report = check_in_model(Tiny([wrap(_own("Nesterov")()) for _ in range(2)]), _batch())
    assert list(report["order_unresolved"]) == [0]
    assert "time_domain (0.0, inf)" in report["order_unresolved"][0]
    declared = 2 if layer == "Whole" else 1  # a Lie split with an Euler FFN sub-step: first order
    assert report["claims"]["order"] >= declared + 1 - 0.3  # the second layer's step, from t = 0.5, is judged


def test_a_singular_time_the_scheme_does_not_state_is_named_by_the_in_model_order_check():
    class Unstated(_own("Nesterov")):
        time_domain = None

    torch.manual_seed(1)
    with pytest.raises(AssertionError, match=r"\(order\): its limit field is not finite at t = 0, a singular time"):
        check_in_model(Tiny([solvers.Whole(Unstated()) for _ in range(2)]), _batch())


@pytest.mark.parametrize("label", ["KahanLi8", "Yoshida8"])
def test_an_eighth_order_layer_passes_the_in_model_order_check_or_is_said_unresolved(label):
    """The order's reference (RK4 on the limit, extrapolated) has an error falling like dt⁶: an eighth-order step's
    error met it at the sizes above rounding, and the slope read there (6.3 for KahanLi8) failed a correct scheme."""
    torch.manual_seed(1)
    report = check_in_model(Tiny([solvers.Whole(_own(label)()) for _ in range(2)]), _batch())
    judged = [i for i in range(report["steps"]) if i not in report["order_unresolved"]]
    assert "order" not in report["claims"] or report["claims"]["order"] >= 9 - 0.3
    assert judged or all("below what float64" in why for why in report["order_unresolved"].values())


def test_a_layer_states_what_its_schemes_state_of_themselves():
    """Time domain (shared where both schemes state one), time and scale invariance: a layer is defined where its
    schemes are, and reads the time or the size where one of them does."""

    class SizeReading(solvers.VelocityVerlet):
        scale_invariant = False

    nesterov, geometric, sized = _own("Nesterov")(), _own("GeometricTimeVerlet")(), SizeReading()
    assert solvers.Whole(nesterov).time_domain == (0.0, math.inf)
    assert solvers.Split(solvers.VelocityVerlet()).time_domain is None
    short = _own("ShortLivedVerlet")()
    assert solvers.Split(nesterov, ffn=short).time_domain == (1.0, 4.0)
    assert solvers.Split(solvers.VelocityVerlet(), ffn=short).time_domain == (1.0, 4.0)
    assert not solvers.Split(geometric).time_invariant and solvers.Split(geometric).scale_invariant
    assert not solvers.Whole(sized).scale_invariant and solvers.Whole(sized).time_invariant
    assert not solvers.Split(solvers.VelocityVerlet(), ffn=sized).scale_invariant
    assert solvers.Split(solvers.VelocityVerlet(), ffn=solvers.VelocityVerlet()).time_invariant
