"""A layer is what a model runs: a block stepper gets every check a stepper gets, on blocks of attention and an FFN
(several tokens, width 8 among them), with autograd on, in every context. Three wrong layers that passed the layer
check alone are rejected, each naming the claim, with the line that draws the same instances again; the library's
layers pass."""

import pytest
import torch

import solvers
from solvers.testing import check_stepper
from solvers.testing.thresholds import EXAMPLES


class LieFromWidth8(solvers.Split):
    """A Strang layer that takes the FFN's whole step after the attention (Lie) on states 8 channels wide or more
    ("wide layers are smooth enough"): order 1 there, declaring Strang's 2."""

    def step(self, field, t, y, dt, state):
        x = y.x if isinstance(y, solvers.PhaseState) else y
        if x.shape[-1] >= 8 and field.ffn is not None:
            y, state = self._attention_step(field, t, y, dt, state)
            return self._ffn_step(field.ffn, t, y, dt), state
        return super().step(field, t, y, dt, state)


class FiveLooksWithGrad(solvers.Whole):
    """A whole-block RK4 layer that evaluates the attention once more when autograd is on ("to warm its cache"):
    five evaluations in training, declaring four."""

    def step(self, field, t, y, dt, state):
        if torch.is_grad_enabled():
            field.attention(t, y)
        return super().step(field, t, y, dt, state)


class _FrozenFFN:
    """The block's summed field with the FFN evaluated once, at the step's start, and reused by every stage."""

    def __init__(self, attention, ffn, t, x):
        self.attention, self.frozen = attention, ffn(t, x)

    def __call__(self, t, x):
        return self.attention(t, x) + self.frozen


class FrozenFFNBeyond4Tokens(solvers.Whole):
    """A whole-block RK4 layer that freezes the FFN across its stages beyond 4 tokens ("the FFN is per token:
    cheap to skip"): order 1 there, declaring 4."""

    def step(self, field, t, y, dt, state):
        if field.ffn is not None and y.dim() >= 3 and y.shape[-2] > 4:
            return self.stepper.step(_FrozenFFN(field.attention, field.ffn, t, y), t, y, dt, state)
        return super().step(field, t, y, dt, state)


@pytest.mark.parametrize(
    "layer, claim",
    [
        (lambda: LieFromWidth8(solvers.Heun(), splitting="strang"), r"the FFN 2 times .* the FFN 4 times in the ref"),
        (lambda: FiveLooksWithGrad(solvers.RK4()), r"evaluated the attention 5 times .* with autograd on"),
        (lambda: FrozenFFNBeyond4Tokens(solvers.RK4()), r"evaluated the attention 4 times and the FFN 1 times"),
    ],
)
def test_a_wrong_layer_is_rejected_naming_the_claim(layer, claim):
    with pytest.raises(AssertionError, match=claim) as caught:
        check_stepper(layer(), seed=3)
    assert "seed 3; reproduce with: check_stepper(" in str(caught.value)


@pytest.mark.parametrize(
    "layer, claim",
    [
        (lambda: LieFromWidth8(solvers.Heun(), splitting="strang"), r"declares layer order 2|declares order 2"),
        (lambda: FrozenFFNBeyond4Tokens(solvers.RK4()), r"declares order 4"),
    ],
)
def test_the_order_is_measured_on_a_block_of_several_tokens_at_width_8(layer, claim):
    """Each fake passes the layer check's own order (3 tokens of width 2) and fails on the wider block."""
    from solvers.testing import check_layer, check_order

    check_layer(layer(), examples=0)
    with pytest.raises(AssertionError, match=claim + r" but its error falls like dt\^1.* 6 tokens, dim=8"):
        check_order(layer(), examples=0)


def test_the_librarys_layers_pass_every_check():
    """Full Wave's layer here, every fixed problem and context and half the default draws; the slow suite's
    tests/solvers/test_kit_false_alarms.py runs every check at its defaults on it and on the others (a Strang splitting
    of Heun, a whole RK4 step, Light Wave, reversible and Verlet force layers)."""
    report = check_stepper(solvers.Split(solvers.SemiImplicitEuler()), seed=4, examples=EXAMPLES // 2)
    assert {"protocol", "contexts", "precision", "order", "layer"} <= set(report)


class _OwnLayer(solvers.AbstractStepper, abstract=True):
    """A block stepper of one's own, not built on ``Split`` or ``Whole``: it declares that it steps on a
    ``solvers.Block`` and reads the block's attention and FFN itself."""

    second_order = False
    symplectic = False
    reversible = False
    steps_on_blocks = True

    def limit_field(self, field):
        return lambda t, x: field.attention(t, x) + (field.ffn(t, x) if field.ffn is not None else 0.0)


class MidpointBothHalves(_OwnLayer):
    """The explicit midpoint rule on the block's summed field, written against the block: order 2, two attention
    evaluations a step."""

    order = 2
    evals_per_step = 2

    def step(self, field, t, y, dt, state):
        def summed(s, x):
            return field.attention(s, x) + (field.ffn(s, x) if field.ffn is not None else 0.0)

        middle = solvers.axpy(y, 0.5 * dt, summed(t, y))
        return solvers.axpy(y, dt, summed(t + 0.5 * dt, middle)), state


class FFNFirstLie(_OwnLayer):
    """The FFN's Euler step, then the attention's, declaring order 2: a Lie splitting is order 1."""

    order = 2
    evals_per_step = 1

    def step(self, field, t, y, dt, state):
        x = solvers.axpy(y, dt, field.ffn(t, y)) if field.ffn is not None else y
        return solvers.axpy(x, dt, field.attention(t, x)), state


def test_a_block_stepper_of_ones_own_is_checked_on_blocks():
    """``steps_on_blocks = True`` is what makes a class of one's own a layer for the kit (not subclassing the
    library's): a right one passes every check on blocks, a wrong one is rejected by its order there."""
    report = check_stepper(MidpointBothHalves(), examples=4, seed=5)
    assert abs(report["order"][0] - 2) < 0.3 and report["layer"]["declared"] == 2
    with pytest.raises(AssertionError, match=r"FFNFirstLie.*order 2 but its error falls like dt\^1\.0"):
        check_stepper(FFNFirstLie(), examples=4, seed=5)


def test_a_model_refuses_a_block_stepper_of_ones_own_in_one_line():
    """A model's layers are made from a scheme on one field: a class stepping on blocks is the kit's to check, and a
    model asked to train with it says so (rather than failing inside its first step)."""
    import odeformer

    with pytest.raises(ValueError, match=r"^MidpointBothHalves steps on a solvers.Block \(steps_on_blocks\)"):
        odeformer.Solver.for_stepper(MidpointBothHalves)


class FFNFrozenInTime(solvers.Split):
    """A Strang layer that evaluates the FFN at the step's start time in every stage (the FFN "has no time"): right
    while the FFN is autonomous, order 1 where it depends on depth-time, as a model's does under ``ode`` with knots."""

    def step(self, field, t, y, dt, state):
        if field.ffn is not None:
            field = field._replace(ffn=lambda s, x, f=field.ffn, start=t: f(start, x))
        return super().step(field, t, y, dt, state)


def test_a_layer_that_evaluates_the_ffn_at_the_wrong_time_is_rejected():
    """The kit's timed blocks modulate the FFN in time as well as the attention."""
    from solvers.testing import check_order

    with pytest.raises(AssertionError, match=r"order 2 but its error falls like dt\^1\.0.* phase=0\.7"):
        check_order(FFNFrozenInTime(solvers.Heun(), splitting="strang"), examples=0)
    check_order(solvers.Split(solvers.Heun(), splitting="strang"), examples=0)


class _FFNWithItsOwnChainRule(torch.nn.Module):
    """A user's FFN ``tanh(x W)`` that carries a velocity by a rule of its own, ``v W`` (not its exact Jacobian), as
    a model's FFN carries it through LayerNorm by the paper's rule; it counts how often the rule is used."""

    used = 0

    def __init__(self, width: int, seed: int):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.w = torch.nn.Parameter(torch.randn(width, width, generator=g, dtype=torch.float64) / width**0.5)

    def forward(self, t, x):
        return torch.tanh(x @ self.w.to(x.dtype))

    def joint_at(self, t, x, v):
        type(self).used += 1
        return self.forward(t, x), v @ self.w.to(x.dtype)


def _block_with_own_rule(width: int, seed: int):
    from solvers.testing.contexts import AttentionFFN

    return solvers.Block(AttentionFFN(width, seed).attention, _FFNWithItsOwnChainRule(width, seed))


class ExactJacobianBelowFloat64(solvers.Split):
    """A Full Wave layer that, below float64, carries the velocity through the FFN by forward-mode AD instead of the
    field's own chain rule ("the rule is for float64 training"): another step in float32 wherever a field has a rule
    of its own."""

    def step(self, field, t, y, dt, state):
        if isinstance(y, solvers.PhaseState) and y.x.dtype != torch.float64 and field.ffn is not None:
            ffn = field.ffn
            field = field._replace(ffn=lambda s, x: ffn(s, x))  # a plain function: its rule dropped
        return super().step(field, t, y, dt, state)


def test_a_given_fields_own_chain_rule_carries_the_velocity_in_every_context():
    """``check_contexts(..., fields=)`` steps a split layer over the user's fields as the model does: the FFN's own
    chain rule carries the velocity in every context (the kit's wrappers of a field, counted, shifted, scaled, tiled,
    carry it by the field they wrap). A layer that drops the rule in float32 is rejected; Full Wave's passes."""
    from solvers.testing import check_contexts

    _FFNWithItsOwnChainRule.used = 0
    check_contexts(solvers.Split(solvers.SemiImplicitEuler()), examples=1, fields=_block_with_own_rule)
    assert _FFNWithItsOwnChainRule.used > 0
    with pytest.raises(AssertionError, match="another path"):
        check_contexts(ExactJacobianBelowFloat64(solvers.SemiImplicitEuler()), examples=1, fields=_block_with_own_rule)
