"""The kit checks a scheme on this library's own attention and FFN: ``check_contexts(..., fields=...)``."""

from typing import ClassVar

import pytest
import torch
from torch import nn

import solvers
from odeformer.fields import AttentionField, FeedForward
from solvers import AbstractStepper
from solvers.testing import check_contexts, check_stepper


class Block(nn.Module):
    """A transformer layer's field as the models build it: attention plus the FFN on the same state."""

    def __init__(self, width: int, seed: int):
        super().__init__()
        torch.manual_seed(seed)
        self.attention = AttentionField(width, heads=1, form="laplacian")
        self.ffn = FeedForward(width)

    def forward(self, t, x):
        return self.attention(t, x) + self.ffn(t, x)


def model_fields(width: int, seed: int) -> nn.Module:
    return Block(width, seed)


@pytest.mark.parametrize("name", ["Heun", "RK4", "VelocityVerlet", "LightWave", "Yoshida4"])
def test_library_schemes_step_the_same_on_the_models_own_field(name):
    check_contexts(getattr(solvers, name), fields=model_fields)


def _holds_attention(obj, depth: int = 0) -> bool:
    """Whether ``obj`` holds an ``AttentionField`` somewhere among its attributes (how a "model-aware" scheme finds
    out it is inside a transformer)."""
    if isinstance(obj, AttentionField):
        return True
    if depth > 4:
        return False
    if isinstance(obj, nn.Module) and any(isinstance(m, AttentionField) for m in obj.modules()):
        return True
    return any(_holds_attention(v, depth + 1) for v in getattr(obj, "__dict__", {}).values())


class EulerOnAttentionFields(AbstractStepper):
    """Heun everywhere but on a field that holds an ``AttentionField`` (the models' own), where it is Euler."""

    order: ClassVar[int] = 2
    second_order: ClassVar[bool] = False
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 2

    def step(self, field, t, y, dt, state):
        k1 = field(t, y)
        k2 = field(t + dt, y + dt * k1)
        if _holds_attention(field):
            return y + dt * k1, None
        return y + 0.5 * dt * (k1 + k2), None


def test_a_scheme_wrong_only_on_the_models_field_is_rejected_when_that_field_is_given():
    check_contexts(EulerOnAttentionFields)  # the kit's own fields cannot see it
    with pytest.raises(AssertionError, match=r"the field given") as caught:
        check_stepper(EulerOnAttentionFields, fields=model_fields, seed=3)
    assert "fields=<the same fields>" in str(caught.value)
