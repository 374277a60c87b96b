"""Running a claim as a hypothesis property: drawn instances, shrinking, and a message naming the counterexample."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, assume, configuration, example, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis.errors import FlakyFailure

from ._common import _one_thread

_SEED: list[int | None] = [None]


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Within it, every :func:`check_drawn` draws from ``seed`` (the same instances on every run)."""
    before, _SEED[0] = _SEED[0], int(seed)
    try:
        yield
    finally:
        _SEED[0] = before


_HOME = "__hypothesis_home_directory"  # hypothesis.configuration's own, resolved at its first storage access
_SCRATCH: list[Path] = []


@contextmanager
def _no_folder_here() -> Iterator[None]:
    """Within it, hypothesis's storage (its cache of constants read from source files; the kit keeps no example
    database) is a scratch folder of this process, removed at exit, where hypothesis would otherwise create
    ``.hypothesis/`` in the working directory: no ``HYPOTHESIS_STORAGE_DIRECTORY``, no home set by the caller or
    resolved already (as pytest's run does), and no ``.hypothesis`` folder here. Leaving restores the home as it was."""
    before = getattr(configuration, _HOME, None)
    settable = hasattr(configuration, "set_hypothesis_home_dir")  # hypothesis's own; another version may lack it
    here = Path.cwd() / ".hypothesis"
    if not settable or before is not None or os.getenv("HYPOTHESIS_STORAGE_DIRECTORY") or here.exists():
        yield
        return
    if not _SCRATCH:
        _SCRATCH.append(Path(tempfile.mkdtemp(prefix="solvers-testing-")))
        atexit.register(shutil.rmtree, _SCRATCH[0], True)
    configuration.set_hypothesis_home_dir(_SCRATCH[0])
    try:
        yield
    finally:
        configuration.set_hypothesis_home_dir(before)


def reject() -> None:
    """Discard the instance being checked: it cannot tell a right scheme from a wrong one (hypothesis draws another)."""
    assume(False)


class Counterexample(AssertionError):
    """A claim that failed on a drawn instance; ``str`` names the claim, the evidence and the (shrunk) instance."""


def check_drawn(
    strategy: Any,
    claim: Callable[[Any], Any],
    examples: int,
    fixed: Sequence[Any] = (),
) -> None:
    """Run ``claim(instance)`` on ``examples`` instances drawn from ``strategy`` (and first on each of ``fixed``).

    A failing claim raises ``AssertionError``; hypothesis then shrinks the instance to the smallest one that still
    fails, and the error raised here carries that claim's message with the instance it failed on. The draws follow the
    active hypothesis profile (derandomized under this project's ``ci`` profile), or the seed of an enclosing
    :func:`seeded`, with no deadline and no example database (nothing is written to the working directory).
    """
    if examples <= 0 and not fixed:
        return

    def run(instance: Any) -> None:
        try:
            claim(instance)
        except Counterexample:
            raise
        except AssertionError as error:
            raise Counterexample(f"{error}\n  counterexample: {instance}") from None

    test = given(strategy)(run)
    for instance in reversed(list(fixed)):
        test = example(instance)(test)
    seed = _SEED[0]
    if seed is not None:
        test = hypothesis_seed(seed)(test)
    test = settings(
        max_examples=max(examples, 1),
        derandomize=False if seed is not None else settings.default.derandomize,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
        phases=[Phase.explicit, Phase.generate, Phase.shrink] if examples > 0 else [Phase.explicit],
    )(test)
    try:
        with _one_thread(), _no_folder_here():
            test()
    except FlakyFailure as group:  # a failure that did not repeat on the same instance: report the first one
        first = next((e for e in group.exceptions if isinstance(e, AssertionError)), None)
        if first is None:
            raise
        raise AssertionError(
            f"{first} (it did not fail again on the same instance: does the scheme keep state between calls, or "
            "draw random numbers?)"
        ) from None
    except Counterexample as error:
        raise AssertionError(str(error)) from None
