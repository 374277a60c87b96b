"""Hostile files beside a finished run, read by the commands that reuse or rebuild it (``odeformer-compare``,
``odeformer-reproduce``, ``odeformer-sample``, ``odeformer-diagnose``, ``odeformer-analyze``): each is one line
naming the file and what is allowed, before anything is built, allocated or trained."""

from __future__ import annotations

import pytest

from odeformer.app.run.sweep import Job, Sweep


def _never_composed(overrides):
    raise AssertionError(f"a refused run was composed: {overrides}")


@pytest.mark.parametrize("name", ["summary.json", "costs.json"])
def test_json_nested_too_deeply_is_one_line_naming_the_file(tmp_path, name):
    from odeformer.app.run.sweep import read_json

    (tmp_path / name).write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="nests its JSON too deeply") as refused:
        read_json(tmp_path / name)
    assert str(tmp_path / name) in str(refused.value)


def test_a_reused_summary_nested_too_deeply_stops_the_sweep_in_one_line(tmp_path):
    run = tmp_path / "runs" / "job"
    run.mkdir(parents=True)
    (run / "summary.json").write_text('{"a":' * 50_000 + "1" + "}" * 50_000)
    with pytest.raises(ValueError, match="nests its JSON too deeply"):
        Sweep(_never_composed, 1).run([Job("job", "row", "", 0, ["solver=diffusion"])], tmp_path / "runs")
