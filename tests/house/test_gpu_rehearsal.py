"""The GPU command rehearsed on the CPU: ``bash benchmarks/gpu_check.sh --rehearse OUT`` runs every stage at tiny sizes
from a copy of the tree without ``.git``, with imports as the GPU machine's image has them and every compiled model
lowered by inductor, and writes what the real run writes (four files, the GPU block rendered from them, the Hugging
Face rows wherever ``transformers`` is installed); the driver keeps to its budget; the import blocker hides what the
image lacks and nothing else; a stage cut mid-way keeps what it measured."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


def _venv_env():
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}


def _installed(name):
    return importlib.util.find_spec(name) is not None


@pytest.mark.rehearsal  # every stage in its own interpreter, four models through inductor: about 3 minutes
def test_the_rehearsal_runs_every_stage_and_writes_what_the_gpu_run_would(tmp_path):
    from benchmarks.gpu import render
    from benchmarks.gpu_run import COMPILED_MODELS, EAGER_MODELS, FILES

    out = tmp_path / "out"
    done = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--rehearse", str(out), "c0ffee"],
        env={**_venv_env(), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")},  # every graph lowered afresh
        capture_output=True,
        text=True,
    )
    log = (out / "gpu_check.log").read_text() if (out / "gpu_check.log").exists() else ""
    assert done.returncode == 0, done.stderr[-2000:] + log[-3000:]
    assert sorted(p.name for p in out.iterdir()) == sorted(FILES) and len(FILES) <= 4
    gpu = json.loads((out / "gpu.json").read_text())
    compiled = json.loads((out / "gpu_reduce-overhead.json").read_text())
    extras = json.loads((out / "extras.json").read_text())
    assert all(status.startswith("done") for status in extras["stages"].values()), extras["stages"]
    assert gpu["commit"] == compiled["commit"] == extras["commit"] == "c0ffee"
    hf = _installed("transformers")  # the image has it: where it is installed, its rows must be there
    assert ("hf_vit" not in gpu["not_measured"]) == hf and ("hf_gpt2" not in extras["lm"]["not_measured"]) == hf
    for name in EAGER_MODELS:
        if name == "hf_vit" and not hf:
            continue
        assert gpu[name]["train_images_per_s"] > 0 and gpu[name]["inference_images_per_s"] > 0
        assert 0 < gpu[name]["mfu"] and gpu["syncs"][name]["per_step"] >= 0
    assert compiled["compile_backend"] == "inductor" and compiled["compile_device"] == "cpu"
    for name in COMPILED_MODELS:
        if name == "hf_vit" and not hf:
            assert name in compiled["not_measured"]
            continue
        r = compiled[name]  # lowered by inductor, timed; the CPU has no CUDA graphs, and the row says so
        assert r["train_images_per_s"] > 0 and r["warmup_s"] >= r["compile_s"] > 0
        assert r["cuda_graphs_used"] is False and r["cuda_graphs"]["recorded"] == 0
    for model in ("vit", "causal_lm"):  # the kernels' checks ran on the models' own q/k/v (bf16 under autocast)
        checked = gpu["environment"]["attention"][model]
        assert checked["causal"] == (model == "causal_lm") and len(checked["shape"]) == 4
        assert checked["dtype"] == "torch.bfloat16"
        for kernel in ("flash", "efficient", "cudnn"):  # no CUDA: every fused kernel refused (a CPU build says no why)
            assert checked[kernel]["usable"] is False and isinstance(checked[kernel]["reasons"], list)
    train = extras["train"]
    assert train["summary"]["status"] == "completed" and train["summary"]["steps"] == 4
    assert train["data"] == ("digits" if _installed("sklearn") else "synthetic (digits need sklearn)")
    assert train["syncs_between_logging_steps"] == 0 and train["syncs_in_logging_steps"] > 0
    assert extras["lm"]["odeformer"]["train_tokens_per_s"] > 0
    assert not hf or extras["lm"]["hf_gpt2"]["train_tokens_per_s"] > 0
    text = render(out)
    assert "| `full_wave` | reduce-overhead, no CUDA graphs |" in text and "| `diffusion` | eager |" in text
    assert not hf or ("| `hf_vit` | eager |" in text and "Hugging Face's GPT-2" in text)
    assert "Compile time under `reduce-overhead` (cpu), the first training step: `diffusion`" in text
    assert "Causal LM of GPT-2-small's shape" in text and "host syncs between logging steps 0" in text
    assert "Fused attention on `causal_lm`'s own q/k/v" in text and "Stages not finished" not in text


PRESENT = {
    "transformers": "transformers",
    "sklearn": "scikit-learn",
    "torchdiffeq": "torchdiffeq",
    "matplotlib": "matplotlib",
}
"""What the GPU machine's image has (module: distribution): importable in the rehearsal, metadata and all."""


def test_the_image_blocker_hides_what_the_gpu_machine_lacks_and_nothing_else():
    """In a process set up as the image has it, hydra and the rest are neither importable nor found, nor is any
    distribution that provides them; the library, its trainer and the benchmarks import without them; what the image
    has (``transformers``, which reads package metadata as it imports, scikit-learn, torchdiffeq, matplotlib) imports
    as installed."""
    code = f"""
import importlib.metadata, importlib.util, sys
from benchmarks.gpu_run import ABSENT, as_on_the_image, provides
as_on_the_image()
for name in ABSENT:
    assert importlib.util.find_spec(name) is None, name
    try:
        __import__(name)
    except ModuleNotFoundError:
        pass
    else:
        raise AssertionError(name)
    assert not [d for d in importlib.metadata.distributions() if name in provides(d)], name
import odeformer, odeformer.app.run.trainer, benchmarks.gpu, benchmarks.anchors
assert not [m for m in sys.modules if m.split('.')[0] in ABSENT]
for name, distribution in {PRESENT!r}.items():  # what the image has: imported, its metadata found
    if importlib.util.find_spec(name) is not None:
        __import__(name)
        assert importlib.metadata.version(distribution), distribution
        print(name)
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == [name for name in PRESENT if _installed(name)]


def test_a_spent_budget_starts_no_stage_and_still_writes_the_files(tmp_path):
    from benchmarks.gpu_run import FILES, REHEARSAL_SLACK, drive

    assert drive(tmp_path, "abc", budget=6.0 / REHEARSAL_SLACK, rehearse=True) == 1  # the slack scales it back to 6 s
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f for f in FILES if f != "gpu_reduce-overhead.json")
    extras = json.loads((tmp_path / "extras.json").read_text())
    assert set(extras["stages"].values()) == {"not started: the budget was spent"}
    assert json.loads((tmp_path / "gpu.json").read_text())["commit"] == "abc"


def test_the_training_stage_reads_the_experiments_settings_from_configs():
    from benchmarks.gpu_run import _flat_yaml

    experiment = _flat_yaml(ROOT / "configs" / "experiment" / "digits_vit.yaml")
    assert experiment["model"] == {"depth": 4, "dim": 48, "heads": 4, "patch_size": 2, "dropout": 0.1}
    assert _flat_yaml(ROOT / "configs" / "train" / "digits_vit.yaml") == {
        "max_steps": 600,
        "eval_every": 100,
        "lr": 3e-3,
    }


class Killed(BaseException):
    """What the driver's time limit does to a stage's process: it stops where it is and writes nothing more."""


def _killing_steps(monkeypatch, after):
    """The benchmark models' training steps (``benchmarks.gpu._steps``, all models' together) are killed at the start
    of the one after the first ``after``."""
    from benchmarks import gpu

    steps, taken = gpu._steps, []

    def made(*args, **kwargs):
        calls = steps(*args, **kwargs)
        train = calls["train"]

        def step():
            if len(taken) == after:
                raise Killed
            taken.append(1)
            train()

        return {**calls, "train": step}

    monkeypatch.setattr(gpu, "_steps", made)


def test_an_eager_stage_cut_mid_way_keeps_what_it_measured(tmp_path, monkeypatch):
    """Killed as its second timed block of training steps begins (each model's memory probe takes 3 steps, its
    warm-up 3, the untimed block and the first timed block ``steps`` each): both models' memory, warm-up and first
    block's throughput (with its MFU) are on disk, and the GPU block shows them with the stage named as cut."""
    from benchmarks import gpu_run
    from benchmarks.gpu import render

    monkeypatch.setattr(gpu_run, "EAGER_MODELS", ("diffusion", "full_wave"))
    parts, out = tmp_path / "parts", tmp_path / "out"
    parts.mkdir(), out.mkdir()
    stage = gpu_run.Stage(parts / "eager.json", rehearse=True)
    _killing_steps(monkeypatch, after=2 * (3 + 3 + 2 * stage.steps))
    with pytest.raises(Killed):
        gpu_run.stage_eager(stage)
    kept = json.loads((parts / "eager.json").read_text())
    for name in ("diffusion", "full_wave"):
        assert {"train_peak_gib", "inference_peak_gib"} <= set(kept[name]) and kept[name]["warmup_s"] > 0
        assert kept[name]["train_rounds"] == 1 and kept[name]["train_images_per_s"] > 0 and kept[name]["mfu"] > 0
        assert "inference_images_per_s" not in kept[name]
    gpu_run._merge(out, parts, "abc", {"eager": "over its 120 s in 120.0 s"})
    text = render(out)
    assert "| `full_wave` | eager |" in text and "Stages not finished: eager over its 120 s" in text


def test_a_compiled_stage_cut_after_compiling_keeps_its_compile_time_and_graph_use(tmp_path, monkeypatch):
    """Killed in its warm-up, after the first step (the one that compiles; torch.compile left out here, the step run
    as it is): its compile time and that no CUDA graph ran are on disk, and the GPU block says both."""
    from benchmarks import gpu_run
    from benchmarks.gpu import render

    monkeypatch.setattr(torch, "compile", lambda model, **options: model)
    parts, out = tmp_path / "parts", tmp_path / "out"
    parts.mkdir(), out.mkdir()
    stage = gpu_run.Stage(parts / "compiled:full_wave.json", rehearse=True)
    _killing_steps(monkeypatch, after=1)
    with pytest.raises(Killed):
        gpu_run.stage_compiled(stage, "full_wave")
    kept = json.loads((parts / "compiled:full_wave.json").read_text())["full_wave"]
    assert kept["compile_s"] > 0 and kept["cuda_graphs_used"] is False and kept["cuda_graphs"]["recorded"] == 0
    assert "train_images_per_s" not in kept
    gpu_run._merge(out, parts, "abc", {"compiled:full_wave": "over its 80 s in 80.0 s"})
    text = render(out)
    assert "Compile time under `reduce-overhead` (cpu), the first training step: `full_wave` " in text
    assert "no CUDA graphs (none recorded)" in text and "Measured in part under `reduce-overhead`" in text


def test_a_training_run_cut_at_its_end_keeps_its_last_logged_step(tmp_path, monkeypatch):
    """Killed as it writes its summary: the loss and host syncs of its last logging step are on disk."""
    from benchmarks import gpu_run
    from benchmarks.gpu import render
    from odeformer.app.run.trainer import Trainer

    for method in ("_read_loss", "_check_loss", "_log", "_checkpoint_and_evaluate", "_save_last"):
        monkeypatch.setattr(Trainer, method, getattr(Trainer, method))  # the stage wraps them: undone afterwards

    def killed(self, status):
        raise Killed

    monkeypatch.setattr(Trainer, "_finish", killed)
    parts, out = tmp_path / "parts", tmp_path / "out"
    parts.mkdir(), out.mkdir()
    with pytest.raises(Killed):
        gpu_run.stage_train(gpu_run.Stage(parts / "train.json", rehearse=True))
    kept = json.loads((parts / "train.json").read_text())
    assert "summary" not in kept and kept["progress"]["logged"]["step"] == 4 and kept["progress"]["logged"]["loss"] > 0
    assert kept["progress"]["syncs_between_logging_steps"] == 0 and kept["progress"]["syncs_in_logging_steps"] > 0
    gpu_run._merge(out, parts, "abc", {"train": "over its 75 s in 75.0 s"})
    assert "), cut before it finished: loss " in render(out)


def test_the_language_models_cut_after_a_block_keep_its_tokens_per_second(tmp_path, monkeypatch):
    from benchmarks import gpu_run, timing

    interleaved = timing.interleaved

    def cut(*args, after_round, **kwargs):
        def then_killed(seconds):
            after_round(seconds)
            raise Killed

        return interleaved(*args, after_round=then_killed, **kwargs)

    monkeypatch.setattr(timing, "interleaved", cut)
    stage = gpu_run.Stage(tmp_path / "lm.json", rehearse=True)
    with pytest.raises(Killed):
        gpu_run.stage_lm(stage)
    kept = json.loads((tmp_path / "lm.json").read_text())
    names = ["odeformer", *(["hf_gpt2"] if _installed("transformers") else [])]
    assert all(kept[name]["train_tokens_per_s"] > 0 and kept[name]["train_rounds"] == 1 for name in names)


def test_graph_use_counts_the_cuda_graphs_recorded_and_replayed_and_inductors_reasons(monkeypatch):
    """Whether ``reduce-overhead`` ran CUDA graphs, read from the graphs themselves (a stand-in class here, as the CPU
    has none), with the reasons inductor logs for skipping them, even where a logging config had disabled its logger;
    the class and the logger are as they were afterwards."""
    import logging

    from benchmarks.gpu_run import GRAPH_LOG, GraphUse

    class Graph:
        def capture_begin(self, *args, **kwargs):
            pass

        def replay(self):
            pass

    original = Graph.replay
    monkeypatch.setattr(torch.cuda, "CUDAGraph", Graph)
    log = logging.getLogger(GRAPH_LOG)
    monkeypatch.setattr(log, "disabled", True)  # as a logging config that disables existing loggers leaves it
    monkeypatch.setattr(log, "level", logging.ERROR)
    with GraphUse() as use:
        assert not use.used()
        graph = Graph()
        graph.capture_begin(), graph.replay(), graph.replay()
        logging.getLogger(GRAPH_LOG).warning("skipping cudagraphs due to mutated inputs (1 instances)")
    assert use.used() and use.counts() == {
        "recorded": 1,
        "replayed": 2,
        "reasons": ["skipping cudagraphs due to mutated inputs (1 instances)"],
    }
    Graph().replay()
    assert Graph.replay is original and use.replayed == 2 and log.disabled and log.level == logging.ERROR


def test_the_rehearsals_sync_count_sees_reads_and_copies_from_the_host_and_not_fills():
    """On the CPU the sync count is of the calls that make the host wait on a GPU: reads, tensors made from Python data
    on the step's device, copies from the host to another device (the meta device stands in for a GPU)."""
    from benchmarks.gpu_run import counted_syncs

    x = torch.ones(3)
    with counted_syncs("cpu") as found:
        x.new_tensor(2.0), torch.tensor([1.0]), x[0].item(), x.tolist(), x.to("meta")
        torch.empty(3, device="meta").copy_(x)
    assert found == ["new_tensor", "tensor", "item", "tolist", "to", "copy_"]
    with counted_syncs("cpu") as found:
        torch.full_like(x, 2.0), x * 2.0, x.to(torch.float64), torch.empty(3).copy_(x), torch.where(x > 0, x, 0.0)
    assert found == []
    with counted_syncs("meta") as found:  # a step on another device: a tensor made on the host stays there
        torch.tensor([1.0])
    assert found == []
