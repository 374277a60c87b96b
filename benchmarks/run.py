"""Speed and memory of the library against hand-written and library baselines, as ratios measured side by side.

    python -m benchmarks.run [--quick | --smoke] [--processes N] [--json PATH] [--results docs/RESULTS.md]

Times are medians over repeated training steps (forward + backward + AdamW step) after warm-up, with the
configurations interleaved round by round so that machine noise hits all of them alike (``benchmarks/timing.py``).
The solver comparisons (``*_vs_diffusion_time``, ``euler_vs_reference``) and the joint-MLP one run on
:data:`PAIRED_THREADS` CPU thread and report the median over rounds of each round's own ratio.
Memory is measured per configuration in a fresh subprocess (``benchmarks/memory.py``). What ran before a measure in
the process still moves it by a few per cent, so the full run (``make bench``) measures everything in
:data:`PROCESSES` fresh processes one after another and reports, for each measure, the median of theirs (each
process's value beside it); a goal is met or missed on that median. The JSON holds every key of :data:`GOALS` (plus
the raw medians, and each process's values under ``per_process``); ``--results`` rewrites the benchmark block of
``docs/RESULTS.md``. ``--smoke`` runs every measure once, in one process, with a small memory batch, to check that each
one runs and is reported (about a minute; its numbers mean nothing).

The anchors (``benchmarks/anchors.py``) are what users run instead: Hugging Face's ``ViTForImageClassification`` and
``GPT2LMHeadModel`` and a ViT on ``nn.TransformerEncoder(norm_first=True)``, each of the same shape as the diffusion
model it is compared with, timed in one interleaved run (training step and no-grad inference). Without
``transformers`` installed the Hugging Face rows are skipped. Text generation (``benchmarks/generation.py``): the
cached ``CausalLM.generate`` against recomputing every token and against GPT-2's cached ``generate``. The tableau
engine's RK4 against the hand-written RK4 it replaced (``benchmarks/tableau.py``), on one CPU thread.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

import odeformer
import solvers
from benchmarks.generation import GEN, generation_rounds, medians
from benchmarks.generation import ratios as generation_ratios
from benchmarks.tableau import ratios as tableau_ratios
from benchmarks.tableau import tableau_times
from benchmarks.timing import cpu_threads, interleaved, interleaved_samples, median, paired_median
from odeformer.app.reporting.results import write_results

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- begin: benchmarks -->", "<!-- end: benchmarks -->"

GOALS = {
    "euler_vs_reference": ("<=", 1.03, "diffusion ViT time / hand-written pre-LN ViT time"),
    "light_vs_diffusion_time": ("<=", 1.05, "light_wave / diffusion train-step time"),
    "full_vs_diffusion_time": (
        "<=",
        1.70,
        "full_wave / diffusion train-step time (its FLOP floor at this size is 1.62: (40D + 4N) / (24D + 4N))",
    ),
    "full_vs_diffusion_memory": ("<=", 1.5, "full_wave / diffusion train-step memory"),
    "reversible_memory_depth48_vs_depth6": ("<=", 1.3, "reversible preset memory, depth 48 / depth 6"),
    "integrate_vs_torchdiffeq": ("<=", 0.9, "solvers.integrate (rk4_38) / torchdiffeq.odeint(method='rk4') time"),
    "integrate_vs_torchode": ("<=", 1.0, "solvers.integrate (heun) / torchode Heun fixed-step time"),
    "compile_speedup": (
        None,
        None,
        "eager / torch.compile train-step time (diffusion ViT); no goal on a CPU, where the matrix products and "
        "attention it cannot speed up bound it (`python -m benchmarks.profile_compile` prints the bound)",
    ),
    "joint_mlp_vs_doubled_mlp_time": (
        "<=",
        1.05,
        "Full Wave's MLP on (state, velocity) / plain MLP on the doubled batch (same products), forward + backward",
    ),
    "diffusion_vs_hf_time": ("<=", 1.0, "diffusion ViT / Hugging Face ViTForImageClassification train-step time"),
    "diffusion_vs_hf_inference_time": ("<=", 1.0, "diffusion ViT / Hugging Face ViT inference time (no grad)"),
    "diffusion_vs_hf_memory": ("<=", 1.0, "diffusion ViT / Hugging Face ViT train-step memory"),
    "diffusion_vs_torch_time": ("<=", 1.0, "diffusion ViT / nn.TransformerEncoder ViT train-step time"),
    "diffusion_vs_torch_inference_time": ("<=", 1.0, "diffusion ViT / nn.TransformerEncoder ViT inference time"),
    "diffusion_vs_torch_memory": ("<=", 1.0, "diffusion ViT / nn.TransformerEncoder ViT train-step memory"),
    "causal_vs_gpt2_time": ("<=", 1.0, "diffusion CausalLM / Hugging Face GPT2LMHeadModel train-step time"),
    "causal_vs_gpt2_inference_time": ("<=", 1.0, "diffusion CausalLM / Hugging Face GPT-2 inference time"),
    "generate_cache_speedup": (">=", 5.0, "CausalLM.generate recomputing every token / with its key/value cache"),
    "generate_vs_gpt2_time": (
        "<=",
        1.0,
        "cached greedy generate of the from_hf GPT-2 copy (diffusion) / transformers' cached generate, same tokens",
    ),
    "generate_vs_handwritten_time": (
        "<=",
        1.25,
        "cached greedy generate of the from_hf GPT-2 copy (diffusion) / the same generation written out by hand on "
        "GPT-2's weights with a preallocated cache",
    ),
    "generate_full_vs_diffusion_time": ("<=", 1.7, "cached generate, full_wave / diffusion (the same weights)"),
    "tableau_rk4_model_time": (
        "<=",
        1.03,
        "RK4 from the tableau engine / the hand-written RK4 it replaced: depth-6 whole-block ViT, forward + backward",
    ),
    "tableau_rk4_step_time": ("<=", 1.03, "RK4 from the tableau engine / the hand-written RK4: bare step, tanh field"),
}
"""Each measure: (comparison, goal, what it is); a measure reported without a goal has None for both."""
HF_KEYS = {k for k in GOALS if "hf" in k or "gpt2" in k} | {"generate_vs_handwritten_time"}  # on GPT-2's weights
PROCESSES = 3
"""Fresh processes of a full run (``make bench``), one after another: each measure is the median of theirs."""

VIT = dict(dim=128, depth=6, batch=32, image=32, patch=4)  # 64 patches + CLS
MEMORY = dict(dim=64, batch=128, image=32, patch=4)  # activations dominate the parameters here
LM = dict(dim=128, depth=6, heads=4, batch=16, length=128, vocab=65)  # character-level, as tiny Shakespeare
PAIRED_THREADS = 1
"""CPU threads of the solver and joint-MLP comparisons, whose ratios are each round's own: on a machine shared with
other work, one thread per configuration keeps a round's two samples from competing for cores that others hold."""


def build_model(solver: str, depth: int, dim: int, image: int, patch: int) -> torch.nn.Module:
    """A ViT with ``solver`` (``"reference"``: the hand-written baseline with the diffusion model's weights;
    ``"torch"``: the ``nn.TransformerEncoder`` ViT with them; ``"hf"``: Hugging Face's ViT of the same shape)."""
    torch.manual_seed(0)
    if solver == "reference":
        from benchmarks.reference import ReferenceViT

        library = build_model("diffusion", depth, dim, image, patch)
        return ReferenceViT(image, patch, 3, 10, depth, dim, heads=4).load_from(library)
    if solver == "torch":
        from benchmarks.anchors import TorchViT

        library = build_model("diffusion", depth, dim, image, patch)
        return TorchViT(image, patch, 3, 10, depth, dim, heads=4).load_from(library)
    if solver == "hf":
        from benchmarks.anchors import hf_vit

        return hf_vit(image, patch, 3, 10, depth, dim, heads=4)
    dt = 1.0 if solver in ("diffusion", "light_wave") else None
    return odeformer.ViT(
        image_size=image,
        patch_size=patch,
        in_chans=3,
        num_classes=10,
        depth=depth,
        dim=dim,
        heads=4,
        solver=solver,
        dt=dt,
    )


def train_step(model: torch.nn.Module, batch: int, image: int, device: str) -> Callable[[], None]:
    optimiser = torch.optim.AdamW(model.parameters(), lr=1e-4)
    images = torch.randn(batch, 3, image, image, device=device)
    labels = torch.randint(0, 10, (batch,), device=device)

    def step():
        loss = F.cross_entropy(model(images), labels)
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()

    return step


def inference_step(model: torch.nn.Module, inputs: torch.Tensor) -> Callable[[], None]:
    model.eval()

    @torch.no_grad()
    def step():
        model(inputs)

    return step


def lm_train_step(model: torch.nn.Module, tokens: torch.Tensor) -> Callable[[], None]:
    optimiser = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step():
        logits = model(tokens[:, :-1])  # (B, T, vocab)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()

    return step


def anchor_times(rounds: int, device: str) -> tuple[dict[str, float], str]:
    """Training step and no-grad inference of the diffusion ViT beside the ``nn.TransformerEncoder`` ViT and
    Hugging Face's ViT, and of the diffusion CausalLM beside Hugging Face's GPT-2 (the odeformer model is
    ``odeformer.from_hf`` of it: the same shape and weights), all interleaved in one run. Returns the medians and
    which attention implementation each model ran."""
    from benchmarks.anchors import attention, have_transformers

    vit = {name: (VIT["depth"], VIT["dim"], VIT["image"], VIT["patch"]) for name in ("diffusion", "torch", "hf")}
    if not have_transformers():
        del vit["hf"]
    g = torch.Generator().manual_seed(0)
    images = torch.randn(VIT["batch"], 3, VIT["image"], VIT["image"], generator=g).to(device)
    steps, hf = {}, {}
    for name, shape in vit.items():
        model = build_model(name, *shape).to(device)
        steps[f"{name}_train"] = train_step(model, VIT["batch"], VIT["image"], device)
        steps[f"{name}_inference"] = inference_step(build_model(name, *shape).to(device), images)
        if name == "hf":
            hf["ViT"] = model
    if have_transformers():
        from benchmarks.anchors import hf_gpt2

        tokens = torch.randint(0, LM["vocab"], (LM["batch"], LM["length"] + 1), generator=g).to(device)
        for name in ("train", "inference"):
            torch.manual_seed(0)
            gpt2 = hf_gpt2(LM["vocab"], LM["length"] + 1, LM["depth"], LM["dim"], LM["heads"])
            causal = odeformer.from_hf(gpt2.model)
            for label, model in (("causal", causal), ("gpt2", gpt2)):
                model = model.to(device)
                make = lm_train_step if name == "train" else inference_step
                steps[f"{label}_{name}"] = make(model, tokens if name == "train" else tokens[:, :-1])
            hf["GPT-2"] = gpt2
    return interleaved(steps, rounds, warmup=2, device=device), attention(hf if hf else None)


def vit_samples(rounds: int, device: str, threads: int = PAIRED_THREADS) -> dict[str, list[float]]:
    """Seconds of a training step of each solver's ViT (and the hand-written reference), one sample per round, the
    solvers taking turns; on the CPU torch runs ``threads`` threads meanwhile (0: its default)."""
    with cpu_threads(device, threads):
        steps = {}
        for solver in ("reference", "diffusion", "light_wave", "full_wave"):
            model = build_model(solver, VIT["depth"], VIT["dim"], VIT["image"], VIT["patch"]).to(device)
            steps[solver] = train_step(model, VIT["batch"], VIT["image"], device)
        return interleaved_samples(steps, rounds, warmup=2, device=device)


def vit_times(rounds: int, device: str, threads: int = PAIRED_THREADS) -> dict[str, float]:
    return medians(vit_samples(rounds, device, threads))


def integrate_times(rounds: int, device: str) -> dict[str, float]:
    """A small field (loop overhead matters): ``tanh(y W)`` on ``(64, 32)``, 100 steps over ``[0, 1]``."""
    import torchdiffeq
    import torchode

    g = torch.Generator().manual_seed(0)
    W = (torch.randn(32, 32, generator=g) / 32**0.5).to(device)
    y0 = torch.randn(64, 32, generator=g).to(device)
    n, T = 100, 1.0

    def field(t, y):
        return torch.tanh(y @ W)

    grid = torch.tensor([0.0, T], device=device)
    term = torchode.ODETerm(field)
    heun = torchode.AutoDiffAdjoint(torchode.Heun(term=term), torchode.FixedStepController())
    problem = torchode.InitialValueProblem(y0=y0, t_eval=grid.repeat(64, 1))
    dt0 = torch.full((64,), T / n, device=device)
    rk4, heun_ours = solvers.RK4ThreeEighths(), solvers.Heun()
    fields = [field] * n
    functions = {
        "ours_rk4_38": lambda: solvers.integrate(rk4, fields, y0, T / n),
        "torchdiffeq_rk4": lambda: torchdiffeq.odeint(field, y0, grid, method="rk4", options={"step_size": T / n}),
        "ours_heun": lambda: solvers.integrate(heun_ours, fields, y0, T / n),
        "torchode_heun": lambda: heun.solve(problem, dt0=dt0),
    }
    with torch.no_grad():
        return interleaved(functions, rounds, warmup=2, device=device)


def mlp_pair(dim: int, device: str = "cpu") -> tuple[torch.nn.Module, torch.nn.Module]:
    """Full Wave's joint MLP and a plain MLP sharing its weights (so both run the same products)."""
    from odeformer.joint import JointMLP

    joint = JointMLP(dim, 4 * dim).to(device)
    return joint, torch.nn.Sequential(joint.fc1, torch.nn.GELU(), joint.fc2)


def joint_mlp_times(rounds: int, device: str, threads: int = PAIRED_THREADS) -> dict[str, float]:
    return medians(joint_mlp_samples(rounds, device, threads))


def joint_mlp_samples(rounds: int, device: str, threads: int = PAIRED_THREADS) -> dict[str, list[float]]:
    """Full Wave's joint MLP (state and velocity, the velocity by the chain rule) against a plain MLP of the same
    weights on a batch twice as large: the same matrix products, so the ratio is what the velocity path's elementwise
    work (φ', φ'', the stacking) costs on top of them. ViT timing sizes; forward and backward, three calls per sample
    (one call is a few milliseconds); ``threads`` as in :func:`vit_samples`."""
    with cpu_threads(device, threads):
        return _joint_mlp_samples(rounds, device)


def _joint_mlp_samples(rounds: int, device: str) -> dict[str, list[float]]:
    torch.manual_seed(0)
    dim, tokens = VIT["dim"], (VIT["image"] // VIT["patch"]) ** 2 + 1
    joint, plain = mlp_pair(dim, device)
    x, v = (torch.randn(VIT["batch"], tokens, dim, device=device, requires_grad=True) for _ in range(2))
    doubled = torch.randn(2 * VIT["batch"], tokens, dim, device=device, requires_grad=True)

    def joint_step():
        out_x, out_v = joint(x, v)
        (out_x.sum() + out_v.sum()).backward()

    def plain_step():
        plain(doubled).sum().backward()

    return interleaved_samples({"joint": joint_step, "plain": plain_step}, rounds, warmup=2, device=device, repeats=3)


def compile_times(rounds: int, device: str) -> dict[str, float]:
    eager = build_model("diffusion", VIT["depth"], VIT["dim"], VIT["image"], VIT["patch"]).to(device)
    compiled_model = build_model("diffusion", VIT["depth"], VIT["dim"], VIT["image"], VIT["patch"]).to(device)
    compiled = torch.compile(compiled_model)
    steps = {
        "eager": train_step(eager, VIT["batch"], VIT["image"], device),
        "compiled": train_step(compiled, VIT["batch"], VIT["image"], device),
    }
    return interleaved(steps, rounds, warmup=3, device=device)


def memory(solver: str, depth: int, device: str, batch: int = MEMORY["batch"]) -> dict:
    args = [
        sys.executable,
        "-m",
        "benchmarks.memory",
        "--solver",
        solver,
        "--depth",
        str(depth),
        "--device",
        device,
        *(f"--{k}={v}" for k, v in (MEMORY | {"batch": batch}).items()),
    ]
    # A fixed mmap threshold: glibc otherwise raises it after large frees, keeping freed activation buffers in a
    # fragmented heap, so the resident set would show the allocator's history instead of the memory in use.
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    done = subprocess.run(args, capture_output=True, text=True, check=True, cwd=ROOT, env=env)
    return json.loads(done.stdout.strip().splitlines()[-1])


MODES = {"full": (20, 10, MEMORY["batch"]), "quick": (5, 3, MEMORY["batch"]), "smoke": (1, 1, 4)}
"""Rounds of the timed comparisons, of the compile comparison, and the memory probes' batch, per mode."""
GENERATE = {"full": (7, 256), "quick": (3, 256), "smoke": (1, 16)}
"""Rounds and new tokens of the generation comparison (``benchmarks/generation.py``), per mode."""


def run(mode: str, device: str) -> dict:
    rounds, compile_rounds, batch = MODES[mode]
    tokens = GENERATE[mode][1]
    started = time.time()
    vit_rounds = vit_samples(rounds, device)
    vit = medians(vit_rounds)
    integ = integrate_times(rounds * 2, device)
    comp = compile_times(compile_rounds, device)
    mlp_rounds = joint_mlp_samples(rounds * 2, device)
    mlp = medians(mlp_rounds)
    mem = {
        f"{s}_d{d}": memory(s, d, device, batch)
        for s, d in [("diffusion", 6), ("full_wave", 6), ("reversible", 6), ("reversible", 48)]
    }
    anchors, used = anchor_times(rounds, device)
    generation_samples, agree = generation_rounds(GENERATE[mode][0], device, tokens)
    generation = medians(generation_samples)
    rk4 = tableau_times(rounds, device)
    for name in ("torch", "hf") if "hf_train" in anchors else ("torch",):
        mem[f"{name}_d6"] = memory(name, 6, device, batch)
    results = {
        "euler_vs_reference": paired_median(vit_rounds["diffusion"], vit_rounds["reference"]),
        "light_vs_diffusion_time": paired_median(vit_rounds["light_wave"], vit_rounds["diffusion"]),
        "full_vs_diffusion_time": paired_median(vit_rounds["full_wave"], vit_rounds["diffusion"]),
        "full_vs_diffusion_memory": mem["full_wave_d6"]["peak_mb"] / mem["diffusion_d6"]["peak_mb"],
        "reversible_memory_depth48_vs_depth6": mem["reversible_d48"]["peak_mb"] / mem["reversible_d6"]["peak_mb"],
        "integrate_vs_torchdiffeq": integ["ours_rk4_38"] / integ["torchdiffeq_rk4"],
        "integrate_vs_torchode": integ["ours_heun"] / integ["torchode_heun"],
        "compile_speedup": comp["eager"] / comp["compiled"],
        "joint_mlp_vs_doubled_mlp_time": paired_median(mlp_rounds["joint"], mlp_rounds["plain"]),
        "diffusion_vs_torch_time": anchors["diffusion_train"] / anchors["torch_train"],
        "diffusion_vs_torch_inference_time": anchors["diffusion_inference"] / anchors["torch_inference"],
        "diffusion_vs_torch_memory": mem["diffusion_d6"]["peak_mb"] / mem["torch_d6"]["peak_mb"],
    }
    results |= generation_ratios(generation, generation_samples)
    results |= tableau_ratios(rk4)
    if "hf_train" in anchors:
        results |= {
            "diffusion_vs_hf_time": anchors["diffusion_train"] / anchors["hf_train"],
            "diffusion_vs_hf_inference_time": anchors["diffusion_inference"] / anchors["hf_inference"],
            "diffusion_vs_hf_memory": mem["diffusion_d6"]["peak_mb"] / mem["hf_d6"]["peak_mb"],
            "causal_vs_gpt2_time": anchors["causal_train"] / anchors["gpt2_train"],
            "causal_vs_gpt2_inference_time": anchors["causal_inference"] / anchors["gpt2_inference"],
        }
    results["raw"] = {
        "vit_step_s": vit,
        "integrate_s": integ,
        "compile_step_s": comp,
        "mlp_s": mlp,
        "anchor_s": anchors,
        "generate_s": generation,
        "generate_agree": agree,
        "tableau_rk4_s": rk4,
        "attention": used,
        "memory_mb": mem,
        "sizes": {"vit": VIT, "memory": MEMORY | {"batch": batch}, "lm": LM, "generate": GEN | {"new": tokens}},
        "rounds": rounds,
        "device": device,
        "wall_s": round(time.time() - started, 1),
        "torch": torch.__version__,
        "machine": f"{os.cpu_count()} CPU cores, {platform.machine()}"
        if device == "cpu"
        else torch.cuda.get_device_name(),
    }
    return results


def combine(processes: list[dict]) -> dict:
    """One result from several processes' results: each measure the median of the processes' values (their values in
    ``per_process``), the raw figures of the first, its wall time the sum of theirs."""
    results: dict = {"per_process": {}}
    for key in GOALS:
        values = [r[key] for r in processes if key in r]
        if values:
            results[key], results["per_process"][key] = median(values), values
    raw = dict(processes[0]["raw"])
    agree = [r["raw"].get("generate_agree") or {} for r in processes]
    raw |= {
        "processes": len(processes),
        "wall_s": round(sum(r["raw"]["wall_s"] for r in processes), 1),
        "generate_agree": {k: all(a.get(k) for a in agree) for k in agree[0]},
    }
    return results | {"raw": raw}


def table(results: dict) -> str:
    """The results as a markdown table, each measure against its goal (with each process's value, where several ran:
    the value is their median)."""
    each = results.get("per_process") or {}
    lines = ["| measure | value | goal | met | what |", "|---|---|---|---|---|"]
    if each:
        lines = ["| measure | value | each process | goal | met | what |", "|---|---|---|---|---|---|"]
    for key, (op, goal, what) in GOALS.items():
        target = "–" if op is None else f"{op} {goal}"
        values = [", ".join(f"{v:.3f}" for v in each[key]) if key in each else "–"] if each else []
        if key not in results:  # the Hugging Face anchors without transformers, or a JSON from before them
            lines.append("| " + " | ".join([f"`{key}`", "–", *values, target, "–", f"{what} (not measured)"]) + " |")
            continue
        value = results[key]
        met = "–" if op is None else "yes" if (value <= goal if op == "<=" else value >= goal) else "no"
        lines.append("| " + " | ".join([f"`{key}`", f"{value:.3f}", *values, target, met, what]) + " |")
    return "\n".join(lines)


def one_process(mode: str, device: str, path: Path) -> dict:
    """The whole run in a fresh process of its own (``--processes 1``), its results read back from ``path``."""
    command = [sys.executable, "-m", "benchmarks.run", "--processes", "1", "--device", device, "--json", str(path)]
    subprocess.run(command + ([] if mode == "full" else [f"--{mode}"]), cwd=ROOT, check=True)
    return json.loads(path.read_text())


def processes(mode: str, device: str, count: int) -> dict:
    """``count`` fresh processes of the run, one after another, combined (:func:`combine`)."""
    with tempfile.TemporaryDirectory(prefix="bench_") as folder:
        return combine([one_process(mode, device, Path(folder) / f"{i}.json") for i in range(count)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.splitlines()[0])
    speed = parser.add_mutually_exclusive_group()
    speed.add_argument("--quick", action="store_true", help="fewer repeats (about 5 minutes on 2 CPU cores)")
    speed.add_argument(
        "--smoke", action="store_true", help="one round, small memory batch: checks that every measure runs"
    )
    parser.add_argument(
        "--processes",
        type=int,
        default=None,
        help=f"fresh processes, one after another, each measure their median (default {PROCESSES} for the full run, "
        "1 with --quick or --smoke)",
    )
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    parser.add_argument("--results", type=Path, default=None, help="rewrite the benchmark block of this markdown")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    mode = "quick" if args.quick else "smoke" if args.smoke else "full"
    count = args.processes if args.processes is not None else PROCESSES if mode == "full" else 1
    if count < 1:
        parser.error(f"--processes must be at least 1, got {count}")
    results = run(mode, args.device) if count == 1 else processes(mode, args.device, count)
    text = table(results)
    print(text)
    raw = results["raw"]
    print(f"\n{raw['machine']}, torch {raw['torch']}, {raw['wall_s']} s\nattention: {raw['attention']}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    if args.results:
        command = "python -m benchmarks.run" + ("" if mode == "full" else f" --{mode}")
        command += ("" if args.processes is None else f" --processes {count}") + f" --results {args.results}"
        runs = (
            f"{raw['rounds']} interleaved rounds"
            if count == 1
            else f"{count} fresh processes one after another, each {raw['rounds']} interleaved rounds; each value is "
            "the median of the processes' (theirs beside it), and met is read on it"
        )
        sizes = (
            f"ViT timing: dim {VIT['dim']}, depth {VIT['depth']}, heads 4, {(VIT['image'] // VIT['patch']) ** 2 + 1} "
            f"tokens, batch {VIT['batch']} (solver and joint-MLP ratios on a CPU {PAIRED_THREADS} thread, each "
            f"the median of the rounds' own ratios); memory: dim {MEMORY['dim']}, "
            f"batch {raw['sizes']['memory']['batch']}, "
            "peak over three training steps minus the size before them, in a fresh process each. Anchors: the "
            "diffusion ViT against Hugging Face's ViTForImageClassification and an nn.TransformerEncoder ViT of the "
            f"same shape, and a diffusion CausalLM (dim {LM['dim']}, depth {LM['depth']}, {LM['length']} tokens, "
            f"batch {LM['batch']}) against Hugging Face's GPT2LMHeadModel whose weights it copies; attention: "
            f"{raw['attention']}. Generation: that GPT-2 shape, one prompt of {GEN['prompt']} tokens, "
            f"{raw['sizes']['generate']['new']} new tokens, greedy, on a CPU {GEN['threads']} thread, "
            f"{GENERATE[mode][0]} interleaved rounds; the outputs agree: {raw['generate_agree']}."
        )
        write_results(
            f"Generated by `{command}` on {raw['machine']} (torch {raw['torch']}, {runs}, {raw['wall_s']} s, "
            f"{time.strftime('%Y-%m-%d')}). {sizes}\n\n{text}\n",
            args.results,
            BEGIN,
            END,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
