"""Fashion-MNIST: 70k grey 28x28 images of clothing in 10 classes, read from the four gzipped idx files.

On Debian/Ubuntu ``apt-get install dataset-fashion-mnist`` puts them in ``/usr/share/datasets/fashion-mnist``;
elsewhere download them from github.com/zalandoresearch/fashion-mnist (``data/fashion``).
"""

from __future__ import annotations

import gzip
import os
import struct
import zlib
from pathlib import Path

import numpy as np
import torch

from ._common import ENV_VAR, DatasetNotFound, TaskData, check_int, one_line

DEFAULT_DIR = Path("/usr/share/datasets/fashion-mnist")
FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]
HOW_TO_GET = (
    "install them with `apt-get install dataset-fashion-mnist` (Debian/Ubuntu) or download the four *-ubyte.gz files "
    "from github.com/zalandoresearch/fashion-mnist (data/fashion)"
)


def _candidates(root: str | os.PathLike | None) -> list[Path]:
    """Folders to look in: ``<root>/fashion-mnist`` and ``<root>`` if ``root`` is given; otherwise
    ``$ODEFORMER_DATA/fashion-mnist`` (when set) and the Debian package's folder."""
    if root is not None and str(root) != "":
        root = Path(root).expanduser()
        return [root / "fashion-mnist", root]
    env = os.environ.get(ENV_VAR)
    return ([Path(env).expanduser() / "fashion-mnist"] if env else []) + [DEFAULT_DIR]


def _find(folder: Path, name: str) -> Path | None:
    """``folder/name``, or its gunzipped twin ``folder/name`` without ``.gz``, whichever exists."""
    for path in (folder / name, folder / name.removesuffix(".gz")):
        if path.is_file():
            return path
    return None


def _locate(root: str | os.PathLike | None) -> dict[str, Path]:
    """The four idx files from the first candidate folder that holds all of them."""
    folders = _candidates(root)
    for folder in folders:
        found = {name: _find(folder, name) for pair in FILES.values() for name in pair}
        if all(found.values()):
            return found
    first = next((folder for folder in folders if folder.is_dir()), folders[0])
    missing = next(name for pair in FILES.values() for name in pair if _find(first, name) is None)
    where = first / missing if first.is_dir() else first
    others = [str(folder) for folder in folders if folder != first]
    also = f" (also looked in {', '.join(others)})" if others else ""
    raise DatasetNotFound(f"fashion_mnist: missing {where}{also}; {HOW_TO_GET}.")


def read_idx(path: Path) -> np.ndarray:
    """The uint8 array in an idx file (gzipped or not): magic ``0 0 8 ndim``, ``ndim`` big-endian sizes, the data."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError, zlib.error) as error:  # gzip.BadGzipFile is an OSError
        raise ValueError(f"fashion_mnist: cannot read {path} ({one_line(error)}); {HOW_TO_GET}.") from None
    if len(raw) < 4 or raw[:3] != b"\x00\x00\x08" or not 1 <= raw[3] <= 4:
        raise ValueError(f"fashion_mnist: {path} is not a uint8 idx file (bad magic number); {HOW_TO_GET}.")
    ndim = raw[3]
    offset = 4 + 4 * ndim
    if len(raw) < offset:
        raise ValueError(f"fashion_mnist: {path} is truncated inside its header; {HOW_TO_GET}.")
    shape = struct.unpack(f">{ndim}I", raw[4:offset])
    if len(raw) != offset + int(np.prod(shape)):
        raise ValueError(
            f"fashion_mnist: {path} is truncated or corrupt: {len(raw) - offset} data bytes where its header "
            f"promises shape {shape}; {HOW_TO_GET}."
        )
    return np.frombuffer(raw, dtype=np.uint8, offset=offset).reshape(shape)


def _read_pair(images_path: Path, labels_path: Path) -> tuple[np.ndarray, np.ndarray]:
    images, labels = read_idx(images_path), read_idx(labels_path)
    if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
        raise ValueError(
            f"fashion_mnist: {images_path} and {labels_path} do not match: image array {images.shape}, label "
            f"array {labels.shape} (expected (N, 28, 28) and (N,)); {HOW_TO_GET}."
        )
    if labels.size and labels.max() >= len(CLASSES):
        raise ValueError(f"fashion_mnist: {labels_path} holds label {labels.max()}, expected 0-9; {HOW_TO_GET}.")
    return images, labels


def _tensors(images: np.ndarray, labels: np.ndarray, index: np.ndarray | None = None):
    """``(images float32 (n, 1, 28, 28) in [0, 1], labels int64 (n,))`` of the rows ``index`` (all when None)."""
    images, labels = (images.copy(), labels) if index is None else (images[index], labels[index])  # writable copies
    x = torch.from_numpy(images).unsqueeze(1).float().div_(255.0)
    return x, torch.from_numpy(labels.astype(np.int64))


def fashion_mnist(
    root: str | os.PathLike | None = None, subset: int | None = None, val_size: int = 5000, seed: int = 0
) -> TaskData:
    """Image task on Fashion-MNIST (1 channel, 28x28, 10 classes), pixels scaled to ``[0, 1]``.

    The 60k training images are shuffled by ``seed``: the first ``val_size`` form the validation split and the next
    ``subset`` (all the others when ``None``) the training split, kept in file order. The test split is the official
    10k test set. Files are looked up in ``<root>/fashion-mnist`` then ``<root>``; without ``root`` in
    ``$ODEFORMER_DATA/fashion-mnist`` then ``/usr/share/datasets/fashion-mnist``.
    """
    seed = check_int("seed", seed, minimum=0)
    val_size = check_int("val_size", val_size, minimum=0)
    if subset is not None:
        subset = check_int("subset", subset, minimum=1)

    files = _locate(root)
    train_images, train_labels = _read_pair(*(files[name] for name in FILES["train"]))
    test_images, test_labels = _read_pair(*(files[name] for name in FILES["test"]))
    available = len(train_labels) - val_size
    if available < 1:
        raise ValueError(f"val_size must be below the {len(train_labels)} training images, got {val_size}.")
    if subset is not None and subset > available:
        raise ValueError(
            f"subset must be between 1 and {available} (training images left after val_size={val_size}), got {subset}."
        )

    order = np.random.default_rng(seed).permutation(len(train_labels))
    val = np.sort(order[:val_size])
    train = np.sort(order[val_size:] if subset is None else order[val_size : val_size + subset])
    splits = {
        "train": _tensors(train_images, train_labels, train),
        "val": _tensors(train_images, train_labels, val),
        "test": _tensors(test_images, test_labels),
    }
    meta = {"name": "fashion_mnist", "image_size": 28, "in_chans": 1, "num_classes": 10, "classes": list(CLASSES)}
    return TaskData("image", splits, meta)
