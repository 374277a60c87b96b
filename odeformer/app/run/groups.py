"""The config groups a command composes with, without importing torch when it need not.

:func:`~odeformer.app.run.config.group_options` generates every option of every group from the registries (the
solvers, the task models' signatures, the dataset loaders), which import torch: seconds of start-up before a
command can say that a key is unknown or print its ``--help``. :func:`groups` gives the same options from a cache
written the last time they were generated, as long as nothing they are generated from has changed since:

- the cache is a JSON file, ``groups-<fingerprint>.json`` under ``$ODEFORMER_CACHE`` (default
  ``$XDG_CACHE_HOME/odeformer``, else ``~/.cache/odeformer``), whose fingerprint covers the Python version, torch's
  version and the size and modification time of every module of the ``odeformer`` and ``solvers`` packages; a
  change to any of them is another fingerprint, so a stale cache is never read;
- when the registries are already imported in this process (a script that registered a scheme of its own, a test,
  a command that has loaded torch anyway), the options are generated from them, and the cache is neither read nor
  written (what this process registered is not the packages' own);
- a cache that cannot be read, does not have the cache's layout, is a link, or could have been written by another
  user (owned by one, or writable by the group or others) is ignored (the options are generated, and the cache
  written again); one that cannot be written is not an error, and a write leaves the newest :data:`KEPT` caches of
  other fingerprints (other installations) and removes older ones.

The cache is data, never code: it holds names, plain values and type names from a fixed set (``int``, ``float``,
``bool``, ``str``, each optionally none), and what it names is still checked by the builder, which reaches only the
package's registered models, solvers and data.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import sys
from dataclasses import asdict, field, fields, make_dataclass
from pathlib import Path
from typing import Any, Optional

from .config import DATA, ContinuousSolverConfig, DataConfig, SolverConfig, TrainConfig

CACHE_VAR = "ODEFORMER_CACHE"
"""The environment variable naming the folder of the cache (default: ``$XDG_CACHE_HOME/odeformer``)."""
LAYOUT = 1
"""The cache file's layout; a file of another is ignored."""
KEPT = 4
"""How many caches (of as many installations or versions, the newest) a write leaves in the folder."""
_TYPES = {"int": int, "float": float, "bool": bool, "str": str}
_LOADED = ("solvers", "odeformer.registry", "odeformer.tasks", "odeformer.continuous")
"""Modules whose presence means the registries are in this process (and may hold what was registered in it)."""


def groups() -> dict[str, dict[str, Any]]:
    """Every option of every config group, ``{group: {name: node}}``, as
    :func:`~odeformer.app.run.config.group_options` generates them (see the module docstring for when the cache is
    read instead)."""
    loaded = any(name in sys.modules for name in _LOADED)
    path = None if loaded else cache_file()
    if path is not None:
        cached = _read(path)
        if cached is not None:
            return cached
    from .config import group_options

    generated = group_options()
    if path is not None:  # generated from the packages as imported just now, nothing registered by this process
        _write(path, encode(generated))
    return generated


def cache_folder() -> Path:
    """Where the cache lives: ``$ODEFORMER_CACHE``, else ``$XDG_CACHE_HOME/odeformer``, else ``~/.cache/odeformer``."""
    if os.environ.get(CACHE_VAR):
        return Path(os.environ[CACHE_VAR]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "odeformer"


def cache_file() -> Path | None:
    """The cache file for this installation (:func:`fingerprint`); None when the packages' files cannot be read."""
    found = fingerprint()
    return None if found is None else cache_folder() / f"groups-{found}.json"


def fingerprint() -> str | None:
    """A digest of what the generated options depend on: the Python version, torch's version (read from its
    installed metadata, not imported), and the path, size and modification time of every ``.py`` file of the
    ``odeformer`` and ``solvers`` packages. None if a package cannot be found."""
    digest = hashlib.sha256(f"{LAYOUT} {sys.version} ".encode())
    try:
        digest.update(importlib.metadata.version("torch").encode())
    except importlib.metadata.PackageNotFoundError:
        digest.update(b"no torch")
    for package in ("odeformer", "solvers"):
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            return None
        for root in spec.submodule_search_locations:
            for path in sorted(Path(root).rglob("*.py")):
                try:
                    info = path.stat()
                except OSError:
                    return None
                digest.update(f"{path.relative_to(root)} {info.st_size} {info.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:32]


# -- the cache's layout ---------------------------------------------------------------------------------------------


def _type_name(annotation: Any) -> str:
    """``int``, ``float``, ``bool`` or ``str``, with ``?`` when the key may be none."""
    import types
    import typing

    inner = [a for a in typing.get_args(annotation) if a is not type(None)]
    optional = typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(inner) == 1
    kind = inner[0] if optional else annotation
    name = next(n for n, t in _TYPES.items() if t is kind)
    return name + ("?" if optional else "")


def _annotation(name: str) -> Any:
    kind = _TYPES[name.rstrip("?")]
    return Optional[kind] if name.endswith("?") else kind  # noqa: UP045 (OmegaConf reads it at runtime)


def encode(options: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The cache's JSON layout of :func:`~odeformer.app.run.config.group_options`' result."""
    solver = {
        name: {"continuous": isinstance(node, ContinuousSolverConfig), "fields": asdict(node)}
        for name, node in options["solver"].items()
    }
    model = {
        name: {
            "class": type(node).__name__,
            "doc": type(node).__doc__ or "",
            "fields": [[f.name, _type_name(f.type), getattr(node, f.name)] for f in fields(node)],
        }
        for name, node in options["model"].items()
    }
    data = {name: asdict(node) for name, node in options["data"].items()}
    train = {name: asdict(node) for name, node in options["train"].items()}
    return {"layout": LAYOUT, "solver": solver, "model": model, "data": data, "train": train}


def decode(text: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The options the cache's layout holds (the inverse of :func:`encode`, up to tuples read as lists); a
    ``KeyError``, ``TypeError`` or ``ValueError`` for anything else."""
    if text.get("layout") != LAYOUT:
        raise ValueError("another layout")
    solver = {
        str(name): (ContinuousSolverConfig if entry["continuous"] else SolverConfig)(**entry["fields"])
        for name, entry in text["solver"].items()
    }
    model = {}
    for name, entry in text["model"].items():
        keys = [(str(key), _annotation(kind), field(default=value)) for key, kind, value in entry["fields"]]
        node = make_dataclass(str(entry["class"]), keys)
        node.__doc__ = str(entry["doc"])
        model[str(name)] = node()
    data = {str(name): DataConfig(**node) for name, node in text["data"].items()}
    train = {str(name): TrainConfig(**node) for name, node in text["train"].items()}
    if set(data) != set(DATA):
        raise ValueError("other datasets")
    return {"solver": solver, "model": model, "data": data, "train": train}


def _read(path: Path) -> dict[str, dict[str, Any]] | None:
    import stat

    try:
        info = os.lstat(path)
        mine = not hasattr(os, "getuid") or info.st_uid == os.getuid()
        if not stat.S_ISREG(info.st_mode) or info.st_mode & 0o022 or not mine:
            return None
        return decode(json.loads(path.read_text()))
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError, StopIteration):
        return None


def _write(path: Path, text: dict[str, Any]) -> None:
    from .. import files

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        files.write_text(path, json.dumps(text) + "\n")
        others = sorted(
            (p for p in path.parent.glob("groups-*.json") if p.name != path.name),
            key=lambda p: p.lstat().st_mtime_ns,
        )
        for old in others[: max(0, len(others) - (KEPT - 1))]:
            old.unlink()  # a link is removed, never its target
    except (OSError, files.UnsafeFile, TypeError, ValueError):
        return
