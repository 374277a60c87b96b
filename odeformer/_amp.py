"""Autocast inside custom autograd functions: the backward pass runs with autocast off unless told otherwise, so a
function whose forward ran under ``torch.autocast`` replays the same autocast state in its backward (as
``torch.amp.custom_bwd`` does, for whichever device the tensors live on)."""

from __future__ import annotations

import contextlib
from typing import NamedTuple

import torch
from torch import Tensor


class AutocastState(NamedTuple):
    device_type: str
    enabled: bool
    dtype: torch.dtype

    @classmethod
    def capture(cls, tensor: Tensor) -> AutocastState:
        """The autocast state in force now for ``tensor``'s device type."""
        device = tensor.device.type
        if device not in ("cpu", "cuda", "xpu", "mps", "hpu"):
            return cls(device, False, tensor.dtype)
        return cls(device, torch.is_autocast_enabled(device), torch.get_autocast_dtype(device))

    def __call__(self) -> contextlib.AbstractContextManager:
        """A context manager that restores this state (a no-op when autocast was off)."""
        if not self.enabled:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)
