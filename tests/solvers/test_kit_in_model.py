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
