"""Dataset loaders: the TaskData contract (kinds, shapes, dtypes, meta), split sizes, determinism, one-line errors.

Real data comes from ``$ODEFORMER_DATA`` (CI: ``../shared/data``), else ``<repo>/../shared/data``; Fashion-MNIST from
the Debian package ``dataset-fashion-mnist`` (its tests are skipped only where the package is not installed).
"""

import gzip
import os
import pathlib
import pickle

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from odeformer.data import DATASETS, DatasetNotFound, TaskData, load
from odeformer.data.fashion_mnist import DEFAULT_DIR, FILES
from odeformer.data.synthetic import SIZES

ROOT = pathlib.Path(__file__).resolve().parents[1]
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
    return pathlib.Path(os.environ.get("ODEFORMER_DATA") or ROOT.parent / "shared" / "data")


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
    _one_line(info, "image_size", *SIZES["graph"])


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
        ("synthetic", {"task": "audio"}, ValueError),
        ("synthetic", {"n": 3}, ValueError),
        ("synthetic", {"task": "image", "image_size": 7}, ValueError),
        ("synthetic", {"task": "graph", "p_in": 2.0}, ValueError),
    ],
)
def test_bad_option_values(data_root, name, options, error):
    with pytest.raises(error) as info:
        load(name, data_root, **options)
    _one_line(info)


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
    _one_line(info, tmp_path, source)
    with pytest.raises(DatasetNotFound) as info:
        load(name, tmp_path / "nowhere")
    _one_line(info, tmp_path / "nowhere")


def test_root_comes_from_the_environment(monkeypatch, data_root):
    monkeypatch.setenv("ODEFORMER_DATA", str(data_root))
    assert load("shakespeare").meta["vocab_size"] == 65


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


def test_cora_is_deterministic(cora, data_root):
    assert _same(cora, load("planetoid", data_root))


def _write_pickle(path, obj):
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=2)


@pytest.fixture
def tiny_planetoid(tmp_path):
    """A CiteSeer-like graph 'toy' in ``tmp_path/planetoid``: 514 known nodes, test ids 518, 514, 516 (unsorted) that
    skip 515 and 517 (isolated nodes missing from test.index), a ring of 519 nodes with a chord 0-5, a duplicate edge
    0-1 and a self loop 0-0."""
    folder = tmp_path / "planetoid"
    folder.mkdir()
    rng = np.random.default_rng(0)
    n_known, features, classes = 514, 6, 3
    test_index = [518, 514, 516]
    allx = rng.integers(0, 2, (n_known, features)).astype(np.float32)
    allx[3] = 0  # an empty feature row stays zero
    tx = rng.integers(1, 3, (3, features)).astype(np.float32)
    ally = np.eye(classes, dtype=np.int32)[np.arange(n_known) % classes]
    ty = np.eye(classes, dtype=np.int32)[[2, 1, 0]]
    graph = {i: [(i + 1) % 519] for i in range(519)}
    graph[0] = [1, 1, 0, 5]  # a duplicate and a self loop
    parts = {
        "x": sp.csr_matrix(allx[:10]),
        "y": ally[:10],
        "tx": sp.csr_matrix(tx),
        "ty": ty,
        "allx": sp.csr_matrix(allx),
        "ally": ally,
        "graph": graph,
    }
    for part, obj in parts.items():
        _write_pickle(folder / f"ind.toy.{part}", obj)
    (folder / "ind.toy.test.index").write_text("\n".join(map(str, test_index)) + "\n")
    return tmp_path, allx, tx


def test_planetoid_places_test_rows_and_pads_gaps_as_kipf(tiny_planetoid):
    root, allx, tx = tiny_planetoid
    data = load("planetoid", root, name="toy")
    check_contract(data)
    assert data.meta == {"name": "toy", "in_features": 6, "num_classes": 3, "num_nodes": 519}
    assert [len(data.splits[s][0]) for s in data.splits] == [10, 500, 3]
    assert data.splits["test"][0].tolist() == [514, 516, 518]
    features, edge_index, labels = data.graph
    normalised = tx / tx.sum(1, keepdims=True)
    for row, node in enumerate([518, 514, 516]):  # row k of tx is node test.index[k]
        assert torch.allclose(features[node], torch.from_numpy(normalised[row]))
    assert labels[[518, 514, 516]].tolist() == [2, 1, 0]
    assert features[515].abs().sum() == 0 and features[517].abs().sum() == 0  # skipped ids: zero rows
    assert features[3].abs().sum() == 0  # empty rows are not divided by zero
    assert bool((edge_index[0] != edge_index[1]).all())
    assert edge_index.shape[1] == 2 * 520  # the ring's 519 undirected edges and the chord, each both ways


@pytest.mark.parametrize("damage", ["garbage", "truncated", "forbidden_class"])
def test_planetoid_corrupt_pickle(tiny_planetoid, damage):
    root, _, _ = tiny_planetoid
    path = root / "planetoid" / "ind.toy.allx"
    if damage == "garbage":
        path.write_bytes(b"not a pickle at all")
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:50])
    else:
        _write_pickle(path, pathlib.PurePosixPath("/etc/passwd"))
    with pytest.raises(ValueError) as info:
        load("planetoid", root, name="toy")
    _one_line(info, path)


def test_planetoid_missing_file(tiny_planetoid):
    root, _, _ = tiny_planetoid
    missing = root / "planetoid" / "ind.toy.test.index"
    missing.unlink()
    with pytest.raises(DatasetNotFound) as info:
        load("planetoid", root, name="toy")
    _one_line(info, missing, "kimiyoung/planetoid")


# ---------------------------------------------------------------------------------------------------- shakespeare


def test_shakespeare(shakespeare, data_root):
    check_contract(shakespeare)
    text = (data_root / "text" / "tinyshakespeare.txt").read_text(encoding="utf-8")
    assert len(text) == 1_115_394
    itos = shakespeare.meta["itos"]
    assert shakespeare.meta["vocab_size"] == 65 and itos == sorted(set(text))
    streams = [shakespeare.splits[s][0] for s in ("train", "val", "test")]
    assert [len(s) for s in streams] == [1_003_856, 55_769, 55_769]
    assert "".join(itos[i] for i in torch.cat(streams).tolist()) == text


def test_shakespeare_fractions(data_root):
    data = load("shakespeare", data_root, val_fraction=0.1, test_fraction=0.0)
    assert [len(data.splits[s][0]) for s in data.splits] == [1_115_394 - 111_539, 111_539, 0]


# ----------------------------------------------------------------------------------------------------------- sst2


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


def test_sst2_truncation_and_small_vocab(data_root, sst2):
    data = load("sst2", data_root, max_len=8, max_vocab=100)
    check_contract(data)
    assert data.meta["vocab_size"] == 100 and data.meta["vocab"] == sst2.meta["vocab"][:100]
    tokens = data.splits["train"][0]
    assert tokens.shape == (60_614, 8) and bool((tokens == 1).any())
    full = sst2.splits["train"][0][:, :8]
    assert torch.equal(tokens == 0, full == 0)  # same lengths, cut at 8


def test_sst2_small_files(tmp_path):
    folder = tmp_path / "sst2"
    folder.mkdir()
    (folder / "train.tsv").write_text("sentence\tlabel\nIt 's GOOD , good .\t1\nbad film\t0\nbad\t0\n")
    (folder / "dev.tsv").write_text("a good, unseen film\t1\n")  # no header
    (folder / "test.tsv").write_text("sentence\tlabel\n")
    data = load("sst2", tmp_path, max_len=5)
    assert data.meta["vocab"] == ["[PAD]", "[UNK]", "[CLS]", "[MASK]", "bad", "good", "'s", ",", ".", "film", "it"]
    assert data.splits["train"][0].tolist() == [[2, 10, 6, 5, 7], [2, 4, 9, 0, 0], [2, 4, 0, 0, 0]]
    assert data.splits["val"][0].tolist() == [[2, 1, 5, 7, 1]]
    assert data.splits["test"][0].shape == (0, 5)
    assert load("sst2", tmp_path, min_freq=2).meta["vocab"][4:] == ["bad", "good"]
    (folder / "dev.tsv").write_text("no label here\n")
    with pytest.raises(ValueError) as info:
        load("sst2", tmp_path)
    _one_line(info, folder / "dev.tsv", "line 1")


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
