"""What each kind of data trains on: its sampler, its loss on a batch, its metric on a split.

``image`` and ``sequence`` data are labelled items (cross-entropy, accuracy); ``text`` is next-character prediction
on random windows of a stream (the metric is the loss in nats per token); ``graph`` is transductive node
classification on one graph (full batch, the loss on the training nodes). Each task model names its objective among
:data:`OBJECTIVES` (:class:`odeformer.tasks.TaskSpec`); :func:`make_objective` builds it, and refuses at start-up a
validation or test split with nothing to evaluate.

``max_batches`` of :meth:`Objective.evaluate` (``train.eval_batches``) caps a labelled split at that many batches;
a text stream is read in that many batches of windows spread evenly over it; 0 means all: every labelled item, the
whole stream in consecutive windows (each token after the first predicted once). A graph is always evaluated whole.
``stop`` (a callable) is asked between batches: when it says so, the evaluation ends with :class:`EvaluationStopped`
instead of a result, so a signal during a long evaluation is acted on before the next batch.

A training batch never makes the host wait on the device: on a GPU, splits that fit (:func:`~.batches.resident`)
live there and are indexed there, larger ones travel through pinned memory; an evaluation sums on the device and
reads its totals once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...data import TaskData
from ...tasks import task_of
from .batches import EpochSampler, WindowSampler, resident, to_device


class EvaluationStopped(Exception):
    """An evaluation ended early because its ``stop`` callable asked it to (a signal to stop the run)."""


def _check(stop: Callable[[], bool] | None) -> None:
    if stop is not None and stop():
        raise EvaluationStopped


class Objective:
    """Per data kind: the training sampler, the loss on a batch, and the evaluation of a split."""

    metric = "accuracy"
    higher_is_better = True

    def __init__(self, data: TaskData, batch_size: int, seed: int, device: torch.device):
        self.data, self.batch_size, self.device = data, batch_size, device

    @classmethod
    def for_model(cls, data: TaskData, model: nn.Module, batch_size: int, seed: int, device: torch.device) -> Objective:
        """The objective of ``model`` on ``data`` (what it reads from the model: nothing here; a context length for
        text)."""
        return cls(data, batch_size, seed, device)

    def network(self, model: nn.Module) -> nn.Module:
        """The module whose forward maps a batch's inputs to logits (what DDP and torch.compile wrap)."""
        return model

    def batch(self, rank: int, world: int) -> Any:
        raise NotImplementedError

    def loss(self, model: nn.Module, batch: Any) -> Tensor:
        raise NotImplementedError

    def evaluate(
        self, model: nn.Module, split: str, max_batches: int, stop: Callable[[], bool] | None = None
    ) -> dict[str, float]:
        raise NotImplementedError


def _empty(split: str, count: int) -> None:
    if count == 0:
        what = "to train on" if split == "train" else "to evaluate"
        raise ValueError(
            f"the {split} split is empty: nothing {what}; every split needs at least one item (check data.options)."
        )


class ImageObjective(Objective):
    """Image (and, with its network, sequence) classification: ``(inputs, labels)`` tensors per split."""

    def __init__(self, data, batch_size, seed, device):
        super().__init__(data, batch_size, seed, device)
        for split in ("train", "val", "test"):
            _empty(split, len(data.splits[split][1]))
        self.sampler = EpochSampler(len(data.splits["train"][1]), batch_size, seed)
        self.splits = resident(data.splits, device)  # on the CPU: data.splits itself

    def batch(self, rank, world):
        index = next(self.sampler)[rank::world]
        inputs, labels = self.splits["train"]
        if inputs.device != self.device:  # on the host: gather there, then one copy through pinned memory
            return to_device(inputs[index], self.device), to_device(labels[index], self.device)
        index = to_device(index, self.device)
        return inputs[index], labels[index]

    def loss(self, model, batch):
        inputs, labels = batch
        return F.cross_entropy(model(inputs).float(), labels)

    @torch.no_grad()
    def evaluate(self, model, split, max_batches, stop=None):
        inputs, labels = self.splits[split]
        # float64 sums of each batch's float32 sum: the same additions as Python floats, read once at the end
        total_loss = torch.zeros((), dtype=torch.float64, device=self.device)
        correct, count = torch.zeros((), dtype=torch.long, device=self.device), 0
        for b, start in enumerate(range(0, len(labels), self.batch_size)):
            if max_batches and b >= max_batches:
                break
            _check(stop)
            x = to_device(inputs[start : start + self.batch_size], self.device)
            y = to_device(labels[start : start + self.batch_size], self.device)
            logits = model(x).float()
            total_loss += F.cross_entropy(logits, y, reduction="sum").double()
            correct += (logits.argmax(-1) == y).sum()
            count += len(y)
        _empty(split, count)
        return {"loss": total_loss.item() / count, "accuracy": correct.item() / count}


class _Classify(nn.Module):
    """``MaskedLM.classify`` as a forward, so DDP and torch.compile see the call that produces the loss."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, tokens: Tensor) -> Tensor:
        return self.model.classify(tokens)


class SequenceObjective(ImageObjective):
    def network(self, model):
        return _Classify(model)


class TextObjective(Objective):
    """Next-character prediction on random windows; the metric is the loss (nats per token)."""

    metric = "loss"
    higher_is_better = False

    def __init__(self, data, batch_size, seed, device, context: int):
        super().__init__(data, batch_size, seed, device)
        self.context = context
        for split in ("val", "test"):  # the train stream: WindowSampler's check
            if len(data.splits[split][0]) <= context + 1:
                raise ValueError(
                    f"the {split} token stream ({len(data.splits[split][0])}) must be longer than the context "
                    f"({context}) + 1: use a smaller model.max_len or a longer stream."
                )
        self.sampler = WindowSampler(len(data.splits["train"][0]), context, batch_size, seed)
        self.splits = resident(data.splits, device)  # on the CPU: data.splits itself

    @classmethod
    def for_model(cls, data, model, batch_size, seed, device):
        return cls(data, batch_size, seed, device, context=model.max_len)

    def _windows(self, stream: Tensor, starts: Tensor) -> tuple[Tensor, Tensor]:
        starts = to_device(starts, stream.device)
        offsets = starts[:, None] + torch.arange(self.context + 1, device=stream.device)
        chunk = to_device(stream[offsets], self.device)  # (B, T + 1)
        return chunk[:, :-1], chunk[:, 1:]

    def batch(self, rank, world):
        return self._windows(self.splits["train"][0], next(self.sampler)[rank::world])

    def loss(self, model, batch):
        inputs, targets = batch
        return F.cross_entropy(model(inputs).float().flatten(0, 1), targets.flatten())

    @torch.no_grad()
    def evaluate(self, model, split, max_batches, stop=None):
        stream = self.splits[split][0]
        if max_batches:  # that many batches of windows, spread evenly over the stream (at most one per position)
            last = len(stream) - self.context - 2
            starts = torch.linspace(0, last, min(max_batches * self.batch_size, last + 1)).long().unique()
        else:  # the whole stream: consecutive windows, each token after the first a target once
            starts = torch.arange(0, len(stream) - self.context, self.context)
        total, count = torch.zeros((), dtype=torch.float64, device=self.device), 0
        for chunk in starts.split(self.batch_size):
            _check(stop)
            inputs, targets = self._windows(stream, chunk)
            total += F.cross_entropy(model(inputs).float().flatten(0, 1), targets.flatten(), reduction="sum").double()
            count += targets.numel()
        _empty(split, count)
        return {"loss": total.item() / count}


class GraphObjective(Objective):
    """Transductive node classification: full-batch on the one graph, loss on the training nodes."""

    def __init__(self, data, batch_size, seed, device):
        super().__init__(data, batch_size, seed, device)
        self.features, self.edges, self.labels = (t.to(device) for t in data.graph)
        self.index = {split: data.splits[split][0].to(device) for split in data.splits}
        for split in ("train", "val", "test"):
            _empty(split, len(self.index[split]))

    def batch(self, rank, world):
        return self.index["train"]

    def loss(self, model, batch):
        return F.cross_entropy(model(self.features, self.edges)[batch].float(), self.labels[batch])

    @torch.no_grad()
    def evaluate(self, model, split, max_batches, stop=None):
        _check(stop)
        index = self.index[split]
        logits = model(self.features, self.edges)[index].float()
        return {
            "loss": float(F.cross_entropy(logits, self.labels[index])),
            "accuracy": float((logits.argmax(-1) == self.labels[index]).float().mean()),
        }


OBJECTIVES: dict[str, type[Objective]] = {
    "classification": ImageObjective,
    "sequence_classification": SequenceObjective,
    "next_token": TextObjective,
    "node_classification": GraphObjective,
}
"""The objectives a task model may name (its :class:`~odeformer.tasks.TaskSpec`'s ``objective``)."""


def make_objective(data: TaskData, model: nn.Module, batch_size: int, seed: int, device: torch.device) -> Objective:
    """The objective ``model``'s registered task names, on ``data``."""
    return OBJECTIVES[task_of(model).objective].for_model(data, model, batch_size, seed, device)
