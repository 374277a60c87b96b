"""``odeformer-sample``: text from a run's best weights, its model rebuilt only through registered builders; and the
short sample a character-level run logs at each evaluation."""

import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
import tomllib
import torch

import odeformer
from helpers import HANG
from odeformer.app.commands.sample import main
from odeformer.app.run.checkpoints import FORMAT, save_checkpoint
from odeformer.app.run.config import DataConfig, SolverConfig, model_config, stepper_options
from odeformer.app.run.identity import RUN_RECORD
from odeformer.app.run.sampling import EvalSample

ROOT = Path(__file__).resolve().parents[2]
ITOS = list("\n !',.:;?ABCDEHILMNORTUaehilmnorstuw")


def _config(solver="full_wave", **model):
    return {
        "solver": asdict(SolverConfig(name=solver, options=stepper_options(solver))),
        "model": asdict(model_config("causal_lm")(depth=2, dim=16, heads=2, max_len=32, **model)),
        "data": asdict(DataConfig("shakespeare", batch_size=4)),
    }


VOCABULARY = "".join(ITOS)


def _run(tmp_path, config=None, vocabulary=VOCABULARY, name="best.pt", seed=0):
    """A run directory as the trainer leaves it: best.pt with the weights, the config and the vocabulary."""
    config = config or _config()
    torch.manual_seed(seed)
    node = {k: v for k, v in config["model"].items() if not k.startswith("_")}
    model = odeformer.CausalLM(vocab_size=len(ITOS), solver=odeformer.solver(config["solver"]["name"]), **node)
    record = {"config": config} | ({"vocabulary": vocabulary} if vocabulary else {})
    save_checkpoint(tmp_path / name, {"format": FORMAT, "model": model.state_dict(), RUN_RECORD: record})
    return model.eval()


def _sample(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_prints_the_prompt_and_its_continuation(tmp_path, capsys):
    model = _run(tmp_path)
    code, out, err = _sample(capsys, tmp_path, "--prompt", "ROMEO:", "--tokens", 20, "--temperature", 0)
    assert code == 0 and err == ""
    expected = model.generate(torch.tensor([ITOS.index(c) for c in "ROMEO:"]), 20, temperature=0.0)
    assert out == "".join(ITOS[i] for i in expected.tolist()) + "\n"
    again = [_sample(capsys, tmp_path, "--prompt", "A", "--tokens", 30, "--top-k", 5, "--seed", 3)[1] for _ in range(2)]
    assert again[0] == again[1] and len(again[0]) == 32


def test_a_checkpoint_of_the_earlier_layout_samples_the_same(tmp_path, capsys):
    """A ``best.pt`` of the earlier layout (format ``odeformer-checkpoint-1``, the run record under ``info``) is
    read as it is."""
    _run(tmp_path)
    argv = (tmp_path, "--prompt", "ROMEO:", "--tokens", 20, "--temperature", 0)
    now = _sample(capsys, *argv)
    payload = torch.load(tmp_path / "best.pt", weights_only=True)
    payload["format"], payload["info"] = "odeformer-checkpoint-1", payload.pop(RUN_RECORD)
    save_checkpoint(tmp_path / "best.pt", payload)
    assert _sample(capsys, *argv) == now and now[0] == 0


def test_an_unknown_prompt_character_is_one_line_and_exit_2(tmp_path, capsys):
    _run(tmp_path)
    code, out, err = _sample(capsys, tmp_path, "--prompt", "ROMEO: Zounds!")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "'Z'" in err and "vocabulary lacks" in err


def test_the_run_s_model_is_looked_up_in_the_task_registry(monkeypatch):
    """The models odeformer-sample rebuilds are the registry's text models: one registered beside CausalLM is built
    from its ``_target_`` (never imported), and a CausalLM run is refused once its record is gone."""
    import dataclasses

    from odeformer.app.run.sampling import SampleError, build_model, text_models
    from odeformer.tasks import TASK_MODELS, task_of

    class ShortLM(odeformer.CausalLM):
        pass

    spec = dataclasses.replace(task_of(odeformer.CausalLM), name="short_lm", model=ShortLM, default=False)
    monkeypatch.setitem(TASK_MODELS, "short_lm", spec)
    assert {s.model for s in text_models().values()} == {odeformer.CausalLM, ShortLM}
    config = _config()
    config["model"]["_target_"] = spec.target
    assert type(build_model(config, len(ITOS))) is ShortLM
    monkeypatch.delitem(TASK_MODELS, "causal_lm")
    with pytest.raises(SampleError, match="continues text with a ShortLM run; this run's model is 'odeformer.Causal"):
        build_model(_config(), len(ITOS))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda c: c["model"].update(_target_="odeformer.ViT"), "CausalLM run"),
        (lambda c: c["model"].update(_target_="os.system"), "CausalLM run"),
        (lambda c: c["solver"].update(_target_="os.system"), "refused"),
        (lambda c: c["solver"].update(name="os_path_join"), "not registered"),
        (lambda c: c["solver"].update(name="os.path.join"), "a path stored in a file is not imported"),
        (lambda c: c["solver"].update(ffn="os.path.join"), "not registered"),
        (lambda c: c["solver"].update(stepper="evil_module_that_must_not_load.Scheme"), "--stepper evil"),
    ],
)
def test_the_stored_config_reaches_only_registered_builders(tmp_path, capsys, change, message):
    """A config in a file names what is built: anything but the package's models and solvers is refused in one line,
    and nothing it names is imported."""
    _run(tmp_path)
    path = tmp_path / "best.pt"
    payload = torch.load(path, weights_only=True)
    change(payload[RUN_RECORD]["config"])
    save_checkpoint(path, payload)
    code, _, err = _sample(capsys, tmp_path)
    assert code == 2 and message in err and err.count("\n") == 1
    assert "evil_module_that_must_not_load" not in sys.modules


def test_a_checkpoint_that_is_not_weights_is_refused(tmp_path, capsys):
    class Payload:
        def __reduce__(self):
            return (print, ("unpickled code ran",))

    torch.save({"format": FORMAT, "model": Payload()}, tmp_path / "best.pt")
    code, out, err = _sample(capsys, tmp_path)
    assert code == 2 and "unpickled code ran" not in out and err.count("\n") == 1


def test_missing_run_or_best_weights_is_one_line(tmp_path, capsys):
    code, _, err = _sample(capsys, tmp_path / "nowhere")
    assert code == 2 and "does not exist" in err
    code, _, err = _sample(capsys, tmp_path)
    assert code == 2 and "--checkpoint last.pt" in err


def test_a_run_without_a_stored_vocabulary_reads_its_dataset(tmp_path, capsys):
    config = _config()
    config["data"] = asdict(DataConfig("synthetic", options={"task": "text", "vocab_size": len(ITOS)}))
    _run(tmp_path, config, vocabulary=None)
    code, out, _ = _sample(capsys, tmp_path, "--prompt", "01", "--tokens", 5)
    assert code == 0 and out.startswith("01") and len(out) == 8


def test_the_console_script_is_declared():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["odeformer-sample"] == "odeformer.app.commands.sample:main"


def test_the_evaluation_sample_leaves_the_training_rng_alone():
    model = _lm = odeformer.CausalLM(len(ITOS), 32, depth=1, dim=8, heads=2)
    sampler = EvalSample(ITOS, seed=0, tokens=12)
    state = torch.get_rng_state()
    texts = [sampler(model), sampler(model)]
    assert texts[0] == texts[1] and texts[0].startswith("\n") and len(texts[0]) == 13
    assert torch.equal(torch.get_rng_state(), state) and _lm.training


@pytest.mark.slow
def test_a_character_level_run_logs_samples_and_odeformer_sample_reads_it(tmp_path):
    """End to end: a debug run on the synthetic text task logs a sample at each evaluation, shows the last in its
    summary, stores its vocabulary, and the console script prints from it."""
    run = tmp_path / "run"
    command = [
        sys.executable, "-m", "odeformer.app.train", "model=causal_lm", "data=synthetic", "data.options.task=text",
        "train=debug", "model.depth=1", "model.dim=16", "model.max_len=16", f"train.out_dir={run}",
    ]  # fmt: skip
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=HANG)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    samples = [row["sample"] for row in rows if "sample" in row]
    assert len(samples) == 2 and all(s.startswith("0") or s.startswith("\n") for s in samples)
    assert json.loads((run / "summary.json").read_text())["sample"] == samples[-1]
    done = subprocess.run(
        [sys.executable, "-m", "odeformer.app.commands.sample", str(run), "--prompt", "012", "--tokens", "10"],
        capture_output=True, text=True, timeout=HANG,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout.startswith("012") and len(done.stdout) == 14, done.stderr


def _example():
    import importlib.util

    spec = importlib.util.spec_from_file_location("shakespeare_sample", ROOT / "examples" / "shakespeare_sample.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.data("shakespeare")
def test_the_shakespeare_example_samples_both_models_side_by_side(capsys):
    small = ["--steps", "2", "--tokens", "30", "--depth", "1", "--dim", "16", "--context", "16", "--batch", "4"]
    results = _example().main(small)
    assert set(results) == {"diffusion", "full_wave"}
    assert all(r["sample"].startswith("ROMEO:") and len(r["sample"]) == 36 for r in results.values())
    printed = capsys.readouterr().out
    assert "diffusion: val loss" in printed and "full_wave: val loss" in printed and "  |  " in printed


def test_the_shakespeare_example_skips_cleanly_without_the_data(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ODEFORMER_DATA", str(tmp_path))
    assert _example().main(["--steps", "1"]) is None
    err = capsys.readouterr().err
    assert err.startswith("skipped:") and err.count("\n") == 1 and "odeformer-data shakespeare" in err


def test_a_character_level_run_logs_a_sample_at_each_evaluation(tmp_path):
    """The trainer's hook, without the command line: a sample in each evaluation's metrics row, the last in the
    summary, the vocabulary in best.pt; a run on other data logs none."""
    from odeformer.app.run.trainer import LoopConfig, Trainer
    from odeformer.data import load

    data = load("synthetic", task="text", n=64)
    torch.manual_seed(0)
    model = odeformer.CausalLM(data.meta["vocab_size"], 8, depth=1, dim=8, heads=2)
    loop = LoopConfig(max_steps=2, eval_every=1, eval_batches=1, warmup_steps=0, progress=False, batch_size=4)
    summary = Trainer(model, data, loop, tmp_path, {"solver": "diffusion"}).fit()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    samples = [row["sample"] for row in rows if "val_loss" in row]
    assert len(samples) == 2 and all(len(s) == 101 and s[0] == data.meta["itos"][0] for s in samples)
    assert summary["sample"] == samples[-1]
    assert torch.load(tmp_path / "best.pt", weights_only=True)[RUN_RECORD]["vocabulary"] == "".join(data.meta["itos"])
    images = load("synthetic", task="image", n=32)
    vit = odeformer.ViT(image_size=images.meta["image_size"], in_chans=images.meta["in_chans"], num_classes=2, depth=1,
                        dim=8, heads=2)  # fmt: skip
    assert EvalSample.of(images, vit) is None
