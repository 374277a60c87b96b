"""Tiny Shakespeare for character-level language modelling (nanoGPT's ``shakespeare_char``).

The file ``<root>/text/tinyshakespeare.txt`` (1,115,394 characters, 65 symbols) is ``data/tinyshakespeare/input.txt``
from github.com/karpathy/char-rnn; ``odeformer-data shakespeare`` downloads it.
"""

from __future__ import annotations

import os

import numpy as np
import torch

from ._common import TaskData, one_line, require_file, resolve_root, split_sizes

SOURCE = (
    "run `odeformer-data shakespeare`, or save github.com/karpathy/char-rnn data/tinyshakespeare/input.txt as "
    "<root>/text/tinyshakespeare.txt"
)


def encode(text: str, itos: list[str]) -> torch.Tensor:
    """``text`` as int64 character ids under the sorted vocabulary ``itos`` (every character must be in it)."""
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    alphabet = np.array([ord(ch) for ch in itos], dtype=np.uint32)
    return torch.from_numpy(np.searchsorted(alphabet, codes).astype(np.int64))


def shakespeare(
    root: str | os.PathLike | None = None, val_fraction: float = 0.05, test_fraction: float = 0.05
) -> TaskData:
    """Text task: one character stream per split, cut contiguously as train | val | test.

    The vocabulary is the sorted set of all characters in the file (65), so ``itos[i]`` is character ``i``. The last
    ``floor(L * test_fraction)`` characters are the test split, the ``floor(L * val_fraction)`` before them the
    validation split; the three streams concatenate to the whole text. An empty file, or one too short to give a
    split of positive fraction at least one character, is a ValueError naming it.
    """
    path = require_file(
        resolve_root(root, "shakespeare", "text/tinyshakespeare.txt") / "text" / "tinyshakespeare.txt",
        "shakespeare",
        SOURCE,
    )
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"shakespeare: {path} is not UTF-8 text ({one_line(error)}); {SOURCE}.") from None
    if not text:
        raise ValueError(f"shakespeare: {path} is empty; {SOURCE}.")
    n_train, n_val, n_test = split_sizes(len(text), val_fraction, test_fraction)
    for split, size, fraction in (("val", n_val, val_fraction), ("test", n_test, test_fraction)):
        if fraction > 0 and size == 0:
            raise ValueError(
                f"shakespeare: {path} has {len(text)} characters, too few for a {split} split of {fraction} "
                f"(it would be empty); use a longer text or {split}_fraction=0."
            )
    itos = sorted(set(text))
    tokens = encode(text, itos)
    splits = {
        "train": (tokens[:n_train],),
        "val": (tokens[n_train : n_train + n_val],),
        "test": (tokens[n_train + n_val :],),
    }
    meta = {"name": "shakespeare", "vocab_size": len(itos), "itos": itos}
    return TaskData("text", splits, meta)
