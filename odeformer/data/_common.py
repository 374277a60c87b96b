"""What every loader shares: the :class:`TaskData` container, :class:`DatasetNotFound`, the data root and argument
checks. Error messages are one line that says what was wrong and how to fix it."""

from __future__ import annotations

import math
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import Tensor

ENV_VAR = "ODEFORMER_DATA"
KINDS = ("image", "text", "sequence", "graph")
SPLITS = ("train", "val", "test")


@dataclass
class TaskData:
    """A dataset ready for one task model.

    ``kind`` says what the tensors in ``splits[s]`` are (``s`` in train/val/test):

    - ``"image"``: ``(images float32 (N, C, H, W) in [0, 1], labels int64 (N,))``
    - ``"text"``: ``(tokens int64 (L,),)``, one token stream for a causal LM
    - ``"sequence"``: ``(tokens int64 (N, T), labels int64 (N,))``, right-padded with ``meta["pad_id"]``
    - ``"graph"``: ``(node_index int64 (n,),)`` into the one graph held in ``graph``:
      ``(features float32 (N, F), edge_index int64 (2, E), labels int64 (N,))``
    """

    kind: str
    splits: dict[str, tuple[Tensor, ...]]
    meta: dict[str, Any] = field(default_factory=dict)
    graph: tuple[Tensor, Tensor, Tensor] | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"TaskData kind must be one of {', '.join(KINDS)}, got {self.kind!r}.")
        if tuple(self.splits) != SPLITS:
            raise ValueError(f"TaskData splits must have keys exactly {', '.join(SPLITS)}, got {list(self.splits)}.")
        if (self.graph is not None) != (self.kind == "graph"):
            raise ValueError("TaskData.graph must be set for kind 'graph' and only for it.")


class DatasetNotFound(FileNotFoundError):
    """A file or folder a loader needs is missing; the message names it and says how to get it."""


def one_line(text: object) -> str:
    """``text`` with its whitespace runs (newlines included) collapsed, for embedding in an error message."""
    return " ".join(str(text).split())


FETCH = {"shakespeare": "shakespeare", "sst2": "sst2", "planetoid": "cora"}
"""The ``odeformer-data`` name of each file-based dataset's files (Planetoid: Cora's)."""


def resolve_root(root: str | os.PathLike | None, dataset: str, expects: str) -> Path:
    """The data root: ``root`` if given, else ``$ODEFORMER_DATA``; raise :class:`DatasetNotFound` if neither is set
    or the folder does not exist. ``expects`` names what the loader reads under it (for the message)."""
    if root is None or str(root) == "":
        root = os.environ.get(ENV_VAR) or None
    if root is None:
        raise DatasetNotFound(
            f"{dataset} reads files from a data root, but none was given: set {ENV_VAR} or data.root to the folder "
            f"holding {expects} (`odeformer-data {FETCH.get(dataset, '')} --root DIR` downloads them there)."
        )
    path = Path(root).expanduser()
    if not path.is_dir():
        what = "is a file, not a folder" if path.exists() else "does not exist"
        raise DatasetNotFound(
            f"{dataset}: data root {path} {what}; set {ENV_VAR} or data.root to the folder holding {expects} "
            f"(`odeformer-data {FETCH.get(dataset, '')} --root DIR` downloads them there)."
        )
    return path


def require_file(path: Path, dataset: str, source: str) -> Path:
    """``path`` if it is a file, else :class:`DatasetNotFound` naming it and where the files come from."""
    if path.is_file():
        return path
    if not os.path.lexists(path):
        raise DatasetNotFound(f"{dataset}: missing {path}; {source}.")
    mode = os.lstat(path).st_mode
    if stat.S_ISLNK(mode):
        target = os.readlink(path)
        what = (
            f"a link to {target}, which is not a regular file" if os.path.exists(path) else f"a broken link to {target}"
        )
    elif stat.S_ISDIR(mode):
        what = "a folder"
    elif stat.S_ISFIFO(mode):
        what = "a FIFO"
    else:
        what = "a device or special file"
    raise ValueError(f"{dataset}: {path} is {what}, not a data file; replace it with the file ({source}).")


def check_int(name: str, value: Any, minimum: int | None = None) -> int:
    """``value`` as an int (bools and floats refused), at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}.")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}.")
    return value


def split_sizes(n: int, val_fraction: float, test_fraction: float) -> tuple[int, int, int]:
    """``(n_train, n_val, n_test)`` for ``n`` items; each fraction in ``[0, 1)`` and their sum below 1."""
    for name, value in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
            raise ValueError(f"{name} must be a number in [0, 1), got {value!r}.")
    if val_fraction + test_fraction >= 1:
        raise ValueError(
            f"val_fraction + test_fraction must be below 1 to leave training data, got {val_fraction + test_fraction}."
        )
    n_val, n_test = math.floor(n * val_fraction), math.floor(n * test_fraction)
    return n - n_val - n_test, n_val, n_test
