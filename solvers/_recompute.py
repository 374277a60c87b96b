"""Backward passes that step again: bind the forward pass's tensors, and the checkpointing hook.

A backward pass that recomputes steps (activation checkpointing) or rebuilds them
(:func:`~solvers.integrate_reversible`) reads the fields' parameters and buffers when it runs, not when the forward
pass ran. Under
``torch.func.functional_call`` the modules hold the substituted tensors only during the call; by the time
``backward()`` runs, the module's own tensors are back, and stepping with those differentiates another function:
the gradient is silently wrong. :class:`Bindings` records what the modules held in the forward pass and binds it
again (by ``functional_call``) around the recomputation wherever it differs; outside that case it costs a dictionary
comparison.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from ._base import AbstractStepper, Hook, Y


def modules_of(objects: Iterable[Any]) -> list[nn.Module]:
    """The ``nn.Module`` among ``objects`` and the parts of each (a Block is a tuple of fields and maps)."""
    return [
        part for obj in objects for part in (obj if isinstance(obj, tuple) else (obj,)) if isinstance(part, nn.Module)
    ]


class _Holder(nn.Module):
    """The modules a run reads, under one root, so that ``torch.func.functional_call`` can bind tensors into them."""

    def __init__(self, modules: Sequence[nn.Module]):
        super().__init__()
        self.parts = nn.ModuleList(modules)

    def forward(self, body: Callable[[], Any]) -> Any:
        return body()

    def tensors(self) -> dict[str, Tensor]:
        """Every parameter and buffer by name, as the modules hold them now (tied ones under each of their names)."""
        return {
            **dict(self.named_parameters(remove_duplicate=False)),
            **dict(self.named_buffers(remove_duplicate=False)),
        }


class Bindings:
    """The parameters and buffers ``modules`` held when :meth:`capture` ran."""

    __slots__ = ("holder", "tensors", "_same")

    def __init__(self, holder: _Holder, tensors: dict[str, Tensor]):
        self.holder, self.tensors = holder, tensors
        self._same: bool | None = None  # whether the modules hold them still: checked once, at the first recomputation

    @classmethod
    def capture(cls, modules: Sequence[nn.Module]) -> Bindings:
        holder = _Holder(modules)
        return cls(holder, holder.tensors())

    def trainable(self) -> list[Tensor]:
        """The captured parameters that require a gradient, each once."""
        return [p for p in self.holder.parameters() if p.requires_grad]

    def call(self, body: Callable[[], Any]) -> Any:
        """``body()`` with the modules holding the captured tensors (bound again only where they differ now).

        Whether they differ is checked at the first call only: the recomputations of one backward pass run after the
        forward pass's ``functional_call`` (if any) has returned, so they all see the same modules."""
        if self._same is None:
            now = self.holder.tensors()
            self._same = now.keys() == self.tensors.keys() and all(now[k] is t for k, t in self.tensors.items())
        if self._same:
            return body()
        return torch.func.functional_call(self.holder, self.tensors, (body,), strict=False)


def recomputed(modules: Sequence[nn.Module]) -> Callable[..., Any]:
    """``run(function, *args)``: ``function(*args)`` with its activations recomputed in the backward pass instead of
    stored (activation checkpointing), with the parameters and buffers ``modules`` hold now (make one per forward
    pass).

    Under ``torch.compile`` the recomputation is part of the compiled graph, whose inputs are the forward's tensors
    already, so nothing is captured there."""
    bindings = None if torch.compiler.is_compiling() else Bindings.capture(modules)

    def run(function: Callable[..., Any], *args: Any) -> Any:
        if bindings is None:
            return torch.utils.checkpoint.checkpoint(function, *args, use_reentrant=False)
        runs = 0

        def call(*args: Any) -> Any:
            nonlocal runs
            runs += 1  # the first run is the forward pass; later ones recompute it in a backward pass
            if runs == 1:
                return function(*args)
            return bindings.call(lambda: function(*args))

        return torch.utils.checkpoint.checkpoint(call, *args, use_reentrant=False)

    return run


def checkpointed(modules: Sequence[nn.Module]) -> Hook:
    """A hook for :func:`~solvers.iterate` that checkpoints every step (:func:`recomputed`; make one per forward
    pass)."""
    run = recomputed(modules)

    def hook(stepper: AbstractStepper, field: Any, t: Any, y: Y, dt: Any, state: Any) -> tuple[Y, Any]:
        return run(stepper.step, field, t, y, dt, state)

    return hook
