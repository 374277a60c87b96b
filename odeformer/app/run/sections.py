"""The sections of the reproduction sweep: tables of runs, each cell an ``odeformer-train`` command line.

A section is a table: rows (a solver and its options), columns (a depth, a split, ...) and seeds, on top of fixed
overrides; every cell and seed is a job of the sweep engine (:mod:`odeformer.app.run.sweep`), named by its row,
column and seed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from .sweep import Job, Result, Sweep

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

    def runs(self) -> list[Job]:
        """The sweep's job for every cell and seed: its run's name, row, column, seed and overrides."""
        out = []
        for row, row_overrides in self.rows.items():
            for column, column_overrides in self.columns.items():
                for seed in self.seeds:
                    name = slug(f"{row}__{column}__seed={seed}" if column else f"{row}__seed={seed}")
                    overrides = [*self.fixed, *row_overrides, *column_overrides, f"train.seed={seed}"]
                    out.append(Job(name, row, column, seed, overrides))
        names = [job[0] for job in out]
        if len(set(names)) < len(names):
            twin = next(job for job in out if names.count(job[0]) > 1)[0]
            rows = sorted({job[1] for job in out if job[0] == twin})
            raise ValueError(
                f"section {self.title!r}: rows {rows} share the run folder {twin!r}; give them labels that "
                "differ in letters, digits or _.=+-"
            )
        return out


def slug(text: str) -> str:
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
    "splitting λ learned per channel (from Omelyan's 0.1932)": [
        "solver=full_wave",
        "solver.stepper=solvers.SymmetricSplitting",
    ],
    "omelyan2 (λ fixed at 0.1932)": ["solver=tableau", "solver.options.name=omelyan2"],
    "velocity_verlet (λ → 0)": ["solver=velocity_verlet"],
    "position_verlet (λ → ½)": ["solver=tableau", "solver.options.name=position_verlet"],
    "two-stage RK, c₂ = α learned per layer (from Ralston's 2/3)": ["solver=heun", "solver.stepper=solvers.TwoStageRK"],
    "ralston (α = 2/3)": ["solver=tableau", "solver.options.name=ralston"],
    "midpoint (α = ½)": ["solver=tableau", "solver.options.name=midpoint"],
    "heun (α = 1)": ["solver=heun"],
}
LEARNED_ORDER4 = {  # the fourth-order family beside its two ends (λ → ½ is Forest–Ruth, λ → 0 Yoshida's triple jump)
    "triple jump of the λ-splitting, λ learned per channel (from Omelyan's), order 4, 6 evaluations": [
        "solver=full_wave",
        "solver.stepper=solvers.TripleJump",
    ],
    "forest_ruth (λ → ½), 3 evaluations": ["solver=tableau", "solver.options.name=forest_ruth"],
    "yoshida4 (λ → 0), 3 evaluations": ["solver=tableau", "solver.options.name=yoshida4"],
}
LEARNED_TEXT = LEARNED  # the same rows on text: each family beside the fixed members it passes through
MEMBERS = {
    "λ": {"velocity Verlet": 0.0, "Omelyan": 0.1931833275037836, "position Verlet": 0.5},
    "α": {"midpoint": 0.5, "Ralston": 2 / 3, "Heun": 1.0},
}
MEMBERS_ORDER4 = {"λ": {"Yoshida-4": 0.0, "Omelyan inside": 0.1931833275037836, "Forest–Ruth": 0.5}}
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


def run_section(sweep: Sweep, section: Section, runs_dir: Path) -> tuple[list[Result], dict[str, float]]:
    """Measure the rows' step costs against diffusion's, train every cell (reusing finished runs), then the
    compute-matched rows the costs call for."""
    costs = sweep.step_costs(section.fixed, section.rows, section.columns, runs_dir)
    results = sweep.run(section.runs(), runs_dir)
    extra = matched_jobs(section, results, costs)
    return results + (sweep.run(extra, runs_dir) if extra else []), costs


def matched_jobs(section: Section, results: list[Result], costs: dict[str, float]) -> list[Job]:
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
            name = slug(f"diffusion_matched_{row}__{column}__steps={more}__seed={seed}")
            overrides = [*section.fixed, *section.rows["diffusion"], *section.columns[column]]
            jobs.append(Job(name, label, column, seed, [*overrides, f"train.seed={seed}", f"train.max_steps={more}"]))
    return jobs
