"""Samplers of training batches whose state resumes the exact order: shuffled epochs of indices, random windows."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


class EpochSampler:
    """Shuffled minibatches of indices into ``n`` items, epoch by epoch; its state resumes the exact order."""

    def __init__(self, n: int, batch_size: int, seed: int):
        self.n, self.batch_size = n, min(batch_size, n)
        self.generator = torch.Generator().manual_seed(seed)
        self.order, self.position = torch.empty(0, dtype=torch.long), n

    def __next__(self) -> Tensor:
        if self.position + self.batch_size > len(self.order):
            self.order, self.position = torch.randperm(self.n, generator=self.generator), 0
        batch = self.order[self.position : self.position + self.batch_size]
        self.position += self.batch_size
        return batch

    def state_dict(self) -> dict[str, Any]:
        return {"generator": self.generator.get_state(), "order": self.order, "position": self.position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.generator.set_state(state["generator"])
        self.order, self.position = state["order"], state["position"]


class WindowSampler:
    """Random windows of ``length + 1`` tokens from a token stream (inputs and next-token targets)."""

    def __init__(self, length_of_stream: int, window: int, batch_size: int, seed: int):
        if length_of_stream <= window + 1:
            raise ValueError(f"the token stream ({length_of_stream}) must be longer than the context ({window}) + 1.")
        self.high, self.batch_size = length_of_stream - window - 1, batch_size
        self.generator = torch.Generator().manual_seed(seed)

    def __next__(self) -> Tensor:
        return torch.randint(0, self.high, (self.batch_size,), generator=self.generator)

    def state_dict(self) -> dict[str, Any]:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.generator.set_state(state["generator"])


RESIDENT_BYTES = 2 * 2**30
"""A dataset split up to this size is copied to the GPU once and batched there (no copy per step); a larger one stays
on the host and each batch travels through pinned memory."""


def to_device(tensor: Tensor, device: torch.device) -> Tensor:
    """``tensor`` on ``device``. From the host to a GPU the copy goes through pinned memory and is queued on the
    stream without the host waiting for the work already queued (a pageable copy would wait for it); on the CPU it is
    ``tensor`` itself."""
    if device.type != "cuda" or tensor.device.type == "cuda":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)


def resident(tensors: dict[str, Any], device: torch.device) -> dict[str, Any]:
    """``tensors`` (a split's tensors, or tuples of them, by name) moved to a GPU at once when together they take at
    most :data:`RESIDENT_BYTES`; otherwise (and on the CPU) as they are, to be copied batch by batch."""
    if device.type != "cuda":
        return tensors
    flat = [t for value in tensors.values() for t in (value if isinstance(value, (tuple, list)) else (value,))]
    if sum(t.numel() * t.element_size() for t in flat) > RESIDENT_BYTES:
        return tensors

    def move(value: Any) -> Any:
        if isinstance(value, (tuple, list)):
            return type(value)(to_device(t, device) for t in value)
        return to_device(value, device)

    return {name: move(value) for name, value in tensors.items()}
