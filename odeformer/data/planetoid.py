"""Planetoid citation graphs (Cora, CiteSeer, PubMed) with the standard split of Yang et al. (2016), read as in
Kipf & Welling's ``gcn/utils.py:load_data``.

The files ``<root>/planetoid/ind.<name>.{x,y,tx,ty,allx,ally,graph,test.index}`` are Python 2 pickles (features as
``scipy.sparse`` matrices, labels one-hot, the graph a dict of adjacency lists) plus a text file of test node ids.
They come from github.com/kimiyoung/planetoid (``data/``); ``odeformer-data cora`` downloads Cora's.

A damaged file is a one-line error naming it and what is wrong, never a crash or silently wrong features: every
matrix is checked before it is used (its shape against the other files', a sparse matrix's ``indptr`` rising from 0
to its number of entries, its column indices in range, its values finite, its dense size bounded). Files that differ
from the published ones (the SHA-256 sums ``odeformer-data --list`` checks) are read, with one warning.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ._common import TaskData, check_int, one_line, require_file, resolve_root

SOURCE = (
    "run `odeformer-data cora` (Cora), or get the ind.<name>.* files from github.com/kimiyoung/planetoid (data/) into "
    "<root>/planetoid/"
)
PICKLES = ("x", "y", "tx", "ty", "allx", "ally", "graph")
SPLITS = ("public", "random", "difformer")
NUM_VAL = 500  # Kipf's validation split: the 500 nodes after the labelled training nodes
MAX_ENTRIES = 1 << 29  # a feature or label matrix's dense size at most (PubMed's allx: 9.4e6; 4 GB as float64)

_SPARSE = {"csr_matrix", "csc_matrix", "coo_matrix", "lil_matrix", "dok_matrix", "bsr_matrix", "dia_matrix"}
_ALLOWED = {
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "scalar"),
    ("collections", "defaultdict"),
    ("collections", "OrderedDict"),
    ("copyreg", "_reconstructor"),
    ("_codecs", "encode"),  # bytes in protocol-2 pickles written by Python 3
    *(("builtins", name) for name in ("list", "dict", "set", "tuple", "int", "float", "object")),
}


class _PlanetoidUnpickler(pickle.Unpickler):
    """Unpickles only numpy arrays, scipy sparse matrices and plain containers; maps the Python 2 / old scipy module
    names (``__builtin__``, ``copy_reg``, ``scipy.sparse.csr``) to today's."""

    def find_class(self, module: str, name: str) -> Any:
        module = {"__builtin__": "builtins", "copy_reg": "copyreg"}.get(module, module)
        if (module == "scipy.sparse" or module.startswith("scipy.sparse.")) and name in _SPARSE:
            import scipy.sparse

            return getattr(scipy.sparse, name)
        if (module, name) in _ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}, which a planetoid file never holds")


def _unpickle(path: Path) -> Any:
    try:
        with open(path, "rb") as f:
            return _PlanetoidUnpickler(f, encoding="latin1").load()
    except Exception as error:  # a corrupt pickle can fail in many ways; all mean the same to the user
        raise ValueError(f"planetoid: cannot unpickle {path} ({one_line(error)}); {SOURCE}.") from None


def _read_index(path: Path) -> np.ndarray:
    try:
        return np.array([int(line) for line in path.read_text().split()], dtype=np.int64)
    except (ValueError, UnicodeDecodeError) as error:
        raise ValueError(f"planetoid: {path} must hold one integer node id per line ({one_line(error)}).") from None


def _bad(path: Path, what: str) -> ValueError:
    return ValueError(f"planetoid: {path} {what}; {SOURCE}.")


def _vector(state: dict, key: str, path: Path, kinds: str) -> np.ndarray:
    array = state.get(key)
    if not isinstance(array, np.ndarray) or array.ndim != 1 or array.dtype.kind not in kinds:
        shown = f"a {array.ndim}-D {array.dtype} array" if isinstance(array, np.ndarray) else type(array).__name__
        wanted = "integer" if kinds == "iu" else "numeric"
        raise _bad(path, f"holds a sparse matrix whose {key} is {shown}, not a 1-D {wanted} array")
    return array


def _shape(obj: Any, path: Path) -> tuple[int, int]:
    """The ``(rows, columns)`` a matrix (sparse or dense) claims, checked: two sizes, their product bounded."""
    shape = vars(obj).get("_shape") if not isinstance(obj, np.ndarray) else obj.shape
    if not isinstance(obj, np.ndarray) and shape is None:
        shape = vars(obj).get("shape")
    sizes = isinstance(shape, tuple) and len(shape) == 2
    if not (sizes and all(isinstance(n, (int, np.integer)) and n >= 0 for n in shape)):
        raise _bad(path, f"must hold a 2-D matrix, but it claims the shape {shape!r}")
    rows, cols = int(shape[0]), int(shape[1])
    if rows * cols > MAX_ENTRIES:
        raise _bad(
            path,
            f"claims a {rows} x {cols} matrix ({rows * cols:.3g} entries, {rows * cols * 8 / 1e9:.3g} GB dense), more "
            f"than a planetoid matrix holds (at most {MAX_ENTRIES:.3g} entries)",
        )
    return rows, cols


def _sparse(obj: Any, path: Path, shape: tuple[int, int]) -> Any:
    """A CSR, CSC or COO matrix rebuilt from its checked parts: ``indptr`` rises from 0 to the number of entries,
    every index is in range, every value finite (scipy's own conversion trusts them, and writes out of bounds)."""
    import scipy.sparse

    kind = type(obj).__name__
    state = vars(obj)
    data = _vector(state, "data", path, "biuf")
    if kind == "coo_matrix":
        coords = state.get("coords")
        row, col = coords if isinstance(coords, tuple) and len(coords) == 2 else (state.get("row"), state.get("col"))
        row = _vector({"row": row}, "row", path, "iu")
        col = _vector({"col": col}, "col", path, "iu")
        if not len(row) == len(col) == len(data):
            raise _bad(path, f"holds a COO matrix with {len(row)} rows, {len(col)} columns and {len(data)} values")
        for name, index, size in (("row", row, shape[0]), ("column", col, shape[1])):
            if len(index) and (index.min() < 0 or index.max() >= size):
                bad = int(index.min() if index.min() < 0 else index.max())
                raise _bad(path, f"has a {name} index {bad} outside 0..{size - 1}")
        matrix = scipy.sparse.coo_matrix((data, (row, col)), shape=shape)
    elif kind in ("csr_matrix", "csc_matrix"):
        major, minor = shape if kind == "csr_matrix" else shape[::-1]
        along, across = ("row", "column") if kind == "csr_matrix" else ("column", "row")
        indptr, indices = _vector(state, "indptr", path, "iu"), _vector(state, "indices", path, "iu")
        if len(indptr) != major + 1:
            raise _bad(path, f"has an indptr of {len(indptr)} entries for {major} {along}s (it needs {major + 1})")
        steps = np.diff(indptr.astype(np.int64))
        if indptr[0] != 0 or (steps < 0).any():
            where = 0 if indptr[0] != 0 else int(np.argmax(steps < 0)) + 1
            raise _bad(path, f"has an indptr that does not rise from 0 (entry {where} is {int(indptr[where])})")
        if not int(indptr[-1]) == len(indices) == len(data):
            raise _bad(
                path, f"has an indptr ending at {int(indptr[-1])}, but {len(indices)} indices and {len(data)} values"
            )
        if len(indices) and (indices.min() < 0 or indices.max() >= minor):
            bad = int(indices.min() if indices.min() < 0 else indices.max())
            raise _bad(path, f"has a {across} index {bad} outside 0..{minor - 1}")
        make = scipy.sparse.csr_matrix if kind == "csr_matrix" else scipy.sparse.csc_matrix
        matrix = make((data, indices, indptr), shape=shape)
    else:
        raise _bad(path, f"holds a {kind}; a planetoid feature file holds a CSR matrix (or CSC, COO)")
    if not np.isfinite(data).all():
        raise _bad(path, "holds values that are NaN or infinite")
    return matrix


def _matrix(obj: Any, path: Path, shape: tuple[int, int]) -> np.ndarray:
    """``obj`` (a sparse or dense matrix whose ``shape`` :func:`_shape` checked) as a dense 2-D array, after checking
    it (:func:`_sparse`)."""
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind not in "biuf":
            raise _bad(path, f"must hold a numeric matrix, got {obj.dtype}")
        if not np.isfinite(obj).all():
            raise _bad(path, "holds values that are NaN or infinite")
        return obj
    return np.asarray(_sparse(obj, path, shape).toarray())


def _is_matrix(obj: Any) -> bool:
    return isinstance(obj, np.ndarray) or type(obj).__name__ in _SPARSE


_PUBLISHED: dict[tuple[str, int, int], bool] = {}  # (file, size, mtime) -> whether it is the published file


def _check_published(name: str, folder: Path, paths: dict[str, Path]) -> None:
    """Warn once (per file as it is on disk) when a file differs from the published one (its SHA-256, as
    ``odeformer-data --list`` checks): it is read all the same."""
    from . import sources

    published = {Path(remote.path).name: remote for remote in sources.SOURCES.get(name, ())}
    differ = []
    for path in paths.values():
        remote = published.get(path.name)
        if remote is None:
            continue
        stat = path.stat()
        key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
        if key in _PUBLISHED:
            continue
        same = stat.st_size == remote.size and hashlib.sha256(path.read_bytes()).hexdigest() == remote.sha256
        _PUBLISHED[key] = same
        if not same:
            differ.append(path.name)
    if differ:
        warnings.warn(
            f"planetoid: {', '.join(differ)} in {folder} differ from the published files (SHA-256, as "
            f"`odeformer-data --list` checks); reading them anyway (`odeformer-data {name} --force` fetches them "
            "again).",
            stacklevel=3,
        )


def _check_shapes(shapes: dict[str, tuple[int, int]], paths: dict[str, Path], tests: int) -> None:
    """The files' shapes agree: x, tx and allx have one width (the features), y, ty and ally another (the classes);
    x and y have a row per training node, allx and ally a row per known node, tx and ty a row per test id."""
    pairs = [
        ("x", "allx", 1, "columns (features)"),
        ("tx", "allx", 1, "columns (features)"),
        ("y", "ally", 1, "columns (classes)"),
        ("ty", "ally", 1, "columns (classes)"),
        ("x", "y", 0, "rows (training nodes)"),
        ("allx", "ally", 0, "rows (known nodes)"),
        ("tx", "ty", 0, "rows (test nodes)"),
    ]
    for part, other, axis, what in pairs:
        if shapes[part][axis] != shapes[other][axis]:
            has = f"has {shapes[part][axis]} {what}, but {paths[other].name} has {shapes[other][axis]}"
            raise _bad(paths[part], has)
    if shapes["tx"][0] != tests:
        listed = f"but {paths['test.index'].name} lists {tests} ids"
        raise _bad(paths["tx"], f"has {shapes['tx'][0]} rows (test nodes), {listed}")


def _edge_index(graph: dict, num_nodes: int, path: Path) -> np.ndarray:
    """``(2, E)`` edges of the adjacency lists, both directions, without self loops or duplicates, sorted."""
    try:
        src = np.fromiter((int(node) for node, nbrs in graph.items() for _ in nbrs), dtype=np.int64)
        dst = np.fromiter((int(nbr) for nbrs in graph.values() for nbr in nbrs), dtype=np.int64)
    except (TypeError, ValueError, OverflowError) as error:
        raise ValueError(
            f"planetoid: {path} must hold a dict of node ids to lists of node ids ({one_line(error)}); {SOURCE}."
        ) from None
    edges = np.stack([np.concatenate([src, dst]), np.concatenate([dst, src])])
    if edges.size and (edges.min() < 0 or edges.max() >= num_nodes):
        bad = edges.min() if edges.min() < 0 else edges.max()
        raise ValueError(f"planetoid: {path} names node {bad}, but the nodes are 0..{num_nodes - 1}.")
    edges = edges[:, edges[0] != edges[1]]
    return np.unique(edges, axis=1)


def _random_split(
    labels: torch.Tensor,
    labelled: torch.Tensor,
    seed: int,
    per_class: int,
    num_val: int,
    num_test: int,
    path: Path,
    pool: str,
) -> dict[str, tuple[torch.Tensor]]:
    """``per_class`` random labelled nodes of each class (train), then ``num_val`` and ``num_test`` of the rest.

    The rest is shuffled from node-id order (``pool="sorted"``) or from the order the per-class draws left it in,
    class after class (``pool="drawn"``: DIFFormer's ``class_rand_splits``, so that a seed gives the split that code
    draws after ``torch.manual_seed(seed)``, on the same PyTorch random-permutation algorithm)."""
    g = torch.Generator().manual_seed(seed)
    train, leftovers = [], []
    for c in range(int(labels.max()) + 1):
        members = torch.nonzero((labels == c) & labelled).flatten()
        if len(members) < per_class:
            raise ValueError(
                f"planetoid: class {c} has {len(members)} labelled nodes in {path}, fewer than {per_class}."
            )
        drawn = members[torch.randperm(len(members), generator=g)]
        train.append(drawn[:per_class])
        leftovers.append(drawn[per_class:])
    train, rest = torch.cat(train), torch.cat(leftovers)  # every labelled node not drawn for training
    if pool == "sorted":
        rest = rest.sort().values
    if len(rest) < num_val + num_test:
        raise ValueError(
            f"planetoid: {len(rest)} labelled nodes remain after the train split, fewer than {num_val} + {num_test}."
        )
    rest = rest[torch.randperm(len(rest), generator=g)]
    return {
        "train": (train.sort().values,),
        "val": (rest[:num_val].sort().values,),
        "test": (rest[num_val : num_val + num_test].sort().values,),
    }


def planetoid(
    root: str | os.PathLike | None = None,
    name: str = "cora",
    split: str = "public",
    seed: int = 0,
    per_class: int = 20,
    num_val: int = 500,
    num_test: int = 1000,
) -> TaskData:
    """Transductive node classification on the Planetoid graph ``name`` (``cora``, ``citeseer``, ``pubmed``).

    Features are ``allx`` stacked on ``tx``, with test rows placed at their ids from ``test.index``; ids the index
    skips (isolated CiteSeer nodes) get zero features and label 0, and belong to no split, as in Kipf's loader.
    Features are row-normalised (rows sum to 1, empty rows stay 0); ``edge_index`` is symmetric, without self loops
    or duplicates.

    ``split="public"`` (Planetoid's): train = the first ``len(y)`` nodes (140 for Cora), val = the next 500, test =
    the sorted test ids (1000). ``split="random"`` (the protocol of DIFFormer's ``class_rand_splits``): ``per_class``
    random nodes of every class for training, then ``num_val`` and ``num_test`` random nodes of the rest, drawn from
    ``seed`` — one fixed split per seed, whatever the model's seed. ``split="difformer"`` draws the same way in that
    code's order, so that ``seed=123`` (its ``run.sh``) is its Cora split when PyTorch permutes as it did there; on
    CiteSeer it still differs, because that code also draws the isolated nodes (as class 0) and this loader does not.
    """
    if split not in SPLITS:
        raise ValueError(f"planetoid split must be one of {', '.join(map(repr, SPLITS))}, got {split!r}.")
    for label, value in (("seed", seed), ("per_class", per_class), ("num_val", num_val), ("num_test", num_test)):
        check_int(f"planetoid {label}", value, 0 if label == "seed" else 1)
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_-]+", name):
        raise ValueError(f"planetoid name must be a dataset name such as 'cora', 'citeseer' or 'pubmed', got {name!r}.")
    name = name.lower()
    folder = resolve_root(root, "planetoid", f"planetoid/ind.{name}.*") / "planetoid"
    paths = {
        part: require_file(folder / f"ind.{name}.{part}", "planetoid", SOURCE) for part in (*PICKLES, "test.index")
    }
    _check_published(name, folder, paths)
    loaded = {part: _unpickle(paths[part]) for part in PICKLES[:-1]}
    for part, obj in loaded.items():
        if not _is_matrix(obj):
            raise _bad(paths[part], f"must hold a 2-D matrix, got {type(obj).__name__}")
    shapes = {part: _shape(obj, paths[part]) for part, obj in loaded.items()}
    test_index = _read_index(paths["test.index"])
    _check_shapes(shapes, paths, len(test_index))
    x, y, tx, ty, allx, ally = (_matrix(loaded[part], paths[part], shapes[part]) for part in PICKLES[:-1])
    graph = _unpickle(paths["graph"])

    n_known, n_train = len(allx), len(y)
    if n_train == 0:
        raise ValueError(f"planetoid: {paths['y']} has no labelled nodes (0 rows), so the train split would be empty.")
    if n_train + NUM_VAL > n_known:
        raise ValueError(f"planetoid: {paths['allx']} has {n_known} rows, fewer than {n_train} train + {NUM_VAL} val.")
    if len(test_index) == 0 or test_index.min() < n_known or len(np.unique(test_index)) != len(test_index):
        raise ValueError(
            f"planetoid: {paths['test.index']} must list distinct test ids from {n_known} (= rows of allx) upwards."
        )
    if not isinstance(graph, dict):
        raise ValueError(
            f"planetoid: {paths['graph']} must hold a dict of adjacency lists, got {type(graph).__name__}."
        )

    if int(test_index.max()) >= n_known + 2 * len(test_index):  # the published graphs leave a few ids unused
        raise ValueError(
            f"planetoid: {paths['test.index']} lists test id {int(test_index.max())}, beyond the {n_known} known and "
            f"{len(test_index)} test nodes (ids below {n_known + 2 * len(test_index)}); {SOURCE}."
        )
    num_nodes = int(test_index.max()) + 1
    features = np.zeros((num_nodes, allx.shape[1]), dtype=np.float32)
    one_hot = np.zeros((num_nodes, ally.shape[1]), dtype=np.float32)
    features[:n_known], one_hot[:n_known] = allx, ally
    features[test_index], one_hot[test_index] = tx, ty  # row k of tx is node test_index[k]

    rowsum = features.sum(axis=1, keepdims=True)
    features = np.divide(features, rowsum, out=np.zeros_like(features), where=rowsum != 0)
    edge_index = _edge_index(graph, num_nodes, paths["graph"])

    labels = torch.from_numpy(one_hot.argmax(axis=1).astype(np.int64))
    if split == "public":
        splits = {
            "train": (torch.arange(n_train),),
            "val": (torch.arange(n_train, n_train + NUM_VAL),),
            "test": (torch.from_numpy(np.sort(test_index)),),
        }
    else:
        labelled = torch.from_numpy(one_hot.sum(axis=1) > 0)
        pool = "drawn" if split == "difformer" else "sorted"
        splits = _random_split(labels, labelled, seed, per_class, num_val, num_test, paths["ally"], pool)
    graph_tensors = (torch.from_numpy(features), torch.from_numpy(edge_index), labels)
    meta = {"name": name, "in_features": features.shape[1], "num_classes": one_hot.shape[1], "num_nodes": num_nodes}
    return TaskData("graph", splits, meta, graph=graph_tensors)
