"""``odeformer-compare``'s controls: baselines matched to a scheme's parameter count (counted on models built without
weights), each row at its own best learning rate from a small grid (carried across depth under ``ode`` only), and a
line per row saying whether its difference from the reference exceeds the spread of the seeds."""

from __future__ import annotations

import pytest

from odeformer.app.commands.train import compose_config
from odeformer.app.run.builder import build, parameter_count

TINY = ["train=debug", "train.max_steps=2", "model.depth=2", "data=synthetic", "model.dim=16", "model.heads=2"]


# -- the parameter count, without training ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides",
    [
        ["solver=light_wave", *TINY],
        ["solver=full_wave", "model.mlp_hidden=7", *TINY],
        ["solver=rk4", "model.parameterization=ode", "model.knots=1", *TINY],
        ["solver=mix", "model.tie_weights=true", *TINY],
        ["solver=dopri5", *TINY],
        ["model=causal_lm", "data=synthetic", "data.options.task=text", "model.depth=1", "model.dim=16"],
        ["model=node_classifier", "data=synthetic", "data.options.task=graph", "solver=light_wave", "model.dim=8"],
    ],
)
def test_the_parameter_count_is_the_built_models_without_its_weights(overrides):
    config = compose_config(overrides)
    _, model, _ = build(config)
    assert parameter_count(config) == sum(p.numel() for p in model.parameters())
    _, empty, _ = build(config, device="meta")
    assert {p.device.type for p in empty.parameters()} == {"meta"}  # nothing allocated
