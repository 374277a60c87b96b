"""Text from a character-level language-model run: its model rebuilt from its checkpoint, and the samples the
training loop takes.

:func:`load` reads a run's checkpoint with ``torch.load(weights_only=True)`` (no code is unpickled), rebuilds its
model (``CausalLM``) from the config stored there, and returns it with its vocabulary. The config reaches only the
package's own builders: the model's ``_target_`` must name a registered task model that continues text
(:func:`text_models`, looked up in :data:`odeformer.tasks.TASK_MODELS`, never imported) and the solver a registered
preset, scheme or continuous solver; a scheme of your own that the run names (``solver=module.Class``) is imported only
if the caller names the same class (``stepper``, the command line's ``--stepper``), never because a file says so.
The vocabulary is the one the run stored (runs before it did are read from their dataset, under ``data.root`` or
``$ODEFORMER_DATA``). What cannot be used is one line (:class:`SampleError`).

:class:`EvalSample` is what the training loop calls at each evaluation of a character-level run: a short sample,
logged to ``metrics.jsonl`` and shown (the last one) in the run's summary.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ...generate import sample_text
from ...tasks import TaskSpec
from .bounds import check_config
from .builder import SOLVER_TARGETS, check_memory, check_solver, make_solver, target
from .checkpoints import load_checkpoint, load_weights
from .identity import model_targets, run_record


class SampleError(ValueError):
    """Input ``odeformer-sample`` cannot use; reported in one line."""


def vocabulary(meta: dict[str, Any]) -> list[str] | None:
    """A character-level dataset's vocabulary (``meta["itos"]``, one character per token), else ``None``."""
    itos = meta.get("itos")
    if isinstance(itos, (list, tuple)) and itos and all(isinstance(ch, str) and len(ch) == 1 for ch in itos):
        return list(itos)
    return None


class EvalSample:
    """A short sample of a character-level model, taken at each evaluation of its training run.

    The prompt is a newline (the vocabulary's first character if it has none), the continuation ``tokens``
    characters at temperature 1, drawn with a generator seeded by the run's seed: successive samples differ only
    because the model does, and the training's random state is not touched.
    """

    def __init__(self, itos: list[str], seed: int = 0, tokens: int = 100):
        self.itos, self.seed, self.tokens = itos, seed, tokens
        self.prompt = "\n" if "\n" in itos else itos[0]

    @classmethod
    def of(cls, data: Any, model: nn.Module, seed: int = 0) -> EvalSample | None:
        """The sampler for a character-level text run whose model generates; ``None`` for any other run."""
        itos = vocabulary(getattr(data, "meta", {}) or {})
        if getattr(data, "kind", None) != "text" or itos is None or not hasattr(model, "generate"):
            return None
        return cls(itos, seed)

    def __call__(self, model: nn.Module) -> str:
        generator = torch.Generator(device=next(model.parameters()).device).manual_seed(self.seed)
        return sample_text(model, self.itos, self.prompt, self.tokens, generator=generator)


def text_models() -> dict[str, TaskSpec]:
    """The registered task models (:data:`odeformer.tasks.TASK_MODELS`) that continue text: trained on text, sized
    by its vocabulary alone, with a ``generate`` method; by their config's ``_target_``."""
    return {
        target: spec
        for target, spec in model_targets().items()
        if spec.data == "text" and spec.sizes == ("vocab_size",) and callable(getattr(spec.model, "generate", None))
    }


def build_model(
    config: dict[str, Any], vocab_size: int, stepper: str | None = None, source: Path | None = None
) -> nn.Module:
    """The run's model (a registered text model, e.g. ``CausalLM``) from its stored config (read from ``source``),
    checked as the builder checks a config (:func:`~odeformer.app.run.bounds.check_config`, the memory it would take
    at ``vocab_size``, :func:`~odeformer.app.run.builder.check_memory`, then the solver through the package's
    registered builders only, :func:`~odeformer.app.run.builder.check_solver`): the model's
    ``_target_`` is looked up in the task registry, never imported."""
    if not all(isinstance(config.get(key), dict) for key in ("solver", "model")) or not isinstance(
        config.get("data", {}), dict
    ):
        raise SampleError(
            f"{source or 'the checkpoint'} stores no run config (solver and model, and data if any, each a mapping), "
            "so its model cannot be rebuilt."
        )
    config = check_config(config, source)
    models = text_models()
    spec = models.get(config["model"].get("_target_"))
    if spec is None:
        names = ", ".join(s.model.__name__ for s in models.values())
        raise SampleError(
            f"odeformer-sample continues text with a {names} run; this run's model is "
            f"{config['model'].get('_target_')!r}."
        )
    one = {**config, "data": {"batch_size": 1}}  # what sampling holds: one sequence, no gradients
    check_memory(one, {"vocab_size": vocab_size}, source, training=False)  # the sizes a file sets, before building
    solver = config["solver"]
    build = target(solver, SOLVER_TARGETS, "solver", source)
    chosen = make_solver(build, solver, check_solver(solver, source, stepper), source)
    arguments = {k: v for k, v in config["model"].items() if not k.startswith("_")}
    try:
        return spec.model(vocab_size=vocab_size, solver=chosen, **arguments)
    except TypeError as error:
        raise SampleError(f"the run's model config does not fit {spec.model.__name__}: {error}.") from None


def load(run_dir: str | Path, checkpoint: str = "best.pt", stepper: str | None = None) -> tuple[nn.Module, list[str]]:
    """The run's model (the checkpoint's weights, eval mode, on the CPU) and its vocabulary."""
    run = Path(run_dir)
    if not run.is_dir():
        raise SampleError(f"{run} does not exist or is not a folder; give a run directory (one holding {checkpoint}).")
    path = run / checkpoint
    if not os.path.lexists(path):  # anything else there is the checkpoint reader's to refuse
        raise SampleError(
            f"{path} does not exist: the run has not evaluated yet (best.pt is written at its first evaluation); "
            "try --checkpoint last.pt."
        )
    payload = load_checkpoint(path)  # torch.load(..., weights_only=True)
    record = run_record(payload)
    config = record.get("config") if isinstance(record.get("config"), dict) else {}
    itos = record.get("vocabulary")
    itos = list(itos) if isinstance(itos, str) else _dataset_vocabulary(config)
    if len(set(itos)) != len(itos):
        raise SampleError(
            f"{path} stores a vocabulary of {len(itos)} characters of which only {len(set(itos))} differ; a "
            "vocabulary holds each character once (one per token). Use a checkpoint written by odeformer-train."
        )
    model = build_model(config, len(itos), stepper, path)
    weights = payload.get("best_model") if checkpoint == "last.pt" and payload.get("best_model") else payload["model"]
    if weights is None:
        raise SampleError(f"{path} holds no weights yet (the run has not evaluated).")
    load_weights(model, weights, path)
    return model.eval(), itos


def _dataset_vocabulary(config: dict[str, Any]) -> list[str]:
    """The vocabulary of a run that did not store one: its dataset's, read through the registered loaders."""
    from ...data import DATASETS, load

    data = config.get("data") or {}
    name = data.get("name")
    if name not in DATASETS:
        raise SampleError(f"the run stores no vocabulary and its dataset {name!r} is not registered.")
    itos = vocabulary(load(name, data.get("root"), **(data.get("options") or {})).meta)
    if itos is None:
        raise SampleError(f"the run's dataset {name!r} is not character-level: there are no characters to print.")
    return itos
