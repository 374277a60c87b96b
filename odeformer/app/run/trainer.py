"""The training loop, independent of Hydra: AdamW (or Adam), warm-up then cosine, clipping, evaluation, checkpoints,
resume.

Every run directory holds ``metrics.jsonl`` (one JSON object per logged step), ``last.pt`` and ``best.pt`` (written
atomically: a temporary file, then a rename), ``curves.png`` and ``summary.json``. ``best.pt`` holds the weights with
the best validation metric so far; ``last.pt`` holds everything a resume needs, those best weights included. A resumed
run (``train.resume``) restores the model, optimiser, scheduler, data order, RNG states and best weights (rewriting
``best.pt`` from them: one written after ``last.pt`` by a run killed later is of a trajectory the resume discards) and
drops the metrics logged after ``last.pt``, so on CPU it reaches bit-identical parameters to an uninterrupted run of
the same length. A fresh run in a directory left by a run killed before its first ``last.pt`` starts its logs anew.
SIGTERM or Ctrl-C saves a checkpoint and stops cleanly (one during an evaluation ends it before its next batch); a
non-finite loss stops the run, names the step, and keeps the last good checkpoint.

A step never makes the host wait for the device: the loss is checked for finiteness on the device and read only when
it is logged, so a non-finite loss is acted on at the next logging, evaluation or checkpoint step (naming the step it
first appeared at); the stop flag is a tensor (reduced across processes) only under ``torchrun``; batches come from
:mod:`~odeformer.app.run.objectives` without a blocking copy. ``train.compile`` compiles the network with
``torch.compile``: ``true`` or ``default``, ``reduce-overhead`` (CUDA graphs), ``max-autotune``, ``fullgraph`` (the
default mode, failing on a graph break), or ``false`` / ``off``.

Under ``torchrun`` the model is wrapped in DistributedDataParallel (gloo on CPU, nccl on GPU): each rank takes its
share of every batch, rank 0 logs, evaluates and checkpoints.
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import os
import signal
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from ... import atlas
from ...data import TaskData
from .. import files
from ..reporting.plots import plot_curves
from .checkpoints import FORMAT, CheckpointError, check_weights, load_checkpoint, save_checkpoint
from .config import COMPILE_MODES as COMPILE_MODES
from .config import LoopConfig, compile_mode
from .cost import evaluations, scheme_parameters
from .history import HISTORY, non_finite, record
from .identity import RUN_RECORD, run_record
from .objectives import EvaluationStopped, TextObjective, make_objective
from .optimizer import make_optimizer
from .resume import resume_command
from .sampling import EvalSample

PENDING_STOP: int | None = None
"""A signal received before the loop could install its own handler (a sweep's worker process sets it): the run
starts, saves its first checkpoint and stops, as if signalled during training."""


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite."""


class SchemeCheckFailed(RuntimeError):
    """``train.check_scheme``: a claim of the model's own steps fails where the model runs them."""


def _unwrap(model: nn.Module) -> nn.Module:
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


def choose_device(name: str) -> torch.device:
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("train.device=cuda but no CUDA device is available; use train.device=auto or cpu.")
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and "LOCAL_RANK" in os.environ:
        return torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    return torch.device(name)


class Trainer:
    """Trains ``model`` on ``data``. ``run_record`` (:data:`~odeformer.app.run.identity.RUN_RECORD`: the solver,
    model, data and depth names, the config, the overrides) goes into every checkpoint and names the summary's run."""

    def __init__(self, model: nn.Module, data: TaskData, loop: LoopConfig, out_dir: Path, run_record: dict[str, Any]):
        self.loop, self.out_dir, self.run_record = loop, Path(out_dir), run_record
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.device = choose_device(loop.device)
        self.joined = self.world > 1 and not dist.is_initialized()  # the group this run creates, and tears down
        if self.joined:
            dist.init_process_group("nccl" if self.device.type == "cuda" else "gloo")
        self.main = self.rank == 0
        torch.manual_seed(loop.seed)
        self.model = model.to(self.device)
        self.objective = make_objective(data, model, loop.batch_size, loop.seed, self.device)
        if any(k != 1 for k in loop.resolutions):  # each must be a resolution of this model's layers
            layers = getattr(getattr(model, "backbone", None), "layers", None)
            if not layers:
                raise ValueError(
                    "train.resolutions steps a model's layers at other resolutions; a continuous-depth model has none."
                )
            for k in loop.resolutions:
                atlas.check_resolution(k, len(layers))
        self.optimizer = make_optimizer(model, loop)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self._lr_factor)
        self.step, self.wall, self.best_val, self.best_step = 0, 0.0, None, 0
        self.best_weights: dict[str, torch.Tensor] | None = None  # on the CPU: the model at best_step
        self.stop_signal: int | None = None
        self.saved_step: int | None = None  # the step of the last.pt on disk (None: none written by this run yet)
        self.resume_changes: list[tuple[str, Any, Any]] = []  # what a resume after a divergence changes
        self.writer = self.bar = None
        self.sample = EvalSample.of(data, model, loop.seed)  # character-level text: a sample per evaluation
        self.last_sample: str | None = None
        if self.sample is not None:  # the vocabulary odeformer-sample prints with
            self.run_record.setdefault("vocabulary", "".join(self.sample.itos))
        self.network = self.objective.network(model)
        if self.world > 1:
            ids = [self.device.index] if self.device.type == "cuda" else None
            self.network = nn.parallel.DistributedDataParallel(self.network, device_ids=ids)
        mode = compile_mode(loop.compile)
        if mode is not None:
            options = {"fullgraph": True} if mode == "fullgraph" else {} if mode == "default" else {"mode": mode}
            self.network = torch.compile(self.network, **options)
        # CUDA graphs: each step is a new one, so a replay may reuse the memory of the last step's outputs
        self.graphs = mode in ("reduce-overhead", "max-autotune") and self.device.type == "cuda"
        self.first_bad: Tensor | None = None  # on the device: [step, loss] of the first non-finite loss (step 0: none)
        self.cut_evaluation = False  # an evaluation ended early by a signal
        bf16 = loop.precision == "bf16" or (loop.precision == "auto" and self.device.type == "cuda")
        self.autocast = (
            (lambda: torch.autocast(self.device.type, dtype=torch.bfloat16)) if bf16 else contextlib.nullcontext
        )

    def _resolution(self) -> contextlib.AbstractContextManager:
        """This step's resolution (``train.resolutions``, cycled by step, so a resume continues the cycle)."""
        k = self.loop.resolutions[self.step % len(self.loop.resolutions)]
        return contextlib.nullcontext() if k == 1 else atlas.resampled(self.model.backbone, k)

    def _check_claims(self, batch: Any) -> None:
        """``train.check_scheme``: every claim of every step the model's depth loop takes on this batch, as this step
        runs it (its autocast and resolution), against float64 copies (:func:`solvers.testing.check_in_model`); the
        random state is restored after it, so the run trains as it would unchecked. A failure is
        :class:`SchemeCheckFailed`, in one line (a continuous-depth run, whose model takes no layer steps, is refused
        before: :func:`~odeformer.app.run.bounds.check_config`)."""
        from solvers.testing import check_in_model  # the kit: only a run that asks for the check loads it

        def forward(model: nn.Module, batch: Any) -> Tensor:
            with self.autocast(), self._resolution():
                return self.objective.loss(model, batch)

        began = time.perf_counter()
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            try:
                found = check_in_model(self.model, batch, forward=forward)
            except AssertionError as error:
                said = "; ".join(line.strip() for line in str(error).splitlines() if line.strip())
                raise SchemeCheckFailed(f"train.check_scheme: {said}") from None
        claims = ", ".join(sorted(found["claims"]))
        judged = found["steps"] - len(found["unjudged"])
        unjudged = (
            f"; {len(found['unjudged'])} amplify rounding beyond the scheme's stability region and were not judged"
            if found["unjudged"]
            else ""
        )
        if found.get("order_unresolved"):
            unjudged += (
                f"; the order of {len(found['order_unresolved'])} could not be measured ("
                + "; ".join(sorted(set(found["order_unresolved"].values())))
                + ")"
            )
        self._say(
            f"train.check_scheme: {judged} of {found['steps']} steps of the model's forward pass hold their claims "
            f"({claims or 'none judged'}){unjudged}, on the first batch ({time.perf_counter() - began:.1f} s)"
        )

    def _lr_factor(self, step: int) -> float:
        o = self.loop
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
            "sampler": getattr(self.objective, "sampler", None) and self.objective.sampler.state_dict(),
            "rng": {"torch": torch.get_rng_state(), "cuda": torch.cuda.get_rng_state_all()},
            "best_model": self.best_weights,
            RUN_RECORD: self.run_record,
        }

    def best_state(self) -> dict[str, Any]:
        """``best.pt``: the weights at ``best_step`` and the run record (what
        :func:`odeformer.app.run.builder.load_run` and the summary's test evaluation read)."""
        return {
            "format": FORMAT,
            "step": self.best_step,
            "best_val": self.best_val,
            "best_step": self.best_step,
            "model": self.best_weights,
            RUN_RECORD: self.run_record,
        }

    def restore(self, payload: dict[str, Any]) -> None:
        self._check_scheme(run_record(payload).get("scheme"))
        self._check_optimizer_state(payload.get("optimizer"))
        last = self.out_dir / "last.pt"
        check_weights(_unwrap(self.model), payload.get("model"), last)  # int64, bool or complex: refused, not cast
        if payload.get("best_model") is not None:
            check_weights(_unwrap(self.model), payload["best_model"], last)
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
            self.objective.sampler.load_state_dict(payload["sampler"])
        torch.set_rng_state(payload["rng"]["torch"])
        if torch.cuda.is_available() and payload["rng"]["cuda"]:
            torch.cuda.set_rng_state_all(payload["rng"]["cuda"])
        self.step, self.wall = payload["step"], payload["wall"]
        self.saved_step = self.step
        self.best_val, self.best_step = payload["best_val"], payload["best_step"]
        scales = [group.get("lr_scale", 1.0) for group in self.optimizer.param_groups]
        if any(base != self.loop.lr * scale for base, scale in zip(self.scheduler.base_lrs, scales)):
            self._rescale_lr()
        self._restore_best(payload)

    def _check_scheme(self, stored: Any) -> None:
        """The scheme ``last.pt`` records (coefficients and derived claims, or a class of one's own and its claims)
        is the one built now: a class edited since (an Euler made a Heun) would continue another scheme's run."""
        now = self.run_record.get("scheme")
        if stored is not None and json.dumps(stored, sort_keys=True, default=str) != json.dumps(
            now, sort_keys=True, default=str
        ):
            raise CheckpointError(
                f"{self.out_dir / 'last.pt'} was trained with the scheme {json.dumps(stored, default=str)[:160]}, "
                f"but it is now {json.dumps(now, default=str)[:160]} (its class changed since); a resume continues "
                "the run's own scheme only: start a new run in another train.out_dir."
            )

    def _check_optimizer_state(self, state: Any) -> None:
        """The optimiser state ``last.pt`` holds fits this model: each parameter's moments have its shape (a state
        of another shape would train on as garbage, or fail later as a divergence)."""
        where = self.out_dir / "last.pt"
        if not isinstance(state, dict) or not isinstance(state.get("state"), dict):
            raise CheckpointError(f"{where}: optimizer is not an optimiser state (a mapping with 'state').")
        parameters = [p for group in self.optimizer.param_groups for p in group["params"]]
        for index, moments in state["state"].items():
            if not isinstance(index, int) or not 0 <= index < len(parameters) or not isinstance(moments, dict):
                raise CheckpointError(f"{where}: optimizer.state has an entry {index!r} for no parameter here.")
            for key, value in moments.items():
                if key == "step" or not isinstance(value, Tensor):
                    continue
                if value.shape != parameters[index].shape:
                    raise CheckpointError(
                        f"{where}: optimizer.state[{index}].{key} has shape {tuple(value.shape)}, its parameter "
                        f"{tuple(parameters[index].shape)}; resume with the run's own config."
                    )

    def _rescale_lr(self) -> None:
        """A resume after a divergence with another ``train.lr``: the schedule continues from the restored step,
        scaled to the new peak (the optimiser's moments are kept)."""
        lr = self.loop.lr
        groups = self.optimizer.param_groups
        self.scheduler.base_lrs = [lr * group.get("lr_scale", 1.0) for group in groups]
        factor = self._lr_factor(self.scheduler.last_epoch)
        for group, base in zip(groups, self.scheduler.base_lrs):  # each group keeps its share of the rate
            group["initial_lr"], group["lr"] = base, base * factor
        self.scheduler._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def _restore_best(self, payload: dict[str, Any]) -> None:
        """Make ``best.pt`` the best of the restored state: ``last.pt`` carries the best weights; a ``best.pt`` written
        after it (by a run killed later) is of a trajectory the resumed run does not continue."""
        best = self.out_dir / "best.pt"
        if "best_model" in payload:
            self.best_weights = payload["best_model"]
        elif self.best_val is not None:  # a last.pt from before it carried the best weights: best.pt's, if they fit
            stored = load_checkpoint(best) if best.exists() else {}
            if stored.get("step") == self.best_step and stored.get("best_val") == self.best_val:
                self.best_weights = stored["model"]
            else:
                warnings.warn(
                    f"{best} is not the best of {self.out_dir / 'last.pt'} (step {self.best_step}); the summary's "
                    "test is taken only if validation improves on the restored best.",
                    stacklevel=2,
                )
                return
        if not self.main:
            return
        if self.best_weights is None:  # no evaluation before last.pt
            best.unlink(missing_ok=True)
        else:
            save_checkpoint(best, self.best_state())

    # -- logging ------------------------------------------------------------------------------------------------------

    def _log(self, row: dict[str, Any]) -> None:
        if not self.main:
            return
        with files.append(self.out_dir / "metrics.jsonl") as f:  # never through a link planted meanwhile
            f.write(json.dumps(row) + "\n")
        if self.writer is not None:
            for key, value in row.items():
                if key != "step" and isinstance(value, (int, float)):
                    self.writer.add_scalar(key, value, row["step"])

    def _truncate_metrics(self) -> None:
        """On resume, drop the logged rows past the checkpoint (they will be logged again), and blank lines and a
        last line cut short by a kill (a half-written row) after them: the file is cut after its last row of a step
        the checkpoint holds. Only its tail is read (:func:`metrics_tail`), so a huge file costs what its end does."""
        path = self.out_dir / "metrics.jsonl"
        if not self.main or not os.path.lexists(path):
            return
        fd = files.open_nofollow(path, os.O_RDWR)  # a link, a FIFO or a device is refused
        try:
            start, rows = metrics_tail(fd, path)
            kept = [end for end, row in rows if row["step"] <= self.step]
            cut = kept[-1] if kept else start
            if cut and os.pread(fd, 1, cut - 1) != b"\n":  # a last row without its newline: the next row starts anew
                cut += os.pwrite(fd, b"\n", cut)
            os.ftruncate(fd, cut)
        finally:
            os.close(fd)

    def _clear_logs(self) -> None:
        """On a fresh start, move aside what a run killed before its first ``last.pt`` left (``check_run_directory``
        refuses a directory with a ``last.pt`` or ``summary.json``), into ``previous/<date>_<time>/``: its metrics,
        best weights, curves and tensorboard events would otherwise mix with this run's, and its ``best.pt`` may have
        cost hours. Half-written checkpoints (``*.tmp``) are removed."""
        if not self.main:
            return
        for name in ("last.pt.tmp", "best.pt.tmp"):
            (self.out_dir / name).unlink(missing_ok=True)
        names = ("metrics.jsonl", "best.pt", "curves.png", HISTORY)
        left = [self.out_dir / n for n in names if (self.out_dir / n).exists()]
        left += sorted((self.out_dir / "tensorboard").glob("events.out.tfevents.*"))
        if not left:
            return
        aside = self.out_dir / "previous" / time.strftime("%Y-%m-%d_%H-%M-%S")
        aside.mkdir(parents=True, exist_ok=True)
        for path in left:
            path.rename(aside / path.name)
        self._say(f"moved what an earlier, unfinished run left here ({', '.join(p.name for p in left)}) to {aside}")

    # -- the loop -----------------------------------------------------------------------------------------------------

    def _better(self, value: float) -> bool:
        if self.best_val is None:
            return True
        return value > self.best_val if self.objective.higher_is_better else value < self.best_val

    def evaluate(self, split: str) -> dict[str, float]:
        """Metrics on ``split``: validation is capped at ``eval_batches`` batches (0: all), the test split is used
        whole; a text stream is read in ``eval_batches`` batches of windows spread over it, for validation and test
        alike (0: the whole stream, in consecutive windows); a graph is evaluated whole. A signal received meanwhile
        ends it before its next batch (:class:`~odeformer.app.run.objectives.EvaluationStopped`)."""
        model = self.objective.network(_unwrap(self.model))
        model.eval()
        limit = self.loop.eval_batches if split == "val" or isinstance(self.objective, TextObjective) else 0
        try:
            with self.autocast():
                return self.objective.evaluate(model, split, limit, stop=lambda: self.stop_signal is not None)
        finally:
            model.train()

    def _checkpoint_and_evaluate(self) -> None:
        """At an evaluation step (every ``eval_every`` and the last), evaluate and keep ``best.pt``; at a checkpoint
        step (every ``checkpoint_every``, or every evaluation when it is 0, and the last), save ``last.pt``."""
        o, final = self.loop, self.step == self.loop.max_steps
        evaluating = self.step % o.eval_every == 0 or final
        saving = final or (self.step % o.checkpoint_every == 0 if o.checkpoint_every else evaluating)
        if not (evaluating or saving):
            return
        self._check_loss()
        if self.main and evaluating:
            try:
                result = self.evaluate("val")
            except EvaluationStopped:  # nothing of it is logged or kept; the stop check saves last.pt
                self.cut_evaluation = True
                evaluating = saving = False
        if self.main and evaluating:
            value = result[self.objective.metric]
            row = {"step": self.step, **{f"val_{k}": v for k, v in result.items()}}
            if self.sample is not None:  # what the model writes now (a fixed prompt and seed)
                row["sample"] = self.last_sample = self.sample(_unwrap(self.model))
                if self.writer is not None:
                    self.writer.add_text("sample", row["sample"], self.step)
            self._log(row)
            if self._better(value):
                self.best_val, self.best_step = value, self.step
                weights = _unwrap(self.model).state_dict()
                self.best_weights = {k: v.detach().to("cpu", copy=True) for k, v in weights.items()}
                save_checkpoint(self.out_dir / "best.pt", self.best_state())
            if o.eval_every >= o.log_every or self.step % o.log_every == 0 or final:
                self._say(
                    f"step {self.step}: val {self.objective.metric} {value:.4f} (best {self.best_val:.4f} at "
                    f"step {self.best_step})"
                )
        if self.main and saving:
            self._save_last()
        if self.world > 1:
            dist.barrier()

    def _save_last(self) -> None:
        """Write ``last.pt``, unless the model or optimiser state holds a NaN or infinity: that is a divergence, and
        the last good ``last.pt`` is kept."""
        self._check_loss()
        state = self.state()
        if not _all_finite([state["model"], state["optimizer"]]):
            where = non_finite(state)
            self._diverged(f"the {where} state holds non-finite values at step {self.step}")
        save_checkpoint(self.out_dir / "last.pt", state)
        self.saved_step = self.step

    def _watch(self, loss: Tensor) -> None:
        """Keep, on the device, the step and value of the first non-finite loss: no host read, and nothing copied to
        the device (the step is written there by a fill, its number a kernel argument)."""
        loss = loss.detach().double()
        if self.first_bad is None:
            self.first_bad = torch.zeros(2, dtype=torch.float64, device=loss.device)
        new = ~torch.isfinite(loss) & (self.first_bad[0] == 0)
        step = torch.full_like(loss, self.step + 1.0)
        self.first_bad = torch.where(new, torch.stack([step, loss]), self.first_bad)

    def _read_loss(self, loss: Tensor) -> float:
        """The step's loss on the host (the one read of a logging step), after the divergence check."""
        value, step, bad = torch.cat([loss.detach().double().reshape(1), self.first_bad]).tolist()
        if step:
            self._diverged(f"loss is {bad} at step {int(step)}", int(step))
        return value

    def _check_loss(self) -> None:
        """Stop if a loss since the last check was not finite (before anything is evaluated or saved)."""
        if self.first_bad is not None:
            step, bad = self.first_bad.tolist()
            if step:
                self._diverged(f"loss is {bad} at step {int(step)}", int(step))

    def _diverged(self, what: str, step: int | None = None) -> None:
        """Record the divergence in the run's history and stop with one line saying how to go on."""
        if self.main:
            step = self.step + 1 if step is None else step
            event = {"event": "diverged", "step": step, "what": what, "checkpoint_step": self.saved_step}
            record(self.out_dir, event)
        last = self.out_dir / "last.pt"
        if self.saved_step is not None and last.exists():
            lower = f"train.lr={self.loop.lr / 10:.3g}"
            command = resume_command(self.out_dir, self.run_record.get("overrides"), lower)
            how = (
                f"the last good checkpoint is {last} (step {self.saved_step}); resume from it with a lower learning "
                f"rate: {command} (or start again with a smaller model.dt)"
            )
        else:
            how = "no checkpoint was written yet; start again with a smaller model.dt or train.lr"
        raise TrainingDiverged(f"{what}: the dynamics diverged; {how}.")

    def _say(self, text: str) -> None:
        if self.main:
            (self.bar.write if self.bar is not None else print)(files.printable(text))  # a name's escapes shown

    def _on_signal(self, signum, frame) -> None:
        self.stop_signal = signum

    def _stop_requested(self) -> bool:
        if self.world == 1:  # one process: its own flag, no tensor and no device round trip
            return self.stop_signal is not None
        # on the process group's device: nccl reduces CUDA tensors only
        flag = torch.tensor([1.0 if self.stop_signal is not None else 0.0], device=self.device)
        if self.world > 1:
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())

    def fit(self) -> dict[str, Any]:
        """Train to ``max_steps`` (or until stopped); return the summary also written to ``summary.json``."""
        o = self.loop
        self.out_dir.mkdir(parents=True, exist_ok=True)
        if o.resume:
            self.restore(load_checkpoint(self.out_dir / "last.pt"))
            self._truncate_metrics()
            if self.resume_changes and self.main:
                changes = {key: [old, new] for key, old, new in self.resume_changes}
                record(self.out_dir, {"event": "resumed", "step": self.step, "changes": changes})
                shown = ", ".join(f"{key} {old} -> {new}" for key, old, new in self.resume_changes)
                self._say(f"resuming after the divergence from step {self.step} with {shown} (recorded in {HISTORY})")
        else:
            self._clear_logs()
        # on resume, tensorboard drops the events logged after the checkpoint, as _truncate_metrics does
        self.writer = _tensorboard(self.out_dir, self.step + 1 if o.resume else None) if self.main else None
        self.bar = _progress(o.max_steps, self.step) if (self.main and o.progress) else None
        handlers = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        if PENDING_STOP is not None:
            self.stop_signal = PENDING_STOP
        status = "completed"
        try:
            self.network.train()
            checked = False
            started = time.perf_counter() - self.wall
            while self.step < o.max_steps:
                if self.graphs:
                    torch.compiler.cudagraph_mark_step_begin()
                batch = self.objective.batch(self.rank, self.world)
                if o.check_scheme and not checked:
                    self._check_claims(batch)
                    checked = True
                with self.autocast(), self._resolution():
                    loss = self.objective.loss(self.network, batch)
                self._watch(loss)  # on the device: the loss is read on the host only when it is logged
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if o.grad_clip > 0:
                    torch.nn.utils.clip_grad_norm_(self.network.parameters(), o.grad_clip)
                lr = self.scheduler.get_last_lr()[0]  # the learning rate of this step (scheduler.step sets the next)
                self.optimizer.step()
                self.scheduler.step()
                self.step += 1
                self.wall = time.perf_counter() - started
                if self.step % o.log_every == 0 or self.step == o.max_steps:
                    value = self._read_loss(loss)
                    self._log(
                        {
                            "step": self.step,
                            "loss": value,
                            "lr": lr,
                            "time": round(self.wall, 3),
                            **_solver_stats(self.model),
                        }
                    )
                    if self.bar is not None:
                        best = "-" if self.best_val is None else f"{self.best_val:.4f}"
                        self.bar.set_postfix({"loss": f"{value:.4f}", f"best val {self.objective.metric}": best})
                if self.bar is not None:
                    self.bar.update(1)
                self._checkpoint_and_evaluate()
                if self._stop_requested() and (self.step < o.max_steps or self.cut_evaluation):
                    if self.main and self.saved_step != self.step:
                        self._save_last()
                    status = "interrupted"
                    self._say(
                        f"stopped by signal {self.stop_signal} at step {self.step}; checkpoint saved, resume with: "
                        + resume_command(self.out_dir, self.run_record.get("overrides"))
                    )
                    break
        finally:
            for s, handler in handlers.items():
                signal.signal(s, handler)
            if self.bar is not None:
                self.bar.close()
            if self.writer is not None:
                self.writer.close()
        summary = self._finish(status)
        self._leave()
        return summary

    def _leave(self) -> None:
        """Leave the process group this run created: every rank waits here for the others (rank 0 evaluates the test
        split and writes the summary alone), then tears it down. A rank that exited while another still held the
        group aborted now and then in the teardown ("terminate called without an active exception"). The wrapper
        goes first: DistributedDataParallel holds the group's backend, whose worker threads then outlived the group
        and were torn down at interpreter exit whenever the trainer (a reference cycle) was not collected before."""
        if self.joined and dist.is_initialized():
            dist.barrier()
            self.network = self.objective.network(self.model)  # the same model, no longer wrapped
            gc.collect()  # the wrapper and its reducer freed now, while the interpreter is whole
            dist.destroy_process_group()
            self.joined = False

    def _finish(self, status: str) -> dict[str, Any]:
        checksums = _rank_checksums(_unwrap(self.model), self.world, self.device)
        if not self.main:
            return {}
        test = None
        if status == "completed" and self.best_weights is not None:  # the weights best.pt holds, kept in memory
            current = {k: v.clone() for k, v in _unwrap(self.model).state_dict().items()}
            _unwrap(self.model).load_state_dict(self.best_weights)
            try:
                test = self.evaluate("test")[self.objective.metric]
            except EvaluationStopped:  # last.pt holds the finished run: a resume takes the test
                status = "interrupted"
            _unwrap(self.model).load_state_dict(current)
        summary = {
            "metric": self.objective.metric,
            "val": self.best_val,
            "test": test,
            "steps": self.step,
            "wall_s": round(self.wall, 2),
            "solver": self.run_record.get("solver"),
            "model": self.run_record.get("model"),
            "data": self.run_record.get("data"),
            "depth": self.run_record.get("depth"),
            **({"scheme": self.run_record["scheme"]} if self.run_record.get("scheme") else {}),
            **({"splitting": self.run_record["splitting"]} if self.run_record.get("splitting") else {}),
            "params": sum(p.numel() for p in _unwrap(self.model).parameters()),
            "evaluations": evaluations(_unwrap(self.model)),  # per forward: what a comparison at equal compute reads
            **({"scheme_parameters": found} if (found := scheme_parameters(_unwrap(self.model))) else {}),
            "best_step": self.best_step,
            "status": status,
            "device": str(self.device),
            "world_size": self.world,
            **({"sample": self.last_sample} if self.last_sample is not None else {}),
        }
        if checksums is not None:
            summary["rank_checksums"] = checksums
        if status == "interrupted":
            summary["signal"] = self.stop_signal
        files.write_text(self.out_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
        plot_curves(list(read_metrics(self.out_dir)), self.out_dir / "curves.png")
        return summary


def _all_finite(states: list[Any]) -> bool:
    """Whether every floating tensor in ``states`` is finite: one reduction and one host read per device."""
    found: dict[torch.device, list[Tensor]] = {}
    stack = list(states)
    while stack:
        node = stack.pop()
        if isinstance(node, Tensor):
            if node.is_floating_point() and node.numel():
                found.setdefault(node.device, []).append(torch.isfinite(node).all())
        elif isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, (list, tuple)):
            stack.extend(node)
    return all(bool(torch.stack(flags).all()) for flags in found.values())


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


def _tensorboard(out_dir: Path, purge_step: int | None = None):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # tensorboard is optional
        return None
    return SummaryWriter(str(out_dir / "tensorboard"), purge_step=purge_step)


def _progress(total: int, initial: int):
    if not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, dynamic_ncols=True, leave=False)


METRICS_TAIL = 64 << 20
"""The most of ``metrics.jsonl`` read (its end): a resume's cut and the curves; rows of millions of steps fit."""


def metrics_tail(fd: int, path: Path, limit: int | None = None) -> tuple[int, list[tuple[int, dict[str, Any]]]]:
    """The rows of the last ``limit`` bytes (:data:`METRICS_TAIL`) of the metrics file open at ``fd`` (its first line,
    cut by the window, left out), each with the offset where its line ends, and the offset where the window starts.
    Blank lines and a last line cut short (a run killed while writing) are skipped; any other line that is not a JSON
    object with an integer ``step`` is a one-line error naming the file and line."""
    limit = METRICS_TAIL if limit is None else limit
    size = os.fstat(fd).st_size
    start = max(0, size - limit)
    data = os.pread(fd, size - start, start)
    if start:
        cut = data.find(b"\n") + 1
        start, data = start + cut, data[cut:]
    lines = data.split(b"\n")
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    where = "" if not start else f" (of its last {limit} bytes)"
    rows, end = [], start
    for i, line in enumerate(lines):
        end += len(line) + 1
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as error:
            if i == last:  # a half-written last row: the run was killed while logging; it is logged again
                break
            why = "nested too deeply" if isinstance(error, RecursionError) else error
            raise ValueError(f"{path} line {i + 1}{where} is not a JSON row ({why}); remove or repair it.") from None
        if not isinstance(row, dict) or not isinstance(row.get("step"), int):
            text = line[:80].decode(errors="replace")
            raise ValueError(f"{path} line {i + 1}{where} is not a metrics row with an integer step: {text!r}.")
        rows.append((min(end, start + len(data)), row))
    return start, rows


def read_metrics(out_dir: Path) -> Iterator[dict[str, Any]]:
    """The rows of ``metrics.jsonl`` (of its last :data:`METRICS_TAIL` bytes, :func:`metrics_tail`); a link, a FIFO
    or a device in its place is refused."""
    path = Path(out_dir) / "metrics.jsonl"
    if not os.path.lexists(path):
        return
    fd = files.open_nofollow(path, os.O_RDONLY)
    try:
        rows = metrics_tail(fd, path)[1]
    finally:
        os.close(fd)
    yield from (row for _, row in rows)
