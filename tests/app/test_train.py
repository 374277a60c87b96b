"""The training application end to end: configs, runs, checkpoints, resume, signals, bad input, sweeps, torchrun."""

import copy
import functools
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

import odeformer
import odeformer.app.commands.train as entry
import odeformer.app.run.builder as builder
from helpers import HANG, cli, cli_in_process
from odeformer.app.run.batches import EpochSampler, WindowSampler
from odeformer.app.run.checkpoints import CheckpointError, load_checkpoint, save_checkpoint
from odeformer.continuous import ContinuousBackbone
from odeformer.data import load
from odeformer.joint import JointLayerNorm
from odeformer.tasks import TASK_MODELS, task_of

ROOT = Path(__file__).resolve().parents[2]
DEBUG = ["train=debug", "data=synthetic", "model.depth=2", "model.dim=16", "model.heads=2"]
FASHION = Path("/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz").exists()
needs_fashion = pytest.mark.skipif(not FASHION, reason="apt-get install dataset-fashion-mnist (CI installs it)")


def _fashion_marked(names):
    return [pytest.param(n, marks=needs_fashion) if "fashion" in n or "fmnist" in n else n for n in names]


def _error_line(process):
    lines = [line for line in process.stderr.splitlines() if line.strip()]
    assert lines, process.stdout
    return lines[-1]


# -- configs ---------------------------------------------------------------------------------------------------------


def _compose(overrides):
    return entry.compose(overrides)


DATA_FOR_MODEL = {name: spec.data for name, spec in TASK_MODELS.items()}


@functools.cache
def _composed(group, choice):
    """``(resolved config, unresolved YAML)`` of ``group=choice`` at the small sizes below; its model's data task."""
    model = choice if group == "model" else "vit"
    cfg = _compose(
        [
            f"{group}={choice}",
            "data=synthetic",
            f"data.options.task={DATA_FOR_MODEL[model]}",
            "data.options.n=64",
            "model.depth=2",
            "model.dim=16",
            "model.heads=2",
        ]
    )
    return OmegaConf.to_container(cfg, resolve=True), OmegaConf.to_container(cfg, resolve=False)


def test_a_solver_and_a_model_compose_independently():
    """What lets the test below pair each solver's composed node with each model's config (45 compositions, not 200):
    a solver option sets its node alone, a model option leaves the solver node as it was, and no interpolation in
    either names the other group."""
    base = _composed("model", "vit")[1]
    for solver in entry.choices("solver"):
        node = _composed("solver", solver)[1]
        assert {k: v for k, v in node.items() if k != "solver"} == {k: v for k, v in base.items() if k != "solver"}
        assert not re.search(r"\$\{[^}]*\bmodel\b", repr(node["solver"])), solver
    for model in entry.choices("model"):
        node = _composed("model", model)[1]
        assert node["solver"] == base["solver"], model
        assert not re.search(r"\$\{[^}]*\bsolver\b", repr(node)), model


@pytest.mark.parametrize("solver", entry.choices("solver"))
@pytest.mark.parametrize("model", entry.choices("model"))
def test_every_solver_and_model_composes_and_instantiates(solver, model):
    cfg = {**_composed("model", model)[0], "solver": _composed("solver", solver)[0]["solver"]}
    discrete = isinstance(odeformer.as_solver(solver), odeformer.Solver)
    if model == "difformer" and not discrete:
        with pytest.raises(ValueError, match=f"continuous solver '{solver}' has no layers"):
            builder.build(copy.deepcopy(cfg))
        return
    if model == "difformer" and solver == "reversible":  # a norm after every layer cannot be inverted
        with pytest.raises(ValueError, match="cannot be inverted"):
            builder.build(copy.deepcopy(cfg))
        return
    data, net, info = builder.build(copy.deepcopy(cfg))
    if discrete:
        assert len(net.backbone.layers) == 2 and info["solver"] == solver
        assert type(net.backbone.layers[0].stepper) is odeformer.as_solver(solver).stepper  # as constructed
    else:  # a continuous solver: one weight-tied block, recorded at depth + 1 times
        assert isinstance(net.backbone, ContinuousBackbone) and net.backbone.solver.name == solver
        assert len(net.trajectory(*_inputs(data))) == 3 and net.solver_stats()["nfe"] > 0


def _inputs(data):
    if data.kind == "graph":
        return data.graph[:2]
    if data.kind == "text":
        return (data.splits["train"][0][:10].view(2, 5),)
    return (data.splits["train"][0][:2],)


@pytest.mark.parametrize("model", ["vit", "causal_lm", "masked_lm"])  # the transformer models (FFN inside)
def test_model_mlp_hidden_sets_the_ffn_width(model):
    overrides = [f"model={model}", "data=synthetic", f"data.options.task={DATA_FOR_MODEL[model]}", "data.options.n=64"]
    cfg = _compose([*overrides, "model.dim=16", "model.heads=2", "model.depth=1", "model.mlp_hidden=24"])
    _, net, _ = builder.build(OmegaConf.to_container(cfg, resolve=True))
    widths = {m.out_features for m in net.backbone.modules() if isinstance(m, torch.nn.Linear) and m.in_features == 16}
    assert 24 in widths and 64 not in widths  # 64 would be the default int(4.0 * 16)


@pytest.mark.parametrize("model", ["vit", "causal_lm", "masked_lm"])
def test_model_norm_post_puts_a_layernorm_after_every_sublayer(model):
    """``model.norm=post`` (BERT's layout) reaches the transformer models from the config; ``pre`` is the default."""
    overrides = [f"model={model}", "data=synthetic", f"data.options.task={DATA_FOR_MODEL[model]}", "data.options.n=64"]
    small = ["model.dim=16", "model.heads=2", "model.depth=2", "solver=full_wave"]
    nets = {}
    for norm in ("pre", "post"):
        cfg = _compose([*overrides, *small, f"model.norm={norm}"])
        _, nets[norm], _ = builder.build(OmegaConf.to_container(cfg, resolve=True))
    assert _compose([*overrides, *small]).model.norm == "pre"
    for layer in nets["pre"].backbone.layers:
        assert isinstance(layer.attention.norm, torch.nn.LayerNorm) and layer.after_attention is None
    for layer in nets["post"].backbone.layers:
        assert isinstance(layer.attention.norm, torch.nn.Identity)
        assert isinstance(layer.after_attention.module, JointLayerNorm)
        assert isinstance(layer.after_ffn.module, JointLayerNorm)


def _files_read_by(group):
    """``{choice: dataset}`` for the choices of a config group that read one of the file datasets (Cora, Tiny
    Shakespeare, SST-2), from what each choice composes to, so a new experiment or data config is marked by itself."""
    from odeformer.data.sources import SOURCES

    reads = {}
    for choice in entry.choices(group):
        data = _compose([f"{group}={choice}"]).data
        name = data.options.name if data.name == "planetoid" else data.name  # a planetoid graph is named in options
        if name in SOURCES:
            reads[choice] = name
    return reads


@pytest.mark.data(only=_files_read_by("data"))
@pytest.mark.parametrize("data", _fashion_marked(entry.choices("data")))
def test_every_data_option_composes_and_loads(data):
    cfg = _compose([f"data={data}", f"model={builder.default_model('image')}"])
    loaded = load(cfg.data.name, cfg.data.root, **OmegaConf.to_container(cfg.data.options, resolve=True))
    assert set(loaded.splits) == {"train", "val", "test"}


@pytest.mark.data(only=_files_read_by("experiment"))
@pytest.mark.parametrize("experiment", _fashion_marked(entry.choices("experiment")))
def test_every_experiment_composes_and_builds(experiment):
    cfg = _compose([f"experiment={experiment}"])
    data, model, info = builder.build(OmegaConf.to_container(cfg, resolve=True))
    assert info["depth"] == cfg.model.depth and data.kind == task_of(model).data


@pytest.mark.parametrize("train", entry.choices("train"))
def test_every_train_option_composes(train):
    cfg = _compose([f"train={train}"])
    assert cfg.train.max_steps >= 1


def test_slurm_launcher_config_composes():
    with initialize_config_module(config_module=entry.CONFIG_MODULE, version_base="1.3"):
        cfg = compose(config_name="train", overrides=["hydra/launcher=slurm"], return_hydra_config=True)
    assert cfg.hydra.launcher.timeout_min == 120
    assert "SlurmLauncher" in cfg.hydra.launcher._target_


def test_schema_rejects_unknown_keys_and_wrong_types():
    with pytest.raises(Exception, match="depth"):
        _compose(["model.depth=abc"])
    with pytest.raises(Exception, match="not_a_key"):
        _compose(["train.not_a_key=1"])


# -- a run -------------------------------------------------------------------------------------------------------------


def test_a_debug_run_writes_everything(tmp_path):
    out = tmp_path / "run"
    done = cli(*DEBUG, f"train.out_dir={out}")
    assert done.returncode == 0, done.stderr
    summary = json.loads((out / "summary.json").read_text())
    for key in ("metric", "val", "test", "steps", "wall_s", "solver", "model", "data", "depth", "params"):
        assert key in summary
    assert summary["metric"] == "accuracy" and 0 <= summary["val"] <= 1 and 0 <= summary["test"] <= 1
    assert summary["steps"] == 20 and summary["solver"] == "full_wave" and summary["model"] == "vit"
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == list(range(1, 21))
    assert [r["step"] for r in rows if "val_accuracy" in r] == [10, 20]
    for name in ("last.pt", "best.pt", "curves.png"):
        assert (out / name).stat().st_size > 0
    assert list((out / "tensorboard").glob("events.out.tfevents.*")), "tensorboard is installed: events expected"
    assert load_checkpoint(out / "last.pt")["step"] == 20
    assert "test accuracy" in done.stdout and str(out) in done.stdout
    (snapshot,) = (out / ".hydra").iterdir()  # .hydra/<date>_<time>/: one per invocation, as docs/training.md says
    assert {p.name for p in snapshot.iterdir()} == {"config.yaml", "hydra.yaml", "overrides.yaml"}
    assert not list(out.glob("*.log"))  # no always-empty log file


def _parameters(path):
    return load_checkpoint(path)["model"]


@pytest.mark.slow  # two training processes, one killed: about 30 s
def test_resume_after_kill_is_bit_identical(tmp_path):
    common = [*DEBUG, "train.max_steps=120", "train.eval_every=5", "train.log_every=5", "model.dropout=0.1"]
    reference = tmp_path / "reference"
    assert cli(*common, f"train.out_dir={reference}").returncode == 0
    killed = tmp_path / "killed"
    process = subprocess.Popen(
        [sys.executable, "-m", "odeformer.app.train", *common, f"train.out_dir={killed}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 120
    while not (killed / "last.pt").exists() and time.time() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    stopped_at = load_checkpoint(killed / "last.pt")["step"]
    assert stopped_at < 120, "the run finished before it could be killed; the test proves nothing"
    resumed = cli(*common, f"train.out_dir={killed}", "train.resume=true")
    assert resumed.returncode == 0, resumed.stderr
    a, b = _parameters(reference / "last.pt"), _parameters(killed / "last.pt")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    steps = [json.loads(line)["step"] for line in (killed / "metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(steps), "metrics rows after the checkpoint are logged once"


SHORT = [*DEBUG, "train.max_steps=2", "train.eval_every=2"]


def _files(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _next_second():
    """Wait for the next second: Hydra names a command's config snapshot .hydra/<date>_<time>/ to the second."""
    time.sleep(1.05 - time.time() % 1)


def test_resume_with_another_config_is_refused_naming_the_keys_and_the_command(tmp_path):
    out = tmp_path / "run"
    assert cli_in_process(*SHORT, f"train.out_dir={out}").returncode == 0
    before = _files(out)
    _next_second()
    changed = ["solver=diffusion", "train.lr=1.0", "data.batch_size=8", "model.dropout=0.5"]
    refused = cli_in_process(*SHORT, *changed, f"train.out_dir={out}", "train.resume=true")
    assert refused.returncode == 2, refused.stdout
    line = _error_line(refused)
    assert line.startswith(f"odeformer-train: error: train.resume=true continues the run in {out} with its own config")
    assert "solver.name (full_wave in the run, diffusion now), model.dropout (0.0 in the run, 0.5 now)" in line
    assert "data.batch_size (32 in the run, 8 now) and 1 more; only train.max_steps, train.resume" in line
    command = " ".join(["odeformer-train", *SHORT, f"train.out_dir={out}", "train.resume=true"])
    assert line.endswith(f"Resume with its own overrides, as {out / 'last.pt'} stores them: {command}")
    assert _files(out) == before  # not a byte written: not even the command's config snapshot is left
    # where and how it runs, how long, what it writes may change
    allowed = ["train.max_steps=4", "train.device=cpu", "train.progress=true", "train.log_every=2", "data.root=/x"]
    resumed = cli_in_process(*SHORT, *allowed, f"train.out_dir={out}", "train.resume=true")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads((out / "summary.json").read_text())["steps"] == 4
    assert len(list((out / ".hydra").iterdir())) == 2  # the run's and the resume's


def test_a_resume_refusal_of_an_older_checkpoint_names_the_first_snapshots_overrides(tmp_path):
    from odeformer.app.run.locks import RunDirectoryError
    from odeformer.app.run.resume import check_resume_config

    snapshots = {"2024-01-01_10-00-00": "- solver=mix\n- model.depth=3\n", "2024-01-02_10-00-00": "- x=1\n"}
    for name, overrides in snapshots.items():
        (tmp_path / ".hydra" / name).mkdir(parents=True)
        (tmp_path / ".hydra" / name / "overrides.yaml").write_text(overrides)
    stored = {"solver": {"options": {}}, "model": {"depth": 3}, "train": {"max_steps": 5}}
    payload = {"info": {"config": stored}}  # no "overrides": a checkpoint from before they were stored
    check_resume_config(tmp_path, payload, {**stored, "train": {"max_steps": 9}})  # train.max_steps may change
    changed = {**stored, "solver": {"options": {"theta0": -4.0}}, "model": {"depth": 4}}
    with pytest.raises(RunDirectoryError) as error:
        check_resume_config(tmp_path, payload, changed)
    assert "changes solver.options ({} in the run, {'theta0': -4.0} now), model.depth (3 in the run, 4 now); only" in (
        str(error.value)
    )
    command = f"odeformer-train solver=mix model.depth=3 train.out_dir={tmp_path} train.resume=true"
    assert str(error.value).endswith(command)


def test_resume_rewrites_a_best_pt_written_after_last_pt(tmp_path):
    """A run killed after writing best.pt at a step later than last.pt's: the resumed run's best (summary's val, test
    and best_step, and best.pt) is the one restored from last.pt, not the dead trajectory's."""
    out = tmp_path / "run"
    assert cli_in_process(*SHORT, f"train.out_dir={out}").returncode == 0
    finished = json.loads((out / "summary.json").read_text())
    last = load_checkpoint(out / "last.pt")
    assert last["step"] == finished["best_step"] == 2
    stale = load_checkpoint(out / "best.pt")
    stale.update(step=3, best_step=3, best_val=1.0, model={k: torch.zeros_like(v) for k, v in stale["model"].items()})
    save_checkpoint(out / "best.pt", stale)  # as if written at step 3 by a run killed before its next last.pt
    resumed = cli_in_process(*SHORT, f"train.out_dir={out}", "train.resume=true")
    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["val"], summary["test"], summary["best_step"]) == (
        finished["val"],
        finished["test"],
        finished["best_step"],
    )
    best = load_checkpoint(out / "best.pt")
    assert best["step"] == 2 and all(torch.equal(best["model"][k], last["model"][k]) for k in last["model"])


def test_resume_of_a_last_pt_without_the_best_weights_takes_them_from_a_best_pt_that_fits(tmp_path):
    out = tmp_path / "run"
    assert cli_in_process(*SHORT, f"train.out_dir={out}").returncode == 0
    finished = json.loads((out / "summary.json").read_text())
    last = load_checkpoint(out / "last.pt")
    del last["best_model"]  # as written before last.pt carried the best weights
    save_checkpoint(out / "last.pt", last)
    assert cli_in_process(*SHORT, f"train.out_dir={out}", "train.resume=true").returncode == 0
    assert json.loads((out / "summary.json").read_text())["test"] == finished["test"]
    save_checkpoint(out / "last.pt", last)
    best = load_checkpoint(out / "best.pt")
    save_checkpoint(out / "best.pt", {**best, "step": 3})  # not the restored best: its weights are unknown
    with pytest.warns(UserWarning, match="best.pt is not the best of .* the summary's test is taken only if"):
        assert cli_in_process(*SHORT, f"train.out_dir={out}", "train.resume=true").returncode == 0
    assert json.loads((out / "summary.json").read_text())["test"] is None


def test_a_fresh_run_replaces_what_a_run_killed_before_its_first_checkpoint_left(tmp_path):
    out = tmp_path / "run"
    (out / "tensorboard").mkdir(parents=True)
    (out / "metrics.jsonl").write_text('{"step": 1, "loss": 123.0}\n{"step": 2, "loss": 123.0}\n')
    (out / "tensorboard" / "events.out.tfevents.1.old").write_bytes(b"old")
    (out / "best.pt").write_bytes(b"old")
    done = cli_in_process(*SHORT, f"train.out_dir={out}")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == [1, 2] and all(r.get("loss") != 123.0 for r in rows)
    assert not (out / "tensorboard" / "events.out.tfevents.1.old").exists()
    assert load_checkpoint(out / "best.pt")["step"] == 2
    (aside,) = (out / "previous").iterdir()  # the killed run's files are kept, not deleted: its best.pt may be dear
    assert (aside / "best.pt").read_bytes() == b"old" and "123.0" in (aside / "metrics.jsonl").read_text()
    assert (aside / "events.out.tfevents.1.old").read_bytes() == b"old"
    assert "moved what an earlier, unfinished run left here" in done.stdout


def test_resume_survives_a_blank_or_half_written_last_metrics_line_and_names_a_corrupt_one(tmp_path):
    out = tmp_path / "run"
    run = [*DEBUG, "train.eval_every=2", "train.log_every=1", f"train.out_dir={out}"]
    assert cli_in_process(*run, "train.max_steps=2").returncode == 0
    (out / "summary.json").unlink()
    metrics = out / "metrics.jsonl"
    metrics.write_text(metrics.read_text() + "\n" + '{"step": 3, "loss": 2.2')  # a blank line, a row cut short
    done = cli_in_process(*run, "train.max_steps=3", "train.resume=true")
    assert done.returncode == 0, done.stderr
    steps = [json.loads(line)["step"] for line in metrics.read_text().splitlines()]
    assert steps == sorted(steps) and steps[-1] == 3 and steps.count(3) == 2  # step 3's loss and val rows, once
    (out / "summary.json").unlink()
    metrics.write_text("not json\n" + metrics.read_text())
    done = cli_in_process(*run, "train.max_steps=4", "train.resume=true")
    assert done.returncode == 2 and f"{metrics} line 1 is not a JSON row" in done.stderr


def test_last_pt_is_saved_every_checkpoint_every_steps_whatever_eval_every_is(tmp_path, monkeypatch):
    from odeformer.app.run import trainer

    saved, real = [], trainer.save_checkpoint

    def spy(path, state):
        saved.append((path.name, state["step"]))
        return real(path, state)

    monkeypatch.setattr(trainer, "save_checkpoint", spy)
    cadence = ["train.max_steps=10", "train.eval_every=4", "train.checkpoint_every=3"]
    done = cli_in_process(*DEBUG, *cadence, f"train.out_dir={tmp_path / 'run'}")
    assert done.returncode == 0, done.stderr
    assert [step for name, step in saved if name == "last.pt"] == [3, 6, 9, 10]  # before: [10] (evaluations at 4, 8)


def test_the_logged_lr_is_the_one_the_step_used(tmp_path):
    out = tmp_path / "run"
    schedule = ["train.warmup_steps=2", "train.lr=0.01", "train.min_lr_ratio=0.0", "train.log_every=1"]
    done = cli_in_process(*DEBUG, *schedule, "train.max_steps=4", "train.eval_every=4", f"train.out_dir={out}")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    # steps 1, 2: warm-up (1/2, 2/2 of lr); steps 3, 4: cosine from lr at progress 0, then 1/2
    assert [r["lr"] for r in rows if "loss" in r] == pytest.approx([0.005, 0.01, 0.01, 0.005])


class _Recorder(torch.nn.Module):
    """Uniform logits over ``vocab`` tokens; records the inputs it is given."""

    def __init__(self, vocab):
        super().__init__()
        self.vocab, self.seen = vocab, []

    def forward(self, inputs):
        self.seen.append(inputs)
        return torch.zeros(*inputs.shape, self.vocab)


def test_eval_batches_0_reads_a_text_stream_whole_and_n_reads_n_batches():
    from odeformer.app.run.objectives import TextObjective

    data = load("synthetic", task="text", n=40)  # val: 4 runs of 32 tokens
    objective = TextObjective(data, 4, 0, torch.device("cpu"), context=8)
    stream, model = data.splits["val"][0], _Recorder(11)
    result = objective.evaluate(model, "val", 0)
    assert torch.equal(torch.cat(model.seen).flatten(), stream[: (len(stream) - 1) // 8 * 8])  # each window once
    assert result["loss"] == pytest.approx(math.log(11))
    model.seen.clear()
    objective.evaluate(model, "val", 2)
    assert sum(len(batch) for batch in model.seen) == 2 * 4


def test_an_empty_evaluation_raises():
    from odeformer.app.run.objectives import ImageObjective

    data = load("synthetic", n=40)
    objective = ImageObjective(data, 4, 0, torch.device("cpu"))
    images, labels = data.splits["val"]
    data.splits["val"] = (images[:0], labels[:0])
    with pytest.raises(ValueError, match="the val split is empty: nothing to evaluate"):
        objective.evaluate(_Recorder(4), "val", 0)


@pytest.mark.slow  # a CLI run signalled mid-training (about 11 s)
def test_sigterm_saves_a_checkpoint_and_exits_cleanly(tmp_path):
    out = tmp_path / "run"
    args = [*DEBUG, "train.max_steps=5000", "train.eval_every=1000", f"train.out_dir={out}"]
    process = subprocess.Popen(
        [sys.executable, "-m", "odeformer.app.train", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.time() + 120
    while not (out / "metrics.jsonl").exists() and time.time() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    stdout, _ = process.communicate(timeout=HANG)
    assert process.returncode == 143  # 128 + SIGTERM, as shells expect: a script can tell it from a finished run
    assert "checkpoint saved" in stdout
    step = load_checkpoint(out / "last.pt")["step"]
    assert 0 < step < 5000
    assert json.loads((out / "summary.json").read_text())["status"] == "interrupted"


def test_non_finite_loss_stops_naming_the_step(tmp_path):
    out = tmp_path / "run"
    done = cli(
        *DEBUG, "solver=diffusion", "solver.form=laplacian", "model.dt=60", "model.depth=24", f"train.out_dir={out}"
    )
    assert done.returncode == 1
    assert "stability bound" in done.stderr  # warned at start-up
    line = _error_line(done)
    assert "at step 1" in line and "smaller model.dt" in line
    assert "no checkpoint was written yet" in line and not (out / "last.pt").exists()  # names none it does not have


# -- bad input ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["solver=wave"],
            "unknown solver 'wave'; did you mean solver=full_wave? choose one of: bogacki_shampine3, bosh3, damped",
        ),
        (["model=gpt"], "unknown model 'gpt'; choose one of: causal_lm, difformer, masked_lm, node_classifier, vit"),
        (["solver=rk4", "solver.splitting=strang"], "solver rk4 takes the whole block as its field, so splitting"),
        (
            ["solver=light_wave", "solver.options.gamma=1.0"],
            "unknown key 'solver.options.gamma'; the keys of solver.options are: theta0",
        ),
        (["solver=mix", "solver.options.theta0=high"], "bad options"),
        (["solver=odeformer.solver_names"], "not a solvers.AbstractStepper subclass"),
        (["solver=math.pi"], "solver=math.pi names Python's own module math, not a scheme of yours"),
        (["solver.stepper=my_schemes.Mine"], "solver.stepper is no key: a scheme of your own is picked by its path"),
        (["data=imagenet"], "unknown data 'imagenet'; choose one of: digits, fashion_mnist"),
        (["model.dt=-0.5"], "dt must be positive and finite"),
        (["model.dim=30", "model.heads=4"], "dim must be divisible by heads: got dim=30, heads=4"),
        (["model.depth=0"], "depth must be a positive int, got 0"),
        (["model.norm=mid"], "norm must be one of pre, post; got 'mid'"),
        (["data=planetoid", "model=difformer", "data.root=/nonexistent/odeformer"], "/nonexistent/odeformer"),
        pytest.param(["data=fashion_mnist", "data.options.subset=0"], "subset", marks=needs_fashion),
        (["data=shakespeare"], "trains on image data but data=shakespeare is text data; use model=causal_lm"),
        (["train.eval_batches=-1"], "train.eval_batches must be 0 (evaluate the whole split) or more"),
        (["train.min_lr_ratio=-2"], "train.min_lr_ratio must be in [0, 1] (the cosine's floor"),
        (["train.min_lr_ratio=1.5"], "train.min_lr_ratio must be in [0, 1]"),
        (["train.warmup_steps=-1"], "train.warmup_steps must be 0 (no warm-up) or more, got -1"),
        (["solver=light_wave", "+solver.options.dim=3"], "dim is not a scheme option of LightWave"),
        (["train.weight_decay=-1"], "train.weight_decay must be 0 (none) or more, got -1.0"),
        (["train.grad_clip=-1"], "train.grad_clip must be 0 (no clipping) or a positive norm, got -1.0"),
        (["train.seed=-1"], "train.seed must be 0 or more, got -1"),
        (["model.patch_size=0"], "patch_size must be a positive int, got 0"),
        (["model=causal_lm", "data=synthetic", "data.options.task=text", "model.max_len=0"], "max_len must be a"),
        (["model=causal_lm", "data=synthetic", "data.options.task=text", "model.max_len=-3"], "max_len must be a"),
        (["data.batch_size=0"], "data.batch_size must be a positive int, got 0"),
        (["data.options.val_fraction=0"], "the val split is empty: nothing to evaluate"),
        (
            ["model=causal_lm", "data=synthetic", "data.options.task=text", "data.options.n=30"],
            "the val token stream (96) must be longer than the context (128) + 1: use a smaller model.max_len",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    out = tmp_path / "run"
    done = cli_in_process(*DEBUG[:1], *args, f"train.out_dir={out}")
    assert done.returncode == 2, done.stderr
    line = _error_line(done)
    assert line.startswith("odeformer-train: error:") and message in line
    assert not out.exists()  # nothing written, not even the command's config snapshot


def test_wrong_override_type_is_one_line():
    done = cli_in_process("model.depth=abc")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert _error_line(done).startswith("odeformer-train: error: bad value for model.depth: Value 'abc'")


def test_unknown_choices_know_the_users_own_yaml(tmp_path):
    (tmp_path / "solver").mkdir()
    (tmp_path / "solver" / "my_wave.yaml").write_text("defaults:\n  - full_wave\n  - _self_\nsplitting: strang\n")
    done = cli_in_process(f"hydra.searchpath=[file://{tmp_path}]", "solver=my_wav")
    assert done.returncode == 2 and "unknown solver 'my_wav'" in _error_line(done) and "my_wave" in _error_line(done)
    assert entry.compose([f"hydra.searchpath=[file://{tmp_path}]", "solver=my_wave"]).solver.splitting == "strang"


def test_existing_run_and_corrupt_checkpoint_are_refused_without_writing(tmp_path):
    out = tmp_path / "run"
    assert cli_in_process(*DEBUG, f"train.out_dir={out}").returncode == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    again = cli_in_process(*DEBUG, f"train.out_dir={out}")
    assert again.returncode == 2 and "already holds a run; pass train.resume=true" in _error_line(again)
    (out / "last.pt").write_bytes(b"not a checkpoint")
    before["last.pt"] = b"not a checkpoint"
    broken = cli_in_process(*DEBUG, f"train.out_dir={out}", "train.resume=true")
    assert broken.returncode == 2 and "is not a readable checkpoint" in _error_line(broken)
    after = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert after == before


def test_checkpoints_never_unpickle_code(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"format": "odeformer-checkpoint-1", "payload": EpochSampler(3, 2, 0)}, path)
    with pytest.raises(CheckpointError, match="refused to load odeformer.app.run.batches.EpochSampler"):
        load_checkpoint(path)
    save_checkpoint(tmp_path / "ok.pt", {"format": "something-else"})
    with pytest.raises(CheckpointError, match="is not an odeformer checkpoint"):
        load_checkpoint(tmp_path / "ok.pt")
    assert not list(tmp_path.glob("*.tmp"))


def test_samplers_resume_their_exact_order():
    for make in (lambda: EpochSampler(10, 4, seed=3), lambda: WindowSampler(100, 8, 4, seed=3)):
        a = make()
        for _ in range(3):
            next(a)
        b = make()
        b.load_state_dict(a.state_dict())
        assert all(torch.equal(next(a), next(b)) for _ in range(7))


# -- sweeps and torchrun -----------------------------------------------------------------------------------------------


@pytest.mark.slow  # a Hydra multirun of several trainings (about 12 s)
def test_multirun_sweep(tmp_path):
    done = cli(
        "-m",
        *DEBUG,
        "solver=diffusion,full_wave",
        "train.max_steps=4",
        "train.eval_every=2",
        f"hydra.sweep.dir={tmp_path}",
    )
    assert done.returncode == 0, done.stderr
    summaries = sorted(tmp_path.glob("*/summary.json"))
    assert len(summaries) == 2
    assert {json.loads(p.read_text())["solver"] for p in summaries} == {"diffusion", "full_wave"}
    # the sweep ends with one table of its runs, printed and written beside them
    rows = json.loads((tmp_path / "summary.json").read_text())
    assert [r["solver"] for r in rows] == ["diffusion", "full_wave"] and all(r["steps"] == 4 for r in rows)
    table = (tmp_path / "summary.md").read_text()
    assert table.startswith("| run | solver |") and table.count("\n") == 4 and "| full_wave |" in table
    assert "sweep summary:" in done.stdout and "| diffusion |" in done.stdout


def test_bad_sweep_values_are_one_line_each(tmp_path):
    done = cli_in_process("-m", *DEBUG, "solver=diffusion,wav", f"hydra.sweep.dir={tmp_path}")
    assert done.returncode == 2 and _error_line(done).startswith("odeformer-train: error: unknown solver 'wav'")
    assert not list(tmp_path.iterdir())  # nothing ran


def test_a_sweep_goes_on_past_a_failing_job_and_lists_it(tmp_path):
    """A combination that only the model can refuse (dim 30 with 4 heads) fails its job, not the sweep: the valid
    job after it still runs, the table lists both, and the command exits 2 at the end."""
    sweep = ["-m", *DEBUG[:2], "model.depth=1", "model.heads=4", "model.dim=30,16", "train.max_steps=2"]
    done = cli_in_process(*sweep, f"hydra.sweep.dir={tmp_path}")
    assert done.returncode == 2
    assert "dim must be divisible by heads: got dim=30, heads=4. (job 0_" in done.stderr
    rows = json.loads((tmp_path / "summary.json").read_text())
    assert [r["status"] for r in rows] == ["failed", "completed"] and rows[1]["steps"] == 2
    failed = json.loads(next(tmp_path.glob("0_*/summary.json")).read_text())
    assert failed["error"] == "dim must be divisible by heads: got dim=30, heads=4."


def test_mistyped_keys_name_the_nearest_valid_one():
    done = cli_in_process(*DEBUG, "model.dpeth=4")
    line = _error_line(done)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert line.startswith("odeformer-train: error: unknown key 'model.dpeth'; did you mean model.depth? the keys of ")
    done = cli_in_process(*DEBUG, "solver.options.theta0=-4.0")  # the default solver's stepper takes no options
    assert done.returncode == 2 and "solvers that do: light_wave, mix" in _error_line(done)
    done = cli_in_process(*DEBUG, "solver.options.scale0=2.0")  # an option of a scheme of one's own: the + form
    assert done.returncode == 2 and "takes its options as +solver.options.scale0=..." in _error_line(done)
    done = cli_in_process(*DEBUG, "train.lr=fast")
    assert done.returncode == 2 and "bad value for train.lr" in _error_line(done)


def test_an_experiment_does_not_override_a_train_option_given_on_the_command_line():
    assert entry.compose(["experiment=fmnist_vit", "train=debug"]).train.max_steps == 20
    assert entry.compose(["experiment=fmnist_vit"]).train.max_steps == 1500


@pytest.mark.slow  # two interpreters, Hydra's --help (about 9 s)
def test_help_lists_options_and_no_internal_schemas():
    done = cli("--help")
    assert done.returncode == 0 and "_schema" not in done.stdout
    assert "solver: " in done.stdout and "semi_implicit_euler" in done.stdout and "yoshida4" in done.stdout


@pytest.mark.slow  # a CLI training run of a user file (about 16 s)
def test_a_scheme_of_ones_own_trains_by_its_dotted_path(tmp_path):
    (tmp_path / "user_scheme.py").write_text(
        "from typing import ClassVar\nfrom solvers import Heun\n\n\nclass MyHeun(Heun):\n    order: ClassVar[int] = 2\n"
    )
    out = tmp_path / "run"
    done = cli(*DEBUG, "solver=user_scheme.MyHeun", "train.max_steps=2", f"train.out_dir={out}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads((out / "summary.json").read_text())["solver"] == "MyHeun"
    done = cli(*DEBUG, "solver=user_scheme.Missing", f"train.out_dir={tmp_path / 'x'}", cwd=tmp_path)
    assert done.returncode == 2 and "user_scheme.py defines no Missing; its classes: MyHeun." in _error_line(done)


@pytest.mark.slow  # two processes start torch and train (about 12 s)
def test_torchrun_two_cpu_processes_stay_in_sync(tmp_path):
    out = tmp_path / "ddp"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            "-m",
            "odeformer.app.train",
            *DEBUG,
            "train.max_steps=6",
            "train.eval_every=3",
            "train.device=cpu",
            "model.dropout=0.1",
            f"train.out_dir={out}",
        ],
        capture_output=True,
        text=True,
        timeout=HANG,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["world_size"] == 2
    first, second = summary["rank_checksums"]
    assert first == second
    assert len(list((out / ".hydra").iterdir())) == 1  # one config snapshot for the one invocation, not one per rank


@pytest.mark.slow  # a training run per library (about 10 s each)
@pytest.mark.parametrize("solver", ["dopri5", "tsit5"])
def test_continuous_solver_statistics_are_logged(tmp_path, solver):
    out = tmp_path / "run"
    done = cli(*DEBUG, f"solver={solver}", "train.max_steps=4", "train.eval_every=2", f"train.out_dir={out}")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    logged = [r for r in rows if "loss" in r]
    assert len(logged) == 4
    for row in logged:
        assert row["nfe"] >= 6 and row["steps_accepted"] >= 1 and row["steps_rejected"] >= 0


def test_an_out_dir_that_is_a_file_is_one_line_and_exit_2(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("kept\n")
    for out in (afile, afile / "run"):
        done = cli_in_process(*DEBUG, f"train.out_dir={out}")
        assert done.returncode == 2, done.stderr
        assert f"cannot be made: {afile} is a file, not a folder" in _error_line(done)
    assert afile.read_text() == "kept\n"


@pytest.mark.parametrize("solver", odeformer.solver_names("discrete"))
def test_weight_decay_reaches_every_layer_weight_and_no_scheme_parameter(solver):
    """``train.decay=matrices``: every weight matrix of the layers' fields is decayed, whatever the
    scheme; a scheme's own parameters (under a layer's ``block_stepper``) never are, nor vectors and embeddings. Read
    from the parameter names here, independently of how the trainer finds the schemes."""
    from odeformer import CausalLM
    from odeformer.app.run.optimizer import decayed

    model = CausalLM(vocab_size=11, max_len=8, depth=3, dim=8, heads=2, solver=solver)
    on, off = decayed(model, "matrices")
    named = dict(model.named_parameters())
    scheme = {n for n in named if ".block_stepper." in n}
    expected = {n for n, p in named.items() if p.dim() >= 2 and "embed" not in n and n not in scheme}
    assert {id(named[n]) for n in expected} == {id(p) for p in on}
    assert len(expected) >= 4 * 3  # qkv, proj, fc1, fc2 in each of the three layers
    assert {id(named[n]) for n in scheme} <= {id(p) for p in off}
    everything, _ = decayed(model, "all")
    assert {id(p) for p in everything} == {id(p) for n, p in named.items() if n not in scheme}
