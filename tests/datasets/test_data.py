"""Dataset loaders: the TaskData contract (kinds, shapes, dtypes, meta), split sizes, determinism, one-line errors.

Parsing, validation and error paths run everywhere on tiny files in the real formats (``tiny_root`` and
``write_data`` in conftest). Tests marked ``data`` check the real files under ``$ODEFORMER_DATA`` (``odeformer-data``
fetches them): they are skipped, saying so, where no data root is set, and fail where one was given without the files.
Fashion-MNIST comes from the Debian package ``dataset-fashion-mnist`` (its tests are skipped only where the package
is not installed).
"""

import gzip
import os
import pathlib
import pickle
import pickletools
import subprocess
import sys
import types

import conftest
import numpy as np
import pytest
import scipy.sparse as sp
import torch

from helpers import HANG
from odeformer.data import DATASETS, DatasetNotFound, TaskData, load
from odeformer.data.fashion_mnist import DEFAULT_DIR, FILES
from odeformer.data.synthetic import SIZE_OPTIONS

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEBIAN_FASHION = all((DEFAULT_DIR / name).is_file() for pair in FILES.values() for name in pair)
needs_fashion = pytest.mark.skipif(not DEBIAN_FASHION, reason="apt-get install dataset-fashion-mnist")

META_KEYS = {
    "image": {"name", "image_size", "in_chans", "num_classes"},
    "text": {"name", "vocab_size", "itos"},
    "sequence": {"name", "vocab_size", "max_len", "pad_id", "num_classes", "vocab"},
    "graph": {"name", "in_features", "num_classes", "num_nodes"},
}


@pytest.fixture(scope="session")
def data_root():
    """The real data root (only reached by tests marked ``data``, which conftest skips or fails without it)."""
    return pathlib.Path(os.environ["ODEFORMER_DATA"])


@pytest.fixture(scope="module")
def cora(data_root):
    return load("planetoid", data_root, name="cora")


@pytest.fixture(scope="module")
def shakespeare(data_root):
    return load("shakespeare", data_root)


@pytest.fixture(scope="module")
def sst2(data_root):
    return load("sst2", data_root)


@pytest.fixture(scope="module")
def fashion():
    return load("fashion_mnist")


def _one_line(info, *parts):
    message = str(info.value)
    assert "\n" not in message, message
    for part in parts:
        assert str(part) in message, message
    return message


def _same(a: TaskData, b: TaskData) -> bool:
    tensors = [(a.splits[s], b.splits[s]) for s in a.splits] + ([(a.graph, b.graph)] if a.graph else [])
    return all(torch.equal(x, y) for pa, pb in tensors for x, y in zip(pa, pb, strict=True))


def check_contract(data: TaskData) -> None:
    """What the training loop relies on, per kind."""
    assert list(data.splits) == ["train", "val", "test"]
    assert META_KEYS[data.kind] <= set(data.meta), set(data.meta)
    meta = data.meta
    for split in data.splits.values():
        if data.kind == "image":
            images, labels = split
            size = meta["image_size"]
            assert images.dtype == torch.float32 and images.shape[1:] == (meta["in_chans"], size, size)
            assert images.min() >= 0 and images.max() <= 1
            assert labels.dtype == torch.int64 and labels.shape == images.shape[:1]
            assert labels.min() >= 0 and labels.max() < meta["num_classes"]
        elif data.kind == "text":
            (tokens,) = split
            assert tokens.dtype == torch.int64 and tokens.dim() == 1 and len(tokens) > 0
            assert tokens.min() >= 0 and tokens.max() < meta["vocab_size"] == len(meta["itos"])
        elif data.kind == "sequence":
            tokens, labels = split
            assert tokens.dtype == labels.dtype == torch.int64
            assert tokens.shape == (len(labels), meta["max_len"])
            assert tokens.min() >= 0 and tokens.max() < meta["vocab_size"] == len(meta["vocab"])
            assert labels.min() >= 0 and labels.max() < meta["num_classes"]
            padded = tokens == meta["pad_id"]
            assert torch.equal(padded, padded.cummax(dim=1).values), "padding must be on the right only"
        else:
            (nodes,) = split
            assert nodes.dtype == torch.int64 and nodes.dim() == 1
            assert nodes.min() >= 0 and nodes.max() < meta["num_nodes"]
    if data.kind == "graph":
        features, edge_index, labels = data.graph
        assert features.dtype == torch.float32 and features.shape == (meta["num_nodes"], meta["in_features"])
        assert edge_index.dtype == torch.int64 and edge_index.shape[0] == 2
        assert labels.dtype == torch.int64 and labels.shape == (meta["num_nodes"],)
        assert labels.max() < meta["num_classes"]
        nodes = torch.cat([data.splits[s][0] for s in data.splits])
        assert len(nodes.unique()) == len(nodes), "graph splits overlap"
    else:
        assert data.graph is None


# ----------------------------------------------------------------------------------------------------------- load


def test_registry_names():
    assert set(DATASETS) == {"digits", "fashion_mnist", "planetoid", "shakespeare", "sst2", "synthetic"}


def test_unknown_dataset_lists_the_choices():
    with pytest.raises(ValueError) as info:
        load("mnist")
    _one_line(info, "'mnist'", *DATASETS)


def test_unknown_option_names_the_allowed_ones():
    with pytest.raises(TypeError) as info:
        load("digits", seeed=1)
    _one_line(info, "seeed", "seed", "val_fraction", "test_fraction")
    with pytest.raises(TypeError) as info:
        load("synthetic", task="graph", image_size=8)
    _one_line(info, "image_size", *SIZE_OPTIONS["graph"])


@pytest.mark.parametrize(
    "name, options, error",
    [
        ("digits", {"val_fraction": 1.5}, ValueError),
        ("digits", {"val_fraction": 0.5, "test_fraction": 0.5}, ValueError),
        ("digits", {"seed": -1}, ValueError),
        ("digits", {"seed": 1.0}, TypeError),
        ("sst2", {"max_len": 1}, ValueError),
        ("sst2", {"max_vocab": 4}, ValueError),
        ("shakespeare", {"test_fraction": -0.1}, ValueError),
        ("shakespeare", {"val_fraction": 0.5, "test_fraction": 0.5}, ValueError),
        ("planetoid", {"name": "../cora"}, ValueError),
        ("synthetic", {"task": "audio"}, ValueError),
        ("synthetic", {"n": 3}, ValueError),
        ("synthetic", {"task": "image", "image_size": 7}, ValueError),
        ("synthetic", {"task": "graph", "p_in": 2.0}, ValueError),
    ],
)
def test_bad_option_values(tiny_root, name, options, error):
    with pytest.raises(error) as info:
        load(name, tiny_root, **options)
    _one_line(info, list(options)[-1])


def test_unknown_planetoid_split_lists_the_three(tiny_root):
    with pytest.raises(ValueError) as info:
        load("planetoid", tiny_root, split="official")
    _one_line(info, "'official'", "'public'", "'random'", "'difformer'")


def test_unknown_synthetic_task_lists_the_four():
    with pytest.raises(ValueError) as info:
        load("synthetic", task="audio")
    _one_line(info, "'audio'", "image", "text", "sequence", "graph")


@pytest.mark.parametrize("name", ["planetoid", "shakespeare", "sst2"])
def test_file_loaders_need_a_root(monkeypatch, name):
    monkeypatch.delenv("ODEFORMER_DATA", raising=False)
    with pytest.raises(DatasetNotFound) as info:
        load(name)
    _one_line(info, "ODEFORMER_DATA", "data.root")


@pytest.mark.parametrize("name", ["planetoid", "shakespeare", "sst2"])
def test_missing_files_name_the_path_and_the_source(tmp_path, name):
    with pytest.raises(DatasetNotFound) as info:
        load(name, tmp_path)
    source = {"planetoid": "kimiyoung/planetoid", "shakespeare": "karpathy/char-rnn", "sst2": "forest-snow/alps"}[name]
    fetch = {"planetoid": "cora", "shakespeare": "shakespeare", "sst2": "sst2"}[name]
    _one_line(info, tmp_path, source, f"odeformer-data {fetch}")
    with pytest.raises(DatasetNotFound) as info:
        load(name, tmp_path / "nowhere")
    _one_line(info, tmp_path / "nowhere")


def test_root_comes_from_the_environment(monkeypatch, tiny_root):
    monkeypatch.setenv("ODEFORMER_DATA", str(tiny_root))
    assert load("shakespeare").meta["itos"] == sorted(set(conftest.SHAKESPEARE))
    assert load("sst2").meta["vocab"] == load("sst2", tiny_root).meta["vocab"]


# --------------------------------------------------------------------------------------------------------- digits


def test_digits():
    data = load("digits")
    check_contract(data)
    assert data.meta == {"name": "digits", "image_size": 8, "in_chans": 1, "num_classes": 10}
    sizes = {s: len(data.splits[s][1]) for s in data.splits}
    assert sizes == {"train": 1259, "val": 179, "test": 359}  # floor(0.1 * 1797), floor(0.2 * 1797), the rest
    for split in ("val", "test"):  # stratified: every class in every split
        assert len(data.splits[split][1].unique()) == 10
    assert data.splits["train"][0].max() == 1.0
    assert _same(data, load("digits"))
    other = load("digits", seed=1)
    assert not torch.equal(data.splits["test"][1], other.splits["test"][1])
    assert len(load("digits", val_fraction=0.0).splits["val"][1]) == 0


# -------------------------------------------------------------------------------------------------- fashion_mnist


@needs_fashion
def test_fashion_mnist_full(fashion):
    check_contract(fashion)
    assert fashion.meta["image_size"] == 28 and fashion.meta["num_classes"] == 10
    sizes = {s: len(fashion.splits[s][1]) for s in fashion.splits}
    assert sizes == {"train": 55000, "val": 5000, "test": 10000}
    train_and_val = torch.cat([fashion.splits["train"][1], fashion.splits["val"][1]])
    assert torch.bincount(train_and_val).tolist() == [6000] * 10
    assert torch.bincount(fashion.splits["test"][1]).tolist() == [1000] * 10


@needs_fashion
def test_fashion_mnist_subset_and_seeds(fashion):
    small = load("fashion_mnist", subset=1000, val_size=500)
    check_contract(small)
    assert [len(small.splits[s][1]) for s in small.splits] == [1000, 500, 10000]
    assert _same(small, load("fashion_mnist", subset=1000, val_size=500))
    other = load("fashion_mnist", subset=1000, val_size=500, seed=1)
    assert not torch.equal(small.splits["train"][1], other.splits["train"][1])
    assert torch.equal(small.splits["test"][0], fashion.splits["test"][0])  # the official test set, whatever the seed
    assert torch.equal(small.splits["val"][1], load("fashion_mnist", subset=10, val_size=500).splits["val"][1])


@needs_fashion
@pytest.mark.parametrize("subset", [0, 55001])
def test_fashion_mnist_bad_subset(subset):
    with pytest.raises(ValueError) as info:
        load("fashion_mnist", subset=subset)
    _one_line(info, "subset")


def _write_idx(path: pathlib.Path, array: np.ndarray) -> None:
    header = bytes([0, 0, 8, array.ndim]) + b"".join(int(n).to_bytes(4, "big") for n in array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


@pytest.fixture
def tiny_fashion(tmp_path):
    """A 30 + 10 image Fashion-MNIST in ``tmp_path/fashion-mnist`` (checks the idx reader without the package)."""
    folder = tmp_path / "fashion-mnist"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for split, n in (("train", 30), ("test", 10)):
        images_name, labels_name = FILES[split]
        _write_idx(folder / images_name, rng.integers(0, 256, (n, 28, 28)))
        _write_idx(folder / labels_name, np.arange(n) % 10)
    return tmp_path


def test_fashion_mnist_reads_idx_files(tiny_fashion):
    data = load("fashion_mnist", tiny_fashion, val_size=5, subset=20)
    check_contract(data)
    assert [len(data.splits[s][1]) for s in data.splits] == [20, 5, 10]
    assert torch.equal(data.splits["test"][1], torch.arange(10))
    with gzip.open(tiny_fashion / "fashion-mnist" / FILES["test"][0]) as f:
        raw = np.frombuffer(f.read()[16:], dtype=np.uint8).reshape(10, 1, 28, 28)
    assert torch.equal(data.splits["test"][0], torch.from_numpy(raw / 255.0).float())


@pytest.mark.parametrize("damage", ["truncated_gzip", "not_gzip", "short_data", "bad_magic"])
def test_fashion_mnist_corrupt_file(tiny_fashion, damage):
    path = tiny_fashion / "fashion-mnist" / FILES["train"][0]
    raw = gzip.decompress(path.read_bytes())
    if damage == "truncated_gzip":
        path.write_bytes(path.read_bytes()[:100])
    elif damage == "not_gzip":
        path.write_bytes(b"this is not gzip")
    elif damage == "short_data":
        path.write_bytes(gzip.compress(raw[:-28]))
    else:
        path.write_bytes(gzip.compress(b"\x00\x00\x0d\x03" + raw[4:]))
    with pytest.raises(ValueError) as info:
        load("fashion_mnist", tiny_fashion, val_size=5)
    _one_line(info, path)


def test_fashion_mnist_missing_file(tiny_fashion, tmp_path):
    missing = tiny_fashion / "fashion-mnist" / FILES["test"][1]
    missing.unlink()
    with pytest.raises(DatasetNotFound) as info:
        load("fashion_mnist", tiny_fashion, val_size=5)
    _one_line(info, missing, "apt-get install dataset-fashion-mnist", "zalandoresearch/fashion-mnist")
    with pytest.raises(DatasetNotFound) as info:
        load("fashion_mnist", tmp_path / "nowhere")
    _one_line(info, tmp_path / "nowhere", "apt-get install dataset-fashion-mnist")


def test_fashion_mnist_bad_val_size(tiny_fashion):
    with pytest.raises(ValueError) as info:
        load("fashion_mnist", tiny_fashion, val_size=30)
    _one_line(info, "val_size")


# ------------------------------------------------------------------------------------------------------ planetoid


@pytest.mark.data("cora")
def test_cora(cora):
    check_contract(cora)
    assert cora.meta == {"name": "cora", "in_features": 1433, "num_classes": 7, "num_nodes": 2708}
    train, val, test = (cora.splits[s][0] for s in ("train", "val", "test"))
    assert torch.equal(train, torch.arange(140)) and torch.equal(val, torch.arange(140, 640))
    assert len(test) == 1000 and test.min() == 1708 and test.max() == 2707 and bool((test.diff() > 0).all())
    features, edge_index, labels = cora.graph
    assert torch.bincount(labels[train]).tolist() == [20] * 7  # the Planetoid split: 20 labelled nodes per class
    assert torch.allclose(features.sum(1), torch.ones(2708))  # row-normalised, no empty rows in Cora
    assert bool((edge_index[0] != edge_index[1]).all()), "self loops"
    edges = set(map(tuple, edge_index.T.tolist()))
    assert len(edges) == edge_index.shape[1], "duplicate edges"
    assert edges == {(j, i) for i, j in edges}, "not symmetric"
    assert edge_index.shape[1] == 2 * 5278  # undirected edges after symmetrising, dropping self loops and duplicates


@pytest.mark.data("cora")
def test_cora_is_deterministic(cora, data_root):
    assert _same(cora, load("planetoid", data_root))


def _globals(path):
    """The ``module name`` pairs a pickle imports, and its opcode names."""
    ops = list(pickletools.genops(pathlib.Path(path).read_bytes()))
    return {arg for op, arg, _ in ops if op.name == "GLOBAL"}, {op.name for op, _, _ in ops}


PY2_GLOBALS = {
    "x": {"scipy.sparse.csr csr_matrix", "numpy.core.multiarray _reconstruct", "numpy ndarray", "numpy dtype"},
    "ally": {"numpy.core.multiarray _reconstruct", "numpy ndarray", "numpy dtype"},
    "graph": {"collections defaultdict", "__builtin__ list"},
}
PY3_OPCODES = {"SHORT_BINBYTES", "BINBYTES", "BINBYTES8", "SHORT_BINUNICODE", "BINUNICODE", "STACK_GLOBAL", "FRAME"}


@pytest.mark.filterwarnings("ignore:Please import `csr_matrix`:DeprecationWarning")  # scipy.sparse.csr, as in 2016
def test_tiny_planetoid_pickles_are_python2_pickles(tmp_path, write_data):
    """The fixture files are what the published ones are: protocol 2, py2 strings, Python-2-era module names; their
    binary strings decode only as latin1, so the loader's ``encoding="latin1"`` is exercised."""
    tiny = write_data.planetoid(tmp_path)
    for part, expected in PY2_GLOBALS.items():
        names, opcodes = _globals(tiny.folder / f"ind.cora.{part}")
        assert names == expected, part
        assert not opcodes & PY3_OPCODES, part
    raw = (tiny.folder / "ind.cora.x").read_bytes()
    with pytest.raises(UnicodeDecodeError):
        pickle.loads(raw)  # Python 3's default ASCII decoding of py2 strings fails, as on the real files


@pytest.mark.data("cora")
def test_tiny_planetoid_pickles_match_the_real_format(tmp_path, write_data, data_root):
    tiny = write_data.planetoid(tmp_path)
    for part in ("x", "y", "tx", "ty", "allx", "ally", "graph"):
        real = data_root / "planetoid" / f"ind.cora.{part}"
        assert _globals(tiny.folder / f"ind.cora.{part}")[0] == _globals(real)[0], part


@pytest.mark.parametrize("style", ["py2", "py3"])  # as published, and as re-pickled by Python 3 at protocol 2
def test_planetoid_places_test_rows_and_pads_gaps_as_kipf(tmp_path, write_data, style):
    tiny = write_data.planetoid(tmp_path, name="toy", style=style)
    data = load("planetoid", tmp_path, name="toy")
    check_contract(data)
    assert data.meta == {"name": "toy", "in_features": 6, "num_classes": 3, "num_nodes": 519}
    assert [len(data.splits[s][0]) for s in data.splits] == [10, 500, 3]
    assert data.splits["test"][0].tolist() == [514, 516, 518]
    features, edge_index, labels = data.graph
    normalised = tiny.tx / tiny.tx.sum(1, keepdims=True)
    for row, node in enumerate([518, 514, 516]):  # row k of tx is node test.index[k]
        assert torch.allclose(features[node], torch.from_numpy(normalised[row]))
    nonempty = torch.from_numpy(tiny.allx.sum(1) > 0)
    assert torch.allclose(features[:514][nonempty].sum(1), torch.ones(int(nonempty.sum())))  # rows sum to 1
    assert labels[[518, 514, 516]].tolist() == [2, 1, 0]
    assert labels[:514].tolist() == (np.arange(514) % 3).tolist()
    assert features[515].abs().sum() == 0 and features[517].abs().sum() == 0  # skipped ids: zero rows
    assert features[3].abs().sum() == 0  # empty rows are not divided by zero
    assert bool((edge_index[0] != edge_index[1]).all())
    assert edge_index.shape[1] == 2 * 520  # the ring's 519 undirected edges and the chord, each both ways


def _class_rand_splits(labels, seed, per_class, num_val, num_test):
    """DIFFormer's ``class_rand_splits`` after ``torch.manual_seed(seed)``, written from its description: per class
    (ascending), a permutation of the class's node ids, the first ``per_class`` to train and the rest, in that order,
    to a pool; the pool permuted, then ``num_val`` validation and ``num_test`` test nodes."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        train, pool = [], []
        for c in labels.unique():
            members = torch.nonzero(labels == c).flatten()
            members = members[torch.randperm(len(members))]
            train.append(members[:per_class])
            pool.append(members[per_class:])
        pool = torch.cat(pool)
        pool = pool[torch.randperm(len(pool))]
    return torch.cat(train), pool[:num_val], pool[num_val : num_val + num_test]


def _check_class_split(data, labelled, per_class, num_val, num_test):
    train, val, test = (data.splits[s][0] for s in ("train", "val", "test"))
    labels = data.graph[2]
    assert [len(train), len(val), len(test)] == [per_class * data.meta["num_classes"], num_val, num_test]
    assert torch.bincount(labels[train], minlength=data.meta["num_classes"]).tolist() == [per_class] * len(
        labels[labelled].unique()
    )
    everything = torch.cat([train, val, test])
    assert len(everything.unique()) == len(everything) and bool(labelled[everything].all())


@pytest.mark.parametrize("split", ["random", "difformer"])
def test_planetoid_class_splits_draw_per_class_then_the_rest(tmp_path, write_data, split):
    """Both class-balanced splits: sizes, balance, disjoint, labelled nodes only, fixed by the seed alone."""
    write_data.planetoid(tmp_path, name="toy")
    options = dict(name="toy", split=split, per_class=2, num_val=5, num_test=4)
    data = load("planetoid", tmp_path, seed=3, **options)
    labelled = torch.ones(519, dtype=torch.bool)
    labelled[[515, 517]] = False  # the ids test.index skips
    _check_class_split(data, labelled, 2, 5, 4)
    assert _same(data, load("planetoid", tmp_path, seed=3, **options))
    assert not _same(data, load("planetoid", tmp_path, seed=4, **options))


@pytest.mark.data("cora")
@pytest.mark.parametrize("seed", [123, 0])
def test_difformer_split_is_the_official_draw(data_root, seed):
    """``split="difformer"`` is the split DIFFormer's code draws on Cora (``run.sh``: seed 123); ``"random"`` draws
    the same protocol from node-id order, so its split differs."""
    data = load("planetoid", data_root, name="cora", split="difformer", seed=seed)
    _check_class_split(data, torch.ones(2708, dtype=torch.bool), 20, 500, 1000)
    expected = _class_rand_splits(data.graph[2], seed, 20, 500, 1000)
    for split, nodes in zip(("train", "val", "test"), expected):
        assert torch.equal(data.splits[split][0], nodes.sort().values), split
    other = load("planetoid", data_root, name="cora", split="random", seed=seed)
    assert torch.equal(other.splits["train"][0], data.splits["train"][0])  # the same per-class draws
    assert not torch.equal(other.splits["test"][0], data.splits["test"][0])


@pytest.mark.parametrize("damage", ["garbage", "truncated", "forbidden_class"])
def test_planetoid_corrupt_pickle(tiny_root, write_data, damage):
    path = tiny_root / "planetoid" / "ind.cora.allx"
    if damage == "garbage":
        path.write_bytes(b"not a pickle at all")
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:50])
    else:
        write_data.pickle(path, pathlib.PurePosixPath("/etc/passwd"))
    with pytest.raises(ValueError) as info:
        load("planetoid", tiny_root)
    _one_line(info, path)


_EMPTY_X, _EMPTY_Y = sp.csr_matrix((0, 6), dtype=np.float32), np.zeros((0, 3), dtype=np.int32)


@pytest.mark.parametrize(
    "replace, part, message",
    [
        ({"x": _EMPTY_X, "y": _EMPTY_Y}, "y", "no labelled nodes"),  # an empty train split
        ({"test_index": "", "tx": _EMPTY_X, "ty": _EMPTY_Y}, "test.index", "distinct test ids"),  # an empty test split
        ({"test_index": "518\n518\n516\n"}, "test.index", "distinct test ids"),
        ({"test_index": "518\n513\n516\n"}, "test.index", "from 514"),  # a test id among the known nodes
        ({"test_index": "518\nnode\n516\n"}, "test.index", "one integer node id per line"),
        ({"y": np.zeros((9, 3), dtype=np.int32)}, "x", "has 10 rows (training nodes), but ind.cora.y has 9"),
        ({"tx": sp.csr_matrix(np.ones((3, 5)))}, "tx", "has 5 columns (features), but ind.cora.allx has 6"),
        ({"ty": np.zeros((3, 4), dtype=np.int32)}, "ty", "has 4 columns (classes), but ind.cora.ally has 3"),
        ({"allx": sp.csr_matrix(np.ones((100, 6))), "ally": np.eye(3)[np.arange(100) % 3]}, "allx", "500 val"),
        ({"x": np.zeros(10)}, "x", "2-D matrix"),
        ({"graph": [[1], [0]]}, "graph", "dict of adjacency lists"),
        ({"graph": {0: [519]}}, "graph", "names node 519"),
        ({"graph": {0: [-1]}}, "graph", "names node -1"),
        ({"graph": {"a": [1]}}, "graph", "dict of node ids to lists of node ids"),  # not a node id
        ({"graph": {0: 5}}, "graph", "dict of node ids to lists of node ids"),  # not a list
        ({"test_index": "518\n99999\n516\n"}, "test.index", "lists test id 99999, beyond"),  # would grow the graph
    ],
)
def test_planetoid_bad_files_are_one_line_naming_the_file(tmp_path, write_data, replace, part, message):
    tiny = write_data.planetoid(tmp_path, **replace)
    with pytest.raises(ValueError) as info:
        load("planetoid", tmp_path)
    _one_line(info, tiny.folder / f"ind.cora.{part}" if part else tiny.folder, message)


def _damaged(matrix, damage):
    """``matrix`` (CSR) with one field of its pickled state changed as a bit flip or a bad writer would."""
    m = sp.csr_matrix(matrix)
    if damage == "index far out of range":  # 11 of 12 random corruptions of ind.cora.tx did this: a segfault
        m.indices[2] = 1_000_000
    elif damage == "index just past the row's end":  # wrote into the next row: silently wrong features
        m.indices[m.indptr[1] - 1] = m.shape[1]
    elif damage == "negative index":
        m.indices[0] = -3
    elif damage == "indptr not rising":
        m.indptr[1] = m.indptr[2] + 1
    elif damage == "indptr not ending at nnz":
        m.indptr[-1] -= 1
    elif damage == "indptr too short":
        m.indptr = m.indptr[:-1]
    elif damage == "huge claimed shape":  # a small file claiming 200000 x 200000: 320 GB dense
        m._shape = (200_000, 200_000)
    elif damage == "not a number":
        m.data[0] = np.nan
    elif damage == "float indices":
        m.indices = m.indices.astype(np.float64)
    return m


DAMAGES = {
    "index far out of range": "column index 1000000 outside 0..5",
    "index just past the row's end": "column index 6 outside 0..5",
    "negative index": "column index -3 outside 0..5",
    "indptr not rising": "indptr that does not rise from 0",
    "indptr not ending at nnz": "indptr ending at",
    "indptr too short": "indptr of 3 entries for 3 rows",
    "huge claimed shape": "claims a 200000 x 200000 matrix",
    "not a number": "NaN or infinite",
    "float indices": "indices is a 1-D float64 array",
}


@pytest.mark.parametrize("damage", list(DAMAGES))
@pytest.mark.parametrize("part", ["tx", "allx"])
def test_a_damaged_sparse_matrix_is_one_line_naming_the_file(tmp_path, write_data, damage, part):
    """Every sparse matrix is checked before scipy densifies it (scipy trusts its indices: out of range, it writes
    out of bounds and the interpreter segfaults, or, one past a row's end, into the next row)."""
    clean = write_data.planetoid(tmp_path, name="toy")
    dense = clean.tx if part == "tx" else clean.allx
    if damage == "indptr too short" and part == "allx":
        return  # the same check as tx's, on a longer matrix
    write_data.pickle(clean.folder / f"ind.toy.{part}", _damaged(dense, damage))
    with pytest.raises(ValueError) as info:
        load("planetoid", tmp_path, name="toy")
    message = DAMAGES[damage].replace("3 rows", f"{len(dense)} rows")
    _one_line(info, clean.folder / f"ind.toy.{part}", message)


def test_a_damaged_feature_file_stops_the_command_with_exit_2(tmp_path, write_data):
    """End to end: odeformer-train on a planetoid folder whose tx has an index out of range prints one line naming
    the file and exits 2 (it crashed the interpreter with a segfault, exit 139, and no output)."""
    from helpers import cli_in_process

    clean = write_data.planetoid(tmp_path / "data", name="toy")
    write_data.pickle(clean.folder / "ind.toy.tx", _damaged(clean.tx, "index far out of range"))
    out = tmp_path / "run"
    done = cli_in_process(
        "data=planetoid",
        f"data.root={tmp_path / 'data'}",
        "data.options.name=toy",
        "model=node_classifier",
        "train=debug",
        f"train.out_dir={out}",
    )
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and str(clean.folder / "ind.toy.tx") in lines[0] and "column index" in lines[0], lines
    assert not out.exists() or not any(p for p in out.rglob("*") if p.is_file())


def test_files_that_differ_from_the_published_ones_are_read_with_one_warning(tmp_path, write_data, monkeypatch):
    """The published SHA-256 sums (what ``odeformer-data --list`` checks) are compared at load: a file that differs
    is read all the same, with one warning naming it, and only once for the same file."""
    import hashlib
    import warnings

    from odeformer.data import sources

    tiny = write_data.planetoid(tmp_path, name="cora")
    published = tuple(
        sources.Remote(
            f"planetoid/{path.name}",
            "https://example.invalid",
            hashlib.sha256(path.read_bytes()).hexdigest(),
            path.stat().st_size,
        )
        for path in sorted(tiny.folder.iterdir())
    )
    monkeypatch.setitem(sources.SOURCES, "cora", published)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load("planetoid", tmp_path)  # the published files: no warning
    labels = tiny.parts["ally"].copy()
    labels[[0, 1]] = labels[[1, 0]]  # two labels swapped: a valid file, but not the published one
    write_data.pickle(tiny.folder / "ind.cora.ally", labels)
    with pytest.warns(UserWarning) as caught:
        load("planetoid", tmp_path)
    messages = [str(w.message) for w in caught if "differ from the published" in str(w.message)]
    assert len(messages) == 1 and "ind.cora.ally in" in messages[0] and "ind.cora.x" not in messages[0]
    assert "odeformer-data cora --force" in messages[0] and "\n" not in messages[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load("planetoid", tmp_path)  # once: the same file is not reported again


@pytest.mark.data("cora")
def test_the_real_cora_files_are_the_published_ones(data_root):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load("planetoid", data_root, name="cora")


def test_planetoid_missing_file(tiny_root):
    missing = tiny_root / "planetoid" / "ind.cora.test.index"
    missing.unlink()
    with pytest.raises(DatasetNotFound) as info:
        load("planetoid", tiny_root)
    _one_line(info, missing, "kimiyoung/planetoid", "odeformer-data cora")


# ---------------------------------------------------------------------------------------------------- shakespeare


@pytest.mark.data("shakespeare")
def test_shakespeare(shakespeare, data_root):
    check_contract(shakespeare)
    text = (data_root / "text" / "tinyshakespeare.txt").read_text(encoding="utf-8")
    assert len(text) == 1_115_394
    itos = shakespeare.meta["itos"]
    assert shakespeare.meta["vocab_size"] == 65 and itos == sorted(set(text))
    streams = [shakespeare.splits[s][0] for s in ("train", "val", "test")]
    assert [len(s) for s in streams] == [1_003_856, 55_769, 55_769]
    assert "".join(itos[i] for i in torch.cat(streams).tolist()) == text


@pytest.mark.data("shakespeare")
def test_shakespeare_fractions(data_root):
    data = load("shakespeare", data_root, val_fraction=0.1, test_fraction=0.0)
    assert [len(data.splits[s][0]) for s in data.splits] == [1_115_394 - 111_539, 111_539, 0]


def test_shakespeare_tiny_file_splits_and_round_trips(tiny_root):
    text = conftest.SHAKESPEARE
    data = load("shakespeare", tiny_root)
    check_contract(data)
    itos = data.meta["itos"]
    assert itos == sorted(set(text)) and data.meta["vocab_size"] == len(itos)
    n = len(text)
    streams = [data.splits[s][0] for s in ("train", "val", "test")]
    assert [len(s) for s in streams] == [n - 2 * (n // 20), n // 20, n // 20]  # floor(0.05 L) each for val and test
    assert "".join(itos[i] for i in torch.cat(streams).tolist()) == text
    assert "".join(itos[i] for i in streams[2].tolist()) == text[-(n // 20) :]  # test is the end of the text
    other = load("shakespeare", tiny_root, val_fraction=0.1, test_fraction=0.0)
    assert [len(other.splits[s][0]) for s in other.splits] == [n - n // 10, n // 10, 0]


@pytest.mark.parametrize(
    "content, message",
    [
        ("", "is empty"),
        (b"caf\xe9 au lait, " * 4, "is not UTF-8"),
        ("To be, or not", "too few for a val split of 0.05"),  # 13 characters: floor(0.65) = 0
    ],
)
def test_shakespeare_bad_file_is_one_line_naming_it(tmp_path, write_data, content, message):
    path = write_data.shakespeare(tmp_path, content)
    with pytest.raises(ValueError) as info:
        load("shakespeare", tmp_path)
    _one_line(info, path, message)


def test_shakespeare_short_text_without_held_out_splits(tmp_path, write_data):
    write_data.shakespeare(tmp_path, "To be, or not")
    data = load("shakespeare", tmp_path, val_fraction=0.0, test_fraction=0.0)
    assert [len(data.splits[s][0]) for s in data.splits] == [13, 0, 0]
    with pytest.raises(ValueError) as info:
        load("shakespeare", tmp_path, val_fraction=0.0, test_fraction=0.05)
    _one_line(info, "too few for a test split of 0.05")


# ----------------------------------------------------------------------------------------------------------- sst2


@pytest.mark.data("sst2")
def test_sst2(sst2):
    check_contract(sst2)
    assert [len(sst2.splits[s][1]) for s in sst2.splits] == [60_614, 6_735, 872]
    vocab = sst2.meta["vocab"]
    assert vocab[:4] == ["[PAD]", "[UNK]", "[CLS]", "[MASK]"] and sst2.meta["pad_id"] == 0
    assert vocab[4:7] == ["the", ",", "a"]  # by training frequency
    assert sst2.meta["max_len"] == 64 and sst2.meta["num_classes"] == 2
    for tokens, labels in sst2.splits.values():
        assert bool((tokens[:, 0] == 2).all()), "[CLS] first"
        assert bool((tokens[:, 1] != 0).all()), "no empty sentence"
        assert set(labels.unique().tolist()) == {0, 1}
    train_tokens = sst2.splits["train"][0]
    assert not bool((train_tokens == 1).any()), "no [UNK] in the split the vocabulary comes from"
    assert bool((sst2.splits["val"][0] == 1).any())


@pytest.mark.data("sst2")
def test_sst2_truncation_and_small_vocab(data_root, sst2):
    data = load("sst2", data_root, max_len=8, max_vocab=100)
    check_contract(data)
    assert data.meta["vocab_size"] == 100 and data.meta["vocab"] == sst2.meta["vocab"][:100]
    tokens = data.splits["train"][0]
    assert tokens.shape == (60_614, 8) and bool((tokens == 1).any())
    full = sst2.splits["train"][0][:, :8]
    assert torch.equal(tokens == 0, full == 0)  # same lengths, cut at 8


def test_sst2_small_files(tiny_root):
    data = load("sst2", tiny_root, max_len=5)
    check_contract(data)
    assert data.meta["vocab"] == ["[PAD]", "[UNK]", "[CLS]", "[MASK]", "bad", "good", "'s", ",", ".", "film", "it"]
    assert data.splits["train"][0].tolist() == [[2, 10, 6, 5, 7], [2, 4, 9, 0, 0], [2, 4, 0, 0, 0]]
    assert data.splits["train"][1].tolist() == [1, 0, 0]
    assert data.splits["val"][0].tolist() == [[2, 1, 5, 7, 1]]  # no header line: the first line is a sentence
    assert data.splits["test"][0].tolist() == [[2, 1, 4, 1, 1]] and data.splits["test"][1].tolist() == [1]
    assert load("sst2", tiny_root, min_freq=2).meta["vocab"][4:] == ["bad", "good"]


@pytest.mark.parametrize("content", ["", "sentence\tlabel\n", "\n\n"])
@pytest.mark.parametrize("split", ["train", "dev", "test"])
def test_sst2_empty_split_is_one_line_naming_the_file(tmp_path, write_data, split, content):
    folder = write_data.sst2(tmp_path, **{split: content})
    with pytest.raises(ValueError) as info:
        load("sst2", tmp_path)
    _one_line(info, folder / f"{split}.tsv", "no sentences")


def test_sst2_bad_line_is_one_line_naming_it(tmp_path, write_data):
    folder = write_data.sst2(tmp_path, dev="no label here\n")
    with pytest.raises(ValueError) as info:
        load("sst2", tmp_path)
    _one_line(info, folder / "dev.tsv", "line 1")
    write_data.sst2(tmp_path, train="sentence\tlabel\ngood\t1\nfine\t2\n")
    with pytest.raises(ValueError) as info:
        load("sst2", tmp_path)
    _one_line(info, folder / "train.tsv", "line 3", "label 0 or 1")


@pytest.mark.parametrize(
    "train, sentences, labels",
    [
        ("idx\tsentence\tlabel\n0\tgood film\t1\n1\tbad\t0\n", [["good", "film"], ["bad"]], [1, 0]),
        ("sentence\tlabel\tidx\ngood film\t1\t0\nbad\t0\t1\n", [["good", "film"], ["bad"]], [1, 0]),
        ("label\tsentence\n1\tgood film\n0\tbad\n", [["good", "film"], ["bad"]], [1, 0]),
        ("\ufeffgood film\t1\nbad\t0\n", [["good", "film"], ["bad"]], [1, 0]),  # a byte-order mark, no header
    ],
    ids=["index_first", "index_last", "label_first", "bom_without_header"],
)
def test_sst2_reads_the_columns_its_header_names(tmp_path, write_data, train, sentences, labels):
    """An exported file's index column is not read as words (before, an index-first file trained on the index
    numbers as tokens), and a byte-order mark is not a token."""
    from odeformer.data.sst2 import read_tsv

    folder = write_data.sst2(tmp_path, train=train)
    assert read_tsv(folder / "train.tsv") == (sentences, labels)


@pytest.mark.parametrize(
    "train, found",
    [
        ("index\tsentence\n0\tgood film\n", "header names the columns ['index', 'sentence']: name a 'label' column"),
        ("idx\tsentence\tlabel\ngood film\t1\n", "line 2 is not 3 fields as its header names"),
        ("0\tgood film\t1\n", "line 1 is not sentence<TAB>label"),  # an index column without a header
        ("a great movie .\tpositive\ngood\t1\n", "line 1 is not sentence<TAB>label"),  # not a header: a bad row
    ],
    ids=["glue_test_layout", "short_row", "index_without_header", "sentence_with_a_word_label"],
)
def test_sst2_files_it_cannot_read_right_are_one_line_naming_them(tmp_path, write_data, train, found):
    folder = write_data.sst2(tmp_path, train=train)
    with pytest.raises(ValueError) as info:
        load("sst2", tmp_path)
    _one_line(info, folder / "train.tsv", found)


def test_sst2_file_that_is_not_utf8_is_one_line_naming_it(tmp_path, write_data):
    folder = write_data.sst2(tmp_path)
    (folder / "test.tsv").write_bytes("sentence\tlabel\nun film très bon\t1\n".encode("latin-1"))
    with pytest.raises(ValueError) as info:
        load("sst2", tmp_path)
    _one_line(info, folder / "test.tsv", "is not UTF-8 text", "odeformer-data sst2")


# -------------------------------------------------------------------------------------------- the `data` marker


class _Item:
    """What conftest's hook reads of a test item: its marks and, for a parametrized test, its parameters."""

    def __init__(self, *marks, params=None):
        self.marks = [mark.mark for mark in marks]
        if params is not None:
            self.callspec = types.SimpleNamespace(params=params)

    def iter_markers(self, name):
        return (mark for mark in self.marks if mark.name == name)


@pytest.fixture
def no_data(monkeypatch):
    """No data root, nothing required: what a fresh clone sees."""
    monkeypatch.delenv("ODEFORMER_DATA", raising=False)
    monkeypatch.delenv("ODEFORMER_REQUIRE_DATA", raising=False)
    monkeypatch.setattr(conftest, "_GIVEN", False)
    return monkeypatch


def _setup_outcome(item):
    """``None`` if the test would run, else ``("skip" | "fail", message)``."""
    try:
        conftest.pytest_runtest_setup(item)
    except pytest.skip.Exception as error:
        return "skip", str(error.msg)
    except pytest.fail.Exception as error:
        return "fail", str(error.msg)
    return None


def test_data_mark_skips_without_a_root_in_one_line_naming_odeformer_data(no_data):
    outcome, message = _setup_outcome(_Item(pytest.mark.data("cora")))
    assert outcome == "skip" and "\n" not in message
    assert "ODEFORMER_DATA" in message and "`odeformer-data cora`" in message
    _, message = _setup_outcome(_Item(pytest.mark.data))  # a bare mark needs every dataset
    assert "cora, shakespeare, sst2" in message


def test_data_mark_fails_where_the_data_was_given(no_data, tmp_path):
    no_data.setenv("ODEFORMER_DATA", str(tmp_path))
    outcome, message = _setup_outcome(_Item(pytest.mark.data("sst2")))
    assert outcome == "skip" and str(tmp_path / "sst2" / "train.tsv") in message  # found by the checkout's fallback
    no_data.setattr(conftest, "_GIVEN", True)  # ODEFORMER_DATA came from the environment
    outcome, message = _setup_outcome(_Item(pytest.mark.data("sst2")))
    assert outcome == "fail" and str(tmp_path / "sst2" / "train.tsv") in message and "\n" not in message
    no_data.setenv("ODEFORMER_REQUIRE_DATA", "0")
    assert _setup_outcome(_Item(pytest.mark.data("sst2")))[0] == "skip"
    no_data.setattr(conftest, "_GIVEN", False)
    no_data.setenv("ODEFORMER_REQUIRE_DATA", "1")  # what .ci/run sets
    assert _setup_outcome(_Item(pytest.mark.data("sst2")))[0] == "fail"
    no_data.delenv("ODEFORMER_DATA")
    outcome, message = _setup_outcome(_Item(pytest.mark.data("sst2")))
    assert outcome == "fail" and "ODEFORMER_DATA" in message


def test_data_mark_runs_when_the_files_are_there(no_data, tiny_root):
    no_data.setenv("ODEFORMER_DATA", str(tiny_root))
    no_data.setenv("ODEFORMER_REQUIRE_DATA", "1")
    assert _setup_outcome(_Item(pytest.mark.data)) is None
    (tiny_root / "text" / "tinyshakespeare.txt").unlink()
    assert _setup_outcome(_Item(pytest.mark.data("cora", "sst2"))) is None
    assert _setup_outcome(_Item(pytest.mark.data("shakespeare")))[0] == "fail"


def test_data_mark_only_applies_to_the_parameters_it_names(no_data):
    mark = pytest.mark.data(only={"planetoid": "cora", "text": ["shakespeare", "sst2"]})
    assert _setup_outcome(_Item(mark, params={"data": "digits"})) is None
    outcome, message = _setup_outcome(_Item(mark, params={"data": "planetoid", "seed": 0}))
    assert outcome == "skip" and "needs the cora data" in message
    assert "needs the shakespeare, sst2 data" in _setup_outcome(_Item(mark, params={"data": "text"}))[1]
    with pytest.raises(pytest.UsageError, match="cifar"):
        conftest.pytest_runtest_setup(_Item(pytest.mark.data("cifar")))


@pytest.mark.slow  # two pytest processes that import torch: seconds each on a busy machine
def test_data_mark_in_a_real_pytest_run(tmp_path):
    """The hook as pytest calls it: a given but empty data root fails the marked test and only it; without a root
    the marked test is skipped with its one-line reason."""
    (tmp_path / "conftest.py").write_text((ROOT / "tests" / "conftest.py").read_text())
    (tmp_path / "test_marked.py").write_text(
        "import pytest\n\n"
        "@pytest.mark.data('cora')\ndef test_needs_cora():\n    pass\n\n"
        "@pytest.mark.data(only={'planetoid': 'cora'})\n@pytest.mark.parametrize('data', ['digits'])\n"
        "def test_only(data):\n    pass\n\n"
        "def test_plain():\n    pass\n"
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("ODEFORMER_DATA", "ODEFORMER_REQUIRE_DATA")}
    run = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-W", "ignore::UserWarning"]
    given = subprocess.run(
        run, cwd=tmp_path, env={**env, "ODEFORMER_DATA": str(empty)}, capture_output=True, text=True, timeout=HANG
    )
    assert given.returncode == 1 and "2 passed, 1 error" in given.stdout, given.stdout + given.stderr
    assert "ODEFORMER_DATA=" + str(empty) in given.stdout and "odeformer-data cora" in given.stdout
    fresh = subprocess.run(
        run, cwd=tmp_path, env={**env, "ODEFORMER_NO_SHARED_DATA": "1"}, capture_output=True, text=True, timeout=HANG
    )
    assert "2 passed, 1 skipped" in fresh.stdout, fresh.stdout + fresh.stderr
    assert "needs the cora data: set ODEFORMER_DATA" in fresh.stdout


# ------------------------------------------------------------------------------------------------------ synthetic


@pytest.mark.parametrize("task", ["image", "text", "sequence", "graph"])
def test_synthetic(task):
    data = load("synthetic", task=task, n=100)
    assert data.kind == task
    check_contract(data)
    assert _same(data, load("synthetic", task=task, n=100))
    assert not _same(data, load("synthetic", task=task, n=100, seed=1))


def test_synthetic_sizes_and_graph():
    image = load("synthetic", n=50, image_size=4)
    assert [len(image.splits[s][1]) for s in image.splits] == [40, 5, 5]
    assert image.splits["train"][0].shape[1:] == (1, 4, 4)
    text = load("synthetic", task="text", n=20, length=5, vocab_size=7)
    assert text.meta["itos"] == list("0123456")
    assert [len(text.splits[s][0]) for s in text.splits] == [80, 10, 10]
    graph = load("synthetic", task="graph", n=60, classes=4, features=8)
    assert [len(graph.splits[s][0]) for s in graph.splits] == [36, 12, 12]
    edges = set(map(tuple, graph.graph[1].T.tolist()))
    assert edges == {(j, i) for i, j in edges} and all(i != j for i, j in edges)


def test_a_data_root_that_is_a_file_says_so(tmp_path):
    afile = tmp_path / "README.md"
    afile.write_text("not a folder\n")
    with pytest.raises(DatasetNotFound, match=f"data root {afile} is a file, not a folder; set ODEFORMER_DATA"):
        load("sst2", afile)


@pytest.mark.parametrize("kind", ["folder", "FIFO", "link"])
def test_a_planetoid_file_that_is_not_a_file_is_named_as_what_it_is(tmp_path, write_data, kind):
    tiny = write_data.planetoid(tmp_path)
    path = tiny.folder / "ind.cora.test.index"
    path.unlink()
    if kind == "folder":
        path.mkdir()
    elif kind == "FIFO":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    with pytest.raises(ValueError) as info:
        load("planetoid", tmp_path)
    words = {"folder": "is a folder", "FIFO": "is a FIFO", "link": "is a link to /dev/zero"}[kind]
    _one_line(info, path, words, "not a data file")
    assert "missing" not in str(info.value)
