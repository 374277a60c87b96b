"""The README's and docs/extending.md's Python examples run as written."""

import pathlib
import re

import pytest

import solvers

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _python_blocks(path):
    return re.findall(r"```python\n(.*?)```", (ROOT / path).read_text(), re.S)


@pytest.mark.parametrize("path", ["README.md", "docs/extending.md"])
def test_python_examples_run(path, monkeypatch):
    monkeypatch.setattr(solvers, "STEPPERS", dict(solvers.STEPPERS))  # the page registers a scheme: keep it local
    blocks = _python_blocks(path)
    assert blocks, f"{path} has no python examples"
    namespace = {}
    for block in blocks:  # one namespace: later blocks use names from earlier ones, as a reader would
        exec(compile(block, str(ROOT / path), "exec"), namespace)


def test_extending_page_registers_its_scheme(monkeypatch):
    monkeypatch.setattr(solvers, "STEPPERS", dict(solvers.STEPPERS))
    namespace = {}
    for block in _python_blocks("docs/extending.md"):
        exec(compile(block, "extending.md", "exec"), namespace)
    assert solvers.STEPPERS["position_verlet"] is namespace["PositionVerlet"]


def test_readme_names_the_two_commands():
    text = (ROOT / "README.md").read_text()
    assert "make train" in text and "make test" in text
    for name in solvers.STEPPERS:
        assert f"`{name}`" in text, f"README's solver table is missing {name}"
