"""The training loop, independent of Hydra: AdamW, warm-up then cosine, clipping, evaluation, checkpoints, resume.

Every run directory holds ``metrics.jsonl`` (one JSON object per logged step), ``last.pt`` and ``best.pt`` (written
atomically: a temporary file, then a rename), ``curves.png`` and ``summary.json``. A resumed run (``train.resume``)
restores the model, optimiser, scheduler, data order and RNG states, so on CPU it reaches bit-identical parameters to
an uninterrupted run of the same length. SIGTERM or Ctrl-C saves a checkpoint and stops cleanly; a non-finite loss
stops the run, names the step, and keeps the last good checkpoint. Under ``torchrun`` the model is wrapped in
DistributedDataParallel (gloo on CPU, nccl on GPU): each rank takes its share of every batch, rank 0 logs, evaluates
and checkpoints.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn

from .config import TrainOptions
from .data import TaskData

FORMAT = "odeformer-checkpoint-1"


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be read (truncated, foreign, or from another format)."""


class RunDirectoryError(RuntimeError):
    """The run directory is not in the state the options ask for (a run already there, or none to resume)."""


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite."""


# ---------------------------------------------------------------------------------------------------------------------
# checkpoints


def save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` to ``path`` atomically: a reader, or a kill -9, sees the old file or the new one, not half."""
    tmp = path.with_name(path.name + ".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Read a checkpoint with ``weights_only=True`` (never unpickles code); one-line error if it is not ours."""
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # truncated zip, foreign pickle, ...
        reason = " ".join(str(error).split())[:160]
        raise CheckpointError(
            f"{path} is not a readable checkpoint ({type(error).__name__}: {reason}); move it away or start a new run."
        ) from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not an {FORMAT} file; move it away or start a new run.")
    return payload


# ---------------------------------------------------------------------------------------------------------------------
# batches


class EpochSampler:
    """Shuffled minibatches of indices into ``n`` items, epoch by epoch; its state resumes the exact order."""

    def __init__(self, n: int, batch_size: int, seed: int):
        self.n, self.batch_size = n, min(batch_size, n)
        self.generator = torch.Generator().manual_seed(seed)
        self.order, self.position = torch.empty(0, dtype=torch.long), n

    def __next__(self) -> Tensor:
        if self.position + self.batch_size > len(self.order):
            self.order, self.position = torch.randperm(self.n, generator=self.generator), 0
        batch = self.order[self.position : self.position + self.batch_size]
        self.position += self.batch_size
        return batch

    def state_dict(self) -> dict[str, Any]:
        return {"generator": self.generator.get_state(), "order": self.order, "position": self.position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.generator.set_state(state["generator"])
        self.order, self.position = state["order"], state["position"]


class WindowSampler:
    """Random windows of ``length + 1`` tokens from a token stream (inputs and next-token targets)."""

    def __init__(self, length_of_stream: int, window: int, batch_size: int, seed: int):
        if length_of_stream <= window + 1:
            raise ValueError(f"the token stream ({length_of_stream}) must be longer than the context ({window}) + 1.")
        self.high, self.batch_size = length_of_stream - window - 1, batch_size
        self.generator = torch.Generator().manual_seed(seed)

    def __next__(self) -> Tensor:
        return torch.randint(0, self.high, (self.batch_size,), generator=self.generator)

    def state_dict(self) -> dict[str, Any]:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.generator.set_state(state["generator"])


# ---------------------------------------------------------------------------------------------------------------------
# tasks: how each data kind becomes a loss and a metric


class Task:
    """Per data kind: the training sampler, the loss on a batch, and the evaluation of a split."""

    metric = "accuracy"
    higher_is_better = True

    def __init__(self, data: TaskData, batch_size: int, seed: int, device: torch.device):
        self.data, self.batch_size, self.device = data, batch_size, device

    def network(self, model: nn.Module) -> nn.Module:
        """The module whose forward maps a batch's inputs to logits (what DDP and torch.compile wrap)."""
        return model

    def batch(self, rank: int, world: int) -> Any:
        raise NotImplementedError

    def loss(self, model: nn.Module, batch: Any) -> Tensor:
        raise NotImplementedError

    def evaluate(self, model: nn.Module, split: str, max_batches: int) -> dict[str, float]:
        raise NotImplementedError


class _Labelled(Task):
    """Image and sequence classification: ``(inputs, labels)`` tensors per split."""

    def __init__(self, data, batch_size, seed, device):
        super().__init__(data, batch_size, seed, device)
        self.sampler = EpochSampler(len(data.splits["train"][1]), batch_size, seed)

    def batch(self, rank, world):
        index = next(self.sampler)[rank::world]
        inputs, labels = self.data.splits["train"]
        return inputs[index].to(self.device), labels[index].to(self.device)

    def loss(self, model, batch):
        inputs, labels = batch
        return F.cross_entropy(model(inputs).float(), labels)

    @torch.no_grad()
    def evaluate(self, model, split, max_batches):
        inputs, labels = self.data.splits[split]
        total_loss, correct, count = 0.0, 0, 0
        for b, start in enumerate(range(0, len(labels), self.batch_size)):
            if max_batches and b >= max_batches:
                break
            x = inputs[start : start + self.batch_size].to(self.device)
            y = labels[start : start + self.batch_size].to(self.device)
            logits = model(x).float()
            total_loss += float(F.cross_entropy(logits, y, reduction="sum"))
            correct += int((logits.argmax(-1) == y).sum())
            count += len(y)
        return {"loss": total_loss / max(count, 1), "accuracy": correct / max(count, 1)}


class ImageTask(_Labelled):
    pass


class _Classify(nn.Module):
    """``MaskedLM.classify`` as a forward, so DDP and torch.compile see the call that produces the loss."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, tokens: Tensor) -> Tensor:
        return self.model.classify(tokens)


class SequenceTask(_Labelled):
    def network(self, model):
        return _Classify(model)


class TextTask(Task):
    """Next-character prediction on random windows; the metric is the loss (nats per token)."""

    metric = "loss"
    higher_is_better = False

    def __init__(self, data, batch_size, seed, device, context: int):
        super().__init__(data, batch_size, seed, device)
        self.context = context
        self.sampler = WindowSampler(len(data.splits["train"][0]), context, batch_size, seed)

    def _windows(self, stream: Tensor, starts: Tensor) -> tuple[Tensor, Tensor]:
        offsets = starts[:, None] + torch.arange(self.context + 1)
        chunk = stream[offsets].to(self.device)  # (B, T + 1)
        return chunk[:, :-1], chunk[:, 1:]

    def batch(self, rank, world):
        return self._windows(self.data.splits["train"][0], next(self.sampler)[rank::world])

    def loss(self, model, batch):
        inputs, targets = batch
        return F.cross_entropy(model(inputs).float().flatten(0, 1), targets.flatten())

    @torch.no_grad()
    def evaluate(self, model, split, max_batches):
        stream = self.data.splits[split][0]
        windows = (max_batches or 20) * self.batch_size
        starts = torch.linspace(0, len(stream) - self.context - 2, windows).long().unique()
        total, count = 0.0, 0
        for chunk in starts.split(self.batch_size):
            inputs, targets = self._windows(stream, chunk)
            total += float(F.cross_entropy(model(inputs).float().flatten(0, 1), targets.flatten(), reduction="sum"))
            count += targets.numel()
        return {"loss": total / count}


class GraphTask(Task):
    """Transductive node classification: full-batch on the one graph, loss on the training nodes."""

    def __init__(self, data, batch_size, seed, device):
        super().__init__(data, batch_size, seed, device)
        self.features, self.edges, self.labels = (t.to(device) for t in data.graph)
        self.index = {split: data.splits[split][0].to(device) for split in data.splits}

    def batch(self, rank, world):
        return self.index["train"]

    def loss(self, model, batch):
        return F.cross_entropy(model(self.features, self.edges)[batch].float(), self.labels[batch])

    @torch.no_grad()
    def evaluate(self, model, split, max_batches):
        index = self.index[split]
        logits = model(self.features, self.edges)[index].float()
        return {
            "loss": float(F.cross_entropy(logits, self.labels[index])),
            "accuracy": float((logits.argmax(-1) == self.labels[index]).float().mean()),
        }


def make_task(data: TaskData, model: nn.Module, batch_size: int, seed: int, device: torch.device) -> Task:
    if data.kind == "image":
        return ImageTask(data, batch_size, seed, device)
    if data.kind == "sequence":
        return SequenceTask(data, batch_size, seed, device)
    if data.kind == "text":
        return TextTask(data, batch_size, seed, device, context=model.max_len)
    return GraphTask(data, batch_size, seed, device)


def _unwrap(model: nn.Module) -> nn.Module:
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


# ---------------------------------------------------------------------------------------------------------------------
# the loop


@dataclass
class Options(TrainOptions):
    """What the loop needs: the ``train`` config group (``odeformer/config.py``) plus the data's batch size."""

    batch_size: int = 64

    def __post_init__(self) -> None:
        for name in ("max_steps", "eval_every", "log_every", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"train.{name} must be at least 1, got {getattr(self, name)}.")
        if self.lr <= 0 or not math.isfinite(self.lr):
            raise ValueError(f"train.lr must be positive, got {self.lr}.")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"train.device must be auto, cpu or cuda; got {self.device!r}.")
        if self.precision not in ("auto", "fp32", "bf16"):
            raise ValueError(f"train.precision must be auto, fp32 or bf16; got {self.precision!r}.")


def choose_device(name: str) -> torch.device:
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("train.device=cuda but no CUDA device is available; use train.device=auto or cpu.")
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and "LOCAL_RANK" in os.environ:
        return torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    return torch.device(name)


def check_run_directory(out_dir: Path, resume: bool) -> None:
    """Refuse to write over an earlier run, or to resume one that is not there; called before anything is written."""
    last = out_dir / "last.pt"
    if resume and not last.exists():
        raise RunDirectoryError(f"train.resume=true but {last} does not exist; point train.out_dir at a run directory.")
    if not resume and (last.exists() or (out_dir / "summary.json").exists()):
        raise RunDirectoryError(
            f"{out_dir} already holds a run; pass train.resume=true to continue it or choose another train.out_dir."
        )


class Trainer:
    """Trains ``model`` on ``data``; ``info`` (solver, model, data names, depth, config) goes into the summary."""

    def __init__(self, model: nn.Module, data: TaskData, options: Options, out_dir: Path, info: dict[str, Any]):
        self.options, self.out_dir, self.info = options, Path(out_dir), info
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.device = choose_device(options.device)
        if self.world > 1 and not dist.is_initialized():
            dist.init_process_group("nccl" if self.device.type == "cuda" else "gloo")
        self.main = self.rank == 0
        torch.manual_seed(options.seed)
        self.model = model.to(self.device)
        self.task = make_task(data, model, options.batch_size, options.seed, self.device)
        decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "embed" not in n]
        no_decay = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "embed" not in n)]
        self.optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": options.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=options.lr,
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self._lr_factor)
        self.step, self.wall, self.best_val, self.best_step = 0, 0.0, None, 0
        self.stop_signal: int | None = None
        self.writer = self.bar = None
        self.network = self.task.network(model)
        if self.world > 1:
            ids = [self.device.index] if self.device.type == "cuda" else None
            self.network = nn.parallel.DistributedDataParallel(self.network, device_ids=ids)
        if options.compile:
            self.network = torch.compile(self.network)
        bf16 = options.precision == "bf16" or (options.precision == "auto" and self.device.type == "cuda")
        self.autocast = (
            (lambda: torch.autocast(self.device.type, dtype=torch.bfloat16)) if bf16 else contextlib.nullcontext
        )

    def _lr_factor(self, step: int) -> float:
        o = self.options
        if step < o.warmup_steps:
            return (step + 1) / o.warmup_steps
        progress = min(1.0, (step - o.warmup_steps) / max(1, o.max_steps - o.warmup_steps))
        return o.min_lr_ratio + (1 - o.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    # -- state --------------------------------------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "step": self.step,
            "wall": self.wall,
            "best_val": self.best_val,
            "best_step": self.best_step,
            "model": _unwrap(self.model).state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "sampler": getattr(self.task, "sampler", None) and self.task.sampler.state_dict(),
            "rng": {"torch": torch.get_rng_state(), "cuda": torch.cuda.get_rng_state_all()},
            "info": self.info,
        }

    def restore(self, payload: dict[str, Any]) -> None:
        try:
            self.model.load_state_dict(payload["model"])
            self.optimizer.load_state_dict(payload["optimizer"])
            self.scheduler.load_state_dict(payload["scheduler"])
        except (RuntimeError, ValueError, KeyError) as error:
            raise CheckpointError(
                f"the checkpoint in {self.out_dir} does not fit this model/config "
                f"({' '.join(str(error).split())[:160]}); resume with the run's own config."
            ) from None
        if payload["sampler"] is not None:
            self.task.sampler.load_state_dict(payload["sampler"])
        torch.set_rng_state(payload["rng"]["torch"])
        if torch.cuda.is_available() and payload["rng"]["cuda"]:
            torch.cuda.set_rng_state_all(payload["rng"]["cuda"])
        self.step, self.wall = payload["step"], payload["wall"]
        self.best_val, self.best_step = payload["best_val"], payload["best_step"]

    # -- logging ------------------------------------------------------------------------------------------------------

    def _log(self, row: dict[str, Any]) -> None:
        if not self.main:
            return
        with open(self.out_dir / "metrics.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")
        if self.writer is not None:
            for key, value in row.items():
                if key != "step" and isinstance(value, (int, float)):
                    self.writer.add_scalar(key, value, row["step"])

    def _truncate_metrics(self) -> None:
        """On resume, drop logged rows past the checkpoint (they will be logged again)."""
        path = self.out_dir / "metrics.jsonl"
        if self.main and path.exists():
            rows = [line for line in path.read_text().splitlines() if json.loads(line)["step"] <= self.step]
            path.write_text("".join(row + "\n" for row in rows))

    # -- the loop -----------------------------------------------------------------------------------------------------

    def _better(self, value: float) -> bool:
        if self.best_val is None:
            return True
        return value > self.best_val if self.task.higher_is_better else value < self.best_val

    def evaluate(self, split: str) -> dict[str, float]:
        """Metrics on ``split``: validation is capped at ``eval_batches`` batches, the test split is used whole
        (a text stream is sampled: the same number of windows as validation)."""
        model = self.task.network(_unwrap(self.model))
        model.eval()
        limit = self.options.eval_batches if split == "val" or isinstance(self.task, TextTask) else 0
        with self.autocast():
            result = self.task.evaluate(model, split, limit)
        model.train()
        return result

    def _checkpoint_and_evaluate(self) -> None:
        if self.main:
            result = self.evaluate("val")
            value = result[self.task.metric]
            self._log({"step": self.step, **{f"val_{k}": v for k, v in result.items()}})
            if self._better(value):
                self.best_val, self.best_step = value, self.step
                save_checkpoint(self.out_dir / "best.pt", self.state())
            save_checkpoint(self.out_dir / "last.pt", self.state())
            self._say(
                f"step {self.step}: val {self.task.metric} {value:.4f} (best {self.best_val:.4f} at "
                f"step {self.best_step})"
            )
        if self.world > 1:
            dist.barrier()

    def _say(self, text: str) -> None:
        if self.main:
            (self.bar.write if self.bar is not None else print)(text)

    def _on_signal(self, signum, frame) -> None:
        self.stop_signal = signum

    def _stop_requested(self) -> bool:
        # on the process group's device: nccl reduces CUDA tensors only
        flag = torch.tensor([1.0 if self.stop_signal is not None else 0.0], device=self.device)
        if self.world > 1:
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())

    def fit(self) -> dict[str, Any]:
        """Train to ``max_steps`` (or until stopped); return the summary also written to ``summary.json``."""
        o = self.options
        self.out_dir.mkdir(parents=True, exist_ok=True)
        if o.resume:
            self.restore(load_checkpoint(self.out_dir / "last.pt"))
            self._truncate_metrics()
        self.writer = _tensorboard(self.out_dir) if self.main else None
        self.bar = _progress(o.max_steps, self.step) if (self.main and o.progress) else None
        handlers = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        status = "completed"
        try:
            self.network.train()
            started = time.perf_counter() - self.wall
            while self.step < o.max_steps:
                batch = self.task.batch(self.rank, self.world)
                with self.autocast():
                    loss = self.task.loss(self.network, batch)
                value = loss.item()  # the step's one host sync: the divergence check, the log and the bar read it
                if not math.isfinite(value):
                    raise TrainingDiverged(
                        f"loss is {value} at step {self.step + 1}: the dynamics diverged; try a smaller model.dt "
                        f"or train.lr. The last good checkpoint is {self.out_dir / 'last.pt'}."
                    )
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if o.grad_clip > 0:
                    torch.nn.utils.clip_grad_norm_(self.network.parameters(), o.grad_clip)
                self.optimizer.step()
                self.scheduler.step()
                self.step += 1
                self.wall = time.perf_counter() - started
                if self.step % o.log_every == 0 or self.step == o.max_steps:
                    self._log(
                        {
                            "step": self.step,
                            "loss": value,
                            "lr": self.scheduler.get_last_lr()[0],
                            "time": round(self.wall, 3),
                            **_solver_stats(self.model),
                        }
                    )
                if self.bar is not None:
                    self.bar.update(1)
                    best = "-" if self.best_val is None else f"{self.best_val:.4f}"
                    self.bar.set_postfix({"loss": f"{value:.4f}", f"best val {self.task.metric}": best})
                if self.step % o.eval_every == 0 or self.step == o.max_steps:
                    self._checkpoint_and_evaluate()
                if self._stop_requested() and self.step < o.max_steps:
                    if self.main:
                        save_checkpoint(self.out_dir / "last.pt", self.state())
                    status = "interrupted"
                    self._say(
                        f"stopped by signal {self.stop_signal} at step {self.step}; checkpoint saved, resume "
                        "with train.resume=true"
                    )
                    break
        finally:
            for s, handler in handlers.items():
                signal.signal(s, handler)
            if self.bar is not None:
                self.bar.close()
            if self.writer is not None:
                self.writer.close()
        return self._finish(status)

    def _finish(self, status: str) -> dict[str, Any]:
        checksums = _rank_checksums(_unwrap(self.model), self.world, self.device)
        if not self.main:
            return {}
        test = None
        if status == "completed" and (self.out_dir / "best.pt").exists():
            best = load_checkpoint(self.out_dir / "best.pt")
            current = {k: v.clone() for k, v in _unwrap(self.model).state_dict().items()}
            _unwrap(self.model).load_state_dict(best["model"])
            test = self.evaluate("test")[self.task.metric]
            _unwrap(self.model).load_state_dict(current)
        summary = {
            "metric": self.task.metric,
            "val": self.best_val,
            "test": test,
            "steps": self.step,
            "wall_s": round(self.wall, 2),
            "solver": self.info.get("solver"),
            "model": self.info.get("model"),
            "data": self.info.get("data"),
            "depth": self.info.get("depth"),
            "params": sum(p.numel() for p in _unwrap(self.model).parameters()),
            "best_step": self.best_step,
            "status": status,
            "device": str(self.device),
            "world_size": self.world,
        }
        if checksums is not None:
            summary["rank_checksums"] = checksums
        (self.out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        plot_curves(self.out_dir)
        return summary


def _solver_stats(model: nn.Module) -> dict[str, Any]:
    """Solver statistics a model exposes after its forward (continuous-depth models: nfe, accepted/rejected steps)."""
    stats = getattr(_unwrap(model), "solver_stats", None)
    return dict(stats()) if callable(stats) else {}


def _rank_checksums(model: nn.Module, world: int, device: torch.device) -> list[float] | None:
    """Sum of all parameters on every rank (DDP only): equal values show the replicas stayed in sync."""
    if world == 1:
        return None
    local = torch.stack([p.detach().double().sum() for p in model.parameters()]).sum().to(device)
    gathered = [torch.zeros((), dtype=torch.float64, device=device) for _ in range(world)]
    dist.all_gather(gathered, local)
    return [float(v) for v in gathered]


def _tensorboard(out_dir: Path):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # tensorboard is optional
        return None
    return SummaryWriter(str(out_dir / "tensorboard"))


def _progress(total: int, initial: int):
    if not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, dynamic_ncols=True, leave=False)


def read_metrics(out_dir: Path) -> Iterator[dict[str, Any]]:
    path = Path(out_dir) / "metrics.jsonl"
    if path.exists():
        for line in path.read_text().splitlines():
            yield json.loads(line)


def plot_curves(out_dir: Path) -> Path:
    """``curves.png``: training loss and validation metrics against step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = list(read_metrics(out_dir))
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    train = [(r["step"], r["loss"]) for r in rows if "loss" in r]
    if train:
        left.plot(*zip(*train), lw=1)
    left.set(xlabel="step", ylabel="training loss", yscale="log")
    for key in sorted({k for r in rows for k in r if k.startswith("val_")}):
        points = [(r["step"], r[key]) for r in rows if key in r]
        right.plot(*zip(*points), marker="o", ms=3, label=key)
    right.set(xlabel="step", ylabel="validation")
    if right.lines:
        right.legend()
    fig.tight_layout()
    path = Path(out_dir) / "curves.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
