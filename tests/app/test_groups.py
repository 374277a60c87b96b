"""The config groups' table (:mod:`odeformer.app.run.groups`): it holds what the registries generate, and a process
that has the registries loaded generates them instead of reading it."""

from __future__ import annotations

import dataclasses
import json

import pytest
from omegaconf import OmegaConf

from odeformer.app.run import groups as table
from odeformer.app.run.config import group_options


def _shape(options: dict) -> dict:
    """Every node as OmegaConf composes it (keys, values) and, for a generated model node, each key's type."""
    out = {}
    for group, nodes in options.items():
        for name, node in nodes.items():
            typed = [(f.name, table._type_name(f.type)) for f in dataclasses.fields(node)] if group == "model" else []
            out[f"{group}/{name}"] = (OmegaConf.to_container(OmegaConf.structured(node)), typed, type(node).__name__)
    return out


def test_the_table_layout_holds_what_the_registries_generate():
    live = group_options()
    read = table.decode(json.loads(json.dumps(table.encode(live))))  # through the file's JSON text
    assert _shape(read) == _shape(live)
    assert sorted(read["solver"]) == sorted(live["solver"]) and len(read["solver"]) > 30


def test_the_packaged_table_is_what_the_registries_generate_now():
    """A default, a scheme or a model changed since the table was written: ``python -m odeformer.app.run.groups``
    writes it anew."""
    written = json.loads(table.TABLE.read_text(encoding="utf-8"))
    assert written == json.loads(json.dumps(table.encode(group_options()))), "python -m odeformer.app.run.groups"
    assert _shape(table.decode(written)) == _shape(group_options())


def test_a_model_node_read_from_the_table_still_refuses_a_value_of_the_wrong_type():
    read = table.decode(json.loads(json.dumps(table.encode(group_options()))))
    node = OmegaConf.structured(read["model"]["vit"])
    with pytest.raises(Exception, match="could not be converted to Integer"):
        node.depth = "abc"
    node.mlp_hidden = None  # an optional size stays optional


@pytest.mark.parametrize(
    "spoil",
    [
        {"data": {}},
        {"solver": {"x": {"continuous": False}}},
        {"model": {"m": {"class": "M", "doc": "", "fields": [["k", "list", 1]]}}},
    ],
    ids=["other-datasets", "solver-fields", "model-type"],
)
def test_a_table_of_another_layout_is_refused(spoil):
    text = {**json.loads(json.dumps(table.encode(group_options()))), **spoil}
    with pytest.raises((KeyError, TypeError, ValueError)):
        table.decode(text)


def test_a_process_with_the_registries_loaded_does_not_read_the_table(tmp_path, monkeypatch):
    """Here (a test process: torch and the registries are imported) the groups are generated, whatever the table
    says: what this process registered is not the package's own."""
    planted = table.encode(group_options())
    planted["train"]["default"]["lr"] = 123.0
    monkeypatch.setattr(table, "TABLE", tmp_path / "groups.json")
    table.TABLE.write_text(json.dumps(planted))
    assert table.groups()["train"]["default"].lr != 123.0
