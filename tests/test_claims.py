"""Claims are declared one way, as class variables, and a layer's follow from its parts by the rule its docs state.

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
import torch
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
    for name in odeformer.solver_names():
        spec = odeformer.presets.spec_of(name)
        yield name, spec
        if spec.block_stepper is Split:
            yield f"{name}/strang", odeformer.layer_spec(name, splitting="strang")


SPECS = dict(_specs())
SHAPES = [(ffn, maps) for ffn in (True, False) for maps in (False, True)]


@pytest.mark.parametrize("name", SPECS)
def test_every_layer_claims_what_its_parts_make(name):
    spec = SPECS[name]
    dynamics = spec.build(4)
    assert Claims.of(dynamics) == _expected(dynamics, ffn=True, maps=False)  # as built: an FFN, no maps
    for ffn, maps in SHAPES:
        block = Block(_field, _field if ffn else None, (lambda x: x) if maps else None)
        assert Claims.of(dynamics.on(block)) == _expected(dynamics, ffn, maps), (ffn, maps)
        after = nn.Identity() if maps else None
        layer = Layer(spec, 4, nn.Identity(), nn.Identity() if ffn else None, after, after if ffn else None)
        assert Claims.of(layer) == _expected(layer.block_stepper, ffn, maps), (ffn, maps)


@pytest.mark.parametrize("name", SPECS)
def test_no_instance_states_a_claim_of_its_own(name):
    """One way to declare: a claim is a class variable, never an instance attribute shadowing one."""
    spec = SPECS[name]
    layer = Layer(spec, 4, nn.Identity(), nn.Identity())
    for stepper in (layer, layer.block_stepper, layer.stepper, getattr(layer.block_stepper, "ffn", layer.stepper)):
        assert not set(CLAIMS) & set(vars(stepper)), type(stepper).__name__
        assert Claims.of(stepper) == Claims.of(type(stepper))


def test_the_gated_mix_claims_what_its_parts_make():
    """One evaluation shared by its two parts; no small-step limit with a fixed diffusion step."""
    for wave, diffusion in ((solvers.SemiImplicitEuler(), solvers.Euler()), (solvers.VelocityVerlet(), solvers.RK4())):
        for diffusion_dt, order in ((None, solvers.Mix.order), (1.0, 0)):
            mix = solvers.Mix(wave, diffusion, diffusion_dt=diffusion_dt)
            assert mix.evals_per_step == wave.evals_per_step + diffusion.evals_per_step - 1
            assert mix.order == order
            assert isinstance(mix, solvers.Mix) and type(mix).__name__ == "Mix"
    assert Claims.of(solvers.Mix()) == Claims.of(solvers.Mix)  # the class claims its default parts'


def test_a_class_made_from_claims_is_made_once_and_continues_its_base():
    a, b = Split(solvers.LightWave()), Split(solvers.LightWave(), ffn_dt=1.0)
    assert type(a) is type(Split(solvers.LightWave())) and type(a) is not type(b)
    assert b.continues(a) and a.on(Block(_field)).continues(b)  # one history across layers of one kind
    assert not Whole(solvers.LightWave()).continues(a)


def test_a_made_class_is_checked_as_every_stepper_class():
    with pytest.raises(TypeError, match="declares reversible and multistep"):
        solvers.claimed_class(Split, Claims(1, True, False, True, 1, multistep=True))


def test_on_a_block_is_the_same_stepper():
    layer = Split(solvers.Damped(dim=3))
    assert layer.on(Block(_field, _field)) is layer  # the claims it was built with
    view = layer.on(Block(_field, _field, nn.Identity()))  # a map: no small-step limit
    assert view is not layer and view.stepper is layer.stepper and view.order == 0 < layer.order
    assert [p.data_ptr() for p in view.parameters()] == [p.data_ptr() for p in layer.parameters()]
    x = torch.randn(2, 3, dtype=torch.float64)
    y = solvers.PhaseState(x, torch.zeros_like(x))
    block = Block(lambda t, z: -z)
    torch.testing.assert_close(view.step(block, 0.0, y, 0.1, None)[0], layer.step(block, 0.0, y, 0.1, None)[0])
