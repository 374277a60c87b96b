"""Every GPU number in one command, stage by stage, for a machine lent for minutes: ``benchmarks/gpu_check.sh``.

Needs only torch with CUDA (Hugging Face's ``transformers`` where installed; scikit-learn for the digits of the
training run, else a synthetic image task of the same size): no Hydra, OmegaConf, antlr4, torchode or torchtyping,
and the project read from this folder on ``PYTHONPATH`` (no install, no ``.git``). The stages, in order of value:

1. ``environment``: the device, torch, CUDA, and which fused attention kernels
   (``torch.backends.cuda.can_use_*_attention(params, debug=True)``, with the reasons a kernel is refused) take the
   models' own queries, keys and values: the DeiT-Ti ViT's and the GPT-2-small causal LM's, in bf16.
2. ``eager``: DeiT-Ti bf16 training (and inference) throughput, peak memory and MFU of diffusion, Full Wave, Light
   Wave, Hugging Face's ViT (only with ``transformers``; else the reason is recorded) and an ``nn.TransformerEncoder``
   ViT, side by side (:mod:`benchmarks.gpu`).
3. ``syncs``: host syncs per training step of each of those models (``torch.cuda.set_sync_debug_mode``: the reads
   and the host-to-device copies from pageable memory the host waits for).
4. ``compiled:<model>``: one process per model, most valuable first (diffusion, Hugging Face's ViT, Full Wave, the
   ``nn.TransformerEncoder`` ViT), each under its own time limit: the training step under
   ``torch.compile(mode="reduce-overhead")``, its compile time (the first step's), whether CUDA graphs were really
   recorded and replayed (inductor skips them for a graph it cannot capture, and says why), throughput and peak
   memory.
5. ``train``: the main job (``experiment=digits_vit``: its model and training settings read from ``configs/``) on
   CUDA through :class:`~odeformer.app.run.trainer.Trainer` without Hydra, with its host syncs counted.
6. ``lm``: a causal LM of GPT-2-small's shape (12 layers, width 768, 12 heads, 1,024 tokens, GPT-2's vocabulary),
   training tokens/s beside Hugging Face's GPT-2 of the same shape.

Each stage runs in its own process under a time limit drawn from one budget (``--budget``, 450 s by default), and
what it measured is merged into the results as soon as it ends. A stage writes each model's figures as soon as they
are measured (its memory, its warm-up or compile time, its throughput over the timed blocks so far; the training
run's last logged step), so one cut at its limit keeps what it measured. OUT receives four files: ``gpu.json`` (the
environment, the eager run, the syncs), ``gpu_reduce-overhead.json`` (the compiled run), ``extras.json`` (the
training run, the language models, each stage's status) and ``gpu_check.log``. ``--rehearse`` runs every stage at
tiny sizes on the CPU, from a copy of the tracked files without ``.git``, with hydra, omegaconf, antlr4, torchode and
torchtyping unimportable and their distributions' metadata hidden (as on the lent machine; every other package,
``transformers``, scikit-learn, torchdiffeq and matplotlib among them, imports as installed), each compiled stage's
model compiled by inductor on the CPU (Dynamo, AOTAutograd and inductor's lowering run there as on the GPU, so a
graph that fails to lower fails here; the CPU has no CUDA graphs, which its rows say); it writes the same files.

    python -m benchmarks.gpu_run OUT [--commit ID] [--budget 450] [--rehearse]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.abc
import importlib.machinery
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ABSENT = ("hydra", "omegaconf", "antlr4", "torchode", "torchtyping")
"""What the lent machine's image lacks (its torch has CUDA; ``transformers``, scikit-learn, torchdiffeq and matplotlib
are there): the rehearsal makes these unimportable."""
EAGER_MODELS = ("diffusion", "full_wave", "light_wave", "hf_vit", "torch_vit")
COMPILED_MODELS = ("diffusion", "hf_vit", "full_wave", "torch_vit")
"""Compiled in this order, the most valuable first: the plain transformer, the anchor the goal names, the scheme."""
STAGE_LIMITS = {"environment": 60, "eager": 120, "syncs": 45, "compiled": 80, "train": 75, "lm": 60}
"""Each stage's own limit in seconds (``compiled`` per model); a stage gets less when the budget has less left."""
RESERVE_S = 5.0  # kept back from the budget: merging and writing the results
GPT2_SMALL = dict(vocab_size=50257, max_len=1024, depth=12, dim=768, heads=12)
TINY_VIT = dict(image_size=16, patch_size=4, in_chans=3, num_classes=10, depth=2, dim=16, heads=2)
TINY_LM = dict(vocab_size=50, max_len=16, depth=2, dim=16, heads=2)
RUN_KEYS = ("batch", "steps", "rounds", "compile", "compile_mode", "peak_tflops", "sizes", "flops_formula", "optimizer")
"""What a run of :mod:`benchmarks.gpu` records besides its models (what its renderer reads)."""
FILES = ("gpu.json", "gpu_reduce-overhead.json", "extras.json", "gpu_check.log")


def provides(distribution) -> set[str]:
    """The top-level modules an installed distribution puts on the path (its ``top_level.txt``, else its files)."""
    listed = distribution.read_text("top_level.txt")
    if listed:
        return set(listed.split())
    tops = {Path(str(f)).parts[0] for f in distribution.files or ()}
    return {Path(top).stem for top in tops if not top.endswith((".dist-info", ".egg-info", ".data")) and top != ".."}


class Unavailable(importlib.abc.MetaPathFinder):
    """The path finder with ``names`` (top-level packages) not on the path, as on a machine without them: importing
    one is a ModuleNotFoundError, ``importlib.util.find_spec`` says None, and ``importlib.metadata`` finds no
    distribution that provides one; every other module and distribution is found as the path finder finds it."""

    def __init__(self, names):
        self.names = set(names)

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in self.names:
            return None
        return importlib.machinery.PathFinder.find_spec(fullname, path, target)

    def find_distributions(self, *args, **kwargs):
        found = importlib.machinery.PathFinder.find_distributions(*args, **kwargs)
        return (d for d in found if not self.names & provides(d))

    def invalidate_caches(self):
        importlib.machinery.PathFinder.invalidate_caches()


def as_on_the_image() -> None:
    """Imports as the lent machine has them: no :data:`ABSENT` package, and no editable install's finder (the copy on
    ``PYTHONPATH`` is the only project there is)."""
    kept = [f for f in sys.meta_path if "editable" not in getattr(f, "__module__", type(f).__module__).lower()]
    sys.meta_path[:] = [Unavailable(ABSENT) if f is importlib.machinery.PathFinder else f for f in kept]
    for name in list(sys.modules):
        if name.split(".")[0] in ABSENT:
            del sys.modules[name]


# -- the stages (each in its own process) -----------------------------------------------------------------------------


class Stage:
    """What a stage process knows: the device, the sizes, where it writes (after every measurement)."""

    def __init__(self, path: Path, rehearse: bool):
        import torch

        self.path, self.rehearse = path, rehearse
        self.device = "cpu" if rehearse else "cuda"
        self.sizes = TINY_VIT if rehearse else None
        self.batch = 4 if rehearse else 128
        self.steps, self.rounds = (2, 2) if rehearse else (10, 5)
        self.result: dict = {}
        if not rehearse:
            torch.backends.cuda.matmul.allow_tf32 = True

    def save(self, **values) -> None:
        self.result.update(values)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.result, indent=2, default=str))
        tmp.replace(self.path)

    def autocast(self):
        import torch

        return torch.autocast(self.device, dtype=torch.bfloat16)

    def sync(self):
        import torch

        if self.device == "cuda":
            torch.cuda.synchronize()

    def peak_reset(self):
        import torch

        if self.device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()

    def peak_gib(self):
        import torch

        return torch.cuda.max_memory_allocated() / 2**30 if self.device == "cuda" else None


def _transformers() -> str | None:
    """Why Hugging Face's models are not measured here, or None when they are."""
    try:
        import transformers  # noqa: F401
    except ImportError as error:
        return f"transformers is not importable here ({error})"
    return None


def _fused_kernels(q, k, v, causal: bool) -> dict:
    """For each fused SDPA kernel: whether it takes these inputs, and the reasons it gives when not."""
    import torch

    params = torch.backends.cuda.SDPAParams(q, k, v, None, 0.0, causal, False)
    out = {"shape": list(q.shape), "dtype": str(q.dtype), "causal": causal}
    for kernel in ("flash", "efficient", "cudnn"):
        check = getattr(torch.backends.cuda, f"can_use_{kernel}_attention", None)
        if check is None:
            out[kernel] = {"usable": None, "reasons": ["this torch has no such check"]}
            continue
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            usable = bool(check(params, debug=True))
        out[kernel] = {"usable": usable, "reasons": [str(w.message).strip() for w in caught][:6]}
    return out


def _captured_qkv(model, inputs, stage: Stage):
    """The queries, keys and values the model's first attention field computes on ``inputs`` (bf16 autocast)."""
    import torch

    from odeformer.fields import AttentionField

    field = next(m for m in model.modules() if isinstance(m, AttentionField))
    seen = []
    qkv = field._qkv
    field._qkv = lambda x: seen.append(qkv(x)) or seen[-1]  # what the field computes, as it computes it
    try:
        with torch.no_grad(), stage.autocast():
            model(inputs)
    finally:
        del field._qkv
    return seen[0], field.mask == "causal"


def _vit_inputs(stage: Stage):
    import torch

    from benchmarks.gpu import DEIT_TI

    s = {**DEIT_TI, **(stage.sizes or {})}
    images = torch.randn(stage.batch, s["in_chans"], s["image_size"], s["image_size"], device=stage.device)
    return images, torch.randint(0, s["num_classes"], (stage.batch,), device=stage.device)


def stage_environment(stage: Stage) -> None:
    import torch

    cuda = torch.cuda.is_available()
    stage.save(
        device=torch.cuda.get_device_name() if cuda else "cpu (rehearsal)",
        torch=torch.__version__,
        cuda=torch.version.cuda,
        cudnn=torch.backends.cudnn.version() if cuda else None,
        capability=list(torch.cuda.get_device_capability()) if cuda else None,
        python=sys.version.split()[0],
        hf_skipped=_transformers(),
    )
    from benchmarks.gpu import build

    vit = build("diffusion", stage.sizes).to(stage.device)
    (q, k, v), causal = _captured_qkv(vit, _vit_inputs(stage)[0], stage)
    stage.save(attention={"vit": _fused_kernels(q, k, v, causal)})
    lm = _causal_lm(stage).to(stage.device)
    (q, k, v), causal = _captured_qkv(lm, _tokens(stage, lm), stage)
    stage.save(attention={**stage.result["attention"], "causal_lm": _fused_kernels(q, k, v, causal)})


def _names(candidates, stage: Stage) -> tuple[list[str], dict]:
    reason = _transformers()
    names = [n for n in candidates if n != "hf_vit" or reason is None]
    return names, ({"hf_vit": reason} if reason and "hf_vit" in candidates else {})


def stage_eager(stage: Stage) -> None:
    from benchmarks.gpu import DEIT_TI, FLOPS_FORMULA, H200_BF16_DENSE_TFLOPS, peak_memory, throughput

    names, skipped = _names(EAGER_MODELS, stage)
    stage.save(
        batch=stage.batch,
        steps=stage.steps,
        rounds=stage.rounds,
        compile=False,
        compile_mode=None,
        optimizer="fused AdamW",
        peak_tflops=H200_BF16_DENSE_TFLOPS,
        flops_formula=FLOPS_FORMULA,
        sizes={**DEIT_TI, **(stage.sizes or {})},
        not_measured=skipped,
    )
    for name in names:  # each model's memory kept as soon as it is measured
        stage.save(**{name: peak_memory(name, stage.batch, device=stage.device, sizes=stage.sizes)})

    def record(name: str, figures: dict) -> None:  # its warm-up, then its throughput after every timed block
        stage.save(**{name: _with_flops(stage, name, {**stage.result[name], **figures})})

    args = (stage.batch, stage.steps, stage.rounds, None, tuple(names), None, stage.device, stage.sizes, record)
    throughput(*args)


def _with_flops(stage: Stage, name: str, figures: dict) -> dict:
    """A model's figures with its FLOPs per training step, and with the TFLOP/s and MFU of its training throughput
    once that is measured."""
    from benchmarks.gpu import H200_BF16_DENSE_TFLOPS, mfu, step_flops

    flops = step_flops(name, stage.batch, stage.sizes)["train"]
    out = {**figures, "train_flops_per_step": flops}
    if "train_images_per_s" in out:
        out["train_tflops_per_s"] = out["train_images_per_s"] / stage.batch * flops / 1e12
        out["mfu"] = mfu(out["train_images_per_s"], flops, stage.batch, H200_BF16_DENSE_TFLOPS)
    return out


def _is_sync(entry) -> bool:
    return not isinstance(entry, warnings.WarningMessage) or "synchroniz" in str(entry.message).lower()


def _sync_name(entry) -> str:
    return str(entry.message).splitlines()[0][:120] if isinstance(entry, warnings.WarningMessage) else entry


@contextlib.contextmanager
def counted_syncs(device: str):
    """A list that fills with the host syncs meanwhile, as they happen (filter it with :func:`_is_sync`): on CUDA the
    warnings ``torch.cuda.set_sync_debug_mode`` gives (a read of a result, a copy from pageable host memory); on the
    CPU (the rehearsal) the calls that would make the host wait on a GPU: the reads (``.item()`` and its kin,
    ``tolist``, nonzero, unique, sparse coalescing), a tensor made from Python data on the step's device
    (``torch.tensor``, ``new_tensor``, ``as_tensor``: on a GPU a copy from pageable host memory) and a ``.to`` or
    ``copy_`` from an unpinned CPU tensor to another device. A fill (``torch.full_like``) or a Python number as an
    operand copies nothing, and is not counted."""
    import torch

    if device == "cuda":
        torch.cuda.synchronize()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                yield caught
            finally:
                torch.cuda.set_sync_debug_mode(0)
        return
    from torch.overrides import TorchFunctionMode

    syncing = {  # what reads a tensor on the host (and so syncs on a GPU), as Python calls it
        "item", "tolist", "numpy", "__bool__", "__float__", "__int__", "__index__", "nonzero", "masked_select",
        "unique", "unique_consecutive", "coalesce", "equal",
    }  # fmt: skip
    made = {"tensor", "new_tensor", "as_tensor", "asarray"}  # a tensor from Python data: a copy where it lands
    found: list = []

    def pageable(tensor) -> bool:
        return isinstance(tensor, torch.Tensor) and tensor.device.type == "cpu" and not tensor.is_pinned()

    class Count(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            name = getattr(func, "__name__", "")
            out = func(*args, **(kwargs or {}))
            if name in syncing or (name in made and isinstance(out, torch.Tensor) and out.device.type == device):
                found.append(name)
            elif name in ("to", "cuda") and pageable(args[0]) and isinstance(out, torch.Tensor):
                if out.device.type != "cpu":
                    found.append(name)
            elif name == "copy_" and len(args) > 1 and pageable(args[1]) and args[0].device.type != "cpu":
                found.append(name)
            return out

    with Count():
        yield found


def stage_syncs(stage: Stage) -> None:
    from benchmarks.gpu import _model, _steps

    names, skipped = _names(EAGER_MODELS, stage)
    stage.save(steps=3, not_measured=skipped)
    for name in names:
        train = _steps(
            _model(name, device=stage.device, sizes=stage.sizes), stage.batch, device=stage.device, sizes=stage.sizes
        )["train"]
        for _ in range(2):
            train()
        with counted_syncs(stage.device) as found:
            for _ in range(3):
                train()
        syncs = [_sync_name(e) for e in found if _is_sync(e)]
        stage.save(**{name: {"per_step": len(syncs) / 3, "first": sorted(set(syncs))[:3]}})


GRAPH_LOG = "torch._inductor.cudagraph_utils.__cudagraphs"
"""The logger by which inductor says why it skips CUDA graphs for a graph."""


class GraphUse:
    """While entered, counts the CUDA graphs recorded (``torch.cuda.CUDAGraph.capture_begin``) and replayed, and keeps
    the first reasons inductor logs for skipping CUDA graphs: whether ``mode="reduce-overhead"`` really ran them."""

    def __init__(self):
        self.recorded = self.replayed = 0
        self.reasons: list[str] = []

    def counts(self) -> dict:
        return {"recorded": self.recorded, "replayed": self.replayed, "reasons": self.reasons[:3]}

    def used(self) -> bool:
        """Some CUDA graphs were recorded and replayed."""
        return self.recorded > 0 and self.replayed > 0

    def __enter__(self):
        import logging

        import torch

        graph, use = torch.cuda.CUDAGraph, self
        self._graph, self._original = graph, (graph.capture_begin, graph.replay)
        capture, replay = self._original

        def capturing(self, *args, **kwargs):
            use.recorded += 1
            return capture(self, *args, **kwargs)

        def replaying(self, *args, **kwargs):
            use.replayed += 1
            return replay(self, *args, **kwargs)

        class Reasons(logging.Handler):
            def emit(self, record):
                use.reasons.append(record.getMessage().splitlines()[0][:200])

        self._handler, log = Reasons(logging.WARNING), logging.getLogger(GRAPH_LOG)
        self._log_state = log.disabled, log.level  # a logging config may have disabled it (Hydra's "disabled" does)
        log.disabled = False
        if log.getEffectiveLevel() > logging.WARNING:
            log.setLevel(logging.WARNING)
        graph.capture_begin, graph.replay = capturing, replaying
        log.addHandler(self._handler)
        return self

    def __exit__(self, *exc):
        import logging

        self._graph.capture_begin, self._graph.replay = self._original
        log = logging.getLogger(GRAPH_LOG)
        log.removeHandler(self._handler)
        log.disabled, level = self._log_state
        log.setLevel(level)


def stage_compiled(stage: Stage, name: str) -> None:
    """The training step of ``name`` under ``torch.compile(mode="reduce-overhead")``: its compile time (the first
    step's) and whether CUDA graphs ran written as soon as it has compiled, its throughput after every timed block."""
    import torch

    from benchmarks.gpu import DEIT_TI, FLOPS_FORMULA, H200_BF16_DENSE_TFLOPS, _model, _steps
    from benchmarks.timing import interleaved

    mode = "reduce-overhead"
    stage.save(
        batch=stage.batch,
        steps=stage.steps,
        rounds=stage.rounds,
        compile=True,
        compile_mode=mode,
        compile_backend="inductor",
        compile_device=stage.device,
        peak_tflops=H200_BF16_DENSE_TFLOPS,
        flops_formula=FLOPS_FORMULA,
        sizes={**DEIT_TI, **(stage.sizes or {})},
    )
    if name == "hf_vit" and _transformers():
        stage.save(not_measured={name: _transformers()})
        return
    model = torch.compile(_model(name, None, stage.device, stage.sizes), mode=mode)
    train = _steps(model, stage.batch, mode, stage.device, stage.sizes)["train"]
    with GraphUse() as graphs:

        def save(**figures):
            figures |= {"cuda_graphs": graphs.counts(), "cuda_graphs_used": graphs.used()}
            stage.save(**{name: _with_flops(stage, name, {**stage.result.get(name, {}), **figures})})

        begin = time.perf_counter()
        train()  # compiles the forward and backward graphs (and runs the CUDA graphs' first warm-up)
        stage.sync()
        save(compile_s=time.perf_counter() - begin)
        for _ in range(2):  # records, then replays the CUDA graphs
            train()
        stage.sync()
        save(warmup_s=time.perf_counter() - begin)
        stage.peak_reset()
        train()
        save(train_peak_gib=stage.peak_gib())
        replayed = graphs.replayed

        def measured(seconds: dict) -> None:
            rounds = stage.result[name].get("train_rounds", 0) + 1
            save(train_images_per_s=stage.batch / seconds[name], train_rounds=rounds)

        timing = dict(warmup=1, device=stage.device, repeats=stage.steps, after_round=measured)
        interleaved({name: train}, stage.rounds, **timing)
        save(replays_per_step=(graphs.replayed - replayed) / ((1 + stage.rounds) * stage.steps))


def _flat_yaml(path: Path) -> dict:
    """The ``key: value`` pairs of a small YAML file, one level of nesting (``model:`` then indented pairs); lists and
    comments are skipped, values read as JSON where they parse (numbers, booleans), else as text."""
    out: dict = {}
    group = None
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip() or line.strip().startswith("-"):
            continue
        key, _, value = line.strip().partition(":")
        value = value.strip()
        target = out.setdefault(group, {}) if raw.startswith((" ", "\t")) and group else out
        if not raw.startswith((" ", "\t")):
            group = key if not value else None
        if value:
            try:
                target[key] = json.loads(value)
            except json.JSONDecodeError:
                target[key] = value
    return out


def _split_syncs(found: list, spans: list[tuple[int, int]]) -> dict:
    """The host syncs in ``found``, split by whether they fell in one of ``spans`` (logging, evaluation, checkpoint)."""
    inside = {i for start, end in spans for i in range(start, end)}
    syncs = [(i in inside, _sync_name(e)) for i, e in enumerate(found) if _is_sync(e)]
    return {
        "syncs_in_logging_steps": sum(1 for kept, _ in syncs if kept),
        "syncs_between_logging_steps": sum(1 for kept, _ in syncs if not kept),
        "syncs_between_first": sorted({name for kept, name in syncs if not kept})[:5],
    }


def stage_train(stage: Stage) -> None:
    """``odeformer-train experiment=digits_vit train.device=cuda`` without Hydra: the experiment's model and training
    settings from ``configs/``, the loop of :class:`Trainer`, its host syncs counted; at every logging step the row
    logged and the syncs so far are written (``progress``), so a run cut at its limit keeps them."""
    import torch

    import odeformer
    from odeformer.app.run.trainer import LoopConfig, Trainer
    from odeformer.data import load

    experiment = _flat_yaml(ROOT / "configs" / "experiment" / "digits_vit.yaml")
    settings = _flat_yaml(ROOT / "configs" / "train" / "digits_vit.yaml")
    solver = next(
        line.split(":")[-1].strip()
        for line in (ROOT / "configs" / "experiment" / "digits_vit.yaml").read_text().splitlines()
        if "override /solver" in line
    )
    try:
        data, source = load("digits"), "digits"
    except ImportError as error:  # scikit-learn's digits: a synthetic image task of their size instead
        data, source = load("synthetic", task="image", n=1797, image_size=8), f"synthetic (digits need {error.name})"
    if stage.rehearse:
        settings |= {"max_steps": 4, "eval_every": 2, "eval_batches": 1, "warmup_steps": 1}
    stage.save(data=source, solver=solver, model=experiment.get("model"), settings=settings)
    m = data.meta
    torch.manual_seed(0)
    model = odeformer.ViT(
        image_size=m["image_size"],
        in_chans=m["in_chans"],
        num_classes=m["num_classes"],
        solver=solver,
        **experiment.get("model", {}),
    )
    loop = LoopConfig(**settings, device=stage.device, progress=False, batch_size=64, log_every=10)
    out = Path(tempfile.mkdtemp())
    record = {"solver": solver, "model": "vit", "data": source}
    trainer = Trainer(model, data, loop, out, record)  # its start-up is not counted: only the run
    with counted_syncs(stage.device) as found:
        spans = []  # the stretches of ``found`` made in logging, evaluation and checkpoint steps
        for method in ("_read_loss", "_check_loss", "_log", "_checkpoint_and_evaluate", "_save_last", "_finish"):
            original = getattr(Trainer, method)

            def spanned(self, *args, _original=original, _method=method, **kwargs):
                start = len(found)
                try:
                    return _original(self, *args, **kwargs)
                finally:
                    spans.append((start, len(found)))
                    if _method == "_log" and args and "loss" in args[0]:
                        stage.save(progress={"logged": args[0], **_split_syncs(found, spans)})

            setattr(Trainer, method, spanned)
        summary = trainer.fit()
    stage.save(summary=summary, steps=summary["steps"], log_every=loop.log_every, **_split_syncs(found, spans))
    shutil.rmtree(out, ignore_errors=True)


def _causal_lm(stage: Stage):
    import torch

    import odeformer

    s = TINY_LM if stage.rehearse else GPT2_SMALL
    torch.manual_seed(0)
    return odeformer.CausalLM(
        s["vocab_size"], s["max_len"], depth=s["depth"], dim=s["dim"], heads=s["heads"], solver="diffusion", dt=1.0
    )


def _hf_gpt2(stage: Stage):
    from transformers import GPT2Config, GPT2LMHeadModel

    s = TINY_LM if stage.rehearse else GPT2_SMALL
    config = GPT2Config(
        vocab_size=s["vocab_size"],
        n_positions=s["max_len"],
        n_embd=s["dim"],
        n_layer=s["depth"],
        n_head=s["heads"],
        attn_implementation="sdpa",
    )
    return GPT2LMHeadModel(config)


def _tokens(stage: Stage, model):
    import torch

    batch = 2 if stage.rehearse else 8
    return torch.randint(
        0, model.vocab_size if hasattr(model, "vocab_size") else 2, (batch, model.max_len), device=stage.device
    )


def stage_lm(stage: Stage) -> None:
    import torch
    import torch.nn.functional as F

    from benchmarks.timing import interleaved

    s = TINY_LM if stage.rehearse else GPT2_SMALL
    batch = 2 if stage.rehearse else 8
    models = {"odeformer": _causal_lm(stage)}
    reason = _transformers()
    if reason is None:
        models["hf_gpt2"] = _hf_gpt2(stage)
    stage.save(shape=s, batch=batch, not_measured={"hf_gpt2": reason} if reason else {})
    tokens = torch.randint(0, s["vocab_size"], (batch, s["max_len"]), device=stage.device)
    steps = {}
    for name, model in models.items():
        model = model.to(stage.device)
        optimiser = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)

        def train(model=model, optimiser=optimiser, hf=name == "hf_gpt2"):
            with stage.autocast():
                logits = model(tokens).logits if hf else model(tokens)
                loss = F.cross_entropy(logits[:, :-1].float().flatten(0, 1), tokens[:, 1:].flatten())
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            optimiser.step()

        steps[name] = train
        params = sum(p.numel() for p in model.parameters())
        stage.save(**{name: {"params": params}})

    def measured(seconds: dict) -> None:  # after every timed block: tokens/s over the blocks so far
        for name in steps:
            rounds = stage.result[name].get("train_rounds", 0) + 1
            tokens_per_s = batch * s["max_len"] / seconds[name]
            stage.save(**{name: {**stage.result[name], "train_tokens_per_s": tokens_per_s, "train_rounds": rounds}})

    interleaved(steps, stage.rounds, warmup=1, device=stage.device, repeats=stage.steps, after_round=measured)


STAGES = {
    "environment": stage_environment,
    "eager": stage_eager,
    "syncs": stage_syncs,
    "train": stage_train,
    "lm": stage_lm,
}


def run_stage(name: str, path: Path, rehearse: bool) -> None:
    stage = Stage(path, rehearse)
    try:
        if name.startswith("compiled:"):
            stage_compiled(stage, name.split(":", 1)[1])
        else:
            STAGES[name](stage)
    except Exception:  # what it measured stays written; the failure is one line in the results and the log
        stage.save(error=traceback.format_exc(limit=3).strip().splitlines()[-1])
        traceback.print_exc()
        raise SystemExit(1) from None


# -- the driver -------------------------------------------------------------------------------------------------------


def _merge(out: Path, parts: Path, commit: str, statuses: dict) -> None:
    """Write the four result files from the stages' parts (written again after every stage)."""

    def part(name):
        path = parts / f"{name}.json"
        return json.loads(path.read_text()) if path.exists() else {}

    env, eager, syncs = part("environment"), part("eager"), part("syncs")
    gpu = {
        "gpu": env.get("device", "unknown"),
        "torch": env.get("torch", "unknown"),
        "commit": commit,
        **{k: eager[k] for k in RUN_KEYS if k in eager},
        "environment": env,
        "syncs": syncs,
        **{name: eager[name] for name in EAGER_MODELS if name in eager},
        "not_measured": eager.get("not_measured", {}),
    }
    (out / "gpu.json").write_text(json.dumps(gpu, indent=2, default=str))
    compiled = {"gpu": gpu["gpu"], "torch": gpu["torch"], "commit": commit, "skipped": [], "not_measured": {}}
    for name in COMPILED_MODELS:
        p = part(f"compiled:{name}")
        compiled.update({k: v for k, v in p.items() if k not in COMPILED_MODELS and k != "not_measured"})
        compiled["not_measured"].update(p.get("not_measured", {}))
        if name in p:
            compiled[name] = p[name]
        elif name not in compiled["not_measured"]:
            compiled["skipped"].append(name)
    compiled.pop("error", None)
    if any(name in compiled for name in COMPILED_MODELS):
        (out / "gpu_reduce-overhead.json").write_text(json.dumps(compiled, indent=2, default=str))
    extras = {"commit": commit, "train": part("train"), "lm": part("lm"), "stages": statuses}
    (out / "extras.json").write_text(json.dumps(extras, indent=2, default=str))


REHEARSAL_SLACK = 20
"""A rehearsal's limits are this many times the GPU run's: on a busy CPU a tiny stage can take longer than a real one
on the GPU, and a rehearsal must not fail for the machine's load (the limits themselves are tested on their own)."""


def drive(out: Path, commit: str, budget: float, rehearse: bool, python: str = sys.executable) -> int:
    """Run every stage in turn within ``budget`` seconds; return 0 when all finished, 1 otherwise."""
    started = time.perf_counter()
    scale = REHEARSAL_SLACK if rehearse else 1  # a rehearsal checks the stages and files, not the CPU's speed
    budget *= scale
    out.mkdir(parents=True, exist_ok=True)
    parts = Path(tempfile.mkdtemp(prefix="gpu_parts_"))
    statuses: dict[str, str] = {}
    names = ["environment", "eager", "syncs", *(f"compiled:{m}" for m in COMPILED_MODELS), "train", "lm"]
    env = {
        **os.environ,
        "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}".rstrip(os.pathsep),
        "PYTHONUNBUFFERED": "1",
        "ODEFORMER_COMMIT": commit,
    }
    with open(out / "gpu_check.log", "a") as log:
        log.write(f"commit {commit}; budget {budget:g} s; {'rehearsal on the CPU' if rehearse else 'CUDA'}\n")
        for name in names:
            left = budget - RESERVE_S - (time.perf_counter() - started)
            limit = min(STAGE_LIMITS[name.split(":")[0]] * scale, left)
            if limit < 5:
                statuses[name] = "not started: the budget was spent"
                continue
            command = [python, "-m", "benchmarks.gpu_run", "--stage", name, "--part", str(parts / f"{name}.json")]
            begin = time.perf_counter()
            log.write(f"== {name} (limit {limit:.0f} s)\n")
            log.flush()
            try:
                done = subprocess.run(
                    command + (["--rehearse"] if rehearse else []),
                    cwd=ROOT,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    timeout=limit,
                )
                status = "done" if done.returncode == 0 else f"failed (exit {done.returncode})"
            except subprocess.TimeoutExpired:
                status = f"over its {limit:.0f} s"
            statuses[name] = f"{status} in {time.perf_counter() - begin:.1f} s"
            log.write(f"== {name}: {statuses[name]}\n")
            log.flush()
            _merge(out, parts, commit, statuses)
        _merge(out, parts, commit, statuses)
        log.write(f"all stages in {time.perf_counter() - started:.1f} s\n")
    shutil.rmtree(parts, ignore_errors=True)
    return 0 if all(s.startswith("done") for s in statuses.values()) else 1


def tracked_copy(destination: Path) -> Path:
    """The project's files (``git ls-files``: tracked, and new ones git does not ignore; every file but ``.git`` and
    virtual environments where there is no git), copied to ``destination`` without ``.git``: the tree as it travels
    to a lent machine."""
    command = ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    listed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if listed.returncode == 0:
        files = [Path(f) for f in listed.stdout.split("\0") if f]
    else:
        skip = {".git", ".venv", "__pycache__", ".pytest_cache"}
        files = [p.relative_to(ROOT) for p in ROOT.rglob("*") if p.is_file() and not skip & set(p.parts)]
    for name in files:
        if (ROOT / name).is_file() and name.suffix != ".pt":
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, destination / name)
    return destination


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_run", description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, help="the folder the results go into")
    parser.add_argument("--commit", default=os.environ.get("ODEFORMER_COMMIT") or "unknown")
    parser.add_argument("--budget", type=float, default=450.0, help="seconds for all the stages together")
    parser.add_argument("--rehearse", action="store_true", help="every stage at tiny sizes on the CPU")
    parser.add_argument("--stage", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--part", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--in-copy", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rehearse and (args.stage or args.in_copy):
        as_on_the_image()
    if args.stage:
        run_stage(args.stage, args.part, args.rehearse)
        return
    if args.out is None:
        parser.error("name the folder the results go into: python -m benchmarks.gpu_run OUT")
    if args.budget <= 0:
        parser.error(f"--budget must be positive, got {args.budget:g}")
    out = args.out.resolve()
    if args.rehearse and not args.in_copy:  # again, from a copy of the tree without .git, as it travels
        with tempfile.TemporaryDirectory(prefix="odeformer_copy_") as copy:
            tracked_copy(Path(copy))
            command = [
                sys.executable,
                "-m",
                "benchmarks.gpu_run",
                str(out),
                "--commit",
                args.commit,
                "--budget",
                str(args.budget),
                "--rehearse",
                "--in-copy",
            ]
            env = {**os.environ, "PYTHONPATH": copy}
            raise SystemExit(subprocess.run(command, cwd=copy, env=env).returncode)
    if args.rehearse:
        import odeformer

        where = Path(odeformer.__file__).resolve()
        if ROOT not in where.parents:
            raise SystemExit(f"the rehearsal imported odeformer from {where}, not from the copy {ROOT}")
    else:
        import torch

        if not torch.cuda.is_available():
            raise SystemExit("benchmarks.gpu_run: no CUDA device here; run it on a GPU machine, or --rehearse")
    raise SystemExit(drive(out, args.commit, args.budget, args.rehearse))


if __name__ == "__main__":
    main()
