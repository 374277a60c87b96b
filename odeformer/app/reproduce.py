"""``odeformer-reproduce``: the sweep behind ``docs/RESULTS.md`` (graph, vision, language), from one command.

    odeformer-reproduce                          # every section, 2 worker processes, then rewrite docs/RESULTS.md
    odeformer-reproduce --sections difformer     # some sections
    odeformer-reproduce --smoke --out /tmp/x     # one tiny configuration end to end (CI)

A section is a table: rows (a solver and its options), columns (a depth, a split, ...) and seeds; every cell is
``odeformer-train <fixed overrides> <row> <column> train.seed=<s>`` composed in-process and trained in a worker process
with one thread (two workers fill the two cores of the reference machine). Runs are written under ``--runs``
(``<runs>/<section>/<run>``); a run whose ``summary.json`` says it completed is not run again, and an interrupted one
resumes from its ``last.pt``, so an interrupted sweep resumes where it stopped. A completed run is reused only if the
configuration saved in its checkpoint is what its overrides compose to now (:func:`config_drift`): a changed default
stops the sweep with one line naming the run and the setting, instead of putting another run's numbers in a table.

Before its runs, a section measures each row's training step against diffusion's, side by side in one process (the
models taking turns; ``<runs>/<section>/costs.json``). Where a row's step costs more than 1.1× diffusion's, the section
gets a *compute-matched* row: diffusion given that many times more steps, so the comparison can be read at equal
compute as well as at equal steps. The tables (mean ± std over seeds), accuracy-against-depth PNGs
and per-layer diagnostics go into ``docs/RESULTS.md``, each section in its own block (between its
``odeformer-reproduce/<section>`` markers, after a shared header block) with the command, the hardware and the
training time: running some sections rewrites their blocks and leaves the others as they are.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import signal
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from solvers import OMELYAN_LAMBDA

BEGIN, END = "<!-- begin: odeformer-reproduce -->", "<!-- end: odeformer-reproduce -->"
MATCH_ABOVE = 1.1  # rows costing more than this many times diffusion's training time get a compute-matched row


@dataclass(frozen=True)
class Section:
    """A table of runs: every ``row`` x ``column`` x seed, on top of the ``fixed`` overrides.

    ``rows`` and ``columns`` map a label to the overrides that make it; ``plot`` draws accuracy against the columns
    (depths); ``diagnose`` names the columns whose seed-0 runs get per-layer diagnostics, one curve per row;
    ``learned`` names, per coefficient symbol (``λ``, ``α``), the known members (label: value) that the trained runs'
    learnable integrator coefficients are plotted against, layer by layer (:func:`learned_coefficients`).
    """

    title: str
    fixed: list[str]
    rows: dict[str, list[str]]
    columns: dict[str, list[str]] = field(default_factory=lambda: {"": []})
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    note: str = ""
    plot: bool = False
    diagnose: tuple[str, ...] = ()
    matched: bool = True
    learned: dict[str, dict[str, float]] = field(default_factory=dict)

    def runs(self) -> list[tuple[str, str, str, int, list[str]]]:
        """``(run name, row, column, seed, overrides)`` for every cell and seed."""
        out = []
        for row, row_overrides in self.rows.items():
            for column, column_overrides in self.columns.items():
                for seed in self.seeds:
                    name = _slug(f"{row}__{column}__seed={seed}" if column else f"{row}__seed={seed}")
                    overrides = [*self.fixed, *row_overrides, *column_overrides, f"train.seed={seed}"]
                    out.append((name, row, column, seed, overrides))
        names = [job[0] for job in out]
        if len(set(names)) < len(names):
            twin = next(job for job in out if names.count(job[0]) > 1)[0]
            rows = sorted({job[1] for job in out if job[0] == twin})
            raise ValueError(
                f"section {self.title!r}: rows {rows} share the run folder {twin!r}; give them labels that "
                "differ in letters, digits or _.=+-"
            )
        return out


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=+-]+", "_", text).strip("_")


def _depths(depths: list[int]) -> dict[str, list[str]]:
    return {f"depth {d}": [f"model.depth={d}"] for d in depths}


LIGHT_WAVES = {
    "diffusion": ["solver=diffusion"],
    "light_wave θ0=-8": ["solver=light_wave", "solver.options.theta0=-8.0"],
    "light_wave θ0=0": ["solver=light_wave", "solver.options.theta0=0.0"],
    "light_wave θ0=2": ["solver=light_wave", "solver.options.theta0=2.0"],
    "light_wave θ0=4": ["solver=light_wave", "solver.options.theta0=4.0"],
}
VISION = {name: [f"solver={name}"] for name in ("diffusion", "full_wave", "full_wave_official", "light_wave", "mix")}
LANGUAGE = {name: [f"solver={name}"] for name in ("diffusion", "full_wave", "full_wave_official", "light_wave")}

SECTIONS = {
    "difformer": Section(
        "DIFFormer-s on Cora, its own protocol (8 layers, τ = 0.5, diffusion): the baseline",
        ["experiment=difformer_cora"],
        {"diffusion": ["solver=diffusion"]},
        {
            "random split": ["data.options.split=random", "data.options.seed=0"],
            "a new random split per seed": ["data.options.split=random", "data.options.seed=${train.seed}"],
            "public split": ["data.options.split=public"],
            "the official draw": ["data.options.split=difformer", "data.options.seed=123"],
        },
        seeds=[0, 1, 2, 3, 4],
        note="DIFFormer-s, published (Wu et al., ICLR 2023, Table 1; random 20-per-class / 500 / 1000 split): "
        '85.9 ± 0.4 %. "random split" is one fixed draw (`data.options.seed=0`) and five initialisations, as the '
        'official protocol (one split, several runs); "a new random split per seed" redraws the split with the '
        "initialisation, to show how much one draw moves the mean; the public split is Planetoid's; "
        '"the official draw" is the split the official code draws (`data.options.split=difformer`, its seed 123).',
        matched=False,
    ),
    "difformer_depth": Section(
        "DIFFormer-s on Cora at τ = 0.2: accuracy against depth (T = 0.2 × depth), diffusion and Light Wave",
        ["experiment=difformer_cora", "model.dt=0.2"],
        LIGHT_WAVES,
        _depths([4, 8, 20, 32]),
        note="Paper (Wavy Transformer, Cora, 20 layers, τ = 0.2): diffusion 39.92 %, Light Wave 85.18 %. Light Wave's "
        "momentum starts at λ0 = sigmoid(θ0): θ0 = -8, 0, 2, 4 give λ0 ≈ 0.0003, 0.5, 0.88, 0.98 (the official code's "
        "ViT and BERT gates start at sigmoid(-8) and sigmoid(0)). Equal epochs (the protocol's 500); the "
        "compute-matched rows are in the 20-layer table below. This table and the two 20-layer tables below run on "
        "the official draw the experiment defaults to (the baseline's last column).",
        plot=True,
        diagnose=("depth 20", "depth 32"),
        matched=False,
    ),
    "difformer_ablation": Section(
        "DIFFormer-s on Cora at 20 layers, τ = 0.2: which ingredient the depth collapse hangs on",
        ["experiment=difformer_cora", "model.dt=0.2", "model.depth=20"],
        {
            "diffusion": ["solver=diffusion"],
            "no dropout on the state": ["solver=diffusion", "model.layer_dropout=0.0"],
            "no per-layer LayerNorm": ["solver=diffusion", "model.norm=none"],
            "Attn and Â averaged": ["solver=diffusion", "model.propagation=mean"],
            "light_wave θ0=0": ["solver=light_wave", "solver.options.theta0=0.0"],
            "light_wave θ0=0, no dropout on the state": [
                "solver=light_wave",
                "solver.options.theta0=0.0",
                "model.layer_dropout=0.0",
            ],
            "light_wave θ0=0, Attn and Â averaged": [
                "solver=light_wave",
                "solver.options.theta0=0.0",
                "model.propagation=mean",
            ],
        },
        seeds=[0, 1],
        note="The three rows after diffusion are diffusion with one ingredient of DIFFormer's layer removed or "
        "changed; the last three ask whether Light Wave fails through the same ingredients (the dropout on the state: "
        "the difference of two dropped-out states is mostly mask noise; the sum, whose leading eigenvalue is near 2).",
        diagnose=("",),
        matched=False,
    ),
    "difformer_20": Section(
        "DIFFormer-s on Cora at 20 layers, τ = 0.2: the other wave presets, and diffusion at their cost",
        ["experiment=difformer_cora", "model.dt=0.2", "model.depth=20"],
        {
            "diffusion": ["solver=diffusion"],
            "light_wave θ0=0": ["solver=light_wave", "solver.options.theta0=0.0"],
            "full_wave": ["solver=full_wave"],
            "damped": ["solver=damped"],
            "mix": ["solver=mix"],
        },
        seeds=[0, 1],
        note="The compute-matched rows give diffusion as many more epochs as the wave preset's step costs over "
        "diffusion's.",
    ),
    "shakespeare": Section(
        "Tiny Shakespeare, character-level causal LM (depth 4, dim 64, context 64)",
        [
            "experiment=shakespeare_char",
            "model.dim=64",
            "model.max_len=64",
            "train.max_steps=800",
            "train.eval_every=200",
            "train.eval_batches=10",
        ],
        LANGUAGE,
        seeds=[0, 1],
    ),
    "digits": Section(
        "ViT on scikit-learn digits (8×8, patch 2, dim 48)",
        ["experiment=digits_vit", "train.max_steps=600"],
        VISION,
        _depths([6, 12]),
        plot=True,
        diagnose=("depth 12",),
    ),
    "sst2": Section(
        "SST-2 sentiment, masked-LM encoder + classification head from scratch (depth 4, dim 64)",
        ["experiment=sst2", "train.max_steps=500", "train.eval_every=100"],
        LANGUAGE,
        seeds=[0, 1],
    ),
    "sst2_bert": Section(
        "SST-2 in BERT's layout (post-LN) with the official code's layers: diffusion, Full Wave, mix (depth 4, dim 64)",
        ["experiment=sst2", "model.norm=post", "train.max_steps=500", "train.eval_every=100"],
        {name: [f"solver={name}"] for name in ("diffusion", "full_wave_official", "mix_bert")},
        seeds=[0, 1],
        note="The official BERT code's three residuals (`src/bert/models/attention.py`, `layers.py`): a LayerNorm "
        "after each sublayer (BERT is post-LN, and the embeddings are normalised), τ = 0.5 for the wave and the mix, "
        "the FFN at unit step with the velocity carried through it and the LayerNorms by the chain rule, the mix's "
        "gate one learnable scalar per layer from sigmoid(0) (`tests/test_official.py` checks both layers against the "
        "official update written out). The paper pretrains 24 layers of width 256 on BooksCorpus and Wikipedia, "
        "then fine-tunes on GLUE; here 4 layers of width 64 train from scratch on SST-2, as the section above.",
    ),
    "fmnist": Section(
        "ViT on a 10k-image Fashion-MNIST subset (28×28, patch 7, dim 48)",
        ["experiment=fmnist_vit", "model.dim=48", "data.batch_size=64", "train.max_steps=500", "train.eval_every=100"],
        VISION,
        _depths([6, 12]),
        plot=True,
        diagnose=("depth 12",),
    ),
}
LEARNED = {  # each learnable family beside the fixed members it passes through
    "splitting λ learned per channel (from Omelyan's 0.1932)": ["solver=symmetric_splitting"],
    "omelyan2 (λ fixed at 0.1932)": ["solver=omelyan2"],
    "velocity_verlet (λ → 0)": ["solver=velocity_verlet"],
    "position_verlet (λ → ½)": ["solver=position_verlet"],
    "two-stage RK, c₂ = α learned per layer (from Ralston's 2/3)": ["solver=two_stage_rk"],
    "ralston (α = 2/3)": ["solver=ralston"],
    "midpoint (α = ½)": ["solver=midpoint"],
    "heun (α = 1)": ["solver=heun"],
}
LEARNED_ORDER4 = {  # the fourth-order family beside its two ends (λ → ½ is Forest–Ruth, λ → 0 Yoshida's triple jump)
    "triple jump of the λ-splitting, λ learned per channel (from Omelyan's), order 4, 6 evaluations": [
        "solver=triple_jump"
    ],
    "forest_ruth (λ → ½), 3 evaluations": ["solver=forest_ruth"],
    "yoshida4 (λ → 0), 3 evaluations": ["solver=yoshida4"],
}
LEARNED_TEXT = LEARNED  # the same rows on text: each family beside the fixed members it passes through
MEMBERS = {
    "λ": {"velocity Verlet": 0.0, "Omelyan": OMELYAN_LAMBDA, "position Verlet": 0.5},
    "α": {"midpoint": 0.5, "Ralston": 2 / 3, "Heun": 1.0},
}
MEMBERS_ORDER4 = {"λ": {"Yoshida-4": 0.0, "Omelyan inside": OMELYAN_LAMBDA, "Forest–Ruth": 0.5}}
LEARNED_NOTE = (
    "Each learnable family keeps its guarantee at every value of its parameter (the λ-splitting symplectic, symmetric "
    "and of order 2; the two-stage family of order 2; the triple jump of the λ-splitting symplectic, symmetric and of "
    "order 4) and the second-order families cost what their fixed members cost per layer (two evaluations), so those "
    "rows compare at equal compute. The second-order rows integrate the laplacian force with the FFN by the chain rule "
    "(Full Wave's layer), the first-order ones the whole block. Trainable coefficients get no weight decay."
)
SECTIONS["learned_integrators"] = Section(
    "Learned integrators on digits: the learnable families beside their fixed members (depth 6)",
    ["experiment=digits_vit", "train.max_steps=600", "model.depth=6"],
    LEARNED,
    seeds=[0, 1],
    note=LEARNED_NOTE,
    matched=False,
    learned=MEMBERS,
)
SECTIONS["learned_integrators_text"] = Section(
    "Learned integrators on Tiny Shakespeare: the learnable families beside their fixed members (depth 4, dim 64)",
    SECTIONS["shakespeare"].fixed,
    LEARNED_TEXT,
    seeds=[0, 1],
    note=LEARNED_NOTE,
    matched=False,
    learned=MEMBERS,
)
SECTIONS["learned_integrators_order4"] = Section(
    "Learned integrators on digits, fourth order: the learnable triple jump beside its fixed ends (depth 6)",
    ["experiment=digits_vit", "train.max_steps=600", "model.depth=6"],
    LEARNED_ORDER4,
    seeds=[0, 1],
    note="The triple jump costs six evaluations per layer against its fixed ends' three; rows compare at equal steps.",
    matched=False,
    learned=MEMBERS_ORDER4,
)
SMOKE = Section(
    "smoke",
    ["experiment=difformer_cora", "model.depth=2", "train.max_steps=3", "train.eval_every=3"],
    {"diffusion": ["solver=diffusion"]},
    seeds=[0],
    diagnose=("",),
    matched=False,
)


class Interrupted(Exception):
    """The sweep was stopped by a signal (``signum``); the running jobs saved their checkpoints."""

    def __init__(self, signum: int, saved: bool = True):
        super().__init__(signum, saved)
        self.signum, self.saved = signum, saved


_IN_WORKER = False  # whether this process is a sweep's worker (set by _worker_start)


def _worker_start() -> None:
    """A worker process's signal handling: Ctrl-C or SIGTERM (to the process group, or forwarded by the parent)
    asks the running job to save its checkpoint and stop (the trainer's own handler while it trains, a pending stop
    it finds before that), and no job starts after it; nothing is printed from the worker."""
    from . import trainer

    global _IN_WORKER
    _IN_WORKER = True

    def stop(signum, frame):
        trainer.PENDING_STOP = signum

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, stop)


def _train(job: tuple[str, list[str], str]) -> dict[str, Any]:
    """Worker: compose and train one configuration (one thread); return its summary."""
    import torch

    torch.set_num_threads(1)
    from . import train, trainer

    name, overrides, out_dir = job
    if trainer.PENDING_STOP is not None:  # the sweep was stopped before this job began
        return {"status": "interrupted", "signal": trainer.PENDING_STOP}
    summary_path = Path(out_dir) / "summary.json"
    if summary_path.exists() and json.loads(summary_path.read_text())["status"] == "completed":
        drift = config_drift(Path(out_dir), overrides)
        if drift:
            raise ValueError(
                f"{out_dir} was trained with {'; '.join(drift)} (then → now): its overrides compose to another "
                "configuration today, so its numbers are not this run's; delete the folder to train it again."
            )
        return json.loads(summary_path.read_text())
    resume = ["train.resume=true"] if (Path(out_dir) / "last.pt").exists() else []  # an interrupted sweep
    cfg = train.compose([*overrides, *resume, "train.progress=false"])
    summary = train.run(cfg, Path(out_dir))
    if summary.get("status") == "interrupted" and _IN_WORKER:  # signalled while training: no other job here
        trainer.PENDING_STOP = summary.get("signal") or signal.SIGINT
    return summary


HOW_STARTED = {"train.out_dir", "train.resume", "train.progress"}  # where and how a run was started, not what it is


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            flat |= _flatten(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def config_drift(run_dir: Path, overrides: list[str]) -> list[str]:
    """Where a finished run's configuration (saved in its checkpoint) and what its overrides compose to now disagree,
    as ``key: then → now``. A changed default of an experiment or a group makes the same overrides mean another
    run; keys that only one side has (options added since) are not compared."""
    from omegaconf import OmegaConf

    from . import train
    from .checkpoints import load_checkpoint
    from .upgrade import upgrade_config

    saved = upgrade_config((load_checkpoint(run_dir / "last.pt").get("info") or {}).get("config"))
    if not isinstance(saved, dict):
        raise ValueError(
            f"{run_dir / 'last.pt'} stores no config, so its run cannot be checked; delete the folder to "
            "train it again."
        )
    now = OmegaConf.to_container(train.compose([*overrides, "train.progress=false"]), resolve=True)
    then, now = _flatten(saved), _flatten({key: now[key] for key in saved if key in now})
    return [
        f"{key}: {then[key]!r} → {now[key]!r}"
        for key in sorted(then.keys() & now.keys())
        if key not in HOW_STARTED and then[key] != now[key]
    ]


Result = tuple[str, str, str, int, list[str], dict[str, Any]]  # name, row, column, seed, overrides, summary


def _reuse(jobs: list[tuple[str, str, str, int, list[str]]], runs_dir: Path, runs_root: Path) -> None:
    """Link each job to a completed run of another section made of the same overrides (in any order), so a cell that
    two tables share is trained once."""
    done: dict[frozenset[str], Path] = {}
    for summary in sorted(runs_root.glob("*/*/summary.json")):
        overrides = summary.parent / "overrides.json"
        if overrides.exists() and json.loads(summary.read_text()).get("status") == "completed":
            done.setdefault(frozenset(json.loads(overrides.read_text())), summary.parent)
    for name, _, _, _, overrides in jobs:
        target, twin = runs_dir / name, done.get(frozenset(overrides))
        if twin is not None and not target.exists() and twin.parent != runs_dir:
            runs_dir.mkdir(parents=True, exist_ok=True)
            target.symlink_to(os.path.relpath(twin, runs_dir), target_is_directory=True)


def _run(jobs: list[tuple[str, str, str, int, list[str]]], runs_dir: Path, workers: int) -> list[Result]:
    _reuse(jobs, runs_dir, runs_dir.parent)
    for name, _, _, _, overrides in jobs:  # what each run is made of, for reuse by other sections
        record = runs_dir / name / "overrides.json"
        if not (runs_dir / name).is_symlink():
            record.parent.mkdir(parents=True, exist_ok=True)
            record.write_text(json.dumps(overrides) + "\n")
    work = [(name, overrides, str(runs_dir / name)) for name, _, _, _, overrides in jobs]
    if workers == 1:
        summaries = []
        for job in work:
            summaries.append(_train(job))
            if summaries[-1].get("status") == "interrupted":  # the job saved its checkpoint: the sweep stops
                raise Interrupted(int(summaries[-1].get("signal") or signal.SIGINT))
    else:
        summaries = _in_pool(work, workers)
    return [(*job, summary) for job, summary in zip(jobs, summaries)]


def _in_pool(work: list[tuple[str, list[str], str]], workers: int) -> list[dict[str, Any]]:
    """The jobs in ``workers`` processes. One Ctrl-C or SIGTERM stops the sweep: no job starts after it, the
    running ones save their checkpoints (the signal is forwarded to them) and are waited for, then
    :class:`Interrupted`; a second signal while waiting kills the workers. Nothing is left running."""

    def on_term(signum, frame):
        raise Interrupted(signum)

    pool = ProcessPoolExecutor(max_workers=workers, initializer=_worker_start)
    previous = signal.signal(signal.SIGTERM, on_term)
    futures = [pool.submit(_train, job) for job in work]
    try:
        summaries = []
        for future in futures:
            summaries.append(future.result())
            if summaries[-1].get("status") == "interrupted":
                raise Interrupted(int(summaries[-1].get("signal") or signal.SIGINT))
        return summaries
    except (KeyboardInterrupt, Interrupted) as error:
        signum = error.signum if isinstance(error, Interrupted) else signal.SIGINT
        for future in futures:
            future.cancel()
        processes = list(getattr(pool, "_processes", {}).values())
        for process in processes:  # the group may not have been signalled (kill PID): pass it on
            with contextlib.suppress(OSError):
                os.kill(process.pid, signum)
        try:
            wait([f for f in futures if not f.cancelled()])
        except (KeyboardInterrupt, Interrupted):  # a second signal: stop now
            for process in processes:
                process.kill()
            raise Interrupted(signum, saved=False) from None
        raise Interrupted(signum) from None
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        signal.signal(signal.SIGTERM, previous)


def _measure_costs(job: tuple[list[str], dict[str, list[str]], dict[str, list[str]], int]) -> dict[str, float]:
    """Worker: per row, its training step's time over diffusion's, measured side by side in one process with one
    thread (the rows' models built from seed 0 take turns step by step, ``rounds`` times per column); the median
    over the columns."""
    import torch

    torch.set_num_threads(1)
    from omegaconf import OmegaConf

    from . import train
    from .builder import build
    from .objectives import make_objective

    fixed, rows, columns, rounds = job
    per_column = []
    for column_overrides in columns.values():
        steps = {}
        for row, row_overrides in rows.items():
            config = OmegaConf.to_container(train.compose([*fixed, *row_overrides, *column_overrides]), resolve=True)
            torch.manual_seed(0)
            data, model, _ = build(config)
            objective = make_objective(data, model, config["data"]["batch_size"], 0, torch.device("cpu"))
            network = objective.network(model)  # what the trainer steps (e.g. the encoder and its task head)
            optimizer = torch.optim.AdamW(network.parameters(), lr=1e-4)

            def step(network=network, objective=objective, optimizer=optimizer):
                loss = objective.loss(network, objective.batch(0, 1))
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()

            step()  # warm-up
            steps[row] = step
        seconds: dict[str, list[float]] = {row: [] for row in steps}
        for _ in range(rounds):
            for row, step in steps.items():
                started = time.perf_counter()
                step()
                seconds[row].append(time.perf_counter() - started)
        base = statistics.median(seconds["diffusion"])
        per_column.append({row: statistics.median(times) / base for row, times in seconds.items()})
    return {row: statistics.median(c[row] for c in per_column) for row in rows if row != "diffusion"}


def step_costs(section: Section, runs_dir: Path, rounds: int = 7) -> dict[str, float]:
    """Per row, its training step's cost relative to diffusion's (:func:`_measure_costs`, in a fresh worker
    process), kept in ``<runs_dir>/costs.json`` with what was measured (the section's overrides and the rounds), so
    that a rerun of the same section reads the same numbers and a changed section is measured again."""
    if "diffusion" not in section.rows or len(section.rows) < 2:
        return {}
    path = runs_dir / "costs.json"
    measured = {"fixed": section.fixed, "rows": section.rows, "columns": section.columns, "rounds": rounds}
    if path.exists():
        saved = json.loads(path.read_text())
        if "costs" not in saved and set(saved) == set(section.rows) - {"diffusion"}:
            saved = {"measured": measured, "costs": saved}  # a file from before the key was kept: adopted once
            path.write_text(json.dumps(saved, indent=2, ensure_ascii=False) + "\n")
        if saved.get("measured") == measured:
            return saved["costs"]
    with ProcessPoolExecutor(max_workers=1) as pool:
        costs = pool.submit(_measure_costs, (section.fixed, section.rows, section.columns, rounds)).result()
    runs_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"measured": measured, "costs": costs}, indent=2, ensure_ascii=False) + "\n")
    return costs


def matched_jobs(
    section: Section, results: list[Result], costs: dict[str, float]
) -> list[tuple[str, str, str, int, list[str]]]:
    """Compute-matched diffusion runs: for every row whose step costs more than 1.1× diffusion's (``costs``),
    diffusion with that many times its steps (rounded), in every column and seed; the run's name carries its steps."""
    if not section.matched or "diffusion" not in section.rows:
        return []
    steps = {(c, s): summary["steps"] for _, row, c, s, _, summary in results if row == "diffusion"}
    jobs = []
    for row, ratio in costs.items():
        if ratio <= MATCH_ABOVE:
            continue
        label = f"diffusion at {row}'s cost (×{ratio:.2f} steps)"
        for (column, seed), n in steps.items():
            more = max(1, round(n * ratio))
            name = _slug(f"diffusion_matched_{row}__{column}__steps={more}__seed={seed}")
            overrides = [*section.fixed, *section.rows["diffusion"], *section.columns[column]]
            jobs.append((name, label, column, seed, [*overrides, f"train.seed={seed}", f"train.max_steps={more}"]))
    return jobs


def _fmt(values: list[float], percent: bool) -> str:
    scale = 100 if percent else 1
    if not values:
        return "–"
    mean = statistics.fmean(values) * scale
    spread = statistics.stdev(values) * scale if len(values) > 1 else 0.0
    return f"{mean:.1f} ± {spread:.1f}" if percent else f"{mean:.3f} ± {spread:.3f}"


def table(section: Section, results: list[Result], costs: dict[str, float]) -> tuple[str, dict]:
    """Markdown table: one row per row label, one column per column label, mean ± std of the test metric over
    seeds; then the cost of each row's training step relative to diffusion's (``costs``)."""
    metric = results[0][5]["metric"]
    percent = metric == "accuracy"
    cells: dict[str, dict[str, list[float]]] = {}
    walls: dict[str, list[float]] = {}
    for _, row, column, _, _, summary in results:
        cells.setdefault(row, {}).setdefault(column, []).append(summary["test"])
        walls.setdefault(row, []).append(summary["wall_s"])
    columns = list(dict.fromkeys(c for row in cells.values() for c in row))
    label = f"test {metric}" + (" (%)" if percent else " (nats/char)")
    head = "| solver | " + " | ".join(c or label for c in columns) + " | step cost vs diffusion |"
    lines = [head, "|" + "---|" * (len(columns) + 2)]
    for row, by_column in cells.items():
        ratio = "1.00" if row == "diffusion" else (f"{costs[row]:.2f}" if row in costs else "–")
        shown = f"`{row}`" if " " not in row else row
        lines.append(
            f"| {shown} | " + " | ".join(_fmt(by_column.get(c, []), percent) for c in columns) + f" | {ratio} |"
        )
    seeds = len(section.seeds)
    minutes = sum(sum(w) for w in walls.values()) / 60
    caption = f"{label}, mean ± std over {seeds} seeds; {len(results)} runs, {minutes:.1f} min of training."
    return "\n".join(lines) + "\n\n" + caption, cells


def accuracy_plot(section: Section, cells: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    depths = [int(c.split()[-1]) for c in section.columns]
    for row, by_column in cells.items():
        points = [(int(c.split()[-1]), v) for c, v in by_column.items() if v]
        means = [100 * statistics.fmean(v) for _, v in points]
        stds = [100 * statistics.stdev(v) if len(v) > 1 else 0 for _, v in points]
        ax.errorbar([d for d, _ in points], means, yerr=stds, marker="o", ms=4, capsize=3, label=row)
    ax.set(xscale="log", xlabel="depth (layers)", ylabel="test accuracy (%)")
    ax.set_title(section.title.split(":")[0], fontsize=9)
    ax.set_xticks(depths)
    ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.get_xaxis().set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


DIAGNOSED = ("cosine", "dirichlet_normalised", "feature_variance", "spectral_gap", "rank_collapse", "dirichlet")


def oversmoothing(section: Section, column: str, results: list[Result], runs_dir: Path, out: Path) -> list[str]:
    """Diagnose the seed-0 runs of ``column``, one curve per row; return the PNG names."""
    from .builder import load_run
    from .diagnose import diagnose

    chosen = [(row, name) for name, row, c, seed, _, _ in results if seed == 0 and c == column]
    runs = []
    for row, name in chosen:
        data, model, _ = load_run(runs_dir / name)
        runs.append((row, data, model))
    diagnose(runs, out, size=64)
    return [f"{m}.png" for m in DIAGNOSED if (out / f"{m}.png").exists()]


COEFFICIENTS = ("lam", "alpha")  # what a learnable scheme calls its coefficient: a splitting's drift λ, c₂ = α


def coefficients(model: Any) -> list[tuple[str, list[float]]]:
    """Each layer's learnable integrator coefficient, ``(name, values)`` (one value, or one per channel), in layer
    order: read from the scheme's own method (``lam()``: ``λ``, ``alpha()``: ``α``), so the mapping from the
    unconstrained parameter is the scheme's, not copied here. Layers without a learnable one are left out."""
    import solvers

    out = []
    for layer in model.backbone.layers:
        for module in layer.modules():
            name = next(
                (n for n in COEFFICIENTS if isinstance(module, solvers.AbstractStepper) and hasattr(module, n)), None
            )
            if name is not None and any(p.requires_grad for p in module.parameters()):
                out.append(("λ" if name == "lam" else "α", getattr(module, name)().detach().reshape(-1).tolist()))
                break
    return out


def _stepper_override(overrides: list[str]) -> str | None:
    return next((o.split("=", 1)[1] for o in overrides if o.startswith("solver.stepper=")), None)


def learned_coefficients(
    section: Section, results: list[Result], runs_dir: Path, path: Path
) -> tuple[str, dict[str, dict[str, Any]]]:
    """The learnable rows' coefficients after training (best checkpoint), per layer and seed: a PNG of each layer's
    value (the per-channel spread as a band) against the section's known members, and a table of the per-layer means
    with the nearest known member; rows whose schemes learn no coefficient are left out. A scheme of one's own is
    rebuilt from the row's own overrides (code), not from what its checkpoint says."""
    from .builder import load_run

    found: dict[str, dict[str, Any]] = {}
    for name, row, _, seed, overrides, _ in results:
        _, model, _ = load_run(runs_dir / name, stepper=_stepper_override(overrides))
        layers = coefficients(model)
        if layers:
            record = found.setdefault(row, {"symbol": layers[0][0], "seeds": {}})
            record["seeds"][seed] = [values for _, values in layers]
    if not found:
        return "", found
    _coefficient_plot(section, found, path)
    lines = ["| learned row | symbol | " + " | ".join(f"layer {i}" for i in range(1, _depth(found) + 1)) + " |"]
    lines.append("|" + "---|" * (_depth(found) + 2))
    for row, record in found.items():
        cells, known = [], section.learned.get(record["symbol"], {})
        for layer in range(_depth(found)):
            values = [v for seed in record["seeds"].values() if layer < len(seed) for v in seed[layer]]
            if not values:
                cells.append("–")
                continue
            mean = statistics.fmean(values)
            spread = f" [{min(values):.3f}, {max(values):.3f}]" if len(values) > 1 else ""
            near = min(known, key=lambda k: abs(known[k] - mean)) if known else ""
            cells.append(f"{mean:.3f}{spread}" + (f" (nearest: {near})" if near else ""))
        lines.append(f"| {row} | {record['symbol']} | " + " | ".join(cells) + " |")
    caption = (
        "Learned coefficient per layer after training (best checkpoint): the mean over seeds and channels, [min, max] "
        "over them, and the nearest of the known members: "
        + "; ".join(f"{s}: " + ", ".join(f"{k} = {v:.4g}" for k, v in m.items()) for s, m in section.learned.items())
        + "."
    )
    return "\n".join(lines) + "\n\n" + caption, found


def _depth(found: dict[str, dict[str, Any]]) -> int:
    return max(len(layers) for record in found.values() for layers in record["seeds"].values())


def _coefficient_plot(section: Section, found: dict[str, dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    symbols = list(dict.fromkeys(record["symbol"] for record in found.values()))
    fig, axes = plt.subplots(1, len(symbols), figsize=(5.5 * len(symbols), 3.8), squeeze=False)
    for ax, symbol in zip(axes[0], symbols):
        for row, record in found.items():
            if record["symbol"] != symbol:
                continue
            for seed, layers in sorted(record["seeds"].items()):
                x = list(range(1, len(layers) + 1))
                means = [statistics.fmean(v) for v in layers]
                line = ax.plot(x, means, marker="o", ms=3, label=f"{row[:48]} (seed {seed})")[0]
                if any(len(v) > 1 for v in layers):
                    ax.fill_between(
                        x, [min(v) for v in layers], [max(v) for v in layers], alpha=0.15, color=line.get_color()
                    )
        low, high = ax.get_ylim()
        for label, value in section.learned.get(symbol, {}).items():
            if low - 0.05 <= value <= high + 0.05:
                ax.axhline(value, ls="--", lw=0.8, color="grey")
                ax.annotate(label, (1, value), fontsize=6, color="grey", va="bottom")
        ax.set(xlabel="layer", ylabel=f"learned {symbol}")
        ax.set_xticks(range(1, _depth(found) + 1))
        ax.legend(fontsize=6)
    fig.suptitle(section.title.split(":")[0], fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_results(markdown: str, path: Path, begin: str = BEGIN, end: str = END, after: tuple[str, ...] = ()) -> None:
    """Replace the block between ``begin`` and ``end`` in ``path`` (creating the file or the block if needed), so
    each generator owns its block and the prose around the blocks is kept. A new block goes right after the first
    marker of ``after`` that the file holds (its neighbours' end markers, nearest first), else at the end."""
    block = f"{begin}\n{markdown}\n{end}"
    text = path.read_text() if path.exists() else "# Results\n\n"
    if begin in text and end in text:
        text = text[: text.index(begin)] + block + text[text.index(end) + len(end) :]
    else:
        anchor = next((marker for marker in after if marker in text), None)
        if anchor is None:
            text = text.rstrip() + "\n\n" + block + "\n"
        else:
            cut = text.index(anchor) + len(anchor)
            text = text[:cut] + "\n\n" + block + text[cut:]
    path.write_text(text)


def markers(key: str) -> tuple[str, str]:
    """The begin and end markers of one section's block in RESULTS.md."""
    return f"<!-- begin: odeformer-reproduce/{key} -->", f"<!-- end: odeformer-reproduce/{key} -->"


def _command(key: str) -> str:
    """The command that rewrites one section's block."""
    return "odeformer-reproduce --smoke" if key == "smoke" else f"odeformer-reproduce --sections {key}"


def split_combined_block(path: Path) -> list[str]:
    """Give each section its own block in a RESULTS.md whose one ``odeformer-reproduce`` block holds them all (as an
    earlier version wrote it), so that rewriting some sections cannot drop the others. Each section keeps its text and
    is headed by its own command with the machine and date of the block it came from; the shared block gets the
    header that says how the blocks are made. Returns the sections moved (none if the file has no such block)."""
    text = path.read_text() if path.exists() else ""
    if BEGIN not in text or END not in text:
        return []
    start, stop = text.index(BEGIN) + len(BEGIN), text.index(END)
    inner = text[start:stop]
    titled = {"smoke": SMOKE, **SECTIONS}
    found = sorted((inner.index(f"### {s.title}\n"), key) for key, s in titled.items() if f"### {s.title}\n" in inner)
    if not found:
        return []
    made = re.search(r"Generated by `([^`]*)` on (.*?), (\d{4}-\d{2}-\d{2})", inner)
    origin = f" on {made[2]}, {made[3]} (as part of `{made[1]}`)" if made else " (date not recorded)"
    blocks = []
    for (at, key), (until, _) in zip(found, [*found[1:], (len(inner), None)]):
        begin, end = markers(key)
        body = inner[at:until].strip()
        blocks.append(f"{begin}\nGenerated by `{_command(key)}`{origin}.\n\n{body}\n{end}")
    path.write_text(text[:start] + "\n" + HEADER + "\n" + END + "\n\n" + "\n\n".join(blocks) + text[stop + len(END) :])
    return [key for _, key in found]


def run_section(section: Section, runs_dir: Path, workers: int) -> tuple[list[Result], dict[str, float]]:
    """Measure the rows' step costs, train every cell (reusing finished runs), then the compute-matched rows the
    costs call for."""
    costs = step_costs(section, runs_dir)
    results = _run(section.runs(), runs_dir, workers)
    extra = matched_jobs(section, results, costs)
    return results + (_run(extra, runs_dir, workers) if extra else []), costs


HEADER = (
    "Each section below is its own generated block, rewritten by the command at its top: `odeformer-reproduce` "
    "rewrites them all, `odeformer-reproduce --sections <name> ...` only the sections named (the others keep what "
    "they hold). Each run is `odeformer-train` with the overrides in the section's config "
    "(`odeformer/app/reproduce.py`), "
    "trained in a single-thread worker process; finished runs are reused, after checking that their saved "
    "configuration is what their overrides compose to now, so a rerun only redraws the tables and figures; test "
    'metrics are taken at the best validation step. "step cost vs diffusion" is the time of a row\'s training step '
    "over diffusion's, measured side by side in one process with one thread, the models taking turns (median over 7 "
    "rounds and the columns; the runs' own wall times vary with the machine's load)."
)


def _write_section(args: argparse.Namespace, key: str, parts: list[str]) -> None:
    """Rewrite one section's block of RESULTS.md: the command that makes it, the machine and the date, its tables."""
    cpu = platform.processor() or platform.machine()
    header = (
        f"Generated by `{_command(key)}` on {os.cpu_count()} CPU cores ({cpu}), {time.strftime('%Y-%m-%d')}, "
        f"{args.workers} worker(s) in parallel.\n"
    )
    order = ["smoke", *SECTIONS]
    before = order[: order.index(key)][::-1]  # the nearest preceding section's block first, then the header's
    begin, end = markers(key)
    after = (*(markers(other)[1] for other in before), END)
    write_results(header + "\n" + "\n".join(parts), args.out / "RESULTS.md", begin, end, after)


def main(argv: list[str] | None = None) -> int:
    """The command: bad input, a damaged or refused checkpoint and missing data are one line and exit 2."""
    from ..data import DatasetNotFound
    from .checkpoints import CheckpointError, RunDirectoryError

    try:
        return _main(argv)
    except (ValueError, CheckpointError, RunDirectoryError, DatasetNotFound) as error:
        print(f"odeformer-reproduce: error: {' '.join(str(error).split())}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, Interrupted) as error:
        signum = error.signum if isinstance(error, Interrupted) else signal.SIGINT
        saved = not isinstance(error, Interrupted) or error.saved
        how = (
            "the running runs saved their checkpoints; the same command resumes them"
            if saved
            else "stopped again before the running runs saved: they resume from their last checkpoints"
        )
        print(f"odeformer-reproduce: interrupted by signal {int(signum)}; {how}.", file=sys.stderr)
        return 128 + int(signum)


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="odeformer-reproduce", description=__doc__.splitlines()[0])
    parser.add_argument("--sections", nargs="+", choices=list(SECTIONS), default=list(SECTIONS))
    parser.add_argument(
        "--runs", type=Path, default=None, help="where runs are written (default: <out>/runs, or runs/reproduce)"
    )
    parser.add_argument("--out", type=Path, default=None, help="folder of RESULTS.md and its figures (default: docs)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--smoke", action="store_true", help="one tiny configuration (for CI)")
    args = parser.parse_args(argv)
    if args.runs is None:
        args.runs = args.out / "runs" if args.out is not None else Path("runs") / "reproduce"
    if args.out is None:
        args.out = Path("docs")
    sections = {"smoke": SMOKE} if args.smoke else {name: SECTIONS[name] for name in args.sections}
    figures = args.out / "results"
    figures.mkdir(parents=True, exist_ok=True)
    started = time.time()
    split_combined_block(args.out / "RESULTS.md")  # a file from before sections had blocks of their own
    write_results(HEADER, args.out / "RESULTS.md")
    for key, section in sections.items():
        parts: list[str] = []
        results, costs = run_section(section, args.runs / key, args.workers)
        markdown, cells = table(section, results, costs)
        parts.append(f"### {section.title}\n\n{markdown}\n")
        if section.note:
            parts.append(section.note + "\n")
        if section.plot:
            accuracy_plot(section, cells, figures / f"{key}_accuracy.png")
            parts.append(f"![{key} accuracy against depth](results/{key}_accuracy.png)\n")
        if section.learned:
            learned, _ = learned_coefficients(section, results, args.runs / key, figures / f"{key}_coefficients.png")
            if learned:
                parts.append(f"{learned}\n")
                parts.append(f"![{key} learned coefficient per layer](results/{key}_coefficients.png)\n")
        for column in section.diagnose:
            folder = f"{key}_oversmoothing_{_slug(column)}" if column else f"{key}_oversmoothing"
            pngs = oversmoothing(section, column, results, args.runs / key, figures / folder)
            links = " ".join(f"[{p[:-4]}](results/{folder}/{p})" for p in pngs)
            where = f", {column}" if column else ""
            parts.append(f"Per layer{where} (seed 0, trained; numbers beside each PNG): {links}\n")
            if pngs:
                parts.append(f"![{key} token cosine per layer{where}](results/{folder}/{pngs[0]})\n")
        _write_section(args, key, parts)  # after every section, so a stopped sweep keeps what it finished
    print(f"wrote {args.out / 'RESULTS.md'} ({(time.time() - started) / 60:.1f} min)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
