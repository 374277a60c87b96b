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
