"""``odeformer-train`` (= ``python -m odeformer.app.train``): the training command, and the only module importing
Hydra.

    odeformer-train                                     # the default experiment (configs/train.yaml)
    odeformer-train solver=full_wave model.depth=12 data=fashion_mnist
    odeformer-train solver=my_schemes.Yoshida4           # a scheme of your own, importable from the working directory
    odeformer-train experiment=cora_deep model.depth=32
    odeformer-train -m solver=diffusion,full_wave model.depth=4,8,16      # a sweep, summarised in one table
    torchrun --nproc_per_node=2 -m odeformer.app.train train.device=cpu   # DistributedDataParallel

It checks the command line by composing it (each value of a sweep once), hands it to Hydra, and trains each composed
configuration with :func:`odeformer.app.run.launch.train`; :func:`compose` and :func:`compose_config` give the same
composition to the other commands and the sweep engine.

Config groups are generated from the registries (:func:`odeformer.app.run.config.group_options`), read from the
package's table of them (:func:`odeformer.app.run.groups.groups`: ``--help`` and a usage error answer before torch is
imported) and stored in Hydra's ConfigStore; ``configs/`` (shipped inside the package as ``odeformer.configs``) holds
``train.yaml``, the experiments and their training settings. Bad input — an unknown option or key, a value of the
wrong type, ``dt <= 0``, heads not dividing dim, a missing data root, a corrupt checkpoint, a size that is not
positive or a model that cannot fit in memory, a run directory another run is writing — is one line on stderr and exit
code 2, before anything is written.
A diverged run (or a full disk) is one line and exit code 1; an interrupted one saves its checkpoint and exits 130
(SIGINT) or 143 (SIGTERM), which also stops a sweep.
"""

from __future__ import annotations

import contextlib
import difflib
import errno
import json
import os
import re
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hydra
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException, MissingConfigException, OverrideParseException
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from ...data import DatasetNotFound
from .. import files
from ..files import UnsafeFile, printable
from ..reporting.tables import sweep_table
from ..run.bounds import check_config
from ..run.config import Config, SolverConfig, UsageError
from ..run.groups import groups, solver_options_text
from ..run.locks import RunDirectoryBusy, RunDirectoryError, check_not_locked
from ..run.schemes import SHAPE, SchemeNameError, check_scheme_name, own_scheme
from . import EXPECTED, one_line

# torch (and what the run imports with it) is imported by run() and _main(), once the command line is checked: a
# usage error and --help answer without it (the config groups come from odeformer.app.run.groups' table)

CONFIG_MODULE = "odeformer.configs"

store = ConfigStore.instance()
store.store(name="config_schema", node=Config)
for _group, _nodes in groups().items():
    for _name, _node in _nodes.items():
        store.store(group=_group, name=_name, node=_node)

OmegaConf.register_new_resolver("odeformer_solver_options", solver_options_text, replace=True)  # --help's footer

_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$")


def register_user_solvers(overrides: list[str]) -> list[str]:
    """``solver=module.Class`` (also in a sweep's list, ``solver=diffusion,module.Class``): a scheme of the user's,
    spelled on the command line as in Python (``ViT(solver="module.Class")``), is a ``solver`` option of its own, the
    class in the layer its claims call for. Only the name is stored; the module is imported when the run is built
    (naming a module runs its code). Returns the names it added."""
    names, added = store.repo.get("solver", {}), []
    for override in overrides:
        key, _, value = override.partition("=")
        if key.lstrip("+~") != "solver" or not value:
            continue
        for choice in value.strip("[]").split(","):
            choice = choice.strip()
            if _DOTTED.match(choice) and f"{choice}.yaml" not in names:
                store.store(group="solver", name=choice, node=SolverConfig(name=choice))
                added.append(choice)
    return added


def _forget_solvers(added: list[str]) -> None:
    for name in added:
        store.repo["solver"].pop(f"{name}.yaml", None)


@contextlib.contextmanager
def _user_solvers(overrides: list[str]) -> Iterator[None]:
    """The command line's own solvers (:func:`register_user_solvers`) for the duration of one composition."""
    added = register_user_solvers(overrides)
    try:
        yield
    finally:
        _forget_solvers(added)


_FLAGS_WITH_VALUE = {"--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd", "--package", "-p",
                     "--experimental-rerun", "--info", "-i"}  # fmt: skip
_SKIP = {"--help", "-h", "--hydra-help", "--version", "--cfg", "-c", "--resolve", "--shell-completion", "-sc", "--info",
         "-i", "--experimental-rerun"}  # fmt: skip


@contextlib.contextmanager
def _initialized():
    """Hydra initialised on this package's configs."""
    from hydra import initialize_config_module

    GlobalHydra.instance().clear()
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        yield


def compose(overrides: list[str]) -> DictConfig:
    """The config ``odeformer-train <overrides>`` would run (Hydra's compose API; no run directory is made).

    Unknown options and keys and values of the wrong type are a one-line :class:`UsageError`, as are overrides beyond
    :func:`check_sizes` (before Hydra parses them).
    """
    from hydra import compose as hydra_compose

    check_sizes(overrides)
    with _user_solvers(overrides), _initialized():
        try:
            composed = hydra_compose(config_name="train", overrides=overrides)
            OmegaConf.to_container(composed, resolve=True)  # an interpolation that cannot resolve: one line, here
            return composed
        except (HydraException, OmegaConfBaseException) as error:
            raise UsageError(_one_line(error, overrides)) from None


def choices(group: str, overrides: list[str] | None = None) -> list[str]:
    """The options of a config group: the generated ones and YAML on the search path (as ``--help`` lists them)."""
    with _initialized():
        return _options(group, overrides)


def _options(group: str, overrides: list[str] | None = None) -> list[str]:
    """The options of a config group Hydra can see (generated ones, and YAML on a ``hydra.searchpath`` among
    ``overrides``)."""
    paths = [o for o in overrides or [] if o.lstrip("+").startswith("hydra.searchpath=")]
    names = GlobalHydra.instance().config_loader().get_group_options(group, config_name="train", overrides=paths)
    return sorted(names)


def _one_line(error: Exception, overrides: list[str]) -> str:
    """Hydra's and OmegaConf's composition errors as one sentence that says what is allowed."""
    text = str(error)
    if isinstance(error, MissingConfigException) or "Could not find '" in text:
        match = re.search(r"Could not (?:find|load) '([\w/]+)/([^']*)'", text)
        if match:
            group, value = match.groups()
            options = _options(group, overrides)
            near = difflib.get_close_matches(value, options, n=1, cutoff=0.6)
            hint = f"did you mean {group}={near[0]}? " if near else ""
            own = f" (or, for a scheme of your own, {SHAPE})" if group == "solver" and "." in value else ""
            return f"unknown {group} {value!r}; {hint}choose one of: {', '.join(options)}{own}."
    if isinstance(error, OverrideParseException):
        return f"cannot parse the override: {' '.join(text.split())}"
    found = re.search(
        r"In '([\w/.-]+)': ConfigKeyError raised while composing config:.*?full_key: ([\w.]+)", text, re.S
    )
    if found:  # a key in a YAML file of a config group that its schema does not have
        option, key = found.groups()
        parent, _, leaf = key.rpartition(".")
        if key == "solver.stepper":  # the old second spelling of a scheme of one's own
            return f"{option}: stepper is no key of a solver: a scheme of your own is its name (name: module.Class)."
        keys = _keys(_composed([o for o in overrides if o.lstrip("+").startswith("hydra.")]), parent)
        near = difflib.get_close_matches(leaf, keys, n=1)
        hint = f"did you mean {near[0]}? " if near else ""
        where = parent or "the config"
        return f"{option} sets an unknown key {key!r}; {hint}the keys of {where} are: {', '.join(keys)}."
    if getattr(error, "full_key", None) and "interpolation" in text:
        first = text.splitlines()[0]
        if "HydraConfig was not set" in first:
            first = "${hydra:...} is known to a running job only; give the value itself"
        return f"bad value for {error.full_key}: {first}"
    match = re.search(r"Could not (?:override|append to) '([^']+)'", text) or re.search(
        r"Error merging override \+?([\w.]+)=", text
    )
    cause = error.__cause__ or error
    if match:
        key = match.group(1)
        parent, _, leaf = key.rpartition(".")
        named = next((o.split("=", 1)[1] for o in overrides if o.lstrip("+~").startswith("solver.options.name=")), None)
        if key == "solver.options.name" and named is not None:  # the old spelling of a named scheme
            return f"a named scheme is picked by its name: solver={named} (solver=tableau takes coefficients)."
        if key == "solver.stepper":  # the old second spelling of a scheme of one's own
            path = next((o.split("=", 1)[1] for o in overrides if o.lstrip("+~").startswith(key + "=")), "")
            path = path or "module.Class"
            return f"solver.stepper is no key: a scheme of your own is picked by its path, solver={path}."
        if "not in struct" in str(cause) or "Key '" in str(cause):
            composed = _composed([o for o in overrides if not o.lstrip("+~").startswith(key + "=")])
            keys = _keys(composed, parent)
            near = [f"{parent + '.' if parent else ''}{k}" for k in difflib.get_close_matches(leaf, keys, n=1)]
            if not parent:  # a group's key given without its group (dt=-1 for model.dt): the nested keys first
                nested = sorted(f"{g}.{k}" for g in keys for k in _keys(composed, g) if not k.startswith("_"))
                leaves = sorted({k.rsplit(".", 1)[-1] for k in nested})
                closest = difflib.get_close_matches(leaf, leaves, n=1)
                near = [k for k in nested if k.rsplit(".", 1)[-1] in (closest or [None])] or near
            hint = f"did you mean {' or '.join(near[:3])}? " if near else ""
            if not keys:
                return f"unknown key {key!r}: {parent or 'the config'} has no keys here{_who_takes(parent, leaf)}."
            where = f"the keys of {parent}" if parent else "the top-level keys"
            return f"unknown key {key!r}; {hint}{where} are: {', '.join(keys)}."
        reason = " ".join(str(cause).split("\n")[0].split())
        return f"bad value for {key}: {reason}"
    return " ".join(text.split()[:60])


def _who_takes(parent: str, leaf: str) -> str:
    """For an option no key of the chosen solver has: which solvers take it (``solver=mix solver.options.theta0``)."""
    if parent != "solver.options":
        return ""
    takers = sorted(name for name, node in groups()["solver"].items() if leaf in getattr(node, "options", {}))
    own = f"; a scheme of your own (solver=module.Class) takes its options as +solver.options.{leaf}=..."
    if not takers:
        return f" ({own[2:]})"
    return f" (the chosen solver's stepper takes no {leaf}; solvers that do: {', '.join(takers)}{own})"


def _composed(overrides: list[str]) -> Any:
    """The config composed from ``overrides`` (for a nearest-key hint), or None."""
    from hydra import compose as hydra_compose

    try:
        return hydra_compose(config_name="train", overrides=overrides)
    except Exception:  # the hint is a courtesy; the error itself is already known
        return None


def _keys(node: Any, parent: str) -> list[str]:
    """The keys of node ``parent`` of the composed ``node`` (none when it has no such node)."""
    try:
        for part in filter(None, parent.split(".")):
            node = node[part]
        return sorted(str(k) for k in node.keys())
    except Exception:  # the hint is a courtesy; the error itself is already known
        return []


def check_command_line(argv: list[str]) -> None:
    """Compose what the command line asks for — each value of a sweep once — so that a wrong option, key or type is
    one line and exit code 2 before Hydra starts (Hydra's own message for these is several lines and exit 1). A
    scheme of the user's own (``solver=module.Class``) is checked last, without
    importing it (:func:`odeformer.app.run.schemes.check_scheme_name`; in a sweep, a module that cannot be found fails
    its jobs' rows instead): its module runs only when the run is built."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    if any(arg == "--experimental-rerun" or arg.startswith("--experimental-rerun=") for arg in argv):
        raise UsageError(
            "--experimental-rerun is refused: it unpickles the file it names, and a pickle can run any code; rerun a "
            "run with its overrides (.hydra/<date>_<time>/overrides.yaml in its directory)."
        )
    for i, arg in enumerate(argv):
        flag, eq, value = arg.partition("=")
        if flag in ("--config-name", "-cn", "--config-path", "-cp"):
            value = value if eq else (argv[i + 1] if i + 1 < len(argv) else "")
            if flag in ("--config-name", "-cn") and value == "train":
                continue
            raise UsageError(
                f"{flag} {value} is refused: odeformer-train composes its own config (train, from the package); "
                "choose its parts with overrides (experiment=..., solver=..., model.depth=...)."
            )
    known = {*_SKIP, *_FLAGS_WITH_VALUE, "-m", "--multirun", "-r", "--run"}
    for arg in argv:
        if arg.startswith("-") and arg.partition("=")[0] not in known:
            raise UsageError(
                f"unknown option {printable(arg)}; odeformer-train takes overrides (key=value) and Hydra's options "
                "(--help, --hydra-help, -m, --cfg job, ...)."
            )
    if {"--shell-completion", "-sc"} & set(argv) and not any(re.match(r"(install|uninstall|query)=", a) for a in argv):
        raise UsageError("--shell-completion takes install=SHELL, uninstall=SHELL or query=... (e.g. install=bash).")
    if any(arg in _SKIP for arg in argv):
        return
    check_sizes(argv)
    overrides, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in _FLAGS_WITH_VALUE:
            skip = True
        elif not arg.startswith("-"):
            overrides.append(arg)
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except OverrideParseException as error:
        raise UsageError(f"cannot parse the overrides: {' '.join(str(error).split())}") from None
    multirun = any(a in ("-m", "--multirun") for a in argv)
    for override in parsed:
        key = override.key_or_group
        if key.startswith(("hydra.", "hydra/")) and not key.startswith(HYDRA_KEYS):
            raise UsageError(
                f"{override.input_line.split('=', 1)[0]} is refused: of Hydra's own settings the command line takes "
                f"{', '.join(HYDRA_KEYS)} (callbacks and logging handlers could call any function or write any file)."
            )
        if key in ("hydra.run.dir", "hydra.sweep.dir") and files.unwritable(Path(str(override.value()))):
            verb, why = files.unwritable(Path(str(override.value())))
            raise UsageError(f"{key}={printable(override.value())} cannot be {verb}: {why}.")
        if override.is_delete():
            raise UsageError(
                f"{override.input_line} removes {override.key_or_group} from the config; a run reads every key of it, "
                "so give the key a value instead."
            )
        if override.is_sweep_override() and not multirun and not override.key_or_group.startswith("hydra."):
            raise UsageError(
                f"{override.input_line} gives several values; run a sweep over them with -m (--multirun), or give "
                "one value."
            )
    sweeps = [(i, o) for i, o in enumerate(parsed) if o.is_sweep_override()]
    first = list(overrides)
    for i, o in sweeps:
        values = _sweep_values(o)
        if values is None:
            first[i] = None
            continue
        first[i] = f"{o.input_line.split('=', 1)[0]}={values[0]}"
    plain = [o for o in first if o is not None]
    _check_output_subdir(plain)
    _check_added_keys(parsed)
    composed = compose(plain)
    check_config(OmegaConf.to_container(composed, resolve=True))  # what the builder and the loop check too
    _check_out_dir(composed, multirun)
    steppers = [own_scheme(OmegaConf.select(composed, "solver.name"))]
    for i, o in sweeps:
        for value in (_sweep_values(o) or [])[1:]:
            other = compose(
                [
                    *(p for j, p in enumerate(first) if j != i and p is not None),
                    f"{o.input_line.split('=', 1)[0]}={value}",
                ]
            )
            steppers.append(own_scheme(OmegaConf.select(other, "solver.name")))
    for stepper in dict.fromkeys(s for s in steppers if s is not None):  # last: after all else is checked
        try:  # in a sweep, a module not found is its job's failed row (the job's build looks it up)
            check_scheme_name(stepper, find=not multirun)
        except SchemeNameError as error:
            raise UsageError(str(error)) from None


MAX_KEY, MAX_VALUE, MAX_DIGITS = 200, 2000, 60  # far beyond any setting's key, value, number


def check_sizes(argv: list[str]) -> None:
    """Each override's key, value and numbers within :data:`MAX_KEY`, :data:`MAX_VALUE` and :data:`MAX_DIGITS`,
    checked on the text before Hydra's parser reads it (a value of 300,000 characters, a tableau of 400 stages typed
    out, takes that parser a minute): one line naming the key."""
    for arg in argv:
        key, _, value = arg.partition("=")
        if len(key) > MAX_KEY:
            raise UsageError(f"an override's key has {len(key)} characters (at most {MAX_KEY}): {key[:40]}...")
        if len(value) > MAX_VALUE:
            raise UsageError(f"{key}= has a value of {len(value)} characters (at most {MAX_VALUE}).")
        if re.search(rf"\d{{{MAX_DIGITS + 1},}}", value):
            raise UsageError(f"{key}= has a number of more than {MAX_DIGITS} digits; no setting takes one.")


_ADDABLE = ("solver", "model", "data", "train", "experiment", "hydra")  # what a ``+key=value`` may add to
HYDRA_KEYS = (
    "hydra.run.dir", "hydra.sweep.", "hydra.output_subdir", "hydra.searchpath", "hydra.launcher", "hydra/launcher",
)  # fmt: skip
"""Hydra's own settings a command line may give: where runs and sweeps go, the search path, the launcher."""


def _check_added_keys(parsed: list[Any]) -> None:
    """``+key=value`` and ``++key=value`` add a key the config does not have: one outside the package's groups
    (``+foo=bar``) would be accepted and never read, so it is refused, naming the key."""
    for override in parsed:
        key = override.key_or_group
        if override.input_line.lstrip().startswith("+") and key.split(".")[-1].startswith("_"):
            raise UsageError(
                f"{override.input_line.split('=', 1)[0]} adds the key {key}: a key starting with _ (such as _target_) "
                "is the package's own, never set from the command line."
            )
        if override.input_line.lstrip().startswith("+") and key.split(".")[0] not in _ADDABLE:
            raise UsageError(
                f"{override.input_line.split('=', 1)[0]} adds the key {key}, which nothing reads; keys are added "
                f"only under {', '.join(_ADDABLE[:-1])} (e.g. +solver.options.<name>=...)."
            )


def _check_out_dir(cfg: DictConfig, multirun: bool) -> None:
    """``train.out_dir`` must be a folder this process can write, or a path where one can be made
    (:func:`odeformer.app.files.unwritable`): a file there (or above it), or a folder that is read-only for this user,
    is a one-line error before Hydra makes the directory (its own error is a traceback); a folder another run is
    writing (its lock held) is one too, before Hydra writes this command's config snapshot into it."""
    if multirun or not OmegaConf.select(cfg, "train.out_dir"):
        return
    path = Path(str(cfg.train.out_dir)).expanduser()
    refused = files.unwritable(path, APPENDED)
    if refused is not None:
        verb, why = refused
        after = " (nothing was written); choose a writable train.out_dir." if verb == "written" else "."
        raise UsageError(f"train.out_dir={printable(path)} cannot be {verb}: {why}{after}")
    if os.environ.get("RANK", "0") == "0":  # torchrun's other ranks start beside rank 0, which holds the lock
        try:
            check_not_locked(path)  # also refuses a run directory whose entries are links
        except RunDirectoryError as error:
            raise UsageError(" ".join(str(error).split())) from None


APPENDED = ("metrics.jsonl", "history.jsonl")
"""The files of a run directory a resumed run appends to (the others it replaces whole, beside them)."""


def _check_output_subdir(overrides: list[str]) -> None:
    """``hydra.output_subdir`` (where Hydra writes this invocation's config snapshot, which a refused command removes
    again) must be a relative path that stays inside the run directory: an absolute one, or one that climbs out of
    it (``..``), is a one-line error before anything is written."""
    for override in overrides:
        key, _, value = override.partition("=")
        if key.lstrip("+~") != "hydra.output_subdir" or value in ("", "null", "None"):
            continue
        parts = Path(value).parts
        if Path(value).is_absolute() or value.startswith("~") or ".." in parts or not parts or parts == (".",):
            raise UsageError(
                f"hydra.output_subdir={value} is refused: the config snapshot is written inside train.out_dir, so "
                "give a relative path below it (the default is .hydra/<date>_<time>), or null for none."
            )


def _sweep_values(override: Any) -> list[str] | None:
    try:
        return list(override.sweep_string_iterator())
    except Exception:  # glob sweeps need Hydra's config loader: Hydra checks them itself
        return None


def run(cfg: DictConfig, out_dir: Path, overrides: list[str] | None = None) -> dict[str, Any]:
    """Train one composed configuration into ``out_dir`` (:func:`odeformer.app.run.launch.train`); return the
    summary. ``overrides`` (the command line's) are stored in the checkpoints, so that a resume with another config
    can be told the command to repeat."""
    from ..run import launch

    return launch.train(OmegaConf.to_container(cfg, resolve=True), out_dir, overrides)


def compose_config(overrides: list[str]) -> dict[str, Any]:
    """The resolved config (plain containers) ``odeformer-train <overrides>`` would run: what the sweep engine
    composes each job with (:class:`odeformer.app.run.sweep.Sweep`)."""
    return OmegaConf.to_container(compose(overrides), resolve=True)


class SweepSummary(Callback):
    """At the end of a multirun: one table of the runs' summaries, printed and written beside them
    (``summary.md`` and ``summary.json`` in the sweep directory)."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        if not sweep_dir.is_dir():
            return
        markdown, rows = sweep_table(sweep_dir)
        try:  # never through a link planted in the sweep directory
            files.write_text(sweep_dir / "summary.md", markdown)
            files.write_text(sweep_dir / "summary.json", json.dumps(rows, indent=2) + "\n")
        except UnsafeFile as error:
            print(f"odeformer-train: error: {' '.join(str(error).split())}", file=sys.stderr)
        print(f"\n{markdown}\nsweep summary: {sweep_dir / 'summary.md'}")


def _bad_input() -> tuple[type[BaseException], ...]:
    """What a run refuses in one line and exit code 2 (a full disk is code 1, sorted out first)."""
    from ..run.checkpoints import CheckpointError

    return (*EXPECTED, UsageError, DatasetNotFound, CheckpointError, RunDirectoryError, UnsafeFile)


_FAILED_JOBS: list[int] = []  # exit codes of the sweep's jobs that failed (a sweep goes on past them)


@hydra.main(version_base="1.3", config_path="pkg://" + CONFIG_MODULE, config_name="train")
def _main(cfg: DictConfig) -> None:
    from ..run.checkpoints import CheckpointWriteError
    from ..run.trainer import SchemeCheckFailed, TrainingDiverged

    bad_input = _bad_input()
    hydra_config = HydraConfig.get()
    out_dir = Path(hydra_config.runtime.output_dir)
    sweep = hydra_config.mode == RunMode.MULTIRUN
    before = _written(out_dir)
    try:
        summary = run(cfg, out_dir, list(hydra_config.overrides.task))
        if summary.get("status") == "interrupted":  # after its checkpoint and its line: 130 (SIGINT), 143 (SIGTERM)
            sys.exit(128 + int(summary.get("signal") or signal.SIGINT))  # a sweep stops here too
    except (TrainingDiverged, SchemeCheckFailed, CheckpointWriteError) as error:
        _failed(cfg, out_dir, str(error), 1, sweep)
    except RunDirectoryBusy as error:  # another process took the lock after this command checked it
        # the snapshot folder is named to the second, so it may be the other run's too: it is left as it is
        _failed(cfg, out_dir, one_line(error), 2, sweep, record=False)
    except bad_input as error:
        if os.environ.get("ODEFORMER_DEBUG"):
            raise
        if isinstance(error, OSError) and error.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
            where = f" while writing {error.filename}" if error.filename else ""
            message = f"no space left on device{where}; the checkpoints written before are intact."
            return _failed(cfg, out_dir, message, 1, sweep)
        if _written(out_dir) == before and not sweep:  # refused before training: the command leaves no trace
            _forget_snapshot(out_dir, hydra_config.output_subdir)
        _failed(cfg, out_dir, one_line(error), 2, sweep)
    except KeyboardInterrupt:
        if _written(out_dir) == before:  # stopped before training: no trace
            if not sweep:
                _forget_snapshot(out_dir, hydra_config.output_subdir)
            print(
                "odeformer-train: interrupted (Ctrl-C) before training started; nothing was trained.", file=sys.stderr
            )
        else:
            print(f"odeformer-train: interrupted (Ctrl-C); what {out_dir} holds is kept.", file=sys.stderr)
        sys.exit(130)


def _failed(cfg: DictConfig, out_dir: Path, error: str, code: int, sweep: bool, record: bool = True) -> None:
    """Report a failed run: one line (``error:`` for bad input, code 2; a diverged run, code 1) and exit ``code``; in a
    sweep, the line names the job, its ``summary.json`` records the failure (a row of the sweep's table) and the sweep
    goes on; the command exits ``code`` at its end."""
    from ..run.identity import model_name

    message = f"odeformer-train: {'error: ' if code == 2 else ''}{printable(error)}"
    if not sweep:
        print(message, file=sys.stderr)
        sys.exit(code)
    print(f"{message} (job {out_dir.name}; the sweep goes on)", file=sys.stderr)
    _FAILED_JOBS.append(code)
    if not record:  # the directory is another process's: write nothing into it
        return
    summary = {
        "status": "failed",
        "error": error,
        "solver": OmegaConf.select(cfg, "solver.name"),
        "model": model_name(OmegaConf.select(cfg, "model._target_")),
        "data": OmegaConf.select(cfg, "data.name"),
        "depth": OmegaConf.select(cfg, "model.depth"),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(UnsafeFile):  # a link planted there: the failure is reported above, nothing written
        files.write_text(out_dir / "summary.json", json.dumps(summary, indent=2) + "\n")


def _written(out_dir: Path) -> dict[str, tuple[int, int]]:
    """``{path: (size, mtime)}`` of the files in a run directory outside its config snapshots."""
    files = (p for p in out_dir.rglob("*") if p.is_file() and ".hydra" not in p.relative_to(out_dir).parts)
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in files}


SNAPSHOT_FILES = ("config.yaml", "hydra.yaml", "overrides.yaml")
"""What Hydra writes into ``hydra.output_subdir`` for one invocation."""


def _forget_snapshot(out_dir: Path, subdir: str | None) -> None:
    """Remove the config snapshot Hydra wrote for this invocation (the files :data:`SNAPSHOT_FILES` of
    ``.hydra/<date>_<time>/``), and the folders left empty by it up to ``out_dir``: a command refused before it trains
    leaves the run directory as it was, and the snapshots kept are those of commands that ran. Nothing else is
    removed: a file the snapshot folder holds besides these, a folder that is not inside ``out_dir`` (an
    ``output_subdir`` that climbs out, or a link on the way), or a link in the snapshot's place are all left alone."""
    if not subdir:
        return
    root = Path(os.path.realpath(out_dir))
    snapshot = Path(out_dir) / subdir
    if os.path.islink(snapshot):
        return
    real = Path(os.path.realpath(snapshot))
    if real == root or root not in real.parents:
        return
    for name in SNAPSHOT_FILES:
        with contextlib.suppress(OSError):
            if not os.path.islink(real / name):
                (real / name).unlink()
    folder = real
    while folder != root and root in folder.parents:
        try:
            folder.rmdir()  # not empty: an earlier invocation's snapshots, a file of someone's, or a run
        except OSError:
            return
        folder = folder.parent
    with contextlib.suppress(OSError):
        root.rmdir()


def main() -> None:
    """Console-script entry: check the command line (one line and exit 2 on bad input), then hand over to Hydra."""
    added: list[str] = []
    try:
        added = register_user_solvers(sys.argv[1:])
        check_command_line(sys.argv[1:])
    except UsageError as error:
        _forget_solvers(added)
        print(f"odeformer-train: error: {printable(error)}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("odeformer-train: interrupted (Ctrl-C) during start-up; nothing was written.", file=sys.stderr)
        sys.exit(130)
    finally:
        GlobalHydra.instance().clear()
    _FAILED_JOBS.clear()
    if "--hydra-help" in sys.argv:  # Hydra's own help composes Hydra's config alone: the overrides are not its
        sys.argv[1:] = ["--hydra-help"]
    if os.environ.get("RANK", "0") != "0":  # under torchrun, rank 0 writes the invocation's one config snapshot
        sys.argv.append("hydra.output_subdir=null")
    try:
        _main()
    except KeyboardInterrupt:  # between jobs of a sweep, or in Hydra's own start-up
        print("odeformer-train: interrupted (Ctrl-C); the runs' checkpoints written so far are kept.", file=sys.stderr)
        sys.exit(130)
    finally:  # a caller in the same process (a test, a notebook) sees the package's own solver group again
        _forget_solvers(added)
    if _FAILED_JOBS:  # a sweep whose every job ran, some of them failing: the worst failure's code
        sys.exit(min(_FAILED_JOBS))


if __name__ == "__main__":
    main()
