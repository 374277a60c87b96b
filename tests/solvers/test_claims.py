"""Claims are values (``stepper.claims()``), and a layer's follow from its parts by the rule its docs state.

The rule, stated here on its own (``solvers/_splitting.py``'s module doc): a ``Whole`` layer keeps its stepper's order
unless a map follows a sublayer (then 0, no small-step limit) and is neither symplectic nor reversible; a ``Split``
layer has order 0 with a map, with a stepper of order 0 or with a fixed FFN step, its stepper's order without an FFN,
and otherwise ``min(1, stepper, ffn)`` under Lie and ``min(2, stepper, ffn)`` under Strang (1 for a multistep
stepper, whose history the FFN's half steps break); it is symplectic when its stepper is and the FFN is a symplectic
force, reversible when its stepper is, the FFN is a reversible force and no map follows. Either layer reuses an
evaluation (fsal) only where its stepper does and nothing acts between two steps (no FFN, no map), and counts its
stepper's evaluations, start-up and history.
"""

from __future__ import annotations

import pytest
from torch import nn

import odeformer
import solvers
from odeformer.layer import Layer
from solvers import CLAIMS, Block, Claims, Split, Whole


def _field(t, x):
    return x


def _expected(layer: solvers.AbstractStepper, ffn: bool, maps: bool) -> Claims:
    stepper = layer.stepper
    common = dict(
        second_order=stepper.second_order,
        evals_per_step=stepper.evals_per_step,
        multistep=stepper.multistep,
        startup_evals=tuple(stepper.startup_evals),
        fsal=stepper.fsal and not ffn and not maps,
    )
    if isinstance(layer, Whole):
        return Claims(order=0 if maps else stepper.order, symplectic=False, reversible=False, **common)
    scheme = layer.ffn
    if maps or stepper.order == 0:
        order = 0
    elif not ffn:
        order = stepper.order
    elif layer.ffn_dt is not None:
        order = 0
    elif layer.splitting == "lie":
        order = min(1, stepper.order, scheme.order)
    else:
        order = min(1 if stepper.multistep else 2, stepper.order, scheme.order)
    force = scheme.second_order
    return Claims(
        order=order,
        symplectic=stepper.symplectic and force and scheme.symplectic,
        reversible=stepper.reversible and force and scheme.reversible and not maps,
        **common,
    )


def _specs():
    for name in odeformer.solver_names("discrete"):
        spec = odeformer.registry.as_solver(name)
        yield name, spec
        if spec.block_stepper is Split:
            yield f"{name}/strang", odeformer.solver(name, splitting="strang")


SPECS = dict(_specs())
SHAPES = [(ffn, maps) for ffn in (True, False) for maps in (False, True)]


@pytest.mark.parametrize("name", SPECS)
def test_every_layer_claims_what_its_parts_make(name):
    spec = SPECS[name]
    dynamics = spec.build(4)
    assert dynamics.claims() == _expected(dynamics, ffn=True, maps=False)  # its usual block: an FFN, no maps
    for ffn, maps in SHAPES:
        block = Block(_field, _field if ffn else None, (lambda x: x) if maps else None)
        assert dynamics.claims(block) == _expected(dynamics, ffn, maps), (ffn, maps)
        after = nn.Identity() if maps else None
        layer = Layer(spec, 4, nn.Identity(), nn.Identity() if ffn else None, after, after if ffn else None)
        assert layer.claims() == _expected(layer.block_stepper, ffn, maps), (ffn, maps)


@pytest.mark.parametrize("name", SPECS)
def test_a_stepper_is_an_instance_of_the_class_it_was_constructed_as(name):
    """No class is made at run time and no instance states a claim of its own: ``type(x)`` is the class built, a
    claim read off an instance is its ``claims()`` value, and a claim the class declares is that value."""
    spec = SPECS[name]
    layer = Layer(spec, 4, nn.Identity(), nn.Identity())
    assert type(layer) is Layer and type(layer.block_stepper) is spec.block_stepper
    assert type(layer.stepper) is spec.stepper
    for stepper in (layer.block_stepper, layer.stepper, getattr(layer.block_stepper, "ffn", layer.stepper)):
        assert not set(CLAIMS) & set(vars(stepper)), type(stepper).__name__
        claims = stepper.claims()
        assert all(getattr(stepper, name) == getattr(claims, name) for name in CLAIMS)
        with pytest.raises(AttributeError):
            claims.order = 5  # a value: frozen


def test_the_gated_mix_claims_what_its_parts_make():
    """One evaluation shared by its two parts; no small-step limit with a fixed diffusion step."""
    for wave, diffusion in ((solvers.SemiImplicitEuler(), solvers.Euler()), (solvers.VelocityVerlet(), solvers.RK4())):
        for diffusion_dt, order in ((None, 1), (1.0, 0)):
            mix = solvers.Mix(wave, diffusion, diffusion_dt=diffusion_dt)
            assert mix.evals_per_step == wave.evals_per_step + diffusion.evals_per_step - 1
            assert mix.order == mix.claims().order == order
            assert type(mix) is solvers.Mix
    assert Claims.of(solvers.Mix()) == Claims.of(solvers.Mix)  # the class claims what its default parts make


def test_a_claim_a_subclass_states_is_kept_over_the_computed_one():
    """A subclass written to claim something else keeps its claim, so the kit proves or refutes it."""

    class ClaimsSecondOrder(solvers.Mix):
        order = 2

    class OneEvaluation(Split):
        evals_per_step = 1

    assert ClaimsSecondOrder().claims().order == 2 == ClaimsSecondOrder().order
    layer = OneEvaluation(solvers.RK4())
    assert layer.claims().evals_per_step == 1 and layer.claims(Block(_field)).evals_per_step == 1


def test_layers_of_one_kind_continue_one_history():
    a, b = Split(solvers.LightWave()), Split(solvers.LightWave(), ffn_dt=1.0)
    assert type(a) is type(b) and b.continues(a) and a.continues(b)  # one history across layers of one kind
    assert not Whole(solvers.LightWave()).continues(a)


def test_claims_on_a_block_are_the_same_steppers_claims_there():
    layer = Split(solvers.Damped(dim=3))
    assert layer.claims(Block(_field, _field)) == layer.claims()  # its usual block
    mapped = layer.claims(Block(_field, _field, nn.Identity()))  # a map: no small-step limit
    assert mapped.order == 0 < layer.order
    with pytest.raises(TypeError, match="steps on a solvers.Block"):
        layer.claims(_field)
