"""The benchmark suite runs and reports every key (slow: it measures for real)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

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
    "diffusion_vs_hf_time",
    "diffusion_vs_hf_inference_time",
    "diffusion_vs_hf_memory",
    "diffusion_vs_torch_time",
    "diffusion_vs_torch_inference_time",
    "diffusion_vs_torch_memory",
    "causal_vs_gpt2_time",
    "causal_vs_gpt2_inference_time",
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


def test_torch_encoder_vit_computes_the_diffusion_model_exactly():
    """The nn.TransformerEncoder anchor is the same function as the diffusion ViT whose weights it loads."""
    from benchmarks.anchors import TorchViT
    from benchmarks.run import build_model

    library = build_model("diffusion", 2, 32, 16, 4).double()
    anchor = TorchViT(16, 4, 3, 10, 2, 32, heads=4).double().load_from(library, match_eps=True)
    images = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    with torch.no_grad():
        assert float((library(images) - anchor(images)).abs().max()) < 1e-12  # training mode: the standard path
        library.eval(), anchor.eval()
        assert float((library(images) - anchor(images)).abs().max()) < 1e-12


def test_torch_encoder_vit_inference_takes_pytorchs_fused_fast_path_and_agrees():
    """With one LayerNorm epsilon (as the benchmark builds it) inference runs PyTorch's fused encoder kernel."""
    import odeformer
    from benchmarks.anchors import TorchViT

    torch.manual_seed(0)
    sizes = dict(image_size=16, patch_size=4, in_chans=3, num_classes=10, depth=2, dim=32, heads=4)
    library = odeformer.ViT(**sizes, solver="diffusion", dt=1.0, norm_eps=1e-5).double().eval()
    anchor = TorchViT(16, 4, 3, 10, 2, 32, heads=4).double().load_from(library).eval()
    images = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    with torch.no_grad(), torch.profiler.profile() as profile:
        error = float((library(images) - anchor(images)).abs().max())
    assert error < 1e-12
    assert "aten::_transformer_encoder_layer_fwd" in {event.name for event in profile.events()}


def test_anchors_have_the_shape_of_the_models_they_are_compared_with():
    pytest.importorskip("transformers")
    import odeformer
    from benchmarks.anchors import attention, hf_gpt2, hf_implementation
    from benchmarks.run import build_model

    def count(model):
        return sum(p.numel() for p in model.parameters())

    models = {name: build_model(name, 2, 32, 16, 4) for name in ("diffusion", "torch", "hf")}
    assert len({count(m) for m in models.values()}) == 1
    assert hf_implementation(models["hf"]) in ("sdpa", "eager")  # eager only where the version has no sdpa ViT
    assert models["hf"](torch.randn(2, 3, 16, 16)).shape == (2, 10)
    gpt2 = hf_gpt2(vocab_size=11, max_len=9, depth=2, dim=16, heads=2)
    causal = odeformer.from_hf(gpt2.model)
    assert count(causal) == count(gpt2) and hf_implementation(gpt2) in ("sdpa", "eager")
    assert "ViT attn_implementation=" in attention({"ViT": models["hf"]})
    tokens = torch.randint(0, 11, (2, 9))
    with torch.no_grad():
        assert float((causal.eval()(tokens) - gpt2.eval()(tokens)).abs().max()) < 1e-4


def test_the_table_marks_what_was_not_measured():
    from benchmarks.run import GOALS, HF_KEYS, table

    text = table({key: 1.0 for key in GOALS if key not in HF_KEYS})
    assert "diffusion_vs_hf_time" in text and "(not measured)" in text
    assert sum("(not measured)" in line for line in text.splitlines()) == len(HF_KEYS)


def test_gpu_anchors_are_built_at_the_solvers_size():
    """The GPU run's CPU side: every model it times (solvers and anchors) builds, with one parameter count."""
    pytest.importorskip("transformers")
    from benchmarks import gpu

    assert gpu.models() == gpu.SOLVERS + gpu.ANCHORS
    counts = {name: sum(p.numel() for p in gpu.build(name).parameters()) for name in ("diffusion", *gpu.ANCHORS)}
    assert len(set(counts.values())) == 1, counts
    with torch.no_grad():
        assert gpu.build("hf_vit")(torch.randn(1, 3, 224, 224)).shape == (1, 1000)


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


def test_gpu_anchor_rows_render_where_the_json_has_them(tmp_path):
    from benchmarks.gpu import render

    recorded = json.loads((ROOT / "benchmarks" / "results" / "h200" / "gpu.json").read_text())
    row = {"train_images_per_s": 1000.0, "train_peak_gib": 2.0, "inference_images_per_s": 4000.0}
    (tmp_path / "gpu.json").write_text(json.dumps({**recorded, "hf_vit": {**row, "inference_peak_gib": 0.5}}))
    text = render(tmp_path)
    hf = next(line for line in text.splitlines() if line.startswith("| `hf_vit` |"))
    assert "| 1000 |" in hf and not any(line.startswith("| `torch_vit` |") for line in text.splitlines())
