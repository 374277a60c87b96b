"""Fields with trainable weights: a step's gradient with respect to the weights of the field it steps, and to the
scheme's own parameters in float32, is a claim. Fakes whose values (and state gradient) are right but whose weight
gradient is not, or whose learnable coefficient loses its gradient in float32 only, are rejected naming the claim; a
field given by the user (``fields=``) has its weights checked too."""

from typing import ClassVar

import pytest
import torch
from torch import nn

import solvers
from solvers import AbstractStepper
from solvers.testing import check_contexts, check_gradients, check_stepper
from solvers.testing.contexts import AttentionFFN


class DetachedWeightsHeun(AbstractStepper):
    """Heun whose second stage evaluates the field with its weights detached ("saves the weights' activations"): the
    same values and the same gradient with respect to the state, but the weights see only the first stage."""

    order: ClassVar[int] = 2
    second_order: ClassVar[bool] = False
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 2

    def step(self, field, t, y, dt, state):
        k1 = field(t, y)
        ybar = y + dt * k1
        if isinstance(field, nn.Module):
            frozen = {n: p.detach() for n, p in field.named_parameters()}
            k2 = torch.func.functional_call(field, frozen, (t + dt, ybar))
        else:
            k2 = field(t + dt, ybar)
        return y + 0.5 * dt * (k1 + k2), state


class _Float32Alpha(solvers.TwoStageRK):
    """The learnable two-stage family whose ``α`` is read another way in float32 ("mixed precision"): its values are
    the same, its gradient is not."""

    def read(self, alpha):
        raise NotImplementedError

    def step(self, field, t, y, dt, state):
        x = self._unpack(y)
        a = self.LOW + (self.HIGH - self.LOW) * torch.sigmoid(self.theta.to(x.dtype))
        if x.dtype == torch.float32:
            a = self.read(a)
        k1 = field(t, x)
        k2 = field(t + a.double() * dt, x + (a * dt) * k1)
        return x + dt * (k1 + (0.5 / a) * (k2 - k1)), state


class Float32DetachedAlpha(_Float32Alpha):
    def read(self, alpha):  # no gradient reaches theta in float32
        return alpha.detach()


class Float32HalfAlpha(_Float32Alpha):
    def read(self, alpha):  # half the gradient reaches theta in float32
        return 0.5 * (alpha + alpha.detach())


def test_a_stage_that_drops_the_fields_weights_graph_is_rejected_by_the_gradient_check():
    with pytest.raises(AssertionError, match=r"along a random direction of y and of the field's trainable weights"):
        check_gradients(DetachedWeightsHeun, examples=4)


def test_a_stage_that_drops_the_fields_weights_graph_is_rejected_by_check_stepper_with_its_reproduction():
    with pytest.raises(AssertionError) as caught:
        check_stepper(DetachedWeightsHeun, examples=2, seed=5)
    message = str(caught.value)
    assert "the gradient of its step with respect to the field's weights differs" in message
    assert "reproduce with: check_stepper(" in message


@pytest.mark.parametrize("fake", [Float32DetachedAlpha, Float32HalfAlpha])
def test_a_coefficient_whose_float32_gradient_is_lost_or_halved_is_rejected(fake):
    check_gradients(fake, examples=2)  # float64: right
    with pytest.raises(AssertionError, match=r"gradient of its step with respect to its own parameters differs"):
        check_contexts(fake, examples=0)


class ScaledAttention(nn.Module):
    """A user's field for states ``(batch, tokens, width)``: the kit's attention and FFN with a learnable gain."""

    def __init__(self, width: int, seed: int):
        super().__init__()
        self.net = AttentionFFN(width, seed)
        self.gain = nn.Parameter(torch.tensor(0.9, dtype=torch.float64))

    def forward(self, t, x):
        return self.gain * self.net(t, x)


def test_a_given_fields_weights_are_checked_and_the_right_schemes_pass_on_them():
    for scheme in (solvers.RK4, solvers.TwoStageRK, solvers.VelocityVerlet):
        check_contexts(scheme, examples=2, fields=ScaledAttention)
    with pytest.raises(AssertionError, match=r"with respect to the field's weights differs"):
        check_contexts(DetachedWeightsHeun, examples=0, fields=ScaledAttention)
