"""The config groups' cache (:mod:`odeformer.app.run.groups`): it holds what the registries generate, it is read only
when its fingerprint is the packages' own and it is the user's own regular file, and a process that has the
registries loaded neither reads nor writes it."""

from __future__ import annotations

import dataclasses
import json
import os
import types
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from odeformer.app.run import groups as cache
from odeformer.app.run.config import group_options


def _shape(options: dict) -> dict:
    """Every node as OmegaConf composes it (keys, values) and, for a generated model node, each key's type."""
    out = {}
    for group, nodes in options.items():
        for name, node in nodes.items():
            typed = [(f.name, cache._type_name(f.type)) for f in dataclasses.fields(node)] if group == "model" else []
            out[f"{group}/{name}"] = (OmegaConf.to_container(OmegaConf.structured(node)), typed, type(node).__name__)
    return out


def test_the_cache_holds_what_the_registries_generate():
    live = group_options()
    read = cache.decode(json.loads(json.dumps(cache.encode(live))))  # through the file's JSON text
    assert _shape(read) == _shape(live)
    assert sorted(read["solver"]) == sorted(live["solver"]) and len(read["solver"]) > 30


def test_a_model_node_read_from_the_cache_still_refuses_a_value_of_the_wrong_type():
    read = cache.decode(json.loads(json.dumps(cache.encode(group_options()))))
    node = OmegaConf.structured(read["model"]["vit"])
    with pytest.raises(Exception, match="could not be converted to Integer"):
        node.depth = "abc"
    node.mlp_hidden = None  # an optional size stays optional


def _written(folder: Path) -> Path:
    path = folder / "groups-0123.json"
    path.write_text(json.dumps(cache.encode(group_options())))
    path.chmod(0o644)
    return path


def test_the_users_own_cache_file_is_read(tmp_path):
    assert cache._read(_written(tmp_path)) is not None


def _change(path: Path, **groups) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **groups}))


@pytest.mark.parametrize(
    "spoil",
    [
        lambda p: p.write_text("{not json"),
        lambda p: p.write_text(json.dumps({"layout": cache.LAYOUT + 1})),
        lambda p: _change(p, data={}),
        lambda p: _change(p, solver={"x": {"continuous": False}}),
        lambda p: _change(p, model={"m": {"class": "M", "doc": "", "fields": [["k", "list", 1]]}}),
        lambda p: p.write_bytes(b"\xff\xfe"),
        lambda p: p.chmod(0o666),  # anyone could have written it
        lambda p: p.chmod(0o664),
        lambda p: (p.rename(p.with_suffix(".real")), p.symlink_to(p.with_suffix(".real"))),
        lambda p: (p.unlink(), p.mkdir()),
        lambda p: p.unlink(),
    ],
    ids=["not-json", "other-layout", "other-datasets", "solver-fields", "model-type", "not-text", "world-writable",
         "group-writable", "link", "folder", "missing"],
)  # fmt: skip
def test_a_cache_file_that_is_damaged_foreign_or_not_a_file_is_not_read(tmp_path, spoil):
    path = _written(tmp_path)
    spoil(path)
    assert cache._read(path) is None


def test_a_cache_file_of_another_user_is_not_read(tmp_path, monkeypatch):
    path = _written(tmp_path)
    monkeypatch.setattr(os, "getuid", lambda: os.stat(path).st_uid + 1)
    assert cache._read(path) is None


def _packages(root: Path, monkeypatch) -> dict[str, Path]:
    """Two packages of a few modules each, standing in for odeformer and solvers in :func:`fingerprint`."""
    found = {}
    for name in ("odeformer", "solvers"):
        folder = root / name
        (folder / "sub").mkdir(parents=True)
        (folder / "__init__.py").write_text("")
        (folder / "sub" / "scheme.py").write_text("X = 1\n")
        found[name] = folder
    specs = {name: types.SimpleNamespace(submodule_search_locations=[str(f)]) for name, f in found.items()}
    monkeypatch.setattr(cache.importlib.util, "find_spec", lambda name: specs.get(name))
    return found


def test_the_fingerprint_changes_with_any_module_of_the_packages(tmp_path, monkeypatch):
    found = _packages(tmp_path, monkeypatch)
    first = cache.fingerprint()
    assert first is not None and cache.fingerprint() == first  # the same files: the same fingerprint
    scheme = found["solvers"] / "sub" / "scheme.py"
    scheme.write_text("X = 22\n")  # another size
    second = cache.fingerprint()
    assert second != first
    os.utime(scheme, ns=(0, 0))  # the same size, another modification time
    assert cache.fingerprint() not in (first, second)
    (found["odeformer"] / "new.py").write_text("")  # a module added
    assert cache.fingerprint() not in (first, second)


def test_no_fingerprint_without_the_packages(tmp_path, monkeypatch):
    _packages(tmp_path, monkeypatch)
    monkeypatch.setattr(cache.importlib.util, "find_spec", lambda name: None)
    assert cache.fingerprint() is None and cache.cache_file() is None


def test_the_cache_folder_is_the_users_choice(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.CACHE_VAR, str(tmp_path / "mine"))
    assert cache.cache_folder() == tmp_path / "mine"
    monkeypatch.delenv(cache.CACHE_VAR)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_folder() == tmp_path / "xdg" / "odeformer"


def test_a_process_with_the_registries_loaded_neither_reads_nor_writes_the_cache(tmp_path, monkeypatch):
    """Here (a test process: torch and the registries are imported) the groups are generated, whatever a cache file
    says, and no file is written: what this process registered is not the packages' own."""
    monkeypatch.setenv(cache.CACHE_VAR, str(tmp_path))
    path = cache.cache_file()
    assert path is not None and path.parent == tmp_path
    planted = cache.encode(group_options())
    planted["train"]["default"]["lr"] = 123.0
    path.write_text(json.dumps(planted))
    path.chmod(0o644)
    assert cache.groups()["train"]["default"].lr != 123.0
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_a_write_keeps_the_newest_caches_of_other_fingerprints_and_nothing_else_is_touched(tmp_path):
    names = [f"groups-old{i}.json" for i in range(cache.KEPT + 2)]
    for i, name in enumerate(names):
        (tmp_path / name).write_text("{}")
        os.utime(tmp_path / name, ns=(i * 10**9, i * 10**9))  # old0 the oldest
    (tmp_path / "notes.txt").write_text("mine")
    cache._write(tmp_path / "groups-new.json", cache.encode(group_options()))
    kept = names[-(cache.KEPT - 1) :]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["groups-new.json", "notes.txt", *kept])
    assert cache._read(tmp_path / "groups-new.json") is not None


def test_the_fingerprint_changes_with_python_and_torch(tmp_path, monkeypatch):
    _packages(tmp_path, monkeypatch)
    first = cache.fingerprint()
    monkeypatch.setattr(cache.importlib.metadata, "version", lambda name: "0.0.0-another")
    second = cache.fingerprint()
    monkeypatch.setattr(cache.sys, "version", "another Python")
    assert len({first, second, cache.fingerprint()}) == 3


def test_a_cache_that_cannot_be_written_is_not_an_error(tmp_path):
    (tmp_path / "file").write_text("x")
    cache._write(tmp_path / "file" / "groups-new.json", cache.encode(group_options()))  # a file where a folder goes
    assert (tmp_path / "file").read_text() == "x"
