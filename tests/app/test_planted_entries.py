"""Run folders, reports and comparisons received from someone else: every command writes through
``odeformer.app.files`` (a link planted at a file or at any folder level it makes or enters is refused, its target
untouched), and reads a checkpoint or a run file only when it is a regular file (a FIFO, a device node or a link to
``/dev/zero`` is refused at once instead of hanging or growing without end)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from helpers import cli_in_process
from odeformer.app.commands import analyze, compare, diagnose, reproduce, sample
from odeformer.app.run.resume import hydra_quote

FIXTURES = Path(__file__).parents[1] / "fixtures" / "runs_v1"
TINY = ["train=debug", "train.max_steps=2", "model.depth=1", "data=synthetic", "model.dim=16", "model.heads=2"]


def _one(capsys) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.fixture
def outside(tmp_path) -> Path:
    """A folder outside the command's, with a file in it that must stay as it is."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "kept.txt").write_text("someone else's")
    return folder


def _untouched(outside: Path) -> None:
    assert sorted(p.name for p in outside.iterdir()) == ["kept.txt"]
    assert (outside / "kept.txt").read_text() == "someone else's"


# -- writers ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("entry", ["runs", "figures", "comparison.md", "comparison.json"])
def test_compare_refuses_a_link_where_it_writes_before_any_run(tmp_path, outside, entry, capsys):
    out = tmp_path / "cmp"
    out.mkdir()
    target = outside / "kept.txt" if entry.endswith((".md", ".json")) else outside
    (out / entry).symlink_to(target)
    assert compare.main(["rk4", "--against", "diffusion", "--out", str(out), "--seeds", "1", *TINY]) == 2
    assert f"{out / entry} is a link" in _one(capsys)
    _untouched(outside)
    assert not list(out.glob("runs/*seed=*"))  # no run was trained


def test_the_sweep_engine_trains_no_run_into_a_linked_run_folder(tmp_path, outside, capsys):
    """A run folder planted as a link under ``runs/`` (to a folder outside ``--out``) is refused: no run is trained
    there; the engine's own links (to a finished run of another table) are the only ones it follows."""
    from odeformer.app.files import UnsafeFile
    from odeformer.app.run.sweep import Job, Sweep

    runs = tmp_path / "cmp" / "runs"
    runs.mkdir(parents=True)
    (runs / "diffusion__seed=0").symlink_to(outside, target_is_directory=True)
    job = Job("diffusion__seed=0", "diffusion", "", 0, TINY)
    with pytest.raises(UnsafeFile, match="is a link out of the sweep's runs"):
        Sweep(lambda overrides: {}, workers=1).run([job], runs)
    _untouched(outside)
    (runs / "diffusion__seed=0").unlink()
    (runs / "diffusion__seed=0").symlink_to(os.path.relpath(outside, runs), target_is_directory=True)
    with pytest.raises(UnsafeFile, match="is a link out of the sweep's runs"):  # relative, still outside
        Sweep(lambda overrides: {}, workers=1).run([job], runs)
    _untouched(outside)


@pytest.mark.parametrize("entry", ["RESULTS.md", "results", "runs"])
def test_reproduce_refuses_a_link_where_it_writes_before_any_run(tmp_path, outside, entry, capsys):
    out = tmp_path / "docs"
    out.mkdir()
    (out / entry).symlink_to(outside / "kept.txt" if entry == "RESULTS.md" else outside)
    assert reproduce.main(["--smoke", "--out", str(out), "--workers", "1"]) == 2
    assert f"{out / entry} is a link" in _one(capsys)
    _untouched(outside)


def test_analyze_writes_no_report_into_a_linked_analysis_folder(tmp_path, outside, capsys):
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "splitting", run)
    (run / "analysis").symlink_to(outside, target_is_directory=True)
    assert analyze.main([str(run), "--batch", "2"]) == 2
    assert f"{run / 'analysis'} is a link" in _one(capsys)
    _untouched(outside)
    report = tmp_path / "report"
    report.mkdir()
    (report / "report.md").symlink_to(outside / "kept.txt")
    assert analyze.main(["rk4", "--out", str(report)]) == 2
    assert f"{report / 'report.md'} is a link" in _one(capsys)
    _untouched(outside)
    json_link = tmp_path / "numbers.json"
    json_link.symlink_to(outside / "kept.txt")
    assert analyze.main(["rk4", "--out", str(tmp_path / "fine"), "--json", str(json_link)]) == 2
    assert f"{json_link} is a link" in _one(capsys)
    _untouched(outside)


@pytest.mark.parametrize(
    "argv, words",
    [
        (["rk4", "--out", "{file}"], "is a file, not a folder"),
        (["rk4", "--out", "{tmp}", "--json", "{tmp}"], "is not a file's path"),
        (["rk4", "--out", "/proc/self/x"], "/proc/self/x cannot be"),
        (["rk4", "--out", "{file}/under"], "is a file, not a folder"),
    ],
)
def test_analyze_refuses_an_out_it_cannot_write_in_one_line(tmp_path, argv, words, capsys):
    (tmp_path / "file").write_text("x")
    filled = [a.format(file=tmp_path / "file", tmp=tmp_path) for a in argv]
    assert analyze.main(filled) == 2
    assert words in _one(capsys)
    assert (tmp_path / "file").read_text() == "x"


@pytest.mark.parametrize("command", ["compare", "reproduce"])
@pytest.mark.parametrize("where", ["file", "under-file", "proc", "empty"])
def test_compare_and_reproduce_refuse_an_out_they_cannot_write(tmp_path, command, where, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "file").write_text("x")
    out = {"file": "file", "under-file": "file/out", "proc": "/proc/self/out", "empty": ""}[where]
    if command == "compare":
        code = compare.main(["rk4", "--out", out, *TINY])
    else:
        code = reproduce.main(["--smoke", "--out", out])
    line = _one(capsys)
    assert code == 2 and "--out" in line and ("cannot be" in line or "names no folder" in line), line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


# -- readers ----------------------------------------------------------------------------------------------------------


def _plant(path: Path, kind: str) -> None:
    path.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_checkpoint_that_is_not_a_regular_file_is_refused_by_every_reader(tmp_path, kind, capsys):
    """A FIFO (which would block the read for ever) or a link to ``/dev/zero`` (which never ends) as ``best.pt``:
    analyze, diagnose and sample answer in one line, and so does a resume with it as ``last.pt``."""
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "splitting", run)
    _plant(run / "best.pt", kind)
    for main, argv in (
        (analyze.main, [str(run), "--batch", "2"]),
        (diagnose.main, [str(run), "--out", str(tmp_path / "d"), "--batch", "2"]),
        (sample.main, [str(run)]),
    ):
        assert main(argv) == 2
        assert f"{run / 'best.pt'} is not a regular file" in _one(capsys)
    out = tmp_path / "resumed"
    assert cli_in_process(*TINY, f"train.out_dir={hydra_quote(str(out))}").returncode == 0
    (out / "summary.json").unlink()
    _plant(out / "last.pt", kind)
    done = cli_in_process(*TINY, f"train.out_dir={hydra_quote(str(out))}", "train.resume=true", "train.max_steps=3")
    refused = "last.pt is a link" if kind == "dev-zero" else "last.pt is not a regular file"  # a run's entries: no link
    assert done.returncode == 2 and refused in done.stderr, done.stderr


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
@pytest.mark.parametrize("name", ["metrics.jsonl", "summary.json", "history.jsonl"])
def test_a_run_file_that_is_not_a_regular_file_is_refused(tmp_path, kind, name):
    from odeformer.app.files import UnsafeFile, read_text
    from odeformer.app.run.history import history
    from odeformer.app.run.trainer import read_metrics

    _plant(tmp_path / name, kind)
    read = {
        "metrics.jsonl": lambda: list(read_metrics(tmp_path)),
        "summary.json": lambda: read_text(tmp_path / name),
        "history.jsonl": lambda: history(tmp_path),
    }[name]
    with pytest.raises(UnsafeFile, match="is (a link|not a regular file)"):
        read()


def test_a_resume_beside_a_huge_metrics_file_reads_its_tail_only(tmp_path, monkeypatch):
    """A ``metrics.jsonl`` of rows from before the checkpoint, far larger than what a resume reads: the resume cuts
    the rows after the checkpoint from its end without reading the rest (the read is counted, not timed)."""
    from odeformer.app.run import trainer

    out = tmp_path / "run"
    run = [*TINY, "train.log_every=1", f"train.out_dir={hydra_quote(str(out))}"]
    assert cli_in_process(*run).returncode == 0
    (out / "summary.json").unlink()
    metrics = out / "metrics.jsonl"
    rows = metrics.read_bytes()
    head = b'{"step": 0, "loss": 1.0}\n' * 200_000  # 5 MB of early rows, before the checkpoint's step
    metrics.write_bytes(head + rows + b'{"step": 99, "loss": 1.0}\n{"step": 100, "lo')
    monkeypatch.setattr(trainer, "METRICS_TAIL", 4096)
    read, real = [], os.pread
    monkeypatch.setattr(trainer.os, "pread", lambda fd, n, at: read.append(n) or real(fd, n, at))
    done = cli_in_process(*run, "train.resume=true", "train.max_steps=3")
    assert done.returncode == 0, done.stderr
    assert max(read) <= 4096  # never the whole file
    text = metrics.read_bytes()
    assert text.startswith(head + rows) and b'"step": 99' not in text and b'"step": 100' not in text
    assert [json.loads(line)["step"] for line in text[len(head) :].splitlines()][-1] == 3


def test_a_resume_refuses_a_metrics_file_that_is_a_fifo(tmp_path):
    out = tmp_path / "run"
    run = [*TINY, f"train.out_dir={hydra_quote(str(out))}"]
    assert cli_in_process(*run).returncode == 0
    (out / "summary.json").unlink()
    _plant(out / "metrics.jsonl", "fifo")
    done = cli_in_process(*run, "train.resume=true", "train.max_steps=3")
    assert done.returncode == 2 and "metrics.jsonl is not a regular file" in done.stderr, done.stderr


@pytest.mark.parametrize("command", ["analyze", "compare", "reproduce"])
def test_a_read_only_folder_is_one_line_before_any_work(tmp_path, command, capsys, monkeypatch):
    """The refusal itself, whoever runs it (root included): the writability probe answers no for one folder, as a
    read-only folder or file system does."""
    from odeformer.app import files

    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "splitting", run)
    probe = files.writable
    monkeypatch.setattr(files, "writable", lambda path: Path(path).resolve() != run.resolve() and probe(path))
    argv = {
        "analyze": (analyze.main, [str(run), "--batch", "2"]),
        "compare": (compare.main, ["rk4", "--out", str(run / "cmp"), *TINY]),
        "reproduce": (reproduce.main, ["--smoke", "--out", str(run / "docs")]),
    }[command]
    before = sorted(p.name for p in run.iterdir())
    assert argv[0](argv[1]) == 2
    assert f"{run} is read-only for this user" in _one(capsys)
    assert sorted(p.name for p in run.iterdir()) == before


def test_a_folder_the_user_linked_above_the_output_is_followed(tmp_path, capsys, monkeypatch):
    """``outputs`` linked to a larger disk is the user's own choice: a default output folder below it is written
    there (only the entries below the folder a command writes are never links)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    (tmp_path / "outputs").symlink_to(disk, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    assert analyze.main(["rk4"]) == 0, capsys.readouterr().err
    assert (disk / "analysis" / "rk4" / "report.md").exists()
