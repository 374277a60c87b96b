"""Throughput and peak memory on a GPU: a DeiT-Ti-sized ViT (dim 192, depth 12, heads 3, 224² images, patch 16,
batch 128, bf16 autocast) for diffusion, light_wave, full_wave and reversible: our analogue of the Wavy Transformer
paper's throughput table. Beside them, the anchors of the same size (``benchmarks/anchors.py``): Hugging Face's
``ViTForImageClassification`` (sdpa attention; only where ``transformers`` is installed) and a ViT on
``nn.TransformerEncoder`` (under autocast and with 3 heads PyTorch's fused encoder fast path does not apply), under
the same compile setting (``--compile-mode`` compiles every model alike: ``default``, ``reduce-overhead`` (CUDA
graphs) or ``max-autotune``; ``--compile`` is ``--compile-mode default``). Each model's training throughput is also
given as MFU, the model FLOP/s it achieves over the chip's bf16 dense peak (``--peak-tflops``; FLOPs counted by
:func:`step_flops`). Run by ``benchmarks/gpu_check.sh`` (eager and compiled side by side); prints a table and writes
JSON. ``--render`` turns the files that script wrote into the GPU block of ``docs/RESULTS.md`` (on any machine, no
GPU needed).

    python -m benchmarks.gpu [--steps 10] [--compile-mode reduce-overhead] [--peak-tflops 989] [--json gpu.json]
    python -m benchmarks.gpu --render OUT_DIR --results docs/RESULTS.md
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

import odeformer
from benchmarks.timing import interleaved, synchronizer

SOLVERS = ("diffusion", "light_wave", "full_wave", "reversible")
ANCHORS = ("hf_vit", "torch_vit")
"""Hugging Face's ViTForImageClassification and the nn.TransformerEncoder ViT, DeiT-Ti-sized like the solvers."""
DEIT_TI = dict(image_size=224, patch_size=16, in_chans=3, num_classes=1000, depth=12, dim=192, heads=3)
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")
"""``torch.compile`` modes: inductor's default, CUDA graphs on top of it, and autotuned kernels (plus CUDA graphs)."""
H200_BF16_DENSE_TFLOPS = 989.0
"""NVIDIA H200 SXM, BF16 Tensor Core, dense: NVIDIA's H200 datasheet lists 1,979 TFLOPS *with* 2:4 structured
sparsity, twice the dense rate (989.4 TFLOP/s at the boost clock, as the H100 SXM: the same GH100 compute)."""
VELOCITY_FFN = ("full_wave",)
"""Solvers among :data:`SOLVERS` whose FFN also carries the velocity (its two products run again on ``v``)."""
FLOPS_FORMULA = (
    "train FLOPs = 3 × forward (backward ≈ 2 × forward); forward = L·[2·B·N·(4d² + 2dh) + 4·B·N²·d] "
    "(+ L·2·B·N·2dh for full_wave's velocity through the FFN) + 2·B·P·(c·p²)·d (patch embedding) + 2·B·d·K (head); "
    "N = P + 1 tokens, P = (image/p)² patches, h = 4d; matrix products only, 2 FLOPs per multiply-add"
)


def step_flops(name: str, batch: int, sizes: dict | None = None) -> dict[str, float]:
    """Model FLOPs of one forward pass and of one training step of model ``name`` at ``sizes`` (default DeiT-Ti).

    Counted analytically, matrix products only (2 FLOPs per multiply-add; LayerNorms, activations, softmax and the
    optimiser are left out), as :data:`FLOPS_FORMULA` says. Per layer, with B images, N = P + 1 tokens, width d and
    FFN width h = 4d: the attention's four projections 2·B·N·4d², the FFN's two products 2·B·N·2dh, and the attention
    itself (``Q Kᵀ`` and ``A V``) 4·B·N²·d; Full Wave adds the FFN's two products on the velocity, 2·B·N·2dh. The
    patch embedding is a ``c·p² -> d`` product per patch, the head a ``d -> K`` product on the CLS token. A training
    step is counted as three forward passes (the backward pass of every product is two products of its size); the
    reversible preset's recomputation in its backward pass is not counted (these are model FLOPs, not hardware FLOPs).
    """
    s = {**DEIT_TI, **(sizes or {})}
    d, depth, p = s["dim"], s["depth"], s["patch_size"]
    patches = (s["image_size"] // p) ** 2
    tokens, hidden = patches + 1, 4 * d
    layer = 2 * batch * tokens * (4 * d * d + 2 * d * hidden) + 4 * batch * tokens**2 * d
    if name in VELOCITY_FFN:
        layer += 2 * batch * tokens * 2 * d * hidden
    forward = depth * layer + 2 * batch * patches * s["in_chans"] * p * p * d + 2 * batch * d * s["num_classes"]
    return {"forward": float(forward), "train": 3.0 * forward}


def mfu(images_per_s: float, train_flops_per_step: float, batch: int, peak_tflops: float) -> float:
    """Model FLOPs utilisation: the FLOP/s that ``images_per_s`` training throughput achieves, over the peak."""
    return images_per_s / batch * train_flops_per_step / (peak_tflops * 1e12)


def models() -> tuple[str, ...]:
    """The solvers, then the anchors this machine can build (the Hugging Face one needs ``transformers``)."""
    from benchmarks.anchors import have_transformers

    return SOLVERS + tuple(a for a in ANCHORS if a != "hf_vit" or have_transformers())


def build(name: str, sizes: dict | None = None) -> torch.nn.Module:
    """A ViT on the CPU, DeiT-Ti-sized unless ``sizes`` changes some of :data:`DEIT_TI`: a solver's, or an anchor's
    (:data:`ANCHORS`)."""
    from benchmarks.anchors import TorchViT, hf_vit

    s = {**DEIT_TI, **(sizes or {})}
    torch.manual_seed(0)
    if name == "hf_vit":
        return hf_vit(**s)
    if name == "torch_vit":
        return TorchViT(**s)
    dt = 1.0 if name in ("diffusion", "light_wave") else None
    return odeformer.ViT(**s, solver=name, dt=dt)


def _model(
    name: str, compile_mode: str | None = None, device: str = "cuda", sizes: dict | None = None
) -> torch.nn.Module:
    model = build(name, sizes).to(device)
    return torch.compile(model, mode=compile_mode) if compile_mode else model


def _steps(
    model: torch.nn.Module,
    batch: int,
    compile_mode: str | None = None,
    device: str = "cuda",
    sizes: dict | None = None,
) -> dict[str, Callable[[], None]]:
    """The training step (forward, backward, AdamW) and the inference step of ``model`` on a fixed synthetic batch.
    Under CUDA graphs (``reduce-overhead``, ``max-autotune``) each step is marked as a new one, so that a replay may
    reuse the memory of the last one's outputs."""
    s = {**DEIT_TI, **(sizes or {})}
    optimiser = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)  # as the trainer's: no host read per step
    images = torch.randn(batch, s["in_chans"], s["image_size"], s["image_size"], device=device)
    labels = torch.randint(0, s["num_classes"], (batch,), device=device)
    graphs = compile_mode in ("reduce-overhead", "max-autotune") and device == "cuda"

    def train():
        if graphs:
            torch.compiler.cudagraph_mark_step_begin()
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = F.cross_entropy(model(images), labels)
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()

    @torch.no_grad()
    def inference():
        if graphs:
            torch.compiler.cudagraph_mark_step_begin()
        with torch.autocast(device, dtype=torch.bfloat16):
            model(images)

    return {"train": train, "inference": inference}


def peak_memory(
    solver: str, batch: int, compile_mode: str | None = None, device: str = "cuda", sizes: dict | None = None
) -> dict[str, float | None]:
    """Peak allocated GiB of a training and of an inference step, with only this model (and its optimiser) alive
    (None on the CPU, which keeps no such count: the steps still run)."""
    model = _model(solver, compile_mode, device, sizes)
    cuda, out = device == "cuda", {}
    for mode, fn in _steps(model, batch, compile_mode, device, sizes).items():
        for _ in range(2):
            fn()
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        fn()
        if cuda:
            torch.cuda.synchronize()
        out[f"{mode}_peak_gib"] = torch.cuda.max_memory_allocated() / 2**30 if cuda else None
    del model
    if cuda:
        torch.cuda.empty_cache()
    return out


def throughput(
    batch: int,
    steps: int,
    rounds: int,
    compile_mode: str | None = None,
    names: tuple[str, ...] | None = None,
    time_limit: float | None = None,
    device: str = "cuda",
    sizes: dict | None = None,
    record: Callable[[str, dict[str, float]], None] | None = None,
) -> tuple[dict[str, dict[str, float]], list[str]]:
    """Images/s per model and mode: the median over ``rounds`` blocks of ``steps`` steps, the models taking turns
    block by block (so clock ramps and a busy neighbour hit all of them alike).

    Each model is built and warmed up (compiled, its CUDA graphs recorded) in turn, its seconds for that recorded as
    ``warmup_s``; once ``time_limit`` seconds have passed, the models not yet started are skipped (returned second),
    so that a slow compiler leaves the ones already compiled to be timed. ``record(name, figures)`` receives a model's
    figures whenever they grow: after its warm-up, and after every timed block (images/s over the blocks so far, with
    ``<mode>_rounds`` saying how many), so that a run cut short has what it measured."""
    started = time.perf_counter()
    runs, out, skipped = {}, {}, []
    for name in names or models():
        if time_limit is not None and time.perf_counter() - started > time_limit:
            skipped.append(name)
            continue
        begin = time.perf_counter()
        runs[name] = _steps(_model(name, compile_mode, device, sizes), batch, compile_mode, device, sizes)
        for fn in runs[name].values():
            for _ in range(3):  # compile, then record and replay the CUDA graphs
                fn()
        synchronizer(device)()
        out[name] = {"warmup_s": time.perf_counter() - begin}
        if record is not None:
            record(name, out[name])
    for mode in ("train", "inference"):

        def measured(seconds: dict[str, float], mode: str = mode) -> None:
            for name in runs:
                out[name][f"{mode}_images_per_s"] = batch / seconds[name]
                out[name][f"{mode}_rounds"] = out[name].get(f"{mode}_rounds", 0) + 1
                if record is not None:
                    record(name, out[name])

        calls = {name: runs[name][mode] for name in runs}
        interleaved(calls, rounds, warmup=1, device=device, repeats=steps, after_round=measured)  # timed in blocks
    return out, skipped


BEGIN, END = "<!-- begin: gpu -->", "<!-- end: gpu -->"


def setting(run: dict) -> str:
    """How a run's models ran: ``eager`` or the ``torch.compile`` mode (older JSON: from its ``compile`` flag)."""
    return run.get("compile_mode") or ("default" if run.get("compile") else "eager")


def runs(folder: Path) -> list[dict]:
    """The runs ``benchmarks/gpu_check.sh`` wrote into ``folder``: ``gpu.json`` (eager), then any ``gpu_<mode>.json``
    (the same measurement under a compile mode)."""
    return [json.loads(path.read_text()) for path in [folder / "gpu.json", *sorted(folder.glob("gpu_*.json"))]]


def _train_speed(run: dict, name: str) -> tuple[float, float]:
    """(TFLOP/s, MFU) of a model's training throughput in ``run``, from the JSON or, for runs recorded before they
    were, from :func:`step_flops` and the H200 peak."""
    r = run[name]
    if "mfu" in r:
        return r["train_tflops_per_s"], r["mfu"]
    flops = step_flops(name, run["batch"], run.get("sizes"))["train"]
    peak = run.get("peak_tflops", H200_BF16_DENSE_TFLOPS)
    per_s = r["train_images_per_s"] / run["batch"]
    return per_s * flops / 1e12, mfu(r["train_images_per_s"], flops, run["batch"], peak)


def _cell(value: float | None, form: str) -> str:
    return "–" if value is None else format(value, form)


def render(folder: Path) -> str:
    """Markdown for the files ``benchmarks/gpu_check.sh`` wrote into ``folder``: one table row per model and run
    (eager, then each compile mode), with ratios against diffusion in the same run and, for a compiled run, the
    speed-up over the eager run of the same model."""
    from benchmarks.run import table

    measured = runs(folder)
    gpu, eager = measured[0], next((run for run in measured if setting(run) == "eager"), None)
    head = next((run for run in measured if "batch" in run), {})  # a run whose eager stage was cut says no sizes
    commit = next((run["commit"] for run in measured if run.get("commit")), None)
    settings = ", ".join(f"`{setting(run)}`" for run in measured)
    peak = head.get("peak_tflops", H200_BF16_DENSE_TFLOPS)
    lines = [
        f"Generated by `bash benchmarks/gpu_check.sh OUT COMMIT` on one {gpu['gpu']} (torch {gpu['torch']})"
        f"{f' at commit `{commit}`' if commit else ''}, then `bash benchmarks/gpu_check.sh --render OUT`. "
        "DeiT-Ti-sized ViT: dim 192, depth 12, "
        f"heads 3, 224² synthetic images, patch 16, batch {head.get('batch', '?')}, bf16 autocast, "
        f"{head.get('optimizer', 'AdamW')}; images/s is the median of {head.get('rounds', '?')} blocks of "
        f"{head.get('steps', '?')} steps, the models taking turns; peak is "
        "`torch.cuda.max_memory_allocated` of one step with only that model alive. Runs (the compile column): "
        f"{settings}, every model alike in each. Ratios are against diffusion (the plain transformer) in the same run; "
        "`hf_vit` is Hugging Face's ViTForImageClassification (sdpa attention) and `torch_vit` a ViT on "
        "nn.TransformerEncoder, both of the same size, where measured. MFU is the training step's model FLOP/s over "
        f"the bf16 dense peak of {peak:g} TFLOP/s (H200 SXM: NVIDIA's 1,979 TFLOPS with sparsity, halved), counting "
        f"{FLOPS_FORMULA}.",
        "",
        "| solver | compile | train img/s | train peak GiB | inference img/s | inference peak GiB | train time ratio | "
        "train memory ratio | train TFLOP/s | MFU | vs eager |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in SOLVERS + ANCHORS:
        for run in measured:
            if "train_images_per_s" not in run.get(name, {}):  # not measured, or cut before it was timed
                continue
            r, base = run[name], run.get("diffusion", {})
            ratio = base["train_images_per_s"] / r["train_images_per_s"] if "train_images_per_s" in base else None
            memory = (
                r["train_peak_gib"] / base["train_peak_gib"]
                if r.get("train_peak_gib") and base.get("train_peak_gib")
                else None
            )
            tflops, used = _train_speed(run, name)
            speedup = None
            if run is not eager and eager is not None and "train_images_per_s" in eager.get(name, {}):
                speedup = r["train_images_per_s"] / eager[name]["train_images_per_s"]
            lines.append(
                f"| `{name}` | {_setting_of(run, r)} | {r['train_images_per_s']:.0f} | "
                f"{_cell(r.get('train_peak_gib'), '.2f')} | {_cell(r.get('inference_images_per_s'), '.0f')} | "
                f"{_cell(r.get('inference_peak_gib'), '.2f')} | "
                f"{_cell(ratio, '.2f')} | {_cell(memory, '.2f')} | {tflops:.1f} | {100 * used:.1f} % | "
                f"{'–' if speedup is None else f'{speedup:.2f}×'} |"
            )
    for run in measured:
        if run.get("skipped"):
            lines += ["", f"Not measured under `{setting(run)}` (compile time limit): {', '.join(run['skipped'])}."]
        for name, why in (run.get("not_measured") or {}).items():
            lines += ["", f"`{name}` not measured under `{setting(run)}`: {why}."]
        lines += _compile_lines(run) + _partial_lines(run)
    lines += _environment_lines(gpu)
    lines += [
        "",
        "Paper (DeiT-Ti, their GPU): Full Wave about 2× time and 2× memory; Light Wave about 1.0× time, 1.1× memory.",
    ]
    ratios = folder / "ratios.json"
    if ratios.exists():
        results = json.loads(ratios.read_text())
        raw = results["raw"]
        lines += [
            "",
            f"The benchmark ratios on the same GPU (`python -m benchmarks.run --quick --device cuda`, "
            f"{raw['rounds']} rounds, {raw['wall_s']} s; CPU sizes, so small kernels and launch overhead dominate):",
            "",
            table(results),
        ]
    summary = folder / "train_summary.json"
    if summary.exists():
        s = json.loads(summary.read_text())
        lines += [
            "",
            f"Main job on CUDA (`odeformer-train experiment=digits_vit train.device=cuda`, bf16 autocast): "
            f"{s['solver']}, depth {s['depth']}, test {s['metric']} {100 * s['test']:.1f} % after {s['steps']} "
            f"steps in {s['wall_s']:.0f} s ({s['status']}).",
        ]
    extras = folder / "extras.json"
    if extras.exists():
        lines += _extras_lines(json.loads(extras.read_text()))
    return "\n".join(lines) + "\n"


def _setting_of(run: dict, figures: dict) -> str:
    """The compile column of one model's row: the run's setting, and for a CUDA-graph mode whose graphs the run found
    not recorded or not replayed, that it ran without them."""
    if figures.get("cuda_graphs_used") is False:
        return f"{setting(run)}, no CUDA graphs"
    return setting(run)


def _compile_lines(run: dict) -> list[str]:
    """Each compiled model's compile time (its first training step) and what became of its CUDA graphs."""
    parts = []
    for name in SOLVERS + ANCHORS:
        r = run.get(name) or {}
        if "compile_s" not in r:
            continue
        graphs = r.get("cuda_graphs") or {}
        if r.get("cuda_graphs_used"):
            use = (
                f"CUDA graphs recorded {graphs.get('recorded')}, replayed {graphs.get('replays_per_step', '?')} a step"
            )
        else:
            why = "; ".join(graphs.get("reasons") or []) or "none recorded"
            use = f"no CUDA graphs ({why})"
        parts.append(f"`{name}` {r['compile_s']:.1f} s, {use}")
    if not parts:
        return []
    where = f" ({run['compile_device']})" if run.get("compile_device") else ""
    return ["", f"Compile time under `{setting(run)}`{where}, the first training step: " + "; ".join(parts) + "."]


def _partial_lines(run: dict) -> list[str]:
    """The models whose figures a cut stage left without a throughput: what was measured of them."""
    partial = []
    for name in SOLVERS + ANCHORS:
        r = run.get(name)
        if isinstance(r, dict) and r and "train_images_per_s" not in r:
            numbers = {k: v for k, v in r.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
            known = ", ".join(f"{key} {value:.3g}" for key, value in numbers.items())
            partial.append(f"`{name}` ({known or 'nothing'})")
    if not partial:
        return []
    return ["", f"Measured in part under `{setting(run)}` (its stage was cut before timing): {'; '.join(partial)}."]


def _kernels(checked: dict) -> str:
    """``flash yes, efficient no (its first reason), ...`` for one model's q/k/v."""
    parts = []
    for kernel in ("flash", "efficient", "cudnn"):
        r = checked.get(kernel) or {}
        usable = r.get("usable")
        why = f" ({r['reasons'][0][:100]})" if not usable and r.get("reasons") else ""
        parts.append(f"{kernel} {'yes' if usable else 'no' if usable is not None else '?'}{why}")
    return ", ".join(parts)


def _environment_lines(gpu: dict) -> list[str]:
    """The environment, the fused attention kernels and the host syncs per step that ``benchmarks/gpu_run.py``
    records in ``gpu.json`` (nothing for runs recorded before it)."""
    env, lines = gpu.get("environment") or {}, []
    if env:
        lines += [
            "",
            f"Environment: {env.get('device')}, torch {env.get('torch')}, CUDA {env.get('cuda')}, cuDNN "
            f"{env.get('cudnn')}, compute capability {'.'.join(map(str, env.get('capability') or [])) or '–'}.",
        ]
        for name, checked in (env.get("attention") or {}).items():
            shape = "×".join(map(str, checked.get("shape", [])))
            lines.append(
                f"Fused attention on `{name}`'s own q/k/v ({shape}, {checked.get('dtype')}): {_kernels(checked)}."
            )
    syncs = {k: v for k, v in (gpu.get("syncs") or {}).items() if isinstance(v, dict) and "per_step" in v}
    if syncs:
        shown = ", ".join(f"`{name}` {r['per_step']:g}" for name, r in syncs.items())
        lines += [
            "",
            "Host syncs per eager training step (`torch.cuda.set_sync_debug_mode`: reads of results and copies from "
            f"pageable host memory): {shown}.",
        ]
    return lines


def _extras_lines(extras: dict) -> list[str]:
    """The training run on CUDA, the causal LM beside GPT-2 and the stages' statuses from ``extras.json``."""
    lines, train, lm = [], extras.get("train") or {}, extras.get("lm") or {}
    s = train.get("summary")
    if s:
        test = "–" if s.get("test") is None else f"{100 * s['test']:.1f} %"
        lines += [
            "",
            f"Main job on CUDA without Hydra (`experiment=digits_vit`'s model and training settings, data "
            f"{train.get('data')}, through the library's Trainer, bf16 autocast): {s['solver']}, test {s['metric']} "
            f"{test} after {s['steps']} steps in {s['wall_s']:.0f} s ({s['status']}); host syncs between logging "
            f"steps {train.get('syncs_between_logging_steps')}, in logging, evaluation and checkpoint steps "
            f"{train.get('syncs_in_logging_steps')}.",
        ]
    elif train.get("progress"):  # cut before it finished: its last logged step
        row, p = train["progress"]["logged"], train["progress"]
        lines += [
            "",
            f"Main job on CUDA without Hydra (`experiment=digits_vit`, data {train.get('data')}), cut before it "
            f"finished: loss {row.get('loss', float('nan')):.4f} at step {row.get('step')} of "
            f"{(train.get('settings') or {}).get('max_steps', '?')} ({row.get('time', float('nan')):.0f} s); host "
            f"syncs between logging steps {p.get('syncs_between_logging_steps')}, in logging, evaluation and "
            f"checkpoint steps {p.get('syncs_in_logging_steps')}.",
        ]
    if "train_tokens_per_s" in (lm.get("odeformer") or {}):
        shape = lm.get("shape", {})
        ours = lm["odeformer"]["train_tokens_per_s"]
        hf = (lm.get("hf_gpt2") or {}).get("train_tokens_per_s")
        beside = f"; Hugging Face's GPT-2 {hf:,.0f} tokens/s ({ours / hf:.2f}×)" if hf else ""
        why = (lm.get("not_measured") or {}).get("hf_gpt2")
        lines += [
            "",
            f"Causal LM of GPT-2-small's shape (depth {shape.get('depth')}, width {shape.get('dim')}, "
            f"{shape.get('heads')} heads, {shape.get('max_len')} tokens, vocabulary {shape.get('vocab_size')}, batch "
            f"{lm.get('batch')}, eager bf16 training): the diffusion CausalLM {ours:,.0f} tokens/s{beside}"
            f"{f' (GPT-2 not measured: {why})' if why else ''}.",
        ]
    unfinished = {k: v for k, v in (extras.get("stages") or {}).items() if not v.startswith("done")}
    if unfinished:
        lines += ["", "Stages not finished: " + "; ".join(f"{k} {v}" for k, v in unfinished.items()) + "."]
    return lines


def _model_names(text: str) -> tuple[str, ...]:
    known = models()
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown model(s) {', '.join(unknown) or '(none)'}; choose from {', '.join(known)}"
        )
    return names


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu", description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10, help="steps per timed block")
    parser.add_argument("--rounds", type=int, default=5, help="timed blocks per solver (they take turns)")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--compile", action="store_true", help="torch.compile every model alike (mode 'default')")
    parser.add_argument(
        "--compile-mode",
        choices=COMPILE_MODES,
        default=None,
        help="torch.compile every model alike in this mode ('reduce-overhead': CUDA graphs); implies --compile",
    )
    parser.add_argument(
        "--peak-tflops",
        type=float,
        default=H200_BF16_DENSE_TFLOPS,
        help="the chip's bf16 dense peak in TFLOP/s for the MFU column (default: H200 SXM, NVIDIA's 1,979 with "
        "sparsity, halved)",
    )
    parser.add_argument("--models", type=_model_names, default=None, help="comma-separated subset of the models")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory steps (one model at a time)")
    parser.add_argument(
        "--time-limit", type=float, default=None, help="seconds after which no further model is built and compiled"
    )
    parser.add_argument("--json", default=None)
    parser.add_argument("--render", type=Path, default=None, help="a folder written by benchmarks/gpu_check.sh")
    parser.add_argument("--results", type=Path, default=None, help="with --render: rewrite this markdown's GPU block")
    args = parser.parse_args(argv)
    if args.render is not None:
        from odeformer.app.reporting.results import write_results

        if not (args.render / "gpu.json").is_file():
            parser.exit(
                2,
                f"python -m benchmarks.gpu: {args.render / 'gpu.json'} does not exist; --render takes the folder that "
                "`bash benchmarks/gpu_check.sh OUT` wrote on a GPU machine.\n",
            )
        text = render(args.render)
        print(text)
        if args.results:
            write_results(text, args.results, BEGIN, END)
        return
    if args.peak_tflops <= 0:
        parser.error(f"--peak-tflops must be positive, got {args.peak_tflops}")
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks.gpu needs a CUDA device.")
    torch.backends.cuda.matmul.allow_tf32 = True
    mode = args.compile_mode or ("default" if args.compile else None)
    results = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "commit": os.environ.get("ODEFORMER_COMMIT") or None,
        "batch": args.batch,
        "steps": args.steps,
        "rounds": args.rounds,
        "compile": mode is not None,
        "compile_mode": mode,
        "peak_tflops": args.peak_tflops,
        "flops_formula": FLOPS_FORMULA,
        "sizes": DEIT_TI,
        "optimizer": "fused AdamW",
    }
    names = args.models or models()
    if "hf_vit" not in models():
        print("transformers is not installed: no Hugging Face anchor (pip install transformers)")
    memory = {} if args.no_memory else {name: peak_memory(name, args.batch, mode) for name in names}
    speed, results["skipped"] = throughput(args.batch, args.steps, args.rounds, mode, names, args.time_limit)
    print(f"{'model':<12} {'train img/s':>12} {'train GiB':>10} {'infer img/s':>12} {'infer GiB':>10} {'MFU':>7}")
    for name in speed:
        flops = step_flops(name, args.batch)["train"]
        r = results[name] = {**speed[name], **memory.get(name, {}), "train_flops_per_step": flops}
        r["train_tflops_per_s"] = r["train_images_per_s"] / args.batch * flops / 1e12
        r["mfu"] = mfu(r["train_images_per_s"], flops, args.batch, args.peak_tflops)
        print(
            f"{name:<12} {r['train_images_per_s']:>12.0f} {r.get('train_peak_gib', float('nan')):>10.2f} "
            f"{r['inference_images_per_s']:>12.0f} {r.get('inference_peak_gib', float('nan')):>10.2f} "
            f"{100 * r['mfu']:>6.2f}%"
        )
    print(f"compile: {mode or 'eager'}; MFU over {args.peak_tflops:g} TFLOP/s bf16 dense; {FLOPS_FORMULA}")
    if results["skipped"]:
        print(f"not compiled within --time-limit {args.time_limit:g} s: {', '.join(results['skipped'])}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
