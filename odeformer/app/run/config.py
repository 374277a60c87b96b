"""Typed configs for ``odeformer-train`` (the loop's own, :class:`LoopConfig`, checks its values when it is made),
and the config groups generated from the registries.

Plain dataclasses: ``odeformer/app/commands/train.py`` (the only module that imports Hydra) stores every node of
:func:`group_options` in Hydra's ConfigStore, so each group option is a typed node (a wrong type or an unknown key
fails at start-up) and there is no YAML to copy for a new scheme: the ``solver`` group holds every name of
:func:`odeformer.solver_names` (every row of :data:`solvers.STEPPERS` and every continuous-depth solver); the ``model``
group one node per
registered task model (:data:`odeformer.tasks.TASK_MODELS`), made from its constructor's signature
(:func:`model_config`), so the command line's defaults are the Python class's. ``configs/`` holds the top-level
``train.yaml``, the experiments and per-experiment training settings; YAML of your own on Hydra's search path
(``hydra.searchpath=[file:///path]``) may extend any generated option (``defaults: [full_wave]``).

One word per concept: a *config* is a typed node of this file; *options* are the keyword arguments of what a node
builds (``solver.options``: the stepper's constructor, ``data.options``: the dataset loader's).
"""

from __future__ import annotations

import functools
import inspect
import math
import os
import types
import typing
from dataclasses import dataclass, field, make_dataclass
from typing import TYPE_CHECKING, Any, Optional  # OmegaConf reads these annotations at runtime: keep Optional[...]

if TYPE_CHECKING:
    from ...tasks import TaskSpec

# The registries (solvers, models, continuous solvers) import torch: they are imported by the functions that read
# them, so that the dataclasses here (what a command composes with) are torch-free.


class UsageError(ValueError):
    """A configuration that cannot run; reported in one line."""


SOLVER_TARGET = "odeformer.solver"
CONTINUOUS_TARGET = "odeformer.continuous.continuous"
"""The ``_target_`` identifiers of the two kinds of solver node (looked up in the builder's table, never imported)."""


@dataclass
class SolverConfig:
    """The block dynamics: a solver name (a row of :data:`solvers.STEPPERS`, or ``module.Class`` for a scheme of
    your own, whose layer follows from its declarations) and its changes, which :func:`odeformer.solver` applies. The
    ``_target_`` is an identifier the builder's table looks up (``odeformer.app.run.builder.SOLVER_TARGETS``), never
    imported."""

    _target_: str = SOLVER_TARGET
    name: str = "diffusion"  # a registered name, or module.Class (a scheme of your own)
    form: Optional[str] = None  # residual | laplacian; None: the solver's
    splitting: Optional[str] = None  # lie | strang (split schemes only); None: the solver's (lie)
    ffn: Optional[str] = None  # the FFN sub-step's scheme, a registered name (split schemes only); None: the solver's
    ffn_dt: Optional[float] = None  # a fixed FFN sub-step (split schemes only); None: the layer's dt
    options: dict[str, Any] = field(default_factory=dict)  # the stepper's constructor arguments, e.g. theta0


@dataclass
class ContinuousSolverConfig:
    """An adaptive (or fixed-grid) ODE solver over depth-time [0, T] for one weight-tied block."""

    _target_: str = CONTINUOUS_TARGET
    name: str = "dopri5"
    library: str = "torchdiffeq"  # torchdiffeq | torchode
    method: str = "dopri5"  # torchdiffeq: dopri5 | bosh3 | rk4 (fixed grid); torchode: dopri5 | tsit5
    rtol: float = 1e-3
    atol: float = 1e-4
    T: float = 1.0  # depth-time; model.depth sets how many states a trajectory records
    adjoint: bool = False  # torchdiffeq.odeint_adjoint
    equation: str = "diffusion"  # diffusion: x' = F_a + F_f | wave: x' = v + F_f, v' = F_a + J_F_f v
    time_embedding: bool = False
    steps: int = 8  # fixed grid only
    max_steps: int = 1000


@dataclass
class DataConfig:
    name: str = "digits"
    root: Optional[str] = None  # folder with planetoid/, text/, sst2/ (default: $ODEFORMER_DATA)
    batch_size: int = 64
    options: dict[str, Any] = field(default_factory=dict)  # the loader's arguments, e.g. {subset: 10000}


@dataclass
class TrainConfig:
    """AdamW with linear warm-up then cosine decay; evaluation and checkpoints every ``eval_every`` steps."""

    max_steps: int = 1000
    lr: float = 3e-3
    optimizer: str = "adamw"  # adamw (decoupled decay) | adam (decay as L2 in the gradient, DIFFormer's)
    weight_decay: float = 0.05
    decay: str = "matrices"  # matrices (>= 2-dim weights, no embeddings) | all; scheme parameters: never decayed
    warmup_steps: int = 50
    min_lr_ratio: float = 0.1  # cosine decays to lr * min_lr_ratio
    grad_clip: float = 1.0  # max gradient norm; 0 disables
    eval_every: int = 100  # steps between evaluations (and checkpoints)
    checkpoint_every: int = 0  # steps between saves of last.pt (0: at every evaluation); best.pt when val improves
    eval_batches: int = 50  # validation: at most this many batches (0: all; text: the whole stream in windows)
    log_every: int = 10
    seed: int = 0
    device: str = "auto"  # auto | cpu | cuda
    precision: str = "auto"  # auto (bf16 autocast on CUDA) | fp32 | bf16
    out_dir: str = "outputs/${now:%Y-%m-%d}/${now:%H-%M-%S}"
    resume: bool = False  # continue the run already in out_dir from its last.pt
    compile: Any = False  # false | true | off | default | reduce-overhead | max-autotune | fullgraph
    progress: bool = True  # progress bar on a terminal
    threads: Optional[int] = None  # CPU threads torch computes with (None: torch's default); 1 on a busy shared machine
    resolutions: list[float] = field(default_factory=lambda: [1.0])  # steps per layer step, cycled over the training
    # steps ([1, 2]: every other step at twice the steps): a model then learns a flow, not one discretisation of it
    check_scheme: bool = False  # before the first step, check every claim of the model's steps on its first batch
    # (solvers.testing.check_in_model: each step against float64 copies; about a hundred forward passes' time)


COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "fullgraph")
"""What ``train.compile`` may name besides ``true`` (``default``) and ``false`` / ``off``: torch.compile's modes, and
``fullgraph`` (the default mode as one graph, an error at a graph break)."""


def compile_mode(value: Any) -> str | None:
    """``train.compile`` as one of :data:`COMPILE_MODES`, or None for no compilation; anything else is a one-line
    ValueError."""
    if value is False or value is None or value == "off":
        return None
    if value is True:
        return "default"
    if isinstance(value, str) and value in COMPILE_MODES:
        return value
    allowed = ", ".join(["true", "false", "off", *COMPILE_MODES])
    raise ValueError(f"train.compile must be one of {allowed}; got {value!r}.")


@dataclass
class LoopConfig(TrainConfig):
    """The loop's config: the ``train`` group (:class:`~odeformer.app.run.config.TrainConfig`) and the data's batch
    size, every value checked when it is made (one line naming the key)."""

    batch_size: int = 64

    def __post_init__(self) -> None:
        lr, threads, count, resolutions = self.lr, self.threads, cores(), list(self.resolutions)
        checks = [  # (whether the value is allowed, what is said when it is not), in the order they are checked
            (self.checkpoint_every >= 0,
             f"train.checkpoint_every must be 0 (at every evaluation) or more, got {self.checkpoint_every}."),
            *((getattr(self, k) >= 1, f"train.{k} must be at least 1, got {getattr(self, k)}.")
              for k in ("max_steps", "eval_every", "log_every")),
            (self.batch_size >= 1, f"data.batch_size must be at least 1, got {self.batch_size}."),
            (self.eval_batches >= 0, "train.eval_batches must be 0 (evaluate the whole split) or more (at most that "
             f"many batches), got {self.eval_batches}."),
            (self.warmup_steps >= 0, f"train.warmup_steps must be 0 (no warm-up) or more, got {self.warmup_steps}."),
            (0 <= self.min_lr_ratio <= 1, "train.min_lr_ratio must be in [0, 1] (the cosine's floor as a fraction of "
             f"train.lr), got {self.min_lr_ratio}."),
            (not math.isinf(lr), "train.lr is beyond the largest float (it reads as inf); give a positive finite "
             "learning rate (e.g. 1e-3)."),
            (lr > 0 and math.isfinite(lr), f"train.lr must be positive, got {lr}."),
            (lr >= FLOAT32_TINY,
             f"train.lr={lr} is 0 in float32; give a learning rate of at least {FLOAT32_TINY:.3g}."),
            (self.weight_decay >= 0 and math.isfinite(self.weight_decay),
             f"train.weight_decay must be 0 (none) or more, got {self.weight_decay}."),
            (self.grad_clip >= 0 and math.isfinite(self.grad_clip),
             f"train.grad_clip must be 0 (no clipping) or a positive norm, got {self.grad_clip}."),
            (self.seed >= 0, f"train.seed must be 0 or more, got {self.seed}."),
            (self.seed <= 2**63 - 1, f"train.seed={self.seed} must be from 0 to 2**63 - 1."),
            (self.device in ("auto", "cpu", "cuda"), f"train.device must be auto, cpu or cuda; got {self.device!r}."),
            (self.optimizer in ("adamw", "adam"), f"train.optimizer must be adamw or adam; got {self.optimizer!r}."),
            (self.decay in ("matrices", "all"), f"train.decay must be matrices or all; got {self.decay!r}."),
            (threads is None or not isinstance(threads, bool) and threads >= 1, "train.threads must be a number of "
             f"CPU threads from 1 to this machine's {count} cores, or null for the idle cores; got {threads}."),
            (threads is None or threads <= count,
             f"train.threads={threads} is more than this machine's {count} CPU cores; give 1 to {count}."),
            (all(_resolution(k) for k in resolutions), "train.resolutions holds steps per layer step: whole numbers "
             f"from 1 to 64, or 1/m such as 0.5; got {resolutions}."),
            (bool(resolutions), "train.resolutions needs at least one resolution ([1.0]: the model as built)."),
            (self.precision in ("auto", "fp32", "bf16"),
             f"train.precision must be auto, fp32 or bf16; got {self.precision!r}."),
            (self.out_dir is None or bool(str(self.out_dir).strip()),
             "train.out_dir='' names no folder; give the run directory's path (or leave it unset)."),
        ]  # fmt: skip
        for fine, said in checks:
            if not fine:
                raise ValueError(said)
        compile_mode(self.compile)


def _resolution(k: Any) -> bool:
    """Whether ``k`` can be a training resolution: a whole number from 1 to 64, or 1/m such as 0.5."""
    if isinstance(k, bool) or not isinstance(k, (int, float)) or not 0 < k <= 64:
        return False
    return k == int(k) if k >= 1 else abs(1 / round(1 / k) - k) <= 1e-12


def cores() -> int:
    """The CPU cores this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


FLOAT32_MAX = 3.4028234663852886e38
FLOAT32_TINY = 1.1754943508222875e-38
"""The largest and the smallest normal float32: the model computes in float32, where a step or a learning rate below
the smallest is 0 (or loses its precision) and one above the largest is inf."""


@dataclass
class Config:
    solver: Any = "???"  # typed by the chosen option (SolverConfig or ContinuousSolverConfig)
    model: Any = "???"  # typed by the chosen option (model_config(name): ViTConfig, CausalLMConfig, ...)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)


DATA: dict[str, DataConfig] = {
    "digits": DataConfig("digits", batch_size=64),  # scikit-learn's 8x8 digits (embedded): 1259 / 179 / 359
    "fashion_mnist": DataConfig("fashion_mnist", batch_size=128, options={"subset": 10000}),  # Debian's package
    "planetoid": DataConfig("planetoid", batch_size=1),  # <root>/planetoid/ind.<name>.*: full batch
    "shakespeare": DataConfig("shakespeare", batch_size=32),  # <root>/text/tinyshakespeare.txt, character level
    "sst2": DataConfig("sst2", batch_size=64),  # <root>/sst2/{train,dev,test}.tsv
    "synthetic": DataConfig("synthetic", batch_size=32),  # tasks with a known answer, for debugging
}

TRAIN: dict[str, TrainConfig] = {
    "default": TrainConfig(),
    "debug": TrainConfig(max_steps=20, warmup_steps=2, eval_every=10, eval_batches=2, log_every=1, progress=False),
}


def _default(value: Any) -> Any:
    """A constructor default as a config value (``inf`` and other non-finite floats as strings OmegaConf keeps)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def stepper_options(name: str) -> dict[str, Any]:
    """The options a solver's stepper takes, with the solver's defaults: what ``solver.options`` may set."""
    import solvers
    from solvers import stepper_parameters

    from ...registry import as_solver

    chosen = as_solver(name)
    out = {}
    for key, parameter in stepper_parameters(chosen.stepper).items():
        if key == "dim" or parameter.kind in (parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL):
            continue
        default = None if parameter.default is inspect.Parameter.empty else parameter.default
        out[key] = _default(chosen.options.get(key, default))
        if isinstance(out[key], solvers.AbstractStepper):
            out[key] = None
    return out


CONFIG_TYPES = (bool, int, float, str)
"""The types a generated model config's key may have (each may also be optional: ``int | None``)."""


def _config_type(owner: Any, key: str, annotation: Any) -> Any:
    """``annotation`` if OmegaConf can type a key with it (one of :data:`CONFIG_TYPES`, optionally ``| None``)."""
    inner = [a for a in typing.get_args(annotation) if a is not type(None)]
    optional = typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(inner) == 1
    if (inner[0] if optional else annotation) in CONFIG_TYPES:
        return annotation
    raise TypeError(
        f"{owner.__qualname__}'s argument {key}: {annotation!r} cannot be a config key; give it one of the types "
        f"{', '.join(t.__name__ for t in CONFIG_TYPES)} (optionally | None), or make it a size read from the data."
    )


def _keywords(function: Any, skip: set[str]) -> list[tuple[str, Any, Any]]:
    """``(name, type, default)`` of ``function``'s arguments that have a default, in order, except those in ``skip``."""
    hints = typing.get_type_hints(function)
    out = []
    for key, p in inspect.signature(function).parameters.items():
        if key in skip or p.default is p.empty or p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
            continue
        out.append((key, _config_type(function, key, hints.get(key, type(p.default))), _default(p.default)))
    return out


@functools.cache
def model_config(name: str) -> type:
    """The config node class of the registered task model ``name`` (:data:`odeformer.tasks.TASK_MODELS`), made from
    its constructor's signature: ``_target_``, then every keyword argument with its default except ``solver`` and the
    sizes the data gives, then those of the callable its other keyword arguments go to (the transformer backbone's),
    except the ones the model sets itself and its keyword-only ones (objects for Python callers, such as ``fields``).
    ``odeformer.ViT(...)`` and ``model=vit`` therefore share their defaults."""
    from ...tasks import TASK_MODELS

    spec: TaskSpec = TASK_MODELS[name]
    own = spec.model.__init__
    fields: list[tuple[str, Any, Any]] = [("_target_", str, spec.target)]
    fields += _keywords(own, {"self", "solver", *spec.sizes})
    if spec.options_to is not None:
        parameters = inspect.signature(spec.options_to).parameters
        python_only = {key for key, p in parameters.items() if p.kind is p.KEYWORD_ONLY}  # objects, not settings
        taken = {*inspect.signature(own).parameters, *spec.set_by_model, *python_only}
        fields += _keywords(spec.options_to, taken)
    node = make_dataclass(
        f"{spec.model.__name__}Config", [(key, kind, field(default=value)) for key, kind, value in fields]
    )
    node.__doc__ = (spec.model.__doc__ or "").strip().split("\n\n")[0]
    return node


def loader_options(name: str) -> dict[str, Any]:
    """A dataset loader's keyword arguments and their defaults (``root`` has a key of its own)."""
    from ...data import DATASETS

    parameters = inspect.signature(DATASETS[name].loader).parameters
    return {
        key: p.default
        for key, p in parameters.items()
        if key != "root" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and p.default is not p.empty
    }


def group_options() -> dict[str, dict[str, Any]]:
    """Every generated option of every config group: ``{group: {name: node}}`` (see the module docstring). Commands
    read them through :func:`odeformer.app.run.groups.groups`, from the package's table of them."""
    from ...continuous import CONTINUOUS
    from ...registry import solver_names
    from ...tasks import TASK_MODELS

    solver: dict[str, Any] = {
        name: SolverConfig(name=name, options=stepper_options(name)) for name in solver_names("discrete")
    }
    for name, settings in CONTINUOUS.items():
        solver[name] = ContinuousSolverConfig(name=name, **settings)
    data = {}
    for name, node in DATA.items():
        data[name] = DataConfig(node.name, node.root, node.batch_size, {**loader_options(name), **node.options})
    model = {name: model_config(name)() for name in TASK_MODELS}
    return {"solver": solver, "model": model, "data": data, "train": dict(TRAIN)}
