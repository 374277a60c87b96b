"""The GPU command rehearsed on the CPU: ``bash benchmarks/gpu_check.sh --rehearse OUT`` runs every stage at tiny sizes
from a copy of the tree without ``.git``, with imports as the GPU machine's image has them, and writes what the real
run writes (four files, the GPU block rendered from them); the driver keeps to its budget and the import blocker
hides what the image lacks."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _venv_env():
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}


@pytest.mark.slow  # every stage in its own interpreter, about 2.5 minutes on two cores
def test_the_rehearsal_runs_every_stage_and_writes_what_the_gpu_run_would(tmp_path):
    from benchmarks.gpu import render
    from benchmarks.gpu_run import COMPILED_MODELS, EAGER_MODELS, FILES

    out = tmp_path / "out"
    done = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--rehearse", str(out), "c0ffee"],
        env=_venv_env(),
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
    hf = "hf_vit" not in gpu["not_measured"]
    for name in EAGER_MODELS:
        if name == "hf_vit" and not hf:
            continue
        assert gpu[name]["train_images_per_s"] > 0 and gpu[name]["inference_images_per_s"] > 0
        assert 0 < gpu[name]["mfu"] and gpu["syncs"][name]["per_step"] >= 0
    for name in COMPILED_MODELS:
        assert name in compiled or name in compiled["not_measured"]
        if name in compiled:
            assert compiled[name]["train_images_per_s"] > 0 and compiled[name]["warmup_s"] > 0
    for model in ("vit", "causal_lm"):  # the kernels' checks ran on the models' own q/k/v (bf16 under autocast)
        checked = gpu["environment"]["attention"][model]
        assert checked["causal"] == (model == "causal_lm") and len(checked["shape"]) == 4
        assert checked["dtype"] == "torch.bfloat16"
        for kernel in ("flash", "efficient", "cudnn"):  # no CUDA: every fused kernel refused (a CPU build says no why)
            assert checked[kernel]["usable"] is False and isinstance(checked[kernel]["reasons"], list)
    train = extras["train"]
    assert train["summary"]["status"] == "completed" and train["summary"]["steps"] == 4
    assert train["data"].startswith("synthetic") and "sklearn" in train["data"]  # the image's lack, rehearsed
    assert train["syncs_between_logging_steps"] == 0 and train["syncs_in_logging_steps"] > 0
    assert extras["lm"]["odeformer"]["train_tokens_per_s"] > 0
    text = render(out)
    assert "| `full_wave` | reduce-overhead |" in text and "| `diffusion` | eager |" in text
    assert "Causal LM of GPT-2-small's shape" in text and "host syncs between logging steps 0" in text
    assert "Fused attention on `causal_lm`'s own q/k/v" in text and "Stages not finished" not in text


def test_the_image_blocker_hides_what_the_gpu_machine_lacks():
    """In a process set up as the image has it, hydra and the rest are neither importable nor found, and the
    library, its trainer and the benchmarks import without them."""
    code = (
        "import sys, importlib.util; from benchmarks.gpu_run import ABSENT, as_on_the_image; as_on_the_image()\n"
        "for name in ABSENT:\n"
        "    assert importlib.util.find_spec(name) is None, name\n"
        "    try:\n"
        "        __import__(name)\n"
        "    except ModuleNotFoundError:\n"
        "        pass\n"
        "    else:\n"
        "        raise AssertionError(name)\n"
        "import odeformer, odeformer.app.run.trainer, benchmarks.gpu, benchmarks.anchors\n"
        "assert not [m for m in sys.modules if m.split('.')[0] in ABSENT]\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


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
