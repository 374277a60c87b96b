import os
import pickle
import struct
import types
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import settings

# `dev` (what `make test` uses) and `ci`: derandomized, no deadline (machines are shared and noisy). Derandomized,
# because several tests assert that the kit *finds* a wrong scheme within its drawn examples (a Heun that sub-steps
# only where the state exceeds 50 in size, say): with fresh random draws each run, such a test passes or fails by
# luck. What a derandomized run draws depends on hypothesis's version, so constraints.txt pins it; the fakes' tests
# are also meant to pass whatever is drawn (`python tests/solvers/test_kit_drawn.py --seeds 16` measures how often the
# kit finds each). `explore`: fresh random draws, for hunting new counterexamples (HYPOTHESIS_PROFILE=explore make
# test).
settings.register_profile("ci", derandomize=True, deadline=None, max_examples=20, print_blob=True)
settings.register_profile("dev", derandomize=True, deadline=None, max_examples=20)
settings.register_profile("explore", deadline=None, max_examples=20)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

# Test processes side by side (pytest-xdist, `make test`): the cores are shared out, so each process runs torch on its
# share of them instead of every process on all of them.
if os.environ.get("PYTEST_XDIST_WORKER"):
    import torch

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    torch.set_num_threads(max(1, cores // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))))

# Real datasets: CI sets ODEFORMER_DATA (and ODEFORMER_REQUIRE_DATA=1); a checkout beside ../shared/data finds them
# there too, unless ODEFORMER_NO_SHARED_DATA=1 (how to see what a fresh clone sees).
_GIVEN = bool(os.environ.get("ODEFORMER_DATA"))
_shared = Path(__file__).resolve().parents[2] / "shared" / "data"
if _shared.is_dir() and os.environ.get("ODEFORMER_NO_SHARED_DATA") != "1":
    os.environ.setdefault("ODEFORMER_DATA", str(_shared))


def data_required() -> bool:
    """Whether tests marked ``data`` fail (rather than skip) when their files are missing: ``ODEFORMER_REQUIRE_DATA``
    if set (1 or 0), else whether the environment gave ``ODEFORMER_DATA``."""
    flag = os.environ.get("ODEFORMER_REQUIRE_DATA")
    return flag == "1" if flag in ("0", "1") else _GIVEN


def _needed(item) -> list[str]:
    """The datasets the ``data`` marks of ``item`` ask for.

    ``@pytest.mark.data`` needs every dataset of ``odeformer-data``; ``@pytest.mark.data("cora", ...)`` those named.
    ``only={param value: dataset(s)}`` limits a parametrized test's mark to the cases whose parameters take one of
    those values, and needs the datasets they map to.
    """
    from odeformer.data.sources import SOURCES  # here, so that collecting tests without the mark imports no odeformer

    needed: list[str] = []
    for mark in item.iter_markers("data"):
        unknown = [name for name in mark.args if name not in SOURCES]
        if unknown:
            raise pytest.UsageError(f"@pytest.mark.data: unknown dataset(s) {unknown}; choose from {list(SOURCES)}.")
        only = mark.kwargs.get("only")
        if only is None:
            needed += list(mark.args or SOURCES)
            continue
        params = getattr(getattr(item, "callspec", None), "params", {})
        for value in params.values():
            if isinstance(value, str) and value in only:
                chosen = only[value]
                needed += [chosen] if isinstance(chosen, str) else list(chosen)
    return list(dict.fromkeys(needed))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Skip a test marked ``data`` whose files are absent, in one line naming ODEFORMER_DATA; fail it instead where
    the data was given (:func:`data_required`)."""
    needed = _needed(item)
    if not needed:
        return
    from odeformer.app.commands.data import missing as missing_files

    root = os.environ.get("ODEFORMER_DATA")
    fetch = f"odeformer-data {' '.join(needed)}"
    if not root:
        message = f"needs the {', '.join(needed)} data: set ODEFORMER_DATA to a data root (fill one with `{fetch}`)"
    else:
        absent = missing_files(root, needed)
        if not absent:
            return
        shown = str(absent[0]) + (f" and {len(absent) - 1} more file(s)" if len(absent) > 1 else "")
        message = f"needs the {', '.join(needed)} data: ODEFORMER_DATA={root} lacks {shown} (get it with `{fetch}`)"
    if data_required():
        pytest.fail(f"{message}; the data was given (ODEFORMER_DATA or ODEFORMER_REQUIRE_DATA=1), so it must be there")
    pytest.skip(message)


# -------------------------------------------------------------------------------------------- tiny dataset files
# Small files in the real formats and layout, for the loaders' own tests and the downloader's: written here once.


class _Py2Pickler(pickle._Pickler):
    """Protocol-2 pickles as Python 2.7 wrote them: byte and text strings as py2 ``str`` (``STRING`` opcodes, which
    Python 3 reads back only with ``encoding="latin1"``) and the module names of the numpy / scipy of that era
    (``numpy.core.multiarray``, ``scipy.sparse.csr``, ``__builtin__``), as in the published Planetoid files."""

    dispatch = pickle._Pickler.dispatch.copy()

    def __init__(self, file):
        super().__init__(file, protocol=2)

    def _save_py2_str(self, obj):
        data = obj if isinstance(obj, bytes) else obj.encode("latin1")
        if len(data) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(data)]) + data)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", len(data)) + data)
        self.memoize(obj)

    dispatch[bytes] = _save_py2_str
    dispatch[str] = _save_py2_str
    dispatch[types.FunctionType] = lambda self, obj: self.save_global(obj)

    def save_global(self, obj, name=None):
        name = name or obj.__qualname__
        module = obj.__module__
        module = {"builtins": "__builtin__", "copyreg": "copy_reg"}.get(module, module)
        module = module.replace("numpy._core.", "numpy.core.")
        if module.startswith("scipy.sparse._"):
            module = "scipy.sparse." + module.removeprefix("scipy.sparse._")  # scipy.sparse._csr -> scipy.sparse.csr
        self.write(pickle.GLOBAL + f"{module}\n{name}\n".encode("ascii"))
        self.memoize(obj)


def write_py2_pickle(path, obj):
    with open(path, "wb") as f:
        _Py2Pickler(f).dump(obj)


def write_py3_pickle(path, obj):
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=2)


def write_planetoid(root, name="cora", style="py2", **replace):
    """A CiteSeer-like Planetoid graph ``name`` in ``root/planetoid``: 514 known nodes (10 labelled), test ids 518,
    514, 516 (unsorted) that skip 515 and 517 (isolated nodes missing from test.index), a ring of 519 nodes with a
    chord 0-5, a duplicate edge 0-1 and a self loop 0-0. ``replace`` swaps parts (``x``, ..., ``graph``; a
    ``test.index`` text as ``test_index``). Returns the ``folder``, the dense ``allx`` and ``tx``, and the pickled
    ``parts``."""
    folder = Path(root) / "planetoid"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    n_known, features, classes = 514, 6, 3
    allx = rng.integers(0, 2, (n_known, features)).astype(np.float32)
    allx[3] = 0  # an empty feature row stays zero
    tx = rng.integers(1, 3, (3, features)).astype(np.float32)
    ally = np.eye(classes, dtype=np.int32)[np.arange(n_known) % classes]
    ty = np.eye(classes, dtype=np.int32)[[2, 1, 0]]
    graph = defaultdict(list, {i: [(i + 1) % 519] for i in range(519)})
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
    test_index = replace.pop("test_index", "518\n514\n516\n")
    parts.update(replace)
    write = {"py2": write_py2_pickle, "py3": write_py3_pickle}[style]
    for part, obj in parts.items():
        write(folder / f"ind.{name}.{part}", obj)
    (folder / f"ind.{name}.test.index").write_text(test_index)
    return SimpleNamespace(folder=folder, allx=allx, tx=tx, parts=parts)


SHAKESPEARE = (
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n"
    "First Citizen:\nYou are all resolved rather to die than to famish?\n\nAll:\nResolved. resolved.\n"
)


def write_shakespeare(root, text=SHAKESPEARE):
    """``text`` (str, or bytes written as they are) as ``root/text/tinyshakespeare.txt``; returns the path."""
    path = Path(root) / "text" / "tinyshakespeare.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


SST2 = {
    "train": "sentence\tlabel\nIt 's GOOD , good .\t1\nbad film\t0\nbad\t0\n",
    "dev": "a good, unseen film\t1\n",  # no header
    "test": "sentence\tlabel\nnot bad at all\t1\n",
}


def write_sst2(root, **files):
    """``root/sst2/{train,dev,test}.tsv`` from :data:`SST2`, any of them replaced by ``files``; returns the folder."""
    folder = Path(root) / "sst2"
    folder.mkdir(parents=True, exist_ok=True)
    for split, text in {**SST2, **files}.items():
        (folder / f"{split}.tsv").write_text(text, encoding="utf-8")
    return folder


@pytest.fixture
def write_data():
    """The tiny-file writers: ``write_data.planetoid(root, ...)``, ``.shakespeare(root, text)``, ``.sst2(root, ...)``
    and ``.pickle(path, obj)`` (Python-2 style)."""
    return SimpleNamespace(
        planetoid=write_planetoid, shakespeare=write_shakespeare, sst2=write_sst2, pickle=write_py2_pickle
    )


@pytest.fixture
def tiny_root(tmp_path):
    """A data root with every file-based dataset in tiny form, under the real names (``planetoid/ind.cora.*``,
    ``text/tinyshakespeare.txt``, ``sst2/*.tsv``)."""
    root = tmp_path / "tiny-data"
    write_planetoid(root)
    write_shakespeare(root)
    write_sst2(root)
    return root
