from __future__ import annotations

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


def check_tokens(tokens: Tensor, vocab_size: int, max_len: int, name: str) -> None:
    if tokens.dim() != 2 or tokens.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"{name} expects integer tokens of shape (B, T), got {tuple(tokens.shape)} {tokens.dtype}.")
    if tokens.shape[1] > max_len:
        raise ValueError(f"{name}: sequence length {tokens.shape[1]} exceeds max_len={max_len}.")
    if not torch.compiler.is_compiling() and tokens.numel() and (tokens.min() < 0 or tokens.max() >= vocab_size):
        raise ValueError(f"{name}: token ids must lie in [0, {vocab_size}), got [{tokens.min()}, {tokens.max()}].")
