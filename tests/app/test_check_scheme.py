"""``train.check_scheme=true``: before the first step, every claim of the model's own steps is checked on its first
batch where the run computes it (``solvers.testing.check_in_model``); a run that passes trains as it would unchecked,
and a scheme wrong only on this model stops the run with the kit's message in one line."""

import sys
import textwrap

import pytest
import torch

from helpers import cli_in_process
from odeformer.app.run.resume import hydra_quote

DEBUG = ["train=debug", "data=synthetic", "model.depth=2", "model.dim=16", "model.heads=2", "train.eval_batches=1"]

WRONG = """
import solvers


class HeunAtWidth16(solvers.Heun):
    '''Heun that takes Euler's step on states 16 channels wide: no context the kit draws has that width.'''

    def step(self, field, t, y, dt, state):
        if y.shape[-1] == 16:
            return y + dt * field(t, y) + 0 * field(t + dt, y), state
        return super().step(field, t, y, dt, state)
"""


def _weights(out):
    from odeformer.app.run.checkpoints import load_checkpoint

    return load_checkpoint(out / "last.pt")["model"]


def test_a_checked_run_says_what_held_and_trains_as_an_unchecked_one(tmp_path):
    runs = {}
    for checked in (False, True):
        out = tmp_path / f"run_{checked}"
        done = cli_in_process(
            *DEBUG, "solver=heun", "train.max_steps=3", f"train.check_scheme={str(checked).lower()}",
            f"train.out_dir={hydra_quote(str(out))}",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        said = [line for line in done.stdout.splitlines() if line.startswith("train.check_scheme:")]
        assert len(said) == int(checked)
        runs[checked] = _weights(out)
    assert "2 of 2 steps of the model's forward pass hold their claims" in said[0] and "order" in said[0]
    for name, value in runs[False].items():  # the check restores the random state: the same masks, the same run
        assert torch.equal(value, runs[True][name]), name


@pytest.mark.parametrize("solver", ["full_wave", "velocity_verlet"])
def test_a_second_order_models_steps_are_judged_on_its_own_chain_rule(tmp_path, solver):
    """A second-order layer carries the velocity through the FFN by the model's chain rule (the paper's LayerNorm
    rule, not the exact Jacobian). The check's wrappers of the field (in the model's dtype, rounded) carry it the same
    way: they carried it by the exact Jacobian, so every step seemed to amplify rounding a millionfold, none was
    judged, and the run said its claims held."""
    out = tmp_path / "run"
    done = cli_in_process(
        *DEBUG, f"solver={solver}", "train.max_steps=1", "train.check_scheme=true",
        f"train.out_dir={hydra_quote(str(out))}",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (said,) = [line for line in done.stdout.splitlines() if line.startswith("train.check_scheme:")]
    assert "2 of 2 steps" in said and "(continuity, evaluations, gradients, one_step, order, values)" in said, said
    assert "not judged" not in said


def test_steps_outside_the_stability_region_are_said_unjudged():
    """A step that amplifies rounding more than BLOWN_UP is not judged, and the report says which ones (Euler on
    ``x' = 10⁶ (x - 1)`` from its rest point at ``dt = 0.01``: ``|1 + λ dt| = 10⁴``, so a rounding of ``x`` moves the
    step 10⁴ units)."""
    import solvers
    from solvers.testing import check_in_model

    class Stiff(torch.nn.Module):
        def __init__(self, dt):
            super().__init__()
            self.steppers, self.dt = torch.nn.ModuleList([solvers.Euler(), solvers.Euler()]), dt

        def forward(self, x):
            *_, y = solvers.iterate(list(self.steppers), [lambda t, x: 1e6 * (x - 1)] * 2, x, self.dt)
            return y.sum()

    x = torch.ones(2, 3, dtype=torch.float64)
    blown = check_in_model(Stiff(0.01), x, order=False)
    assert blown["unjudged"] == [0, 1] and blown["claims"] == {}
    calm = check_in_model(Stiff(1e-8), x, order=False)
    assert calm["unjudged"] == [] and "values" in calm["claims"]


def test_a_scheme_wrong_only_on_this_model_stops_the_run_in_one_line(tmp_path):
    (tmp_path / "width_mod.py").write_text(textwrap.dedent(WRONG))
    sys.path.insert(0, str(tmp_path))
    try:
        out = tmp_path / "run"
        done = cli_in_process(
            *DEBUG, "solver=width_mod.HeunAtWidth16", "train.check_scheme=true", "train.max_steps=3",
            f"train.out_dir={hydra_quote(str(out))}",
        )  # fmt: skip
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("width_mod", None)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 1 and len(lines) == 1, done.stderr
    assert "train.check_scheme:" in lines[0] and "(order)" in lines[0] and "declares order 2" in lines[0], lines[0]
    assert "reproduce with: solvers.testing.check_in_model(model, batch" in lines[0]
    assert not (out / "last.pt").exists()  # stopped before the first step: nothing trained


def test_a_continuous_depth_run_refuses_the_check_in_one_line(tmp_path):
    done = cli_in_process(
        *DEBUG, "solver=dopri5", "train.check_scheme=true", "train.max_steps=2", f"train.out_dir={tmp_path / 'run'}"
    )
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert "a continuous-depth solver takes none of its own" in lines[0]
