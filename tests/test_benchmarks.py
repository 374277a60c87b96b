"""The benchmark suite runs and reports every key (slow: it measures for real)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KEYS = {
    "euler_vs_reference",
    "light_vs_diffusion_time",
    "full_vs_diffusion_time",
    "full_vs_diffusion_memory",
    "reversible_memory_depth48_vs_depth6",
    "integrate_vs_torchdiffeq",
    "integrate_vs_torchode",
    "compile_speedup",
}


@pytest.mark.slow
def test_quick_benchmark_writes_every_key(tmp_path):
    out = tmp_path / "bench.json"
    results = tmp_path / "RESULTS.md"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", "--quick", "--json", str(out), "--results", str(results)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads(out.read_text())
    assert KEYS <= set(data) and all(data[k] > 0 for k in KEYS)
    assert "<!-- begin: benchmarks -->" in results.read_text()


def test_reference_vit_computes_the_diffusion_model_exactly():
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import torch; from benchmarks.run import build_model; "
            "a = build_model('diffusion', 2, 32, 16, 4); b = build_model('reference', 2, 32, 16, 4); "
            "x = torch.randn(2, 3, 16, 16); print(float((a(x) - b(x)).abs().max()))",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert float(done.stdout.strip()) == 0.0


def test_gpu_results_render_into_their_own_block(tmp_path):
    """The GPU table is drawn from the JSON that ``benchmarks/gpu_check.sh`` wrote (the recorded H200 run)."""
    folder = ROOT / "benchmarks" / "results" / "h200"
    results = tmp_path / "RESULTS.md"
    results.write_text("# Results\n\nprose\n\n<!-- begin: gpu -->\nold\n<!-- end: gpu -->\n\nmore prose\n")
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu", "--render", str(folder), "--results", str(results)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    text = results.read_text()
    assert "prose" in text and "more prose" in text and "\nold\n" not in text
    gpu = json.loads((folder / "gpu.json").read_text())
    for solver in ("diffusion", "light_wave", "full_wave", "reversible"):
        row = next(line for line in text.splitlines() if line.startswith(f"| `{solver}` |"))
        ratio = gpu["diffusion"]["train_images_per_s"] / gpu[solver]["train_images_per_s"]
        assert f"| {gpu[solver]['train_images_per_s']:.0f} |" in row and f"| {ratio:.2f} |" in row
