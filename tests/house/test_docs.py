"""docs/extending.md runs as written, top to bottom, in a scratch directory: its files are written, its Python
blocks executed, its shell commands run. The README's examples and those of the pages it sends a reader to
(:data:`PAGES`) likewise, each block alone (tests/house/test_readme.py runs their commands)."""

import json
import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

import solvers
from helpers import HANG

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(sys.executable).parent
FENCE = re.compile(r"```(\w+)([^\n]*)\n(.*?)```", re.S)
PAGES = (
    "README.md",
    "docs/training.md",
    "docs/schemes.md",
    "docs/models.md",
    "docs/generation.md",
    "docs/comparing.md",
    "docs/reliability.md",
)
"""The README and the guide pages it sends a reader to: each Python block runs alone, each command in a tiny form."""
RUN_AS_A_WHOLE = ("docs/extending.md", "docs/depth_as_time.md")
"""Pages whose blocks run top to bottom in one test of their own, checking what they print and write."""
CHECKED_BY_THEIR_OWN_TEST = {
    "docs/comparing_schemes.md": "tests/app/test_compare_controls.py passes each command through the command's checks",
}
"""Pages whose blocks a test of their area checks, and how."""


def blocks(path):
    """``(language, file name or None, text)`` for every fenced block of the page, in order."""
    out = []
    for language, info, text in FENCE.findall((ROOT / path).read_text()):
        name = re.search(r"file=(\S+)", info)
        out.append((language, name.group(1) if name else None, text))
    return out


def commands(text):
    """The command lines of a shell block (comments and blank lines dropped; ``\\`` continuations joined)."""
    out = []
    for line in text.replace("\\\n", " ").splitlines():
        command = line.strip().split(" #")[0].strip()
        if command and not command.startswith("#"):
            out.append(command)
    return out


def shell(command, cwd, timeout=HANG):
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(shlex.split(command), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow  # the page trains and diagnoses a run (about 40 s); CI runs it with the slow checks
def test_extending_page_runs_as_written(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    ran = {"python": 0, "bash": 0, "file": 0}
    for language, name, text in blocks("docs/extending.md"):
        if name:
            target = tmp_path / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
            ran["file"] += 1
        elif language == "python":  # each block alone: a reader may copy any one of them
            exec(compile(text, "docs/extending.md", "exec"), {})
            ran["python"] += 1
        elif language == "bash":
            for command in commands(text):
                done = shell(command, tmp_path)
                assert done.returncode == 0, f"{command}\n{done.stderr[-2000:]}"
                ran["bash"] += 1
    assert ran == {"python": 8, "bash": 11, "file": 3}
    compared = json.loads((tmp_path / "outputs" / "damped_vs" / "comparison.json").read_text())
    assert [row["solver"] for row in compared["rows"]] == [
        "diffusion",
        "my_damped.DampedVerlet gamma=0.25",
        "full_wave",
    ]
    assert (tmp_path / "outputs" / "damped_vs" / "figures" / "cosine.png").exists()
    printed = capsys.readouterr().out
    # the layer orders the page states: Lie 1, Strang 2, Whole 4, each measured
    assert re.search(r"Split\(Yoshida4, ffn=Euler, lie\): declared 1, measured 1\.\d\d", printed)
    assert re.search(r"Split\(Yoshida4, ffn=Heun, strang\): declared 2, measured 2\.\d\d", printed)
    assert re.search(r"Whole\(Yoshida4\): declared 4, measured (3\.[7-9]|4\.[0-2])\d", printed)
    assert (tmp_path / "outputs/yoshida/summary.json").exists()
    assert (tmp_path / "outputs/yoshida/diagnostics/cosine.png").exists()
    assert (tmp_path / "outputs/yoshida_strang/summary.json").exists()
    assert (tmp_path / "outputs/checked/summary.json").exists()  # train.check_scheme: Yoshida4 holds its claims
    assert '"solver": "Yoshida4"' in (tmp_path / "outputs/yoshida/summary.json").read_text()
    simpson = json.loads((tmp_path / "outputs/simpson/summary.json").read_text())["scheme"]
    assert simpson["kicks"] == [1 / 6, 2 / 3, 1 / 6] and simpson["order"] == 2


def python_examples(path):
    return [text for language, name, text in blocks(path) if language == "python" and not name]


@pytest.mark.slow  # builds and runs every example of the pages, the Hugging Face one included (about 50 s in all)
@pytest.mark.parametrize("path", [path for path in PAGES if python_examples(path)])
def test_page_python_examples_run(path):
    rows = dict(solvers.STEPPERS)
    for text in python_examples(path):  # each block alone, in a namespace of its own: a reader may copy any one
        exec(compile(text, path, "exec"), {})
    assert dict(solvers.STEPPERS) == rows, f"an example of {path} registered a scheme for the rest of the process"


def test_the_pages_hold_the_python_examples():
    """The README and its pages keep their examples (a block whose fence is mistyped is no longer run)."""
    assert python_examples("README.md"), "README.md has no python examples"
    assert sum(len(python_examples(path)) for path in PAGES) >= 8


def test_readme_names_the_two_commands():
    text = (ROOT / "README.md").read_text()
    assert "make train" in text and "make test" in text


def test_the_schemes_page_names_every_solver():
    text = (ROOT / "docs/schemes.md").read_text()
    for name in solvers.STEPPERS:
        assert f"`{name}`" in text, f"docs/schemes.md's solver tables are missing {name}"


def test_the_depth_as_time_page_runs_as_written(capsys):
    """docs/depth_as_time.md: its Python runs and prints what its comments say."""
    python = [text for language, name, text in blocks("docs/depth_as_time.md") if language == "python"]
    assert len(python) == 1
    exec(compile(python[0], "docs/depth_as_time.md", "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "0.5 0.5"
    assert printed[1] == "Scale(init_std=1.0, lr=1.0, weight_decay=1.0, eps=0.5)"
    assert printed[2].startswith("{'lr': 0.0, ")


@pytest.mark.parametrize("path", [*PAGES, *RUN_AS_A_WHOLE])
def test_every_fenced_block_is_a_known_kind(path):
    for language, name, _ in blocks(path):
        assert language in ("python", "bash", "yaml"), f"{path}: a {language} block the tests do not run"
        assert language != "yaml" or name, f"{path}: a yaml block without a file= name"


PROSE_KEY = re.compile(r"`((?:model|train|data|solver)\.[a-z_]+(?:\.[a-z_]+)*)(?:=([^`\s]+))?`(?!\()")


def _names_keys(path):
    return bool(PROSE_KEY.search((ROOT / path).read_text()))


def test_the_pages_that_teach_the_config_name_its_keys():
    """The key check below reads every page that names keys; these must (else the pattern is stale)."""
    assert [path for path in ("README.md", "docs/training.md", "docs/extending.md") if not _names_keys(path)] == []


@pytest.mark.parametrize("path", [path for path in (*PAGES, "docs/extending.md") if _names_keys(path)])
def test_every_config_key_the_prose_names_exists(path):
    """A key written in the prose (``model.norm=post``, ``train.decay``) composes on the main job's config: the
    schema once refused a key the README offered. Free-form maps (``solver.options``, ``data.options``) are not
    keys of their own."""
    from omegaconf import OmegaConf

    import odeformer.app.commands.train as entry

    named = set(PROSE_KEY.findall((ROOT / path).read_text()))
    assert named, f"{path} names no config keys: the pattern is stale"
    named = {(key, value) for key, value in named if key not in ("solver.options", "data.options")}
    cfg = entry.compose(["experiment=digits_vit", *(f"{key}={value}" for key, value in sorted(named) if value)])
    for key, _ in sorted(named):  # an unknown key given a value fails in compose, naming it; the others fail here
        assert OmegaConf.select(cfg, key, default="<missing>") != "<missing>", key


# -- the README is a front page; the pages are found from it and their links hold --------------------------------------

README_LIMIT = 20_000
"""Characters the README may hold: what it is, the two commands, a tour; the rest lives on the docs/ pages."""
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _prose(path):
    """A page without its fenced blocks, each inline code span replaced by a placeholder (code is not a link)."""
    text = re.sub(r"```.*?```", "", (ROOT / path).read_text(), flags=re.S)
    return re.sub(r"`[^`]*`", "code", text)


def _anchors(path):
    """The anchors a page's headings make, as GitHub spells them (lower case, punctuation dropped, spaces as ``-``,
    ``-1``, ``-2``, ... after repeats)."""
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6} (.+)$", re.sub(r"```.*?```", "", (ROOT / path).read_text(), flags=re.S), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        seen[slug] = seen.get(slug, -1) + 1
        yield slug if seen[slug] == 0 else f"{slug}-{seen[slug]}"


def _broken_links(path):
    """The links of a page whose file or heading does not exist (web addresses aside)."""
    broken = []
    for target in LINK.findall(_prose(path)):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        linked = (ROOT / path).parent / file if file else ROOT / path
        if not linked.exists():
            broken.append(target)
        elif anchor and linked.suffix == ".md" and anchor not in set(_anchors(linked.relative_to(ROOT))):
            broken.append(target)
    return broken


def _docs_pages():
    return sorted(f"docs/{page.name}" for page in (ROOT / "docs").glob("*.md"))


def test_the_readme_is_a_front_page():
    size = len((ROOT / "README.md").read_text())
    assert size < README_LIMIT, f"README.md has {size} characters, over {README_LIMIT}: move detail to a docs/ page"


def test_every_docs_page_is_linked_from_the_readme():
    linked = {target.partition("#")[0] for target in LINK.findall(_prose("README.md"))}
    assert [page for page in _docs_pages() if page not in linked] == []


def test_every_docs_page_with_code_has_its_blocks_run():
    """A page's blocks are run by the tests above, as one of :data:`PAGES` or as a page of its own, or checked by a
    test of their own (:data:`CHECKED_BY_THEIR_OWN_TEST`)."""
    known = (*PAGES, *RUN_AS_A_WHOLE, *CHECKED_BY_THEIR_OWN_TEST)
    unrun = [page for page in _docs_pages() if blocks(page) and page not in known]
    assert unrun == [], f"add them to PAGES (each block alone, each command in a tiny form): {unrun}"


@pytest.mark.parametrize("path", ["README.md", *_docs_pages()])
def test_every_link_of_a_page_resolves(path):
    assert _broken_links(path) == []


def test_the_link_check_finds_a_missing_page_and_heading(tmp_path, monkeypatch):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\n## Two words\n\n[x](b.md) [y](#two-words) [z](#none) `[c](d.md)`\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert _broken_links("docs/a.md") == ["b.md", "#none"]
