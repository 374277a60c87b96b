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

import inspect
import os
from collections.abc import Callable
from typing import Any, NamedTuple

from ._common import ENV_VAR, DatasetNotFound, TaskData
from ._common import one_line as one_line  # the one-line error text odeformer-data writes too
from .digits import digits
from .fashion_mnist import fashion_mnist
from .planetoid import planetoid
from .shakespeare import shakespeare
from .sst2 import sst2
from .synthetic import synthetic


class Dataset(NamedTuple):
    """A registered dataset: its loader and the kind of data it gives, known before any file is read."""

    loader: Callable[..., TaskData]
    kind: str | None  # None: the loader's ``task`` option says (synthetic)


DATASETS: dict[str, Dataset] = {
    "digits": Dataset(digits, "image"),
    "fashion_mnist": Dataset(fashion_mnist, "image"),
    "planetoid": Dataset(planetoid, "graph"),
    "shakespeare": Dataset(shakespeare, "text"),
    "sst2": Dataset(sst2, "sequence"),
    "synthetic": Dataset(synthetic, None),
}


def data_kind(name: str, options: dict[str, Any] | None = None) -> str | None:
    """The kind of data ``load(name, **options)`` gives, without loading it (None: an unknown dataset)."""
    dataset = DATASETS.get(name)
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
    dataset = DATASETS.get(name) if isinstance(name, str) else None
    if dataset is None:
        raise ValueError(f"unknown dataset {name!r}; choose one of: {', '.join(DATASETS)}.")
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
    "digits",
    "fashion_mnist",
    "load",
    "planetoid",
    "shakespeare",
    "sst2",
    "synthetic",
]
