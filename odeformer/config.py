"""Typed schemas for the training configs (``configs/``): a wrong type or an unknown key fails at start-up.

Plain dataclasses: ``odeformer/train.py`` (the only module that imports Hydra) registers them in Hydra's ConfigStore,
each group option in ``configs/<group>/*.yaml`` extends its group's schema, and the whole tree is typed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional  # OmegaConf reads these annotations at runtime: it understands Optional[...]


@dataclass
class SolverConfig:
    """The block dynamics: a preset name and its changes (see ``odeformer.PRESETS``)."""

    _target_: str = "odeformer.preset"
    name: str = "diffusion"
    form: Optional[str] = None  # residual | laplacian; None: the preset's
    splitting: str = "lie"  # lie | strang
    options: Any = field(default_factory=dict)  # stepper options, e.g. {theta0: -4.0} for mix/light_wave


@dataclass
class ContinuousSolverConfig:
    """An adaptive (or fixed-grid) ODE solver over depth-time [0, T] for one weight-tied block."""

    _target_: str = "odeformer.continuous.continuous"
    name: str = "dopri5"
    library: str = "torchdiffeq"  # torchdiffeq | torchode
    method: str = "dopri5"  # torchdiffeq: dopri5 | bosh3 | rk4 (fixed grid); torchode: dopri5 | tsit5
    rtol: float = 1e-3
    atol: float = 1e-4
    T: float = 1.0
    adjoint: bool = False  # torchdiffeq.odeint_adjoint
    dynamics: str = "diffusion"  # diffusion: x' = F_a + F_f | wave: x' = v + F_f, v' = F_a + J_F_f v
    time_embedding: bool = False
    steps: int = 8  # fixed grid only
    max_steps: int = 1000


@dataclass
class ModelConfig:
    """Options every task model takes; the sizes a dataset fixes (classes, vocabulary, image size) come from it."""

    _target_: str = "odeformer.ViT"
    depth: int = 6
    dim: int = 64
    heads: int = 4
    dt: Optional[float] = None  # None: the solver's default step


@dataclass
class TransformerOptions(ModelConfig):
    mlp_ratio: float = 4.0
    activation: str = "gelu"  # gelu | gelu_tanh | relu | silu (each with an exact velocity path)
    ln_mode: str = "paper"  # paper | exact: how the velocity passes LayerNorm
    impl: str = "sdpa"  # sdpa | math
    dropout: float = 0.0
    tie_weights: bool = False  # one block shared by every layer (continuous solvers always share)
    checkpoint: bool = False  # recompute each layer in the backward pass instead of storing its activations


@dataclass
class ViTConfig(TransformerOptions):
    _target_: str = "odeformer.ViT"
    patch_size: int = 2
    pool: str = "cls"  # cls | mean


@dataclass
class CausalLMConfig(TransformerOptions):
    _target_: str = "odeformer.CausalLM"
    max_len: int = 64  # context length in tokens


@dataclass
class MaskedLMConfig(TransformerOptions):
    _target_: str = "odeformer.MaskedLM"
    pool: str = "mean"  # mean | first


@dataclass
class NodeClassifierConfig(ModelConfig):
    _target_: str = "odeformer.NodeClassifier"
    heads: int = 1
    graph_weight: float = 0.5
    attention: str = "simple"  # simple | softmax | graph_softmax
    form: str = "laplacian"
    dropout: float = 0.0


@dataclass
class DataConfig:
    name: str = "digits"
    root: Optional[str] = None  # folder with planetoid/, text/, sst2/ (default: $ODEFORMER_DATA)
    batch_size: int = 64
    options: Any = field(default_factory=dict)  # loader options, e.g. {subset: 10000} for fashion_mnist


@dataclass
class TrainOptions:
    max_steps: int = 1000
    lr: float = 3e-3
    weight_decay: float = 0.05
    warmup_steps: int = 50
    min_lr_ratio: float = 0.1  # cosine decays to lr * min_lr_ratio
    grad_clip: float = 1.0  # max gradient norm; 0 disables
    eval_every: int = 100  # steps between evaluations (and checkpoints)
    eval_batches: int = 50  # validation: at most this many batches (0: all); text: windows of each evaluation
    log_every: int = 10
    seed: int = 0
    device: str = "auto"  # auto | cpu | cuda
    precision: str = "auto"  # auto (bf16 autocast on CUDA) | fp32 | bf16
    out_dir: str = "outputs/${now:%Y-%m-%d}/${now:%H-%M-%S}"
    resume: bool = False
    compile: bool = False
    progress: bool = True  # progress bar on a terminal


@dataclass
class Config:
    solver: Any = "???"  # typed by the chosen option's schema (solver_schema or continuous_schema)
    model: Any = "???"  # typed by the chosen option's own schema (vit_schema, causal_lm_schema, ...)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainOptions = field(default_factory=TrainOptions)


MODEL_SCHEMAS = {
    "vit_schema": ViTConfig,
    "causal_lm_schema": CausalLMConfig,
    "masked_lm_schema": MaskedLMConfig,
    "node_classifier_schema": NodeClassifierConfig,
}
