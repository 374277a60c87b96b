"""What the task models share: the :class:`TaskModel` base class, and the registry of :class:`TaskSpec` records that
says what each model trains on, what it reads from the data, how it is trained and diagnosed, and (through its
constructor's signature) its config's defaults."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn


class TaskModel(nn.Module):
    """Shared by the task models: ``trajectory(*inputs)`` records the backbone's state after every layer."""

    def trajectory(self, *inputs, **kwargs) -> list:
        """``[x_0, y_1, ..., y_L]``: the backbone input, then each layer's state (``PhaseState`` for second-order
        layers, with the velocity), for diagnostics."""
        record: list = []
        self(*inputs, record=record, **kwargs)
        return record

    def solver_stats(self) -> dict[str, int]:
        """Field evaluations and accepted/rejected steps of the last forward (continuous depth; empty otherwise)."""
        stats = getattr(self.backbone, "solver_stats", None)
        return stats() if callable(stats) else {}


def check_tokens(tokens: Tensor, vocab_size: int, max_len: int, name: str, values: bool = True) -> None:
    """Shape, dtype and the ids' range. With ``values`` the range is read on the host and a bad id is a ValueError
    naming it; without (a model in training mode), it is asserted on the device (``torch._assert_async``: an error
    all the same, from the device, but no host read, so a training step never waits on the device for it)."""
    if tokens.dim() != 2 or tokens.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"{name} expects integer tokens of shape (B, T), got {tuple(tokens.shape)} {tokens.dtype}.")
    if tokens.shape[1] > max_len:
        raise ValueError(f"{name}: sequence length {tokens.shape[1]} exceeds max_len={max_len}.")
    if torch.compiler.is_compiling() or not tokens.numel():
        return
    low, high = torch.aminmax(tokens)  # one reduction (checked on every pass)
    if not values:
        torch._assert_async((low >= 0) & (high < vocab_size), f"{name}: token ids must lie in [0, {vocab_size}).")
        return
    low, high = int(low), int(high)
    if low < 0 or high >= vocab_size:
        raise ValueError(f"{name}: token ids must lie in [0, {vocab_size}), got [{low}, {high}].")


DiagnosticBatch = Callable[[Any, nn.Module, int], tuple[tuple[Any, ...], dict[str, Any]]]


@dataclass(frozen=True)
class Footprint:
    """What a task model holds and keeps, counted in values (not bytes), known from its options and its data's sizes
    without building it: enough to refuse a run that cannot fit before it starts. Each count is a lower estimate.

    - ``parameters``: the parameter count.
    - ``layer``: the values one layer keeps for the backward pass, per item: the state, the attention's inputs and
      the FFN's hidden units; the n x n attention scores only with ``impl="math"``, which keeps them (fused attention
      need not).
    - ``state``: one layer's state, per item (what a trajectory keeps per layer).
    - ``head``: the output logits, per item (twice for a language model, whose loss keeps their log-softmax too).
    - ``per_item``: False for a model whose whole dataset is one item (a graph, trained full batch).
    """

    parameters: int
    layer: int
    state: int
    head: int
    per_item: bool = True


FootprintOf = Callable[[dict[str, Any], dict[str, Any], int], Footprint]
"""``(options, meta, blocks) -> Footprint``: from the model's constructor options (its config's keys), its dataset's
``meta`` (the sizes) and the number of distinct blocks (1 when every layer shares one block's weights)."""


def transformer_footprint(
    options: dict[str, Any], blocks: int, tokens: int, embed: int, classes: int, tied: bool = False, logits: int = 1
) -> Footprint:
    """The :class:`Footprint` of an embedding (``embed`` parameters), ``blocks`` standard transformer blocks (an
    attention's four projections, an FFN of ``mlp_hidden`` or ``mlp_ratio`` x ``dim`` units, their norms) over
    ``tokens`` tokens, and a linear head onto ``classes`` (none of its own when ``tied`` to the embedding; its logits
    kept ``logits`` times)."""
    d, heads = options["dim"], options.get("heads") or 1
    hidden = options.get("mlp_hidden") or int((options.get("mlp_ratio") or 4.0) * d)
    per_block = 4 * d * d + 2 * d * hidden + hidden + 9 * d
    scores = heads * tokens * tokens if options.get("impl") == "math" else 0
    return Footprint(
        parameters=embed + blocks * per_block + (0 if tied else d * classes),
        layer=tokens * (6 * d + 2 * hidden) + 2 * scores,
        state=tokens * d,
        head=tokens * classes * logits,
    )


@dataclass(frozen=True)
class TaskSpec:
    """One task model, as the training, diagnosis and reproduction commands know it; registered (:func:`register`)
    beside its class. Its config node (``model=<name>``) is generated from the constructor's signature
    (:func:`odeformer.app.run.config.model_config`), so the Python defaults and the command line's are one set.

    - ``name``: the config's name for it (``model=vit``).
    - ``model``: the class. Its keyword arguments with defaults are the config's keys and defaults, except
      ``solver`` (the ``solver`` group's) and ``sizes``.
    - ``data``: the kind of data it trains on (a :class:`~odeformer.data.TaskData` ``kind``: image, text, sequence
      or graph).
    - ``sizes``: the constructor's arguments read from the dataset's ``meta`` (never config keys).
    - ``objective``: the name of its training objective (loss, sampler and metric) among
      :data:`odeformer.app.run.objectives.OBJECTIVES`.
    - ``diagnostic_batch``: ``(data, model, size) -> (inputs, options)``: the first ``size`` validation items as the
      model's inputs and the options :func:`~odeformer.diagnostics.layer_measures` needs for them.
    - ``first_token``: what token 0 of its state is, in words (the diagnostics' phase portrait follows it).
    - ``options_to``: the callable the constructor passes its remaining keyword arguments (``**options``) on to; its
      keyword arguments with defaults are config keys too, except the constructor's own and ``set_by_model``.
    - ``set_by_model``: arguments of ``options_to`` the model always sets itself (e.g. the attention mask).
    - ``default``: the model the commands choose for its kind of data (one per kind).
    - ``footprint``: ``(options, meta, blocks) -> Footprint``, what the model holds and keeps, from its options and
      its data's sizes, before it is built (:class:`Footprint`); None: not known, so no run of it is refused for its
      size.
    """

    name: str
    model: type[nn.Module]
    data: str
    sizes: tuple[str, ...]
    objective: str
    diagnostic_batch: DiagnosticBatch
    first_token: str = "the first token"
    options_to: Callable[..., Any] | None = None
    set_by_model: tuple[str, ...] = ()
    default: bool = False
    footprint: FootprintOf | None = None

    @property
    def target(self) -> str:
        """The config's ``_target_``: ``odeformer.<Class>``, an identifier this registry resolves (a config never
        chooses what is imported)."""
        return f"odeformer.{self.model.__name__}"


TASK_MODELS: dict[str, TaskSpec] = {}
"""Every registered task model by its config name, in registration order."""


def register(spec: TaskSpec) -> TaskSpec:
    """Add ``spec`` to :data:`TASK_MODELS`; a name or a class already registered is refused."""
    taken = [s.name for s in TASK_MODELS.values() if s.name == spec.name or s.target == spec.target]
    if taken:
        raise ValueError(f"task model {spec.name!r} ({spec.target}) is already registered as {taken[0]!r}.")
    TASK_MODELS[spec.name] = spec
    return spec


def task_of(model: nn.Module | type[nn.Module]) -> TaskSpec:
    """The registered record of ``model`` (an instance or a class; a subclass of a registered model has its parent's
    record)."""
    cls = model if isinstance(model, type) else type(model)
    for base in cls.__mro__:
        for spec in TASK_MODELS.values():
            if spec.model is base:
                return spec
    raise ValueError(
        f"{cls.__name__} is not a registered task model; registered: "
        f"{', '.join(s.model.__name__ for s in TASK_MODELS.values())}."
    )
