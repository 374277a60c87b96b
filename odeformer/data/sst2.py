"""SST-2 sentence sentiment (positive / negative) for the masked-LM classifier.

``<root>/sst2/{train,dev,test}.tsv`` hold ``sentence<TAB>label`` lines under a ``sentence<TAB>label`` header: train
60,614 and dev 6,735 (a re-split of GLUE's train), test 872 (GLUE's dev). They are ``data/SST-2`` of
github.com/forest-snow/alps; ``odeformer-data sst2`` downloads them.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path

import torch

from ._common import TaskData, check_int, one_line, require_file, resolve_root

SOURCE = (
    "run `odeformer-data sst2`, or get train.tsv, dev.tsv and test.tsv from github.com/forest-snow/alps (data/SST-2) "
    "into <root>/sst2/"
)
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[MASK]"]
PAD, UNK, CLS, MASK = range(len(SPECIALS))
FILES = {"train": "train.tsv", "val": "dev.tsv", "test": "test.tsv"}
TOKEN = re.compile(r"\w+(?:'\w+)*|'\w+|[^\w\s]")  # words (with inner/leading apostrophes: "n't", "'s"), punctuation


def tokenize(sentence: str) -> list[str]:
    """Lower-cased words and single punctuation marks: ``"It 's well-made ."`` -> ``it 's well - made .``."""
    return TOKEN.findall(sentence.lower())


def read_tsv(path: Path) -> tuple[list[list[str]], list[int]]:
    """``(tokenised sentences, labels)`` of a tab-separated file of sentences and 0/1 labels.

    A first line of single words whose last is not an integer is a header: the columns it names ``sentence`` and
    ``label`` are read (an exported file may carry an index column too), and every row must have the header's number
    of fields; a header of two other names is read as ``sentence<TAB>label``. Without a header every row is
    ``sentence<TAB>label``, two fields exactly. A byte-order mark is
    ignored; a file that is not UTF-8, or a row that does not fit, is a one-line error naming the file and line.
    """
    sentences, labels = [], []
    columns, sentence_at, label_at = 2, 0, 1
    try:
        with open(path, encoding="utf-8-sig") as f:
            for number, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                fields = line.rstrip("\r\n").split("\t")
                words = all(re.fullmatch(r"\s*\w+\s*", name) for name in fields)
                if number == 1 and len(fields) > 1 and words and not fields[-1].strip().lstrip("-").isdigit():
                    columns, sentence_at, label_at = _header(path, [name.strip().lower() for name in fields])
                    continue
                if len(fields) != columns or fields[label_at].strip() not in ("0", "1"):
                    layout = "sentence<TAB>label" if columns == 2 else f"{columns} fields as its header names"
                    raise ValueError(
                        f"sst2: {path} line {number} is not {layout} with label 0 or 1: {one_line(line)[:60]!r}."
                    )
                sentences.append(tokenize(fields[sentence_at]))
                labels.append(int(fields[label_at]))
    except UnicodeDecodeError as error:
        raise ValueError(f"sst2: {path} is not UTF-8 text ({error.reason} at byte {error.start}); {SOURCE}.") from None
    return sentences, labels


def _header(path: Path, names: list[str]) -> tuple[int, int, int]:
    """``(columns, sentence column, label column)`` from a header's lower-cased names."""
    if "label" in names:
        if "sentence" in names or len(names) == 2:
            label_at = names.index("label")
            return len(names), names.index("sentence") if "sentence" in names else 1 - label_at, label_at
    elif len(names) == 2 and "sentence" not in names:
        return 2, 0, 1  # two columns of other names: sentence, then label
    raise ValueError(
        f"sst2: {path}'s header names the columns {names}: name a 'label' column (GLUE's test.tsv has none) and, "
        "beside others, a 'sentence' column."
    )


def build_vocab(sentences: list[list[str]], min_freq: int, max_vocab: int) -> list[str]:
    """The special tokens, then words seen at least ``min_freq`` times, most frequent first (ties alphabetical), up
    to ``max_vocab`` entries in all."""
    counts = Counter(word for sentence in sentences for word in sentence)
    words = sorted((word for word, count in counts.items() if count >= min_freq), key=lambda w: (-counts[w], w))
    return SPECIALS + words[: max_vocab - len(SPECIALS)]


def encode(sentences: list[list[str]], stoi: dict[str, int], max_len: int) -> torch.Tensor:
    """``(N, max_len)`` ids: ``[CLS]`` then the words (unknown ones ``[UNK]``), cut to ``max_len``, padded with 0."""
    rows = []
    for sentence in sentences:
        ids = [CLS] + [stoi.get(word, UNK) for word in sentence[: max_len - 1]]
        rows.append(ids + [PAD] * (max_len - len(ids)))
    return torch.tensor(rows, dtype=torch.int64).reshape(len(sentences), max_len)


def sst2(
    root: str | os.PathLike | None = None, max_len: int = 64, min_freq: int = 1, max_vocab: int = 20000
) -> TaskData:
    """Sequence task: ``[CLS]``-prefixed sentences, right-padded to ``max_len``, and their 0/1 sentiment labels.

    The vocabulary comes from the training split alone: ``[PAD]=0, [UNK]=1, [CLS]=2, [MASK]=3``, then words by
    frequency; ``max_vocab`` bounds its total size (specials included). Splits: train.tsv, dev.tsv (val), test.tsv;
    a file without sentences (empty, or a header alone) is a ValueError naming it.
    """
    max_len = check_int("max_len", max_len, minimum=2)
    min_freq = check_int("min_freq", min_freq, minimum=1)
    max_vocab = check_int("max_vocab", max_vocab, minimum=len(SPECIALS) + 1)
    folder = resolve_root(root, "sst2", "sst2/{train,dev,test}.tsv") / "sst2"
    paths = {split: require_file(folder / name, "sst2", SOURCE) for split, name in FILES.items()}
    data = {split: read_tsv(path) for split, path in paths.items()}
    for split, (sentences, _) in data.items():
        if not sentences:
            raise ValueError(f"sst2: {paths[split]} holds no sentences, so the {split} split would be empty; {SOURCE}.")

    vocab = build_vocab(data["train"][0], min_freq, max_vocab)
    stoi = {word: index for index, word in enumerate(vocab)}
    splits = {
        split: (encode(sentences, stoi, max_len), torch.tensor(labels, dtype=torch.int64))
        for split, (sentences, labels) in data.items()
    }
    meta = {
        "name": "sst2",
        "vocab_size": len(vocab),
        "max_len": max_len,
        "pad_id": PAD,
        "unk_id": UNK,
        "cls_id": CLS,
        "mask_id": MASK,
        "num_classes": 2,
        "vocab": vocab,
    }
    return TaskData("sequence", splits, meta)
