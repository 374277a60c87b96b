"""A run's config checked once, without torch (:func:`check_config`, whose :class:`Checked` value the builder and the
loop take as it is): by ``odeformer-train`` on its command line before anything starts, by ``odeformer-compare`` for
every row, by a run as it starts, and by the builder and ``odeformer-sample`` for a config read from a file
(``source``, named in the error). A file does not set what a command costs. One bound per quantity: the layers of a
forward pass (:data:`MAX_DEPTH`, also a refinement's ``depth · k``), of a weight-tied stack (:data:`MAX_TIED_DEPTH`),
the context (:data:`MAX_LEN`), a scheme's stages and coefficients (:data:`MAX_STAGES`, :data:`MAX_COEFFICIENT`), the
seeds of a table (:data:`MAX_SEEDS`), the points of a learning-rate grid (:data:`MAX_LR_GRID`) and a measured step
cost (:data:`MAX_COST`)."""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path
from typing import Any

from .config import CONTINUOUS_TARGET, FLOAT32_MAX, FLOAT32_TINY, LoopConfig, UsageError
from .upgrade import upgrade_config


def source_prefix(source: Path | None) -> str:
    """``"<file>: "`` for a config read from a file (what an error names first), else nothing."""
    return f"{source}: " if source is not None else ""


_from = source_prefix

POSITIVE = ("depth", "dim", "heads", "mlp_hidden", "max_len", "patch_size")


def check_sizes(config: dict[str, Any], source: Path | None = None) -> None:
    """Every size of the model and the batch a positive int (``model.mlp_hidden`` may be null)."""
    model, data = config["model"], config.get("data") or {}
    checks = [(f"model.{key}", model[key]) for key in POSITIVE if key in model and model[key] is not None]
    checks.append(("data.batch_size", data.get("batch_size", 1)))
    for key, value in checks:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UsageError(f"{_from(source)}{key} must be a positive int, got {value!r}.")
    ratio = model.get("mlp_ratio")
    if (
        model.get("mlp_hidden") is None
        and ratio is not None
        and not (isinstance(ratio, (int, float)) and math.isfinite(ratio) and int(ratio * model["dim"]) >= 1)
    ):
        raise UsageError(
            f"{_from(source)}model.mlp_ratio={ratio!r} gives an FFN of {ratio!r} x {model['dim']} hidden units; it "
            "must give at least 1."
        )


MAX_DEPTH = 100_000
"""The most layer steps one forward pass may take (``model.depth``, a refined model's ``depth · k``, a continuous
solver's ``steps`` and ``max_steps``): a bound on
the time a forward pass takes, which the memory estimate does not see."""
MAX_TIED_DEPTH = 10_000
"""The most layers a weight-tied stack (``model.tie_weights``) may have: each is a module of its own, built one by one
(about a millisecond each), while the memory estimate, which counts the one shared block, bounds nothing."""
MAX_LEN = 1_000_000
"""The longest context ``model.max_len`` may ask for (its position table is allocated whole)."""
MAX_STAGES = 64
"""The most stages a scheme given by coefficients may have (``solver.options`` ``A``, ``b``, ``drifts``, ...)."""
MAX_COEFFICIENT = 1e6
"""The largest magnitude a scheme's coefficient may have (a step ``a · dt`` must stay a float32 number)."""
MAX_SEEDS = 1000
"""The most seeds one row of a table (``odeformer-compare --seeds``, a section's ``seeds``) may have."""
MAX_LR_GRID = 8
"""The most points a comparison's learning-rate grid (``odeformer-compare --lr-grid``) may have: each row trains one
run per point before its seeds."""
MAX_COST = 1000.0
"""A row's step cost against the reference's lies within ``[1 / MAX_COST, MAX_COST]``, or it is no measurement."""


def check_cost(config: dict[str, Any], source: Path | None = None) -> None:
    """Bounds on what the memory estimate does not measure, the same for a command line and for a config read from a
    file (``source``): the depth (:data:`MAX_DEPTH`, :data:`MAX_TIED_DEPTH` with tied weights), a continuous
    solver's ``steps`` and ``max_steps`` (:data:`MAX_DEPTH`), the context (:data:`MAX_LEN`) and a coefficient
    scheme's stages and coefficients (:func:`check_stages`). A file does not set what a command costs."""
    model = config["model"]
    depth = model.get("depth")
    for key, bound in (("depth", MAX_DEPTH), ("max_len", MAX_LEN)):
        value = model.get(key)
        if isinstance(value, int) and value > bound:
            raise UsageError(f"{_from(source)}model.{key}={value} is more than the {bound} allowed.")
    if model.get("tie_weights") and isinstance(depth, int) and depth > MAX_TIED_DEPTH:
        raise UsageError(
            f"{_from(source)}model.depth={depth} with model.tie_weights=true is more than the {MAX_TIED_DEPTH} "
            "layers a tied stack may have (each is built as a module of its own)."
        )
    solver = config.get("solver") or {}
    if isinstance(solver, dict) and solver.get("_target_") == CONTINUOUS_TARGET:
        for key in ("steps", "max_steps"):  # a continuous solver's steps over [0, T]: a forward's layer steps
            value = solver.get(key)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_DEPTH
            ):
                raise UsageError(
                    f"{_from(source)}solver.{key}={value!r}: a continuous solver's {key} is a whole number from 1 to "
                    f"{MAX_DEPTH} (the steps one forward pass may take)."
                )
    check_stages(config, source)


MAX_REFINE = 64
"""The finest resolution a refinement takes: 64 steps per layer step."""


def is_resolution(k: Any) -> bool:
    """Whether ``k`` can be a refinement's resolution: a whole number from 2 to :data:`MAX_REFINE` (each layer's step
    as ``k`` steps), or ``1/m`` (``0.5``: every other layer over twice the step)."""
    if isinstance(k, bool) or not isinstance(k, (int, float)) or not (math.isfinite(k) and 0 < k <= MAX_REFINE):
        return False
    if k >= 1:
        return k == int(k) and k >= 2
    return abs(1 / round(1 / k) - k) <= 1e-12


def check_refinement(parts: list[float], depth: int = 1, source: Path | None = None) -> None:
    """A refinement's resolutions (:func:`is_resolution`), at most 16 of them, each keeping the refined forward's
    ``depth · k`` layer steps within :data:`MAX_DEPTH`."""
    if not parts or len(parts) > 16 or not all(is_resolution(k) for k in parts):
        shown = " ".join(f"{k:g}" if isinstance(k, (int, float)) else repr(k) for k in parts or [])
        raise UsageError(
            f"{_from(source)}a refinement takes 1 to 16 resolutions: whole numbers from 2 to {MAX_REFINE} (finer), "
            f"or 1/m such as 0.5 (coarser: every m-th layer), got {shown or 'none'}."
        )
    top = MAX_DEPTH // max(depth, 1)
    if max(parts) > top:
        raise UsageError(
            f"{_from(source)}a refinement by k={max(parts):g} of a depth-{depth} model takes "
            f"{depth * max(parts):g} layer steps per forward, more than the {MAX_DEPTH} allowed; give k up to {top}."
        )


def check_lr_grid(words: list[str]) -> list[float]:
    """A learning-rate grid as factors of ``train.lr`` (``["0.5", "1", "2"]``): 1 to :data:`MAX_LR_GRID` distinct
    positive finite numbers, each at most 1e6 and at least 1e-6 (a factor beyond moves the learning rate out of any
    run's range); anything else is one line saying what a grid takes."""
    allowed = (
        f"--lr-grid takes 1 to {MAX_LR_GRID} distinct positive factors of train.lr from 1e-06 to 1e+06 (e.g. 0.5 1 2)"
    )
    if not words:
        raise UsageError(f"{allowed}; got none.")
    if len(words) > MAX_LR_GRID:
        raise UsageError(f"{allowed}; got {len(words)} (each costs every row a run).")
    factors = []
    for word in words:
        try:
            factor = float(word)
        except ValueError:
            raise UsageError(f"{allowed}; {word!r} is not a number.") from None
        if not (math.isfinite(factor) and 1e-6 <= factor <= 1e6):
            raise UsageError(f"{allowed}; got {word}.")
        if factor in factors:
            raise UsageError(f"{allowed}; {word} is given twice.")
        factors.append(factor)
    return factors


def _coefficients(value: Any) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return [c for item in value for c in _coefficients(item)]
    return [value]


def check_stages(config: dict[str, Any], source: Path | None = None) -> None:
    """A scheme given by coefficients has at most :data:`MAX_STAGES` stages, and each coefficient (a number, or a
    fraction such as ``1/2``) is at most :data:`MAX_COEFFICIENT` in magnitude (checked before it is built: deriving
    its claims costs time with every stage, and a step ``a · dt`` beyond float32 fails mid-training)."""
    options = (config.get("solver") or {}).get("options") or {}
    if not isinstance(options, dict):
        return
    for key in ("A", "b", "c", "bbar", "drifts", "kicks"):
        value = options.get(key)
        if isinstance(value, (list, tuple)) and len(value) > MAX_STAGES:
            raise UsageError(
                f"{_from(source)}solver.options.{key} has {len(value)} stages, more than the {MAX_STAGES} allowed."
            )
        for c in _coefficients(value) if value is not None else ():
            try:
                number = float(Fraction(str(c).strip())) if isinstance(c, str) else c
            except (ValueError, ZeroDivisionError, OverflowError):
                continue  # not a number: the scheme's own parser says what is wrong
            if isinstance(number, (int, float)) and not (math.isfinite(number) and abs(number) <= MAX_COEFFICIENT):
                raise UsageError(
                    f"{_from(source)}solver.options.{key} holds the coefficient {c}; a coefficient is a finite number "
                    f"of magnitude at most {MAX_COEFFICIENT:g}."
                )


def _number(node: Any, key: str) -> Any:
    value = node.get(key) if isinstance(node, dict) else None
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def check_values(config: dict[str, Any], source: Path | None = None) -> None:
    """The model's values its config's types accept that no run can use, each one line naming the key and what is
    allowed: a ``model.dt`` that is not a positive normal float32 (``1e-320`` is 0 there; ``1e308`` is inf), a
    ``model.dropout`` outside [0, 1), a ``model.norm_eps`` that is not positive and finite (the loop's values are
    :class:`~odeformer.app.run.config.LoopConfig`'s to check)."""
    model = config.get("model") or {}
    dt = _number(model, "dt")
    if dt is not None and not (math.isfinite(dt) and abs(dt) <= FLOAT32_MAX):
        raise UsageError(
            f"{_from(source)}model.dt={dt} is not a finite float32 step size; give a positive number below 3.4e38."
        )
    if dt is not None and dt <= 0:
        raise UsageError(f"{_from(source)}model.dt={dt}: dt must be positive and finite (a step forward in depth).")
    if dt is not None and dt < FLOAT32_TINY:
        raise UsageError(f"{_from(source)}model.dt={dt} is 0 in float32; give a step of at least {FLOAT32_TINY:.3g}.")
    dropout = _number(model, "dropout")
    if dropout is not None and not (0 <= dropout < 1):
        raise UsageError(f"{_from(source)}model.dropout={dropout} must be a probability in [0, 1).")
    eps = _number(model, "norm_eps")
    if eps is not None and not (math.isfinite(eps) and 0 < eps <= FLOAT32_MAX):
        raise UsageError(f"{_from(source)}model.norm_eps={eps} must be a positive finite number (e.g. 1e-5).")


class Checked(dict):
    """A resolved config :func:`check_config` passed, with the loop's config it checked (``loop``: None for a config
    read from a file, which trains nothing) and the file it was read from (``source``)."""

    def __init__(self, config: dict[str, Any], loop: LoopConfig | None = None, source: Path | None = None):
        super().__init__(config)
        self.loop, self.source = loop, source


def check_config(config: dict[str, Any], source: Path | None = None) -> Checked:
    """The one check of a resolved config before it is built or trained (a :class:`Checked` one passes as it is).
    Composed now: its values, sizes and cost, then the loop's own (:class:`~odeformer.app.run.config.LoopConfig`:
    ``train.max_steps`` at least 1, ...) and ``train.check_scheme`` against a continuous-depth solver (whose model
    takes no layer steps to check). Read from the file ``source``: read as today's
    (:func:`~odeformer.app.run.upgrade.upgrade_config`), then its sizes and cost (its ``train`` settings were another
    command's)."""
    if isinstance(config, Checked):
        return config
    if source is not None:
        config = upgrade_config(config)
    else:
        check_values(config)
    check_sizes(config, source)
    check_cost(config, source)
    loop = None
    if source is None and config.get("train"):
        try:
            loop = LoopConfig(**config["train"], batch_size=(config.get("data") or {}).get("batch_size", 1))
        except (TypeError, ValueError) as error:
            raise UsageError(str(error)) from None
        depth = (config.get("model") or {}).get("depth")
        coarse = [k for k in loop.resolutions if k < 1 and isinstance(depth, int) and depth % round(1 / k)]
        if coarse:
            m = round(1 / coarse[0])
            raise UsageError(
                f"train.resolutions={list(loop.resolutions)}: {coarse[0]:g} = 1/{m} coarsens to every {m} layers' "
                f"span, and a coarsening 1/m needs m dividing the depth ({depth}); give a divisor of it."
            )
        if loop.check_scheme and (config.get("solver") or {}).get("_target_") == CONTINUOUS_TARGET:
            raise UsageError(
                "train.check_scheme checks the steps of a model's layers, and a continuous-depth solver takes none "
                "of its own (its adaptive solver is checked by its library): leave train.check_scheme off."
            )
    return Checked(config, loop, source)
