"""Every shell command in README.md and the pages it sends a reader to (``test_docs.PAGES``), run in a tiny form (few
steps, small models, a scratch directory).

Each command line of their ``bash`` blocks must match one rule below; a new line without a rule fails
``test_every_readme_command_has_a_tiny_form``, so the pages cannot drift from what runs. A line the README repeats
from a page (its examples are the pages' own) runs once. The rules add only what makes
a command small (``train.max_steps=2``, ``--batch 4``, an output folder) and never change what it selects.
"""

import os
import re
import shlex
from pathlib import Path

import pytest
from test_docs import PAGES, ROOT, blocks, commands, shell

DATA = os.environ.get("ODEFORMER_DATA")
SMALL = ["train.max_steps=2", "train.eval_every=2", "train.progress=false"]
NEEDS_DATA = ("difformer_cora", "cora_deep", "shakespeare", "sst2")


def readme_commands() -> list[str]:
    """The command lines of the pages' ``bash`` blocks, each once, in the order the pages show them."""
    found = [
        c
        for page in PAGES
        for language, name, text in blocks(page)
        if language == "bash" and not name
        for c in commands(text)
    ]
    return list(dict.fromkeys(found))


def _train(command: str, tmp: Path, index: int) -> list[str]:
    """An ``odeformer-train`` line with its run made small and written under ``tmp``."""
    parts = shlex.split(command)
    extra = list(SMALL)
    if not any(p.startswith("model.depth=") for p in parts) and "experiment=" not in command:
        extra.append("model.depth=2")
    if "-m" in parts:
        extra.append(f"hydra.sweep.dir={tmp / f'sweep{index}'}")
    elif not any(p.startswith("train.out_dir=") for p in parts):
        extra.append(f"train.out_dir={tmp / f'run{index}'}")
    return [*parts, *extra]


def _tiny(command: str, tmp: Path, index: int) -> list[list[str]] | str:
    """The commands that run ``command`` small, or a string saying why it is checked another way."""
    words = shlex.split(command)
    if command == "make test":
        return "the test suite itself: Makefile's test target runs pytest (checked below)"
    if command == "make train":
        recipe = _recipe("train").replace("$(VENV)/bin/", "")
        return [_train(recipe, tmp, index)]
    if command == "make bench":
        return (
            "benchmarks.run --smoke runs in tests/house/test_benchmarks.py (slow); the Makefile target is checked below"
        )
    if words[:3] == ["python", "-m", "benchmarks.profile_models"]:
        return "tests/house/test_benchmarks.py runs it with --tiny (slow)"
    if words[0] == "bash" and "gpu_check.sh" in command:
        return "needs a CUDA device (benchmarks/gpu_check.sh exits early without one)"
    if words[:3] == ["python", "-m", "benchmarks.gpu"]:
        results = tmp / "RESULTS.md"
        results.write_text("# Results\n")
        return [
            [
                "python",
                "-m",
                "benchmarks.gpu",
                "--render",
                str(ROOT / "benchmarks/results/h200"),
                "--results",
                str(results),
            ]
        ]
    if words[0] == "pip" and "slurm" in command:  # installing needs the network; the launcher's config must compose
        train = command.split("&&", 1)[1].split()
        launcher = [w for w in train if w.startswith("hydra/launcher=") or w.startswith("hydra.launcher.")]
        return [["odeformer-train", *launcher, "--cfg", "hydra"]]
    if words[0] == "torchrun":
        return [
            [
                *words,
                "data=synthetic",
                "model.depth=1",
                "model.dim=16",
                "model.heads=2",
                *SMALL,
                f"train.out_dir={tmp / 'ddp'}",
            ]
        ]
    if words[0] == "odeformer-train":
        if "train.resume=true" in command:  # resume continues a run: start one there first
            start = [w for w in words if w != "train.resume=true"]
            out = [w for w in words if w.startswith("train.out_dir=")]
            return [
                [*start, *SMALL, "train.max_steps=1", "model.depth=2"],  # only max_steps may differ on resume
                [*words, *SMALL, "model.depth=2", *out],
            ]
        return [_train(command, tmp, index)]
    if words[0] == "odeformer-diagnose":
        if "--fresh" in words:
            return [[*words, "--batch", "4", "--depth", "2", "--out", str(tmp / "diag_fresh")]]
        runs = [w for w in words[1:] if not w.startswith("-")]
        made = [
            ["odeformer-train", "train=debug", "train.max_steps=2", "model.depth=2", f"train.out_dir={r}"] for r in runs
        ]
        return [*made, words]
    if words[0] == "odeformer-analyze":
        if "--json" in words:  # write where the test looks, not into the working directory
            at = words.index("--json")
            words = [*words[: at + 1], str(tmp / "numbers.json"), *words[at + 2 :]]
        runs = [w for w in words[1:2] if "/" in w]  # a trained run: make a tiny one there first
        made = [
            ["odeformer-train", "train=debug", "train.max_steps=2", "model.depth=2", f"train.out_dir={r}"] for r in runs
        ]
        return [*made, words]
    if words[0] == "odeformer-compare":  # one seed, two steps, small models; the comparison under tmp
        return [
            [
                *words,
                "--seeds",
                "1",
                "--workers",
                "1",
                "--rounds",
                "1",
                "--out",
                str(tmp / "cmp"),
                *SMALL,
                "train=debug",
                "model.depth=2",
            ]
        ]
    if words[0] == "odeformer-reproduce":
        return [[*words, "--smoke", "--out", str(tmp / "reproduce"), "--workers", "1"]]
    raise AssertionError(f"a command on the pages without a tiny form: {command!r}; add a rule to test_readme.py")


def _recipe(target: str) -> str:
    text = (ROOT / "Makefile").read_text()
    match = re.search(rf"^{target}:.*\n\t(.+)$", text, re.M)
    assert match, f"Makefile has no {target} target"
    return match.group(1).strip()


def test_every_readme_command_has_a_tiny_form(tmp_path):
    found = readme_commands()
    assert len(found) >= 15
    for i, command in enumerate(found):
        _tiny(command, tmp_path, i)
    assert _recipe("test").endswith("-m pytest -n $(JOBS) --dist worksteal")
    assert "benchmarks.run --results docs/RESULTS.md" in _recipe("bench")
    assert _recipe("train").endswith("odeformer-train experiment=digits_vit")


@pytest.mark.slow
@pytest.mark.parametrize("index, command", list(enumerate(readme_commands())))
def test_readme_command_runs(index, command, tmp_path):
    if DATA is None and any(name in command for name in NEEDS_DATA):
        pytest.skip(f"needs the datasets: set ODEFORMER_DATA ({command})")
    (tmp_path / "my_schemes.py").write_text(next(t for _, n, t in blocks("docs/extending.md") if n == "my_schemes.py"))
    tiny = _tiny(command, tmp_path, index)
    if isinstance(tiny, str):
        pytest.skip(tiny)
    cwd = ROOT if command.startswith("python -m benchmarks") else tmp_path  # the benchmarks live in the repository
    for words in tiny:
        done = shell(shlex.join(words), cwd)
        assert done.returncode == 0, f"{shlex.join(words)}\n{done.stderr[-3000:]}"


def test_the_training_page_lists_every_key_a_resume_may_change():
    """docs/training.md's sentence on what a resume may change names exactly ``RESUME_MAY_CHANGE``."""
    from odeformer.app.run.resume import RESUME_MAY_CHANGE

    text = " ".join((ROOT / "docs/training.md").read_text().split())
    sentence = re.search(r"a config that differs from the run's in anything but (.+?) is refused", text)
    assert sentence, "docs/training.md's sentence on what a resume may change is gone"
    assert sorted(re.findall(r"`([\w.]+)`", sentence.group(1))) == sorted(RESUME_MAY_CHANGE)
