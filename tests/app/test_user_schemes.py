"""A scheme of the user's in a solver config (``solver=module.Class``): which layer it gets, which options reach
it, and the errors for classes that cannot be one."""

import importlib
import sys
import textwrap

import pytest

import odeformer
from odeformer.registry import solver

SCHEMES = '''
from typing import ClassVar

import torch
from solvers import AbstractStepper, PhaseState, SemiImplicitEuler


class Family(AbstractStepper, abstract=True):
    second_order: ClassVar[bool] = False


class ThetaGate(AbstractStepper):
    """x + dt * sigmoid(theta) * f: takes theta0 as light_wave does, with another default."""

    order: ClassVar[int] = 1
    second_order: ClassVar[bool] = False
    symplectic: ClassVar[bool] = False
    reversible: ClassVar[bool] = False
    evals_per_step: ClassVar[int] = 1

    def __init__(self, theta0: float = 3.0):
        super().__init__()
        self.theta0 = theta0

    def step(self, field, t, y, dt, state):
        return y + dt * torch.sigmoid(torch.tensor(self.theta0)) * field(t, y), state


class Kick(SemiImplicitEuler):
    """A second-order, reversible scheme without constructor options."""
'''


@pytest.fixture
def schemes(tmp_path, monkeypatch):
    (tmp_path / "user_schemes_mod.py").write_text(textwrap.dedent(SCHEMES))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "user_schemes_mod"
    sys.modules.pop("user_schemes_mod", None)


def test_options_the_class_takes_reach_it(schemes):
    """A class of one's own gets the options given (``solver.options``), and starts from its own defaults where none
    is given; a dotted path and the class itself are the same solver."""
    made = solver(f"{schemes}.ThetaGate", options={"theta0": -2.0})
    assert made.build(4).stepper.theta0 == -2.0
    assert solver(f"{schemes}.ThetaGate").build(4).stepper.theta0 == 3.0
    cls = importlib.import_module(schemes).ThetaGate
    assert solver(cls, options={"theta0": 0.5}).build(4).stepper.theta0 == 0.5
    assert solver(cls) == solver(f"{schemes}.ThetaGate")


def test_dim_is_the_models_width_not_a_scheme_option(schemes):
    with pytest.raises(ValueError, match=r"dim is not a scheme option of ThetaGate: .* \(model.dim\)"):
        solver(f"{schemes}.ThetaGate", options={"dim": 3})
    with pytest.raises(ValueError, match="<class 'int'> is not a solvers.AbstractStepper subclass"):
        solver(int)


def test_a_class_gets_the_layer_its_claims_call_for_with_the_changes_asked(schemes):
    derived = solver(f"{schemes}.Kick")  # second order: the laplacian force, step 0.5, the FFN by the chain rule
    assert (derived.form, derived.dt, derived.memory, derived.ffn_dt) == ("laplacian", 0.5, "store", None)
    assert solver(f"{schemes}.Kick", ffn_dt=1.0).ffn_dt == 1.0  # the official layers' unit FFN step, asked for
    both = solver(f"{schemes}.Kick", ffn="semi_implicit_euler")  # each sublayer a force of the kick-drift
    assert (both.ffn, both.build(4).claims().reversible) == ("semi_implicit_euler", True)


def test_classes_that_cannot_be_a_layer_are_one_line_errors(schemes):
    with pytest.raises(ValueError, match="Family is abstract: it declares no order, symplectic"):
        solver(f"{schemes}.Family")
    with pytest.raises(
        ValueError, match=r"bad options \{'theta0': 1.0\} for Kick: it takes no theta0 \(allowed: none\)"
    ):
        solver(f"{schemes}.Kick", options={"theta0": 1.0})


def test_a_failed_import_leaves_the_python_path_as_it_was(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = list(sys.path)
    with pytest.raises(ValueError, match="cannot import stepper 'no_such_module_here.X'"):
        solver("no_such_module_here.X")
    assert sys.path == before


def test_a_changed_solver_holds_its_changes():
    changed = solver("diffusion", splitting="strang", dt=0.25)
    assert (changed.splitting, changed.dt, changed.stepper) == ("strang", 0.25, odeformer.as_solver("euler").stepper)
    assert solver("full_wave") == odeformer.as_solver("full_wave")


def test_the_command_line_spells_a_class_of_ones_own_as_python_does(tmp_path):
    """``solver=module.Class`` on the command line, as in ``ViT(solver="module.Class")``: the class in the layer its
    claims call for (a second-order scheme: laplacian force, dt 0.5, the FFN by the chain rule; a first-order one:
    the residual field at step 1), named after the class; nothing is imported to compose it."""
    from omegaconf import OmegaConf

    import odeformer.app.commands.train as entry
    from odeformer.app.run.builder import build

    (tmp_path / "spelled_mod.py").write_text(textwrap.dedent(SCHEMES))
    sys.path.insert(0, str(tmp_path))
    try:
        for path, form, dt in (("spelled_mod.Kick", "laplacian", 0.5), ("spelled_mod.ThetaGate", "residual", 1.0)):
            cfg = entry.compose([f"solver={path}", "data=synthetic", "model.depth=2", "model.dim=8", "model.heads=2"])
            assert cfg.solver.name == path
            if path.endswith("Kick"):  # composed, not imported: the module runs only when the run is built
                assert "spelled_mod" not in sys.modules
            _, model, record = build(OmegaConf.to_container(cfg, resolve=True))
            layer = model.backbone.layers[0]
            assert record["solver"] == path.rsplit(".", 1)[1] and type(layer.stepper).__name__ == path.split(".")[1]
            assert (layer.attention.form, layer.dt) == (form, dt)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("spelled_mod", None)


def test_a_class_that_cannot_be_imported_is_one_failed_row_of_a_sweep(tmp_path):
    from helpers import cli

    done = cli(
        "-m", "solver=diffusion,nowhere_mod.Scheme", "train=debug", "data=synthetic", "model.depth=2",
        f"hydra.sweep.dir={tmp_path / 'sweep'}", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    table = (tmp_path / "sweep" / "summary.md").read_text()
    rows = [line for line in table.splitlines() if "solver=" in line]
    assert len(rows) == 2 and "completed" in rows[0] and "failed" in rows[1] and "Scheme" in rows[1]
