"""scikit-learn's handwritten digits: 1797 grey 8x8 images of 0-9, shipped inside the scikit-learn wheel."""

from __future__ import annotations

import numpy as np
import torch

from ._common import TaskData, check_int, split_sizes


def _stratified_take(index: np.ndarray, labels: np.ndarray, size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(rest, taken)``: ``size`` items of ``index`` drawn with class proportions kept, and the others."""
    if size == 0:
        return index, index[:0]
    from sklearn.model_selection import train_test_split

    rest, taken = train_test_split(index, test_size=size, stratify=labels[index], random_state=seed)
    return rest, taken


def digits(root: str | None = None, seed: int = 0, val_fraction: float = 0.1, test_fraction: float = 0.2) -> TaskData:
    """Image task on the 8x8 digits (1 channel, 10 classes); pixels ``0..16`` are scaled to ``[0, 1]``.

    The split is stratified by class and fixed by ``seed``: ``floor(1797 * test_fraction)`` test images, then
    ``floor(1797 * val_fraction)`` validation images, the rest for training. ``root`` is ignored (no files needed).
    """
    from sklearn.datasets import load_digits

    seed = check_int("seed", seed, minimum=0)
    bunch = load_digits()
    images = torch.from_numpy(bunch.images / 16.0).float().unsqueeze(1)  # (1797, 1, 8, 8)
    labels = torch.from_numpy(bunch.target).long()
    _, n_val, n_test = split_sizes(len(labels), val_fraction, test_fraction)

    index = np.arange(len(labels))
    rest, test = _stratified_take(index, bunch.target, n_test, seed)
    train, val = _stratified_take(rest, bunch.target, n_val, seed)
    splits = {}
    for name, part in (("train", train), ("val", val), ("test", test)):
        part = torch.from_numpy(np.sort(part))
        splits[name] = (images[part], labels[part])
    meta = {"name": "digits", "image_size": 8, "in_chans": 1, "num_classes": 10}
    return TaskData("image", splits, meta)
