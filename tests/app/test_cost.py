"""What a run costs: the field evaluations each solver's claims count are the ones a forward pass makes."""

from __future__ import annotations

import pytest
import torch

import odeformer
from odeformer.app.run.cost import evaluations, scheme_parameters

STRANG = [odeformer.solver(n, splitting="strang") for n in ("full_wave", "velocity_verlet", "diffusion")]


def _counted(model):
    """Count every call of each layer's attention and FFN (``forward`` and the chain rule's ``joint``)."""
    calls = {"attention": 0, "ffn": 0}
    for module in {
        id(m): m for layer in model.backbone.layers for m in (layer.attention, layer.ffn) if m is not None
    }.values():
        kind = "attention" if any(module is layer.attention for layer in model.backbone.layers) else "ffn"
        for method in ("forward", "joint"):
            original = getattr(module, method, None)
            if original is None:
                continue

            def counted(*args, _original=original, _kind=kind, **kwargs):
                calls[_kind] += 1
                return _original(*args, **kwargs)

            setattr(module, method, counted)
    return calls


@pytest.mark.parametrize(
    "solver",
    [*odeformer.solver_names("discrete"), *STRANG],
    ids=lambda s: s if isinstance(s, str) else f"{s.name}-strang",
)
@pytest.mark.parametrize("tie", [False, True])
def test_claimed_evaluations_are_the_forwards(solver, tie):
    torch.manual_seed(0)
    model = odeformer.ViT(depth=3, dim=8, heads=2, solver=solver, tie_weights=tie).eval()
    claimed = evaluations(model)
    calls = _counted(model)
    with torch.no_grad():
        model(torch.randn(2, 1, 8, 8))
    assert claimed["source"] == "claims"
    assert (sum(claimed["attention"]), sum(claimed["ffn"])) == (calls["attention"], calls["ffn"])
    assert claimed["per_token"] == calls["attention"] + calls["ffn"]


def test_a_continuous_models_evaluations_are_measured():
    model = odeformer.ViT(depth=2, dim=8, heads=2, solver="rk4_grid")
    assert evaluations(model)["per_token"] is None  # before any forward
    model(torch.randn(1, 1, 8, 8))
    nfe = model.solver_stats()["nfe"]  # every evaluation of the block is one of its attention and one of its FFN
    assert nfe >= 32 and evaluations(model) == {
        "attention": None,
        "ffn": None,
        "per_token": 2 * nfe,
        "source": "measured",
    }


def test_scheme_parameters_are_each_layers_own():
    model = odeformer.ViT(depth=2, dim=8, heads=2, solver="damped")
    found = scheme_parameters(model)
    assert len(found) == 2 and all(list(layer) == ["stepper.rho"] and len(layer["stepper.rho"]) == 8 for layer in found)
    assert scheme_parameters(odeformer.ViT(depth=2, dim=8, heads=2, solver="rk4")) is None


def test_a_runs_summary_records_its_cost_and_its_schemes_parameters(tmp_path):
    import json

    from helpers import cli

    out = tmp_path / "run"
    done = cli("solver=damped", "solver.splitting=strang", "train=debug", "data=synthetic", "model.depth=2",
               f"train.out_dir={out}")  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["splitting"] == "strang" and summary["params"] > 0
    assert summary["evaluations"] == {"attention": [1, 1], "ffn": [4, 4], "per_token": 10, "source": "claims"}
    assert [list(layer) for layer in summary["scheme_parameters"]] == [["stepper.rho"]] * 2
