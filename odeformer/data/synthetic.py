"""Small synthetic tasks with a known answer, one per task model, for smoke tests and debugging runs.

Each generator is deterministic given its ``seed`` and returns tensors ready for the matching model;
:func:`synthetic` wraps them into a :class:`TaskData` with train/val/test splits, as the real loaders return.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._common import SPLITS, TaskData, check_int


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


ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"  # itos of the synthetic text task
SIZE_OPTIONS: dict[str, dict[str, int | float]] = {  # the size options of each synthetic task, with their defaults
    "image": {"image_size": 8},
    "text": {"length": 32, "vocab_size": 11},
    "sequence": {"length": 16, "vocab_size": 20},
    "graph": {"classes": 3, "features": 16, "p_in": 0.1, "p_out": 0.01},
}


MAX_NUMBERS = 1 << 27
"""The most numbers one synthetic task may generate (about 512 MB of float32; the defaults make a few thousand): a
config, typed or stored in a checkpoint, does not size an allocation beyond the machine."""


def _numbers(task: str, n: int, sizes: dict) -> int:
    """How many numbers ``task`` generates for ``n`` items (the graph's block model draws an ``n x n`` matrix)."""
    if task == "image":
        return n * sizes["image_size"] ** 2
    if task == "graph":
        return n * n + n * sizes["features"]
    return n * sizes["length"]


def _check_sizes(task: str, sizes: dict) -> dict:
    """``sizes`` completed with the defaults of ``task``; unknown names and out-of-range values are refused."""
    unknown = sorted(set(sizes) - set(SIZE_OPTIONS[task]))
    if unknown:
        allowed = ", ".join(["n", "seed", *SIZE_OPTIONS[task]])
        raise TypeError(f"synthetic task {task!r} got unknown option(s) {', '.join(unknown)}; allowed: {allowed}.")
    sizes = {**SIZE_OPTIONS[task], **sizes}
    lowest = {"image_size": 2, "length": 2, "vocab_size": 3 if task == "sequence" else 2, "classes": 2, "features": 1}
    for name, value in sizes.items():
        if name in ("p_in", "p_out"):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
                raise ValueError(f"{name} must be a probability in [0, 1], got {value!r}.")
        elif isinstance(value, bool) or not isinstance(value, int) or value < lowest[name]:
            raise ValueError(f"{name} must be an int of at least {lowest[name]}, got {value!r}.")
    if task == "image" and sizes["image_size"] % 2:
        raise ValueError(f"image_size must be even (the image splits into quadrants), got {sizes['image_size']}.")
    if task == "text" and sizes["vocab_size"] > len(ALPHABET):
        raise ValueError(
            f"vocab_size of the synthetic text task must be at most {len(ALPHABET)}, got {sizes['vocab_size']}."
        )
    if task == "graph" and sizes["features"] < sizes["classes"]:
        raise ValueError(f"features must be at least classes={sizes['classes']}, got {sizes['features']}.")
    return sizes


def _cut(n: int) -> tuple[slice, slice, slice]:
    """Contiguous 80% / 10% / 10% slices of ``n`` i.i.d. items."""
    n_val = n_test = n // 10
    n_train = n - n_val - n_test
    return slice(0, n_train), slice(n_train, n_train + n_val), slice(n_train + n_val, n)


def synthetic(task: str = "image", n: int = 512, seed: int = 0, **sizes) -> TaskData:
    """A synthetic :class:`TaskData` of kind ``task`` built from the generators above, deterministic given ``seed``.

    - ``"image"``: ``n`` quadrant images (4 classes; option ``image_size``), min-max scaled to ``[0, 1]``
    - ``"text"``: ``n`` counting runs of ``length`` tokens modulo ``vocab_size``, concatenated into one stream
    - ``"sequence"``: ``n`` marker sentences of ``length`` tokens (label: contains token 1; options ``length``,
      ``vocab_size``)
    - ``"graph"``: a stochastic block model on ``n`` nodes (options ``classes``, ``features``, ``p_in``, ``p_out``),
      its edges symmetrised

    Examples (runs for ``"text"``) are split 80/10/10 in order; graph nodes 60/20/20 at random by ``seed``.
    """
    if task not in SIZE_OPTIONS:
        raise ValueError(f"synthetic task must be one of {', '.join(map(repr, SIZE_OPTIONS))}, got {task!r}.")
    n = check_int("n", n, minimum=10)
    seed = check_int("seed", seed, minimum=0)
    sizes = _check_sizes(task, sizes)
    if _numbers(task, n, sizes) > MAX_NUMBERS:
        shaped = {"n": n, **{k: v for k, v in sizes.items() if k in ("image_size", "length", "features")}}
        given = ", ".join(f"{k}={v}" for k, v in shaped.items())
        raise ValueError(
            f"synthetic task {task!r} with {given} generates {_numbers(task, n, sizes)} numbers, more than the "
            f"{MAX_NUMBERS} a synthetic task may (it is for smoke tests); make n or the item size smaller."
        )
    parts = dict(zip(SPLITS, _cut(n)))
    name = f"synthetic_{task}"

    if task == "image":
        images, labels = quadrant_images(n, sizes["image_size"], seed=seed)
        images = (images - images.min()) / (images.max() - images.min())  # into [0, 1], as the image kind promises
        splits = {s: (images[part], labels[part]) for s, part in parts.items()}
        meta = {"name": name, "image_size": sizes["image_size"], "in_chans": 1, "num_classes": 4}
        return TaskData("image", splits, meta)
    if task == "text":
        runs = counting_sequences(n, sizes["length"], sizes["vocab_size"], seed=seed)
        splits = {s: (runs[part].flatten(),) for s, part in parts.items()}
        meta = {"name": name, "vocab_size": sizes["vocab_size"], "itos": list(ALPHABET[: sizes["vocab_size"]])}
        return TaskData("text", splits, meta)
    if task == "sequence":
        vocab_size, length = sizes["vocab_size"], sizes["length"]
        tokens, labels = marker_sentences(n, length, vocab_size, marker=1, pad_id=0, seed=seed)
        splits = {s: (tokens[part], labels[part]) for s, part in parts.items()}
        vocab = ["[PAD]", "[MARKER]", *(f"w{i}" for i in range(2, vocab_size))]
        meta = {
            "name": name,
            "vocab_size": vocab_size,
            "max_len": length,
            "pad_id": 0,
            "num_classes": 2,
            "vocab": vocab,
        }
        return TaskData("sequence", splits, meta)

    features, edge_index, labels = stochastic_block_graph(n, seed=seed, **sizes)
    edge_index = torch.unique(torch.cat([edge_index, edge_index.flip(0)], dim=1), dim=1)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    n_val = n_test = n // 5
    cuts = {
        "train": order[: n - n_val - n_test],
        "val": order[n - n_val - n_test : n - n_test],
        "test": order[n - n_test :],
    }
    splits = {s: (index.sort().values,) for s, index in cuts.items()}
    meta = {"name": name, "in_features": sizes["features"], "num_classes": sizes["classes"], "num_nodes": n}
    return TaskData("graph", splits, meta, graph=(features, edge_index, labels))
