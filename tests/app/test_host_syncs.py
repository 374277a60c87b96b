"""The training loop never waits on the host between two logging steps: every tensor-to-Python conversion and every
host-to-device copy from pageable memory of a run (the calls that make the host wait for a GPU; on the CPU every
tensor made from Python data) happens in a logging, evaluation or checkpoint step, for every task model; a non-finite
loss is still caught (and named) at the next of those; a signal during an evaluation ends it before its next batch;
``train.compile`` takes torch.compile's modes."""

import contextlib
import json
import os
import signal

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import odeformer
from odeformer.app.run import trainer as trainer_module
from odeformer.app.run.checkpoints import load_checkpoint
from odeformer.app.run.trainer import LoopConfig, Trainer, compile_mode
from odeformer.data import load
from odeformer.tasks.graph import DIFFormer, NodeClassifier

SYNCING_OPS = {
    "_local_scalar_dense",  # .item(), bool(), float(), int(), a tensor as an index
    "nonzero",  # boolean-mask indexing, torch.where with one argument
    "masked_select",
    "_unique2",
    "unique_dim",
    "unique_consecutive",
    "repeat_interleave",
    "_coalesce",  # sparse coalescing: its output size is read on the host
    "equal",
    "is_nonzero",
}
"""The operators whose result must reach the host before Python can go on: on a GPU each one drains the queue."""

FROM_PYTHON = {"lift_fresh", "lift_fresh_copy"}
"""The operators through which a tensor made from Python data (``torch.tensor``, ``t.new_tensor``, ``as_tensor``, a
list used as an index) enters torch: made on a GPU, a copy from pageable host memory that the host waits for."""

ALLOWED = ("_read_loss", "_check_loss", "_log", "_checkpoint_and_evaluate", "_save_last", "_finish")
"""The trainer's methods that run at logging, evaluation and checkpoint steps, where the host may read."""


def _on_host(tensor):
    return isinstance(tensor, torch.Tensor) and tensor.device.type == "cpu"


def pageable_copy(name, args, kwargs):
    """Whether operator ``name`` copies an unpinned CPU tensor into a tensor on another device (``.to``, ``copy_``)."""
    if name == "_to_copy":
        source, target = args[0], kwargs.get("device")
    elif name == "copy_":
        source, target = args[1], args[0].device
    else:
        return False
    return _on_host(source) and target is not None and torch.device(target).type != "cpu" and not source.is_pinned()


class Conversions(TorchDispatchMode):
    """Counts what makes the host wait for a GPU: the syncing operators, ``tolist`` / ``numpy`` (which read the data),
    the copies from pageable host memory to another device, and every tensor made from Python data on ``device`` (on
    the CPU, where the step runs on the host, every one: the same line copies it to the device on a GPU); split by
    whether it happens inside one of the :data:`ALLOWED` methods. A fill (``torch.full_like``) or a Python number as
    an operand is a kernel argument, and copies nothing."""

    def __init__(self, trainer=None, device="cpu"):
        super().__init__()
        self.trainer, self.device, self.depth, self.inside, self.outside = trainer, device, 0, [], []

    def note(self, name):
        """Outside the allowed methods, with the step being taken (1 for the first)."""
        if self.depth:
            self.inside.append(name)
        else:
            self.outside.append((name, self.trainer.step + 1 if self.trainer is not None else None))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func._overloadpacket.__name__
        out = func(*args, **kwargs)
        made_here = name in FROM_PYTHON and isinstance(out, torch.Tensor) and out.device.type == self.device
        if name in SYNCING_OPS or made_here or pageable_copy(name, args, kwargs):
            self.note(name)
        return out


@contextlib.contextmanager
def counting(monkeypatch, trainer=None):
    counter = Conversions(trainer)
    for method in ALLOWED:
        original = getattr(Trainer, method)

        def wrapped(self, *args, _original=original, **kwargs):
            counter.depth += 1
            try:
                return _original(self, *args, **kwargs)
            finally:
                counter.depth -= 1

        monkeypatch.setattr(Trainer, method, wrapped)
    _count_reads(monkeypatch, counter)
    with counter:
        yield counter


def _count_reads(monkeypatch, counter):
    for name in ("tolist", "numpy"):
        original = getattr(torch.Tensor, name)

        def read(self, *args, _original=original, _name=name, **kwargs):
            counter.note(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, read)


def _task(name, n=48):
    torch.manual_seed(0)
    if name == "vit":
        data = load("synthetic", task="image", n=n)
        m = data.meta
        return data, odeformer.ViT(m["image_size"], 2, m["in_chans"], m["num_classes"], depth=2, dim=8, heads=2)
    if name == "causal_lm":
        data = load("synthetic", task="text", n=64)
        return data, odeformer.CausalLM(data.meta["vocab_size"], 8, depth=2, dim=8, heads=2)
    if name == "masked_lm":
        data = load("synthetic", task="sequence", n=48)
        m = data.meta
        return data, odeformer.MaskedLM(
            m["vocab_size"], m["max_len"], num_classes=m["num_classes"], pad_id=m["pad_id"], depth=2, dim=8, heads=2
        )
    data = load("synthetic", task="graph", n=48)
    model = NodeClassifier if name == "node_classifier" else DIFFormer
    return data, model(data.meta["in_features"], data.meta["num_classes"], depth=2, dim=8)


@pytest.mark.parametrize("task", ["vit", "causal_lm", "masked_lm", "node_classifier", "difformer"])
def test_a_training_step_reads_nothing_on_the_host_between_logging_steps(task, tmp_path, monkeypatch):
    """Logging at steps 6 and 12: steps 7 to 11 read nothing on the host. A graph model builds its normalised
    adjacency (checking and coalescing the edges, host reads) once per graph, in its first step; no other step
    before the first logging reads either."""
    data, model = _task(task)
    loop = LoopConfig(
        max_steps=12, log_every=6, eval_every=12, eval_batches=1, warmup_steps=2, progress=False, batch_size=4
    )
    trainer = Trainer(model, data, loop, tmp_path, {"solver": "diffusion"})
    with counting(monkeypatch, trainer) as counter:
        summary = trainer.fit()
    assert summary["status"] == "completed" and summary["steps"] == 12
    graph = task in ("node_classifier", "difformer")
    assert [step for _, step in counter.outside if not (graph and step == 1)] == [], counter.outside
    assert "tolist" in counter.inside  # the counter sees the reads: the logged loss is one
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows if "loss" in row] == [6, 12]


def test_the_count_sees_a_read_in_a_step(tmp_path, monkeypatch):
    """The counter is not blind: a loss read in every step (as the loop once did) is counted outside the logging
    steps."""
    data, model = _task("vit")
    loop = LoopConfig(max_steps=4, log_every=4, eval_every=4, eval_batches=1, warmup_steps=0, progress=False)
    trainer = Trainer(model, data, loop, tmp_path, {"solver": "diffusion"})
    loss = trainer.objective.loss

    def reading(network, batch):
        value = loss(network, batch)
        float(value.detach())
        return value

    trainer.objective.loss = reading
    with counting(monkeypatch, trainer) as counter:
        trainer.fit()
    assert [step for name, step in counter.outside if name == "_local_scalar_dense"] == [1, 2, 3, 4]


def test_the_count_sees_a_host_to_device_copy_in_a_step(tmp_path, monkeypatch):
    """A tensor made from Python data in every step (the divergence watch once wrote its step with
    ``loss.new_tensor(step)``: on a GPU a pageable host-to-device copy the host waits for) is counted in every step."""
    data, model = _task("vit")
    loop = LoopConfig(max_steps=4, log_every=4, eval_every=4, eval_batches=1, warmup_steps=0, progress=False)
    trainer = Trainer(model, data, loop, tmp_path, {"solver": "diffusion"})

    watch = Trainer._watch

    def watching(self, loss):
        loss.new_tensor(self.step + 1.0)  # as the watch once made its step
        return watch(self, loss)

    monkeypatch.setattr(Trainer, "_watch", watching)
    with counting(monkeypatch, trainer) as counter:
        trainer.fit()
    assert counter.outside == [("lift_fresh", step) for step in (1, 2, 3, 4)]


def test_the_count_tells_a_copy_from_the_host_from_a_fill_on_the_device(monkeypatch):
    """Counted: a tensor from Python data (``torch.tensor``, ``new_tensor``, a list as an index), a ``.to`` or
    ``copy_`` from a CPU tensor into another device's (the meta device stands in for a GPU), a read; not counted: a
    fill, a Python number as an operand, a copy within the host, a tensor from Python data on a device other than the
    step's."""
    x = torch.ones(3)

    def found(device, *steps):
        counter = Conversions(device=device)
        with monkeypatch.context() as patches:
            _count_reads(patches, counter)
            with counter:
                for step in steps:
                    step()
        return [name for name, _ in counter.outside]

    made = (lambda: torch.tensor(2.0), lambda: x.new_tensor([1.0]), lambda: x[[0, 2]])
    copied = (lambda: x.to("meta"), lambda: torch.empty(3, device="meta").copy_(x))
    assert found("cpu", *made, *copied) == ["lift_fresh"] * 3 + ["_to_copy", "copy_"]
    assert found("meta", *made, *copied) == ["_to_copy", "copy_"]  # the step on another device: made on the host
    assert found("cpu", lambda: x.tolist(), lambda: x[0].item()) == ["tolist", "_local_scalar_dense"]
    kept = (
        lambda: torch.full_like(x, 3.0),
        lambda: torch.zeros(2),
        lambda: x * 2.0,
        lambda: torch.where(x > 0, x, 0.0),
        lambda: x.to(torch.float64),
        lambda: torch.empty(3).copy_(x),
        lambda: torch.stack([torch.full_like(x[0], 1.0), x[1]]),
    )
    assert found("cpu", *kept) == []


def test_a_non_finite_loss_is_caught_at_the_next_check_and_named_by_its_step(tmp_path):
    """NaN from step 3 on, logging every 5 steps and saving every 2: the save at step 4 is refused, the error names
    step 3, and last.pt stays the good one of step 2."""
    data, model = _task("vit")
    loop = LoopConfig(
        max_steps=10, log_every=5, eval_every=2, eval_batches=1, warmup_steps=0, progress=False, batch_size=4
    )
    trainer = Trainer(model, data, loop, tmp_path, {"solver": "diffusion"})
    loss = trainer.objective.loss
    trainer.objective.loss = lambda network, batch: (
        loss(network, batch) * (float("nan") if trainer.step + 1 >= 3 else 1.0)
    )
    with pytest.raises(trainer_module.TrainingDiverged, match=r"loss is nan at step 3: .*\(step 2\)"):
        trainer.fit()
    assert trainer.step == 4 and load_checkpoint(tmp_path / "last.pt")["step"] == 2
    history = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    assert history[-1]["event"] == "diverged" and history[-1]["step"] == 3


@pytest.mark.parametrize("at", [3, 6])  # an evaluation in the run, and the last one
def test_a_signal_during_an_evaluation_ends_it_before_its_next_batch(at, tmp_path):
    data, model = _task("vit", n=160)
    loop = LoopConfig(  # the whole validation split, two items a batch: many batches
        max_steps=6, log_every=1, eval_every=3, eval_batches=0, warmup_steps=0, progress=False, batch_size=2
    )
    trainer = Trainer(model, data, loop, tmp_path, {"solver": "diffusion"})
    batches = []
    forward = model.forward

    def evaluating(*args, **kwargs):
        if not model.training:
            batches.append(trainer.step)
            if trainer.step == at and batches.count(at) == 1:
                os.kill(os.getpid(), signal.SIGTERM)  # the run's handler only records it
        return forward(*args, **kwargs)

    model.forward = evaluating
    summary = trainer.fit()
    assert len(data.splits["val"][1]) > 2 * loop.batch_size  # there were batches left to skip
    assert batches.count(at) == 1  # the batch during which the signal came, and no other
    assert summary["status"] == "interrupted" and summary["signal"] == signal.SIGTERM and summary["steps"] == at
    assert load_checkpoint(tmp_path / "last.pt")["step"] == at
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert not [row for row in rows if row["step"] == at and "val_loss" in row]  # a cut evaluation is not logged
    assert summary["test"] is None


def test_train_compile_takes_torch_compiles_modes(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(torch, "compile", lambda module, **options: seen.append(options) or module)
    data, model = _task("vit")
    for value in (True, "default", "reduce-overhead", "max-autotune", "fullgraph", False, "off"):
        Trainer(model, data, LoopConfig(compile=value, progress=False), tmp_path, {})
    assert seen == [{}, {}, {"mode": "reduce-overhead"}, {"mode": "max-autotune"}, {"fullgraph": True}]
    assert [compile_mode(v) for v in (True, False, "off", "fullgraph")] == ["default", None, None, "fullgraph"]
    with pytest.raises(ValueError, match=r"^train.compile must be one of true, false, off, default, reduce-overhead"):
        LoopConfig(compile="fast")
