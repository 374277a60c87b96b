"""What used to be accepted without a word is refused in one line: weights of another kind (int64, bool, complex,
non-finite) on a resume, a sample or an analysis; a resume after the scheme's class was edited; sizes a checkpoint
or a command line sets beyond the bounds, checked before anything is built; and a model whose states overflow."""

from __future__ import annotations

import shutil
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

import odeformer
from helpers import cli_in_process
from odeformer.app.commands import analyze, sample
from odeformer.app.run.bounds import MAX_DEPTH, MAX_LEN
from odeformer.app.run.checkpoints import FORMAT, load_checkpoint, save_checkpoint
from odeformer.app.run.config import DataConfig, SolverConfig, model_config, stepper_options
from odeformer.app.run.identity import RUN_RECORD
from odeformer.app.run.resume import hydra_quote

FIXTURES = Path(__file__).parents[1] / "fixtures" / "runs_v1"
TINY = ["train=debug", "train.max_steps=2", "model.depth=1", "data=synthetic", "model.dim=16", "model.heads=2"]
KINDS = {
    "int64": lambda t: t.long(),
    "bool": lambda t: t > 0,
    "complex": lambda t: t.to(torch.complex64),
    "nan": lambda t: torch.full_like(t, float("nan")),
}


def _one(capsys) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


def _forge(path: Path, kind: str, key: str = "model") -> str:
    payload = load_checkpoint(path)
    name = next(k for k, v in payload[key].items() if v.is_floating_point() and v.dim() == 2)
    payload[key][name] = KINDS[kind](payload[key][name])
    save_checkpoint(path, payload)
    return name


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_weights_of_another_kind_are_refused_by_a_resume(tmp_path, kind):
    out = tmp_path / "run"
    run = [*TINY, f"train.out_dir={hydra_quote(str(out))}"]
    assert cli_in_process(*run).returncode == 0
    (out / "summary.json").unlink()
    name = _forge(out / "last.pt", kind, "best_model" if kind == "nan" else "model")
    before = (out / "last.pt").read_bytes()
    done = cli_in_process(*run, "train.resume=true", "train.max_steps=3")
    assert done.returncode == 2 and f"the weight {name}" in done.stderr, done.stderr
    assert (out / "last.pt").read_bytes() == before


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_weights_of_another_kind_are_refused_by_analyze_and_sample(tmp_path, kind, capsys):
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "splitting", run)
    name = _forge(run / "best.pt", kind)
    assert analyze.main([str(run), "--batch", "2"]) == 2
    assert f"the weight {name}" in _one(capsys)
    text = tmp_path / "text"
    text.mkdir()
    _text_run(text)
    name = _forge(text / "best.pt", kind)
    assert sample.main([str(text), "--prompt", "a"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and f"the weight {name}" in captured.err


def test_a_model_whose_states_overflow_is_one_line_in_analyze(tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "splitting", run)
    payload = load_checkpoint(run / "best.pt")
    payload["model"] = {k: v.fill_(3e38) if v.is_floating_point() else v for k, v in payload["model"].items()}
    save_checkpoint(run / "best.pt", payload)
    assert analyze.main([str(run), "--batch", "2"]) == 2
    assert "states on its validation batch are not finite" in _one(capsys)


@pytest.mark.parametrize(
    "key, value, words",
    [
        ("depth", 10**8, f"model.depth=100000000 is more than the {MAX_DEPTH} allowed"),
        ("max_len", 10**8, f"model.max_len=100000000 is more than the {MAX_LEN} allowed"),
    ],
)
def test_sample_checks_the_sizes_a_checkpoint_sets_before_building(tmp_path, key, value, words, capsys, monkeypatch):
    config = {  # made before the model's constructor is replaced: its node is read from the constructor's signature
        "solver": asdict(SolverConfig(name="diffusion", options=stepper_options("diffusion"))),
        "model": asdict(model_config("causal_lm")(depth=1, dim=16, heads=2, max_len=16)) | {key: value},
        "data": asdict(DataConfig("shakespeare", batch_size=4)),
    }
    built = []
    monkeypatch.setattr(odeformer.CausalLM, "__init__", lambda *a, **k: built.append(a))
    save_checkpoint(
        tmp_path / "best.pt", {"format": FORMAT, "model": {}, RUN_RECORD: {"config": config, "vocabulary": "ab"}}
    )
    assert sample.main([str(tmp_path)]) == 2
    line = _one(capsys)
    assert str(tmp_path / "best.pt") in line and words in line and built == []


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--refine", "1000000000"], "whole numbers from 2 to 64 (finer), or 1/m such as 0.5 (coarser"),
        (["--refine", *map(str, range(2, 20))], "1 to 16 resolutions: whole numbers from 2 to 64"),
        (["--refine", "0"], "got 0."),
        (["--refine", "0.3"], "got 0.3."),
    ],
)
def test_analyze_bounds_a_refinement_before_the_run_is_loaded(tmp_path, argv, words, capsys):
    assert analyze.main([str(FIXTURES / "splitting"), *argv, "--out", str(tmp_path / "a")]) == 2
    assert words in _one(capsys)


def test_analyze_bounds_a_tableaus_stages_before_deriving_its_claims(tmp_path, capsys, monkeypatch):
    """A tableau of 400 stages typed out is refused on its text, before Hydra's parser reads its 320,000 characters
    (a minute) or its claims are derived; one of 65 stages in short fractions, whose text fits, by its stages."""
    import hydra

    rows = ",".join("[" + ",".join(["0.1"] * i) + "]" for i in range(400))
    argv = ["solver=tableau", f"solver.options.A=[{rows}]", f"solver.options.b=[{','.join(['0.0025'] * 400)}]"]
    parsed = []
    with monkeypatch.context() as patched:  # Hydra's compose is never reached
        patched.setattr(hydra, "compose", lambda **k: parsed.append(k))
        assert analyze.main([*argv, "--out", str(tmp_path / "a")]) == 2
    assert f"solver.options.A= has a value of {len(argv[1]) - len('solver.options.A=')} characters" in _one(capsys)
    assert not parsed
    drifts = ",".join(["0"] * 65)
    coefficients = [f"solver.options.drifts=[{drifts}]", f"solver.options.kicks=[{drifts}]"]
    assert analyze.main(["solver=tableau", *coefficients]) == 2
    assert "solver.options.drifts has 65 stages, more than the 64 allowed" in _one(capsys)


SCHEME = "import solvers\n\n\nclass Edited(solvers.{base}):\n    pass\n"


def test_a_resume_after_the_schemes_class_was_edited_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    (tmp_path / "edited_scheme.py").write_text(SCHEME.format(base="Euler"))
    out = tmp_path / "run"
    run = [*TINY, "solver=edited_scheme.Edited", f"train.out_dir={hydra_quote(str(out))}"]
    assert cli_in_process(*run).returncode == 0
    (out / "summary.json").unlink()
    before = (out / "last.pt").read_bytes()
    (tmp_path / "edited_scheme.py").write_text(SCHEME.format(base="Heun"))  # the class edited since
    sys.modules.pop("edited_scheme", None)
    done = cli_in_process(*run, "train.resume=true", "train.max_steps=3")
    assert done.returncode == 2 and "last.pt was trained with the scheme" in done.stderr, done.stderr
    assert "its class changed since" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert (out / "last.pt").read_bytes() == before
    (tmp_path / "edited_scheme.py").write_text(SCHEME.format(base="Euler"))  # as it was: the resume goes on
    sys.modules.pop("edited_scheme", None)
    assert cli_in_process(*run, "train.resume=true", "train.max_steps=3").returncode == 0
    sys.modules.pop("edited_scheme", None)


def _text_run(folder: Path) -> None:
    config = {
        "solver": asdict(SolverConfig(name="diffusion", options=stepper_options("diffusion"))),
        "model": asdict(model_config("causal_lm")(depth=1, dim=16, heads=2, max_len=16)),
        "data": asdict(DataConfig("shakespeare", batch_size=4)),
    }
    node = {k: v for k, v in config["model"].items() if not k.startswith("_")}
    model = odeformer.CausalLM(vocab_size=3, solver=odeformer.solver("diffusion"), **node)
    record = {"config": config, "vocabulary": "abc"}
    save_checkpoint(folder / "best.pt", {"format": FORMAT, "model": model.state_dict(), RUN_RECORD: record})


def test_ctrl_c_in_sample_keeps_what_was_generated(tmp_path, capsys, monkeypatch):
    """The text is printed as it is made: Ctrl-C during the second part leaves the first on the screen and says how
    much of it there is (exit 130)."""
    import odeformer.generate
    from odeformer.app.commands.sample import CHUNK

    _text_run(tmp_path)
    calls = []

    def generate(model, itos, prompt, count, *args):
        calls.append(count)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return prompt + "b" * count

    monkeypatch.setattr(odeformer.generate, "sample_text", generate)
    assert sample.main([str(tmp_path), "--prompt", "a", "--tokens", str(3 * CHUNK)]) == 130
    captured = capsys.readouterr()
    assert captured.out == "a" + "b" * CHUNK + "\n"
    assert f"interrupted (Ctrl-C) after {CHUNK} of {3 * CHUNK} characters" in captured.err
    assert len(captured.err.strip().splitlines()) == 1


def test_sample_prints_what_one_call_would(tmp_path, capsys):
    """Made part by part, greedy text is what one call of the whole length gives (each part continues the text so
    far, the context cut to max_len as one call cuts it)."""
    from odeformer.app.commands.sample import CHUNK
    from odeformer.app.run.sampling import load
    from odeformer.generate import sample_text

    _text_run(tmp_path)
    assert sample.main([str(tmp_path), "--prompt", "ab", "--tokens", str(2 * CHUNK + 5), "--temperature", "0"]) == 0
    model, itos = load(tmp_path)
    assert capsys.readouterr().out == sample_text(model, itos, "ab", 2 * CHUNK + 5, temperature=0) + "\n"
