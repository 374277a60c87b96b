"""What a start or a resume may do in a run directory, and the command that resumes a run.

Starting a run where one exists, resuming one that is not there, or resuming one with a config other than its own
(beyond :data:`RESUME_MAY_CHANGE`, and after a stop for divergence :data:`AFTER_DIVERGENCE`) is refused before
anything is written, in one line that gives the command to resume with (:func:`resume_command`).
"""

from __future__ import annotations

import math
import re
import shlex
from pathlib import Path
from typing import Any

import torch
import yaml

from .. import files
from .checkpoints import CheckpointError, load_checkpoint
from .history import diverged_after, non_finite
from .identity import IDENTITY, describe, run_record
from .locks import RunDirectoryError
from .upgrade import upgrade_config, upgrade_overrides, with_added

# -- commands a user is told to run -------------------------------------------------------------------------------


def hydra_quote(value: str) -> str:
    """``value`` as Hydra's override grammar reads it back unchanged: as it is when it is plain, else double-quoted
    (spaces, non-ASCII characters, quotes, ``${``)."""
    if re.fullmatch(r"[A-Za-z0-9_./:+\-]+", value):
        return value
    quoted = re.sub(r'(\\*)"', lambda m: m.group(1) * 2 + '\\"', value)
    quoted = re.sub(r"(\\+)$", lambda m: m.group(1) * 2, quoted).replace("${", "\\${")
    return f'"{quoted}"'


def resume_command(out_dir: Path, overrides: list[str] | None, *extra: str) -> str:
    """The shell command that resumes the run in ``out_dir``: its own ``overrides`` (where known), ``out_dir``
    quoted for Hydra and for the shell, and ``extra`` overrides."""
    kept = [o for o in overrides or [] if not o.lstrip("+~").startswith(("train.out_dir=", "train.resume="))]
    command = [*kept, f"train.out_dir={hydra_quote(str(out_dir))}", "train.resume=true", *extra]
    return "odeformer-train " + " ".join(shlex.quote(o) for o in command)


# -- what a resume may change -------------------------------------------------------------------------------------

RESUME_MAY_CHANGE = (
    "train.max_steps",  # training longer is the usual reason to resume (the cosine schedule stretches to it)
    "train.resume",
    "train.out_dir",
    "train.device",
    "train.compile",
    "train.progress",
    "train.log_every",  # how often the loss is logged
    "train.checkpoint_every",  # how often last.pt is written
    "train.threads",  # how many CPU threads compute it
    "data.root",  # where the same dataset's files are (Hydra's override_dirname leaves it out too)
    "model.checkpoint",  # activation checkpointing: recomputes the same layers in the backward pass
)
"""The config keys a resumed run may change: where and how it runs and what it writes, never what it computes
(anything else — the solver, the model, the data, the batch size, the optimiser and its schedule, the seed, the
evaluation — must be the run's own: the checkpoint's state only continues the run it came from)."""

AFTER_DIVERGENCE = ("train.lr", "train.grad_clip")
"""What a resume may change after the run stopped for divergence (its ``history.jsonl`` says so): a lower learning
rate (the whole schedule scaled down from the checkpoint's step on) and another gradient clip. The change is recorded
in the run's history and in its later checkpoints' config."""


def check_run_directory(
    out_dir: Path, resume: bool, config: dict[str, Any] | None = None
) -> list[tuple[str, Any, Any]]:
    """Refuse to write over an earlier run, to resume one that is not there, or (given the resolved ``config`` of
    this command) to resume one with another config; called before anything is written. Returns the changes a
    resume after a divergence makes (:data:`AFTER_DIVERGENCE`), ``(key, run's value, new value)``."""
    last = out_dir / "last.pt"
    if resume and not last.exists():
        why = "" if out_dir.exists() else " (the folder does not exist)"
        raise RunDirectoryError(
            f"train.resume=true continues an existing run, but {out_dir} holds none (no last.pt){why}; start the run "
            "without train.resume, or point train.out_dir at a stopped run's directory."
        )
    if not resume and (last.exists() or (out_dir / "summary.json").exists()):
        raise RunDirectoryError(
            f"{out_dir} already holds a run; pass train.resume=true to continue it or choose another train.out_dir."
        )
    if resume and config is not None:
        payload = load_checkpoint(last)
        check_resumable(last, payload)
        where = non_finite(payload)
        if where is not None:
            raise CheckpointError(
                f"{last} holds non-finite values in its {where} state (written as the run diverged), so it cannot "
                "continue the run; start a new run with a smaller train.lr or model.dt."
            )
        return check_resume_config(out_dir, payload, config)
    return []


def check_resumable(last: Path, payload: dict[str, Any]) -> None:
    """The training state ``last.pt`` holds besides its weights, checked before a resume restores it: ``step`` an
    integer of at least 0, ``wall`` a finite number of at least 0, ``best_step`` none or an integer in
    ``[0, step]``, ``best_val`` none or finite, the RNG state a byte tensor of torch's own length, and the sampler's
    generator state of a generator's length, its ``order`` a one-dimensional integer tensor holding a permutation of
    ``0 .. len(order) - 1`` and its ``position`` an integer in ``[0, len(order)]`` (at least 0 before the first
    epoch, whose order is still empty). Anything else is a one-line :class:`CheckpointError` naming ``last.pt`` and the
    key."""

    def bad(key: str, allowed: str, value: Any) -> CheckpointError:
        shown = f"a {type(value).__name__}" if isinstance(value, (torch.Tensor, dict, list, tuple)) else repr(value)
        return CheckpointError(
            f"{last} cannot be resumed: its {key} must be {allowed}, not {shown[:60]}; move it away or start a new run."
        )

    def integer(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)

    def real(value: Any) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)

    def state(value: Any, like: torch.Tensor) -> bool:
        return isinstance(value, torch.Tensor) and value.dtype == torch.uint8 and value.shape == like.shape

    step = payload.get("step")
    if not integer(step) or step < 0:
        raise bad("step", "an integer of at least 0", step)
    wall = payload.get("wall", 0.0)
    if not real(wall) or wall < 0:
        raise bad("wall", "a finite number of seconds of at least 0", wall)
    best_step, best_val = payload.get("best_step"), payload.get("best_val")
    if best_step is not None and (not integer(best_step) or not 0 <= best_step <= step):
        raise bad("best_step", f"none or an integer from 0 to the step ({step})", best_step)
    if best_val is not None and not real(best_val):
        raise bad("best_val", "none or a finite number", best_val)
    rng = payload.get("rng")
    if not isinstance(rng, dict) or not state(rng.get("torch"), torch.get_rng_state()):
        raise bad("rng.torch", f"torch's RNG state ({torch.get_rng_state().numel()} bytes)", rng)
    sampler = payload.get("sampler")
    if sampler is None:
        return
    if not isinstance(sampler, dict):
        raise bad("sampler", "none or a sampler's state", sampler)
    if "generator" in sampler and not state(sampler["generator"], torch.Generator().get_state()):
        raise bad("sampler.generator", "a generator's state", sampler["generator"])
    if "position" in sampler:
        order = sampler.get("order")
        if order is not None and (
            not isinstance(order, torch.Tensor) or order.dim() != 1 or order.is_floating_point() or order.is_complex()
        ):
            raise bad("sampler.order", "none or a one-dimensional integer tensor", order)
        length = order.numel() if order is not None else 0
        if length and (int(order.min()) < 0 or int(order.max()) >= length):  # a permutation of 0 .. n-1
            raise bad(
                "sampler.order",
                f"a permutation of 0 to {length - 1}",
                f"indices {int(order.min())} to {int(order.max())}",
            )
        position = sampler["position"]
        if not integer(position) or position < 0 or (length and position > length):
            raise bad("sampler.position", f"an integer from 0 to the order's length ({length})", position)


class _Absent:
    """A setting one side of a comparison does not have (shown as ``absent``)."""

    def __repr__(self) -> str:
        return "absent"

    __str__ = __repr__


ABSENT = _Absent()
"""The value :func:`config_differences` gives a key on the side that lacks it."""


def config_differences(stored: dict[str, Any], config: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """``(dotted key, stored value, new value)`` for every setting of two resolved configs that differs, outside
    :data:`RESUME_MAY_CHANGE`. An ``options`` node (a stepper's or a loader's arguments) is one setting, compared
    whole. A key only one side has differs too (its value on the other side is :data:`ABSENT`): a setting the run did
    not have, or one this command does not, is not known to be the run's own (a rename since is read as today's by
    :func:`~odeformer.app.run.upgrade.upgrade_config` before this compares)."""
    a, b = _settings(stored), _settings(config)
    keys = [*a, *(k for k in b if k not in a)]
    return [
        (k, a.get(k, ABSENT), b.get(k, ABSENT))
        for k in keys
        if k not in RESUME_MAY_CHANGE and (k not in a or k not in b or a[k] != b[k])
    ]


def _settings(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, dict) and node and not prefix.endswith("options."):
        return {k: v for key, value in node.items() for k, v in _settings(value, f"{prefix}{key}.").items()}
    return {prefix[:-1]: node}


def check_config_shape(last: Path, stored: Any, config: dict[str, Any], prefix: str = "config") -> None:
    """The config ``last`` stores has this command's shape: a mapping wherever ``config`` (this command's) has one,
    and none where it has a plain value (an ``options`` node is one setting: only its own shape is checked), so that
    :func:`config_differences` compares setting with setting. Anything else (``config.solver: "x"``, a list for the
    whole config) is a one-line :class:`CheckpointError` naming ``last`` and the key."""
    if isinstance(stored, dict) == isinstance(config, dict):
        if isinstance(stored, dict) and not prefix.endswith(".options"):  # an options node is one setting
            for key in stored:
                if key in config:
                    check_config_shape(last, stored[key], config[key], f"{prefix}.{key}")
        return
    wanted = "a mapping" if isinstance(config, dict) else "a plain value, as this command's is"
    raise CheckpointError(
        f"{last} cannot be resumed: its {prefix} must be {wanted}, not a {type(stored).__name__}; move it away or "
        "start a new run."
    )


def check_resume_config(out_dir: Path, payload: dict[str, Any], config: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """Refuse to resume the run whose ``last.pt`` holds ``payload`` with a ``config`` that differs from the one it was
    started with (beyond :data:`RESUME_MAY_CHANGE`, and :data:`AFTER_DIVERGENCE` after a stop for divergence): one
    line naming a few differing keys and the command to resume with. A checkpoint without a stored config (another
    version's) is resumed only if the solver, model, data and depth it names are this command's. Returns the changes
    allowed after a divergence."""
    last = Path(out_dir) / "last.pt"
    record = run_record(payload)
    stored = upgrade_config(record.get("config"))  # a config of an earlier version, read as today's
    if stored is None:  # a checkpoint from before configs were stored
        _check_identity(last, record, config)
        return []
    check_config_shape(last, stored, config)
    differences = config_differences(with_added(stored, config), config)
    allowed: list[tuple[str, Any, Any]] = []
    diverged = diverged_after(out_dir, int(payload.get("step") or 0))
    if diverged is not None:
        allowed = [d for d in differences if d[0] in AFTER_DIVERGENCE]
        for key, old, new in allowed:
            if key == "train.lr" and not new < old:
                raise RunDirectoryError(
                    f"after the divergence at step {diverged['step']}, a resume may lower train.lr (the run's is "
                    f"{old}), not raise it to {new}; resume with train.lr below {old}: "
                    + resume_command(
                        out_dir, own_overrides(run_overrides(out_dir, payload) or [])[0], f"train.lr={_lower(old)}"
                    )
                )
        differences = [d for d in differences if d[0] not in AFTER_DIVERGENCE]
    if not differences:
        return allowed
    shown = ", ".join(f"{key} ({_show(old)} in the run, {_show(new)} now)" for key, old, new in differences[:3])
    more = f" and {len(differences) - 3} more" if len(differences) > 3 else ""
    overrides = run_overrides(out_dir, payload)
    if overrides is None:
        how = "the overrides it was started with"
    else:
        kept, dropped = own_overrides(overrides)
        left = (
            f"; {dropped} stored override{'s' if dropped > 1 else ''} that {'are' if dropped > 1 else 'is'} not one "
            "of the package's own settings (or that names a module) left out, add your own"
            if dropped
            else ""
        )
        how = f"its own overrides, as {last} stores them{left}: " + resume_command(out_dir, kept)
    may = ", ".join(RESUME_MAY_CHANGE + (AFTER_DIVERGENCE if diverged is not None else ()))
    raise RunDirectoryError(
        f"train.resume=true continues the run in {out_dir} with its own config, but this command changes {shown}"
        f"{more}; only {may} may differ. Resume with {how}"
    )


def _check_identity(last: Path, record: dict[str, Any], config: dict[str, Any]) -> None:
    """A ``last.pt`` without a stored config: resume it only into the solver, model, data and depth it names."""
    now = describe(config)
    missing = [key for key in IDENTITY if record.get(key) is None]
    if missing:
        raise RunDirectoryError(
            f"{last} stores no config and does not name its {', '.join(missing)} (written by another version of "
            "odeformer?), so this command cannot tell it continues the same run; start a new run in another "
            "train.out_dir."
        )
    differing = [f"{key} ({record[key]} in the run, {now[key]} now)" for key in IDENTITY if record[key] != now[key]]
    if differing:
        raise RunDirectoryError(
            f"{last} stores no config (written by another version of odeformer?) and was trained with another "
            f"{', '.join(differing)}; resume it with its own settings or start a new run in another train.out_dir."
        )


def _lower(lr: Any) -> str:
    return f"{float(lr) / 10:.3g}" if isinstance(lr, (int, float)) and math.isfinite(lr) else "<lower>"


def _show(value: Any) -> str:
    return repr(value) if isinstance(value, str) and not value else str(value)


_OWN_KEY = re.compile(r"^(experiment|solver|model|data|train)(\.[A-Za-z_]\w*)*$")
_NAMES_CODE = re.compile(r"^solver\.stepper$|^solver$")


def own_overrides(overrides: list[str]) -> tuple[list[str], int]:
    """The overrides among ``overrides`` (read from a file) that set the package's own groups and keys — a
    ``solver``, ``model``, ``data``, ``train`` or ``experiment`` choice or key, a ``+solver.options.<key>`` — with a
    plain value, and how many others were left out: a ``hydra.…`` key, a ``+``/``~`` on anything else, a value that
    interpolates (``${…}``), and a module named as a scheme (``solver=mod.Class``, or the old ``solver.stepper``:
    naming a module runs it, so a file never chooses one for a command it prints)."""
    kept, dropped = [], 0
    for override in overrides:
        key, sep, value = str(override).partition("=")
        plain = key.lstrip("+")
        allowed = (
            sep
            and not key.startswith("~")
            and (key == plain or (key == "+" + plain and plain.startswith("solver.options.")))
            and _OWN_KEY.match(plain)
            and "${" not in value
            and "\n" not in value
            and not (_NAMES_CODE.match(plain) and "." in value)
        )
        if allowed:
            kept.append(str(override))
        else:
            dropped += 1
    return kept, dropped


def run_overrides(out_dir: Path, payload: dict[str, Any]) -> list[str] | None:
    """The command-line overrides the run in ``out_dir`` was last run with: those stored in its checkpoint, else (an
    older checkpoint) those of the first config snapshot, ``.hydra/<date>_<time>/overrides.yaml``; None if neither.
    They are given in today's spelling (:func:`~odeformer.app.run.upgrade.upgrade_overrides`)."""
    stored = run_record(payload).get("overrides")
    if stored is not None:
        return upgrade_overrides([str(o) for o in stored])
    snapshots = sorted((out_dir / ".hydra").glob("*/overrides.yaml"))
    if not snapshots:
        return None
    try:
        overrides = yaml.safe_load(files.read_text(snapshots[0], limit=1 << 20))
    except (OSError, yaml.YAMLError, files.UnsafeFile):
        return None
    return upgrade_overrides([str(o) for o in overrides]) if isinstance(overrides, list) else None
