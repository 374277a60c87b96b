"""The application stays small enough to read: ``odeformer/app`` (its commands, the run and the reporting) within a
line budget. The goal is 6,000 lines of Python; the budget is the size reached so far, rounded up to the next
hundred, and comes down as the app does (lower it when the app shrinks; never raise it to make room)."""

import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUDGET = 8_900
"""The most lines of Python ``odeformer/app`` may hold now (the goal: 6,000)."""


def app_lines(root: pathlib.Path = ROOT) -> int:
    """The lines of every ``.py`` file under ``odeformer/app`` (as ``wc -l`` counts them)."""
    return sum(path.read_text(encoding="utf-8").count("\n") for path in (root / "odeformer" / "app").rglob("*.py"))


def test_the_app_stays_within_its_line_budget():
    lines = app_lines()
    assert lines <= BUDGET, f"odeformer/app holds {lines} lines of Python, over its budget of {BUDGET} (goal 6,000)"
