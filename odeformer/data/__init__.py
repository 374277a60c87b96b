"""Datasets for the task models. Every loader reads local files or generates data; nothing is downloaded at load time.

``load(name, root=None, **options)`` returns a :class:`TaskData`: its ``kind`` (``image``, ``text``, ``sequence`` or
``graph``) says which task model it feeds, ``splits`` holds the train/val/test tensors and ``meta`` the sizes a model
needs (``num_classes``, ``vocab_size``, ...). Loaders that read files take their folder from ``root``, else from the
``ODEFORMER_DATA`` environment variable; see each loader for the layout under it and where the files come from.

The command ``odeformer-data`` (:mod:`odeformer.app.commands.data`; ``make data``) fills that folder: it downloads Cora,
Tiny Shakespeare and SST-2 from their canonical sources (:mod:`odeformer.data.sources`), verifies each file's SHA-256,
resumes broken downloads and skips files already present; ``odeformer-data --list`` says what is present, missing
or corrupt, and where.

>>> data = load("digits")
>>> images, labels = data.splits["train"]
>>> images.shape[1:], data.meta["num_classes"]
(torch.Size([1, 8, 8]), 10)
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
from collections.abc import Callable
from typing import Any, NamedTuple

from ._common import ENV_VAR, DatasetNotFound, TaskData
from ._common import one_line as one_line  # the one-line error text odeformer-data writes too


class Dataset(NamedTuple):
    """A registered dataset: its loader and the kind of data it gives, known before any file is read."""

    loader: Callable[..., TaskData]
    kind: str | None  # None: the loader's ``task`` option says (synthetic)


_LOADERS = {
    "digits": "image",
    "fashion_mnist": "image",
    "planetoid": "graph",
    "shakespeare": "text",
    "sst2": "sequence",
    "synthetic": None,
}
"""Each registered dataset and the kind of data it gives. Its loader is the function of its name in the module of
its name (``odeformer.data.planetoid.planetoid``), reached through :func:`load` or :data:`DATASETS`."""


@functools.cache
def _datasets() -> dict[str, Dataset]:
    """:data:`DATASETS`, made on first use: a loader's module (and torch) is imported only when a dataset is needed,
    so that ``import odeformer.data`` (``odeformer-data``'s own start) loads neither."""
    table = {}
    for name, kind in _LOADERS.items():
        table[name] = Dataset(getattr(importlib.import_module(f".{name}", __name__), name), kind)
    return table


def __getattr__(name: str) -> Any:
    if name == "DATASETS":  # every registered dataset by name: its loader and its kind
        return _datasets()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def data_kind(name: str, options: dict[str, Any] | None = None) -> str | None:
    """The kind of data ``load(name, **options)`` gives, without loading it (None: an unknown dataset)."""
    dataset = _datasets().get(name)
    if dataset is None:
        return None
    return dataset.kind or (options or {}).get("task") or inspect.signature(dataset.loader).parameters["task"].default


def load(name: str, root: str | os.PathLike | None = None, /, **options: Any) -> TaskData:
    """The dataset ``name`` from :data:`DATASETS`, built with ``options`` (the loader's keyword arguments).

    ``root`` is the data folder for loaders that read files (positional or ``root=``); when it is None they use
    ``$ODEFORMER_DATA`` (``fashion_mnist`` then falls back to the Debian package's folder). ``digits`` and
    ``synthetic`` ignore it. ``name`` is positional only, so that ``load("planetoid", name="citeseer")`` reaches the
    loader's own ``name`` option.
    """
    dataset = _datasets().get(name) if isinstance(name, str) else None
    if dataset is None:
        raise ValueError(f"unknown dataset {name!r}; choose one of: {', '.join(_LOADERS)}.")
    if "root" in options:
        if root is not None:
            raise TypeError("load() got root twice (positionally and as root=); pass it once.")
        root = options.pop("root")
    loader = dataset.loader
    parameters = inspect.signature(loader).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        allowed = [p for p in parameters if p != "root"]
        unknown = sorted(set(options) - set(allowed))
        if unknown:
            raise TypeError(
                f"dataset {name!r} got unknown option(s) {', '.join(unknown)}; allowed: {', '.join(allowed) or 'none'}."
            )
    if "root" in parameters:
        options["root"] = root
    return loader(**options)


__all__ = [
    "DATASETS",
    "ENV_VAR",
    "Dataset",
    "DatasetNotFound",
    "TaskData",
    "data_kind",
    "load",
]
