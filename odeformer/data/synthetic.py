"""Small synthetic tasks with a known answer, one per task model, for smoke tests and debugging runs.

Each generator is deterministic given its ``seed`` and returns tensors ready for the matching model.
"""

from __future__ import annotations

import torch
from torch import Tensor


def quadrant_images(n: int, image_size: int = 8, seed: int = 0) -> tuple[Tensor, Tensor]:
    """``(images (n, 1, S, S), labels (n,))``: noise plus a bright quadrant; the label is which quadrant (4 classes)."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 4, (n,), generator=g)
    images = 0.5 * torch.randn(n, 1, image_size, image_size, generator=g)
    half = image_size // 2
    for q in range(4):
        rows, cols = slice((q // 2) * half, (q // 2 + 1) * half), slice((q % 2) * half, (q % 2 + 1) * half)
        images[labels == q, :, rows, cols] += 1.5
    return images, labels


def counting_sequences(n: int, length: int, vocab_size: int, seed: int = 0) -> Tensor:
    """``(n, length)`` token sequences that count up modulo ``vocab_size`` from a random start: next-token
    prediction is learnable exactly from the previous token."""
    g = torch.Generator().manual_seed(seed)
    start = torch.randint(0, vocab_size, (n, 1), generator=g)
    return (start + torch.arange(length)) % vocab_size


def marker_sentences(n: int, length: int, vocab_size: int, marker: int = 1, pad_id: int = 0, seed: int = 0):
    """``(tokens (n, length), labels (n,))``: random tokens in ``[2, vocab)`` with trailing padding; label 1 iff the
    sentence contains ``marker`` (inserted into half of them)."""
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(2, vocab_size, (n, length), generator=g)
    lengths = torch.randint(length // 2, length + 1, (n,), generator=g)
    labels = torch.randint(0, 2, (n,), generator=g)
    where = (torch.rand(n, generator=g) * lengths).long()
    tokens[labels == 1, where[labels == 1]] = marker
    tokens[torch.arange(length) >= lengths[:, None]] = pad_id
    return tokens, labels


def stochastic_block_graph(
    nodes: int = 120, classes: int = 3, features: int = 16, p_in: float = 0.1, p_out: float = 0.01, seed: int = 0
):
    """``(features (N, F), edge_index (2, E), labels (N,))``: a stochastic block model whose features are noisy class
    indicators; both the features and the graph carry the label."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, classes, (nodes,), generator=g)
    same = labels[:, None] == labels[None, :]
    probability = torch.where(same, torch.tensor(p_in), torch.tensor(p_out))
    upper = torch.triu(torch.rand(nodes, nodes, generator=g) < probability, diagonal=1)
    edge_index = upper.nonzero().T
    x = torch.randn(nodes, features, generator=g)
    x[:, :classes] += 1.0 * torch.nn.functional.one_hot(labels, classes)
    return x, edge_index, labels
