"""The training loop never waits on the host between two logging steps: every tensor-to-Python conversion of a run
(the calls that make the host wait for a GPU) happens in a logging, evaluation or checkpoint step, for every task
model; a non-finite loss is still caught (and named) at the next of those; a signal during an evaluation ends it
before its next batch; ``train.compile`` takes torch.compile's modes."""

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

ALLOWED = ("_read_loss", "_check_loss", "_log", "_checkpoint_and_evaluate", "_save_last", "_finish")
"""The trainer's methods that run at logging, evaluation and checkpoint steps, where the host may read."""


class Conversions(TorchDispatchMode):
    """Counts the syncing operators, and ``tolist`` / ``numpy`` (which read the data without one), split by whether
    they happen inside one of the :data:`ALLOWED` methods."""

    def __init__(self, trainer=None):
        super().__init__()
        self.trainer, self.depth, self.inside, self.outside = trainer, 0, [], []

    def note(self, name):
        """Outside the allowed methods, with the step being taken (1 for the first)."""
        if self.depth:
            self.inside.append(name)
        else:
            self.outside.append((name, self.trainer.step + 1 if self.trainer is not None else None))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._overloadpacket.__name__
        if name in SYNCING_OPS:
            self.note(name)
        return func(*args, **(kwargs or {}))


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
    for name in ("tolist", "numpy"):
        original = getattr(torch.Tensor, name)

        def read(self, *args, _original=original, _name=name, **kwargs):
            counter.note(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, read)
    with counter:
        yield counter


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
