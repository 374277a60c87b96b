"""The task-model registry: one record per model, and one set of defaults for Python and the command line."""

import inspect
from dataclasses import fields

import pytest
import torch
from omegaconf import OmegaConf
from torch import nn

import odeformer.app.commands.train as entry
from odeformer.app.run.builder import build
from odeformer.app.run.config import model_config
from odeformer.app.run.identity import default_model
from odeformer.app.run.objectives import OBJECTIVES, make_objective
from odeformer.data import DATASETS, data_kind, load
from odeformer.data._common import KINDS
from odeformer.diagnostics import layer_measures
from odeformer.tasks import TASK_MODELS, TaskModel, TaskSpec, register, task_of

IMAGES = TASK_MODELS["vit"].diagnostic_batch

SYNTHETIC = ["data=synthetic", "data.options.n=64"]


def _python_defaults(spec):
    """Every keyword default the constructor (and the callable it passes its other options to) gives, read from the
    signatures here, independently of how the config is generated; the callable's keyword-only arguments are objects
    for Python callers (the backbone's ``fields``), not settings."""
    own = inspect.signature(spec.model.__init__).parameters
    defaults = {k: p.default for k, p in own.items() if p.default is not p.empty}
    if spec.options_to is not None:
        passed = inspect.signature(spec.options_to).parameters
        settings = {k: p for k, p in passed.items() if p.kind is not p.KEYWORD_ONLY}
        defaults |= {k: p.default for k, p in settings.items() if k not in own and p.default is not p.empty}
    return {k: v for k, v in defaults.items() if k not in ("solver", *spec.sizes, *spec.set_by_model)}


@pytest.mark.parametrize("name", list(TASK_MODELS))
def test_every_models_config_has_its_python_defaults(name):
    """``model=<name>`` composes to exactly the constructor's defaults: every key, and no key the constructor lacks."""
    spec = TASK_MODELS[name]
    node = OmegaConf.to_container(entry.compose([f"model={name}"]).model, resolve=True)
    assert node.pop("_target_") == spec.target
    assert node == _python_defaults(spec)


@pytest.mark.parametrize("name", list(TASK_MODELS))
def test_each_models_footprint_counts_its_parameters_from_its_options_and_sizes(name):
    """A registered model's footprint, from its constructor's defaults and its data's sizes alone (the library's
    own API, nothing of the application), counts the parameters of the model those build, within a few percent and
    never above (it is a lower estimate); one shared block counts once."""
    spec = TASK_MODELS[name]
    meta = load("synthetic", task=spec.data, n=64).meta
    options = _python_defaults(spec)
    shared = [(1, {"tie_weights": True})] if "tie_weights" in options else []  # one block for every layer
    for blocks, tied in [(options["depth"], {}), *shared]:
        model = spec.model(**{key: meta[key] for key in spec.sizes}, **tied)
        real = sum(p.numel() for p in model.parameters())
        footprint = spec.footprint({**options, **tied}, meta, blocks)
        assert 0.85 * real <= footprint.parameters <= 1.02 * real, (footprint, real)
        assert footprint.layer >= footprint.state > 0 and footprint.head > 0


@pytest.mark.parametrize("name", list(TASK_MODELS))
def test_the_cli_and_python_build_the_same_model(name):
    """The model ``odeformer-train model=<name>`` builds is the one ``Class(**sizes)`` builds in Python: the same
    modules, the same parameter shapes, the same step sizes."""
    spec = TASK_MODELS[name]
    cfg = entry.compose([f"model={name}", "solver=diffusion", *SYNTHETIC, f"data.options.task={spec.data}"])
    data, cli_model, _ = build(OmegaConf.to_container(cfg, resolve=True))
    python_model = spec.model(**{key: data.meta[key] for key in spec.sizes})
    assert str(cli_model) == str(python_model)
    shapes = {k: v.shape for k, v in python_model.state_dict().items()}
    assert {k: v.shape for k, v in cli_model.state_dict().items()} == shapes
    dts = [layer.dt for layer in python_model.backbone.layers]
    assert [layer.dt for layer in cli_model.backbone.layers] == dts


def test_every_record_names_what_exists():
    for name, spec in TASK_MODELS.items():
        parameters = inspect.signature(spec.model.__init__).parameters
        assert spec.data in KINDS, name
        assert spec.objective in OBJECTIVES, name
        assert set(spec.sizes) <= set(parameters), name
        assert task_of(spec.model) is spec
    for kind in {spec.data for spec in TASK_MODELS.values()}:
        defaults = [s.name for s in TASK_MODELS.values() if s.data == kind and s.default]
        assert len(defaults) == 1, f"{kind}: {defaults}"
    for name in DATASETS:  # every dataset feeds a model, and its kind is known before loading
        assert default_model(data_kind(name)) in TASK_MODELS, name


@pytest.mark.parametrize("name", list(TASK_MODELS))
def test_every_models_objective_andIMAGES_run_on_its_data(name):
    spec = TASK_MODELS[name]
    data = load("synthetic", task=spec.data, n=64)
    model = spec.model(**{key: data.meta[key] for key in spec.sizes}, depth=1, dim=16, heads=2)
    objective = make_objective(data, model, 4, 0, torch.device("cpu"))
    assert torch.isfinite(objective.loss(objective.network(model), objective.batch(0, 1)))
    inputs, options = spec.diagnostic_batch(data, model, 1)
    assert len(layer_measures(model, *inputs, **options)["cosine"]) == 2  # the input and the one layer's state


class _Mean(TaskModel):
    """A registered model of one's own: mean of the image's pixels through a backbone-free head."""

    def __init__(self, num_classes: int, width: int = 7, scale: float | None = None, solver="diffusion"):
        super().__init__()
        self.head = nn.Linear(1, num_classes)
        self.width, self.scale = width, scale

    def forward(self, images, *, record=None):
        return self.head(images.mean((1, 2, 3)).unsqueeze(-1))


def test_a_new_model_is_its_class_and_its_registration():
    spec = TaskSpec("mean", _Mean, "image", ("num_classes",), "classification", IMAGES)
    register(spec)
    try:
        node = model_config("mean")()
        assert {f.name: getattr(node, f.name) for f in fields(node)} == {
            "_target_": "odeformer._Mean",
            "width": 7,
            "scale": None,
        }
        with pytest.raises(ValueError, match="already registered"):
            register(TaskSpec("mean", nn.Linear, "image", (), "classification", IMAGES))
    finally:
        del TASK_MODELS["mean"]
        model_config.cache_clear()


def test_a_constructor_argument_no_config_can_hold_is_named():
    class Odd(TaskModel):
        def __init__(self, layer: nn.Module = None):
            super().__init__()

    register(TaskSpec("odd", Odd, "image", (), "classification", IMAGES))
    try:
        with pytest.raises(TypeError, match="argument layer: .* cannot be a config key"):
            model_config("odd")
    finally:
        del TASK_MODELS["odd"]
        model_config.cache_clear()
